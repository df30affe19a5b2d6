"""Tensor elementwise math: arithmetic, comparisons, bitwise and logical ops, exp and log, trigonometry, rounding, the
activations, and Python's operators. A mixin of Tensor (tensor.py)."""
from __future__ import annotations
import math
from typing import Optional, Self
from tinyweb.dtype import dtypes, promote, least_upper_dtype, scalar_dtype
from tinyweb.uop import UOp, Ops
from tinyweb.tensor_helpers import _broadcast_shape

# Taylor coefficients, lowest power first: asin(y) = y * sum c_k y^2k (|y| <= 0.5: 12 terms, within 1e-9 relative),
# atan(y) = y * sum (-1)^k y^2k / (2k+1) (|y| <= tan(pi/8): 11 terms), erf(x) = x * 2/sqrt(pi) * sum (-1)^k x^2k / (k! (2k+1))
# (|x| < 1: 12 terms, within 1e-9)
_ASIN = tuple(math.comb(2 * k, k) / (4 ** k * (2 * k + 1)) for k in range(12))
_ATAN = tuple((-1) ** k / (2 * k + 1) for k in range(11))
_ERF = tuple(2 / math.sqrt(math.pi) * (-1) ** k / (math.factorial(k) * (2 * k + 1)) for k in range(12))
# erfc(x) = t exp(-x^2 + P(t)), t = 1 / (1 + x/2), for x >= 0 within 1.2e-7 relative: the Chebyshev fit of Numerical
# Recipes (2nd ed., 6.2), lowest power first
_ERFC = (-1.26551223, 1.00002368, 0.37409196, 0.09678418, -0.18628806, 0.27886807, -1.13520398, 1.48851587, -0.82215223, 0.17087277)

def _poly(x, coeffs):
  """sum coeffs[k] x^k (Horner's scheme)."""
  out = x * coeffs[-1] + coeffs[-2]
  for c in reversed(coeffs[:-2]): out = out * x + c
  return out

