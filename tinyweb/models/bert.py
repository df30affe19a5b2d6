"""BERT encoders with Hugging Face's parameter names, the WordPiece tokenizer of a Hugging Face tokenizer.json, and
sentence-transformers' embeddings on top of both (all-MiniLM-L6-v2: BERT, mean pooling, L2 normalization).

  enc = SentenceEncoder.from_folder(os.path.expanduser("~/.cache/tinyweb/testdata/all-MiniLM-L6-v2"))
  emb = enc.encode(["A cat sits on the mat.", "A dog plays in the park."])   # (2, 384), each row of length 1
  (emb[0] * emb[1]).sum().item()                                            # their cosine similarity

`WordPieceTokenizer` is pure Python (no numpy, no tensors), so it runs wherever tinyweb does, Pyodide included. It gives
the ids of the `tokenizers` library (the Rust one) for the tokenizer.json files it accepts: a WordPiece model, a
BertNormalizer or none, a BertPreTokenizer or none, TemplateProcessing or BertProcessing or no post-processor; any
other type is refused with a ValueError naming the file and the type. It pads a batch to its longest sequence, on the
right, whatever padding the file asks for (as sentence-transformers does)."""
from __future__ import annotations
import os, string, unicodedata
from typing import Optional, Sequence, Union
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes
from tinyweb.nn import Linear, LayerNorm, Embedding
from tinyweb.nn.state import safe_load, load_state_dict
from tinyweb.models.hub import read_json, WHITESPACE, ids_with_added_tokens

# ---------------------------------------------------------------------------------------------------------------
# the tokenizer

_ASCII_PUNCTUATION = frozenset(string.punctuation)   # (Rust's is_ascii_punctuation: it includes symbols such as $ + < = > ^ ` | ~)
# the CJK ideograph blocks that BertNormalizer surrounds with spaces (each becomes a word of its own)
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF),
        (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))

def _is_control(c: str) -> bool:   # control, format, private-use and surrogate characters, but the three that count as whitespace
  return c not in "\t\n\r" and unicodedata.category(c) in ("Cc", "Cf", "Co", "Cs")

def _is_cjk(c: str) -> bool: return any(lo <= ord(c) <= hi for lo, hi in _CJK)

def _is_punctuation(c: str) -> bool: return c in _ASCII_PUNCTUATION or unicodedata.category(c)[0] == "P"

