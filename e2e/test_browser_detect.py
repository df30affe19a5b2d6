"""The detect page (dist/detect.html, web/detect.ts) in headless Chromium: the YOLOv8s fall detector exported by
scripts/build_models.py (320 x 320) finds in the model folder's sample photo (bus.jpg) what tinyweb finds natively on
the CPU with the same pipeline (letterbox to 320 x 320, the network, YOLOv8.postprocess); a screenshot with the boxes.
The page's pure functions (web/detect_post.ts, through window.detectPost): the letterbox bit for bit against the native
one, the postprocessing on a hand-made raw output whose detections are worked out below. Without WebGPU the page runs
the model's WASM export, with the same detections. And its messages when the adapter lacks a limit the model needs, and
when the camera is refused."""
from __future__ import annotations
import io, json, os, time, types
import numpy as np
import pytest
from browser_harness import launch_chromium, page_model

MODEL = "yolov8s-fall"

@pytest.fixture(scope="session")
def fall_model(site):
  """The model folder (browser_harness.page_model; served under /e2e-data/models/yolov8s-fall/), and the seconds the
  export took when this process made it."""
  url, seconds = page_model(site, MODEL)
  return types.SimpleNamespace(path=site.data_dir / "models" / MODEL, url=url, seconds=seconds)

def _open(chromium, site, model_url: str, init_script: str | None = None, viewport=None):
  page = chromium.new_context(viewport=viewport).new_page()
  if init_script: page.add_init_script(init_script)
  page.errors, page.urls = [], []
  page.on("pageerror", lambda e: page.errors.append(str(e)))
  page.on("request", lambda r: page.urls.append(r.url))
  page.goto(f"{site.url}detect.html?model={model_url}")
  return page

def _native(folder):
  """The detections tinyweb finds natively (CPU) in the folder's sample at the export's size, and the letterbox's Frame."""
  from PIL import Image
  from tinyweb import Tensor
  from tinyweb.helpers import testdata_dir
  from tinyweb.models.yolov8 import YOLOv8, letterbox
  meta = json.loads((folder / "detect.json").read_text())
  model = YOLOv8.load(os.path.join(testdata_dir(), "yolov8s_fall.pt"), device="CPU")   # (there: the export found it)
  with Image.open(folder / meta["sample"]) as im: pixels = np.asarray(im.convert("RGB"))
  x, frame = letterbox(Tensor(pixels, device="CPU"), meta["size"], stride=None)
  return model.postprocess(model(x), frame), frame

def _assert_finds_what_native_finds(got: dict, info: dict, rows: list[str], folder) -> tuple[list[float], float]:
  """The page's result on the sample (window.detectResult, window.detectModel, the names listed) against _native's:
  the same detections, boxes and scores within the tolerance; their IoUs and the largest score error."""
  from tinyweb.models.yolov8 import _iou
  want, frame = _native(folder)
  assert info["size"] == 320 and info["classes"] == 2 and got["imageSize"] == [810, 1080]
  assert got["frame"] == dict(top=frame.top, left=frame.left, scaleY=frame.scale_y, scaleX=frame.scale_x, height=frame.height, width=frame.width)
  assert len(got["detections"]) == len(want) == 4   # (people on the bus)
  assert [d["classId"] for d in got["detections"]] == [d.class_id for d in want] and rows == [d.name for d in want]
  ious = [_iou(g["box"], w.box) for g, w in zip(got["detections"], want)]
  score_err = max(abs(g["score"] - w.score) for g, w in zip(got["detections"], want))
  assert min(ious) >= 0.99 and score_err <= 1e-3, (ious, score_err)
  return ious, score_err

