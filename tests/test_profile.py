"""PROFILE and PROGRESS (issue 21). PROFILE: the Chrome trace of a realized graph (tinyweb/profile.py) holds the kernels
the engine built for it (their names read from the engine's kernel cache, not from the profile) as runs on the device's
track, in order and not overlapping, with the host's schedule, lowering and compile work; the summary counts every
launch; PROFILE=1 writes the trace at exit and prints the table; BEAM search shows as spans. PROGRESS: BEAM search's line
on stderr, fetch's progress, cache and sha256 check against a local server, and export's progress lines."""
import collections, hashlib, json, os, random, re, subprocess, sys, textwrap, threading, types
import numpy as np
import pytest
from tinyweb import Tensor, Device, Context, TinyJit, engine, search
from tinyweb.helpers import fetch
from tinyweb.profile import profiling
from tinyweb.schedule import create_schedule
from tinyweb.serve import StaticServer, StaticHandler
import tinyweb.events as events

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

@pytest.fixture
def cold(tmp_path, monkeypatch):
  """Empty disk caches (lowered kernels, compiled binaries, BEAM results) and BEAM's memory cache."""
  monkeypatch.setenv("TINYWEB_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.setattr(search, "_memory_cache", {})

def _run(code: str, cache, **env) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": REPO, "TINYWEB_CACHE_DIR": str(cache), **env}
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, cwd=REPO, env=env, timeout=300)
  out.stdout, out.stderr = out.stdout.decode(), out.stderr.decode()   # (not text=True, which reads a "\r" as a new line)
  assert out.returncode == 0, out.stderr
  return out

def _graph(x: Tensor, w: Tensor, k: float) -> list[Tensor]:
  """matmul, relu and sum: two kernels (the relu'd product is an output too)."""
  h = (x @ w * k).relu()
  return [h, h.sum()]

def _kernels_of(outs: list[Tensor]) -> list:
  """The kernel items the engine will run for outs."""
  items, _, _ = create_schedule([t.uop for t in outs])
  return [it for it in items if it.kind == "kernel"]

def _events(trace: dict, ph: str) -> list[dict]: return [e for e in trace["traceEvents"] if e["ph"] == ph]

def _pid(trace: dict, process: str) -> int:
  return next(e["pid"] for e in _events(trace, "M") if e["name"] == "process_name" and e["args"]["name"] == process)

