"""Text to image with Stable Diffusion 1.x / 2.x (tinyweb.models.stable_diffusion): writes a PNG.

  python -m demos.diffusion --weights stable-diffusion-v1-5 "an astronaut riding a horse"   # a diffusers pipeline folder
  python -m demos.diffusion --weights v1-5-pruned-emaonly.safetensors --config stable-diffusion-v1-5 "a cat" --out cat.png
  python -m demos.diffusion --weights DIR "a cat" --device WEBGPU --fp16 --steps 25 --seed 1 --scheduler ddim
  python -m demos.diffusion --tiny-random "a cat"        # no weights: a tiny random-weight pipeline, to check the command runs
  python -m demos.diffusion --tiny-random --export site/sd/   # the pipeline for the diffuse page (diffuse.html?sd=site/sd/)

--weights is a diffusers pipeline folder (model_index.json, tokenizer/, text_encoder/, unet/, vae/, scheduler/), or an
original single-file .safetensors checkpoint with --config naming such a folder (its configs and tokenizer: the weight
files need not be there). No Stable Diffusion weights can be fetched by set-up (none are on PyPI): download them yourself.
--tiny-random builds a pipeline of the SD 1.x architecture at a tiny size with random weights (its picture is noise)
and CLIP's real tokenizer from the test data.

--export DIR writes the pipeline for the diffuse page (web/diffuse.html?sd=DIR) instead of an image: its text encoder,
UNet and VAE decoder exported on WEBGPU (tinyweb.export.cli.stable_diffusion_parts; `python -m tinyweb.export
stable-diffusion DIR --weights FOLDER` does the same for a pipeline folder), sampled with Euler's method whatever
scheduler the folder names. `--export DIR/wasm --target wasm` adds the WebAssembly parts the page runs where the browser
has no WebGPU (it looks for them in the wasm/ subfolder of the export's folder)."""
from __future__ import annotations
import argparse, os, sys, time
from typing import Optional, Sequence

def tiny_random_pipeline(device: Optional[str]):
  """SD 1.x's parts at a tiny size, random weights; the tokenizer from the test data's CLIP BPE merges."""
  from tests import testdata
  from tinyweb.models.clip import CLIPTokenizer, CLIPTextModel
  from tinyweb.models.unet import UNet2DConditionModel
  from tinyweb.models.vae import AutoencoderKL
  from tinyweb.models.schedulers import EulerDiscreteScheduler
  from tinyweb.models.stable_diffusion import StableDiffusionPipeline
  bpe = os.path.join(testdata.folder(), "bpe_simple_vocab_16e6.txt.gz")
  if not os.path.exists(bpe): sys.exit(f"diffusion: no CLIP vocabulary at {bpe}: run `python -m tests.testdata`")
  text = CLIPTextModel(dict(vocab_size=49408, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4), device)
  unet = UNet2DConditionModel(dict(sample_size=16, block_out_channels=[32, 64], layers_per_block=1, cross_attention_dim=64, norm_num_groups=8,
                                   down_block_types=["CrossAttnDownBlock2D", "DownBlock2D"], up_block_types=["UpBlock2D", "CrossAttnUpBlock2D"],
                                   attention_head_dim=4), device)
  vae = AutoencoderKL(dict(down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2, block_out_channels=[16, 32],
                           norm_num_groups=8), device)
  scheduler = EulerDiscreteScheduler(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, steps_offset=1, timestep_spacing="leading")
  return StableDiffusionPipeline(CLIPTokenizer.from_bpe_file(bpe), text, unet, vae, scheduler)

