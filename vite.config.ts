// The playground site (`npm run build` runs it after vite.lib.config.ts): dist/index.html and its script, which imports
// the package's module (web/tinyweb.ts) and loads the runtime files the package build wrote to dist/runtime/. So any
// static file server can host dist/ (no CDN, nothing fetched from elsewhere at run time).
import { defineConfig } from "vite";
import { resolve } from "node:path";

const root = import.meta.dirname;

export default defineConfig({
  root: resolve(root, "web"),
  base: "./",   // relative URLs: the site works from any folder of any static server
  publicDir: false,
  // (dist/lib and dist/runtime are the package build's; it empties dist/ first)
  build: { outDir: resolve(root, "dist"), emptyOutDir: false, target: "es2022" },
});
