"""Where PyTorch's answer is a convention rather than the formula's plain derivative, tinyweb gives PyTorch's, forward and
gradient, on every device: which tied or NaN element a max routes its gradient to, gradients through zeros (cumprod)
and clamps, the losses' gradients beyond their clamped logs, attention's math path (its scaling, its fully masked rows),
gradients through setitem, resampling taps next to an inf, and argument forms PyTorch accepts. Each case is compared
element by element with torch's float32 CPU result: NaN where torch has NaN, the same infinities, finite values close."""
import math
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Tensor, dtypes

inf, nan = math.inf, math.nan

def assert_like_torch(got, ref, what, rtol=1e-5, atol=1e-6):
  got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
  assert got.shape == ref.shape, f"{what}: shape {got.shape}, torch {ref.shape}"
  with np.errstate(invalid="ignore"):
    same_class = (np.isnan(got) == np.isnan(ref)) & (np.isinf(got) == np.isinf(ref)) & ((got == ref) | ~np.isinf(ref))
    close = np.isnan(ref) | np.isinf(ref) | (np.abs(got - ref) <= atol + rtol * np.abs(ref))
  bad = ~(same_class & close)
  assert not bad.any(), f"{what}: at {np.argwhere(bad)[:6].tolist()}: tinyweb {got[bad][:6]}, torch {ref[bad][:6]}"

def grads_like_torch(device, fn_tw, fn_pt, *inputs, cot=None, what="", torch_dtype=torch.float32):
  """forward values and the gradient of every input of sum(out * cot) against torch (in float32 unless told)"""
  tw = [Tensor(np.asarray(x, np.float32), device=device, requires_grad=True) for x in inputs]
  pt = [torch.tensor(np.asarray(x, np.float32), dtype=torch_dtype, requires_grad=True) for x in inputs]
  out_tw, out_pt = fn_tw(*tw), fn_pt(*pt)
  assert_like_torch(out_tw.numpy(), out_pt.detach().numpy(), f"{what} forward")
  c = np.ones(out_pt.shape, np.float32) if cot is None else np.asarray(cot, np.float32)
  (out_tw * Tensor(c, device=device)).sum().backward(); (out_pt * torch.tensor(c, dtype=torch_dtype)).sum().backward()
  for i, (a, b) in enumerate(zip(tw, pt)):
    assert_like_torch(a.grad.numpy(), b.grad.numpy(), f"{what} grad of input {i}")

# ----------------------------------------------------------------------------------------- ties and NaN in max-like ops

@pytest.mark.parametrize("row", [[1.0, 1.0, 0.0, 1.0], [1.0, nan, 3.0, nan], [3.0, 1.0, 3.0, 2.0], [-inf, -inf, 1.0, 1.0]])
def test_cummax_gradient_goes_to_the_last_running_max(device, row):
  grads_like_torch(device, lambda x: x.cummax(0)[0], lambda x: torch.cummax(x, 0).values, row, cot=[1.0, 2.0, 3.0, 4.0], what=f"cummax {row}")

@pytest.mark.parametrize("window", [[1.0, 3.0, 3.0], [nan, 1.0, nan], [1.0, nan, nan], [-inf, -inf, -inf], [2.0, 2.0, 2.0]])
@pytest.mark.parametrize("padding", [0, 1])
def test_max_pool_gradient_goes_to_one_element_per_window(device, window, padding):
  # torch: the first maximum of a window in row-major order, its last NaN, never a padding position
  x = np.array([[window + window[::-1]]], np.float32)   # (1, 1, 6): windows of 3 with stride 3
  grads_like_torch(device, lambda t: t.max_pool1d(3, padding=padding), lambda t: F.max_pool1d(t, 3, padding=padding), x,
                   what=f"max_pool1d {window} padding={padding}")
  x2 = np.array([[[window[:2], window[1:]]]], np.float32)   # (1, 1, 2, 2): one 2x2 window
  grads_like_torch(device, lambda t: t.max_pool2d(2), lambda t: F.max_pool2d(t, 2), x2, what=f"max_pool2d {window}")

def test_max_pool_overlapping_windows_with_ties(device):
  x = np.array([[[[1.0, 1.0, 1.0], [1.0, 2.0, 2.0], [0.0, 2.0, 2.0]]]], np.float32)
  grads_like_torch(device, lambda t: t.max_pool2d(2, stride=1), lambda t: F.max_pool2d(t, 2, stride=1), x, what="max_pool2d ties")

# ------------------------------------------------------------------------------------------------------ clamps at NaN

def test_hardtanh_and_relu6_gradients_at_nan_and_bounds(device):
  # torch's vectorized kernel (every element of a tensor of 16+ floats but the tail): 0 at NaN and at the bounds
  v = np.array([nan, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, 7.0, nan, 2.0, -3.0, 5.9, 6.1, nan] * 2, np.float32)
  grads_like_torch(device, lambda x: x.hardtanh(), lambda x: F.hardtanh(x), v, what="hardtanh")
  grads_like_torch(device, lambda x: x.relu6(), lambda x: F.relu6(x), v, what="relu6")
  grads_like_torch(device, lambda x: x.clip(0.0, 6.0), lambda x: torch.clamp(x, 0.0, 6.0), v, what="clip")

