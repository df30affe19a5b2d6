"""Differential tests of tinyweb's reductions (and softmax-like ops) against torch, forward and gradients."""
import contextlib
import numpy as np
import pytest
import torch
from tinyweb import Tensor, dtypes
from helpers import check_op, rand_np

@contextlib.contextmanager
def case(what):
  try: yield
  except AssertionError as e: raise AssertionError(f"[{what}] {e}") from e

def _dims(axis, ndim):
  if axis is None: return tuple(range(ndim))
  axes = (axis,) if isinstance(axis, int) else tuple(axis)
  return tuple(sorted(a % ndim for a in axes))

def t_reduce(op, x, axis=None, keepdim=False, correction=1):
  """torch reference for tinyweb's x.<op>(axis=..., keepdim=...)."""
  dims = _dims(axis, x.ndim)
  if x.ndim == 0:
    if op in ("var", "std"): return getattr(torch, op)(x, correction=correction)
    return x * 1 if op in ("max", "min", "prod") else getattr(torch, op)(x)
  if op == "sum": return torch.sum(x, dim=dims, keepdim=keepdim)
  if op == "mean": return torch.mean(x, dim=dims, keepdim=keepdim)
  if op == "max": return torch.amax(x, dim=dims, keepdim=keepdim)
  if op == "min": return torch.amin(x, dim=dims, keepdim=keepdim)
  if op == "prod":
    for d in reversed(dims): x = torch.prod(x, d, keepdim=keepdim)
    return x
  if op in ("var", "std"): return getattr(torch, op)(x, dim=dims, correction=correction, keepdim=keepdim)
  if op == "logsumexp": return torch.logsumexp(x, dim=dims, keepdim=keepdim)
  raise ValueError(op)

def w_reduce(op, x, axis=None, keepdim=False, correction=None):
  kw = {} if correction is None else {"correction": correction}
  return getattr(x, op)(axis=axis, keepdim=keepdim, **kw)

OPS = ["sum", "prod", "max", "min", "mean", "var", "std"]
AXES = [None, 1, -1, (-1, 0)]

@pytest.mark.parametrize("keepdim", [False, True], ids=["nokeep", "keep"])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.browser(op=["sum", "max", "std"], keepdim=[False])
def test_reduce(device, op, keepdim):
  low, high = (-1.5, 1.5) if op == "prod" else (-2.0, 2.0)
  for axis in AXES:
    with case(f"{op} axis={axis} keepdim={keepdim}"):
      check_op([(2, 3, 4)], lambda x: t_reduce(op, x, axis, keepdim), lambda x: w_reduce(op, x, axis, keepdim),
               device=device, low=low, high=high, grad_atol=1e-4, grad_rtol=1e-3)

@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("op", ["var", "std"])
def test_var_std_correction(device, op, correction):
  for axis, keepdim in ((None, False), (None, True), (0, False), (1, True), (-1, False), ((0, 1), True)):
    with case(f"{op} correction={correction} axis={axis} keepdim={keepdim}"):
      check_op([(4, 5)], lambda x: t_reduce(op, x, axis, keepdim, correction),
               lambda x: w_reduce(op, x, axis, keepdim, correction), device=device, grad_atol=1e-4, grad_rtol=1e-3)

@pytest.mark.parametrize("op", ["argmax", "argmin"])
@pytest.mark.browser(op=["argmax"])
def test_argmax_argmin(device, op):
  tf = getattr(torch, op)
  out = check_op([(3, 4, 5)], lambda x: tf(x), lambda x: getattr(x, op)(), device=device)
  assert out.dtype == dtypes.int32, f"{op} must return int32, got {out.dtype}"
  for axis in (0, 1, -1, 2):
    for keepdim in (False, True):
      with case(f"{op} axis={axis} keepdim={keepdim}"):
        out = check_op([(3, 4, 5)], lambda x: tf(x, dim=axis, keepdim=keepdim),
                       lambda x: getattr(x, op)(axis=axis, keepdim=keepdim), device=device)
        assert out.dtype == dtypes.int32
  vi = rand_np((4, 6), -50, 50, np.int32, seed=3)
  with case(f"{op} on int32"):
    check_op(None, lambda x: tf(x, dim=1), lambda x: getattr(x, op)(axis=1), device=device, vals=[vi])
  with case(f"{op} non-contiguous"):
    check_op([(4, 6)], lambda x: tf(x.T, dim=1), lambda x: getattr(x.T, op)(axis=1), device=device)

