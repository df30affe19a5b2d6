// Run a model exported by `tinyweb.export` (Python: kernels + manifest.json + safetensors weights) with no Pyodide and no
// Python on the page: on WebGPU (WGSL kernels, here), or on the CPU as WebAssembly (a WASM export: web/model_wasm.ts),
// as the manifest's target says. The npm package's `tinyweb/model` entry:
//   import { loadModel } from "tinyweb/model";
//   const m = await loadModel("/models/efficientnet-lite0/", { onProgress });   // the folder (or its manifest.json)
//   const { output } = await m.run({ input: new Float32Array(3 * 224 * 224) });   // typed arrays by name
// A model exported at several batch sizes (export's batch_sizes) has a variant per size: run() picks the one whose
// inputs have the sizes of the arrays it is given (m.variants lists their shapes). What the targets share (the
// manifest's checks, the shards, the inputs' checks, the Model base class) is in web/model_common.ts.
//
// Loading (WEBGPU): the manifest first, then at once: the GPU device (requested with only the limits and features the
// manifest lists, and only those above WebGPU's defaults), each kernel's WGSL (compiled with createComputePipelineAsync,
// all in parallel, cached per device and source), and the weights, through web/weights.ts (Range requests, the Cache
// API, sha256 of every shard against the manifest's). Every buffer is allocated once (intermediates share memory slots
// as the manifest says; the variants share the weights and state, and take their other buffers from one pool, as they
// run one at a time), the weights are uploaded, and each dispatch's bind group is made once.
// run(): writes the inputs, records every step into one command encoder, submits once and reads the outputs back.
// State buffers (random numbers' state, a KV cache) keep what one run writes for the next; load again to start over.
// Calls run one at a time, in the order made (a model has one set of buffers). Works in a Web Worker too.
import { pageURL, WeightsError, type WeightsProgress } from "./weights.js";
import {
  fetchManifest, fetchShards, fromShards, Model, ModelError, readOutputs, shardTensors, type BufferSpec, type Loading,
  type LoadModelOptions, type LoadTimings, type ModelManifest, type ModelProgress, type StepTime, type TypedArray, type WebGPUManifest,
} from "./model_common.js";
import { loadWasm } from "./model_wasm.js";

export { MODEL_FORMAT, MODEL_VERSION, Model, ModelError } from "./model_common.js";
export type {
  BufferSpec, LoadModelOptions, LoadTimings, ModelInputs, ModelManifest, ModelProgress, ModelVariant, StepTime, TensorSpec,
  TypedArray, WasmManifest, WebGPUManifest,
} from "./model_common.js";
export { WasmModel } from "./model_wasm.js";

// the WebGPU flags used here (the namespaces GPUBufferUsage, GPUMapMode and GPUShaderStage have no TypeScript declarations)
const STORAGE = 0x80, COPY_SRC = 0x04, COPY_DST = 0x08, MAP_READ_USAGE = 0x01, MAP_READ = 0x01, COMPUTE = 0x4;

const padded = (n: number) => Math.max(4, Math.ceil(n / 4) * 4);   // (WebGPU buffer sizes and writes: multiples of 4)

/** Load an exported model: `url` is its folder or its manifest.json. The manifest's target says how it runs: a
 * WebGPUModel for WEBGPU, a WasmModel for WASM. */
export async function loadModel(url: string | URL, options: LoadModelOptions = {}): Promise<Model> {
  const t0 = performance.now(), since = () => (performance.now() - t0) / 1000;
  const { manifestURL, manifest } = await fetchManifest(url);
  const timings: LoadTimings = { manifest: since(), device: 0, kernels: 0, weights: 0, total: 0 };

  const progress: ModelProgress = { weightsLoaded: 0, weightsTotal: manifest.weights.shards.reduce((s, f) => s + f.bytes, 0),
                                    kernelsReady: 0, kernelsTotal: manifest.kernels.length };
  const report = () => options.onProgress?.({ ...progress });
  const perFile = new Map<string, number>();
  const kernelFiles = manifest.kernels.map(async (k) => {
    const res = await fetch(new URL(k.file, manifestURL));
    if (!res.ok) throw new ModelError(`${new URL(k.file, manifestURL)}: HTTP ${res.status} ${res.statusText}`);
    return res;
  });
  const weights = fetchShards(manifestURL.href, manifest, options, (p: WeightsProgress) => {
    perFile.set(p.url, p.loaded);
    progress.weightsLoaded = [...perFile.values()].reduce((a, b) => a + b, 0);
    report();
  }).then((files) => { timings.weights = since(); return files; });
  // (no promise is left unobserved when one fails: the first error is thrown, the others are dropped)
  for (const p of [...kernelFiles, weights]) p.catch(() => {});
  const loading = { options, kernelFiles, weights, kernelReady: () => { progress.kernelsReady++; report(); }, timings, since };
  const model = manifest.target === "WASM" ? await loadWasm({ ...loading, manifest }) : await loadWebGPU({ ...loading, manifest });
  timings.total = since();
  return model;
}

