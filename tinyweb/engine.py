"""Runs a schedule: lowers each kernel AST, renders and compiles it (all cached), launches it, and reports.

DEBUG=1 prints a summary per realize, DEBUG=2 one line per kernel (time, GFLOP/s, GB/s), DEBUG=3 adds the kernel's
lowered loop structure, DEBUG=4 prints the generated source. GRAPH=1 writes each realize's schedule as a graph (graph.py)."""
from __future__ import annotations
import contextlib, contextvars, dataclasses, functools, hashlib, json, os, re, sys, time
from concurrent.futures import ThreadPoolExecutor
from tinyweb.device import Device
from tinyweb.dtype import dtypes
from tinyweb.helpers import DEBUG, BEAM, NOOPT, TILES, GRAPH, GlobalCounters, at_fork, make_room, cache_dir, getenv, write_cache_file
from tinyweb.uop import UOp, Ops
from tinyweb.codegen.program import Program, CompiledKernel
from tinyweb.codegen.lower import lower
from tinyweb.codegen.lowering import wide_index
from tinyweb.schedule import ScheduleItem
from tinyweb.search import beam_search
import tinyweb.events as events

# (device, ast, BEAM, NOOPT, TILES) -> kernel, the KERNEL_CACHE_SIZE most recently used: the loaded programs they hold
# are what the process keeps mapped (Compiled.programs holds them weakly)
_kernel_cache: dict[tuple[str, UOp, int, int, int], CompiledKernel] = {}
KERNEL_CACHE_SIZE = 4096
kernel_observers: list = []   # fn(device, ast), called when get_kernel builds a kernel (the tests' CUDA compile check)
# the lists that recording() blocks open in this thread (or task) append each launch to
capturing: contextvars.ContextVar[tuple[list, ...]] = contextvars.ContextVar("tinyweb_capturing", default=())

@contextlib.contextmanager
def recording():
  """`with recording() as launches:` lists every launch this thread makes in the block, as (kernel or None for a copy,
  buffers) (TinyJit's capture); other threads' launches are not in it."""
  launches: list = []
  token = capturing.set(capturing.get() + (launches,))
  try: yield launches
  finally: capturing.reset(token)

def check_index_range(ast: UOp, device: str):
  """Refuse a kernel whose index math would wrap on `device`. Index math is int32 wherever the kernel's indexes fit
  (below 2^31), else int64 (lowering.index_dtype: a dimension that long, a reshape of a view with more elements than that,
  which flattens the index up to the view's size, or a reduction over that many); a device without 64-bit integers
  (WEBGPU: WGSL has none) refuses such a kernel with an OverflowError naming the view. Huge broadcasts are fine while no
  index is flat."""
  if dtypes.int64 not in Device[device].renderer.unsupported or kernel_key(device, ast) in _kernel_cache: return   # (built: it passed)
  if (wide := wide_index(ast.src[0].src[1])) is None: return
  u, n = wide
  what, shape = {Ops.RESHAPE: ("reshapes", u.src[0].shape), Ops.REDUCE_AXIS: ("reduces", u.src[0].shape)}.get(u.op, ("indexes", u.shape))
  raise OverflowError(f"{device}: a kernel {what} a view of shape {shape}, {n} elements along one flat index, but index math "
                      f"on {device} is 32-bit (< 2^31: it has no 64-bit integers); split the tensor or realize() a smaller part first")

def kernel_key(device: str, ast: UOp) -> tuple: return (device, ast, BEAM.value, NOOPT.value, TILES.value)

def kernel_opts(device: str, ast: UOp) -> list | None:
  """The optimization actions a kernel is lowered with under the current settings: BEAM search's (cached after the
  first search), else None (the heuristics choose, or NOOPT's)."""
  return beam_search(ast, device, BEAM.value).opts if BEAM >= 1 and not NOOPT else None

