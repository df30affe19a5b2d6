"""Special values through every float op, activation and reduction, forward and gradient, against torch on every device:
+-0, denormals, +-1, the kinks of the piecewise activations (+-3, 6), large values (1e4, 1e8, 3e38), +-inf and NaN.

NaN positions and infinities (with their signs) must equal torch's float32 results exactly. A finite value must be within
RTOL of torch's float32 result, or of torch's float64 result rounded to float32 (where torch's float32 formula is the
less accurate one: the tanh-approximated gelu's 1 + tanh(z) near its tail, 1 - tanh(x)^2 near saturation; for fmod and
its kin an exact reference replaces both, torch's SLEEF fmod not being exact). Values below the normal range may be
flushed to zero by a device. The sign of zero is not compared."""
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Tensor, dtypes
from helpers import expect_unsupported, hardtanh_ref, hardswish_ref, elu_ref, selu_ref, amax_ref, amin_ref

inf, nan = math.inf, math.nan
RTOL, TINY = 2e-6, 1.2e-38   # ~16 float32 ulps; FLT_MIN (below it a device may flush to zero)
# exp(x) is exp2(x * log2(e)): the product's rounding (2^-24 relative) becomes an absolute error of up to 128 * 2^-24 in the
# exponent, 5e-6 relative in the result near the overflow (pow likewise: exp2(y * log2(x)))
EXP_RTOL = 1e-5
SPECIAL = [0.0, -0.0, 1e-45, -1e-45, 1e-38, -1e-38, 1e-7, -1e-7, 0.5, -0.5, 1.0, -1.0, 2.0, -2.0, 2.5, 3.0, -3.0, 6.0, -6.0,
           20.0, -20.0, 50.0, -50.0, 88.7, -88.7, 100.0, -100.0, 1e4, -1e4, 1e8, -1e8, 3e38, -3e38, inf, -inf, nan]
BINARY_SPECIAL = [0.0, -0.0, 1e-45, 0.3, -0.5, 1.0, -1.0, 2.0, -2.0, 2.5, 3.0, -3.0, 0.1, 1e4, -1e8, 3e38, -3e38, inf, -inf, nan]

def assert_matches(got, ref32, ref64, what, rtol=RTOL, atol=TINY, may_flush=None):
  """may_flush: where a device may give 0 instead (a gradient computed from a denormal forward result it flushed to zero)."""
  got, r32 = np.asarray(got, np.float64), np.asarray(ref32, np.float64)
  r64 = np.asarray(ref64, np.float64).astype(np.float32).astype(np.float64)
  with np.errstate(invalid="ignore", over="ignore"):
    bad = np.isnan(got) != np.isnan(r32)
    special = ~np.isnan(got) & ~np.isnan(r32) & (np.isinf(got) | np.isinf(r32))
    bad |= special & (got != r32)
    finite = ~np.isnan(got) & ~np.isnan(r32) & ~special
    close32 = np.abs(got - r32) <= atol + rtol * np.abs(r32)
    close64 = np.isfinite(r64) & (np.abs(got - r64) <= atol + rtol * np.abs(r64))
    bad |= finite & ~close32 & ~close64
    if may_flush is not None: bad &= ~(may_flush & (got == 0))
  if bad.any():
    idx = np.argwhere(bad)[:12]
    raise AssertionError(f"{what}: {int(bad.sum())} of {bad.size} differ from torch (index: tinyweb vs torch float32 / float64):\n" +
                         "\n".join(f"  {tuple(int(i) for i in ix)}: {got[tuple(ix)]!r} vs {r32[tuple(ix)]!r} / {r64[tuple(ix)]!r}" for ix in idx))