// WebGPU's default limits: a manifest needs no more unless its export was allowed more
const DEFAULT_LIMITS: Record<string, number> = {
  maxStorageBuffersPerShaderStage: 8, maxComputeWorkgroupsPerDimension: 65535, maxStorageBufferBindingSize: 128 << 20,
  maxBufferSize: 256 << 20, maxComputeInvocationsPerWorkgroup: 256, maxComputeWorkgroupSizeX: 256,
  maxComputeWorkgroupSizeY: 256, maxComputeWorkgroupSizeZ: 64, maxComputeWorkgroupStorageSize: 16384,
};

// the GPU device and every kernel's pipeline (compiled as its WGSL arrives, all in parallel), then the model
async function loadWebGPU(l: Loading<WebGPUManifest>): Promise<WebGPUModel> {
  const { manifest, options } = l;
  const devicePromise = openDevice(manifest, options).then((d) => { l.timings.device = l.since(); return d; });
  const pipelines = devicePromise.then((device) => Promise.all(manifest.kernels.map(async (k, i) => {
    const p = await compile(device, k.file, await (await l.kernelFiles[i]).text(), k.entryPoint, k.bindings);
    l.kernelReady();
    return p;
  }))).then((ps) => { l.timings.kernels = l.since(); return ps; });
  // (a device this call requested is destroyed when the load fails)
  for (const p of [devicePromise, pipelines]) p.catch(() => {});
  try {
    const [device, pipes, files] = await Promise.all([devicePromise, pipelines, l.weights]);
    return new WebGPUModel(manifest, device, pipes, shardTensors(manifest, files), !options.device, l.timings);
  } catch (e) {
    if (!options.device) devicePromise.then((d) => d.destroy(), () => {});
    throw e;
  }
}

