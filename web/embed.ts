// The embed page (web/embed.html): sentence embeddings in the browser. The sentences (one per line) are tokenized here
// (web/wordpiece.ts, the model's own vocabulary) and embedded one at a time (batch 1) by MiniLM as exported by
// `python -m tinyweb.export minilm` (scripts/build_models.py writes it to models/minilm/ next to the page; `?model=URL`
// names another folder or manifest.json), which runs in a Web Worker (web/embed-worker.ts) with the package's model
// runtime (web/model.ts): no Pyodide, no server beyond static files. Shown: the cosine similarity of every pair as a
// heat map, the time per sentence, the download's progress, the device, and why the model cannot run where WebGPU (and
// a WASM export: web/page_model.ts) or a limit it needs is lacking.
//
// For tests and scripts, `window.embedDemo` holds the tokenizer, the model's facts and the last result (the
// embeddings too); <body data-state> is loading, ready, running, done or error.
import type { EmbedModelInfo, FromEmbedWorker, ToEmbedWorker } from "./embed-worker.js";
import type { ModelProgress } from "./model.js";
import { adapterText, errorText, loadProgress, loadRequest, pageModelURL } from "./page_model.js";
import { loadWordPiece, type Encoding, type WordPiece } from "./wordpiece.js";

interface Result {
  sentences: string[]; embeddings: number[][]; similarity: number[][];
  ms: number[]; tokens: number[]; truncated: boolean[];   // per sentence: its run's time, its tokens, whether it was cut
}
interface EmbedDemo { tokenizer: WordPiece | null; info: EmbedModelInfo | null; result: Result | null; firstResultAt: number | null }
declare global { interface Window { embedDemo: EmbedDemo } }
const demo: EmbedDemo = window.embedDemo = { tokenizer: null, info: null, result: null, firstResultAt: null };

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const setState = (s: "loading" | "ready" | "running" | "done" | "error") => { document.body.dataset.state = s; };
const modelURL = pageModelURL("models/minilm/");
const folder = new URL(".", modelURL);   // (the tokenizer's files lie next to the manifest)

// ---------------------------------------------------------------------------------------------------------------
// the worker: one load, then one call per sentence

const worker = new Worker(new URL("./embed-worker.ts", import.meta.url), { type: "module" });
const post = (m: ToEmbedWorker, transfer: Transferable[] = []) => worker.postMessage(m, transfer);
let loading: { resolve(info: EmbedModelInfo): void; reject(e: Error): void };
const calls = new Map<number, { resolve(r: { embedding: Float32Array; ms: number }): void; reject(e: Error): void }>();
let nextCall = 0;

worker.onmessage = ({ data: m }: MessageEvent<FromEmbedWorker>) => {
  if (m.kind === "adapter") $("device").textContent = adapterText(m.adapter);
  else if (m.kind === "progress") showProgress(m.progress);
  else if (m.kind === "loaded") loading.resolve(m.info);
  else if (m.kind === "failed") loading.reject(new Error(m.message));
  else {
    const call = calls.get(m.id)!;
    calls.delete(m.id);
    if (m.kind === "embedding") call.resolve(m);
    else call.reject(new Error(m.message));
  }
};
// (the worker's script failed to load or threw outside a message: nothing more will come)
worker.onerror = (e) => fail(`The page's worker failed: ${e.message || "its script did not load"}`);

function loadModel(): Promise<EmbedModelInfo> {
  return new Promise((resolve, reject) => {
    loading = { resolve, reject };
    post(loadRequest(modelURL));
  });
}

function embedOne(e: Encoding): Promise<{ embedding: Float32Array; ms: number }> {
  return new Promise((resolve, reject) => {
    const id = nextCall++;
    calls.set(id, { resolve, reject });
    post({ kind: "embed", id, ids: e.ids, mask: e.mask }, [e.ids.buffer, e.mask.buffer]);
  });
}

// ---------------------------------------------------------------------------------------------------------------
// loading

const loadStart = performance.now();

function showProgress(p: ModelProgress) {
  const { fraction, text } = loadProgress(p, (performance.now() - loadStart) / 1000);
  $<HTMLProgressElement>("progress").value = fraction;
  $("status").textContent = text;
}

function fail(text: string) {
  setState("error");
  $("load").hidden = true;
  $<HTMLButtonElement>("embed").disabled = true;
  const box = document.createElement("div");
  box.className = "error";
  box.textContent = text;
  $("status").replaceChildren(box);
}

