// tinyweb in the browser, the `tinyweb` npm package: boots Pyodide from self-hosted files (never a CDN), installs the
// tinyweb wheel, opens the WebGPU device and offers a small API:
//   import { loadTinyweb } from "tinyweb";
//   const tw = await loadTinyweb({ baseURL: "/tinyweb/", onProgress });
//   await tw.runPython("from tinyweb import Tensor\n(Tensor([1.0, 2.0]) * 2).tolist()")   // -> [2, 4]
// `baseURL` is the folder holding the runtime files that `npm run build` writes to dist/runtime/ (in the package:
// node_modules/tinyweb/dist/runtime/, also `tinyweb/runtime/*` in its exports): tinyweb-manifest.json, wheels/ and
// pyodide/. The manifest names the wheel and its sha256, so this module needs nothing defined at build time.
//
// Where Python runs: by default in a dedicated Web Worker (web/worker.ts), so the page never waits for it; with
// `{worker: false}` in the calling thread. The API is the same either way (this file is the one place that speaks to
// either): every call is async, results come back as JavaScript values (conversions below), and Python objects that
// have no JavaScript form stay where Python runs, held by a `PyRef`. Calls run one at a time, in the order made.
// Python started by runPython may read tensors synchronously (.tolist(), .item()): it runs as a task of Pyodide's event
// loop, where JSPI's `run_sync` can block on the GPU. Without JSPI, use `await t.tolist_async()` / `await t.data_async()`.
//
// Conversions. Python -> JavaScript (runPython's result, PyRef.get): None -> null, bool -> boolean, int -> number
// (bigint beyond 2**53), float -> number, str -> string, list/tuple -> Array, dict -> Object when every key is a str,
// else Map, bytes/bytearray -> Uint8Array, JavaScript objects as themselves; anything else (a Tensor, a model, a
// set, a numpy-like scalar) -> a PyRef. Code that ends in no expression (or in ';') resolves to undefined.
// JavaScript -> Python (PyRef.set): null/undefined -> None, a number -> int when it is integral (2.0 too) else float,
// string, boolean, Array -> list, plain Object / Map -> dict, a typed array -> memoryview (a copy), a PyRef -> its object.
import type { PyodideAPI } from "pyodide";
import { callHost, PythonError, REF_KEY, startHost, TinywebLoadError, type DeviceReport, type Host, type Progress,
         type Runtime, type WireRef } from "./host.js";
import { pageURL, WeightsError, type WeightsOptions, type WeightsProgress } from "./weights.js";
import type { FromWorker, Method, SerializedError, ToWorker } from "./worker.js";

export { clearWeightsCache, fetchWeights, WeightsError } from "./weights.js";
export type { WeightsFile, WeightsOptions, WeightsProgress } from "./weights.js";
export { PythonError, TinywebLoadError, webgpuAdvice } from "./host.js";
export type { DeviceReport, Progress, Runtime } from "./host.js";

/** The runtime manifest's file name, in the baseURL folder. */
export const MANIFEST_FILE = "tinyweb-manifest.json";

/** What the build writes to tinyweb-manifest.json (paths relative to the manifest). */
export interface RuntimeManifest {
  format: 1;
  tinyweb: string;                          // the wheel's version
  wheel: { file: string; sha256: string };  // e.g. "wheels/tinyweb-0.1.0-py3-none-any.whl" and its hex digest
  pyodide: { dir: string; version: string };
}

export interface LoadOptions {
  baseURL?: string | URL;                  // the runtime folder (holds tinyweb-manifest.json); default: the page's folder
  /** true (the default): Python runs in a dedicated Web Worker; false: in the calling thread (it blocks it while it runs) */
  worker?: boolean;
  onProgress?: (p: Progress) => void;
  onStdout?: (text: string) => void;       // Python's print(), line by line; default console.log
  onStderr?: (text: string) => void;       // default console.error
}

