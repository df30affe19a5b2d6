"""Devices: the registry, buffers and the small interface every runtime implements.

A runtime (one module in `tinyweb.backends`) provides a `Compiled` device made of:
- an `Allocator`: alloc(nbytes) -> opaque handle, free(handle, nbytes), copyin(handle, memoryview), copyout(memoryview, handle)
  and optionally as_memoryview(handle, nbytes) for zero-copy host access;
- a `Renderer` (tinyweb.codegen.renderer declares its fields) that turns a linear kernel program into source code;
- a `Compiler`: compile(source) -> bytes (results cached by the base class on disk and in memory);
- a program class: Program(device, name, lib) and program(*buffers, global_size=..., wait=bool) -> seconds or None;
- optionally flush(): start launches recorded so far (called at the end of each realize and TinyJit replay).
Register a new device with `Device.register("NAME", "module.path:ClassName")`, `Device["NAME"] = DeviceClass` (created
with its name on first use, like the built-in devices) or `Device["NAME"] = instance`.
A device with `is_fallback = True` (PYTHON, the interpreter) is the default only where no other device works.

Threads: each device has a re-entrant `lock`; a runtime whose queue or command state is not safe to share between
threads (WEBGPU's recorded compute pass, an OpenCL kernel's arguments) takes it around that state, and the base classes
take it around allocation and program loading. Compilers that are not `thread_safe` compile one source at a time.
Fork: a device whose runtime survives os.fork() (`fork_safe = True`: CPU, LLVM, PYTHON) keeps working in a forked
child; any other device that the parent had started is refused there with a RuntimeError (see `_DeviceRegistry`).
"""
from __future__ import annotations
import itertools
import glob, hashlib, importlib, os, sys, warnings, weakref
from collections import defaultdict
from typing import Any, Optional
from tinyweb.dtype import DType
from tinyweb.helpers import GlobalCounters, cache_dir, getenv, fork_safe_lock, at_fork, write_cache_file

class IdWeakSet:
  """A weak set compared by identity (Tensor.__eq__ builds a tensor, so weakref.WeakSet cannot hold tensors)."""
  def __init__(self): self.refs: dict = {}
  def add(self, x):
    key = id(x)
    if key not in self.refs: self.refs[key] = weakref.ref(x, lambda _, key=key: self.refs.pop(key, None))
  def __contains__(self, x) -> bool: return id(x) in self.refs and self.refs[id(x)]() is x
  def __iter__(self): return iter([x for r in list(self.refs.values()) if (x := r()) is not None])

class Allocator:
  """Base allocator with a free-list: freed buffers are kept by size and handed out again. Threads may share it: each
  list operation is atomic, and no list is read and changed in two steps."""
  def __init__(self): self.cache: dict[int, list] = defaultdict(list)
  def alloc(self, nbytes: int):
    try: return self.cache[nbytes].pop()
    except IndexError: return self._alloc(nbytes)
  def free(self, handle, nbytes: int): self.cache[nbytes].append(handle)
  def free_cache(self):
    for nbytes, hs in list(self.cache.items()):
      while True:
        try: h = hs.pop()
        except IndexError: break
        self._free(h, nbytes)
  def _alloc(self, nbytes: int): raise NotImplementedError
  def _free(self, handle, nbytes: int): pass
  def copyin(self, handle, src: memoryview): raise NotImplementedError
  def copyout(self, dst: memoryview, handle): raise NotImplementedError
  as_memoryview = None   # optional: (handle, nbytes) -> memoryview without a copy
  copyout_async = None   # optional: async (dst memoryview, handle), for runtimes that cannot block (the browser without JSPI)
  wrap = None            # optional: (writable memoryview) -> handle using that memory without a copy

