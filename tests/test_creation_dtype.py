"""Tensor creation, random generators, dtypes (casts, bitcasts, promotion) and tensor metadata/outputs,
checked against torch and numpy."""
import contextlib, math, struct
import numpy as np
import pytest
import torch
from tinyweb import Tensor, dtypes, Device, engine
from helpers import expect_unsupported, refused

@contextlib.contextmanager
def case(what):
  try: yield
  except AssertionError as e: raise AssertionError(f"[{what}] {e}") from e

# name -> (tinyweb dtype, numpy dtype (None: numpy has none), torch dtype)
DT = {
  "float32": (dtypes.float32, np.float32, torch.float32),
  "float16": (dtypes.float16, np.float16, torch.float16),
  "bfloat16": (dtypes.bfloat16, None, torch.bfloat16),
  "int8": (dtypes.int8, np.int8, torch.int8),
  "int16": (dtypes.int16, np.int16, torch.int16),
  "int32": (dtypes.int32, np.int32, torch.int32),
  "int64": (dtypes.int64, np.int64, torch.int64),
  "uint8": (dtypes.uint8, np.uint8, torch.uint8),
  "uint16": (dtypes.uint16, np.uint16, torch.uint16),
  "uint32": (dtypes.uint32, np.uint32, torch.uint32),
  "uint64": (dtypes.uint64, np.uint64, torch.uint64),
  "bool": (dtypes.bool, np.bool_, torch.bool),
}
ALL = list(DT)
TORCH_TO_NAME = {v[2]: k for k, v in DT.items()}

def make(vals, name, device):
  """A tinyweb tensor of dtype `name` holding `vals` (bfloat16 goes through a float32 cast: numpy has no bfloat16)."""
  if name == "bfloat16": return Tensor(np.array(vals, np.float32), device=device).cast(dtypes.bfloat16)
  return Tensor(np.array(vals, DT[name][1]), device=device)

def to_np(t):
  """Values of a tinyweb tensor as numpy (bfloat16 read back through float32)."""
  if t.dtype == dtypes.bfloat16: t = t.cast(dtypes.float32)
  return t.numpy()

def torch_ref(vals, src, dst):
  """torch's value for vals -> src dtype -> dst dtype, as float64 numpy (exact for the values used here)."""
  t = torch.tensor(vals, dtype=torch.float64).to(DT[src][2]).to(DT[dst][2])
  return t.to(torch.float64).numpy()

# ---------------------------------------------------------------- Tensor(...) from python data
PY_INPUTS = [
  ("int_list", [1, 2, 3], "int32"),
  ("float_list", [1.0, 2.5, -3.25], "float32"),
  ("mixed_list", [1, 2.5], "float32"),
  ("bool_list", [True, False, True], "bool"),
  ("nested", [[1, 2, 3], [4, 5, 6]], "int32"),
  ("nested_float", [[[1.5], [2.0]], [[-3.0], [4.25]]], "float32"),
  ("tuple", (1.5, 2.5), "float32"),
  ("int_scalar", 7, "int32"),
  ("float_scalar", -2.5, "float32"),
  ("bool_scalar", True, "bool"),
  ("empty_list", [], "float32"),
]

def test_tensor_from_python(device):
  for name, data, dname in PY_INPUTS:
    with case(name):
      t = Tensor(data, device=device)
      ref = torch.tensor(data)
      assert t.shape == tuple(ref.shape)
      assert t.dtype == DT[dname][0], f"{name}: dtype {t.dtype}, expected {dname}"
      got = t.numpy()
      assert got.shape == tuple(ref.shape)
      np.testing.assert_array_equal(got, ref.numpy())
      assert t.tolist() == ref.tolist()

def test_tensor_from_python_explicit_dtype(device):
  t = Tensor([1, 2, 3], dtype=dtypes.float32, device=device)
  assert t.dtype == dtypes.float32 and t.tolist() == [1.0, 2.0, 3.0]
  t = Tensor([1.0, 0.0, 2.0], dtype=dtypes.bool, device=device)
  assert t.dtype == dtypes.bool and t.tolist() == [True, False, True]
  t = Tensor([1.75, -1.75, 2.5], dtype=dtypes.int32, device=device)
  assert t.dtype == dtypes.int32
  assert t.tolist() == torch.tensor([1.75, -1.75, 2.5], dtype=torch.int32).tolist()
  t = Tensor([[1, 2], [3, 4]], dtype=dtypes.int8, device=device)
  assert t.dtype == dtypes.int8 and t.numpy().dtype == np.int8 and t.tolist() == [[1, 2], [3, 4]]
  t = Tensor(3, dtype=dtypes.float16, device=device)
  assert t.dtype == dtypes.float16 and t.shape == () and t.item() == 3.0

def test_tensor_from_bytes(device):
  data = bytes([0, 1, 2, 127, 128, 255])
  t = Tensor(data, device=device)
  assert t.dtype == dtypes.uint8
  assert t.shape == (len(data),)
  assert t.tolist() == list(data)
  np.testing.assert_array_equal(t.numpy(), np.frombuffer(data, np.uint8))

NP_DTYPES = [n for n in ALL if DT[n][1] is not None]

def test_tensor_from_ml_dtypes_bfloat16(device):
  ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes (installed with onnx, tinyweb[test]) is not installed")
  a = np.array([[1.5, -2.25], [3e38, -np.inf]], dtype=ml_dtypes.bfloat16)
  t = Tensor(a, device=device)
  assert t.dtype == dtypes.bfloat16 and t.shape == (2, 2)
  np.testing.assert_array_equal(t.numpy(), a.astype(np.float32))

@pytest.mark.browser
def test_tensor_from_numpy(device):
  for dname in NP_DTYPES:
    npdt = DT[dname][1]
    rng = np.random.default_rng(0)
    if npdt == np.bool_: a = rng.random((3, 4)) < 0.5
    elif np.issubdtype(npdt, np.floating): a = rng.uniform(-100, 100, (3, 4)).astype(npdt)
    else:
      info = np.iinfo(npdt)
      a = rng.integers(max(info.min, -1000), min(info.max, 1000), (3, 4), endpoint=True).astype(npdt)
      a[0, 0], a[0, 1] = info.min, info.max  # extremes survive the round trip
    with case(dname), expect_unsupported(device, DT[dname][0]):
      t = Tensor(a, device=device)
      assert t.dtype == DT[dname][0]
      assert t.shape == (3, 4)
      got = t.numpy()
      assert got.dtype == a.dtype
      np.testing.assert_array_equal(got, a)
      # a computed (transposed copy) result of that dtype round-trips as well
      np.testing.assert_array_equal(t.T.numpy(), a.T)

def test_tensor_from_numpy_views_and_0d(device):
  a = np.arange(24, dtype=np.float32).reshape(4, 6)
  readonly = a.copy()
  readonly.flags.writeable = False
  for name, v in [("T", a.T), ("step", a[::2, 1::2]), ("neg_step", a[::-1]), ("0d", np.array(3.5, np.float32)),
                  ("empty", np.zeros((0, 2), np.int32)), ("big_endian", a.astype(">f4")), ("big_endian_int", a.astype(">i2")),
                  ("read_only", readonly), ("from_bytes", np.frombuffer(a.tobytes(), np.float32))]:
    with case(name):
      t = Tensor(v, device=device)
      assert t.shape == np.shape(v)
      np.testing.assert_array_equal(t.numpy(), np.asarray(v))
  # the tensor does not alias the numpy array
  b = np.ones(3, np.float32)
  t = Tensor(b, device=device)
  b[:] = 5
  np.testing.assert_array_equal((t + 0).numpy(), np.ones(3, np.float32))