def build_kernel(device: str, ast: UOp) -> tuple[Program, str]:
  """Lower (with BEAM search when it is on) and render a kernel, or read both back from the disk cache of lowered
  kernels, where a process that built the same kernel for the same target and settings, with the same tinyweb sources,
  left it (lowering is most of a new process's first call: 0.2-0.5 s a kernel of a real model)."""
  st = time.perf_counter()
  if (path := _lowered_path(device, ast)) is not None and (hit := _read_lowered(path)) is not None:
    if events.watchers: events.emit("lower", device=device, ast=ast, program=hit[0], src=hit[1], cached=True, start=st, end=time.perf_counter())
    return hit
  dev = Device[device]
  prog = lower(ast, dev.renderer, kernel_opts(device, ast))
  src = dev.renderer.render(prog)
  if DEBUG >= 3: print(f"{prog.name}: loops {[u.src[0].arg for u in prog.uops if u.op is Ops.RANGE]} optimizations {prog.opts or 'none'}")
  if DEBUG >= 4: print(src)
  if path is not None: _write_lowered(path, prog, src)
  if events.watchers: events.emit("lower", device=device, ast=ast, program=prog, src=src, cached=False, start=st, end=time.perf_counter())
  return prog, src

# ---- the disk cache of lowered kernels: JSON files (no pickles: a cache file never runs code), one per kernel, keyed by
# the kernel's AST listing, the target's declared settings, the compiler's, BEAM/NOOPT/TILES, the cores, and a digest of
# tinyweb's own sources (editing the code generator invalidates it). Off with DEBUG >= 3 (which shows the lowering) and
# DISABLE_COMPILER_CACHE=1.
_LAUNCH_FIELDS = ("name", "outputs", "global_shape", "flops", "mem_estimate", "parallel", "threads", "local_size", "grid",
                  "group", "tiled")

@functools.cache
def sources_digest() -> str:
  """A digest of every Python source of tinyweb and its runtimes (imported by now: a device is open), as this process
  imported them."""
  h = hashlib.sha256()
  for root in [os.path.dirname(os.path.abspath(__file__)), *sys.modules["tinyweb.backends"].__path__]:
    for dirpath, dirnames, files in sorted(os.walk(root)):
      dirnames.sort()
      for fn in sorted(f for f in files if f.endswith(".py")):
        with open(os.path.join(dirpath, fn), "rb") as f: h.update(fn.encode() + b"\0" + f.read())
  return h.hexdigest()

def _lowered_path(device: str, ast: UOp) -> str | None:
  if DEBUG >= 3 or getenv("DISABLE_COMPILER_CACHE"): return None
  dev = Device[device]
  if getattr(dev, "compiler", None) is None: return None
  text = "\n".join([sources_digest(), device, dev.renderer.target_key(), str(dev.compiler.cache_key), f"cores={os.cpu_count()}",
                     f"BEAM={BEAM.value} NOOPT={NOOPT.value} TILES={TILES.value}", str(ast)])
  return os.path.join(cache_dir(), "lowered", hashlib.sha256(text.encode()).hexdigest()[:40] + ".json")

def _read_lowered(path: str) -> tuple[Program, str] | None:
  try:
    with open(path) as f: d = json.load(f)
    fields = {k: d[k] for k in _LAUNCH_FIELDS}
    fields["global_shape"], fields["grid"] = tuple(fields["global_shape"]), fields["grid"] and tuple(fields["grid"])
    return Program(uops=[], globals=[], **fields), d["src"]
  except FileNotFoundError: return None
  except (ValueError, KeyError, TypeError): return None   # a damaged or older file: lower again (and overwrite it)

def _write_lowered(path: str, prog: Program, src: str):
  try: write_cache_file(path, json.dumps({**{k: getattr(prog, k) for k in _LAUNCH_FIELDS}, "src": src}))
  except OSError: pass   # (a read-only or full cache folder: the kernel is just not cached)

