"""tinyweb.export end to end: models exported natively run in headless Chromium by the package's `tinyweb/model` runtime
(dist/lib/model.js) on a page that loads no Pyodide and no Python, with outputs equal to the native run's (this process,
the WEBGPU device). The MLP is exported in this process; EfficientNet-Lite0 (real weights, a real photo) by the command
line, `python -m tinyweb.export efficientnet-lite0 DIR`, whose WEBGPU device is made for the portable target
(TINYWEB_WEBGPU_LIMITS=default: WebGPU's default limits, kernels tuned for any adapter), which a process that already
uses WEBGPU cannot switch to. It also records the page's timings: page open -> first result (cold: nothing cached), the
same after a reload (weights from the Cache API) and the time per inference.
WASM exports (export's target="WASM", `--target wasm`) run in a Chromium without WebGPU (web/model_wasm.ts), equal to the
WASM device's native run bit for bit (the same modules; the math imports are JavaScript's), and to the CPU device's
within a tolerance (the CPU device fuses multiply-adds; wasm has no fma)."""
from __future__ import annotations
import json, subprocess, sys
import numpy as np
import pytest
from tinyweb import Tensor
from tinyweb.export import export
from tinyweb.nn import Linear
from tinyweb.nn.state import get_parameters, get_state_dict
from browser_harness import ROOT, load_testdata as _testdata

# the page: loads the model named by ?model=, runs it on the raw float32 file ?input= (`runs` times), reports back
PAGE = """<!doctype html><meta charset="utf-8"><title>tinyweb export</title>
<script type="module">
import { loadModel } from "../lib/model.js";
const q = new URLSearchParams(location.search);
window.exportResult = (async () => {
  try {
    const [m, input] = await Promise.all([loadModel(q.get("model")),
                                          fetch(q.get("input")).then((r) => r.arrayBuffer()).then((b) => new Float32Array(b))]);
    const name = m.inputs[0].name, runs = [];
    let t = performance.now();
    let out = await m.run({ [name]: input });
    const first = performance.now();   // (performance.now() counts from the page's navigation start)
    runs.push((first - t) / 1000);
    for (let i = 1; i < Number(q.get("runs") ?? 1); i++) {
      t = performance.now();
      out = await m.run({ [name]: input });
      runs.push((performance.now() - t) / 1000);
    }
    let badInput = null;
    try { await m.run({ [name]: new Float32Array(3) }); } catch (e) { badInput = String(e.message); }
    const profile = q.has("profile") ? await m.profile({ [name]: input }) : null;
    return { firstResult: first / 1000, load: m.timings, runs, badInput, output: Array.from(out[m.outputs[0].name]),
             outputs: Object.fromEntries(Object.entries(out).map(([k, v]) => [k, Array.from(v)])), shape: m.outputs[0].shape,
             pyodide: "loadPyodide" in globalThis, adapter: !!(await navigator.gpu?.requestAdapter()), model: m.constructor.name,
             profile };
  } catch (e) { return { error: String(e && e.stack || e) }; }
})();
</script>"""

def _write_page(site):
  (site.data_dir / "export.html").write_text(PAGE)

def _open(chromium, site, model: str, inp: str, runs: int = 1, context=None, fails: bool = False, profile: bool = False):
  """(result, the URLs the page requested) of the export page in a new context (or `context`); fails: the error it
  reports instead; profile: the result has the page's model.profile() too."""
  ctx = context or chromium.new_context()
  page = ctx.new_page()
  urls, console = [], []
  page.on("request", lambda r: urls.append(r.url))
  page.on("console", lambda m: console.append(m.text))
  page.goto(f"{site.url}e2e-data/export.html?model=/e2e-data/{model}/&input=/e2e-data/{inp}&runs={runs}" + ("&profile" if profile else ""))
  page.wait_for_function("window.exportResult !== undefined", timeout=60_000)
  result = page.evaluate("window.exportResult")
  page.close()
  if fails: return result.get("error"), urls
  assert "error" not in result, result["error"] + "\nconsole:\n" + "\n".join(console)
  return result, urls

def _assert_close(got, want, rel=1e-4):
  got, want = np.asarray(got, dtype=np.float32).reshape(want.shape), np.asarray(want, dtype=np.float32)
  err = np.abs(got - want).max()
  assert err <= rel * max(np.abs(want).max(), 1e-6), f"max |browser - native| = {err}, max |native| = {np.abs(want).max()}"
  return err

