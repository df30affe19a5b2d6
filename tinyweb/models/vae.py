"""Stable Diffusion's VAE: diffusers' AutoencoderKL (the encoder and decoder of SD 1.x, 2.x and SDXL) with diffusers'
parameter names, configured from its config.json, and the mapping from the original (CompVis/LDM, "single-file")
checkpoints' names to diffusers'.

  vae = AutoencoderKL.from_pretrained("stable-diffusion-v1-5/vae")      # config.json + diffusion_pytorch_model.safetensors
  latents = vae.encode(images).sample(seed=0) * vae.config.scaling_factor   # images: (N, 3, H, W) in [-1, 1]
  images = vae.decode(latents / vae.config.scaling_factor)                 # (N, 3, H, W), about [-1, 1]

`encode` gives a `DiagonalGaussianDistribution` (diffusers' latent_dist: mean, logvar clamped to [-30, 20], std, var,
sample(), mode()); `decode` gives the image tensor itself (diffusers' DecoderOutput.sample). Shifted latents (a config
with shift_factor, e.g. SD3's) are (z - shift_factor) * scaling_factor; SD's shift_factor is None.

From a single-file checkpoint (a whole SD .safetensors with "first_stage_model." tensors, or a VAE alone):

  sd = safe_load("v1-5-pruned-emaonly.safetensors")
  vae = AutoencoderKL(vae_config_from_ldm(sd), device="WEBGPU")
  load_state_dict(vae, vae_state_dict_from_ldm(sd))

The config keys AutoencoderKL reads are diffusers'; a value it does not implement (another block type, an activation
it lacks) or a key it does not know is refused with a ValueError naming the key. force_upcast is accepted and ignored
(tinyweb runs the VAE in the dtype it was loaded in: float32 unless `from_pretrained(dtype=...)` says otherwise)."""
from __future__ import annotations
import dataclasses, os, re
from typing import Optional, Union
from tinyweb.tensor import Tensor
from tinyweb.dtype import DType
from tinyweb.nn import Conv2d, GroupNorm
from tinyweb.nn.state import load_state_dict
from tinyweb.models.hub import read_json, load_safetensors, set_parameter_dtype
from tinyweb.models import unet
from tinyweb.models.unet import Downsample2D, Upsample2D

_ACTIVATIONS = {"silu": Tensor.silu, "swish": Tensor.silu, "mish": Tensor.mish, "relu": Tensor.relu,
                "gelu": lambda x: x.gelu(approximate="none")}
_EPS = 1e-6   # every GroupNorm of diffusers' VAE Encoder and Decoder

# ---------------------------------------------------------------------------------------------------------------
# the config

@dataclasses.dataclass
class AutoencoderKLConfig:
  """diffusers' AutoencoderKL config (its keys and defaults)."""
  in_channels: int = 3
  out_channels: int = 3
  down_block_types: tuple = ("DownEncoderBlock2D",)
  up_block_types: tuple = ("UpDecoderBlock2D",)
  block_out_channels: tuple = (64,)
  layers_per_block: int = 1
  act_fn: str = "silu"
  latent_channels: int = 4
  norm_num_groups: int = 32
  sample_size: Union[int, tuple] = 32
  scaling_factor: float = 0.18215
  shift_factor: Optional[float] = None
  latents_mean: Optional[tuple] = None
  latents_std: Optional[tuple] = None
  force_upcast: bool = True
  use_quant_conv: bool = True
  use_post_quant_conv: bool = True
  mid_block_add_attention: bool = True

  @classmethod
  def from_dict(cls, config: dict, name: str = "config.json") -> AutoencoderKLConfig:
    if not isinstance(config, dict): raise ValueError(f"{name}: an AutoencoderKL config must be a JSON object, got {type(config).__name__}")
    if config.get("_class_name", "AutoencoderKL") != "AutoencoderKL":
      raise ValueError(f"{name}: _class_name {config['_class_name']!r} is not supported (this is diffusers' AutoencoderKL)")
    fields = {f.name for f in dataclasses.fields(cls)}
    if (unknown := sorted(k for k in config if not k.startswith("_") and k not in fields)):
      raise ValueError(f"{name}: config key {unknown[0]!r} is not supported by AutoencoderKL (it reads {', '.join(sorted(fields))})")
    c = cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in config.items() if k in fields})
    def bad(key: str, why: str): raise ValueError(f"{name}: {key} {getattr(c, key)!r} is not supported ({why})")
    for key in ("in_channels", "out_channels", "layers_per_block", "latent_channels", "norm_num_groups"):
      if not (isinstance(getattr(c, key), int) and getattr(c, key) >= 1): bad(key, "a positive int")
    if not (c.block_out_channels and all(isinstance(ch, int) and ch >= 1 for ch in c.block_out_channels)):
      bad("block_out_channels", "a list of positive ints")
    if any(ch % c.norm_num_groups for ch in c.block_out_channels):
      bad("block_out_channels", f"each must be divisible by norm_num_groups {c.norm_num_groups}")
    if any(t != "DownEncoderBlock2D" for t in c.down_block_types) or len(c.down_block_types) != len(c.block_out_channels):
      bad("down_block_types", f"AutoencoderKL implements one 'DownEncoderBlock2D' per block_out_channels ({len(c.block_out_channels)})")
    if any(t != "UpDecoderBlock2D" for t in c.up_block_types) or len(c.up_block_types) != len(c.block_out_channels):
      bad("up_block_types", f"AutoencoderKL implements one 'UpDecoderBlock2D' per block_out_channels ({len(c.block_out_channels)})")
    if c.act_fn not in _ACTIVATIONS: bad("act_fn", f"one of {', '.join(_ACTIVATIONS)}")
    for key in ("use_quant_conv", "use_post_quant_conv", "mid_block_add_attention", "force_upcast"):
      if not isinstance(getattr(c, key), bool): bad(key, "true or false")
    for key in ("scaling_factor", "shift_factor"):
      if getattr(c, key) is not None and not isinstance(getattr(c, key), (int, float)): bad(key, "a number")
    return c

