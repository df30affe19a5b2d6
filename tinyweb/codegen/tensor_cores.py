"""Tensor cores: contraction kernels (matrix multiplies, batched or not, with an elementwise epilogue) lowered to
warp-level matrix instructions, on renderers that list input dtypes in `tensor_cores` (CUDA: mma.sync m16n8k16 with
float16 or bfloat16 inputs and float32 accumulators, sm_80 and newer). Opt("TC", 0, 0) asks for it (opts.py): the
heuristics choose it wherever it applies, NOOPT never, BEAM search may.

Which kernels (`contraction`): the stored value is elementwise ops and reshapes over one float32 REDUCE_AXIS(ADD) of a
product x*y, written CAST(float32, x*y) of 16-bit floats or x*y of their float32 casts, where x and y read buffers of one
16-bit float type through movement ops. In the reduction's source shape S the summed axis is K; x depends on an axis M
that y does not depend on, y on an axis N that x does not; every other axis is a batch axis. K and M must be multiples
of 16 and N of 8 (no partial tiles), and the kernel's indexes fit in int32: other kernels take the normal path.

Semantics: each product is exact in float32 and the products are summed in float32, as cuBLAS/PyTorch do. The plain
kernels round each product of 16-bit floats to the 16-bit type first (tensor_nn.py `dot`) and sum in another order, so
results may differ by that rounding: BEAM search holds TC candidates to the 16-bit type's tolerance (search.py).

The program: thread `gid` is lane gid % 32 of warp gid // 32 (a block is whole warps), and each warp computes TM x TN
tiles of 16 x 8 outputs (2 x 2 where the sizes allow: each A fragment then serves two B fragments and back) of one batch
index. Per step of 16 along K, each lane loads its fragment elements straight from global memory at the positions the
PTX ISA gives ("Matrix Fragments for mma.m16n8k16 with floating point type"), packs pairs of 16-bit patterns into 32-bit
registers (the lower-numbered element in the low half), and each tile's WMMA gives the lane's four elements of that
step's 16x8 product, which are added to four float32 accumulators. After the K loop the lane applies the epilogue to its
accumulators and stores them.
"""
from __future__ import annotations
from dataclasses import dataclass
from typing import Optional, Union
from tinyweb.dtype import DType, dtypes
from tinyweb.helpers import prod
from tinyweb.uop import UOp, UPat, Ops, PatternMatcher, ELEMENTWISE, MOVEMENT, graph_rewrite
from tinyweb.codegen.program import Program
from tinyweb.codegen.lowering import IDX, TRUE, Lowerer, at, ravel, unravel, lowering, load_axes, launch_grid, index_dtype
from tinyweb.codegen.linearize import linearize
from tinyweb.codegen.symbolic import symbolic

TM, TN, TK = 16, 8, 16   # one instruction: D (TM x TN, float32) = A (TM x TK) @ B (TK x TN) + C
WARP = 32
HALF = (dtypes.float16, dtypes.bfloat16)

@dataclass(frozen=True)
class Contraction:
  red: UOp        # the REDUCE_AXIS
  a: UOp          # the factor that gives A (its rows run along axis m), of the reduction's source shape
  b: UOp          # the factor that gives B (its columns run along axis n)
  k: int          # the summed axis
  m: int
  n: int
  dtype: DType    # the 16-bit input type

def _factor_dtype(u: UOp) -> Optional[DType]:
  """The 16-bit float type `u` reads if it is one buffer of it through movement ops and float32 casts, else None."""
  nodes = u.toposort()
  bufs = [x for x in nodes if x.op is Ops.DEFINE_GLOBAL]
  ok = len(bufs) == 1 and bufs[0].dtype in HALF and all(
    x.op in MOVEMENT or x.op is Ops.DEFINE_GLOBAL or (x.op is Ops.CAST and x.dtype == dtypes.float32 and x.src[0].dtype in HALF)
    for x in nodes)
  return bufs[0].dtype if ok else None

