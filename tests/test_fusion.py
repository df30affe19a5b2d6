"""Kernel counts: what the scheduler fuses. Each case builds fresh inputs so no earlier result is reused."""
import numpy as np
import pytest
from tinyweb import Tensor, GlobalCounters

N = 16

def kernels(fn) -> int:
  GlobalCounters.reset()
  fn().realize()
  return GlobalCounters.kernel_count

def fresh(*shape, device="CPU") -> Tensor:
  return Tensor(np.random.default_rng().standard_normal(shape).astype(np.float32), device=device)

def test_elementwise_chain_into_reduce_is_one_kernel(device):
  x, y = fresh(N, N, device=device), fresh(N, N, device=device)
  out = (x + y).relu().sum()
  assert kernels(lambda: out) == 1
  np.testing.assert_allclose(out.item(), np.maximum(x.numpy() + y.numpy(), 0).sum(), rtol=1e-5)

def test_broadcast_multiply_reduce_is_one_kernel(device):
  x, y = fresh(N, N, device=device), fresh(N, N, device=device)
  out = (x.reshape(N, 1, N) * y.T.reshape(1, N, N)).sum(axis=2)
  assert kernels(lambda: out) == 1
  np.testing.assert_allclose(out.numpy(), x.numpy() @ y.numpy(), rtol=1e-4, atol=1e-5)

def test_matmul_is_one_kernel(device):
  x, y = fresh(N, 8, device=device), fresh(8, 12, device=device)
  assert kernels(lambda: x @ y) == 1

def test_matmul_with_bias_and_relu_is_one_kernel(device):
  x, y, b = fresh(N, 8, device=device), fresh(8, 12, device=device), fresh(12, device=device)
  assert kernels(lambda: (x @ y + b).relu()) == 1

def test_softmax_at_most_three_kernels(device):
  x = fresh(4, N, device=device)
  n = kernels(lambda: x.softmax(-1))
  assert n <= 3, n

def test_movement_ops_launch_nothing(device):
  x = fresh(4, 6, device=device).realize()
  for view in (x.T, x.reshape(2, 12), x[1:3, ::2], x.flip(0), x.permute(1, 0).reshape(24)):
    assert kernels(lambda: view) == 0

def test_contiguous_launches_one_copy(device):
  x = fresh(4, 6, device=device).realize()
  assert kernels(lambda: x.T.contiguous()) == 1

def test_reduce_result_used_elementwise_fuses(device):
  x = fresh(N, N, device=device)
  assert kernels(lambda: x.sum(1) * 2 + 1) == 1

def test_expanded_reduce_gets_its_own_kernel(device):
  # x - x.max() needs the max once per row: the max is stored, then the subtraction reads it
  x = fresh(N, N, device=device)
  assert kernels(lambda: x - x.max(1, keepdim=True)) == 2

def test_shared_intermediate_between_targets(device):
  x = fresh(N, N, device=device)
  s = x.sum(0)
  a, b = s + 1, s * 2
  GlobalCounters.reset()
  Tensor.realize_all(a, b)
  assert GlobalCounters.kernel_count == 3   # the shared sum once, then one kernel per target

def test_already_computed_values_are_reused(device):
  x, y = fresh(N, N, device=device), fresh(N, N, device=device)
  a = (x @ y)
  a.realize()
  assert kernels(lambda: a + 0) == 1   # reads a's buffer, does not recompute the matmul
  assert kernels(lambda: (x @ y).relu()) == 1   # the same graph is recognized

def test_buffers_are_freed_and_reused():
  x = fresh(64, 64)
  for _ in range(3): (x + 1).realize()
  before = GlobalCounters.mem_used
  for _ in range(20): (x * 2 + 1).sum().item()
  assert GlobalCounters.mem_used <= before + 64 * 64 * 4, "intermediate buffers leaked"

@pytest.mark.parametrize("case", ["sum of 12", "reduce of 12", "matmul of two 6-input sums"])
def test_kernels_are_split_to_the_device_buffer_limit(device, case, monkeypatch):
  # WebGPU in browsers binds at most 8 storage buffers per kernel; every device honours a renderer's `max_buffers`
  from tinyweb import Device
  from tinyweb import engine
  monkeypatch.setattr(Device[device].renderer, "max_buffers", 8)
  rng = np.random.default_rng(5)
  arrs = [rng.standard_normal((16, 16)).astype(np.float32) for _ in range(12)]
  ts = [Tensor(a, device=device) for a in arrs]
  if case == "sum of 12": out, ref = sum(ts[1:], ts[0]) * 2, sum(arrs) * 2
  elif case == "reduce of 12":
    out = sum((t * (i + 1) for i, t in enumerate(ts[1:])), ts[0]).sum(1)
    ref = sum((a * (i + 1) for i, a in enumerate(arrs[1:])), arrs[0]).sum(1)
  else: out, ref = sum(ts[1:6], ts[0]) @ sum(ts[7:], ts[6]), sum(arrs[:6]) @ sum(arrs[6:])
  with engine.recording() as launches: got = out.numpy()
  np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
  kernels = [bufs for k, bufs in launches if k is not None]
  assert len(kernels) >= 2 and all(len(bufs) <= 8 for bufs in kernels), [len(b) for b in kernels]