class MathMixin:
  __slots__ = ()
  # (Tensor, in tensor.py, is built from this mixin and must not be imported here: methods find the class as
  # type(self), often as a local `Tensor = type(self)`; annotations say Self)

  def _check_int_op(self, op: str, *others):
    for t in (self, *others):
      dt = t.dtype if isinstance(t, type(self)) else scalar_dtype(t)
      if dt.is_float: raise TypeError(f"{op}: only integer and bool tensors are supported, got {dt.name}")

  def add(self, x, reverse=False) -> Self: return self._binary(Ops.ADD, x, reverse, "add")
  def mul(self, x, reverse=False) -> Self: return self._binary(Ops.MUL, x, reverse, "mul")
  def sub(self, x, reverse=False) -> Self:
    a, b = self._broadcasted(x, "sub", reverse)
    if a.dtype.is_bool: raise TypeError("sub: subtraction of bool tensors is not supported; use logical_xor or ^")
    return a + (-b)
  def div(self, x, reverse=False, rounding_mode: Optional[str] = None) -> Self:
    if rounding_mode is None and not self.dtype.is_float and isinstance(x, (int, float)):
      return self._float_input().div(x, reverse)   # (true division: a scalar outside an int tensor's range is fine, like PyTorch)
    a, b = self._broadcasted(x, "div", reverse, match_dtype=False)
    if rounding_mode == "floor": return a // b
    if rounding_mode == "trunc": return a._trunc_div(b)
    dt = promote(a.dtype, b.dtype)
    dt = dt if dt.is_float else dtypes.default_float
    a, b = a.cast(dt), b.cast(dt)
    return a._wrap(UOp(Ops.FDIV, dt, (a.uop, b.uop)), b)
  def _trunc_div(self, b: Self) -> Self:   # (self and b broadcast already)
    if self.dtype.is_float or b.dtype.is_float:   # PyTorch's gradient for a rounding mode: an explicit 0 to both
      return self.detach().div(b.detach()).trunc().custom_gradient([self, b], lambda g: (g.zeros_like(), g.zeros_like()))
    a, b = self._broadcasted(b, "div")
    return a._wrap(UOp(Ops.IDIV, a.dtype, (a.uop, b.uop)), b)
  def floordiv(self, x, reverse=False) -> Self:
    a, b = self._broadcasted(x, "floordiv", reverse)
    if a.dtype.is_float:   # Python's (and PyTorch's) floor division: from the exact remainder, rounded to the nearest integer
      ad, bd = a.detach(), b.detach()
      r = ad.fmod(bd)
      q = (ad - r) / bd
      q = ((r != 0) & ((bd < 0) != (r < 0))).where(q - 1, q)
      fq = q.floor()
      fq = (q - fq > 0.5).where(fq + 1, fq)
      out = (bd == 0).where(ad / bd, (q == 0).where((ad / bd)._signbit().where(-0.0, 0.0), fq))
      return out.custom_gradient([a, b], lambda g: (g.zeros_like(), g.zeros_like()))   # (PyTorch's: an explicit 0)
    if a.dtype.is_bool: raise TypeError("floordiv: not supported for bool tensors")
    q = a._wrap(UOp(Ops.IDIV, a.dtype, (a.uop, b.uop)), b)
    if a.dtype.is_unsigned: return q
    r = a._wrap(UOp(Ops.MOD, a.dtype, (a.uop, b.uop)), b)
    return q - ((r != 0) & ((r < 0) != (b < 0))).cast(a.dtype)
  def mod(self, x, reverse=False) -> Self:
    a, b = self._broadcasted(x, "mod", reverse)
    if a.dtype.is_float:   # the exact fmod, moved to b's sign; PyTorch's gradients
      r = a.detach().fmod(b.detach())
      r = ((r != 0) & ((r < 0) != (b.detach() < 0))).where(r + b.detach(), r)
      return r.custom_gradient([a, b], lambda g: (g, -g * (a.detach() // b.detach())))
    if a.dtype.is_bool: raise TypeError("mod: not supported for bool tensors")
    r = a._wrap(UOp(Ops.MOD, a.dtype, (a.uop, b.uop)), b)
    if a.dtype.is_unsigned: return r
    return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
  def fmod(self, x) -> Self:
    """C's fmod (for floats exact, like PyTorch's: the MOD op renders as fmod)."""
    a, b = self._broadcasted(x, "fmod")
    r = a._wrap(UOp(Ops.MOD, a.dtype, (a.uop, b.uop)), b)
    return r.custom_gradient([a, b], lambda g: (g, -g * (a / b).trunc())) if a.dtype.is_float else r
  def pow(self, x, reverse=False) -> Self:
    """PyTorch's pow: C's powf for floats, with its gradients. An integer tensor to a negative integer constant raises
    RuntimeError (like PyTorch); with an integer tensor exponent a negative exponent gives PyTorch's integer result
    (1 for a base of 1, +-1 for -1, else 0)."""
    if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool):
      if not self.dtype.is_float and isinstance(x, int):
        if x < 0: raise RuntimeError(f"pow: integers to negative integer powers are not allowed ({self.dtype.name} tensor ** {x}); "
                                     "cast the base to a float dtype first")
        return self._pow_by_squaring(x)
      if self.dtype.is_float:   # PyTorch's own cases (x*x, x*x*x, sqrt, rsqrt, 1/x, 1/(x*x)), other small integers by squaring
        d, small_int = self.detach(), math.isfinite(x) and x == int(x) and abs(x) <= 32
        out = d.sqrt() if x == 0.5 else d.rsqrt() if x == -0.5 else None if not small_int else \
          d._pow_by_squaring(int(x)) if x >= 0 else d._pow_by_squaring(-int(x)).reciprocal()
        if out is not None: return out.custom_gradient([self], lambda g: (g.zeros_like() if x == 0 else g * (x * self.pow(x - 1)),))
    base, ex = self._broadcasted(x, "pow", reverse)
    if not base.dtype.is_float: return base._int_pow(ex)
    # an integer tensor exponent's e - 1 is taken in its own dtype, as torch does (so it wraps: 0 ** int32 min has
    # the gradient e * 0 ** (2^31 - 1) = -0.0 there, where float32's e - 1 rounds back to -2^31 and gives -inf)
    int_ex = x if not reverse and isinstance(x, type(self)) and not x.dtype.is_float and not x.dtype.is_bool else None
    ex_minus_1 = (int_ex - 1).cast(ex.dtype)._broadcast_to(ex.shape, "pow") if int_ex is not None else ex - 1
    # C's powf: |b|^e via exp2/log2; the sign of b for odd integer e (-0.0 and -inf included), NaN for b < 0 and
    # non-integer e; 1 for e = 0, b = 1 and b = -1 with e = +-inf
    b, e = base.detach(), ex.detach()
    mag = (e * b.abs().log2()).exp2_()
    e_int = e.trunc() == e
    out = (b._signbit() & e_int & ((e * 0.5).trunc() != e * 0.5)).where(-mag, mag)
    out = ((b < 0) & (b != -math.inf) & e_int.logical_not()).where(math.nan, out)
    out = ((e == 0) | (b == 1) | ((b == -1) & e.isinf())).where(1.0, out)
    # PyTorch's gradients: e * b**(e-1) (0 where e = 0) and b**e * ln(b) (0 where b = 0 and e >= 0)
    # (grouped as torch: e * b**(e-1) first, so 3e38 * 0**3e38 is 0 before it meets g)
    return out.custom_gradient([base, ex], lambda g: ((ex == 0).where(0.0, g * (ex * base.pow(ex_minus_1))),
                                                      g * ((base == 0) & (ex >= 0)).where(0.0, out * base.log())))
  def _pow_by_squaring(self, n: int) -> Self:
    """self ** n for an int n >= 0, multiplying (exact for ints; for floats PyTorch's x*x and x*x*x, few roundings)."""
    if n == 0: return type(self).ones(self.shape, dtype=self.dtype, device=self.device)
    out, sq = None, self
    while n:
      if n & 1: out = sq if out is None else out * sq
      n >>= 1
      if n: sq = sq * sq
    return out
  def _signbit(self) -> Self:
    """Whether the sign bit is set (true for -0.0 and -inf, unlike self < 0)."""
    return self.bitcast({2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[self.dtype.itemsize]) < 0
  def _int_pow(self, ex: Self) -> Self:
    out = type(self).ones(self.shape, dtype=self.dtype, device=self.device)
    base, e = self, ex
    for _ in range(self.dtype.bits if self.dtype.itemsize < 8 else 63):  # square-and-multiply, unrolled
      out = ((e & 1) != 0).where(out * base, out)
      e, base = e >> 1, base * base
    return (ex < 0).where((self.abs() == 1).where(((ex & 1) != 0).where(self, 1), 0), out)
  def maximum(self, x) -> Self: return self._binary(Ops.MAX, x, name="maximum")
  def minimum(self, x) -> Self:
    a, b = self._broadcasted(x, "minimum")
    if a.dtype.is_bool: return a & b
    return -((-a).maximum(-b)) if a.dtype.is_float else ~((~a).maximum(~b))
  def copysign(self, other) -> Self:
    """self's magnitude with other's sign (its sign bit: -0.0 counts as negative), as a float like PyTorch."""
    a, b = self._broadcasted(other, "copysign")
    a = a._float_input()
    neg = b.detach()._signbit() if b.dtype.is_float else b < 0
    out = neg.where(-a.detach().abs(), a.detach().abs())
    # PyTorch's gradients: g * out / self (0 where self is 0) and an explicit 0 to other
    ins = [a, b] if b.dtype.is_float else [a]
    return out.custom_gradient(ins, lambda g: ((a == 0).where(0.0, g * (out / a.detach())), g.zeros_like())[:len(ins)])
  def logaddexp(self, other) -> Self:
    """log(exp(self) + exp(other)), without overflow: max + log1p(exp(-|self - other|))."""
    a, b = self._broadcasted(other, "logaddexp")
    a, b = a._float_input(), b._float_input()
    ad, bd = a.detach(), b.detach()
    out = (ad.isinf() & (ad == bd)).where(ad, ad.maximum(bd) + (-(ad - bd).abs()).exp().log1p())   # (two equal infs: inf - inf)
    return out.custom_gradient([a, b], lambda g: (g / ((bd - ad).exp() + 1), g / ((ad - bd).exp() + 1)))   # PyTorch's
  def where(self, x, y) -> Self:
    """self is the condition: out = x where self else y."""
    Tensor = type(self)
    cond = self if self.dtype.is_bool else self.bool()
    if isinstance(x, Tensor) or isinstance(y, Tensor):
      ref = x if isinstance(x, Tensor) else y
      x, y = ref._broadcasted(y, "where") if ref is x else (y._broadcasted(x, "where", reverse=True))
    else:
      dt = least_upper_dtype(scalar_dtype(x), scalar_dtype(y))
      x, y = Tensor(Tensor._const_uop(x, dt, cond.device, ())), Tensor(Tensor._const_uop(y, dt, cond.device, ()))
    shape = _broadcast_shape("where", cond.shape, x.shape, y.shape)
    c, x, y = cond._broadcast_to(shape, "where"), x._broadcast_to(shape, "where"), y._broadcast_to(shape, "where")
    if c.device != x.device: raise RuntimeError(f"where: expected all tensors on the same device, got {c.device} and {x.device}")
    return x._wrap(UOp(Ops.WHERE, x.dtype, (c.uop, x.uop, y.uop)), y, c)
  def masked_fill(self, mask: Self, value) -> Self: return mask.where(value, self).cast(self.dtype)   # (self's dtype, like torch)

  def neg(self) -> Self:
    if self.dtype.is_bool: raise TypeError("neg: negation of a bool tensor is not supported; use logical_not or ~")
    return self._unary(Ops.NEG)
  def logical_not(self) -> Self: return self.bool() != True  # noqa: E712
  def logical_and(self, x) -> Self: return self.bool() & (x.bool() if isinstance(x, type(self)) else bool(x))
  def logical_or(self, x) -> Self: return self.bool() | (x.bool() if isinstance(x, type(self)) else bool(x))
  def logical_xor(self, x) -> Self: return self.bool() ^ (x.bool() if isinstance(x, type(self)) else bool(x))
  def bitwise_and(self, x, reverse=False) -> Self: self._check_int_op("bitwise_and", x); return self._binary(Ops.AND, x, reverse, "bitwise_and")
  def bitwise_or(self, x, reverse=False) -> Self: self._check_int_op("bitwise_or", x); return self._binary(Ops.OR, x, reverse, "bitwise_or")
  def bitwise_xor(self, x, reverse=False) -> Self: self._check_int_op("bitwise_xor", x); return self._binary(Ops.XOR, x, reverse, "bitwise_xor")
  def bitwise_not(self) -> Self:
    self._check_int_op("bitwise_not")
    return self.logical_not() if self.dtype.is_bool else self ^ -1 if not self.dtype.is_unsigned else self ^ self.dtype.max
  def lshift(self, x, reverse=False) -> Self:
    self._check_int_op("lshift", x)
    return self._binary(Ops.SHL, x, reverse, "lshift")
  def rshift(self, x, reverse=False) -> Self:
    self._check_int_op("rshift", x)
    return self._binary(Ops.SHR, x, reverse, "rshift")

  def exp2_(self) -> Self: return self._float_input()._unary(Ops.EXP2)   # the primitive, used by exp and pow
  def exp(self) -> Self: return (self._float_input() * (1 / math.log(2))).exp2_()
  def exp2(self) -> Self: return self.exp2_()
  def log2(self) -> Self: return self._float_input()._unary(Ops.LOG2)
  def log(self) -> Self: return self.log2() * math.log(2)
  def log10(self) -> Self: return self.log2() * (math.log(2) / math.log(10))
  def log1p(self) -> Self:
    x = self._float_input()
    d = x.detach()
    # log(1 + x) loses the low digits of a small x: for -0.3 < x < 0.5 the series 2 atanh(s) = 2 (s + s^3/3 + ... + s^11/11)
    # in s = x / (2 + x) (|s| <= 0.2: within 1e-8 relative), which has no 1 + x - 1 for a compiler to "simplify"
    s = d / (2 + d)
    s2 = s * s
    poly = s2 * (1 / 11)
    for k in (9, 7, 5, 3): poly = (poly + 1 / k) * s2
    out = ((d > -0.3) & (d < 0.5)).where((poly + 1) * (s + s), (1 + d).log())
    return out.custom_gradient([x], lambda g: (g / (x + 1),))
  def expm1(self) -> Self:
    x = self._float_input()
    d = x.detach()
    # exp(x) - 1 loses the low digits of a small x: there the Taylor series to x^8/8! (within 1e-8 relative for |x| < 0.5)
    poly = d * (1 / 40320)
    for k in (5040, 720, 120, 24, 6, 2, 1): poly = (poly + 1 / k) * d
    out = ((d > -0.5) & (d < 0.5)).where(poly, d.exp() - 1)
    return out.custom_gradient([x], lambda g: (g * (out + 1),))
  def sqrt(self) -> Self: return self._float_input()._unary(Ops.SQRT)
  def rsqrt(self) -> Self: return self.sqrt().reciprocal()
  def reciprocal(self) -> Self: return self._float_input()._unary(Ops.RECIP)
  def sin(self) -> Self: return self._float_input()._unary(Ops.SIN)
  def cos(self) -> Self: return self._float_input()._unary(Ops.COS)
  def tan(self) -> Self:
    x = self._float_input()
    out = x.detach().sin() / x.detach().cos()
    return out.custom_gradient([x], lambda g: (g * (1 + out * out),))   # torch's (the quotient rule met inf * 0 at x = 0)
  def asin(self) -> Self:
    """The arcsine (NaN outside [-1, 1]), within a few float32 ulps."""
    x = self._float_input()
    d = x.detach()
    out = d.abs()._asin_abs()
    return d._signbit().where(-out, out).custom_gradient([x], lambda g: (g * (1 - x * x).rsqrt(),))
  def _asin_abs(self) -> Self:
    """asin of self in [0, 1] (NaN above): the series up to 0.5, above it pi/2 - 2 asin(sqrt((1 - x) / 2))."""
    s = ((1 - self) * 0.5).sqrt()
    y = (self > 0.5).where(s, self)
    a = y * _poly(y * y, _ASIN)
    return (self > 0.5).where(math.pi / 2 - 2 * a, a)
  def acos(self) -> Self:
    """The arccosine (NaN outside [-1, 1]), within a few float32 ulps."""
    x = self._float_input()
    d = x.detach()
    # near +-1 from the half angle, 2 asin(sqrt((1 -+ x) / 2)), which keeps the digits pi/2 - asin(x) would lose
    near1, nearm1 = (((1 - d) * 0.5).sqrt()._asin_abs() * 2), (((1 + d) * 0.5).sqrt()._asin_abs() * 2)
    mid = math.pi / 2 - d.abs()._asin_abs() * d.sign()
    out = (d > 0.5).where(near1, (d < -0.5).where(math.pi - nearm1, mid))
    return out.custom_gradient([x], lambda g: (-g * (1 - x * x).rsqrt(),))
  def atan(self) -> Self:
    """The arctangent, within a few float32 ulps."""
    x = self._float_input()
    d = x.detach()
    # |x| > 1 through pi/2 - atan(1/|x|); above tan(pi/8) through pi/4 + atan((r - 1) / (r + 1)); then the series
    a = d.abs()
    r = (a > 1).where(a.reciprocal(), a)
    mid = r > math.sqrt(2) - 1
    y = mid.where((r - 1) / (r + 1), r)
    p = y * _poly(y * y, _ATAN)
    p = mid.where(math.pi / 4 + p, p)
    out = (a > 1).where(math.pi / 2 - p, p)
    return d._signbit().where(-out, out).custom_gradient([x], lambda g: (g / (1 + x * x),))
  def erf(self) -> Self:
    """The error function, within about 1e-7 (float32's precision; float64 gets no more): the series below 1, above it 1 - erfc."""
    x = self._float_input()
    d = x.detach()
    a = d.abs()
    t = (a * 0.5 + 1).reciprocal()
    big = 1 - t * (_poly(t, _ERFC) - a * a).exp()
    out = (a < 1).where(d * _poly(d * d, _ERF), d._signbit().where(-big, big))
    return out.custom_gradient([x], lambda g: (g * (2 / math.sqrt(math.pi)) * (-x * x).exp(),))
  def square(self) -> Self: return self * self
  def abs(self) -> Self:
    if self.dtype.is_bool or self.dtype.is_unsigned: return self
    if not self.dtype.is_float: return (self < 0).where(-self, self)
    # a float's sign bit cleared: one instruction in a fused kernel, and PyTorch's value for -0.0 and NaN too. The gradient
    # is PyTorch's, g * sign(x) (0 at 0 and NaN)
    bits = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[self.dtype.itemsize]
    out = (self.detach().bitcast(bits) & (bits.max >> 1)).bitcast(self.dtype)
    return out.custom_gradient([self], lambda g: (g * self.sign(),))
  def sign(self) -> Self:
    """-1, 0 or 1; 0 for NaN, like PyTorch. Its gradient is an explicit 0 (as trunc's)."""
    if self.dtype.is_bool: return self
    if self.dtype.is_unsigned: return (self > 0).cast(self.dtype)
    return (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype).custom_gradient([self], lambda g: (g.zeros_like(),))
  def trunc(self) -> Self: return self._unary(Ops.TRUNC) if self.dtype.is_float else self
  def floor(self) -> Self:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Self:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def round(self) -> Self:
    """Round half to even, like PyTorch."""
    if not self.dtype.is_float: return self
    f = self.floor()
    d = self - f
    f_even = (f * 0.5).floor() * 2 == f
    return (d > 0.5).where(f + 1, (d < 0.5).where(f, f_even.where(f, f + 1)))
  def frac(self) -> Self: return self - self.trunc()
  def isnan(self) -> Self: return self != self
  def isinf(self, detect_positive=True, detect_negative=True) -> Self:
    return ((self == math.inf) & detect_positive) | ((self == -math.inf) & detect_negative)
  def isfinite(self) -> Self: return (self.isinf() | self.isnan()).logical_not()
  def isclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan=False) -> Self:
    """Whether |self - other| <= atol + rtol * |other| (a finite difference) or the two are equal, elementwise; NaNs
    count as equal only with equal_nan."""
    if rtol < 0 or atol < 0: raise ValueError(f"isclose: rtol and atol must be non-negative, got rtol={rtol}, atol={atol}")
    a, b = self._broadcasted(other, "isclose")
    close = a == b
    if a.dtype.is_float and equal_nan: close = close | (a.isnan() & b.isnan())
    a, b = a._float_input(), b._float_input()
    diff = (a - b).abs()
    return close | (diff.isfinite() & (diff <= atol + rtol * b.abs()))
  def allclose(self, other: Self, rtol: float = 1e-05, atol: float = 1e-08, equal_nan=False) -> Self:
    """Whether every element isclose: a 0-d bool tensor (like tinygrad's; usable in `if`)."""
    return self.isclose(other, rtol, atol, equal_nan).all()
  def is_floating_point(self) -> bool:
    """Whether the dtype is a float one (a Python bool)."""
    return self.dtype.is_float
  def short(self) -> Self:
    """Cast to int16."""
    return self.cast(dtypes.int16)
  def const_like(self, b, dtype=None) -> Self:
    """A tensor of self's shape and device filled with b (in dtype, else self's)."""
    return self.full_like(b, dtype=dtype)
  def lerp(self, end: Self, weight) -> Self:
    """PyTorch's formula (from self where |weight| < 0.5, else from end: exact at weight 0 and 1) and its gradients."""
    Tensor = type(self)
    a, b = self._broadcasted(end, "lerp")
    w = weight
    if isinstance(w, Tensor): a, w = a._broadcasted(w, "lerp"); b = b._broadcast_to(a.shape)
    ad, bd, wd = a.detach(), b.detach(), w.detach() if isinstance(w, Tensor) else w
    near_a, near_b = ad + wd * (bd - ad), bd - (bd - ad) * (1 - wd)
    # PyTorch's kernel forms end - diff * (1 - w) with a fused multiply-add: a product past float32's range whose result
    # is within it comes out finite. In halves (exact at these magnitudes) that product fits; used only where it overflowed
    halved = (bd * 0.5 - (bd - ad) * 0.5 * (1 - wd)) * 2
    near_b = (near_b.isinf() & halved.isfinite()).where(halved, near_b)
    out = (wd.abs() < 0.5).where(near_a, near_b) if isinstance(w, Tensor) else near_a if abs(w) < 0.5 else near_b
    if not isinstance(w, Tensor): return out.custom_gradient([a, b], lambda g: (g * (1 - w), g * w))
    return out.custom_gradient([a, b, w], lambda g: (g * (1 - w), g * w, g * (b - a)))
  def clamp(self, min_=None, max_=None, *, min=None, max=None) -> Self:  # noqa: A002
    """Each element limited to [min_, max_] (a bound may be None or a tensor); PyTorch's min=/max= keywords work too."""
    Tensor = type(self)
    if min is not None or max is not None:
      if min_ is not None or max_ is not None: raise TypeError("clamp: give the bounds as min_/max_ or as min/max, not both")
      min_, max_ = min, max
    if min_ is None and max_ is None: raise ValueError("clip: at least one of min and max must be given")
    out = self.detach()
    # as PyTorch: the bound where x passes it or the bound is NaN, else x itself (so -0.0 stays -0.0 against a bound of 0)
    for bound, past in ((min_, Tensor.__lt__), (max_, Tensor.__gt__)):
      if bound is not None:
        out, b = out._broadcasted(bound, "clip")   # (a scalar bound checked against the dtype, a float bound promoting)
        out = (past(out, b) | (b != b)).where(b, out)
    # a float bound on an int tensor promotes, like PyTorch; otherwise the dtype stays
    out = out if not self.dtype.is_float and any(isinstance(b, float) for b in (min_, max_)) else out.cast(self.dtype)
    # PyTorch's gradients: to x where lo <= x <= hi (none for NaN); to a tensor bound where x passes it (to hi where hi < lo)
    x, lo, hi = (t._broadcast_to(out.shape) if isinstance(t, Tensor) else t for t in (self, min_, max_))
    ge, le = None if lo is None else x >= lo, None if hi is None else x <= hi
    def backward(g):
      grads = [(le if ge is None else ge if le is None else ge & le).where(g, 0.0)]
      if isinstance(lo, Tensor): grads.append((x < lo if hi is None else (x < lo) & (lo < hi)).where(g, 0.0))
      if isinstance(hi, Tensor): grads.append((x > hi if lo is None else (x > hi) | (hi < lo)).where(g, 0.0))
      return tuple(grads)
    return out.custom_gradient([x] + [t for t in (lo, hi) if isinstance(t, Tensor)], backward)
  def clip(self, min_=None, max_=None, *, min=None, max=None) -> Self:  # noqa: A002
    """Alias of clamp."""
    return self.clamp(min_, max_, min=min, max=max)

  # activations: PyTorch's formulas and gradients (custom where the gradient of the formula would meet inf * 0)
  def relu(self) -> Self: return (self < 0).where(0, self).custom_gradient([self], lambda g: ((self <= 0).where(0.0, g),))
  def sigmoid(self) -> Self:
    x = self._float_input()
    out = (1 + (-x.detach()).exp()).reciprocal()
    return out.custom_gradient([x], lambda g: (g * out * (1 - out),))
  def hardsigmoid(self, alpha=1 / 6, beta=0.5) -> Self:
    x = self._float_input()
    y = x.detach() * alpha + beta
    return y.clip(0, 1).custom_gradient([x], lambda g: (((y > 0) & (y < 1)).where(g * alpha, 0.0),))
  def tanh(self) -> Self:
    x = self._float_input()
    d = x.detach()
    # with e = expm1(2|x|): e / (e + 2) near 0, 1 - 2 / (e + 2) further out (neither 1 - tiny nor inf / inf); x's sign
    a = d.abs()
    e = (a + a).expm1()
    r = (e + 2).reciprocal()
    t = (a < 0.55).where(e * r, 1 - 2 * r)
    out = d._signbit().where(-t, t)
    return out.custom_gradient([x], lambda g: (g * (1 - out * out),))
  def sinh(self) -> Self:
    x = self._float_input()
    d, a = x.detach(), x.detach().abs()
    # (e - 1/e) / 2 with e = expm1(|x|) + 1 near 0, else with e = h * h, h = exp(|x| / 2) (finite up to |x| = 89.4)
    em, h = a.expm1(), (a * 0.5).exp()
    out = (a < 1).where((em + em / (em + 1)) * 0.5, (h * 0.5) * h - (0.5 / h) / h)
    return d._signbit().where(-out, out).custom_gradient([x], lambda g: (g * x.cosh(),))
  def cosh(self) -> Self:
    x = self._float_input()
    h = (x.detach().abs() * 0.5).exp()
    return ((h * 0.5) * h + (0.5 / h) / h).custom_gradient([x], lambda g: (g * x.sinh(),))
  def atanh(self) -> Self:
    x = self._float_input()
    d = x.detach()
    return ((2 * d / (1 - d)).log1p() * 0.5).custom_gradient([x], lambda g: (g / (1 - x * x),))
  def asinh(self) -> Self:
    x = self._float_input()
    d, a = x.detach(), x.detach().abs()
    # log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) with x's sign; ln(2|x|) where 1 + x^2 rounds to x^2 (before x^2 overflows)
    big = x._square_loses_one()
    out = (a > big).where(a.log() + math.log(2), (a + a * a / (1 + (a * a + 1).sqrt())).log1p())
    return d._signbit().where(-out, out).custom_gradient([x], lambda g: (g * (x * x + 1).rsqrt(),))
  def acosh(self) -> Self:
    x = self._float_input()
    d = x.detach()
    big = x._square_loses_one()
    out = (d < 1).where(math.nan, (d > big).where(d.log() + math.log(2), ((d - 1) + ((d - 1) * (d + 1)).sqrt()).log1p()))
    return out.custom_gradient([x], lambda g: (g * (x * x - 1).rsqrt(),))
  def _square_loses_one(self) -> float:
    """The magnitude above which x^2 +- 1 rounds to x^2 in this float dtype: 2^(significand bits / 2)."""
    return {dtypes.float16: 2.0 ** 6, dtypes.bfloat16: 2.0 ** 4, dtypes.float32: 2.0 ** 12, dtypes.float64: 2.0 ** 27}[self.dtype]
  def leaky_relu(self, neg_slope=0.01) -> Self: return (self > 0).where(self, self * neg_slope)
  leakyrelu = leaky_relu   # (tinygrad's older name, still used by its docs/quickstart.md and examples/mnist_gan.py)
  def _elu(self, alpha: float, scale: float, input_scale: float) -> Self:
    """PyTorch's elu family: scale * x for x > 0, else scale * alpha * expm1(x * input_scale). The gradient at NaN is
    NaN, as in PyTorch's vectorized kernel (its scalar tail gives scale)."""
    x = self._float_input()
    d = x.detach()
    return (d > 0).where(d * scale, (d * input_scale).expm1() * (scale * alpha)).custom_gradient(
      [x], lambda g: ((d > 0).logical_not().where(g * (input_scale * scale * alpha) * (d * input_scale).exp(), g * scale),))
  def elu(self, alpha=1.0) -> Self: return self._elu(alpha, 1.0, 1.0)
  def celu(self, alpha=1.0) -> Self: return self._elu(alpha, 1.0, 1 / alpha)
  def selu(self, alpha=1.6732632423543772, gamma=1.0507009873554805) -> Self: return self._elu(alpha, gamma, 1.0)
  def gelu(self, approximate: str = "tanh") -> Self:
    """approximate="tanh" (tinygrad's default): x * (1 + tanh(z)) / 2, z = sqrt(2/pi) * (x + 0.044715 x^3);
    "none" (PyTorch's default): x * (1 + erf(x / sqrt(2))) / 2."""
    if approximate not in ("tanh", "none"): raise ValueError(f"gelu: approximate must be 'tanh' or 'none', got {approximate!r}")
    x, k = self._float_input(), math.sqrt(2 / math.pi)
    d = x.detach()
    if approximate == "none":
      c = ((d * (1 / math.sqrt(2))).erf() + 1) * 0.5
      return (d * c).custom_gradient([x], lambda g: (g * (c + d * (k * 0.5) * (d * d * -0.5).exp()),))   # PyTorch's
    # PyTorch's form, (1 + tanh(z)) / 2: in the negative tail tanh(z) rounds to -1 and the result is exactly -0.0 (the
    # equal x * sigmoid(2z) gave -2e-16 at x = -7.2, whose log is NaN where torch's is -inf); and PyTorch's gradient,
    # (1 + tanh(z)) / 2 + x / 2 * (1 - tanh(z)^2) * dz/dx
    t = (d * k * (1 + 0.044715 * d * d)).tanh()
    half = (t + 1) * 0.5
    return (d * half).custom_gradient([x], lambda g: (g * (half + d * 0.5 * (1 - t * t) * (k * (1 + 3 * 0.044715 * d * d))),))
  def quick_gelu(self) -> Self: return self * (self * 1.702).sigmoid()
  def silu(self) -> Self:
    x = self._float_input()
    s = x.detach().sigmoid()
    # PyTorch's gradient g * s * (1 + x (1 - s)): x (1 - s) is 0 at a huge x, where (g x) s (1 - s) would be inf * 0
    return (x.detach() * s).custom_gradient([x], lambda g: (g * s * (1 + x.detach() * (1 - s)),))
  def swish(self) -> Self: return self.silu()
  def softplus(self, beta=1.0, threshold=20.0) -> Self:
    x = self._float_input()
    d = x.detach()
    # log1p(exp(bx)) as max(bx, 0) + log1p(exp(-|bx|)), which does not overflow (in float16 exp(bx) would above 11)
    bx = d * beta
    out = (bx > threshold).where(d, (bx.maximum(0) + (-bx.abs()).exp().log1p()) / beta)
    return out.custom_gradient([x], lambda g: ((x * beta > threshold).where(g, g * (x * beta).sigmoid()),))
  def mish(self) -> Self:
    x = self._float_input()
    d = x.detach()
    t = d.exp().log1p().tanh()   # tanh(softplus(x)), without softplus's threshold (as PyTorch)
    return (d * t).custom_gradient([x], lambda g: (g * (t + d * d.sigmoid() * (1 - t * t)),))
  def hardtanh(self, min_val=-1.0, max_val=1.0) -> Self:
    if min_val > max_val: raise ValueError(f"hardtanh: min_val ({min_val}) must not be greater than max_val ({max_val})")
    # PyTorch's gradient (of its vectorized kernel: 0 at NaN; its scalar tail passes a NaN's gradient through)
    return self.detach().clip(min_val, max_val).custom_gradient([self], lambda g: (((self > min_val) & (self < max_val)).where(g, 0.0),))
  def relu6(self) -> Self: return self.hardtanh(0, 6)
  def hardswish(self) -> Self:
    x = self._float_input()
    d = x.detach()
    # torch's gradient (its vectorized kernel's: the middle branch is the one left for NaN)
    return (d * (d + 3).clip(0, 6) / 6).custom_gradient([x], lambda g: ((d <= -3).where(0.0, (d >= 3).where(g, g * (d / 3 + 0.5))),))
  def softsign(self) -> Self: return self / (1 + self.abs())
  def logsigmoid(self) -> Self:
    x = self._float_input()
    d = x.detach()
    z = (-d.abs()).exp()
    return (d.minimum(0) - z.log1p()).custom_gradient([x], lambda g: (g * (d < 0).where(1 - z / (1 + z), z / (1 + z)),))

  # operators
  def __neg__(self): return self.neg()
  def __add__(self, x): return self.add(x)
  def __radd__(self, x): return self.add(x, True)
  def __sub__(self, x): return self.sub(x)
  def __rsub__(self, x): return self.sub(x, True)
  def __mul__(self, x): return self.mul(x)
  def __rmul__(self, x): return self.mul(x, True)
  def __truediv__(self, x): return self.div(x)
  def __rtruediv__(self, x): return self.div(x, True)
  def __floordiv__(self, x): return self.floordiv(x)
  def __rfloordiv__(self, x): return self.floordiv(x, True)
  def __mod__(self, x): return self.mod(x)
  def __rmod__(self, x): return self.mod(x, True)
  def __pow__(self, x): return self.pow(x)
  def __rpow__(self, x): return self.pow(x, True)
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return type(self)(x, device=self.device).matmul(self) if not isinstance(x, type(self)) else x.matmul(self)
  def __and__(self, x): return self.bitwise_and(x)
  def __rand__(self, x): return self.bitwise_and(x, True)
  def __or__(self, x): return self.bitwise_or(x)
  def __ror__(self, x): return self.bitwise_or(x, True)
  def __xor__(self, x): return self.bitwise_xor(x)
  def __rxor__(self, x): return self.bitwise_xor(x, True)
  def __invert__(self): return self.bitwise_not()
  def __lshift__(self, x): return self.lshift(x)
  def __rshift__(self, x): return self.rshift(x)
  def __rlshift__(self, x): return self.lshift(x, True)
  def __rrshift__(self, x): return self.rshift(x, True)
  def __abs__(self): return self.abs()
  def __iadd__(self, x): return self.assign(self + x)
  def __isub__(self, x): return self.assign(self - x)
  def __imul__(self, x): return self.assign(self * x)
  def __itruediv__(self, x): return self.assign(self / x)
  def __lt__(self, x): return self._binary(Ops.CMPLT, x, name="lt")
  def __gt__(self, x): return self._binary(Ops.CMPLT, x, reverse=True, name="gt")
  def __le__(self, x): return self._binary(Ops.CMPLT, x, name="le") | self._binary(Ops.CMPEQ, x, name="le")
  def __ge__(self, x): return self._binary(Ops.CMPLT, x, reverse=True, name="ge") | self._binary(Ops.CMPEQ, x, name="ge")
  def __eq__(self, x): return self._binary(Ops.CMPEQ, x, name="eq")  # type: ignore[override]
  def __ne__(self, x): return self._binary(Ops.CMPNE, x, name="ne")  # type: ignore[override]
  def eq(self, x): return self == x
  def ne(self, x): return self != x
  def lt(self, x): return self < x
  def gt(self, x): return self > x
  def le(self, x): return self <= x
  def ge(self, x): return self >= x
