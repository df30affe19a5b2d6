"""Stable Diffusion's denoising UNet: diffusers' UNet2DConditionModel with its parameter names and config.json keys, for
SD 1.x, SD 2.x and SDXL (the blocks those use), at inference.

  unet = UNet2DConditionModel.from_pretrained("stable-diffusion-v1-5/unet")          # config.json + diffusion_pytorch_model.safetensors
  noise = unet(latents, Tensor([981.0]), text_embeddings)                          # (B, 4, H/8, W/8) -> the same shape
  # SDXL: the pooled text embeddings and the size/crop ids as diffusers' added_cond_kwargs
  noise = unet(latents, t, text_embeddings, {"text_embeds": pooled, "time_ids": time_ids})

Blocks: CrossAttnDownBlock2D, DownBlock2D, UNetMidBlock2DCrossAttn (or none), UpBlock2D, CrossAttnUpBlock2D; ResnetBlock2D
with the "default" time embedding (added after conv1); Transformer2DModel (proj_in/proj_out 1x1 convolutions, or Linear
layers with use_linear_projection) of BasicTransformerBlocks (self-attention, cross-attention, GEGLU feed-forward);
sinusoidal Timesteps and the TimestepEmbedding MLP; SDXL's "text_time" addition embedding. A config key with a value this
module does not implement (class embeddings, "scale_shift" ResNets, other block types, ...) is refused with a ValueError
naming the key, its value and what is supported; keys diffusers itself ignores are ignored.

diffusers' naming quirk is kept: `attention_head_dim` is the number of heads of each block (num_attention_heads, which
diffusers refuses, must be None), so SD 1.x's 8 means 8 heads and SD 2.x's [5, 10, 20, 20] means 5, 10, 20 and 20 heads of
64 channels each.

`unet_state_dict_from_ldm(state_dict, config)` renames an original (CompVis/LDM, "single-file") checkpoint's UNet tensors
(model.diffusion_model.input_blocks.1.0.in_layers.0.weight, ...) to these names, as diffusers' convert_ldm_unet_checkpoint
does; `UNet2DConditionModel.from_single_file(path, config)` loads one.

Weights stored in float16 become float32 unless dtype=dtypes.float16, which keeps them (where the device has float16); the
group and layer norms and the attention are then computed in float32. Under TinyJit, give the timestep as a Tensor: a
Python number becomes a constant of the captured kernels."""
from __future__ import annotations
import math, os, re
from typing import Any, Optional, Sequence, Union
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes, DType
from tinyweb.nn import Linear, Conv2d, GroupNorm, LayerNorm
from tinyweb.nn.state import safe_load, load_state_dict
from tinyweb.models.hub import read_json, load_safetensors, set_parameter_dtype

# ---------------------------------------------------------------------------------------------------------------
# the config

_DEFAULTS = dict(   # UNet2DConditionModel's defaults (diffusers 0.42), for the keys a config.json may leave out
  sample_size=None, in_channels=4, out_channels=4, center_input_sample=False, flip_sin_to_cos=True, freq_shift=0,
  down_block_types=("CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"),
  mid_block_type="UNetMidBlock2DCrossAttn", up_block_types=("UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"),
  only_cross_attention=False, block_out_channels=(320, 640, 1280, 1280), layers_per_block=2, downsample_padding=1,
  mid_block_scale_factor=1.0, dropout=0.0, act_fn="silu", norm_num_groups=32, norm_eps=1e-5, cross_attention_dim=1280,
  transformer_layers_per_block=1, reverse_transformer_layers_per_block=None, encoder_hid_dim=None, encoder_hid_dim_type=None,
  attention_head_dim=8, num_attention_heads=None, dual_cross_attention=False, use_linear_projection=False, class_embed_type=None,
  addition_embed_type=None, addition_time_embed_dim=None, num_class_embeds=None, upcast_attention=False,
  resnet_time_scale_shift="default", resnet_skip_time_act=False, resnet_out_scale_factor=1.0, time_embedding_type="positional",
  time_embedding_dim=None, time_embedding_act_fn=None, timestep_post_act=None, time_cond_proj_dim=None, conv_in_kernel=3,
  conv_out_kernel=3, projection_class_embeddings_input_dim=None, attention_type="default", class_embeddings_concat=False,
  mid_block_only_cross_attention=None, cross_attention_norm=None, addition_embed_type_num_heads=64)

