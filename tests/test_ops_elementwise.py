"""Differential tests of tinyweb's elementwise ops against torch (forward values and gradients)."""
import contextlib
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Tensor, dtypes
from helpers import check_op, rand_np, expect_unsupported

@contextlib.contextmanager
def case(what):
  """Prefix an assertion failure with the sub-case that failed (for tests that loop over cases)."""
  try: yield
  except AssertionError as e: raise AssertionError(f"[{what}] {e}") from e

def away0(v, m=0.5):
  """Push values away from zero (divisors, reciprocals)."""
  return np.where(v >= 0, v + m, v - m).astype(v.dtype)

def nonzero_ints(shape, hi, dtype, seed):
  rng = np.random.default_rng(seed)
  mag = rng.integers(1, hi + 1, size=shape)
  sgn = np.where(rng.random(shape) < 0.5, -1, 1)
  return (mag * sgn).astype(dtype)

# ---------------------------------------------------------------- unary ops
# (id, torch_fn, tinyweb_fn (None: same code as torch_fn), low, high)
UNARY = [
  ("neg", lambda x: -x, None, -2, 2),
  ("neg_method", torch.neg, lambda x: x.neg(), -2, 2),
  ("abs", torch.abs, lambda x: x.abs(), -2, 2),
  ("exp", torch.exp, lambda x: x.exp(), -3, 3),
  ("exp2", torch.exp2, lambda x: x.exp2(), -3, 3),
  ("log", torch.log, lambda x: x.log(), 0.1, 5),
  ("log2", torch.log2, lambda x: x.log2(), 0.1, 5),
  ("sqrt", torch.sqrt, lambda x: x.sqrt(), 0.1, 5),
  ("rsqrt", torch.rsqrt, lambda x: x.rsqrt(), 0.1, 5),
  ("sin", torch.sin, lambda x: x.sin(), -4, 4),
  ("cos", torch.cos, lambda x: x.cos(), -4, 4),
  ("tan", torch.tan, lambda x: x.tan(), -1.2, 1.2),
  ("sigmoid", torch.sigmoid, lambda x: x.sigmoid(), -6, 6),
  ("tanh", torch.tanh, lambda x: x.tanh(), -3, 3),
  ("relu", torch.relu, lambda x: x.relu(), -2, 2),
  ("leaky_relu", F.leaky_relu, lambda x: x.leaky_relu(), -2, 2),
  ("leaky_relu_0.2", lambda x: F.leaky_relu(x, 0.2), lambda x: x.leaky_relu(0.2), -2, 2),
  ("elu", F.elu, lambda x: x.elu(), -3, 2),
  ("elu_alpha", lambda x: F.elu(x, alpha=0.5), lambda x: x.elu(alpha=0.5), -3, 2),
  ("gelu", lambda x: F.gelu(x, approximate="tanh"), lambda x: x.gelu(), -4, 4),
  ("silu", F.silu, lambda x: x.silu(), -4, 4),
  ("swish", F.silu, lambda x: x.swish(), -4, 4),
  ("softplus", F.softplus, lambda x: x.softplus(), -4, 4),
  ("softplus_beta", lambda x: F.softplus(x, beta=2.0), lambda x: x.softplus(beta=2.0), -4, 4),
  ("mish", F.mish, lambda x: x.mish(), -4, 4),
  ("hardtanh", F.hardtanh, lambda x: x.hardtanh(), -2, 2),
  ("hardtanh_range", lambda x: F.hardtanh(x, -0.5, 1.5), lambda x: x.hardtanh(min_val=-0.5, max_val=1.5), -2, 2),
  ("relu6", F.relu6, lambda x: x.relu6(), -3, 9),
  ("clip", lambda x: torch.clip(x, -0.5, 0.7), lambda x: x.clip(-0.5, 0.7), -2, 2),
  ("clamp", lambda x: torch.clamp(x, -1.0, 1.0), lambda x: x.clamp(-1.0, 1.0), -2, 2),
  ("reciprocal", torch.reciprocal, lambda x: x.reciprocal(), 0.2, 3),
  ("reciprocal_neg", lambda x: torch.reciprocal(-x), lambda x: (-x).reciprocal(), 0.2, 3),
  ("sign", torch.sign, lambda x: x.sign(), -2, 2),
  ("floor", torch.floor, lambda x: x.floor(), -3, 3),
  ("ceil", torch.ceil, lambda x: x.ceil(), -3, 3),
  ("trunc", torch.trunc, lambda x: x.trunc(), -3, 3),
  ("round", torch.round, lambda x: x.round(), -3, 3),
]
UNARY_BY_NAME = {u[0]: u for u in UNARY}

