"""The PYTHON device: a pure-Python interpreter of the linear kernel program (tinyweb/codegen/python.py renders it).

Standard library only (struct, array, math, memoryview): it runs in Pyodide and anywhere else, and it checks the
code generator independently of any compiler. It is slow; it is registered last and is the default device only
where nothing else works (e.g. a browser without WebGPU).

Execution is SIMT over "lanes": a value is either a Python scalar (the same in every lane) or a list with one
element per lane. Lanes start as the kernel's threads (the flat index `gid`, in chunks of at most LANES), and a
reduction's loop nest is vectorized too: a chunk of its iterations (in order, flattened over the nest's loops) is
laid out iteration-major behind the outer lanes, so a value from outside the loop is broadcast by list repetition,
and ACC_UPDATE folds the chunk into the accumulator sequentially, in the loop's order. So every uop costs one list
operation over many lanes instead of one interpreted step per element.

Semantics are those of the CPU device (C): ints wrap to their width after every op; float32 results are rounded to
float32 after every op, float16 and bfloat16 compute in float32 and round after every op (bfloat16 to nearest even
on the bit pattern); float64 is Python's float. IEEE results (inf, nan) where Python would raise; integer division
truncates toward zero, x/0 = x%0 = 0 and INT_MIN/-1 wraps, as CStyleRenderer.render_int_div emits;
NaN-propagating max/min; float -> int casts go through int64 like x86 C.
Gated loads and stores touch memory only where the gate is true; an out-of-bounds address raises (a codegen bug).
Known difference: values are Python floats (doubles), so a float32 signaling NaN read from memory becomes quiet (C
copies its bits), except in kernels that bitcast to float32; NaN sign bits follow Python, not x86's default NaN.
"""
from __future__ import annotations
import functools, math, operator, struct, time
from operator import itemgetter
from array import array
from itertools import chain, compress, repeat
from typing import Callable, Optional
from tinyweb.device import Allocator, Compiler, Compiled
from tinyweb.helpers import host_has_fma
from tinyweb.dtype import DType, dtypes, cast_scalar
from tinyweb.uop import Ops
from tinyweb.codegen.lowering import reduce_identity
from tinyweb.codegen.python import PythonRenderer
from tinyweb.scalar import ieee_div, exp2, log2, sqrt, sin, cos, c_fmod, c_div, c_mod, trunc, f32, fma32, fma32_exact, fma32_is_hard, \
  cpu_exp2f, cpu_log2f

LANES = 8192   # most lanes evaluated at once: bounds the size of each value's list (memory) while amortizing dispatch

# ---- rounding and wrapping to a dtype: on a list of values (fast, C-level where possible) or on one value ----

def _f32s(v: list) -> list:
  try: return list(struct.unpack(f"{len(v)}f", struct.pack(f"{len(v)}f", *v)))
  except OverflowError: return array("f", v).tolist()   # a finite value beyond float32's range: inf

_E = struct.Struct("e")
def _f16(x: float) -> float:
  try: return _E.unpack(_E.pack(x))[0]
  except OverflowError: return math.copysign(math.inf, x)   # rounds beyond float16's range
def _f16s(v: list) -> list:   # C: float -> __fp16 (round to nearest even), after rounding to float32 like the C code
  v = _f32s(v)
  try: return list(struct.unpack(f"{len(v)}e", struct.pack(f"{len(v)}e", *v)))
  except OverflowError: return [_f16(x) for x in v]

def _f32_bits(v: list) -> list: return list(struct.unpack(f"{len(v)}I", struct.pack(f"{len(v)}f", *_f32s(v))))
def _bf16_bits(v: list) -> list:   # like ClangRenderer's tw_f32_to_bf16: round to nearest even, NaN -> 0x7fc0
  return [0x7fc0 if (b & 0x7fffffff) > 0x7f800000 else ((b + 0x7fff + ((b >> 16) & 1)) >> 16) & 0xffff
          for b in _f32_bits(v)]
def _bf16_floats(bits: list) -> list:
  return list(struct.unpack(f"{len(bits)}f", struct.pack(f"{len(bits)}I", *[b << 16 for b in bits])))
def _bf16s(v: list) -> list: return _bf16_floats(_bf16_bits(v))

