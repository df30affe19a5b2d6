"""The linearizer: orders a lowered kernel's ops into nested loops, each value once at the loop depth it needs, with
loop-invariant code hoisted out of reduction loops; float32 sums of products become fused multiply-adds where asked."""
from __future__ import annotations
from typing import Optional
from tinyweb.dtype import dtypes
from tinyweb.uop import UOp, Ops

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
      # loop-invariant parts of the bodies are computed once, before the reduction loop; so are those of the staging
      # stores inside its loops (else a value they share with code after the loop, e.g. a clamped index, would be
      # emitted in a loop's scope and be undefined after it)
      hoist([x.src[0] for x in group] + [st for r in u.src[1:] for st in staging.get(r, ())], open_ranges)
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
