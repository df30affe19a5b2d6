"""Tensor indexing: t[index] and t[index] = value (ints, slices, None, Ellipsis, bools, tensor and list indices),
gather, scatter, one_hot, triu and tril. A mixin of Tensor (tensor.py)."""
from __future__ import annotations
import operator
from typing import Any, Optional, Self
from tinyweb.dtype import dtypes, cast_scalar
from tinyweb.helpers import prod, make_room, NO_GRAD, GRAPH, reading_internally
from tinyweb.uop import UOp, Ops
from tinyweb.device import Buffer
from tinyweb.schedule import is_contiguous_buffer, buffer_uop
from tinyweb.engine import recording, replay
from tinyweb.tensor_helpers import _broadcast_shape, _flatten_list, _as_int, _normalize_axis

# (an instance of IndexMixin is a Tensor: the one class built from it)
# x[idx] signature -> (kernel, which of its inputs is the index, output dtype), or None where the lazy path's launch is not
# one kernel over the two buffers (see IndexMixin._replayed_gather)
_gather_replays: dict[tuple, Optional[tuple]] = {}
EAGER_GATHER_MAX = 1 << 17   # elements: at ~10 GB/s a store and a read of that many floats take about the 0.1 ms saved
def _index_scalar(i):
  """An index element, with numpy scalars and 0-d arrays or tensors of ints or bools as the Python int or bool."""
  if type(i) is int or type(i) is slice or i is None or i is Ellipsis: return i
  if isinstance(i, IndexMixin):
    if i.ndim or i.dtype.is_float: return i
    with reading_internally(): return i.item()
  if type(i).__module__ == "numpy" and getattr(i, "ndim", None) == 0 and i.dtype.kind in "biu": return i.item()
  return i

