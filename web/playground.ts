// The playground page: a text area with Python, a Run button, the output, and which device runs it.
// The loaded API is also left at `window.tinyweb` (the e2e tests drive it from there). It uses the package's own module
// (web/tinyweb.ts, built to dist/lib/tinyweb.js for other sites) with the runtime files the build puts in runtime/.
// Python runs in a Web Worker; `?worker=0` in the page's URL runs it in the page instead (loadTinyweb's {worker: false}).
// The result of the code's last expression is shown as Python's repr() (10.0, True, None); a trailing ';' hides it.
import { loadTinyweb, type Tinyweb } from "./tinyweb.js";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;
const status = $("status"), output = $("output"), runButton = $<HTMLButtonElement>("run");
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
  const a = r.webgpu;
  $("adapter").textContent = a ? [a.vendor, a.architecture, a.device, a.description].filter(Boolean).join(" ") +
    (a.isFallbackAdapter ? " (fallback adapter, on the CPU)" : "") : "no WebGPU adapter";
  if (r.notice) {   // (WebGPU is missing: why, and what to do about it in this browser)
    const notice = $("notice");
    notice.hidden = false;
    notice.textContent = r.notice;
  }
  const globals = await tw.newGlobals();
  runButton.disabled = false;
  runButton.addEventListener("click", async () => {
    runButton.disabled = true;
    output.textContent = "running…";
    sink = [];
    try {
      const result = await tw.runPython(($("code") as HTMLTextAreaElement).value, { globals, result: "repr" });
      if (result !== undefined) sink.push(result);
      output.textContent = sink.join("\n");
    } catch (e) {
      output.textContent = sink.join("\n") + (sink.length ? "\n" : "") + String((e as Error).message ?? e);
    } finally {
      sink = null;
      runButton.disabled = false;
    }
  });
  window.tinyweb = tw;
} catch (e) {
  window.tinywebError = String((e as Error).stack ?? e);
  status.textContent = `failed: ${(e as Error).message ?? e}`;
}