# key -> the values implemented (the others change what diffusers computes). Keys absent here and from _DEFAULTS'
# checks (dropout, upcast_attention, sample_size, resnet_skip_time_act, resnet_out_scale_factor, mid_block_only_cross_attention,
# addition_embed_type_num_heads) change nothing for these blocks at inference; upcast_attention: the attention is computed
# in float32 in any case.
_ONLY = dict(only_cross_attention=(False,), encoder_hid_dim=(None,), encoder_hid_dim_type=(None,), num_attention_heads=(None,),
             dual_cross_attention=(False,), class_embed_type=(None,), addition_embed_type=(None, "text_time"), num_class_embeds=(None,),
             resnet_time_scale_shift=("default",), time_embedding_type=("positional",), time_embedding_act_fn=(None,),
             timestep_post_act=(None,), time_cond_proj_dim=(None,), attention_type=("default",), class_embeddings_concat=(False,),
             cross_attention_norm=(None,), act_fn=("silu", "swish"), mid_block_type=("UNetMidBlock2DCrossAttn", None))
DOWN_BLOCKS, UP_BLOCKS = ("CrossAttnDownBlock2D", "DownBlock2D"), ("CrossAttnUpBlock2D", "UpBlock2D")

def _per_block(c: dict, key: str, n: int, name: str) -> list:
  v = c[key]
  if isinstance(v, (list, tuple)):
    if len(v) != n: raise ValueError(f"{name}: {key} {v!r} has {len(v)} entries for {n} down blocks")
    return list(v)
  return [v] * n

def unet_config(config: dict, name: str = "UNet2DConditionModel") -> dict:
  """The config with diffusers' defaults filled in and each per-block setting as a list (one entry per down block, in
  down-block order); a ValueError naming the key for what this module does not implement."""
  if not isinstance(config, dict): raise ValueError(f"{name}: the config must be a dict, got {type(config).__name__}")
  c = {**_DEFAULTS, **config}
  for key, ok in _ONLY.items():
    v = c[key]
    if key == "only_cross_attention" and isinstance(v, (list, tuple)) and not any(v): continue
    if v not in ok: raise ValueError(f"{name}: {key} {v!r} is not supported (UNet2DConditionModel implements {' or '.join(map(repr, ok))})")
  n = len(c["down_block_types"])
  for key, kinds in (("down_block_types", DOWN_BLOCKS), ("up_block_types", UP_BLOCKS)):
    if len(c[key]) != n: raise ValueError(f"{name}: {key} has {len(c[key])} blocks, down_block_types {n}")
    for kind in c[key]:
      if kind not in kinds: raise ValueError(f"{name}: {key} has {kind!r}, which is not supported (UNet2DConditionModel implements {', '.join(kinds)})")
  if n == 0: raise ValueError(f"{name}: down_block_types is empty")
  if len(c["block_out_channels"]) != n: raise ValueError(f"{name}: block_out_channels has {len(c['block_out_channels'])} entries for {n} down blocks")
  if c["norm_num_groups"] is None: raise ValueError(f"{name}: norm_num_groups None is not supported (UNet2DConditionModel implements group norms)")
  for key in ("conv_in_kernel", "conv_out_kernel"):
    if not (isinstance(c[key], int) and c[key] % 2 == 1): raise ValueError(f"{name}: {key} {c[key]!r} is not supported (an odd int)")
  c["heads"] = _per_block(c, "attention_head_dim", n, name)   # (diffusers' naming: these are the numbers of heads)
  c["cross_dims"] = _per_block(c, "cross_attention_dim", n, name)
  c["layers"] = _per_block(c, "layers_per_block", n, name)
  c["transformer_layers"] = _per_block(c, "transformer_layers_per_block", n, name)
  rev = c["reverse_transformer_layers_per_block"]
  if rev is None:
    if any(isinstance(t, (list, tuple)) for t in c["transformer_layers"]):
      raise ValueError(f"{name}: transformer_layers_per_block lists per layer need reverse_transformer_layers_per_block")
    rev = c["transformer_layers"][::-1]
  elif len(rev) != n: raise ValueError(f"{name}: reverse_transformer_layers_per_block has {len(rev)} entries for {n} up blocks")
  c["reverse_transformer_layers"] = list(rev)
  if any(h is None or h <= 0 for h in c["heads"]):
    raise ValueError(f"{name}: attention_head_dim {c['attention_head_dim']!r} must give a positive number of heads per block")
  if c["addition_embed_type"] == "text_time":
    for key in ("addition_time_embed_dim", "projection_class_embeddings_input_dim"):
      if not isinstance(c[key], int): raise ValueError(f"{name}: addition_embed_type 'text_time' needs {key} (got {c[key]!r})")
  return c

