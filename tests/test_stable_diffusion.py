"""The Stable Diffusion pipeline (tinyweb.models.stable_diffusion) end to end against diffusers' StableDiffusionPipeline:
a small random pipeline (CLIP tokenizer on the real vocabulary, a 2-layer text encoder, a 2-level UNet and VAE) saved
with save_pretrained, both pipelines given the same prompts and the same initial latents; the final latents and the
images compared. The same weights as an original single-file checkpoint (LDM names, made with the inverse mappings of
the component tests) give the same images."""
import json
import numpy as np
import pytest
from tinyweb import Tensor
from tinyweb.dtype import dtypes
from tinyweb.nn.state import safe_save
from tinyweb.models.stable_diffusion import StableDiffusionPipeline
from tinyweb.models.schedulers import DDIMScheduler

torch = pytest.importorskip("torch")
diffusers = pytest.importorskip("diffusers")
transformers = pytest.importorskip("transformers")
from test_model_clip import reference_vocabulary   # (the real CLIP vocabulary, derived with transformers' code)
from test_model_unet import reference as random_unet, to_ldm as unet_ldm_name
from test_model_vae import reference as random_vae, ldm_name as vae_ldm_name

UNET = dict(sample_size=8, in_channels=4, out_channels=4, block_out_channels=(32, 64), layers_per_block=1, cross_attention_dim=32,
            norm_num_groups=8, down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"), up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"),
            attention_head_dim=4)
VAE = dict(in_channels=3, out_channels=3, down_block_types=["DownEncoderBlock2D"] * 2, up_block_types=["UpDecoderBlock2D"] * 2,
           block_out_channels=[16, 32], layers_per_block=1, latent_channels=4, norm_num_groups=8, sample_size=16)
TEXT = dict(vocab_size=49408, hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=77,
            eos_token_id=49407, projection_dim=32)
SD15_SCHEDULER = dict(beta_schedule="scaled_linear", beta_start=0.00085, beta_end=0.012, steps_offset=1, timestep_spacing="leading",
                      set_alpha_to_one=False, clip_sample=False, num_train_timesteps=1000)
PROMPTS = ["a photograph of an astronaut riding a horse", "a red cube on a table, studio lighting"]
NEGATIVE = ["blurry", ""]
SIZE = 16   # pixels: sample_size 8 times the VAE's scale factor 2 (its two levels)

@pytest.fixture(scope="module")
def folder(tmp_path_factory):
  """The random pipeline, saved by diffusers (SD 1.5's scheduler config, an Euler scheduler), and diffusers' pipeline."""
  path = tmp_path_factory.mktemp("sd")
  return path, save_random_pipeline(path, tmp_path_factory.mktemp("vocab"))

