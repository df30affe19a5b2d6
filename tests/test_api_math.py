"""tinygrad 0.14's Tensor math API in tinyweb (issue 14): inverse trigonometry, erf, copysign, logaddexp, isclose,
softmin, normalize, cummax/cummin with indices, sort/argsort/topk, max_pool2d's indices and max_unpool2d, and the keyword
forms tinygrad scripts use (clamp(min_=), gelu(approximate=), dtype=, enable_gqa=, one-hot cross_entropy targets).
Values and gradients against torch; signatures against the installed tinygrad."""
import inspect, math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Tensor, dtypes
from helpers import check_op, rand_np

nan, inf = math.nan, math.inf
TOL = dict(atol=1e-6, rtol=1e-5)

def same(got: Tensor, exp: torch.Tensor, what=""):
  """Equal values (NaN where NaN; the sign of zeros too), shapes equal; integer dtypes compare by kind."""
  g, e = got.numpy(), exp.detach().numpy()
  assert g.shape == e.shape, f"{what}: shape {g.shape} != torch's {e.shape}"
  np.testing.assert_array_equal(g, e, err_msg=what)
  if g.dtype.kind == "f": assert (np.signbit(g) == np.signbit(e))[~np.isnan(e)].all(), f"{what}: the sign of a zero differs: {g} vs {e}"

def grads_like_torch(device, tw_fn, pt_fn, x, what="", tol=1e-6):
  """The gradient of sum(out * cotangent) for one float32 input, against torch's."""
  xt, xw = torch.tensor(x, requires_grad=True), Tensor(x, device=device, requires_grad=True)
  ot, ow = pt_fn(xt), tw_fn(xw)
  cot = rand_np(tuple(ot.shape), -1, 1, seed=7)
  (ot * torch.tensor(cot)).sum().backward(); (ow * Tensor(cot, device=device)).sum().backward()
  np.testing.assert_allclose(xw.grad.numpy(), xt.grad.numpy(), atol=tol, rtol=tol * 10, err_msg=f"{what} gradient")

# ------------------------------------------------------------------------------------------- elementwise functions

SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1e-30, -1e-7, 1 - 2**-24, 1.5, -2.0, 1e30, -3e38, inf, -inf, nan], np.float32)

@pytest.mark.parametrize("name", ["asin", "acos", "atan", "erf"])
def test_inverse_trig_and_erf_like_torch(device, name):
  fn = lambda x: getattr(x, name)()  # noqa: E731
  # a dense sweep (values within a few float32 ulps), gradients away from asin's and acos's poles at +-1
  lo, hi = (-1.0, 1.0) if name in ("asin", "acos") else (-6.0, 6.0)
  check_op(None, fn, device=device, vals=[np.linspace(lo, hi, 801, dtype=np.float32)], grad=False, **TOL)
  check_op([(4, 25)], fn, device=device, low=lo * 0.95, high=hi * 0.95, grad_atol=1e-5, grad_rtol=1e-4, **TOL)
  # special values: NaN outside the domain and for NaN, signed zeros kept, the limits at +-inf
  got, exp = getattr(Tensor(SPECIAL, device=device), name)().numpy(), getattr(torch, name)(torch.tensor(SPECIAL)).numpy()
  np.testing.assert_allclose(got, exp, **TOL)
  assert (np.signbit(got) == np.signbit(exp))[~np.isnan(exp)].all(), f"{name}: signs {got} vs {exp}"
  # small arguments keep their relative precision (no 1 - (1 - x) loss)
  tiny = np.array([1e-6, -3e-5, 2e-20], np.float32)
  if name != "acos": np.testing.assert_allclose(getattr(Tensor(tiny, device=device), name)().numpy(), getattr(torch, name)(torch.tensor(tiny)).numpy(), rtol=1e-6)
  # ints are computed as floats, like torch
  assert getattr(Tensor([0, 1], device=device), name)().dtype == dtypes.float32

def test_acos_near_one_keeps_its_digits(device):
  x = np.array([1 - 2**-24, 1 - 2**-20, -1 + 2**-23, 0.9999], np.float32)
  np.testing.assert_allclose(Tensor(x, device=device).acos().numpy(), torch.tensor(x).acos().numpy(), rtol=1e-5)

@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_approximate(device, approximate):
  check_op([(3, 40)], lambda x: F.gelu(x, approximate=approximate), lambda x: x.gelu(approximate=approximate),
           device=device, low=-6, high=6, **TOL)
  # the infinities against torch's scalar kernel (its vectorized one gives NaN for both, depending on the position)
  special = np.array([-inf, -20.0, -0.0, 0.0, 20.0, inf], np.float32)
  exp = torch.cat([F.gelu(torch.tensor([v]), approximate=approximate) for v in special])
  same(Tensor(special, device=device).gelu(approximate), exp, f"gelu({approximate}) special values")