@pytest.mark.parametrize("device", ["CPU", "WEBGPU"])
def test_trace_and_summary_of_a_realized_graph(device, tmp_path, cold):
  if not (ok := Device.check(device))[0]: pytest.skip(f"{device} unavailable: {ok[1]}")
  rng = np.random.default_rng(0)
  inputs = [(Tensor(rng.standard_normal((16, 32), dtype=np.float32), device=device).realize(),
             Tensor(rng.standard_normal((32, 8), dtype=np.float32), device=device).realize()) for _ in range(3)]
  k = 1 + random.random()   # (a constant of this run's own: new kernels, lowered and compiled in the block)
  path = tmp_path / "trace.json"
  with profiling(path=str(path)) as prof:
    for x, w in inputs:   # the same kernels on other buffers: launched 3 times each
      outs = _graph(x, w, k)
      items = _kernels_of(outs)
      Tensor.realize_all(*outs)
  built = [engine._kernel_cache[engine.kernel_key(device, it.ast)].program for it in items]
  names = [p.name for p in built]
  assert len(set(names)) == len(names) >= 2

  trace = json.loads(path.read_text())
  assert trace["displayTimeUnit"] == "ms" and isinstance(trace["traceEvents"], list)
  for e in trace["traceEvents"]:
    assert e["ph"] in ("X", "M") and isinstance(e["name"], str) and isinstance(e["pid"], int) and isinstance(e["tid"], int)
    if e["ph"] == "X": assert isinstance(e["ts"], float | int) and isinstance(e["dur"], float | int) and e["dur"] >= 0
  host = _pid(trace, "host")
  threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in _events(trace, "M") if e["name"] == "thread_name"}
  assert all(key in threads for key in {(e["pid"], e["tid"]) for e in _events(trace, "X")})   # every track is named

  runs = [e for e in _events(trace, "X") if e["pid"] == _pid(trace, device)]
  assert collections.Counter(e["name"] for e in runs) == {n: 3 for n in names}
  assert {threads[(e["pid"], e["tid"])] for e in runs} == {"kernels"}
  for a, b in zip(runs, runs[1:]): assert a["ts"] + a["dur"] <= b["ts"] + 1e-6   # in order, not overlapping
  assert all(e["dur"] > 0 for e in runs)
  for p in built:
    run = next(e for e in runs if e["name"] == p.name)
    assert run["args"]["global_shape"] == list(p.global_shape) and run["args"]["flops"] == p.flops
    assert run["args"]["bytes"] == p.mem_estimate

  spans = [e for e in _events(trace, "X") if e["pid"] == host]
  assert sum(e["cat"] == "schedule" for e in spans) == 3 and sum(e["cat"] == "realize" for e in spans) == 3
  assert {e["name"] for e in spans if e["cat"] == "lower" and not e["args"]["cached"]} == set(names)   # cold: lowered here
  compiled = [e for e in spans if e["cat"] == "compile"]
  assert set(names) <= {n for e in compiled for n in e["args"]["kernels"]}
  assert all(threads[(host, e["tid"])].startswith("compile") for e in compiled)
  assert collections.Counter(e["name"] for e in spans if e["cat"] == "launch") == {n: 3 for n in names}

  stats = {s.name: s for s in prof.kernel_stats() if s.device == device}
  assert {n: s.launches for n, s in stats.items()} == {n: 3 for n in names}
  for p in built: assert stats[p.name].flops == 3 * p.flops and stats[p.name].total_s > 0
  table = prof.summary()
  for n in names: assert re.search(rf"^{n} +{device} +3 ", table, re.M), table
  assert re.search(rf"^total \({len(names)} kernels\) +{3 * len(names)} ", table, re.M), table
  assert re.search(r"^host: schedule [\d.]+ ms \(3\), lower [\d.]+ ms \(\d+\), compile [\d.]+ ms \(\d+\)", table, re.M), table

def test_tinyjit_replays_are_profiled():
  w = Tensor(np.ones((8, 8), np.float32)).realize()
  jit = TinyJit(lambda x: ((x @ w).relu() + x).sum(0))
  xs = [Tensor(np.full((8, 8), i, np.float32)).realize() for i in range(4)]
  with profiling() as prof:
    for x in xs: jit(x).numpy()
  names = collections.Counter(k.program.name for k, _ in jit.launches if k is not None)   # (the capture's kernels)
  stats = {s.name: s for s in prof.kernel_stats()}
  assert names and {n: stats[n].launches for n in names} == {n: 4 * c for n, c in names.items()}   # replays included
  assert all(stats[n].total_s > 0 for n in names)

def test_the_summary_lists_the_kernels_with_most_time_first():
  with profiling() as prof: pass
  def launch(name: str, ms: float):
    program = types.SimpleNamespace(name=name, global_shape=(4,), flops=8_000_000, mem_estimate=0)
    prof("launch", {"device": "CPU", "kernel": types.SimpleNamespace(program=program), "bufs": [], "start": 0.0, "end": 1.0, "kernel_s": ms / 1e3})
  for i in range(25): launch(f"k{i}", i + 1)
  launch("k0", 0.5)
  table = prof.summary(top=20).splitlines()
  assert [ln.split()[0] for ln in table[1:21]] == [f"k{i}" for i in range(24, 4, -1)]
  assert re.match(r"k24 +CPU +1 +25\.000 +25\.000 +7\.7 +0\.32$", table[1]), table   # 25 of 325.5 ms, 8 MFLOP in 25 ms
  assert table[21] == "... 5 more kernels" and re.match(r"k0 +CPU +2 +1\.500 +0\.750 ", prof.summary(top=26).splitlines()[25])
  assert re.match(r"total \(25 kernels\) +26 +325\.500 +100\.0 +0\.64$", table[22]), table
  assert table[23] == "host: no scheduling, lowering or compiling"

