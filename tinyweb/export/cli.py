"""The command line `python -m tinyweb.export MODEL OUT_DIR`: exports a model of tinyweb.models (EfficientNet-Lite0..4,
YOLOv8n..x; "efficientnet-lite" and "yolov8" take the variant or scale from --weights; "minilm", a sentence-transformers
BERT folder: token ids and attention mask in, the pooled unit-length embeddings out; "terrain-unet", an ONNX denoiser
with adaptive-terrain-diffusion's inputs: noisy, sigma and difficulty in, denoised out; "gemma", a Gemma 3 GGUF file:
one step of generation, tokens and their start position in, the next token's logits out, the KV cache as state, with
tokenizer.json beside it for the page; "stable-diffusion", a diffusers pipeline folder: its text encoder, UNet and VAE
decoder each in a subfolder, with tokenizer.json and the Euler sampler's scheduler.json beside them) with
`tinyweb.export.export` for pages that run it with `loadModel` (npm tinyweb/model); `--target wasm` captures it on the
WASM device (WebAssembly kernels, for browsers without WebGPU). The demos' `--export DIR` (demos.classify, demos.detect,
demos.diffusion) call it. `--with-source` also puts the weights file (or folder) into DIR/source/ and writes
source.json (SOURCE_FILE) beside each manifest: what tinyweb.export.live needs to build the same model with tinyweb
itself in the page's Pyodide (the pages' ?backend=live)."""
from __future__ import annotations
import argparse, functools, json, os, shutil, time
from typing import Callable, NamedTuple, Optional, Sequence, Union
from tinyweb.tensor import Tensor
from tinyweb.export import export

class Exportable(NamedTuple):
  """What a model of MODELS exports: `fn(*inputs)`, its weights' names (`state`), the inputs' names (None: export's
  defaults), more example inputs (each a variant: export's more_examples), and what else the page needs, written into
  the folder after the export (`extras(folder)`)."""
  fn: Callable
  inputs: list[Tensor]
  state: dict[str, Tensor]
  names: Optional[list[str]] = None
  more_examples: Sequence[Sequence[Tensor]] = ()
  extras: Optional[Callable[[str], None]] = None

def _efficientnet(variant: Optional[str], weights: Optional[str], size: Optional[int], device: str):
  from tinyweb.models.efficientnet import EfficientNetLite
  from tinyweb.nn.state import get_state_dict
  model = EfficientNetLite.load(weights, variant=variant, device=device) if weights else EfficientNetLite(variant, device=device)
  size = size or model.resolution
  return model, Exportable(model, [Tensor.zeros(1, 3, size, size, device=device).contiguous()], get_state_dict(model))

def _yolov8(scale: Optional[str], weights: Optional[str], size: Optional[int], device: str):
  from tinyweb.models.yolov8 import YOLOv8
  from tinyweb.nn.state import get_state_dict
  model = YOLOv8.load(weights, device=device) if weights else YOLOv8(scale, device=device)
  if scale is not None and model.scale != scale:
    raise SystemExit(f"python -m tinyweb.export: {weights} holds a YOLOv8{model.scale}, not a YOLOv8{scale} (name the model yolov8{model.scale}, or yolov8)")
  size = size or 640
  return model, Exportable(model, [Tensor.zeros(1, 3, size, size, device=device).contiguous()], get_state_dict(model))

def _minilm(weights: Optional[str], size: Optional[int], device: str):
  from tinyweb.models.bert import SentenceEncoder
  from tinyweb.nn.state import get_state_dict
  encoder = SentenceEncoder.from_folder(weights, device=device)
  ids = [Tensor.ones(1, size or 128, dtype="int32", device=device).contiguous() for _ in range(2)]
  return encoder, Exportable(encoder.embed, ids, get_state_dict(encoder.model), ["input_ids", "attention_mask"])

def _terrain_unet(weights: Optional[str], size: Optional[int], device: str):
  # the ONNX graph run by tinyweb.onnx, its initializers the weights; one step of a sampler (web/diffuse_sampler.ts)
  from tinyweb import onnx
  unet = onnx.load(weights, device=device)
  size = size or 128
  # (sigma: the first step's level, 80; the kernels are the same for any value)
  inputs = [Tensor.zeros(1, 1, size, size, device=device).contiguous(), Tensor.full((1,), 80.0, device=device).contiguous(),
            Tensor.zeros(1, device=device).contiguous()]
  def denoise(noisy: Tensor, sigma: Tensor, difficulty: Tensor) -> dict[str, Tensor]:
    return unet({"noisy": noisy, "sigma": sigma, "difficulty": difficulty})
  return unet, Exportable(denoise, inputs, unet.initializers, ["noisy", "sigma", "difficulty"])

