"""What `npm run build` puts in dist/: the playground page; the package's module and types (dist/lib/); and the runtime
a site serves at loadTinyweb's baseURL (dist/runtime/): the manifest, Pyodide's own files and a pure-Python tinyweb wheel
with the browser runtime and no required dependency. (That the page fetches nothing from elsewhere is checked with the
cold start, in test_browser_runtime.py; that another project installs and uses the package, in test_package.py.)"""
import hashlib, json, zipfile
from browser_harness import DIST

def test_dist_holds_the_site_the_module_and_the_runtime(site):
  for f in ["index.html", *(f"lib/{m}.{ext}" for m in ["tinyweb", "worker", "host", "weights", "model"] for ext in ["js", "d.ts"]),
            "runtime/pyodide/pyodide.mjs",
            "runtime/pyodide/pyodide.asm.wasm", "runtime/pyodide/python_stdlib.zip", "runtime/pyodide/pyodide-lock.json"]:
    assert (DIST / f).is_file(), f
  assert "__TINYWEB_WHEEL__" not in (DIST / "lib" / "tinyweb.js").read_text()   # (nothing defined at build time)
  # the module starts its worker by a URL relative to itself, in the form a site's bundler recognizes (the library build
  # leaves it for that bundler: no worker of its own in dist/assets/ under a hashed name)
  assert 'new Worker(new URL("./worker.js", import.meta.url), { type: "module" })' in (DIST / "lib" / "tinyweb.js").read_text()
  assert "startHost" in (DIST / "lib" / "worker.js").read_text() and 'from "./host.js"' in (DIST / "lib" / "worker.js").read_text()
  wheels = list((DIST / "runtime" / "wheels").glob("tinyweb-*-py3-none-any.whl"))
  assert len(wheels) == 1, wheels
  manifest = json.loads((DIST / "runtime" / "tinyweb-manifest.json").read_text())
  assert manifest == {"format": 1, "tinyweb": wheels[0].name.split("-")[1],
                      "wheel": {"file": f"wheels/{wheels[0].name}", "sha256": hashlib.sha256(wheels[0].read_bytes()).hexdigest()},
                      "pyodide": {"dir": "pyodide/", "version": "314.0.7"}}
  with zipfile.ZipFile(wheels[0]) as z:
    names = set(z.namelist())
    meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
  for f in ["tinyweb/tensor.py", "tinyweb/codegen/wgsl.py", "tinyweb/backends/webgpu_browser.py", "tinyweb/backends/webgpu_shared.py",
            "tinyweb/serve.py"]:
    assert f in names, f
  required = [l for l in meta.splitlines() if l.startswith("Requires-Dist:") and "extra ==" not in l]
  assert required == [], required   # numpy & co. only in extras: the core must install in Pyodide alone