class IndexMixin:
  __slots__ = ()
  # (Tensor, in tensor.py, is built from this mixin and must not be imported here: methods find the class as
  # type(self), often as a local `Tensor = type(self)`; annotations say Self)

  def _basic_index(self, index: tuple) -> tuple[Self, list, list[tuple[int, Any]]]:
    """Apply ints, slices, None, bools and Ellipsis. Returns the view, the movement ops applied (to invert them for
    __setitem__), and (dim in the view, index, dim of self) for every tensor/list index, whose dims are kept whole. True and False
    add a dimension of size 1 and 0 (PyTorch's and numpy's meaning: a 0-d mask, not an int). A lone bool is applied
    here; with other bools or tensor/list indices it is an index of that new dimension, combined with them."""
    Tensor = type(self)
    index = tuple(_index_scalar(i) for i in index)
    lone_bool = sum(type(i) is bool for i in index) == 1 and \
      not any(isinstance(i, (Tensor, list, tuple)) or (type(i).__module__ == "numpy" and getattr(i, "ndim", 0) > 0) for i in index)
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis and type(i) is not bool)
    if sum(1 for i in index if i is Ellipsis) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
    if n_real > self.ndim: raise IndexError(f"too many indices for tensor of dimension {self.ndim} (got {n_real})")
    if (e := next((k for k, i in enumerate(index) if i is Ellipsis), None)) is not None:
      index = index[:e] + (slice(None),) * (self.ndim - n_real) + index[e + 1:]
    else: index = index + (slice(None),) * (self.ndim - n_real)
    x, ops, fancy = self, [], []
    dim, src = 0, 0   # the current dim in x, and the dim of self it comes from
    def do(name, arg):
      nonlocal x
      ops.append((name, arg, x.shape))
      x = getattr(x, name)(arg) if name != "reshape" else x.reshape(arg)
    for idx in index:
      if idx is None or type(idx) is bool:
        do("reshape", x.shape[:dim] + (1,) + x.shape[dim:])
        if type(idx) is bool and not lone_bool: fancy.append((dim, idx, None))
        elif idx is False: do("shrink", tuple((0, 0) if d == dim else None for d in range(x.ndim)))
        dim += 1
        continue
      if isinstance(idx, int):
        n = x.shape[dim]
        if not -n <= idx < n: raise IndexError(f"index {idx} is out of bounds for dimension {src} with size {n}")
        i = idx % n
        do("shrink", tuple((i, i + 1) if d == dim else None for d in range(x.ndim)))
        do("reshape", x.shape[:dim] + x.shape[dim + 1:])
      elif isinstance(idx, slice):
        n = x.shape[dim]
        start, stop, step = idx.indices(n)
        count = len(range(start, stop, step))
        if step < 0:
          do("flip", (dim,))
          start, step = n - 1 - start, -step
        length = (count - 1) * step + 1 if count else 0
        if (start, start + length) != (0, n):
          do("shrink", tuple((start, start + length) if d == dim else None for d in range(x.ndim)))
        if step > 1 and count > 1:
          do("_pad_zero", tuple((0, count * step - length) if d == dim else (0, 0) for d in range(x.ndim)))
          do("reshape", x.shape[:dim] + (count, step) + x.shape[dim + 1:])
          do("shrink", tuple((0, 1) if d == dim + 1 else None for d in range(x.ndim)))
          do("reshape", x.shape[:dim + 1] + x.shape[dim + 2:])
        dim += 1
      elif isinstance(idx, (Tensor, list, tuple)) or (type(idx).__module__ == "numpy" and getattr(idx, "ndim", 0) > 0):
        fancy.append((dim, idx, src)); dim += 1
      else: raise IndexError(f"unsupported index type {type(idx).__name__}: valid are int, bool, slice, None, Ellipsis, Tensor, list")
      src += 1
    return x, ops, fancy

  def _index_tensor(self, idx, size: int, dim: int) -> Self:
    """An index given as Tensor/list/array -> int32 Tensor with negative values wrapped (bounds checked for constants)."""
    Tensor = type(self)
    if type(idx) is bool: return Tensor([0] if idx else [], dtype=dtypes.int32, device=self.device)   # (of a new size-1 dim)
    if not isinstance(idx, Tensor):
      vals, shape = _flatten_list(idx.tolist() if hasattr(idx, "tolist") else list(idx), "index")
      if vals and all(type(v) is bool for v in vals): return self._index_tensor(Tensor(vals, device=self.device).reshape(shape), size, dim)
      if (bad := [v for v in vals if isinstance(v, bool) or not hasattr(type(v), "__index__")]):
        raise IndexError(f"index: list and array indices must hold ints (or only bools: a mask), got {type(bad[0]).__name__} {bad[0]!r}")
      vals = [operator.index(v) for v in vals]
      for v in vals:
        if not -size <= v < size: raise IndexError(f"index {v} is out of bounds for dimension {dim} with size {size}")
      idx = Tensor(vals, dtype=dtypes.int32, device=self.device).reshape(shape)
    if idx.dtype.is_bool:  # a mask selects the positions where it is True (needs the values now)
      with reading_internally(): flat = idx.flatten().tolist()
      if idx.ndim != 1: raise IndexError(f"boolean mask indexing is supported for 1-D masks here, got shape {idx.shape}")
      if len(flat) != size: raise IndexError(f"boolean mask of length {len(flat)} does not match dimension {dim} of size {size}")
      return Tensor([i for i, b in enumerate(flat) if b], dtype=dtypes.int32, device=self.device)
    if idx.dtype.is_float: raise IndexError(f"tensors used as indices must be integer or bool, got {idx.dtype.name}")
    if idx.device != self.device: raise RuntimeError(f"index: index is on {idx.device}, tensor on {self.device}")
    idx = idx.cast(dtypes.int32)
    return (idx < 0).where(idx + size, idx)

  def __getitem__(self, index) -> Self:
    if isinstance(index, IndexMixin) and (out := self._replayed_gather(index)) is not None: return out
    return self._getitem(index if isinstance(index, tuple) else (index,))

  def _replayed_gather(self, idx) -> Optional[Self]:
    """x[idx] of a small result, for a realized table and a realized integer index (batch sampling, embedding lookups
    at inference), computed now: the kernel the lazy path built for the first call of a signature (device, shapes,
    dtypes) is launched again on the new buffers, without building and scheduling the graph (that Python work is
    ~0.2 ms, several times a 128-row gather itself). The price is fusion: the result is stored, where the lazy read
    would be computed inside the kernel that uses it; below EAGER_GATHER_MAX elements storing and reading it back costs
    less than the Python saved. None where it does not apply: the caller takes the lazy path."""
    if not (idx.ndim and self.ndim and idx.dtype.is_int and (not self.requires_grad or NO_GRAD) and not GRAPH
            and idx.numel() * prod(self.shape[1:]) <= EAGER_GATHER_MAX and self.device == idx.device
            and is_contiguous_buffer(self.uop) and is_contiguous_buffer(idx.uop)): return None
    key, xb, ib = (self.device, self.shape, self.dtype, idx.shape, idx.dtype), self.uop.base.arg[0], idx.uop.base.arg[0]
    if key not in _gather_replays:
      with recording() as launches: type(self).realize_all(out := self._getitem((idx,)))   # (allowed inside @function)
      (k, bufs), = launches if len(launches) == 1 else [(None, ())]
      replayable = k is not None and all(b is xb or b is ib for b in bufs[1:]) and is_contiguous_buffer(out.uop)
      make_room(_gather_replays, 256)
      _gather_replays[key] = (k, tuple(b is ib for b in bufs[1:]), bufs[0].dtype) if replayable else None
      return out
    if (hit := _gather_replays[key]) is None: return None
    k, reads_index, dtype = hit
    shape = idx.shape + self.shape[1:]
    replay(k, [out := Buffer(self.device, prod(shape), dtype), *(ib if r else xb for r in reads_index)])
    return type(self)(buffer_uop(out, shape))

  def _getitem(self, index: tuple) -> Self:
    x, _, fancy = self._basic_index(index)
    if not fancy: return x
    dims = [d for d, _, _ in fancy]
    idxs = [self._index_tensor(i, x.shape[d], src) for d, i, src in fancy]
    try: bshape = _broadcast_shape("index", *[i.shape for i in idxs])
    except ValueError as e: raise IndexError(str(e)) from None   # (numpy's and PyTorch's type for it)
    rest = [d for d in range(x.ndim) if d not in dims]
    rshape, nshape = tuple(x.shape[d] for d in rest), tuple(x.shape[d] for d in dims)
    nr, nb, nn = len(rshape), len(bshape), len(nshape)
    # where the indexed dims go: in place of the first one if they were adjacent, else in front (PyTorch/numpy rule)
    p = dims[0] if dims == list(range(dims[0], dims[0] + nn)) else 0
    # one-hot selection: out[r, b] = sum_k x[r, k] * prod_d (idx_d[b] == k_d), laid out as the result with the summed
    # positions k last, so the sum writes the result in its final order (no transposing copy). Built from uops directly:
    # every shape here is known to be valid, and this is the inner loop of batch sampling (X_train[randint(...)])
    full = rshape[:p] + bshape + rshape[p:] + nshape
    def spread(u: UOp, shape: tuple[int, ...]) -> UOp:   # u viewed as `shape` (its dims in place, 1s elsewhere), expanded to full
      if u.shape != shape: u = UOp(Ops.RESHAPE, u.dtype, (u,), shape)
      return u if shape == full else UOp(Ops.EXPAND, u.dtype, (u,), full)
    dev = UOp(Ops.DEVICE, None, (), self.device)
    mask = None
    for j, (i, n) in enumerate(zip(idxs, nshape)):
      positions = UOp(Ops.ARANGE, dtypes.int32, (dev,), n)
      m = UOp(Ops.CMPEQ, dtypes.bool, (spread(i.uop, (1,) * (p + nb - i.ndim) + i.shape + (1,) * (nr - p + nn)),
                                        spread(positions, (1,) * (nr + nb + j) + (n,) + (1,) * (nn - j - 1))))
      mask = m if mask is None else UOp(Ops.AND, dtypes.bool, (mask, m))
    xe = spread(x.permute(rest + dims).uop, rshape[:p] + (1,) * nb + rshape[p:] + nshape)
    zero = spread(UOp(Ops.CONST, x.dtype, (dev,), cast_scalar(0, x.dtype)), (1,) * len(full))
    picked, axes = x._wrap(UOp(Ops.WHERE, x.dtype, (mask, xe, zero)), *idxs), tuple(range(nr + nb, nr + nb + nn))
    return picked.sum(axes, dtype=x.dtype) if x.dtype.is_float else picked.sum(axes).cast(x.dtype)

  def __setitem__(self, index, value) -> None:
    Tensor = type(self)
    index = index if isinstance(index, tuple) else (index,)
    v = value if isinstance(value, Tensor) else Tensor(value, device=self.device, dtype=self.dtype) \
      if isinstance(value, (list, tuple)) or getattr(value, "ndim", 0) else Tensor(Tensor._const_uop(value, self.dtype, self.device, (), "setitem"))
    if v.device != self.device: raise RuntimeError(f"setitem: value is on {v.device}, tensor on {self.device}")
    v = v.cast(self.dtype)
    sel, ops, fancy = self._basic_index(index)
    if fancy:
      # positions of the selected elements in the flattened tensor, then a one-hot scatter of the values
      sel_pos = Tensor.arange(self.numel(), device=self.device).reshape(self.shape)[index]
      pos, vals = sel_pos.flatten(), v._broadcast_to(sel_pos.shape, "setitem").flatten()
      hit = pos.unsqueeze(1) == Tensor.arange(self.numel(), device=self.device).unsqueeze(0)
      # the last write wins for repeated positions, like sequential assignment
      order = Tensor.arange(pos.shape[0], device=self.device).unsqueeze(1)
      last = hit.where(order, -1).max(0)
      chosen = hit & (order == last.unsqueeze(0))
      newv = chosen.where(vals.unsqueeze(1), 0).sum(0, dtype=self.dtype).cast(self.dtype) if not self.dtype.is_bool else chosen.where(vals.unsqueeze(1), False).any(0)
      self.assign((last >= 0).reshape(self.shape).where(newv.reshape(self.shape), self))
      return
    try: v = v._broadcast_to(sel.shape, "setitem")
    except ValueError: raise ValueError(f"setitem: value of shape {v.shape} cannot be broadcast to the selection {sel.shape}") from None
    inside = Tensor.ones(sel.shape, dtype=dtypes.bool, device=self.device)
    for name, arg, before in reversed(ops):   # undo each view op to place the values at their positions
      if name == "shrink":
        pad = tuple((b, n - e) if a is not None else (0, 0) for a, (b, e), n in
                    zip(arg, [a if a is not None else (0, n) for a, n in zip(arg, before)], before))
        v, inside = v._pad_zero(pad), inside._pad_zero(pad)
      elif name == "_pad_zero":
        sh = tuple((b, b + n) for (b, _), n in zip(arg, before))
        v, inside = v.shrink(sh), inside.shrink(sh)
      elif name == "flip": v, inside = v.flip(*arg), inside.flip(*arg)
      else: v, inside = v.reshape(before), inside.reshape(before)
    self.assign(inside.where(v, self))

  def gather(self, dim: int, index: Self) -> Self:
    Tensor = type(self)
    d = _normalize_axis("gather", dim, self.ndim)
    if not isinstance(index, Tensor) or not index.dtype.is_int:
      raise TypeError(f"gather: index must be an integer Tensor, got {getattr(index, 'dtype', type(index).__name__)}")
    if index.ndim != self.ndim:
      raise ValueError(f"gather: index must have the same number of dimensions as the input, got {index.shape} for input {self.shape}")
    if any(i > s for j, (i, s) in enumerate(zip(index.shape, self.shape)) if j != d):
      raise ValueError(f"gather: index shape {index.shape} is larger than input {self.shape} outside dimension {d}")
    n = self.shape[d]
    x = self.shrink(tuple(None if j == d else (0, i) for j, i in enumerate(index.shape)))
    idx = self._index_tensor(index, n, d)
    mask = idx.unsqueeze(-1) == Tensor.arange(n, device=self.device)
    xe = x.permute([j for j in range(self.ndim) if j != d] + [d]).unsqueeze(d)   # (..., 1 at d, ..., n)
    out = mask.where(xe, 0).sum(-1, dtype=self.dtype if self.dtype.is_float else None)
    return out.cast(self.dtype)

  def _scatter_args(self, op: str, dim: int, index: Self, src) -> tuple:
    """scatter's arguments checked. Returns the dim, the index (negatives wrapped), src (a number made a tensor) cut to the
    index's shape in self's dtype, mask[..., m at d, ..., k] = (index[..., m, ...] == k), and place(t), which moves a
    reduction of such a tensor over dim d (keepdim) into self's shape: k into dim d."""
    Tensor = type(self)
    d = _normalize_axis(op, dim, self.ndim)
    if not isinstance(index, Tensor) or not index.dtype.is_int:
      raise TypeError(f"{op}: index must be an integer Tensor, got {getattr(index, 'dtype', type(index).__name__)}")
    src = src if isinstance(src, Tensor) else Tensor.full(index.shape, src, dtype=self.dtype, device=self.device)
    if index.ndim != self.ndim or src.ndim != self.ndim:
      raise ValueError(f"{op}: index {index.shape} and src {src.shape} must have as many dims as the input {self.shape}")
    if any(i > s for i, s in zip(index.shape, src.shape)) or any(i > s for j, (i, s) in enumerate(zip(index.shape, self.shape)) if j != d):
      raise ValueError(f"{op}: index {index.shape} must be no larger than src {src.shape}, nor than the input {self.shape} outside dimension {d}")
    if src.device != self.device: raise RuntimeError(f"{op}: src is on {src.device}, the input on {self.device}")
    n = self.shape[d]
    src, idx = src.shrink(tuple((0, i) for i in index.shape)).cast(self.dtype), self._index_tensor(index, n, d)
    mask = idx.unsqueeze(-1) == Tensor.arange(n, device=self.device)
    full = tuple((0, self.shape[j] - index.shape[j]) if j != d else (0, 0) for j in range(self.ndim))
    def place(t: Self) -> Self: return t.transpose(d, -1).squeeze(-1)._pad_zero(full)
    return d, idx, src, mask, place

  def scatter(self, dim: int, index: Self, src, reduce: Optional[str] = None) -> Self:
    Tensor = type(self)
    if reduce not in (None, "add", "multiply"): raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
    if reduce is not None: return self.scatter_reduce(dim, index, src, "sum" if reduce == "add" else "prod")
    d, idx, src, mask, place = self._scatter_args("scatter", dim, index, src)
    s, hit = src.unsqueeze(-1), place(mask.any(d, keepdim=True))
    # where several index entries name one position, the last of them writes it (as torch's CPU loop does); the value
    # is taken with max against the lowest value, which keeps it exactly (-0.0 too). Gradients as torch's: to src
    # the output's gradient at each entry's position (duplicates included), to self where nothing was written
    m = Tensor.arange(index.shape[d], device=self.device).reshape(*[index.shape[d] if j == d else 1 for j in range(self.ndim)], 1)
    mask = mask & (m == mask.where(m, -1)._reduce(Ops.MAX, d, True, "scatter"))
    written = place(mask.where(s, self.dtype.min)._reduce(Ops.MAX, d, True, "scatter"))
    return hit.where(written.detach(), self.detach()).custom_gradient([self, src], lambda g: (hit.where(0.0, g), g.gather(d, idx)))
  def scatter_add(self, dim: int, index: Self, src: Self) -> Self: return self.scatter(dim, index, src, "add")

  def scatter_reduce(self, dim: int, index: Self, src: Self, reduce: str, include_self: bool = True) -> Self:
    """self with the src values at index along dim combined into it by reduce: sum, prod, mean (integers: floored), amax
    or amin; include_self=False leaves self's own values out where an index names them. Positions no index names keep self's."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
      raise ValueError(f"scatter_reduce: reduce must be 'sum', 'prod', 'mean', 'amax' or 'amin', got {reduce!r}")
    d, _, src, mask, place = self._scatter_args("scatter_reduce", dim, index, src)
    if src.numel() == 0: return self   # (nothing to write; amax and amin have no value for an empty reduction)
    s, hit = src.unsqueeze(-1), place(mask.any(d, keepdim=True))
    def combined(empty, how: str) -> Self: return place(getattr(mask.where(s, empty), how)(d, keepdim=True)).cast(self.dtype)
    if reduce == "sum": out = combined(0, "sum") + (self if include_self else 0)
    elif reduce == "prod": out = combined(1, "prod") * (self if include_self else 1)
    elif reduce == "mean":
      # (a count of 0, where nothing is written, made 1: an integer division by 0 can trap on the CPU)
      total, count = combined(0, "sum") + (self if include_self else 0), (place(mask.sum(d, keepdim=True)) + int(include_self)).maximum(1)
      out = total / count if self.dtype.is_float else total.div(count, rounding_mode="floor").cast(self.dtype)
    elif reduce == "amax": out = combined(self.dtype.min, "max").maximum(self) if include_self else combined(self.dtype.min, "max")
    else: out = combined(self.dtype.max, "min").minimum(self) if include_self else combined(self.dtype.max, "min")
    return hit.where(out, self)

  def _true_positions(self, size: int) -> Self:
    """For a 1-D bool mask: int32 (size,), the positions of its first `size` True values in order (past its count of
    Trues, its last position). The k-th True is at the count of positions whose running count of Trues is at most k."""
    Tensor = type(self)
    n = self.shape[0]
    if n == 0: return Tensor.zeros(size, dtype=dtypes.int32, device=self.device)
    k = Tensor.arange(size, device=self.device).unsqueeze(1)
    return (self.cast(dtypes.int32).cumsum().unsqueeze(0) <= k).sum(1).minimum(n - 1).cast(dtypes.int32)
  def _count_or_size(self, op: str, size) -> int:
    """size checked; without one, the count of True values of this bool tensor, read (one realize)."""
    if size is None: return int(self.sum().item())
    if (size := _as_int(op, "size", size)) < 0: raise ValueError(f"{op}: size must be >= 0, got {size}")
    return size

  def masked_select(self, mask: Self, size: Optional[int] = None, fill_value=0) -> Self:
    """1-D: the elements where the bool mask (broadcast with self) is True, in row-major order. The output's size depends
    on the values: without `size` the count of True values is read (one realize, as in tinygrad); with it nothing is read:
    the first `size` selected elements, then fill_value."""
    Tensor = type(self)
    if not isinstance(mask, Tensor) or not mask.dtype.is_bool:
      raise TypeError(f"masked_select: mask must be a bool Tensor, got {getattr(mask, 'dtype', type(mask).__name__)}")
    if mask.device != self.device: raise RuntimeError(f"masked_select: mask is on {mask.device}, the tensor on {self.device}")
    shape = _broadcast_shape("masked_select", self.shape, mask.shape)
    x, m = self._broadcast_to(shape).flatten(), mask._broadcast_to(shape).flatten()
    n = m._count_or_size("masked_select", size)
    if x.numel() == 0: return x.pad(((0, n),), value=fill_value)
    out = x[m._true_positions(n)]
    return out if size is None else (Tensor.arange(n, device=self.device) < m.sum()).where(out, fill_value).cast(self.dtype)

  def nonzero(self, size: Optional[int] = None, fill_value=0) -> Self:
    """int32 (count, ndim): the index of each non-zero element, in row-major order. The count depends on the values:
    without `size` it is read (one realize, as in tinygrad); with it nothing is read: `size` rows, fill_value after the last."""
    Tensor = type(self)
    m = (self != 0).flatten()
    n = m._count_or_size("nonzero", size)
    if self.ndim == 0: return Tensor.zeros(n, 0, dtype=dtypes.int32, device=self.device)
    pos = m._true_positions(n)
    out = Tensor.stack(*[pos // prod(self.shape[i + 1:]) % s for i, s in enumerate(self.shape)], dim=-1)
    return out if size is None else (Tensor.arange(n, device=self.device) < m.sum()).unsqueeze(1).where(out, fill_value).cast(dtypes.int32)

  def one_hot(self, num_classes: int = -1) -> Self:
    """int32 rows with a 1 at each value's class. num_classes=-1 takes the largest value + 1, which reads the values (one
    realize; a negative value raises then). With num_classes given nothing is read: a value outside [0, num_classes)
    gives a row of zeros (PyTorch raises)."""
    Tensor = type(self)
    if self.dtype.is_float: raise TypeError(f"one_hot: input must be an integer tensor, got {self.dtype.name}")
    num_classes = _as_int("one_hot", "num_classes", num_classes)
    if num_classes == -1:
      if self.numel() == 0: raise ValueError(f"one_hot: cannot infer num_classes from an empty tensor (shape {self.shape}); pass it")
      lo, hi = self.min(), self.max()
      Tensor.realize_all(lo, hi)
      if lo.item() < 0: raise ValueError(f"one_hot: class values must be non-negative, got {lo.item()}")
      num_classes = int(hi.item()) + 1
    elif num_classes < 0: raise ValueError(f"one_hot: num_classes must be -1 (infer it) or >= 0, got {num_classes}")
    elif num_classes == 0 and self.numel(): raise ValueError(f"one_hot: num_classes=0 leaves no class for the {self.numel()} values")
    return (self.unsqueeze(-1) == Tensor.arange(num_classes, device=self.device)).cast(dtypes.int32)

  def _tri_mask(self, diagonal: int, upper: bool) -> Self:
    Tensor = type(self)
    op = 'triu' if upper else 'tril'
    if self.ndim < 2: raise ValueError(f"{op}: input must have at least 2 dimensions, got {self.shape}")
    if not hasattr(diagonal, "__index__"): raise TypeError(f"{op}: diagonal must be an int, got {diagonal!r} ({type(diagonal).__name__})")
    diagonal = diagonal.__index__()
    r, c = self.shape[-2:]
    rows = Tensor.arange(r, device=self.device).reshape(r, 1)
    cols = Tensor.arange(c, device=self.device).reshape(1, c)
    return (cols - rows >= diagonal) if upper else (cols - rows <= diagonal)
  def triu(self, diagonal: int = 0) -> Self: return self._tri_mask(diagonal, True).where(self, 0).cast(self.dtype)
  def tril(self, diagonal: int = 0) -> Self: return self._tri_mask(diagonal, False).where(self, 0).cast(self.dtype)
