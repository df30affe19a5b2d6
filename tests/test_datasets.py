"""Dataset loaders (tinyweb.nn.datasets): IDX parsing, folder/env/cache lookup, downloads (from file:// mirrors, and
failing offline), CIFAR-10 in pickle and binary form with a restricted unpickler, and the Debian Fashion-MNIST."""
import collections, gzip, io, os, pickle, struct, sys, tarfile
import numpy as np
import pytest
from tinyweb import dtypes, Context
from tinyweb.nn import datasets
from tinyweb.nn.datasets import parse_idx, load_idx, mnist, fashion_mnist, cifar10, IDX_FILES, CIFAR_BATCHES
from tinyweb.nn.state import FormatError

IDX_CODES = {"B": 0x08, "b": 0x09, "h": 0x0B, "i": 0x0C, "f": 0x0D, "d": 0x0E}

def idx_bytes(values, shape, fmt="B") -> bytes:
  return struct.pack(f">BBBB{len(shape)}I", 0, 0, IDX_CODES[fmt], len(shape), *shape) + struct.pack(f">{len(values)}{fmt}", *values)

@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
  """No test sees the user's environment, cache or system folders, nor the network."""
  for env in ("TINYWEB_MNIST_DIR", "TINYWEB_FASHION_MNIST_DIR", "TINYWEB_CIFAR10_DIR"): monkeypatch.delenv(env, raising=False)
  monkeypatch.setenv("TINYWEB_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.setattr(datasets, "FASHION_MNIST_SYSTEM_DIRS", [str(tmp_path / "no-system-dir")])
  for urls in ("MNIST_URLS", "FASHION_MNIST_URLS", "CIFAR10_URLS"): monkeypatch.setattr(datasets, urls, [])

# ---------------------------------------------------------------------------------------------------------------------
# IDX parsing

@pytest.mark.parametrize("fmt", ["B", "b", "h", "i", "f", "d"])
@pytest.mark.parametrize("gz", [False, True])
def test_idx_values(tmp_path, fmt, gz):
  shape = (2, 3, 4)
  vals = {"B": [i * 9 % 256 for i in range(24)], "b": [i * 11 % 256 - 128 for i in range(24)],
          "h": [i * 2600 - 30000 for i in range(24)], "i": [i * 178956970 - 2**31 for i in range(24)],
          "f": [i * 0.375 - 4.5 for i in range(24)], "d": [i / 7 - 1.5 for i in range(24)]}[fmt]
  raw = idx_bytes(vals, shape, fmt)
  path = tmp_path / ("x.idx.gz" if gz else "x.idx")
  path.write_bytes(gzip.compress(raw) if gz else raw)
  want = np.array(vals, dtype=np.dtype(fmt).newbyteorder("=")).reshape(shape)
  for t in (load_idx(str(path)), parse_idx(path.read_bytes())):
    assert t.shape == shape and t.dtype.name == want.dtype.name
    np.testing.assert_array_equal(t.numpy(), want)

def test_idx_scalar_and_empty():
  assert parse_idx(idx_bytes([7], (1,))).tolist() == [7]
  assert parse_idx(idx_bytes([], (0, 28, 28))).shape == (0, 28, 28)

@pytest.mark.parametrize("data, match", [
  (b"\x01\x00\x08\x01" + b"\0\0\0\1" + b"\5", "not an IDX file: it starts with 01 00 08 01"),
  (b"", "not an IDX file"),
  (b"\0\0\x0A\x01" + b"\0\0\0\1" + b"\5", "unknown IDX element type 0x0a"),
  (b"\0\0\x08\x03\0\0\0\2", "truncated IDX header: 3 dimensions need 16 bytes, got 8"),
  (idx_bytes(list(range(6)), (2, 3))[:-1], r"truncated IDX data: shape \(2, 3\) of uint8 needs 18 bytes .* got 17"),
  (idx_bytes(list(range(6)), (2, 3), "f")[:-2], r"shape \(2, 3\) of float32 needs 36 bytes \(12 header \+ 24 values\), got 34"),
  (idx_bytes(list(range(6)), (2, 3)) + b"x", "trailing bytes in IDX data"),
])
def test_idx_errors(data, match):
  with pytest.raises(FormatError, match=match): parse_idx(data)
  with pytest.raises(FormatError, match=match): parse_idx(gzip.compress(data))   # the same checks on the inflated contents

def test_idx_errors_name_the_file(tmp_path):
  trunc = tmp_path / "trunc-idx1-ubyte"
  trunc.write_bytes(idx_bytes([1, 2, 3], (3,))[:-1])
  with pytest.raises(FormatError, match=f"{trunc}: truncated IDX data"): load_idx(str(trunc))
  good = gzip.compress(idx_bytes(list(range(100)), (100,)))
  for name, data in (("garbage.gz", b"\x1f\x8b\x08\x00garbage"), ("cut.gz", good[:len(good) // 2]), ("notgz.gz", b"plain")):
    (tmp_path / name).write_bytes(data)
    with pytest.raises(FormatError, match=f"{tmp_path / name}: corrupt gzip data"): load_idx(str(tmp_path / name))

# ---------------------------------------------------------------------------------------------------------------------
# MNIST-style folders: lookup order, download into the cache, offline errors

def write_mnist(folder, fill: int, gz=True, n=(3, 2)):
  """A tiny MNIST-format set: image i of a split is all `fill + i`, its label is (fill + i) % 10."""
  os.makedirs(folder, exist_ok=True)
  for split, count in zip(("train", "t10k"), n):
    for stem, (vals, shape) in ((f"{split}-images-idx3-ubyte", ([fill + i for i in range(count) for _ in range(784)], (count, 28, 28))),
                                (f"{split}-labels-idx1-ubyte", ([(fill + i) % 10 for i in range(count)], (count,)))):
      raw = idx_bytes(vals, shape)
      with open(os.path.join(folder, stem + (".gz" if gz else "")), "wb") as f: f.write(gzip.compress(raw) if gz else raw)

def fill_of(split) -> int: return split[0][0, 0, 0, 0].item()

def test_mnist_shapes_and_values(tmp_path):
  write_mnist(tmp_path / "m", 40, n=(3, 2))
  X, Y, Xt, Yt = mnist(folder=str(tmp_path / "m"))
  assert (X.shape, Y.shape, Xt.shape, Yt.shape) == ((3, 1, 28, 28), (3,), (2, 1, 28, 28), (2,))
  assert X.dtype == Y.dtype == Xt.dtype == Yt.dtype == dtypes.uint8
  assert X.numpy().reshape(3, -1).max(1).tolist() == [40, 41, 42] and Y.tolist() == [0, 1, 2] and Yt.tolist() == [0, 1]

def test_lookup_order(tmp_path, monkeypatch):
  write_mnist(tmp_path / "arg", 10, gz=True)
  write_mnist(tmp_path / "env", 20, gz=False)
  write_mnist(tmp_path / "cache" / "datasets" / "mnist", 30)
  write_mnist(tmp_path / "cache" / "datasets" / "fashion-mnist", 50)
  write_mnist(tmp_path / "system", 60)
  (tmp_path / "partial").mkdir()
  (tmp_path / "partial" / IDX_FILES[0]).write_bytes(b"never read")
  monkeypatch.setenv("TINYWEB_MNIST_DIR", str(tmp_path / "env"))
  assert fill_of(mnist(folder=str(tmp_path / "arg"))) == 10                  # folder argument first
  assert fill_of(mnist()) == 20                                       # then the environment variable
  assert fill_of(mnist(folder=str(tmp_path / "partial"))) == 20              # an incomplete folder is passed over
  monkeypatch.delenv("TINYWEB_MNIST_DIR")
  assert fill_of(mnist()) == 30                                       # then the cache
  monkeypatch.setattr(datasets, "FASHION_MNIST_SYSTEM_DIRS", [str(tmp_path / "nothing"), str(tmp_path / "system")])
  assert fill_of(fashion_mnist()) == 60                               # Fashion-MNIST: the system folder before the cache
  monkeypatch.setattr(datasets, "FASHION_MNIST_SYSTEM_DIRS", [])
  assert fill_of(fashion_mnist()) == 50
  monkeypatch.setenv("TINYWEB_FASHION_MNIST_DIR", str(tmp_path / "env"))
  assert fill_of(fashion_mnist()) == 20

def test_mnist_wrong_contents(tmp_path):
  write_mnist(tmp_path / "m", 0)
  (tmp_path / "m" / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(idx_bytes([1, 2, 3], (3,))))
  with pytest.raises(FormatError, match="2 images but 3 labels"): mnist(folder=str(tmp_path / "m"))
  (tmp_path / "m" / "train-images-idx3-ubyte.gz").write_bytes(gzip.compress(idx_bytes([0] * 12, (3, 2, 2))))
  with pytest.raises(FormatError, match=r"train-images-idx3-ubyte.gz: expected uint8 images of shape \(N, 28, 28\), got uint8 of shape \(3, 2, 2\)"):
    mnist(folder=str(tmp_path / "m"))

def test_download_to_cache(tmp_path, monkeypatch, capsys):
  write_mnist(tmp_path / "mirror", 70)
  monkeypatch.setattr(datasets, "DOWNLOAD_TIMEOUT", 2.0)
  monkeypatch.setattr(datasets, "MNIST_URLS", ["http://127.0.0.1:1/mnist/", (tmp_path / "mirror").as_uri() + "/"])
  with Context(PROGRESS=1): assert fill_of(mnist()) == 70   # (progress drawn: stderr is no terminal here)
  cache = tmp_path / "cache" / "datasets" / "mnist"
  assert sorted(os.listdir(cache)) == sorted(s + ".gz" for s in IDX_FILES)   # complete files only, no temporaries
  assert "train-images-idx3-ubyte.gz: 100%|" in capsys.readouterr().err      # a progress bar
  monkeypatch.setattr(datasets, "MNIST_URLS", [])
  assert fill_of(mnist()) == 70                                            # now from the cache

@pytest.mark.parametrize("loader, name, urls, env", [
  (mnist, "mnist", "MNIST_URLS", "TINYWEB_MNIST_DIR"),
  (fashion_mnist, "fashion-mnist", "FASHION_MNIST_URLS", "TINYWEB_FASHION_MNIST_DIR")])
def test_offline_error(tmp_path, monkeypatch, loader, name, urls, env):
  mirrors = ["http://192.0.2.1/datasets/", "http://127.0.0.1:1/datasets/"]   # unroutable (TEST-NET-1), refused
  monkeypatch.setattr(datasets, urls, mirrors)
  monkeypatch.setattr(datasets, "DOWNLOAD_TIMEOUT", 0.5)
  (tmp_path / "empty").mkdir()
  with pytest.raises(RuntimeError) as e: loader(folder=str(tmp_path / "empty"))
  msg = str(e.value)
  assert "could not find or download train-images-idx3-ubyte.gz" in msg
  assert f"the folder argument {tmp_path / 'empty'}: missing train-images-idx3-ubyte" in msg and f"${env}: not set" in msg
  assert f"the cache {tmp_path / 'cache'}" in msg
  for m in mirrors: assert f"{m}train-images-idx3-ubyte.gz: URLError" in msg
  if loader is fashion_mnist: assert f"system folder: {tmp_path / 'no-system-dir'} does not exist" in msg
  assert os.listdir(tmp_path / "cache" / "datasets" / name) == []   # no partial files left behind

# ---------------------------------------------------------------------------------------------------------------------
# Fashion-MNIST from the Debian package

@pytest.mark.skipif(not os.path.isdir("/usr/share/datasets/fashion-mnist"), reason="apt package dataset-fashion-mnist not installed")
def test_fashion_mnist_debian(monkeypatch):
  monkeypatch.setattr(datasets, "FASHION_MNIST_SYSTEM_DIRS", ["/usr/share/datasets/fashion-mnist"])
  X, Y, Xt, Yt = fashion_mnist()
  assert (X.shape, Y.shape, Xt.shape, Yt.shape) == ((60000, 1, 28, 28), (60000,), (10000, 1, 28, 28), (10000,))
  assert X.dtype == Y.dtype == Xt.dtype == Yt.dtype == dtypes.uint8
  assert collections.Counter(Y.tolist()) == {c: 6000 for c in range(10)}
  assert collections.Counter(Yt.tolist()) == {c: 1000 for c in range(10)}
  assert Y[:5].tolist() == [9, 0, 0, 3, 0] and Yt[:5].tolist() == [9, 2, 1, 1, 6]   # ankle boot, T-shirt, ...
  with gzip.open("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz") as f:   # against numpy's reading
    np.testing.assert_array_equal(Xt.numpy(), np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28))

# ---------------------------------------------------------------------------------------------------------------------
# CIFAR-10

def cifar_batches(n=3, seed=0):
  rng = np.random.default_rng(seed)
  return {b: (rng.integers(0, 256, (n, 3072), dtype=np.uint8), [int(v) for v in rng.integers(0, 10, n)]) for b in CIFAR_BATCHES}

def write_cifar_py(folder, batches, protocol=2, fortran=False):
  os.makedirs(folder, exist_ok=True)
  for name, (data, labels) in batches.items():
    with open(os.path.join(folder, name), "wb") as f:
      pickle.dump({b"batch_label": name.encode(), b"labels": labels, b"data": np.asfortranarray(data) if fortran else data,
                   b"filenames": [b"img%d.png" % i for i in range(len(labels))]}, f, protocol=protocol)

def check_cifar(out, batches):
  X, Y, Xt, Yt = out
  train = [batches[b] for b in CIFAR_BATCHES[:5]]
  assert X.dtype == dtypes.uint8 and Y.dtype == dtypes.int32 and X.shape == (15, 3, 32, 32) and Xt.shape == (3, 3, 32, 32)
  np.testing.assert_array_equal(X.numpy(), np.concatenate([d for d, _ in train]).reshape(-1, 3, 32, 32))
  np.testing.assert_array_equal(Xt.numpy(), batches["test_batch"][0].reshape(-1, 3, 32, 32))
  assert Y.tolist() == [v for _, ls in train for v in ls] and Yt.tolist() == batches["test_batch"][1]

@pytest.mark.parametrize("protocol, fortran", [(0, False), (2, False), (4, False), (5, False), (2, True), (5, True)])
def test_cifar_pickle(tmp_path, protocol, fortran):
  batches = cifar_batches()
  write_cifar_py(tmp_path / "c" / "cifar-10-batches-py", batches, protocol, fortran)
  check_cifar(cifar10(str(tmp_path / "c")), batches)

def py2_pickle(data: np.ndarray, labels: list[int]) -> bytes:
  """{'data': data, 'labels': labels} pickled as Python 2's cPickle did for the real CIFAR-10 files (protocol 2, str
  strings, numpy.core), which Python 3 can no longer write."""
  def s(b: bytes) -> bytes: return b"U" + bytes([len(b)]) + b if len(b) < 256 else b"T" + struct.pack("<I", len(b)) + b
  n = data.shape[0]
  arr = (b"cnumpy.core.multiarray\n_reconstruct\ncnumpy\nndarray\nK\x00\x85" + s(b"b") + b"\x87R"
         + b"(K\x01M" + struct.pack("<H", n) + b"M\x00\x0c\x86"                                  # version, shape (n, 3072)
         + b"cnumpy\ndtype\n" + s(b"u1") + b"K\x00K\x01\x87R(K\x03" + s(b"|") + b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb"
         + b"\x89" + s(data.tobytes()) + b"tb")
  return (b"\x80\x02}(" + s(b"data") + arr + s(b"labels") + b"](" + b"".join(b"K" + bytes([v]) for v in labels) + b"eu.")

def test_cifar_python2_pickle(tmp_path):
  batches = cifar_batches(seed=4)
  (tmp_path / "c").mkdir()
  for name, (data, labels) in batches.items(): (tmp_path / "c" / name).write_bytes(py2_pickle(data, labels))
  d = pickle.loads((tmp_path / "c" / "test_batch").read_bytes(), encoding="bytes")   # the helper is right: numpy reads it
  np.testing.assert_array_equal(d[b"data"], batches["test_batch"][0])
  assert d[b"labels"] == batches["test_batch"][1]
  check_cifar(cifar10(str(tmp_path / "c")), batches)

def test_cifar_pickle_without_numpy(tmp_path, monkeypatch):
  batches = cifar_batches(seed=1)
  write_cifar_py(tmp_path / "c", batches)
  monkeypatch.setenv("TINYWEB_CIFAR10_DIR", str(tmp_path / "c"))
  with monkeypatch.context() as m:
    m.setitem(sys.modules, "numpy", None)   # `import numpy` now fails, as in Pyodide without numpy
    out = cifar10()
  check_cifar(out, batches)

def test_cifar_binary(tmp_path):
  batches = cifar_batches(seed=2)
  (tmp_path / "c" / "cifar-10-batches-bin").mkdir(parents=True)
  for name, (data, labels) in batches.items():
    (tmp_path / "c" / "cifar-10-batches-bin" / f"{name}.bin").write_bytes(b"".join(bytes([l]) + d.tobytes() for d, l in zip(data, labels)))
  check_cifar(cifar10(str(tmp_path / "c")), batches)
  (tmp_path / "c" / "cifar-10-batches-bin" / "test_batch.bin").write_bytes(b"\0" * 3074)
  with pytest.raises(FormatError, match="test_batch.bin: not a CIFAR-10 binary batch: 3074 bytes"): cifar10(str(tmp_path / "c"))

class Evil:
  def __init__(self, marker): self.marker = marker
  def __reduce__(self): return (os.system, (f"touch {self.marker}",))

def test_cifar_malicious_pickle_refused(tmp_path):
  write_cifar_py(tmp_path / "c", cifar_batches())
  marker = tmp_path / "pwned"
  (tmp_path / "c" / "data_batch_3").write_bytes(pickle.dumps({b"data": Evil(marker), b"labels": []}, protocol=2))
  with pytest.raises(FormatError, match=r"data_batch_3: refusing to load (posix|nt|os)\.system"): cifar10(str(tmp_path / "c"))
  assert not marker.exists()
  (tmp_path / "c" / "data_batch_3").write_bytes(pickle.dumps({b"data": np.array([object()]), b"labels": []}))
  with pytest.raises(FormatError, match="data_batch_3: unsupported numpy dtype .O8."): cifar10(str(tmp_path / "c"))
  (tmp_path / "c" / "data_batch_3").write_bytes(pickle.dumps({b"data": np.zeros((2, 5), np.uint8), b"labels": [1, 2]}))
  with pytest.raises(FormatError, match=r"data_batch_3: not a CIFAR-10 batch"): cifar10(str(tmp_path / "c"))

def test_cifar_download_and_extract(tmp_path, monkeypatch):
  batches = cifar_batches(seed=3)
  write_cifar_py(tmp_path / "src" / "cifar-10-batches-py", batches)
  with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as tf: tf.add(tmp_path / "src" / "cifar-10-batches-py", "cifar-10-batches-py")
  monkeypatch.setattr(datasets, "CIFAR10_URLS", [(tmp_path / "cifar-10-python.tar.gz").as_uri()])
  check_cifar(cifar10(), batches)
  cache = tmp_path / "cache" / "datasets" / "cifar10"
  assert os.listdir(cache) == ["cifar-10-batches-py"]
  monkeypatch.setattr(datasets, "CIFAR10_URLS", [])
  check_cifar(cifar10(), batches)

@pytest.mark.parametrize("member", ["../evil.txt", "/tmp/evil.txt", "a/../../evil.txt", "link"])
def test_safe_extract_refuses(tmp_path, member):
  buf = io.BytesIO()
  with tarfile.open(fileobj=buf, mode="w:gz") as tf:
    info = tarfile.TarInfo(member)
    if member == "link": info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
    else: info.size = 4
    tf.addfile(info, io.BytesIO(b"evil") if member != "link" else None)
  (tmp_path / "x.tar.gz").write_bytes(buf.getvalue())
  with pytest.raises(ValueError, match="refusing unsafe archive member"): datasets.safe_extract(str(tmp_path / "x.tar.gz"), str(tmp_path / "out"))
  assert not (tmp_path / "evil.txt").exists() and os.listdir(tmp_path / "out") == []

def test_safe_extract_bounds_size_and_members(tmp_path):
  """A few KB of gzip that inflate to many MB (or to many files) are refused before they reach the disk."""
  def archive(sizes):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
      for i, size in enumerate(sizes):
        info = tarfile.TarInfo(f"f{i}")
        info.size = size
        tf.addfile(info, io.BytesIO(bytes(size)))
    (tmp_path / "x.tar.gz").write_bytes(buf.getvalue())
    return str(tmp_path / "x.tar.gz")
  with pytest.raises(FormatError, match="more than 5 members or 1048576 bytes"):
    datasets.safe_extract(archive([600_000, 600_000]), str(tmp_path / "out"), max_bytes=1 << 20, max_members=5)
  assert os.listdir(tmp_path / "out") == []
  with pytest.raises(FormatError, match="more than 5 members"):
    datasets.safe_extract(archive([1] * 6), str(tmp_path / "out"), max_bytes=1 << 20, max_members=5)
  assert os.listdir(tmp_path / "out") == []
  datasets.safe_extract(archive([600_000, 1000]), str(tmp_path / "out"), max_bytes=1 << 20, max_members=5)
  assert sorted(os.listdir(tmp_path / "out")) == ["f0", "f1"] and os.path.getsize(tmp_path / "out" / "f0") == 600_000
