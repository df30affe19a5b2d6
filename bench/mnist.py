"""The "beautiful MNIST" CNN trained on Fashion-MNIST by tinyweb, tinygrad 0.14 (CPU) and torch (CPU), same model and data.

  python -m bench.mnist                                   # the demo's full run (500 steps of 256), all three peers
  python -m bench.mnist --steps 10 --batch-size 128 --peers tinyweb,torch

Model: conv5(1->32)-relu-conv5(32->32)-relu-bn-maxpool2-conv3(32->64)-relu-conv3(64->64)-relu-bn-maxpool2-flatten-
linear(576->10); Adam, sparse categorical cross-entropy, inputs x/255-0.5; the demo's learning rate: one-cycle peaking
at --lr (torch's OneCycleLR without momentum cycling; every peer sets the same per-step values) or --schedule constant.
Every peer sees the same batches:
indices drawn like tinyweb's demo (random.Random(seed).randrange per sample). tinyweb runs demos.mnist.train.train
in this process; tinygrad (DEV=CPU, TinyJit) and torch (eager, 2 threads) run in subprocesses of this file
(`--worker NAME`), reading the arrays tinyweb loaded from an .npy file, so their imports and env stay apart.
Reported per peer: wall time of the training loop, its first two steps (warm-up: JIT capture / compile), steps/s
after them, test accuracy on the 10k test set; and ratios to tinyweb (time ratios: above 1 = slower than tinyweb)."""
from __future__ import annotations
import argparse, json, os, random, subprocess, sys, tempfile, time

def batch_indices(n: int, batch_size: int, seed: int):
  """The index lists of tinyweb's demo Batches, one per step."""
  rng = random.Random(seed)
  while True: yield [rng.randrange(n) for _ in range(batch_size)]

def timed_loop(steps: int, step) -> dict:
  """Runs step(i) -> (loss, acc) as Python floats; times the loop, with the first two steps counted separately."""
  st = t_first = time.perf_counter()
  for i in range(steps):
    loss, acc = step(i)
    if i == 1: t_first = time.perf_counter()
    if i % 10 == 0 or i == steps - 1: print(f"{i + 1}/{steps} loss {loss:6.3f} acc {acc * 100:5.1f}%", file=sys.stderr)
  end = time.perf_counter()
  return {"train_seconds": end - st, "warmup_seconds": t_first - st,
          "steps_per_second": (steps - 2) / (end - t_first) if steps > 2 else float("nan")}

def learning_rates(lr: float, steps: int, schedule: str) -> list[float]:
  """The learning rate of each step for the workers, from torch's OneCycleLR (the reference tinyweb's matches)."""
  if schedule == "constant": return [lr] * steps
  import torch
  opt = torch.optim.Adam([torch.zeros(1, requires_grad=True)], lr=lr)
  sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps, cycle_momentum=False)
  out = []
  for _ in range(steps):
    out.append(opt.param_groups[0]["lr"])
    opt.step(); sched.step()
  return out

