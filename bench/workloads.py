"""The workloads of `python -m bench`, once per framework, and the timer that runs one of them in a worker process.

Every workload is `make(fw, key, size) -> (prep, run, warm)`: prep() is untimed and gives the run fresh inputs (new
buffers, so tinyweb's and tinygrad's caches of computed values cannot answer), run() is timed and ends with a value read
on the host (or, for big outputs, a synchronized device and one element read), warm is the number of warm-up runs.
tinyweb and tinygrad share one implementation (the same API); torch and numpy have their own."""
from __future__ import annotations
import statistics, time
import numpy as np

rng = np.random.default_rng(0)
def rand(*shape) -> np.ndarray: return rng.random(shape, dtype=np.float32)
GATHER_TABLE = (60000, 784)   # an MNIST-sized training set, sampled by row the way tinygrad scripts take batches
def random_rows(k: int) -> np.ndarray: return rng.integers(0, GATHER_TABLE[0], k, dtype=np.int32)
def batches(n: int, shape: tuple, k: int = 4) -> list:   # k random (images, labels) batches, cycled through
  return [(rand(n, *shape), rng.integers(0, 10, n, dtype=np.int32)) for _ in range(k)]

# ------------------------------------------------------------------------------------------------ tinyweb / tinygrad

class Tiny:
  """What differs between tinyweb and tinygrad: imports, train mode, reading one element of a realized tensor."""
  def __init__(self, name: str, device: str | None):
    if name == "tinyweb":
      import tinyweb as m
      from tinyweb import nn
      from tinyweb.nn import optim
      self.train, self.dev = m.Tensor.train, device or m.Device.DEFAULT
    else:
      import tinygrad as m
      from tinygrad import nn
      from tinygrad.nn import optim
      self.train, self.dev = (lambda: m.Context(TRAINING=1)), m.Device.DEFAULT
    self.name, self.m, self.nn, self.optim, self.Tensor, self.counters = name, m, nn, optim, m.Tensor, m.GlobalCounters
  def fresh(self, *arrays):
    return [self.Tensor(a, device=self.dev).realize() for a in arrays]
  def read(self, t) -> bytes:
    t.realize()
    self.m.Device[t.device].synchronize()
    if self.name == "tinyweb": return bytes(t._host_buffer()[0].as_memoryview()[:4])   # zero-copy on the CPU
    return t.uop.base.buffer.as_memoryview(allow_zero_copy=True)[:4].tobytes()

def chain(a, b):   # 8 elementwise ops, one fused kernel in tinyweb / tinygrad
  return ((a * b + 1.0).relu() - a).exp() * 0.5 + b.abs()

def make_tiny(fw: Tiny, key: str, size: dict):
  T, io = fw.Tensor, {}
  def inputs(*arrays):
    def prep(): io["x"] = fw.fresh(*arrays)
    return prep
  if key.startswith("matmul"):
    n = size["n"]
    return inputs(rand(n, n), rand(n, n)), lambda: fw.read(io["x"][0] @ io["x"][1]), 2
  if key == "elementwise":
    return inputs(rand(size["n"]), rand(size["n"])), lambda: fw.read(chain(*io["x"])), 2
  if key == "sum":
    return inputs(rand(size["n"])), lambda: io["x"][0].sum().item(), 2
  if key == "conv":
    (w,) = fw.fresh(rand(*size["w"]) - 0.5)
    return inputs(rand(*size["x"])), lambda: fw.read(io["x"][0].conv2d(w, padding=1)), 2
  if key == "softmax":
    return inputs(rand(*size["x"])), lambda: fw.read(io["x"][0].softmax(-1)), 2
  if key == "gather":   # the table once; fresh random rows each run
    (table,) = fw.fresh(rand(*GATHER_TABLE))
    def prep(): io["x"] = fw.fresh(random_rows(size["rows"]))
    return prep, lambda: fw.read(table[io["x"][0]]), 2
  # training steps: jitted, fresh batches each call
  T.manual_seed(0)
  nn = fw.nn
  if key == "mlp":
    layers, opt_cls, data = [nn.Linear(784, 128), T.relu, nn.Linear(128, 10)], fw.optim.SGD, batches(size["bs"], (784,))
    kw = {"lr": 0.01}
  else:   # cnn, cnn_cold
    layers = [nn.Conv2d(1, 8, 3), T.relu, T.max_pool2d, nn.Conv2d(8, 16, 3), T.relu, T.max_pool2d,
              lambda x: x.flatten(1), nn.Linear(400, 10)]
    opt_cls, data, kw = fw.optim.Adam, batches(size["bs"], (1, 28, 28)), {"lr": 1e-3}
  params = [p for l in layers for p in (getattr(l, "weight", None), getattr(l, "bias", None)) if p is not None]
  opt = opt_cls(params, **kw)
  @fw.m.TinyJit
  def step(x, y):
    with fw.train():
      opt.zero_grad()
      for l in layers: x = l(x)
      loss = x.sparse_categorical_crossentropy(y)
      loss.backward()
      T.realize(loss, *opt.schedule_step())
      return loss
  it = iter(range(10**9))
  def prep(): io["x"] = fw.fresh(*data[next(it) % len(data)])
  return prep, lambda: step(*io["x"]).item(), 3

# ------------------------------------------------------------------------------------------------ torch

