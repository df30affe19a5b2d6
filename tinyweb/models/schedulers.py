"""Stable Diffusion's noise schedulers: diffusers' EulerDiscreteScheduler, EulerAncestralDiscreteScheduler and
DDIMScheduler, configured from the keys of a scheduler_config.json, with diffusers' methods.

  scheduler = EulerDiscreteScheduler.from_pretrained("stable-diffusion-v1-5/scheduler")   # its scheduler_config.json
  scheduler.set_timesteps(20)
  latents = Tensor.randn(1, 4, 64, 64) * scheduler.init_noise_sigma
  for t in scheduler.timesteps:
    noise_pred = unet(scheduler.scale_model_input(latents, t), t, text_embeddings)
    latents = scheduler.step(noise_pred, t, latents).prev_sample

The schedule (betas, alphas_cumprod, sigmas, timesteps) is plain Python, computed with diffusers' float32 roundings
(torch's float32 linspace and cumprod, numpy's interp), so `timesteps` and `sigmas` are diffusers' values as Python
floats (DDIM's timesteps are ints). The sample arithmetic is in Tensors, on the sample's device: each step's scalars go
in as a small tensor, so every step runs the same kernels. `step` returns (prev_sample, pred_original_sample).
EulerDiscreteScheduler.plan(n) gives the numbers of a deterministic run of n steps, for a sampler elsewhere to take the
same steps (the diffuse page's, in TypeScript).

`from_config` takes a scheduler_config.json's dict, whatever scheduler wrote it (SD 1.5's is a PNDMScheduler's): like
diffusers' from_config, the keys this scheduler does not have are ignored; a value of one of its own keys that it does
not implement (e.g. DDIM's thresholding, Euler's use_beta_sigmas) raises a ValueError naming the key. Random noise
(DDIM with eta > 0, the ancestral sampler, Euler's s_churn) is drawn from tinyweb's generator unless given."""
from __future__ import annotations
import math, os, struct
from array import array
from typing import Any, NamedTuple, Optional, Sequence, Union
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes
from tinyweb.models.hub import read_json

def _f32(x: float) -> float: return struct.unpack("f", struct.pack("f", x))[0]
def _f32s(xs) -> list[float]: return array("f", xs).tolist()   # each rounded to float32 (Python floats back)

class SchedulerOutput(NamedTuple):
  prev_sample: Tensor
  pred_original_sample: Tensor

# ---------------------------------------------------------------------------------------------------------------
# the noise schedule, in torch's float32 as diffusers computes it

