"""TinyJit: replays equal eager execution, shape changes are refused, training steps can be jitted."""
import numpy as np
import pytest
from tinyweb import Tensor, TinyJit, GlobalCounters
import tinyweb.schedule as schedule_mod
import tinyweb.tensor as tensor_mod

def rnd(*shape, seed=None):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)

def test_replay_matches_eager(device):
  w = Tensor(rnd(4, 3, seed=0), device=device).realize()
  def f(x, y): return ((x @ w).relu() * 2 + y.sum()).softmax(-1)
  jf = TinyJit(f)
  for i in range(5):
    x, y = Tensor(rnd(2, 4, seed=i), device=device), Tensor(rnd(3, seed=10 + i), device=device)
    expected = f(Tensor(x.numpy(), device=device), Tensor(y.numpy(), device=device)).numpy()
    np.testing.assert_allclose(jf(x, y).numpy(), expected, rtol=1e-6, atol=1e-7)

def test_replay_does_no_graph_work(device, monkeypatch):
  jf = TinyJit(lambda x: (x * 3 + 1).sum(0))
  for _ in range(2): jf(Tensor(rnd(8, 8), device=device))
  calls = []
  monkeypatch.setattr(tensor_mod, "create_schedule", lambda *a: calls.append(a) or schedule_mod.create_schedule(*a))
  GlobalCounters.reset()
  x = rnd(8, 8)
  out = jf(Tensor(x, device=device))
  assert GlobalCounters.kernel_count == 1 and calls == []
  np.testing.assert_allclose(out.numpy(), (x * 3 + 1).sum(0), rtol=1e-5)

def test_shape_or_dtype_change_is_refused(device):
  jf = TinyJit(lambda x: x * 2)
  for _ in range(3): jf(Tensor(rnd(2, 3), device=device))
  with pytest.raises(ValueError, match=r"TinyJit.*\(4, 3\).*\(2, 3\)"): jf(Tensor(rnd(4, 3), device=device))
  with pytest.raises(ValueError, match=r"int32.*float32"): jf(Tensor(np.zeros((2, 3), np.int32), device=device))

def test_keyword_arguments_and_views_of_inputs(device):
  jf = TinyJit(lambda a, b=None: (a.T, a + b))
  for i in range(4):
    a, b = rnd(2, 3, seed=i), rnd(2, 3, seed=50 + i)
    t, s = jf(Tensor(a, device=device), b=Tensor(b, device=device))
    np.testing.assert_array_equal(t.numpy(), a.T)
    np.testing.assert_allclose(s.numpy(), a + b, rtol=1e-6)

def test_random_numbers_change_between_replays(device):
  jf = TinyJit(lambda x: x + Tensor.rand(4, device=device))
  outs = [jf(Tensor(np.zeros(4, np.float32), device=device)).numpy().copy() for _ in range(5)]
  for i in range(len(outs)):
    for j in range(i + 1, len(outs)): assert not np.array_equal(outs[i], outs[j])
    assert ((outs[i] >= 0) & (outs[i] < 1)).all()

def test_jitted_training_step_matches_eager(device):
  X, Y = rnd(16, 5, seed=1), rnd(16, 1, seed=2)
  def make():
    return (Tensor(rnd(5, 8, seed=3), device=device, requires_grad=True), Tensor(rnd(8, 1, seed=4), device=device, requires_grad=True))
  def step(params, x, y):
    w1, w2 = params
    loss = (((x @ w1).tanh() @ w2 - y) ** 2).mean()
    for p in params: p.grad = None
    loss.backward()
    with Tensor.no_grad():
      for p in params: p.assign(p - 0.1 * p.grad)
    Tensor.realize_all(loss, *params)
    return loss
  eager_params, jit_params = make(), make()
  jstep = TinyJit(lambda x, y: step(jit_params, x, y))
  for i in range(6):
    xb, yb = X[(i % 2) * 8:(i % 2) * 8 + 8], Y[(i % 2) * 8:(i % 2) * 8 + 8]
    le = step(eager_params, Tensor(xb, device=device), Tensor(yb, device=device)).item()
    lj = jstep(Tensor(xb, device=device), Tensor(yb, device=device)).item()
    assert abs(le - lj) <= 1e-5 * max(1.0, abs(le)), (i, le, lj)
  for pe, pj in zip(eager_params, jit_params): np.testing.assert_allclose(pj.numpy(), pe.numpy(), rtol=1e-5, atol=1e-6)

def test_values_computed_after_replays_are_fresh(device):
  w = Tensor(np.ones(4, np.float32), device=device, requires_grad=True).realize()
  @TinyJit
  def step():
    with Tensor.no_grad(): w.assign(w * 2)
    return w.realize()
  before = (w.sum() + 0).item()
  for _ in range(4): step()
  assert (w.sum() + 0).item() == before * 16   # 4 doublings: the first sum must not be reused

def _prune_case(device):
  """A function with work no input reaches (c, from the weights only), a step counter it updates, and a value derived
  from that counter before the update (the learning rate of a schedule): only c's kernels may be pruned."""
  w = Tensor(rnd(4, 4, seed=1), device=device).realize()
  step = Tensor([0.0], device=device).realize()
  def f(x):
    c = (w.exp() + 1).contiguous()      # constant: pruned
    scale = (step * 0.5 + 1).contiguous()  # reads the counter before its update: replayed
    out = ((x @ c).relu() * c.sum() * scale).realize()
    step.assign(step + 1).realize()
    return out
  def expected(x, k): return np.maximum(x @ (np.exp(w.numpy()) + 1), 0) * (np.exp(w.numpy()) + 1).sum() * (k * 0.5 + 1)
  return f, step, expected

@pytest.mark.parametrize("decorator", [False, True])
def test_prune_replays_only_what_inputs_or_state_reach(device, decorator):
  f, step, expected = _prune_case(device)
  jf = TinyJit(prune=True)(f) if decorator else TinyJit(f, prune=True)
  full_f, full_step, _ = _prune_case(device)
  full = TinyJit(full_f)
  for k in range(5):
    x = rnd(3, 4, seed=k)
    GlobalCounters.reset()
    got = jf(Tensor(x, device=device)).numpy()
    pruned_count = GlobalCounters.kernel_count
    GlobalCounters.reset()
    full(Tensor(x, device=device))
    if k >= 2: assert 0 < pruned_count < GlobalCounters.kernel_count   # replays: c's kernels (exp, sum) left out
    np.testing.assert_allclose(got, expected(x, k), rtol=1e-4, atol=1e-3)
  assert step.numpy()[0] == full_step.numpy()[0] == 5

def test_prune_without_function_takes_one():
  with pytest.raises(TypeError, match="TinyJit made without a function takes one"): TinyJit(prune=True)(1, 2)

def test_an_assign_realized_through_an_output_runs_once_per_call(device):
  # the assign is not realized by itself: it runs as part of the output's graph (a KV cache or a step counter written
  # in place). Each call must apply it once, the capture included, and the tensor must read the last value after.
  counter = Tensor([0.0], device=device).realize()
  def step(x):
    counter.assign(counter + 1)
    return (x * counter).contiguous()
  jf = TinyJit(step)
  x = Tensor([1.0, 2.0, 3.0], device=device).realize()
  got = [jf(x).numpy().tolist() for _ in range(4)]
  assert got == [[k, 2 * k, 3 * k] for k in (1.0, 2.0, 3.0, 4.0)]
  assert counter.numpy().tolist() == [4.0]
  assert counter.assign(counter + 1).numpy().tolist() == [5.0] and counter.numpy().tolist() == [5.0]
