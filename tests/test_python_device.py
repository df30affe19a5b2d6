"""The PYTHON device (a pure-Python interpreter of the linear program): what the parametrized suite does not show.
- it runs with numpy, ctypes and WebGPU unavailable (as in Pyodide without WebGPU) and is then the default device;
- it gives the CPU device's results bit for bit (C semantics: wrapping ints, float32/16/bfloat16 rounding after every
  op, or once per fused multiply-add, IEEE specials, truncating division, casts of NaN/inf) -- a check of the codegen by
  two independent back ends;
- its vectorized loops reduce in the loop's order; gated loads and stores never touch memory where the gate is false."""
import json, math, os, struct, subprocess, sys, textwrap
from fractions import Fraction
import numpy as np
import pytest
from tinyweb import Tensor, dtypes
from tinyweb.device import Device, _DeviceRegistry
import tinyweb.backends.python as pyrt
from tinyweb import scalar

BLOCK_NATIVE = textwrap.dedent("""
  import sys, importlib.abc
  class Block(importlib.abc.MetaPathFinder):   # what Pyodide lacks (numpy, a C compiler via ctypes) or may lack (WebGPU)
    def find_spec(self, name, path, target=None):
      if name.split(".")[0] in ("numpy", "ctypes", "_ctypes", "wgpu", "cffi", "_cffi_backend"):
        raise ImportError(f"blocked: {name}")
  sys.meta_path.insert(0, Block())
""")

def test_runs_without_numpy_ctypes_and_webgpu():
  code = BLOCK_NATIVE + textwrap.dedent("""
    import json, os
    os.environ.pop("DEV", None)
    from tinyweb import Tensor, Device
    x = Tensor([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]], requires_grad=True)
    w = Tensor([[0.1, 0.2], [-0.3, 0.4], [0.5, -0.6]], requires_grad=True)
    b = Tensor([0.01, -0.02], requires_grad=True)
    y = (x @ w + b).relu()
    loss = (y * y).sum() + y.max()
    loss.backward()
    print(json.dumps({"device": Device.DEFAULT, "x_device": x.device, "loss": loss.item(), "y": y.tolist(),
                      "gx": x.grad.tolist(), "gw": w.grad.tolist(), "gb": b.grad.tolist(),
                      "native": sorted(m for m in ("numpy", "ctypes", "wgpu") if m in sys.modules)}))
  """)
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                       cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert out.returncode == 0, out.stderr
  got = json.loads(out.stdout.strip().splitlines()[-1])
  assert got["device"] == "PYTHON" and got["x_device"] == "PYTHON" and got["native"] == []
  # the notice that the default is the slow fallback, and why the others are missing
  assert "default device is PYTHON, a slow fallback" in out.stderr and "blocked: ctypes" in out.stderr, out.stderr
  # the same computation by hand, in float64
  x = [[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]]
  w = [[0.1, 0.2], [-0.3, 0.4], [0.5, -0.6]]
  b = [0.01, -0.02]
  z = [[sum(x[i][k] * w[k][j] for k in range(3)) + b[j] for j in range(2)] for i in range(2)]
  y = [[max(v, 0.0) for v in row] for row in z]
  flat = [v for row in y for v in row]
  top = flat.index(max(flat))
  loss = sum(v * v for v in flat) + max(flat)
  gy = [[(2 * y[i][j] + (1.0 if i * 2 + j == top else 0.0)) * (1.0 if z[i][j] > 0 else 0.0) for j in range(2)]
        for i in range(2)]
  gx = [[sum(gy[i][j] * w[k][j] for j in range(2)) for k in range(3)] for i in range(2)]
  gw = [[sum(x[i][k] * gy[i][j] for i in range(2)) for j in range(2)] for k in range(3)]
  gb = [sum(gy[i][j] for i in range(2)) for j in range(2)]
  for name, ref in (("y", y), ("gx", gx), ("gw", gw), ("gb", gb)):
    np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-6, err_msg=name)
  assert math.isclose(got["loss"], loss, rel_tol=1e-5)

