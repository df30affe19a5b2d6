// The generate page (generate.html): text from a language model in the browser. Gemma-3-270M's generation step, as
// exported by `python -m tinyweb.export gemma` (scripts/build_models.py writes it to models/gemma/ next to the page;
// ?model=URL names another folder), runs in a Web Worker (web/generate-worker.ts); the reply is decoded here
// (web/gemma_tokenizer.ts) and shown as each token comes, with the prompt's time and the tokens per second. Also shown:
// the adapter, and why the model cannot run where WebGPU (and a WASM export:
// web/page_model.ts) or a limit it needs is lacking.
// For tests and scripts: window.generateDemo holds the model's facts, the tokenizer and the last reply (its prompt's
// ids, its tokens and times, why it ended); <body data-state> is loading, ready, running, done or error.
import { GemmaTokenizer } from "./gemma_tokenizer.js";
import type { FromWorker, LoadedModel, ToWorker } from "./generate-worker.js";
import { kernelsText, loadRequest, pageModelURL, watchPageWorker } from "./page_model.js";

interface Reply {
  prompt: string; promptIds: number[]; promptMs: number; tokens: number[]; tokenMs: number[]; text: string;
  ended: "eos" | "length" | "stopped" | null;
}
interface GenerateDemo { model: Omit<LoadedModel, "tokenizerJSON"> | null; tokenizer: GemmaTokenizer | null; reply: Reply | null; firstTokenAt: number | null }
declare global { interface Window { generateDemo: GenerateDemo } }
const demo: GenerateDemo = window.generateDemo = { model: null, tokenizer: null, reply: null, firstTokenAt: null };

const $ = <T extends HTMLElement = HTMLElement>(id: string) => document.getElementById(id) as T;
const setState = (s: "loading" | "ready" | "running" | "done" | "error") => { document.body.dataset.state = s; };
const [modelInfo, loading, text, stats] = ["model", "loading", "text", "stats"].map((id) => $(id));
const promptInput = $<HTMLTextAreaElement>("prompt");
const [maxTokensInput, temperatureInput, topKInput, seedInput] = ["max-tokens", "temperature", "top-k", "seed"].map((id) => $<HTMLInputElement>(id));
const [generateButton, stopButton] = ["generate", "stop"].map((id) => $<HTMLButtonElement>(id));
const [promptText, replyText] = [text.querySelector<HTMLElement>(".prompt")!, text.querySelector<HTMLElement>(".reply")!];

const modelURL = pageModelURL("models/gemma/");
modelInfo.textContent = modelURL.pathname;
setState("loading");

const worker = new Worker(new URL("./generate-worker.ts", import.meta.url), { type: "module" });
const send = (m: ToWorker) => worker.postMessage(m);
let lastId = 0;
watchPageWorker<FromWorker>(worker, (m) => {
  if (m.kind === "loaded") loaded(m.model);
  else if (m.id !== lastId) return;
  else if (m.kind === "prompt") { Object.assign(demo.reply!, { promptIds: m.ids, promptMs: m.ms }); showStats(); }
  else if (m.kind === "token") addToken(m.token, m.ms);
  else if (m.kind === "done") finish(m.reason);
  else { finish(null); stats.textContent = `The text could not be generated: ${m.message}`; setState("error"); }
}, () => {
  generateButton.disabled = stopButton.disabled = true;
  stats.textContent = "";
  setState("error");
});
send(loadRequest(modelURL));

const mb = (bytes: number) => (bytes / 1e6).toFixed(1);
const duration = (ms: number) => ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(2)} s`;

function loaded({ tokenizerJSON, ...m }: LoadedModel) {
  demo.model = m;
  demo.tokenizer = new GemmaTokenizer(tokenizerJSON);
  loading.hidden = true;
  modelInfo.textContent = `${m.name} · ${mb(m.weightsBytes)} MB of weights · context ${m.context} tokens · ` +
                          `${kernelsText(m.kernels)} · loaded in ${m.timings.total.toFixed(1)} s`;
  generateButton.disabled = false;
  setState("ready");
}

function generate() {
  const [maxTokens, temperature, topK, seed] = [maxTokensInput, temperatureInput, topKInput, seedInput].map((i) => Number(i.value));
  const bad = !(Number.isInteger(maxTokens) && maxTokens >= 1) ? "new tokens must be a whole number from 1" :
    !(temperature >= 0) ? "the temperature must be 0 or more" : !(Number.isInteger(topK) && topK >= 0) ? "top-k must be a whole number from 0" :
    !(Number.isInteger(seed) && seed >= 0 && seed <= 0xffffffff) ? `the seed must be a whole number from 0 to ${0xffffffff}` : null;
  if (bad) { stats.textContent = `Cannot generate: ${bad}.`; return; }
  const prompt = promptInput.value;
  demo.reply = { prompt, promptIds: [], promptMs: 0, tokens: [], tokenMs: [], text: "", ended: null };
  promptText.textContent = prompt;
  replyText.textContent = "";
  text.classList.add("running");
  stats.textContent = "reading the prompt…";
  stopButton.disabled = false;
  setState("running");
  send({ kind: "generate", id: ++lastId, prompt, maxTokens, temperature, topK, seed });
}

function addToken(token: number, ms: number) {
  const reply = demo.reply!;
  reply.tokens.push(token);
  reply.tokenMs.push(ms);
  reply.text = demo.tokenizer!.decode(reply.tokens);   // (whole: a character made of several byte tokens shows once complete)
  replyText.textContent = reply.text;
  demo.firstTokenAt ??= performance.now();
  showStats();
}

function showStats() {
  const r = demo.reply!, n = r.tokens.length, ms = r.tokenMs.slice(1).reduce((a, b) => a + b, 0);   // (the first token's time is the prompt's)
  stats.textContent = `prompt: ${r.promptIds.length} tokens in ${duration(r.promptMs)}` +
    (n ? ` · ${n} new token${n > 1 ? "s" : ""}` : "") + (n > 1 ? ` · ${(1000 * (n - 1) / ms).toFixed(2)} tokens/s` : "") +
    (r.ended ? ` · ${r.ended === "eos" ? "the model ended the text" : r.ended === "length" ? "the new-token limit" : "stopped"}` : "");
}

function finish(reason: Reply["ended"]) {
  demo.reply!.ended = reason;
  text.classList.remove("running");
  stopButton.disabled = true;
  if (reason) { showStats(); setState("done"); }
}

generateButton.addEventListener("click", generate);
stopButton.addEventListener("click", () => send({ kind: "stop", id: lastId }));
promptInput.addEventListener("keydown", (e) => { if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && !generateButton.disabled) generate(); });
