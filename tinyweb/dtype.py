"""Data types and the PyTorch-style promotion rules."""
from __future__ import annotations
import math, struct
from dataclasses import dataclass
from typing import Any

@dataclass(frozen=True, eq=False)
class DType:
  """One instance per dtype (the attributes of `dtypes`), compared and hashed by identity: every UOp's interning key and
  every structure key hashes a dtype, and a generated field-by-field hash cost ~40 us of a small realize. Pickling
  gives back the same instance."""
  name: str
  itemsize: int
  kind: str         # "b" bool, "i" signed int, "u" unsigned int, "f" float
  fmt: str          # struct/memoryview format of one element (bfloat16: raw 16-bit pattern "H")
  def __repr__(self): return f"dtypes.{self.name}"
  def __reduce__(self): return (dtypes.from_name, (self.name,))
  @property
  def is_float(self) -> bool: return self.kind == "f"
  @property
  def is_int(self) -> bool: return self.kind in "iu"
  @property
  def is_unsigned(self) -> bool: return self.kind == "u"
  @property
  def is_bool(self) -> bool: return self.kind == "b"
  @property
  def bits(self) -> int: return self.itemsize * 8
  @property
  def min(self):
    if self.kind == "b": return False
    if self.kind == "u": return 0
    if self.kind == "i": return -(1 << (self.bits - 1))
    return -math.inf
  @property
  def max(self):
    if self.kind == "b": return True
    if self.kind == "u": return (1 << self.bits) - 1
    if self.kind == "i": return (1 << (self.bits - 1)) - 1
    return math.inf

class dtypes:
  bool = DType("bool", 1, "b", "?")
  int8 = DType("int8", 1, "i", "b")
  uint8 = DType("uint8", 1, "u", "B")
  int16 = DType("int16", 2, "i", "h")
  uint16 = DType("uint16", 2, "u", "H")
  int32 = DType("int32", 4, "i", "i")
  uint32 = DType("uint32", 4, "u", "I")
  int64 = DType("int64", 8, "i", "q")
  uint64 = DType("uint64", 8, "u", "Q")
  float16 = DType("float16", 2, "f", "e")
  bfloat16 = DType("bfloat16", 2, "f", "H")
  float32 = DType("float32", 4, "f", "f")
  float64 = DType("float64", 8, "f", "d")
  # aliases, as in PyTorch / tinygrad
  half, float, double, int, long, uchar, char, short = float16, float32, float64, int32, int64, uint8, int8, int16
  default_float: DType = float32
  default_int: DType = int32
  all: tuple[DType, ...] = ()
  @staticmethod
  def from_name(name: str) -> DType:
    d = getattr(dtypes, name, None) if isinstance(name, str) else None
    if not isinstance(d, DType): raise TypeError(f"unknown dtype {name!r}; valid: {[x.name for x in dtypes.all]}")
    return d

dtypes.all = (dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
              dtypes.uint64, dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64)

def to_dtype(x: Any) -> DType:
  """Accept a DType, its name, or a numpy/torch dtype-like with a matching name."""
  if isinstance(x, DType): return x
  name = x if isinstance(x, str) else getattr(x, "name", None) or str(x).replace("torch.", "")
  if name in ("float", "int", "bool") and not isinstance(x, str) and x in (float, int, bool):
    return {float: dtypes.default_float, int: dtypes.default_int, bool: dtypes.bool}[x]
  if isinstance(name, str) and isinstance(getattr(dtypes, name, None), DType): return getattr(dtypes, name)
  raise TypeError(f"unknown dtype {x!r}; valid: {[d.name for d in dtypes.all]}")

