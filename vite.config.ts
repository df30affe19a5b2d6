// The site (`npm run build` runs it after vite.lib.config.ts), its pages:
// - dist/index.html, the playground, and its script, which imports the package's module (web/tinyweb.ts) and loads the
//   runtime files the package build wrote to dist/runtime/. So any static file server can host dist/ (no CDN, nothing
//   fetched from elsewhere at run time);
// - dist/viz.html, the VIZ page (web/viz.ts), which reads the data tinyweb.viz writes next to it. The page and its
//   assets are also copied into tinyweb/viz_page/, the Python package's data: `python -m tinyweb.viz` and VIZ=1 find
//   it there, in a checkout and in a wheel built after this;
// - the model demos, dist/classify.html (web/classify.ts, its worker web/classify-worker.ts), dist/detect.html
//   (web/detect.ts, web/detect_worker.ts), dist/embed.html (web/embed.ts, web/embed-worker.ts), dist/diffuse.html
//   (web/diffuse.ts; terrain: web/diffuse_terrain.ts, web/diffuse-worker.ts, web/diffuse_sampler.ts; Stable Diffusion:
//   web/diffuse_sd.ts, web/sd-worker.ts, web/sd_sampler.ts, web/clip_tokenizer.ts) and dist/generate.html
//   (web/generate.ts, web/generate-worker.ts, web/gemma_tokenizer.ts, web/token_sampler.ts): each runs a model (or
//   three) exported into dist/models/<name>/ (`npm run build:models` after this build: scripts/build_models.py) with the
//   package's tinyweb/model runtime, in a Web Worker.
import { defineConfig, type Plugin } from "vite";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, resolve } from "node:path";

const root = import.meta.dirname;
const PAGES = ["index", "viz", "classify", "detect", "embed", "diffuse", "generate"];   // web/<page>.html -> dist/<page>.html
const outDir = resolve(root, "dist"), vizPackageDir = resolve(root, "tinyweb/viz_page");

// viz.html and the chunks and styles it loads, copied into the Python package (replacing an earlier build's)
function vizPackageData(): Plugin {
  return {
    name: "tinyweb-viz-package-data",
    writeBundle(_options, bundle) {
      const entry = Object.values(bundle).find((c) => c.type === "chunk" && c.isEntry && c.name === "viz");
      if (!entry || entry.type !== "chunk") throw new Error("the VIZ page's script (web/viz.ts) is not in the bundle");
      const files = new Set(["viz.html"]);
      const add = (name: string) => {
        if (files.has(name)) return;
        files.add(name);
        const c = bundle[name];
        if (c?.type === "chunk") [...c.imports, ...(c.viteMetadata?.importedCss ?? [])].forEach(add);
      };
      add(entry.fileName);
      rmSync(vizPackageDir, { recursive: true, force: true });
      for (const f of files) {
        mkdirSync(dirname(resolve(vizPackageDir, f)), { recursive: true });
        copyFileSync(resolve(outDir, f), resolve(vizPackageDir, f));
      }
    },
  };
}

export default defineConfig({
  root: resolve(root, "web"),
  base: "./",   // relative URLs: the site works from any folder of any static server
  publicDir: false,
  // (dist/lib and dist/runtime are the package build's; it empties dist/ first)
  build: {
    outDir, emptyOutDir: false, target: "es2022",
    rolldownOptions: { input: Object.fromEntries(PAGES.map((page) => [page, resolve(root, `web/${page}.html`)])) },
  },
  plugins: [vizPackageData()],
});