def _int_wrapper(dt: DType) -> Callable[[list], list]:
  lo, hi, mask = dt.min, dt.max, (1 << dt.bits) - 1
  def wrap(v: list) -> list:
    if not v or (lo <= min(v) and max(v) <= hi): return v
    return [((x - lo) & mask) + lo for x in v]
  return wrap

def list_normalizer(dt: DType) -> Optional[Callable[[list], list]]:
  """The function that brings computed values into `dt` (rounds floats, wraps ints); None where nothing is needed."""
  if dt == dtypes.float32: return _f32s
  if dt == dtypes.float16: return _f16s
  if dt == dtypes.bfloat16: return _bf16s
  if dt.is_int: return _int_wrapper(dt)
  return None

def normalizer(dt: DType) -> Optional[Callable]:
  """list_normalizer for a value that is a scalar or a list."""
  lf = list_normalizer(dt)
  if lf is None: return None
  sf = f32 if dt == dtypes.float32 else (lambda x: lf([x])[0])
  return lambda v: lf(v) if type(v) is list else sf(v)

# ---- ALU ops on scalars and lists: op builders ----

def lift1(f):
  return lambda a: list(map(f, a)) if type(a) is list else f(a)

def lift2(f):
  def g(a, b):
    if type(a) is list: return list(map(f, a, b if type(b) is list else repeat(b)))
    if type(b) is list: return list(map(f, repeat(a), b))
    return f(a, b)
  return g

def guarded(fast, ieee, lift=lift1):
  """`fast` is a C-level function that raises where the result is inf/nan (ZeroDivisionError, math domain errors);
  then the whole op is redone with `ieee`, which returns the IEEE result."""
  fast, ieee = lift(fast), lift(ieee)
  def g(*a):
    try: return fast(*a)
    except (ValueError, OverflowError, ZeroDivisionError): return ieee(*a)
  return g

def _lanes(v): return v if type(v) is list else repeat(v)

# C's ((a>b||a!=a)?a:b) and ((a<b||a!=a)?a:b): NaN-propagating (for floats), the second operand wins ties
def _max(a, b):
  if type(a) is not list and type(b) is not list: return a if (a > b or a != a) else b
  return [x if (x > y or x != x) else y for x, y in zip(_lanes(a), _lanes(b))]
def _min(a, b):
  if type(a) is not list and type(b) is not list: return a if (a < b or a != a) else b
  return [x if (x < y or x != x) else y for x, y in zip(_lanes(a), _lanes(b))]

def _where(c, x, y):
  if type(c) is not list: return x if c else y
  return [p if k else q for k, p, q in zip(c, _lanes(x), _lanes(y))]

def _int_div(op: Ops):
  """C division/modulo as CStyleRenderer.render_int_div emits it: truncating; x/0 = x%0 = 0; INT_MIN/-1 wraps (the result
  is wrapped to the dtype afterwards). Python's floor versions where no sign is negative."""
  floor = operator.floordiv if op is Ops.IDIV else operator.mod
  c = c_mod if op is Ops.MOD else c_div
  lf, lc = lift2(floor), lift2(c)
  def g(a, b):
    b_pos = b > 0 if type(b) is not list else min(b) > 0
    a_nonneg = a >= 0 if type(a) is not list else min(a) >= 0
    return lf(a, b) if b_pos and a_nonneg else lc(a, b)
  return g

def _shift(left: bool, dt: DType):
  m = (64 if dt.bits == 64 else 32) - 1   # C promotes to int; the count is taken modulo the width (x86)
  return lift2((lambda a, b: a << (b & m)) if left else (lambda a, b: a >> (b & m)))

# float32, float16, bfloat16; by op and whether the CPU device's prelude fuses their polynomial steps (TW_FMA)
F32_TRANSCENDENTAL = {(op, fused): lift1(functools.partial(fn, fused=fused))
                      for op, fn in ((Ops.EXP2, cpu_exp2f), (Ops.LOG2, cpu_log2f)) for fused in (False, True)}

