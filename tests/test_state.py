"""tinyweb.nn.state: state dicts, safetensors (own parser, interop with the `safetensors` package), torch checkpoints
read without torch through a restricted unpickler, atomic checkpoints."""
import collections, io, json, os, pickle, subprocess, sys, textwrap, zipfile
import numpy as np
import pytest
import torch
import safetensors.numpy, safetensors.torch
from safetensors import safe_open
from tinyweb import Tensor, dtypes, GlobalCounters
from helpers import refused, expect_unsupported
from tinyweb.nn.state import (get_state_dict, get_parameters, flatten_state_dict, load_state_dict, StateDictError,
                              safe_load, safe_save, safe_load_metadata, torch_load, save_checkpoint, load_checkpoint, FormatError)

TORCH_DT = {dtypes.bool: torch.bool, dtypes.int8: torch.int8, dtypes.uint8: torch.uint8, dtypes.int16: torch.int16,
            dtypes.uint16: torch.uint16, dtypes.int32: torch.int32, dtypes.uint32: torch.uint32, dtypes.int64: torch.int64,
            dtypes.uint64: torch.uint64, dtypes.float16: torch.float16, dtypes.bfloat16: torch.bfloat16,
            dtypes.float32: torch.float32, dtypes.float64: torch.float64}

def raw(t: Tensor) -> bytes: return bytes(t.data())   # exact bit patterns (bfloat16 and float16 included)

def sample(dt, shape, device, seed=0) -> Tensor:
  """Values that exercise the whole range of `dt` (large unsigned values, negative ints, fractions, nan)."""
  rng = np.random.default_rng(seed)
  n = int(np.prod(shape))
  if dt == dtypes.bool: arr = rng.random(n) < 0.5
  elif dt.is_int: arr = rng.integers(dt.min, dt.max, size=n, dtype=np.uint64 if dt.is_unsigned else np.int64, endpoint=True).astype(dt.name)
  else: arr = (rng.standard_normal(n) * 100).astype(np.float32 if dt == dtypes.bfloat16 else dt.name)
  if dt.is_float and n > 1: arr[1] = np.nan
  t = Tensor(arr.reshape(shape), device=device)
  return (t.cast(dt) if dt == dtypes.bfloat16 else t).realize()

def to_torch(t: Tensor) -> torch.Tensor:
  if t.dtype == dtypes.bfloat16: return torch.from_numpy(np.frombuffer(raw(t), np.int16).copy()).view(torch.bfloat16).reshape(t.shape)
  return torch.from_numpy(t.numpy().copy())

# ---------------------------------------------------------------------------------------------------------------
# safetensors

@pytest.mark.parametrize("dt", dtypes.all, ids=lambda d: d.name)
def test_safetensors_roundtrip_every_dtype(device, tmp_path, dt):
  if refused(device, dt):   # a dtype the device refuses (64-bit on WEBGPU): creating one raises the clear error; loading
    safe_save({"matrix": sample(dt, (3, 5), "CPU")}, tmp_path / "x.safetensors")   # one too, but for 64-bit integers that
    with expect_unsupported(device, dt): sample(dt, (3, 5), device)                 # fit in 32 bits (test_64bit_integers_...)
    with pytest.raises(FormatError, match="past u?int32's range") if dt.is_int else expect_unsupported(device, dt):
      safe_load(tmp_path / "x.safetensors", device=device)
    return
  ts = {"matrix": sample(dt, (3, 5), device), "scalar": sample(dt, (), device, seed=1),
        "empty": sample(dt, (0, 4), device), "cube": sample(dt, (2, 1, 3), device, seed=2)}
  safe_save(ts, tmp_path / "x.safetensors")
  for src in (tmp_path / "x.safetensors", str(tmp_path / "x.safetensors"), (tmp_path / "x.safetensors").read_bytes()):
    back = safe_load(src, device=device)
    assert set(back) == set(ts)
    for k, t in ts.items():
      assert back[k].dtype == dt and back[k].shape == t.shape and back[k].device == device
      assert raw(back[k]) == raw(t), k

def test_safetensors_mixed_dtypes_and_metadata(device, tmp_path):
  ts = {f"t_{d.name}": sample(d, (4,), device, seed=i) for i, d in enumerate(dtypes.all) if not refused(device, d)}
  safe_save(ts, tmp_path / "m.safetensors", metadata={"format": "pt", "step": "7"})
  back = safe_load(tmp_path / "m.safetensors", device=device)
  assert all(raw(back[k]) == raw(t) for k, t in ts.items())
  assert safe_load_metadata(tmp_path / "m.safetensors") == {"format": "pt", "step": "7"}
  assert safe_load_metadata((tmp_path / "m.safetensors").read_bytes()) == {"format": "pt", "step": "7"}
  # the layout the reference writer uses: header padded with spaces to 8 bytes, data aligned, ordered by offset
  data = (tmp_path / "m.safetensors").read_bytes()
  n = int.from_bytes(data[:8], "little")
  assert n % 8 == 0 and data[8:8 + n].decode().rstrip(" ").endswith("}")
  header = json.loads(data[8:8 + n])
  header.pop("__metadata__")
  offsets = [v["data_offsets"] for v in header.values()]
  assert offsets == sorted(offsets) and all(b % TORCH_DT_SIZE[v["dtype"]] == 0 for v, (b, _) in zip(header.values(), offsets))

