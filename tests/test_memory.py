"""Memory of intermediate values: a schedule releases each intermediate buffer after its last reader, and TinyJit lets
the captured intermediates share memory, so a chain of N layers holds about two activations at once, not N.
Results are checked against numpy, so memory that is shared too eagerly (a value overwritten before its last read)
fails here."""
import numpy as np
import pytest
from tinyweb import Tensor, TinyJit, GlobalCounters

N, LAYERS = 128, 12
ACT = N * N * 4   # bytes of one activation

def chain(x: Tensor, ws: list[Tensor]) -> Tensor:
  for i in range(LAYERS): x = (x @ ws[i % len(ws)]).relu().contiguous() * 0.5   # each layer's output is its own buffer
  return x.sum(axis=1)

def chain_np(x: np.ndarray, ws: list[np.ndarray]) -> np.ndarray:
  for i in range(LAYERS): x = np.maximum(x @ ws[i % len(ws)], 0) * 0.5
  return x.sum(axis=1)

def _inputs(device: str, seed: int):
  rng = np.random.default_rng(seed)
  xs = rng.standard_normal((N, N)).astype(np.float32)
  ws = [(rng.standard_normal((N, N)) * 2 / np.sqrt(N)).astype(np.float32) for _ in range(2)]
  return xs, ws, Tensor(xs, device=device).realize(), [Tensor(w, device=device).realize() for w in ws]

def test_realize_releases_intermediates(device):
  xs, ws, x, w = _inputs(device, 0)
  GlobalCounters.reset()
  before = GlobalCounters.mem_used
  out = chain(x, w).realize()
  peak = GlobalCounters.mem_peak - before
  np.testing.assert_allclose(out.numpy(), chain_np(xs, ws), rtol=1e-4, atol=1e-4)
  # every layer's output lives until the next layer read it: at most two activations (plus the small output)
  assert peak <= 3 * ACT, f"peak {peak} bytes over {LAYERS} layers of {ACT}-byte activations"
  assert GlobalCounters.mem_used - before <= N * 4, "intermediates still allocated after the realize"

def test_jit_shares_intermediate_memory(device):
  xs, ws, x, w = _inputs(device, 1)
  step = TinyJit(lambda x: chain(x, w))
  before = GlobalCounters.mem_used
  for seed in range(2, 7):   # call 1 runs, 2 captures, the rest replay: each with new values, checked
    xs = np.random.default_rng(seed).standard_normal((N, N)).astype(np.float32)
    out = step(Tensor(xs, device=device).realize())
    np.testing.assert_allclose(out.numpy(), chain_np(xs, ws), rtol=1e-4, atol=1e-4)
  held = GlobalCounters.mem_used - before
  assert held <= 4 * ACT, f"the jit holds {held} bytes for {LAYERS} layers of {ACT}-byte activations"
  assert len(step.memory) <= 3

def test_jit_shared_memory_of_mixed_sizes_is_exact():
  """Intermediates of many sizes (growing slots, slots reused by smaller buffers) through a training step's forward and
  backward; every replay's loss and gradients match a run without the jit."""
  rng = np.random.default_rng(3)
  w1, w2 = rng.standard_normal((64, 32)).astype(np.float32) / 8, rng.standard_normal((32, 10)).astype(np.float32) / 4
  def step(x, W1, W2):
    h = (x @ W1).relu()
    h = (h.reshape(8, 16, 32).permute(0, 2, 1).contiguous().max(axis=2, keepdim=True) + h.reshape(8, 16, 32).permute(0, 2, 1)).permute(0, 2, 1).reshape(128, 32)
    loss = (h @ W2).log_softmax(axis=1).mean()
    loss.backward()
    return loss, W1.grad, W2.grad
  jitted = TinyJit(step)
  for seed in range(5):
    xs = np.random.default_rng(10 + seed).standard_normal((128, 64)).astype(np.float32)
    outs = []
    for fn in (jitted, step):
      W1, W2 = Tensor(w1, requires_grad=True), Tensor(w2, requires_grad=True)
      outs.append([t.numpy() for t in fn(Tensor(xs).realize(), W1, W2)])
    for a, b in zip(*outs): np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