def compare(device, torch_fn, tw_fn, inputs, rtol=RTOL, grad_atol=TINY, grad=True, varied_cotangent=False, exact_fn=None):
  """torch_fn on float32 and float64 copies of `inputs` (numpy arrays) against tw_fn on tinyweb tensors (exact_fn, given,
  replaces the float64 reference: a numpy function exact on float32 values); gradients of sum(out * cotangent) too, the
  cotangent ones or (varied_cotangent, for reductions, whose gradient of a plain sum may be 0 up to rounding) a mix."""
  tw_fn = tw_fn or torch_fn
  t32 = [torch.tensor(v, dtype=torch.float32, requires_grad=grad) for v in inputs]
  t64 = [torch.tensor(np.asarray(v, np.float32), dtype=torch.float64, requires_grad=grad) for v in inputs]
  ww = [Tensor(np.asarray(v, np.float32), device=device, requires_grad=grad) for v in inputs]
  o32, o64, ow = torch_fn(*t32), torch_fn(*t64), tw_fn(*ww)
  assert tuple(ow.shape) == tuple(o32.shape), f"shape: tinyweb {ow.shape} vs torch {tuple(o32.shape)}"
  if not o32.dtype.is_floating_point:
    np.testing.assert_array_equal(ow.numpy(), o32.numpy(), err_msg="forward")
    return
  if exact_fn: ref32 = ref64 = exact_fn(*[np.asarray(v, np.float32).astype(np.float64) for v in inputs]).astype(np.float32)
  else: ref32, ref64 = o32.detach().numpy(), o64.detach().numpy()
  assert_matches(ow.numpy(), ref32, ref64, "forward", rtol)
  if grad and o32.requires_grad:
    cot = np.resize([1.0, -2.0, 0.5, 3.0, -1.5], tuple(o32.shape)) if varied_cotangent else np.ones(tuple(o32.shape))
    (o32 * torch.tensor(cot, dtype=torch.float32)).sum().backward(); (o64 * torch.tensor(cot)).sum().backward()
    (ow * Tensor(cot.astype(np.float32), device=device)).sum().backward()
    out32 = np.abs(o32.detach().numpy())
    denormal_out = (out32 > 0) & (out32 < TINY)
    for i, (a, b, w) in enumerate(zip(t32, t64, ww)):
      z = np.zeros(np.shape(inputs[i]))
      flush = denormal_out if denormal_out.shape == z.shape else None
      assert_matches(w.grad.numpy(), a.grad.numpy() if a.grad is not None else z, b.grad.numpy() if b.grad is not None else z,
                     f"gradient of input {i}", rtol, grad_atol, flush)