def test_default_prefers_any_other_device(monkeypatch):
  monkeypatch.delenv("DEV", raising=False)
  reg = _DeviceRegistry()
  reg["PYTHON"] = Device["PYTHON"]
  assert reg.DEFAULT == "PYTHON"   # alone (nothing failed either): the fallback is the default, without a notice
  ok, why = Device.check("CPU")
  if not ok: pytest.skip(f"needs a device besides PYTHON to register as the other one; CPU unavailable: {why}")
  reg = _DeviceRegistry()
  reg["PYTHON"] = Device["PYTHON"]
  reg["OTHER"] = Device["CPU"]   # (any device that is not the fallback)
  assert reg.DEFAULT == "OTHER"

# ---- bit-for-bit agreement with the CPU device (clang) ----

def cpu_or_skip():
  ok, why = Device.check("CPU")
  if not ok: pytest.skip(f"CPU device unavailable ({why}): nothing to compare the interpreter with")

SPECIAL_F = [0.0, -0.0, 1.0, -1.5, 2.5, 1e-30, -3e38, 3e38, 65519.0, 65520.0, 1e5, math.inf, -math.inf, math.nan, 7.0, -0.3]
INTS = [0, 1, -1, 7, -7, 2**31 - 1, -2**31, 123456789, -98765, 3]

def bits(t: Tensor) -> list[int]:
  """The result's bit patterns, with every NaN made the same (a NaN's sign and payload are the platform's choice:
  x86's default NaN is negative)."""
  raw = bytes(t.realize().data().cast("B"))
  n, dt = t.dtype.itemsize, t.dtype
  out = [int.from_bytes(raw[i:i + n], sys.byteorder) for i in range(0, len(raw), n)]
  if dt.is_float:
    exp_bits = {2: 5 if dt == dtypes.float16 else 8, 4: 8, 8: 11}[n]
    inf = ((1 << exp_bits) - 1) << (n * 8 - 1 - exp_bits)
    out = [-1 if (b & ((1 << (n * 8 - 1)) - 1)) > inf else b for b in out]
  return out

def both(fn, *cols, dt=dtypes.float32):
  """fn applied to the columns (lists) as tensors of dtype dt on CPU and on PYTHON: their bit patterns."""
  return [bits(fn(*[Tensor(c, dtype=dt, device=d) for c in cols])) for d in ("CPU", "PYTHON")]

FLOAT_EXPRS = {
  "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b, "sqrt": lambda a, b: a.sqrt(),
  "recip": lambda a, b: a.reciprocal(), "max_nan": lambda a, b: a.maximum(b), "min_nan": lambda a, b: a.minimum(b),
  "trunc": lambda a, b: a.trunc(), "cmp": lambda a, b: (a < b) + (a != b) * 2 + (a == b) * 4,
  "where": lambda a, b: (a > b).where(a, b * 3), "sum_rows": lambda a, b: (a * b).reshape(4, 4).sum(1),
  "max_rows": lambda a, b: (a - b).reshape(4, 4).max(1), "to_int8": lambda a, b: (a * 100).cast(dtypes.int8),
  "to_int32": lambda a, b: (a * 1e9).cast(dtypes.int32), "to_uint32": lambda a, b: (a * 3e9).cast(dtypes.uint32),
  "to_int64": lambda a, b: (a * 1e18).cast(dtypes.int64), "to_uint64": lambda a, b: (a * 1e19).cast(dtypes.uint64),
  "to_bool": lambda a, b: a.cast(dtypes.bool), "to_half": lambda a, b: (a * 3).cast(dtypes.float16),
  "to_bf16": lambda a, b: (a * 3).cast(dtypes.bfloat16), "to_f64": lambda a, b: (a / 3).cast(dtypes.float64) * 3,
  "bitcast": lambda a, b: (a + b).bitcast(dtypes.int32), "fmod": lambda a, b: a.fmod(b), "remainder": lambda a, b: a % b,
}

FLOAT_DTYPES = (dtypes.float32, dtypes.float16, dtypes.bfloat16, dtypes.float64)
@pytest.mark.parametrize("name,dt", [(n, dt) for n in FLOAT_EXPRS for dt in FLOAT_DTYPES
                                     if n != "bitcast" or dt == dtypes.float32])   # (bitcast to int32: 32-bit floats)