@pytest.mark.browser(name=["exp", "log", "sigmoid", "gelu"])
@pytest.mark.parametrize("name,tfn,wfn,low,high", UNARY, ids=[u[0] for u in UNARY])
def test_unary(device, name, tfn, wfn, low, high):
  check_op([(3, 4)], tfn, wfn, device=device, low=low, high=high, atol=1e-5, rtol=1e-4, grad_atol=1e-4, grad_rtol=1e-3)

# shapes and memory layouts: 0-d, size-1, empty, 3-d, and non-contiguous views built inside the fn for both libs
LAYOUTS = [
  ("0d", (), lambda x: x),
  ("size1", (1,), lambda x: x),
  ("empty", (0, 3), lambda x: x),
  ("3d", (2, 3, 4), lambda x: x),
  ("T", (4, 3), lambda x: x.T),
  ("step2", (6, 4), lambda x: x[::2]),
  ("colstep", (3, 7), lambda x: x[:, 1::3]),
  ("flip_slice", (5, 4), lambda x: x.flip(0)[:, 1:3]),
  ("permute", (2, 3, 4), lambda x: x.permute(2, 0, 1)),
  ("expand", (3, 1), lambda x: x.expand(3, 4)),
]

@pytest.mark.parametrize("lname,shape,view", LAYOUTS, ids=[l[0] for l in LAYOUTS])
def test_unary_layouts(device, lname, shape, view):
  for opname in ("sqrt", "sigmoid", "neg"):
    _, tfn, wfn, low, high = UNARY_BY_NAME[opname]
    wfn = wfn or tfn
    with case(f"{opname} on {lname}{shape}"):
      check_op([shape], lambda x: tfn(view(x)), lambda x: wfn(view(x)), device=device, low=low, high=high)
  # a chain of elementwise ops on the view
  with case(f"chain on {lname}{shape}"):
    check_op([shape], lambda x: (view(x) * 2 + 1).exp() - view(x).abs(), device=device, low=-1, high=1)

def test_round_half_to_even_and_rounding(device):
  v = np.array([[-2.5, -1.5, -0.5, 0.5], [1.5, 2.5, 3.5, -3.5], [0.49, -0.51, 1.2, -2.7],
                [2.7, -0.2, 0.0, 7.0], [1000000.5, -1000001.5, 4.5, -4.5]], np.float32)
  for op in ("floor", "ceil", "trunc", "round"):
    with case(op):
      check_op(None, getattr(torch, op), lambda x: getattr(x, op)(), device=device, vals=[v])

def test_rounding_large_values(device):
  # values beyond the int32 range must not overflow (torch keeps them as is)
  v = np.array([3e9, -3e9, 1e10, -1e10, 8388609.0, -8388609.0], np.float32)
  for op in ("floor", "ceil", "trunc", "round"):
    with case(op):
      check_op(None, getattr(torch, op), lambda x: getattr(x, op)(), device=device, vals=[v], grad=False, rtol=0, atol=0)

def test_sign_with_zeros(device):
  v = np.array([-2.0, -0.0, 0.0, 1e-3, -1e-3, 3.0], np.float32)
  check_op(None, torch.sign, lambda x: x.sign(), device=device, vals=[v])
  vinf = np.array([np.inf, -np.inf, 0.0, 1.0], np.float32)
  check_op(None, torch.sign, lambda x: x.sign(), device=device, vals=[vinf], grad=False)
  vi = np.array([-5, 0, 7, -1, 1, 0], np.int32)
  check_op(None, torch.sign, lambda x: x.sign(), device=device, vals=[vi])
  check_op(None, torch.abs, lambda x: x.abs(), device=device, vals=[vi])