/** tinyweb's dtypes by name, and the typed array each one's values come back as (toTypedArray). */
export interface TypedArrays {
  float32: Float32Array<ArrayBuffer>; float64: Float64Array<ArrayBuffer>; int32: Int32Array<ArrayBuffer>;
  uint32: Uint32Array<ArrayBuffer>; int16: Int16Array<ArrayBuffer>; uint16: Uint16Array<ArrayBuffer>;
  int8: Int8Array<ArrayBuffer>; uint8: Uint8Array<ArrayBuffer>;
  bool: Uint8Array<ArrayBuffer>;           // 0 / 1 bytes
  float16: Uint16Array<ArrayBuffer>;       // bit patterns
  bfloat16: Uint16Array<ArrayBuffer>;      // bit patterns
  int64: BigInt64Array<ArrayBuffer>; uint64: BigUint64Array<ArrayBuffer>;
}
export type DType = keyof TypedArrays;
/** The typed arrays `tensor()` takes, and the dtype of the Tensor each one gives. */
export type TensorSource = Float32Array | Float64Array | Int32Array | Uint32Array | Int16Array | Uint16Array | Int8Array |
                           Uint8Array | Uint8ClampedArray;
export type DTypeOf<A extends TensorSource> =
  A extends Float32Array ? "float32" : A extends Float64Array ? "float64" : A extends Int32Array ? "int32" :
  A extends Uint32Array ? "uint32" : A extends Int16Array ? "int16" : A extends Uint16Array ? "uint16" :
  A extends Int8Array ? "int8" : "uint8";

/** What Python values become in JavaScript (see the conversions at the top of this file). */
export type PyValue = null | boolean | number | bigint | string | Uint8Array | PyRef | PyValue[] |
                      { [key: string]: PyValue } | Map<PyValue, PyValue>;
/** What JavaScript values may be given to Python (PyRef.set). */
export type JsValue = null | undefined | boolean | number | string | ArrayBufferView | PyRef | JsValue[] |
                      { [key: string]: JsValue } | Map<JsValue, JsValue>;

interface Owner { call(method: Method, args: unknown[], transfer?: Transferable[]): Promise<unknown>; release(id: number): void }
const collected = new FinalizationRegistry<{ owner: Owner; id: number }>(({ owner, id }) => owner.release(id));

/** A Python object that stays where Python runs (a Tensor, a namespace, a model): `type` is its Python type's name;
 * a Tensor's also carries its shape, dtype and device (as they were when it was handed out). destroy() lets Python free
 * it (a PyRef that is garbage-collected is released too, later). */