def cache_kernel(device: str, ast: UOp, prog: Program, src: str, program) -> CompiledKernel:
  make_room(_kernel_cache, KERNEL_CACHE_SIZE)   # (the least recently used: get_kernel moves a hit to the end)
  k = _kernel_cache[kernel_key(device, ast)] = CompiledKernel(prog, program, src)
  for observe in kernel_observers: observe(device, ast)
  return k

def get_kernel(device: str, ast: UOp) -> CompiledKernel:
  if (k := _kernel_cache.pop(key := kernel_key(device, ast), None)) is None:
    prog, src = build_kernel(device, ast)
    st = time.perf_counter()
    program = Device[device].get_program(prog.name, src)
    if events.watchers: events.emit("compile", device=device, names=[prog.name], srcs=[src], start=st, end=time.perf_counter())
    return cache_kernel(device, ast, prog, src, program)
  _kernel_cache[key] = k   # (now the most recently used)
  return k

# compiles of a cold schedule run in these threads (not in Pyodide, which has none). A forked child gets a pool of its own:
# the parent's threads do not exist there, and the parent's pool would wait for them forever
_compile_pool: ThreadPoolExecutor | None = None
def compile_pool() -> ThreadPoolExecutor | None:
  global _compile_pool
  if _compile_pool is None and sys.platform != "emscripten": _compile_pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 1)
  return _compile_pool
def _forget_compile_pool():
  global _compile_pool
  _compile_pool = None
at_fork(after_in_child=_forget_compile_pool)
COMPILE_BATCH = 8   # new kernels per compiler run in compile_ahead: few enough that compiling keeps up with lowering

def compile_ahead(items: list[ScheduleItem]):
  """A schedule with new kernels: lower and render them all first, and compile them in background threads in batches of
  COMPILE_BATCH as their sources come, so that the compiler (its own process: clang) works while Python lowers the next
  kernels, on every core, and a compiler that takes several sources at once (Compiler.batch_sources) pays its start-up
  once per batch (clang: ~85 ms of the ~100 ms a small kernel takes). Only for compilers that allow it
  (Compiler.thread_safe), not during BEAM search (it times kernels). A kernel that fails here is left to get_kernel,
  which raises at its turn in the schedule."""
  if (pool := compile_pool()) is None or BEAM >= 1: return
  batches: dict[str, list[tuple]] = {}   # device -> kernels (ast, prog, src) whose compile has not started
  started: list[tuple] = []              # (device, kernels, future of their binaries)
  names: set[str] = set()
  seen: set[tuple] = set()
  def start(device: str):
    if part := batches.pop(device, []):
      started.append((device, part, pool.submit(_compile_batch, device, part)))
  for it in items:
    if it.kind != "kernel": continue
    device = it.bufs[0].device
    dev, key = Device[device], kernel_key(device, it.ast)
    if key in _kernel_cache or key in seen or not getattr(dev.compiler, "thread_safe", False): continue
    seen.add(key)
    try: prog, src = build_kernel(device, it.ast)
    except Exception: break
    if prog.name in names:   # kernels compiled together need names of their own: renamed in the source (where the name
      new_name = f"{prog.name}_{len(names)}"   # starts identifiers: E_7_13, E_7_13_chunk; not E_7_131 or TYPE_7_13)
      prog, src = dataclasses.replace(prog, name=new_name), re.sub(rf"\b{re.escape(prog.name)}(?![0-9])", new_name, src)
    names.add(prog.name)
    if dev.compiler.cached(src) is not None: cache_kernel(device, it.ast, prog, src, dev.get_program(prog.name, src))
    else:
      batches.setdefault(device, []).append((it.ast, prog, src))
      if len(batches[device]) >= COMPILE_BATCH: start(device)
  for device in list(batches): start(device)
  for device, part, compiling in started:
    dev = Device[device]
    for (ast, prog, src), lib in zip(part, compiling.result()):
      if isinstance(lib, Exception): continue
      dev.compiler.store(src, lib)
      cache_kernel(device, ast, prog, src, dev.get_program(prog.name, src))