class WordPieceTokenizer:
  """The tokenizer a Hugging Face tokenizer.json describes, for BERT's WordPiece files.

  tok.encode(text) -> list[int]: the ids with the post-processor's special tokens ([CLS] ... [SEP]), truncated to
  max_length. tok.tokenize(text) -> list[str]: the tokens between them, untruncated.
  tok(texts) -> (input_ids, attention_mask): plain lists of lists of ints, each row padded on the right with the padding
  id to the batch's longest (or to a multiple of pad_to_multiple_of), mask 1 on tokens and 0 on padding.
  tok.decode(ids) -> str: the text of the ids, special tokens left out.

  max_length: the most ids a sequence keeps, special tokens included; None: the file's truncation max_length if it has
  one, else no truncation. Texts are matched against the file's added tokens first ("[MASK]" in a text is the mask
  token), as the Rust library does."""
  def __init__(self, spec: dict, max_length: Optional[int] = None, name: str = "tokenizer.json"):
    self.name = name
    def refuse(what: str, part: Optional[dict], known: Sequence[Optional[str]]):
      kind = None if part is None else part.get("type")
      if kind not in known:
        raise ValueError(f"{name}: {what} type {kind!r} is not supported (WordPieceTokenizer reads {' or '.join(map(repr, known))})")
    if not isinstance(spec, dict) or not isinstance(spec.get("model"), dict):
      raise ValueError(f"{name}: not a tokenizers JSON file (no 'model' object)")
    model = spec["model"]
    refuse("model", model, ["WordPiece"])
    refuse("normalizer", spec.get("normalizer"), ["BertNormalizer", None])
    refuse("pre_tokenizer", spec.get("pre_tokenizer"), ["BertPreTokenizer", None])
    refuse("post_processor", spec.get("post_processor"), ["TemplateProcessing", "BertProcessing", None])

    if not isinstance(model.get("vocab"), dict): raise ValueError(f"{name}: the WordPiece model has no vocab")
    self.vocab: dict[str, int] = dict(model["vocab"])
    self.prefix, self.max_chars = model.get("continuing_subword_prefix", "##"), model.get("max_input_chars_per_word", 100)
    if (unk := model.get("unk_token", "[UNK]")) not in self.vocab: raise ValueError(f"{name}: the unk token {unk!r} is not in the vocabulary")
    self.unk_id = self.vocab[unk]
    self.normalizer = spec.get("normalizer")
    self.split_words = spec.get("pre_tokenizer") is not None
    self.added = {t["content"]: t for t in spec.get("added_tokens") or []}
    for t in self.added.values():
      if t.get("single_word"): raise ValueError(f"{name}: added token {t['content']!r} is single_word, which WordPieceTokenizer does not implement")
    self.special_ids = {t["id"] for t in self.added.values() if t.get("special")}
    # the added tokens matched in the raw text, and those matched after normalization (by their normalized content,
    # which is also the text they decode to)
    self.raw_added = {s: t for s, t in self.added.items() if not t.get("normalized")}
    self.normalized_added = {self.normalize(s): t for s, t in self.added.items() if t.get("normalized")}
    self.id_to_token = {i: s for s, i in self.vocab.items()} | {t["id"]: s for s, t in (self.raw_added | self.normalized_added).items()}

    self.prefix_ids, self.suffix_ids = self._template(spec.get("post_processor"))
    if max_length is None: max_length = (spec.get("truncation") or {}).get("max_length")
    if max_length is not None and max_length < len(self.prefix_ids) + len(self.suffix_ids):
      raise ValueError(f"{name}: max_length {max_length} leaves no room for the {len(self.prefix_ids) + len(self.suffix_ids)} special tokens")
    self.max_length = max_length
    self.pad_id = (spec.get("padding") or {}).get("pad_id", self.vocab.get("[PAD]", 0))
    self.decoder = spec.get("decoder")

  @classmethod
  def from_file(cls, path: Union[str, os.PathLike], max_length: Optional[int] = None) -> WordPieceTokenizer:
    return cls(read_json(path), max_length, os.fspath(path))

  def _template(self, post: Optional[dict]) -> tuple[list[int], list[int]]:
    """The special ids before and after a single sequence."""
    if post is None: return [], []
    if post["type"] == "BertProcessing": return [post["cls"][1]], [post["sep"][1]]
    before, after, seq = [], [], 0
    for item in post["single"]:
      if "Sequence" in item:
        if item["Sequence"]["id"] != "A" or seq: raise ValueError(f"{self.name}: TemplateProcessing's single template must hold sequence A once")
        seq += 1
      else: (after if seq else before).extend(post["special_tokens"][item["SpecialToken"]["id"]]["ids"])
    return before, after

  def normalize(self, text: str) -> str:
    """The BertNormalizer's text (each step as the Rust library does it)."""
    if (n := self.normalizer) is None: return text
    if n.get("clean_text", True):
      text = "".join(" " if c in WHITESPACE else c for c in text if c != "\ufffd" and not _is_control(c))
    if n.get("handle_chinese_chars", True): text = "".join(f" {c} " if _is_cjk(c) else c for c in text)
    lowercase, strip_accents = n.get("lowercase", True), n.get("strip_accents")
    if lowercase if strip_accents is None else strip_accents:   # (unset: strip them when lowercasing)
      text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
    # character by character, as the Rust library does: a final capital sigma becomes σ, not ς
    return "".join(c.lower() for c in text) if lowercase else text

  def _words(self, text: str) -> list[str]:
    """BertPreTokenizer: split at whitespace (dropped) and around each punctuation character (kept as a word)."""
    if not self.split_words: return [text] if text else []
    words, start = [], 0
    for i, c in enumerate(text):
      if c in WHITESPACE or _is_punctuation(c):
        if start < i: words.append(text[start:i])
        if c not in WHITESPACE: words.append(c)
        start = i + 1
    if start < len(text): words.append(text[start:])
    return words

  def _wordpiece(self, word: str) -> list[int]:
    """Greedy longest-match-first pieces of one word; the unk id alone when a piece is missing or the word is too long."""
    if len(word) > self.max_chars: return [self.unk_id]
    ids, start = [], 0
    while start < len(word):
      for end in range(len(word), start, -1):
        if (i := self.vocab.get(word[start:end] if start == 0 else self.prefix + word[start:end])) is not None: break
      else: return [self.unk_id]
      ids.append(i)
      start = end
    return ids

  def _ids(self, text: str) -> list[int]:
    """The ids of the text alone: no special tokens around it, no truncation."""
    if not isinstance(text, str): raise TypeError(f"WordPieceTokenizer: a text must be a str, got {type(text).__name__}")
    return ids_with_added_tokens(text, self.raw_added, self.normalized_added, self.normalize,
                                 lambda piece: [i for w in self._words(piece) for i in self._wordpiece(w)])

  def tokenize(self, text: str) -> list[str]:
    """The text's tokens (WordPiece pieces and added tokens), without the special tokens around it and untruncated."""
    return [self.id_to_token[i] for i in self._ids(text)]

  def encode(self, text: str) -> list[int]:
    ids = self._ids(text)
    if self.max_length is not None: ids = ids[:self.max_length - len(self.prefix_ids) - len(self.suffix_ids)]
    return self.prefix_ids + ids + self.suffix_ids

  def __call__(self, texts: Sequence[str], pad_to_multiple_of: int = 1) -> tuple[list[list[int]], list[list[int]]]:
    if isinstance(texts, str): raise TypeError("WordPieceTokenizer: call it with a list of texts (tok([text])); tok.encode(text) encodes one")
    if not (isinstance(pad_to_multiple_of, int) and pad_to_multiple_of >= 1):
      raise ValueError(f"WordPieceTokenizer: pad_to_multiple_of must be a positive int, got {pad_to_multiple_of!r}")
    rows = [self.encode(t) for t in texts]
    n = max(map(len, rows), default=0)
    n = -(-n // pad_to_multiple_of) * pad_to_multiple_of
    return [r + [self.pad_id] * (n - len(r)) for r in rows], [[1] * len(r) + [0] * (n - len(r)) for r in rows]

  def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    """The WordPiece decoder: pieces joined with spaces, a continuing piece glued to the one before, and (cleanup) the
    spaces before punctuation and English contractions removed."""
    if self.decoder is not None and self.decoder.get("type") != "WordPiece":
      raise ValueError(f"{self.name}: decoder type {self.decoder.get('type')!r} is not supported (WordPieceTokenizer decodes 'WordPiece')")
    prefix, cleanup = (self.decoder or {}).get("prefix", self.prefix), (self.decoder or {}).get("cleanup", True)
    out = []
    for i in ids:
      if skip_special_tokens and i in self.special_ids: continue
      if (tok := self.id_to_token.get(i)) is None: raise ValueError(f"WordPieceTokenizer.decode: id {i} is not in the vocabulary")
      tok = tok[len(prefix):] if out and tok.startswith(prefix) else (" " + tok if out else tok)
      if cleanup:
        for dirty, clean in _CLEANUP: tok = tok.replace(dirty, clean)
      out.append(tok)
    return "".join(out)

_CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"), (" 'm", "'m"),
            (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))

