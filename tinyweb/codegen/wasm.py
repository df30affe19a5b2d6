"""WebAssembly for the WASM device: a linear kernel program becomes one function of a module in the WebAssembly text
format (a plain subset of it: one instruction a line, no folded expressions), and `assemble` turns that text into the
binary format. Both are pure Python, so the modules can be built inside Pyodide too; backends/wasm.py runs them.

The module imports one linear memory ("env" "memory") that holds every buffer: a kernel's arguments are the buffers'
byte addresses in it (i32). Each value of the program is a local; a loop is `block` + `loop` with the test at the top;
a gated load is an `if` that reads only where the gate is on.

It computes what the CPU device (C via clang) computes, with the same dtype rules, where wasm would trap or differ:
- registers: bool and the integers up to 32 bits are i32, kept sign- or zero-extended from their width after every op
  (C's promotion to int, then the truncation of the assignment); 64-bit integers i64; float16/bfloat16 compute in f32 and
  are rounded after every op; memory: bool is a byte, float16 its IEEE half bits, bfloat16 its 16-bit pattern (converted
  by helper functions of the module, rounding to nearest even like the C helpers).
- integer division by zero and INT_MIN / -1 trap in wasm: the division runs only where the divisor is safe, else the
  CPU device's answer (x/0 = x%0 = 0, INT_MIN/-1 wraps to INT_MIN, INT_MIN%-1 = 0).
- float -> int: wasm's `trunc` traps on NaN and out-of-range values, so the saturating `trunc_sat` runs and NaN and
  out-of-range inputs get x86's "integer indefinite" (INT64_MIN through the int64 path, all ones for uint64), which is
  what the clang-compiled CPU kernels return on x86-64. Shift amounts wrap at the register width like x86's.
- max/min propagate NaN and pick like C's ternary (wasm's f32.max differs on NaN and signed zeros).
- wasm has no sin, cos, exp2, log2 or fmod: float32 exp2 and log2 are the CPU device's polynomials and float32 sin and
  cos a reduction and series in float64 (tw_trigf), in the module; the rest the module imports from the host ("math"
  "sin", ..., on float64; a float32 result is the double one rounded).
"""
from __future__ import annotations
import math, re, struct
from tinyweb.dtype import DType, dtypes
from tinyweb.uop import UOp, Ops
from tinyweb.codegen.program import Program
from tinyweb.codegen.lowering import reduce_identity
from tinyweb.codegen.renderer import Renderer
from tinyweb.codegen.vectors import vector_groups, unused_addresses, accumulator_inits, lane_stride
from tinyweb.scalar import EXP2F_COEFFS, LOG2F_COEFFS, FLT_MIN, SQRT2_F32, f32

REG = {dtypes.bool: "i32", dtypes.int8: "i32", dtypes.uint8: "i32", dtypes.int16: "i32", dtypes.uint16: "i32",
       dtypes.int32: "i32", dtypes.uint32: "i32", dtypes.int64: "i64", dtypes.uint64: "i64", dtypes.float16: "f32",
       dtypes.bfloat16: "f32", dtypes.float32: "f32", dtypes.float64: "f64"}
# dtype -> (load, store) instructions of its memory form (float16/bfloat16: the 16 bits, converted by helpers)
MEMORY = {dtypes.bool: ("i32.load8_u", "i32.store8"), dtypes.int8: ("i32.load8_s", "i32.store8"),
          dtypes.uint8: ("i32.load8_u", "i32.store8"), dtypes.int16: ("i32.load16_s", "i32.store16"),
          dtypes.uint16: ("i32.load16_u", "i32.store16"), dtypes.int32: ("i32.load", "i32.store"),
          dtypes.uint32: ("i32.load", "i32.store"), dtypes.int64: ("i64.load", "i64.store"),
          dtypes.uint64: ("i64.load", "i64.store"), dtypes.float16: ("i32.load16_u", "i32.store16"),
          dtypes.bfloat16: ("i32.load16_u", "i32.store16"), dtypes.float32: ("f32.load", "f32.store"),
          dtypes.float64: ("f64.load", "f64.store")}
# the host's math, on float64 (backends/wasm.py provides them)
IMPORTED_MATH = {Ops.SIN: "sin", Ops.COS: "cos", Ops.EXP2: "exp2", Ops.LOG2: "log2", Ops.MOD: "fmod"}
# the linear memory's layout, for the WASM device (backends/wasm.py) and exported models (tinyweb.export) alike
ALIGN = 64          # every buffer starts on a cache line (and a 16-byte SIMD lane group)
PAGE = 65536        # wasm's page size
MAX_PAGES = 65536   # wasm32: 4 GiB

