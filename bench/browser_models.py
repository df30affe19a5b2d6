"""EfficientNet-Lite0 (real weights) in headless Chromium four ways, in one browser launch (one WebGPU adapter:
SwiftShader on a machine without a GPU), next to torch run natively in the same process:

  python -m bench.browser_models                          # all four paths (10+ minutes on a busy 2-core machine)
  python -m bench.browser_models --only export,ort-wasm   # some of them
  python -m bench.browser_models --runs 5                 # timed runs after the first (default 3)

- export: `python -m tinyweb.export efficientnet-lite0 DIR --weights PTH`, run by the package's runtime (dist/lib/model.js)
  on a page without Pyodide (bench/browser/export.html): cold (a fresh browser context), then reloaded in the same
  context (weights from the Cache API; a fresh context caches no compiled kernels), and 'returning': a browser with a
  profile on disk, opened once, closed and launched again (Chromium's Dawn cache then keeps the compiled WGSL).
- pyodide: the live path. The playground page (index.html) boots Pyodide and tinyweb in its Web Worker; Python there
  fetches the .pth, builds EfficientNetLite on WEBGPU (EfficientNetLite.load) and runs it; the runs after the first go
  through TinyJit, whose two warm-up calls (plain run, capture) are reported apart and not timed as runs.
- ort-webgpu / ort-wasm: ONNX Runtime Web (npm onnxruntime-web, served from node_modules) with its WebGPU or wasm
  execution provider (1 thread: threads need COOP/COEP headers) on the ONNX file torch.onnx exports from
  efficientnet_lite_pytorch (bench/browser/ort.html).

The input is chelsea.png through tinyweb.models.efficientnet.preprocess (224 x 224), computed natively; the same float32
bytes go to every path and to torch, whose top-1 each path must match. 'page open -> first result' counts from the
page's navigation start (its performance.now()): downloads, compiles, weights and the first inference; 'first inference'
is that first call alone; 'per inference' the median of --runs calls after it. Every call ends with the 1000 logits back
on the CPU. The exports, the ONNX file and the input go to a temp folder served at /e2e-data/ next to dist/ (npm run build
when stale: e2e/browser_harness.build_site). SwiftShader runs WebGPU on the CPU: browser times here are relative measures,
noisy when the machine is busy (the load average is printed under the table)."""
from __future__ import annotations
import argparse, contextlib, os, shutil, statistics, subprocess, sys, tempfile, time, warnings
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "e2e"), str(ROOT / "tests")]
PATHS = ("export", "pyodide", "ort-webgpu", "ort-wasm")
PAGES = Path(__file__).resolve().parent / "browser"
ORT_DIST = ROOT / "node_modules" / "onnxruntime-web" / "dist"
SHAPE = (1, 3, 224, 224)

# ---------------------------------------------------------------------------------------------------------------
# natively: the input, torch's reference, the two exports

def prepare_input(photo: str) -> np.ndarray:
  """The photo as tinyweb's preprocess makes it (on the CPU device)."""
  from PIL import Image
  from tinyweb import Tensor
  from tinyweb.models.efficientnet import preprocess
  with Image.open(photo) as im: pixels = np.array(im.convert("RGB"))
  return np.ascontiguousarray(preprocess(Tensor(pixels, device="CPU"), 224).numpy(), dtype=np.float32)

def torch_reference(pth: str, x: np.ndarray, runs: int):
  """(the reference model, its logits for x, its call times in s)."""
  import torch
  from efficientnet_lite_pytorch import EfficientNet
  with contextlib.redirect_stdout(sys.stderr): model = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=pth).eval()
  times, xt = [], torch.from_numpy(x)
  with torch.no_grad():
    for _ in range(1 + max(runs, 5)):
      st = time.perf_counter(); out = model(xt).numpy(); times.append(time.perf_counter() - st)
  return model, out[0], times

