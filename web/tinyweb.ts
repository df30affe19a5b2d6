// tinyweb in the browser: boots Pyodide from the site's own files (dist/pyodide/, copied there by `npm run build`;
// never a CDN), installs the tinyweb wheel built from this repository, opens the WebGPU device and offers a small API:
//   const tw = await loadTinyweb({ baseURL, onProgress });
//   await tw.runPython("from tinyweb import Tensor; (Tensor([1.0, 2.0]) * 2).tolist()")   // -> [2, 4]
// Python started by runPython may read tensors synchronously (.tolist(), .item()): it runs through runPythonAsync, so
// Pyodide's JSPI `run_sync` can block on the GPU. Without JSPI, use `await t.tolist_async()` / `await t.data_async()`.
import type { PyodideAPI, PyodideConfig } from "pyodide";
import type { PyProxy, TypedArray } from "pyodide/ffi";
import { clearWeightsCache, fetchWeights, type WeightsOptions } from "./weights";

// set by vite.config.ts: the wheel's file name in dist/wheels/ and its sha256 (also used to bust HTTP caches)
declare const __TINYWEB_WHEEL__: { file: string; sha256: string };

export interface Progress { stage: "pyodide" | "tinyweb" | "device" | "ready"; message: string }
export interface LoadOptions {
  baseURL?: string | URL;                  // where the built site lives (holds pyodide/ and wheels/); default: the page's folder
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

export async function loadTinyweb(options: LoadOptions = {}): Promise<Tinyweb> {
  const base = new URL(String(options.baseURL ?? "./"), document.baseURI);
  // each stage also leaves a performance mark ("tinyweb:pyodide", ...): where the start-up time goes
  const progress = (p: Progress) => { performance.mark(`tinyweb:${p.stage}`); options.onProgress?.(p); };
  progress({ stage: "pyodide", message: "loading Pyodide" });
  const pyodideURL = new URL("pyodide/", base).href;
  const mod = await import(/* @vite-ignore */ pyodideURL + "pyodide.mjs");
  const pyodide: PyodideAPI = await mod.loadPyodide({ indexURL: pyodideURL } satisfies PyodideConfig);
  pyodide.setStdout({ batched: options.onStdout ?? ((s) => console.log(s)) });
  pyodide.setStderr({ batched: options.onStderr ?? ((s) => console.error(s)) });

  progress({ stage: "tinyweb", message: `installing ${__TINYWEB_WHEEL__.file}` });
  const wheelURL = new URL(`wheels/${__TINYWEB_WHEEL__.file}?v=${__TINYWEB_WHEEL__.sha256.slice(0, 16)}`, base);
  const response = await fetch(wheelURL);
  if (!response.ok) throw new Error(`tinyweb: fetching the wheel ${wheelURL} failed: HTTP ${response.status}`);
  pyodide.unpackArchive(await response.arrayBuffer(), "wheel");

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
