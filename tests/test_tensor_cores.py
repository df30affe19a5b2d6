"""Tensor cores (tinyweb/codegen/tensor_cores.py) without an NVIDIA GPU. The lowered CUDA program of a matrix multiply is
run here by a warp emulator: every warp of every block runs the program's uops for its 32 lanes in lockstep, and a WMMA
gathers the lanes' registers into A (16x16) and B (16x8) by the PTX ISA's fragment layout (written out below from the
spec, independently of the library's), multiplies them, and hands each lane its elements of the product. The outputs
are compared with numpy's float32 matmul of the same 16-bit inputs, so a wrong fragment position, tile, K step, batch
index or warp/lane numbering fails. The same kernels' CUDA source is NVRTC-compiled for sm_80 and sm_90."""
import numpy as np
import pytest
from tinyweb import Tensor, dtypes, Context
from tinyweb.uop import Ops
from tinyweb.schedule import create_schedule
from tinyweb.codegen.opts import Opt, OptError
from tinyweb.codegen.heuristics import heuristic_opts
from tinyweb.codegen.lower import lower
from tinyweb.codegen.cuda import CUDARenderer
from tinyweb.codegen.tensor_cores import contraction
from tinyweb.backends.python import alu, cast   # the PYTHON device's scalar/list ALU semantics (C's, on ints and floats)
from helpers import expect_unsupported

# ---- PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type" (.f16/.bf16 A and B, .f32 C/D):
# element i of a lane's fragment is at (row, col); groupID = laneid >> 2, threadID_in_group = laneid % 4 ----
def a_rowcol(lane, i):
  group, tig = lane >> 2, lane % 4
  row = group if (i < 2 or 4 <= i < 6) else group + 8
  col = tig * 2 + (i & 1) if i < 4 else tig * 2 + (i & 1) + 8
  return row, col
def b_rowcol(lane, i):
  group, tig = lane >> 2, lane % 4
  return (tig * 2 + (i & 1) if i < 2 else tig * 2 + (i & 1) + 8), group
def c_rowcol(lane, i):
  group, tig = lane >> 2, lane % 4
  return (group if i < 2 else group + 8), tig * 2 + (i & 1)
# A: four 32-bit registers, B: two, each holding two consecutive elements (the lower-numbered one in the low 16 bits)

def half_value(bits: int, dt) -> float:
  if dt == dtypes.float16: return float(np.array([bits], np.uint16).view(np.float16)[0])
  return float(np.array([bits << 16], np.uint32).view(np.float32)[0])

