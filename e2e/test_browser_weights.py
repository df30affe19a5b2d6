"""Weights from the served site: safetensors by URL with Range requests, a sharded set with sha256 in its index, the
Cache API on a second visit (no network fetch at all), and clear errors for a truncated file and a wrong sha256.
The files are written here with the `safetensors` package (an independent writer) and served at /e2e-data/.
The page's requests (its worker's: Python and loadWeights run there) are recorded as (url, Range header) for GETs, and
as (url, status, If-Modified-Since header) for the HEAD requests that revalidate a cached file."""
import email.utils, hashlib, json, os, time
import numpy as np
import pytest
from browser_harness import assert_close, open_playground

safetensors_numpy = pytest.importorskip("safetensors.numpy", reason="the safetensors package writes the test files")

def write(site, name: str, tensors: dict) -> bytes:
  safetensors_numpy.save_file(tensors, str(site.data_dir / name))
  return (site.data_dir / name).read_bytes()

@pytest.fixture(scope="module")
def weights(chromium, site):
  rng = np.random.default_rng(0)
  w = {"layer.weight": rng.standard_normal((4, 3)).astype(np.float32), "layer.bias": rng.standard_normal(4).astype(np.float32),
       "steps": np.arange(5, dtype=np.int32)}
  write(site, "single.safetensors", w)
  shards = {"model-1.safetensors": {"a": rng.standard_normal((2, 2)).astype(np.float32)},
            "model-2.safetensors": {"b": rng.standard_normal(3).astype(np.float32), "c": np.array([1, 2], dtype=np.uint8)}}
  sha = {name: hashlib.sha256(write(site, name, t)).hexdigest() for name, t in shards.items()}
  weight_map = {k: name for name, t in shards.items() for k in t}
  (site.data_dir / "model.index.json").write_text(json.dumps({"weight_map": weight_map, "sha256": sha}))
  bad_sha = {**sha, "model-2.safetensors": "0" * 64}
  (site.data_dir / "bad-sha.index.json").write_text(json.dumps({"weight_map": weight_map, "sha256": bad_sha}))
  # tensors loaded by name: a file with a big tensor the subset leaves out, and shards with per-tensor digests
  subset = {"big": rng.standard_normal((64, 64)).astype(np.float32), "small": np.arange(7, dtype=np.uint8),
            "mid": rng.integers(-9, 9, 100).astype(np.int32)}
  write(site, "subset.safetensors", subset)
  subset_shards = {"part-1.safetensors": {"big": subset["big"]}, "part-2.safetensors": {"small": subset["small"], "mid": subset["mid"]}}
  part_sha = {name: hashlib.sha256(write(site, name, t)).hexdigest() for name, t in subset_shards.items()}
  tensor_sha = {k: hashlib.sha256(v.tobytes()).hexdigest() for k, v in subset.items()}
  part_map = {k: name for name, t in subset_shards.items() for k in t}
  (site.data_dir / "parts.index.json").write_text(json.dumps({"weight_map": part_map, "sha256": part_sha, "tensor_sha256": tensor_sha}))
  (site.data_dir / "parts-bad.index.json").write_text(json.dumps({"weight_map": part_map, "sha256": part_sha,
                                                                  "tensor_sha256": {**tensor_sha, "mid": "0" * 64}}))
  full = write(site, "truncated.safetensors", w)
  (site.data_dir / "truncated.safetensors").write_bytes(full[:-10])
  page, _ = open_playground(chromium, site)
  requests: list[tuple[str, str | None]] = []
  page.heads = []
  page.on("request", lambda r: r.method == "GET" and requests.append((r.url, r.headers.get("range"))))
  page.on("response", lambda r: r.request.method == "HEAD" and page.heads.append((r.url, r.status, r.request.headers.get("if-modified-since"))))
  yield page, requests, w, {k: v for t in shards.values() for k, v in t.items()}, subset
  page.context.close()

LOAD_JS = """async ([url, options]) => {
  const tw = window.tinyweb, progress = [];
  const sd = await tw.loadWeights(url, {...options, onProgress: (p) => progress.push(p)});
  const g = await tw.newGlobals(); await g.set("sd", sd);
  const out = await tw.runPython("{k: [v.device, v.dtype.name, list(v.shape), v.tolist()] for k, v in sd.items()}", {globals: g});
  sd.destroy(); g.destroy();
  return {tensors: out, progress, type: sd.type};
}"""