def promote(a: DType, b: DType) -> DType:
  """PyTorch's type promotion for two tensor dtypes."""
  if a == b: return a
  order = "biuf"
  if a.kind == b.kind:
    if a.kind == "f" and {a, b} == {dtypes.float16, dtypes.bfloat16}: return dtypes.float32
    return a if a.itemsize >= b.itemsize else b
  if {a.kind, b.kind} == {"i", "u"}:
    s, u = (a, b) if a.kind == "i" else (b, a)
    return {1: dtypes.int8, 2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[min(8, max(s.itemsize, 2 * u.itemsize))]
  # different categories: bool < int < float; the higher category wins
  return a if order.index(a.kind) > order.index(b.kind) else b

def least_upper_dtype(*ds: DType) -> DType:
  out = ds[0]
  for d in ds[1:]: out = promote(out, d)
  return out

def scalar_dtype(x: Any) -> DType:
  """The dtype a Python scalar gets without one given: bool, int32 (int64 for an int outside int32's range, like
  PyTorch's default int64), or the default float."""
  if isinstance(x, bool): return dtypes.bool
  if isinstance(x, int): return dtypes.default_int if -0x80000000 <= x <= 0x7fffffff else dtypes.int64
  return dtypes.default_float

_CATEGORY = {"b": 0, "i": 1, "u": 1, "f": 2}
def promote_with_scalar(t: DType, x: Any) -> DType:
  """A Python scalar only changes the dtype when it is of a higher category (bool < int < float)."""
  s = scalar_dtype(x)
  return t if _CATEGORY[t.kind] >= _CATEGORY[s.kind] else s

FLOAT64_INT_LIMIT = 2**1024 - 2**970   # the smallest int that float() rounds to infinity (OverflowError)

def scalar_fits(x: Any, dt: DType) -> bool:
  """Whether storing the Python number x in dt loses no more than rounding (PyTorch's rule): an int must lie in an
  integer dtype's range (an unsigned one also takes -max..-1, which wraps around, as in PyTorch); a float stored in an
  integer dtype must lie in its range before truncation (NaN and inf do not); any number fits a float dtype, overflowing
  to inf, except an int too large for float64; anything fits bool."""
  if dt.kind == "b" or isinstance(x, bool): return True
  if dt.kind == "f": return not isinstance(x, int) or -FLOAT64_INT_LIMIT < x < FLOAT64_INT_LIMIT
  if isinstance(x, int): return (-dt.max if dt.kind == "u" else dt.min) <= x <= dt.max
  return dt.min <= x <= dt.max

def fmt_scalar(x: Any) -> str:
  """x for an error message (an int of thousands of digits is named by its size: str() of it may itself fail)."""
  return f"a {x.bit_length()}-bit integer" if isinstance(x, int) and x.bit_length() > 128 else repr(x)

def scalar_range_error(op: str, x: Any, dt: DType) -> OverflowError:
  if dt.is_float: return OverflowError(f"{op}: {fmt_scalar(x)} is too large to convert to a float (float64's range ends near 1.8e308)")
  valid = f"{dt.min}..{dt.max}" + (f", or {-dt.max}..-1 for an int, which wraps around" if dt.is_unsigned else "")
  return OverflowError(f"{op}: {fmt_scalar(x)} is out of range for {dt.name} (valid: {valid}); use a wider dtype")

def check_scalar(op: str, x: Any, dt: DType) -> None:
  if not scalar_fits(x, dt): raise scalar_range_error(op, x, dt)

def cast_scalar(x: Any, dt: DType) -> Any:
  """Convert a Python number to what it becomes when stored in `dt` (wraps integers, rounds floats)."""
  if dt.is_bool: return bool(x)
  if dt.is_int:
    if isinstance(x, float):
      # what every device computes (x86-64's conversions): truncation toward zero through int64; a float outside
      # int64's range (or NaN) gives INT64_MIN, whose low bits are 0 for narrower ints. uint64 converts directly
      # from (-1, 2^64) and gives all ones outside it.
      if dt.is_unsigned and dt.bits == 64: return int(x) if -1.0 < x < 2.0**64 else (1 << 64) - 1
      x = int(x) if -2.0**63 <= x < 2.0**63 else -(1 << 63)
    x = int(x) & ((1 << dt.bits) - 1)
    return x - (1 << dt.bits) if dt.kind == "i" and x >= (1 << (dt.bits - 1)) else x
  x = float(x)
  if dt == dtypes.float32 or dt == dtypes.float16:   # (round to nearest even; struct refuses only what rounds to inf)
    try: return struct.unpack(dt.fmt, struct.pack(dt.fmt, x))[0]
    except OverflowError: return math.copysign(math.inf, x)
  if dt == dtypes.bfloat16: return bf16_bits_to_float(float_to_bf16_bits(x))
  return x

def float_to_bf16_bits(x: float) -> int:
  if math.isnan(x): return 0x7fc0
  try: b = struct.unpack("I", struct.pack("f", x))[0]
  except OverflowError: return 0x7f80 if x > 0 else 0xff80
  return ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff   # round to nearest even

def bf16_bits_to_float(b: int) -> float: return struct.unpack("f", struct.pack("I", (b & 0xffff) << 16))[0]
