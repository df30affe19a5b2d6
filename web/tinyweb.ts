// tinyweb in the browser, the `tinyweb` npm package: boots Pyodide from self-hosted files (never a CDN), installs the
// tinyweb wheel, opens the WebGPU device and offers a small API:
//   import { loadTinyweb } from "tinyweb";
//   const tw = await loadTinyweb({ baseURL: "/tinyweb/", onProgress });
//   await tw.runPython("from tinyweb import Tensor; (Tensor([1.0, 2.0]) * 2).tolist()")   // -> [2, 4]
// `baseURL` is the folder holding the runtime files that `npm run build` writes to dist/runtime/ (in the package:
// node_modules/tinyweb/dist/runtime/, also `tinyweb/runtime/*` in its exports): tinyweb-manifest.json, wheels/ and
// pyodide/. The manifest names the wheel and its sha256, so this module needs nothing defined at build time.
// Python started by runPython may read tensors synchronously (.tolist(), .item()): it runs through runPythonAsync, so
// Pyodide's JSPI `run_sync` can block on the GPU. Without JSPI, use `await t.tolist_async()` / `await t.data_async()`.
//
// Two steps: `resolveRuntime(baseURL)` reads the manifest into plain URLs (a `Runtime`, data only), and `startTinyweb
// (runtime, options)` boots Pyodide in the calling thread from them; `loadTinyweb` is both. The second step touches
// no DOM (it runs as well in a worker), so a host in a Web Worker can resolve in the page and start in the worker.
import type { PyodideAPI, PyodideConfig } from "pyodide";
import type { PyProxy, TypedArray } from "pyodide/ffi";
import { clearWeightsCache, fetchWeights, pageURL, type WeightsOptions } from "./weights.js";

export { clearWeightsCache, fetchWeights, WeightsError } from "./weights.js";
export type { WeightsFile, WeightsOptions, WeightsProgress } from "./weights.js";

/** The runtime manifest's file name, in the baseURL folder. */
export const MANIFEST_FILE = "tinyweb-manifest.json";

/** What the build writes to tinyweb-manifest.json (paths relative to the manifest). */
export interface RuntimeManifest {
  format: 1;
  tinyweb: string;                          // the wheel's version
  wheel: { file: string; sha256: string };  // e.g. "wheels/tinyweb-0.1.0-py3-none-any.whl" and its hex digest
  pyodide: { dir: string; version: string };
}
/** The runtime's files as absolute URLs (plain data: it can be posted to a worker). */
export interface Runtime { manifestURL: string; pyodideURL: string; wheelURL: string; wheelSha256: string; version: string }

export class TinywebLoadError extends Error { override name = "TinywebLoadError"; }

