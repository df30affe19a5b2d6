// Weights from static hosting: safetensors files fetched with HTTP Range requests, checked, and kept in the Cache API.
//
// - A `.safetensors` URL: the 8-byte header length, then the JSON header, then the tensor data (one request each, so a
//   truncated or malformed file fails before its data is downloaded). A server that ignores Range gets one plain GET.
// - A `.json` URL: a sharded set's index, as written by Hugging Face (`weight_map`: tensor name -> file, relative to the
//   index), plus `sha256`: file -> hex digest of the whole file, and `tensor_sha256`: tensor name -> hex digest of its
//   data bytes (both optional). Every file the weight map names is fetched and its sha256 checked.
// - `tensors: [names]`: only those tensors, from only the files that hold them: after the header, one Range request per
//   tensor, each checked against its `tensor_sha256`. A part of a file cannot be checked against the whole file's digest:
//   a file with a `sha256` but without the `tensor_sha256` of a tensor wanted from it is fetched whole and checked, then
//   the tensors are taken from it (integrity is never traded for bytes).
// - Cache: each complete, checked file (or header and tensor) is stored in the Cache API ("tinyweb-weights"), keyed by
//   its URL and digest when known; a later load (also after a reload) reads it from there without any network request.
//   `clearWeightsCache()` forgets them.
export interface WeightsProgress { url: string; loaded: number; total: number; cached: boolean }
export interface WeightsOptions {
  onProgress?: (p: WeightsProgress) => void;
  cache?: string | false;    // Cache API name (default "tinyweb-weights"); false: always download
  tensors?: string[];        // load only these tensors (by name); default: all
}
export interface WeightsFile { url: string; bytes: Uint8Array<ArrayBuffer> }

export class WeightsError extends Error { override name = "WeightsError"; }

const DEFAULT_CACHE = "tinyweb-weights";

/** What relative URLs are resolved against: the page's base URL, or a worker's own URL (workers have no document). */
export function pageURL(): string { return globalThis.document?.baseURI ?? globalThis.location.href; }

/** Forget every cached weights file (a file changed on the server under the same URL and without a sha256 in an index
 * would otherwise keep coming from the cache). */
export async function clearWeightsCache(cache: string = DEFAULT_CACHE): Promise<void> { await caches.delete(cache); }

interface Digests { file?: string; tensors: Record<string, string> }
interface Entry { dtype: string; shape: number[]; data_offsets: [number, number] }
type Progress = (p: WeightsProgress) => void;

export async function fetchWeights(url: string, options: WeightsOptions = {}): Promise<WeightsFile[]> {
  const abs = new URL(url, pageURL());
  if (!abs.pathname.endsWith(".json")) return [await fetchFile(abs.href, options.tensors, { tensors: {} }, options)];
  const index = await (await get(abs.href)).json().catch((e: Error) => { throw new WeightsError(`${abs}: not a JSON index: ${e.message}`); });
  if (typeof index?.weight_map !== "object")
    throw new WeightsError(`${abs}: a sharded index needs a "weight_map" object (tensor name -> file)`);
  const weightMap: Record<string, string> = index.weight_map;
  const missing = (options.tensors ?? []).filter((n) => !(n in weightMap));
  if (missing.length) throw new WeightsError(`${abs}: the weight map has no tensor named ${missing.join(", ")}`);
  const byFile = new Map<string, string[]>();   // file -> the tensors wanted from it
  for (const [name, f] of Object.entries(weightMap))
    if (!options.tensors || options.tensors.includes(name)) byFile.set(f, [...(byFile.get(f) ?? []), name]);
  return Promise.all([...byFile].map(([f, names]) => fetchFile(new URL(f, abs).href, options.tensors && names,
                                                                 { file: index.sha256?.[f], tensors: index.tensor_sha256 ?? {} }, options)));
}

// the whole file, or (names given) a safetensors file of just those tensors
async function fetchFile(url: string, names: string[] | undefined, digests: Digests, options: WeightsOptions): Promise<WeightsFile> {
  const progress = options.onProgress ?? (() => {});
  const cache = options.cache === false ? null : await caches.open(options.cache ?? DEFAULT_CACHE);
  const fileKey = cacheKey(url, "file", digests.file);
  const piecewise = names && !(await cache?.match(fileKey)) && (!digests.file || names.every((n) => n in digests.tensors));
  if (names && piecewise) return { url, bytes: await fetchTensors(url, names, digests, cache, progress) };
  const [bytes, cached] = await cachedBytes(cache, fileKey, async () => {
    const bytes = await download(url, progress);
    if (digests.file) await checkSha256(url, bytes, digests.file);
    return bytes;
  });
  if (cached) progress({ url, loaded: bytes.length, total: bytes.length, cached: true });
  if (!names) return { url, bytes };
  const n = headerLength(url, bytes.length, bytes);
  return { url, bytes: await assemble(url, parseHeader(url, bytes.subarray(8, 8 + n)), names, digests,
                                      async (e) => bytes.subarray(8 + n + e.data_offsets[0], 8 + n + e.data_offsets[1])) };
}