FLOAT_OPS = {
  Ops.ADD: lift2(operator.add), Ops.MUL: lift2(operator.mul), Ops.NEG: lift1(operator.neg),
  Ops.FDIV: guarded(operator.truediv, ieee_div, lift2), Ops.MOD: guarded(math.fmod, c_fmod, lift2),
  Ops.RECIP: guarded(functools.partial(operator.truediv, 1.0), functools.partial(ieee_div, 1.0)),
  Ops.SQRT: guarded(math.sqrt, sqrt), Ops.EXP2: guarded(functools.partial(pow, 2.0), exp2),
  Ops.LOG2: guarded(math.log2, log2),
  Ops.SIN: guarded(math.sin, sin), Ops.COS: guarded(math.cos, cos), Ops.TRUNC: lift1(trunc), Ops.MAX: _max, Ops.MIN: _min,
}
INT_OPS = {
  Ops.ADD: lift2(operator.add), Ops.MUL: lift2(operator.mul), Ops.NEG: lift1(operator.neg),
  Ops.MAX: _max, Ops.MIN: _min, Ops.AND: lift2(operator.and_),
  Ops.OR: lift2(operator.or_), Ops.XOR: lift2(operator.xor),
}
BOOL_OPS = {Ops.ADD: lift2(operator.or_), Ops.MUL: lift2(operator.and_), Ops.MAX: lift2(operator.or_),
            Ops.MIN: lift2(operator.and_), Ops.NEG: lift1(operator.not_), Ops.AND: lift2(operator.and_),
            Ops.OR: lift2(operator.or_), Ops.XOR: lift2(operator.xor)}
COMPARE_OPS = {Ops.CMPLT: lift2(operator.lt), Ops.CMPNE: lift2(operator.ne), Ops.CMPEQ: lift2(operator.eq)}
# ops whose result may leave the dtype (float rounding, int overflow): the result is normalized
ROUNDED = {Ops.ADD, Ops.MUL, Ops.FDIV, Ops.RECIP, Ops.SQRT, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS}
WRAPPED = {Ops.ADD, Ops.MUL, Ops.NEG, Ops.IDIV, Ops.SHL}

@functools.cache
def alu(op: Ops, dt: DType, inrange: bool = False, fused: bool = False) -> Callable:
  """The function computing `op` with result dtype `dt` on scalars or lists (`inrange`: known not to overflow; `fused`:
  exp2/log2 with fused multiply-adds, as the CPU device's where the host has fma)."""
  if op is Ops.WHERE: return _where
  if op in COMPARE_OPS: return COMPARE_OPS[op]
  if op in (Ops.SHL, Ops.SHR) and dt.is_int: fn = _shift(op is Ops.SHL, dt)
  elif op in (Ops.IDIV, Ops.MOD) and dt.is_int: fn = _int_div(op)
  elif (op, fused) in F32_TRANSCENDENTAL and dt.is_float and dt != dtypes.float64: fn = F32_TRANSCENDENTAL[(op, fused)]
  else: fn = (BOOL_OPS if dt.is_bool else FLOAT_OPS if dt.is_float else INT_OPS).get(op)
  if fn is None: raise NotImplementedError(f"PYTHON: no implementation of {op} for {dt.name}")
  norm = normalizer(dt) if op in (ROUNDED if dt.is_float else WRAPPED) and not inrange else None
  return fn if norm is None else (lambda *a: norm(fn(*a)))

# ---- casts and bitcasts ----

INT64_MIN = -(1 << 63)
def _f2i64(x: float) -> int:   # C's (long long)x on x86: NaN, inf and out-of-range values give INT64_MIN
  return INT64_MIN if x != x or x >= 2**63 or x < -2**63 else int(x)
def _f2u64(x: float) -> int:   # C's (unsigned long long)x with AVX-512 (the CPU device): invalid values give 2^64-1
  return (1 << 64) - 1 if x != x or x <= -1.0 or x >= 2**64 else int(x)

def _round_int(x: int, bits: int = 24) -> int:
  """x rounded to `bits` significant bits (to nearest even), so that float(x) rounds once as C's int -> float does."""
  s = abs(x).bit_length() - bits
  if s <= 0: return x
  q, r = divmod(abs(x), 1 << s)
  if r > (1 << (s - 1)) or (r == (1 << (s - 1)) and q & 1): q += 1
  return (q << s) if x >= 0 else -(q << s)

