"""The CPU device's renderer: C for clang (backends/cpu.py compiles it to a shared library)."""
from __future__ import annotations
from tinyweb.dtype import DType, dtypes
from tinyweb.uop import UOp, Ops, ALU
from tinyweb.codegen.program import Program
from tinyweb.codegen.lowering import IDX, reduce_identity
from tinyweb.codegen.cstyle import CStyleRenderer, KernelWriter
from tinyweb.codegen.vectors import vector_groups, unused_addresses, accumulator_inits, lane_stride

class ClangKernelWriter(KernelWriter):
  """The CPU's kernel writer: besides the scalar code, groups of `vector_lanes` uops that compute neighbouring float32
  outputs the same way are written as one vector op each (codegen/vectors.py; clang's SLP vectorizer finds some of these
  itself, but only in 256-bit vectors on AVX-512 CPUs unless told to prefer 512 bits for every kernel, which slows others
  down, never gathers, and not in a loop of two trips), loops of elementwise kernels may get the 16-float vectorize
  pragma (wide_loops), and address arithmetic is computed in 64 bits (wide_indices)."""
  def __init__(self, rd: ClangRenderer, prog: Program):
    super().__init__(rd, prog)
    self.wide = self.wide_indices(prog)
    self.inits = accumulator_inits(prog)
    f32 = dtypes.float32
    self.vec = vector_groups(prog, rd.vector_lanes, self.inits) if rd.mem(f32) == rd.reg(f32) else {}
    self.wide_loops = self.wide_loops_of(prog) if rd.wide_loop_pragma and not self.vec else set()
    rd._vectors = bool(self.vec or self.wide_loops)
    self.vnames: dict[tuple[UOp, ...], str] = {}   # a group's vector variable
    self.emitted: set = set()                      # (group, op): written, at the first of its lanes in program order
    self.unused = unused_addresses(prog, self.vec) if self.vec else set()

  def r(self, u: UOp) -> str:
    if u in self.vec: return f"{self.vnames[self.vec[u][0]]}[{self.vec[u][1]}]"   # one lane of a vector
    return super().r(u)
  def v(self, lanes: tuple[UOp, ...]) -> str: return self.vnames[lanes] if lanes in self.vnames else self.r(lanes[0])   # a vector, or a scalar
  def splat(self, lanes: tuple[UOp, ...]) -> str:
    return self.v(lanes) if lanes in self.vnames else f"(({self.rd.vector_type})({self.r(lanes[0])}))"
  def write(self, u: UOp):
    if u.op in (Ops.CONST, Ops.DEFINE_GLOBAL, Ops.SINK) or u in self.unused: return
    if (m := self.vec.get(u.src[0] if u.op in (Ops.DEFINE_ACC, Ops.ACC_UPDATE) else u)) is not None:
      if (m[0], u.op) not in self.emitted:
        self.emitted.add((m[0], u.op))
        self.line(self.vector_line(u, *m))
      return
    super().write(u)
  def write_range(self, u: UOp):
    if u in self.wide_loops: self.line(self.rd.wide_loop_pragma)
    super().write_range(u)
  def declare(self, u: UOp, expr: str):
    if u in self.wide: self.line(f"{self.rd.index_type} {self.names[u]} = {expr};")
    else: super().declare(u, expr)

  def vector_line(self, u: UOp, lanes: tuple[UOp, ...], lane: int) -> str:
    rd, r, v, splat, vnames, vt = self.rd, self.r, self.v, self.splat, self.vnames, self.rd.vector_type
    step = lane_stride(lanes) if u.op in (Ops.LOAD, Ops.STORE) else 0
    def addr(x: UOp) -> str: return f"({r(x.src[0])}+{r(x.src[1])}{f'{-lane * step:+d}' if lane else ''})"   # lane 0's element
    def srcs(i: int) -> tuple[UOp, ...]: return tuple(x.src[i] for x in lanes)
    if u.op is Ops.STORE: return f"*({vt}*){addr(u)} = {splat(srcs(2))};"
    if u.op is Ops.ACC_UPDATE:
      if len(u.src) == 3:   # fused: lanes are the reductions, their values the products
        return f"{vnames[lanes]} = tw_fma16({splat(tuple(x.src[0].src[0] for x in lanes))}, {splat(tuple(x.src[0].src[1] for x in lanes))}, {vnames[lanes]});"
      return f"{vnames[lanes]} = {rd.render_alu(lanes[0].arg, [vnames[lanes], v(tuple(x.src[0] for x in lanes))], u.dtype, u.dtype, list(u.src))};"
    if u.op is Ops.DEFINE_ACC:
      red = lanes[0]
      vnames[lanes] = self.new_name("acc")
      init = v(tuple(self.inits[x] for x in lanes)) if len(u.src) > 1 else splat((UOp.const(red.dtype, reduce_identity(red.arg, red.dtype)),))
      return f"{vt} {vnames[lanes]} = {init};"
    vnames[lanes] = self.new_name("vec")
    if u.op is Ops.LOAD:
      expr = f"*(const {vt}*){addr(u)}" if step == 1 else f"(({vt}){{{', '.join(f'{addr(u)}[{l * step}]' for l in range(len(lanes)))}}})"
    elif u.op is Ops.WHERE: expr = rd.code_for_op[Ops.WHERE](rd, r(u.src[0]), splat(srcs(1)), splat(srcs(2)), u.dtype)
    else: expr = rd.render_alu(u.op, [v(srcs(i)) for i in range(len(u.src))], u.dtype, u.src[0].dtype, list(u.src))
    return f"{vt} {vnames[lanes]} = {expr};"

  @staticmethod
  def wide_indices(prog: Program) -> set[UOp]:
    """The int32 uops that compute load and store addresses from loop indices and constants. Their values are below
    2^31 (a kernel whose indexes need more has 64-bit index math: lowering.index_dtype), so computing them in 64 bits
    changes no value, and lets clang see that neighbouring addresses are adjacent (with 32-bit ints, each one's sign
    extension hides that) and vectorize the loads."""
    pure: set[UOp] = set()
    for u in prog.uops:
      if u.op is Ops.RANGE or (u.op in ALU and u.dtype == IDX and all(s in pure or s.op is Ops.CONST for s in u.src)): pure.add(u)
    out: set[UOp] = set()
    todo = [u.src[1] for u in prog.uops if u.op in (Ops.LOAD, Ops.STORE)]
    while todo:
      if (x := todo.pop()) in pure and x not in out: out.add(x); todo.extend(x.src)
    return out

  @staticmethod
  def wide_loops_of(prog: Program) -> set[UOp]:
    """An elementwise kernel's (no reduction) innermost loops of at least 16 trips, or split across cores: there clang's
    vectorizer would use 8-float vectors on most AVX-512 CPUs, where 16-float ones run a compute-heavy chain (an exp, a
    sigmoid) up to 1.5x faster. Not for reductions: their vectorized sums got slower with 16 floats."""
    if any(u.op is Ops.DEFINE_ACC for u in prog.uops): return set()
    inner, parent = set(), None
    for u in prog.uops:
      if u.op is Ops.RANGE: inner.discard(parent); inner.add(parent := u)
      elif u.op is Ops.ENDRANGE: parent = None
    return {u for u in inner if u is prog.parallel_range or (u.src[0].op is Ops.CONST and u.src[0].arg >= 16)}

