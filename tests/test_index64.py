"""Index arithmetic past 2^31. A kernel whose index runs past 2^31 (a reshape of a huge broadcast view, a conv's window
view over many images: beautiful_mnist's whole-test-set evaluation) lowers its index math in int64 on the devices that
have 64-bit integers (codegen/lowering.index_dtype) and computes what numpy/torch compute; WEBGPU (WGSL has no 64-bit
integers) refuses it with an OverflowError naming the view and the limit, before any kernel of the realize runs. Every
other kernel keeps int32 index math. The views here are never materialized: each test reads a few thousand elements."""
import numpy as np
import pytest
import torch
from tinyweb import Tensor, Device, dtypes, nn
from tinyweb.helpers import GlobalCounters
from tinyweb.uop import Ops
from tinyweb.schedule import create_schedule
from tinyweb.codegen.lower import lower
from tinyweb.codegen.lowering import index_dtype
from tests.helpers import refused

N = 50000   # (N, N) = 2.5e9 elements: a flat index into that view passes 2^31
WIDE = r"a kernel reshapes a view of shape \(50000, 50000\), 2500000000 elements along one flat index, but index math " \
       r"on WEBGPU is 32-bit \(< 2\^31"

def broadcast(device: str) -> Tensor:
  """a - b for a = 0..N-1 down, b = 0..N-1 across, (N, N) (never materialized)."""
  return Tensor.arange(N, device=device).reshape(N, 1).float() - Tensor.arange(N, device=device).reshape(1, N).float()

def broadcast_flat(device: str) -> Tensor:
  """broadcast(device).reshape(-1): element f is f // N - f % N."""
  return broadcast(device).reshape(-1)