# ---------------------------------------------------------------------------------------------------------------
# the blocks

class ResnetBlock2D(unet.ResnetBlock2D):
  """diffusers' ResnetBlock2D without a time embedding: norm1, act, conv1, norm2, act, conv2, plus the input (through a
  1x1 conv_shortcut when the channel count changes)."""
  def __init__(self, c_in: int, c_out: int, c: AutoencoderKLConfig, device=None):
    super().__init__(c_in, c_out, None, c.norm_num_groups, _EPS, device=device, act=_ACTIVATIONS[c.act_fn])

class Attention(unet.Attention):
  """diffusers' VAE attention block: one head over the spatial positions (q, k, v with biases), group_norm first, to_out.0
  after, the input added back (rescale_output_factor is 1 in the VAE)."""
  def __init__(self, ch: int, c: AutoencoderKLConfig, device=None):
    self.group_norm = GroupNorm(c.norm_num_groups, ch, _EPS, device=device)
    super().__init__(ch, 1, ch, device=device, bias=True)

  def __call__(self, x: Tensor) -> Tensor:
    n, ch, h, w = x.shape
    y = super().__call__(self.group_norm(x.reshape(n, ch, h * w)).transpose(1, 2))
    return y.transpose(1, 2).reshape(n, ch, h, w) + x

class UNetMidBlock2D:
  """resnet, attention (none when mid_block_add_attention is false), resnet."""
  def __init__(self, ch: int, c: AutoencoderKLConfig, device=None):
    self.resnets = [ResnetBlock2D(ch, ch, c, device) for _ in range(2)]
    self.attentions = [Attention(ch, c, device) if c.mid_block_add_attention else None]

  def __call__(self, x: Tensor) -> Tensor:
    x = self.resnets[0](x)
    if self.attentions[0] is not None: x = self.attentions[0](x)
    return self.resnets[1](x)

class DownEncoderBlock2D:
  def __init__(self, c_in: int, c_out: int, downsample: bool, c: AutoencoderKLConfig, device=None):
    self.resnets = [ResnetBlock2D(c_in if i == 0 else c_out, c_out, c, device) for i in range(c.layers_per_block)]
    self.downsamplers = [Downsample2D(c_out, 0, device)] if downsample else None   # (padding 0: LDM's asymmetric padding)

  def __call__(self, x: Tensor) -> Tensor:
    for r in self.resnets: x = r(x)
    return self.downsamplers[0](x) if self.downsamplers else x

class UpDecoderBlock2D:
  def __init__(self, c_in: int, c_out: int, upsample: bool, c: AutoencoderKLConfig, device=None):
    self.resnets = [ResnetBlock2D(c_in if i == 0 else c_out, c_out, c, device) for i in range(c.layers_per_block + 1)]
    self.upsamplers = [Upsample2D(c_out, device)] if upsample else None

  def __call__(self, x: Tensor) -> Tensor:
    for r in self.resnets: x = r(x)
    return self.upsamplers[0](x) if self.upsamplers else x

