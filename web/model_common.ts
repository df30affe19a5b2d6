// What the runtimes of exported models share (web/model.ts runs WEBGPU exports, web/model_wasm.ts WASM ones; model.ts's
// loadModel picks by the manifest's target): the manifest's types and checks, the weights' shards, the loading's
// progress and timings, and the `Model` base class: the inputs checked and the variant picked, calls queued one at a time.
import { fetchIndexedWeights, pageURL, type WeightsFile, type WeightsProgress } from "./weights.js";

export const MODEL_FORMAT = "tinyweb-export";
export const MODEL_VERSION = 2;

/** What manifest.json holds (tinyweb/export/__init__.py writes it; its docstring describes each field). */
export type ModelManifest = WebGPUManifest | WasmManifest;
interface ManifestBase {
  format: string;
  version: number;
  variants: ModelVariant[];   // one per batch size (or other shapes) exported
  weights: { index?: string; shards: { file: string; bytes: number; sha256: string; tensors: string[] }[] };
}
export interface WebGPUManifest extends ManifestBase {
  target: "WEBGPU";
  features: string[];
  limits: Record<string, number>;
  kernels: { file: string; entryPoint: string; workgroupSize: [number, number, number]; bindings: number }[];
}
export interface WasmManifest extends ManifestBase {
  target: "WASM";
  memory: { bytes: number };   // the linear memory that holds every buffer (each at its `offset`)
  kernels: { file: string; entryPoint: string; params: number; imports: string[] }[];
}
/** One capture of the model (a batch size): its own buffer ids; weights and state are shared by tensor name. */
export interface ModelVariant {
  inputs: TensorSpec[];
  outputs: TensorSpec[];
  buffers: BufferSpec[];
  steps: ({ kernel: number; buffers: number[]; workgroups?: [number, number, number] } |
          { copy: { src: number; dst: number; bytes: number } })[];
}
export interface BufferSpec {
  id: number; kind: "input" | "output" | "weight" | "state" | "scratch"; bytes: number; dtype?: string; tensor?: string;
  stored?: "float16";   // a float32 weight whose shard holds it as float16 (widened to float32 on load)
  offset?: number;      // WASM: its byte address in the memory
}
export interface TensorSpec { name: string; buffer: number; shape: number[]; dtype: string }

/** Loading progress: the weights' bytes (from the network or the Cache API) and the kernels compiled so far. */
export interface ModelProgress { weightsLoaded: number; weightsTotal: number; kernelsReady: number; kernelsTotal: number }
export interface LoadModelOptions {
  onProgress?: (p: ModelProgress) => void;
  /** WEBGPU: a GPUDevice to use (it must have the manifest's limits and features); default: one requested for this model */
  device?: GPUDevice;
  powerPreference?: GPUPowerPreference;
  cache?: string | false;    // the Cache API name for the weights (web/weights.ts); false: always download
}
/** Seconds each loading stage took (they overlap: the device, kernels and weights load at once; WASM's device is its
 * memory). */
export interface LoadTimings { manifest: number; device: number; kernels: number; weights: number; total: number }
/** One step's time alone (Model.profile). */
export interface StepTime { step: number; name: string; ms: number }

export type TypedArray = Float32Array | Int32Array | Uint32Array | Int16Array | Uint16Array | Int8Array | Uint8Array;
export type ModelInputs = Record<string, TypedArray | ArrayLike<number>>;

export class ModelError extends Error { override name = "ModelError"; }

// dtype -> the typed array its values come in (float16 / bfloat16: their 16-bit patterns)
export const ARRAYS: Record<string, { new (n: number): TypedArray; BYTES_PER_ELEMENT: number }> = {
  float32: Float32Array, int32: Int32Array, uint32: Uint32Array, int16: Int16Array, uint16: Uint16Array, int8: Int8Array,
  uint8: Uint8Array, bool: Uint8Array, float16: Uint16Array, bfloat16: Uint16Array,
};

export const elements = (shape: number[]) => shape.reduce((a, b) => a * b, 1);
// weights and state: their bytes come from the shards, one buffer per tensor for all the variants
export const fromShards = (b: BufferSpec) => b.kind === "weight" || b.kind === "state";

