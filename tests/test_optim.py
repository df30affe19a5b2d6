"""tinyweb.nn.optim against torch.optim: the same initial parameters and data, a few steps, the same parameters after
each step (and the same state); LAMB against a numpy reference; learning-rate schedules step by step against
torch.optim.lr_scheduler; an optimizer step is one schedule and a changed learning rate compiles nothing new."""
import warnings
import numpy as np
import pytest
import torch
from tinyweb import Tensor
import tinyweb.nn as nn
import tinyweb.tensor
import tinyweb.engine
from tinyweb.nn import optim
from tinyweb.nn.state import get_state_dict

ATOL, RTOL = 1e-5, 1e-4

def _data(seed=0, n=16):
  rng = np.random.default_rng(seed)
  return rng.uniform(-1, 1, (n, 5)).astype(np.float32), rng.integers(0, 3, n)

def _models(device, bn=False):
  """The same small MLP in torch and tinyweb (torch's init copied over)."""
  torch.manual_seed(0)
  # (no bias before the BatchNorm: its gradient is rounding noise, which Adam would blow up to full steps)
  layers = [torch.nn.Linear(5, 8, bias=False), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 3)] if bn else [torch.nn.Linear(5, 8), torch.nn.Linear(8, 3)]
  tmodel = torch.nn.Sequential(*layers[:-1], torch.nn.ReLU(), layers[-1])
  ours = [nn.Linear(5, 8, bias=False, device=device), nn.BatchNorm1d(8, device=device), nn.Linear(8, 3, device=device)] if bn else \
         [nn.Linear(5, 8, device=device), nn.Linear(8, 3, device=device)]
  for o, t in zip(ours, layers):
    for name, p in t.named_parameters(): setattr(o, name, Tensor(p.detach().numpy().copy(), device=device, requires_grad=True))
  return tmodel, ours

def _forward(ours, x):
  h = ours[0](x)
  if len(ours) == 3: h = ours[1](h)
  return ours[-1](h.relu())

def _tparams(tmodel): return [p for p in tmodel.parameters()]
def _oparams(ours): return [t for layer in ours for t in (layer.weight, layer.bias)]

def _step_both(step, tmodel, topt, ours, oopt, device):
  """One training step of the same model in both frameworks: cross-entropy on the step's data."""
  x, y = _data(step)
  topt.zero_grad()
  torch.nn.functional.cross_entropy(tmodel(torch.tensor(x)), torch.tensor(y)).backward()
  topt.step()
  oopt.zero_grad()
  _forward(ours, Tensor(x, device=device)).cross_entropy(Tensor(y.astype(np.int32), device=device)).backward()
  oopt.step()

def _train_both(device, make_ours, make_torch, steps=3, sched=None):
  """Runs `steps` steps in both frameworks (cross-entropy of the MLP), comparing parameters and gradients every step."""
  tmodel, ours = _models(device)
  topt, oopt = make_torch(_tparams(tmodel)), make_ours(_oparams(ours))
  tsched, osched = sched(topt, oopt) if sched else (None, None)
  with Tensor.train():
    tmodel.train()
    for step in range(steps):
      _step_both(step, tmodel, topt, ours, oopt, device)
      for i, (t, o) in enumerate(zip(_tparams(tmodel), _oparams(ours))):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), atol=ATOL, rtol=RTOL, err_msg=f"step {step} grad {i}")
        np.testing.assert_allclose(o.numpy(), t.detach().numpy(), atol=ATOL, rtol=RTOL, err_msg=f"step {step} param {i}")
      if sched:
        tsched.step(); osched.step()
        assert oopt.lr.item() == pytest.approx(topt.param_groups[0]["lr"], rel=1e-6)
  return tmodel, ours, topt, oopt

SGD_CASES = {"plain": dict(lr=0.1), "momentum": dict(lr=0.1, momentum=0.9), "nesterov": dict(lr=0.1, momentum=0.9, nesterov=True),
             "weight_decay": dict(lr=0.1, weight_decay=0.1), "all": dict(lr=0.05, momentum=0.5, weight_decay=0.01, nesterov=True)}

