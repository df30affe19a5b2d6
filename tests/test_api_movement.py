"""tinygrad 0.14's movement, indexing and creation methods that tinyweb adds for tinygrad code (issue 14): roll, diag,
diagonal, meshgrid, pad_to, shrink_to, unfold, rearrange, masked_select, nonzero, scatter_reduce, sequential, replace,
contiguous_backward, empty_like, randperm, multinomial, from_blob, from_url, const, and tinygrad's keyword forms of the
existing ones (reshape(shape=...), permute(order=...), ...). Values and gradients against torch (numpy where torch lacks
the op); random ops by their distributions."""
import gzip, inspect
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Tensor, dtypes
from tinyweb.helpers import GlobalCounters
from tinyweb.uop import Ops
from helpers import check_op, rand_np

def TI(a, device): return Tensor(np.asarray(a, dtype=np.int32), device=device)
def LI(a): return torch.tensor(np.asarray(a), dtype=torch.long)

# ---------------------------------------------------------------- signatures: tinygrad's names, kinds and defaults

NAMES = ["roll", "diag", "diagonal", "meshgrid", "pad_to", "shrink_to", "unfold", "rearrange", "masked_select", "nonzero",
         "scatter_reduce", "sequential", "replace", "contiguous_backward", "empty_like", "randperm", "multinomial", "from_blob",
         "from_url", "const", "reshape", "view", "expand", "permute", "flip", "repeat", "full", "full_like", "zeros", "ones",
         "rand", "randn_like", "zeros_like", "ones_like", "rand_like", "empty"]