def test_argmax_ties_first_index(device):
  # torch documents that the index of the first maximal/minimal value is returned
  v = np.array([[1, 3, 3, 0], [2, 2, 1, 2], [0, 0, 0, 0], [5, -1, 5, -1]], np.float32)
  for op in ("argmax", "argmin"):
    tf = getattr(torch, op)
    for axis in (None, 0, 1):
      with case(f"{op} axis={axis}"):
        check_op(None, lambda x: tf(x, dim=axis), lambda x: getattr(x, op)(axis=axis), device=device, vals=[v])
        check_op(None, lambda x: tf(x, dim=axis), lambda x: getattr(x, op)(axis=axis), device=device, vals=[v.astype(np.int32)])

ANY_ALL_INPUTS = {
  "bool": np.array([[True, True, True, True], [False, False, False, False], [True, False, True, False]]),
  "int32": np.array([[1, -2, 3, 4], [0, 0, 0, 0], [0, 5, 0, 0]], np.int32),
  "float32": np.array([[0.5, -1.0, 2.0, 1e-3], [0.0, -0.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0]], np.float32),
}

@pytest.mark.parametrize("dname", list(ANY_ALL_INPUTS))
@pytest.mark.parametrize("op", ["any", "all"])
@pytest.mark.browser(op=["all"], dname=["float32"])
def test_any_all(device, op, dname):
  v = ANY_ALL_INPUTS[dname]
  tf = getattr(torch, op)
  out = check_op(None, lambda x: tf(x), lambda x: getattr(x, op)(), device=device, vals=[v], grad=False)
  assert out.dtype == dtypes.bool
  for axis in (0, 1, -1, (0, 1)):
    for keepdim in (False, True):
      with case(f"{op} axis={axis} keepdim={keepdim}"):
        out = check_op(None, lambda x: tf(x, dim=axis, keepdim=keepdim), lambda x: getattr(x, op)(axis=axis, keepdim=keepdim),
                       device=device, vals=[v], grad=False)
        assert out.dtype == dtypes.bool
  with case(f"{op} on transposed view"):
    check_op(None, lambda x: tf(x.T, dim=1), lambda x: getattr(x.T, op)(axis=1), device=device, vals=[v], grad=False)

CUMSUM_CASES = [
  ("axis0", (3, 4), 0, np.float32),
  ("axis1", (3, 4), 1, np.float32),
  ("axis-1_3d", (2, 3, 4), -1, np.float32),
  ("1d", (7,), 0, np.float32),
  ("size1", (1, 5), 0, np.float32),
  ("long", (2, 600), 1, np.float32),
  ("int32", (3, 5), 1, np.int32),
]

@pytest.mark.parametrize("name,shape,axis,dt", CUMSUM_CASES, ids=[c[0] for c in CUMSUM_CASES])
@pytest.mark.browser(name=["long"])
def test_cumsum(device, name, shape, axis, dt):
  low, high = (-5, 5) if dt == np.int32 else (-2, 2)
  check_op([shape], lambda x: torch.cumsum(x, dim=axis), lambda x: x.cumsum(axis=axis), device=device,
           dtype=dt, low=low, high=high, atol=1e-4, rtol=1e-4, grad_atol=1e-3)

def test_cumsum_noncontiguous(device):
  check_op([(4, 3)], lambda x: torch.cumsum(x.T, dim=1), lambda x: x.T.cumsum(axis=1), device=device)
  check_op([(6, 4)], lambda x: torch.cumsum(x.flip(0)[::2], dim=0), lambda x: x.flip(0)[::2].cumsum(axis=0), device=device)

@pytest.mark.parametrize("axis", [-1, 0, 1])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.browser(axis=[-1])
def test_softmax_family(device, op, axis):
  check_op([(2, 3, 4)], lambda x: getattr(torch, op)(x, dim=axis), lambda x: getattr(x, op)(axis=axis), device=device,
           grad_atol=1e-4, grad_rtol=1e-3)