# ---------------------------------------------------------------------------------------------------------------
# the encoder

_ACTIVATIONS = {"gelu": lambda x: x.gelu(approximate="none"), "gelu_new": lambda x: x.gelu(approximate="tanh"),
                "gelu_pytorch_tanh": lambda x: x.gelu(approximate="tanh"), "relu": Tensor.relu}
_FLOAT32_LOWEST = -3.4028234663852886e38   # torch.finfo(float32).min: what Hugging Face adds to the scores of padding

def _bert_config(config: dict) -> dict:
  """The settings BertModel uses, with BertConfig's defaults for the optional ones; a ValueError for what it lacks."""
  need = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "max_position_embeddings")
  if (missing := [k for k in need if k not in config]): raise ValueError(f"BertModel: the config lacks {', '.join(missing)}")
  c = {"type_vocab_size": 2, "layer_norm_eps": 1e-12, "hidden_act": "gelu", "position_embedding_type": "absolute", **config}
  if c["hidden_act"] not in _ACTIVATIONS:
    raise ValueError(f"BertModel: hidden_act {c['hidden_act']!r} is not supported (one of {', '.join(_ACTIVATIONS)})")
  if c["position_embedding_type"] != "absolute":
    raise ValueError(f"BertModel: position_embedding_type {c['position_embedding_type']!r} is not supported (only 'absolute')")
  if c["hidden_size"] % c["num_attention_heads"]:
    raise ValueError(f"BertModel: hidden_size {c['hidden_size']} is not a multiple of num_attention_heads {c['num_attention_heads']}")
  return c