export function checkManifest(url: string, m: ModelManifest) {
  if (m?.format !== MODEL_FORMAT) throw new ModelError(`${url}: not a tinyweb export (format ${JSON.stringify(m?.format)}, expected "${MODEL_FORMAT}")`);
  if (m.version !== MODEL_VERSION) throw new ModelError(`${url}: export format version ${m.version}; this runtime reads version ${MODEL_VERSION}`);
  if (m.target !== "WEBGPU" && m.target !== "WASM")
    throw new ModelError(`${url}: exported for ${(m as { target: unknown }).target}; this runtime runs WEBGPU and WASM exports`);
  if (!m.variants?.length) throw new ModelError(`${url}: the manifest has no variants`);
  const wasm = m.target === "WASM";
  if (wasm && !(m.memory?.bytes > 0)) throw new ModelError(`${url}: a WASM export without its memory's size`);
  for (const v of m.variants) {
    const n = v.buffers.length, ok = (id: number) => Number.isInteger(id) && id >= 0 && id < n;
    v.buffers.forEach((b, i) => {
      if (b.id !== i) throw new ModelError(`${url}: buffer ${i} has id ${b.id}`);
      if (fromShards(b) && !b.tensor) throw new ModelError(`${url}: ${b.kind} buffer ${i} names no tensor`);
      if (wasm && !(Number.isInteger(b.offset) && b.offset! >= 0 && b.offset! + b.bytes <= m.memory.bytes))
        throw new ModelError(`${url}: buffer ${i} (${b.bytes} bytes at ${b.offset}) is not within the memory's ${m.memory.bytes} bytes`);
    });
    for (const s of v.steps) {
      const ids = "copy" in s ? [s.copy.src, s.copy.dst] : s.buffers;
      if (!ids.every(ok) || ("kernel" in s && !(s.kernel >= 0 && s.kernel < m.kernels.length)))
        throw new ModelError(`${url}: a step refers to a buffer or kernel that the manifest does not have: ${JSON.stringify(s)}`);
    }
    for (const io of [...v.inputs, ...v.outputs])
      if (!ok(io.buffer) || !(io.dtype in ARRAYS)) throw new ModelError(`${url}: bad input/output ${JSON.stringify(io)}`);
    if (v.inputs.map((i) => i.name).join() !== m.variants[0].inputs.map((i) => i.name).join() ||
        v.outputs.map((o) => o.name).join() !== m.variants[0].outputs.map((o) => o.name).join())
      throw new ModelError(`${url}: the variants' inputs or outputs differ in names`);
  }
}

/** An export's manifest.json (`url`: it, or the export's folder), fetched and checked, with its absolute URL. */
export async function fetchManifest(url: string | URL): Promise<{ manifestURL: URL; manifest: ModelManifest }> {
  let manifestURL = new URL(url, pageURL());
  if (!manifestURL.pathname.endsWith(".json")) manifestURL = new URL("manifest.json", manifestURL.href.replace(/\/?$/, "/"));
  const r = await fetch(manifestURL);
  if (!r.ok) throw new ModelError(`${manifestURL}: HTTP ${r.status} ${r.statusText}`);
  const manifest: ModelManifest = await r.json().catch((e: Error) => { throw new ModelError(`${manifestURL}: not JSON (${e.message})`); });
  checkManifest(manifestURL.href, manifest);
  return { manifestURL, manifest };
}

/** What loadModel hands a target's loader: the manifest, the kernels' files and the weights' shards being fetched, and
 * the progress and timings to fill in. */
export interface Loading<M extends ModelManifest> {
  manifest: M;
  options: LoadModelOptions;
  kernelFiles: Promise<Response>[];   // each kernel's file, fetched (status checked)
  weights: Promise<WeightsFile[]>;
  kernelReady: () => void;            // one more kernel compiled (reported as progress)
  timings: LoadTimings;
  since: () => number;                // seconds since loadModel began
}