def test_gelu_default_is_tinygrads_tanh_and_bad_approximate_raises(device):
  x = Tensor([-1.0, 0.5, 2.0], device=device)
  np.testing.assert_array_equal(x.gelu().numpy(), x.gelu("tanh").numpy())
  with pytest.raises(ValueError, match="gelu: approximate must be 'tanh' or 'none', got 'erf'"): x.gelu(approximate="erf")

def test_copysign(device):
  a = np.array([1.0, -2.0, 0.0, -0.0, 3.0, inf, nan, 5.0], np.float32)
  b = np.array([-1.0, 2.0, -0.0, 0.0, -inf, -3.0, -1.0, nan], np.float32)
  out = Tensor(a, device=device).copysign(Tensor(b, device=device))
  exp = torch.copysign(torch.tensor(a), torch.tensor(b))
  np.testing.assert_array_equal(out.numpy(), exp.numpy())
  assert (np.signbit(out.numpy()) == np.signbit(exp.numpy()))[~np.isnan(a)].all()
  # a scalar sign, broadcasting, and ints give floats (torch's rule)
  same(Tensor([1, -2, 0], device=device).copysign(-1), torch.copysign(torch.tensor([1, -2, 0]), -1))
  same(Tensor([1, -2], device=device).copysign(Tensor([[1], [-1]], device=device)), torch.copysign(torch.tensor([1, -2]), torch.tensor([[1], [-1]])))
  # gradients: to self g * out / self (0 where self is 0: torch's), to other an explicit 0
  check_op(None, torch.copysign, lambda x, y: x.copysign(y), device=device, vals=[np.array([1.0, -2.0, 0.0, 3.0], np.float32),
           np.array([-1.0, 2.0, 5.0, -0.5], np.float32)])
  with pytest.raises(ValueError, match="copysign: shapes"): Tensor([1.0, 2.0], device=device).copysign(Tensor([1.0, 2.0, 3.0], device=device))

def test_logaddexp(device):
  check_op([(3, 7), (3, 7)], torch.logaddexp, lambda x, y: x.logaddexp(y), device=device, low=-30, high=30, **TOL)
  check_op([(2, 1, 5), (4, 1)], torch.logaddexp, lambda x, y: x.logaddexp(y), device=device, **TOL)
  # no overflow (exp(100) is inf in float32), the infinities, NaN
  a = np.array([100.0, -100.0, inf, -inf, -inf, inf, inf, nan, 1.0], np.float32)
  b = np.array([100.0, -101.0, inf, -inf, 3.0, -inf, 2.0, 1.0, -inf], np.float32)
  same(Tensor(a, device=device).logaddexp(Tensor(b, device=device)), torch.logaddexp(torch.tensor(a), torch.tensor(b)))
  np.testing.assert_allclose(Tensor([1, 2], device=device).logaddexp(0).numpy(), np.logaddexp([1, 2], 0), rtol=1e-6)

def test_isclose_and_allclose(device):
  a = np.array([1.0, 1.0 + 1e-6, 1.0, 0.0, 1e-9, inf, inf, -inf, nan, nan, 1.0], np.float32)
  b = np.array([1.0, 1.0, 1.001, 1e-9, 0.0, inf, -inf, -inf, nan, 1.0, inf], np.float32)
  ta, tb, wa, wb = torch.tensor(a), torch.tensor(b), Tensor(a, device=device), Tensor(b, device=device)
  for kw in ({}, {"equal_nan": True}, {"rtol": 1e-2}, {"atol": 1e-3, "rtol": 0.0}):
    same(wa.isclose(wb, **kw), torch.isclose(ta, tb, **kw), f"isclose {kw}")
    out = wa.allclose(wb, **kw)
    assert isinstance(out, Tensor) and out.shape == () and out.dtype == dtypes.bool   # (tinygrad's: a tensor, not a bool)
    assert bool(out) == torch.allclose(ta, tb, **kw)
  assert Tensor([1.0, 2.0], device=device).allclose(Tensor([1.0, 2.0 + 1e-7], device=device))
  same(Tensor([1, 2, 3], device=device).isclose(Tensor([1, 3, 3], device=device)), torch.isclose(torch.tensor([1, 2, 3]), torch.tensor([1, 3, 3])))
  same(Tensor([[1.0], [2.0]], device=device).isclose(2.0), torch.isclose(torch.tensor([[1.0], [2.0]]), torch.tensor(2.0)))
  with pytest.raises(ValueError, match="isclose: rtol and atol must be non-negative"): wa.isclose(wb, rtol=-1)
  with pytest.raises(ValueError, match="isclose: shapes"): wa.allclose(Tensor([1.0, 2.0], device=device))