class BertEmbeddings:
  def __init__(self, c: dict, device=None):
    self.word_embeddings = Embedding(c["vocab_size"], c["hidden_size"], device=device)
    self.position_embeddings = Embedding(c["max_position_embeddings"], c["hidden_size"], device=device)
    self.token_type_embeddings = Embedding(c["type_vocab_size"], c["hidden_size"], device=device)
    self.LayerNorm = LayerNorm(c["hidden_size"], c["layer_norm_eps"], device=device)

  def __call__(self, input_ids: Tensor, token_type_ids: Optional[Tensor]) -> Tensor:
    types = self.token_type_embeddings.weight[0] if token_type_ids is None else self.token_type_embeddings(token_type_ids)
    return self.LayerNorm(self.word_embeddings(input_ids) + self.position_embeddings.weight[:input_ids.shape[1]] + types)

class BertSelfAttention:
  def __init__(self, c: dict, device=None):
    self.heads, h = c["num_attention_heads"], c["hidden_size"]
    self.query, self.key, self.value = (Linear(h, h, device=device) for _ in range(3))

  def __call__(self, x: Tensor, mask: Optional[Tensor]) -> Tensor:
    (b, n, h), d = x.shape, x.shape[2] // self.heads
    q, k, v = (p(x).reshape(b, n, self.heads, d).transpose(1, 2) for p in (self.query, self.key, self.value))
    return q.scaled_dot_product_attention(k, v, mask).transpose(1, 2).reshape(b, n, h)

class BertResidual:
  """dense, dropout (nothing at inference), LayerNorm of the sum with the input: Hugging Face's BertSelfOutput and BertOutput."""
  def __init__(self, n_in: int, n_out: int, eps: float, device=None):
    self.dense, self.LayerNorm = Linear(n_in, n_out, device=device), LayerNorm(n_out, eps, device=device)

  def __call__(self, x: Tensor, residual: Tensor) -> Tensor: return self.LayerNorm(self.dense(x) + residual)

class BertAttention:
  def __init__(self, c: dict, device=None):
    self.self = BertSelfAttention(c, device)
    self.output = BertResidual(c["hidden_size"], c["hidden_size"], c["layer_norm_eps"], device)

  def __call__(self, x: Tensor, mask: Optional[Tensor]) -> Tensor: return self.output(self.self(x, mask), x)

class BertIntermediate:
  def __init__(self, c: dict, device=None):
    self.dense, self.act = Linear(c["hidden_size"], c["intermediate_size"], device=device), _ACTIVATIONS[c["hidden_act"]]

  def __call__(self, x: Tensor) -> Tensor: return self.act(self.dense(x))

class BertLayer:
  def __init__(self, c: dict, device=None):
    self.attention, self.intermediate = BertAttention(c, device), BertIntermediate(c, device)
    self.output = BertResidual(c["intermediate_size"], c["hidden_size"], c["layer_norm_eps"], device)

  def __call__(self, x: Tensor, mask: Optional[Tensor]) -> Tensor:
    x = self.attention(x, mask)
    return self.output(self.intermediate(x), x)

class BertEncoder:
  def __init__(self, c: dict, device=None): self.layer = [BertLayer(c, device) for _ in range(c["num_hidden_layers"])]

class BertPooler:
  def __init__(self, c: dict, device=None): self.dense = Linear(c["hidden_size"], c["hidden_size"], device=device)
  def __call__(self, hidden: Tensor) -> Tensor: return self.dense(hidden[:, 0]).tanh()

