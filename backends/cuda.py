"""The CUDA device: kernels rendered to CUDA C (tinyweb/codegen/cuda.py), compiled by NVRTC, launched through the CUDA
driver API. Both libraries are loaded with ctypes when the device is first used: no pycuda, no CUDA toolkit.

- NVRTC: from the pip package (nvidia-cuda-nvrtc-cu12: site-packages/nvidia/cuda_nvrtc/lib; the 13.x package:
  nvidia/cu13/lib), else the system's libnvrtc. Kernels compile to cubin for the GPU's own arch; a GPU newer than NVRTC
  gets PTX for the newest arch NVRTC knows, which the driver compiles (NVRTC 13's PTX needs a driver as new as it).
- Driver: libcuda.so.1 (installed with the NVIDIA driver). GPU 0 (pick one with CUDA_VISIBLE_DEVICES), its primary
  context made current in each thread that calls the driver (the current context is per thread), the legacy default
  stream: launches run in order and a copy to the host waits for the kernels before it.
- Machines without a GPU still check the CUDA code: the test suite renders every kernel it builds for CUDA and
  compiles it with NVRTCCompiler for sm_80 and sm_90 (tests/cuda_check.py).
The launch and memory paths were written without access to an NVIDIA GPU: they are untested on hardware.
"""
from __future__ import annotations
import ctypes, ctypes.util, glob, os, re, threading
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_size_t, c_uint, c_uint64, c_void_p
from tinyweb.device import Allocator, Compiler, Compiled
from tinyweb.codegen.cuda import CUDARenderer

# ---- NVRTC ----

def _nvrtc_candidates() -> list[str]:
  paths = []
  try:
    import nvidia   # namespace package of NVIDIA's pip wheels
    for d in nvidia.__path__: paths += sorted(glob.glob(os.path.join(d, "*", "lib", "libnvrtc.so*")), reverse=True)
  except ImportError: pass
  return paths + [p for p in (ctypes.util.find_library("nvrtc"),) if p]

class NVRTC:
  """The NVRTC library through ctypes (one instance per process: `NVRTC.get()`)."""
  _instance = None
  @classmethod
  def get(cls) -> NVRTC:
    if cls._instance is None: cls._instance = cls()
    return cls._instance
  def __init__(self):
    errors = []
    for path in _nvrtc_candidates():
      try: self.lib = ctypes.CDLL(path); break
      except OSError as e: errors.append(str(e))
    else:
      if errors: raise RuntimeError(f"NVRTC did not load: {'; '.join(errors)}")
      # (an ImportError naming NVRTC's pip package: Device.check adds which extra of tinyweb installs it)
      raise ModuleNotFoundError("NVRTC not found: no nvidia-cuda-nvrtc pip package (module nvidia.cuda_nvrtc) and no libnvrtc "
                                "on the system", name="nvidia.cuda_nvrtc")
    self.lib.nvrtcGetErrorString.restype = c_char_p
    major, minor = c_int(), c_int()
    self.check(self.lib.nvrtcVersion(byref(major), byref(minor)), "nvrtcVersion")
    self.version = f"{major.value}.{minor.value}"
    n = c_int()
    self.check(self.lib.nvrtcGetNumSupportedArchs(byref(n)), "nvrtcGetNumSupportedArchs")
    archs = (c_int * n.value)()
    self.check(self.lib.nvrtcGetSupportedArchs(archs), "nvrtcGetSupportedArchs")
    self.archs = list(archs)   # compute capabilities as numbers: 80 is sm_80
  def check(self, status: int, what: str):
    if status != 0: raise RuntimeError(f"{what} failed: {self.lib.nvrtcGetErrorString(status).decode()}")

  def compile(self, src: str, options: list[str], output: str) -> bytes:
    """CUDA C -> PTX (output 'ptx') or cubin ('cubin'); raises RuntimeError with the kernel name and NVRTC's log."""
    lib, prog = self.lib, c_void_p()
    self.check(lib.nvrtcCreateProgram(byref(prog), src.encode(), b"kernel.cu", 0, None, None), "nvrtcCreateProgram")
    try:
      status = lib.nvrtcCompileProgram(prog, len(options), (c_char_p * len(options))(*[o.encode() for o in options]))
      if status != 0:
        n = c_size_t()
        lib.nvrtcGetProgramLogSize(prog, byref(n))
        log = ctypes.create_string_buffer(n.value)
        lib.nvrtcGetProgramLog(prog, log)
        name = m.group(1) if (m := re.search(r"__global__ void (?:__launch_bounds__\(\d+\) )?(\w+)\(", src)) else "?"
        raise RuntimeError(f"NVRTC {self.version} failed to compile CUDA kernel {name} "
                           f"({' '.join(options)}): {lib.nvrtcGetErrorString(status).decode()}\n{log.value.decode()}"
                           f"--- source ---\n{src}")
      get_size, get = (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX) if output == "ptx" else (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN)
      n = c_size_t()
      self.check(get_size(prog, byref(n)), f"nvrtcGet{output.upper()}Size")
      out = ctypes.create_string_buffer(n.value)
      self.check(get(prog, out), f"nvrtcGet{output.upper()}")
      return out.raw
    finally: lib.nvrtcDestroyProgram(byref(prog))

