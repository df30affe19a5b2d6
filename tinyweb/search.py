"""BEAM search: for a new kernel, time lists of optimization actions (codegen/opts.py `Opt`) on the device and keep
the fastest. Turned on by `BEAM=N` or `with Context(BEAM=N):`; NOOPT=1 wins over it.

Round 0 times the NOOPT kernel and the heuristics' choice. Each later round extends each of the N fastest lists of the
previous round by one action (`actions`), compiles and times the new candidates, and keeps the N fastest of them. The
search stops when a round brings nothing faster than the best so far (by MIN_PROGRESS); the best list wins, so the
result is never slower than the heuristics' choice as measured in the same search.

Every candidate runs on scratch buffers of the kernel's sizes filled with random values (never the user's buffers) and
its output must match the NOOPT kernel's: one that does not is dropped with a warning (that is a codegen bug). A tensor-core
candidate (Opt TC) sums exact products where the NOOPT kernel rounds each product to the 16-bit input type
(codegen/tensor_cores.py): it is held to that type's tolerance (`tolerance`).
Candidates that do not apply, fail to compile or exceed the device's limits are dropped quietly.

While it runs, one line on stderr per kernel shows the round, how many of its candidates are done (timed or dropped) and
the best time so far (where stderr is a terminal, or with PROGRESS=1; PROGRESS=0 never); watchers get "beam" events
(events.py).

Results are cached in memory and on disk (cache_dir()/beam/<hash>.json) keyed by the kernel AST, the device, its
renderer's configuration and compiler, the core count and N: a second run pays nothing. Compiles run in a thread pool
where threads exist, one after the other where they do not (Pyodide).
"""
from __future__ import annotations
import hashlib, json, math, os, random, struct, time, warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Optional
from tinyweb.device import Device, Buffer
from tinyweb.dtype import DType, dtypes
from tinyweb.helpers import DEBUG, cache_dir, prod, tqdm, write_cache_file
from tinyweb.uop import UOp, Ops
from tinyweb.codegen.program import CompiledKernel
from tinyweb.codegen.opts import Opt, OptError, apply_opts, reduce_loops
from tinyweb.codegen.heuristics import heuristic_opts
from tinyweb.codegen.lower import lower, noopt_opts
from tinyweb.codegen.tensor_cores import contraction
import tinyweb.events as events

SEARCH_VERSION = 4       # bump when the meaning of actions changes: cached results of older searches are ignored
MAX_UPCAST = 128         # most outputs one loop iteration computes (each needs a register)
VECTOR_MAX_UPCAST = 256  # the same where the renderer has vectors (ClangRenderer.vector_lanes: AVX-512 registers hold 16 floats)
MAX_UNROLL = 32          # most iterations one trip of the reduction loops does
MAX_BODY = 512           # upcast x unroll: the size of the loop body (lowering time in Python grows with it)
MIN_PROGRESS = (0.01, 5e-6)   # a round must beat the best time so far by this fraction and these seconds to go on
UPCAST_AMOUNTS, UNROLL_AMOUNTS, BLOCK_AMOUNTS, SPLIT_AMOUNTS = (2, 3, 4, 8, 16), (2, 4, 8, 16), (64, 128, 256, 512), (4, 8, 16, 32)
THREAD_AMOUNTS = (16, 32, 64, 128, 256)   # GPU: LOCAL and GROUP sizes
TILE_AMOUNTS = (2, 4, 8, 16)   # GPU: threads of a workgroup along one output axis
TIMED_RUNS = 3

class SearchCounters:
  """What BEAM search did since the last reset (tests count timings to see that the cache answered)."""
  searches = 0
  timings = 0   # timed kernel runs
  @staticmethod
  def reset(): SearchCounters.searches, SearchCounters.timings = 0, 0

@dataclass
class SearchResult:
  opts: list[Opt]
  time_s: float             # the chosen list's time, measured in the search
  heuristic_time_s: float   # the heuristics' choice, measured in the same search
  noopt_time_s: float
  candidates: int = 0       # candidates compiled and timed
  seconds: float = 0.0      # wall time of the search
  def to_json(self) -> dict:
    return {**self.__dict__, "opts": [[o.kind, o.axis, o.amount] for o in self.opts]}
  @staticmethod
  def from_json(d: dict) -> SearchResult: return SearchResult(**{**d, "opts": [Opt(*o) for o in d["opts"]]})

_memory_cache: dict[str, SearchResult] = {}