@pytest.mark.parametrize("name", NAMES)
def test_signature_matches_tinygrad(name):
  """tinygrad's positional parameters come first, in its order; each of its keywords is accepted as the same kind with
  the same default (tinyweb may add parameters after them: torch's requires_grad, device)."""
  tinygrad = pytest.importorskip("tinygrad")
  want, got = inspect.signature(getattr(tinygrad.Tensor, name)), inspect.signature(getattr(Tensor, name))
  def params(sig): return [p for p in sig.parameters.values() if p.name not in ("self", "cls")]
  pw, pg = params(want), params(got)
  pos = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
  assert [(p.name, p.kind) for p in pw if p.kind in pos] == [(p.name, p.kind) for p in pg if p.kind in pos][:len([p for p in pw if p.kind in pos])]
  by_name = {p.name: p for p in pg}
  for p in pw:
    if p.kind is inspect.Parameter.VAR_KEYWORD: continue
    assert p.name in by_name, f"{name}: tinygrad's parameter {p.name!r} is missing"
    if p.kind is not inspect.Parameter.VAR_POSITIONAL: assert by_name[p.name].kind in (p.kind, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    def norm(v): return (v.fmt, v.itemsize) if hasattr(v, "itemsize") else v   # (a dtype: tinygrad's dtypes.int is int32)
    assert norm(p.default) == norm(by_name[p.name].default), f"{name}: default of {p.name!r}: tinygrad {p.default!r}, tinyweb {by_name[p.name].default!r}"

# ---------------------------------------------------------------- the keyword forms of the movement ops

def test_movement_keyword_forms(device):
  x = rand_np((2, 3, 4))
  check_op([(2, 3, 4)], lambda t: t.reshape(6, 4), lambda t: t.reshape(shape=(6, 4)), device=device)
  check_op([(2, 3, 4)], lambda t: t.reshape(4, 6), lambda t: t.view(shape=(4, -1)), device=device)
  check_op([(2, 1, 4)], lambda t: t.expand(2, 3, 4), lambda t: t.expand(shape=(2, 3, -1)), device=device)
  check_op([(2, 3, 4)], lambda t: t.permute(2, 0, 1), lambda t: t.permute(order=(2, 0, 1)), device=device)
  check_op([(2, 3, 4)], lambda t: t.flip((0, 2)), lambda t: t.flip(axis=(0, -1)), device=device)
  check_op([(2, 3)], lambda t: t.repeat(2, 1, 2), lambda t: t.repeat(repeats=(2, 1, 2)), device=device)
  # the positional forms still work: one tuple or list, or the sizes one by one
  t = Tensor(x, device=device)
  for got in (t.reshape((4, 6)), t.reshape([4, 6]), t.reshape(4, 6), t.permute(1, 0, 2).permute([1, 0, 2]).reshape(4, 6)):
    np.testing.assert_array_equal(got.numpy(), x.reshape(4, 6))
  with pytest.raises(TypeError): t.permute()   # (as in torch: the order is required)

def test_creation_keyword_forms(device):
  for t in (Tensor.full((2, 3), 1.5, device=device, buffer=False), Tensor.zeros(2, 3, device=device, buffer=False) + 1.5,
            Tensor.ones(2, 3, device=device).full_like(1.5, buffer=False)):
    np.testing.assert_array_equal(t.numpy(), np.full((2, 3), 1.5, np.float32))
  assert Tensor.zeros(2, device=device, requires_grad=True).requires_grad
  Tensor.manual_seed(3)
  a = Tensor.rand(100, device=device, contiguous=False).numpy()
  assert a.shape == (100,) and a.dtype == np.float32 and (0 <= a).all() and (a < 1).all() and len(set(a.tolist())) > 90
  assert Tensor.ones(3, device=device).randn_like(dtypes.float32).shape == (3,)   # (dtype is randn_like's first parameter)

# ---------------------------------------------------------------- roll

@pytest.mark.parametrize("shape,shifts,dims", [
  ((5,), 2, 0), ((5,), -7, -1), ((3, 4), 1, None), ((3, 4), 13, None), ((3, 4), (1, -2), (0, 1)), ((2, 3, 4), (1, 1), (2, 2)),
  ((2, 3, 4), 5, 1), ((1, 4), 3, 0), ((3, 4), 0, 1), ((0, 3), 2, 0), ((0, 3), 2, None), ((), 3, None), ((), 1, 0),
])
def test_roll(device, shape, shifts, dims):
  check_op([shape], lambda x: torch.roll(x, shifts, dims) if shape else x.clone(), lambda x: x.roll(shifts, dims), device=device)

def test_roll_bad_arguments(device):
  x = Tensor(rand_np((3, 4)), device=device)
  with pytest.raises(ValueError, match=r"roll: shifts \(1, 2\) and dims \(0,\) must have the same length"): x.roll((1, 2), 0)
  with pytest.raises(ValueError, match="roll: with dims=None shifts must be one int"): x.roll((1, 2))
  with pytest.raises(IndexError, match="roll: axis 2 is out of range"): x.roll(1, 2)
  with pytest.raises(TypeError, match="roll: a shift must be an int"): x.roll(1.5, 0)

# ---------------------------------------------------------------- diag / diagonal

@pytest.mark.parametrize("shape", [(4,), (1,), (0,), (3, 5), (5, 3), (1, 1), (0, 2)])
def test_diag(device, shape):
  check_op([shape], torch.diag, lambda x: x.diag(), device=device)

def test_diag_bool_and_bad_input(device):
  v = np.array([True, False, True])
  np.testing.assert_array_equal(Tensor(v, device=device).diag().numpy(), np.diag(v))
  for shape in [(), (2, 2, 2)]:
    with pytest.raises(ValueError, match=r"diag: expected a 1-D tensor .* got shape"): Tensor.zeros(*shape, device=device).diag()

@pytest.mark.parametrize("shape,offset,d1,d2", [
  ((4, 4), 0, 0, 1), ((3, 5), 2, 0, 1), ((5, 3), -2, 0, 1), ((3, 5), 1, 1, 0), ((2, 3, 4), 0, 0, 2), ((2, 3, 4), -1, -1, 1),
  ((2, 3, 4), 1, 2, -3), ((3, 3), 3, 0, 1), ((3, 3), -5, 0, 1), ((0, 3), 0, 0, 1), ((1, 1, 1), 0, 1, 2),
])
def test_diagonal(device, shape, offset, d1, d2):
  check_op([shape], lambda x: x.diagonal(offset, d1, d2), device=device)
  check_op([shape], lambda x: x.diagonal(offset=offset, dim1=d1, dim2=d2), device=device)

def test_diagonal_bad_dims(device):
  x = Tensor.zeros(2, 3, device=device)
  with pytest.raises(ValueError, match=r"diagonal: dim1 0 and dim2 -2 must name two different dimensions of \(2, 3\)"): x.diagonal(0, 0, -2)
  with pytest.raises(IndexError, match="diagonal: axis 1 is out of range"): Tensor.zeros(3, device=device).diagonal()
  with pytest.raises(TypeError, match="diagonal: offset must be an int"): x.diagonal(0.5)

# ---------------------------------------------------------------- meshgrid

@pytest.mark.parametrize("indexing", ["ij", "xy"])
@pytest.mark.parametrize("shapes", [[(3,), (4,)], [(2,), (3,), (4,)], [(3,)], [(), (4,)], [(0,), (2,)], [(1,), (1,), (2,)]])
def test_meshgrid(device, shapes, indexing):
  check_op(shapes, lambda *ts: torch.stack(torch.meshgrid(*ts, indexing=indexing)),
           lambda *ts: Tensor.stack(*ts[0].meshgrid(*ts[1:], indexing=indexing)), device=device)

def test_meshgrid_keeps_dtypes_and_rejects_bad_input(device):
  a, b = Tensor([1, 2, 3], device=device), Tensor([0.5, 1.5], device=device)
  ga, gb = a.meshgrid(b)
  assert (ga.dtype, gb.dtype) == (dtypes.int32, dtypes.float32)
  np.testing.assert_array_equal(ga.numpy(), [[1, 1], [2, 2], [3, 3]])
  with pytest.raises(ValueError, match="meshgrid: indexing must be 'ij' or 'xy', got 'ji'"): a.meshgrid(b, indexing="ji")
  with pytest.raises(ValueError, match=r"meshgrid: expected 0-d or 1-D tensors, got shape \(2, 2\)"): a.meshgrid(Tensor.zeros(2, 2, device=device))
  with pytest.raises(TypeError, match="meshgrid: expected Tensors, got list"): a.meshgrid([1, 2])

# ---------------------------------------------------------------- pad_to / shrink_to

@pytest.mark.parametrize("shape,to,value", [((2, 3), (4, 5), 0), ((2, 3), (None, 6), -1.5), ((2, 3), (2, 3), 7), ((0, 2), (3, 2), 1),
                                            ((2,), (2,), 0), ((), (), 0)])
def test_pad_to(device, shape, to, value):
  pads = [p for s, n in reversed(list(zip(shape, to))) for p in (0, (s if n is None else n) - s)]
  check_op([shape], lambda x: F.pad(x, pads, value=value), lambda x: x.pad_to(to, value=value), device=device)
  if to: check_op([shape], lambda x: F.pad(x, pads, value=value), lambda x: x.pad_to(*to, value=value), device=device)

@pytest.mark.parametrize("shape,to", [((4, 5), (2, 3)), ((4, 5), (None, 1)), ((4, 5), (0, 5)), ((3,), (3,)), ((2, 3, 4), (1, None, 2))])
def test_shrink_to(device, shape, to):
  sl = tuple(slice(None if n is None else n) for n in to)
  check_op([shape], lambda x: x[sl], lambda x: x.shrink_to(to), device=device)
  check_op([shape], lambda x: x[sl], lambda x: x.shrink_to(*to), device=device)

def test_pad_to_shrink_to_bad_shapes(device):
  x = Tensor.zeros(2, 3, device=device)
  with pytest.raises(ValueError, match=r"pad_to: cannot pad shape \(2, 3\) to the smaller \(1, 3\)"): x.pad_to(1, 3)
  with pytest.raises(ValueError, match=r"pad_to: target shape \(4,\) needs one size \(or None\) per dimension of \(2, 3\)"): x.pad_to(4)
  with pytest.raises(ValueError, match=r"shrink_to: cannot shrink shape \(2, 3\) to \(2, 4\)"): x.shrink_to(2, 4)
  with pytest.raises(ValueError, match=r"shrink_to: target shape \(1, 1, 1\) needs one size"): x.shrink_to(1, 1, 1)
  with pytest.raises(TypeError, match="pad_to: a size must be an int"): x.pad_to(2.0, 3)

# ---------------------------------------------------------------- unfold

@pytest.mark.parametrize("shape,dim,size,step", [
  ((8,), 0, 2, 2), ((8,), 0, 3, 1), ((7,), -1, 3, 2), ((3, 5), 1, 2, 1), ((3, 5), 0, 3, 1), ((2, 6, 3), 1, 4, 2), ((2, 6, 3), -3, 1, 1),
  ((4, 5), 1, 5, 1), ((4, 5), 1, 2, 7), ((4, 5), 1, 0, 2), ((0, 5), 1, 2, 1), ((), 0, 1, 1), ((), 0, 0, 3),
])
def test_unfold(device, shape, dim, size, step):
  check_op([shape], lambda x: x.unfold(dim, size, step), device=device)

def test_unfold_bad_arguments(device):
  x = Tensor.zeros(3, 4, device=device)
  with pytest.raises(ValueError, match=r"unfold: size 5 and step 1 are invalid for dimension 1 of size 4 \(shape \(3, 4\)\)"): x.unfold(1, 5, 1)
  with pytest.raises(ValueError, match="unfold: size 2 and step 0 are invalid"): x.unfold(1, 2, 0)
  with pytest.raises(ValueError, match="unfold: size -1 and step 1 are invalid"): x.unfold(0, -1, 1)
  with pytest.raises(IndexError, match="unfold: axis 2 is out of range"): x.unfold(2, 1, 1)

# ---------------------------------------------------------------- rearrange (einops' formulas; the references spelled as reshape/permute)

@pytest.mark.parametrize("shape,formula,sizes,ref", [
  ((2, 3, 4), "a b c -> c a b", {}, lambda x: x.permute(2, 0, 1)),
  ((2, 3, 4), "b c (h w) -> b h w c", {"h": 2}, lambda x: x.reshape(2, 3, 2, 2).permute(0, 2, 3, 1)),
  ((2, 3, 4), "b c (h w) -> b h w c", {"w": 1}, lambda x: x.reshape(2, 3, 4, 1).permute(0, 2, 3, 1)),
  ((2, 3, 4), "b c w -> (b c) w", {}, lambda x: x.reshape(6, 4)),
  ((2, 3, 4), "b c w -> (c b) w", {}, lambda x: x.permute(1, 0, 2).reshape(6, 4)),
  ((2, 3, 4), "b ... -> b (...)", {}, lambda x: x.reshape(2, 12)),
  ((2, 3, 4), "... w -> w ...", {}, lambda x: x.permute(2, 0, 1)),
  ((2, 3, 4, 5), "a ... d -> d ... a", {}, lambda x: x.permute(3, 1, 2, 0)),
  ((2, 3, 4), "a b c -> 1 (c a) b 1", {}, lambda x: x.permute(2, 0, 1).reshape(1, 8, 3, 1)),
  ((2, 1, 4), "a 1 c -> c a", {}, lambda x: x.reshape(2, 4).permute(1, 0)),
  ((6, 4), "(a b) c -> a (c b)", {"a": 3}, lambda x: x.reshape(3, 2, 4).permute(0, 2, 1).reshape(3, 8)),
  ((2, 3), "a b -> a b ()", {}, lambda x: x.reshape(2, 3, 1)),
  ((0, 3), "a b -> b a", {}, lambda x: x.permute(1, 0)),
  ((), "-> ", {}, lambda x: x.clone()),
  ((2, 3), "a … -> … a", {}, lambda x: x.permute(1, 0)),
])
def test_rearrange(device, shape, formula, sizes, ref):
  check_op([shape], ref, lambda x: x.rearrange(formula, **sizes), device=device)

@pytest.mark.parametrize("formula,sizes,why", [
  ("a b c -> a b", {}, r"axes \['c'\] are on one side only"),
  ("a b c -> a b c", {"d": 2}, r"sizes are given for axes \['d'\] that it does not name"),
  ("a a c -> a c", {}, "an axis is named twice on one side"),
  ("a b -> a b", {}, "the left side has 2 dimensions, the tensor 3"),
  ("a b c d ... -> a b c d ...", {}, "the left side has 5 dimensions, the tensor 3"),
  ("a b (c d) -> a b c d", {}, r"axes \['c', 'd'\] of a dimension of size 4 need sizes"),
  ("a b (c d) -> a b c d", {"c": 3}, r"sizes \[3\] do not divide the dimension of size 4"),
  ("a b c -> a b c", {"b": 2}, r"axes \['b'\] make a dimension of size 2, not 3"),
  ("a b (c ...) -> a b c ...", {}, r"'...' is inside parentheses on the left"),
  ("a b ((c)) -> a b c", {}, "nested parentheses"),
  ("a b c) -> a b c", {}, r"a '\)' without its '\('"),
  ("a b (c -> a b c", {}, r"a '\(' without its '\)'"),
  ("a b c -> a b c 2", {}, r"invalid axis '2'"),
])
def test_rearrange_bad_formulas(device, formula, sizes, why):
  with pytest.raises(ValueError, match=r"rearrange: " + why + r".*, in '.*' for shape \(2, 3, 4\)"):
    Tensor.zeros(2, 3, 4, device=device).rearrange(formula, **sizes)
  with pytest.raises(ValueError, match="rearrange: the formula must be a string with one '->'"): Tensor.zeros(2, device=device).rearrange("a b")

# ---------------------------------------------------------------- masked_select / nonzero: shapes that depend on the values

@pytest.mark.parametrize("shape,mshape", [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (3, 4)), ((2, 1, 3), (1, 4, 1)), ((5,), (5,)), ((0, 3), (3,)), ((), ())])
def test_masked_select(device, shape, mshape):
  mask = rand_np(mshape, dtype=np.bool_, seed=11)
  check_op([shape], lambda x: torch.masked_select(x, torch.tensor(mask)), lambda x: x.masked_select(Tensor(mask, device=device)), device=device)

