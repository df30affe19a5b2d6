"""The WEBGPU device inside the browser (Pyodide): the same WGSL kernels as the native device, run through
`navigator.gpu` with Pyodide's FFI. In Pyodide (sys.platform == "emscripten") the name WEBGPU means this runtime.

- The adapter and device are requested by `await open_device()` (web/tinyweb.ts calls it while booting, so it works
  without JSPI); if nobody did, creating the device requests them itself with `pyodide.ffi.run_sync` (JSPI).
- Reading values (`.tolist()`, `.item()`, `.data()`, `.numpy()`) blocks on `mapAsync` through `run_sync`, which works
  when the Python code was started by `runPythonAsync` in a browser with JSPI (Chromium). Elsewhere, read with
  `await t.data_async()` / `await t.tolist_async()`: the same readback, awaited.
- Launches are recorded into one command encoder and submitted together: before any write, read or wait, and every
  `BATCH` kernels. Each submitted batch runs inside a `validation` error scope; the scopes are checked before values
  are read, and a validation error becomes a RuntimeError naming the kernels of that batch. Pipeline creation is
  checked at once when JSPI is there (the error names the kernel and shows its source), else at the next read.
- Uploads pass a view of Python's memory to `queue.writeBuffer` (no copy on the Python side), or a JavaScript typed
  array as it is (`copyin_js`, used by web/tinyweb.ts); downloads map a staging buffer and copy its bytes straight into
  the destination.
"""
from __future__ import annotations
import json, time
import js
from pyodide.code import run_js
from pyodide.ffi import run_sync, can_run_sync, to_js
from tinyweb.device import Allocator
from tinyweb.backends.webgpu_shared import OPTIONAL_FEATURES, LIMITS, WebGPUDeviceBase, camel, padded_size

BATCH = 64   # kernels recorded into one command encoder before it is submitted
STORAGE, COPY_SRC, COPY_DST, MAP_READ, MAP_MODE_READ = 0x80, 0x04, 0x08, 0x01, 0x01   # GPUBufferUsage, GPUMapMode

# Small JS functions for what would otherwise be many FFI round trips per launch (or descriptor conversions).
_js = run_js("""({
  dispatch(device, encoder, pipeline, layout, x, y, z, ...buffers) {
    const entries = buffers.map((buffer, binding) => ({binding, resource: {buffer}}));
    const pass = encoder.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, device.createBindGroup({layout, entries}));
    pass.dispatchWorkgroups(x, y, z);
    pass.end();
  },
  pipeline(device, code, entryPoint, nbind) {
    const module = device.createShaderModule({code});
    const entries = Array.from({length: nbind}, (_, binding) =>
      ({binding, visibility: GPUShaderStage.COMPUTE, buffer: {type: "storage"}}));
    const layout = device.createBindGroupLayout({entries});
    const pipeline = device.createComputePipeline({layout: device.createPipelineLayout({bindGroupLayouts: [layout]}),
                                                   compute: {module, entryPoint}});
    return [pipeline, layout];
  },
  write(queue, buffer, pyview) {   // pyview: a PyProxy of a Python buffer; getBuffer() views wasm memory, no copy
    const view = pyview.getBuffer("u8");
    try { queue.writeBuffer(buffer, 0, view.data, 0, view.data.length); } finally { view.release(); }
  },
  stage(device, src, size) {       // a MAP_READ copy of src, submitted
    const staging = device.createBuffer({size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
    const encoder = device.createCommandEncoder();
    encoder.copyBufferToBuffer(src, 0, staging, 0, size);
    device.queue.submit([encoder.finish()]);
    return staging;
  },
  async firstError(scopes) {       // [index, message] of the first error scope that caught an error, or null
    const errors = await Promise.all(scopes);
    const i = errors.findIndex((e) => e);
    return i < 0 ? null : [i, errors[i].message];
  },
  adapterInfo(adapter) {
    const i = adapter.info || {};
    return JSON.stringify({vendor: i.vendor, architecture: i.architecture, device: i.device, description: i.description,
                           isFallbackAdapter: !!(i.isFallbackAdapter ?? adapter.isFallbackAdapter)});
  },
})""")

_opened: tuple | BaseException | None = None   # (adapter, device, limits, features, info) or why it failed

async def open_device():
  """Request the WebGPU adapter (high-performance) and a device with the adapter's limits and the optional features it
  has. Safe to call again; the result is kept. Raises RuntimeError when the browser gives no adapter."""
  global _opened
  if _opened is None:
    try: _opened = await _request()
    except Exception as e: _opened = e
  if isinstance(_opened, BaseException): raise _opened
  return _opened

async def _request():
  gpu = getattr(js.navigator, "gpu", None)
  if not gpu:
    raise RuntimeError("WEBGPU: this browser has no navigator.gpu (WebGPU is off or unsupported here, or the page is not "
                       "a secure context: serve it from https or http://localhost; Chromium headless needs --enable-unsafe-webgpu)")
  adapter = await gpu.requestAdapter(_obj({"powerPreference": "high-performance"}))
  if not adapter: raise RuntimeError("WEBGPU: navigator.gpu.requestAdapter() gave no adapter (WebGPU is blocked or no GPU fits)")
  features = [f for f in OPTIONAL_FEATURES if adapter.features.has(f)]
  limits = {name: int(getattr(adapter.limits, camel(name))) for name in LIMITS}
  device = await adapter.requestDevice(_obj({"requiredFeatures": features,
                                             "requiredLimits": {camel(k): v for k, v in limits.items()}}))
  return adapter, device, limits, features, json.loads(_js.adapterInfo(adapter))

def _obj(d: dict): return to_js(d, dict_converter=js.Object.fromEntries)

