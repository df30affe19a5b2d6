// Weights from static hosting: safetensors files fetched with HTTP Range requests, checked, and kept in the Cache API.
//
// - A `.safetensors` URL: the 8-byte header length, then the JSON header, then the tensor data (one request each, so a
//   truncated or malformed file fails before its data is downloaded). A server that ignores Range gets one plain GET.
// - A `.json` URL: a sharded set's index, as written by Hugging Face (`weight_map`: tensor name -> file, relative to the
//   index), plus `sha256`: file -> hex digest. Every file the weight map names is fetched and its sha256 checked.
// - Cache: each complete, checked file is stored in the Cache API ("tinyweb-weights"), keyed by its URL and sha256 when
//   known; a later load (also after a reload) reads it from there without any network request. `clearWeightsCache()`
//   forgets them.
export interface WeightsProgress { url: string; loaded: number; total: number; cached: boolean }
export interface WeightsOptions {
  onProgress?: (p: WeightsProgress) => void;
  cache?: string | false;    // Cache API name (default "tinyweb-weights"); false: always download
}
export interface WeightsFile { url: string; bytes: Uint8Array<ArrayBuffer> }

export class WeightsError extends Error { override name = "WeightsError"; }

const DEFAULT_CACHE = "tinyweb-weights";

/** Forget every cached weights file (a file changed on the server under the same URL and without a sha256 in an index
 * would otherwise keep coming from the cache). */
export async function clearWeightsCache(cache: string = DEFAULT_CACHE): Promise<void> { await caches.delete(cache); }

export async function fetchWeights(url: string, options: WeightsOptions = {}): Promise<WeightsFile[]> {
  const abs = new URL(url, document.baseURI);
  if (!abs.pathname.endsWith(".json")) return [await fetchFile(abs.href, undefined, options)];
  const index = await (await get(abs.href)).json().catch((e: Error) => { throw new WeightsError(`${abs}: not a JSON index: ${e.message}`); });
  if (typeof index?.weight_map !== "object")
    throw new WeightsError(`${abs}: a sharded index needs a "weight_map" object (tensor name -> file)`);
  const files = [...new Set(Object.values(index.weight_map as Record<string, string>))];
  const sha256: Record<string, string> = index.sha256 ?? {};
  return Promise.all(files.map((f) => fetchFile(new URL(f, abs).href, sha256[f], options)));
}

async function fetchFile(url: string, sha256: string | undefined, options: WeightsOptions): Promise<WeightsFile> {
  const progress = options.onProgress ?? (() => {});
  const cache = options.cache === false ? null : await caches.open(options.cache ?? DEFAULT_CACHE);
  const key = sha256 ? `${url}#sha256=${sha256}` : url;
  const hit = await cache?.match(key);
  if (hit) {
    const bytes = new Uint8Array(await hit.arrayBuffer());
    progress({ url, loaded: bytes.length, total: bytes.length, cached: true });
    return { url, bytes };
  }
  const bytes = await download(url, progress);
  if (sha256) {
    const got = hex(await crypto.subtle.digest("SHA-256", bytes));
    if (got !== sha256.toLowerCase())
      throw new WeightsError(`${url}: sha256 mismatch: the index says ${sha256}, the downloaded ${bytes.length} bytes hash to ${got}`);
  }
  await cache?.put(key, new Response(bytes, { headers: { "content-type": "application/octet-stream" } }));
  return { url, bytes };
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
  const header = new Uint8Array(await (await get(url, [8, 8 + n])).arrayBuffer());
  if (header.length !== n) throw new WeightsError(`${url}: truncated: got ${header.length} of the header's ${n} bytes`);
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
  let parsed: Record<string, { data_offsets?: [number, number] }>;
  try { parsed = JSON.parse(new TextDecoder().decode(header)); }
  catch (e) { throw new WeightsError(`${url}: the safetensors header is not valid JSON (${(e as Error).message})`); }
  const offsets = Object.entries(parsed).filter(([k]) => k !== "__metadata__").map(([, v]) => v.data_offsets?.[1] ?? 0);
  const end = 8 + headerLen + Math.max(0, ...offsets);
  if (end > total)
    throw new WeightsError(`${url}: truncated: the header says the tensor data ends at byte ${end}, the file has only ${total} bytes`);
  return end;
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