# ---------------------------------------------------------------- constructors
def test_zeros_ones_full_empty(device):
  z = Tensor.zeros(2, 3, device=device)
  assert z.shape == (2, 3) and z.dtype == dtypes.float32
  np.testing.assert_array_equal(z.numpy(), torch.zeros(2, 3).numpy())
  o = Tensor.ones(4, device=device)
  assert o.shape == (4,) and o.dtype == dtypes.float32
  np.testing.assert_array_equal(o.numpy(), torch.ones(4).numpy())
  zi = Tensor.zeros(3, 2, dtype=dtypes.int32, device=device)
  assert zi.dtype == dtypes.int32 and zi.tolist() == [[0, 0]] * 3
  ob = Tensor.ones(2, 2, dtype=dtypes.bool, device=device)
  assert ob.dtype == dtypes.bool and ob.tolist() == [[True, True], [True, True]]
  assert Tensor.zeros(0, 3, device=device).shape == (0, 3)
  assert Tensor.ones(1, 1, 1, device=device).numpy().shape == (1, 1, 1)
  f = Tensor.full((2, 3), 7.5, device=device)
  assert f.shape == (2, 3) and f.dtype == dtypes.float32
  np.testing.assert_array_equal(f.numpy(), torch.full((2, 3), 7.5).numpy())
  fi = Tensor.full((3,), -4, device=device)
  assert dtypes_is_int(fi.dtype) and fi.tolist() == [-4, -4, -4]
  fb = Tensor.full((2,), True, device=device)
  assert fb.dtype == dtypes.bool and fb.tolist() == [True, True]
  f8 = Tensor.full((2, 2), -3, dtype=dtypes.int8, device=device)
  assert f8.dtype == dtypes.int8 and f8.numpy().dtype == np.int8 and f8.tolist() == [[-3, -3], [-3, -3]]
  e = Tensor.empty(3, 5, device=device)
  assert e.shape == (3, 5) and e.dtype == dtypes.float32
  e16 = Tensor.empty(4, dtype=dtypes.float16, device=device)
  assert e16.shape == (4,) and e16.dtype == dtypes.float16

def dtypes_is_int(dt): return dt in (dtypes.int32, dtypes.int64)

ARANGE = [(5,), (2, 10, 3), (10, 0, -2), (3, -3, -1), (0, 1, 0.25), (-1.0, 1.0, 0.3), (5, 5), (5.0,), (1, 2, 0.1), (7, 0, -3)]

@pytest.mark.browser
def test_arange(device):
  for args in ARANGE:
    with case(f"arange{args}"):
      t = Tensor.arange(*args, device=device)
      ref = torch.arange(*args)
      assert t.shape == tuple(ref.shape), f"shape {t.shape} vs torch {tuple(ref.shape)}"
      got = t.numpy()
      if ref.dtype.is_floating_point: assert t.dtype == dtypes.float32
      else: assert t.dtype == dtypes.int32, "integer arange uses tinyweb's default int (int32)"
      np.testing.assert_allclose(got, ref.numpy(), atol=1e-6, rtol=1e-6)

LINSPACE = [(0, 1, 5), (-1, 3, 7), (5, -5, 11), (2, 2, 1), (0.5, 1.5, 2), (0, 10, 1)]

def test_linspace(device):
  for args in LINSPACE:
    with case(f"linspace{args}"):
      t = Tensor.linspace(*args, device=device)
      ref = torch.linspace(*args)
      assert t.shape == tuple(ref.shape) and t.dtype == dtypes.float32
      np.testing.assert_allclose(t.numpy(), ref.numpy(), atol=1e-6, rtol=1e-6)

def test_eye(device):
  for args in [(3,), (2, 4), (4, 2), (1,)]:
    with case(f"eye{args}"):
      t = Tensor.eye(*args, device=device)
      ref = torch.eye(*args)
      assert t.shape == tuple(ref.shape) and t.dtype == dtypes.float32
      np.testing.assert_array_equal(t.numpy(), ref.numpy())

def test_like_constructors(device):
  for dname in ["float32", "int32", "bool", "float16", "uint8"]:
    _check_likes(device, dname)
  # on a non-contiguous view
  xt = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device).T
  assert Tensor.ones_like(xt).shape == (3, 2)
  np.testing.assert_array_equal(Tensor.full_like(xt, 2.5).numpy(), np.full((3, 2), 2.5, np.float32))

def _check_likes(device, dname):
  x = make([[1, 0, 1], [0, 1, 1]], dname, device)
  tx = torch.tensor([[1, 0, 1], [0, 1, 1]]).to(DT[dname][2])
  for name, w, t in [("zeros_like", Tensor.zeros_like(x), torch.zeros_like(tx)),
                     ("ones_like", Tensor.ones_like(x), torch.ones_like(tx)),
                     ("full_like", Tensor.full_like(x, 1 if dname == "bool" else 3), torch.full_like(tx, 1 if dname == "bool" else 3))]:
    with case(f"{name} {dname}"):
      assert w.shape == (2, 3)
      assert w.dtype == DT[dname][0], f"{name} must keep dtype {dname}, got {w.dtype}"
      np.testing.assert_array_equal(w.numpy(), t.numpy())

# ---------------------------------------------------------------- random
N = 100_000

def _corr_lag1(x):
  x = x.astype(np.float64).ravel()
  return abs(np.corrcoef(x[:-1], x[1:])[0, 1])

@pytest.mark.browser
def test_rand_stats(device):
  t = Tensor.rand(100, 1000, device=device)
  assert t.shape == (100, 1000) and t.dtype == dtypes.float32
  x = t.numpy()
  assert x.min() >= 0.0 and x.max() < 1.0
  assert abs(x.mean() - 0.5) < 0.01
  assert abs(x.std() - math.sqrt(1 / 12)) < 0.01
  hist = np.histogram(x, bins=10, range=(0, 1))[0] / x.size
  assert np.all(np.abs(hist - 0.1) < 0.006), f"rand is not uniform: {hist}"
  assert _corr_lag1(x) < 0.02
  assert len(np.unique(x)) > N * 0.9, "too many repeated values"

def test_randn_stats(device):
  t = Tensor.randn(N, device=device)
  assert t.shape == (N,) and t.dtype == dtypes.float32
  x = t.numpy()
  assert np.all(np.isfinite(x))
  assert abs(x.mean()) < 0.02
  assert abs(x.std() - 1.0) < 0.02
  assert abs(np.mean(np.abs(x) < 1.0) - 0.6827) < 0.01
  assert abs(np.mean(x > 2.0) - 0.02275) < 0.004
  assert _corr_lag1(x) < 0.02

def test_randint_stats(device):
  t = Tensor.randint(N, low=-3, high=5, device=device)
  assert t.shape == (N,) and t.dtype == dtypes.int32
  x = t.numpy()
  assert x.min() == -3 and x.max() == 4
  freq = np.bincount(x + 3, minlength=8) / N
  assert np.all(np.abs(freq - 1 / 8) < 0.01), f"randint is not uniform: {freq}"
  d = Tensor.randint(2, 3, device=device)  # default low=0, high=10
  assert d.shape == (2, 3) and d.dtype == dtypes.int32
  assert np.all((d.numpy() >= 0) & (d.numpy() < 10))

