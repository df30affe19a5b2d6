"""tinyweb.models.unet against diffusers' UNet2DConditionModel with the same random weights (save_pretrained folders):
tiny SD 1.x-, SD 2.x- and SDXL-like configs, float16 files, the sharded form, classifier-free-guidance batches, original
(LDM single-file) checkpoints through diffusers' own converter, and what the model refuses.

The configs share their channels (32, 64), sample size (16 x 16), batch (2) and text length, so most kernels are built
once for the whole file."""
import json, re
import numpy as np
import pytest
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes
from tinyweb.device import Device
from tinyweb.nn.state import safe_save, safe_load, StateDictError
from tinyweb.models.unet import UNet2DConditionModel, Upsample2D, unet_state_dict_from_ldm, LDM_PREFIX

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")

BASE = dict(sample_size=16, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1, cross_attention_dim=32,
            norm_num_groups=8)
SD1 = dict(BASE, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
           attention_head_dim=8)
# SD 2.x: linear proj_in/proj_out, attention_head_dim a list (of numbers of heads, diffusers' naming), upcast_attention
SD2 = dict(SD1, use_linear_projection=True, attention_head_dim=[4, 8], upcast_attention=True)
# SDXL: no attention in the first block, two transformer layers in the second, the text_time addition embedding
SDXL = dict(BASE, down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
            attention_head_dim=[2, 8], transformer_layers_per_block=[1, 2], use_linear_projection=True, addition_embed_type="text_time",
            addition_time_embed_dim=8, projection_class_embeddings_input_dim=16 + 6 * 8)

def quick_device() -> str:
  """WEBGPU where it is there, else the CPU: for the tests of what does not depend on the device (config handling, file
  formats), since WEBGPU builds these kernels about three times faster than the CPU's compiler (test_sd1 runs on both)."""
  return "WEBGPU" if Device.check("WEBGPU")[0] else "CPU"

def reference(config: dict, seed: int = 0):
  torch.manual_seed(seed)
  model = diffusers.UNet2DConditionModel(**config).eval()
  with torch.no_grad():   # (diffusers zero-initializes nothing here, but make every tensor clearly non-trivial)
    for p in model.parameters(): p.add_(torch.randn_like(p) * 0.02)
  return model

def inputs(batch: int = 2, size=(16, 16), seed: int = 1, sdxl: bool = False):
  """Latents, text embeddings and (SDXL) the added conditions, as classifier-free guidance batches them: the same latents
  twice, the unconditional text first."""
  rng = np.random.default_rng(seed)
  latents = rng.standard_normal((1, 4, *size)).astype(np.float32).repeat(batch, 0)
  text = rng.standard_normal((batch, 7, 32)).astype(np.float32)
  text[0] = 0   # (an "empty prompt")
  added = {"text_embeds": rng.standard_normal((batch, 16)).astype(np.float32),
           "time_ids": np.array([[16, 16, 0, 0, 16, 16]] * batch, np.float32)} if sdxl else None
  return latents, text, added

def run_reference(model, latents, timestep, text, added=None) -> np.ndarray:
  t = torch.from_numpy(np.asarray(timestep)) if isinstance(timestep, np.ndarray) else timestep
  kw = {"added_cond_kwargs": {k: torch.from_numpy(v) for k, v in added.items()}} if added else {}
  with torch.no_grad(): return model(torch.from_numpy(latents), t, torch.from_numpy(text), **kw).sample.numpy()

def run_tinyweb(model, latents, timestep, text, added=None, device="CPU") -> np.ndarray:
  t = Tensor(timestep, device=device) if isinstance(timestep, np.ndarray) else timestep
  added = {k: Tensor(v, device=device) for k, v in added.items()} if added else None
  return model(Tensor(latents, device=device), t, Tensor(text, device=device), added).numpy()

def assert_close(got: np.ndarray, want: np.ndarray, rel: float = 2e-5):
  assert got.shape == want.shape
  scale = float(np.abs(want).max())
  assert scale > 0.1   # (an output that means something)
  np.testing.assert_allclose(got, want, rtol=0, atol=rel * scale)

@pytest.fixture(scope="module")
def sd1_folder(tmp_path_factory):
  folder = tmp_path_factory.mktemp("sd1")
  model = reference(SD1)
  model.save_pretrained(folder)
  return folder, model

