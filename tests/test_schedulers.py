"""The noise schedulers (tinyweb.models.schedulers) against diffusers': the timesteps, sigmas and init_noise_sigma of the
configs Stable Diffusion ships (SD 1.5's scaled_linear with leading spacing and steps_offset 1, SD 2's v_prediction,
SDXL's Euler with leading or trailing spacing) and of the other options, then sampling loops from the same initial
latents with the same fake model (a fixed function of the model input and the timestep, computed on each side in its
own framework), every step's sample and predicted original compared. Noise is the same on both sides: given to DDIM
(variance_noise), drawn from twin torch generators for the ancestral sampler and Euler's churn."""
import json, math
import numpy as np
import pytest
from tinyweb import Tensor
from tinyweb.models.schedulers import EulerDiscreteScheduler, EulerAncestralDiscreteScheduler, DDIMScheduler

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

SD15 = dict(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, steps_offset=1, timestep_spacing="leading",
            set_alpha_to_one=False, clip_sample=False)
SD2_V = dict(SD15, prediction_type="v_prediction")
SDXL_EULER = dict(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, steps_offset=1, timestep_spacing="leading",
                  interpolation_type="linear", use_karras_sigmas=False)
SDXL_TRAILING = dict(SDXL_EULER, timestep_spacing="trailing", steps_offset=0)
LINEAR = dict(beta_schedule="linear", timestep_spacing="linspace")   # (diffusers' defaults otherwise)
COSINE = dict(beta_schedule="squaredcos_cap_v2", timestep_spacing="trailing")
ZERO_SNR = dict(SD15, rescale_betas_zero_snr=True, timestep_spacing="trailing", prediction_type="v_prediction", steps_offset=0)

SCHEDULERS = {"euler": (EulerDiscreteScheduler, "EulerDiscreteScheduler"),
              "ancestral": (EulerAncestralDiscreteScheduler, "EulerAncestralDiscreteScheduler"), "ddim": (DDIMScheduler, "DDIMScheduler")}

def pair(kind: str, config: dict):
  """tinyweb's and diffusers' scheduler of one config (each given only the keys it has, as from_config does)."""
  ours, theirs = SCHEDULERS[kind]
  return ours.from_config(config), getattr(diffusers, theirs).from_config(config)

# ---------------------------------------------------------------------------------------------------------------
# schedules

SCHEDULES = [("euler", SD15), ("euler", SD2_V), ("euler", SDXL_EULER), ("euler", SDXL_TRAILING), ("euler", LINEAR), ("euler", COSINE),
             ("euler", dict(SDXL_EULER, use_karras_sigmas=True)), ("euler", dict(SDXL_TRAILING, final_sigmas_type="sigma_min")),
             ("euler", dict(SD15, trained_betas=list(np.linspace(1e-4, 0.03, 1000)))), ("euler", dict(LINEAR, num_train_timesteps=500)),
             ("ancestral", SD15), ("ancestral", SDXL_TRAILING), ("ancestral", LINEAR), ("ddim", SD15), ("ddim", SD2_V), ("ddim", LINEAR),
             ("ddim", SDXL_TRAILING), ("ddim", COSINE), ("ddim", ZERO_SNR)]

@pytest.mark.parametrize("kind,config", SCHEDULES)
def test_schedule_matches_diffusers(kind, config):
  ours, ref = pair(kind, config)
  # torch's float32 cumprod and sqrt are reproduced to the last bit or two (its sqrt is not correctly rounded here)
  np.testing.assert_allclose(ours.alphas_cumprod, ref.alphas_cumprod.numpy(), rtol=1e-6, atol=1e-7)
  for n in (1, 4, 10, 25, 50, 37, ours.config.num_train_timesteps):
    ours.set_timesteps(n)
    ref.set_timesteps(n)
    want = ref.timesteps.numpy()
    assert len(ours.timesteps) == len(want) == n
    if kind == "ddim":
      assert ours.timesteps == want.tolist() and all(type(t) is int for t in ours.timesteps)
      continue
    if config.get("use_karras_sigmas"): np.testing.assert_allclose(ours.timesteps, want, rtol=1e-6)   # (fractional, from log sigmas)
    else: assert ours.timesteps == want.tolist()
    np.testing.assert_allclose(ours.sigmas, ref.sigmas.numpy(), rtol=1e-6, err_msg=f"{n} steps")
    assert math.isclose(ours.init_noise_sigma, float(ref.init_noise_sigma), rel_tol=1e-6)

