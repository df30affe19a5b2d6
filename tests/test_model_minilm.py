"""all-MiniLM-L6-v2 (tinyweb.models.bert) against its reference libraries: the WordPiece tokenizer against `tokenizers`
(the Rust one) on the folder's tokenizer.json, the sentence embeddings against sentence-transformers on CPU and WEBGPU,
the BERT encoder against transformers' BertModel, the demo's ranking against sentence-transformers'. tests/testdata.py
fetches the folder (scripts/setup.sh runs it)."""
import json, os, pathlib, re
import numpy as np
import pytest
from tinyweb.device import Device
from tinyweb.nn.state import safe_load, load_state_dict
from tinyweb.models.bert import WordPieceTokenizer, BertModel, SentenceEncoder, bert_state_dict
import testdata

tokenizers = pytest.importorskip("tokenizers")

def folder() -> str: return os.path.dirname(testdata.path("all-MiniLM-L6-v2/model.safetensors"))

def tokenizer_json() -> str: return testdata.path("all-MiniLM-L6-v2/tokenizer.json")

TEXTS = [
  "Hello, world! How's it going?",
  "Café naïve résumé: Ångström, Øresund, façade, jalapeño",
  "ΣΑΣ ὈΔΥΣΣΕΎΣ İstanbul Straße ﬁne",                        # capital sigma lowercased char by char; dotted I; a ligature
  "我爱北京天安门, 東京 and 서울 and カタカナ",                 # CJK ideographs are words of their own, Hangul and kana are not
  "It costs $3.14 (or €2,50)... 100% — really?! <tag> a_b c-d e/f #1 @home ~x^y|z`",
  "2024-01-15 12:30:45 +0100, 1,000,000 and 0.000001 and 1e-9",
  "x" * 150 + " fine " + "y" * 100 + " " + "y" * 101,          # past max_input_chars_per_word (100): [UNK]
  "supercalifragilisticexpialidocious antidisestablishmentarianism",
  "emoji 😀 snowman ☃ dna \U0001F9EC ✓",                          # not in the vocabulary: [UNK]
  "tab\tnew\nline\x00nul\x07bell\u200bzwsp\ufffdrepl\ue000private\u00adsoft",   # control and format characters are removed
  "مرحبا بالعالم שלום नमस्ते",
  "[MASK] fills [CLS]x[SEP]y [PAD] [UNK]",                      # the added tokens are matched in the text
  "I don't think they're here, aren't they? We'll see.",
  "",
  "   ",
  "\t\n \u3000 \xa0",
  " ".join(f"word{i}" for i in range(400)),                     # more than 256 tokens: truncated
]

def rust_tokenizer(max_length=256):
  ref = tokenizers.Tokenizer.from_file(tokenizer_json())
  ref.no_padding()
  ref.enable_truncation(max_length)
  return ref

def test_tokens_match_the_rust_tokenizer():
  tok, ref = WordPieceTokenizer.from_file(tokenizer_json(), max_length=256), rust_tokenizer()
  for text in TEXTS:
    want = ref.encode(text)
    got = tok.encode(text)
    assert got == want.ids, (text, want.tokens, tok.tokenize(text))
    assert tok.decode(got) == ref.decode(want.ids), text
    if len(got) < 256: assert tok.tokenize(text) == want.tokens[1:-1], text
  assert len(tok.encode(TEXTS[-1])) == 256
  # without max_length: the file's truncation (128), as the Rust tokenizer reads it
  default, ref = WordPieceTokenizer.from_file(tokenizer_json()), tokenizers.Tokenizer.from_file(tokenizer_json())
  ref.no_padding()
  assert default.max_length == 128 and default.encode(TEXTS[-1]) == ref.encode(TEXTS[-1]).ids

def test_padded_batch_matches_the_rust_tokenizer():
  tok, ref = WordPieceTokenizer.from_file(tokenizer_json(), max_length=256), rust_tokenizer()
  ref.enable_padding(pad_id=0, pad_token="[PAD]")   # to the longest of the batch
  want = ref.encode_batch(TEXTS)
  ids, mask = tok(TEXTS)
  assert ids == [e.ids for e in want]
  assert mask == [e.attention_mask for e in want]
  ids8, mask8 = tok(TEXTS[:3], pad_to_multiple_of=8)
  assert {len(r) for r in ids8} == {24} and [sum(m) for m in mask8] == [len(tok.encode(t)) for t in TEXTS[:3]]
  assert tok([]) == ([], [])
  with pytest.raises(TypeError, match="list of texts"): tok("one text")