WIDE = (dtypes.int64, dtypes.uint64, dtypes.float64)

TORCH_DT_SIZE = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "BF16": 2, "U32": 4, "I32": 4, "F32": 4,
                 "U64": 8, "I64": 8, "F64": 8}

def test_safetensors_reads_files_of_the_reference_numpy_writer(device, tmp_path):
  rng = np.random.default_rng(0)
  arrays = {"f32": rng.standard_normal((3, 4)).astype(np.float32), "f64": rng.standard_normal(5),
            "f16": rng.standard_normal((2, 2)).astype(np.float16), "i8": np.array([-128, 0, 127], np.int8),
            "u8": np.array([0, 255], np.uint8), "i16": np.array([-5, 7], np.int16), "u16": np.array([65535], np.uint16),
            "i32": np.arange(-3, 3, dtype=np.int32), "u32": np.array([2**32 - 1], np.uint32),
            "i64": np.array([-2**63, 2**63 - 1]), "u64": np.array([2**64 - 1, 1], np.uint64),
            "b": np.array([[True, False], [False, True]]), "scalar": np.array(2.5, np.float32), "empty": np.zeros((0, 3), np.float32)}
  if refused(device, *WIDE):   # the whole file is refused; the rest loads once the 64-bit arrays are left out
    safetensors.numpy.save_file(arrays, str(tmp_path / "np.safetensors"))
    with pytest.raises((TypeError, FormatError), match=f"is not supported on {device}|past u?int32's range"):
      safe_load(tmp_path / "np.safetensors", device=device)
    arrays = {k: a for k, a in arrays.items() if not refused(device, dtypes.from_name(a.dtype.name))}
  safetensors.numpy.save_file(arrays, str(tmp_path / "np.safetensors"), metadata={"who": "numpy"})
  back = safe_load(tmp_path / "np.safetensors", device=device)
  for k, a in arrays.items():
    assert back[k].shape == a.shape
    np.testing.assert_array_equal(back[k].numpy(), a, err_msg=k)
    assert back[k].numpy().dtype == a.dtype
  assert safe_load_metadata(tmp_path / "np.safetensors") == {"who": "numpy"}

def test_safetensors_reads_files_of_the_reference_torch_writer(device, tmp_path):
  g = torch.Generator().manual_seed(0)
  tensors = {"w": torch.randn(4, 3, generator=g), "h": torch.randn(5, generator=g).half(), "bf": torch.randn(2, 3, generator=g).bfloat16(),
             "i": torch.arange(-4, 4), "u16": torch.tensor([0, 65535], dtype=torch.uint16),
             "u32": torch.tensor([2**32 - 1], dtype=torch.uint32), "u64": torch.tensor([2**63 + 5], dtype=torch.uint64),
             "mask": torch.tensor([True, False, True]), "d": torch.randn(2, generator=g, dtype=torch.float64)}
  if refused(device, *WIDE):   # the whole file is refused; the rest loads once the 64-bit tensors are left out
    safetensors.torch.save_file(tensors, str(tmp_path / "pt.safetensors"))
    with pytest.raises((TypeError, FormatError), match=f"is not supported on {device}|past u?int32's range"):
      safe_load(tmp_path / "pt.safetensors", device=device)
    tensors = {k: t for k, t in tensors.items() if not refused(device, dtypes.from_name(str(t.dtype)[6:]))}
  safetensors.torch.save_file(tensors, str(tmp_path / "pt.safetensors"))
  back = safe_load(tmp_path / "pt.safetensors", device=device)
  for k, t in tensors.items():
    assert torch.equal(to_torch(back[k]), t), k

def test_safetensors_files_written_here_load_in_the_reference_library(device, tmp_path):
  ts = {f"t_{d.name}": sample(d, (2, 3), device, seed=i) for i, d in enumerate(dtypes.all) if not refused(device, d)}
  ts["scalar"], ts["empty"] = Tensor(1.5, device=device), Tensor.zeros(0, 2, device=device)
  path = str(tmp_path / "ours.safetensors")
  safe_save(ts, path, metadata={"framework": "tinyweb"})
  loaded = safetensors.torch.load_file(path)
  assert set(loaded) == set(ts)
  for k, t in ts.items():
    assert loaded[k].dtype == TORCH_DT[t.dtype] and tuple(loaded[k].shape) == t.shape
    assert torch.equal(loaded[k], to_torch(t)) or (t.dtype.is_float and torch.equal(loaded[k].isnan(), to_torch(t).isnan())
                                                     and torch.equal(loaded[k].nan_to_num(), to_torch(t).nan_to_num())), k
  with safe_open(path, framework="pt") as f:
    assert f.metadata() == {"framework": "tinyweb"}
    assert sorted(f.keys()) == sorted(ts)

