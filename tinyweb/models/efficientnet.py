"""EfficientNet-Lite0..4: ImageNet classifiers (Tan & Le's EfficientNet without squeeze-excitation, with ReLU6, the
stem and head not scaled), with the parameter names of the `efficientnet_lite_pytorch` package, whose `.pth` files
`EfficientNetLite.load` reads without torch.

  model = EfficientNetLite.load("efficientnet-lite0.pth")           # the variant from the file's name, or variant="lite0"
  probs = model(preprocess(pixels, 224)).softmax(-1)                # pixels: (H, W, 3) uint8 RGB, e.g. from a PNG
  print(top_k(probs[0], 5))                                         # [(p, "tabby"), ...]

Convolutions pad as TensorFlow's 'SAME' (the weights come from TensorFlow): the padding is worked out from the actual
input size, where the reference package fixes it for the variant's own resolution (the two agree at that size)."""
from __future__ import annotations
import functools, math, os, re
from typing import Optional, Sequence
from tinyweb import Tensor, dtypes
from tinyweb.nn import Linear, BatchNorm2d
from tinyweb.nn.state import torch_load, load_state_dict

# variant -> (width multiplier, depth multiplier, input resolution)
VARIANTS = {"lite0": (1.0, 1.0, 224), "lite1": (1.0, 1.1, 240), "lite2": (1.1, 1.2, 260), "lite3": (1.2, 1.4, 280), "lite4": (1.4, 1.8, 300)}
# each stage: (blocks, kernel size, stride of its first block, expansion ratio, input channels, output channels)
STAGES = [(1, 3, 1, 1, 32, 16), (2, 3, 2, 6, 16, 24), (2, 5, 2, 6, 24, 40), (3, 3, 2, 6, 40, 80), (3, 5, 1, 6, 80, 112),
          (4, 5, 2, 6, 112, 192), (1, 3, 1, 6, 192, 320)]
BN_EPS = 1e-3
# the reference's preprocessing: pixels in [0, 255] to (x - 127) / 128 (what the TensorFlow Lite models were trained on)
PIXEL_MEAN, PIXEL_STD = 127.0, 128.0

