"""The browser suite: the tests of tests/ marked `@pytest.mark.browser` run inside the page (Pyodide) on its devices,
WebGPU and WASM (the browser's WebAssembly engine), each reported here as its own test, named by its node id
(`test_in_browser[tests/test_x.py::test_y[WEBGPU-...]]`).

How: the marked node ids (devices BROWSER_DEVICES) are collected by pytest in a subprocess (cached per tests/ sources). A
page gets pytest and its pure-Python dependencies from this Python's site-packages, tests/ and pyproject.toml (the marker
and the pytest settings), and runs each node id with `pytest.main` in Pyodide, with TEST_DEVICES=BROWSER_DEVICES. Pyodide has
neither numpy nor torch: `import numpy` / `import torch` in the page give proxies of the modules in this process
(remote_modules.py), so references are computed by the real libraries and tinyweb alone runs in the browser; likewise
onnx (the ONNX node tests' cases), onnxruntime (the real models' reference), PIL (decoding photos) and tests/onnx_node_cases.py
(which picks the page's few node cases out of onnx's 1,884 in this process).

Test data (tests/testdata.py): the page's TINYWEB_TESTDATA is the test process's folder, same path, and the files of
PAGE_TESTDATA that this machine has are copied there into the page's file system. So `testdata.path(name)` names the
same file on both sides: tinyweb reads the page's copy, the proxied libraries (PIL, onnxruntime) the original."""
import importlib.metadata, importlib.util, io, json, os, subprocess, sys, zipfile
import pytest
from browser_harness import ROOT, locked, open_playground, scratch_path, sources_digest
import remote_modules

PAGE_DIR = "/browser-suite"
BROWSER_DEVICES = "WEBGPU,WASM"   # (tests/conftest.py skips WASM in the API-level modules, as natively)
# WASM in the page runs these modules' marked tests (not all: the page's WASM kernels are the text every device-level
# module checks natively; what differs in the page is the runtime, its memory, module loading and JS math, which these
# and e2e/test_browser_ops.py's WASM runs cover; the ops modules on it cost 3 minutes more)
WASM_MODULES = {"tests/test_creation_dtype.py", "tests/test_autograd.py", "tests/test_nn.py", "tests/test_optim.py",
                "tests/test_serve.py"}
PYTEST_DISTS = ["pytest", "pluggy", "iniconfig", "packaging", "pygments"]   # pytest and what it imports on Python 3.14
NATIVE_MODULES = ("numpy", "torch", "onnx", "onnxruntime", "PIL", "onnx_node_cases")
PAGE_TESTDATA = ("yolov8s_fall.onnx", "bus.jpg")   # the files of tests/testdata.py the marked tests read

def load_tests_file(file: str, name: str):
  """tests/<file>.py loaded as module `name` (tests/ is not on this process's path), once."""
  if name in sys.modules: return sys.modules[name]
  spec = importlib.util.spec_from_file_location(name, ROOT / "tests" / f"{file}.py")
  m = sys.modules[name] = importlib.util.module_from_spec(spec)   # (before it runs: its dataclasses look their module up)
  spec.loader.exec_module(m)
  return m

def testdata_folder() -> str: return load_tests_file("testdata", "tests_testdata").folder()

def marked_tests() -> list[str]:
  """The node ids of the marked tests on BROWSER_DEVICES (pytest --collect-only -m browser, over the files that use the mark)."""
  files = sorted(str(f.relative_to(ROOT)) for f in (ROOT / "tests").glob("test_*.py") if "mark.browser" in f.read_text())
  with locked("browser-suite"):
    digest = sources_digest(["tests", "pyproject.toml"]) + BROWSER_DEVICES + ",".join(sorted(WASM_MODULES))
    cache = scratch_path("browser-suite.json")
    if cache.exists() and (cached := json.loads(cache.read_text()))["digest"] == digest: return cached["ids"]
    p = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "browser", "-p", "no:cacheprovider", *files],
                       cwd=ROOT, capture_output=True, text=True, env={**os.environ, "TEST_DEVICES": BROWSER_DEVICES}, timeout=300)
    if p.returncode not in (0, 5): raise RuntimeError(f"collecting the browser suite failed:\n{p.stdout}\n{p.stderr}")   # (5: none)
    ids = [line for line in p.stdout.splitlines() if line.startswith("tests/") and "::" in line and
           ("[WASM" not in line or line.partition("::")[0] in WASM_MODULES)]
    cache.write_text(json.dumps({"digest": digest, "ids": ids}))
    return ids