class NVRTCCompiler(Compiler):
  """Compiles for one arch: 'sm_XY' gives a cubin for that GPU, 'compute_XY' PTX that the driver compiles."""
  def __init__(self, arch: str = "sm_80"):
    super().__init__()
    self.nvrtc, self.arch = NVRTC.get(), arch
    self.output = "ptx" if arch.startswith("compute_") else "cubin"
    # -fmad=false: every op rounds on its own, like the CPU device (clang -ffp-contract=off)
    self.options = [f"--gpu-architecture={arch}", "-fmad=false"]
    self.cache_key = f"nvrtc {self.nvrtc.version} {self.output} {' '.join(self.options)}"
  def compile(self, src: str) -> bytes: return self.nvrtc.compile(src, self.options, self.output)
  @classmethod
  def for_gpu(cls, major: int, minor: int) -> NVRTCCompiler:
    nvrtc, cc = NVRTC.get(), major * 10 + minor
    if cc in nvrtc.archs: return cls(f"sm_{cc}")
    if not (older := [a for a in nvrtc.archs if a < cc]):
      raise RuntimeError(f"NVRTC {nvrtc.version} cannot compile for this GPU (sm_{cc}); it knows sm_{nvrtc.archs}")
    return cls(f"compute_{max(older)}")   # a GPU newer than NVRTC: PTX, compiled by the driver

# ---- the driver API ----

P, I, U = c_void_p, c_int, c_uint
DRIVER_API = {   # function -> argument types (every function returns a CUresult)
  "cuInit": [U], "cuDeviceGet": [POINTER(I), I], "cuDeviceGetName": [c_char_p, I, I],
  "cuDeviceGetAttribute": [POINTER(I), I, I], "cuDevicePrimaryCtxRetain": [POINTER(P), I], "cuCtxSetCurrent": [P],
  "cuCtxSynchronize": [], "cuMemAlloc_v2": [POINTER(c_uint64), c_size_t], "cuMemFree_v2": [c_uint64],
  "cuMemcpyHtoD_v2": [c_uint64, P, c_size_t], "cuMemcpyDtoH_v2": [P, c_uint64, c_size_t],
  "cuModuleLoadData": [POINTER(P), c_char_p], "cuModuleGetFunction": [POINTER(P), P, c_char_p],
  "cuLaunchKernel": [P, U, U, U, U, U, U, U, P, POINTER(P), POINTER(P)],
  "cuEventCreate": [POINTER(P), U], "cuEventRecord": [P, P], "cuEventSynchronize": [P],
  "cuEventElapsedTime": [POINTER(c_float), P, P], "cuGetErrorName": [I, POINTER(c_char_p)],
}
CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_NO_DEVICE = 2, 100
ATTR_MAX_THREADS_PER_BLOCK, ATTR_CC_MAJOR, ATTR_CC_MINOR = 1, 75, 76

class CUDAError(RuntimeError):
  def __init__(self, what: str, status: int, name: str):
    super().__init__(f"CUDA: {what} failed: {name} ({status})")
    self.status = status

LIBCUDA = "libcuda.so.1"   # the driver library (tests point it at a fake one)

class Driver:
  """libcuda through ctypes: `driver("cuMemAlloc_v2", ...)` calls the function and raises CUDAError on failure."""
  def __init__(self):
    try: self.lib = ctypes.CDLL(LIBCUDA)
    except OSError: raise RuntimeError("no NVIDIA driver (libcuda.so.1 not found)") from None
    for fn, args in DRIVER_API.items(): getattr(self.lib, fn).argtypes = args
    self.ctx, self.threads = None, threading.local()   # the context to make current in each thread that calls (once)
  def __call__(self, fn: str, *args):
    if self.ctx is not None and not getattr(self.threads, "has_ctx", False):
      self.threads.has_ctx = True   # (first: the call below comes through here too)
      self("cuCtxSetCurrent", self.ctx)
    if (status := getattr(self.lib, fn)(*args)) != 0:
      name = c_char_p()
      self.lib.cuGetErrorName(status, byref(name))
      raise CUDAError(fn, status, name.value.decode() if name.value else "unknown error")