def export_onnx(model, path: Path):
  """The TorchScript exporter (dynamo=False): the dynamo one needs onnxscript, which the project does not install."""
  import torch
  with warnings.catch_warnings(), contextlib.redirect_stdout(sys.stderr):
    warnings.simplefilter("ignore")
    torch.onnx.export(model, (torch.zeros(SHAPE),), str(path), input_names=["input"], output_names=["logits"], opset_version=17, dynamo=False)

def export_tinyweb(pth: str, out: Path) -> str | None:
  """The command line export (its own process: the portable WEBGPU target); the error text when it fails."""
  p = subprocess.run([sys.executable, "-m", "tinyweb.export", "efficientnet-lite0", str(out), "--weights", pth], cwd=ROOT,
                     capture_output=True, text=True, timeout=900)
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

def bench_export(browser, site, runs: int, timeout_s: float) -> list[tuple[str, dict]]:
  context = browser.new_context()
  try:
    page, console = new_page(context)
    page.goto(f"{site.url}e2e-data/export.html?model=/e2e-data/efficientnet-lite0/&input=/e2e-data/input.bin&runs={runs}")
    cold = outcome(page, console, timeout_s)
    console.clear()
    page.reload()
    reload = outcome(page, console, timeout_s)
  finally: context.close()
  for r in (cold, reload):
    if "load" in r:   # (loadModel's timings: when each part was ready, counted from its call)
      r["notes"] = "loadModel (s): " + ", ".join(f"{k} {r['load'][k]:.2f}" for k in ("manifest", "device", "kernels", "weights", "total"))
  return [("export (cold)", cold), ("export (reload)", reload)]

def bench_export_returning(playwright, site, profile: Path, runs: int, timeout_s: float) -> dict:
  """The export page in a browser with a profile on disk, as a returning visitor has: opened once, the browser closed
  and launched again on the same profile, then timed (Chromium's Dawn cache keeps the compiled WGSL across launches,
  not SwiftShader's own compile; the Cache API keeps the weights)."""
  from browser_harness import CHROMIUM, CHROMIUM_ARGS, WEBGPU_FLAG
  for visit in ("first", "returning"):
    context = playwright.chromium.launch_persistent_context(str(profile), executable_path=CHROMIUM, headless=True,
                                                            args=CHROMIUM_ARGS + [WEBGPU_FLAG])
    try:
      page, console = new_page(context)
      page.goto(f"{site.url}e2e-data/export.html?model=/e2e-data/efficientnet-lite0/&input=/e2e-data/input.bin&runs={runs}")
      r = outcome(page, console, timeout_s)
    finally: context.close()
    if "error" in r: return r
  r["notes"] = "loadModel (s): " + ", ".join(f"{k} {r['load'][k]:.2f}" for k in ("manifest", "device", "kernels", "weights", "total"))
  return r

def bench_ort(browser, site, ep: str, runs: int, timeout_s: float) -> dict:
  context = browser.new_context()
  try:
    page, console = new_page(context)
    page.goto(f"{site.url}e2e-data/ort.html?ep={ep}&model=/e2e-data/efficientnet-lite0.onnx&input=/e2e-data/input.bin"
              f"&shape={','.join(map(str, SHAPE))}&runs={runs}")
    r = outcome(page, console, timeout_s)
  finally: context.close()
  if "load" in r: r["notes"] = f"onnxruntime-web {r.get('version')}, session created in {r['load']['session']:.2f} s"
  return r

# Python run in the playground's worker (Pyodide): stage by stage, each stage timed by the page
# (runPython has no top-level await: the fetches wait with run_sync, JSPI)
PY_LOAD = """import time
from pyodide.ffi import run_sync
from pyodide.http import pyfetch
from tinyweb import Tensor, TinyJit, dtypes
from tinyweb.models.efficientnet import EfficientNetLite
fetch = lambda url: run_sync(run_sync(pyfetch(url)).bytes())
t0 = time.perf_counter()
with open("/tmp/efficientnet-lite0.pth", "wb") as f: f.write(fetch(WEIGHTS_URL))
x = Tensor.frombuffer(fetch(INPUT_URL), dtypes.float32, SHAPE, DEVICE)
t1 = time.perf_counter()
model = EfficientNetLite.load("/tmp/efficientnet-lite0.pth", device=DEVICE)
step = TinyJit(lambda x: model(x).realize())
{"fetch": t1 - t0, "build": time.perf_counter() - t1}"""
PY_RUN, PY_JIT = "model(x).tolist()[0]", "step(x).tolist()[0]"

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

