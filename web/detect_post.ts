// The detect page's pre- and postprocessing, pure functions (no DOM, no GPU): what tinyweb/models/yolov8.py does around
// the network, for a model exported at a fixed square size (`python -m demos.detect --export`), so that the page finds
// the boxes the native demo finds.
//   letterbox(pixels, size)  -> the (1, 3, size, size) float32 input and the Frame: the image scaled to fit (OpenCV's
//                               bilinear resize, bit for bit), centred, padded with grey 114 (yolov8.letterbox, stride=None)
//   postprocess(raw, ...)    -> the detections: each anchor's best class over the confidence threshold, non-maximum
//                               suppression per class, boxes mapped back to the image (YOLOv8.postprocess)

export const PAD_VALUE = 114;    // the letterbox's grey
export const MAX_NMS = 30000;    // NMS looks at this many of the best boxes at most

/** An image's pixels, row by row: RGB or RGBA (ImageData; the alpha channel is ignored) bytes. */
export interface Pixels { data: ArrayLike<number>; width: number; height: number; channels: 3 | 4 }
/** Where letterbox put the image in the model's input: padding above and left of it, its scale per axis, its size. */
export interface Frame { top: number; left: number; scaleY: number; scaleX: number; height: number; width: number }
export interface Detection { box: [number, number, number, number]; score: number; classId: number; name: string }
export interface PostprocessOptions { conf?: number; iou?: number; maxDet?: number }

/** Python's round(): halves to the even neighbour (Math.round takes them up), and never -0. */
export function roundHalfEven(x: number): number {
  const r = Math.round(x);
  return (r - x === 0.5 && r % 2 !== 0 ? r - 1 : r) + 0;
}

/** The (1, 3, size, size) input in [0, 1] and where the image lies in it: scaled to fit size x size keeping its aspect
 * ratio, centred, the rest grey. */
export function letterbox(pixels: Pixels, size: number): { input: Float32Array; frame: Frame } {
  const { width: w, height: h } = pixels;
  if (!(w > 0 && h > 0)) throw new Error(`letterbox: the image is empty (${w} x ${h})`);
  const r = Math.min(size / h, size / w);
  const nh = Math.max(roundHalfEven(h * r), 1), nw = Math.max(roundHalfEven(w * r), 1);
  const dh = size - nh, dw = size - nw;
  // (the -0.1: an odd padding puts its extra pixel below and right, as ultralytics does)
  const top = roundHalfEven(dh / 2 - 0.1), left = roundHalfEven(dw / 2 - 0.1);
  const resized = opencvResize(pixels, nh, nw), plane = size * size;
  const input = new Float32Array(3 * plane).fill(PAD_VALUE / 255);
  for (let y = 0; y < nh; y++)
    for (let x = 0; x < nw; x++)
      for (let c = 0; c < 3; c++) input[c * plane + (top + y) * size + left + x] = resized[(y * nw + x) * 3 + c] / 255;
  return { input, frame: { top, left, scaleY: nh / h, scaleX: nw / w, height: h, width: w } };
}

// OpenCV's two taps for each of m outputs from n inputs, and their 11-bit weights: the source position in float32,
// clamped to the edge pixel (clamp: its x axis), or with rows past the edge read as the edge row (its y axis)
function taps(n: number, m: number, clamp: boolean) {
  const scale = 1 / (m / n), lo = new Int32Array(m), hi = new Int32Array(m), w0 = new Int32Array(m), w1 = new Int32Array(m);
  const edge = (i: number) => Math.min(Math.max(i, 0), n - 1);
  for (let d = 0; d < m; d++) {
    let f = Math.fround((d + 0.5) * scale - 0.5), s = Math.floor(f);
    f = Math.fround(f - s);
    if (clamp && s < 0) { f = 0; s = 0; }
    if (clamp && s >= n - 1) { f = 0; s = n - 1; }
    lo[d] = edge(s);
    hi[d] = edge(s + 1);
    w0[d] = roundHalfEven(Math.fround(1 - f) * 2048);
    w1[d] = roundHalfEven(f * 2048);
  }
  return { lo, hi, w0, w1 };
}

/** Bilinear resize to h x w RGB bytes, bit for bit OpenCV's cv2.resize(INTER_LINEAR) (yolov8.opencv_resize): 11-bit
 * fixed-point weights, a horizontal pass in integers, a vertical pass on the products' high halves, rounded once; an
 * exact halving is the 2 x 2 mean instead. */
