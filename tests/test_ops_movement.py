"""Differential tests of the movement ops (views, padding, indexing, concatenation, scatter/gather) against torch and numpy.
Forward values and gradients are compared; references never come from tinyweb itself."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Tensor
from helpers import check_op, rand_np

def TI(a, device):
  """an int32 tinyweb index tensor"""
  return Tensor(np.asarray(a, dtype=np.int32), device=device)

def LI(a):
  """an int64 torch index tensor"""
  return torch.tensor(np.asarray(a), dtype=torch.long)

# ---------------------------------------------------------------- reshape / view / permute / transpose / expand

@pytest.mark.parametrize("shape,new", [
  ((2, 3, 4), (6, 4)), ((2, 3, 4), (-1,)), ((2, 3, 4), (4, -1, 2)), ((24,), (2, 3, 4)), ((2, 3, 4), (3, 1, 8, 1)),
  ((5,), (1, 5, 1)), ((), (1, 1)), ((1, 1), ()), ((), (-1,)), ((0, 3), (3, 0)), ((2, 0, 3), (-1,)), ((0, 4), (2, 0, 2)),
])
@pytest.mark.browser(shape=[(2, 3, 4)], new=[(4, -1, 2)])
def test_reshape(device, shape, new):
  # tuple form (torch accepts both reshape(a, b) and reshape((a, b))); needed anyway for a 0-d target
  check_op([shape], lambda x: x.reshape(new), device=device)
  if new: check_op([shape], lambda x: x.reshape(*new), device=device)

@pytest.mark.parametrize("shape,new", [((2, 3, 4), (4, 6)), ((12,), (3, -1)), ((3, 4), (2, 1, 6))])
def test_view(device, shape, new):
  check_op([shape], lambda x: x.view(*new), device=device)

def test_reshape_wrong_size_raises(device):
  with pytest.raises(ValueError):
    Tensor(rand_np((2, 3)), device=device).reshape(4, 2)

@pytest.mark.parametrize("order", [(3, 1, 0, 2), (0, 2, 1, 3), (3, 2, 1, 0), (-1, 0, -3, 2)])
def test_permute(device, order):
  check_op([(2, 3, 4, 5)], lambda x: x.permute(*order), device=device)

def test_transpose(device):
  check_op([(2, 3, 4)], lambda x: x.transpose(0, 2), device=device)
  check_op([(2, 3, 4)], lambda x: x.transpose(-1, -2), device=device)
  check_op([(3, 5)], lambda x: x.transpose(1, 0), lambda x: x.transpose(), device=device)
  check_op([(3, 5)], lambda x: x.T, device=device)
  check_op([(1, 4)], lambda x: x.T * 2, device=device)

@pytest.mark.parametrize("shape,new", [((3, 1), (3, 4)), ((1, 3), (2, 4, 3)), ((2, 1, 1), (-1, 3, 4)), ((1,), (5,)), ((), (2, 3))])
def test_expand(device, shape, new):
  check_op([shape], lambda x: x.expand(*new), device=device)

# ---------------------------------------------------------------- pad / shrink / flip

# (input shape, tinyweb padding, equivalent torch F.pad padding, mode, value)
PADS = [
  ((3, 5), (1, 2), (1, 2), "constant", 1.5),
  ((2, 3, 4), (1, 2, 0, 3), (1, 2, 0, 3), "constant", -2.0),
  ((2, 3, 4), ((0, 0), (1, 2), (2, 1)), (2, 1, 1, 2), "constant", 0.5),
  ((2, 3, 4), (None, (0, 1), (3, 0)), (3, 0, 0, 1), "constant", 2.0),
  ((3, 5, 6), (-1, 1, 2, -2), (-1, 1, 2, -2), "constant", 1.0),           # negative padding crops
  ((3, 5, 6), ((-1, 0), None, (1, -2)), (1, -2, 0, 0, -1, 0), "constant", 0.0),
  ((2, 3, 5, 6), (2, 1, 1, 2), (2, 1, 1, 2), "reflect", None),
  ((2, 3, 7), (3, 2), (3, 2), "reflect", None),
  ((2, 3, 5, 6), (None, None, (1, 2), (2, 1)), (2, 1, 1, 2), "reflect", None),
  ((2, 3, 4, 5), (1, 3, 2, 0), (1, 3, 2, 0), "replicate", None),
  ((2, 3, 4), (0, 4), (0, 4), "replicate", None),
  ((2, 3, 4, 5), ((0, 0), (0, 0), (3, 1), (0, 2)), (0, 2, 3, 1), "replicate", None),
]

@pytest.mark.parametrize("shape,twpad,thpad,mode,value", PADS)
@pytest.mark.browser(shape=[(2, 3, 7)])
def test_pad(device, shape, twpad, thpad, mode, value):
  if mode == "constant":
    check_op([shape], lambda x: F.pad(x, thpad, mode="constant", value=value),
             lambda x: x.pad(twpad, mode="constant", value=value), device=device)
  else:
    check_op([shape], lambda x: F.pad(x, thpad, mode=mode), lambda x: x.pad(twpad, mode=mode), device=device)

def test_pad_default_mode_is_zero_constant(device):
  check_op([(2, 3)], lambda x: F.pad(x, (1, 1, 2, 0)), lambda x: x.pad((1, 1, 2, 0)), device=device)

def test_shrink(device):
  check_op([(4, 5, 6)], lambda x: x[1:3, :, 0:2], lambda x: x.shrink(((1, 3), None, (0, 2))), device=device)
  check_op([(4, 5)], lambda x: x[0:4, 4:5], lambda x: x.shrink(((0, 4), (4, 5))), device=device)
  check_op([(4, 5)], lambda x: x[2:2, :], lambda x: x.shrink(((2, 2), None)), device=device)

@pytest.mark.parametrize("axis", [0, -1, (0, 2), (0, 1, 2)])
@pytest.mark.browser(axis=[(0, 2)])
def test_flip(device, axis):
  dims = axis if isinstance(axis, tuple) else (axis,)
  check_op([(3, 4, 5)], lambda x: torch.flip(x, dims), lambda x: x.flip(axis), device=device)

# ---------------------------------------------------------------- squeeze / unsqueeze / flatten / unflatten / repeat

@pytest.mark.parametrize("dim", [None, 0, -2, 1])
def test_squeeze(device, dim):
  if dim is None: check_op([(1, 3, 1, 4)], lambda x: x.squeeze(), device=device)
  else: check_op([(1, 3, 1, 4)], lambda x: x.squeeze(dim), device=device)   # squeeze of a non-1 dim is a no-op

@pytest.mark.parametrize("dim", [0, 2, -1, -3])
def test_unsqueeze(device, dim):
  check_op([(3, 4)], lambda x: x.unsqueeze(dim), device=device)

def test_unsqueeze_0d(device):
  check_op([()], lambda x: x.unsqueeze(0), device=device)

@pytest.mark.parametrize("start,end", [(1, -1), (1, 2), (0, -2)])
def test_flatten(device, start, end):
  check_op([(2, 3, 4, 5)], lambda x: x.flatten(start, end), device=device)

def test_flatten_default(device):
  check_op([(2, 3, 4)], lambda x: x.flatten(), device=device)

@pytest.mark.parametrize("dim,sizes", [(1, (2, 3)), (-1, (2, -1)), (0, (1, 4))])
def test_unflatten(device, dim, sizes):
  check_op([(4, 6, 4)], lambda x: x.unflatten(dim, sizes), device=device)

@pytest.mark.parametrize("shape,reps", [((2, 3), (2, 1)), ((2, 3), (1, 2, 3)), ((3,), (2, 2)), ((2, 1, 3), (1, 4, 1))])
def test_repeat(device, shape, reps):
  check_op([shape], lambda x: x.repeat(*reps), device=device)

# ---------------------------------------------------------------- cat / stack / split / chunk

@pytest.mark.parametrize("shapes,dim", [
  ([(2, 3, 4), (2, 1, 4), (2, 5, 4)], 1),
  ([(2, 3, 1), (2, 3, 4), (2, 3, 2)], -1),
  ([(1, 3), (4, 3)], 0),
  ([(2, 2, 4), (2, 0, 4), (2, 3, 4)], -2),
])
@pytest.mark.browser(dim=[1])
def test_cat(device, shapes, dim):
  check_op(shapes, lambda *xs: torch.cat(xs, dim=dim), lambda *xs: Tensor.cat(*xs, dim=dim), device=device)
  check_op(shapes, lambda *xs: torch.cat(xs, dim=dim), lambda x, *rest: x.cat(*rest, dim=dim), device=device)

@pytest.mark.parametrize("dim", [0, 1, -1])
def test_stack(device, dim):
  check_op([(3, 4)] * 3, lambda *xs: torch.stack(xs, dim=dim), lambda *xs: Tensor.stack(*xs, dim=dim), device=device)

def test_stack_method(device):
  check_op([(2, 3), (2, 3)], lambda a, b: torch.stack([a, b], dim=-2), lambda a, b: a.stack(b, dim=-2), device=device)

def _cmp_pieces(tw_parts, th_parts):
  tw_parts, th_parts = list(tw_parts), list(th_parts)
  assert len(tw_parts) == len(th_parts), f"{len(tw_parts)} pieces vs torch {len(th_parts)}"
  for a, b in zip(tw_parts, th_parts):
    assert tuple(a.shape) == tuple(b.shape)
    np.testing.assert_array_equal(a.numpy(), b.numpy())

@pytest.mark.parametrize("sizes,dim", [(3, 0), ([2, 5], 0), (2, 1), ([1, 3], -1)])
def test_split(device, sizes, dim):
  x = rand_np((7, 4))
  _cmp_pieces(Tensor(x, device=device).split(sizes, dim=dim), torch.tensor(x).split(sizes, dim=dim))
  # gradient: weight each piece differently and put them back together
  check_op([(7, 4)], lambda x: torch.cat([p * (i + 1) for i, p in enumerate(x.split(sizes, dim=dim))], dim=dim),
           lambda x: Tensor.cat(*[p * (i + 1) for i, p in enumerate(x.split(sizes, dim=dim))], dim=dim), device=device)

@pytest.mark.parametrize("n,dim", [(3, 0), (3, 1), (7, 0), (2, -1)])   # (3, 1): 4 split in 3 chunks gives only 2 (like torch)
def test_chunk(device, n, dim):
  x = rand_np((7, 4))
  _cmp_pieces(Tensor(x, device=device).chunk(n, dim=dim), torch.tensor(x).chunk(n, dim=dim))
  check_op([(7, 4)], lambda x: torch.cat([p * (i - 1.5) for i, p in enumerate(x.chunk(n, dim=dim))], dim=dim),
           lambda x: Tensor.cat(*[p * (i - 1.5) for i, p in enumerate(x.chunk(n, dim=dim))], dim=dim), device=device)

# ---------------------------------------------------------------- __getitem__

def check_index_np(shape, idx, device, seed=0):
  """basic indexing (any slice steps, incl negative ones torch lacks) against numpy; the gradient of
  sum(x[idx] * cot) is cot scattered (added) back to the positions it was read from."""
  x = rand_np(shape, seed=seed)
  xt = Tensor(x, device=device, requires_grad=True)
  out = xt[idx]
  exp = np.asarray(x[idx])
  assert tuple(out.shape) == exp.shape, f"shape {out.shape} vs numpy {exp.shape}"
  np.testing.assert_array_equal(out.numpy(), exp)
  cot = np.asarray(rand_np(exp.shape, -1.0, 1.0, seed=seed + 100), dtype=np.float32)
  (out * Tensor(cot, device=device)).sum().backward()
  pos = np.asarray(np.arange(x.size).reshape(shape)[idx])
  g = np.bincount(pos.ravel(), weights=cot.ravel().astype(np.float64), minlength=x.size).reshape(shape)
  assert xt.grad is not None
  np.testing.assert_allclose(xt.grad.numpy(), g, atol=1e-6, rtol=1e-6)

S = slice
BASIC = [
  1, -1, (1, 2), (1, 2, 3), (-1, -2, -3), S(1, 3), (S(None), S(1, None, 2)), (S(None, None, -1),),
  (S(None), S(None, None, -2)), (S(3, 0, -2),), (S(-1, None, -1), S(-2, 0, -1)), (S(None, None, 3), S(-4, -1), S(5, 0, -3)),
  None, (None, S(None), None), (Ellipsis, 1), (Ellipsis, None), (1, Ellipsis, S(None, None, -2), None),
  (S(None), None, -1, Ellipsis), (S(2, 2),), (S(1, 100),), (S(-100, 2), Ellipsis, S(4, -100, -1)), Ellipsis,
]

@pytest.mark.parametrize("idx", BASIC, ids=[repr(i) for i in BASIC])
@pytest.mark.browser(idx=[(1, Ellipsis, S(None, None, -2), None)])
def test_getitem_basic(device, idx):
  check_index_np((4, 5, 6), idx, device)

# fancy indexing against torch; each case builds the index with `I` (int64 torch tensor or int32 tinyweb tensor)
FANCY = {
  "tensor_neg": lambda I: I([0, 2, -1]),
  "tensor_dup": lambda I: I([1, 1, 3, 1]),
  "tensor_2d": lambda I: I([[0, 3], [-2, 1]]),
  "tensor_0d": lambda I: I(2),
  "cols": lambda I: (slice(None), I([4, 0, -1])),
  "two": lambda I: (I([0, 1, 3]), I([2, -1, 0])),
  "two_bcast": lambda I: (I([[0], [3]]), I([1, 2, 4])),
  "separated": lambda I: (I([0, 2]), slice(None), I([1, 5])),
  "middle": lambda I: (slice(1, 3), I([0, 4]), slice(None, None, 2)),
  "int_adjacent": lambda I: (2, I([3, 0])),
  "int_separated": lambda I: (1, slice(None), I([0, 2])),   # torch: the int is applied first -> shape (5, 2)
  "none": lambda I: (None, I([1, 0]), 2),
  "list": lambda I: [0, 2, 3],
  "ellipsis_list": lambda I: (Ellipsis, [5, 0]),
}

@pytest.mark.parametrize("name", list(FANCY))
@pytest.mark.browser(name=["separated"])
def test_getitem_fancy(device, name):
  mk = FANCY[name]
  check_op([(4, 5, 6)], lambda x: x[mk(LI)], lambda x: x[mk(lambda a: TI(a, device))], device=device)

def test_getitem_out_of_range_raises(device):
  x = Tensor(rand_np((4, 5)), device=device)
  with pytest.raises(IndexError): x[4]
  with pytest.raises(IndexError): x[-5]
  with pytest.raises(IndexError): x[0, 5]

# ---------------------------------------------------------------- __setitem__ / assign

def _set_scalar(a, T): a[1:3] = 5.0
def _set_tensor_step(a, T): a[:, ::2] = T(np.arange(12, dtype=np.float32).reshape(4, 3))
def _set_bcast_row(a, T): a[1:3] = T(np.array([1, 2, 3, 4, 5, 6], dtype=np.float32))
def _set_ellipsis(a, T): a[..., -1] = -1.0
def _set_neg_step(a, T): a[::-1, 0] = T(np.array([10, 20, 30, 40], dtype=np.float32))
def _set_element(a, T): a[2, 3] = 7.0
def _set_row(a, T): a[-1] = T(np.full((6,), 9.5, dtype=np.float32))

SETS = [_set_scalar, _set_tensor_step, _set_bcast_row, _set_ellipsis, _set_neg_step, _set_element, _set_row]

@pytest.mark.parametrize("fn", SETS, ids=[f.__name__ for f in SETS])
@pytest.mark.browser(fn=[_set_neg_step])
def test_setitem(device, fn):
  a = rand_np((4, 6))
  x = Tensor(a.copy(), device=device)
  fn(x, lambda v: Tensor(v, device=device))
  fn(a, lambda v: v)
  np.testing.assert_array_equal(x.numpy(), a)
  np.testing.assert_allclose((x * 2).sum(axis=0).numpy(), (a * 2).sum(axis=0), rtol=1e-5, atol=1e-5)  # usable afterwards

def test_setitem_int_and_zeros(device):
  a = rand_np((3, 4), 0, 10, np.int32)
  x = Tensor(a.copy(), device=device)
  x[0] = 3
  a[0] = 3
  np.testing.assert_array_equal(x.numpy(), a)
  z = Tensor.zeros(4, 4, device=device)
  z[1:3, 1:3] = 1.0
  e = np.zeros((4, 4), np.float32)
  e[1:3, 1:3] = 1.0
  np.testing.assert_array_equal(z.numpy(), e)

def test_assign(device):
  a, b = rand_np((3, 4), seed=1), rand_np((3, 4), seed=2)
  x = Tensor(a, device=device)
  y = x + 1
  np.testing.assert_allclose(y.numpy(), a + 1, rtol=1e-6)
  x.assign(Tensor(b, device=device))
  np.testing.assert_array_equal(x.numpy(), b)
  np.testing.assert_allclose((x * 3).numpy(), b * 3, rtol=1e-6)
  x.assign(x * 2)
  np.testing.assert_allclose(x.numpy(), b * 2, rtol=1e-6)

# ---------------------------------------------------------------- gather / scatter / masked_fill / one_hot / triu / tril

@pytest.mark.parametrize("dim,ishape", [(0, (3, 4, 5)), (1, (3, 6, 5)), (-1, (2, 4, 7)), (2, (3, 4, 2)), (1, (2, 2, 3))])
@pytest.mark.browser(dim=[1], ishape=[(3, 6, 5)])
def test_gather(device, dim, ishape):
  xshape = (3, 4, 5)
  idx = rand_np(ishape, 0, xshape[dim], np.int32, seed=7)
  check_op([xshape], lambda x: x.gather(dim, LI(idx)), lambda x: x.gather(dim, TI(idx, device)), device=device)

def _perm_index(rows, n, k, seed):
  rng = np.random.default_rng(seed)
  return np.stack([rng.permutation(n)[:k] for _ in range(rows)]).astype(np.int32)

def test_scatter(device):
  idx = _perm_index(4, 5, 3, 1)        # no duplicates along dim 1: result is deterministic
  check_op([(4, 5), (4, 3)], lambda x, s: x.scatter(1, LI(idx), s), lambda x, s: x.scatter(1, TI(idx, device), s), device=device)
  idx0 = _perm_index(5, 4, 2, 2).T.copy()   # (2, 5) along dim 0
  check_op([(4, 5), (2, 5)], lambda x, s: x.scatter(0, LI(idx0), s), lambda x, s: x.scatter(0, TI(idx0, device), s), device=device)

def test_scatter_scalar_src(device):
  idx = _perm_index(3, 6, 2, 3)
  check_op([(3, 6)], lambda x: x.scatter(1, LI(idx), 2.5), lambda x: x.scatter(1, TI(idx, device), 2.5), device=device)

@pytest.mark.browser
def test_scatter_add(device):
  idx = rand_np((4, 7), 0, 5, np.int32, seed=4)      # duplicates get summed
  check_op([(4, 5), (4, 7)], lambda x, s: x.scatter_add(1, LI(idx), s),
           lambda x, s: x.scatter(1, TI(idx, device), s, reduce="add"), device=device)
  idx0 = rand_np((6, 5), 0, 4, np.int32, seed=5)
  check_op([(4, 5), (6, 5)], lambda x, s: x.scatter_add(0, LI(idx0), s),
           lambda x, s: x.scatter(0, TI(idx0, device), s, reduce="add"), device=device)

def test_scatter_multiply(device):
  idx = rand_np((3, 6), 0, 4, np.int32, seed=6)
  check_op([(3, 4), (3, 6)], lambda x, s: x.scatter_reduce(1, LI(idx), s, "prod", include_self=True),
           lambda x, s: x.scatter(1, TI(idx, device), s, reduce="multiply"), device=device, low=0.5, high=1.5, grad=False)

@pytest.mark.parametrize("mshape", [(4, 5), (1, 5), (4, 1)])
@pytest.mark.browser(mshape=[(1, 5)])
def test_masked_fill(device, mshape):
  mask = rand_np(mshape, dtype=np.bool_, seed=3)
  check_op([(4, 5)], lambda x: x.masked_fill(torch.tensor(mask), 3.0),
           lambda x: x.masked_fill(Tensor(mask, device=device), 3.0), device=device)

@pytest.mark.parametrize("shape,n", [((6,), 4), ((2, 3), 5)])
def test_one_hot(device, shape, n):
  idx = rand_np(shape, 0, n, np.int32, seed=8)
  idx.flat[0] = n - 1
  check_op(None, lambda y: F.one_hot(y.long(), n), lambda y: y.one_hot(n), vals=[idx], device=device)

@pytest.mark.parametrize("fn", ["triu", "tril"])
@pytest.mark.parametrize("shape,diag", [((4, 5), 0), ((4, 5), 1), ((5, 4), -1), ((2, 3, 4), 2)])
@pytest.mark.browser(fn=["triu"], diag=[1])
def test_triu_tril(device, fn, shape, diag):
  check_op([shape], lambda x: getattr(x, fn)(diagonal=diag), device=device)

# ---------------------------------------------------------------- chains of movement ops (view composition)

@pytest.mark.browser
def test_chain_reshape_permute_pad_shrink_flip_expand(device):
  check_op([(2, 3, 4), (3, 4, 7)],
    lambda x, y: ((F.pad(x.reshape(6, 4).permute(1, 0), (2, 1, 1, 0), value=0.5)[0:4, 1:8].flip(0)
                   .reshape(1, 4, 7).expand(3, 4, 7) * 2 + 1) * y).sum(1),
    lambda x, y: ((x.reshape(6, 4).permute(1, 0).pad(((1, 0), (2, 1)), value=0.5).shrink(((0, 4), (1, 8))).flip(0)
                   .reshape(1, 4, 7).expand(3, 4, 7) * 2 + 1) * y).sum(axis=1), device=device)

def test_chain_transpose_reflect_flip(device):
  check_op([(4, 6)],
    lambda x: (torch.flip(F.pad(x.T.reshape(3, 2, 4).permute(2, 0, 1), (1, 1), mode="reflect"), (0, 2))[1:3]
               .unsqueeze(1).expand(2, 5, 3, 4).exp()).mean(dim=(0, 3)),
    lambda x: (x.T.reshape(3, 2, 4).permute(2, 0, 1).pad((1, 1), mode="reflect").flip((0, 2)).shrink(((1, 3), None, None))
               .unsqueeze(1).expand(2, 5, 3, 4).exp()).mean(axis=(0, 3)), device=device)

def test_chain_strided_replicate(device):
  check_op([(3, 4, 5), (9, 4, 3)],
    lambda x, y: (F.pad(x.permute(2, 0, 1)[1:, :, ::2].reshape(4, 6), (1, 2), mode="replicate").T
                  .reshape(9, 4, 1).expand(9, 4, 3) * y).sum(0).relu().sum(-1),
    lambda x, y: (x.permute(2, 0, 1)[1:, :, ::2].reshape(4, 6).pad((1, 2), mode="replicate").T
                  .reshape(9, 4, 1).expand(9, 4, 3) * y).sum(axis=0).relu().sum(axis=-1), device=device)

def test_chain_expand_then_merge(device):
  # merging an expanded dim with a real one, then permuting and padding the result
  check_op([(3, 1, 4)],
    lambda x: F.pad(x.expand(3, 5, 4).reshape(15, 4).permute(1, 0).reshape(6, 10), (0, 0, 1, 1), value=-1.0).flip(1).sum(0) * 3,
    lambda x: x.expand(3, 5, 4).reshape(15, 4).permute(1, 0).reshape(6, 10).pad((0, 0, 1, 1), value=-1.0).flip(1).sum(axis=0) * 3,
    device=device)

def test_chain_negative_step_views(device):
  # x[::-2] has no torch equivalent, so the torch side flips first
  check_op([(8, 6)],
    lambda x: (torch.flip(x, (0,))[::2].reshape(2, 12).T.reshape(3, 4, 2)[:, 1:, :] ** 2).sum(dim=(0, 2)),
    lambda x: (x[::-2].reshape(2, 12).T.reshape(3, 4, 2)[:, 1:, :] ** 2).sum(axis=(0, 2)), device=device)

def test_chain_pad_of_pad_and_cat(device):
  check_op([(3, 4), (3, 4)],
    lambda a, b: torch.cat([F.pad(F.pad(a, (1, 0), value=-3.0).reshape(5, 3), (0, 0, 1, 1)),
                            torch.flip(b.T, (1,)).repeat(1, 1)[:, :3].squeeze()], dim=0).max(dim=1).values,
    lambda a, b: a.pad((1, 0), value=-3.0).reshape(5, 3).pad((0, 0, 1, 1)).cat(b.T.flip(1).repeat(1, 1)[:, :3].squeeze(), dim=0)
                 .max(axis=1), device=device)

@pytest.mark.browser
def test_chain_getitem_stack_gather(device):
  idx = np.array([[2, 0], [1, 1], [0, 2]], dtype=np.int32)
  check_op([(3, 4), (3, 4)],
    lambda a, b: torch.stack([a[:, 1:], b.flip(1)[:, :3]], dim=-1).sum(-1).gather(1, LI(idx)).sigmoid().sum(),
    lambda a, b: Tensor.stack(a[:, 1:], b.flip(1)[:, :3], dim=-1).sum(axis=-1).gather(1, TI(idx, device)).sigmoid().sum(),
    device=device)

# ---------------------------------------------------------------- edge arguments torch accepts (values against torch)
MOVE_EDGE = {
  "expand_minus1": ((1, 3), lambda x: x.expand(-1, 3)),
  "expand_new_dim": ((1, 3), lambda x: x.expand(2, -1, 3)),
  "expand_to_zero": ((1, 3), lambda x: x.expand(0, 3)),
  "reshape_numpy_ints": ((2, 3), lambda x: x.reshape(np.int64(3), np.int32(2))),
  "permute_negative": ((2, 3, 4), lambda x: x.permute(-1, 0, -2)),
  "repeat_zero": ((2, 3), lambda x: x.repeat(0, 1)),
  "repeat_numpy": ((2, 3), lambda x: x.repeat(np.int64(2), 1, 1)),
  "unflatten_infer": ((2, 6), lambda x: x.unflatten(1, (-1, 3))),
  "flatten_one_dim": ((2, 3, 4), lambda x: x.flatten(1, 1)),
  "sum_numpy_axis": ((2, 3), lambda x: x.sum(np.int64(1))),
}

@pytest.mark.parametrize("name", list(MOVE_EDGE))
def test_movement_edge_arguments(device, name):
  shape, fn = MOVE_EDGE[name]
  check_op([shape], fn, device=device)

def test_movement_edge_arguments_spelled_differently(device):
  x = rand_np((2, 3))
  check_op([(2, 3)], lambda t: F.pad(t, (-1, -2)), lambda t: t.pad((-1, -2)), device=device)   # crops to size 0
  check_op([(2, 3)], lambda t: F.pad(t, (np.int64(1), 0)), lambda t: t.pad((np.int64(1), 0)), device=device)
  assert [p.shape for p in Tensor(np.zeros((0, 2), np.float32), device=device).split(0)] == [tuple(p.shape) for p in torch.zeros(0, 2).split(0)]
  assert [p.shape for p in Tensor(x, device=device).split([0, 3, 0], 1)] == [tuple(p.shape) for p in torch.tensor(x).split([0, 3, 0], 1)]
  c = Tensor.cat(Tensor(x, device=device), Tensor(np.ones((1, 3), np.int32), device=device))
  r = torch.cat([torch.tensor(x), torch.ones(1, 3, dtype=torch.int32)])
  assert c.dtype.name == str(r.dtype).replace("torch.", "")
  np.testing.assert_array_equal(c.numpy(), r.numpy())

# ---------------------------------------------------------------- bools and numpy scalars as indices (torch's and numpy's meaning)
BOOL_INDEX = {
  "true": lambda B: B(True), "false": lambda B: B(False), "none_true": lambda B: (None, B(True)),
  "int_true": lambda B: (0, B(True)), "true_slice_int": lambda B: (B(True), slice(None), 1),
  "false_ellipsis": lambda B: (Ellipsis, B(False)), "true_int_true": lambda B: (B(True), 1, B(True), 2),
  "true_false": lambda B: (B(True), B(False)), "true_list": lambda B: (B(True), [1, 0, 1]), "list_true": lambda B: ([1, 0], B(True)),
  "int_true_list": lambda B: (0, B(True), [2, 0]), "false_2d_list": lambda B: (B(False), [[0], [1]]),
}

@pytest.mark.parametrize("name", list(BOOL_INDEX))
@pytest.mark.parametrize("kind", ["python", "tensor"])
def test_getitem_bool_scalar(device, name, kind):
  # a bool is not an int here: True adds a dimension of size 1, False one of size 0 (x[True] used to read x[1]), an
  # index of that dimension that combines with other bools and tensor/list indices
  mk = BOOL_INDEX[name]
  check_op([(2, 3)], lambda x: x[mk(lambda b: b if kind == "python" else torch.tensor(b))],
           lambda x: x[mk(lambda b: b if kind == "python" else Tensor(b, device=device))], device=device)

def test_getitem_numpy_scalars_and_arrays(device):
  x = rand_np((3, 4))
  t = Tensor(x, device=device)
  for idx in [np.int64(1), (np.int32(-1), np.int8(2)), np.bool_(True), (np.bool_(False), 0), np.array(2), np.array([True, False, True]),
              (slice(None), np.array([3, 0])), np.array([[0], [2]])]:
    np.testing.assert_array_equal(t[idx].numpy(), x[idx])

@pytest.mark.parametrize("idx", [True, False, (None, True), (0, True), (np.bool_(True), 1)], ids=str)
def test_setitem_bool_scalar(device, idx):
  a = rand_np((2, 3))
  x = Tensor(a.copy(), device=device)
  x[idx] = 7.0
  ref = torch.tensor(a)
  ref[idx if not isinstance(idx, tuple) else tuple(bool(i) if isinstance(i, np.bool_) else i for i in idx)] = 7.0
  np.testing.assert_array_equal(x.numpy(), ref.numpy())

def test_setitem_list_and_array_values(device):
  a = rand_np((3, 4))
  x = Tensor(a.copy(), device=device)
  x[1] = [1.0, 2.0, 3.0, 4.0]
  x[:, 0] = np.array([5.0, 6.0, 7.0], np.float32)
  ref = torch.tensor(a)
  ref[1] = torch.tensor([1.0, 2.0, 3.0, 4.0])
  ref[:, 0] = torch.tensor([5.0, 6.0, 7.0])
  np.testing.assert_array_equal(x.numpy(), ref.numpy())