class BertModel:
  """Hugging Face's BertModel at inference (no dropout), from the dict of its config.json; its tensors have the
  checkpoints' names (embeddings.word_embeddings.weight, encoder.layer.0.attention.self.query.weight, pooler.dense.weight,
  ...): `load_state_dict(model, bert_state_dict(safe_load(path)))` loads a checkpoint. pooler=False: without the pooler
  (checkpoints saved with add_pooling_layer=False).

  model(input_ids, attention_mask=None, token_type_ids=None) -> the last hidden state (batch, length, hidden_size).
  Each argument is a Tensor (batch, length) or a list of lists, of integers (attention_mask may be floats);
  attention_mask has 1 for the tokens and 0 for padding, whose keys get a score of float32's lowest value (Hugging
  Face's), so they get no attention.
  model.pooler(hidden) is BERT's pooled output (tanh of a dense layer on the first token)."""
  def __init__(self, config: dict, pooler: bool = True, device=None):
    self.config = c = _bert_config(config)
    self.embeddings, self.encoder = BertEmbeddings(c, device), BertEncoder(c, device)
    self.pooler = BertPooler(c, device) if pooler else None

  def __call__(self, input_ids, attention_mask=None, token_type_ids=None) -> Tensor:
    device = self.embeddings.word_embeddings.weight.device
    ids = input_ids if isinstance(input_ids, Tensor) else Tensor(input_ids, device=device)
    if ids.ndim != 2 or ids.dtype.is_float:
      raise ValueError(f"BertModel: input_ids must be integers of shape (batch, length), got {ids.dtype} {ids.shape}")
    if ids.shape[1] > self.config["max_position_embeddings"]:
      raise ValueError(f"BertModel: {ids.shape[1]} tokens is more than max_position_embeddings ({self.config['max_position_embeddings']})")
    def like_ids(t, name: str, integers: bool) -> Optional[Tensor]:
      if t is None: return None
      t = t if isinstance(t, Tensor) else Tensor(t, device=device)
      if t.shape != ids.shape or (integers and t.dtype.is_float):
        raise ValueError(f"BertModel: {name} must be {'integers ' if integers else ''}shaped like input_ids {ids.shape}, got {t.dtype} {t.shape}")
      return t
    mask, types = like_ids(attention_mask, "attention_mask", False), like_ids(token_type_ids, "token_type_ids", True)
    if mask is not None: mask = (1 - mask.float()).reshape(ids.shape[0], 1, 1, ids.shape[1]) * _FLOAT32_LOWEST
    x = self.embeddings(ids, types)
    for layer in self.encoder.layer: x = layer(x, mask)
    return x

def bert_state_dict(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
  """A Hugging Face BERT checkpoint's tensors under BertModel's names: a task model's (BertForMaskedLM, ...) "bert." prefix
  taken off and its heads left out, and the buffers older checkpoints saved (embeddings.position_ids, token_type_ids) dropped."""
  if any(k.startswith("bert.") for k in state_dict): state_dict = {k[5:]: v for k, v in state_dict.items() if k.startswith("bert.")}
  return {k: v for k, v in state_dict.items() if k not in ("embeddings.position_ids", "embeddings.token_type_ids")}

# ---------------------------------------------------------------------------------------------------------------
# sentence embeddings

# sentence-transformers' older Pooling configs: one boolean per mode
_LEGACY_POOLING = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max", "pooling_mode_mean_tokens": "mean",
                   "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens": "weightedmean",
                   "pooling_mode_lasttoken": "lasttoken"}

def _check_pooling(config: dict, path: str):
  """A ValueError unless the Pooling config asks for mean pooling alone (no mode at all means mean, as for sentence-transformers)."""
  mode = config.get("pooling_mode")
  if mode is None: mode = [m for k, m in _LEGACY_POOLING.items() if config.get(k)] or ["mean"]
  if (modes := [mode] if isinstance(mode, str) else list(mode)) != ["mean"]:
    raise ValueError(f"{path}: pooling {modes} is not supported (SentenceEncoder implements 'mean' alone)")

