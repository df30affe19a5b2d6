"""Datasets as tensors: MNIST and Fashion-MNIST (IDX files), CIFAR-10 (python pickles or binary records).

Each loader returns `(X_train, Y_train, X_test, Y_test)`, like tinygrad's:
  mnist, fashion_mnist:  X uint8 (N, 1, 28, 28), pixels 0..255;      Y uint8 (N,), classes 0..9;  N = 60000 / 10000
  cifar10:               X uint8 (N, 3, 32, 32), channels R, G, B;   Y int32 (N,), classes 0..9;  N = 50000 / 10000
  cifar:                 cifar10 with Y uint8, as tinygrad's cifar
`mnist(device=None, fashion=False)` and `cifar(device=None)` have tinygrad's signatures (the folder is a keyword there).

The files are looked for, in order, in: the `folder` argument; a folder named by an environment variable
(TINYWEB_MNIST_DIR, TINYWEB_FASHION_MNIST_DIR, TINYWEB_CIFAR10_DIR); for Fashion-MNIST the folder of the Debian package
dataset-fashion-mnist; the cache ($TINYWEB_CACHE_DIR/datasets/<name>, default ~/.cache/tinyweb/datasets/<name>).
A folder that lacks some files is passed over. If none has them, they are downloaded from the mirrors below (module
constants: change them to use others) into the cache. IDX files may be gzipped or not.

Pure Python, no numpy needed (so it runs in Pyodide): CIFAR's pickles hold numpy arrays, which `tinyweb.nn.state.unpickle`
reads into plain shape/dtype/bytes records. It calls nothing but those few reconstructors and can set no attribute of
anything, so a pickle can't run code or change the process.

A malformed file raises `tinyweb.nn.state.FormatError` (a ValueError) naming the file and the problem. Memory stays
within a small multiple of the file's size; a gzipped IDX file is decompressed as its header is checked, to at most
the size its header declares.
"""
from __future__ import annotations
import os, struct, sys, zlib
from typing import Optional
from tinyweb.tensor import Tensor
from tinyweb.dtype import DType, dtypes
from tinyweb.helpers import cache_dir, prod, download, safe_extract
from tinyweb.nn.state import FormatError, unpickle, _Reducer, _Record, _Marker, _encode, _brief

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

class _Gunzip:
  """read(n): the next (up to) n bytes of a gzip stream's contents, decompressed only as far as asked (so a header is
  checked before anything is inflated). Concatenated gzip members are one stream, as for gzip.decompress."""
  def __init__(self, data: memoryview, name: str): self.rest, self.name, self.d = data, name, zlib.decompressobj(31)
  def read(self, n: int) -> bytes:
    out: list[bytes] = []
    while n > 0:
      if self.d.eof:
        if not (rest := self.d.unused_data): break
        self.d = zlib.decompressobj(31)
      else: rest, self.rest = self.rest, b""
      if not rest and not (rest := self.d.unconsumed_tail): raise FormatError(f"{self.name}: corrupt gzip data (the stream is truncated)")
      try: chunk = self.d.decompress(rest, min(n, 1 << 30))
      except zlib.error as e: raise FormatError(f"{self.name}: corrupt gzip data ({e})") from None
      out.append(chunk)
      n -= len(chunk)
    return b"".join(out)

def _parse_idx(data, name: str, gz: Optional[bool] = None) -> tuple[DType, tuple[int, ...], object]:
  """(dtype, shape, values in native byte order) of the IDX file `data` (gzipped if `gz`, or if None when it starts
  like gzip); FormatError naming `name` if malformed. Gzip data is inflated after the header is checked, and only as
  far as the header's shape needs (plus one byte, to refuse trailing data)."""
  mv = memoryview(data).cast("B")
  if gz is None: gz = bytes(mv[:2]) == b"\x1f\x8b"
  if gz: read, total = _Gunzip(mv, name).read, None
  else:
    pos = 0
    def read(n: int) -> memoryview:
      nonlocal pos
      pos, start = min(pos + n, len(mv)), pos
      return mv[start:pos]
    total = len(mv)
  head = bytes(read(4))
  if len(head) < 4 or head[0] != 0 or head[1] != 0:
    raise FormatError(f"{name}: not an IDX file: it starts with {head.hex(' ') or 'nothing'}, an IDX file starts with 00 00 <type> <ndim>")
  if head[2] not in IDX_TYPES:
    raise FormatError(f"{name}: unknown IDX element type {head[2]:#04x}; known: " + ", ".join(f"{t:#04x} {dt.name}" for t, dt in IDX_TYPES.items()))
  dt, header = IDX_TYPES[head[2]], 4 + 4 * head[3]
  if len(dims := bytes(read(4 * head[3]))) < 4 * head[3]:
    raise FormatError(f"{name}: truncated IDX header: {head[3]} dimensions need {header} bytes, got {4 + len(dims)}")
  shape = struct.unpack(f">{head[3]}I", dims)
  expected = header + prod(shape) * dt.itemsize
  values = read(expected - header)
  got = total if total is not None else header + len(values) + len(read(1))
  if got != expected:
    raise FormatError(f"{name}: {'truncated' if got < expected else 'trailing bytes in'} IDX data: shape {shape} of {dt.name} needs "
                      f"{expected} bytes ({header} header + {expected - header} values), got {got if got < expected or total else 'more'}")
  return dt, shape, _to_native(values, dt.itemsize, "big")

