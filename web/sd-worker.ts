// The diffuse page's Stable Diffusion worker (web/diffuse_sd.ts starts it): loads the three parts that `python -m
// tinyweb.export stable-diffusion` writes (text_encoder/, unet/, vae_decoder/: web/page_model.ts each) with the
// tokenizer.json and scheduler.json beside them, then generates as StableDiffusionPipeline does with an Euler scheduler:
// the prompt and the negative prompt tokenized (web/clip_tokenizer.ts) and encoded, seeded standard normal latents
// (web/diffuse_sampler.ts's generator), one UNet run per step on both halves, guided and stepped in TypeScript
// (web/sd_sampler.ts), the final latents decoded to the image. With `preview`, each step but the last also decodes its
// predicted clean latents: the image as it forms.
//
// page -> worker   page_model.ts's LoadRequest {kind: "load", url, backend, runtime}   once, first: the export's folder
//                  {kind: "generate", id, prompt, negative, steps, seed, guidance, preview}
//                                                          an image (a later generate stops an earlier one after its
//                                                          current step)
// worker -> page   page_model.ts's adapter and failed messages, the parts' loading progress summed, then
//                  {kind: "loaded", model}                 the parts, tokenizer and plans are ready
//                  {kind: "start", id, ids, latents, ms}   the prompt's token ids, the initial latents (standard normal),
//                                                          the time the two prompts took to encode
//                  {kind: "step", id, step, steps, ms, preview}   each step as it ends (preview: its image, or null)
//                  {kind: "done", id, image, ms}           the final image (height x width x 3 in [0, 1]), the decoding's time
//                  {kind: "error", id, message}            that generate failed
import { ClipTokenizer, type ClipTokenizerJSON } from "./clip_tokenizer.js";
import { gaussian } from "./diffuse_sampler.js";
import type { LoadTimings, Model, ModelProgress } from "./model.js";
import { errorText, loadPageModel, workerScope, type LoadMessage, type LoadRequest } from "./page_model.js";
import { eulerStep, guided, maxSteps, planFor, startSample, unetInput, type EulerPlans } from "./sd_sampler.js";

export interface SDRequest { id: number; prompt: string; negative: string; steps: number; seed: number; guidance: number; preview: boolean }
export type ToWorker = LoadRequest | ({ kind: "generate" } & SDRequest);
export interface LoadedSD {
  timings: Record<Part, LoadTimings>; kernels: number; weightsBytes: number; width: number; height: number; maxSteps: number;
  scheduler: string; tokenizerJSON: ClipTokenizerJSON;
}
export type FromWorker = LoadMessage | { kind: "loaded"; model: LoadedSD } |
  { kind: "start"; id: number; ids: number[]; latents: Float32Array; ms: number } |
  { kind: "step"; id: number; step: number; steps: number; ms: number; preview: Float32Array | null } |
  { kind: "done"; id: number; image: Float32Array; ms: number } | { kind: "error"; id: number; message: string };

const scope = workerScope<FromWorker, ToWorker>();
const post = (m: FromWorker, transfer: Transferable[] = []) => scope.postMessage(m, transfer);
const f32 = "float32";
const PARTS = {
  text_encoder: { inputs: [{ name: "input_ids", shape: [1, "tokens"], dtype: "int32" }],
                  outputs: [{ name: "last_hidden_state", shape: [1, "tokens", "hidden"], dtype: f32 }] },
  unet: { inputs: [{ name: "latents", shape: [2, "channels", "height", "width"], dtype: f32 }, { name: "timestep", shape: [1], dtype: f32 },
                   { name: "encoder_hidden_states", shape: [2, "tokens", "hidden"], dtype: f32 }],
          outputs: [{ name: "noise", shape: [2, "channels", "height", "width"], dtype: f32 }] },
  vae_decoder: { inputs: [{ name: "latents", shape: [1, "channels", "height", "width"], dtype: f32 }],
                 outputs: [{ name: "image", shape: [1, "imageHeight", "imageWidth", 3], dtype: f32 }] },
};
type Part = keyof typeof PARTS;
const what = (part: Part) => `Stable Diffusion's ${part} (python -m tinyweb.export stable-diffusion)`;

interface Loaded { models: Record<Part, Model>; tokenizer: ClipTokenizer; plans: EulerPlans; latentSize: number[] }
let loaded: Promise<Loaded> | null = null, latest = 0;
let queue: Promise<void> = Promise.resolve();   // (one generate at a time: the models' buffers are shared)

scope.onmessage = ({ data: m }) => {
  if (m.kind === "load") {
    loaded = load(m);
    loaded.catch((e) => post({ kind: "failed", message: errorText(e) }));
  } else {
    latest = m.id;
    queue = queue.then(() => generate(m)).catch((e) => post({ kind: "error", id: m.id, message: errorText(e) }));
  }
};

