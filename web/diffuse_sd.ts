// The diffuse page's Stable Diffusion mode (diffuse.html?sd=URL; web/diffuse.ts chooses it): the folder that `python -m
// tinyweb.export stable-diffusion` wrote (its text encoder, UNet and VAE decoder, tokenizer.json and scheduler.json) runs
// in a Web Worker (web/sd-worker.ts). Prompt, negative prompt, steps, guidance and seed, then Generate: the progress bar
// moves a step at a time, each step's image is drawn as it forms (its predicted clean latents decoded, unless "draw each
// step's image" is off) and shown small in the row of steps, then the final image; the times of the prompt's encoding,
// each step and the decoding. Also shown: the adapter, and why the model cannot run.
// For tests and scripts: window.diffuseDemo holds the sampler's functions, the model's facts, the tokenizer and the last
// run (its prompt's ids, initial latents, step times and final image); <body data-state> is loading, ready, running,
// done or error.
import { ClipTokenizer } from "./clip_tokenizer.js";
import { loadRequest, pageModelURL, watchPageWorker } from "./page_model.js";
import type { FromWorker, LoadedSD, SDRequest, ToWorker } from "./sd-worker.js";
import * as sampler from "./sd_sampler.js";

interface Run extends Omit<SDRequest, "id"> {
  ids: number[]; latents: Float32Array | null; encodeMs: number; stepMs: number[]; decodeMs: number; image: Float32Array | null;
}
export interface SDDemo {
  sampler: typeof sampler; model: Omit<LoadedSD, "tokenizerJSON"> | null; tokenizer: ClipTokenizer | null; result: Run | null;
  firstImageAt: number | null;
}
export const demo: SDDemo = { sampler, model: null, tokenizer: null, result: null, firstImageAt: null };

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const setState = (s: "loading" | "ready" | "running" | "done" | "error") => { document.body.dataset.state = s; };
const [adapterInfo, modelInfo, loading, loadingText, notice, status, times, thumbs, sizeInfo] =
  ["adapter", "model", "loading", "progress-text", "notice", "status", "times", "thumbs", "sd-size"].map((id) => $(id));
const [negativeInput, stepsInput, guidanceInput, seedInput, preview] =
  ["negative", "steps", "guidance", "seed", "preview"].map((id) => $<HTMLInputElement>(id));
const promptInput = $<HTMLTextAreaElement>("prompt");
const [generateButton, randomSeed] = ["generate", "random-seed"].map((id) => $<HTMLButtonElement>(id));
const [loadBar, stepBar] = ["progress", "step-progress"].map((id) => $<HTMLProgressElement>(id));
const imageCanvas = $<HTMLCanvasElement>("image");

const modelURL = pageModelURL(null, "sd");
// (the steps' range is the terrain mode's until the plans say how far it goes)
const DEFAULT_STEPS = 20;
document.title = "tinyweb · Stable Diffusion";
modelInfo.textContent = modelURL.pathname;
stepsInput.max = stepsInput.value = $("steps-value").textContent = String(DEFAULT_STEPS);
status.textContent = "Generate draws an image: the prompt encoded, one run of the UNet per step, the image decoded.";
setState("loading");

const worker = new Worker(new URL("./sd-worker.ts", import.meta.url), { type: "module" });
const send = (m: ToWorker) => worker.postMessage(m);
let lastId = 0;
watchPageWorker<FromWorker>(worker, (m) => {
  if (m.kind === "loaded") loaded(m.model);
  else if (m.id !== lastId) return;
  else if (m.kind === "start") started(m.ids, m.latents, m.ms);
  else if (m.kind === "step") showStep(m.step, m.steps, m.ms, m.preview);
  else if (m.kind === "done") finish(m.image, m.ms);
  else { status.textContent = `The image could not be generated: ${m.message}`; setState("error"); }
}, () => {
  generateButton.disabled = true;
  status.textContent = "";
  setState("error");
});
send(loadRequest(modelURL));

const duration = (ms: number) => ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;

