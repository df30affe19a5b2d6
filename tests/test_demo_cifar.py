"""The CIFAR-10 demo end to end on a small synthetic data set written in the real python-pickle format."""
import os, pickle, sys
import numpy as np
import pytest
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # demos/ is not an installed package
from tinyweb import Tensor, dtypes
from tinyweb.nn import datasets
from demos.cifar.train import train, Batches, Model, random_flip, normalize

N_PER_FILE = 40
WIDTH, BATCH = 0.25, 16   # a narrow copy of the model (8-16-32-32 channels): the full one takes seconds a step on 2 cores

def write_synthetic_cifar(root, n=N_PER_FILE, seed=0):
  """cifar-10-batches-py/data_batch_1..5 and test_batch: dicts with b"data" uint8 (n, 3072) and b"labels" (a list),
  like the real files. Class k is an image of its own color (one of 10) with a
  horizontal band of the color of class k+3, plus noise: easy to learn, and still recognizable after crops and flips."""
  rng = np.random.default_rng(seed)
  colors = np.array([[1, 0, 0], [0, 1, 0], [0, 0, 1], [1, 1, 0], [1, 0, 1], [0, 1, 1], [1, 1, 1], [0, 0, 0],
                     [.5, .5, .5], [1, .5, 0]]) * 200 + 28
  d = root / "cifar-10-batches-py"
  d.mkdir(parents=True)
  for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
    labels = rng.integers(0, 10, n)
    img = np.broadcast_to(colors[labels][:, :, None, None], (n, 3, 32, 32)).copy()
    img[:, :, 12:20, :] = colors[(labels + 3) % 10][:, :, None, None]
    img += rng.normal(0, 20, img.shape)
    data = np.clip(img, 0, 255).astype(np.uint8).reshape(n, 3072)
    with open(d / name, "wb") as f:
      pickle.dump({b"batch_label": name.encode(), b"labels": labels.tolist(), b"data": data,
                   b"filenames": [b"%d.png" % i for i in range(n)]}, f)
  return d

@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory): return str(write_synthetic_cifar(tmp_path_factory.mktemp("cifar")))

def test_loader_and_augmentation_shapes(cifar_dir):
  X, Y, Xt, Yt = datasets.cifar10(cifar_dir)
  assert (X.shape, X.dtype, Y.shape, Y.dtype) == ((5 * N_PER_FILE, 3, 32, 32), dtypes.uint8, (5 * N_PER_FILE,), dtypes.int32)
  assert (Xt.shape, Yt.shape) == ((N_PER_FILE, 3, 32, 32), (N_PER_FILE,))
  b = Batches(X, Y, BATCH, seed=1)
  x, y = b()
  assert (x.shape, x.dtype, y.shape, y.dtype) == ((BATCH, 3, 32, 32), dtypes.uint8, (BATCH,), dtypes.int32)
  assert set(y.tolist()) <= set(range(10))
  # the crop is a shift with zero fill: against numpy
  img = X.numpy()[5]
  for dy, dx in [(0, 0), (3, -2), (-4, 4)]:
    want = np.zeros_like(img)
    want[:, max(0, -dy):32 - max(0, dy), max(0, -dx):32 - max(0, dx)] = img[:, max(0, dy):32 + min(0, dy), max(0, dx):32 + min(0, dx)]
    np.testing.assert_array_equal(np.frombuffer(b.crop(5, dy, dx), np.uint8).reshape(3, 32, 32), want)
  # flip: every image is either itself or its mirror image, and with 64 images both happen
  xs = Tensor.rand(64, 3, 32, 32)
  f, xn = random_flip(xs).numpy(), xs.numpy()
  same, mirrored = [np.array_equal(f[i], xn[i]) for i in range(64)], [np.array_equal(f[i], xn[i, :, :, ::-1]) for i in range(64)]
  assert all(s or m for s, m in zip(same, mirrored)) and any(same) and any(mirrored)
  z = normalize(x)
  assert z.shape == (BATCH, 3, 32, 32) and z.dtype == dtypes.float32
  assert Model(WIDTH)(z).shape == (BATCH, 10)

def test_train_learns_synthetic_cifar(cifar_dir):
  r = train(folder=cifar_dir, steps=30, batch_size=BATCH, lr=0.003, width=WIDTH)
  assert r["steps"] == 30 and r["steps_per_second"] > 0
  assert r["test_accuracy"] > 0.7, r   # chance is 0.1; the classes are colors (observed: 1.0)