def test_zero_snr_sigmas_match_diffusers():
  """Rescaled to zero terminal SNR, the betas are rebuilt from differences of square roots, and torch's float32 sqrt is
  not correctly rounded (tinyweb's roundings are): the small sigmas, 1 - alpha_bar over alpha_bar with alpha_bar near 1,
  differ by up to 7.2e-6 relative (measured); the first is sqrt((1 - 2**-24) / 2**-24)."""
  ours, ref = pair("euler", ZERO_SNR)
  for n in (10, 1000):
    ours.set_timesteps(n)
    ref.set_timesteps(n)
    assert ours.timesteps == ref.timesteps.numpy().tolist()
    np.testing.assert_allclose(ours.sigmas, ref.sigmas.numpy(), rtol=2e-5, err_msg=f"{n} steps")
    assert math.isclose(ours.sigmas[0], 4096.0, rel_tol=1e-7)

# ---------------------------------------------------------------------------------------------------------------
# sampling loops

SHAPE = (1, 4, 8, 8)
BASE = np.random.default_rng(0).standard_normal(SHAPE).astype(np.float32)

def fake_model_torch(x, t: float):
  return 0.6 * torch.tanh(x) + (0.2 + 0.3 * math.cos(t / 300)) * torch.from_numpy(BASE) - 0.05 * x

def fake_model_tinyweb(x: Tensor, t: float) -> Tensor:
  k = Tensor([0.2 + 0.3 * math.cos(t / 300)], device=x.device)   # (a tensor, not a constant: the same kernel every step)
  return 0.6 * x.tanh() + k * Tensor(BASE, device=x.device) - 0.05 * x

LOOPS = [("euler", SD15, {}), ("euler", SD2_V, {}), ("euler", SDXL_EULER, {}), ("euler", dict(SDXL_TRAILING, use_karras_sigmas=True), {}),
         ("euler", dict(ZERO_SNR, final_sigmas_type="sigma_min"), {}), ("euler", dict(LINEAR, prediction_type="sample"), {}),
         ("euler", SD15, {"s_churn": 1.0, "s_tmin": 0.5, "s_tmax": 8.0}),
         ("ancestral", SD15, {}), ("ancestral", dict(SDXL_TRAILING, prediction_type="v_prediction"), {}),
         ("ddim", SD15, {}), ("ddim", SD2_V, {"eta": 0.5}), ("ddim", dict(LINEAR, clip_sample=True, clip_sample_range=1.5), {"eta": 1.0}),
         ("ddim", dict(SDXL_TRAILING, prediction_type="sample", clip_sample=True), {"use_clipped_model_output": True}),
         ("ddim", dict(COSINE, set_alpha_to_one=True), {})]

def loop(kind: str, config: dict, kwargs: dict, device: str, steps: int = 8):
  ours, ref = pair(kind, config)
  ours.set_timesteps(steps)
  ref.set_timesteps(steps)
  assert math.isclose(ours.init_noise_sigma, float(ref.init_noise_sigma), rel_tol=1e-6)
  start = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32) * float(ref.init_noise_sigma)
  x_ref, x = torch.from_numpy(start), Tensor(start, device=device)
  gen_ref, gen_ours = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)   # twins: the same noise on both sides
  for i, (t_ref, t) in enumerate(zip(ref.timesteps, ours.timesteps)):
    with torch.no_grad():
      out_ref = fake_model_torch(ref.scale_model_input(x_ref, t_ref), float(t_ref))
      extra = {}
      if kind == "ddim" and kwargs.get("eta"): extra["variance_noise"] = torch.randn(SHAPE, generator=gen_ref)
      elif kind == "ancestral" or kwargs.get("s_churn"): extra["generator"] = gen_ref
      res_ref = ref.step(out_ref, t_ref, x_ref, **kwargs, **extra)
    out = fake_model_tinyweb(ours.scale_model_input(x, t), t)
    extra = {}
    if kind == "ddim" and kwargs.get("eta"): extra["variance_noise"] = Tensor(torch.randn(SHAPE, generator=gen_ours).numpy(), device=device)
    elif kind == "ancestral" or (kwargs.get("s_churn") and kwargs["s_tmin"] <= ours.sigmas[i] <= kwargs["s_tmax"]):
      extra["noise"] = Tensor(torch.randn(SHAPE, generator=gen_ours).numpy(), device=device)
    res = ours.step(out, t, x, **kwargs, **extra)
    # the scale is the larger of the step's input and output: a step from sigma 4096 (zero terminal SNR) subtracts
    # numbers near 1e4 whose float32 spacing (1e-3) both sides round to in their own order
    scale = max(1.0, float(x_ref.abs().max()), float(res_ref.prev_sample.abs().max()))
    x_ref = res_ref.prev_sample
    want = x_ref.numpy()
    # measured: at most 4e-7 of the scale (2.3e-6 for DDIM with eta 1)
    np.testing.assert_allclose(res.prev_sample.numpy(), want, rtol=0, atol=2e-5 * scale, err_msg=f"step {i} (t={t})")
    np.testing.assert_allclose(res.pred_original_sample.numpy(), res_ref.pred_original_sample.numpy(), rtol=0,
                               atol=2e-5 * max(1.0, float(res_ref.pred_original_sample.abs().max())), err_msg=f"step {i} (t={t})")
    # the next step starts from diffusers' sample, so each step's arithmetic is checked without the roundoff of the
    # steps before it compounding (after a step from sigma 4096 the samples differ by 1e-3, a float32 spacing at 1e4)
    x = Tensor(want, device=device)
  assert np.abs(want - start).max() > 0.1   # (the loop moved the sample)
  return res.prev_sample

