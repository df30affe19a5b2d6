"""Workgroup-memory staging for tiled GPU kernels (Opt TILE): loads that a workgroup's threads share are copied into
workgroup memory once per block of the reduction (`stage_loads`, a pass of `lower`)."""
from __future__ import annotations
import math
from tinyweb.helpers import prod
from tinyweb.uop import UOp, Ops, graph_rewrite, substitute
from tinyweb.codegen.symbolic import symbolic
from tinyweb.codegen.lowering import Lowerer, ravel, unravel

LOCAL_MEMORY = 16384   # bytes of workgroup memory staging may use: WebGPU's guaranteed minimum per workgroup
STAGE_BLOCKS = (32, 16, 8, 4)   # reduction iterations staged at a time, largest first

def address_stride(load: UOp, var: UOp) -> float:
  """How far a load's address moves when `var` goes from 0 to 1 with the other variables (and thread indices) at 0;
  inf where that is not a constant (an address that is not affine in them)."""
  idx = load.src[1]
  zero = {u: UOp.const(u.dtype, 0) for u in idx.toposort() if u.op in (Ops.RANGE, Ops.SPECIAL)}
  a, b = (graph_rewrite(substitute(idx, {**zero, var: UOp.const(var.dtype, one)}), symbolic) for one in (0, 1))
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
      e = UOp(Ops.SPECIAL, lw.idx, (UOp.const(lw.idx, threads),), "lidx")
      if trips > 1: e = lw.new_range(trips) * threads + e
      if n % threads: e = e.alu(Ops.MIN, UOp.const(lw.idx, n - 1))
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
