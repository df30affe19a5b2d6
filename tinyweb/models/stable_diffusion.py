"""Stable Diffusion 1.x and 2.x text to image: diffusers' StableDiffusionPipeline at inference, built from the parts in
this package (clip: tokenizer and text encoder, unet, vae, schedulers).

  pipe = StableDiffusionPipeline.from_pretrained("stable-diffusion-v1-5", device="WEBGPU", dtype=dtypes.float16)
  images = pipe("an astronaut riding a horse", steps=25, guidance_scale=7.5, seed=0)   # uint8 Tensor (1, 512, 512, 3)

A pipeline folder is diffusers' layout (model_index.json; tokenizer/, text_encoder/, unet/, vae/, scheduler/); a
single-file checkpoint (an original CompVis/LDM .safetensors: model.diffusion_model., first_stage_model. and
cond_stage_model. tensors) is read with `from_single_file(path, config=folder)`, the folder giving the configurations
and the tokenizer, as diffusers' own from_single_file takes them from a model repository.

What a call computes is diffusers': the prompts tokenized to 77 ids, the text encoder's last hidden state (or, with
clip_skip, an earlier layer's through the final layer norm), the negative prompts ("" unless given) encoded likewise
for classifier-free guidance (guidance_scale > 1), latents of standard normal noise (seed: tinyweb's generator; or the
`latents` given, as diffusers takes them) times the scheduler's init_noise_sigma, the scheduler's loop over the UNet,
then the VAE's decoding of latents / scaling_factor, mapped from [-1, 1] to [0, 255] and rounded (diffusers' PIL
output). Given the same latents (and a deterministic scheduler: Euler or DDIM), the images are diffusers' within float
tolerance (tests/test_stable_diffusion.py). The safety checker of the v1 pipelines is not run."""
from __future__ import annotations
import os
from typing import Optional, Sequence, Union
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes, DType
from tinyweb.device import Device
from tinyweb.nn.state import safe_load, load_state_dict
from tinyweb.models.hub import read_json, set_parameter_dtype
from tinyweb.models.clip import (CLIPTokenizer, CLIPTextModel, clip_state_dict_from_ldm, clip_state_dict_from_open_clip, SD1_CLIP_PREFIX,
                                 SD2_OPEN_CLIP_PREFIX)
from tinyweb.models.unet import UNet2DConditionModel, unet_state_dict_from_ldm
from tinyweb.models.vae import AutoencoderKL, vae_state_dict_from_ldm
from tinyweb.models.schedulers import EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, DDIMScheduler

SCHEDULERS = {"euler": EulerDiscreteScheduler, "euler_ancestral": EulerAncestralDiscreteScheduler, "ddim": DDIMScheduler}
_BY_CLASS = {cls.__name__: cls for cls in SCHEDULERS.values()}
# a pipeline folder's components (model_index.json's entries) and the classes that read them
_COMPONENTS = {"tokenizer": ("CLIPTokenizer", "CLIPTokenizerFast"), "text_encoder": ("CLIPTextModel",),
               "unet": ("UNet2DConditionModel",), "vae": ("AutoencoderKL",)}

def _prompts(p: Union[str, Sequence[str]], what: str) -> list[str]:
  if isinstance(p, str): return [p]
  if isinstance(p, (list, tuple)) and p and all(isinstance(s, str) for s in p): return list(p)
  raise TypeError(f"StableDiffusionPipeline: {what} must be a str or a non-empty list of str, got {p!r}")