@pytest.mark.parametrize("case", list(SGD_CASES))
@pytest.mark.browser(case=["nesterov"])
def test_sgd_matches_torch(device, case):
  kw = SGD_CASES[case]
  _, _, topt, oopt = _train_both(device, lambda ps: optim.SGD(ps, **kw), lambda ps: torch.optim.SGD(ps, **kw))
  if kw.get("momentum"):   # the momentum buffers are the optimizer's tensors, equal to torch's
    for b, p in zip(oopt.b, topt.param_groups[0]["params"]):
      np.testing.assert_allclose(b.numpy(), topt.state[p]["momentum_buffer"].numpy(), atol=ATOL, rtol=RTOL)

ADAM_CASES = {"adam": ("Adam", dict(lr=0.01)), "adam_l2": ("Adam", dict(lr=0.01, weight_decay=0.1)),
              "adam_betas": ("Adam", dict(lr=0.02, b1=0.8, b2=0.99, eps=1e-6)),
              "adam_b1_zero": ("Adam", dict(lr=0.01, b1=0.0, b2=0.9)), "adamw": ("AdamW", dict(lr=0.01, weight_decay=0.1)),
              "adamw_default_decay": ("AdamW", dict(lr=0.01))}

@pytest.mark.parametrize("case", list(ADAM_CASES))
@pytest.mark.browser(case=["adamw"])
def test_adam_matches_torch(device, case):
  name, kw = ADAM_CASES[case]
  tkw = {k: v for k, v in kw.items() if k not in ("b1", "b2")}
  if "b1" in kw: tkw["betas"] = (kw["b1"], kw["b2"])
  _, _, topt, oopt = _train_both(device, lambda ps: getattr(optim, name)(ps, **kw), lambda ps: getattr(torch.optim, name)(ps, **tkw))
  assert oopt.t.item() == 3
  for m, v, p in zip(oopt.m, oopt.v, topt.param_groups[0]["params"]):
    st = topt.state[p]
    assert st["step"].item() == 3
    np.testing.assert_allclose(m.numpy(), st["exp_avg"].numpy(), atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(v.numpy(), st["exp_avg_sq"].numpy(), atol=1e-7, rtol=RTOL)

def _train_bn(device, make_ours, make_torch, steps=3):
  tmodel, ours = _models(device, bn=True)
  tbn, obn = tmodel[1], ours[1]   # Linear, BatchNorm1d, ReLU, Linear
  for name, p in tbn.named_parameters():
    with torch.no_grad(): p.uniform_(0.5, 1.5)
    setattr(obn, name, Tensor(p.detach().numpy().copy(), device=device, requires_grad=True))
  tps = list(tmodel.parameters())
  ops = [ours[0].weight, obn.weight, obn.bias, ours[2].weight, ours[2].bias]
  topt, oopt = make_torch(tps), make_ours(ops)
  tmodel.train()
  with Tensor.train():
    for step in range(steps):
      _step_both(step, tmodel, topt, ours, oopt, device)
      for i, (t, o) in enumerate(zip(tps, ops)):
        np.testing.assert_allclose(o.numpy(), t.detach().numpy(), atol=ATOL, rtol=RTOL, err_msg=f"step {step} param {i}")
  for key in ("running_mean", "running_var"):
    np.testing.assert_allclose(getattr(obn, key).numpy(), getattr(tbn, key).numpy(), atol=ATOL, rtol=RTOL, err_msg=key)
  assert obn.num_batches_tracked.item() == steps
  tmodel.eval()
  x, _ = _data(9)
  np.testing.assert_allclose(_forward(ours, Tensor(x, device=device)).numpy(), tmodel(torch.tensor(x)).detach().numpy(), atol=ATOL, rtol=RTOL)

@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_model_with_batchnorm_matches_torch(device, name):
  kw = dict(lr=0.1, momentum=0.9) if name == "SGD" else dict(lr=0.01)
  _train_bn(device, lambda ps: getattr(optim, name)(ps, **kw), lambda ps: getattr(torch.optim, name)(ps, **kw))

# ---------------------------------------------------------------------------------------------------------------
# LAMB against a numpy reference

def _lamb_reference(params, grads_per_step, lr, b1, b2, eps, wd, adam):
  """LAMB as in You et al. (2019) with bias-corrected moments, in float64."""
  ps = [p.astype(np.float64) for p in params]
  m, v = [np.zeros_like(p) for p in ps], [np.zeros_like(p) for p in ps]
  out = []
  for t, grads in enumerate(grads_per_step, start=1):
    for i, g in enumerate(grads):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      u = (m[i] / (1 - b1 ** t)) / (np.sqrt(v[i] / (1 - b2 ** t)) + eps) + wd * ps[i]
      w_norm, u_norm = np.linalg.norm(ps[i]), np.linalg.norm(u)
      ratio = 1.0 if adam or w_norm == 0 or u_norm == 0 else w_norm / u_norm
      ps[i] = ps[i] - lr * ratio * u
    out.append([p.copy() for p in ps])
  return out

@pytest.mark.parametrize("kw", [dict(lr=0.01), dict(lr=0.02, weight_decay=0.1, eps=1e-8), dict(lr=0.01, weight_decay=0.05, adam=True),
                                dict(lr=0.05, b1=0.8, b2=0.95)])
def test_lamb_matches_reference(device, kw):
  rng = np.random.default_rng(3)
  init = [rng.uniform(-1, 1, (4, 3)).astype(np.float32), rng.uniform(-1, 1, (3,)).astype(np.float32), np.zeros((2, 2), np.float32)]
  grads = [[rng.uniform(-1, 1, p.shape).astype(np.float32) for p in init] for _ in range(3)]
  full = dict(lr=0.001, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.0, adam=False) | kw
  expected = _lamb_reference(init, grads, full["lr"], full["b1"], full["b2"], full["eps"], full["weight_decay"], full["adam"])
  params = [Tensor(p, device=device, requires_grad=True) for p in init]
  opt = optim.LAMB(params, **kw)
  for step in range(3):
    for p, g in zip(params, grads[step]): p.grad = Tensor(g, device=device)
    opt.step()
    for p, e in zip(params, expected[step]): np.testing.assert_allclose(p.numpy(), e, atol=ATOL, rtol=RTOL, err_msg=f"step {step}")

def test_lamb_trust_ratio_scales_update(device):
  """With a zero-norm parameter the ratio is 1; otherwise each tensor's step has length lr * ||w||."""
  w = Tensor([[3.0, 4.0]], device=device, requires_grad=True)   # ||w|| = 5
  opt = optim.LAMB([w], lr=0.1)
  w.grad = Tensor([[1.0, -2.0]], device=device)
  opt.step()
  np.testing.assert_allclose(np.linalg.norm(w.numpy() - [[3.0, 4.0]]), 0.5, rtol=1e-5)

# ---------------------------------------------------------------------------------------------------------------
# behaviour shared by all optimizers

def test_state_is_tensors(device):
  w, b = Tensor.ones(3, 2, device=device, requires_grad=True), Tensor.zeros(2, device=device, requires_grad=True)
  adam = optim.Adam([w, b], lr=0.1)
  sd = get_state_dict(adam)
  assert {"lr", "t", "m.0", "m.1", "v.0", "v.1", "params.0", "params.1"} <= set(sd)
  assert all(isinstance(t, Tensor) for t in sd.values()) and sd["m.0"].shape == (3, 2) and sd["t"].shape == () and sd["lr"].shape == ()
  assert sd["m.0"].uop is not sd["v.0"].uop   # separate storage for every buffer
  sgd = optim.SGD([w], lr=0.1, momentum=0.9)
  assert {"lr", "b.0", "params.0"} <= set(get_state_dict(sgd))
  assert "b.0" not in get_state_dict(optim.SGD([w], lr=0.1))
  ps = optim.SGD([w, w, b], lr=0.1).params   # duplicates count once
  assert len(ps) == 2 and ps[0] is w and ps[1] is b

def test_state_loads_and_continues(device):
  """Optimizer state written through assign (what load_state_dict does) is what the next step uses."""
  w = Tensor([1.0, 2.0], device=device, requires_grad=True)
  opt = optim.Adam([w], lr=0.1)
  opt.m[0].assign(Tensor([0.5, -0.5], device=device)); opt.v[0].assign(Tensor([0.25, 0.25], device=device)); opt.t.assign(Tensor(4.0, device=device))
  Tensor.realize_all(*opt.m, *opt.v, opt.t)
  tw = torch.tensor([1.0, 2.0], requires_grad=True)
  topt = torch.optim.Adam([tw], lr=0.1)
  topt.state[tw] = {"step": torch.tensor(4.0), "exp_avg": torch.tensor([0.5, -0.5]), "exp_avg_sq": torch.tensor([0.25, 0.25])}
  tw.grad = torch.tensor([0.3, 0.1]); topt.step()
  w.grad = Tensor([0.3, 0.1], device=device); opt.step()
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), atol=ATOL, rtol=RTOL)
  assert opt.t.item() == 5