def test_elu_family_gradient_at_nan(device):
  # torch's vectorized kernel (every element but a tensor's last size % 32): NaN at NaN, the negative branch's formula
  v = np.array([nan, -1.0, 0.0, 2.0, nan, -inf, inf, -0.5] * 8, np.float32)
  grads_like_torch(device, lambda x: x.elu(2.0), lambda x: F.elu(x, 2.0), v, what="elu")
  grads_like_torch(device, lambda x: x.celu(0.5), lambda x: F.celu(x, 0.5), v, what="celu")
  grads_like_torch(device, lambda x: x.selu(), lambda x: F.selu(x), v, what="selu")

# ------------------------------------------------------------------------------------------------- cumprod through zeros

@pytest.mark.parametrize("row,cot", [([3.0, 0.0, -2.0, -2.0, 1.0], [1.0, 1.0, 0.0, 0.5, -1.0]),
                                     ([0.0, 0.0, inf, 0.0], [inf, inf, 1.0, 1.0]),
                                     ([0.0, inf, 0.0, inf], [0.0, 1.0, 1.0, 0.5]),
                                     ([1e30, 0.0, 1e30, 3.0, 0.0, inf], [inf, inf, -1.0, 1.0, 1.0, -1.0]),
                                     ([2.0, 0.5, 4.0, -1.0], [1.0, -1.0, 2.0, 0.5]),
                                     ([1.0, 1.0], [inf, inf])])
def test_cumprod_gradient_through_zeros(device, row, cot):
  # after a row's first zero every gradient is exactly 0, even against an infinite upstream gradient
  grads_like_torch(device, lambda x: x.cumprod(0), lambda x: torch.cumprod(x, 0), row, cot=cot, what=f"cumprod {row}")

def test_cumprod_of_mod_then_log_has_torchs_gradient(device):
  grads_like_torch(device, lambda x: (x % x).cumprod(0).log2(), lambda x: torch.log2(torch.cumprod(x % x, 0)), [1.0, 1.0],
                   what="(x % x).cumprod().log2()")

# ------------------------------------------------------------------------------------------------------------- losses

def test_binary_cross_entropy_gradients_beyond_the_clamped_logs(device):
  p = np.array([1.0, 0.0, 1.0, 0.0, 0.5, 1e-30, 1 - 1e-7, 0.3], np.float32)
  y = np.array([1.0, 0.0, 0.0, 1.0, 0.2, 1.0, 0.0, 0.3], np.float32)
  grads_like_torch(device, lambda a, b: a.binary_crossentropy(b, reduction="none"),
                   lambda a, b: F.binary_cross_entropy(a, b, reduction="none"), p, y, what="binary_crossentropy")

@pytest.mark.parametrize("pos_weight", [None, [1.0, 2.0, 0.5, 1.0, 3.0, 1.0, 1.0, 0.1]])
def test_binary_cross_entropy_with_logits_gradients_at_infinite_logits(device, pos_weight):
  # torch's formulas (sigmoid(x) - y; -x or logsigmoid(-x) - pw logsigmoid(x) for the target), not the expression's
  # derivative, which meets 0 * inf at an infinite logit
  x, y = [1.0, -inf, inf, 0.0, -30.0, 30.0, nan, 2.0], [1.0, 1.0, 0.0, 0.5, 0.2, 0.7, 1.0, 0.0]
  pw_tw = None if pos_weight is None else Tensor(np.array(pos_weight, np.float32), device=device)
  pw_pt = None if pos_weight is None else torch.tensor(pos_weight)
  grads_like_torch(device, lambda a, b: a.binary_crossentropy_logits(b, "none", pw_tw),
                   lambda a, b: F.binary_cross_entropy_with_logits(a, b, reduction="none", pos_weight=pw_pt), x, y, what="bce_logits")

def test_var_with_correction_at_least_n(device):
  x = np.array([[0.0, 100.0], [2.0, 2.0]], np.float32)
  for c in (2, 3):
    grads_like_torch(device, lambda t: t.var(1, correction=c), lambda t: torch.var(t, 1, correction=c), x, what=f"var correction={c}")
    grads_like_torch(device, lambda t: t.var(correction=c + 2), lambda t: torch.var(t, correction=c + 2), x, what=f"var() correction={c + 2}")
  grads_like_torch(device, lambda t: t.var(correction=2), lambda t: torch.var(t, correction=2), np.float32(1.0), what="0-d var")
  grads_like_torch(device, lambda t: t.var(correction=2), lambda t: torch.var(t, correction=2), [1.0], what="var() n - c < 0")

# ---------------------------------------------------------------------------------------------------------- attention

@pytest.mark.parametrize("scale", [None, 1e-30, 0.0, -0.25])
def test_sdpa_scales_query_and_key_like_torchs_math_path(device, scale):
  from torch.nn.attention import sdpa_kernel, SDPBackend
  q = np.array([[[1e20, 1.0], [-3e38, 2.0]]], np.float32)
  k = np.array([[[1e20, 0.5], [0.0, 1.0], [2.0, -2.0]]], np.float32)
  v = np.array([[[1.0], [2.0], [3.0]]], np.float32)
  with sdpa_kernel(SDPBackend.MATH): ref = F.scaled_dot_product_attention(torch.tensor(q), torch.tensor(k), torch.tensor(v), scale=scale)
  got = Tensor(q, device=device).scaled_dot_product_attention(Tensor(k, device=device), Tensor(v, device=device), scale=scale)
  assert_like_torch(got.numpy(), ref.numpy(), f"sdpa scale={scale}")