async function start() {
  setState("loading");
  try {
    const [tokenizer, info] = await Promise.all([
      loadWordPiece(folder).catch((e) => { throw new Error(`The tokenizer cannot be loaded: ${errorText(e)}`); }), loadModel()]);
    demo.tokenizer = tokenizer;
    demo.info = info;
    $("model").textContent = `${decodeURI(folder.pathname).split("/").at(-2)} · ${info.tokens} tokens · ${info.dims} dimensions · ` +
                             `loaded in ${info.timings.total.toFixed(1)} s`;
    $("model").title = modelURL.href;
    $("about").textContent = `Near 1: the same meaning; near 0: unrelated. A line is cut to its first ${info.tokens - 2} word pieces.`;
    $("load").hidden = true;
    $("status").textContent = "ready";
    $<HTMLButtonElement>("embed").disabled = false;
    setState("ready");
  } catch (e) {
    fail(errorText(e));
  }
}

// ---------------------------------------------------------------------------------------------------------------
// embedding and the heat map

async function embedAll() {
  const sentences = $<HTMLTextAreaElement>("sentences").value.split("\n").map((s) => s.trim()).filter(Boolean);
  if (!sentences.length) { $("status").textContent = "type at least one sentence"; return; }
  const button = $<HTMLButtonElement>("embed");
  button.disabled = true;
  setState("running");
  try {
    const embeddings: Float32Array[] = [], ms: number[] = [], tokens: number[] = [], truncated: boolean[] = [];
    for (const [i, s] of sentences.entries()) {
      $("status").textContent = `embedding sentence ${i + 1} of ${sentences.length}…`;
      const e = demo.tokenizer!.encode(s, demo.info!.tokens);
      tokens.push(e.tokens);
      truncated.push(e.truncated);
      const r = await embedOne(e);
      embeddings.push(r.embedding);
      ms.push(r.ms);
    }
    const similarity = embeddings.map((a) => embeddings.map((b) => cosine(a, b)));
    demo.result = { sentences, embeddings: embeddings.map((e) => Array.from(e)), similarity, ms, tokens, truncated };
    demo.firstResultAt ??= performance.now();
    show(demo.result);
    $("status").textContent = "done";
    setState("done");
  } catch (e) {
    fail(errorText(e));
    return;
  }
  button.disabled = false;
}

function cosine(a: Float32Array, b: Float32Array): number {
  let ab = 0, aa = 0, bb = 0;
  for (let i = 0; i < a.length; i++) { ab += a[i] * b[i]; aa += a[i] * a[i]; bb += b[i] * b[i]; }
  return ab / Math.sqrt(aa * bb || 1);
}

// similarity 0 (or less) .. 1 -> a light to a dark blue
const STOPS = [[247, 251, 255], [107, 174, 214], [8, 48, 107]];
function color(v: number): string {
  const x = Math.min(Math.max(v, 0), 1) * (STOPS.length - 1), i = Math.min(Math.floor(x), STOPS.length - 2), f = x - i;
  return `rgb(${STOPS[i].map((c, k) => Math.round(c + f * (STOPS[i + 1][k] - c))).join(",")})`;
}

function show(r: Result) {
  const el = (tag: string, text = "", cls = "") => Object.assign(document.createElement(tag), { textContent: text, className: cls });
  const table = el("table") as HTMLTableElement;
  table.id = "matrix";
  const head = table.insertRow();
  head.append(el("th"), ...r.sentences.map((_, j) => el("th", String(j + 1))));
  r.similarity.forEach((row, i) => {
    const tr = table.insertRow(), label = el("th", "", "row");
    label.title = r.sentences[i];
    label.append(el("span", `${i + 1}. ${r.sentences[i]}`),
                 el("small", `${r.tokens[i]} tokens · ${r.ms[i].toFixed(0)} ms`),
                 ...(r.truncated[i] ? [el("small", ` · cut to ${demo.info!.tokens} tokens`, "warn")] : []));
    tr.append(label);
    for (const v of row) {
      const td = tr.insertCell();
      td.textContent = v.toFixed(2);
      td.dataset.value = String(v);
      td.style.background = color(v);
      td.style.color = v > 0.6 ? "#fff" : "#1d2630";
    }
  });
  $("result").replaceChildren(table);
  const sorted = [...r.ms].sort((a, b) => a - b), total = r.ms.reduce((a, b) => a + b, 0);
  $("timing").textContent = `${r.sentences.length} sentence${r.sentences.length > 1 ? "s" : ""} in ${(total / 1000).toFixed(2)} s: ` +
    `${sorted[sorted.length >> 1].toFixed(0)} ms per sentence (median; the first ${r.ms[0].toFixed(0)} ms)`;
}

$("embed").addEventListener("click", embedAll);
start();