class Encoder:
  """conv_in, the down blocks (each but the last halves the size), mid_block, conv_norm_out, SiLU (whatever act_fn
  says: act_fn is the resnets'), conv_out to 2 * latent_channels (the mean and log-variance)."""
  def __init__(self, c: AutoencoderKLConfig, device=None):
    chs, top = c.block_out_channels, c.block_out_channels[-1]
    self.conv_in = Conv2d(c.in_channels, chs[0], 3, padding=1, device=device)
    self.down_blocks = [DownEncoderBlock2D(chs[max(i - 1, 0)], ch, i < len(chs) - 1, c, device) for i, ch in enumerate(chs)]
    self.mid_block = UNetMidBlock2D(top, c, device)
    self.conv_norm_out = GroupNorm(c.norm_num_groups, top, _EPS, device=device)
    self.conv_out = Conv2d(top, 2 * c.latent_channels, 3, padding=1, device=device)

  def __call__(self, x: Tensor) -> Tensor:
    x = self.conv_in(x)
    for b in self.down_blocks: x = b(x)
    return self.conv_out(self.conv_norm_out(self.mid_block(x)).silu())

class Decoder:
  """conv_in, mid_block, the up blocks (widest first, each but the last doubles the size, layers_per_block + 1 resnets),
  conv_norm_out, SiLU, conv_out."""
  def __init__(self, c: AutoencoderKLConfig, device=None):
    chs = list(reversed(c.block_out_channels))
    self.conv_in = Conv2d(c.latent_channels, chs[0], 3, padding=1, device=device)
    self.mid_block = UNetMidBlock2D(chs[0], c, device)
    self.up_blocks = [UpDecoderBlock2D(chs[max(i - 1, 0)], ch, i < len(chs) - 1, c, device) for i, ch in enumerate(chs)]
    self.conv_norm_out = GroupNorm(c.norm_num_groups, chs[-1], _EPS, device=device)
    self.conv_out = Conv2d(chs[-1], c.out_channels, 3, padding=1, device=device)

  def __call__(self, z: Tensor) -> Tensor:
    x = self.mid_block(self.conv_in(z))
    for b in self.up_blocks: x = b(x)
    return self.conv_out(self.conv_norm_out(x).silu())

class DiagonalGaussianDistribution:
  """The encoder's posterior: `parameters` (N, 2 * latent_channels, h, w) split into mean and logvar (clamped to
  [-30, 20], as diffusers does)."""
  def __init__(self, parameters: Tensor):
    self.parameters = parameters
    self.mean, logvar = parameters.chunk(2, dim=1)
    self.logvar = logvar.clamp(-30.0, 20.0)
    self.std, self.var = (0.5 * self.logvar).exp(), self.logvar.exp()

  def sample(self, noise: Optional[Tensor] = None, seed: Optional[int] = None) -> Tensor:
    """mean + std * noise; noise: a standard normal tensor shaped like the mean, else drawn from tinyweb's generator
    (after Tensor.manual_seed(seed) when a seed is given)."""
    if noise is None:
      if seed is not None: Tensor.manual_seed(seed)
      noise = Tensor.randn(*self.mean.shape, dtype=self.mean.dtype, device=self.mean.device)
    elif tuple(noise.shape) != tuple(self.mean.shape):
      raise ValueError(f"DiagonalGaussianDistribution.sample: noise of shape {noise.shape} must be shaped like the mean {self.mean.shape}")
    return self.mean + self.std * noise.cast(self.mean.dtype)

  def mode(self) -> Tensor: return self.mean

# ---------------------------------------------------------------------------------------------------------------
# the model