def load_error(page, url: str, options: dict | None = None) -> str:
  """The message loadWeights(url, options) fails with in the page ('no error' when it loads)."""
  return page.evaluate("([url, options]) => window.tinyweb.loadWeights(url, options).then(() => 'no error', (e) => e.message)",
                       [url, options or {}])

def check_tensors(got: dict, want: dict):
  assert set(got) == set(want)
  for k, arr in want.items():
    device, dtype, shape, values = got[k]
    # (the page's default device: WASM on this machine's fallback adapter, WEBGPU on a real GPU)
    assert device in ("WEBGPU", "WASM") and (dtype, shape) == (arr.dtype.name, list(arr.shape)), (k, got[k][:3])
    assert_close(values, arr.tolist(), atol=0, rtol=0, path=k)

def test_single_file_with_range_requests_then_from_the_cache(weights, site):
  page, requests, w, _, _ = weights
  url = site.url + "e2e-data/single.safetensors"
  requests.clear()
  got = page.evaluate(LOAD_JS, [url, {}])
  check_tensors(got["tensors"], w)
  fetched = [rng for u, rng in requests if u == url]
  assert fetched == ["bytes=0-7", fetched[1], fetched[2]] and all(r and r.startswith("bytes=") for r in fetched), fetched
  size = (site.data_dir / "single.safetensors").stat().st_size
  last = got["progress"][-1]
  assert last["loaded"] == last["total"] == size and not last["cached"]   # length, header and data: the whole file here
  assert got["type"] == "dict"   # (loadWeights resolved to a PyRef of the dict)
  # a second visit: a reloaded page loads the same weights from the Cache API; the index gives no digest, so one
  # conditional HEAD request asks whether the file changed (304: no), and nothing is downloaded
  page.reload()
  page.wait_for_function("window.tinyweb", timeout=120_000)
  requests.clear()
  page.heads.clear()
  again = page.evaluate(LOAD_JS, [url, {}])
  check_tensors(again["tensors"], w)
  assert [u for u, _ in requests if "e2e-data" in u] == []
  assert [(u, status) for u, status, _ in page.heads] == [(url, 304)]
  assert again["progress"] and all(p["cached"] for p in again["progress"]) and again["progress"][-1]["total"] == size
  # after clearWeightsCache the file comes from the network again
  page.evaluate("window.tinyweb.clearWeightsCache()")
  requests.clear()
  check_tensors(page.evaluate(LOAD_JS, [url, {}])["tensors"], w)
  assert len([u for u, _ in requests if u == url]) == 3

def test_a_server_without_range_support_sends_the_whole_file(weights, site):
  page, requests, w, _, _ = weights
  url = site.url + "e2e-data/single.safetensors?norange"
  requests.clear()
  got = page.evaluate(LOAD_JS, [url, {}])
  check_tensors(got["tensors"], w)
  assert [r for u, r in requests if u == url] == ["bytes=0-7"]   # asked for a range, got the whole file: no more requests
  assert got["progress"][-1]["loaded"] == got["progress"][-1]["total"] == (site.data_dir / "single.safetensors").stat().st_size
  requests.clear()
  got = page.evaluate(LOAD_JS, [url, {"tensors": ["steps"], "cache": False}])   # a subset: taken from that whole file
  check_tensors(got["tensors"], {"steps": w["steps"]})
  assert [r for u, r in requests if u == url] == ["bytes=0-7"]
  err = load_error(page, site.url + "e2e-data/truncated.safetensors?norange")
  assert "truncated" in err and "the file has only" in err, err

def test_sharded_index_with_sha256(weights, site):
  page, requests, _, shard_tensors, _ = weights
  requests.clear()
  got = page.evaluate(LOAD_JS, [site.url + "e2e-data/model.index.json", {}])
  check_tensors(got["tensors"], shard_tensors)
  assert {u.rsplit("/", 1)[1] for u, _ in requests if "e2e-data" in u} == {"model.index.json", "model-1.safetensors", "model-2.safetensors"}

def test_wrong_sha256_is_a_clear_error(weights, site):
  # also with the cache on, after model.index.json put the same file there under its right digest: the digest is part
  # of the cache key (as a query parameter: the Cache API ignores URL fragments)
  page, _, _, _, _ = weights
  page.evaluate("(url) => window.tinyweb.loadWeights(url).then((sd) => sd.destroy())", site.url + "e2e-data/model.index.json")
  for cache in (False, True):
    err = load_error(page, site.url + "e2e-data/bad-sha.index.json", {} if cache else {"cache": False})
    assert "model-2.safetensors" in err and "sha256 mismatch" in err and "0" * 64 in err, err

