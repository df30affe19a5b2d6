"""LLVM IR for the LLVM device: a linear kernel program becomes one LLVM function, which llvmlite optimizes and JIT-compiles
for the host CPU (backends/llvm.py). Pure Python, like every renderer: it only writes text.

It computes what the CPU device (C via clang) computes, with the same dtype rules:
- registers: bool is i1, integers are iN (signedness lives in the instructions: sdiv/udiv, icmp slt/ult, sext/zext,
  ashr/lshr), float16 and bfloat16 compute in float and are rounded after every op; memory: bool is i8, float16 `half`,
  bfloat16 its 16-bit pattern (i16, rounded to nearest even like the C helpers).
- loop counters and accumulators are allocas; the optimizer (mem2reg, then the loop and SLP vectorizers) makes registers.
- nothing is left undefined (LLVM would be free to return poison where C's x86 code returns a value): integer division
  selects a safe divisor *before* dividing (x/0 -> -x, x%0 -> 0, INT_MIN/-1 wraps, as CStyleRenderer.render_int_div);
  shift amounts are masked to the register width like x86 does, and 8/16-bit shifts run in i32 like C's promotion;
  float->int conversion answers NaN and out-of-range values with x86's "integer indefinite" (INT64_MIN through the int64
  path, all ones for uint64), which is what the clang-compiled CPU kernels return on x86-64.
"""
from __future__ import annotations
import struct
from tinyweb.dtype import DType, dtypes
from tinyweb.uop import UOp, Ops
from tinyweb.codegen.program import Program
from tinyweb.codegen.lowering import reduce_identity
from tinyweb.codegen.renderer import Renderer

REG = {dtypes.bool: "i1", dtypes.int8: "i8", dtypes.uint8: "i8", dtypes.int16: "i16", dtypes.uint16: "i16", dtypes.int32: "i32",
       dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "float", dtypes.bfloat16: "float",
       dtypes.float32: "float", dtypes.float64: "double"}
