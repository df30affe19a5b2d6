"""PROFILE=1: what the engine did, as a Chrome trace and a table of the kernels' device time.

With PROFILE=1 in the environment, importing tinyweb starts the process's profile (`start`): from then on every launch
waits for its kernel so that its device time is known (as DEBUG=2 does), and at exit the trace is written to
$PROFILE_PATH (default <tempdir>/tinyweb-profile-<pid>.json; open it in https://ui.perfetto.dev or chrome://tracing) and
its path and a summary of the kernels are printed to stderr. In code: `with profiling() as prof:`, then
`prof.write(path)`, `prof.summary()`, `prof.kernel_stats()`.

The trace is Chrome's trace-event "JSON Object Format": complete events ("X", times in microseconds from the profile's
start) on the tracks named by metadata events ("M"). A "host" process has a thread per kind of work the engine reports
(events.py: schedule, realize, lower, compile, launch, copy, beam; work done in another thread, such as the compile
pool's, on a thread of its own) and one per cpu_profile device; each device has a process whose "kernels" thread holds
its kernels' runs, named by kernel, with their global shape, FLOPs, bytes and GFLOP/s."""
from __future__ import annotations
import atexit, contextlib, json, os, sys, tempfile, threading, time
from dataclasses import dataclass
from typing import Iterator, Optional
import tinyweb.events as events

HOST = "host"
HOST_THREADS = ("schedule", "realize", "lower", "compile", "launch", "copy", "beam")   # (their order in the viewer)
SUMMED = ("schedule", "lower", "compile", "beam", "copy")   # the host work the summary totals
TOP = 20   # the kernels the summary lists

@dataclass
class Span:
  """A block of host work: its kind (the event), its thread in the trace, name, start and end (perf_counter seconds)."""
  kind: str
  thread: str
  name: str
  start: float
  end: float
  args: dict

@dataclass
class Launch:
  """A kernel launch: what the summary and the device's track show of it."""
  device: str
  name: str
  global_shape: tuple
  flops: int
  nbytes: int   # the kernel's estimate of the memory it moves
  end: float
  kernel_s: Optional[float]   # (None: the device did not time it)

@dataclass
class KernelStats:
  """One kernel name's launches on one device."""
  device: str
  name: str
  launches: int = 0
  total_s: float = 0.0
  flops: int = 0
  @property
  def mean_s(self) -> float: return self.total_s / self.launches
  @property
  def gflops(self) -> float: return self.flops / self.total_s / 1e9 if self.total_s else 0.0

def _thread(kind: str) -> str:
  """The trace thread of work of this kind done in the current thread: the kind's own in the main thread."""
  t = threading.current_thread()
  return kind if t is threading.main_thread() else f"{kind} ({t.name})"

def _kernels(items) -> dict: return {"items": len(items), "kernels": sum(it.kind == "kernel" for it in items)}