def test_abs_clears_the_sign_bit(device):
  """abs of -0.0 is +0.0 and of NaN is NaN, as torch's; its gradient is torch's g * sign(x) (0 at 0)."""
  v = np.array([-2.5, -0.0, 0.0, np.nan, -np.inf, 3.0, -1e-40], np.float32)
  got = Tensor(v, device=device).abs().numpy()
  ref = torch.tensor(v).abs().numpy()
  assert got.tobytes() == ref.tobytes(), (got, ref)
  check_op(None, torch.abs, lambda x: x.abs(), device=device, vals=[np.array([-2.0, -0.0, 0.0, 0.5, -3.0], np.float32)])

# ---------------------------------------------------------------- binary ops
def prep_div(vals): return [vals[0], away0(vals[1])]
def prep_pow(vals): return [np.abs(vals[0]) + np.float32(0.5), vals[1]]  # positive base

BINARY = [
  ("add", lambda a, b: a + b, None, None),
  ("sub", lambda a, b: a - b, None, None),
  ("mul", lambda a, b: a * b, None, None),
  ("div", lambda a, b: a / b, None, prep_div),
  ("pow", lambda a, b: a ** b, None, prep_pow),
  ("maximum", torch.maximum, lambda a, b: a.maximum(b), None),
  ("minimum", torch.minimum, lambda a, b: a.minimum(b), None),
]
BIN_SHAPES = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((4,), (2, 3, 4)), ((), (3, 4)), ((1,), (3,)),
              ((0, 3), (1, 3)), ((2, 1, 4), (3, 1))]

@pytest.mark.parametrize("name,tfn,wfn,prep", BINARY, ids=[b[0] for b in BINARY])
@pytest.mark.browser(name=["add", "div"])
def test_binary(device, name, tfn, wfn, prep):
  for i, shapes in enumerate(BIN_SHAPES):
    vals = [rand_np(s, seed=10 * i + j) for j, s in enumerate(shapes)]
    if prep: vals = prep(vals)
    with case(f"{name} shapes {shapes}"):
      check_op(None, tfn, wfn, device=device, vals=vals, grad_atol=1e-4, grad_rtol=1e-3)

NONCONTIG_BINARY = [
  ("T_plus", [(4, 3), (3, 4)], lambda a, b: a.T + b),
  ("step_mul", [(6, 4), (3, 2)], lambda a, b: a[::2, ::2] * b),
  ("both_T_sub", [(4, 3), (4, 3)], lambda a, b: a.T - b.T),
  ("flip_div", [(3, 4), (3, 4)], lambda a, b: a.flip(1) / (b * b + 1)),
  ("permute_bcast", [(2, 3, 4), (3, 1)], lambda a, b: a.permute(2, 1, 0) * b),
  ("self_T", [(3, 3)], lambda a: a * a.T + a),
]

def test_binary_noncontiguous(device):
  for name, shapes, fn in NONCONTIG_BINARY:
    with case(name):
      check_op(shapes, fn, device=device, grad_atol=1e-4)

# python scalars on either side (reverse ops); positive inputs so pow/div are well defined
SCALAR_OPS = [
  ("add", [lambda x: x + 2, lambda x: 2 + x, lambda x: x + 0.5]),
  ("sub", [lambda x: x - 1.5, lambda x: 1.5 - x, lambda x: 3 - x]),
  ("mul", [lambda x: x * 3, lambda x: -2.5 * x]),
  ("div", [lambda x: x / 4, lambda x: 4 / x, lambda x: 1 / x, lambda x: x / -0.5]),
  ("pow", [lambda x: x ** 2, lambda x: x ** 3, lambda x: x ** 0.5, lambda x: x ** -1.5, lambda x: x ** 0,
           lambda x: 2 ** x, lambda x: 0.5 ** x, lambda x: 2.5 ** x]),
]

@pytest.mark.parametrize("name,fns", SCALAR_OPS, ids=[s[0] for s in SCALAR_OPS])
def test_python_scalar_both_sides(device, name, fns):
  for i, fn in enumerate(fns):
    with case(f"{name} variant {i}"):
      check_op([(3, 4)], fn, device=device, low=0.5, high=2.0, grad_atol=1e-4, grad_rtol=1e-3)

# ---------------------------------------------------------------- comparisons / where
CMP = [("eq", lambda a, b: a == b), ("ne", lambda a, b: a != b), ("lt", lambda a, b: a < b),
       ("le", lambda a, b: a <= b), ("gt", lambda a, b: a > b), ("ge", lambda a, b: a >= b)]

