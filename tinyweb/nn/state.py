"""Model state: finding an object's tensors, safetensors files, PyTorch checkpoints and atomic checkpoints.

- `get_state_dict` / `get_parameters` walk attributes, lists, tuples and dicts, like tinygrad ("layers.0.weight").
- `load_state_dict` copies a state dict into a model, reporting every missing, unexpected and mis-shaped key at once.
- `safe_load` / `safe_save`: the safetensors format, parsed here (no dependency). A file given by path is mapped with
  mmap (copy-on-write), so on the CPU the loaded tensors use the file's pages without a copy.
- `torch_load`: a `torch.save` zip checkpoint read without torch, through an unpickler that only knows tensors,
  storages and plain containers; any other global in the pickle is refused, never imported or called.
- `torch_load_modules`: the same for checkpoints that pickle whole modules (ultralytics' `.pt`): each object of a class
  the pickle names is read as a `PickledObject`, a dict of its pickled state; nothing of the class is imported or run.
  `pickled_state_dict` gives such a module's state dict ("model.0.conv.weight").
- `save_checkpoint` / `load_checkpoint`: a model (or state dict) to and from a safetensors file, written atomically;
  a save also removes the temporary files that saves of the same file killed midway left behind.
- tinygrad's names: `zip_extract` / `tar_extract` (an archive's files as uint8 tensors), `TensorIO` (a uint8 tensor as a
  binary file), `accept_filename`, `safe_dtypes` / `inverse_safe_dtypes`. Every loader takes a path, bytes, or (as in
  tinygrad) a 1-D uint8 Tensor of the file's contents.

Every malformed file (safetensors, PyTorch checkpoint, and in `tinyweb.nn.datasets` IDX and CIFAR-10 files) raises
`FormatError`, a ValueError whose message names the file and the problem; so does a file that asks for more than its
size justifies. Reading a file never changes the process: the pickles of checkpoints are run by `unpickle`, an
interpreter of the pickle opcodes that builds only plain values and calls only the loader's own constructors, and
memory stays within a small multiple of the file's size (gzip and zip members: of their declared sizes).
"""
from __future__ import annotations
import codecs, collections, contextlib, functools, io, json, os, re, reprlib, struct, tarfile, types, zipfile, zlib
from typing import Any, Callable, Optional, Union
from tinyweb.tensor import Tensor
from tinyweb.device import Device
from tinyweb.dtype import DType, dtypes
from tinyweb.helpers import prod, FormatError

Source = Union[str, os.PathLike, bytes, bytearray, memoryview, Tensor]

# ---------------------------------------------------------------------------------------------------------------
# walking objects for their tensors

_NOT_CONTAINERS = (type, types.ModuleType, types.FunctionType, types.MethodType, types.BuiltinFunctionType, str, bytes)

def get_state_dict(obj: Any, prefix: str = "", tensor_type=Tensor) -> dict[str, Tensor]:
  """Every Tensor (every instance of tensor_type) reachable from `obj` through attributes, list/tuple items and dict
  values, keyed by its path ("layers.0.weight"), each key starting with `prefix`. A tensor reachable by two paths
  appears under both."""
  out: dict[str, Tensor] = {}
  _walk(obj, "", prefix, out, set(), tensor_type)
  return out

def _walk(x: Any, key: str, prefix: str, out: dict, on_path: set, tensor_type=Tensor):
  """Add the tensors reachable from `x` to `out`; `on_path` guards against cycles (a child that refers back to its
  parent). (Not a closure: a recursive closure is a reference cycle, keeping `out` alive until garbage collection.)"""
  if isinstance(x, tensor_type):
    out[prefix + key] = x
    return
  if id(x) in on_path or isinstance(x, _NOT_CONTAINERS): return
  if isinstance(x, dict): items = x.items()
  elif hasattr(x, "_asdict") and isinstance(x, tuple): items = x._asdict().items()   # namedtuple: by field name
  elif isinstance(x, (list, tuple)): items = enumerate(x)
  elif hasattr(x, "__dict__"): items = vars(x).items()
  else: return
  on_path.add(id(x))
  for k, v in list(items): _walk(v, f"{key}.{k}" if key else str(k), prefix, out, on_path, tensor_type)
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

def load_state_dict(model: Any, state_dict: dict[str, Tensor], strict: bool = True, verbose: bool = False, consume: bool = False,
                    realize: bool = True) -> tuple[list[str], list[str]]:
  """Copy each tensor of `state_dict` into the model tensor with the same key (cast to its dtype, moved to its
  device). strict=True: raise StateDictError listing all missing keys, unexpected keys and shape mismatches,
  loading nothing. strict=False: load every key that fits and return (missing, unexpected); a key whose shape does
  not match is not loaded and is counted as missing. consume: delete the loaded keys from state_dict (so their
  source tensors can be freed). realize=False: leave the copies lazy (computed when the model is next realized)."""
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
    v = (v if isinstance(v, Tensor) else Tensor(v, device=t.device)).detach().cast(t.dtype).to(t.device)   # (cast first: the target device may lack the source dtype)
    t.assign(v)   # in place when t owns a buffer, otherwise t takes the new value
    targets.append(t)
    if consume: del state_dict[k]
  if targets and realize: Tensor.realize_all(*targets)
  if verbose:
    print(f"load_state_dict: loaded {len(targets)} of {len(model_sd)} tensors")
    for k, want, got in mismatched: print(f"  skipped {k}: model has {want}, state dict has {got}")
    if missing: print(f"  missing: {', '.join(missing)}")
    if unexpected: print(f"  unexpected: {', '.join(unexpected)}")
  return missing + sorted(bad), unexpected

# ---------------------------------------------------------------------------------------------------------------
# malformed files, reading sources and writing files atomically

def _describe(src) -> str:
  if isinstance(src, Tensor): return f"<Tensor of {src.nbytes()} bytes>"
  return os.fspath(src) if isinstance(src, (str, os.PathLike)) else f"<{type(src).__name__} of {memoryview(src).nbytes} bytes>"

@contextlib.contextmanager
def _naming(src, loader: str):
  """Prefix the FormatErrors raised inside with the file (or the size of the bytes) they are about and the loader."""
  try: yield
  except FormatError as e: raise FormatError(f"{_describe(src)}: {loader}: {e}") from None

_brief = reprlib.Repr()
_brief.maxstring = _brief.maxother = 60   # a bounded repr of what a file holds, for error messages

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
  """A writable memoryview of a source: a path is mapped, a writable memoryview is used as is, bytes (and a uint8
  tensor's contents) are copied once."""
  if isinstance(src, (str, os.PathLike)): return _map_file(src)
  if isinstance(src, Tensor):
    if src.dtype != dtypes.uint8 or src.ndim != 1: raise TypeError(f"expected a file's contents as a 1-D uint8 Tensor, got {src.dtype.name} of shape {src.shape}")
    return memoryview(bytearray(_tensor_bytes(src)))
  if isinstance(src, memoryview) and not src.readonly: return src.cast("B")
  if isinstance(src, (bytes, bytearray, memoryview)): return memoryview(bytearray(src))
  raise TypeError(f"expected a path, bytes, bytearray, memoryview or uint8 Tensor, got {type(src).__name__}")

def _pid_alive(pid: int) -> bool:
  try: os.kill(pid, 0)
  except ProcessLookupError: return False
  except OSError: pass   # e.g. another user's process: alive
  return True