def _file(header: dict, data: bytes, pad: bytes = b"") -> bytes:
  head = json.dumps(header).encode() + pad
  return len(head).to_bytes(8, "little") + head + data

def _err(blob: bytes, *words: str):
  with pytest.raises(FormatError) as e: safe_load(blob)
  for w in words: assert w in str(e.value), (w, str(e.value))

def test_safetensors_rejects_truncated_and_corrupt_files(tmp_path):
  good = _file({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16))
  assert safe_load(good)["a"].shape == (2, 2)
  _err(good[:5], "too short")                                        # not even the header length
  _err(good[:20], "truncated")                                       # cut inside the header
  _err(good[:-4], "a", "past the end", "truncated")                  # cut inside the data
  _err(b"\xff" * 8 + b"{}", "limit")                                 # absurd header length
  _err(_file({}, b"")[:8] + b"[]", "start with")                     # header is not a JSON object
  _err(b"\x08" + bytes(7) + b'{"a": 1', "truncated")
  _err(len(b'{"a": 1,}').to_bytes(8, "little") + b'{"a": 1,}', "not valid JSON")
  _err(b"\x04" + bytes(7) + b"{\xff\xfe}", "UTF-8")
  _err(_file({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 32]}}, bytes(16)), "'a'", "past the end")
  _err(_file({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}, bytes(16)), "'a'", "needs 12")
  _err(_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, bytes(16)), "'a'", "gap")
  _err(_file({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},
              "b": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, bytes(16)), "overlap")
  _err(_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, bytes(16)), "trailing")
  _err(_file({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, bytes(16)), "invalid data_offsets")
  _err(_file({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 0]}}, b""), "invalid shape")
  _err(_file({"a": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, bytes(2)), "F8_E4M3", "not supported")
  _err(_file({"a": {"dtype": "F32", "shape": [1]}}, bytes(4)), "data_offsets")
  _err(_file({"__metadata__": {"n": 1}}, b""), "__metadata__")
  dup = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
  _err(len(dup).to_bytes(8, "little") + dup + b"\x00", "twice")
  (tmp_path / "cut.safetensors").write_bytes(good[:-1])              # the same checks apply to files
  with pytest.raises(FormatError, match="truncated"): safe_load(tmp_path / "cut.safetensors")
  with pytest.raises(FormatError, match="truncated"): safe_load_metadata(tmp_path / "cut.safetensors")
  (tmp_path / "empty.safetensors").write_bytes(b"")
  with pytest.raises(FormatError, match="too short"): safe_load(tmp_path / "empty.safetensors")

def test_safetensors_from_path_is_zero_copy_and_copy_on_write(tmp_path):
  n = 1 << 20   # 4 MB of float32
  safe_save({"big": Tensor.arange(n, dtype=dtypes.float32, device="CPU"), "small": Tensor([1, 2, 3], device="CPU")},
            tmp_path / "big.safetensors")
  before_file = (tmp_path / "big.safetensors").read_bytes()
  mem = GlobalCounters.mem_used
  ts = safe_load(tmp_path / "big.safetensors", device="CPU")
  for t in ts.values(): assert t.uop.base.arg[0]._external   # the buffer wraps the mapped file, nothing was copied
  assert GlobalCounters.mem_used == mem
  assert ts["big"][n - 1].item() == n - 1 and ts["small"].tolist() == [1, 2, 3]
  ts["big"].assign(Tensor.zeros(n, device="CPU")).realize()   # written in place, into private pages only
  assert ts["big"].uop.base.arg[0]._external and ts["big"][5].item() == 0
  assert (tmp_path / "big.safetensors").read_bytes() == before_file

def test_safe_save_is_atomic(device, tmp_path, monkeypatch):
  import tinyweb.nn.state as state
  target = tmp_path / "ckpt.safetensors"
  safe_save({"a": Tensor([1.0, 2.0], device=device)}, target)
  safe_save({"a": Tensor([3.0, 4.0, 5.0], device=device)}, target)   # replaces the existing file
  assert os.listdir(tmp_path) == ["ckpt.safetensors"]
  assert safe_load(target)["a"].tolist() == [3.0, 4.0, 5.0]
  old = target.read_bytes()
  calls = []
  def failing(t):
    calls.append(t)
    if len(calls) == 2: raise RuntimeError("disk on fire")
    return state.__dict__["_tensor_bytes_orig"](t)
  monkeypatch.setitem(state.__dict__, "_tensor_bytes_orig", state._tensor_bytes)
  monkeypatch.setattr(state, "_tensor_bytes", failing)
  with pytest.raises(RuntimeError, match="disk on fire"):
    safe_save({"a": Tensor([9.0], device=device), "b": Tensor([8.0], device=device)}, target)
  assert target.read_bytes() == old and os.listdir(tmp_path) == ["ckpt.safetensors"]   # old file intact, no temp file left
  calls.clear()
  monkeypatch.setattr(state, "_tensor_bytes", lambda t: (_ for _ in ()).throw(KeyboardInterrupt))   # not an Exception either
  with pytest.raises(KeyboardInterrupt): safe_save({"a": Tensor([9.0], device=device)}, target)
  assert target.read_bytes() == old and os.listdir(tmp_path) == ["ckpt.safetensors"]
  monkeypatch.setattr(state, "_tensor_bytes", state.__dict__["_tensor_bytes_orig"])
  with pytest.raises(TypeError): safe_save({"a": [1.0]}, target)
  with pytest.raises(TypeError): safe_save({"a": Tensor([1.0], device=device)}, target, metadata={"n": 1})
  assert target.read_bytes() == old

@pytest.mark.skipif(os.name != "posix", reason="whether a pid lives is only asked on POSIX")
def test_save_removes_temp_files_that_killed_saves_left(tmp_path):
  target = tmp_path / "ck.safetensors"
  killed = textwrap.dedent(f"""
    import os, signal
    from tinyweb import Tensor
    from tinyweb.nn import state
    state._tensor_bytes = lambda t: os.kill(os.getpid(), signal.SIGKILL)   # killed while writing: no cleanup runs
    state.safe_save({{"a": Tensor([1.0, 2.0], device="CPU")}}, {str(target)!r})
  """)
  for _ in range(3): assert subprocess.run([sys.executable, "-c", killed], timeout=300).returncode == -9
  stale = os.listdir(tmp_path)   # each save removed the file the save killed before it left: one, not three
  assert len(stale) == 1 and stale[0].startswith(".ck.safetensors.") and stale[0].endswith(".tmp"), stale
  live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True).stdout.strip()
  try:
    kept = [f".ck.safetensors.{live.pid}.0badcafe.tmp",   # a save in progress in another process
            f".other.safetensors.{dead}.0badcafe.tmp",     # another file's
            ".ck.safetensors.notes.tmp", "ck.safetensors.1.0badcafe.tmp"]   # not names a save gives its temporary file
    for n in kept: (tmp_path / n).write_bytes(b"x")
    safe_save({"a": Tensor([3.0], device="CPU")}, target)
    assert sorted(os.listdir(tmp_path)) == sorted(kept + ["ck.safetensors"])
    assert safe_load(target)["a"].tolist() == [3.0]
  finally: live.kill()

