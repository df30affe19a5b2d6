"""OpenCL C: the C-style renderer with OpenCL's kernel syntax, thread indices and types, for the CL device.

dtype policy (results equal the CPU device's):
- bool, 8/16/32/64-bit ints and float32 compute natively; bool is stored as uchar (kernel arguments may not be bool).
- float16 and bfloat16 are stored as 16-bit patterns (ushort), computed in float and rounded to nearest even after
  every op (like the CPU device). float16 converts with vload_half/vstore_half_rte (no cl_khr_fp16 needed) except for
  NaNs, whose payload is kept bit for bit (PoCL's conversions replace it).
- float64 only where the device has fp64 (`OpenCLRenderer(has_fp64=False)` refuses it with a TypeError).
- float -> int casts go through int64 and wrap, with NaN, inf and values outside the int64 range giving INT64_MIN
  (what the CPU device gives on x86), also on devices whose own conversion differs.
"""
from __future__ import annotations
from tinyweb.dtype import DType, dtypes
from tinyweb.uop import UOp, Ops
from tinyweb.codegen.cstyle import CStyleRenderer
from tinyweb.codegen.program import Program

HALF16 = (dtypes.float16, dtypes.bfloat16)   # computed in float, stored as 16-bit patterns

class OpenCLRenderer(CStyleRenderer):
  device = "CL"
  has_threads = True
  fused_multiply_add = True   # fma(): correctly rounded in OpenCL C
  local_size = 64        # threads per workgroup (capped by max_local_size)
  max_local_size = 256   # the runtime passes the device's max work-group size
  max_groups = 2**31 - 1   # OpenCL has no limit on the number of workgroups; flat thread indices are int32 (int64 where needed)
  reg_types = {dtypes.bool: "bool", dtypes.int8: "char", dtypes.uint8: "uchar", dtypes.int16: "short", dtypes.uint16: "ushort",
               dtypes.int32: "int", dtypes.uint32: "uint", dtypes.int64: "long", dtypes.uint64: "ulong",
               dtypes.float16: "float", dtypes.bfloat16: "float", dtypes.float32: "float", dtypes.float64: "double"}
  mem_types = {dtypes.bool: "uchar", dtypes.float16: "ushort", dtypes.bfloat16: "ushort"}
  int_suffix = {dtypes.int64: "L", dtypes.uint64: "UL", dtypes.uint32: "u"}
  barrier = "barrier(CLK_LOCAL_MEM_FENCE);"
  vector_width, vector_type = 4, "float4"   # vload4/vstore4
  def render_vector_load(self, buf: str, idx: str) -> str: return f"vload4(0, {buf}+{idx})"
  def render_vector_store(self, buf: str, idx: str, vals: list[str]) -> str: return f"vstore4((float4)({', '.join(vals)}), 0, {buf}+{idx});"

  def __init__(self, has_fp64: bool = True, **settings):
    super().__init__(**settings)
    self.has_fp64 = has_fp64
    self.unsupported = {} if has_fp64 else {dtypes.float64: "the OpenCL device has no fp64 (cl_khr_fp64); use float32"}

  def reg(self, dt: DType) -> str:
    self.check_dtype(dt)
    return self.reg_types[dt]

  # ---- ops (OpenCL's math builtins are overloaded: exp2, log2, sin, sqrt, trunc take float and double) ----
  def math_fn(self, name: str, dt: DType) -> str: return name
  # PoCL's compiler folds trunc and exp2 of a NaN it can see (x / NAN, a NaN constant) to garbage (exp2 to 0, trunc to a
  # random value: 1 // nan gave 5e-21), while a NaN read at run time is right: a NaN operand is passed through first
  code_for_op = {**CStyleRenderer.code_for_op,
                 Ops.TRUNC: lambda self, a, b, c, dt: f"(({a}!={a})?{a}:trunc({a}))",
                 Ops.EXP2: lambda self, a, b, c, dt: f"(({a}!={a})?{a}:exp2({a}))"}
  def round_result(self, expr: str, dt: DType) -> str:
    if dt == dtypes.float16: return f"tw_f16_round({expr})"
    if dt == dtypes.bfloat16: return f"tw_bf16_round({expr})"
    return expr
  def float_to_int(self, x: str, dt: DType) -> str: return f"tw_f2ul({x})" if dt == dtypes.uint64 else f"tw_f2l({x})"
  def render_bitcast(self, x: str, dt: DType, sdt: DType) -> str:
    if sdt in HALF16: x = f"{self.half_fn[sdt][1]}({x})"
    elif sdt.is_bool: x = f"((uchar)({x}))"
    if dt in HALF16: return f"{self.half_fn[dt][0]}(as_ushort({x}))"
    if dt.is_bool: return f"(as_uchar({x})!=0)"
    return f"as_{self.reg(dt)}({x})"
  # ---- memory ----
  half_fn = {dtypes.float16: ("tw_f16_to_f32", "tw_f32_to_f16"), dtypes.bfloat16: ("tw_bf16_to_f32", "tw_f32_to_bf16")}
  def render_load(self, buf: str, idx: str, dt: DType) -> str:
    return f"{self.half_fn[dt][0]}({buf}[{idx}])" if dt in HALF16 else f"{buf}[{idx}]"
  def render_store(self, buf: str, idx: str, val: str, dt: DType) -> str:
    return f"{buf}[{idx}] = {self.half_fn[dt][1]}({val});" if dt in HALF16 else f"{buf}[{idx}] = {val};"
  # ---- declarations, threads ----
  def render_param(self, g: UOp, name: str, is_output: bool) -> str:
    self.check_dtype(g.dtype, "buffer")
    return f"__global {'' if is_output else 'const '}{self.mem(g.dtype)}* restrict {name}"
  def render_local(self, name: str, dt: DType, n: int) -> str: return f"__local {self.reg(dt)} {name}[{n}];"
  def render_special(self, u: UOp, name: str, prog: Program, srcs: list[str]) -> list[str]:
    if isinstance(u.arg, tuple): return self.render_group_reduce(u, name, srcs[0])   # ("group", op, G)
    # the grid is 1-D (max_groups exceeds any int32 thread count). Grouped reductions: all threads of a workgroup work
    # on one output, gid is the workgroup's index (so the early return is uniform in the workgroup)
    flat, t = "get_group_id(0)" if prog.gid_is_workgroup else "get_global_id(0)", self.reg(u.dtype)   # (size_t: 64 bits)
    return [f"{t} {name} = ({t}){flat};", f"if ({name} >= {prog.threads}) return;"]

  # guarded: several kernels' sources compile as one program (CLCompiler.batch_sources)
  prelude = """#pragma OPENCL FP_CONTRACT OFF
#ifndef TW_PRELUDE
#define TW_PRELUDE
static inline float tw_bf16_to_f32(ushort x) { return as_float(((uint)x) << 16); }
static inline ushort tw_f32_to_bf16(float f) {
  uint u = as_uint(f);
  if (f != f) return 0x7fc0;
  return (ushort)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static inline float tw_bf16_round(float f) { return tw_bf16_to_f32(tw_f32_to_bf16(f)); }
static inline float tw_f16_to_f32(ushort x) {
  if ((x & 0x7c00) == 0x7c00 && (x & 0x3ff)) return as_float(((uint)(x & 0x8000) << 16) | 0x7f800000u | ((uint)(x & 0x3ff) << 13));
  return vload_half(0, (const __private half*)&x);
}
static inline ushort tw_f32_to_f16(float f) {
  uint u = as_uint(f);
  if (f != f) return (ushort)(((u >> 16) & 0x8000) | 0x7c00 | (((u >> 13) & 0x3ff) ? ((u >> 13) & 0x3ff) : 0x200));
  ushort h; vstore_half_rte(f, 0, (__private half*)&h); return h;
}
static inline float tw_f16_round(float f) { return tw_f16_to_f32(tw_f32_to_f16(f)); }
static inline long __attribute__((overloadable)) tw_f2l(float x) { return fabs(x) < 0x1p63f ? (long)x : (-9223372036854775807L-1); }
static inline ulong __attribute__((overloadable)) tw_f2ul(float x) { return (x > -1.0f && x < 0x1p64f) ? (ulong)x : ~0UL; }
#endif
"""
  fp64_prelude = """#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#ifndef TW_FP64_PRELUDE
#define TW_FP64_PRELUDE
static inline long __attribute__((overloadable)) tw_f2l(double x) { return fabs(x) < 0x1p63 ? (long)x : (-9223372036854775807L-1); }
static inline ulong __attribute__((overloadable)) tw_f2ul(double x) { return (x > -1.0 && x < 0x1p64) ? (ulong)x : ~0UL; }
#endif
"""
  def render_kernel(self, name: str, params: list[str], body: list[str], prog: Program) -> str:
    # the work-group size is fixed at compile time; the runtime reads it back from the kernel to launch it
    return (self.prelude + (self.fp64_prelude if self.has_fp64 else "") +
            f"__kernel __attribute__((reqd_work_group_size({prog.local_size or 1}, 1, 1)))\n"
            f"void {name}({', '.join(params)}) {{\n" + ("  uint lid = get_local_id(0);\n" if prog.gid_is_workgroup else "") +
            "".join(f"  {d}\n" for d in self._local_decls) + "\n".join(body) + "\n}\n")
