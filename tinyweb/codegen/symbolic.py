"""Simplification rules for kernel programs: constant folding, algebra, and index arithmetic.

Index expressions come from movement ops (reshape = ravel + unravel, pad = shift + bounds checks), so the rules
below that remove `//` and `%` using value bounds (vmin/vmax) are what make the generated indexing cheap."""
from __future__ import annotations
import math
from tinyweb.dtype import dtypes
from tinyweb.uop import UOp, UPat, Ops, PatternMatcher, ALU, COMMUTATIVE
from tinyweb.scalar import exec_alu

def fold_alu(x: UOp):
  if x.dtype.is_float and x.op in (Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT): return None  # leave transcendental to the device
  return UOp.const(x.dtype, exec_alu(x.op, x.dtype, *[s.arg for s in x.src]))

def _is_int(u: UOp) -> bool: return u.dtype is not None and u.dtype.is_int

# ---- helpers on sums of terms: an int expression as [(term, coefficient)] + constant ----
def split_sum(u: UOp) -> tuple[list[tuple[UOp, int]], int]:
  """Flatten nested ADD/MUL-by-const/NEG into terms (in left-to-right order, so rebuilding is stable) and a constant."""
  merged: dict[UOp, int] = {}
  const = 0
  def walk(x: UOp, k: int):
    nonlocal const
    if x.op is Ops.ADD: walk(x.src[0], k); walk(x.src[1], k)
    elif x.op is Ops.CONST: const += x.arg * k
    elif x.op is Ops.MUL and x.src[1].op is Ops.CONST: walk(x.src[0], k * x.src[1].arg)
    elif x.op is Ops.NEG: walk(x.src[0], -k)
    else: merged[x] = merged.get(x, 0) + k
  walk(u, 1)
  return [(t, k) for t, k in merged.items() if k != 0], const

def build_sum(dtype, terms: list[tuple[UOp, int]], const: int) -> UOp:
  out = None
  for t, k in terms:
    x = t if k == 1 else t * UOp.const(dtype, k)
    out = x if out is None else out + x
  if out is None: return UOp.const(dtype, const)
  return out if const == 0 else out + UOp.const(dtype, const)

def _bounds_of(terms, const):
  lo = hi = const
  for t, k in terms:
    a, b = t.vmin * k, t.vmax * k
    lo, hi = lo + min(a, b), hi + max(a, b)
  return lo, hi

_FLAT = (Ops.ADD, Ops.CONST, Ops.NEG)
def _as_term(u: UOp, dtype) -> tuple[UOp, int] | None:
  """u as the one (term, coefficient) that build_sum renders back to u, or None when split_sum would take u apart."""
  if u.op in _FLAT or u.dtype != dtype: return None
  if u.op is not Ops.MUL or u.src[1].op is not Ops.CONST: return (u, 1)
  t, k = u.src
  if t.op in _FLAT or (t.op is Ops.MUL and t.src[1].op is Ops.CONST) or t.dtype != dtype or k.dtype != dtype or k.arg in (0, 1): return None
  return (t, k.arg)

def _may_fold(t: UOp, k: int, terms: dict[UOp, int], mods: frozenset) -> bool:
  """Could simplify_sum's (y//c)*c + y%c fold apply between term t (coefficient k) and the other terms?"""
  if t.op is Ops.MOD and t.src[1].op is Ops.CONST:
    return terms.get(UOp(Ops.IDIV, t.src[0].dtype, t.src)) == k * t.src[1].arg
  return t.op is Ops.IDIV and t.src in mods

def _mod_srcs(terms) -> frozenset: return frozenset(t.src for t in terms if t.op is Ops.MOD and t.src[1].op is Ops.CONST)

