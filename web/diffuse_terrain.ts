// The diffuse page's terrain mode (diffuse.html; web/diffuse.ts chooses it): heightmaps generated in the browser.
// adaptive-terrain-diffusion's UNet, as exported by `python -m tinyweb.export terrain-unet` (scripts/build_models.py
// writes it to models/terrain-unet/ next to the page; ?model=URL names another folder), runs in a Web Worker
// (web/diffuse-worker.ts) once per step of the sampler (web/diffuse_sampler.ts); each step's denoised map is drawn as it
// comes, with a terrain colormap and a hillshade, and shown small in the row of steps. Also shown: the time per step, the adapter, and why the model cannot run where
// WebGPU (and a WASM export: web/page_model.ts) or a limit it needs is lacking.
// For tests and scripts: window.diffuseDemo holds the sampler's functions, the model's facts and the last map's steps
// (each step's noise and denoised map); <body data-state> is loading, ready, running, done or error.
import type { FromWorker, LoadedModel, Step, ToWorker } from "./diffuse-worker.js";
import * as sampler from "./diffuse_sampler.js";
import { kernelsText, loadRequest, pageModelURL, watchPageWorker } from "./page_model.js";

interface Result { seed: number; steps: Step[]; heights: Float32Array | null }   // heights: the final map's, in metres
export interface TerrainDemo { sampler: typeof sampler; model: LoadedModel | null; result: Result | null; firstImageAt: number | null }
export const demo: TerrainDemo = { sampler, model: null, result: null, firstImageAt: null };

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const setState = (s: "loading" | "ready" | "running" | "done" | "error") => { document.body.dataset.state = s; };
const [modelInfo, loading, status, times, thumbs, legendTop] = ["model", "loading", "status", "times", "thumbs", "legend-top"].map((id) => $(id));
const [stepsInput, difficultyInput, seedInput, hillshade] = ["steps", "difficulty", "seed", "hillshade"].map((id) => $<HTMLInputElement>(id));
const [generateButton, randomSeed] = ["generate", "random-seed"].map((id) => $<HTMLButtonElement>(id));
const stepBar = $<HTMLProgressElement>("step-progress");
const mapCanvas = $<HTMLCanvasElement>("map");

const modelURL = pageModelURL("models/terrain-unet/");
modelInfo.textContent = modelURL.pathname;
setState("loading");

const worker = new Worker(new URL("./diffuse-worker.ts", import.meta.url), { type: "module" });
const send = (m: ToWorker) => worker.postMessage(m);
let lastId = 0;
watchPageWorker<FromWorker>(worker, (m) => {
  if (m.kind === "loaded") loaded(m.model);
  else if (m.kind === "step") { if (m.step.id === lastId) showStep(m.step); }
  else if (m.id === lastId) { status.textContent = `The map could not be generated: ${m.message}`; setState("error"); }
}, () => {
  generateButton.disabled = true;
  status.textContent = "";
  setState("error");
});
send(loadRequest(modelURL));

const mb = (bytes: number) => (bytes / 1e6).toFixed(1);
const duration = (ms: number) => ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;

function loaded(m: LoadedModel) {
  demo.model = m;
  loading.hidden = true;
  modelInfo.textContent = `${modelURL.pathname} · ${m.size} × ${m.size} · ${mb(m.weightsBytes)} MB of weights · ` +
                          `${kernelsText(m.kernels)} · loaded in ${m.timings.total.toFixed(1)} s`;
  generateButton.disabled = false;
  setState("ready");
}

function generate() {
  const steps = Number(stepsInput.value), seed = Number(seedInput.value), difficulty = Number(difficultyInput.value);
  if (!Number.isInteger(seed) || seed < 0 || seed > 0xffffffff) {
    status.textContent = `The seed must be a whole number from 0 to ${0xffffffff}.`;
    return;
  }
  demo.result = { seed, steps: [], heights: null };
  stepBar.value = 0;
  times.replaceChildren();
  thumbs.replaceChildren();
  status.textContent = `step 1 of ${steps}: denoising pure noise (σ ${sampler.SIGMA_MAX})…`;
  setState("running");
  send({ kind: "generate", id: ++lastId, steps, seed, difficulty });
}