def suite_archive() -> bytes:
  """A zip of what the page needs besides tinyweb: pytest (from this Python), tests/, pyproject.toml, remote_modules.py."""
  out = io.BytesIO()
  with zipfile.ZipFile(out, "w") as z:
    for dist in map(importlib.metadata.distribution, PYTEST_DISTS):
      for f in dist.files:
        if f.suffix == ".py" and not f.parts[0].startswith(".."): z.write(f.locate(), str(f))   # (not its scripts in bin/)
    for f in [*(ROOT / "tests").glob("*.py"), ROOT / "pyproject.toml"]: z.write(f, str(f.relative_to(ROOT)))
    z.write(remote_modules.__file__, "remote_modules.py")
  return out.getvalue()

# in the page, once: the proxies of numpy, torch, ..., then `run_test(nodeid)` -> {"outcome", "text"} as JSON
# (TESTDATA: the test process's test-data folder, set before this runs)
SETUP_PY = f"""
import json, os, sys
import js
from pyodide.ffi import run_sync
sys.path.insert(0, {PAGE_DIR!r})
os.chdir({PAGE_DIR!r})
os.environ.update(TEST_DEVICES={BROWSER_DEVICES!r}, TINYWEB_CUDA_CHECK="0", TINYWEB_TESTDATA=TESTDATA)   # (no NVRTC in the page)
import remote_modules
remote_modules.install(lambda msg: run_sync(js.tinywebNative(msg)), {NATIVE_MODULES!r})
import pytest

class Reports:
  def __init__(self): self.reports = []
  def pytest_runtest_logreport(self, report): self.reports.append(report)
  def pytest_collectreport(self, report):
    if report.failed: self.reports.append(report)

def run_test(nodeid):
  r = Reports()
  pytest.main([nodeid, "-q", "-p", "no:cacheprovider", "--capture=sys"], plugins=[r])
  failed = [x for x in r.reports if x.failed]
  skipped = [x for x in r.reports if x.skipped]
  if failed: out = ("failed", "\\n".join(x.longreprtext for x in failed))
  elif skipped: out = ("skipped", skipped[0].longrepr[2].removeprefix("Skipped: "))   # ((path, line, reason))
  elif any(x.when == "call" and x.passed for x in r.reports): out = ("passed", "")
  else: out = ("failed", f"{{nodeid}} was not collected in the page")
  return json.dumps(dict(zip(["outcome", "text"], out)))
"""

SETUP_JS = """async ([url, dir, code, testdata, files]) => {
  const tw = window.tinyweb, get = async (url) => {
    const r = await fetch(url);
    if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
    return new Uint8Array(await r.arrayBuffer());
  };
  tw.pyodide.unpackArchive(await get(url), "zip", {extractDir: dir});
  for (const [name, fileUrl] of files) {
    const path = `${testdata}/${name}`;
    tw.pyodide.FS.mkdirTree(path.slice(0, path.lastIndexOf("/")));
    tw.pyodide.FS.writeFile(path, await get(fileUrl));
  }
  window.suite = await tw.newGlobals();
  await window.suite.set("TESTDATA", testdata);
  await tw.runPython(code, {globals: window.suite});
}"""

RUN_JS = """async (nodeid) => {
  await window.suite.set("nodeid", nodeid);
  return await window.tinyweb.runPython("run_test(nodeid)", {globals: window.suite});
}"""

