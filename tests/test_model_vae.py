"""Stable Diffusion's VAE (tinyweb.models.vae) against diffusers' AutoencoderKL: small random models saved with
`save_pretrained` and loaded by both, compared on the posterior (mean, logvar, std), the decoded image and the round
trip, on CPU and WEBGPU; float16 checkpoints; the config variants SD's VAEs do not use (no mid-block attention, no
quant convs, a sharded checkpoint); the original (LDM) single-file names against diffusers' own converter."""
import json, re
import numpy as np
import pytest
from tinyweb import Tensor, dtypes
from tinyweb.nn.state import load_state_dict
from tinyweb.models.vae import AutoencoderKL, AutoencoderKLConfig, vae_state_dict_from_ldm, vae_config_from_ldm

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

CONFIG = dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2,
              block_out_channels=[32, 64], layers_per_block=1, latent_channels=4, norm_num_groups=8, sample_size=32)

def reference(config: dict, seed: int = 0):
  """A diffusers AutoencoderKL with random weights, the GroupNorms' too (diffusers starts them at 1 and 0)."""
  torch.manual_seed(seed)
  vae = diffusers.AutoencoderKL(**config).eval()
  with torch.no_grad():
    for name, p in vae.named_parameters():
      if "norm" in name: p.add_(0.2 * torch.randn_like(p))
      elif name.endswith("bias"): p.copy_(0.1 * torch.randn_like(p))
  return vae

def images(n: int = 2, size: int = 32, seed: int = 1) -> np.ndarray:
  return np.random.default_rng(seed).uniform(-1, 1, (n, 3, size, size)).astype(np.float32)

# one input and latent shape for every test: the kernels built for the first are reused by the others
X, Z = images(), np.random.default_rng(2).standard_normal((2, 4, 16, 16)).astype(np.float32)

@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """The reference model and its save_pretrained folder."""
  vae, path = reference(CONFIG), tmp_path_factory.mktemp("vae")
  vae.save_pretrained(path, safe_serialization=True)
  return vae, path

def run_reference(vae, x: np.ndarray = X, z: np.ndarray = Z) -> dict:
  with torch.no_grad():
    post = vae.encode(torch.from_numpy(x)).latent_dist
    return {"mean": post.mean.numpy(), "logvar": post.logvar.numpy(), "std": post.std.numpy(),
            "decoded": vae.decode(torch.from_numpy(z)).sample.numpy(), "round_trip": vae(torch.from_numpy(x)).sample.numpy()}

def run_tinyweb(vae: AutoencoderKL, device: str, x: np.ndarray = X, z: np.ndarray = Z) -> dict:
  post = vae.encode(Tensor(x, device=device))
  post.parameters.realize()   # (mean, logvar and std read it)
  return {"mean": post.mean.numpy(), "logvar": post.logvar.numpy(), "std": post.std.numpy(),
          "decoded": vae.decode(Tensor(z, device=device)).numpy(), "round_trip": vae(Tensor(x, device=device)).numpy()}

def assert_match(got: dict, want: dict, atol: float):
  for k in want:
    assert got[k].shape == want[k].shape, k
    scale = max(1.0, float(np.abs(want[k]).max()))
    np.testing.assert_allclose(got[k], want[k], rtol=0, atol=atol * scale, err_msg=k)

def test_matches_diffusers(saved, model_device):
  ref, path = saved
  vae = AutoencoderKL.from_pretrained(path, device=model_device)
  assert vae.config.scaling_factor == 0.18215 and vae.config.shift_factor is None
  want = run_reference(ref)
  assert want["mean"].shape == (2, 4, 16, 16) and want["decoded"].shape == (2, 3, 32, 32)
  assert want["logvar"].std() > 0.1 and want["decoded"].std() > 0.1   # (the random weights make no degenerate output)
  assert_match(run_tinyweb(vae, model_device), want, 2e-5)   # measured 1.2e-6 (CPU), 1.0e-6 (WEBGPU)
  # a posterior sample: mean + std * the given noise, or seeded noise from tinyweb's generator
  post = vae.encode(Tensor(X, device=model_device))
  noise = np.random.default_rng(3).standard_normal(Z.shape).astype(np.float32)
  np.testing.assert_allclose(post.sample(Tensor(noise, device=model_device)).numpy(), want["mean"] + want["std"] * noise, rtol=0, atol=1e-4)
  a, b, c = post.sample(seed=5).numpy(), post.sample(seed=5).numpy(), post.sample(seed=6).numpy()
  np.testing.assert_array_equal(a, b)
  assert np.abs(a - c).max() > 1e-3
  drawn = (a - want["mean"]) / want["std"]   # a standard normal draw
  assert abs(drawn.mean()) < 0.1 and 0.9 < drawn.std() < 1.1