class MLP:
  def __init__(self):
    self.l1, self.l2, self.l3 = Linear(20, 64, device="WEBGPU"), Linear(64, 32, device="WEBGPU"), Linear(32, 5, device="WEBGPU")
  def __call__(self, x: Tensor) -> Tensor: return self.l3(self.l2(self.l1(x).relu()).gelu()).log_softmax(-1)

def test_an_exported_mlp_runs_in_chromium_without_pyodide(site, chromium):
  Tensor.manual_seed(0)
  model = MLP()
  Tensor.realize_all(*get_parameters(model))
  x = Tensor.randn(3, 20, device="WEBGPU").contiguous().realize()
  manifest = export(model, x, path=site.data_dir / "mlp", state_dict=get_state_dict(model), batch_sizes=[3, 8])
  want = model(x).numpy()
  (site.data_dir / "mlp-input.bin").write_bytes(x.numpy().astype(np.float32).tobytes())
  _write_page(site)
  result, urls = _open(chromium, site, "mlp", "mlp-input.bin", runs=2)
  assert result["shape"] == [3, 5] and not result["pyodide"]
  assert not [u for u in urls if "pyodide" in u.lower() or u.endswith(".whl")], urls
  _assert_close(result["output"], want)
  assert "input input has 3 elements; the model takes shape [3,20] or [8,20]" in result["badInput"]
  assert manifest["limits"]["maxStorageBuffersPerShaderStage"] <= 8
  # the batch of 8 runs its own variant (the page picks it by the input's size) on the same weights
  x8 = Tensor.randn(8, 20, device="WEBGPU").contiguous().realize()
  (site.data_dir / "mlp-input8.bin").write_bytes(x8.numpy().astype(np.float32).tobytes())
  result8, _ = _open(chromium, site, "mlp", "mlp-input8.bin", profile=True)
  _assert_close(result8["output"], model(x8).numpy())
  # profile() times each step of the variant the input picks, alone
  steps = manifest["variants"][1]["steps"]
  assert [p["name"] for p in result8["profile"]] == [manifest["kernels"][s["kernel"]]["file"] for s in steps]
  assert all(p["ms"] >= 0 for p in result8["profile"])
  # a damaged shard is refused by its sha256, a folder without an export by the manifest's format
  shard = site.data_dir / "mlp" / manifest["weights"]["shards"][0]["file"]
  data = bytearray(shard.read_bytes())
  data[-1] ^= 1
  shard.write_bytes(bytes(data))
  error, _ = _open(chromium, site, "mlp", "mlp-input.bin", fails=True)
  assert "WeightsError" in error and "sha256 mismatch" in error, error
  # float16 storage: weights that float16 holds exactly are stored so and widened to float32 on the GPU (l3.bias has an
  # odd count: the last pair is half padding)
  for p in get_parameters(model): p.assign(p.cast("float16").cast("float32")).realize()
  manifest16 = export(model, x, path=site.data_dir / "mlp16", state_dict=get_state_dict(model))
  assert all(b.get("stored") == "float16" for b in manifest16["variants"][0]["buffers"] if b["kind"] == "weight")
  result16, _ = _open(chromium, site, "mlp16", "mlp-input.bin")
  _assert_close(result16["output"], model(x).numpy())
  (site.data_dir / "not-an-export").mkdir()
  (site.data_dir / "not-an-export" / "manifest.json").write_text(json.dumps({"format": 1}))
  error, _ = _open(chromium, site, "not-an-export", "mlp-input.bin", fails=True)
  assert 'ModelError: ' in error and 'not a tinyweb export (format 1, expected "tinyweb-export")' in error, error

# (in the playground's Pyodide: an MLP exported at batch sizes 3 and 4 to Pyodide's file system, the files handed out)
EXPORT_IN_PYODIDE = r"""
import base64, os
from tinyweb import Tensor
from tinyweb.export import export
from tinyweb.nn import Linear
from tinyweb.nn.state import get_state_dict
Tensor.manual_seed(1)
class MLP:
  def __init__(self): self.l1, self.l2 = Linear(20, 16, device=DEVICE), Linear(16, 5, device=DEVICE)
  def __call__(self, x): return self.l2(self.l1(x).relu()).softmax(-1)
model = MLP()
x = Tensor.randn(4, 20, device=DEVICE).contiguous().realize()
export(model, x, path="/tmp/mlp", state_dict=get_state_dict(model), batch_sizes=[4, 3])
files = {os.path.relpath(os.path.join(d, f), "/tmp/mlp"): base64.b64encode(open(os.path.join(d, f), "rb").read()).decode()
         for d, _, fs in os.walk("/tmp/mlp") for f in fs}
{"files": files, "x": x.tolist(), "want": model(x).tolist()}
"""

