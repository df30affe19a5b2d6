// The diffuse page's Web Worker (web/diffuse.ts starts it): loads the exported terrain UNet (web/page_model.ts) and runs
// the sampler (web/diffuse_sampler.ts), one model run per step, posting each step's denoised map as it comes.
//
// page -> worker   page_model.ts's LoadRequest {kind: "load", url, backend, runtime}   once, first: the model's folder
//                  {kind: "generate", id, steps, seed, difficulty}     a new map (a later one stops an earlier one
//                                                                      after its current step); difficulty: 1..100
// worker -> page   page_model.ts's adapter, progress and failed messages, then
//                  {kind: "loaded", model}                             the model is ready
//                  {kind: "step", step}                                each step of the latest generate, in order
//                  {kind: "error", id, message}                        that generate failed
import { difficultyInput, gaussian, noised, sigmas } from "./diffuse_sampler.js";
import type { LoadTimings } from "./model.js";
import { errorText, loadPageModel, workerScope, type LoadMessage, type LoadRequest, type PageModel } from "./page_model.js";

export type ToWorker = LoadRequest | { kind: "generate"; id: number; steps: number; seed: number; difficulty: number };
export interface LoadedModel { timings: LoadTimings; kernels: number; weightsBytes: number; size: number }
/** One step: its noise level, the noise drawn for its input, the model's denoised map (model space, -1..1), its time. */
export interface Step {
  id: number; step: number; steps: number; sigma: number; noise: Float32Array; denoised: Float32Array; ms: number;
}
export type FromWorker = LoadMessage | { kind: "loaded"; model: LoadedModel } | { kind: "step"; step: Step } |
  { kind: "error"; id: number; message: string };

const scope = workerScope<FromWorker, ToWorker>();
const post = (m: FromWorker, transfer: Transferable[] = []) => scope.postMessage(m, transfer);
const SPEC = {
  inputs: [{ name: "noisy", shape: [1, 1, "size", "size"], dtype: "float32" }, { name: "sigma", shape: [1], dtype: "float32" },
           { name: "difficulty", shape: [1], dtype: "float32" }],
  outputs: [{ name: "denoised", shape: [1, 1, "size", "size"], dtype: "float32" }],
};

let model: Promise<PageModel> | null = null, latest = 0;
let queue: Promise<void> = Promise.resolve();   // (one generate at a time: the model's buffers are shared)

scope.onmessage = ({ data: m }) => {
  if (m.kind === "load") {
    model = load(m);
    model.catch((e) => post({ kind: "failed", message: errorText(e) }));
  } else {
    latest = m.id;
    queue = queue.then(() => generate(m)).catch((e) => post({ kind: "error", id: m.id, message: errorText(e) }));
  }
};

async function load(request: LoadRequest): Promise<PageModel> {
  const loaded = await loadPageModel(request.url, SPEC, "a terrain denoiser (python -m tinyweb.export terrain-unet)", post, request), m = loaded.model;
  const weightsBytes = m.manifest.weights.shards.reduce((sum, s) => sum + s.bytes, 0);
  post({ kind: "loaded", model: { timings: m.timings, kernels: m.manifest.kernels.length, weightsBytes, size: loaded.sizes.size } });
  return loaded;
}

async function generate({ id, steps, seed, difficulty }: Extract<ToWorker, { kind: "generate" }>) {
  if (!model) throw new Error("generate before load");
  const { model: m, sizes: { size } } = await model;
  const levels = sigmas(steps), normal = gaussian(seed), label = Float32Array.of(difficultyInput(difficulty));
  let denoised: Float32Array | null = null;
  for (let i = 0; i < steps && id === latest; i++) {
    const noise = normal(size * size), t = performance.now();
    const out = await m.run({ noisy: noised(denoised, levels[i], noise), sigma: Float32Array.of(levels[i]), difficulty: label });
    denoised = out.denoised as Float32Array;
    // (a copy goes to the page: the next step still needs this one)
    const shown = denoised.slice();
    post({ kind: "step", step: { id, step: i, steps, sigma: levels[i], noise, denoised: shown, ms: performance.now() - t } },
         [noise.buffer, shown.buffer]);
  }
}