def test_profile_env_writes_the_trace_at_exit_and_prints_the_table(tmp_path):
  path = tmp_path / "trace.json"
  out = _run("""
    import numpy as np
    from tinyweb import Tensor, engine
    from tinyweb.schedule import create_schedule
    x = Tensor(np.ones((8, 8), np.float32)).realize()
    outs = [(x @ x).relu().sum(), (x + 1).exp2()]
    items, _, _ = create_schedule([t.uop for t in outs])
    for t in outs: t.realize()
    print("KERNELS", *[engine._kernel_cache[engine.kernel_key("CPU", it.ast)].program.name for it in items if it.kind == "kernel"])
  """, tmp_path / "cache", PROFILE="1", PROFILE_PATH=str(path), DEV="CPU")   # (DEV: not a device another test chose)
  names = out.stdout.split("KERNELS")[1].split()
  assert len(names) == 2 and f"PROFILE: trace written to {path}" in out.stderr
  assert re.search(r"^kernel +device +launches +total ms +mean ms +% +GFLOP/s$", out.stderr, re.M), out.stderr
  for n in names: assert re.search(rf"^{n} +CPU +1 ", out.stderr, re.M), out.stderr
  assert sorted(e["name"] for e in json.loads(path.read_text())["traceEvents"] if e.get("cat") == "kernel") == sorted(names)

