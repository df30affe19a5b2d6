"""tinyweb against numpy, torch (CPU, 2 threads) and tinygrad 0.14 (DEV=CPU): one table, all timed in the same run.

  python -m bench                  # every workload (about 3 minutes on a quiet 2-core machine)
  python -m bench --quick          # smaller sizes, fewer repeats
  python -m bench --only matmul    # the rows whose name contains 'matmul' (comma-separated list allowed)
  python -m bench --beam 2         # also tinyweb with BEAM=2, a row per workload (searches are cached: run it twice)

Each cell runs in its own worker process (`python -m bench --worker FW ...`), workload by workload, so the four
frameworks are timed close together in time and their imports, environment and caches stay apart. A cell is the
median of repeated runs after warm-up (bench/workloads.py says what one run is). Ratios are peer time / tinyweb
time: above 1 means tinyweb is faster. 'CNN step cold start' is the first two calls of a new jitted CNN step (schedule, codegen,
compile, JIT capture) with an empty kernel cache (tinyweb: a fresh TINYWEB_CACHE_DIR; tinygrad: CACHELEVEL=0).
WEBGPU rows (when tinyweb's WEBGPU device is available) compare with the peers' CPU times of the row above.
The multi-threaded peers (numpy's OpenBLAS, torch) slow down many times over when another process keeps a core busy:
read the load average printed under the table."""
from __future__ import annotations
import argparse, json, os, subprocess, sys, tempfile, time

FWS = ("tinyweb", "numpy", "torch", "tinygrad")
M = 1 << 20
WEBGPU_MAX_MATMUL = 1024   # lavapipe (Vulkan on the CPU) takes ~12 s for a 1024^3 matmul: 2048 would take minutes a run

def rows(quick: bool) -> list[dict]:
  """key (the worker's workload), label and desc (the table's), size (passed to the worker), work: (FLOPs or bytes,
  unit) for the tinyweb rate column; bytes are the least traffic: inputs read once, the output written once."""
  mm = (256, 512, 1024) if quick else (256, 1024, 2048)
  ew, sm, cx = (1 * M, 4 * M, (4, 64, 28, 28)) if quick else (4 * M, 16 * M, (16, 64, 56, 56))
  sx = (1024, 1024) if quick else (4096, 1024)
  n, c, h, w = cx
  out = [dict(key=f"matmul{k}", label=f"matmul {k}", desc=f"{k}^3 f32", size={"n": k}, work=(2 * k ** 3, "GFLOP/s")) for k in mm]
  out += [dict(key="elementwise", label="elementwise chain", desc=f"8 ops, {ew // M}M f32", size={"n": ew}, work=(12 * ew, "GB/s")),
          dict(key="sum", label="sum", desc=f"{sm // M}M f32", size={"n": sm}, work=(4 * sm, "GB/s")),
          dict(key="conv", label="conv2d 3x3 pad 1", desc=f"x{'x'.join(map(str, cx))} w64x64x3x3", size={"x": cx, "w": (64, 64, 3, 3)},
               work=(2 * n * 64 * h * w * c * 9, "GFLOP/s")),
          dict(key="softmax", label="softmax(-1)", desc=f"{sx[0]}x{sx[1]} f32", size={"x": sx}, work=(8 * sx[0] * sx[1], "GB/s")),
          *[dict(key="gather", label=f"gather {k} rows", desc="x[idx], 60000x784 f32 table", size={"rows": k},
                 work=(2 * 4 * 784 * k, "GB/s")) for k in (128, 4096)],
          dict(key="mlp", label="MLP train step", desc="784-128-10 SGD bs128", size={"bs": 128}, work=None),
          dict(key="cnn", label="CNN train step", desc="2conv-pool-fc Adam bs64", size={"bs": 64}, work=None),
          dict(key="cnn_cold", label="CNN step cold start", desc="first 2 jitted calls", size={"bs": 64}, work=None)]
  return out

def run_cell(fw: str, row: dict, a, device: str | None = None, beam: int = 0) -> dict:
  env = {**os.environ}
  if fw == "tinygrad": env["DEV"] = "CPU"
  if beam: env["BEAM"] = str(beam)
  with tempfile.TemporaryDirectory(prefix="bench-cache-") as cache:
    if row["key"] == "cnn_cold": env.update(TINYWEB_CACHE_DIR=cache, CACHELEVEL="0", DISABLE_COMPILER_CACHE="1")
    cmd = [sys.executable, "-m", "bench", "--worker", fw, "--key", row["key"], "--size", json.dumps(row["size"]),
           "--reps", str(a.reps), "--budget", str(a.budget)] + (["--device", device] if device else [])
    st = time.perf_counter()
    try:
      p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    except subprocess.TimeoutExpired: return {"error": f"timed out after {a.timeout} s"}
  lines = p.stdout.strip().splitlines()
  if p.returncode != 0 or not lines:
    err = (p.stderr.strip().splitlines() or [f"exit code {p.returncode}"])[-1]
    return {"error": err[:200]}
  r = json.loads(lines[-1])
  print(f"  {fw:9} {row['label']}{' [' + device + ']' if device else ''}{f' [BEAM={beam}]' if beam else ''}: {r.get('ms', 0):.3f} ms over {r.get('runs')} runs "
        f"({time.perf_counter() - st:.1f} s with start-up)", file=sys.stderr)
  return r

def fmt_ms(ms: float) -> str: return f"{ms / 1e3:.2f} s" if ms >= 10_000 else f"{ms:.3g} ms" if ms < 100 else f"{ms:.0f} ms"