def _remove_stale_temps(folder: str, name: str) -> None:
  """Remove the temporary files of `name` that saves killed midway left (".NAME.<pid>.<hex>.tmp" whose process is
  gone). POSIX only: elsewhere there is no safe way to ask whether a pid lives (os.kill(pid, 0) signals on Windows)."""
  if os.name != "posix": return
  pattern = re.compile(rf"\.{re.escape(name)}\.(\d+)\.[0-9a-f]{{8}}\.tmp")
  try: entries = os.listdir(folder)
  except OSError: return
  for entry in entries:
    if (m := pattern.fullmatch(entry)) and not _pid_alive(int(m.group(1))):
      try: os.unlink(os.path.join(folder, entry))
      except OSError: pass   # another save removed it first

def _atomic_write(path, write: Callable[[Any], None]) -> None:
  """Write through a temporary file in the same directory, fsync it and rename it over `path`: readers see the old
  file or the new one, never a partial one. The temporary file is removed on any exception; one left by a killed
  process is removed by the next save of the same file."""
  path = os.path.abspath(os.fspath(path))
  folder, name = os.path.split(path)
  _remove_stale_temps(folder, name)
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
  """A tensor over mem[start:end], copied only when the data is not aligned to the element size. 64-bit integers on a
  device without them (WEBGPU) are loaded as 32-bit ones when every value fits (as tinyweb.onnx does), else FormatError."""
  raw = mem[start:end]
  if dt in (dtypes.int64, dtypes.uint64) and not Device[Device.canonicalize(device)].has_dtype(dt):
    narrow = dtypes.int32 if dt == dtypes.int64 else dtypes.uint32
    values = struct.unpack(f"<{len(raw) // 8}{'q' if dt == dtypes.int64 else 'Q'}", raw)
    if any(not narrow.min <= v <= narrow.max for v in values):
      raise FormatError(f"a {dt.name} tensor holds values past {narrow.name}'s range, and {Device.canonicalize(device)} has no {dt.name}")
    return Tensor(list(values), dtype=narrow, device=device).reshape(shape if shape is not None else (len(values),))
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
  if total < 8: raise FormatError(f"the file is only {total} bytes, too short for the 8-byte header length (truncated?)")
  n = int.from_bytes(first8, "little")
  if n > MAX_HEADER: raise FormatError(f"header length {n} is over the {MAX_HEADER}-byte limit (corrupt file?)")
  if 8 + n > total: raise FormatError(f"the header should be {n} bytes but only {total - 8} follow (truncated file?)")
  return n

def _no_duplicates(pairs):
  d = {}
  for k, v in pairs:
    if k in d: raise FormatError(f"key {_brief.repr(k)} appears twice in the header")
    d[k] = v
  return d

def _is_uint(x) -> bool: return type(x) is int and 0 <= x < 2**64   # (a size or offset; also keeps str(x) short)

def _parse_header(head: bytes, data_len: int) -> tuple[dict[str, tuple[DType, tuple[int, ...], int, int]], dict[str, str]]:
  """Validate a header against `data_len` bytes of data: ({name: (dtype, shape, begin, end)} in data order, metadata)."""
  try: text = head.decode("utf-8")
  except UnicodeDecodeError as e: raise FormatError(f"the header is not valid UTF-8 ({e})") from None
  if not text.startswith("{"): raise FormatError(f"the header does not start with '{{' (not a safetensors file?): {text[:20]!r}")
  try: header = json.loads(text, object_pairs_hook=_no_duplicates)
  except json.JSONDecodeError as e: raise FormatError(f"the header is not valid JSON: {e}") from None
  except RecursionError: raise FormatError("the header nests too deeply to be a safetensors header") from None
  except FormatError: raise
  except ValueError as e: raise FormatError(f"the header holds a number too long to read ({str(e).split(';')[0]})") from None
  meta = header.pop("__metadata__", None)
  if meta is None: meta = {}
  if type(meta) is not dict or not all(type(v) is str for v in meta.values()):
    raise FormatError(f"__metadata__ must map strings to strings, got {_brief.repr(meta)}")
  entries = []
  for name, info in header.items():
    if type(info) is not dict or not {"dtype", "shape", "data_offsets"} <= set(info):
      raise FormatError(f"tensor {_brief.repr(name)}: the entry needs dtype, shape and data_offsets, got {_brief.repr(info)}")
    dt, shape, offs = SAFETENSORS_DTYPES.get(info["dtype"]) if type(info["dtype"]) is str else None, info["shape"], info["data_offsets"]
    if dt is None:
      raise FormatError(f"tensor {_brief.repr(name)}: dtype {_brief.repr(info['dtype'])} is not supported (supported: {', '.join(SAFETENSORS_DTYPES)})")
    if type(shape) is not list or not all(_is_uint(s) for s in shape): raise FormatError(f"tensor {_brief.repr(name)}: invalid shape {_brief.repr(shape)}")
    if type(offs) is not list or len(offs) != 2 or not all(_is_uint(o) for o in offs) or offs[0] > offs[1]:
      raise FormatError(f"tensor {_brief.repr(name)}: invalid data_offsets {_brief.repr(offs)} (need [begin, end] with 0 <= begin <= end)")
    begin, end = offs
    if end > data_len: raise FormatError(f"tensor {_brief.repr(name)}: data_offsets {offs} go past the end of the data ({data_len} bytes; truncated file?)")
    if end - begin != (need := prod(shape) * dt.itemsize):
      raise FormatError(f"tensor {_brief.repr(name)}: data_offsets {offs} hold {end - begin} bytes, but shape {_brief.repr(shape)} of {info['dtype']} "
                        f"needs {need if need < 2**64 else 'over 2**64'}")
    entries.append((begin, end, name, dt, tuple(shape)))
  entries.sort(key=lambda e: (e[0], e[1]))
  pos = 0
  for begin, end, name, _, _ in entries:
    if begin != pos:
      raise FormatError(f"tensor {_brief.repr(name)} starts at data byte {begin} but the previous tensor ends at {pos} "
                        f"({'a gap' if begin > pos else 'an overlap'}; each data byte must belong to exactly one tensor)")
    pos = end
  if pos != data_len: raise FormatError(f"the tensors cover {pos} bytes but the data is {data_len} bytes (trailing bytes)")
  return {name: (dt, shape, begin, end) for begin, end, name, dt, shape in entries}, meta

def safe_load(fn: Source, device: Optional[str] = None) -> dict[str, Tensor]:
  """Read a safetensors file (path, bytes, memoryview or uint8 Tensor). From a path on the CPU the tensors use the mapped
  file without a copy (copy-on-write: writing to them never changes the file); bytes are copied once. A malformed file
  raises FormatError."""
  mem, src = _as_memory(fn), fn
  with _naming(src, "safetensors"):
    n = _header_length(bytes(mem[:8]), mem.nbytes)
    entries, _ = _parse_header(bytes(mem[8:8 + n]), mem.nbytes - 8 - n)
  return {name: _frombuffer(mem, 8 + n + b, 8 + n + e, dt, shape, device) for name, (dt, shape, b, e) in entries.items()}

