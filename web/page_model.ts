// What a model page's Web Worker does before its own work (web/classify-worker.ts, web/detect_worker.ts,
// web/embed-worker.ts, web/diffuse-worker.ts, web/sd-worker.ts and web/generate-worker.ts use it): choose the backend
// before any download, load the export with tinyweb/model's loadModel while posting its progress (a limit or feature the
// adapter lacks: loadModel names it), and check the model's inputs and outputs. And the page's side: the backend asked
// for in the page's URL, the adapter and the loading progress as lines of text.
//
// The backend: WebGPU when the browser gives an adapter; else WebAssembly on the CPU (slower, the same results) when the
// model's folder has a WASM export in its wasm/ subfolder (scripts/build_models.py writes one for each page's model;
// `python -m tinyweb.export MODEL DIR/wasm --target wasm`); else the page cannot run the model and says what to do. The
// page's `?backend=wasm` (or `webgpu`) asks for one, e.g. where the only adapter is a slow fallback one: the page passes
// it on in its load message (loadRequest()). `?backend=live` runs the model with tinyweb itself, live: its Python in
// Pyodide builds the model from the weights the export was made from and runs it on WebGPU (web/model_live.ts; the
// export must keep them: --with-source), instead of the exported kernels; slower to start, the same results.
//
// worker -> page   {kind: "adapter", adapter}     what runs the model: the WebGPU adapter or WASM (before the model loads)
//                  {kind: "progress", progress}   loadModel's progress
//                  {kind: "failed", message}      no backend, or the model cannot be loaded or used here: nothing more follows
import { webgpuAdvice } from "./host.js";
import { loadModel, type Model, type ModelProgress, type TensorSpec } from "./model.js";
import { loadLiveModel } from "./model_live.js";

/** What runs the model: a WebGPU adapter (`live`: tinyweb's Python drives it, ?backend=live), or WebAssembly on the CPU
 * (`requested`: by ?backend=wasm, else for want of WebGPU). */
export type AdapterSummary =
  | { backend: "webgpu"; vendor: string; architecture: string; description: string; fallback: boolean; live: boolean }
  | { backend: "wasm"; requested: boolean };
export type LoadMessage =
  | { kind: "adapter"; adapter: AdapterSummary }
  | { kind: "progress"; progress: ModelProgress }
  | { kind: "failed"; message: string };

/** A dedicated worker's global scope, typed by its messages (the page's "dom" lib types `self` as a Window). */
export interface WorkerScope<From, To> {
  postMessage(message: From, transfer?: Transferable[]): void;
  onmessage: ((e: MessageEvent<To>) => void) | null;
}
export const workerScope = <From, To>() => globalThis as unknown as WorkerScope<From, To>;

export const errorText = (e: unknown) => e instanceof Error ? e.message : String(e);

/** An input or output as a page expects it. In its shape a number is that size, a name any size: the same size wherever
 * the name recurs (so [1, 3, "size", "size"] is a square). */
export interface Expected { name: string; shape: (number | string)[]; dtype: string }
export interface ExpectedModel { inputs: Expected[]; outputs: Expected[] }
/** A loaded model, and the sizes the names in the expected shapes have in it. */
export interface PageModel { model: Model; sizes: Record<string, number> }

/** The model a page runs: the URL its `param` names (?model=URL), else `fallback` (relative to the page), as a folder
 * (a trailing / added) unless it names a manifest (.json). */
export function pageModelURL(fallback: string | null, param = "model"): URL {
  const url = new URL(new URLSearchParams(location.search).get(param) ?? fallback ?? "", location.href);
  return url.pathname.endsWith(".json") || url.pathname.endsWith("/") ? url : new URL(url.href + "/");
}

/** How a page's model runs: the backend the page's URL asks for (`?backend=webgpu|wasm|live`; null: the best there
 * is), and where tinyweb's runtime files are (dist/runtime/, beside the pages: for ?backend=live). */
export interface BackendChoice { backend: string | null; runtime: string }
/** The page's message that starts its worker's load: the model's folder (or manifest.json) as an absolute URL, and the
 * backend, for loadPageModel. */