def actions(value: UOp, renderer) -> list[Opt]:
  """Every action the search may add to a list (many will not apply after the others: apply_opts sorts them out)."""
  shape, loops = value.shape, reduce_loops(value)
  out = [Opt("UPCAST", a, n) for a, s in enumerate(shape) if s > 1 for n in UPCAST_AMOUNTS if n < s]
  out += [Opt("UPCAST", a, s) for a, s in enumerate(shape) if 1 < s <= 32]
  out += [Opt("UNROLL", i, n) for i, (u, a) in enumerate(loops) for n in UNROLL_AMOUNTS if n < u.src[0].shape[a]]
  out += [Opt("UNROLL", i, u.src[0].shape[a]) for i, (u, a) in enumerate(loops) if u.src[0].shape[a] <= MAX_UNROLL]
  big = [a for a, s in enumerate(shape) if s > 1]
  out += [Opt("SWAP", a, b) for i, a in enumerate(big) for b in big[i + 1:]]
  if renderer.tensor_cores: out.append(Opt("TC", 0, 0))
  if renderer.has_threads:
    out += [Opt("LOCAL", 0, n) for n in THREAD_AMOUNTS if n <= renderer.max_local_size]
    if loops: out += [Opt("GROUP", 0, n) for n in THREAD_AMOUNTS if n <= renderer.max_local_size]
    out += [Opt("TILE", a, n) for a in big for n in TILE_AMOUNTS if n <= min(shape[a], renderer.max_local_size)]
  else:
    out += [Opt("BLOCK", i, n) for i, (u, a) in enumerate(loops) for n in BLOCK_AMOUNTS if n < u.src[0].shape[a]]
    out += [Opt("SPLIT", a, n) for a in big for n in SPLIT_AMOUNTS if n < shape[a]]
  return out

def within_limits(value: UOp, renderer, opts: list[Opt], out_buf: UOp) -> bool:
  """Applies, and keeps the loop body to a size the target compiles quickly and holds in registers."""
  try: ao = apply_opts(value, renderer, opts, out_buf)
  except OptError: return False
  up, un = prod(ao.upcasts.values()), prod(ao.unrolls.values())
  return up <= (VECTOR_MAX_UPCAST if renderer.vector_lanes else MAX_UPCAST) and un <= MAX_UNROLL and up * un <= MAX_BODY

# ---- scratch buffers: random inputs, and a comparison of outputs with a tolerance for reordered float arithmetic ----

