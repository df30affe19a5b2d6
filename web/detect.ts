// The detect page: a photo (picked, dropped, or the model folder's sample) or the camera's frames -> boxes drawn over
// the image, with each box's class and score. The model is a YOLOv8 exported by tinyweb (python -m demos.detect --export
// DIR: WGSL kernels, manifest.json, weights, and detect.json with the class names and the sample photo's name), from
// models/yolov8s-fall/ next to the page, or the folder `?model=URL` names. It runs in a Web Worker (web/detect_worker.ts:
// the model loaded by web/page_model.ts, the letterbox and the postprocessing of web/detect_post.ts).
// For tests and the console: `window.detectResult` holds the last result (its detections in the image's pixels, the
// times, `at`: seconds since the page was opened), `window.detectModel` the model's info once loaded or the error that
// stopped it, and `window.detectPost` the pure pre- and postprocessing functions.
import * as detectPost from "./detect_post.js";
import type { Detection } from "./detect_post.js";
import type { DetectResult, FromDetectWorker, ModelInfo, ToDetectWorker } from "./detect_worker.js";
import { adapterText, loadProgress, loadRequest, pageModelURL } from "./page_model.js";

/** What detect.json (next to the model's manifest) says; all optional. */
interface ModelMeta { title?: string; names?: string[]; sample?: string; credit?: string }
interface PageResult extends DetectResult { source: string; imageSize: [number, number]; at: number }

declare global {
  interface Window { detectResult?: PageResult; detectModel?: ModelInfo | { error: string }; detectPost?: typeof detectPost }
}
window.detectPost = detectPost;

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const stage = $("stage"), view = $("view"), hint = $("hint"), status = $("status"), notice = $("notice");
const imageCanvas = $<HTMLCanvasElement>("image"), boxCanvas = $<HTMLCanvasElement>("boxes"), video = $<HTMLVideoElement>("video");
const progress = $<HTMLProgressElement>("progress"), list = $("list");
const sampleButton = $<HTMLButtonElement>("sample"), cameraButton = $<HTMLButtonElement>("camera");
const confInput = $<HTMLInputElement>("conf"), iouInput = $<HTMLInputElement>("iou");
const COLORS = ["#2e7d32", "#d50000", "#1565c0", "#ff6f00", "#6a1b9a", "#00838f", "#ad1457", "#558b2f", "#4e342e", "#283593"];
const color = (classId: number) => COLORS[classId % COLORS.length];

const modelURL = pageModelURL("models/yolov8s-fall/");

function showNotice(text: string) {
  notice.textContent = text;
  notice.hidden = false;
}
function failed(error: string) {
  window.detectModel = { error };
  status.textContent = "the model could not be loaded";
  progress.hidden = true;
  sampleButton.disabled = true;
  showNotice(error);
}
const seconds = (s: number) => (s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(s < 10 ? 2 : 1)} s`);

// ---------------------------------------------------------------------------------------------------------------
// the worker: requests by id, one at a time

const worker = new Worker(new URL("./detect_worker.ts", import.meta.url), { type: "module" });
const waiting = new Map<number, { resolve: (r: DetectResult) => void; reject: (e: Error) => void }>();
let nextId = 0, queue: Promise<unknown> = Promise.resolve(), busy = false;   // (busy: an image is being run)

function ask(message: Extract<ToDetectWorker, { id: number }>, transfer: Transferable[] = []): Promise<DetectResult> {
  return new Promise((resolve, reject) => {
    waiting.set(message.id, { resolve, reject });
    worker.postMessage(message, transfer);
  });
}

// (one request in flight: an image picked while another runs waits its turn)
function serially<T>(work: () => Promise<T>): Promise<T> {
  const p = queue.then(work);
  queue = p.catch(() => {});
  return p;
}

const loadStarted = performance.now();
worker.onmessage = ({ data: m }: MessageEvent<FromDetectWorker>) => {
  if (m.kind === "adapter") $("adapter").textContent = adapterText(m.adapter);
  else if (m.kind === "progress") {
    const p = loadProgress(m.progress, (performance.now() - loadStarted) / 1000);
    progress.value = p.fraction;
    status.textContent = p.text;
  } else if (m.kind === "ready") {
    window.detectModel = m.info;
    progress.hidden = true;
    if (!busy) status.textContent = "ready";
    $("model").textContent += `, ${m.info.size} x ${m.info.size} input, ${m.info.classes} classes`;
    $("load").textContent = `${seconds((performance.now() - loadStarted) / 1000)} (weights ${seconds(m.info.load.weights)}, ` +
                            `kernels ${seconds(m.info.load.kernels)})`;
  } else if (m.kind === "failed") failed(m.message);
  else {
    const w = waiting.get(m.id)!;
    waiting.delete(m.id);
    if (m.kind === "result") w.resolve(m.result);
    else w.reject(new Error(m.error));
  }
};
worker.onerror = (e) => showNotice(`the detector's worker failed to start: ${e.message}`);

