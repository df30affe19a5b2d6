"""The WEBGPU device, natively through wgpu-py (wgpu-native): kernels rendered to WGSL, run as compute pipelines.

- Adapter: power preference high-performance; `TINYWEB_WEBGPU_ADAPTER=substring` picks one by name. The device is
  requested with the adapter's limits and the optional features it has (shader-f16, timestamp-query, subgroup);
  `TINYWEB_WEBGPU_LIMITS=default` requests WebGPU's default limits and no shader-f16 instead, and tunes kernels for any
  adapter, CPU-emulated ones too (no workgroup tiles or grouped reductions): what tinyweb.export should capture.
  `TINYWEB_WEBGPU_NO_F16=1` pretends shader-f16 is absent (float16 is then refused, see tinyweb/codegen/wgsl.py).
- Buffers: STORAGE|COPY_SRC|COPY_DST, sizes rounded up to 4 bytes, reused through the allocator's free list.
  copyin: queue.write_buffer; copyout: copy into a MAP_READ staging buffer, map, read.
- Programs: shader module + compute pipeline with an explicit bind-group layout (cached per source); a bind group per
  launch. wgpu-py turns WebGPU validation errors into Python exceptions; they are re-raised naming the kernel.
- Launches are recorded into one compute pass of one command encoder; `flush()` (called by the engine at the end of
  every realize and TinyJit replay, and before any copy) submits them at once. WebGPU orders the dispatches of a pass
  and makes each one's writes visible to the next.
- Which dtypes and ops are refused, and why, is listed in one place: `WGSLRenderer.unsupported`.
- Threads: the encoder, the pass being recorded and the queue are shared; every method that touches them holds the
  device's lock (`holds_device_lock`), so launches and copies from several threads go into the queue whole, in order.
"""
from __future__ import annotations
import functools, os, tempfile, time
from tinyweb.device import Allocator
from tinyweb.backends.webgpu_shared import DEFAULT_LIMITS, OPTIONAL_FEATURES, WebGPUDeviceBase, portable_limits