export interface Progress { stage: "pyodide" | "tinyweb" | "device" | "ready"; message: string }
export interface LoadOptions {
  baseURL?: string | URL;                  // the runtime folder (holds tinyweb-manifest.json); default: the page's folder
  onProgress?: (p: Progress) => void;
  onStdout?: (text: string) => void;       // Python's print(); default console.log
  onStderr?: (text: string) => void;
}
export interface DeviceReport {
  device: string | null;                   // Device.DEFAULT: the device tensors go to unless told otherwise
  error: string | null;                    // why there is no device at all (then device is null)
  devices: Record<string, string>;         // every known device -> "" when usable, else why not
  webgpu: { vendor?: string; architecture?: string; device?: string; description?: string; isFallbackAdapter?: boolean;
            features?: string[]; limits?: Record<string, number> } | null;
  jspi: boolean;                           // synchronous reads (.tolist()) work
}
export interface Tinyweb {
  pyodide: PyodideAPI;
  report: DeviceReport;
  /** Run Python (async, so JSPI works) in `globals` (default: one shared namespace); resolves to the last expression. */
  runPython(code: string, options?: { globals?: PyProxy }): Promise<any>;
  /** A tinyweb Tensor from a typed array: on the browser's WebGPU written to the GPU straight from the array (byte
   * length a multiple of 4), elsewhere copied into Python's memory first. */
  tensor(array: TypedArray, shape?: number[], device?: string): PyProxy;
  /** The values of a Tensor as a new typed array of its dtype (awaits the device, works without JSPI), copied once: from
   * the GPU's mapped buffer on WebGPU, from the device's memory elsewhere. bool: 0/1 bytes; float16/bfloat16: bit patterns. */
  toTypedArray(tensor: PyProxy): Promise<TypedArray>;
  /** Fetch safetensors weights by URL (a .safetensors file or a sharded index .json): HTTP Range requests, sha256 from
   * the index, Cache API so a second visit downloads nothing; `tensors: [names]` fetches only those tensors' bytes.
   * Returns {name: Tensor} as a Python dict. */
  loadWeights(url: string, options?: WeightsOptions & { device?: string }): Promise<PyProxy>;
  /** Forget the cached weights files (the Cache API entries loadWeights made). */
  clearWeightsCache(cache?: string): Promise<void>;
  /** A fresh Python namespace for runPython. */
  newGlobals(): PyProxy;
}

// the Python half of the helpers: run once after tinyweb is installed
const PY_HELPERS = `
import js, json, sys
from tinyweb import Tensor, dtypes
from tinyweb.device import Buffer, Device
from tinyweb.helpers import prod
from tinyweb.nn.state import safe_load
from tinyweb.schedule import buffer_uop

async def tinyweb_report():
  out = {"device": None, "error": None, "devices": {}, "webgpu": None, "jspi": False}
  if sys.platform == "emscripten":
    from pyodide.ffi import can_run_sync
    from tinyweb.backends import webgpu_browser
    out["jspi"] = can_run_sync()
    try:
      adapter, device, limits, features, info = await webgpu_browser.open_device()
      out["webgpu"] = {**info, "features": features, "limits": limits}
    except Exception: pass   # the reason shows in devices["WEBGPU"]
  out["devices"] = {n: Device.check(n)[1] for n in Device.known()}
  try: out["device"] = Device.DEFAULT
  except RuntimeError as e: out["error"] = str(e)
  return json.dumps(out)

_ARRAY_DTYPES = {"Float32Array": dtypes.float32, "Float64Array": dtypes.float64, "Int32Array": dtypes.int32,
                 "Uint32Array": dtypes.uint32, "Int16Array": dtypes.int16, "Uint16Array": dtypes.uint16,
                 "Int8Array": dtypes.int8, "Uint8Array": dtypes.uint8, "Uint8ClampedArray": dtypes.uint8}
def tinyweb_tensor(array, shape, device):
  kind = array.constructor.name
  if kind not in _ARRAY_DTYPES: raise TypeError(f"tensor: a {kind} has no tinyweb dtype; valid: {list(_ARRAY_DTYPES)}")
  dt, dev, shape = _ARRAY_DTYPES[kind], Device.canonicalize(device), (array.length,) if shape is None else tuple(shape)
  copyin_js = getattr(Device[dev].allocator, "copyin_js", None)   # the browser's WEBGPU: straight from JS memory
  if copyin_js is None or array.byteLength % 4 or prod(shape) != array.length:   # (frombuffer explains a wrong shape)
    return Tensor.frombuffer(array.to_memoryview(), dt, shape, dev)
  buf = Buffer(dev, array.length, dt)   # (refuses dtypes the device lacks)
  copyin_js(buf.handle, array)
  return Tensor(buffer_uop(buf, shape))

# (JS has no bool arrays: 0/1 bytes; float16 and bfloat16: their 16-bit patterns)
_TYPED_ARRAYS = {"f": "Float32Array", "d": "Float64Array", "i": "Int32Array", "I": "Uint32Array", "h": "Int16Array",
                 "H": "Uint16Array", "e": "Uint16Array", "b": "Int8Array", "B": "Uint8Array", "?": "Uint8Array",
                 "q": "BigInt64Array", "Q": "BigUint64Array"}
async def tinyweb_typed_array(t):
  kind = getattr(js, _TYPED_ARRAYS[t.dtype.fmt])
  if t.numel() == 0: return kind.new(0)
  buf, _ = t._host_buffer()   # (realized, contiguous)
  copyout_js = getattr(Device[buf.device].allocator, "copyout_js", None)
  if copyout_js is not None: return kind.new(await copyout_js(buf.handle, buf.nbytes))   # the GPU's bytes, copied once
  out = kind.new(t.numel())
  js.Uint8Array.new(out.buffer).assign(buf.as_memoryview())   # the device's memory (a view where it allows), copied once
  return out

def tinyweb_load_weights(files, device):   # files: JS Uint8Arrays of whole safetensors files
  return {k: v for f in files for k, v in safe_load(f.to_memoryview(), device).items()}
`;

