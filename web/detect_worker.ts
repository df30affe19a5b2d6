// The detect page's Web Worker (web/detect.ts starts it): loads the exported YOLOv8 with tinyweb/model's loadModel and
// runs it, letterboxing the image and postprocessing the output here too, so the page stays responsive.
//
// The protocol (plain data; the images are transferred, not copied):
//   page -> worker   {kind: "load", url, names}                              once, first (names: the classes')
//                    {kind: "detect", id, image: ImageBitmap, conf, iou}     one at a time (the page waits for each answer)
//                    {kind: "threshold", id, conf, iou}                      the last image's output, postprocessed again
//   worker -> page   {kind: "progress", progress} | {kind: "ready", info} | {kind: "failed", error}
//                    {kind: "result", id, result} | {kind: "error", id, error}
import { loadModel, type LoadTimings, type Model, type ModelProgress } from "./model.js";
import { letterbox, postprocess, type Detection, type Frame } from "./detect_post.js";

export interface ModelInfo {
  size: number;             // the input's height and width
  classes: number;
  adapter: string;          // vendor, architecture, description; "(fallback adapter)" when it is one
  load: LoadTimings;        // seconds per loading stage
}
export interface DetectResult {
  detections: Detection[];
  frame: Frame;
  ms: { letterbox: number; network: number; postprocess: number };   // (network: 0 when only postprocessed again)
}
export type ToDetectWorker =
  | { kind: "load"; url: string; names: string[] }
  | { kind: "detect"; id: number; image: ImageBitmap; conf: number; iou: number }
  | { kind: "threshold"; id: number; conf: number; iou: number };
export type FromDetectWorker =
  | { kind: "progress"; progress: ModelProgress }
  | { kind: "ready"; info: ModelInfo }
  | { kind: "failed"; error: string }
  | { kind: "result"; id: number; result: DetectResult }
  | { kind: "error"; id: number; error: string };

// (a dedicated worker's global scope, typed here: the page's "dom" lib types `self` as a Window)
interface WorkerScope { postMessage(message: FromDetectWorker): void; onmessage: ((e: MessageEvent<ToDetectWorker>) => void) | null }
const scope = globalThis as unknown as WorkerScope;
const post = (m: FromDetectWorker) => scope.postMessage(m);
const message = (e: unknown) => (e instanceof Error ? `${e.name}: ${e.message}` : String(e));

let model: Promise<Model> | null = null;
let names: string[] = [];   // (a model given without them shows class numbers)
let last: { raw: Float32Array; anchors: number; frame: Frame } | null = null;   // the last image's output, for "threshold"

async function load(url: string): Promise<Model> {
  const m = await loadModel(url, { onProgress: (progress) => post({ kind: "progress", progress }) });
  const [input] = m.inputs, [output] = m.outputs;
  if (input.shape.length !== 4 || input.shape[1] !== 3 || input.shape[2] !== input.shape[3] || output.shape.length !== 3)
    throw new Error(`${url}: not a YOLOv8 export (input [${input.shape}], output [${output.shape}]; expected [1,3,N,N] and [1,4+classes,anchors])`);
  const a = m.device.adapterInfo;
  post({ kind: "ready", info: {
    size: input.shape[2], classes: output.shape[1] - 4, load: { ...m.timings },
    adapter: [a.vendor, a.architecture, a.description].filter(Boolean).join(" ") + (a.isFallbackAdapter ? " (fallback adapter)" : ""),
  } });
  return m;
}

async function detect(image: ImageBitmap, conf: number, iou: number): Promise<DetectResult> {
  const m = await model!;
  const t0 = performance.now(), canvas = new OffscreenCanvas(image.width, image.height);
  const ctx = canvas.getContext("2d", { willReadFrequently: true })!;
  ctx.drawImage(image, 0, 0);
  image.close();
  const rgba = ctx.getImageData(0, 0, canvas.width, canvas.height);
  const { input, frame } = letterbox({ data: rgba.data, width: rgba.width, height: rgba.height, channels: 4 }, m.inputs[0].shape[2]);
  const t1 = performance.now();
  const out = await m.run({ [m.inputs[0].name]: input });
  const t2 = performance.now();
  last = { raw: out[m.outputs[0].name] as Float32Array, anchors: m.outputs[0].shape[2], frame };
  const detections = postprocess(last.raw, last.anchors, frame, names, { conf, iou });
  return { detections, frame, ms: { letterbox: t1 - t0, network: t2 - t1, postprocess: performance.now() - t2 } };
}

function threshold(conf: number, iou: number): DetectResult {
  if (!last) throw new Error("no image has been run yet");
  const t = performance.now();
  const detections = postprocess(last.raw, last.anchors, last.frame, names, { conf, iou });
  return { detections, frame: last.frame, ms: { letterbox: 0, network: 0, postprocess: performance.now() - t } };
}

scope.onmessage = async ({ data: m }) => {
  if (m.kind === "load") {
    names = m.names;
    model = load(m.url);
    model.catch((e) => post({ kind: "failed", error: message(e) }));
    return;
  }
  try {
    if (!model) throw new Error(`detect worker: "${m.kind}" before "load"`);
    const result = m.kind === "detect" ? await detect(m.image, m.conf, m.iou) : threshold(m.conf, m.iou);
    post({ kind: "result", id: m.id, result });
  } catch (e) { post({ kind: "error", id: m.id, error: message(e) }); }
};