class SentenceEncoder:
  """sentence-transformers' Transformer -> Pooling (mean over the tokens, padding left out) -> Normalize (L2), the
  modules all-MiniLM-L6-v2 lists. encode(sentences) -> Tensor (n, hidden_size), realized; with normalize each row has
  length 1, so a matrix product of two encodings is their cosine similarities.

  Sentences are encoded in batches of batch_size, each padded to a multiple of 8 tokens: fewer distinct shapes, so
  fewer kernels to build, and the padding changes nothing (its keys get no attention, its rows are not pooled)."""
  def __init__(self, tokenizer: WordPieceTokenizer, model: BertModel, normalize: bool = True, lowercase: bool = False):
    self.tokenizer, self.model, self.normalize, self.lowercase = tokenizer, model, normalize, lowercase

  @classmethod
  def from_folder(cls, path: Union[str, os.PathLike], device: Optional[str] = None) -> SentenceEncoder:
    """A sentence-transformers model folder: modules.json (a Transformer, a Pooling, optionally a Normalize), the
    Transformer's config.json, tokenizer.json, model.safetensors and sentence_bert_config.json, the Pooling's config.json."""
    path, folder = os.fspath(path), "a sentence-transformers folder"
    modules = read_json(os.path.join(path, "modules.json"), folder)
    kinds = [m.get("type", "").rpartition(".")[2] for m in modules]
    if kinds not in (["Transformer", "Pooling"], ["Transformer", "Pooling", "Normalize"]):
      raise ValueError(f"{os.path.join(path, 'modules.json')}: modules {kinds} are not supported "
                       "(SentenceEncoder runs Transformer, Pooling and optionally Normalize)")
    tdir, pdir = os.path.join(path, modules[0].get("path", "")), os.path.join(path, modules[1].get("path", ""))
    config = read_json(os.path.join(tdir, "config.json"), folder)
    if config.get("model_type", "bert") != "bert":
      raise ValueError(f"{os.path.join(tdir, 'config.json')}: model_type {config['model_type']!r} is not supported (SentenceEncoder runs BERT)")
    _check_pooling(read_json(os.path.join(pdir, "config.json"), folder), os.path.join(pdir, "config.json"))
    st = read_json(fn, folder) if os.path.exists(fn := os.path.join(tdir, "sentence_bert_config.json")) else {}
    # sentence-transformers truncates to max_seq_length; the position embeddings cap it in any case
    max_length = min(st.get("max_seq_length") or config["max_position_embeddings"], config["max_position_embeddings"])
    tokenizer = WordPieceTokenizer.from_file(os.path.join(tdir, "tokenizer.json"), max_length)
    weights = bert_state_dict(safe_load(os.path.join(tdir, "model.safetensors"), device))
    model = BertModel(config, pooler=any(k.startswith("pooler.") for k in weights), device=device)
    load_state_dict(model, weights)
    return cls(tokenizer, model, normalize=kinds[-1] == "Normalize", lowercase=bool(st.get("do_lower_case")))

  def embed(self, ids: Tensor, mask: Tensor) -> Tensor:
    """The sentences' embeddings (batch, hidden) from their token ids and attention mask (batch, tokens; int32, the
    tokenizer's output): the model, the mean over the unmasked tokens, then (normalize) unit length. What `encode`
    runs per batch, and what `python -m tinyweb.export minilm` exports."""
    hidden = self.model(ids, mask)
    m = mask.float().unsqueeze(-1)
    emb = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
    return emb.normalize(dim=1) if self.normalize else emb

  def encode(self, sentences: Sequence[str], batch_size: int = 32) -> Tensor:
    if isinstance(sentences, str): raise TypeError("SentenceEncoder.encode: give a list of sentences (encode([sentence]) for one)")
    for s in sentences:
      if not isinstance(s, str): raise TypeError(f"SentenceEncoder.encode: a sentence must be a str, got {type(s).__name__}")
    if not (isinstance(batch_size, int) and batch_size >= 1):
      raise ValueError(f"SentenceEncoder.encode: batch_size must be a positive int, got {batch_size!r}")
    device = self.model.embeddings.word_embeddings.weight.device
    multiple = 8 if self.model.config["max_position_embeddings"] % 8 == 0 else 1   # (never padded past the position embeddings)
    out = []
    for i in range(0, len(sentences), batch_size):
      batch = [s.lower() if self.lowercase else s for s in sentences[i:i + batch_size]]
      ids, mask = self.tokenizer(batch, pad_to_multiple_of=multiple)
      out.append(self.embed(Tensor(ids, dtype=dtypes.int32, device=device), Tensor(mask, dtype=dtypes.int32, device=device)).realize())
    return Tensor.cat(*out).realize() if len(out) > 1 else out[0] if out else \
      Tensor.zeros(0, self.model.config["hidden_size"], device=device).contiguous().realize()
