"""The WASM device inside the browser (Pyodide): the kernels codegen/wasm.py writes (text assembled to the binary format
in pure Python, as natively) compiled and run by the browser's own WebAssembly engine through Pyodide's FFI. In
Pyodide (sys.platform == "emscripten") the name WASM means this runtime; it is the default device where WebGPU is
missing or runs on a fallback adapter (SwiftShader: a CPU emulating a GPU, far slower than this).

- Memory: one WebAssembly.Memory of its own (not Pyodide's) holds every buffer (backends/wasm.py's WASMAllocator: a
  buffer is its address); every kernel module imports it, so a launch passes addresses and copies nothing. Copies in
  and out are one typed-array copy between it and Python's memory.
- Compiling: `new WebAssembly.Module`, synchronously (Chromium allows it on the page's main thread up to 8 MB: kernels
  are a few KB).
- Math the module does not compute itself (see codegen/wasm.py) is JavaScript's Math, on doubles, as in exported models
  (web/model_wasm.ts).
"""
from __future__ import annotations
import time
from pyodide.code import run_js
from pyodide.ffi import JsException, to_js
from tinyweb.device import Compiler, Compiled
from tinyweb.codegen.wasm import WASMRenderer, assemble, PAGE, MAX_PAGES
from tinyweb.backends.wasm import WASMAllocator

_js = run_js("""({
  memory: (maximum) => new WebAssembly.Memory({initial: 1, maximum}),
  // (JavaScript's % on numbers is C's fmod: the exact remainder with the dividend's sign)
  math: {sin: Math.sin, cos: Math.cos, log2: Math.log2, exp2: (x) => 2 ** x, fmod: (a, b) => a % b},
  bytes: (memory, addr, n) => new Uint8Array(memory.buffer, addr, n),   // (the buffer is new after each grow: asked each time)
  module: (binary) => new WebAssembly.Module(binary),
  copy: (memory, addr, array) => new Uint8Array(memory.buffer, addr, array.byteLength).set(new Uint8Array(array.buffer, array.byteOffset, array.byteLength)),
  instance: (module, memory, math) => new WebAssembly.Instance(module, {env: {memory}, math}),
})""")

class BrowserWASMAllocator(WASMAllocator):
  def copyin_js(self, handle: int, array):
    """Upload a JavaScript typed array without a copy through Python's memory (web/host.ts's tensor())."""
    _js.copy(self.dev.memory, handle, array)

class BrowserWASMCompiler(Compiler):
  """WebAssembly text -> the binary format (tinyweb's assembler); the browser compiles it when the program is made."""
  def compile(self, src: str) -> bytes:
    try: return assemble(src)
    except (ValueError, KeyError, IndexError) as e: raise RuntimeError(f"WASM: cannot assemble a kernel: {e!r}\n--- source ---\n{src}") from e

class BrowserWASMProgram:
  def __init__(self, dev: BrowserWASMDevice, name: str, lib: bytes):
    try: module = _js.module(to_js(lib))
    except JsException as e: raise RuntimeError(f"WASM: the browser refused kernel {name}: {e}") from e
    self.fxn = getattr(_js.instance(module, dev.memory, _js.math).exports, name)
  def __call__(self, *bufs, global_size=None, parallel: int = 0, work: int = 0, wait=False):
    st = time.perf_counter()
    self.fxn(*bufs)
    return time.perf_counter() - st if wait else None

class BrowserWASMDevice(Compiled):
  def __init__(self, name: str = "WASM"):
    self.memory = _js.memory(MAX_PAGES)
    super().__init__(name, BrowserWASMAllocator(self), WASMRenderer(), BrowserWASMCompiler(), BrowserWASMProgram)

  # the memory, for WASMAllocator
  def memory_pages(self) -> int: return self.memory.buffer.byteLength // PAGE
  def grow_memory(self, pages: int):
    try: self.memory.grow(pages)
    except JsException as e:
      raise MemoryError(f"WASM (browser): the memory cannot grow by {pages * PAGE} bytes to {(self.memory_pages() + pages) * PAGE} "
                        f"({e}): the browser gives this page no more") from e
  def write(self, addr: int, src: memoryview): _js.bytes(self.memory, addr, src.nbytes).assign(src)
  def read(self, dst: memoryview, addr: int): _js.bytes(self.memory, addr, dst.nbytes).assign_to(dst)
