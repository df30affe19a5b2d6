"""Differential tests of the NN ops (matmul, einsum, convolutions, pooling, interpolation, normalisation,
dropout, losses, attention) against torch. Forward values and gradients are compared.
Tolerances for the accumulating ops (matmul/conv/...): atol 1e-4, rtol 1e-4 forward, 1e-3 for gradients."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Tensor, GlobalCounters
from helpers import check_op, rand_np

TOL = dict(atol=1e-4, rtol=1e-4, grad_atol=1e-3, grad_rtol=1e-3)

def TI(a, device): return Tensor(np.asarray(a, dtype=np.int32), device=device)
def LI(a): return torch.tensor(np.asarray(a), dtype=torch.long)

# ---------------------------------------------------------------- matmul / dot / einsum / linear

MM = [((3,), (3,)), ((3,), (3, 4)), ((4, 3), (3,)), ((1, 1), (1, 1)), ((5, 7), (7, 3)), ((65, 33), (33, 17)),
      ((2, 3, 4), (2, 4, 5)), ((2, 1, 3, 4), (3, 4, 5)), ((3, 4), (2, 4, 6)), ((2, 3, 4), (4,)), ((4,), (2, 4, 3))]

@pytest.mark.parametrize("sa,sb", MM)
@pytest.mark.browser(sa=[(65, 33), (2, 1, 3, 4)])
def test_matmul_operator(device, sa, sb):
  check_op([sa, sb], lambda a, b: a @ b, device=device, **TOL)

@pytest.mark.parametrize("sa,sb", [((3, 5), (5, 2)), ((2, 3, 4), (1, 4, 2)), ((6,), (6, 2))])
def test_matmul_method(device, sa, sb):
  check_op([sa, sb], lambda a, b: torch.matmul(a, b), lambda a, b: a.matmul(b), device=device, **TOL)

def test_dot(device):
  check_op([(7,), (7,)], lambda a, b: torch.dot(a, b), lambda a, b: a.dot(b), device=device, **TOL)
  check_op([(4, 6), (6, 3)], lambda a, b: torch.matmul(a, b), lambda a, b: a.dot(b), device=device, **TOL)

# ("ii->i" (a diagonal) is left out: not every einsum implementation supports repeated indices in one operand)
EINSUM = [("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("i,j->ij", [(3,), (4,)]),
          ("ijk->kji", [(2, 3, 4)]), ("bhqd,bhkd->bhqk", [(2, 3, 4, 8), (2, 3, 5, 8)]), ("ij->j", [(3, 4)]),
          ("ij,ij->i", [(3, 4), (3, 4)]), ("i,i->", [(5,), (5,)])]

@pytest.mark.parametrize("formula,shapes", EINSUM, ids=[e[0] for e in EINSUM])
@pytest.mark.browser(formula=["bhqd,bhkd->bhqk"])
def test_einsum(device, formula, shapes):
  check_op(shapes, lambda *xs: torch.einsum(formula, *xs), lambda *xs: Tensor.einsum(formula, *xs), device=device, **TOL)

@pytest.mark.parametrize("xs,nout,bias", [((4, 5), 3, True), ((2, 3, 5), 6, False), ((5,), 2, True)])
def test_linear(device, xs, nout, bias):
  shapes = [xs, (nout, xs[-1])] + ([(nout,)] if bias else [])
  # tinyweb's weight is (in, out): F.linear(x, w, b) == x.linear(w.T, b)
  check_op(shapes, lambda x, w, *b: F.linear(x, w, *b), lambda x, w, *b: x.linear(w.T, *b), device=device, **TOL)

# ---------------------------------------------------------------- convolutions

CONV2D = [  # input, weight, has bias, kwargs (same names in torch and tinyweb)
  ((2, 3, 8, 8), (4, 3, 3, 3), True, {}),
  ((2, 3, 9, 9), (4, 3, 3, 3), False, dict(stride=2, padding=1)),
  ((1, 2, 7, 8), (3, 2, 3, 2), True, dict(stride=(2, 1), padding=(1, 2))),
  ((1, 3, 9, 9), (2, 3, 3, 3), True, dict(dilation=2, padding=2)),
  ((2, 4, 7, 7), (6, 2, 3, 3), True, dict(groups=2)),
  ((2, 4, 6, 6), (4, 1, 3, 3), False, dict(groups=4, padding=1)),          # depthwise
  ((2, 4, 6, 6), (8, 1, 3, 3), True, dict(groups=4, stride=2)),            # depthwise, channel multiplier 2
  ((1, 3, 5, 5), (5, 3, 1, 1), True, {}),
  ((1, 2, 5, 9), (3, 2, 2, 4), True, dict(stride=(1, 2), dilation=(2, 1), padding=(0, 1))),
]

def _conv_check(device, torch_conv, xs, ws, bias, kw, tw_name="conv2d"):
  shapes = [xs, ws] + ([(ws[0] if tw_name == "conv2d" else ws[1] * kw.get("groups", 1),)] if bias else [])
  check_op(shapes, lambda x, w, *b: torch_conv(x, w, b[0] if b else None, **kw),
           lambda x, w, *b: getattr(x, tw_name)(w, b[0] if b else None, **kw), device=device, **TOL)

@pytest.mark.parametrize("xs,ws,bias,kw", CONV2D)
@pytest.mark.browser(xs=[(2, 3, 8, 8), (2, 4, 7, 7)])
def test_conv2d(device, xs, ws, bias, kw):
  _conv_check(device, F.conv2d, xs, ws, bias, kw)

@pytest.mark.parametrize("xs,ws,bias,kw,chunk", [
  ((6, 4, 48, 48), (8, 2, 3, 3), True, dict(groups=2), 2),          # 3 chunks of 2
  ((5, 8, 64, 64), (4, 8, 3, 3), False, dict(stride=2, padding=1), 1),   # a prime batch: 5 chunks of 1
])
def test_conv2d_weight_gradient_in_batch_chunks(device, xs, ws, bias, kw, chunk):
  """Inputs large enough that the weight gradient is summed over chunks of the batch, then over the chunks."""
  from tinyweb.tensor_nn import _batch_chunk
  padded = [n + 2 * kw.get("padding", 0) for n in xs[2:]]
  out = [(n - k) // kw.get("stride", 1) + 1 for n, k in zip(padded, ws[2:])]
  assert _batch_chunk(xs[0], (xs[1] * np.prod(padded) + ws[0] * np.prod(out)) * 4) == chunk   # the case this test is for
  _conv_check(device, F.conv2d, xs, ws, bias, kw)

@pytest.mark.parametrize("xs,ws,bias,kw", [
  ((2, 3, 10), (4, 3, 3), True, dict(padding=1)),
  ((1, 2, 11), (4, 2, 4), False, dict(stride=2, dilation=2)),
  ((2, 4, 9), (6, 2, 3), True, dict(groups=2, padding=2, stride=3)),
])
def test_conv1d(device, xs, ws, bias, kw):
  _conv_check(device, F.conv1d, xs, ws, bias, kw)   # 3-D input through conv2d

def test_conv3d(device):
  _conv_check(device, F.conv3d, (1, 2, 4, 5, 4), (3, 2, 2, 3, 2), True, dict(padding=1))

CONVT = [  # input, weight (in, out/groups, kh, kw), has bias, kwargs
  ((1, 4, 5, 5), (4, 2, 3, 3), True, {}),
  ((2, 3, 4, 4), (3, 2, 3, 3), True, dict(stride=2, padding=1, output_padding=1)),
  ((2, 4, 4, 4), (4, 3, 3, 3), False, dict(groups=2)),
  ((1, 2, 4, 5), (2, 3, 3, 3), True, dict(stride=2, dilation=2)),
  ((1, 2, 5, 4), (2, 2, 3, 2), True, dict(stride=(2, 1), padding=(1, 0))),
  ((1, 2, 3, 3), (2, 3, 4, 4), False, dict(stride=3, padding=2, output_padding=2)),
]

@pytest.mark.parametrize("xs,ws,bias,kw", CONVT)
@pytest.mark.browser(xs=[(2, 3, 4, 4)])
def test_conv_transpose2d(device, xs, ws, bias, kw):
  _conv_check(device, F.conv_transpose2d, xs, ws, bias, kw, tw_name="conv_transpose2d")

# ---------------------------------------------------------------- pooling

AVG = [dict(kernel_size=(2, 2)), dict(kernel_size=3, stride=1), dict(kernel_size=3, stride=2, padding=1),
       dict(kernel_size=(2, 3), stride=(2, 1)), dict(kernel_size=3, stride=2, padding=1, count_include_pad=False),
       dict(kernel_size=(3, 2), stride=(1, 2), padding=(1, 0))]

@pytest.mark.parametrize("kw", AVG)
@pytest.mark.browser(kw=[dict(kernel_size=3, stride=2, padding=1, count_include_pad=False)])
def test_avg_pool2d(device, kw):
  check_op([(2, 3, 7, 8)], lambda x: F.avg_pool2d(x, **kw), lambda x: x.avg_pool2d(**kw), device=device, **TOL)

def test_avg_pool2d_default(device):
  check_op([(1, 2, 6, 6)], lambda x: F.avg_pool2d(x, 2), lambda x: x.avg_pool2d(), device=device, **TOL)

MAXP = [dict(kernel_size=(2, 2)), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(2, 3), stride=(1, 2)),
        dict(kernel_size=3, stride=1, dilation=2), dict(kernel_size=3, stride=1, padding=1)]

@pytest.mark.parametrize("kw", MAXP)
@pytest.mark.browser(kw=[dict(kernel_size=3, stride=2, padding=1)])
def test_max_pool2d(device, kw):
  shape = (2, 3, 7, 8)
  # distinct values: no ties, so the gradient is well defined
  vals = (np.random.default_rng(0).permutation(int(np.prod(shape))).reshape(shape) / 10.0 - 16.0).astype(np.float32)
  check_op(None, lambda x: F.max_pool2d(x, **kw), lambda x: x.max_pool2d(**kw), vals=[vals], device=device, **TOL)

# ---------------------------------------------------------------- interpolate

INTERP = [((1, 2, 4, 5), (8, 10), "nearest", None), ((1, 2, 6, 6), (4, 9), "nearest", None), ((2, 1, 5, 7), (3, 3), "nearest", None),
          ((1, 2, 4, 5), (8, 10), "bilinear", False), ((1, 2, 4, 5), (7, 3), "bilinear", False),
          ((1, 2, 4, 5), (8, 10), "bilinear", True), ((2, 1, 6, 5), (3, 7), "bilinear", True),
          ((2, 3, 5), (9,), "linear", False), ((2, 3, 5), (3,), "linear", True)]

@pytest.mark.parametrize("xs,size,mode,ac", INTERP)
@pytest.mark.browser(mode=["bilinear"], ac=[True], xs=[(1, 2, 4, 5)])
def test_interpolate(device, xs, size, mode, ac):
  if mode == "nearest":
    check_op([xs], lambda x: F.interpolate(x, size=size, mode="nearest"), lambda x: x.interpolate(size, mode="nearest"),
             device=device, **TOL)
  else:
    check_op([xs], lambda x: F.interpolate(x, size=size, mode=mode, align_corners=ac),
             lambda x: x.interpolate(size, mode=mode, align_corners=ac), device=device, **TOL)

def test_linear_interpolate_reads_its_taps(device):
  """Each output of a linear resize reads its two taps per axis: work in proportion to the output, not output x input
  (resizing a photo for a detector was 1e9 operations, seconds on the CPU)."""
  x = Tensor(rand_np((1, 1, 512, 512)), device=device).realize()
  y = x.interpolate((384, 384))
  GlobalCounters.reset()
  y.realize()
  assert GlobalCounters.global_ops < 20 * 384 * 512, GlobalCounters.global_ops   # (was 1.07e9)

# ---------------------------------------------------------------- normalisation / dropout

@pytest.mark.browser
def test_layernorm(device):
  check_op([(2, 3, 8)], lambda x: F.layer_norm(x, (8,)), lambda x: x.layernorm(), device=device, **TOL)
  check_op([(2, 3, 8)], lambda x: F.layer_norm(x, (3, 8)), lambda x: x.layernorm(axis=(-2, -1)), device=device, **TOL)
  check_op([(4, 5)], lambda x: F.layer_norm(x, (5,), eps=1e-2), lambda x: x.layernorm(eps=1e-2), device=device,
           low=-0.1, high=0.1, **TOL)   # small values: eps matters

@pytest.mark.parametrize("xs", [(2, 3, 4, 4), (5, 3)])
@pytest.mark.browser(xs=[(2, 3, 4, 4)])
def test_batchnorm(device, xs):
  vals = [rand_np(xs, seed=0), rand_np((3,), seed=1), rand_np((3,), seed=2), rand_np((3,), seed=3),
          rand_np((3,), 0.5, 2.0, seed=4)]
  def ref(x, w, b, mean, invstd):
    sh = (1, 3) + (1,) * (x.ndim - 2)
    return (x - mean.reshape(sh)) * invstd.reshape(sh) * w.reshape(sh) + b.reshape(sh)
  check_op(None, ref, lambda x, w, b, mean, invstd: x.batchnorm(w, b, mean, invstd), vals=vals, device=device, **TOL)

def test_dropout_eval_is_identity(device):
  assert not Tensor.training
  check_op([(4, 5)], lambda x: x, lambda x: x.dropout(0.5), device=device)
  with Tensor.train(False):
    check_op([(4, 5)], lambda x: x, lambda x: x.dropout(0.9), device=device)

@pytest.mark.parametrize("p", [0.5, 0.2])
def test_dropout_train(device, p):
  n = 20000
  a = rand_np((n,), 1.0, 2.0)
  x = Tensor(a, device=device, requires_grad=True)
  with Tensor.train():
    assert Tensor.training
    y = x.dropout(p)
    y2 = x.dropout(p)
  assert not Tensor.training
  out = y.numpy()
  dropped = out == 0
  assert abs(dropped.mean() - p) < 0.03, f"dropped fraction {dropped.mean()} for p={p}"
  np.testing.assert_allclose(out[~dropped], a[~dropped] / (1 - p), rtol=1e-5)
  assert (y2.numpy() == 0).mean() > 0 and ((y2.numpy() == 0) != dropped).any(), "two dropout calls gave the same mask"
  y.sum().backward()
  np.testing.assert_allclose(x.grad.numpy(), (~dropped).astype(np.float32) / (1 - p), rtol=1e-5)

# ---------------------------------------------------------------- losses

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ls", [0.0, 0.1])
@pytest.mark.browser(reduction=["mean"], ls=[0.1])
def test_cross_entropy_indices(device, reduction, ls):
  y = rand_np((6,), 0, 5, np.int32, seed=3)
  check_op([(6, 5)], lambda x: F.cross_entropy(x, LI(y), reduction=reduction, label_smoothing=ls),
           lambda x: x.cross_entropy(TI(y, device), reduction=reduction, label_smoothing=ls), device=device, **TOL)

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ls", [0.0, 0.2])
def test_cross_entropy_probs(device, reduction, ls):
  z = rand_np((6, 5), seed=9).astype(np.float64)
  y = (np.exp(z) / np.exp(z).sum(1, keepdims=True)).astype(np.float32)
  check_op([(6, 5)], lambda x: F.cross_entropy(x, torch.tensor(y), reduction=reduction, label_smoothing=ls),
           lambda x: x.cross_entropy(Tensor(y, device=device), reduction=reduction, label_smoothing=ls), device=device, **TOL)

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore,ls", [(-1, 0.0), (2, 0.1)])
def test_sparse_categorical_crossentropy(device, reduction, ignore, ls):
  y = np.array([0, -1, 3, 2, -1, 4, 2, 1], dtype=np.int32) if ignore == -1 else np.array([0, 2, 3, 2, 1, 4, 2, 1], dtype=np.int32)
  check_op([(8, 5)], lambda x: F.cross_entropy(x, LI(y), ignore_index=ignore, reduction=reduction, label_smoothing=ls),
           lambda x: x.sparse_categorical_crossentropy(TI(y, device), ignore_index=ignore, reduction=reduction, label_smoothing=ls),
           device=device, **TOL)

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_crossentropy(device, reduction):
  y = rand_np((4, 5), 0.0, 1.0, seed=5)
  y[0] = np.round(y[0])    # hard and soft targets
  check_op([(4, 5)], lambda x: F.binary_cross_entropy(x, torch.tensor(y), reduction=reduction),
           lambda x: x.binary_crossentropy(Tensor(y, device=device), reduction=reduction), device=device,
           low=0.05, high=0.95, **TOL)

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.browser(reduction=["mean"])
def test_binary_crossentropy_logits(device, reduction):
  y = rand_np((4, 5), 0.0, 1.0, seed=6)
  y[1] = np.round(y[1])
  check_op([(4, 5)], lambda x: F.binary_cross_entropy_with_logits(x, torch.tensor(y), reduction=reduction),
           lambda x: x.binary_crossentropy_logits(Tensor(y, device=device), reduction=reduction), device=device,
           low=-4.0, high=4.0, **TOL)

# ---------------------------------------------------------------- attention

def _bool_mask(shape, seed):
  m = rand_np(shape, dtype=np.bool_, seed=seed)
  m[..., 0] = True     # every query attends to something (a fully masked row is NaN in torch)
  return m

SDPA = {  # name: (q, k, v shapes, mask builder or None, is_causal)
  "plain": ((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8), None, False),
  "3d": ((4, 5, 8), (4, 7, 8), (4, 7, 4), None, False),
  "bool_mask": ((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8), lambda: _bool_mask((5, 6), 1), False),
  "bool_mask_bcast": ((2, 2, 4, 8), (2, 2, 6, 8), (2, 2, 6, 8), lambda: _bool_mask((2, 1, 4, 6), 2), False),
  "float_mask": ((2, 3, 5, 8), (2, 3, 6, 8), (2, 3, 6, 8), lambda: rand_np((2, 1, 5, 6), -3.0, 1.0, seed=3), False),
  "causal": ((2, 2, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8), None, True),
  "causal_rect": ((1, 2, 4, 8), (1, 2, 6, 8), (1, 2, 6, 8), None, True),   # torch: top-left aligned tril
}

@pytest.mark.parametrize("name", list(SDPA))
@pytest.mark.browser(name=["bool_mask"])
def test_scaled_dot_product_attention(device, name):
  qs, ks, vs, mk, causal = SDPA[name]
  m = mk() if mk else None
  check_op([qs, ks, vs],
           lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=None if m is None else torch.tensor(m), is_causal=causal),
           lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=None if m is None else Tensor(m, device=device), is_causal=causal),
           device=device, **TOL)

@pytest.mark.parametrize("name", ["plain", "bool_mask", "bool_mask_bcast", "float_mask", "causal", "causal_rect"])
def test_scaled_dot_product_attention_in_chunks_of_queries(device, name):
  """Scores above ATTENTION_SCORES_BYTES: the queries go in chunks (2 rows here, the last one shorter), with the same
  values and gradients as torch's all at once."""
  from tinyweb.helpers import Context
  qs, ks, vs, mk, causal = SDPA[name]
  m = mk() if mk else None
  per_row = int(np.prod(np.broadcast_shapes(qs[:-2], ks[:-2]))) * ks[-2] * 4
  with Context(ATTENTION_SCORES_BYTES=2 * per_row):
    check_op([qs, ks, vs],
             lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=None if m is None else torch.tensor(m), is_causal=causal),
             lambda q, k, v: q.scaled_dot_product_attention(k, v, attn_mask=None if m is None else Tensor(m, device=device), is_causal=causal),
             device=device, **TOL)

def test_attention_scores_beyond_the_devices_largest_buffer():
  """On WEBGPU (lavapipe, like the browsers' defaults: 128 MiB buffers at most) a 4200 x 8192 attention, 138 MB of
  float32 scores, which the device cannot hold in one buffer: computed in chunks of queries by default, as torch does it."""
  from tinyweb.device import Device
  ok, why = Device.check("WEBGPU")
  if not ok: pytest.skip(f"WEBGPU unavailable: {why}")
  if Device["WEBGPU"].max_binding >= 4200 * 8192 * 4: pytest.skip(f"this adapter binds {Device['WEBGPU'].max_binding} bytes: the scores fit")
  q, k, v = (rand_np(s, seed=i) for i, s in enumerate([(1, 4200, 8), (1, 8192, 8), (1, 8192, 4)]))
  got = Tensor(q, device="WEBGPU").scaled_dot_product_attention(Tensor(k, device="WEBGPU"), Tensor(v, device="WEBGPU")).numpy()
  want = F.scaled_dot_product_attention(*map(torch.tensor, (q, k, v))).numpy()
  np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-4)
