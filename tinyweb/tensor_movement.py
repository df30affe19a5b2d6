"""Tensor movement ops, views that copy nothing: reshape, expand, permute, flip, shrink, pad, and what is built on them
(transpose, flatten, squeeze, repeat, cat, stack, split, chunk). A mixin of Tensor (tensor.py)."""
from __future__ import annotations
import functools, math
from typing import Optional, Self, Sequence
from tinyweb.dtype import dtypes, least_upper_dtype
from tinyweb.helpers import prod, flatten
from tinyweb.uop import UOp, Ops
from tinyweb.tensor_helpers import _py_scalar, _shape_args, _as_int, _sizes, _normalize_axis

def _int_pair(op: str, what: str, p) -> tuple[int, int]:
  if type(p) is tuple and len(p) == 2 and type(p[0]) is int and type(p[1]) is int: return p
  if not isinstance(p, (tuple, list)) or len(p) != 2: raise ValueError(f"{op}: expected a {what} pair of ints per dimension, got {p!r}")
  return _as_int(op, f"a {what} bound", p[0]), _as_int(op, f"a {what} bound", p[1])

# (an instance of MovementMixin is a Tensor: the one class built from it)
def _tensors(op: str, *ts) -> list:
  if (bad := next((t for t in ts if not isinstance(t, MovementMixin)), None)) is not None: raise TypeError(f"{op}: expected Tensors, got {type(bad).__name__}")
  return list(ts)

