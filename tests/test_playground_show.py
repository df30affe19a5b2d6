"""The playground's show() (tinyweb/playground.py): image tensors to RGBA bytes in every layout, against numpy; numbers
to plot; the errors. (That the page draws them is e2e/test_browser_playground_show.py.)"""
import numpy as np
import pytest
from tinyweb import Tensor, dtypes
from tinyweb.playground import image_rgba, plot_values, show, take_shown

def want_rgba(hwc: np.ndarray) -> bytes:
  """numpy's RGBA of an (H, W, C) uint8 image: gray repeated in R, G, B; alpha 255 unless given."""
  h, w, c = hwc.shape
  if c == 4: return hwc.tobytes()
  rgb = np.repeat(hwc, 3, axis=2) if c == 1 else hwc
  return np.concatenate([rgb, np.full((h, w, 1), 255, np.uint8)], axis=2).tobytes()

rng = np.random.default_rng(0)
HWC = {c: rng.integers(0, 256, (5, 7, c), dtype=np.uint8) for c in (1, 3, 4)}

@pytest.mark.parametrize("layout", ["HW", "HW1", "HW3", "HW4", "1HW", "3HW", "4HW"])
def test_uint8_layouts(layout):
  c = 1 if layout in ("HW", "HW1", "1HW") else int(layout.strip("HW"))
  hwc = HWC[c]
  x = hwc[:, :, 0] if layout == "HW" else hwc if layout.startswith("HW") else hwc.transpose(2, 0, 1)
  assert image_rgba(Tensor(np.ascontiguousarray(x))) == (5, 7, want_rgba(hwc))

def test_channels_last_wins_when_both_ends_could_be_channels():
  x = rng.integers(0, 256, (3, 5, 3), dtype=np.uint8)   # 3 rows of 5 RGB pixels, not 3 channels of 5x3
  assert image_rgba(Tensor(x)) == (3, 5, want_rgba(x))

def test_floats_are_clipped_scaled_and_rounded():
  x = rng.uniform(-0.3, 1.3, (6, 4, 3)).astype(np.float32)
  x[0, 0, 0], x[1, 1, 1], x[2, 2, 2], x[3, 3, 0] = np.nan, 0.5, 1.0, 0.0
  want = np.floor(np.clip(np.nan_to_num(x.astype(np.float64), nan=0.0), 0, 1) * 255 + 0.5).astype(np.uint8)
  h, w, rgba = image_rgba(Tensor(x))
  got = np.frombuffer(rgba, np.uint8).reshape(h, w, 4)
  np.testing.assert_array_equal(got[..., :3], want)
  assert (got[..., 3] == 255).all() and got[0, 0, 0] == 0 and got[1, 1, 1] == 128 and got[2, 2, 2] == 255
  assert (got[..., :3] == 0).any() and (got[..., :3] == 255).any()   # (clipping happened at both ends)
  half = Tensor(np.full((2, 2), 0.25, np.float32)).cast(dtypes.float16)   # other float dtypes too: 0.25 * 255 = 63.75
  assert image_rgba(half)[2] == bytes([64, 64, 64, 255]) * 4

@pytest.mark.parametrize("shape, match", [
  ((2, 2, 5), r"got shape \(2, 2, 5\)"), ((5, 2, 2), r"got shape \(5, 2, 2\)"), ((7,), r"got shape \(7,\)"),
  ((1, 2, 2, 3), r"got shape \(1, 2, 2, 3\) \(a batch\? show one image: x\[0\]\)")])
def test_shapes_that_are_no_image(shape, match):
  with pytest.raises(ValueError, match=r"\(H, W\), \(H, W, C\) or \(C, H, W\) with C = 1, 3 or 4 .*" + match): image_rgba(Tensor.zeros(*shape))

def test_dtypes_that_are_no_image_and_empty_images():
  with pytest.raises(TypeError, match=r"float \(values in \[0, 1\]\) or uint8 \(0..255\), got int32 of shape \(2, 3\)"):
    image_rgba(Tensor.zeros(2, 3, dtype=dtypes.int32))
  with pytest.raises(TypeError, match="got bool"): image_rgba(Tensor.zeros(2, 3, dtype=dtypes.bool))
  with pytest.raises(ValueError, match=r"at least one pixel, got shape \(0, 4\)"): image_rgba(Tensor.zeros(0, 4))
  with pytest.raises(TypeError, match="must be a Tensor, got list"): image_rgba([[0.0]])

def test_plot_values():
  assert plot_values([1, 0.5, True]) == [1.0, 0.5, 1.0] and plot_values((2, 3)) == [2.0, 3.0]
  assert plot_values(Tensor([3, 1, 2], dtype=dtypes.int32)) == [3.0, 1.0, 2.0]
  with pytest.raises(TypeError, match="item 1 is a list"): plot_values([1.0, [2.0]])
  with pytest.raises(ValueError, match=r"must be 1-D, got shape \(2, 2\)"): plot_values(Tensor.zeros(2, 2))
  with pytest.raises(ValueError, match="nothing to plot"): plot_values([])

def test_show_records_in_order_and_take_empties():
  take_shown()
  show([1.0, 0.5, 0.25])
  show(Tensor(HWC[3]))
  show(Tensor([0.0, 2.0]))
  with pytest.raises(TypeError, match="got int"): show(3)
  shown = take_shown()
  assert [s["kind"] for s in shown] == ["plot", "image", "plot"] and take_shown() == []
  assert shown[0]["values"] == [1.0, 0.5, 0.25] and shown[2]["values"] == [0.0, 2.0]
  assert (shown[1]["width"], shown[1]["height"], shown[1]["rgba"]) == (7, 5, want_rgba(HWC[3]))
