"""Tensor reductions: sum, prod, max, min, mean, var, std, any, all, argmax, argmin, the scans (cumsum, cumprod, cummax,
logcumsumexp), softmax, log_softmax and logsumexp. A mixin of Tensor (tensor.py)."""
from __future__ import annotations
import math
from typing import Self
from tinyweb.dtype import DType, dtypes, to_dtype
from tinyweb.helpers import prod
from tinyweb.uop import UOp, Ops
from tinyweb.tensor_helpers import _check_device_dtype, _normalize_axis


def _device_has(dt: DType, device: str) -> bool:
  try: _check_device_dtype(dt, device, "")
  except TypeError: return False
  return True

class ReduceMixin:
  __slots__ = ()
  # (Tensor, in tensor.py, is built from this mixin and must not be imported here: methods find the class as
  # type(self), often as a local `Tensor = type(self)`; annotations say Self)

  def _axes(self, op: str, axis) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    axes = tuple(sorted({_normalize_axis(op, a, self.ndim) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))}))
    return axes if self.ndim else ()   # (a 0-d tensor's dim 0 or -1 is itself: reducing over it changes nothing, as in torch)

  def _reduce(self, op: Ops, axis=None, keepdim=False, name="reduce") -> Self:
    axes = self._axes(name, axis)
    out = self._reduce_axes(op, axes) if axes else self   # (a big sum into few outputs runs as two kernels: schedule.split_sum)
    if keepdim: return out
    return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

  def _reduce_axes(self, op: Ops, axes: tuple[int, ...]) -> Self:   # one REDUCE_AXIS, keeping the reduced dims as 1
    return self._wrap(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes)), self)

  def sum(self, axis=None, keepdim=False, dtype=None) -> Self:
    acc = to_dtype(dtype) if dtype is not None else \
      (dtypes.int64 if self.dtype == dtypes.int64 else dtypes.uint64 if self.dtype == dtypes.uint64 else
       dtypes.uint32 if self.dtype == dtypes.uint32 else dtypes.default_int) if not self.dtype.is_float else \
      (dtypes.float32 if self.dtype.itemsize < 4 else self.dtype)
    out = self.cast(acc)._reduce(Ops.ADD, axis, keepdim, "sum")
    return out.cast(self.dtype) if self.dtype.is_float and dtype is None else out
  def prod(self, axis=None, keepdim=False, dtype=None) -> Self:
    acc = to_dtype(dtype) if dtype is not None else (self.dtype if self.dtype.is_float else dtypes.default_int if self.dtype.itemsize < 8 else self.dtype)
    x = self.cast(acc)
    out = x.detach()._reduce(Ops.MUL, axis, keepdim, "prod")
    if not acc.is_float: return out
    axes = x._axes("prod", axis)
    def backward(g):
      if x.ndim == 0: return (g,)   # (torch: the product of no others is 1, even for an inf or NaN x)
      # d out / d x_j is the product of the others. PyTorch's: g * out / x when the whole tensor holds no zero, else the
      # product of the others itself (exclusive running products), which differs from out / x at zeros, infs and NaNs.
      # That product is built here from per-slice counts: NaN if the others hold a NaN or both a 0 and an inf, else a
      # signed 0 if they hold a 0, a signed inf if an inf, else the finite non-zero product divided by x_j
      xd, outk = x.detach(), out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
      def count_in_others(m): return (c := m.cast(dtypes.int32)).sum(axes, keepdim=True) - c   # (the slice's count less x_j's)
      is_zero, is_inf, finite_nz = xd == 0, xd.isinf(), xd.isfinite() & (xd != 0)
      # (float32's finite product is taken in float64 where the device has it: the others' product of [-2, 3e38] is -2,
      # torch's running products get it, while the whole product overflows float32 and inf / 3e38 stays inf)
      wide = xd.double() if xd._scans_in_float64() else xd
      fin = finite_nz.where(wide, 1)._reduce(Ops.MUL, axes, True, "prod")
      fin = finite_nz.where(fin / wide, fin).cast(xd.dtype)
      signed_inf = (count_in_others(xd == -math.inf) % 2 == 1).where(-math.inf, math.inf) * fin.sign()
      zeros, infs = count_in_others(is_zero) > 0, count_in_others(is_inf) > 0
      others = ((count_in_others(xd.isnan()) > 0) | (zeros & infs)).where(math.nan, zeros.where(fin.sign() * 0, infs.where(signed_inf, fin)))
      grad = g.reshape(outk.shape) * is_zero.any().where(others, outk / xd)
      # (torch.prod(x) without a dim gives exactly 0 when two or more elements are 0)
      return ((is_zero.cast(dtypes.int32).sum() > 1).where(0.0, grad) if axis is None else grad,)
    return out.custom_gradient([x], backward)
  def max(self, axis=None, keepdim=False) -> Self:
    self._check_nonempty_reduce("max", axis)
    return self._reduce(Ops.MAX, axis, keepdim, "max")
  def min(self, axis=None, keepdim=False) -> Self:
    self._check_nonempty_reduce("min", axis)
    if self.dtype.is_bool: return self.logical_not().max(axis, keepdim).logical_not()
    if self.dtype.is_int: return (~(~self).max(axis, keepdim))
    return -((-self).max(axis, keepdim))
  def _check_nonempty_reduce(self, op, axis):   # (torch's exception types: IndexError naming the dim, RuntimeError without one)
    if any(self.shape[a] == 0 for a in self._axes(op, axis)):
      raise (RuntimeError if axis is None else IndexError)(
        f"{op}: cannot reduce over an empty dimension (shape {self.shape}, axis {axis}); the operation has no identity")
  def mean(self, axis=None, keepdim=False) -> Self:
    x = self._float_input()
    n = prod(self.shape[a] for a in self._axes("mean", axis))
    s = x.sum(axis, keepdim)
    return s * (1.0 / n) if n else s * math.nan
  def _detached_half_mean(self, axes: tuple[int, ...], n: int) -> Self:
    # half the mean (kept dims), as half a finite first element + the mean of half the differences from it: exact for a
    # constant input (a variance of 0, where sum / n may be off by an ulp), and no sum overflows even for +-3e38 inputs.
    # var/std do not differentiate it: their gradients are PyTorch's 2 (x - mean) / (n - c) and (x - mean) / ((n - c) std)
    d = self.detach()
    first = d[tuple(slice(0, 1) if i in axes else slice(None) for i in range(self.ndim))]
    first = first.isfinite().where(first, 0)
    return first * 0.5 + (d * (0.5 / n) - first * (0.5 / n)).sum(axes, keepdim=True)
  def var(self, axis=None, keepdim=False, correction=1) -> Self:
    x = self._float_input()
    axes = x._axes("var", axis)
    n = prod(self.shape[a] for a in axes)
    if n == 0: return x.sum(axis, keepdim) * math.nan
    mean = x._detached_half_mean(axes, n) * 2
    sq = (x - mean).square().sum(axis, keepdim)
    if n - correction > 0: return sq / (n - correction)
    # PyTorch divides by max(0, n - c) (inf, or 0/0). Its gradient: over all dims, inf (NaN where x is the mean); over
    # some, 2 (x - mean) / (n - c)
    dof = n - correction
    def backward(g):
      g = g.reshape(mean.shape)
      if axis is None or axis == () or self.ndim == 0: return ((x.detach() == mean).where(math.nan, math.inf) * g,)
      return ((x - mean) * (2 / dof if dof else math.inf) * g,)
    return (sq.detach() > 0).where(math.inf, math.nan).custom_gradient([x], backward)   # (sq * inf: WGSL may fold 0 * inf to 0)
  def std(self, axis=None, keepdim=False, correction=1) -> Self:
    x = self._float_input()
    axes = x._axes("std", axis)
    n = prod(self.shape[a] for a in axes)
    if n - correction <= 0:   # var's inf/NaN conventions; PyTorch's std gradient: 0 where std is 0, not inf * 0
      s = (v := x.var(axis, keepdim, correction)).sqrt()
      return s.custom_gradient([v], lambda g: ((s == 0).where(0.0, g / (2 * s)),))
    # half deviations (exact, and within float32 even for +-3e38), divided by the largest before squaring: std([1, -1e30])
    # fits float32 while the squares do not (PyTorch accumulates in double). The scale is 1 for a constant slice and NaN
    # where a deviation is NaN
    half_dev = x.detach() * 0.5 - x._detached_half_mean(axes, n)
    scale = half_dev.abs().max(axes, keepdim=True)
    scale = (scale == 0).where(1.0, scale)
    s = ((half_dev / scale).square().sum(axes, keepdim=True) / (n - correction)).sqrt() * scale * 2
    out = s if keepdim else s.reshape(tuple(d for i, d in enumerate(self.shape) if i not in axes))
    def backward(g): return ((s == 0).where(0.0, half_dev / s * 2 * (g.reshape(s.shape) / (n - correction))),)   # (bounded)
    return out.custom_gradient([x], backward)
  def var_mean(self, axis=None, keepdim=False, correction=1): return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self, axis=None, keepdim=False, correction=1): return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def any(self, axis=None, keepdim=False) -> Self: return self.bool()._reduce(Ops.MAX, axis, keepdim, "any") if self.numel() else self.bool().sum(axis, keepdim).bool()
  def all(self, axis=None, keepdim=False) -> Self: return self.logical_not().any(axis, keepdim).logical_not()

  def _arg_reduce(self, op: str, x: Self, axis, keepdim) -> Self:
    if axis is None:
      if self.numel() == 0: raise IndexError(f"{op}: cannot take {op} of an empty tensor (shape {self.shape}) without an axis")
      return x.flatten()._arg_reduce(op, x.flatten(), 0, False).reshape((1,) * self.ndim if keepdim else ())
    a = _normalize_axis(op, axis, self.ndim)
    if self.ndim == 0: return self.reshape(1)._arg_reduce(op, x.reshape(1), 0, False)
    n = self.shape[a]
    if n == 0: raise IndexError(f"{op}: cannot take {op} over an empty dimension (shape {self.shape}, axis {axis})")   # (torch's type)
    is_max = x == x.max(a, keepdim=True)
    if x.dtype.is_float: is_max = is_max | x.isnan()   # a NaN is the maximum (and the minimum), like PyTorch
    # the first maximal position: larger weights for earlier positions, then take the max
    rev = type(self).arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - a - 1))
    return (n - (is_max * rev).max(a, keepdim)).cast(dtypes.int32)
  def argmax(self, axis=None, keepdim=False) -> Self: return self._arg_reduce("argmax", self, axis, keepdim)
  def argmin(self, axis=None, keepdim=False) -> Self:
    neg = self.logical_not() if self.dtype.is_bool else (~self if self.dtype.is_int else -self)
    return self._arg_reduce("argmin", neg, axis, keepdim)

  def cumsum(self, axis: int = 0) -> Self:
    if self.ndim == 0: return self.reshape(1).cumsum(_normalize_axis("cumsum", axis, 1)).reshape(())   # (a bool's sum is an int)
    a = _normalize_axis("cumsum", axis, self.ndim)
    if self._scans_in_float64(): return self.double().cumsum(a).cast(self.dtype)
    return self.transpose(a, -1)._cumsum_last().transpose(a, -1)
  def _scans_in_float64(self) -> bool:
    """PyTorch's CPU scans of float32 accumulate in float64 (cumprod([3e38, -1.4, -0.6]) stays finite, a long cumsum
    keeps its digits): so do tinyweb's, on devices that have float64."""
    return self.dtype == dtypes.float32 and _device_has(dtypes.float64, self.device)
  def _cumsum_last(self) -> Self:
    n = self.shape[-1]
    if n <= 256:  # out[i] = sum_j x[j] for j <= i: one fused kernel with n*n work (selected, not masked by * 0: inf * 0 is NaN)
      return self._tri_mask_last().where(self.unsqueeze(-2), 0).sum(-1, dtype=self.sum().dtype)
    b = math.isqrt(n - 1) + 1   # two levels: within blocks of b, then the running total of the blocks before each
    nb = math.ceil(n / b)
    x = self._pad_zero(((0, 0),) * (self.ndim - 1) + ((0, nb * b - n),)).reshape(*self.shape[:-1], nb, b)
    inner = x._cumsum_last()
    offsets = inner[..., -1]._cumsum_last()._shift_last()
    return (inner + offsets.unsqueeze(-1)).reshape(*self.shape[:-1], nb * b)[..., :n]
  def _tri_mask_last(self) -> Self:
    """(n, n) bool: [i, j] is j <= i, for scans over the last axis (of size n)."""
    Tensor = type(self)
    n = self.shape[-1]
    return Tensor.arange(n, device=self.device).reshape(n, 1) >= Tensor.arange(n, device=self.device).reshape(1, n)
  def _shift_last(self, fill=0) -> Self:
    """The last axis moved one place on: [fill, x0, ..., x(n-2)] (an exclusive scan from an inclusive one)."""
    return self[..., :-1].pad(((0, 0),) * (self.ndim - 1) + ((1, 0),), value=fill)
  def cumprod(self, axis: int = 0) -> Self:
    a = _normalize_axis("cumprod", axis, self.ndim)
    if self.ndim == 0 or self.numel() == 0 or (self.shape[a] == 1 and self.dtype.is_float): return self   # (its gradient passes through)
    if self._scans_in_float64(): return self.double().cumprod(a).cast(self.dtype)
    x = self.transpose(a, -1)
    tri = x._tri_mask_last()
    out = tri.where(x.detach().unsqueeze(-2), 1).prod(-1)
    def backward(g):
      # PyTorch's (its first-order formula): with k the first zero of a row and k2 the second, position j < k gets
      # sum_{j<=i<k} g_i out_i / x_j; k gets out_{k-1} * sum_i G_i P_i with G = g on [k, k2) and 0 elsewhere, P the running
      # product of x over (k, k2) (1 elsewhere); positions after k get exactly 0 (not 0 * an inf g)
      n, xd = x.shape[-1], x.detach()
      pos = type(self).arange(n, device=self.device)
      k = (xd == 0).where(pos, n).min(-1, keepdim=True)
      k2 = ((xd == 0) & (pos > k)).where(pos, n).min(-1, keepdim=True)
      before = (tri & (pos.unsqueeze(-1) < k.unsqueeze(-1))).where((g * out).unsqueeze(-1), 0.0).sum(-2) / xd
      P = tri.where(((pos > k) & (pos < k2)).where(xd, 1).unsqueeze(-2), 1).prod(-1)
      at = (((pos >= k) & (pos < k2)).where(g, 0.0) * P).sum(-1, keepdim=True) * (pos < k).where(xd, 1).prod(-1, keepdim=True)
      return ((pos < k).where(before, (pos == k).where(at, 0.0)),)
    return (out.custom_gradient([x], backward) if x.dtype.is_float else out).transpose(a, -1)
  def cummax(self, axis: int = 0) -> Self:
    a = _normalize_axis("cummax", axis, self.ndim)
    if self.numel() == 0 or self.ndim == 0: return self   # (an empty scan is empty, max refuses an empty axis; a 0-d one is itself)
    x = self.transpose(a, -1)
    tri = x._tri_mask_last()
    out = tri.where(x.detach().unsqueeze(-2), x.dtype.min if not x.dtype.is_float else -math.inf).max(-1)
    def backward(g):   # PyTorch's: out[i]'s gradient all to the last j <= i holding it (a NaN: the last NaN)
      xd, o = x.detach().unsqueeze(-2), out.unsqueeze(-1)
      score = (tri & ((xd == o) | (xd.isnan() & o.isnan()))).where(type(self).arange(x.shape[-1], device=self.device), -1)
      return ((score == score.max(-1, keepdim=True)).where(g.unsqueeze(-1), 0.0).sum(-2),)
    return (out.custom_gradient([x], backward) if x.dtype.is_float else out).transpose(a, -1)

  def softmax(self, axis=-1, dtype=None) -> Self:
    x = self._float_input() if dtype is None else self.cast(dtype)
    m = x - x.max(axis, keepdim=True).detach() if x.numel() else x   # (empty: nothing to scale, and max refuses an empty axis)
    e = m.exp()
    return e / e.sum(axis, keepdim=True)
  def log_softmax(self, axis=-1, dtype=None) -> Self:
    x = self._float_input() if dtype is None else self.cast(dtype)
    m = x - x.max(axis, keepdim=True).detach() if x.numel() else x
    return m - m.exp().sum(axis, keepdim=True).log()
  def logsumexp(self, axis=None, keepdim=False) -> Self:
    x = self._float_input()
    if x.numel() == 0: return x.exp().sum(axis, keepdim).log()   # over an empty axis: log(0) = -inf, like torch
    xd = x.detach()
    m = xd.max(axis, keepdim=True)
    m = (m.isinf()).where(0, m)
    out = (xd - m).exp().sum(axis, keepdim=True).log() + m
    out = out.custom_gradient([x], lambda g: (g * (xd - out).exp(),))   # PyTorch's (exp(x - out): 0 beside an inf out, not inf/inf)
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in x._axes("logsumexp", axis)))
  def logcumsumexp(self, axis=0) -> Self:
    x = self._float_input()
    a = _normalize_axis("logcumsumexp", axis, max(x.ndim, 1))
    if x.ndim == 0 or x.numel() == 0: return x   # (an empty scan is empty; its running max refuses an empty axis)
    out = x.detach().transpose(a, -1)._logcumsumexp_last().transpose(a, -1)
    # PyTorch's gradient, the sum over i >= j of g_i exp(x_j - out_i), in log space for g > 0 and g < 0 (where an infinite
    # out_i adds 0, instead of inf * 0); log(0) is the dtype's lowest finite value
    lowest = {2: -65504.0, 4: -3.4028234663852886e38, 8: -1.7976931348623157e308}[x.dtype.itemsize]
    def part(g: Self, mask: Self) -> Self:
      return ((mask.where(g.abs().log(), lowest) - out).flip(a).logcumsumexp(a).flip(a) + x).exp()
    return out.custom_gradient([x], lambda g: (part(g, g > 0) - part(g, g < 0),))
  def _logcumsumexp_last(self) -> Self:
    n = self.shape[-1]
    if n <= 256:
      # each output around its own running max (a global max would underflow the terms before it): n*n work like cumsum
      tri, x = self._tri_mask_last(), self.unsqueeze(-2)
      x = tri.where(x, -math.inf)   # (masked before exp: an inf in the masked part would make the gradient NaN)
      m = x.max(-1).detach()
      m = m.isinf().where(0, m)   # (an infinite max: the sum of exps is inf or 0 as it should be)
      return (x - m.unsqueeze(-1)).exp().sum(-1).log() + m
    b = math.isqrt(n - 1) + 1   # blocks as in _cumsum_last, each block's scan and the blocks before it added by logaddexp
    nb = math.ceil(n / b)
    x = self.pad(((0, 0),) * (self.ndim - 1) + ((0, nb * b - n),), value=-math.inf).reshape(*self.shape[:-1], nb, b)
    inner = x._logcumsumexp_last()
    before = inner[..., -1]._logcumsumexp_last()._shift_last(-math.inf).unsqueeze(-1)
    m = inner.maximum(before).detach()
    m = m.isinf().where(0, m)
    out = ((inner - m).exp() + (before - m).exp()).log() + m
    return out.reshape(*self.shape[:-1], nb * b)[..., :n]