# ---------------------------------------------------------------------------------------------------------------
# state dicts

class Linear:
  def __init__(self, i, o, device):
    self.weight = Tensor.randn(i, o, device=device, requires_grad=True)
    self.bias = Tensor.zeros(o, device=device, requires_grad=True)

class Net:
  def __init__(self, device):
    self.layers = [Linear(4, 3, device), Linear(3, 2, device)]
    self.norm = {"scale": Tensor.ones(2, device=device), "steps": Tensor(0, device=device)}
    self.act, self.name, self.size, self.fn = Tensor.relu, "net", 3, print
    self.parent_ref = self   # a cycle must not loop forever

class Adamish:
  def __init__(self, params):
    self.params, self.lr = params, 0.1
    self.m = [Tensor.zeros(*p.shape, device=p.device) for p in params]
    self.v = [Tensor.zeros(*p.shape, device=p.device) for p in params]

def test_get_state_dict_and_parameters(device):
  net = Net(device)
  sd = get_state_dict(net)
  assert list(sd) == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias", "norm.scale", "norm.steps"]
  assert sd["layers.1.weight"] is net.layers[1].weight
  assert list(get_state_dict(net, prefix="model.")) [0] == "model.layers.0.weight"
  assert len(get_parameters(net)) == 6 and get_parameters(net)[0] is net.layers[0].weight
  opt = Adamish(get_parameters(net))
  osd = get_state_dict(opt)   # optimizer state comes through the same walk
  assert {k for k in osd if k.startswith(("m.", "v."))} == {f"{a}.{i}" for a in "mv" for i in range(6)}
  both = get_state_dict({"model": net, "opt": opt})
  assert "model.norm.steps" in both and "opt.m.5" in both and both["opt.params.0"] is net.layers[0].weight
  assert len(get_parameters({"model": net, "opt": opt})) == 6 + 12   # shared tensors counted once
  Point = collections.namedtuple("Point", "x y")
  assert list(get_state_dict(Point(Tensor([1.0], device=device), (Tensor([2.0], device=device),)))) == ["x", "y.0"]

def test_load_state_dict_strict_lists_every_problem(device):
  net = Net(device)
  sd = {k: v.detach() + 1 for k, v in get_state_dict(Net(device)).items()}
  del sd["layers.0.bias"], sd["norm.scale"]
  sd["layers.9.weight"] = Tensor.ones(1, device=device)
  sd["layers.1.weight"] = Tensor.ones(2, 3, device=device)   # model has (3, 2)
  before = net.layers[0].weight.numpy()
  with pytest.raises(StateDictError) as e: load_state_dict(net, sd)
  msg = str(e.value)
  for word in ("layers.0.bias", "norm.scale", "layers.9.weight", "layers.1.weight", "(3, 2)", "(2, 3)", "missing", "unexpected"):
    assert word in msg, (word, msg)
  assert isinstance(e.value, KeyError) and isinstance(e.value, ValueError)
  np.testing.assert_array_equal(net.layers[0].weight.numpy(), before)   # nothing was loaded
  missing, unexpected = load_state_dict(net, sd, strict=False)
  assert sorted(missing) == ["layers.0.bias", "layers.1.weight", "norm.scale"] and unexpected == ["layers.9.weight"]
  np.testing.assert_allclose(net.layers[0].weight.numpy(), sd["layers.0.weight"].numpy())
  np.testing.assert_array_equal(net.norm["steps"].numpy(), 1)
  assert net.layers[1].weight.shape == (3, 2)

