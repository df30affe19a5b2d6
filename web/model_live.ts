// A demo page's model run live (the pages' ?backend=live, through web/page_model.ts): tinyweb itself, its Python in
// Pyodide (web/tinyweb.ts, started in this thread: the page's worker), builds the model from the weights the export was
// made from and runs it on the page's WebGPU device (tinyweb.export.live.LiveModel), in place of the exported kernels.
// The export's folder must hold those weights: `python -m tinyweb.export MODEL DIR --with-source` copies them into
// DIR/source/ and writes DIR/source.json (what to fetch, which model to build); scripts/build_models.py does so for the
// pages' models. The model takes and gives what its manifest says, like an exported one, so a page runs it unchanged;
// it starts slower (Pyodide and the wheel, the weights parsed in Python, each kernel compiled on its first use) and its
// first two runs of a shape are TinyJit's plain run and capture.
import type { DType, PyRef, Tinyweb } from "./tinyweb.js";
import { resolveRuntime, startTinyweb } from "./tinyweb.js";
import { readAll } from "./weights.js";
import { ARRAYS, fetchManifest, Model, ModelError, readOutputs, type LoadModelOptions, type LoadTimings, type ModelManifest,
         type StepTime, type TypedArray } from "./model_common.js";

/** source.json (tinyweb/export/cli.py's write_source): paths relative to its folder. */
export interface LiveSource {
  format: "tinyweb-live-source";
  model: string;
  size: number | null;
  part: string | null;
  weights: string;
  files: { path: string; bytes: number }[];
}
export const SOURCE_FILE = "source.json";

// one Python per worker, shared by the models it loads (the diffuse page's three parts; built once in Python)
let python: Promise<Tinyweb> | null = null;

/** The model exported at `url` (its folder or manifest.json), built live from its source/ files with tinyweb's runtime
 * from `runtimeURL` (the folder of tinyweb-manifest.json: dist/runtime/). Its progress: the source files' bytes (no
 * kernels are compiled ahead). */
export async function loadLiveModel(url: string | URL, runtimeURL: string, options: LoadModelOptions = {}): Promise<LiveModel> {
  const t0 = performance.now(), since = () => (performance.now() - t0) / 1000;
  const { manifestURL, manifest } = await fetchManifest(url);
  const sourceURL = new URL(SOURCE_FILE, manifestURL).href;
  const r = await fetch(sourceURL);
  if (!r.ok) throw new ModelError(`${sourceURL}: HTTP ${r.status}: this export keeps no weights to build the model from live ` +
                                  `(export it with python -m tinyweb.export ... --with-source)`);
  const source: LiveSource = await r.json().catch((e: Error) => { throw new ModelError(`${sourceURL}: not JSON (${e.message})`); });
  if (source?.format !== "tinyweb-live-source" || typeof source.model !== "string" || !Array.isArray(source.files))
    throw new ModelError(`${sourceURL}: not a tinyweb live source (format ${JSON.stringify(source?.format)})`);
  const timings: LoadTimings = { manifest: since(), device: 0, kernels: 0, weights: 0, total: 0 };

  python ??= resolveRuntime(runtimeURL).then((runtime) => startTinyweb(runtime));
  python.catch(() => { python = null; });   // (a later load may try again)
  const total = source.files.reduce((s, f) => s + f.bytes, 0), loaded = new Map<string, number>();
  const report = () => options.onProgress?.({ weightsLoaded: [...loaded.values()].reduce((a, b) => a + b, 0), weightsTotal: total,
                                              kernelsReady: 0, kernelsTotal: 0 });
  report();
  const files = Promise.all(source.files.map(async (f) => {
    const url = new URL(f.path, sourceURL).href;
    return { path: livePath(url), bytes: await fetchOnce(url, (n) => { loaded.set(url, n); report(); }) };
  }));
  files.catch(() => {});
  const tw = await python;
  timings.device = since();
  if (!tw.report.device) throw new ModelError(`tinyweb found no device to run the model on: ${tw.report.error}`);
  const fs = tw.pyodide!.FS;
  for (const f of await files) {
    if (fs.analyzePath(f.path).exists) continue;   // (written for another part of the same model)
    fs.mkdirTree(f.path.slice(0, f.path.lastIndexOf("/")));
    fs.writeFile(f.path, f.bytes);
  }
  timings.weights = since();
  const globals = await tw.newGlobals();
  for (const [k, v] of Object.entries({ MODEL: source.model, SIZE: source.size, PART: source.part, DEVICE: tw.report.device,
                                        WEIGHTS: livePath(new URL(source.weights, sourceURL).href) }))
    await globals.set(k, v);
  await tw.runPython("from tinyweb.export.live import LiveModel\nmodel = LiveModel(MODEL, WEIGHTS, SIZE, PART, DEVICE)", { globals });
  timings.kernels = timings.total = since();
  // (the manifest as the page reads it: what was downloaded is the source's files, and no kernel is exported ahead)
  const live = { ...manifest, kernels: [],
                 weights: { shards: source.files.map((f) => ({ file: f.path, bytes: f.bytes, sha256: "", tensors: [] })) } } as ModelManifest;
  return new LiveModel(live, timings, tw, globals);
}