def safe_load_metadata(t: Source) -> dict[str, str]:
  """The `__metadata__` of a safetensors file (empty if none), after validating the header; tensor data is not read.
  (tinygrad's returns the source tensor, the data's offset and the whole header instead.)"""
  src = t
  with _naming(src, "safetensors"):
    if isinstance(src, (str, os.PathLike)):
      with open(src, "rb") as f:
        total = os.fstat(f.fileno()).st_size
        n = _header_length(f.read(8), total)
        head = f.read(n)
    else:
      mem = _as_memory(src) if isinstance(src, Tensor) else memoryview(src).cast("B")
      total = mem.nbytes
      n = _header_length(bytes(mem[:8]), total)
      head = bytes(mem[8:8 + n])
    return _parse_header(head, total - 8 - n)[1]

def safe_save(tensors: dict[str, Tensor], fn, metadata: Optional[dict[str, str]] = None) -> None:
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
  _atomic_write(fn, write)

# ---------------------------------------------------------------------------------------------------------------
# pickles, without pickle.Unpickler: `unpickle` interprets the opcodes itself and builds only plain values (None, bools,
# numbers, str, bytes, lists, tuples, dicts, OrderedDicts, sets). A global is looked up by the loader's `find_global`,
# which gives inert stand-ins: a _Reducer (a function of the loader's, called by REDUCE with checked arguments) or a
# value; nothing is imported. Items are added only to the lists, dicts and sets the pickle built (SETITEM(S), APPEND(S),
# ADDITEMS), and BUILD gives state only to the loader's own records (_Record._setstate) or drops the attributes of an
# OrderedDict: no opcode can set an attribute of anything, so a file cannot change the process. Instances (NEWOBJ, or
# REDUCE without arguments) are made only of _Class stand-ins, which torch_load_modules alone gives: an empty
# PickledObject that BUILD's state fills once. Memory grows with the pickle's size: the memo is a dict (an index of
# 2**31 costs one entry), and the result is refused if it nests deeper than MAX_PICKLE_DEPTH or, counting every path to
# a shared container (what `flatten_state_dict` walks) with its key's length, expands past PICKLE_EXPANSION times the
# pickle's size plus 1M (a DAG of shared lists would be 2**40 paths; a dict shared by 1000 entries of a list costs 1000
# times its own size, which is fine).

MAX_PICKLE_DEPTH = 100
PICKLE_EXPANSION = 16

class _Reducer:
  """A global a loader lets a pickle call: `fn` with lo..hi positional arguments. Not itself callable."""
  __slots__ = ("fn", "lo", "hi")
  def __init__(self, fn: Callable, lo: int, hi: int): self.fn, self.lo, self.hi = fn, lo, hi

class _Record:
  """Base of a loader's own objects that take a pickle's BUILD state (through `_setstate`, which checks it)."""
  __slots__ = ()
  def _setstate(self, state): raise FormatError(f"BUILD gives state to a {type(self).__name__}, which takes none")

class _Class:
  """What a class named by a pickle stands for in torch_load_modules: its dotted name. Not callable, no __dict__."""
  __slots__ = ("name",)
  def __init__(self, name: str): self.name = name

class PickledObject(dict, _Record):
  """An object torch_load_modules read: its pickled state (the attributes BUILD gives) as a dict, and `cls`, the dotted
  name of its class (never imported). A torch module's entries are `_parameters`, `_buffers` and `_modules`."""
  __slots__ = ("cls",)
  def __init__(self, cls: str): super().__init__(); self.cls = cls
  def __repr__(self): return f"<{self.cls}: {', '.join(map(str, self))}>"
  def _setstate(self, state):
    if self: raise FormatError(f"BUILD gives state twice to a {self.cls}")
    if type(state) is not dict or not all(type(k) is str for k in state):
      raise FormatError(f"BUILD gives a {self.cls} the state {_brief.repr(state)} (only a dict of attributes is read)")
    self.update(state)

_KEY_TYPES = (str, bytes, int, float, bool, type(None))

def _key(k):
  """A dict key or set item of a pickle: a scalar, whose hash and repr cost time in proportion to its size."""
  if type(k) not in _KEY_TYPES or (type(k) is int and not -2**64 < k < 2**64):
    raise FormatError(f"a dict key or set item is a {type(k).__name__} {_brief.repr(k)} (only strings, bytes, 64-bit numbers and None are allowed)")
  return k

def _key_length(k) -> int: return len(k) if type(k) is str else 4 * len(k) + 3 if type(k) is bytes else len(str(k))   # of str(k), at most

def _check_expansion(root, limit: int) -> None:
  """Refuse a value nesting deeper than MAX_PICKLE_DEPTH (a cycle does) or whose dicts, lists and tuples, walked along
  every path, cost more than `limit` (1 per path plus the length of its dotted key)."""
  cost, stack = 0, [(iter((("", root),)), -1)]   # per level: the (key, child) pairs still to walk, the key length so far
  while stack:
    children, keylen = stack[-1]
    if (item := next(children, None)) is None:
      stack.pop()
      continue
    k, v = item
    n = keylen + 1 + _key_length(k)   # "parent.k"
    if (cost := cost + 1 + n) > limit:
      raise FormatError(f"its containers, counting each path to a shared one (or around a cycle) and its key, expand past {limit} "
                        f"(more than {PICKLE_EXPANSION}x the pickle's size: refused)")
    if isinstance(v, (dict, list, tuple)) and v:
      if len(stack) > MAX_PICKLE_DEPTH: raise FormatError(f"its containers nest deeper than {MAX_PICKLE_DEPTH} levels (or form a cycle)")
      stack.append((iter(v.items()) if isinstance(v, dict) else enumerate(v), n))