def test_truncated_file_is_a_clear_error(weights, site):
  page, _, _, _, _ = weights
  err = load_error(page, site.url + "e2e-data/truncated.safetensors")
  size = (site.data_dir / "truncated.safetensors").stat().st_size
  assert "truncated.safetensors" in err and "truncated" in err and f"only {size} bytes" in err, err

def data_ranges(path) -> dict[str, str]:
  """The Range header values of the header, of all the data and of each tensor, read from the file's own header."""
  raw = path.read_bytes()
  n = int.from_bytes(raw[:8], "little")
  header = json.loads(raw[8:8 + n])
  return {"header": f"bytes=8-{8 + n - 1}", "data": f"bytes={8 + n}-{len(raw) - 1}",
          **{k: f"bytes={8 + n + a}-{8 + n + b - 1}" for k, v in header.items()
                                               if k != "__metadata__" for a, b in [v["data_offsets"]]}}

def test_tensors_by_name_fetch_only_their_bytes(weights, site):
  page, requests, _, _, subset = weights
  url = site.url + "e2e-data/subset.safetensors"
  requests.clear()
  got = page.evaluate(LOAD_JS, [url, {"tensors": ["small", "mid"]}])
  check_tensors(got["tensors"], {k: subset[k] for k in ("small", "mid")})
  ranges = data_ranges(site.data_dir / "subset.safetensors")
  fetched = [r for u, r in requests if u == url]
  assert fetched[:2] == ["bytes=0-7", ranges["header"]] and sorted(fetched[2:]) == sorted([ranges["small"], ranges["mid"]]), fetched
  header = int(ranges["header"].rsplit("-", 1)[1]) + 1
  assert got["progress"][-1]["loaded"] == got["progress"][-1]["total"] == header + 7 + 400   # (not the 16 KiB tensor left out)
  # the same subset again: header and tensors come from the cache (after one HEAD request: the file has no digest)
  requests.clear()
  page.heads.clear()
  check_tensors(page.evaluate(LOAD_JS, [url, {"tensors": ["mid"]}])["tensors"], {"mid": subset["mid"]})
  assert [u for u, _ in requests if "e2e-data" in u] == [] and [(u, st) for u, st, _ in page.heads] == [(url, 304)]
  err = load_error(page, url, {"tensors": ["small", "nope"]})
  assert "no tensor named nope" in err and "big" in err, err

def test_tensors_by_name_from_shards_checked_per_tensor(weights, site):
  page, requests, _, _, subset = weights
  requests.clear()
  got = page.evaluate(LOAD_JS, [site.url + "e2e-data/parts.index.json", {"tensors": ["mid"], "cache": False}])
  check_tensors(got["tensors"], {"mid": subset["mid"]})
  ranges = data_ranges(site.data_dir / "part-2.safetensors")
  assert [(u.rsplit("/", 1)[1], r) for u, r in requests if "part-" in u] == \
    [("part-2.safetensors", "bytes=0-7"), ("part-2.safetensors", ranges["header"]), ("part-2.safetensors", ranges["mid"])]
  err = load_error(page, site.url + "e2e-data/parts-bad.index.json", {"tensors": ["mid"], "cache": False})
  assert "part-2.safetensors (tensor mid)" in err and "sha256 mismatch" in err and "0" * 64 in err, err
  err = load_error(page, site.url + "e2e-data/parts.index.json", {"tensors": ["zz"]})
  assert "parts.index.json" in err and "no tensor named zz" in err, err

def test_tensors_by_name_of_a_file_with_only_its_whole_sha256_fetch_it_whole(weights, site):
  # model.index.json gives each file's sha256 but no tensor_sha256: the shard is fetched whole (and checked), the other not
  page, requests, _, shard_tensors, _ = weights
  requests.clear()
  got = page.evaluate(LOAD_JS, [site.url + "e2e-data/model.index.json", {"tensors": ["c"], "cache": False}])
  check_tensors(got["tensors"], {"c": shard_tensors["c"]})
  ranges = data_ranges(site.data_dir / "model-2.safetensors")
  assert [(u.rsplit("/", 1)[1], r) for u, r in requests if "model-" in u] == \
    [("model-2.safetensors", "bytes=0-7"), ("model-2.safetensors", ranges["header"]), ("model-2.safetensors", ranges["data"])]