def test_step_is_one_schedule(device, monkeypatch):
  _, ours = _models(device)
  opt = optim.Adam(_oparams(ours), lr=0.01)
  x, y = _data(1)
  _forward(ours, Tensor(x, device=device)).cross_entropy(Tensor(y.astype(np.int32), device=device)).backward()
  calls = []
  real = tinyweb.tensor.create_schedule
  monkeypatch.setattr(tinyweb.tensor, "create_schedule", lambda targets: calls.append(len(targets)) or real(targets))
  opt.step()
  assert len(calls) == 1

def test_params_without_grad_are_skipped_and_zero_grad(device):
  a, b = Tensor([1.0, 2.0], device=device, requires_grad=True), Tensor([3.0], device=device, requires_grad=True)
  frozen = Tensor([5.0], device=device, requires_grad=False)
  opt = optim.SGD([a, b, frozen], lr=0.5, momentum=0.9)
  assert len(opt.params) == 2
  (a * 2).sum().backward()
  assert b.grad is None
  opt.step()
  np.testing.assert_allclose(a.numpy(), [0.0, 1.0]); np.testing.assert_allclose(b.numpy(), [3.0])
  np.testing.assert_allclose(a.grad.numpy(), [2.0, 2.0])   # the gradient keeps the value the step used
  opt.zero_grad()
  assert a.grad is None and b.grad is None
  with pytest.raises(ValueError): optim.Adam([frozen])
  with pytest.raises(ValueError, match="nesterov"): optim.SGD([a], nesterov=True)