@functools.cache
def cast(dt: DType, sdt: DType) -> Callable:
  if dt.is_bool: return lambda v: [x != 0 for x in v] if type(v) is list else v != 0   # NaN is true, like C
  norm = list_normalizer(dt)
  if dt.is_float:
    if sdt.is_float: conv = None
    elif dt == dtypes.float64 or sdt.bits < 64: conv = float
    else: conv = lambda x: float(_round_int(x) if abs(x) >= 2**53 else x)   # int64 -> float32: round once
  elif sdt.is_float: conv = _f2u64 if dt == dtypes.uint64 else _f2i64
  else: conv = int
  def lst(v: list) -> list:
    if conv is not None: v = list(map(conv, v))
    return norm(v) if norm is not None else v
  return lambda v: lst(v) if type(v) is list else lst([v])[0]

class NaNBits(float):
  """A NaN that remembers its bit pattern: Python's float conversions would set a float32 NaN's quiet bit and drop a
  float16 NaN's payload, where the C code copies the bits (bitcasts, loads and stores of float16)."""
  __slots__ = ("bits",)
  def __new__(cls, bits: int):
    x = float.__new__(cls, math.nan)
    x.bits = bits
    return x

# register dtype -> (struct format of the value, of its bit pattern); bfloat16 is handled on its own (like the C code,
# which gives every bfloat16 NaN the pattern 0x7fc0)
_FLOAT_BITS = {dtypes.float16: ("e", "H"), dtypes.float32: ("f", "I"), dtypes.float64: ("d", "Q")}
def bits_format(dt: DType) -> str:
  return "H" if dt == dtypes.bfloat16 else _FLOAT_BITS[dt][1] if dt in _FLOAT_BITS else dt.fmt

def to_bits(dt: DType, v: list) -> list:
  """Register values of `dt` as the integers of their bit patterns (ints and bools: unchanged)."""
  if dt == dtypes.bfloat16: return _bf16_bits(v)
  if dt not in _FLOAT_BITS: return v
  f, i = _FLOAT_BITS[dt]
  out = list(struct.unpack(f"{len(v)}{i}", struct.pack(f"{len(v)}{f}", *v)))
  if any(map(math.isnan, v)): out = [x.bits if type(x) is NaNBits else b for x, b in zip(v, out)]
  return out
def from_bits(dt: DType, v: list) -> list:
  if dt == dtypes.bfloat16: return _bf16_floats(v)
  if dt not in _FLOAT_BITS: return v
  f, i = _FLOAT_BITS[dt]
  out = list(struct.unpack(f"{len(v)}{f}", struct.pack(f"{len(v)}{i}", *v)))
  if any(map(math.isnan, out)): out = [NaNBits(b) if x != x else x for x, b in zip(out, v)]
  return out

@functools.cache
def bitcast(dt: DType, sdt: DType) -> Callable:
  def lst(v: list) -> list:
    raw = struct.pack(f"{len(v)}{bits_format(sdt)}", *to_bits(sdt, v))
    return from_bits(dt, list(struct.unpack(f"{len(v)}{bits_format(dt)}", raw)))
  return lambda v: lst(v) if type(v) is list else lst([v])[0]

# ---- memory ----

class Buf:
  """A kernel argument: the buffer's memory as values (`bits` False) or as bit patterns (float16/bfloat16 always:
  Python 3.11's memoryview has no float16; float32 in programs that bitcast to float32, to keep signaling NaNs)."""
  __slots__ = ("mv", "dtype", "size", "arg", "bits")
  def __init__(self, handle, nbytes: int, dtype: DType, arg: int, bits: bool):
    self.mv = memoryview(handle).cast("B")[:nbytes].cast(bits_format(dtype) if bits else dtype.fmt)
    self.dtype, self.size, self.arg, self.bits = dtype, nbytes // dtype.itemsize, arg, bits

