"""Layers, tinygrad style: plain classes whose Tensor attributes are the parameters, called as `layer(x)`.

Parameters are named like PyTorch's (`weight`, `bias`, `running_mean`, `weight_ih`, ...) so `tinyweb.nn.state`
state dicts use torch's keys, and are initialized from the same distributions as torch's defaults. Every layer takes
an optional `device`. Parameters are created with requires_grad=True, buffers (running statistics) without.

The optimizers are in `tinyweb.nn.optim`, state dicts and checkpoints in `tinyweb.nn.state`, datasets in
`tinyweb.nn.datasets`: all three are attributes of this module, as in tinygrad (`nn.state.get_parameters(model)`)."""
from __future__ import annotations
import math
from typing import Optional, Sequence, Union
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes
from tinyweb.helpers import prod
from tinyweb.nn.optim import _realize_later   # (BatchNorm's running statistics, realized by the next step)

# ---------------------------------------------------------------------------------------------------------------
# helpers

def _uniform(shape: tuple[int, ...], bound: float, device) -> Tensor:
  """U(-bound, bound): what torch's kaiming_uniform_(a=sqrt(5)) gives for bound = 1/sqrt(fan_in), and its bias init."""
  return Tensor.uniform(*shape, low=-bound, high=bound, device=device, requires_grad=True)

def _ntuple(v, n: int, name: str) -> tuple[int, ...]:
  t = (v,) * n if isinstance(v, int) else tuple(v)
  if len(t) != n: raise ValueError(f"{name} must be an int or {n} ints, got {v!r}")
  return t

def _per_channel(t: Tensor, ndim: int) -> Tensor: return t.reshape(1, -1, *(1,) * (ndim - 2))

# ---------------------------------------------------------------------------------------------------------------
# linear and convolutions

class Linear:
  """y = x @ weight.T + bias with weight (out_features, in_features), like torch.nn.Linear."""
  def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None):
    bound = 1 / math.sqrt(in_features)
    self.weight = _uniform((out_features, in_features), bound, device)
    self.bias = _uniform((out_features,), bound, device) if bias else None

  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.weight.T, self.bias)

_PAD_MODES = {"zeros": None, "reflect": "reflect", "replicate": "replicate", "circular": "circular"}