// every shard, checked against the manifest's sha256 (through web/weights.ts: the Cache API keyed by the digest)
export async function fetchShards(manifestURL: string, m: ModelManifest, options: LoadModelOptions,
                                  onProgress: (p: WeightsProgress) => void): Promise<WeightsFile[]> {
  if (!m.weights.shards.length) return [];
  const weight_map: Record<string, string> = {}, sha256: Record<string, string> = {};
  for (const s of m.weights.shards) {
    sha256[s.file] = s.sha256;
    for (const t of s.tensors) weight_map[t] = s.file;
  }
  return fetchIndexedWeights(manifestURL, { weight_map, sha256 }, { onProgress, cache: options.cache });
}

/** The weights and state the variants read, each tensor once (from whichever variant names it first), with its bytes
 * from the shards, checked against its entry. */
export function shardTensors(m: ModelManifest, files: WeightsFile[]): Map<string, { spec: BufferSpec; bytes: Uint8Array<ArrayBuffer> }> {
  const tensors = new Map<string, Uint8Array<ArrayBuffer>>();
  for (const f of files) for (const [name, bytes] of safetensors(f)) tensors.set(name, bytes);
  const out = new Map<string, { spec: BufferSpec; bytes: Uint8Array<ArrayBuffer> }>();
  for (const v of m.variants) for (const b of v.buffers) {
    if (!fromShards(b) || out.has(b.tensor!)) continue;
    const bytes = tensors.get(b.tensor!);
    if (!bytes) throw new ModelError(`the weights have no tensor ${b.tensor} (buffer ${b.id})`);
    const want = b.stored === "float16" ? b.bytes / 2 : b.bytes;
    if (bytes.length !== want) throw new ModelError(`weight ${b.tensor}: ${bytes.length} bytes, the manifest says ${want}` +
                                                    (b.stored ? ` (${b.bytes} as float32, stored as ${b.stored})` : ""));
    out.set(b.tensor!, { spec: b, bytes });
  }
  return out;
}

// a safetensors file's tensors: name -> bytes
function safetensors(file: WeightsFile): Map<string, Uint8Array<ArrayBuffer>> {
  const view = new DataView(file.bytes.buffer, file.bytes.byteOffset, file.bytes.byteLength);
  const n = Number(view.getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(file.bytes.subarray(8, 8 + n)));
  const out = new Map<string, Uint8Array<ArrayBuffer>>();
  for (const [name, e] of Object.entries(header as Record<string, { data_offsets: [number, number] }>))
    if (name !== "__metadata__") out.set(name, file.bytes.subarray(8 + n + e.data_offsets[0], 8 + n + e.data_offsets[1]));
  return out;
}

/** A loaded model (WebGPUModel or WasmModel, as its manifest's target says): `run` it as often as needed; `destroy`
 * frees its memory. Calls run one at a time, in the order made (a model has one set of buffers). */
export abstract class Model {
  readonly manifest: ModelManifest;
  /** seconds the load took, by stage */
  readonly timings: LoadTimings;
  protected destroyed = false;
  #queue: Promise<unknown> = Promise.resolve();

  constructor(manifest: ModelManifest, timings: LoadTimings) {
    this.manifest = manifest;
    this.timings = timings;
  }

  /** The inputs and outputs (of the first variant: the batch size the model was exported with). */
  get inputs(): TensorSpec[] { return this.manifest.variants[0].inputs; }
  get outputs(): TensorSpec[] { return this.manifest.variants[0].outputs; }
  /** Each variant's inputs and outputs (one per batch size exported). */
  get variants(): { inputs: TensorSpec[]; outputs: TensorSpec[] }[] {
    return this.manifest.variants.map((v) => ({ inputs: v.inputs, outputs: v.outputs }));
  }

  /** Run the model on `inputs` (name -> typed array of the input's dtype, or numbers), resolving to name -> typed array. */
  run(inputs: ModelInputs): Promise<Record<string, TypedArray>> {
    return this.#queued(async () => this.execute(await this.#start(inputs)));
  }

  /** Time each step alone (waiting for each): [{step, name, ms}] in step order, for finding the slow kernels. Slower
   * than run() in all; the outputs are not read. */
  profile(inputs: ModelInputs): Promise<StepTime[]> {
    return this.#queued(async () => this.profileSteps(await this.#start(inputs)));
  }

  /** Free the model's memory. It cannot run afterwards. */
  abstract destroy(): void;