def table(results: list[tuple[dict, str | None, dict]], webgpu: str, load: tuple, copy: dict | None, elapsed: float) -> str:
  head = f"{'workload':28} {'size':24} {'tinyweb':>9} {'rate':>13} | " + " | ".join(f"{p:>17}" for p in FWS[1:])
  lines = [f"tinyweb vs peers, medians after warm-up; (x) = peer time / tinyweb time, above 1 = tinyweb faster", head, "-" * len(head)]
  errors = []
  for row, device, res in results:
    label = row["label"] + (f" [{device}]" if device else "")
    tw = res["tinyweb"]
    if "error" in tw: cell = f"{'failed':>9} {'':>13}"; errors.append(f"{label} / tinyweb: {tw['error']}")
    else:
      rate = f"{row['work'][0] / tw['ms'] / 1e6:.1f} {row['work'][1]}" if row["work"] else tw.get("detail", "")
      cell = f"{fmt_ms(tw['ms']):>9} {rate:>13}"
    peers = []
    for fw in FWS[1:]:
      r = res.get(fw)
      if r is None or "error" in r:
        peers.append(f"{'-' if r is None or 'no numpy version' in r['error'] else 'failed':>17}")
        if r is not None and "no numpy version" not in r["error"]: errors.append(f"{label} / {fw}: {r['error']}")
      else:
        ratio = f"({r['ms'] / tw['ms']:.2f}x)" if "error" not in tw else ""
        peers.append(f"{fmt_ms(r['ms']):>9} {ratio:>7}")
    lines.append(f"{label:28} {row['desc']:24} {cell} | " + " | ".join(peers))
  for row, device, res in results:   # bandwidth of the elementwise chain vs a plain copy
    if row["key"] == "elementwise" and copy and "error" not in copy:
      nbytes = row["work"][0]
      bw = ", ".join(f"{fw} {nbytes / r['ms'] / 1e6:.1f}" for fw, r in res.items() if "error" not in r and (fw == "tinyweb" or not device))
      lines.append(f"elementwise{' [' + device + ']' if device else ''}: GB/s counting 2 reads + 1 write of {row['size']['n'] // M}M "
                   f"f32 ({nbytes / 1e6:.0f} MB): {bw}; reference numpy copyto of {row['size']['n'] // M}M f32 "
                   f"(read+write {8 * row['size']['n'] / 1e6:.0f} MB): {8 * row['size']['n'] / copy['ms'] / 1e6:.1f} GB/s")
  lines.append(f"tinyweb device: CPU{', ' + webgpu + f' (no WEBGPU matmul above {WEBGPU_MAX_MATMUL}: too slow)' if webgpu else ''}; "
               f"torch 2 threads; tinygrad DEV=CPU; "
               f"load average {load[0]:.2f} at start, {load[1]:.2f} at end; {elapsed:.0f} s in all")
  lines += [f"FAILED {e}" for e in errors]
  return "\n".join(lines)

def main():
  ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--quick", action="store_true", help="smaller sizes, fewer repeats")
  ap.add_argument("--only", help="only the rows whose key or name contains one of these (comma-separated)")
  ap.add_argument("--reps", type=int, help="most timed runs per cell (default 100, quick 10)")
  ap.add_argument("--budget", type=float, help="seconds of timed runs per cell (default 1, quick 0.3); at least 3 runs")
  ap.add_argument("--timeout", type=float, default=300, help="seconds before a worker is killed")
  ap.add_argument("--beam", type=int, default=0, help="also time tinyweb (CPU) with BEAM=N, a row per workload; the search "
                  "runs in the first warm-up run and is cached in tinyweb's cache dir (a cold search may need a larger --timeout)")
  ap.add_argument("--worker", choices=FWS, help=argparse.SUPPRESS)
  ap.add_argument("--key", help=argparse.SUPPRESS)
  ap.add_argument("--size", help=argparse.SUPPRESS)
  ap.add_argument("--device", help=argparse.SUPPRESS)
  a = ap.parse_args()
  a.reps = a.reps or (10 if a.quick else 100)
  a.budget = a.budget or (0.3 if a.quick else 1.0)
  if a.worker:   # one cell: print its result as the last stdout line
    from bench.workloads import run_worker
    print(json.dumps(run_worker(a.worker, a.key, json.loads(a.size), a.reps, a.budget, a.device)))
    return
  selected = [r for r in rows(a.quick)
              if not a.only or any(s.strip().lower() in (r["key"] + " " + r["label"]).lower() for s in a.only.split(","))]
  if not selected: ap.error(f"--only {a.only!r} matches no workload")
  from tinyweb import Device
  ok, why = Device.check("WEBGPU")
  webgpu = f"WEBGPU ({Device['WEBGPU'].info.get('device', '?')})" if ok else ""
  if not ok: print(f"no WEBGPU rows: {why}", file=sys.stderr)
  load0, st, results, copy = os.getloadavg()[0], time.perf_counter(), [], None
  for row in selected:
    print(f"{row['label']} ({row['desc']})", file=sys.stderr)
    res = {fw: run_cell(fw, row, a) for fw in FWS}
    results.append((row, None, res))
    if a.beam and row["key"] != "cnn_cold": results.append((row, f"BEAM={a.beam}", {"tinyweb": run_cell("tinyweb", row, a, beam=a.beam), **{fw: res[fw] for fw in FWS[1:]}}))
    if row["key"] == "elementwise": copy = run_cell("numpy", dict(row, key="copy", label="copy"), a)
    if ok and (row["key"] == "elementwise" or row["key"].startswith("matmul") and row["size"]["n"] <= WEBGPU_MAX_MATMUL):
      results.append((row, "WEBGPU", {"tinyweb": run_cell("tinyweb", row, a, "WEBGPU"), **{fw: res[fw] for fw in FWS[1:]}}))
  print(table(results, webgpu, (load0, os.getloadavg()[0]), copy, time.perf_counter() - st))

if __name__ == "__main__": main()
