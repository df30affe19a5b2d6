"""Tensor reductions: sum, prod, max, min, mean, var, std, any, all, argmax, argmin, the scans (cumsum, cumprod, cummax,
cummin, logcumsumexp), sort, argsort, topk, softmax, softmin, log_softmax and logsumexp. A mixin of Tensor (tensor.py)."""
from __future__ import annotations
import math
from typing import Self
from tinyweb.dtype import DType, dtypes, to_dtype
from tinyweb.helpers import prod
from tinyweb.uop import UOp, Ops
from tinyweb.device import Device
from tinyweb.tensor_helpers import _normalize_axis, _as_int



def _before(a, b, descending: bool):
  """Whether a comes before b in sort's order: ascending with NaN last, or descending with NaN first."""
  lt = b < a if descending else a < b
  return lt | ((a if descending else b).isnan() & (b if descending else a).isnan().logical_not()) if a.dtype.is_float else lt
def _tie(a, b): return (a == b) | (a.isnan() & b.isnan()) if a.dtype.is_float else a == b

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

  def _int_accumulator(self) -> DType:
    """The dtype of a sum or product of this integer or bool tensor: the default int (int32; torch: int64), or the
    tensor's own dtype where that is wider or unsigned 32/64-bit (uint32's products wrap in uint32, not as int32s)."""
    return self.dtype if self.dtype in (dtypes.int64, dtypes.uint64, dtypes.uint32) else dtypes.default_int
  def sum(self, axis=None, keepdim=False, dtype=None) -> Self:
    acc = to_dtype(dtype) if dtype is not None else self._int_accumulator() if not self.dtype.is_float else \
      (dtypes.float32 if self.dtype.itemsize < 4 else self.dtype)
    out = self.cast(acc)._reduce(Ops.ADD, axis, keepdim, "sum")
    return out.cast(self.dtype) if self.dtype.is_float and dtype is None else out
  def prod(self, axis=None, keepdim=False, dtype=None) -> Self:
    acc = to_dtype(dtype) if dtype is not None else self.dtype if self.dtype.is_float else self._int_accumulator()
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
    if n == 0 or n - correction <= 0:   # var's inf/NaN conventions; PyTorch's std gradient: 0 where std is 0, not inf * 0
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
  def _vector_norm(self, p: float, axis, keepdim=False) -> Self:
    """The p-norm over axis (p = 0 counts non-zeros, +-inf is the largest/smallest |x|), with PyTorch's gradients: 0
    where the norm is 0, split evenly between tied extremes for +-inf."""
    x = self._float_input()
    axes, a = x._axes("norm", axis), x.detach().abs()
    if p == 0: out = (a != 0).sum(axes, keepdim=True).cast(x.dtype)
    elif math.isinf(p):
      out = a.max(axes, keepdim=True) if p > 0 else a.min(axes, keepdim=True)
      hit = (a == out).cast(x.dtype)
      out = out.custom_gradient([x], lambda g: (g * x.detach().sign() * hit / hit.sum(axes, keepdim=True),))
    else:
      n = a.sum(axes, keepdim=True) if p == 1 else (a ** p).sum(axes, keepdim=True) ** (1 / p)
      # (p - 1)th powers of |x| (0 at 0, also for p < 1), the sign of x, and g / norm^(p - 1) (0 where the norm is 0)
      part = x.detach().sign() * (a == 0).where(0.0, a ** (p - 1))
      out = n.custom_gradient([x], lambda g: (part * (n == 0).where(0.0, g / n ** (p - 1)),))
    return out if keepdim else out.reshape(tuple(d for i, d in enumerate(x.shape) if i not in axes))
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
    return self.dtype == dtypes.float32 and Device[self.device].has_dtype(dtypes.float64)
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
  def cummax(self, axis: int = 0) -> tuple[Self, Self]:
    """The running maximum along axis and the index of each (the last position holding it, or the last NaN: PyTorch's)."""
    return self._cum_extreme("cummax", axis, True)
  def cummin(self, axis: int = 0) -> tuple[Self, Self]:
    """The running minimum along axis and the index of each (the last position holding it, or the last NaN: PyTorch's)."""
    return self._cum_extreme("cummin", axis, False)
  def _cum_extreme(self, op: str, axis: int, is_max: bool) -> tuple[Self, Self]:
    Tensor = type(self)
    a = _normalize_axis(op, axis, self.ndim)
    # (an empty scan is empty, max refuses an empty axis; a 0-d one is itself, at index 0)
    if self.numel() == 0 or self.ndim == 0: return self, Tensor.zeros(self.shape, dtype=dtypes.int32, device=self.device)
    x = self.transpose(a, -1)
    tri, n = x._tri_mask_last(), x.shape[-1]
    xd = tri.where(x.detach().unsqueeze(-2), x.dtype.min if is_max else x.dtype.max)
    out = xd.max(-1) if is_max else xd.min(-1)
    o, pos = out.unsqueeze(-1), Tensor.arange(n, device=self.device)
    idx = (tri & ((xd == o) | (xd.isnan() & o.isnan()))).where(pos, -1).max(-1)
    # PyTorch's gradient: out[i]'s all to x[idx[i]]
    out = out.custom_gradient([x], lambda g: (x._scatter_last(idx, g),)) if x.dtype.is_float else out
    return out.transpose(a, -1), idx.transpose(a, -1)
  def _scatter_last(self, idx: Self, g: Self) -> Self:
    """Along the last axis (of self's size n), the sum of g's entries at the positions idx names: out[j] = sum of
    g[i] where idx[i] == j (n * len(idx) work: idx is a permutation or a running argmax here)."""
    n = self.shape[-1]
    return (idx.unsqueeze(-1) == type(self).arange(n, device=self.device)).where(g.unsqueeze(-1), 0.0).sum(-2)

  # sort: up to _COUNT_SORT_MAX elements along the dim by counting, the rank of x[i] being the number of elements that
  # come before it (n^2 comparisons, three fused kernels: fast for the common sizes); longer dims by a bitonic network
  # (n log^2 n work, but two kernels for each of its log2(n) (log2(n) + 1) / 2 steps)
  _COUNT_SORT_MAX = 4096
  def sort(self, dim: int = -1, descending: bool = False) -> tuple[Self, Self]:
    """The values sorted along dim and their indices: stable (equal values keep their order), NaN after every number
    (before, descending), like torch.sort(stable=True). The gradient of the values goes back to where each came from."""
    Tensor = type(self)
    d = _normalize_axis("sort", dim, self.ndim)
    if self.ndim == 0 or self.shape[d] <= 1: return self, Tensor.zeros(self.shape, dtype=dtypes.int32, device=self.device)
    x = self.transpose(d, -1)
    xd, n = x.detach(), x.shape[-1]
    if n <= ReduceMixin._COUNT_SORT_MAX:
      pos = Tensor.arange(n, device=self.device)
      xi, xj = xd.unsqueeze(-1), xd.unsqueeze(-2)   # [..., i, j]: x[i] and x[j]
      rank = (_before(xj, xi, descending) | (_tie(xj, xi) & (pos < pos.unsqueeze(-1)))).sum(-1)
      hit = rank.unsqueeze(-2) == pos.unsqueeze(-1)   # [..., r, i]: x[i] goes to r
      idx = hit.where(pos, 0).sum(-1)
      values = hit.where(xj, x.dtype.min).max(-1)   # (taken with max against the lowest value: exact, -0.0 and NaN too)
    else: values, idx = xd._bitonic_last(descending)
    values = values.custom_gradient([x], lambda g: (x._unsort_last(idx, g),)) if x.dtype.is_float else values
    return values.transpose(d, -1), idx.transpose(d, -1)
  def _unsort_last(self, idx: Self, g: Self) -> Self:
    """g (in sorted order) back where its elements came from: out[idx[r]] = g[r] along the last axis."""
    if self.shape[-1] <= ReduceMixin._COUNT_SORT_MAX: return self._scatter_last(idx, g)
    return idx._bitonic_last(False, g)[2]   # (g carried along while sorting idx back to 0, 1, ...)
  def _bitonic_last(self, descending: bool, *payloads: Self) -> tuple[Self, ...]:
    """Sort along the last axis with a bitonic network: (sorted self, indices, payloads permuted alike). Ties go by the
    original position (stable); the padding to a power of two (the largest value, then ties by position) ends up last."""
    Tensor, n = type(self), self.shape[-1]
    m = (n - 1).bit_length()
    N, pre = 1 << m, self.shape[:-1]
    pad = ((0, 0),) * len(pre) + ((0, N - n),)
    last = self.dtype.min if descending else math.nan if self.dtype.is_float else self.dtype.max
    arrays = [self.pad(pad, value=last), Tensor.arange(N, device=self.device).expand(*pre, N)] + [p.pad(pad) for p in payloads]
    top = Tensor.arange(2, device=self.device).unsqueeze(-1) == 0
    for stage in range(1, m + 1):   # blocks of 2^stage elements, sorted up and down by turns; then merged in halving steps
      for step in range(stage - 1, -1, -1):
        dist = 1 << step
        blocks = N // (2 * dist)
        views = [a.reshape(*pre, blocks, 2, dist) for a in arrays]   # each element beside its partner (the other half)
        partners = [v.flip(-2) for v in views]
        up = ((Tensor.arange(blocks, device=self.device) >> (stage - step - 1)) & 1).reshape(blocks, 1, 1) == 0
        (k, i), (pk, pi) = views[:2], partners[:2]
        # the first of a pair takes the earlier of the two where its block sorts up, the later where it sorts down
        take = (top == up).where(_before(pk, k, descending) | (_tie(pk, k) & (pi < i)), _before(k, pk, descending) | (_tie(k, pk) & (i < pi)))
        arrays = [take.where(p, v).reshape(*pre, N).contiguous() for v, p in zip(views, partners)]
    return tuple(a[..., :n] for a in arrays)
  def argsort(self, dim: int = -1, descending: bool = False) -> Self:
    """The indices that sort self along dim (stable; see sort)."""
    return self.sort(dim, descending)[1]
  def topk(self, k: int, dim: int = -1, largest: bool = True, sorted_: bool = True) -> tuple[Self, Self]:
    """The k largest (or smallest) values along dim and their indices, in sorted order (also with sorted_=False, where
    any order is allowed); equal values in their original order."""
    d = _normalize_axis("topk", dim, self.ndim)
    n = self.shape[d] if self.ndim else 1
    if type(k) is not int: k = _as_int("topk", "k", k)
    if not 0 <= k <= n: raise ValueError(f"topk: k={k} is out of range for dimension {d} of size {n} (shape {self.shape}); valid: 0..{n}")
    values, idx = self.sort(d, descending=largest)
    if self.ndim == 0: return values, idx
    sl = tuple((0, k) if i == d else None for i in range(self.ndim))
    return values.shrink(sl), idx.shrink(sl)

  def softmax(self, axis=-1, dtype=None) -> Self:
    x = self._float_input() if dtype is None else self.cast(dtype)
    m = x - x.max(axis, keepdim=True).detach() if x.numel() else x   # (empty: nothing to scale, and max refuses an empty axis)
    e = m.exp()
    return e / e.sum(axis, keepdim=True)
  def softmin(self, axis=-1, dtype=None) -> Self:
    """softmax(-self) along axis."""
    return (-self).softmax(axis, dtype)
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
