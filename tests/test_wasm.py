"""The WASM device (kernels as WebAssembly, run natively by wasmtime): what the parametrized suite does not cover. Results
must equal the CPU device's bit for bit where wasm would trap or differ (NaN and signed zeros in max/min, float16/bfloat16
rounding, shifts past the width; float->int and division: tests/test_like_cpu.py); tinyweb's own assembler
must write the bytes wasmtime's reference one (wat2wasm) writes; buffers share one growing memory; a missing wasmtime
must be reported by name."""
import os, subprocess, sys
import numpy as np
import pytest
from tinyweb import Tensor, Device, dtypes
from tinyweb.codegen.wasm import ALIGN
from helpers import assert_same_bits, same_as_cpu

ok, why = Device.check("WASM")
pytestmark = pytest.mark.skipif(not ok, reason=f"WASM unavailable: {why}")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def test_float16_bfloat16_and_nan_max_match_cpu():
  """float16/bfloat16 round after every op (the module's own conversions, to nearest even, denormals and overflow
  included); maximum/minimum propagate NaN and keep the CPU device's choice between -0.0 and 0.0 (wasm's f32.max would
  not). sin/cos/exp2/log2 are the module's own (or the host's float64 functions) here and the CPU device's libm or own
  polynomials there: those compare within 3 ulp."""
  rng = np.random.default_rng(0)
  x = np.concatenate([rng.standard_normal(61).astype(np.float32) * 100, [np.nan, -0.0, 0.0, np.inf, -np.inf, 65519.0, 3e38]])
  y = np.concatenate([rng.standard_normal(61).astype(np.float32) * 100, [1.0, 0.0, -0.0, np.nan, 2.0, 0.1, 1e-40]])
  for dt in (dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64):
    def fn(d):
      a, b = Tensor(x, device=d).cast(dt), Tensor(y, device=d).cast(dt)
      outs = [a * b + a, a / b, a.maximum(b), a.minimum(b), b.abs().sqrt(), a.trunc(), a.reciprocal(), (a < b).cast(dt),
              (a != b).cast(dt), a.sum().expand(a.shape), a.cast(dtypes.int32).cast(dt), a.bitcast(dtypes.int16 if dt.itemsize == 2 else
              dtypes.int32 if dt.itemsize == 4 else dtypes.int64).cast(dt)]
      return outs[0].stack(*outs[1:]).cast(dtypes.float32).numpy()
    got, exp = same_as_cpu("WASM", fn)
    assert_same_bits(got, exp)
    got, exp = same_as_cpu("WASM", lambda d: Tensor(x, device=d).cast(dt).mul(3.1).exp2().stack(Tensor(y, device=d).cast(dt).abs().add(1).log2(),
                                                                                    Tensor(x, device=d).cast(dt).sin()).numpy())
    np.testing.assert_array_max_ulp(got, exp, maxulp=3)

def test_float16_conversion_of_every_half():
  """Every float16 bit pattern -> float32 -> float16 round trips, and float32s around every rounding boundary round like
  numpy (to nearest even, to inf past 65520, into denormals)."""
  bits = np.arange(65536, dtype=np.uint16)
  h = bits.view(np.float16)
  got = Tensor(bits, device="WASM").bitcast(dtypes.float16).cast(dtypes.float32).numpy()
  np.testing.assert_array_equal(np.isnan(got), np.isnan(h))
  np.testing.assert_array_equal(got[~np.isnan(got)], h[~np.isnan(h)].astype(np.float32))
  finite = h[np.isfinite(h)].astype(np.float32)
  mids = np.concatenate([finite, np.nextafter(finite, np.inf), np.nextafter(finite, -np.inf), (finite[:-1] + finite[1:]) / 2,
                         np.float32([65519.99, 65520.0, -65520.0, 1e-8, 2.9e-8, 3e-8])]).astype(np.float32)
  with np.errstate(over="ignore"): exp = mids.astype(np.float16)   # (to inf past 65520, as meant)
  assert_same_bits(Tensor(mids, device="WASM").cast(dtypes.float16).numpy(), exp)

def test_float32_exp2_log2_are_the_cpu_devices_polynomials():
  """float32 exp2/log2 run in the module: the CPU device's polynomials step for step (without fma: tinyweb.scalar's
  cpu_exp2f/cpu_log2f with fused=False give the same bits), special values included."""
  from tinyweb.scalar import cpu_exp2f, cpu_log2f
  x = np.concatenate([np.random.default_rng(2).standard_normal(4000).astype(np.float32) * 60,
                      np.float32([np.nan, np.inf, -np.inf, 0, -0.0, 128, 127.9, -149.5, -150, -151, 1e-40, -1e-40, 3e38])])
  assert_same_bits(Tensor(x, device="WASM").exp2().numpy(), np.float32([cpu_exp2f(float(v)) for v in x]))
  assert_same_bits(Tensor(x, device="WASM").log2().numpy(), np.float32([cpu_log2f(float(v)) for v in x]))