def test_dtype_helpers(device):
  x = Tensor([1.7, -2.5, 300.0], device=device)
  assert x.is_floating_point() is True and Tensor([1], device=device).is_floating_point() is False
  assert Tensor([True], device=device).is_floating_point() is False
  s = x.short()
  assert s.dtype == dtypes.int16 and s.tolist() == torch.tensor([1.7, -2.5, 300.0]).short().tolist()
  c = x.const_like(3)
  assert c.shape == x.shape and c.dtype == dtypes.float32 and c.device == x.device and c.tolist() == [3.0] * 3
  c = Tensor.ones(2, 3, device=device).const_like(True, dtypes.bool)
  assert c.dtype == dtypes.bool and c.tolist() == [[True] * 3] * 2

def test_softmin(device):
  for axis in (-1, 0, 1):
    check_op([(3, 4, 5)], lambda x: F.softmin(x, dim=axis), lambda x: x.softmin(axis), device=device, **TOL)
  check_op([(2, 6)], lambda x: F.softmin(x, dim=-1), lambda x: x.softmin(), device=device, **TOL)
  out = Tensor([[1, 2, 3]], device=device).softmin(dtype=dtypes.float32)
  np.testing.assert_allclose(out.numpy(), F.softmin(torch.tensor([[1.0, 2.0, 3.0]]), -1).numpy(), rtol=1e-6)
  with pytest.raises(IndexError): Tensor([1.0, 2.0], device=device).softmin(1)

@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, 0, inf, -inf])
def test_normalize(device, p):
  x = rand_np((3, 5), seed=1)
  x[1] = 0               # a zero row: divided by eps, gradient torch's (0 for the norm, not inf * 0)
  x[2, :2] = 0           # zeros in a row
  x[0, 1] = x[0, 3] = -5.0   # tied largest |x| (the inf norm's gradient splits between them)
  for dim in (1, 0, -1):
    check_op(None, lambda t: F.normalize(t, p=p, dim=dim), lambda t: t.normalize(p, dim), device=device, vals=[x], grad_atol=5e-5, **TOL)
  check_op(None, lambda t: F.normalize(t, p=p, dim=1, eps=10.0), lambda t: t.normalize(p=p, dim=1, eps=10.0), device=device, vals=[x], **TOL)

def test_normalize_defaults_and_bad_dim(device):
  check_op([(2, 3, 4)], F.normalize, lambda t: t.normalize(), device=device, **TOL)
  with pytest.raises(IndexError, match="out of range"): Tensor([1.0, 2.0], device=device).normalize()   # (dim 1 of a 1-D tensor)

def test_clamp_clip_keywords(device):
  x = Tensor([-3.0, -0.5, 0.5, 3.0], device=device)
  exp = [-1.0, -0.5, 0.5, 1.0]
  for fn in ("clamp", "clip"):
    f = getattr(x, fn)
    assert f(min_=-1, max_=1).tolist() == exp and f(-1, 1).tolist() == exp and f(min=-1, max=1).tolist() == exp   # tinygrad's and torch's names
    assert f(min_=0).tolist() == [0.0, 0.0, 0.5, 3.0] and f(max=0).tolist() == [-3.0, -0.5, 0.0, 0.0]
    with pytest.raises(TypeError, match="clamp: give the bounds as min_/max_ or as min/max, not both"): f(min_=0, max=1)
    with pytest.raises(ValueError, match="at least one of min and max"): f()

# ---------------------------------------------------------------------------------------------------- scans

ROWS = np.array([[1.0, 1.0, 0.0, 2.0, 2.0, -1.0, 3.0], [nan, 1.0, nan, 5.0, -inf, inf, 0.0], [-inf, -inf, -0.0, 0.0, 0.0, -0.0, 1.0]], np.float32)

