"""WGSL for WebGPU: the C-style renderer with WGSL's syntax and types, plus what WGSL lacks.

dtype policy (one place: `WGSLRenderer.unsupported`, checked when a buffer is created and when a kernel is rendered):
- float32, int32, uint32, bool compute natively (registers f32/i32/u32/bool).
- int8/uint8/int16/uint16/bool buffers are packed into u32 words: loads extract the element with shifts and masks at any
  offset; stores replace the element's bits with two atomics (atomicAnd + atomicOr on `array<atomic<u32>>`), so any
  thread may write any element without tearing its neighbours. They compute in i32/u32 and wrap after every op.
- float16 needs the adapter's `shader-f16`: buffers are `array<f16>`, values compute in f32 and round to f16 after
  every op (what the CPU device does). Without `shader-f16` float16 is refused.
- bfloat16 is emulated: stored as 16-bit patterns packed in u32 words, computed in f32, rounded (to nearest even) after
  every op, like the CPU device.
- int64, uint64 and float64 are refused (WGSL has no 64-bit types; WebGPU in browsers has no shader-int64/f64).
"""
from __future__ import annotations
from tinyweb.dtype import DType, dtypes
from tinyweb.uop import UOp, Ops
from tinyweb.codegen.cstyle import CStyleRenderer
from tinyweb.codegen.program import Program

PACKED = {dtypes.bool: 8, dtypes.int8: 8, dtypes.uint8: 8, dtypes.int16: 16, dtypes.uint16: 16, dtypes.bfloat16: 16}