# ---------------------------------------------------------------------------------------------------------------
# layers

def _norm32(norm, x: Tensor) -> Tensor:
  """A group or layer norm computed in float32 whatever x's dtype (float16 statistics lose too much), cast back."""
  return norm(x) if x.dtype == dtypes.float32 else norm(x.float()).cast(x.dtype)

class Timesteps:
  """diffusers' sinusoidal embedding of (fractional) timesteps: sin and cos of t times num_channels // 2 frequencies
  exp(-ln(10000) i / (half - freq_shift)), cos first with flip_sin_to_cos; float32, shape (N, num_channels)."""
  def __init__(self, num_channels: int, flip_sin_to_cos: bool, freq_shift: float):
    self.num_channels, self.flip_sin_to_cos, self.freq_shift = num_channels, flip_sin_to_cos, freq_shift

  def __call__(self, t: Tensor) -> Tensor:
    half = self.num_channels // 2
    freqs = (Tensor.arange(half, dtype=dtypes.float32, device=t.device) * (-math.log(10000) / (half - self.freq_shift))).exp()
    args = t.float().reshape(-1, 1) * freqs.reshape(1, half)
    emb = args.cos().cat(args.sin(), dim=-1) if self.flip_sin_to_cos else args.sin().cat(args.cos(), dim=-1)
    return emb.pad((0, 1)) if self.num_channels % 2 else emb

class TimestepEmbedding:
  def __init__(self, n_in: int, n_out: int, device=None):
    self.linear_1, self.linear_2 = Linear(n_in, n_out, device=device), Linear(n_out, n_out, device=device)

  def __call__(self, x: Tensor) -> Tensor: return self.linear_2(self.linear_1(x).silu())

class ResnetBlock2D:
  """GroupNorm, act, 3x3 conv, plus the projected time embedding (none when temb is None: the VAE's), GroupNorm, act,
  3x3 conv; the input (through a 1x1 conv_shortcut when the channels change) added back, the sum divided by
  output_scale_factor. act: SiLU unless given (the VAE's act_fn)."""
  def __init__(self, c_in: int, c_out: int, temb: Optional[int], groups: int, eps: float, scale: float = 1.0, device=None, act=Tensor.silu):
    self.norm1, self.conv1 = GroupNorm(groups, c_in, eps, device=device), Conv2d(c_in, c_out, 3, padding=1, device=device)
    self.time_emb_proj = Linear(temb, c_out, device=device) if temb is not None else None
    self.norm2, self.conv2 = GroupNorm(groups, c_out, eps, device=device), Conv2d(c_out, c_out, 3, padding=1, device=device)
    self.conv_shortcut = Conv2d(c_in, c_out, 1, device=device) if c_in != c_out else None
    self.output_scale_factor, self.act = scale, act

  def __call__(self, x: Tensor, temb: Optional[Tensor] = None) -> Tensor:
    h = self.conv1(self.act(_norm32(self.norm1, x)))
    if self.time_emb_proj is not None: h = h + self.time_emb_proj(self.act(temb)).reshape(*temb.shape[:1], -1, 1, 1)
    h = self.conv2(self.act(_norm32(self.norm2, h)))
    out = (x if self.conv_shortcut is None else self.conv_shortcut(x)) + h
    return out if self.output_scale_factor == 1 else out / self.output_scale_factor

class Attention:
  """Multi-head attention, without biases on q, k, v unless bias (diffusers' Attention as BasicTransformerBlock makes it;
  the VAE's has them): context None is self-attention. In float32 whatever the weights' dtype."""
  def __init__(self, dim: int, heads: int, head_dim: int, context_dim: Optional[int] = None, device=None, bias: bool = False):
    inner = heads * head_dim
    self.heads = heads
    self.to_q = Linear(dim, inner, bias=bias, device=device)
    self.to_k = Linear(context_dim or dim, inner, bias=bias, device=device)
    self.to_v = Linear(context_dim or dim, inner, bias=bias, device=device)
    self.to_out = [Linear(inner, dim, device=device)]   # (to_out.1 is a dropout)

  def __call__(self, x: Tensor, context: Optional[Tensor] = None) -> Tensor:
    ctx = x if context is None else context
    (b, n, _), s = x.shape, ctx.shape[1]
    q, k, v = (p(y).float().reshape(b, m, self.heads, -1).transpose(1, 2) for p, y, m in ((self.to_q, x, n), (self.to_k, ctx, s), (self.to_v, ctx, s)))
    return self.to_out[0](q.scaled_dot_product_attention(k, v).transpose(1, 2).reshape(b, n, -1).cast(x.dtype))