def _gemma(weights: Optional[str], size: Optional[int], device: str):
  # one step of Gemma.generate_ids with the logits out (a page picks the token: greedy or sampled), in two variants:
  # a prompt chunk of PREFILL_CHUNK tokens and one token; `last` is the row whose logits come out (the prompt's last)
  from tinyweb.dtype import dtypes
  from tinyweb.gguf import GGUFFile
  from tinyweb.models.gemma import Gemma, PREFILL_CHUNK
  from tinyweb.nn.state import get_state_dict
  gguf = GGUFFile(weights)
  model, name = Gemma(gguf, device=device, max_context=size or 256), gguf.metadata.get("general.name", os.path.basename(weights))
  ints = lambda *shape: Tensor.zeros(*shape, dtype=dtypes.int32, device=device).contiguous()
  def page_files(folder: str):   # (web/generate-worker.ts reads them: the tokenizer, and the positions the cache holds)
    with open(os.path.join(folder, "tokenizer.json"), "w") as f: json.dump(model.tokenizer.to_json(), f, separators=(",", ":"))
    with open(os.path.join(folder, "generation.json"), "w") as f:
      json.dump({"name": name, "context": model.max_context}, f, indent=1)
  return model, Exportable(model.step, [ints(1, 1), ints(1), ints(1)], _stored_buffers(get_state_dict(model)), ["tokens", "start", "last"],
                           more_examples=[(ints(1, PREFILL_CHUNK), ints(1), ints(1))], extras=page_files)

class Parts(NamedTuple):
  """A model exported as several functions, each an Exportable written into a subfolder of its own (by name), and what
  the page also needs, written into the folder after them (`extras(folder)`)."""
  parts: dict[str, Exportable]
  extras: Optional[Callable[[str], None]] = None

# the step counts a Stable Diffusion page may run: scheduler.json holds a plan for each (a few kB apiece)
SD_MAX_STEPS = 50

def _stable_diffusion(weights: Optional[str], size: Optional[int], device: str):
  from tinyweb.models.stable_diffusion import StableDiffusionPipeline
  pipe = StableDiffusionPipeline.from_pretrained(weights, device=device, scheduler="euler")
  return pipe, stable_diffusion_parts(pipe, size)

