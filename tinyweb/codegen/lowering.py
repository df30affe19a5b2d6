"""The lowering rules: a kernel AST (tensor-graph ops over DEFINE_GLOBAL inputs) evaluated at an index, pushed down to loads.

Each node of the AST is evaluated "at an index": INDEX(node, gate, *index) with one int UOp per dimension of the
node's shape. The `lowering` rules push INDEX down the AST until only loads, constants and ALU ops remain.
Movement ops only transform that index (reshape = ravel then unravel, permute reorders, expand uses 0, shrink adds
an offset, flip mirrors, pad shifts and guards), so views never copy data. A REDUCE_AXIS opens new loop ranges for
its reduced dimensions. Also here: the analyses the heuristics make with these rules (which output axes each load's
index depends on, how far a read moves per step) and the GPU launch grid.

Index arithmetic is int32 (`IDX`) unless a kernel's index range needs more (`index_dtype`: a flat index past 2^31, e.g.
a reshape of a huge broadcast view), then int64 (`IDX64`): the kernel's loop ranges and thread indices have that dtype
(`Lowerer.idx`), and the rules derive every index they make from the indexes they are given.
"""
from __future__ import annotations
import functools, itertools
from typing import Optional
from tinyweb.dtype import dtypes, DType
from tinyweb.helpers import prod
from tinyweb.uop import UOp, UPat, Ops, PatternMatcher, ELEMENTWISE, MOVEMENT, graph_rewrite, substitute
from tinyweb.codegen.symbolic import symbolic

IDX = dtypes.int32     # index arithmetic of kernels whose indexes fit in 31 bits (nearly all)
IDX64 = dtypes.int64   # and of those that need more (index_dtype)
INDEX_MAX = 2**31 - 1

def ravel(idx: tuple[UOp, ...], shape: tuple[int, ...]) -> UOp:
  # (in a 64-bit kernel, a size-1 dimension's index may be an int32 0: one that a reshape to shape () made)
  dt = IDX64 if any(i.dtype == IDX64 for i in idx) else IDX
  out, stride = UOp.const(dt, 0), 1
  for i, n in reversed(list(zip(idx, shape))):
    if n != 1: out = out + i.cast(dt) * stride
    stride *= n
  return out

