// A WASM export (tinyweb.export's target="WASM") run on the CPU as WebAssembly: for browsers without WebGPU, or with only
// a CPU-emulated adapter. web/model.ts's loadModel calls loadWasm for such a manifest; the model is used as any other.
//
// Memory: one WebAssembly.Memory of the manifest's size holds every buffer at the offset the manifest gives it (the
// export lays them out: the weights and state once each, the variants' other buffers in slots they share). Each kernel
// module imports it ("env" "memory") and the math wasm lacks ("math" "sin", "cos", "fmod", "exp2", "log2", on doubles:
// JavaScript's Math), and exports one function whose arguments are its buffers' byte addresses.
// Loading: the modules are compiled (WebAssembly.compile) and instantiated as each arrives, all at once, while the weights
// load; the weights and state are then written into the memory (float16-stored ones widened to float32).
// run(): writes the inputs into the memory, calls the steps' functions in order (a copy step copies within the memory),
// and copies the outputs out. The kernels run on the calling thread (one core, no SIMD yet): run a big model in a Web
// Worker to keep a page responsive.
import { ModelError, Model, readOutputs, shardTensors, type Loading, type LoadTimings, type StepTime, type TypedArray,
         type WasmManifest } from "./model_common.js";

const PAGE = 65536;   // wasm's page size

// what the kernels may import from "math" (float64 -> float64); tinyweb/codegen/wasm.py's IMPORTED_MATH names them
const MATH: Record<string, (...x: number[]) => number> = {
  sin: Math.sin, cos: Math.cos, log2: Math.log2,
  exp2: (x) => 2 ** x,
  // (JavaScript's % on numbers is C's fmod: the exact remainder with the dividend's sign; NaN for an infinite dividend
  // or a zero divisor; the dividend itself for an infinite divisor)
  fmod: (a, b) => a % b,
};

/** The memory, every kernel compiled and instantiated, and the weights written: the model. */
export async function loadWasm(l: Loading<WasmManifest>): Promise<WasmModel> {
  const { manifest } = l;
  for (const k of manifest.kernels) {
    const unknown = k.imports.filter((n) => !(n in MATH));
    if (unknown.length) throw new ModelError(`kernel ${k.file} imports math ${unknown.join(", ")}; this runtime has ${Object.keys(MATH).join(", ")}`);
  }
  const pages = Math.ceil(manifest.memory.bytes / PAGE);
  let memory: WebAssembly.Memory;
  try { memory = new WebAssembly.Memory({ initial: pages, maximum: pages }); }
  catch (e) {
    throw new ModelError(`the model needs ${(pages * PAGE / 2 ** 20).toFixed(1)} MiB of WebAssembly memory, which the browser ` +
                         `did not give (${(e as Error).message})`);
  }
  l.timings.device = l.since();
  const imports = { env: { memory }, math: MATH };
  const kernels = Promise.all(manifest.kernels.map(async (k, i) => {
    const bytes = await (await l.kernelFiles[i]).arrayBuffer();
    const module = await WebAssembly.compile(bytes).catch((e: Error) => { throw new ModelError(`kernel ${k.file} failed to compile: ${e.message}`); });
    const instance = await WebAssembly.instantiate(module, imports);
    const fn = instance.exports[k.entryPoint];
    if (typeof fn !== "function") throw new ModelError(`kernel ${k.file} exports no function ${k.entryPoint}`);
    l.kernelReady();
    return fn as (...addresses: number[]) => void;
  })).then((fns) => { l.timings.kernels = l.since(); return fns; });
  kernels.catch(() => {});
  const [fns, files] = await Promise.all([kernels, l.weights]);
  return new WasmModel(manifest, memory, fns, shardTensors(manifest, files), l.timings);
}

/** A model run as WebAssembly: its buffers in one memory. */
export class WasmModel extends Model {
  declare readonly manifest: WasmManifest;
  #memory: WebAssembly.Memory | null;   // (null once destroyed)
  #kernels: ((...addresses: number[]) => void)[];

  constructor(manifest: WasmManifest, memory: WebAssembly.Memory, kernels: ((...addresses: number[]) => void)[],
              tensors: ReturnType<typeof shardTensors>, timings: LoadTimings) {
    super(manifest, timings);
    this.#memory = memory;
    this.#kernels = kernels;
    for (const { spec, bytes } of tensors.values()) {   // (state: its first value, then what the runs write)
      if (spec.stored === "float16") widenHalves(bytes, new Float32Array(memory.buffer, spec.offset!, spec.bytes / 4));
      else new Uint8Array(memory.buffer, spec.offset!, bytes.length).set(bytes);
    }
  }

  protected async ready() {}

  protected writeInput(v: number, id: number, bytes: Uint8Array) {
    this.#bytes(this.manifest.variants[v].buffers[id].offset!, bytes.length).set(bytes);
  }

  protected async execute(v: number): Promise<Record<string, TypedArray>> {
    const spec = this.manifest.variants[v];
    spec.steps.forEach((_, i) => this.#step(v, i));
    return readOutputs(spec, (i, n) => this.#bytes(spec.buffers[spec.outputs[i].buffer].offset!, n));
  }

  protected async profileSteps(v: number): Promise<StepTime[]> {
    const spec = this.manifest.variants[v];
    return spec.steps.map((s, i) => {
      const t = performance.now();
      this.#step(v, i);
      return { step: i, name: "copy" in s ? "copy" : this.manifest.kernels[s.kernel].file, ms: performance.now() - t };
    });
  }

  #step(v: number, i: number) {
    const spec = this.manifest.variants[v], s = spec.steps[i], at = (id: number) => spec.buffers[id].offset!;
    if ("copy" in s) new Uint8Array(this.#memory!.buffer).copyWithin(at(s.copy.dst), at(s.copy.src), at(s.copy.src) + s.copy.bytes);
    else this.#kernels[s.kernel](...s.buffers.map(at));
  }

  #bytes(offset: number, n: number): Uint8Array { return new Uint8Array(this.#memory!.buffer, offset, n); }

  /** Drop the kernels and the memory (the browser frees them). The model cannot run afterwards. */
  destroy() {
    this.#kernels = [];
    this.#memory = null;
    this.destroyed = true;
  }
}

// IEEE halves (little-endian pairs of bytes, at any alignment) -> float32s; exact (every half is a float32)
function widenHalves(src: Uint8Array, dst: Float32Array) {
  const view = new DataView(src.buffer, src.byteOffset, src.byteLength);
  for (let i = 0; i < dst.length; i++) {
    const h = view.getUint16(2 * i, true), e = (h >> 10) & 31, m = h & 1023;
    const magnitude = e === 0 ? m * 2 ** -24 : e === 31 ? (m ? NaN : Infinity) : (1024 + m) * 2 ** (e - 25);
    dst[i] = h & 0x8000 ? -magnitude : magnitude;
  }
}