export interface LoadRequest extends BackendChoice { kind: "load"; url: string }
export const loadRequest = (url: URL): LoadRequest =>
  ({ kind: "load", url: url.href, backend: new URLSearchParams(location.search).get("backend"), runtime: new URL("runtime/", location.href).href });
const BACKENDS = ["webgpu", "wasm", "live"];

// a model's WASM export: this subfolder of its folder (scripts/build_models.py's TARGETS)
const WASM_FOLDER = "wasm/";

/** The model at `url` (a folder or its manifest.json) on `choice.backend` (the page's loadRequest's; null: WebGPU when
 * there is an adapter, else the WASM export when the folder has one; "live": built by tinyweb in Pyodide) once one of
 * its variants (batch sizes) has the `expected` inputs and outputs, else an Error that says what the page needs
 * (`what`: the kind of model); what runs it (the adapter message) and the progress posted on the way. `wasmFolder`: where
 * its WASM export is, if not in the wasm/ subfolder of its folder (a part of a model: in the model's wasm/ folder). */
export async function loadPageModel(url: string, expected: ExpectedModel, what: string, post: (m: LoadMessage) => void,
                                    choice: BackendChoice | null = null, wasmFolder?: string): Promise<PageModel> {
  const backend = choice?.backend ?? null;
  if (backend !== null && !BACKENDS.includes(backend))
    throw new Error(`?backend=${backend} is not a backend this page has: webgpu, wasm or live (or leave it out: WebGPU when there is an adapter, else wasm).`);
  const folder = url.endsWith(".json") ? new URL(".", url).href : url.replace(/\/?$/, "/");
  const wasmURL = wasmFolder ?? new URL(WASM_FOLDER, folder).href;
  const hasWasm = () => fetch(new URL("manifest.json", wasmURL)).then((r) => r.ok, () => false);
  // (asked here before loadModel asks again: to show the adapter, and to stop before any download when there is none)
  const gpu = backend === "wasm" ? undefined : navigator.gpu, adapter = gpu ? await gpu.requestAdapter() : null;
  let source = url;
  if (adapter) {
    const { vendor, architecture, description, isFallbackAdapter } = adapter.info;
    post({ kind: "adapter", adapter: { backend: "webgpu", vendor, architecture, description, fallback: isFallbackAdapter, live: backend === "live" } });
  } else if (backend === "live") {
    throw new Error(`?backend=live runs tinyweb on WebGPU, which is not available (${webgpuAdvice(!!navigator.gpu)}).`);
  } else if (backend === "wasm") {
    if (!await hasWasm()) throw new Error(`?backend=wasm: ${url} has no WASM export (${wasmURL}manifest.json: export one with --target wasm).`);
    source = wasmURL;
    post({ kind: "adapter", adapter: { backend: "wasm", requested: true } });
  } else {
    if (backend === "webgpu" || !await hasWasm())
      throw new Error(`WebGPU is not available (${webgpuAdvice(!!navigator.gpu)}): this page needs it to run the model.`);
    source = wasmURL;
    post({ kind: "adapter", adapter: { backend: "wasm", requested: false } });
  }
  const onProgress = (progress: ModelProgress) => post({ kind: "progress", progress });
  const model = await (backend === "live" ? loadLiveModel(source, choice!.runtime, { onProgress }) : loadModel(source, { onProgress }))
    .catch((e) => { throw new Error(`The model cannot be loaded: ${errorText(e)}`); });
  for (const v of model.variants) {
    const sizes: Record<string, number> = {};
    const fits = (got: TensorSpec[], want: Expected[]) => got.length === want.length && got.every((g, i) =>
      g.name === want[i].name && g.dtype === want[i].dtype && g.shape.length === want[i].shape.length &&
      g.shape.every((n, j) => { const w = want[i].shape[j]; return n === (typeof w === "number" ? w : sizes[w] ??= n); }));
    if (fits(v.inputs, expected.inputs) && fits(v.outputs, expected.outputs)) return { model, sizes };
  }
  const show = (io: ExpectedModel) =>
    [io.inputs, io.outputs].map((specs) => specs.map((s) => `${s.name} [${s.shape.join(", ")}] ${s.dtype}`).join(", ")).join(" -> ");
  const takes = model.variants.map(show).join(" or ");
  model.destroy();
  throw new Error(`The model cannot be used: ${url} is not ${what}: it takes ${takes}; this page needs ${show(expected)}`);
}

