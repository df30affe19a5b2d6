// The runtime side of the browser host: Pyodide, the tinyweb wheel, the WebGPU device and the operations the page's
// `Tinyweb` object forwards (web/tinyweb.ts). It runs in a dedicated Web Worker (web/worker.ts, the default) or in the
// page itself (`loadTinyweb({worker: false})`); either way its operations take and return only plain data that
// postMessage can carry: JavaScript values, typed arrays, and WireRef markers for Python objects that stay here.
//
// Python objects that have no JavaScript form (a Tensor, a namespace, a model) live in one table on the Python side,
// keyed by a number; the page holds a PyRef (web/tinyweb.ts) with that number and releases it with destroy(). Python
// values are converted by `_export` below and JavaScript values by `_import`: the conversions the README documents.
import type { PyodideAPI, PyodideConfig } from "pyodide";
import type { TypedArray } from "pyodide/ffi";
import { clearWeightsCache, fetchWeights, type WeightsOptions, type WeightsProgress } from "./weights.js";

/** The runtime's files as absolute URLs (plain data: it can be posted to a worker). */
export interface Runtime { manifestURL: string; pyodideURL: string; wheelURL: string; wheelSha256: string; version: string }

export interface Progress { stage: "pyodide" | "tinyweb" | "device" | "ready"; message: string }
export interface DeviceReport {
  device: string | null;                   // Device.DEFAULT: the device tensors go to unless told otherwise
  reason: string | null;                   // why it is that device (Device.default_reason): WASM where WebGPU is missing or emulated
  error: string | null;                    // why there is no device at all (then device is null)
  devices: Record<string, string>;         // every known device -> "" when usable, else why not
  webgpu: { vendor?: string; architecture?: string; device?: string; description?: string; isFallbackAdapter?: boolean;
            features?: string[]; limits?: Record<string, number> } | null;
  jspi: boolean;                           // synchronous reads (.tolist(), .item()) work
  /** null when WebGPU works; else what to do about it in this browser (a flag, a version, a secure context) */
  advice: string | null;
  /** null when WebGPU works; else one line for the user: WebGPU is missing, the advice, and the device used instead */
  notice: string | null;
}

/** The marker that stands for a Python object kept on the runtime side (a PyRef in the page). */
export const REF_KEY = "__tinyweb_pyref__";
export interface WireRef { [REF_KEY]: number; type: string; shape?: number[]; dtype?: string; device?: string }
/** A Python exception, as plain data: its type's name and the traceback cut to the user's frames. */
export interface WireError { type: string; message: string }
export class TinywebLoadError extends Error { override name = "TinywebLoadError"; }

/** The operations of the runtime side; `Tinyweb` in web/tinyweb.ts is the same API over PyRefs. */
export interface Host {
  readonly report: DeviceReport;
  readonly pyodide: PyodideAPI;
  run(code: string, globals: number | null, result: "value" | "repr"): Promise<unknown>;
  newGlobals(): WireRef;
  get(ref: number, key: string | number): unknown;
  set(ref: number, key: string | number, value: unknown): void;
  release(refs: number[]): void;
  tensor(array: TypedArray, shape?: number[], device?: string): WireRef;
  toTypedArray(ref: number, dtype?: string): Promise<TypedArray>;
  loadWeights(url: string, options: Omit<WeightsOptions, "onProgress"> & { device?: string },
              onProgress?: (p: WeightsProgress) => void): Promise<WireRef>;
  clearWeightsCache(cache?: string): Promise<void>;
}
export interface HostHooks { progress(p: Progress): void; stdout(text: string): void; stderr(text: string): void }

/** A Python exception raised by a host operation: `type` is its Python type's name, `message` the traceback. */
export class PythonError extends Error {
  override name = "PythonError";
  constructor(readonly type: string, message: string) { super(message); }
}