  /** The target's checks before a run (a lost device, failed allocations). */
  protected abstract ready(): Promise<void>;
  /** An input's bytes into variant v's buffer `id`. */
  protected abstract writeInput(v: number, id: number, bytes: Uint8Array): void;
  /** Variant v's steps, its inputs written: its outputs. */
  protected abstract execute(v: number): Promise<Record<string, TypedArray>>;
  protected abstract profileSteps(v: number): Promise<StepTime[]>;

  #queued<T>(work: () => Promise<T>): Promise<T> {
    const result = this.#queue.then(work);
    this.#queue = result.catch(() => {});
    return result;
  }

  // checks before a run, then the inputs written; the variant whose inputs the arrays fit
  async #start(inputs: ModelInputs): Promise<number> {
    await this.ready();
    if (this.destroyed) throw new ModelError("the model was destroyed");
    const variants = this.manifest.variants, first = variants[0].inputs;
    const unknown = Object.keys(inputs).filter((k) => !first.some((i) => i.name === k));
    if (unknown.length) throw new ModelError(`unknown input ${unknown.join(", ")}; the inputs are ${first.map((i) => i.name).join(", ")}`);
    const length = (name: string) => (inputs[name] as ArrayLike<number> | undefined)?.length;
    let v = variants.findIndex((vs) => vs.inputs.every((spec) => length(spec.name) === elements(spec.shape)));
    if (v < 0 && variants.length > 1) {   // (one variant: inputBytes says what is wrong)
      const shapes = (name: string) => variants.map((vs) => `[${vs.inputs.find((i) => i.name === name)!.shape}]`).join(" or ");
      const bad = first.find((spec) => !variants.some((vs) => length(spec.name) === elements(vs.inputs.find((i) => i.name === spec.name)!.shape)));
      throw new ModelError(bad ? `input ${bad.name} has ${length(bad.name) ?? "no"} elements; the model takes shape ${shapes(bad.name)}`
                               : `the inputs' sizes are of different batch sizes; the model takes ${first.map((i) => `${i.name} ${shapes(i.name)}`).join(", ")}`);
    }
    v = Math.max(v, 0);
    for (const spec of variants[v].inputs) this.writeInput(v, spec.buffer, inputBytes(spec, inputs[spec.name]));
    return v;
  }
}

// the bytes of one input, checked against its spec (a typed array of its dtype's kind, or numbers to convert)
function inputBytes(spec: TensorSpec, value: TypedArray | ArrayLike<number> | undefined): Uint8Array {
  const Arr = ARRAYS[spec.dtype], n = elements(spec.shape);
  if (value === undefined) throw new ModelError(`input ${spec.name} is missing (${spec.dtype}, shape [${spec.shape}])`);
  if (ArrayBuffer.isView(value)) {
    if (!(value instanceof Arr)) throw new ModelError(`input ${spec.name} must be a ${Arr.name} (dtype ${spec.dtype}), got a ${value.constructor.name}`);
    if (value.length !== n) throw new ModelError(`input ${spec.name} has ${value.length} elements; shape [${spec.shape}] needs ${n}`);
    return new Uint8Array(value.buffer, value.byteOffset, value.byteLength);
  }
  if (typeof value?.length !== "number") throw new ModelError(`input ${spec.name} must be a ${Arr.name} or an array of numbers`);
  if (value.length !== n) throw new ModelError(`input ${spec.name} has ${value.length} elements; shape [${spec.shape}] needs ${n}`);
  const a = new Arr(n);
  for (let i = 0; i < n; i++) a[i] = Number(value[i]);
  return new Uint8Array(a.buffer);
}

/** The outputs of variant `spec`, each copied out of `bytesOf(output index, its byte count)`. */
export function readOutputs(spec: ModelVariant, bytesOf: (i: number, n: number) => Uint8Array): Record<string, TypedArray> {
  const out: Record<string, TypedArray> = {};
  spec.outputs.forEach((o, i) => {
    const Arr = ARRAYS[o.dtype], copy = new Arr(elements(o.shape));
    new Uint8Array(copy.buffer).set(bytesOf(i, copy.byteLength));
    out[o.name] = copy;
  });
  return out;
}