# ---------------------------------------------------------------- unary ops and activations
# name: (torch fn, tinyweb fn (None: the same code), gradient atol (where torch's gradient formula cancels: 1 - y^2))
SATURATING = 2e-7
UNARY = {
  "neg": (lambda x: -x, None, TINY), "abs": (torch.abs, lambda x: x.abs(), TINY), "sign": (torch.sign, lambda x: x.sign(), TINY),
  "square": (torch.square, lambda x: x.square(), TINY), "exp": (torch.exp, lambda x: x.exp(), TINY),
  "exp2": (torch.exp2, lambda x: x.exp2(), TINY), "expm1": (torch.expm1, lambda x: x.expm1(), TINY),
  "log": (torch.log, lambda x: x.log(), TINY), "log2": (torch.log2, lambda x: x.log2(), TINY),
  "log10": (torch.log10, lambda x: x.log10(), TINY), "log1p": (torch.log1p, lambda x: x.log1p(), TINY),
  "sqrt": (torch.sqrt, lambda x: x.sqrt(), TINY), "rsqrt": (torch.rsqrt, lambda x: x.rsqrt(), TINY),
  "reciprocal": (torch.reciprocal, lambda x: x.reciprocal(), TINY), "sin": (torch.sin, lambda x: x.sin(), TINY),
  "cos": (torch.cos, lambda x: x.cos(), TINY), "tan": (torch.tan, lambda x: x.tan(), TINY),
  "sinh": (torch.sinh, lambda x: x.sinh(), TINY), "cosh": (torch.cosh, lambda x: x.cosh(), TINY),
  "tanh": (torch.tanh, lambda x: x.tanh(), SATURATING), "asinh": (torch.asinh, lambda x: x.asinh(), TINY),
  "acosh": (torch.acosh, lambda x: x.acosh(), TINY), "atanh": (torch.atanh, lambda x: x.atanh(), TINY),
  "trunc": (torch.trunc, lambda x: x.trunc(), TINY), "floor": (torch.floor, lambda x: x.floor(), TINY),
  "ceil": (torch.ceil, lambda x: x.ceil(), TINY), "round": (torch.round, lambda x: x.round(), TINY),
  "frac": (torch.frac, lambda x: x.frac(), TINY),
  "relu": (torch.relu, lambda x: x.relu(), TINY), "relu6": (lambda x: hardtanh_ref(x, 0.0, 6.0), lambda x: x.relu6(), TINY),
  "leaky_relu": (F.leaky_relu, lambda x: x.leaky_relu(), TINY), "elu": (elu_ref, lambda x: x.elu(), TINY),
  "elu_alpha": (lambda x: elu_ref(x, 0.5), lambda x: x.elu(0.5), TINY), "celu": (lambda x: elu_ref(x, 0.5, 1.0, 2.0), lambda x: x.celu(0.5), TINY),
  "selu": (selu_ref, lambda x: x.selu(), TINY), "sigmoid": (torch.sigmoid, lambda x: x.sigmoid(), SATURATING),
  "logsigmoid": (F.logsigmoid, lambda x: x.logsigmoid(), TINY), "hardsigmoid": (F.hardsigmoid, lambda x: x.hardsigmoid(), TINY),
  "silu": (F.silu, lambda x: x.silu(), SATURATING), "quick_gelu": (lambda x: x * torch.sigmoid(1.702 * x), lambda x: x.quick_gelu(), SATURATING),
  "gelu": (lambda x: F.gelu(x, approximate="tanh"), lambda x: x.gelu(), SATURATING),
  "softplus": (F.softplus, lambda x: x.softplus(), TINY), "softplus_beta": (lambda x: F.softplus(x, 2.0, 5.0), lambda x: x.softplus(2.0, 5.0), TINY),
  "mish": (F.mish, lambda x: x.mish(), SATURATING), "hardtanh": (hardtanh_ref, lambda x: x.hardtanh(), TINY),
  "hardtanh_range": (lambda x: hardtanh_ref(x, -3.0, 6.0), lambda x: x.hardtanh(-3.0, 6.0), TINY),
  "hardswish": (hardswish_ref, lambda x: x.hardswish(), TINY), "softsign": (F.softsign, lambda x: x.softsign(), TINY),
  "clip": (lambda x: x.clip(-3, 6), None, TINY), "clip_min": (lambda x: x.clamp(min=-3), None, TINY),
  "pow_0": (lambda x: x ** 0, None, TINY), "pow_1": (lambda x: x ** 1, None, TINY), "pow_2": (lambda x: x ** 2, None, TINY),
  "pow_3": (lambda x: x ** 3, None, TINY), "pow_4": (lambda x: x ** 4, None, TINY), "pow_-1": (lambda x: x ** -1, None, TINY),
  "pow_-2": (lambda x: x ** -2, None, TINY), "pow_-3": (lambda x: x ** -3, None, TINY), "pow_0.5": (lambda x: x ** 0.5, None, TINY),
  "pow_-0.5": (lambda x: x ** -0.5, None, TINY), "pow_2.5": (lambda x: x ** 2.5, None, TINY), "pow_88.7": (lambda x: x ** 88.7, None, TINY),
  "pow_-inf": (lambda x: x ** -inf, None, TINY),
  "rpow_2": (lambda x: 2 ** x, None, TINY), "rpow_-2": (lambda x: (-2.0) ** x, None, TINY), "rpow_0": (lambda x: 0.0 ** x, None, TINY),
  "isnan": (torch.isnan, lambda x: x.isnan(), TINY), "isinf": (torch.isinf, lambda x: x.isinf(), TINY),
  "isfinite": (torch.isfinite, lambda x: x.isfinite(), TINY),
}