async function load(request: LoadRequest): Promise<Loaded> {
  const folder = request.url.replace(/\/?$/, "/");
  const beside = async <T>(name: string): Promise<T> => {
    const r = await fetch(new URL(name, folder));
    if (!r.ok) throw new Error(`${new URL(name, folder)}: HTTP ${r.status} (python -m tinyweb.export stable-diffusion writes it)`);
    return await r.json() as T;
  };
  // (the parts load at once; their progress is shown as one)
  const progress = new Map<Part, ModelProgress>();
  const partPost = (part: Part) => (m: LoadMessage) => {
    if (m.kind !== "progress") return post(m);
    progress.set(part, m.progress);
    const sum = (k: keyof ModelProgress) => [...progress.values()].reduce((s, p) => s + p[k], 0);
    post({ kind: "progress", progress: { weightsLoaded: sum("weightsLoaded"), weightsTotal: sum("weightsTotal"),
                                         kernelsReady: sum("kernelsReady"), kernelsTotal: sum("kernelsTotal") } });
  };
  const names = Object.keys(PARTS) as Part[];
  // (a part's WASM export: in the export's wasm/ folder, as `demos.diffusion --export DIR/wasm --target wasm` writes it)
  const parts = names.map((p) => loadPageModel(new URL(`${p}/`, folder).href, PARTS[p], what(p), partPost(p), request,
                                               new URL(`wasm/${p}/`, folder).href));
  const [pages, tokenizerJSON, plans] = await Promise.all([Promise.all(parts), beside<ClipTokenizerJSON>("tokenizer.json"),
                                                           beside<EulerPlans>("scheduler.json")])
    .catch(async (e) => { for (const p of parts) p.then((m) => m.model.destroy(), () => {}); throw e; });
  const models = Object.fromEntries(names.map((p, i) => [p, pages[i].model])) as Record<Part, Model>;
  const [text, unet, vae] = pages.map((p) => p.sizes), tokenizer = new ClipTokenizer(tokenizerJSON);
  const mismatch = text.tokens !== tokenizer.maxLength ? `the text encoder takes ${text.tokens} tokens, the tokenizer gives ${tokenizer.maxLength}` :
    text.hidden !== unet.hidden ? `the text encoder gives ${text.hidden} features per token, the UNet takes ${unet.hidden}` :
    text.tokens !== unet.tokens ? `the text encoder gives ${text.tokens} tokens, the UNet takes ${unet.tokens}` :
    ["channels", "height", "width"].some((k) => unet[k] !== vae[k]) ? `the UNet's latents are ${unet.channels} x ${unet.height} x ` +
      `${unet.width}, the VAE decoder's ${vae.channels} x ${vae.height} x ${vae.width}` : null;
  if (mismatch) {
    for (const m of Object.values(models)) m.destroy();
    throw new Error(`The model cannot be used: its parts do not fit together: ${mismatch}`);
  }
  const sum = (get: (m: Model) => number) => Object.values(models).reduce((s, m) => s + get(m), 0);
  post({ kind: "loaded", model: {
    timings: Object.fromEntries(names.map((p) => [p, models[p].timings])) as Record<Part, LoadTimings>,
    kernels: sum((m) => m.manifest.kernels.length), weightsBytes: sum((m) => m.manifest.weights.shards.reduce((s, f) => s + f.bytes, 0)),
    width: vae.imageWidth, height: vae.imageHeight, maxSteps: maxSteps(plans), scheduler: plans.scheduler, tokenizerJSON } });
  return { models, tokenizer, plans, latentSize: [unet.channels, unet.height, unet.width] };
}

async function generate(r: Extract<ToWorker, { kind: "generate" }>) {
  if (!loaded) throw new Error("generate before load");
  const { models, tokenizer, plans, latentSize } = await loaded, plan = planFor(plans, r.steps);
  let t = performance.now();
  const encode = async (text: string) =>
    (await models.text_encoder.run({ input_ids: tokenizer.inputIds(text) })).last_hidden_state as Float32Array;
  const [negative, prompt] = [await encode(r.negative), await encode(r.prompt)];
  const context = new Float32Array(negative.length * 2);
  context.set(negative);
  context.set(prompt, negative.length);
  const latents = gaussian(r.seed)(latentSize.reduce((a, b) => a * b));
  post({ kind: "start", id: r.id, ids: tokenizer.encode(r.prompt), latents, ms: performance.now() - t });
  const decode = async (x: Float32Array) => (await models.vae_decoder.run({ latents: x })).image as Float32Array;
  let sample = startSample(latents, plan);
  for (let i = 0; i < r.steps; i++) {
    if (r.id !== latest) return;
    t = performance.now();
    const { noise } = await models.unet.run({ latents: unetInput(sample, plan, i), timestep: Float32Array.of(plan.timesteps[i]),
                                              encoder_hidden_states: context });
    const step = eulerStep(sample, guided(noise as Float32Array, r.guidance), plan, i);
    sample = step.next;
    const preview = r.preview && i + 1 < r.steps ? await decode(step.x0) : null;
    post({ kind: "step", id: r.id, step: i, steps: r.steps, ms: performance.now() - t, preview }, preview ? [preview.buffer] : []);
  }
  t = performance.now();
  const image = await decode(sample);
  post({ kind: "done", id: r.id, image, ms: performance.now() - t }, [image.buffer]);
}