class _Unpickler:
  def __init__(self, data: bytes, find_global: Callable[[str, str], Any], persistent_load: Optional[Callable[[Any], Any]]):
    self.data, self.pos, self.find_global, self.persistent_load = data, 0, find_global, persistent_load
    self.stack: list = []
    self.push = self.stack.append
    self.marks: list[int] = []   # the stack's length at each open MARK
    self.memo: dict = {}

  def run(self) -> Any:
    data, ops = self.data, _PICKLE_OPS
    while True:
      if self.pos >= len(data): raise FormatError("the pickle ends before its STOP opcode (truncated?)")
      code = data[self.pos]
      self.pos += 1
      if (op := ops.get(code)) is None:
        raise FormatError(f"opcode {bytes([code])!r} at pickle byte {self.pos - 1} is unknown or refused (instances, extensions and "
                          "out-of-band buffers are)")
      if op(self) is _STOP: return self.pop()

  def fail(self, problem: str): raise FormatError(f"{problem} (the opcode at pickle byte {self.pos - 1})")

  # arguments
  def take(self, n: int) -> bytes:
    if (end := self.pos + n) > len(self.data): self.fail(f"the pickle ends inside a {n}-byte argument (truncated?)")
    self.pos, start = end, self.pos
    return self.data[start:end]
  def byte(self) -> int:
    if (pos := self.pos) >= len(self.data): self.fail("the pickle ends inside a 1-byte argument (truncated?)")
    self.pos = pos + 1
    return self.data[pos]
  def uint(self, n: int) -> int: return int.from_bytes(self.take(n), "little")
  def sint(self, n: int) -> int: return int.from_bytes(self.take(n), "little", signed=True)
  def counted(self, n: int) -> bytes:   # a length of n bytes (signed for 4, as pickle writes them), then that many bytes
    if (size := self.sint(4) if n == 4 else self.byte()) < 0: self.fail(f"negative length {size}")
    return self.take(size)
  def line(self) -> bytes:
    if (end := self.data.find(b"\n", self.pos)) < 0: self.fail("the pickle ends inside a line of text (truncated?)")
    self.pos, s = end + 1, self.data[self.pos:end]
    return s
  def parse(self, fn: Callable, s: bytes, what: str):
    try: return fn(s)
    except ValueError as e: self.fail(f"invalid {what} {_brief.repr(s)} ({e})")   # (UnicodeDecodeError is one)
  def text_int(self, what: str) -> int:   # INT's 00 and 01 are False and True; LONG's end in L
    if (s := self.line()) in (b"00", b"01"): return s == b"01"
    return self.parse(lambda b: int(b[:-1] if b.endswith(b"L") else b, 0), s, what)
  def utf8(self, s: bytes) -> str: return self.parse(lambda b: b.decode("utf-8", "surrogatepass"), s, "UTF-8 string")
  def quoted(self, s: bytes) -> bytes:   # STRING: a py2 str literal, kept as bytes (as CIFAR-10's files need)
    if len(s) < 2 or s[:1] not in (b"'", b'"') or s[-1:] != s[:1]: self.fail(f"STRING {_brief.repr(s)} is not quoted")
    return self.parse(lambda b: codecs.escape_decode(b)[0], s[1:-1], "STRING")

  # the stack: nothing below the innermost MARK may be popped
  def free(self) -> int: return len(self.stack) - (self.marks[-1] if self.marks else 0)
  def pop(self):
    if len(self.stack) <= (self.marks[-1] if self.marks else 0): self.fail("stack underflow")
    return self.stack.pop()
  def top(self):
    if len(self.stack) <= (self.marks[-1] if self.marks else 0): self.fail("stack underflow")
    return self.stack[-1]
  def pop_mark(self) -> list:
    if not self.marks: self.fail("no MARK to pop")
    k = self.marks.pop()
    items = self.stack[k:]
    del self.stack[k:]
    return items
  def pop_tuple(self, n: int) -> tuple:
    if self.free() < n: self.fail("stack underflow")
    items = tuple(self.stack[len(self.stack) - n:])
    del self.stack[len(self.stack) - n:]
    return items

  # opcodes that do more than push
  def mark(self): self.marks.append(len(self.stack))
  def pop_any(self): return self.pop() if self.free() else self.pop_mark()   # POP pops a MARK when nothing is above it
  def target(self, kinds: tuple, what: str):
    if type(t := self.top()) not in kinds: self.fail(f"{what} into a {type(t).__name__} (only into a container the pickle built)")
    return t
  def set_items(self, d: dict, items: list) -> dict:
    if len(items) % 2: self.fail("an odd number of items for a dict")
    for i in range(0, len(items), 2): d[_key(items[i])] = items[i + 1]
    return d
  def append(self): x = self.pop(); self.target((list,), "APPEND").append(x)
  def appends(self): items = self.pop_mark(); self.target((list,), "APPENDS").extend(items)
  def setitem(self): kv = self.pop_tuple(2); self.set_items(self.target(_DICTS, "SETITEM"), list(kv))
  def setitems(self): items = self.pop_mark(); self.set_items(self.target(_DICTS, "SETITEMS"), items)
  def additems(self): items = self.pop_mark(); self.target((set,), "ADDITEMS").update(_key(x) for x in items)
  def put(self, i: int): self.memo[i] = self.top()
  def get(self, i: int):
    if i not in self.memo: self.fail(f"memo entry {i} is read but was never stored")
    self.push(self.memo[i])
  def global_(self, module, name):
    if type(module) is not str or type(name) is not str: self.fail("a global named by non-strings")
    self.push(self.find_global(module, name))
  def reduce(self):
    fn, args = self.pop_tuple(2)
    if type(fn) is _Class: self.push(self.instance(fn, args, "REDUCE"))   # cls(), then BUILD: how SimpleNamespace pickles
    else:
      if type(fn) is not _Reducer: self.fail(f"REDUCE calls a {type(fn).__name__}, which is not callable")
      if type(args) is not tuple or not fn.lo <= len(args) <= fn.hi:
        self.fail(f"{fn.fn.__name__} takes {fn.lo} to {fn.hi} arguments, got {_brief.repr(args)}")
      self.push(fn.fn(*args))
  def instance(self, cls, args, how: str) -> "PickledObject":
    if type(cls) is not _Class: self.fail(f"{how} makes an instance of a {type(cls).__name__} (refused: instances are read only by torch_load_modules)")
    if args != (): self.fail(f"{how} calls the class {cls.name} with arguments {_brief.repr(args)} (refused: only cls() and its BUILD state are read)")
    return PickledObject(cls.name)
  def build(self):
    state = self.pop()
    if isinstance(inst := self.top(), _Record): inst._setstate(state)
    elif not (type(inst) is collections.OrderedDict and type(state) is dict):   # a state dict's attributes (_metadata): dropped
      self.fail(f"BUILD sets the state of a {type(inst).__name__} (refused)")
  def persistent(self, pid):
    if self.persistent_load is None: self.fail("a persistent id, which this kind of file does not have")
    self.push(self.persistent_load(pid))

_STOP, _DICTS = object(), (dict, collections.OrderedDict)
_PICKLE_OPS: dict[int, Callable[[_Unpickler], Any]] = {ord(c): f for c, f in {
  "\x80": lambda u: u.byte() <= 5 or u.fail("pickle protocol above 5"), "\x95": lambda u: u.take(8),   # PROTO, FRAME
  ".": lambda u: _STOP, "(": _Unpickler.mark, "0": _Unpickler.pop_any, "1": _Unpickler.pop_mark, "2": lambda u: u.push(u.top()),
  "N": lambda u: u.push(None), "\x88": lambda u: u.push(True), "\x89": lambda u: u.push(False),
  "I": lambda u: u.push(u.text_int("INT")),
  "J": lambda u: u.push(u.sint(4)), "K": lambda u: u.push(u.byte()), "M": lambda u: u.push(u.uint(2)), "L": lambda u: u.push(u.text_int("LONG")),
  "\x8a": lambda u: u.push(int.from_bytes(u.counted(1), "little", signed=True)), "\x8b": lambda u: u.push(int.from_bytes(u.counted(4), "little", signed=True)),
  "F": lambda u: u.push(u.parse(float, u.line(), "FLOAT")), "G": lambda u: u.push(struct.unpack(">d", u.take(8))[0]),
  "S": lambda u: u.push(u.quoted(u.line())), "T": lambda u: u.push(u.counted(4)), "U": lambda u: u.push(u.counted(1)),   # py2 str: bytes
  "B": lambda u: u.push(u.take(u.uint(4))), "C": lambda u: u.push(u.counted(1)), "\x8e": lambda u: u.push(u.take(u.uint(8))),
  "\x96": lambda u: u.push(bytearray(u.take(u.uint(8)))),
  "V": lambda u: u.push(u.parse(lambda b: b.decode("raw-unicode-escape"), u.line(), "UNICODE")),
  "X": lambda u: u.push(u.utf8(u.take(u.uint(4)))), "\x8c": lambda u: u.push(u.utf8(u.counted(1))), "\x8d": lambda u: u.push(u.utf8(u.take(u.uint(8)))),
  "]": lambda u: u.push([]), "}": lambda u: u.push({}), ")": lambda u: u.push(()), "\x8f": lambda u: u.push(set()),
  "l": lambda u: u.push(u.pop_mark()), "t": lambda u: u.push(tuple(u.pop_mark())), "d": lambda u: u.push(u.set_items({}, u.pop_mark())),
  "\x91": lambda u: u.push(frozenset(_key(x) for x in u.pop_mark())),
  "\x85": lambda u: u.push(u.pop_tuple(1)), "\x86": lambda u: u.push(u.pop_tuple(2)), "\x87": lambda u: u.push(u.pop_tuple(3)),
  "a": _Unpickler.append, "e": _Unpickler.appends, "s": _Unpickler.setitem, "u": _Unpickler.setitems, "\x90": _Unpickler.additems,
  "p": lambda u: u.put(u.text_int("PUT index")), "q": lambda u: u.put(u.byte()), "r": lambda u: u.put(u.uint(4)), "\x94": lambda u: u.put(len(u.memo)),
  "g": lambda u: u.get(u.text_int("GET index")), "h": lambda u: u.get(u.byte()), "j": lambda u: u.get(u.uint(4)),
  "c": lambda u: u.global_(u.utf8(u.line()), u.utf8(u.line())), "\x93": lambda u: u.global_(*u.pop_tuple(2)),
  "R": _Unpickler.reduce, "b": _Unpickler.build, "\x81": lambda u: u.push(u.instance(*u.pop_tuple(2), "NEWOBJ (opcode b'\\x81')")),
  "P": lambda u: u.persistent(u.parse(lambda b: b.decode("ascii"), u.line(), "persistent id")), "Q": lambda u: u.persistent(u.pop()),
}.items()}