def _check_index(b: Buf, idx: list, gate=None, what: str = "load"):
  """Out-of-bounds accesses are code generator bugs: raise instead of reading garbage (or, for negative indices,
  Python's wrap-around). Only lanes whose gate is true count."""
  if not idx or (min(idx) >= 0 and max(idx) < b.size): return
  bad = [i for i, g in zip(idx, gate if type(gate) is list else repeat(gate is None or gate)) if g and not 0 <= i < b.size]
  if bad: raise IndexError(f"{what} of buffer {b.arg} ({b.size} x {b.dtype.name}) at index {bad[0]}")

def _contiguous(idx: list) -> bool:   # the addresses of an elementwise kernel's lanes: a slice of memory
  return idx[-1] - idx[0] == len(idx) - 1 and idx == list(range(idx[0], idx[-1] + 1))

def load(b: Buf, idx, gate=None):
  mv, dt = b.mv, b.dtype
  if type(gate) is not list and gate is not None and not gate:   # masked off in every lane
    z = cast_scalar(0, dt)
    return [z] * len(idx) if type(idx) is list else z
  zero = False if dt.is_bool else 0 if b.bits or not dt.is_float else 0.0   # in the memory format
  if type(idx) is list:
    _check_index(b, idx, gate)
    if type(gate) is list: raw = [mv[i] if g else zero for i, g in zip(idx, gate)]
    elif _contiguous(idx): raw = mv[idx[0]:idx[-1] + 1].tolist()
    else: raw = list(itemgetter(*idx)(mv)) if len(idx) > 1 else [mv[idx[0]]]   # a C-level gather
  elif type(gate) is list:
    _check_index(b, [idx] * len(gate), gate)
    v = mv[idx] if any(gate) else zero
    raw = [v if g else zero for g in gate]
  else:
    _check_index(b, [idx])
    return from_bits(dt, [mv[idx]])[0] if b.bits else mv[idx]
  return from_bits(dt, raw) if b.bits else raw

def store(b: Buf, idx, val, gate=None):
  mv = b.mv
  if type(idx) is not list:   # one address for every lane (one thread): the value of the last lane whose gate is true
    if type(gate) is list:
      live = [i for i, g in enumerate(gate) if g]
      if not live: return
      if type(val) is list: val = val[live[-1]]
    elif gate is not None and not gate: return
    elif type(val) is list: val = val[-1]
    _check_index(b, [idx], None, "store")
    mv[idx] = to_bits(b.dtype, [val])[0] if b.bits else val
    return
  vals = val if type(val) is list else [val] * len(idx)
  if b.bits: vals = to_bits(b.dtype, vals)
  _check_index(b, idx, gate, "store")
  if gate is None or (type(gate) is not list and gate):
    if mv.format != "?" and _contiguous(idx): mv[idx[0]:idx[-1] + 1] = array(mv.format, vals)
    else:
      for i, v in zip(idx, vals): mv[i] = v
  elif type(gate) is list:
    for i, v, g in zip(idx, vals, gate):
      if g: mv[i] = v

# ---- reductions: fold a chunk of loop iterations into the accumulator, in the loop's order ----

def _seq_fold(rop: Ops, dt: DType, step: Callable) -> Callable:
  """(acc, values) -> acc updated with each value in order: C-level where the result is exactly the sequential one."""
  if dt.is_bool: return (lambda a, s: a and all(s)) if rop is Ops.MUL else (lambda a, s: a or any(s))
  if dt.is_int and rop is Ops.ADD:   # wrapping addition is associative
    norm = normalizer(dt)
    return lambda a, s: norm(a + sum(s))
  if rop is Ops.MAX:
    if dt.is_int: return lambda a, s: max(a, max(s))
    def fmax(a, s):   # C's sequential ((a>b||a!=a)?a:b): NaN anywhere gives NaN; ties go to the last equal value (+-0)
      if a != a: return a
      if any(map(math.isnan, s)): return math.nan
      m = max(reversed(s))
      return a if a > m else m
    return fmax
  if dt == dtypes.float64 and rop is Ops.ADD: return lambda a, s: functools.reduce(operator.add, s, a)
  if dt == dtypes.float32 and rop is Ops.ADD:
    c = array("f", [0.0])   # (a float32 slot: storing into it rounds)
    def fadd(a, s):
      for x in s:
        c[0] = a + x
        a = c[0]
      return a
    return fadd
  def generic(a, s):
    for x in s: a = step(a, x)
    return a
  return generic

