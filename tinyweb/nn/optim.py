"""Optimizers (SGD, Adam, AdamW, LAMB, LARS, Muon, OptimizerGroup) and learning-rate schedules (StepLR, CosineAnnealingLR,
OneCycleLR), with tinygrad's signatures.

SGD, Adam and AdamW follow torch.optim's formulas; LAMB, LARS and Muon their papers', as tinygrad writes them. Everything an optimizer keeps is a Tensor attribute (lr, step count t,
momentum buffers b, moments m and v), so `tinyweb.nn.state.get_state_dict(opt)` saves and loads it, and a step is
pure tensor work: `step()` builds the new values of the parameters and the state as lazy assigns and realizes them,
together with the gradients they were computed from, in one `Tensor.realize_all` (one schedule). New values are
computed from the old buffers (never from another tensor's pending assign), so each assign stands alone.

The learning rate lives in a realized 0-d tensor that the kernels read, so a schedule changes it with `assign` and the
compiled kernels are reused. Bias corrections are computed from the step tensor on the device for the same reason.

Lazy values read buffers when they are computed: realize anything computed from the old parameters (e.g. the loss)
before or with the step: `Tensor.realize_all(loss, *opt.schedule_step())`."""
from __future__ import annotations
import math, weakref
from typing import Any, Iterable, Optional
from tinyweb.tensor import Tensor
from tinyweb.device import Device

# Tensors assigned lazily by a layer (BatchNorm's running statistics) that the next optimizer step realizes in its own
# schedule. They must be computed before the step writes the parameters they were computed from: a lazy value reads
# whatever a buffer holds when it is finally computed.
_pending: list[weakref.ref] = []

def _realize_later(*ts: Tensor):
  _pending.extend(weakref.ref(t) for t in ts)

def _take_pending() -> list[Tensor]:
  out = [t for r in _pending if (t := r()) is not None]
  _pending.clear()
  return out

class Optimizer:
  """The parameters are the tensors of `params` that can be trained (float, requires_grad not False; requires_grad None
  becomes True); the others (BatchNorm's running statistics) are `buffers`, realized with every step. device: where
  the optimizer keeps its state (learning rate, step count, moments); by default each parameter's state is on the
  parameter's device (and the learning rate on the first one's). A parameter elsewhere gets its gradient moved to the
  state's device and its update moved back. fused: tinygrad's flag to update all parameters as one concatenated
  tensor; accepted, and the result is the same here (each parameter's update is scheduled on its own)."""
  def __init__(self, params: Iterable[Tensor], lr: float, device: Optional[str] = None, fused: bool = False):
    unique: dict[int, Tensor] = {}
    buffers: dict[int, Tensor] = {}
    for p in params:
      if not isinstance(p, Tensor): raise TypeError(f"{type(self).__name__}: params must be Tensors, got {type(p).__name__}")
      if p.requires_grad is False or not p.dtype.is_float: buffers.setdefault(id(p), p); continue   # not trained, but realized
      if p.requires_grad is None: p.requires_grad_(True)
      unique.setdefault(id(p), p)
    self.params: list[Tensor] = list(unique.values())
    self.buffers: list[Tensor] = list(buffers.values())
    if not self.params: raise ValueError(f"{type(self).__name__}: got no parameters that require gradients")
    if lr < 0: raise ValueError(f"{type(self).__name__}: invalid learning rate {lr}")
    self.state_device = Device.canonicalize(device) if device is not None else None
    self.device = self.state_device or self.params[0].device
    self.fused = fused
    self.lr = Tensor([float(lr)], device=self.device).reshape(())   # a realized buffer, written by schedulers
    self.initial_lr = float(lr)   # what a schedule starts from (torch: param_group['initial_lr'])

  def _dev(self, p: Tensor) -> str: return self.state_device or p.device

  def _zeros_like_params(self) -> list[Tensor]:
    return [Tensor.zeros(*p.shape, dtype=p.dtype, device=self._dev(p)).clone() for p in self.params]   # clone: storage of its own

  def _state(self) -> list[Tensor]:
    """Every Tensor held by the optimizer (lr, step count, buffers), params first."""
    out: dict[int, Tensor] = {id(p): p for p in self.params}
    for v in vars(self).values():
      for t in (v if isinstance(v, (list, tuple)) else [v]):
        if isinstance(t, Tensor): out.setdefault(id(t), t)
    return list(out.values())

  def _realize_state(self): Tensor.realize_all(*self._state())

  def zero_grad(self):
    """Forget the parameters' gradients (set them to None)."""
    for p in self.params: p.grad = None

  def schedule_step(self) -> list[Tensor]:
    """Assign the new values (lazily) and return the tensors to realize: params, their gradients, the optimizer's state,
    its buffers and lazily updated layer buffers (BatchNorm running statistics). Params without a gradient are left as they are."""
    todo = [(i, p, p.grad) for i, p in enumerate(self.params) if p.grad is not None]
    with Tensor.no_grad():
      shared = self._begin_step() if todo else None
      for i, p, g in todo:
        dev = self._dev(p)
        new = self._new_value(i, _on(p, dev), _on(g, dev), _on(self.lr, dev), shared)
        p.assign(_on(new, p.device))
    return [*self._state(), *[g for _, _, g in todo], *_take_pending()]

  def step(self) -> None:
    """Update the parameters from their gradients (one schedule: see schedule_step)."""
    Tensor.realize_all(*self.schedule_step())

  def _begin_step(self) -> Any: return None   # what all parameters' updates share (Adam: the bias corrections)
  def _new_value(self, i: int, p: Tensor, g: Tensor, lr: Tensor, shared: Any) -> Tensor:
    """The i-th parameter's new value from its value p and gradient g, all on its state's device."""
    raise NotImplementedError