def test_posterior_matches_diffusers():
  """DiagonalGaussianDistribution on parameters past the log-variance clamp (-30, 20) on both sides."""
  from diffusers.models.autoencoders.vae import DiagonalGaussianDistribution as Reference
  from tinyweb.models.vae import DiagonalGaussianDistribution
  params = np.random.default_rng(6).uniform(-50, 40, (2, 8, 3, 3)).astype(np.float32)
  ref, ours = Reference(torch.from_numpy(params)), DiagonalGaussianDistribution(Tensor(params, device="CPU"))
  assert ref.logvar.min() == -30 and ref.logvar.max() == 20
  for k in ("mean", "logvar", "std", "var"):
    np.testing.assert_allclose(getattr(ours, k).numpy(), getattr(ref, k).numpy(), rtol=1e-5, atol=0, err_msg=k)   # (exp: measured 1.5e-6)
  np.testing.assert_array_equal(ours.mode().numpy(), ref.mode().numpy())

def test_float16_checkpoint(tmp_path):
  """A float16 save_pretrained: loaded as float32 by default (the outputs of the float16 weights in float32), or kept in
  float16 with dtype= (a one-level VAE there: each float16 kernel is built anew, and the float32 ones are built already)."""
  ref = reference(CONFIG).half()
  ref.save_pretrained(tmp_path / "f16", safe_serialization=True)
  vae = AutoencoderKL.from_pretrained(tmp_path / "f16", device="CPU")
  assert vae.decoder.conv_out.weight.dtype == dtypes.float32
  assert_match(run_tinyweb(vae, "CPU"), run_reference(ref.float()), 2e-5)
  one_level = dict(CONFIG, down_block_types=["DownEncoderBlock2D"], up_block_types=["UpDecoderBlock2D"], block_out_channels=[32])
  ref = reference(one_level).half()
  ref.save_pretrained(tmp_path / "one", safe_serialization=True)
  half = AutoencoderKL.from_pretrained(tmp_path / "one", device="CPU", dtype=dtypes.float16)
  assert half.decoder.conv_out.weight.dtype == half.encoder.mid_block.attentions[0].to_q.bias.dtype == dtypes.float16
  np.testing.assert_array_equal(half.decoder.conv_out.weight.numpy(), ref.decoder.conv_out.weight.detach().numpy())
  z = Z[:1, :, :8, :8]
  out = half.decode(Tensor(z, device="CPU"))
  assert out.dtype == dtypes.float16
  with torch.no_grad(): want = ref.float().decode(torch.from_numpy(z)).sample.numpy()
  # float16 arithmetic throughout: measured 2.2e-3 for values up to 1.1
  np.testing.assert_allclose(out.numpy().astype(np.float32), want, rtol=0, atol=0.01 * np.abs(want).max())

def test_variants_and_sharded_checkpoint(tmp_path):
  """No mid-block attention, no quant convs, two resnets a level, shift_factor, in shards."""
  config = dict(CONFIG, layers_per_block=2, mid_block_add_attention=False, use_quant_conv=False, use_post_quant_conv=False,
                scaling_factor=0.5, shift_factor=0.1)
  ref = reference(config, seed=4)
  ref.save_pretrained(tmp_path, safe_serialization=True, max_shard_size="200KB")
  assert (tmp_path / "diffusion_pytorch_model.safetensors.index.json").exists()
  vae = AutoencoderKL.from_pretrained(tmp_path, device="CPU")
  assert vae.quant_conv is None and vae.encoder.mid_block.attentions == [None]
  assert (vae.config.scaling_factor, vae.config.shift_factor) == (0.5, 0.1)
  assert_match(run_tinyweb(vae, "CPU"), run_reference(ref), 2e-5)