// The Python half: run once after tinyweb is installed, in a namespace of its own, under the file name HOST_FILE (so
// that tracebacks can leave these frames out). Every entry point (`tw_*`) returns {ok: true, value} or {ok: false,
// error: {type, message}} as JavaScript objects: no PyProxy ever reaches JavaScript.
const HOST_FILE = "<tinyweb-host>";
const PY_HOST = `
import ast, functools, importlib.abc, inspect, js, json, linecache, sys, traceback, warnings
from pyodide.code import CodeRunner, should_quiet
from pyodide.ffi import JsProxy, jsnull, to_js
from tinyweb import Tensor, dtypes
from tinyweb.device import Buffer, Device
from tinyweb.helpers import prod
from tinyweb.nn.state import safe_load
from tinyweb.schedule import buffer_uop

REF_KEY = ${JSON.stringify(REF_KEY)}
_refs, _counter = {}, [0]   # id -> the Python object a PyRef stands for; the last id given out
_shared = {}                # runPython's namespace when no globals are given
_BROWSER_DEVICES = ("WEBGPU", "WASM", "PYTHON")   # the others need a native machine (a compiler, a driver)

class _NoNumpy(importlib.abc.MetaPathFinder):
  """Last on sys.meta_path: 'import numpy' (tinyweb's .numpy() does it) fails saying what to use instead."""
  def find_spec(self, name, path=None, target=None):
    if name == "numpy":
      raise ModuleNotFoundError("No module named 'numpy': tinyweb in the browser ships without numpy (there is no "
        "Pyodide build of it that can be self-hosted offline); read a tensor with t.tolist() or t.item() (or await "
        "t.tolist_async() / t.data_async()), or from JavaScript with tw.toTypedArray(t)", name="numpy")
    return None
sys.meta_path.append(_NoNumpy())

def _js(v): return to_js(v, dict_converter=js.Object.fromEntries)

def _ref(obj):
  _counter[0] += 1
  _refs[_counter[0]] = obj
  out = {REF_KEY: _counter[0], "type": type(obj).__name__}
  if isinstance(obj, Tensor): out.update(shape=[int(s) for s in obj.shape], dtype=obj.dtype.name, device=obj.device)
  return out

def _export(v, path=frozenset()):
  """A Python value as JavaScript data: None -> null, bool/int/float/str as themselves (an int past 2**53 -> BigInt),
  list/tuple -> Array, dict -> Object (str keys) or Map, bytes/bytearray -> Uint8Array, JavaScript objects as
  themselves, anything else (a Tensor, a module, a set) -> a reference to the object, kept here."""
  t = type(v)
  if v is None: return jsnull
  if t in (bool, int, float, str) or isinstance(v, JsProxy): return v
  if t in (bytes, bytearray):
    out = js.Uint8Array.new(len(v))
    out.assign(v)
    return out
  if id(v) in path or t not in (list, tuple, dict): return _ref(v)   # (a container that holds itself: a reference)
  inner = path | {id(v)}
  if t is not dict: return [_export(x, inner) for x in v]
  if all(type(k) is str for k in v) and REF_KEY not in v: return {k: _export(x, inner) for k, x in v.items()}
  return js.Map.new(_js([[_export(k, inner), _export(x, inner)] for k, x in v.items()]))

def _import(v):
  """JavaScript data as a Python value: null/undefined -> None, numbers -> int when integral else float, Array ->
  list, plain Object / Map -> dict, typed arrays -> memoryview (a copy), a PyRef -> its object."""
  if v is jsnull: return None
  if not isinstance(v, JsProxy): return v
  if js.Array.isArray(v): return [_import(x) for x in v]
  if js.ArrayBuffer.isView(v): return v.to_memoryview()
  if js.Object.prototype.toString.call(v) == "[object Map]": return {_import(k): _import(x) for k, x in v.entries()}
  if js.Object.hasOwn(v, REF_KEY): return _deref(js.Reflect.get(v, REF_KEY))
  return {k: _import(x) for k, x in js.Object.entries(v)}

def _deref(ref):
  try: return _refs[ref]
  except KeyError: raise ValueError(f"PyRef {ref} was destroyed (or belongs to another tinyweb instance)") from None

def _user_traceback(e):
  """The traceback as Python prints it, less the leading frames of this host and of Pyodide: it starts at the user's code."""
  tb = e.__traceback__
  while tb is not None and (tb.tb_frame.f_code.co_filename == ${JSON.stringify(HOST_FILE)} or
                            tb.tb_frame.f_globals.get("__name__", "").split(".")[0] in ("_pyodide", "pyodide")):
    tb = tb.tb_next
  return "".join(traceback.format_exception(type(e), e, tb)).rstrip("\\n")

def _entry(fn):
  """A host operation: JavaScript arguments in, {ok, value} or {ok: false, error} out (awaited when it is async)."""
  def reply(value): return _js({"ok": True, "value": value})
  def failure(e): return _js({"ok": False, "error": {"type": type(e).__name__, "message": _user_traceback(e)}})
  if inspect.iscoroutinefunction(fn):
    async def call(*args):
      try: return reply(await fn(*args))
      except Exception as e: return failure(e)
  else:
    def call(*args):
      try: return reply(fn(*args))
      except Exception as e: return failure(e)
  return functools.wraps(fn)(call)

_inputs = [0]
@_entry
async def tw_run(code, ns, mode):
  """Run code in the namespace ns (None: the shared one). mode "value": [the last expression's value as JavaScript
  data, how many references it holds]; "repr": its repr, or undefined when the code ends in no expression (or in ';')."""
  g = _shared if ns is None or ns is jsnull else _deref(ns)
  if type(g) is not dict: raise TypeError(f"runPython: globals must be a namespace from newGlobals(), not a {type(g).__name__}")
  _inputs[0] += 1
  filename = f"<python-input-{_inputs[0]}>"
  linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)   # (source lines in tracebacks)
  runner = CodeRunner(code, filename=filename, return_mode="last_expr", quiet_trailing_semicolon=True)
  body = runner.ast.body   # (before compile(), which turns the last expression into a statement)
  has_value = bool(body) and isinstance(body[-1], ast.Expr) and not should_quiet(code)
  runner.compile()
  try: value = await runner.run_async(g)
  finally:
    sys.stdout.flush()
    sys.stderr.flush()
  if mode == "repr": return repr(value) if has_value else None   # (None arrives as undefined, _export(None) as null)
  before = _counter[0]
  out = _export(value) if has_value else None
  return [out, _counter[0] - before]

@_entry
def tw_new_globals(): return _ref({})

@_entry
def tw_get(ref, key):
  before = _counter[0]
  out = _export(_deref(ref)[key])
  return [out, _counter[0] - before]

@_entry
def tw_set(ref, key, value): _deref(ref)[key] = _import(value)

def tw_release(refs):
  for r in refs: _refs.pop(r, None)

_ARRAY_DTYPES = {"Float32Array": dtypes.float32, "Float64Array": dtypes.float64, "Int32Array": dtypes.int32,
                 "Uint32Array": dtypes.uint32, "Int16Array": dtypes.int16, "Uint16Array": dtypes.uint16,
                 "Int8Array": dtypes.int8, "Uint8Array": dtypes.uint8, "Uint8ClampedArray": dtypes.uint8}
@_entry
def tw_tensor(array, shape, device):
  kind = array.constructor.name
  if kind not in _ARRAY_DTYPES: raise TypeError(f"tensor: a {kind} has no tinyweb dtype; valid: {list(_ARRAY_DTYPES)}")
  dt, dev, shape = _ARRAY_DTYPES[kind], Device.canonicalize(device), (array.length,) if shape is None else tuple(shape)
  copyin_js = getattr(Device[dev].allocator, "copyin_js", None)   # the browser's WEBGPU and WASM: straight from JS memory
  if copyin_js is None or array.byteLength % 4 or prod(shape) != array.length:   # (frombuffer explains a wrong shape)
    return _ref(Tensor.frombuffer(array.to_memoryview(), dt, shape, dev))
  buf = Buffer(dev, array.length, dt)   # (refuses dtypes the device lacks)
  copyin_js(buf.handle, array)
  return _ref(Tensor(buffer_uop(buf, shape)))

# (JS has no bool arrays: 0/1 bytes; float16 and bfloat16: their 16-bit patterns)
_TYPED_ARRAYS = {"f": "Float32Array", "d": "Float64Array", "i": "Int32Array", "I": "Uint32Array", "h": "Int16Array",
                 "H": "Uint16Array", "e": "Uint16Array", "b": "Int8Array", "B": "Uint8Array", "?": "Uint8Array",
                 "q": "BigInt64Array", "Q": "BigUint64Array"}
@_entry
async def tw_typed_array(ref, dtype):
  t = _deref(ref)
  if not isinstance(t, Tensor): raise TypeError(f"toTypedArray: expected a PyRef of a Tensor, got one of a {type(t).__name__}")
  if dtype is not None and t.dtype.name != dtype:
    raise TypeError(f"toTypedArray: the tensor is {t.dtype.name}, not {dtype} (call it with {t.dtype.name!r}, or cast in Python)")
  kind = getattr(js, _TYPED_ARRAYS[t.dtype.fmt])
  if t.numel() == 0: return kind.new(0)
  buf, _ = t._host_buffer()   # (realized, contiguous)
  copyout_js = getattr(Device[buf.device].allocator, "copyout_js", None)
  if copyout_js is not None: return kind.new(await copyout_js(buf.handle, buf.nbytes))   # the GPU's bytes, copied once
  out = kind.new(t.numel())
  js.Uint8Array.new(out.buffer).assign(buf.as_memoryview())   # the device's memory (a view where it allows), copied once
  return out

@_entry
def tw_load_weights(files, device):   # files: JS Uint8Arrays of whole safetensors files
  return _ref({k: v for f in files for k, v in safe_load(f.to_memoryview(), device).items()})

@_entry
async def tw_report():
  out = {"device": None, "reason": None, "error": None, "devices": {}, "webgpu": None, "jspi": False}
  from pyodide.ffi import can_run_sync
  from tinyweb.backends import webgpu_browser
  out["jspi"] = can_run_sync()
  try:
    adapter, device, limits, features, info = await webgpu_browser.open_device()
    out["webgpu"] = {**info, "features": features, "limits": limits}
  except Exception: pass   # the reason shows in devices["WEBGPU"]
  for n in Device.known():
    ok, why = Device.check(n)
    out["devices"][n] = why if ok or n in _BROWSER_DEVICES else "a native device: not available in a browser"
  try:
    with warnings.catch_warnings():   # (the host says why WebGPU is missing in this browser's terms: report.notice)
      warnings.simplefilter("ignore")
      out["device"], out["reason"] = Device.DEFAULT, Device.default_reason
  except RuntimeError as e: out["error"] = "no device is available: " + "; ".join(f"{n}: {w}" for n, w in out["devices"].items() if w)
  return json.dumps(out)
`;