def parse_idx(data: bytes, device: Optional[str] = None, name: str = "IDX data") -> Tensor:
  """The tensor stored in IDX file contents `data` (gzipped or not), with the IDX element type and shape."""
  dt, shape, values = _parse_idx(data, name)
  return Tensor.frombuffer(values, dt, shape, device)

def _read_idx(path: str) -> tuple[DType, tuple[int, ...], object]:
  with open(path, "rb") as f: data = f.read()
  return _parse_idx(data, path, True if path.endswith(".gz") else None)

def load_idx(path: str, device: Optional[str] = None) -> Tensor:
  """The tensor in the IDX file at `path` (.gz or not); errors name the file."""
  dt, shape, values = _read_idx(path)
  return Tensor.frombuffer(values, dt, shape, device)

# ---------------------------------------------------------------------------------------------------------------------
# finding and downloading files

def _download(name: str, urls: list[str], dest: str, looked: list[str], files: str = "the files") -> str:
  os.makedirs(os.path.dirname(dest), exist_ok=True)
  errors = []
  for url in urls:
    try:
      download(url, dest, timeout=DOWNLOAD_TIMEOUT)
      return dest
    except Exception as e: errors.append(f"  {url}: {type(e).__name__}: {e}")
  raise RuntimeError(f"{name}: could not find or download {os.path.basename(dest)}.\nLooked in:\n" + "\n".join(looked)
                     + "\nTried to download:\n" + ("\n".join(errors) or "  (no mirrors configured)")
                     + f"\nPut {files} in one of these folders (or pass folder=...), or check the network.")

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
    dt, shape, values = _read_idx(path)
    if dt != dtypes.uint8 or (shape[1:] != (28, 28) if images else len(shape) != 1):
      raise FormatError(f"{path}: expected uint8 {'images of shape (N, 28, 28)' if images else 'labels of shape (N,)'}, "
                       f"got {dt.name} of shape {shape}")
    out.append(Tensor.frombuffer(values, dt, (shape[0], 1, 28, 28) if images else shape, device))
  for x, y in (out[:2], out[2:]):
    if x.shape[0] != y.shape[0]: raise FormatError(f"{name}: {x.shape[0]} images but {y.shape[0]} labels")
  return tuple(out)