@pytest.mark.parametrize("kind,config,kwargs", LOOPS)
def test_sampling_loop_matches_diffusers(kind, config, kwargs):
  loop(kind, config, kwargs, "CPU")

@pytest.mark.parametrize("kind,config,kwargs", [("euler", SD15, {}), ("ancestral", SD15, {}), ("ddim", SD2_V, {"eta": 0.5})])
def test_sampling_loop_on_the_model_device(kind, config, kwargs, model_device):
  assert loop(kind, config, kwargs, model_device).device == model_device

@pytest.mark.parametrize("config", [SD15, SD2_V, dict(SDXL_EULER, use_karras_sigmas=True)], ids=["sd15", "sd2-v", "karras"])
def test_euler_plan_takes_the_steps_of_step(config):
  """plan(n)'s numbers, applied in float32 numpy as the diffuse page applies them, give step()'s samples."""
  sched = EulerDiscreteScheduler.from_config(config)
  plan = sched.plan(4)
  assert (plan.timesteps, plan.init_noise_sigma) == (sched.timesteps, sched.init_noise_sigma)
  rng = np.random.default_rng(0)
  x = rng.standard_normal((1, 4, 3, 3)).astype(np.float32)
  want, got = Tensor(x) * sched.init_noise_sigma, x * np.float32(plan.init_noise_sigma)
  for i, t in enumerate(sched.timesteps):
    out = rng.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_allclose(got * np.float32(plan.input_scales[i]), sched.scale_model_input(want, t).numpy(), rtol=1e-6)
    want = sched.step(Tensor(out), t, want).prev_sample
    got = got + (got - (got * np.float32(plan.sample_scales[i]) + out * np.float32(plan.output_scales[i]))) * np.float32(plan.deltas[i])
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-6, atol=1e-6)

def test_stochastic_steps_draw_noise_when_none_is_given():
  ours = EulerAncestralDiscreteScheduler.from_config(SD15)
  ours.set_timesteps(4)
  x = Tensor(BASE)
  Tensor.manual_seed(3)
  a = ours.step(Tensor.zeros(*SHAPE), ours.timesteps[0], x).prev_sample.numpy()
  ours.set_timesteps(4)
  Tensor.manual_seed(3)
  b = ours.step(Tensor.zeros(*SHAPE), ours.timesteps[0], x).prev_sample.numpy()
  c = ours.step(Tensor.zeros(*SHAPE), ours.timesteps[1], x).prev_sample.numpy()
  np.testing.assert_array_equal(a, b)
  assert np.abs(a - BASE).max() > 0.1 and np.abs(a - c).max() > 0.1

def test_repeated_timestep_index_matches_diffusers():
  """A timestep found twice in the schedule: its second place (diffusers' rule, for a start mid-schedule)."""
  ours, ref = pair("euler", SD15)
  ours.set_timesteps(5)
  ref.set_timesteps(5)
  ours.timesteps = [901.0, 701.0, 701.0, 301.0, 1.0]
  for t in ours.timesteps: assert ours.index_for_timestep(t) == ref.index_for_timestep(t, torch.tensor(ours.timesteps))

def test_add_noise_matches_diffusers():
  noise = np.random.default_rng(4).standard_normal(SHAPE).astype(np.float32)
  for kind in ("euler", "ddim"):
    ours, ref = pair(kind, SD15)
    ours.set_timesteps(10)
    ref.set_timesteps(10)
    t = ref.timesteps[3:4]
    want = ref.add_noise(torch.from_numpy(BASE), torch.from_numpy(noise), t).numpy()
    got = ours.add_noise(Tensor(BASE), Tensor(noise), ours.timesteps[3]).numpy()
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * np.abs(want).max())

