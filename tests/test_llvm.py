"""The LLVM device (LLVM IR through llvmlite's JIT): what the parametrized suite does not cover. Results must equal the CPU
device's bit for bit (same dtype rules, an independent compiler: clang) where LLVM itself would leave them undefined
(NaN in max/min, float16/bfloat16 rounding, small-int shifts; float->int and division: tests/test_like_cpu.py); the disk cache must
serve a second process; a missing llvmlite must be reported by name."""
import os, subprocess, sys, textwrap
import numpy as np
import pytest
from tinyweb import Tensor, Device, dtypes
from helpers import assert_same_bits, same_as_cpu

ok, why = Device.check("LLVM")
pytestmark = pytest.mark.skipif(not ok, reason=f"LLVM unavailable: {why}")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def test_float16_bfloat16_and_nan_max_match_cpu():
  """float16/bfloat16 round after every op (half in memory, bfloat16 as its 16-bit pattern rounded to nearest even);
  maximum/minimum propagate NaN; -0.0 and 0.0 keep the CPU device's choice. exp2 and log2 are libm's on LLVM and the
  CPU device's own vectorizable ones on CPU (within 1 and 3 ulp of libm's): those compare within 3 ulp."""
  rng = np.random.default_rng(0)
  x = np.concatenate([rng.standard_normal(61).astype(np.float32) * 100, [np.nan, -0.0, 0.0, np.inf, -np.inf, 65519.0, 3e38]])
  y = np.concatenate([rng.standard_normal(61).astype(np.float32) * 100, [1.0, 0.0, -0.0, np.nan, 2.0, 0.1, 1e-40]])
  for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
    def fn(d):
      a, b = Tensor(x, device=d).cast(dt), Tensor(y, device=d).cast(dt)
      outs = [a * b + a, a / b, a.maximum(b), a.minimum(b), a.sin(), b.abs().sqrt(),
              a.trunc(), a.reciprocal(), (a < b).cast(dt), (a != b).cast(dt), a.sum().expand(a.shape)]
      return outs[0].stack(*outs[1:]).cast(dtypes.float32).numpy()
    got, exp = same_as_cpu("LLVM", fn)
    assert_same_bits(got, exp)
    got, exp = same_as_cpu("LLVM", lambda d: Tensor(x, device=d).cast(dt).mul(3.1).exp2().stack(Tensor(y, device=d).cast(dt).abs().add(1).log2()).numpy())
    np.testing.assert_array_max_ulp(got, exp, maxulp=3)

@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.uint16], ids=lambda d: np.dtype(d).name)
def test_small_int_shifts_past_the_width(dt):
  """8/16-bit shifts compute in int like C (LLVM's i8 shift by >= 8 would be poison): bits shifted out are gone, >> fills
  with the sign. Shift amounts 0..(bits+7), checked against numpy."""
  info, bits = np.iinfo(dt), np.dtype(dt).itemsize * 8
  a = np.resize(np.array([info.min, info.max, -1 if info.min < 0 else 200, 3, 0, 77], dt), bits + 8)
  s = np.arange(bits + 8).astype(dt)
  np.testing.assert_array_equal((Tensor(a, device="LLVM") << Tensor(s, device="LLVM")).numpy(),
                                (a.astype(np.int64) << s.astype(np.int64)).astype(dt))
  np.testing.assert_array_equal((Tensor(a, device="LLVM") >> Tensor(s, device="LLVM")).numpy(),
                                (a.astype(np.int64) >> s.astype(np.int64)).astype(dt))

def test_large_kernels_split_over_cores():
  """Kernels above PARALLEL_MIN_WORK run their outer loop in chunks [core_lo, core_hi) on the pool; every chunk must be
  computed exactly once (odd sizes, so the chunks are uneven)."""
  rng = np.random.default_rng(1)
  x = rng.standard_normal((1001, 517)).astype(np.float32)
  t = Tensor(x, device="LLVM")
  np.testing.assert_allclose((t * 2 + 1).relu().numpy(), np.maximum(x * 2 + 1, 0), rtol=1e-6)
  np.testing.assert_allclose(t.sum(1).numpy(), x.sum(1), rtol=1e-4, atol=1e-4)
  w = rng.standard_normal((517, 129)).astype(np.float32)
  np.testing.assert_allclose((t @ Tensor(w, device="LLVM")).numpy(), x @ w, rtol=1e-4, atol=1e-3)

def test_generated_ir_shows_at_debug4_and_bad_ir_is_refused():
  code = "from tinyweb import Tensor; print((Tensor([1.5, 2.0], device='LLVM') * 3).tolist())"
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "DEBUG": "4", "DISABLE_COMPILER_CACHE": "1"})
  assert out.returncode == 0, out.stderr
  assert "define void @E_2(ptr noalias %data0, ptr noalias %data1" in out.stdout and "[4.5, 6.0]" in out.stdout
  with pytest.raises(RuntimeError, match="LLVM rejected a kernel's IR"):
    Device["LLVM"].compiler.compile("define void @f() {\n  ret i32 0\n}")