class CUDAAllocator(Allocator):
  def __init__(self, driver: Driver):
    super().__init__()
    self.driver = driver
  def _alloc(self, nbytes: int) -> int:
    ptr = c_uint64()
    try: self.driver("cuMemAlloc_v2", byref(ptr), nbytes)
    except CUDAError as e:
      if e.status != CUDA_ERROR_OUT_OF_MEMORY: raise
      self.free_cache()   # give the pooled buffers back to the GPU and try once more
      self.driver("cuMemAlloc_v2", byref(ptr), nbytes)
    return ptr.value
  def _free(self, handle: int, nbytes: int): self.driver("cuMemFree_v2", handle)
  def copyin(self, handle: int, src: memoryview):
    host = bytes(src) if src.readonly else (ctypes.c_char * src.nbytes).from_buffer(src)
    self.driver("cuMemcpyHtoD_v2", handle, host, src.nbytes)
  def copyout(self, dst: memoryview, handle: int):
    self.driver("cuMemcpyDtoH_v2", (ctypes.c_char * dst.nbytes).from_buffer(dst), handle, dst.nbytes)

class CUDAProgram:
  def __init__(self, dev: CUDADevice, name: str, lib: bytes, block: int):
    self.dev, self.name, self.block, self.lib = dev, name, block, lib   # the module keeps using `lib`: hold it
    self.module, self.fn = c_void_p(), c_void_p()
    dev.driver("cuModuleLoadData", byref(self.module), lib)
    dev.driver("cuModuleGetFunction", byref(self.fn), self.module, name.encode())
  def __call__(self, *bufs, global_size=(1, 1, 1), parallel: int = 0, work: int = 0, wait=False):
    drv = self.dev.driver
    args = [c_uint64(b) for b in bufs]
    params = (c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    if wait: drv("cuEventRecord", self.dev.events[0], None)
    drv("cuLaunchKernel", self.fn, *global_size, self.block, 1, 1, 0, None, params, None)
    if not wait: return None
    drv("cuEventRecord", self.dev.events[1], None)
    drv("cuEventSynchronize", self.dev.events[1])
    ms = c_float()
    drv("cuEventElapsedTime", byref(ms), *self.dev.events)
    return ms.value * 1e-3

class CUDADevice(Compiled):
  def __init__(self, name: str = "CUDA"):
    self.driver = drv = Driver()
    try: drv("cuInit", 0)
    except CUDAError as e:
      if e.status == CUDA_ERROR_NO_DEVICE: raise RuntimeError("the NVIDIA driver is installed but finds no GPU (cuInit: CUDA_ERROR_NO_DEVICE)") from None
      raise
    self.gpu, ctx = c_int(), c_void_p()
    drv("cuDeviceGet", byref(self.gpu), 0)
    def attr(a: int) -> int:
      v = c_int()
      drv("cuDeviceGetAttribute", byref(v), a, self.gpu)
      return v.value
    gpu_name = ctypes.create_string_buffer(256)
    drv("cuDeviceGetName", gpu_name, 256, self.gpu)
    drv("cuDevicePrimaryCtxRetain", byref(ctx), self.gpu)
    drv.ctx = ctx   # made current in this thread by the next call, and in any other thread by its first
    self.events = (c_void_p(), c_void_p())   # start/end of a timed launch (wait=True)
    for ev in self.events: drv("cuEventCreate", byref(ev), 0)
    major, minor = attr(ATTR_CC_MAJOR), attr(ATTR_CC_MINOR)
    compiler = NVRTCCompiler.for_gpu(major, minor)
    # (mma.sync m16n8k16, f16 with f32 accumulators or bf16, needs sm_80)
    renderer = CUDARenderer(max_local_size=attr(ATTR_MAX_THREADS_PER_BLOCK), **({} if major >= 8 else {"tensor_cores": ()}))
    self.is_real_gpu = True   # ranks above the CPU device in Device.DEFAULT
    self.info = {"device": f"{gpu_name.value.decode()}, sm_{major}{minor}, {compiler.output} from NVRTC {compiler.nvrtc.version}",
                 "adapter_type": "CUDA"}
    super().__init__(name, CUDAAllocator(drv), renderer, compiler, CUDAProgram)
  def get_program(self, name: str, src: str) -> CUDAProgram:
    # the launch needs the block size the kernel was rendered for: it is in the source as __launch_bounds__(N)
    if (p := self.programs.get(src)) is None:
      block, lib = int(re.search(r"__launch_bounds__\((\d+)\)", src).group(1)), self.compiler.compile_cached(src)
      with self.lock:
        if (p := self.programs.get(src)) is None: p = self.programs[src] = CUDAProgram(self, name, lib, block)
    return p
  def synchronize(self): self.driver("cuCtxSynchronize")