class Profile:
  """What the engine reported (events.py) while this watched it. A watcher: called from any thread."""
  def __init__(self):
    self.start = time.perf_counter()
    self.lock = threading.Lock()
    self.spans: list[Span] = []
    self.launches: list[Launch] = []
    self.rounds: dict[tuple, Span] = {}   # (device, round start) -> a BEAM round, as its latest progress event says

  def __call__(self, event: str, f: dict):
    if event == "beam": return self._beam(f)
    thread = f["device"] if event == "cpu" else _thread(event)   # (cpu_profile's blocks: on a thread named by their device)
    if event == "launch":
      p = f["kernel"].program
      with self.lock: self.launches.append(Launch(f["device"], p.name, tuple(p.global_shape), p.flops, p.mem_estimate, f["end"], f["kernel_s"]))
      name, args = p.name, {"device": f["device"]}
    elif event in ("schedule", "realize"): name, args = event, _kernels(f["items"])
    elif event == "lower": name, args = f["program"].name, {"device": f["device"], "cached": f["cached"]}
    elif event == "compile":
      names = f["names"]
      name, args = names[0] if len(names) == 1 else f"{len(names)} kernels", {"device": f["device"], "kernels": names}
    elif event == "copy": name, args = f"copy {f['src_device']} -> {f['device']}", {"bytes": f["nbytes"]}
    elif event == "cpu": name, args = f["name"], {}
    else: return   # (an event this profile does not show)
    with self.lock: self.spans.append(Span(event, thread, name, f["start"], f["end"], args))

  def _beam(self, f: dict):
    """A BEAM search's progress: each round a span (the round's latest event has its extent), and the search one when done."""
    args = {"device": f["device"], "searched": f["searched"], "candidates": f["candidates"],
            "best_ms": None if f["best_s"] is None else f["best_s"] * 1e3}
    with self.lock:
      if f["done"]: self.spans.append(Span("beam", _thread("beam"), f"BEAM {f['name']}", f["start"], f["end"], {**args, "rounds": f["round"]}))
      else: self.rounds[(f["device"], f["start"])] = Span("beam", _thread("beam"), f"round {f['round']}", f["start"], f["end"], args)

  # ---- the trace

  def device_runs(self) -> dict[str, list[tuple[int, int, Launch]]]:
    """Each device's kernel runs in order, as (start, end) in nanoseconds from the profile's start: a kernel's device time
    ends where its launch ended (the launch waited for it), moved later where it would overlap the run before."""
    runs: dict[str, list] = {}
    with self.lock: launches = sorted(self.launches, key=lambda l: l.end)
    for l in launches:
      if l.kernel_s is None: continue
      mine, dur = runs.setdefault(l.device, []), round(l.kernel_s * 1e9)
      st = max(round((l.end - self.start) * 1e9) - dur, mine[-1][1] if mine else 0)
      mine.append((st, st + dur, l))
    return runs

  def trace(self) -> dict:
    """The Chrome trace: {"traceEvents": [...], "displayTimeUnit": "ms"}."""
    tracks: dict[str, dict[str, int]] = {HOST: {}}   # process -> thread -> tid (a process's pid: its place here, from 1)
    def where(process: str, thread: str) -> dict:
      threads = tracks.setdefault(process, {})
      return {"pid": list(tracks).index(process) + 1, "tid": threads.setdefault(thread, len(threads) + 1)}
    out = []
    with self.lock: spans = sorted(self.spans + list(self.rounds.values()), key=lambda s: s.start)
    for s in spans:
      out.append({"name": s.name, "cat": s.kind, "ph": "X", "ts": round((s.start - self.start) * 1e6, 3), "dur": round((s.end - s.start) * 1e6, 3),
                  **where(HOST, s.thread), "args": s.args})
    for device, runs in self.device_runs().items():
      for st, en, l in runs:
        out.append({"name": l.name, "cat": "kernel", "ph": "X", "ts": st / 1e3, "dur": (en - st) / 1e3, **where(device, "kernels"),
                    "args": {"global_shape": list(l.global_shape), "flops": l.flops, "bytes": l.nbytes,
                             "GFLOP/s": round(l.flops / max(en - st, 1), 3), "GB/s": round(l.nbytes / max(en - st, 1), 3)}})
    meta = []
    for pid, (process, threads) in enumerate(tracks.items(), 1):
      meta += [{"name": "process_name", "ph": "M", "pid": pid, "tid": 0, "args": {"name": process}},
               {"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0, "args": {"sort_index": pid}}]
      for thread, tid in threads.items():
        kind = thread.split(" (")[0]
        meta += [{"name": "thread_name", "ph": "M", "pid": pid, "tid": tid, "args": {"name": thread}},
                 {"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                  "args": {"sort_index": HOST_THREADS.index(kind) if kind in HOST_THREADS else len(HOST_THREADS) + tid}}]
    return {"traceEvents": meta + out, "displayTimeUnit": "ms"}

  def write(self, path: str) -> str:
    with open(path, "w") as f: json.dump(self.trace(), f)
    return path

  # ---- the summary

  def kernel_stats(self) -> list[KernelStats]:
    """Per kernel name and device: launches, device time and FLOPs; the most time first."""
    stats: dict[tuple[str, str], KernelStats] = {}
    with self.lock: launches = list(self.launches)
    for l in launches:
      s = stats.setdefault((l.device, l.name), KernelStats(l.device, l.name))
      s.launches, s.total_s, s.flops = s.launches + 1, s.total_s + (l.kernel_s or 0.0), s.flops + l.flops
    return sorted(stats.values(), key=lambda s: -s.total_s)

  def host_totals(self) -> dict[str, tuple[int, float]]:
    """Per kind of host work: (how many, seconds summed over threads)."""
    totals: dict[str, tuple[int, float]] = {}
    with self.lock: spans = list(self.spans)
    for s in spans:
      n, t = totals.get(s.kind, (0, 0.0))
      totals[s.kind] = (n + 1, t + s.end - s.start)
    return totals

  def summary(self, top: int = TOP) -> str:
    """A table of the kernels (the `top` that took most device time) with a totals line, then the host work's totals."""
    host = self.host_totals()
    host_line = "host: " + (", ".join(f"{kind} {host[kind][1] * 1e3:.1f} ms ({host[kind][0]})" for kind in SUMMED if kind in host)
                            or "no scheduling, lowering or compiling")
    if not (rows := self.kernel_stats()): return f"no kernels launched\n{host_line}"
    total_s, totals = sum(s.total_s for s in rows), f"total ({len(rows)} kernels)"
    w = max([len(s.name) for s in rows[:top]] + [len(totals)])
    dw = max([len(s.device) for s in rows[:top]] + [len("device")])
    def line(name, device, launches, total, mean, pct, gflops) -> str:
      return f"{name:<{w}}  {device:<{dw}}  {launches:>8}  {total:>10}  {mean:>9}  {pct:>6}  {gflops:>9}"
    out = [line("kernel", "device", "launches", "total ms", "mean ms", "%", "GFLOP/s")]
    for s in rows[:top]:
      out.append(line(s.name, s.device, s.launches, f"{s.total_s * 1e3:.3f}", f"{s.mean_s * 1e3:.3f}",
                      f"{100 * s.total_s / total_s:.1f}" if total_s else "-", f"{s.gflops:.2f}"))
    if len(rows) > top: out.append(f"... {len(rows) - top} more kernels")
    flops = sum(s.flops for s in rows)
    out.append(line(totals, "", sum(s.launches for s in rows), f"{total_s * 1e3:.3f}", "",
                    "100.0" if total_s else "-", f"{flops / total_s / 1e9:.2f}" if total_s else "-"))
    return "\n".join(out + [host_line])

@contextlib.contextmanager
def profiling(path: Optional[str] = None) -> Iterator[Profile]:
  """`with profiling() as prof:` records what the engine does in the block (each launch waits for its kernel, to time
  it); path: write the trace there when the block ends."""
  prof = Profile()
  try:
    with events.watching(prof, time_launches=True): yield prof
  finally:
    if path is not None: prof.write(path)

_process: Optional[Profile] = None
_process_lock = threading.Lock()

def start() -> Profile:
  """The process's profile, started once (tinyweb/__init__.py calls this at import where PROFILE=1; so does the first
  block cpu_profile keeps): written and summarized at exit."""
  global _process
  with _process_lock:
    if _process is None:
      stack = contextlib.ExitStack()
      _process = stack.enter_context(profiling())
      atexit.register(_finish, _process, stack)
  return _process

def default_path() -> str: return os.getenv("PROFILE_PATH") or os.path.join(tempfile.gettempdir(), f"tinyweb-profile-{os.getpid()}.json")

def _finish(prof: Profile, stack: contextlib.ExitStack):
  stack.close()
  path = prof.write(default_path())
  print(f"PROFILE: trace written to {path} (open it in https://ui.perfetto.dev)\n{prof.summary()}", file=sys.stderr)