def save_random_pipeline(path, tok_dir):
  """diffusers' StableDiffusionPipeline of random weights (seeded) at the sizes above, saved into the folder `path`
  (tok_dir: a folder for the tokenizer's files on the way); returns it."""
  vocab, merges = reference_vocabulary()
  (tok_dir / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
  (tok_dir / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
  tokenizer = transformers.CLIPTokenizer.from_pretrained(str(tok_dir), model_max_length=77)
  torch.manual_seed(3)
  text_encoder = transformers.CLIPTextModel(transformers.CLIPTextConfig(**TEXT, attn_implementation="eager")).eval()
  with torch.no_grad():
    for k, p in text_encoder.named_parameters():
      if "layer_norm" in k: p.add_(torch.randn_like(p) * 0.2)
  pipe = diffusers.StableDiffusionPipeline(vae=random_vae(VAE, seed=4), text_encoder=text_encoder, tokenizer=tokenizer, unet=random_unet(UNET, seed=5),
                                           scheduler=diffusers.EulerDiscreteScheduler.from_config(SD15_SCHEDULER), safety_checker=None,
                                           feature_extractor=None, requires_safety_checker=False)
  pipe.set_progress_bar_config(disable=True)
  pipe.save_pretrained(path, safe_serialization=True)
  return pipe

def start_latents(n: int, seed: int = 11) -> np.ndarray:
  return np.random.default_rng(seed).standard_normal((n, 4, SIZE // 2, SIZE // 2)).astype(np.float32)

def reference(pipe, latents: np.ndarray, **kw) -> dict:
  """diffusers' final latents and images (output_type "np": floats in [0, 1]) from the same start."""
  common = dict(height=SIZE, width=SIZE, latents=torch.from_numpy(latents), **kw)
  with torch.no_grad():
    return {"latent": pipe(output_type="latent", **common).images.numpy(), "float": pipe(output_type="np", **common).images}

def check(got_latent: np.ndarray, got_float: np.ndarray, got_uint8: np.ndarray, want: dict):
  scale = float(np.abs(want["latent"]).max())
  np.testing.assert_allclose(got_latent, want["latent"], rtol=0, atol=1e-4 * scale)
  np.testing.assert_allclose(got_float, want["float"], rtol=0, atol=2e-4)
  assert 0.05 < float(want["float"].std())   # (an image with something in it: not clamped flat)
  pil = (want["float"] * 255).round().astype(np.uint8)   # diffusers' PIL output
  assert got_uint8.dtype == np.uint8 and got_uint8.shape == pil.shape
  assert np.abs(got_uint8.astype(int) - pil).max() <= 1 and (got_uint8 == pil).mean() > 0.99

def run(pipe: StableDiffusionPipeline, latents: np.ndarray, device: str, **kw) -> tuple:
  return tuple(pipe(latents=Tensor(latents, device=device), height=SIZE, width=SIZE, output=out, **kw).numpy() for out in ("latent", "float", "uint8"))

def test_guided_euler_matches_diffusers(folder, model_device):
  """Two prompts with negative prompts, classifier-free guidance 7.5, the folder's Euler scheduler, 4 steps."""
  path, ref = folder
  pipe = StableDiffusionPipeline.from_pretrained(path, device=model_device)
  assert type(pipe.scheduler).__name__ == "EulerDiscreteScheduler"
  latents = start_latents(2)
  kw = dict(prompt=PROMPTS, negative_prompt=NEGATIVE, num_inference_steps=4, guidance_scale=7.5)
  want = reference(ref, latents, **kw)
  check(*run(pipe, latents, model_device, prompt=PROMPTS, negative_prompt=NEGATIVE, steps=4, guidance_scale=7.5), want)

def test_ddim_unguided_with_clip_skip_matches_diffusers(folder):
  """DDIM (configured from the folder's scheduler config, as diffusers' from_config), no guidance, clip_skip 1."""
  path, ref = folder
  pipe = StableDiffusionPipeline.from_pretrained(path, scheduler="ddim")
  assert isinstance(pipe.scheduler, DDIMScheduler) and pipe.scheduler.config.steps_offset == 1
  ddim_ref = diffusers.StableDiffusionPipeline(**{**ref.components, "scheduler": diffusers.DDIMScheduler.from_config(ref.scheduler.config)})
  ddim_ref.set_progress_bar_config(disable=True)
  latents = start_latents(1, seed=12)
  # diffusers 0.42's clip_skip reads text_encoder.text_model, which transformers 5 no longer has: its rule (the layer
  # clip_skip before the last, through the final layer norm) is applied here and the embeddings passed in
  ids = ref.tokenizer(PROMPTS[1], padding="max_length", max_length=77, truncation=True, return_tensors="pt").input_ids
  with torch.no_grad():
    hidden = ref.text_encoder(ids, output_hidden_states=True).hidden_states
    embeds = ref.text_encoder.final_layer_norm(hidden[-2])
  want = reference(ddim_ref, latents, prompt_embeds=embeds, num_inference_steps=3, guidance_scale=1.0)
  check(*run(pipe, latents, "CPU", prompt=PROMPTS[1], steps=3, guidance_scale=1.0, clip_skip=1), want)

def ldm_checkpoint(pipe) -> dict:
  """The pipeline's weights as an original SD 1.x single file: model.diffusion_model., first_stage_model. and
  cond_stage_model.transformer. tensors (the attention's 1x1 conv weights 4-D, as LDM stores them)."""
  out = {"model.diffusion_model." + unet_ldm_name(k, UNET): v for k, v in pipe.unet.state_dict().items()}
  for k, v in pipe.vae.state_dict().items():
    name = "first_stage_model." + vae_ldm_name(k, len(VAE["block_out_channels"]))
    out[name] = v[:, :, None, None] if ".attn_1." in name and name.endswith("weight") and v.ndim == 2 else v
  out |= {"cond_stage_model.transformer.text_model." + k: v for k, v in pipe.text_encoder.state_dict().items()}   # (transformers 5 drops text_model.)
  out["alphas_cumprod"] = torch.ones(1000)   # (a schedule buffer original checkpoints have: not a weight of any part)
  return {k: Tensor(v.detach().numpy().copy()) for k, v in out.items()}

def test_single_file_checkpoint_gives_the_same_images(folder, tmp_path):
  path, ref = folder
  safe_save(ldm_checkpoint(ref), str(tmp_path / "sd.safetensors"))
  single = StableDiffusionPipeline.from_single_file(tmp_path / "sd.safetensors", config=path)
  pipe = StableDiffusionPipeline.from_pretrained(path)
  latents = start_latents(1, seed=13)
  a, b = (p(PROMPTS[0], latents=Tensor(latents), steps=2, height=SIZE, width=SIZE, output="float").numpy() for p in (single, pipe))
  np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)

def test_float16_weights_load_as_float16(folder):
  """dtype reaches every part (each part's float16 arithmetic is checked against diffusers in its own test module)."""
  from tinyweb.nn.state import get_state_dict
  pipe = StableDiffusionPipeline.from_pretrained(folder[0], dtype=dtypes.float16)
  for part in (pipe.text_encoder, pipe.unet, pipe.vae):
    assert {t.dtype for t in get_state_dict(part).values()} == {dtypes.float16}, type(part).__name__

def test_seeds_draw_the_initial_noise(folder):
  pipe = StableDiffusionPipeline.from_pretrained(folder[0])
  a, b, c = (pipe(PROMPTS[0], steps=1, seed=s, output="latent").numpy() for s in (1, 1, 2))
  assert a.shape == (1, 4, 8, 8)
  np.testing.assert_array_equal(a, b)
  assert np.abs(a - c).max() > 0.1

def test_bad_calls_and_folders_are_refused(folder, tmp_path):
  path, _ = folder
  pipe = StableDiffusionPipeline.from_pretrained(path)
  with pytest.raises(TypeError, match="prompt must be a str or a non-empty list of str"): pipe([])
  with pytest.raises(ValueError, match="2 negative prompts for 1 prompts"): pipe("a", negative_prompt=["b", "c"])
  with pytest.raises(ValueError, match="height and width must be positive multiples of 8, got 20 x 16"): pipe("a", height=20, width=16)
  with pytest.raises(ValueError, match="height and width must be positive multiples of 8, got 0 x 16"): pipe("a", height=0, width=16)
  with pytest.raises(ValueError, match=r"latents must be a Tensor of shape \(1, 4, 8, 8\)"): pipe("a", latents=Tensor.zeros(1, 4, 4, 4))
  with pytest.raises(ValueError, match="output must be 'uint8', 'float' or 'latent'"): pipe("a", output="pil")
  with pytest.raises(ValueError, match="clip_skip must be an int from 0 to 2"): pipe("a", steps=1, clip_skip=3)
  with pytest.raises(ValueError, match="scheduler 'pndm' is not one of euler, euler_ancestral, ddim"):
    StableDiffusionPipeline.from_pretrained(path, scheduler="pndm")
  with pytest.raises(TypeError, match="scheduler must be a name .* a scheduler class or instance, got 3"):
    StableDiffusionPipeline.from_pretrained(path, scheduler=3)
  mine = DDIMScheduler.from_config(SD15_SCHEDULER)
  assert StableDiffusionPipeline.from_pretrained(path, scheduler=mine).scheduler is mine   # (an instance is used as given)
  with pytest.raises(FileNotFoundError, match="model_index.json: not found"): StableDiffusionPipeline.from_pretrained(tmp_path)
  (tmp_path / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionXLPipeline"}))
  with pytest.raises(ValueError, match="_class_name 'StableDiffusionXLPipeline' is not supported"): StableDiffusionPipeline.from_pretrained(tmp_path)
