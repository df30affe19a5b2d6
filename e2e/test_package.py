"""The npm package: `npm pack` gives a tarball that another project installs (offline, from the tarball alone: the
package has no dependency), type-checks against its .d.ts and bundles with Vite (`import { loadTinyweb } from
"tinyweb"`); the project copies the package's runtime folder into its public/ as the README says, and its built site,
served by `python -m tinyweb.serve --coop-coep`, runs tinyweb on WebGPU in Chromium. The tools are this checkout's
(node_modules/vite, node_modules/typescript), run on the other project's folder: nothing comes from the npm registry."""
import json, re, shutil, subprocess, sys
import numpy as np
import pytest
from browser_harness import LOAD_TIMEOUT_MS, ROOT, build_site, locked, missing_requirement

CONSUMER_TS = """import { loadTinyweb, TinywebLoadError, webgpuAdvice, type PyRef, type Tinyweb } from "tinyweb";
declare global { interface Window { tw?: Tinyweb; twError?: string; loadTinyweb: typeof loadTinyweb; compute: typeof compute;
                                    webgpuAdvice: typeof webgpuAdvice } }
Object.assign(window, { loadTinyweb, compute, webgpuAdvice });
try {
  window.tw = await loadTinyweb({ baseURL: new URL("tinyweb/", location.href) });   // (Python in a Web Worker)
  const device: string | null = window.tw.report.device;
  document.getElementById("status")!.textContent = `ready on ${device} (${window.tw.mode})`;
} catch (e) {
  window.twError = `${e instanceof TinywebLoadError ? "TinywebLoadError: " : ""}${(e as Error).stack ?? e}`;
}
// c = ((a @ b).relu() * 2 - a.sum()).sum(1), with the package's types: a Float32Array in, a Float32Array out
async function compute(tw: Tinyweb, a: number[], b: number[]) {
  const g = await tw.newGlobals();
  await g.set("a", await tw.tensor(new Float32Array(a), [3, 4]));
  await g.set("b", await tw.tensor(new Float32Array(b), [4, 5]));
  const out = await tw.runPython("import js\\nc = ((a @ b).relu() * 2 - a.sum()).sum(1)\\n[c.device, list(c.shape), js.globalThis.constructor.name]", {globals: g});
  const values: Float32Array = await tw.toTypedArray(await g.get("c") as PyRef, "float32");
  const t = await tw.tensor(new Int32Array([1, 2]));
  const ints: Int32Array = await tw.toTypedArray(t);   // (the dtype follows from the array's type)
  g.destroy();
  t.destroy();
  return [out, Array.from(values), Array.from(ints)];
}
export async function neverCalled(tw: Tinyweb) {
  // @ts-expect-error baseURL is a string or a URL (the package's types are in force, not `any`)
  loadTinyweb({ baseURL: 42 });
  // @ts-expect-error a float32 tensor's values are a Float32Array, not an Int32Array
  const wrong: Int32Array = await tw.toTypedArray(await tw.tensor(new Float32Array(2)));
  const repr: string | undefined = await tw.runPython("1", { result: "repr" });
  return [wrong, repr];
}
"""
CONSUMER_HTML = """<!doctype html>
<html><head><meta charset="utf-8"><title>a site that uses the tinyweb package</title></head>
<body><p id="status">loading</p><script type="module" src="./src/main.ts"></script></body></html>
"""
# (skipLibCheck, as Vite's templates: pyodide's own .d.ts, an optional peer dependency for its types, is not installed)
TSCONFIG = {"compilerOptions": {"target": "es2022", "module": "esnext", "moduleResolution": "bundler", "lib": ["es2023", "dom"],
                                "types": [], "strict": True, "noEmit": True, "skipLibCheck": True}, "include": ["src"]}

