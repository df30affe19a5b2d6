"""Optimization actions (`Opt`): the vocabulary that the heuristics (codegen/heuristics.py) and BEAM search
(tinyweb/search.py) choose from, and `apply_opts`, which checks a list of them against a kernel and a target and
collects their effect for `lower`."""
from __future__ import annotations
from dataclasses import dataclass, field
from typing import Optional
from tinyweb.helpers import prod
from tinyweb.uop import UOp, Ops
from tinyweb.codegen.tensor_cores import contraction
from tinyweb.codegen.lowering import loop_reduces

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

def reduce_loops(value: UOp) -> list[tuple[UOp, int]]:
  """The reduction loops of a kernel, as (REDUCE_AXIS, axis) in a fixed order: what UNROLL's axis numbers. A sum that
  selects one position (a gather) is a read, not a loop."""
  return [(u, a) for u in loop_reduces(value) for a in u.arg[1] if u.src[0].shape[a] != 1]

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