def test_a_model_exported_in_pyodide_runs_in_a_page_without_it(site, chromium, browser):
  """export works inside the browser's Python too (on the page's WEBGPU device); the folder it writes runs on a page
  with no Pyodide, to the outputs Pyodide computed."""
  import base64
  if browser.device != "WEBGPU": pytest.skip(f"the page's tinyweb runs on {browser.device}, not WEBGPU")
  got = browser(EXPORT_IN_PYODIDE)
  for name, data in got["files"].items():
    (site.data_dir / "mlp-from-browser" / name).parent.mkdir(parents=True, exist_ok=True)
    (site.data_dir / "mlp-from-browser" / name).write_bytes(base64.b64decode(data))
  assert {"manifest.json", "weights.json", "weights-00001-of-00001.safetensors"} <= set(got["files"])
  assert json.loads(base64.b64decode(got["files"]["manifest.json"]))["capturedOn"]["adapter"]   # (the browser's adapter, named)
  (site.data_dir / "mlp-from-browser.bin").write_bytes(np.asarray(got["x"], np.float32).tobytes())
  _write_page(site)
  result, urls = _open(chromium, site, "mlp-from-browser", "mlp-from-browser.bin")
  assert not result["pyodide"] and not [u for u in urls if "pyodide" in u.lower() or u.endswith(".whl")], urls
  _assert_close(result["output"], np.asarray(got["want"], np.float32))

# a module worker that loads the model named by ?model= and runs it on ?input=, posting the output back
WORKER_PAGE = """<!doctype html><meta charset="utf-8"><title>tinyweb export in a worker</title>
<script type="module">
const q = new URLSearchParams(location.search);
const worker = new Worker(URL.createObjectURL(new Blob([`
  import { loadModel } from "${new URL("../lib/model.js", location.href)}";
  onmessage = async ({ data }) => {
    try {
      const m = await loadModel(data.model), input = new Float32Array(await (await fetch(data.input)).arrayBuffer());
      const out = await m.run({ [m.inputs[0].name]: input });
      postMessage({ output: Array.from(out[m.outputs[0].name]), inWorker: typeof document === "undefined" });
    } catch (e) { postMessage({ error: String(e && e.stack || e) }); }
  };`], { type: "text/javascript" })), { type: "module" });
window.exportResult = new Promise((resolve) => { worker.onmessage = ({ data }) => resolve(data); });
worker.postMessage({ model: new URL(q.get("model"), location.href).href, input: new URL(q.get("input"), location.href).href });
</script>"""

def test_an_exported_model_runs_in_a_web_worker(site, chromium):
  """loadModel and run inside a module Web Worker (no document: URLs resolve against the worker's location)."""
  Tensor.manual_seed(2)
  model = MLP()
  Tensor.realize_all(*get_parameters(model))
  x = Tensor.randn(2, 20, device="WEBGPU").contiguous().realize()
  export(model, x, path=site.data_dir / "mlp-worker", state_dict=get_state_dict(model))
  (site.data_dir / "mlp-worker.bin").write_bytes(x.numpy().astype(np.float32).tobytes())
  (site.data_dir / "export-worker.html").write_text(WORKER_PAGE)
  page = chromium.new_context().new_page()
  try:
    page.goto(f"{site.url}e2e-data/export-worker.html?model=/e2e-data/mlp-worker/&input=/e2e-data/mlp-worker.bin")
    result = page.evaluate("window.exportResult")
  finally: page.context.close()
  assert "error" not in result, result["error"]
  assert result["inWorker"]
  _assert_close(result["output"], model(x).numpy())

def test_state_carries_from_run_to_run_in_chromium(site, chromium):
  """A step counter written in place (state): its exported value (3, after the capture's calls) is where the page
  starts, and each run goes on from the last."""
  from tinyweb import TinyJit
  counter = Tensor([0.0], device="WEBGPU").realize()
  @TinyJit
  def step(x):
    counter.assign(counter + 1)
    return (x * counter).contiguous()
  x = Tensor([1.0, 2.0, 3.0], device="WEBGPU").realize()
  for _ in range(3): step(x)
  export(step, x, path=site.data_dir / "counter", state_dict={"counter": counter})
  (site.data_dir / "counter-input.bin").write_bytes(x.numpy().astype(np.float32).tobytes())
  _write_page(site)
  result, _ = _open(chromium, site, "counter", "counter-input.bin", runs=3)
  assert result["output"] == [6.0, 12.0, 18.0]   # (runs 4, 5, 6)