function loaded({ tokenizerJSON, ...m }: LoadedSD) {
  demo.model = m;
  demo.tokenizer = new ClipTokenizer(tokenizerJSON);
  loading.hidden = true;
  sizeInfo.textContent = `text to image · ${m.width} × ${m.height}`;
  const seconds = Math.max(...Object.values(m.timings).map((t) => t.total));
  modelInfo.textContent = `${modelURL.pathname} · ${(m.weightsBytes / 1e6).toFixed(1)} MB of weights · ${m.kernels} kernels in 3 parts · ` +
                          `${m.scheduler} · loaded in ${seconds.toFixed(1)} s`;
  stepsInput.max = String(m.maxSteps);
  if (Number(stepsInput.value) > m.maxSteps) stepsInput.value = $("steps-value").textContent = String(m.maxSteps);
  imageCanvas.width = m.width;
  imageCanvas.height = m.height;
  generateButton.disabled = false;
  setState("ready");
}

function generate() {
  const steps = Number(stepsInput.value), seed = Number(seedInput.value), guidance = Number(guidanceInput.value);
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
    status.textContent = `The seed must be a whole number from 0 to ${0xffffffff}.`;
    return;
  }
  const request = { prompt: promptInput.value, negative: negativeInput.value, steps, seed, guidance, preview: preview.checked };
  demo.result = { ...request, ids: [], latents: null, encodeMs: 0, stepMs: [], decodeMs: 0, image: null };
  stepBar.value = 0;
  times.replaceChildren();
  thumbs.replaceChildren();
  status.textContent = "encoding the prompt…";
  setState("running");
  send({ kind: "generate", id: ++lastId, ...request });
}

function started(ids: number[], latents: Float32Array, ms: number) {
  Object.assign(demo.result!, { ids, latents, encodeMs: ms });
  addTime(`prompt ${duration(ms)}`);
  const limit = demo.tokenizer!.maxLength;
  status.textContent = `step 1 of ${demo.result!.steps}…` +
    (ids.length > limit ? ` (the prompt's ${ids.length} tokens are more than ${limit}: its end is left out)` : "");
}

function showStep(step: number, steps: number, ms: number, image: Float32Array | null) {
  demo.result!.stepMs.push(ms);
  addTime(`${step + 1}. ${duration(ms)}`);
  stepBar.value = (step + 1) / steps;
  if (image) show(image, `step ${step + 1}`);
  status.textContent = step + 1 < steps ? `step ${step + 2} of ${steps}…` : "decoding the image…";
}

function finish(image: Float32Array, ms: number) {
  const r = demo.result!, total = r.stepMs.reduce((a, b) => a + b, 0);
  Object.assign(r, { image, decodeMs: ms });
  addTime(`image ${duration(ms)}`);
  show(image, "final");
  status.textContent = `${r.steps} step${r.steps > 1 ? "s" : ""} in ${duration(total)} (${duration(total / r.steps)} per step) · ` +
                       `seed ${r.seed} · guidance ${r.guidance}`;
  setState("done");
}

function addTime(text: string) {
  const li = document.createElement("li");
  li.textContent = text;
  times.append(li);
}

/** An image (height x width x 3 in [0, 1]) drawn as the large picture and added small to the row of steps. */
function show(image: Float32Array, caption: string) {
  const { width, height } = imageCanvas, thumb = document.createElement("canvas"), figure = document.createElement("figure");
  const pixels = new ImageData(width, height);
  pixels.data.set(sampler.rgba(image));
  for (const canvas of [imageCanvas, thumb]) {
    canvas.width = width;
    canvas.height = height;
    canvas.getContext("2d")!.putImageData(pixels, 0, 0);
  }
  figure.append(thumb, caption);
  thumbs.append(figure);
  demo.firstImageAt ??= performance.now();
}

for (const [input, output] of [[stepsInput, "steps-value"], [guidanceInput, "guidance-value"]] as const)
  input.addEventListener("input", () => { $(output).textContent = input.value; });
generateButton.addEventListener("click", generate);
randomSeed.addEventListener("click", () => {
  seedInput.value = String(crypto.getRandomValues(new Uint32Array(1))[0]);
  if (!generateButton.disabled) generate();
});
