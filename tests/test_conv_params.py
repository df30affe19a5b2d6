"""Convolutions and pooling with random parameters against torch (forward and gradients): conv1d/2d/3d with random
kernel sizes, strides, symmetric, asymmetric, 'same' and 'valid' padding, dilations and groups; conv_transpose with
output_padding; max/avg pools with ceil_mode, count_include_pad and dilation. Sizes are small, so that every case
is cheap; the last window often ends before its stride does (the strided case that used to crash). Then random
pad/conv/matmul chains followed by reductions (nested reductions whose upcast copies differ in which loops they need),
and the argument checks: each invalid argument torch refuses raises a ValueError naming the op and the shapes.

Each test draws TW_CONV_CASES cases (default 12) from seeded generators; raise it for long runs."""
import os
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Tensor
from helpers import check_op

CASES = int(os.getenv("TW_CONV_CASES", "12"))
TOL = dict(atol=1e-4, rtol=1e-4, grad_atol=1e-3, grad_rtol=1e-3)
TCONV, TCONVT = [F.conv1d, F.conv2d, F.conv3d], [F.conv_transpose1d, F.conv_transpose2d, F.conv_transpose3d]

def draw(seed: int):
  rng = np.random.default_rng(seed)
  return lambda lo, hi: int(rng.integers(lo, hi + 1))