class MovementMixin:
  __slots__ = ()
  # (Tensor, in tensor.py, is built from this mixin and must not be imported here: methods find the class as
  # type(self), often as a local `Tensor = type(self)`; annotations say Self)

  def reshape(self, shape, *args) -> Self:
    shape, cur = _shape_args((shape, *args)), self.shape
    if not all(type(s) is int and s >= 0 for s in shape):   # None (keep that size), -1 (infer it), numpy ints, or invalid
      shape = tuple(cur[i] if s is None and i < len(cur) else _as_int("reshape", "a size", s) for i, s in enumerate(shape))
      if any(s < -1 for s in shape): raise ValueError(f"reshape: invalid shape {shape}: sizes are >= 0, or -1 (once) to infer one")
      if shape.count(-1) > 1: raise ValueError(f"reshape: only one dimension can be -1, got {shape}")
      if -1 in shape:
        known, n = prod(s for s in shape if s != -1), prod(cur)
        if known == 0 or n % known != 0: raise ValueError(f"reshape: cannot reshape tensor of shape {cur} ({n} elements) to {shape}")
        shape = tuple(n // known if s == -1 else s for s in shape)
    if shape == cur: return self
    if prod(shape) != (n := prod(cur)):
      raise ValueError(f"reshape: cannot reshape tensor of shape {cur} ({n} elements) to {shape} ({prod(shape)} elements)")
    return self._wrap(UOp(Ops.RESHAPE, self.dtype, (self.uop,), shape), self)
  def view(self, shape, *args) -> Self: return self.reshape(shape, *args)

  def expand(self, shape, *args) -> Self:
    shape = _shape_args((shape, *args))
    if not all(type(s) is int and s >= -1 for s in shape): shape = tuple(_as_int("expand", "a size", s) for s in shape)
    lead = len(shape) - self.ndim
    if lead < 0: raise ValueError(f"expand: target shape {shape} has fewer dimensions than the tensor {self.shape}")
    if any(s < -1 for s in shape) or -1 in shape[:lead]:
      raise ValueError(f"expand: invalid target shape {shape} for {self.shape}: sizes are >= 0, or -1 (keep the size) in the tensor's own dimensions")
    x = self.reshape((1,) * lead + self.shape) if lead else self
    new = tuple(o if s == -1 else s for s, o in zip(shape, x.shape))
    for s, o in zip(new, x.shape):
      if o != s and o != 1:
        raise ValueError(f"expand: cannot expand shape {self.shape} to {shape}: a dimension of size {o} can only expand if it is 1")
    if new == x.shape: return x
    return x._wrap(UOp(Ops.EXPAND, self.dtype, (x.uop,), new), x)

  def permute(self, order, *args) -> Self:
    given = _shape_args((order, *args))
    order = tuple(_normalize_axis("permute", o, self.ndim) for o in given)
    if len(order) != self.ndim or len(set(order)) != len(order):
      raise ValueError(f"permute: order {given} is not a permutation of the {self.ndim} dimensions of shape {self.shape}")
    if order == tuple(range(self.ndim)): return self
    return self._wrap(UOp(Ops.PERMUTE, self.dtype, (self.uop,), order), self)

  def flip(self, axis, *args) -> Self:
    axis = _shape_args((axis, *args))
    axes = [_normalize_axis("flip", a, self.ndim) for a in axis]
    if len(set(axes)) != len(axes): raise ValueError(f"flip: dims {axis} name a dimension more than once (shape {self.shape})")
    if not axes or self.ndim == 0: return self
    return self._wrap(UOp(Ops.FLIP, self.dtype, (self.uop,), tuple(i in axes for i in range(self.ndim))), self)

  def shrink(self, arg: Sequence[Optional[tuple[int, int]]]) -> Self:
    if len(arg) != self.ndim: raise ValueError(f"shrink: need one (start, end) per dimension of {self.shape}, got {arg}")
    arg = tuple((0, s) if a is None else _int_pair("shrink", "(start, end)", a) for a, s in zip(arg, self.shape))
    for (b, e), s in zip(arg, self.shape):
      if not 0 <= b <= e <= s: raise ValueError(f"shrink: range {(b, e)} is invalid for a dimension of size {s} (shape {self.shape})")
    if all(a == (0, s) for a, s in zip(arg, self.shape)): return self
    return self._wrap(UOp(Ops.SHRINK, self.dtype, (self.uop,), arg), self)

  def _pad_zero(self, arg: tuple[tuple[int, int], ...]) -> Self:
    """Pad with zeros (negative amounts crop)."""
    if any(b < 0 or e < 0 for b, e in arg):
      for i, ((b, e), n) in enumerate(zip(arg, self.shape)):
        if max(0, -b) + max(0, -e) > n:
          raise ValueError(f"pad: padding {(b, e)} crops more than the {n} elements of dimension {i} (shape {self.shape})")
      x = self.shrink(tuple((max(0, -b), s - max(0, -e)) for (b, e), s in zip(arg, self.shape)))
      return x._pad_zero(tuple((max(0, b), max(0, e)) for b, e in arg))
    if all(b == 0 and e == 0 for b, e in arg): return self
    return self._wrap(UOp(Ops.PAD, self.dtype, (self.uop,), tuple(arg)), self)

  def pad(self, padding, mode: str = "constant", value: float = 0.0) -> Self:
    """padding: PyTorch style flat (left, right, top, bottom, ...) starting at the last dim, or one (before, after)
    (or None) per dimension starting at the first. mode: constant, reflect, replicate, circular."""
    Tensor = type(self)
    padding, value = tuple(padding), _py_scalar("pad", value)
    if all(p is not None and not isinstance(p, (tuple, list)) for p in padding):
      if not all(type(p) is int for p in padding): padding = tuple(_as_int("pad", "a padding amount", p) for p in padding)
      if len(padding) % 2 or len(padding) // 2 > self.ndim:
        raise ValueError(f"pad: flat padding {padding} must have an even length of at most 2*ndim ({2*self.ndim})")
      pairs = [(0, 0)] * (self.ndim - len(padding) // 2) + [(padding[i], padding[i + 1]) for i in range(len(padding) - 2, -1, -2)]
    else:
      if len(padding) != self.ndim: raise ValueError(f"pad: need one (before, after) per dimension of {self.shape}, got {padding}")
      pairs = [(0, 0) if p is None else _int_pair("pad", "(before, after)", p) for p in padding]
    pairs = tuple(pairs)
    if mode == "constant":
      x = self._pad_zero(pairs)
      if value == 0: return x
      inside = Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device)._pad_zero(pairs)
      return inside.where(x, value)
    if mode not in ("reflect", "replicate", "circular"):
      raise ValueError(f"pad: mode {mode!r} is not supported; valid: constant, reflect, replicate, circular")
    x = self
    for ax, (b, e) in enumerate(pairs):
      if b == 0 and e == 0: continue
      n = x.shape[ax]
      if b < 0 or e < 0: raise ValueError(f"pad: negative padding is only valid in constant mode, got {(b, e)}")
      if mode == "reflect" and (b >= n or e >= n):
        raise ValueError(f"pad: reflect padding {(b, e)} must be smaller than the dimension size {n} (shape {self.shape})")
      if mode == "circular" and (b > n or e > n):
        raise ValueError(f"pad: circular padding {(b, e)} cannot exceed the dimension size {n} (shape {self.shape})")
      def sl(s, t): return x.shrink(tuple((s, t) if i == ax else None for i in range(x.ndim)))
      if mode == "reflect": parts = [sl(1, b + 1).flip(ax), x, sl(n - e - 1, n - 1).flip(ax)]
      elif mode == "replicate": parts = [sl(0, 1).expand(*[b if i == ax else -1 for i in range(x.ndim)]), x,
                                         sl(n - 1, n).expand(*[e if i == ax else -1 for i in range(x.ndim)])]
      else: parts = [sl(n - b, n), x, sl(0, e)]
      x = Tensor.cat(*[p for p in parts if p.shape[ax] > 0], dim=ax)
    return x

  @property
  def T(self) -> Self: return self.transpose()
  def transpose(self, dim0: int = 1, dim1: int = 0) -> Self:
    if self.ndim < 2 and (dim0, dim1) == (1, 0): return self
    order = list(range(self.ndim))
    a, b = _normalize_axis("transpose", dim0, self.ndim), _normalize_axis("transpose", dim1, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Self:
    if self.ndim == 0: return self.reshape(1)
    s, e = _normalize_axis("flatten", start_dim, self.ndim), _normalize_axis("flatten", end_dim, self.ndim)
    if s > e: raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} (shape {self.shape})")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def unflatten(self, dim: int, sizes: Sequence[int]) -> Self:
    d = _normalize_axis("unflatten", dim, self.ndim)
    n = self.shape[d]
    sizes = tuple(_as_int("unflatten", "a size", s) for s in sizes)
    known = prod(s for s in sizes if s != -1)
    if any(s < -1 for s in sizes) or sizes.count(-1) > 1 or (known == 0 or n % known if -1 in sizes else known != n):
      raise ValueError(f"unflatten: sizes {sizes} do not multiply to the size {n} of dimension {d} of {self.shape} (one may be -1)")
    return self.reshape(self.shape[:d] + sizes + self.shape[d + 1:])
  def squeeze(self, dim: Optional[int] = None) -> Self:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    ds = {_normalize_axis("squeeze", d, self.ndim) for d in dims}
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in ds and s == 1)))
  def unsqueeze(self, dim: int) -> Self:
    d = _normalize_axis("unsqueeze", dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def repeat(self, repeats, *args) -> Self:
    repeats = tuple(_as_int("repeat", "a repeat count", r) for r in _shape_args((repeats, *args)))
    if len(repeats) < self.ndim: raise ValueError(f"repeat: need at least {self.ndim} repeat counts for shape {self.shape}, got {repeats}")
    shape = (1,) * (len(repeats) - self.ndim) + self.shape
    # like torch, a count is refused only where it makes a negative size (a negative count of an empty dim is empty)
    if any(r * s < 0 for r, s in zip(repeats, shape)):
      raise ValueError(f"repeat: counts {repeats} for shape {self.shape} give a negative size {tuple(r * s for r, s in zip(repeats, shape))}")
    repeats = tuple(max(r, 0) for r in repeats)
    # insert a broadcast dim before each dim, expand it, then merge
    x = self.reshape(flatten((1, s) for s in shape)).expand(flatten((r, s) for r, s in zip(repeats, shape)))
    return x.reshape(tuple(r * s for r, s in zip(repeats, shape)))
  def repeat_interleave(self, repeats: int, dim: Optional[int] = None) -> Self:
    (repeats,) = _sizes("repeat_interleave", (repeats,))
    x = self.flatten() if dim is None else self
    d = 0 if dim is None else _normalize_axis("repeat_interleave", dim, x.ndim)
    return x.unsqueeze(d + 1).expand(*x.shape[:d + 1], repeats, *x.shape[d + 1:]).flatten(d, d + 1)

  def pad_to(self, shape, *args, value=0) -> Self:
    """Pad the end of each dimension with `value` up to `shape` (None keeps a dimension's size)."""
    shape = _shape_args((shape, *args))
    if len(shape) != self.ndim: raise ValueError(f"pad_to: target shape {shape} needs one size (or None) per dimension of {self.shape}")
    new = tuple(s if ns is None else _as_int("pad_to", "a size", ns) for s, ns in zip(self.shape, shape))
    if any(ns < s for s, ns in zip(self.shape, new)): raise ValueError(f"pad_to: cannot pad shape {self.shape} to the smaller {shape}")
    return self.pad(tuple((0, ns - s) for s, ns in zip(self.shape, new)), value=value)
  def shrink_to(self, shape, *args) -> Self:
    """The first `shape[i]` elements of each dimension (None keeps a dimension whole)."""
    shape = _shape_args((shape, *args))
    if len(shape) != self.ndim: raise ValueError(f"shrink_to: target shape {shape} needs one size (or None) per dimension of {self.shape}")
    new = tuple(s if ns is None else _as_int("shrink_to", "a size", ns) for s, ns in zip(self.shape, shape))
    if any(not 0 <= ns <= s for s, ns in zip(self.shape, new)): raise ValueError(f"shrink_to: cannot shrink shape {self.shape} to {shape}")
    return self.shrink(tuple((0, ns) for ns in new))

  def roll(self, shifts, dims=None) -> Self:
    """Shift the elements along `dims` by `shifts` (one per dim), circularly; with dims=None, of the flattened tensor."""
    if dims is None:
      if isinstance(shifts, (tuple, list)) and len(shifts) != 1: raise ValueError(f"roll: with dims=None shifts must be one int, got {shifts}")
      return self.flatten().roll(shifts, 0).reshape(self.shape)
    shifts, dims = (tuple(v) if isinstance(v, (tuple, list)) else (v,) for v in (shifts, dims))
    if len(shifts) != len(dims): raise ValueError(f"roll: shifts {shifts} and dims {dims} must have the same length")
    x = self
    for s, d in zip(shifts, dims):
      d, s = _normalize_axis("roll", d, self.ndim), _as_int("roll", "a shift", s)
      n = x.shape[d] if self.ndim else 0
      if n == 0 or (s := s % n) == 0: continue   # (a 0-d or empty tensor rolls onto itself)
      def part(b, e): return x.shrink(tuple((b, e) if i == d else None for i in range(x.ndim)))
      x = part(n - s, n).cat(part(0, n - s), dim=d)
    return x

  def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Self:
    """The elements [i, i + offset] of dims dim1 and dim2 (offset > 0: above the main diagonal), as a new last dimension."""
    a, b, offset = _normalize_axis("diagonal", dim1, self.ndim), _normalize_axis("diagonal", dim2, self.ndim), _as_int("diagonal", "offset", offset)
    if a == b: raise ValueError(f"diagonal: dim1 {dim1} and dim2 {dim2} must name two different dimensions of {self.shape}")
    x = self.permute([i for i in range(self.ndim) if i not in (a, b)] + [a, b])
    (r, c), pre = x.shape[-2:], x.shape[:-2]
    r0, c0 = min(max(0, -offset), r), min(max(0, offset), c)
    n = max(0, min(r - r0, c - c0))
    x = x.shrink((None,) * len(pre) + ((r0, r0 + n), (c0, c0 + n)))
    # the (n, n) block flattened and padded to n*(n+1): element [i, 0] of the (n, n+1) view is its [i, i]
    x = x.reshape(*pre, n * n)._pad_zero(((0, 0),) * len(pre) + ((0, n),)).reshape(*pre, n, n + 1)
    return x.shrink((None,) * len(pre) + (None, (0, 1))).reshape(*pre, n)
  def diag(self) -> Self:
    """A 1-D tensor as the diagonal of a square matrix (zeros elsewhere); of a 2-D tensor, its main diagonal (torch.diag)."""
    if self.ndim == 2: return self.diagonal()
    if self.ndim != 1: raise ValueError(f"diag: expected a 1-D tensor (a diagonal to make a matrix of) or a 2-D one, got shape {self.shape}")
    n = self.shape[0]
    # each value followed by n zeros, the first n*n of them as (n, n): value i lands at [i, i]
    return self.reshape(n, 1)._pad_zero(((0, 0), (0, n))).reshape(n * (n + 1)).shrink(((0, n * n),)).reshape(n, n)

  def unfold(self, dim: int, size: int, step: int) -> Self:
    """Windows of `size` elements starting every `step` along `dim`: that dim becomes the windows, a new last dim their elements."""
    d, size, step = _normalize_axis("unfold", dim, self.ndim), _as_int("unfold", "size", size), _as_int("unfold", "step", step)
    n = self.shape[d] if self.ndim else 1
    if size < 0 or step <= 0 or size > n:
      raise ValueError(f"unfold: size {size} and step {step} are invalid for dimension {d} of size {n} (shape {self.shape}): need 0 <= size <= {n}, step > 0")
    if self.ndim == 0: return self.reshape(1).shrink(((0, size),))
    x = self.permute([i for i in range(self.ndim) if i != d] + [d])._pool((size,), (step,), (1,), "unfold")   # (..., windows, size)
    return x.permute(*range(d), self.ndim - 1, *range(d, self.ndim - 1), self.ndim)

  def meshgrid(self, *args: Self, indexing: str = "ij") -> tuple[Self, ...]:
    """Grids from 1-D (or 0-d) tensors: each broadcast along the others' dims (indexing "xy" swaps the first two dims)."""
    ts = _tensors("meshgrid", self, *args)
    if indexing not in ("ij", "xy"): raise ValueError(f"meshgrid: indexing must be 'ij' or 'xy', got {indexing!r}")
    if (bad := next((t for t in ts if t.ndim > 1), None)) is not None: raise ValueError(f"meshgrid: expected 0-d or 1-D tensors, got shape {bad.shape}")
    if (dev := next((t.device for t in ts if t.device != self.device), None)) is not None:
      raise RuntimeError(f"meshgrid: expected all tensors on the same device, got {self.device} and {dev}")
    axes = [1, 0, *range(2, len(ts))] if indexing == "xy" and len(ts) > 1 else list(range(len(ts)))   # the output dim of each
    shape = [0] * len(ts)
    for a, t in zip(axes, ts): shape[a] = t.numel()
    return tuple(t.reshape(tuple(s if j == a else 1 for j, s in enumerate(shape))).expand(shape) for a, t in zip(axes, ts))

  def rearrange(self, formula: str, **sizes) -> Self:
    """Reshape and permute as an einops formula says, e.g. "b c (h w) -> b h w c" with h=4: axis names, (groups) of them
    (a dimension that is their product), '...' for the dimensions not named, and 1 for a dimension of size 1."""
    if not isinstance(formula, str) or formula.count("->") != 1: raise ValueError(f"rearrange: the formula must be a string with one '->', got {formula!r}")
    def fail(why): raise ValueError(f"rearrange: {why}, in {formula!r} for shape {self.shape}")
    def parse(side: str) -> list:   # the names of each dimension's axes ([]: a dimension of size 1), "..." for the unnamed ones
      groups, cur = [], None
      for tok in side.replace("…", "...").replace("(", " ( ").replace(")", " ) ").split():
        if tok == "(":
          if cur is not None: fail("nested parentheses")
          cur = []
        elif tok == ")":
          if cur is None: fail("a ')' without its '('")
          groups.append(cur); cur = None
        elif tok == "1":
          if cur is None: groups.append([])
        elif tok == "..." or tok.isidentifier():
          if cur is None: groups.append(tok if tok == "..." else [tok])
          else: cur.append(tok)
        else: fail(f"invalid axis {tok!r} (valid: names, '...', 1 and parentheses)")
      if cur is not None: fail("a '(' without its ')'")
      return groups
    lhs, rhs = (parse(side) for side in formula.split("->"))
    names_l, names_r = ([n for g in side for n in ([g] if g == "..." else g)] for side in (lhs, rhs))
    if len(set(names_l)) != len(names_l) or len(set(names_r)) != len(names_r): fail("an axis is named twice on one side")
    if set(names_l) != set(names_r): fail(f"axes {sorted(set(names_l) ^ set(names_r))} are on one side only")
    if (extra := set(sizes) - set(names_l)): fail(f"sizes are given for axes {sorted(extra)} that it does not name")
    if any(g != "..." and "..." in g for g in lhs): fail("'...' is inside parentheses on the left")
    n_ell = self.ndim - len(lhs) + 1 if "..." in names_l else 0
    if n_ell < 0 or ("..." not in names_l and len(lhs) != self.ndim): fail(f"the left side has {len(lhs)} dimensions, the tensor {self.ndim}")
    ell = [f"...{k}" for k in range(n_ell)]   # the unnamed dims' axes: one dim each where '...' stands alone, else one group
    def expand(groups):
      return flatten([[e] for e in ell] if g == "..." else [flatten(ell if n == "..." else [n] for n in g)] for g in groups)
    lhs, rhs = expand(lhs), expand(rhs)
    size = {n: _as_int("rearrange", f"the size of axis {n}", v) for n, v in sizes.items()}
    for g, dim in zip(lhs, self.shape):   # each group's one unknown size is inferred from the dimension's
      unknown, known = [n for n in g if n not in size], prod(size[n] for n in g if n in size)
      if len(unknown) > 1: fail(f"axes {unknown} of a dimension of size {dim} need sizes (all but one)")
      if unknown and (known <= 0 or dim % known): fail(f"sizes {[size[n] for n in g if n in size]} do not divide the dimension of size {dim} of {g}")
      if unknown: size[unknown[0]] = dim // known
      elif known != dim: fail(f"axes {g} make a dimension of size {known}, not {dim}")
    order = [n for g in lhs for n in g]
    x = self.reshape(tuple(size[n] for n in order)).permute(tuple(order.index(n) for g in rhs for n in g))
    return x.reshape(tuple(prod(size[n] for n in g) for g in rhs))

  def sequential(self, ll: Sequence) -> Self:
    """The functions of ll applied in turn: ll[-1](...ll[1](ll[0](self)))."""
    return functools.reduce(lambda x, f: f(x), ll, self)

  def cat(self, *others: Self, dim: int = 0) -> Self:
    ts = _tensors("cat", self, *others)
    d = _normalize_axis("cat", dim, self.ndim)
    for t in ts:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise ValueError(f"cat: shapes {[x.shape for x in ts]} must match except in dimension {d}")
      if t.device != self.device: raise RuntimeError(f"cat: expected all tensors on the same device, got {self.device} and {t.device}")
    dt = least_upper_dtype(*[t.dtype for t in ts])
    total = sum(t.shape[d] for t in ts)
    out, off = None, 0
    for t in ts:
      p = t.cast(dt)._pad_zero(tuple((off, total - off - t.shape[d]) if i == d else (0, 0) for i in range(self.ndim)))
      out = p if out is None else out + p
      off += t.shape[d]
    return out
  def stack(self, *others: Self, dim: int = 0) -> Self:
    ts = _tensors("stack", self, *others)
    for t in ts:
      if t.shape != self.shape: raise ValueError(f"stack: all tensors must have the same shape, got {[x.shape for x in ts]}")
    d = _normalize_axis("stack", dim, self.ndim + 1)
    return type(self).cat(*[t.unsqueeze(d) for t in ts], dim=d)
  def split(self, sizes, dim: int = 0) -> tuple[Self, ...]:
    d = _normalize_axis("split", dim, self.ndim)
    n = self.shape[d]
    if not isinstance(sizes, (tuple, list)):
      size = _as_int("split", "the split size", sizes)
      if size < 0 or size == 0 < n: raise ValueError(f"split: size must be positive (0 only for an empty dimension), got {size}")
      sizes = [min(size, n - i) for i in range(0, n, size or 1)] or [0]
    else: sizes = _sizes("split", sizes)
    if sum(sizes) != n: raise ValueError(f"split: sizes {list(sizes)} must add up to {n} (dimension {d} of {self.shape})")
    out, off = [], 0
    for s in sizes:
      out.append(self.shrink(tuple((off, off + s) if i == d else None for i in range(self.ndim))))
      off += s
    return tuple(out)
  def chunk(self, chunks: int, dim: int = 0) -> tuple[Self, ...]:
    chunks = _as_int("chunk", "chunks", chunks)
    if chunks <= 0: raise ValueError(f"chunk: number of chunks must be positive, got {chunks}")
    d = _normalize_axis("chunk", dim, self.ndim)
    return self.split(max(1, math.ceil(self.shape[d] / chunks)), dim=d) if self.shape[d] else (self,) * chunks