def test_cpu_profile_under_context_profile_writes_at_exit(tmp_path):
  path = tmp_path / "trace.json"
  out = _run("""
    from tinyweb.helpers import Context, cpu_profile
    with cpu_profile("before"): pass
    with Context(PROFILE=1):
      with cpu_profile("load", "DISK"): pass
  """, tmp_path / "cache", PROFILE="0", PROFILE_PATH=str(path))
  assert f"PROFILE: trace written to {path}" in out.stderr
  assert [e["name"] for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"] == ["load"]

BEAM_CODE = """
  import numpy as np
  from tinyweb import Tensor
  print(Tensor(np.ones((16, 32), np.float32)).sum(1).numpy()[0])
"""

def test_beam_progress_on_stderr(tmp_path):
  err = _run(BEAM_CODE, tmp_path / "on", BEAM="1", PROGRESS="1").stderr
  lines = err.split("\r")
  assert any(re.match(r"BEAM r_16 round 0(, best [\d.]+ ms)?: +\d+%\|.*\| [012]/2 \[", ln) for ln in lines), err
  # the search's last round, drawn when it ends: all its candidates timed or dropped, and the best time
  assert re.match(r"BEAM r_16 round [1-9]\d*, best \d+\.\d{3} ms: +100%\|.*\| (\d+)/\1 \[.* candidates/s\]\n", lines[-1]), err
  assert _run(BEAM_CODE, tmp_path / "off", BEAM="1", PROGRESS="0").stderr == ""   # (a cold cache again: it searches)

def test_beam_search_reports_its_progress_and_shows_as_spans(cold):
  x = Tensor(np.ones((8, 64), np.float32)).realize()
  seen = []
  with profiling() as prof, events.watching(lambda e, f: seen.append(dict(f)) if e == "beam" else None), Context(BEAM=1):
    x.sum(1).realize()
  res = next(iter(search._memory_cache.values()))
  *progress, last = seen
  assert last["done"] and not any(f["done"] for f in progress)
  assert last["searched"] == res.candidates and last["round"] == max(f["round"] for f in progress)
  bests = [f["best_s"] for f in progress if f["best_s"] is not None]   # (the fastest of all timed: the search's choice or faster)
  assert bests == sorted(bests, reverse=True) and last["best_s"] == bests[-1] <= res.time_s
  for r in range(last["round"] + 1):   # each round counts its candidates one by one, to all of them
    counts = [f["searched"] for f in progress if f["round"] == r]
    assert counts == list(range(1, len(counts) + 1)) and counts[-1] == next(f["candidates"] for f in progress if f["round"] == r)
  assert last["candidates"] == sum(f["candidates"] for f in progress if f["searched"] == 1)
  json.dumps(trace := prof.trace(), allow_nan=False)   # (strict JSON: a best time not known yet is null)
  spans = [e for e in trace["traceEvents"] if e.get("cat") == "beam"]
  whole = next(e for e in spans if e["name"] == f"BEAM {last['name']}")
  rounds = sorted((e for e in spans if e is not whole), key=lambda e: e["ts"])
  assert [e["name"] for e in rounds] == [f"round {r}" for r in range(last["round"] + 1)]
  assert all(whole["ts"] <= e["ts"] and e["ts"] + e["dur"] <= whole["ts"] + whole["dur"] + 1e-3 for e in rounds)

# ---- fetch: progress, the cache and sha256, against a local server that counts its requests

class CountingHandler(StaticHandler):
  def send_head(self):
    self.server.requests[self.path] += 1
    return super().send_head()

@pytest.fixture
def site(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYWEB_CACHE_DIR", str(tmp_path / "cache"))
  (root := tmp_path / "site").mkdir()
  (root / "w.bin").write_bytes(data := random.Random(0).randbytes(300_000))
  server = StaticServer(root, port=0, quiet=True, handler=CountingHandler)
  server.requests = collections.Counter()
  threading.Thread(target=server.serve_forever, daemon=True).start()
  yield server, data, tmp_path / "cache" / "downloads"
  server.shutdown()
  server.server_close()

def test_fetch_shows_progress_checks_sha256_and_caches(site, capsys):
  server, data, downloads = site
  url, digest = server.url + "w.bin", hashlib.sha256(data).hexdigest()
  with Context(PROGRESS=1): path = fetch(url, sha256=digest)
  assert path.read_bytes() == data and path.parent == downloads and server.requests["/w.bin"] == 1
  assert re.search(r"100%\|.*\| 300k/300k \[", capsys.readouterr().err)
  with Context(PROGRESS=1): assert fetch(url, sha256=digest) == path   # a cache hit: no request, no progress
  assert server.requests["/w.bin"] == 1 and capsys.readouterr().err == ""
  with Context(PROGRESS=0): fetch(url, name="again")
  assert server.requests["/w.bin"] == 2 and capsys.readouterr().err == ""
  with pytest.raises(OSError, match=rf"fetch: {re.escape(url)} has sha256 {digest}, expected 0{{64}}: not stored"):
    fetch(url, name="bad", sha256="0" * 64)
  assert sorted(os.listdir(downloads)) == sorted([path.name, "again"])   # nothing of the bad download is left

def test_export_shows_its_progress(tmp_path, capsys, cold):
  if not (ok := Device.check("WEBGPU"))[0]: pytest.skip(f"WEBGPU unavailable: {ok[1]}")
  from tinyweb.export import export
  from tinyweb.nn import Linear
  from tinyweb.nn.state import get_state_dict
  layer = Linear(8, 4, device="WEBGPU")
  with Context(PROGRESS=1):
    k = 1 + random.random()   # (kernels of this run's own: lowered in the export)
    manifest = export(lambda x: layer(x).relu() * k, Tensor.ones(2, 8, device="WEBGPU").contiguous().realize(), path=tmp_path,
                      state_dict=get_state_dict(layer))
  err = capsys.readouterr().err
  lowered = [int(n) for n in re.findall(r"export: capturing: (\d+) kernels \[", err)]
  assert lowered and lowered[-1] >= len(manifest["kernels"]) and err.count("\n") >= 2
  nbytes = sum(4 * np.prod(t.shape) for t in get_state_dict(layer).values())
  assert re.search(rf"export: writing weights: 100%\|.*\| {nbytes}/{nbytes} \[", err), err