class Compiler:
  """Turns source into a loadable binary. Results are cached in memory and on disk, keyed by the source hash."""
  cache_key: Optional[str] = None   # set to enable the disk cache (include the compiler and flags in it)
  batch_sources = False   # True: several kernels' sources joined compile to one binary holding each kernel by its name
  thread_safe = False     # True: compile() may run in several threads at once (engine.compile_ahead overlaps them)
  def __init__(self):
    self.mem: dict[str, bytes] = {}
    self.lock = fork_safe_lock()   # held around compile() unless thread_safe
  def _disk_path(self, h: str) -> Optional[str]:
    return os.path.join(cache_dir(), "kernels", f"{h}.bin") if self.cache_key and not getenv("DISABLE_COMPILER_CACHE") else None
  def _hash(self, src: str) -> str: return hashlib.sha256(((self.cache_key or "") + "\0" + src).encode()).hexdigest()
  def cached(self, src: str) -> Optional[bytes]:
    """The binary of `src` from the memory or disk cache, or None."""
    h = self._hash(src)
    if (lib := self.mem.get(h)) is None and (path := self._disk_path(h)) and os.path.exists(path):
      with open(path, "rb") as f: lib = self.mem[h] = f.read()
    return lib
  def store(self, src: str, lib: bytes):
    h = self._hash(src)
    self.mem[h] = lib
    if path := self._disk_path(h): write_cache_file(path, lib)
  def compile_cached(self, src: str) -> bytes:
    if (lib := self.cached(src)) is None: self.store(src, lib := self.compile_one(src))
    return lib
  def compile_one(self, src: str) -> bytes:
    """compile(src), one at a time unless the compiler is thread_safe (llvmlite's shared LLVM context is not)."""
    if self.thread_safe: return self.compile(src)
    with self.lock: return self.compile(src)
  def compile_many(self, srcs: list[str]) -> list:
    """Each source's binary, or the exception compiling it raised. With `batch_sources` the sources are compiled joined,
    in one compiler run (its start-up is paid once); if that fails, one by one. Not cached (see compile_cached)."""
    def one(src: str):
      try: return self.compile_one(src)
      except Exception as e: return e
    lib = one("\n".join(srcs)) if self.batch_sources and len(srcs) > 1 else None
    return [lib] * len(srcs) if isinstance(lib, bytes) else [one(s) for s in srcs]
  def compile(self, src: str) -> bytes: raise NotImplementedError

class Compiled:
  """A device that compiles kernels. Subclasses pass their allocator, renderer, compiler and program class."""
  fork_safe = False   # True: the runtime keeps working in a child made by os.fork() after the parent used it
  def __init__(self, name: str, allocator: Allocator, renderer, compiler: Compiler, program_cls):
    self.name, self.allocator, self.renderer, self.compiler, self.program_cls = name, allocator, renderer, compiler, program_cls
    # source -> its loaded program, while a kernel (the kernel cache, a TinyJit) holds it: one load per source, and
    # unloaded once nothing can launch it (a CPU kernel is a shared object, and a process can map only so many)
    self.programs: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
    self.lock = fork_safe_lock()   # the device's queue and state: one thread at a time (see the module docstring)
  def get_program(self, name: str, src: str):
    if (p := self.programs.get(src)) is None:
      lib = self.compiler.compile_cached(src)
      with self.lock:
        if (p := self.programs.get(src)) is None: p = self.programs[src] = self.program_cls(self, name, lib)
    return p
  def check_dtype(self, dt: DType, what: str = ""):
    """TypeError naming this device where it cannot hold or compute dt (WEBGPU: no 64-bit types). Its code generator
    declares what it refuses (Renderer.unsupported); buffers and tensors ask the device."""
    self.renderer.check_dtype(dt, what)
  def has_dtype(self, dt: DType) -> bool: return dt not in self.renderer.unsupported
  def synchronize(self): pass
  def flush(self):
    """Start the work launched so far. A device that records launches into one command batch (WEBGPU) submits it here;
    the engine calls this at the end of every realize and TinyJit replay."""

_buffer_serials = itertools.count()