@pytest.mark.parametrize("name,fn", CMP, ids=[c[0] for c in CMP])
@pytest.mark.browser(name=["eq"])
def test_compare(device, name, fn):
  for dtype in (np.float32, np.int32, np.uint8):
    # small integer values so that ties occur
    a = rand_np((3, 4), 0, 4, np.int32, seed=1).astype(dtype)
    b = rand_np((4,), 0, 4, np.int32, seed=2).astype(dtype)
    with case(f"{name} {np.dtype(dtype).name}"):
      out = check_op(None, fn, device=device, vals=[a, b])
      assert out.dtype == dtypes.bool
      check_op(None, lambda x: fn(x, 1), device=device, vals=[a])
      check_op(None, lambda x: fn(1, x), device=device, vals=[a])
      check_op(None, lambda x: fn(x, x), device=device, vals=[a])
  with case(f"{name} float32 with negative values and float scalar"):
    v = rand_np((3, 4), seed=3)
    check_op(None, lambda x: fn(x, -0.5), device=device, vals=[v])
    check_op(None, lambda x: fn(x[:, :1], x.T[:1]), device=device, vals=[v[:, :3]])

@pytest.mark.browser
def test_where(device):
  check_op([(3, 4), (3, 4)], lambda x, y: torch.where(x > 0, x, y), lambda x, y: (x > 0).where(x, y), device=device)
  m = rand_np((3, 1), dtype=np.bool_, seed=5)
  m2 = rand_np((3, 4), dtype=np.bool_, seed=6)
  # broadcasting cond / a / b
  check_op([(1, 4), (3, 4)], lambda a, b: torch.where(torch.tensor(m), a, b),
           lambda a, b: Tensor(m, device=device).where(a, b), device=device)
  check_op([(4,), ()], lambda a, b: torch.where(torch.tensor(m2), a, b),
           lambda a, b: Tensor(m2, device=device).where(a, b), device=device)
  # python scalars as branches
  check_op([(3, 4)], lambda a: torch.where(torch.tensor(m2), a, 0.0), lambda a: Tensor(m2, device=device).where(a, 0.0), device=device)
  check_op([(3, 4)], lambda a: torch.where(torch.tensor(m2), 2.5, a), lambda a: Tensor(m2, device=device).where(2.5, a), device=device)
  # static form Tensor.where(cond, a, b)
  check_op([(3, 4), (3, 4)], lambda a, b: torch.where(torch.tensor(m2), a, b),
           lambda a, b: Tensor.where(Tensor(m2, device=device), a, b), device=device)
  # integer branches
  ia, ib = rand_np((3, 4), -9, 9, np.int32, seed=7), rand_np((3, 4), -9, 9, np.int32, seed=8)
  check_op(None, lambda a, b: torch.where(a > b, a, b), lambda a, b: (a > b).where(a, b), device=device, vals=[ia, ib])
  # where whose cond is a 0-d tensor
  check_op([(3,), (3,)], lambda a, b: torch.where(torch.tensor(True), a, b),
           lambda a, b: Tensor(True, device=device).where(a, b), device=device)

def test_mask_multiply_grad(device):
  m = rand_np((3, 4), dtype=np.bool_, seed=3)
  check_op([(3, 4)], lambda x: x * torch.tensor(m), lambda x: x * Tensor(m, device=device), device=device)

# ---------------------------------------------------------------- bitwise / logical
BIT_DTYPES = [("int32", np.int32, -100, 100, -7), ("uint8", np.uint8, 0, 256, 0x5A), ("bool", np.bool_, 0, 2, True)]
BIT_OPS = [("and", lambda a, b: a & b), ("or", lambda a, b: a | b), ("xor", lambda a, b: a ^ b)]

@pytest.mark.parametrize("dname,dt,lo,hi,scalar", BIT_DTYPES, ids=[d[0] for d in BIT_DTYPES])
@pytest.mark.browser(dname=["uint8"])
def test_bitwise(device, dname, dt, lo, hi, scalar):
  a, b = rand_np((3, 4), lo, hi, dt, seed=1), rand_np((4,), lo, hi, dt, seed=2)
  for oname, fn in BIT_OPS:
    with case(f"{oname} {dname}"):
      out = check_op(None, fn, device=device, vals=[a, b])
      assert out.dtype == getattr(dtypes, dname)
      check_op(None, lambda x: fn(x, scalar), device=device, vals=[a])
      check_op(None, lambda x: fn(scalar, x), device=device, vals=[a])