def _on(t: Tensor, device: str) -> Tensor: return t if t.device == device else t.to(device)

class OptimizerGroup(Optimizer):
  """Several optimizers stepped as one (e.g. Muon for the matrices, Adam for the rest): one schedule for all."""
  def __init__(self, *optimizers: Optimizer):   # (no Optimizer.__init__: the members hold the parameters and state)
    self.optimizers = optimizers
    self.params = [p for o in optimizers for p in o.params]
    self.buffers = [b for o in optimizers for b in o.buffers]
  def __getitem__(self, i: int) -> Optimizer: return self.optimizers[i]
  def zero_grad(self):
    for o in self.optimizers: o.zero_grad()
  def schedule_step(self) -> list[Tensor]: return [t for o in self.optimizers for t in o.schedule_step()]

def _newton_schulz(g: Tensor, steps: int, coefficients: tuple[float, ...], eps: float = 1e-7) -> Tensor:
  """Muon's orthogonalization of a matrix: G = g / (|g| + eps), then `steps` times G = sum_k c_k (G G^T)^k G (on the
  transpose when g has more rows than columns)."""
  if g.shape[-2] > g.shape[-1]: return _newton_schulz(g.transpose(-2, -1), steps, coefficients, eps).transpose(-2, -1)
  x = g / (g.square().sum(axis=(-2, -1), keepdim=True).sqrt() + eps)
  for _ in range(steps):
    term, out, gram = x, None, x @ x.transpose(-2, -1)
    for k, c in enumerate(coefficients):
      if k: term = gram @ term
      out = c * term if out is None else out + c * term
    x = out
  return x