class Buffer:
  """`size` elements of `dtype` on a device. Memory is allocated on first use and returned to the pool when freed."""
  def __init__(self, device: str, size: int, dtype: DType):
    Device[device].check_dtype(dtype, "buffer")
    self.device, self.size, self.dtype = device, size, dtype
    self._handle = None
    self.writes = self.stores = 0   # see mark_written
    self.holders = IdWeakSet()   # the Tensors whose value this buffer is (see Tensor._owns)
    # an intermediate value of one schedule (not a target, not an assign's buffer): nothing outside that schedule can
    # read it, so the schedule releases it after its last reader, and TinyJit shares its memory (see schedule.py)
    self.transient = False
    # creation order: TinyJit tells buffers made before its capture (state that launches update, as an optimizer step
    # does: TinyJit.state, which prune=True and tinyweb.export use) from those the capture made
    self.serial = next(_buffer_serials)
  @property
  def nbytes(self) -> int: return self.size * self.dtype.itemsize
  @property
  def allocated(self) -> bool: return self._handle is not None
  def ensure_allocated(self) -> Buffer:
    if self._handle is None:
      dev = Device[self.device]
      with dev.lock:   # (threads realizing graphs that share this buffer: one allocates it)
        if self._handle is None:
          self._handle = dev.allocator.alloc(max(self.nbytes, 1))
          GlobalCounters.mem_used += self.nbytes
          GlobalCounters.mem_peak = max(GlobalCounters.mem_peak, GlobalCounters.mem_used)
    return self
  @property
  def handle(self): return self.ensure_allocated()._handle
  @staticmethod
  def from_host(device: str, mv: memoryview, dtype: DType) -> Buffer:
    """A buffer holding the bytes of `mv`: shares the memory where the device can (CPU, writable mv), else copies."""
    mv = memoryview(mv).cast("B")
    buf = Buffer(device, mv.nbytes // dtype.itemsize, dtype)
    alloc = Device[device].allocator
    if alloc.wrap is not None and not mv.readonly and mv.nbytes > 0:
      buf._handle, buf._external = alloc.wrap(mv), True
      return buf
    return buf.copyin(mv)
  def release(self):
    """Give the memory back to the device's pool now (it is allocated again on next use, with other contents)."""
    # (an _external buffer's memory is owned by someone else: only the reference goes)
    if getattr(self, "_handle", None) is not None and not getattr(self, "_external", False):
      try: Device[self.device].allocator.free(self._handle, max(self.nbytes, 1))
      except Exception: pass
      GlobalCounters.mem_used -= self.nbytes
    self._handle = None
  def __del__(self): self.release()
  def copyin(self, src: memoryview) -> Buffer:
    src = memoryview(src).cast("B")
    if src.nbytes != self.nbytes: raise ValueError(f"copyin: {src.nbytes} bytes into a buffer of {self.nbytes}")
    if self.nbytes: Device[self.device].allocator.copyin(self.handle, src)
    return self.mark_written()
  def mark_written(self, by_schedule: bool = False) -> Buffer:
    """Every path that writes the buffer's contents calls this: the counters below are what RealizedCache (schedule.py)
    checks a cached value against, so a write that is not marked leaves stale values. `stores` counts every write (a
    cached value that lives in this buffer compares it: an in-place assign into the buffer replaces that value);
    `writes` counts the writes behind the graph's back (copyin, TinyJit replays; a cached value that reads the buffer
    compares it). A kernel of a schedule (`by_schedule`) needs no count in `writes`: an assign gives the tensor a new
    BUFFER version, so later graphs differ from the cached ones."""
    self.stores += 1
    if not by_schedule: self.writes += 1
    return self
  def as_memoryview(self) -> memoryview:
    """Host-visible bytes of the buffer: zero-copy where the device allows, otherwise a copy."""
    alloc = Device[self.device].allocator
    if self.nbytes == 0: return memoryview(bytearray(0))
    if alloc.as_memoryview is not None: return alloc.as_memoryview(self.handle, self.nbytes)
    out = bytearray(self.nbytes)
    alloc.copyout(memoryview(out), self.handle)
    return memoryview(out)
  async def as_memoryview_async(self) -> memoryview:
    """A copy of the bytes, awaiting the runtime's asynchronous readback where it has one."""
    alloc = Device[self.device].allocator
    if alloc.copyout_async is None or self.nbytes == 0: return memoryview(bytes(self.as_memoryview()))
    out = bytearray(self.nbytes)
    await alloc.copyout_async(memoryview(out), self.handle)
    return memoryview(out)
  def __repr__(self): return f"<Buffer {self.device} {self.size} {self.dtype.name}>"

def gpu_present() -> bool:
  """Whether this machine shows a GPU, from device files alone (no runtime imported or started): a DRM render node (Linux
  GPUs), an NVIDIA device file, WSL's /dev/dxg. Always on macOS, Windows and in the browser, whose GPU runtimes (Metal,
  Direct3D, navigator.gpu) cannot be seen that cheaply."""
  if sys.platform in ("darwin", "win32", "emscripten"): return True
  return bool(glob.glob("/dev/dri/renderD*") or glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/dxg"))

# device -> (the Python package its runtime imports, the extra of tinyweb that installs it); the one place that advice lives
RUNTIME_PACKAGES = {"WEBGPU": ("wgpu", "webgpu"), "CL": ("pyopencl", "opencl"), "LLVM": ("llvmlite", "llvm"),
                    "CUDA": ("nvidia.cuda_nvrtc", "cuda"), "WASM": ("wasmtime", "wasm")}

def install_hint(device: str, e: Exception) -> str:
  """What Device.check adds to the reason a device failed: the extra of tinyweb to install, where `e` is the import of the
  package the device's runtime needs failing; else nothing."""
  module, extra = RUNTIME_PACKAGES.get(device, ("", ""))
  if not (module and isinstance(e, ImportError) and e.name and (module == e.name or module.startswith(e.name + "."))): return ""
  return f"; install tinyweb[{extra}]: pip install 'tinyweb[{extra}]'"

class _DeviceRegistry:
  """`Device["CPU"]` gives the device object (created on first use); `Device.DEFAULT` is the default device's name."""
  def __init__(self):
    self._specs: dict[str, Any] = {}   # name -> 'module.path:ClassName', or the Compiled subclass itself
    self._gpu_runtimes: set[str] = set()
    self._instances: dict[str, Compiled] = {}
    self._failures: dict[str, str] = {}
    self._default: Optional[str] = None
    self.default_reason = ""   # why DEFAULT is the device it is (set with it)
    self._lock = fork_safe_lock()   # creating a device: one thread at a time
    self._held_at_fork: list = []
  def register(self, name: str, spec: str, gpu: bool = False):
    """spec: 'module.path:ClassName'; the module is imported only when the device is first used. gpu: a runtime for GPUs,
    tried first for Device.DEFAULT where the machine shows a GPU."""
    self._specs[name.upper()] = spec
    if gpu: self._gpu_runtimes.add(name.upper())
  def __setitem__(self, name: str, dev):
    """`Device["NAME"] = MyDevice` (a Compiled subclass: created as MyDevice("NAME") on first use) or a device instance."""
    name = name.upper()
    if isinstance(dev, type) and issubclass(dev, Compiled):
      self._specs[name] = dev
      self._instances.pop(name, None)
      self._failures.pop(name, None)
    elif isinstance(dev, Compiled): self._instances[name] = dev
    else: raise TypeError(f"Device[{name!r}] = ...: expected a subclass of tinyweb.device.Compiled (created with the name on first use) "
                          f"or an instance of one, got {dev!r}")
  def canonicalize(self, name: Optional[str]) -> str:
    if name is None: return self.DEFAULT
    if type(name) is str and (name in self._instances or name in self._specs): return name   # (already canonical: most calls)
    n = str(name).upper().split(":")[0]
    if n not in self._specs and n not in self._instances:
      raise ValueError(f"unknown device {name!r}; known devices: {self.known()}")
    return n
  def known(self) -> list[str]: return list(dict.fromkeys([*self._specs, *self._instances]))
  def __getitem__(self, name: str) -> Compiled:
    if type(name) is str and (dev := self._instances.get(name)) is not None: return dev   # (a device in use, by its own name)
    name = self.canonicalize(name)
    if name not in self._instances:
      ok, why = self.check(name)
      if not ok: raise RuntimeError(f"device {name} is not available here: {why}")
    return self._instances[name]
  def check(self, name: str) -> tuple[bool, str]:
    """(True, "") when the device can be used here, else (False, the reason). Creates the device on first use."""
    name = name.upper()
    if name in self._instances: return True, ""
    with self._lock:
      if name in self._instances: return True, ""
      if name in self._failures: return False, self._failures[name]
      if name not in self._specs: return False, f"unknown device; known: {self.known()}"
      spec = self._specs[name]
      try:
        if isinstance(spec, str):
          mod, cls = spec.split(":")
          spec = getattr(importlib.import_module(mod), cls)
        self._instances[name] = spec(name)
      except Exception as e:
        self._failures[name] = f"{type(e).__name__}: {e}{install_hint(name, e)}"
        return False, self._failures[name]
    return True, ""
  def available(self) -> list[str]: return [n for n in self.known() if self.check(n)[0]]
  @property
  def DEFAULT(self) -> str:
    if self._default is None: self._default, self.default_reason = self._pick_default()
    return self._default
  @DEFAULT.setter
  def DEFAULT(self, name: str):
    self._default, self.default_reason = self.canonicalize(name), "set by the program (Device.DEFAULT = ...)"
  def _pick_default(self) -> tuple[str, str]:
    """(the default device, why). $DEV if set. Else the first device, in registration order, that works here, creating
    only the devices it tries: one on a real GPU first (GPU runtimes are tried only where gpu_present(): a machine
    without a GPU imports and starts nothing but the device that wins), then one that is not a GPU runtime (CPU, LLVM:
    code compiled for this CPU), then a GPU runtime on an emulated adapter (lavapipe, SwiftShader, PoCL: it runs on the
    CPU too, slower than native code), then a fallback, with a notice why."""
    if (env := os.getenv("DEV")): return self.canonicalize(env), "$DEV chooses it"
    gpu = gpu_present()
    for name in self.known():
      if (name in self._instances or (gpu and name in self._gpu_runtimes)) and self.check(name)[0] and \
         getattr(self._instances[name], "is_real_gpu", False): return name, "the first device that runs on a real GPU"
    fallback, no_gpu = None, "no device runs on a real GPU here" if gpu else "this machine shows no GPU"
    for gpu_runtime, why in ((False, f"{no_gpu}; it is the first device that compiles for this CPU"),
                             (True, f"{no_gpu} and no device compiles for this CPU; it is the first GPU runtime that works, "
                                    "on an emulated (CPU) adapter")):
      for name in self.known():
        if (name in self._gpu_runtimes) != gpu_runtime or not self.check(name)[0]: continue
        if not getattr(self._instances[name], "is_fallback", False): return name, why
        fallback = fallback or name
    if fallback is None: raise RuntimeError(f"no device is available: {self._failures}")
    if self._failures:
      warnings.warn(f"tinyweb: the default device is {fallback}, a slow fallback: no other device works here ({self._failures})")
    return fallback, "the fallback: no other device works here" if self._failures else "the only device"
  def _before_fork(self):
    """Wait until no thread is creating a device or inside a fork-safe device's runtime (loading a program, compiling:
    llvmlite holds LLVM's own locks there, which the child would find held forever) and keep it so until the fork is
    done."""
    self._held_at_fork = [self._lock] + [lock for dev in list(self._instances.values()) if getattr(dev, "fork_safe", False)
                                         for lock in (dev.lock, dev.compiler.lock)]
    for lock in self._held_at_fork: lock.acquire()
  def _after_fork_in_parent(self):
    for lock in reversed(self._held_at_fork): lock.release()
  def _forked(self):
    """In a child made by os.fork(): the devices the parent had started whose runtime does not survive a fork (driver
    threads, contexts and queues do not: they hang or fail in the child) are refused from now on, with the reason."""
    for name, dev in list(self._instances.items()):
      if not getattr(dev, "fork_safe", False):
        del self._instances[name]
        self._failures[name] = (f"the parent process had started {name} before os.fork(), and its runtime (driver threads, "
                                f"contexts, queues) does not survive a fork: use {name} in a process started with "
                                "multiprocessing's 'spawn' or 'forkserver' start method, or fork before the parent first uses it")

Device = _DeviceRegistry()
at_fork(before=Device._before_fork, after_in_parent=Device._after_fork_in_parent, after_in_child=Device._forked)
Device.register("CPU", "tinyweb.backends.cpu:CPUDevice")
Device.register("CUDA", "tinyweb.backends.cuda:CUDADevice", gpu=True)   # before WEBGPU: on an NVIDIA GPU both are real, CUDA is native
Device.register("WEBGPU", "tinyweb.backends.webgpu_browser:BrowserWebGPUDevice" if sys.platform == "emscripten" else
                "tinyweb.backends.webgpu:WEBGPUDevice", gpu=True)   # ranks first only on a real GPU adapter; on lavapipe after CPU and LLVM; in Pyodide: navigator.gpu
Device.register("CL", "tinyweb.backends.cl:CLDevice", gpu=True)      # likewise: PoCL (OpenCL on the CPU) never ranks first
Device.register("LLVM", "tinyweb.backends.llvm:LLVMDevice")       # LLVM IR through llvmlite's JIT; after CPU, before a GPU runtime on the CPU
Device.register("WASM", "tinyweb.backends.wasm_browser:BrowserWASMDevice" if sys.platform == "emscripten" else
                "tinyweb.backends.wasm:WASMDevice")   # natively run by wasmtime, after CPU and LLVM (native code is faster); in Pyodide the browser's engine
Device.register("PYTHON", "tinyweb.backends.python:PythonDevice")   # last: the pure-Python fallback, always available
