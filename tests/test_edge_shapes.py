"""Zero-size and size-1 dims through every kind of op (elementwise, movement, reductions, matmul, conv/pool, losses),
forward and gradients against torch. Zero-size values compute nothing: the scheduler makes them constants (a pad
around one reads only the padding), so no kernel reads or binds an empty buffer. Reductions over an empty axis give
torch's answer: sum 0, prod 1, mean nan, any False, all True, logsumexp -inf, softmax an empty tensor; max/min raise
like torch (IndexError naming the dim, RuntimeError for a full reduction)."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Tensor
from helpers import check_op

TOL = dict(atol=1e-5, rtol=1e-4, grad_atol=1e-4, grad_rtol=1e-3)

def same(f): return f, f

# name -> (input shapes, torch fn, tinyweb fn); every case runs forward and (float inputs) gradients
ZERO = {
  # elementwise, with broadcasting
  "exp": ([(0, 3)], *same(lambda x: x.exp())),
  "relu_sigmoid": ([(2, 0)], *same(lambda x: x.relu() + x.sigmoid())),
  "add_bcast": ([(0, 3), (3,)], *same(lambda x, y: x + y)),
  "mul_bcast_to_empty": ([(2, 0), (2, 1)], *same(lambda x, y: x * y)),
  "sub_bcast_outer": ([(0, 1), (1, 4)], *same(lambda x, y: x - y)),
  "where": ([(0, 3), (0, 3)], *same(lambda x, y: (x > 0).where(x, y) if isinstance(x, Tensor) else torch.where(x > 0, x, y))),
  # movement
  "reshape": ([(0, 3)], *same(lambda x: x.reshape(3, 0, 2))),
  "permute": ([(2, 0, 3)], *same(lambda x: x.permute(2, 0, 1))),
  "expand": ([(1, 3)], *same(lambda x: x.expand(0, 3))),
  "pad_zero": ([(0, 3)], lambda x: F.pad(x, (1, 1, 2, 0)), lambda x: x.pad((1, 1, 2, 0))),
  "pad_value": ([(2, 0)], lambda x: F.pad(x, (1, 2), value=1.5), lambda x: x.pad((1, 2), value=1.5)),
  "pad_then_ops": ([(0,)], lambda x: F.pad(x * 2 + 1, (2, 1), value=-1.0).exp(), lambda x: (x * 2 + 1).pad((2, 1), value=-1.0).exp()),
  "flip_transpose": ([(0, 3)], lambda x: x.flip(0).T, lambda x: x.flip(0).T),
  "slice_to_empty": ([(3, 4)], *same(lambda x: x[1:1] * 2)),
  "slice_of_empty": ([(0, 4)], *same(lambda x: x[:, 1:3])),
  "unsqueeze_flatten": ([(2, 0, 3)], *same(lambda x: x.unsqueeze(1).flatten(2))),
  "repeat": ([(0, 2)], *same(lambda x: x.repeat(3, 2))),
  "cat_empty_part": ([(0, 3), (2, 3)], lambda x, y: torch.cat([x, y, x]), lambda x, y: x.cat(y, x)),
  "cat_all_empty": ([(0, 3), (0, 3)], lambda x, y: torch.cat([x, y], 1), lambda x, y: x.cat(y, dim=1)),
  "stack_empty": ([(0, 3), (0, 3)], lambda x, y: torch.stack([x, y], 1), lambda x, y: Tensor.stack(x, y, dim=1)),
  "split_empty": ([(0, 4)], lambda x: torch.cat(torch.split(x, 2, 1)[::-1]), lambda x: Tensor.cat(*x.split(2, 1)[::-1])),
  # reductions over an empty axis, and over a non-empty axis of an empty tensor
  "sum": ([(2, 0)], lambda x: x.sum(1) + x.sum(), lambda x: x.sum(1) + x.sum()),
  "sum_keepdim_other_axis": ([(0, 3)], lambda x: x.sum(1, keepdim=True), lambda x: x.sum(1, keepdim=True)),
  "prod": ([(2, 0)], lambda x: x.prod(1), lambda x: x.prod(1)),
  "mean_empty_axis": ([(2, 0)], lambda x: x.mean(1), lambda x: x.mean(1)),
  "mean_all": ([(0, 3)], *same(lambda x: x.mean())),
  "mean_other_axis": ([(0, 3)], lambda x: x.mean(1), lambda x: x.mean(1)),
  "max_min_other_axis": ([(0, 3)], lambda x: x.amax(1) + x.amin(1), lambda x: x.max(1) + x.min(1)),
  "softmax_empty_axis": ([(2, 0)], lambda x: x.softmax(1), lambda x: x.softmax(1)),
  "softmax_other_axis": ([(2, 1, 0)], lambda x: x.softmax(0), lambda x: x.softmax(0)),
  "log_softmax_empty_axis": ([(3, 0)], lambda x: x.log_softmax(1), lambda x: x.log_softmax(1)),
  "logsumexp_empty_axis": ([(2, 0)], lambda x: x.logsumexp(1), lambda x: x.logsumexp(1)),
  "logsumexp_all": ([(0,)], lambda x: x.logsumexp(0), lambda x: x.logsumexp()),
  "logsumexp_other_axis": ([(0, 3)], lambda x: x.logsumexp(1, keepdim=True), lambda x: x.logsumexp(1, keepdim=True)),
  "cumsum_cumsum_pad": ([(0,)], lambda x: F.pad(x.cumsum(0).cumsum(0), (1, 1), value=1.5), lambda x: x.cumsum(0).cumsum(0).pad((1, 1), value=1.5)),
  "scans_empty_axis": ([(2, 0)], lambda x: x.cumsum(1) + x.cumprod(1) + x.cummax(1)[0] + x.logcumsumexp(1),
                       lambda x: x.cumsum(1) + x.cumprod(1) + x.cummax(1)[0] + x.logcumsumexp(1)),
  "sum_then_expand": ([(2, 0)], lambda x: x.sum(1, keepdim=True).expand(2, 3) * 2, lambda x: x.sum(1, keepdim=True).expand(2, 3) * 2),
  # matmul: K = 0 gives zeros; M or N = 0 an empty result
  "matmul_k0": ([(2, 0), (0, 3)], *same(lambda a, b: a @ b)),
  "matmul_m0": ([(0, 2), (2, 3)], *same(lambda a, b: a @ b)),
  "matmul_n0": ([(2, 3), (3, 0)], *same(lambda a, b: a @ b)),
  "dot_k0": ([(0,), (0,)], *same(lambda a, b: a @ b)),
  "vec_mat_k0": ([(0,), (0, 3)], *same(lambda a, b: a @ b)),
  "batched_b0": ([(0, 2, 3), (3, 4)], *same(lambda a, b: a @ b)),
  "softmax_matmul": ([(2, 1, 0), (0,)], lambda a, b: a.softmax(0) @ b, lambda a, b: a.softmax(0) @ b),
  "matmul_k0_chain": ([(2, 0), (0, 3), (3, 2)], *same(lambda a, b, c: (a @ b + 1) @ c)),
  # conv / pool with an empty batch
  "conv2d_batch0": ([(0, 2, 5, 5), (3, 2, 3, 3), (3,)], lambda x, w, b: F.conv2d(x, w, b, padding=1), lambda x, w, b: x.conv2d(w, b, padding=1)),
  "conv2d_batch0_strided": ([(0, 2, 5, 5), (4, 1, 2, 2)], lambda x, w: F.conv2d(x, w, stride=2, groups=2), lambda x, w: x.conv2d(w, stride=2, groups=2)),
  "conv_transpose_batch0": ([(0, 2, 3, 3), (2, 3, 3, 3)], lambda x, w: F.conv_transpose2d(x, w, stride=2), lambda x, w: x.conv_transpose2d(w, stride=2)),
  "max_pool_batch0": ([(0, 2, 4, 4)], lambda x: F.max_pool2d(x, 2), lambda x: x.max_pool2d(2)),
  "avg_pool_batch0": ([(0, 2, 5, 5)], lambda x: F.avg_pool2d(x, 3, 2, 1), lambda x: x.avg_pool2d(3, 2, padding=1)),
  # norms and losses over an empty batch
  "layernorm_batch0": ([(0, 3)], lambda x: F.layer_norm(x, (3,)), lambda x: x.layernorm()),
  "mse_loss_empty": ([(0, 3), (0, 3)], lambda x, y: F.mse_loss(x, y), lambda x, y: x.mse_loss(y)),
}

@pytest.mark.parametrize("name", list(ZERO))
def test_zero_size(device, name):
  shapes, tfn, wfn = ZERO[name]
  check_op(shapes, tfn, wfn, device=device, **TOL)

def test_zero_size_cross_entropy(device):
  y = np.zeros((0,), np.int64)
  check_op([(0, 3)], lambda x: F.cross_entropy(x, torch.tensor(y)), lambda x: x.cross_entropy(Tensor(y.astype(np.int32), device=device)),
           device=device, **TOL)

def test_zero_size_int_and_bool(device):
  e = np.zeros((2, 0), np.int32)
  check_op(None, lambda x: x.sum(1) + x.prod(1), device=device, vals=[e])
  check_op(None, lambda x: (x + 1).pad((1, 1), value=7) if isinstance(x, Tensor) else F.pad(x + 1, (1, 1), value=7), device=device, vals=[e])
  b = np.zeros((0, 3), np.bool_)
  check_op(None, lambda x: torch.any(x, 0) | ~torch.all(x, 0), lambda x: x.any(0) | ~x.all(0), device=device, vals=[b])

def test_zero_size_repeat_with_a_negative_count(device):
  # torch refuses a count only where it makes a negative size: 0 * -1 is an empty dim (its backward then fails in torch)
  for shape, counts in (((0, 2), (3, -1, 2)), ((0,), (-1,)), ((2, 0), (2, -3))):
    got = Tensor(np.zeros(shape, np.float32), device=device).repeat(*counts)
    assert got.shape == tuple(torch.zeros(shape).repeat(*counts).shape) and got.numpy().size == 0
  with pytest.raises(ValueError, match=r"repeat: counts \(-1,\) for shape \(2,\) give a negative size"): Tensor.ones(2, device=device).repeat(-1)
  with pytest.raises(RuntimeError): torch.ones(2).repeat(-1)

@pytest.mark.parametrize("op", ["max", "min"])
def test_zero_size_reduction_without_identity_raises(device, op):
  """Like torch: IndexError naming the empty dim, RuntimeError for a reduction of all dims; over a non-empty axis of
  an empty tensor they are fine (test_zero_size)."""
  x = Tensor(np.zeros((2, 0), np.float32), device=device)
  with pytest.raises(IndexError, match=rf"{op}.*\(2, 0\).*axis 1"): getattr(x, op)(1)
  with pytest.raises(RuntimeError, match=rf"{op}.*\(2, 0\)"): getattr(x, op)()
  with pytest.raises(IndexError): getattr(torch.zeros(2, 0), op)(1)   # the types torch raises
  with pytest.raises(RuntimeError): getattr(torch.zeros(2, 0), op)()

@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_zero_size_arg_reduction_raises(device, op):
  """IndexError like torch, over an empty axis and over all of an empty tensor."""
  x = Tensor(np.zeros((2, 0), np.float32), device=device)
  for axis in (1, None):
    with pytest.raises(IndexError, match=rf"{op}.*\(2, 0\)"): getattr(x, op)(axis)
    with pytest.raises(IndexError): getattr(torch.zeros(2, 0), op)(axis)

def test_zero_size_gradient_flows_to_other_inputs(device):
  """An empty branch contributes nothing: the gradient of the other inputs is unchanged, that of the empty one empty."""
  check_op([(2, 0), (0, 3), (2, 3)], lambda a, b, c: (a @ b) * c + c.exp(), device=device, **TOL)
  check_op([(0, 3), (2, 3)], lambda a, b: torch.cat([a, b]).sum(0) * b, lambda a, b: a.cat(b).sum(0) * b, device=device, **TOL)

# size-1 dims: reductions, broadcasts and windows of one element
ONE = {
  "reduce_size1": ([(3, 1)], lambda x: x.sum(1) + x.amax(1) - x.amin(1) + x.prod(1) + x.mean(1),
                   lambda x: x.sum(1) + x.max(1) - x.min(1) + x.prod(1) + x.mean(1)),
  "reduce_all_1x1": ([(1, 1)], lambda x: x.sum() * x.amax() + x.logsumexp((0, 1)), lambda x: x.sum() * x.max() + x.logsumexp()),
  "softmax_size1": ([(1, 4, 1)], lambda x: x.softmax(2) + x.log_softmax(0), lambda x: x.softmax(2) + x.log_softmax(0)),
  "cumsum_size1": ([(1,)], lambda x: x.cumsum(0), lambda x: x.cumsum(0)),
  "bcast_rank": ([(1,), (1, 1, 1)], *same(lambda x, y: x * y + y)),
  "expand_size1": ([(1, 1)], *same(lambda x: x.expand(3, 1) * 2)),
  "matmul_1x1": ([(1, 1), (1, 1)], *same(lambda a, b: a @ b)),
  "vec_mat_1": ([(1,), (1, 3)], *same(lambda a, b: a @ b)),
  "mat_vec_1": ([(2, 1), (1,)], *same(lambda a, b: a @ b)),
  "conv_1x1_image": ([(1, 1, 1, 1), (1, 1, 1, 1)], lambda x, w: F.conv2d(x, w, stride=2, padding=1), lambda x, w: x.conv2d(w, stride=2, padding=1)),
  "conv_size1_kernel": ([(1, 1, 3, 1), (2, 1, 2, 1)], lambda x, w: F.conv2d(x, w, padding=1), lambda x, w: x.conv2d(w, padding=1)),
  "pool_k1": ([(1, 1, 1, 3)], lambda x: F.max_pool2d(x, 1, 2) + F.avg_pool2d(x, 1, 2), lambda x: x.max_pool2d(1, 2) + x.avg_pool2d(1, 2)),
  "pad_size1": ([(1,)], lambda x: F.pad(x, (2, 0), value=3.0) * x, lambda x: x.pad((2, 0), value=3.0) * x),
}

@pytest.mark.parametrize("name", list(ONE))
def test_size_one(device, name):
  shapes, tfn, wfn = ONE[name]
  check_op(shapes, tfn, wfn, device=device, **TOL)

ZERO_D = ["softmax(0)", "log_softmax(-1)", "logsumexp(0)", "max(0)", "min(-1)", "sum(0)", "mean(-1)", "prod(0)", "std(0, correction=0)",
          "cumsum(0)", "cumprod(-1)", "logcumsumexp(0)", "sum(0, keepdim=True)"]

@pytest.mark.parametrize("expr", ZERO_D)
def test_zero_dim_tensor_along_dim_0_or_minus_1(device, expr):
  """A 0-d tensor takes dim 0 and -1 (torch): reducing or scanning along it gives the op of one element, shape ()."""
  torch_expr = {"max(0)": "amax(0)", "min(-1)": "amin(-1)"}.get(expr, expr)   # (torch.max(dim) also gives indices)
  check_op(None, lambda x: eval(f"x.{expr}" if isinstance(x, Tensor) else f"x.{torch_expr}"), device=device, vals=[np.array(2.5, np.float32)], **TOL)
  for fn in ("argmax", "argmin"):
    assert getattr(Tensor(np.array(2.5, np.float32), device=device), fn)(0).tolist() == 0
  assert [t.item() for t in Tensor(np.array(2.5, np.float32), device=device).cummax(0)] == [2.5, 0]
  with pytest.raises(IndexError): Tensor(np.array(2.5, np.float32), device=device).softmax(1)

@pytest.mark.parametrize("ws", [(1, 3, 4), (2, 1, 3, 1), (3, 1), (1, 3, 1)])
def test_vector_at_batched_matrix_keeps_size_one_dims(device, ws):
  """(k,) @ (..., k, m) is (..., m), size-1 batch dims and m = 1 included (a size-1 batch dim was squeezed away)."""
  check_op([(3,), ws], lambda a, b: a @ b, device=device, **TOL)
