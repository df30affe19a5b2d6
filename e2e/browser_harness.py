"""The e2e harness: building and serving the site, launching Chromium, opening the playground, running snippets in the
page and natively, comparing results. The fixtures that use it are in e2e/conftest.py (its docstring says how)."""
from __future__ import annotations
import ast, contextlib, fcntl, hashlib, importlib.util, os, shutil, subprocess, sys, tempfile, threading, time
from pathlib import Path
import pytest
from tinyweb.serve import StaticHandler, StaticServer

ROOT = Path(__file__).resolve().parent.parent
DIST = ROOT / "dist"
CHROMIUM = os.environ.get("TINYWEB_CHROMIUM", "/usr/lib/chromium/chromium")
# the flags measured to give headless Chromium a WebGPU adapter without network noise (see ENVIRONMENT.md)
CHROMIUM_ARGS = ["--no-sandbox", "--no-first-run", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--disable-quic"]
WEBGPU_FLAG = "--enable-unsafe-webgpu"
BUILD_INPUTS = ["tinyweb", "backends", "web", "package.json", "package-lock.json", "vite.config.ts", "vite.lib.config.ts", "tsconfig.json",
                "tsconfig.lib.json", "pyproject.toml",
                "README.md", "LICENSE"]   # (the wheel's description and license)
LOAD_TIMEOUT_MS = 120_000   # Pyodide + tinyweb on a busy 2-core machine

def missing_requirement() -> str | None:
  try: import playwright.sync_api  # noqa: F401
  except ImportError: return "the playwright Python package (pip install 'playwright==1.65.2', extra [web])"
  if not os.access(CHROMIUM, os.X_OK): return f"Chromium at {CHROMIUM} (apt-get install chromium)"
  if shutil.which("npm") is None: return "npm (Node.js)"
  if not (ROOT / "node_modules" / "vite").is_dir(): return "node_modules (run npm ci; scripts/setup.sh does)"
  return None

def load_testdata():
  """tests/testdata.py (where the real weights and photos are: load_testdata().path(name) skips a test without them)."""
  if (m := sys.modules.get("testdata")) is not None: return m
  spec = importlib.util.spec_from_file_location("testdata", ROOT / "tests" / "testdata.py")
  m = sys.modules["testdata"] = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(m)
  return m

# ---------------------------------------------------------------------------------------------------------------
# the site: build when stale, serve with Range support

def sources_digest(names: list[str] = BUILD_INPUTS) -> str:
  h = hashlib.sha256()
  for name in names:
    p = ROOT / name
    for f in sorted([p] if p.is_file() else p.rglob("*")):
      if f.is_file() and "__pycache__" not in f.parts and f.suffix != ".pyc" and "viz_page" not in f.parts:   # (tinyweb/viz_page: built)
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes() + b"\0")
  return h.hexdigest()

def scratch_path(name: str) -> Path:
  """A file in the temp folder that belongs to this checkout."""
  return Path(tempfile.gettempdir()) / f"tinyweb-e2e-{hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]}-{name}"

@contextlib.contextmanager
def locked(name: str):
  """An exclusive lock across processes (xdist workers: one does the work, the others wait and find it done)."""
  with open(scratch_path(name + ".lock"), "w") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    yield

# what the pages' models are made from: an export of older sources is made again
MODEL_INPUTS = ["tinyweb", "backends", "demos", "scripts/build_models.py"]

def page_model(site: Site, name: str) -> tuple[str, float | None]:
  """scripts/build_models.py's folder for model `name` (a page's model, with its sample), served at the URL returned
  (under /e2e-data/models/), and the seconds the export took when this process made it (None: an earlier one did).
  Exports are kept in the temp folder, keyed by the digest of the sources they come from: made once for all xdist
  workers and later runs, until those sources change. A model whose test data is missing skips the test."""
  folder = scratch_path(f"models-{sources_digest(MODEL_INPUTS)[:16]}")
  seconds = None
  with locked(f"model-{name}"):   # (one lock a model: another worker builds another model meanwhile)
    if not (folder / name / "manifest.json").exists():
      for old in folder.parent.glob(scratch_path("models-*").name):
        if old != folder: shutil.rmtree(old, ignore_errors=True)   # (exports of older sources)
      st = time.perf_counter()
      p = subprocess.run([sys.executable, "scripts/build_models.py", str(folder), "--only", name], cwd=ROOT,
                         capture_output=True, text=True, timeout=1800)
      assert p.returncode == 0, p.stdout + p.stderr
      if "skipping" in p.stderr: pytest.skip(p.stderr.strip())
      seconds = time.perf_counter() - st
    served = site.data_dir / "models"
    with contextlib.suppress(FileExistsError): served.symlink_to(folder)   # (this worker's other models made it already)
  return f"/e2e-data/models/{name}/", seconds