def test_float32_sin_cos_in_the_module_are_the_doubles_rounded():
  """float32 sin/cos run in the module (a float64 reduction by pi/2 and series; the host's only past 2^28): within an ulp of
  numpy's float64 sin/cos rounded to float32 from 1e-40 to 3e38, both signs, -0.0 kept, NaN for inf and NaN."""
  rng = np.random.default_rng(3)
  x = np.concatenate([rng.standard_normal(4000) * s for s in (1, 30, 1e4, 1e7, 2e8, 1e9)] +
                     [[0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 1e-7, 2.0 ** 28, -2.0 ** 28, 2.0 ** 28 - 16, 3e38,
                       np.pi / 4, np.pi / 2, np.pi, 1e4 * np.pi]]).astype(np.float32)
  for name in ("sin", "cos"):
    got = getattr(Tensor(x, device="WASM"), name)().numpy()
    with np.errstate(invalid="ignore"): exp = getattr(np, name)(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_max_ulp(got, exp, maxulp=1)
    assert_same_bits(got[x == 0], exp[x == 0])   # (the sign of sin(-0.0))

def _sequential_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """a @ b in float32 as a loop over k computes it: each product rounded, then added to its output's sum in order."""
  out = np.zeros((a.shape[0], b.shape[1]), np.float32)
  for k in range(a.shape[1]): out = out + a[:, k:k + 1] * b[k:k + 1, :]
  return out

def test_vector_groups_run_as_simd128_and_change_no_value():
  """Register-tiled reductions (a matmul's row of outputs) run as f32x4 ops: contiguous loads (a @ b), gathers (a @ b.T),
  blocked accumulators (k = 256: Opt BLOCK starts each block's sums from the last), a row sum; every lane computes what
  its scalar uop would, so the results equal float32 sums taken in order, bit for bit."""
  from tinyweb import events
  rng = np.random.default_rng(5)
  a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((24, 256), (256, 32), (32, 256)))
  srcs = []
  with events.watching(lambda ev, f: srcs.append(f["src"]) if ev == "lower" else None):
    ta, tb, tc = (Tensor(x, device="WASM").realize() for x in (a, b, c))
    srcs.clear()
    got = [(ta @ tb).numpy(), (ta @ tc.T).numpy(), ta.sum(0).numpy()]
  assert len(srcs) == 3 and all("f32x4.add" in s for s in srcs), [s.count("f32x4") for s in srcs]
  assert "v128.load" in srcs[0] and "f32x4.replace_lane" in srcs[1]
  assert_same_bits(got[0], _sequential_matmul(a, b))
  assert_same_bits(got[1], _sequential_matmul(a, c.T))
  assert_same_bits(got[2], _sequential_matmul(np.ones((1, 24), np.float32), a)[0])

@pytest.mark.parametrize("dt", [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64],
                         ids=lambda d: np.dtype(d).name)
def test_shifts_past_the_width_match_cpu(dt):
  """8/16-bit shifts compute in 32 bits like C and truncate; amounts wrap at the register width like x86's."""
  info, bits = np.iinfo(dt), np.dtype(dt).itemsize * 8
  a = np.resize(np.array([info.min, info.max, -1 if info.min < 0 else 200, 3, 0, 77], dt), bits + 8)
  s = np.arange(bits + 8).astype(dt)
  for op in (lambda x, y: x << y, lambda x, y: x >> y):
    got, exp = same_as_cpu("WASM", lambda d: op(Tensor(a, device=d), Tensor(s, device=d)).numpy())
    assert_same_bits(got, exp)

def _without_custom_sections(module: bytes) -> bytes:
  """The module's bytes less its custom sections (wat2wasm adds a "name" section for the $names)."""
  out, i = bytearray(module[:8]), 8
  while i < len(module):
    sid, j, size, shift = module[i], i + 1, 0, 0
    while True:
      size |= (module[j] & 0x7f) << shift
      shift, j = shift + 7, j + 1
      if not module[j - 1] & 0x80: break
    if sid != 0: out += module[i:j + size]
    i = j + size
  return bytes(out)

