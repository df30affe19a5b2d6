"""WebGPU's limits (issue 3): big grids, packed 8/16-bit storage at odd offsets, float16 with and without shader-f16,
refused 64-bit dtypes, many inputs, and WGSL in DEBUG=4. The rest of the suite runs on WEBGPU through the `device`
fixture; these are the cases specific to WebGPU."""
import os, subprocess, sys, textwrap
import numpy as np
import pytest
from tinyweb import Tensor, Device, Context, GlobalCounters, dtypes

ok, why = Device.check("WEBGPU")
pytestmark = pytest.mark.skipif(not ok, reason=f"WEBGPU unavailable: {why}")

def test_more_than_65535_workgroups():
  n = 20_000_000   # 20M threads: more workgroups than one grid dimension may have, so the grid is folded
  x = np.random.default_rng(0).standard_normal(n, dtype=np.float32)
  t = Tensor(x, device="WEBGPU")
  GlobalCounters.reset()
  out = ((t * 3 - 1).relu()).numpy()
  assert GlobalCounters.kernel_count == 1
  np.testing.assert_allclose(out, np.maximum(x * 3 - 1, 0), rtol=1e-6)

@pytest.mark.parametrize("dt", [np.uint8, np.int8, np.int16, np.uint16, np.bool_])
def test_packed_small_types_at_odd_offsets(dt):
  rng = np.random.default_rng(1)
  a = (rng.random(37) < 0.5) if dt == np.bool_ else rng.integers(np.iinfo(dt).min, np.iinfo(dt).max, 37, endpoint=True).astype(dt)
  t = Tensor(a, device="WEBGPU")
  np.testing.assert_array_equal(t[1::3].numpy(), a[1::3])            # loads at offsets that are not word aligned
  np.testing.assert_array_equal(t.flip(0)[3:30].numpy(), a[::-1][3:30])
  out = t[5:] if dt == np.bool_ else (t[5:] + t[:-5])                 # stores of sub-word elements from many threads
  ref = a[5:] if dt == np.bool_ else (a[5:] + a[:-5]).astype(dt)
  np.testing.assert_array_equal(out.numpy(), ref)
  u = Tensor(a, device="WEBGPU").contiguous().realize()
  u[2:9] = 1                                                           # in-place update of a few elements in the middle
  ref2 = a.copy(); ref2[2:9] = 1
  np.testing.assert_array_equal(u.numpy(), ref2)

def test_float16_with_shader_f16():
  if "shader-f16" not in Device["WEBGPU"].features: pytest.skip("the adapter lacks shader-f16")
  a = np.random.default_rng(2).standard_normal(100).astype(np.float16)
  t = Tensor(a, device="WEBGPU")
  np.testing.assert_array_equal((t * 2 + 1).numpy(), (a * np.float16(2) + np.float16(1)).astype(np.float16))

def test_float16_without_shader_f16_is_refused_clearly():
  code = textwrap.dedent("""
    from tinyweb import Tensor, dtypes
    try: Tensor([1.0, 2.0], device="WEBGPU", dtype=dtypes.float16).tolist(); print("no error")
    except TypeError as e: print("TypeError:", e)
  """)
  out = subprocess.run([sys.executable, "-c", code], env={**os.environ, "TINYWEB_WEBGPU_NO_F16": "1"}, capture_output=True, text=True)
  assert out.returncode == 0, out.stderr
  assert "TypeError" in out.stdout and "float16" in out.stdout and "shader-f16" in out.stdout, out.stdout

@pytest.mark.parametrize("dt", [dtypes.int64, dtypes.uint64, dtypes.float64])
def test_64_bit_dtypes_are_refused_at_the_op(dt):
  with pytest.raises(TypeError, match=f"{dt.name}.*WEBGPU"): Tensor([1, 2, 3], device="WEBGPU", dtype=dt)
  x = Tensor([1, 2, 3], device="WEBGPU")
  with pytest.raises(TypeError, match=f"{dt.name}.*WEBGPU"): x.cast(dt).realize()

