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
//   its URL and digest when known; a later load (also after a reload) reads it from there. What is keyed by a digest is
//   used without any network request. What is not (a file the index gives no sha256) is stored with the response's
//   validators (ETag, Last-Modified) and revalidated before use, with one conditional HEAD request per file and load
//   (If-None-Match / If-Modified-Since): a 304 keeps it, a changed file is dropped and downloaded again. (Without
//   validators from the server such a file is not cached; when the server cannot be reached the cached copy is used.)
//   `clearWeightsCache()` forgets them.
/** Progress of one file (`url`): `total` is the number of bytes this load reads of it, from the network or the cache:
 * the 8-byte length, the JSON header and the tensor data it needs (all of the file's data, or the wanted tensors'
 * bytes); where the server ignores Range requests, the whole file it sends. `loaded` counts them as they come;
 * `cached`: all of them so far came from the Cache API. */
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

/** Forget every cached weights file (to free the storage; a changed file is noticed anyway: through its digest, or by
 * revalidation where it has none). */
export async function clearWeightsCache(cache: string = DEFAULT_CACHE): Promise<void> {
  await cacheWrites.settled();
  await caches.delete(cache);
}

// the Cache API writes this thread has started and not seen finish (cachedBytes does not wait for its own)
const cacheWrites = Object.assign(new Set<Promise<void>>(), { settled(this: Set<Promise<void>>) { return Promise.all([...this]); } });

/** A sharded set's index (Hugging Face's form, plus digests): tensor name -> file; file -> sha256; tensor -> sha256. */
export interface WeightsIndex { weight_map: Record<string, string>; sha256?: Record<string, string>; tensor_sha256?: Record<string, string> }
interface Digests { file?: string; tensors: Record<string, string> }
interface Entry { dtype: string; shape: number[]; data_offsets: [number, number] }
type Progress = (p: WeightsProgress) => void;

export async function fetchWeights(url: string, options: WeightsOptions = {}): Promise<WeightsFile[]> {
  const abs = new URL(url, pageURL());
  if (!abs.pathname.endsWith(".json")) return [await fetchFile(abs.href, options.tensors, { tensors: {} }, options)];
  const index = await (await get(abs.href)).json().catch((e: Error) => { throw new WeightsError(`${abs}: not a JSON index: ${e.message}`); });
  return fetchIndexedWeights(abs.href, index, options);
}

/** A sharded index's files, from the index itself (already in hand: `weight_map`, `sha256`, `tensor_sha256` as above);
 * its file names are relative to `indexURL`. */