def test_the_page_finds_what_the_native_model_finds(site, chromium, fall_model, tmp_path, record_property):
  from PIL import Image
  page = _open(chromium, site, fall_model.url, viewport={"width": 1000, "height": 700})
  try:
    assert page.is_visible("#camera") and page.text_content("#camera") == "Start camera"
    page.click("#sample:not([disabled])")   # (as soon as the page has read detect.json: the model may still be loading)
    page.wait_for_function("window.detectResult || (window.detectModel && window.detectModel.error)", timeout=300_000)
    assert not page.errors, page.errors
    assert [w.url for w in page.workers if "detect_worker" in w.url]   # (the model runs in the page's worker)
    got, info = page.evaluate("window.detectResult"), page.evaluate("window.detectModel")
    assert "error" not in info, info["error"]
    boxes_drawn = page.evaluate("""() => { const c = document.querySelector('#boxes');
      return c.getContext('2d').getImageData(0, 0, c.width, c.height).data.filter((v, i) => i % 4 === 3 && v > 0).length; }""")
    png = page.screenshot()
    rows = page.eval_on_selector_all("#list tr", "trs => trs.map((tr) => tr.children[1].textContent)")
  finally: page.context.close()
  ious, score_err = _assert_finds_what_native_finds(got, info, rows, fall_model.path)
  # the screenshot: the photo with boxes over it (many colours, the box layer painted), small enough for the README
  assert boxes_drawn > 1000
  shot = Image.open(io.BytesIO(png)).convert("RGB")
  colours = np.unique(np.asarray(shot).reshape(-1, 3), axis=0)
  assert shot.size == (1000, 700) and np.asarray(shot).std() > 30 and len(colours) > 1000
  small = io.BytesIO()
  shot.quantize(256).save(small, "PNG", optimize=True)   # (a photo: 256 colours keep it under 250 KB)
  (tmp_path / "detect.png").write_bytes(small.getvalue())
  assert len(small.getvalue()) < 250_000
  if fall_model.seconds is not None: record_property("measure:detect page: export YOLOv8s 320 (scripts/build_models.py) (s)", f"{fall_model.seconds:.1f}")
  record_property("measure:detect page: page open -> first result (cold) / network per inference (s)",
                  f"{got['at']:.1f} / {got['ms']['network'] / 1e3:.1f}")
  record_property("measure:detect page: load (s): device / kernels / weights / total",
                  " / ".join(f"{info['load'][k]:.2f}" for k in ["device", "kernels", "weights", "total"]))
  record_property("measure:detect page: min box IoU / max |score - native|", f"{min(ious):.5f} / {score_err:.1e}")
  record_property("measure:detect page: screenshot", f"{tmp_path / 'detect.png'} ({len(small.getvalue()) // 1024} KiB)")

# a hand-made raw output (1, 4 + 2 classes, 8 anchors): per anchor the box centre and size (input pixels), then the two
# classes' scores; and the frame of an image of 160 x 200 scaled by 0.5, 20 px of padding left and 10 above
RAW = {  # anchor: (cx, cy, w, h, score0, score1)
  0: (60, 50, 40, 20, 0.1, 0.9),     # corners (40, 40, 80, 60): class 1
  1: (62, 50, 40, 20, 0.2, 0.8),     # (42, 40, 82, 60): IoU with 0 = 38*20 / (800 + 800 - 760) = 0.905: suppressed
  2: (60, 50, 40, 20, 0.85, 0.3),    # anchor 0's box, class 0: kept (NMS is per class)
  3: (70, 50, 40, 20, 0.0, 0.7),     # (50, 40, 90, 60): IoU with 0 = 600 / 1000 = 0.6: kept at iou 0.7, not at 0.5
  4: (30, 30, 10, 10, 0.25, 0.25),   # at the threshold, not over it: dropped
  5: (20, 90, 30, 30, 0.5, 0.5),     # (5, 75, 35, 105): equal scores, class 0 (the first); left edge clipped
  6: (100, 100, 40, 40, 0.6, 0.1),   # (80, 80, 120, 120): class 0, past the image's right and bottom: clipped
  7: (50, 50, 20, 20, 0.24, 0.1),    # under the threshold
}
FRAME = dict(top=10, left=20, scaleY=0.5, scaleX=0.5, height=200, width=160)
# to the image: x -> (x - 20) / 0.5, y -> (y - 10) / 0.5, clipped to [0, 160] x [0, 200]; best first
EXPECTED = [(1, 0.9, (40, 60, 120, 100)), (0, 0.85, (40, 60, 120, 100)), (1, 0.7, (60, 60, 140, 100)),
            (0, 0.6, (120, 140, 160, 200)), (0, 0.5, (0, 130, 30, 190))]