def simplify_sum(x: UOp):
  """Canonical form of an int sum: like terms combined, (y//c)*c + y%c folded back to y, constants summed."""
  # fast path: a canonical sum (or a single term) plus a new term or a constant is canonical as it is. Sums are rewritten
  # bottom-up, so this keeps simplifying a chain of n additions O(n) instead of rebuilding every prefix.
  a, b = x.src
  if a.op is Ops.ADD: info = a._sum
  else: info = None if (tk := _as_term(a, x.dtype)) is None else ({tk[0]: tk[1]}, 0, _mod_srcs([tk[0]]))
  if info is not None and info[1] == 0 and a.dtype == x.dtype:
    terms, _, mods = info
    if b.op is Ops.CONST:
      if b.arg != 0 and UOp.const(x.dtype, b.arg) is b: x._sum = (terms, b.arg, mods); return None
    elif (tk := _as_term(b, x.dtype)) is not None and tk[0] not in terms and not _may_fold(tk[0], tk[1], terms, mods):
      x._sum = ({**terms, tk[0]: tk[1]}, 0, mods | _mod_srcs([tk[0]])); return None
  terms, const = split_sum(x)
  changed, folded = True, False
  while changed:
    changed = False
    tdict = dict(terms)
    for t, k in terms:
      if t.op is Ops.MOD and t.src[1].op is Ops.CONST:
        y, c = t.src[0], t.src[1].arg
        d = UOp(Ops.IDIV, y.dtype, (y, t.src[1]))
        if y.vmin >= 0 and tdict.get(d) == k * c:
          del tdict[t], tdict[d]
          tdict[y] = tdict.get(y, 0) + k
          terms, changed, folded = [(a, b) for a, b in tdict.items() if b != 0], True, True
          break
  new = build_sum(x.dtype, terms, const)
  if new is not x: return new
  if not folded: x._sum = (dict(terms), const, _mod_srcs(t for t, _ in terms))
  return None

def _nonneg_terms(u: UOp):
  """u as ([(term, coefficient)], constant) when every term is >= 0 (so floor and C division agree after splitting)."""
  terms, const = (list(u._sum[0].items()), u._sum[1]) if u._sum is not None else split_sum(u)   # a canonical sum's terms are known
  return (terms, const) if all(t.vmin >= 0 for t, _ in terms) else None