def unravel(flat: UOp, shape: tuple[int, ...]) -> tuple[UOp, ...]:
  out, stride = [], 1
  for n in reversed(shape):
    out.append(UOp.const(flat.dtype, 0) if n == 1 else (flat // stride) % n)
    stride *= n
  return tuple(reversed(out))

def index_extent(u: UOp) -> int:
  """How far an index that lowering AST node `u` makes runs: a reshape's index is flat over the larger of its two
  shapes, a reduction's (GPU grouped reductions) over the elements it reduces; every other node's index goes dimension
  by dimension."""
  if not u.shape: return 1
  if u.op is Ops.RESHAPE: return max(u.size, u.src[0].size)
  if u.op is Ops.REDUCE_AXIS: return max(max(u.shape), prod(u.src[0].shape[a] for a in u.arg[1]))
  return max(u.shape)

def wide_index(value: UOp) -> Optional[tuple[UOp, int]]:
  """The node of kernel value `value` whose index runs past INDEX_MAX, and how far (`index_extent`; the value itself:
  its flat store index runs to its size), or None where int32 index math holds every index."""
  if value.size > INDEX_MAX: return value, value.size
  return next(((u, n) for u in value.toposort() if (n := index_extent(u)) > INDEX_MAX), None)

def index_dtype(value: UOp) -> DType:
  """The dtype of kernel value `value`'s index arithmetic: IDX, or IDX64 where an index needs it (`wide_index`)."""
  return IDX if wide_index(value) is None else IDX64

REDUCE_IDENTITY = {Ops.ADD: 0, Ops.MUL: 1}

def reduce_identity(op: Ops, dt: DType):
  if op is Ops.MAX: return dt.min
  return REDUCE_IDENTITY[op]

TRUE = UOp.const(dtypes.bool, True)

def at(node: UOp, gate: UOp, idx) -> UOp:
  """INDEX: the value of AST node `node` at multi-index `idx`; `gate` is the condition under which loads are valid."""
  return UOp(Ops.INDEX, node.dtype, (node, gate, *idx))

class Lowerer:
  """State of one kernel's lowering: loop ranges are numbered, and each reduction's loops are made once per context."""
  def __init__(self, group: int = 0, unrolls: Optional[dict[tuple[UOp, int], int]] = None,
               blocks: Optional[dict[tuple[UOp, int], int]] = None, idx: DType = IDX):
    self.range_id, self.idx = 0, idx   # idx: the dtype of the kernel's loop ranges and thread indices (see index_dtype)
    self.reduce_ranges: dict[tuple, dict[int, UOp]] = {}   # loops of each reduction, shared by its upcast copies
    self.unrolls = unrolls or {}   # (REDUCE_AXIS, axis) -> iterations per loop trip (see Opt UNROLL)
    # (REDUCE_AXIS, axis) -> (iterations per block, the loop over blocks) (see Opt BLOCK)
    self.blocks = {k: (n, self.new_range(k[0].src[0].shape[k[1]] // n)) for k, n in (blocks or {}).items()}
    # GPU grouped reductions (see group_size): `group` threads of a workgroup share each top-level reduction
    self.group = group
    self.lidx = UOp(Ops.SPECIAL, idx, (UOp.const(idx, group),), "lidx") if group else None
    self.group_ranges: set[UOp] = set()
    self.staging: dict[UOp, list[UOp]] = {}   # a reduction loop -> the workgroup-memory stores to run before it opens
  def new_range(self, n: int) -> UOp:
    self.range_id += 1
    return UOp(Ops.RANGE, self.idx, (UOp.const(self.idx, n),), self.range_id)

def tile_index(r: Optional[UOp], amount: int, off: int, dt: DType) -> UOp:
  """The index of element `off` of tile `r` (a loop over tiles of `amount` elements; None: there is one tile, and
  `dt` is the index dtype)."""
  if r is None: return UOp.const(dt, off)
  return r * amount + off if amount > 1 else r

# ---- the lowering rules: push INDEX from the stored value down to the loads. Movement ops only transform the index ----

def _load(ctx, x: UOp):
  buf, gate, i = x.src[0], x.src[1], x.src[2]
  return UOp(Ops.LOAD, buf.dtype, (buf, i) if gate is TRUE else (buf, i, gate))

def _permute(ctx, x: UOp):
  u, idx = x.src[0], x.src[2:]
  inv = [None] * len(idx)
  for i, p in enumerate(u.arg): inv[p] = idx[i]
  return at(u.src[0], x.src[1], inv)

def _pad(ctx, x: UOp):
  u, gate, idx = x.src[0], x.src[1], x.src[2:]
  src = u.src[0]
  valid: Optional[UOp] = None
  new_idx = []
  for i, n, (b, e) in zip(idx, src.shape, u.arg):
    if b or e:
      shifted = i - b if b else i
      for c in ([i >= b] if b else []) + ([shifted < n] if e else []): valid = c if valid is None else valid.logical_and(c)
      new_idx.append(shifted.clamp(0, n - 1))   # only read where valid (the load is gated): the clamp shows the range
    else: new_idx.append(i)
  if valid is None: return at(src, gate, new_idx)
  return valid.where(at(src, valid if gate is TRUE else gate.logical_and(valid), new_idx), UOp.const(u.dtype, 0))

def _conjuncts(c: UOp) -> list[UOp]: return _conjuncts(c.src[0]) + _conjuncts(c.src[1]) if c.op is Ops.AND else [c]

def _where_sum(u: UOp) -> bool:
  """Whether REDUCE_AXIS `u` has the form of select_reduce's sums: a sum over a nonempty range of where(a condition
  with an arange, x, 0) (or of its cast)."""
  src, (rop, axes) = u.src[0], u.arg
  if src.op is Ops.CAST: src = src.src[0]
  if rop is not Ops.ADD or src.op is not Ops.WHERE or src.src[0].dtype != dtypes.bool: return False
  zero = src.src[2]
  while zero.op in MOVEMENT: zero = zero.src[0]
  return zero.op is Ops.CONST and zero.arg == 0 and any(a.op is Ops.ARANGE for a in src.src[0].toposort()) and \
    all(src.shape[a] != 0 for a in axes)

def select_reduce(ctx: Lowerer, u: UOp, gate: UOp, idx) -> Optional[UOp]:
  """A sum that selects one position, sum over k of where(e == k, x[k], 0) with e not depending on k (how tensor
  indexing, gather and one_hot products are built), is x[e] where 0 <= e < n and 0 elsewhere: one read instead of a
  loop over every k (a row gather reads its rows, not the table). The value of REDUCE_AXIS `u` at `idx` in that form,
  or None where `u` is not such a sum (each reduced axis needs its own `e == k` among the condition's conjuncts)."""
  if not _where_sum(u): return None
  src, axes = u.src[0], u.arg[1]
  cast = src.dtype if src.op is Ops.CAST else None
  if cast is not None: src = src.src[0]
  first_range = ctx.range_id
  ks = {a: ctx.new_range(src.shape[a]) for a in axes if src.shape[a] != 1}
  inner = [ks.get(a, UOp.const(ctx.idx, 0)) if a in axes else i for a, i in enumerate(idx)]
  cond = _conjuncts(graph_rewrite(graph_rewrite(at(src.src[0], gate, inner), lowering, ctx=ctx), symbolic))
  picked: dict[UOp, UOp] = {}   # k -> e
  rest = []                     # the other conjuncts
  for c in cond:
    for k, e in ((c.src, c.src[::-1]) if c.op is Ops.CMPEQ else ()):
      if k.op is Ops.CAST and k.dtype == IDX: k = k.src[0]   # (an arange's int32 value of a 64-bit index)
      if k in ks.values() and k not in picked and e.dtype == IDX and not any(r in ks.values() for r in e.toposort()):
        picked[k] = e.cast(k.dtype)
        break
    else: rest.append(c)
  if len(picked) != len(ks):
    ctx.range_id = first_range   # (the trial's loops are not used: the kernel's loop numbering stays as without it)
    return None
  valid = functools.reduce(UOp.logical_and, [substitute(c, picked) for c in rest] +
                           [(e >= 0).logical_and(e < k.src[0].arg) for k, e in picked.items()])
  # the read is not gated: its index is clamped into the table, so it stays in bounds where e does not (a gated read is
  # a branch per element; an ungated one vectorizes along the selected row)
  at_e = {k: e.clamp(0, k.src[0].arg - 1) for k, e in picked.items()}
  val = valid.where(at(src.src[1], gate, [at_e.get(i, i) for i in inner]), UOp.const(src.dtype, 0))
  return val.cast(cast) if cast is not None else val

def selects(u: UOp) -> bool:
  """Whether REDUCE_AXIS `u` is a sum that selects one position (`select_reduce`): it lowers to a read, not a loop."""
  if not _where_sum(u): return False
  lw = Lowerer(idx=index_dtype(u))
  return select_reduce(lw, u, TRUE, [lw.new_range(n) if n != 1 else UOp.const(lw.idx, 0) for n in u.shape]) is not None

def loop_reduces(value: UOp) -> list[UOp]:
  """The REDUCE_AXIS nodes of a kernel value that lower to loops (all but the selecting sums), in toposort order."""
  return [u for u in value.toposort() if u.op is Ops.REDUCE_AXIS and not selects(u)]

def _reduce(ctx: Lowerer, x: UOp):
  u, gate, idx = x.src[0], x.src[1], x.src[2:]
  src, (rop, axes) = u.src[0], u.arg
  if not any(k[0] is u for k in ctx.blocks) and (sel := select_reduce(ctx, u, gate, idx)) is not None: return sel
  # the copies of one reduction made by upcasting differ only in constant offsets: they share loops. A copy reached
  # inside another loop nest (its index uses other loops) gets loops of its own.
  key = (u, frozenset(r for i in idx for r in i.toposort() if r.op is Ops.RANGE))
  if ctx.group and not key[1] and any(src.shape[a] != 1 for a in axes): return _group_reduce(ctx, x)
  unroll = {a: ctx.unrolls.get((u, a), 1) for a in axes if src.shape[a] != 1}
  blocks = {a: ctx.blocks[(u, a)] for a in unroll if (u, a) in ctx.blocks}
  span = {a: blocks[a][0] if a in blocks else src.shape[a] for a in unroll}   # the iterations of the loop over axis a
  if key not in ctx.reduce_ranges: ctx.reduce_ranges[key] = {a: ctx.new_range(span[a] // n) for a, n in unroll.items() if span[a] != n}
  rr = ctx.reduce_ranges[key]
  def red_index(a: int, off: int) -> UOp:
    i = tile_index(rr.get(a), unroll[a], off, ctx.idx)
    return blocks[a][1] * blocks[a][0] + i if a in blocks else i
  # an unrolled loop does `n` iterations per trip: their values are combined before the accumulator update
  vals = []
  for offs in itertools.product(*[range(n) for n in unroll.values()]):
    off = dict(zip(unroll, offs))
    inner = [(red_index(a, off[a]) if a in unroll else UOp.const(ctx.idx, 0)) if a in axes else i for a, i in enumerate(idx)]
    vals.append(at(src, gate, inner))
  val = functools.reduce(lambda a, b: a.alu(rop, b), vals)
  return UOp(Ops.REDUCE, u.dtype, (val, *rr.values()), rop) if rr else val

def _group_reduce(ctx: Lowerer, x: UOp):
  """GPU, a reduction outside any loop: thread `lidx` of the workgroup reduces elements lidx, lidx+G, lidx+2G, ...
  (G = ctx.group threads) into a partial result; the partials are combined in workgroup memory (a SPECIAL
  ("group", op, G) over the partial REDUCE, added after simplification by `wrap_group_reduces`)."""
  u, gate, idx = x.src[0], x.src[1], x.src[2:]
  src, (rop, axes) = u.src[0], u.arg
  red_axes = [a for a in axes if src.shape[a] != 1]
  sizes = tuple(src.shape[a] for a in red_axes)
  n, g = prod(sizes), ctx.group
  r = ctx.new_range(-(-n // g))
  ctx.group_ranges.add(r)
  flat = r * g + ctx.lidx
  parts = dict(zip(red_axes, unravel(flat, sizes)))
  inner = [parts.get(a, UOp.const(ctx.idx, 0)) if a in axes else i for a, i in enumerate(idx)]
  valid = (flat < n) if n % g else None
  val = at(src, gate if valid is None else valid if gate is TRUE else gate.logical_and(valid), inner)
  if valid is not None: val = valid.where(val, UOp.const(u.dtype, reduce_identity(rop, u.dtype)))
  return UOp(Ops.REDUCE, u.dtype, (val, r), rop)

def wrap_group_reduces(sink: UOp, lw: Lowerer) -> UOp:
  memo: dict[UOp, UOp] = {}
  for u in sink.toposort():
    nsrc = tuple(memo[s] for s in u.src)
    nu = u if nsrc == u.src else u.replace(src=nsrc)
    if nu.op is Ops.REDUCE and len(nu.src) == 2 and nu.src[1] in lw.group_ranges:
      nu = UOp(Ops.SPECIAL, nu.dtype, (nu,), ("group", nu.arg, lw.group))
    memo[u] = nu
  return memo[sink]

def _on(*ops): return lambda x: x.src[0].op in ops

lowering = PatternMatcher([
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.CONST)), lambda ctx, x: x.src[0]),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.ARANGE)), lambda ctx, x: x.src[2].cast(x.dtype)),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.DEFINE_GLOBAL)), _load),
  (UPat(Ops.INDEX, name="x", predicate=lambda x: x.src[0].op in ELEMENTWISE),
   lambda ctx, x: x.src[0].replace(src=tuple(at(s, x.src[1], x.src[2:]) for s in x.src[0].src))),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.RESHAPE)),   # ravel in this shape, unravel in the source's
   lambda ctx, x: at(x.src[0].src[0], x.src[1], unravel(ravel(x.src[2:], x.src[0].shape), x.src[0].src[0].shape))),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.PERMUTE)), _permute),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.EXPAND)),    # a broadcast dimension reads element 0
   lambda ctx, x: at(x.src[0].src[0], x.src[1], [UOp.const(i.dtype, 0) if s == 1 and n != 1 else i
                                                 for i, s, n in zip(x.src[2:], x.src[0].src[0].shape, x.src[0].shape)])),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.SHRINK)),
   lambda ctx, x: at(x.src[0].src[0], x.src[1], [i + b if b else i for i, (b, _) in zip(x.src[2:], x.src[0].arg)])),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.FLIP)),
   lambda ctx, x: at(x.src[0].src[0], x.src[1], [((n - 1) - i).clamp(0, n - 1) if f else i
                                                 for i, n, f in zip(x.src[2:], x.src[0].shape, x.src[0].arg)])),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.PAD)), _pad),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.REDUCE_AXIS)), _reduce),
])

