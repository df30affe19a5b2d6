/// <reference types="vite/client" />
// The classify page (classify.html): an image (dropped, picked, or the sample photo next to the model) classified by
// EfficientNet-Lite0 as exported by tinyweb.export, run by tinyweb/model in a Web Worker (web/classify-worker.ts) on
// WebGPU (else its WASM export on the CPU: web/page_model.ts); it shows ImageNet's five most likely classes with their probabilities, the time taken, the adapter, and says
// why when the browser or its GPU cannot run the model.
// The model: models/efficientnet-lite0/ next to the page (`npm run build:models` writes it: scripts/build_models.py), or
// ?model=URL, another export of an ImageNet EfficientNet-Lite (its folder; the sample button wants a sample.png there).
// window.classifyResult holds the latest result (the probabilities, and the model's input tensor), for scripts: the e2e
// test compares them with the native run.
import labelsText from "../tinyweb/models/imagenet_classes.txt?raw";
import type { Classified, FromWorker, LoadedModel, ToWorker } from "./classify-worker.js";
import { kernelsText, loadRequest, pageModelURL, watchPageWorker } from "./page_model.js";

declare global {
  interface Window { classifyResult?: Classified & { top: { index: number; label: string; probability: number }[]; at: number } }
}

const LABELS = labelsText.trimEnd().split("\n");   // ImageNet's class names, in the model's output order
const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const [modelInfo, loading, notice] = ["model", "loading", "notice"].map((id) => $(id));
const [drop, hint, imageName, results, timing] = ["drop", "drop-hint", "image-name", "results", "timing"].map((id) => $(id));
const preview = $<HTMLImageElement>("preview"), sample = $<HTMLButtonElement>("sample"), fileInput = $<HTMLInputElement>("file");

const modelURL = pageModelURL("models/efficientnet-lite0/");
modelInfo.textContent = modelURL.pathname;

const worker = new Worker(new URL("./classify-worker.ts", import.meta.url), { type: "module" });
const send = (m: ToWorker) => worker.postMessage(m);
let model: LoadedModel | null = null, lastId = 0, previewURL: string | null = null;
const page = watchPageWorker<FromWorker>(worker, (m) => {
  if (m.kind === "loaded") loaded(m.model);
  else if (m.kind === "result") { if (m.result.id === lastId) showResult(m.result); }
  else if (m.id === lastId) imageFailed(`${imageName.textContent} could not be classified: ${m.message}.`);
}, () => {
  sample.disabled = fileInput.disabled = true;
  drop.classList.add("disabled");
  timing.textContent = "";
});
send(loadRequest(modelURL));

const mb = (bytes: number) => (bytes / 1e6).toFixed(1);
const duration = (ms: number) => ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;

function loaded(m: LoadedModel) {
  if (m.classes !== LABELS.length) {
    page.fail(`The model cannot be used: ${modelURL} has ${m.classes} outputs; this page names ImageNet's ${LABELS.length} classes.`);
    return;
  }
  model = m;
  loading.hidden = true;
  modelInfo.textContent = `${modelURL.pathname} · ${m.size} × ${m.size} input · ${mb(m.weightsBytes)} MB of weights · ` +
                          `${kernelsText(m.kernels)} · loaded in ${m.timings.total.toFixed(1)} s`;
  if (lastId) timing.textContent = "classifying…";
}

function pick(image: Blob, name: string) {
  if (page.failed) return;
  if (image.type && !image.type.startsWith("image/")) {
    imageFailed(`${name} is not an image (its type is ${image.type}).`);
    return;
  }
  if (previewURL) URL.revokeObjectURL(previewURL);
  preview.src = previewURL = URL.createObjectURL(image);
  preview.hidden = false;
  hint.hidden = true;
  imageName.textContent = name;
  results.replaceChildren();
  notice.hidden = true;
  timing.textContent = model ? "classifying…" : "classifying as soon as the model is loaded…";
  send({ kind: "classify", id: ++lastId, image });
}

function imageFailed(text: string) {
  results.replaceChildren();
  timing.textContent = "";
  notice.textContent = text;
  notice.hidden = false;
}

function showResult(r: Classified) {
  const top = [...r.probabilities.keys()].sort((a, b) => r.probabilities[b] - r.probabilities[a]).slice(0, 5)
    .map((index) => ({ index, label: LABELS[index], probability: r.probabilities[index] }));
  results.replaceChildren(...top.map(({ index, label, probability }) => {
    const li = document.createElement("li"), percent = (probability * 100).toFixed(1);
    li.dataset.class = String(index);
    li.dataset.probability = String(probability);
    li.innerHTML = `<span class="label"></span><span class="bar"><span style="width: ${percent}%"></span></span>` +
                   `<span class="value">${percent} %</span>`;
    li.querySelector(".label")!.textContent = li.title = label;
    return li;
  }));
  timing.textContent = `inference ${duration(r.inferenceMs)} · preprocessing ${duration(r.preprocessMs)} ` +
                       `(${r.width} × ${r.height} → ${model!.size} × ${model!.size})`;
  window.classifyResult = { ...r, top, at: performance.now() };
}

drop.addEventListener("dragover", (e) => { e.preventDefault(); if (!page.failed) drop.classList.add("over"); });
drop.addEventListener("dragleave", () => drop.classList.remove("over"));
drop.addEventListener("drop", (e) => {
  e.preventDefault();
  drop.classList.remove("over");
  const file = e.dataTransfer?.files[0];
  if (file) pick(file, file.name);
});
fileInput.addEventListener("change", () => {
  const file = fileInput.files?.[0];
  if (file) pick(file, file.name);
  fileInput.value = "";   // (so that picking the same file again classifies it again)
});
sample.addEventListener("click", async () => {
  const url = new URL("sample.png", modelURL);
  try {
    const r = await fetch(url);
    if (!r.ok) throw new Error(`HTTP ${r.status} ${r.statusText}`);
    pick(await r.blob(), "the sample photo");
  } catch (e) { imageFailed(`The sample photo ${url} could not be fetched: ${(e as Error).message}`); }
});