class LARS(Optimizer):
  """LARS (You et al. 2017), tinygrad's formulation, which SGD and Muon are cases of. Per parameter, with the trust ratio
  r = tcoef * |p| / (|g| + weight_decay * |p|) (1 if either norm is 0; r = 1 when tcoef is 0):
  pre_wd: g += weight_decay * p; classic: g *= r * lr before the momentum, else after it; momentum:
  b = momentum * b + g, g = g + momentum * b (nesterov) or b; ns_coefficients: g = Newton-Schulz(g as a matrix, ns_steps);
  not pre_wd: g += weight_decay * lr * p after everything; then p -= g."""
  def __init__(self, params, lr=0.001, momentum=0.9, weight_decay=1e-4, ns_steps=0, ns_coefficients=None, nesterov=False,
               classic=True, pre_wd=True, tcoef=0.001, device=None, fused=False):
    super().__init__(params, lr, device, fused)
    if momentum < 0 or weight_decay < 0: raise ValueError(f"{type(self).__name__}: invalid momentum {momentum} or weight_decay {weight_decay}")
    self.momentum, self.weight_decay, self.ns_steps, self.ns_coefficients = momentum, weight_decay, ns_steps, ns_coefficients
    self.nesterov, self.classic, self.pre_wd, self.tcoef = nesterov, classic, pre_wd, tcoef
    self.b = self._zeros_like_params() if momentum else []   # zeros: momentum * 0 + g is the first step's g
    self._realize_state()

  def _new_value(self, i, p, g, lr, shared):
    r: Tensor | float = 1.0
    if self.tcoef:
      pn, gn = p.square().sum().sqrt(), g.square().sum().sqrt()
      r = ((pn > 0) & (gn > 0)).where(self.tcoef * pn / (gn + self.weight_decay * pn), 1.0)
    scale = lr if isinstance(r, float) else r * lr
    if self.pre_wd and self.weight_decay: g = g + self.weight_decay * p
    if self.classic: g = g * scale
    if self.momentum:
      b = self.momentum * self.b[i] + g
      self.b[i].assign(b)
      g = g + self.momentum * b if self.nesterov else b
    if self.ns_coefficients: g = _newton_schulz(g.reshape(g.shape[0], -1), self.ns_steps, tuple(self.ns_coefficients)).reshape(g.shape)
    if not self.classic: g = g * scale
    if not self.pre_wd and self.weight_decay: g = g + self.weight_decay * lr * p
    return p - g.cast(p.dtype)

class SGD(LARS):
  """torch.optim.SGD with dampening 0: g += weight_decay * p; b = momentum * b + g (b = g on the first step);
  g = g + momentum * b (nesterov) or b; p -= lr * g. classic=True (tinygrad's): the momentum accumulates lr * g instead."""
  def __init__(self, params, lr: float = 0.001, momentum: float = 0.0, weight_decay: float = 0.0, nesterov: bool = False,
               classic: bool = False, device: Optional[str] = None, fused: bool = False):
    if nesterov and momentum == 0: raise ValueError("SGD: nesterov momentum needs momentum > 0")
    super().__init__(params, lr, momentum, weight_decay, 0, None, nesterov, classic, True, 0.0, device, fused)

class Muon(LARS):
  """Muon (Jordan et al. 2024): SGD with nesterov momentum whose update is orthogonalized by ns_steps Newton-Schulz
  iterations (each parameter as a matrix of its first dim by the rest), then weight decay weight_decay * lr * p."""
  def __init__(self, params, lr: float = 0.001, momentum: float = 0.95, weight_decay: float = 0.1, ns_steps: int = 5,
               ns_coefficients: tuple[float, ...] = (3.4445, -4.775, 2.0315), nesterov: bool = True, device: Optional[str] = None,
               fused: bool = False):
    super().__init__(params, lr, momentum, weight_decay, ns_steps, ns_coefficients, nesterov, False, False, 0.0, device, fused)

def _one_minus_pow(b: float, t: Tensor) -> Tensor:
  """1 - b**t for 0 < b < 1 in float32 without the cancellation of 1 - 0.999**t: -expm1(t ln b), with expm1 by
  Kahan's trick expm1(y) = (u - 1) * y / ln(u), u = e**y (exact enough whenever u is near 1)."""
  if b == 0: return t * 0 + 1
  y = t * math.log(b)
  u = y.exp()
  near_one = (1 - u) * y / u.log()
  return (u == 1).where(-y, (u > 0.5).where(near_one, 1 - u))