def test_masked_select_all_or_none(device):
  x = rand_np((2, 3))
  for m in (np.ones((2, 3), bool), np.zeros((2, 3), bool)):
    np.testing.assert_array_equal(Tensor(x, device=device).masked_select(Tensor(m, device=device)).numpy(), x[m])

def test_masked_select_with_size_pads_or_truncates(device):
  x, m = np.arange(1, 10, dtype=np.int32).reshape(3, 3), np.array([[1, 0, 1], [0, 1, 0], [0, 0, 1]], bool)
  t, tm = Tensor(x, device=device), Tensor(m, device=device)
  np.testing.assert_array_equal(t.masked_select(tm, size=6, fill_value=-1).numpy(), [1, 3, 5, 9, -1, -1])
  np.testing.assert_array_equal(t.masked_select(tm, size=2).numpy(), [1, 3])
  np.testing.assert_array_equal(t.masked_select(tm, size=0).numpy(), np.zeros(0, np.int32))
  check_op([(3, 3)], lambda a: torch.cat([a[torch.tensor(m)], torch.full((2,), 0.5)]),
           lambda a: a.masked_select(Tensor(m, device=device), size=6, fill_value=0.5), device=device)

def test_masked_select_and_nonzero_realize_only_without_size(device):
  """The output's size is the count of selected elements: without `size` it is read at the call (one realize, as in
  tinygrad); with `size` nothing runs until the result is used (lazy, so it can be jitted)."""
  x = Tensor(rand_np((4, 5)), device=device)
  m = (x > 0).realize()
  x.realize()
  for op in (lambda: x.masked_select(m, size=3), lambda: x.nonzero(size=3)):
    before = GlobalCounters.kernel_count
    op()
    assert GlobalCounters.kernel_count == before
  for op in (lambda: x.masked_select(m), lambda: x.nonzero()):
    before = GlobalCounters.kernel_count
    op()
    assert GlobalCounters.kernel_count > before