def run_tinygrad(data: dict, steps: int, batch_size: int, lrs: list[float], seed: int) -> dict:
  from tinygrad import Tensor, TinyJit, Context, Device, dtypes, nn
  from tinygrad.nn.state import get_parameters
  class Model:
    def __init__(self):
      self.layers = [nn.Conv2d(1, 32, 5), Tensor.relu, nn.Conv2d(32, 32, 5), Tensor.relu, nn.BatchNorm(32), Tensor.max_pool2d,
                     nn.Conv2d(32, 64, 3), Tensor.relu, nn.Conv2d(64, 64, 3), Tensor.relu, nn.BatchNorm(64), Tensor.max_pool2d,
                     lambda x: x.flatten(1), nn.Linear(576, 10)]
    def __call__(self, x: Tensor) -> Tensor: return x.sequential(self.layers)
  normalize = lambda x: x.float() * (1 / 255.0) - 0.5
  Tensor.manual_seed(seed)
  model = Model()
  opt = nn.optim.Adam(get_parameters(model), lr=lrs[0])

  @TinyJit
  def step(x: Tensor, y: Tensor):
    with Context(TRAINING=1):
      opt.zero_grad()
      logits = model(normalize(x))
      loss = logits.sparse_categorical_crossentropy(y.cast(dtypes.int32))
      acc = (logits.argmax(-1) == y.cast(dtypes.int32)).float().mean()
      loss.backward()
      Tensor.realize(loss, acc, *opt.schedule_step())
      return loss, acc

  X, Y, idx = data["X_train"], data["Y_train"], batch_indices(len(data["X_train"]), batch_size, seed)
  def one(i):
    b = next(idx)
    opt.lr.assign(Tensor([lrs[i]], device=opt.lr.device, dtype=opt.lr.dtype)).realize()
    loss, acc = step(Tensor(X[b]), Tensor(Y[b]))
    return loss.item(), acc.item()
  res = timed_loop(steps, one)
  Xt, Yt = data["X_test"], data["Y_test"]
  correct = sum(int((model(normalize(Tensor(Xt[i:i + 1000]))).argmax(-1).numpy() == Yt[i:i + 1000]).sum())
                for i in range(0, len(Xt), 1000))
  return {**res, "test_accuracy": correct / len(Xt), "device": Device.DEFAULT}

def run_torch(data: dict, steps: int, batch_size: int, lrs: list[float], seed: int) -> dict:
  import torch
  from torch import nn
  torch.set_num_threads(2)
  torch.manual_seed(seed)
  model = nn.Sequential(nn.Conv2d(1, 32, 5), nn.ReLU(), nn.Conv2d(32, 32, 5), nn.ReLU(), nn.BatchNorm2d(32), nn.MaxPool2d(2),
                        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.Conv2d(64, 64, 3), nn.ReLU(), nn.BatchNorm2d(64), nn.MaxPool2d(2),
                        nn.Flatten(1), nn.Linear(576, 10))
  opt = torch.optim.Adam(model.parameters(), lr=lrs[0])
  normalize = lambda x: torch.from_numpy(x).float() * (1 / 255.0) - 0.5
  X, Y, idx = data["X_train"], data["Y_train"], batch_indices(len(data["X_train"]), batch_size, seed)
  model.train()
  def one(i):
    b = next(idx)
    x, y = normalize(X[b]), torch.from_numpy(Y[b]).long()
    opt.param_groups[0]["lr"] = lrs[i]
    opt.zero_grad()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y)
    loss.backward()
    opt.step()
    return loss.item(), (logits.argmax(-1) == y).float().mean().item()
  res = timed_loop(steps, one)
  model.eval()
  Xt, Yt = data["X_test"], data["Y_test"]
  with torch.no_grad():
    correct = sum(int((model(normalize(Xt[i:i + 1000])).argmax(-1).numpy() == Yt[i:i + 1000]).sum()) for i in range(0, len(Xt), 1000))
  return {**res, "test_accuracy": correct / len(Xt), "device": f"CPU, {torch.get_num_threads()} threads"}

def run_tinyweb(steps: int, batch_size: int, lr: float, schedule: str, seed: int) -> dict:
  from demos.mnist.train import train
  r = train("fashion", steps, batch_size, lr, schedule, seed)
  # train() times the loop and the steps after the first two; the warm-up is what is left
  warm = r["train_seconds"] - (steps - 2) / r["steps_per_second"] if steps > 2 else r["train_seconds"]
  return {"train_seconds": r["train_seconds"], "warmup_seconds": warm, "steps_per_second": r["steps_per_second"],
          "test_accuracy": r["test_accuracy"], "device": r["device"]}

WORKERS = {"tinygrad": (run_tinygrad, {"DEV": "CPU"}), "torch": (run_torch, {})}