def test_resnet_activations_and_32_groups():
  """act_fn (the resnets'; the encoder's and decoder's last activation stays SiLU) and a GroupNorm of one channel a group,
  checked on the mid block's resnet alone."""
  from tinyweb.models.vae import ResnetBlock2D
  from diffusers.models.resnet import ResnetBlock2D as Reference
  x = np.random.default_rng(5).standard_normal((1, 32, 4, 4)).astype(np.float32)
  for act in ("gelu", "mish", "relu"):
    torch.manual_seed(3)
    ref = Reference(in_channels=32, out_channels=64, temb_channels=None, eps=1e-6, groups=32, non_linearity=act).eval()
    block = ResnetBlock2D(32, 64, AutoencoderKLConfig.from_dict(dict(CONFIG, act_fn=act, norm_num_groups=32)), device="CPU")
    load_state_dict(block, {k: Tensor(v.numpy()) for k, v in ref.state_dict().items()})
    with torch.no_grad(): want = ref(torch.from_numpy(x), None).numpy()
    np.testing.assert_allclose(block(Tensor(x, device="CPU")).numpy(), want, rtol=0, atol=1e-5, err_msg=act)

# ---------------------------------------------------------------------------------------------------------------
# original (LDM) single-file names

def ldm_name(key: str, n_levels: int) -> str:
  """diffusers' name -> the original LDM name, written out here by hand (the test's own inverse of the mapping)."""
  key = key.replace("conv_norm_out", "norm_out").replace("conv_shortcut", "nin_shortcut")
  key = re.sub(r"mid_block\.resnets\.(\d)", lambda m: f"mid.block_{int(m.group(1)) + 1}", key)
  for a, b in (("group_norm", "norm"), ("to_q", "q"), ("to_k", "k"), ("to_v", "v"), ("to_out.0", "proj_out")):
    key = key.replace(f"mid_block.attentions.0.{a}.", f"mid.attn_1.{b}.")
  key = re.sub(r"down_blocks\.(\d+)\.resnets\.", r"down.\1.block.", key)
  key = re.sub(r"down_blocks\.(\d+)\.downsamplers\.0\.", r"down.\1.downsample.", key)
  key = re.sub(r"up_blocks\.(\d+)\.resnets\.", lambda m: f"up.{n_levels - 1 - int(m.group(1))}.block.", key)
  return re.sub(r"up_blocks\.(\d+)\.upsamplers\.0\.", lambda m: f"up.{n_levels - 1 - int(m.group(1))}.upsample.", key)

def ldm_checkpoint(config: dict, seed: int) -> dict:
  """A whole original checkpoint's tensors (torch): a random diffusers VAE's under the LDM names, the attention's
  weights as 1x1 convs, and tensors of other components."""
  n = len(config["block_out_channels"])
  ldm = {}
  for k, v in reference(config, seed).state_dict().items():
    name = "first_stage_model." + ldm_name(k, n)
    ldm[name] = v[:, :, None, None].clone() if ".attn_1." in name and name.endswith("weight") and v.ndim == 2 else v.clone()
  ldm["model.diffusion_model.out.0.weight"] = torch.ones(3)
  ldm["cond_stage_model.transformer.x"] = torch.ones(3)
  return ldm

