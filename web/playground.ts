// The playground page: a text area with Python, a Run button, the output, and which device runs it.
// The loaded API is also left at `window.tinyweb` (the e2e tests drive it from there). It uses the package's own module
// (web/tinyweb.ts, built to dist/lib/tinyweb.js for other sites) with the runtime files the build puts in runtime/.
// Python runs in a Web Worker; `?worker=0` in the page's URL runs it in the page instead (loadTinyweb's {worker: false}).
// The result of the code's last expression is shown as Python's repr() (10.0, True, None); a trailing ';' hides it.
// The code can call show(x) (tinyweb/playground.py): after the run, each image it showed is drawn on a canvas and each
// list of numbers as an SVG line plot, under the output, in the order shown (also when the code then failed).
import { loadTinyweb, type Tinyweb } from "./tinyweb.js";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const status = $("status"), output = $("output"), figures = $("figures"), runButton = $<HTMLButtonElement>("run");
let sink: string[] | null = null;   // print() output of the run in progress
const write = (s: string) => (sink ? sink.push(s) : console.log(s));

declare global { interface Window { tinyweb?: Tinyweb; tinywebError?: string } }

try {
  const started = performance.now();
  const worker = new URLSearchParams(location.search).get("worker") !== "0";
  const tw = await loadTinyweb({ baseURL: "./runtime/", worker, onProgress: (p) => (status.textContent = p.message), onStdout: write, onStderr: write });
  const r = tw.report;
  status.textContent = `ready in ${((performance.now() - started) / 1000).toFixed(1)} s (Python in ${worker ? "a Web Worker" : "the page"})`;
  $("device").textContent = r.device ?? `none (${r.error})`;
  $("device-reason").textContent = r.reason ?? "";
  const a = r.webgpu;
  $("adapter").textContent = a ? [a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(" ") +
    (a.isFallbackAdapter ? " (fallback adapter, on the CPU)" : "") : "no WebGPU adapter";
  if (r.notice) {   // (WebGPU is missing: why, and what to do about it in this browser)
    const notice = $("notice");
    notice.hidden = false;
    notice.textContent = r.notice;
  }
  const globals = await tw.newGlobals(), own = await tw.newGlobals();   // the user's namespace; the page's own
  await tw.runPython("from tinyweb.playground import show", { globals });
  await tw.runPython("from tinyweb.playground import take_shown", { globals: own });
  runButton.disabled = false;
  runButton.addEventListener("click", async () => {
    runButton.disabled = true;
    output.textContent = "running…";
    figures.replaceChildren();
    sink = [];
    try {
      const result = await tw.runPython(($("code") as HTMLTextAreaElement).value, { globals, result: "repr" });
      if (result !== undefined) sink.push(result);
      output.textContent = sink.join("\n");
    } catch (e) {
      output.textContent = sink.join("\n") + (sink.length ? "\n" : "") + String((e as Error).message ?? e);
    } finally {
      sink = null;
      try {
        for (const s of await tw.runPython("take_shown()", { globals: own }) as Shown[])
          figures.append(s.kind === "image" ? imageCanvas(s) : linePlot(s.values));
      } finally { runButton.disabled = false; }
    }
  });
  window.tinyweb = tw;
} catch (e) {
  window.tinywebError = String((e as Error).stack ?? e);
  status.textContent = `failed: ${(e as Error).message ?? e}`;
}

// ---------------------------------------------------------------------------------------------------------------
// drawing what show() recorded (take_shown() in tinyweb/playground.py says what each record holds)

type Shown = { kind: "image"; width: number; height: number; rgba: Uint8Array } | { kind: "plot"; values: number[] };
const IMAGE_SIDE = 256;   // small images (28x28) are drawn scaled up by a whole factor to about this size, pixels kept sharp

function imageCanvas({ width, height, rgba }: Extract<Shown, { kind: "image" }>): HTMLCanvasElement {
  const canvas = document.createElement("canvas");
  canvas.width = width;
  canvas.height = height;
  canvas.getContext("2d")!.putImageData(new ImageData(new Uint8ClampedArray(rgba), width, height), 0, 0);
  canvas.style.width = `${width * Math.max(1, Math.floor(IMAGE_SIDE / Math.max(width, height)))}px`;
  return canvas;
}

const SVG = "http://www.w3.org/2000/svg";
function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>, text?: string): SVGElementTagNameMap[K] {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = text;
  return e;
}

/** values against their index: a polyline of the finite values in a frame labelled with the range of each axis. */
function linePlot(values: number[]): SVGSVGElement {
  const W = 480, H = 240, left = 64, right = 12, top = 12, bottom = 28;
  const finite = values.filter(Number.isFinite);
  let lo = finite.length ? finite.reduce((a, b) => Math.min(a, b)) : 0, hi = finite.length ? finite.reduce((a, b) => Math.max(a, b)) : 1;
  if (hi === lo) { lo -= 1; hi += 1; }   // (a flat line: in the middle)
  const x = (i: number) => left + (values.length > 1 ? i / (values.length - 1) : 0.5) * (W - left - right);
  const y = (v: number) => top + (hi - v) / (hi - lo) * (H - top - bottom);
  const points = values.flatMap((v, i) => (Number.isFinite(v) ? [`${x(i).toFixed(2)},${y(v).toFixed(2)}`] : []));
  const plot = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}` });
  const label = (px: number, py: number, anchor: string, s: string) =>
    svg("text", { x: px, y: py, "text-anchor": anchor, "font-size": 11, fill: "#444" }, s);
  plot.append(svg("rect", { x: left, y: top, width: W - left - right, height: H - top - bottom, fill: "none", stroke: "#bbb" }),
              svg("polyline", { points: points.join(" "), fill: "none", stroke: "#1f77b4", "stroke-width": 1.5 }),
              label(left - 6, top + 10, "end", hi.toPrecision(4)), label(left - 6, H - bottom, "end", lo.toPrecision(4)),
              label(left, H - bottom + 16, "start", "0"), label(W - right, H - bottom + 16, "end", String(values.length - 1)));
  return plot;
}