def unpickle(data: bytes, find_global: Callable[[str, str], Any], persistent_load: Optional[Callable[[Any], Any]] = None) -> Any:
  """The value pickled in `data` (protocols 0-5), built from plain values only. `find_global(module, name)` gives what a
  global stands for (a _Reducer to allow REDUCE on it, or an inert value) or raises FormatError; `persistent_load(pid)`
  what a persistent id stands for. Malformed or refused pickles raise FormatError."""
  return _unpickle_at(bytes(data), 0, find_global, persistent_load)[0]

def _unpickle_at(data: bytes, start: int, find_global: Callable[[str, str], Any],
                 persistent_load: Optional[Callable[[Any], Any]] = None) -> tuple[Any, int]:
  """The value of the pickle that starts at data[start], and where that pickle ends (files may hold several in a row)."""
  u = _Unpickler(data, find_global, persistent_load)
  u.pos = start
  result = u.run()
  _check_expansion(result, PICKLE_EXPANSION * (u.pos - start) + (1 << 20))
  return result, u.pos

# ---------------------------------------------------------------------------------------------------------------
# PyTorch checkpoints (the zip format of torch.save since 1.6): <dir>/data.pkl is a pickle (protocol 2) whose tensors
# are `torch._utils._rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])` (v3 adds a
# dtype before metadata, for untyped storages); each storage is a persistent id ('storage', StorageType, key,
# location, numel) whose numel elements (bytes for an untyped storage) are the zip member <dir>/data/<key>.

_STORAGE_DTYPES = {
  "FloatStorage": dtypes.float32, "DoubleStorage": dtypes.float64, "HalfStorage": dtypes.float16, "BFloat16Storage": dtypes.bfloat16,
  "LongStorage": dtypes.int64, "IntStorage": dtypes.int32, "ShortStorage": dtypes.int16, "CharStorage": dtypes.int8,
  "ByteStorage": dtypes.uint8, "BoolStorage": dtypes.bool, "UInt16Storage": dtypes.uint16, "UInt32Storage": dtypes.uint32,
  "UInt64Storage": dtypes.uint64}
_TORCH_DTYPES = {d.name: d for d in dtypes.all}
VIEWS_PER_STORAGE = 8   # the tensors over one storage may together read this many times its bytes (views, tied weights)

class _Marker:
  """What a global stands for when a loader passes it as a value (a torch storage class or dtype, numpy.ndarray): an
  inert object, not callable, without a __dict__."""
  __slots__ = ("kind", "dtype")
  def __init__(self, kind: str, dtype: Optional[DType]): self.kind, self.dtype = kind, dtype

class _Storage:
  """A storage's bytes: mem[start:start + nbytes] (mem None while not yet placed: legacy checkpoints); `viewed` counts
  the bytes of the tensors made over it."""
  __slots__ = ("key", "mem", "start", "nbytes", "dtype", "viewed")
  def __init__(self, key: str, mem: Optional[memoryview], start: int, nbytes: int, dtype: Optional[DType]):
    self.key, self.mem, self.start, self.nbytes, self.dtype, self.viewed = key, mem, start, nbytes, dtype, 0

def _marker_dtype(m: Any, kind: str) -> Optional[DType]:
  if not isinstance(m, _Marker) or m.kind != kind: raise FormatError(f"expected a torch {kind}, got {_brief.repr(m)}")
  return m.dtype

def _strided_view(base: Tensor, size: tuple[int, ...], stride: tuple[int, ...]) -> Tensor:
  """`base` (1-D, from the first element of the view) seen with `size` and `stride` (in elements), built from pad,
  reshape, shrink, permute and expand. Handles any layout whose dimensions do not overlap (transposes, slices,
  broadcasts); overlapping ones (e.g. sliding windows) raise."""
  dims = sorted(((st, s, i) for i, (s, st) in enumerate(zip(size, stride)) if s > 1 and st > 0), reverse=True)
  x, length = base, base.shape[0]
  for j, (st, s, _) in enumerate(dims):
    rest = 1 + sum((s2 - 1) * st2 for st2, s2, _ in dims[j + 1:])   # span of the smaller-stride dimensions
    if rest > st: raise FormatError(f"a tensor with size {size} and overlapping strides {stride} is not supported")
    # x is (..., length) with length = (s-1)*st + rest: pad to s*st, split into (s, st), keep the first `rest`
    x = x.pad((None,) * (x.ndim - 1) + ((0, s * st - length),)).reshape(*x.shape[:-1], s, st)
    x = x.shrink((None,) * (x.ndim - 1) + ((0, rest),)) if rest != st else x
    length = rest
  x = x.shrink((None,) * (x.ndim - 1) + ((0, 1),)).reshape(x.shape[:-1])   # the one remaining element
  order = [i for _, _, i in dims]
  x = x.permute([order.index(i) for i in sorted(order)])
  return x.reshape(tuple(s if i in order else 1 for i, s in enumerate(size))).expand(size)

def _uints(x, what: str) -> tuple[int, ...]:
  if type(x) not in (tuple, list) or not all(_is_uint(v) for v in x): raise FormatError(f"invalid {what} {_brief.repr(x)}")
  return tuple(x)

class _PendingTensor(_Record):
  """A tensor of a legacy checkpoint, made once its storage's place in the file is known (the storages follow the pickle)."""
  __slots__ = ("args",)
  def __init__(self, args: tuple): self.args = args