def test_uniform_normal_stats(device):
  u = Tensor.uniform(N, low=2.0, high=5.0, device=device)
  assert u.shape == (N,) and u.dtype == dtypes.float32
  x = u.numpy()
  assert x.min() >= 2.0 and x.max() < 5.0
  assert abs(x.mean() - 3.5) < 0.03 and abs(x.std() - 3 / math.sqrt(12)) < 0.02
  d = Tensor.uniform(N, device=device).numpy()  # defaults [0, 1), like tinygrad
  assert d.min() >= 0.0 and d.max() < 1.0 and abs(d.mean() - 0.5) < 0.02 and abs(d.std() - 1 / math.sqrt(12)) < 0.02
  n = Tensor.normal(N, mean=3.0, std=0.5, device=device)
  assert n.shape == (N,) and n.dtype == dtypes.float32
  y = n.numpy()
  assert abs(y.mean() - 3.0) < 0.01 and abs(y.std() - 0.5) < 0.01
  z = Tensor.normal(N, device=device).numpy()
  assert abs(z.mean()) < 0.02 and abs(z.std() - 1.0) < 0.02

@pytest.mark.parametrize("a", [0.01, math.sqrt(5)], ids=["a=0.01", "a=sqrt5"])
def test_kaiming_uniform(device, a):
  shape = (400, 250)
  t = Tensor.kaiming_uniform(*shape, a=a, device=device)
  assert t.shape == shape and t.dtype == dtypes.float32
  x = t.numpy()
  # torch.nn.init.kaiming_uniform_ (fan_in mode, leaky_relu gain) bound
  bound = math.sqrt(2.0 / (1 + a * a)) * math.sqrt(3.0 / shape[1])
  tt = torch.empty(shape)
  torch.nn.init.kaiming_uniform_(tt, a=a)
  assert abs(tt.abs().max().item() - bound) < bound * 0.01  # sanity of the reference formula
  assert np.abs(x).max() <= bound * (1 + 1e-6)
  assert np.abs(x).max() > bound * 0.99
  assert abs(x.std() - bound / math.sqrt(3)) < bound * 0.02
  assert abs(x.mean()) < bound * 0.02

def test_glorot_uniform(device):
  shape = (400, 250)
  t = Tensor.glorot_uniform(*shape, device=device)
  assert t.shape == shape and t.dtype == dtypes.float32
  x = t.numpy()
  bound = math.sqrt(6.0 / (shape[0] + shape[1]))
  tt = torch.empty(shape)
  torch.nn.init.xavier_uniform_(tt)
  assert abs(tt.abs().max().item() - bound) < bound * 0.01
  assert np.abs(x).max() <= bound * (1 + 1e-6)
  assert np.abs(x).max() > bound * 0.99
  assert abs(x.std() - bound / math.sqrt(3)) < bound * 0.02

def test_random_shapes(device):
  for shape in [(3, 5, 7), (7,), (1,), (0, 3), (2, 1, 3)]:
    for name, fn in [("rand", Tensor.rand), ("randn", Tensor.randn), ("uniform", Tensor.uniform), ("normal", Tensor.normal)]:
      with case(f"{name}{shape}"):
        t = fn(*shape, device=device)
        assert t.shape == shape and t.dtype == dtypes.float32
        x = t.numpy()
        assert x.shape == shape and np.all(np.isfinite(x))
    with case(f"randint{shape}"):
      assert Tensor.randint(*shape, device=device).numpy().shape == shape

GENS = [
  ("rand", lambda d: Tensor.rand(64, device=d)),
  ("randn", lambda d: Tensor.randn(8, 8, device=d)),
  ("randint", lambda d: Tensor.randint(64, low=0, high=1000, device=d)),
  ("uniform", lambda d: Tensor.uniform(64, low=-3.0, high=3.0, device=d)),
  ("normal", lambda d: Tensor.normal(64, mean=1.0, std=2.0, device=d)),
  ("kaiming_uniform", lambda d: Tensor.kaiming_uniform(8, 8, device=d)),
  ("glorot_uniform", lambda d: Tensor.glorot_uniform(8, 8, device=d)),
]

@pytest.mark.parametrize("name,gen", GENS, ids=[g[0] for g in GENS])
def test_manual_seed_reproducible(device, name, gen):
  Tensor.manual_seed(1234)
  a, b = gen(device).numpy(), gen(device).numpy()
  Tensor.manual_seed(1234)
  a2, b2 = gen(device), gen(device)
  b2, a2 = b2.numpy(), a2.numpy()   # realizing in the other order must not change which values each call got
  Tensor.manual_seed(4321)
  c = gen(device).numpy()
  np.testing.assert_array_equal(a, a2, err_msg="same seed must give the same values")
  np.testing.assert_array_equal(b, b2, err_msg="same seed must give the same stream")
  assert not np.array_equal(a, b), "two consecutive calls returned identical values"
  assert not np.array_equal(a, c), "different seeds returned identical values"

# ---------------------------------------------------------------- casts
CAST_VALS = [0, 1, 2, 5, 100, 1, 0, 64]   # representable in every dtype of DT

@pytest.mark.parametrize("src", ALL)
@pytest.mark.browser(src=["float32", "uint8", "float16"])
def test_cast_all_pairs(device, src):
  bad = []
  with expect_unsupported(device, DT[src][0]): x = make(CAST_VALS, src, device)
  if refused(device, DT[src][0]): return
  assert x.dtype == DT[src][0]
  for dst in ALL:
    if refused(device, DT[dst][0]):
      with expect_unsupported(device, DT[dst][0]): to_np(x.cast(DT[dst][0]))
      continue
    try:
      y = x.cast(DT[dst][0])
      if y.dtype != DT[dst][0]: bad.append(f"{src}->{dst}: dtype {y.dtype}"); continue
      got = to_np(y)
      if DT[dst][1] is not None and got.dtype != DT[dst][1]: bad.append(f"{src}->{dst}: numpy dtype {got.dtype}"); continue
      exp = torch_ref(CAST_VALS, src, dst)
      if not np.array_equal(got.astype(np.float64), exp): bad.append(f"{src}->{dst}: {got.tolist()} != {exp.tolist()}")
    except Exception as e:  # noqa: BLE001 - collect every failing pair
      bad.append(f"{src}->{dst}: {type(e).__name__}: {e}")
  assert not bad, "cast mismatches:\n" + "\n".join(bad)

SIGNED = ["float32", "float16", "bfloat16", "int8", "int16", "int32", "int64"]

def test_cast_negative_values(device):
  vals = [-1, -5, -100, 3, 0, -128]
  bad = []
  for src in SIGNED:
    if refused(device, DT[src][0]): continue
    x = make(vals, src, device)
    for dst in SIGNED + ["bool"]:
      if refused(device, DT[dst][0]): continue
      try:
        got = to_np(x.cast(DT[dst][0])).astype(np.float64)
        exp = torch_ref(vals, src, dst)
        if not np.array_equal(got, exp): bad.append(f"{src}->{dst}: {got.tolist()} != {exp.tolist()}")
      except Exception as e:  # noqa: BLE001
        bad.append(f"{src}->{dst}: {type(e).__name__}: {e}")
  assert not bad, "cast mismatches:\n" + "\n".join(bad)

