// The embed page's Web Worker (web/embed.ts starts it): loads the exported sentence encoder (web/page_model.ts) and runs
// it, so the page stays responsive while the GPU (or SwiftShader, on the CPU) works. Every message is plain data.
//   page -> worker   page_model.ts's LoadRequest {kind: "load", url, backend, runtime}   once, first: the model's folder or manifest.json
//                    {kind: "embed", id, ids, mask}             one sentence's input_ids and attention_mask (batch 1)
//   worker -> page   page_model.ts's adapter, progress and failed messages, then
//                    {kind: "loaded", info}                     the model is ready
//                    {kind: "embedding", id, embedding, ms} | {kind: "error", id, message}
import type { LoadTimings } from "./model.js";
import { errorText, loadPageModel, workerScope, type LoadMessage, type LoadRequest, type PageModel } from "./page_model.js";

export type ToEmbedWorker =
  | LoadRequest
  | { kind: "embed"; id: number; ids: Int32Array; mask: Int32Array };
/** What the page shows about the model. */
export interface EmbedModelInfo {
  tokens: number;            // the token count the model takes (its input_ids' shape is [1, tokens])
  dims: number;              // the embedding's length
  timings: LoadTimings;
}
export type FromEmbedWorker = LoadMessage | { kind: "loaded"; info: EmbedModelInfo } |
  { kind: "embedding"; id: number; embedding: Float32Array; ms: number } | { kind: "error"; id: number; message: string };

const scope = workerScope<FromEmbedWorker, ToEmbedWorker>();
const post = (m: FromEmbedWorker, transfer: Transferable[] = []) => scope.postMessage(m, transfer);
const SPEC = {
  inputs: [{ name: "input_ids", shape: [1, "tokens"], dtype: "int32" }, { name: "attention_mask", shape: [1, "tokens"], dtype: "int32" }],
  outputs: [{ name: "output", shape: [1, "dims"], dtype: "float32" }],
};

let model: Promise<PageModel> | null = null;

scope.onmessage = ({ data: m }) => {
  if (m.kind === "load") {
    model = load(m);
    model.catch((e) => post({ kind: "failed", message: errorText(e) }));
  } else embed(m).catch((e) => post({ kind: "error", id: m.id, message: errorText(e) }));
};

async function load(request: LoadRequest): Promise<PageModel> {
  const loaded = await loadPageModel(request.url, SPEC, "a sentence encoder at batch size 1 (python -m tinyweb.export minilm)", post, request);
  post({ kind: "loaded", info: { tokens: loaded.sizes.tokens, dims: loaded.sizes.dims, timings: loaded.model.timings } });
  return loaded;
}

async function embed({ id, ids, mask }: Extract<ToEmbedWorker, { kind: "embed" }>) {
  if (!model) throw new Error("embed before load");
  const { model: m } = await model, t = performance.now();
  const embedding = (await m.run({ input_ids: ids, attention_mask: mask })).output as Float32Array;
  post({ kind: "embedding", id, embedding, ms: performance.now() - t }, [embedding.buffer]);
}