def test_float_ops_match_cpu_bitwise(name, dt):
  cpu_or_skip()
  a = SPECIAL_F
  b = list(reversed(SPECIAL_F))
  cpu, py = both(FLOAT_EXPRS[name], a, b, dt=dt)
  assert py == cpu, f"{name} on {dt.name}: PYTHON {py} vs CPU {cpu}"

def nearest_f32(v) -> float:
  """The float32 nearest the exact rational v (ties to an even mantissa), by exact comparison with its neighbours."""
  guess = np.float32(float(v))
  cands = [guess, np.nextafter(guess, np.float32(-np.inf)), np.nextafter(guess, np.float32(np.inf))]
  cands = [c for c in cands if np.isfinite(c)]
  return float(min(cands, key=lambda c: (abs(Fraction(float(c)) - v), int(np.array(c).view(np.uint32)) & 1)))

def test_fma32_rounds_once():
  """The interpreter's float32 fma (for fused sums of products), one value at a time and over lists, against the exactly
  rounded a*b+c: random operands over a wide range, sums that cancel, and cases where rounding twice (through a double)
  would be wrong."""
  r = np.random.default_rng(1)
  f = lambda *v: [float(np.float32(x)) for x in v]
  cases = [f(1 + 2**-12, 1 + 2**-12, 2**-60), f(1 + 2**-12, 1 + 2**-12, -2**-60), f(1 + 2**-12, -(1 + 2**-12), 2**-60),
           f(3.0, 1 / 3, -1.0), f(2**-75, 2**-75, 2**-149), f(1e30, 1e30, -1e38), f(0.1, 10.0, -1.0)]
  for _ in range(3000):
    a, b, c = (float(np.float32(r.uniform(-1, 1) * 2.0 ** r.integers(-40, 40))) for _ in range(3))
    cases.append([a, b, c])
    cases.append([a, b, float(np.float32(-a * b * (1 + r.uniform(-1e-6, 1e-6))))])   # near-cancelling sums
  wants = []
  for a, b, c in cases:
    v = Fraction(a) * Fraction(b) + Fraction(c)
    wants.append(nearest_f32(v) if abs(v) < Fraction(float(np.finfo(np.float32).max)) else math.copysign(math.inf, v))
    assert scalar.fma32(a, b, c) == wants[-1], (a, b, c)
  assert pyrt._fma32s(*map(list, zip(*cases))) == wants   # the list version, as the interpreter's wide loops use it
  assert math.isnan(scalar.fma32(math.inf, 0.0, 1.0)) and scalar.fma32(math.inf, 2.0, 1.0) == math.inf

def test_sum_of_products_is_fused_like_cpu():
  """Where the CPU device fuses a float32 sum of products into fma updates (a CPU with fma instructions), the interpreter
  does too: 2^-30 * 2^-30 = 2^-60, then (1 + 2^-12)^2 + 2^-60 = 1 + 2^-11 + 2^-24 + 2^-60 rounds up once (to 1 + 2^-11
  + 2^-23), where a rounded product (a tie, to even: 1 + 2^-11) plus 2^-60 stays 1 + 2^-11."""
  cpu_or_skip()
  x = [0.0] * 64
  x[0], x[1] = 2.0 ** -30, 1 + 2.0 ** -12
  cpu, py = both(lambda a, b: (a * b).sum(), x, x)
  assert py == cpu
  fused = Device["CPU"].renderer.fused_multiply_add
  assert Device["PYTHON"].renderer.fused_multiply_add == fused
  want = 1 + 2.0 ** -11 + (2.0 ** -23 if fused else 0)
  assert cpu == [struct.unpack("<I", struct.pack("<f", want))[0]]

