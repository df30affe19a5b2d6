"""The CPU device's renderer: C for clang (backends/cpu.py compiles it to a shared library)."""
from __future__ import annotations
from tinyweb.dtype import DType, dtypes
from tinyweb.uop import Ops
from tinyweb.codegen.program import Program
from tinyweb.codegen.cstyle import CStyleRenderer

class ClangRenderer(CStyleRenderer):
  """C for clang. float16 is stored as __fp16 and bfloat16 as its 16-bit pattern; both compute in float and round
  after every op, which is what PyTorch's CPU kernels do. exp2 and log2 of float32 are the prelude's vectorizable
  tw_exp2f / tw_log2f (within 1 / 3 ulp of libm's), float64 uses libm."""
  device = "CPU"
  core_split = True
  index_type = "long long"
  vector_lanes, vector_type = 16, "tw_float16"   # AVX-512 registers (other CPUs split these vectors)
  infinity, nan = "__builtin_inff()", "__builtin_nanf(\"\")"
  reg_types = {dtypes.bool: "_Bool", dtypes.int8: "signed char", dtypes.uint8: "unsigned char", dtypes.int16: "short",
               dtypes.uint16: "unsigned short", dtypes.int32: "int", dtypes.uint32: "unsigned int", dtypes.int64: "long long",
               dtypes.uint64: "unsigned long long", dtypes.float16: "float", dtypes.bfloat16: "float", dtypes.float32: "float",
               dtypes.float64: "double"}
  mem_types = {dtypes.float16: "__fp16", dtypes.bfloat16: "unsigned short"}
  # guarded: BEAM search compiles many kernels' sources as one file (Compiler.batch_sources)
  prelude = """#include <math.h>
#ifndef TW_PRELUDE
#define TW_PRELUDE
typedef float tw_float16 __attribute__((ext_vector_type(16), aligned(4), may_alias));   /* loads anywhere: 4-byte aligned */
static inline float tw_bf16_to_f32(unsigned short x) { union { unsigned int u; float f; } c; c.u = ((unsigned int)x) << 16; return c.f; }
static inline unsigned short tw_f32_to_bf16(float f) {
  union { unsigned int u; float f; } c; c.f = f;
  if (f != f) return 0x7fc0;
  return (unsigned short)((c.u + 0x7fffu + ((c.u >> 16) & 1u)) >> 16);
}
static inline float tw_bf16_round(float f) { return tw_bf16_to_f32(tw_f32_to_bf16(f)); }
static inline tw_float16 tw_fma16(tw_float16 a, tw_float16 b, tw_float16 c) {   // a*b+c rounded once, as __builtin_fmaf
#pragma clang fp contract(fast)
  return a * b + c;   /* contracted to one fma here only: kernels are compiled with -ffp-contract=off */
}
// exp2 and log2 that clang vectorizes (libm's are calls, one element at a time: 5x slower). Every input, including
// NaN, +-inf, 0 and denormal results or inputs, gives libm's answer within 1 ulp (exp2) / 3 ulp (log2), checked on
// every 7th float32 both with and without fma. Their polynomials' steps are fused multiply-adds where the renderer
// defines TW_FMA (the CPU has fma instructions): fewer instructions, and about half as many results 1 ulp off.
#ifdef TW_FMA
#define TW_MAD(a, b, c) __builtin_fmaf(a, b, c)
#else
#define TW_MAD(a, b, c) ((a) * (b) + (c))
#endif
static inline float tw_exp2f(float x) {   // 2^x = 2^n * 2^f, n = rint(x), |f| <= 1/2, 2^f by its Taylor series
  float c = x < -150.0f ? -150.0f : (x > 128.0f ? 128.0f : x);
  float n = __builtin_rintf(c), f = c - n;
  float t = 1.5252733804059566110e-5f;
  t = TW_MAD(f, t, 1.5403530357498675584793e-4f); t = TW_MAD(f, t, 1.3333558430895209312439e-3f);
  t = TW_MAD(f, t, 9.6181295812129974365234e-3f); t = TW_MAD(f, t, 5.5504109710454940795898e-2f);
  t = TW_MAD(f, t, 0.2402265071868896484375f); t = TW_MAD(f, t, 0.693147182464599609375f);
  float p = TW_MAD(f, t, 1.0f);
  int ni = (int)n, n1 = ni >> 1, n2 = ni - n1;   // 2^n in two factors: both normal floats, one rounding into denormals
  float r = (p * __builtin_bit_cast(float, (n1 + 127) << 23)) * __builtin_bit_cast(float, (n2 + 127) << 23);
  return x != x ? x : r;
}
static inline float tw_log2f(float x) {   // x = m * 2^e, m in [sqrt(1/2), sqrt(2)), log2(m) = 2/ln2 * atanh((m-1)/(m+1))
  int sub = x < 1.17549435e-38f;   // denormal: scaled by 2^23 first
  int b = __builtin_bit_cast(int, sub ? x * 8388608.0f : x);
  int e = ((b >> 23) & 0xff) - (sub ? 150 : 127);
  float m = __builtin_bit_cast(float, (b & 0x007fffff) | 0x3f800000);
  int big = m > 1.41421356f;
  m = big ? m * 0.5f : m;
  e += big;
  float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  float t = 0.320598897975325f;
  t = TW_MAD(s2, t, 0.412198583111132f); t = TW_MAD(s2, t, 0.577078016355585f);
  t = TW_MAD(s2, t, 0.961796693925976f); t = TW_MAD(s2, t, 2.885390081777927f);
  float p = s * t;
  return (x > 0.0f && x < __builtin_inff()) ? (float)e + p : x == 0.0f ? -__builtin_inff() : x == __builtin_inff() ? x : __builtin_nanf("");
}
#endif
"""
  code_for_op = {**CStyleRenderer.code_for_op,
                 Ops.EXP2: lambda self, a, b, c, dt: f"exp2({a})" if dt == dtypes.float64 else f"tw_exp2f({a})",
                 Ops.LOG2: lambda self, a, b, c, dt: f"log2({a})" if dt == dtypes.float64 else f"tw_log2f({a})"}
  def render_fma(self, a: str, b: str, c: str) -> str: return f"__builtin_fmaf({a}, {b}, {c})"
  def round_result(self, expr: str, dt: DType) -> str:
    if dt == dtypes.float16: return f"((float)(__fp16)({expr}))"
    if dt == dtypes.bfloat16: return f"tw_bf16_round({expr})"
    return expr
  def float_to_int(self, x: str, dt: DType) -> str:   # through int64 so out-of-range values wrap instead of being UB
    return f"({x})" if dt == dtypes.uint64 else f"(long long)({x})"
  def render_bitcast(self, x: str, dt: DType, sdt: DType) -> str:
    if sdt == dtypes.bfloat16: x = f"tw_f32_to_bf16({x})"
    elif sdt == dtypes.float16: x = f"(__fp16)({x})"
    if dt == dtypes.bfloat16: return f"tw_bf16_to_f32(__builtin_bit_cast(unsigned short, {x}))"
    if dt == dtypes.float16: return f"((float)__builtin_bit_cast(__fp16, {x}))"
    return f"__builtin_bit_cast({self.reg(dt)}, {x})"
  def render_load(self, buf: str, idx: str, dt: DType) -> str:
    return f"tw_bf16_to_f32({buf}[{idx}])" if dt == dtypes.bfloat16 else f"{buf}[{idx}]"
  def render_store(self, buf: str, idx: str, val: str, dt: DType) -> str:
    return f"{buf}[{idx}] = tw_f32_to_bf16({val});" if dt == dtypes.bfloat16 else f"{buf}[{idx}] = {val};"
  def render_kernel(self, name: str, params: list[str], body: list[str], prog: Program) -> str:
    # explicit 512-bit vectors (vector groups, wide loops) stay whole: clang splits them in two where it prefers 256-bit
    # ones, as on most AVX-512 CPUs
    attr = "__attribute__((min_vector_width(512))) " if self._vectors else ""
    src = ("#define TW_FMA 1\n" if self.fused_multiply_add else "") + self.prelude + f"{attr}void {name}({', '.join(params)}) {{\n" + "\n".join(body) + "\n}\n"
    if prog.parallel_range is None: return src
    # the entry point of the CPU runtime's thread pool (backends/cpu.py): the buffers as an array, one chunk of the loop
    args = ", ".join(f"a[{i}]" for i in range(len(prog.globals)))
    return src + f"void {name}_chunk(void** a, int lo, int hi) {{ {name}({args}, lo, hi); }}\n"
