"""Model state: finding an object's tensors, safetensors files, PyTorch checkpoints and atomic checkpoints.

- `get_state_dict` / `get_parameters` walk attributes, lists, tuples and dicts, like tinygrad ("layers.0.weight").
- `load_state_dict` copies a state dict into a model, reporting every missing, unexpected and mis-shaped key at once.
- `safe_load` / `safe_save`: the safetensors format, parsed here (no dependency). A file given by path is mapped with
  mmap (copy-on-write), so on the CPU the loaded tensors use the file's pages without a copy.
- `torch_load`: a `torch.save` zip checkpoint read without torch, through an unpickler that only knows tensors,
  storages and plain containers; any other global in the pickle is refused, never imported or called.
- `save_checkpoint` / `load_checkpoint`: a model (or state dict) to and from a safetensors file, written atomically.
"""
from __future__ import annotations
import collections, io, json, os, pickle, types, zipfile
from typing import Any, Callable, Optional, Union
from tinyweb.tensor import Tensor
from tinyweb.dtype import DType, dtypes
from tinyweb.helpers import prod

Source = Union[str, os.PathLike, bytes, bytearray, memoryview]

# ---------------------------------------------------------------------------------------------------------------
# walking objects for their tensors

_NOT_CONTAINERS = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType, str, bytes)

def get_state_dict(obj: Any, prefix: str = "") -> dict[str, Tensor]:
  """Every Tensor reachable from `obj` through attributes, list/tuple items and dict values, keyed by its path
  ("layers.0.weight"), each key starting with `prefix`. A tensor reachable by two paths appears under both."""
  out: dict[str, Tensor] = {}
  _walk(obj, "", prefix, out, set())
  return out

def _walk(x: Any, key: str, prefix: str, out: dict, on_path: set):
  """Add the tensors reachable from `x` to `out`; `on_path` guards against cycles (a child that refers back to its
  parent). (Not a closure: a recursive closure is a reference cycle, keeping `out` alive until garbage collection.)"""
  if isinstance(x, Tensor):
    out[prefix + key] = x
    return
  if id(x) in on_path or isinstance(x, _NOT_CONTAINERS): return
  if isinstance(x, dict): items = x.items()
  elif hasattr(x, "_asdict") and isinstance(x, tuple): items = x._asdict().items()   # namedtuple: by field name
  elif isinstance(x, (list, tuple)): items = enumerate(x)
  elif hasattr(x, "__dict__"): items = vars(x).items()
  else: return
  on_path.add(id(x))
  for k, v in list(items): _walk(v, f"{key}.{k}" if key else str(k), prefix, out, on_path)
  on_path.discard(id(x))

def get_parameters(obj: Any) -> list[Tensor]:
  """The distinct tensors of `get_state_dict(obj)`, in the order first found."""
  return list({id(t): t for t in get_state_dict(obj).values()}.values())

def flatten_state_dict(nested: Any, prefix: str = "") -> dict[str, Tensor]:
  """Nested dicts/lists of tensors (e.g. what `torch_load` returns) as one flat dict with "a.b.c" keys."""
  return get_state_dict(nested, prefix)

class StateDictError(KeyError, ValueError):
  """A state dict does not fit a model. Both a KeyError and a ValueError; the message lists every problem."""
  def __str__(self): return str(self.args[0]) if self.args else ""