function showStep(s: Step) {
  const result = demo.result!, last = s.step === s.steps - 1;
  result.steps.push(s);
  const h = sampler.heights(s.denoised);
  draw(mapCanvas, h);
  const figure = document.createElement("figure"), thumb = document.createElement("canvas");
  draw(thumb, h);
  figure.append(thumb, `σ ${s.sigma < 1 ? s.sigma.toFixed(3) : s.sigma.toFixed(1)}`);
  thumbs.append(figure);
  const li = document.createElement("li");
  li.textContent = `${s.step + 1}. ${duration(s.ms)}`;
  times.append(li);
  stepBar.value = (s.step + 1) / s.steps;
  demo.firstImageAt ??= performance.now();
  const total = result.steps.reduce((sum, t) => sum + t.ms, 0);
  if (last) {
    result.heights = h;
    status.textContent = `${s.steps} step${s.steps > 1 ? "s" : ""} in ${duration(total)} (${duration(total / s.steps)} per step) · ` +
                         `seed ${result.seed} · relief ${max(h).toFixed(1)} m`;
    setState("done");
  } else status.textContent = `step ${s.step + 2} of ${s.steps}: noised again to σ ${sampler.sigmas(s.steps)[s.step + 1].toPrecision(3)}, denoising…`;
}

const max = (a: Float32Array) => a.reduce((m, v) => Math.max(m, v), 0);

// the terrain colormap (sea blue -> green -> sand -> brown -> white, as matplotlib's "terrain", which the model's
// authors render with): [position, r, g, b] on the height over the map's highest point
const STOPS = [[0, 51, 51, 153], [0.15, 0, 153, 255], [0.25, 0, 204, 102], [0.5, 255, 255, 153], [0.75, 128, 92, 84], [1, 255, 255, 255]];
function color(t: number): [number, number, number] {
  const i = Math.max(1, STOPS.findIndex(([p]) => p >= t)), [p0, ...c0] = STOPS[i - 1], [p1, ...c1] = STOPS[i];
  const f = Math.min(1, Math.max(0, (t - p0) / (p1 - p0)));
  return [0, 1, 2].map((k) => c0[k] + f * (c1[k] - c0[k])) as [number, number, number];
}

// metres per pixel (the authors' horizontal scale), and the light for the hillshade: from the north-west (azimuth 315°,
// clockwise from north), 45° up, as (x east, y south, z up)
const CELL = 0.1, AZIMUTH = (315 * Math.PI) / 180, ALTITUDE = Math.PI / 4;
const LIGHT = [Math.sin(AZIMUTH) * Math.cos(ALTITUDE), -Math.cos(AZIMUTH) * Math.cos(ALTITUDE), Math.sin(ALTITUDE)];

/** A heightmap (metres, square) drawn into the canvas at one pixel per value; shaded by the cosine between the light and
 * each point's normal (-dh/dx, -dh/dy, 1), scaled so that flat ground keeps its colour. */
function draw(canvas: HTMLCanvasElement, h: Float32Array) {
  const n = Math.round(Math.sqrt(h.length)), top = max(h) || 1, shade = hillshade.checked;
  canvas.width = canvas.height = n;
  const ctx = canvas.getContext("2d")!, image = ctx.createImageData(n, n);
  const at = (y: number, x: number) => h[Math.min(n - 1, Math.max(0, y)) * n + Math.min(n - 1, Math.max(0, x))];
  for (let y = 0; y < n; y++) for (let x = 0; x < n; x++) {
    let light = 1;
    if (shade) {
      const dx = (at(y, x + 1) - at(y, x - 1)) / (2 * CELL), dy = (at(y + 1, x) - at(y - 1, x)) / (2 * CELL);
      const cos = (-dx * LIGHT[0] - dy * LIGHT[1] + LIGHT[2]) / Math.sqrt(dx * dx + dy * dy + 1);
      light = 0.45 + 0.55 * Math.max(0, cos) / LIGHT[2];
    }
    const [r, g, b] = color(h[y * n + x] / top), o = (y * n + x) * 4;
    image.data.set([r * light, g * light, b * light, 255], o);   // (clamped to 255 on slopes facing the light)
  }
  ctx.putImageData(image, 0, 0);
  if (canvas === mapCanvas) legendTop.textContent = `${top.toFixed(1)} m`;
}

function drawLegend() {
  const canvas = $<HTMLCanvasElement>("legend"), ctx = canvas.getContext("2d")!, image = ctx.createImageData(1, 256);
  for (let y = 0; y < 256; y++) image.data.set([...color(1 - y / 255), 255], y * 4);
  ctx.putImageData(image, 0, 0);
}
drawLegend();

stepsInput.addEventListener("input", () => { $("steps-value").textContent = stepsInput.value; });
difficultyInput.addEventListener("input", () => { $("difficulty-value").textContent = difficultyInput.value; });
generateButton.addEventListener("click", generate);
randomSeed.addEventListener("click", () => {
  seedInput.value = String(crypto.getRandomValues(new Uint32Array(1))[0]);
  if (!generateButton.disabled) generate();
});
hillshade.addEventListener("change", () => {
  const steps = demo.result?.steps ?? [], canvases = thumbs.querySelectorAll("canvas");
  steps.forEach((s, i) => draw(canvases[i], sampler.heights(s.denoised)));
  if (steps.length) draw(mapCanvas, sampler.heights(steps[steps.length - 1].denoised));
});
