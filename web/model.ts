// Run a model exported by `tinyweb.export` (Python: WGSL kernels + manifest.json + safetensors weights) on WebGPU, with
// no Pyodide and no Python on the page. The npm package's `tinyweb/model` entry:
//   import { loadModel } from "tinyweb/model";
//   const m = await loadModel("/models/efficientnet-lite0/", { onProgress });   // the folder (or its manifest.json)
//   const { output } = await m.run({ input: new Float32Array(3 * 224 * 224) });   // typed arrays by name
// A model exported at several batch sizes (export's batch_sizes) has a variant per size: run() picks the one whose
// inputs have the sizes of the arrays it is given (m.variants lists their shapes).
//
// Loading: the manifest first, then at once: the GPU device (requested with only the limits and features the manifest
// lists, and only those above WebGPU's defaults), each kernel's WGSL (compiled with createComputePipelineAsync, all in
// parallel, cached per device and source), and the weights, through web/weights.ts (Range requests, the Cache API,
// sha256 of every shard against the manifest's). Every buffer is allocated once (intermediates share memory slots as the
// manifest says; the variants share the weights and state, and take their other buffers from one pool, as they run one
// at a time), the weights are uploaded, and each dispatch's bind group is made once.
// run(): writes the inputs, records every step into one command encoder, submits once and reads the outputs back.
// State buffers (random numbers' state, a KV cache) keep what one run writes for the next; load again to start over.
// Calls run one at a time, in the order made (a model has one set of buffers). Works in a Web Worker too.
import { fetchIndexedWeights, pageURL, WeightsError, type WeightsFile, type WeightsProgress } from "./weights.js";

export const MODEL_FORMAT = "tinyweb-export";
export const MODEL_VERSION = 2;

/** What manifest.json holds (tinyweb/export/__init__.py writes it; its docstring describes each field). */
export interface ModelManifest {
  format: string;
  version: number;
  target: "WEBGPU";
  features: string[];
  limits: Record<string, number>;
  kernels: { file: string; entryPoint: string; workgroupSize: [number, number, number]; bindings: number }[];
  variants: ModelVariant[];   // one per batch size exported
  weights: { index?: string; shards: { file: string; bytes: number; sha256: string; tensors: string[] }[] };
}
/** One capture of the model (a batch size): its own buffer ids; weights and state are shared by tensor name. */
export interface ModelVariant {
  inputs: TensorSpec[];
  outputs: TensorSpec[];
  buffers: BufferSpec[];
  steps: ({ kernel: number; buffers: number[]; workgroups: [number, number, number] } |
          { copy: { src: number; dst: number; bytes: number } })[];
}
export interface BufferSpec {
  id: number; kind: "input" | "output" | "weight" | "state" | "scratch"; bytes: number; dtype?: string; tensor?: string;
  stored?: "float16";   // a float32 weight whose shard holds it as float16 (converted on the GPU)
}
export interface TensorSpec { name: string; buffer: number; shape: number[]; dtype: string }

/** Loading progress: the weights' bytes (from the network or the Cache API) and the kernels compiled so far. */
export interface ModelProgress { weightsLoaded: number; weightsTotal: number; kernelsReady: number; kernelsTotal: number }
export interface LoadModelOptions {
  onProgress?: (p: ModelProgress) => void;
  /** a GPUDevice to use (it must have the manifest's limits and features); default: one requested for this model */
  device?: GPUDevice;
  powerPreference?: GPUPowerPreference;
  cache?: string | false;    // the Cache API name for the weights (web/weights.ts); false: always download
}
/** Seconds each loading stage took (they overlap: the device, kernels and weights load at once). */
export interface LoadTimings { manifest: number; device: number; kernels: number; weights: number; total: number }

export type TypedArray = Float32Array | Int32Array | Uint32Array | Int16Array | Uint16Array | Int8Array | Uint8Array;
export type ModelInputs = Record<string, TypedArray | ArrayLike<number>>;

