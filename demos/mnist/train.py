"""The "beautiful MNIST" CNN: conv5-conv5-bn-pool-conv3-conv3-bn-pool-linear, trained with Adam and a jitted step.

  python -m demos.mnist.train                      # Fashion-MNIST (or MNIST when it is available), default settings
  python -m demos.mnist.train --dataset mnist --steps 200 --batch-size 512 --schedule constant --lr 0.001
  python -m demos.mnist.train --eval-every 50 --plot curve.png      # also curve_confusion.png
  python -m demos.mnist.train --steps 500 --stop-at 200 --save ck.safetensors   # the first 200 steps of a 500-step run
  python -m demos.mnist.train --steps 500 --load ck.safetensors --save ck.safetensors   # the other 300

Defaults: 500 steps of 256 (about 2 epochs), Adam with a one-cycle learning rate peaking at 3e-3. The same recipe in
torch (OneCycleLR, cycle_momentum=False) reaches 90.26 % test accuracy on Fashion-MNIST; a constant lr of 1e-3 with
batches of 512 gives 89.7 % after 500 steps (twice the samples).

Prints a progress bar with loss and accuracy, the test accuracy at the end, the device used and steps/s, and the
confusion matrix of the test set. --plot PATH writes the training curve (loss of every step, batch accuracy, and test
accuracy at every --eval-every) to PATH as a 900x500 PNG and the confusion matrix next to it (PATH with the suffix
_confusion.png); it needs matplotlib (pip install 'tinyweb[demo]').

Checkpoints (--save, --load, --save-every) are safetensors files, written atomically, that hold all a run needs to go on
exactly as if it had not stopped: the weights and BatchNorm statistics, Adam's state (moments, step count, learning
rate), the step reached, the state of the random data order, the run's settings and its history (for the plot). The
step draws no random numbers on the device, so nothing else is random. --steps is always the length of the whole run
(the one-cycle schedule spans it): --stop-at N ends this part after step N, and --load goes on from the checkpoint's
step to --steps. A checkpoint only continues the run it came from: its dataset, batch size, lr, schedule and (for the
one-cycle schedule) --steps must be given again unchanged; with the constant schedule --steps may grow."""
from __future__ import annotations
import argparse, os, random, sys
from typing import Optional
from tinyweb import Tensor, TinyJit, Device, GlobalCounters, dtypes
from tinyweb import nn
from tinyweb.nn import optim, datasets
from tinyweb.nn.state import get_parameters
from demos.common import (train_loop, new_history, save_training, training_metadata, load_training, confusion_matrix,
                          format_confusion, matplotlib_figure, plot_training, plot_confusion)

CLASS_NAMES = {"mnist": [str(d) for d in range(10)],
               "fashion-mnist": ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]}

class Model:
  def __init__(self):
    self.layers = [
      nn.Conv2d(1, 32, 5), Tensor.relu,
      nn.Conv2d(32, 32, 5), Tensor.relu,
      nn.BatchNorm(32), Tensor.max_pool2d,
      nn.Conv2d(32, 64, 3), Tensor.relu,
      nn.Conv2d(64, 64, 3), Tensor.relu,
      nn.BatchNorm(64), Tensor.max_pool2d,
      lambda x: x.flatten(1), nn.Linear(576, 10)]
  def __call__(self, x: Tensor) -> Tensor:
    for layer in self.layers: x = layer(x)
    return x

def load_dataset(name: str):
  """(name, X_train, Y_train, X_test, Y_test): 'auto' is MNIST when it can be found or fetched, else Fashion-MNIST."""
  if name in ("auto", "mnist"):
    try: return ("mnist",) + datasets.mnist()
    except RuntimeError as e:
      if name == "mnist": raise
      print(f"MNIST is not available ({str(e).splitlines()[0]}); using Fashion-MNIST", file=sys.stderr)
  return ("fashion-mnist",) + datasets.fashion_mnist()

