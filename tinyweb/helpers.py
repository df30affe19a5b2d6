"""Small shared utilities: environment/context variables, counters, and a few pure functions."""
from __future__ import annotations
import os, functools, operator, math, platform, contextvars, inspect, sys, threading, weakref
from typing import Any, Iterable, Sequence

def prod(xs: Iterable[int]) -> int: return functools.reduce(operator.mul, xs, 1)
def largest_divisor(n: int, most: int) -> int:
  """The largest divisor of n that is at most `most` (1 at least)."""
  return max(d for d in range(1, max(1, min(n, most)) + 1) if n % d == 0)
def flatten(xss: Iterable[Iterable[Any]]) -> list: return [x for xs in xss for x in xs]
def argsort(xs: Sequence) -> list[int]: return sorted(range(len(xs)), key=xs.__getitem__)
def all_same(xs: Sequence) -> bool: return all(x == xs[0] for x in xs)
def round_up(x: int, m: int) -> int: return (x + m - 1) // m * m
def dedup(xs: Iterable) -> list: return list(dict.fromkeys(xs))
def ceildiv(a: int, b: int) -> int: return -(-a // b)

@functools.cache
def getenv(key: str, default: Any = 0) -> Any: return type(default)(os.getenv(key, default))

class ContextVar:
  """A setting: its default is read from the environment at start-up and is the same in every thread; `with
  Context(NAME=value):` (or assigning `.value`) changes it for the current thread or asyncio task only. The value lives
  in a `contextvars.ContextVar`: a new thread starts from the defaults (as torch's grad mode does), an asyncio task
  from a copy of its creator's settings, and no thread's or task's change is seen by another."""
  registry: dict[str, ContextVar] = {}
  def __init__(self, key: str, default: Any):
    self.key, self.default = key, getenv(key, default)
    self.var = contextvars.ContextVar(key, default=self.default)
    ContextVar.registry[key] = self
  @property
  def value(self) -> Any: return self.var.get()
  @value.setter
  def value(self, v: Any): self.var.set(v)
  def __bool__(self): return bool(self.value)
  def __ge__(self, x): return self.value >= x
  def __gt__(self, x): return self.value > x
  def __lt__(self, x): return self.value < x
  def __le__(self, x): return self.value <= x
  def __eq__(self, x): return self.value == x
  __hash__ = object.__hash__
  def __repr__(self): return f"ContextVar({self.key}={self.value!r})"

DEBUG = ContextVar("DEBUG", 0)
BEAM = ContextVar("BEAM", 0)
NOOPT = ContextVar("NOOPT", 0)
TILES = ContextVar("TILES", -1)   # GPU workgroup tiles by default (Opt TILE): -1 where the device is a real GPU, 1 always, 0 never
TRAINING = ContextVar("TRAINING", 0)
NO_GRAD = ContextVar("NO_GRAD", 0)

# the `with Context(...)` blocks open in this thread or task, innermost last: (manager, the values it replaced). Kept
# here, not on the manager: one manager (a decorator's, Tensor.no_grad) may be open in several threads and nested
_open_blocks: contextvars.ContextVar[tuple] = contextvars.ContextVar("tinyweb_open_blocks", default=())

class Context:
  """`with Context(DEBUG=2, TRAINING=1):` sets context variables for the block, in this thread or asyncio task only, and
  restores them after. Also usable as a decorator."""
  def __init__(self, **kwargs):
    unknown = [k for k in kwargs if k not in ContextVar.registry]
    if unknown: raise KeyError(f"Context: unknown variable(s) {unknown}; known: {sorted(ContextVar.registry)}")
    self.kwargs = kwargs
  def __enter__(self):
    _open_blocks.set(_open_blocks.get() + ((self, {k: ContextVar.registry[k].value for k in self.kwargs}),))
    for k, v in self.kwargs.items(): ContextVar.registry[k].value = v
    return self
  def __exit__(self, *exc):
    blocks = _open_blocks.get()
    i = next(i for i in reversed(range(len(blocks))) if blocks[i][0] is self)   # this manager's innermost open block
    _open_blocks.set(blocks[:i] + blocks[i + 1:])
    for k, v in blocks[i][1].items(): ContextVar.registry[k].value = v
  def __call__(self, fn):
    if inspect.iscoroutinefunction(fn):   # (the block must last while the coroutine runs, not while it is made)
      @functools.wraps(fn)
      async def run(*args, **kwargs):
        with self: return await fn(*args, **kwargs)
      return run
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
      with self: return fn(*args, **kwargs)
    return wrapper

def at_fork(**hooks):
  """os.register_at_fork(before=, after_in_parent=, after_in_child=) where the platform can fork (not Windows, Pyodide)."""
  if hasattr(os, "register_at_fork"): os.register_at_fork(**hooks)

_fork_safe_locks: weakref.WeakSet = weakref.WeakSet()
at_fork(after_in_child=lambda: [lock._at_fork_reinit() for lock in _fork_safe_locks])

def fork_safe_lock() -> threading.RLock:
  """A re-entrant lock that is free again in a child made by os.fork(): another thread that held it at the fork does
  not exist in the child, so there it would never be released."""
  _fork_safe_locks.add(lock := threading.RLock())
  return lock

class _DeepRecursion:
  """For walks over tensor graphs that recurse once per op of a chain (scheduling, a new node's shape): Python's
  recursion limit (1000 frames) is raised to LIMIT while any thread is inside such a block, and set back when the last
  one leaves, so that importing or using tinyweb leaves the process's limit as it found it. (A class, not a generator
  context manager: it wraps every realize, and this costs a fraction of a microsecond.)"""
  LIMIT = 20000
  def __init__(self): self.lock, self.users, self.limit_before = fork_safe_lock(), 0, 0
  def __enter__(self):
    with self.lock:
      if self.users == 0:
        self.limit_before = sys.getrecursionlimit()
        sys.setrecursionlimit(max(self.limit_before, self.LIMIT))
      self.users += 1
  def __exit__(self, *exc):
    with self.lock:
      self.users -= 1
      if self.users == 0: sys.setrecursionlimit(self.limit_before)
_deep_recursion = _DeepRecursion()

def deep_recursion(fn):
  """Decorator: `fn` runs with the raised recursion limit (see _DeepRecursion)."""
  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    with _deep_recursion: return fn(*args, **kwargs)
  return wrapper

class GlobalCounters:
  """Counts what the runtime did since the last reset: kernels launched, FLOPs, bytes moved, kernel time."""
  kernel_count: int = 0
  global_ops: int = 0
  global_mem: int = 0
  time_sum_s: float = 0.0
  mem_used: int = 0   # bytes currently allocated on all devices
  @staticmethod
  def reset():
    GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s = 0, 0, 0, 0.0

@functools.cache
def _host_cpu_flags() -> frozenset:
  """The instruction-set flags /proc/cpuinfo lists for this machine's CPU (empty where there is no such file)."""
  try:
    with open("/proc/cpuinfo") as f: return frozenset(next((line.split()[2:] for line in f if line.startswith("flags")), []))
  except OSError: return frozenset()

def host_has_fma() -> bool:
  """Whether this machine's CPU has fused multiply-add instructions (x86's FMA3; every 64-bit ARM CPU). The CPU, LLVM and
  PYTHON devices fuse sums of products (linearize.fused_products) only where it has: elsewhere an fma is a slow library call."""
  return platform.machine().lower() in ("arm64", "aarch64") or "fma" in _host_cpu_flags()

def host_has_avx512() -> bool:
  """Whether this machine's CPU has AVX-512 (16-float vector registers): the CPU device then vectorizes elementwise loops
  16 floats wide (ClangRenderer.wide_loops)."""
  return "avx512f" in _host_cpu_flags()

def cache_dir() -> str:
  d = os.getenv("TINYWEB_CACHE_DIR") or os.path.join(os.getenv("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tinyweb")
  os.makedirs(d, exist_ok=True)
  return d

def to_python_scalar(x: Any) -> Any:
  if isinstance(x, (bool, int, float)): return x
  if hasattr(x, "item"): return x.item()
  raise TypeError(f"expected a Python number, got {type(x).__name__}")

def is_nan(x) -> bool: return isinstance(x, float) and math.isnan(x)