INT_EXPRS = {
  "add": lambda a, b: a + b, "mul": lambda a, b: a * b, "neg": lambda a, b: -a,
  "trunc_div": lambda a, b: a.div(b, rounding_mode="trunc"), "fmod": lambda a, b: a.fmod(b), "floordiv": lambda a, b: a // b,
  "mod": lambda a, b: a % b, "max": lambda a, b: a.maximum(b),
  "xor_and_or": lambda a, b: (a ^ b) + (a & b) - (a | b), "shifts": lambda a, b: (a << 3) + (a >> 2),
  "to_float": lambda a, b: a.cast(dtypes.float32) * 1.5, "to_half": lambda a, b: a.cast(dtypes.float16),
  "sum": lambda a, b: (a * b).sum(), "prod_rows": lambda a, b: (a + b).reshape(2, 5).prod(1),
}

@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64,
                                dtypes.uint64])
@pytest.mark.parametrize("name", list(INT_EXPRS))
def test_int_ops_match_cpu_bitwise(name, dt):
  cpu_or_skip()
  wrap = [x & ((1 << dt.bits) - 1) for x in INTS]
  a = [x - (1 << dt.bits) if dt.kind == "i" and x >= 1 << (dt.bits - 1) else x for x in wrap]
  b = [a[-1], -1 if dt.kind == "i" else 1, 0, *a[:7]]   # divisors include 0 and -1 (INT_MIN / -1)
  cpu, py = both(INT_EXPRS[name], a, b, dt=dt)
  assert py == cpu, f"{name} on {dt.name}: PYTHON {py} vs CPU {cpu}"

def test_exp2_log2_match_cpu_bitwise():
  """The interpreter's exp2 and log2 are the CPU device's prelude functions (tw_exp2f, tw_log2f) step by step, with fused
  polynomial steps where the CPU device fuses them: the same bits for 4000 values over their whole ranges."""
  cpu_or_skip()
  rng = np.random.default_rng(3)
  x = np.concatenate([rng.uniform(-155, 130, 2000), rng.standard_normal(1000) * 2, np.exp(rng.uniform(-100, 88, 1000))])
  x = [float(v) for v in x.astype(np.float32)] + SPECIAL_F
  for fn in (lambda a: a.exp2(), lambda a: a.abs().log2()):
    cpu, py = both(fn, x)
    assert py == cpu

def test_transcendentals_close_to_cpu():
  """exp2, log2, sin, cos, and exp and log built on them, at special values: within 3e-7 (sin and cos are libm's float32
  functions on the CPU and Python's double ones rounded here: they may differ in the last bit)."""
  cpu_or_skip()
  for fn in (lambda a: a.exp2(), lambda a: a.log2(), lambda a: a.sin(), lambda a: a.cos(), lambda a: a.exp(), lambda a: a.log()):
    res = both(fn, SPECIAL_F + [200.0, -200.0, 0.7])
    cpu, py = [np.array([b & 0xffffffff for b in v], np.uint32).view(np.float32) for v in res]
    np.testing.assert_allclose(py, cpu, rtol=3e-7, atol=0)   # equal_nan: nan where log2 of a negative, etc.

# ---- the interpreter's loops and memory ----

def f32_seq_sum(vals):
  acc = 0.0
  for v in vals: acc = struct.unpack("f", struct.pack("f", acc + v))[0]
  return acc

@pytest.mark.parametrize("lanes", [pyrt.LANES, 64, 3])
def test_vectorized_reduction_keeps_the_loop_order(monkeypatch, lanes):
  """Values whose float32 sum depends on the order: the interpreter must add them in the loop's order even when a
  chunk of iterations is computed at once (small LANES: many chunks, and outputs x iterations split unevenly)."""
  monkeypatch.setattr(pyrt, "LANES", lanes)
  rng = np.random.default_rng(0)
  x = (rng.standard_normal((5, 6, 7)) * np.array([1e8, 1, 1e-3, 1e4, 3, -1e8, 2])).astype(np.float32)
  full = Tensor(x, device="PYTHON").sum().item()
  assert full == f32_seq_sum(x.reshape(-1).tolist())
  inner = Tensor(x, device="PYTHON").sum((1, 2)).tolist()   # two loops of one reduction, flattened
  assert inner == [f32_seq_sum(x[i].reshape(-1).tolist()) for i in range(5)]
  outer = Tensor(x, device="PYTHON").sum(0).tolist()
  assert outer == [[f32_seq_sum(x[:, j, k].tolist()) for k in range(7)] for j in range(6)]