def test_assembler_writes_what_wat2wasm_writes(monkeypatch):
  """tinyweb's pure-Python assembler (it must run in Pyodide) gives wasmtime's wat2wasm bytes for the kernels of a spread
  of ops and dtypes (the text the renderer writes is valid WebAssembly text)."""
  import wasmtime
  import tinyweb.backends.wasm as backend
  dev, seen, real = Device["WASM"], [], backend.assemble
  def both(src: str) -> bytes:
    seen.append(src)
    mine = real(src)
    assert mine == _without_custom_sections(bytes(wasmtime.wat2wasm(src))), src
    return mine
  monkeypatch.setattr(backend, "assemble", both)
  monkeypatch.setattr(dev.compiler, "cached", lambda src: None)   # (every kernel assembled here, none from the kernel cache)
  x = np.linspace(-3, 3, 37, dtype=np.float32)
  for dt in (dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16, dtypes.int8, dtypes.uint16, dtypes.int64, dtypes.uint64):
    a = Tensor(x * 7, device="WASM").cast(dt)
    (a * a + a).maximum(a // 3 if not dt.is_float else a.exp2()).sum(0, keepdim=True).cast(dtypes.float32).sin().numpy()
    ((a.reshape(1, 37).pad(((0, 0), (2, 2))) < 1).where(a.reshape(1, 37).pad(((0, 0), (2, 2))), 0) % 5).numpy()
  assert len(seen) >= 10

def test_a_second_process_loads_the_kernels_compiled_code_from_the_cache(tmp_path):
  """The kernel cache keeps each kernel's machine code (wasmtime's, serialized): a second process with the same cache
  assembles and compiles nothing, and computes the same."""
  import subprocess, sys
  code = ("import numpy as np, tinyweb.backends.wasm as backend\n"
          "from tinyweb import Tensor\n"
          "calls = []\n"
          "real = backend.assemble\n"
          "backend.assemble = lambda src: calls.append(src) or real(src)\n"
          "x = Tensor(np.arange(64, dtype=np.float32).reshape(8, 8), device='WASM')\n"
          "print(((x @ x).relu().sum(1) + x.exp2().max()).numpy().tolist(), len(calls))\n")
  run = lambda: subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT,
                               env={**os.environ, "TINYWEB_CACHE_DIR": str(tmp_path)})
  first, second = run(), run()
  assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
  import ast
  (values, assembled), (values2, assembled2) = [(ast.literal_eval(p.stdout.strip().rpartition(" ")[0]), int(p.stdout.split()[-1]))
                                                for p in (first, second)]
  x = np.arange(64, dtype=np.float32).reshape(8, 8)
  np.testing.assert_allclose(values, np.maximum(x @ x, 0).sum(1) + np.exp2(x).max(), rtol=1e-6)
  assert values2 == values and assembled >= 2 and assembled2 == 0

def test_bad_text_is_refused_with_the_source():
  with pytest.raises(RuntimeError, match="WASM: cannot assemble a kernel.*unknown instruction 'f32.frobnicate'"):
    Device["WASM"].compiler.compile('(module\n  (func $f (export "f")\n    f32.frobnicate\n  )\n)')

def test_buffers_share_one_growing_memory():
  """Buffers are ranges of one memory: allocations past its size grow it; freed ranges merge and are used again."""
  alloc = Device["WASM"].allocator
  # larger than any range the tests before left free, so all three come from the top, one after another
  size = max([3 << 20] + [n + ALIGN for _, n in alloc.free_ranges])
  big = [alloc._alloc(size) for _ in range(3)]   # past the first page: the memory grows
  assert big[1] == big[0] + size and big[2] == big[1] + size, big
  for i, h in enumerate(big): alloc.copyin(h, memoryview(bytes([i + 1]) * size))
  out = bytearray(size)
  for i, h in enumerate(big):
    alloc.copyout(memoryview(out), h)
    assert out == bytes([i + 1]) * size
  alloc._free(big[0], size)
  alloc._free(big[1], size)
  # the two freed neighbours merged into one range (with a free range before them too, if the tests before left one)
  assert any(a <= big[0] and big[0] + 2 * size <= a + n for a, n in alloc.free_ranges), (big, alloc.free_ranges)
  alloc._free(big[2], size)
  x = np.arange(2_000_000, dtype=np.float32)
  np.testing.assert_array_equal((Tensor(x, device="WASM") * 2).numpy(), x * 2)

def test_generated_text_shows_at_debug4():
  code = "from tinyweb import Tensor; print((Tensor([1.5, 2.0], device='WASM') * 3).tolist())"
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       env={**os.environ, "DEBUG": "4"})
  assert out.returncode == 0, out.stderr
  assert '(func $E_2 (export "E_2") (param $data0 i32) (param $data1 i32)' in out.stdout and "[4.5, 6.0]" in out.stdout

def test_missing_wasmtime_is_reported_by_name():
  """Without wasmtime, Device.check("WASM") says which package is missing and the extra of tinyweb that installs it."""
  code = ("import sys; sys.modules['wasmtime'] = None\n"
          "from tinyweb import Device; print(Device.check('WASM'))")
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
  assert out.returncode == 0, out.stderr
  assert out.stdout.startswith("(False, ") and "wasmtime" in out.stdout and "pip install 'tinyweb[wasm]'" in out.stdout, out.stdout

def test_never_the_default_where_cpu_works():
  code = "from tinyweb import Device; print(Device.DEFAULT)"
  env = {k: v for k, v in os.environ.items() if k != "DEV"}
  out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env=env)
  assert out.returncode == 0, out.stderr
  if Device.check("CPU")[0]: assert out.stdout.strip() != "WASM"
  assert Device.known().index("WASM") > max(Device.known().index("CPU"), Device.known().index("LLVM"))