class StableDiffusionPipeline:
  """tokenizer (CLIPTokenizer), text_encoder (CLIPTextModel), unet (UNet2DConditionModel), vae (AutoencoderKL) and a
  scheduler (one of SCHEDULERS' classes, or anything with their set_timesteps / timesteps / scale_model_input / step)."""
  def __init__(self, tokenizer: CLIPTokenizer, text_encoder: CLIPTextModel, unet: UNet2DConditionModel, vae: AutoencoderKL, scheduler):
    self.tokenizer, self.text_encoder, self.unet, self.vae, self.scheduler = tokenizer, text_encoder, unet, vae, scheduler
    self.vae_scale_factor = 2 ** (len(vae.config.block_out_channels) - 1)
    self.device = unet.conv_in.weight.device
    if any(d != (width := text_encoder.config.hidden_size) for d in unet.config["cross_dims"]):
      raise ValueError(f"StableDiffusionPipeline: the text encoder's hidden size {width} is not the UNet's cross_attention_dim "
                       f"{unet.config['cross_attention_dim']}")
    if unet.config["in_channels"] != vae.config.latent_channels:
      raise ValueError(f"StableDiffusionPipeline: the UNet takes {unet.config['in_channels']} latent channels, the VAE makes {vae.config.latent_channels}")

  # -- loading

  @classmethod
  def from_pretrained(cls, folder: Union[str, os.PathLike], device: Optional[str] = None, dtype: Optional[DType] = None,
                      scheduler=None, variant: Optional[str] = None) -> StableDiffusionPipeline:
    """A diffusers pipeline folder (save_pretrained's, or a downloaded model repository). dtype: the weights' dtype
    (float32 unless given; dtypes.float16 halves the memory where the device has float16). scheduler: see SCHEDULERS
    (None: the folder's scheduler if tinyweb has it, else Euler, each configured from scheduler/scheduler_config.json).
    variant: the weight files' variant (diffusion_pytorch_model.fp16.safetensors: "fp16")."""
    folder = os.fspath(folder)
    index = cls._read_index(folder)
    device = Device.canonicalize(device)
    tokenizer = CLIPTokenizer.from_folder(os.path.join(folder, "tokenizer"))
    text_encoder = CLIPTextModel.from_pretrained(os.path.join(folder, "text_encoder"), device=device, dtype=dtype, variant=variant)
    unet = UNet2DConditionModel.from_pretrained(os.path.join(folder, "unet"), device=device, dtype=dtype, variant=variant)
    vae = AutoencoderKL.from_pretrained(os.path.join(folder, "vae"), device=device, dtype=dtype, variant=variant)
    return cls(tokenizer, text_encoder, unet, vae, cls._read_scheduler(folder, index, scheduler))

  @classmethod
  def from_single_file(cls, path: Union[str, os.PathLike], config: Union[str, os.PathLike], device: Optional[str] = None,
                       dtype: Optional[DType] = None, scheduler=None) -> StableDiffusionPipeline:
    """An original single-file checkpoint (.safetensors) with the diffusers pipeline folder of its model (config): the
    folder's model_index.json, tokenizer/, scheduler/ and the config.json of text_encoder/, unet/ and vae/ are read; its
    weight files need not be there. The text encoder is SD 1.x's (cond_stage_model.transformer.: transformers' names)
    or SD 2.x's (cond_stage_model.model.: OpenCLIP's, its first num_hidden_layers blocks)."""
    path, folder = os.fspath(path), os.fspath(config)
    index = cls._read_index(folder)
    device = Device.canonicalize(device)
    state = safe_load(path, device)
    def config_of(part: str) -> dict: return read_json(os.path.join(folder, part, "config.json"), f"a diffusers pipeline's {part}/")
    text_config = config_of("text_encoder")
    text_encoder = CLIPTextModel(text_config, device)
    if any(k.startswith(SD1_CLIP_PREFIX) for k in state): text_weights = clip_state_dict_from_ldm(state, SD1_CLIP_PREFIX)
    elif any(k.startswith(SD2_OPEN_CLIP_PREFIX) for k in state):
      text_weights = clip_state_dict_from_open_clip(state, SD2_OPEN_CLIP_PREFIX, num_layers=text_encoder.config.num_hidden_layers, projection=False)
    else: raise ValueError(f"{path}: no text encoder tensors (neither {SD1_CLIP_PREFIX!r} nor {SD2_OPEN_CLIP_PREFIX!r}): not a Stable Diffusion 1.x/2.x checkpoint")
    unet_config = config_of("unet")
    unet = UNet2DConditionModel(unet_config, device)
    vae = AutoencoderKL(config_of("vae"), device)
    for model, weights in ((text_encoder, text_weights), (unet, unet_state_dict_from_ldm(state, unet_config)), (vae, vae_state_dict_from_ldm(state))):
      if dtype is not None: set_parameter_dtype(model, dtype, device, f"StableDiffusionPipeline.from_single_file ({type(model).__name__})")
      load_state_dict(model, weights)
    return cls(CLIPTokenizer.from_folder(os.path.join(folder, "tokenizer")), text_encoder, unet, vae, cls._read_scheduler(folder, index, scheduler))

  @staticmethod
  def _read_index(folder: str) -> dict:
    path = os.path.join(folder, "model_index.json")
    index = read_json(path, "a diffusers pipeline folder")
    if not isinstance(index, dict): raise ValueError(f"{path}: not a pipeline index (a JSON object)")
    if (kind := index.get("_class_name")) not in ("StableDiffusionPipeline", None):
      raise ValueError(f"{path}: _class_name {kind!r} is not supported (tinyweb's StableDiffusionPipeline reads StableDiffusionPipeline folders)")
    for part, classes in _COMPONENTS.items():
      entry = index.get(part)
      if not (isinstance(entry, list) and len(entry) == 2 and entry[1] in classes):
        raise ValueError(f"{path}: {part} is {entry!r}; a Stable Diffusion pipeline's is one of {', '.join(classes)}")
    return index

  @staticmethod
  def _read_scheduler(folder: str, index: dict, choice):
    """The scheduler: an instance as given; a name of SCHEDULERS or a class, configured from the folder's
    scheduler/scheduler_config.json; None: the folder's own class where tinyweb has it, else Euler (SD 1.5's folder
    names PNDM, which tinyweb does not have)."""
    if choice is not None and not isinstance(choice, (str, type)):
      if not all(hasattr(choice, m) for m in ("set_timesteps", "scale_model_input", "step", "timesteps")):
        raise TypeError(f"StableDiffusionPipeline: scheduler must be a name ({', '.join(SCHEDULERS)}), a scheduler class or instance, got {choice!r}")
      return choice
    if isinstance(choice, str):
      if choice not in SCHEDULERS: raise ValueError(f"StableDiffusionPipeline: scheduler {choice!r} is not one of {', '.join(SCHEDULERS)}")
      choice = SCHEDULERS[choice]
    if choice is None:
      entry = index.get("scheduler")
      choice = _BY_CLASS.get(entry[1] if isinstance(entry, list) and len(entry) == 2 else None, EulerDiscreteScheduler)
    path = os.path.join(folder, "scheduler", "scheduler_config.json")
    return choice.from_config(read_json(path, "a diffusers pipeline folder"), path)

  # -- running

  def encode_prompt(self, prompts: list[str], clip_skip: Optional[int] = None) -> Tensor:
    """(len(prompts), 77, hidden): the text encoder's last hidden state, or with clip_skip the output of the layer
    clip_skip before the last, through the final layer norm (diffusers' rule)."""
    out = self.text_encoder(self.tokenizer(prompts).input_ids)
    if clip_skip is None: return out.last_hidden_state
    layers = self.text_encoder.config.num_hidden_layers
    if not (isinstance(clip_skip, int) and 0 <= clip_skip < layers):
      raise ValueError(f"StableDiffusionPipeline: clip_skip must be an int from 0 to {layers - 1} (the text encoder's layers less one), got {clip_skip!r}")
    return self.text_encoder.text_model.final_layer_norm(out.hidden_states[-(clip_skip + 1)])

  def __call__(self, prompt: Union[str, Sequence[str]], negative_prompt: Union[None, str, Sequence[str]] = None, steps: int = 50,
               guidance_scale: float = 7.5, height: Optional[int] = None, width: Optional[int] = None, seed: Optional[int] = None,
               latents: Optional[Tensor] = None, clip_skip: Optional[int] = None, output: str = "uint8") -> Tensor:
    """The images of the prompts (one each): output "uint8" (N, height, width, 3) uint8 pixels, "float" the same in
    [0, 1] (diffusers' output_type "np"), "latent" the final latents (N, 4, height / 8, width / 8). height and width
    default to the UNet's sample_size times 8 (512 for SD 1.5) and must be multiples of 8. latents: the initial noise
    (N, 4, height / 8, width / 8), unscaled (the scheduler's init_noise_sigma is applied), in place of a draw of seed."""
    prompts = _prompts(prompt, "prompt")
    negatives = [""] * len(prompts) if negative_prompt is None else _prompts(negative_prompt, "negative_prompt")
    if len(negatives) != len(prompts): raise ValueError(f"StableDiffusionPipeline: {len(negatives)} negative prompts for {len(prompts)} prompts")
    if output not in ("uint8", "float", "latent"): raise ValueError(f"StableDiffusionPipeline: output must be 'uint8', 'float' or 'latent', got {output!r}")
    if not (isinstance(steps, int) and steps >= 1): raise ValueError(f"StableDiffusionPipeline: steps must be a positive int, got {steps!r}")
    f, size = self.vae_scale_factor, self.unet.config["sample_size"]
    default = (size if isinstance(size, int) else 64) * f
    height, width = default if height is None else height, default if width is None else width
    if not all(isinstance(v, int) and v > 0 and v % 8 == 0 for v in (height, width)):
      raise ValueError(f"StableDiffusionPipeline: height and width must be positive multiples of 8, got {height} x {width}")
    shape = (len(prompts), self.unet.config["in_channels"], height // f, width // f)
    if latents is None:
      if seed is not None: Tensor.manual_seed(seed)
      latents = Tensor.randn(*shape, device=self.device)
    elif not isinstance(latents, Tensor) or tuple(latents.shape) != shape:
      raise ValueError(f"StableDiffusionPipeline: latents must be a Tensor of shape {shape}, got {getattr(latents, 'shape', type(latents).__name__)}")
    guided = guidance_scale > 1
    text = self.encode_prompt(negatives + prompts if guided else prompts, clip_skip)
    self.scheduler.set_timesteps(steps)
    x = (latents.to(self.device).float() * float(self.scheduler.init_noise_sigma)).realize()
    for t in self.scheduler.timesteps:
      model_input = self.scheduler.scale_model_input(x.cat(x) if guided else x, t)
      noise = self.unet(model_input, t, text).float()
      if guided:
        uncond, cond = noise.chunk(2)
        noise = uncond + guidance_scale * (cond - uncond)
      x = self.scheduler.step(noise, t, x).prev_sample.realize()
    if output == "latent": return x
    pixels = self.decode_latents(x)
    return pixels.realize() if output == "float" else (pixels * 255).round().cast(dtypes.uint8).realize()

  def decode_latents(self, latents: Tensor) -> Tensor:
    """The final latents (N, 4, h, w) as images (N, h * 8, w * 8, 3) in [0, 1]: the VAE's decoding of latents /
    scaling_factor, mapped from [-1, 1]."""
    return (self.vae.decode(latents / self.vae.config.scaling_factor).float() / 2 + 0.5).clamp(0, 1).permute(0, 2, 3, 1)
