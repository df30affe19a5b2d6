"""CUDA C for NVIDIA GPUs (compiled by NVRTC, see backends/cuda.py): the C-style renderer plus CUDA's kernel syntax,
thread indices and __shared__-memory workgroup reductions.

Semantics are the CPU device's (ClangRenderer), dtype for dtype:
- every dtype is supported; float16 and bfloat16 are stored as their 16-bit patterns, computed in float and rounded
  after every op. The conversions need no header (the pip NVRTC ships no cuda_fp16.h / cuda_bf16.h): float16 uses the
  PTX `cvt` instructions, bfloat16 the same bit arithmetic as the CPU device. NaN keeps the CPU's bit patterns.
- float max/min propagate NaN, integer x/0 and x%0 give 0, INT_MIN/-1 wraps (CStyleRenderer).
- float -> int casts go through 64 bits and wrap like the CPU device; where x86-64 has no answer (NaN, inf, beyond the
  64-bit range) the result is the CPU's too (INT64_MIN, and all ones for uint64), not the GPU's saturation.
- no fused multiply-add (NVRTC -fmad=false, like clang's -ffp-contract=off) except where the CPU device fuses too: a
  float32 sum of products updates its accumulator with fmaf (linearize.fused_products); IEEE division and square root.
One exception, on purpose: matrix multiplies of float16/bfloat16 run on the tensor cores where they fit (sm_80+, see
codegen/tensor_cores.py), which multiply exactly and sum in float32 like cuBLAS/PyTorch, where the CPU device rounds each
product to the 16-bit type first. NOOPT=1 keeps the CPU device's semantics.
"""
from __future__ import annotations
from tinyweb.dtype import DType, dtypes
from tinyweb.uop import UOp
from tinyweb.codegen.cstyle import CStyleRenderer
from tinyweb.codegen.program import Program

# 16-bit floats: (bits -> float, float -> bits) helpers of the prelude
HALF = {dtypes.float16: ("tw_f16_to_f32", "tw_f32_to_f16"), dtypes.bfloat16: ("tw_bf16_to_f32", "tw_f32_to_bf16")}