def test_sdpa_fully_masked_rows_give_zeros_and_softmaxs_gradient(device):
  from torch.nn.attention import sdpa_kernel, SDPBackend
  mask = np.array([[False, False, False], [True, False, True]])
  q, k = np.array([[1.0, 2.0], [0.5, -1.0]], np.float32), np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 2.0]], np.float32)
  v = np.array([[1.0], [2.0], [4.0]], np.float32)
  def pt(a, b, c):
    with sdpa_kernel(SDPBackend.MATH): return F.scaled_dot_product_attention(a, b, c, attn_mask=torch.tensor(mask))
  grads_like_torch(device, lambda a, b, c: a.scaled_dot_product_attention(b, c, attn_mask=Tensor(mask, device=device)), pt,
                   q, k, v, what="sdpa, a fully masked row")
  # through sqrt (an infinite gradient at the zero output): torch's NaN reaches q and k through the additive mask
  grads_like_torch(device, lambda a, b, c: a.scaled_dot_product_attention(b, c, attn_mask=Tensor(mask, device=device)).sqrt(),
                   lambda a, b, c: pt(a, b, c).sqrt(), q, k, v, what="sqrt(sdpa), a fully masked row")

# ------------------------------------------------------------------------------------------------------------ setitem

def test_setitem_value_gets_the_gradient(device):
  g = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
  for realized in (False, True):
    base = Tensor.ones(2, 2, device=device)
    if realized: base.realize()
    v = Tensor([5.0, 6.0], device=device, requires_grad=True)
    base[1] = v * 3
    assert base.requires_grad
    (base * Tensor(g, device=device)).sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), 3 * g[1], err_msg=f"realized={realized}")
  x = Tensor.ones(2, 2, device=device).clone()
  empty = Tensor.ones(0, 2, device=device, requires_grad=True)
  x[1:1] = empty
  x.sum().backward()
  assert empty.grad is not None and empty.grad.shape == (0, 2)

# ---------------------------------------------------------------------------------------------- resampling next to inf

@pytest.mark.parametrize("x,kw", [([[[1.0, inf]]], dict(size=4, mode="linear")),
                                  ([[[1.0, 2.0, inf]]], dict(size=5, mode="linear", align_corners=True)),
                                  ([[[1.0, 2.0, inf]]], dict(size=5, mode="linear")),
                                  ([[[[1.0, 2.0, inf]]]], dict(size=(1, 5), mode="bilinear")),
                                  ([[[[1.0, 2.0, inf], [1.0, 1.0, 1.0]]]], dict(size=(3, 5), mode="bilinear", align_corners=True)),
                                  ([[[inf]]], dict(size=3, mode="linear")),
                                  ([[[1.0, inf, 3.0, nan]]], dict(size=4, mode="linear")),
                                  ([[[1.0, inf, 3.0, nan]]], dict(size=4, mode="linear", align_corners=True)),
                                  ([[[[1.0, inf], [3.0, 4.0]]]], dict(size=(2, 3), mode="bilinear")),
                                  ([[[[1.0, inf], [3.0, 4.0]]]], dict(size=(3, 2), mode="bilinear")),
                                  ([[[1.0, inf, 2.0, 3.0, 4.0]]], dict(size=2, mode="area")),
                                  ([[[1.0, inf, 2.0, 3.0, 4.0]]], dict(size=3, mode="nearest"))])
def test_resampling_reads_only_the_taps_torch_reads(device, x, kw):
  # an inf reaches the outputs whose taps include it (as NaN where its weight is 0), and no others
  assert_like_torch(Tensor(x, device=device).interpolate(**kw).numpy(), F.interpolate(torch.tensor(x), **kw).numpy(), f"interpolate {kw}")

def test_interpolate_gradient_of_an_infinite_upstream(device):
  grads_like_torch(device, lambda t: t.interpolate((7,), mode="linear") / -0.0,
                   lambda t: F.interpolate(t, size=(7,), mode="linear") / -0.0, [[[1.0]]], what="interpolate / -0.0")

@pytest.mark.parametrize("i,o", [(s, t) for s in range(1, 8) for t in range(1, 8)])
def test_linear_interpolate_positions_match_torch(device, i, o):
  x = np.random.default_rng(i * 10 + o).standard_normal((1, 2, i)).astype(np.float32)
  for ac in (False, True):
    assert_like_torch(Tensor(x, device=device).interpolate(o, align_corners=ac).numpy(),
                      F.interpolate(torch.tensor(x), o, mode="linear", align_corners=ac).numpy(), f"{i} -> {o} align_corners={ac}")

def test_adaptive_avg_pool_with_inf(device):
  x = np.array([[[1.0, inf, 2.0, 3.0, -1.0, 4.0, 5.0]]], np.float32)
  assert_like_torch(Tensor(x, device=device).adaptive_avg_pool2d((3,)).numpy(), F.adaptive_avg_pool1d(torch.tensor(x), 3).numpy(),
                    "adaptive_avg_pool")