def test_the_pages_letterbox_and_postprocessing(site, chromium):
  from tinyweb import Tensor
  from tinyweb.models.yolov8 import YOLOv8, Frame, letterbox
  page = _open(chromium, site, "/e2e-data/no-model/")
  try:
    page.wait_for_function("window.detectPost && window.detectModel")
    raw = np.array([[RAW[a][k] for a in range(8)] for k in range(6)], np.float32)
    post = lambda options: page.evaluate("([raw, frame, names, options]) => window.detectPost.postprocess(new Float32Array(raw), 8, frame, names, options)",
                                         [raw.ravel().tolist(), FRAME, ["Normal", "Fall"], options])
    def check(found, expected):
      assert [(d["classId"], d["name"]) for d in found] == [(c, ["Normal", "Fall"][c]) for c, _, _ in expected]
      np.testing.assert_allclose([d["score"] for d in found], [s for _, s, _ in expected], rtol=1e-7)
      np.testing.assert_allclose([d["box"] for d in found], [b for _, _, b in expected], rtol=0, atol=1e-9)
    check(post({}), EXPECTED)
    check(post({"iou": 0.5}), [e for e in EXPECTED if e[2] != (60, 60, 140, 100)])
    check(post({"conf": 0.65}), EXPECTED[:3])
    check(post({"maxDet": 2}), EXPECTED[:2])
    # tinyweb's own postprocessing agrees with the reckoning above
    native = YOLOv8.postprocess(types.SimpleNamespace(names=["Normal", "Fall"]), Tensor(raw[None]),
                                Frame(10, 20, 0.5, 0.5, 200, 160))
    assert [(d.class_id, round(d.score, 6), d.box) for d in native] == [(c, s, b) for c, s, b in EXPECTED]
    # Python's round (halves to even) and the letterbox, bit for bit the native one: downscaled, an exact halving (the
    # 2 x 2 mean), upscaled; padded on either axis
    halves = [-2.5, -1.5, -0.5, -0.1, 0.5, 1.5, 2.5, 3.5, 2.4999, 7.0]
    assert page.evaluate("(xs) => xs.map(window.detectPost.roundHalfEven)", halves) == [round(x) for x in halves]
    rng = np.random.default_rng(0)
    for h, w, size in [(37, 53, 32), (64, 48, 32), (13, 7, 64), (45, 90, 64)]:
      pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
      got = page.evaluate("""([data, height, width, size]) => {
        const { input, frame } = window.detectPost.letterbox({ data, width, height, channels: 3 }, size);
        return { input: Array.from(input), frame };
      }""", [pixels.ravel().tolist(), h, w, size])
      x, frame = letterbox(Tensor(pixels, device="CPU"), size, stride=None)
      assert got["frame"] == dict(top=frame.top, left=frame.left, scaleY=frame.scale_y, scaleX=frame.scale_x, height=h, width=w)
      np.testing.assert_array_equal(np.asarray(got["input"], np.float32).reshape(1, 3, size, size), x.numpy(), err_msg=str((h, w, size)))
  finally: page.context.close()

def test_runs_on_webassembly_without_webgpu(playwright_instance, site, fall_model, record_property):
  # Chromium without WebGPU: the page runs the model's WASM export (its wasm/ folder) on the CPU, says so, and finds
  # what the native model finds; a camera refused: the page says so
  browser = launch_chromium(playwright_instance, webgpu=False)
  try:
    page = _open(browser, site, fall_model.url, init_script="""
      MediaDevices.prototype.getUserMedia = () => Promise.reject(new DOMException("Permission denied", "NotAllowedError"));""")
    page.click("#sample:not([disabled])")
    page.wait_for_function("window.detectResult || (window.detectModel && window.detectModel.error)", timeout=300_000)
    assert not page.errors, page.errors
    got, info = page.evaluate("window.detectResult"), page.evaluate("window.detectModel")
    assert "error" not in info, info["error"]
    rows = page.eval_on_selector_all("#list tr", "trs => trs.map((tr) => tr.children[1].textContent)")
    adapter = page.text_content("#adapter")
    page.click("#camera")
    page.wait_for_function("document.querySelector('#notice').textContent.includes('camera')")
    assert page.text_content("#notice").startswith("The camera permission was denied: allow the camera for this site")
    assert page.text_content("#camera") == "Start camera"
  finally: browser.close()
  assert adapter == "WebAssembly on the CPU (no WebGPU in this browser: slower than WebGPU)", adapter
  ious, score_err = _assert_finds_what_native_finds(got, info, rows, fall_model.path)
  record_property("measure:detect wasm: page open -> first result (cold) / network per inference (s)",
                  f"{got['at']:.1f} / {got['ms']['network'] / 1e3:.1f}")
  record_property("measure:detect wasm: min box IoU / max |score - native|", f"{min(ious):.5f} / {score_err:.1e}")

def test_the_page_says_why_it_cannot_run_the_model(site, chromium, fall_model):
  # an adapter without a limit the model asks for: the limit is named, with what the adapter has
  big = fall_model.path.parent / f"{MODEL}-big"
  if not big.exists():
    big.mkdir()
    for f in os.listdir(fall_model.path):
      if f != "manifest.json": (big / f).symlink_to(fall_model.path / f)
    manifest = json.loads((fall_model.path / "manifest.json").read_text())
    manifest["limits"]["maxStorageBufferBindingSize"] = 1 << 40
    (big / "manifest.json").write_text(json.dumps(manifest))
  page = _open(chromium, site, f"/e2e-data/models/{MODEL}-big/")
  try:
    page.wait_for_function("window.detectModel && window.detectModel.error", timeout=60_000)
    text = page.text_content("#notice")
    assert text.startswith("The model cannot be loaded: the model needs maxStorageBufferBindingSize >= 1099511627776 (the adapter has"), text
    assert page.text_content("#adapter").startswith("WebGPU: ")
    _wait_until_quiet(site.server)
  finally: page.context.close()

def _wait_until_quiet(server, timeout: float = 60):
  """Until the server has sent nothing for a second (the weights' download goes on after the load failed: a page closed
  in the middle of it resets the connection, and the server prints the error)."""
  sent, end = -1, time.perf_counter() + timeout
  while sum(server.bytes_sent.values()) != sent and time.perf_counter() < end:
    sent = sum(server.bytes_sent.values())
    time.sleep(1)