@pytest.mark.parametrize("src", ["float32", "float16", "bfloat16"])
@pytest.mark.browser(src=["float32"])
def test_float_to_int_truncates(device, src):
  vals = [-2.75, -1.5, -0.5, -0.0, 0.5, 1.5, 2.75, 99.5, -99.5]
  pos = [0.25, 0.5, 1.5, 2.75, 99.5, 126.5]
  x, xp = make(vals, src, device), make(pos, src, device)
  bad = []
  for dst in ["int8", "int16", "int32", "int64"]:
    if refused(device, DT[dst][0]): continue
    got, exp = x.cast(DT[dst][0]).numpy(), torch.tensor(vals).to(DT[src][2]).to(DT[dst][2]).numpy()
    if not np.array_equal(got, exp): bad.append(f"{src}->{dst}: {got.tolist()} != {exp.tolist()}")
  for dst in ["uint8", "uint16", "uint32", "uint64"]:
    if refused(device, DT[dst][0]): continue
    got, exp = xp.cast(DT[dst][0]).numpy(), np.trunc(np.array(pos, np.float64))
    if not np.array_equal(got.astype(np.float64), exp): bad.append(f"{src}->{dst}: {got.tolist()} != {exp.tolist()}")
  assert not bad, "\n".join(bad)
  # the truncation also applies to computed values
  np.testing.assert_array_equal((x * 2).cast(dtypes.int32).numpy(), (torch.tensor(vals).to(DT[src][2]) * 2).to(torch.int32).numpy())

def test_casts_of_out_of_range_floats_fold_to_what_kernels_compute(device):
  # no language defines these; every device computes x86-64's answer (through int64: INT64_MIN, whose low bits are 0
  # for narrower ints; uint64: AVX-512's all ones), and constant folding must give the same, or results would depend on fusion
  check_out_of_range_casts(device)

def test_out_of_range_casts_do_not_depend_on_the_cpus_instruction_set(monkeypatch):
  # the CPU device compiles for the machine it runs on; clang's own float -> uint64 code for a CPU without AVX-512 gave
  # 2^63 for NaN (a CI machine), so the kernels must not leave that conversion to it
  compiler = Device["CPU"].compiler
  monkeypatch.setattr(compiler, "args", [a.replace("-march=native", "-march=x86-64-v3") for a in compiler.args])
  monkeypatch.setattr(compiler, "cache_key", compiler.cache_key + " -march=x86-64-v3")
  monkeypatch.setattr(Device["CPU"], "programs", {})
  monkeypatch.setattr(engine, "_kernel_cache", {})   # (kernels built for this machine's CPU by earlier tests)
  check_out_of_range_casts("CPU")

def check_out_of_range_casts(device):
  vals = [float("nan"), float("inf"), -float("inf"), 1e10, -1e10, 3e9, 1e19, 3e19, -1.5, 300.75]
  expect_nan = {"int8": 0, "uint8": 0, "int16": 0, "uint16": 0, "int32": 0, "uint32": 0, "int64": -2**63, "uint64": 2**64 - 1}
  x = Tensor(np.array(vals, np.float32), device=device)
  for name, nan_value in expect_nan.items():
    dt = DT[name][0]
    if refused(device, dt): continue
    kernel = x.cast(dt).tolist()
    folded = [Tensor.full((1,), v, device=device).cast(dt).item() for v in np.array(vals, np.float32).tolist()]
    assert kernel == folded, f"{name}: kernel {kernel} != folded {folded}"
    assert kernel[0] == nan_value, f"NaN -> {name}: {kernel[0]}"
    assert kernel[-2:] == [int(np.array(-1.5).astype(DT[name][1])), 300 % (1 << DT[name][1]().itemsize * 8)]

def test_folded_trunc_keeps_the_sign_of_zero(device):
  vals = [-0.5, -0.0, 0.25, -2.5]
  want = np.signbit(np.trunc(np.array(vals, np.float32))).tolist()
  assert np.signbit(Tensor(vals, device=device).trunc().numpy()).tolist() == want
  assert [np.signbit(Tensor.full((1,), v, device=device).trunc().item()) for v in vals] == want

def test_float_to_bool(device):
  vals = np.array([0.0, -0.0, 0.5, -2.0, np.nan, np.inf, -np.inf, 1e-30], np.float32)
  got = Tensor(vals, device=device).cast(dtypes.bool).numpy()
  np.testing.assert_array_equal(got, torch.tensor(vals).to(torch.bool).numpy())
  np.testing.assert_array_equal(Tensor(vals, device=device).bool().numpy(), torch.tensor(vals).bool().numpy())

def test_cast_shorthands(device):
  v = [[-1.5, 0.0, 2.75], [3.0, -0.25, 1.0]]
  x, tx = Tensor(v, device=device), torch.tensor(v)
  for name in ("float", "half", "int", "bool"):
    with case(name):
      w = getattr(x, name)()
      exp = getattr(tx, name)()
      assert w.dtype == {"float": dtypes.float32, "half": dtypes.float16, "int": dtypes.int32, "bool": dtypes.bool}[name]
      np.testing.assert_array_equal(w.numpy(), exp.numpy().astype(w.numpy().dtype))
  assert dtypes.float == dtypes.float32 and dtypes.int == dtypes.int32
  # cast round trip through bfloat16 matches torch
  vb = np.array([1.0, -2.5, 3.140625, 1000.0, 1e-3, 65504.0, 3.0e38], np.float32)
  got = Tensor(vb, device=device).cast(dtypes.bfloat16).cast(dtypes.float32).numpy()
  np.testing.assert_array_equal(got, torch.tensor(vb).to(torch.bfloat16).to(torch.float32).numpy())
  # and float16 rounding matches torch/numpy
  vh = np.array([1.0, 0.1, -3.3, 1000.7, 6e-5, 65504.0], np.float32)
  np.testing.assert_array_equal(Tensor(vh, device=device).half().float().numpy(), vh.astype(np.float16).astype(np.float32))

# ---------------------------------------------------------------- bitcast
BITCASTS = [
  ("float32", "int32", [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, 1e-30, 3.0e38]),
  ("float32", "uint32", [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, 1e-30, 3.0e38]),
  ("int32", "float32", [0, 1, -1, 0x3F800000, 2**31 - 1, -2**31, 0x7F800000, -1082130432]),
  ("uint32", "float32", [0, 1, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000, 0x00800000, 0x40490FDB]),
  ("float16", "int16", [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, 6e-5, 65504.0]),
  ("float16", "uint16", [0.0, -0.0, 1.0, -2.5, np.inf, -np.inf, 6e-5, 65504.0]),
  ("int16", "float16", [0, 1, -1, 0x3C00, -32768, 32767, 0x7C00, -1024]),
]

@pytest.mark.parametrize("src,dst,vals", BITCASTS, ids=[f"{b[0]}->{b[1]}" for b in BITCASTS])
@pytest.mark.browser(src=["float32", "uint32"])
def test_bitcast(device, src, dst, vals):
  a = np.array(vals, DT[src][1])
  y = Tensor(a, device=device).bitcast(DT[dst][0])
  assert y.dtype == DT[dst][0] and y.shape == a.shape
  got, exp = y.numpy(), a.view(DT[dst][1])
  assert got.dtype == exp.dtype
  ui = {2: np.uint16, 4: np.uint32}[exp.itemsize]
  np.testing.assert_array_equal(got.view(ui), exp.view(ui))  # compare bits (nan payloads included)
  # bitcast of a computed value and of a reshaped one
  if np.issubdtype(a.dtype, np.floating):
    with np.errstate(over="ignore"): exp2 = (a * a.dtype.type(2)).view(DT[dst][1])
    got2 = (Tensor(a, device=device) * 2).bitcast(DT[dst][0]).numpy()
  else:
    got2, exp2 = (Tensor(a, device=device) ^ 1).bitcast(DT[dst][0]).numpy(), (a ^ a.dtype.type(1)).view(DT[dst][1])
  np.testing.assert_array_equal(got2.view(ui), exp2.view(ui))
  got3 = Tensor(a, device=device).reshape(2, 4).bitcast(DT[dst][0]).numpy()
  np.testing.assert_array_equal(got3.view(ui), exp.reshape(2, 4).view(ui))