@pytest.mark.parametrize("dname,dt,lo,hi", [d[:4] for d in BIT_DTYPES], ids=[d[0] for d in BIT_DTYPES])
def test_invert(device, dname, dt, lo, hi):
  a = rand_np((3, 4), lo, hi, dt, seed=3)
  out = check_op(None, lambda x: ~x, device=device, vals=[a])
  assert out.dtype == getattr(dtypes, dname)

def test_logical_not(device):
  vb = rand_np((3, 4), dtype=np.bool_, seed=4)
  check_op(None, torch.logical_not, lambda x: x.logical_not(), device=device, vals=[vb])
  vf = np.array([0.0, -0.0, 1.5, -2.0, 0.0, 3.0], np.float32)
  check_op(None, torch.logical_not, lambda x: x.logical_not(), device=device, vals=[vf], grad=False)
  vi = np.array([0, 1, -3, 0, 7], np.int32)
  check_op(None, torch.logical_not, lambda x: x.logical_not(), device=device, vals=[vi])

SHIFT_DTYPES = [("int32", np.int32, -50, 50), ("uint8", np.uint8, 0, 32)]

@pytest.mark.parametrize("dname,dt,lo,hi", SHIFT_DTYPES, ids=[s[0] for s in SHIFT_DTYPES])
@pytest.mark.parametrize("oname,fn", [("lshift", lambda a, b: a << b), ("rshift", lambda a, b: a >> b)], ids=["lshift", "rshift"])
@pytest.mark.browser(dname=["int32"], oname=["rshift"])
def test_shift(device, oname, fn, dname, dt, lo, hi):
  a = rand_np((3, 4), lo, hi, dt, seed=1)
  s = rand_np((3, 4), 0, 4, dt, seed=2)  # shift amounts 0..3
  out = check_op(None, fn, device=device, vals=[a, s])
  assert out.dtype == getattr(dtypes, dname)
  for k in (0, 1, 3):
    with case(f"shift by python int {k}"):
      check_op(None, lambda x: fn(x, k), device=device, vals=[a])