// ---------------------------------------------------------------------------------------------------------------
// images in, boxes out

const thresholds = () => ({ conf: Number(confInput.value), iou: Number(iouInput.value) });

// draws the image and runs it (the bitmap moves to the worker); the boxes are drawn when the answer comes
function detect(bitmap: ImageBitmap, source: string): Promise<PageResult> {
  return serially(async () => {
    if (window.detectModel && "error" in window.detectModel) throw new Error("there is no model to run it (see the message above)");
    const [w, h] = [bitmap.width, bitmap.height];
    if (imageCanvas.width !== w || imageCanvas.height !== h) [imageCanvas.width, imageCanvas.height, boxCanvas.width, boxCanvas.height] = [w, h, w, h];
    imageCanvas.getContext("2d")!.drawImage(bitmap, 0, 0);
    view.hidden = false;
    hint.hidden = true;
    busy = true;
    try { return show(await ask({ kind: "detect", id: nextId++, image: bitmap, ...thresholds() }, [bitmap]), source, [w, h]); }
    finally { busy = false; }
  });
}

function show(result: DetectResult, source: string, imageSize: [number, number]): PageResult {
  drawBoxes(result.detections);
  list.replaceChildren(...result.detections.map((d) => {
    const tr = document.createElement("tr");
    tr.innerHTML = `<td class="swatch"><span style="background:${color(d.classId)}"></span></td><td></td><td>${d.score.toFixed(3)}</td>` +
                   `<td>${d.box.map((v) => v.toFixed(0)).join(", ")}</td>`;
    tr.children[1].textContent = d.name;
    return tr;
  }));
  const ms = result.ms;
  if (ms.network) $("timing").textContent = `${seconds((ms.letterbox + ms.network + ms.postprocess) / 1000)} (network ${seconds(ms.network / 1000)}, ` +
                                            `letterbox ${seconds(ms.letterbox / 1000)}, boxes ${seconds(ms.postprocess / 1000)})`;
  status.textContent = `${result.detections.length} found in ${source}`;
  return window.detectResult = { ...result, source, imageSize, at: performance.now() / 1000 };
}

function drawBoxes(detections: Detection[]) {
  const ctx = boxCanvas.getContext("2d")!, { width, height } = boxCanvas;
  ctx.clearRect(0, 0, width, height);
  const line = Math.max(2, Math.round(Math.min(width, height) / 160)), font = Math.max(12, Math.round(Math.min(width, height) / 30));
  ctx.lineWidth = line;
  ctx.font = `600 ${font}px system-ui, sans-serif`;
  ctx.textBaseline = "top";
  for (const d of [...detections].reverse()) {   // (the best last: its label on top)
    const [x1, y1, x2, y2] = d.box, label = `${d.name} ${d.score.toFixed(2)}`;
    ctx.strokeStyle = ctx.fillStyle = color(d.classId);
    ctx.strokeRect(x1, y1, x2 - x1, y2 - y1);
    // the label above the box (inside it at the image's top edge), within the image at the right edge
    const tw = ctx.measureText(label).width + 2 * line, th = font + 2 * line;
    const tx = Math.max(Math.min(x1 - line / 2, width - tw), 0), ty = y1 - th >= 0 ? y1 - th : y1;
    ctx.fillRect(tx, ty, tw, th);
    ctx.fillStyle = "#fff";
    ctx.fillText(label, tx + line, ty + line);
  }
}

async function detectBlob(blob: Blob, source: string) {
  stopCamera();
  if (blob.type && !blob.type.startsWith("image/")) { status.textContent = `${source} is not an image (${blob.type})`; return; }
  status.textContent = `detecting in ${source}…`;
  try {
    // (the file's own pixel values, as the native demo reads them: no colour-profile conversion)
    const bitmap = await createImageBitmap(blob, { colorSpaceConversion: "none", premultiplyAlpha: "none" });
    await detect(bitmap, source);
  } catch (e) { status.textContent = `${source}: ${(e as Error).message}`; }
}

