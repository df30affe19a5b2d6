"""tinyweb.onnx: its protobuf reader against the onnx package (field numbers, every tensor dtype and storage, external
data), its errors on malformed or unsupported models, and the ONNX backend node tests (tests/onnx_conformance.py) on
the CPU, each case expected to pass unless tests/onnx_expected_failures.txt lists it with its reason; those of the real
models' operators also on WEBGPU."""
import os, warnings
import numpy as np
import pytest
onnx = pytest.importorskip("onnx", reason="the onnx package (tinyweb[test]) is not installed")
from onnx import helper, numpy_helper, TensorProto as TP
from tinyweb import Tensor, dtypes
from tinyweb import onnx as tw_onnx
from tinyweb.onnx import OnnxError, load

def test_field_numbers_are_onnx_protos():
  pairs = [(tw_onnx.Model, onnx.ModelProto), (tw_onnx.Graph, onnx.GraphProto), (tw_onnx.Node, onnx.NodeProto),
           (tw_onnx.Attribute, onnx.AttributeProto), (tw_onnx.TensorProto, onnx.TensorProto), (tw_onnx.ValueInfo, onnx.ValueInfoProto),
           (tw_onnx.TypeProto, onnx.TypeProto), (tw_onnx.TensorType, onnx.TypeProto.Tensor), (tw_onnx.TensorShape, onnx.TensorShapeProto),
           (tw_onnx.Dimension, onnx.TensorShapeProto.Dimension), (tw_onnx.OperatorSetId, onnx.OperatorSetIdProto),
           (tw_onnx.StringStringEntry, onnx.StringStringEntryProto)]
  for ours, theirs in pairs:
    numbers = {f.name: f.number for f in theirs.DESCRIPTOR.fields}
    for num, (name, _, repeated) in ours.FIELDS.items():
      assert numbers.get(name) == num, f"{ours.__name__}.{name}: field {num}, onnx has {numbers.get(name)}"
      assert repeated == theirs.DESCRIPTOR.fields_by_name[name].is_repeated, f"{ours.__name__}.{name}: repeated?"

# every dtype tinyweb has, stored as raw bytes and in the typed fields onnx.helper writes
DTYPES = [(TP.FLOAT, np.float32), (TP.DOUBLE, np.float64), (TP.FLOAT16, np.float16), (TP.INT8, np.int8), (TP.UINT8, np.uint8),
          (TP.INT16, np.int16), (TP.UINT16, np.uint16), (TP.INT32, np.int32), (TP.UINT32, np.uint32), (TP.INT64, np.int64),
          (TP.UINT64, np.uint64), (TP.BOOL, np.bool_)]

@pytest.mark.parametrize("code,npdt", DTYPES)
@pytest.mark.parametrize("raw", [True, False])
def test_initializers_of_every_dtype_and_storage(code, npdt, raw):
  rng = np.random.default_rng(code)
  v = (rng.standard_normal((2, 3)) * 100).astype(npdt) if npdt != np.bool_ else rng.integers(0, 2, (2, 3)).astype(np.bool_)
  if npdt in (np.uint32, np.uint64): v = np.array([[0, 1, 2 ** 31 + 5], [7, 2 ** 32 - 1, 3]], npdt)
  if npdt == np.int64: v = np.array([[-2 ** 40, 1, -1], [2 ** 62, 0, 5]], np.int64)
  t = helper.make_tensor("w", code, v.shape, v.tobytes() if raw else v.flatten().tolist(), raw=raw)
  node = helper.make_node("Identity", ["w"], ["y"])
  g = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", code, v.shape)], [t])
  out = load(helper.make_model(g).SerializeToString(), device="CPU")({})["y"]
  np.testing.assert_array_equal(out.numpy(), numpy_helper.to_array(t))