# ---------------------------------------------------------------- promotion
# torch refuses to promote its "shell" dtypes uint16/32/64 with other dtypes; for those pairs the expectation
# follows torch's general rules: bool with X -> X; int with float -> the float dtype; two unsigned -> the wider;
# unsigned with signed -> the smallest signed int holding both (none for uint64 with a signed int: not checked)
BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
FLOATS = ("float32", "float16", "bfloat16")

def _rule_promo(a, b):
  if a == b: return a
  if a == "bool": return b
  if b == "bool": return a
  if a in FLOATS or b in FLOATS:
    if a in FLOATS and b in FLOATS: return None
    return a if a in FLOATS else b
  ua, ub = a.startswith("u"), b.startswith("u")
  if ua and ub: return a if BITS[a] >= BITS[b] else b
  if not ua and not ub: return a if BITS[a] >= BITS[b] else b
  u, s_ = (a, b) if ua else (b, a)
  need = max(BITS[u] * 2, BITS[s_])
  return f"int{need}" if need <= 64 else None

def _expected_promo(a, b):
  try: return TORCH_TO_NAME[torch.promote_types(DT[a][2], DT[b][2])]
  except RuntimeError: return _rule_promo(a, b)

def test_promotion_tensor_pairs(device):
  bad, checked = [], 0
  for a in ALL:
    for b in ALL:
      exp = _expected_promo(a, b)
      if exp is None or refused(device, DT[a][0], DT[b][0], DT[exp][0]): continue
      checked += 1
      x, y = make([1, 0], a, device), make([1, 1], b, device)
      try:
        for opname, r in [("+", x + y), ("*", x * y)]:
          if r.dtype != DT[exp][0]: bad.append(f"{a} {opname} {b}: {r.dtype}, expected {exp}")
        if (x < y).dtype != dtypes.bool: bad.append(f"{a} < {b}: not bool")
      except Exception as e:  # noqa: BLE001
        bad.append(f"{a} + {b}: {type(e).__name__}: {e}")
  assert checked > (100 if not refused(device, dtypes.int64) else 80)
  assert not bad, "promotion mismatches:\n" + "\n".join(bad)

def test_promotion_values(device):
  # results are computed in the promoted dtype (no wraparound in the narrower input dtype)
  r = make([200, 100], "uint8", device) + make([100, -100], "int8", device)
  assert r.dtype == dtypes.int16 and r.tolist() == [300, 0]
  r = make([3, 4], "int32", device) * make([0.5, -1.5], "float32", device)
  assert r.dtype == dtypes.float32 and r.tolist() == [1.5, -6.0]
  r = make([True, False], "bool", device) + make([5, 7], "int32", device)
  assert r.dtype == dtypes.int32 and r.tolist() == [6, 7]
  with expect_unsupported(device, dtypes.float16):   # (WebGPU without shader-f16)
    r = make([1.5, 2.0], "float16", device) + make([0.25, 1e5], "float32", device)
    assert r.dtype == dtypes.float32 and r.tolist() == [1.75, 100002.0]
  with expect_unsupported(device, dtypes.int64):
    r = make([2**40, 3], "int64", device) + make([1, 1], "int32", device)
    assert r.dtype == dtypes.int64 and r.tolist() == [2**40 + 1, 4]

SCALAR_PROMO = [("int32", 2), ("int32", 1.5), ("int8", 3), ("uint8", 3), ("float16", 2), ("float16", 2.5), ("bfloat16", 2.5),
                ("bool", 1), ("bool", 1.5), ("bool", True), ("int64", 2.5), ("int64", 3), ("float32", True), ("int32", True),
                ("uint32", 2), ("int16", -1.0)]

def test_promotion_python_scalars(device):
  bad = []
  for a, s in SCALAR_PROMO:
    exp_t = torch.result_type(torch.zeros(2, dtype=DT[a][2]), s)
    exp = TORCH_TO_NAME[exp_t]
    if exp == "int64" and a != "int64": exp = "int32"  # python int defaults to tinyweb's int32 (torch: int64)
    if refused(device, DT[a][0]): continue
    x = make([1, 2], a, device)
    for desc, r in [(f"{a} + {s!r}", x + s), (f"{s!r} + {a}", s + x), (f"{a} * {s!r}", x * s)]:
      if r.dtype != DT[exp][0]: bad.append(f"{desc}: {r.dtype}, expected {exp}")
  assert not bad, "\n".join(bad)
  # values too
  assert (make([1, 2], "int32", device) + 1.5).tolist() == [2.5, 3.5]
  assert (make([True, False], "bool", device) + 1).tolist() == [2, 1]

# ---------------------------------------------------------------- outputs: tolist / item / data
def test_tolist(device):
  for name, data in [("float", [[0.5, -1.0], [2.25, 3.0]]), ("int", [[1, -2, 3]]), ("bool", [True, False]),
                     ("3d", [[[1.5]], [[2.5]]]), ("empty", [[], []])]:
    with case(name):
      t = Tensor(data, device=device)
      assert t.tolist() == torch.tensor(data).tolist()
  for v in (2.5, 7, True):
    with case(f"0-d {v!r}"):
      r = Tensor(v, device=device).tolist()
      assert r == v and type(r) is type(v)
  assert Tensor([1, 2, 3], device=device).sum().tolist() == 6
  assert (Tensor([[1.0, 2.0]], device=device) * 2).T.tolist() == [[2.0], [4.0]]

@pytest.mark.browser
def test_item(device):
  for v in (3.5, -7, True, False):
    with case(f"item {v!r}"):
      r = Tensor(v, device=device).item()
      assert r == v and type(r) is type(v)
  r = Tensor([[2.25]], device=device).item()
  assert r == 2.25 and isinstance(r, float)
  r = Tensor([1, 2, 3], device=device).sum().item()
  assert r == 6 and isinstance(r, int)
  r = Tensor([1.0, 2.0, 4.0], device=device).mean().item()
  assert math.isclose(r, 7 / 3, rel_tol=1e-6)
  r = (Tensor([1.0, 5.0], device=device) > 2).any().item()
  assert r is True

# expected memoryview formats per dtype (struct codes; 'l'/'L' accepted where they have the same size).
# float16 is left out: CPython's memoryview cannot be cast to 'e' before 3.12
FMT = {"float32": ("f",), "int8": ("b",), "int16": ("h",), "int32": ("i",), "int64": ("q", "l"),
       "uint8": ("B",), "uint16": ("H",), "uint32": ("I",), "uint64": ("Q", "L"), "bool": ("?",)}

def test_data_memoryview(device):
  for dname in FMT:
    with case(dname), expect_unsupported(device, DT[dname][0]): _check_data(device, dname)