class _AdamBase(Optimizer):
  """First and second moments with a bias correction from the step count t (shared by Adam, AdamW, LAMB)."""
  def __init__(self, params, lr: float, b1: float, b2: float, eps: float, weight_decay: float, device, fused):
    super().__init__(params, lr, device, fused)
    if not (0 <= b1 < 1 and 0 <= b2 < 1): raise ValueError(f"{type(self).__name__}: betas must be in [0, 1), got {(b1, b2)}")
    if eps < 0 or weight_decay < 0: raise ValueError(f"{type(self).__name__}: invalid eps {eps} or weight_decay {weight_decay}")
    self.b1, self.b2, self.eps, self.weight_decay = b1, b2, eps, weight_decay
    self.t = Tensor.zeros((), device=self.device).clone()   # the step count (torch: state['step'], a float tensor)
    self.m, self.v = self._zeros_like_params(), self._zeros_like_params()
    self._realize_state()

  def _begin_step(self) -> tuple[Tensor, Tensor]:
    t = self.t + 1
    self.t.assign(t)
    return _one_minus_pow(self.b1, t), _one_minus_pow(self.b2, t)

  def _new_value(self, i, p, g, lr, shared):
    bc1, bc2 = (_on(bc, p.device) for bc in shared)
    m, v = self.m[i] * self.b1 + g * (1 - self.b1), self.v[i] * self.b2 + g * g * (1 - self.b2)
    self.m[i].assign(m)
    self.v[i].assign(v)
    return self._param_update(p, g, m, v, lr, bc1, bc2)

  def _param_update(self, p, g, m, v, lr, bc1, bc2) -> Tensor: raise NotImplementedError

class Adam(_AdamBase):
  """torch.optim.Adam: p -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps). weight_decay (torch's, not tinygrad's): L2,
  added to the gradient."""
  def __init__(self, params, lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, device: Optional[str] = None,
               fused: bool = False, weight_decay: float = 0.0):
    super().__init__(params, lr, b1, b2, eps, weight_decay, device, fused)

  def _new_value(self, i, p, g, lr, shared):
    return super()._new_value(i, p, g + self.weight_decay * p if self.weight_decay else g, lr, shared)

  def _param_update(self, p, g, m, v, lr, bc1, bc2): return p - (lr / bc1) * (m / (v.sqrt() / bc2.sqrt() + self.eps))

class AdamW(_AdamBase):
  """torch.optim.AdamW: decoupled weight decay, p *= 1 - lr * weight_decay before the Adam update."""
  def __init__(self, params, lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.01,
               device: Optional[str] = None, fused: bool = False):
    super().__init__(params, lr, b1, b2, eps, weight_decay, device, fused)

  def _param_update(self, p, g, m, v, lr, bc1, bc2):
    return p * (1 - lr * self.weight_decay) - (lr / bc1) * (m / (v.sqrt() / bc2.sqrt() + self.eps))

class LAMB(_AdamBase):
  """LAMB (You et al. 2019): u = m_hat / (sqrt(v_hat) + eps) + weight_decay * p, p -= lr * r * u with the trust ratio
  r = ||p|| / ||u|| per parameter tensor (1 when either norm is 0). adam=True: r = 1 (Adam with decoupled decay)."""
  def __init__(self, params, lr: float = 0.001, b1: float = 0.9, b2: float = 0.999, eps: float = 1e-6, weight_decay: float = 0.0,
               adam: bool = False, device: Optional[str] = None, fused: bool = False):
    self.adam = adam
    super().__init__(params, lr, b1, b2, eps, weight_decay, device, fused)

  def _param_update(self, p, g, m, v, lr, bc1, bc2):
    up = (m / bc1) / ((v / bc2).sqrt() + self.eps) + self.weight_decay * p
    if not self.adam:
      r1, r2 = p.square().sum().sqrt(), up.square().sum().sqrt()
      up = up * ((r1 > 0) & (r2 > 0)).where(r1 / r2, 1.0)
    return p - lr * up