def test_load_state_dict_casts_and_keeps_training_working(device):
  net = Net(device)
  for p in get_parameters(net): p.realize()
  w_buf = net.layers[0].weight.uop.base.arg[0]
  src = {k: (v.detach() * 0 + 0.5).cast(dtypes.float16) for k, v in get_state_dict(net).items()}
  src["norm.steps"] = Tensor(7, dtype=dtypes.int64, device="CPU")   # (from another device: WEBGPU has no int64 tensors)
  assert load_state_dict(net, src) == ([], [])
  assert net.layers[0].weight.dtype == dtypes.float32 and net.norm["steps"].dtype == dtypes.int32
  assert net.layers[0].weight.uop.base.arg[0] is w_buf          # realized tensors are written in place
  np.testing.assert_array_equal(net.layers[0].weight.numpy(), 0.5)
  assert net.norm["steps"].item() == 7
  x = Tensor.ones(1, 4, device=device)
  (x @ net.layers[0].weight + net.layers[0].bias).sum().backward()
  np.testing.assert_array_equal(net.layers[0].weight.grad.numpy(), np.ones((4, 3)))

def test_checkpoint_roundtrip_model_and_optimizer(device, tmp_path):
  net = Net(device)
  opt = Adamish(get_parameters(net))
  for m in opt.m: m.assign(m + 0.25).realize()
  save_checkpoint({"model": net, "opt": opt}, tmp_path / "ck.safetensors", metadata={"epoch": "3"})
  net2 = Net(device)
  opt2 = Adamish(get_parameters(net2))
  assert load_checkpoint(tmp_path / "ck.safetensors", {"model": net2, "opt": opt2}) == ([], [])
  for a, b in zip(get_parameters(net) + opt.m, get_parameters(net2) + opt2.m): np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert safe_load_metadata(tmp_path / "ck.safetensors") == {"epoch": "3"}
  save_checkpoint(get_state_dict(net), tmp_path / "flat.safetensors")   # a flat state dict works too
  assert load_checkpoint(tmp_path / "flat.safetensors", Net(device)) == ([], [])

# ---------------------------------------------------------------------------------------------------------------
# torch checkpoints

def _torch_checkpoint():
  torch.manual_seed(0)
  model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 3))
  return {"model": model.state_dict(), "step": 12, "name": "run-1", "lr": [0.1, 0.01],
          "extra": {"half": torch.randn(3, 5).half(), "bf16": torch.randn(2, 4).bfloat16(), "ids": torch.arange(10, dtype=torch.int64) * 7 - 20,
                    "transposed": torch.randn(5, 3).t(), "sliced": torch.arange(48.).reshape(6, 8)[1:5, ::3],
                    "permuted": torch.randn(2, 3, 4).permute(2, 0, 1), "scalar": torch.tensor(2.5), "mask": torch.tensor([True, False]),
                    "nested": {"deeper": torch.ones(2, 2, dtype=torch.float64)}}}

def _flat_torch(d, prefix=""):
  out = {}
  for k, v in d.items():
    if isinstance(v, dict): out.update(_flat_torch(v, f"{prefix}{k}."))
    elif isinstance(v, torch.Tensor): out[prefix + k] = v
  return out

def _expected(t: torch.Tensor) -> np.ndarray: return (t.float() if t.dtype == torch.bfloat16 else t).numpy()

def test_torch_load_matches_torch(device, tmp_path):
  ck = _torch_checkpoint()
  torch.save(ck, tmp_path / "ck.pt")
  if refused(device, dtypes.float64):   # "nested.deeper" is float64: the checkpoint is refused with the clear error
    with expect_unsupported(device, dtypes.float64): torch_load(tmp_path / "ck.pt", device=device)
    return
  for src in (tmp_path / "ck.pt", (tmp_path / "ck.pt").read_bytes()):
    out = torch_load(src, device=device)
    assert isinstance(out["model"], collections.OrderedDict) and list(out["model"]) == list(ck["model"])
    assert out["step"] == 12 and out["name"] == "run-1" and out["lr"] == [0.1, 0.01]
    flat, exp = flatten_state_dict(out), _flat_torch(ck)
    assert set(flat) == set(exp)
    for k, t in exp.items():
      assert flat[k].shape == tuple(t.shape) and flat[k].dtype == dtypes.from_name(str(t.dtype)[6:]), k
      np.testing.assert_array_equal(flat[k].numpy(), _expected(t), err_msg=k)
    assert flat["model.1.num_batches_tracked"].dtype == dtypes.int64

