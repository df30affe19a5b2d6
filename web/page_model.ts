// What a model page's Web Worker does before its own work (web/diffuse-worker.ts uses it): find the WebGPU adapter
// before any download (and say what to do when there is none), load the export with tinyweb/model's loadModel while
// posting its progress, and check the model's inputs and outputs. And the page's side: the adapter as a line of text.
//
// worker -> page   {kind: "adapter", adapter}     the adapter found (before the model loads)
//                  {kind: "progress", progress}   loadModel's progress
//                  {kind: "failed", message}      no WebGPU, or the model cannot be loaded or used here: nothing more follows
import { webgpuAdvice } from "./host.js";
import { loadModel, type Model, type ModelProgress, type TensorSpec } from "./model.js";

export interface AdapterSummary { vendor: string; architecture: string; description: string; fallback: boolean }
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

/** An input's or output's name, shape (-1: any size) and dtype, as a page expects them. */
export type Expected = Omit<TensorSpec, "buffer">;

/** The model at `url` (a folder or its manifest.json) once its inputs and outputs are the `expected` ones, else an Error
 * that says what the page needs (`what`: the kind of model); the adapter and the progress posted on the way. */
export async function loadPageModel(url: string, expected: { inputs: Expected[]; outputs: Expected[] }, what: string,
                                    post: (m: LoadMessage) => void): Promise<Model> {
  // (asked here before loadModel asks again: to show the adapter, and to stop before any download when there is none)
  const gpu = navigator.gpu, adapter = gpu ? await gpu.requestAdapter() : null;
  if (!adapter) throw new Error(`WebGPU is not available (${webgpuAdvice(!!gpu)}): this page needs it to run the model.`);
  const { vendor, architecture, description, isFallbackAdapter } = adapter.info;
  post({ kind: "adapter", adapter: { vendor, architecture, description, fallback: isFallbackAdapter } });
  const m = await loadModel(url, { onProgress: (progress) => post({ kind: "progress", progress }) })
    .catch((e) => { throw new Error(`The model cannot be loaded: ${errorText(e)}`); });
  const show = (specs: Expected[]) => specs.map((s) => `${s.name} [${s.shape}] ${s.dtype}`).join(", ");
  const fits = (got: Expected[], want: Expected[]) => got.length === want.length && got.every((g, i) =>
    g.name === want[i].name && g.dtype === want[i].dtype && g.shape.length === want[i].shape.length &&
    g.shape.every((n, j) => want[i].shape[j] === -1 || want[i].shape[j] === n));
  if (!fits(m.inputs, expected.inputs) || !fits(m.outputs, expected.outputs)) {
    m.destroy();
    throw new Error(`The model cannot be used: ${url} is not ${what}: it takes ${show(m.inputs)} and gives ${show(m.outputs)}; ` +
                    `this page needs ${show(expected.inputs)} -> ${show(expected.outputs)} (-1: any size)`);
  }
  return m;
}

/** The adapter as the pages' facts show it. */
export function adapterText(a: AdapterSummary): string {
  const name = [a.vendor, a.architecture].filter(Boolean).join(" ") || "an unnamed adapter";
  return `WebGPU: ${name}${a.description ? ` (${a.description})` : ""}` + (a.fallback ? " · a fallback adapter (emulated on the CPU: slow)" : "");
}
