"""Shared helpers for the differential tests: run the same function in torch and in tinyweb and compare
forward values and gradients."""
import functools
import numpy as np
import torch
from tinyweb import Tensor

class Draw:
  """one source of random integers: hypothesis' data.draw (shrinkable, derandomized) or a seeded numpy RNG"""
  def __init__(self, fn): self._fn = fn
  def int(self, lo, hi): return int(self._fn(lo, hi))  # inclusive
  def bool(self): return self.int(0, 1) == 1
  def choice(self, seq): return seq[self.int(0, len(seq) - 1)]
  def perm(self, n):
    p = list(range(n))
    for i in range(n - 1, 0, -1):
      j = self.int(0, i)
      p[i], p[j] = p[j], p[i]
    return p
  def subset(self, n, k): return sorted(self.perm(n)[:k])

def rng_draw(seed):
  rng = np.random.default_rng(seed)
  return Draw(lambda lo, hi: rng.integers(lo, hi + 1))

def rand_np(shape, low=-2.0, high=2.0, dtype=np.float32, seed=0):
  rng = np.random.default_rng(seed)
  if np.issubdtype(dtype, np.integer): return rng.integers(int(low), int(high), size=shape).astype(dtype)
  if dtype == np.bool_: return rng.random(shape) < 0.5
  return rng.uniform(low, high, size=shape).astype(dtype)

def check_op(shapes, torch_fn, tw_fn=None, device="CPU", vals=None, atol=1e-5, rtol=1e-4, grad=True,
             grad_atol=None, grad_rtol=None, low=-2.0, high=2.0, dtype=np.float32, seed=0):
  """Compare `torch_fn(*torch_inputs)` with `tw_fn(*tinyweb_inputs)` (tw_fn defaults to torch_fn).
  Inputs are random arrays of `shapes` (or the given numpy `vals`). With grad=True (float inputs only),
  also compares the gradients of sum(out * cotangent) with respect to every input."""
  tw_fn = tw_fn or torch_fn
  if vals is None: vals = [rand_np(s, low, high, dtype, seed + i) for i, s in enumerate(shapes)]
  vals = [np.asarray(v) for v in vals]
  is_float = all(np.issubdtype(v.dtype, np.floating) for v in vals)
  grad = grad and is_float and len(vals) > 0
  tt = [torch.tensor(v, requires_grad=grad) for v in vals]
  ww = [Tensor(v, device=device, requires_grad=grad) for v in vals]
  tout, wout = torch_fn(*tt), tw_fn(*ww)
  assert tuple(wout.shape) == tuple(tout.shape), f"shape mismatch: tinyweb {wout.shape} vs torch {tuple(tout.shape)}"
  got, exp = wout.numpy(), tout.detach().numpy()
  # tinyweb's default integer is int32 (torch: int64), a documented difference: integer outputs compare by kind only
  same = got.dtype == exp.dtype or (got.dtype.kind in "iu" and got.dtype.kind == exp.dtype.kind)
  assert same, f"dtype mismatch: tinyweb {got.dtype} vs torch {exp.dtype}"
  np.testing.assert_allclose(got, exp, atol=atol, rtol=rtol, err_msg="forward mismatch")
  if grad and tout.dtype.is_floating_point and tout.requires_grad:
    cot = rand_np(tuple(tout.shape), -1.0, 1.0, np.float32, seed=seed + 100).astype(exp.dtype)
    (tout * torch.tensor(cot)).sum().backward()
    (wout * Tensor(cot, device=device)).sum().backward()
    for i, (t, w) in enumerate(zip(tt, ww)):
      tg = t.grad.numpy() if t.grad is not None else np.zeros_like(vals[i])
      assert w.grad is not None, f"no gradient for input {i}"
      np.testing.assert_allclose(w.grad.numpy(), tg, atol=grad_atol or atol * 10, rtol=grad_rtol or rtol * 10,
                                 err_msg=f"gradient mismatch for input {i}")
  return wout

# ---- dtypes a device refuses: each device lists them in one place (its renderer's `unsupported`: dtype -> reason);
# tests that reach one assert the clear error (a TypeError naming the dtype and the device) instead of a result.
import contextlib, pytest

def refused(device, *dts) -> bool:
  from tinyweb.device import Device
  return any(dt in Device[device].renderer.unsupported for dt in dts)

@contextlib.contextmanager
def expect_unsupported(device, *dts):
  """Runs the block; where `device` refuses one of `dts` the block must raise that device's clear error."""
  if not refused(device, *dts):
    yield
    return
  with pytest.raises(TypeError, match=f"is not supported on {device}"): yield

@functools.cache
def _hardtanh_ref_fn():   # (made on first use: in the browser suite torch is a proxy module, whose classes cannot be subclassed)
  class HardtanhRef(torch.autograd.Function):
    """F.hardtanh with the gradient of torch's vectorized kernel, 0 at NaN: its scalar tail (a tensor's last size % 16
    elements) passes a NaN's gradient through instead, so torch's own answer there depends on the element's position"""
    @staticmethod
    def forward(ctx, x, lo, hi):
      ctx.save_for_backward(x); ctx.lo, ctx.hi = lo, hi
      return torch.nn.functional.hardtanh(x, lo, hi)
    @staticmethod
    def backward(ctx, g):
      x, = ctx.saved_tensors
      return torch.where((x > ctx.lo) & (x < ctx.hi), g, 0.0), None, None
  return HardtanhRef.apply