def scaled_channels(channels: int, width: float) -> int:
  """Channels times the width multiplier, rounded to a multiple of 8 but never down by more than 10%."""
  if width == 1.0: return channels
  rounded = max(8, int(channels * width + 4) // 8 * 8)
  return rounded + 8 if rounded < 0.9 * channels * width else rounded

class SameConv2d:
  """A bias-free Conv2d padded like TensorFlow's 'SAME': output size ceil(input / stride), the odd pixel on the right."""
  def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1, device: Optional[str] = None):
    self.weight = Tensor.zeros(cout, cin // groups, kernel, kernel, device=device).contiguous()
    self.stride, self.groups = stride, groups

  def __call__(self, x: Tensor) -> Tensor:
    k, pads = self.weight.shape[-1], []
    for size in reversed(x.shape[2:]):   # (left, right, top, bottom)
      total = max((math.ceil(size / self.stride) - 1) * self.stride + k - size, 0)
      pads += [total // 2, total - total // 2]
    return x.conv2d(self.weight, groups=self.groups, stride=self.stride, padding=tuple(pads))

class MBConvBlock:
  """Inverted residual: 1x1 expansion, depthwise kxk, 1x1 projection, each batch-normalized; ReLU6 after the first two;
  the input added back when the shapes allow."""
  def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int, device: Optional[str] = None):
    mid = cin * expand
    if expand != 1: self._expand_conv, self._bn0 = SameConv2d(cin, mid, 1, device=device), BatchNorm2d(mid, eps=BN_EPS, device=device)
    self._depthwise_conv = SameConv2d(mid, mid, kernel, stride, groups=mid, device=device)
    self._bn1 = BatchNorm2d(mid, eps=BN_EPS, device=device)
    self._project_conv, self._bn2 = SameConv2d(mid, cout, 1, device=device), BatchNorm2d(cout, eps=BN_EPS, device=device)
    self.residual = stride == 1 and cin == cout

  def __call__(self, inputs: Tensor) -> Tensor:
    x = self._bn0(self._expand_conv(inputs)).relu6() if hasattr(self, "_expand_conv") else inputs
    x = self._bn2(self._project_conv(self._bn1(self._depthwise_conv(x)).relu6()))
    return x + inputs if self.residual else x

class EfficientNetLite:
  def __init__(self, variant: str = "lite0", num_classes: int = 1000, device: Optional[str] = None):
    if variant not in VARIANTS: raise ValueError(f"EfficientNetLite: unknown variant {variant!r}; the variants are {list(VARIANTS)}")
    width, depth, self.resolution = VARIANTS[variant]
    self.variant = variant
    # the stem and head are not scaled
    self._conv_stem, self._bn0 = SameConv2d(3, 32, 3, 2, device=device), BatchNorm2d(32, eps=BN_EPS, device=device)
    self._blocks: list[MBConvBlock] = []
    for i, (repeats, kernel, stride, expand, cin, cout) in enumerate(STAGES):
      first_or_last = i in (0, len(STAGES) - 1)
      repeats = repeats if first_or_last else math.ceil(depth * repeats)
      cin, cout = 32 if i == 0 else scaled_channels(cin, width), scaled_channels(cout, width)
      for r in range(repeats):
        self._blocks.append(MBConvBlock(cin if r == 0 else cout, cout, kernel, stride if r == 0 else 1, expand, device))
    self._conv_head, self._bn1 = SameConv2d(cout, 1280, 1, device=device), BatchNorm2d(1280, eps=BN_EPS, device=device)
    self._fc = Linear(1280, num_classes, device=device)

  def features(self, x: Tensor) -> Tensor:
    """(N, 3, H, W) normalized images -> (N, 1280, H/32, W/32) features."""
    if x.ndim != 4 or x.shape[1] != 3: raise ValueError(f"EfficientNetLite: expected (N, 3, H, W) images, got shape {x.shape}")
    x = self._bn0(self._conv_stem(x)).relu6()
    for block in self._blocks: x = block(x)
    return self._bn1(self._conv_head(x)).relu6()

  def __call__(self, x: Tensor) -> Tensor:
    """(N, 3, H, W) normalized images (see `preprocess`) -> (N, num_classes) logits. Dropout is off: inference only."""
    return self._fc(self.features(x).mean((2, 3)))

  @classmethod
  def load(cls, path, variant: Optional[str] = None, device: Optional[str] = None) -> "EfficientNetLite":
    """A model with the weights of an `efficientnet_lite_pytorch` state dict (.pth, loaded without torch). The variant
    comes from the file's name (efficientnet-lite2-*.pth) unless given; the number of classes from the weights."""
    if variant is None:
      if not (m := re.search(r"lite([0-4])", os.path.basename(os.fspath(path)))):
        raise ValueError(f"EfficientNetLite.load: cannot tell the variant from the file name {os.fspath(path)!r}: pass variant='lite0'..'lite4'")
      variant = f"lite{m.group(1)}"
    state = torch_load(path, device=device)
    if not isinstance(state, dict) or "_fc.weight" not in state:
      raise ValueError(f"EfficientNetLite.load: {os.fspath(path)!r} is not an efficientnet_lite_pytorch state dict (no '_fc.weight')")
    model = cls(variant, num_classes=state["_fc.weight"].shape[0], device=device)
    load_state_dict(model, state)
    return model

def preprocess(pixels: Tensor, resolution: int) -> Tensor:
  """(H, W, 3) uint8 RGB pixels -> a (1, 3, resolution, resolution) float32 batch: the shorter side resized to
  `resolution` (bilinear), the center cropped, normalized as the model expects."""
  if pixels.ndim != 3 or pixels.shape[2] != 3: raise ValueError(f"preprocess: expected (H, W, 3) RGB pixels, got shape {pixels.shape}")
  h, w = pixels.shape[:2]
  scale = resolution / min(h, w)
  size = (max(resolution, round(h * scale)), max(resolution, round(w * scale)))
  x = pixels.cast(dtypes.float32).permute(2, 0, 1).unsqueeze(0).interpolate(size, mode="linear")
  top, left = (size[0] - resolution) // 2, (size[1] - resolution) // 2
  x = x[:, :, top:top + resolution, left:left + resolution]
  return (x - PIXEL_MEAN) / PIXEL_STD

@functools.cache
def _imagenet_class_names() -> tuple[str, ...]:
  with open(os.path.join(os.path.dirname(__file__), "imagenet_classes.txt"), encoding="utf-8") as f: return tuple(f.read().splitlines())

def imagenet_classes() -> list[str]:
  """ImageNet-1k's class names, in the models' output order (the file is read once)."""
  return list(_imagenet_class_names())

def top_k(probs: Tensor, k: int = 5, labels: Optional[Sequence[str]] = None) -> list[tuple[float, str]]:
  """The k largest of one image's class probabilities, with their names, best first."""
  labels = labels if labels is not None else imagenet_classes()
  values, indices = probs.topk(k)
  return [(p, labels[i]) for p, i in zip(values.tolist(), indices.tolist())]