class GEGLU:
  def __init__(self, dim: int, inner: int, device=None): self.proj = Linear(dim, inner * 2, device=device)

  def __call__(self, x: Tensor) -> Tensor:
    h, gate = self.proj(x).chunk(2, dim=-1)
    return h * gate.gelu(approximate="none")

class FeedForward:
  def __init__(self, dim: int, device=None): self.net = [GEGLU(dim, dim * 4, device), None, Linear(dim * 4, dim, device=device)]   # (net.1: dropout)

  def __call__(self, x: Tensor) -> Tensor: return self.net[2](self.net[0](x))

class BasicTransformerBlock:
  """Pre-norm self-attention, cross-attention on the text (encoder_hidden_states), GEGLU feed-forward, each added back."""
  def __init__(self, dim: int, heads: int, head_dim: int, context_dim: int, device=None):
    self.norm1, self.attn1 = LayerNorm(dim, 1e-5, device=device), Attention(dim, heads, head_dim, device=device)
    self.norm2, self.attn2 = LayerNorm(dim, 1e-5, device=device), Attention(dim, heads, head_dim, context_dim, device)
    self.norm3, self.ff = LayerNorm(dim, 1e-5, device=device), FeedForward(dim, device)

  def __call__(self, x: Tensor, context: Tensor) -> Tensor:
    x = x + self.attn1(_norm32(self.norm1, x))
    x = x + self.attn2(_norm32(self.norm2, x), context)
    return x + self.ff(_norm32(self.norm3, x))

class Transformer2DModel:
  """GroupNorm (eps 1e-6), proj_in, the transformer blocks over the H*W positions, proj_out, the input added back.
  proj_in/proj_out are 1x1 convolutions, or Linear layers with use_linear_projection (the same product either way)."""
  def __init__(self, channels: int, heads: int, context_dim: int, layers: int, groups: int, linear: bool, device=None):
    head_dim = channels // heads
    inner = heads * head_dim
    self.norm = GroupNorm(groups, channels, 1e-6, device=device)
    self.proj_in = Linear(channels, inner, device=device) if linear else Conv2d(channels, inner, 1, device=device)
    self.transformer_blocks = [BasicTransformerBlock(inner, heads, head_dim, context_dim, device) for _ in range(layers)]
    self.proj_out = Linear(inner, channels, device=device) if linear else Conv2d(inner, channels, 1, device=device)

  @staticmethod
  def _dense(layer, x: Tensor) -> Tensor:   # a Linear, or a 1x1 Conv2d applied to (B, HW, C) as the same product
    return x.linear(layer.weight.reshape(layer.weight.shape[0], -1).T, layer.bias)

  def __call__(self, x: Tensor, context: Tensor) -> Tensor:
    b, c, h, w = x.shape
    y = self._dense(self.proj_in, _norm32(self.norm, x).reshape(b, c, h * w).transpose(1, 2))
    for block in self.transformer_blocks: y = block(y, context)
    return x + self._dense(self.proj_out, y).transpose(1, 2).reshape(b, c, h, w)

class Downsample2D:
  """A 3x3 stride-2 convolution (padding 0: padded by one on the right and bottom first, as diffusers does)."""
  def __init__(self, channels: int, padding: int, device=None):
    self.conv, self.padding = Conv2d(channels, channels, 3, stride=2, padding=padding, device=device), padding

  def __call__(self, x: Tensor) -> Tensor: return self.conv(x.pad((0, 1, 0, 1)) if self.padding == 0 else x)

class Upsample2D:
  """Nearest-neighbour upsampling by 2, then a 3x3 convolution. size: the output's (H, W) where the skip connection is odd
  (2x, then the last row/column cut: what torch's nearest interpolation to that size gives)."""
  def __init__(self, channels: int, device=None): self.conv = Conv2d(channels, channels, 3, padding=1, device=device)

  def __call__(self, x: Tensor, size: Optional[tuple[int, int]] = None) -> Tensor:
    n, c, h, w = x.shape
    x = x.reshape(n, c, h, 1, w, 1).expand(n, c, h, 2, w, 2).reshape(n, c, 2 * h, 2 * w)
    if size is not None and tuple(size) != (2 * h, 2 * w): x = x[:, :, :size[0], :size[1]]
    return self.conv(x)