def test_clamp_keeps_the_sign_of_zero_and_takes_a_nan_bound(device):
  # torch's clamp gives x itself unless x passes the bound: relu6(-0.0) is -0.0 (1 / it is -inf; CPU seed 12 case 171)
  x = np.array([-0.0, 0.0, -1, 7, nan, 3, -inf, inf], np.float32)
  lo_t = np.array([0, 1, nan, -0.0, 0, 0, 0, 0], np.float32)
  cases = [(lambda t, lo, hi: t.clamp(lo, hi), 0.0, 6.0), (lambda t, lo, hi: t.clamp(lo, hi), nan, 6.0),
           (lambda t, lo, hi: t.clamp(lo, hi), None, -0.0), (lambda t, lo, hi: t.clamp(lo), "tensor", None)]
  for fn, lo, hi in cases:
    lo_tw, lo_pt = (Tensor(lo_t, device=device), torch.tensor(lo_t)) if lo == "tensor" else (lo, lo)
    got, ref = fn(Tensor(x, device=device), lo_tw, hi).numpy(), fn(torch.tensor(x), lo_pt, hi).numpy()
    assert_like_torch(got, ref, f"clamp({lo}, {hi})")
    assert (np.signbit(got) == np.signbit(ref)).all(), f"clamp({lo}, {hi}): signs {got}, torch {ref}"
  got, ref = Tensor(x, device=device).relu6().numpy(), F.relu6(torch.tensor(x)).numpy()
  assert_like_torch(got, ref, "relu6")
  assert (np.signbit(got) == np.signbit(ref)).all(), f"relu6: signs {got}, torch {ref}"

