"""What `npm run build` puts in dist/: the pages, Pyodide's own files, and a pure-Python tinyweb wheel with the browser
runtime and no required dependency. (That the page fetches nothing from elsewhere is checked with the cold start, in
test_browser_runtime.py.)"""
import zipfile
from browser_harness import DIST

def test_dist_holds_the_site_pyodide_and_the_wheel(site):
  for f in ["index.html", "pyodide/pyodide.mjs", "pyodide/pyodide.asm.wasm", "pyodide/python_stdlib.zip", "pyodide/pyodide-lock.json"]:
    assert (DIST / f).is_file(), f
  wheels = list((DIST / "wheels").glob("tinyweb-*-py3-none-any.whl"))
  assert len(wheels) == 1, wheels
  with zipfile.ZipFile(wheels[0]) as z:
    names = set(z.namelist())
    meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
  for f in ["tinyweb/tensor.py", "tinyweb/codegen/wgsl.py", "tinyweb/backends/webgpu_browser.py", "tinyweb/backends/webgpu_shared.py"]:
    assert f in names, f
  required = [l for l in meta.splitlines() if l.startswith("Requires-Dist:") and "extra ==" not in l]
  assert required == [], required   # numpy & co. only in extras: the core must install in Pyodide alone