@pytest.mark.parametrize("vals", [
  np.array([1, 0, 2, 0, 3], np.float32), np.array([[1, 0], [0, 2]], np.int32), np.array([[0, 0], [0, 0]], np.float32),
  np.array([np.nan, 0, -0.0, np.inf], np.float32), np.array([[True, False, True]]), rand_np((2, 3, 4), -1, 2, np.int32, seed=5),
  np.zeros((0, 3), np.float32), np.float32(2.0), np.float32(0.0), np.ones((1, 1, 1), np.int32),
])
def test_nonzero(device, vals):
  got = Tensor(vals, device=device).nonzero()
  exp = torch.tensor(vals).nonzero().numpy()
  assert got.dtype == dtypes.int32 and got.shape == exp.shape
  np.testing.assert_array_equal(got.numpy(), exp)

def test_nonzero_with_size(device):
  t = Tensor([[1, 0], [0, 2]], device=device)
  np.testing.assert_array_equal(t.nonzero(size=3, fill_value=-1).numpy(), [[0, 0], [1, 1], [-1, -1]])
  np.testing.assert_array_equal(t.nonzero(size=1).numpy(), [[0, 0]])
  np.testing.assert_array_equal(Tensor.zeros(0, 2, device=device).nonzero(size=2).numpy(), np.zeros((2, 2), np.int32))