class Conv2d:
  """Convolution over the last len(kernel_size) dims (2 for Conv2d, 1 for Conv1d): weight (out, in/groups, *kernel).
  padding: int, one int per spatial dim, 'valid' or 'same' (stride 1); padding_mode: zeros, reflect, replicate, circular."""
  ndim = 2
  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1, groups: int = 1,
               bias: bool = True, padding_mode: str = "zeros", device=None):
    n = self.ndim
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"{type(self).__name__}: in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by groups ({groups})")
    if padding_mode not in _PAD_MODES: raise ValueError(f"{type(self).__name__}: padding_mode must be one of {list(_PAD_MODES)}, got {padding_mode!r}")
    if isinstance(padding, str) and padding not in ("same", "valid"): raise ValueError(f"padding must be 'same', 'valid' or ints, got {padding!r}")
    self.kernel_size = _ntuple(kernel_size, n, "kernel_size")
    self.stride, self.dilation = _ntuple(stride, n, "stride"), _ntuple(dilation, n, "dilation")
    self.padding = padding if isinstance(padding, str) else _ntuple(padding, n, "padding")
    if self.padding == "same" and any(s != 1 for s in self.stride): raise ValueError("padding='same' needs stride 1")
    self.groups, self.padding_mode = groups, padding_mode
    bound = 1 / math.sqrt(in_channels // groups * prod(self.kernel_size))
    self.weight = _uniform((out_channels, in_channels // groups, *self.kernel_size), bound, device)
    self.bias = _uniform((out_channels,), bound, device) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    padding = self.padding
    if self.padding_mode != "zeros" and padding != "valid":   # pad explicitly, then convolve without padding
      if padding == "same": pairs = [(d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(self.kernel_size, self.dilation)]
      else: pairs = [(p, p) for p in padding]
      x, padding = x.pad((None,) * (x.ndim - self.ndim) + tuple(pairs), mode=_PAD_MODES[self.padding_mode]), 0
    return x.conv2d(self.weight, self.bias, self.groups, self.stride, self.dilation, padding)

class Conv1d(Conv2d):
  ndim = 1

class ConvTranspose2d:
  """Transposed convolution, like torch.nn.ConvTranspose2d: weight (in, out/groups, *kernel)."""
  ndim = 2
  def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0, groups: int = 1,
               bias: bool = True, dilation=1, device=None):
    n = self.ndim
    if in_channels % groups or out_channels % groups:
      raise ValueError(f"{type(self).__name__}: in_channels ({in_channels}) and out_channels ({out_channels}) must be divisible by groups ({groups})")
    self.kernel_size = _ntuple(kernel_size, n, "kernel_size")
    self.stride, self.padding = _ntuple(stride, n, "stride"), _ntuple(padding, n, "padding")
    self.output_padding, self.dilation = _ntuple(output_padding, n, "output_padding"), _ntuple(dilation, n, "dilation")
    self.groups = groups
    # torch computes fan_in from the weight's dim 1, which for a transposed conv is out_channels // groups
    bound = 1 / math.sqrt(out_channels // groups * prod(self.kernel_size))
    self.weight = _uniform((in_channels, out_channels // groups, *self.kernel_size), bound, device)
    self.bias = _uniform((out_channels,), bound, device) if bias else None

  def __call__(self, x: Tensor) -> Tensor:
    return x.conv_transpose2d(self.weight, self.bias, self.groups, self.stride, self.dilation, self.padding, self.output_padding)

class ConvTranspose1d(ConvTranspose2d):
  ndim = 1

# ---------------------------------------------------------------------------------------------------------------
# normalization

class BatchNorm:
  """Batch normalization over every dim but dim 1 (channels), for (N, C) and (N, C, *spatial) inputs.

  Training (`Tensor.training`): normalizes with the batch statistics (biased variance) and updates running_mean and
  running_var (unbiased variance, like torch) and num_batches_tracked. momentum=None: a cumulative average. The new
  running statistics are lazy assigns; the next optimizer step realizes them in its schedule (reading them does too).
  Evaluation: normalizes with the running statistics (with track_running_stats=False: always the batch statistics)."""
  def __init__(self, sz: int, eps: float = 1e-5, affine: bool = True, track_running_stats: bool = True,
               momentum: Optional[float] = 0.1, device=None):
    self.eps, self.momentum, self.track_running_stats = eps, momentum, track_running_stats
    self.weight = Tensor.ones(sz, device=device, requires_grad=True) if affine else None
    self.bias = Tensor.zeros(sz, device=device, requires_grad=True) if affine else None
    # clone(): each buffer gets storage of its own (equal constants are one value, and would share one buffer)
    # (buffers, not parameters: requires_grad=False keeps optimizers away from them)
    self.running_mean = Tensor.zeros(sz, device=device).clone().requires_grad_(False) if track_running_stats else None
    self.running_var = Tensor.ones(sz, device=device).clone().requires_grad_(False) if track_running_stats else None
    self.num_batches_tracked = Tensor(0, dtype=dtypes.int32, device=device).clone().requires_grad_(False) if track_running_stats else None

  def calc_stats(self, x: Tensor) -> tuple[Tensor, Tensor]:
    """Batch mean and biased variance per channel."""
    axes = tuple(i for i in range(x.ndim) if i != 1)
    mean = x.mean(axes)
    return mean, (x - _per_channel(mean, x.ndim)).square().mean(axes)

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2: raise ValueError(f"{type(self).__name__}: input must be (N, C) or (N, C, *spatial), got {x.shape}")
    if not Tensor.training and self.track_running_stats:
      return x.batchnorm(self.weight, self.bias, self.running_mean, (self.running_var + self.eps).rsqrt())
    mean, var = self.calc_stats(x)
    if Tensor.training and self.track_running_stats:
      n = x.numel() // x.shape[1]
      if n < 2: raise ValueError(f"{type(self).__name__}: training needs more than 1 value per channel, got input {x.shape}")
      with Tensor.no_grad():
        # new values are computed from values, never from a pending assign, so each assign is computed once
        nbt = self.num_batches_tracked + 1
        m = self.momentum if self.momentum is not None else 1 / nbt.cast(self.running_mean.dtype)
        self.num_batches_tracked.assign(nbt)
        self.running_mean.assign((1 - m) * self.running_mean + m * mean.detach())
        self.running_var.assign((1 - m) * self.running_var + m * (n / (n - 1)) * var.detach())
      _realize_later(self.running_mean, self.running_var, self.num_batches_tracked)
    return x.batchnorm(self.weight, self.bias, mean, (var + self.eps).rsqrt())

BatchNorm1d = BatchNorm2d = BatchNorm3d = BatchNorm

def _check_trailing(layer, x: Tensor, shape: tuple[int, ...]):
  if tuple(x.shape[x.ndim - len(shape):]) != shape or x.ndim < len(shape):
    raise ValueError(f"{type(layer).__name__}: input {x.shape} must end with the normalized shape {shape}")

class LayerNorm:
  """Normalizes over the last len(normalized_shape) dims; weight and bias have normalized_shape."""
  def __init__(self, normalized_shape: Union[int, Sequence[int]], eps: float = 1e-5, elementwise_affine: bool = True,
               bias: bool = True, device=None):
    self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    self.eps = eps
    self.weight = Tensor.ones(*self.normalized_shape, device=device, requires_grad=True) if elementwise_affine else None
    self.bias = Tensor.zeros(*self.normalized_shape, device=device, requires_grad=True) if elementwise_affine and bias else None

  def __call__(self, x: Tensor) -> Tensor:
    _check_trailing(self, x, self.normalized_shape)
    y = x.layernorm(tuple(range(-len(self.normalized_shape), 0)), self.eps)
    if self.weight is not None: y = y * self.weight
    return y if self.bias is None else y + self.bias

class LayerNorm2d(LayerNorm):
  """LayerNorm over the channels of (N, C, H, W) inputs, at each position (tinygrad's; normalized_shape is C)."""
  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim != 4: raise ValueError(f"LayerNorm2d: input must be (N, C, H, W), got {x.shape}")
    return super().__call__(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

class RMSNorm:
  """x / sqrt(mean(x^2) + eps) * weight over the last len(dim) dims (torch.nn.RMSNorm; its eps default is the dtype's
  machine epsilon, here 1e-6 like tinygrad)."""
  def __init__(self, dim: Union[int, Sequence[int]], eps: float = 1e-6, elementwise_affine: bool = True, device=None):
    self.normalized_shape = (dim,) if isinstance(dim, int) else tuple(dim)
    self.eps = eps
    self.weight = Tensor.ones(*self.normalized_shape, device=device, requires_grad=True) if elementwise_affine else None

  def __call__(self, x: Tensor) -> Tensor:
    _check_trailing(self, x, self.normalized_shape)
    y = x.rmsnorm(tuple(range(-len(self.normalized_shape), 0)), self.eps)
    return y if self.weight is None else y * self.weight

class GroupNorm:
  """Splits the C channels of (N, C, *) into num_groups groups and normalizes each group of each sample; per-channel affine."""
  def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None):
    if num_channels % num_groups: raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by num_groups ({num_groups})")
    self.num_groups, self.num_channels, self.eps = num_groups, num_channels, eps
    self.weight = Tensor.ones(num_channels, device=device, requires_grad=True) if affine else None
    self.bias = Tensor.zeros(num_channels, device=device, requires_grad=True) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 2 or x.shape[1] != self.num_channels:
      raise ValueError(f"GroupNorm: input must be (N, {self.num_channels}, *), got {x.shape}")
    y = x.reshape(x.shape[0], self.num_groups, -1).layernorm(-1, self.eps).reshape(x.shape)
    if self.weight is None: return y
    return y * _per_channel(self.weight, x.ndim) + _per_channel(self.bias, x.ndim)

class InstanceNorm:
  """Normalizes each channel of each sample of (N, C, *spatial) over its spatial dims (no running statistics)."""
  def __init__(self, num_features: int, eps: float = 1e-5, affine: bool = False, device=None):
    self.num_features, self.eps = num_features, eps
    self.weight = Tensor.ones(num_features, device=device, requires_grad=True) if affine else None
    self.bias = Tensor.zeros(num_features, device=device, requires_grad=True) if affine else None

  def __call__(self, x: Tensor) -> Tensor:
    if x.ndim < 3 or x.shape[1] != self.num_features:
      raise ValueError(f"InstanceNorm: input must be (N, {self.num_features}, *spatial), got {x.shape}")
    y = x.reshape(x.shape[0], x.shape[1], -1).layernorm(-1, self.eps).reshape(x.shape)
    if self.weight is None: return y
    return y * _per_channel(self.weight, x.ndim) + _per_channel(self.bias, x.ndim)

InstanceNorm1d = InstanceNorm2d = InstanceNorm3d = InstanceNorm

# ---------------------------------------------------------------------------------------------------------------
# embedding and recurrent cells

class Embedding:
  """weight[idx] for integer idx of any shape, weight (vocab_size, embed_size) ~ N(0, 1). The lookup is a sum over
  one-hot positions, which the code generator turns into a read of the selected rows (codegen/lowering.select_reduce);
  its gradient w.r.t. the weight adds each position's gradient into its row. Indices outside [0, vocab_size) give zero
  vectors."""
  def __init__(self, vocab_size: int, embed_size: int, device=None):
    self.vocab_size, self.embed_size = vocab_size, embed_size
    self.weight = Tensor.randn(vocab_size, embed_size, device=device, requires_grad=True)

  def __call__(self, idx: Tensor) -> Tensor:
    if not isinstance(idx, Tensor) or idx.dtype.is_float:
      raise TypeError(f"Embedding: indices must be an integer Tensor, got {getattr(idx, 'dtype', type(idx).__name__)}")
    onehot = (idx.unsqueeze(-1) == Tensor.arange(self.vocab_size, device=self.weight.device)).unsqueeze(-1)
    return onehot.where(self.weight, 0).sum(-2)

class LSTMCell:
  """One LSTM step, like torch.nn.LSTMCell: `h, c = cell(x, (h, c))` (zeros when hc is None). Gates i, f, g, o."""
  def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None):
    self.input_size, self.hidden_size = input_size, hidden_size
    bound = 1 / math.sqrt(hidden_size)
    self.weight_ih = _uniform((4 * hidden_size, input_size), bound, device)
    self.weight_hh = _uniform((4 * hidden_size, hidden_size), bound, device)
    self.bias_ih = _uniform((4 * hidden_size,), bound, device) if bias else None
    self.bias_hh = _uniform((4 * hidden_size,), bound, device) if bias else None

  def __call__(self, x: Tensor, hc: Optional[tuple[Tensor, Tensor]] = None) -> tuple[Tensor, Tensor]:
    if x.shape[-1] != self.input_size: raise ValueError(f"LSTMCell: input {x.shape} must end with input_size {self.input_size}")
    if hc is None:
      z = Tensor.zeros(*x.shape[:-1], self.hidden_size, dtype=x.dtype, device=x.device)
      hc = (z, z)
    h, c = hc
    gates = x.linear(self.weight_ih.T, self.bias_ih) + h.linear(self.weight_hh.T, self.bias_hh)
    i, f, g, o = gates.chunk(4, dim=-1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c

from tinyweb.nn import optim, state, datasets  # noqa: E402  (they need Tensor, not the layers)

__all__ = ["Linear", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d", "BatchNorm", "BatchNorm1d", "BatchNorm2d",
           "BatchNorm3d", "LayerNorm", "LayerNorm2d", "RMSNorm", "GroupNorm", "InstanceNorm", "InstanceNorm1d", "InstanceNorm2d",
           "InstanceNorm3d", "Embedding", "LSTMCell", "optim", "state", "datasets"]
