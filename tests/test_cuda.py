"""The CUDA renderer and NVRTC compiler, without a GPU: every dtype and op compiles for sm_80 and sm_90, the compiled code
keeps the CPU device's rounding, invalid CUDA fails the suite's compile check with NVRTC's log. Running kernels on a GPU
is tested by the whole suite through the `device` fixture where the CUDA device is available."""
import os, re, subprocess, sys, textwrap
import numpy as np
import pytest
from tinyweb import Tensor, dtypes
from tinyweb.device import Device
from tinyweb.schedule import create_schedule
from tinyweb.codegen.lower import lower
from tinyweb.codegen.cuda import CUDARenderer

@pytest.fixture(scope="module")
def nvrtc():
  try:
    from tinyweb.backends.cuda import NVRTC
    return NVRTC.get()
  except (RuntimeError, ImportError) as e: pytest.skip(f"NVRTC unavailable: {e}")

def kernel_asts(*ts: Tensor) -> list:
  items, _, _ = create_schedule([t.uop for t in ts])
  return [it.ast for it in items if it.kind == "kernel"]

def ptx_of(t: Tensor, arch="compute_80") -> tuple[str, str]:
  """(CUDA source, PTX) of the last kernel computing `t`."""
  from tinyweb.backends.cuda import NVRTCCompiler
  r = CUDARenderer()
  src = r.render(lower(kernel_asts(t)[-1], r))
  return src, NVRTCCompiler(arch).compile(src).rstrip(b"\0").decode()

