// The generate page's Web Worker (web/generate.ts starts it): loads the exported Gemma step (web/page_model.ts) and its
// tokenizer (tokenizer.json beside it), then generates as tinyweb.models.gemma.Gemma.generate_ids does: the prompt in
// chunks of the chunk variant's size (padded; the logits of its last real token come out), then one run per new token at
// the next position, each writing its keys and values into the KV cache that the model keeps as state between runs.
//
// (generation.json, also beside it: {name, context}: the KV cache's positions, which prompt and reply share)
//
// page -> worker   page_model.ts's LoadRequest {kind: "load", url, backend, runtime}   once, first: the model's folder
//                  {kind: "generate", id, prompt, maxTokens, temperature, topK, seed}
//                                                              a reply (a later generate stops an earlier one before its
//                                                              next token); temperature 0: greedy
//                  {kind: "stop", id}                          stop that generate before its next token
// worker -> page   page_model.ts's adapter, progress and failed messages, then
//                  {kind: "loaded", model}                     the model and tokenizer are ready
//                  {kind: "prompt", id, ids, ms}               the prompt's token ids, and the time it took to read it
//                  {kind: "token", id, token, ms}              each new token, as it comes (ms: since the one before, or
//                                                              the prompt's end: the first comes with the prompt's logits)
//                  {kind: "done", id, reason}                  "eos", "length" (maxTokens) or "stopped"
//                  {kind: "error", id, message}                that generate failed (e.g. a prompt too long)
import { GemmaTokenizer, type GemmaTokenizerJSON } from "./gemma_tokenizer.js";
import type { LoadTimings, Model } from "./model.js";
import { errorText, loadPageModel, workerScope, type LoadMessage, type LoadRequest } from "./page_model.js";
import { pickToken } from "./token_sampler.js";

export interface GenerateRequest { id: number; prompt: string; maxTokens: number; temperature: number; topK: number; seed: number }
export type ToWorker = LoadRequest | ({ kind: "generate" } & GenerateRequest) | { kind: "stop"; id: number };
export interface LoadedModel { name: string; timings: LoadTimings; kernels: number; weightsBytes: number; context: number; chunk: number; vocabulary: number;
                               tokenizerJSON: GemmaTokenizerJSON }
export type FromWorker = LoadMessage | { kind: "loaded"; model: LoadedModel } | { kind: "prompt"; id: number; ids: number[]; ms: number } |
  { kind: "token"; id: number; token: number; ms: number } | { kind: "done"; id: number; reason: "eos" | "length" | "stopped" } |
  { kind: "error"; id: number; message: string };

const scope = workerScope<FromWorker, ToWorker>();
const post = (m: FromWorker) => scope.postMessage(m);
const SPEC = {
  inputs: [{ name: "tokens", shape: [1, "tokens"], dtype: "int32" }, { name: "start", shape: [1], dtype: "int32" },
           { name: "last", shape: [1], dtype: "int32" }],
  outputs: [{ name: "output", shape: [1, "vocabulary"], dtype: "float32" }],
};

interface Loaded { model: Model; tokenizer: GemmaTokenizer; context: number; chunk: number }
let loaded: Promise<Loaded> | null = null, latest = 0;
let queue: Promise<void> = Promise.resolve();   // (one generate at a time: the model's buffers and cache are shared)

scope.onmessage = ({ data: m }) => {
  if (m.kind === "load") {
    loaded = load(m);
    loaded.catch((e) => post({ kind: "failed", message: errorText(e) }));
  } else if (m.kind === "stop") { if (m.id === latest) latest = 0; }
  else {
    latest = m.id;
    queue = queue.then(() => generate(m)).catch((e) => post({ kind: "error", id: m.id, message: errorText(e) }));
  }
};

async function load(request: LoadRequest): Promise<Loaded> {
  const url = request.url, folder = url.endsWith(".json") ? url : url.replace(/\/?$/, "/");
  const beside = async <T>(name: string): Promise<T> => {   // (a file the export writes beside the manifest)
    const r = await fetch(new URL(name, folder));
    if (!r.ok) throw new Error(`${new URL(name, folder)}: HTTP ${r.status} (python -m tinyweb.export gemma writes it beside the model)`);
    return await r.json() as T;
  };
  const [{ model, sizes: { vocabulary } }, tokenizerJSON, generation] = await Promise.all([
    loadPageModel(request.url, SPEC, "a language model's generation step (python -m tinyweb.export gemma)", post, request),
    beside<GemmaTokenizerJSON>("tokenizer.json"), beside<{ name: string; context: number }>("generation.json")]);
  const tokenizer = new GemmaTokenizer(tokenizerJSON);
  // the variants: one token, and a chunk of the prompt
  const sizes = model.variants.map((v) => v.inputs[0].shape[1]).sort((a, b) => a - b);
  const chunk = sizes[sizes.length - 1];
  if (sizes[0] !== 1 || vocabulary !== tokenizer.size) {
    model.destroy();
    throw new Error(`The model cannot be used: it runs ${sizes.join(" or ")} tokens at a time (1 is needed) and gives ${vocabulary} ` +
                    `logits, for a tokenizer of ${tokenizer.size} tokens`);
  }
  const weightsBytes = model.manifest.weights.shards.reduce((sum, s) => sum + s.bytes, 0);
  post({ kind: "loaded", model: { name: generation.name, timings: model.timings, kernels: model.manifest.kernels.length, weightsBytes,
                                  context: generation.context, chunk, vocabulary, tokenizerJSON } });
  return { model, tokenizer, context: generation.context, chunk };
}

async function generate(r: Extract<ToWorker, { kind: "generate" }>) {
  if (!loaded) throw new Error("generate before load");
  const { model, tokenizer, context, chunk } = await loaded;
  const ids = tokenizer.encode(r.prompt);
  if (ids.length + r.maxTokens > context)
    throw new Error(`the prompt's ${ids.length} tokens and ${r.maxTokens} new ones do not fit the model's context of ${context} tokens`);
  const pick = pickToken(r.temperature, r.topK, r.seed);
  const step = async (tokens: number[], start: number, last: number) =>
    (await model.run({ tokens: Int32Array.from(tokens), start: Int32Array.of(start), last: Int32Array.of(last) })).output as Float32Array;
  let t = performance.now(), logits: Float32Array | null = null;
  for (let s = 0; s < ids.length; s += chunk) {
    const part = ids.slice(s, s + chunk);
    logits = await step([...part, ...new Array(chunk - part.length).fill(0)], s, part.length - 1);   // (padding: computed, not used)
  }
  post({ kind: "prompt", id: r.id, ids, ms: performance.now() - t });
  t = performance.now();
  for (let n = 0; n < r.maxTokens; n++) {
    if (r.id !== latest) return post({ kind: "done", id: r.id, reason: "stopped" });
    const token = pick(logits!);
    if (token === tokenizer.eos) return post({ kind: "done", id: r.id, reason: "eos" });
    post({ kind: "token", id: r.id, token, ms: performance.now() - t });
    t = performance.now();
    if (n + 1 < r.maxTokens) logits = await step([token], ids.length + n, 0);
  }
  post({ kind: "done", id: r.id, reason: "length" });
}