def run(cmd: list[str], cwd, timeout: int = 300) -> subprocess.CompletedProcess:
  p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
  if p.returncode != 0: raise AssertionError(f"{' '.join(map(str, cmd))} (in {cwd}) failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
  return p

@pytest.fixture(scope="module")
def packed(tmp_path_factory):
  """(the tarball, npm pack's own report of it)."""
  if (why := missing_requirement()): pytest.skip(f"e2e needs {why}")
  build_site()
  out = tmp_path_factory.mktemp("pack")
  with locked("build"):   # (dist/ is not rebuilt meanwhile; --ignore-scripts: no prepack build, dist/ is current)
    info = json.loads(run(["npm", "pack", "--ignore-scripts", "--json", "--pack-destination", str(out)], ROOT).stdout)[0]
  return out / info["filename"], info

@pytest.fixture(scope="module")
def consumer(packed, tmp_path_factory):
  """Another project, installed from the tarball and built with Vite: its folder."""
  tarball, _ = packed
  project = tmp_path_factory.mktemp("consumer")
  (project / "package.json").write_text(json.dumps({"name": "tinyweb-consumer", "private": True, "type": "module",
                                                    "dependencies": {"tinyweb": f"file:{tarball}"}}))
  (project / "src").mkdir()
  (project / "src" / "main.ts").write_text(CONSUMER_TS)
  (project / "index.html").write_text(CONSUMER_HTML)
  (project / "tsconfig.json").write_text(json.dumps(TSCONFIG))
  # an empty npm cache of its own and --offline: the tarball is all the install needs
  run(["npm", "install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", "--cache", str(project / ".npm-cache")], project)
  # the runtime folder, found through the package's exports (as a copy script would), into public/
  manifest = run(["node", "--input-type=module", "-e",
                  "console.log(new URL(import.meta.resolve('tinyweb/runtime/tinyweb-manifest.json')).pathname)"], project).stdout.strip()
  shutil.copytree(ROOT.joinpath(manifest).parent, project / "public" / "tinyweb")
  run(["node", str(ROOT / "node_modules" / "typescript" / "bin" / "tsc"), "-p", "."], project)
  run(["node", str(ROOT / "node_modules" / "vite" / "bin" / "vite.js"), "build", "--logLevel", "warn"], project)
  return project

def test_the_tarball_holds_the_module_its_types_and_the_runtime(packed, record_property):
  tarball, info = packed
  files = {f["path"] for f in info["files"]}
  wheel = next(f for f in files if f.startswith("dist/runtime/wheels/"))
  lib = {f"dist/lib/{m}.{ext}" for m in ["tinyweb", "worker", "host", "weights", "model"] for ext in ["js", "d.ts"]}
  lib |= {f"dist/lib/{m}.d.ts" for m in ["model_common", "model_wasm"]}   # (types model.d.ts refers to; their code is in model.js)
  assert files == {"package.json", "README.md", "LICENSE", *lib,
                   "dist/runtime/tinyweb-manifest.json", wheel, *(f"dist/runtime/pyodide/{f}" for f in
                   ["pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"])}
  assert re.fullmatch(r"dist/runtime/wheels/tinyweb-[\w.]+-py3-none-any\.whl", wheel), wheel
  assert info["name"] == "tinyweb" and tarball.stat().st_size == info["size"]
  record_property("measure:npm package tarball / unpacked (MB)", f"{info['size'] / 1e6:.1f} / {info['unpackedSize'] / 1e6:.1f}")

def test_a_vite_project_using_the_package_runs_tinyweb_on_webgpu(consumer, chromium):
  dist = consumer / "dist"
  bundle = "".join(f.read_text() for f in (dist / "assets").glob("*.js"))
  assert "tinyweb-manifest.json" in bundle and "__TINYWEB_WHEEL__" not in bundle   # (the module, needing no build-time define)
  # the project's bundler found the package's worker script (new Worker(new URL("./worker.js", import.meta.url))) and
  # bundled it as a file of its own, with the host in it
  workers = [f for f in (dist / "assets").glob("worker-*.js")]
  assert len(workers) == 1 and "tw_run" in workers[0].read_text(), sorted(f.name for f in (dist / "assets").iterdir())
  assert (dist / "tinyweb" / "tinyweb-manifest.json").is_file()
  server = subprocess.Popen([sys.executable, "-m", "tinyweb.serve", str(dist), "--port", "0", "--quiet", "--coop-coep"],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True)
  try:
    m = re.search(r"at (http://127\.0\.0\.1:\d+/)", server.stdout.readline())
    assert m, "tinyweb.serve did not say where it listens"
    url = m[1]
    page = chromium.new_context().new_page()
    requests: list[str] = []
    page.on("request", lambda r: requests.append(r.url))
    try:
      page.goto(url)
      page.wait_for_function("window.tw || window.twError", timeout=LOAD_TIMEOUT_MS)
      assert page.evaluate("window.twError") is None, page.evaluate("window.twError")
      # (the default device: WASM on a fallback adapter like this machine's SwiftShader, else WEBGPU; test_browser_ops
      # checks the choice)
      status = page.text_content("#status")
      assert status in ("ready on WEBGPU (worker)", "ready on WASM (worker)"), status
      device = status.split()[2]
      assert page.evaluate("window.crossOriginIsolated") is True   # (--coop-coep's headers)
      rng = np.random.default_rng(15)
      a, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
      got = page.evaluate("([a, b]) => window.compute(window.tw, a, b)", [a.ravel().tolist(), b.ravel().tolist()])
      want = (np.maximum(a.astype(np.float64) @ b, 0) * 2 - a.astype(np.float64).sum()).sum(1)
      assert got[0] == [device, [3], "DedicatedWorkerGlobalScope"]   # on the default device, in the worker
      np.testing.assert_allclose(got[1], want, rtol=1e-5, atol=1e-5)
      assert got[2] == [1, 2]
      # the advice for a browser without WebGPU, by user agent (this page's own is a secure context with WebGPU)
      advice = page.evaluate("""() => [
        window.webgpuAdvice(false, "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:140.0) Gecko/20100101 Firefox/140.0", true),
        window.webgpuAdvice(false, "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/139.0.0.0 Safari/537.36", true),
        window.webgpuAdvice(true, "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/139.0.0.0 Safari/537.36 Edg/139.0.0.0", true),
        window.webgpuAdvice(false, "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.5 Safari/605.1.15", true),
        window.webgpuAdvice(false, "anything", false)]""")
      assert "Firefox has WebGPU from version 141" in advice[0] and "about:config" in advice[0], advice[0]
      assert "chrome://flags/#enable-unsafe-webgpu" in advice[1], advice[1]
      assert "no adapter" in advice[2] and "edge://gpu" in advice[2], advice[2]
      assert "Safari 26" in advice[3] and "Feature Flags" in advice[3], advice[3]
      assert "secure context" in advice[4], advice[4]
      paths = {re.sub(r"\?.*", "", u[len(url):]) for u in requests}
      assert all(u.startswith(url) for u in requests), requests   # everything from the site itself
      assert {"tinyweb/tinyweb-manifest.json", "tinyweb/pyodide/pyodide.mjs", "tinyweb/pyodide/pyodide.asm.wasm",
              f"assets/{workers[0].name}"} <= paths, paths
      assert any(re.fullmatch(r"tinyweb/wheels/tinyweb-.+\.whl", p) for p in paths), paths
      # a wrong baseURL: the error names the manifest URL it looked for
      err = page.evaluate("window.loadTinyweb({baseURL: 'nowhere/'}).then(() => 'no error', (e) => `${e.name}: ${e.message}`)")
      assert err.startswith(f"TinywebLoadError: tinyweb: no runtime manifest at {url}nowhere/tinyweb-manifest.json (HTTP 404)"), err
    finally: page.context.close()
  finally:
    server.terminate()
    server.wait(timeout=30)

def test_a_runtime_folder_whose_wheel_does_not_match_its_manifest_is_refused(consumer, chromium, tmp_path):
  # the site's runtime folder copied with one wrong digest: the wheel is fetched, hashed and refused, naming both digests
  site = tmp_path / "site"
  shutil.copytree(consumer / "dist", site)
  manifest_path = site / "tinyweb" / "tinyweb-manifest.json"
  manifest = json.loads(manifest_path.read_text())
  right, manifest["wheel"]["sha256"] = manifest["wheel"]["sha256"], "ab" * 32
  manifest_path.write_text(json.dumps(manifest))
  server = subprocess.Popen([sys.executable, "-m", "tinyweb.serve", str(site), "--port", "0", "--quiet"], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
  try:
    url = re.search(r"at (http://127\.0\.0\.1:\d+/)", server.stdout.readline())[1]
    page = chromium.new_context().new_page()
    try:
      page.goto(url)
      page.wait_for_function("window.tw || window.twError", timeout=LOAD_TIMEOUT_MS)
      err = page.evaluate("window.twError")
    finally: page.context.close()
  finally:
    server.terminate()
    server.wait(timeout=30)
  assert err and err.startswith("TinywebLoadError: ") and f"has sha256 {right}" in err and f"says {'ab' * 32}" in err, err