@pytest.mark.parametrize("levels", [[32, 64], [32, 64, 64]])
def test_single_file_names_match_diffusers_converter(levels):
  from diffusers.loaders.single_file_utils import convert_ldm_vae_checkpoint
  config = dict(CONFIG, down_block_types=["DownEncoderBlock2D"] * len(levels), up_block_types=["UpDecoderBlock2D"] * len(levels),
                block_out_channels=levels)
  ldm = ldm_checkpoint(config, seed=7)
  assert "first_stage_model.decoder.up.0.block.0.nin_shortcut.weight" in ldm and ldm["first_stage_model.encoder.mid.attn_1.q.weight"].ndim == 4
  converted = convert_ldm_vae_checkpoint(ldm, config)   # diffusers' converter
  sd = {k: Tensor(v.numpy()) for k, v in ldm.items()}
  mapped = vae_state_dict_from_ldm(sd)                  # tinyweb's mapping, of the same tensors
  assert sorted(mapped) == sorted(converted)
  for k, v in converted.items(): np.testing.assert_array_equal(mapped[k].numpy(), v.numpy(), err_msg=k)
  inferred = vae_config_from_ldm(sd, norm_num_groups=8)
  assert all(inferred[k] == v for k, v in config.items() if k != "sample_size")
  assert inferred["mid_block_add_attention"] and inferred["use_quant_conv"] and inferred["use_post_quant_conv"]
  # a VAE alone (no prefix), with training leftovers
  alone = {k[len("first_stage_model."):]: v for k, v in sd.items() if k.startswith("first_stage_model.")} | {"loss.logvar": Tensor([0.0])}
  assert sorted(vae_state_dict_from_ldm(alone)) == sorted(converted)
  with pytest.raises(ValueError, match=r"'encoder\.down\.0\.attn\.0\.q\.weight' is not a tensor of an LDM VAE"):
    vae_state_dict_from_ldm(alone | {"encoder.down.0.attn.0.q.weight": Tensor([0.0])})
  if len(levels) == 3: return   # (the model outputs: on the two levels of the other tests, whose kernels are built)
  ref = diffusers.AutoencoderKL(**config).eval()
  ref.load_state_dict(converted, strict=True)
  vae = AutoencoderKL(inferred, device="CPU")
  load_state_dict(vae, mapped)
  assert_match(run_tinyweb(vae, "CPU"), run_reference(ref), 2e-5)

# ---------------------------------------------------------------------------------------------------------------
# refusals

@pytest.mark.parametrize("change,match", [
  ({"down_block_types": ["DownEncoderBlock2D", "AttnDownEncoderBlock2D"]}, "down_block_types .* is not supported"),
  ({"up_block_types": ["UpDecoderBlock2D"]}, r"up_block_types \('UpDecoderBlock2D',\) is not supported"),
  ({"act_fn": "tanh"}, "act_fn 'tanh' is not supported"),
  ({"norm_num_groups": 12}, "block_out_channels .* divisible by norm_num_groups 12"),
  ({"mid_block_add_attention": "yes"}, "mid_block_add_attention 'yes' is not supported"),
  ({"spatial_norm": True}, "config key 'spatial_norm' is not supported"),
  ({"_class_name": "AutoencoderTiny"}, "_class_name 'AutoencoderTiny' is not supported"),
])
def test_unsupported_config_is_refused(tmp_path, change, match):
  (tmp_path / "config.json").write_text(json.dumps({"_class_name": "AutoencoderKL", "force_upcast": True, **CONFIG, **change}))
  with pytest.raises(ValueError, match=re.escape(str(tmp_path / "config.json")) + ": " + match):
    AutoencoderKL.from_pretrained(tmp_path)

def test_bad_inputs_are_refused(tmp_path):
  (tmp_path / "config.json").write_text(json.dumps(CONFIG))
  with pytest.raises(FileNotFoundError, match="neither diffusion_pytorch_model.safetensors nor"): AutoencoderKL.from_pretrained(tmp_path)
  with pytest.raises(FileNotFoundError, match="config.json: not found"): AutoencoderKL.from_pretrained(tmp_path / "nowhere")
  vae = AutoencoderKL(AutoencoderKLConfig.from_dict(CONFIG), device="CPU")
  with pytest.raises(ValueError, match=r"decode: expected \(N, 4, H, W\), got \(1, 3, 8, 8\)"): vae.decode(Tensor.zeros(1, 3, 8, 8))
  with pytest.raises(ValueError, match=r"encode: expected \(N, 3, H, W\)"): vae.encode(Tensor.zeros(3, 8, 8))
  post = vae.encode(Tensor.zeros(1, 3, 8, 8))
  with pytest.raises(ValueError, match="noise of shape"): post.sample(Tensor.zeros(1, 4, 8, 8))
