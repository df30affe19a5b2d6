"""Lowering: a kernel AST (tensor-graph ops over DEFINE_GLOBAL inputs) -> a linear program of loops and scalar ops.

Each node of the AST is evaluated "at an index": INDEX(node, gate, *index) with one int UOp per dimension of the
node's shape. The `lowering` rules push INDEX down the AST until only loads, constants and ALU ops remain.
Movement ops only transform that index (reshape = ravel then unravel, permute reorders, expand uses 0, shrink adds
an offset, flip mirrors, pad shifts and guards), so views never copy data. A REDUCE_AXIS opens new loop ranges for
its reduced dimensions. The resulting index arithmetic is simplified by the rules in symbolic.py, then the
linearizer orders everything into nested loops with loop-invariant code hoisted out of reduction loops.

Optimizations are a list of actions (`Opt`: upcast an output axis, unroll a reduction loop, swap output loops, run a
reduction in blocks, GPU workgroup sizes) that `lower` applies; `heuristic_opts` chooses them by default, BEAM search (tinyweb/search.py) by timing.
"""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Optional
from tinyweb.dtype import dtypes, DType
import itertools, functools, math, os
from tinyweb.helpers import prod, largest_divisor, NOOPT, TILES
from tinyweb.uop import UOp, UPat, Ops, PatternMatcher, ELEMENTWISE, graph_rewrite, substitute
from tinyweb.codegen.symbolic import symbolic
from tinyweb.codegen.renderer import Renderer

IDX = dtypes.int32

def ravel(idx: tuple[UOp, ...], shape: tuple[int, ...]) -> UOp:
  out, stride = UOp.const(IDX, 0), 1
  for i, n in reversed(list(zip(idx, shape))):
    if n != 1: out = out + i * stride
    stride *= n
  return out

def unravel(flat: UOp, shape: tuple[int, ...]) -> tuple[UOp, ...]:
  out, stride = [], 1
  for n in reversed(shape):
    out.append(UOp.const(IDX, 0) if n == 1 else (flat // stride) % n)
    stride *= n
  return tuple(reversed(out))

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
               blocks: Optional[dict[tuple[UOp, int], int]] = None):
    self.range_id = 0
    self.reduce_ranges: dict[tuple, dict[int, UOp]] = {}   # loops of each reduction, shared by its upcast copies
    self.unrolls = unrolls or {}   # (REDUCE_AXIS, axis) -> iterations per loop trip (see Opt UNROLL)
    # (REDUCE_AXIS, axis) -> (iterations per block, the loop over blocks) (see Opt BLOCK)
    self.blocks = {k: (n, self.new_range(k[0].src[0].shape[k[1]] // n)) for k, n in (blocks or {}).items()}
    # GPU grouped reductions (see group_size): `group` threads of a workgroup share each top-level reduction
    self.group = group
    self.lidx = UOp(Ops.SPECIAL, IDX, (UOp.const(IDX, group),), "lidx") if group else None
    self.group_ranges: set[UOp] = set()
    self.staging: dict[UOp, list[UOp]] = {}   # a reduction loop -> the workgroup-memory stores to run before it opens
  def new_range(self, n: int) -> UOp:
    self.range_id += 1
    return UOp(Ops.RANGE, IDX, (UOp.const(IDX, n),), self.range_id)

def tile_index(r: Optional[UOp], amount: int, off: int) -> UOp:
  """The index of element `off` of tile `r` (a loop over tiles of `amount` elements; None: there is one tile)."""
  if r is None: return UOp.const(IDX, off)
  return r * amount + off if amount > 1 else r

# ---- the lowering rules: push INDEX from the stored value down to the loads. Movement ops only transform the index ----

def _load(ctx, x: UOp):
  buf, gate, i = x.src[0], x.src[1], x.src[2]
  return UOp(Ops.LOAD, buf.dtype, (buf, i) if gate is TRUE else (buf, i, gate))

def _permute(ctx, x: UOp):
  u, idx = x.src[0], x.src[2:]
  inv = [UOp.const(IDX, 0)] * len(idx)
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

def _reduce(ctx: Lowerer, x: UOp):
  u, gate, idx = x.src[0], x.src[1], x.src[2:]
  src, (rop, axes) = u.src[0], u.arg
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
    i = tile_index(rr.get(a), unroll[a], off)
    return blocks[a][1] * blocks[a][0] + i if a in blocks else i
  # an unrolled loop does `n` iterations per trip: their values are combined before the accumulator update
  vals = []
  for offs in itertools.product(*[range(n) for n in unroll.values()]):
    off = dict(zip(unroll, offs))
    inner = [(red_index(a, off[a]) if a in unroll else UOp.const(IDX, 0)) if a in axes else i for a, i in enumerate(idx)]
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
  inner = [parts.get(a, UOp.const(IDX, 0)) if a in axes else i for a, i in enumerate(idx)]
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
   lambda ctx, x: at(x.src[0].src[0], x.src[1], [UOp.const(IDX, 0) if s == 1 and n != 1 else i
                                                 for i, s, n in zip(x.src[2:], x.src[0].src[0].shape, x.src[0].shape)])),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.SHRINK)),
   lambda ctx, x: at(x.src[0].src[0], x.src[1], [i + b if b else i for i, (b, _) in zip(x.src[2:], x.src[0].arg)])),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.FLIP)),
   lambda ctx, x: at(x.src[0].src[0], x.src[1], [((n - 1) - i).clamp(0, n - 1) if f else i
                                                 for i, n, f in zip(x.src[2:], x.src[0].shape, x.src[0].arg)])),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.PAD)), _pad),
  (UPat(Ops.INDEX, name="x", predicate=_on(Ops.REDUCE_AXIS)), _reduce),
])