def test_added_tokens_and_bert_processing_match_the_rust_tokenizer(tmp_path):
  """Added tokens matched in the raw text and after normalization, with lstrip and rstrip, and BertProcessing: the file's
  variant that all-MiniLM-L6-v2 does not use."""
  spec = json.loads(pathlib.Path(tokenizer_json()).read_text(encoding="utf-8"))
  n = len(spec["model"]["vocab"])
  def added(i, content, lstrip, rstrip, normalized):
    return {"id": n + i, "content": content, "single_word": False, "lstrip": lstrip, "rstrip": rstrip, "normalized": normalized,
            "special": not normalized}
  spec["added_tokens"] += [added(0, "<Extra>", True, True, True), added(1, "ünïcode", False, False, True),
                           added(2, "[M]", True, False, False), added(3, "[MASK]x", False, True, False)]
  spec["post_processor"] = {"type": "BertProcessing", "sep": ["[SEP]", 102], "cls": ["[CLS]", 101]}
  spec["truncation"] = spec["padding"] = None
  path = tmp_path / "tokenizer.json"
  path.write_text(json.dumps(spec), encoding="utf-8")
  tok, ref = WordPieceTokenizer.from_file(path), tokenizers.Tokenizer.from_file(str(path))
  assert tok.max_length is None
  for text in ["a <EXTRA>  b <extra>c", "Unicode ÜNÏCODE ünïcodes", "x   [M]  y [M]", "[MASK]x  y [MASK] [MASK]xx", " <Extra> "]:
    want = ref.encode(text)
    assert tok.encode(text) == want.ids, (text, want.tokens, tok.tokenize(text))
    for skip in (True, False): assert tok.decode(want.ids, skip) == ref.decode(want.ids, skip_special_tokens=skip), (text, skip)

@pytest.mark.parametrize("part,kind", [("model", "BPE"), ("normalizer", "NFKC"), ("pre_tokenizer", "ByteLevel")])
def test_unsupported_tokenizer_json_is_refused(tmp_path, part, kind):
  spec = json.loads(pathlib.Path(tokenizer_json()).read_text(encoding="utf-8"))
  spec[part] = {**(spec[part] or {}), "type": kind}
  path = tmp_path / "tokenizer.json"
  path.write_text(json.dumps(spec), encoding="utf-8")
  with pytest.raises(ValueError, match=re.escape(f"{path}: {part} type '{kind}' is not supported")): WordPieceTokenizer.from_file(path)

def test_unsupported_pooling_is_refused(tmp_path):
  for name in ("modules.json", "config.json"): (tmp_path / name).write_bytes(pathlib.Path(folder(), name).read_bytes())
  (tmp_path / "1_Pooling").mkdir()
  (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 384, "pooling_mode_cls_token": True}))
  with pytest.raises(ValueError, match=r"1_Pooling.config\.json: pooling \['cls'\] is not supported"):
    SentenceEncoder.from_folder(tmp_path)

# ---------------------------------------------------------------------------------------------------------------
# embeddings

# a query and sentences of different lengths (4 to 18 tokens, [CLS] and [SEP] included): one batch, padded
QUERY = "A man is playing a guitar on stage."
CANDIDATES = ["Someone performs music with a stringed instrument in front of an audience.", "A woman is slicing onions.",
              "Hi!", "The stock market closed higher today after a volatile session, led by technology shares.",
              "A musician strums his guitar at a concert.", "Cats sleep most of the day."]
LONG = " ".join(["The committee reviewed every proposal in detail before voting."] * 30)   # 302 tokens: truncated to 256

@pytest.fixture(scope="module", params=["CPU", "WEBGPU"])
def encoder(request) -> SentenceEncoder:
  ok, why = Device.check(request.param)
  if not ok: pytest.skip(f"{request.param} unavailable: {why}")
  return SentenceEncoder.from_folder(folder(), request.param)

@pytest.fixture(scope="module")
def encoded(encoder) -> np.ndarray:
  """tinyweb's embeddings of [QUERY, *CANDIDATES], once per device for the tests that read them."""
  return encoder.encode([QUERY, *CANDIDATES]).numpy()

