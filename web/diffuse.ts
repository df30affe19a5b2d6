// The diffuse page (diffuse.html) in one of its two modes: terrain heightmaps from adaptive-terrain-diffusion's UNet
// (web/diffuse_terrain.ts; ?model=URL names another export of it), or Stable Diffusion when ?sd=URL names a folder that
// `python -m tinyweb.export stable-diffusion` wrote (web/diffuse_sd.ts). The elements of class terrain-only or sd-only
// are one mode's; the other's are hidden. window.diffuseDemo is the mode's facts and results, for tests and scripts.
import type { TerrainDemo } from "./diffuse_terrain.js";
import type { SDDemo } from "./diffuse_sd.js";

declare global { interface Window { diffuseDemo: TerrainDemo | SDDemo } }
const mode = new URLSearchParams(location.search).has("sd") ? "sd" : "terrain";
for (const e of document.querySelectorAll<HTMLElement>(".terrain-only, .sd-only")) e.hidden = !e.classList.contains(`${mode}-only`);
// (the mode's module runs as it is imported; using its export keeps it whole in the bundle, whose modules are marked
// free of side effects: package.json's sideEffects)
window.diffuseDemo = (await (mode === "sd" ? import("./diffuse_sd.js") : import("./diffuse_terrain.js"))).demo;