def test_masked_select_nonzero_bad_input(device):
  x = Tensor.zeros(2, 3, device=device)
  with pytest.raises(TypeError, match="masked_select: mask must be a bool Tensor, got dtypes.int32"): x.masked_select(Tensor([1, 0, 1], device=device))
  with pytest.raises(TypeError, match="masked_select: mask must be a bool Tensor, got list"): x.masked_select([True, False, True])
  with pytest.raises(ValueError, match=r"masked_select: shapes \(2, 3\) and \(2,\) cannot be broadcast"): x.masked_select(Tensor([True, False], device=device))
  with pytest.raises(ValueError, match="masked_select: size must be >= 0, got -1"): x.masked_select(x > 0, size=-1)
  with pytest.raises(ValueError, match="nonzero: size must be >= 0, got -2"): x.nonzero(size=-2)
  with pytest.raises(TypeError, match="nonzero: size must be an int"): x.nonzero(size=1.5)

# ---------------------------------------------------------------- scatter_reduce

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dim,xshape,ishape,sshape", [(0, (4, 5), (6, 5), (6, 5)), (1, (4, 5), (4, 7), (4, 7)), (-1, (2, 3, 4), (2, 3, 6), (2, 3, 6)),
                                                      (1, (3, 4), (2, 3), (3, 5)), (0, (3,), (0,), (0,)), (0, (1, 1), (1, 1), (1, 1))])
