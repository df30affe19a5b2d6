"""The command line `python -m tinyweb.export MODEL OUT_DIR`: exports a model of tinyweb.models (EfficientNet-Lite0..4,
YOLOv8n..x; "efficientnet-lite" and "yolov8" take the variant or scale from --weights; "minilm", a sentence-transformers
BERT folder: token ids and attention mask in, the pooled unit-length embeddings out; "terrain-unet", an ONNX denoiser
with adaptive-terrain-diffusion's inputs: noisy, sigma and difficulty in, denoised out) with `tinyweb.export.export` for
pages that run it with `loadModel` (npm tinyweb/model). The demos' `--export DIR` (demos.classify, demos.detect) call it."""
from __future__ import annotations
import argparse, functools, os
from typing import Callable, Optional
from tinyweb.tensor import Tensor
from tinyweb.export import export

def _efficientnet(variant: Optional[str], weights: Optional[str], size: Optional[int]):
  from tinyweb.models.efficientnet import EfficientNetLite
  from tinyweb.nn.state import get_state_dict
  model = EfficientNetLite.load(weights, variant=variant, device="WEBGPU") if weights else EfficientNetLite(variant, device="WEBGPU")
  size = size or model.resolution
  return model, [Tensor.zeros(1, 3, size, size, device="WEBGPU").contiguous()], get_state_dict(model), None

def _yolov8(scale: Optional[str], weights: Optional[str], size: Optional[int]):
  from tinyweb.models.yolov8 import YOLOv8
  from tinyweb.nn.state import get_state_dict
  model = YOLOv8.load(weights, device="WEBGPU") if weights else YOLOv8(scale, device="WEBGPU")
  if scale is not None and model.scale != scale:
    raise SystemExit(f"python -m tinyweb.export: {weights} holds a YOLOv8{model.scale}, not a YOLOv8{scale} (name the model yolov8{model.scale}, or yolov8)")
  size = size or 640
  return model, [Tensor.zeros(1, 3, size, size, device="WEBGPU").contiguous()], get_state_dict(model), None

def _minilm(weights: Optional[str], size: Optional[int]):
  from tinyweb.models.bert import SentenceEncoder
  from tinyweb.nn.state import get_state_dict
  encoder = SentenceEncoder.from_folder(weights, device="WEBGPU")
  ids = [Tensor.ones(1, size or 128, dtype="int32", device="WEBGPU").contiguous() for _ in range(2)]
  return encoder.embed, ids, get_state_dict(encoder.model), ["input_ids", "attention_mask"]

def _terrain_unet(weights: Optional[str], size: Optional[int]):
  # the ONNX graph run by tinyweb.onnx, its initializers the weights; one step of a sampler (web/diffuse_sampler.ts)
  from tinyweb import onnx
  unet = onnx.load(weights, device="WEBGPU")
  size = size or 128
  # (sigma: the first step's level, 80; the kernels are the same for any value)
  inputs = [Tensor.zeros(1, 1, size, size, device="WEBGPU").contiguous(), Tensor.full((1,), 80.0, device="WEBGPU").contiguous(),
            Tensor.zeros(1, device="WEBGPU").contiguous()]
  def denoise(noisy: Tensor, sigma: Tensor, difficulty: Tensor) -> dict[str, Tensor]:
    return unet({"noisy": noisy, "sigma": sigma, "difficulty": difficulty})
  return denoise, inputs, unet.initializers, ["noisy", "sigma", "difficulty"]

# name -> fn(weights file or None, input size or None) -> (model, example inputs, state dict, input names or None);
# FROM_WEIGHTS: the names whose variant or scale comes from the weights (which they need)
MODELS: dict[str, Callable] = {**{f"efficientnet-lite{i}": functools.partial(_efficientnet, f"lite{i}") for i in range(5)},
                               **{f"yolov8{s}": functools.partial(_yolov8, s) for s in "nsmlx"},
                               "efficientnet-lite": functools.partial(_efficientnet, None), "yolov8": functools.partial(_yolov8, None),
                               "minilm": _minilm, "terrain-unet": _terrain_unet}