@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cummax_cummin_values_and_indices(device, op):
  for axis in (1, 0, -1):
    tv, ti = getattr(torch, op)(torch.tensor(ROWS), axis)
    wv, wi = getattr(Tensor(ROWS, device=device), op)(axis)   # (values, indices), like tinygrad and torch
    np.testing.assert_array_equal(wv.numpy(), tv.numpy())
    np.testing.assert_array_equal(wi.numpy(), ti.numpy(), err_msg=f"{op} indices along {axis} (the last position holding the extreme)")
    assert wi.dtype == dtypes.int32
  ints = np.array([[3, 1, 3, 2, 5, 5], [0, -1, -1, 4, 4, 2]], np.int32)
  tv, ti = getattr(torch, op)(torch.tensor(ints), 1)
  wv, wi = getattr(Tensor(ints, device=device), op)(1)
  assert wv.tolist() == tv.tolist() and wi.tolist() == ti.tolist()
  # the gradient: out[i]'s all to x[indices[i]] (with ties, torch's)
  for row in ROWS[:1], rand_np((3, 6), seed=3):
    grads_like_torch(device, lambda x: getattr(x, op)(1)[0], lambda x: getattr(torch, op)(x, 1).values, row, op)

@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cummax_cummin_edge_shapes(device, op):
  v, i = getattr(Tensor(2.5, device=device), op)(0)
  assert v.item() == 2.5 and i.shape == () and i.item() == 0
  v, i = getattr(Tensor.zeros(2, 0, device=device), op)(1)
  assert v.shape == i.shape == (2, 0)
  v, i = getattr(Tensor([[4.0, 3.0]], device=device), op)(0)
  assert v.tolist() == [[4.0, 3.0]] and i.tolist() == [[0, 0]]
  with pytest.raises(IndexError, match=f"{op}: axis 2 is out of range"): getattr(Tensor([[1.0]], device=device), op)(2)

# ------------------------------------------------------------------------------------------------ sort, topk

SORT_ROWS = np.array([[3.0, nan, -0.0, 0.0, 1.0, nan, -inf, 3.0, inf, 1.0, 0.0],
                      [2.0, 2.0, 2.0, -1.0, -1.0, 7.0, 2.0, -0.0, nan, -0.0, 5.0]], np.float32)

def check_sort(device, x, dim=-1, descending=False):
  tv, ti = torch.sort(torch.tensor(x), dim=dim, descending=descending, stable=True)
  wv, wi = Tensor(x, device=device).sort(dim=dim, descending=descending)
  same(wv, tv, f"sort values dim={dim} descending={descending}")
  same(wi, ti, f"sort indices dim={dim} descending={descending} (stable: equal values in their order)")
  same(Tensor(x, device=device).argsort(dim, descending), ti, "argsort")
  assert wi.dtype == dtypes.int32

@pytest.fixture(params=["counting", "bitonic"])
def sort_method(request, monkeypatch):
  """Both of sort's methods: comparison counting (dims up to _COUNT_SORT_MAX) and the bitonic network (longer ones),
  the latter forced on short dims by lowering the threshold."""
  if request.param == "bitonic": monkeypatch.setattr(Tensor, "_COUNT_SORT_MAX", 2)
  return request.param

def test_sort_like_torch_stable(device, sort_method):
  for descending in (False, True):
    check_sort(device, SORT_ROWS, -1, descending)   # ties, NaN (last, or first descending), -0.0 beside 0.0, infinities
    check_sort(device, SORT_ROWS.T.copy(), 0, descending)
  check_sort(device, rand_np((2, 3, 5), seed=4), 1)
  check_sort(device, np.random.default_rng(5).integers(-3, 3, (3, 9)).astype(np.int32), -1, True)   # ints, many ties
  check_sort(device, np.array([[True, False, True, False, False]]), -1)

def test_sort_gradient(device, sort_method):
  x = rand_np((3, 6), seed=6)
  x[0, 2] = x[0, 4]   # a tie: the gradient of each sorted value goes back to the element it came from
  for descending in (False, True):
    grads_like_torch(device, lambda t: t.sort(1, descending)[0], lambda t: torch.sort(t, dim=1, descending=descending, stable=True).values, x, "sort")
  grads_like_torch(device, lambda t: t.sort(0)[0], lambda t: torch.sort(t, dim=0, stable=True).values, x, "sort dim 0")
  grads_like_torch(device, lambda t: t.topk(2, 1)[0], lambda t: torch.topk(t, 2, 1).values, x, "topk")

def test_sort_edge_shapes(device):
  v, i = Tensor(2.5, device=device).sort()
  assert v.item() == 2.5 and i.shape == () and i.item() == 0
  v, i = Tensor([[4.0], [3.0]], device=device).sort()   # a dim of size 1
  assert v.tolist() == [[4.0], [3.0]] and i.tolist() == [[0], [0]]
  v, i = Tensor.zeros(3, 0, device=device).sort()
  assert v.shape == i.shape == (3, 0)
  check_sort(device, np.array([2.0, 1.0], np.float32))
  with pytest.raises(IndexError, match="sort: axis 2 is out of range"): Tensor([[1.0]], device=device).sort(2)