class AutoencoderKL:
  """diffusers' AutoencoderKL at inference, from its config (a dict of config.json, or an AutoencoderKLConfig); its
  tensors have diffusers' names (encoder.down_blocks.0.resnets.0.norm1.weight, decoder.mid_block.attentions.0.to_q.weight,
  quant_conv.weight, ...), so `load_state_dict(vae, safe_load(path))` loads a diffusers checkpoint.

  vae.encode(images) -> DiagonalGaussianDistribution of the latents (images (N, in_channels, H, W));
  vae.decode(latents) -> images (N, out_channels, 8h, 8w for SD's four levels);
  vae(images) -> decode(encode(images).mode()), or a sample of the posterior with sample_posterior=True (noise, seed)."""
  def __init__(self, config: Union[dict, AutoencoderKLConfig], device=None):
    self.config = c = config if isinstance(config, AutoencoderKLConfig) else AutoencoderKLConfig.from_dict(config)
    self.encoder, self.decoder = Encoder(c, device), Decoder(c, device)
    self.quant_conv = Conv2d(2 * c.latent_channels, 2 * c.latent_channels, 1, device=device) if c.use_quant_conv else None
    self.post_quant_conv = Conv2d(c.latent_channels, c.latent_channels, 1, device=device) if c.use_post_quant_conv else None

  def _check(self, x: Tensor, what: str, channels: int) -> Tensor:
    if not isinstance(x, Tensor): raise TypeError(f"AutoencoderKL.{what}: expected a Tensor, got {type(x).__name__}")
    if x.ndim != 4 or x.shape[1] != channels:
      raise ValueError(f"AutoencoderKL.{what}: expected (N, {channels}, H, W), got {x.shape}")
    return x.cast(self.encoder.conv_in.weight.dtype)

  def encode(self, x: Tensor) -> DiagonalGaussianDistribution:
    h = self.encoder(self._check(x, "encode", self.config.in_channels))
    return DiagonalGaussianDistribution(h if self.quant_conv is None else self.quant_conv(h))

  def decode(self, z: Tensor) -> Tensor:
    z = self._check(z, "decode", self.config.latent_channels)
    return self.decoder(z if self.post_quant_conv is None else self.post_quant_conv(z))

  def __call__(self, x: Tensor, sample_posterior: bool = False, noise: Optional[Tensor] = None, seed: Optional[int] = None) -> Tensor:
    posterior = self.encode(x)
    return self.decode(posterior.sample(noise, seed) if sample_posterior else posterior.mode())

  @classmethod
  def from_pretrained(cls, folder: Union[str, os.PathLike], device: Optional[str] = None, dtype: Optional[DType] = None,
                      variant: Optional[str] = None) -> AutoencoderKL:
    """A diffusers AutoencoderKL folder (`save_pretrained`'s, or a pipeline's vae/): config.json and
    diffusion_pytorch_model[.variant].safetensors, or its sharded form (...safetensors.index[.variant].json and the
    shards). The weights are converted to float32 unless dtype says otherwise (dtypes.float16 keeps a float16 file's
    weights as they are, where the device has float16)."""
    path = os.path.join(os.fspath(folder), "config.json")
    model = cls(AutoencoderKLConfig.from_dict(read_json(path, "a diffusers AutoencoderKL folder"), path), device)
    if dtype is not None: set_parameter_dtype(model, dtype, device, "AutoencoderKL.from_pretrained")
    load_state_dict(model, load_safetensors(folder, "diffusion_pytorch_model", device, variant))
    return model

# ---------------------------------------------------------------------------------------------------------------
# original (CompVis/LDM) single-file checkpoints

_LDM_PREFIXES = ("first_stage_model.", "vae.")
_RESNET_NAMES = {"nin_shortcut": "conv_shortcut"}
_ATTN_NAMES = {"norm": "group_norm", "q": "to_q", "k": "to_k", "v": "to_v", "proj_out": "to_out.0"}
_TOP_NAMES = {"norm_out": "conv_norm_out", "conv_in": "conv_in", "conv_out": "conv_out"}