EXP_FAMILY = {"exp", "expm1", "sinh", "cosh", "sigmoid", "logsigmoid", "softplus", "pow_2.5", "pow_88.7", "pow_-inf", "rpow_2",
              "rpow_-2", "rpow_0"}

# WebGPU's genuine limits: WGSL lets the compiler treat inf/NaN as indeterminate and rewrite float math, and denormals may
# be flushed to zero (lavapipe does both)
WEBGPU_LIMITS = {
  "quick_gelu": "lavapipe reassociates the gradient's (x * s(1 - s)) * 1.702 into (x * 1.702) * ...: inf * 0 = NaN at |x| = 3e38",
  "mish": "mish(-88.7) = -88.7 * tanh(softplus(-88.7)) goes through exp(-88.7), a denormal that lavapipe flushes to zero",
}

@pytest.mark.parametrize("name", list(UNARY))
def test_unary_special_values(device, name, request):
  if device == "WEBGPU" and name in WEBGPU_LIMITS: request.applymarker(pytest.mark.xfail(reason=WEBGPU_LIMITS[name], strict=False))
  tfn, wfn, grad_atol = UNARY[name]
  compare(device, tfn, wfn, [np.array(SPECIAL)], rtol=EXP_RTOL if name in EXP_FAMILY else RTOL, grad_atol=grad_atol)

def test_unary_accuracy_over_the_float_range(device):
  """Trig and the exponential family over 4000 magnitudes from 1e-4 to 3e38 (both signs) against torch: cos(x) computed as
  sin(pi/2 - x) was off by up to 2.6e-5 below 1000 (the subtraction rounds x), tan's relative error reached 0.25."""
  x = np.float32(10.0) ** np.linspace(-4, 38.4, 2000).astype(np.float32)
  x = np.concatenate([x, -x]).astype(np.float32)
  for name in ("sin", "cos", "tan", "sinh", "cosh", "tanh", "asinh", "expm1", "log1p", "sigmoid", "softplus"):
    tfn, wfn, _ = UNARY[name]
    ours, ref = wfn(Tensor(x, device=device)).numpy(), tfn(torch.tensor(x)).numpy()
    ref64 = tfn(torch.tensor(x, dtype=torch.float64)).numpy()
    # near a zero of sin/cos/tan the result's relative error is the argument's absolute rounding, magnified
    atol = 2e-7 if name in ("sin", "cos", "tan") else TINY
    assert_matches(ours, ref, ref64, f"{name} on {device}", rtol=EXP_RTOL if name in EXP_FAMILY else RTOL, atol=atol)