def test_softmax_default_axis_and_stability(device):
  check_op([(3, 5)], lambda x: torch.softmax(x, dim=-1), lambda x: x.softmax(), device=device)
  check_op([(3, 5)], lambda x: torch.log_softmax(x, dim=-1), lambda x: x.log_softmax(), device=device)
  # large logits: naive exp would overflow
  for op in ("softmax", "log_softmax"):
    with case(f"{op} large logits"):
      check_op([(3, 5)], lambda x: getattr(torch, op)(x, dim=-1), lambda x: getattr(x, op)(), device=device,
               low=-200, high=200, atol=1e-4, rtol=1e-4, grad_atol=1e-3, grad_rtol=1e-3)
  with case("logsumexp large logits"):
    check_op([(3, 5)], lambda x: torch.logsumexp(x, dim=1), lambda x: x.logsumexp(axis=1), device=device,
             low=-200, high=200, atol=1e-3, rtol=1e-5, grad_atol=1e-3, grad_rtol=1e-3)
  check_op([(4,)], lambda x: torch.softmax(x, dim=0), lambda x: x.softmax(), device=device, vals=[np.array([1000., 1000., -1000., 999.], np.float32)])

@pytest.mark.parametrize("axis", [None, 1, -1, (0, 2)], ids=["None", "1", "-1", "0_2"])
@pytest.mark.browser(axis=[1])
def test_logsumexp(device, axis):
  for keepdim in (False, True):
    with case(f"logsumexp axis={axis} keepdim={keepdim}"):
      check_op([(2, 3, 4)], lambda x: t_reduce("logsumexp", x, axis, keepdim), lambda x: x.logsumexp(axis=axis, keepdim=keepdim),
               device=device, low=-3, high=3)
  if axis is None:
    check_op([(2, 3, 4)], lambda x: t_reduce("logsumexp", x), lambda x: x.logsumexp(), device=device)

def test_zero_dim_inputs(device):
  for op in ("sum", "prod", "max", "min", "mean"):
    with case(op):
      check_op([()], lambda x: t_reduce(op, x), lambda x: getattr(x, op)(), device=device)
  with case("var correction=0"):
    check_op([()], lambda x: torch.var(x, correction=0), lambda x: x.var(correction=0), device=device)
  with case("argmax"):
    check_op([()], lambda x: torch.argmax(x), lambda x: x.argmax(), device=device)
  with case("logsumexp"):
    check_op([()], lambda x: torch.logsumexp(x, dim=()), lambda x: x.logsumexp(), device=device)
  with case("any/all"):
    check_op(None, torch.any, lambda x: x.any(), device=device, vals=[np.array(True)])
    check_op(None, torch.all, lambda x: x.all(), device=device, vals=[np.array(False)])

def test_size1_dims(device):
  for op in ("sum", "max", "min", "mean", "prod"):
    for keepdim in (False, True):
      with case(f"{op} over size-1 axis keepdim={keepdim}"):
        check_op([(3, 1, 4)], lambda x: t_reduce(op, x, 1, keepdim), lambda x: w_reduce(op, x, 1, keepdim), device=device)
      with case(f"{op} over (1,1) keepdim={keepdim}"):
        check_op([(1, 1)], lambda x: t_reduce(op, x, None, keepdim), lambda x: w_reduce(op, x, None, keepdim), device=device)
    with case(f"{op} of shape (1,)"):
      check_op([(1,)], lambda x: t_reduce(op, x), lambda x: getattr(x, op)(), device=device)
  with case("var over size-1 axis, correction 0"):
    check_op([(3, 1, 4)], lambda x: torch.var(x, dim=1, correction=0), lambda x: x.var(axis=1, correction=0), device=device)
  with case("softmax over size-1 axis"):
    check_op([(3, 1)], lambda x: torch.softmax(x, dim=1), lambda x: x.softmax(axis=1), device=device)