def _same(ours, theirs, where="") -> None:
  """`ours` (what torch_load gave) holds what `theirs` (the object torch saved) holds, container types included."""
  if isinstance(theirs, torch.Tensor):
    assert isinstance(ours, Tensor) and ours.shape == tuple(theirs.shape) and ours.dtype == dtypes.from_name(str(theirs.dtype)[6:]), where
    np.testing.assert_array_equal(ours.numpy(), _expected(theirs.detach()), err_msg=where)
  elif isinstance(theirs, (dict, list, tuple)):
    assert type(ours) is (tuple if isinstance(theirs, torch.Size) else type(theirs)) and len(ours) == len(theirs), where
    if isinstance(theirs, dict):
      assert list(ours) == list(theirs), where
      for k in theirs: _same(ours[k], theirs[k], f"{where}.{k}")
    else:
      for i, (a, b) in enumerate(zip(ours, theirs)): _same(a, b, f"{where}.{i}")
  else: assert type(ours) is type(theirs) and ours == theirs, where

@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_torch_load_real_optimizer_state_and_edge_cases(tmp_path, protocol):
  torch.manual_seed(0)
  model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4))
  opt = torch.optim.Adam([{"params": model[0].parameters()}, {"params": model[1].parameters(), "lr": 0.1}])   # two groups share
  model(torch.randn(2, 3)).sum().backward()                                                                     # one betas tuple
  opt.step()
  ck = {"model": model.state_dict(), "opt": opt.state_dict(), "weight_again": model[0].weight,   # a Parameter over a shared storage
        "empty": {}, "empty_od": collections.OrderedDict(), "empty_list": [], "zero": torch.zeros(0, 3), "zero_f16": torch.ones(3, 0).half(),
        "half": torch.tensor(1.5).half(), "bf16": torch.tensor([1.25, -2.0, 3e38]).bfloat16(), "int_keys": {0: torch.ones(1), -7: 2},
        "misc": [(2, 3.5, None, True, "s", b"b"), torch.Size([2, 3]), 2**70, -1.5e-300], "view": torch.arange(12.).reshape(3, 4)[:, 1::2].t(),
        "broadcast": torch.arange(3.).expand(1000, 3)}   # stride 0: 3 stored floats
  torch.save(ck, tmp_path / "ck.pt", pickle_protocol=protocol)
  out = torch_load(tmp_path / "ck.pt", device="CPU")
  _same(out, ck)
  assert out["opt"]["param_groups"][0]["betas"] == (0.9, 0.999) and sorted(out["opt"]["state"]) == [0, 1, 2, 3]
  torch.save({}, tmp_path / "empty.pt")
  assert torch_load(tmp_path / "empty.pt") == {}
  torch.save(collections.OrderedDict(), tmp_path / "empty_od.pt")
  assert type(torch_load(tmp_path / "empty_od.pt")) is collections.OrderedDict

def _plain_value(rng: np.random.Generator, depth=0):
  """A random nest of the plain values a checkpoint may hold, with shared (memoized) parts."""
  leaves = [None, True, False, 0, -1, 255, 65536, -2**31, 2**31, 2**63 - 1, -2**100, 0.5, -1e300, float("inf"), "", "é\u2603\U0001f600",
            "x" * 300, b"", b"\x00\xff" * 200, bytearray(b"ba")]
  kind = rng.integers(0, 6 if depth < 4 else 1)
  if kind == 0: return leaves[rng.integers(len(leaves))]
  items = [_plain_value(rng, depth + 1) for _ in range(rng.integers(0, 5))]
  if kind == 1: return items
  if kind == 2: return tuple(items)
  keys = ["a", "b", "", "long" * 80, 0, 7, -3, 2**62, 1.5, b"k", None, True]
  d = {keys[rng.integers(len(keys))]: v for v in items}
  if kind == 3: return d
  if kind == 4: return collections.OrderedDict(d)
  return [d, d, items]   # the same objects twice

@pytest.mark.parametrize("protocol", range(6))
def test_unpickle_reads_plain_values_like_pickle(protocol):
  import tinyweb.nn.state as state
  find = {("collections", "OrderedDict"): state._Reducer(collections.OrderedDict, 0, 1), ("_codecs", "encode"): state._Reducer(state._encode, 1, 2)}
  def find_global(module, name):   # protocols < 3 write bytes and bytearray through globals: give those too
    if name in ("bytes", "bytearray") and module in ("__builtin__", "builtins"):
      return state._Reducer(lambda s=b"", enc=None: (bytes if name == "bytes" else bytearray)(s.encode(enc) if enc else s), 0, 2)
    return find[(module, name)]
  rng = np.random.default_rng(protocol)
  for _ in range(200):
    value = _plain_value(rng)
    data = pickle.dumps(value, protocol=protocol)
    assert state.unpickle(data, find_global) == pickle.loads(data), (value, data)

