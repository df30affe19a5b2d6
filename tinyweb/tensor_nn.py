"""NN ops for Tensor (matmul, einsum, linear, convolutions, pooling, interpolation, normalisation, dropout, losses, linear
algebra (qr, svd, newton_schulz), attention).

Everything here is written with public Tensor methods only, so it adds no gradient rules and no kernels of its own:
convolutions and pooling are movement-op views (no copies) followed by one multiply-reduce."""
from __future__ import annotations
import itertools, math, struct
from typing import Optional, Self, Sequence
from tinyweb.dtype import dtypes
from tinyweb.helpers import ATTENTION_SCORES_BYTES, prod, ceildiv, dedup, largest_divisor
from tinyweb.tensor_helpers import _broadcast_shape

def _tuple(v, n: int, op: str, name: str, least: int = 1, shapes: str = "") -> tuple[int, ...]:
  t = (v,) * n if isinstance(v, int) else tuple(v) if isinstance(v, (tuple, list)) else ()
  if len(t) == 1: t = t * n   # (one value for every dim, like PyTorch)
  if len(t) != n or not all(isinstance(x, int) for x in t): raise ValueError(f"{op}: {name} must be an int or {n} ints, got {v!r}{shapes}")
  if any(x < least for x in t): raise ValueError(f"{op}: {name} must be {'positive' if least else 'non-negative'}, got {v!r}{shapes}")
  return t

def _pads(padding, n: int, op: str, shapes: str = "") -> list[tuple[int, int]]:
  """(before, after) per spatial dim, first dim first. Accepts an int, n ints (torch: both sides), 2n ints (flat, last dim
  first, like pad()), or n (before, after) pairs."""
  p = (padding,) * n if isinstance(padding, int) else tuple(padding) if isinstance(padding, (tuple, list)) else ()
  if len(p) == 1 and isinstance(p[0], int): p = p * n   # (one value for every dim, like PyTorch)
  if len(p) == n and all(isinstance(x, int) for x in p): out = [(x, x) for x in p]
  elif len(p) == 2 * n and all(isinstance(x, int) for x in p): out = [(p[2 * (n - 1 - j)], p[2 * (n - 1 - j) + 1]) for j in range(n)]
  elif len(p) == n and all(isinstance(x, (tuple, list)) and len(x) == 2 and all(isinstance(y, int) for y in x) for x in p): out = [tuple(x) for x in p]
  else: raise ValueError(f"{op}: padding must be an int, {n} ints, {2*n} ints or {n} (before, after) pairs, got {padding!r}{shapes}")
  if any(b < 0 or a < 0 for b, a in out): raise ValueError(f"{op}: padding must not be negative, got {padding!r}{shapes}")
  return out

def _check_groups(op: str, groups, shapes: str):
  if not isinstance(groups, int) or groups < 1: raise ValueError(f"{op}: groups must be a positive int, got {groups!r}{shapes}")

def _check_windows(op: str, spatial, k_, d_, pads, shapes: str):
  """Every spatial dim and kernel size positive (like torch: an empty image would be all padding), and each window
  (extent d*(k-1)+1) within its padded dim: at least one output."""
  padded = tuple(i + b + a for i, (b, a) in zip(spatial, pads))
  if 0 in spatial or any(k < 1 for k in k_) or any(d * (k - 1) + 1 > p for k, d, p in zip(k_, d_, padded)):
    raise ValueError(f"{op}: kernel {tuple(k_)} with dilation {tuple(d_)} does not fit in the padded input {padded} (padding {pads}){shapes}: "
                     f"need spatial dims and kernel sizes >= 1 and dilation*(kernel-1)+1 <= the padded size")

def _f32(x: float) -> float: return struct.unpack("f", struct.pack("f", x))[0]

def _stuffed(x, s_: Sequence[int]):
  """s-1 zeros between the elements of each of x's last len(s_) dims: (.., i) -> (.., (i-1)*s + 1)."""
  nb = x.ndim - len(s_)
  for j, s in enumerate(s_):
    if s == 1: continue
    ax, i = nb + j, x.shape[nb + j]
    pre, post = x.shape[:ax], x.shape[ax + 1:]
    x = x.reshape(*pre, i, 1, *post)._pad_zero(((0, 0),) * (ax + 1) + ((0, s - 1),) + ((0, 0),) * len(post)).reshape(*pre, i * s, *post)
    x = x.shrink((None,) * ax + ((0, (i - 1) * s + 1),) + (None,) * len(post))
  return x