def _linspace32(start: float, end: float, n: int) -> list[float]:
  """torch.linspace(start, end, n, dtype=float32): float32 step, the first half counted from start, the rest from end."""
  start, end = _f32(start), _f32(end)
  if n == 1: return [start]
  step = _f32((end - start) / (n - 1))
  return [_f32(start + _f32(step * i)) if i < n // 2 else _f32(end - _f32(step * (n - 1 - i))) for i in range(n)]

def _cumprod32(xs: Sequence[float]) -> list[float]:
  """torch.cumprod of a float32 tensor on the CPU: accumulated in double, each output rounded to float32."""
  out, acc = [], 1.0
  for x in xs:
    acc *= x
    out.append(_f32(acc))
  return out

def _cosine_betas(n: int, max_beta: float = 0.999) -> list[float]:
  """squaredcos_cap_v2: the betas of the cosine alpha-bar schedule (Nichol & Dhariwal), capped at max_beta."""
  def alpha_bar(t: float) -> float: return math.cos((t + 0.008) / 1.008 * math.pi / 2) ** 2
  return _f32s(min(1 - alpha_bar((i + 1) / n) / alpha_bar(i / n), max_beta) for i in range(n))

def _rescale_zero_terminal_snr(betas: list[float]) -> list[float]:
  """Betas whose last alpha-bar is 0 (Lin et al., 2023, algorithm 1), in float32 steps as diffusers does."""
  root = [_f32(math.sqrt(a)) for a in _cumprod32([_f32(1 - b) for b in betas])]
  first, last = root[0], root[-1]
  scale = _f32(first / _f32(first - last))
  bar = [_f32(_f32(_f32(r - last) * scale) ** 2) for r in root]
  alphas = [bar[0]] + [_f32(bar[i] / bar[i - 1]) for i in range(1, len(bar))]
  return [_f32(1 - a) for a in alphas]

def _interp(x: float, ys: Sequence[float]) -> float:
  """numpy.interp(x, arange(len(ys)), ys), in double."""
  if x <= 0: return ys[0]
  if x >= len(ys) - 1: return ys[-1]
  j = int(math.floor(x))
  if x == j: return ys[j]
  return (ys[j + 1] - ys[j]) * (x - j) + ys[j]

def _np_round(x: float) -> float: return float(round(x))   # (half to even, as numpy's round)

def _arange(start: float, stop: float, step: float) -> list[float]:
  """numpy.arange with a float step: start + i * step, ceil((stop - start) / step) values."""
  return [start + i * step for i in range(max(math.ceil((stop - start) / step), 0))]

# ---------------------------------------------------------------------------------------------------------------
# configuration

_COMMON = {"num_train_timesteps": 1000, "beta_start": 0.0001, "beta_end": 0.02, "beta_schedule": "linear", "trained_betas": None,
           "prediction_type": "epsilon", "steps_offset": 0, "rescale_betas_zero_snr": False}
_BETA_SCHEDULES = ("linear", "scaled_linear", "squaredcos_cap_v2")

class _Config(dict):
  """The config: a dict that also reads as attributes (scheduler.config.num_train_timesteps)."""
  def __getattr__(self, k: str) -> Any:
    try: return self[k]
    except KeyError: raise AttributeError(k) from None

class _Scheduler:
  """What the three schedulers share: the config, the betas and alphas_cumprod, the timestep spacings."""
  DEFAULTS: dict[str, Any] = {}
  SUPPORTED: dict[str, tuple] = {}   # key -> the values implemented (other keys: any value of the right kind)
  PREDICTIONS: tuple[str, ...] = ("epsilon", "v_prediction")

  def __init__(self, **config):
    name = type(self).__name__
    if (unknown := sorted(set(config) - set(self.DEFAULTS))): raise TypeError(f"{name}: unknown config key {unknown[0]!r}")
    self.config = c = _Config({**self.DEFAULTS, **config})
    supported = {"beta_schedule": _BETA_SCHEDULES, "prediction_type": self.PREDICTIONS, **self.SUPPORTED}
    for key, values in supported.items():
      if c[key] not in values:
        raise ValueError(f"{name}: {key} {c[key]!r} is not supported (tinyweb implements {', '.join(map(repr, values))})")
    n = c.num_train_timesteps
    if not (isinstance(n, int) and n >= 2): raise ValueError(f"{name}: num_train_timesteps {n!r} must be an int of at least 2")
    if not isinstance(c.steps_offset, int): raise ValueError(f"{name}: steps_offset {c.steps_offset!r} must be an int")
    if c.trained_betas is not None:
      if len(c.trained_betas) != n: raise ValueError(f"{name}: trained_betas has {len(c.trained_betas)} values, not num_train_timesteps ({n})")
      betas = _f32s(c.trained_betas)
    elif c.beta_schedule == "linear": betas = _linspace32(c.beta_start, c.beta_end, n)
    elif c.beta_schedule == "scaled_linear": betas = [_f32(b * b) for b in _linspace32(c.beta_start ** 0.5, c.beta_end ** 0.5, n)]
    else: betas = _cosine_betas(n)
    if c.rescale_betas_zero_snr: betas = _rescale_zero_terminal_snr(betas)
    self.betas = betas
    self.alphas = [_f32(1 - b) for b in betas]
    self.alphas_cumprod = _cumprod32(self.alphas)
    self.num_inference_steps: Optional[int] = None

  @classmethod
  def from_config(cls, config: dict, name: Optional[str] = None):
    """From a scheduler_config.json's dict: the keys of other schedulers (and _class_name, _diffusers_version) ignored."""
    if not isinstance(config, dict):
      raise ValueError(f"{name or cls.__name__}: a scheduler config must be a JSON object, got {type(config).__name__}")
    try: return cls(**{k: v for k, v in config.items() if k in cls.DEFAULTS})
    except ValueError as e:
      if name is None: raise
      raise ValueError(f"{name}: {e}") from None

  @classmethod
  def from_pretrained(cls, folder: Union[str, os.PathLike]):
    """From a folder's scheduler_config.json (a pipeline's scheduler/ folder; a pipeline folder's scheduler/ is looked in too)."""
    folder = os.fspath(folder)
    path = os.path.join(folder, "scheduler_config.json")
    if not os.path.exists(path) and os.path.exists(sub := os.path.join(folder, "scheduler", "scheduler_config.json")): path = sub
    return cls.from_config(read_json(path, "a diffusers scheduler folder"), path)

  def _spaced_timesteps(self, n: int) -> list[float]:
    """The timesteps of timestep_spacing, as floats (diffusers' numpy arrays, before their dtype)."""
    c, name = self.config, type(self).__name__
    if not (isinstance(n, int) and 1 <= n <= c.num_train_timesteps):
      raise ValueError(f"{name}.set_timesteps: num_inference_steps must be an int from 1 to num_train_timesteps ({c.num_train_timesteps}), got {n!r}")
    if c.timestep_spacing == "linspace":
      step = (c.num_train_timesteps - 1) / (n - 1) if n > 1 else 0.0
      ts = [i * step for i in range(n - 1)] + [float(c.num_train_timesteps - 1)] if n > 1 else [0.0]
      return ts[::-1]
    if c.timestep_spacing == "leading":
      ratio = c.num_train_timesteps // n
      return [float(i * ratio + c.steps_offset) for i in range(n)][::-1]
    return [_np_round(t) - 1 for t in _arange(c.num_train_timesteps, 0, -c.num_train_timesteps / n)]   # trailing

  @staticmethod
  def _timestep(t) -> float:
    if isinstance(t, Tensor):
      if t.numel() != 1: raise ValueError(f"a timestep must be one number, got a Tensor of shape {t.shape}")
      return t.item()
    return float(t)

  @staticmethod
  def _coefficients(sample: Tensor, *values: float) -> list[Tensor]:
    """The step's scalars as one small float32 tensor on the sample's device (a constant would be a new kernel each step)."""
    k = Tensor(list(values), dtype=dtypes.float32, device=sample.device)
    return [k[i] for i in range(len(values))]

  @staticmethod
  def _check_like(name: str, what: str, t: Tensor, like: Tensor):
    if not isinstance(t, Tensor): raise TypeError(f"{name}: {what} must be a Tensor, got {type(t).__name__}")
    if tuple(t.shape) != tuple(like.shape): raise ValueError(f"{name}: {what} of shape {t.shape} must be shaped like the sample {like.shape}")

  def __len__(self) -> int: return self.config.num_train_timesteps

# ---------------------------------------------------------------------------------------------------------------
# Euler

class _SigmaScheduler(_Scheduler):
  """The Euler samplers' sigmas, init_noise_sigma, step index and scale_model_input."""
  def __init__(self, **config):
    super().__init__(**config)
    if self.config.rescale_betas_zero_snr: self.alphas_cumprod[-1] = 2.0 ** -24   # (so the last sigma is finite)
    self._train_sigmas = [_f32(math.sqrt(_f32(_f32(1 - a) / a))) for a in self.alphas_cumprod]
    self.sigmas = self._train_sigmas[::-1] + [0.0]
    self.timesteps: list[float] = [float(t) for t in range(self.config.num_train_timesteps - 1, -1, -1)]
    self._step_index: Optional[int] = None
    self._begin_index: Optional[int] = None

  @property
  def init_noise_sigma(self) -> float:
    """The standard deviation of the initial noise: the largest sigma (sqrt(sigma^2 + 1) with leading spacing)."""
    top = max(self.sigmas)
    return top if self.config.timestep_spacing in ("linspace", "trailing") else _f32(math.sqrt(_f32(_f32(top * top) + 1)))

  @property
  def step_index(self) -> Optional[int]: return self._step_index

  @property
  def begin_index(self) -> Optional[int]: return self._begin_index

  def set_begin_index(self, begin_index: int = 0): self._begin_index = begin_index

  def index_for_timestep(self, timestep) -> int:
    """The timestep's index in `timesteps` (the second, where it appears twice, as diffusers does)."""
    t = self._timestep(timestep)
    found = [i for i, s in enumerate(self.timesteps) if s == t]
    if not found: raise ValueError(f"{type(self).__name__}: timestep {t} is not one of the scheduler's timesteps")
    return found[1] if len(found) > 1 else found[0]

  def _init_step_index(self, timestep):
    if self._step_index is None: self._step_index = self.index_for_timestep(timestep) if self._begin_index is None else self._begin_index

  def _input_scale(self, index: int) -> float:
    sigma = self.sigmas[index]
    return 1 / _f32(math.sqrt(_f32(_f32(sigma * sigma) + 1)))

  def scale_model_input(self, sample: Tensor, timestep) -> Tensor:
    """The sample divided by sqrt(sigma^2 + 1): what the model takes."""
    self._init_step_index(timestep)
    (k,) = self._coefficients(sample, self._input_scale(self._step_index))
    return sample * k.cast(sample.dtype)

  def _pred_original(self, sigma: float, sigma_hat: float) -> tuple[float, float]:
    """x0 = p * sample + q * model_output: (p, q) for the prediction type."""
    if self.config.prediction_type == "epsilon": return 1.0, -sigma_hat
    if self.config.prediction_type == "v_prediction":
      s2 = _f32(_f32(sigma * sigma) + 1)
      return 1 / s2, -sigma / _f32(math.sqrt(s2))
    return 0.0, 1.0   # sample (or "original_sample", diffusers' old name)

  def _start_step(self, name: str, model_output: Tensor, timestep, sample: Tensor) -> tuple[Tensor, Tensor]:
    if not isinstance(sample, Tensor): raise TypeError(f"{name}: the sample must be a Tensor, got {type(sample).__name__}")
    self._check_like(name, "model_output", model_output, sample)
    if self.num_inference_steps is None: raise ValueError(f"{name}: call set_timesteps before step")
    if isinstance(timestep, int) and not isinstance(timestep, bool) and float(timestep) not in self.timesteps:
      raise ValueError(f"{name}: timestep {timestep} is not one of the scheduler's timesteps (pass a value of scheduler.timesteps, not its index)")
    self._init_step_index(timestep)
    if self._step_index + 1 >= len(self.sigmas): raise ValueError(f"{name}: all {self.num_inference_steps} steps are done; call set_timesteps again")
    return sample.float(), model_output.float()

  def add_noise(self, original_samples: Tensor, noise: Tensor, timestep) -> Tensor:
    """original + noise * sigma at the timestep (one for the whole batch): where img2img starts."""
    self._check_like(f"{type(self).__name__}.add_noise", "noise", noise, original_samples)
    i = self._begin_index if self._begin_index is not None else self.index_for_timestep(timestep)
    (k,) = self._coefficients(original_samples, self.sigmas[i])
    return original_samples + noise * k.cast(original_samples.dtype)

class EulerPlan(NamedTuple):
  """A deterministic Euler run's numbers, in float32 as the sample arithmetic takes them: the initial noise is multiplied
  by init_noise_sigma; step i gives the model sample * input_scales[i] at timesteps[i], then from its output takes
  x0 = sample * sample_scales[i] + output * output_scales[i] and the next sample = sample + (sample - x0) * deltas[i]."""
  init_noise_sigma: float
  timesteps: list[float]
  input_scales: list[float]
  sample_scales: list[float]
  output_scales: list[float]
  deltas: list[float]

class EulerDiscreteScheduler(_SigmaScheduler):
  """diffusers' EulerDiscreteScheduler (Karras et al.'s Euler method, algorithm 2), deterministic unless s_churn > 0.
  Implemented: linear interpolation of the sigmas, or Karras sigmas (use_karras_sigmas); final_sigmas_type zero or
  sigma_min; discrete timesteps."""
  DEFAULTS = {**_COMMON, "interpolation_type": "linear", "use_karras_sigmas": False, "use_exponential_sigmas": False, "use_beta_sigmas": False,
              "sigma_min": None, "sigma_max": None, "timestep_spacing": "linspace", "timestep_type": "discrete", "final_sigmas_type": "zero"}
  SUPPORTED = {"interpolation_type": ("linear",), "use_karras_sigmas": (False, True, None), "use_exponential_sigmas": (False, None),
               "use_beta_sigmas": (False, None), "timestep_spacing": ("linspace", "leading", "trailing"), "timestep_type": ("discrete",),
               "final_sigmas_type": ("zero", "sigma_min")}
  PREDICTIONS = ("epsilon", "v_prediction", "sample", "original_sample")

  def set_timesteps(self, num_inference_steps: int):
    c = self.config
    ts = self._spaced_timesteps(num_inference_steps)
    timesteps = _f32s(ts)
    train = self._train_sigmas
    sigmas = [_interp(t, train) for t in timesteps]   # (numpy's interp of float32 tables: doubles)
    if c.use_karras_sigmas:
      sigmas = self._karras(sigmas, num_inference_steps)
      log_sigmas = [_f32(math.log(s)) for s in train]
      timesteps = _f32s(self._sigma_to_t(s, log_sigmas) for s in sigmas)
    last = _f32(math.sqrt(_f32(_f32(1 - self.alphas_cumprod[0]) / self.alphas_cumprod[0]))) if c.final_sigmas_type == "sigma_min" else 0.0
    self.sigmas = _f32s(sigmas + [last])
    self.timesteps = timesteps
    self.num_inference_steps = num_inference_steps
    self._step_index = self._begin_index = None

  def _karras(self, sigmas: list[float], n: int) -> list[float]:
    """Karras et al.'s noise levels (rho = 7) from sigma_max to sigma_min (the config's, else the schedule's ends)."""
    lo = self.config.sigma_min if self.config.sigma_min is not None else sigmas[-1]
    hi = self.config.sigma_max if self.config.sigma_max is not None else sigmas[0]
    rho = 7.0
    lo_r, hi_r = lo ** (1 / rho), hi ** (1 / rho)
    ramp = [i / (n - 1) for i in range(n - 1)] + [1.0] if n > 1 else [0.0]
    return [(hi_r + r * (lo_r - hi_r)) ** rho for r in ramp]

  @staticmethod
  def _sigma_to_t(sigma: float, log_sigmas: list[float]) -> float:
    """The (fractional) timestep of a sigma: log-sigma interpolated between the training schedule's."""
    log_sigma = math.log(max(sigma, 1e-10))
    low = max((i for i, ls in enumerate(log_sigmas) if log_sigma - ls >= 0), default=0)
    low = min(low, len(log_sigmas) - 2)
    a, b = log_sigmas[low], log_sigmas[low + 1]
    w = min(max((a - log_sigma) / _f32(a - b), 0.0), 1.0)
    return (1 - w) * low + w * (low + 1)

  def step(self, model_output: Tensor, timestep, sample: Tensor, s_churn: float = 0.0, s_tmin: float = 0.0, s_tmax: float = float("inf"),
           s_noise: float = 1.0, noise: Optional[Tensor] = None) -> SchedulerOutput:
    """One Euler step from the model's output at `timestep` (a value of `timesteps`). With s_churn > 0, noise is added
    first (Karras' churn: `noise` if given, else a draw of tinyweb's generator)."""
    name = "EulerDiscreteScheduler.step"
    x, m = self._start_step(name, model_output, timestep, sample)
    sigma, following = self.sigmas[self._step_index], self.sigmas[self._step_index + 1]
    gamma = min(s_churn / (len(self.sigmas) - 1), 2 ** 0.5 - 1) if s_tmin <= sigma <= s_tmax else 0.0
    sigma_hat = _f32(sigma * (gamma + 1))
    if gamma > 0:
      if noise is None: noise = Tensor.randn(*x.shape, device=x.device)
      self._check_like(name, "noise", noise, sample)
      (k,) = self._coefficients(x, s_noise * math.sqrt(sigma_hat ** 2 - sigma ** 2))
      x = x + noise.float() * k
    kp, kq, kd = self._coefficients(x, *self._euler_scales(sigma, sigma_hat, following))
    x0 = x * kp + m * kq
    prev = x + (x - x0) * kd
    self._step_index += 1
    return SchedulerOutput(prev.cast(model_output.dtype), x0)

  def _euler_scales(self, sigma: float, sigma_hat: float, following: float) -> tuple[float, float, float]:
    """(p, q, d) of a step: x0 = sample * p + model_output * q, then the next sample is sample + (sample - x0) * d."""
    return *self._pred_original(sigma, sigma_hat), (following - sigma_hat) / sigma_hat

  def plan(self, num_inference_steps: int) -> EulerPlan:
    """The numbers of a run of num_inference_steps deterministic steps (no churn), for a sampler elsewhere (the diffuse
    page's, web/sd_sampler.ts) to take the same steps: set_timesteps, then each step's values as scale_model_input and
    step use them."""
    self.set_timesteps(num_inference_steps)
    steps = range(num_inference_steps)
    scales = [self._euler_scales(self.sigmas[i], self.sigmas[i], self.sigmas[i + 1]) for i in steps]
    return EulerPlan(_f32(self.init_noise_sigma), list(self.timesteps), _f32s(self._input_scale(i) for i in steps),
                     *(_f32s(column) for column in zip(*scales)))

class EulerAncestralDiscreteScheduler(_SigmaScheduler):
  """diffusers' EulerAncestralDiscreteScheduler: an Euler step down to sigma_down, then fresh noise of sigma_up."""
  DEFAULTS = {**_COMMON, "timestep_spacing": "linspace"}
  SUPPORTED = {"timestep_spacing": ("linspace", "leading", "trailing")}

  def set_timesteps(self, num_inference_steps: int):
    timesteps = _f32s(self._spaced_timesteps(num_inference_steps))
    self.sigmas = _f32s([_interp(t, self._train_sigmas) for t in timesteps] + [0.0])
    self.timesteps = timesteps
    self.num_inference_steps = num_inference_steps
    self._step_index = self._begin_index = None

  def step(self, model_output: Tensor, timestep, sample: Tensor, noise: Optional[Tensor] = None) -> SchedulerOutput:
    """One step; noise: the step's standard normal noise (else a draw of tinyweb's generator)."""
    name = "EulerAncestralDiscreteScheduler.step"
    x, m = self._start_step(name, model_output, timestep, sample)
    sigma, following = self.sigmas[self._step_index], self.sigmas[self._step_index + 1]
    up = math.sqrt(following ** 2 * (sigma ** 2 - following ** 2) / sigma ** 2)
    down = math.sqrt(following ** 2 - up ** 2)
    if noise is None: noise = Tensor.randn(*x.shape, device=x.device)
    self._check_like(name, "noise", noise, sample)
    p, q = self._pred_original(sigma, sigma)
    kp, kq, kd, ku = self._coefficients(x, p, q, (down - sigma) / sigma, up)
    x0 = x * kp + m * kq
    prev = x + (x - x0) * kd + noise.float() * ku
    self._step_index += 1
    return SchedulerOutput(prev.cast(model_output.dtype), x0)

# ---------------------------------------------------------------------------------------------------------------
# DDIM

class DDIMScheduler(_Scheduler):
  """diffusers' DDIMScheduler (Song et al.): deterministic with eta = 0, eta * the DDPM variance of noise otherwise.
  clip_sample clamps the predicted original sample to +-clip_sample_range; thresholding is not implemented."""
  DEFAULTS = {**_COMMON, "clip_sample": True, "set_alpha_to_one": True, "thresholding": False, "dynamic_thresholding_ratio": 0.995,
              "clip_sample_range": 1.0, "sample_max_value": 1.0, "timestep_spacing": "leading"}
  SUPPORTED = {"thresholding": (False,), "timestep_spacing": ("leading", "trailing", "linspace"), "clip_sample": (False, True),
               "set_alpha_to_one": (False, True)}
  PREDICTIONS = ("epsilon", "v_prediction", "sample")

  def __init__(self, **config):
    super().__init__(**config)
    if not isinstance(self.config.clip_sample_range, (int, float)) or self.config.clip_sample_range <= 0:
      raise ValueError(f"DDIMScheduler: clip_sample_range {self.config.clip_sample_range!r} must be a positive number")
    self.final_alpha_cumprod = 1.0 if self.config.set_alpha_to_one else self.alphas_cumprod[0]
    self.init_noise_sigma = 1.0
    self.timesteps: list[int] = list(range(self.config.num_train_timesteps - 1, -1, -1))

  def set_timesteps(self, num_inference_steps: int):
    c = self.config
    ts = self._spaced_timesteps(num_inference_steps)
    self.timesteps = [int(_np_round(t)) for t in ts] if c.timestep_spacing == "linspace" else [int(t) for t in ts]
    self.num_inference_steps = num_inference_steps

  def scale_model_input(self, sample: Tensor, timestep=None) -> Tensor: return sample

  def _alpha_prev(self, prev_t: int) -> float: return self.alphas_cumprod[prev_t] if prev_t >= 0 else self.final_alpha_cumprod

  def step(self, model_output: Tensor, timestep, sample: Tensor, eta: float = 0.0, use_clipped_model_output: bool = False,
           variance_noise: Optional[Tensor] = None) -> SchedulerOutput:
    """One DDIM step from `timestep` to the one num_train_timesteps // num_inference_steps before it (diffusers' rule,
    whatever the spacing). variance_noise: the standard normal noise of eta > 0 (else a draw of tinyweb's generator)."""
    name = "DDIMScheduler.step"
    if not isinstance(sample, Tensor): raise TypeError(f"{name}: the sample must be a Tensor, got {type(sample).__name__}")
    self._check_like(name, "model_output", model_output, sample)
    if self.num_inference_steps is None: raise ValueError(f"{name}: call set_timesteps before step")
    t = self._timestep(timestep)
    if t != int(t) or not 0 <= t < self.config.num_train_timesteps:
      raise ValueError(f"{name}: timestep {t} is not an int from 0 to num_train_timesteps - 1 ({self.config.num_train_timesteps - 1})")
    t = int(t)
    prev_t = t - self.config.num_train_timesteps // self.num_inference_steps
    a, a_prev = self.alphas_cumprod[t], self._alpha_prev(prev_t)
    b = _f32(1 - a)
    ra, rb = _f32(math.sqrt(a)), _f32(math.sqrt(b))
    # x0 = p * sample + q * output, eps = r * sample + u * output
    kind = self.config.prediction_type
    p, q, r, u = (1 / ra, -rb / ra, 0.0, 1.0) if kind == "epsilon" else (0.0, 1.0, 1 / rb, -ra / rb) if kind == "sample" else (ra, -rb, rb, ra)
    variance = (_f32(1 - a_prev) / b) * (1 - a / a_prev)
    std = eta * math.sqrt(variance)
    direction = math.sqrt(max(1 - a_prev - std ** 2, 0.0))
    x, m = sample.float(), model_output.float()
    kp, kq, kr, ku, ka, kdir, kstd, kx, kx0 = self._coefficients(x, p, q, r, u, math.sqrt(a_prev), direction, std, 1 / rb, -ra / rb)
    x0 = x * kp + m * kq
    eps = x * kr + m * ku
    if self.config.clip_sample: x0 = x0.clamp(-self.config.clip_sample_range, self.config.clip_sample_range)
    if use_clipped_model_output: eps = x * kx + x0 * kx0   # (the noise that gives the clipped x0)
    prev = x0 * ka + eps * kdir
    if eta > 0:
      if variance_noise is None: variance_noise = Tensor.randn(*x.shape, device=x.device)
      self._check_like(name, "variance_noise", variance_noise, sample)
      prev = prev + variance_noise.float() * kstd
    return SchedulerOutput(prev.cast(model_output.dtype), x0)

  def add_noise(self, original_samples: Tensor, noise: Tensor, timestep) -> Tensor:
    """sqrt(alpha_bar) * original + sqrt(1 - alpha_bar) * noise at the timestep (one for the whole batch)."""
    self._check_like("DDIMScheduler.add_noise", "noise", noise, original_samples)
    a = self.alphas_cumprod[int(self._timestep(timestep))]
    ka, kb = self._coefficients(original_samples, math.sqrt(a), math.sqrt(_f32(1 - a)))
    return original_samples * ka.cast(original_samples.dtype) + noise * kb.cast(original_samples.dtype)