class CUDARenderer(CStyleRenderer):
  device = "CUDA"
  has_threads = True
  fused_multiply_add = True   # fmaf (NVRTC runs with -fmad=false: only these fuse)
  def render_fma(self, a: str, b: str, c: str) -> str: return f"fmaf({a}, {b}, {c})"
  workgroup_tiles = True   # shared-memory tiles for matmul-like kernels (heuristics.choose_tiles)
  local_size = 128        # threads per block (grouped reductions use up to 256)
  max_local_size = 1024   # the runtime passes the GPU's limit
  local_id = "threadIdx.x"   # the thread's index in its block (grouped reductions: thread 0 stores)
  max_groups = 65535      # blocks per grid dimension: gridDim.y/z's limit (x allows more; the lowering uses one limit)
  buffer_qualifier = " __restrict__"
  infinity, nan = "__int_as_float(0x7f800000)", "__int_as_float(0x7fc00000)"   # no math.h: no INFINITY/NAN macros
  reg_types = {dtypes.bool: "bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
               dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
               dtypes.uint64: "unsigned long long", dtypes.float16: "float", dtypes.bfloat16: "float", dtypes.float32: "float",
               dtypes.float64: "double"}
  mem_types = {dtypes.float16: "unsigned short", dtypes.bfloat16: "unsigned short"}
  prelude = r"""__device__ __forceinline__ float tw_f16_to_f32(unsigned short h) {
  if ((h & 0x7fffu) > 0x7c00u) return __uint_as_float(((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13));
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ unsigned short tw_f32_to_f16(float f) {
  unsigned int u = __float_as_uint(f);
  if (f != f) return (unsigned short)(((u >> 16) & 0x8000u) | 0x7e00u | ((u >> 13) & 0x3ffu));   // NaN: as x86's F16C
  unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float tw_bf16_to_f32(unsigned short b) { return __uint_as_float(((unsigned int)b) << 16); }
__device__ __forceinline__ unsigned short tw_f32_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if (f != f) return 0x7fc0;
  return (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ long long tw_f2i64(double x) {   // x86-64 cvttsd2si: INT64_MIN where there is no answer
  return (x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? (long long)x : (-9223372036854775807ll - 1);
}
__device__ __forceinline__ unsigned long long tw_f2u64(double x) {   // x86-64 (AVX-512) vcvttsd2usi: all ones
  return (x > -1.0 && x < 18446744073709551616.0) ? (unsigned long long)x : ~0ull;
}
"""

  def round_result(self, expr: str, dt: DType) -> str:
    if dt in HALF: return f"{HALF[dt][0]}({HALF[dt][1]}({expr}))"
    return expr
  def float_to_int(self, x: str, dt: DType) -> str: return f"tw_f2{'u' if dt == dtypes.uint64 else 'i'}64({x})"
  def render_bitcast(self, x: str, dt: DType, sdt: DType) -> str:
    if sdt in HALF: x = f"{HALF[sdt][1]}({x})"
    if dt in HALF: return f"{HALF[dt][0]}(__builtin_bit_cast(unsigned short, {x}))"
    return f"__builtin_bit_cast({self.reg(dt)}, {x})"
  def render_load(self, buf: str, idx: str, dt: DType) -> str:
    return f"{HALF[dt][0]}({buf}[{idx}])" if dt in HALF else f"{buf}[{idx}]"
  def render_store(self, buf: str, idx: str, val: str, dt: DType) -> str:
    return f"{buf}[{idx}] = {f'{HALF[dt][1]}({val})' if dt in HALF else val};"

  def render_special(self, u: UOp, name: str, prog: Program, srcs: list[str]) -> list[str]:
    if isinstance(u.arg, tuple): return self.render_group_reduce(u, name, srcs[0])   # ("group", op, G), in __shared__ memory
    x, y, _ = prog.grid
    block = "blockIdx.x" + (f" + blockIdx.y*{x}u" if prog.grid[1] > 1 or prog.grid[2] > 1 else "") + \
            (f" + blockIdx.z*{x * y}u" if prog.grid[2] > 1 else "")
    # grouped reductions and tiles: gid is the block index (the early return is uniform in the block). A 64-bit gid is
    # computed in 64 bits (the unsigned 32-bit product would wrap past 2^32 threads)
    t = self.reg(u.dtype)
    if u.dtype.itemsize > 4: block = f"({t})({block})"
    flat = f"({block})" if prog.gid_is_workgroup else f"({block})*{prog.local_size}u + threadIdx.x"
    return [f"const {t} {name} = ({t})({flat});", f"if ({name} >= {prog.threads}) return;"]

  vector_width, vector_type = 4, "float4"   # float4: 16-byte loads and stores (buffers come from cuMemAlloc: 256-byte aligned)
  def render_vector_load(self, buf: str, idx: str) -> str: return f"*((const float4*)({buf}+{idx}))"
  def render_vector_store(self, buf: str, idx: str, vals: list[str]) -> str:
    return f"*((float4*)({buf}+{idx})) = make_float4({', '.join(vals)});"
  # mma.sync m16n8k16 (sm_80+; backends/cuda.py empties this on older GPUs), with C = 0: the lowering adds the result
  # to its float32 accumulators
  tensor_cores = (dtypes.float16, dtypes.bfloat16)
  def render_wmma(self, name: str, dt: DType, regs: list[str]) -> list[str]:
    t = {dtypes.float16: "f16", dtypes.bfloat16: "bf16"}[dt]
    ins = ", ".join(f'"r"({x})' for x in regs)
    return [f"float {name}[4];",
            f'asm("mma.sync.aligned.m16n8k16.row.col.f32.{t}.{t}.f32 {{%0, %1, %2, %3}}, {{%4, %5, %6, %7}}, {{%8, %9}}, '
            f'{{%10, %10, %10, %10}};" : "=f"({name}[0]), "=f"({name}[1]), "=f"({name}[2]), "=f"({name}[3]) : {ins}, "f"(0.0f));']

  barrier = "__syncthreads();"
  def render_local(self, name: str, dt: DType, n: int) -> str: return f"__shared__ {self.reg(dt)} {name}[{n}];"
  def render_kernel(self, name: str, params: list[str], body: list[str], prog: Program) -> str:
    return (self.prelude + f'extern "C" __global__ void __launch_bounds__({prog.local_size or 1}) {name}({", ".join(params)}) {{\n'
            + "".join(f"  {d}\n" for d in self._local_decls) + "\n".join(body) + "\n}\n")
