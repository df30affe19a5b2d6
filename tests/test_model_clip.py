"""CLIP's text side (tinyweb.models.clip) against its reference libraries: the BPE tokenizer against transformers'
CLIPTokenizer on OpenAI's real vocabulary (bpe_simple_vocab_16e6.txt.gz, which tests/testdata.py fetches), small random
CLIPTextModel / CLIPTextModelWithProjection against transformers' on CPU and WEBGPU (from save_pretrained folders, float32
and float16), and the single-file key mappings against diffusers' own converters.

transformers 5 has one CLIPTokenizer, backed by the `tokenizers` library (CLIPTokenizerFast is the same class; the
pure-Python "slow" tokenizer of transformers 4 is gone): that is the reference, and the one diffusers' pipelines call."""
import gzip, json, re
import numpy as np
import pytest
from tinyweb.dtype import dtypes
from tinyweb.tensor import Tensor
from tinyweb.nn.state import safe_load, load_state_dict, StateDictError
from tinyweb.models.clip import (CLIPTokenizer, CLIPTextModel, CLIPTextModelWithProjection, CLIPTextConfig, clip_state_dict_from_ldm,
                                 clip_state_dict_from_open_clip, SD1_CLIP_PREFIX, SDXL_CLIP_PREFIX, SDXL_OPEN_CLIP_PREFIX)
import testdata

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

def bpe_gz() -> str: return testdata.path("bpe_simple_vocab_16e6.txt.gz")

# ---------------------------------------------------------------------------------------------------------------
# the tokenizer

TEXTS = [
  "a photograph of an astronaut riding a horse",
  "Hello, world! How's it going?  I'm fine; we'll see, they'd've known.",
  "It costs $3.14 (or €2,50)... 100% — really?! <tag> a_b c-d e/f #1 @home ~x^y|z`",
  "2024-01-15 12:30:45, 1,000,000 and 0.000001 and 1e-9",                 # digits are single tokens
  "Café naïve résumé: Ångström, Øresund, façade, jalapeño",
  "e\u0301 and A\u030a: composed by NFC",                                   # decomposed accents
  "ΣΑΣ ὈΔΥΣΣΕΎΣ İstanbul Straße ﬁne ǅ",                                   # capital sigma lowercased char by char; dotted I; ligatures
  "我爱北京天安门, 東京 and 서울 and カタカナ",                               # CJK: runs of letters
  "नमस्ते مرحبا بالعالم שלום ½ ² Ⅻ ١٢٣",                                  # combining marks are not letters; other digits
  "emoji 😀 snowman ☃ dna \U0001F9EC ✓ family 👨‍👩‍👧 flag 🇫🇷",
  "tab\tnew\nline \u3000ideographic\xa0nbsp\u2009thin   and\r\n\r\nmore",    # each run of whitespace: one space
  "nul\x00bell\x07 sep\x1c zwsp\u200b bom\ufeff soft\xadhyphen",           # control and format characters are kept
  "a<|endoftext|>b <|startoftext|>c, A<|ENDOFTEXT|>! <|endoftext|>!",      # the special tokens, matched as transformers does
  "wow!!! hello! '' 's 'x y'all'd've ''s",
  "",
  "   \t\n  ",
  " ".join(f"word{i}" for i in range(60)),                                 # past 77 tokens: truncated
  "supercalifragilisticexpialidocious antidisestablishmentarianism pneumonoultramicroscopicsilicovolcanoconiosis",
]

def reference_vocabulary() -> tuple[dict, list]:
  """CLIP's vocabulary and merges from the merges file, derived as OpenAI's simple_tokenizer does it, with transformers'
  bytes_to_unicode (nothing of tinyweb's)."""
  from transformers.convert_slow_tokenizer import bytes_to_unicode
  with gzip.open(bpe_gz(), "rt", encoding="utf-8") as f: merges = f.read().split("\n")[1:49152 - 256 - 2 + 1]
  symbols = list(bytes_to_unicode().values())
  vocab = symbols + [s + "</w>" for s in symbols] + ["".join(m.split()) for m in merges] + ["<|startoftext|>", "<|endoftext|>"]
  return {t: i for i, t in enumerate(vocab)}, merges