def test_lr_changes_reuse_kernels(device):
  """The learning rate and the bias corrections are read from buffers: new values compile nothing."""
  _, ours = _models(device)
  opt = optim.Adam(_oparams(ours), lr=0.01)
  sched = optim.OneCycleLR(opt, max_lr=0.1, total_steps=10)
  x, y = _data(2)
  def step():
    opt.zero_grad()
    loss = _forward(ours, Tensor(x, device=device)).cross_entropy(Tensor(y.astype(np.int32), device=device))
    loss.backward()
    Tensor.realize_all(loss, *opt.schedule_step())
    sched.step()
    return loss.item()
  losses = [step(), step()]
  n = len(tinyweb.engine._kernel_cache)
  losses += [step() for _ in range(4)]
  assert len(tinyweb.engine._kernel_cache) == n
  assert losses[-1] < losses[0]

def test_scheduler_drives_training_like_torch(device):
  def sched(topt, oopt): return torch.optim.lr_scheduler.StepLR(topt, 2, 0.5), optim.StepLR(oopt, 2, 0.5)
  _train_both(device, lambda ps: optim.SGD(ps, lr=0.2, momentum=0.9), lambda ps: torch.optim.SGD(ps, lr=0.2, momentum=0.9), steps=5, sched=sched)

# ---------------------------------------------------------------------------------------------------------------
# learning-rate schedules against torch

