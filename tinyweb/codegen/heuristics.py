"""The hand-written choice of optimization actions (`heuristic_opts`), used when BEAM search is off: register tiling,
GPU grouped reductions and workgroup tiles, tensor cores, and the CPU's blocked matmul."""
from __future__ import annotations
import os
from typing import Optional
from tinyweb.dtype import dtypes
from tinyweb.helpers import prod, largest_divisor, TILES
from tinyweb.uop import UOp
from tinyweb.codegen.lowering import load_axes, read_strides, loop_reduces
from tinyweb.codegen.opts import Opt, OptError, apply_opts, reduce_loops
from tinyweb.codegen.tensor_cores import contraction

def choose_upcasts(value: UOp, lanes: int = 0, registers: int = 32) -> dict[int, int]:
  """Register tiling for kernels with a reduction: compute several neighbouring outputs per loop iteration, each with its
  own accumulator, so loads are reused across them and the C compiler can vectorize along the last axis (its stores are
  contiguous). `lanes`, `registers`: the renderer's float32 vectors (codegen/vectors.py) and how many registers hold
  them. Returns {output axis: how many outputs along it}."""
  if not loop_reduces(value): return {}
  shape, out = value.shape, {}
  axes = [i for i, n in enumerate(shape) if n > 1]
  if not axes: return {}
  last = axes[-1]
  strides = read_strides(value, last) if lanes and value.dtype == dtypes.float32 else None
  # vectors (CPU), for a matmul-like kernel: some reads are shared by a row of outputs, the others move along it. Where
  # they move contiguously, preferably 4 vectors along the last axis (else what divides it), where some are gathered (a
  # matmul with a transposed operand) one; and as many rows as keep the accumulators within all but 4 of the vector
  # registers (more vectors along the row share the rows' loads and any per-row work, more rows share the vectors' loads)
  matmul_like = bool(strides) and 0 in strides and len(strides) > 1
  vectors = [v for v in ((4, 8, 7, 6, 5, 3, 2, 1) if strides == {0, 1} else (1,)) if matmul_like and shape[last] % (v * lanes) == 0]
  if vectors:
    # (a reduction over several loops (a conv's gradient) lowers its index math per copy: at most 64 copies, 4 vectors)
    most = registers - 4 if len(reduce_loops(value)) == 1 else 4
    # but 8 rows of 2 vectors where they divide: 15-35% faster than 4 x 4 on AVX-512 for matmuls of 128..2048 (a block
    # of B's rows, 256 x 32 floats, then stays in L1)
    v = 2 if most >= 16 and 2 in vectors and any(shape[i] % 8 == 0 for i in axes[:-1]) else vectors[0]
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

def fit_upcasts(value: UOp, ups: dict[int, int], most_reads: int) -> dict[int, int]:
  """`ups` shrunk until a loop step of a thread reads at most `most_reads` values (Renderer.max_upcast_reads; 0: as it
  is): the amounts along the other axes first, then the last axis's, each by its smallest prime factor (so that it
  still divides its axis)."""
  ups, reads = dict(ups), load_axes(value)
  while most_reads and ups and sum(prod(ups.get(a, 1) for a in axes) for axes in reads) > most_reads:
    a = min(ups)   # (the last axis has the largest index)
    n = ups[a]
    ups[a] = n // next(p for p in range(2, n + 1) if n % p == 0)
    if ups[a] == 1: del ups[a]
  return ups

GROUP_MIN = 1024     # GPU: a reduction over at least this many elements per output may be shared by a workgroup...
GROUP_MAX_OUTPUTS = 16384   # ...when there are fewer outputs than this (more: one thread per output tile fills the GPU)
GROUP_FEW_OUTPUTS = 64      # ...or this, where barriers are slow (not renderer.group_reductions: a CPU-emulated GPU)

def reduction_terms(value: UOp) -> int:
  """How many terms one output of the kernel sums: a top-level reduction's size times those of the reductions nested in
  it (loops inside its loop), the most of its reductions; 0 without one."""
  if not (reds := loop_reduces(value)): return 0
  nested = {v for u in reds for v in loop_reduces(u.src[0]) if v is not u}
  def size(u: UOp) -> int: return prod(u.src[0].shape[a] for a in u.arg[1])
  return max(size(u) * prod(size(v) for v in loop_reduces(u.src[0])) for u in reds if u not in nested)

WINDOW_TERMS = 32   # an output that sums at most this many terms over several axes sums a small window (a depthwise
                    # conv's 3 x 3 or 5 x 5, a stem conv's 3 x 3 x 3)

def upcast_budget(value: UOp, renderer) -> int:
  """The most values a thread's loop step may read (Renderer.max_upcast_reads; 0: no limit), a quarter of it for a kernel
  whose outputs sum small windows: SwiftShader spends the most time compiling those once unrolled (0.33 ms per WGSL line,
  EfficientNet-Lite0's depthwise convs 160-260 ms each), and register tiling barely speeds them up (Lite0 in headless
  Chromium, 2 busy cores: pipelines 2.85 -> 1.8-2.0 s, page open to first result 3.5 -> 2.7-3.1 s, per inference
  unchanged within the noise; YOLOv8n at 640 x 640 10.3 -> 7.8-9.5 s per inference)."""
  most = renderer.max_upcast_reads
  window = len(reduce_loops(value)) >= 2 and reduction_terms(value) <= WINDOW_TERMS
  return most // 4 if most and window else most

def group_size(value: UOp, renderer) -> int:
  """GPU targets: threads per workgroup that share each top-level reduction (0: one thread per output loops alone).
  Worth it when there are few outputs with big reductions (a sum, a norm's statistics): one thread per output would leave
  the GPU idle. It also keeps each thread's loops short: lavapipe (llvmpipe) silently stops a shader invocation's loops
  after 65535 iterations in all (see `max_loop_iterations`), so a reduction longer than that is always shared."""
  if (n := reduction_terms(value)) < GROUP_MIN: return 0
  limit = renderer.max_loop_iterations
  most = GROUP_MAX_OUTPUTS if renderer.group_reductions else GROUP_FEW_OUTPUTS
  if prod(value.shape) >= most and (limit is None or n <= limit // 2): return 0
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
  if not loop_reduces(value): return []
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
  if not isinstance(contraction(value, renderer), str): return [Opt("TC", 0, 0)]
  gpu = renderer.has_threads
  if gpu and (g := group_size(value, renderer)): return [Opt("GROUP", 0, g)]
  ups = fit_upcasts(value, choose_upcasts(value, renderer.vector_lanes, renderer.vector_registers), upcast_budget(value, renderer))
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