# measured (outputs of order 1): 1.8e-6 on CPU, 2.6e-6 on WEBGPU
def test_sd1_matches_diffusers(sd1_folder, model_device):
  folder, ref = sd1_folder
  model = UNet2DConditionModel.from_pretrained(folder, device=model_device)
  latents, text, _ = inputs()
  got, want = run_tinyweb(model, latents, 981, text, device=model_device), run_reference(ref, latents, 981, text)
  assert_close(got, want)
  assert not np.allclose(got[0], got[1], atol=1e-3)   # the unconditional and conditional halves differ

def test_sd2_matches_diffusers(tmp_path):
  ref, device = reference(SD2), quick_device()
  ref.save_pretrained(tmp_path)
  model = UNet2DConditionModel.from_pretrained(tmp_path, device=device)
  assert [b.attentions[0].transformer_blocks[0].attn1.heads for b in model.down_blocks if b.attentions] == [4]
  latents, text, _ = inputs()
  t = np.array([999.0, 10.5], np.float32)   # one timestep per sample
  assert_close(run_tinyweb(model, latents, t, text, device=device), run_reference(ref, latents, t, text))

def test_sdxl_matches_diffusers(tmp_path):
  ref = reference(SDXL)
  ref.save_pretrained(tmp_path)
  model = UNet2DConditionModel.from_pretrained(tmp_path)
  assert model.down_blocks[0].attentions is None and len(model.down_blocks[1].attentions[0].transformer_blocks) == 2
  latents, text, added = inputs(sdxl=True)
  t = np.array(500, np.int64)   # a 0-d tensor
  assert_close(run_tinyweb(model, latents, t, text, added), run_reference(ref, latents, t, text, added))

def test_float16_weights(sd1_folder, tmp_path):
  """A float16 save: read as float32 by default (the reference reads the same file, upcast); dtype=float16 keeps it."""
  folder, _ = sd1_folder
  ref16 = diffusers.UNet2DConditionModel.from_pretrained(folder).to(torch.float16)
  ref16.save_pretrained(tmp_path)
  ref = diffusers.UNet2DConditionModel.from_pretrained(tmp_path, torch_dtype=torch.float32).eval()
  assert safe_load(tmp_path / "diffusion_pytorch_model.safetensors")["conv_in.weight"].dtype == dtypes.float16
  latents, text, _ = inputs()
  want, device = run_reference(ref, latents, 981, text), quick_device()
  model = UNet2DConditionModel.from_pretrained(tmp_path, device=device)
  assert model.conv_in.weight.dtype == dtypes.float32
  assert_close(run_tinyweb(model, latents, 981, text, device=device), want)
  if not Device[device].has_dtype(dtypes.float16): pytest.skip(f"{device} has no float16")
  half = UNet2DConditionModel.from_pretrained(tmp_path, dtype=dtypes.float16, device=device)
  assert half.conv_in.weight.dtype == dtypes.float16
  got = run_tinyweb(half, latents, 981, text, device=device)
  assert got.dtype == np.float16
  assert_close(got.astype(np.float32), want, rel=2e-2)   # float16 activations

def test_sharded_checkpoint(sd1_folder, tmp_path):
  _, ref = sd1_folder
  ref.save_pretrained(tmp_path, max_shard_size="20KB")
  assert (tmp_path / "diffusion_pytorch_model.safetensors.index.json").exists()
  model = UNet2DConditionModel.from_pretrained(tmp_path)
  sd = ref.state_dict()
  for name, want in [("conv_in.weight", sd["conv_in.weight"]), ("up_blocks.1.attentions.0.proj_out.weight", sd["up_blocks.1.attentions.0.proj_out.weight"])]:
    got = model.up_blocks[1].attentions[0].proj_out.weight if name.startswith("up") else model.conv_in.weight
    np.testing.assert_array_equal(got.numpy(), want.numpy())