def run_source(src: str, *bufs: bytearray):
  prog = pyrt.PythonProgram(Device["PYTHON"], "k", src.encode())
  prog(*bufs)

def test_gated_load_and_store_do_not_touch_memory():
  # out[gid] = in[gid * 1000] where gid < 1 (else 0), stored only where gid != 1; and a store to out[gid * 1000] that is
  # never enabled. The lanes whose gate is false have addresses far outside both buffers (4 floats each).
  src = textwrap.dedent("""
    name k
    threads 4
    0 DEFINE_GLOBAL float32 - 0,4
    1 DEFINE_GLOBAL float32 - 1,4
    2 CONST int32 - 4
    3 SPECIAL int32 2 gid
    4 CONST int32 - 1
    5 CMPLT bool 3,4 -
    6 CONST int32 - 1000
    7 MUL int32 3,6 -
    8 CONST bool - False
    9 LOAD float32 1,7,5 -
    10 CMPNE bool 3,4 -
    11 STORE - 0,7,9,8 -
    12 STORE - 0,3,9,10 -
  """)
  out, inp = bytearray(struct.pack("4f", 9, 9, 9, 9)), bytearray(struct.pack("4f", 1, 2, 3, 4))
  run_source(src, out, inp)
  assert struct.unpack("4f", out) == (1.0, 9.0, 0.0, 0.0)
  with pytest.raises(RuntimeError, match="out-of-bounds load of buffer 1"):   # the same load without its gate
    run_source(src.replace("1,7,5", "1,7"), out, inp)

class Stop(Exception): pass

def test_work_hook_sees_each_kernel_before_it_runs():
  """The device reports each kernel's cost (lane-operations) before running it, and an exception there stops the
  realize: the test suite's budget for the interpreter (conftest) skips a test that way. The cost grows linearly with
  the size of an elementwise kernel."""
  dev, costs, stop = Device["PYTHON"], [], []
  def hook(prog):
    if stop: raise Stop(prog.name)
    costs[-1] += prog.work
  old, dev.work_hook = dev.work_hook, hook
  try:
    for n in (100, 200, 300):
      costs.append(0)
      x = Tensor.zeros(n, device="PYTHON", dtype=dtypes.int32).contiguous().realize()
      x.assign(x + Tensor.arange(n, device="PYTHON") * 3).realize()
      assert x.tolist() == [3 * i for i in range(n)]
    stop.append(True)
    with pytest.raises(Stop): x.assign(x + 1).realize()
  finally: dev.work_hook = old
  assert costs[0] > 0 and costs[1] - costs[0] == costs[2] - costs[1] == costs[0]

def test_debug_source_is_the_program(capsys):
  from tinyweb import Context
  with Context(DEBUG=4): (Tensor([1.0, 2.0], device="PYTHON") * 7.5).realize()
  out = capsys.readouterr().out
  assert "threads 2" in out and " MUL float32 " in out and " STORE - " in out

@pytest.mark.parametrize("kind,seed", [("float", s) for s in range(10)] + [("int", s) for s in range(6)])
def test_random_chains_match_cpu_bitwise(kind, seed):
  """The random op chains of test_random_chains (forward and, for floats, backward), built from the same draws on CPU
  and on PYTHON: every value and gradient has the same bits (NaN patterns aside)."""
  cpu_or_skip()
  from test_random_chains import Chain, rng_draw
  runs = []
  for device in ("CPU", "PYTHON"):
    c = Chain(rng_draw(3000 + seed), kind, kind == "float", device).build()
    out = [bits(c.w)]
    if kind == "float":
      cot = np.linspace(-1, 1, max(1, c.w.numel())).astype(np.float32).reshape(c.w.shape)
      (c.w * Tensor(cot, device=device)).sum().backward()
      out += [bits(w.grad) for _, _, w in c.leaves]
    runs.append((out, c.describe()))
  assert runs[0][1] == runs[1][1]   # the same chain
  assert runs[1][0] == runs[0][0], runs[0][1]