def test_twelve_distinct_inputs_in_one_kernel():
  rng = np.random.default_rng(3)
  arrs = [rng.standard_normal(64).astype(np.float32) for _ in range(12)]
  ts = [Tensor(a, device="WEBGPU") for a in arrs]
  out = ts[0]
  for t in ts[1:]: out = out + t
  np.testing.assert_allclose(out.numpy(), sum(arrs), rtol=1e-5, atol=1e-5)

def test_debug4_prints_wgsl(capsys):
  with Context(DEBUG=4): (Tensor([1.0, 2.0], device="WEBGPU") * 7.5).realize()
  out = capsys.readouterr().out
  assert "@compute" in out and "@workgroup_size" in out and "var<storage" in out

def test_one_submit_per_realize_and_per_jit_replay():
  from tinyweb import TinyJit
  dev = Device["WEBGPU"]
  rng = np.random.default_rng(4)
  a = rng.standard_normal((64, 64)).astype(np.float32)
  x = Tensor(a, device="WEBGPU").realize()
  def f(t): return ((t @ t).relu().sum(0) + t.max(1)).softmax()
  def ref(a):
    z = np.maximum(a @ a, 0).sum(0) + a.max(1)
    e = np.exp(z - z.max())
    return e / e.sum()
  GlobalCounters.reset()
  before = dev.submits
  y = f(x).realize()
  assert GlobalCounters.kernel_count >= 3 and dev.submits - before == 1
  np.testing.assert_allclose(y.numpy(), ref(a), rtol=1e-4, atol=1e-6)
  jf = TinyJit(lambda t: f(t).realize())
  for i in range(4):
    b = rng.standard_normal((64, 64)).astype(np.float32)
    t = Tensor(b, device="WEBGPU").realize()
    before = dev.submits
    out = jf(t)
    if i >= 2: assert dev.submits - before == 1   # a replay: all its kernels in one submit
    np.testing.assert_allclose(out.numpy(), ref(b), rtol=1e-4, atol=1e-6)

def test_device_loss_gives_a_clear_error():
  # destroying the device is how a test can lose it; in a subprocess, since the device is shared by the whole process
  code = textwrap.dedent("""
    from tinyweb import Tensor, Device
    x = Tensor([1.0, 2.0], device="WEBGPU").realize()
    Device["WEBGPU"].device.destroy()
    for attempt in (lambda: (x * 2).numpy(), lambda: Tensor([3.0], device="WEBGPU").numpy()):
      try: attempt()
      except RuntimeError as e: print(type(e).__name__, e)
  """)
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120).stdout
  lines = out.strip().splitlines()
  assert len(lines) == 2 and all(l.startswith("DeviceLostError WEBGPU: the GPU device was lost") for l in lines), out

def test_buffer_over_the_binding_limit_is_refused_before_dispatch(monkeypatch):
  # lavapipe binds 128 MiB, browsers often 128 MiB or less: pretend 1 MiB so the test stays small
  monkeypatch.setattr(Device["WEBGPU"], "max_binding", 1 << 20)
  Device["WEBGPU"].allocator.free_cache()   # freed buffers of earlier tests were checked against the real limit when made
  small = Tensor.ones(1000, device="WEBGPU")
  np.testing.assert_array_equal((small * 2).numpy(), np.full(1000, 2, np.float32))
  with pytest.raises(MemoryError, match=r"WEBGPU: a buffer of 2097152 bytes exceeds the adapter's maxStorageBufferBindingSize \(1048576"):
    Tensor(np.zeros(1 << 19, np.float32), device="WEBGPU").realize()
  with pytest.raises(MemoryError, match="maxStorageBufferBindingSize"):
    small.reshape(1000, 1).expand(1000, 600).contiguous().realize()   # a kernel output of 2.4 MB