class BrowserWebGPUAllocator(Allocator):
  def __init__(self, dev: BrowserWebGPUDevice):
    super().__init__()
    self.dev = dev
  def _alloc(self, nbytes: int):
    return self.dev.device.createBuffer(_obj({"size": self.dev.buffer_size(nbytes), "usage": STORAGE | COPY_SRC | COPY_DST}))
  def _free(self, handle, nbytes: int):
    self.dev.flush()   # a recorded launch may still use it
    handle.destroy()
  def copyin(self, handle, src: memoryview):
    self.dev.flush()   # launches recorded earlier must read the old contents
    if src.nbytes % 4: src = memoryview(bytes(src) + bytes(4 - src.nbytes % 4))
    _js.write(self.dev.device.queue, handle, src)
  def copyin_js(self, handle, array):
    """Upload a JavaScript typed array (byte length a multiple of 4) without a copy through Python's memory."""
    self.dev.flush()
    self.dev.device.queue.writeBuffer(handle, 0, array)
  def copyout(self, dst: memoryview, handle):
    if not can_run_sync():
      raise RuntimeError("WEBGPU (browser): reading a tensor synchronously needs JSPI (run the code with pyodide's "
                         "runPythonAsync in a browser that has it, e.g. Chromium); here use `await t.data_async()` or "
                         "`await t.tolist_async()`")
    run_sync(self.copyout_async(dst, handle))
  async def copyout_async(self, dst: memoryview, handle): await self._read(handle, dst.nbytes, lambda m: m.assign_to(dst))
  async def copyout_js(self, handle, nbytes: int):
    """The first nbytes of the buffer as a new JavaScript ArrayBuffer, copied once, out of the mapped range (the host's
    typed arrays: no detour through Python's memory)."""
    return await self._read(handle, nbytes, lambda m: m.slice().buffer)
  async def _read(self, handle, nbytes: int, take):
    """take(a Uint8Array of the buffer's first nbytes, mapped) copies them out before they are unmapped."""
    await self.dev.check_errors()
    staging = _js.stage(self.dev.device, handle, padded_size(nbytes))
    try:
      await staging.mapAsync(MAP_MODE_READ)
      out = take(js.Uint8Array.new(staging.getMappedRange()).subarray(0, nbytes))
      staging.unmap()
      return out
    finally: staging.destroy()

class BrowserWebGPUProgram:
  def __init__(self, dev: BrowserWebGPUDevice, name: str, lib: bytes):
    self.dev, self.name = dev, name
    src = lib.decode()
    nbind = dev.binding_count(name, src)
    dev.device.pushErrorScope("validation")
    self.pipeline, self.layout = _js.pipeline(dev.device, src, name, nbind)
    scope = dev.device.popErrorScope()
    if can_run_sync():
      if (err := run_sync(scope)): raise RuntimeError(f"WEBGPU: kernel {name} failed to compile: {err.message}\n--- source ---\n{src}")
    else: dev.scopes.append((scope, f"compiling kernel {name}"))
  def __call__(self, *bufs, global_size=(1, 1, 1), parallel: int = 0, work: int = 0, wait=False):
    st = time.perf_counter()
    self.dev.record(self, bufs, global_size)
    if wait:
      self.dev.synchronize()
      return time.perf_counter() - st
    return None

class BrowserWebGPUDevice(WebGPUDeviceBase):
  def __init__(self, name: str = "WEBGPU"):
    if isinstance(_opened, tuple): opened = _opened
    elif can_run_sync(): opened = run_sync(open_device())
    elif isinstance(_opened, BaseException): raise _opened
    else: raise RuntimeError("WEBGPU (browser): the GPU device is not open yet: `await tinyweb.backends.webgpu_browser.open_device()` "
                             "first (web/tinyweb.ts does it while booting), or run the code with runPythonAsync in a browser with JSPI")
    self.adapter, self.device, limits, features, self.info = opened
    self.encoder, self.recorded = None, []   # the open command encoder and the kernels recorded into it
    self.scopes: list = []                   # (popErrorScope promise, what it covered), not yet checked
    adapter_text = " ".join(str(self.info.get(k) or "") for k in ("vendor", "architecture", "device", "description"))
    is_real_gpu = not self.info["isFallbackAdapter"]   # (SwiftShader is a fallback adapter)
    self.setup(name, limits, features, adapter_text, is_real_gpu, BrowserWebGPUAllocator(self), BrowserWebGPUProgram)

  def record(self, prog: BrowserWebGPUProgram, bufs, global_size):
    if self.encoder is None:
      self.device.pushErrorScope("validation")
      self.encoder = self.device.createCommandEncoder()
    _js.dispatch(self.device, self.encoder, prog.pipeline, prog.layout, *global_size, *bufs)
    self.recorded.append(prog.name)
    if len(self.recorded) >= BATCH: self.flush()

  def flush(self):
    """Submit the recorded launches."""
    if self.encoder is None: return
    self.device.queue.submit([self.encoder.finish()])
    self.scopes.append((self.device.popErrorScope(), f"running kernels {', '.join(dict.fromkeys(self.recorded))}"))
    self.encoder, self.recorded = None, []

  async def check_errors(self):
    """Submit what is recorded and raise the first validation error caught since the last check."""
    self.flush()
    if not self.scopes: return
    scopes, self.scopes = self.scopes, []
    if (err := await _js.firstError(to_js([p for p, _ in scopes]))):
      i, message = err
      raise RuntimeError(f"WEBGPU: a WebGPU validation error while {scopes[i][1]}: {message}")

  async def synchronize_async(self):
    await self.check_errors()
    await self.device.queue.onSubmittedWorkDone()

  def synchronize(self):
    if can_run_sync(): run_sync(self.synchronize_async())
    else: self.flush()   # cannot block here: the work is submitted and later reads wait for it