def make_torch(key: str, size: dict):
  import torch
  import torch.nn.functional as F
  torch.set_num_threads(2)
  torch.manual_seed(0)
  t = torch.from_numpy
  noop = lambda: None
  if key.startswith("matmul"):
    a, b = t(rand(size["n"], size["n"])), t(rand(size["n"], size["n"]))
    return noop, lambda: a @ b, 2
  if key == "elementwise":
    a, b = t(rand(size["n"])), t(rand(size["n"]))
    return noop, lambda: chain(a, b), 2
  if key == "sum":
    x = t(rand(size["n"]))
    return noop, lambda: x.sum().item(), 2
  if key == "conv":
    x, w = t(rand(*size["x"])), t(rand(*size["w"]) - 0.5)
    return noop, lambda: F.conv2d(x, w, padding=1), 2
  if key == "softmax":
    x = t(rand(*size["x"]))
    return noop, lambda: x.softmax(-1), 2
  if key == "gather":
    table, io = t(rand(*GATHER_TABLE)), {}
    def prep(): io["i"] = t(random_rows(size["rows"])).long()
    return prep, lambda: table[io["i"]], 2
  nn = torch.nn
  if key == "mlp":
    model, data = nn.Sequential(nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 10)), batches(size["bs"], (784,))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
  else:
    model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Flatten(1), nn.Linear(400, 10))
    opt, data = torch.optim.Adam(model.parameters(), lr=1e-3), batches(size["bs"], (1, 28, 28))
  data = [(t(x), t(y).long()) for x, y in data]
  it = iter(range(10**9))
  def run():
    x, y = data[next(it) % len(data)]
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()
  return noop, run, 3

# ------------------------------------------------------------------------------------------------ numpy

def conv_np(x, w):   # im2col (sliding windows) + one BLAS matmul; the result is an NCHW view of an NHWC array
  win = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
  return np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)

def make_numpy(key: str, size: dict):
  noop = lambda: None
  if key.startswith("matmul"):
    a, b = rand(size["n"], size["n"]), rand(size["n"], size["n"])
    return noop, lambda: a @ b, 2
  if key == "elementwise":
    a, b = rand(size["n"]), rand(size["n"])
    return noop, lambda: np.exp(np.maximum(a * b + 1.0, 0) - a) * 0.5 + np.abs(b), 2
  if key == "copy":   # the bandwidth reference: read n floats, write n floats
    a, b = rand(size["n"]), np.empty(size["n"], np.float32)
    return noop, lambda: np.copyto(b, a), 2
  if key == "sum":
    x = rand(size["n"])
    return noop, lambda: float(x.sum()), 2
  if key == "conv":
    x, w = rand(*size["x"]), rand(*size["w"]) - 0.5
    return noop, lambda: conv_np(x, w), 2
  if key == "gather":
    table, io = rand(*GATHER_TABLE), {}
    def prep(): io["i"] = random_rows(size["rows"])
    return prep, lambda: table[io["i"]], 2
  if key == "softmax":
    x = rand(*size["x"])
    def softmax():
      e = np.exp(x - x.max(-1, keepdims=True))
      return e / e.sum(-1, keepdims=True)
    return noop, softmax, 2
  if key == "mlp":   # hand-written forward and backward, SGD
    w1, b1 = (rand(784, 128) - 0.5) / 14, np.zeros(128, np.float32)
    w2, b2 = (rand(128, 10) - 0.5) / 5.6, np.zeros(10, np.float32)
    data, it = batches(size["bs"], (784,)), iter(range(10**9))
    def step():
      x, y = data[next(it) % len(data)]
      h = np.maximum(x @ w1 + b1, 0)
      z = h @ w2 + b2
      p = np.exp(z - z.max(1, keepdims=True))
      p /= p.sum(1, keepdims=True)
      loss = -np.log(p[np.arange(len(y)), y]).mean()
      p[np.arange(len(y)), y] -= 1
      dz = p / len(y)
      dh = (dz @ w2.T) * (h > 0)
      for param, g in ((w2, h.T @ dz), (b2, dz.sum(0)), (w1, x.T @ dh), (b1, dh.sum(0))): param -= 0.01 * g
      return float(loss)
    return noop, step, 3
  raise NotImplementedError(f"{key} has no numpy version (no autograd)")

# ------------------------------------------------------------------------------------------------ the timer

def run_worker(fw_name: str, key: str, size: dict, reps: int, budget: float, device: str | None = None) -> dict:
  """Times one workload in this process: warm-up runs, then timed runs until `budget` seconds are spent (at least 3
  runs, at most `reps`); the median in ms. 'cnn_cold' times the first two calls of a new jitted step instead."""
  fw = Tiny(fw_name, device) if fw_name in ("tinyweb", "tinygrad") else None
  prep, run, warm = make_tiny(fw, key, size) if fw else make_torch(key, size) if fw_name == "torch" else make_numpy(key, size)
  def timed() -> tuple[float, int | None]:
    prep()
    if fw: fw.counters.reset()
    st = time.perf_counter()
    run()
    return time.perf_counter() - st, fw.counters.kernel_count if fw else None
  if key == "cnn_cold":
    (t1, k1), (t2, k2) = timed(), timed()
    return {"ms": (t1 + t2) * 1e3, "runs": 2, "kernels": k1 and k2 and k1 + k2, "detail": f"{t1:.1f}+{t2:.1f} s"}
  for i in range(warm):   # the first run compiles; stop early when one run already takes longer than the budget
    if timed()[0] > budget and key not in ("mlp", "cnn"): break
  times, kernels = [], []
  while len(times) < 3 or (len(times) < reps and sum(times) < budget):
    t, k = timed()
    times.append(t); kernels.append(k)
  if fw and min(kernels) == 0:   # a run that launched nothing read a cached value: the time would be meaningless
    raise RuntimeError(f"{fw_name} launched no kernel in a timed run of {key} (kernel counts {kernels})")
  return {"ms": statistics.median(times) * 1e3, "runs": len(times), "kernels": kernels[0]}