def contraction(value: UOp, renderer) -> Union[Contraction, str]:
  """How kernel value `value` maps onto the renderer's tensor cores, or a string saying why it does not."""
  if not (dts := renderer.tensor_cores): return f"{renderer.device} has no tensor cores"
  if index_dtype(value) is not IDX: return "its index range needs 64-bit index math, which the tensor-core lowering does not do"
  reds = [u for u in value.toposort() if u.op is Ops.REDUCE_AXIS]
  if len(reds) != 1: return f"a contraction has one reduction, this kernel {len(reds)}"
  red = reds[0]
  src = red.src[0]
  ks = [a for a in red.arg[1] if src.shape[a] != 1]
  if red.arg[0] is not Ops.ADD or red.dtype != dtypes.float32 or len(ks) != 1: return "the reduction is not a float32 sum over one axis"
  mul = src.src[0] if src.op is Ops.CAST and src.src[0].dtype in HALF else src   # CAST(float32, x*y) of 16-bit x and y
  if mul.op is not Ops.MUL: return "the summed value is not a product"
  x, y = mul.src
  if (dt := _factor_dtype(x)) is None or dt != _factor_dtype(y) or dt not in dts:
    return f"the factors are not reads of one 16-bit float type with tensor cores ({', '.join(d.name for d in dts)})"
  # the epilogue: only elementwise ops and reshapes lie between the stored value and the reduction, so output element i
  # (in flat order) is reduction element i: each lane's stores use its accumulators (see lower_tc)
  above = {red}
  for u in value.toposort():
    if u is not red and any(s in above for s in u.src):
      if u.op not in ELEMENTWISE and u.op is not Ops.RESHAPE: return f"{u.op} between the reduction and the output"
      above.add(u)
  k, shape = ks[0], src.shape
  if shape[k] % TK: return f"the summed axis ({shape[k]}) is not a multiple of {TK}"
  (dx,), (dy,) = load_axes(x), load_axes(y)   # the axes of `shape` that each factor's read index depends on
  for a, b, da, db in ((x, y, dx, dy), (y, x, dy, dx)):
    ms = [i for i in da - db if i != k and shape[i] % TM == 0]
    ns = [i for i in db - da if i != k and shape[i] % TN == 0]
    if ms and ns: return Contraction(red, a, b, k, ms[-1], ns[-1], dt)
  return f"no output axes M, N that only one factor each depends on, sized by multiples of {TM} and {TN} (shape {shape}, summed axis {k})"

# ---- the fragments (PTX ISA, mma.m16n8k16 with .f16/.bf16 inputs and .f32 accumulators): with g = lane >> 2 and
# t = lane % 4, register r of a lane holds elements (2r, 2r+1) of its fragment, at these (row, column) positions ----
def a_pos(g: UOp, t: UOp, r: int, h: int): return g + 8 * (r & 1), t * 2 + 8 * (r >> 1) + h   # A: 4 registers
def b_pos(g: UOp, t: UOp, r: int, h: int): return t * 2 + 8 * r + h, g                        # B: 2 registers
def c_pos(g: UOp, t: UOp, j: int): return g + 8 * (j >> 1), t * 2 + (j & 1)                   # C/D: 4 floats

def _bits(u: UOp) -> UOp:
  """A lowered factor (loads, float32 casts, and a pad's WHERE with 0) as its 16-bit pattern: the loads read the bits,
  the value stays in the input type (CUDA stores both 16-bit types as unsigned short)."""
  if u.op is Ops.LOAD: return u.replace(dtype=dtypes.uint16)
  if u.op is Ops.CAST: return _bits(u.src[0])
  if u.op is Ops.WHERE: return u.src[0].where(_bits(u.src[1]), _bits(u.src[2]))
  if u.op is Ops.CONST and u.arg == 0: return UOp.const(dtypes.uint16, 0)   # +0.0 in both types
  raise RuntimeError(f"tensor cores: a factor lowered to {u.op}, which is not a read of its buffer")

def _register(node: UOp, lo: tuple, hi: tuple) -> UOp:
  """A 32-bit register holding the 16-bit patterns of `node` at index `lo` (low half) and `hi` (high half)."""
  lo_b, hi_b = (_bits(graph_rewrite(at(node, TRUE, i), lowering, ctx=Lowerer())).cast(dtypes.uint32) for i in (lo, hi))
  return lo_b.alu(Ops.OR, hi_b.alu(Ops.SHL, UOp.const(dtypes.uint32, 16)))