def ops_for(dt) -> list[Tensor]:
  """Every op tinyweb has for dtype `dt`, on small inputs (with a tensor divisor, so x/0 guards are rendered)."""
  a = Tensor(np.arange(1, 13, dtype=np.float32).reshape(3, 4), device="CPU").cast(dt)
  b = Tensor(np.arange(12, 0, -1, dtype=np.float32).reshape(3, 4), device="CPU").cast(dt)
  big = Tensor(np.ones((2, 4096), np.float32), device="CPU").cast(dt)   # a reduction over >= 1024 elements: grouped in shared memory
  out = [a + b, a * b, a.maximum(b), a.minimum(b), a < b, a == b, a != b, (a < b).where(a, b), a.sum(), a.max(1),
         big.sum(1), big.max(1), *[a.cast(d) for d in dtypes.all if d != dt]]
  if not dt.is_bool: out += [a - b, -a]
  if dt.is_int: out += [a // b, a % b, a & b, a | b, a ^ b, a << 1, a >> 1]
  if dt.is_bool: out += [a & b, a | b, a ^ b]
  if dt.is_float:
    out += [a / b, a.exp2(), a.log2(), a.sin(), a.sqrt(), a.trunc(), a.reciprocal(), a.isnan(),
            *[a.bitcast(d) for d in dtypes.all if d.is_int and d.itemsize == dt.itemsize]]
  return out

@pytest.mark.parametrize("dt", dtypes.all, ids=lambda d: d.name)
def test_every_op_compiles_for_sm80_and_sm90(nvrtc, dt):
  from cuda_check import NVRTCCheck
  check = NVRTCCheck(("sm_80", "sm_90"))
  asts = kernel_asts(*ops_for(dt))
  assert len(asts) >= 20
  for ast in asts: check(ast)   # raises with NVRTC's log on invalid CUDA

def test_no_fused_multiply_add(nvrtc):
  # like the CPU device (clang -ffp-contract=off), a*b+c rounds twice: no fma in the PTX
  a, b, c = (Tensor.rand(64, device="CPU").realize() for _ in range(3))
  _, ptx = ptx_of(a * b + c)
  assert "mul.rn.f32" in ptx and "add.rn.f32" in ptx and "fma" not in ptx

@pytest.mark.parametrize("dt, cvt", [(dtypes.float16, "cvt.rn.f16.f32"), (dtypes.bfloat16, None)], ids=["float16", "bfloat16"])
def test_half_types_round_after_every_op(nvrtc, dt, cvt):
  # three float ops on 16-bit floats: each result is rounded back to 16 bits (float16 by the cvt.rn instruction,
  # bfloat16 by round-to-nearest-even on the bits, as on the CPU device)
  a, b = (Tensor.rand(64, device="CPU").cast(dt).realize() for _ in range(2))
  src, ptx = ptx_of(((a * b) + a) * b)
  rounds = re.findall(r"tw_f32_to_(b?f16)\(", src.split("__global__")[1])
  assert len(rounds) == 3 + 1   # three ops, then the store
  if cvt: assert cvt in ptx

def test_grouped_reduction_uses_shared_memory(nvrtc):
  # a reduction over 2^16 elements runs on one block of threads that combine partial sums in __shared__ memory;
  # the block size the kernel was compiled for (__launch_bounds__) is the one the lowering chose
  r = CUDARenderer()
  prog = lower(kernel_asts(Tensor.rand(1 << 16, device="CPU").realize().sum())[-1], r)
  src = r.render(prog)
  assert prog.group > 1 and f"__launch_bounds__({prog.local_size})" in src
  assert f"__shared__ float tw_group0[{prog.group}]" in src and src.count("__syncthreads()") == prog.group.bit_length()

def test_nvrtc_error_names_the_kernel_and_shows_the_log(nvrtc):
  from tinyweb.backends.cuda import NVRTCCompiler
  bad = 'extern "C" __global__ void __launch_bounds__(64) E_broken(float* data0) { data0[0] = tw_no_such_function(1.0f); }'
  with pytest.raises(RuntimeError, match=r"(?s)kernel E_broken.*identifier \"tw_no_such_function\" is undefined"):
    NVRTCCompiler("sm_80").compile(bad)

SUBRUN_TEST = """
from tinyweb import Tensor
from tinyweb.uop import Ops
from tinyweb.codegen.cuda import CUDARenderer

def test_builds_a_kernel():
  if {broken}:   # a renderer bug: ADD renders as a call to a function that does not exist
    CUDARenderer.code_for_op = {{**CUDARenderer.code_for_op, Ops.ADD: lambda self, a, b, c, dt: f"tw_missing({{a}}, {{b}})"}}
  assert (Tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], device="CPU") + 0.5).tolist() == [1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5]
"""

@pytest.mark.parametrize("broken", [False, True])
def test_suite_compile_check_fails_the_test_on_invalid_cuda(nvrtc, tmp_path, broken):
  """A pytest run with the suite's check (cuda_check.py) and a test whose kernel renders to invalid CUDA: the test's
  own assertion passes on the CPU, the check turns it into an error showing the kernel and NVRTC's log."""
  if Device.check("CUDA")[0]: pytest.skip("the CUDA device runs here: the compile-only check is off")
  tests_dir = os.path.dirname(os.path.abspath(__file__))
  (tmp_path / "conftest.py").write_text(f"import sys\nsys.path.insert(0, {tests_dir!r})\n"
                                        "from cuda_check import cuda_compile_check, cuda_compile_errors_fail_the_test\n")
  (tmp_path / "test_sub.py").write_text(textwrap.dedent(SUBRUN_TEST.format(broken=broken)))
  env = {**os.environ, "PYTHONPATH": os.path.dirname(tests_dir), "TINYWEB_CUDA_CHECK": "1"}
  p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
                     capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
  out = p.stdout + p.stderr
  if not broken:
    assert p.returncode == 0 and "1 passed" in out and "error" not in out, out
    return
  assert p.returncode == 1 and "1 passed, 1 error" in out, out
  assert "not valid CUDA" in out and "kernel E_7" in out and 'identifier "tw_missing" is undefined' in out, out

def test_device_unavailable_says_why():
  ok, why = Device.check("CUDA")
  if ok: pytest.skip("the CUDA device is available here")
  assert re.search(r"NVIDIA driver|no GPU|NVRTC", why), why

@pytest.fixture
def fake_driver(tmp_path, monkeypatch):
  """tests/fake_libcuda.c built as the driver library: host memory for device memory, launches recorded, not run."""
  import ctypes, shutil
  from tinyweb.backends import cuda
  if (clang := shutil.which("clang")) is None: pytest.skip("clang (to build the fake libcuda) not found")
  so = str(tmp_path / "libcuda.so.1")
  subprocess.run([clang, "-shared", "-fPIC", "-O1", "-o", so, os.path.join(os.path.dirname(__file__), "fake_libcuda.c")], check=True)
  monkeypatch.setattr(cuda, "LIBCUDA", so)
  return ctypes.CDLL(so)   # the same loaded library as the driver's: its globals hold what was recorded

def test_runtime_calls_through_a_fake_driver(nvrtc, fake_driver):
  """The ctypes plumbing of the runtime (argument types, pointers, the launch's parameter array) against a fake
  libcuda: this machine has no GPU, so the fake checks the calls, not the kernel's results."""
  import ctypes
  from tinyweb.backends.cuda import CUDADevice
  dev = CUDADevice("CUDA")
  assert dev.is_real_gpu and dev.compiler.arch == "sm_86" and "Fake GPU" in dev.info["device"]   # the fake's GPU: 8.6
  data = np.arange(6, dtype=np.float32)
  h = dev.allocator.alloc(data.nbytes)
  dev.allocator.copyin(h, memoryview(data).cast("B"))
  out = np.zeros_like(data)
  dev.allocator.copyout(memoryview(out).cast("B"), h)
  np.testing.assert_array_equal(out, data)
  # a kernel is compiled to a cubin for the GPU's arch, loaded by name and launched on the grid and block size the
  # lowering chose, with the buffers' device pointers as its arguments
  x = Tensor(np.ones((300, 5), np.float32), device="CPU")
  r = dev.renderer
  prog = lower(kernel_asts((x + x) * x)[-1], r)
  p = dev.get_program(prog.name, r.render(prog))
  assert bytes((ctypes.c_ubyte * 4).in_dll(fake_driver, "module_head")) == b"\x7fELF"
  assert (ctypes.c_char * 256).in_dll(fake_driver, "function_name").value.decode() == prog.name
  bufs = [dev.allocator.alloc(300 * 5 * 4) for _ in range(len(prog.globals))]
  ctypes.c_int.in_dll(fake_driver, "launch_nargs").value = len(bufs)
  assert p(*bufs, global_size=prog.grid, wait=True) == pytest.approx(1.5e-3)   # the fake's events say 1.5 ms
  assert tuple((ctypes.c_uint * 3).in_dll(fake_driver, "launch_grid")) == prog.grid == (-(-1500 // prog.local_size), 1, 1)
  assert tuple((ctypes.c_uint * 3).in_dll(fake_driver, "launch_block")) == (prog.local_size, 1, 1)
  assert list((ctypes.c_uint64 * 8).in_dll(fake_driver, "launch_args"))[:len(bufs)] == bufs
  assert p(*bufs, global_size=prog.grid) is None and ctypes.c_uint.in_dll(fake_driver, "launch_count").value == 2

def test_driver_without_a_gpu_says_so(fake_driver):
  import ctypes
  from tinyweb.backends.cuda import CUDADevice
  ctypes.c_int.in_dll(fake_driver, "fail_init").value = 100   # cuInit: CUDA_ERROR_NO_DEVICE
  with pytest.raises(RuntimeError, match="NVIDIA driver is installed but finds no GPU"): CUDADevice("CUDA")
