"""Datasets as tensors: MNIST and Fashion-MNIST (IDX files), CIFAR-10 (python pickles or binary records).

Each loader returns `(X_train, Y_train, X_test, Y_test)`, like tinygrad's:
  mnist, fashion_mnist:  X uint8 (N, 1, 28, 28), pixels 0..255;      Y uint8 (N,), classes 0..9;  N = 60000 / 10000
  cifar10:               X uint8 (N, 3, 32, 32), channels R, G, B;   Y int32 (N,), classes 0..9;  N = 50000 / 10000

The files are looked for, in order, in: the `folder` argument; a folder named by an environment variable
(TINYWEB_MNIST_DIR, TINYWEB_FASHION_MNIST_DIR, TINYWEB_CIFAR10_DIR); for Fashion-MNIST the folder of the Debian package
dataset-fashion-mnist; the cache ($TINYWEB_CACHE_DIR/datasets/<name>, default ~/.cache/tinyweb/datasets/<name>).
A folder that lacks some files is passed over. If none has them, they are downloaded from the mirrors below (module
constants: change them to use others) into the cache. IDX files may be gzipped or not.

Pure Python, no numpy needed (so it runs in Pyodide): CIFAR's pickles hold numpy arrays, which a restricted unpickler
reads into plain shape/dtype/bytes records. It calls nothing but those few reconstructors, so a pickle can't run code.
"""
from __future__ import annotations
import gzip, os, pickle, shutil, struct, sys, tarfile, tempfile, urllib.request, zlib
from typing import Optional
from tinyweb.tensor import Tensor
from tinyweb.dtype import DType, dtypes
from tinyweb.helpers import cache_dir, prod

MNIST_URLS = ["https://storage.googleapis.com/cvdf-datasets/mnist/", "https://ossci-datasets.s3.amazonaws.com/mnist/"]
FASHION_MNIST_URLS = ["http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
                      "https://github.com/zalandoresearch/fashion-mnist/raw/master/data/fashion/"]
CIFAR10_URLS = ["https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"]
FASHION_MNIST_SYSTEM_DIRS = ["/usr/share/datasets/fashion-mnist"]   # apt install dataset-fashion-mnist
DOWNLOAD_TIMEOUT = 30.0   # seconds a mirror may stay silent before it counts as failed

IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CIFAR_BATCHES = tuple(f"data_batch_{i}" for i in range(1, 6)) + ("test_batch",)

# ---------------------------------------------------------------------------------------------------------------------
# IDX files (http://yann.lecun.com/exdb/mnist/): magic 00 00 <type> <ndim>, ndim big-endian uint32 sizes, the values

IDX_TYPES = {0x08: dtypes.uint8, 0x09: dtypes.int8, 0x0B: dtypes.int16, 0x0C: dtypes.int32, 0x0D: dtypes.float32,
             0x0E: dtypes.float64}

def _to_native(data, itemsize: int, byteorder: str):
  """`data` (elements of `itemsize` bytes in `byteorder`, "big" or "little") in this machine's byte order."""
  if itemsize == 1 or byteorder == sys.byteorder: return data
  src, out = bytes(data), bytearray(len(data))
  for k in range(itemsize): out[k::itemsize] = src[itemsize - 1 - k::itemsize]
  return out

def _gunzip(data, name: str) -> bytes:
  try: return gzip.decompress(data)
  except (OSError, EOFError, zlib.error) as e: raise ValueError(f"{name}: corrupt gzip data ({type(e).__name__}: {e})") from e

def _parse_idx(data, name: str) -> tuple[DType, tuple[int, ...], object]:
  """(dtype, shape, values in native byte order) of the IDX file `data`; ValueError naming `name` if malformed."""
  mv = memoryview(data).cast("B")
  if len(mv) < 4 or mv[0] != 0 or mv[1] != 0:
    raise ValueError(f"{name}: not an IDX file: it starts with {bytes(mv[:4]).hex(' ') or 'nothing'}, "
                     f"an IDX file starts with 00 00 <type> <ndim>")
  if mv[2] not in IDX_TYPES:
    raise ValueError(f"{name}: unknown IDX element type {mv[2]:#04x}; known: "
                     + ", ".join(f"{t:#04x} {dt.name}" for t, dt in IDX_TYPES.items()))
  dt, header = IDX_TYPES[mv[2]], 4 + 4 * mv[3]
  if len(mv) < header: raise ValueError(f"{name}: truncated IDX header: {mv[3]} dimensions need {header} bytes, got {len(mv)}")
  shape = struct.unpack(f">{mv[3]}I", mv[4:header])
  expected = header + prod(shape) * dt.itemsize
  if len(mv) != expected:
    raise ValueError(f"{name}: {'truncated' if len(mv) < expected else 'trailing bytes in'} IDX data: shape {shape} of "
                     f"{dt.name} needs {expected} bytes ({header} header + {expected - header} values), got {len(mv)}")
  return dt, shape, _to_native(mv[header:], dt.itemsize, "big")