# helper functions a kernel may call, in the text format (added to the module where used)
HELPERS = {
  # float -> IEEE half bits, rounded to nearest even; too large -> inf, tiny -> denormals; a NaN keeps the top 10 bits of
  # its payload (a half's NaN survives the round trip through float, as the CPU device's bitcasts keep it), or is the
  # quiet NaN where those are 0
  "tw_f32_to_f16": """(func $tw_f32_to_f16 (param $f f32) (result i32) (local $u i32) (local $sign i32) (local $m i32)
    local.get $f
    i32.reinterpret_f32
    local.tee $u
    i32.const 16
    i32.shr_u
    i32.const 32768
    i32.and
    local.set $sign
    local.get $u
    i32.const 2147483647
    i32.and
    local.tee $u
    i32.const 2139095040
    i32.gt_u
    if (result i32)
      local.get $u
      i32.const 13
      i32.shr_u
      i32.const 1023
      i32.and
      local.tee $m
      i32.const 512
      local.get $m
      select
      i32.const 31744
      i32.or
    else
      local.get $u
      i32.const 1199566848
      i32.ge_u
      if (result i32)
        i32.const 31744
      else
        local.get $u
        i32.const 947912704
        i32.lt_u
        if (result i32)
          local.get $u
          f32.reinterpret_i32
          f32.const 0.5
          f32.add
          i32.reinterpret_f32
          i32.const 1056964608
          i32.sub
        else
          local.get $u
          i32.const -939520001
          i32.add
          local.get $u
          i32.const 13
          i32.shr_u
          i32.const 1
          i32.and
          i32.add
          i32.const 13
          i32.shr_u
        end
      end
    end
    local.get $sign
    i32.or
  )""",
  # IEEE half bits (the low 16 of the argument) -> float (exact)
  "tw_f16_to_f32": """(func $tw_f16_to_f32 (param $h i32) (result f32) (local $e i32)
    local.get $h
    i32.const 10
    i32.shr_u
    i32.const 31
    i32.and
    local.tee $e
    i32.eqz
    if (result f32)
      local.get $h
      i32.const 1023
      i32.and
      f32.convert_i32_u
      f32.const 0x1p-24
      f32.mul
    else
      local.get $h
      i32.const 32767
      i32.and
      i32.const 13
      i32.shl
      i32.const 1879048192
      i32.const 939524096
      local.get $e
      i32.const 31
      i32.eq
      select
      i32.add
      f32.reinterpret_i32
    end
    i32.reinterpret_f32
    local.get $h
    i32.const 32768
    i32.and
    i32.const 16
    i32.shl
    i32.or
    f32.reinterpret_i32
  )""",
  # float -> bfloat16 bits: NaN -> 0x7fc0, else rounded to nearest even (ClangRenderer's tw_f32_to_bf16)
  "tw_f32_to_bf16": """(func $tw_f32_to_bf16 (param $f f32) (result i32) (local $u i32)
    local.get $f
    local.get $f
    f32.ne
    if (result i32)
      i32.const 32704
    else
      local.get $f
      i32.reinterpret_f32
      local.tee $u
      i32.const 32767
      i32.add
      local.get $u
      i32.const 16
      i32.shr_u
      i32.const 1
      i32.and
      i32.add
      i32.const 16
      i32.shr_u
    end
  )""",
}

def _horner(x: str, coeffs: list[float], t: str = "f32") -> str:
  """Instructions leaving c0 + x*(c1 + x*(...)) on the stack, a multiply and an add a step (the C prelude's TW_MAD without
  fma: wasm has no scalar fused multiply-add); x is a local of type t."""
  steps = [f"{t}.const {coeffs[-1].hex()}"]
  for c in reversed(coeffs[:-1]): steps += [f"local.get {x}", f"{t}.mul", f"{t}.const {c.hex()}", f"{t}.add"]
  return "\n    ".join(steps)

# float32 exp2 and log2: the CPU device's (ClangRenderer's prelude: tw_exp2f, tw_log2f; tinyweb.scalar has them op for op),
# within 1 / 3 ulp of libm's; run in the module (a call into the host per element would cost a microsecond)
HELPERS["tw_exp2f"] = f"""(func $tw_exp2f (param $x f32) (result f32) (local $c f32) (local $f f32) (local $n i32) (local $n1 i32)
    f32.const -150
    f32.const 128
    local.get $x
    local.get $x
    f32.const 128
    f32.gt
    select
    local.get $x
    f32.const -150
    f32.lt
    select
    local.tee $c
    local.get $c
    f32.nearest
    local.tee $f
    i32.trunc_sat_f32_s
    local.set $n
    local.get $f
    f32.sub
    local.set $f
    {_horner("$f", EXP2F_COEFFS)}
    local.get $f
    f32.mul
    f32.const 1
    f32.add
    local.get $n
    i32.const 1
    i32.shr_s
    local.tee $n1
    i32.const 127
    i32.add
    i32.const 23
    i32.shl
    f32.reinterpret_i32
    f32.mul
    local.get $n
    local.get $n1
    i32.sub
    i32.const 127
    i32.add
    i32.const 23
    i32.shl
    f32.reinterpret_i32
    f32.mul
    local.get $x
    local.get $x
    local.get $x
    f32.eq
    select
  )"""
HELPERS["tw_log2f"] = f"""(func $tw_log2f (param $x f32) (result f32) (local $b i32) (local $e i32) (local $m f32) (local $s f32) (local $s2 f32) (local $sub i32) (local $big i32)
    local.get $x
    f32.const 8388608
    f32.mul
    local.get $x
    local.get $x
    f32.const {FLT_MIN.hex()}
    f32.lt
    local.tee $sub
    select
    i32.reinterpret_f32
    local.tee $b
    i32.const 23
    i32.shr_s
    i32.const 255
    i32.and
    i32.const 150
    i32.const 127
    local.get $sub
    select
    i32.sub
    local.set $e
    local.get $b
    i32.const 8388607
    i32.and
    i32.const 1065353216
    i32.or
    f32.reinterpret_i32
    local.tee $m
    f32.const {SQRT2_F32.hex()}
    f32.gt
    local.tee $big
    local.get $e
    i32.add
    local.set $e
    local.get $m
    f32.const 0.5
    f32.mul
    local.get $m
    local.get $big
    select
    local.tee $m
    f32.const 1
    f32.sub
    local.get $m
    f32.const 1
    f32.add
    f32.div
    local.tee $s
    local.get $s
    f32.mul
    local.set $s2
    local.get $e
    f32.convert_i32_s
    {_horner("$s2", LOG2F_COEFFS)}
    local.get $s
    f32.mul
    f32.add
    f32.const -inf
    local.get $x
    f32.const nan
    local.get $x
    f32.const inf
    f32.eq
    select
    local.get $x
    f32.const 0
    f32.eq
    select
    local.get $x
    f32.const 0
    f32.gt
    local.get $x
    f32.const inf
    f32.lt
    i32.and
    select
  )"""

