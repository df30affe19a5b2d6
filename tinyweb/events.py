"""What the engine is doing, for whoever watches: PROFILE (profile.py) and VIZ (viz.py) add a watcher to `watchers`.

A watcher is a callable `watcher(event: str, fields: dict)`. The engine calls it only while the list is not empty (each
hook is one truth test otherwise), from the thread doing the work (compiles of a cold schedule run in the compile pool's
threads), so a watcher keeps its own lock if it needs one. Times are time.perf_counter() seconds.

  event       fields
  "schedule"  targets (the UOps realized), items (the ScheduleItems made), start, end
  "realize"   items, start, end                                     (engine.run_schedule: compile, launch, copy)
  "lower"     device, ast, program (codegen.program.Program), src, cached (read back from the disk cache), start, end
  "compile"   device, names (the kernels compiled together), srcs, start, end   (compile and load)
  "launch"    device, kernel (CompiledKernel), bufs, start, end, kernel_s (the device's time for it where measured)
              (TinyJit's replays too: while a watcher is on, they launch through the reporting path)
  "copy"      src_device, device, nbytes, start, end
  "cpu"       name, device, start, end          (a block helpers.cpu_profile timed and kept: PROFILE was on)
  "beam"      device, ast, name, round, searched, candidates, best_s, start, end, done    (a BEAM search's progress)
              after each candidate of a round is timed or dropped (searched: how many of the round's `candidates` are
              done; start: the round's; best_s: the fastest time yet, None before the first), and once more at the end
              with done=True (round: the last; searched: the candidates timed in all; candidates: those tried; start:
              the search's)

`timing_launches` makes every launch wait for its kernel and report its time (as DEBUG>=2 does)."""
from __future__ import annotations
import contextlib

watchers: list = []
timing_launches = False

def emit(event: str, **fields):
  for watch in watchers: watch(event, fields)

@contextlib.contextmanager
def watching(watcher, time_launches: bool = False):
  """`with watching(fn):` calls fn for every event in the block (and with time_launches, times every kernel)."""
  global timing_launches
  watchers.append(watcher)
  old_timing, timing_launches = timing_launches, timing_launches or time_launches
  try: yield watcher
  finally:
    watchers.remove(watcher)
    timing_launches = old_timing