def test_topk(device):
  x = SORT_ROWS
  for k, dim, largest in ((3, -1, True), (4, 1, False), (1, 0, True), (11, -1, False), (0, -1, True), (2, 0, False)):
    tv, ti = torch.topk(torch.tensor(x), k, dim, largest)
    wv, wi = Tensor(x, device=device).topk(k, dim, largest)
    np.testing.assert_array_equal(wv.numpy(), tv.numpy(), err_msg=f"topk values k={k} dim={dim} largest={largest}")
    # torch's choice among equal values is its kernel's; tinygrad's (and this) keeps them in order: the stable sort's
    _, si = torch.sort(torch.tensor(x), dim=dim, descending=largest, stable=True)
    np.testing.assert_array_equal(wi.numpy(), si.narrow(dim, 0, k).numpy())
  # keyword forms: tinygrad's sorted_ (sorted_=False may return any order: this returns the sorted one)
  wv, wi = Tensor([1.0, 5.0, 3.0], device=device).topk(k=2, dim=0, largest=True, sorted_=False)
  assert wv.tolist() == [5.0, 3.0] and wi.tolist() == [1, 2]
  v, i = Tensor(7.0, device=device).topk(1)
  assert v.item() == 7.0 and i.item() == 0

def test_topk_bad_k(device):
  x = Tensor([[1.0, 2.0, 3.0]], device=device)
  with pytest.raises(ValueError, match=r"topk: k=4 is out of range for dimension 1 of size 3 \(shape \(1, 3\)\); valid: 0..3"): x.topk(4)
  with pytest.raises(ValueError, match="topk: k=-1 is out of range"): x.topk(-1)
  with pytest.raises(TypeError, match="topk: k must be an int"): x.topk(1.5)
  with pytest.raises(IndexError, match="topk: axis 2 is out of range"): x.topk(1, dim=2)

def test_sort_longer_than_the_counting_limit(device):
  """A dim past _COUNT_SORT_MAX takes the bitonic network at its real size (padded to a power of two)."""
  if device != "CPU": pytest.skip("the network's 182 kernels compile slowly on the other devices; test_sort_like_torch_stable[bitonic] runs it on each")
  x = np.random.default_rng(8).integers(0, 50, (1, Tensor._COUNT_SORT_MAX + 4)).astype(np.float32)
  x[0, 17] = nan
  check_sort(device, x, -1, True)

# ------------------------------------------------------------------------------------------------------ pooling

POOLS = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(2, 3), stride=1), dict(kernel_size=2, ceil_mode=True)]