def test_upsample_to_an_odd_size_matches_torch():
  """A skip connection of odd size (sample sizes not a multiple of 2**(blocks-1)): nearest interpolation to its size."""
  up = Upsample2D(3)
  x = np.random.default_rng(0).standard_normal((1, 3, 4, 5)).astype(np.float32)
  conv = torch.nn.Conv2d(3, 3, 3, padding=1)
  with torch.no_grad():
    conv.weight.copy_(torch.from_numpy(up.conv.weight.numpy())), conv.bias.copy_(torch.from_numpy(up.conv.bias.numpy()))
    for size in [(7, 9), (8, 10)]:   # (an odd skip connection, an even one)
      want = conv(torch.nn.functional.interpolate(torch.from_numpy(x), size=size, mode="nearest")).numpy()
      np.testing.assert_allclose(up(Tensor(x), size).numpy(), want, rtol=0, atol=1e-5)

# ---------------------------------------------------------------------------------------------------------------
# original (LDM) checkpoints

def to_ldm(name: str, config: dict) -> str:
  """diffusers' name -> the original checkpoint's, written out by hand from the LDM layout (not from tinyweb's mapping):
  input_blocks[0] is conv_in, then per down block `layers` (resnet, attention) pairs and a downsampler; output_blocks are
  layers + 1 per up block, the upsampler after the attention (or the resnet)."""
  n, layers = len(config["block_out_channels"]), config["layers_per_block"]
  res = lambda rest: (rest.replace("norm1.", "in_layers.0.").replace("conv1.", "in_layers.2.").replace("norm2.", "out_layers.0.")
                      .replace("conv2.", "out_layers.3.").replace("time_emb_proj.", "emb_layers.1.").replace("conv_shortcut.", "skip_connection."))
  fixed = {"time_embedding.linear_1.": "time_embed.0.", "time_embedding.linear_2.": "time_embed.2.", "conv_in.": "input_blocks.0.0.",
           "conv_norm_out.": "out.0.", "conv_out.": "out.2.", "add_embedding.linear_1.": "label_emb.0.0.", "add_embedding.linear_2.": "label_emb.0.2."}
  for new, old in fixed.items():
    if name.startswith(new): return old + name[len(new):]
  if (m := re.fullmatch(r"down_blocks\.(\d+)\.(resnets|attentions|downsamplers)\.(\d+)\.(.+)", name)):
    b, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
    if kind == "downsamplers": return f"input_blocks.{1 + b * (layers + 1) + layers}.0.op.{rest[5:]}"
    return f"input_blocks.{1 + b * (layers + 1) + j}.{0 if kind == 'resnets' else 1}.{res(rest) if kind == 'resnets' else rest}"
  if (m := re.fullmatch(r"mid_block\.(resnets|attentions)\.(\d+)\.(.+)", name)):
    return f"middle_block.{2 * int(m[2])}.{res(m[3])}" if m[1] == "resnets" else f"middle_block.1.{m[3]}"
  if (m := re.fullmatch(r"up_blocks\.(\d+)\.(resnets|attentions|upsamplers)\.(\d+)\.(.+)", name)):
    b, kind, j, rest = int(m[1]), m[2], int(m[3]), m[4]
    if kind == "upsamplers":
      has_attention = config["up_block_types"][b].startswith("CrossAttn")
      return f"output_blocks.{b * (layers + 1) + layers}.{2 if has_attention else 1}.{rest}"
    return f"output_blocks.{b * (layers + 1) + j}.{0 if kind == 'resnets' else 1}.{res(rest) if kind == 'resnets' else rest}"
  raise AssertionError(f"no LDM name for {name}")

@pytest.mark.parametrize("config", [SD1, SDXL], ids=["sd1", "sdxl"])
def test_single_file_checkpoint_matches_diffusers_converter(config, tmp_path):
  """Random tensors under the original names (with a whole checkpoint's other keys beside them): diffusers'
  convert_ldm_unet_checkpoint loads them into its model, tinyweb's from_single_file reads the same file; same outputs."""
  from diffusers.loaders.single_file_utils import convert_ldm_unet_checkpoint
  ref = reference(config)
  gen = torch.Generator().manual_seed(3)
  ldm = {LDM_PREFIX + to_ldm(k, config): torch.randn(v.shape, generator=gen) * 0.1 + ("norm" in k.split(".")[-2] and k.endswith(".weight"))
         for k, v in ref.state_dict().items()}
  ldm |= {"first_stage_model.decoder.conv_in.weight": torch.zeros(2, 2), "alphas_cumprod": torch.ones(3)}
  ref.load_state_dict(convert_ldm_unet_checkpoint(ldm, dict(config)), strict=True)
  safe_save({k: Tensor(v.numpy()) for k, v in ldm.items()}, str(tmp_path / "model.safetensors"))
  model = UNet2DConditionModel.from_single_file(tmp_path / "model.safetensors", config)
  sdxl = "addition_embed_type" in config
  latents, text, added = inputs(sdxl=sdxl)
  assert_close(run_tinyweb(model, latents, 981, text, added), run_reference(ref, latents, 981, text, added))
  # the mapping alone: a name it has no place for
  with pytest.raises(ValueError, match=r"input_blocks\.9\.0\.op\.weight has no place"):
    unet_state_dict_from_ldm({LDM_PREFIX + "input_blocks.9.0.op.weight": Tensor.zeros(1)}, config)