# float32 sin and cos in the module, in float64: the argument less the nearest multiple k of pi/2 (pi/2 in three parts:
# 25, 25 and 53 bits, so k*PIO2_1 and k*PIO2_2 are exact for k < 2^28 and the remainder loses nothing that matters to a
# float32), then the Taylor series of sin or cos of the remainder (|r| <= pi/4: the first omitted term is below 3e-14
# of the result), the quadrant picking which and its sign; the double rounded to float32 is within an ulp of the true
# value. Past 2^28 (and for inf and NaN) the host's float64 sin/cos, which reduce the argument exactly. A call into the
# host costs a microsecond natively (wasmtime's Python bindings): RoPE's sin/cos, recomputed for every element they
# fuse into, made Gemma's WASM step 20x slower than its matrix products.
PIO2_1, PIO2_2, PIO2_3 = map(float.fromhex, ("0x1.921fb5p+0", "0x1.110b46p-26", "0x1.1a62633145c07p-54"))
SIN_COEFFS = [(-1) ** k / math.factorial(2 * k + 1) for k in range(7)]   # sin r = r (1 + r^2 (-1/3! + r^2 (...))) (-0.0 kept)
COS_COEFFS = [(-1) ** k / math.factorial(2 * k) for k in range(8)]       # cos r = 1 + r^2 (-1/2! + r^2 (...))
HELPERS["tw_trigf"] = f"""(func $tw_trigf (param $x f32) (param $cos i32) (result f32) (local $d f64) (local $k f64) (local $r f64) (local $r2 f64) (local $q i32) (local $v f64)
    local.get $x
    f64.promote_f32
    local.tee $d
    f64.abs
    f64.const 0x1p28
    f64.lt
    if (result f32)
      local.get $d
      f64.abs
      f64.const {(math.pi / 4).hex()}
      f64.le
      if
        local.get $d
        local.set $r
      else
        local.get $d
        f64.const {(2 / math.pi).hex()}
        f64.mul
        f64.nearest
        local.tee $k
        i32.trunc_f64_s
        local.set $q
        local.get $d
        local.get $k
        f64.const {PIO2_1.hex()}
        f64.mul
        f64.sub
        local.get $k
        f64.const {PIO2_2.hex()}
        f64.mul
        f64.sub
        local.get $k
        f64.const {PIO2_3.hex()}
        f64.mul
        f64.sub
        local.set $r
      end
      local.get $r
      local.get $r
      f64.mul
      local.set $r2
      local.get $q
      local.get $cos
      i32.add
      local.tee $q
      i32.const 1
      i32.and
      if (result f64)
        {_horner("$r2", COS_COEFFS, "f64")}
      else
        local.get $r
        {_horner("$r2", SIN_COEFFS, "f64")}
        f64.mul
      end
      local.tee $v
      f64.neg
      local.get $v
      local.get $q
      i32.const 2
      i32.and
      select
      f32.demote_f64
    else
      local.get $d
      call $cos
      local.get $d
      call $sin
      local.get $cos
      select
      f32.demote_f64
    end
  )"""

def const(v, dt: DType) -> str:
  """The instruction pushing constant v of dt (floats as exact hex; integers as the register's two's complement)."""
  t = REG[dt]
  if dt.is_float:
    v = float(v)
    if v != v: return f"{t}.const nan"
    return f"{t}.const {'-' if v < 0 else ''}inf" if v in (float('inf'), float('-inf')) else f"{t}.const {v.hex()}"
  bits = 64 if t == "i64" else 32
  v = int(v) & ((1 << bits) - 1)
  return f"{t}.const {v - (1 << bits) if v >> (bits - 1) else v}"

class WASMRenderer(Renderer):
  device = "WASM"
  # SIMD128's f32x4, which the engines map to SSE's or NEON's 16 registers: a 1024 matmul at 8 accumulators 24.7
  # GFLOP/s natively (wasmtime), at 24 (the CPU's 28) 15.4, scalar 3.9
  vector_lanes, vector_registers = 4, 16

  def render(self, prog: Program) -> str:
    return _Kernel(prog, self.vector_lanes).text()