def test_empty_reductions(device):
  # torch defines these: sum of empty = 0, prod of empty = 1, reductions over a non-empty axis of an empty tensor are empty
  shape = (0, 3)
  for op in ("sum", "prod"):
    for axis in (None, 0, 1):
      for keepdim in (False, True):
        with case(f"{op} of empty axis={axis} keepdim={keepdim}"):
          check_op([shape], lambda x: t_reduce(op, x, axis, keepdim), lambda x: w_reduce(op, x, axis, keepdim), device=device)
  for op in ("max", "min", "mean"):
    with case(f"{op} over the non-empty axis of an empty tensor"):
      check_op([shape], lambda x: t_reduce(op, x, 1), lambda x: w_reduce(op, x, 1), device=device)
  with case("int sum of empty"):
    check_op(None, lambda x: x.sum(), device=device, vals=[np.zeros((0, 4), np.int32)])
  with case("any/all of empty"):
    e = np.zeros((0, 3), np.bool_)
    check_op(None, torch.any, lambda x: x.any(), device=device, vals=[e])
    check_op(None, torch.all, lambda x: x.all(), device=device, vals=[e])
    check_op(None, lambda x: torch.all(x, dim=0), lambda x: x.all(axis=0), device=device, vals=[e])
    check_op(None, lambda x: torch.any(x, dim=0), lambda x: x.any(axis=0), device=device, vals=[e])
  with case("cumsum of empty"):
    check_op([shape], lambda x: torch.cumsum(x, dim=1), lambda x: x.cumsum(axis=1), device=device)

@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
@pytest.mark.browser(op=["max"])
def test_int_reductions(device, op):
  low, high = (-3, 4) if op == "prod" else (-100, 100)
  v = rand_np((3, 4), low, high, np.int32, seed=1)
  for axis in (None, 0, 1, (0, 1)):
    with case(f"{op} axis={axis}"):
      out = check_op(None, lambda x: t_reduce(op, x, axis), lambda x: w_reduce(op, x, axis), device=device, vals=[v])
      assert out.dtype in (dtypes.int32, dtypes.int64), f"int {op} should stay integer, got {out.dtype}"

def test_unsigned_32_bit_sums_and_products_wrap_in_their_own_dtype(device):
  # (uint32's product was taken in int32: the same bits, read as a negative number)
  v = np.array([3_000_000_000, 3, 2], np.uint32)
  t = Tensor(v, device=device)
  for name, got, want in (("sum", t.sum(), np.sum(v, dtype=np.uint32)), ("prod", t.prod(), np.prod(v, dtype=np.uint32)),
                          ("cumsum", t.cumsum(0), np.cumsum(v, dtype=np.uint32)), ("cumprod", t.cumprod(0), np.cumprod(v, dtype=np.uint32))):
    assert got.dtype == dtypes.uint32, f"{name} of uint32 gave {got.dtype}"
    np.testing.assert_array_equal(got.numpy(), want, err_msg=name)

def test_bool_sum(device):
  v = rand_np((5, 7), dtype=np.bool_, seed=2)
  out = check_op(None, lambda x: x.sum(), device=device, vals=[v])
  assert out.dtype in (dtypes.int32, dtypes.int64)
  check_op(None, lambda x: x.sum(1), lambda x: x.sum(axis=1), device=device, vals=[v])

def test_large_reductions(device):
  check_op([(100000,)], lambda x: x.sum(), device=device, low=0, high=1, rtol=1e-4, atol=0)
  check_op([(100000,)], lambda x: x.mean(), device=device, low=0, high=1, rtol=1e-4, atol=0)
  check_op([(100000,)], lambda x: torch.amax(x), lambda x: x.max(), device=device, low=-1, high=1)
  check_op([(300, 400)], lambda x: x.sum(0), lambda x: x.sum(axis=0), device=device, low=0, high=1, rtol=1e-4)
  check_op([(300, 400)], lambda x: x.sum(1), lambda x: x.sum(axis=1), device=device, low=0, high=1, rtol=1e-4)
  check_op([(300, 400)], lambda x: torch.var(x, dim=1), lambda x: x.var(axis=1), device=device, rtol=1e-3, atol=1e-4)
  vi = rand_np((100000,), 0, 100, np.int32, seed=7)
  check_op(None, lambda x: x.sum(), device=device, vals=[vi], rtol=0, atol=0)

