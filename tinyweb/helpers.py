"""Small shared utilities: environment/context variables, counters, a few pure functions, and what tinygrad scripts
import from tinygrad.helpers (progress bars, timers, colors, fetch, cpu_profile)."""
from __future__ import annotations
import os, functools, operator, math, platform, contextvars, inspect, sys, threading, weakref, contextlib, time, shutil, decimal
import gzip, hashlib, pathlib, tarfile, tempfile
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence
import tinyweb.events as events

def prod(x: Iterable[int]) -> int: return functools.reduce(operator.mul, x, 1)
def largest_divisor(n: int, most: int) -> int:
  """The largest divisor of n that is at most `most` (1 at least)."""
  return max(d for d in range(1, max(1, min(n, most)) + 1) if n % d == 0)
def flatten(l: Iterable[Iterable[Any]]) -> list: return [x for xs in l for x in xs]
def argsort(x: Sequence) -> list[int]: return sorted(range(len(x)), key=x.__getitem__)
def all_same(items: Sequence) -> bool: return all(x == items[0] for x in items)
def round_up(num: int, amt: int) -> int: return (num + amt - 1) // amt * amt
def dedup(x: Iterable) -> list: return list(dict.fromkeys(x))
def ceildiv(num: int, amt: int) -> int: return -(-num // amt)
def make_tuple(x: int | Sequence[int], cnt: int) -> tuple[int, ...]: return (x,) * cnt if isinstance(x, int) else tuple(x)
def partition(itr: Iterable, fxn: Callable[[Any], bool]) -> tuple[list, list]:
  """(the items for which fxn is true, the others), each in order."""
  yes: list = []
  no: list = []
  for x in itr: (yes if fxn(x) else no).append(x)
  return yes, no

def make_room(d: dict, size: int) -> None:
  """Drop a bounded cache's oldest entries (dicts keep insertion order) until one more fits in `size`. A loop, not one
  pop: threads that insert at once can leave it over its size. Safe while another thread changes it."""
  while len(d) >= size:
    try: d.pop(next(iter(d)), None)
    except (StopIteration, RuntimeError): break   # (another thread emptied or changed it meanwhile)

@functools.cache
def getenv(key: str, default: Any = 0) -> Any:
  """Environment variable `key` converted to the type of `default` (default where it is unset)."""
  try: return type(default)(os.getenv(key, default))
  except ValueError:
    raise ValueError(f"environment variable {key}={os.environ[key]!r}: expected {type(default).__name__} like its default {default!r}") from None

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
JIT = ContextVar("JIT", 1)           # 0: TinyJit runs its function eagerly on every call
GRAPH = ContextVar("GRAPH", 0)       # 1: each realize writes its schedule as a Graphviz graph (tinyweb/graph.py)
PROFILE = ContextVar("PROFILE", 0)   # 1: a Chrome trace of the engine's work and cpu_profile's blocks, written at exit (profile.py)
# the most bytes of attention scores Tensor.scaled_dot_product_attention computes at once (above it the queries go in
# chunks); 0: the device's largest buffer where it has a limit (WEBGPU: maxStorageBufferBindingSize), else no limit
ATTENTION_SCORES_BYTES = ContextVar("ATTENTION_SCORES_BYTES", 0)
PROGRESS = ContextVar("PROGRESS", -1)   # progress bars on stderr (BEAM, downloads, export): 1 always, 0 never, -1 on a terminal
# the names of the @function bodies running in this thread or task, innermost last (tinyweb/function.py): while one runs,
# Tensor.realize refuses, as tinygrad refuses device use inside @function
RUNNING_FUNCTIONS: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("tinyweb_running_functions", default=())

@contextlib.contextmanager
def reading_internally():
  """For tinyweb's own eager reads of values where tinygrad's op is lazy (a 0-d tensor index, a tensor given as a number):
  allowed inside an @function body, where reading is otherwise refused (RUNNING_FUNCTIONS)."""
  token = RUNNING_FUNCTIONS.set(())
  try: yield
  finally: RUNNING_FUNCTIONS.reset(token)

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
  mem_peak: int = 0   # the most bytes allocated at once since the last reset
  @staticmethod
  def reset():
    GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s = 0, 0, 0, 0.0
    GlobalCounters.mem_peak = GlobalCounters.mem_used
  @staticmethod
  @contextlib.contextmanager
  def not_counting():
    """The work done inside is not counted (tinygrad's realize(do_update_stats=False))."""
    saved = GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s
    try: yield
    finally: GlobalCounters.kernel_count, GlobalCounters.global_ops, GlobalCounters.global_mem, GlobalCounters.time_sum_s = saved

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

def testdata_dir() -> str:
  """Where `python -m tests.testdata` keeps the test data (real weights, photos; tests/testdata.py): $TINYWEB_TESTDATA,
  else ~/.cache/tinyweb/testdata. The export command looks for EfficientNet-Lite0's weights there too."""
  return os.environ.get("TINYWEB_TESTDATA") or os.path.join(os.path.expanduser("~"), ".cache", "tinyweb", "testdata")

def write_cache_file(path: str, data: bytes | str):
  """Write a cache entry whole or not at all: through a temporary file named for this process and thread (compiles run
  in threads), renamed over `path`, so a reader in another process or thread never sees part of one."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
  with open(tmp, "wb" if isinstance(data, bytes) else "w") as f: f.write(data)
  os.replace(tmp, path)

def to_python_scalar(x: Any) -> Any:
  if isinstance(x, (bool, int, float)): return x
  if hasattr(x, "item"): return x.item()
  raise TypeError(f"expected a Python number, got {type(x).__name__}")

def is_nan(x) -> bool: return isinstance(x, float) and math.isnan(x)

# ---------------------------------------------------------------------------------------------------------------------
# what scripts import from tinygrad.helpers: colors, timers, a progress bar, cpu_profile, fetch

_COLORS = ("black", "red", "green", "yellow", "blue", "magenta", "cyan", "white")

def colored(st, color: Optional[str], background: bool = False) -> str:
  """`st` in an ANSI terminal color (black, red, green, yellow, blue, magenta, cyan, white; in upper case the bright
  variant), as the foreground or the background; `st` unchanged when color is None or $NO_COLOR is set (to anything)."""
  if color is None or os.getenv("NO_COLOR"): return st
  if color.lower() not in _COLORS: raise ValueError(f"colored: unknown color {color!r}; valid: {', '.join(_COLORS)} (upper case: bright)")
  return f"\x1b[{30 + 10 * bool(background) + 60 * color.isupper() + _COLORS.index(color.lower())}m{st}\x1b[0m"

class Timing(contextlib.ContextDecorator):
  """`with Timing("step: "):` (or as a decorator) prints the block's wall time, "step:  12.34 ms", followed by
  on_exit(nanoseconds) when given; `enabled=False` prints nothing. The time is kept in `.et` (ns)."""
  def __init__(self, prefix: str = "", on_exit: Optional[Callable[[int], str]] = None, enabled: bool = True):
    self.prefix, self.on_exit, self.enabled = prefix, on_exit, enabled
  def __enter__(self):
    self.st = time.perf_counter_ns()
    return self
  def __exit__(self, *exc):
    self.et = time.perf_counter_ns() - self.st
    if self.enabled: print(f"{self.prefix}{self.et * 1e-6:6.2f} ms" + (self.on_exit(self.et) if self.on_exit else ""))

class Profiling(contextlib.ContextDecorator):
  """`with Profiling():` (or as a decorator) runs the block under cProfile and prints the first `frac` of the functions
  by `sort` (a pstats key: 'cumtime', 'tottime', 'ncalls', ...): calls, own time and total time in ms (divided by
  `ts`), and the caller that spent most in it. fn: also save the raw stats there (for pstats or snakeviz)."""
  def __init__(self, enabled: bool = True, sort: str = "cumtime", frac: float = 0.2, fn: Optional[str] = None, ts: float = 1):
    self.enabled, self.sort, self.frac, self.fn, self.scale = enabled, sort, frac, fn, 1e3 / ts
  def __enter__(self):
    import cProfile
    self.pr = cProfile.Profile()
    if self.enabled: self.pr.enable()
    return self
  def __exit__(self, *exc):
    if not self.enabled: return
    self.pr.disable()
    if self.fn: self.pr.dump_stats(self.fn)
    import pstats
    stats = pstats.Stats(self.pr).strip_dirs().sort_stats(self.sort)
    def where(f) -> str: return f"{f[0]}:{f[1]}:{f[2]}"
    for f in stats.fcn_list[:int(len(stats.fcn_list) * self.frac)]:   # (fcn_list: the order sort_stats made)
      _, calls, own, total, callers = stats.stats[f]
      top = max(callers.items(), key=lambda c: c[1][3], default=None)   # the caller with the most cumulative time in f
      print(f"n:{calls:8d}  tm:{own * self.scale:7.2f}ms  tot:{total * self.scale:7.2f}ms", colored(where(f).ljust(50), "yellow"),
            colored(f"<- {top[1][3] / total * 100 if total else 0:3.0f}% {where(top[0])}", "BLACK") if top else "")

def _si(x: float) -> str:
  """x with an SI prefix, 3 significant digits: 26421856 -> '26.4M'."""
  for p in ("", "k", "M", "G", "T", "P"):
    if abs(x) < 999.5 or p == "P": return f"{x:.3g}{p}"
    x /= 1000
  raise AssertionError("unreachable")

def show_progress() -> bool:
  """Whether progress bars draw (tqdm(disable=None)): PROGRESS=1 always, PROGRESS=0 never, else where stderr is a terminal."""
  return sys.stderr.isatty() if PROGRESS.value < 0 else bool(PROGRESS.value)

def _hms(t: float) -> str:
  m, s = divmod(int(t), 60)
  return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m:02d}:{s:02d}"

class tqdm:
  """A progress bar on stderr (tinygrad's small one, the common subset of the tqdm package): `for x in tqdm(xs):` counts
  the items, `with tqdm(total=n) as bar: bar.update(k)` counts by hand; `set_description(s)` (or `.desc`) labels it;
  `reset(total)` starts the count again on the same line. total defaults to len(iterable); without one the bar shows the
  count and the rate only. unit_scale: counts with SI prefixes (26.4MB). disable=None: draw by the PROGRESS rule
  (show_progress: where stderr is a terminal, unless PROGRESS says otherwise). Redraws at most `rate` times a second."""
  def __init__(self, iterable: Optional[Iterable] = None, desc: str = "", disable: Optional[bool] = False, unit: str = "it",
               unit_scale: bool = False, total: Optional[int] = None, rate: int = 100):
    self.iterable, self.unit, self.unit_scale, self.rate = iterable, unit, unit_scale, rate
    self.disable = not show_progress() if disable is None else disable
    self.total = total if total is not None else (len(iterable) if hasattr(iterable, "__len__") else None)   # type: ignore[arg-type]
    self.n, self.st, self.drawn = 0, time.perf_counter(), -math.inf
    self.set_description(desc)
    self.update(0)
  def __iter__(self) -> Iterator:
    if self.iterable is None: raise TypeError("tqdm: made without an iterable, so it cannot be iterated; use update(n)")
    for x in self.iterable:
      yield x
      self.update(1)
    self.close()
  def __enter__(self): return self
  def __exit__(self, *exc): self.close()
  def set_description(self, desc: str): self.desc = f"{desc}: " if desc else ""
  def close(self): self.update(close=True)
  def reset(self, total: Optional[int] = None):
    """Count from 0 again (towards `total`), with the clock restarted, on the same line."""
    self.n, self.total, self.st, self.drawn = 0, total, time.perf_counter(), -math.inf
    self.update(0)
  def update(self, n: int = 0, close: bool = False):
    """Count n more; redraw (always when close, which ends the line)."""
    self.n += n
    now = time.perf_counter()
    if self.disable or (not close and now - self.drawn < 1 / self.rate): return
    self.drawn, elapsed = now, now - self.st
    count = _si if self.unit_scale else str
    speed = (_si(self.n / elapsed) if self.unit_scale else f"{self.n / elapsed:5.2f}") if self.n and elapsed else "?"
    speed += f"{self.unit}/s"
    if self.total:
      left = _hms(elapsed / self.n * (self.total - self.n)) if self.n else "?"
      suffix = f"{count(self.n)}/{count(self.total)} [{_hms(elapsed)}<{left}, {speed}]"
      frac = min(self.n / self.total, 1.0)
      width = max(shutil.get_terminal_size().columns - len(self.desc) - len(suffix) - 9, 1)
      cells = frac * width
      bar = ("█" * int(cells) + (" ▏▎▍▌▋▊▉"[int(8 * cells) % 8] if cells < width else "")).ljust(width)
      line = f"{self.desc}{100 * frac:3.0f}%|{bar}| {suffix}"
    else: line = f"{self.desc}{count(self.n)}{self.unit} [{_hms(elapsed)}, {speed}]"
    print("\r" + line, end="\n" if close else "", file=sys.stderr, flush=True)
  @classmethod
  def write(cls, s: str): print(f"\r\x1b[K{s}", file=sys.stderr, flush=True)

def trange(n: int, **kwargs) -> tqdm:
  """tqdm(range(n)): a progress bar over 0..n-1."""
  return tqdm(range(n), total=n, **kwargs)

@dataclass
class ProfileRangeEvent:
  """A timed block of cpu_profile: start and end in microseconds (time.perf_counter)."""
  device: str
  name: Any
  st: decimal.Decimal
  en: Optional[decimal.Decimal] = None
  profile_key: Optional[bytes] = None

cpu_events: list[ProfileRangeEvent] = []   # what cpu_profile recorded while PROFILE was on

def _now_us() -> decimal.Decimal: return decimal.Decimal(time.perf_counter_ns()) / 1000

@contextlib.contextmanager
def cpu_profile(name, device: str = "TINY", display: bool = True, profile_key: Optional[bytes] = None) -> Iterator[ProfileRangeEvent]:
  """`with cpu_profile("load"):` times the block as a ProfileRangeEvent (yielded; its `en` is set at the end, also when
  the block raises). Where PROFILE=1 (or Context(PROFILE=1)) at its start and display, the event is kept in `cpu_events`
  and the process's profile (tinyweb/profile.py) runs: at exit it writes these blocks, on host threads named by
  `device`, with the engine's work as a Chrome trace (open it in https://ui.perfetto.dev or chrome://tracing) to
  $PROFILE_PATH, default <tempdir>/tinyweb-profile-<pid>.json, and prints the path."""
  if keep := PROFILE and display:
    from tinyweb.profile import start   # (here: a process that never profiles does not import it)
    start()
  event = ProfileRangeEvent(device, name, _now_us(), profile_key=profile_key)
  try: yield event
  finally:
    event.en = _now_us()
    if keep:
      cpu_events.append(event)
      if events.watchers: events.emit("cpu", name=str(name), device=device, start=float(event.st) / 1e6, end=float(event.en) / 1e6)

FETCH_TIMEOUT = 30.0   # seconds a server may stay silent before fetch gives up

def download(url: str, dest: str | os.PathLike, timeout: float = FETCH_TIMEOUT, gunzip: bool = False, sha256: Optional[str] = None,
             headers: Optional[dict[str, str]] = None) -> None:
  """Download `url` (http, https, file://) to `dest` atomically, with a progress bar on stderr (by the PROGRESS rule,
  show_progress): into a temporary file beside it, renamed when complete. gunzip: store the decompressed contents.
  sha256: the hex digest the stored data must have. An incomplete download or a digest mismatch raises OSError and
  leaves nothing behind."""
  import urllib.request   # (here: importing tinyweb does not pay for it)
  os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
  req = urllib.request.Request(url, headers={"User-Agent": "tinyweb", **(headers or {})})
  with urllib.request.urlopen(req, timeout=timeout) as r:
    length = int(r.headers.get("Content-Length") or 0)
    src = gzip.GzipFile(fileobj=r) if gunzip else r
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(dest)), prefix=os.path.basename(dest) + ".", suffix=".part")
    h, got = hashlib.sha256(), 0
    try:
      with os.fdopen(fd, "wb") as f, tqdm(total=None if gunzip else length or None, unit="B", unit_scale=True,
                                          desc=os.path.basename(dest), disable=None) as bar:
        while chunk := src.read(1 << 20):
          f.write(chunk)
          h.update(chunk)
          got += len(chunk)
          bar.update(len(chunk))
      if length and not gunzip and got != length: raise OSError(f"fetch: incomplete download of {url}: {got} of {length} bytes")
      if sha256 and h.hexdigest() != sha256.lower(): raise OSError(f"fetch: {url} has sha256 {h.hexdigest()}, expected {sha256}: not stored")
      os.replace(tmp, dest)
    finally:
      if os.path.exists(tmp): os.unlink(tmp)

def _sha256_of(path: pathlib.Path) -> str:
  h = hashlib.sha256()
  with open(path, "rb") as f:
    while chunk := f.read(1 << 20): h.update(chunk)
  return h.hexdigest()

class FormatError(ValueError):
  """A file that is malformed, or that asks for what a loader refuses (a global other than tensors and containers,
  more memory than its size justifies). A ValueError; the message names the file and the problem."""

def safe_extract(tar_path: str, dest: str, max_bytes: int = 1 << 30, max_members: int = 10_000):
  """Extract the regular files and folders of a tar archive into `dest`. Refuses (FormatError, a ValueError) links,
  devices, names that would land outside `dest`, and archives whose members add up to more than `max_bytes` or
  number more than `max_members` (a small gzip of zeros must not fill the disk). Extracts into a temporary folder
  first, then moves the top-level entries."""
  os.makedirs(dest, exist_ok=True)
  tmp = tempfile.mkdtemp(dir=dest, prefix=".extract.")
  total = 0
  try:
    with tarfile.open(tar_path, "r:*") as tf:
      for count, m in enumerate(tf, 1):
        parts = [p for p in m.name.replace("\\", "/").split("/") if p not in ("", ".")]
        if m.name.startswith(("/", "\\")) or ".." in parts or ":" in m.name or not (m.isfile() or m.isdir()):
          raise FormatError(f"{tar_path}: refusing unsafe archive member {m.name!r}")
        if count > max_members or (total := total + m.size) > max_bytes:   # (tar headers declare each member's size)
          raise FormatError(f"{tar_path}: the archive holds more than {max_members} members or {max_bytes} bytes: refused")
        if not parts: continue
        target = os.path.join(tmp, *parts)
        if m.isdir(): os.makedirs(target, exist_ok=True); continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with tf.extractfile(m) as src, open(target, "wb") as dst: shutil.copyfileobj(src, dst)
    for entry in os.listdir(tmp):
      old = os.path.join(dest, entry)
      if os.path.isdir(old) and not os.path.islink(old): shutil.rmtree(old)
      os.replace(os.path.join(tmp, entry), old)
  finally: shutil.rmtree(tmp, ignore_errors=True)

def fetch(url: str, name: Optional[pathlib.Path | str] = None, subdir: Optional[str] = None, gunzip: bool = False,
          allow_caching: bool = not getenv("DISABLE_HTTP_CACHE"), headers: Optional[dict[str, str]] = None,
          sha256: Optional[str] = None, extract: bool = False) -> pathlib.Path:
  """The path of `url`'s contents (http, https or file://), downloaded once into the cache: <cache>/downloads/[subdir/]
  name, where name defaults to the md5 of the url (plus one of the headers, and '.gunzip' when gunzip), or to the path
  `name` if it is a Path or has a '/'. A cached file is used unless allow_caching is false (DISABLE_HTTP_CACHE=1) or it
  does not have the given sha256. A url starting with '/' or '.' is a local path, returned as is. gunzip: keep the
  decompressed contents. extract: unpack the (tar) archive into '<file>.extract' beside it and return that folder."""
  if url.startswith(("/", ".")): return pathlib.Path(url)
  if name is not None and (isinstance(name, pathlib.Path) or "/" in name): path = pathlib.Path(name)
  else:
    tag = "_" + hashlib.md5("\n".join(f"{k.strip()}:{v.strip()}" for k, v in sorted(headers.items())).encode()).hexdigest() if headers else ""
    path = pathlib.Path(cache_dir()) / "downloads" / (subdir or "") / ((name or hashlib.md5(url.encode()).hexdigest()) + tag + (".gunzip" if gunzip else ""))
  if not path.is_file() or not allow_caching or (sha256 and _sha256_of(path) != sha256.lower()):
    download(url, path, gunzip=gunzip, sha256=sha256, headers=headers)
  if not extract: return path
  folder = path.parent / f"{path.name}.extract"
  if not folder.is_dir() or not allow_caching:
    tmp = pathlib.Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.extract."))
    try:
      safe_extract(str(path), str(tmp))
      shutil.rmtree(folder, ignore_errors=True)
      os.replace(tmp, folder)
    finally: shutil.rmtree(tmp, ignore_errors=True)
  return folder