export class ModelError extends Error { override name = "ModelError"; }

// WebGPU's default limits: a manifest needs no more unless its export was allowed more
const DEFAULT_LIMITS: Record<string, number> = {
  maxStorageBuffersPerShaderStage: 8, maxComputeWorkgroupsPerDimension: 65535, maxStorageBufferBindingSize: 128 << 20,
  maxBufferSize: 256 << 20, maxComputeInvocationsPerWorkgroup: 256, maxComputeWorkgroupSizeX: 256,
  maxComputeWorkgroupSizeY: 256, maxComputeWorkgroupSizeZ: 64, maxComputeWorkgroupStorageSize: 16384,
};

// dtype -> the typed array its values come in (float16 / bfloat16: their 16-bit patterns)
const ARRAYS: Record<string, { new (n: number): TypedArray; BYTES_PER_ELEMENT: number }> = {
  float32: Float32Array, int32: Int32Array, uint32: Uint32Array, int16: Int16Array, uint16: Uint16Array, int8: Int8Array,
  uint8: Uint8Array, bool: Uint8Array, float16: Uint16Array, bfloat16: Uint16Array,
};

// the WebGPU flags used here (the namespaces GPUBufferUsage, GPUMapMode and GPUShaderStage have no TypeScript declarations)
const STORAGE = 0x80, COPY_SRC = 0x04, COPY_DST = 0x08, MAP_READ_USAGE = 0x01, MAP_READ = 0x01, COMPUTE = 0x4;

const padded = (n: number) => Math.max(4, Math.ceil(n / 4) * 4);   // (WebGPU buffer sizes and writes: multiples of 4)

/** Load an exported model: `url` is its folder or its manifest.json. */
export async function loadModel(url: string | URL, options: LoadModelOptions = {}): Promise<Model> {
  const t0 = performance.now(), since = () => (performance.now() - t0) / 1000;
  let manifestURL = new URL(url, pageURL());
  if (!manifestURL.pathname.endsWith(".json")) manifestURL = new URL("manifest.json", manifestURL.href.replace(/\/?$/, "/"));
  const r = await fetch(manifestURL);
  if (!r.ok) throw new ModelError(`${manifestURL}: HTTP ${r.status} ${r.statusText}`);
  const manifest: ModelManifest = await r.json().catch((e: Error) => { throw new ModelError(`${manifestURL}: not JSON (${e.message})`); });
  checkManifest(manifestURL.href, manifest);
  const timings: LoadTimings = { manifest: since(), device: 0, kernels: 0, weights: 0, total: 0 };

  const progress: ModelProgress = { weightsLoaded: 0, weightsTotal: manifest.weights.shards.reduce((s, f) => s + f.bytes, 0),
                                    kernelsReady: 0, kernelsTotal: manifest.kernels.length };
  const report = () => options.onProgress?.({ ...progress });
  const perFile = new Map<string, number>();
  const devicePromise = openDevice(manifest, options).then((d) => { timings.device = since(); return d; });
  const sources = manifest.kernels.map(async (k) => {
    const res = await fetch(new URL(k.file, manifestURL));
    if (!res.ok) throw new ModelError(`${new URL(k.file, manifestURL)}: HTTP ${res.status} ${res.statusText}`);
    return res.text();
  });
  const pipelines = devicePromise.then((device) => Promise.all(manifest.kernels.map(async (k, i) => {
    const p = await compile(device, manifest.kernels[i].file, await sources[i], k.entryPoint, k.bindings);
    progress.kernelsReady++;
    report();
    return p;
  }))).then((ps) => { timings.kernels = since(); return ps; });
  const weightFiles = fetchShards(manifestURL.href, manifest, options, (p: WeightsProgress) => {
    perFile.set(p.url, p.loaded);
    progress.weightsLoaded = [...perFile.values()].reduce((a, b) => a + b, 0);
    report();
  }).then((files) => { timings.weights = since(); return files; });
  // (no promise is left unobserved when one fails: the first error is thrown, the others are dropped; a device this
  // call requested is destroyed)
  for (const p of [...sources, devicePromise, pipelines, weightFiles]) p.catch(() => {});
  try {
    const [device, pipes, files] = await Promise.all([devicePromise, pipelines, weightFiles]);
    const model = new Model(manifest, device, pipes, files, !options.device, timings);
    timings.total = since();
    return model;
  } catch (e) {
    if (!options.device) devicePromise.then((d) => d.destroy(), () => {});
    throw e;
  }
}

