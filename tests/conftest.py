import os, pytest
from tinyweb.device import Device

# Every test that takes `device` runs on each device of TEST_DEVICES (default: all devices tinyweb knows);
# a device this machine lacks is skipped with the reason the device registry gives.
ALL_DEVICES = [d.strip().upper() for d in os.getenv("TEST_DEVICES", ",".join(Device.known())).split(",") if d.strip()]

# The PYTHON device interprets kernels in pure Python (a few million lane-operations per second): a test whose kernels
# would run more than this many lane-operations on it in all is skipped there, saying so (CI runs small shapes on it).
PYTHON_WORK_BUDGET = float(os.getenv("TINYWEB_PYTHON_WORK_BUDGET", "5e7"))

# The CL device (PoCL on CI's CPU) took 0.2-0.4 s to build a kernel (0.1 s in batches of 8), 3-10x any other device,
# and most of a cold suite's time went there. The WASM device assembles its modules in Python and compiles each with
# wasmtime (kept in the kernel cache on disk, but CI starts cold): test_onnx alone took 2.3 minutes on it with 2
# workers. LLVM and PYTHON (the interpreter) likewise cost 3 minutes of a cold suite's 2 workers in these modules
# alone. All four run every test of the device-level modules (ops, dtypes, special values, fuzzing, the code
# generator); these API-level modules, whose kernels are those ops composed, run on CPU and WEBGPU, the others skip
# them unless TINYWEB_TEST_EVERYWHERE=1. CL and LLVM (7.5 minutes of a cold suite's 2 workers, measured before CL's
# batched builds) also skip the modules that vary shapes and schedules (conv parameters, fuzzed graphs, the
# optimization modes), whose index arithmetic is the shared code generator's (CL also the movement ops'), and torch's
# gradient conventions (API-level); these run on CPU, WEBGPU, WASM and PYTHON. What their renderers write themselves
# (types, math, conversions, half precision, special values, reductions, nn ops) is in the modules they run.
API_LEVEL_MODULES = {"test_api_movement", "test_api_math", "test_autograd", "test_nn", "test_optim", "test_state",
                     "test_api_hash", "test_tinygrad_api"}
SHAPE_LEVEL_MODULES = {"test_conv_params", "test_fuzz", "test_opt_modes", "test_torch_conventions"}
SLOW_BUILD_SKIPS = {"CL": API_LEVEL_MODULES | SHAPE_LEVEL_MODULES | {"test_ops_movement"},
                    "LLVM": API_LEVEL_MODULES | SHAPE_LEVEL_MODULES,
                    "WASM": API_LEVEL_MODULES | {"test_onnx"}, "PYTHON": API_LEVEL_MODULES}

@pytest.fixture(params=ALL_DEVICES)
def device(request):
  ok, why = Device.check(request.param)
  if not ok: pytest.skip(f"{request.param} unavailable: {why}")
  if request.module.__name__.rpartition(".")[2] in SLOW_BUILD_SKIPS.get(request.param, ()) and os.getenv("TINYWEB_TEST_EVERYWHERE") != "1":
    pytest.skip(f"{request.param}: a module run on the other devices (its ops run on {request.param} in the device-level "
                f"modules, see tests/conftest.py; TINYWEB_TEST_EVERYWHERE=1 runs it on {request.param} too)")
  if request.param != "PYTHON":
    yield request.param
    return
  spent = 0
  def budget(prog):   # called before each PYTHON kernel runs
    nonlocal spent
    spent += prog.work
    if spent > PYTHON_WORK_BUDGET:
      pytest.skip(f"PYTHON: this test's shapes need over {PYTHON_WORK_BUDGET:.0e} lane-operations (at kernel {prog.name}): "
                  "too slow for the interpreter; the compiled devices run it")
  Device["PYTHON"].work_hook = budget
  try: yield request.param
  finally: Device["PYTHON"].work_hook = None

@pytest.fixture(params=["CPU", "WEBGPU"])
def model_device(request):
  """The devices the real models (test_model_*.py) are checked on: the CPU and WebGPU."""
  ok, why = Device.check(request.param)
  if not ok: pytest.skip(f"{request.param} unavailable: {why}")
  return request.param

@pytest.hookimpl(tryfirst=True)   # (before `-m browser` selects by the marks)
def pytest_collection_modifyitems(items):
  """`@pytest.mark.browser(name=[values], ...)` marks only the parametrizations whose parameters have those values."""
  for item in items:
    if not (m := item.get_closest_marker("browser")) or not m.kwargs: continue
    params = item.callspec.params if hasattr(item, "callspec") else {}
    if (unknown := set(m.kwargs) - set(params)):
      raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.browser names {sorted(unknown)}, not parameters of it ({list(params)})")
    if not all(params[k] in v for k, v in m.kwargs.items()): item.own_markers = [x for x in item.own_markers if x.name != "browser"]

# without an NVIDIA GPU every kernel the tests build is also NVRTC-compiled as CUDA (see cuda_check.py)
from cuda_check import cuda_compile_check, cuda_compile_errors_fail_the_test, pytest_runtest_setup  # noqa: E402,F401