@dataclass
class Program:
  """A lowered kernel: its name, ordered ops, the buffers it touches and cost estimates for DEBUG output."""
  name: str
  uops: list[UOp]
  globals: list[UOp]                 # DEFINE_GLOBALs in argument order
  outputs: list[int]                 # indices of the globals that are written
  global_shape: tuple[int, ...]      # the output loop sizes
  flops: int = 0
  mem_estimate: int = 0
  parallel_range: Optional[UOp] = None   # the outermost output loop: a runtime may split it across cores
  opts: list[Opt] = field(default_factory=list)  # the optimization actions applied, for DEBUG=3
  # GPU targets (renderer.has_threads): the output loops are one flat thread index `gid` < threads (a SPECIAL uop),
  # run as `grid` workgroups of `local_size` threads; the kernel returns early for gid >= threads.
  threads: int = 0
  local_size: int = 0
  grid: Optional[tuple[int, int, int]] = None
  # GPU grouped reductions: one workgroup of `group` threads per output (gid is the workgroup index)
  group: int = 0
  # GPU workgroup tiles (Opt TILE): the workgroup's threads span a block of outputs; gid is the workgroup index
  tiled: bool = False
  @property
  def parallel(self) -> int: return self.parallel_range.src[0].arg if self.parallel_range is not None else 0
  @property
  def gid_is_workgroup(self) -> bool: return bool(self.group or self.tiled)

# ---- optimization actions: chosen by the heuristics below (or by BEAM search, tinyweb/search.py), applied by `lower` ----

@dataclass(frozen=True)
class Opt:
  """One optimization action, as data.
  UPCAST a n: compute n neighbouring outputs along output axis a per loop iteration, each with its own accumulator
    (register tiling: loads are shared between them, and the C compiler vectorizes them).
  UNROLL a n: reduction loop a (numbered as `reduce_loops` lists them) does n iterations per trip.
  BLOCK a n: CPU, reduction loop a runs in blocks of n iterations, and the loop over blocks moves out, right inside the
    outermost output loop: the inner output loops then reuse the data of one block from the cache (a matmul's rows of B
    4 KiB apart evict each other from L2 long before 1024 of them are read). Each output's accumulator is kept in the
    output buffer between blocks, so the order of its sum is unchanged. Only where the kernel's value is that reduction.
  SWAP a b: exchange the nesting order of output loops a and b (the outermost loop is split across CPU cores; on a GPU
    the innermost is the one that neighbouring threads differ in).
  SPLIT a n: CPU, output loop a runs in blocks of n trips, and the loop over blocks becomes the outermost loop (the one
    split across cores): the other output loops and the reduction's blocks then run within one block of axis a, so
    what they read of that block stays in the cache (a matmul's block of rows of A in L2 while all of B passes by).
  LOCAL 0 n: GPU, n threads per workgroup (default: the renderer's local_size).
  GROUP 0 n: GPU, n threads of a workgroup share each top-level reduction (see _group_reduce); n a power of two.
  TILE a n: GPU, n neighbouring output tiles along axis a are computed by n threads of one workgroup (the workgroup
    is the product of the TILE amounts, the last TILE's threads neighbours). Loads of a reduction that some of those
    threads share are staged through workgroup memory (see stage_loads).
  TC 0 0: a matrix multiply on the renderer's tensor cores, alone (codegen/tensor_cores.py lowers the whole kernel)."""
  kind: str
  axis: int
  amount: int
  def __repr__(self): return f"{self.kind}({self.axis},{self.amount})"

OPT_KINDS = ("UPCAST", "UNROLL", "SWAP", "LOCAL", "GROUP", "TILE", "TC", "BLOCK", "SPLIT")

class OptError(ValueError):
  """An optimization action that does not apply to a kernel (BEAM search drops such candidates)."""

class LoopLimitError(RuntimeError):
  """The kernel would run more loop iterations per thread than the target allows (lavapipe)."""

def reduce_loops(value: UOp) -> list[tuple[UOp, int]]:
  """The reduction loops of a kernel, as (REDUCE_AXIS, axis) in a fixed order: what UNROLL's axis numbers."""
  return [(u, a) for u in value.toposort() if u.op is Ops.REDUCE_AXIS for a in u.arg[1] if u.src[0].shape[a] != 1]

@dataclass
class AppliedOpts:
  upcasts: dict[int, int]               # output axis -> outputs per loop iteration
  unrolls: dict[tuple[UOp, int], int]   # (REDUCE_AXIS, axis) -> iterations per loop trip
  order: list[int]                      # output axes, outermost loop first
  blocks: dict[tuple[UOp, int], int]    # (REDUCE_AXIS, axis) -> iterations per block
  local: int = 0
  group: int = 0
  tiles: list[tuple[int, int]] = field(default_factory=list)   # (output axis, threads along it), outermost first
  tc: bool = False
  splits: dict[int, int] = field(default_factory=dict)   # output axis -> loop trips per block (Opt SPLIT)