def _check_data(device, dname):
  vals = [1, 0, 1, 1, 0, 1] if dname == "bool" else [0, 1, 2, 3, 100, 5]
  if dname == "bool": vals = [bool(v) for v in vals]
  elif dname.startswith("float"): vals = [float(v) + 0.5 for v in vals]
  t = Tensor(vals, dtype=DT[dname][0], device=device)
  mv = t.data()
  assert isinstance(mv, memoryview)
  assert mv.format in FMT[dname], f"format {mv.format!r} for {dname}"
  assert mv.itemsize == struct.calcsize(mv.format) == np.dtype(DT[dname][1]).itemsize
  assert mv.nbytes == len(vals) * mv.itemsize
  assert len(mv) == len(vals)
  assert mv.tolist() == vals
  assert list(struct.unpack(f"<{len(vals)}{mv.format}", mv.tobytes())) == vals
  # 2-D tensor: data() covers all elements in row-major order
  t2 = Tensor(vals, dtype=DT[dname][0], device=device).reshape(2, 3)
  mv2 = t2.data()
  assert mv2.nbytes == len(vals) * mv2.itemsize
  assert list(struct.unpack(f"<{len(vals)}{mv2.format}", mv2.tobytes())) == vals
  # a transposed (non-contiguous) tensor is returned in its logical order
  mv3 = t2.T.data()
  assert list(struct.unpack(f"<{len(vals)}{mv3.format}", mv3.tobytes())) == [vals[i * 3 + j] for j in range(3) for i in range(2)]

# ---------------------------------------------------------------- metadata and devices
def test_metadata(device):
  for shape in [(), (5,), (0, 3), (2, 3, 4), (1, 1)]:
    with case(f"shape {shape}"): _check_meta(device, shape)

def _check_meta(device, shape):
  t = Tensor(np.zeros(shape, np.float32), device=device)
  ref = torch.zeros(shape)
  assert t.shape == tuple(ref.shape)
  assert isinstance(t.shape, tuple) and all(type(s) is int for s in t.shape)
  assert t.ndim == ref.ndim
  assert t.numel() == ref.numel()
  assert type(t.numel()) is int
  if len(shape): assert len(t) == len(ref)
  s = t.sum(axis=0) if len(shape) else t.sum()
  assert s.shape == tuple(ref.sum(dim=0).shape if len(shape) else ref.sum().shape)
  r = t.reshape(-1)
  assert r.shape == (ref.numel(),) and r.ndim == 1 and len(r) == ref.numel()

def test_device(device):
  t = Tensor([1.0, 2.0], device=device)
  assert t.device == device
  assert isinstance(t.device, str)
  assert (t + 1).device == device
  assert (t * t).sum().device == device
  assert Tensor.zeros(2, device=device).device == device
  assert Tensor.arange(3, device=device).device == device
  assert Tensor.rand(3, device=device).device == device
  u = t.to(device)
  assert u.device == device and u.tolist() == [1.0, 2.0]
  assert Tensor([1.0]).device == Device.DEFAULT
  v = Tensor([3.0, 4.0]).to(device)
  assert v.device == device and v.tolist() == [3.0, 4.0]
  assert device in Device.known()

# ---------------------------------------------------------------- Python numbers and a dtype's range (one rule, PyTorch's)
# A Python int stored in an integer dtype must lie in its range (an unsigned dtype also takes -max..-1, which wraps), a
# Python float stored there must lie in the range before truncation (NaN and inf do not); otherwise OverflowError naming
# the op, the value and the dtype. Any number fits a float dtype (overflowing to inf) except an int too large for float64.
# Without a dtype, ints past int32 give int64, where the device has it.
import re

def _torch_or_error(fn):
  try: return fn()
  except (RuntimeError, ValueError, OverflowError, TypeError) as e: return e

def _range_cases(name):
  lo, hi = int(np.iinfo(DT[name][1]).min), int(np.iinfo(DT[name][1]).max)
  vals = [hi, hi + 1, lo, lo - 1, -0.5, 2.5, -2.5, float(hi) + 1.0, float("nan"), float("inf"), True]
  return vals + ([-1, -hi, -hi - 1] if lo == 0 else [])

def test_python_numbers_out_of_an_int_dtypes_range_raise_like_torch(device):
  checked = 0
  for name in ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64"]:
    dt, tdt = DT[name][0], DT[name][2]
    if refused(device, dt): continue
    for v in _range_cases(name):
      if name == "int64" and v == 2.0**63: continue   # torch wraps this one float to INT64_MIN (checked below: it raises here)
      ref = _torch_or_error(lambda: torch.tensor([v], dtype=tdt).tolist())
      for what, fn in [("Tensor(list)", lambda: Tensor([v], dtype=dt, device=device).tolist()),
                       ("Tensor(scalar)", lambda: [Tensor(v, dtype=dt, device=device).item()]),
                       ("full", lambda: Tensor.full((1,), v, dtype=dt, device=device).tolist())]:
        with case(f"{what} {v!r} as {name}"):
          if isinstance(ref, Exception):
            with pytest.raises(OverflowError, match=rf"(?s){re.escape(what.split('(')[0])}: .*{re.escape(repr(v))} is out of range for {name}"): fn()
          else: assert fn() == ref
          checked += 1
  assert checked > 100
  if not refused(device, dtypes.int64):
    with pytest.raises(OverflowError, match="out of range for int64"): Tensor([2.0**63], dtype=dtypes.int64, device=device)
  # uint64 (torch's support is partial): the same rule
  if not refused(device, dtypes.uint64):
    assert Tensor([2**64 - 1, -1, 5.75], dtype=dtypes.uint64, device=device).tolist() == [2**64 - 1, 2**64 - 1, 5]
    for bad in (2**64, -2**64, -1.0, 2.0**64):
      with pytest.raises(OverflowError, match="out of range for uint64"): Tensor([bad], dtype=dtypes.uint64, device=device)

def test_python_ints_past_int32_give_int64_like_torch(device):
  for data in [[2**31], 2**40, [1, -2**40], [[3], [2**62]], -2**63, [np.int64(2**40), 1], [True, 2**33]]:
    with case(repr(data)), expect_unsupported(device, dtypes.int64):
      t, ref = Tensor(data, device=device), torch.tensor(data)
      assert t.dtype == dtypes.int64 and t.tolist() == ref.tolist()
  for data in [[2**31 - 1, -2**31], 7, [np.int32(5)]]:   # int32 stays int32 (tinyweb's default int)
    assert Tensor(data, device=device).dtype == dtypes.int32
  for data in [2**63, [1, 2**63], [-2**63 - 1]]:   # torch: ValueError "Overflow when unpacking long long"
    with case(repr(data)):
      assert isinstance(_torch_or_error(lambda: torch.tensor(data)), Exception)
      with pytest.raises(OverflowError, match=r"Tensor: .* is out of range for int64"): Tensor(data, device=device)
  with expect_unsupported(device, dtypes.int64):
    f = Tensor.full((2,), 2**40, device=device)
    assert f.dtype == dtypes.int64 and f.tolist() == torch.full((2,), 2**40).tolist()
  with expect_unsupported(device, dtypes.int64):
    w = Tensor([True, False], device=device).where(1, 2**40)
    assert w.dtype == dtypes.int64 and w.tolist() == torch.where(torch.tensor([True, False]), 1, 2**40).tolist()
  with expect_unsupported(device, dtypes.int64):
    b = Tensor([True, False], device=device) + 2**40
    assert b.dtype == dtypes.int64 and b.tolist() == (torch.tensor([True, False]) + 2**40).tolist()

