// The worker side of the browser host: a dedicated module Web Worker (`new Worker(new URL("./worker.js",
// import.meta.url), {type: "module"})` in web/tinyweb.ts) that runs the host (web/host.ts): Pyodide, tinyweb and
// WebGPU live here, so Python never blocks the page. The page's side of the protocol is `WorkerHost` in web/tinyweb.ts.
//
// The protocol (every message is plain data; typed arrays are transferred, never copied on the way):
//   page -> worker   {kind: "start", runtime}                         once, first
//                    {kind: "call", id, method, args}                 one at a time (the page queues them)
//                    {kind: "release", refs}                          PyRefs the page destroyed (no answer)
//   worker -> page   {kind: "progress", progress}                     start-up stages
//                    {kind: "started", report} | {kind: "failed", error}
//                    {kind: "output", stream, text}                   Python's stdout / stderr, line by line
//                    {kind: "weights-progress", id, progress}         loadWeights' onProgress, for call id
//                    {kind: "result", id, value} | {kind: "error", id, error}
// Output a call printed arrives before its result (one channel, in order).
import { callHost, startHost, type DeviceReport, type Host, type Method, type Progress, type Runtime } from "./host.js";
import type { WeightsProgress } from "./weights.js";

export type { Method };
export type ToWorker =
  | { kind: "start"; runtime: Runtime }
  | { kind: "call"; id: number; method: Method; args: unknown[] }
  | { kind: "release"; refs: number[] };
/** An error as plain data: `name` is its JavaScript class (PythonError, WeightsError, ...), `type` a Python exception's. */
export interface SerializedError { name: string; message: string; type?: string }
export type FromWorker =
  | { kind: "progress"; progress: Progress }
  | { kind: "started"; report: DeviceReport }
  | { kind: "failed"; error: SerializedError }
  | { kind: "output"; stream: "stdout" | "stderr"; text: string }
  | { kind: "weights-progress"; id: number; progress: WeightsProgress }
  | { kind: "result"; id: number; value: unknown }
  | { kind: "error"; id: number; error: SerializedError };

export function serializeError(e: unknown): SerializedError {
  if (!(e instanceof Error)) return { name: "Error", message: String(e) };
  return { name: e.name, message: e.message, ...("type" in e && typeof e.type === "string" ? { type: e.type } : {}) };
}

// (a dedicated worker's global scope, typed here: the page's "dom" lib types `self` as a Window)
interface WorkerScope { postMessage(message: FromWorker, transfer: Transferable[]): void; onmessage: ((e: MessageEvent<ToWorker>) => void) | null }
const scope = globalThis as unknown as WorkerScope;
const post = (message: FromWorker, transfer: Transferable[] = []) => scope.postMessage(message, transfer);
let host: Host | null = null;

scope.onmessage = async ({ data: m }) => {
  if (m.kind === "start") {
    try {
      host = await startHost(m.runtime, {
        progress: (progress) => post({ kind: "progress", progress }),
        stdout: (text) => post({ kind: "output", stream: "stdout", text }),
        stderr: (text) => post({ kind: "output", stream: "stderr", text }),
      });
      post({ kind: "started", report: host.report });
    } catch (e) { post({ kind: "failed", error: serializeError(e) }); }
  } else if (m.kind === "release") host?.release(m.refs);
  else if (m.kind === "call") {
    try {
      if (!host) throw new Error(`tinyweb worker: ${m.method} called before the runtime started`);
      const value = await callHost(host, m.method, m.args, (progress) => post({ kind: "weights-progress", id: m.id, progress }));
      // (toTypedArray's array was made for the page: its memory moves there, it is not copied again)
      const transfer = ArrayBuffer.isView(value) && value.buffer instanceof ArrayBuffer ? [value.buffer] : [];
      post({ kind: "result", id: m.id, value }, transfer);
    } catch (e) { post({ kind: "error", id: m.id, error: serializeError(e) }); }
  }
};