def _batch_chunk(n: int, item_bytes: int, budget: int = 1 << 18) -> int:
  """The largest divisor of n whose items take at most `budget` bytes (at least 1)."""
  return largest_divisor(n, budget // item_bytes)

def _conv_input_grad(grad, weight, groups: int, s_, d_, pads, spatial):
  """conv2d's input gradient as PyTorch computes it (col2im): for each input position, the sum of grad * weight over
  the (output position, kernel tap) pairs whose window reads it. grad (N, Cout, *out), weight (Cout, Cin/groups, *k),
  pads the convolution's (before, after) padding, spatial the input's size. Only real terms are added: no padding or
  stride zero is multiplied, so an inf weight gives inf (or NaN from a real 0), never NaN from a structural zero."""
  T, g = type(grad), groups
  (bs, cout), (cin_g, *k_), o_ = grad.shape[:2], weight.shape[1:], grad.shape[2:]
  # columns: per input channel, kernel tap and output position, the sum over output channels (a matmul per group);
  # stored, as every tap below reads its own slice of them
  w = weight.reshape(g, cout // g, cin_g * prod(k_)).transpose(1, 2)
  cols = (w @ grad.reshape(bs, g, cout // g, prod(o_))).contiguous().reshape(bs, g * cin_g, *k_, *o_)
  out = T.zeros(bs, g * cin_g, *spatial, dtype=cols.dtype, device=grad.device)
  for tap in itertools.product(*map(range, k_)):   # each tap's image, spread by the stride, at its offset in the input
    img = _stuffed(cols[(slice(None), slice(None), *tap)], s_)
    starts = [t * d - b for t, d, (b, _) in zip(tap, d_, pads)]
    if any(st >= i or st + l <= 0 for st, l, i in zip(starts, img.shape[2:], spatial)): continue   # wholly in the padding
    out = out + img._pad_zero(((0, 0), (0, 0), *[(st, i - st - l) for st, l, i in zip(starts, img.shape[2:], spatial)]))
  return out.contiguous()   # stored: fused into its readers, the taps' gated loads would be redone per read

def _conv_weight_grad(grad, xp, groups: int, s_, d_, weight_shape):
  """conv2d's weight gradient: the sum over batch and output positions of grad times the padded input's windows (the
  padding's zeros are terms, as in PyTorch). grad (N, Cout, *out), xp the padded input (N, Cin, *padded)."""
  n, g, bs, (cout, cin_g, *k_) = len(s_), groups, grad.shape[0], weight_shape
  win, o_ = xp._pool(k_, s_, d_), grad.shape[2:]
  # Two stages: partial sums over chunks of the batch whose inputs fit in the CPU's cache (each output tile rereads
  # them), then the sum of the partials. The partials are laid out (chunks, g, cin/g, *k, cout/g) with the gradient
  # copied channels-last, so the kernel's last (stored contiguously) axis is contiguous in a load too: the C compiler
  # vectorizes along it.
  c = _batch_chunk(bs, (prod(xp.shape[1:]) + prod(grad.shape[1:])) * grad.dtype.itemsize)
  gl = grad.reshape(bs, g, cout // g, *o_).permute(0, 1, *range(3, 3 + n), 2).contiguous()
  gl = gl.reshape(bs // c, c, g, 1, *o_, *(1,) * n, cout // g)
  gw = (gl * win.reshape(bs // c, c, g, cin_g, *o_, *k_, 1)).sum((1, *range(4, 4 + n))).contiguous().sum(0)
  return gw.permute(0, n + 2, 1, *range(2, 2 + n)).reshape(weight_shape)

def _reduce_loss(loss, reduction: str, op: str, count=None):
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  if reduction == "mean": return loss.mean() if count is None else loss.sum() / count
  raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")

class NNMixin:
  __slots__ = ()
  # (Tensor, in tensor.py, is built from this mixin and must not be imported here: methods find the class as
  # type(self), often as a local `Tensor = type(self)`; annotations say Self)
  # --------------------------------------------------------------------------------------------- matrix multiplication

  def dot(self, w: Self, dtype=None) -> Self:
    Tensor = type(self)
    x = self
    if not isinstance(w, Tensor): w = Tensor(w, device=self.device)
    xs, ws = x.shape, w.shape
    if not xs or not ws: raise ValueError(f"matmul: both arguments need at least 1 dimension, got shapes {xs} and {ws}")
    k_w = ws[-2] if len(ws) > 1 else ws[0]
    if xs[-1] != k_w: raise ValueError(f"matmul: shapes {xs} and {ws} cannot be multiplied ({xs[-1]} != {k_w})")
    if x.device != w.device: raise RuntimeError(f"matmul: expected all tensors on the same device, got {x.device} and {w.device}")
    if len(xs) > 2 or len(ws) > 2:
      try: _broadcast_shape("matmul", xs[:-2], ws[:-2])
      except ValueError: raise ValueError(f"matmul: batch dimensions of {xs} and {ws} cannot be broadcast together") from None
    # out[..., n, m] = sum_k x[..., n, 1, k] * w[..., 1, m, k]: one fused multiply-reduce kernel
    if len(ws) > 1:
      wv = w.transpose(-1, -2)
      if len(xs) > 1: xv, wv = x.reshape(xs[:-1] + (1, xs[-1])), wv.reshape(ws[:-2] + (1, ws[-1], ws[-2]))
      else: xv = x.reshape((1, xs[-1]))   # (k,) @ (..., k, m): x as one row
    else: xv, wv = x, w
    out = (xv * wv).sum(-1, dtype=dtype)
    return out.cast(dtype) if dtype is not None else out
  def matmul(self, x: Self, reverse=False, dtype=None) -> Self: return x.dot(self, dtype=dtype) if reverse else self.dot(x, dtype=dtype)

  # ------------------------------------------------------------------------------------------------------------ einsum

  @staticmethod
  def einsum(formula: str, *operands, dtype=None):
    """Tensor.einsum("ij,jk->ik", a, b) (the operands cast to dtype first if given). Supports '...', implicit output, repeated letters in one operand (diagonals)
    and broadcasting of size-1 dims. Like PyTorch (without opt_einsum): letters found in one operand only (and not in
    the output) are summed first, then the operands are contracted left to right, each product summing the letters no
    later operand or the output needs. A product is the operands permuted/reshaped to one letter order and multiplied."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)): operands = tuple(operands[0])
    if dtype is not None: operands = tuple(x.cast(dtype) for x in operands)
    lhs, arrow, out = formula.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
      raise ValueError(f"einsum: formula {formula!r} has {len(terms)} operand(s) but {len(operands)} were given")
    # '...' becomes private letters, right-aligned like broadcasting
    nell = [x.ndim - (len(t) - 3) if "..." in t else 0 for t, x in zip(terms, operands)]
    if any(n < 0 for n in nell): raise ValueError(f"einsum: {formula!r} has more letters than dims for shapes {[x.shape for x in operands]}")
    ell = "".join(chr(0xE000 + i) for i in range(max(nell, default=0)))
    terms = [t.replace("...", ell[len(ell) - n:]) for t, n in zip(terms, nell)]
    if arrow: out = out.replace("...", ell)
    else: out = ell + "".join(sorted(c for c in set("".join(terms)) if c not in ell and "".join(terms).count(c) == 1))
    for t, x in zip(terms, operands):
      if len(t) != x.ndim: raise ValueError(f"einsum: term {t!r} of {formula!r} has {len(t)} letters for an operand of shape {x.shape}")
    if len(set(out)) != len(out) or any(c not in "".join(terms) for c in out):
      raise ValueError(f"einsum: output {out!r} of {formula!r} must have unique letters that appear in the inputs")
    xs, sizes = [], {}
    for t, x in zip(terms, operands):
      x, t = NNMixin._einsum_diagonal(x, t, formula)
      for c, s in zip(t, x.shape):
        if sizes.get(c, 1) not in (1, s) and s != 1:
          raise ValueError(f"einsum: letter {c!r} has sizes {sizes[c]} and {s} in {formula!r} (shapes {[o.shape for o in operands]})")
        sizes[c] = max(sizes.get(c, 1), s)
      xs.append((x, t))
    counts = {c: sum(t.count(c) for _, t in xs) for c in sizes}
    def sum_single(x, t):   # the letters this operand alone has and the output lacks, summed at once
      gone = [i for i, c in enumerate(t) if counts[c] == 1 and c not in out]
      return (x.sum(tuple(gone)) if gone else x), "".join(c for i, c in enumerate(t) if i not in gone)
    def contract(operands, keep):   # the product of operands [(x, letters)] with the letters not in keep summed
      order = dedup([c for _, t in operands for c in t if c in keep] + [c for _, t in operands for c in t])
      prod_ = None
      for x, t in operands:   # to the common order, with size-1 dims for missing letters
        own = dict(zip(t, x.shape))
        x = x.permute(sorted(range(len(t)), key=lambda i: order.index(t[i]))) if t else x
        x = x.reshape(tuple(own.get(c, 1) for c in order)) if order else x
        prod_ = x if prod_ is None else prod_ * x
      kept = "".join(c for c in order if c in keep)
      red = tuple(range(len(kept), len(order)))
      return (prod_.sum(red) if red else prod_), kept
    xs = [sum_single(x, t) for x, t in xs]
    acc = xs[0]
    for i in range(1, len(xs)):
      acc = contract([acc, xs[i]], set(out) | {c for _, t in xs[i + 1:] for c in t})
    x, t = acc
    return x.permute(tuple(t.index(c) for c in out)) if t != out else x

  @staticmethod
  def _einsum_diagonal(x, t: str, formula: str):
    """Take the diagonal for each letter repeated in one term: x[.., i, .., i, ..] -> x[.., i, ..] (views only)."""
    while len(set(t)) != len(t):
      c = next(c for c in t if t.count(c) > 1)
      a, b = t.index(c), t.index(c, t.index(c) + 1)
      n = x.shape[a]
      if x.shape[b] != n: raise ValueError(f"einsum: repeated letter {c!r} in {formula!r} has sizes {n} and {x.shape[b]}")
      rest = [i for i in range(len(t)) if i not in (a, b)]
      x = x.permute(rest + [a, b])
      pre = x.shape[:-2]
      # row-major (n, n) flattened and padded to n*(n+1): element [i, 0] of the (n, n+1) view is x[i, i]
      x = x.reshape(*pre, n * n).pad((None,) * len(pre) + ((0, n),)).reshape(*pre, n, n + 1)
      x = x.shrink((None,) * len(pre) + (None, (0, 1))).reshape(*pre, n)
      t = "".join(t[i] for i in rest) + c
    return x, t

  def linear(self, weight, bias=None, dtype=None):
    """x @ weight + bias with weight of shape (in, out) (a 1-D weight multiplies elementwise); all cast to dtype if given."""
    if dtype is not None: return self.cast(dtype).linear(weight.cast(dtype), None if bias is None else bias.cast(dtype))
    if weight.ndim == 1: x = self * weight
    else:
      if self.ndim == 0 or self.shape[-1] != weight.shape[0]:
        raise ValueError(f"linear: input {self.shape} and weight {weight.shape} (in, out) do not match: need input.shape[-1] == weight.shape[0]")
      x = self @ weight
    return x if bias is None else x + bias

  # ------------------------------------------------------------------------------------------------------ convolutions

  def _pool(self, k_: Sequence[int], s_: Sequence[int], d_: Sequence[int], op: str = "pool"):
    """Sliding windows over the last len(k_) dims as a view: (..., *in) -> (..., *out, *k_), out = (in-d*(k-1)-1)//s+1."""
    n, nb = len(k_), self.ndim - len(k_)
    x = self
    for j in reversed(range(n)):   # last dim first, so the axes of the dims still to do don't move
      ax = nb + j
      i, k, s, d = x.shape[ax], k_[j], s_[j], d_[j]
      o = (i - d * (k - 1) - 1) // s + 1
      if o <= 0: raise ValueError(f"{op}: window {k} with dilation {d} does not fit in a dimension of size {i} (padded input {self.shape})")
      pre, post = x.shape[:ax], x.shape[ax + 1:]
      if d == 1 and s >= k:   # windows that do not overlap: a reshape of o*s elements (and its gradient is a pad)
        # (the first o*s, or all i with zeros after them: the last window may end before its stride does)
        x = x._pad_zero(((0, 0),) * len(pre) + ((0, o * s - i),) + ((0, 0),) * len(post)).reshape(*pre, o, s, *post)
        x = x.shrink((None,) * (len(pre) + 1) + ((0, k),) + (None,) * len(post)).transpose(ax, ax + 1)
        continue
      # want w[a, t] = x[a*d + t*s]. Repeat x and lay it out in rows of length L = d (mod i): row a then starts at
      # a*d (mod i), and a*d + t*s < i never wraps. L >= o*s so the output positions fit in one row.
      L = d + i * max(0, ceildiv(o * s - d, i))
      r = ceildiv(k * L, i)
      def at(v): return (None,) * len(pre) + (v,)
      x = x.reshape(*pre, 1, i, *post).expand(*pre, r, i, *post).reshape(*pre, r * i, *post)
      x = x.shrink(at((0, k * L)) + (None,) * len(post)).reshape(*pre, k, L, *post)
      x = x.shrink(at(None) + ((0, o * s),) + (None,) * len(post)).reshape(*pre, k, o, s, *post)
      x = x.shrink(at(None) + (None, (0, 1)) + (None,) * len(post)).reshape(*pre, k, o, *post)
    # now (..., k1, o1, k2, o2, ...): move the window dims last
    return x.permute(*range(nb), *[nb + 2 * j + 1 for j in range(n)], *[nb + 2 * j for j in range(n)])

  def conv2d(self, weight, bias=None, groups: int = 1, stride=1, dilation=1, padding=0, dtype=None):
    """Convolution over any number of spatial dims: input (N, Cin, *spatial), weight (Cout, Cin/groups, *kernel).
    padding: int, one int per spatial dim, a flat (left, right, top, bottom, ...) tuple, per-dim pairs, 'valid' or 'same'.
    dtype: the inputs are cast to it first (so it is the dtype products are summed in)."""
    if dtype is not None:
      return self.cast(dtype).conv2d(weight.cast(dtype), None if bias is None else bias.cast(dtype), groups, stride, dilation, padding)
    n, shapes = weight.ndim - 2, f" (input {self.shape}, weight {weight.shape})"
    _check_groups("conv2d", groups, shapes)
    if self.ndim != weight.ndim or n < 1 or self.shape[1] != weight.shape[1] * groups or weight.shape[0] % groups:
      raise ValueError(f"conv2d: input {self.shape} and weight {weight.shape} do not match with groups={groups}: need "
                       f"input (N, Cin, *spatial) and weight (Cout, Cin/groups, *kernel) of the same rank, Cout divisible by groups")
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
      raise ValueError(f"conv2d: bias shape {bias.shape} must be ({weight.shape[0]},){shapes}")
    k_ = weight.shape[2:]
    s_, d_ = _tuple(stride, n, "conv2d", "stride", shapes=shapes), _tuple(dilation, n, "conv2d", "dilation", shapes=shapes)
    if padding == "valid": padding = 0
    if padding == "same":   # stride 1: total d*(k-1), the extra one on the right like torch
      if any(s != 1 for s in s_): raise ValueError(f"conv2d: padding='same' needs stride 1, got stride {s_}{shapes}")
      padding = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(k_, d_)]
    if isinstance(padding, str): raise ValueError(f"conv2d: padding must be 'same', 'valid' or ints, got {padding!r}{shapes}")
    pads = _pads(padding, n, "conv2d", shapes)
    _check_windows("conv2d", self.shape[2:], k_, d_, pads, shapes)
    return self._conv(weight, bias, groups, s_, d_, pads)

  def _conv(self, weight, bias, groups: int, s_: tuple[int, ...], d_: tuple[int, ...], pads: list[tuple[int, int]]):
    """conv2d with checked arguments; a negative padding crops (conv_transpose2d's gradient uses that). The padding's
    zeros are terms of the sums, as in PyTorch (an inf weight meeting them gives NaN there)."""
    n, (bs, cin), cout, k_ = len(s_), self.shape[:2], weight.shape[0], weight.shape[2:]
    xp = self._pad_zero(((0, 0), (0, 0), *pads))
    win = xp._pool(k_, s_, d_, "conv2d")   # (N, Cin, *out, *k)
    o_ = win.shape[2:2 + n]
    g = groups
    w = weight.reshape(1, g, cout // g, cin // g, *(1,) * n, *k_)
    out = (win.reshape(bs, g, 1, cin // g, *o_, *k_) * w).sum((3, *range(4 + n, 4 + 2 * n))).reshape(bs, cout, *o_)

    def backward(grad):
      grad = grad.contiguous()   # read by every window position below: compute it once instead of per read
      return (_conv_input_grad(grad, weight.detach(), g, s_, d_, pads, self.shape[2:]),
              _conv_weight_grad(grad, xp.detach(), g, s_, d_, weight.shape))
    out = out.custom_gradient([self, weight], backward)
    return out if bias is None else out + bias.reshape(1, cout, *(1,) * n)

  def conv_transpose2d(self, weight, bias=None, groups: int = 1, stride=1, dilation=1, padding=0, output_padding=0):
    """Transposed convolution: input (N, Cin, *spatial), weight (Cin, Cout/groups, *kernel): conv2d's input gradient,
    computed as PyTorch does (only real terms are added; its gradients are a conv2d and conv2d's weight gradient)."""
    n, shapes = weight.ndim - 2, f" (input {self.shape}, weight {weight.shape})"
    _check_groups("conv_transpose2d", groups, shapes)
    if self.ndim != weight.ndim or n < 1 or self.shape[1] != weight.shape[0] or weight.shape[0] % groups:
      raise ValueError(f"conv_transpose2d: input {self.shape} and weight {weight.shape} do not match with groups={groups}: need "
                       f"input (N, Cin, *spatial) and weight (Cin, Cout/groups, *kernel) of the same rank, Cin divisible by groups")
    cout_g, k_ = weight.shape[1], weight.shape[2:]
    s_, d_ = _tuple(stride, n, "conv_transpose2d", "stride", shapes=shapes), _tuple(dilation, n, "conv_transpose2d", "dilation", shapes=shapes)
    op_ = _tuple(output_padding, n, "conv_transpose2d", "output_padding", 0, shapes)
    if any(o >= max(s, d) for o, s, d in zip(op_, s_, d_)):
      raise ValueError(f"conv_transpose2d: output_padding {op_} must be smaller than the stride {s_} or the dilation {d_} (per dim){shapes}")
    if bias is not None and tuple(bias.shape) != (cout_g * groups,):
      raise ValueError(f"conv_transpose2d: bias shape {bias.shape} must be ({cout_g * groups},) with groups={groups}{shapes}")
    pads = _pads(padding, n, "conv_transpose2d", shapes)
    out_ = [(i - 1) * s - b - a + d * (k - 1) + o + 1 for i, s, (b, a), k, d, o in zip(self.shape[2:], s_, pads, k_, d_, op_)]
    if 0 in self.shape[2:] or any(k < 1 for k in k_) or any(o <= 0 for o in out_):
      raise ValueError(f"conv_transpose2d: input {self.shape} with weight {weight.shape}, stride {s_}, dilation {d_}, padding {padding} "
                       f"and output_padding {op_} gives no output: need spatial dims and kernel sizes >= 1 and "
                       f"(in-1)*stride - 2*padding + dilation*(kernel-1) + output_padding + 1 > 0")
    out = _conv_input_grad(self, weight, groups, s_, d_, pads, out_)
    # the conv2d this is the input gradient of: the output padded on the left by the padding, on the right so that
    # exactly the input's length of windows fit (negative: crop)
    conv_pads = [(b, (i - 1) * s + d * (k - 1) + 1 - o - b) for i, s, (b, _), k, d, o in zip(self.shape[2:], s_, pads, k_, d_, out_)]

    def backward(grad):
      grad = grad.contiguous()
      return (grad._conv(weight.detach(), None, groups, s_, d_, conv_pads),
              _conv_weight_grad(self.detach(), grad._pad_zero(((0, 0), (0, 0), *conv_pads)), groups, s_, d_, weight.shape))
    out = out.custom_gradient([self, weight], backward)
    return out if bias is None else out + bias.reshape(1, cout_g * groups, *(1,) * n)

  def conv1d(self, weight, bias=None, groups: int = 1, stride=1, dilation=1, padding=0):
    if self.ndim != 3: raise ValueError(f"conv1d: input must be (N, Cin, L), got {self.shape} (weight {weight.shape})")
    return self.conv2d(weight, bias, groups, stride, dilation, padding)

  # ----------------------------------------------------------------------------------------------------------- pooling

  def _pool_args(self, op, kernel_size, stride, dilation, padding, ceil_mode):
    shapes = f" (input {self.shape})"
    # the pooled dims: 2 for an int kernel_size, else its length; a 1-tuple kernel_size beside longer stride/dilation/
    # padding tuples applies to each of their dims (torch's max_pool2d(x, (3,), stride=(1, 2)))
    n = 2 if isinstance(kernel_size, int) else len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 0
    if n == 1: n = max([1] + [len(a) for a in (stride, dilation, padding) if isinstance(a, (tuple, list))])
    if n == 0 or self.ndim < n: raise ValueError(f"{op}: kernel_size must be an int or 1 to {self.ndim} ints, got {kernel_size!r}{shapes}")
    k_ = _tuple(kernel_size, n, op, "kernel_size", shapes=shapes)
    s_ = k_ if stride is None else _tuple(stride, n, op, "stride", shapes=shapes)
    d_ = _tuple(dilation, n, op, "dilation", shapes=shapes)
    pads = _pads(padding, n, op, shapes)
    if any(max(p) > k // 2 for p, k in zip(pads, k_)):   # (like torch; else whole windows could lie in the padding)
      raise ValueError(f"{op}: padding {padding!r} must be at most half the kernel size {k_}{shapes}")
    extra = []   # ceil_mode: more padding on the right, so a last partial window (starting inside input or left pad) exists
    for i, k, s, d, (b, a) in zip(self.shape[-n:], k_, s_, d_, pads):
      span = i + b + a - d * (k - 1) - 1
      o = (-(-span // s) if ceil_mode else span // s) + 1
      if ceil_mode and (o - 1) * s >= i + b: o -= 1
      extra.append(max(0, (o - 1) * s + d * (k - 1) + 1 - (i + b + a)))
    # (with ceil_mode a window may be longer than the input, like torch's: it fits once the extra padding is added, which
    # it does exactly when there is an output)
    all_pads = tuple((b, a + e) for (b, a), e in zip(pads, extra))   # the given padding with that extra added
    _check_windows(op, self.shape[-n:], k_, d_, all_pads, shapes)
    return k_, s_, d_, pads, extra, all_pads

  def avg_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode=False, count_include_pad=True):
    """Average over windows of the last len(kernel_size) dims (an int kernel_size means 2 dims)."""
    k_, s_, d_, pads, extra, all_pads = self._pool_args("avg_pool2d", kernel_size, stride, dilation, padding, ceil_mode)
    n = len(k_)
    def padded(x, pp): return x.pad((None,) * (x.ndim - n) + tuple(pp))
    x = self if self.dtype.is_float else self.float()
    total = padded(x, all_pads)._pool(k_, s_, d_, "avg_pool2d").sum(tuple(range(-n, 0)))
    if all(p == (0, 0) for p in all_pads): return total / prod(k_)
    # the divisor counts the explicit padding (count_include_pad) but never the ceil_mode overhang, like torch
    Tensor = type(self)
    sp = self.shape[-n:]
    if count_include_pad: ones = padded(Tensor.ones(*[i + b + a for i, (b, a) in zip(sp, pads)], device=self.device), [(0, e) for e in extra])
    else: ones = padded(Tensor.ones(*sp, device=self.device), all_pads)
    return total / ones._pool(k_, s_, d_).sum(tuple(range(-n, 0)))

  def max_pool2d(self, kernel_size=(2, 2), stride=None, dilation=1, padding=0, ceil_mode=False, return_indices=False):
    """Max over windows of the last len(kernel_size) dims; padding counts as -inf. return_indices: also each maximum's
    position, flattened over the pooled dims (what max_unpool2d takes)."""
    k_, s_, d_, _, _, all_pads = self._pool_args("max_pool2d", kernel_size, stride, dilation, padding, ceil_mode)
    Tensor, n, K = type(self), len(k_), prod(k_)
    padded = any(p != (0, 0) for p in all_pads)
    x = self.pad((None,) * (self.ndim - n) + all_pads, value=self.dtype.min) if padded else self
    windows = x._pool(k_, s_, d_, "max_pool2d")
    out = windows.detach().max(tuple(range(-n, 0)))
    def winners():   # PyTorch's choice in each window: its first maximum (row-major), or its last NaN
      w, o = windows.detach().reshape(*out.shape, K), out.unsqueeze(-1)
      pos = Tensor.arange(K, device=self.device)
      # the highest score wins: a maximum scores K - pos (the first), a NaN K + 1 + pos (the last; a window holding one
      # has no other maximum), padding never
      score = (w == o).where(K - pos, w.isnan().where(K + 1 + pos, 0))
      if padded: score = Tensor.full(self.shape[-n:], True, device=self.device).pad(all_pads, value=False)._pool(k_, s_, d_).reshape(*out.shape[-n:], K).where(score, 0)
      return score == score.max(-1, keepdim=True)
    # the gradient: a window's all to its winner
    if self.dtype.is_float: out = out.custom_gradient([windows], lambda g: (winners().where(g.unsqueeze(-1), 0.0).reshape(windows.shape),))
    if not return_indices: return out
    flat = Tensor.arange(prod(self.shape[-n:]), device=self.device).reshape(self.shape[-n:])
    flat = flat.pad(all_pads)._pool(k_, s_, d_).reshape(*out.shape[-n:], K)
    return out, winners().where(flat, 0).sum(-1)

  def max_unpool2d(self, indices, kernel_size=(2, 2), stride=None, dilation=1, padding=0, output_size=None):
    """The inverse of max_pool2d(return_indices=True): each value put at its index (flattened over the last
    len(kernel_size) dims) in zeros of the pooled input's size (or output_size); where several name one position the
    last writes it, like PyTorch."""
    Tensor = type(self)
    shapes = f" (input {self.shape}, indices {getattr(indices, 'shape', None)})"
    n = 2 if isinstance(kernel_size, int) else len(kernel_size) if isinstance(kernel_size, (tuple, list)) else 0
    if n == 0 or self.ndim < n: raise ValueError(f"max_unpool2d: kernel_size must be an int or 1 to {self.ndim} ints, got {kernel_size!r}{shapes}")
    k_ = _tuple(kernel_size, n, "max_unpool2d", "kernel_size", shapes=shapes)
    s_ = k_ if stride is None else _tuple(stride, n, "max_unpool2d", "stride", shapes=shapes)
    d_, pads = _tuple(dilation, n, "max_unpool2d", "dilation", shapes=shapes), _pads(padding, n, "max_unpool2d", shapes)
    if not isinstance(indices, Tensor) or indices.dtype.is_float or indices.shape != self.shape:
      raise ValueError(f"max_unpool2d: indices must be an integer tensor of the input's shape{shapes}")
    if output_size is None: out_ = tuple((i - 1) * s - b - a + d * (k - 1) + 1 for i, s, d, k, (b, a) in zip(self.shape[-n:], s_, d_, k_, pads))
    else: out_ = tuple(output_size)[-n:]
    if len(out_) != n or not all(isinstance(o, int) and o > 0 for o in out_):
      raise ValueError(f"max_unpool2d: output_size {output_size} must end in {n} positive sizes{shapes}")
    pre, m = self.shape[:-n], prod(self.shape[-n:])
    zeros = Tensor.zeros(*pre, prod(out_), dtype=self.dtype, device=self.device)
    return zeros.scatter(-1, indices.reshape(*pre, m), self.reshape(*pre, m)).reshape(*pre, *out_)

  def avg_pool1d(self, kernel_size=2, stride=None, dilation=1, padding=0, ceil_mode=False, count_include_pad=True):
    kt = lambda v: (v,) if isinstance(v, int) else v  # noqa: E731
    return self.avg_pool2d(kt(kernel_size), None if stride is None else kt(stride), kt(dilation), kt(padding), ceil_mode, count_include_pad)
  def max_pool1d(self, kernel_size=2, stride=None, dilation=1, padding=0, ceil_mode=False):
    kt = lambda v: (v,) if isinstance(v, int) else v  # noqa: E731
    return self.max_pool2d(kt(kernel_size), None if stride is None else kt(stride), kt(dilation), kt(padding), ceil_mode)

  def _resample(self, taps: list[Optional[list[list[list[Optional[float]]]]]]):
    """Contract each of the last len(taps) dims with (out, in) matrices, one per tap: out[.., o, ..] = sum over the tap
    matrices m of sum_i m[o][i] * x[.., i, ..], over the i with m[o][i] not None (so an inf elsewhere does not make
    inf * 0 = NaN; a tap of weight 0 does, like PyTorch's kernels)."""
    Tensor = type(self)
    x, n = self, len(taps)
    for j, mats in enumerate(taps):
      if mats is None: continue   # (a dim left as it is)
      xt = x.transpose(x.ndim - n + j, -1).unsqueeze(-2)
      out = None
      for m in mats:
        if all(sum(v is not None for v in row) <= 1 for row in m):
          # one entry per row (each tap of the linear modes): a selecting sum over a one-hot computed from the indices,
          # which lowering makes one read, then a scale (a weighted sum would be a contraction over the whole axis)
          cols = [next((c for c, v in enumerate(row) if v is not None), -1) for row in m]
          hit = Tensor(cols, device=x.device).unsqueeze(-1) == Tensor.arange(len(m[0]), device=x.device)
          w = Tensor([0.0 if c < 0 else row[c] for c, row in zip(cols, m)], dtype=x.dtype, device=x.device)
          t = hit.where(xt, 0.0).sum(-1) * w
        else:
          w = Tensor([[0.0 if v is None else v for v in row] for row in m], dtype=x.dtype, device=x.device)
          hit = Tensor([[v is not None for v in row] for row in m], device=x.device)
          t = hit.where(xt * w, 0.0).sum(-1)
        out = t if out is None else out + t
      x = out.transpose(x.ndim - n + j, -1)
    return x

  def adaptive_avg_pool2d(self, output_size):
    """Average pooling to a fixed output size over the last len(output_size) dims (None keeps a dim), torch's windows:
    [floor(o*in/out), ceil((o+1)*in/out))."""
    osz = (output_size, output_size) if isinstance(output_size, int) else tuple(output_size)
    if len(osz) > self.ndim: raise ValueError(f"adaptive_avg_pool2d: output_size {osz} has more dims than the input {self.shape}")
    x, n = self if self.dtype.is_float else self.float(), len(osz)
    if 0 in osz:   # an empty output (torch's too): the pooled dims of size 0 cut to nothing, the others pooled as asked
      x = x.shrink((None,) * (x.ndim - n) + tuple((0, 0) if o == 0 else None for o in osz))
      return x.adaptive_avg_pool2d(tuple(None if o == 0 else o for o in osz)) if x.shape[-n:].count(0) < n else x
    mats = []
    for i, o in zip(self.shape[-n:], osz):
      if o is None:   # kept as it is
        mats.append(None)
        continue
      if o < 0 or i == 0: raise ValueError(f"adaptive_avg_pool2d: cannot pool a dimension of size {i} to {o} (input {self.shape})")
      rows = []
      for t in range(o):
        s, e = (t * i) // o, -(-((t + 1) * i) // o)
        rows.append([1.0 / (e - s) if s <= c < e else None for c in range(i)])
      mats.append([rows])
    return x._resample(mats)

  # ------------------------------------------------------------------------------------------------------ interpolate

  def interpolate(self, size, mode: str = "linear", align_corners: bool = False):
    """Resize the last len(size) dims. mode: nearest, nearest-exact, linear/bilinear/trilinear (separable), area.
    Each axis is a contraction with an (out, in) selection/weight matrix, so it is exact and differentiable."""
    size = (size,) * max(1, self.ndim - 2) if isinstance(size, int) else tuple(size)
    n = len(size)
    if n == 0 or n > self.ndim or any(not isinstance(s, int) or s <= 0 for s in size):
      raise ValueError(f"interpolate: size {size} must be positive ints, at most one per dim of the input {self.shape}")
    if mode == "area": return self.adaptive_avg_pool2d(size)
    if mode in ("nearest", "nearest-exact"):
      if align_corners: raise ValueError(f"interpolate: align_corners only applies to the linear modes, not {mode!r}")
      Tensor = type(self)
      x = self
      for j, o in enumerate(size):
        ax, i = self.ndim - n + j, self.shape[self.ndim - n + j]
        scale, off = _f32(i / o), 0.5 if mode == "nearest-exact" else 0.0
        src = [min(int(math.floor(_f32(_f32(t + off) * scale))), i - 1) for t in range(o)]   # torch's float32 index
        hit = Tensor(src, device=self.device).unsqueeze(-1) == Tensor.arange(i, device=self.device)   # (out, in) one-hot
        x = hit.where(x.transpose(ax, -1).unsqueeze(-2), 0).sum(-1).cast(x.dtype).transpose(ax, -1)
      return x
    if mode not in ("linear", "bilinear", "trilinear"):
      raise ValueError(f"interpolate: mode {mode!r} is not supported; valid: nearest, nearest-exact, linear, bilinear, trilinear, area")
    mats = []
    for i, o in zip(self.shape[-n:], size):
      rows0, rows1 = [], []   # PyTorch's two taps, (1 - lam) x[i0] + lam x[i1], both taken even when i1 == i0 or lam == 0
      for t in range(o):
        # torch's float32 source position (its scale rounded to float32, then one fused multiply-add)
        if align_corners: src = _f32(t * _f32((i - 1) / (o - 1))) if o > 1 else 0.0
        else: src = max(0.0, _f32((t + 0.5) * _f32(i / o) - 0.5))
        i0 = min(int(src), i - 1)
        lam = src - i0
        i1 = i0 if i == o else min(i0 + 1, i - 1)   # (an axis kept at its size: torch reads x[t] alone, with weights 1 and 0)
        rows0.append([1.0 - lam if c == i0 else None for c in range(i)])
        rows1.append([lam if c == i1 else None for c in range(i)])
      mats.append([rows0, rows1])
    return (self if self.dtype.is_float else self.float())._resample(mats)

  # ------------------------------------------------------------------------------------------- normalisation, dropout

  def layernorm(self, axis=-1, eps: float = 1e-5):
    """(x - mean) / sqrt(var + eps) over axis (int or tuple), no affine."""
    y = self - self.mean(axis, keepdim=True)
    return y * (y.square().mean(axis, keepdim=True) + eps).rsqrt()

  def rmsnorm(self, axis=-1, eps: float = 1e-6):
    return self * (self.square().mean(axis, keepdim=True) + eps).rsqrt()

  def normalize(self, p: float = 2.0, dim: int = 1, eps: float = 1e-12):
    """self divided by its p-norm along dim (at least eps), like torch F.normalize."""
    return self / self._vector_norm(p, dim, keepdim=True).clamp(eps)

  def batchnorm(self, weight, bias, mean, invstd, axis=1):
    """(x - mean) * invstd * weight + bias, the parameters laid along `axis` (int or tuple); weight/bias may be None."""
    axes = tuple(a % self.ndim for a in ((axis,) if isinstance(axis, int) else axis))
    shape = tuple(s if i in axes else 1 for i, s in enumerate(self.shape))
    def b(t, name):
      if t.numel() != prod(shape): raise ValueError(f"batchnorm: {name} of shape {t.shape} does not match axis {axis} of input {self.shape}")
      return t.reshape(shape)
    x = (self - b(mean, "mean")) * b(invstd, "invstd")
    if weight is not None: x = x * b(weight, "weight")
    return x if bias is None else x + b(bias, "bias")

  def dropout(self, p: float = 0.5):
    """Zero each element with probability p and scale the rest by 1/(1-p); identity unless Tensor.training."""
    Tensor = type(self)
    if not 0.0 <= p <= 1.0: raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not Tensor.training or p == 0: return self
    keep = (Tensor.rand(*self.shape, device=self.device, contiguous=False) >= p).contiguous()   # (1 byte each, computed once)
    out = keep.where(self, 0)
    return out if p == 1 else out * (1.0 / (1.0 - p))

  # ----------------------------------------------------------------------------------------------------------- losses

  def _nll(self, Y, cax: int, weight, ignore_index: int, label_smoothing: float, reduction: str, op: str):
    """self: log-probabilities with classes on axis cax; Y: integer targets (self's shape without cax)."""
    Tensor = type(self)
    if not isinstance(Y, Tensor) or Y.dtype.is_float:
      raise TypeError(f"{op}: class-index targets must be an integer Tensor, got {getattr(Y, 'dtype', type(Y).__name__)}")
    if Y.shape != self.shape[:cax] + self.shape[cax + 1:]:
      raise ValueError(f"{op}: target shape {Y.shape} does not match input {self.shape} without the class dim {cax}")
    C = self.shape[cax]
    if weight is not None and tuple(weight.shape) != (C,): raise ValueError(f"{op}: weight shape {weight.shape} must be ({C},)")
    cls = Tensor.arange(C, device=self.device).reshape(C, *(1,) * (self.ndim - 1 - cax))
    keep = Y != ignore_index if ignore_index is not None else Y == Y   # (None: none ignored, tinygrad's default)
    onehot = (Y.unsqueeze(cax) == cls) & keep.unsqueeze(cax)   # an ignored target matches no class
    wc = 1.0 if weight is None else weight.reshape(cls.shape)
    lw = self * wc
    loss = -(1 - label_smoothing) * onehot.where(lw, 0).sum(cax)
    if label_smoothing: loss = loss - (label_smoothing / C) * keep.where(lw.sum(cax), 0)
    loss = keep.where(loss, 0.0)   # an ignored target's loss is +0.0 as in torch (the negated empty sum above is -0.0)
    count = onehot.where(wc, 0.0).sum()   # mean divides by the (weighted) number of non-ignored targets
    return _reduce_loss(loss, reduction, op, count)

  def cross_entropy(self, Y, reduction: str = "mean", label_smoothing: float = 0.0, ignore_index: int = -100):
    """Like torch F.cross_entropy: logits (N, C, d1, ...) or (C,); Y integer classes (N, d1, ...), or probabilities or
    one-hot rows of any dtype in the input's shape (tinygrad's rule: the shape decides)."""
    cax = 1 if self.ndim > 1 else 0
    if self.ndim == 0: raise ValueError(f"cross_entropy: input must have a class dim, got shape {self.shape}")
    if not 0.0 <= label_smoothing <= 1.0: raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
    if not isinstance(Y, type(self)): raise TypeError(f"cross_entropy: target must be a Tensor, got {type(Y).__name__}")
    logp = self.log_softmax(cax)
    if Y.shape != self.shape:
      if Y.dtype.is_float: raise ValueError(f"cross_entropy: probability targets {Y.shape} must have the input's shape {self.shape}")
      return logp._nll(Y, cax, None, ignore_index, label_smoothing, reduction, "cross_entropy")
    C = self.shape[cax]
    return _reduce_loss(-(logp * (Y * (1 - label_smoothing) + label_smoothing / C)).sum(cax), reduction, "cross_entropy")

  def sparse_categorical_crossentropy(self, Y, ignore_index: int = -1, label_smoothing: float = 0.0, reduction: str = "mean"):
    """Logits (..., C) with classes last, Y integer classes (...); the mean is over the non-ignored targets."""
    if self.ndim == 0: raise ValueError(f"sparse_categorical_crossentropy: input must have a class dim, got shape {self.shape}")
    return self.log_softmax(-1)._nll(Y, self.ndim - 1, None, ignore_index, label_smoothing, reduction, "sparse_categorical_crossentropy")

  def nll_loss(self, Y, weight=None, ignore_index: Optional[int] = -100, reduction: str = "mean"):
    """Like torch F.nll_loss: self is log-probabilities (N, C, d1, ...) or (C,)."""
    if self.ndim == 0: raise ValueError(f"nll_loss: input must have a class dim, got shape {self.shape}")
    return self._nll(Y, 1 if self.ndim > 1 else 0, weight, ignore_index, 0.0, reduction, "nll_loss")

  def binary_crossentropy(self, Y, reduction: str = "mean"):
    """self: probabilities. The logs are clamped at -100 like torch."""
    if Y.shape != self.shape: raise ValueError(f"binary_crossentropy: target {Y.shape} must have the input's shape {self.shape}")
    x, y = self.detach(), Y.detach()
    loss = -(y * x.log().clip(-100) + (1 - y) * (1 - x).log().clip(-100))
    # PyTorch's gradients, not those of the clamped logs: (x - y) / max(x (1 - x), 1e-12) and -logit(x)
    loss = loss.custom_gradient([self, Y], lambda g: (g * (x - y) / (x * (1 - x)).maximum(1e-12), -g * (x / (1 - x)).log()))
    return _reduce_loss(loss, reduction, "binary_crossentropy")

  def binary_crossentropy_logits(self, Y, reduction: str = "mean", pos_weight=None):
    """self: logits. (1-y)*x - (1+(pw-1)*y) * logsigmoid(x) (exp never overflows), with PyTorch's gradients:
    sigmoid(x) - y, or (pw*y + 1 - y)*sigmoid(x) - pw*y, for x; -x, or logsigmoid(-x) - pw*logsigmoid(x), for y (not
    those of the expression, which give 0 * inf = NaN at an infinite logit)."""
    if Y.shape != self.shape: raise ValueError(f"binary_crossentropy_logits: target {Y.shape} must have the input's shape {self.shape}")
    if getattr(pos_weight, "requires_grad", False):   # (its gradient is not among those below: refused, like PyTorch)
      raise RuntimeError("binary_crossentropy_logits: pos_weight cannot require a gradient (give it detached)")
    x, y = self.detach(), Y.detach()
    log_sig = x.logsigmoid()
    if pos_weight is None:
      loss = (1 - y) * x - log_sig
      grad_x, grad_y = x.sigmoid() - y, -x
    else:
      loss = (1 - y) * x - (1 + (pos_weight - 1) * y) * log_sig
      pw_y = pos_weight * y
      grad_x, grad_y = (pw_y + 1 - y) * x.sigmoid() - pw_y, (-x).logsigmoid() - log_sig * pos_weight
    loss = loss.custom_gradient([self, Y], lambda g: (g * grad_x, g * grad_y))
    return _reduce_loss(loss, reduction, "binary_crossentropy_logits")

  def mse_loss(self, Y, reduction: str = "mean"):
    return _reduce_loss((self - Y).square(), reduction, "mse_loss")

  # --------------------------------------------------------------------------------------------------- linear algebra

  def _check_matrices(self, op: str):
    if self.ndim < 2: raise ValueError(f"{op}: input must be a matrix or a batch of matrices (..., m, n), got shape {self.shape}")
    return self._float_input()

  def qr(self):
    """Householder QR of (..., m, n): Q (..., m, m) orthogonal and R (..., m, n) upper triangular with Q @ R = self, like
    torch.linalg.qr(mode="complete"); LAPACK's reflectors (none where a column is already zero below the diagonal), so
    the same signs."""
    Tensor, x = type(self), self._check_matrices("qr")
    *b, m, n = x.shape
    R, Q = x, Tensor.eye(m, dtype=x.dtype, device=x.device).expand(*b, m, m)
    rows = Tensor.arange(m, device=x.device)
    for i in range(min(m - 1, n)):
      # the reflector I - tau v v^T (v[i] = 1, zero above i) that maps column i from row i down onto beta e_i
      col = R[..., :, i]
      below = (rows > i).where(col, 0)
      alpha, sigma2 = R[..., i, i], below.square().sum(-1)
      norm = (alpha * alpha + sigma2).sqrt()
      beta = (alpha < 0).where(norm, -norm)
      reflect = sigma2 != 0
      tau = reflect.where((beta - alpha) / beta, 0).unsqueeze(-1)
      v = (rows == i).where(1.0, below / reflect.where(alpha - beta, 1).unsqueeze(-1))
      R = (R - (tau * v).unsqueeze(-1) * (v.unsqueeze(-2) @ R)).contiguous()
      Q = (Q - (Q @ v.unsqueeze(-1)) * (tau * v).unsqueeze(-2)).contiguous()
    return Q, R.triu()   # (below the diagonal: rounding residue, exactly 0 in LAPACK's)

  def svd(self, full_matrices=True):
    """U, S, Vh with U @ diag(S) @ Vh = self, S descending (..., min(m, n)), U and Vh orthogonal (U (..., m, m) and
    Vh (..., n, n), or (..., m, k) and (..., k, n) with k = min(m, n) unless full_matrices), like torch.linalg.svd (the
    signs of singular vectors may differ, as between LAPACK builds). One-sided Jacobi on the R of a QR: a fixed number of
    sweeps, enough for float32 precision. No gradient."""
    x = self._check_matrices("svd").detach()
    *b, m, n = x.shape
    if m < n:
      U, S, Vh = x.transpose(-1, -2).svd(full_matrices)
      return Vh.transpose(-1, -2), S, U.transpose(-1, -2)
    Q, R = x.qr()
    W, V, S = R[..., :n, :n]._jacobi_svd()
    U = Q[..., :, :n] @ W
    return (U.cat(Q[..., :, n:], dim=-1) if full_matrices else U), S, V.transpose(-1, -2)

  def _jacobi_svd(self):
    """(..., n, n) -> (U, V, S), S descending: column pairs of W = self rotated (and of V = I alike) until all columns are
    orthogonal; then W = U diag(S). Each round rotates n // 2 disjoint pairs at once, the pairs of a round-robin
    tournament (n - 1 rounds a sweep, every pair met once)."""
    Tensor, n = type(self), self.shape[-1]
    W, V = self, Tensor.eye(n, dtype=self.dtype, device=self.device).expand(self.shape)
    h, k = n // 2, n + n % 2
    players, order = list(range(k)), list(range(n))   # (order: the column each stored column is; with n odd, player n sits out)
    for _ in range(max(6, 2 * (n - 1).bit_length()) if n > 1 else 0):
      for _ in range(k - 1):
        pairs = [(players[j], players[k - 1 - j]) for j in range(k // 2)]
        pairs = [p for p in pairs if n not in p]
        want = [a for a, _ in pairs] + [c for _, c in pairs] + [c for c in range(n) if all(c not in p for p in pairs)]
        W, V = W[..., [order.index(c) for c in want]], V[..., [order.index(c) for c in want]]
        order, players = want, [players[0], players[-1]] + players[1:-1]
        a, c = W[..., :h], W[..., h:2 * h]
        alpha, beta, gamma = a.square().sum(-2, keepdim=True), c.square().sum(-2, keepdim=True), (a * c).sum(-2, keepdim=True)
        rot = gamma != 0
        zeta = (beta - alpha) / (2 * rot.where(gamma, 1))
        t = rot.where((zeta >= 0).where(1.0, -1.0) / (zeta.abs() + (1 + zeta * zeta).sqrt()), 0)
        cos = (1 + t * t).rsqrt()
        sin = cos * t
        def rotate(M): return (M[..., :h] * cos - M[..., h:2 * h] * sin).cat(M[..., :h] * sin + M[..., h:2 * h] * cos, M[..., 2 * h:], dim=-1)
        W, V = rotate(W).contiguous(), rotate(V).contiguous()
    S = W.square().sum(-2).sqrt()
    S, idx = S.sort(-1, descending=True)
    cols = idx.unsqueeze(-2).expand(W.shape)
    U = W.gather(-1, cols) / (S == 0).where(1, S).unsqueeze(-2)
    # columns of singular values at rounding level (0 for a rank-deficient matrix) hold no direction: they are taken from
    # the complete Q of U's QR instead, orthogonal to the others (whose span its first columns are)
    eps = {dtypes.float16: 2.0 ** -10, dtypes.bfloat16: 2.0 ** -7, dtypes.float32: 2.0 ** -23, dtypes.float64: 2.0 ** -52}[self.dtype]
    small = (S <= S[..., :1] * (n * eps)).unsqueeze(-2)
    return small.where(U.qr()[0], U), V.gather(-1, cols), S

  def newton_schulz(self, steps: int, params: tuple, eps: float = 1.0e-7):
    """The Newton-Schulz iteration with an odd polynomial (tinygrad's): self over its Frobenius norm (+ eps) as G, then
    steps times G = sum_i params[i] (G G^T)^i G, on the transposed matrices where they are taller than wide; with
    params (1.5, -0.5) it converges to the orthogonal polar factor."""
    x = self._check_matrices("newton_schulz")
    if x.shape[-2] > x.shape[-1]: return x.transpose(-1, -2).newton_schulz(steps, params, eps).transpose(-1, -2)
    if not params: raise ValueError("newton_schulz: params must hold at least one coefficient")
    G = x / (x.square().sum((-2, -1), keepdim=True).sqrt() + eps)
    for _ in range(steps):
      A, term, out = G @ G.transpose(-1, -2), G, G * params[0]
      for p in params[1:]:
        term = A @ term
        out = out + term * p
      G = out.contiguous()   # (stored each step: the graph of a lazy G doubles with every step)
    return G

  # -------------------------------------------------------------------------------------------------------- attention

  def scaled_dot_product_attention(self, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                                   enable_gqa: bool = False, scale: Optional[float] = None):
    """softmax(q @ k^T * scale + mask) @ v with q = self (..., L, E), k (..., S, E), v (..., S, Ev).
    A bool mask keeps positions where True, a float mask is added; is_causal is torch's top-left aligned tril.
    enable_gqa: key and value have fewer heads (dim -3) than the query, each shared by a group of query heads.
    scale: torch's (default 1/sqrt(E)), after tinygrad's arguments."""
    Tensor = type(self)
    if enable_gqa and self.ndim >= 3 and key.ndim >= 3 and value.ndim >= 3:
      hq, hk, hv = self.shape[-3], key.shape[-3], value.shape[-3]
      if hk == 0 or hv == 0 or hq % hk or hq % hv:
        raise ValueError(f"scaled_dot_product_attention: with enable_gqa the query's {hq} heads must be a multiple of the key's {hk} "
                         f"and the value's {hv} (query {self.shape}, key {key.shape}, value {value.shape})")
      key, value = key.repeat_interleave(hq // hk, dim=-3), value.repeat_interleave(hq // hv, dim=-3)
    if self.ndim < 2 or key.ndim < 2 or value.ndim < 2 or self.shape[-1] != key.shape[-1] or key.shape[-2] != value.shape[-2]:
      raise ValueError(f"scaled_dot_product_attention: query {self.shape}, key {key.shape} and value {value.shape} do not match: "
                       f"need (..., L, E), (..., S, E), (..., S, Ev)")
    if is_causal and attn_mask is not None: raise ValueError("scaled_dot_product_attention: give attn_mask or is_causal, not both")
    L, S = self.shape[-2], key.shape[-2]
    if is_causal: attn_mask, is_causal = Tensor.arange(L, device=self.device).unsqueeze(-1) >= Tensor.arange(S, device=self.device), False
    if (rows := _attention_rows(self, key)) < L:
      # the scores of all queries at once would exceed the budget (a WebGPU device cannot hold them in one buffer):
      # the queries in chunks of `rows`, each row's softmax and result the same as at once
      part = lambda a: attn_mask[..., a:a + rows, :] if attn_mask is not None and attn_mask.ndim >= 2 and attn_mask.shape[-2] == L else attn_mask
      outs = [self[..., a:a + rows, :].scaled_dot_product_attention(key, value, part(a), dropout_p, scale=scale) for a in range(0, L, rows)]
      return outs[0].cat(*outs[1:], dim=-2)
    # PyTorch's math path: q and k each scaled by sqrt(|scale|) before the product (so a small scale keeps q.k finite)
    root = math.sqrt(abs(1 / math.sqrt(self.shape[-1]) if scale is None else scale))
    scores = (self * (-root if scale is not None and scale < 0 else root)) @ (key * root).transpose(-1, -2)
    if attn_mask is not None: scores = scores + (attn_mask.where(0.0, -math.inf) if attn_mask.dtype.is_bool else attn_mask)
    # a row with every score -inf (all masked) attends to nothing: zeros, not softmax's 0/0; the gradient is softmax's
    # from its output (PyTorch's math path, both)
    w = (scores == -math.inf).all(-1, keepdim=True).where(0.0, scores.detach().softmax(-1))
    w = w.custom_gradient([scores], lambda g: (w * (g - (g * w).sum(-1, keepdim=True)),))
    if dropout_p > 0: w = w.dropout(dropout_p)
    return w @ value

def _attention_rows(q, k) -> int:
  """How many query rows of q @ k^T scaled_dot_product_attention computes at once: all of them, unless their scores (4
  bytes each: float32, or float16 padded to the same budget) exceed ATTENTION_SCORES_BYTES, or where that is 0, the
  largest buffer of q's device when it has a limit (WEBGPU's maxStorageBufferBindingSize)."""
  from tinyweb.device import Device
  L, S = q.shape[-2], k.shape[-2]
  budget = ATTENTION_SCORES_BYTES.value or (getattr(Device[q.device], "max_binding", 0) if isinstance(q.device, str) else 0)
  per_row = prod(_broadcast_shape("scaled_dot_product_attention", q.shape[:-2], k.shape[:-2])) * S * 4
  return L if not budget or per_row * L <= budget else max(1, budget // per_row)