def main(argv: Optional[Sequence[str]] = None) -> str:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("prompt", nargs="?")
  ap.add_argument("--weights", help="a diffusers pipeline folder, or a single-file .safetensors checkpoint (with --config)")
  ap.add_argument("--config", help="for a single-file checkpoint: the diffusers pipeline folder of its configs and tokenizer")
  ap.add_argument("--tiny-random", action="store_true", help="no weights: a tiny random-weight pipeline (its picture is noise)")
  ap.add_argument("--out", default="diffusion.png", help="the PNG to write (default diffusion.png)")
  ap.add_argument("--negative", default=None, help="the negative prompt (default: none, i.e. \"\")")
  ap.add_argument("--steps", type=int, default=25, help="denoising steps (default 25)")
  ap.add_argument("--guidance", type=float, default=7.5, help="classifier-free guidance scale (default 7.5; 1 turns it off)")
  ap.add_argument("--size", type=int, default=None, help="image height and width in pixels, a multiple of 8 (default: the model's, 512 for SD 1.5)")
  ap.add_argument("--seed", type=int, default=0, help="the initial noise's seed (default 0)")
  ap.add_argument("--scheduler", default=None, choices=["euler", "euler_ancestral", "ddim"], help="default: the folder's if tinyweb has it, else euler")
  ap.add_argument("--fp16", action="store_true", help="float16 weights (where the device has float16)")
  ap.add_argument("--device", default=None, help="tinyweb device (default: Device.DEFAULT)")
  ap.add_argument("--export", metavar="DIR", help="instead of generating, write the pipeline for the diffuse page to DIR (the "
                  "image --size, float32, Euler's sampler)")
  ap.add_argument("--target", choices=["webgpu", "wasm"], default="webgpu", help="with --export: the kernels' target (python -m "
                  "tinyweb.export's --target: webgpu, the default, or wasm for browsers without WebGPU, into the export's wasm/ folder)")
  a = ap.parse_args(argv)
  if not a.tiny_random and not a.weights: ap.error("give --weights (a diffusers Stable Diffusion folder or a .safetensors file), or --tiny-random")
  if a.export: return export_page(a)
  if a.prompt is None: ap.error("the prompt is required (unless --export)")
  from PIL import Image
  from tinyweb import Device, dtypes
  st = time.perf_counter()
  pipe = load(a, a.device, dtypes.float16 if a.fp16 else None, a.scheduler)
  loaded = time.perf_counter()
  image = pipe(a.prompt, negative_prompt=a.negative, steps=a.steps, guidance_scale=a.guidance, height=a.size, width=a.size, seed=a.seed)
  _, h, w, _ = image.shape
  Image.frombytes("RGB", (w, h), image[0].numpy().tobytes()).save(a.out)
  done = time.perf_counter()
  print(f"{a.out}: {w}x{h}, {a.steps} steps on {Device.canonicalize(a.device)} (load {loaded - st:.1f} s, "
        f"generate {done - loaded:.1f} s: {(done - loaded) / a.steps:.2f} s/step)", file=sys.stderr)
  return a.out

def load(a: argparse.Namespace, device: Optional[str], dtype, scheduler: Optional[str]):
  """The pipeline that the arguments name (--tiny-random, or --weights with --config for a single file)."""
  from tinyweb.models.stable_diffusion import StableDiffusionPipeline
  if a.tiny_random: return tiny_random_pipeline(device)
  if os.path.isdir(a.weights): return StableDiffusionPipeline.from_pretrained(a.weights, device=device, dtype=dtype, scheduler=scheduler)
  if not a.config: sys.exit("diffusion: a single-file checkpoint needs --config: the diffusers pipeline folder of its model (configs and tokenizer)")
  return StableDiffusionPipeline.from_single_file(a.weights, config=a.config, device=device, dtype=dtype, scheduler=scheduler)

def export_page(a: argparse.Namespace) -> str:
  """The diffuse page's folder a.export: the pipeline on the portable WEBGPU device (see tinyweb.export), or on WASM
  (--target wasm), sampled by Euler."""
  if a.fp16 or a.scheduler not in (None, "euler") or a.device is not None:
    sys.exit("diffusion: --export writes float32 parts on the --target's device for the page's Euler sampler: leave out --fp16, --scheduler and --device")
  target = a.target.upper()
  if target == "WEBGPU": os.environ.setdefault("TINYWEB_WEBGPU_LIMITS", "default")   # (before the WEBGPU device is made)
  from tinyweb.export.cli import stable_diffusion_parts, write
  write("stable-diffusion", stable_diffusion_parts(load(a, target, None, "euler"), a.size), a.export, None if a.tiny_random else a.weights,
        target=target)
  return a.export

if __name__ == "__main__":
  main()