export function opencvResize(pixels: Pixels, h: number, w: number): Uint8Array {
  const { data, width: w0, height: h0, channels: ch } = pixels, out = new Uint8Array(h * w * 3);
  const at = (y: number, x: number, c: number) => data[(y * w0 + x) * ch + c];
  if (h0 === 2 * h && w0 === 2 * w) {
    for (let y = 0; y < h; y++)
      for (let x = 0; x < w; x++)
        for (let c = 0; c < 3; c++)
          out[(y * w + x) * 3 + c] = (at(2 * y, 2 * x, c) + at(2 * y, 2 * x + 1, c) + at(2 * y + 1, 2 * x, c) + at(2 * y + 1, 2 * x + 1, c) + 2) >> 2;
    return out;
  }
  const tx = taps(w0, w, true), ty = taps(h0, h, false);
  const rows = new Int32Array(h0 * w * 3);   // the horizontal pass: weights summing to 2048
  for (let y = 0; y < h0; y++)
    for (let x = 0; x < w; x++)
      for (let c = 0; c < 3; c++)
        rows[(y * w + x) * 3 + c] = at(y, tx.lo[x], c) * tx.w0[x] + at(y, tx.hi[x], c) * tx.w1[x];
  for (let y = 0; y < h; y++)
    for (let i = 0; i < w * 3; i++) {
      const a = ((rows[ty.lo[y] * w * 3 + i] >> 4) * ty.w0[y]) >> 16, b = ((rows[ty.hi[y] * w * 3 + i] >> 4) * ty.w1[y]) >> 16;
      out[y * w * 3 + i] = Math.min(Math.max((a + b + 2) >> 2, 0), 255);
    }
  return out;
}

/** Intersection over union of two (x1, y1, x2, y2) boxes (0 when both are empty). */
export function iou(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const inter = Math.max(Math.min(a[2], b[2]) - Math.max(a[0], b[0]), 0) * Math.max(Math.min(a[3], b[3]) - Math.max(a[1], b[1]), 0);
  const union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return union > 0 ? inter / union : 0;
}

/** The detections in a raw YOLOv8 output `raw`, (1, 4 + classes, anchors) row-major: box centre and size in input
 * pixels, then each class's score. Each anchor's best class (the first of equals) where its score is over `conf`, best
 * first; a box goes when it overlaps a better one of its class by an IoU over `iou`; at most `maxDet`; boxes in the
 * image's pixels (`frame`), clipped to it. `names`: the classes' names (missing ones are called by their number). */
export function postprocess(raw: Float32Array, anchors: number, frame: Frame, names: string[] = [],
                            { conf = 0.25, iou: iouMax = 0.7, maxDet = 300 }: PostprocessOptions = {}): Detection[] {
  const nc = raw.length / anchors - 4;
  if (!Number.isInteger(nc) || nc < 1) throw new Error(`postprocess: ${raw.length} values are not (4 + classes) x ${anchors} anchors`);
  if (!(conf >= 0 && conf <= 1 && iouMax >= 0 && iouMax <= 1)) throw new Error(`postprocess: conf (${conf}) and iou (${iouMax}) must be in [0, 1]`);
  const rows: { box: number[]; score: number; classId: number }[] = [];
  for (let a = 0; a < anchors; a++) {
    let score = raw[4 * anchors + a], classId = 0;
    for (let c = 1; c < nc; c++) if (raw[(4 + c) * anchors + a] > score) { score = raw[(4 + c) * anchors + a]; classId = c; }
    if (!(score > conf)) continue;
    // (the corners in float32, as the native model computes them)
    const cx = raw[a], cy = raw[anchors + a], hw = Math.fround(raw[2 * anchors + a] / 2), hh = Math.fround(raw[3 * anchors + a] / 2);
    rows.push({ box: [Math.fround(cx - hw), Math.fround(cy - hh), Math.fround(cx + hw), Math.fround(cy + hh)], score, classId });
  }
  rows.sort((p, q) => q.score - p.score);   // (stable: equal scores keep the anchors' order)
  const kept: typeof rows = [];
  for (const r of rows.slice(0, MAX_NMS)) {
    if (kept.length === maxDet) break;
    if (kept.every((k) => k.classId !== r.classId || iou(k.box, r.box) <= iouMax)) kept.push(r);
  }
  const back = (v: number, pad: number, scale: number, limit: number) => Math.min(Math.max((v - pad) / scale, 0), limit);
  return kept.map(({ box: [x1, y1, x2, y2], score, classId }) => ({
    box: [back(x1, frame.left, frame.scaleX, frame.width), back(y1, frame.top, frame.scaleY, frame.height),
          back(x2, frame.left, frame.scaleX, frame.width), back(y2, frame.top, frame.scaleY, frame.height)],
    score, classId, name: names[classId] ?? String(classId),
  }));
}