def mnist(device: Optional[str] = None, fashion: bool = False, *, folder: Optional[str] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """MNIST digits (tinygrad's signature; fashion=True: Fashion-MNIST, as fashion_mnist): X uint8 (N, 1, 28, 28), Y uint8
  (N,); 60000 train, 10000 test. Env: TINYWEB_MNIST_DIR."""
  if fashion: return fashion_mnist(folder, device)
  return _idx_dataset("mnist", folder, "TINYWEB_MNIST_DIR", MNIST_URLS, device)

def fashion_mnist(folder: Optional[str] = None, device: Optional[str] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """Fashion-MNIST: X uint8 (N, 1, 28, 28), Y uint8 (N,); 60000 train, 10000 test. Env: TINYWEB_FASHION_MNIST_DIR;
  also found where the Debian package dataset-fashion-mnist puts it."""
  return _idx_dataset("fashion-mnist", folder, "TINYWEB_FASHION_MNIST_DIR", FASHION_MNIST_URLS, device,
                      FASHION_MNIST_SYSTEM_DIRS)

# ---------------------------------------------------------------------------------------------------------------------
# numpy arrays in pickles, without numpy: records built by the reconstructors numpy's pickles name

def _str(x) -> str: return x.decode("latin1") if isinstance(x, (bytes, bytearray)) else x

_NP_DTYPES = {"b1": dtypes.bool, **{f"{d.kind}{d.itemsize}": d for d in dtypes.all if d.kind in "iuf" and d != dtypes.bfloat16}}   # 'u1', 'f4', ...

class _NpDType(_Record):
  """What a pickled numpy.dtype says: its element type ('u1', 'i8', 'f4', ...) and byte order."""
  __slots__ = ("dtype", "byteorder")
  def __init__(self, spec, align=False, copy=False):
    if (dt := _NP_DTYPES.get(_str(spec)) if isinstance(spec, (str, bytes)) else None) is None:
      raise FormatError(f"unsupported numpy dtype {_brief.repr(_str(spec))} (known: {', '.join(_NP_DTYPES)})")
    self.dtype, self.byteorder = dt, "|"
  def _setstate(self, state):
    if type(state) is not tuple or len(state) < 2 or any(s is not None for s in state[2:5]) or _str(state[1]) not in ("<", ">", "|", "="):
      raise FormatError(f"unsupported numpy dtype state {_brief.repr(state)} (structured and sub-array dtypes are not)")
    self.byteorder = _str(state[1])

class _NpArray(_Record):
  """What a pickled numpy.ndarray says: shape, dtype, raw bytes (C or Fortran order)."""
  __slots__ = ("shape", "npdtype", "data", "fortran")
  def __init__(self, shape=(), dtype=None, data=b"", fortran=False): self.shape, self.npdtype, self.data, self.fortran = shape, dtype, data, fortran
  def _setstate(self, state):
    if type(state) is not tuple or len(state) not in (4, 5): raise FormatError(f"malformed numpy array state {_brief.repr(state)}")
    self.shape, self.npdtype, self.data, self.fortran = _np_array(*state[-4:])
  def tensor(self, device=None) -> Tensor:
    if self.npdtype is None: raise FormatError("a numpy array without its state")
    dt = self.npdtype.dtype
    data = bytearray(_to_native(self.data, dt.itemsize, {">": "big", "<": "little"}.get(self.npdtype.byteorder, sys.byteorder)))
    if not self.fortran: return Tensor.frombuffer(data, dt, self.shape, device)
    return Tensor.frombuffer(data, dt, self.shape[::-1], device).permute(tuple(range(len(self.shape) - 1, -1, -1)))
  def tolist(self) -> list: return self.tensor().tolist()

def _np_array(shape, npdtype, fortran, data) -> tuple:
  """An array's state checked, as (shape, dtype, data, fortran): its bytes must be exactly what the shape and dtype need."""
  if isinstance(data, str): data = data.encode("latin1")   # (py2 pickles hold them as str)
  if not isinstance(npdtype, _NpDType) or type(data) not in (bytes, bytearray):
    raise FormatError("unsupported numpy array (object arrays are not)")
  if type(shape) not in (tuple, list) or not all(type(s) is int and s >= 0 for s in shape) or len(data) != prod(shape) * npdtype.dtype.itemsize:
    raise FormatError(f"a numpy array of shape {_brief.repr(shape)} {npdtype.dtype.name} has {len(data)} bytes")
  return tuple(shape), npdtype, data, bool(fortran)

_NDARRAY = _Marker("numpy.ndarray", None)

def _reconstruct(cls, shape, typecode) -> _NpArray:
  if cls is not _NDARRAY: raise FormatError(f"numpy _reconstruct of {_brief.repr(cls)} refused")
  return _NpArray()

def _frombuffer(buf, dtype, shape, order="C") -> _NpArray:   # numpy's pickle protocol 5 form
  return _NpArray(*_np_array(shape, dtype, _str(order) == "F", buf))

def _scalar(dtype, data=None):
  if not isinstance(dtype, _NpDType) or not isinstance(data, (bytes, str)) or len(data) != dtype.dtype.itemsize:
    raise FormatError(f"malformed numpy scalar {_brief.repr(data)}")
  data = data.encode("latin1") if isinstance(data, str) else data
  return struct.unpack({">": ">", "<": "<"}.get(dtype.byteorder, "=") + dtype.dtype.fmt, data)[0]

_NUMPY_GLOBALS = {("numpy", "ndarray"): _NDARRAY, ("numpy", "dtype"): _Reducer(_NpDType, 1, 3), ("_codecs", "encode"): _Reducer(_encode, 1, 2)}
for _m in ("numpy.core", "numpy._core"):
  _NUMPY_GLOBALS.update({(f"{_m}.multiarray", "_reconstruct"): _Reducer(_reconstruct, 3, 3), (f"{_m}.multiarray", "scalar"): _Reducer(_scalar, 1, 2),
                         (f"{_m}.numeric", "_frombuffer"): _Reducer(_frombuffer, 3, 4)})

def _numpy_global(module: str, name: str):
  if (g := _NUMPY_GLOBALS.get((module, name))) is None:
    raise FormatError(f"refusing to load {module}.{name}: only numpy arrays and plain data are allowed")
  return g

# ---------------------------------------------------------------------------------------------------------------------
# CIFAR-10 (https://www.cs.toronto.edu/~kriz/cifar.html)

def _cifar_pickle_batch(path: str) -> tuple[bytes, list[int]]:
  with open(path, "rb") as f: raw = f.read()
  try: d = unpickle(raw, _numpy_global)
  except FormatError as e: raise FormatError(f"{path}: {e}") from None
  data, labels = (d.get(k, d.get(k.decode())) if type(d) is dict else None for k in (b"data", b"labels"))
  if isinstance(labels, _NpArray) and labels.npdtype is not None and labels.npdtype.dtype.is_int: labels = labels.tolist()
  if not (isinstance(data, _NpArray) and data.npdtype is not None and data.npdtype.dtype == dtypes.uint8 and len(data.shape) == 2
          and data.shape[1] == 3072 and type(labels) is list and len(labels) == data.shape[0] and all(type(v) is int and 0 <= v < 2**31 for v in labels)):
    raise FormatError(f"{path}: not a CIFAR-10 batch: expected a dict with b'data' uint8 (N, 3072) and N int b'labels'")
  n = data.shape[0]
  return (b"".join(data.data[i::n] for i in range(n)) if data.fortran else bytes(data.data)), labels

def _cifar_bin_batch(path: str) -> tuple[bytes, list[int]]:
  with open(path, "rb") as f: raw = f.read()
  if len(raw) % 3073: raise FormatError(f"{path}: not a CIFAR-10 binary batch: {len(raw)} bytes is not a multiple of 3073 (1 label + 3072 pixels)")
  return b"".join(raw[i + 1:i + 3073] for i in range(0, len(raw), 3073)), list(raw[0::3073])

def _cifar_dir(d: str) -> Optional[tuple[str, str]]:
  """("py" or "bin", folder) if `d` or its cifar-10-batches-py/-bin subfolder holds all the CIFAR-10 batches."""
  for sub in ("", "cifar-10-batches-py", "cifar-10-batches-bin"):
    for kind, ext in (("py", ""), ("bin", ".bin")):
      if all(os.path.isfile(os.path.join(d, sub, b + ext)) for b in CIFAR_BATCHES): return kind, os.path.join(d, sub)
  return None

CIFAR10_EXTRACTED_MAX = 256 << 20   # the CIFAR-10 python archive holds ~178 MB

CIFAR10_FILES = "the CIFAR-10 batches (cifar-10-batches-py: data_batch_1..5 and test_batch, or cifar-10-batches-bin: the same with .bin)"

def cifar10(folder: Optional[str] = None, device: Optional[str] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """CIFAR-10: X uint8 (N, 3, 32, 32), Y int32 (N,); 50000 train, 10000 test. Reads the python version
  (cifar-10-batches-py: data_batch_1..5, test_batch) or the binary one (data_batch_1..5.bin, test_batch.bin), in a
  folder or its cifar-10-batches-py/-bin subfolder. Env: TINYWEB_CIFAR10_DIR."""
  return _cifar10(folder, device, dtypes.int32)

def cifar(device: Optional[str] = None, *, folder: Optional[str] = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  """CIFAR-10 with tinygrad's signature and dtypes: X uint8 (N, 3, 32, 32), Y uint8 (N,); found as cifar10 finds it."""
  return _cifar10(folder, device, dtypes.uint8)

def _cifar10(folder: Optional[str], device: Optional[str], label_dtype: DType) -> tuple[Tensor, Tensor, Tensor, Tensor]:
  looked, found = [], None
  for what, d in _places(folder, "TINYWEB_CIFAR10_DIR"):
    if d and (found := _cifar_dir(d)): break
    looked.append(f"  {what}: " + (f"{d} holds no complete cifar-10-batches-py or -bin" if d else "not set"))
  if not found:
    cache = os.path.join(cache_dir(), "datasets", "cifar10")
    if not (found := _cifar_dir(cache)):
      looked.append(f"  the cache {cache}")
      tar = _download("cifar10", CIFAR10_URLS, os.path.join(cache, "cifar-10-python.tar.gz"), looked, CIFAR10_FILES)
      safe_extract(tar, cache, max_bytes=CIFAR10_EXTRACTED_MAX)
      os.unlink(tar)
      if not (found := _cifar_dir(cache)): raise RuntimeError(f"cifar10: {tar} did not hold the CIFAR-10 batches")
  kind, d = found
  load = _cifar_pickle_batch if kind == "py" else _cifar_bin_batch
  out = []
  for batches in (CIFAR_BATCHES[:5], CIFAR_BATCHES[5:]):
    xs, ys = zip(*(load(os.path.join(d, b + ("" if kind == "py" else ".bin"))) for b in batches))
    x, y = bytearray().join(xs), [label for batch in ys for label in batch]
    out += [Tensor.frombuffer(x, dtypes.uint8, (len(y), 3, 32, 32), device),
            Tensor.frombuffer(bytearray(struct.pack(f"={len(y)}{label_dtype.fmt}", *y)), label_dtype, (len(y),), device)]
  return tuple(out)