def run_peer(name: str, data_dir: str, a) -> dict:
  """Runs `--worker name` in a subprocess; its last stdout line is the result as JSON."""
  env = {**os.environ, **WORKERS[name][1]}
  cmd = [sys.executable, "-m", "bench.mnist", "--worker", name, "--data", data_dir, "--steps", str(a.steps),
         "--batch-size", str(a.batch_size), "--lr", str(a.lr), "--schedule", a.schedule, "--seed", str(a.seed)]
  p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  if p.returncode != 0: raise RuntimeError(f"{name} worker exited with {p.returncode} (its stderr is above)")
  return json.loads(p.stdout.strip().splitlines()[-1])

def table(results: dict, steps: int, batch_size: int) -> str:
  ref = results.get("tinyweb", {})
  def ratio(r, key, inv=False):
    if "error" in r or "error" in ref or key not in ref: return "-"
    a, b = (ref[key], r[key]) if inv else (r[key], ref[key])
    return f"{a / b:.2f}x"
  head = f"{'peer':9} {'train s':>8} {'warm-up s':>9} {'steps/s':>8} {'test acc':>8} | {'time':>7} {'warm-up':>7} {'step time':>9}  device"
  lines = [f"beautiful-MNIST CNN on Fashion-MNIST, {steps} steps of {batch_size} (warm-up = first 2 steps; steps/s after it); "
           f"ratios = peer/tinyweb", head, "-" * len(head)]
  for name, r in results.items():
    if "error" in r: lines.append(f"{name:9} failed: {r['error']}"); continue
    lines.append(f"{name:9} {r['train_seconds']:8.1f} {r['warmup_seconds']:9.1f} {r['steps_per_second']:8.3f} "
                 f"{r['test_accuracy'] * 100:7.2f}% | {ratio(r, 'train_seconds'):>7} {ratio(r, 'warmup_seconds'):>7} "
                 f"{ratio(r, 'steps_per_second', inv=True):>9}  {r['device']}")
  return "\n".join(lines)

def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--steps", type=int, default=500)
  ap.add_argument("--batch-size", type=int, default=256)
  ap.add_argument("--peers", default="tinyweb,tinygrad,torch")
  ap.add_argument("--lr", type=float, default=0.003, help="the (peak) learning rate")
  ap.add_argument("--schedule", default="onecycle", choices=["onecycle", "constant"])
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
  ap.add_argument("--data", help=argparse.SUPPRESS)
  a = ap.parse_args()
  if a.worker:   # subprocess: train one peer on the arrays in --data, print the result as the last stdout line
    import numpy as np
    data = {k: np.load(os.path.join(a.data, k + ".npy")) for k in ("X_train", "Y_train", "X_test", "Y_test")}
    print(json.dumps(WORKERS[a.worker][0](data, a.steps, a.batch_size, learning_rates(a.lr, a.steps, a.schedule), a.seed)))
    return
  peers = [p.strip() for p in a.peers.split(",") if p.strip()]
  if unknown := set(peers) - {"tinyweb", *WORKERS}: ap.error(f"unknown peers {sorted(unknown)}")
  results = {}
  with tempfile.TemporaryDirectory(prefix="bench-mnist-") as data_dir:
    if set(peers) & set(WORKERS):
      import numpy as np
      from tinyweb.nn.datasets import fashion_mnist
      for k, t in zip(("X_train", "Y_train", "X_test", "Y_test"), fashion_mnist()): np.save(os.path.join(data_dir, k + ".npy"), t.numpy())
    for name in peers:
      print(f"=== {name}", file=sys.stderr)
      try: results[name] = run_tinyweb(a.steps, a.batch_size, a.lr, a.schedule, a.seed) if name == "tinyweb" else run_peer(name, data_dir, a)
      except Exception as e: results[name] = {"error": f"{type(e).__name__}: {e}"}
  print(table(results, a.steps, a.batch_size))

if __name__ == "__main__": main()