@pytest.mark.parametrize("kw", POOLS, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_max_pool2d_return_indices_and_max_unpool2d(device, kw):
  x = rand_np((2, 2, 6, 7), seed=9)
  x[0, 0, 0, :2] = x[0, 0, 1, :2] = 1.5   # tied maxima (the first one's index)
  x[1, 1, 2, 2] = nan                      # a NaN is the maximum
  vt, it = F.max_pool2d(torch.tensor(x), return_indices=True, **kw)
  vw, iw = Tensor(x, device=device).max_pool2d(return_indices=True, **kw)
  same(vw, vt, "max_pool2d values")
  same(iw, it, "max_pool2d indices (flattened over the pooled dims)")
  assert iw.dtype == dtypes.int32
  unpool_kw = {k: v for k, v in kw.items() if k != "ceil_mode"}
  same(vw.max_unpool2d(iw, output_size=x.shape, **unpool_kw), F.max_unpool2d(vt, it, output_size=x.shape[-2:], **unpool_kw), "max_unpool2d")
  # gradients through both: max_unpool2d's to the pooled values at their indices, then max_pool2d's
  grads_like_torch(device, lambda t: t.max_pool2d(return_indices=True, **kw)[0].max_unpool2d(t.max_pool2d(return_indices=True, **kw)[1], output_size=x.shape, **unpool_kw),
                   lambda t: F.max_unpool2d(*F.max_pool2d(t, return_indices=True, **kw), output_size=x.shape[-2:], **unpool_kw), x, "unpool(pool)")

def test_max_unpool2d_default_size_and_overlaps(device):
  x = rand_np((1, 2, 4, 6), seed=10)
  vt, it = F.max_pool2d(torch.tensor(x), 2, return_indices=True)
  vw, iw = Tensor(x, device=device).max_pool2d(2, return_indices=True)
  same(vw.max_unpool2d(iw), F.max_unpool2d(vt, it, 2), "default output size (in - 1) * stride + kernel")
  same(Tensor.max_unpool2d(vw, iw, kernel_size=(2, 2), stride=2), F.max_unpool2d(vt, it, (2, 2), stride=2))
  # two values naming one position (overlapping windows): the last one writes it, as torch's loop does
  vals, idx = np.array([[[[1.0, 2.0, 3.0]]]], np.float32), np.array([[[[0, 0, 1]]]], np.int32)
  same(Tensor(vals, device=device).max_unpool2d(Tensor(idx, device=device), (1, 2), stride=(1, 1)),
       F.max_unpool2d(torch.tensor(vals), torch.tensor(idx, dtype=torch.int64), (1, 2), stride=(1, 1)))

def test_max_unpool2d_bad_input(device):
  v, i = Tensor.ones(1, 1, 2, 2, device=device), Tensor.zeros(1, 1, 2, 2, dtype=dtypes.int32, device=device)
  with pytest.raises(ValueError, match=r"max_unpool2d: indices must be an integer tensor of the input's shape \(input \(1, 1, 2, 2\), indices \(1, 1, 2\)\)"):
    v.max_unpool2d(i[..., 0])
  with pytest.raises(ValueError, match="max_unpool2d: indices must be an integer tensor"): v.max_unpool2d(v)
  with pytest.raises(ValueError, match=r"max_unpool2d: output_size \(0, 4\) must end in 2 positive sizes"): v.max_unpool2d(i, output_size=(0, 4))
  with pytest.raises(ValueError, match="max_unpool2d: kernel_size must be"): v.max_unpool2d(i, kernel_size=(2, 2, 2, 2, 2))

# ------------------------------------------------------------------------------------------------------- losses

def test_cross_entropy_targets(device):
  x = rand_np((4, 5), seed=11)
  y = np.array([1, 0, 4, 2])
  ref = lambda t, **kw: F.cross_entropy(t, torch.tensor(y), **kw)  # noqa: E731
  targets = (y.astype(np.int32), np.eye(5, dtype=np.int32)[y], np.eye(5, dtype=np.bool_)[y], np.eye(5, dtype=np.float32)[y])
  for kw in ({}, {"label_smoothing": 0.2}, {"reduction": "none"}, {"reduction": "sum"}):
    for target in targets if not kw else targets[:2]:
      # class indices, and one-hot rows of any dtype (tinygrad's rule: a target of the input's shape is probabilities)
      check_op(None, lambda t: ref(t, **kw), lambda t: t.cross_entropy(Tensor(target, device=device), **kw), device=device, vals=[x], **TOL)
  # (C,) logits with a 0-d class or a one-hot row
  check_op(None, lambda t: F.cross_entropy(t, torch.tensor(2)), lambda t: t.cross_entropy(Tensor(2, device=device)), device=device, vals=[x[0]], **TOL)
  check_op(None, lambda t: F.cross_entropy(t, torch.tensor(2)), lambda t: t.cross_entropy(Tensor([0, 0, 1, 0, 0], device=device)), device=device, vals=[x[0]], **TOL)
  w = Tensor(x, device=device)
  with pytest.raises(ValueError, match=r"cross_entropy: probability targets \(4,\) must have the input's shape \(4, 5\)"): w.cross_entropy(Tensor(y.astype(np.float32), device=device))
  with pytest.raises(ValueError, match=r"cross_entropy: target shape \(4, 1\) does not match input"): w.cross_entropy(Tensor(y[:, None].astype(np.int32), device=device))
  with pytest.raises(TypeError, match="cross_entropy: target must be a Tensor"): w.cross_entropy([1, 0, 4, 2])

def test_nll_loss_ignore_index_none(device):
  x, y = rand_np((3, 4), seed=12), np.array([1, 0, 3], np.int32)
  for reduction in ("mean", "sum", "none"):   # ignore_index=None (tinygrad's default): no target is ignored
    check_op(None, lambda t: F.nll_loss(t, torch.tensor(y, dtype=torch.int64), reduction=reduction),
             lambda t: t.nll_loss(Tensor(y, device=device), ignore_index=None, reduction=reduction), device=device, vals=[x], **TOL)

# ------------------------------------------------------------------------------------------ keyword forms: dtype=

def test_accumulation_dtype_keywords(device):
  a8, b8 = np.full((2, 40), 100, np.int8), np.full((40, 3), 100, np.int8)
  a, b = Tensor(a8, device=device), Tensor(b8, device=device)
  for out in (Tensor.einsum("ij,jk->ik", a, b, dtype=dtypes.int32), a.linear(b, dtype=dtypes.int32)):
    assert out.dtype == dtypes.int32 and out.tolist() == [[400000] * 3] * 2   # (summed in int8 it would wrap)
  x, w = rand_np((1, 2, 5, 5), seed=13).astype(np.float16), rand_np((3, 2, 3, 3), seed=14).astype(np.float16)
  out = Tensor(x, device=device).conv2d(Tensor(w, device=device), dtype=dtypes.float32, padding=1)
  assert out.dtype == dtypes.float32
  np.testing.assert_allclose(out.numpy(), F.conv2d(torch.tensor(x).float(), torch.tensor(w).float(), padding=1).numpy(), rtol=1e-5, atol=1e-5)
  out = Tensor(x[0, 0], device=device).linear(Tensor(w[0, 0, :, :1].repeat(5, 0)[:5], device=device), bias=Tensor([1.0], device=device), dtype=dtypes.float32)
  assert out.dtype == dtypes.float32

def test_sdpa_enable_gqa(device):
  q, k, v = rand_np((2, 6, 3, 4), seed=15), rand_np((2, 2, 5, 4), seed=16), rand_np((2, 2, 5, 3), seed=17)
  for causal in (False, True):
    check_op(None, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True),
             lambda q, k, v: q.scaled_dot_product_attention(k, v, is_causal=causal, enable_gqa=True), device=device, vals=[q, k, v], **TOL)
  with pytest.raises(ValueError, match="with enable_gqa the query's 6 heads must be a multiple of the key's 4"):
    Tensor(q, device=device).scaled_dot_product_attention(Tensor(rand_np((2, 4, 5, 4)), device=device), Tensor(v, device=device), enable_gqa=True)

