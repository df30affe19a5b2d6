"""Autograd semantics vs torch: chain rule through shared subexpressions, broadcasting, accumulation, detach,
requires_grad propagation, no_grad, gradient(), explicit output gradients, a small MLP, training mode."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Tensor, dtypes, Context
from helpers import check_op, rand_np

def rnd(shape, seed=0, low=-2.0, high=2.0):
  return rand_np(shape, low, high, np.float32, seed)

def pair(v, device):
  """the same float32 values as a torch leaf and a tinyweb leaf, both requiring grad"""
  return torch.tensor(v, requires_grad=True), Tensor(v, device=device, requires_grad=True)

def close(w, t, atol=1e-5, rtol=1e-4, msg=""):
  """tinyweb tensor `w` vs torch tensor (or numpy array) `t`: same shape and values"""
  exp = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
  assert w is not None, f"missing tinyweb tensor {msg}"
  got = w.numpy()
  assert got.shape == exp.shape, f"shape {got.shape} vs {exp.shape} {msg}"
  np.testing.assert_allclose(got, exp, atol=atol, rtol=rtol, err_msg=msg)

def scalar_loss_grads(fn, vals, device, atol=1e-5, rtol=1e-4):
  """fn builds a scalar loss with the same code in torch and tinyweb; compare loss and the grads of every input"""
  tt, ww = zip(*[pair(v, device) for v in vals])
  tl, wl = fn(*tt), fn(*ww)
  assert wl.shape == () and tl.shape == ()
  close(wl, tl, atol, rtol, "loss")
  tl.backward()
  wl.backward()
  for i, (t, w) in enumerate(zip(tt, ww)):
    close(w.grad, t.grad, atol * 10, rtol * 10, f"grad of input {i}")
  return tt, ww

# ---------------------------------------------------------------- chain rule / composite expressions

def test_shared_subexpression(device):
  def f(x, w):
    y = x * w
    return (y.exp() * y + y.sin()).sum()
  scalar_loss_grads(f, [rnd((3, 4), 0, -1, 1), rnd((3, 4), 1, -1, 1)], device)

def test_tensor_used_twice(device):
  vx = rnd((5,))
  x = Tensor(vx, device=device, requires_grad=True)
  (x * x + x).sum().backward()
  close(x.grad, 2 * vx + 1)

def test_tensor_used_in_many_ops(device):
  scalar_loss_grads(lambda x: (x.exp() * x.sin() / (x * x + 1) - x.tanh() * x).sum(), [rnd((4, 3))], device)

@pytest.mark.browser
def test_diamond_graph(device):
  def f(x):
    a = x.tanh()
    b, c = a * 2, a.sigmoid()
    return (b * c + a).mean()
  scalar_loss_grads(f, [rnd((2, 3, 4))], device)

def test_deep_chain_with_reuse(device):
  def f(x):
    y = x
    for _ in range(12): y = y * 0.9 + y.tanh() * 0.2
    return (y * x).sum()
  scalar_loss_grads(f, [rnd((6,))], device)

def test_matmul_with_own_transpose(device):
  scalar_loss_grads(lambda x: ((x @ x.T) * (x @ x.T)).sum(), [rnd((3, 4), 0, -1, 1)], device, rtol=1e-4, atol=1e-4)

@pytest.mark.browser
def test_two_layer_reuse_of_weight(device):
  scalar_loss_grads(lambda x, w: ((x @ w).relu() @ w.T).sum(), [rnd((2, 3)), rnd((3, 3), 1)], device, atol=1e-4)

COMPOSITES = {
  "softmax_weighted": ([(3, 5), (3, 5)], lambda x, w: (x.softmax(-1) * w).sum(-1)),
  "log_softmax": ([(4, 6)], lambda x: x.log_softmax(-1) * 1.5),
  "div_by_square": ([(3, 4), (3, 4)], lambda x, w: x / (w * w + 1)),
  "pow_tensor_exponent": ([(3, 4), (3, 4)], lambda x, w: (x * x + 1) ** (w * 0.5)),
  "max_all": ([(3, 4)], lambda x: x.max() * x),
  "mean_center": ([(3, 4)], lambda x: x - x.mean(axis=1, keepdim=True)),
  "var_std": ([(3, 4)], lambda x: (x - x.mean()) * x.var() + x.std(axis=1, keepdim=True)),
  "maximum_minimum": ([(3, 4), (3, 4)], lambda x, w: x.maximum(w) - x.minimum(w * 0.5)),
  "relu_sigmoid": ([(3, 4)], lambda x: x.relu() * x.sigmoid()),
  "abs_reciprocal": ([(3, 4)], lambda x: x.abs() + (x * x + 1).reciprocal()),
  "permute_reshape_mul": ([(2, 3, 4), (4, 6)], lambda x, w: x.permute(2, 0, 1).reshape(4, 6) * w),
}

@pytest.mark.parametrize("name", list(COMPOSITES))
@pytest.mark.browser(name=["pow_tensor_exponent"])
def test_composite_vs_torch(device, name):
  shapes, fn = COMPOSITES[name]
  check_op(shapes, fn, device=device, atol=1e-5, rtol=1e-4, grad_atol=1e-4, grad_rtol=1e-3)

def test_where_grad(device):
  check_op([(3, 4), (3, 4)], lambda x, w: torch.where(x > 0, x * 2, w * w), lambda x, w: (x > 0).where(x * 2, w * w),
           device=device)

def test_logsumexp_grad(device):
  check_op([(3, 5)], lambda x: torch.logsumexp(x * 2, dim=1), lambda x: (x * 2).logsumexp(axis=1), device=device)

def test_max_axis_grad(device):
  check_op([(3, 5)], lambda x: x.amax(dim=1) * 2, lambda x: x.max(axis=1) * 2, device=device)

def test_layernorm_grad(device):
  check_op([(3, 8)], lambda x: F.layer_norm(x, (8,), eps=1e-5), lambda x: x.layernorm(axis=-1, eps=1e-5), device=device,
           atol=1e-4, grad_atol=1e-3, grad_rtol=1e-3)

# ---------------------------------------------------------------- broadcasting: grads are reduced back to input shapes

BCAST = [((3, 1), (1, 4)), ((4,), (3, 4)), ((), (2, 3)), ((2, 1, 3), (4, 1)), ((1,), (2, 3, 1)), ((2, 3), (2, 3))]

@pytest.mark.parametrize("sa,sb", BCAST, ids=[f"{a}x{b}" for a, b in BCAST])
@pytest.mark.browser(sa=[(2, 1, 3)])
def test_broadcast_grad_shapes(device, sa, sb):
  va, vb = rnd(sa, 0), rnd(sb, 1)
  (ta, wa), (tb, wb) = pair(va, device), pair(vb, device)
  for a, b in ((ta, tb), (wa, wb)): (a * b + a - b * b).sum().backward()
  assert wa.grad.shape == sa and wb.grad.shape == sb
  close(wa.grad, ta.grad)
  close(wb.grad, tb.grad)

def test_broadcast_keepdim_reduction_grad(device):
  def f(x, y):
    return ((x - x.mean(axis=(0, 2), keepdim=True)) ** 2 * y).sum()
  scalar_loss_grads(f, [rnd((2, 3, 4)), rnd((3, 1))], device)

def test_expand_grad(device):
  vx = rnd((3, 1))
  x = Tensor(vx, device=device, requires_grad=True)
  (x.expand(3, 5) * Tensor(np.arange(15, dtype=np.float32).reshape(3, 5), device=device)).sum().backward()
  close(x.grad, np.arange(15, dtype=np.float32).reshape(3, 5).sum(1, keepdims=True))

# ---------------------------------------------------------------- accumulation across backward calls

def test_grad_accumulates_like_torch(device):
  vx = rnd((2, 3))
  (tx, wx) = pair(vx, device)
  for x in (tx, wx):
    (x * x).sum().backward()
    (x.exp() * 3).sum().backward()
  close(wx.grad, tx.grad)
  close(wx.grad, 2 * vx + 3 * np.exp(vx), rtol=1e-4)

def test_grad_accumulates_param_in_two_losses(device):
  vw, vx = rnd((3, 2)), rnd((4, 3), 1)
  (tw, ww) = pair(vw, device)
  for w, x in ((tw, torch.tensor(vx)), (ww, Tensor(vx, device=device))):
    (x @ w).relu().sum().backward()
    ((x @ w) ** 2).mean().backward()
  close(ww.grad, tw.grad, atol=1e-4)

def test_grad_reset_to_none(device):
  vx = rnd((4,))
  x = Tensor(vx, device=device, requires_grad=True)
  (x * 5).sum().backward()
  close(x.grad, np.full(4, 5.0))
  x.grad = None
  (x * x).sum().backward()
  close(x.grad, 2 * vx)

def test_leaf_grad_none_before_backward(device):
  x = Tensor(rnd((3,)), device=device, requires_grad=True)
  assert x.grad is None
  y = (x * 2).sum()
  assert x.grad is None  # building the graph does not compute grads
  y.backward()
  close(x.grad, np.full(3, 2.0))

def test_grad_is_float32_and_does_not_require_grad(device):
  x = Tensor(rnd((3,)), device=device, requires_grad=True)
  (x.sin() * 2).sum().backward()
  assert x.grad.dtype == dtypes.float32
  assert not x.grad.requires_grad
  assert x.grad.shape == x.shape

# ---------------------------------------------------------------- detach / requires_grad / no_grad

def test_detach_stops_gradient(device):
  vx = rnd((5,))
  x = Tensor(vx, device=device, requires_grad=True)
  d = x.detach()
  assert not d.requires_grad
  np.testing.assert_array_equal(d.numpy(), vx)
  (x * d + d.exp()).sum().backward()
  close(x.grad, vx)  # d is a constant: d/dx (x * c) = c

def test_detach_in_middle_of_graph(device):
  vx = rnd((2, 3))
  (tx, wx) = pair(vx, device)
  for x in (tx, wx):
    y = x.exp()
    ((y.detach() * y) + y.detach().sin()).sum().backward()
  close(wx.grad, tx.grad)
  close(wx.grad, np.exp(vx) * np.exp(vx), rtol=1e-4)

def test_detached_only_graph_has_no_grad(device):
  x = Tensor(rnd((3,)), device=device, requires_grad=True)
  y = (x.detach() * 3).sum()
  assert not y.requires_grad

def test_requires_grad_propagation(device):
  a = Tensor(rnd((3,)), device=device, requires_grad=True)
  b = Tensor(rnd((3,), 1), device=device)
  c = Tensor(rnd((3,), 2), device=device, requires_grad=False)
  assert a.requires_grad is True
  assert not b.requires_grad and not c.requires_grad
  assert (a + b).requires_grad
  assert (b * a).requires_grad
  assert (c - a).sum().requires_grad
  assert not (b + c).requires_grad
  assert not (b * 2).exp().sum().requires_grad
  assert (a.reshape(3, 1).expand(3, 2)).requires_grad
  assert Tensor.cat(b, a).requires_grad

def test_requires_grad_underscore(device):
  vb = rnd((3,))
  b = Tensor(vb, device=device)
  r = b.requires_grad_()
  assert b.requires_grad is True
  assert r is b or r.requires_grad
  (b * b).sum().backward()
  close(b.grad, 2 * vb)

def test_comparisons_and_argmax_do_not_require_grad(device):
  x = Tensor(rnd((3, 4)), device=device, requires_grad=True)
  assert not (x > 0).requires_grad
  assert not (x == x).requires_grad
  assert not x.argmax(axis=1).requires_grad

@pytest.mark.browser
def test_no_grad_context(device):
  vx = rnd((2, 3))
  x = Tensor(vx, device=device, requires_grad=True)
  with Tensor.no_grad():
    y = x * 2
    z = (y.exp() + x).sum()
    assert not y.requires_grad and not z.requires_grad
  w = x * 2
  assert w.requires_grad
  # y was created without a graph: it acts as a constant
  (x * y).sum().backward()
  close(x.grad, 2 * vx)

def test_no_grad_values_correct(device):
  vx = rnd((2, 3))
  x = Tensor(vx, device=device, requires_grad=True)
  with Tensor.no_grad():
    y = (x * x).sum(axis=1)
  close(y, (vx * vx).sum(1), rtol=1e-5)

def test_no_grad_nested_and_restored_on_exception(device):
  x = Tensor(rnd((3,)), device=device, requires_grad=True)
  with Tensor.no_grad():
    with Tensor.no_grad():
      assert not (x * 2).requires_grad
    assert not (x * 2).requires_grad
  assert (x * 2).requires_grad
  with pytest.raises(ZeroDivisionError):
    with Tensor.no_grad():
      1 / 0
  assert (x * 2).requires_grad

def test_no_grad_flag_assignment(device):
  x = Tensor(rnd((3,)), device=device, requires_grad=True)
  try:
    Tensor.no_grad = True
    assert not (x * 2).requires_grad
  finally:
    Tensor.no_grad = False
  assert (x * 2).requires_grad
  with Tensor.no_grad():  # the context manager still works after the flag was used
    assert not (x * 3).requires_grad
  assert (x * 3).requires_grad

# ---------------------------------------------------------------- gradient()

def test_gradient_several_targets(device):
  vx, vw = rnd((3, 4)), rnd((4, 2), 1)
  (tx, wx), (tw, ww) = pair(vx, device), pair(vw, device)
  tl, wl = ((tx @ tw).tanh() * tx.sum()).sum(), ((wx @ ww).tanh() * wx.sum()).sum()
  tg = torch.autograd.grad(tl, [tx, tw])
  wg = wl.gradient(wx, ww)
  assert len(wg) == 2
  close(wg[0], tg[0], atol=1e-4)
  close(wg[1], tg[1], atol=1e-4)

def test_gradient_wrt_intermediate(device):
  vx = rnd((5,))
  (tx, wx) = pair(vx, device)
  ty, wy = tx.exp(), wx.exp()
  tl, wl = (ty.sin() * ty).sum(), (wy.sin() * wy).sum()
  (tg,) = torch.autograd.grad(tl, [ty])
  (wg,) = wl.gradient(wy)
  close(wg, tg, atol=1e-4)

def test_gradient_matches_backward(device):
  vx = rnd((2, 3))
  x = Tensor(vx, device=device, requires_grad=True)
  (g,) = (x.sigmoid() * x).sum().gradient(x)
  x2 = Tensor(vx, device=device, requires_grad=True)
  (x2.sigmoid() * x2).sum().backward()
  close(g, x2.grad.numpy(), rtol=1e-6)

# ---------------------------------------------------------------- int graphs

def test_int_inputs_get_no_grad(device):
  vw, vi = rnd((4,)), np.array([1, -2, 3, 0], dtype=np.int32)
  w = Tensor(vw, device=device, requires_grad=True)
  i = Tensor(vi, device=device)
  (w * i).sum().backward()
  close(w.grad, vi.astype(np.float32))
  assert i.grad is None

def test_int_only_graph_does_not_require_grad(device):
  i = Tensor([1, 2, 3], device=device)
  out = (i * i + 2).sum()
  assert not out.requires_grad
  assert out.item() == 20

def test_grad_through_mask_from_comparison(device):
  vx = rnd((3, 4))
  x = Tensor(vx, device=device, requires_grad=True)
  mask = (x > 0)
  (x * mask.float()).sum().backward()
  close(x.grad, (vx > 0).astype(np.float32))

def test_grad_through_cast_back_and_forth(device):
  vx = rnd((4,))
  (tx, wx) = pair(vx, device)
  for x in (tx, wx): (x.half().float() * x).sum().backward()
  close(wx.grad, tx.grad, atol=2e-3, rtol=2e-3)

# ---------------------------------------------------------------- backward with explicit gradient

@pytest.mark.parametrize("shape", [(3, 4), (5,), ()])
def test_backward_explicit_gradient(device, shape):
  vx, vg = rnd(shape), rnd(shape, 7)
  (tx, wx) = pair(vx, device)
  (tx * tx + tx.sin()).backward(gradient=torch.tensor(vg))
  (wx * wx + wx.sin()).backward(gradient=Tensor(vg, device=device))
  close(wx.grad, tx.grad)

def test_backward_explicit_gradient_broadcast_input(device):
  vx, vy, vg = rnd((4,)), rnd((3, 4), 1), rnd((3, 4), 2)
  (tx, wx), (ty, wy) = pair(vx, device), pair(vy, device)
  (tx * ty).exp().backward(gradient=torch.tensor(vg))
  (wx * wy).exp().backward(gradient=Tensor(vg, device=device))
  close(wx.grad, tx.grad, atol=1e-4)
  close(wy.grad, ty.grad, atol=1e-4)

# ---------------------------------------------------------------- getitem / cat / stack / split

@pytest.mark.browser
def test_grad_through_getitem(device):
  def f(x):
    return (x[1:3, ::2] * 2).sum() + x[-1, 0] * 3 + x[0].sin().sum() + x[:, -1].exp().sum() + x[::-1, 1].tanh().sum()
  vx = rnd((4, 5))
  tx, wx = pair(vx, device)
  # torch has no negative-step slices: build the torch side with flip
  tl = (tx[1:3, ::2] * 2).sum() + tx[-1, 0] * 3 + tx[0].sin().sum() + tx[:, -1].exp().sum() + tx.flip(0)[:, 1].tanh().sum()
  wl = f(wx)
  close(wl, tl, atol=1e-4)
  tl.backward()
  wl.backward()
  close(wx.grad, tx.grad, atol=1e-5)

def test_grad_through_getitem_none_ellipsis(device):
  check_op([(2, 3, 4)], lambda x: x[..., 1:3][None, :, 0] * 2, device=device)

def test_grad_through_fancy_index_repeated(device):
  vx = rnd((4, 3))
  tx, wx = pair(vx, device)
  (tx[torch.tensor([0, 2, 0, 3])] * torch.tensor(rnd((4, 3), 5))).sum().backward()
  (wx[Tensor(np.array([0, 2, 0, 3], dtype=np.int32), device=device)] * Tensor(rnd((4, 3), 5), device=device)).sum().backward()
  close(wx.grad, tx.grad)

@pytest.mark.browser
def test_grad_through_cat(device):
  vx, vy = rnd((4, 3)), rnd((2, 3), 1)
  (tx, wx), (ty, wy) = pair(vx, device), pair(vy, device)
  tc = torch.cat([tx[0:2] * 2, ty, tx[3:].exp()], dim=0)
  wc = Tensor.cat(wx[0:2] * 2, wy, wx[3:].exp(), dim=0)
  assert wc.shape == tuple(tc.shape)
  cot = rnd(tuple(tc.shape), 9)
  (tc * torch.tensor(cot)).sum().backward()
  (wc * Tensor(cot, device=device)).sum().backward()
  close(wx.grad, tx.grad)
  close(wy.grad, ty.grad)
  assert wx.grad.numpy()[2].tolist() == [0.0, 0.0, 0.0]  # row 2 unused

def test_grad_through_cat_dim1_and_getitem(device):
  def tf(x, y): return torch.cat([x, y[:, ::2], x[:, :1]], dim=1).tanh()
  def wf(x, y): return Tensor.cat(x, y[:, ::2], x[:, :1], dim=1).tanh()
  check_op([(3, 2), (3, 5)], tf, wf, device=device)

def test_grad_through_stack_and_split(device):
  def tf(x, y): return torch.stack([x * 2, y, x * y], dim=1)
  def wf(x, y): return Tensor.stack(x * 2, y, x * y, dim=1)
  check_op([(3, 4), (3, 4)], tf, wf, device=device)
  def tf2(x): a, b = torch.split(x, [2, 3], dim=1); return a.sum(1) * b.mean(1)
  def wf2(x): a, b = x.split([2, 3], dim=1); return a.sum(1) * b.mean(1)
  check_op([(4, 5)], tf2, wf2, device=device)

# ---------------------------------------------------------------- a small MLP

def _mlp_data(seed=0):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(8, 5)).astype(np.float32)
  w1 = (rng.normal(size=(5, 16)) * 0.5).astype(np.float32)
  b1 = (rng.normal(size=(16,)) * 0.1).astype(np.float32)
  w2 = (rng.normal(size=(16, 4)) * 0.5).astype(np.float32)
  b2 = (rng.normal(size=(4,)) * 0.1).astype(np.float32)
  y = rng.integers(0, 4, size=(8,)).astype(np.int32)
  return x, [w1, b1, w2, b2], y

def _tw_loss(kind, x, params, y):
  w1, b1, w2, b2 = params
  logits = x.linear(w1, b1).relu().linear(w2, b2)
  if kind == "gather": return -logits.log_softmax(-1).gather(1, y.unsqueeze(1)).mean()
  if kind == "one_hot": return -(logits.log_softmax(-1) * y.one_hot(4)).sum(axis=1).mean()
  if kind == "cross_entropy": return logits.cross_entropy(y)
  if kind == "sparse_cce": return logits.sparse_categorical_crossentropy(y)
  raise ValueError(kind)

def _torch_loss(x, params, y):
  w1, b1, w2, b2 = params
  logits = F.linear(F.relu(F.linear(x, w1.T, b1)), w2.T, b2)
  return F.nll_loss(F.log_softmax(logits, -1), y.long())

@pytest.mark.parametrize("kind", ["gather", "one_hot", "cross_entropy", "sparse_cce"])
@pytest.mark.browser(kind=["gather", "cross_entropy"])
def test_mlp_param_grads(device, kind):
  vx, vparams, vy = _mlp_data()
  tp = [torch.tensor(p, requires_grad=True) for p in vparams]
  wp = [Tensor(p, device=device, requires_grad=True) for p in vparams]
  tl = _torch_loss(torch.tensor(vx), tp, torch.tensor(vy))
  wl = _tw_loss(kind, Tensor(vx, device=device), wp, Tensor(vy, device=device))
  close(wl, tl, atol=1e-5)
  tl.backward()
  wl.backward()
  for name, t, w in zip(["w1", "b1", "w2", "b2"], tp, wp):
    close(w.grad, t.grad, atol=1e-5, rtol=1e-4, msg=name)

def test_mlp_input_grad_via_gradient(device):
  vx, vparams, vy = _mlp_data(1)
  tx = torch.tensor(vx, requires_grad=True)
  wx = Tensor(vx, device=device, requires_grad=True)
  tl = _torch_loss(tx, [torch.tensor(p) for p in vparams], torch.tensor(vy))
  wl = _tw_loss("gather", wx, [Tensor(p, device=device) for p in vparams], Tensor(vy, device=device))
  (tg,) = torch.autograd.grad(tl, [tx])
  (wg,) = wl.gradient(wx)
  close(wg, tg, atol=1e-5)

@pytest.mark.browser
def test_mlp_sgd_steps_match_torch(device):
  vx, vparams, vy = _mlp_data(2)
  tx, ty = torch.tensor(vx), torch.tensor(vy)
  wx, wy = Tensor(vx, device=device), Tensor(vy, device=device)
  tp = [torch.tensor(p, requires_grad=True) for p in vparams]
  wp = [Tensor(p, device=device, requires_grad=True) for p in vparams]
  tlosses, wlosses = [], []
  for _ in range(4):
    tl, wl = _torch_loss(tx, tp, ty), _tw_loss("gather", wx, wp, wy)
    tl.backward()
    wl.backward()
    tlosses.append(tl.item())
    wlosses.append(wl.item())
    with torch.no_grad():
      tp = [(p - 0.5 * p.grad).detach().requires_grad_() for p in tp]
    wp = [(p.detach() - p.grad.detach() * 0.5).requires_grad_() for p in wp]
  np.testing.assert_allclose(wlosses, tlosses, atol=1e-4, rtol=1e-4)
  assert wlosses[-1] < wlosses[0]
  for t, w in zip(tp, wp): close(w, t, atol=1e-4)

# ---------------------------------------------------------------- training mode

def test_train_context_toggles_training():
  before = Tensor.training
  assert before is False
  with Tensor.train():
    assert Tensor.training is True
    with Tensor.train(False):
      assert Tensor.training is False
    assert Tensor.training is True
  assert Tensor.training is False

def test_train_context_restored_on_exception():
  with pytest.raises(KeyError):
    with Tensor.train():
      raise KeyError("boom")
  assert Tensor.training is False

def test_context_training_flag():
  assert not Tensor.training
  with Context(TRAINING=1):
    assert Tensor.training
  assert not Tensor.training

def test_dropout_identity_outside_training(device):
  vx = rnd((4, 8))
  x = Tensor(vx, device=device, requires_grad=True)
  y = x.dropout(0.5)
  close(y, vx)
  y.sum().backward()
  close(x.grad, np.ones_like(vx))

def test_dropout_in_training_and_its_grad(device):
  vx = rnd((16, 32), 3, 0.5, 2.0)  # strictly positive: a zero output means dropped
  x = Tensor(vx, device=device, requires_grad=True)
  with Tensor.train():
    y = x.dropout(0.5)
    out = y.numpy()
  kept = out != 0
  assert 0.3 < kept.mean() < 0.7, kept.mean()
  np.testing.assert_allclose(out[kept], vx[kept] * 2, rtol=1e-5)
  y.sum().backward()
  close(x.grad, kept.astype(np.float32) * 2)