def _ldm_vae_tensors(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
  """The VAE's tensors of an original checkpoint, their prefix (first_stage_model. or vae.) taken off; a checkpoint of
  the VAE alone has none. Training leftovers (loss.*, model_ema.*) are left out."""
  for prefix in _LDM_PREFIXES:
    if any(k.startswith(prefix) for k in state_dict): return {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
  return {k: v for k, v in state_dict.items() if not k.startswith(("loss.", "model_ema."))}

def vae_state_dict_from_ldm(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
  """An original LDM/CompVis VAE's tensors (encoder.down.0.block.1.norm1.weight, decoder.up.3.upsample.conv.weight,
  encoder.mid.attn_1.q.weight, ...; under first_stage_model. in a whole SD checkpoint) under diffusers' names. The
  decoder's up levels are numbered the other way round (LDM's up.0 is the last, full-size level: diffusers' last
  up_block); the attention's 1x1 conv weights become Linear weights. A name it does not know raises a ValueError."""
  sd = _ldm_vae_tensors(state_dict)
  ups = {int(m.group(1)) for k in sd if (m := re.match(r"decoder\.up\.(\d+)\.", k))}
  out: dict[str, Tensor] = {}
  for key, t in sd.items():
    new = _ldm_vae_name(key, len(ups))
    if new is None: raise ValueError(f"vae_state_dict_from_ldm: {key!r} is not a tensor of an LDM VAE")
    if ".attentions.0.to_" in new and new.endswith(".weight") and t.ndim > 2: t = t.reshape(t.shape[0], t.shape[1])
    out[new] = t
  return out

def _ldm_vae_name(key: str, n_up: int) -> Optional[str]:
  if (m := re.fullmatch(r"(quant_conv|post_quant_conv)\.(weight|bias)", key)): return key
  if not (m := re.fullmatch(r"(encoder|decoder)\.(.+)\.(weight|bias)", key)): return None
  part, body, kind = m.groups()
  if body in _TOP_NAMES: return f"{part}.{_TOP_NAMES[body]}.{kind}"
  if (m := re.fullmatch(r"mid\.block_([12])\.(norm1|norm2|conv1|conv2|nin_shortcut)", body)):
    return f"{part}.mid_block.resnets.{int(m.group(1)) - 1}.{_RESNET_NAMES.get(m.group(2), m.group(2))}.{kind}"
  if (m := re.fullmatch(r"mid\.attn_1\.(norm|q|k|v|proj_out)", body)): return f"{part}.mid_block.attentions.0.{_ATTN_NAMES[m.group(1)]}.{kind}"
  level = "down" if part == "encoder" else "up"
  if (m := re.fullmatch(level + r"\.(\d+)\.block\.(\d+)\.(norm1|norm2|conv1|conv2|nin_shortcut)", body)):
    i = int(m.group(1)) if part == "encoder" else n_up - 1 - int(m.group(1))
    return f"{part}.{level}_blocks.{i}.resnets.{m.group(2)}.{_RESNET_NAMES.get(m.group(3), m.group(3))}.{kind}"
  if (m := re.fullmatch(level + r"\.(\d+)\.(downsample|upsample)\.conv", body)):
    i = int(m.group(1)) if part == "encoder" else n_up - 1 - int(m.group(1))
    return f"{part}.{level}_blocks.{i}.{m.group(2)}rs.0.conv.{kind}"
  return None

def vae_config_from_ldm(state_dict: dict[str, Tensor], scaling_factor: float = 0.18215, norm_num_groups: int = 32) -> dict:
  """The diffusers config of an original checkpoint's VAE, read from its tensors' shapes (the channels, levels, resnets
  per level, whether it has quant convs and mid-block attention). What the shapes do not tell comes from the arguments:
  scaling_factor (0.18215 for SD 1.x and 2.x, 0.13025 for SDXL) and norm_num_groups."""
  sd = _ldm_vae_tensors(state_dict)
  def shape(k: str) -> tuple[int, ...]:
    if k not in sd: raise ValueError(f"vae_config_from_ldm: the checkpoint has no {k!r}: not an LDM VAE")
    return tuple(sd[k].shape)
  levels = sorted({int(m.group(1)) for k in sd if (m := re.match(r"encoder\.down\.(\d+)\.", k))})
  if levels != list(range(len(levels))) or not levels: raise ValueError(f"vae_config_from_ldm: encoder levels {levels} are not 0..n-1")
  blocks = {int(m.group(1)) for k in sd if (m := re.match(r"encoder\.down\.0\.block\.(\d+)\.", k))}
  return {"in_channels": shape("encoder.conv_in.weight")[1], "out_channels": shape("decoder.conv_out.weight")[0],
          "down_block_types": ["DownEncoderBlock2D"] * len(levels), "up_block_types": ["UpDecoderBlock2D"] * len(levels),
          "block_out_channels": [shape(f"encoder.down.{i}.block.0.conv1.weight")[0] for i in levels],
          "layers_per_block": len(blocks), "latent_channels": shape("decoder.conv_in.weight")[1], "norm_num_groups": norm_num_groups,
          "scaling_factor": scaling_factor, "use_quant_conv": "quant_conv.weight" in sd, "use_post_quant_conv": "post_quant_conv.weight" in sd,
          "mid_block_add_attention": "encoder.mid.attn_1.q.weight" in sd}