class Batches:
  """Random training batches, sliced on the host from the raw bytes (cheaper than indexing on the device)."""
  def __init__(self, X: Tensor, Y: Tensor, batch_size: int, seed: int):
    self.x, self.y = bytes(X.data().cast("B")), bytes(Y.data().cast("B"))
    self.n, self.row, self.bs, self.rng = X.shape[0], X.numel() // X.shape[0], batch_size, random.Random(seed)
  def __call__(self) -> tuple[Tensor, Tensor]:
    idx = [self.rng.randrange(self.n) for _ in range(self.bs)]
    xb = b"".join(self.x[i * self.row:(i + 1) * self.row] for i in idx)
    yb = bytes(self.y[i] for i in idx)
    return Tensor.frombuffer(bytearray(xb), dtypes.uint8, (self.bs, 1, 28, 28)), Tensor.frombuffer(bytearray(yb), dtypes.uint8, (self.bs,))
  def state(self) -> list:
    """Where the random order is, as JSON-able data (for checkpoints)."""
    return list(self.rng.getstate())
  def set_state(self, state: list) -> None:
    version, internal, gauss = state
    self.rng.setstate((version, tuple(internal), gauss))

def normalize(x: Tensor) -> Tensor: return x.float() * (1 / 255.0) - 0.5

def predict(model: Model, X: Tensor, batch: int = 1000) -> Tensor:
  """The predicted class of each image of X (int32), computed `batch` images at a time."""
  with Tensor.no_grad(), Tensor.train(False):
    return Tensor.cat(*[model(normalize(X[i:i + batch])).argmax(-1).realize() for i in range(0, X.shape[0], batch)])

def accuracy(preds: Tensor, Y: Tensor) -> float: return (preds == Y.cast(dtypes.int32)).sum().item() / Y.shape[0]

def check_resume(path: str, saved: dict, run: dict, step: int) -> None:
  """Refuse to continue a checkpoint with settings that would make the run differ from the one it was saved from."""
  flexible = {"steps"} if run["schedule"] == "constant" else set()   # (a constant lr does not depend on the run's length)
  diff = [f"{k} {saved.get(k)!r} (given: {v!r})" for k, v in run.items() if saved.get(k) != v and k not in flexible]
  if diff:
    raise ValueError(f"--load {path}: the checkpoint continues a run with other settings: {'; '.join(diff)}. Give them "
                     f"unchanged (--steps is the length of the whole run, which the one-cycle schedule spans; --stop-at N stops early)")
  if step > run["steps"]: raise ValueError(f"--load {path}: the checkpoint is at step {step}, past --steps {run['steps']}")

def confusion_path(plot: str) -> str:
  """Where --plot PATH puts the confusion matrix: next to PATH, with the suffix _confusion.png."""
  return os.path.splitext(plot)[0] + "_confusion.png"

