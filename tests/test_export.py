"""tinyweb.export (issue 16): a jitted function captured on WEBGPU and written as WGSL kernels, manifest.json and
safetensors weights. Checks the folder's consistency (every step's bindings and kernel, the weights equal to the
model's parameters, the sha256 of each shard, limits within WebGPU's defaults, scratch memory shared as TinyJit shares
it), replays the manifest on the native WebGPU device from the written files alone (a Python twin of web/model.ts's
run) on an input other than the capture's, and the errors for what cannot be exported. The WASM target (issue 19):
captured on the WASM device, WebAssembly kernels and a memory layout, replayed with wasmtime from the files alone (a
twin of web/model_wasm.ts) to the WASM device's results bit for bit. The browser side (web/model.ts in Chromium, no
Pyodide) is e2e/test_browser_export.py."""
import hashlib, json, os, re
import numpy as np
import pytest
from tinyweb import Tensor, Device, TinyJit, dtypes
from tinyweb.export import export, ExportError, DEFAULT_LIMITS, _tree_shake
from tinyweb.export.cli import main
from tinyweb.nn import Linear, Conv2d, BatchNorm2d
from tinyweb.nn.state import get_parameters, get_state_dict, load_state_dict, safe_load

def _needs(device: str):
  ok, why = Device.check(device)
  return pytest.mark.skipif(not ok, reason=f"{device} unavailable: {why}")
webgpu, wasm = _needs("WEBGPU"), _needs("WASM")

class MLP:
  def __init__(self, device="WEBGPU"):
    self.l1, self.l2 = Linear(12, 32, device=device), Linear(32, 3, device=device)
  def __call__(self, x: Tensor) -> Tensor: return self.l2(self.l1(x).relu()).softmax(-1)

class ConvNet:
  def __init__(self, device="WEBGPU"):
    self.c1, self.bn1 = Conv2d(3, 8, 3, padding=1, device=device), BatchNorm2d(8, device=device)
    self.c2, self.bn2 = Conv2d(8, 16, 3, stride=2, device=device), BatchNorm2d(16, device=device)
    self.fc = Linear(16, 10, device=device)
  def __call__(self, x: Tensor) -> Tensor:
    x = self.bn1(self.c1(x)).relu().max_pool2d(2)
    x = self.bn2(self.c2(x)).silu()
    return self.fc(x.mean((2, 3)))

def _model(cls, device="WEBGPU"):
  Tensor.manual_seed(3)
  m = cls(device)
  for k, t in get_state_dict(m).items():   # (batch-norm statistics that are not the defaults)
    if k.endswith("running_mean"): t.assign(Tensor.randn(*t.shape, device=device) * 0.1)
    if k.endswith("running_var"): t.assign(Tensor.rand(*t.shape, device=device) + 0.5)
  Tensor.realize_all(*get_parameters(m), *get_state_dict(m).values())
  return m

