// The classify page's Web Worker (web/classify.ts starts it): it loads the exported model (web/page_model.ts), turns
// image files into the model's input and runs it, so that neither the download, the preprocessing nor the waits on the
// GPU hold up the page.
//
// page -> worker   page_model.ts's LoadRequest {kind: "load", url, backend, runtime}   once, first: the model's folder
//                  {kind: "classify", id, image}     an image file (a Blob); waits for the model when it is not loaded yet
// worker -> page   page_model.ts's adapter, progress and failed messages, then
//                  {kind: "loaded", model}           the model is ready
//                  {kind: "result", result} | {kind: "error", id, message}   for each image, in the order sent
import type { LoadTimings } from "./model.js";
import { errorText, loadPageModel, workerScope, type LoadMessage, type LoadRequest, type PageModel } from "./page_model.js";

export type ToWorker = LoadRequest | { kind: "classify"; id: number; image: Blob };
export interface LoadedModel { timings: LoadTimings; kernels: number; weightsBytes: number; size: number; classes: number }
/** One image's result: the class probabilities, and the model's input (the preprocessed image, (1, 3, size, size)). */
export interface Classified {
  id: number; probabilities: Float32Array; input: Float32Array; width: number; height: number;
  preprocessMs: number; inferenceMs: number;
}
export type FromWorker = LoadMessage | { kind: "loaded"; model: LoadedModel } | { kind: "result"; result: Classified } |
  { kind: "error"; id: number; message: string };

// the normalization EfficientNet-Lite was trained with: (x - 127) / 128 (tinyweb/models/efficientnet.py's PIXEL_MEAN, PIXEL_STD)
const PIXEL_MEAN = 127, PIXEL_STD = 128;

const scope = workerScope<FromWorker, ToWorker>();
const post = (message: FromWorker, transfer: Transferable[] = []) => scope.postMessage(message, transfer);
const SPEC = {
  inputs: [{ name: "input", shape: [1, 3, "size", "size"], dtype: "float32" }],
  outputs: [{ name: "output", shape: [1, "classes"], dtype: "float32" }],
};

let model: Promise<PageModel> | null = null;

scope.onmessage = ({ data: m }) => {
  if (m.kind === "load") {
    model = load(m);
    model.catch((e) => post({ kind: "failed", message: errorText(e) }));
  } else classify(m.id, m.image).catch((e) => post({ kind: "error", id: m.id, message: errorText(e) }));
};

async function load(request: LoadRequest): Promise<PageModel> {
  const loaded = await loadPageModel(request.url, SPEC, "an image classifier (python -m tinyweb.export efficientnet-lite0)", post, request);
  const { model: m, sizes: { size, classes } } = loaded;
  const weightsBytes = m.manifest.weights.shards.reduce((sum, s) => sum + s.bytes, 0);
  post({ kind: "loaded", model: { timings: m.timings, kernels: m.manifest.kernels.length, weightsBytes, size, classes } });
  return loaded;
}

async function classify(id: number, image: Blob) {
  if (!model) throw new Error("classify before load");
  const { model: m, sizes: { size } } = await model;
  const t0 = performance.now();
  const { data, width, height } = await decode(image);
  const input = preprocess(data, width, height, size);
  const t1 = performance.now();
  const logits = (await m.run({ input })).output;
  const t2 = performance.now();
  const probabilities = softmax(logits);
  post({ kind: "result", result: { id, probabilities, input, width, height, preprocessMs: t1 - t0, inferenceMs: t2 - t1 } },
       [probabilities.buffer, input.buffer]);
}

// The file's RGBA pixels as stored: no color profile or gamma applied and alpha not premultiplied, as Pillow reads them
// (demos.classify); EXIF orientation is applied, as the page shows the image. (A canvas keeps premultiplied alpha:
// translucent pixels may differ from Pillow's by rounding, transparent ones read as black.)
async function decode(image: Blob): Promise<ImageData> {
  let bitmap: ImageBitmap;
  try { bitmap = await createImageBitmap(image, { colorSpaceConversion: "none", premultiplyAlpha: "none" }); }
  catch { throw new Error(`it is not an image this browser can decode (type ${image.type || "unknown"})`); }
  const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
  const ctx = canvas.getContext("2d", { willReadFrequently: true })!;   // (a CPU canvas: read back as drawn)
  ctx.drawImage(bitmap, 0, 0);
  bitmap.close();
  return ctx.getImageData(0, 0, canvas.width, canvas.height);
}

const f32 = Math.fround;

// One axis's taps for output positions first..first+count-1 of an axis of n pixels resized to m: PyTorch's bilinear rule
// (align_corners=False, no antialiasing) with Tensor.interpolate's float32 roundings (the scale and the source position)
interface Tap { i0: number; i1: number; w0: number; w1: number }
function taps(n: number, m: number, first: number, count: number): Tap[] {
  const scale = f32(n / m);
  return Array.from({ length: count }, (_, k) => {
    const src = Math.max(0, f32((first + k + 0.5) * scale - 0.5)), i0 = Math.min(Math.floor(src), n - 1), lam = src - i0;
    return { i0, i1: n === m ? i0 : Math.min(i0 + 1, n - 1), w0: f32(1 - lam), w1: f32(lam) };
  });
}

// Python's round(): a half goes to the even neighbour
function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return r - x === 0.5 && r % 2 !== 0 ? r - 1 : r;
}

/** RGBA pixels -> the model's (1, 3, size, size) float32 input, as tinyweb.models.efficientnet.preprocess computes it
 * natively: the shorter side resized to `size` (bilinear: rows first, then columns), the center cropped, normalized.
 * Every product and sum is rounded to float32 where the native float32 kernel rounds it (a product or sum of two
 * float32 values is exact in a double, so Math.fround rounds it as float32 arithmetic does). */
function preprocess(rgba: Uint8ClampedArray, width: number, height: number, size: number): Float32Array {
  const scale = size / Math.min(height, width);
  const outH = Math.max(size, roundHalfEven(height * scale)), outW = Math.max(size, roundHalfEven(width * scale));
  const rows = taps(height, outH, Math.floor((outH - size) / 2), size), cols = taps(width, outW, Math.floor((outW - size) / 2), size);
  const out = new Float32Array(3 * size * size);
  for (let y = 0; y < size; y++) {
    const { i0: r0, i1: r1, w0: a0, w1: a1 } = rows[y];
    for (let x = 0; x < size; x++) {
      const { i0: c0, i1: c1, w0: b0, w1: b1 } = cols[x];
      for (let c = 0; c < 3; c++) {
        const at = (r: number, col: number) => rgba[(r * width + col) * 4 + c];
        const left = f32(f32(at(r0, c0) * a0) + f32(at(r1, c0) * a1)), right = f32(f32(at(r0, c1) * a0) + f32(at(r1, c1) * a1));
        out[(c * size + y) * size + x] = f32(f32(f32(f32(left * b0) + f32(right * b1)) - PIXEL_MEAN) / PIXEL_STD);
      }
    }
  }
  return out;
}

function softmax(logits: ArrayLike<number>): Float32Array {
  const values = Array.from(logits), max = Math.max(...values);
  const e = values.map((v) => Math.exp(v - max)), sum = e.reduce((a, b) => a + b, 0);
  return Float32Array.from(e, (v) => v / sum);
}