FROM_WEIGHTS = ("efficientnet-lite", "yolov8", "minilm", "terrain-unet")

def main(argv: Optional[list[str]] = None) -> int:
  import time
  ap = argparse.ArgumentParser(prog="python -m tinyweb.export", description="Export a demo model for static hosting "
                               "(WGSL kernels, manifest.json, safetensors weights) to run with loadModel (npm tinyweb/model).")
  ap.add_argument("model", choices=sorted(MODELS))
  ap.add_argument("out", help="the folder to write")
  ap.add_argument("--weights", help="the weights file (efficientnet-lite*: an efficientnet_lite_pytorch .pth; yolov8*: an "
                  "ultralytics .pt; minilm: a sentence-transformers folder; terrain-unet: an .onnx file); default: for efficientnet-lite0 the tests' offline copy when "
                  "there is one, else random weights")
  ap.add_argument("--weights-dtype", choices=["auto", "float16", "float32"], default="auto",
                  help="how float32 weights are stored: auto (float16 where exact, as for ultralytics' float16 checkpoints), "
                  "float16 (all, rounded: half the download), float32; the page widens float16 to float32 on the GPU")
  ap.add_argument("--size", type=int, help="the input images' height and width (default: the model's, 640 for yolov8); minilm: the tokens (default 128); terrain-unet: the heightmap's (default 128)")
  ap.add_argument("--batch-sizes", type=_sizes, default=None, metavar="N,N,...",
                  help="the batch sizes the page may run, each a variant sharing the kernels and weights (default: 1)")
  args = ap.parse_args(argv)
  os.environ.setdefault("TINYWEB_WEBGPU_LIMITS", "default")   # (before the WEBGPU device is made: see export's docstring)
  weights = args.weights
  if weights is None and args.model == "efficientnet-lite0": weights = _offline_efficientnet_weights()
  if weights is None and args.model in FROM_WEIGHTS:
    ap.error(f"{args.model} takes its variant or scale from --weights, which is missing" if args.model in ("efficientnet-lite", "yolov8")
             else f"{args.model} has no default weights: give them with --weights")
  st = time.perf_counter()
  model, inputs, state, names = MODELS[args.model](weights, args.size)
  manifest = export(model, *inputs, path=args.out, names=names, state_dict=state, weights_dtype=args.weights_dtype,
                    batch_sizes=args.batch_sizes)
  nbytes = sum(s["bytes"] for s in manifest["weights"]["shards"])
  variants = manifest["variants"]
  batches = f" (batch sizes {', '.join(str(v['inputs'][0]['shape'][0]) for v in variants)})" if len(variants) > 1 else ""
  name = f"efficientnet-{model.variant}" if args.model.startswith("efficientnet") else f"yolov8{model.scale}" if \
         args.model.startswith("yolov8") else args.model
  print(f"exported {name} ({'weights ' + weights if weights else 'random weights'}, input {inputs[0].shape}) to "
        f"{args.out}{batches}: {len(manifest['kernels'])} kernels, {' + '.join(str(len(v['steps'])) for v in variants)} steps, "
        f"{nbytes / 1e6:.1f} MB of weights in {len(manifest['weights']['shards'])} shards, in {time.perf_counter() - st:.1f} s")
  return 0

def _sizes(text: str) -> list[int]:
  try: sizes = [int(x) for x in text.split(",")]
  except ValueError: sizes = []
  if not sizes or min(sizes) < 1: raise argparse.ArgumentTypeError(f"not a list of positive batch sizes: {text!r} (e.g. 1,4,8)")
  return sizes

def _offline_efficientnet_weights() -> Optional[str]:
  """The real Lite0 weights where the tests keep them (helpers.testdata_dir)."""
  from tinyweb.helpers import testdata_dir
  fn = os.path.join(testdata_dir(), "efficientnet-lite0.pth")
  return fn if os.path.exists(fn) else None