def _check_folder(path, manifest: dict, model):
  """The folder holds what the manifest says, consistently."""
  assert json.loads((path / "manifest.json").read_text()) == manifest
  assert manifest["format"] == "tinyweb-export" and manifest["version"] == 2 and manifest["target"] in ("WEBGPU", "WASM")
  webgpu_target, kernels = manifest["target"] == "WEBGPU", manifest["kernels"]
  for k in kernels: (_check_wgsl if webgpu_target else _check_wasm_module)(path, k)
  assert sorted(f.name for f in (path / "kernels").iterdir()) == sorted(k["file"].split("/")[1] for k in kernels)
  used, names = set(), {}
  for v in manifest["variants"]:
    buffers, written = v["buffers"], set()
    assert [b["id"] for b in buffers] == list(range(len(buffers)))
    assert {b["kind"] for b in buffers} <= {"input", "output", "weight", "scratch"}
    for s in v["steps"]:
      k = kernels[s["kernel"]]
      assert len(s["buffers"]) == k["bindings" if webgpu_target else "params"] == len(set(s["buffers"])) and all(0 <= b < len(buffers) for b in s["buffers"])
      if webgpu_target: assert len(s["workgroups"]) == 3 and all(1 <= g <= 65535 for g in s["workgroups"])
      else: assert "workgroups" not in s
      written.add(s["buffers"][0])
      used.add(s["kernel"])
    for b in buffers:   # weights are only read; inputs never written; every output and scratch slot written
      if b["kind"] in ("weight", "input"): assert b["id"] not in written
      else: assert b["id"] in written, b
    for b in buffers:   # (a weight is one tensor of the shards, whichever variant uses it)
      if b["kind"] == "weight": assert names.setdefault(b["tensor"], b) == b
    if not webgpu_target:   # every buffer within the memory, aligned, and apart from the variant's others
      spans = sorted((b["offset"], b["offset"] + b["bytes"]) for b in buffers)
      assert all(a % 64 == 0 and a >= 64 for a, _ in spans) and spans[-1][1] <= manifest["memory"]["bytes"]
      assert all(end <= start for (_, end), (start, _) in zip(spans, spans[1:]))
  assert used == set(range(len(kernels)))   # (every kernel is launched by some variant)
  if webgpu_target:   # within WebGPU's defaults, and the limits are what the steps need
    steps = [s for v in manifest["variants"] for s in v["steps"]]
    assert all(manifest["limits"][k] <= v for k, v in DEFAULT_LIMITS.items())
    assert manifest["limits"]["maxStorageBuffersPerShaderStage"] == max(k["bindings"] for k in kernels)
    assert manifest["limits"]["maxComputeWorkgroupsPerDimension"] == max(g for s in steps for g in s["workgroups"])
  else: assert "limits" not in manifest and "features" not in manifest
  # the weights: each shard's sha256, the index, and the values equal to the model's parameters, by name
  index = json.loads((path / "weights.json").read_text())
  state = {k: t.numpy() for k, t in get_state_dict(model).items()}
  seen = set()
  for shard in manifest["weights"]["shards"]:
    data = (path / shard["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == shard["sha256"] == index["sha256"][shard["file"]] and len(data) == shard["bytes"]
    for name, t in safe_load(str(path / shard["file"]), device="CPU").items():
      half = names[name].get("stored") == "float16"   # (a float32 weight stored as float16: exactly, with weights_dtype="auto")
      assert index["weight_map"][name] == shard["file"] and names[name]["bytes"] == t.nbytes() * (2 if half else 1)
      assert t.dtype.name == ("float16" if half else names[name]["dtype"])
      np.testing.assert_array_equal(t.numpy(), state[name].astype(np.float16) if half else state[name])
      assert index["tensor_sha256"][name] == hashlib.sha256(np.ascontiguousarray(t.numpy()).tobytes()).hexdigest()
      seen.add(name)
  assert seen == set(names) == set(index["tensor_sha256"]) and seen <= set(state)

def _check_wgsl(path, k: dict):
  src = (path / k["file"]).read_text()
  assert re.search(rf"\bfn {k['entryPoint']}\(", src) and len(re.findall(r"@binding\(", src)) == k["bindings"]
  assert f"@workgroup_size({k['workgroupSize'][0]})" in src
  assert "enable f16" not in src and "tw_quadrant" not in src   # (f16 unused; the unused prelude shaken out)

def _check_wasm_module(path, k: dict):
  """A valid module that imports the memory and the math the manifest lists, and exports the entry point taking its
  buffers' addresses."""
  import wasmtime
  module = wasmtime.Module(wasmtime.Engine(), (path / k["file"]).read_bytes())
  assert sorted((i.module, i.name) for i in module.imports) == sorted([("env", "memory")] + [("math", n) for n in k["imports"]])
  (export,) = module.exports
  assert export.name == k["entryPoint"] and [str(p) for p in export.type.params] == ["i32"] * k["params"]

def _variant(manifest: dict) -> dict:
  """The manifest's one variant (an export without batch_sizes has one)."""
  (v,) = manifest["variants"]
  return v

def _replay(path, inputs: dict[str, np.ndarray], runs: int = 0):
  """Run the exported folder on the native WebGPU device from its files alone, as web/model.ts does: the variant whose
  inputs have the inputs' sizes, every buffer once, the weights (and state) from the shards, each step in order in one
  command encoder, the outputs read back. runs=N: N runs on the same buffers (state carries over), a list of their
  outputs."""
  manifest = json.loads((path / "manifest.json").read_text())
  (m,) = [v for v in manifest["variants"] if all(inputs[i["name"]].size == np.prod(i["shape"]) for i in v["inputs"])]
  dev = Device["WEBGPU"]
  w, d = dev.wgpu, dev.device
  usage = w.BufferUsage.STORAGE | w.BufferUsage.COPY_SRC | w.BufferUsage.COPY_DST
  bufs = [d.create_buffer(size=max(4, (b["bytes"] + 3) // 4 * 4), usage=usage) for b in m["buffers"]]
  tensors = {}
  for shard in manifest["weights"]["shards"]:
    data = (path / shard["file"]).read_bytes()
    n = int.from_bytes(data[:8], "little")
    for name, e in json.loads(data[8:8 + n]).items():
      if name != "__metadata__": tensors[name] = data[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]
  for b in m["buffers"]:
    if b["kind"] not in ("weight", "state"): continue
    data = tensors[b["tensor"]]
    if b.get("stored") == "float16": data = np.frombuffer(data, np.float16).astype(np.float32).tobytes()   # (the page does this on the GPU)
    d.queue.write_buffer(bufs[b["id"]], 0, data + bytes(-b["bytes"] % 4))
  for spec in m["inputs"]: d.queue.write_buffer(bufs[spec["buffer"]], 0, inputs[spec["name"]].astype(spec["dtype"]).tobytes())
  pipes = []
  for k in manifest["kernels"]:
    layout = d.create_bind_group_layout(entries=[{"binding": i, "visibility": w.ShaderStage.COMPUTE,
                                                  "buffer": {"type": w.BufferBindingType.storage}} for i in range(k["bindings"])])
    pipe = d.create_compute_pipeline(layout=d.create_pipeline_layout(bind_group_layouts=[layout]),
                                     compute={"module": d.create_shader_module(code=(path / k["file"]).read_text()), "entry_point": k["entryPoint"]})
    pipes.append((pipe, layout))
  results = []
  for _ in range(max(runs, 1)):
    enc = d.create_command_encoder()
    cp = enc.begin_compute_pass()
    for s in m["steps"]:
      pipe, layout = pipes[s["kernel"]]
      cp.set_pipeline(pipe)
      cp.set_bind_group(0, d.create_bind_group(layout=layout, entries=[{"binding": i, "resource": {"buffer": bufs[b], "offset": 0, "size": bufs[b].size}}
                                                                       for i, b in enumerate(s["buffers"])]))
      cp.dispatch_workgroups(*s["workgroups"])
    cp.end()
    d.queue.submit([enc.finish()])
    out = {}
    for spec in m["outputs"]:
      raw = d.queue.read_buffer(bufs[spec["buffer"]])
      out[spec["name"]] = np.frombuffer(raw, dtype=spec["dtype"])[:int(np.prod(spec["shape"]))].reshape(spec["shape"])
    results.append(out)
  for b in bufs: b.destroy()
  return results if runs else results[0]

def _replay_wasm(path, inputs: dict[str, np.ndarray], runs: int = 0):
  """Run a WASM export with wasmtime from its files alone, as web/model_wasm.ts does: one memory of the manifest's size,
  the weights (float16 ones widened) and state written at their offsets, the inputs, then each step in order (a kernel:
  its function called with its buffers' offsets; a copy: within the memory), the outputs read. The math imports are
  tinyweb.scalar's, as on the WASM device (the page's are JavaScript's Math). runs=N as for _replay."""
  import wasmtime
  from tinyweb import scalar
  from tinyweb.codegen.wasm import IMPORTED_MATH
  manifest = json.loads((path / "manifest.json").read_text())
  assert manifest["target"] == "WASM"
  (m,) = [v for v in manifest["variants"] if all(inputs[i["name"]].size == np.prod(i["shape"]) for i in v["inputs"])]
  store = wasmtime.Store()
  pages = -(-manifest["memory"]["bytes"] // 65536)
  memory = wasmtime.Memory(store, wasmtime.MemoryType(wasmtime.Limits(pages, pages)))
  f64 = wasmtime.ValType.f64()
  math = {n: wasmtime.Func(store, wasmtime.FuncType([f64] * (2 if n == "fmod" else 1), [f64]), scalar.ALU[op]) for op, n in IMPORTED_MATH.items()}
  fns = []
  for k in manifest["kernels"]:
    module = wasmtime.Module(store.engine, (path / k["file"]).read_bytes())
    fns.append(wasmtime.Instance(store, module, [memory if i.module == "env" else math[i.name] for i in module.imports]).exports(store)[k["entryPoint"]])
  tensors = {}
  for shard in manifest["weights"]["shards"]:
    data = (path / shard["file"]).read_bytes()
    n = int.from_bytes(data[:8], "little")
    for name, e in json.loads(data[8:8 + n]).items():
      if name != "__metadata__": tensors[name] = data[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]
  for b in m["buffers"]:
    if b["kind"] not in ("weight", "state"): continue
    data = tensors[b["tensor"]]
    if b.get("stored") == "float16": data = np.frombuffer(data, np.float16).astype(np.float32).tobytes()
    memory.write(store, data, b["offset"])
  offset = {b["id"]: b["offset"] for b in m["buffers"]}
  for spec in m["inputs"]: memory.write(store, inputs[spec["name"]].astype(spec["dtype"]).tobytes(), offset[spec["buffer"]])
  results = []
  for _ in range(max(runs, 1)):
    for s in m["steps"]:
      if "copy" in s: memory.write(store, memory.read(store, offset[s["copy"]["src"]], offset[s["copy"]["src"]] + s["copy"]["bytes"]), offset[s["copy"]["dst"]])
      else: fns[s["kernel"]](store, *(offset[b] for b in s["buffers"]))
    out = {}
    for spec in m["outputs"]:
      n = int(np.prod(spec["shape"])) * np.dtype(spec["dtype"]).itemsize
      out[spec["name"]] = np.frombuffer(memory.read(store, offset[spec["buffer"]], offset[spec["buffer"]] + n), dtype=spec["dtype"]).reshape(spec["shape"])
    results.append(out)
  return results if runs else results[0]

@webgpu
@pytest.mark.parametrize("cls, shape", [(MLP, (4, 12)), (ConvNet, (2, 3, 16, 16))], ids=["mlp", "convnet"])
def test_export_writes_a_consistent_folder_that_replays_to_the_models_outputs(tmp_path, cls, shape):
  model = _model(cls)
  x = Tensor.randn(*shape, device="WEBGPU").contiguous().realize()
  manifest = export(model, x, path=tmp_path, names=["pixels"], output_names=["probs"], state_dict=get_state_dict(model))
  _check_folder(tmp_path, manifest, model)
  assert _variant(manifest)["inputs"] == [{"name": "pixels", "buffer": 0, "shape": list(shape), "dtype": "float32"}]
  assert [(o["name"], o["shape"], o["dtype"]) for o in _variant(manifest)["outputs"]] == [("probs", [shape[0], 3 if cls is MLP else 10], "float32")]
  assert manifest["features"] == [] and manifest["weights"]["index"] == "weights.json"
  x2 = np.random.default_rng(1).standard_normal(shape).astype(np.float32)   # (not the capture's input)
  want = model(Tensor(x2, device="WEBGPU")).numpy()
  got = _replay(tmp_path, {"pixels": x2})["probs"]
  np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())

@webgpu
def test_batch_sizes_are_variants_sharing_kernels_and_weights(tmp_path):
  """One capture per batch size: each variant replays to the model's outputs at its size, the weights are written once,
  and a TinyJit already captured at one size is used as it is for that size."""
  model = _model(ConvNet)
  x = Tensor.randn(2, 3, 16, 16, device="WEBGPU").contiguous().realize()
  jit = TinyJit(model)
  for _ in range(2): jit(x)
  captured = jit.launches
  manifest = export(jit, x, path=tmp_path, batch_sizes=[1, 2, 5], state_dict=get_state_dict(model))
  assert jit.launches is captured   # (its own size is not captured again)
  _check_folder(tmp_path, manifest, model)
  assert [v["inputs"][0]["shape"][0] for v in manifest["variants"]] == [2, 1, 5]   # (the example's size first)
  assert [v["outputs"][0]["shape"] for v in manifest["variants"]] == [[2, 10], [1, 10], [5, 10]]
  tensors = [t for shard in manifest["weights"]["shards"] for t in shard["tensors"]]
  assert sorted(tensors) == sorted(k for k, t in get_state_dict(model).items() if not k.endswith("num_batches_tracked"))
  assert len(manifest["kernels"]) < sum(len({s["kernel"] for s in v["steps"]}) for v in manifest["variants"])   # (shared)
  rng = np.random.default_rng(4)
  for n in (1, 2, 5):
    xn = rng.standard_normal((n, 3, 16, 16)).astype(np.float32)
    want = model(Tensor(xn, device="WEBGPU")).numpy()
    np.testing.assert_allclose(_replay(tmp_path, {"input": xn})["output"], want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
  # a function's inputs all carry the batch first; sizes are distinct positive integers
  a, b = Tensor.randn(3, 4, device="WEBGPU").realize(), Tensor.randn(3, 1, device="WEBGPU").realize()
  manifest = export(lambda a, b: (a * b).sum(1), a, b, path=tmp_path / "two", batch_sizes=[3, 8])
  assert [[i["shape"] for i in v["inputs"]] for v in manifest["variants"]] == [[[3, 4], [3, 1]], [[8, 4], [8, 1]]]
  out = _replay(tmp_path / "two", {"input0": np.ones((8, 4), np.float32), "input1": np.arange(8, dtype=np.float32).reshape(8, 1)})
  np.testing.assert_array_equal(out["output"], np.arange(8) * 4)
  with pytest.raises(ExportError, match=r"batch_sizes needs every input's first dimension to be the batch.*\(3, 4\), \(4,\)"):
    export(lambda a, b: a + b, a, Tensor.randn(4, device="WEBGPU").realize(), path=tmp_path, batch_sizes=[1])
  for bad in ([], [0], [2, 2], [1.5], [True]):
    with pytest.raises(ExportError, match="batch_sizes must be distinct positive integers"): export(model, x, path=tmp_path, batch_sizes=bad)

@webgpu
def test_more_examples_are_variants_of_other_shapes(tmp_path):
  """Variants that differ in any dimension (a language model's 16-token prompt chunk beside its 1-token step): each is a
  capture of its own, they share the weights, and each replays to the function's result at its shapes."""
  table = Tensor.randn(10, 3, device="WEBGPU").realize()
  def f(tokens, scale): return (table[tokens.reshape(-1)].sum(0) * scale).contiguous()
  ints = lambda *v: Tensor(list(v), dtype=dtypes.int32, device="WEBGPU").reshape(1, -1).contiguous().realize()
  one = Tensor([2.0], device="WEBGPU").realize()
  manifest = export(f, ints(1), one, path=tmp_path, names=["tokens", "scale"], state_dict={"table": table},
                    more_examples=[(ints(1, 2, 3, 4), one)])
  assert [[i["shape"] for i in v["inputs"]] for v in manifest["variants"]] == [[[1, 1], [1]], [[1, 4], [1]]]
  assert [t for shard in manifest["weights"]["shards"] for t in shard["tensors"]] == ["table"]
  rows = table.numpy()
  for ids in ([7], [0, 9, 3, 3]):
    got = _replay(tmp_path, {"tokens": np.array([ids], np.int32), "scale": np.array([0.5], np.float32)})["output"]
    np.testing.assert_allclose(got, rows[ids].sum(0) * 0.5, rtol=1e-6, atol=1e-6)
  with pytest.raises(ExportError, match=r"more_examples\[0\] has dtypes \['float32', 'float32'\].*example inputs' dtypes \['int32', 'float32'\]"):
    export(f, ints(1), one, path=tmp_path, more_examples=[(Tensor.zeros(1, 4, device="WEBGPU"), one)])
  with pytest.raises(ExportError, match=r"more_examples\[0\] must be 2 tensors"): export(f, ints(1), one, path=tmp_path, more_examples=[(ints(1, 2),)])
  with pytest.raises(ExportError, match=r"more_examples\[0\] has the inputs of shapes \[\(1, 1\), \(1,\)\] of an earlier variant"):
    export(f, ints(1), one, path=tmp_path, more_examples=[(ints(5), one)])
  with pytest.raises(ExportError, match="batch_sizes or more_examples, not both"):
    export(f, ints(1), one, path=tmp_path, batch_sizes=[1, 2], more_examples=[(ints(1, 2), one)])

@webgpu
def test_intermediates_share_memory_slots_as_the_jit_does(tmp_path):
  """A chain of big intermediates: the manifest allocates TinyJit's shared slots, not one buffer per intermediate."""
  w = [Tensor.randn(64, 64, device="WEBGPU").realize() for _ in range(6)]
  def chain(x):
    for m in w: x = (x @ m).relu().contiguous()
    return x.sum(-1)
  jit = TinyJit(chain)
  x = Tensor.randn(64, 64, device="WEBGPU").contiguous().realize()
  manifest = export(jit, x, path=tmp_path)
  scratch = [b for b in _variant(manifest)["buffers"] if b["kind"] == "scratch"]
  transient = {b for _, kbufs in jit.launches for b in kbufs if b.transient}
  assert len(transient) >= 5 and len(scratch) == len(jit.memory) < len(transient)
  assert sorted(b["bytes"] for b in scratch) == sorted(s.nbytes for s in jit.memory)
  assert [b["tensor"] for b in _variant(manifest)["buffers"] if b["kind"] == "weight"] == [f"buffer{i}" for i in range(6)]   # (unnamed)
  assert len([b for b in _variant(manifest)["buffers"] if b["kind"] == "weight"]) == 6
  x2 = np.random.default_rng(2).standard_normal((64, 64)).astype(np.float32)
  want = chain(Tensor(x2, device="WEBGPU")).numpy()
  np.testing.assert_allclose(_replay(tmp_path, {"input": x2})["output"], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())

@webgpu
def test_several_inputs_and_outputs_keep_their_names_and_order(tmp_path):
  a, b = Tensor.randn(5, device="WEBGPU").realize(), Tensor.randn(5, device="WEBGPU").realize()
  manifest = export(lambda a, b: {"sum": a + b, "prod": (a * b).reshape(5, 1)}, a, b, path=tmp_path, names=["a", "b"],
                    output_names=["s", "p"])
  assert [(i["name"], i["buffer"]) for i in _variant(manifest)["inputs"]] == [("a", 0), ("b", 1)]
  assert [(o["name"], o["shape"]) for o in _variant(manifest)["outputs"]] == [("s", [5]), ("p", [5, 1])]
  out = _replay(tmp_path, {"a": np.arange(5, dtype=np.float32), "b": np.full(5, 2, np.float32)})
  np.testing.assert_array_equal(out["s"], np.arange(5) + 2)
  np.testing.assert_array_equal(out["p"], (np.arange(5) * 2).reshape(5, 1))
  # a dict's keys name the outputs; an output that is a constant (nothing computes it) is a weight the page reads back
  w = Tensor([1.0, 2.0, 3.0], device="WEBGPU").realize()
  manifest = export(lambda x: {"y": x * 3, "w": w}, a[:3].contiguous().realize(), path=tmp_path)
  assert [o["name"] for o in _variant(manifest)["outputs"]] == ["y", "w"]
  assert _variant(manifest)["buffers"][_variant(manifest)["outputs"][1]["buffer"]]["kind"] == "weight"
  out = _replay(tmp_path, {"input": np.ones(3, np.float32)})
  np.testing.assert_array_equal(out["y"], [3, 3, 3])
  np.testing.assert_array_equal(out["w"], [1, 2, 3])

@webgpu
def test_exporting_again_replaces_the_earlier_files(tmp_path):
  x = Tensor.randn(4, 12, device="WEBGPU").realize()
  export(_model(MLP), x, path=tmp_path)
  manifest = export(lambda x: x * 2, x, path=tmp_path)
  assert len(list((tmp_path / "kernels").iterdir())) == len(manifest["kernels"]) == 1
  assert manifest["weights"]["shards"] == [] and not list(tmp_path.glob("*.safetensors"))

@webgpu
def test_the_weights_are_sharded(tmp_path):
  model = _model(MLP)
  manifest = export(model, Tensor.randn(4, 12, device="WEBGPU").realize(), path=tmp_path, shard_bytes=600,
                    state_dict=get_state_dict(model))
  shards = manifest["weights"]["shards"]
  assert len(shards) >= 2 and [s["file"] for s in shards] == [f"weights-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
  _check_folder(tmp_path, manifest, model)

@webgpu
def test_limits_above_the_defaults_are_refused_unless_allowed(tmp_path):
  if Device["WEBGPU"].renderer.max_buffers <= 8: pytest.skip("this WEBGPU device splits kernels at 8 buffers (TINYWEB_WEBGPU_LIMITS=default)")
  xs = [Tensor.randn(16, device="WEBGPU").realize() for _ in range(10)]
  def many(*xs):
    out = xs[0]
    for x in xs[1:]: out = out + x
    return out
  with pytest.raises(ExportError, match=r"maxStorageBuffersPerShaderStage 11 \(allowed: 8\).*limits=|TINYWEB_WEBGPU_LIMITS=default"):
    export(many, *xs, path=tmp_path)
  manifest = export(many, *xs, path=tmp_path, limits={"maxStorageBuffersPerShaderStage": 16})
  assert manifest["limits"]["maxStorageBuffersPerShaderStage"] == 11

@webgpu
def test_weights_stored_as_float16_where_exact_or_asked(tmp_path):
  model = _model(MLP)
  model.l1.weight.assign(model.l1.weight.cast("float16").cast("float32")).realize()   # (as a float16 checkpoint loads)
  x = np.random.default_rng(2).standard_normal((4, 12)).astype(np.float32)
  want = model(Tensor(x, device="WEBGPU")).numpy()
  manifest = export(model, Tensor(x, device="WEBGPU"), path=tmp_path / "auto", state_dict=get_state_dict(model))
  stored = {b["tensor"]: b.get("stored") for b in _variant(manifest)["buffers"] if b["kind"] == "weight"}
  assert stored == {"l1.weight": "float16", "l1.bias": None, "l2.weight": None, "l2.bias": None}   # (exact only for l1.weight)
  _check_folder(tmp_path / "auto", manifest, model)
  np.testing.assert_allclose(_replay(tmp_path / "auto", {"input": x})["output"], want, rtol=1e-5, atol=1e-6)
  # all of them, rounded: the shards are half the size and the outputs those of the rounded weights
  manifest16 = export(model, Tensor(x, device="WEBGPU"), path=tmp_path / "f16", state_dict=get_state_dict(model), weights_dtype="float16")
  assert all(b.get("stored") == "float16" for b in _variant(manifest16)["buffers"] if b["kind"] == "weight")
  _check_folder(tmp_path / "f16", manifest16, model)
  f32 = export(model, Tensor(x, device="WEBGPU"), path=tmp_path / "f32", state_dict=get_state_dict(model), weights_dtype="float32")
  assert not any("stored" in b for b in _variant(f32)["buffers"])
  sizes = {k: sum(sh["bytes"] for sh in m["weights"]["shards"]) for k, m in (("f16", manifest16), ("f32", f32))}
  half = sum(b["bytes"] for b in _variant(f32)["buffers"] if b["kind"] == "weight") // 2
  assert abs(sizes["f32"] - sizes["f16"] - half) <= 16   # (the headers differ only in the offsets' digits)
  rounded = {k: Tensor(t.numpy().astype(np.float16).astype(np.float32), device="WEBGPU") for k, t in get_state_dict(model).items()}
  load_state_dict(model, rounded)
  np.testing.assert_allclose(_replay(tmp_path / "f16", {"input": x})["output"], model(Tensor(x, device="WEBGPU")).numpy(), rtol=1e-5, atol=1e-6)
  # a value float16 cannot hold: kept as float32 by "auto", refused by "float16"
  model.l2.bias.assign(Tensor([1e6, 0.0, 0.0], device="WEBGPU")).realize()
  manifest = export(model, Tensor(x, device="WEBGPU"), path=tmp_path / "auto", state_dict=get_state_dict(model))
  assert [b.get("stored") for b in _variant(manifest)["buffers"] if b.get("tensor") == "l2.bias"] == [None]
  with pytest.raises(ExportError, match=r"weight 'l2.bias' holds 1000000.0, beyond float16's range \(65504\)"):
    export(model, Tensor(x, device="WEBGPU"), path=tmp_path / "f16", state_dict=get_state_dict(model), weights_dtype="float16")
  with pytest.raises(ExportError, match="weights_dtype must be one of auto, float16, float32, got 'half'"):
    export(model, Tensor(x, device="WEBGPU"), path=tmp_path / "f16", weights_dtype="half")

@webgpu
def test_bad_arguments_and_unexportable_functions_are_refused(tmp_path):
  x = Tensor.randn(3, device="WEBGPU").realize()
  with pytest.raises(ExportError, match="no example inputs"): export(lambda: Tensor.ones(3), path=tmp_path)
  with pytest.raises(ExportError, match="example input 0 is a list, not a Tensor"): export(lambda x: x, [1.0, 2.0], path=tmp_path)
  with pytest.raises(ExportError, match=r"example input 1 is on CPU.*WEBGPU"): export(lambda a, b: a + b, x, Tensor.ones(3, device="CPU"), path=tmp_path)
  with pytest.raises(ExportError, match="fn must be a function"): export(3, x, path=tmp_path)
  with pytest.raises(ExportError, match="returned int, not a Tensor"): export(lambda x: 3, x, path=tmp_path)
  with pytest.raises(ExportError, match=r"2 input names \['a', 'b'\] for 1 inputs"): export(lambda x: x + 1, x, path=tmp_path, names=["a", "b"])
  with pytest.raises(ExportError, match="output names .* are not unique"):
    export(lambda x: (x + 1, x * 2), x, path=tmp_path, output_names=["y", "y"])
  with pytest.raises(ExportError, match="not a plain identifier"): export(lambda x: x + 1, x, path=tmp_path, names=["a b"])
  with pytest.raises(ExportError, match="unknown limit 'maxThings'"): export(lambda x: x + 1, x, path=tmp_path, limits={"maxThings": 3})
  with pytest.raises(ExportError, match="the same tensor as an earlier input"): export(lambda a, b: a + b, x, x, path=tmp_path)

@webgpu
def test_state_is_kept_from_run_to_run(tmp_path):
  """A buffer read and then written (a counter's assign) is state: its value when exported is in the shards, and each
  run continues from the last, as the jit's own calls do."""
  counter = Tensor([0.0], device="WEBGPU").contiguous().realize()
  @TinyJit
  def step(x):
    counter.assign(counter + 1)
    return (x * counter).contiguous()
  x = Tensor([1.0, 2.0, 3.0], device="WEBGPU").realize()
  for _ in range(3): step(x)   # (captured: the counter is at 3)
  manifest = export(step, x, path=tmp_path, state_dict={"counter": counter}, weights_dtype="float16")
  (state,) = [b for b in _variant(manifest)["buffers"] if b["kind"] == "state"]
  assert state["tensor"] == "counter" and "stored" not in state   # (state is stored as it is, never rounded)
  assert safe_load(str(tmp_path / manifest["weights"]["shards"][0]["file"]), device="CPU")["counter"].numpy().tolist() == [3.0]
  runs = _replay(tmp_path, {"input": x.numpy()}, runs=2)
  want = [step(x).numpy().copy() for _ in range(2)]   # (the jit goes on from 3 too)
  np.testing.assert_array_equal(np.stack([r["output"] for r in runs]), np.stack(want))
  np.testing.assert_array_equal(want[1], [5.0, 10.0, 15.0])
  # random numbers' generator state (uint32) is state too
  manifest = export(lambda x: x + Tensor.rand(3, device="WEBGPU"), x, path=tmp_path / "rand")
  assert [(b["kind"], b["dtype"]) for b in _variant(manifest)["buffers"] if b["kind"] == "state"] == [("state", "uint32")]

def test_tree_shaking_keeps_what_the_entry_point_uses():
  src = ("enable f16;\nfn a(x: f32) -> f32 { return b(x); }\nfn b(x: f32) -> f32 { return x; }  // b\n"
         "fn c(x: f32) -> f32 { return x; }\nstruct S { r: f32 }\nfn d() -> S { return S(1.0f); }\n"
         "var<private> t: array<u32, 2> = array<u32, 2>(1u, 2u);\n"
         "@group(0) @binding(0) var<storage, read_write> data0: array<f32>;\n"
         "@compute @workgroup_size(4)\nfn k(@builtin(workgroup_id) wg: vec3<u32>) {\n  data0[0] = a(1.0f) + f32(t[0]);\n}\n")
  out = _tree_shake(src, "k")
  assert out == ("enable f16;\nfn a(x: f32) -> f32 { return b(x); }\nfn b(x: f32) -> f32 { return x; }"
                 "\nvar<private> t: array<u32, 2> = array<u32, 2>(1u, 2u);\n"
                 "@group(0) @binding(0) var<storage, read_write> data0: array<f32>;\n"
                 "@compute @workgroup_size(4)\nfn k(@builtin(workgroup_id) wg: vec3<u32>) {\n  data0[0] = a(1.0f) + f32(t[0]);\n}\n")
  assert _tree_shake("fn k( {", "k") == "fn k( {"   # (what does not parse is kept whole)

def test_command_line_refuses_an_unknown_model(capsys):
  with pytest.raises(SystemExit): main(["resnet-9000", "out"])
  assert "invalid choice: 'resnet-9000'" in capsys.readouterr().err

@webgpu
def test_float16_kernels_need_shader_f16_allowed(tmp_path):
  if not Device["WEBGPU"].has_dtype(dtypes.float16): pytest.skip("this WEBGPU device has no float16")
  x = Tensor.randn(8, device="WEBGPU").realize()
  with pytest.raises(ExportError, match=r"need the WebGPU feature\(s\) \['shader-f16'\].*features=\[\.\.\.\]"):
    export(lambda x: (x.half() * 3).float(), x, path=tmp_path)
  manifest = export(lambda x: (x.half() * 3).float(), x, path=tmp_path, features=["shader-f16"])
  assert manifest["features"] == ["shader-f16"]
  assert all((tmp_path / k["file"]).read_text().startswith("enable f16;") for k in manifest["kernels"])

@webgpu
def test_a_float16_checkpoint_exports_from_the_command_line(tmp_path):
  """The fall detector (ultralytics' float16 YOLOv8s checkpoint) exported by `python -m tinyweb.export yolov8` (the scale
  from the weights) on the portable WEBGPU device, which has no float16: the shards hold the checkpoint's values (as
  float16, exactly), the same that YOLOv8.load gives; a name whose scale the weights contradict is refused."""
  import subprocess, sys, testdata
  weights = testdata.path("yolov8s_fall.pt")
  run = lambda *args: subprocess.run([sys.executable, "-m", "tinyweb.export", *args], capture_output=True, text=True, timeout=600)
  p = run("yolov8", str(tmp_path), "--weights", weights, "--size", "64")
  assert p.returncode == 0, p.stdout + p.stderr
  assert p.stdout.startswith(f"exported yolov8s (weights {weights}, input (1, 3, 64, 64))")
  manifest = json.loads((tmp_path / "manifest.json").read_text())
  assert manifest["capturedOn"]["portable"] and _variant(manifest)["outputs"][0]["shape"] == [1, 6, 84]   # (2 classes; 8x8+4x4+2x2 cells)
  from tinyweb.models.yolov8 import YOLOv8
  want = get_state_dict(YOLOv8.load(weights, device="CPU"))
  stored = {b["tensor"]: b.get("stored") for b in _variant(manifest)["buffers"] if b["kind"] == "weight"}
  for shard in manifest["weights"]["shards"]:
    for name, t in safe_load(str(tmp_path / shard["file"]), device="CPU").items():
      assert stored[name] == "float16" and t.dtype == dtypes.float16
      np.testing.assert_array_equal(t.numpy().astype(np.float32), want[name].numpy())
  assert len(stored) == len([k for k in want if not k.endswith("num_batches_tracked")])
  p = run("yolov8n", str(tmp_path), "--weights", weights)
  assert p.returncode != 0 and "holds a YOLOv8s, not a YOLOv8n (name the model yolov8s, or yolov8)" in p.stderr
  p = run("yolov8", str(tmp_path))
  assert p.returncode != 0 and "yolov8 takes its variant or scale from --weights, which is missing" in p.stderr

@webgpu
def test_minilm_exports_with_named_token_inputs(tmp_path):
  """`python -m tinyweb.export minilm` (a sentence-transformers folder, 16 tokens, batch sizes 2 and 1): token ids and
  attention mask in, by name; the replayed embeddings equal SentenceEncoder.encode's on the CPU device."""
  import subprocess, sys, testdata
  from tinyweb.models.bert import SentenceEncoder
  folder = os.path.dirname(testdata.path("all-MiniLM-L6-v2/model.safetensors"))
  p = subprocess.run([sys.executable, "-m", "tinyweb.export", "minilm", str(tmp_path), "--weights", folder, "--size", "16",
                      "--batch-sizes", "2,1"], capture_output=True, text=True, timeout=600)
  assert p.returncode == 0, p.stdout + p.stderr
  manifest = json.loads((tmp_path / "manifest.json").read_text())
  assert [[(i["name"], i["shape"], i["dtype"]) for i in v["inputs"]] for v in manifest["variants"]] == \
         [[("input_ids", [n, 16], "int32"), ("attention_mask", [n, 16], "int32")] for n in (1, 2)]
  encoder = SentenceEncoder.from_folder(folder, device="CPU")
  sentences = ["A cat sits on the mat.", "Exported models run in the browser without Python."]
  ids, mask = encoder.tokenizer(sentences, pad_to_multiple_of=16)
  assert len(ids[0]) == 16
  want = encoder.encode(sentences).numpy()
  got = _replay(tmp_path, {"input_ids": np.array(ids, np.int32), "attention_mask": np.array(mask, np.int32)})["output"]
  np.testing.assert_allclose(got, want, atol=2e-5)
  got1 = _replay(tmp_path, {"input_ids": np.array(ids[:1], np.int32), "attention_mask": np.array(mask[:1], np.int32)})["output"]
  np.testing.assert_allclose(got1, want[:1], atol=2e-5)

@webgpu
def test_with_source_keeps_the_weights_and_the_live_model_gives_the_exports_outputs(tmp_path):
  """`--with-source` (the pages' ?backend=live): the sentence-transformers folder copied into source/, every file listed
  in source.json with its size; tinyweb.export.live.LiveModel built from that copy (on the CPU device, as the page's
  Pyodide builds it on WebGPU) gives the outputs the exported kernels give, replayed from the folder; bad uses said."""
  import subprocess, sys, testdata
  from tinyweb.export.live import LiveModel
  from tinyweb.models.bert import SentenceEncoder
  folder = os.path.dirname(testdata.path("all-MiniLM-L6-v2/model.safetensors"))
  run = lambda *args: subprocess.run([sys.executable, "-m", "tinyweb.export", *args], capture_output=True, text=True, timeout=600)
  p = run("minilm", str(tmp_path), "--weights", folder, "--size", "16", "--with-source")
  assert p.returncode == 0, p.stdout + p.stderr
  source = json.loads((tmp_path / "source.json").read_text())
  originals = sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)
  assert {k: source[k] for k in ["format", "model", "size", "part", "weights"]} == \
         {"format": "tinyweb-live-source", "model": "minilm", "size": 16, "part": None, "weights": "source/all-MiniLM-L6-v2"}
  assert [f["path"] for f in source["files"]] == [f"source/all-MiniLM-L6-v2/{f}" for f in originals]
  for f, name in zip(source["files"], originals):
    assert f["bytes"] == os.path.getsize(os.path.join(folder, name))
    assert (tmp_path / f["path"]).read_bytes() == open(os.path.join(folder, name), "rb").read()
  encoder = SentenceEncoder.from_folder(folder, device="CPU")
  ids, mask = (np.array(a, np.int32) for a in encoder.tokenizer(["Live or exported, the same sentence."], pad_to_multiple_of=16))
  live = LiveModel("minilm", str(tmp_path / source["weights"]), 16, device="CPU")
  runs = [live(Tensor(ids, device="CPU"), Tensor(mask, device="CPU")) for _ in range(3)]   # (plain, capture, replay)
  want = _replay(tmp_path, {"input_ids": ids, "attention_mask": mask})["output"]
  for (out,) in runs: np.testing.assert_allclose(out.numpy(), want, atol=2e-5)
  with pytest.raises(ValueError, match="unknown model 'resnet'"): LiveModel("resnet", None, None, device="CPU")
  with pytest.raises(ValueError, match="minilm is one function, not parts"): LiveModel("minilm", str(tmp_path / source["weights"]), 16, "unet", device="CPU")
  p = run("efficientnet-lite1", str(tmp_path / "random"), "--with-source")
  assert p.returncode != 0 and "--with-source: there are no weights to copy" in p.stderr

def test_stable_diffusion_exports_its_parts_for_the_page(tmp_path):
  """`python -m tinyweb.export stable-diffusion` on a diffusers pipeline folder (random weights, saved by diffusers):
  text_encoder/, unet/ and vae_decoder/ with the page's inputs, tokenizer.json and scheduler.json beside them. The
  page's sampler (web/sd_sampler.ts), written here in numpy around the three parts replayed from their files, gives
  the image of StableDiffusionPipeline on the CPU device from the same latents (guided, 3 steps)."""
  import subprocess, sys
  pytest.importorskip("diffusers")
  from test_stable_diffusion import save_random_pipeline, SIZE
  from tinyweb.models.stable_diffusion import StableDiffusionPipeline
  (folder := tmp_path / "pipeline").mkdir()
  (tmp_path / "vocab").mkdir()
  save_random_pipeline(folder, tmp_path / "vocab")
  out = tmp_path / "export"
  p = subprocess.run([sys.executable, "-m", "tinyweb.export", "stable-diffusion", str(out), "--weights", str(folder), "--size", str(SIZE),
                      "--with-source"], capture_output=True, text=True, timeout=600)
  assert p.returncode == 0, p.stdout + p.stderr
  assert [line.split(" (")[0] for line in p.stdout.splitlines()] == [f"exported stable-diffusion {part}" for part in ("text_encoder", "unet", "vae_decoder")]
  io = {part: [[(t["name"], t["shape"]) for t in _variant(json.loads((out / part / "manifest.json").read_text()))[k]] for k in ("inputs", "outputs")]
        for part in ("text_encoder", "unet", "vae_decoder")}
  assert io == {"text_encoder": [[("input_ids", [1, 77])], [("last_hidden_state", [1, 77, 32])]],
                "unet": [[("latents", [2, 4, 8, 8]), ("timestep", [1]), ("encoder_hidden_states", [2, 77, 32])], [("noise", [2, 4, 8, 8])]],
                "vae_decoder": [[("latents", [1, 4, 8, 8])], [("image", [1, SIZE, SIZE, 3])]]}
  pipe = StableDiffusionPipeline.from_pretrained(folder, device="CPU")
  assert json.loads((out / "tokenizer.json").read_text()) == pipe.tokenizer.to_json()
  plans = json.loads((out / "scheduler.json").read_text())["plans"]
  assert sorted(map(int, plans)) == list(range(1, 51)) and plans["3"] == pipe.scheduler.plan(3)._asdict()
  # the page's sampler
  prompt, steps, guidance = "a lighthouse at dusk", 3, 7.5
  latents = np.random.default_rng(1).standard_normal((1, 4, 8, 8)).astype(np.float32)
  text = [_replay(out / "text_encoder", {"input_ids": np.array(pipe.tokenizer([t]).input_ids, np.int32)})["last_hidden_state"] for t in ("", prompt)]
  plan = plans[str(steps)]
  x = latents * np.float32(plan["init_noise_sigma"])
  for t, scale, p, q, d in zip(*(plan[k] for k in ("timesteps", "input_scales", "sample_scales", "output_scales", "deltas"))):
    noise = _replay(out / "unet", {"latents": np.concatenate([x * np.float32(scale)] * 2), "timestep": np.array([t], np.float32),
                                   "encoder_hidden_states": np.concatenate(text)})["noise"]
    noise = noise[:1] + np.float32(guidance) * (noise[1:] - noise[:1])
    x = x + (x - (x * np.float32(p) + noise * np.float32(q))) * np.float32(d)
  got = _replay(out / "vae_decoder", {"latents": x})["image"]
  want = pipe(prompt, steps=steps, guidance_scale=guidance, latents=Tensor(latents), height=SIZE, width=SIZE, output="float").numpy()
  np.testing.assert_allclose(got, want, rtol=0, atol=2e-5)
  assert want.std() > 0.05
  # --with-source: one copy of the pipeline, a source.json per part; the parts built live from it give the replays' outputs
  from tinyweb.export.live import LiveModel
  for part, inputs, want in [("text_encoder", [np.array(pipe.tokenizer([prompt]).input_ids, np.int32)], text[1]), ("vae_decoder", [x], got)]:
    source = json.loads((out / part / "source.json").read_text())
    assert (source["model"], source["part"], source["weights"]) == ("stable-diffusion", part, "../source/pipeline")
    (live,) = LiveModel("stable-diffusion", str(out / part / source["weights"]), SIZE, part, device="CPU")(*[Tensor(a, device="CPU") for a in inputs])
    np.testing.assert_allclose(live.numpy(), want, rtol=0, atol=2e-5, err_msg=part)

@wasm
@pytest.mark.parametrize("cls, shape", [(MLP, (4, 12)), (ConvNet, (2, 3, 16, 16))], ids=["mlp", "convnet"])
def test_a_wasm_export_replays_with_wasmtime_to_the_wasm_devices_results(tmp_path, cls, shape):
  """target="WASM": captured on the WASM device, WebAssembly modules and a memory layout; two batch sizes (the variants
  share the weights' places and the other buffers' slots); replayed from the files alone on inputs other than the
  capture's, equal to the WASM device's results bit for bit."""
  model = _model(cls, "WASM")
  x = Tensor.randn(*shape, device="WASM").contiguous().realize()
  manifest = export(model, x, path=tmp_path, names=["pixels"], output_names=["probs"], state_dict=get_state_dict(model),
                    batch_sizes=[shape[0], 1], target="WASM")
  _check_folder(tmp_path, manifest, model)
  assert [i["shape"][0] for v in manifest["variants"] for i in v["inputs"]] == [shape[0], 1]
  assert all(k["file"].endswith(".wasm") and k["imports"] == [] for k in manifest["kernels"])   # (no sin, cos, fmod here)
  weights = [{(b["tensor"], b["offset"]) for b in v["buffers"] if b["kind"] == "weight"} for v in manifest["variants"]]
  assert weights[0] == weights[1]   # (one place each)
  own = [[b["offset"] for b in v["buffers"] if b["kind"] != "weight"] for v in manifest["variants"]]
  assert own[1] == own[0][:len(own[1])]   # (the n-th buffer of each variant in slot n)
  rng = np.random.default_rng(1)
  for n in (shape[0], 1):
    xn = rng.standard_normal((n, *shape[1:])).astype(np.float32)
    np.testing.assert_array_equal(_replay_wasm(tmp_path, {"pixels": xn})["probs"], model(Tensor(xn, device="WASM")).numpy())

@wasm
def test_a_wasm_export_imports_the_math_it_needs_and_keeps_state(tmp_path):
  """Kernels that call the host's sin, cos and fmod list them; float16-stored weights are widened on load; a counter
  (state) goes on from run to run."""
  w = Tensor([0.5, -1.25, 3.0, 1024.0], device="WASM").realize()
  counter = Tensor([0.0], device="WASM").contiguous().realize()
  @TinyJit
  def f(x):
    counter.assign(counter + 1)
    return {"trig": ((x * w).sin() + x.cos() * counter).contiguous(), "rem": (x % w).contiguous()}
  x = Tensor([0.3, -2.0, 7.5, 1e3], device="WASM").realize()
  for _ in range(3): f(x)
  manifest = export(f, x, path=tmp_path, output_names=["trig", "rem"], state_dict={"w": w, "counter": counter}, target="WASM")
  assert {n for k in manifest["kernels"] for n in k["imports"]} == {"sin", "cos", "fmod"}
  assert sorted((b["tensor"], b.get("stored")) for b in manifest["variants"][0]["buffers"] if b["kind"] in ("weight", "state")) == \
         [("counter", None), ("w", "float16")]
  runs = _replay_wasm(tmp_path, {"input": x.numpy()}, runs=2)
  want = [{k: t.numpy().copy() for k, t in f(x).items()} for _ in range(2)]   # (the jit goes on from 3 too)
  for got, w_ in zip(runs, want):
    for k in w_: np.testing.assert_array_equal(got[k], w_[k])

@wasm
def test_wasm_export_errors(tmp_path):
  x = Tensor.randn(3, device="WASM").realize()
  with pytest.raises(ExportError, match="target must be one of WEBGPU, WASM, got 'wasm'"): export(lambda x: x + 1, x, path=tmp_path, target="wasm")
  with pytest.raises(ExportError, match="limits and features are WebGPU's; a WASM export takes neither"):
    export(lambda x: x + 1, x, path=tmp_path, target="WASM", features=["shader-f16"])
  with pytest.raises(ExportError, match=r"example input 0 is on CPU; the export captures WASM kernels.*t.to\('WASM'\)"):
    export(lambda x: x + 1, x.to("CPU"), path=tmp_path, target="WASM")
  y = Tensor.randn(3, device="CPU").realize()
  with pytest.raises(ExportError, match=r"the function launches work on CPU \(a 12-byte buffer\); this export runs on WASM only"):
    export(lambda x: x + (y * 2).to("WASM"), x, path=tmp_path, target="WASM")

@webgpu
@wasm
def test_exporting_for_another_target_replaces_the_kernels(tmp_path):
  export(lambda x: x * 2, Tensor.randn(4, device="WEBGPU").realize(), path=tmp_path)
  manifest = export(lambda x: x * 2, Tensor.randn(4, device="WASM").realize(), path=tmp_path, target="WASM")
  assert sorted(f.name for f in (tmp_path / "kernels").iterdir()) == [k["file"].split("/")[1] for k in manifest["kernels"]]
  np.testing.assert_array_equal(_replay_wasm(tmp_path, {"input": np.arange(4, dtype=np.float32)})["output"], np.arange(4) * 2)