def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = False) -> tuple[list[str], list[str]]:
  """Copy each tensor of `state_dict` into the model tensor with the same key (cast to its dtype, moved to its
  device). strict=True: raise StateDictError listing all missing keys, unexpected keys and shape mismatches,
  loading nothing. strict=False: load every key that fits and return (missing, unexpected); a key whose shape does
  not match is not loaded and is counted as missing."""
  model_sd = get_state_dict(model)
  missing = [k for k in model_sd if k not in state_dict]
  unexpected = [k for k in state_dict if k not in model_sd]
  mismatched = [(k, t.shape, tuple(state_dict[k].shape)) for k, t in model_sd.items()
                if k in state_dict and tuple(t.shape) != tuple(state_dict[k].shape)]
  if strict and (missing or unexpected or mismatched):
    lines = [f"load_state_dict: the state dict does not match the model ({len(model_sd)} model tensors, {len(state_dict)} given)"]
    if missing: lines.append(f"  missing keys ({len(missing)}): {', '.join(missing)}")
    if unexpected: lines.append(f"  unexpected keys ({len(unexpected)}): {', '.join(unexpected)}")
    for k, want, got in mismatched: lines.append(f"  shape mismatch for {k}: model has {want}, state dict has {got}")
    raise StateDictError("\n".join(lines))
  bad = {k for k, _, _ in mismatched}
  targets, done = [], set()
  for k, t in model_sd.items():
    if k not in state_dict or k in bad or id(t) in done: continue   # a tensor under two keys is loaded once
    done.add(id(t))
    v = state_dict[k]
    v = (v if isinstance(v, Tensor) else Tensor(v, device=t.device)).detach().to(t.device).cast(t.dtype)
    t.assign(v)   # in place when t owns a buffer, otherwise t takes the new value
    targets.append(t)
  if targets: Tensor.realize_all(*targets)
  if verbose:
    print(f"load_state_dict: loaded {len(targets)} of {len(model_sd)} tensors")
    for k, want, got in mismatched: print(f"  skipped {k}: model has {want}, state dict has {got}")
    if missing: print(f"  missing: {', '.join(missing)}")
    if unexpected: print(f"  unexpected: {', '.join(unexpected)}")
  return missing + sorted(bad), unexpected

# ---------------------------------------------------------------------------------------------------------------
# reading sources and writing files atomically

def _map_file(path) -> memoryview:
  """The whole file as a writable memoryview: a copy-on-write mmap where possible, else read into memory."""
  with open(path, "rb") as f:
    size = os.fstat(f.fileno()).st_size
    if size:
      try:
        import mmap
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY))
      except (ImportError, OSError, ValueError): pass   # e.g. Pyodide, or a file system without mmap
    buf = bytearray(size)
    if f.readinto(buf) != size: raise OSError(f"could not read all {size} bytes of {os.fspath(path)!r}")
    return memoryview(buf)

def _as_memory(src: Source) -> memoryview:
  """A writable memoryview of a source: a path is mapped, a writable memoryview is used as is, bytes are copied once."""
  if isinstance(src, (str, os.PathLike)): return _map_file(src)
  if isinstance(src, memoryview) and not src.readonly: return src.cast("B")
  if isinstance(src, (bytes, bytearray, memoryview)): return memoryview(bytearray(src))
  raise TypeError(f"expected a path, bytes, bytearray or memoryview, got {type(src).__name__}")