def test_scalar_operands_out_of_the_tensors_int_dtype_raise(device):
  # torch wraps these silently (int32 + 2**40 -> + 0) or raises (masked_fill, where, clip, setitem, fill_); tinyweb always raises
  x = Tensor([1, 2], device=device)
  for op, fn in [("add", lambda: x + 2**40), ("mul", lambda: 2**31 * x), ("sub", lambda: x - 2**40), ("lt", lambda: x < 2**40),
                 ("eq", lambda: x == -2**31 - 1), ("maximum", lambda: x.maximum(2**35)), ("where", lambda: x.masked_fill(x > 1, 2**40)),
                 ("where", lambda: (x > 1).where(x, 2**40)), ("clip", lambda: x.clip(0, 2**40)), ("setitem", lambda: x.__setitem__(0, 2**40)),
                 ("add", lambda: x + np.int64(2**40))]:
    with case(op), pytest.raises(OverflowError, match=rf"{op}: -?\d+ is out of range for int32 \(valid: -2147483648\.\.2147483647\)"): fn()
  assert x.tolist() == [1, 2]
  i8 = Tensor([1, -1], dtype=dtypes.int8, device=device)
  with pytest.raises(OverflowError, match=r"add: 200 is out of range for int8"): i8 + 200
  with pytest.raises(OverflowError, match=r"setitem: nan is out of range for int8"): i8[0] = float("nan")
  # in range: torch's values (an unsigned dtype takes -max..-1 as wrapped values, like torch)
  u8, tu8 = Tensor([1, 200], dtype=dtypes.uint8, device=device), torch.tensor([1, 200], dtype=torch.uint8)
  for fn in [lambda a: a + -1, lambda a: a * 255, lambda a: a < -1, lambda a: a.masked_fill(a > 100, -2)]:
    assert fn(u8).tolist() == fn(tu8).tolist()
  assert (i8 + 126).tolist() == (torch.tensor([1, -1], dtype=torch.int8) + 126).tolist()
  i8[1] = 2.75
  assert i8.tolist() == [1, 2]
  # floats overflow to inf like torch's; an int too large for any float raises
  with expect_unsupported(device, dtypes.float16):
    h, th = Tensor([1.0, -2.0], dtype=dtypes.float16, device=device), torch.tensor([1.0, -2.0], dtype=torch.float16)
    assert (h * 1e10).tolist() == (th * 1e10).tolist() and (h + 2**40).tolist() == (th + 2**40).tolist()
  with pytest.raises(OverflowError, match=r"mul: a 1329-bit integer is too large to convert to a float"):
    Tensor([1.0], device=device) * 10**400
  with pytest.raises(OverflowError, match=r"Tensor: a 1329-bit integer is too large"): Tensor([1.5, 10**400], device=device)

def test_float32_range_end_rounds_like_torch(device):
  # 3.4028235e38 (FLT_MAX as printed) rounds to FLT_MAX, not to inf; just past the halfway point it is inf
  vals = [3.4028235e38, -3.4028235e38, 3.4028235677973362e38, 3.4028235677973366e38, 1e39]
  ref = torch.tensor(vals).tolist()
  assert Tensor(vals, device=device).tolist() == ref
  assert [Tensor(v, device=device).item() for v in vals] == ref
  assert (Tensor([1.0], device=device) * 3.4028235e38).tolist() == [ref[0]]

def test_arange_past_int32_and_bad_ranges(device):
  for args in [(2**31, 2**31 + 3), (0, 2**40, 2**38), (-2**33, -2**33 + 5, 2), (2**31 - 2, 2**31 + 2)]:
    with case(f"arange{args}"), expect_unsupported(device, dtypes.int64):
      t = Tensor.arange(*args, device=device)
      assert t.dtype == dtypes.int64 and t.tolist() == torch.arange(*args).tolist()
  # a step past the end leaves one value, and a value range that fits an explicit dtype is computed in it
  assert Tensor.arange(3, 5, 2**40, device=device).tolist() == torch.arange(3, 5, 2**40).tolist()
  u = Tensor.arange(2**32 - 3, 2**32, dtype=dtypes.uint32, device=device)
  assert u.dtype == dtypes.uint32 and u.tolist() == [2**32 - 3, 2**32 - 2, 2**32 - 1]
  with pytest.raises(OverflowError, match=r"arange: 2147483648 is out of range for int32"):
    Tensor.arange(2**31 - 2, 2**31 + 1, dtype=dtypes.int32, device=device)
  with pytest.raises(OverflowError, match=r"arange: 259 is out of range for uint8"): Tensor.arange(250, 260, dtype=dtypes.uint8, device=device)
  for args, pat in [((0, 5, 0), "step must be non-zero"), ((0, -5), "opposite directions"), ((5, 0, 1), "opposite directions"),
                    ((0, 5, -1), "opposite directions"), ((0, float("inf")), "must be finite"), ((0, float("nan")), "must be finite"),
                    ((float("-inf"), 0.0), "must be finite")]:
    with case(f"arange{args}"):
      assert isinstance(_torch_or_error(lambda: torch.arange(*args)), RuntimeError)
      with pytest.raises(ValueError, match=f"arange: .*{pat}"): Tensor.arange(*args, device=device)
  with pytest.raises(TypeError, match="arange: expected a number"): Tensor.arange("5", device=device)
  with pytest.raises(OverflowError, match="arange: 2147483648 elements"): Tensor.arange(2**31, device=device)

def test_random_generators_check_their_dtype_and_arguments(device):
  for name, fn, tfn in [("rand", lambda dt: Tensor.rand(3, dtype=dt, device=device), lambda dt: torch.rand(3, dtype=dt)),
                        ("randn", lambda dt: Tensor.randn(3, dtype=dt, device=device), lambda dt: torch.randn(3, dtype=dt)),
                        ("uniform", lambda dt: Tensor.uniform(3, dtype=dt, device=device), lambda dt: torch.empty(3, dtype=dt).uniform_()),
                        ("normal", lambda dt: Tensor.normal(3, dtype=dt, device=device), lambda dt: torch.empty(3, dtype=dt).normal_())]:
    for dname in ["int32", "uint8", "bool"]:
      with case(f"{name} {dname}"):
        assert isinstance(_torch_or_error(lambda: tfn(DT[dname][2])), Exception)   # torch: "not implemented for 'Int'"
        with pytest.raises(TypeError, match=f"{name}: random values need a float dtype, got {dname}"): fn(DT[dname][0])
  for bad, exc, pat in [((-1,), ValueError, "non-negative"), ((2.0,), TypeError, "must be an int, got float"), ((True,), TypeError, "got bool")]:
    for name in ("rand", "randn"):
      with case(f"{name}{bad}"):
        assert isinstance(_torch_or_error(lambda: getattr(torch, name)(*bad)), Exception)
        with pytest.raises(exc, match=f"{name}: .*{pat}"): getattr(Tensor, name)(*bad, device=device)
  assert Tensor.rand(np.int64(2), 3, device=device).shape == (2, 3)
  with pytest.raises(ValueError, match=r"uniform: low \(2\) must not be greater than high \(1\)"): Tensor.uniform(3, low=2, high=1, device=device)
  with pytest.raises(ValueError, match="normal: std must be >= 0, got -1"): Tensor.normal(3, std=-1, device=device)
  # randint: int bounds that fit the dtype (torch: "to - 1 is out of bounds for unsigned char"); float dtypes are fine
  assert isinstance(_torch_or_error(lambda: torch.randint(0, 300, (3,), dtype=torch.uint8)), RuntimeError)
  with pytest.raises(OverflowError, match=r"randint: the range \[0, 300\) does not fit uint8"):
    Tensor.randint(3, low=0, high=300, dtype=dtypes.uint8, device=device)
  with pytest.raises(TypeError, match="randint: high must be an int, got float"): Tensor.randint(3, low=0, high=2.5, device=device)
  with pytest.raises(ValueError, match=r"randint: high \(5\) must be greater than low \(5\)"): Tensor.randint(3, low=5, high=5, device=device)
  f = Tensor.randint(1000, low=-3, high=3, dtype=dtypes.float32, device=device).numpy()
  assert f.dtype == np.float32 and set(f.tolist()) == {-3.0, -2.0, -1.0, 0.0, 1.0, 2.0}
  b = Tensor.randint(1000, low=0, high=2, dtype=dtypes.bool, device=device).numpy()
  assert set(b.tolist()) == {False, True}
  with expect_unsupported(device, dtypes.int64):
    r = Tensor.randint(2000, low=2**40, high=2**40 + 3, device=device)
    assert r.dtype == dtypes.int64 and set(r.tolist()) == {2**40, 2**40 + 1, 2**40 + 2}
  with expect_unsupported(device, dtypes.int64):   # (the offsets from low need int64 here)
    wide = Tensor.randint(20000, low=-2**31, high=2**31 - 1, dtype=dtypes.int32, device=device).numpy()
    assert wide.min() >= -2**31 and wide.max() < 2**31 - 1 and wide.min() < -2**30 and wide.max() > 2**30