def hardtanh_ref(x, lo=-1.0, hi=1.0): return _hardtanh_ref_fn()(x, lo, hi)

@functools.cache
def _hardswish_ref_fn():
  class HardswishRef(torch.autograd.Function):
    """F.hardswish with the gradient of torch's vectorized kernel, NaN at NaN (the middle branch is the one left); its
    scalar tail (a tensor's last size % 32 elements) takes the last branch there (g): torch's answer depends on position"""
    @staticmethod
    def forward(ctx, x):
      ctx.save_for_backward(x)
      return torch.nn.functional.hardswish(x)
    @staticmethod
    def backward(ctx, g):
      x, = ctx.saved_tensors
      return torch.where(x <= -3, 0.0, torch.where(x >= 3, g, g * (x / 3 + 0.5)))
  return HardswishRef.apply
def hardswish_ref(x): return _hardswish_ref_fn()(x)

@functools.cache
def _elu_ref_fn():
  class EluRef(torch.autograd.Function):
    """torch's elu family (aten.elu: elu, celu = input_scale 1/alpha, selu = its alpha and scale) with the gradient of
    its vectorized kernel, NaN at NaN (the negative branch is taken unless x > 0): the scalar tail (a tensor's last
    size % 32 elements) takes the positive branch there, so torch's own answer depends on the element's position"""
    @staticmethod
    def forward(ctx, x, alpha, scale, input_scale):
      ctx.save_for_backward(x); ctx.args = alpha, scale, input_scale
      return torch.ops.aten.elu(x, alpha, scale, input_scale)
    @staticmethod
    def backward(ctx, g):
      (x,), (alpha, scale, input_scale) = ctx.saved_tensors, ctx.args
      return torch.where(x > 0, g * scale, g * (input_scale * scale * alpha) * torch.exp(x * input_scale)), None, None, None
  return EluRef.apply
def elu_ref(x, alpha=1.0, scale=1.0, input_scale=1.0): return _elu_ref_fn()(x, alpha, scale, input_scale)
def selu_ref(x): return elu_ref(x, 1.6732632423543772, 1.0507009873554805)   # (F.selu's alpha and scale)

@functools.cache
def _extreme_ref_fn():
  class ExtremeRef(torch.autograd.Function):
    """torch.amax/amin with torch.max()'s gradient (its evenly_distribute_backward): split evenly between the tied
    extremes, a NaN counting as equal to a NaN result. torch.amax's own backward leaves NaN out, so a slice holding a NaN
    gets 0/0 = NaN everywhere, while torch.max() and torch.max(dim) give the NaN the gradient: torch disagrees with itself"""
    @staticmethod
    def forward(ctx, x, dims, keepdim, is_max):
      out = (torch.amax if is_max else torch.amin)(x, dim=dims, keepdim=keepdim)
      ctx.save_for_backward(x, out); ctx.dims, ctx.keepdim = dims, keepdim
      return out
    @staticmethod
    def backward(ctx, g):
      x, out = ctx.saved_tensors
      dims = tuple(range(x.ndim)) if ctx.dims in (None, ()) else tuple(d % x.ndim for d in ((ctx.dims,) if isinstance(ctx.dims, int) else ctx.dims))
      if not ctx.keepdim:
        for d in sorted(dims): out, g = out.unsqueeze(d), g.unsqueeze(d)
      hit = (x == out) | (x.isnan() & out.isnan())
      return g * hit / hit.sum(dims, keepdim=True), None, None, None
  return ExtremeRef.apply
def amax_ref(x, dim=None, keepdim=False): return _extreme_ref_fn()(x, dim, keepdim, True)
def amin_ref(x, dim=None, keepdim=False): return _extreme_ref_fn()(x, dim, keepdim, False)

def same_as_cpu(device: str, fn):
  """fn(d) on `device` and on CPU (the C/clang device: the reference where a compiler or an instruction set would leave
  the result undefined or trap), as numpy arrays; skips without the CPU device."""
  from tinyweb import Device
  cpu_ok, cpu_why = Device.check("CPU")
  if not cpu_ok: pytest.skip(f"CPU device (the reference) unavailable: {cpu_why}")
  return fn(device), fn("CPU")

def assert_same_bits(got: np.ndarray, exp: np.ndarray):
  """Equal bit for bit (so -0.0 != 0.0), except that any NaN equals any NaN: IEEE leaves a NaN's sign and payload to
  the hardware and the compiler (x86 gives its own default NaN where clang's code passes the operand's through)."""
  assert got.dtype == exp.dtype and got.shape == exp.shape
  if got.dtype.kind == "f":
    np.testing.assert_array_equal(np.isnan(got), np.isnan(exp))
    got, exp = np.where(np.isnan(got), 0, got), np.where(np.isnan(exp), 0, exp)
  np.testing.assert_array_equal(got.view(f"u{got.itemsize}") if got.dtype.kind == "f" else got,
                                exp.view(f"u{exp.itemsize}") if exp.dtype.kind == "f" else exp)