def parse_idx(data: bytes, device: Optional[str] = None, name: str = "IDX data") -> Tensor:
  """The tensor stored in IDX file contents `data` (gzipped or not), with the IDX element type and shape."""
  if bytes(data[:2]) == b"\x1f\x8b": data = _gunzip(data, name)
  dt, shape, values = _parse_idx(data, name)
  return Tensor.frombuffer(values, dt, shape, device)

def _read(path: str) -> bytes:
  with open(path, "rb") as f: data = f.read()
  return _gunzip(data, path) if path.endswith(".gz") or data[:2] == b"\x1f\x8b" else data

def load_idx(path: str, device: Optional[str] = None) -> Tensor:
  """The tensor in the IDX file at `path` (.gz or not); errors name the file."""
  return parse_idx(_read(path), device, name=path)

# ---------------------------------------------------------------------------------------------------------------------
# finding and downloading files

class _Progress:
  """A download progress bar: tqdm if installed, else one stderr line that is rewritten."""
  def __init__(self, total: int, desc: str):
    self.total, self.desc, self.done = total, desc, 0
    try:
      from tqdm import tqdm
      self.bar = tqdm(total=total or None, unit="B", unit_scale=True, desc=desc)
    except ImportError: self.bar = None
  def update(self, n: int):
    self.done += n
    if self.bar is not None: self.bar.update(n)
    else: print(f"\r{self.desc}: {self.done / 1e6:.1f}" + (f"/{self.total / 1e6:.1f}" if self.total else "") + " MB",
                end="", file=sys.stderr, flush=True)
  def close(self):
    if self.bar is not None: self.bar.close()
    elif self.done: print(file=sys.stderr)

def _fetch(url: str, dest: str):
  """Download `url` to `dest` atomically: into a temporary file next to it, renamed when complete."""
  with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as r:
    total = int(r.headers.get("Content-Length") or 0)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=os.path.basename(dest) + ".", suffix=".part")
    bar = _Progress(total, os.path.basename(dest))
    try:
      with os.fdopen(fd, "wb") as f:
        while chunk := r.read(1 << 20): f.write(chunk); bar.update(len(chunk))
      if total and bar.done != total: raise OSError(f"incomplete download: {bar.done} of {total} bytes")
      os.replace(tmp, dest)
    finally:
      bar.close()
      if os.path.exists(tmp): os.unlink(tmp)

def _download(name: str, urls: list[str], dest: str, looked: list[str]) -> str:
  os.makedirs(os.path.dirname(dest), exist_ok=True)
  errors = []
  for url in urls:
    try:
      _fetch(url, dest)
      return dest
    except Exception as e: errors.append(f"  {url}: {type(e).__name__}: {e}")
  raise RuntimeError(f"{name}: could not find or download {os.path.basename(dest)}.\nLooked in:\n" + "\n".join(looked)
                     + "\nTried to download:\n" + ("\n".join(errors) or "  (no mirrors configured)")
                     + "\nPut the files in one of these folders (or pass folder=...), or check the network.")

def _places(folder, env: str, system=()) -> list[tuple[str, Optional[str]]]:
  return [("the folder argument", folder), (f"${env}", os.getenv(env)), *(("system folder", d) for d in system)]

def _find_idx(d: str, stem: str) -> Optional[str]:
  return next((p for p in (os.path.join(d, stem + ".gz"), os.path.join(d, stem)) if os.path.isfile(p)), None)