@functools.cache
def make_fold(rop: Ops, dt: DType) -> Callable:
  step = alu(rop, dt)
  seq = _seq_fold(rop, dt, step)
  def fold(acc, val, n: int, lanes: int):
    """acc: `lanes` lanes; val: n iterations of `lanes` lanes each, iteration-major (or the same value each time)."""
    if n == 1: return step(acc, val)
    if type(val) is not list:
      for _ in range(n): acc = step(acc, val)
      return acc
    if lanes == 1: return seq(acc, val)
    if type(acc) is not list: acc = [acc] * lanes
    if lanes * 2 >= n:
      for j in range(0, lanes * n, lanes): acc = step(acc, val[j:j + lanes])
      return acc
    return [seq(a, val[l::lanes]) for l, a in enumerate(acc)]
  return fold

def _fma32s(a: list, b: list, c: list) -> list:
  """fma32 over lists, at C speed but for the rare hard cases."""
  s = list(map(operator.add, map(operator.mul, a, b), c))
  r = _f32s(s)
  d = list(map(operator.sub, s, r))
  e = list(map(operator.add, r, map(operator.add, d, d)))
  for i in chain(compress(range(len(s)), map(operator.eq, e, _f32s(e))), compress(range(len(s)), map(math.isinf, r))):
    if fma32_is_hard(s[i], r[i]): r[i] = fma32_exact(a[i], b[i], c[i])
  return r

def fma_fold(acc, a, b, n: int, lanes: int):
  """acc = fma(a, b, acc) for each of n iterations in order (ACC_UPDATE of a fused product, float32): a and b are n
  iterations of `lanes` lanes each, iteration-major (or one value), acc `lanes` lanes (or one value)."""
  total = n * lanes
  av, bv = (x if type(x) is list else [x] * total for x in (a, b))
  def seq(acc: float, av: list, bv: list) -> float:
    for x, y in zip(av, bv): acc = fma32(x, y, acc)
    return acc
  if lanes == 1 and type(acc) is not list: return seq(acc, av, bv)
  if type(acc) is not list: acc = [acc] * lanes
  if lanes * 2 < n: return [seq(c, av[l::lanes], bv[l::lanes]) for l, c in enumerate(acc)]   # few lanes, long loops
  for j in range(0, total, lanes): acc = _fma32s(av[j:j + lanes], bv[j:j + lanes], acc)
  return acc

# ---- the program: parsed once into a tree of instructions and loop nests ----

OP, ACC, NEST = 0, 1, 2
def _identity(v): return v

class Nest:
  """A reduction's loops, run as one flattened loop over `total` iterations. `ranges`: (slot, size, stride) of each
  loop variable; `bcast`: (outer slot, slot here) of the outer values the body uses, repeated for each iteration."""
  __slots__ = ("ranges", "total", "body", "bcast", "open")
  def __init__(self): self.ranges, self.total, self.body, self.bcast, self.open = [], 1, [], {}, 0