def broadcast_flat_np(f: np.ndarray) -> np.ndarray: return (f // N - f % N).astype(np.float32)

def kernels(t: Tensor) -> list:
  return [it for it in create_schedule([t.uop])[0] if it.kind == "kernel"]

def lowered(t: Tensor, device: str):
  """The lowered program of the last kernel that realizes t."""
  return lower(kernels(t)[-1].ast, Device[device].renderer)

def test_flat_index_of_a_huge_broadcast(device):
  assert broadcast(device)[-1, -3:].tolist() == [2.0, 1.0, 0.0]   # (no flat index: 32-bit index math, on every device)
  flat = broadcast_flat(device)
  picks = [flat[::7][-5:], flat[2**31 - 3:2**31 + 4000], flat[-3000:]]
  if refused(device, dtypes.int64):
    for t in picks:
      with pytest.raises(OverflowError, match=WIDE): t.numpy()
    return
  assert all(u.dtype == dtypes.int64 for u in lowered(picks[1], device).uops if u.op in (Ops.RANGE, Ops.SPECIAL))
  total = N * N
  np.testing.assert_array_equal(picks[0].numpy(), broadcast_flat_np((total - 1) // 7 * 7 - 7 * np.arange(5)[::-1]))
  np.testing.assert_array_equal(picks[1].numpy(), broadcast_flat_np(np.arange(2**31 - 3, 2**31 + 4000)))
  np.testing.assert_array_equal(picks[2].numpy(), broadcast_flat_np(np.arange(total - 3000, total)))

@pytest.mark.parametrize("op", ["sum", "max"])
def test_reduction_over_a_view_past_2_31(device, op):
  # each output reduces 50 elements of the flat view past 2^31: short loops, 64-bit indexes
  start = 2**31 + 12345
  t = getattr(broadcast_flat(device)[start:start + 64 * 50].reshape(64, 50), op)(1)
  if refused(device, dtypes.int64):
    with pytest.raises(OverflowError, match=WIDE): t.numpy()
    return
  np.testing.assert_array_equal(t.numpy(), getattr(broadcast_flat_np(np.arange(start, start + 64 * 50)).reshape(64, 50), op)(1))

def test_gather_in_a_kernel_with_64_bit_indexes(device):
  # a tensor-indexed read (codegen/lowering.select_reduce) stays a read of the selected rows with 64-bit index math
  rng = np.random.default_rng(0)
  table, idx = rng.standard_normal((300, 24)).astype(np.float32), rng.integers(-300, 300, 40)
  X, I = Tensor(table, device=device).realize(), Tensor(idx.astype(np.int32), device=device).realize()
  start = 2**31 + 777
  out = X[I] * broadcast_flat(device)[start:start + 40 * 24].reshape(40, 24)
  if refused(device, dtypes.int64):
    with pytest.raises(OverflowError, match=WIDE): out.numpy()
    return
  prog = lowered(out, device)
  assert any(u.op is Ops.RANGE or u.op is Ops.SPECIAL for u in prog.uops) and \
    all(u.dtype == dtypes.int64 for u in prog.uops if u.op in (Ops.RANGE, Ops.SPECIAL)), "the kernel's index math is not 64-bit"
  assert not any(u.op is Ops.DEFINE_ACC for u in prog.uops), "the gather became a loop over the table's rows"
  ref = torch.tensor(table)[torch.tensor(idx)] * torch.tensor(broadcast_flat_np(np.arange(start, start + 40 * 24)).reshape(40, 24))
  np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6)

def test_webgpu_refuses_before_any_kernel_runs():
  if not Device.check("WEBGPU")[0]: pytest.skip(f"WEBGPU unavailable: {Device.check('WEBGPU')[1]}")
  x = Tensor([1.0, 2.0, 3.0, 4.0], device="WEBGPU").realize()
  y = (x * 2).contiguous()   # a kernel of the same realize, scheduled before the refused one
  out = broadcast_flat("WEBGPU")[-4:] + y
  GlobalCounters.reset()
  with pytest.raises(OverflowError, match=WIDE + r".*split the tensor or realize\(\) a smaller part first"): out.realize()
  assert GlobalCounters.kernel_count == 0, "a kernel ran before the refusal"
  np.testing.assert_array_equal(y.numpy(), [2.0, 4.0, 6.0, 8.0])   # (y alone fits: it computes)

def test_a_reduction_over_2_31_elements_is_64_bit():
  # a GPU grouped reduction walks the reduced elements with one flat index: a max over (50000, 50000) needs 64 bits
  # there (lowered and rendered only: running it would take 2.5e9 steps). (A big sum is split into two kernels first,
  # the first of which reshapes the view: 64-bit too.)
  from tinyweb.codegen.opencl import OpenCLRenderer
  a = Tensor.arange(N, device="CPU").reshape(N, 1).float().expand(N, N)
  (it,) = kernels(a.max())
  ast = it.ast
  assert index_dtype(ast.src[0].src[1]) == dtypes.int64
  rd = OpenCLRenderer()
  prog = lower(ast, rd)
  assert prog.group and all(u.dtype == dtypes.int64 for u in prog.uops if u.op is Ops.RANGE or (u.op is Ops.SPECIAL and u.arg in ("gid", "lidx")))
  assert "for (long ridx0 = 0; ridx0 < 9765625L; ridx0++)" in rd.render(prog)   # 2.5e9 elements / 256 threads

def test_kernels_that_fit_keep_32_bit_index_math():
  # the normal case is untouched: a conv, a matmul and a sum over 2^31 - 1 broadcast elements stay int32
  x, w = Tensor.ones(8, 3, 16, 16, device="CPU"), Tensor.ones(4, 3, 3, 3, device="CPU")
  for t in [x.conv2d(w), Tensor.ones(64, 32, device="CPU") @ Tensor.ones(32, 16, device="CPU"),
            Tensor([1.0], device="CPU").expand(2**31 - 1).sum()]:
    for it in kernels(t):
      assert index_dtype(it.ast.src[0].src[1]) == dtypes.int32
      assert all(u.dtype == dtypes.int32 for u in lower(it.ast, Device["CPU"].renderer).uops if u.op is Ops.RANGE)

def test_mnist_style_evaluation_past_2_31_matches_torch():
  # beautiful_mnist's evaluation on all 10,000 test images has a conv window view of (10000, 32, 6, 24, 5, 20) = 4.6e9
  # elements. The same kind of model, cut down: a 62x62 conv (stride 2) over 4400 images of 64x64 has a window view of
  # 4400 x 499,968 = 2.2e9 elements, with 72 MB of images and 0.27 GFLOP
  n, rng = 4400, np.random.default_rng(0)
  images, labels = rng.standard_normal((n, 1, 64, 64), dtype=np.float32), rng.integers(0, 10, n)
  conv, bn, fc = torch.nn.Conv2d(1, 4, 62, stride=2), torch.nn.BatchNorm2d(4).eval(), torch.nn.Linear(4, 10)
  with torch.no_grad():
    bn.running_mean.uniform_(-0.1, 0.1), bn.running_var.uniform_(0.5, 2.0), bn.weight.uniform_(0.5, 1.5), bn.bias.uniform_(-0.5, 0.5)
    ref = fc(torch.nn.functional.max_pool2d(bn(conv(torch.from_numpy(images)).relu()), 2).flatten(1))
  def tw(p: torch.Tensor) -> Tensor: return Tensor(p.detach().numpy(), device="CPU")
  tconv, tbn, tfc = nn.Conv2d(1, 4, 62, stride=2), nn.BatchNorm(4), nn.Linear(4, 10)
  tconv.weight, tconv.bias, tfc.weight, tfc.bias = tw(conv.weight), tw(conv.bias), tw(fc.weight), tw(fc.bias)
  tbn.weight, tbn.bias, tbn.running_mean, tbn.running_var = tw(bn.weight), tw(bn.bias), tw(bn.running_mean), tw(bn.running_var)
  layers = [tconv, Tensor.relu, tbn, Tensor.max_pool2d, lambda x: x.flatten(1), tfc]
  logits = Tensor(images, device="CPU")
  for f in layers: logits = f(logits)
  assert any(index_dtype(it.ast.src[0].src[1]) == dtypes.int64 for it in kernels(logits)), "no kernel needs 64-bit indexes"
  np.testing.assert_allclose(logits.numpy(), ref.numpy(), atol=1e-4, rtol=1e-4)
  acc = (logits.argmax(axis=1) == Tensor(labels.astype(np.int32), device="CPU")).mean().item()
  assert acc == pytest.approx((ref.argmax(1).numpy() == labels).mean())