SCHEDULES = {
  "step": (lambda o: optim.StepLR(o, step_size=3, gamma=0.5), lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=3, gamma=0.5), 25),
  "step_default_gamma": (lambda o: optim.StepLR(o, 4), lambda o: torch.optim.lr_scheduler.StepLR(o, 4), 25),
  "cosine": (lambda o: optim.CosineAnnealingLR(o, T_max=10), lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10), 30),
  "cosine_eta_min": (lambda o: optim.CosineAnnealingLR(o, T_max=7, eta_min=0.01),
                     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7, eta_min=0.01), 30),
  "onecycle": (lambda o: optim.OneCycleLR(o, max_lr=0.5, total_steps=30),
               lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.5, total_steps=30, cycle_momentum=False), 30),
  "onecycle_linear": (lambda o: optim.OneCycleLR(o, max_lr=0.3, total_steps=25, pct_start=0.25, div_factor=10, final_div_factor=100,
                                                 anneal_strategy="linear"),
                      lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.3, total_steps=25, pct_start=0.25, div_factor=10,
                                                                    final_div_factor=100, anneal_strategy="linear", cycle_momentum=False), 25),
  "onecycle_epochs": (lambda o: optim.OneCycleLR(o, max_lr=0.1, epochs=4, steps_per_epoch=6, pct_start=0.5),
                      lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, epochs=4, steps_per_epoch=6, pct_start=0.5,
                                                                    cycle_momentum=False), 24),
}

@pytest.mark.parametrize("name", list(SCHEDULES))
def test_schedule_matches_torch(device, name):
  make_ours, make_torch, steps = SCHEDULES[name]
  opt = optim.SGD([Tensor([1.0], device=device, requires_grad=True)], lr=0.1)
  topt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
  ours, theirs = make_ours(opt), make_torch(topt)
  def same(step):
    want = topt.param_groups[0]["lr"]
    assert ours.get_lr() == pytest.approx(want, rel=1e-12, abs=1e-15), f"step {step}"
    assert opt.lr.item() == pytest.approx(want, rel=1e-6, abs=1e-12), f"step {step}"   # the float32 tensor the kernels read
  same(0)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")   # torch warns when the schedule steps before any optimizer step
    for step in range(1, steps + 1):
      theirs.step(); ours.step()
      same(step)

def test_onecycle_past_the_end_raises(device):
  opt = optim.SGD([Tensor([1.0], device=device, requires_grad=True)], lr=0.1)
  s = optim.OneCycleLR(opt, max_lr=0.1, total_steps=3)
  for _ in range(3): s.step()
  with pytest.raises(ValueError, match="total_steps"): s.step()

@pytest.mark.browser
def test_jitted_training_step_matches_eager(device):
  """A TinyJit'd step (forward, backward, Adam, BatchNorm statistics) replays what eager steps compute, lr schedule included."""
  from tinyweb import TinyJit
  runs = []
  for jit in (False, True):
    _, ours = _models(device, bn=True)
    ps = [ours[0].weight, ours[1].weight, ours[1].bias, ours[2].weight, ours[2].bias]
    opt = optim.Adam(ps, lr=0.01)
    sched = optim.OneCycleLR(opt, max_lr=0.05, total_steps=8)
    def step(x, y):
      opt.zero_grad()
      loss = _forward(ours, x).cross_entropy(y)
      loss.backward()
      return loss.realize(*opt.schedule_step())
    f = TinyJit(step) if jit else step
    losses = []
    with Tensor.train():
      for i in range(6):
        x, y = _data(i)
        losses.append(f(Tensor(x, device=device), Tensor(y.astype(np.int32), device=device)).item())
        sched.step()
    runs.append((losses, [p.numpy() for p in ps] + [ours[1].running_mean.numpy(), ours[1].running_var.numpy()]))
  (l0, s0), (l1, s1) = runs
  np.testing.assert_allclose(l1, l0, atol=1e-6, rtol=1e-5)
  for a, b in zip(s1, s0): np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5)