def bench_pyodide(browser, site, runs: int, timeout_s: float) -> dict:
  context = browser.new_context()
  try:
    page, console = new_page(context)
    page.goto(site.url + "index.html")
    consts = {"DEVICE": "WEBGPU", "SHAPE": list(SHAPE), "WEIGHTS_URL": site.url + "e2e-data/efficientnet-lite0.pth",
              "INPUT_URL": site.url + "e2e-data/input.bin"}
    page.evaluate(PYODIDE_JS, [{"load": PY_LOAD, "run": PY_RUN, "jit": PY_JIT}, consts, runs])
    r = outcome(page, console, timeout_s)
  finally: context.close()
  if "load" in r:
    r["notes"] = (f"tinyweb ready at {r['ready']:.2f} s (device {r['reported']}); .pth + input fetched in {r['load']['fetch']:.2f} s, "
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
# the table

def top1(logits) -> int: return int(np.argmax(logits))

def table(rows: list[tuple[str, dict]], ref: np.ndarray, torch_times: list[float], info: list[str]) -> str:
  from tinyweb.models.efficientnet import imagenet_classes
  names = imagenet_classes()
  cls = lambda i: f"{i} {names[i]}"[:22]
  head = f"{'path':18} {'page open -> first result (s)':>29} {'first inference (s)':>19} {'per inference (s)':>17}  {'top-1':22}  max |out - torch|"
  lines = [head, "-" * len(head),
           f"{'torch (native CPU)':18} {'-':>29} {torch_times[0]:19.3f} {statistics.median(torch_times[1:]):17.3f}  {cls(top1(ref)):22}  0 (reference)"]
  failed, notes = [], []
  for name, r in rows:
    if "error" in r:
      lines.append(f"{name:18} {'failed':>29}")
      failed.append(f"FAILED {name}: {r['error']}" + ("".join(f"\n    console: {c}" for c in r.get("console", []))))
      continue
    out = np.asarray(r["output"], dtype=np.float32)
    per = f"{statistics.median(r['runs'][1:]):17.3f}" if len(r["runs"]) > 1 else f"{'-':>17}"
    lines.append(f"{name:18} {r['firstResult']:29.2f} {r['runs'][0]:19.3f} {per}  {cls(top1(out)):22}  {np.abs(out - ref).max():.2e}")
    if top1(out) != top1(ref): failed.append(f"FAILED {name}: top-1 {cls(top1(out))}, torch says {cls(top1(ref))}")
    notes.append(f"{name}: runs (s) {', '.join(f'{t:.3f}' for t in r['runs'])}" + (f"; {r['notes']}" if r.get("notes") else "") +
                 "".join(f"\n    console: {c[:300]}" for c in dict.fromkeys(r["console"])))
  return "\n".join(lines + [""] + info + notes + failed)

# ---------------------------------------------------------------------------------------------------------------

def main():
  ap = argparse.ArgumentParser(prog="python -m bench.browser_models", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--only", help=f"comma-separated paths out of {','.join(PATHS)}")
  ap.add_argument("--runs", type=int, default=3, help="timed calls after the first, per path (default 3); per inference is their median")
  ap.add_argument("--timeout", type=float, default=1800, help="seconds a page may take to give its result (default 1800)")
  a = ap.parse_args()
  paths = [p.strip() for p in a.only.split(",")] if a.only else list(PATHS)
  if (bad := [p for p in paths if p not in PATHS]): ap.error(f"unknown path(s) {bad}: choose from {list(PATHS)}")
  if a.runs < 1: ap.error("--runs must be at least 1")
  from browser_harness import Site, build_site, launch_chromium, missing_requirement, serve_site
  import testdata
  if (why := missing_requirement()): raise SystemExit(f"this benchmark needs {why}")
  pth, photo = (os.path.join(testdata.folder(), n) for n in ("efficientnet-lite0.pth", "chelsea.png"))
  if not (os.path.exists(pth) and os.path.exists(photo)): raise SystemExit(f"{pth} or {photo} is missing: run `python -m tests.testdata`")
  if any(p.startswith("ort") for p in paths) and not ORT_DIST.is_dir(): raise SystemExit(f"{ORT_DIST} is missing: run `npm ci`")
  import torch
  load0, st, info = os.getloadavg()[0], time.perf_counter(), []
  log = lambda msg: print(f"[{time.perf_counter() - st:6.1f} s] {msg}", file=sys.stderr, flush=True)
  with tempfile.TemporaryDirectory(prefix="bench-browser-") as tmp:
    data = Path(tmp)
    log("input and torch reference")
    x = prepare_input(photo)
    (data / "input.bin").write_bytes(x.tobytes())
    model, ref, torch_times = torch_reference(pth, x, a.runs)
    errors: dict[str, str] = {}
    if "export" in paths:
      log("python -m tinyweb.export efficientnet-lite0")
      t = time.perf_counter()
      if (err := export_tinyweb(pth, data / "efficientnet-lite0")): errors["export"] = err
      info.append(f"python -m tinyweb.export took {time.perf_counter() - t:.1f} s")
    if any(p.startswith("ort") for p in paths):
      log("torch.onnx.export")
      t = time.perf_counter()
      try: export_onnx(model, data / "efficientnet-lite0.onnx")
      except Exception as e: errors["ort-webgpu"] = errors["ort-wasm"] = f"torch.onnx.export failed: {type(e).__name__}: {e}"
      info.append(f"torch.onnx.export (opset 17, dynamo=False) took {time.perf_counter() - t:.1f} s")
      (data / "ort").symlink_to(ORT_DIST)
    os.symlink(pth, data / "efficientnet-lite0.pth")
    for f in PAGES.glob("*.html"): shutil.copy(f, data / f.name)
    (data / "blank.html").write_text("<!doctype html><title>blank</title>")
    log("npm run build (when dist/ is stale)")
    build_site()
    site = Site(serve_site(data), data)
    from playwright.sync_api import sync_playwright
    rows: list[tuple[str, dict]] = []
    try:
      with sync_playwright() as pw:
        browser = launch_chromium(pw)
        try:
          page = browser.new_page()
          page.goto(site.url + "e2e-data/blank.html")
          info.insert(0, f"Chromium {browser.version}, WebGPU adapter: {page.evaluate(ADAPTER_JS)}")
          page.context.close()
          for p in paths:
            log(f"{p} in the browser")
            try:
              if p in errors: rows.append((p, {"error": errors[p]}))
              elif p == "export": rows += bench_export(browser, site, a.runs, a.timeout)
              elif p == "pyodide": rows.append((p, bench_pyodide(browser, site, a.runs, a.timeout)))
              else: rows.append((p, bench_ort(browser, site, p.split("-")[1], a.runs, a.timeout)))
            except Exception as e: rows.append((p, {"error": f"{type(e).__name__}: {e}"}))   # (a page that crashed: go on with the next)
        finally: browser.close()
        if "export" in paths and "export" not in errors:
          log("export in a browser launched again on a profile on disk (a returning visitor)")
          try: rows.append(("export (returning)", bench_export_returning(pw, site, data / "profile", a.runs, a.timeout)))
          except Exception as e: rows.append(("export (returning)", {"error": f"{type(e).__name__}: {e}"}))
    finally:
      site.server.shutdown()
      site.server.server_close()
  info.append(f"--runs {a.runs}; torch: median of {len(torch_times) - 1} runs after the first, {torch.get_num_threads()} threads; "
              f"load average {load0:.2f} at start, {os.getloadavg()[0]:.2f} at end; {time.perf_counter() - st:.0f} s in all")
  text = table(rows, ref, torch_times, info)
  print(text)
  if "\nFAILED " in text: raise SystemExit(1)

if __name__ == "__main__": main()
