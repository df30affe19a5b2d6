// The npm package `tinyweb` (`npm run build`, first step; `npm pack` packs what it writes):
//   dist/lib/tinyweb.js          the ES module (web/tinyweb.ts), which imports host.js and weights.js next to it and
//                                starts worker.js (web/worker.ts) as `new Worker(new URL("./worker.js", import.meta.url))`,
//                                the form a site's bundler recognizes (tsc adds the .d.ts files next to them)
//   dist/lib/model.js            `tinyweb/model` (web/model.ts): runs a model exported by tinyweb.export, no Pyodide
//   dist/runtime/                what a site serves at loadTinyweb's baseURL:
//     tinyweb-manifest.json      {format, tinyweb, wheel: {file, sha256}, pyodide: {dir, version}}, paths relative to it
//     wheels/tinyweb-*.whl       the pure-Python wheel of this checkout, built by pip ($PYTHON, else python3)
//     pyodide/                   Pyodide's own files, from the pyodide npm package
// The module reads the manifest at run time: nothing about the wheel is compiled into it.
import { defineConfig, type Plugin } from "vite";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = import.meta.dirname;
const PYODIDE_FILES = ["pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"];
const LIB_MODULES = ["tinyweb", "worker", "host", "weights", "model"];
const WHEEL_SOURCES = ["pyproject.toml", "README.md", "LICENSE", "tinyweb", "backends"];

// the pure-Python wheel of this repository (tinyweb + tinyweb.backends, no dependencies), built from a clean copy of
// its sources (so nothing stale from an earlier build/ folder gets in, and nothing is written into the checkout).
// pip builds it with the Python's own setuptools where that meets pyproject.toml's build requirements (a development
// environment: tinyweb[web]; no network needed), else (a fresh virtualenv: setuptools missing or too old for
// `bdist_wheel` and the license expression) in an isolated environment with setuptools from the package index.
function buildWheel(): { file: string; bytes: Buffer } {
  const tmp = mkdtempSync(join(tmpdir(), "tinyweb-wheel-")), src = join(tmp, "src"), out = join(tmp, "out");
  const pipWheel = (options: string[], stderr: "pipe" | "inherit") =>
    execFileSync(process.env.PYTHON ?? "python3", ["-m", "pip", "wheel", "-q", "--no-deps", "--disable-pip-version-check",
      ...options, "-w", out, src], { stdio: ["ignore", "ignore", stderr] });
  try {
    // (not tinyweb/backends, a link; not tinyweb/viz_page, the VIZ page: the browser has no use for it)
    const wanted = (p: string) => !p.includes("__pycache__") && !p.includes("viz_page") && !lstatSync(p).isSymbolicLink();
    for (const f of WHEEL_SOURCES) cpSync(resolve(root, f), join(src, f), { recursive: true, filter: wanted });
    try { pipWheel(["--no-build-isolation", "--check-build-dependencies"], "pipe"); }
    catch (local) {
      try { pipWheel([], "inherit"); }
      catch (isolated) {
        throw new Error(`pip wheel failed, with this Python's own setuptools:\n${(local as { stderr?: Buffer }).stderr ?? local}\n` +
                        `and in an isolated build environment (above): ${isolated}`);
      }
    }
    const file = readdirSync(out).find((f) => f.endsWith(".whl"));
    if (!file) throw new Error(`pip wheel wrote no wheel into ${out}`);
    return { file, bytes: readFileSync(join(out, file)) };
  } finally { rmSync(tmp, { recursive: true, force: true }); }
}

function tinywebRuntime(): Plugin {
  let wheel: { file: string; bytes: Buffer };
  return {
    name: "tinyweb-runtime",
    config() { wheel = buildWheel(); },   // (pip takes seconds: here rather than in a timed bundle hook)
    generateBundle() {
      const version = wheel.file.split("-")[1];
      const pkg = JSON.parse(readFileSync(resolve(root, "package.json"), "utf8"));
      if (pkg.version !== version)
        throw new Error(`package.json has version ${pkg.version}, the wheel (pyproject.toml) ${version}: make them equal`);
      const pyodideVersion = JSON.parse(readFileSync(resolve(root, "node_modules/pyodide/package.json"), "utf8")).version;
      const manifest = { format: 1, tinyweb: version, wheel: { file: `wheels/${wheel.file}`, sha256: createHash("sha256").update(wheel.bytes).digest("hex") },
                         pyodide: { dir: "pyodide/", version: pyodideVersion } };
      this.emitFile({ type: "asset", fileName: "runtime/tinyweb-manifest.json", source: JSON.stringify(manifest, null, 2) + "\n" });
      this.emitFile({ type: "asset", fileName: `runtime/wheels/${wheel.file}`, source: wheel.bytes });
      for (const f of PYODIDE_FILES)
        this.emitFile({ type: "asset", fileName: `runtime/pyodide/${f}`, source: readFileSync(resolve(root, "node_modules/pyodide", f)) });
    },
  };
}

// The module must keep `new Worker(new URL("./worker.js", import.meta.url), ...)` as written: that form is how the
// site's bundler finds the worker script and bundles it with the site. (Vite would otherwise bundle the worker here
// already, into dist/assets/ under a hashed name and an absolute URL.) So the expression is hidden from Vite's worker
// transform while the library is built, and put back as it was in the output.
const WORKER_URL = 'new URL("./worker.js", import.meta.url)', HIDDEN_WORKER_URL = '"tinyweb:worker-url"';
function keepWorkerURL(): Plugin {
  return {
    name: "tinyweb-keep-worker-url", enforce: "pre",
    transform(code, id) {
      if (!id.endsWith("/web/tinyweb.ts")) return null;
      if (!code.includes(WORKER_URL)) throw new Error(`web/tinyweb.ts no longer says ${WORKER_URL}: update vite.lib.config.ts`);
      return code.replace(WORKER_URL, `(${HIDDEN_WORKER_URL} as unknown as URL)`);
    },
    renderChunk(code, chunk) {
      if (chunk.name !== "tinyweb") return null;
      if (!code.includes(HIDDEN_WORKER_URL)) throw new Error("the worker's URL did not reach dist/lib/tinyweb.js");
      return code.replace(HIDDEN_WORKER_URL, WORKER_URL);
    },
  };
}

export default defineConfig({
  publicDir: false,
  build: {
    outDir: resolve(root, "dist"), emptyOutDir: true, target: "es2022",
    minify: false,   // (a library: the site that bundles it minifies)
    // (every module an entry of its own, so each keeps its name and the worker's URL stays "./worker.js")
    lib: { entry: Object.fromEntries(LIB_MODULES.map((m) => [m, resolve(root, `web/${m}.ts`)])), formats: ["es"],
           fileName: (_format, name) => `lib/${name}.js` },
  },
  plugins: [keepWorkerURL(), tinywebRuntime()],
});