# the normal lowering rules, except that the reduction is the lowering context: the accumulator of the element stored
epilogue = PatternMatcher([(UPat(Ops.INDEX, name="x", predicate=lambda x: x.src[0].op is Ops.REDUCE_AXIS), lambda ctx, x: ctx)]) + lowering

def lower_tc(ast: UOp, renderer, opts: list) -> Program:
  """The tensor-core program of kernel `ast` (apply_opts has checked that `contraction` applies)."""
  out_buf, value = ast.src[0].src
  c = contraction(value, renderer)
  shape = c.red.src[0].shape
  tiles_m, tiles_n = (2 if shape[c.m] % (2 * TM) == 0 else 1), (2 if shape[c.n] % (2 * TN) == 0 else 1)
  batch = [i for i, n in enumerate(shape) if n != 1 and i not in (c.k, c.m, c.n)]
  per_warp = [shape[i] for i in batch] + [shape[c.m] // (TM * tiles_m), shape[c.n] // (TN * tiles_n)]
  warps = prod(per_warp)
  threads = warps * WARP
  gid = UOp(Ops.SPECIAL, IDX, (UOp.const(IDX, threads),), "gid")
  lane = gid % WARP
  g, t = lane // 4, lane % 4
  *bidx, wm, wn = unravel(gid // WARP, tuple(per_warp))
  kr = UOp(Ops.RANGE, IDX, (UOp.const(IDX, shape[c.k] // TK),), 1) if shape[c.k] > TK else None   # the K loop, the only one
  k0 = kr * TK if kr is not None else UOp.const(IDX, 0)
  def index(m=None, n=None, k=None) -> tuple:   # an index into `shape`: the warp's batch index, m, n, k (None: 0)
    pos = {**dict(zip(batch, bidx)), c.m: m, c.n: n, c.k: k}
    return tuple(UOp.const(IDX, 0) if pos.get(i) is None else pos[i] for i in range(len(shape)))
  m0 = [(wm * tiles_m + i) * TM for i in range(tiles_m)]
  n0 = [(wn * tiles_n + j) * TN for j in range(tiles_n)]
  def a_reg(i, r): return _register(c.a, *[index(m=m0[i] + row, k=k0 + col) for row, col in (a_pos(g, t, r, h) for h in (0, 1))])
  def b_reg(j, r): return _register(c.b, *[index(n=n0[j] + col, k=k0 + row) for row, col in (b_pos(g, t, r, h) for h in (0, 1))])
  A = [[a_reg(i, r) for r in range(4)] for i in range(tiles_m)]
  B = [[b_reg(j, r) for r in range(2)] for j in range(tiles_n)]
  # each output element of the lane: the epilogue at it, with the reduction read as the element's accumulator (a sum over
  # the K loop of that element of the tile's WMMA)
  stores = []
  for i in range(tiles_m):
    for j in range(tiles_n):
      for e in range(4):
        mma = UOp(Ops.WMMA, dtypes.float32, (*A[i], *B[j]), (c.dtype, e))
        acc = UOp(Ops.REDUCE, dtypes.float32, (mma, kr), Ops.ADD) if kr is not None else mma
        row, col = c_pos(g, t, e)
        flat = ravel(index(m=m0[i] + row, n=n0[j] + col), c.red.shape)
        st = UOp(Ops.STORE, None, (out_buf, flat, at(value, TRUE, unravel(flat, value.shape))))
        stores.append(graph_rewrite(st, epilogue, ctx=acc))
  sink = graph_rewrite(UOp(Ops.SINK, None, tuple(stores)), symbolic)
  uops = linearize(sink, [])
  gl = sorted([u for u in ast.toposort() if u.op is Ops.DEFINE_GLOBAL], key=lambda u: u.arg[0])
  local = WARP * max(d for d in (4, 2, 1) if warps % d == 0)   # whole warps per block: no thread of a warp returns early
  name = "tc_" + "_".join(str(n) for n in value.shape)
  return Program(name, uops, gl, [out_buf.arg[0]], tuple(value.shape), 2 * prod(n for n in shape if n != 1),
                 sum(u.arg[1] * u.dtype.itemsize for u in gl), opts=list(opts), threads=threads, local_size=local,
                 grid=launch_grid(threads, local, renderer.max_groups))
