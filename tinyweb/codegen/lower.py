"""Lowering: a kernel AST (tensor-graph ops over DEFINE_GLOBAL inputs) -> a `Program`, a linear list of loops and
scalar ops that a renderer turns into source.

`lower` runs the passes of `PASSES` in order on one `Kernel` (the state they share); each pass is a function named
after what it does:
  optimize       choose the optimization actions (`heuristic_opts`, or NOOPT's) and check them (`apply_opts`)
  loops          the output loops, in the order and blocks the actions ask for; their index dtype: int32, or int64
                 where the kernel's index range needs it (lowering.index_dtype)
  threads        GPU targets: the output loops become the thread index (flat, or workgroup + thread in a tile)
  stores         the stored value at each output index (several per loop iteration where an axis is upcast)
  lowering       the `lowering` rules push those indexes down to the loads (codegen/lowering.py)
  simplify       index arithmetic simplified (codegen/symbolic.py)
  group_reduces  GPU grouped reductions: the partial sums combined across the workgroup
  stage_loads    GPU workgroup tiles: shared loads staged through workgroup memory (codegen/staging.py)
  linearize      the ops ordered into nested loops (codegen/linearize.py)
  program        the Program: name, FLOP and memory counts, launch grid
A kernel that takes the tensor cores (Opt TC) is lowered by codegen/tensor_cores.py after `optimize` instead.
DEBUG=5 prints each pass's name, the number of uops after it and its time, for every kernel lowered.

Optimizations are a list of actions (`Opt`, codegen/opts.py: upcast an output axis, unroll a reduction loop, swap output
loops, run a reduction in blocks, GPU workgroup sizes); `heuristic_opts` (codegen/heuristics.py) chooses them by
default, BEAM search (tinyweb/search.py) by timing.
"""
from __future__ import annotations
import functools, itertools, time
from dataclasses import dataclass, field
from typing import Callable, Optional
from tinyweb.helpers import prod, DEBUG, NOOPT, deep_recursion
from tinyweb.uop import UOp, Ops, ELEMENTWISE, graph_rewrite
from tinyweb.codegen.symbolic import symbolic
from tinyweb.codegen.renderer import Renderer
from tinyweb.codegen.program import Program
from tinyweb.codegen.lowering import INDEX_MAX, TRUE, Lowerer, at, ravel, unravel, tile_index, lowering, reduce_identity, \
  wrap_group_reduces, launch_grid, index_dtype
from tinyweb.codegen.opts import Opt, OptError, AppliedOpts, apply_opts
from tinyweb.codegen.heuristics import heuristic_opts, max_group
from tinyweb.codegen.staging import stage_loads
from tinyweb.codegen.linearize import linearize
from tinyweb.codegen.tensor_cores import lower_tc

class LoopLimitError(RuntimeError):
  """The kernel would run more loop iterations per thread than the target allows (lavapipe)."""

def noopt_opts(ast: UOp, renderer) -> list[Opt]:
  """NOOPT=1: no optimization, except a grouped reduction where the target cannot run the kernel without one (lavapipe's
  loop limit). Also the reference that BEAM search checks every candidate against."""
  try: lower(ast, renderer, [])
  except LoopLimitError: return [Opt("GROUP", 0, max_group(renderer))]
  return []

@dataclass
class Kernel:
  """One kernel being lowered: what the passes read and what each adds."""
  ast: UOp
  renderer: Renderer
  opts: Optional[list[Opt]]
  ao: Optional[AppliedOpts] = None                  # optimize: the actions' effect
  lw: Optional[Lowerer] = None                      # loops: the loop ranges and the reductions' lowering state
  out_ranges: list = field(default_factory=list)    # loops: each output axis's index (None: size 1); threads: in gid/lid
  loops: list[UOp] = field(default_factory=list)    # loops: the CPU's output loops, outermost first
  parallel: Optional[UOp] = None                    # loops: the outermost, which a runtime may split across cores
  block_loops: list[UOp] = field(default_factory=list)   # loops: Opt BLOCK's loops over blocks of a reduction
  threads: int = 0                                  # threads: GPU threads (workgroups where gid is a workgroup index)
  lids: list[UOp] = field(default_factory=list)     # threads: a tiled kernel's thread index in the workgroup, per tile axis
  sink: Optional[UOp] = None                        # stores .. stage_loads: SINK of the STOREs
  uops: list[UOp] = field(default_factory=list)     # linearize
  program: Optional[Program] = None                 # program
  @property
  def out_buf(self) -> UOp: return self.ast.src[0].src[0]
  @property
  def value(self) -> UOp: return self.ast.src[0].src[1]
  @property
  def gpu(self) -> bool: return self.renderer.has_threads
  @property
  def tile_threads(self) -> int: return prod(n for _, n in self.ao.tiles) if self.ao.tiles else 0   # threads per workgroup of a tiled kernel

def optimize(k: Kernel):
  if k.opts is None: k.opts = noopt_opts(k.ast, k.renderer) if NOOPT else heuristic_opts(k.value, k.renderer, k.out_buf)
  k.ao = apply_opts(k.value, k.renderer, k.opts, k.out_buf)