class _Kernel:
  """The text of one kernel's module: its locals, body lines, and the imports and helpers the body uses. Vector groups
  (codegen/vectors.py: the copies an UPCAST makes along the last axis) are written as one f32x4 op each, at the group's
  first lane in program order; a scalar use of one lane extracts it."""
  def __init__(self, prog: Program, lanes: int):
    self.prog = prog
    self.inits = accumulator_inits(prog)
    self.vec = vector_groups(prog, lanes, self.inits)
    self.unused = unused_addresses(prog, self.vec) if self.vec else set()
    self.vnames: dict[tuple[UOp, ...], str] = {}   # a group's v128 local
    self.emitted: set = set()                      # (group, op): written
    self.locals: list[tuple[str, str]] = []
    self.lines: list[str] = []
    self.imports: set[str] = set()
    self.helpers: set[str] = set()
    self.names: dict[UOp, str] = {}
    self.depth = 1

  def fresh(self, prefix: str, t: str) -> str:
    name = f"${prefix}{len(self.locals)}"
    self.locals.append((name, t))
    return name
  def emit(self, *ins: str): self.lines.extend("  " * self.depth + i for i in ins)
  def push(self, u: UOp):
    if u in self.vec:
      lanes, lane = self.vec[u]
      self.emit(f"local.get {self.vnames[lanes]}", f"f32x4.extract_lane {lane}")
    else: self.emit(const(u.arg, u.dtype) if u.op is Ops.CONST else f"local.get {self.names[u]}")
  def call(self, helper: str):
    self.helpers.add(helper)
    self.emit(f"call ${helper}")
  def math(self, op: Ops, t: str):
    """The host's float64 function for op on the values on the stack (float32 through float64)."""
    name = IMPORTED_MATH[op]
    self.imports.add(name)
    n = 2 if op is Ops.MOD else 1
    if t == "f32":   # (one argument at a time: the first one is below the second)
      if n == 2:
        tmp = self.fresh("tmp", "f32")
        self.emit(f"local.set {tmp}", "f64.promote_f32", f"local.get {tmp}")
      self.emit("f64.promote_f32", f"call ${name}", "f32.demote_f64")
    else: self.emit(f"call ${name}")
  def define(self, u: UOp, prefix: str = "alu") -> str:
    """Store the value on the stack as u's local."""
    self.names[u] = self.fresh(prefix, REG[u.dtype])
    self.emit(f"local.set {self.names[u]}")
    return self.names[u]

  def text(self) -> str:
    prog = self.prog
    params = []
    for g in prog.globals:
      self.names[g] = f"$data{g.arg[0]}"
      params.append(f"(param {self.names[g]} i32)")
    for u in prog.uops: self.write(u)
    imports = [f'  (import "math" "{n}" (func ${n} (param{" f64" * (2 if n == "fmod" else 1)}) (result f64)))'
               for n in sorted(self.imports)]
    head = f'  (func ${prog.name} (export "{prog.name}") {" ".join(params)}'
    return "\n".join(['(module', '  (import "env" "memory" (memory 0))', *imports, *("  " + HELPERS[h] for h in sorted(self.helpers)),
                      head, *(f"    (local {n} {t})" for n, t in self.locals), *self.lines, "  )", ")", ""])

  def write(self, u: UOp):
    op = u.op
    if op in (Ops.CONST, Ops.DEFINE_GLOBAL, Ops.SINK, Ops.REDUCE) or u in self.unused: return
    if (m := self.vec.get(u.src[0] if op in (Ops.DEFINE_ACC, Ops.ACC_UPDATE) else u)) is not None:
      if (m[0], op) not in self.emitted:
        self.emitted.add((m[0], op))
        self.vector(u, *m)
      return
    if op is Ops.RANGE:   # block { loop { leave unless ridx < n; body; ridx += 1; again } }
      self.emit(const(0, u.dtype))
      self.define(u, "ridx")
      self.emit("block", "loop")
      self.depth += 1
      self.push(u)
      self.push(u.src[0])
      self.emit(f"{REG[u.dtype]}.lt_s", "i32.eqz", "br_if 1")
    elif op is Ops.ENDRANGE:
      rng, t = u.src[0], REG[u.src[0].dtype]
      self.push(rng)
      self.emit(const(1, rng.dtype), f"{t}.add", f"local.set {self.names[rng]}", "br 0")
      self.depth -= 1
      self.emit("end", "end")
    elif op is Ops.DEFINE_ACC:
      red = u.src[0]
      if len(u.src) > 1: self.push(u.src[1])
      else: self.emit(const(reduce_identity(red.arg, u.dtype), u.dtype))
      self.define(red, "acc")
    elif op is Ops.ACC_UPDATE:
      red, *vals = u.src
      if len(vals) != 1: raise NotImplementedError("WASMRenderer: no fused multiply-add (wasm has no scalar fma)")
      self.alu(red.arg, [red, vals[0]], u.dtype, u.dtype)
      self.round_result(u.dtype)
      self.emit(f"local.set {self.names[red]}")
    elif op is Ops.LOAD:
      if len(u.src) > 2:   # gated: read only where the gate is on, else 0
        self.push(u.src[2])
        self.emit(f"if (result {REG[u.dtype]})")
        self.depth += 1
        self.load(u)
        self.depth -= 1
        self.emit("else", "  " + const(0, u.dtype), "end")
      else: self.load(u)
      self.define(u, "val")
    elif op is Ops.STORE:
      buf, idx, val = u.src
      self.address(buf, idx, val.dtype)
      self.push(val)
      self.to_mem(val.dtype)
      self.emit(f"{MEMORY[val.dtype][1]} align={val.dtype.itemsize}")
    elif op is Ops.CAST:
      self.push(u.src[0])
      self.cast(u.src[0].dtype, u.dtype)
      self.define(u)
    elif op is Ops.BITCAST:   # through the bits: the register's memory form, as an integer of the same width
      sdt, bits = u.src[0].dtype, "i64" if u.dtype.itemsize == 8 else "i32"
      self.push(u.src[0])
      self.to_mem(sdt)
      if sdt in (dtypes.float32, dtypes.float64): self.emit(f"{bits}.reinterpret_{REG[sdt]}")
      if u.dtype in (dtypes.float32, dtypes.float64): self.emit(f"{REG[u.dtype]}.reinterpret_{bits}")
      self.from_mem(u.dtype)
      self.define(u)
    elif op in (Ops.SPECIAL, Ops.DEFINE_LOCAL, Ops.BARRIER, Ops.WMMA):
      raise NotImplementedError(f"WASMRenderer: no {op} (a CPU-style target: no threads, workgroups or tensor cores)")
    else:
      self.alu(op, list(u.src), u.dtype, u.src[0].dtype)
      self.round_result(u.dtype)
      self.define(u)

  # ---- vector groups ----
  def vector(self, u: UOp, lanes: tuple[UOp, ...], lane: int):
    """The f32x4 op of a group, written at its lane `lane` (the first in program order)."""
    def v(group: tuple[UOp, ...]):   # a group's vector, or a scalar (the same in every lane) splatted
      if group in self.vnames: self.emit(f"local.get {self.vnames[group]}")
      else: self.push(group[0]); self.emit("f32x4.splat")
    def srcs(i: int) -> tuple[UOp, ...]: return tuple(x.src[i] for x in lanes)
    step = lane_stride(lanes) if u.op in (Ops.LOAD, Ops.STORE) else 0
    def lane0_address():   # lane 0's byte address, from this lane's
      self.address(u.src[0], u.src[1], dtypes.float32)
      if lane: self.emit(f"i32.const {lane * step * 4}", "i32.sub")
    if u.op is Ops.STORE:
      lane0_address(); v(srcs(2))
      self.emit("v128.store align=4")
      return
    if u.op is Ops.ACC_UPDATE:   # (the lanes are the reductions: their values are the terms)
      acc = self.vnames[lanes]
      self.emit(f"local.get {acc}"); v(tuple(x.src[0] for x in lanes))
      self.emit(f"f32x4.{'add' if lanes[0].arg is Ops.ADD else 'mul'}", f"local.set {acc}")
      return
    if u.op is Ops.DEFINE_ACC:
      if len(u.src) > 1: v(tuple(self.inits[x] for x in lanes))
      else: self.emit(const(reduce_identity(lanes[0].arg, dtypes.float32), dtypes.float32), "f32x4.splat")
    elif u.op is Ops.LOAD:
      lane0_address()
      if step == 1: self.emit("v128.load align=4")
      else:   # a gather: lane 0's element, then the others a constant step apart
        base = self.fresh("addr", "i32")
        self.emit(f"local.tee {base}", "f32.load align=4", "f32x4.splat")
        for l in range(1, len(lanes)):
          self.emit(f"local.get {base}")
          if l * step < 0: self.emit(f"i32.const {-l * step * 4}", "i32.sub", "f32.load align=4")
          else: self.emit(f"f32.load offset={l * step * 4} align=4")
          self.emit(f"f32x4.replace_lane {l}")
    elif u.op is Ops.WHERE:
      v(srcs(1)); v(srcs(2)); self.push(u.src[0])
      self.emit("select")
    else:   # ADD, MUL
      v(srcs(0)); v(srcs(1))
      self.emit(f"f32x4.{'add' if u.op is Ops.ADD else 'mul'}")
    self.vnames[lanes] = self.fresh("vec", "v128")
    self.emit(f"local.set {self.vnames[lanes]}")

  # ---- memory ----
  def address(self, buf: UOp, idx: UOp, dt: DType):
    """buf's byte address + idx * itemsize (i32: the memory is 32-bit; an int64 index is wrapped)."""
    self.push(buf)
    self.push(idx)
    if REG[idx.dtype] == "i64": self.emit("i32.wrap_i64")
    if dt.itemsize > 1: self.emit(f"i32.const {dt.itemsize.bit_length() - 1}", "i32.shl")
    self.emit("i32.add")
  def load(self, u: UOp):
    self.address(u.src[0], u.src[1], u.dtype)
    self.emit(f"{MEMORY[u.dtype][0]} align={u.dtype.itemsize}")
    self.from_mem(u.dtype)
  def to_mem(self, dt: DType):
    """The register value on the stack -> its memory form (float16/bfloat16: the 16 bits)."""
    if dt == dtypes.float16: self.call("tw_f32_to_f16")
    elif dt == dtypes.bfloat16: self.call("tw_f32_to_bf16")
  def from_mem(self, dt: DType):
    """The memory form on the stack (16-bit floats: their bits, zero-extended) -> the register value."""
    if dt.is_bool: self.emit("i32.const 0", "i32.ne")
    elif dt == dtypes.float16: self.call("tw_f16_to_f32")
    elif dt == dtypes.bfloat16: self.emit("i32.const 16", "i32.shl", "f32.reinterpret_i32")
    elif dt.is_int: self.wrap(dt)
  def round_result(self, dt: DType):
    """float16/bfloat16 compute in float: round to the dtype after every op (through its memory form)."""
    if dt in (dtypes.float16, dtypes.bfloat16):
      self.to_mem(dt)
      self.from_mem(dt)
  def wrap(self, dt: DType):
    """An i32 register of an 8/16-bit integer: back to its width, sign- or zero-extended (C's truncation)."""
    if dt.itemsize >= 4 or dt.is_bool: return
    if dt.kind == "i": self.emit(f"i32.extend{dt.itemsize * 8}_s")
    else: self.emit(f"i32.const {(1 << dt.itemsize * 8) - 1}", "i32.and")

  # ---- ALU ops: push the operands, compute, leave the result on the stack ----
  def alu(self, op: Ops, srcs: list[UOp], dt: DType, sdt: DType):
    t, signed = REG[sdt], sdt.kind == "i"
    a = srcs[0]
    if op is Ops.WHERE:
      self.push(srcs[1]); self.push(srcs[2]); self.push(a)
      self.emit("select")
    elif op in (Ops.MAX, Ops.MIN):   # a if a>b (a<b) else b; NaN-propagating: a NaN `a` wins too
      rel = "gt" if op is Ops.MAX else "lt"
      for x in (a, srcs[1], a, srcs[1]): self.push(x)
      self.emit(f"{t}.{rel}" if sdt.is_float else f"{t}.{rel}_{'s' if signed else 'u'}")
      if sdt.is_float:
        self.push(a); self.push(a)
        self.emit(f"{t}.ne", "i32.or")
      self.emit("select")
    elif op in (Ops.IDIV, Ops.MOD) and not sdt.is_float: self.int_div(op, a, srcs[1], sdt)
    elif op is Ops.NEG:
      if sdt.is_float: self.push(a); self.emit(f"{t}.neg")
      elif sdt.is_bool: self.push(a); self.emit("i32.eqz")
      else:
        self.emit(const(0, sdt)); self.push(a); self.emit(f"{t}.sub")
        self.wrap(sdt)
    elif op is Ops.RECIP:
      self.emit(const(1.0, sdt)); self.push(a); self.emit(f"{t}.div")
    elif op in (Ops.EXP2, Ops.LOG2) and t == "f32":
      self.push(a)
      self.call("tw_exp2f" if op is Ops.EXP2 else "tw_log2f")
    elif op in (Ops.SIN, Ops.COS) and t == "f32":
      self.push(a)
      self.emit(f"i32.const {int(op is Ops.COS)}")
      self.call("tw_trigf")
      self.imports.update(("sin", "cos"))   # (its fallback past 2^28)
    elif op in IMPORTED_MATH and sdt.is_float:
      for x in srcs: self.push(x)
      self.math(op, t)
    else:
      for x in srcs: self.push(x)
      if sdt.is_float: ins = {Ops.ADD: "add", Ops.MUL: "mul", Ops.FDIV: "div", Ops.SQRT: "sqrt", Ops.TRUNC: "trunc",
                              Ops.CMPLT: "lt", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}.get(op)
      elif sdt.is_bool: ins = {Ops.ADD: "or", Ops.MUL: "and", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor",
                               Ops.CMPLT: "lt_u", Ops.CMPNE: "ne", Ops.CMPEQ: "eq"}.get(op)
      else: ins = {Ops.ADD: "add", Ops.MUL: "mul", Ops.AND: "and", Ops.OR: "or", Ops.XOR: "xor", Ops.SHL: "shl",
                   Ops.SHR: "shr_s" if signed else "shr_u", Ops.CMPLT: "lt_s" if signed else "lt_u", Ops.CMPNE: "ne",
                   Ops.CMPEQ: "eq"}.get(op)
      if ins is None: raise NotImplementedError(f"WASMRenderer: no rendering for {op} on {sdt.name}")
      self.emit(f"{t}.{ins}")
      if op in (Ops.ADD, Ops.MUL, Ops.SHL, Ops.SHR) and sdt.is_int: self.wrap(sdt)

  def int_div(self, op: Ops, a: UOp, b: UOp, dt: DType):
    """C's answers where wasm traps: x/0 = x%0 = 0; signed INT_MIN/-1 wraps (= -x), INT_MIN%-1 = 0. The division runs
    only with a safe divisor (an `if` on it), so it never traps."""
    t, signed = REG[dt], dt.kind == "i"
    ins = f"{t}.{'div' if op is Ops.IDIV else 'rem'}_{'s' if signed else 'u'}"
    def divide():
      self.push(a); self.push(b); self.emit(ins)
      self.wrap(dt)   # (int8 -128 / -1 is 128 in i32)
    if b.op is Ops.CONST and b.arg not in (0, -1): return divide()
    self.push(b)
    self.emit(f"{t}.eqz", f"if (result {t})", "  " + const(0, dt), "else")
    if signed:
      self.push(b)
      self.emit(const(-1, dt), f"{t}.eq", f"if (result {t})")
      if op is Ops.IDIV:
        self.emit(const(0, dt)); self.push(a); self.emit(f"{t}.sub")
        self.wrap(dt)
      else: self.emit(const(0, dt))
      self.emit("else")
      divide()
      self.emit("end")
    else: divide()
    self.emit("end")

  def cast(self, sdt: DType, dt: DType):
    """The value of sdt on the stack -> dt, as the CPU device's C casts it."""
    st, t = REG[sdt], REG[dt]
    if dt.is_bool:
      if not sdt.is_bool: self.emit(const(0, sdt), f"{st}.ne")
    elif dt.is_int and sdt.is_float: self.float_to_int(sdt, dt)
    elif dt.is_int:
      if st == "i64" and t == "i32": self.emit("i32.wrap_i64")
      elif st == "i32" and t == "i64": self.emit(f"i64.extend_i32_{'s' if sdt.kind == 'i' else 'u'}")
      self.wrap(dt)
    else:
      if sdt.is_float:
        if st != t: self.emit("f64.promote_f32" if t == "f64" else "f32.demote_f64")
      else: self.emit(f"{t}.convert_{st}_{'s' if sdt.kind == 'i' else 'u'}")
      self.round_result(dt)   # e.g. int -> float16 rounds to float, then to half, as C does

  def float_to_int(self, sdt: DType, dt: DType):
    """Like the CPU device's C: through int64 so out-of-range values wrap (uint64 directly); NaN and out-of-range inputs
    get x86's answer: INT64_MIN (int64 path), all ones (uint64). trunc_sat never traps; a select picks the answer."""
    st = REG[sdt]
    x = self.fresh("f", st)
    self.emit(f"local.tee {x}")
    if dt == dtypes.uint64: (lo_rel, lo), hi, sign, bad = ("gt", -1.0), 2.0**64, "u", const(-1, dtypes.int64)
    else: (lo_rel, lo), hi, sign, bad = ("ge", -2.0**63), 2.0**63, "s", const(dtypes.int64.min, dtypes.int64)
    self.emit(f"i64.trunc_sat_{st}_{sign}", bad, f"local.get {x}", const(lo, sdt), f"{st}.{lo_rel}", f"local.get {x}",
              const(hi, sdt), f"{st}.lt", "i32.and", "select")
    if REG[dt] == "i32": self.emit("i32.wrap_i64")
    self.wrap(dt)

