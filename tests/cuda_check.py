"""The CUDA compile check for machines without an NVIDIA GPU (CI): every kernel the tests build, on any device, is also
lowered for CUDA, rendered and NVRTC-compiled (NVRTCCheck, disk-cached): to PTX for compute_80, and a kernel with
tensor-core inline assembly (mma.sync) to a cubin for sm_80, which also assembles it. Invalid CUDA fails the test that
built the kernel, with NVRTC's log. Off when the CUDA device runs here (the suite then runs on it), when NVRTC is
missing, or with TINYWEB_CUDA_CHECK=0. conftest.py imports the two fixtures. (PTX, not a cubin for every kernel: ptxas
took half the check's time and more on big kernels, 5.2 s of a 400 KB kernel's 6.9, and only inline assembly can be
valid CUDA C yet invalid PTX. One arch: the source does not depend on it. test_cuda.py and test_tensor_cores.py build
cubins for sm_80 and sm_90.)

Not checked: the kernels of the real models' tests (those taking the `model_device` fixture), of the ONNX node tests
and models, and of the demo and export modules (UNCHECKED_MODULES). Their kernels are the ops' kernels composed and
fused; the check lowered each of them once more and cost a third of those tests' time (40 % of the ONNX node tests'),
some 6 minutes of the suite's 2 workers by those shares. The dtypes, ops and fused shapes they use are checked in the
device-level modules (test_creation_dtype.py, test_ops_*.py, test_fusion.py, test_fuzz.py, test_random_chains.py)."""
import os, pytest
from tinyweb import engine
from tinyweb.device import Device
from tinyweb.codegen.lower import lower
from tinyweb.codegen.cuda import CUDARenderer

class NVRTCCheck:
  """Without a GPU: lower a kernel AST for CUDA, render it and compile it (see the module's docstring; `archs`: every
  source for each of them instead). Raises RuntimeError naming the kernel, with NVRTC's log, when the CUDA code is
  invalid."""
  def __init__(self, archs: tuple[str, ...] | None = None):
    from tinyweb.backends.cuda import NVRTCCompiler   # (the CUDA runtime module, only where the check runs)
    self.renderer = CUDARenderer()
    self.compilers = [NVRTCCompiler(a) for a in archs] if archs else None
    self.ptx, self.cubin = NVRTCCompiler("compute_80"), NVRTCCompiler("sm_80")
  def __call__(self, ast) -> str:
    src = self.renderer.render(lower(ast, self.renderer))
    for c in self.compilers or [self.cubin if "mma.sync" in src else self.ptx]: c.compile_cached(src)
    return src

# (and the tests taking `model_device`)
UNCHECKED_MODULES = {"test_onnx", "test_onnx_models", "test_export", "test_demo_mnist", "test_demo_cifar"}
_checking = True   # off during a test of the real models (see the module's docstring)

def pytest_runtest_setup(item):
  """Whether this test's kernels are checked, decided before any of its fixtures runs (a module-scoped fixture that builds
  kernels, a model's, belongs to the test that sets it up). conftest.py imports this hook."""
  global _checking
  _checking = not ("model_device" in item.fixturenames or item.module.__name__.rpartition(".")[2] in UNCHECKED_MODULES)

def make_observer(check, errors: list[str]):
  """An engine.kernel_observers entry: runs `check(ast)` once per distinct kernel AST, appends failures to `errors`."""
  seen = set()
  def observe(device: str, ast):
    if not _checking or ast in seen: return
    seen.add(ast)
    try: check(ast)
    except Exception as e: errors.append(f"{type(e).__name__}: {e}")
  return observe

def nvrtc_check():
  """The NVRTCCheck to run, or None when it is off (see the module's docstring)."""
  if os.getenv("TINYWEB_CUDA_CHECK", "1") == "0" or Device.check("CUDA")[0]: return None
  try: return NVRTCCheck()
  except (RuntimeError, ImportError): return None   # NVRTC not installed (ModuleNotFoundError) or not loadable

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
    pytest.fail(f"CUDA compile check (PTX for compute_80, tensor-core kernels sm_80): a kernel this test built is not valid CUDA:\n{msg}", pytrace=False)
