// `npm run build` -> dist/: the pages, the tinyweb wheel (built here from this repository by pip) and the Pyodide files
// from the pyodide npm package, so any static file server can host the site (no CDN, nothing fetched at run time).
import { defineConfig, type Plugin } from "vite";
import { execFileSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, lstatSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = import.meta.dirname;
const PYODIDE_FILES = ["pyodide.mjs", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip", "pyodide-lock.json"];

const WHEEL_SOURCES = ["pyproject.toml", "README.md", "tinyweb", "backends"];

// the pure-Python wheel of this repository (tinyweb + tinyweb.backends, no dependencies), built from a clean copy of
// its sources (so nothing stale from an earlier build/ folder gets in, and nothing is written into the checkout)
function buildWheel(): { file: string; bytes: Buffer } {
  const tmp = mkdtempSync(join(tmpdir(), "tinyweb-wheel-")), src = join(tmp, "src"), out = join(tmp, "out");
  try {
    const wanted = (p: string) => !p.includes("__pycache__") && !lstatSync(p).isSymbolicLink();   // (tinyweb/backends link)
    for (const f of WHEEL_SOURCES) cpSync(resolve(root, f), join(src, f), { recursive: true, filter: wanted });
    execFileSync(process.env.PYTHON ?? "python3", ["-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
      "--disable-pip-version-check", "-w", out, src], { stdio: ["ignore", "ignore", "inherit"] });
    const file = readdirSync(out).find((f) => f.endsWith(".whl"));
    if (!file) throw new Error(`pip wheel wrote no wheel into ${out}`);
    return { file, bytes: readFileSync(join(out, file)) };
  } finally { rmSync(tmp, { recursive: true, force: true }); }
}

function tinywebAssets(): Plugin {
  let wheel: { file: string; bytes: Buffer };
  return {
    name: "tinyweb-assets",
    apply: "build",
    config() {
      wheel = buildWheel();
      const sha256 = createHash("sha256").update(wheel.bytes).digest("hex");
      return { define: { __TINYWEB_WHEEL__: JSON.stringify({ file: wheel.file, sha256 }) } };
    },
    generateBundle() {
      this.emitFile({ type: "asset", fileName: `wheels/${wheel.file}`, source: wheel.bytes });
      for (const f of PYODIDE_FILES)
        this.emitFile({ type: "asset", fileName: `pyodide/${f}`, source: readFileSync(resolve(root, "node_modules/pyodide", f)) });
    },
  };
}

export default defineConfig({
  root: resolve(root, "web"),
  base: "./",   // relative URLs: the site works from any folder of any static server
  build: { outDir: resolve(root, "dist"), emptyOutDir: true, target: "es2022" },
  plugins: [tinywebAssets()],
});