@pytest.fixture(scope="module")
def suite(chromium, site):
  """run(nodeid) -> (outcome, text): the test run by pytest in a page of its own (its imports stay out of other tests)."""
  (site.data_dir / "browser-suite.zip").write_bytes(suite_archive())
  testdata, files = testdata_folder(), []
  for name in PAGE_TESTDATA:   # (served from the test-data folder through a link; a file not fetched stays missing in the page too)
    if os.path.exists(src := os.path.join(testdata, name)):
      link = site.data_dir / "testdata" / name
      link.parent.mkdir(parents=True, exist_ok=True)
      if not link.exists(): link.symlink_to(src)
      files.append([name, f"{site.url}e2e-data/testdata/{name}"])
  # (in the main-thread mode: the page's exposed function, which the numpy/torch proxies call, is on the window, and
  # the archive is unpacked with tw.pyodide)
  page, _ = open_playground(chromium, site, worker=False)
  load_tests_file("onnx_node_cases", "onnx_node_cases")   # (proxied: the server imports it by name)
  page.expose_function("tinywebNative", remote_modules.Server(NATIVE_MODULES))
  page.evaluate(SETUP_JS, [site.url + "e2e-data/browser-suite.zip", PAGE_DIR, SETUP_PY, testdata, files])
  def run(nodeid: str) -> tuple[str, str]:
    r = json.loads(page.evaluate(RUN_JS, nodeid))
    return r["outcome"], r["text"]
  run.page = page
  yield run
  page.context.close()

@pytest.mark.parametrize("nodeid", marked_tests())
def test_in_browser(suite, nodeid):
  outcome, text = suite(nodeid)
  if outcome == "skipped": pytest.skip(f"in the browser: {text}")
  if outcome != "passed": pytest.fail(f"{nodeid} failed in the browser (Pyodide):\n{text}", pytrace=False)

MECHANICS = '''
import numpy as np, pytest, torch
from tinyweb import Tensor

def test_fails(device): np.testing.assert_allclose(Tensor([1.0, 2.0], device=device).numpy(), np.array([1.0, 2.5]))

def test_skips(): pytest.skip("not in this test")

def test_proxies(device):
  a = np.arange(6, dtype=np.float32).reshape(2, 3)
  assert type(a).__module__ == "numpy" and type(a).__name__ == "ndarray" and isinstance(a, np.ndarray) and not isinstance(a, torch.Tensor)
  assert a.shape == (2, 3) and a.dtype == np.float32 and np.float32 is np.float32 and a.tolist() == [[0, 1, 2], [3, 4, 5]]
  t = Tensor(a, device=device)
  assert t.device == device and (t * 2).tolist() == (a * 2).tolist() == (2 * a).tolist()
  assert isinstance(a + t, Tensor) and (a + t).tolist() == [[0, 2, 4], [6, 8, 10]]   # (numpy defers to tinyweb's __radd__)
  assert [float(x) for x in a[1, ::-1]] == [5.0, 4.0, 3.0] and len(a) == 2 and 4.0 in a and f"{a[0, 1]:.2f}" == "1.00"
  with pytest.raises(IndexError): a[5]
  with torch.no_grad(): assert not (torch.ones(2, requires_grad=True) * 2).requires_grad
  with np.errstate(divide="ignore"): assert np.isinf(np.float32(1) / np.float32(0))
'''

def test_outcomes_and_proxies(suite):
  """The mechanism itself, on a test file written into the page: a failure comes back with the test's assertion, a skip
  with its reason, and proxies behave like the numpy/torch objects they stand for."""
  suite.page.evaluate("(code) => window.tinyweb.pyodide.FS.writeFile('/browser-suite/tests/test_suite_mechanics.py', code)", MECHANICS)
  outcome, text = suite("tests/test_suite_mechanics.py::test_fails[WEBGPU]")
  assert outcome == "failed" and "test_fails" in text and "Not equal to tolerance" in text and "2.5" in text, text
  assert suite("tests/test_suite_mechanics.py::test_skips") == ("skipped", "not in this test")
  assert suite("tests/test_suite_mechanics.py::test_proxies[WEBGPU]") == ("passed", "")
  outcome, text = suite("tests/test_suite_mechanics.py::test_missing")
  assert outcome == "failed" and "was not collected" in text, text
