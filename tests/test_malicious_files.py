"""Malicious and malformed files, each built here byte by byte (pickle opcodes, struct, zipfile, gzip): every loader
(safetensors, torch checkpoints, IDX, CIFAR-10 pickles, checkpoints) must raise the one documented FormatError naming
the file and the problem, change nothing in the process (no attribute, default or module entry), and stay within a
small multiple of the file's size in memory (tracemalloc's peak)."""
import builtins, codecs, collections, functools, gzip, io, json, os, pickle, struct, tracemalloc, zipfile, zlib, _codecs
import pytest
from tinyweb import Tensor
from tinyweb.nn import state, datasets
from tinyweb.nn.state import FormatError, safe_load, safe_load_metadata, torch_load, torch_load_modules, load_checkpoint, save_checkpoint


# ---------------------------------------------------------------------------------------------------------------
# what a file must not change, and how much memory it may take

def _summary(x):
  """What BUILD or SETITEM could change on `x`: a function's defaults and attributes, an object's slots."""
  if hasattr(x, "__code__"): return (repr(x.__defaults__), repr(x.__kwdefaults__), sorted(vars(x)))
  if isinstance(x, (state._Reducer, state._Marker)): return tuple(_summary(getattr(x, s)) if s == "fn" else repr(getattr(x, s)) for s in x.__slots__)
  return None

def process_state() -> dict:
  """Every entry of the loaders' modules and of the modules a pickle names, with the defaults and attributes of their
  functions, the attributes of their classes and the stand-ins in their tables."""
  snap = {}
  for mod in (state, datasets, collections, _codecs, codecs, builtins, os):
    for k, v in list(vars(mod).items()):
      snap[mod.__name__, k] = (id(v), _summary(v))
      if isinstance(v, type) and v.__module__ == mod.__name__:
        snap[mod.__name__, k, "vars"] = {k2: (id(v2), _summary(v2)) for k2, v2 in vars(v).items()}
      if isinstance(v, dict) and mod in (state, datasets):
        snap[mod.__name__, k, "items"] = {repr(k2): _summary(v2) for k2, v2 in v.items()}
  snap["torch globals"] = {k: _summary(v) for k, v in state._torch_globals("CPU").items()}
  return snap

def refused(load, src, *words, name=None, per_byte=20):
  """`load(src)` raises FormatError naming the file (or the bytes, or `name`) and each of `words`, changes nothing in
  the process, and its peak of traced memory (on a second call) stays under `per_byte` times the file's size + 4 MB."""
  size = os.path.getsize(src) if isinstance(src, (str, os.PathLike)) else len(src)
  name = name or (str(src) if isinstance(src, (str, os.PathLike)) else f"<bytes of {size} bytes>")
  before = process_state()
  # a first, untraced call: what a loader sets up once per process (a lazy import, the default device) is not the file's
  with pytest.raises(FormatError): load(src)
  tracemalloc.start()
  try:
    with pytest.raises(FormatError) as e: load(src)
    peak = tracemalloc.get_traced_memory()[1]
  finally: tracemalloc.stop()
  msg = str(e.value)
  assert msg.startswith(f"{name}: "), msg
  for w in words: assert w in msg, (w, msg)
  assert peak < per_byte * size + (4 << 20), f"{peak / 1e6:.1f} MB for a file of {size} bytes"
  assert process_state() == before
  return msg

# ---------------------------------------------------------------------------------------------------------------
# pickles, opcode by opcode

PROTO2, MARK, STOP, NONE, FALSE = b"\x80\x02", b"(", b".", b"N", b"\x89"
EMPTY_LIST, EMPTY_DICT, EMPTY_TUPLE = b"]", b"}", b")"
TUPLE, TUPLE2, APPEND, APPENDS, SETITEM, REDUCE, BUILD, BINPERSID = b"t", b"\x86", b"a", b"e", b"s", b"R", b"b", b"Q"

def glob(module: str, name: str) -> bytes: return b"c" + module.encode() + b"\n" + name.encode() + b"\n"
def text(s: str) -> bytes: return b"X" + struct.pack("<I", len(s.encode())) + s.encode()   # BINUNICODE
def num(n: int) -> bytes: return b"J" + struct.pack("<i", n)                              # BININT
def put(k: int) -> bytes: return b"r" + struct.pack("<I", k)                              # LONG_BINPUT
def get(k: int) -> bytes: return b"j" + struct.pack("<I", k)                              # LONG_BINGET
def tup(*items: bytes) -> bytes: return MARK + b"".join(items) + TUPLE

