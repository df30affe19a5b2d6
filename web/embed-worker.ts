// The embed page's Web Worker (web/embed.ts starts it): loads the exported sentence encoder with loadModel and runs it,
// so the page stays responsive while the GPU (or SwiftShader, on the CPU) works. Every message is plain data.
//   page -> worker   {kind: "load", url}                       once: the model's folder or manifest.json (absolute)
//                    {kind: "embed", id, ids, mask}             one sentence's input_ids and attention_mask (batch 1)
//   worker -> page   {kind: "progress", progress}               while loading
//                    {kind: "loaded", info} | {kind: "failed", error}
//                    {kind: "embedding", id, embedding, ms} | {kind: "error", id, error}
import { loadModel, type LoadTimings, type Model, type ModelProgress } from "./model.js";

export type ToEmbedWorker =
  | { kind: "load"; url: string }
  | { kind: "embed"; id: number; ids: Int32Array; mask: Int32Array };
/** What the page shows about the model and the device it runs on. */
export interface EmbedModelInfo {
  tokens: number;            // the token count the model takes (its input_ids' shape is [1, tokens])
  dims: number;              // the embedding's length
  adapter: { vendor: string; architecture: string; description: string; isFallbackAdapter: boolean };
  timings: LoadTimings;
}
export interface EmbedError { name: string; message: string }
export type FromEmbedWorker =
  | { kind: "progress"; progress: ModelProgress }
  | { kind: "loaded"; info: EmbedModelInfo }
  | { kind: "failed"; error: EmbedError }
  | { kind: "embedding"; id: number; embedding: Float32Array; ms: number }
  | { kind: "error"; id: number; error: EmbedError };

// (a dedicated worker's global scope: the page's "dom" lib types `self` as a Window)
interface WorkerScope {
  postMessage(message: FromEmbedWorker, transfer?: Transferable[]): void;
  onmessage: ((e: MessageEvent<ToEmbedWorker>) => void) | null;
}
const scope = globalThis as unknown as WorkerScope;
const asError = (e: unknown): EmbedError => e instanceof Error ? { name: e.name, message: e.message } : { name: "Error", message: String(e) };
const NAMES = ["input_ids", "attention_mask"];
let model: Model | null = null;

scope.onmessage = async ({ data: m }) => {
  if (m.kind === "load") {
    try {
      const loaded = await loadModel(m.url, { onProgress: (progress) => scope.postMessage({ kind: "progress", progress }) });
      let info: EmbedModelInfo;
      try { info = describe(m.url, loaded); } catch (e) { loaded.destroy(); throw e; }
      model = loaded;
      scope.postMessage({ kind: "loaded", info });
    } catch (e) { scope.postMessage({ kind: "failed", error: asError(e) }); }
  } else if (m.kind === "embed") {
    try {
      if (!model) throw new Error("embed called before the model loaded");
      const t = performance.now();
      const out = await model.run({ input_ids: m.ids, attention_mask: m.mask });
      const embedding = out[model.outputs[0].name] as Float32Array;
      scope.postMessage({ kind: "embedding", id: m.id, embedding, ms: performance.now() - t }, [embedding.buffer]);
    } catch (e) { scope.postMessage({ kind: "error", id: m.id, error: asError(e) }); }
  }
};

// the batch-1 variant's token count, checked to be a sentence encoder's inputs and output
function describe(url: string, m: Model): EmbedModelInfo {
  const v = m.variants.find((v) => v.inputs[0].shape[0] === 1);
  const inputs = v?.inputs.map((i) => `${i.name} [${i.shape}] ${i.dtype}`).join(", ");
  if (!v || v.inputs.map((i) => i.name).join() !== NAMES.join() || v.inputs.some((i) => i.dtype !== "int32" || i.shape.length !== 2) ||
      v.outputs[0].shape.length !== 2 || v.outputs[0].dtype !== "float32")
    throw new Error(`${url} is not an exported sentence encoder at batch size 1 (python -m tinyweb.export minilm): it takes ` +
                    `${inputs ?? m.variants.map((v) => `[${v.inputs[0].shape}]`).join(" or ")}; ` +
                    "expected input_ids [1, tokens] int32, attention_mask [1, tokens] int32");
  // (GPUDevice.adapterInfo: Chromium 131+; the TypeScript declarations may lack it)
  const a = (m.device as GPUDevice & { adapterInfo?: GPUAdapterInfo & { isFallbackAdapter?: boolean } }).adapterInfo;
  return { tokens: v.inputs[0].shape[1], dims: v.outputs[0].shape[1], timings: m.timings,
           adapter: { vendor: a?.vendor ?? "", architecture: a?.architecture ?? "", description: a?.description ?? "",
                      isFallbackAdapter: a?.isFallbackAdapter ?? false } };
}
