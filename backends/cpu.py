"""The CPU device: kernels rendered to C, compiled by clang into a shared object, launched through ctypes."""
from __future__ import annotations
import ctypes, _ctypes, functools, os, subprocess, tempfile, time, shutil
from concurrent.futures import ThreadPoolExecutor
from tinyweb.device import Allocator, Compiler, Compiled
from tinyweb.helpers import host_has_fma, host_has_avx512, at_fork
from tinyweb.codegen.clang import ClangRenderer

ALIGN = 64   # a cache line, and one 16-float vector: no vector load or store of a buffer straddles two lines

class CPUAllocator(Allocator):
  def _alloc(self, nbytes: int):
    # malloc gives big blocks at 16 bytes past a page start: every 64-byte access would straddle two cache lines (the
    # elementwise chain of `python -m bench` ran 1.8x slower on such buffers)
    raw = (ctypes.c_uint8 * (nbytes + ALIGN - 1))()
    return (ctypes.c_uint8 * nbytes).from_buffer(raw, -ctypes.addressof(raw) % ALIGN)   # (keeps `raw` alive)
  def copyin(self, handle, src: memoryview): ctypes.memmove(handle, bytes(src) if src.readonly else (ctypes.c_char * src.nbytes).from_buffer(src), src.nbytes)
  def copyout(self, dst: memoryview, handle): ctypes.memmove((ctypes.c_char * dst.nbytes).from_buffer(dst), handle, dst.nbytes)
  def as_memoryview(self, handle, nbytes: int) -> memoryview: return memoryview(handle).cast("B")[:nbytes]
  def wrap(self, mv: memoryview):
    """Use host memory as a buffer without copying (it must stay alive: the handle keeps a reference)."""
    return (ctypes.c_uint8 * mv.nbytes).from_buffer(mv)

