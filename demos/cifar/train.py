"""A small CIFAR-10 CNN (tinygrad's seed example): four conv3-bn-relu blocks, three 2x2 max pools, two linear layers.
Trained with Adam and a jitted step, with random-crop and horizontal-flip augmentation.

  python -m demos.cifar.train                                   # real CIFAR-10 (TINYWEB_CIFAR10_DIR, cache or download)
  python -m demos.cifar.train --steps 500 --batch-size 256 --folder ~/data/cifar-10-batches-py

Augmentation: each training image is padded by 4 pixels (zeros) and cropped back to 32x32 at its own random offset
(per sample, on the host, while the batch's bytes are gathered); each image is flipped horizontally with probability
1/2 by a random per-sample mask inside the jitted step (`mask.where(x.flip(3), x)`; the random state advances on
every replay). Prints a progress bar with loss and accuracy, the test accuracy at the end, the device and steps/s.

On the CPU device the full-width model costs ~0.1 GFLOP per image forward (x3 for a training step) and the generated
kernels run at a few GFLOP/s, so expect seconds per step of 32 and minutes for the 10000 test images; `--width 0.25`
is a quick version."""
from __future__ import annotations
import argparse, random, struct, sys
from typing import Optional
from tinyweb import Tensor, TinyJit, Device, GlobalCounters, dtypes
from tinyweb import nn
from tinyweb.nn import optim, datasets
from tinyweb.nn.state import get_parameters
from demos.common import train_loop

MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)   # per-channel statistics of the CIFAR-10 train set

class Model:
  """conv3(3->32)-bn-relu, conv3(32->64)-bn-relu, pool, conv3(64->128)-bn-relu, pool, conv3(128->128)-bn-relu, pool,
  linear(2048->256)-relu, linear(256->10). `width` scales every channel count and the hidden size (the tests use a
  narrow copy: the CPU device is slow)."""
  def __init__(self, width: float = 1.0):
    c1, c2, c3, hidden = (max(1, round(c * width)) for c in (32, 64, 128, 256))
    def block(cin, cout): return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm(cout), Tensor.relu]
    self.layers = [*block(3, c1), *block(c1, c2), Tensor.max_pool2d, *block(c2, c3), Tensor.max_pool2d,
                   *block(c3, c3), Tensor.max_pool2d, lambda x: x.flatten(1),
                   nn.Linear(c3 * 4 * 4, hidden), Tensor.relu, nn.Linear(hidden, 10)]
  def __call__(self, x: Tensor) -> Tensor:
    for layer in self.layers: x = layer(x)
    return x

class Batches:
  """Random training batches gathered on the host from the raw bytes, each image randomly cropped: padded by `pad`
  zero pixels on every side and cut back to 32x32 at an offset drawn per sample (pad=0: no crop)."""
  def __init__(self, X: Tensor, Y: Tensor, batch_size: int, seed: int, pad: int = 4):
    self.x, self.y = bytes(X.data().cast("B")), Y.tolist()
    self.n, self.bs, self.pad, self.rng = X.shape[0], batch_size, pad, random.Random(seed)
  def crop(self, i: int, dy: int, dx: int) -> bytes:
    """Image i shifted by (dy, dx): out[c, r, s] = img[c, r + dy, s + dx], zero outside the image."""
    zero, img, rows = bytes(32), self.x[i * 3072:(i + 1) * 3072], []
    for c in range(3):
      for r in range(32):
        sy = r + dy
        if not 0 <= sy < 32: rows.append(zero); continue
        row = img[c * 1024 + sy * 32:c * 1024 + sy * 32 + 32]
        rows.append(row[dx:] + zero[:dx] if dx >= 0 else zero[:-dx] + row[:32 + dx])
    return b"".join(rows)
  def __call__(self) -> tuple[Tensor, Tensor]:
    idx = [self.rng.randrange(self.n) for _ in range(self.bs)]
    p, r = self.pad, self.rng.randint
    xb = b"".join(self.crop(i, r(-p, p), r(-p, p)) if p else self.x[i * 3072:(i + 1) * 3072] for i in idx)
    yb = struct.pack(f"={self.bs}i", *(self.y[i] for i in idx))
    return (Tensor.frombuffer(bytearray(xb), dtypes.uint8, (self.bs, 3, 32, 32)),
            Tensor.frombuffer(bytearray(yb), dtypes.int32, (self.bs,)))

def random_flip(x: Tensor) -> Tensor:
  """Flip each image of the batch left-right with probability 1/2."""
  return (Tensor.rand(x.shape[0], 1, 1, 1, device=x.device) < 0.5).where(x.flip(3), x)

def normalize(x: Tensor) -> Tensor:
  mean = Tensor([m * 255 for m in MEAN], device=x.device).reshape(1, 3, 1, 1)
  inv_std = Tensor([1 / (s * 255) for s in STD], device=x.device).reshape(1, 3, 1, 1)
  return (x.float() - mean) * inv_std

def evaluate(model: Model, X: Tensor, Y: Tensor, batch: int = 1000) -> float:
  correct = 0
  with Tensor.no_grad(), Tensor.train(False):
    for i in range(0, X.shape[0], batch):
      correct += (model(normalize(X[i:i + batch])).argmax(-1) == Y[i:i + batch]).sum().item()
  return correct / X.shape[0]

def train(folder: Optional[str] = None, steps: int = 100, batch_size: int = 128, lr: float = 0.001, seed: int = 0,
          eval_every: int = 0, crop: int = 4, flip: bool = True, width: float = 1.0) -> dict:
  X_train, Y_train, X_test, Y_test = datasets.cifar10(folder)
  Tensor.manual_seed(seed)
  model = Model(width)
  opt = optim.Adam(get_parameters(model), lr=lr)
  batches = Batches(X_train, Y_train, batch_size, seed, crop)

  @TinyJit
  def step(x: Tensor, y: Tensor) -> tuple[Tensor, Tensor]:
    with Tensor.train():
      opt.zero_grad()
      x = normalize(x)
      logits = model(random_flip(x) if flip else x)
      loss = logits.sparse_categorical_crossentropy(y)
      acc = (logits.argmax(-1) == y).float().mean()
      loss.backward()
      Tensor.realize_all(loss, acc, *opt.schedule_step())
      return loss, acc

  print(f"training the CIFAR-10 CNN ({X_train.shape[0]} images) on {Device.DEFAULT}, {steps} steps of {batch_size}",
        file=sys.stderr)
  r = train_loop(step, batches, steps, lambda: evaluate(model, X_test, Y_test), eval_every)
  test_acc = evaluate(model, X_test, Y_test)
  result = {"dataset": "cifar10", "device": Device.DEFAULT, "steps": steps, "batch_size": batch_size, "width": width,
            "test_accuracy": test_acc, **r, "kernels": GlobalCounters.kernel_count}
  print(f"cifar10: test accuracy {test_acc * 100:.2f}% after {steps} steps on {Device.DEFAULT}; "
        f"{r['steps_per_second']:.2f} steps/s after warm-up; {r['train_seconds']:.1f} s of training")
  return result

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--steps", type=int, default=100)
  ap.add_argument("--batch-size", type=int, default=128)
  ap.add_argument("--lr", type=float, default=0.001)
  ap.add_argument("--folder", default=None, help="folder with cifar-10-batches-py (or -bin); default: see datasets.cifar10")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--eval-every", type=int, default=0)
  ap.add_argument("--width", type=float, default=1.0, help="scale the channel counts (0.25: a quick, narrow model)")
  a = ap.parse_args()
  train(a.folder, a.steps, a.batch_size, a.lr, a.seed, a.eval_every, width=a.width)