// a source file's path in Pyodide's file system: its URL's path under /live
const livePath = (url: string) => `/live${decodeURIComponent(new URL(url).pathname)}`;

// each source file fetched once per worker (the parts of one model share their source), with its bytes so far
const fetched = new Map<string, { bytes: Promise<Uint8Array>; listeners: ((loaded: number) => void)[] }>();
function fetchOnce(url: string, onProgress: (loaded: number) => void): Promise<Uint8Array> {
  let f = fetched.get(url);
  if (!f) {
    const entry: { bytes: Promise<Uint8Array>; listeners: ((loaded: number) => void)[] } = { bytes: Promise.resolve(new Uint8Array()), listeners: [onProgress] };
    entry.bytes = fetchWithProgress(url, (n) => entry.listeners.forEach((l) => l(n)));
    entry.bytes.catch(() => fetched.delete(url));
    fetched.set(url, f = entry);
  } else f.listeners.push(onProgress);
  return f.bytes;
}

async function fetchWithProgress(url: string, onProgress: (loaded: number) => void): Promise<Uint8Array> {
  const r = await fetch(url);
  if (!r.ok || !r.body) throw new ModelError(`${url}: HTTP ${r.status} ${r.statusText}`);
  return readAll(url, r, null, onProgress);
}

/** A model built and run by tinyweb's Python (loadLiveModel). */
export class LiveModel extends Model {
  #tw: Tinyweb;
  #globals: PyRef;
  #inputs = new Map<number, TypedArray>();   // input buffer id -> its values (a copy: the caller may reuse its array)

  constructor(manifest: ModelManifest, timings: LoadTimings, tw: Tinyweb, globals: PyRef) {
    super(manifest, timings);
    this.#tw = tw;
    this.#globals = globals;
  }

  destroy() {
    if (this.destroyed) return;
    this.destroyed = true;
    this.#globals.destroy();
  }

  protected async ready() {}

  protected writeInput(v: number, id: number, bytes: Uint8Array) {
    const Arr = ARRAYS[this.manifest.variants[v].inputs.find((i) => i.buffer === id)!.dtype];
    const array = new Arr(bytes.byteLength / Arr.BYTES_PER_ELEMENT);
    new Uint8Array(array.buffer).set(bytes);
    this.#inputs.set(id, array);
  }

  protected async execute(v: number): Promise<Record<string, TypedArray>> {
    const spec = this.manifest.variants[v], device = this.#tw.report.device!;
    const inputs = await Promise.all(spec.inputs.map((i) => this.#tw.tensor(this.#inputs.get(i.buffer)!, i.shape, device)));
    const refs: PyRef[] = [];
    try {
      await this.#globals.set("inputs", inputs);
      const outs = await this.#tw.runPython("model(*inputs)", { globals: this.#globals }) as PyRef[];
      refs.push(...outs);
      if (outs.length !== spec.outputs.length)
        throw new ModelError(`the live model returned ${outs.length} outputs; the export has ${spec.outputs.length}`);
      const arrays = await Promise.all(outs.map((o, i) => {
        const want = spec.outputs[i];
        if (JSON.stringify(o.shape) !== JSON.stringify(want.shape))
          throw new ModelError(`output ${want.name}: the live model gives shape [${o.shape}], the export [${want.shape}]`);
        return this.#tw.toTypedArray(o, want.dtype as DType) as Promise<ArrayBufferView>;
      }));
      return readOutputs(spec, (i, n) => new Uint8Array(arrays[i].buffer, arrays[i].byteOffset, n));
    } finally {
      for (const r of [...inputs, ...refs]) r.destroy();
    }
  }

  protected async profileSteps(): Promise<StepTime[]> {
    throw new ModelError("profile: a live model runs no exported steps (profile the export, or tinyweb's own DEBUG output)");
  }
}
