"""Train a small MLP on a synthetic two-spirals problem with plain tinyweb tensors and hand-written SGD.
This is the README's main job until the MNIST demo lands."""
import math, random, time
from tinyweb import Tensor, Device, GlobalCounters

def spirals(n: int, seed: int = 0):
  rng = random.Random(seed)
  xs, ys = [], []
  for i in range(n):
    label, t = i % 2, rng.uniform(0.25, 3.5)
    ang = t * 2.2 + math.pi * label
    xs.append([t * math.cos(ang) / 3.5 + rng.gauss(0, 0.03), t * math.sin(ang) / 3.5 + rng.gauss(0, 0.03)])
    ys.append(label)
  return Tensor(xs), Tensor(ys)

def main(steps: int = 300, hidden: int = 64, lr: float = 0.5):
  Tensor.manual_seed(0)
  X, Y = spirals(512)
  Xt, Yt = spirals(512, seed=1)
  w1, b1 = Tensor.kaiming_uniform(2, hidden, requires_grad=True), Tensor.zeros(hidden, requires_grad=True)
  w2, b2 = Tensor.kaiming_uniform(hidden, hidden, requires_grad=True), Tensor.zeros(hidden, requires_grad=True)
  w3, b3 = Tensor.kaiming_uniform(hidden, 2, requires_grad=True), Tensor.zeros(2, requires_grad=True)
  params = [w1, b1, w2, b2, w3, b3]
  Tensor.realize_all(*params)
  def forward(x): return ((x @ w1 + b1).relu() @ w2 + b2).relu() @ w3 + b3
  onehot = Y.one_hot(2).float()
  print(f"training a 2-{hidden}-{hidden}-2 MLP on {Device.DEFAULT}")
  st = time.perf_counter()
  for step in range(1, steps + 1):
    loss = -(forward(X).log_softmax(-1) * onehot).sum(-1).mean()
    for p in params: p.grad = None
    loss.backward()
    with Tensor.no_grad():
      for p in params: p.assign(p - lr * p.grad)
    Tensor.realize_all(loss, *params)
    if step % 50 == 0 or step == 1:
      acc = (forward(X).argmax(-1) == Y).float().mean().item()
      print(f"step {step:4d}  loss {loss.item():.4f}  train acc {acc:.3f}")
  with Tensor.no_grad(): test_acc = (forward(Xt).argmax(-1) == Yt).float().mean().item()
  dt = time.perf_counter() - st
  print(f"test accuracy {test_acc:.3f}; {steps / dt:.1f} steps/s; {GlobalCounters.kernel_count} kernels launched")
  return test_acc

if __name__ == "__main__":
  main()
