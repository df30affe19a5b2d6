// The detect page's Web Worker (web/detect.ts starts it): loads the exported YOLOv8 (web/page_model.ts) and runs it,
// letterboxing the image and postprocessing the output here too, so the page stays responsive.
//
// The protocol (plain data; the images are transferred, not copied):
//   page -> worker   page_model.ts's LoadRequest {kind: "load", url, backend, runtime} and names   once, first (names: the classes')
//                    {kind: "detect", id, image: ImageBitmap, conf, iou}     one at a time (the page waits for each answer)
//                    {kind: "threshold", id, conf, iou}                      the last image's output, postprocessed again
//   worker -> page   page_model.ts's adapter, progress and failed messages, then {kind: "ready", info}
//                    {kind: "result", id, result} | {kind: "error", id, error}
import type { LoadTimings } from "./model.js";
import { letterbox, postprocess, type Detection, type Frame } from "./detect_post.js";
import { errorText, loadPageModel, workerScope, type LoadMessage, type LoadRequest, type PageModel } from "./page_model.js";

export interface ModelInfo {
  size: number;             // the input's height and width
  classes: number;
  load: LoadTimings;        // seconds per loading stage
}
export interface DetectResult {
  detections: Detection[];
  frame: Frame;
  ms: { letterbox: number; network: number; postprocess: number };   // (network: 0 when only postprocessed again)
}
export type ToDetectWorker =
  | (LoadRequest & { names: string[] })
  | { kind: "detect"; id: number; image: ImageBitmap; conf: number; iou: number }
  | { kind: "threshold"; id: number; conf: number; iou: number };
export type FromDetectWorker =
  | LoadMessage
  | { kind: "ready"; info: ModelInfo }
  | { kind: "result"; id: number; result: DetectResult }
  | { kind: "error"; id: number; error: string };

const scope = workerScope<FromDetectWorker, ToDetectWorker>();
const post = (m: FromDetectWorker) => scope.postMessage(m);
const SPEC = {
  inputs: [{ name: "input", shape: [1, 3, "size", "size"], dtype: "float32" }],
  outputs: [{ name: "output", shape: [1, "4 + classes", "anchors"], dtype: "float32" }],
};

let model: Promise<PageModel> | null = null;
let names: string[] = [];   // (a model given without them shows class numbers)
let last: { raw: Float32Array; anchors: number; frame: Frame } | null = null;   // the last image's output, for "threshold"

async function load(request: LoadRequest): Promise<PageModel> {
  const loaded = await loadPageModel(request.url, SPEC, "a YOLOv8 detector (python -m demos.detect --export DIR)", post, request);
  post({ kind: "ready", info: { size: loaded.sizes.size, classes: loaded.sizes["4 + classes"] - 4, load: { ...loaded.model.timings } } });
  return loaded;
}

async function detect(image: ImageBitmap, conf: number, iou: number): Promise<DetectResult> {
  const { model: m, sizes } = await model!;
  const t0 = performance.now(), canvas = new OffscreenCanvas(image.width, image.height);
  const ctx = canvas.getContext("2d", { willReadFrequently: true })!;
  ctx.drawImage(image, 0, 0);
  image.close();
  const rgba = ctx.getImageData(0, 0, canvas.width, canvas.height);
  const { input, frame } = letterbox({ data: rgba.data, width: rgba.width, height: rgba.height, channels: 4 }, sizes.size);
  const t1 = performance.now();
  const out = await m.run({ input });
  const t2 = performance.now();
  last = { raw: out.output as Float32Array, anchors: sizes.anchors, frame };
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
    model = load(m);
    model.catch((e) => post({ kind: "failed", message: errorText(e) }));
    return;
  }
  try {
    if (!model) throw new Error(`detect worker: "${m.kind}" before "load"`);
    const result = m.kind === "detect" ? await detect(m.image, m.conf, m.iou) : threshold(m.conf, m.iou);
    post({ kind: "result", id: m.id, result });
  } catch (e) { post({ kind: "error", id: m.id, error: errorText(e) }); }
};
