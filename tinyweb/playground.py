"""What the browser playground (web/playground.ts) gives the code it runs: `show(x)` draws an image tensor, or a line plot
of numbers, under the output. show() converts and records; after each run the page takes the records (take_shown())
and draws them: an image's RGBA bytes on a canvas (ImageData), a plot's values as an SVG polyline. The conversion is
plain tinyweb, so it runs (and is tested) natively too."""
from __future__ import annotations
from typing import Any
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes

CHANNELS = (1, 3, 4)   # gray, RGB, RGBA
_shown: list[dict[str, Any]] = []

def _layout_error(shape) -> ValueError:
  return ValueError(f"show: an image must be (H, W), (H, W, C) or (C, H, W) with C = 1, 3 or 4 channels (gray, RGB, RGBA), "
                    f"got shape {tuple(shape)}" + (" (a batch? show one image: x[0])" if len(shape) == 4 else ""))

def image_rgba(t: Tensor) -> tuple[int, int, bytes]:
  """(height, width, RGBA bytes row by row) of an image tensor. Layouts: (H, W) and (H, W, 1) gray, (H, W, 3) RGB,
  (H, W, 4) RGBA, and the same channels first, (C, H, W), when the last dim is not 1, 3 or 4 (so (3, 5, 3) is 3 rows
  of 5 RGB pixels). Values: float in [0, 1] (clipped; NaN is 0), scaled to 0..255 and rounded, or uint8 as they are.
  Gray repeats in R, G and B; alpha is 255 unless given."""
  if not isinstance(t, Tensor): raise TypeError(f"show: an image must be a Tensor, got {type(t).__name__}")
  shape = tuple(t.shape)
  if t.ndim == 2: t = t.unsqueeze(-1)
  elif t.ndim != 3: raise _layout_error(t.shape)
  elif t.shape[-1] not in CHANNELS:
    if t.shape[0] not in CHANNELS: raise _layout_error(t.shape)
    t = t.permute(1, 2, 0)
  h, w, c = t.shape
  if h == 0 or w == 0: raise ValueError(f"show: an image needs at least one pixel, got shape {shape}")
  if t.dtype.is_float:
    x = t.float()
    t = ((x != x).where(0.0, x).clip(0, 1) * 255 + 0.5).cast(dtypes.uint8)   # (+0.5, then the cast truncates: rounding)
  elif t.dtype != dtypes.uint8:
    raise TypeError(f"show: an image must be float (values in [0, 1]) or uint8 (0..255), got {t.dtype.name} of shape "
                    f"{shape} (e.g. t.float() / 255, or t.cast(dtypes.uint8))")
  if c != 4: t = t.expand(h, w, 3).cat(Tensor.full((h, w, 1), 255, dtype=dtypes.uint8, device=t.device), dim=2)
  return h, w, bytes(t.contiguous().data())

def plot_values(x) -> list[float]:
  """The numbers of a list or tuple (of ints, floats, bools) or of a 1-D Tensor, as floats."""
  if isinstance(x, Tensor):
    if x.ndim != 1: raise ValueError(f"show: a Tensor to plot must be 1-D, got shape {tuple(x.shape)} (images are 2-D or 3-D)")
    values = x.float().tolist()
  else:
    bad = next((i for i, v in enumerate(x) if not isinstance(v, (int, float))), None)
    if bad is not None: raise TypeError(f"show: a list to plot must hold numbers, but item {bad} is a {type(x[bad]).__name__} "
                                        f"(for an image, pass a Tensor)")
    values = [float(v) for v in x]
  if not values: raise ValueError("show: nothing to plot (no values)")
  return values

def show(x) -> None:
  """Draw `x` under the playground's output: a 2-D or 3-D Tensor as an image (layouts and values: image_rgba), a 1-D
  Tensor or a list of numbers as a line plot (x: the index; values that are not finite are left out)."""
  if isinstance(x, Tensor) and x.ndim >= 2:
    h, w, rgba = image_rgba(x)
    _shown.append({"kind": "image", "width": w, "height": h, "rgba": rgba})
  elif isinstance(x, (Tensor, list, tuple)):
    _shown.append({"kind": "plot", "values": plot_values(x)})
  else:
    raise TypeError(f"show: expected an image Tensor ((H, W), (H, W, C) or (C, H, W)) or numbers to plot (a list or 1-D "
                    f"Tensor), got {type(x).__name__}")

def take_shown() -> list[dict[str, Any]]:
  """What show() recorded since the last call (and forget it): {"kind": "image", "width", "height", "rgba": bytes} or
  {"kind": "plot", "values": [float]}."""
  out = _shown[:]
  _shown.clear()
  return out