@pytest.mark.parametrize("dim", [0, 1])
def test_scatter_with_repeated_indices_writes_the_last(device, dim):
  # torch's CPU loop: the last entry naming a position writes it, exactly (-0.0, NaN); the gradient reaches every entry
  # (a sum of the repeated entries gave 3.0 for three writes of 1.0; fuzz PYTHON seed 14 case 533)
  rng = np.random.default_rng(dim)
  x, src = rng.standard_normal((3, 5)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
  src[0, 0], src[1, 1] = -0.0, nan
  index = rng.integers(0, x.shape[dim], (3, 4))
  tw = [Tensor(a, device=device, requires_grad=True) for a in (x, src)]
  pt = [torch.tensor(a, requires_grad=True) for a in (x, src)]
  out_tw, out_pt = tw[0].scatter(dim, Tensor(index.astype(np.int32), device=device), tw[1]), torch.scatter(pt[0], dim, torch.tensor(index), pt[1])
  got, ref = out_tw.numpy(), out_pt.detach().numpy()
  assert_like_torch(got, ref, "scatter")
  assert (np.signbit(got) == np.signbit(ref)).all(), f"scatter: signs {got}, torch {ref}"
  cot = rng.standard_normal(ref.shape).astype(np.float32)
  (out_tw * Tensor(cot, device=device)).sum().backward(); (out_pt * torch.tensor(cot)).sum().backward()
  for name, a, b in zip(("input", "src"), tw, pt): assert_like_torch(a.grad.numpy(), b.grad.numpy(), f"scatter grad of {name}")

def test_signed_zeros_and_scalar_edge_cases_like_torch(device):
  # nll_loss of an ignored target is +0.0 (rsqrt of it is +inf; PYTHON seed 22 case 955); the gradient of a 0-d prod is
  # the upstream gradient even at NaN (torch: the product of no others; PYTHON seed 22 case 902)
  x, y = np.zeros((3, 2), np.float32), np.array([-100, 0, 1], np.int64)
  for red in ("none", "sum"):
    got = Tensor(x, device=device).nll_loss(Tensor(y.astype(np.int32), device=device), reduction=red).numpy()
    ref = F.nll_loss(torch.tensor(x), torch.tensor(y), reduction=red).numpy()
    assert_like_torch(got, ref, f"nll_loss {red}")
    assert (np.signbit(got) == np.signbit(ref)).all(), f"nll_loss {red}: signs {got}, torch {ref}"
  for v in (nan, inf, 0.0, 2.0):
    t, p = Tensor(np.float32(v), device=device, requires_grad=True), torch.tensor(np.float32(v), requires_grad=True)
    t.prod().backward(); p.prod().backward()
    assert_like_torch(t.grad.numpy(), p.grad.numpy(), f"grad of prod({v})")
  # tan's gradient is torch's g * (1 + tan^2): log2(tan(0)) has gradient inf, not NaN (CPU seed 20 case 74)
  grads_like_torch(device, lambda t: t.tan().log2(), lambda t: t.tan().log2(), np.array([0.0, 0.5, -0.0], np.float32), what="log2(tan)")
  # -0.0 + 0.0 is +0.0 (the simplifier folded y + 0.0 to y): conv_transpose of 0 by -1 is +0.0, sqrt's gradient there
  # +inf (CL seed 23 case 86). (WGSL's compilers fold y + 0.0 themselves: WEBGPU keeps -0.0.)
  if device != "WEBGPU":
    x = np.array([-0.0, 1.5, -0.0], np.float32)
    for what, fn in (("x + 0.0", lambda t: t + 0.0), ("x - 0.0", lambda t: t - 0.0), ("0.0 + x", lambda t: 0.0 + t)):
      got, ref = fn(Tensor(x, device=device)).numpy(), fn(torch.tensor(x)).numpy()
      assert (np.signbit(got) == np.signbit(ref)).all(), f"{what}: signs {got}, torch {ref}"
    grads_like_torch(device, lambda t: t.reshape(1, 1, 1).conv_transpose2d(Tensor(np.full((1, 1, 1), -1.0, np.float32), device=device)).sqrt(),
                     lambda t: F.conv_transpose1d(t.reshape(1, 1, 1), torch.full((1, 1, 1), -1.0)).sqrt(), np.zeros(1, np.float32),
                     what="sqrt(conv_transpose(0, -1))")
  # pow's base gradient is g * (e * b**(e-1)) as torch groups it: 0 ** 3e38 has gradient 0 against g = 2, not 6e38 * 0
  # = NaN (LLVM seed 21 case 1944)
  grads_like_torch(device, lambda t: t ** Tensor(np.float32(3e38), device=device), lambda t: t ** torch.tensor(np.float32(3e38)),
                   np.array([0.0, 0.5], np.float32), cot=np.array([2.0, 2.0], np.float32), what="b ** 3e38")
  # cumsum of a 0-d bool counts like any bool's: an int (CPU seed 20 case 237)
  got = Tensor(np.array(True), device=device).cumsum(0)
  assert got.dtype == dtypes.int32 and got.numpy() == 1 and torch.tensor(True).cumsum(0).dtype == torch.int64

# ------------------------------------------------------------------------------------------------ arguments and dtypes

def test_true_division_of_ints_by_a_scalar_outside_their_range(device):
  x = np.array([1, -7, 300], np.int16)
  for s in (2147483647, 2 ** 40, 0.5):
    assert_like_torch((Tensor(x, device=device) / s).numpy(), (torch.tensor(x) / s).numpy(), f"int16 / {s}")
    assert_like_torch((s / Tensor(x, device=device)).numpy(), (s / torch.tensor(x)).numpy(), f"{s} / int16")

def test_conv_arguments_of_one_value_apply_to_every_dim(device):
  x, w = np.ones((1, 1, 5, 5), np.float32), np.ones((1, 1, 2, 2), np.float32)
  for kw in (dict(stride=(2,)), dict(padding=(1,)), dict(dilation=(2,))):
    assert_like_torch(Tensor(x, device=device).conv2d(Tensor(w, device=device), **kw).numpy(),
                      F.conv2d(torch.tensor(x), torch.tensor(w), **kw).numpy(), f"conv2d {kw}")
  got = Tensor(x, device=device).conv_transpose2d(Tensor(w, device=device), stride=(2,), output_padding=(1,))
  assert_like_torch(got.numpy(), F.conv_transpose2d(torch.tensor(x), torch.tensor(w), stride=(2,), output_padding=(1,)).numpy(),
                    "conv_transpose2d output_padding=(1,)")
  xr = np.random.default_rng(0).standard_normal((1, 2, 5, 6)).astype(np.float32)
  for kw in (dict(kernel_size=(2,), stride=(1, 2)), dict(kernel_size=(3,), stride=(1, 1), padding=(1, 0))):
    for name in ("max_pool2d", "avg_pool2d"):
      assert_like_torch(getattr(Tensor(xr, device=device), name)(**kw).numpy(), getattr(F, name)(torch.tensor(xr), **kw).numpy(), f"{name} {kw}")

@pytest.mark.parametrize("kw", [dict(stride=2, padding=1), dict(stride=1), dict(stride=(2, 3), padding=(1, 0), output_padding=(1, 2)),
                                dict(stride=2, dilation=2, groups=2)])
def test_conv_transpose_adds_only_real_terms(device, kw):
  # an inf weight (or input) reaches the outputs it is a term of, not those next to the stride's stuffing or the padding
  rng = np.random.default_rng(0)
  x, w = rng.standard_normal((2, 4, 4, 5)).astype(np.float32), rng.standard_normal((4, 3, 3, 2)).astype(np.float32)
  w[1, 0, 1, 1], x[0, 2, 1, 3] = inf, -inf
  got = Tensor(x, device=device).conv_transpose2d(Tensor(w, device=device), **kw).numpy()
  assert_like_torch(got, F.conv_transpose2d(torch.tensor(x), torch.tensor(w), **kw).numpy(), f"conv_transpose2d {kw}", rtol=1e-4, atol=1e-4)

@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("kw", [dict(stride=2, padding=1), dict(stride=1, padding=(0, 2)), dict(stride=(2, 3), dilation=2)])
def test_conv_gradients_place_structural_zeros_like_torch(device, kw, transposed):
  # conv2d's input gradient (and conv_transpose2d's forward) add only real terms: an inf weight gives inf where it is a
  # term, not NaN beside the stride's stuffing or the padding; the weight gradient multiplies the padding's zeros (NaN
  # where they meet an inf input), as torch does
  rng = np.random.default_rng(1)
  x, w = rng.standard_normal((2, 4, 6, 7)).astype(np.float32), rng.standard_normal((4, 2, 3, 2)).astype(np.float32)
  w[1, 0, 2, 1], w[3, 1, 0, 0], x[1, 2, 0, 6] = inf, -inf, inf
  fn = "conv_transpose2d" if transposed else "conv2d"
  kw = dict(kw, groups=2, **(dict(output_padding=1) if transposed and kw["stride"] == 2 else {}))
  tw = [Tensor(a, device=device, requires_grad=True) for a in (x, w)]
  pt = [torch.tensor(a, requires_grad=True) for a in (x, w)]
  def check(got, ref, what):   # (WGSL: NaN arithmetic is indeterminate, so there only torch's finite values count)
    if device == "WEBGPU": got, ref = np.where(np.isfinite(ref), got, 0), np.where(np.isfinite(ref), ref, 0)
    assert_like_torch(got, ref, f"{fn} {kw} {what}", rtol=1e-4, atol=1e-4)
  out_tw, out_pt = getattr(tw[0], fn)(tw[1], **kw), getattr(F, fn)(pt[0], pt[1], **kw)
  check(out_tw.numpy(), out_pt.detach().numpy(), "forward")
  cot = rng.uniform(0.5, 1.0, out_pt.shape).astype(np.float32)   # one sign: no inf - inf from the order of additions
  (out_tw * Tensor(cot, device=device)).sum().backward(); (out_pt * torch.tensor(cot)).sum().backward()
  for name, a, b in zip(("input", "weight"), tw, pt): check(a.grad.numpy(), b.grad.numpy(), f"grad of {name}")

@pytest.mark.parametrize("size", [(0, 2), (2, 0), (0, 0), (None, 0), (None, 2), (2, None), 5])
def test_adaptive_avg_pool_to_empty_and_kept_dims(device, size):
  x = np.random.default_rng(0).standard_normal((1, 2, 3, 4)).astype(np.float32)
  assert_like_torch(Tensor(x, device=device).adaptive_avg_pool2d(size).numpy(), F.adaptive_avg_pool2d(torch.tensor(x), size).numpy(),
                    f"adaptive_avg_pool2d {size}")

@pytest.mark.parametrize("row", [[1.0, nan, 3.0], [nan, nan, 1.0], [2.0, 2.0, 1.0], [-inf, -inf, -inf]])
def test_max_min_gradients_with_nan_and_ties(device, row):
  # torch.max() (all dims): split evenly between the maxima, a NaN result's gradient to the NaNs (torch.amax gives NaN)
  grads_like_torch(device, lambda x: x.max(), lambda x: x.max(), row, what=f"max {row}")
  grads_like_torch(device, lambda x: x.min(), lambda x: x.min(), row, what=f"min {row}")
  if row.count(nan) <= 1 and len(set(row)) == len(row):   # one extreme per row: torch.max(dim) routes to it too
    grads_like_torch(device, lambda x: x.max(1), lambda x: x.max(1).values, [row, row[::-1]], what=f"max(1) {row}")

def test_gradients_that_are_exactly_zero_against_an_infinite_upstream(device):
  # torch selects (masked_fill / where) rather than multiplying by a 0/1 mask: a loser of maximum gets 0 even from inf;
  # pow's exponent gradient is g * where(b == 0 and e >= 0, 0, b**e ln b), so an inf g does give NaN there
  a, b = [1.0, 2.0, nan, 3.0, -inf, 2.0], [2.0, 2.0, 1.0, nan, 0.0, 1.0]
  cot = [inf, inf, 1.0, 1.0, inf, -inf]
  grads_like_torch(device, lambda x, y: x.maximum(y), torch.maximum, a, b, cot=cot, what="maximum")
  grads_like_torch(device, lambda x, y: x.minimum(y), torch.minimum, a, b, cot=cot, what="minimum")
  base, ex = [0.0, 0.0, 2.0, -1.0, 0.0, 0.5], [1.0, 0.0, 2.0, 3.0, -1.0, 2.0]
  grads_like_torch(device, lambda x, y: x ** y, lambda x, y: x ** y, base, ex, cot=[inf, inf, 1.0, 1.0, -inf, 1.0], what="pow")

# ------------------------------------------------------------------------------------------ explicit zero gradients

def test_rounding_ops_pass_an_explicit_zero_gradient(device):
  # torch's floor/ceil/round/trunc/sign and the rounding division modes give zeros, which still meet 0 / 0 further back
  # (std over a size-1 dim is NaN, its gradient 0 / (2 NaN) = NaN); a rounding division's zero reaches a zero divisor as 0
  x = np.array([[1.0], [2.0]], np.float32)
  for name in ("floor", "ceil", "round", "trunc", "sign") if device != "WEBGPU" else ():   # (WGSL: NaN arithmetic is
    grads_like_torch(device, lambda t: getattr(t.std(1), name)(), lambda t: getattr(t.std(1), name)(), x, what=f"std(1).{name}()")   # indeterminate, §15.7.2)
  for mode in ("floor", "trunc"):
    grads_like_torch(device, lambda a, b: a.div(b, rounding_mode=mode), lambda a, b: torch.div(a, b, rounding_mode=mode),
                     [1.0, 2.0, 0.0, -3.0], [0.0, 3.0, 0.0, 2.0], cot=[inf, 1.0, 1.0, -inf], what=f"div {mode}")
  grads_like_torch(device, lambda t: t ** 0, lambda t: t ** 0, [nan, inf, 0.0], what="x ** 0")

# ------------------------------------------------------------------------------------------------ std and prod overflow

@pytest.mark.parametrize("row,c", [([1.0, -1e30], 0), ([3e38, 1.0, 1.0], 0), ([3e38, -1e38, -2e38], 1), ([2.5, 2.5, 2.5], 1),
                                   ([1e-30, -1e-30, 0.0], 1), ([1.0, nan, 2.0], 1), ([1.0, inf, 1.0], 0)])
def test_std_when_the_squared_deviations_overflow(device, row, c):
  # torch accumulates in double: std([1, -1e30]) = 5e29 though the squares overflow float32. Compared with torch in
  # float64: torch's float32 gradient overflows in 2 * std and in its float32 mean where ours does not
  grads_like_torch(device, lambda t: t.std(1, correction=c), lambda t: torch.std(t, 1, correction=c), [row, row[::-1]],
                   what=f"std {row}", torch_dtype=torch.float64)

def test_prod_gradient_with_zeros_infs_and_nans(device):
  # torch: g * out / x when the tensor has no zero; otherwise the product of the others itself (exclusive products), and
  # torch.prod(x) without a dim gives exactly 0 when two or more elements are 0
  rng = np.random.default_rng(0)
  values = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -0.5, 3.0, inf, -inf, nan], np.float32)
  for trial in range(12):
    x = rng.choice(values if trial % 2 else values[:7], size=(3, 4))
    grads_like_torch(device, lambda t: t.prod(1), lambda t: t.prod(1), x, what=f"prod(1) of {x.tolist()}")
    grads_like_torch(device, lambda t: t.prod(), lambda t: t.prod(), x, what=f"prod() of {x.tolist()}")