# ---------------------------------------------------------------------------------------------------------------
# refusals

@pytest.mark.parametrize("key,value,message", [
  ("class_embed_type", "timestep", "class_embed_type 'timestep' is not supported"),
  ("resnet_time_scale_shift", "scale_shift", "resnet_time_scale_shift 'scale_shift' is not supported .*'default'"),
  ("addition_embed_type", "text", "addition_embed_type 'text' is not supported .*'text_time'"),
  ("num_attention_heads", 4, "num_attention_heads 4 is not supported"),
  ("only_cross_attention", True, "only_cross_attention True is not supported"),
  ("down_block_types", ("AttnDownBlock2D", "DownBlock2D"), "down_block_types has 'AttnDownBlock2D', which is not supported"),
  ("mid_block_type", "UNetMidBlock2DSimpleCrossAttn", "mid_block_type 'UNetMidBlock2DSimpleCrossAttn' is not supported"),
  ("attention_head_dim", [8, 8, 8], r"attention_head_dim \[8, 8, 8\] has 3 entries for 2 down blocks"),
  ("time_embedding_type", "fourier", "time_embedding_type 'fourier' is not supported"),
])
def test_unsupported_config_is_refused(tmp_path, key, value, message):
  (tmp_path / "config.json").write_text(json.dumps({**SD1, key: value}))
  with pytest.raises(ValueError, match=re.escape(str(tmp_path / "config.json")) + ": " + message):
    UNet2DConditionModel.from_pretrained(tmp_path)

def test_bad_inputs_and_files_are_refused(sd1_folder, tmp_path):
  folder, _ = sd1_folder
  model = UNet2DConditionModel.from_pretrained(folder)
  latents, text, _ = inputs()
  x, ctx = Tensor(latents), Tensor(text)
  with pytest.raises(ValueError, match=r"sample must be floats of shape \(batch, 4, height, width\)"): model(Tensor(latents[:, :3]), 1, ctx)
  with pytest.raises(ValueError, match=r"encoder_hidden_states must be \(batch 2, length, cross_attention_dim 32\), got \(1, 7, 32\)"):
    model(x, 1, Tensor(text[:1]))
  with pytest.raises(ValueError, match="encoder_hidden_states must be"): model(x, 1, Tensor(text[..., :16]))
  with pytest.raises(ValueError, match=r"timestep must be a number or a Tensor of 1 or 2 \(the batch\) timesteps, got shape \(3,\)"):
    model(x, Tensor([1.0, 2.0, 3.0]), ctx)
  with pytest.raises(ValueError, match="added_cond_kwargs given, but addition_embed_type is None"): model(x, 1, ctx, {"text_embeds": 1})
  xl = UNet2DConditionModel(SDXL)
  with pytest.raises(ValueError, match="needs added_cond_kwargs"): xl(x, 1, ctx)
  with pytest.raises(ValueError, match="projection_class_embeddings_input_dim"):
    xl(x, 1, ctx, {"text_embeds": Tensor.zeros(2, 15), "time_ids": Tensor.zeros(2, 6)})
  with pytest.raises(FileNotFoundError, match="neither diffusion_pytorch_model.safetensors nor"):
    (tmp_path / "config.json").write_text(json.dumps(SD1))
    UNet2DConditionModel.from_pretrained(tmp_path)
  # a checkpoint of another config: strict loading names the keys
  safe_save({"conv_in.weight": Tensor.zeros(32, 4, 3, 3)}, str(tmp_path / "diffusion_pytorch_model.safetensors"))
  with pytest.raises(StateDictError, match="missing keys"): UNet2DConditionModel.from_pretrained(tmp_path)