def test_disk_cache_serves_a_second_process(tmp_path):
  """A second process finds the object code on disk: it must not compile (LLVMCompiler.compile is made to fail there)."""
  script = textwrap.dedent("""
    import sys, numpy as np
    from tinyweb import Tensor, Device
    if sys.argv[1] == "second":
      def refuse(src): raise AssertionError("compiled although the kernel is in the disk cache")
      Device["LLVM"].compiler.compile = refuse
    x = Tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="LLVM")
    print(((x * 2).exp2().sum(1)).tolist())
  """)
  env = {**os.environ, "TINYWEB_CACHE_DIR": str(tmp_path)}
  env.pop("DISABLE_COMPILER_CACHE", None)
  first = subprocess.run([sys.executable, "-c", script, "first"], cwd=ROOT, capture_output=True, text=True, env=env)
  assert first.returncode == 0, first.stderr
  files = sorted(os.listdir(tmp_path / "kernels"))
  assert files, "the first process wrote nothing to the disk cache"
  second = subprocess.run([sys.executable, "-c", script, "second"], cwd=ROOT, capture_output=True, text=True, env=env)
  assert second.returncode == 0, second.stderr
  assert second.stdout == first.stdout
  exp = (2.0 ** (np.arange(12, dtype=np.float32).reshape(3, 4) * 2)).sum(1)
  np.testing.assert_allclose(eval(first.stdout), exp, rtol=1e-6)
  assert sorted(os.listdir(tmp_path / "kernels")) == files

@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux mmap (MAP_NORESERVE, MAP_FIXED_NOREPLACE)")
def test_kernel_code_and_constants_far_apart_in_memory():
  """A long-running process's address space fragments: a kernel's code and its constants may be given pages GBs apart.
  The JIT must link them anyway (with RuntimeDyld, the default of llvmlite's LLJIT, a 32-bit PC-relative reference to a
  constant overflowed and LLVM aborted the whole process). Here the free pages are made 4 GiB apart on purpose: holes
  of one page under 4 GiB reservations, every other gap filled."""
  script = textwrap.dedent("""
    import ctypes, mmap, numpy as np
    from tinyweb import Tensor
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    PAGE, FAR, MAP_NORESERVE, MAP_FIXED_NOREPLACE = mmap.PAGESIZE, 4 << 30, 0x4000, 0x100000
    def reserve(n, at=None):   # address space only: PROT_NONE, nothing committed
      flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_NORESERVE | (MAP_FIXED_NOREPLACE if at else 0)
      p = libc.mmap(at, n, 0, flags, -1, 0)
      assert p != ctypes.c_void_p(-1).value, ctypes.get_errno()
      return p
    x = Tensor(np.linspace(-3, 3, 37, dtype=np.float32), device="LLVM")
    (x + 1).numpy()   # the device and its JIT are up
    holes = []
    for _ in range(20):
      block = reserve(FAR + 2 * PAGE)
      libc.munmap(block + FAR, PAGE)
      holes.append(block + FAR)
    spans = [[int(a, 16) for a in line.split()[0].split("-")] for line in open("/proc/self/maps")]
    for (_, end), (start, _) in zip(spans, spans[1:]):
      if 0 < start - end < (1 << 30) and end not in holes: reserve(start - end, end)
    for i in range(5):   # kernels with a constant pool (.rodata) and libm calls
      c = np.float32(1.25 + i)
      got = ((x * c + 0.5).sin() * 3.25).exp2().numpy()
      xs = x.numpy()
      np.testing.assert_allclose(got, np.exp2(np.sin(xs * c + np.float32(0.5)) * np.float32(3.25)), rtol=2e-6)
    print("linked")
  """)
  out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "DISABLE_COMPILER_CACHE": "1"})
  assert out.returncode == 0 and "linked" in out.stdout, out.stdout + out.stderr[-3000:]

def test_missing_llvmlite_is_named_and_cpu_stays_default():
  script = textwrap.dedent("""
    import sys
    sys.modules["llvmlite"] = None   # as if it were not installed
    from tinyweb import Device
    ok, why = Device.check("LLVM")
    print(ok, why)
  """)
  out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
  assert out.returncode == 0, out.stderr
  assert out.stdout.startswith("False") and "install tinyweb[llvm]: pip install 'tinyweb[llvm]'" in out.stdout
  if Device.check("CPU")[0]:
    env = {k: v for k, v in os.environ.items() if k != "DEV"}
    code = "from tinyweb import Device; print(Device.DEFAULT)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout.strip() != "LLVM", out.stdout + out.stderr