def _remainder(terms, const, c):
  """sum(terms) + const == c*(q + qc) + (r + rc) with r + rc always in [0, c), where r are the terms whose coefficients c
  does not divide and rc is const shifted by a multiple of c: (q, qc, r, rc), or None when r's range is c or more wide.
  Covers a flipped index, e.g. (24 - x) % 5 == 4 - x and (24 - x) // 5 == 4 for x in [0, 4]."""
  r = [(t, k) for t, k in terms if k % c]
  lo, hi = _bounds_of(r, const)
  shift = lo // c
  if hi - shift * c >= c: return None
  return [(t, k // c) for t, k in terms if k % c == 0], shift, r, const - shift * c

def simplify_div(x: UOp):
  num, c = x.src[0], x.src[1].arg
  if c <= 0 or num.vmin < 0: return None
  if num.vmax < c: return UOp.const(x.dtype, 0)
  if num.op is Ops.IDIV and num.src[1].op is Ops.CONST and num.src[1].arg > 0:
    return num.src[0] // (num.src[1].arg * c)
  if num.op is Ops.MOD and num.src[1].op is Ops.CONST and num.src[1].arg % c == 0 and num.src[0].vmin >= 0:
    return (num.src[0] // c) % (num.src[1].arg // c)     # (y % (c*d)) // c == (y // c) % d
  if (split := _nonneg_terms(num)) is None: return None
  terms, const = split
  # num = c*q + r: num // c == q + r // c. First try r = the terms whose coefficients c does not divide (see _remainder),
  # else reduce every coefficient modulo c.
  if (qr := _remainder(terms, const, c)) is not None: return build_sum(x.dtype, qr[0], qr[1])
  q = [(t, k // c) for t, k in terms if k // c]
  r = [(t, k % c) for t, k in terms if k % c]
  if q or const // c:
    base, rest = build_sum(x.dtype, q, const // c), build_sum(x.dtype, r, const % c)
    return base if rest.vmax < c else base + rest // c
  g = c   # a common factor of all coefficients, the constant and c
  for _, k in terms: g = math.gcd(g, k)
  g = math.gcd(g, const)
  if g > 1: return build_sum(x.dtype, [(t, k // g) for t, k in terms], const // g) // (c // g)
  return None

def simplify_mod(x: UOp):
  num, c = x.src[0], x.src[1].arg
  if c <= 0 or num.vmin < 0: return None
  if num.vmax < c: return num
  if c == 1: return UOp.const(x.dtype, 0)
  if num.op is Ops.MOD and num.src[1].op is Ops.CONST and num.src[1].arg % c == 0: return num.src[0] % c
  if (split := _nonneg_terms(num)) is None: return None
  terms, const = split
  if (qr := _remainder(terms, const, c)) is not None: return build_sum(x.dtype, qr[2], qr[3])
  r = [(t, k % c) for t, k in terms if k % c]
  if len(r) == len(terms) and all(k == k2 for (_, k), (_, k2) in zip(terms, r)) and const < c: return None
  return build_sum(x.dtype, r, const % c) % c

def _same(a: UOp, b: UOp) -> bool: return a is b

symbolic = PatternMatcher([
  # constant folding
  (UPat(ALU, src=None, name="x", predicate=lambda u: len(u.src) > 0 and all(s.op is Ops.CONST for s in u.src)), fold_alu),
  (UPat(Ops.CAST, src=(UPat.cvar("c"),), name="x"), lambda x, c: UOp.const(x.dtype, c.arg)),
  (UPat(Ops.CAST, name="x", predicate=lambda u: u.src[0].dtype == u.dtype), lambda x: x.src[0]),
  # constants go to the right of commutative ops
  (UPat(COMMUTATIVE, src=(UPat.cvar("c"), UPat.var("y")), name="x", predicate=lambda u: u.src[1].op is not Ops.CONST),
   lambda x, c, y: x.replace(src=(y, c))),
  # identities
  # (a float's y + 0.0 is not y at y = -0.0, which it turns into +0.0 as IEEE and torch do: only y + -0.0 is y)
  (UPat(Ops.ADD, src=(UPat.var("y"), UPat.cvar("c")), name="x", predicate=lambda u: u.src[1].arg == 0 and not u.dtype.is_bool and
   (not u.dtype.is_float or math.copysign(1.0, u.src[1].arg) < 0)), lambda x, y, c: y),
  (UPat(Ops.MUL, src=(UPat.var("y"), UPat.cvar("c")), name="x", predicate=lambda u: u.src[1].arg == 1), lambda x, y, c: y),
  (UPat(Ops.MUL, src=(UPat.var("y"), UPat.cvar("c")), name="x", predicate=lambda u: u.src[1].arg == 0 and _is_int(u)), lambda x, y, c: c),
  (UPat(Ops.IDIV, src=(UPat.var("y"), UPat.cvar("c")), name="x", predicate=lambda u: u.src[1].arg == 1), lambda x, y, c: y),
  (UPat(Ops.AND, src=(UPat.var("y"), UPat.cvar("c")), name="x", predicate=lambda u: u.dtype.is_bool),
   lambda x, y, c: y if c.arg else c),
  (UPat(Ops.OR, src=(UPat.var("y"), UPat.cvar("c")), name="x", predicate=lambda u: u.dtype.is_bool),
   lambda x, y, c: c if c.arg else y),
  (UPat(Ops.AND, src=(UPat.var("y"), UPat.var("y")), name="x"), lambda x, y: y),
  (UPat(Ops.WHERE, src=(UPat.cvar("c"), UPat.var("a"), UPat.var("b")), name="x"), lambda x, c, a, b: a if c.arg else b),
  (UPat(Ops.WHERE, src=(UPat.var("c"), UPat.var("a"), UPat.var("a")), name="x"), lambda x, c, a: a),
  # int arithmetic: canonical sums, then division and modulo by constants using value bounds
  (UPat(Ops.ADD, name="x", predicate=_is_int), simplify_sum),
  (UPat(Ops.MUL, src=(UPat(Ops.ADD, name="s"), UPat.cvar("c")), name="x", predicate=_is_int),
   lambda x, s, c: s.src[0] * c + s.src[1] * c),
  (UPat(Ops.MUL, src=(UPat(Ops.MUL, src=(UPat.var("y"), UPat.cvar("c1"))), UPat.cvar("c2")), name="x", predicate=_is_int),
   lambda x, y, c1, c2: y * UOp.const(x.dtype, c1.arg * c2.arg)),
  (UPat(Ops.IDIV, src=(UPat.var(), UPat.cvar()), name="x", predicate=_is_int), simplify_div),
  (UPat(Ops.MOD, src=(UPat.var(), UPat.cvar()), name="x", predicate=_is_int), simplify_mod),
  # clamps that cannot change the value
  (UPat(Ops.MAX, src=(UPat.var("y"), UPat.cvar("c")), name="x", predicate=lambda u: _is_int(u) and u.src[1].op is Ops.CONST and u.src[0].vmin >= u.src[1].arg), lambda x, y, c: y),
  (UPat(Ops.MIN, src=(UPat.var("y"), UPat.cvar("c")), name="x", predicate=lambda u: _is_int(u) and u.src[1].op is Ops.CONST and u.src[0].vmax <= u.src[1].arg), lambda x, y, c: y),
  # comparisons decided by bounds
  (UPat(Ops.CMPLT, name="x", predicate=lambda u: _is_int(u.src[0]) and (u.src[0].vmax < u.src[1].vmin or u.src[0].vmin >= u.src[1].vmax)),
   lambda x: UOp.const(dtypes.bool, x.src[0].vmax < x.src[1].vmin)),
])