def stable_diffusion_parts(pipe, size: Optional[int] = None) -> Parts:
  """A StableDiffusionPipeline (its parts on the target's device, an Euler scheduler) for the diffuse page (web/sd-worker.ts), as
  StableDiffusionPipeline.__call__ runs it with classifier-free guidance: text_encoder/ (input_ids [1, 77] int32 ->
  last_hidden_state, run for the prompt and for the empty negative prompt), unet/ (latents [2, 4, h, w]: the
  negative's and the prompt's halves, timestep [1], encoder_hidden_states [2, 77, hidden] -> noise), vae_decoder/
  (latents [1, 4, h, w] -> image [1, height, width, 3] in [0, 1]); beside them tokenizer.json (CLIPTokenizer.to_json)
  and scheduler.json (the scheduler's plan for each step count up to SD_MAX_STEPS: EulerDiscreteScheduler.plan). size:
  the image's height and width in pixels (default: the UNet's sample size's)."""
  from tinyweb.dtype import dtypes
  from tinyweb.models.schedulers import EulerDiscreteScheduler
  from tinyweb.nn.state import get_state_dict
  if not isinstance(pipe.scheduler, EulerDiscreteScheduler):
    raise ValueError(f"stable-diffusion: the page's sampler is Euler's, not the pipeline's {type(pipe.scheduler).__name__}")
  f = pipe.vae_scale_factor
  size = size or pipe.unet.config["sample_size"] * f
  if size % 8: raise ValueError(f"stable-diffusion: the image size must be a multiple of 8, got {size}")
  tokens, hidden, channels = pipe.tokenizer.model_max_length, pipe.text_encoder.config.hidden_size, pipe.unet.config["in_channels"]
  zeros = lambda *shape, dtype=dtypes.float32: Tensor.zeros(*shape, dtype=dtype, device=pipe.device).contiguous()
  def page_files(folder: str):   # (web/sd-worker.ts reads them)
    with open(os.path.join(folder, "tokenizer.json"), "w") as fp: json.dump(pipe.tokenizer.to_json(), fp, separators=(",", ":"))
    plans = {n: pipe.scheduler.plan(n)._asdict() for n in range(1, SD_MAX_STEPS + 1)}
    with open(os.path.join(folder, "scheduler.json"), "w") as fp:
      json.dump({"format": "tinyweb-euler-plans", "scheduler": type(pipe.scheduler).__name__, "config": pipe.scheduler.config, "plans": plans},
                fp, separators=(",", ":"))
  return Parts({
    "text_encoder": Exportable(lambda ids: {"last_hidden_state": pipe.text_encoder(ids).last_hidden_state}, [zeros(1, tokens, dtype=dtypes.int32)],
                               get_state_dict(pipe.text_encoder), ["input_ids"]),
    "unet": Exportable(lambda x, t, text: {"noise": pipe.unet(x, t, text).float()},
                       [zeros(2, channels, size // f, size // f), zeros(1), zeros(2, tokens, hidden)], get_state_dict(pipe.unet),
                       ["latents", "timestep", "encoder_hidden_states"]),
    "vae_decoder": Exportable(lambda x: {"image": pipe.decode_latents(x)}, [zeros(1, channels, size // f, size // f)],
                              get_state_dict(pipe.vae), ["latents"])}, page_files)

def _stored_buffers(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
  """The buffer each tensor is computed from, by the tensor's name. A GGUF weight is a recipe (its float values computed
  from the quantized blocks by the kernels that read them): naming the recipe would make export realize it as float32,
  naming its buffer keeps the blocks as they are stored."""
  from tinyweb.schedule import buffer_uop
  out = {}
  for name, t in tensors.items():
    leaves = [u.arg[0] for u in t.uop.toposort() if u.op.name == "BUFFER"]
    if len(leaves) == 1: out[name] = Tensor(buffer_uop(leaves[0], (leaves[0].size,)))
  return out

# name -> fn(weights file or None, input size or None, device) -> (the model, its Exportable);
# FROM_WEIGHTS: the names whose variant or scale comes from the weights (which they need)
MODELS: dict[str, Callable] = {**{f"efficientnet-lite{i}": functools.partial(_efficientnet, f"lite{i}") for i in range(5)},
                               **{f"yolov8{s}": functools.partial(_yolov8, s) for s in "nsmlx"},
                               "efficientnet-lite": functools.partial(_efficientnet, None), "yolov8": functools.partial(_yolov8, None),
                               "minilm": _minilm, "terrain-unet": _terrain_unet, "gemma": _gemma,
                               "stable-diffusion": _stable_diffusion}
FROM_WEIGHTS = ("efficientnet-lite", "yolov8", "minilm", "terrain-unet", "gemma", "stable-diffusion")

def main(argv: Optional[list[str]] = None) -> int:
  ap = argparse.ArgumentParser(prog="python -m tinyweb.export", description="Export a demo model for static hosting "
                               "(WGSL or WebAssembly kernels, manifest.json, safetensors weights) to run with loadModel (npm tinyweb/model).")
  ap.add_argument("model", choices=sorted(MODELS))
  ap.add_argument("out", help="the folder to write")
  ap.add_argument("--weights", help="the weights file (efficientnet-lite*: an efficientnet_lite_pytorch .pth; yolov8*: an "
                  "ultralytics .pt; minilm: a sentence-transformers folder; terrain-unet: an .onnx file; gemma: a Gemma 3 .gguf file; "
                  "stable-diffusion: a diffusers pipeline folder); default: for efficientnet-lite0 the tests' offline copy when "
                  "there is one, else random weights")
  ap.add_argument("--weights-dtype", choices=["auto", "float16", "float32"], default="auto",
                  help="how float32 weights are stored: auto (float16 where exact, as for ultralytics' float16 checkpoints), "
                  "float16 (all, rounded: half the download), float32; the page widens float16 to float32 on load")
  ap.add_argument("--size", type=int, help="the input images' height and width (default: the model's, 640 for yolov8); minilm: the tokens (default 128); terrain-unet: the heightmap's (default 128); gemma: the context, prompt and reply (default 256); "
                  "stable-diffusion: the image's, a multiple of 8 (default: the UNet's)")
  ap.add_argument("--target", choices=["webgpu", "wasm"], default="webgpu",
                  help="webgpu: WGSL kernels for WebGPU (default); wasm: WebAssembly kernels, for browsers without WebGPU (slower)")
  ap.add_argument("--with-source", action="store_true", help="also copy the weights into OUT/source/ and write source.json "
                  "beside the manifest, so that a page can run the model live: built by tinyweb in Pyodide from those "
                  "weights (?backend=live on the demo pages), not from the exported kernels")
  ap.add_argument("--batch-sizes", type=_sizes, default=None, metavar="N,N,...",
                  help="the batch sizes the page may run, each a variant sharing the kernels and weights (default: 1)")
  args = ap.parse_args(argv)
  target = args.target.upper()
  if target == "WEBGPU": os.environ.setdefault("TINYWEB_WEBGPU_LIMITS", "default")   # (before the device is made: see export's docstring)
  weights = args.weights
  if weights is None and args.model == "efficientnet-lite0": weights = _offline_efficientnet_weights()
  if weights is None and args.model in FROM_WEIGHTS:
    ap.error(f"{args.model} takes its variant or scale from --weights, which is missing" if args.model in ("efficientnet-lite", "yolov8")
             else f"{args.model} has no default weights: give them with --weights")
  model, ex = MODELS[args.model](weights, args.size, target)
  if args.batch_sizes is not None and (isinstance(ex, Parts) or ex.more_examples):
    ap.error(f"{args.model} is exported with shapes of its own (not batch sizes): leave out --batch-sizes")
  name = f"efficientnet-{model.variant}" if args.model.startswith("efficientnet") else f"yolov8{model.scale}" if \
         args.model.startswith("yolov8") else args.model
  if args.with_source and weights is None: ap.error("--with-source: there are no weights to copy (random weights cannot be rebuilt live)")
  write(name, ex, args.out, weights, args.weights_dtype, args.batch_sizes, target,
        LiveSource(args.model, args.size) if args.with_source else None)
  return 0

class LiveSource(NamedTuple):
  """How MODELS builds an export's model again from its weights: its name there and the size argument."""
  model: str
  size: Optional[int]

# beside an export's manifest.json: how to build its model live (web/model_live.ts reads it, tinyweb.export.live builds it)
SOURCE_FILE, SOURCE_FORMAT, SOURCE_FOLDER = "source.json", "tinyweb-live-source", "source"

def write(name: str, ex: Union[Exportable, Parts], out: str, weights: Optional[str], weights_dtype: str = "auto",
          batch_sizes: Optional[list[int]] = None, target: str = "WEBGPU", source: Optional[LiveSource] = None):
  """Export `ex` into the folder `out` (each of a Parts' into its subfolder, then its extras), saying what each wrote.
  name, weights: the model's name and weights file as the lines say them. source: also write the weights and
  source.json (write_source) for a page's live run."""
  for sub, part in (ex.parts if isinstance(ex, Parts) else {"": ex}).items():
    st, path = time.perf_counter(), os.path.join(out, sub)
    manifest = export(part.fn, *part.inputs, path=path, names=part.names, state_dict=part.state, weights_dtype=weights_dtype,
                      batch_sizes=batch_sizes, more_examples=part.more_examples, target=target)
    if part.extras is not None: part.extras(path)
    nbytes = sum(s["bytes"] for s in manifest["weights"]["shards"])
    variants = manifest["variants"]
    shapes = f" (variants: inputs {' / '.join(str([i['shape'] for i in v['inputs']]) for v in variants)})" if part.more_examples else \
             f" (batch sizes {', '.join(str(v['inputs'][0]['shape'][0]) for v in variants)})" if len(variants) > 1 else ""
    print(f"exported {name}{' ' + sub if sub else ''} ({'weights ' + weights if weights else 'random weights'}, input "
          f"{part.inputs[0].shape}) for {target} to {path}{shapes}: {len(manifest['kernels'])} kernels, "
          f"{' + '.join(str(len(v['steps'])) for v in variants)} steps, {nbytes / 1e6:.1f} MB of weights in "
          f"{len(manifest['weights']['shards'])} shards, in {time.perf_counter() - st:.1f} s")
  if isinstance(ex, Parts) and ex.extras is not None: ex.extras(out)
  if source is not None: write_source(out, source, weights, list(ex.parts) if isinstance(ex, Parts) else [""])

def write_source(out: str, source: LiveSource, weights: str, parts: list[str]):
  """The weights file (or folder) copied into out/source/ (hard links where the file system allows), and in each
  exported folder (`parts`: subfolders of out, "" for out itself) a source.json: {format, model, size, part (a Parts'
  subfolder, or null), weights (the copy's path), files: [{path, bytes}] (every file of the copy)}, its paths relative
  to the source.json's folder (URLs, "/"-separated). A page fetches the files and tinyweb.export.live.LiveModel builds
  `model` from them as MODELS does here, then runs the part's function."""
  weights = os.path.normpath(weights)
  copy = os.path.join(out, SOURCE_FOLDER, os.path.basename(weights))
  shutil.rmtree(os.path.join(out, SOURCE_FOLDER), ignore_errors=True)
  os.makedirs(os.path.dirname(copy))
  def link_or_copy(src: str, dst: str):
    try: os.link(src, dst)
    except OSError: shutil.copy2(src, dst)
  if os.path.isdir(weights): shutil.copytree(weights, copy, copy_function=link_or_copy)
  else: link_or_copy(weights, copy)
  files = [copy] if os.path.isfile(copy) else sorted(os.path.join(d, f) for d, _, fs in os.walk(copy) for f in fs)
  for part in parts:
    folder = os.path.join(out, part)
    rel = lambda p: os.path.relpath(p, folder).replace(os.sep, "/")
    with open(os.path.join(folder, SOURCE_FILE), "w") as f:
      json.dump({"format": SOURCE_FORMAT, "model": source.model, "size": source.size, "part": part or None, "weights": rel(copy),
                 "files": [{"path": rel(p), "bytes": os.path.getsize(p)} for p in files]}, f, indent=1)

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