def added(content, normalized=True):
  return {"__type": "AddedToken", "content": content, "lstrip": False, "normalized": normalized, "rstrip": False, "single_word": False}

@pytest.fixture(scope="module")
def tokenizer_folders(tmp_path_factory) -> dict:
  """Three Hugging Face tokenizer folders on the real vocabulary: vocab.json and merges.txt alone; SD 1.x's
  (tokenizer_config.json and special_tokens_map.json as the v1-5 repository has them: BOS/EOS with normalized true);
  SDXL's tokenizer_2 (the same, padding with "!")."""
  vocab, merges = reference_vocabulary()
  out = {}
  for name, pad in (("bare", None), ("sd1", "<|endoftext|>"), ("sdxl2", "!")):
    folder = tmp_path_factory.mktemp(name)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n", encoding="utf-8")
    if pad:
      specials = {"bos_token": added("<|startoftext|>"), "eos_token": added("<|endoftext|>"), "unk_token": added("<|endoftext|>"),
                  "pad_token": added(pad) if pad != "!" else "!"}
      config = {"add_prefix_space": False, "clean_up_tokenization_spaces": True, "do_lower_case": True, "errors": "replace",
                "model_max_length": 77, "tokenizer_class": "CLIPTokenizer", **specials}
      (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
      (folder / "special_tokens_map.json").write_text(json.dumps(
        {k: {kk: vv for kk, vv in v.items() if kk != "__type"} if isinstance(v, dict) else v for k, v in specials.items()}), encoding="utf-8")
    out[name] = folder
  out["saved"] = tmp_path_factory.mktemp("saved")   # SDXL's, as transformers 5 saves it: tokenizer.json, no vocab.json
  transformers.CLIPTokenizer.from_pretrained(str(out["sdxl2"])).save_pretrained(str(out["saved"]))
  assert not (out["saved"] / "vocab.json").exists()
  return out

def references(folder) -> list:
  """transformers' CLIP tokenizer classes (one in transformers 5; the slow and the fast one where both exist)."""
  classes = dict.fromkeys(c for c in (transformers.CLIPTokenizer, getattr(transformers, "CLIPTokenizerFast", None)) if c is not None)
  return [c.from_pretrained(str(folder)) for c in classes]

@pytest.mark.parametrize("name", ["bare", "sd1", "sdxl2", "saved"])
def test_tokenizer_matches_transformers(tokenizer_folders, name):
  tok = CLIPTokenizer.from_folder(tokenizer_folders[name])
  assert tok.model_max_length == 77 and len(tok.vocab) == 49408
  assert (tok.bos_id, tok.eos_id, tok.pad_id) == (49406, 49407, 0 if name in ("sdxl2", "saved") else 49407)
  for ref in references(tokenizer_folders[name]):
    want = ref(TEXTS, padding="max_length", max_length=77, truncation=True)
    got = tok(TEXTS)
    for text, g, w in zip(TEXTS, got.input_ids, want.input_ids): assert g == w, (text, ref.convert_ids_to_tokens(w), tok.tokenize(text))
    assert got.attention_mask == want.attention_mask
    for text in TEXTS:
      w = ref(text).input_ids   # untruncated
      assert tok.encode(text) == w, text
      if len(w) < 77: assert tok.tokenize(text) == ref.convert_ids_to_tokens(w)[1:-1], text
      for skip in (False, True): assert tok.decode(w, skip) == ref.decode(w, skip_special_tokens=skip), (text, skip)
    longest = ref(TEXTS[:4], padding="longest").input_ids
    assert tok(TEXTS[:4], padding="longest").input_ids == tok(TEXTS[:4], padding=True).input_ids == longest
    assert tok(TEXTS[:4], padding=False, max_length=10).input_ids == ref(TEXTS[:4], truncation=True, max_length=10).input_ids
    assert tok(TEXTS[-2], padding=False, truncation=False).input_ids == ref(TEXTS[-2]).input_ids   # a str: one row
  assert len(tok(TEXTS[-2]).input_ids) == 77 and len(tok.encode(TEXTS[-2])) > 77
  if name in ("sdxl2", "saved"): assert tok(["hi!"]).input_ids[0][:5] == [49406, 1883, 0, 49407, 0]   # "!" is the padding token, id 0

def test_tokenizer_decodes_partial_characters_like_transformers(tokenizer_folders):
  """Ids cut inside a character's bytes: the bad bytes become U+FFFD as in the `tokenizers` library."""
  tok, ref = CLIPTokenizer.from_folder(tokenizer_folders["bare"]), references(tokenizer_folders["bare"])[0]
  for text in ("😀 我爱 👨‍👩‍👧", "Ångström ✓"):
    ids = ref(text).input_ids
    for cut in range(1, len(ids)):
      for part in (ids[:cut], ids[cut:]): assert tok.decode(part) == ref.decode(part), part

def test_tokenizer_from_the_merges_file_matches_transformers(tokenizer_folders):
  """from_bpe_file builds CLIP's vocabulary itself, from the .gz: the same ids as transformers on a folder derived
  independently from the same file."""
  tok = CLIPTokenizer.from_bpe_file(bpe_gz())
  ref = references(tokenizer_folders["bare"])[0]
  assert tok(TEXTS).input_ids == ref(TEXTS, padding="max_length", max_length=77, truncation=True).input_ids
  assert tok.vocab == ref.get_vocab()
  sdxl = CLIPTokenizer.from_bpe_file(bpe_gz(), pad_token="!")
  assert sdxl(["a cat"]).input_ids[0][4:] == [0] * 73

def test_letters_and_digits_match_the_tokenizers_regex():
  """The pre-tokenizer's \\p{L} and \\p{N} done with unicodedata, against the `tokenizers` library's regex on every
  assigned character of the Basic Multilingual Plane (one text each of letters, digits, others)."""
  tokenizers = pytest.importorskip("tokenizers")
  import unicodedata
  from tinyweb.models.clip import _words
  split = tokenizers.pre_tokenizers.Split(tokenizers.Regex(r"""'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+"""), "removed", invert=True)
  chars = [chr(c) for c in range(0x80, 0x10000) if unicodedata.category(chr(c)) not in ("Cn", "Cs", "Zs", "Zl", "Zp") and c != 0x85]
  for i in range(0, len(chars), 97):   # a letter, a digit and a symbol between each character: each class is cut apart
    text = " ".join(c + "a1!" for c in chars[i:i + 97])
    assert _words(text) == [w for w, _ in split.pre_tokenize_str(text)], text

def test_tokenizer_refuses_bad_input(tokenizer_folders, tmp_path):
  tok = CLIPTokenizer.from_folder(tokenizer_folders["bare"])
  with pytest.raises(ValueError, match="padding must be"): tok(["a"], padding="left")
  with pytest.raises(ValueError, match="max_length must be an int of at least 2"): tok(["a"], max_length=1)
  with pytest.raises(TypeError, match="a text must be a str, got int"): tok([3])
  with pytest.raises(ValueError, match="id 49408 is not in the vocabulary"): tok.decode([49408])
  with pytest.raises(FileNotFoundError, match=re.escape(f"{tmp_path / 'merges.txt'}: not found")):
    (tmp_path / "vocab.json").write_text('{"a": 0}')
    CLIPTokenizer.from_folder(tmp_path)
  (tmp_path / "merges.txt").write_text("#version: 0.2\na b c\n")
  with pytest.raises(ValueError, match="merges.txt: line 2 is not a merge of two tokens"): CLIPTokenizer.from_folder(tmp_path)
  (tmp_path / "merges.txt").write_text("a b\n")
  with pytest.raises(ValueError, match=r"merge 1 \(a b\) has 'b', which is not in the vocabulary"): CLIPTokenizer.from_folder(tmp_path)
  (tmp_path / "vocab.json").write_text('{"a": 0, "b": 1, "ab": 2, "<|startoftext|>": 3}')
  with pytest.raises(ValueError, match="eos_token '<|endoftext|>' is not in the vocabulary"): CLIPTokenizer.from_folder(tmp_path)
  (tmp_path / "vocab.json").write_text('{"a": 0, "b": 1, "ab": 2, "<|startoftext|>": 3, "<|endoftext|>": 4}')
  (tmp_path / "tokenizer_config.json").write_text('{"model_max_length": 1}')
  with pytest.raises(ValueError, match="tokenizer_config.json: model_max_length must be an int >= 2"): CLIPTokenizer.from_folder(tmp_path)
  (tmp_path / "tokenizer.json").write_text('{"model": {"type": "Unigram", "vocab": []}}')
  with pytest.raises(ValueError, match="tokenizer.json: not a CLIP tokenizer"): CLIPTokenizer.from_folder(tmp_path)
  (tmp_path / "bad.gz").write_bytes(b"not gzip")
  with pytest.raises(ValueError, match="bad.gz: not a gzipped BPE merges file"): CLIPTokenizer.from_bpe_file(tmp_path / "bad.gz")

# ---------------------------------------------------------------------------------------------------------------
# the text encoders, against transformers

# A: SD 1.x's kind (quick_gelu; eos_token_id 2, so the pooled position is each row's largest id), a CLIPTextModel saved in float32.
# B: SDXL text_encoder_2's kind (gelu; the pooled position is the first eos_token_id), a CLIPTextModelWithProjection in float16.
CONFIGS = {
  "A": dict(vocab_size=99, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=16,
            hidden_act="quick_gelu", layer_norm_eps=1e-5, projection_dim=24, bos_token_id=0, eos_token_id=2, pad_token_id=1),
  "B": dict(vocab_size=99, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4, max_position_embeddings=16,
            hidden_act="gelu", layer_norm_eps=1e-6, projection_dim=24, bos_token_id=97, eos_token_id=98, pad_token_id=0),
}
IDS = [[0, 5, 17, 98, 3, 98, 2, 2, 2, 2, 2, 2],     # A: 98 the largest id (first at 3); B: the first 98 at 3
       [97, 44, 12, 98, 98, 98, 98, 98, 98, 98, 98, 98],   # padded with EOS: the first one
       [7, 33, 71, 8, 60, 61, 62, 63, 64, 65, 71, 70]]    # A: the largest, 71, first at 2; B: no 98 at all (transformers takes 0)
MASK = [[1] * 12, [1] * 5 + [0] * 7, [1] * 12]

@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
  """{name: (folder, transformers model in float32 from that folder)}: the reference reads back what it saved (B's float16
  weights upcast), so both sides compute with the same numbers."""
  out = {}
  for name, config in CONFIGS.items():
    torch.manual_seed(0 if name == "A" else 1)
    cls = transformers.CLIPTextModel if name == "A" else transformers.CLIPTextModelWithProjection
    model = cls(transformers.CLIPTextConfig(**config, attn_implementation="eager")).eval()
    with torch.no_grad():   # LayerNorms off their initial ones and zeros, so their weights are checked too
      for k, p in model.named_parameters():
        if "layer_norm" in k: p.add_(torch.randn_like(p) * 0.2)
    folder = tmp_path_factory.mktemp(f"clip{name}")
    (model.half() if name == "B" else model).save_pretrained(folder)
    out[name] = folder, cls.from_pretrained(folder, torch_dtype=torch.float32, attn_implementation="eager").eval()
  return out

def reference_outputs(model, mask=None):
  with torch.no_grad():
    out = model(torch.tensor(IDS), attention_mask=None if mask is None else torch.tensor(MASK), output_hidden_states=True)
  return out

def check_outputs(got, want, atol: float):
  Tensor.realize_all(got.last_hidden_state, got.pooler_output, got.hidden_states[-2], *([got.text_embeds] if got.text_embeds is not None else []))
  np.testing.assert_allclose(got.last_hidden_state.numpy(), want.last_hidden_state.numpy(), rtol=0, atol=atol)
  assert len(got.hidden_states) == len(want.hidden_states)
  np.testing.assert_allclose(got.hidden_states[-2].numpy(), want.hidden_states[-2].numpy(), rtol=0, atol=atol)   # not final-normed
  pooled = want.pooler_output if hasattr(want, "pooler_output") else None
  if pooled is not None: np.testing.assert_allclose(got.pooler_output.numpy(), pooled.numpy(), rtol=0, atol=atol)
  if hasattr(want, "text_embeds"): np.testing.assert_allclose(got.text_embeds.numpy(), want.text_embeds.numpy(), rtol=0, atol=atol)

def test_text_model_matches_transformers(saved, model_device):
  """A: last_hidden_state, every hidden state's count and the penultimate, the pooled output at each row's largest id."""
  folder, ref = saved["A"]
  model = CLIPTextModel.from_pretrained(folder, device=model_device)
  assert model.text_model.embeddings.token_embedding.weight.dtype == dtypes.float32
  want = reference_outputs(ref)
  got = model(Tensor(IDS, dtype=dtypes.int32, device=model_device))
  check_outputs(got, want, atol=2e-5)   # (values of order 1)
  pooled = want.last_hidden_state[torch.arange(3), torch.tensor([3, 3, 2])]   # the argmax rule's positions, spelled out
  np.testing.assert_allclose(got.pooler_output.numpy(), pooled.numpy(), rtol=0, atol=2e-5)

def test_text_model_with_projection_from_float16_matches_transformers(saved, model_device):
  """B (float16 file, loaded as float32): text_embeds, the pooled output at the first EOS, with a padding mask."""
  folder, ref = saved["B"]
  assert safe_load(folder / "model.safetensors")["text_projection.weight"].dtype == dtypes.float16
  model = CLIPTextModelWithProjection.from_pretrained(folder, device=model_device)
  want = reference_outputs(ref, MASK)
  got = model(IDS, MASK)
  check_outputs(got, want, atol=2e-5)
  pooled = want.last_hidden_state[torch.arange(3), torch.tensor([3, 3, 0])]   # the first EOS (none in the last row: 0)
  np.testing.assert_allclose(got.pooler_output.numpy(), pooled.numpy(), rtol=0, atol=2e-5)

@pytest.mark.parametrize("model_device", ["WEBGPU"])   # (the browser's case; on the CPU it would double the file's compile time)
def test_float16_weights_stay_float16(saved, model_device):
  from tinyweb.device import Device
  if not (ok := Device.check(model_device))[0]: pytest.skip(f"{model_device} unavailable: {ok[1]}")
  if not Device[model_device].has_dtype(dtypes.float16):
    with pytest.raises(ValueError, match=f"device {model_device} has no float16"):
      CLIPTextModelWithProjection.from_pretrained(saved["B"][0], device=model_device, dtype=dtypes.float16)
    return
  folder, ref = saved["B"]
  model = CLIPTextModelWithProjection.from_pretrained(folder, device=model_device, dtype=dtypes.float16)
  assert model.text_projection.weight.dtype == model.text_model.encoder.layers[0].mlp.fc1.weight.dtype == dtypes.float16
  got, want = model(IDS), reference_outputs(ref)
  assert got.text_embeds.dtype == dtypes.float16
  np.testing.assert_allclose(got.text_embeds.float().numpy(), want.text_embeds.numpy(), rtol=0, atol=3e-2)   # (float16 math)

# ---------------------------------------------------------------------------------------------------------------
# single-file checkpoints, against diffusers' converters

def random_like(shapes: dict, seed: int) -> dict:
  g = torch.Generator().manual_seed(seed)
  return {k: torch.randn(s, generator=g) * (0.3 if len(s) > 1 else 1) for k, s in shapes.items()}

def tinyweb_sd(sd: dict) -> dict:
  return {k: Tensor(v.numpy(), device="CPU") for k, v in sd.items()}

@pytest.mark.parametrize("prefix", [SD1_CLIP_PREFIX, SDXL_CLIP_PREFIX])
def test_ldm_clip_mapping_matches_diffusers(saved, prefix):
  """SD 1.x's cond_stage_model.transformer.text_model.* / SDXL's conditioner.embedders.0.transformer.text_model.*:
  diffusers' convert_ldm_clip_checkpoint into transformers' model vs clip_state_dict_from_ldm into tinyweb's."""
  from diffusers.loaders.single_file_utils import convert_ldm_clip_checkpoint
  ref = transformers.CLIPTextModel(transformers.CLIPTextConfig(**CONFIGS["A"], attn_implementation="eager")).eval()
  shapes = {"text_model." + k: tuple(v.shape) for k, v in ref.state_dict().items() if "position_ids" not in k}
  original = {prefix + k: v for k, v in random_like(shapes, 2).items()}
  original[prefix + "text_model.embeddings.position_ids"] = torch.arange(16)[None]   # (saved by older transformers)
  original["model.diffusion_model.out.2.weight"] = torch.zeros(3)                     # another component's tensor
  converted = convert_ldm_clip_checkpoint(original)
  # transformers >= 5.6's CLIPTextModel has no text_model. level (diffusers takes the prefix off then too)
  missing, unexpected = ref.load_state_dict({k.removeprefix("text_model."): v for k, v in converted.items()}, strict=False)
  assert not missing and unexpected == ["embeddings.position_ids"]
  model = CLIPTextModel(CONFIGS["A"], device="CPU")
  load_state_dict(model, clip_state_dict_from_ldm(tinyweb_sd(original), prefix))
  check_outputs(model(IDS), reference_outputs(ref), atol=5e-5)

def open_clip_shapes(c: dict, layers: int) -> dict:
  h, i = c["hidden_size"], c["intermediate_size"]
  out = {"token_embedding.weight": (c["vocab_size"], h), "positional_embedding": (c["max_position_embeddings"], h),
         "ln_final.weight": (h,), "ln_final.bias": (h,), "text_projection": (h, c["projection_dim"]), "logit_scale": ()}
  for n in range(layers):
    b = f"transformer.resblocks.{n}."
    out |= {b + "ln_1.weight": (h,), b + "ln_1.bias": (h,), b + "attn.in_proj_weight": (3 * h, h), b + "attn.in_proj_bias": (3 * h,),
            b + "attn.out_proj.weight": (h, h), b + "attn.out_proj.bias": (h,), b + "ln_2.weight": (h,), b + "ln_2.bias": (h,),
            b + "mlp.c_fc.weight": (i, h), b + "mlp.c_fc.bias": (i,), b + "mlp.c_proj.weight": (h, i), b + "mlp.c_proj.bias": (h,)}
  return out

def test_open_clip_mapping_matches_diffusers():
  """SDXL's OpenCLIP bigG under conditioner.embedders.1.model.* (open_clip's names, q/k/v stacked, text_projection
  transposed): diffusers' convert_open_clip_checkpoint into transformers' CLIPTextModelWithProjection vs
  clip_state_dict_from_open_clip into tinyweb's."""
  from diffusers.loaders.single_file_utils import convert_open_clip_checkpoint
  ref = transformers.CLIPTextModelWithProjection(transformers.CLIPTextConfig(**CONFIGS["B"], attn_implementation="eager")).eval()
  original = {SDXL_OPEN_CLIP_PREFIX + k: v for k, v in random_like(open_clip_shapes(CONFIGS["B"], 3), 3).items()}
  original["conditioner.embedders.0.transformer.text_model.final_layer_norm.bias"] = torch.zeros(32)   # the other encoder's
  converted = convert_open_clip_checkpoint(ref, original, prefix=SDXL_OPEN_CLIP_PREFIX)
  missing, unexpected = ref.load_state_dict(converted, strict=False)
  assert not missing and not unexpected
  model = CLIPTextModelWithProjection(CONFIGS["B"], device="CPU")
  load_state_dict(model, clip_state_dict_from_open_clip(tinyweb_sd(original), SDXL_OPEN_CLIP_PREFIX))
  check_outputs(model(IDS), reference_outputs(ref), atol=5e-5)

def test_open_clip_mapping_for_sd2():
  """SD 2.x's CLIPTextModel has the first 23 of OpenCLIP's 24 blocks and no projection: num_layers and projection=False."""
  original = {"cond_stage_model.model." + k: torch.zeros(s) for k, s in open_clip_shapes(CONFIGS["B"], 3).items()}
  sd = clip_state_dict_from_open_clip(tinyweb_sd(original), "cond_stage_model.model.", num_layers=2, projection=False)
  model = CLIPTextModel({**CONFIGS["B"], "num_hidden_layers": 2})
  load_state_dict(model, sd)   # (strict: exactly the model's tensors)

def test_single_file_mappings_refuse_what_they_do_not_know():
  original = {SDXL_OPEN_CLIP_PREFIX + k: Tensor.zeros(*s) for k, s in open_clip_shapes(CONFIGS["B"], 1).items()}
  with pytest.raises(ValueError, match=re.escape(f"'{SDXL_OPEN_CLIP_PREFIX}transformer.resblocks.0.ls_1.gamma' is not a tensor of an OpenCLIP")):
    clip_state_dict_from_open_clip({**original, SDXL_OPEN_CLIP_PREFIX + "transformer.resblocks.0.ls_1.gamma": Tensor.zeros(32)})
  with pytest.raises(ValueError, match="has no tensor under 'cond_stage_model.model.'"):
    clip_state_dict_from_open_clip(original, "cond_stage_model.model.")
  with pytest.raises(ValueError, match="has no tensor under 'cond_stage_model.transformer.'"): clip_state_dict_from_ldm(original)

# ---------------------------------------------------------------------------------------------------------------
# errors

def test_text_model_refuses_bad_weights_and_configs(saved, tmp_path):
  import safetensors.torch
  folder, ref = saved["A"]
  weights = {k: v for k, v in ref.state_dict().items() if "position_ids" not in k and k != "encoder.layers.1.mlp.fc2.bias"}
  safetensors.torch.save_file(weights, tmp_path / "model.safetensors")
  config = json.loads((folder / "config.json").read_text())
  (tmp_path / "config.json").write_text(json.dumps(config))
  with pytest.raises(StateDictError, match=r"missing keys \(1\): text_model\.encoder\.layers\.1\.mlp\.fc2\.bias"):
    CLIPTextModel.from_pretrained(tmp_path, device="CPU")
  for change, message in [({"hidden_act": "silu"}, "hidden_act 'silu' is not supported"),
                          ({"num_attention_heads": 5}, "hidden_size 32 is not a multiple of num_attention_heads 5"),
                          ({"vocab_size": None}, "the config lacks vocab_size"),
                          ({"num_hidden_layers": "2"}, "num_hidden_layers must be a positive int"),
                          ({"model_type": "clip"}, "model_type 'clip' is not a CLIP text encoder's")]:
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in {**config, **change}.items() if v is not None}))
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'config.json'}: {message}")): CLIPTextModel.from_pretrained(tmp_path, device="CPU")
  (tmp_path / "config.json").write_text(json.dumps(config))
  (tmp_path / "model.safetensors").unlink()
  with pytest.raises(FileNotFoundError, match="neither model.safetensors nor model.safetensors.index.json"):
    CLIPTextModel.from_pretrained(tmp_path, device="CPU")
  model = CLIPTextModel(CONFIGS["A"], device="CPU")
  with pytest.raises(ValueError, match=r"17 tokens is more than max_position_embeddings \(16\)"): model([[1] * 17])
  with pytest.raises(ValueError, match="input_ids must be integers of shape"): model([1, 2, 3])
  with pytest.raises(ValueError, match="attention_mask must be shaped like input_ids"): model(IDS, [[1] * 12])
  assert CLIPTextConfig.from_dict(CONFIGS["A"]).hidden_act == "quick_gelu"