def mma(dt, a_regs: list[list[int]], b_regs: list[list[int]]) -> np.ndarray:
  """D = A @ B of one warp: the registers are per register, per lane; returns D (16x8, float32). Products are exact and
  summed in float64, then rounded: float32 accumulation or better, as the hardware does."""
  A, B = np.full((16, 16), np.nan), np.full((16, 8), np.nan)
  for lane in range(32):
    for i in range(8): A[a_rowcol(lane, i)] = half_value((a_regs[i // 2][lane] >> (16 * (i % 2))) & 0xffff, dt)
    for i in range(4): B[b_rowcol(lane, i)] = half_value((b_regs[i // 2][lane] >> (16 * (i % 2))) & 0xffff, dt)
  assert not np.isnan(A).any() and not np.isnan(B).any(), "the fragments do not cover A and B"
  return (A @ B).astype(np.float32)

# memory: float16 as np.float16, bfloat16 as its bits (np.uint16), everything else as its numpy type
NP = {dtypes.float16: np.float16, dtypes.bfloat16: np.uint16, dtypes.float32: np.float32}

def load(mem: np.ndarray, dt, idx: int):
  if dt == dtypes.uint16 and mem.dtype.itemsize == 2: return int(mem.view(np.uint16)[idx])   # the 16-bit pattern
  if mem.dtype == np.uint16: return half_value(int(mem[idx]), dtypes.bfloat16)
  return float(mem[idx])

def store(mem: np.ndarray, dt, idx: int, v: float):
  if dt == dtypes.bfloat16:   # round to nearest even on the float32 bits
    b = int(np.array([v], np.float32).view(np.uint32)[0])
    mem[idx] = (b + 0x7fff + ((b >> 16) & 1)) >> 16
  else: mem[idx] = v

def run_warp(prog, mem: dict, gids: list[int], written: np.ndarray):
  env = {}
  def val(u): return u.arg if u.op is Ops.CONST else env[u]
  def lanes(v): return v if type(v) is list else [v] * 32
  loops, pc = [], 0
  while pc < len(prog.uops):
    u = prog.uops[pc]
    op = u.op
    if op is Ops.SPECIAL:
      assert u.arg == "gid", u.arg
      env[u] = list(gids)
    elif op is Ops.RANGE: env[u], _ = 0, loops.append(pc)
    elif op is Ops.ENDRANGE:
      env[u.src[0]] += 1
      if env[u.src[0]] < u.src[0].src[0].arg:
        pc = loops[-1] + 1
        continue
      loops.pop()
    elif op is Ops.DEFINE_ACC: env[u.src[0]] = [0.0] * 32
    elif op is Ops.ACC_UPDATE: env[u.src[0]] = alu(Ops.ADD, u.dtype)(env[u.src[0]], val(u.src[1]))
    elif op is Ops.WMMA:
      regs = [lanes(val(s)) for s in u.src]
      d = mma(u.arg[0], regs[:4], regs[4:])
      env[u] = [float(d[c_rowcol(lane, u.arg[1])]) for lane in range(32)]
    elif op is Ops.LOAD:
      buf, idx, gate = u.src[0], lanes(val(u.src[1])), lanes(val(u.src[2]) if len(u.src) > 2 else True)
      env[u] = [load(mem[buf.arg[0]], u.dtype, i) if g else 0 for i, g in zip(idx, gate)]
    elif op is Ops.STORE:
      buf = u.src[0].arg[0]
      for i, v in zip(lanes(val(u.src[1])), lanes(val(u.src[2]))):
        store(mem[buf], u.src[0].dtype, i, v)
        written[i] += 1
    elif op is Ops.CAST: env[u] = cast(u.dtype, u.src[0].dtype)(val(u.src[0]))
    elif op not in (Ops.CONST, Ops.DEFINE_GLOBAL, Ops.REDUCE, Ops.SINK): env[u] = alu(op, u.dtype)(*map(val, u.src))
    pc += 1

def emulate(prog, mem: dict):
  """Launch `prog` as CUDA does: prog.grid blocks of prog.local_size threads, thread gid = block * local_size + threadIdx.x,
  warps of 32 consecutive threads of a block; a warp's threads all run (mma.sync needs the whole warp) or all return."""
  x, y, z = prog.grid
  out = mem[prog.outputs[0]]
  written = np.zeros(out.size, np.int64)
  for block in range(x * y * z):
    for w in range(0, prog.local_size, 32):
      gids = [block * prog.local_size + w + lane for lane in range(32)]
      if gids[0] >= prog.threads: continue
      assert gids[-1] < prog.threads, "a warp with threads that return early"
      run_warp(prog, mem, gids, written)
  assert (written == 1).all(), "each output element is stored once"

def kernel(out: Tensor):
  """(ast, input buffers as numpy arrays by argument position) of the last kernel computing `out`."""
  items, _, _ = create_schedule([out.uop])
  it = [it for it in items if it.kind == "kernel"][-1]
  mem = {i: np.frombuffer(bytes(b.as_memoryview()), NP[b.dtype]).copy() for i, b in enumerate(it.bufs) if i > 0}
  return it.ast, mem

def run_tc(out: Tensor) -> np.ndarray:
  """`out` computed by its tensor-core program in the emulator, as float64."""
  r = CUDARenderer()
  ast, mem = kernel(out)
  prog = lower(ast, r)
  assert prog.opts == [Opt("TC", 0, 0)] and any(u.op is Ops.WMMA for u in prog.uops)
  dt = ast.src[0].src[0].dtype
  mem[0] = np.full(ast.src[0].src[0].arg[1], np.nan, NP[dt]) if dt != dtypes.bfloat16 else np.full(ast.src[0].src[0].arg[1], 0x7fc0, np.uint16)
  emulate(prog, mem)
  res = mem[0] if dt != dtypes.bfloat16 else mem[0].astype(np.uint32) << 16
  return (res.view(np.float32) if dt == dtypes.bfloat16 else res).astype(np.float64).reshape(out.shape)

def half_inputs(shape, dt, seed, ints=False) -> np.ndarray:
  """float32 values exactly representable in `dt`: small integers, or random floats rounded down to it."""
  rng = np.random.default_rng(seed)
  if ints: return rng.integers(-4, 5, size=shape).astype(np.float32)
  v = rng.uniform(-2, 2, size=shape).astype(np.float32)
  return v.astype(np.float16).astype(np.float32) if dt == dtypes.float16 else (v.view(np.uint32) & 0xffff0000).view(np.float32)

def tw(v: np.ndarray, dt) -> Tensor: return Tensor(v, device="CPU").cast(dt).realize()

DTS = [dtypes.float16, dtypes.bfloat16]

@pytest.mark.parametrize("dt", DTS, ids=lambda d: d.name)
@pytest.mark.parametrize("m, k, n", [(16, 16, 8), (32, 48, 16), (48, 16, 8), (64, 32, 48)], ids=str)
def test_matmul_in_the_warp_emulator(dt, m, k, n):
  # integer inputs: every product and sum is exact in float32 and in the 16-bit output, so any misplaced element shows.
  # 16x16x8: one tile, no K loop; 32x48x16: one warp of 2x2 tiles, 3 K steps; 48x16x8: 3 warps of one tile, a block
  # each; 64x32x48: 6 warps of 2x2 tiles in 3 blocks of 2 warps
  a, b = half_inputs((m, k), dt, 0, ints=True), half_inputs((k, n), dt, 1, ints=True)
  np.testing.assert_array_equal(run_tc(tw(a, dt) @ tw(b, dt)), a @ b)

@pytest.mark.parametrize("dt", DTS, ids=lambda d: d.name)
def test_batched_and_transposed_in_the_warp_emulator(dt):
  a, b = half_inputs((2, 32, 64), dt, 2, ints=True), half_inputs((2, 64, 32), dt, 3, ints=True)
  np.testing.assert_array_equal(run_tc(tw(a, dt) @ tw(b, dt)), a @ b)
  # both factors read transposed, and a batch of 3 against one shared matrix
  at, bt = half_inputs((48, 32), dt, 4, ints=True), half_inputs((16, 48), dt, 5, ints=True)
  np.testing.assert_array_equal(run_tc(tw(at, dt).T @ tw(bt, dt).T), at.T @ bt.T)
  x, w = half_inputs((3, 16, 32), dt, 6, ints=True), half_inputs((32, 8), dt, 7, ints=True)
  np.testing.assert_array_equal(run_tc(tw(x, dt) @ tw(w, dt)), x @ w)

def test_padded_factor_and_fused_epilogue_in_the_warp_emulator():
  dt = dtypes.float16
  a, b, bias = half_inputs((32, 40), dt, 8, ints=True), half_inputs((48, 16), dt, 9, ints=True), half_inputs((16,), dt, 10, ints=True)
  # K padded from 40 to 48 with zeros (the padded reads are gated), then bias and relu on the accumulators
  got = run_tc((tw(a, dt).pad(((0, 0), (0, 8))) @ tw(b, dt) + tw(bias, dt)).relu())
  np.testing.assert_array_equal(got, np.maximum(np.pad(a, ((0, 0), (0, 8))) @ b + bias, 0))

@pytest.mark.parametrize("dt", DTS, ids=lambda d: d.name)
def test_products_are_exact_and_summed_in_float32(dt):
  # random 16-bit inputs, float32 outputs: the tensor cores give numpy's float32 matmul of the 16-bit values (exact
  # products), where the plain kernels (CPU device) round each product to the 16-bit type, a documented difference
  a, b = half_inputs((32, 64), dt, 11), half_inputs((64, 16), dt, 12)
  ta, tb = tw(a, dt), tw(b, dt)
  want = a @ b
  np.testing.assert_allclose(run_tc(ta.dot(tb, dtype=dtypes.float32)), want, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(run_tc(ta.float() @ tb.float()), want, rtol=1e-5, atol=1e-5)
  plain = ta.dot(tb, dtype=dtypes.float32).numpy()
  assert np.abs(plain - want).max() > 1e-3 * (1 if dt == dtypes.float16 else 10)

@pytest.mark.parametrize("dt", DTS, ids=lambda d: d.name)
def test_half_matmuls_match_numpy(device, dt):
  # on every device (plain kernels round each product to the 16-bit type: within the tolerance); on an NVIDIA GPU these
  # run on the tensor cores, and without one the suite's compile check (cuda_check.py) NVRTC-compiles their TC kernels
  a, b, x = half_inputs((2, 32, 64), dt, 13), half_inputs((64, 48), dt, 14), half_inputs((48, 16), dt, 15)
  with expect_unsupported(device, dt):
    ta, tb, tx = (Tensor(v, device=device).cast(dt).realize() for v in (a, b, x))
    for got, want in [((ta @ tb).float(), a @ b), (tx.T.dot(tb.T, dtype=dtypes.float32), x.T @ b.T)]:
      np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=(1e-2 if dt == dtypes.float16 else 3e-2) * np.abs(want).max())

def test_beam_tries_tensor_cores_and_accepts_their_rounding():
  # BEAM checks each candidate against the NOOPT kernel, whose products are rounded to the 16-bit type: a correct TC
  # result (emulated) passes with the input type's tolerance
  from tinyweb.search import actions, tolerance, mismatches, RTOL
  r, dt = CUDARenderer(), dtypes.bfloat16
  a, b = half_inputs((32, 512), dt, 16), half_inputs((512, 16), dt, 17)
  out = tw(a, dt).dot(tw(b, dt), dtype=dtypes.float32)
  value = kernel(out)[0].src[0].src[1]
  assert Opt("TC", 0, 0) in actions(value, r)
  assert tolerance(value, r, [Opt("UPCAST", 0, 2)], dtypes.float32) is None
  rtol = tolerance(value, r, [Opt("TC", 0, 0)], dtypes.float32)
  assert rtol == RTOL[dt]
  tc, plain = run_tc(out).astype(np.float32), out.numpy()   # (the CPU device: products rounded, like NOOPT)
  assert mismatches(tc.tobytes(), plain.tobytes(), dtypes.float32, rtol) == 0

def test_cuda_source_compiles_for_sm80_and_sm90():
  try:
    from tinyweb.backends.cuda import NVRTCCompiler
    compilers = [NVRTCCompiler(a) for a in ("sm_80", "sm_90")]
  except (RuntimeError, ImportError) as e: pytest.skip(f"NVRTC unavailable: {e}")
  r = CUDARenderer()
  for dt in DTS:
    for out in [tw(np.ones((2, 32, 64)), dt) @ tw(np.ones((64, 16)), dt), tw(np.ones((16, 32)), dt).T @ tw(np.ones((16, 8)), dt)]:
      src = r.render(lower(kernel(out)[0], r))
      assert f"mma.sync.aligned.m16n8k16.row.col.f32.{'f16' if dt == dtypes.float16 else 'bf16'}" in src
      for c in compilers: c.compile(src)   # raises with NVRTC's log on invalid CUDA

@pytest.mark.parametrize("shape_a, shape_b, dt, why", [
  ((16, 16), (16, 12), dtypes.float16, "multiples"), ((20, 16), (16, 8), dtypes.float16, "multiples"),
  ((16, 24), (24, 8), dtypes.float16, "summed axis"), ((16, 16), (16, 8), dtypes.float32, "16-bit"),
], ids=["n12", "m20", "k24", "float32"])
def test_ineligible_kernels_take_the_normal_path(shape_a, shape_b, dt, why):
  r = CUDARenderer()
  ast, _ = kernel(tw(np.ones(shape_a), dt) @ tw(np.ones(shape_b), dt))
  value = ast.src[0].src[1]
  assert why in contraction(value, r) and Opt("TC", 0, 0) not in heuristic_opts(value, r)
  assert not any(u.op is Ops.WMMA for u in lower(ast, r).uops)
  with pytest.raises(OptError, match=why): lower(ast, r, [Opt("TC", 0, 0)])

def test_noopt_and_other_targets_do_not_use_tensor_cores():
  from tinyweb.codegen.clang import ClangRenderer
  ast, _ = kernel(tw(np.ones((32, 32)), dtypes.float16) @ tw(np.ones((32, 16)), dtypes.float16))
  with Context(NOOPT=1): prog = lower(ast, CUDARenderer())
  assert prog.opts == [] and not any(u.op is Ops.WMMA for u in prog.uops)
  with pytest.raises(OptError, match="no tensor cores"): lower(ast, ClangRenderer(), [Opt("TC", 0, 0)])
  with pytest.raises(OptError, match="combines with no other action"): lower(ast, CUDARenderer(), [Opt("TC", 0, 0), Opt("UPCAST", 0, 2)])