class PythonProgram:
  def __init__(self, device, name: str, lib: bytes):
    self.name = name
    self.parse(lib.decode())
    self.device = device

  def parse(self, src: str):
    uops, meta = [], {}
    for line in src.splitlines():
      f = line.split()
      if len(f) == 2: meta[f[0]] = f[1]
      elif f:
        if len(f) != 5 or int(f[0]) != len(uops): raise ValueError(f"PYTHON: kernel {self.name}: bad source line {line!r}")
        op, dt = Ops[f[1]], (dtypes.from_name(f[2]) if f[2] != "-" else None)
        uops.append((op, dt, tuple(map(int, f[3].split(","))) if f[3] != "-" else (), parse_arg(op, dt, f[4])))
    self.threads = int(meta["threads"])
    self.consts: dict[int, object] = {}
    self.globals: dict[int, tuple] = {}
    self.gid: Optional[int] = None
    nslots = len(uops)
    depth: dict[int, int] = {}
    top: list = []
    stack: list[Nest] = []   # the open loop nests, innermost last
    prev = None
    def resolve(s: int, d: int) -> int:
      """The slot holding value s for code at nest depth d (broadcast into each deeper nest it is used in)."""
      nonlocal nslots
      if s not in depth: raise ValueError(f"PYTHON: kernel {self.name} uses uop {s} before it is defined")
      if depth[s] >= d: return s
      outer = resolve(s, d - 1)
      nest = stack[d - 1]
      if outer not in nest.bcast:
        nest.bcast[outer] = nslots
        nslots += 1
      return nest.bcast[outer]
    for i, (op, dt, srcs, arg) in enumerate(uops):
      d = len(stack)
      body = stack[-1].body if stack else top
      if op is Ops.CONST:
        self.consts[i] = arg
        depth[i] = 1 << 30   # the same everywhere: never broadcast
      elif op is Ops.DEFINE_GLOBAL:
        self.globals[i] = [arg[0], arg[1] * dt.itemsize, dt, dt in (dtypes.float16, dtypes.bfloat16)]
        depth[i] = 1 << 30
      elif op is Ops.SPECIAL:
        self.gid, depth[i] = i, 0
      elif op is Ops.RANGE:
        if prev is Ops.RANGE: nest = stack[-1]   # loops opened together belong to one reduction: one flat nest
        else:
          nest = Nest()
          body.append((NEST, nest))
          stack.append(nest)
        size = self.consts[srcs[0]]
        nest.ranges.append([i, size])
        nest.total *= size
        nest.open += 1
        depth[i] = len(stack)
      elif op is Ops.ENDRANGE:
        if not stack: raise ValueError(f"PYTHON: kernel {self.name}: ENDRANGE without a loop")
        stack[-1].open -= 1
        if stack[-1].open == 0: stack.pop()
      elif op is Ops.DEFINE_ACC:
        body.append((OP, i, functools.partial(_identity, cast_scalar(reduce_identity(Ops[arg], dt), dt)), ()))
        depth[i] = d
      elif op is Ops.ACC_UPDATE:   # sources: the accumulator and its value, or a fused product's two factors
        acc, *vals = srcs
        if depth.get(acc) != d - 1:
          raise ValueError(f"PYTHON: kernel {self.name}: ACC_UPDATE outside its accumulator's loop")
        body.append((ACC, acc, fma_fold if len(vals) == 2 else make_fold(Ops[arg], dt), tuple(resolve(v, d) for v in vals)))
      else:
        if op is Ops.LOAD: fn = load
        elif op is Ops.STORE: fn = store
        elif op is Ops.CAST: fn = cast(dt, uops[srcs[0]][1])
        elif op is Ops.BITCAST: fn = bitcast(dt, uops[srcs[0]][1])
        else: fn = alu(op, dt, arg == "inrange", arg == "fused")
        body.append((OP, i, fn, tuple(resolve(s, d) for s in srcs)))
        depth[i] = d
      if op is not Ops.CONST: prev = op   # constants have no position (a loop's bound may sit between two RANGEs)
    if stack: raise ValueError(f"PYTHON: kernel {self.name}: a loop is not closed")
    if any(op is Ops.BITCAST and dt == dtypes.float32 for op, dt, _, _ in uops):
      for g in self.globals.values(): g[3] = g[3] or g[2] == dtypes.float32
    for nest in _nests(top):   # strides of the flattened loop variables (the last loop varies fastest)
      stride = 1
      for r in reversed(nest.ranges):
        r.append(stride)
        stride *= r[1]
      nest.bcast = list(nest.bcast.items())
    self.top, self.nslots = top, nslots
    self.work = _work(top, self.threads)

  def __call__(self, *bufs, global_size=None, parallel: int = 0, work: int = 0, wait=False):
    st = time.perf_counter()
    self.device.account(self)
    env: list = [None] * self.nslots
    for i, v in self.consts.items(): env[i] = v
    for i, (pos, nbytes, dt, bits) in self.globals.items(): env[i] = Buf(bufs[pos], nbytes, dt, pos, bits)
    n = self.threads
    for t0 in range(0, n, LANES):
      lanes = min(LANES, n - t0)
      if self.gid is not None: env[self.gid] = list(range(t0, t0 + lanes)) if lanes > 1 else t0
      try: _run(self.top, env, lanes, 1)
      except IndexError as e: raise RuntimeError(f"PYTHON: kernel {self.name}: out-of-bounds {e}") from None
    return time.perf_counter() - st if wait else None