def test_tensors_by_name_are_all_the_server_sends(weights, site):
  # counted by the site's server (tinyweb.serve, in this process): a subset costs the 8-byte length, the JSON header and
  # the requested tensors' bytes, nothing more; the whole file costs its size
  page, _, _, _, subset = weights
  name = "counted.safetensors"
  raw = write(site, name, subset)
  header = 8 + int.from_bytes(raw[:8], "little")
  sent = lambda: site.server.bytes_sent[f"/e2e-data/{name}"]
  before = sent()
  got = page.evaluate(LOAD_JS, [site.url + "e2e-data/" + name, {"tensors": ["small", "mid"], "cache": False}])
  check_tensors(got["tensors"], {k: subset[k] for k in ("small", "mid")})
  assert sent() - before == header + subset["small"].nbytes + subset["mid"].nbytes   # (not the 16 KiB of "big")
  before = sent()
  check_tensors(page.evaluate(LOAD_JS, [site.url + "e2e-data/" + name, {"cache": False}])["tensors"], subset)
  assert sent() - before == len(raw)

def test_progress_total_is_what_the_load_reads_on_every_path(weights, site):
  # one meaning of `total` (and of the last `loaded`): the bytes of the file this load reads, counted here by the server
  # that sent them: a whole file with Range requests, a subset, a server without Range support (the whole file), and
  # the same again from the cache (then no byte is sent: the total is what was read from the Cache API)
  page, _, _, _, subset = weights
  name = "progress.safetensors"
  raw = write(site, name, subset)
  header = 8 + int.from_bytes(raw[:8], "little")
  sent = lambda: site.server.bytes_sent[f"/e2e-data/{name}"]
  cases = [({}, "", len(raw)), ({"tensors": ["small", "mid"]}, "", header + 7 + 400), ({}, "?norange", len(raw)),
           ({"tensors": ["mid"]}, "?norange", len(raw))]
  for options, query, want in cases:
    before = sent()
    last = page.evaluate(LOAD_JS, [site.url + "e2e-data/" + name + query, {**options, "cache": False}])["progress"][-1]
    assert last == {"url": site.url + "e2e-data/" + name + query, "loaded": want, "total": want, "cached": False}, (options, query, last)
    assert sent() - before == want, (options, query)
  page.evaluate(LOAD_JS, [site.url + "e2e-data/" + name, {"tensors": ["small"]}])   # (into the cache: header and "small")
  before = sent()
  last = page.evaluate(LOAD_JS, [site.url + "e2e-data/" + name, {"tensors": ["small"]}])["progress"][-1]
  assert last["cached"] and last["loaded"] == last["total"] == header + 7 and sent() == before

def test_a_file_without_a_digest_is_revalidated_before_use(weights, site):
  # cached, then changed on the server under the same URL: the next load asks with If-Modified-Since (the
  # Last-Modified tinyweb.serve sent), gets 200 instead of 304, drops the cached copy and downloads the new file
  page = weights[0]
  name, url = "changing.safetensors", site.url + "e2e-data/changing.safetensors"
  path, t0 = site.data_dir / name, int(time.time()) - 100
  old, new = {"w": np.arange(6, dtype=np.float32)}, {"w": np.arange(6, dtype=np.float32) * -3}
  write(site, name, old)
  os.utime(path, (t0, t0))
  check_tensors(page.evaluate(LOAD_JS, [url, {}])["tensors"], old)
  page.heads.clear()
  check_tensors(page.evaluate(LOAD_JS, [url, {}])["tensors"], old)
  assert page.heads == [(url, 304, email.utils.formatdate(t0, usegmt=True))]
  write(site, name, new)   # (the same size: only the validators tell)
  os.utime(path, (t0 + 50, t0 + 50))
  page.heads.clear()
  got = page.evaluate(LOAD_JS, [url, {}])
  check_tensors(got["tensors"], new)
  assert page.heads == [(url, 200, email.utils.formatdate(t0, usegmt=True))] and not got["progress"][-1]["cached"]
  page.heads.clear()
  check_tensors(page.evaluate(LOAD_JS, [url, {}])["tensors"], new)   # the new copy is cached, with the new date
  assert page.heads == [(url, 304, email.utils.formatdate(t0 + 50, usegmt=True))]
