"""The WASM device, natively: kernels rendered to WebAssembly (tinyweb/codegen/wasm.py: text, assembled to the binary
format in pure Python) and run by the `wasmtime` engine (Cranelift compiles each module to machine code, which the
kernel cache keeps on disk: WASMCompiler).

Memory: one linear memory per device (a wasmtime Memory, grown as needed up to wasm32's 4 GiB) holds every buffer; a
buffer is its byte address in it, and every kernel module imports that memory, so a launch passes addresses and copies
nothing. Copies in and out go through the memory's host pointer. The kernels are single-threaded (no split across cores
yet); register-tiled reductions (matmuls) compute four outputs at a time in SIMD128's f32x4 (codegen/vectors.py).

The math wasm lacks and the module does not compute itself (fmod; sin and cos past 2^28; float64 sin, cos, exp2 and
log2; see codegen/wasm.py) is imported from Python (tinyweb.scalar: the PYTHON device's functions, with C's answers at
the special values): correct, but a call into Python per element (about a microsecond).

Never the default where CPU or LLVM works: it ranks after them (registered after them in tinyweb/device.py)."""
from __future__ import annotations
import bisect, ctypes, hashlib, importlib.metadata, platform, time
from tinyweb.device import Allocator, Compiler, Compiled
from tinyweb.uop import Ops
from tinyweb.codegen import wasm as wasm_codegen
from tinyweb.codegen.wasm import WASMRenderer, assemble, IMPORTED_MATH, ALIGN, PAGE, MAX_PAGES
from tinyweb import scalar