def _rebuild(storage: Any, offset: Any, size: Any, stride: Any, dtype: Optional[DType], device: Optional[str]) -> Tensor:
  if not isinstance(storage, _Storage): raise FormatError(f"a tensor's storage is a {type(storage).__name__}")
  if storage.mem is None: return _PendingTensor((storage, offset, size, stride, dtype, device))
  dt = dtype or storage.dtype
  if dt is None: raise FormatError("an untyped storage is used without a dtype")
  size, stride = _uints(size, "tensor size"), _uints(stride, "tensor stride")
  if len(size) != len(stride) or not _is_uint(offset):
    raise FormatError(f"invalid tensor layout: offset {_brief.repr(offset)}, size {size}, stride {stride}")
  numel, isz, avail = prod(size), dt.itemsize, storage.nbytes // dt.itemsize
  if numel == 0: return Tensor.frombuffer(bytearray(0), dt, size, device)
  span = 1 + sum((s - 1) * st for s, st in zip(size, stride))
  if offset + span > avail:
    raise FormatError(f"a tensor with offset {offset}, size {size}, stride {stride} reads past the end of storage "
                      f"{storage.key!r} ({avail} {dt.name} elements)")
  storage.viewed += span * isz   # the bytes this tensor takes from the storage (a broadcast takes one element, lazily expanded)
  if storage.viewed > VIEWS_PER_STORAGE * storage.nbytes:
    raise FormatError(f"the tensors over storage {storage.key!r} read more than {VIEWS_PER_STORAGE}x its {storage.nbytes} bytes")
  start = storage.start + offset * isz
  expected, contiguous = 1, True
  for s, st in reversed(list(zip(size, stride))):
    if s != 1 and st != expected: contiguous = False
    expected *= s
  if contiguous: return _frombuffer(storage.mem, start, start + numel * isz, dt, size, device)
  return _strided_view(_frombuffer(storage.mem, start, start + span * isz, dt, None, device), size, stride)

def _encode(s: Any, encoding: Any = "utf-8") -> bytes:   # protocol-2 pickles store bytes as _codecs.encode(str, "latin1")
  if type(s) is not str or encoding not in ("latin1", "latin-1"): raise FormatError(f"refusing _codecs.encode({_brief.repr(s)}, {_brief.repr(encoding)})")
  return s.encode("latin1")

def _ordered_dict(items: Any = ()) -> collections.OrderedDict:
  if type(items) not in (list, tuple) or not all(type(p) in (list, tuple) and len(p) == 2 for p in items):
    raise FormatError(f"OrderedDict of {_brief.repr(items)} (expected [key, value] pairs)")
  return collections.OrderedDict((_key(k), v) for k, v in items)

def _torch_size(dims: Any = ()) -> tuple[int, ...]: return _uints(dims, "torch.Size")

def _torch_device(kind: Any, index: Any = None) -> str:
  if type(kind) is not str or not (index is None or _is_uint(index)): raise FormatError(f"invalid torch.device({_brief.repr(kind)}, {_brief.repr(index)})")
  return kind if index is None else f"{kind}:{index}"

def _parameter(data: Any, *_) -> Tensor:   # a Parameter is loaded as its tensor
  if not isinstance(data, (Tensor, _PendingTensor)): raise FormatError(f"a Parameter of a {type(data).__name__}")
  return data

def _torch_globals(device: Optional[str]) -> dict[tuple[str, str], Any]:
  """The globals a checkpoint may name, as stand-ins for unpickle; storage classes and dtypes are _Markers."""
  table: dict[tuple[str, str], Any] = {
    ("collections", "OrderedDict"): _Reducer(_ordered_dict, 0, 1),
    ("torch._utils", "_rebuild_tensor"): _Reducer(lambda st, off, size, stride: _rebuild(st, off, size, stride, None, device), 4, 4),
    ("torch._utils", "_rebuild_tensor_v2"): _Reducer(lambda st, off, size, stride, *_: _rebuild(st, off, size, stride, None, device), 4, 7),
    ("torch._utils", "_rebuild_tensor_v3"):
      _Reducer(lambda st, off, size, stride, _rg, _hooks, dtype, *_: _rebuild(st, off, size, stride, _marker_dtype(dtype, "dtype"), device), 7, 8),
    ("torch._utils", "_rebuild_parameter"): _Reducer(_parameter, 1, 3),
    ("torch._utils", "_rebuild_parameter_with_state"): _Reducer(_parameter, 1, 4),
    ("torch", "Size"): _Reducer(_torch_size, 0, 1), ("torch", "device"): _Reducer(_torch_device, 1, 2),
    ("_codecs", "encode"): _Reducer(_encode, 1, 2),
    ("torch", "UntypedStorage"): _Marker("storage", None), ("torch.storage", "UntypedStorage"): _Marker("storage", None)}
  table.update({("torch", name): _Marker("storage", dt) for name, dt in _STORAGE_DTYPES.items()})
  table.update({("torch", name): _Marker("dtype", dt) for name, dt in _TORCH_DTYPES.items()})
  return table

def _set(items: Any = ()) -> set:
  if type(items) not in (list, tuple): raise FormatError(f"set of {_brief.repr(items)} (expected a list)")
  return {_key(x) for x in items}

def _reconstructor(cls: Any, base: Any, state: Any) -> PickledObject:   # protocols 0 and 1: copyreg._reconstructor(cls, object, None)
  if type(cls) is not _Class or base is not _OBJECT or state is not None:
    raise FormatError(f"refusing copyreg._reconstructor({_brief.repr(cls)}, {_brief.repr(base)}, {_brief.repr(state)})")
  return PickledObject(cls.name)

_OBJECT = _Marker("object", None)
# what torch_load_modules allows besides torch_load's globals (a module's set of non-persistent buffer names; objects of
# protocol 0/1 pickles)
_MODULE_GLOBALS: dict[tuple[str, str], Any] = {
  ("builtins", "set"): _Reducer(_set, 0, 1), ("__builtin__", "set"): _Reducer(_set, 0, 1),
  ("builtins", "object"): _OBJECT, ("__builtin__", "object"): _OBJECT, ("copyreg", "_reconstructor"): _Reducer(_reconstructor, 3, 3)}