# ---- the assembler: the text above -> the binary format ----

def _uleb(n: int) -> bytes:
  out = bytearray()
  while True:
    b, n = n & 0x7f, n >> 7
    out.append(b | (0x80 if n else 0))
    if not n: return bytes(out)
def _sleb(n: int) -> bytes:
  out = bytearray()
  while True:
    b, n = n & 0x7f, n >> 7
    done = (n == 0 and not b & 0x40) or (n == -1 and b & 0x40)
    out.append(b | (0 if done else 0x80))
    if done: return bytes(out)
def _vec(items: list[bytes]) -> bytes: return _uleb(len(items)) + b"".join(items)
def _name(s: str) -> bytes: return _vec([bytes([c]) for c in s.encode()])

VALTYPE = {"i32": 0x7f, "i64": 0x7e, "f32": 0x7d, "f64": 0x7c, "v128": 0x7b}
def _seq(start: int, names: str) -> dict[str, bytes]: return {n: bytes([start + i]) for i, n in enumerate(names.split())}
# the opcodes of the instructions the renderer writes (the spec's numbering: contiguous runs)
OPCODES = {"unreachable": b"\x00", "block": b"\x02", "loop": b"\x03", "if": b"\x04", "else": b"\x05", "end": b"\x0b",
           "br": b"\x0c", "br_if": b"\x0d", "call": b"\x10", "drop": b"\x1a", "select": b"\x1b",
           "local.get": b"\x20", "local.set": b"\x21", "local.tee": b"\x22",
           **_seq(0x28, "i32.load i64.load f32.load f64.load i32.load8_s i32.load8_u i32.load16_s i32.load16_u i64.load8_s "
                        "i64.load8_u i64.load16_s i64.load16_u i64.load32_s i64.load32_u i32.store i64.store f32.store f64.store "
                        "i32.store8 i32.store16 i64.store8 i64.store16 i64.store32"),
           **_seq(0x41, "i32.const i64.const f32.const f64.const"),
           **_seq(0x45, "i32.eqz i32.eq i32.ne i32.lt_s i32.lt_u i32.gt_s i32.gt_u i32.le_s i32.le_u i32.ge_s i32.ge_u "
                        "i64.eqz i64.eq i64.ne i64.lt_s i64.lt_u i64.gt_s i64.gt_u i64.le_s i64.le_u i64.ge_s i64.ge_u "
                        "f32.eq f32.ne f32.lt f32.gt f32.le f32.ge f64.eq f64.ne f64.lt f64.gt f64.le f64.ge"),
           **_seq(0x67, "i32.clz i32.ctz i32.popcnt i32.add i32.sub i32.mul i32.div_s i32.div_u i32.rem_s i32.rem_u i32.and "
                        "i32.or i32.xor i32.shl i32.shr_s i32.shr_u i32.rotl i32.rotr "
                        "i64.clz i64.ctz i64.popcnt i64.add i64.sub i64.mul i64.div_s i64.div_u i64.rem_s i64.rem_u i64.and "
                        "i64.or i64.xor i64.shl i64.shr_s i64.shr_u i64.rotl i64.rotr "
                        "f32.abs f32.neg f32.ceil f32.floor f32.trunc f32.nearest f32.sqrt f32.add f32.sub f32.mul f32.div "
                        "f32.min f32.max f32.copysign "
                        "f64.abs f64.neg f64.ceil f64.floor f64.trunc f64.nearest f64.sqrt f64.add f64.sub f64.mul f64.div "
                        "f64.min f64.max f64.copysign "
                        "i32.wrap_i64 i32.trunc_f32_s i32.trunc_f32_u i32.trunc_f64_s i32.trunc_f64_u i64.extend_i32_s "
                        "i64.extend_i32_u i64.trunc_f32_s i64.trunc_f32_u i64.trunc_f64_s i64.trunc_f64_u f32.convert_i32_s "
                        "f32.convert_i32_u f32.convert_i64_s f32.convert_i64_u f32.demote_f64 f64.convert_i32_s "
                        "f64.convert_i32_u f64.convert_i64_s f64.convert_i64_u f64.promote_f32 i32.reinterpret_f32 "
                        "i64.reinterpret_f64 f32.reinterpret_i32 f64.reinterpret_i64 "
                        "i32.extend8_s i32.extend16_s i64.extend8_s i64.extend16_s i64.extend32_s"),
           # SIMD128 (prefix 0xfd): the f32x4 ops vector groups use
           **{n: b"\xfd" + _uleb(i) for n, i in {"v128.load": 0, "v128.store": 11, "f32x4.splat": 19, "f32x4.extract_lane": 31,
                                                "f32x4.replace_lane": 32, "f32x4.add": 228, "f32x4.mul": 230}.items()},
           **{n: b"\xfc" + _uleb(i) for i, n in enumerate(
             "i32.trunc_sat_f32_s i32.trunc_sat_f32_u i32.trunc_sat_f64_s i32.trunc_sat_f64_u "
             "i64.trunc_sat_f32_s i64.trunc_sat_f32_u i64.trunc_sat_f64_s i64.trunc_sat_f64_u".split())}}