def test_exported_efficientnet_lite0_matches_the_native_run_in_chromium(site, chromium, record_property):
  testdata = _testdata()
  from PIL import Image
  from tinyweb.models.efficientnet import EfficientNetLite, preprocess
  weights = testdata.path("efficientnet-lite0.pth")
  out = site.data_dir / "efficientnet-lite0"
  p = subprocess.run([sys.executable, "-m", "tinyweb.export", "efficientnet-lite0", str(out), "--weights", weights],
                     cwd=ROOT, capture_output=True, text=True, timeout=900)  # (run from the checkout: -m finds its tinyweb)
  assert p.returncode == 0, p.stdout + p.stderr
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["capturedOn"]["portable"] and manifest["features"] == []
  assert all(v <= d for v, d in zip(manifest["limits"].values(), [8, 65535, 128 << 20, 256 << 20, 256, 256, 256, 64, 16384]))
  model = EfficientNetLite.load(weights, device="WEBGPU")
  with Image.open(testdata.path("chelsea.png")) as im: pixels = np.array(im.convert("RGB"))
  x = preprocess(Tensor(pixels, device="CPU"), 224).to("WEBGPU").contiguous().realize()
  want = model(x).numpy()
  (site.data_dir / "cat-224.bin").write_bytes(x.numpy().astype(np.float32).tobytes())
  _write_page(site)
  context = chromium.new_context()
  try:
    cold, urls = _open(chromium, site, "efficientnet-lite0", "cat-224.bin", runs=3, context=context)
    warm, _ = _open(chromium, site, "efficientnet-lite0", "cat-224.bin", runs=1, context=context)   # (weights from the Cache API)
  finally: context.close()
  assert not cold["pyodide"] and not [u for u in urls if "pyodide" in u.lower() or u.endswith(".whl")], urls
  err = _assert_close(cold["output"], want)
  _assert_close(warm["output"], want)
  assert int(np.argmax(cold["output"])) == int(np.argmax(want))
  per_run = sorted(cold["runs"][1:])[len(cold["runs"][1:]) // 2]
  load = cold["load"]
  record_property("measure:export EfficientNet-Lite0: page open -> first result, cold / reload (s)",
                  f"{cold['firstResult']:.2f} / {warm['firstResult']:.2f}")
  record_property("measure:export EfficientNet-Lite0: load (s): manifest / device / kernels / weights / total",
                  " / ".join(f"{load[k]:.2f}" for k in ["manifest", "device", "kernels", "weights", "total"]))
  record_property("measure:export EfficientNet-Lite0: first run / per inference (ms)", f"{cold['runs'][0] * 1e3:.0f} / {per_run * 1e3:.0f}")
  record_property("measure:export EfficientNet-Lite0: kernels / steps / max |browser - native|",
                  f"{len(manifest['kernels'])} / {len(manifest['variants'][0]['steps'])} / {err:.2e}")

def test_exported_yolov8n_matches_the_native_run_in_chromium(site, chromium, record_property):
  """YOLOv8n (COCO's 80 classes, random weights: none are offline) at 320 x 320 by the command line (640, its usual
  size, quadruples SwiftShader's time: 96 s of the test's 99 at 640); the native run loads the weights the export wrote."""
  from tinyweb.models.yolov8 import YOLOv8
  from tinyweb.nn.state import load_state_dict, safe_load
  out = site.data_dir / "yolov8n"
  p = subprocess.run([sys.executable, "-m", "tinyweb.export", "yolov8n", str(out), "--size", "320"], cwd=ROOT, capture_output=True,
                     text=True, timeout=900)
  assert p.returncode == 0, p.stdout + p.stderr
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["capturedOn"]["portable"] and manifest["features"] == []
  model = YOLOv8("n", device="WEBGPU")
  state = {}
  for shard in manifest["weights"]["shards"]: state.update(safe_load(str(out / shard["file"])))
  missing, unexpected = load_state_dict(model, {k: v.to("WEBGPU") for k, v in state.items()}, strict=False)
  assert not unexpected and all(k.endswith("num_batches_tracked") for k in missing)   # (what no kernel reads is not exported)
  x = Tensor.rand(1, 3, 320, 320, device="WEBGPU").contiguous().realize()
  want = model(x).numpy()
  (site.data_dir / "yolo-320.bin").write_bytes(x.numpy().astype(np.float32).tobytes())
  _write_page(site)
  result, urls = _open(chromium, site, "yolov8n", "yolo-320.bin", runs=2)
  assert not result["pyodide"] and result["shape"] == [1, 84, 2100]   # (80^2 + 40^2 + 20^2 anchors at strides 8, 16, 32: 8400 at 640)
  err = _assert_close(result["output"], want)
  record_property("measure:export YOLOv8n 320: page open -> first result (s) / per inference (ms)",
                  f"{result['firstResult']:.2f} / {result['runs'][1] * 1e3:.0f}")
  record_property("measure:export YOLOv8n: kernels / steps / max |browser - native|",
                  f"{len(manifest['kernels'])} / {len(manifest['variants'][0]['steps'])} / {err:.2e}")

@pytest.fixture(scope="module")
def chromium_without_webgpu(playwright_instance):
  from browser_harness import launch_chromium
  b = launch_chromium(playwright_instance, webgpu=False)
  yield b
  b.close()

def _wasm_mlp():
  Tensor.manual_seed(4)
  l1, l2, l3 = Linear(20, 64, device="WASM"), Linear(64, 32, device="WASM"), Linear(32, 5, device="WASM")
  model = lambda x: l3(l2(l1(x).relu()).gelu()).log_softmax(-1)
  return model, {"l1": l1, "l2": l2, "l3": l3}

def test_a_wasm_export_runs_in_chromium_without_webgpu(site, chromium_without_webgpu):
  """An MLP exported for WASM at batch sizes 3 and 8, float16-stored weights (widened on load), runs as a WasmModel on a
  page with no WebGPU adapter: bit for bit the WASM device's results; profile() times its steps."""
  model, layers = _wasm_mlp()
  for p in get_parameters(layers): p.assign(p.cast("float16").cast("float32")).realize()
  x = Tensor.randn(3, 20, device="WASM").contiguous().realize()
  manifest = export(model, x, path=site.data_dir / "mlp-wasm", state_dict=get_state_dict(layers), batch_sizes=[3, 8], target="WASM")
  assert all(b.get("stored") == "float16" for b in manifest["variants"][0]["buffers"] if b["kind"] == "weight")
  _write_page(site)
  for n in (3, 8):
    xn = Tensor.randn(n, 20, device="WASM").contiguous().realize()
    (site.data_dir / f"mlp-wasm-{n}.bin").write_bytes(xn.numpy().tobytes())
    result, urls = _open(chromium_without_webgpu, site, "mlp-wasm", f"mlp-wasm-{n}.bin", runs=2, profile=True)
    assert not result["adapter"] and result["model"] == "WasmModel" and not result["pyodide"] and len(result["output"]) == n * 5
    assert not [u for u in urls if "pyodide" in u.lower() or u.endswith(".whl")], urls
    np.testing.assert_array_equal(np.float32(result["output"]).reshape(n, 5), model(xn).numpy())
    assert [p["name"] for p in result["profile"]] == [manifest["kernels"][s["kernel"]]["file"] for s in manifest["variants"][n == 8]["steps"]]
  assert "input input has 3 elements; the model takes shape [3,20] or [8,20]" in result["badInput"]

def test_a_wasm_exports_math_imports_and_state_in_chromium(site, chromium_without_webgpu):
  """sin, cos and fmod come from JavaScript's Math and % (C's fmod, at the special values too): the page's results equal
  the WASM device's (tinyweb.scalar's math) bit for bit; a counter (state) goes on from run to run."""
  from tinyweb import TinyJit
  inf, nan = float("inf"), float("nan")
  xs = [0.3, -2.0, 7.5, 1e3, -1e-30, 0.0, -0.0, inf, -inf, nan, 5.5, -5.5, 1e30, 3.0, -7.0, 123456.78]
  ws = [0.5, -1.25, 3.0, 1024.0, 0.75, 2.0, -3.0, 1.0, 2.0, 1.0, 0.0, -0.0, inf, -inf, 2.5, 1e-3]
  w = Tensor(ws, device="WASM").realize()
  counter = Tensor([0.0], device="WASM").contiguous().realize()
  @TinyJit
  def f(x):
    counter.assign(counter + 1)
    return {"trig": ((x * w).sin() + x.cos() * counter).contiguous(), "rem": (x % w).contiguous(), "fmod": x.fmod(w).contiguous()}
  x = Tensor(xs, device="WASM").realize()
  for _ in range(3): f(x)
  manifest = export(f, x, path=site.data_dir / "math-wasm", output_names=["trig", "rem", "fmod"], state_dict={"w": w, "counter": counter},
                    target="WASM", weights_dtype="float32")
  assert {n for k in manifest["kernels"] for n in k["imports"]} >= {"sin", "cos", "fmod"}
  (site.data_dir / "math-wasm.bin").write_bytes(np.float32(xs).tobytes())
  _write_page(site)
  result, _ = _open(chromium_without_webgpu, site, "math-wasm", "math-wasm.bin", runs=2)
  want = [f(x) for _ in range(2)][-1]   # (runs 4 and 5; the page's last is its 5th)
  for name, t in want.items():
    got = np.array([nan if v is None else v for v in result["outputs"][name]], np.float32)
    np.testing.assert_array_equal(got, t.numpy(), err_msg=name)

def test_exported_efficientnet_lite0_runs_as_wasm_in_chromium_without_webgpu(site, chromium_without_webgpu, record_property):
  """EfficientNet-Lite0 (real weights, a real photo) by `python -m tinyweb.export efficientnet-lite0 DIR --target wasm`,
  in a Chromium without WebGPU: the WASM device's native result bit for bit, the CPU device's within 1e-4 of its
  largest logit (measured: 3.8e-6 absolute; the CPU device fuses multiply-adds), the same class; the page's timings."""
  testdata = _testdata()
  from PIL import Image
  from tinyweb.models.efficientnet import EfficientNetLite, preprocess
  weights = testdata.path("efficientnet-lite0.pth")
  out = site.data_dir / "efficientnet-lite0-wasm"
  p = subprocess.run([sys.executable, "-m", "tinyweb.export", "efficientnet-lite0", str(out), "--weights", weights, "--target", "wasm"],
                     cwd=ROOT, capture_output=True, text=True, timeout=900)
  assert p.returncode == 0, p.stdout + p.stderr
  manifest = json.loads((out / "manifest.json").read_text())
  assert manifest["target"] == "WASM" and "limits" not in manifest
  with Image.open(testdata.path("chelsea.png")) as im: pixels = np.array(im.convert("RGB"))
  x = preprocess(Tensor(pixels, device="CPU"), 224).contiguous().realize()
  want_wasm = EfficientNetLite.load(weights, device="WASM")(x.to("WASM")).numpy()
  want_cpu = EfficientNetLite.load(weights, device="CPU")(x).numpy()
  (site.data_dir / "cat-224-wasm.bin").write_bytes(x.numpy().astype(np.float32).tobytes())
  _write_page(site)
  context = chromium_without_webgpu.new_context()
  try:
    cold, urls = _open(chromium_without_webgpu, site, "efficientnet-lite0-wasm", "cat-224-wasm.bin", runs=3, context=context)
    warm, _ = _open(chromium_without_webgpu, site, "efficientnet-lite0-wasm", "cat-224-wasm.bin", runs=1, context=context)
  finally: context.close()
  assert not cold["adapter"] and cold["model"] == "WasmModel" and not cold["pyodide"]
  np.testing.assert_array_equal(np.float32(cold["output"]).reshape(want_wasm.shape), want_wasm)
  np.testing.assert_array_equal(np.float32(warm["output"]).reshape(want_wasm.shape), want_wasm)
  err = _assert_close(cold["output"], want_cpu)
  assert int(np.argmax(cold["output"])) == int(np.argmax(want_cpu))
  per_run = sorted(cold["runs"][1:])[len(cold["runs"][1:]) // 2]
  load = cold["load"]
  record_property("measure:export EfficientNet-Lite0 WASM (no WebGPU): page open -> first result, cold / reload (s)",
                  f"{cold['firstResult']:.2f} / {warm['firstResult']:.2f}")
  record_property("measure:export EfficientNet-Lite0 WASM: load (s): manifest / memory / kernels / weights / total",
                  " / ".join(f"{load[k]:.2f}" for k in ["manifest", "device", "kernels", "weights", "total"]))
  record_property("measure:export EfficientNet-Lite0 WASM: first run / per inference (ms)", f"{cold['runs'][0] * 1e3:.0f} / {per_run * 1e3:.0f}")
  record_property("measure:export EfficientNet-Lite0 WASM: kernels / steps / memory (MB) / max |browser - CPU device|",
                  f"{len(manifest['kernels'])} / {len(manifest['variants'][0]['steps'])} / {manifest['memory']['bytes'] / 1e6:.1f} / {err:.2e}")