/** Read `${baseURL}tinyweb-manifest.json` and check it: where Pyodide and the wheel are. */
export async function resolveRuntime(baseURL: string | URL = "./"): Promise<Runtime> {
  const manifestURL = new URL(MANIFEST_FILE, new URL(String(baseURL), pageURL())).href;
  const hint = `baseURL must be the folder holding ${MANIFEST_FILE}, wheels/ and pyodide/ (dist/runtime/ of the tinyweb package)`;
  let response: Response;
  try { response = await fetch(manifestURL, { cache: "no-cache" }); }
  catch (e) { throw new TinywebLoadError(`tinyweb: fetching the runtime manifest ${manifestURL} failed: ${(e as Error).message}; ${hint}`); }
  if (!response.ok) throw new TinywebLoadError(`tinyweb: no runtime manifest at ${manifestURL} (HTTP ${response.status}); ${hint}`);
  const text = await response.text();
  let m: RuntimeManifest;
  try { m = JSON.parse(text); }
  catch { throw new TinywebLoadError(`tinyweb: ${manifestURL} is not JSON (it starts ${JSON.stringify(text.slice(0, 40))}); ${hint}`); }
  const bad = (field: string, value: unknown, want: string) => new TinywebLoadError(
    `tinyweb: ${manifestURL}: "${field}" is ${JSON.stringify(value)}, expected ${want} (npm run build writes the manifest)`);
  if (m?.format !== 1) throw bad("format", m?.format, "1 (the manifest format this module reads)");
  if (typeof m.wheel?.file !== "string" || !m.wheel.file.endsWith(".whl")) throw bad("wheel.file", m.wheel?.file, "the wheel's path, ending in .whl");
  if (typeof m.wheel.sha256 !== "string" || !/^[0-9a-f]{64}$/.test(m.wheel.sha256)) throw bad("wheel.sha256", m.wheel.sha256, "64 hex digits");
  if (typeof m.pyodide?.dir !== "string" || !m.pyodide.dir.endsWith("/")) throw bad("pyodide.dir", m.pyodide?.dir, "a folder path ending in /");
  const wheel = new URL(m.wheel.file, manifestURL);
  wheel.searchParams.set("v", m.wheel.sha256.slice(0, 16));   // (a new wheel under the same name gets past HTTP caches)
  return { manifestURL, pyodideURL: new URL(m.pyodide.dir, manifestURL).href, wheelURL: wheel.href,
           wheelSha256: m.wheel.sha256, version: String(m.tinyweb) };
}

export async function loadTinyweb(options: LoadOptions = {}): Promise<Tinyweb> {
  return startTinyweb(await resolveRuntime(options.baseURL), options);
}