# ---------------------------------------------------------------------------------------------------------------
# configs and refusals

def test_from_pretrained_reads_a_pipeline_scheduler_config(tmp_path):
  """SD 1.5's scheduler_config.json (a PNDMScheduler's: its skip_prk_steps is not a key of these schedulers, so ignored)."""
  config = {"_class_name": "PNDMScheduler", "_diffusers_version": "0.6.0", "beta_end": 0.012, "beta_schedule": "scaled_linear",
            "beta_start": 0.00085, "num_train_timesteps": 1000, "set_alpha_to_one": False, "skip_prk_steps": True, "steps_offset": 1,
            "trained_betas": None, "clip_sample": False}
  (tmp_path / "scheduler").mkdir()
  (tmp_path / "scheduler" / "scheduler_config.json").write_text(json.dumps(config))
  ours = DDIMScheduler.from_pretrained(tmp_path)
  assert (ours.config.steps_offset, ours.config.set_alpha_to_one, ours.config.clip_sample) == (1, False, False)
  ours.set_timesteps(5)
  assert ours.timesteps == [801, 601, 401, 201, 1]
  euler = EulerDiscreteScheduler.from_pretrained(tmp_path / "scheduler")
  assert euler.config.timestep_spacing == "linspace"   # (the Euler default: SD 1.5's file does not say)

@pytest.mark.parametrize("cls,change,match", [
  (EulerDiscreteScheduler, {"use_beta_sigmas": True}, "use_beta_sigmas True is not supported"),
  (EulerDiscreteScheduler, {"use_exponential_sigmas": True}, "use_exponential_sigmas True is not supported"),
  (EulerDiscreteScheduler, {"interpolation_type": "log_linear"}, "interpolation_type 'log_linear' is not supported"),
  (EulerDiscreteScheduler, {"timestep_type": "continuous"}, "timestep_type 'continuous' is not supported"),
  (EulerDiscreteScheduler, {"final_sigmas_type": "one"}, "final_sigmas_type 'one' is not supported"),
  (EulerDiscreteScheduler, {"timestep_spacing": "karras"}, "timestep_spacing 'karras' is not supported"),
  (EulerAncestralDiscreteScheduler, {"prediction_type": "sample"}, "prediction_type 'sample' is not supported"),
  (DDIMScheduler, {"thresholding": True}, "thresholding True is not supported"),
  (DDIMScheduler, {"beta_schedule": "sigmoid"}, "beta_schedule 'sigmoid' is not supported"),
  (DDIMScheduler, {"prediction_type": "flow"}, "prediction_type 'flow' is not supported"),
  (DDIMScheduler, {"trained_betas": [0.1, 0.2]}, "trained_betas has 2 values, not num_train_timesteps"),
])
def test_unsupported_config_is_refused(tmp_path, cls, change, match):
  (tmp_path / "scheduler_config.json").write_text(json.dumps({**SD15, **change}))
  with pytest.raises(ValueError, match=f"scheduler_config.json: {cls.__name__}: {match}"): cls.from_pretrained(tmp_path)

def test_bad_calls_are_refused(tmp_path):
  with pytest.raises(FileNotFoundError, match="scheduler_config.json: not found"): DDIMScheduler.from_pretrained(tmp_path)
  euler, ddim = EulerDiscreteScheduler.from_config(SD15), DDIMScheduler.from_config(SD15)
  x = Tensor.zeros(*SHAPE)
  with pytest.raises(ValueError, match="call set_timesteps before step"): ddim.step(x, 981, x)
  with pytest.raises(ValueError, match="call set_timesteps before step"): euler.step(x, 981.0, x)
  with pytest.raises(ValueError, match="num_inference_steps must be an int from 1 to num_train_timesteps"): euler.set_timesteps(0)
  euler.set_timesteps(4)
  with pytest.raises(ValueError, match="timestep 3 is not one of the scheduler's timesteps"): euler.step(x, 3, x)
  with pytest.raises(ValueError, match=r"model_output of shape \(1, 4, 8, 4\) must be shaped like the sample"):
    euler.step(Tensor.zeros(1, 4, 8, 4), euler.timesteps[0], x)
  for t in euler.timesteps: euler.step(x, t, x)
  with pytest.raises(ValueError, match="all 4 steps are done"): euler.step(x, euler.timesteps[-1], x)
  with pytest.raises(TypeError, match="unknown config key 'skip_prk_steps'"): DDIMScheduler(skip_prk_steps=True)