class WASMAllocator(Allocator):
  """Buffers as byte ranges of the device's memory: first fit in the free ranges (merged with their neighbours), else at
  the top, growing the memory. A handle is the buffer's address. The device (wasmtime's here, the browser's in
  wasm_browser.py) reads, writes and grows its memory: memory_pages(), grow_memory(pages), write(), read()."""
  def __init__(self, dev: WASMDevice):
    super().__init__()
    self.dev = dev
    self.top = ALIGN   # (address 0 stays unused: no buffer is at "null")
    self.free_ranges: list[tuple[int, int]] = []   # (address, size), sorted
  def _alloc(self, nbytes: int) -> int:
    size = -(-nbytes // ALIGN) * ALIGN
    with self.dev.lock:
      for i, (addr, n) in enumerate(self.free_ranges):
        if n >= size:
          self.free_ranges[i:i + 1] = [(addr + size, n - size)] if n > size else []
          return addr
      addr, end = self.top, self.top + size
      if end > MAX_PAGES * PAGE:
        self.free_cache()
        if self.top + size > MAX_PAGES * PAGE:
          raise MemoryError(f"WASM: a buffer of {nbytes} bytes does not fit: the memory holds at most 4 GiB "
                            f"(wasm32), {self.top - sum(n for _, n in self.free_ranges)} bytes are in use")
        return self._alloc(nbytes)
      pages = self.dev.memory_pages()
      if end > pages * PAGE: self.dev.grow_memory(-(-end // PAGE) - pages)
      self.top = end
      return addr
  def _free(self, handle: int, nbytes: int):
    size = -(-nbytes // ALIGN) * ALIGN
    with self.dev.lock:
      i = bisect.bisect(self.free_ranges, (handle, size))
      self.free_ranges.insert(i, (handle, size))
      # merge with the neighbours, then give the top range back to the top
      if i + 1 < len(self.free_ranges) and handle + size == self.free_ranges[i + 1][0]:
        self.free_ranges[i:i + 2] = [(handle, size + self.free_ranges[i + 1][1])]
      if i > 0 and self.free_ranges[i - 1][0] + self.free_ranges[i - 1][1] == handle:
        self.free_ranges[i - 1:i + 1] = [(self.free_ranges[i - 1][0], self.free_ranges[i - 1][1] + self.free_ranges[i][1])]
      if self.free_ranges and sum(self.free_ranges[-1]) == self.top: self.top = self.free_ranges.pop()[0]
  def copyin(self, handle: int, src: memoryview):
    with self.dev.lock: self.dev.write(handle, src)
  def copyout(self, dst: memoryview, handle: int):
    with self.dev.lock: self.dev.read(dst, handle)

class WASMCompiler(Compiler):
  """WebAssembly text -> the binary format (tinyweb's own assembler, pure Python) -> machine code (wasmtime's Cranelift,
  serialized): what the kernel cache keeps, in memory and on disk, so a second process loads each kernel's code
  instead of assembling and compiling it again. The key names wasmtime's version, this machine's architecture and
  the assembler's source (a changed assembler makes other binaries)."""
  thread_safe = True   # (a wasmtime Engine compiles in any thread)
  def __init__(self, engine, wasmtime):
    super().__init__()
    self.engine, self.wasmtime = engine, wasmtime
    with open(wasm_codegen.__file__, "rb") as f: assembler = hashlib.sha256(f.read()).hexdigest()[:16]
    self.cache_key = f"wasmtime {importlib.metadata.version('wasmtime')} {platform.machine()} assembler {assembler}"
  def compile(self, src: str) -> bytes:
    try: binary = assemble(src)
    except (ValueError, KeyError, IndexError) as e: raise RuntimeError(f"WASM: cannot assemble a kernel: {e!r}\n--- source ---\n{src}") from e
    try: return bytes(self.wasmtime.Module(self.engine, binary).serialize())
    except self.wasmtime.WasmtimeError as e: raise RuntimeError(f"WASM: wasmtime refused a kernel: {e}\n--- source ---\n{src}") from e

class WASMProgram:
  """One kernel: its module, compiled by wasmtime and instantiated with the device's memory and math."""
  def __init__(self, dev: WASMDevice, name: str, lib: bytes):
    wasmtime = dev.wasmtime
    self.dev = dev
    try: module = wasmtime.Module.deserialize(dev.engine, lib)
    except wasmtime.WasmtimeError as e:
      raise RuntimeError(f"WASM: kernel {name}'s compiled code does not load ({e}): a kernel cache from another wasmtime? "
                         "DISABLE_COMPILER_CACHE=1 compiles it again") from e
    imports = [dev.memory if imp.module == "env" else dev.math[imp.name] for imp in module.imports]
    self.fxn = wasmtime.Instance(dev.store, module, imports).exports(dev.store)[name]
  def __call__(self, *bufs, global_size=None, parallel: int = 0, work: int = 0, wait=False):
    with self.dev.lock:   # (a wasmtime Store is one thread's at a time)
      st = time.perf_counter()
      self.fxn(self.dev.store, *bufs)
      return time.perf_counter() - st if wait else None

class WASMDevice(Compiled):
  fork_safe = False   # (wasmtime's engine keeps threads and signal handlers)
  def __init__(self, name: str = "WASM"):
    import wasmtime   # (missing: Device.check names the extra that installs it)
    self.wasmtime = wasmtime
    self.engine = wasmtime.Engine()
    self.store = wasmtime.Store(self.engine)
    self.memory = wasmtime.Memory(self.store, wasmtime.MemoryType(wasmtime.Limits(1, MAX_PAGES)))
    f64 = wasmtime.ValType.f64()
    self.math = {n: wasmtime.Func(self.store, wasmtime.FuncType([f64] * (2 if op is Ops.MOD else 1), [f64]), scalar.ALU[op])
                 for op, n in IMPORTED_MATH.items()}
    super().__init__(name, WASMAllocator(self), WASMRenderer(), WASMCompiler(self.engine, wasmtime), WASMProgram)

  # the memory, for WASMAllocator
  def memory_pages(self) -> int: return self.memory.size(self.store)
  def grow_memory(self, pages: int): self.memory.grow(self.store, pages)
  def _host_address(self, addr: int) -> int:   # (the memory may move when it grows: asked each time)
    return ctypes.addressof(self.memory.data_ptr(self.store).contents) + addr
  def write(self, addr: int, src: memoryview):
    ctypes.memmove(self._host_address(addr), bytes(src) if src.readonly else (ctypes.c_char * src.nbytes).from_buffer(src), src.nbytes)
  def read(self, dst: memoryview, addr: int):
    ctypes.memmove((ctypes.c_char * dst.nbytes).from_buffer(dst), self._host_address(addr), dst.nbytes)