def test_scatter_reduce(device, reduce, include_self, dim, xshape, ishape, sshape):
  idx = rand_np(ishape, 0, xshape[dim], np.int32, seed=9)   # (repeats: several values reduced into one position)
  # (torch's backward refuses a src larger than the index, and an empty src has no gradient to compare)
  check_op([xshape, sshape], lambda x, s: x.scatter_reduce(dim, LI(idx), s, reduce, include_self=include_self),
           lambda x, s: x.scatter_reduce(dim, TI(idx, device), s, reduce, include_self=include_self), device=device, low=0.5, high=2.0,
           grad=ishape == sshape and 0 not in ishape)

@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_integers(device, reduce):
  x, idx, src = np.array([10, -21, 30, 7], np.int32), np.array([0, 1, 0, 1, 2, 2, 1]), np.array([5, -6, 7, 8, 1, -2, 4], np.int32)
  for include_self in (True, False):
    exp = torch.tensor(x).scatter_reduce(0, torch.tensor(idx), torch.tensor(src), reduce, include_self=include_self).numpy()
    got = Tensor(x, device=device).scatter_reduce(0, TI(idx, device), Tensor(src, device=device), reduce, include_self=include_self)
    assert got.dtype == dtypes.int32
    np.testing.assert_array_equal(got.numpy(), exp)

def test_scatter_reduce_nan_and_signed_zero(device):
  x, idx, src = np.array([1.0, -0.0, 3.0], np.float32), np.array([0, 0]), np.array([np.nan, 2.0], np.float32)
  for reduce in ("amax", "amin", "sum"):
    exp = torch.tensor(x).scatter_reduce(0, torch.tensor(idx), torch.tensor(src), reduce).numpy()
    got = Tensor(x, device=device).scatter_reduce(0, TI(idx, device), Tensor(src, device=device), reduce).numpy()
    np.testing.assert_array_equal(got, exp)
    assert np.signbit(got[1]) and np.signbit(exp[1])   # (a position nothing is written to keeps self's value: -0.0)

def test_scatter_reduce_bad_arguments(device):
  x, s = Tensor.zeros(3, 4, device=device), Tensor.ones(3, 4, device=device)
  i = TI([[0, 1, 2, 0]], device)
  with pytest.raises(ValueError, match="scatter_reduce: reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', got 'max_'"): x.scatter_reduce(0, i, s, "max_")
  with pytest.raises(TypeError, match="scatter_reduce: index must be an integer Tensor, got dtypes.float32"): x.scatter_reduce(0, s, s, "sum")
  with pytest.raises(ValueError, match=r"scatter_reduce: index \(1, 5\) must be no larger than src \(3, 4\), nor than the input \(3, 4\) outside dimension 0"):
    x.scatter_reduce(0, TI([[0] * 5], device), s, "sum")
  with pytest.raises(ValueError, match=r"scatter_reduce: index \(4,\) and src \(3, 4\) must have as many dims as the input \(3, 4\)"):
    x.scatter_reduce(0, TI([0, 1, 2, 0], device), s, "sum")
  with pytest.raises(IndexError, match="scatter_reduce: axis 2 is out of range"): x.scatter_reduce(2, i, s, "sum")

# ---------------------------------------------------------------- sequential / replace / contiguous_backward

def test_sequential(device):
  x = Tensor([1.0, 2.0, 3.0], device=device)
  np.testing.assert_array_equal(x.sequential([lambda t: t * 2, lambda t: t + 1, Tensor.neg]).numpy(), [-3.0, -5.0, -7.0])
  assert x.sequential([]) is x

def test_replace(device):
  w = Tensor.zeros(2, 3, device=device)
  new = Tensor(np.arange(6, dtype=np.int32).reshape(2, 3), device=device)
  assert w.replace(new) is w
  assert w.dtype == dtypes.int32
  np.testing.assert_array_equal(w.numpy(), np.arange(6).reshape(2, 3))
  with pytest.raises(ValueError, match=r"replace: the new value's shape \(3, 2\) does not match the tensor's \(2, 3\)"): w.replace(Tensor.zeros(3, 2, device=device))
  with pytest.raises(TypeError, match="replace: expected a Tensor, got list"): w.replace([[0] * 3] * 2)