# ----------------------------------------------------------------------------------------------- linear algebra

@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 3, 3), (1, 1), (3, 1), (0, 2)])
def test_qr_like_torch_complete(device, shape):
  A = rand_np(shape, seed=18)
  Q, R = Tensor(A, device=device).qr()
  Qt, Rt = torch.linalg.qr(torch.tensor(A), mode="complete")   # (tinygrad's qr is the complete one: Q (m, m), R (m, n))
  np.testing.assert_allclose(Q.numpy(), Qt.numpy(), atol=2e-6)   # LAPACK's reflectors: the same signs
  np.testing.assert_allclose(R.numpy(), Rt.numpy(), atol=2e-6)
  assert (np.tril(R.numpy(), -1) == 0).all()

def test_qr_sign_convention_and_bad_input(device):
  # a column already zero below the diagonal gets no reflector (LAPACK's), so a negative diagonal stays
  A = np.array([[-2.0, 1.0], [0.0, 3.0]], np.float32)
  Q, R = Tensor(A, device=device).qr()
  Qt, Rt = torch.linalg.qr(torch.tensor(A), mode="complete")
  np.testing.assert_allclose(Q.numpy(), Qt.numpy(), atol=1e-6); np.testing.assert_allclose(R.numpy(), Rt.numpy(), atol=1e-6)
  Q, R = Tensor([[1, 2], [3, 4]], device=device).qr()   # ints are factored as floats
  assert Q.dtype == R.dtype == dtypes.float32
  for op in ("qr", "svd"):
    with pytest.raises(ValueError, match=rf"{op}: input must be a matrix or a batch of matrices \(..., m, n\), got shape \(3,\)"):
      getattr(Tensor([1.0, 2.0, 3.0], device=device), op)()

def check_svd(device, A, full_matrices=True, tol=3e-6):
  U, S, Vh = Tensor(A, device=device).svd(full_matrices)
  Ut, St, Vht = torch.linalg.svd(torch.tensor(A), full_matrices=full_matrices)
  assert U.shape == tuple(Ut.shape) and S.shape == tuple(St.shape) and Vh.shape == tuple(Vht.shape)
  u, s, vh = U.numpy().astype(np.float64), S.numpy(), Vh.numpy().astype(np.float64)
  np.testing.assert_allclose(s, St.numpy(), atol=tol * max(1, St.abs().max().item()), err_msg="singular values (descending)")
  k = min(A.shape[-2:])
  # singular vectors are unique only up to sign (LAPACK builds differ too): checked by what defines them
  np.testing.assert_allclose((u[..., :k] * s[..., None, :]) @ vh[..., :k, :], A, atol=tol * 4, err_msg="U diag(S) Vh")
  np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, np.broadcast_to(np.eye(u.shape[-1]), u.shape[:-2] + (u.shape[-1],) * 2), atol=tol * 4)
  np.testing.assert_allclose(vh @ np.swapaxes(vh, -1, -2), np.broadcast_to(np.eye(vh.shape[-2]), vh.shape[:-2] + (vh.shape[-2],) * 2), atol=tol * 4)