def test_prod_gradient_with_a_zero_when_the_whole_product_overflows(device):
  # with a zero in the tensor torch's gradient is the others' running products: [-2, 3e38]'s others are 3e38 and -2, though
  # the whole product overflows float32 (LLVM seed 21 case 636). WEBGPU has no float64 to take that product in
  if device == "WEBGPU": pytest.skip("WEBGPU has no float64: the finite product overflows float32")
  grads_like_torch(device, lambda t: t.prod(1), lambda t: t.prod(1), [[1.0, -1.0], [-2.0, 3e38], [0.0, 2.0]], what="prod(1) overflowing")
  grads_like_torch(device, lambda t: t.prod(), lambda t: t.prod(), [0.0, 1e30, 1e20, 1e-25], what="prod() overflowing")

def test_einsum_contracts_left_to_right_like_torch(device):
  # (a @ b) first: an empty contraction gives 0, and the NaN gradient of acosh(0) reaches c as 0 * NaN = NaN; a one-shot
  # product of all three would sum c's gradient over the empty letter (0)
  a, b, c = np.zeros((1, 0), np.float32), np.zeros((0, 1), np.float32), np.array([[1.0]], np.float32)
  tw = [Tensor(v, device=device, requires_grad=True) for v in (a, b, c)]
  pt = [torch.tensor(v, requires_grad=True) for v in (a, b, c)]
  Tensor.einsum("ab,bc,cd->ad", *tw).acosh().sum().backward(); torch.einsum("ab,bc,cd->ad", *pt).acosh().sum().backward()
  if device != "WEBGPU": assert_like_torch(tw[2].grad.numpy(), pt[2].grad.numpy(), "einsum grad of c")   # (WGSL: NaN indeterminate)
  x, y, z = (np.random.default_rng(i).standard_normal(s).astype(np.float32) for i, s in enumerate([(3, 4), (4, 5, 2), (2, 6)]))
  grads_like_torch(device, lambda p, q, r: Tensor.einsum("ab,bcd,de->ace", p, q, r), lambda p, q, r: torch.einsum("ab,bcd,de->ace", p, q, r),
                   x, y, z, what="einsum of three")