/** A page's line for loadModel's progress `seconds` after the load began: the bar's fraction (of the weights' bytes)
 * and the text (MB so far; the time left at the rate so far, once there is enough of it to mean something; kernels
 * compiled). */
export function loadProgress(p: ModelProgress, seconds: number): { fraction: number; text: string } {
  const mb = (bytes: number) => (bytes / 1e6).toFixed(1), left = p.weightsTotal - p.weightsLoaded;
  const eta = left > 0 && p.weightsLoaded > 0 && seconds > 0.5 ? ` · about ${Math.ceil(left / (p.weightsLoaded / seconds))} s left` : "";
  return { fraction: p.weightsTotal ? p.weightsLoaded / p.weightsTotal : 1,
           text: `weights ${mb(p.weightsLoaded)} / ${mb(p.weightsTotal)} MB${eta}` +
                 (p.kernelsTotal ? ` · kernels compiled ${p.kernelsReady} / ${p.kernelsTotal}` : "") };
}

/** How a page says what runs the model: its exported kernels, or none (?backend=live: tinyweb compiles them as it runs). */
export const kernelsText = (kernels: number) => kernels ? `${kernels} kernels` : "built live by tinyweb (no exported kernels)";

/** A model page's side of its worker while the model loads, on the page's elements #adapter, #loading, #progress,
 * #progress-text and #notice: what runs the model, the load's progress, and what stops the page (the worker's "failed"
 * message, its script failing, or the page's own `fail(text)`): the notice shown, the worker terminated (which also
 * stops the downloads it still had going), `onFail` for the page's own controls. The page's other messages go to
 * `onMessage`, none after a failure. */
export function watchPageWorker<M extends { kind: string }>(worker: Worker, onMessage: (m: Exclude<M, LoadMessage>) => void,
                                                            onFail: () => void): { fail(text: string): void; readonly failed: boolean } {
  const $ = (id: string) => document.getElementById(id) as HTMLElement;
  const [adapter, loading, text, notice] = ["adapter", "loading", "progress-text", "notice"].map($);
  const bar = $("progress") as HTMLProgressElement, start = performance.now();
  let failed = false, adapterFound = false;
  const fail = (message: string) => {
    failed = true;
    worker.terminate();
    notice.textContent = message;
    notice.hidden = false;
    loading.hidden = true;
    if (!adapterFound) adapter.textContent = "no WebGPU adapter";
    onFail();
  };
  worker.onmessage = ({ data: m }: MessageEvent<M | LoadMessage>) => {
    if (failed) return;
    if (m.kind === "adapter") { adapterFound = true; adapter.textContent = adapterText((m as LoadMessage & { kind: "adapter" }).adapter); }
    else if (m.kind === "progress") {
      const p = loadProgress((m as LoadMessage & { kind: "progress" }).progress, (performance.now() - start) / 1000);
      bar.value = p.fraction;
      text.textContent = p.text;
    } else if (m.kind === "failed") fail((m as LoadMessage & { kind: "failed" }).message);
    else onMessage(m as Exclude<M, LoadMessage>);
  };
  worker.onerror = (e) => fail(`The page's worker failed: ${e.message || "its script did not load"}`);
  return { fail, get failed() { return failed; } };
}

/** What runs the model, as the pages show it. */
export function adapterText(a: AdapterSummary): string {
  if (a.backend === "wasm")
    return `WebAssembly on the CPU (${a.requested ? "?backend=wasm" : "no WebGPU in this browser"}: slower than WebGPU)`;
  const name = [a.vendor, a.architecture].filter(Boolean).join(" ") || "an unnamed adapter";
  return `WebGPU: ${name}${a.description ? ` (${a.description})` : ""}` + (a.fallback ? " · a fallback adapter (emulated on the CPU: slow)" : "") +
         (a.live ? " · live: tinyweb's Python in Pyodide runs the model (?backend=live)" : "");
}