# ---------------------------------------------------------------------------------------------------------------
# blocks

def _layer_counts(t, n: int) -> list[int]: return [t] * n if isinstance(t, int) else list(t)

class DownBlock2D:
  """ResNets (each followed by a Transformer2DModel in CrossAttnDownBlock2D), then a Downsample2D unless it is the last
  block. Returns the output and every intermediate the up blocks take as skip connections."""
  def __init__(self, kind: str, c_in: int, c_out: int, temb: int, layers: int, c: dict, i: int, last: bool, device=None):
    self.resnets = [ResnetBlock2D(c_in if j == 0 else c_out, c_out, temb, c["norm_num_groups"], c["norm_eps"], device=device) for j in range(layers)]
    counts = _layer_counts(c["transformer_layers"][i], layers)
    self.attentions = [Transformer2DModel(c_out, c["heads"][i], c["cross_dims"][i], counts[j], c["norm_num_groups"], c["use_linear_projection"], device)
                       for j in range(layers)] if kind == "CrossAttnDownBlock2D" else None
    self.downsamplers = None if last else [Downsample2D(c_out, c["downsample_padding"], device)]

  def __call__(self, x: Tensor, temb: Tensor, context: Tensor) -> tuple[Tensor, list[Tensor]]:
    skips = []
    for j, resnet in enumerate(self.resnets):
      x = resnet(x, temb)
      if self.attentions is not None: x = self.attentions[j](x, context)
      skips.append(x)
    if self.downsamplers is not None:
      x = self.downsamplers[0](x)
      skips.append(x)
    return x, skips

class UpBlock2D:
  """layers_per_block + 1 ResNets, each on the input concatenated with a skip connection (and followed by a
  Transformer2DModel in CrossAttnUpBlock2D), then an Upsample2D unless it is the last block."""
  def __init__(self, kind: str, c_in: int, c_prev: int, c_out: int, temb: int, layers: int, c: dict, i: int, last: bool, device=None):
    groups, eps = c["norm_num_groups"], c["norm_eps"]
    self.resnets = [ResnetBlock2D((c_prev if j == 0 else c_out) + (c_in if j == layers - 1 else c_out), c_out, temb, groups, eps, device=device)
                    for j in range(layers)]
    counts, heads, cross = _layer_counts(c["reverse_transformer_layers"][i], layers), c["heads"][::-1][i], c["cross_dims"][::-1][i]
    self.attentions = [Transformer2DModel(c_out, heads, cross, counts[j], groups, c["use_linear_projection"], device)
                       for j in range(layers)] if kind == "CrossAttnUpBlock2D" else None
    self.upsamplers = None if last else [Upsample2D(c_out, device)]

  def __call__(self, x: Tensor, skips: list[Tensor], temb: Tensor, context: Tensor, size=None) -> Tensor:
    for j, resnet in enumerate(self.resnets):
      x = resnet(x.cat(skips[-1 - j], dim=1), temb)
      if self.attentions is not None: x = self.attentions[j](x, context)
    return x if self.upsamplers is None else self.upsamplers[0](x, size)

class UNetMidBlock2DCrossAttn:
  def __init__(self, channels: int, temb: int, c: dict, device=None):
    groups, eps, scale = c["norm_num_groups"], c["norm_eps"], c["mid_block_scale_factor"]
    self.resnets = [ResnetBlock2D(channels, channels, temb, groups, eps, scale, device) for _ in range(2)]
    layers = _layer_counts(c["transformer_layers"][-1], 1)[0]
    self.attentions = [Transformer2DModel(channels, c["heads"][-1], c["cross_dims"][-1], layers, groups, c["use_linear_projection"], device)]

  def __call__(self, x: Tensor, temb: Tensor, context: Tensor) -> Tensor:
    return self.resnets[1](self.attentions[0](self.resnets[0](x, temb), context), temb)

# ---------------------------------------------------------------------------------------------------------------
# the model

def _as_tensor(x, device, what: str) -> Tensor:
  if isinstance(x, Tensor): return x.to(device) if x.device != device else x
  try: return Tensor(x, device=device)
  except Exception as e: raise ValueError(f"UNet2DConditionModel: {what} must be a Tensor, got {type(x).__name__} ({e})") from None