def _idx_paths(name: str, folder, env: str, urls: list[str], system=()) -> list[str]:
  looked = []
  for what, d in _places(folder, env, system):
    if not d or not os.path.isdir(d): looked.append(f"  {what}: " + (f"{d} does not exist" if d else "not set")); continue
    paths = [_find_idx(d, s) for s in IDX_FILES]
    if all(paths): return paths
    looked.append(f"  {what} {d}: missing " + ", ".join(s for s, p in zip(IDX_FILES, paths) if not p))
  cache = os.path.join(cache_dir(), "datasets", name)
  looked.append(f"  the cache {cache}")
  return [_find_idx(cache, s) or _download(name, [u + s + ".gz" for u in urls], os.path.join(cache, s + ".gz"), looked)
          for s in IDX_FILES]

def _idx_dataset(name: str, folder, env: str, urls: list[str], device, system=()) -> tuple[Tensor, ...]:
  out = []
  for path, images in zip(_idx_paths(name, folder, env, urls, system), (True, False, True, False)):
    dt, shape, values = _parse_idx(_read(path), path)
    if dt != dtypes.uint8 or (shape[1:] != (28, 28) if images else len(shape) != 1):
      raise ValueError(f"{path}: expected uint8 {'images of shape (N, 28, 28)' if images else 'labels of shape (N,)'}, "
                       f"got {dt.name} of shape {shape}")
    out.append(Tensor.frombuffer(values, dt, (shape[0], 1, 28, 28) if images else shape, device))
  for x, y in (out[:2], out[2:]):
    if x.shape[0] != y.shape[0]: raise ValueError(f"{name}: {x.shape[0]} images but {y.shape[0]} labels")
  return tuple(out)