export async function fetchIndexedWeights(indexURL: string, index: WeightsIndex, options: WeightsOptions = {}): Promise<WeightsFile[]> {
  const abs = new URL(indexURL, pageURL());
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
  await cacheWrites.settled();   // (an earlier load's copy, still being written, is then found)
  const cache = options.cache === false ? null : await caches.open(options.cache ?? DEFAULT_CACHE);
  if (cache && !digests.file) await revalidate(cache, url);
  const fileKey = cacheKey(url, "file", digests.file);
  const piecewise = names && !(await cache?.match(fileKey)) && (!digests.file || names.every((n) => n in digests.tensors));
  if (names && piecewise) return { url, bytes: await fetchTensors(url, names, digests, cache, progress) };
  const [bytes, cached] = await cachedBytes(cache, fileKey, url, !digests.file, async () => {
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
  const unsigned = !digests.file;
  const [header, headerCached] = await cachedBytes(cache, cacheKey(url, "header", digests.file), url, unsigned, async () => {
    const first = await get(url, [0, 8]);
    const lenBytes = first.status === 206 ? new Uint8Array(await first.arrayBuffer())
                   : (whole = await readAll(url, first, null, (loaded, total) => progress({ url, loaded, total, cached: false })));
    const n = headerLength(url, first.status === 206 ? rangeTotal(url, first) : lenBytes.length, lenBytes);
    const out = new Uint8Array(8 + n);
    out.set(lenBytes.subarray(0, 8));
    out.set(whole ? whole.subarray(8, 8 + n) : await readRange(url, 8, 8 + n), 8);
    return out;
  });
  const entries = parseHeader(url, header.subarray(8)), base = header.length;
  const total = base + names.reduce((sum, n) => sum + (entries[n] ? entries[n].data_offsets[1] - entries[n].data_offsets[0] : 0), 0);
  let loaded = base, allCached = headerCached;
  if (!whole) progress({ url, loaded, total, cached: allCached });
  return assemble(url, entries, names, digests, async (e, name) => {
    const [start, end] = [base + e.data_offsets[0], base + e.data_offsets[1]];
    if (whole) return whole.subarray(start, end);
    const [bytes, cached] = await cachedBytes(cache, cacheKey(url, `tensor ${name}`, digests.tensors[name] ?? digests.file), url,
                                              !(digests.tensors[name] ?? digests.file), () => readRange(url, start, end));
    allCached &&= cached;
    progress({ url, loaded: loaded += bytes.length, total, cached: allCached });
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

// (unsigned: the key holds no digest, so the entry keeps the validators of url's response, for revalidate())
async function cachedBytes(cache: Cache | null, key: string, url: string, unsigned: boolean,
                           fetchBytes: () => Promise<Uint8Array<ArrayBuffer>>): Promise<[Uint8Array<ArrayBuffer>, boolean]> {
  const hit = await cache?.match(key);
  if (hit) return [new Uint8Array(await hit.arrayBuffer()), true];
  const bytes = await fetchBytes();
  const v = validatorsSeen.get(url);
  if (cache && (!unsigned || v?.etag || v?.lastModified)) {
    const headers: Record<string, string> = { "content-type": "application/octet-stream" };
    if (unsigned && v?.etag) headers.etag = v.etag;
    if (unsigned && v?.lastModified) headers["last-modified"] = v.lastModified;
    // (not waited for here: the bytes are in hand, and writing them to disk is off the load's path; a put that fails
    // costs only the next visit's download. This thread's next load or clear waits for it: cacheWrites)
    const put = cache.put(key, new Response(bytes, { headers })).catch((e) => console.warn(`tinyweb: caching ${url} failed: ${e}`));
    cacheWrites.add(put);
    put.finally(() => cacheWrites.delete(put));
  }
  return [bytes, false];
}

interface Validators { etag: string | null; lastModified: string | null }
const validatorsSeen = new Map<string, Validators>();   // URL -> the validators of its latest response

// a cache key (cacheKey) of url without a digest in it
function isUnsignedKeyOf(key: string, url: string): boolean {
  const k = new URL(key), part = k.searchParams.get("tinyweb-cache");
  if (part === null || part.includes("sha256=")) return false;
  k.searchParams.delete("tinyweb-cache");
  return k.href === new URL(url).href;
}

// The cached parts of url that no digest vouches for: one conditional HEAD request with the validators they were
// stored with; they stay when the server answers 304 (or, ignoring the condition, sends the same validators) and are
// dropped otherwise (a changed file, an error). When the server cannot be reached they are used as they are.
async function revalidate(cache: Cache, url: string): Promise<void> {
  const keys = (await cache.keys(url, { ignoreSearch: true })).filter((k) => isUnsignedKeyOf(k.url, url));
  if (!keys.length) return;
  const stored = await Promise.all(keys.map(async (key) => {
    const h = (await cache.match(key))?.headers;
    return { key, etag: h?.get("etag") ?? null, lastModified: h?.get("last-modified") ?? null };
  }));
  const asked = stored[0], headers: Record<string, string> = {};
  if (asked.etag) headers["If-None-Match"] = asked.etag;
  if (asked.lastModified) headers["If-Modified-Since"] = asked.lastModified;
  let r: Response;
  try { r = await fetch(url, { method: "HEAD", cache: "no-store", headers }); }
  catch { return; }   // (offline: the cached copy is all there is)
  const now: Validators = r.status === 304 ? asked : { etag: r.headers.get("etag"), lastModified: r.headers.get("last-modified") };
  const same = (a: Validators, b: Validators) => a.etag && b.etag ? a.etag === b.etag : !!a.lastModified && a.lastModified === b.lastModified;
  await Promise.all(stored.filter((s) => !((r.status === 304 || r.ok) && same(s, now))).map((s) => cache.delete(s.key)));
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
    const bytes = await readAll(url, first, null, (loaded, total) => progress({ url, loaded, total, cached: false }));
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
  progress({ url, loaded: 8 + n, total: end, cached: false });
  if (end > 8 + n)
    out.set(await readAll(url, await get(url, [8 + n, end]), end - 8 - n, (loaded) => progress({ url, loaded: 8 + n + loaded, total: end, cached: false })), 8 + n);
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
  validatorsSeen.set(url, { etag: r.headers.get("etag"), lastModified: r.headers.get("last-modified") });
  return r;
}

function rangeTotal(url: string, r: Response): number {
  const m = /\/(\d+)$/.exec(r.headers.get("content-range") ?? "");
  if (!m) throw new WeightsError(`${url}: a 206 response without a Content-Range total`);
  return Number(m[1]);
}

// the body, with onChunk(bytes so far, bytes expected in all); `expected` bytes when known (a short body is an error)
/** A response's body, read in chunks (`onChunk` after each); `expected`: the byte count it must have (else any). */
export async function readAll(url: string, r: Response, expected: number | null,
                       onChunk: (loaded: number, total: number) => void): Promise<Uint8Array<ArrayBuffer>> {
  const total = expected ?? Number(r.headers.get("content-length") ?? 0);
  const chunks: Uint8Array[] = [];
  let loaded = 0;
  const reader = r.body!.getReader();
  for (let c = await reader.read(); !c.done; c = await reader.read()) {
    chunks.push(c.value);
    loaded += c.value.length;
    onChunk(loaded, Math.max(total, loaded));
  }
  if (expected !== null && loaded !== expected)
    throw new WeightsError(`${url}: truncated: expected ${expected} bytes of tensor data, got ${loaded}`);
  const out = new Uint8Array(loaded);
  let at = 0;
  for (const c of chunks) { out.set(c, at); at += c.length; }
  return out;
}

function hex(buf: ArrayBuffer): string { return [...new Uint8Array(buf)].map((b) => b.toString(16).padStart(2, "0")).join(""); }