def _zip_read(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> bytes:
  """A member's bytes (at most its declared size, which zipfile holds the stream to), or FormatError."""
  if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.flag_bits & 1:
    raise FormatError(f"member {info.filename!r} is encrypted or uses compression method {info.compress_type} (stored or deflated only)")
  try: return zf.read(info)
  except (zipfile.BadZipFile, zlib.error, EOFError) as e: raise FormatError(f"cannot read member {info.filename!r}: {e}") from None

def _member(zf: zipfile.ZipFile, name: str, mem: Optional[memoryview]) -> tuple[zipfile.ZipInfo, memoryview, int]:
  """A zip member, its bytes and their position in them: in place in `mem` when stored uncompressed (what torch writes)."""
  try: info = zf.getinfo(name)
  except KeyError: raise FormatError(f"the checkpoint has no member {name!r} (corrupt file?)") from None
  if mem is not None and info.compress_type == zipfile.ZIP_STORED and info.compress_size == info.file_size and not info.flag_bits & 1:
    off = info.header_offset
    if bytes(mem[off:off + 4]) != b"PK\x03\x04": raise FormatError(f"bad zip local header for {name!r} (corrupt file?)")
    start = off + 30 + int.from_bytes(mem[off + 26:off + 28], "little") + int.from_bytes(mem[off + 28:off + 30], "little")
    if start + info.file_size > mem.nbytes: raise FormatError(f"member {name!r} goes past the end of the file (truncated?)")
    if start % 8 == 0: return info, mem, start
    return info, memoryview(bytearray(mem[start:start + info.file_size])), 0   # aligned once here, not once per tensor
  return info, memoryview(bytearray(_zip_read(zf, info))), 0

def torch_load(t: Source, device: Optional[str] = None) -> Any:
  """Load a `torch.save` checkpoint (the zip format, or the legacy one of PyTorch < 1.6) without torch: the pickled
  structure (dicts, OrderedDicts, lists, numbers) with tinyweb Tensors in place of torch tensors. Storages are used in
  place where possible (mmap of a path). A malformed checkpoint, or a pickle that names any other global, raises
  FormatError."""
  return _torch_load(t, device, _torch_find_global(device), "torch_load")

def torch_load_modules(t: Source, device: Optional[str] = None) -> Any:
  """Load a checkpoint that pickles whole modules (ultralytics' `.pt`: {"model": DetectionModel, "names": ...}) like
  torch_load, except that each object of a class the pickle names (a global whose name starts with a capital letter:
  other names are refused) is read as a PickledObject: the dict of attributes the pickle gives it, and its class's
  name. The class is never imported, called or given anything; an object made with arguments is refused, as is all
  torch_load refuses. `pickled_state_dict` then gives a module's tensors by name."""
  return _torch_load(t, device, _torch_find_global(device, modules=True), "torch_load_modules")

def pickled_state_dict(module: Any, prefix: str = "") -> dict[str, Tensor]:
  """What torch's `module.state_dict()` holds, from a module torch_load_modules read: the `_parameters` and persistent
  `_buffers` of the module and of its `_modules`, recursively, by dotted name ("model.0.conv.weight"); None entries
  (a layer without bias) are left out."""
  if not isinstance(module, PickledObject) or not all(type(module.get(k)) in _DICTS for k in ("_parameters", "_buffers", "_modules")):
    raise FormatError(f"{prefix.rstrip('.') or 'the object'} is not a torch module (a {getattr(module, 'cls', type(module).__name__)} "
                      "without _parameters, _buffers and _modules)")
  skip = s if isinstance(s := module.get("_non_persistent_buffers_set"), (set, frozenset)) else set()
  out = {f"{prefix}{k}": v for k, v in module["_parameters"].items() if v is not None}
  out.update((f"{prefix}{k}", v) for k, v in module["_buffers"].items() if v is not None and k not in skip)
  for k, v in module["_modules"].items():
    if v is not None: out.update(pickled_state_dict(v, f"{prefix}{k}."))
  for k, v in out.items():
    if not isinstance(v, Tensor): raise FormatError(f"{k} is a {type(v).__name__}, not a tensor")
  return out

def _torch_load(t: Source, device: Optional[str], find_global: Callable[[str, str], Any], loader: str) -> Any:
  mem, src = _as_memory(t), t
  with _naming(src, loader):
    try: zf = zipfile.ZipFile(os.fspath(src) if isinstance(src, (str, os.PathLike)) else io.BytesIO(mem))
    except (zipfile.BadZipFile, ValueError, EOFError):
      if mem.nbytes > 1 and mem[0] == 0x80 and 2 <= mem[1] <= 5: return _legacy_torch_load(mem, find_global)   # a pickle (PROTO 2+)
      raise FormatError("not a PyTorch zip checkpoint (no zip directory found: truncated, or another format?)") from None
    with zf:
      names = zf.namelist()
      pkls = [n for n in names if n.endswith("/data.pkl") and n.count("/") == 1]
      if not pkls: raise FormatError(f"no <dir>/data.pkl in the zip (a TorchScript or other archive?): {_brief.repr(names)}")
      root = pkls[0][:-len("data.pkl")]
      if root + "byteorder" in names and _zip_read(zf, zf.getinfo(root + "byteorder")).strip() != b"little":
        raise FormatError("big-endian checkpoints are not supported")
      storages: dict[str, _Storage] = {}
      def load_storage(pid: Any) -> _Storage:
        if not (type(pid) is tuple and len(pid) == 5 and pid[0] == "storage" and type(pid[2]) is str and _is_uint(pid[4])):
          raise FormatError(f"unsupported persistent id {_brief.repr(pid)}")
        dtype, key, numel = _marker_dtype(pid[1], "storage"), pid[2], pid[4]
        nbytes = numel * (dtype.itemsize if dtype else 1)
        if (st := storages.get(key)) is None:
          info, data, start = _member(zf, f"{root}data/{key}", mem)
          if info.file_size != nbytes:
            raise FormatError(f"storage {key!r} holds {numel} {dtype.name if dtype else 'bytes'} ({nbytes} bytes) but its member "
                              f"has {info.file_size} bytes")
          st = storages[key] = _Storage(key, data, start, nbytes, dtype)
        elif (st.dtype, st.nbytes) != (dtype, nbytes): raise FormatError(f"storage {key!r} is declared twice, differently")
        return st
      return unpickle(_zip_read(zf, zf.getinfo(pkls[0])), find_global, load_storage)

def _torch_find_global(device: Optional[str], modules: bool = False) -> Callable[[str, str], Any]:
  table = _torch_globals(device) | (_MODULE_GLOBALS if modules else {})
  def find_global(module: str, name: str) -> Any:
    if (g := table.get((module, name))) is not None: return g
    if modules and name[:1].isupper(): return _Class(f"{module}.{name}")   # a class, by Python's naming convention
    raise FormatError(f"refusing to load global '{module}.{name}': only tensors, storages, plain containers"
                      f"{' and classes' if modules else ''} are allowed in a checkpoint")
  return find_global

LEGACY_MAGIC, LEGACY_PROTOCOL = 0x1950a86a20f9469cfc6c, 1001

def _legacy_torch_load(mem: memoryview, find_global: Callable[[str, str], Any]) -> Any:
  """torch.save's format before PyTorch 1.6: pickles in a row (the magic number, the protocol version, the writer's
  system info, the object, the storage keys in file order), then each storage as its int64 element count and its
  bytes. The object's storages are persistent ids ('storage', StorageType, key, location, numel, view) where view is
  None or (view_key, offset, numel) of a slice of storage `key`."""
  data = bytes(mem)   # the pickles (the storages are read from `mem` in place)
  def no_globals(module: str, name: str): raise FormatError(f"a global '{module}.{name}' outside the checkpoint's object")
  magic, pos = _unpickle_at(data, 0, no_globals)
  version, pos = _unpickle_at(data, pos, no_globals)
  if magic != LEGACY_MAGIC or version != LEGACY_PROTOCOL:
    raise FormatError(f"not a legacy torch.save file (magic number {_brief.repr(magic)}, protocol {_brief.repr(version)})")
  info, pos = _unpickle_at(data, pos, no_globals)
  if not isinstance(info, dict) or info.get("little_endian") is not True: raise FormatError("big-endian checkpoints are not supported")
  roots: dict[str, _Storage] = {}
  views: dict[str, tuple[_Storage, _Storage, int]] = {}   # view key -> (the view, its root, offset in elements)
  def declare(pid: Any) -> _Storage:
    if type(pid) is tuple and len(pid) >= 2 and pid[0] == "module":
      raise FormatError("the checkpoint pickles whole modules (their classes and source code): only state dicts and plain containers load")
    if not (type(pid) is tuple and len(pid) == 6 and pid[0] == "storage" and type(pid[2]) is str and _is_uint(pid[4])):
      raise FormatError(f"unsupported persistent id {_brief.repr(pid)}")
    dtype, key, numel, view = _marker_dtype(pid[1], "storage"), pid[2], pid[4], pid[5]
    isz = dtype.itemsize if dtype else 1   # an untyped storage counts bytes
    if (root := roots.get(key)) is None: root = roots[key] = _Storage(key, None, 0, numel * isz, dtype)
    elif (root.dtype, root.nbytes) != (dtype, numel * isz): raise FormatError(f"storage {key!r} is declared twice, differently")
    if view is None: return root
    if not (type(view) is tuple and len(view) == 3 and type(view[0]) is str and _is_uint(view[1]) and _is_uint(view[2])
            and view[1] + view[2] <= numel):
      raise FormatError(f"invalid view {_brief.repr(view)} of storage {key!r} ({numel} elements)")
    if view[0] not in views: views[view[0]] = (_Storage(view[0], None, 0, view[2] * isz, dtype), root, view[1] * isz)
    return views[view[0]][0]
  obj, pos = _unpickle_at(data, pos, find_global, declare)
  keys, pos = _unpickle_at(data, pos, no_globals)
  if type(keys) is not list or not all(type(k) is str for k in keys) or set(keys) != set(roots) or len(keys) != len(roots):
    raise FormatError(f"the storage list {_brief.repr(keys)} does not name the object's {len(roots)} storages once each")
  for key in keys:
    st = roots[key]
    if pos + 8 > len(mem): raise FormatError(f"the file ends before storage {key!r} (truncated?)")
    isz = st.dtype.itemsize if st.dtype else 1
    if (n := int.from_bytes(mem[pos:pos + 8], "little")) * isz != st.nbytes:
      raise FormatError(f"storage {key!r} holds {n} elements in the file but {st.nbytes // isz} in the object")
    if pos + 8 + st.nbytes > len(mem): raise FormatError(f"storage {key!r} goes past the end of the file (truncated?)")
    st.mem, st.start, pos = mem, pos + 8, pos + 8 + st.nbytes
  for view, root, offset in views.values(): view.mem, view.start = mem, root.start + offset
  def place(x: Any) -> Any:   # (the containers were bounded by _unpickle_at's expansion check)
    if isinstance(x, _PendingTensor): return _rebuild(*x.args)
    if isinstance(x, dict):
      for k, v in x.items(): x[k] = place(v)
    elif isinstance(x, list): x[:] = [place(v) for v in x]
    elif isinstance(x, tuple): return tuple(place(v) for v in x)
    return x
  return place(obj)

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

# ---------------------------------------------------------------------------------------------------------------
# tinygrad's names: archives as tensors, a tensor as a file, the safetensors dtype tables

safe_dtypes = SAFETENSORS_DTYPES                        # safetensors dtype name -> DType
inverse_safe_dtypes = {v: k for k, v in safe_dtypes.items()}   # DType -> safetensors dtype name

class TensorIO(io.RawIOBase):
  """A 1-D uint8 Tensor as a read-only binary file (seekable; its bytes are read from the device once, at the first read)."""
  def __init__(self, t: Tensor):
    if not isinstance(t, Tensor) or t.dtype != dtypes.uint8 or t.ndim != 1:
      raise ValueError(f"TensorIO: needs a 1-D uint8 Tensor, got {getattr(t, 'dtype', type(t).__name__)} of shape {getattr(t, 'shape', None)}")
    super().__init__()
    self._tensor, self._position, self._mem = t, 0, None
  def readable(self) -> bool: return True
  def seekable(self) -> bool: return True
  def readinto(self, buffer) -> int:
    if self._mem is None: self._mem = _tensor_bytes(self._tensor)
    data = self._mem[self._position:self._position + len(buffer)]
    buffer[:len(data)] = data
    self._position += len(data)
    return len(data)
  def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
    """Like a file's: past the end is allowed (reads give nothing there), before the start is not."""
    if (pos := (0, self._position, len(self._tensor))[whence] + offset) < 0: raise ValueError(f"TensorIO: negative seek position {pos}")
    self._position = pos
    return pos
  def tell(self) -> int: return self._position

def accept_filename(func: Callable[[Tensor], Any]) -> Callable[..., Any]:
  """Decorator: a function of a file's contents as a 1-D uint8 Tensor also takes a path (read into such a tensor: on
  the CPU over the mapped file, without a copy)."""
  @functools.wraps(func)
  def wrapper(fn):
    return func(fn if isinstance(fn, Tensor) else Tensor.frombuffer(_map_file(fn), dtypes.uint8))
  return wrapper

def _archive_tensor(mem: memoryview, start: int, size: int, device: Optional[str]) -> Tensor:
  return Tensor.frombuffer(mem[start:start + size], dtypes.uint8, (size,), device)

def zip_extract(t: Source) -> dict[str, Tensor]:
  """The files of a zip archive (path, bytes or uint8 Tensor) as 1-D uint8 tensors, by name: a stored member is a view of
  the archive's bytes, a deflated one is decompressed (to at most its declared size). Malformed: FormatError."""
  mem, device = _as_memory(t), t.device if isinstance(t, Tensor) else None
  with _naming(t, "zip_extract"):
    try: zf = zipfile.ZipFile(io.BytesIO(mem))
    except (zipfile.BadZipFile, ValueError, EOFError) as e: raise FormatError(f"not a zip archive ({e})") from None
    with zf:
      out = {}
      for info in zf.infolist():
        if info.is_dir(): continue
        _, data, start = _member(zf, info.filename, mem)
        out[info.filename] = _archive_tensor(data, start, info.file_size, device)
      return out

def tar_extract(t: Source) -> dict[str, Tensor]:
  """The regular files of an (uncompressed) tar archive (path, bytes or uint8 Tensor) as 1-D uint8 tensors over its
  bytes, by name. Malformed, truncated or compressed: FormatError."""
  mem, device = _as_memory(t), t.device if isinstance(t, Tensor) else None
  with _naming(t, "tar_extract"):
    if bytes(mem[:2]) == b"\x1f\x8b": raise FormatError("a gzip-compressed archive: decompress it first (e.g. fetch(url, gunzip=True))")
    try:
      with tarfile.open(fileobj=io.BytesIO(mem), mode="r:") as tf: members = [m for m in tf if m.isreg()]
    except (tarfile.TarError, EOFError) as e: raise FormatError(f"not a tar archive, or a truncated one ({e})") from None
    return {m.name: _archive_tensor(mem, m.offset_data, m.size, device) for m in members}

def _no_tinyfs(name: str):
  raise NotImplementedError(f"{name}: tinyfs (tinygrad's content-addressed store on its tinyfs devices) does not exist in tinyweb; "
                            "save tensors with safe_save / save_checkpoint instead")
def fs_store(t: Tensor) -> Tensor:
  """tinygrad's tinyfs store: not in tinyweb (raises NotImplementedError)."""
  _no_tinyfs("fs_store")
def fs_load(t: Tensor, size: int) -> Tensor:
  """tinygrad's tinyfs load: not in tinyweb (raises NotImplementedError)."""
  _no_tinyfs("fs_load")