class UNet2DConditionModel:
  """diffusers' UNet2DConditionModel, from the dict of its config.json (see `unet_config` for what is refused).

  unet(sample, timestep, encoder_hidden_states, added_cond_kwargs=None) -> the predicted noise (or v), shaped like sample.
  sample: (B, in_channels, H, W); timestep: a number, a 0-d Tensor, or a Tensor of 1 or B timesteps (broadcast to the
  batch, as diffusers does); encoder_hidden_states: (B, S, cross_attention_dim); added_cond_kwargs (addition_embed_type
  "text_time", SDXL): {"text_embeds": (B, D), "time_ids": (B, k)} with D + k * addition_time_embed_dim equal to
  projection_class_embeddings_input_dim. H and W need not be multiples of 2**(down blocks - 1)."""
  def __init__(self, config: dict, device: Optional[str] = None, dtype: Optional[DType] = None, name: str = "UNet2DConditionModel"):
    self.config = c = unet_config(config, name)
    self.name = name
    ch, n = list(c["block_out_channels"]), len(c["block_out_channels"])
    temb = c["time_embedding_dim"] or ch[0] * 4
    self.conv_in = Conv2d(c["in_channels"], ch[0], c["conv_in_kernel"], padding=c["conv_in_kernel"] // 2, device=device)
    self.time_proj = Timesteps(ch[0], c["flip_sin_to_cos"], c["freq_shift"])
    self.time_embedding = TimestepEmbedding(ch[0], temb, device)
    if c["addition_embed_type"] == "text_time":
      self.add_time_proj = Timesteps(c["addition_time_embed_dim"], c["flip_sin_to_cos"], c["freq_shift"])
      self.add_embedding = TimestepEmbedding(c["projection_class_embeddings_input_dim"], temb, device)
    self.down_blocks = [DownBlock2D(kind, ch[max(i - 1, 0)], ch[i], temb, c["layers"][i], c, i, i == n - 1, device)
                        for i, kind in enumerate(c["down_block_types"])]
    self.mid_block = UNetMidBlock2DCrossAttn(ch[-1], temb, c, device) if c["mid_block_type"] else None
    rch, rlayers = ch[::-1], c["layers"][::-1]
    self.up_blocks = [UpBlock2D(kind, rch[min(i + 1, n - 1)], rch[max(i - 1, 0)], rch[i], temb, rlayers[i] + 1, c, i, i == n - 1, device)
                      for i, kind in enumerate(c["up_block_types"])]
    self.conv_norm_out = GroupNorm(c["norm_num_groups"], ch[0], c["norm_eps"], device=device)
    self.conv_out = Conv2d(ch[0], c["out_channels"], c["conv_out_kernel"], padding=c["conv_out_kernel"] // 2, device=device)
    # uninitialized parameters of dtype: a checkpoint loaded afterwards keeps that dtype
    if dtype is not None and dtype != dtypes.float32: set_parameter_dtype(self, dtype, device, name)

  @property
  def dtype(self) -> DType: return self.conv_in.weight.dtype   # (the parameters', however they were set)

  # -- loading

  @classmethod
  def from_pretrained(cls, folder: Union[str, os.PathLike], device: Optional[str] = None, dtype: Optional[DType] = None,
                      variant: Optional[str] = None) -> UNet2DConditionModel:
    """A diffusers UNet folder (save_pretrained's, or a pipeline's unet/): config.json and
    diffusion_pytorch_model[.variant].safetensors, or its sharded form (a .safetensors.index[.variant].json naming the shards)."""
    config_path = os.path.join(os.fspath(folder), "config.json")
    model = cls(read_json(config_path, "a diffusers UNet folder"), device, dtype, name=config_path)
    model.load_state_dict(load_safetensors(folder, "diffusion_pytorch_model", device, variant))
    return model

  @classmethod
  def from_single_file(cls, path: Union[str, os.PathLike], config: Union[dict, str, os.PathLike], device: Optional[str] = None,
                       dtype: Optional[DType] = None) -> UNet2DConditionModel:
    """An original (CompVis/LDM) .safetensors checkpoint, whole or its UNet alone, with the diffusers config it matches
    (a dict, or the path of a config.json such as a diffusers pipeline's unet/config.json)."""
    if not isinstance(config, dict): config = read_json(config)
    model = cls(config, device, dtype)
    model.load_state_dict(unet_state_dict_from_ldm(safe_load(os.fspath(path), device), config))
    return model

  def load_state_dict(self, state_dict: dict[str, Tensor]):
    """diffusers' tensors (strict: a StateDictError names missing, unexpected and mis-shaped keys), cast to the model's dtype."""
    load_state_dict(self, state_dict)

  # -- running

  def _timesteps(self, timestep, batch: int) -> Tensor:
    t = timestep if isinstance(timestep, Tensor) else _as_tensor([float(timestep)] if isinstance(timestep, (int, float)) else timestep,
                                                                 self.conv_in.weight.device, "timestep")
    if t.device != self.conv_in.weight.device: t = t.to(self.conv_in.weight.device)
    if t.ndim == 0: t = t.reshape(1)
    if t.ndim != 1 or t.shape[0] not in (1, batch):
      raise ValueError(f"{self.name}: timestep must be a number or a Tensor of 1 or {batch} (the batch) timesteps, got shape {t.shape}")
    return t.float().expand(batch)

  def _added_embedding(self, added_cond_kwargs, batch: int) -> Tensor:
    c, dev = self.config, self.conv_in.weight.device
    if not isinstance(added_cond_kwargs, dict) or any(k not in added_cond_kwargs for k in ("text_embeds", "time_ids")):
      raise ValueError(f"{self.name}: addition_embed_type 'text_time' needs added_cond_kwargs={{'text_embeds': ..., 'time_ids': ...}}, "
                       f"got {added_cond_kwargs if not isinstance(added_cond_kwargs, dict) else sorted(added_cond_kwargs)!r}")
    text = _as_tensor(added_cond_kwargs["text_embeds"], dev, "text_embeds")
    ids = _as_tensor(added_cond_kwargs["time_ids"], dev, "time_ids")
    if text.ndim != 2 or ids.ndim != 2 or text.shape[0] != batch or ids.shape[0] != batch or \
       text.shape[1] + ids.shape[1] * c["addition_time_embed_dim"] != c["projection_class_embeddings_input_dim"]:
      raise ValueError(f"{self.name}: text_embeds {text.shape} and time_ids {ids.shape} must be (batch {batch}, D) and (batch, k) with "
                       f"D + k * addition_time_embed_dim ({c['addition_time_embed_dim']}) = projection_class_embeddings_input_dim "
                       f"({c['projection_class_embeddings_input_dim']})")
    time_embeds = self.add_time_proj(ids.flatten()).reshape(batch, -1)
    return self.add_embedding(text.float().cat(time_embeds, dim=-1).cast(self.dtype))

  def __call__(self, sample, timestep, encoder_hidden_states, added_cond_kwargs: Optional[dict[str, Any]] = None) -> Tensor:
    c, dev = self.config, self.conv_in.weight.device
    x = _as_tensor(sample, dev, "sample")
    context = _as_tensor(encoder_hidden_states, dev, "encoder_hidden_states")
    if x.ndim != 4 or x.shape[1] != c["in_channels"] or not x.dtype.is_float:
      raise ValueError(f"{self.name}: sample must be floats of shape (batch, {c['in_channels']}, height, width), got {x.dtype} {x.shape}")
    b = x.shape[0]
    used = {d for kind, d in zip(c["down_block_types"] + c["up_block_types"], c["cross_dims"] + c["cross_dims"][::-1]) if kind.startswith("CrossAttn")}
    if c["mid_block_type"]: used.add(c["cross_dims"][-1])
    if context.ndim != 3 or context.shape[0] != b or any(d != context.shape[2] for d in used):
      raise ValueError(f"{self.name}: encoder_hidden_states must be (batch {b}, length, cross_attention_dim {c['cross_attention_dim']}), "
                       f"got {context.shape}")
    x, context = x.cast(self.dtype), context.cast(self.dtype)
    if c["center_input_sample"]: x = 2 * x - 1.0

    emb = self.time_embedding(self.time_proj(self._timesteps(timestep, b)).cast(self.dtype))
    if c["addition_embed_type"] == "text_time": emb = emb + self._added_embedding(added_cond_kwargs, b)
    elif added_cond_kwargs: raise ValueError(f"{self.name}: added_cond_kwargs given, but addition_embed_type is {c['addition_embed_type']!r}")

    x = self.conv_in(x)
    skips = [x]
    for block in self.down_blocks:
      x, out = block(x, emb, context)
      skips += out
    if self.mid_block is not None: x = self.mid_block(x, emb, context)
    for i, block in enumerate(self.up_blocks):
      mine, skips = skips[-len(block.resnets):], skips[:-len(block.resnets)]
      x = block(x, mine, emb, context, skips[-1].shape[2:] if block.upsamplers is not None else None)
    return self.conv_out(_norm32(self.conv_norm_out, x).silu())

# ---------------------------------------------------------------------------------------------------------------
# original (LDM) checkpoints

LDM_PREFIX = "model.diffusion_model."
_RESNET_RENAMES = (("in_layers.0.", "norm1."), ("in_layers.2.", "conv1."), ("out_layers.0.", "norm2."), ("out_layers.3.", "conv2."),
                   ("emb_layers.1.", "time_emb_proj."), ("skip_connection.", "conv_shortcut."))

def _resnet_name(rest: str) -> str:
  for old, new in _RESNET_RENAMES:
    if rest.startswith(old): return new + rest[len(old):]
  return rest

def ldm_unet_key(key: str, c: dict) -> Optional[str]:
  """The diffusers name of one original UNet tensor name (without the model.diffusion_model. prefix), for the config
  (as `unet_config` gives it); None for a name that has no place in that UNet."""
  layers, n = c["layers"], len(c["layers"])
  fixed = {"time_embed.0.": "time_embedding.linear_1.", "time_embed.2.": "time_embedding.linear_2.", "out.0.": "conv_norm_out.",
           "out.2.": "conv_out.", "input_blocks.0.0.": "conv_in."}
  if c["addition_embed_type"] == "text_time": fixed |= {"label_emb.0.0.": "add_embedding.linear_1.", "label_emb.0.2.": "add_embedding.linear_2."}
  for old, new in fixed.items():
    if key.startswith(old): return new + key[len(old):]
  if (m := re.fullmatch(r"input_blocks\.(\d+)\.(\d+)\.(.+)", key)):
    i, part, rest = int(m[1]) - 1, int(m[2]), m[3]
    if i < 0: return None
    for b in range(n):   # block b has layers[b] layers and a downsampler (all but the last block)
      if i < layers[b] + 1: break
      i -= layers[b] + 1
    else: return None
    if i == layers[b]: return f"down_blocks.{b}.downsamplers.0.conv.{rest[3:]}" if b < n - 1 and part == 0 and rest.startswith("op.") else None
    if part == 0: return f"down_blocks.{b}.resnets.{i}.{_resnet_name(rest)}"
    return f"down_blocks.{b}.attentions.{i}.{rest}" if part == 1 and c["down_block_types"][b].startswith("CrossAttn") else None
  if (m := re.fullmatch(r"middle_block\.([012])\.(.+)", key)) and c["mid_block_type"]:
    part, rest = int(m[1]), m[2]
    return f"mid_block.resnets.{part // 2}.{_resnet_name(rest)}" if part != 1 else f"mid_block.attentions.0.{rest}"
  if (m := re.fullmatch(r"output_blocks\.(\d+)\.(\d+)\.(.+)", key)):
    i, part, rest = int(m[1]), int(m[2]), m[3]
    for b, count in enumerate(l + 1 for l in layers[::-1]):
      if i < count: break
      i -= count
    else: return None
    attention = c["up_block_types"][b].startswith("CrossAttn")
    if part == 0: return f"up_blocks.{b}.resnets.{i}.{_resnet_name(rest)}"
    if part == 1 + attention and rest.startswith("conv.") and b < n - 1 and i == count - 1:   # the upsampler: after the attention, if any
      return f"up_blocks.{b}.upsamplers.0.{rest}"
    return f"up_blocks.{b}.attentions.{i}.{rest}" if part == 1 and attention else None
  return None

def unet_state_dict_from_ldm(state_dict: dict[str, Tensor], config: dict) -> dict[str, Tensor]:
  """An original single-file checkpoint's UNet tensors under diffusers' names (the same tensors; no reshape is needed,
  proj_in/proj_out are convolutions or linear layers in both). Keys under model.diffusion_model. are taken (a whole
  checkpoint's VAE, text encoder and schedule buffers are left out); a dict with none is taken as the UNet's alone. A
  UNet key this config has no place for raises a ValueError naming it."""
  prefixed = {k[len(LDM_PREFIX):]: v for k, v in state_dict.items() if k.startswith(LDM_PREFIX)}
  out, c = {}, unet_config(config)
  for key, v in (prefixed or state_dict).items():
    if (new := ldm_unet_key(key, c)) is None:
      raise ValueError(f"unet_state_dict_from_ldm: {LDM_PREFIX if prefixed else ''}{key} has no place in a UNet of this config")
    out[new] = v
  return out