def parse_arg(op: Ops, dt: Optional[DType], a: str):
  if op is Ops.CONST: return a == "True" if dt.is_bool else float(a) if dt.is_float else int(a)
  if op is Ops.DEFINE_GLOBAL: return tuple(map(int, a.split(",")))
  if op is Ops.RANGE: return int(a)
  return None if a == "-" else a

def _nests(items: list):
  for it in items:
    if it[0] == NEST:
      yield it[1]
      yield from _nests(it[1].body)

def _work(items: list, lanes: int) -> int:
  """Lane-operations the program runs: the interpreter's cost model (used by the device's work accounting)."""
  return sum(_work(it[1].body, lanes * it[1].total) + len(it[1].bcast) * lanes * it[1].total if it[0] == NEST else lanes
             for it in items)

def _run(items: list, env: list, lanes: int, n: int):
  """Run a block at `lanes` lanes; `n` is the number of loop iterations in them (for ACC_UPDATE: lanes // n outside)."""
  get = env.__getitem__
  for it in items:
    kind = it[0]
    if kind == OP: env[it[1]] = it[2](*map(get, it[3]))
    elif kind == ACC: env[it[1]] = it[2](env[it[1]], *map(get, it[3]), n, lanes // n)
    else: _run_nest(it[1], env, lanes)

def loop_values(f0: int, n: int, size: int, stride: int) -> list:
  """(f // stride) % size for f in range(f0, f0 + n): a loop variable over a chunk of its nest's flattened iterations."""
  first, skip = divmod(f0, stride)
  last = (f0 + n - 1) // stride
  start = first % size
  vals = list(range(start, start + last - first + 1)) if start + last - first < size else \
         (list(range(size)) * ((start + last - first) // size + 1))[start:start + last - first + 1]
  return vals if stride == 1 else list(chain.from_iterable(map(repeat, vals, repeat(stride))))[skip:skip + n]

def _run_nest(nest: Nest, env: list, lanes: int):
  chunk = max(1, min(nest.total, LANES // lanes))
  for f0 in range(0, nest.total, chunk):
    n = min(chunk, nest.total - f0)
    for slot, size, stride in nest.ranges:   # iteration-major: each iteration's value repeated over the outer lanes
      if n == 1: env[slot] = (f0 // stride) % size
      else: env[slot] = loop_values(f0 * lanes, n * lanes, size, stride * lanes)
    for outer, inner in nest.bcast:
      v = env[outer]
      env[inner] = v * n if type(v) is list and n > 1 else v
    _run(nest.body, env, lanes * n, n)

# ---- the device ----

class PythonAllocator(Allocator):
  """Buffers are bytearrays (or, wrapped, the caller's writable memory)."""
  def _alloc(self, nbytes: int): return bytearray(nbytes)
  def copyin(self, handle, src: memoryview): memoryview(handle).cast("B")[:src.nbytes] = memoryview(src).cast("B")
  def copyout(self, dst: memoryview, handle): memoryview(dst).cast("B")[:] = memoryview(handle).cast("B")[:dst.nbytes]
  def as_memoryview(self, handle, nbytes: int) -> memoryview: return memoryview(handle).cast("B")[:nbytes]
  def wrap(self, mv: memoryview): return memoryview(mv).cast("B")

class PythonCompiler(Compiler):
  """The source is the program itself; PythonProgram parses it once (Compiled caches programs by source)."""
  def compile(self, src: str) -> bytes: return src.encode()

class PythonDevice(Compiled):
  is_fallback = True   # Device.DEFAULT picks it only when no other device is available
  fork_safe = True
  def __init__(self, name: str = "PYTHON"):
    # fused multiply-adds as the CPU device has them: the same bits
    super().__init__(name, PythonAllocator(), PythonRenderer(fused_multiply_add=host_has_fma()), PythonCompiler(), PythonProgram)
    # called with each program before it runs (its `work`, in lane-operations): lets a caller (the test suite) bound
    # how much interpretation it accepts
    self.work_hook: Optional[Callable] = None
  def account(self, prog: PythonProgram):
    if self.work_hook is not None: self.work_hook(prog)
