"""The CL device: kernels rendered to OpenCL C (tinyweb/codegen/opencl.py), built and launched through pyopencl.

- Device: the first GPU of any OpenCL platform, else the first device (PoCL on the CPU); `TINYWEB_CL_DEVICE=substring`
  picks one by device or platform name. Limits (max work-group size, fp64, correctly rounded divide/sqrt) come from
  the device.
- Buffers: cl.Buffer (READ_WRITE), reused through the allocator's free list; copies are blocking, through one in-order
  queue, so kernels and copies run in the order they were issued.
- Programs: built from source once, several kernels to a program where the engine compiles ahead (a PoCL build costs
  ~100 ms however small the program); the device binary is cached on disk by the base Compiler (its key names the
  platform, device, driver and build options), so a later process builds from the binary (about 1 ms on PoCL instead
  of 0.15-0.8 s from source).
- Launch: the work-group size is the one compiled into the kernel (reqd_work_group_size, from Program.local_size);
  the global size is the Program's grid times it. A kernel object's arguments are set and the kernel enqueued holding the
  device's lock (clSetKernelArg on one kernel is not thread-safe: two threads would launch with each other's buffers).
"""
from __future__ import annotations
import os, time
from tinyweb.device import Allocator, Compiler, Compiled
from tinyweb.codegen.opencl import OpenCLRenderer

def pick_device(cl):
  """TINYWEB_CL_DEVICE (a substring of the device or platform name), else a GPU, else the first device."""
  devices = []
  try: platforms = cl.get_platforms()
  except cl.Error: platforms = []   # no installable client driver: clGetPlatformIDs fails with PLATFORM_NOT_FOUND_KHR
  for p in platforms:
    try: devices += p.get_devices()
    except cl.Error: pass           # a platform without devices
  if not devices:
    raise RuntimeError("no OpenCL device found: install an OpenCL driver (apt-get install pocl-opencl-icd "
                       "ocl-icd-libopencl1 for the CPU, or the GPU vendor's)")
  if (want := os.environ.get("TINYWEB_CL_DEVICE")):
    for d in devices:
      if want.lower() in d.name.lower() or want.lower() in d.platform.name.lower(): return d
    raise RuntimeError(f"TINYWEB_CL_DEVICE={want!r} matches no OpenCL device; have {[d.name for d in devices]}")
  return next((d for d in devices if d.type & cl.device_type.GPU), devices[0])

class CLAllocator(Allocator):
  def __init__(self, dev):
    super().__init__()
    self.dev = dev
  def _alloc(self, nbytes: int):
    if nbytes > self.dev.max_alloc:
      raise MemoryError(f"CL: a buffer of {nbytes} bytes exceeds the device's max allocation ({self.dev.max_alloc} bytes)")
    return self.dev.cl.Buffer(self.dev.ctx, self.dev.cl.mem_flags.READ_WRITE, nbytes)
  def _free(self, handle, nbytes: int): handle.release()
  def copyin(self, handle, src: memoryview): self.dev.cl.enqueue_copy(self.dev.queue, handle, src, is_blocking=True)
  def copyout(self, dst: memoryview, handle): self.dev.cl.enqueue_copy(self.dev.queue, dst, handle, is_blocking=True)

class CLCompiler(Compiler):
  # several kernels build as one program: PoCL's build costs ~100 ms a program however small, ~27 ms a kernel in eights
  batch_sources = True
  thread_safe = True   # (OpenCL's calls are thread-safe but clSetKernelArg, which CLProgram calls holding the device's lock)
  def __init__(self, dev):
    super().__init__()
    self.dev = dev
    d = dev.device
    self.cache_key = f"opencl {d.platform.version} {d.name} {d.driver_version} {' '.join(dev.build_options)}"
  def compile(self, src: str) -> bytes:
    cl = self.dev.cl
    try: prg = cl.Program(self.dev.ctx, src).build(options=self.dev.build_options, devices=[self.dev.device])
    except cl.Error as e: raise RuntimeError(f"CL: a kernel failed to compile:\n{e}\n--- source ---\n{src}") from e
    return prg.get_info(cl.program_info.BINARIES)[0]

class CLProgram:
  def __init__(self, dev, name: str, lib: bytes):
    self.dev, self.name = dev, name
    cl = dev.cl
    prg = cl.Program(dev.ctx, [dev.device], [lib]).build(options=dev.build_options, devices=[dev.device])
    self.kernel = cl.Kernel(prg, name)
    self.local_size = tuple(self.kernel.get_work_group_info(cl.kernel_work_group_info.COMPILE_WORK_GROUP_SIZE, dev.device))
  def __call__(self, *bufs, global_size=(1, 1, 1), parallel: int = 0, work: int = 0, wait=False):
    gsize = tuple(g * l for g, l in zip(global_size, self.local_size))
    st = time.perf_counter()
    with self.dev.lock:
      for i, b in enumerate(bufs): self.kernel.set_arg(i, b)
      ev = self.dev.cl.enqueue_nd_range_kernel(self.dev.queue, self.kernel, gsize, self.local_size)
    if not wait: return None
    ev.wait()
    return time.perf_counter() - st

class CLDevice(Compiled):
  def __init__(self, name: str = "CL"):
    import pyopencl as cl   # (missing: Device.check names the extra that installs it)
    self.cl = cl
    self.device = d = pick_device(cl)
    self.ctx = cl.Context([d])
    self.queue = cl.CommandQueue(self.ctx, d)
    self.max_alloc = d.max_mem_alloc_size
    self.info = {"device": d.name, "platform": d.platform.name, "adapter_type": next((k for k in ("GPU", "CPU", "ACCELERATOR") if d.type & getattr(cl.device_type, k)), "other")}
    # a real GPU ranks above the CPU device in Device.DEFAULT; a CPU device (PoCL) does not
    self.is_real_gpu = bool(d.type & cl.device_type.GPU)
    # -w: generated code trips harmless warnings (e.g. '||' with a constant operand) that pyopencl would re-raise.
    # Division and sqrt correctly rounded like the CPU's, where the device can (OpenCL's default allows 2.5-3 ulp)
    self.build_options = ["-w"] + (["-cl-fp32-correctly-rounded-divide-sqrt"] if
                                   d.single_fp_config & cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT else [])
    renderer = OpenCLRenderer(has_fp64=d.double_fp_config != 0, max_local_size=min(d.max_work_group_size, d.max_work_item_sizes[0]),
                              workgroup_tiles=self.is_real_gpu)   # (on a CPU device, PoCL, barriers cost more than the loads they save)
    super().__init__(name, CLAllocator(self), renderer, CLCompiler(self), CLProgram)
  def synchronize(self): self.queue.finish()