# ---------------------------------------------------------------- binary ops
BINARY = {
  "add": (lambda a, b: a + b, None), "sub": (lambda a, b: a - b, None), "mul": (lambda a, b: a * b, None),
  "div": (lambda a, b: a / b, None), "pow": (lambda a, b: a ** b, None),
  "maximum": (torch.maximum, lambda a, b: a.maximum(b)), "minimum": (torch.minimum, lambda a, b: a.minimum(b)),
  "fmod": (torch.fmod, lambda a, b: a.fmod(b)), "remainder": (lambda a, b: a % b, None),
  "floordiv": (lambda a, b: torch.div(a, b, rounding_mode="floor"), lambda a, b: a // b),
  "truncdiv": (lambda a, b: torch.div(a, b, rounding_mode="trunc"), lambda a, b: a.div(b, rounding_mode="trunc")),
  "lerp_0.3": (lambda a, b: torch.lerp(a, b, 0.3), lambda a, b: a.lerp(b, 0.3)),
  "lerp_0.7": (lambda a, b: torch.lerp(a, b, 0.7), lambda a, b: a.lerp(b, 0.7)),
  "lt": (lambda a, b: a < b, None), "le": (lambda a, b: a <= b, None), "eq": (lambda a, b: a == b, None),
  "ne": (lambda a, b: a != b, None), "gt": (lambda a, b: a > b, None), "ge": (lambda a, b: a >= b, None),
  "where": (lambda a, b: torch.where(a > b, a, b), lambda a, b: (a > b).where(a, b)),
  "clip_tensor_bounds": (lambda a, b: torch.clamp(a, b, b + 1), lambda a, b: a.clip(b, b + 1)),
}

EXACT = {"fmod": np.fmod, "remainder": np.remainder, "floordiv": np.floor_divide}

@pytest.mark.parametrize("name", list(BINARY))
def test_binary_special_values(device, name):
  tfn, wfn = BINARY[name]
  divisors = BINARY_SPECIAL
  # torch's fmod (SLEEF's) is not exact for large quotients (in float64 too) and gives NaN for them and for a denormal divisor
  # in float32: the reference is the exact one (C's, numpy's), and denormal divisors are left out (a device may flush them)
  if name in EXACT: divisors = [v for v in BINARY_SPECIAL if v != 1e-45]
  a, b = np.meshgrid(np.array(BINARY_SPECIAL), np.array(divisors), indexing="ij")
  compare(device, tfn, wfn, [a.reshape(-1), b.reshape(-1)], rtol=EXP_RTOL if name == "pow" else RTOL,
          grad=name not in ("floordiv", "truncdiv"), exact_fn=EXACT.get(name))

@pytest.mark.parametrize("weight", [0.0, 0.5, 1.0, -1.0, 2.0, inf, nan])
def test_lerp_weights(device, weight):
  # torch's vectorized lerp computes end + (weight - 1) * (end - start) in one fused multiply-add: without the intermediate
  # overflow of (weight - 1) * (end - start) near 3e38 that this (and torch's own scalar loop) rounds to inf
  vals = [v for v in BINARY_SPECIAL if abs(v) != 3e38] if not 0 <= weight <= 1 else BINARY_SPECIAL
  a, b = np.meshgrid(np.array(vals), np.array(vals), indexing="ij")
  compare(device, lambda x, y: torch.lerp(x, y, weight), lambda x, y: x.lerp(y, weight), [a.reshape(-1), b.reshape(-1)])

def test_lerp_tensor_weight(device):
  a, b, w = np.meshgrid(np.array([0.0, 1.0, -2.0, 3e38, inf, -inf, nan]), np.array([1.0, -1e8, inf, nan]),
                        np.array([0.0, 0.3, 0.5, 1.0, 2.0, inf, nan]), indexing="ij")
  compare(device, torch.lerp, lambda x, y, z: x.lerp(y, z), [a.reshape(-1), b.reshape(-1), w.reshape(-1)])

def test_int_pow_negative_exponent_raises(device):
  with pytest.raises(RuntimeError, match="integers to negative integer powers are not allowed"): Tensor([2], device=device) ** -1
  # a tensor exponent computes like torch's: the integer result (0 for |base| > 1)
  np.testing.assert_array_equal((Tensor([2, -1, 1, 3], device=device) ** Tensor([-1, -1, -3, 2], device=device)).numpy(),
                                (torch.tensor([2, -1, 1, 3]) ** torch.tensor([-1, -1, -3, 2])).numpy())
  np.testing.assert_array_equal((Tensor([2, -3], device=device) ** 3).numpy(), [8, -27])

# ---------------------------------------------------------------- reductions and scans over rows with special values
ROWS = np.array([[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, inf, 4.0], [1.0, nan, 3.0, 4.0], [-inf, 1.0, 2.0, 3.0],
                 [inf, inf, 1.0, 2.0], [-inf, -inf, -inf, -inf], [3e38, 3e38, 3e38, 3e38], [0.1, 0.1, 0.1, 0.1],
                 [1e-45, -1e-45, 0.0, -0.0], [-1e4, 1e4, 0.0, 1.0], [inf, -inf, 1.0, 2.0], [nan, nan, 1.0, nan],
                 [0.0, 1000.0, -1000.0, 20.0], [2.0, 2.0, 2.0, 2.0]])
REDUCE = {
  "sum": (lambda x: x.sum(1), None), "prod": (lambda x: x.prod(1), None), "mean": (lambda x: x.mean(1), None),
  "max": (lambda x: x.max(1)[0], lambda x: x.max(1)), "min": (lambda x: x.min(1)[0], lambda x: x.min(1)),
  # (torch.amax's own gradient is NaN over a slice holding a NaN; tinyweb's is torch.max()'s: helpers.amax_ref)
  "amax": (lambda x: amax_ref(x, 1), lambda x: x.max(1)), "amin": (lambda x: amin_ref(x, 1), lambda x: x.min(1)),
  "amax_all": (lambda x: amax_ref(x), lambda x: x.max()),
  "var": (lambda x: x.var(1), None), "std": (lambda x: x.std(1), None), "var_all": (lambda x: x.var(), None),
  "std_unbiased0": (lambda x: x.std(1, correction=0), lambda x: x.std(1, correction=0)),
  "argmax": (lambda x: x.argmax(1), None), "argmin": (lambda x: x.argmin(1), None),
  "argmax_all": (lambda x: x[2:3].argmax(), None),
  "cumsum": (lambda x: x.cumsum(1), lambda x: x.cumsum(1)), "cumprod": (lambda x: x.cumprod(1), lambda x: x.cumprod(1)),
  "cummax": (lambda x: torch.cummax(x, 1)[0], lambda x: x.cummax(1)[0]),
  "logcumsumexp": (lambda x: torch.logcumsumexp(x, 1), lambda x: x.logcumsumexp(1)),
  "logsumexp": (lambda x: torch.logsumexp(x, 1), lambda x: x.logsumexp(1)),
  "softmax": (lambda x: torch.softmax(x, 1), lambda x: x.softmax(1)), "log_softmax": (lambda x: torch.log_softmax(x, 1), lambda x: x.log_softmax(1)),
}
# torch's max/min along a dim give the whole gradient to the index they return (tinyweb's max/min, like torch's amax/amin,
# share it between ties); torch's gradient of cummax/prod/cumprod with ties, infinities and NaNs follows its kernels'
NO_GRAD_COMPARE = {"max", "min", "cummax", "prod", "cumprod"}

# rows left out of the gradient comparison, where torch's float32 gradient is not the derivative of its own result:
# - logsumexp's exp(x - logsumexp(x)) is 1 per element of [3e38] * 4 (3e38 + log(4) rounds to 3e38; the exact one is 1/4)
# - var's backward takes a mean that overflows on [3e38] * 4 (its forward, Welford's, does not: the variance is 0); std's is
#   NaN there, and on [+-1e-45, +-0] it divides by a denormal std computed in double (in float32 the variance underflows to 0)
NO_GRAD_ROWS = {"logsumexp": [6], "logcumsumexp": [6], "var": [6], "std": [6, 8], "std_unbiased0": [6, 8]}

@pytest.mark.parametrize("name", list(REDUCE))
def test_reductions_special_values(device, name):
  tfn, wfn = REDUCE[name]
  if name in NO_GRAD_ROWS: compare(device, tfn, wfn, [ROWS], grad=False)
  rows = np.delete(ROWS, NO_GRAD_ROWS.get(name, []), axis=0)
  compare(device, tfn, wfn, [rows], grad=name not in NO_GRAD_COMPARE, varied_cotangent=True)

def test_long_scans_special_values(device):
  """Scans longer than 256 go through blocks: an inf or NaN must not spill into the other blocks' offsets."""
  x = np.random.default_rng(0).uniform(-2, 2, (2, 600)).astype(np.float32)
  x[0, 300], x[1, 10], x[1, 400] = inf, nan, -inf
  for name in ("cumsum", "logcumsumexp"):
    tfn, wfn = REDUCE[name]
    # (logcumsumexp's gradient, PyTorch's formula, is a difference of two sums of exps: it cancels where g changes sign)
    compare(device, tfn, wfn, [x], rtol=1e-4, grad_atol=1e-6, varied_cotangent=True)

def test_losses_special_logits(device):
  """Cross-entropy and binary cross-entropy with logits at -inf (masked classes), huge, tiny and 0 logits."""
  logits = np.array([[0.0, -inf, 1.0], [1e4, 0.0, -1e4], [3e38, 0.0, 0.0], [-inf, -inf, 0.0], [1.0, 2.0, 3.0], [-1e4, 1e4, 0.0]])
  y = np.array([0, 2, 1, 2, 0, 0])
  compare(device, lambda x: F.cross_entropy(x, torch.tensor(y), reduction="none"),
          lambda x: x.cross_entropy(Tensor(y.astype(np.int32), device=device), reduction="none"), [logits], varied_cotangent=True)
  x = np.array([0.0, -inf, inf, 1e4, -1e4, 100.0, -100.0, 3e38, -3e38, 0.5, -0.0, 20.0])
  t = np.array([1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.3, 0.5, 0.0])
  compare(device, lambda v: F.binary_cross_entropy_with_logits(v, torch.tensor(t, dtype=v.dtype), reduction="none"),
          lambda v: v.binary_crossentropy_logits(Tensor(t.astype(np.float32), device=device), reduction="none"), [x],
          varied_cotangent=True)

@pytest.mark.parametrize("dt", [dtypes.float16, dtypes.bfloat16], ids=["float16", "bfloat16"])
def test_half_precision_intermediates_do_not_overflow(device, dt):
  """In float16 x^2 overflows above 256 and exp(x) above 11: asinh/acosh of 300 were NaN/inf, softplus(20) inf."""
  v = np.array([0.0, 1e-3, -0.5, 3.0, 20.0, -20.0, 100.0, 300.0, 1000.0, -1000.0, 60000.0, inf, -inf, nan], np.float32)
  tdt = torch.float16 if dt == dtypes.float16 else torch.bfloat16
  for name in ("asinh", "acosh", "softplus", "softplus_beta", "logsigmoid", "mish", "tanh", "sigmoid"):
    tfn, wfn, _ = UNARY[name]
    with expect_unsupported(device, dt):
      ours = wfn(Tensor(v, device=device).cast(dt)).cast(dtypes.float32).numpy()
      ref = tfn(torch.tensor(v).to(tdt)).float().numpy()
      assert_matches(ours, ref, ref, f"{name} in {dt.name}", rtol=2e-2, atol=1e-3)

@pytest.mark.parametrize("name,fn", [("floordiv", lambda x: x // nan), ("mod+exp", lambda x: (x % nan).exp()),
                                     ("exp", lambda x: (x * nan).exp()), ("trunc", lambda x: (x * nan).trunc()),
                                     ("floor", lambda x: (x / nan).floor()), ("sigmoid", lambda x: (x + nan).sigmoid())])
def test_nan_constant_through_math_functions(device, name, fn):
  # a NaN the kernel compiler can see as a constant (PoCL folded trunc/exp2 of one to garbage; one read from memory was right)
  if device == "WEBGPU": pytest.skip("WGSL: NaN arithmetic is indeterminate (§15.7.2, finite math)")
  x = np.arange(1, 18, dtype=np.float32)
  assert_matches(fn(Tensor(x, device=device)).numpy(), fn(torch.tensor(x)).numpy(), fn(torch.tensor(x, dtype=torch.float64)).numpy(), name)