export class PyRef {
  readonly type: string;
  readonly shape?: number[];
  readonly dtype?: DType;
  readonly device?: string;
  #owner: Owner;
  #id: number;
  #alive = true;
  constructor(owner: Owner, wire: WireRef) {
    this.#owner = owner;
    this.#id = wire[REF_KEY];
    this.type = wire.type;
    if (wire.shape) Object.assign(this, { shape: wire.shape, dtype: wire.dtype, device: wire.device });
    collected.register(this, { owner, id: this.#id }, this);
  }
  /** `obj[key]` in Python, converted (a Tensor or other object comes back as a new PyRef). */
  async get(key: string | number): Promise<PyValue> { return revive(this.#owner, await this.#owner.call("get", [this.idFor(this.#owner), key])); }
  /** `obj[key] = value` in Python. */
  async set(key: string | number, value: JsValue): Promise<void> {
    await this.#owner.call("set", [this.idFor(this.#owner), key, wireValue(this.#owner, value)]);
  }
  isTensor(): this is TensorRef { return this.type === "Tensor"; }
  destroy(): void {
    if (!this.#alive) return;
    this.#alive = false;
    collected.unregister(this);
    this.#owner.release(this.#id);
  }
  /** (this object's id on the Python side, for a call by `owner`) */
  idFor(owner: Owner): number {
    if (owner !== this.#owner) throw new TypeError(`a PyRef (${this.type}) of another tinyweb instance`);
    if (!this.#alive) throw new TypeError(`this PyRef (${this.type}) was destroyed`);
    return this.#id;
  }
  toString(): string { return `[PyRef ${this.type}${this.shape ? ` ${JSON.stringify(this.shape)} ${this.dtype} on ${this.device}` : ""}]`; }
}
export interface TensorRef<D extends DType = DType> extends PyRef { readonly type: "Tensor"; readonly shape: number[]; readonly dtype: D; readonly device: string }

export interface RunOptions {
  globals?: PyRef;                         // a namespace from newGlobals(); default: one shared namespace
  /** "value" (the default): the last expression's value, converted; "repr": its Python repr() as a string */
  result?: "value" | "repr";
}

export interface Tinyweb {
  /** where Python runs: "worker" (a dedicated Web Worker) or "main" (the thread that called loadTinyweb) */
  readonly mode: "worker" | "main";
  readonly report: DeviceReport;
  /** the Pyodide instance in "main" mode (for what this API does not cover); null in "worker" mode */
  readonly pyodide: PyodideAPI | null;
  /** Run Python in `globals`; resolves to its last expression (undefined when it ends in none, or in ';'). A Python
   * exception rejects with a PythonError whose message is the traceback, from the user's code on. */
  runPython(code: string, options?: RunOptions & { result?: "value" }): Promise<PyValue | undefined>;
  runPython(code: string, options: RunOptions & { result: "repr" }): Promise<string | undefined>;
  /** A fresh Python namespace for runPython. */
  newGlobals(): Promise<PyRef>;
  /** A tinyweb Tensor from a typed array (its dtype follows the array's type): on the browser's WebGPU written to the
   * GPU straight from the array (byte length a multiple of 4), elsewhere copied into Python's memory first. In "worker"
   * mode the array's memory moves to the worker (transferred: the array is empty afterwards) when it spans its whole
   * buffer; else it is copied once. */
  tensor<A extends TensorSource>(array: A, shape?: number[], device?: string): Promise<TensorRef<DTypeOf<A>>>;
  /** The values of a Tensor as a new typed array of its dtype (TypedArrays says which), copied once from the GPU's mapped
   * buffer (or the device's memory); in "worker" mode it is transferred to the page, not copied again. Works without
   * JSPI. With `dtype`, a PyRef whose dtype is not known here is checked to be of it (else a PythonError). */
  toTypedArray<D extends DType>(tensor: TensorRef<D>): Promise<TypedArrays[D]>;
  toTypedArray<D extends DType>(tensor: PyRef, dtype: D): Promise<TypedArrays[D]>;
  /** Fetch safetensors weights by URL (a .safetensors file or a sharded index .json): HTTP Range requests, sha256 from
   * the index, Cache API so a second visit downloads nothing; `tensors: [names]` fetches only those tensors' bytes.
   * Resolves to a PyRef of a Python dict {name: Tensor}. */
  loadWeights(url: string | URL, options?: WeightsOptions & { device?: string }): Promise<PyRef>;
  /** Forget the cached weights files (the Cache API entries loadWeights made). */
  clearWeightsCache(cache?: string): Promise<void>;
  /** Stop: "worker" mode ends the worker and frees all it held; in "main" mode Pyodide stays loaded in the page. Every
   * later call fails. */
  terminate(): void;
}

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

/** resolveRuntime(baseURL), then Python started in a Web Worker (startWorker) or, with {worker: false}, in this
 * thread (startTinyweb). */
export async function loadTinyweb(options: LoadOptions = {}): Promise<Tinyweb> {
  const runtime = await resolveRuntime(options.baseURL);
  return options.worker === false ? startTinyweb(runtime, options) : startWorker(runtime, options);
}

// each start-up stage leaves a performance mark in the page ("tinyweb:pyodide", ...): where the start-up time goes
function progressHook(options: LoadOptions): (p: Progress) => void {
  return (p) => { performance.mark(`tinyweb:${p.stage}`); options.onProgress?.(p); };
}

/** Boot Pyodide from `runtime`'s files in the calling thread ("main" mode; it needs no DOM, so a worker of your own can
 * call it too). */
export async function startTinyweb(runtime: Runtime, options: Omit<LoadOptions, "baseURL" | "worker"> = {}): Promise<Tinyweb> {
  const host = await startHost(runtime, { progress: progressHook(options), stdout: options.onStdout ?? ((s) => console.log(s)),
                                          stderr: options.onStderr ?? ((s) => console.error(s)) });
  return new Client("main", host.report, host.pyodide, new LocalChannel(host));
}

/** Start a dedicated module worker (web/worker.ts, built next to this module as worker.js) and the runtime in it. */
export async function startWorker(runtime: Runtime, options: Omit<LoadOptions, "baseURL" | "worker"> = {}): Promise<Tinyweb> {
  performance.mark("tinyweb:worker");   // (then "tinyweb:pyodide" when the worker has started and says so)
  // (this exact form: bundlers (Vite, webpack, Rollup plugins) find the worker script by it and bundle it too)
  const worker = new Worker(new URL("./worker.js", import.meta.url), { type: "module" });
  const channel = new WorkerChannel(worker, options);
  return new Client("worker", await channel.start(runtime, progressHook(options)), null, channel);
}

// ---------------------------------------------------------------------------------------------------------------
// the two channels to the host: a direct call in this thread, or messages to the worker

interface Channel {
  call(method: Method, args: unknown[], transfer: Transferable[], onProgress?: (p: WeightsProgress) => void): Promise<unknown>;
  release(refs: number[]): void;
  terminate(): void;
}

class LocalChannel implements Channel {
  #host: Host | null;
  constructor(host: Host) { this.#host = host; }
  call(method: Method, args: unknown[], _transfer: Transferable[], onProgress?: (p: WeightsProgress) => void) {
    if (!this.#host) return Promise.reject(new Error(`tinyweb: ${method} after terminate()`));
    return callHost(this.#host, method, args, onProgress);
  }
  release(refs: number[]) { this.#host?.release(refs); }
  terminate() { this.#host = null; }
}

class WorkerChannel implements Channel {
  #worker: Worker;
  #options: Omit<LoadOptions, "baseURL" | "worker">;
  #pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void; onProgress?: (p: WeightsProgress) => void }>();
  #next = 0;
  #dead: Error | null = null;
  constructor(worker: Worker, options: Omit<LoadOptions, "baseURL" | "worker">) { this.#worker = worker; this.#options = options; }

  start(runtime: Runtime, progress: (p: Progress) => void): Promise<DeviceReport> {
    return new Promise((resolve, reject) => {
      this.#worker.onerror = (e) => {   // the script did not load or threw outside a call
        e.preventDefault();
        const error = new TinywebLoadError(`tinyweb: the worker script (worker.js, next to the tinyweb module) failed: ${e.message || "it did not load"}`);
        this.#fail(error);
        reject(error);
      };
      this.#worker.onmessage = ({ data: m }: MessageEvent<FromWorker>) => {
        if (m.kind === "progress") progress(m.progress);
        else if (m.kind === "started") resolve(m.report);
        else if (m.kind === "failed") { reject(reviveError(m.error)); this.terminate(); }
        else if (m.kind === "output") (m.stream === "stdout" ? this.#options.onStdout ?? console.log : this.#options.onStderr ?? console.error)(m.text);
        else if (m.kind === "weights-progress") this.#pending.get(m.id)?.onProgress?.(m.progress);
        else {
          const p = this.#pending.get(m.id);
          this.#pending.delete(m.id);
          if (m.kind === "result") p?.resolve(m.value); else p?.reject(reviveError(m.error));
        }
      };
      this.#post({ kind: "start", runtime });
    });
  }
  call(method: Method, args: unknown[], transfer: Transferable[], onProgress?: (p: WeightsProgress) => void): Promise<unknown> {
    if (this.#dead) return Promise.reject(this.#dead);
    const id = ++this.#next;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject, onProgress });
      this.#post({ kind: "call", id, method, args }, transfer);
    });
  }
  release(refs: number[]) { if (!this.#dead) this.#post({ kind: "release", refs }); }
  terminate() { this.#worker.terminate(); this.#fail(new Error("tinyweb: the worker was terminated")); }
  #post(m: ToWorker, transfer: Transferable[] = []) { this.#worker.postMessage(m, transfer); }
  #fail(e: Error) {
    this.#dead ??= e;
    for (const p of this.#pending.values()) p.reject(e);
    this.#pending.clear();
  }
}

function reviveError(e: SerializedError): Error {
  if (e.name === "PythonError") return new PythonError(e.type ?? "Exception", e.message);
  const error = e.name === "TinywebLoadError" ? new TinywebLoadError(e.message) : e.name === "WeightsError" ? new WeightsError(e.message)
              : e.name === "TypeError" ? new TypeError(e.message) : new Error(e.message);
  if (error.name !== e.name) error.name = e.name;
  return error;
}

// ---------------------------------------------------------------------------------------------------------------
// the API, the same over either channel

class Client implements Tinyweb, Owner {
  #channel: Channel;
  #queue: Promise<unknown> = Promise.resolve();
  constructor(readonly mode: "worker" | "main", readonly report: DeviceReport, readonly pyodide: PyodideAPI | null, channel: Channel) {
    this.#channel = channel;
  }
  /** One call at a time, in order (Python runs one thing at a time; a worker must not start a second run meanwhile). */
  call(method: Method, args: unknown[], transfer: Transferable[] = [], onProgress?: (p: WeightsProgress) => void): Promise<unknown> {
    const next = this.#queue.then(() => this.#channel.call(method, args, transfer, onProgress));
    this.#queue = next.catch(() => {});
    return next;
  }
  release(id: number) { this.#queue = this.#queue.then(() => this.#channel.release([id])).catch(() => {}); }

  runPython(code: string, options?: RunOptions & { result?: "value" }): Promise<PyValue | undefined>;
  runPython(code: string, options: RunOptions & { result: "repr" }): Promise<string | undefined>;
  async runPython(code: string, options: RunOptions = {}): Promise<PyValue | string | undefined> {
    if (typeof code !== "string") throw new TypeError(`runPython: code must be a string, not ${typeof code}`);
    const result = options.result ?? "value";
    if (result !== "value" && result !== "repr") throw new TypeError(`runPython: result must be "value" or "repr", not ${JSON.stringify(result)}`);
    const out = await this.call("run", [code, options.globals ? this.#ref(options.globals, "runPython's globals") : null, result]);
    return result === "repr" ? out as string | undefined : revive(this, out);
  }
  async newGlobals(): Promise<PyRef> { return new PyRef(this, await this.call("newGlobals", []) as WireRef); }
  async tensor<A extends TensorSource>(array: A, shape?: number[], device?: string): Promise<TensorRef<DTypeOf<A>>> {
    if (!ArrayBuffer.isView(array) || array instanceof DataView)
      throw new TypeError(`tensor: expected a typed array (${"Float32Array, Int32Array, Uint8Array, ..."}), got ${Object.prototype.toString.call(array)}`);
    let transfer: Transferable[] = [];
    if (this.mode === "worker") {   // (the array's own memory moves when it is all the array's: else one copy moves)
      const whole = array.buffer instanceof ArrayBuffer && array.byteOffset === 0 && array.byteLength === array.buffer.byteLength;
      if (!whole) array = array.slice() as A;   // (a view of part of a buffer, or of a SharedArrayBuffer)
      transfer = [array.buffer as ArrayBuffer];
    }
    return new PyRef(this, await this.call("tensor", [array, shape, device], transfer) as WireRef) as TensorRef<DTypeOf<A>>;
  }
  toTypedArray<D extends DType>(tensor: TensorRef<D>): Promise<TypedArrays[D]>;
  toTypedArray<D extends DType>(tensor: PyRef, dtype: D): Promise<TypedArrays[D]>;
  async toTypedArray(tensor: PyRef, dtype?: DType): Promise<TypedArrays[DType]> {
    return await this.call("toTypedArray", [this.#ref(tensor, "toTypedArray's tensor"), dtype]) as Promise<TypedArrays[DType]>;
  }
  async loadWeights(url: string | URL, options: WeightsOptions & { device?: string } = {}): Promise<PyRef> {
    const { onProgress, ...rest } = options;   // (a function cannot be posted: progress comes back as messages)
    const abs = new URL(String(url), pageURL()).href;   // (relative to the page, also when the host is a worker)
    return new PyRef(this, await this.call("loadWeights", [abs, rest, !!onProgress], [], onProgress) as WireRef);
  }
  async clearWeightsCache(cache?: string): Promise<void> { await this.call("clearWeightsCache", [cache]); }
  terminate() { this.#channel.terminate(); }
  #ref(r: unknown, what: string): number {
    if (!(r instanceof PyRef)) throw new TypeError(`${what} must be a PyRef (from newGlobals(), tensor(), runPython()), not ${Object.prototype.toString.call(r)}`);
    return r.idFor(this);
  }
}

// a run/get result: [value, how many references it holds] (none: the value is as it came)
function revive(owner: Owner, wire: unknown): PyValue {
  const [value, refs] = wire as [unknown, number];
  if (!refs) return value as PyValue;
  const walk = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(walk);
    if (v instanceof Map) return new Map([...v].map(([k, x]) => [walk(k), walk(x)]));
    if (v && typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype) {
      if (REF_KEY in v) return new PyRef(owner, v as WireRef);
      return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x)]));
    }
    return v;
  };
  return walk(value) as PyValue;
}

// a value for Python: PyRefs become their markers (a Map is never read as one)
function wireValue(owner: Owner, v: JsValue): unknown {
  if (v instanceof PyRef) return { [REF_KEY]: v.idFor(owner) };
  if (Array.isArray(v)) return v.map((x) => wireValue(owner, x));
  if (v instanceof Map) return new Map([...v].map(([k, x]) => [wireValue(owner, k), wireValue(owner, x)]));
  if (v && typeof v === "object" && !ArrayBuffer.isView(v)) {
    if (REF_KEY in v) throw new TypeError(`an object with a "${REF_KEY}" key cannot be given to Python (use a Map)`);
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, wireValue(owner, x)]));
  }
  return v;
}