@pytest.fixture(scope="module")
def reference():
  st = pytest.importorskip("sentence_transformers")
  return st.SentenceTransformer(folder(), device="cpu")

# measured: at most 3.0e-7 on CPU, 2.5e-7 on WEBGPU (lavapipe), for components up to 0.2 (the rows have length 1)
ATOL = 2e-6

def test_embeddings_match_sentence_transformers(encoded, reference):
  got, want = encoded, reference.encode([QUERY, *CANDIDATES])
  assert got.shape == want.shape == (7, 384)
  np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)

def test_truncated_long_sentence_matches_sentence_transformers(encoder, reference):
  assert len(encoder.tokenizer.encode(LONG)) == 256 < len(encoder.tokenizer.tokenize(LONG)) + 2
  np.testing.assert_allclose(encoder.encode([LONG]).numpy(), reference.encode([LONG]), rtol=0, atol=ATOL)

def test_similarity_ranking_matches_sentence_transformers(encoded, reference):
  got, want = encoded, reference.encode([QUERY, *CANDIDATES])
  got_scores, want_scores = got[1:] @ got[0], want[1:] @ want[0]
  assert got_scores.argmax() == want_scores.argmax() == 4   # the musician strumming a guitar
  np.testing.assert_array_equal(np.argsort(-got_scores), np.argsort(-want_scores))

def test_demo_ranks_like_sentence_transformers(reference, capsys):
  from demos.embed import main
  ranked = main([QUERY, *CANDIDATES, "--device", "CPU"])   # (the embedding tests' batch: its kernels are built already)
  want = reference.encode([QUERY, *CANDIDATES])
  assert ranked[0][1] == CANDIDATES[int((want[1:] @ want[0]).argmax())]
  assert [s for _, s in ranked] == [CANDIDATES[i] for i in np.argsort(-(want[1:] @ want[0]))]
  assert CANDIDATES[4] in capsys.readouterr().out

# ---------------------------------------------------------------------------------------------------------------
# the encoder alone, against transformers

def test_bert_classifier_checkpoint_matches_transformers(tmp_path):
  """A small random BertForSequenceClassification (its tensors under "bert.", a classifier head to leave out) with token
  types, padding and the tanh GELU: BertModel's last hidden state and pooled output against transformers' (eager, float32)."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  import safetensors.torch
  config = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                max_position_embeddings=40, type_vocab_size=3, hidden_act="gelu_new", layer_norm_eps=1e-7)
  torch.manual_seed(0)
  hf = transformers.BertForSequenceClassification(transformers.BertConfig(**config, attn_implementation="eager")).eval()
  safetensors.torch.save_file(hf.state_dict(), tmp_path / "model.safetensors")
  ids, types = torch.randint(0, 99, (3, 11)), torch.randint(0, 3, (3, 11))
  mask = torch.ones(3, 11, dtype=torch.long)
  mask[1, 7:], mask[2, 2:] = 0, 0
  with torch.no_grad(): want = hf.bert(input_ids=ids, attention_mask=mask, token_type_ids=types)
  model = BertModel(config, device="CPU")
  load_state_dict(model, bert_state_dict(safe_load(tmp_path / "model.safetensors")))
  hidden = model(ids.tolist(), mask.tolist(), types.tolist())
  # measured: 4.8e-7 and 7.5e-8 (values of order 1)
  np.testing.assert_allclose(hidden.numpy(), want.last_hidden_state.numpy(), rtol=0, atol=5e-6)
  np.testing.assert_allclose(model.pooler(hidden).numpy(), want.pooler_output.numpy(), rtol=0, atol=5e-6)

def test_bert_refuses_what_it_does_not_implement():
  config = dict(vocab_size=10, hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=16, max_position_embeddings=6)
  with pytest.raises(ValueError, match="hidden_act 'silu' is not supported"): BertModel({**config, "hidden_act": "silu"})
  with pytest.raises(ValueError, match="lacks vocab_size"): BertModel({k: v for k, v in config.items() if k != "vocab_size"})
  with pytest.raises(ValueError, match="7 tokens is more than max_position_embeddings"): BertModel(config, device="CPU")([[1] * 7])