// the sliders postprocess the last output again (no new inference)
for (const input of [confInput, iouInput]) input.addEventListener("input", () => {
  const { conf, iou } = thresholds();
  $("conf-value").textContent = conf.toFixed(2);
  $("iou-value").textContent = iou.toFixed(2);
  if (!window.detectResult || camera) return;
  const { source, imageSize } = window.detectResult;
  serially(() => ask({ kind: "threshold", id: nextId++, conf, iou })).then((r) => show(r, source, imageSize), () => {});
});

$<HTMLInputElement>("file").addEventListener("change", (e) => {
  const file = (e.target as HTMLInputElement).files?.[0];
  if (file) detectBlob(file, file.name);
});
stage.addEventListener("dragover", (e) => { e.preventDefault(); stage.classList.add("dragging"); });
stage.addEventListener("dragleave", () => stage.classList.remove("dragging"));
stage.addEventListener("drop", (e) => {
  e.preventDefault();
  stage.classList.remove("dragging");
  const file = e.dataTransfer?.files[0];
  if (file) detectBlob(file, file.name);
});

// ---------------------------------------------------------------------------------------------------------------
// the camera: a frame, its boxes, the next frame (as fast as the model runs)

let camera: MediaStream | null = null;

function cameraError(e: unknown): string {
  const name = (e as Error)?.name;
  if (name === "NotAllowedError" || name === "SecurityError")
    return "The camera permission was denied: allow the camera for this site (the icon in the address bar), then press Start camera again.";
  if (name === "NotFoundError" || name === "OverconstrainedError") return "No camera was found.";
  if (name === "NotReadableError") return "The camera is in use by another application, or the system refused it.";
  return `The camera could not be started: ${(e as Error)?.message ?? e}`;
}

async function startCamera() {
  if (!navigator.mediaDevices?.getUserMedia) {
    showNotice("This browser gives the page no camera (getUserMedia needs https:// or localhost).");
    return;
  }
  try { camera = await navigator.mediaDevices.getUserMedia({ video: { width: { ideal: 640 }, height: { ideal: 480 } }, audio: false }); }
  catch (e) { showNotice(cameraError(e)); return; }
  notice.hidden = true;
  cameraButton.textContent = "Stop camera";
  video.srcObject = camera;
  await video.play();
  const times: number[] = [];
  while (camera) {
    try { await detect(await createImageBitmap(video), "the camera"); }
    catch (e) {
      status.textContent = `camera: ${(e as Error).message}`;
      stopCamera();
    }
    times.push(performance.now());
    if (times.length > 10) times.shift();
    if (times.length > 1) $("fps").textContent = `${((times.length - 1) * 1000 / (times[times.length - 1] - times[0])).toFixed(2)} FPS`;
  }
}

function stopCamera() {
  if (!camera) return;
  for (const track of camera.getTracks()) track.stop();
  camera = null;
  video.srcObject = null;
  cameraButton.textContent = "Start camera";
  $("fps").textContent = "off";
}

cameraButton.addEventListener("click", () => (camera ? stopCamera() : startCamera()));

// ---------------------------------------------------------------------------------------------------------------
// start: the model's description (class names, sample photo), then the model in the worker

async function start() {
  const meta: ModelMeta = await fetch(new URL("detect.json", modelURL)).then((r) => (r.ok ? r.json() : {}), () => ({}));
  $("model").textContent = `${meta.title ?? "YOLOv8"} from ${modelURL.pathname}`;
  worker.postMessage({ ...loadRequest(modelURL), names: meta.names ?? [] } satisfies ToDetectWorker);
  if (meta.credit) $("credit").textContent = meta.credit;
  if (meta.sample) {
    const sample = new URL(meta.sample, modelURL);
    sampleButton.disabled = false;
    sampleButton.addEventListener("click", async () => {
      const r = await fetch(sample);
      if (!r.ok) { status.textContent = `the sample ${sample.pathname}: HTTP ${r.status}`; return; }
      detectBlob(await r.blob(), `the sample (${sample.pathname.split("/").pop()})`);
    });
  }
}
start();