def test_contiguous_backward(device):
  check_op([(3, 4)], lambda x: (x * 2).exp(), lambda x: (x * 2).contiguous_backward().exp(), device=device)
  x = Tensor(rand_np((3, 4)), device=device, requires_grad=True)
  (x.permute(1, 0).contiguous_backward() * 3).sum().backward()
  assert any(u.op is Ops.CONTIGUOUS for u in x.grad.uop.toposort())   # (the gradient is made contiguous in the backward pass)
  y = Tensor(rand_np((3, 4)), device=device)
  assert y.contiguous_backward() is y   # (nothing to do without gradients)

# ---------------------------------------------------------------- creation: empty_like, const, from_blob, from_url

def test_empty_like(device):
  x = Tensor.zeros(2, 3, dtype=dtypes.int32, device=device)
  e = x.empty_like()
  assert (e.shape, e.dtype, e.device) == ((2, 3), dtypes.int32, x.device)
  assert x.empty_like(dtype=dtypes.float32).dtype == dtypes.float32 and x.empty_like(device="PYTHON").device == "PYTHON"
  assert e.numpy().shape == (2, 3) and Tensor.zeros(0, 4, device=device).empty_like().shape == (0, 4)

@pytest.mark.parametrize("b,dtype,want", [(3, None, dtypes.int32), (2.5, None, dtypes.float32), (True, None, dtypes.bool),
                                          (3, dtypes.float16, dtypes.float16), (np.int32(4), None, dtypes.int32)])
def test_const(b, dtype, want):
  t = Tensor.const(b, dtype)
  assert (t.shape, t.dtype) == ((), want) and t.item() == b

def test_const_out_of_range():
  with pytest.raises(OverflowError): Tensor.const(300, dtypes.uint8)
  with pytest.raises(TypeError, match="const: expected a number"): Tensor.const("3")

def test_from_blob(device):
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  t = Tensor.from_blob(a.ctypes.data, (3, 4), dtype=dtypes.float32, device=device)
  assert (t.shape, t.dtype) == ((3, 4), dtypes.float32)
  np.testing.assert_array_equal(t.numpy(), a)
  b = np.arange(6, dtype=np.int32)
  np.testing.assert_array_equal(Tensor.from_blob(b.ctypes.data, (2, 3), dtype=dtypes.int32, device=device).numpy(), b.reshape(2, 3))
  if t.device == "CPU":   # (used in place, not copied: a write to the memory shows)
    a[0, 0] = 100.0
    assert t.numpy()[0, 0] == 100.0
  assert Tensor.from_blob(0, (0,), device=device).shape == (0,)

def test_from_blob_bad_arguments():
  with pytest.raises(ValueError, match="from_blob: 0x0 is not an address of 16 bytes"): Tensor.from_blob(0, (4,))
  with pytest.raises(TypeError, match=r"from_blob: unexpected keyword arguments \['requires_grad'\]"): Tensor.from_blob(8, (1,), requires_grad=True)
  with pytest.raises(TypeError, match="from_blob: ptr must be an int"): Tensor.from_blob(1.5, (1,))

def test_from_url(device, tmp_path, monkeypatch):
  monkeypatch.setenv("TINYWEB_CACHE_DIR", str(tmp_path / "cache"))   # (helpers.fetch keeps what it reads there)
  data = np.arange(10, dtype=np.float32).tobytes()
  (tmp_path / "x.bin").write_bytes(data)
  (tmp_path / "x.bin.gz").write_bytes(gzip.compress(data))
  url = (tmp_path / "x.bin").as_uri()
  t = Tensor.from_url(url, device=device)
  assert (t.shape, t.dtype) == ((40,), dtypes.uint8)
  np.testing.assert_array_equal(t.numpy(), np.frombuffer(data, np.uint8))
  np.testing.assert_array_equal(Tensor.from_url(url + ".gz", gunzip=True, dtype=dtypes.float32, device=device).numpy(), np.arange(10, dtype=np.float32))
  np.testing.assert_array_equal(Tensor.from_url(str(tmp_path / "x.bin"), device=device).numpy(), np.frombuffer(data, np.uint8))   # (a local path)
  with pytest.raises(OSError, match=r"from_url: cannot read '.*x.bin' as gzip data"): Tensor.from_url(url, gunzip=True)
  with pytest.raises(OSError, match=r"from_url: cannot read '.*missing'"): Tensor.from_url((tmp_path / "missing").as_uri())
  with pytest.raises(ValueError, match="from_url: cannot open 'not a url'"): Tensor.from_url("not a url")

# ---------------------------------------------------------------- random: randperm, multinomial