def tensor_record(key="0", storage="ByteStorage", numel=4, offset=0, size=(4,), stride=(1,)) -> bytes:
  """torch._utils._rebuild_tensor_v2(<storage key>, offset, size, stride, False, OrderedDict()), as torch.save writes it."""
  pid = tup(text("storage"), glob("torch", storage), text(key), text("cpu"), num(numel))
  return (glob("torch._utils", "_rebuild_tensor_v2") + MARK + pid + BINPERSID + num(offset) + tup(*map(num, size)) + tup(*map(num, stride))
          + FALSE + glob("collections", "OrderedDict") + EMPTY_TUPLE + REDUCE + TUPLE + REDUCE)

def pt_file(pickle_body: bytes, storages: dict = None, byteorder="little") -> bytes:
  """A torch.save zip: archive/data.pkl (protocol 2 + body + STOP) and archive/data/<key> members."""
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as z:
    z.writestr("archive/data.pkl", PROTO2 + pickle_body + STOP)
    z.writestr("archive/byteorder", byteorder)
    for key, data in (storages or {}).items(): z.writestr(f"archive/data/{key}", data)
    z.writestr("archive/version", "3\n")
  return buf.getvalue()

def write(tmp_path, name: str, data: bytes):
  (tmp_path / name).write_bytes(data)
  return tmp_path / name

def load_pt(src): return torch_load(src, device="CPU")

@pytest.fixture(autouse=True, scope="module")
def warm():
  """A device's first use (imports, allocator) is not a file's memory: load a good checkpoint once first."""
  Tensor([1.0]).realize()
  assert load_pt(pt_file(tensor_record(), {"0": bytes(4)})).tolist() == [0, 0, 0, 0]

def check_pt(tmp_path, data: bytes, *words, per_byte=20) -> str:
  """The .pt is refused the same way from a path and from bytes."""
  refused(load_pt, data, *words, per_byte=per_byte)
  return refused(load_pt, write(tmp_path, "x.pt", data), *words, per_byte=per_byte)

# BUILD (state (None, {"__defaults__": ...}) sets attributes; a dict state fills __dict__) on what a global stands for
SLOTSTATE = tup(NONE, EMPTY_DICT + text("__defaults__") + tup(text("pwned")) + SETITEM)
DICTSTATE = EMPTY_DICT + text("pwned") + num(1) + SETITEM
TORCH_GLOBALS = [("_codecs", "encode"), ("collections", "OrderedDict"), ("torch._utils", "_rebuild_tensor_v2"), ("torch._utils", "_rebuild_tensor_v3"),
                 ("torch._utils", "_rebuild_parameter"), ("torch", "Size"), ("torch", "device"), ("torch", "FloatStorage"), ("torch", "float32"),
                 ("torch", "UntypedStorage")]

@pytest.mark.parametrize("module,name", TORCH_GLOBALS, ids=lambda x: x)
@pytest.mark.parametrize("attack", [SLOTSTATE + BUILD, DICTSTATE + BUILD, text("k") + num(1) + SETITEM, num(1) + APPEND,
                                    MARK + num(1) + APPENDS], ids=["BUILD-setattr", "BUILD-dict", "SETITEM", "APPEND", "APPENDS"])
def test_pt_cannot_change_what_a_global_stands_for(tmp_path, module, name, attack):
  # the global alone, then an opcode that would change it in place (the old unpickler set _codecs.encode's __defaults__)
  check_pt(tmp_path, pt_file(glob(module, name) + attack), "torch_load:")

def test_pt_build_only_gives_state_to_what_the_pickle_built(tmp_path):
  tensor = tensor_record()
  check_pt(tmp_path, pt_file(tensor + DICTSTATE + BUILD, {"0": bytes(4)}), "BUILD sets the state of a Tensor")
  check_pt(tmp_path, pt_file(EMPTY_LIST + DICTSTATE + BUILD), "BUILD sets the state of a list")
  # a state dict's own attributes (torch.save writes _metadata this way) are dropped, not set
  od = glob("collections", "OrderedDict") + EMPTY_TUPLE + REDUCE + text("w") + tensor + SETITEM
  out = load_pt(pt_file(od + EMPTY_DICT + text("_metadata") + EMPTY_DICT + SETITEM + BUILD, {"0": bytes([1, 2, 3, 4])}))
  assert type(out) is collections.OrderedDict and list(out) == ["w"] and out["w"].tolist() == [1, 2, 3, 4] and not hasattr(out, "_metadata")