def loops(k: Kernel):
  ao = k.ao
  k.lw = lw = Lowerer(ao.group, ao.unrolls, ao.blocks, index_dtype(k.value))
  shape, upcasts = k.value.shape, ao.upcasts
  out_ranges = [lw.new_range(n // upcasts.get(i, 1)) if n // upcasts.get(i, 1) != 1 else None for i, n in enumerate(shape)]
  loops = [out_ranges[i] for i in ao.order if out_ranges[i] is not None]   # outermost first
  for a, n in ao.splits.items():   # the loop over blocks outermost, the loop within a block where axis a's loop was
    blocks, within = lw.new_range(out_ranges[a].src[0].arg // n), lw.new_range(n)
    loops = [blocks] + [within if r is out_ranges[a] else r for r in loops]
    out_ranges[a] = blocks * n + within
  k.parallel = loops[0] if loops and loops[0].src[0].arg <= INDEX_MAX else None   # (the runtimes split it in C ints)
  k.block_loops = [r for _, r in lw.blocks.values()]
  k.loops = loops[:1] + k.block_loops + loops[1:]   # inside the outermost loop: the cores' outputs stay apart
  k.out_ranges = out_ranges

def threads(k: Kernel):
  ao, out_ranges, idx = k.ao, k.out_ranges, k.lw.idx
  if k.gpu and ao.tiles:   # gid is the workgroup index; each tiled axis adds the thread's index in the workgroup along it
    tile = dict(ao.tiles)
    outer = [(i, out_ranges[i].src[0].arg // tile.get(i, 1)) for i in ao.order if out_ranges[i] is not None]
    k.threads = prod(n for _, n in outer)   # workgroups, as with grouped reductions
    gid = UOp(Ops.SPECIAL, idx, (UOp.const(idx, k.threads),), "gid")
    wg = dict(zip([i for i, _ in outer], unravel(gid, tuple(n for _, n in outer))))
    stride = prod(tile.values())
    for j, (a, n) in enumerate(ao.tiles):   # thread index in the workgroup = sum of lid_j * stride_j
      stride //= n
      k.lids.append(UOp(Ops.SPECIAL, idx, (UOp.const(idx, n), UOp.const(idx, stride)), f"lid{j}"))
    lid_of = {a: l for (a, _), l in zip(ao.tiles, k.lids)}
    k.out_ranges = [None if r is None else wg[i] * tile[i] + lid_of[i] if i in tile else wg[i] for i, r in enumerate(out_ranges)]
  elif k.gpu:   # each output loop index is unraveled from one flat thread index
    k.threads = prod(r.src[0].arg for r in k.loops)
    gid = UOp(Ops.SPECIAL, idx, (UOp.const(idx, k.threads),), "gid")
    sub = dict(zip(k.loops, unravel(gid, tuple(r.src[0].arg for r in k.loops))))
    k.out_ranges = [sub[r] if r is not None else None for r in out_ranges]

def stores(k: Kernel):
  shape, upcasts, st = k.value.shape, k.ao.upcasts, []
  up_axes = list(upcasts)
  for offsets in itertools.product(*[range(upcasts[a]) for a in up_axes]):
    off = dict(zip(up_axes, offsets))
    idx = tuple(tile_index(r, upcasts.get(i, 1), off.get(i, 0), k.lw.idx) for i, r in enumerate(k.out_ranges))
    st.append(UOp(Ops.STORE, None, (k.out_buf, ravel(idx, shape), at(k.value, TRUE, idx))))
  k.sink = UOp(Ops.SINK, None, tuple(st))

def lower_indexes(k: Kernel):
  k.sink = graph_rewrite(k.sink, lowering, ctx=k.lw)
  if any(u.op is Ops.INDEX for u in k.sink.toposort()): raise NotImplementedError("lowering: an op without a lowering rule")

def simplify(k: Kernel): k.sink = graph_rewrite(k.sink, symbolic)

def group_reduces(k: Kernel):
  if k.lw.group_ranges: k.sink = wrap_group_reduces(k.sink, k.lw)

def staged_loads(k: Kernel):
  if k.ao.tiles: k.sink = stage_loads(k.sink, k.lw, k.lids, k.tile_threads)

def block_inits(sink: UOp, block_loops: list[UOp]) -> dict[UOp, UOp]:
  """Opt BLOCK: each stored REDUCE's accumulator starts from what the previous blocks left in the output (the identity
  in the first block)."""
  if not block_loops: return {}
  later = functools.reduce(lambda a, b: a.alu(Ops.OR, b), [UOp.const(r.dtype, 0) < r for r in block_loops])
  inits = {}
  for st in sink.src:
    buf, idx, red = st.src
    if red.op is not Ops.REDUCE or red in inits: raise OptError(f"BLOCK: a stored value is not a reduction of its own ({red.op})")
    # the load is not gated: it reads the allocated output (garbage in the first block, then unused), which lets clang
    # vectorize it; a gated load is a branch per element
    inits[red] = later.where(UOp(Ops.LOAD, buf.dtype, (buf, idx)), UOp.const(red.dtype, reduce_identity(red.arg, red.dtype)))
  return inits

def linearized(k: Kernel):
  k.uops = linearize(k.sink, k.loops if not k.gpu else [], k.lw.staging, block_inits(k.sink, k.block_loops),
                     k.renderer.fused_multiply_add)

def program(k: Kernel):
  ast, renderer, ao, uops, shape = k.ast, k.renderer, k.ao, k.uops, k.value.shape
  gl = sorted([u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL], key=lambda u: u.arg[0])
  has_reduce = any(u.op is Ops.DEFINE_ACC for u in uops)
  name = ("r_" if has_reduce else "E_") + ("_".join(str(n) for n in shape) if shape else "0")
  group, tile_threads = ao.group, k.tile_threads
  flops, mults = 0, [k.threads * (group or tile_threads or 1) if k.gpu else 1]
  loads: dict[int, int] = {}   # global's position -> element loads the kernel runs from it
  for u in uops:
    mult = mults[-1]
    if u.op is Ops.RANGE: mults.append(mult * u.src[0].arg)
    elif u.op is Ops.ENDRANGE: mults.pop()
    elif u.op in ELEMENTWISE and u.dtype is not None and u.dtype.is_float and u.op not in (Ops.CAST, Ops.BITCAST): flops += mult
    elif u.op is Ops.ACC_UPDATE: flops += mult * (len(u.src) - 1)   # a fused product: 2
    elif u.op is Ops.LOAD and u.src[0].op is Ops.DEFINE_GLOBAL: loads[u.src[0].arg[0]] = loads.get(u.src[0].arg[0], 0) + mult
  out = [k.out_buf.arg[0]]
  # bytes moved: the output whole, an input at most whole and at most what its loads read (a gather of 128 rows of a
  # 60000-row table moves 128 rows: counting the table made DEBUG's GB/s 1000x too high and split such small kernels
  # across cores as if they were big)
  mem = sum(g.dtype.itemsize * (g.arg[1] if g.arg[0] in out else min(g.arg[1], loads.get(g.arg[0], g.arg[1]))) for g in gl)
  if not k.gpu:
    k.program = Program(name, uops, gl, out, tuple(shape), flops, mem, parallel_range=k.parallel,
                        parallel=k.parallel.src[0].arg if k.parallel is not None else 0, opts=list(k.opts))
    return
  local = group or tile_threads or ao.local or max(1, min(renderer.local_size, renderer.max_local_size, k.threads))
  if (limit := renderer.max_loop_iterations) is not None:
    iters, depth = 0, [1]   # loop iterations one thread runs, in all
    for u in uops:
      if u.op is Ops.RANGE: depth.append(depth[-1] * u.src[0].arg); iters += depth[-1]
      elif u.op is Ops.ENDRANGE: depth.pop()
    if iters > limit:
      raise LoopLimitError(f"{renderer.device}: kernel {name} runs {iters} loop iterations per thread; this adapter stops a "
                           f"thread's loops after {limit} in all (lavapipe/llvmpipe), which would give wrong results")
  k.program = Program(name, uops, gl, out, tuple(shape), flops, mem, opts=list(k.opts), threads=k.threads, local_size=local,
                      grid=launch_grid(k.threads * (group or tile_threads or 1), local, renderer.max_groups), group=group,
                      tiled=bool(ao.tiles))

PASSES: list[tuple[str, Callable[[Kernel], None]]] = [
  ("optimize", optimize), ("loops", loops), ("threads", threads), ("stores", stores), ("lowering", lower_indexes),
  ("simplify", simplify), ("group_reduces", group_reduces), ("stage_loads", staged_loads), ("linearize", linearized),
  ("program", program)]

def current_uops(k: Kernel) -> list[UOp]:
  """The kernel's uops after the passes run so far: the AST, then the SINK of the stores, then the linear program."""
  return k.program.uops if k.program else k.uops if k.uops else k.sink.toposort() if k.sink is not None else k.ast.toposort()

@deep_recursion
def lower(ast: UOp, renderer: Renderer, opts: Optional[list[Opt]] = None,
          on_pass: Optional[Callable[[str, Kernel, float], None]] = None) -> Program:
  """ast: SINK(STORE(DEFINE_GLOBAL out, value)): the value is stored contiguously in its shape.
  opts: the optimization actions to apply (None: the heuristics choose, or with NOOPT=1 `noopt_opts`).
  With a GPU renderer (`renderer.has_threads`) the output loops become a thread index instead of loops.
  on_pass(name, kernel, seconds) is called after each pass (VIZ shows the kernel's state after each)."""
  assert ast.op is Ops.SINK and len(ast.src) == 1 and ast.src[0].op is Ops.STORE
  k = Kernel(ast, renderer, opts)
  for name, run_pass in PASSES:
    st = time.perf_counter()
    run_pass(k)
    if DEBUG >= 5: print(f"  lower pass {name:14s} {len(current_uops(k)):6d} uops {(time.perf_counter() - st) * 1e3:8.3f} ms")
    if on_pass is not None: on_pass(name, k, time.perf_counter() - st)
    if name == "optimize" and k.ao.tc: return lower_tc(ast, renderer, k.opts)
  return k.program
