"""The CUDA compile check for machines without an NVIDIA GPU (CI): every kernel the tests build, on any device, is also
lowered for CUDA, rendered and NVRTC-compiled to cubin for sm_80 (NVRTCCheck, disk-cached).
Invalid CUDA fails the test that built the kernel, with NVRTC's log. Off when the CUDA device runs here (the suite then
runs on it), when NVRTC is missing, or with TINYWEB_CUDA_CHECK=0. conftest.py imports the two fixtures."""
import os, pytest
from tinyweb import engine
from tinyweb.device import Device
from tinyweb.codegen.lower import lower
from tinyweb.codegen.cuda import CUDARenderer

# one arch: the source is the same for every arch (no __CUDA_ARCH__), and the cubin (not just PTX) also checks the
# inline PTX of the tensor-core kernels; test_cuda.py and test_tensor_cores.py compile their kernels for sm_90 as well
ARCHS = ("sm_80",)

class NVRTCCheck:
  """Without a GPU: lower a kernel AST for CUDA, render it and compile it for each arch (disk-cached like any kernel).
  Raises RuntimeError naming the kernel, with NVRTC's log, when the CUDA code is invalid."""
  def __init__(self, archs: tuple[str, ...] = ARCHS):
    from tinyweb.backends.cuda import NVRTCCompiler   # (the CUDA runtime module, only where the check runs)
    self.renderer = CUDARenderer()
    self.compilers = [NVRTCCompiler(a) for a in archs]
  def __call__(self, ast) -> str:
    src = self.renderer.render(lower(ast, self.renderer))
    for c in self.compilers: c.compile_cached(src)
    return src

def make_observer(check, errors: list[str]):
  """An engine.kernel_observers entry: runs `check(ast)` once per distinct kernel AST, appends failures to `errors`."""
  seen = set()
  def observe(device: str, ast):
    if ast in seen: return
    seen.add(ast)
    try: check(ast)
    except Exception as e: errors.append(f"{type(e).__name__}: {e}")
  return observe

def nvrtc_check():
  """The NVRTCCheck to run, or None when it is off (see the module's docstring)."""
  if os.getenv("TINYWEB_CUDA_CHECK", "1") == "0" or Device.check("CUDA")[0]: return None
  try: return NVRTCCheck(ARCHS)
  except RuntimeError: return None   # NVRTC not installed

_errors: list[str] = []

@pytest.fixture(scope="session", autouse=True)
def cuda_compile_check():
  check = nvrtc_check()
  if check is None:
    yield
    return
  observe = make_observer(check, _errors)
  engine.kernel_observers.append(observe)
  yield
  engine.kernel_observers.remove(observe)

@pytest.fixture(autouse=True)
def cuda_compile_errors_fail_the_test(cuda_compile_check):
  yield
  if _errors:
    msg = "\n\n".join(_errors)
    _errors.clear()
    pytest.fail(f"CUDA compile check ({', '.join(ARCHS)}): a kernel this test built is not valid CUDA:\n{msg}", pytrace=False)