def apply_opts(value: UOp, renderer, opts: list[Opt], out_buf: Optional[UOp] = None) -> AppliedOpts:
  """Check each action against the kernel (its value, stored to out_buf) and the target and collect their effect; an
  action that does not apply raises OptError saying why."""
  shape, gpu = value.shape, renderer.has_threads
  loops = reduce_loops(value)
  ao = AppliedOpts({}, {}, list(range(len(shape))), {})
  for o in opts:
    def check(ok: bool, why: str):
      if not ok: raise OptError(f"{o} does not apply to a kernel of shape {shape} on {renderer.device}: {why}")
    check(o.kind in OPT_KINDS, f"unknown kind {o.kind!r}; valid: {OPT_KINDS}")
    check(o.kind not in ("UPCAST", "UNROLL", "BLOCK", "TILE", "SPLIT") or o.amount >= 2, "the amount must be at least 2")
    if o.kind == "UPCAST":
      check(0 <= o.axis < len(shape), f"output axes are 0..{len(shape) - 1}")
      n = ao.upcasts.get(o.axis, 1) * o.amount
      check(shape[o.axis] % n == 0, f"{n} does not divide the axis size {shape[o.axis]}")
      ao.upcasts[o.axis] = n
    elif o.kind == "UNROLL":
      check(0 <= o.axis < len(loops), f"the kernel has {len(loops)} reduction loops")
      u, a = loops[o.axis]
      n = ao.unrolls.get((u, a), 1) * o.amount
      check(u.src[0].shape[a] % n == 0, f"{n} does not divide the loop size {u.src[0].shape[a]}")
      ao.unrolls[(u, a)] = n
    elif o.kind == "BLOCK":
      check(not gpu, "GPU threads do not run the output loops")
      check(0 <= o.axis < len(loops), f"the kernel has {len(loops)} reduction loops")
      red = value
      while red.op in (Ops.RESHAPE, Ops.PERMUTE): red = red.src[0]   # they only move the values
      check(all(u is red for u, _ in loops) and out_buf is not None and out_buf.dtype == value.dtype and
            out_buf not in value.toposort(), "the kernel's value must be its only reduction, stored as it is to a buffer it does not read")
      u, a = loops[o.axis]
      check(u.src[0].shape[a] % o.amount == 0 and o.amount < u.src[0].shape[a], f"{o.amount} must divide the loop size {u.src[0].shape[a]}")
      ao.blocks[(u, a)] = o.amount
    elif o.kind == "SPLIT":
      check(not gpu, "GPU threads do not run the output loops")
      check(0 <= o.axis < len(shape) and not ao.splits, f"one output axis of 0..{len(shape) - 1}, split once")
      ao.splits[o.axis] = o.amount
    elif o.kind == "SWAP":
      check(0 <= o.axis < len(shape) and 0 <= o.amount < len(shape) and o.axis != o.amount, f"two different output axes of 0..{len(shape) - 1}")
      i, j = ao.order.index(o.axis), ao.order.index(o.amount)
      ao.order[i], ao.order[j] = ao.order[j], ao.order[i]
    elif o.kind == "TILE":
      check(gpu, "only GPU targets have workgroups")
      check(0 <= o.axis < len(shape) and o.axis not in dict(ao.tiles), f"an output axis of 0..{len(shape) - 1} not tiled yet")
      check(prod(n for _, n in ao.tiles) * o.amount <= renderer.max_local_size, f"at most {renderer.max_local_size} threads in the workgroup")
      ao.tiles.append((o.axis, o.amount))
    elif o.kind == "TC":
      from tinyweb.codegen.tensor_cores import contraction   # (it builds on this module)
      check(len(opts) == 1, "TC lowers the whole kernel for the tensor cores: it combines with no other action")
      check(not isinstance(why := contraction(value, renderer), str), str(why))
      ao.tc = True
    else:   # LOCAL, GROUP
      check(gpu, "only GPU targets have workgroups")
      check(o.axis == 0 and 1 <= o.amount <= renderer.max_local_size, f"axis 0, 1 to {renderer.max_local_size} threads")
      if o.kind == "LOCAL": ao.local = o.amount
      else:
        check(o.amount & (o.amount - 1) == 0 and o.amount > 1, "the workgroup reduction needs a power of two")
        check(bool(loops), "the kernel has no reduction")
        ao.group = o.amount
  if ao.group and (ao.upcasts or ao.unrolls or ao.local or ao.tiles):
    raise OptError(f"{opts}: GROUP cannot be combined with UPCAST, UNROLL, LOCAL or TILE (kernel of shape {shape})")
  if ao.tiles and ao.local: raise OptError(f"{opts}: TILE sets the workgroup size; it cannot be combined with LOCAL")
  for a, n in ao.tiles:
    if (shape[a] // ao.upcasts.get(a, 1)) % n:
      raise OptError(f"{opts}: TILE({a},{n}) does not divide the {shape[a] // ao.upcasts.get(a, 1)} loop iterations of axis {a} "
                     f"(kernel of shape {shape})")
  for a, n in ao.splits.items():
    if (trips := shape[a] // ao.upcasts.get(a, 1)) % n or n >= trips:
      raise OptError(f"{opts}: SPLIT({a},{n}) must divide the {trips} loop trips of axis {a}, and be fewer (kernel of shape {shape})")
  if any(n % ao.unrolls.get(k, 1) or n == ao.unrolls.get(k, 1) for k, n in ao.blocks.items()):
    raise OptError(f"{opts}: a block must be a multiple of its loop's unroll, and larger (kernel of shape {shape})")
  return ao

def choose_upcasts(value: UOp, lanes: int = 0) -> dict[int, int]:
  """Register tiling for kernels with a reduction: compute several neighbouring outputs per loop iteration, each with its
  own accumulator, so loads are reused across them and the C compiler can vectorize along the last axis (its stores are
  contiguous). `lanes`: the renderer's float32 vectors (CStyleRenderer.vector_groups). Returns {output axis: how many
  outputs along it}."""
  if not any(u.op is Ops.REDUCE_AXIS for u in value.toposort()): return {}
  shape, out = value.shape, {}
  axes = [i for i, n in enumerate(shape) if n > 1]
  if not axes: return {}
  last = axes[-1]
  strides = read_strides(value, last) if lanes and value.dtype == dtypes.float32 else None
  # vectors (CPU), for a matmul-like kernel: some reads are shared by a row of outputs, the others move along it. Where
  # they move contiguously, preferably 4 vectors along the last axis (else what divides it), where some are gathered (a
  # matmul with a transposed operand) one; and as many rows as keep the accumulators within 28 of the 32 vector registers
  # (more vectors along the row share the rows' loads and any per-row work, more rows share the vectors' loads)
  matmul_like = bool(strides) and 0 in strides and len(strides) > 1
  vectors = [v for v in ((4, 8, 7, 6, 5, 3, 2, 1) if strides == {0, 1} else (1,)) if matmul_like and shape[last] % (v * lanes) == 0]
  if vectors:
    # (a reduction over several loops (a conv's gradient) lowers its index math per copy: at most 64 copies, 4 vectors)
    most = 28 if len(reduce_loops(value)) == 1 else 4
    # but 8 rows of 2 vectors where they divide: 15-35% faster than 4 x 4 on AVX-512 for matmuls of 128..2048 (a block
    # of B's rows, 256 x 32 floats, then stays in L1)
    v = 2 if most == 28 and 2 in vectors and any(shape[i] % 8 == 0 for i in axes[:-1]) else vectors[0]
    out[last], amts = v * lanes, [a for a in (16, 8, 4, 2) if a * v <= most]
  # a whole vector where every read moves contiguously along the last axis (each load then fills one register, and each
  # cache line is read in one pass: a big sum's partial sums 2.3 -> 1.2 ms for 16M floats)
  elif strides == {1} and shape[last] % lanes == 0: out[last], amts = lanes, [4]
  # 8 (a vector) where it divides, else the largest divisor up to 24: a whole short row (a 10x10 image) beats pairs
  else:
    out[last] = 8 if shape[last] % 8 == 0 else largest_divisor(shape[last], 24)
    # with vectors (CPU), clang holds the 8 along the last axis in one register: then 8 along an axis longer than that
    # (a conv's output channels; 1.6x faster than 4 for a 64-channel 3x3 conv), else 4
    amts = ([8, 4] if lanes else [4]) if out[last] == 8 else [2] if out[last] <= 16 else []
  # a second axis, at most 32 accumulators in all (or vectors, above): preferably one that a load moving along the last axis
  # does not move along (it is then loaded once for all of them; a conv's input does not depend on the output channel)
  along_last = [a for a in load_axes(value) if last in a]
  for amt in amts:
    if fits := [i for i in reversed(axes[:-1]) if shape[i] % amt == 0 and (amt < 8 or shape[i] > amt)]:
      out[next((i for i in fits if any(i not in a for a in along_last)), fits[0])] = amt
      break
  return {a: n for a, n in out.items() if n > 1}

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
  lw = Lowerer()
  r = lw.new_range(value.shape[axis])
  val = graph_rewrite(graph_rewrite(at(value, TRUE, [r if i == axis else UOp.const(IDX, 0) for i in range(len(value.shape))]),
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

GROUP_MIN = 1024     # GPU: a reduction over at least this many elements per output may be shared by a workgroup...
GROUP_MAX_OUTPUTS = 16384   # ...when there are fewer outputs than this (more: one thread per output tile fills the GPU)

def group_size(value: UOp, renderer) -> int:
  """GPU targets: threads per workgroup that share each top-level reduction (0: one thread per output loops alone).
  Worth it when there are few outputs with big reductions (a sum, a norm's statistics): one thread per output would leave
  the GPU idle. It also keeps each thread's loops short: lavapipe (llvmpipe) silently stops a shader invocation's loops
  after 65535 iterations in all (see `max_loop_iterations`), so a reduction longer than that is always shared."""
  reds = [u for u in value.toposort() if u.op is Ops.REDUCE_AXIS]
  if not reds: return 0
  nested = {v for u in reds for v in u.src[0].toposort() if v.op is Ops.REDUCE_AXIS and v is not u}
  def size(u: UOp) -> int: return prod(u.src[0].shape[a] for a in u.arg[1])
  # the work of one output: a top-level reduction's size times that of the reductions nested in it (loops inside its loop)
  n = max(size(u) * prod(size(v) for v in u.src[0].toposort() if v.op is Ops.REDUCE_AXIS) for u in reds if u not in nested)
  if n < GROUP_MIN: return 0
  limit = renderer.max_loop_iterations
  if prod(value.shape) >= GROUP_MAX_OUTPUTS and (limit is None or n <= limit // 2): return 0
  return max_group(renderer)

def max_group(renderer) -> int:
  g, cap = 1, min(256, renderer.local_size * 4, renderer.max_local_size)
  while g * 2 <= cap: g *= 2
  return g if g > 1 else 0

def choose_tiles(value: UOp, renderer, upcasts: dict[int, int]) -> list[Opt]:
  """GPU workgroup tiles for a reduction kernel with loads that neighbouring output tiles share (a matmul's rows and
  columns): up to 16 x 16 threads over the last two output axes with more than one loop iteration, so those loads are
  staged through workgroup memory (stage_loads). Only where the renderer says it pays (`workgroup_tiles`: a real GPU;
  on CPU-emulated GPUs the barriers cost more than the loads) or TILES=1 forces it."""
  if TILES.value == 0 or (TILES.value < 0 and not renderer.workgroup_tiles): return []
  if not any(u.op is Ops.REDUCE_AXIS for u in value.toposort()): return []
  iters = {a: n // upcasts.get(a, 1) for a, n in enumerate(value.shape)}
  axes = [a for a, n in iters.items() if n > 1][-2:]
  if not any(any(a not in deps for a in axes) for deps in load_axes(value)): return []   # no load is shared
  out, cap = [], min(256, renderer.max_local_size)
  for a in reversed(axes):
    n = 16
    while n > 1 and (iters[a] % n or n * prod(o.amount for o in out) > cap): n //= 2
    if n > 1: out.insert(0, Opt("TILE", a, n))
  return out if prod(o.amount for o in out) >= 8 else []

BLOCK_SIZE = 128   # CPU: a long reduction of a wide-tiled matmul runs in blocks of this many steps (Opt BLOCK)
SPLIT_ROWS = 128   # CPU: and its rows in blocks of at most this many (Opt SPLIT), at least one block per core

def heuristic_opts(value: UOp, renderer, out_buf: Optional[UOp] = None) -> list[Opt]:
  """The hand-written choice: tensor cores where they apply, on GPU targets a grouped reduction for big reductions, else
  register tiling (choose_upcasts) and, on GPUs, workgroup tiles (choose_tiles); on the CPU, a matmul tiled wide with a
  long reduction also gets its loop over column tiles outermost and its reduction in blocks (Opt BLOCK): a block of B's
  rows then stays in the cache while all rows of A pass by, and its rows in blocks (Opt SPLIT), the loop over those
  outermost: the rows of A of one block stay in L2 while all of B passes by (1024^3: 12.0 -> 7.8 ms on 2 cores)."""
  from tinyweb.codegen.tensor_cores import contraction   # (it builds on this module)
  if not isinstance(contraction(value, renderer), str): return [Opt("TC", 0, 0)]
  gpu = renderer.has_threads
  if gpu and (g := group_size(value, renderer)): return [Opt("GROUP", 0, g)]
  ups = choose_upcasts(value, renderer.vector_lanes)
  opts = [Opt("UPCAST", a, n) for a, n in ups.items()]
  if gpu: return opts + choose_tiles(value, renderer, ups)
  out_loops, loops = [i for i, n in enumerate(value.shape) if n // ups.get(i, 1) > 1], reduce_loops(value)
  if len(out_loops) == 2 and ups.get(out_loops[1], 1) > renderer.vector_lanes > 0 and len(loops) == 1 and \
     (k := loops[0][0].src[0].shape[loops[0][1]]) > BLOCK_SIZE and k % BLOCK_SIZE == 0:
    blocked = opts + [Opt("SWAP", *out_loops), Opt("BLOCK", 0, BLOCK_SIZE)]
    up = ups.get(out_loops[0], 1)
    rows = value.shape[out_loops[0]] // up
    if (n := largest_divisor(rows, min(SPLIT_ROWS // up, rows // max(2, os.cpu_count() or 1)))) >= 2:
      blocked.append(Opt("SPLIT", out_loops[0], n))
    try:
      apply_opts(value, renderer, blocked, out_buf)
      return blocked
    except OptError: pass   # the kernel computes more than the reduction
  return opts

def noopt_opts(ast: UOp, renderer) -> list[Opt]:
  """NOOPT=1: no optimization, except a grouped reduction where the target cannot run the kernel without one (lavapipe's
  loop limit). Also the reference that BEAM search checks every candidate against."""
  try: lower(ast, renderer, [])
  except LoopLimitError: return [Opt("GROUP", 0, max_group(renderer))]
  return []

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

def lower(ast: UOp, renderer: Renderer, opts: Optional[list[Opt]] = None) -> Program:
  """ast: SINK(STORE(DEFINE_GLOBAL out, value)): the value is stored contiguously in its shape.
  opts: the optimization actions to apply (None: the heuristics choose, or with NOOPT=1 `noopt_opts`).
  With a GPU renderer (`renderer.has_threads`) the output loops become a thread index instead of loops."""
  assert ast.op is Ops.SINK and len(ast.src) == 1 and ast.src[0].op is Ops.STORE
  store = ast.src[0]
  out_buf, value = store.src[0], store.src[1]
  if opts is None: opts = noopt_opts(ast, renderer) if NOOPT else heuristic_opts(value, renderer, out_buf)
  gpu = renderer.has_threads
  ao = apply_opts(value, renderer, opts, out_buf)
  if ao.tc:
    from tinyweb.codegen.tensor_cores import lower_tc
    return lower_tc(ast, renderer, opts)
  lw = Lowerer(ao.group, ao.unrolls, ao.blocks)
  shape, upcasts = value.shape, ao.upcasts
  out_ranges = [lw.new_range(n // upcasts.get(i, 1)) if n // upcasts.get(i, 1) != 1 else None for i, n in enumerate(shape)]
  loops = [out_ranges[i] for i in ao.order if out_ranges[i] is not None]   # outermost first
  for a, n in ao.splits.items():   # the loop over blocks outermost, the loop within a block where axis a's loop was
    blocks, within = lw.new_range(out_ranges[a].src[0].arg // n), lw.new_range(n)
    loops = [blocks] + [within if r is out_ranges[a] else r for r in loops]
    out_ranges[a] = blocks * n + within
  parallel = loops[0] if loops else None
  block_loops = [r for _, r in lw.blocks.values()]
  loops = loops[:1] + block_loops + loops[1:]   # inside the outermost loop: the cores' outputs stay apart
  threads, lids = 0, []
  if gpu and ao.tiles:   # gid is the workgroup index; each tiled axis adds the thread's index in the workgroup along it
    tile = dict(ao.tiles)
    outer = [(i, out_ranges[i].src[0].arg // tile.get(i, 1)) for i in ao.order if out_ranges[i] is not None]
    threads = prod(n for _, n in outer)   # workgroups, as with grouped reductions
    gid = UOp(Ops.SPECIAL, IDX, (UOp.const(IDX, threads),), "gid")
    wg = dict(zip([i for i, _ in outer], unravel(gid, tuple(n for _, n in outer))))
    stride = prod(tile.values())
    for k, (a, n) in enumerate(ao.tiles):   # thread index in the workgroup = sum of lid_k * stride_k
      stride //= n
      lids.append(UOp(Ops.SPECIAL, IDX, (UOp.const(IDX, n), UOp.const(IDX, stride)), f"lid{k}"))
    lid_of = {a: l for (a, _), l in zip(ao.tiles, lids)}
    out_ranges = [None if r is None else wg[i] * tile[i] + lid_of[i] if i in tile else wg[i] for i, r in enumerate(out_ranges)]
  elif gpu:   # each output loop index is unraveled from one flat thread index
    threads = prod(r.src[0].arg for r in loops)
    gid = UOp(Ops.SPECIAL, IDX, (UOp.const(IDX, threads),), "gid")
    sub = dict(zip(loops, unravel(gid, tuple(r.src[0].arg for r in loops))))
    out_ranges = [sub[r] if r is not None else None for r in out_ranges]
  stores = []
  up_axes = list(upcasts)
  for offsets in itertools.product(*[range(upcasts[a]) for a in up_axes]):
    off = dict(zip(up_axes, offsets))
    idx = tuple(tile_index(r, upcasts.get(i, 1), off.get(i, 0)) for i, r in enumerate(out_ranges))
    stores.append(UOp(Ops.STORE, None, (out_buf, ravel(idx, shape), at(value, TRUE, idx))))
  sink = graph_rewrite(UOp(Ops.SINK, None, tuple(stores)), lowering, ctx=lw)
  if any(u.op is Ops.INDEX for u in sink.toposort()): raise NotImplementedError("lowering: an op without a lowering rule")
  sink = graph_rewrite(sink, symbolic)
  if lw.group_ranges: sink = wrap_group_reduces(sink, lw)
  tile_threads = prod(n for _, n in ao.tiles) if ao.tiles else 0   # threads per workgroup of a tiled kernel
  if ao.tiles: sink = stage_loads(sink, lw, lids, tile_threads)
  uops = linearize(sink, loops if not gpu else [], lw.staging, block_inits(sink, block_loops),
                   renderer.fused_multiply_add)
  gl = sorted([u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL], key=lambda u: u.arg[0])
  has_reduce = any(u.op is Ops.DEFINE_ACC for u in uops)
  name = ("r_" if has_reduce else "E_") + ("_".join(str(n) for n in shape) if shape else "0")
  group = ao.group
  flops, mults = 0, [threads * (group or tile_threads or 1) if gpu else 1]
  for u in uops:
    mult = mults[-1]
    if u.op is Ops.RANGE: mults.append(mult * u.src[0].arg)
    elif u.op is Ops.ENDRANGE: mults.pop()
    elif u.op in ELEMENTWISE and u.dtype is not None and u.dtype.is_float and u.op not in (Ops.CAST, Ops.BITCAST): flops += mult
    elif u.op is Ops.ACC_UPDATE: flops += mult * (len(u.src) - 1)   # a fused product: 2
  mem = sum(g.arg[1] * g.dtype.itemsize for g in gl)
  if gpu:
    local = group or tile_threads or ao.local or max(1, min(renderer.local_size, renderer.max_local_size, threads))
    if (limit := renderer.max_loop_iterations) is not None:
      iters, depth = 0, [1]   # loop iterations one thread runs, in all
      for u in uops:
        if u.op is Ops.RANGE: depth.append(depth[-1] * u.src[0].arg); iters += depth[-1]
        elif u.op is Ops.ENDRANGE: depth.pop()
      if iters > limit:
        raise LoopLimitError(f"{renderer.device}: kernel {name} runs {iters} loop iterations per thread; this adapter stops a "
                             f"thread's loops after {limit} in all (lavapipe/llvmpipe), which would give wrong results")
    return Program(name, uops, gl, [out_buf.arg[0]], tuple(shape), flops, mem, opts=list(opts), threads=threads, local_size=local,
                   grid=launch_grid(threads * (group or tile_threads or 1), local, renderer.max_groups), group=group,
                   tiled=bool(ao.tiles))
  return Program(name, uops, gl, [out_buf.arg[0]], tuple(shape), flops, mem, parallel_range=parallel, opts=list(opts))

def block_inits(sink: UOp, block_loops: list[UOp]) -> dict[UOp, UOp]:
  """Opt BLOCK: each stored REDUCE's accumulator starts from what the previous blocks left in the output (the identity
  in the first block)."""
  if not block_loops: return {}
  later = functools.reduce(lambda a, b: a.alu(Ops.OR, b), [UOp.const(IDX, 0) < r for r in block_loops])
  inits = {}
  for st in sink.src:
    buf, idx, red = st.src
    if red.op is not Ops.REDUCE or red in inits: raise OptError(f"BLOCK: a stored value is not a reduction of its own ({red.op})")
    # the load is not gated: it reads the allocated output (garbage in the first block, then unused), which lets clang
    # vectorize it; a gated load is a branch per element
    inits[red] = later.where(UOp(Ops.LOAD, buf.dtype, (buf, idx)), UOp.const(red.dtype, reduce_identity(red.arg, red.dtype)))
  return inits

LOCAL_MEMORY = 16384   # bytes of workgroup memory staging may use: WebGPU's guaranteed minimum per workgroup
STAGE_BLOCKS = (32, 16, 8, 4)   # reduction iterations staged at a time, largest first

def address_stride(load: UOp, var: UOp) -> float:
  """How far a load's address moves when `var` goes from 0 to 1 with the other variables (and thread indices) at 0;
  inf where that is not a constant (an address that is not affine in them)."""
  idx = load.src[1]
  zero = {u: UOp.const(IDX, 0) for u in idx.toposort() if u.op in (Ops.RANGE, Ops.SPECIAL)}
  a, b = (graph_rewrite(substitute(idx, {**zero, var: UOp.const(IDX, one)}), symbolic) for one in (0, 1))
  return abs(b.arg - a.arg) if a.op is Ops.CONST and b.op is Ops.CONST else math.inf

def stage_loads(sink: UOp, lw: Lowerer, lids: list[UOp], threads: int) -> UOp:
  """Tiled GPU kernels (Opt TILE): a load inside a reduction whose address does not depend on the thread's index along
  some tiled axis is the same for those threads (a matmul's row of A for every column thread). Such loads are read from
  global memory once per workgroup: one loop of the reduction, k, becomes an outer loop over blocks of T and an inner
  loop over the block; before each block the workgroup's threads together copy the elements of every shared load for
  that block (and for all the reduction's loops inside it) into workgroup memory: the stores in lw.staging, which the
  linearizer places between the two loops, between barriers. The loop body then reads them from there."""
  loops: dict[tuple, list[UOp]] = {}   # a reduction's loops -> the reductions over them (upcast copies share them)
  for u in sink.toposort():
    if u.op is Ops.REDUCE: loops.setdefault(u.src[1:], []).append(u)
  replace: dict[UOp, UOp] = {}
  for ranges, reds in loops.items():
    loads = [u for u in dict.fromkeys(v for red in reds for v in red.src[0].toposort()) if u.op is Ops.LOAD]
    for i, k in enumerate(r.src[0].arg for r in ranges):   # split the outermost loop that has a block size that fits
      staged = {}   # load -> (thread indices, loops from the split one inward) its address depends on
      for ld in loads:
        deps = set(ld.toposort())
        if not {x for x in deps if x.op is Ops.RANGE} <= set(ranges): continue   # depends on loops outside this nest
        used, inner_loops = [l for l in lids if l in deps], [r for r in ranges[i:] if r in deps]
        if inner_loops and len(used) < len(lids): staged[ld] = (used, inner_loops)
      def nbytes(t: int) -> int:
        return sum(prod(v.src[0].arg for v in used + rs) // (ranges[i].src[0].arg // t if ranges[i] in rs else 1) *
                   max(4, ld.dtype.itemsize) for ld, (used, rs) in staged.items())
      if staged and (t := next((t for t in STAGE_BLOCKS if k % t == 0 and nbytes(t) <= LOCAL_MEMORY), 0)): break
    else: continue
    r, inner = ranges[i], lw.new_range(t)
    outer = lw.new_range(k // t) if k > t else None
    def k_at(x: UOp) -> UOp: return outer * t + x if outer is not None else x
    lw.staging[inner] = []
    for load, (used, rs) in staged.items():
      # layout in workgroup memory: [loops][thread indices], so that neighbouring threads read neighbouring words in
      # the loop body. The copy walks the elements in global address order instead (neighbouring threads read
      # neighbouring addresses where the load allows it): its flat element index e is unraveled by address stride.
      layout = [inner if x is r else x for x in rs] + used
      sizes = {v: v.src[0].arg for v in layout}
      order = sorted(layout, key=lambda v: -address_stride(load, r if v is inner else v))
      n, trips = prod(sizes.values()), -(-prod(sizes.values()) // threads)
      # thread `lidx` copies elements lidx, lidx+threads, ...; where they do not divide evenly, the excess threads
      # copy the last element again (the same value: a harmless duplicate write)
      e = UOp(Ops.SPECIAL, IDX, (UOp.const(IDX, threads),), "lidx")
      if trips > 1: e = lw.new_range(trips) * threads + e
      if n % threads: e = e.alu(Ops.MIN, UOp.const(IDX, n - 1))
      at_e = dict(zip(order, unravel(e, tuple(sizes[v] for v in order))))
      mem = UOp(Ops.DEFINE_LOCAL, load.dtype, (), (f"smem{len(replace)}", n))
      src = substitute(load, {**{v: at_e[v] for v in layout if v is not inner}, r: k_at(at_e[inner]) if inner in at_e else k_at(inner)})
      pos = ravel(tuple(at_e[v] for v in layout), tuple(sizes.values()))
      lw.staging[inner].append(graph_rewrite(UOp(Ops.STORE, None, (mem, pos, src)), symbolic))
      replace[load] = UOp(Ops.LOAD, load.dtype, (mem, ravel(tuple(layout), tuple(sizes.values()))))
    new_ranges = ranges[:i] + ((outer, inner) if outer is not None else (inner,)) + ranges[i + 1:]
    for red in reds:
      replace[red] = UOp(Ops.REDUCE, red.dtype, (substitute(red.src[0], {**replace, r: k_at(inner)}),) + new_ranges, red.arg)
  return graph_rewrite(substitute(sink, replace), symbolic) if replace else sink

def fused_products(sink: UOp) -> dict[UOp, tuple[UOp, UOp]]:
  """The float32 sums of products whose update can be one fused multiply-add, acc = fma(a, b, acc) (one rounding instead
  of two: what BLAS and torch's CPU kernels do, and twice the arithmetic per instruction): {REDUCE: (a, b)} for each
  REDUCE ADD whose value is a MUL that nothing else uses."""
  topo, users = sink.toposort(), {}
  for u in topo:
    for x in u.src: users[x] = users.get(x, 0) + 1
  return {u: u.src[0].src for u in topo if u.op is Ops.REDUCE and u.arg is Ops.ADD and u.dtype == dtypes.float32
          and u.src[0].op is Ops.MUL and u.src[0].dtype == dtypes.float32 and users[u.src[0]] == 1}

def linearize(sink: UOp, out_ranges: list[UOp], staging: Optional[dict[UOp, list[UOp]]] = None,
              inits: Optional[dict[UOp, UOp]] = None, fma: bool = False) -> list[UOp]:
  """Order the program: open the output loops, emit each value once at the loop depth it needs, close loops.
  A REDUCE becomes: accumulator init (the reduction's identity, or its value in `inits`); the loop-invariant part of its
  body (hoisted); its loops; the update: ACC_UPDATE(reduce, value), or with `fma` for a sum of products (see
  fused_products) ACC_UPDATE(reduce, a, b), acc = fma(a, b, acc).
  staging (see stage_loads): a reduction loop -> workgroup-memory stores that run before it opens (each inside loops of
  its own), followed by a barrier; another barrier after the loop closes, before the stores of the next trip."""
  staging, inits = staging or {}, inits or {}
  topo = UOp(Ops.SINK, None, sink.src + tuple(s for st in staging.values() for s in st)).toposort()
  siblings: dict[tuple, list[UOp]] = {}   # reductions over the same loops (upcast copies) share one loop nest
  for u in topo:
    if u.op is Ops.REDUCE: siblings.setdefault(u.src[1:], []).append(u)
  rng: dict[UOp, frozenset] = {}   # the loops each value needs open
  def needs(u: UOp) -> frozenset:
    if u.op is Ops.RANGE: return frozenset([u])
    s = frozenset().union(*[rng[x] for x in u.src]) if u.src else frozenset()
    return s - frozenset(u.src[1:]) if u.op is Ops.REDUCE else s
  for u in topo: rng[u] = needs(u)
  # siblings sit in one loop nest, so each needs the outer loops that any of them needs (an upcast copy that reads only
  # padding does not depend on an outer reduction's loop that the others read with)
  while any(len({rng[x] for x in g}) > 1 for g in siblings.values()):
    for u in topo: rng[u] = frozenset().union(*[needs(x) for x in siblings[u.src[1:]]]) if u.op is Ops.REDUCE else needs(u)
  # (a product the same in every iteration is hoisted out of the loop, not fused)
  fused = {x: ab for x, ab in fused_products(sink).items() if rng[x.src[0]] & frozenset(x.src[1:])} if fma else {}
  out: list[UOp] = []
  done: set[UOp] = set()
  def hoist(roots: list[UOp], open_ranges: frozenset):   # the parts of `roots` that need no loop beyond the open ones
    for x in roots:
      for v in x.toposort():
        if v.op is not Ops.RANGE and rng[v] <= open_ranges: emit(v, open_ranges)
  def emit_staging(stores: list[UOp], open_ranges: frozenset):
    hoist(stores, open_ranges)
    for st in stores:
      own = sorted(rng[st] - open_ranges, key=lambda r: r.arg)
      out.extend(own)
      done.update(own)
      emit(st, open_ranges | frozenset(own))
      out.extend(UOp(Ops.ENDRANGE, None, (r,)) for r in reversed(own))
    out.append(UOp(Ops.BARRIER))
  def emit(u: UOp, open_ranges: frozenset):
    if u in done: return
    if u.op is Ops.REDUCE:
      group = [x for x in siblings[u.src[1:]] if x not in done]
      red = frozenset(u.src[1:])
      # loop-invariant parts of the bodies are computed once, before the reduction loop
      hoist([x.src[0] for x in group], open_ranges)
      for x in group:
        if x in inits: emit(inits[x], open_ranges)
        out.append(UOp(Ops.DEFINE_ACC, x.dtype, (x, inits[x]) if x in inits else (x,)))
      opened = open_ranges
      for r in u.src[1:]:
        if r in staging: emit_staging(staging[r], opened)
        out.append(r); done.add(r)
        opened = opened | {r}
      values = {x: fused.get(x, (x.src[0],)) for x in group}
      for x in group:
        for v in values[x]: emit(v, open_ranges | red)
      for x in group: out.append(UOp(Ops.ACC_UPDATE, x.dtype, (x, *values[x])))
      for r in reversed(u.src[1:]):
        out.append(UOp(Ops.ENDRANGE, None, (r,)))
        if r in staging: out.append(UOp(Ops.BARRIER))
      done.update(group)
      return
    for s in u.src: emit(s, open_ranges)
    if u.op is Ops.RANGE: raise RuntimeError("linearize: a loop range escaped its loop")
    out.append(u)
    done.add(u)
  for r in out_ranges: out.append(r); done.add(r)
  for s in sink.src: emit(s, frozenset(out_ranges))
  for r in reversed(out_ranges): out.append(UOp(Ops.ENDRANGE, None, (r,)))
  return out