def test_scans_accumulate_in_float64_like_torch(device):
  # torch's CPU scans of float32 accumulate in double: cumprod([3e38, -1.4, -0.6]) ends finite, 1e8 + 1 + 1 + ... counts
  if device == "WEBGPU": pytest.skip("WEBGPU has no float64: its scans accumulate in float32")
  for fn in ("cumprod", "cumsum"):
    for row in ([3e38, -1.4, -0.6, 2.0], [1e8] + [1.0] * 300, [-3e38, 3e38, 1.0, -2.0]):
      x = np.array(row, np.float32)
      assert_like_torch(getattr(Tensor(x, device=device), fn)(0).numpy(), getattr(torch.tensor(x), fn)(0).numpy(), f"{fn} {row[:4]}")

def test_logsumexp_gradient_beside_an_infinite_result(device):
  # torch's g * exp(x - out): 0 beside an inf result (exp(89) overflows the sum), NaN at the inf itself
  for row in ([inf, 89.0], [1.0, -inf], [-inf, -inf], [nan, 1.0], [3.0, 4.0]):
    grads_like_torch(device, lambda t: t.logsumexp(1), lambda t: t.logsumexp(1), [row, row[::-1]], what=f"logsumexp {row}")

@pytest.mark.parametrize("length,k,s,p", [(1, 3, 3, 0), (2, 3, 3, 1), (1, 5, 2, 2), (4, 5, 1, 0), (3, 2, 3, 1), (2, 5, 1, 0)])
def test_ceil_mode_pool_window_longer_than_the_input(device, length, k, s, p):
  # with ceil_mode torch keeps a window that starts in the input even when it is longer than the input; without an
  # output at all both raise
  x = np.arange(1, length + 1, dtype=np.float32).reshape(1, 1, length)
  for name, tw, kw in (("max_pool1d", lambda t: t.max_pool2d((k,), (s,), 1, (p,), True), {}),
                       ("avg_pool1d", lambda t: t.avg_pool2d((k,), (s,), 1, (p,), True, False), dict(count_include_pad=False))):
    try: expected = getattr(F, name)(torch.tensor(x), k, s, p, ceil_mode=True, **kw)
    except RuntimeError:
      with pytest.raises(ValueError, match="does not fit"): tw(Tensor(x, device=device))
      continue
    assert_like_torch(tw(Tensor(x, device=device)).numpy(), expected.numpy(), f"{name} k={k} s={s} p={p} ceil_mode")