def test_bfloat16_initializer():
  bits = np.array([0x3F80, 0xC000, 0x7F80, 0x0001], np.uint16)   # 1, -2, inf, a denormal
  t = TP(); t.name, t.data_type = "w", TP.BFLOAT16; t.dims.extend([4]); t.int32_data.extend(bits.tolist())
  g = helper.make_graph([helper.make_node("Cast", ["w"], ["y"], to=TP.FLOAT)], "g", [], [helper.make_tensor_value_info("y", TP.FLOAT, [4])], [t])
  out = load(helper.make_model(g).SerializeToString(), device="CPU")({})["y"].numpy()
  np.testing.assert_array_equal(out, (bits.astype(np.uint32) << 16).view(np.float32))

def test_external_data_is_read_from_the_models_folder_and_nowhere_else(tmp_path):
  w = np.arange(12, dtype=np.float32).reshape(3, 4)
  g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [helper.make_tensor_value_info("x", TP.FLOAT, [3, 4])],
                        [helper.make_tensor_value_info("y", TP.FLOAT, [3, 4])], [numpy_helper.from_array(w, "w")])
  model = helper.make_model(g)
  path = str(tmp_path / "m.onnx")
  onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
  assert os.path.getsize(tmp_path / "weights.bin") == w.nbytes
  x = np.ones((3, 4), np.float32)
  np.testing.assert_array_equal(load(path, device="CPU")({"x": x})["y"].numpy(), x + w)
  with pytest.raises(OnnxError, match="load the model from its path"): load(open(path, "rb").read(), device="CPU")
  m = onnx.load(path, load_external_data=False)
  for e in m.graph.initializer[0].external_data:
    if e.key == "location": e.value = "../outside.bin"
  with pytest.raises(OnnxError, match="outside the model's folder"): load(_saved(m, tmp_path), device="CPU")

def _saved(m, folder) -> str:
  p = str(folder / "evil.onnx")
  with open(p, "wb") as f: f.write(m.SerializeToString())
  return p

def _model(nodes, inputs, outputs, inits=(), opset=17):
  g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
  return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()

def test_malformed_and_unsupported_models_raise_onnx_error():
  good = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TP.FLOAT, [2])],
                [helper.make_tensor_value_info("y", TP.FLOAT, [2])])
  for cut in (3, len(good) // 2, len(good) - 1):
    with pytest.raises(OnnxError): load(good[:cut], device="CPU")
  with pytest.raises(OnnxError, match="wire type 7"): load(b"\x0f\x00", device="CPU")
  odd = _model([helper.make_node("NoSuchOp", ["x"], ["y"], name="mine")], [helper.make_tensor_value_info("x", TP.FLOAT, [2])],
               [helper.make_tensor_value_info("y", TP.FLOAT, [2])])
  with pytest.raises(OnnxError, match="node 0 \\(NoSuchOp 'mine'\\): operator NoSuchOp is not supported"):
    load(odd, device="CPU")({"x": np.ones(2, np.float32)})
  runner = load(good, device="CPU")
  with pytest.raises(OnnxError, match="missing model inputs \\['x'\\]"): runner({})
  s = helper.make_tensor("s", TP.STRING, [1], [b"a"])
  strs = _model([helper.make_node("Identity", ["s"], ["y"])], [], [helper.make_tensor_value_info("y", TP.STRING, [1])], [s])
  with pytest.raises(OnnxError, match="ONNX data type STRING is not supported"): load(strs, device="CPU")

def test_runs_lazily_and_matches_onnxruntime_on_a_small_cnn(device):
  # (on every device: WEBGPU gets the int64 shape initializer narrowed to int32)
  ort = pytest.importorskip("onnxruntime", reason="onnxruntime (tinyweb[test]) is not installed")
  rng = np.random.default_rng(0)
  w1, b1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32), rng.standard_normal(8).astype(np.float32)
  w2 = rng.standard_normal((10, 8 * 4 * 4)).astype(np.float32)
  nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]), helper.make_node("Relu", ["c"], ["r"]),
           helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]), helper.make_node("Reshape", ["p", "shape"], ["f"]),
           helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1), helper.make_node("Softmax", ["y"], ["z"], axis=1)]
  inits = [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (np.array([2, -1], np.int64), "shape"))]
  model = _model(nodes, [helper.make_tensor_value_info("x", TP.FLOAT, [2, 3, 16, 16])], [helper.make_tensor_value_info("z", TP.FLOAT, [2, 10])], inits)
  x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32)
  out = load(model, device=device)({"x": Tensor(x, device=device)})["z"]
  assert isinstance(out, Tensor) and out.dtype == dtypes.float32
  want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
  np.testing.assert_allclose(out.numpy(), want, rtol=1e-4, atol=1e-6)