async function openDevice(m: WebGPUManifest, options: LoadModelOptions): Promise<GPUDevice> {
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

/** A model on WebGPU: its buffers on `device`; `destroy` frees them (and the device, if loadModel requested it). */
export class WebGPUModel extends Model {
  readonly device: GPUDevice;
  declare readonly manifest: WebGPUManifest;
  #weights = new Map<string, GPUBuffer>();   // weights and state by tensor name (every variant's)
  #pool: GPUBuffer[] = [];                   // the variants' other buffers: variant's n-th of them -> #pool[n]
  #staging: GPUBuffer[] = [];                // output n's read-back buffer (any variant's)
  #variants: { buffers: GPUBuffer[]; bindGroups: (GPUBindGroup | null)[] }[];
  #pipelines: GPUComputePipeline[];
  #ownsDevice: boolean;
  #lost: string | null = null;
  #setupErrors: Promise<(GPUError | null)[]>;

  constructor(manifest: WebGPUManifest, device: GPUDevice, pipelines: GPUComputePipeline[],
              tensors: Map<string, { spec: BufferSpec; bytes: Uint8Array<ArrayBuffer> }>, ownsDevice: boolean, timings: LoadTimings) {
    super(manifest, timings);
    this.device = device;
    this.#pipelines = pipelines;
    this.#ownsDevice = ownsDevice;
    device.lost.then((info) => { this.#lost = info.message || info.reason; });
    // each variant's buffer id -> its slot in the pool (-1: a weight or state), and the slots' and the staging buffers'
    // sizes: the largest any variant asks
    const slots = manifest.variants.map((v) => { let n = 0; return v.buffers.map((b) => fromShards(b) ? -1 : n++); });
    const pooled: number[] = [], staged: number[] = [];
    manifest.variants.forEach((v, k) => {
      v.buffers.forEach((b, id) => { if (slots[k][id] >= 0) pooled[slots[k][id]] = Math.max(pooled[slots[k][id]] ?? 0, padded(b.bytes)); });
      v.outputs.forEach((o, i) => { staged[i] = Math.max(staged[i] ?? 0, padded(v.buffers[o.buffer].bytes)); });
    });
    device.pushErrorScope("validation");
    device.pushErrorScope("out-of-memory");
    const storage = (size: number, label: string) => device.createBuffer({ size, usage: STORAGE | COPY_SRC | COPY_DST, label });
    for (const [name, { spec }] of tensors) this.#weights.set(name, storage(padded(spec.bytes), `${spec.kind} ${name}`));
    this.#pool = pooled.map((size, i) => storage(size, `buffer ${i}`));
    this.#staging = staged.map((size, i) => device.createBuffer({ size, usage: MAP_READ_USAGE | COPY_DST,
                                                                  label: `read ${manifest.variants[0].outputs[i].name}` }));
    // (state: its first value, then what the runs write)
    for (const [name, { spec, bytes }] of tensors) if (!spec.stored) this.#write(this.#weights.get(name)!, bytes);
    this.#widenHalfWeights([...tensors].filter(([, t]) => t.spec.stored === "float16").map(([name, t]) => [name, t.bytes]));
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

  protected async ready() {
    if (this.#lost !== null) throw new ModelError(`the GPU device was lost (${this.#lost}): load the model again`);
    const setup = (await this.#setupErrors).find((e) => e);
    if (setup) throw new ModelError(`allocating the model's buffers failed: ${setup.message}`);
  }

  protected writeInput(v: number, id: number, bytes: Uint8Array) { this.#write(this.#variants[v].buffers[id], bytes); }

  // every step recorded into one command encoder, submitted once, the outputs read back
  protected async execute(v: number): Promise<Record<string, TypedArray>> {
    const { buffers, bindGroups } = this.#variants[v], spec = this.manifest.variants[v];
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
      pass.dispatchWorkgroups(...s.workgroups!);
    });
    (pass as GPUComputePassEncoder | null)?.end();
    const sizes = spec.outputs.map((o) => padded(spec.buffers[o.buffer].bytes));
    spec.outputs.forEach((o, i) => encoder.copyBufferToBuffer(buffers[o.buffer], 0, this.#staging[i], 0, sizes[i]));
    device.queue.submit([encoder.finish()]);
    const error = device.popErrorScope();
    await Promise.all(spec.outputs.map((_, i) => this.#staging[i].mapAsync(MAP_READ, 0, sizes[i])));
    const err = await error;
    const out = readOutputs(spec, (i, n) => new Uint8Array(this.#staging[i].getMappedRange(0, sizes[i]), 0, n));
    spec.outputs.forEach((_, i) => this.#staging[i].unmap());
    if (err) throw new ModelError(`running the model failed: ${err.message}`);
    return out;
  }

  // one submit per step, waiting for each
  protected async profileSteps(v: number): Promise<StepTime[]> {
    const { buffers, bindGroups } = this.#variants[v], spec = this.manifest.variants[v];
    const device = this.device, times: StepTime[] = [];
    await device.queue.onSubmittedWorkDone();
    for (const [i, s] of spec.steps.entries()) {
      const encoder = device.createCommandEncoder(), t = performance.now();
      if ("copy" in s) encoder.copyBufferToBuffer(buffers[s.copy.src], 0, buffers[s.copy.dst], 0, padded(s.copy.bytes));
      else {
        const pass = encoder.beginComputePass();
        pass.setPipeline(this.#pipelines[s.kernel]);
        pass.setBindGroup(0, bindGroups[i]);
        pass.dispatchWorkgroups(...s.workgroups!);
        pass.end();
      }
      device.queue.submit([encoder.finish()]);
      await device.queue.onSubmittedWorkDone();
      times.push({ step: i, name: "copy" in s ? "copy" : this.manifest.kernels[s.kernel].file, ms: performance.now() - t });
    }
    return times;
  }

  // weights stored as float16: each uploaded as it is, then widened into its float32 buffer by HALF_TO_FLOAT (WGSL's
  // unpack2x16float, which needs no shader-f16), all in one submit that runs before any run's
  #widenHalfWeights(half: [string, Uint8Array<ArrayBuffer>][]) {
    if (!half.length) return;
    const device = this.device, module = device.createShaderModule({ code: HALF_TO_FLOAT });
    const pipeline = device.createComputePipeline({ layout: "auto", compute: { module, entryPoint: "widen" } });
    const encoder = device.createCommandEncoder(), sources: GPUBuffer[] = [];
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    for (const [name, bytes] of half) {
      const src = device.createBuffer({ size: padded(bytes.byteLength), usage: STORAGE | COPY_DST, label: `float16 ${name}` });
      sources.push(src);
      this.#write(src, bytes);
      pass.setBindGroup(0, device.createBindGroup({ layout: pipeline.getBindGroupLayout(0), entries: [
        { binding: 0, resource: { buffer: src } }, { binding: 1, resource: { buffer: this.#weights.get(name)! } }] }));
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
    this.destroyed = true;
    if (this.#ownsDevice) this.device.destroy();
  }
}

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

export { WeightsError };