def load_axes(value: UOp) -> list[set[int]]:
  """For each buffer a kernel value reads: the output axes that its read index depends on (a superset where a reshape
  merges dimensions)."""
  out: dict[UOp, set[int]] = {}
  seen: set = set()
  def walk(u: UOp, deps: tuple[frozenset, ...]):   # deps: per dim of u, the output axes its index there depends on
    if (u, deps) in seen: return
    seen.add((u, deps))
    if u.op is Ops.DEFINE_GLOBAL: out.setdefault(u, set()).update(*deps); return
    if u.op is Ops.REDUCE_AXIS: deps = tuple(frozenset() if i in u.arg[1] else d for i, d in enumerate(deps))
    elif u.op is Ops.PERMUTE: deps = tuple(deps[u.arg.index(i)] for i in range(len(deps)))
    elif u.op is Ops.EXPAND: deps = tuple(frozenset() if s == 1 else d for d, s in zip(deps, u.src[0].shape))
    elif u.op is Ops.RESHAPE:   # a source dim depends on the dims whose spans of the flat index overlap its span
      def spans(shape):
        st, res = 1, []
        for n in reversed(shape): res.append((st, st * n) if n > 1 else (0, 0)); st *= n
        return res[::-1]
      mine = spans(u.shape)
      deps = tuple(frozenset().union(*[d for d, (a, b) in zip(deps, mine) if a < hi and lo < b]) for lo, hi in spans(u.src[0].shape))
    for x in u.src: walk(x, deps)
  walk(value, tuple(frozenset([i]) for i in range(len(value.shape))))
  return list(out.values())