@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5), (2, 3, 3), (1, 1), (3, 1)])
@pytest.mark.parametrize("full_matrices", [True, False])
def test_svd(device, shape, full_matrices):
  check_svd(device, rand_np(shape, seed=19), full_matrices)

def test_svd_rank_deficient(device):
  """Singular values of 0: the left singular vectors are still an orthonormal basis (not zero columns)."""
  rng = np.random.default_rng(20)
  check_svd(device, (rng.standard_normal((5, 2)) @ rng.standard_normal((2, 4))).astype(np.float32))
  check_svd(device, np.zeros((3, 3), np.float32))
  check_svd(device, np.diag([3.0, 0.0, 1.0]).astype(np.float32))

def _ns_reference(x, steps, params, eps=1e-7):
  """tinygrad's Newton-Schulz iteration in numpy (float64)."""
  if x.shape[-2] > x.shape[-1]: return np.swapaxes(_ns_reference(np.swapaxes(x, -1, -2), steps, params, eps), -1, -2)
  g = x / (np.sqrt((x * x).sum((-2, -1), keepdims=True)) + eps)
  for _ in range(steps):
    a, term, out = g @ np.swapaxes(g, -1, -2), g, params[0] * g
    for p in params[1:]:
      term = a @ term
      out = out + p * term
    g = out
  return g

@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (2, 4, 4)])
def test_newton_schulz(device, shape):
  A = rand_np(shape, seed=21)
  for steps, params in ((5, (3.4445, -4.7750, 2.0315)), (3, (2.0, -1.5, 0.5)), (0, (1.0,))):
    out = Tensor(A, device=device).newton_schulz(steps, params)
    np.testing.assert_allclose(out.numpy(), _ns_reference(A.astype(np.float64), steps, params), atol=2e-5, rtol=1e-4)
  # the cubic iteration converges to the orthogonal polar factor U Vh
  U, _, Vh = np.linalg.svd(A.astype(np.float64), full_matrices=False)
  np.testing.assert_allclose(Tensor(A, device=device).newton_schulz(steps=30, params=(1.5, -0.5)).numpy(), U @ Vh, atol=1e-4)
  with pytest.raises(ValueError, match=r"newton_schulz: input must be a matrix"): Tensor([1.0], device=device).newton_schulz(1, (1.0,))
  with pytest.raises(ValueError, match="newton_schulz: params must hold at least one coefficient"): Tensor(A, device=device).newton_schulz(1, ())

# ----------------------------------------------------------------------------------------------- signatures

NAMES = ["acos", "asin", "atan", "erf", "copysign", "logaddexp", "is_floating_point", "isclose", "allclose", "softmin", "normalize",
         "short", "const_like", "cummax", "cummin", "sort", "argsort", "topk", "max_pool2d", "max_unpool2d", "gelu", "cross_entropy",
         "clamp", "clip", "linear", "conv2d", "einsum", "nll_loss", "scaled_dot_product_attention", "qr", "svd", "newton_schulz"]
# defaults that differ on purpose: PyTorch's (nll_loss ignores -100), more digits (selu's constants are not in this list)
DEFAULTS_DIFFER = {("nll_loss", "ignore_index")}

@pytest.mark.parametrize("name", NAMES)
def test_signature_matches_tinygrad(name):
  """Every parameter of tinygrad's method is one of ours, by name, kind and default, and its positional ones are at the
  same places (ours may add keyword ones: clamp's min=/max=, sdpa's scale)."""
  tinygrad = pytest.importorskip("tinygrad")
  theirs = inspect.signature(getattr(tinygrad.Tensor, name)).parameters
  ours = inspect.signature(getattr(Tensor, name)).parameters
  positional = [p for p in ours.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
  for i, p in enumerate(q for q in theirs.values() if q.kind in (q.POSITIONAL_ONLY, q.POSITIONAL_OR_KEYWORD)):
    if name == "scaled_dot_product_attention" and p.name == "enable_gqa": continue   # (torch's scale comes first; checked below)
    assert i < len(positional) and positional[i].name == p.name, f"{name}: positional parameter {i} is {p.name!r} in tinygrad"
  for p in theirs.values():
    assert p.name in ours, f"{name}: tinygrad's parameter {p.name!r} is missing"
    if p.default is not p.empty and (name, p.name) not in DEFAULTS_DIFFER:
      assert ours[p.name].default == p.default, f"{name}({p.name}=...): default {ours[p.name].default!r}, tinygrad's {p.default!r}"