def conv_case(seed: int):
  """(input shape, weight shape, bias, stride, dilation, groups, padding as given to tinyweb, (before, after) per dim)"""
  r = draw(seed)
  n, g = r(1, 3), r(1, 3)
  k, s, d = [r(1, 3) for _ in range(n)], [r(1, 3) for _ in range(n)], [r(1, 2) for _ in range(n)]
  mode = r(0, 4)
  if mode == 0: pad = r(0, 2); pairs = [(pad, pad)] * n
  elif mode == 1: pad = [r(0, 2) for _ in range(n)]; pairs = [(p, p) for p in pad]
  elif mode == 2: pairs = [(r(0, 2), r(0, 2)) for _ in range(n)]; pad = pairs
  elif mode == 3:
    s, pad = [1] * n, "same"
    pairs = [(dd * (kk - 1) // 2, dd * (kk - 1) - dd * (kk - 1) // 2) for kk, dd in zip(k, d)]
  else: pad, pairs = "valid", [(0, 0)] * n
  # spatial sizes from the smallest that fits the window to 4 more: the last window often ends before the stride does
  sp = [r(max(1, dd * (kk - 1) + 1 - b - a), dd * (kk - 1) + 5 - b - a) for kk, dd, (b, a) in zip(k, d, pairs)]
  return (r(1, 2), g * r(1, 2), *sp), (g * r(1, 2), None, *k), bool(r(0, 1)), s, d, g, pad, pairs

@pytest.mark.parametrize("seed", range(CASES))
def test_conv_random(device, seed):
  xs, ws, bias, s, d, g, pad, pairs = conv_case(seed)
  ws = (ws[0], xs[1] // g, *ws[2:])
  flat = [v for b, a in reversed(pairs) for v in (b, a)]   # torch pads both sides alike: pad the input first
  def tconv(x, w, *b): return TCONV[len(s) - 1](F.pad(x, flat), w, b[0] if b else None, stride=s, dilation=d, groups=g)
  def wconv(x, w, *b): return x.conv2d(w, b[0] if b else None, groups=g, stride=s, dilation=d, padding=pad)
  check_op([xs, ws] + ([(ws[0],)] if bias else []), tconv, wconv, device=device, seed=seed, **TOL)

@pytest.mark.parametrize("seed", range(CASES))
def test_conv_transpose_random(device, seed):
  r = draw(1000 + seed)
  n, g = r(1, 3), r(1, 3)
  k, s, d = [r(1, 3) for _ in range(n)], [r(1, 3) for _ in range(n)], [r(1, 2) for _ in range(n)]
  op, p = [r(0, max(ss, dd) - 1) for ss, dd in zip(s, d)], [r(0, 2) for _ in range(n)]
  sp = [max(r(1, 4), -(-(2 * pp - dd * (kk - 1) - o) // ss) + 1) for pp, dd, kk, o, ss in zip(p, d, k, op, s)]   # a non-empty output
  cin, cout = g * r(1, 2), g * r(1, 2)
  check_op([(r(1, 2), cin, *sp), (cin, cout // g, *k), (cout,)], lambda x, w, b: TCONVT[n - 1](x, w, b, s, p, op, g, d),
           lambda x, w, b: x.conv_transpose2d(w, b, groups=g, stride=s, dilation=d, padding=p, output_padding=op),
           device=device, seed=seed, **TOL)

def pool_case(seed: int, dilate: bool):
  r = draw(seed)
  n = r(1, 3)
  k, s = [r(1, 3) for _ in range(n)], [r(1, 3) for _ in range(n)]
  d = [r(1, 2) if dilate else 1 for _ in range(n)]
  p = [r(0, kk // 2) for kk in k]
  sp = [r(max(1, dd * (kk - 1) + 1 - 2 * pp), dd * (kk - 1) + 5) for kk, dd, pp in zip(k, d, p)]
  return (2, 2, *sp), tuple(k), tuple(s), tuple(d), tuple(p), bool(r(0, 1)), bool(r(0, 1))

@pytest.mark.parametrize("seed", range(CASES))
def test_max_pool_random(device, seed):
  shape, k, s, d, p, ceil, _ = pool_case(2000 + seed, True)
  vals = (np.random.default_rng(seed).permutation(int(np.prod(shape))).reshape(shape) / 10.0).astype(np.float32)   # no ties
  tpool = [F.max_pool1d, F.max_pool2d, F.max_pool3d][len(k) - 1]
  ref = tpool(torch.tensor(vals), k, s, p, d, ceil_mode=ceil)
  # a window that lies wholly in the padding (dilation skips the input) gives -inf; torch's gradient then goes to an
  # element outside that window, so only the forward value is compared there
  check_op(None, lambda x: tpool(x, k, s, p, d, ceil_mode=ceil), lambda x: x.max_pool2d(k, s, d, p, ceil_mode=ceil), vals=[vals],
           device=device, grad=bool(torch.isfinite(ref).all()), **TOL)

@pytest.mark.parametrize("seed", range(CASES))
def test_avg_pool_random(device, seed):
  shape, k, s, _, p, ceil, cip = pool_case(3000 + seed, False)
  tpool = [F.avg_pool1d, F.avg_pool2d, F.avg_pool3d][len(k) - 1]
  try: tpool(torch.zeros(shape), k, s, p, ceil_mode=ceil, count_include_pad=cip)
  except RuntimeError: pytest.skip("torch's avg_pool3d refuses an input smaller than the kernel even when the padding makes it fit")
  check_op([shape], lambda x: tpool(x, k, s, p, ceil_mode=ceil, count_include_pad=cip),
           lambda x: x.avg_pool2d(k, s, 1, p, ceil_mode=ceil, count_include_pad=cip), device=device, seed=seed, **TOL)

def test_strided_conv_last_window_short(device):
  """The fuzzer's repro: the last window of a stride-2 1x1 conv on a padded 3x3 image ends one before the stride does."""
  check_op([(1, 1, 3, 3), (1, 1, 1, 1)], lambda x, w: F.conv2d(x, w, stride=2, padding=1), lambda x, w: x.conv2d(w, stride=2, padding=1),
           device=device, **TOL)
  check_op([(1, 2, 5)], lambda x: F.max_pool1d(x, 1, 3), lambda x: x.max_pool1d(1, 3), device=device, **TOL)

# ---------------------------------------------------------------- pad / conv / matmul chains, then reductions

def chain_case(seed: int):
  """A random chain on an (N, C, H, W) input: pads (of 0 or 1.5), convs and matmuls along W, then one or two reductions.
  Returns the input shape, the weights' shapes, the steps and the reductions (op, axis)."""
  r = draw(5000 + seed)
  x_shape = (r(1, 2), r(1, 2), r(1, 4), r(1, 4))
  shape, ws, steps = list(x_shape), [], []
  for _ in range(r(1, 3)):
    kind = ("pad", "conv", "matmul")[r(0, 2)]
    if kind == "pad":
      pads = (r(0, 2), r(0, 2), r(0, 2), r(0, 2))   # (left, right, top, bottom)
      steps.append(("pad", pads, (0.0, 1.5)[r(0, 1)]))
      shape[3] += pads[0] + pads[1]; shape[2] += pads[2] + pads[3]
    elif kind == "conv":
      stride, p = r(1, 2), r(0, 1)
      k = [min(r(1, 3), n + 2 * p) for n in shape[2:]]
      ws.append((r(1, 3), shape[1], *k))
      steps.append(("conv", stride, p))
      shape[1], shape[2:] = ws[-1][0], [(n + 2 * p - kk) // stride + 1 for n, kk in zip(shape[2:], k)]
    else:
      ws.append((shape[3], r(1, 4)))
      steps.append(("matmul",))
      shape[3] = ws[-1][1]
  return x_shape, ws, steps, [(("sum", "logsumexp", "mean")[r(0, 2)], r(0, 3)) for _ in range(r(1, 2))]

@pytest.mark.parametrize("seed", range(2 * CASES))
def test_pad_conv_matmul_chain_then_reduce(device, seed):
  x_shape, ws, steps, reds = chain_case(seed)
  def run(x, *weights, torch_ops: bool):
    weights = iter(weights)
    for kind, *prm in steps:
      if kind == "pad": x = F.pad(x, prm[0], value=prm[1]) if torch_ops else x.pad(prm[0], value=prm[1])
      elif kind == "conv":
        w = next(weights)
        x = F.conv2d(x, w, stride=prm[0], padding=prm[1]) if torch_ops else x.conv2d(w, stride=prm[0], padding=prm[1])
      else: x = x @ next(weights)
    for op, ax in reds: x = getattr(x, op)(ax % x.ndim)
    return x
  check_op([x_shape, *ws], lambda *a: run(*a, torch_ops=True), lambda *a: run(*a, torch_ops=False), device=device, seed=seed, **TOL)

def test_conv_then_reduce_over_padded_rows(device):
  """The fuzzer's repro: the output rows of a padded conv are summed; the copies of the conv's reduction that read only
  padding do not depend on the outer sum's loop, the others do."""
  check_op([(1, 1, 2, 2), (1, 1, 2, 1)], lambda x, w: F.conv2d(x, w, padding=1).sum(2), lambda x, w: x.conv2d(w, padding=1).sum(2),
           device=device, **TOL)
  check_op([(3, 4), (6, 5), (5, 4)], lambda a, b, c: (F.pad(a, (1, 1)) @ b @ c).sum(0), lambda a, b, c: (a.pad((1, 1)) @ b @ c).sum(0),
           device=device, **TOL)

# ---------------------------------------------------------------- invalid arguments: torch refuses them, tinyweb raises a ValueError

X, W, WT = (1, 2, 5, 5), (3, 2, 3, 3), (2, 3, 3, 3)   # input, conv weight, conv_transpose weight
INVALID = {   # name -> (input shape, other shape, torch call, tinyweb call)
  "stride_0": (X, W, lambda x, w: F.conv2d(x, w, stride=0), lambda x, w: x.conv2d(w, stride=0)),
  "stride_negative": (X, W, lambda x, w: F.conv2d(x, w, stride=(1, -1)), lambda x, w: x.conv2d(w, stride=(1, -1))),
  "dilation_0": (X, W, lambda x, w: F.conv2d(x, w, dilation=0), lambda x, w: x.conv2d(w, dilation=0)),
  "padding_negative": (X, W, lambda x, w: F.conv2d(x, w, padding=-1), lambda x, w: x.conv2d(w, padding=-1)),
  "padding_string": (X, W, lambda x, w: F.conv2d(x, w, padding="full"), lambda x, w: x.conv2d(w, padding="full")),
  "same_strided": (X, W, lambda x, w: F.conv2d(x, w, stride=2, padding="same"), lambda x, w: x.conv2d(w, stride=2, padding="same")),
  "groups_0": (X, W, lambda x, w: F.conv2d(x, w, groups=0), lambda x, w: x.conv2d(w, groups=0)),
  "groups_not_dividing_cout": ((1, 4, 5, 5), W, lambda x, w: F.conv2d(x, w, groups=2), lambda x, w: x.conv2d(w, groups=2)),
  "channel_mismatch": ((1, 3, 5, 5), W, lambda x, w: F.conv2d(x, w), lambda x, w: x.conv2d(w)),
  "weight_rank": (X, (3, 2, 3), lambda x, w: F.conv2d(x, w), lambda x, w: x.conv2d(w)),
  "kernel_larger_than_padded_input": (X, (3, 2, 8, 3), lambda x, w: F.conv2d(x, w, padding=1), lambda x, w: x.conv2d(w, padding=1)),
  "dilated_kernel_too_large": (X, W, lambda x, w: F.conv2d(x, w, dilation=3), lambda x, w: x.conv2d(w, dilation=3)),
  "kernel_size_0": (X, (3, 2, 0, 3), lambda x, w: F.conv2d(x, w), lambda x, w: x.conv2d(w)),
  "empty_image": ((1, 2, 0, 5), W, lambda x, w: F.conv2d(x, w, padding=2), lambda x, w: x.conv2d(w, padding=2)),
  "bias_shape": (X, W, lambda x, w: F.conv2d(x, w, torch.zeros(2)), lambda x, w: x.conv2d(w, Tensor.zeros(2))),
  "convt_stride_0": (X, WT, lambda x, w: F.conv_transpose2d(x, w, stride=0), lambda x, w: x.conv_transpose2d(w, stride=0)),
  "convt_output_padding_too_large": (X, WT, lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=2),
                                     lambda x, w: x.conv_transpose2d(w, stride=2, output_padding=2)),
  "convt_output_padding_negative": (X, WT, lambda x, w: F.conv_transpose2d(x, w, stride=2, output_padding=-1),
                                    lambda x, w: x.conv_transpose2d(w, stride=2, output_padding=-1)),
  "convt_padding_negative": (X, WT, lambda x, w: F.conv_transpose2d(x, w, padding=-1), lambda x, w: x.conv_transpose2d(w, padding=-1)),
  "convt_empty_output": ((1, 2, 1, 1), (2, 3, 1, 1), lambda x, w: F.conv_transpose2d(x, w, padding=1), lambda x, w: x.conv_transpose2d(w, padding=1)),
  "convt_groups_0": (X, WT, lambda x, w: F.conv_transpose2d(x, w, groups=0), lambda x, w: x.conv_transpose2d(w, groups=0)),
  "max_pool_kernel_0": (X, None, lambda x: F.max_pool2d(x, 0), lambda x: x.max_pool2d(0)),
  "max_pool_stride_0": (X, None, lambda x: F.max_pool2d(x, 2, stride=0), lambda x: x.max_pool2d(2, stride=0)),
  "max_pool_dilation_0": (X, None, lambda x: F.max_pool2d(x, 2, dilation=0), lambda x: x.max_pool2d(2, dilation=0)),
  "max_pool_padding_over_half": (X, None, lambda x: F.max_pool2d(x, 3, padding=2), lambda x: x.max_pool2d(3, padding=2)),
  "max_pool_window_too_large": (X, None, lambda x: F.max_pool2d(x, 6), lambda x: x.max_pool2d(6)),
  "max_pool_empty_image": ((1, 2, 0, 4), None, lambda x: F.max_pool2d(x, 2), lambda x: x.max_pool2d(2)),
  "avg_pool_padding_over_half": (X, None, lambda x: F.avg_pool2d(x, 3, padding=2), lambda x: x.avg_pool2d(3, padding=2)),
  "avg_pool_padding_negative": (X, None, lambda x: F.avg_pool2d(x, 3, padding=-1), lambda x: x.avg_pool2d(3, padding=-1)),
  "avg_pool_stride_0": (X, None, lambda x: F.avg_pool2d(x, 2, stride=0), lambda x: x.avg_pool2d(2, stride=0)),
}

@pytest.mark.parametrize("name", list(INVALID))
def test_invalid_arguments_raise(name):
  """At the call, before any kernel: a ValueError naming the op and the input's shape."""
  xs, ws, tcall, wcall = INVALID[name]
  targs = [torch.zeros(xs)] + ([torch.zeros(ws)] if ws else [])
  with pytest.raises(RuntimeError): tcall(*targs)   # torch refuses it too
  with pytest.raises(ValueError) as e: wcall(*[Tensor.zeros(*s) for s in [xs] + ([ws] if ws else [])])
  msg = str(e.value)
  assert msg.split(":")[0] in ("conv2d", "conv_transpose2d", "max_pool2d", "avg_pool2d") and str(xs) in msg, msg