def _atomic_write(path, write: Callable[[Any], None]) -> None:
  """Write through a temporary file in the same directory, fsync it and rename it over `path`: readers see the old
  file or the new one, never a partial one."""
  path = os.path.abspath(os.fspath(path))
  folder, name = os.path.split(path)
  tmp = os.path.join(folder, f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
  try:
    with os.fdopen(fd, "wb") as f:
      write(f)
      f.flush()
      if hasattr(os, "fsync"): os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    try: os.unlink(tmp)
    except OSError: pass
    raise
  try:   # make the rename itself durable (POSIX); not possible everywhere
    dfd = os.open(folder, os.O_RDONLY)
    try: os.fsync(dfd)
    finally: os.close(dfd)
  except OSError: pass

def _tensor_bytes(t: Tensor) -> memoryview:
  mv = t.data()
  return mv.cast("B") if mv.nbytes else memoryview(b"")

def _frombuffer(mem: memoryview, start: int, end: int, dt: DType, shape, device) -> Tensor:
  """A tensor over mem[start:end], copied only when the data is not aligned to the element size."""
  raw = mem[start:end]
  if start % dt.itemsize: raw = memoryview(bytearray(raw))
  return Tensor.frombuffer(raw, dt, shape, device)

# ---------------------------------------------------------------------------------------------------------------
# safetensors: 8-byte little-endian header length N, N bytes of JSON header, then the data.
# header: {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ..., "__metadata__": {str: str}}
# Offsets are relative to the start of the data; the tensors must cover the data exactly, without gaps or overlaps.

SAFETENSORS_DTYPES: dict[str, DType] = {
  "BOOL": dtypes.bool, "U8": dtypes.uint8, "I8": dtypes.int8, "U16": dtypes.uint16, "I16": dtypes.int16,
  "F16": dtypes.float16, "BF16": dtypes.bfloat16, "U32": dtypes.uint32, "I32": dtypes.int32, "F32": dtypes.float32,
  "U64": dtypes.uint64, "I64": dtypes.int64, "F64": dtypes.float64}
_SAFETENSORS_NAMES = {v: k for k, v in SAFETENSORS_DTYPES.items()}
MAX_HEADER = 100 << 20   # the reference implementation's limit

def _header_length(first8: bytes, total: int) -> int:
  if total < 8: raise ValueError(f"safetensors: the file is only {total} bytes, too short for the 8-byte header length (truncated?)")
  n = int.from_bytes(first8, "little")
  if n > MAX_HEADER: raise ValueError(f"safetensors: header length {n} is over the {MAX_HEADER}-byte limit (corrupt file?)")
  if 8 + n > total: raise ValueError(f"safetensors: the header should be {n} bytes but only {total - 8} follow (truncated file?)")
  return n

def _no_duplicates(pairs):
  d = {}
  for k, v in pairs:
    if k in d: raise ValueError(f"safetensors: key {k!r} appears twice in the header")
    d[k] = v
  return d

def _is_uint(x) -> bool: return type(x) is int and x >= 0

def _parse_header(head: bytes, data_len: int) -> tuple[dict[str, tuple[DType, tuple[int, ...], int, int]], dict[str, str]]:
  """Validate a header against `data_len` bytes of data: ({name: (dtype, shape, begin, end)} in data order, metadata)."""
  try: text = head.decode("utf-8")
  except UnicodeDecodeError as e: raise ValueError(f"safetensors: the header is not valid UTF-8 ({e})") from None
  if not text.startswith("{"): raise ValueError(f"safetensors: the header does not start with '{{' (not a safetensors file?): {text[:20]!r}")
  try: header = json.loads(text, object_pairs_hook=_no_duplicates)
  except json.JSONDecodeError as e: raise ValueError(f"safetensors: the header is not valid JSON: {e}") from None
  meta = header.pop("__metadata__", None) or {}
  if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
    raise ValueError(f"safetensors: __metadata__ must map strings to strings, got {meta!r}")
  entries = []
  for name, info in header.items():
    where = f"safetensors: tensor {name!r}"
    if not isinstance(info, dict) or not {"dtype", "shape", "data_offsets"} <= set(info):
      raise ValueError(f"{where}: the entry needs dtype, shape and data_offsets, got {info!r}")
    dt, shape, offs = SAFETENSORS_DTYPES.get(info["dtype"]), info["shape"], info["data_offsets"]
    if dt is None: raise ValueError(f"{where}: dtype {info['dtype']!r} is not supported (supported: {', '.join(SAFETENSORS_DTYPES)})")
    if not isinstance(shape, list) or not all(_is_uint(s) for s in shape): raise ValueError(f"{where}: invalid shape {shape!r}")
    if not isinstance(offs, list) or len(offs) != 2 or not all(_is_uint(o) for o in offs) or offs[0] > offs[1]:
      raise ValueError(f"{where}: invalid data_offsets {offs!r} (need [begin, end] with 0 <= begin <= end)")
    begin, end = offs
    if end > data_len: raise ValueError(f"{where}: data_offsets {offs} go past the end of the data ({data_len} bytes; truncated file?)")
    if end - begin != prod(shape) * dt.itemsize:
      raise ValueError(f"{where}: data_offsets {offs} hold {end - begin} bytes, but shape {shape} of {info['dtype']} needs {prod(shape) * dt.itemsize}")
    entries.append((begin, end, name, dt, tuple(shape)))
  entries.sort(key=lambda e: (e[0], e[1]))
  pos = 0
  for begin, end, name, _, _ in entries:
    if begin != pos:
      raise ValueError(f"safetensors: tensor {name!r} starts at data byte {begin} but the previous tensor ends at {pos} "
                       f"({'a gap' if begin > pos else 'an overlap'}; each data byte must belong to exactly one tensor)")
    pos = end
  if pos != data_len: raise ValueError(f"safetensors: the tensors cover {pos} bytes but the data is {data_len} bytes (trailing bytes)")
  return {name: (dt, shape, begin, end) for begin, end, name, dt, shape in entries}, meta

def safe_load(src: Source, device: Optional[str] = None) -> dict[str, Tensor]:
  """Read a safetensors file (path, bytes or memoryview). From a path on the CPU the tensors use the mapped file
  without a copy (copy-on-write: writing to them never changes the file); bytes are copied once."""
  mem = _as_memory(src)
  n = _header_length(bytes(mem[:8]), mem.nbytes)
  entries, _ = _parse_header(bytes(mem[8:8 + n]), mem.nbytes - 8 - n)
  return {name: _frombuffer(mem, 8 + n + b, 8 + n + e, dt, shape, device) for name, (dt, shape, b, e) in entries.items()}

def safe_load_metadata(src: Source) -> dict[str, str]:
  """The `__metadata__` of a safetensors file (empty if none), after validating the header; tensor data is not read."""
  if isinstance(src, (str, os.PathLike)):
    with open(src, "rb") as f:
      total = os.fstat(f.fileno()).st_size
      n = _header_length(f.read(8), total)
      head = f.read(n)
  else:
    mem = memoryview(src).cast("B")
    total = mem.nbytes
    n = _header_length(bytes(mem[:8]), total)
    head = bytes(mem[8:8 + n])
  return _parse_header(head, total - 8 - n)[1]

def safe_save(tensors: dict[str, Tensor], path, metadata: Optional[dict[str, str]] = None) -> None:
  """Write `tensors` as a safetensors file, atomically. Like the reference writer, data is ordered by decreasing
  element size, then name (so every tensor is aligned), and the header is padded with spaces to 8 bytes."""
  if metadata is not None and not (isinstance(metadata, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())):
    raise TypeError(f"safe_save: metadata must be a dict of str to str, got {metadata!r}")
  for k, t in tensors.items():
    if not isinstance(k, str) or k == "__metadata__": raise ValueError(f"safe_save: invalid tensor name {k!r}")
    if not isinstance(t, Tensor): raise TypeError(f"safe_save: {k!r} is a {type(t).__name__}, not a Tensor")
  order = sorted(tensors, key=lambda k: (-tensors[k].dtype.itemsize, k))
  header: dict[str, Any] = {"__metadata__": metadata} if metadata else {}
  pos = 0
  for k in order:
    t = tensors[k]
    header[k] = {"dtype": _SAFETENSORS_NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [pos, pos + t.nbytes()]}
    pos += t.nbytes()
  head = json.dumps(header, separators=(",", ":")).encode()
  head += b" " * (-len(head) % 8)
  if tensors: Tensor.realize_all(*tensors.values())
  def write(f):
    f.write(len(head).to_bytes(8, "little"))
    f.write(head)
    for k in order: f.write(_tensor_bytes(tensors[k]))
  _atomic_write(path, write)

# ---------------------------------------------------------------------------------------------------------------
# PyTorch checkpoints (the zip format of torch.save since 1.6): <dir>/data.pkl is a pickle (protocol 2) whose tensors
# are `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])` (v3 adds a
# dtype before metadata, for untyped storages); each storage is a persistent id ('storage', StorageType, key,
# location, numel) whose bytes are the zip member <dir>/data/<key>.

_STORAGE_DTYPES = {
  "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16,
  "LongStorage": dtypes.int64, "IntStorage": dtypes.int32, "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8,
  "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool, "UInt16Storage": dtypes.uint16, "UInt32Storage": dtypes.uint32,
  "UInt64Storage": dtypes.uint64}
_TORCH_DTYPES = {d.name: d for d in dtypes.all}

class _Marker:
  """What the unpickler gives for a torch storage class or dtype: a fresh inert object (no __dict__, not callable)."""
  __slots__ = ("kind", "dtype")
  def __init__(self, kind: str, dtype: Optional[DType]): self.kind, self.dtype = kind, dtype

class _Storage:
  __slots__ = ("mem", "start", "dtype")
  def __init__(self, mem: memoryview, start: int, dtype: Optional[DType]): self.mem, self.start, self.dtype = mem, start, dtype

def _marker_dtype(m: Any, kind: str) -> Optional[DType]:
  if not isinstance(m, _Marker) or m.kind != kind or not (m.dtype is None or isinstance(m.dtype, DType)):
    raise pickle.UnpicklingError(f"torch_load: expected a torch {kind}, got {type(m).__name__}")
  return m.dtype

def _strided_view(base: Tensor, size: tuple[int, ...], stride: tuple[int, ...]) -> Tensor:
  """`base` (1-D, from the first element of the view) seen with `size` and `stride` (in elements), built from pad,
  reshape, shrink, permute and expand. Handles any layout whose dimensions do not overlap (transposes, slices,
  broadcasts); overlapping ones (e.g. sliding windows) raise."""
  dims = sorted(((st, s, i) for i, (s, st) in enumerate(zip(size, stride)) if s > 1 and st > 0), reverse=True)
  x, length = base, base.shape[0]
  for j, (st, s, _) in enumerate(dims):
    rest = 1 + sum((s2 - 1) * st2 for st2, s2, _ in dims[j + 1:])   # span of the smaller-stride dimensions
    if rest > st: raise ValueError(f"torch_load: a tensor with size {size} and overlapping strides {stride} is not supported")
    # x is (..., length) with length = (s-1)*st + rest: pad to s*st, split into (s, st), keep the first `rest`
    x = x.pad((None,) * (x.ndim - 1) + ((0, s * st - length),)).reshape(*x.shape[:-1], s, st)
    x = x.shrink((None,) * (x.ndim - 1) + ((0, rest),)) if rest != st else x
    length = rest
  x = x.shrink((None,) * (x.ndim - 1) + ((0, 1),)).reshape(x.shape[:-1])   # the one remaining element
  order = [i for _, _, i in dims]
  x = x.permute([order.index(i) for i in sorted(order)])
  return x.reshape(tuple(s if i in order else 1 for i, s in enumerate(size))).expand(size)

def _rebuild(storage: Any, offset: int, size, stride, dtype: Optional[DType], device: Optional[str]) -> Tensor:
  if not isinstance(storage, _Storage): raise pickle.UnpicklingError(f"torch_load: expected a storage, got {type(storage).__name__}")
  dt = dtype or storage.dtype
  if dt is None: raise pickle.UnpicklingError("torch_load: an untyped storage is used without a dtype")
  size, stride = tuple(size), tuple(stride)
  if len(size) != len(stride) or not all(_is_uint(v) for v in (offset, *size, *stride)):
    raise ValueError(f"torch_load: invalid tensor layout: offset {offset}, size {size}, stride {stride}")
  numel, isz, avail = prod(size), dt.itemsize, storage.mem.nbytes // dt.itemsize
  if numel == 0: return Tensor.frombuffer(bytearray(0), dt, size, device)
  span = 1 + sum((s - 1) * st for s, st in zip(size, stride))
  if offset + span > avail:
    raise ValueError(f"torch_load: a tensor with offset {offset}, size {size}, stride {stride} reads past its storage of {avail} {dt.name} elements")
  start = storage.start + offset * isz
  expected, contiguous = 1, True
  for s, st in reversed(list(zip(size, stride))):
    if s != 1 and st != expected: contiguous = False
    expected *= s
  if contiguous: return _frombuffer(storage.mem, start, start + numel * isz, dt, size, device)
  return _strided_view(_frombuffer(storage.mem, start, start + span * isz, dt, None, device), size, stride)

def _encode(s: str, encoding: str = "utf-8") -> bytes:   # protocol-2 pickles store bytes as _codecs.encode(str, "latin1")
  if encoding not in ("latin1", "latin-1"): raise pickle.UnpicklingError(f"torch_load: refusing _codecs.encode with {encoding!r}")
  return s.encode("latin1")

class _RestrictedUnpickler(pickle.Unpickler):
  """Only the globals a checkpoint of tensors needs, each mapped to a function of ours; everything else is refused."""
  def __init__(self, f, load_storage: Callable[[str, Optional[DType]], _Storage], device: Optional[str]):
    super().__init__(f)
    self.load_storage, self.device = load_storage, device
  def find_class(self, module: str, name: str):
    dev = self.device
    allowed = {
      ("collections", "OrderedDict"): collections.OrderedDict,
      ("torch._utils", "_rebuild_tensor"): lambda st, off, size, stride: _rebuild(st, off, size, stride, None, dev),
      ("torch._utils", "_rebuild_tensor_v2"):
        lambda st, off, size, stride, requires_grad=False, hooks=None, metadata=None: _rebuild(st, off, size, stride, None, dev),
      ("torch._utils", "_rebuild_tensor_v3"):
        lambda st, off, size, stride, requires_grad, hooks, dtype, metadata=None: _rebuild(st, off, size, stride, _marker_dtype(dtype, "dtype"), dev),
      ("torch._utils", "_rebuild_parameter"): lambda data, requires_grad=False, hooks=None: data,
      ("torch._utils", "_rebuild_parameter_with_state"): lambda data, requires_grad=False, hooks=None, state=None: data,
      ("torch", "Size"): tuple,
      ("torch", "device"): lambda *args: ":".join(str(a) for a in args),
      ("_codecs", "encode"): _encode,
    }
    if (fn := allowed.get((module, name))) is not None: return fn
    if module == "torch" and name in _STORAGE_DTYPES: return _Marker("storage", _STORAGE_DTYPES[name])
    if module in ("torch", "torch.storage") and name == "UntypedStorage": return _Marker("storage", None)
    if module == "torch" and name in _TORCH_DTYPES: return _Marker("dtype", _TORCH_DTYPES[name])
    raise pickle.UnpicklingError(f"torch_load: refusing to load global '{module}.{name}': only tensors, storages and plain "
                                 "containers are allowed in a checkpoint")
  def persistent_load(self, pid):
    if not (isinstance(pid, tuple) and len(pid) >= 3 and pid[0] == "storage"):
      raise pickle.UnpicklingError(f"torch_load: unsupported persistent id {pid!r}")
    return self.load_storage(str(pid[2]), _marker_dtype(pid[1], "storage"))

def _member(zf: zipfile.ZipFile, name: str, mem: Optional[memoryview]) -> tuple[memoryview, int]:
  """The bytes of a zip member and their position in `mem`: in place when stored uncompressed (what torch writes)."""
  try: info = zf.getinfo(name)
  except KeyError: raise ValueError(f"torch_load: the checkpoint has no member {name!r} (corrupt file?)") from None
  if mem is not None and info.compress_type == zipfile.ZIP_STORED:
    off = info.header_offset
    if bytes(mem[off:off + 4]) != b"PK\x03\x04": raise ValueError(f"torch_load: bad zip local header for {name!r} (corrupt file?)")
    start = off + 30 + int.from_bytes(mem[off + 26:off + 28], "little") + int.from_bytes(mem[off + 28:off + 30], "little")
    if start + info.file_size > mem.nbytes: raise ValueError(f"torch_load: member {name!r} goes past the end of the file (truncated?)")
    return mem, start
  return memoryview(bytearray(zf.read(info))), 0

def torch_load(src: Source, device: Optional[str] = None) -> Any:
  """Load a `torch.save` checkpoint (zip format) without torch: the pickled structure (dicts, OrderedDicts, lists,
  numbers) with tinyweb Tensors in place of torch tensors. Storages are used in place where possible (mmap of a
  path). A pickle that names any other global raises pickle.UnpicklingError, before anything runs."""
  mem = _as_memory(src)
  try: zf = zipfile.ZipFile(os.fspath(src) if isinstance(src, (str, os.PathLike)) else io.BytesIO(src))
  except zipfile.BadZipFile:
    if bytes(mem[:2]) == b"\x80\x02":
      raise ValueError("torch_load: this is the legacy (non-zip) torch.save format, which is not supported; "
                       "re-save it with a recent torch.save (the zip format, the default since PyTorch 1.6)") from None
    raise ValueError("torch_load: not a PyTorch zip checkpoint (no zip directory found: truncated, or another format?)") from None
  with zf:
    pkls = [n for n in zf.namelist() if n.endswith("/data.pkl") and n.count("/") == 1]
    if not pkls: raise ValueError(f"torch_load: no <dir>/data.pkl in the zip (a TorchScript or other archive?): {zf.namelist()[:5]}")
    root = pkls[0][:-len("data.pkl")]
    if root + "byteorder" in zf.namelist() and zf.read(root + "byteorder").strip() != b"little":
      raise ValueError("torch_load: big-endian checkpoints are not supported")
    storages: dict[str, _Storage] = {}
    def load_storage(key: str, dtype: Optional[DType]) -> _Storage:
      if key not in storages: storages[key] = _Storage(*_member(zf, f"{root}data/{key}", mem), dtype)
      return storages[key]
    return _RestrictedUnpickler(io.BytesIO(zf.read(pkls[0])), load_storage, device).load()

# ---------------------------------------------------------------------------------------------------------------
# checkpoints

def save_checkpoint(obj: Any, path, metadata: Optional[dict[str, str]] = None) -> None:
  """Save a flat state dict, or every tensor of an object (model, optimizer, {"model": m, "opt": o}), as an atomic
  safetensors file."""
  sd = obj if isinstance(obj, dict) and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()) else get_state_dict(obj)
  safe_save(sd, path, metadata)

def load_checkpoint(path, obj: Any, strict: bool = True, verbose: bool = False) -> tuple[list[str], list[str]]:
  """Load a checkpoint written by `save_checkpoint` into `obj` (see load_state_dict)."""
  return load_state_dict(obj, safe_load(path), strict=strict, verbose=verbose)