def _compile_batch(device: str, part: list[tuple]) -> list:
  st = time.perf_counter()
  libs = Device[device].compiler.compile_many(srcs := [src for _, _, src in part])
  if events.watchers: events.emit("compile", device=device, names=[p.name for _, p, _ in part], srcs=srcs, start=st, end=time.perf_counter())
  return libs

def _launch(k: CompiledKernel, bufs: list, records: tuple[list, ...]):
  """Run kernel `k` on `bufs` (allocated, the output first) and account for it: TinyJit's capture, the counters, DEBUG."""
  st = time.perf_counter()
  et = k.run([b.handle for b in bufs], wait=DEBUG >= 2 or events.timing_launches)
  if events.watchers: events.emit("launch", device=bufs[0].device, kernel=k, bufs=bufs, start=st, end=time.perf_counter(), kernel_s=et)
  bufs[0].mark_written(by_schedule=True)
  for rec in records: rec.append((k, bufs))
  GlobalCounters.kernel_count += 1
  GlobalCounters.global_ops += k.program.flops
  GlobalCounters.global_mem += k.program.mem_estimate
  if et is not None: GlobalCounters.time_sum_s += et
  if DEBUG >= 2:
    p = k.program
    t = max(et or 0.0, 1e-9)
    print(f"*** {bufs[0].device:6s} {GlobalCounters.kernel_count:4d} {p.name:28s} shape {str(p.global_shape):18s} "
          f"{t*1e3:9.3f} ms {p.flops/t/1e9:9.2f} GFLOP/s {p.mem_estimate/t/1e9:8.2f} GB/s")

def replay(k: CompiledKernel, bufs: list):
  """Launch a kernel that an earlier schedule built on other buffers of the same sizes and dtypes (the output first)."""
  for b in bufs: b.ensure_allocated()
  _launch(k, bufs, capturing.get())
  Device[bufs[0].device].flush()

def run_schedule(items: list[ScheduleItem]):
  st = time.perf_counter()
  if GRAPH and items:
    from tinyweb.graph import write_graph
    write_graph(items)
  for it in items:   # before any kernel runs: a new kernel whose indexes its device cannot hold is refused
    if it.kind == "kernel": check_index_range(it.ast, it.bufs[0].device)
  compile_ahead(items)
  devices, records = set(), capturing.get()
  last_reader = {b: it for it in items for b in it.bufs if b.transient}   # (an intermediate's memory is released after it)
  for it in items:
    release = [b for b in dict.fromkeys(it.bufs) if last_reader.get(b) is it]
    for b in it.bufs: b.ensure_allocated()
    if it.kind == "copy":
      dst, src = it.bufs
      t0 = time.perf_counter()
      dst.copyin(src.as_memoryview())
      for rec in records: rec.append((None, it.bufs))
      et = time.perf_counter() - t0
      if events.watchers: events.emit("copy", src_device=src.device, device=dst.device, nbytes=dst.nbytes, start=t0, end=t0 + et)
      GlobalCounters.global_mem += dst.nbytes
      if DEBUG >= 2: print(f"*** copy {src.device} -> {dst.device} {dst.nbytes:>10d} bytes {et*1e3:8.3f} ms")
      for b in release: b.release()
      continue
    device = it.bufs[0].device
    for b in it.bufs[1:]:
      if b.device != device:
        raise RuntimeError(f"kernel reads a buffer on {b.device} while writing on {device}: move tensors with .to() first")
    if device not in devices: Device[device]   # (refused in a forked child, before a cached kernel of the parent's runs)
    devices.add(device)
    _launch(get_kernel(device, it.ast), it.bufs, records)
    # (a later launch may get this memory: devices run launches in order, so it is written after this one read it)
    for b in release: b.release()
  for d in devices: Device[d].flush()
  if events.watchers: events.emit("realize", items=items, start=st, end=time.perf_counter())
  if DEBUG >= 1 and items:
    print(f"realize: {len(items)} items ({sum(it.kind == 'kernel' for it in items)} kernels) in {(time.perf_counter()-st)*1e3:.2f} ms")