MEM = {**REG, dtypes.bool: "i8", dtypes.float16: "half", dtypes.bfloat16: "i16"}
WIDTH = {"i1": 1, "i8": 8, "i16": 16, "i32": 32, "i64": 64, "half": 16, "float": 32, "double": 64}
INTRINSICS = {Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.SIN: "sin", Ops.COS: "cos", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc"}
# binary ops that are one instruction: (float, bool, integer) forms
SIMPLE = {Ops.ADD: ("fadd", "or", "add"), Ops.MUL: ("fmul", "and", "mul"), Ops.FDIV: ("fdiv", None, None),
          Ops.AND: (None, "and", "and"), Ops.OR: (None, "or", "or"), Ops.XOR: (None, "xor", "xor")}
COMPARE = {Ops.CMPLT: "<", Ops.CMPNE: "!=", Ops.CMPEQ: "=="}
FCMP = {"<": "olt", ">": "ogt", "==": "oeq", "!=": "une"}   # != is true for NaN, like C
ICMP = {"<": "lt", ">": "gt", "==": "eq", "!=": "ne"}

# bfloat16 <-> float on the bits, like ClangRenderer's tw_f32_to_bf16 / tw_bf16_to_f32 (NaN -> 0x7fc0, else nearest even)
BF16_HELPERS = """define internal i16 @tw_f32_to_bf16(float %f) alwaysinline nounwind {
  %u = bitcast float %f to i32
  %hi = lshr i32 %u, 16
  %odd = and i32 %hi, 1
  %bias = add i32 %odd, 32767
  %sum = add i32 %u, %bias
  %top = lshr i32 %sum, 16
  %bits = trunc i32 %top to i16
  %nan = fcmp uno float %f, 0.0
  %out = select i1 %nan, i16 32704, i16 %bits
  ret i16 %out
}
define internal float @tw_bf16_to_f32(i16 %b) alwaysinline nounwind {
  %w = zext i16 %b to i32
  %u = shl i32 %w, 16
  %f = bitcast i32 %u to float
  ret float %f
}
"""

def const(v, dt: DType) -> str:
  """An LLVM literal of `dt`'s register type: floats as the hex of their double (exact, also for inf and NaN)."""
  if dt.is_bool: return "true" if v else "false"
  if dt.is_float: return f"0x{struct.unpack('<Q', struct.pack('<d', float(v)))[0]:016X}"
  v = int(v) & ((1 << dt.bits) - 1)
  return str(v - (1 << dt.bits) if v >> (dt.bits - 1) else v)   # two's complement: LLVM reads iN literals as signed

class _Function:
  """The function being written: allocas (they go first, in the entry block), the body lines, fresh SSA names and the
  declarations the body needs."""
  def __init__(self):
    self.allocas: list[str] = []
    self.lines: list[str] = []
    self.counts: dict[str, int] = {}
    self.decls: set[str] = set()
  def fresh(self, prefix: str) -> str:
    self.counts[prefix] = self.counts.get(prefix, -1) + 1
    return f"{prefix}{self.counts[prefix]}"
  def op(self, expr: str, prefix: str = "t") -> str:
    """Emit `%name = expr` and return %name."""
    name = "%" + self.fresh(prefix)
    self.lines.append(f"  {name} = {expr}")
    return name
  def emit(self, line: str): self.lines.append("  " + line)
  def label(self, name: str): self.lines.append(f"{name}:")

class LLVMRenderer(Renderer):
  device = "LLVM"
  core_split = True   # like C on the CPU: the outermost output loop runs [core_lo, core_hi), the runtime splits it

  def render(self, prog: Program) -> str:
    f = _Function()
    names: dict[UOp, str] = {}
    accs: dict[UOp, str] = {}   # REDUCE -> its accumulator's alloca
    def r(u: UOp) -> str:
      if u.op is Ops.CONST: return const(u.arg, u.dtype)
      if u in accs: return f.op(f"load {REG[u.dtype]}, ptr {accs[u]}")
      return names[u]
    params = []
    for g in prog.globals:
      names[g] = f"%data{g.arg[0]}"
      params.append(f"ptr noalias {names[g]}")
    split = self.core_split and prog.parallel_range is not None
    if split: params += ["i32 %core_lo", "i32 %core_hi"]
    for u in prog.uops:
      op = u.op
      if op in (Ops.CONST, Ops.DEFINE_GLOBAL, Ops.SINK, Ops.REDUCE): continue
      if op is Ops.RANGE:   # head: test the counter; body; ENDRANGE increments it and jumps back to the head
        n = f.fresh("ridx")
        lo, hi = ("%core_lo", "%core_hi") if split and u is prog.parallel_range else ("0", r(u.src[0]))
        if lo == "%core_lo" and REG[u.dtype] != "i32": lo, hi = (f.op(f"sext i32 {x} to {REG[u.dtype]}") for x in (lo, hi))   # (64-bit index math)
        f.allocas.append(f"  %{n}.addr = alloca {REG[u.dtype]}")
        f.emit(f"store {REG[u.dtype]} {lo}, ptr %{n}.addr")
        f.emit(f"br label %{n}.head")
        f.label(f"{n}.head")
        names[u] = f"%{n}"
        f.emit(f"%{n} = load {REG[u.dtype]}, ptr %{n}.addr")
        f.emit(f"br i1 {self.compare(f, '<', names[u], hi, u.dtype)}, label %{n}.body, label %{n}.exit")
        f.label(f"{n}.body")
      elif op is Ops.ENDRANGE:
        rng = u.src[0]
        n = names[rng][1:]
        f.emit(f"store {REG[rng.dtype]} {f.op(f'add nsw {REG[rng.dtype]} {names[rng]}, 1')}, ptr %{n}.addr")
        f.emit(f"br label %{n}.head")
        f.label(f"{n}.exit")
      elif op is Ops.DEFINE_ACC:
        red = u.src[0]
        accs[red] = "%" + f.fresh("acc")
        f.allocas.append(f"  {accs[red]} = alloca {REG[u.dtype]}")
        init = r(u.src[1]) if len(u.src) > 1 else const(reduce_identity(red.arg, u.dtype), u.dtype)
        f.emit(f"store {REG[u.dtype]} {init}, ptr {accs[red]}")
      elif op is Ops.ACC_UPDATE:
        red, *vals = u.src
        if len(vals) == 2:   # a fused product (linearize.fused_products): float32
          f.decls.add("declare float @llvm.fma.f32(float, float, float)")
          upd = f.op(f"call float @llvm.fma.f32(float {r(vals[0])}, float {r(vals[1])}, float {r(red)})")
        else: upd = self.round_result(f, self.render_alu(f, red.arg, [r(red), r(vals[0])], u.dtype, u.dtype, [red, vals[0]]), u.dtype)
        f.emit(f"store {REG[u.dtype]} {upd}, ptr {accs[red]}")
      elif op is Ops.LOAD:
        buf, idx, gate = r(u.src[0]), r(u.src[1]), r(u.src[2]) if len(u.src) > 2 else None
        # a gated load reads element 0 where the gate is off (C's ?: would not read at all), then selects 0
        if gate: idx = f.op(f"select i1 {gate}, {REG[u.src[1].dtype]} {idx}, {REG[u.src[1].dtype]} 0")
        ptr = f.op(f"getelementptr inbounds {MEM[u.dtype]}, ptr {buf}, {REG[u.src[1].dtype]} {idx}")
        val = self.from_mem(f, f.op(f"load {MEM[u.dtype]}, ptr {ptr}, align {u.dtype.itemsize}"), u.dtype)
        if gate: val = f.op(f"select i1 {gate}, {REG[u.dtype]} {val}, {REG[u.dtype]} {const(0, u.dtype)}")
        names[u] = val
      elif op is Ops.STORE:
        buf, idx, val = u.src
        ptr = f.op(f"getelementptr inbounds {MEM[val.dtype]}, ptr {r(buf)}, {REG[idx.dtype]} {r(idx)}")
        f.emit(f"store {MEM[val.dtype]} {self.to_mem(f, r(val), val.dtype)}, ptr {ptr}, align {val.dtype.itemsize}")
      elif op is Ops.SPECIAL: raise NotImplementedError(f"{type(self).__name__}: no thread indices (a CPU target): {u.arg}")
      else:
        srcs = [r(s) for s in u.src]
        if op is Ops.CAST: names[u] = self.render_cast(f, srcs[0], u.dtype, u.src[0].dtype)
        elif op is Ops.BITCAST: names[u] = self.render_bitcast(f, srcs[0], u.dtype, u.src[0].dtype)
        else: names[u] = self.round_result(f, self.render_alu(f, op, srcs, u.dtype, u.src[0].dtype, list(u.src)), u.dtype)
    head = f"define void @{prog.name}({', '.join(params)}) nounwind {{\nentry:"
    return "\n".join([*sorted(f.decls), head, *f.allocas, *f.lines, "  ret void", "}", ""])

  # ---- ops: each takes operands as LLVM values (literals or %names), emits instructions into `f`, returns the result ----
  def compare(self, f: _Function, rel: str, a: str, b: str, dt: DType) -> str:
    if dt.is_float: return f.op(f"fcmp {FCMP[rel]} {REG[dt]} {a}, {b}")
    pred = ICMP[rel] if rel in ("==", "!=") else ("s" if dt.kind == "i" else "u") + ICMP[rel]   # bool compares unsigned
    return f.op(f"icmp {pred} {REG[dt]} {a}, {b}")

  def render_alu(self, f: _Function, op: Ops, s: list[str], dt: DType, sdt: DType, src_uops: list[UOp]) -> str:
    t = REG[sdt]
    if op is Ops.MOD and sdt.is_float: return f.op(f"frem {t} {s[0]}, {s[1]}")   # C's fmod
    if op in (Ops.IDIV, Ops.MOD): return self.render_int_div(f, op, s[0], s[1], dt, src_uops[1])
    if op in SIMPLE and (ins := SIMPLE[op][0 if sdt.is_float else 1 if sdt.is_bool else 2]) is not None:
      return f.op(f"{ins} {t} {s[0]}, {s[1]}")
    if op in INTRINSICS and sdt.is_float:
      fn = f"@llvm.{INTRINSICS[op]}.f{WIDTH[t]}"
      f.decls.add(f"declare {t} {fn}({t})")
      return f.op(f"call {t} {fn}({t} {s[0]})")
    if op is Ops.NEG:
      return f.op(f"fneg {t} {s[0]}" if sdt.is_float else f"xor i1 {s[0]}, true" if sdt.is_bool else f"sub {t} 0, {s[0]}")
    if op is Ops.RECIP and sdt.is_float: return f.op(f"fdiv {t} {const(1.0, sdt)}, {s[0]}")
    if op in COMPARE: return self.compare(f, COMPARE[op], s[0], s[1], sdt)
    if op in (Ops.MAX, Ops.MIN):   # a if a>b (a<b) else b; NaN-propagating like PyTorch: a NaN `a` wins too
      pick = self.compare(f, ">" if op is Ops.MAX else "<", s[0], s[1], sdt)
      if sdt.is_float: pick = f.op(f"or i1 {pick}, {f.op(f'fcmp uno {t} {s[0]}, {s[0]}')}")
      return f.op(f"select i1 {pick}, {t} {s[0]}, {t} {s[1]}")
    if op is Ops.WHERE: return f.op(f"select i1 {s[0]}, {REG[dt]} {s[1]}, {REG[dt]} {s[2]}")
    if op in (Ops.SHL, Ops.SHR) and dt.is_int: return self.render_shift(f, op, s[0], s[1], dt)
    raise NotImplementedError(f"{type(self).__name__}: no rendering for {op} on {sdt.name}")

  def render_shift(self, f: _Function, op: Ops, a: str, b: str, dt: DType) -> str:
    """C promotes 8/16-bit operands to int before shifting; x86 masks the shift amount to the register width."""
    t, w = REG[dt], max(WIDTH[REG[dt]], 32)
    if WIDTH[t] < w:
      ext = "sext" if dt.kind == "i" else "zext"
      a, b = f.op(f"{ext} {t} {a} to i{w}"), f.op(f"{ext} {t} {b} to i{w}")
    ins = "shl" if op is Ops.SHL else "ashr" if dt.kind == "i" else "lshr"
    out = f.op(f"{ins} i{w} {a}, {f.op(f'and i{w} {b}, {w - 1}')}")
    return out if WIDTH[t] == w else f.op(f"trunc i{w} {out} to {t}")

  def render_int_div(self, f: _Function, op: Ops, a: str, b: str, dt: DType, divisor: UOp) -> str:
    t, signed = REG[dt], dt.kind == "i"
    ins = ("sdiv" if signed else "udiv") if op is Ops.IDIV else ("srem" if signed else "urem")
    if divisor.op is Ops.CONST and divisor.arg not in (0, -1): return f.op(f"{ins} {t} {a}, {b}")
    # x/0 and INT_MIN/-1 are undefined in LLVM: divide by 1 there instead, then select the CPU device's answer
    special = self.compare(f, "==", b, "0", dt)
    if signed:
      overflow = f.op(f"and i1 {self.compare(f, '==', b, '-1', dt)}, {self.compare(f, '==', a, const(dt.min, dt), dt)}")
      special = f.op(f"or i1 {special}, {overflow}")
    q = f.op(f"{ins} {t} {a}, {f.op(f'select i1 {special}, {t} 1, {t} {b}')}")
    # x/0 = x%0 = 0; INT_MIN/-1 wraps to INT_MIN (= 0 - INT_MIN), INT_MIN%-1 = 0
    fallback = f.op(f"select i1 {self.compare(f, '==', b, '0', dt)}, {t} 0, {t} {f.op(f'sub {t} 0, {a}')}") \
      if signed and op is Ops.IDIV else "0"
    return f.op(f"select i1 {special}, {t} {fallback}, {t} {q}")

  def round_result(self, f: _Function, v: str, dt: DType) -> str:
    """float16/bfloat16 compute in float: round to the dtype after every op (through its memory form)."""
    return self.from_mem(f, self.to_mem(f, v, dt), dt) if dt in (dtypes.float16, dtypes.bfloat16) else v

  def to_mem(self, f: _Function, v: str, dt: DType) -> str:
    """A register value -> its memory form."""
    if dt.is_bool: return f.op(f"zext i1 {v} to i8")
    if dt == dtypes.float16: return f.op(f"fptrunc float {v} to half")
    if dt == dtypes.bfloat16:
      f.decls.add(BF16_HELPERS)
      return f.op(f"call i16 @tw_f32_to_bf16(float {v})")
    return v

  def from_mem(self, f: _Function, v: str, dt: DType) -> str:
    """A value in memory form -> its register form."""
    if dt.is_bool: return f.op(f"icmp ne i8 {v}, 0")
    if dt == dtypes.float16: return f.op(f"fpext half {v} to float")
    if dt == dtypes.bfloat16:
      f.decls.add(BF16_HELPERS)
      return f.op(f"call float @tw_bf16_to_f32(i16 {v})")
    return v

  def render_bitcast(self, f: _Function, x: str, dt: DType, sdt: DType) -> str:
    bits = self.to_mem(f, x, sdt)
    if MEM[sdt] != MEM[dt]: bits = f.op(f"bitcast {MEM[sdt]} {bits} to {MEM[dt]}")
    return self.from_mem(f, bits, dt)

  def render_cast(self, f: _Function, x: str, dt: DType, sdt: DType) -> str:
    st, t = REG[sdt], REG[dt]
    if dt.is_bool: return x if sdt.is_bool else self.compare(f, "!=", x, const(0, sdt), sdt)
    if dt.is_int and sdt.is_float: return self.float_to_int(f, x, dt, sdt)
    if dt.is_int:
      if WIDTH[st] == WIDTH[t]: return x
      if WIDTH[st] > WIDTH[t]: return f.op(f"trunc {st} {x} to {t}")
      return f.op(f"{'sext' if sdt.kind == 'i' else 'zext'} {st} {x} to {t}")
    if sdt.is_float: v = x if st == t else f.op(f"{'fpext' if WIDTH[st] < WIDTH[t] else 'fptrunc'} {st} {x} to {t}")
    else: v = f.op(f"{'sitofp' if sdt.kind == 'i' else 'uitofp'} {st} {x} to {t}")
    return self.round_result(f, v, dt)   # e.g. int -> float16 rounds to float, then to half, as C does

  def float_to_int(self, f: _Function, x: str, dt: DType, sdt: DType) -> str:
    """Like the CPU device's C: through int64 so out-of-range values wrap (uint64 directly). fptosi/fptoui give poison
    for NaN and out-of-range inputs, so those get x86's answer explicitly: INT64_MIN (int64 path), all ones (uint64)."""
    st = REG[sdt]
    if dt == dtypes.uint64: (lo_rel, lo), hi, ins, bad = ("ogt", -1.0), 2.0**64, "fptoui", "-1"
    else: (lo_rel, lo), hi, ins, bad = ("oge", -2.0**63), 2.0**63, "fptosi", const(dtypes.int64.min, dtypes.int64)
    ok = f.op(f"and i1 {f.op(f'fcmp {lo_rel} {st} {x}, {const(lo, sdt)}')}, {f.op(f'fcmp olt {st} {x}, {const(hi, sdt)}')}")
    v = f.op(f"{ins} {st} {f.op(f'select i1 {ok}, {st} {x}, {st} 0.0')} to i64")
    v = f.op(f"select i1 {ok}, i64 {v}, i64 {bad}")
    return v if REG[dt] == "i64" else f.op(f"trunc i64 {v} to {REG[dt]}")