def build_site():
  """npm run build, unless dist/ was built from the same sources (a digest is kept in dist/.sources)."""
  with locked("build"):
    digest, stamp = sources_digest(), DIST / ".sources"
    if stamp.exists() and stamp.read_text() == digest: return
    p = subprocess.run(["npm", "run", "build"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if p.returncode != 0: raise RuntimeError(f"npm run build failed:\n{p.stdout}\n{p.stderr}")
    stamp.write_text(digest)

class SiteHandler(StaticHandler):
  """tinyweb.serve's handler (Range requests, 206 / 416), quiet; /e2e-data/ maps to the test data. A URL with
  `?norange` is served like by a server without Range support (the whole file, 200, no Accept-Ranges)."""
  data_dir: Path
  def translate_path(self, path):
    if path.startswith("/e2e-data/"): return str(self.data_dir / path[len("/e2e-data/"):].split("?")[0])
    return super().translate_path(path)
  def send_head(self):
    if self.path.endswith("?norange"): del self.headers["Range"]
    return super().send_head()
  def send_header(self, keyword, value):
    if not (keyword == "Accept-Ranges" and self.path.endswith("?norange")): super().send_header(keyword, value)

def serve_site(data_dir: Path) -> StaticServer:
  """dist/ (and data_dir at /e2e-data/) on a free port of 127.0.0.1, served by tinyweb.serve in a thread of this process
  (so a test can read `server.bytes_sent`)."""
  server = StaticServer(DIST, port=0, quiet=True, handler=type("Handler", (SiteHandler,), {"data_dir": data_dir}))
  threading.Thread(target=server.serve_forever, daemon=True).start()
  return server

class Site:
  def __init__(self, server: StaticServer, data_dir: Path): self.server, self.url, self.data_dir = server, server.url, data_dir

# ---------------------------------------------------------------------------------------------------------------
# the browser

def launch_chromium(playwright, webgpu: bool = True):
  return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS + ([WEBGPU_FLAG] if webgpu else []))

PAGE_VIEWPORT = {"width": 1000, "height": 700}

def open_model_page(browser, url: str, timeout_ms: int):
  """A model demo page (classify, embed, diffuse, generate...: they mark <body data-state>) at `url` in a new context
  (nothing cached), PAGE_VIEWPORT, once it is ready or failed; page.console_messages collects its console and errors."""
  page = browser.new_context(viewport=PAGE_VIEWPORT).new_page()
  page.console_messages = []
  page.on("console", lambda m: page.console_messages.append(m.text))
  page.on("pageerror", lambda e: page.console_messages.append(f"page error: {e}"))
  page.goto(url)
  page.wait_for_selector("body[data-state=ready], body[data-state=error]", timeout=timeout_ms)
  return page

def checked_screenshot(page, name: str):
  """The page's screenshot as RGB pixels (float32), checked to be PAGE_VIEWPORT's size and not blank; the PNG kept as
  $TINYWEB_SCREENSHOTS/<name>.png when that is set."""
  import io
  import numpy as np
  from PIL import Image
  png = page.screenshot()
  with Image.open(io.BytesIO(png)) as im:
    assert im.size == (PAGE_VIEWPORT["width"], PAGE_VIEWPORT["height"])
    pixels = np.asarray(im.convert("RGB"), np.float32)
  assert pixels.std() > 20, pixels.std()
  if (folder := os.environ.get("TINYWEB_SCREENSHOTS")):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, f"{name}.png"), "wb") as f: f.write(png)
  return pixels