CREATION_BAD = [  # id, tinyweb call, torch call, tinyweb's exception, message pattern
  ("zeros_negative", lambda: Tensor.zeros(2, -1), lambda: torch.zeros(2, -1), ValueError, r"zeros: sizes must be non-negative, got \(2, -1\)"),
  ("zeros_float", lambda: Tensor.zeros(2.0), lambda: torch.zeros(2.0), TypeError, r"zeros: a size must be an int, got float 2\.0"),
  ("zeros_bool", lambda: Tensor.zeros(True), lambda: torch.zeros(True), TypeError, r"zeros: a size must be an int, got bool"),
  ("zeros_none", lambda: Tensor.zeros((2, None)), lambda: torch.zeros((2, None)), TypeError, r"zeros: a size must be an int, got NoneType"),
  ("ones_negative", lambda: Tensor.ones(-3), lambda: torch.ones(-3), ValueError, r"ones: sizes must be non-negative"),
  ("empty_negative", lambda: Tensor.empty(-1), lambda: torch.empty(-1), ValueError, r"empty: sizes must be non-negative"),
  ("full_negative", lambda: Tensor.full((-1,), 1), lambda: torch.full((-1,), 1), ValueError, r"full: sizes must be non-negative"),
  ("full_float_size", lambda: Tensor.full((1.5,), 1), lambda: torch.full((1.5,), 1), TypeError, r"full: a size must be an int"),
  ("full_none", lambda: Tensor.full((2,), None), lambda: torch.full((2,), None), TypeError, r"full: expected a number .*NoneType"),
  ("full_str", lambda: Tensor.full((2,), "a"), lambda: torch.full((2,), "a"), TypeError, r"full: expected a number .*str"),
  ("eye_negative", lambda: Tensor.eye(-1), lambda: torch.eye(-1), ValueError, r"eye: sizes must be non-negative"),
  ("eye_negative_m", lambda: Tensor.eye(2, -1), lambda: torch.eye(2, -1), ValueError, r"eye: sizes must be non-negative"),
  ("eye_float", lambda: Tensor.eye(2.0), lambda: torch.eye(2.0), TypeError, r"eye: a size must be an int"),
  ("linspace_negative", lambda: Tensor.linspace(0, 1, -1), lambda: torch.linspace(0, 1, -1), ValueError, r"linspace: steps must be >= 0"),
  ("linspace_float", lambda: Tensor.linspace(0, 1, 2.0), lambda: torch.linspace(0, 1, 2.0), TypeError, r"linspace: steps must be an int"),
  ("tensor_str", lambda: Tensor(["a"]), lambda: torch.tensor(["a"]), TypeError, r"Tensor: expected a number .*str"),
  ("tensor_none_in_list", lambda: Tensor([1, None]), lambda: torch.tensor([1, None]), TypeError, r"Tensor: expected a number .*NoneType"),
  ("tensor_none", lambda: Tensor(None), lambda: torch.tensor(None), TypeError, r"Tensor: cannot create a tensor from NoneType"),
  ("tensor_object", lambda: Tensor([object()]), lambda: torch.tensor([object()]), TypeError, r"Tensor: expected a number .*object"),
  ("tensor_ragged", lambda: Tensor([[1, 2], [3]]), lambda: torch.tensor([[1, 2], [3]]), ValueError, r"Tensor: ragged"),
  ("tensor_ragged_depth", lambda: Tensor([[1, 2], 3]), lambda: torch.tensor([[1, 2], 3]), ValueError, r"Tensor: ragged"),
  ("numpy_object", lambda: Tensor(np.array([1], dtype=object)), lambda: torch.tensor(np.array([1], dtype=object)), TypeError, r"numpy dtype object"),
]

@pytest.mark.parametrize("name,tw,tc,exc,pat", CREATION_BAD, ids=[c[0] for c in CREATION_BAD])
def test_creation_bad_arguments_raise_like_torch(name, tw, tc, exc, pat):
  assert isinstance(_torch_or_error(tc), Exception), "torch accepts it"
  with pytest.raises(exc, match=pat): tw()

def test_creation_accepts_what_torch_accepts(device):
  for name, tw, tc in [("numpy_int_size", lambda: Tensor.zeros(np.int64(2), device=device), lambda: torch.zeros(np.int64(2))),
                       ("numpy_ints_in_list", lambda: Tensor([np.int16(3), np.int64(-4)], device=device), lambda: torch.tensor([np.int16(3), np.int64(-4)])),
                       ("numpy_floats_in_list", lambda: Tensor([np.float32(1.5), 2], device=device), lambda: torch.tensor([np.float32(1.5), 2])),
                       ("numpy_bools_in_list", lambda: Tensor([np.bool_(True), False], device=device), lambda: torch.tensor([np.bool_(True), False])),
                       ("arrays_in_list", lambda: Tensor([np.array([1, 2]), np.array([3, 4])], device=device), lambda: torch.tensor(np.array([[1, 2], [3, 4]]))),
                       ("nested_tuples", lambda: Tensor(((1, 2), (3, 4)), device=device), lambda: torch.tensor(((1, 2), (3, 4)))),
                       ("bool_int_mix", lambda: Tensor([True, 2], device=device), lambda: torch.tensor([True, 2])),
                       ("bool_float_mix", lambda: Tensor([True, 2.5], device=device), lambda: torch.tensor([True, 2.5])),
                       ("full_numpy_int", lambda: Tensor.full((2,), np.int64(7), device=device), lambda: torch.full((2,), np.int64(7))),
                       ("eye_zero", lambda: Tensor.eye(0, 2, device=device), lambda: torch.eye(0, 2)),
                       ("linspace_zero", lambda: Tensor.linspace(0, 1, 0, device=device), lambda: torch.linspace(0, 1, 0))]:
    with case(name):
      t, r = tw(), tc()
      assert t.shape == tuple(r.shape) and t.tolist() == r.tolist()
      assert (t.dtype.is_float, t.dtype.is_bool) == (r.dtype.is_floating_point, r.dtype == torch.bool)