PERIOD = 1021   # random values repeat with this (prime) period: fast to make, and not aligned with any tile
def random_bytes(dt: DType, n: int, seed: int) -> bytes:
  rng = random.Random(seed)
  if dt.is_bool: vals = [rng.random() < 0.5 for _ in range(PERIOD)]
  elif dt.is_int: vals = [rng.randrange(0, 8) for _ in range(PERIOD)]
  elif dt == dtypes.bfloat16: vals = [struct.unpack("<I", struct.pack("<f", rng.uniform(-1, 1)))[0] >> 16 for _ in range(PERIOD)]
  else: vals = [rng.uniform(-1, 1) for _ in range(PERIOD)]
  block = struct.pack(f"<{PERIOD}{dt.fmt}", *vals)
  return (block * (n // PERIOD + 1))[:n * dt.itemsize]

RTOL = {dtypes.float16: 1e-2, dtypes.bfloat16: 5e-2, dtypes.float32: 1e-3, dtypes.float64: 1e-9}
def as_floats(b: bytes, dt: DType) -> list[float]:
  if dt == dtypes.bfloat16: return list(memoryview(b"".join(struct.pack("<I", v << 16) for v in memoryview(b).cast("H"))).cast("f"))
  return list(memoryview(b).cast(dt.fmt))

def tolerance(value: UOp, renderer, opts: list[Opt], dt: DType) -> Optional[float]:
  """The relative tolerance for a candidate's float output of dtype `dt`: None (mismatches' default, RTOL[dt]), or for
  tensor cores, whose products are not rounded to the 16-bit input type as the reference's are, at least that type's."""
  if not any(o.kind == "TC" for o in opts): return None
  return max(RTOL.get(dt, 0.0), RTOL[contraction(value, renderer).dtype])

def mismatches(got: bytes, ref: bytes, dt: DType, rtol: Optional[float] = None) -> int:
  """How many elements differ: exactly for ints and bools; for floats by more than `rtol` (default RTOL[dt]) of the
  largest output (the candidates may sum in another order), with NaN equal to NaN."""
  if got == ref: return 0
  if not dt.is_float: return sum(a != b for a, b in zip(memoryview(got).cast(dt.fmt), memoryview(ref).cast(dt.fmt)))
  rtol = RTOL[dt] if rtol is None else rtol
  g, r = as_floats(got, dt), as_floats(ref, dt)
  try: import numpy as np   # optional: much faster on big outputs
  except ImportError: np = None
  if np is not None:
    g, r = np.array(g), np.array(r)
    tol = rtol * max(np.abs(r[np.isfinite(r)]).max(initial=0.0), 1.0)
    with np.errstate(invalid="ignore"): return int((~((g == r) | (np.abs(g - r) <= tol) | (np.isnan(g) & np.isnan(r)))).sum())
  tol = rtol * max([abs(x) for x in r if math.isfinite(x)] + [1.0])
  return sum(not (a == b or abs(a - b) <= tol or (a != a and b != b)) for a, b in zip(g, r))

def _compile_all(compiler, srcs: list[str]) -> list:
  """Each source's binary, or the exception compiling it raised. A compiler with `batch_sources` compiles them joined, in
  one chunk per core (a chunk that fails is compiled source by source); chunks or sources run in parallel threads where
  the platform has them."""
  cores = os.cpu_count() or 1
  parts = [srcs[i::cores] for i in range(cores)] if compiler.batch_sources else [[s] for s in srcs]
  try:
    with ThreadPoolExecutor(max_workers=cores) as pool: done = list(pool.map(compiler.compile_many, parts))
  except RuntimeError: done = [compiler.compile_many(p) for p in parts]   # no threads (Pyodide)
  libs = {id(s): lib for p, ls in zip(parts, done) for s, lib in zip(p, ls)}
  return [libs[id(s)] for s in srcs]

class Search:
  """One kernel's search state: scratch buffers, the reference output, every source timed so far, and its progress (a
  line on stderr and "beam" events: each candidate of a round is counted once, when it is timed or dropped)."""
  def __init__(self, ast: UOp, device: str):
    self.start = time.perf_counter()
    self.ast, self.device, self.dev = ast, device, Device[device]
    self.renderer = self.dev.renderer
    store = ast.src[0]
    self.out, self.value = store.src[0], store.src[1]
    self.globals = sorted([u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL], key=lambda u: u.arg[0])
    self.inputs = {g.arg[0]: random_bytes(g.dtype, g.arg[1], seed=g.arg[0]) for g in self.globals}
    # an output the kernel also reads (an in-place update) starts each run from its random contents; any other starts as
    # all ones bits (NaN for floats), so that an output a candidate forgets to write cannot keep the reference's value
    inplace = self.out in self.value.toposort()
    self.out_init = self.inputs[self.out.arg[0]] if inplace else b"\xff" * (self.out.arg[1] * self.out.dtype.itemsize)
    self.bufs = [Buffer(device, g.arg[1], g.dtype) for g in self.globals]
    for g, b in zip(self.globals, self.bufs): b.copyin(memoryview(self.inputs[g.arg[0]]))
    self.out_buf = self.bufs[[g.arg[0] for g in self.globals].index(self.out.arg[0])]
    self.seen: set[str] = set()
    self.timed = 0
    self.reference: Optional[bytes] = None
    self.name = ""   # the kernel's name, for DEBUG output and progress
    self.round, self.round_start, self.round_size, self.round_done, self.tried = -1, self.start, 0, 0, 0
    self.best_s: Optional[float] = None
    self.bar: Optional[tqdm] = None

  def start_round(self, candidates: int):
    self.round, self.round_start, self.round_size, self.round_done = self.round + 1, time.perf_counter(), candidates, 0
    self.tried += candidates
    if self.bar is None: self.bar = tqdm(desc=self.progress_text(), unit=" candidates", total=candidates, disable=None)
    else:
      self.bar.set_description(self.progress_text())
      self.bar.reset(candidates)

  def progress_text(self) -> str:
    return f"BEAM {self.name or 'kernel'} round {self.round}" + (f", best {self.best_s * 1e3:.3f} ms" if self.best_s is not None else "")

  def advance(self, t: Optional[float] = None):
    """One candidate of the round dropped, or timed at t seconds."""
    self.round_done += 1
    if t is not None: self.best_s = t if self.best_s is None else min(self.best_s, t)
    self.bar.set_description(self.progress_text())
    self.bar.update(1)
    if events.watchers: events.emit("beam", device=self.device, ast=self.ast, name=self.name, round=self.round, searched=self.round_done,
                                     candidates=self.round_size, best_s=self.best_s, start=self.round_start, end=time.perf_counter(), done=False)

  def finish(self):
    if self.bar is not None: self.bar.close()
    if events.watchers: events.emit("beam", device=self.device, ast=self.ast, name=self.name, round=self.round, searched=self.timed,
                                     candidates=self.tried, best_s=self.best_s, start=self.start, end=time.perf_counter(), done=True)

  def output(self, k: CompiledKernel) -> bytes:
    self.out_buf.copyin(memoryview(self.out_init))
    k.run([b.handle for b in self.bufs], wait=True)
    return bytes(self.out_buf.as_memoryview())

  def time(self, k: CompiledKernel, best: float) -> float:
    times = []
    for _ in range(TIMED_RUNS):
      times.append(k.run([b.handle for b in self.bufs], wait=True))
      SearchCounters.timings += 1
      if times[-1] > 2 * best or sum(times) > 1.0: break   # hopeless, or slow enough to be timed well once
    return min(times)

  def evaluate(self, candidates: list[list[Opt]], best: float = math.inf) -> list[tuple[float, list[Opt]]]:
    """Lower, render, compile, check and time the candidates whose source is new; (seconds, opts) of those that work."""
    progs = []
    for opts in candidates:
      try: p = lower(self.ast, self.renderer, opts)
      except OptError:   # does not apply
        self.advance()
        continue
      except RuntimeError as e:   # beyond the device's limits (LoopLimitError, too many workgroups)
        if DEBUG >= 3: print(f"BEAM: {opts} dropped: {e}")
        self.advance()
        continue
      if (src := self.renderer.render(p)) in self.seen:
        self.advance()
        continue
      self.seen.add(src)
      self.name = self.name or p.name
      p.name = f"{p.name}_beam{len(self.seen)}"   # a name of its own: candidates may be compiled into one binary
      progs.append((opts, p, self.renderer.render(p)))
    out = []
    for (opts, p, src), lib in zip(progs, _compile_all(self.dev.compiler, [src for _, _, src in progs])):
      try:
        if isinstance(lib, Exception): raise lib
        k = CompiledKernel(p, self.dev.program_cls(self.dev, p.name, lib), src)
        got = self.output(k)
      except Exception as e:
        if DEBUG >= 3: print(f"BEAM: {p.name} {opts} dropped: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        self.advance()
        continue
      if self.reference is None: self.reference = got   # the first candidate evaluated is the NOOPT kernel
      elif (bad := mismatches(got, self.reference, self.out.dtype, tolerance(self.value, self.renderer, opts, self.out.dtype))):
        warnings.warn(f"BEAM: kernel {p.name} with {opts} computes {bad} of {self.out.arg[1]} outputs differently from the "
                      f"unoptimized kernel on random inputs: dropped (this is a code generation bug)")
        self.advance()
        continue
      t = self.time(k, best)
      self.timed += 1
      self.advance(t)
      best = min(best, t)
      out.append((t, opts))
    return out

def cache_key(ast: UOp, device: str, width: int) -> str:
  dev = Device[device]
  text = "\n".join([f"v{SEARCH_VERSION}", device, dev.renderer.target_key(), str(dev.compiler.cache_key),
                    f"cores={os.cpu_count()}", f"BEAM={width}", str(ast)])
  return hashlib.sha256(text.encode()).hexdigest()

def beam_search(ast: UOp, device: str, width: int) -> SearchResult:
  """The fastest list of actions for kernel `ast` on `device` found by a beam of `width` (from the cache if searched before)."""
  key = cache_key(ast, device, width)
  if (hit := _memory_cache.get(key)) is not None: return hit
  path = os.path.join(cache_dir(), "beam", f"{key}.json")
  if os.path.exists(path):
    try:
      with open(path) as f: hit = _memory_cache[key] = SearchResult.from_json(json.load(f))
      return hit
    except (ValueError, TypeError, KeyError): pass   # a damaged or older file: search again
  res = _search(ast, device, width)
  _memory_cache[key] = res
  write_cache_file(path, json.dumps(res.to_json()))
  return res

def _search(ast: UOp, device: str, width: int) -> SearchResult:
  SearchCounters.searches += 1
  s = Search(ast, device)
  r, value = s.renderer, s.value
  try:
    base, heur = noopt_opts(ast, r), heuristic_opts(value, r, s.out)
    s.start_round(2)
    round0 = s.evaluate([base, heur])   # base first: its output is the reference
    if not round0 or round0[0][1] != base: raise RuntimeError(f"BEAM: the unoptimized kernel does not run on {device} (DEBUG=3 says why)")
    t_base = round0[0][0]
    t_heur = next((t for t, o in round0 if o == heur), t_base)
    best = min(round0, key=lambda x: x[0])
    beam = sorted(round0, key=lambda x: x[0])[:width]
    acts = actions(value, r)
    while beam:
      cands = [opts + [a] for _, opts in beam for a in acts if within_limits(value, r, opts + [a], s.out)]
      s.start_round(len(cands))
      beam = sorted(s.evaluate(cands, best[0]), key=lambda x: x[0])[:width]
      if not beam or beam[0][0] > min(best[0] * (1 - MIN_PROGRESS[0]), best[0] - MIN_PROGRESS[1]): break
      best = beam[0]
  finally: s.finish()
  res = SearchResult(best[1], best[0], t_heur, t_base, s.timed, time.perf_counter() - s.start)
  if DEBUG >= 2:
    print(f"BEAM {width}: {s.name} {best[1] or 'no optimizations'}: {best[0]*1e3:.3f} ms (heuristics {t_heur*1e3:.3f} ms, "
          f"none {t_base*1e3:.3f} ms); {s.timed} candidates in {res.seconds:.1f} s")
  return res