async function bootPyodide(pyodideURL: string): Promise<PyodideAPI> {
  let mod: { loadPyodide(config: PyodideConfig): Promise<PyodideAPI> };
  try { mod = await import(/* @vite-ignore */ /* webpackIgnore: true */ pyodideURL + "pyodide.mjs"); }
  catch (e) { throw new TinywebLoadError(`tinyweb: loading ${pyodideURL}pyodide.mjs failed: ${(e as Error).message}`); }
  return mod.loadPyodide({ indexURL: pyodideURL });
}

async function fetchWheel(runtime: Runtime): Promise<ArrayBuffer> {
  let response: Response;
  try { response = await fetch(runtime.wheelURL); }
  catch (e) { throw new TinywebLoadError(`tinyweb: fetching the wheel ${runtime.wheelURL} failed: ${(e as Error).message}`); }
  if (!response.ok) throw new TinywebLoadError(`tinyweb: fetching the wheel ${runtime.wheelURL} failed: HTTP ${response.status}`);
  const wheel = await response.arrayBuffer();
  const digest = [...new Uint8Array(await crypto.subtle.digest("SHA-256", wheel))].map((b) => b.toString(16).padStart(2, "0")).join("");
  if (digest !== runtime.wheelSha256)
    throw new TinywebLoadError(`tinyweb: the wheel ${runtime.wheelURL} (${wheel.byteLength} bytes) has sha256 ${digest}, ` +
                               `${runtime.manifestURL} says ${runtime.wheelSha256}: the runtime folder mixes two builds`);
  return wheel;
}

/** Boot Pyodide from `runtime`'s files in this thread, install the wheel (checked against its sha256), open the device. */
export async function startTinyweb(runtime: Runtime, options: Omit<LoadOptions, "baseURL"> = {}): Promise<Tinyweb> {
  // each stage also leaves a performance mark ("tinyweb:pyodide", ...): where the start-up time goes
  const progress = (p: Progress) => { performance.mark(`tinyweb:${p.stage}`); options.onProgress?.(p); };
  progress({ stage: "pyodide", message: "loading Pyodide" });
  // the wheel is fetched and checked while Pyodide boots (a wrong wheel fails at once)
  const [pyodide, wheel] = await Promise.all([bootPyodide(runtime.pyodideURL), fetchWheel(runtime)]);
  pyodide.setStdout({ batched: options.onStdout ?? ((s) => console.log(s)) });
  pyodide.setStderr({ batched: options.onStderr ?? ((s) => console.error(s)) });
  progress({ stage: "tinyweb", message: `installing ${decodeURIComponent(new URL(runtime.wheelURL).pathname.split("/").pop()!)}` });
  pyodide.unpackArchive(wheel, "wheel");

  progress({ stage: "device", message: "opening the WebGPU device" });
  const helpers = pyodide.globals.get("dict")();
  await pyodide.runPythonAsync(PY_HELPERS, { globals: helpers });
  // (through runPythonAsync: its stack may block with run_sync, so the report sees whether JSPI works)
  const report: DeviceReport = JSON.parse(await pyodide.runPythonAsync("await tinyweb_report()", { globals: helpers }));
  const [toTensor, typedArray, loadState] = ["tinyweb_tensor", "tinyweb_typed_array", "tinyweb_load_weights"].map((n) => helpers.get(n));
  const shared = pyodide.globals.get("dict")();
  progress({ stage: "ready", message: `ready: device ${report.device ?? "none"}` });

  return {
    pyodide, report, clearWeightsCache,
    runPython: (code, opts = {}) => pyodide.runPythonAsync(code, { globals: opts.globals ?? shared }),
    newGlobals: () => pyodide.globals.get("dict")(),
    tensor: (array, shape, device) => toTensor(array, shape, device),
    toTypedArray: (tensor) => typedArray(tensor),
    async loadWeights(url, opts = {}) {
      const files = await fetchWeights(url, opts);
      return loadState(files.map((f) => f.bytes), opts.device);   // (undefined arrives as None, null would not)
    },
  };
}