def assert_says_no_webgpu(page, button: str):
  """A model page opened in a Chromium without WebGPU: it failed, saying why and what to do in this browser, with
  `button` (its action) disabled."""
  assert page.get_attribute("body", "data-state") == "error"
  notice = page.text_content("#notice")
  assert notice.startswith("WebGPU is not available (headless Chromium has WebGPU only when launched with "
                           "--enable-unsafe-webgpu)"), notice
  assert page.text_content("#adapter") == "no WebGPU adapter" and page.is_disabled(button)

def open_playground(browser, site: Site, on_request=None, worker: bool = True):
  """A new page (own storage) on the playground with tinyweb loaded; returns (page, seconds to load). Python runs in the
  page's Web Worker (worker=False: in the page itself, `?worker=0`). on_request(url) is called for every request the
  page (or its worker) makes from the start."""
  page = browser.new_context().new_page()
  if on_request: page.on("request", lambda r: on_request(r.url))
  console: list[str] = []
  page.on("console", lambda m: console.append(m.text))
  st = time.perf_counter()
  page.goto(site.url + "index.html" + ("" if worker else "?worker=0"))
  page.wait_for_function("window.tinyweb || window.tinywebError", timeout=LOAD_TIMEOUT_MS)
  if (err := page.evaluate("window.tinywebError")): raise RuntimeError(f"tinyweb failed to load:\n{err}\nconsole:\n" + "\n".join(console))
  assert page.evaluate("window.tinyweb.mode") == ("worker" if worker else "main")
  page.console_messages = console
  return page, time.perf_counter() - st

def run_in_playground(page, code: str) -> str:
  """Type `code` into the playground, click Run, wait until the run is over (figures drawn too); the output's text."""
  page.fill("#code", code)
  page.click("#run")
  page.wait_for_function("document.querySelector('#output').textContent !== 'running…' && !document.querySelector('#run').disabled")
  return page.text_content("#output")

# a snippet in a fresh namespace; its last expression comes back converted to JavaScript values (and from there to Python)
RUN_JS = """async ([code, device]) => {
  const tw = window.tinyweb, globals = await tw.newGlobals();
  try {
    await globals.set("DEVICE", device);
    return await tw.runPython(code, {globals});
  } finally { globals.destroy(); }
}"""

class BrowserRunner:
  """Runs Python snippets in the page (see the module docstring), on `device` (None: the page's default device)."""
  def __init__(self, page, device: str | None = None): self.page, self.pinned = page, device
  @property
  def device(self) -> str: return self.pinned or self.page.evaluate("window.tinyweb.report.device")
  def __call__(self, code: str, device: str | None = None):
    return self.page.evaluate(RUN_JS, [code, device or self.device])
  def compare(self, code: str) -> tuple:
    """(result in the browser on its device, result natively on the CPU device)."""
    return self(code), run_native(code, "CPU")

def run_native(code: str, device: str):
  """The snippet run in this process with DEVICE = device; its last expression (if any) is the result."""
  tree = ast.parse(code)
  last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
  g = {"DEVICE": device}
  exec(compile(tree, "<snippet>", "exec"), g)
  return eval(compile(ast.Expression(last.value), "<snippet>", "eval"), g) if last else None

def assert_close(got, want, atol=1e-5, rtol=1e-5, path="result"):
  """Nested lists/numbers equal within tolerance (NaN equals NaN), naming the first position that differs."""
  if isinstance(want, (list, tuple)):
    assert isinstance(got, (list, tuple)) and len(got) == len(want), f"{path}: got {got!r}, want {want!r}"
    for i, (g, w) in enumerate(zip(got, want)): assert_close(g, w, atol, rtol, f"{path}[{i}]")
  elif isinstance(want, float) or isinstance(got, float):
    if got == want: return   # (also inf == inf)
    if want != want: assert got != got, f"{path}: got {got}, want NaN"
    else: assert abs(got - want) <= atol + rtol * abs(want), f"{path}: got {got}, want {want}"
  else: assert got == want, f"{path}: got {got!r}, want {want!r}"