function checkManifest(url: string, m: ModelManifest) {
  if (m?.format !== MODEL_FORMAT) throw new ModelError(`${url}: not a tinyweb export (format ${JSON.stringify(m?.format)}, expected "${MODEL_FORMAT}")`);
  if (m.version !== MODEL_VERSION) throw new ModelError(`${url}: export format version ${m.version}; this runtime reads version ${MODEL_VERSION}`);
  if (m.target !== "WEBGPU") throw new ModelError(`${url}: exported for ${m.target}; this runtime runs WEBGPU exports`);
  if (!m.variants?.length) throw new ModelError(`${url}: the manifest has no variants`);
  for (const v of m.variants) {
    const n = v.buffers.length, ok = (id: number) => Number.isInteger(id) && id >= 0 && id < n;
    v.buffers.forEach((b, i) => {
      if (b.id !== i) throw new ModelError(`${url}: buffer ${i} has id ${b.id}`);
      if (fromShards(b) && !b.tensor) throw new ModelError(`${url}: ${b.kind} buffer ${i} names no tensor`);
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

async function openDevice(m: ModelManifest, options: LoadModelOptions): Promise<GPUDevice> {
  const needLimits = Object.entries(m.limits ?? {});
  const check = (have: GPUSupportedLimits, features: GPUSupportedFeatures, what: string) => {
    const low = needLimits.filter(([k, v]) => (have as unknown as Record<string, number>)[k] < v);
    const missing = m.features.filter((f) => !features.has(f));
    if (low.length || missing.length)
      throw new ModelError(`the model needs ${[...low.map(([k, v]) => `${k} >= ${v} (${what} has ` +
        `${(have as unknown as Record<string, number>)[k]})`), ...missing.map((f) => `the feature ${f}`)].join(", ")}, which ${what} lacks`);
  };
  if (options.device) { check(options.device.limits, options.device.features, "the given device"); return options.device; }
  const gpu = globalThis.navigator?.gpu;
  if (!gpu) throw new ModelError("WebGPU is not available here (navigator.gpu is missing: an old browser, an insecure context, or WebGPU turned off)");
  const adapter = await gpu.requestAdapter({ powerPreference: options.powerPreference });
  if (!adapter) throw new ModelError("WebGPU gave no adapter (the GPU may be blocklisted, or hardware acceleration off)");
  check(adapter.limits, adapter.features, "the adapter");
  // only what the defaults do not already give
  const requiredLimits = Object.fromEntries(needLimits.filter(([k, v]) => v > (DEFAULT_LIMITS[k] ?? Infinity)));
  const device = await adapter.requestDevice({ requiredLimits, requiredFeatures: m.features as GPUFeatureName[] });
  return device;
}

// pipelines by device and source: a model loaded twice (or two models sharing kernels) compiles each kernel once
const pipelineCache = new WeakMap<GPUDevice, Map<string, Promise<GPUComputePipeline>>>();
const layoutCache = new WeakMap<GPUDevice, Map<number, GPUBindGroupLayout>>();

function bindGroupLayout(device: GPUDevice, bindings: number): GPUBindGroupLayout {
  let layouts = layoutCache.get(device);
  if (!layouts) layoutCache.set(device, layouts = new Map());
  let layout = layouts.get(bindings);
  if (!layout) layouts.set(bindings, layout = device.createBindGroupLayout({ entries: Array.from({ length: bindings },
    (_, i) => ({ binding: i, visibility: COMPUTE, buffer: { type: "storage" as const } })) }));
  return layout;
}

function compile(device: GPUDevice, file: string, code: string, entryPoint: string, bindings: number): Promise<GPUComputePipeline> {
  let cache = pipelineCache.get(device);
  if (!cache) pipelineCache.set(device, cache = new Map());
  const key = `${entryPoint}\n${bindings}\n${code}`;
  let p = cache.get(key);
  if (!p) {
    const module = device.createShaderModule({ code, label: file });
    p = device.createComputePipelineAsync({
      label: file, compute: { module, entryPoint },
      layout: device.createPipelineLayout({ bindGroupLayouts: [bindGroupLayout(device, bindings)] }),
    }).catch(async (e: Error) => {
      cache.delete(key);
      // (a shader compiler that crashes takes the device with it: say so, rather than Dawn's words for a lost device)
      const lost = await Promise.race([device.lost, new Promise<null>((r) => setTimeout(() => r(null), 100))]);
      if (lost) throw new ModelError(`the GPU device was lost while compiling kernel ${file} (${lost.reason}: ${lost.message}); ` +
                                     "its shader compiler may have failed on it");
      const info = await module.getCompilationInfo().catch(() => null);
      const messages = info?.messages.map((m) => `${m.type} at ${m.lineNum}:${m.linePos}: ${m.message}`).join("\n") ?? "";
      throw new ModelError(`kernel ${file} failed to compile: ${e.message}${messages ? "\n" + messages : ""}`);
    });
    cache.set(key, p);
  }
  return p;
}

// every shard, checked against the manifest's sha256 (through web/weights.ts: the Cache API keyed by the digest)
async function fetchShards(manifestURL: string, m: ModelManifest, options: LoadModelOptions,
                           onProgress: (p: WeightsProgress) => void): Promise<WeightsFile[]> {
  if (!m.weights.shards.length) return [];
  const weight_map: Record<string, string> = {}, sha256: Record<string, string> = {};
  for (const s of m.weights.shards) {
    sha256[s.file] = s.sha256;
    for (const t of s.tensors) weight_map[t] = s.file;
  }
  return fetchIndexedWeights(manifestURL, { weight_map, sha256 }, { onProgress, cache: options.cache });
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

/** A loaded model: `run` it as often as needed; `destroy` frees its GPU memory (and its device, if it requested one). */
export class Model {
  readonly manifest: ModelManifest;
  readonly device: GPUDevice;
  /** seconds the load took, by stage */
  readonly timings: LoadTimings;
  #weights = new Map<string, GPUBuffer>();   // weights and state by tensor name (every variant's)
  #pool: GPUBuffer[] = [];                   // the variants' other buffers: variant's n-th of them -> #pool[n]
  #staging: GPUBuffer[] = [];                // output n's read-back buffer (any variant's)
  #variants: { buffers: GPUBuffer[]; bindGroups: (GPUBindGroup | null)[] }[];
  #pipelines: GPUComputePipeline[];
  #ownsDevice: boolean;
  #queue: Promise<unknown> = Promise.resolve();
  #lost: string | null = null;
  #destroyed = false;
  #setupErrors: Promise<(GPUError | null)[]>;

  constructor(manifest: ModelManifest, device: GPUDevice, pipelines: GPUComputePipeline[], weights: WeightsFile[],
              ownsDevice: boolean, timings: LoadTimings) {
    this.manifest = manifest;
    this.device = device;
    this.timings = timings;
    this.#pipelines = pipelines;
    this.#ownsDevice = ownsDevice;
    device.lost.then((info) => { this.#lost = info.message || info.reason; });
    const tensors = new Map<string, Uint8Array<ArrayBuffer>>();
    for (const f of weights) for (const [name, bytes] of safetensors(f)) tensors.set(name, bytes);
    const shared = new Map<string, BufferSpec>();   // (each weight once, from whichever variant names it first)
    // each variant's buffer id -> its slot in the pool (-1: a weight or state), and the slots' and the staging buffers'
    // sizes: the largest any variant asks
    const slots = manifest.variants.map((v) => { let n = 0; return v.buffers.map((b) => fromShards(b) ? -1 : n++); });
    const pooled: number[] = [], staged: number[] = [];
    manifest.variants.forEach((v, k) => {
      v.buffers.forEach((b, id) => {
        if (slots[k][id] >= 0) pooled[slots[k][id]] = Math.max(pooled[slots[k][id]] ?? 0, padded(b.bytes));
        else if (!shared.has(b.tensor!)) shared.set(b.tensor!, b);
      });
      v.outputs.forEach((o, i) => { staged[i] = Math.max(staged[i] ?? 0, padded(v.buffers[o.buffer].bytes)); });
    });
    for (const b of shared.values()) {   // (state: its first value, then what the runs write)
      const bytes = tensors.get(b.tensor!);
      if (!bytes) throw new ModelError(`the weights have no tensor ${b.tensor} (buffer ${b.id})`);
      const want = b.stored === "float16" ? b.bytes / 2 : b.bytes;
      if (bytes.length !== want) throw new ModelError(`weight ${b.tensor}: ${bytes.length} bytes, the manifest says ${want}` +
                                                      (b.stored ? ` (${b.bytes} as float32, stored as ${b.stored})` : ""));
    }
    device.pushErrorScope("validation");
    device.pushErrorScope("out-of-memory");
    const storage = (size: number, label: string) => device.createBuffer({ size, usage: STORAGE | COPY_SRC | COPY_DST, label });
    for (const [name, b] of shared) this.#weights.set(name, storage(padded(b.bytes), `${b.kind} ${name}`));
    this.#pool = pooled.map((size, i) => storage(size, `buffer ${i}`));
    this.#staging = staged.map((size, i) => device.createBuffer({ size, usage: MAP_READ_USAGE | COPY_DST,
                                                                  label: `read ${manifest.variants[0].outputs[i].name}` }));
    for (const [name, b] of shared) if (!b.stored) this.#write(this.#weights.get(name)!, tensors.get(name)!);
    this.#widenHalfWeights([...shared.values()].filter((b) => b.stored === "float16"), tensors);
    this.#variants = manifest.variants.map((v, k) => {
      const buffers = v.buffers.map((b, id) => slots[k][id] < 0 ? this.#weights.get(b.tensor!)! : this.#pool[slots[k][id]]);
      const bindGroups = v.steps.map((s) => "copy" in s ? null : device.createBindGroup({
        layout: bindGroupLayout(device, manifest.kernels[s.kernel].bindings),
        entries: s.buffers.map((id, i) => ({ binding: i, resource: { buffer: buffers[id] } })),
      }));
      return { buffers, bindGroups };
    });
    // (allocation errors surface on the first run: popErrorScope is awaited there)
    this.#setupErrors = Promise.all([device.popErrorScope(), device.popErrorScope()]);
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
    const result = this.#queue.then(() => this.#run(inputs));
    this.#queue = result.catch(() => {});
    return result;
  }

  async #run(inputs: ModelInputs): Promise<Record<string, TypedArray>> {
    const v = await this.#start(inputs), { buffers, bindGroups } = this.#variants[v], spec = this.manifest.variants[v];
    const device = this.device;
    device.pushErrorScope("validation");
    const encoder = device.createCommandEncoder();
    let pass: GPUComputePassEncoder | null = null;
    spec.steps.forEach((s, i) => {
      if ("copy" in s) {
        pass?.end();
        pass = null;
        encoder.copyBufferToBuffer(buffers[s.copy.src], 0, buffers[s.copy.dst], 0, padded(s.copy.bytes));
        return;
      }
      pass ??= encoder.beginComputePass();
      pass.setPipeline(this.#pipelines[s.kernel]);
      pass.setBindGroup(0, bindGroups[i]);
      pass.dispatchWorkgroups(...s.workgroups);
    });
    (pass as GPUComputePassEncoder | null)?.end();
    const sizes = spec.outputs.map((o) => padded(spec.buffers[o.buffer].bytes));
    spec.outputs.forEach((o, i) => encoder.copyBufferToBuffer(buffers[o.buffer], 0, this.#staging[i], 0, sizes[i]));
    device.queue.submit([encoder.finish()]);
    const error = device.popErrorScope();
    await Promise.all(spec.outputs.map((_, i) => this.#staging[i].mapAsync(MAP_READ, 0, sizes[i])));
    const err = await error;
    const out: Record<string, TypedArray> = {};
    spec.outputs.forEach((o, i) => {
      const Arr = ARRAYS[o.dtype], n = o.shape.reduce((a, b) => a * b, 1);
      const copy = new Arr(n);
      new Uint8Array(copy.buffer).set(new Uint8Array(this.#staging[i].getMappedRange(0, sizes[i]), 0, n * Arr.BYTES_PER_ELEMENT));
      this.#staging[i].unmap();
      out[o.name] = copy;
    });
    if (err) throw new ModelError(`running the model failed: ${err.message}`);
    return out;
  }

  // checks before a run, then the inputs written; the variant whose inputs the arrays fit
  async #start(inputs: ModelInputs): Promise<number> {
    if (this.#lost !== null) throw new ModelError(`the GPU device was lost (${this.#lost}): load the model again`);
    if (this.#destroyed) throw new ModelError("the model was destroyed");
    const variants = this.manifest.variants, first = variants[0].inputs;
    const unknown = Object.keys(inputs).filter((k) => !first.some((i) => i.name === k));
    if (unknown.length) throw new ModelError(`unknown input ${unknown.join(", ")}; the inputs are ${first.map((i) => i.name).join(", ")}`);
    const setup = (await this.#setupErrors).find((e) => e);
    if (setup) throw new ModelError(`allocating the model's buffers failed: ${setup.message}`);
    const length = (name: string) => (inputs[name] as ArrayLike<number> | undefined)?.length;
    let v = variants.findIndex((vs) => vs.inputs.every((spec) => length(spec.name) === elements(spec.shape)));
    if (v < 0 && variants.length > 1) {   // (one variant: inputBytes says what is wrong)
      const shapes = (name: string) => variants.map((vs) => `[${vs.inputs.find((i) => i.name === name)!.shape}]`).join(" or ");
      const bad = first.find((spec) => !variants.some((vs) => length(spec.name) === elements(vs.inputs.find((i) => i.name === spec.name)!.shape)));
      throw new ModelError(bad ? `input ${bad.name} has ${length(bad.name) ?? "no"} elements; the model takes shape ${shapes(bad.name)}`
                               : `the inputs' sizes are of different batch sizes; the model takes ${first.map((i) => `${i.name} ${shapes(i.name)}`).join(", ")}`);
    }
    v = Math.max(v, 0);
    for (const spec of variants[v].inputs) this.#write(this.#variants[v].buffers[spec.buffer], inputBytes(spec, inputs[spec.name]));
    return v;
  }

  /** Time each step alone (one submit each, waiting for it): [{step, name, ms}] in step order, for finding the slow
   * kernels. Slower than run() in all (a submit and a wait per step); the outputs are not read. */
  profile(inputs: ModelInputs): Promise<{ step: number; name: string; ms: number }[]> {
    const result = this.#queue.then(async () => {
      const v = await this.#start(inputs), { buffers, bindGroups } = this.#variants[v], spec = this.manifest.variants[v];
      const device = this.device, times: { step: number; name: string; ms: number }[] = [];
      await device.queue.onSubmittedWorkDone();
      for (const [i, s] of spec.steps.entries()) {
        const encoder = device.createCommandEncoder(), t = performance.now();
        if ("copy" in s) encoder.copyBufferToBuffer(buffers[s.copy.src], 0, buffers[s.copy.dst], 0, padded(s.copy.bytes));
        else {
          const pass = encoder.beginComputePass();
          pass.setPipeline(this.#pipelines[s.kernel]);
          pass.setBindGroup(0, bindGroups[i]);
          pass.dispatchWorkgroups(...s.workgroups);
          pass.end();
        }
        device.queue.submit([encoder.finish()]);
        await device.queue.onSubmittedWorkDone();
        times.push({ step: i, name: "copy" in s ? "copy" : this.manifest.kernels[s.kernel].file, ms: performance.now() - t });
      }
      return times;
    });
    this.#queue = result.catch(() => {});
    return result;
  }

  // weights stored as float16: each uploaded as it is, then widened into its float32 buffer by HALF_TO_FLOAT (WGSL's
  // unpack2x16float, which needs no shader-f16), all in one submit that runs before any run's
  #widenHalfWeights(half: BufferSpec[], tensors: Map<string, Uint8Array<ArrayBuffer>>) {
    if (!half.length) return;
    const device = this.device, module = device.createShaderModule({ code: HALF_TO_FLOAT });
    const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "widen" } });
    const encoder = device.createCommandEncoder(), sources: GPUBuffer[] = [];
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    for (const b of half) {
      const bytes = tensors.get(b.tensor!)!;
      const src = device.createBuffer({ size: padded(bytes.byteLength), usage: STORAGE | COPY_DST, label: `float16 ${b.tensor}` });
      sources.push(src);
      this.#write(src, bytes);
      pass.setBindGroup(0, device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [
        { binding: 0, resource: { buffer: src } }, { binding: 1, resource: { buffer: this.#weights.get(b.tensor!)! } }] }));
      const groups = Math.ceil(src.size / 4 / 64);   // (a thread per pair of halves; a second grid dimension past 65535)
      pass.dispatchWorkgroups(Math.min(groups, 65535), Math.ceil(groups / 65535));
    }
    pass.end();
    device.queue.submit([encoder.finish()]);
    device.queue.onSubmittedWorkDone().then(() => { for (const b of sources) b.destroy(); });
  }

  #write(buffer: GPUBuffer, bytes: Uint8Array) {
    if (bytes.byteLength % 4) {   // (writeBuffer takes whole 4-byte words)
      const p = new Uint8Array(padded(bytes.byteLength));
      p.set(bytes);
      bytes = p;
    }
    this.device.queue.writeBuffer(buffer, 0, bytes as Uint8Array<ArrayBuffer>, 0, bytes.byteLength);
  }

  /** Free the GPU buffers (and the device, when loadModel requested it). The model cannot run afterwards. */
  destroy() {
    for (const b of [...this.#weights.values(), ...this.#pool, ...this.#staging]) b.destroy();
    this.#weights.clear();
    this.#pool = [];
    this.#staging = [];
    this.#destroyed = true;
    if (this.#ownsDevice) this.device.destroy();
  }
}

const elements = (shape: number[]) => shape.reduce((a, b) => a * b, 1);
// weights and state: their bytes come from the shards, one GPU buffer per tensor for all the variants
const fromShards = (b: BufferSpec) => b.kind === "weight" || b.kind === "state";

// float16 pairs (u32 words) -> float32s; the float32 buffer may hold one value fewer than the pairs (an odd count)
const HALF_TO_FLOAT = `
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
@compute @workgroup_size(64)
fn widen(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let i = (wg.y * 65535u + wg.x) * 64u + lid;
  if (i >= arrayLength(&src)) { return; }
  let v = unpack2x16float(src[i]);
  if (2u * i < arrayLength(&dst)) { dst[2u * i] = v.x; }
  if (2u * i + 1u < arrayLength(&dst)) { dst[2u * i + 1u] = v.y; }
}`;

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

export { WeightsError };