# ---------------------------------------------------------------------------------------------------------------
# learning-rate schedules

class LR_Scheduler:
  """Sets optimizer.lr to get_lr() for epoch 0 when made and for the next epoch on each step(), like torch's
  schedulers (which count `last_epoch` the same way). get_lr() is the current value as a Python float."""
  def __init__(self, optimizer: Optimizer):
    self.optimizer = optimizer
    self.base_lr = optimizer.initial_lr
    self.last_epoch = 0
    self._set(self.get_lr())

  def get_lr(self) -> float: raise NotImplementedError
  def get_last_lr(self) -> list[float]: return [self._last_lr]

  def _set(self, lr: float):
    self._last_lr = lr
    self.optimizer.lr.assign(Tensor([lr], dtype=self.optimizer.lr.dtype, device=self.optimizer.lr.device).reshape(())).realize()

  def step(self) -> None:
    self.last_epoch += 1
    self._set(self.get_lr())

class StepLR(LR_Scheduler):
  """lr = base_lr * gamma ** (epoch // step_size)."""
  def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1):
    self.step_size, self.gamma = step_size, gamma
    super().__init__(optimizer)

  def get_lr(self) -> float: return self.base_lr * self.gamma ** (self.last_epoch // self.step_size)

class CosineAnnealingLR(LR_Scheduler):
  """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 (it rises again after T_max, like torch's)."""
  def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0):
    self.T_max, self.eta_min = T_max, eta_min
    super().__init__(optimizer)

  def get_lr(self) -> float:
    return self.eta_min + (self.base_lr - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2

class OneCycleLR(LR_Scheduler):
  """torch's one-cycle policy (two phases, learning rate only; torch also cycles momentum unless cycle_momentum=False):
  from max_lr / div_factor up to max_lr over the first pct_start * total_steps - 1 steps, then down to
  max_lr / div_factor / final_div_factor at step total_steps - 1; anneal_strategy 'cos' or 'linear'."""
  def __init__(self, optimizer: Optimizer, max_lr: float, total_steps: Optional[int] = None, pct_start: float = 0.3,
               div_factor: float = 25.0, final_div_factor: float = 1e4, anneal_strategy: str = "cos",
               epochs: Optional[int] = None, steps_per_epoch: Optional[int] = None):
    if total_steps is None:
      if epochs is None or steps_per_epoch is None: raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
      total_steps = epochs * steps_per_epoch
    if total_steps <= 0: raise ValueError(f"OneCycleLR: total_steps must be positive, got {total_steps}")
    if not 0 <= pct_start <= 1: raise ValueError(f"OneCycleLR: pct_start must be in [0, 1], got {pct_start}")
    if anneal_strategy not in ("cos", "linear"): raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got {anneal_strategy!r}")
    self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
    self.initial_lr = max_lr / div_factor
    self.min_lr = self.initial_lr / final_div_factor
    self.phases = [(float(pct_start * total_steps) - 1, self.initial_lr, max_lr), (float(total_steps - 1), max_lr, self.min_lr)]
    optimizer.initial_lr = self.initial_lr
    super().__init__(optimizer)

  def _anneal(self, start: float, end: float, pct: float) -> float:
    if self.anneal_strategy == "linear": return (end - start) * pct + start
    return end + (start - end) / 2 * (math.cos(math.pi * pct) + 1)

  def get_lr(self) -> float:
    step = self.last_epoch
    if step > self.total_steps: raise ValueError(f"OneCycleLR: stepped {step} times, but total_steps is {self.total_steps}")
    start = 0.0
    for i, (end, lo, hi) in enumerate(self.phases):
      if step <= end or i == len(self.phases) - 1:
        return self._anneal(lo, hi, (step - start) / (end - start))
      start = end
    raise AssertionError("unreachable")