// the header, then each tensor's bytes with a Range request of its own (all from the cache when they are there)
async function fetchTensors(url: string, names: string[], digests: Digests, cache: Cache | null, progress: Progress): Promise<Uint8Array<ArrayBuffer>> {
  let whole: Uint8Array<ArrayBuffer> | null = null;   // what a server without Range support sends: the tensors come from it
  const [header] = await cachedBytes(cache, cacheKey(url, "header", digests.file), async () => {
    const first = await get(url, [0, 8]);
    const lenBytes = first.status === 206 ? new Uint8Array(await first.arrayBuffer()) : (whole = await readAll(url, first, null, progress));
    const n = headerLength(url, first.status === 206 ? rangeTotal(url, first) : lenBytes.length, lenBytes);
    const out = new Uint8Array(8 + n);
    out.set(lenBytes.subarray(0, 8));
    out.set(whole ? whole.subarray(8, 8 + n) : await readRange(url, 8, 8 + n), 8);
    return out;
  });
  const entries = parseHeader(url, header.subarray(8)), base = header.length;
  const total = names.reduce((sum, n) => sum + (entries[n] ? entries[n].data_offsets[1] - entries[n].data_offsets[0] : 0), 0);
  let loaded = 0;
  return assemble(url, entries, names, digests, async (e, name) => {
    const [start, end] = [base + e.data_offsets[0], base + e.data_offsets[1]];
    if (whole) return whole.subarray(start, end);
    const [bytes, cached] = await cachedBytes(cache, cacheKey(url, `tensor ${name}`, digests.tensors[name] ?? digests.file),
                                              () => readRange(url, start, end));
    progress({ url, loaded: loaded += bytes.length, total, cached });
    return bytes;
  });
}

// a safetensors file of `names` (their data from `data`, checked against their digests), in the order given
async function assemble(url: string, entries: Record<string, Entry>, names: string[], digests: Digests,
                        data: (e: Entry, name: string) => Promise<Uint8Array<ArrayBuffer>>): Promise<Uint8Array<ArrayBuffer>> {
  const unknown = names.filter((n) => !entries[n]);
  if (unknown.length) throw new WeightsError(`${url}: no tensor named ${unknown.join(", ")} (it has ${Object.keys(entries).join(", ")})`);
  const parts = await Promise.all(names.map(async (name) => {
    const bytes = await data(entries[name], name);
    if (digests.tensors[name]) await checkSha256(`${url} (tensor ${name})`, bytes, digests.tensors[name]);
    return bytes;
  }));
  const header: Record<string, Entry> = {};
  let at = 0;
  names.forEach((name, i) => { header[name] = { ...entries[name], data_offsets: [at, at += parts[i].length] }; });
  const json = new TextEncoder().encode(JSON.stringify(header));
  const out = new Uint8Array(8 + json.length + at);
  new DataView(out.buffer).setBigUint64(0, BigInt(json.length), true);
  out.set(json, 8);
  parts.reduce((p, part) => { out.set(part, p); return p + part.length; }, 8 + json.length);
  return out;
}

// Cache API keys: the URL with a query parameter naming the part (the Cache API ignores URL fragments)
function cacheKey(url: string, part: string, sha256?: string): string {
  const key = new URL(url);
  key.searchParams.append("tinyweb-cache", sha256 ? `${part} sha256=${sha256}` : part);
  return key.href;
}

async function cachedBytes(cache: Cache | null, key: string, fetchBytes: () => Promise<Uint8Array<ArrayBuffer>>): Promise<[Uint8Array<ArrayBuffer>, boolean]> {
  const hit = await cache?.match(key);
  if (hit) return [new Uint8Array(await hit.arrayBuffer()), true];
  const bytes = await fetchBytes();
  await cache?.put(key, new Response(bytes, { headers: { "content-type": "application/octet-stream" } }));
  return [bytes, false];
}

async function checkSha256(what: string, bytes: Uint8Array<ArrayBuffer>, want: string) {
  const got = hex(await crypto.subtle.digest("SHA-256", bytes));
  if (got !== want.toLowerCase())
    throw new WeightsError(`${what}: sha256 mismatch: the index says ${want}, the downloaded ${bytes.length} bytes hash to ${got}`);
}