def test_randperm(device):
  Tensor.manual_seed(5)
  for n in (0, 1, 2, 50):
    p = Tensor.randperm(n, device=device)
    assert (p.shape, p.dtype) == ((n,), dtypes.int32) and sorted(p.tolist()) == list(range(n))
  a, b = Tensor.randperm(50, device=device).tolist(), Tensor.randperm(50, device=device).tolist()
  assert a != b
  Tensor.manual_seed(7)
  first = Tensor.randperm(20, device=device).tolist()
  Tensor.manual_seed(7)
  assert Tensor.randperm(20, device=device).tolist() == first
  assert Tensor.randperm(4, device=device, dtype=dtypes.float32).dtype == dtypes.float32

def test_randperm_is_uniform(device):
  """all 6 orders of 3 appear, about equally often, in 240 draws; a long permutation is not correlated with its positions"""
  Tensor.manual_seed(0)
  perms = np.array([Tensor.randperm(3, device=device).tolist() for _ in range(240)])
  _, counts = np.unique(perms, axis=0, return_counts=True)
  assert len(counts) == 6 and counts.min() >= 20, counts
  p = Tensor.randperm(1000, device=device).numpy()
  assert abs(np.corrcoef(p, np.arange(1000))[0, 1]) < 0.15

def test_randperm_bad_arguments():
  with pytest.raises(ValueError, match="randperm: n must be >= 0, got -1"): Tensor.randperm(-1)
  with pytest.raises(TypeError, match="randperm: n must be an int"): Tensor.randperm(2.0)

@pytest.mark.parametrize("weights", [[1.0, 2.0, 3.0, 4.0], [0.0, 5.0, 0.0, 5.0], [[1.0, 1.0, 2.0], [6.0, 0.0, 2.0]], [7], [2, 0, 1]])
def test_multinomial_with_replacement(device, weights):
  Tensor.manual_seed(1)
  w = np.array(weights, np.float32)
  got = Tensor(np.array(weights, np.int32 if isinstance(np.ravel(weights)[0], np.integer) else np.float32), device=device).multinomial(4000, replacement=True)
  assert got.dtype == dtypes.int32 and got.shape == w.shape[:-1] + (4000,)
  for row, wr in zip(np.atleast_2d(got.numpy()), np.atleast_2d(w)):
    freq = np.bincount(row, minlength=len(wr)) / len(row)
    np.testing.assert_allclose(freq, wr / wr.sum(), atol=0.04)
    assert (freq[wr == 0] == 0).all()

def test_multinomial_without_replacement(device):
  Tensor.manual_seed(2)
  w = np.array([1.0, 2.0, 3.0, 0.0, 4.0], np.float32)
  got = Tensor(np.tile(w, (3000, 1)), device=device).multinomial(3).numpy()   # 3000 independent draws of 3
  assert got.shape == (3000, 3) and all(len(set(r)) == 3 for r in got.tolist()) and not (got == 3).any()
  # the first draw is proportional to the weights; the second to them among those not drawn first
  p = w / w.sum()
  np.testing.assert_allclose(np.bincount(got[:, 0], minlength=5) / 3000, p, atol=0.04)
  second = np.array([sum(p[i] * p[j] / (1 - p[i]) for i in range(5) if i != j) for j in range(5)])
  np.testing.assert_allclose(np.bincount(got[:, 1], minlength=5) / 3000, second, atol=0.04)
  all_of_them = Tensor(w, device=device).multinomial(4).numpy()   # (every category with weight, in some order)
  assert sorted(all_of_them.tolist()) == [0, 1, 2, 4]
  assert Tensor([[0.0, 3.0, 0.0]], device=device).multinomial(1).tolist() == [[1]]

def test_multinomial_bad_arguments(device):
  w = Tensor([1.0, 2.0], device=device)
  with pytest.raises(ValueError, match=r"multinomial: expected 1-D or 2-D weights with at least one category, got shape \(1, 1, 2\)"): w.reshape(1, 1, 2).multinomial()
  with pytest.raises(ValueError, match=r"multinomial: expected 1-D or 2-D weights .* got shape \(0,\)"): Tensor.zeros(0, device=device).multinomial()
  with pytest.raises(ValueError, match=r"multinomial: cannot draw 3 samples from 2 categories without replacement \(need 1..2\)"): w.multinomial(3)
  with pytest.raises(ValueError, match="multinomial: cannot draw 0 samples"): w.multinomial(0, replacement=True)
  with pytest.raises(TypeError, match="multinomial: num_samples must be an int"): w.multinomial(1.0)