def test_lerp_where_torchs_fused_multiply_add_keeps_the_product(device):
  # torch forms end - (end - start) * (1 - w) with one rounding: a product past float32's range can still give a finite
  # result (lerp(-1, 3e38, -1) = -3e38); every start/end/weight from these lists, tensor and scalar weights
  import itertools
  vals = [0.0, 1.0, -1.0, 3e38, -3e38, 1e38, -2e38, inf, -inf, nan, 1e-40, 2.5]
  ws = [-1.0, -0.5, 0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, -2.0, inf, nan]
  a, b, w = (np.array(t, np.float32) for t in zip(*itertools.product(vals, vals, ws)))
  got = Tensor(a, device=device).lerp(Tensor(b, device=device), Tensor(w, device=device)).numpy()
  assert_like_torch(got, torch.lerp(torch.tensor(a), torch.tensor(b), torch.tensor(w)).numpy(), "lerp", atol=0)
  for weight in (-1.0, 2.0):
    got = Tensor(a, device=device).lerp(Tensor(b, device=device), weight).numpy()
    assert_like_torch(got, torch.lerp(torch.tensor(a), torch.tensor(b), weight).numpy(), f"lerp weight {weight}", atol=0)

def test_silu_gradient_at_huge_inputs(device):
  # torch's g * s * (1 + x (1 - s)): 1 - s is exactly 0 at 3e38, so the gradient is g (not (g x) s (1 - s) = inf * 0)
  v = [0.0, 1.0, -1.0, 3e38, -3e38, 100.0, -100.0, 88.0, -88.0, 20.0, -20.0, 5.0]
  grads_like_torch(device, lambda x: x.silu(), F.silu, v, cot=[1.0, -1.5, 2.0, -1.5, 3.0, 1e30, -2.0, 1.0, 1.0, 1.0, 1.0, 1.0], what="silu")

def test_gelu_tanh_tail_is_exactly_zero_as_torchs(device):
  # torch's (1 + tanh(z)) / 2 is exactly 0 where tanh(z) rounds to -1; x * sigmoid(2z), equal in exact arithmetic, gave
  # -2e-16 at x = -7.2, whose log was NaN where torch's is -inf (LLVM seed 30 case 2905)
  x = np.array([-7.2056036, -9.0, -20.0, -3.0, 0.5, 4.0], np.float32)
  got = Tensor(x, device=device).gelu().numpy()
  want = F.gelu(torch.tensor(x), approximate="tanh").numpy()
  np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
  assert (got[:3] == 0).all() and np.signbit(got[:3]).all(), got
  assert Tensor(x[:1], device=device).gelu().log().numpy()[0] == -np.inf

def test_std_of_an_empty_tensor_with_negative_correction_is_nan(device):
  # (LLVM seed 30 case 2855: n - correction = 1 > 0 took the scaled path, which divided by n = 0 in Python)
  for correction in (-1, 0, 1):
    t = Tensor(np.zeros((0, 0), np.float32), device=device).std((0, 1), correction=correction)
    want = torch.std(torch.zeros(0, 0), dim=(0, 1), correction=correction)
    assert t.shape == () and np.isnan(t.numpy()) and torch.isnan(want), (correction, t.numpy())

def test_division_gradient_to_the_divisor_grouped_as_torchs(device):
  # g * (-(a / b) / b): with a = 3e38, b = -1.4, g = 2 it is -3.06e38, where -(g * (a / b)) / b overflowed to -inf
  # (LLVM seed 30 case 5574)
  a, b = np.float32(3e38), np.array([9.4, -9.2, -1.4], np.float32)
  tb, pb = Tensor(b, device=device, requires_grad=True), torch.tensor(b, requires_grad=True)
  w = np.array([1.0, -0.5, 2.0], np.float32)
  ((Tensor(a, device=device) / tb) * Tensor(w, device=device)).sum().backward()
  ((torch.tensor(a) / pb) * torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(tb.grad.numpy(), pb.grad.numpy(), rtol=1e-6)

def test_pow_gradient_with_an_int_exponent_takes_e_minus_1_in_its_dtype(device):
  # torch computes e - 1 of an int32 exponent in int32: at e = -2^31 it wraps to 2^31 - 1, so the gradient at base 0
  # is e * 0 ** (2^31 - 1) = -0.0 (LLVM seed 30 case 7915); e = -2 and 3 check the ordinary case
  for e in (-2 ** 31, -2, 3):
    x = Tensor(np.array([0.0, 1.5], np.float32), device=device, requires_grad=True)
    p = torch.tensor([0.0, 1.5], requires_grad=True)
    (x ** Tensor(np.array(e, np.int32), device=device)).sum().backward()
    (p ** torch.tensor(e, dtype=torch.int32)).sum().backward()
    got, want = x.grad.numpy(), p.grad.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=str(e))
    assert (np.signbit(got) == np.signbit(want)).all(), (e, got, want)
