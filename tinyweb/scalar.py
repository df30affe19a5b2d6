"""Scalar op semantics: what each ALU op computes on one Python number, as the devices compute it. Shared by constant
folding (codegen/symbolic.py) and the PYTHON device's interpreter (backends/python.py), so that both give the bits a
compiled kernel gives: C's truncating integer division and modulo (x / 0 = x % 0 = 0), IEEE float division, fmod, exp2,
log2 and sqrt at their special values, NaN-propagating max/min; float32 rounding and fused multiply-add (fmaf); and the
CPU device's float32 exp2/log2 polynomials (ClangRenderer's prelude), step for step."""
from __future__ import annotations
import math, operator, struct
from array import array
from tinyweb.dtype import cast_scalar
from tinyweb.uop import Ops

def c_div(a, b): return 0 if b == 0 else int(a / b) if isinstance(a, int) and abs(a) < 2**52 and abs(b) < 2**52 else (abs(a) // abs(b)) * (1 if (a < 0) == (b < 0) else -1)
def c_mod(a, b): return 0 if b == 0 else a - c_div(a, b) * b
def c_fmod(a, b):   # C's fmod (exact): NaN for b = 0 or an infinite a, a for an infinite b
  if math.isnan(a) or math.isnan(b) or math.isinf(a) or b == 0: return math.nan
  return a if math.isinf(b) else math.fmod(a, b)
def mod(a, b): return c_fmod(a, b) if isinstance(a, float) or isinstance(b, float) else c_mod(a, b)

def ieee_div(a, b):
  if b == 0: return math.nan if a == 0 or math.isnan(a) else math.copysign(math.inf, a) * math.copysign(1, b)
  return a / b

def exp2(a):
  try: return 2.0 ** a
  except OverflowError: return math.inf

def log2(a):
  if math.isnan(a) or a < 0: return math.nan
  return -math.inf if a == 0 else math.log2(a)

def sqrt(a): return math.nan if math.isnan(a) or a < 0 else math.sqrt(a)
def sin(a): return math.nan if math.isinf(a) or math.isnan(a) else math.sin(a)
def cos(a): return math.nan if math.isinf(a) or math.isnan(a) else math.cos(a)
def fmax(a, b): return a if (a != a or a > b) else b   # C's (a>b||a!=a)?a:b: NaN-propagating, the second wins ties
def fmin(a, b): return a if (a != a or a < b) else b
def trunc(x: float) -> float: return x if math.isinf(x) or x != x else math.copysign(float(math.trunc(x)), x)   # trunc(-0.5) = -0.0

ALU = {
  Ops.NEG: lambda a: (not a) if isinstance(a, bool) else -a, Ops.EXP2: exp2, Ops.LOG2: log2, Ops.SIN: sin, Ops.COS: cos, Ops.SQRT: sqrt,
  Ops.RECIP: lambda a: ieee_div(1.0, a), Ops.TRUNC: trunc,
  Ops.ADD: operator.add, Ops.MUL: operator.mul, Ops.FDIV: ieee_div, Ops.IDIV: c_div, Ops.MOD: mod, Ops.MAX: fmax, Ops.MIN: fmin,
  Ops.CMPLT: operator.lt, Ops.CMPNE: operator.ne, Ops.CMPEQ: operator.eq, Ops.AND: operator.and_, Ops.OR: operator.or_,
  Ops.XOR: operator.xor, Ops.SHL: lambda a, b: a << b, Ops.SHR: lambda a, b: a >> b, Ops.WHERE: lambda c, a, b: a if c else b,
}

def exec_alu(op: Ops, dtype, *vals):
  """Evaluate one ALU op on Python numbers with the dtype's semantics (wrapping ints, rounding floats)."""
  if dtype.is_bool and op in (Ops.ADD, Ops.MUL): op = Ops.OR if op is Ops.ADD else Ops.AND
  return cast_scalar(ALU[op](*vals), dtype)


_F32 = array("f", [0.0])
def f32(x: float) -> float:   # the float32 nearest x (overflow -> inf: the C conversion)
  _F32[0] = x
  return _F32[0]


# the CPU device's float32 exp2 and log2 (ClangRenderer's prelude: tw_exp2f, tw_log2f), op for op in float32 (a double
# result of +, -, *, / of two floats rounded to float32 is the float32 result), so that they give the same bits
EXP2F_COEFFS = [f32(c) for c in (0.693147182464599609375, 0.2402265071868896484375, 5.5504109710454940795898e-2,
                                  9.6181295812129974365234e-3, 1.3333558430895209312439e-3, 1.5403530357498675584793e-4,
                                  1.5252733804059566110e-5)]
LOG2F_COEFFS = [f32(c) for c in (2.885390081777927, 0.961796693925976, 0.577078016355585, 0.412198583111132, 0.320598897975325)]
_I = struct.Struct("<i")
def _mad(a: float, b: float, c: float, fused: bool) -> float:   # the prelude's TW_MAD: a*b+c rounded once or twice
  return fma32(a, b, c) if fused else f32(f32(a * b) + c)
def _horner(x: float, coeffs: list[float], fused: bool) -> float:   # c0 + x*(c1 + x*(...)) in TW_MAD steps like the C
  t = coeffs[-1]
  for c in reversed(coeffs[:-1]): t = _mad(x, t, c, fused)
  return t
def cpu_exp2f(x: float, fused: bool = False) -> float:
  if x != x: return x
  c = -150.0 if x < -150.0 else 128.0 if x > 128.0 else x
  n = float(round(c))   # rint: to nearest even, like Python's round
  f = c - n             # exact
  p = _mad(f, _horner(f, EXP2F_COEFFS, fused), 1.0, fused)
  n1 = int(n) >> 1
  return f32(f32(p * 2.0 ** n1) * 2.0 ** (int(n) - n1))
FLT_MIN, SQRT2_F32 = f32(1.17549435e-38), f32(1.41421356)
def cpu_log2f(x: float, fused: bool = False) -> float:
  if not 0.0 < x < math.inf: return -math.inf if x == 0.0 else x if x == math.inf else math.nan
  sub = x < FLT_MIN
  b = _I.unpack(struct.pack("<f", x * 8388608.0 if sub else x))[0]
  e = ((b >> 23) & 0xff) - (150 if sub else 127)
  m = struct.unpack("<f", _I.pack((b & 0x007fffff) | 0x3f800000))[0]
  if m > SQRT2_F32: m, e = m * 0.5, e + 1
  s = f32(f32(m - 1.0) / f32(m + 1.0))
  p = f32(s * _horner(f32(s * s), LOG2F_COEFFS, fused))
  return f32(float(e) + p)

# float32 fma (C's fmaf: a*b+c rounded once), for the fused sums of products (linearize.fused_products). From doubles: the
# product of two float32s is exact in a double, and the double sum s rounded to float32 is the exact sum rounded, except
# where s is exactly halfway between two float32s (the sum's rounding to a double may have made it so): there, and where
# s rounds past float32's range, the exact sum is found by TwoSum and rounded through round-to-odd (a double's last bit
# set where it is inexact, which one rounding to float32 then gets right).
_D, _Q = struct.Struct("<d"), struct.Struct("<q")
def fma32_exact(a: float, b: float, c: float) -> float:
  p = a * b
  s = p + c
  if not math.isfinite(s): return f32(s)
  t = s - p
  err = (p - (s - t)) + (c - t)   # TwoSum: s + err == p + c exactly
  if err and not _Q.unpack(_D.pack(s))[0] & 1: s = math.nextafter(s, math.copysign(math.inf, err))
  return f32(s)

def fma32_is_hard(s: float, r: float) -> bool:   # (see above) s is halfway between float32s, or rounded to +-inf from a finite s
  d = s - r
  return (d != 0 and f32(e := r + d + d) == e) or (math.isinf(r) and math.isfinite(s))

def fma32(a: float, b: float, c: float) -> float:
  r = f32(s := a * b + c)
  return fma32_exact(a, b, c) if fma32_is_hard(s, r) else r