class WGSLRenderer(CStyleRenderer):
  device = "WEBGPU"
  has_threads = True
  fused_multiply_add = False   # WGSL's fma() may round twice (lavapipe's does): no fused updates on WEBGPU
  local_size = 64            # threads per workgroup (capped by max_local_size)
  max_local_size = 256       # the runtime passes these from the adapter's limits
  max_groups = 65535
  max_buffers = 8            # storage buffers one kernel may bind (the runtime passes the adapter's limit)
  buffer_qualifier = ""
  signed_overflow_wraps = True
  reg_types = {dtypes.bool: "bool", dtypes.int8: "i32", dtypes.int16: "i32", dtypes.int32: "i32", dtypes.uint8: "u32",
               dtypes.uint16: "u32", dtypes.uint32: "u32", dtypes.float16: "f32", dtypes.bfloat16: "f32", dtypes.float32: "f32"}
  float_suffix = {dtypes.float32: "f", dtypes.float16: "f", dtypes.bfloat16: "f"}
  int_suffix = {dtypes.uint32: "u", dtypes.uint16: "u", dtypes.uint8: "u"}
  # WGSL has no inf/nan literals, and a constant expression that evaluates to inf/NaN is an error in Chromium (Tint): the
  # bits go through a function, which makes the value a runtime one
  infinity, nan = "tw_f32_bits(0x7f800000u)", "tw_f32_bits(0x7fc00000u)"

  def __init__(self, has_f16: bool = False, **settings):
    super().__init__(**settings)
    self.has_f16 = has_f16
    # dtype -> why this device refuses it
    self.unsupported: dict[DType, str] = {
      dtypes.int64: "WGSL has no 64-bit integers; use int32", dtypes.uint64: "WGSL has no 64-bit integers; use uint32",
      dtypes.float64: "WGSL has no 64-bit floats; use float32"}
    if not has_f16: self.unsupported[dtypes.float16] = "the adapter lacks the shader-f16 feature; use float32 or bfloat16"

  def reg(self, dt: DType) -> str:
    self.check_dtype(dt)
    return self.reg_types[dt]
  def mem(self, dt: DType) -> str:
    self.check_dtype(dt)
    return "u32" if dt in PACKED else "f16" if dt == dtypes.float16 else self.reg_types[dt]

  def render_const(self, v, dt: DType) -> str:
    if dt.is_bool: return "true" if v else "false"
    if dt.is_int and dt.kind == "i" and v == -2**31: return "i32(-2147483647 - 1)"
    return super().render_const(v, dt)

  # ---- ops ----
  def math_fn(self, name: str, dt: DType) -> str: return name
  code_for_op = {**CStyleRenderer.code_for_op,
    Ops.NEG: lambda self, a, b, c, dt: f"(!{a})" if dt.is_bool else f"(0u-{a})" if dt.is_unsigned else f"(-{a})",
    # (| rather than ||, which short-circuits: a branch per select, and SwiftShader's compiler hung for minutes on a
    # softmax's max over 32 accumulators, MiniLM's, until the device was lost; with | it takes 0.13 s)
    Ops.MAX: lambda self, a, b, c, dt: f"select({b}, {a}, ({a}>{b})|tw_isnan({a}))" if dt.is_float else
             f"({a}||{b})" if dt.is_bool else f"max({a}, {b})",
    Ops.MIN: lambda self, a, b, c, dt: f"select({b}, {a}, ({a}<{b})|tw_isnan({a}))" if dt.is_float else
             f"({a}&&{b})" if dt.is_bool else f"min({a}, {b})",
    # lavapipe/LLVM compares ordered: x != y is false for NaN unless asked for explicitly
    Ops.CMPNE: lambda self, a, b, c, dt: f"({a}!={b})",
    Ops.SHL: lambda self, a, b, c, dt: f"({a}<<u32({b}))", Ops.SHR: lambda self, a, b, c, dt: f"({a}>>u32({b}))",
    Ops.WHERE: lambda self, a, b, c, dt: f"select({c}, {b}, {a})",
    # WGSL leaves these indeterminate outside their domain (SwiftShader: log2(-1) = 0, log2(0) = -127, exp2(NaN) = inf):
    # NaN and -inf are made explicit, as in C
    Ops.LOG2: lambda self, a, b, c, dt: f"tw_log2({a})", Ops.SQRT: lambda self, a, b, c, dt: f"tw_sqrt({a})",
    Ops.MOD: lambda self, a, b, c, dt: f"tw_fmod({a}, {b})",   # (floats; WGSL's % is a - b * trunc(a / b), not exact)
    Ops.SIN: lambda self, a, b, c, dt: f"tw_sin({a})", Ops.COS: lambda self, a, b, c, dt: f"tw_cos({a})", Ops.EXP2: lambda self, a, b, c, dt: f"tw_exp2({a})",
  }
  def render_alu(self, op: Ops, srcs: list[str], dt: DType, sdt: DType, src_uops: list[UOp]) -> str:
    if sdt is not None and sdt.is_bool and op in (Ops.CMPLT, Ops.XOR):   # WGSL has no < or ^ on bool
      a, b = srcs
      return f"((!{a})&&{b})" if op is Ops.CMPLT else f"({a}!={b})"
    # WGSL lets the compiler assume no NaN/inf, and lavapipe (NIR) folds x*0.0 to 0.0 even for x = inf/NaN: a product
    # with a constant zero is computed on the bits instead (NaN for inf/NaN, else a zero with the product's sign)
    if op is Ops.MUL and dt.is_float and (zs := [i for i, u in enumerate(src_uops) if u.op is Ops.CONST and u.arg == 0]):
      return f"tw_mul0({srcs[1 - zs[0]]}, {srcs[zs[0]]})"
    if op is Ops.CMPNE and sdt is not None and sdt.is_float: return f"({srcs[0]}!={srcs[1]}||tw_isnan({srcs[0]})||tw_isnan({srcs[1]}))"
    return super().render_alu(op, srcs, dt, sdt, src_uops)
  def render_int_div(self, op: Ops, a: str, b: str, dt: DType, divisor: UOp) -> str:
    sym = "/" if op is Ops.IDIV else "%"
    if divisor.op is Ops.CONST and divisor.arg not in (0, -1): return f"({a}{sym}{b})"
    zero = self.render_const(0, dt)
    if divisor.op is Ops.CONST and divisor.arg == 0: return zero   # (Chromium rejects a shader with x/0 or x%0 in it)
    if dt.kind != "i": return f"select(({a}{sym}{b}), {zero}, {b}=={zero})"
    # like the CPU device: x/0 = x%0 = 0, INT_MIN/-1 = INT_MIN (wraps), INT_MIN%-1 = 0 (WGSL: x/0 = x)
    special = f"({b}==0||({b}==-1&&{a}=={self.render_const(dt.min, dt)}))"
    fallback = zero if op is Ops.MOD else f"select((0-({a})), {zero}, {b}==0)"
    return f"select(({a}{sym}{b}), {fallback}, {special})"

  def round_result(self, expr: str, dt: DType) -> str:
    if dt == dtypes.float16: return f"f32(f16({expr}))"
    if dt == dtypes.bfloat16: return f"tw_bf16_round({expr})"
    if dt in (dtypes.int8, dtypes.int16): return f"((({expr})<<{32 - dt.bits}u)>>{32 - dt.bits}u)"   # wrap, sign-extend
    if dt in (dtypes.uint8, dtypes.uint16): return f"(({expr})&{dt.max}u)"
    return expr
  def render_cast(self, x: str, dt: DType, sdt: DType) -> str:
    if dt.is_bool: return x if sdt.is_bool else f"({x}!={self.render_const(0, sdt)}||tw_isnan({x}))" if sdt.is_float else f"({x}!={self.render_const(0, sdt)})"
    if dt.is_int and sdt.is_float:   # like C through int64: out-of-range values wrap (within the i32 range), NaN -> 0
      return self.round_result(f"tw_f2i({x})" if dt.kind == "i" else f"tw_f2u({x})", dt)
    if dt.is_int and sdt.is_int and dt.kind != sdt.kind: return self.round_result(f"bitcast<{self.reg(dt)}>({x})", dt)
    return self.round_result(f"{self.reg(dt)}({x})", dt)
  def bits_of(self, x: str, sdt: DType) -> str:
    """The value's bit pattern in the low bits of a u32."""
    if sdt == dtypes.bfloat16: return f"tw_f32_to_bf16({x})"
    if sdt == dtypes.float16: return f"(pack2x16float(vec2<f32>({x}, 0.0f))&0xffffu)"
    if sdt.is_bool: return f"u32({x})"
    return f"(bitcast<u32>({x})&{(1 << sdt.bits) - 1}u)"
  def from_bits(self, b: str, dt: DType) -> str:
    if dt == dtypes.bfloat16: return f"bitcast<f32>(({b})<<16u)"
    if dt == dtypes.float16: return f"unpack2x16float({b}).x"
    if dt.is_bool: return f"(({b})!=0u)"
    if dt.kind == "i" and dt.bits < 32: return f"((bitcast<i32>(({b})<<{32 - dt.bits}u))>>{32 - dt.bits}u)"
    return f"bitcast<{self.reg(dt)}>({b})"
  def render_bitcast(self, x: str, dt: DType, sdt: DType) -> str:
    if dt.bits == 32 and sdt.bits == 32: return f"bitcast<{self.reg(dt)}>({x})"
    return self.from_bits(self.bits_of(x, sdt), dt)

  # ---- memory: plain arrays, f16 arrays, and sub-word types packed into u32 words ----
  def _word(self, buf: str, idx: str, dt: DType) -> tuple[str, str]:
    per = 32 // PACKED[dt]
    return f"{buf}[u32({idx})/{per}u]", f"((u32({idx})%{per}u)*{PACKED[dt]}u)"
  def render_load(self, buf: str, idx: str, dt: DType) -> str:
    if dt == dtypes.float16: return f"f32({buf}[{idx}])"
    if dt not in PACKED: return f"{buf}[{idx}]"
    word, sh = self._word(buf, idx, dt)
    if buf in self._atomic: word = f"atomicLoad(&{word})"
    return self.from_bits(f"(({word}>>{sh})&{(1 << PACKED[dt]) - 1}u)", dt)
  def render_store(self, buf: str, idx: str, val: str, dt: DType) -> str:
    if dt == dtypes.float16: return f"{buf}[{idx}] = f16({val});"
    if dt not in PACKED: return f"{buf}[{idx}] = {val};"
    word, sh = self._word(buf, idx, dt)
    mask = f"{(1 << PACKED[dt]) - 1}u"
    return (f"atomicAnd(&{word}, ~({mask}<<{sh})); atomicOr(&{word}, ({self.bits_of(val, dt)}&{mask})<<{sh});")

  # ---- declarations, loops, threads ----
  def render_param(self, g: UOp, name: str, is_output: bool) -> str:
    self.check_dtype(g.dtype, "buffer")
    elem = "atomic<u32>" if g.dtype in PACKED and is_output else self.mem(g.dtype)
    if g.dtype in PACKED and is_output: self._atomic.add(name)
    return f"@group(0) @binding({g.arg[0]}) var<storage, read_write> {name}: array<{elem}>;"
  def to_int(self, unsigned: str) -> str: return f"i32({unsigned})"
  def render_decl(self, dt: DType, name: str, expr: str, mutable: bool = False) -> str:
    return f"{'var' if mutable else 'let'} {name}: {self.reg(dt)} = {expr};"
  def render_range(self, name: str, lo: str, hi: str, dt: DType) -> str:
    return f"for (var {name}: {self.reg(dt)} = {lo}; {name} < {hi}; {name}++) {{"
  barrier = "workgroupBarrier();"
  def render_local(self, name: str, dt: DType, n: int) -> str: return f"var<workgroup> {name}: array<{self.reg(dt)}, {n}>;"
  def render_special(self, u: UOp, name: str, prog: Program, srcs: list[str]) -> list[str]:
    if isinstance(u.arg, tuple): return self.render_group_reduce(u, name, srcs[0])   # ("group", op, G)
    x, y, _ = prog.grid
    flat = "wg.x" + (f" + wg.y*{x}u" if prog.grid[1] > 1 or prog.grid[2] > 1 else "") + (f" + wg.z*{x * y}u" if prog.grid[2] > 1 else "")
    # grouped reductions: all threads of a workgroup work on one output (the early return is uniform in the workgroup)
    if prog.gid_is_workgroup: return [f"let {name}: i32 = i32({flat});", f"if ({name} >= {prog.threads}) {{ return; }}"]
    return [f"let {name}: i32 = i32(({flat})*{prog.local_size}u + lid);", f"if ({name} >= {prog.threads}) {{ return; }}"]

  prelude = """fn tw_f32_bits(b: u32) -> f32 { return bitcast<f32>(b); }
fn tw_isnan(x: f32) -> bool { return (bitcast<u32>(x) & 0x7fffffffu) > 0x7f800000u; }
fn tw_log2(x: f32) -> f32 {   // the CPU device's (log2 is only accurate to 2^-21 near 1, SwiftShader's log2(0) is -127):
  // x = m * 2^e, m in [sqrt(1/2), sqrt(2)), log2(m) = 2/ln2 * atanh(s), s = (m - 1) / (m + 1); denormals scaled by 2^23 first
  let sub = x < 1.17549435e-38f;
  let b = bitcast<i32>(select(x, x * 8388608.0f, sub));
  var e = ((b >> 23u) & 0xff) - select(127, 150, sub);
  var m = bitcast<f32>((b & 0x007fffff) | 0x3f800000);
  if (m > 1.41421356f) { m = m * 0.5f; e = e + 1; }
  let s = (m - 1.0f) / (m + 1.0f);
  let s2 = s * s;
  let t = (((0.320598897975325f * s2 + 0.412198583111132f) * s2 + 0.577078016355585f) * s2 + 0.961796693925976f) * s2 + 2.885390081777927f;
  let inf = tw_f32_bits(0x7f800000u);
  return select(select(select(tw_f32_bits(0x7fc00000u), x, x == inf), -inf, x == 0.0f), f32(e) + s * t, x > 0.0f && x < inf);
}
fn tw_sqrt(x: f32) -> f32 { return select(sqrt(x), tw_f32_bits(0x7fc00000u), x < 0.0f || tw_isnan(x)); }
fn tw_exp2(x: f32) -> f32 { return select(exp2(x), x, tw_isnan(x)); }
var<private> tw_two_over_pi: array<u32, 8> = array<u32, 8>(0xa2f9836eu, 0x4e441529u, 0xfc2757d1u, 0xf534ddc0u, 0xdb629599u,
                                                            0x3c439041u, 0xfe5163abu, 0xdebbc561u);   // 2/pi's first 256 bits
fn tw_mul_wide(a: u32, b: u32) -> vec2<u32> {   // a * b as (low word, high word)
  let p00 = (a & 0xffffu) * (b & 0xffffu);
  let p01 = (a & 0xffffu) * (b >> 16u);
  let p10 = (a >> 16u) * (b & 0xffffu);
  let mid = (p00 >> 16u) + (p01 & 0xffffu) + (p10 & 0xffffu);
  return vec2<u32>((p00 & 0xffffu) | (mid << 16u), (a >> 16u) * (b >> 16u) + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u));
}
fn tw_bits_of_2_over_pi(k: u32, o: u32) -> u32 {   // 32 bits of 2/pi from fraction bit 32k + o (0-based)
  if (o == 0u) { return tw_two_over_pi[k]; }
  return (tw_two_over_pi[k] << o) | (tw_two_over_pi[k + 1u] >> (32u - o));
}
struct TwQuadrant { r: f32, q: u32 }
// ax (finite, >= pi/4) = (4n + q + f) * pi/2, |f| <= 1/2: returns r = f * pi/2 and q. ax * 2/pi in fixed point from the bits
// of 2/pi that reach its last two integer bits and 62 fraction bits (Payne and Hanek's reduction): exact for every float
fn tw_quadrant(ax: f32) -> TwQuadrant {
  let b = bitcast<u32>(ax);
  let m = (b & 0x7fffffu) | 0x800000u;   // ax = m * 2^e
  let e = i32(b >> 23u) - 150;
  let s = u32(max(e - 2, 0));           // bits of 2/pi before s only add multiples of 4
  let c2 = tw_bits_of_2_over_pi(s >> 5u, s & 31u);
  let c1 = tw_bits_of_2_over_pi((s >> 5u) + 1u, s & 31u);
  let c0 = tw_bits_of_2_over_pi((s >> 5u) + 2u, s & 31u);
  let t0 = tw_mul_wide(m, c0);   // p = m * (c2, c1, c0) in words p1.. p3 above t0.x; its unit bit is bit 96 + s - e
  let t1 = tw_mul_wide(m, c1);
  let t2 = tw_mul_wide(m, c2);
  let p1 = t0.y + t1.x;
  let p2a = t1.y + t2.x;
  let p2 = p2a + select(0u, 1u, p1 < t0.y);
  let p3 = t2.y + select(0u, 1u, p2a < t1.y) + select(0u, 1u, p2 < p2a);
  let sh = u32(i32(s) + 2 - e);   // the two integer bits and 62 fraction bits: p's bits sh + 32 ... sh + 95
  let lo = select((p1 >> sh) | (p2 << (32u - sh)), p1, sh == 0u);
  let hi = select((p2 >> sh) | (p3 << (32u - sh)), p2, sh == 0u);
  var q = hi >> 30u;
  var f_hi = f32((hi & 0x3fffffffu) >> 6u) * 5.9604644775390625e-08f;   // the fraction: 24 bits (exact) + 32 more
  let f_lo = f32(((hi & 63u) << 26u) | (lo >> 6u)) * 1.3877787807814457e-17f;
  if (f_hi >= 0.5f) { f_hi = f_hi - 1.0f; q = q + 1u; }
  return TwQuadrant(f_hi * 1.5707963705062866f + (f_hi * -4.371139000186243e-08f + f_lo * 1.5707963705062866f), q & 3u);
}
// sin and cos are accurate on [-pi/4, pi/4] only: a larger argument is reduced to it, by quadrant
fn tw_sin(x: f32) -> f32 {
  if ((bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u) { return tw_f32_bits(0x7fc00000u); }
  if (abs(x) <= 0.78539816f) { return sin(x); }
  let t = tw_quadrant(abs(x));
  let v = select(sin(t.r), cos(t.r), (t.q & 1u) == 1u);
  return select(v, -v, ((t.q & 2u) == 2u) != (x < 0.0f));
}
fn tw_cos(x: f32) -> f32 {
  if ((bitcast<u32>(x) & 0x7f800000u) == 0x7f800000u) { return tw_f32_bits(0x7fc00000u); }
  if (abs(x) <= 0.78539816f) { return cos(x); }
  let t = tw_quadrant(abs(x));
  let v = select(cos(t.r), sin(t.r), (t.q & 1u) == 1u);
  return select(v, -v, ((t.q + 1u) & 2u) == 2u);
}
fn tw_fmod(a: f32, b: f32) -> f32 {   // C's fmod, exact: b times powers of two (from |a|'s down) taken off |a|
  if (tw_isnan(a) || tw_isnan(b) || b == 0.0f || (bitcast<u32>(a) & 0x7fffffffu) == 0x7f800000u) { return tw_f32_bits(0x7fc00000u); }
  let d = abs(b);
  var r = abs(a);
  if (r < d) { return a; }
  let e = frexp(r).exp - frexp(d).exp;
  var s = ldexp(d, e);
  if (s > r || (bitcast<u32>(s) & 0x7f800000u) == 0x7f800000u) { s = ldexp(d, e - 1); }
  loop {   // s <= r < 2 s here, so r - s is exact
    if (r >= s) { r = r - s; }
    if (s == d) { break; }
    s = s * 0.5f;
  }
  return select(r, -r, a < 0.0f);
}
fn tw_mul0(x: f32, z: f32) -> f32 {
  let b = bitcast<u32>(x);
  if ((b & 0x7f800000u) == 0x7f800000u) { return tw_f32_bits(0x7fc00000u); }
  return bitcast<f32>((b ^ bitcast<u32>(z)) & 0x80000000u);
}
fn tw_f32_to_bf16(f: f32) -> u32 {
  let u = bitcast<u32>(f);
  if (tw_isnan(f)) { return 0x7fc0u; }
  return ((u + 0x7fffu + ((u >> 16u) & 1u)) >> 16u) & 0xffffu;
}
fn tw_bf16_round(f: f32) -> f32 { return bitcast<f32>(tw_f32_to_bf16(f) << 16u); }
fn tw_f2i(f: f32) -> i32 {
  if ((bitcast<u32>(f) & 0x7f800000u) == 0x7f800000u) { return 0; }   // NaN, inf -> 0 (as on the CPU)
  if (abs(f) < 2147483648.0f) { return i32(f); }
  let t = trunc(f) - 4294967296.0f * floor(trunc(f) / 4294967296.0f);  // wrap modulo 2^32 like C through int64
  return bitcast<i32>(u32(t));
}
fn tw_f2u(f: f32) -> u32 { return bitcast<u32>(tw_f2i(f)); }
"""
  def begin_kernel(self):
    super().begin_kernel()
    self._atomic: set[str] = set()   # output buffers of packed 8/16-bit values, written with atomics
  def render_kernel(self, name: str, params: list[str], body: list[str], prog: Program) -> str:
    return (("enable f16;\n" if self.has_f16 else "") + self.prelude + "\n".join(params + self._local_decls) + "\n" +
            f"@compute @workgroup_size({prog.local_size or 1})\n"
            f"fn {name}(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{\n" +
            "\n".join(body) + "\n}\n")