def train(dataset: str = "auto", steps: int = 500, batch_size: int = 256, lr: float = 0.003, schedule: str = "onecycle",
          seed: int = 0, eval_every: int = 0, test_limit: int = 0, *, save: Optional[str] = None, load: Optional[str] = None,
          save_every: int = 0, stop_at: Optional[int] = None, plot: Optional[str] = None) -> dict:
  """Train and return the results. schedule: 'onecycle' (lr rises to `lr`, then anneals; torch's OneCycleLR without
  momentum cycling) or 'constant'. test_limit > 0 evaluates on only the first test_limit test images. steps: the length
  of the whole run; stop_at: end this part after that step; load / save: a checkpoint to go on from / to write at the
  end (and every save_every steps); plot: PNG files of the training curve and the confusion matrix (see the module's
  docstring)."""
  if schedule not in ("onecycle", "constant"): raise ValueError(f"train: schedule must be 'onecycle' or 'constant', got {schedule!r}")
  if save_every and not save: raise ValueError(f"train: save_every={save_every} needs a path to save to (save=...)")
  if plot: matplotlib_figure()   # (fails now, not after the training, when matplotlib is missing)
  name, X_train, Y_train, X_test, Y_test = load_dataset(dataset)
  if test_limit: X_test, Y_test = X_test[:test_limit], Y_test[:test_limit]
  Tensor.manual_seed(seed)
  model = Model()
  opt = optim.Adam(get_parameters(model), lr=lr)
  lr_schedule = optim.OneCycleLR(opt, max_lr=lr, total_steps=steps) if schedule == "onecycle" else None
  batches = Batches(X_train, Y_train, batch_size, seed)
  run = {"dataset": name, "steps": steps, "batch_size": batch_size, "lr": lr, "schedule": schedule}
  start, history = 0, new_history()
  if load:
    meta = training_metadata(load)
    check_resume(load, meta["run"], run, meta["step"])
    load_training(load, model, opt)   # (the optimizer's lr too: where the schedule was)
    start, history = meta["step"], meta["history"]
    batches.set_state(meta["data_rng"])
    if lr_schedule is not None: lr_schedule.last_epoch = start
  stop = steps if stop_at is None else stop_at
  if not start <= stop <= steps: raise ValueError(f"train: stop_at must be from the start step {start} to steps {steps}, got {stop_at}")

  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor:
    with Tensor.train():
      opt.zero_grad()
      logits = model(normalize(x))
      loss = logits.sparse_categorical_crossentropy(y.cast(dtypes.int32))
      acc = (logits.argmax(-1) == y.cast(dtypes.int32)).float().mean()
      loss.backward()
      Tensor.realize_all(loss, acc, *opt.schedule_step())
      return loss, acc

  def scheduled_step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    out = step(x, y)
    if lr_schedule is not None: lr_schedule.step()   # sets opt.lr, a buffer the jitted kernels read
    return out

  def checkpoint(n: int):   # (after step n: the data order has drawn exactly the batches of steps 1..n)
    save_training(save, model, opt, {"step": n, "run": run, "data_rng": batches.state(), "history": history})
  def after_step(n: int):
    if save_every and n % save_every == 0: checkpoint(n)

  print(f"training the beautiful-MNIST CNN on {name} ({X_train.shape[0]} images) on {Device.DEFAULT}, "
        f"{steps} steps of {batch_size}, {schedule} lr {lr}" + (f", from step {start} of {load}" if load else "") +
        (f", stopping after step {stop}" if stop < steps else ""), file=sys.stderr)
  r = train_loop(scheduled_step, batches, stop, lambda: accuracy(predict(model, X_test), Y_test), eval_every, start, history, after_step)
  if save: checkpoint(stop)
  preds = predict(model, X_test)
  test_acc, cm = accuracy(preds, Y_test), confusion_matrix(Y_test, preds, 10)
  result = {"dataset": name, "device": Device.DEFAULT, "steps": steps, "start_step": start, "stop_step": stop,
            "batch_size": batch_size, "test_accuracy": test_acc, "confusion": cm, **r, "kernels": GlobalCounters.kernel_count}
  print(f"{name}: test accuracy {test_acc * 100:.2f}% after {stop} steps on {Device.DEFAULT}; "
        f"{r['steps_per_second']:.2f} steps/s after warm-up; {r['train_seconds']:.1f} s of training")
  print(format_confusion(cm, CLASS_NAMES[name]))
  if plot:
    plot_training(plot, history, f"beautiful-MNIST CNN on {name}: {stop} steps of {batch_size}, test accuracy {test_acc * 100:.2f}%")
    plot_confusion(confusion_path(plot), cm, CLASS_NAMES[name], f"{name} test set after {stop} steps: {test_acc * 100:.2f}% right")
    print(f"wrote {plot} and {confusion_path(plot)}")
  return result

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--dataset", default="auto", choices=["auto", "mnist", "fashion"])
  ap.add_argument("--steps", type=int, default=500, help="the length of the whole run (also when it goes on from --load)")
  ap.add_argument("--batch-size", type=int, default=256)
  ap.add_argument("--lr", type=float, default=0.003, help="the (peak) learning rate")
  ap.add_argument("--schedule", default="onecycle", choices=["onecycle", "constant"])
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--eval-every", type=int, default=0, help="also report test accuracy every N steps")
  ap.add_argument("--test-limit", type=int, default=0, help="evaluate on the first N test images only")
  ap.add_argument("--save", metavar="PATH", help="write a checkpoint (safetensors) there at the end")
  ap.add_argument("--save-every", type=int, default=0, metavar="N", help="also every N steps (to --save's path)")
  ap.add_argument("--load", metavar="PATH", help="go on from this checkpoint (of a run with the same settings)")
  ap.add_argument("--stop-at", type=int, metavar="N", help="end this part of the run after step N (then go on with --load)")
  ap.add_argument("--plot", metavar="PATH", help="write the training curve there (PNG) and the confusion matrix next to it")
  a = ap.parse_args()
  train(a.dataset, a.steps, a.batch_size, a.lr, a.schedule, a.seed, a.eval_every, a.test_limit, save=a.save, load=a.load,
        save_every=a.save_every, stop_at=a.stop_at, plot=a.plot)