@pytest.mark.parametrize("body,words", [
  (glob("builtins", "getattr"), "refusing to load global 'builtins.getattr'"),
  (glob("torch", "Tensor"), "refusing to load global 'torch.Tensor'"),
  (glob("collections", "OrderedDict") + EMPTY_TUPLE + b"\x81", "opcode b'\\x81'"),        # NEWOBJ: instances are refused
  (MARK + glob("collections", "OrderedDict") + b"o", "opcode b'o'"),                      # OBJ
  (b"\x82\x01", "opcode b'\\x82'"),                                                       # EXT1 (copyreg's registry)
  (glob("torch", "Size") + num(3) + REDUCE, "_torch_size takes 0 to 1 arguments, got 3"),  # arguments must be a tuple
  (glob("torch", "Size") + tup(text("x")) + REDUCE, "invalid torch.Size"),
  (glob("torch", "float32") + EMPTY_TUPLE + REDUCE, "REDUCE calls a _Marker"),
  (b"L" + b"9" * 5000 + b"L\n", "invalid LONG"),                                        # past Python's int-string limit
  (b"I12x\n", "invalid INT"), (b"F1.2.3\n", "invalid FLOAT"), (b"S'abc\n", "not quoted"),
  (b"X\xff\xff\xff\x7fabc", "the pickle ends inside"), (b"B\x10\x00\x00\x00abc", "the pickle ends inside"),
  (b"T\xff\xff\xff\xff", "negative length"), (b"\x8b\xfe\xff\xff\xff", "negative length"),
  (b"X\x02\x00\x00\x00\xff\xfe", "invalid UTF-8 string"),
  (APPEND, "stack underflow"), (MARK + APPEND, "stack underflow"), (b"1", "no MARK"), (get(7), "memo entry 7"),
  (EMPTY_DICT + EMPTY_LIST + num(1) + SETITEM, "a dict key or set item is a list"),
  (EMPTY_DICT + tup(num(1)) + num(1) + SETITEM, "a dict key or set item is a tuple"),   # (nested tuples hash recursively)
  (EMPTY_DICT + b"\x8a\x09" + b"\xff" * 8 + b"\x01" + num(1) + SETITEM, "64-bit numbers"),
  (EMPTY_DICT + MARK + num(1) + b"u", "an odd number of items"),
  (num(1) + b"Q", "unsupported persistent id"), (tup(text("storage"), glob("torch", "FloatStorage"), num(0), text("cpu"), num(1)) + b"Q",
                                                  "unsupported persistent id"),
  (b"\x80\x09", "pickle protocol above 5"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_pt_malformed_pickles(tmp_path, body, words):
  check_pt(tmp_path, pt_file(body), words)

def test_pt_truncated_pickle(tmp_path):
  good = PROTO2 + EMPTY_DICT + text("w") + tensor_record() + SETITEM + STOP
  for cut, words in ((1, "ends inside a 1-byte argument"), (6, "ends inside a 4-byte argument"), (10, "ends inside a line of text"),
                     (len(good) - 1, "ends before its STOP")):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
      z.writestr("archive/data.pkl", good[:cut])
      z.writestr("archive/data/0", bytes(4))
    check_pt(tmp_path, buf.getvalue(), "torch_load: ", words)

def test_pt_huge_memo_index_costs_one_entry(tmp_path):
  # LONG_BINPUT 2**27: the C unpickler grows its memo array to the index (2 GB); a dict holds one entry
  data = pt_file(NONE + b"r" + struct.pack("<I", 2**27) + b"j" + struct.pack("<I", 2**27))
  assert len(data) < 400
  tracemalloc.start()
  try:
    assert load_pt(data) is None and load_pt(write(tmp_path, "memo.pt", data)) is None
    peak = tracemalloc.get_traced_memory()[1]
  finally: tracemalloc.stop()
  assert peak < 1 << 20, f"{peak / 1e6:.1f} MB"

def _dag(levels: int, container: bytes, close: bytes) -> bytes:
  """Level k holds level k-1 twice (a memo reference): 2**levels paths from a few bytes per level."""
  body = EMPTY_LIST + num(0) + APPEND + put(0)
  for k in range(1, levels + 1): body += container + get(k - 1) + get(k - 1) + close + put(k)
  return body

@pytest.mark.parametrize("container,close", [(MARK, b"l"), (b"", TUPLE2), (EMPTY_DICT + MARK, b"")], ids=["lists", "tuples", "dicts"])
def test_pt_shared_containers_cannot_expand_exponentially(tmp_path, container, close):
  if container.startswith(EMPTY_DICT):   # {"a": level, "b": level}
    body = EMPTY_LIST + num(0) + APPEND + put(0)
    for k in range(1, 41): body += EMPTY_DICT + MARK + text("a") + get(k - 1) + text("b") + get(k - 1) + b"u" + put(k)
  else: body = _dag(40, container, close)
  check_pt(tmp_path, pt_file(body), "expand past", "shared")   # flatten_state_dict would walk 2**40 paths

def test_pt_shared_long_keys_cannot_blow_up_flattened_keys(tmp_path):
  # {K: {K: {K: ... tensor}}} with one 20 kB key K shared by 90 levels: flatten_state_dict's keys would take 80 MB
  body = text("k" * 20000) + put(0) + b"0" + EMPTY_DICT + get(0) + tensor_record() + SETITEM   # (b"0": POP)
  for _ in range(90): body += put(1) + b"0" + EMPTY_DICT + get(0) + get(1) + SETITEM
  check_pt(tmp_path, pt_file(body, {"0": bytes(4)}), "expand past")

def test_pt_cycles_and_deep_nesting_are_refused(tmp_path):
  check_pt(tmp_path, pt_file(EMPTY_LIST + put(0) + get(0) + APPEND), "cycle")
  check_pt(tmp_path, pt_file(EMPTY_DICT + put(0) + text("self") + get(0) + SETITEM), "cycle")
  # 5000 levels (flatten_state_dict: RecursionError). Every opcode byte here builds a list or tuple (~50 bytes of memory
  # each, in any unpickler), hence the larger bound
  check_pt(tmp_path, pt_file(EMPTY_LIST * 5000 + APPEND * 4999), "nest deeper than 100", per_byte=64)
  check_pt(tmp_path, pt_file(NONE + b"\x85" * 5000), "nest deeper than 100", per_byte=64)   # tuples of tuples
  assert len(load_pt(pt_file(EMPTY_LIST * 100 + APPEND * 99))) == 1                            # 100 levels are fine

@pytest.mark.parametrize("record,storages,words", [
  # a size-64 tensor declared over a 4-byte member: it would read the next zip header's bytes
  (tensor_record(numel=64, size=(64,)), {"0": b"abcd"}, "storage '0' holds 64 uint8 (64 bytes) but its member has 4 bytes"),
  (tensor_record(numel=4, size=(64,)), {"0": b"abcd"}, "reads past the end of storage '0' (4 uint8 elements)"),
  (tensor_record(numel=4, offset=3, size=(2,)), {"0": b"abcd"}, "reads past the end"),
  (tensor_record(numel=4, size=(2, 2), stride=(1000, 1)), {"0": b"abcd"}, "reads past the end"),    # a strided view
  (tensor_record(storage="FloatStorage", numel=2, size=(2, 2), stride=(2, 1)), {"0": bytes(8)}, "reads past the end of storage '0' (2 float32"),
  (tensor_record(numel=4, size=(2,), stride=(-1,)), {"0": b"abcd"}, "invalid tensor stride"),
  (tensor_record(numel=4, offset=-1, size=(1,)), {"0": b"abcd"}, "invalid tensor layout"),
  (tensor_record(numel=4, size=(2, 2), stride=(1,)), {"0": b"abcd"}, "invalid tensor layout"),
  (tensor_record(numel=4, size=(2, 2), stride=(1, 1)), {"0": b"abcd"}, "overlapping strides"),
  (tensor_record(numel=4), {}, "no member 'archive/data/0'"),
  (MARK + tensor_record(numel=4) + tensor_record(storage="FloatStorage", numel=1, size=(1,)) + b"l", {"0": b"abcd"}, "declared twice, differently"),
  # nine full views of one storage: on devices that copy, each would be a copy of it
  (MARK + tensor_record(numel=4) * 9 + b"l", {"0": b"abcd"}, "read more than 8x its 4 bytes"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_pt_tensor_records_stay_inside_their_storage(tmp_path, record, storages, words):
  check_pt(tmp_path, pt_file(record, storages), words)

def test_pt_not_a_checkpoint(tmp_path):
  check_pt(tmp_path, b"hello world", "not a PyTorch zip checkpoint")
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w") as z: z.writestr("model/weights.bin", b"x")
  check_pt(tmp_path, buf.getvalue(), "no <dir>/data.pkl")
  good = pt_file(tensor_record(), {"0": b"WXYZ"})
  assert load_pt(good).tolist() == list(b"WXYZ")
  check_pt(tmp_path, good[:len(good) // 2], "not a PyTorch zip")
  check_pt(tmp_path, pt_file(tensor_record(), {"0": b"WXYZ"}, byteorder="big"), "big-endian")
  check_pt(tmp_path, good.replace(b"_rebuild_tensor_v2", b"_rebuild_tensor_v9"), "cannot read member 'archive/data.pkl': Bad CRC-32")

def test_pt_compressed_members_are_bounded_by_their_declared_size(tmp_path):
  # a deflated storage member of 1 MB zeros declared as 4 bytes: zipfile stops at the declared size; the pickle says 4
  pkl = PROTO2 + tensor_record() + STOP
  buf = io.BytesIO()
  with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
    z.writestr("archive/data.pkl", pkl)
    z.writestr("archive/data/0", bytes(1 << 20))
  check_pt(tmp_path, buf.getvalue(), "holds 4 uint8 (4 bytes) but its member has 1048576 bytes")

# ---------------------------------------------------------------------------------------------------------------
# checkpoints of whole modules (torch_load_modules): a class becomes an inert stand-in, its objects dicts of their state

def load_modules(src): return torch_load_modules(src, device="CPU")

def check_modules(tmp_path, data: bytes, *words) -> str:
  refused(load_modules, data, *words)
  return refused(load_modules, write(tmp_path, "m.pt", data), *words)

OBJECT = glob("ultralytics.nn.tasks", "DetectionModel") + EMPTY_TUPLE + b"\x81"   # NEWOBJ: cls.__new__(cls), as torch.save writes modules

def module_state(params: bytes = EMPTY_DICT) -> bytes:
  return EMPTY_DICT + MARK + text("_parameters") + params + text("_buffers") + EMPTY_DICT + text("_modules") + EMPTY_DICT + b"u"

def test_modules_are_read_as_dicts_of_their_state():
  w = EMPTY_DICT + text("weight") + tensor_record() + SETITEM
  out = load_modules(pt_file(EMPTY_DICT + text("model") + OBJECT + module_state(w) + BUILD + SETITEM, {"0": b"WXYZ"}))
  m = out["model"]
  assert type(m) is state.PickledObject and m.cls == "ultralytics.nn.tasks.DetectionModel" and list(m) == ["_parameters", "_buffers", "_modules"]
  assert state.pickled_state_dict(m)["weight"].tolist() == list(b"WXYZ")
  # REDUCE of a class without arguments (SimpleNamespace's way), copyreg._reconstructor (protocols 0 and 1), a set
  ns = load_modules(pt_file(glob("types", "SimpleNamespace") + EMPTY_TUPLE + REDUCE + DICTSTATE + BUILD))
  assert ns.cls == "types.SimpleNamespace" and ns == {"pwned": 1}
  old = load_modules(pt_file(glob("copyreg", "_reconstructor") + tup(glob("x", "Y"), glob("__builtin__", "object"), NONE) + REDUCE))
  assert old.cls == "x.Y" and old == {}
  assert load_modules(pt_file(glob("__builtin__", "set") + tup(EMPTY_LIST + text("a") + APPEND) + REDUCE)) == {"a"}
  refused(load_pt, pt_file(OBJECT), "refusing to load global 'ultralytics.nn.tasks.DetectionModel'")   # torch_load knows no classes

@pytest.mark.parametrize("body,words", [
  (glob("posix", "system") + tup(text("touch pwned")) + REDUCE, "refusing to load global 'posix.system'"),   # a function
  (glob("builtins", "eval") + tup(text("1")) + REDUCE, "refusing to load global 'builtins.eval'"),
  (glob("subprocess", "Popen") + tup(text("touch pwned")) + REDUCE, "REDUCE calls the class subprocess.Popen with arguments"),
  (glob("subprocess", "Popen") + tup(text("touch pwned")) + b"\x81", "calls the class subprocess.Popen with arguments"),
  (glob("subprocess", "Popen") + num(1) + REDUCE, "calls the class subprocess.Popen with arguments"),
  (glob("collections", "OrderedDict") + EMPTY_TUPLE + b"\x81", "opcode b'\\x81'"),   # NEWOBJ of one of the loader's functions
  (glob("x", "Y") + SLOTSTATE + BUILD, "BUILD sets the state of a _Class"),             # BUILD on a class stand-in
  (glob("collections", "OrderedDict") + DICTSTATE + BUILD, "BUILD sets the state of a _Reducer"),   # on a real global
  (OBJECT + text("k") + num(1) + SETITEM, "SETITEM into a PickledObject"),               # state only through BUILD
  (OBJECT + num(1) + APPEND, "APPEND into a PickledObject"),
  (OBJECT + DICTSTATE + BUILD + DICTSTATE + BUILD, "BUILD gives state twice"),
  (OBJECT + SLOTSTATE + BUILD, "only a dict of attributes"),
  (OBJECT + EMPTY_DICT + num(1) + num(1) + SETITEM + BUILD, "only a dict of attributes"),
  (glob("copyreg", "_reconstructor") + tup(glob("x", "Y"), glob("builtins", "object"), text("s")) + REDUCE, "refusing copyreg._reconstructor"),
  (glob("copyreg", "_reconstructor") + tup(glob("x", "Y"), glob("x", "Z"), NONE) + REDUCE, "refusing copyreg._reconstructor"),
  (glob("builtins", "set") + tup(EMPTY_LIST + EMPTY_LIST + APPEND) + REDUCE, "a dict key or set item is a list"),
  (OBJECT + put(0) + EMPTY_DICT + text("self") + get(0) + SETITEM + BUILD, "cycle"),   # (a PickledObject is a container too)
], ids=lambda x: x if isinstance(x, str) else "")
def test_modules_refuse_calls_and_state_changes(tmp_path, body, words):
  check_modules(tmp_path, pt_file(body), words)

@pytest.mark.parametrize("module,name", [("builtins", "set"), ("__builtin__", "object"), ("copyreg", "_reconstructor"), ("x", "Y")], ids=lambda x: x)
@pytest.mark.parametrize("attack", [SLOTSTATE + BUILD, DICTSTATE + BUILD, text("k") + num(1) + SETITEM, num(1) + APPEND],
                         ids=["BUILD-setattr", "BUILD-dict", "SETITEM", "APPEND"])
def test_modules_cannot_change_what_a_global_stands_for(tmp_path, module, name, attack):
  check_modules(tmp_path, pt_file(glob(module, name) + attack), "torch_load_modules:")

def test_pickled_state_dict_needs_torch_modules():
  with pytest.raises(FormatError, match="the object is not a torch module"): state.pickled_state_dict({"_parameters": {}})
  m = load_modules(pt_file(OBJECT + module_state(EMPTY_DICT + text("w") + num(1) + SETITEM) + BUILD))
  with pytest.raises(FormatError, match="w is a int, not a tensor"): state.pickled_state_dict(m)

# ---------------------------------------------------------------------------------------------------------------
# CIFAR-10 pickles

def cifar(tmp_path, pickle_bytes: bytes):
  """A CIFAR-10 folder whose data_batch_1 is `pickle_bytes` (the other batches are never read: it fails first)."""
  d = tmp_path / "cifar"
  d.mkdir(exist_ok=True)
  for b in datasets.CIFAR_BATCHES: (d / b).write_bytes(pickle_bytes if b == "data_batch_1" else b"")
  return d / "data_batch_1"

def load_cifar_batch(path): return datasets._cifar_pickle_batch(str(path))

NUMPY_GLOBALS = [("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode"), ("numpy.core.multiarray", "_reconstruct"),
                 ("numpy.core.multiarray", "scalar"), ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer")]

@pytest.mark.parametrize("module,name", NUMPY_GLOBALS, ids=lambda x: x)
@pytest.mark.parametrize("attack", [SLOTSTATE + BUILD, DICTSTATE + BUILD, text("k") + num(1) + SETITEM, num(1) + APPEND],
                         ids=["BUILD-setattr", "BUILD-dict", "SETITEM", "APPEND"])
def test_cifar_pickle_cannot_change_what_a_global_stands_for(tmp_path, module, name, attack):
  # the old unpickler let BUILD set the loader's _frombuffer.__defaults__
  refused(load_cifar_batch, cifar(tmp_path, PROTO2 + glob(module, name) + attack + STOP), "data_batch_1: ")

def test_cifar_pickle_huge_memo_index(tmp_path):
  path = cifar(tmp_path, PROTO2 + NONE + b"r" + struct.pack("<I", 2**27) + STOP)   # 9 bytes; the old memo took 1 GB
  refused(load_cifar_batch, path, "not a CIFAR-10 batch")
  refused(lambda p: datasets.cifar10(str(p.parent)), path, "not a CIFAR-10 batch")

def np_array(shape: tuple, data: bytes, dtype="u1") -> bytes:
  """numpy.core.multiarray._reconstruct(ndarray, (0,), b'b') with state (1, shape, dtype, False, data), as numpy pickles it."""
  dt = glob("numpy", "dtype") + tup(text(dtype), FALSE, b"\x88") + REDUCE + tup(num(3), text("|"), NONE, NONE, NONE, num(-1), num(-1), num(0)) + BUILD
  return (glob("numpy.core.multiarray", "_reconstruct") + tup(glob("numpy", "ndarray"), tup(num(0)), b"C\x01b") + REDUCE
          + tup(num(1), tup(*map(num, shape)), dt, FALSE, b"B" + struct.pack("<I", len(data)) + data) + BUILD)

@pytest.mark.parametrize("data,labels,words", [
  (np_array((2, 3072), bytes(100)), EMPTY_LIST + num(1) + APPEND + num(2) + APPEND, "a numpy array of shape (2, 3072) uint8 has 100 bytes"),
  (np_array((1, 3072), bytes(3072), "f8"), EMPTY_LIST, "a numpy array of shape (1, 3072) float64 has 3072 bytes"),
  (np_array((1, 3072), bytes(3072), "O8"), EMPTY_LIST, "unsupported numpy dtype 'O8'"),
  (np_array((1, 3072), bytes(3072)), EMPTY_LIST + text("x") + APPEND, "not a CIFAR-10 batch"),
  (np_array((1, 3072), bytes(3072)), EMPTY_LIST + b"\x8a\x09" + b"\xff" * 8 + b"\x01" + APPEND, "not a CIFAR-10 batch"),   # 2**71 - 1
  (glob("numpy.core.multiarray", "_reconstruct") + tup(glob("numpy", "dtype"), tup(num(0)), b"C\x01b") + REDUCE, EMPTY_LIST, "_reconstruct of"),
  (glob("numpy.core.multiarray", "_reconstruct") + tup(glob("numpy", "ndarray"), tup(num(0)), b"C\x01b") + REDUCE, EMPTY_LIST, "not a CIFAR-10 batch"),
], ids=lambda x: x if isinstance(x, str) else "")
def test_cifar_pickle_malformed_arrays(tmp_path, data, labels, words):
  body = PROTO2 + EMPTY_DICT + MARK + text("data") + data + text("labels") + labels + b"u" + STOP
  refused(load_cifar_batch, cifar(tmp_path, body), words)

def test_cifar_array_pickle_builder_matches_numpy(tmp_path):
  np = pytest.importorskip("numpy")   # the bytes above are what numpy writes: the loader reads a good one
  body = PROTO2 + EMPTY_DICT + MARK + text("data") + np_array((1, 3072), bytes(range(256)) * 12) + text("labels") + EMPTY_LIST + num(7) + APPEND + b"u" + STOP
  d = pickle.loads(body)
  assert d["data"].shape == (1, 3072) and d["data"].dtype == np.uint8 and d["labels"] == [7]
  x, y = load_cifar_batch(cifar(tmp_path, body))
  assert x == bytes(range(256)) * 12 and y == [7]

# ---------------------------------------------------------------------------------------------------------------
# IDX files (MNIST), gzipped or not

def gzip_of_zeros(n: int, head: bytes = b"") -> bytes:
  """A gzip stream of `head` and n zero bytes, compressed as it is made (never holding the n bytes)."""
  c, chunk = zlib.compressobj(9, zlib.DEFLATED, 31), bytes(1 << 20)
  parts = [c.compress(head)] + [c.compress(chunk[:min(1 << 20, n - i)]) for i in range(0, n, 1 << 20)]
  return b"".join(parts) + c.flush()

@functools.cache
def zero_bomb() -> bytes: return gzip_of_zeros(64 << 20)   # 64 MB of zeros in 64 kB

def load_idx(path): return datasets.load_idx(str(path), device="CPU")

def test_idx_gzip_header_is_checked_before_inflating(tmp_path):
  # 00 00 00 00: element type 0 is unknown. The old parser inflated all 64 MB first.
  refused(load_idx, write(tmp_path, "bomb-idx1-ubyte.gz", zero_bomb()), "unknown IDX element type 0x00")
  refused(lambda b: datasets.parse_idx(b, device="CPU"), zero_bomb(), "unknown IDX element type 0x00", name="IDX data")

def test_idx_gzip_inflates_only_what_the_header_declares(tmp_path):
  head = struct.pack(">BBBBI", 0, 0, 0x08, 1, 16)   # uint8, shape (16,)
  refused(load_idx, write(tmp_path, "trail-idx1-ubyte.gz", gzip_of_zeros(64 << 20, head)), "trailing bytes in IDX data", "needs 24 bytes", "got more")
  huge = struct.pack(">BBBBIII", 0, 0, 0x08, 3, 2**32 - 1, 2**32 - 1, 2**32 - 1)   # 2**96 bytes declared, 1 kB there
  refused(load_idx, write(tmp_path, "huge-idx3-ubyte.gz", gzip.compress(huge + bytes(1000))), "truncated IDX data", "got 1016")
  refused(load_idx, write(tmp_path, "huge-idx3-ubyte", huge + bytes(1000)), "truncated IDX data", "got 1016")
  ok = gzip.compress(head + bytes(range(16)))
  assert datasets.parse_idx(ok + ok[:0]).tolist() == list(range(16))
  assert datasets.parse_idx(gzip.compress(head) + gzip.compress(bytes(range(16)))).tolist() == list(range(16))   # gzip members concatenated
  refused(load_idx, write(tmp_path, "two-idx1-ubyte.gz", ok + ok), "trailing bytes")
  refused(load_idx, write(tmp_path, "cut-idx1-ubyte.gz", ok[:-6]), "corrupt gzip data")   # the CRC/size trailer cut
  refused(load_idx, write(tmp_path, "crc-idx1-ubyte.gz", ok[:-8] + b"\0\0\0\0" + ok[-4:]), "corrupt gzip data", "incorrect data check")

def test_mnist_loader_raises_format_error_naming_the_file(tmp_path):
  d = tmp_path / "m"
  d.mkdir()
  for stem in datasets.IDX_FILES: (d / (stem + ".gz")).write_bytes(zero_bomb())
  refused(lambda p: datasets.mnist(device="CPU", folder=str(p.parent)), d / (datasets.IDX_FILES[0] + ".gz"), "unknown IDX element type")

# ---------------------------------------------------------------------------------------------------------------
# safetensors and checkpoints

def st_file(header, data: bytes = b"", raw: bytes = None) -> bytes:
  head = raw if raw is not None else json.dumps(header).encode()
  return struct.pack("<Q", len(head)) + head + data

def entry(dtype="F32", shape=(2,), offsets=(0, 8)): return {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}

SAFETENSORS_CASES = [
  *[(st_file({"__metadata__": m, "a": entry()}, bytes(8)), "__metadata__ must map strings to strings")
    for m in ("", 0, False, [], "x", {"n": 1}, [["a", "b"]])],
  *[(st_file({"a": entry(dtype=d)}, bytes(8)), "is not supported") for d in (5, ["F32"], {"F32": 1}, None, "F8_E4M3", "f32")],
  (st_file(None, bytes(8), b'{"a": ' + b"[" * 100000 + b"]" * 100000 + b"}"), "nests too deeply"),
  (st_file(None, bytes(8), b'{"a": {"dtype": "F32", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 8]}}'),
   "number too long to read (Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits)"),
  (st_file(None, bytes(8), b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, -' + b"9" * 30 + b']}}'), "invalid data_offsets"),
  (st_file(None, bytes(8), b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 1' + b"0" * 20 + b']}}'), "invalid data_offsets"),   # 2**64 <
  (st_file({"a": entry(shape=[2**63] * 300, offsets=(0, 8))}, bytes(8)), "needs over 2**64"),   # (its str would pass the int limit)
  (st_file({"a": entry()}, bytes(8))[:8] + b"{}", "the header should be"),                             # header length past the file
  (struct.pack("<Q", 2**63) + b"{}", "over the 104857600-byte limit"),
  (st_file({"a": entry(offsets=(0, 8)), "b": entry(offsets=(4, 12))}, bytes(12)), "an overlap"),
  (st_file({"a": entry(offsets=(8, 16))}, bytes(16)), "a gap"),
  (st_file({"a": entry(offsets=(8, 0))}, bytes(8)), "invalid data_offsets"),                          # out of order
  (st_file({"a": entry(offsets=(0, 8)), "b": entry(offsets=(0, 8))}, bytes(8)), "an overlap"),        # the same bytes twice
  (st_file({"a": entry(shape=(3,), offsets=(0, 8))}, bytes(8)), "needs 12"),
  (st_file({"a": entry(shape=(2**40, 2**40), offsets=(0, 8))}, bytes(8)), "needs over 2**64"),
  (st_file({"a": entry(shape=(-2,), offsets=(0, 0))}), "invalid shape"),
  (st_file({"a": entry(shape=(True, 2))}, bytes(8)), "invalid shape"),
  (st_file({"a": entry(shape=(2.0,))}, bytes(8)), "invalid shape"),
  (st_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 9]}}, bytes(8)), "invalid data_offsets"),
  (st_file({"a": 5}, bytes(8)), "needs dtype, shape and data_offsets"),
  (st_file({"a": entry()}, bytes(12)), "trailing bytes"),
  (st_file({"a": entry()}, bytes(4)), "past the end of the data"),
  (st_file(None, bytes(8), b'{"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}, "a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]}}'),
   "appears twice"),
  (st_file(None, b"", b'{"\xff": 1}'), "not valid UTF-8"),
  (st_file(None, b"", b'[1, 2]'), "does not start with '{'"),
  (st_file(None, b"", b'{"a": 1'), "not valid JSON"),
  (b"\x01\x02", "too short"),
]

@pytest.mark.parametrize("data,words", SAFETENSORS_CASES, ids=range(len(SAFETENSORS_CASES)))
def test_malformed_safetensors(tmp_path, data, words):
  path = write(tmp_path, "bad.safetensors", data)
  for load in (safe_load, safe_load_metadata):
    refused(load, path, "safetensors: ", words)
    refused(load, data, "safetensors: ", words)
  refused(lambda p: load_checkpoint(p, {"a": Tensor.zeros(2)}), path, words)   # checkpoints are safetensors files

def test_checkpoint_saves_still_load_after_the_checks(tmp_path):
  save_checkpoint({"a": Tensor([1.0, 2.0]), "b": Tensor.zeros(0, 3)}, tmp_path / "ck.safetensors", metadata={"step": "1"})
  model = {"a": Tensor.zeros(2), "b": Tensor.zeros(0, 3)}
  assert load_checkpoint(tmp_path / "ck.safetensors", model) == ([], []) and model["a"].tolist() == [1.0, 2.0]