// header length, header, data: each checked as it arrives
async function download(url: string, progress: (p: WeightsProgress) => void): Promise<Uint8Array<ArrayBuffer>> {
  const first = await get(url, [0, 8]);
  if (first.status !== 206) {   // no Range support: the whole file came in one response
    const bytes = await readAll(url, first, null, progress);
    const n = headerLength(url, bytes.length, bytes);
    return bytes.subarray(0, dataEnd(url, bytes.length, n, bytes.subarray(8, 8 + n)));
  }
  const total = rangeTotal(url, first);
  const lenBytes = new Uint8Array(await first.arrayBuffer());
  const n = headerLength(url, total, lenBytes);
  const header = await readRange(url, 8, 8 + n);
  const end = dataEnd(url, total, n, header);
  const out = new Uint8Array(end);
  out.set(lenBytes.subarray(0, 8), 0);
  out.set(header, 8);
  if (end > 8 + n) out.set(await readAll(url, await get(url, [8 + n, end]), end - 8 - n, progress), 8 + n);
  return out;
}

function headerLength(url: string, total: number, lenBytes: Uint8Array): number {
  if (total < 8 || lenBytes.length < 8)
    throw new WeightsError(`${url}: truncated: ${total} bytes is shorter than a safetensors header (8 bytes)`);
  const n = Number(new DataView(lenBytes.buffer, lenBytes.byteOffset, 8).getBigUint64(0, true));
  if (8 + n > total) throw new WeightsError(`${url}: truncated: the header says it is ${n} bytes long, the file has only ${total} bytes`);
  return n;
}

// where the tensor data ends: after the header, at the largest end offset the JSON header gives
function dataEnd(url: string, total: number, headerLen: number, header: Uint8Array): number {
  const end = 8 + headerLen + Math.max(0, ...Object.values(parseHeader(url, header)).map((e) => e.data_offsets?.[1] ?? 0));
  if (end > total)
    throw new WeightsError(`${url}: truncated: the header says the tensor data ends at byte ${end}, the file has only ${total} bytes`);
  return end;
}

function parseHeader(url: string, header: Uint8Array): Record<string, Entry> {
  let parsed: Record<string, Entry>;
  try { parsed = JSON.parse(new TextDecoder().decode(header)); }
  catch (e) { throw new WeightsError(`${url}: the safetensors header is not valid JSON (${(e as Error).message})`); }
  delete (parsed as Record<string, unknown>).__metadata__;
  return parsed;
}

// bytes [start, end) of the file (from the whole file when a server without Range support sends that)
async function readRange(url: string, start: number, end: number): Promise<Uint8Array<ArrayBuffer>> {
  const r = await get(url, [start, end]);
  const body = new Uint8Array(await r.arrayBuffer()), bytes = r.status === 206 ? body : body.slice(start, end);
  if (bytes.length !== end - start) throw new WeightsError(`${url}: truncated: got ${bytes.length} of the ${end - start} bytes at ${start}`);
  return bytes;
}

async function get(url: string, range?: [number, number]): Promise<Response> {
  const r = await fetch(url, { cache: "no-store", headers: range ? { Range: `bytes=${range[0]}-${range[1] - 1}` } : {} });
  if (!r.ok) throw new WeightsError(`${url}: HTTP ${r.status} ${r.statusText}`);
  return r;
}

function rangeTotal(url: string, r: Response): number {
  const m = /\/(\d+)$/.exec(r.headers.get("content-range") ?? "");
  if (!m) throw new WeightsError(`${url}: a 206 response without a Content-Range total`);
  return Number(m[1]);
}

// the body, with progress; `expected` bytes when known (a short body is an error)
async function readAll(url: string, r: Response, expected: number | null,
                       progress: (p: WeightsProgress) => void): Promise<Uint8Array<ArrayBuffer>> {
  const total = expected ?? Number(r.headers.get("content-length") ?? 0);
  const chunks: Uint8Array[] = [];
  let loaded = 0;
  const reader = r.body!.getReader();
  for (let c = await reader.read(); !c.done; c = await reader.read()) {
    chunks.push(c.value);
    loaded += c.value.length;
    progress({ url, loaded, total, cached: false });
  }
  if (expected !== null && loaded !== expected)
    throw new WeightsError(`${url}: truncated: expected ${expected} bytes of tensor data, got ${loaded}`);
  const out = new Uint8Array(loaded);
  let at = 0;
  for (const c of chunks) { out.set(c, at); at += c.length; }
  return out;
}

function hex(buf: ArrayBuffer): string { return [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, "0")).join(""); }