def _wgpu():
  if not os.environ.get("XDG_RUNTIME_DIR"):   # silences a harmless error on adapter enumeration (Vulkan loader)
    d = os.path.join(tempfile.gettempdir(), f"tinyweb-xdg-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    os.environ["XDG_RUNTIME_DIR"] = d
  import wgpu
  return wgpu

def pick_adapter(wgpu):
  want = os.environ.get("TINYWEB_WEBGPU_ADAPTER")
  if want:
    adapters = wgpu.gpu.enumerate_adapters_sync()
    for a in adapters:
      if want.lower() in a.info["device"].lower() or want.lower() in a.info.get("description", "").lower(): return a
    raise RuntimeError(f"TINYWEB_WEBGPU_ADAPTER={want!r} matches no adapter; have {[a.info['device'] for a in adapters]}")
  a = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
  if a is None: raise RuntimeError("no WebGPU adapter (install a driver, e.g. apt-get install mesa-vulkan-drivers libvulkan1)")
  return a

class DeviceLostError(RuntimeError): pass

def fails_clearly_when_lost(fn):
  """wgpu-native reports a lost device (driver reset, GPU removed, device.destroy()) as a validation error of whatever
  call comes next: turn that into one clear error."""
  @functools.wraps(fn)
  def wrapper(*args, **kwargs):
    try: return fn(*args, **kwargs)
    except DeviceLostError: raise
    except Exception as e:
      if "device is lost" not in str(e).lower() and "device lost" not in str(e).lower(): raise
      raise DeviceLostError("WEBGPU: the GPU device was lost (driver reset, GPU removed or device destroyed); the tensors "
                            "on it are gone. Restart the process to get a new device.") from e
  return wrapper

def holds_device_lock(fn):
  """fn runs with the device's lock held (two threads recording into one pass at once broke it: "Encoder is locked by a
  previously created render/compute pass", and wrong values)."""
  @functools.wraps(fn)
  def wrapper(self, *args, **kwargs):
    with getattr(self, "dev", self).lock: return fn(self, *args, **kwargs)
  return wrapper

class WebGPUAllocator(Allocator):
  def __init__(self, dev):
    super().__init__()
    self.dev = dev
  @holds_device_lock
  def alloc(self, nbytes: int):
    # a GPUBuffer freed into the pool by a Buffer that the garbage collector found in a reference cycle may have been
    # released by wgpu-py's own finalizer in the same collection: skip those
    while self.cache[nbytes]:
      if getattr(h := self.cache[nbytes].pop(), "_internal", None) is not None: return h
    return self._alloc(nbytes)
  @fails_clearly_when_lost
  def _alloc(self, nbytes: int):
    w = self.dev.wgpu
    return self.dev.device.create_buffer(size=self.dev.buffer_size(nbytes), usage=w.BufferUsage.STORAGE | w.BufferUsage.COPY_SRC | w.BufferUsage.COPY_DST)
  @holds_device_lock
  def _free(self, handle, nbytes: int):
    self.dev.flush()   # a recorded launch may still use it
    handle.destroy()
  @holds_device_lock
  @fails_clearly_when_lost
  def copyin(self, handle, src: memoryview):
    self.dev.flush()   # queue.write_buffer runs before work submitted later: launches recorded so far go first
    data = bytes(src)
    if len(data) % 4: data += bytes(4 - len(data) % 4)
    self.dev.device.queue.write_buffer(handle, 0, data)
  @holds_device_lock
  @fails_clearly_when_lost
  def copyout(self, dst: memoryview, handle):
    w, n = self.dev.wgpu, dst.nbytes
    size = (n + 3) // 4 * 4
    staging = self.dev.device.create_buffer(size=size, usage=w.BufferUsage.MAP_READ | w.BufferUsage.COPY_DST)
    self.dev.flush(lambda enc: enc.copy_buffer_to_buffer(handle, 0, staging, 0, size))
    staging.map_sync(w.MapMode.READ)
    try: dst[:] = staging.read_mapped(0, size).cast("B")[:n]
    finally:
      staging.unmap()
      staging.destroy()

class WebGPUProgram:
  @fails_clearly_when_lost
  def __init__(self, dev, name: str, lib: bytes):
    self.dev, self.name = dev, name
    src = lib.decode()
    w, d = dev.wgpu, dev.device
    self.nbind = dev.binding_count(name, src)
    try:
      module = d.create_shader_module(code=src)
      self.layout = d.create_bind_group_layout(entries=[
        {"binding": i, "visibility": w.ShaderStage.COMPUTE, "buffer": {"type": w.BufferBindingType.storage}} for i in range(self.nbind)])
      self.pipeline = d.create_compute_pipeline(layout=d.create_pipeline_layout(bind_group_layouts=[self.layout]),
                                                compute={"module": module, "entry_point": name})
    except Exception as e:
      raise RuntimeError(f"WEBGPU: kernel {name} failed to compile: {e}\n--- source ---\n{src}") from e
  @holds_device_lock
  @fails_clearly_when_lost
  def __call__(self, *bufs, global_size=(1, 1, 1), parallel: int = 0, work: int = 0, wait=False):
    dev = self.dev
    try:
      bg = dev.device.create_bind_group(layout=self.layout, entries=[
        {"binding": i, "resource": {"buffer": b, "offset": 0, "size": b.size}} for i, b in enumerate(bufs)])
      if wait: dev.synchronize()   # time this launch alone
      st = time.perf_counter()
      cp = dev.compute_pass(self.name)
      cp.set_pipeline(self.pipeline)
      cp.set_bind_group(0, bg)
      cp.dispatch_workgroups(*global_size)
    except Exception as e:
      raise RuntimeError(f"WEBGPU: launching kernel {self.name} failed: {e}") from e
    if wait:
      dev.synchronize()
      return time.perf_counter() - st
    return None

class WEBGPUDevice(WebGPUDeviceBase):
  def __init__(self, name: str = "WEBGPU"):
    self.wgpu = w = _wgpu()
    self.adapter = pick_adapter(w)
    feats = [f for f in OPTIONAL_FEATURES if f in self.adapter.features]
    limits, portable = dict(self.adapter.limits), portable_limits()
    if portable:   # (TINYWEB_WEBGPU_LIMITS=default: kernels any adapter runs, for tinyweb.export)
      limits.update({k: min(v, limits.get(k, v)) for k, v in DEFAULT_LIMITS.items()})
      feats = [f for f in feats if f != "shader-f16"]
    self.device = self.adapter.request_device_sync(required_features=feats, required_limits=limits)
    self.info = self.adapter.info
    # a real GPU ranks above the CPU device in Device.DEFAULT; a CPU adapter (lavapipe, SwiftShader) does not
    is_real_gpu = self.info.get("adapter_type", "").upper() not in ("CPU", "UNKNOWN", "")
    adapter_text = " ".join(str(self.info.get(k, "")) for k in ("device", "description", "driver_description"))
    self.setup(name, self.device.limits, self.device.features, adapter_text, is_real_gpu, WebGPUAllocator(self), WebGPUProgram,
               portable=portable)
    self.encoder = self.pass_ = None   # the command batch being recorded
    self.batched: list[str] = []       # names of the kernels in it, for error messages
    self.submits = 0                   # queue submits so far (tests check that a realize is one)
  def compute_pass(self, kernel: str):
    """The compute pass that launches are recorded into (started on the first launch after a flush)."""
    if self.pass_ is None:
      self.encoder = self.device.create_command_encoder()
      self.pass_ = self.encoder.begin_compute_pass()
    self.batched.append(kernel)
    return self.pass_
  @holds_device_lock
  @fails_clearly_when_lost
  def flush(self, then=None):
    """Submit the recorded launches, followed by `then(encoder)` when given (a copy that must run after them)."""
    if self.pass_ is None and then is None: return
    enc = self.encoder if self.pass_ is not None else self.device.create_command_encoder()
    if self.pass_ is not None: self.pass_.end()
    kernels, self.encoder, self.pass_, self.batched = self.batched, None, None, []
    try:
      if then is not None: then(enc)
      self.device.queue.submit([enc.finish()])
      self.submits += 1
    except Exception as e:
      raise RuntimeError(f"WEBGPU: submitting {len(kernels)} launches ({', '.join(kernels[:8])}"
                         f"{', ...' if len(kernels) > 8 else ''}) failed: {e}") from e
  @holds_device_lock
  @fails_clearly_when_lost
  def synchronize(self):
    """Wait for all submitted work: map a small staging buffer after it (on_submitted_work_done is broken in wgpu 0.32)."""
    w = self.wgpu
    if not hasattr(self, "_sync_bufs"):
      self._sync_bufs = (self.device.create_buffer(size=4, usage=w.BufferUsage.COPY_SRC),
                         self.device.create_buffer(size=4, usage=w.BufferUsage.MAP_READ | w.BufferUsage.COPY_DST))
    src, dst = self._sync_bufs
    self.flush(lambda enc: enc.copy_buffer_to_buffer(src, 0, dst, 0, 4))
    dst.map_sync(w.MapMode.READ)
    dst.unmap()