# ---- the backend node tests ----

EXPECTED_FAILURES = os.path.join(os.path.dirname(__file__), "onnx_expected_failures.txt")

def expected_failures() -> dict[str, str]:
  out = {}
  for line in open(EXPECTED_FAILURES):
    if line.strip() and not line.startswith("#"):
      name, _, why = line.rstrip("\n").partition("\t")
      out[name] = why
  return out

def _node_cases():
  from onnx_conformance import cases
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return cases()

NODE_CASES = {c.name: c for c in _node_cases()}

@pytest.mark.parametrize("name", sorted(NODE_CASES))
def test_onnx_backend_node_case(name):
  from onnx_conformance import run_tinyweb
  why = run_tinyweb(NODE_CASES[name], "CPU")
  listed = expected_failures().get(name)
  if listed is None: assert why is None, f"{name} fails: {why}"
  else: assert why is not None, f"{name} passes now: remove it from tests/onnx_expected_failures.txt (listed: {listed})"

# the operators of the real models (tests/test_onnx_models.py): their node tests also run on WEBGPU
REAL_MODEL_OPS = {"Add", "AveragePool", "Clip", "Concat", "Conv", "Cos", "Div", "Einsum", "Gemm", "InstanceNormalization", "Log",
                  "MaxPool", "Mul", "Pow", "Reciprocal", "Reshape", "Resize", "Shape", "Sigmoid", "Sin", "Slice", "Softmax",
                  "Split", "Sqrt", "Squeeze", "Sub", "Transpose", "Unsqueeze"}
WEBGPU_CASES = sorted(n for n, c in NODE_CASES.items()
                      if c.model.graph.node and {node.op_type for node in c.model.graph.node} <= REAL_MODEL_OPS and n not in expected_failures())

def _has_float64(case) -> bool:
  from onnx_conformance import as_array
  def f64(v): return any(f64(x) for x in v) if isinstance(v, list) else isinstance(v, np.ndarray) and v.dtype == np.float64
  return any(f64(as_array(v)) for inputs, outputs in case.data_sets for v in [*inputs, *outputs])

@pytest.mark.parametrize("name", WEBGPU_CASES)
def test_onnx_backend_node_case_on_webgpu(name):
  from tinyweb import Device
  from onnx_conformance import run_tinyweb
  ok, why = Device.check("WEBGPU")
  if not ok: pytest.skip(f"WEBGPU unavailable: {why}")
  if _has_float64(case := NODE_CASES[name]): pytest.skip("float64 data: WEBGPU has no 64-bit floats (WGSL)")
  assert (why := run_tinyweb(case, "WEBGPU")) is None, f"{name} fails on WEBGPU: {why}"

def test_expected_failures_list_only_known_cases():
  assert not (unknown := set(expected_failures()) - set(NODE_CASES)), f"not an ONNX node test: {sorted(unknown)[:5]}"

def test_int64_initializers_on_a_device_without_int64_narrow_or_raise(device):
  from tinyweb import Device
  def model(vals):
    t = numpy_helper.from_array(np.array(vals, np.int64), "w")
    g = helper.make_graph([helper.make_node("Identity", ["w"], ["y"])], "g", [], [helper.make_tensor_value_info("y", TP.INT64, [len(vals)])], [t])
    return helper.make_model(g).SerializeToString()
  small, big = [-5, 2 ** 31 - 1], [1, 2 ** 40]
  np.testing.assert_array_equal(load(model(small), device=device)({})["y"].numpy(), small)
  if Device[device].has_dtype(dtypes.int64): np.testing.assert_array_equal(load(model(big), device=device)({})["y"].numpy(), big)
  else:
    with pytest.raises(OnnxError, match="int64 values past int32's range"): load(model(big), device=device)