def test_torch_load_storages_at_any_alignment(tmp_path):
  buf = io.BytesIO()
  torch.save({"w": torch.tensor([1.5, -2.25, 3.0]), "d": torch.tensor([1.0, -2.0], dtype=torch.float64), "h": torch.tensor([0.5]).half()}, buf)
  src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
  for pad in range(8):   # stored members like torch's, but shifted by a member before them (torch aligns them to 64 bytes)
    with zipfile.ZipFile(tmp_path / "m.pt", "w") as dst:
      dst.writestr("archive/pad", b"x" * pad)
      for info in src.infolist(): dst.writestr(info.filename, src.read(info))
    for source in (tmp_path / "m.pt", (tmp_path / "m.pt").read_bytes()):
      out = torch_load(source, device="CPU")
      assert out["w"].tolist() == [1.5, -2.25, 3.0] and out["d"].tolist() == [1.0, -2.0] and out["h"].tolist() == [0.5]

def test_safetensors_empty_files(tmp_path):
  safe_save({}, tmp_path / "ours.safetensors")
  safetensors.torch.save_file({}, str(tmp_path / "ref.safetensors"))
  for name in ("ours", "ref"):
    assert safe_load(tmp_path / f"{name}.safetensors") == {} and safe_load_metadata(tmp_path / f"{name}.safetensors") == {}
  assert safetensors.torch.load_file(str(tmp_path / "ours.safetensors")) == {}
  null_meta = b'{"__metadata__":null}   '   # what an absent (Option) metadata serializes to
  assert safe_load_metadata(len(null_meta).to_bytes(8, "little") + null_meta) == {}

def test_torch_load_works_without_torch(tmp_path):
  ck = _torch_checkpoint()
  torch.save(ck, tmp_path / "ck.pt")
  np.savez(tmp_path / "expected.npz", **{k: _expected(t) for k, t in _flat_torch(ck).items()})
  script = textwrap.dedent(f"""
    import sys
    sys.modules["torch"] = None          # any `import torch` now fails
    import numpy as np
    from tinyweb.nn.state import torch_load, flatten_state_dict
    out = torch_load({str(tmp_path / "ck.pt")!r})
    flat = flatten_state_dict(out)
    exp = np.load({str(tmp_path / "expected.npz")!r})
    assert set(flat) == set(exp.files), (sorted(flat), exp.files)
    for k in exp.files: np.testing.assert_array_equal(flat[k].numpy(), exp[k], err_msg=k)
    assert out["step"] == 12 and "torch" not in [m.split(".")[0] for m, v in sys.modules.items() if v is not None]
    print("LOADED", len(flat))
  """)
  r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
  assert r.returncode == 0, r.stdout + r.stderr
  assert f"LOADED {len(_flat_torch(ck))}" in r.stdout

def test_torch_load_compressed_members_and_other_archive_names(device, tmp_path):
  buf = io.BytesIO()
  torch.save({"w": torch.arange(6.).reshape(2, 3).t()}, buf)
  src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
  with zipfile.ZipFile(tmp_path / "re.pt", "w", zipfile.ZIP_DEFLATED) as dst:
    for info in src.infolist(): dst.writestr(info.filename.replace("archive/", "my_model/", 1), src.read(info))
  out = torch_load(tmp_path / "re.pt", device=device)
  np.testing.assert_array_equal(out["w"].numpy(), np.arange(6.0, dtype=np.float32).reshape(2, 3).T)

def test_64bit_integers_narrow_on_devices_without_them(device, tmp_path):
  """Where the device has no int64/uint64 (WEBGPU), the loaders give int32/uint32 tensors when every value fits (step
  counters, token ids), as tinyweb.onnx does, and refuse the file naming the range when one does not."""
  fits = {"step": torch.tensor(3), "ids": torch.arange(-5, 5) * 1000, "u": torch.tensor([2**32 - 1, 0], dtype=torch.uint64),
          "w": torch.ones(2, 3).t()}
  safetensors.torch.save_file({k: v.contiguous() for k, v in fits.items()}, str(tmp_path / "fits.safetensors"))
  torch.save(fits, tmp_path / "fits.pt")
  torch.save(fits, tmp_path / "fits_legacy.pt", _use_new_zipfile_serialization=False)
  narrow = refused(device, dtypes.int64)
  for out in (safe_load(tmp_path / "fits.safetensors", device=device), torch_load(tmp_path / "fits.pt", device=device),
              torch_load(tmp_path / "fits_legacy.pt", device=device)):
    assert out["step"].dtype == (dtypes.int32 if narrow else dtypes.int64) and out["u"].dtype == (dtypes.uint32 if narrow else dtypes.uint64)
    for k, v in fits.items():
      assert out[k].shape == tuple(v.shape) and out[k].device == device
      np.testing.assert_array_equal(out[k].numpy(), v.numpy(), err_msg=k)
  for big in (torch.tensor([2**31]), torch.tensor([-2**31 - 1]), torch.tensor([2**32], dtype=torch.uint64)):
    torch.save({"big": big}, tmp_path / "big.pt")
    if narrow:
      with pytest.raises(FormatError, match=f"big.pt: torch_load: a u?int64 tensor holds values past u?int32's range, and {device} has no"):
        torch_load(tmp_path / "big.pt", device=device)
    else: assert torch_load(tmp_path / "big.pt", device=device)["big"].tolist() == big.tolist()