def mnist(folder: Optional[str] = None, device: Optional[str] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """MNIST digits: X uint8 (N, 1, 28, 28), Y uint8 (N,); 60000 train, 10000 test. Env: TINYWEB_MNIST_DIR."""
  return _idx_dataset("mnist", folder, "TINYWEB_MNIST_DIR", MNIST_URLS, device)

def fashion_mnist(folder: Optional[str] = None, device: Optional[str] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """Fashion-MNIST: X uint8 (N, 1, 28, 28), Y uint8 (N,); 60000 train, 10000 test. Env: TINYWEB_FASHION_MNIST_DIR;
  also found where the Debian package dataset-fashion-mnist puts it."""
  return _idx_dataset("fashion-mnist", folder, "TINYWEB_FASHION_MNIST_DIR", FASHION_MNIST_URLS, device,
                      FASHION_MNIST_SYSTEM_DIRS)

# ---------------------------------------------------------------------------------------------------------------------
# a restricted unpickler for numpy arrays, without numpy

def _str(x) -> str: return x.decode("latin1") if isinstance(x, (bytes, bytearray)) else x

class _NpDType:
  """What a pickled numpy.dtype says: kind, item size and byte order ('u1', 'i8', 'f4', ...)."""
  def __init__(self, spec, align=False, copy=False):
    spec = _str(spec)
    if not (isinstance(spec, str) and len(spec) >= 2 and spec[0] in "uifb" and spec[1:].isdigit()):
      raise pickle.UnpicklingError(f"unsupported numpy dtype {spec!r}")
    self.kind, self.itemsize, self.byteorder = spec[0], int(spec[1:]), "|"
  def __setstate__(self, state):
    if not isinstance(state, tuple) or len(state) < 2 or any(s is not None for s in state[2:5]):
      raise pickle.UnpicklingError(f"unsupported numpy dtype state {state!r} (structured and sub-array dtypes are not)")
    self.byteorder = _str(state[1])
  @property
  def dtype(self) -> DType:
    if self.kind == "b": return dtypes.bool
    return dtypes.from_name({"u": "uint", "i": "int", "f": "float"}[self.kind] + str(8 * self.itemsize))

class _NpArray:
  """What a pickled numpy.ndarray says: shape, dtype, raw bytes (C or Fortran order)."""
  def __init__(self, shape=(), dtype=None, data=b"", fortran=False): self.shape, self.npdtype, self.data, self.fortran = shape, dtype, data, fortran
  def __setstate__(self, state):
    if not isinstance(state, tuple) or len(state) not in (4, 5): raise pickle.UnpicklingError("malformed numpy array state")
    shape, npdtype, fortran, data = state[-4:]
    if isinstance(data, str): data = data.encode("latin1")   # (pickles read with encoding="latin1")
    if not isinstance(npdtype, _NpDType) or not isinstance(data, (bytes, bytearray)):
      raise pickle.UnpicklingError("unsupported numpy array (object arrays are not)")
    self.shape, self.npdtype, self.data, self.fortran = tuple(shape), npdtype, data, bool(fortran)
  def tensor(self, device=None) -> Tensor:
    dt, n = self.npdtype.dtype, prod(self.shape)
    if len(self.data) != n * dt.itemsize: raise ValueError(f"numpy array of shape {self.shape} {dt.name} has {len(self.data)} bytes")
    data = bytearray(_to_native(self.data, dt.itemsize, {">": "big", "<": "little"}.get(self.npdtype.byteorder, sys.byteorder)))
    if not self.fortran: return Tensor.frombuffer(data, dt, self.shape, device)
    return Tensor.frombuffer(data, dt, self.shape[::-1], device).permute(*range(len(self.shape) - 1, -1, -1))
  def tolist(self) -> list: return self.tensor().tolist()

def _reconstruct(cls, shape, typecode):
  if cls is not _NpArray: raise pickle.UnpicklingError(f"numpy _reconstruct of {cls!r} refused")
  return _NpArray()

def _frombuffer(buf, dtype, shape, order="C"):   # numpy's pickle protocol 5 form
  if not isinstance(dtype, _NpDType): raise pickle.UnpicklingError("numpy _frombuffer without a dtype")
  return _NpArray(tuple(shape), dtype, bytes(buf), _str(order) == "F")

def _scalar(dtype, data):
  if not isinstance(dtype, _NpDType) or not isinstance(data, (bytes, str)): raise pickle.UnpicklingError("malformed numpy scalar")
  data = data.encode("latin1") if isinstance(data, str) else data
  return struct.unpack({">": ">", "<": "<"}.get(dtype.byteorder, "=") + dtype.dtype.fmt, data)[0]

def _codecs_encode(s, encoding="utf-8"):   # how protocol 2 pickles bytes in Python 3
  if not isinstance(s, str) or encoding != "latin1": raise pickle.UnpicklingError("_codecs.encode is only allowed for latin1 strings")
  return s.encode("latin1")

_ALLOWED = {("numpy", "ndarray"): _NpArray, ("numpy", "dtype"): _NpDType, ("_codecs", "encode"): _codecs_encode}
for _m in ("numpy.core", "numpy._core"):
  _ALLOWED.update({(f"{_m}.multiarray", "_reconstruct"): _reconstruct, (f"{_m}.multiarray", "scalar"): _scalar,
                   (f"{_m}.numeric", "_frombuffer"): _frombuffer})

class RestrictedUnpickler(pickle.Unpickler):
  """Loads plain containers, numbers, strings and numpy arrays (as `_NpArray`, with `.tensor()`); refuses any other
  global, so a pickle can't call arbitrary functions."""
  def find_class(self, module, name):
    if (module, name) in _ALLOWED: return _ALLOWED[(module, name)]
    raise pickle.UnpicklingError(f"refusing to load {module}.{name}: only numpy arrays and plain data are allowed")

# ---------------------------------------------------------------------------------------------------------------------
# CIFAR-10 (https://www.cs.toronto.edu/~kriz/cifar.html)

def _cifar_pickle_batch(path: str) -> tuple[bytes, list[int]]:
  try:
    with open(path, "rb") as f: d = RestrictedUnpickler(f, encoding="bytes").load()
  except pickle.UnpicklingError as e: raise pickle.UnpicklingError(f"{path}: {e}") from e
  except (EOFError, ValueError, TypeError, KeyError, IndexError, AttributeError) as e:
    raise ValueError(f"{path}: not a CIFAR-10 batch pickle ({type(e).__name__}: {e})") from e
  data, labels = (d.get(k, d.get(k.decode())) if isinstance(d, dict) else None for k in (b"data", b"labels"))
  if isinstance(labels, _NpArray): labels = labels.tolist()
  if not (isinstance(data, _NpArray) and data.npdtype.dtype == dtypes.uint8 and len(data.shape) == 2 and data.shape[1] == 3072
          and isinstance(labels, list) and len(labels) == data.shape[0]):
    raise ValueError(f"{path}: not a CIFAR-10 batch: expected a dict with b'data' uint8 (N, 3072) and N b'labels'")
  n = data.shape[0]
  return (b"".join(data.data[i::n] for i in range(n)) if data.fortran else bytes(data.data)), labels

def _cifar_bin_batch(path: str) -> tuple[bytes, list[int]]:
  with open(path, "rb") as f: raw = f.read()
  if len(raw) % 3073: raise ValueError(f"{path}: not a CIFAR-10 binary batch: {len(raw)} bytes is not a multiple of 3073 (1 label + 3072 pixels)")
  return b"".join(raw[i + 1:i + 3073] for i in range(0, len(raw), 3073)), list(raw[0::3073])

def _cifar_dir(d: str) -> Optional[tuple[str, str]]:
  """("py" or "bin", folder) if `d` or its cifar-10-batches-py/-bin subfolder holds all the CIFAR-10 batches."""
  for sub in ("", "cifar-10-batches-py", "cifar-10-batches-bin"):
    for kind, ext in (("py", ""), ("bin", ".bin")):
      if all(os.path.isfile(os.path.join(d, sub, b + ext)) for b in CIFAR_BATCHES): return kind, os.path.join(d, sub)
  return None

def safe_extract(tar_path: str, dest: str):
  """Extract the regular files and folders of a tar archive into `dest`. Refuses (ValueError) links, devices and
  names that would land outside `dest`. Extracts into a temporary folder first, then moves the top-level entries."""
  os.makedirs(dest, exist_ok=True)
  tmp = tempfile.mkdtemp(dir=dest, prefix=".extract.")
  try:
    with tarfile.open(tar_path, "r:*") as tf:
      for m in tf:
        parts = [p for p in m.name.replace("\\", "/").split("/") if p not in ("", ".")]
        if m.name.startswith(("/", "\\")) or ".." in parts or ":" in m.name or not (m.isfile() or m.isdir()):
          raise ValueError(f"{tar_path}: refusing unsafe archive member {m.name!r}")
        if not parts: continue
        target = os.path.join(tmp, *parts)
        if m.isdir(): os.makedirs(target, exist_ok=True); continue
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with tf.extractfile(m) as src, open(target, "wb") as dst: shutil.copyfileobj(src, dst)
    for entry in os.listdir(tmp):
      old = os.path.join(dest, entry)
      if os.path.isdir(old) and not os.path.islink(old): shutil.rmtree(old)
      os.replace(os.path.join(tmp, entry), old)
  finally: shutil.rmtree(tmp, ignore_errors=True)

def cifar10(folder: Optional[str] = None, device: Optional[str] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """CIFAR-10: X uint8 (N, 3, 32, 32), Y int32 (N,); 50000 train, 10000 test. Reads the python version
  (cifar-10-batches-py: data_batch_1..5, test_batch) or the binary one (data_batch_1..5.bin, test_batch.bin), in a
  folder or its cifar-10-batches-py/-bin subfolder. Env: TINYWEB_CIFAR10_DIR."""
  looked, found = [], None
  for what, d in _places(folder, "TINYWEB_CIFAR10_DIR"):
    if d and (found := _cifar_dir(d)): break
    looked.append(f"  {what}: " + (f"{d} holds no complete cifar-10-batches-py or -bin" if d else "not set"))
  if not found:
    cache = os.path.join(cache_dir(), "datasets", "cifar10")
    if not (found := _cifar_dir(cache)):
      looked.append(f"  the cache {cache}")
      tar = _download("cifar10", CIFAR10_URLS, os.path.join(cache, "cifar-10-python.tar.gz"), looked)
      safe_extract(tar, cache)
      os.unlink(tar)
      if not (found := _cifar_dir(cache)): raise RuntimeError(f"cifar10: {tar} did not hold the CIFAR-10 batches")
  kind, d = found
  load = _cifar_pickle_batch if kind == "py" else _cifar_bin_batch
  out = []
  for batches in (CIFAR_BATCHES[:5], CIFAR_BATCHES[5:]):
    xs, ys = zip(*(load(os.path.join(d, b + ("" if kind == "py" else ".bin"))) for b in batches))
    x, y = bytearray().join(xs), [label for batch in ys for label in batch]
    out += [Tensor.frombuffer(x, dtypes.uint8, (len(y), 3, 32, 32), device),
            Tensor.frombuffer(bytearray(struct.pack(f"={len(y)}i", *y)), dtypes.int32, (len(y),), device)]
  return tuple(out)