class ClangRenderer(CStyleRenderer):
  """C for clang. float16 is stored as __fp16 and bfloat16 as its 16-bit pattern; both compute in float and round
  after every op, which is what PyTorch's CPU kernels do. exp2 and log2 of float32 are the prelude's vectorizable
  tw_exp2f / tw_log2f (within 1 / 3 ulp of libm's), float64 uses libm."""
  device = "CPU"
  core_split = True
  index_type = "long long"   # loop indices and address arithmetic (see ClangKernelWriter.wide_indices)
  writer = ClangKernelWriter
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
// float -> uint64 as AVX-512's vcvttsd2usi, all ones where there is no answer: the plain C cast is undefined there,
// and clang's code for CPUs without AVX-512 answers differently (2^63 for NaN), so results would depend on the machine
static inline unsigned long long tw_f2u64(double x) { return (x > -1.0 && x < 18446744073709551616.0) ? (unsigned long long)x : ~0ull; }
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
  def render_range(self, name: str, lo: str, hi: str, dt: DType) -> str: return f"for ({self.index_type} {name} = {lo}; {name} < {hi}; {name}++) {{"
  def render_fma(self, a: str, b: str, c: str) -> str: return f"__builtin_fmaf({a}, {b}, {c})"
  def round_result(self, expr: str, dt: DType) -> str:
    if dt == dtypes.float16: return f"((float)(__fp16)({expr}))"
    if dt == dtypes.bfloat16: return f"tw_bf16_round({expr})"
    return expr
  def float_to_int(self, x: str, dt: DType) -> str:   # through int64 so out-of-range values wrap instead of being UB
    return f"tw_f2u64({x})" if dt == dtypes.uint64 else f"(long long)({x})"
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