@pytest.mark.parametrize("protocol", [2, 4])
def test_torch_load_reads_the_legacy_format(device, tmp_path, protocol):
  """torch.save before PyTorch 1.6 (still written with _use_new_zipfile_serialization=False): pickles, then raw storages."""
  torch.manual_seed(0)
  ck = {"w": torch.randn(3, 4), "view": torch.arange(12.).reshape(3, 4)[:, 1::2].t(), "again": None, "half": torch.tensor([1.5, -2.0]).half(),
        "ints": torch.arange(-3, 3, dtype=torch.int32), "bytes": torch.tensor([0, 255], dtype=torch.uint8), "empty": torch.zeros(0, 2),
        "nested": collections.OrderedDict(a=[torch.ones(2), (3, "x")]), "step": 7}
  ck["again"] = ck["w"]   # one storage, two tensors
  torch.save(ck, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False, pickle_protocol=protocol)
  for src in (tmp_path / "legacy.pt", (tmp_path / "legacy.pt").read_bytes()): _same(torch_load(src, device=device), ck)

def test_torch_load_legacy_format_errors(tmp_path):
  torch.save({"w": torch.arange(6.), "v": torch.ones(3, dtype=torch.float64)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
  data = (tmp_path / "legacy.pt").read_bytes()
  for cut in (10, 200, len(data) - 30, len(data) - 1):
    with pytest.raises(FormatError, match="legacy.pt|bytes"): torch_load(data[:cut])
  count_at = data.index(b"\x06" + b"\x00" * 7) if data.find(b"\x03" + b"\x00" * 7) < 0 else data.index(b"\x03" + b"\x00" * 7)
  wrong = data[:count_at] + b"\x09" + data[count_at + 1:]   # a storage's element count that is not the object's
  with pytest.raises(FormatError, match="elements in the file but"): torch_load(wrong)
  torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt", _use_new_zipfile_serialization=False)   # a whole pickled module
  with pytest.raises(FormatError, match="module.pt: torch_load: "): torch_load(tmp_path / "module.pt")
  evil = pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2) + pickle.dumps(1001, protocol=2) + pickle.dumps({"little_endian": True}, protocol=2)
  evil += pickle.dumps({"x": _Evil(os.system, "true")}, protocol=2) + pickle.dumps([], protocol=2)
  with pytest.raises(FormatError, match="refusing to load global 'posix.system'"): torch_load(evil)

def test_torch_load_clear_errors(tmp_path):
  with pytest.raises(FormatError, match="not a PyTorch zip"): torch_load(b"hello world")
  torch.save({"x": torch.arange(5.).as_strided((3, 3), (1, 1))}, tmp_path / "overlap.pt")
  with pytest.raises(FormatError, match="overlapping"): torch_load(tmp_path / "overlap.pt")
  with pytest.raises(FormatError): torch_load((tmp_path / "overlap.pt").read_bytes()[:200])   # truncated

class _Evil:
  def __init__(self, fn, arg): self.fn, self.arg = fn, arg
  def __reduce__(self): return (self.fn, (self.arg,))

def _zip_with_pickle(path, payload: bytes):
  with zipfile.ZipFile(path, "w") as z:
    z.writestr("archive/data.pkl", payload)
    z.writestr("archive/version", "3\n")

@pytest.mark.parametrize("protocol", [2, 4])
@pytest.mark.parametrize("fn,arg", [(os.system, "touch {marker}"), (eval, "open({marker!r}, 'w')"), (exec, "open({marker!r}, 'w')")],
                         ids=["os.system", "eval", "exec"])
def test_torch_load_refuses_malicious_pickles(tmp_path, fn, arg, protocol):
  marker = str(tmp_path / "pwned")
  payload = pickle.dumps({"state": {"w": _Evil(fn, arg.format(marker=marker))}}, protocol=protocol)
  _zip_with_pickle(tmp_path / "evil.pt", payload)
  module = "__builtin__" if fn.__module__ == "builtins" and protocol < 3 else fn.__module__   # protocol 2 writes py2 names
  with pytest.raises(FormatError, match=f"evil.pt: torch_load: refusing to load global '{module}.{fn.__name__}'".replace(".", r"\.")):
    torch_load(tmp_path / "evil.pt")   # e.g. 'posix.system'
  with pytest.raises(FormatError, match=r"<bytes of \d+ bytes>: torch_load: refusing"): torch_load((tmp_path / "evil.pt").read_bytes())
  assert not os.path.exists(marker)

def test_torch_load_refuses_globals_hidden_among_tensors(tmp_path):
  buf = io.BytesIO()
  torch.save({"ok": torch.ones(2)}, buf)
  src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
  pkl = src.read("archive/data.pkl")
  evil = pkl.replace(b"ctorch._utils\n_rebuild_tensor_v2\n", b"cbuiltins\ngetattr\n")   # same length not needed for pickles
  with zipfile.ZipFile(tmp_path / "mixed.pt", "w") as dst:
    for info in src.infolist(): dst.writestr(info.filename, evil if info.filename.endswith("data.pkl") else src.read(info))
  with pytest.raises(FormatError, match=r"builtins\.getattr"): torch_load(tmp_path / "mixed.pt")