class ClangCompiler(Compiler):
  """C -> a shared object: clang compiles to an object file, ld links it. (Not `clang -shared`: its driver's link step,
  which finds the C runtime's start files and libraries first, took 60 ms a kernel where ld alone takes 7; a cold test
  suite compiles thousands of kernels.)"""
  batch_sources = True   # BEAM search compiles its candidates in one clang run (clang's start-up dominates small kernels)
  thread_safe = True     # each compile is its own clang process
  args = ["-c", "-O2", "-march=native", "-fPIC", "-ffp-contract=off", "-fno-math-errno", "-x", "c", "-"]
  def __init__(self):
    super().__init__()
    self.clang, self.ld = shutil.which("clang"), shutil.which("ld")
    if self.clang is None: raise RuntimeError("clang not found on PATH (install it: apt-get install -y clang)")
    if self.ld is None: raise RuntimeError("ld not found on PATH (install it: apt-get install -y binutils)")
    ver = subprocess.run([self.clang, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    self.cache_key = f"clang {ver} {' '.join(self.args)} ld -shared -lm"
  def compile(self, src: str) -> bytes:
    with tempfile.TemporaryDirectory() as d:
      obj, out = os.path.join(d, "kernel.o"), os.path.join(d, "kernel.so")
      p = subprocess.run([self.clang, *self.args, "-o", obj], input=src.encode(), capture_output=True)
      if p.returncode != 0: raise RuntimeError(f"clang failed to compile a kernel:\n{p.stderr.decode()}\n--- source ---\n{src}")
      p = subprocess.run([self.ld, "-shared", obj, "-o", out, "-lm"], capture_output=True)   # (libm: float64 exp2, log2, ...)
      if p.returncode != 0: raise RuntimeError(f"ld failed to link a kernel:\n{p.stderr.decode()}")
      with open(out, "rb") as f: return f.read()

# Kernels with more work than this (FLOPs + bytes) are split across cores: below it, thread hand-off costs more.
PARALLEL_MIN_WORK = 1 << 18
# The C thread pool splits the loop into this many pieces per core, claimed one at a time (backends/cpu_threads.c)
PIECES_PER_CORE = 4
CORES = os.cpu_count() or 1
# + the caller's thread; made on first use, and again in a forked child (the parent's threads do not exist there)
_pool: ThreadPoolExecutor | None = None
def python_pool() -> ThreadPoolExecutor:
  global _pool
  if _pool is None: _pool = ThreadPoolExecutor(max_workers=CORES - 1)
  return _pool
def _forget_pool():
  global _pool
  _pool = None
at_fork(after_in_child=_forget_pool)

@functools.cache
def thread_pool(compiler: ClangCompiler):
  """The C thread pool's entry point (backends/cpu_threads.c), compiled once by the device's compiler (then from the
  kernel cache); None where it cannot be."""
  try:
    with open(os.path.join(os.path.dirname(__file__), "cpu_threads.c")) as f: src = f.read()
    lib = load_library(compiler.compile_cached(src))
  except (OSError, RuntimeError): return None
  lib.tw_threads_run.restype = None
  return lib.tw_threads_run

class _Library(ctypes.CDLL):
  """A loaded shared object that is unloaded (dlclose) when freed. Its functions hold it, so that happens once no kernel
  can call into it. Without unloading, a process that loads kernel after kernel runs out of memory mappings (Linux allows
  65530, a library takes about 5) and dlopen fails with "cannot apply additional memory protection"."""
  def __del__(self):
    if self._handle: _ctypes.dlclose(self._handle)

def load_library(lib: bytes):
  """dlopen needs a file: write the shared object to a temp file, load it, remove the file."""
  fd, path = tempfile.mkstemp(suffix=".so")
  with os.fdopen(fd, "wb") as f: f.write(lib)
  try: return _Library(path)
  finally: os.unlink(path)

def _split(n: int, k: int) -> list[tuple[int, int]]: return [(n * i // k, n * (i + 1) // k) for i in range(k)]

@functools.lru_cache(maxsize=1024)
def _piece_bounds(n: int, k: int):
  """range(n) in k pieces as the C thread pool takes them: arrays of their starts and ends (shared by launches: read only)."""
  pieces = _split(n, k)
  return (ctypes.c_int * k)(*[p[0] for p in pieces]), (ctypes.c_int * k)(*[p[1] for p in pieces])

class CoreSplitProgram:
  """A native kernel `self.fxn(*buffers[, core_lo, core_hi])` (set by the subclass) called through ctypes; a kernel with a
  parallel outer loop (core_split renderers) gets that loop split across cores: into PIECES_PER_CORE pieces per core
  that the C thread pool (built by `compiler` when first needed) runs through the kernel's `chunk_fxn` entry point where
  it has both, else into one chunk per core run by Python threads."""
  fxn = chunk_fxn = compiler = None
  def bind(self, *bufs, global_size=None, parallel: int = 0, work: int = 0):
    """The launch as a no-argument callable, with the ctypes arguments and the split across cores worked out once."""
    # (addressof: the buffers are ctypes arrays; a tenth of ctypes.cast's cost, which showed in small kernels' launches)
    args, fxn = [ctypes.c_void_p(ctypes.addressof(b)) for b in bufs], self.fxn
    if not parallel: return functools.partial(fxn, *args)
    n = min(parallel, CORES) if CORES > 1 and work >= PARALLEL_MIN_WORK else 1
    if n == 1: return functools.partial(fxn, *args, 0, parallel)
    if self.chunk_fxn is not None and (run_pieces := thread_pool(self.compiler)) is not None:
      lo, hi = _piece_bounds(parallel, min(parallel, n * PIECES_PER_CORE))
      return functools.partial(run_pieces, self.chunk_fxn, (ctypes.c_void_p * len(args))(*args), lo, hi, len(lo), n)
    chunks = _split(parallel, n)
    def run():   # ctypes releases the GIL during the call, so the chunks run in parallel; this thread runs the first
      pending = [python_pool().submit(fxn, *args, lo, hi) for lo, hi in chunks[1:]]
      fxn(*args, *chunks[0])
      for f in pending: f.result()
    return run
  def __call__(self, *bufs, global_size=None, parallel: int = 0, work: int = 0, wait=False):
    st = time.perf_counter() if wait else 0.0
    self.bind(*bufs, parallel=parallel, work=work)()
    return time.perf_counter() - st if wait else None

class CPUProgram(CoreSplitProgram):
  def __init__(self, device, name: str, lib: bytes):
    self.lib = load_library(lib)
    self.fxn = getattr(self.lib, name)
    self.fxn.restype = None
    self.chunk_fxn = getattr(self.lib, f"{name}_chunk", None)   # (kernels with a parallel loop, see ClangRenderer)
    self.compiler = device.compiler

class CPUDevice(Compiled):
  fork_safe = True   # (the C thread pool starts its threads anew in a forked child: cpu_threads.c)
  def __init__(self, name: str = "CPU"):
    renderer = ClangRenderer(fused_multiply_add=host_has_fma(),
                             wide_loop_pragma="#pragma clang loop vectorize_width(16)" if host_has_avx512() else "")
    super().__init__(name, CPUAllocator(), renderer, ClangCompiler(), CPUProgram)