# ---------------------------------------------------------------- division / modulo
@pytest.mark.parametrize("dt", [np.int32, np.int8], ids=["int32", "int8"])
@pytest.mark.browser(dt=[np.int8])
def test_int_floordiv_mod(device, dt):
  """Integer // and % follow Python/torch floor semantics, including negative operands."""
  a = rand_np((3, 4), -20, 21, dt, seed=1)
  a[0, :4] = np.array([-7, 7, -6, 0], dt)
  b = nonzero_ints((4,), 7, dt, seed=2)
  b[:2] = np.array([3, -3], dt)
  fdiv = lambda x, y: torch.div(x, y, rounding_mode="floor")
  out = check_op(None, fdiv, lambda x, y: x // y, device=device, vals=[a, b])
  assert out.dtype == getattr(dtypes, np.dtype(dt).name)
  check_op(None, torch.remainder, lambda x, y: x % y, device=device, vals=[a, b])
  for s in (3, -3, 1, 5, -1):
    with case(f"scalar divisor {s}"):
      check_op(None, lambda x: fdiv(x, s), lambda x: x // s, device=device, vals=[a])
      check_op(None, lambda x: torch.remainder(x, s), lambda x: x % s, device=device, vals=[a])
  bz = nonzero_ints((3, 4), 7, dt, seed=3)
  for s in (7, -7):
    with case(f"scalar dividend {s}"):
      check_op(None, lambda y: fdiv(torch.full_like(y, s), y), lambda y: s // y, device=device, vals=[bz])
      check_op(None, lambda y: torch.remainder(torch.full_like(y, s), y), lambda y: s % y, device=device, vals=[bz])

def test_int_true_division(device):
  a = rand_np((3, 4), -20, 21, np.int32, seed=1)
  b = nonzero_ints((3, 4), 7, np.int32, seed=2)
  out = check_op(None, lambda x, y: x / y, device=device, vals=[a, b])
  assert out.dtype == dtypes.float32
  check_op(None, lambda x: x / 4, device=device, vals=[a])

def test_float_floordiv_mod(device):
  rng = np.random.default_rng(0)
  a = (rng.integers(-20, 21, size=(4, 5)) / 4).astype(np.float32)   # exact multiples of 0.25
  b = (rng.choice([0.5, 1.0, 2.0, 4.0], size=(5,)) * rng.choice([-1, 1], size=(5,))).astype(np.float32)
  check_op(None, lambda x, y: torch.div(x, y, rounding_mode="floor"), lambda x, y: x // y, device=device, vals=[a, b], grad=False)
  check_op(None, torch.remainder, lambda x, y: x % y, device=device, vals=[a, b], grad=False)
  check_op(None, lambda x: torch.remainder(x, -1.5), lambda x: x % -1.5, device=device, vals=[a], grad=False)

# ---------------------------------------------------------------- nan / inf
def test_isnan_isinf(device):
  v = np.array([[np.nan, np.inf, -np.inf, 0.0], [1.5, -2.0, np.nan, -0.0]], np.float32)
  out = check_op(None, torch.isnan, lambda x: x.isnan(), device=device, vals=[v])
  assert out.dtype == dtypes.bool
  check_op(None, torch.isinf, lambda x: x.isinf(), device=device, vals=[v])
  check_op(None, lambda x: x != x, device=device, vals=[v])
  # nan / inf produced by computation
  check_op(None, lambda x: (x * 0).isnan(), device=device, vals=[v])
  neg = np.array([-1.0, 2.0, -0.5, 3.0], np.float32)
  check_op(None, lambda x: torch.log(x).isnan(), lambda x: x.log().isnan(), device=device, vals=[neg])
  check_op(None, lambda x: torch.sqrt(x).isnan(), lambda x: x.sqrt().isnan(), device=device, vals=[neg])
  big = np.array([1e30, -1e30, 1.0, 0.0], np.float32)
  check_op(None, lambda x: (x * x * x).isinf(), device=device, vals=[big])

@pytest.mark.browser
def test_special_value_propagation(device):
  v = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 2.0], np.float32)
  for name, tfn, wfn in [("exp", torch.exp, lambda x: x.exp()), ("neg", lambda x: -x, None), ("abs", torch.abs, lambda x: x.abs()),
                         ("add", lambda x: x + 1, None), ("mul", lambda x: x * 2, None), ("sigmoid", torch.sigmoid, lambda x: x.sigmoid()),
                         ("tanh", torch.tanh, lambda x: x.tanh())]:
    with case(name):
      check_op(None, tfn, wfn, device=device, vals=[v], grad=False)
  pos = np.array([np.inf, 0.0, 4.0], np.float32)
  check_op(None, torch.sqrt, lambda x: x.sqrt(), device=device, vals=[pos], grad=False)
  check_op(None, torch.log, lambda x: x.log(), device=device, vals=[pos], grad=False)
  check_op(None, torch.reciprocal, lambda x: x.reciprocal(), device=device, vals=[pos], grad=False)

# ---------------------------------------------------------------- other dtypes
F16_OPS = [
  ("add", [(3, 4), (4,)], lambda a, b: a + b, None, -2, 2),
  ("mul", [(3, 4), (3, 1)], lambda a, b: a * b, None, -2, 2),
  ("div", [(3, 4), (3, 4)], lambda a, b: a / b, None, 0.5, 2),
  ("exp", [(3, 4)], torch.exp, lambda x: x.exp(), -2, 2),
  ("sqrt", [(3, 4)], torch.sqrt, lambda x: x.sqrt(), 0.1, 4),
  ("sigmoid", [(3, 4)], torch.sigmoid, lambda x: x.sigmoid(), -4, 4),
  ("relu", [(3, 4)], torch.relu, lambda x: x.relu(), -2, 2),
  ("tanh", [(3, 4)], torch.tanh, lambda x: x.tanh(), -2, 2),
  ("scalar_mul_add", [(3, 4)], lambda x: x * 3 + 1.5, None, -2, 2),
]

def test_float16(device):
  for name, shapes, tfn, wfn, low, high in F16_OPS:
    with case(f"float16 {name}"):
      out = check_op(shapes, tfn, wfn, device=device, dtype=np.float16, low=low, high=high, atol=1e-2, rtol=1e-2, grad=False)
      assert out.dtype == dtypes.float16

INT_OPS = [
  ("add", 2, lambda a, b: a + b, None), ("sub", 2, lambda a, b: a - b, None), ("mul", 2, lambda a, b: a * b, None),
  ("neg", 1, lambda a: -a, None), ("abs", 1, torch.abs, lambda a: a.abs()),
  ("maximum", 2, torch.maximum, lambda a, b: a.maximum(b)), ("minimum", 2, torch.minimum, lambda a, b: a.minimum(b)),
  ("clip", 1, lambda a: torch.clip(a, -3, 4), lambda a: a.clip(-3, 4)),
  ("scalar", 1, lambda a: (a * 3 - 7) + (2 - a), None),
]

def test_int32_ops(device):
  for name, n, tfn, wfn in INT_OPS:
    with case(f"int32 {name}"):
      shapes = [(3, 4), (4,)][:n]
      out = check_op(shapes, tfn, wfn, device=device, low=-10, high=10, dtype=np.int32)
      assert out.dtype == dtypes.int32

def test_mixed_dtype_elementwise(device):
  i = rand_np((3, 4), -10, 10, np.int32, seed=1)
  f = rand_np((3, 4), seed=2)
  u = rand_np((4,), 0, 255, np.uint8, seed=3)
  b = rand_np((3, 4), dtype=np.bool_, seed=4)
  out = check_op(None, lambda x, y: x + y, device=device, vals=[i, f])
  assert out.dtype == dtypes.float32
  out = check_op(None, lambda x, y: x * y, device=device, vals=[f, u])
  assert out.dtype == dtypes.float32
  out = check_op(None, lambda x, y: x * y, device=device, vals=[b, f])
  assert out.dtype == dtypes.float32
  out = check_op(None, lambda x, y: x + y, device=device, vals=[i, b])
  assert out.dtype == dtypes.int32
  out = check_op(None, lambda x, y: x - y, device=device, vals=[u, i])
  assert out.dtype == dtypes.int32
  h = rand_np((3, 4), dtype=np.float16, seed=5)
  with expect_unsupported(device, dtypes.float16):   # (WebGPU without shader-f16)
    out = check_op(None, lambda x, y: x + y, device=device, vals=[h, f], grad=False)
    assert out.dtype == dtypes.float32

@pytest.mark.parametrize("dt", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32])
def test_integer_division_by_zero_and_int_min_by_minus_one(device, dt):
  # documented choice (README): x/0 and x%0 give 0 instead of trapping; INT_MIN / -1 wraps to INT_MIN, INT_MIN % -1 = 0.
  # Checked against plain Python ints: truncating division, then wrapped to the dtype.
  info = np.iinfo(dt)
  a = [info.min, info.min, info.max, 7, -7 if info.min < 0 else 9, 0, 5, info.min]
  b = [0, -1 if info.min < 0 else 3, 0, 2, 2, 0, 1, 1]
  def wrap(v): return (v - info.min) % (1 << (8 * np.dtype(dt).itemsize)) + info.min
  def trunc_div(x, y): return 0 if y == 0 else wrap(abs(x) // abs(y) * (1 if (x < 0) == (y < 0) else -1))
  want_q = [trunc_div(x, y) for x, y in zip(a, b)]
  want_r = [0 if y == 0 else wrap(x - trunc_div(x, y) * y) for x, y in zip(a, b)]
  tdt = getattr(dtypes, np.dtype(dt).name)
  with expect_unsupported(device, tdt):
    ta, tb = Tensor(np.array(a, dt), device=device), Tensor(np.array(b, dt), device=device)
    assert ta.div(tb, rounding_mode="trunc").tolist() == want_q
    assert ta.fmod(tb).tolist() == want_r

def test_masked_fill_keeps_the_tensors_dtype(device):
  """torch's masked_fill converts the value to the tensor's dtype: a bool tensor stays bool, an int one truncates a float."""
  m = np.array([True, False, True])
  for vals, value in [(np.array([False, True, False]), -1), (np.array([1, 2, 3], np.int32), 2.7), (np.array([1.5, 2.5, 3.5], np.float32), 7)]:
    got = Tensor(vals, device=device).masked_fill(Tensor(m, device=device), value)
    exp = torch.tensor(vals).masked_fill(torch.tensor(m), value)
    assert got.dtype.name == str(exp.dtype).removeprefix("torch.")
    np.testing.assert_array_equal(got.numpy(), exp.numpy())