/** What to do about a missing WebGPU, in this browser's terms (from its user agent). adapterMissing: navigator.gpu is
 * there but gave no adapter. */
export function webgpuAdvice(adapterMissing: boolean, ua: string = globalThis.navigator?.userAgent ?? "",
                             secure: boolean = globalThis.isSecureContext): string {
  if (!secure) return "WebGPU needs a secure context: serve the page from https:// or http://localhost";
  const chrome = /Edg\//.test(ua) ? "edge" : "chrome";
  if (/HeadlessChrome\//.test(ua)) return "headless Chromium has WebGPU only when launched with --enable-unsafe-webgpu";
  if (/Chrome\//.test(ua) && /Linux/.test(ua) && !/Android/.test(ua))
    return `on Linux WebGPU may still be off by default: enable ${chrome}://flags/#enable-unsafe-webgpu (and #enable-vulkan), then restart the browser`;
  if (adapterMissing)
    return "the browser has WebGPU but gave no adapter: its GPU may be blocklisted or hardware acceleration off " +
           (/Chrome\//.test(ua) ? `(${chrome}://gpu says which)` : "(see the browser's GPU settings)");
  if (/Chrome\//.test(ua)) {
    if (/Android/.test(ua)) return "Chrome on Android has WebGPU from version 121 on Android 12 and later, on supported GPUs";
    return `Chrome and Edge have WebGPU from version 113 on Windows, macOS and ChromeOS: update the browser, and check ${chrome}://gpu`;
  }
  if (/Firefox\//.test(ua))
    return "Firefox has WebGPU from version 141 on Windows; elsewhere set dom.webgpu.enabled to true in about:config (or use Firefox Nightly)";
  if (/Safari\//.test(ua)) return "Safari has WebGPU from Safari 26 (macOS, iOS and iPadOS 26); on earlier versions enable it under Develop > Feature Flags";
  return "use a browser with WebGPU: Chrome or Edge 113+, Firefox 141+ on Windows, or Safari 26+";
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

/** A host operation by name, with the arguments the page's Client sends (web/tinyweb.ts; in a worker, web/worker.ts). */
export type Method = "run" | "newGlobals" | "get" | "set" | "tensor" | "toTypedArray" | "loadWeights" | "clearWeightsCache";
export async function callHost(host: Host, method: Method, args: unknown[], onProgress?: (p: WeightsProgress) => void): Promise<unknown> {
  const a = args as any[];
  switch (method) {
    case "run": return host.run(a[0], a[1], a[2]);
    case "newGlobals": return host.newGlobals();
    case "get": return host.get(a[0], a[1]);
    case "set": return host.set(a[0], a[1], a[2]);
    case "tensor": return host.tensor(a[0], a[1], a[2]);
    case "toTypedArray": return host.toTypedArray(a[0], a[1]);
    case "loadWeights": return host.loadWeights(a[0], a[1], a[2] ? onProgress : undefined);
    case "clearWeightsCache": return host.clearWeightsCache(a[0]);
  }
  throw new TypeError(`tinyweb host: no operation ${JSON.stringify(method)}`);
}

type Reply = { ok: true; value: unknown } | { ok: false; error: WireError };
function unwrap(r: Reply): unknown {
  if (!r.ok) throw new PythonError(r.error.type, r.error.message);
  return r.value;
}

/** Boot Pyodide from `runtime`'s files in this thread (a worker or the page), install the wheel (checked against its
 * sha256), open the device. */
export async function startHost(runtime: Runtime, hooks: HostHooks): Promise<Host> {
  hooks.progress({ stage: "pyodide", message: "loading Pyodide" });
  // the wheel is fetched and checked while Pyodide boots (a wrong wheel fails at once)
  const [pyodide, wheel] = await Promise.all([bootPyodide(runtime.pyodideURL), fetchWheel(runtime)]);
  pyodide.setStdout({ batched: hooks.stdout });
  pyodide.setStderr({ batched: hooks.stderr });
  hooks.progress({ stage: "tinyweb", message: `installing ${decodeURIComponent(new URL(runtime.wheelURL).pathname.split("/").pop()!)}` });
  pyodide.unpackArchive(wheel, "wheel");

  hooks.progress({ stage: "device", message: "opening the device" });
  const ns = pyodide.globals.get("dict")();
  await pyodide.runPythonAsync(PY_HOST, { globals: ns, filename: HOST_FILE });
  const py = Object.fromEntries(["tw_run", "tw_new_globals", "tw_get", "tw_set", "tw_release", "tw_tensor",
                                 "tw_typed_array", "tw_load_weights", "tw_report"].map((n) => [n, ns.get(n)]));
  ns.destroy();
  // (awaited from JavaScript, so it runs on Pyodide's event loop, where run_sync can block: the report sees JSPI)
  const found = JSON.parse(unwrap(await py.tw_report()) as string);
  const webgpuOK = found.devices["WEBGPU"] === "";
  const advice = webgpuOK ? null : webgpuAdvice(!!globalThis.navigator?.gpu);
  const report: DeviceReport = { ...found, advice, notice: webgpuOK ? null :
    `WebGPU is not available (${advice}); ` + (found.device ? `running on ${found.device} instead` + (found.device === "PYTHON" ? ", which is much slower." : ".")
                                                             : "no device can run tinyweb here.") };
  if (report.notice) hooks.stderr(`tinyweb: ${report.notice}`);
  hooks.progress({ stage: "ready", message: `ready: device ${report.device ?? "none"}` });

  return {
    report, pyodide,
    async run(code, globals, result) { return unwrap(await py.tw_run(code, globals, result)); },
    newGlobals: () => unwrap(py.tw_new_globals()) as WireRef,
    get: (ref, key) => unwrap(py.tw_get(ref, key)),
    set(ref, key, value) { unwrap(py.tw_set(ref, key, value)); },
    release(refs) { py.tw_release(refs); },
    tensor: (array, shape, device) => unwrap(py.tw_tensor(array, shape, device)) as WireRef,
    async toTypedArray(ref, dtype) { return unwrap(await py.tw_typed_array(ref, dtype)) as TypedArray; },
    async loadWeights(url, options, onProgress) {
      const files = await fetchWeights(url, { ...options, onProgress });
      return unwrap(py.tw_load_weights(files.map((f) => f.bytes), options.device)) as WireRef;   // (undefined arrives as None)
    },
    clearWeightsCache,
  };
}