def read_strides(value: UOp, axis: int) -> Optional[set[int]]:
  """How far each read moves per step of output `axis` (in elements; 0: it does not move), or None where a read moves
  through a division, modulo or guard."""
  lw = Lowerer(idx=index_dtype(value))
  r = lw.new_range(value.shape[axis])
  val = graph_rewrite(graph_rewrite(at(value, TRUE, [r if i == axis else UOp.const(lw.idx, 0) for i in range(len(value.shape))]),
                                    lowering, ctx=lw), symbolic)
  def terms(u: UOp) -> list[UOp]: return terms(u.src[0]) + terms(u.src[1]) if u.op is Ops.ADD else [u]
  def stride(idx: UOp) -> Optional[int]:
    moving = [t for t in terms(idx) if r in t.toposort()]
    if not moving: return 0
    if len(moving) == 1 and moving[0] is r: return 1
    if len(moving) == 1 and moving[0].op is Ops.MUL and moving[0].src[0] is r and moving[0].src[1].op is Ops.CONST: return moving[0].src[1].arg
    return None
  out = {stride(u.src[1]) for u in val.toposort() if u.op is Ops.LOAD}
  return None if None in out else out

def launch_grid(threads: int, local_size: int, max_groups: int) -> tuple[int, int, int]:
  """Workgroups for `threads` threads: 1-D while it fits in `max_groups` per dimension, else folded into 2-D/3-D
  (the kernel rebuilds the flat index from the workgroup id and returns for the excess threads)."""
  groups = max(1, -(-threads // local_size))
  x = min(groups, max_groups)
  y = -(-groups // x)
  z = 1
  if y > max_groups: y, z = max_groups, -(-groups // (x * max_groups))
  if z > max_groups: raise RuntimeError(f"kernel of {threads} threads needs more than {max_groups}^3 workgroups of {local_size}")
  return (x, y, z)
