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

def test_reduction_read_through_several_views_is_computed_once(device):
  # an LSTM's gates: one matmul, read as four chunks. Recomputed per chunk, the loop ran four times over; stored, once
  x, w = fresh(4, 8, device=device), fresh(8, 12, device=device)
  i, f, g = (x @ w).chunk(3, 1)
  out = i.sigmoid() * f.tanh() + g
  assert kernels(lambda: out) == 2
  gates = x.numpy() @ w.numpy()
  np.testing.assert_allclose(out.numpy(), 1 / (1 + np.exp(-gates[:, :4])) * np.tanh(gates[:, 4:8]) + gates[:, 8:], rtol=1e-4, atol=1e-5)

def _costly(x: Tensor) -> Tensor:   # 30 ALU ops an element
  for _ in range(10): x = (x * 1.5 + 0.25).maximum(x)
  return x

def test_costly_elementwise_value_used_by_two_kernels_is_stored(device):
  x = fresh(N, N, device=device)
  e = _costly(x)
  rows, cols = e.sum(1), e.sum(0)
  GlobalCounters.reset()
  Tensor.realize(rows, cols)
  assert GlobalCounters.kernel_count == 3   # e, then the two sums read it
  ref = x.numpy()
  for _ in range(10): ref = np.maximum(ref * 1.5 + 0.25, ref)
  np.testing.assert_allclose(rows.numpy(), ref.sum(1), rtol=1e-4)
  np.testing.assert_allclose(cols.numpy(), ref.sum(0), rtol=1e-4)

def test_cheap_elementwise_value_used_by_two_kernels_is_recomputed(device):
  x = fresh(N, N, device=device)
  e = (x * 2).relu()
  rows, cols = e.sum(1), e.sum(0)
  GlobalCounters.reset()
  Tensor.realize(rows, cols)
  assert GlobalCounters.kernel_count == 2
  np.testing.assert_allclose(cols.numpy(), np.maximum(x.numpy() * 2, 0).sum(0), rtol=1e-5)

def test_reduction_in_a_concatenation_gets_its_own_kernel(device):
  # fused into the concatenation's kernel, the matmul ran in the concatenation's loops, where the heuristics see no matmul
  x, w, y = fresh(4, 8, device=device), fresh(8, 6, device=device), fresh(4, 3, device=device)
  out = (x @ w).cat(y, dim=1)
  assert kernels(lambda: out) == 2
  np.testing.assert_allclose(out.numpy(), np.concatenate([x.numpy() @ w.numpy(), y.numpy()], 1), rtol=1e-5, atol=1e-6)

def test_costly_value_broadcast_into_a_conv_is_stored_once(device):
  x, w = fresh(1, 4, 8, 8, device=device), fresh(6, 4, 3, 3, device=device)
  silu = x.silu()   # exp, add, reciprocal, multiply: per input element once, not once per output channel and tap
  assert kernels(lambda: silu.conv2d(w, padding=1)) == 2
  assert kernels(lambda: (x * 2).conv2d(w, padding=1)) == 1   # one multiply: cheaper to recompute than a pass over memory
  import torch
  want = torch.nn.functional.conv2d(torch.nn.functional.silu(torch.tensor(x.numpy())), torch.tensor(w.numpy()), padding=1)
  np.testing.assert_allclose(silu.conv2d(w, padding=1).numpy(), want.numpy(), rtol=1e-4, atol=1e-5)

def test_rnn_cell_gradient_kernels_stay_small(device):
  # two steps of an LSTM cell, backward: every gradient recomputed the gate gradient (and the four gate chunks of its
  # matmuls) for itself, in kernels of up to 9,800 uops that took seconds each to compile
  from tinyweb import nn
  from tinyweb.device import Device
  from tinyweb.schedule import create_schedule
  from tinyweb.codegen.lower import lower
  m = nn.LSTMCell(5, 7, device=device)
  x = fresh(3, 5, device=device).requires_grad_()
  h, c = m(x)
  h2, c2 = m(x * 0.5, (h, c))
  (h2.cat(c2, dim=-1) * fresh(3, 14, device=device)).sum().backward()
  grads = [x.grad, m.weight_ih.grad, m.weight_hh.grad, m.bias_ih.grad, m.bias_hh.grad]
  items, _, _ = create_schedule([g.uop for g in grads])
  sizes = [len(lower(it.ast, Device[device].renderer).uops) for it in items if it.kind == "kernel"]
  assert max(sizes) < 1000, sizes

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