NONCONTIG = [
  ("T_sum0", (3, 4), lambda x: x.T.sum(0), lambda x: x.T.sum(0)),
  ("colstep_max1", (3, 8), lambda x: torch.amax(x[:, ::2], dim=1), lambda x: x[:, ::2].max(1)),
  ("permute_mean", (2, 3, 4), lambda x: x.permute(2, 0, 1).mean((1, 2)), lambda x: x.permute(2, 0, 1).mean((1, 2))),
  ("flip_min", (4, 5), lambda x: torch.amin(x.flip(1)[1:], dim=0), lambda x: x.flip(1)[1:].min(0)),
  ("expand_sum", (3, 1), lambda x: x.expand(3, 4).sum(0), lambda x: x.expand(3, 4).sum(0)),
  ("T_var", (4, 6), lambda x: torch.var(x.T, dim=0), lambda x: x.T.var(0)),
  ("step_prod", (6, 3), lambda x: torch.prod(x[::3], dim=0), lambda x: x[::3].prod(0)),
]

@pytest.mark.parametrize("name,shape,tfn,wfn", NONCONTIG, ids=[n[0] for n in NONCONTIG])
@pytest.mark.browser(name=["flip_min"])
def test_noncontiguous_reductions(device, name, shape, tfn, wfn):
  check_op([shape], tfn, wfn, device=device, grad_atol=1e-4)

FUSED = [
  ("sum_affine", lambda x: x.sum(1) * 2 + 1, lambda x: x.sum(1) * 2 + 1),
  ("center", lambda x: x - x.mean(1, keepdim=True), lambda x: x - x.mean(1, keepdim=True)),
  ("normalize", lambda x: (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True),
                lambda x: (x - x.mean(-1, keepdim=True)) / x.std(-1, keepdim=True)),
  ("manual_softmax", lambda x: (x - torch.amax(x, 1, keepdim=True)).exp() / (x - torch.amax(x, 1, keepdim=True)).exp().sum(1, keepdim=True),
                     lambda x: (x - x.max(1, keepdim=True)).exp() / (x - x.max(1, keepdim=True)).exp().sum(1, keepdim=True)),
  ("max_plus_min", lambda x: torch.amax(x, 0) + torch.amin(x, 0), lambda x: x.max(0) + x.min(0)),
  ("double_reduce", lambda x: torch.amax(x.sum(0), 0), lambda x: x.sum(0).max(0)),
  ("sq_sum_sqrt", lambda x: (x * x).sum().sqrt(), lambda x: (x * x).sum().sqrt()),
]

@pytest.mark.parametrize("name,tfn,wfn", FUSED, ids=[f[0] for f in FUSED])
@pytest.mark.browser(name=["normalize", "manual_softmax"])
def test_reduce_then_elementwise(device, name, tfn, wfn):
  check_op([(3, 5)], tfn, wfn, device=device, grad_atol=1e-4, grad_rtol=1e-3)

@pytest.mark.parametrize("shape,axis,keepdim", [((1 << 17,), None, False), ((3, 1 << 16), 1, True), ((64, 4, 33, 32), (0, 2, 3), False),
                                                 ((2, 40000, 3), (0, 1), False), ((65537,), 0, False)])
def test_big_sums_split_in_two_kernels(shape, axis, keepdim, device):
  """Sums of >= 2^16 elements into few outputs run as two kernels (schedule.split_sum): partial sums across cores and
  vector lanes, then their sum. Values and gradients against torch (float64 reference), ints exactly; 65537 (prime) too."""
  from tinyweb import GlobalCounters
  if device == "PYTHON": pytest.skip("PYTHON: sums of 2^16+ elements exceed the interpreter's test budget")
  x = rand_np(shape, -1.0, 1.0, np.float32, seed=3)
  t = Tensor(x, device=device, requires_grad=True)
  GlobalCounters.reset()
  out = t.sum(axis, keepdim=keepdim).realize()
  assert GlobalCounters.kernel_count == 2
  np.testing.assert_allclose(out.numpy(), torch.tensor(x, dtype=torch.float64).sum(_dims(axis, len(shape)), keepdim=keepdim).numpy(),
                             rtol=1e-5, atol=1e-4)
  out.mean().backward()
  np.testing.assert_allclose(t.grad.numpy(), np.full(shape, 1 / out.numel(), np.float32), rtol=1e-6)
  xi = (x * 100).astype(np.int32)
  np.testing.assert_array_equal(Tensor(xi, device=device).sum(axis, keepdim=keepdim).numpy(),
                                xi.astype(np.int64).sum(_dims(axis, len(shape)), keepdims=keepdim).astype(np.int32))
