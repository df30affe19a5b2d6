"""YOLOv8 object detectors (ultralytics' v8 detection models: scales n, s, m, l, x, any number of classes) with
ultralytics' parameter names ("model.0.conv.weight"), whose `.pt` checkpoints `YOLOv8.load` reads without torch or
ultralytics (`tinyweb.nn.state.torch_load_modules`: the pickled modules are read as inert data).

  model = YOLOv8.load("yolov8s.pt")                 # the scale, classes and names from the checkpoint
  for d in model.detect(pixels):                    # pixels: (H, W, 3) uint8 RGB, e.g. from a PNG
    print(d.name, d.score, d.box)                   # box: (x1, y1, x2, y2) in the image's pixels

`detect` does what ultralytics' `model.predict(image, imgsz=640)` does for one image: `letterbox`, the network, then
the boxes over the confidence threshold, class-aware non-maximum suppression and the boxes scaled back to the image.
Calling the model gives the raw head output, ultralytics' DetectionModel's in eval mode: (N, 4 + classes, anchors) of
box centre and size in input pixels, then each class's sigmoid score (8400 anchors for a 640 x 640 input)."""
from __future__ import annotations
import math, os, struct
from typing import NamedTuple, Optional, Sequence
from tinyweb import Device, Tensor, dtypes
from tinyweb.nn import Conv2d, BatchNorm2d
from tinyweb.nn.state import torch_load_modules, pickled_state_dict, load_state_dict, PickledObject

# scale -> (depth, width, max_channels), as ultralytics' yolov8.yaml
SCALES = {"n": (0.33, 0.25, 1024), "s": (0.33, 0.50, 1024), "m": (0.67, 0.75, 768), "l": (1.00, 1.00, 512), "x": (1.00, 1.25, 512)}
# yolov8.yaml's layers: (inputs: -1 the previous layer, repeats, kind, (channels, kernel, stride) | (channels, shortcut) | ...)
LAYERS = [(-1, 1, "Conv", (64, 3, 2)), (-1, 1, "Conv", (128, 3, 2)), (-1, 3, "C2f", (128, True)), (-1, 1, "Conv", (256, 3, 2)),
          (-1, 6, "C2f", (256, True)), (-1, 1, "Conv", (512, 3, 2)), (-1, 6, "C2f", (512, True)), (-1, 1, "Conv", (1024, 3, 2)),
          (-1, 3, "C2f", (1024, True)), (-1, 1, "SPPF", (1024, 5)),
          (-1, 1, "Upsample", ()), ((-1, 6), 1, "Concat", ()), (-1, 3, "C2f", (512, False)),
          (-1, 1, "Upsample", ()), ((-1, 4), 1, "Concat", ()), (-1, 3, "C2f", (256, False)),
          (-1, 1, "Conv", (256, 3, 2)), ((-1, 12), 1, "Concat", ()), (-1, 3, "C2f", (512, False)),
          (-1, 1, "Conv", (512, 3, 2)), ((-1, 9), 1, "Concat", ()), (-1, 3, "C2f", (1024, False)),
          ((15, 18, 21), 1, "Detect", ())]
STRIDES = (8, 16, 32)   # of the Detect inputs (layers 15, 18, 21)
REG_MAX = 16            # DFL bins per box side
BN_EPS = 1e-3           # ultralytics sets every BatchNorm2d's eps to 1e-3
PAD_VALUE = 114         # the letterbox's grey
MAX_NMS = 30000         # ultralytics' NMS looks at this many of the best boxes at most