def _tokens(text: str) -> list:
  """The text as nested lists of atoms (s-expressions); instructions are atoms in their function's list."""
  stack: list[list] = [[]]
  for tok in re.findall(r'\(|\)|"[^"]*"|[^\s()]+', re.sub(r";;[^\n]*", "", text)):
    if tok == "(": stack.append([])
    elif tok == ")":
      if len(stack) < 2: raise ValueError("WebAssembly text: unbalanced ')'")
      done = stack.pop()
      stack[-1].append(done)
    else: stack[-1].append(tok)
  if len(stack) != 1 or len(stack[0]) != 1 or stack[0][0][:1] != ["module"]:
    raise ValueError("WebAssembly text: expected one (module ...)")
  return stack[0][0]

def _float(tok: str, fmt: str) -> bytes:
  mag = tok.lstrip("+-")
  v = float(mag) if mag in ("nan", "inf") else float.fromhex(mag) if mag.startswith("0x") else float(mag)
  v = -v if tok.startswith("-") else v
  return struct.pack(fmt, f32(v) if fmt == "<f" else v)   # (f32: the nearest float32, inf past its range, like C)

def assemble(text: str) -> bytes:
  """The binary module of `text`: the subset of the WebAssembly text format the WASM renderer writes (imports of memory
  and functions; functions with named params and locals, an export, and instructions one after another; no folded
  expressions, tables, globals or data)."""
  module = _tokens(text)
  types: list[bytes] = []
  def type_index(params: list[str], results: list[str]) -> int:
    sig = b"\x60" + _vec([bytes([VALTYPE[p]]) for p in params]) + _vec([bytes([VALTYPE[r]]) for r in results])
    if sig not in types: types.append(sig)
    return types.index(sig)
  def signature(items: list) -> tuple[list, list[str], list[str]]:   # (param names or None, param types, result types)
    names, params, results = [], [], []
    for it in items:
      if not isinstance(it, list): break   # (the instructions begin: a (result t) there is a block's)
      if it[0] == "param":
        named = it[1].startswith("$")
        names += [it[1]] if named else [None] * len(it[1:])
        params += it[2:] if named else it[1:]
      elif it[0] == "result": results += it[1:]
    return names, params, results
  imports, funcs, exports, func_index = [], [], [], {}
  for item in module[1:]:
    if item[0] == "import":
      mod, name, desc = item[1].strip('"'), item[2].strip('"'), item[3]
      if desc[0] == "memory": imports.append(_name(mod) + _name(name) + b"\x02\x00" + _uleb(int(desc[-1])))
      elif desc[0] == "func":
        func_index[desc[1]] = len(func_index)
        imports.append(_name(mod) + _name(name) + b"\x00" + _uleb(type_index(*signature(desc[2:])[1:])))
      else: raise ValueError(f"WebAssembly text: cannot import a {desc[0]}")
    elif item[0] == "func":
      func_index[item[1]] = len(func_index)
      funcs.append(item)
    else: raise ValueError(f"WebAssembly text: unexpected ({item[0]} ...) in the module")
  func_types, bodies = [], []
  for f in funcs:
    names, params, results = signature(f[2:])
    func_types.append(_uleb(type_index(params, results)))
    local_index = {n: i for i, n in enumerate(names) if n}
    local_groups: list[list] = []   # runs of locals of one type: [count, type]
    code, items, i = bytearray(), f[2:], 0
    def immediate() -> str:
      nonlocal i
      i += 1
      return items[i - 1]
    while i < len(items):
      it = immediate()
      if isinstance(it, list):   # the function's export, params, result and locals
        if it[0] == "export": exports.append(_name(it[1].strip('"')) + b"\x00" + _uleb(func_index[f[1]]))
        elif it[0] == "local":
          local_index[it[1]] = len(local_index)
          if local_groups and local_groups[-1][1] == it[2]: local_groups[-1][0] += 1
          else: local_groups.append([1, it[2]])
        continue
      if (op := OPCODES.get(it)) is None: raise ValueError(f"WebAssembly text: unknown instruction {it!r} in {f[1]}")
      code += op
      if it in ("block", "loop", "if"):   # the block's type: (result t) or none
        has_result = i < len(items) and isinstance(items[i], list) and items[i][0] == "result"
        code.append(VALTYPE[immediate()[1]] if has_result else 0x40)
      elif it in ("br", "br_if"): code += _uleb(int(immediate()))
      elif it.startswith("local."): code += _uleb(local_index[immediate()])
      elif it == "call": code += _uleb(func_index[immediate()])
      elif it in ("f32x4.extract_lane", "f32x4.replace_lane"): code.append(int(immediate()))
      elif it in ("i32.const", "i64.const"): code += _sleb(int(immediate()))
      elif it in ("f32.const", "f64.const"): code += _float(immediate(), "<f" if it[1] == "3" else "<d")
      elif ".load" in it or ".store" in it:   # memarg: log2 of the alignment (natural unless align=N), offset=N
        m = re.search(r"(?:load|store)(\d+)", it)
        memarg = {"align": (int(m.group(1)) if m else 128 if it.startswith("v128") else int(it[1:3])) // 8, "offset": 0}
        while i < len(items) and isinstance(items[i], str) and items[i].startswith(("align=", "offset=")):
          k, v = immediate().split("=")
          memarg[k] = int(v)
        code += _uleb(memarg["align"].bit_length() - 1) + _uleb(memarg["offset"])
    body = _vec([_uleb(n) + bytes([VALTYPE[t]]) for n, t in local_groups]) + bytes(code) + b"\x0b"
    bodies.append(_uleb(len(body)) + body)
  def section(sid: int, entries: list[bytes]) -> bytes:
    payload = _vec(entries)
    return bytes([sid]) + _uleb(len(payload)) + payload if entries else b""
  return (b"\x00asm\x01\x00\x00\x00" + section(1, types) + section(2, imports) + section(3, func_types) +
          section(7, exports) + section(10, bodies))