class Conv:
  """ultralytics' Conv: a bias-free convolution padded k // 2, batch norm, SiLU."""
  def __init__(self, c1: int, c2: int, k: int = 1, s: int = 1, device: Optional[str] = None):
    self.conv = Conv2d(c1, c2, k, s, k // 2, bias=False, device=device)
    self.bn = BatchNorm2d(c2, eps=BN_EPS, device=device)

  def __call__(self, x: Tensor) -> Tensor: return self.bn(self.conv(x)).silu()

def _sequential(layers: Sequence, x: Tensor) -> Tensor:
  for layer in layers: x = layer(x)
  return x

class Bottleneck:
  """Two 3x3 Convs (the hidden width is the output's), the input added back when `add`."""
  def __init__(self, c1: int, c2: int, shortcut: bool, device: Optional[str] = None):
    self.cv1, self.cv2 = Conv(c1, c2, 3, device=device), Conv(c2, c2, 3, device=device)
    self.add = shortcut and c1 == c2

  def __call__(self, x: Tensor) -> Tensor:
    y = self.cv2(self.cv1(x))
    return x + y if self.add else y

class C2f:
  """CSP bottleneck with two convolutions: cv1's output split in halves, n Bottlenecks chained on the second half,
  every intermediate concatenated into cv2."""
  def __init__(self, c1: int, c2: int, n: int, shortcut: bool, device: Optional[str] = None):
    c = c2 // 2
    self.cv1, self.cv2 = Conv(c1, 2 * c, device=device), Conv((2 + n) * c, c2, device=device)
    self.m = [Bottleneck(c, c, shortcut, device) for _ in range(n)]

  def __call__(self, x: Tensor) -> Tensor:
    y = list(self.cv1(x).chunk(2, 1))
    for m in self.m: y.append(m(y[-1]))
    return self.cv2(y[0].cat(*y[1:], dim=1))

class SPPF:
  """Spatial pyramid pooling, fast: cv1, then three k x k max pools in a row (stride 1, same size), all four into cv2."""
  def __init__(self, c1: int, c2: int, k: int, device: Optional[str] = None):
    self.cv1, self.cv2, self.k = Conv(c1, c1 // 2, device=device), Conv(c1 // 2 * 4, c2, device=device), k

  def __call__(self, x: Tensor) -> Tensor:
    y = [self.cv1(x)]
    for _ in range(3): y.append(y[-1].max_pool2d(self.k, 1, padding=self.k // 2))
    return self.cv2(y[0].cat(*y[1:], dim=1))

def upsample(x: Tensor) -> Tensor:
  """Nearest-neighbour upsampling by 2 (a view: each pixel expanded to 2 x 2)."""
  n, c, h, w = x.shape
  return x.reshape(n, c, h, 1, w, 1).expand(n, c, h, 2, w, 2).reshape(n, c, 2 * h, 2 * w)

def concat(xs: list[Tensor]) -> Tensor: return xs[0].cat(*xs[1:], dim=1)

class DFL:
  """Distribution focal loss's integral: each box side is the expected value of a softmax over REG_MAX bins, through a
  1x1 convolution whose weight is 0..REG_MAX-1 (a parameter of the checkpoint)."""
  def __init__(self, device: Optional[str] = None):
    self.conv = Conv2d(REG_MAX, 1, 1, bias=False, device=device)
    self.conv.weight = Tensor.arange(REG_MAX, dtype=dtypes.float32, device=device).reshape(1, REG_MAX, 1, 1).contiguous()

  def __call__(self, x: Tensor) -> Tensor:
    n, _, a = x.shape   # (N, 4 * REG_MAX, anchors) -> (N, 4, anchors)
    return self.conv(x.reshape(n, 4, REG_MAX, a).transpose(1, 2).softmax(1)).reshape(n, 4, a)

class Detect:
  """The detection head: per input level, a box branch (cv2: 4 * REG_MAX distance bins) and a class branch (cv3);
  boxes decoded from the distances to each anchor (a cell's centre) times the level's stride."""
  def __init__(self, nc: int, ch: Sequence[int], device: Optional[str] = None):
    c2, c3 = max(16, ch[0] // 4, REG_MAX * 4), max(ch[0], min(nc, 100))
    self.nc = nc
    self.cv2 = [[Conv(c, c2, 3, device=device), Conv(c2, c2, 3, device=device), Conv2d(c2, 4 * REG_MAX, 1, device=device)] for c in ch]
    self.cv3 = [[Conv(c, c3, 3, device=device), Conv(c3, c3, 3, device=device), Conv2d(c3, nc, 1, device=device)] for c in ch]
    self.dfl = DFL(device)

  def __call__(self, xs: list[Tensor]) -> Tensor:
    n = xs[0].shape[0]
    dist = self.dfl(Tensor.cat(*[_sequential(b, x).reshape(n, 4 * REG_MAX, -1) for b, x in zip(self.cv2, xs)], dim=-1))
    scores = Tensor.cat(*[_sequential(c, x).reshape(n, self.nc, -1) for c, x in zip(self.cv3, xs)], dim=-1).sigmoid()
    anchors, strides = [], []
    for x, s in zip(xs, STRIDES):   # each cell's centre (x, y), in cells of its level, row by row
      h, w = x.shape[2:]
      cx = (Tensor.arange(w, device=x.device).float() + 0.5).reshape(1, w).expand(h, w)
      cy = (Tensor.arange(h, device=x.device).float() + 0.5).reshape(h, 1).expand(h, w)
      anchors.append(cx.stack(cy).reshape(2, h * w))
      strides.append(Tensor.full((1, h * w), float(s), device=x.device))
    anchor, stride = Tensor.cat(*anchors, dim=1), Tensor.cat(*strides, dim=1)
    x1y1, x2y2 = anchor - dist[:, :2], anchor + dist[:, 2:]
    return (((x1y1 + x2y2) / 2).cat(x2y2 - x1y1, dim=1) * stride).cat(scores, dim=1)   # centre, size; scores

class Detection(NamedTuple):
  box: tuple[float, float, float, float]   # x1, y1, x2, y2 in the image's pixels
  score: float
  class_id: int
  name: str

class Frame(NamedTuple):
  """Where `letterbox` put an image in the model's input: the padding above and left of it, its scale on each axis,
  and its own size."""
  top: int
  left: int
  scale_y: float
  scale_x: float
  height: int
  width: int

  def to_image(self, x1: float, y1: float, x2: float, y2: float) -> tuple[float, float, float, float]:
    """A box in the input's pixels -> in the image's, clipped to the image."""
    def back(v: float, pad: int, scale: float, limit: int) -> float: return min(max((v - pad) / scale, 0.0), float(limit))
    return (back(x1, self.left, self.scale_x, self.width), back(y1, self.top, self.scale_y, self.height),
            back(x2, self.left, self.scale_x, self.width), back(y2, self.top, self.scale_y, self.height))

class YOLOv8:
  """ultralytics' YOLOv8 detection model for `scale` and `nc` classes (named `names`), its layers in `model` as
  yolov8.yaml lists them."""
  def __init__(self, scale: str = "n", nc: int = 80, names: Optional[Sequence[str]] = None, device: Optional[str] = None):
    if scale not in SCALES: raise ValueError(f"YOLOv8: unknown scale {scale!r}; the scales are {list(SCALES)}")
    if names is not None and len(names) != nc: raise ValueError(f"YOLOv8: {len(names)} class names for {nc} classes")
    depth, width, max_channels = SCALES[scale]
    self.scale, self.nc, self.names = scale, nc, list(names) if names is not None else [str(i) for i in range(nc)]
    self.model: list = []
    chans: list[int] = []   # each layer's output channels
    for f, n, kind, args in LAYERS:
      n = max(round(n * depth), 1) if n > 1 else n
      c1 = chans[-1] if chans else 3
      if kind in ("Conv", "C2f", "SPPF"):
        c2 = math.ceil(min(args[0], max_channels) * width / 8) * 8   # (ultralytics' make_divisible)
        layer = Conv(c1, c2, *args[1:], device=device) if kind == "Conv" else \
                C2f(c1, c2, n, args[1], device) if kind == "C2f" else SPPF(c1, c2, args[1], device)
      elif kind == "Upsample": layer, c2 = upsample, c1
      elif kind == "Concat": layer, c2 = concat, sum(chans[i] for i in f)
      else: layer, c2 = Detect(nc, [chans[i] for i in f], device), 0
      self.model.append(layer)
      chans.append(c2)

  def __call__(self, x: Tensor) -> Tensor:
    """(N, 3, H, W) RGB in [0, 1], H and W multiples of 32 -> (N, 4 + classes, anchors): boxes (centre x, centre y,
    width, height) in input pixels, then the class scores (sigmoid)."""
    if x.ndim != 4 or x.shape[1] != 3 or x.shape[2] % 32 or x.shape[3] % 32:
      raise ValueError(f"YOLOv8: expected (N, 3, H, W) images with H and W multiples of 32, got shape {x.shape}")
    outs: list[Tensor] = []
    for (f, _, _, _), layer in zip(LAYERS, self.model):
      inputs = x if f == -1 else [outs[i] for i in f]
      x = layer(inputs)
      outs.append(x)
    return x

  def detect(self, pixels: Tensor, conf: float = 0.25, iou: float = 0.7, max_det: int = 300, size: int = 640) -> list[Detection]:
    """The objects in one (H, W, 3) uint8 RGB image, best first, as ultralytics' `predict(image, imgsz=size, conf=conf,
    iou=iou, max_det=max_det)` finds them (see `postprocess`)."""
    x, frame = letterbox(pixels, size)
    return self.postprocess(self(x), frame, conf, iou, max_det)

  def postprocess(self, out: Tensor, frame: Frame, conf: float = 0.25, iou: float = 0.7, max_det: int = 300) -> list[Detection]:
    """The detections in the first image of a raw output: each anchor's best class where its score is over `conf`,
    then non-maximum suppression per class (a box goes when it overlaps a better one of its class by IoU over `iou`),
    at most `max_det`, best first, their boxes in the image's pixels (`frame`: what letterbox gave)."""
    if not (0 <= conf <= 1 and 0 <= iou <= 1): raise ValueError(f"YOLOv8.postprocess: conf ({conf}) and iou ({iou}) must be in [0, 1]")
    out = out[0]
    centre, half, scores = out[:2], out[2:4] / 2, out[4:]
    # each anchor's corners, best score and class are computed in the graph; the boxes over the threshold (a few
    # dozen) are sorted and suppressed on the host, where a loop over the survivors costs nothing
    rows = Tensor.cat(centre - half, centre + half, scores.max(0, keepdim=True), scores.argmax(0, keepdim=True).float()).T.tolist()
    kept: list[list[float]] = []
    for r in sorted((r for r in rows if r[4] > conf), key=lambda r: -r[4])[:MAX_NMS]:
      if len(kept) == max_det: break
      if all(k[5] != r[5] or _iou(k, r) <= iou for k in kept): kept.append(r)
    return [Detection(frame.to_image(*r[:4]), r[4], int(r[5]), self.names[int(r[5])]) for r in kept]

  @classmethod
  def load(cls, path, device: Optional[str] = None) -> "YOLOv8":
    """A model with the weights of an ultralytics YOLOv8 detection checkpoint (`.pt`, read without torch): its EMA
    model if saved, else its model (usually float16, loaded as float32). The scale comes from the first layer's width,
    the classes from the head, their names from the checkpoint."""
    # (float16: read where it can be cast, for devices without float16: the CPU device, or PYTHON where there is no
    # compiler, as in Pyodide)
    ck = torch_load_modules(path, device="CPU" if Device.check("CPU")[0] else "PYTHON")
    module = (ck.get("ema") or ck.get("model")) if isinstance(ck, dict) else None
    what = f"YOLOv8.load: {os.fspath(path)!r}" if isinstance(path, (str, os.PathLike)) else "YOLOv8.load"
    if not isinstance(module, PickledObject) or module.cls != "ultralytics.nn.tasks.DetectionModel":
      raise ValueError(f"{what} is not an ultralytics detection checkpoint (its model is "
                       f"{getattr(module, 'cls', type(module).__name__)}, not ultralytics.nn.tasks.DetectionModel)")
    state = pickled_state_dict(module)
    layers = module["_modules"].get("model")
    kinds = [getattr(v, "cls", "?").rpartition(".")[2] for v in layers["_modules"].values()] if isinstance(layers, PickledObject) else []
    if kinds != [kind for _, _, kind, _ in LAYERS] or not {"model.0.conv.weight", "model.22.cv3.0.2.weight"} <= set(state):
      raise ValueError(f"{what} is a detection model but not a YOLOv8: its layers are {kinds}")
    width, nc = state["model.0.conv.weight"].shape[0], state["model.22.cv3.0.2.weight"].shape[0]
    scale = next((s for s, (_, w, _) in SCALES.items() if round(64 * w) == width), None)
    if scale is None: raise ValueError(f"{what}: a first layer of {width} channels matches no YOLOv8 scale")
    names = dict(enumerate(n)) if isinstance(n := module.get("names"), list) else n   # ({class id: name}, or a list)
    names = [str(names[i]) for i in range(nc)] if isinstance(names, dict) and set(names) == set(range(nc)) else None
    model = cls(scale, nc, names, device=device)
    load_state_dict(model, state)   # (cast to float32 on the CPU, then moved)
    return model

def _iou(a: Sequence[float], b: Sequence[float]) -> float:
  inter = max(min(a[2], b[2]) - max(a[0], b[0]), 0.0) * max(min(a[3], b[3]) - max(a[1], b[1]), 0.0)
  union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
  return inter / union if union > 0 else 0.0

def letterbox(pixels: Tensor, size: int = 640, stride: Optional[int] = 32) -> tuple[Tensor, Frame]:
  """(H, W, 3) uint8 RGB pixels -> the (1, 3, h, w) float32 batch in [0, 1] ultralytics' predictor makes (its LetterBox
  in rect mode), and where the image is in it: scaled to fit size x size keeping the aspect ratio (`opencv_resize`),
  the other side padded with grey to the next multiple of `stride`, centred. stride=None pads to size x size (what a
  fixed-size export takes)."""
  if pixels.ndim != 3 or pixels.shape[2] != 3 or pixels.dtype != dtypes.uint8:
    raise ValueError(f"letterbox: expected (H, W, 3) uint8 RGB pixels, got {pixels.dtype.name} of shape {pixels.shape}")
  h, w = pixels.shape[:2]
  r = min(size / h, size / w)
  nh, nw = max(round(h * r), 1), max(round(w * r), 1)
  dh, dw = size - nh, size - nw
  if stride is not None: dh, dw = dh % stride, dw % stride
  top, left = round(dh / 2 - 0.1), round(dw / 2 - 0.1)
  x = opencv_resize(pixels, (nh, nw)).permute(2, 0, 1).unsqueeze(0).cast(dtypes.float32)
  x = x.pad((None, None, (top, round(dh / 2 + 0.1)), (left, round(dw / 2 + 0.1))), value=PAD_VALUE)
  return x / 255, Frame(top, left, nh / h, nw / w, h, w)

def _f32(x: float) -> float: return struct.unpack("f", struct.pack("f", x))[0]

def _taps(n: int, m: int, clamp: bool) -> tuple[list[int], list[int], list[int], list[int]]:
  """OpenCV's two taps for each of m outputs from n inputs and their 11-bit weights: the source position in float32,
  clamped to the edge pixel (`clamp`: its x axis), or with rows past the edge read as the edge row (its y axis)."""
  scale, lo, hi, w0, w1 = 1.0 / (m / n), [], [], [], []
  for d in range(m):
    f = _f32((d + 0.5) * scale - 0.5)
    s = math.floor(f)
    f = _f32(f - s)
    if clamp and s < 0: f, s = 0.0, 0
    if clamp and s >= n - 1: f, s = 0.0, n - 1
    lo.append(min(max(s, 0), n - 1))
    hi.append(min(max(s + 1, 0), n - 1))
    w0.append(round(_f32(1.0 - f) * 2048))
    w1.append(round(f * 2048))
  return lo, hi, w0, w1

def opencv_resize(pixels: Tensor, size: tuple[int, int]) -> Tensor:
  """(H, W, C) uint8 -> (h, w, C) uint8, bilinear, bit for bit what OpenCV's `cv2.resize(..., INTER_LINEAR)` gives
  (which ultralytics resizes with): 11-bit fixed-point weights, a horizontal pass in integers, then its vectorized
  vertical pass (16-bit high halves of the products, rounded once at the end); a halving of both sides is its 2 x 2
  mean instead. A float resize rounded to uint8 differs in 1 pixel value in 10, moving boxes by up to half a pixel."""
  (h0, w0, c), (h, w) = pixels.shape, size
  p = pixels.cast(dtypes.int32)
  if (h0, w0) == (2 * h, 2 * w): return ((p.reshape(h, 2, w, 2, c).sum((1, 3)) + 2) >> 2).cast(dtypes.uint8)
  x0, x1, a0, a1 = (Tensor(v, device=pixels.device) for v in _taps(w0, w, clamp=True))
  y0, y1, b0, b1 = (Tensor(v, device=pixels.device) for v in _taps(h0, h, clamp=False))
  rows = p[:, x0] * a0.reshape(w, 1) + p[:, x1] * a1.reshape(w, 1)   # (h0, w, C), weights summing to 2048
  def part(y: Tensor, b: Tensor) -> Tensor: return ((rows[y] >> 4) * b.reshape(h, 1, 1)) >> 16
  return ((part(y0, b0) + part(y1, b1) + 2) >> 2).clip(0, 255).cast(dtypes.uint8)
