"""CLIP's text side, as Stable Diffusion uses it: the byte-level BPE tokenizer, transformers' CLIPTextModel and
CLIPTextModelWithProjection (their parameter names, configured from their config.json), and the mapping from the original
(CompVis/LDM, SGM, OpenCLIP: "single-file") checkpoints' names to transformers'.

  tok = CLIPTokenizer.from_folder("stable-diffusion-v1-5/tokenizer")     # vocab.json, merges.txt (+ the config files)
  ids = tok(["a photo of a cat", "an astronaut riding a horse"]).input_ids   # 2 rows of 77 ids: BOS ... EOS, padding
  enc = CLIPTextModel.from_pretrained("stable-diffusion-v1-5/text_encoder", device="WEBGPU")
  out = enc(ids)
  out.last_hidden_state     # (2, 77, 768): SD 1.x's conditioning
  out.hidden_states[-2]     # the penultimate layer's output, not final-layer-normed: SD 2.x's and SDXL's
  out.pooler_output         # (2, 768): the EOS position of last_hidden_state

SDXL's second encoder is a CLIPTextModelWithProjection (`text_encoder_2/`): its output has text_embeds too (the pooled
output through text_projection), which SDXL adds to the UNet's time embedding. From a single-file checkpoint:

  sd = safe_load("sd_xl_base_1.0.safetensors")
  load_state_dict(enc1, clip_state_dict_from_ldm(sd, SDXL_CLIP_PREFIX))                  # transformers' names, prefixed
  load_state_dict(enc2, clip_state_dict_from_open_clip(sd, SDXL_OPEN_CLIP_PREFIX))       # OpenCLIP's names, mapped

`CLIPTokenizer` is pure Python (no numpy, no tensors): it runs wherever tinyweb does, Pyodide included. It gives the ids
of transformers 5's CLIPTokenizer (the one backed by the `tokenizers` library, which is what diffusers' pipelines call):
NFC, every run of whitespace made one space, lowercase (character by character), then CLIP's pre-tokenizer pattern
('s 't 're 've 'm 'll 'd, runs of letters, single digits, runs of anything else; whitespace dropped), then the byte-level
BPE with "</w>" closing each word. Special tokens in a text are matched as the files say (the BOS and EOS tokens
themselves, and SDXL's padding token "!", which then stands for every "!" of a text, as in transformers). ftfy is not
applied (transformers 5 applies none either). Letters and digits are those of the running Python's Unicode database
(`unicodedata`), which may lag the `tokenizers` library's for characters added in recent Unicode versions."""
from __future__ import annotations
import gzip, os, unicodedata
from typing import NamedTuple, Optional, Sequence, Union
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes, DType
from tinyweb.nn import Linear, LayerNorm, Embedding
from tinyweb.nn.state import load_state_dict
from tinyweb.models.hub import read_json, load_safetensors, set_parameter_dtype, WHITESPACE, ids_with_added_tokens

# ---------------------------------------------------------------------------------------------------------------
# the tokenizer

_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")   # in the pattern's order (the first that matches wins)
_BOS, _EOS = "<|startoftext|>", "<|endoftext|>"
_SUFFIX = "</w>"
_CACHE_SIZE = 10000   # BPE results kept, per word (the `tokenizers` library's default capacity)

def _byte_symbols() -> dict[int, str]:
  """GPT-2's byte-level alphabet: the character each byte value stands for. The printable Latin-1 bytes are themselves,
  the others (controls, space, NBSP, soft hyphen) are U+0100 onwards, in byte order. The dict's order (the printable
  ones first) is the order of CLIP's vocabulary."""
  printable = [*range(ord("!"), ord("~") + 1), *range(ord("\xa1"), ord("\xac") + 1), *range(ord("\xae"), ord("\xff") + 1)]
  others = [b for b in range(256) if b not in printable]
  return {b: chr(b) for b in printable} | {b: chr(256 + i) for i, b in enumerate(others)}

_SYMBOLS = _byte_symbols()
_BYTE_SYMBOLS = [_SYMBOLS[b] for b in range(256)]   # indexed by byte value
_SYMBOL_BYTES = {s: b for b, s in _SYMBOLS.items()}

def _is_letter(c: str) -> bool: return unicodedata.category(c)[0] == "L"
def _is_number(c: str) -> bool: return unicodedata.category(c)[0] == "N"

def _words(text: str) -> list[str]:
  """CLIP's pre-tokenizer on normalized text: <|startoftext|>|<|endoftext|>|'s|'t|'re|'ve|'m|'ll|'d|\\p{L}+|\\p{N}|
  [^\\s\\p{L}\\p{N}]+, the matches kept and the rest (whitespace) dropped. The byte-level step after it splits once more
  with GPT-2's pattern, which only changes the two special-token matches: each becomes "<|", its letters, "|>"."""
  out, i, n = [], 0, len(text)
  while i < n:
    c = text[i]
    if c == "<" and (special := next((s for s in (_BOS, _EOS) if text.startswith(s, i)), None)):
      out += ["<|", special[2:-2], "|>"]
      i += len(special)
    elif c == "'" and (con := next((s for s in _CONTRACTIONS if text.startswith(s, i)), None)):
      out.append(con)
      i += len(con)
    elif _is_letter(c):
      j = i + 1
      while j < n and _is_letter(text[j]): j += 1
      out.append(text[i:j])
      i = j
    elif _is_number(c):
      out.append(c)
      i += 1
    elif c in WHITESPACE: i += 1
    else:
      j = i + 1
      while j < n and not (text[j] in WHITESPACE or _is_letter(text[j]) or _is_number(text[j])): j += 1
      out.append(text[i:j])
      i = j
  return out

def _added_token(spec, name: str, what: str, special: bool) -> dict:
  """An added token of a tokenizer config (a string, or a dict in AddedToken's fields) as a dict, with AddedToken's
  defaults (normalized unless special)."""
  if isinstance(spec, str): spec = {"content": spec}
  if not isinstance(spec, dict) or not isinstance(spec.get("content"), str) or not spec["content"]:
    raise ValueError(f"{name}: {what} must be a string or an AddedToken object with a content, got {spec!r}")
  if spec.get("single_word"): raise ValueError(f"{name}: {what} {spec['content']!r} is single_word, which CLIPTokenizer does not implement")
  return {"content": spec["content"], "lstrip": bool(spec.get("lstrip")), "rstrip": bool(spec.get("rstrip")),
          "normalized": bool(spec.get("normalized", not special)), "special": bool(spec.get("special", special))}

class Encoding(dict):
  """What CLIPTokenizer returns: {"input_ids": ..., "attention_mask": ...}, also as attributes (tok(texts).input_ids)."""
  def __getattr__(self, name: str):
    try: return self[name]
    except KeyError: raise AttributeError(name) from None

class CLIPTokenizer:
  """CLIP's byte-level BPE tokenizer.

  tok(texts, max_length=None, padding="max_length", truncation=True) -> Encoding(input_ids, attention_mask): plain lists
  of lists of ints, each row BOS, the text's ids, EOS (truncated to max_length first, when truncation), then padded on
  the right with the padding id (padding "max_length": to max_length; "longest" or True: to the batch's longest; False
  or "do_not_pad": not at all); the mask has 1 on the tokens and 0 on the padding. max_length None is model_max_length
  (77 unless the folder's tokenizer_config.json says otherwise). These defaults are Stable Diffusion's call
  (transformers' own default is no padding nor truncation). A str instead of a list gives one row, not nested.
  tok.encode(text) -> list[int]: BOS, the text's ids, EOS, untruncated. tok.tokenize(text) -> list[str]: the tokens
  between them. tok.decode(ids, skip_special_tokens=False) -> str, as transformers decodes.

  vocab: token -> id; merges: the BPE merges in priority order, each a pair of tokens whose concatenation is in vocab.
  bos/eos/unk/pad: the special tokens (a string, or a dict of AddedToken's fields: content, lstrip, rstrip, normalized);
  added: more added tokens {id: AddedToken dict} (tokenizer_config.json's added_tokens_decoder)."""
  def __init__(self, vocab: dict[str, int], merges: Sequence[tuple[str, str]], bos=_BOS, eos=_EOS, unk=_EOS, pad=_EOS,
               added: Optional[dict[int, dict]] = None, model_max_length: int = 77, name: str = "CLIPTokenizer"):
    self.name, self.vocab = name, dict(vocab)
    self.ranks: dict[tuple[str, str], int] = {}
    for rank, (a, b) in enumerate(merges):
      for t in (a, b, a + b):
        if t not in self.vocab: raise ValueError(f"{name}: merge {rank + 1} ({a} {b}) has {t!r}, which is not in the vocabulary")
      self.ranks.setdefault((a, b), rank)
    self.id_to_token = {i: t for t, i in self.vocab.items()}
    added_tokens = {int(i): _added_token(t, name, f"added token {i}", False) for i, t in (added or {}).items()}
    by_content = {t["content"]: (i, t) for i, t in added_tokens.items()}
    ids = {}
    for what, spec in (("bos_token", bos), ("eos_token", eos), ("unk_token", unk), ("pad_token", pad)):
      content = spec if isinstance(spec, str) else (spec or {}).get("content") if isinstance(spec, dict) else spec
      if isinstance(content, str) and content in by_content: i, tok = by_content[content]   # (the added token's own flags)
      else:
        tok = {**_added_token(spec, name, what, True), "special": True}
        if (i := self.vocab.get(tok["content"])) is None:
          raise ValueError(f"{name}: {what} {tok['content']!r} is not in the vocabulary")
      added_tokens.setdefault(i, tok)
      ids[what] = i
    self.bos_id, self.eos_id, self.unk_id, self.pad_id = ids["bos_token"], ids["eos_token"], ids["unk_token"], ids["pad_token"]
    self.added = added_tokens
    self.special_ids = {i for i, t in added_tokens.items() if t["special"]}
    self.id_to_token.update({i: t["content"] for i, t in added_tokens.items()})
    self.raw_added = {t["content"]: {**t, "id": i} for i, t in added_tokens.items() if not t["normalized"]}
    self.normalized_added = {self.normalize(t["content"]): {**t, "id": i} for i, t in added_tokens.items() if t["normalized"]}
    if not (isinstance(model_max_length, int) and model_max_length >= 2):
      raise ValueError(f"{name}: model_max_length must be an int of at least 2 (BOS and EOS), got {model_max_length!r}")
    self.model_max_length = model_max_length
    self._cache: dict[str, list[int]] = {}

  @classmethod
  def from_folder(cls, folder: Union[str, os.PathLike]) -> CLIPTokenizer:
    """A Hugging Face CLIP tokenizer folder (a diffusers pipeline's tokenizer/ or tokenizer_2/): tokenizer.json (what
    transformers 5 saves), or else vocab.json and merges.txt; and where present tokenizer_config.json (model_max_length,
    the special tokens, added_tokens_decoder) and special_tokens_map.json (the special tokens, read as transformers
    does: only when tokenizer_config.json has no added_tokens_decoder, and then over its values)."""
    folder = os.fspath(folder)
    if os.path.exists(json_path := os.path.join(folder, "tokenizer.json")): vocab, merges, added = _read_tokenizer_json(json_path)
    else: (vocab, merges), added = _read_vocab_and_merges(folder), None
    cfg_path, map_path = os.path.join(folder, "tokenizer_config.json"), os.path.join(folder, "special_tokens_map.json")
    cfg = read_json(cfg_path) if os.path.exists(cfg_path) else {}
    if not isinstance(cfg, dict): raise ValueError(f"{cfg_path}: not a tokenizer config (a JSON object)")
    specials = {k: cfg[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token") if cfg.get(k) is not None}
    if "added_tokens_decoder" in cfg: added = cfg["added_tokens_decoder"]
    elif os.path.exists(map_path):
      specials.update({k: v for k, v in read_json(map_path).items() if k in ("bos_token", "eos_token", "unk_token", "pad_token") and v})
    max_len = cfg.get("model_max_length", 77)
    if not (type(max_len) is int and max_len >= 2): raise ValueError(f"{cfg_path}: model_max_length must be an int >= 2, got {max_len!r}")
    return cls(vocab, merges, bos=specials.get("bos_token", _BOS), eos=specials.get("eos_token", _EOS),
               unk=specials.get("unk_token", _EOS), pad=specials.get("pad_token", _EOS), added=added, model_max_length=max_len, name=folder)

  @classmethod
  def from_bpe_file(cls, path: Union[str, os.PathLike], pad_token: str = _EOS, model_max_length: int = 77) -> CLIPTokenizer:
    """OpenAI's bpe_simple_vocab_16e6.txt.gz (in open_clip and OpenAI's clip packages): a header line, then the merges.
    The vocabulary is CLIP's: the 256 byte symbols, each again with "</w>", the 48894 first merges' results, then
    <|startoftext|> and <|endoftext|> (49408 tokens). pad_token: "!" for SDXL's second encoder (OpenCLIP's tokenizer
    pads with id 0), <|endoftext|> for SD 1.x's."""
    path = os.fspath(path)
    try:
      with gzip.open(path, "rt", encoding="utf-8") as f: lines = f.read().split("\n")
    except (OSError, EOFError, UnicodeDecodeError) as e: raise ValueError(f"{path}: not a gzipped BPE merges file ({e})") from None
    n_merges = 49152 - 256 - 2   # (CLIP's vocabulary: 49152 less the bytes and the two special tokens, as its code reads it)
    merges = [tuple(line.split()) for line in lines[1:n_merges + 1]]
    if len(merges) != n_merges or any(len(m) != 2 for m in merges):
      raise ValueError(f"{path}: expected a header line and {n_merges} merges of two tokens each")
    symbols = [*_SYMBOLS.values(), *(s + _SUFFIX for s in _SYMBOLS.values()), *(a + b for a, b in merges), _BOS, _EOS]
    return cls({s: i for i, s in enumerate(symbols)}, merges, pad=pad_token, model_max_length=model_max_length, name=path)

  @staticmethod
  def normalize(text: str) -> str:
    """NFC, each run of whitespace one space, lowercase character by character (a final capital sigma becomes σ, as
    the `tokenizers` library does, not Python's ς)."""
    text, out, space = unicodedata.normalize("NFC", text), [], False
    for c in text:
      if c in WHITESPACE:
        if not space: out.append(" ")
        space = True
      else:
        out.append(c.lower())
        space = False
    return "".join(out)

  def to_json(self) -> dict:
    """What encoding needs, as JSON: web/clip_tokenizer.ts gives the same ids from it in a page. tokens: the vocabulary
    by id; merges: "a b" by rank; added: the added tokens with their matching flags (as the constructor keeps them)."""
    tokens = sorted(self.vocab, key=self.vocab.get)
    if [self.vocab[t] for t in tokens] != list(range(len(tokens))):
      raise ValueError(f"{self.name}: the vocabulary's ids are not 0..{len(tokens) - 1}, which to_json's token list needs")
    added = [{"id": i, **{k: t[k] for k in ("content", "lstrip", "rstrip", "normalized")}} for i, t in sorted(self.added.items())]
    return {"format": "tinyweb-clip-tokenizer", "tokens": tokens, "merges": [f"{a} {b}" for a, b in sorted(self.ranks, key=self.ranks.get)],
            "added": added, "bos": self.bos_id, "eos": self.eos_id, "unk": self.unk_id, "pad": self.pad_id, "maxLength": self.model_max_length}

  def _bpe(self, word: str) -> list[int]:
    """The ids of one pre-tokenized word (its bytes as byte symbols, "</w>" on the last): the merge of lowest rank among
    neighbouring symbols applied everywhere, left to right, until none applies."""
    if (ids := self._cache.get(word)) is not None: return ids
    symbols = [_BYTE_SYMBOLS[b] for b in word.encode("utf-8")]
    symbols[-1] += _SUFFIX
    while len(symbols) > 1:
      rank, pair = min(((self.ranks.get(p, len(self.ranks)), p) for p in zip(symbols, symbols[1:])), key=lambda rp: rp[0])
      if rank == len(self.ranks): break
      merged, i = [], 0
      while i < len(symbols):
        if i + 1 < len(symbols) and (symbols[i], symbols[i + 1]) == pair:
          merged.append(pair[0] + pair[1])
          i += 2
        else:
          merged.append(symbols[i])
          i += 1
      symbols = merged
    ids = [self.vocab.get(s, self.unk_id) for s in symbols]
    if len(self._cache) < _CACHE_SIZE: self._cache[word] = ids
    return ids

  def _ids(self, text: str) -> list[int]:
    """The ids of the text alone: no BOS/EOS around it, no truncation."""
    if not isinstance(text, str): raise TypeError(f"CLIPTokenizer: a text must be a str, got {type(text).__name__}")
    return ids_with_added_tokens(text, self.raw_added, self.normalized_added, self.normalize,
                                 lambda piece: [i for w in _words(piece) for i in self._bpe(w)])

  def tokenize(self, text: str) -> list[str]:
    return [self.id_to_token[i] for i in self._ids(text)]

  def encode(self, text: str) -> list[int]: return [self.bos_id, *self._ids(text), self.eos_id]

  def __call__(self, texts: Union[str, Sequence[str]], max_length: Optional[int] = None, padding: Union[bool, str] = "max_length",
               truncation: bool = True) -> Encoding:
    one = isinstance(texts, str)
    if max_length is None: max_length = self.model_max_length
    if not (type(max_length) is int and max_length >= 2):
      raise ValueError(f"CLIPTokenizer: max_length must be an int of at least 2 (BOS and EOS), got {max_length!r}")
    if padding not in (True, False, "max_length", "longest", "do_not_pad"):
      raise ValueError(f"CLIPTokenizer: padding must be 'max_length', 'longest' (or True), or 'do_not_pad' (or False), got {padding!r}")
    rows = []
    for t in ([texts] if one else texts):
      ids = self._ids(t)
      if truncation: ids = ids[:max_length - 2]
      rows.append([self.bos_id, *ids, self.eos_id])
    n = max_length if padding == "max_length" else max(map(len, rows), default=0) if padding in (True, "longest") else 0
    ids = [r + [self.pad_id] * (n - len(r)) for r in rows]
    mask = [[1] * len(r) + [0] * (n - len(r)) for r in rows]
    return Encoding(input_ids=ids[0], attention_mask=mask[0]) if one else Encoding(input_ids=ids, attention_mask=mask)

  def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
    """transformers' decode: the tokens' bytes (byte symbols mapped back; an added token is its own text) as UTF-8,
    bad bytes replaced by U+FFFD, each "</w>" a space, the ends stripped of whitespace."""
    data = bytearray()
    for i in ids:
      if skip_special_tokens and i in self.special_ids: continue
      if (tok := self.id_to_token.get(i)) is None: raise ValueError(f"CLIPTokenizer.decode: id {i} is not in the vocabulary")
      if all(c in _SYMBOL_BYTES for c in tok): data += bytes(_SYMBOL_BYTES[c] for c in tok)
      else: data += tok.encode("utf-8")
    return data.decode("utf-8", errors="replace").replace(_SUFFIX, " ").strip()

def _read_vocab_and_merges(folder: str) -> tuple[dict[str, int], list[tuple[str, str]]]:
  vocab_path, merges_path = os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt")
  vocab = read_json(vocab_path, "a CLIP tokenizer folder without tokenizer.json")
  if not isinstance(vocab, dict) or not all(isinstance(k, str) and type(v) is int for k, v in vocab.items()):
    raise ValueError(f"{vocab_path}: not a vocabulary (a JSON object of token: id)")
  try:
    with open(merges_path, encoding="utf-8") as f: lines = f.read().split("\n")
  except FileNotFoundError: raise FileNotFoundError(f"{merges_path}: not found (a CLIP tokenizer folder has it)") from None
  merges = []
  for n, line in enumerate(lines):
    if line.startswith("#version") or not line.strip(): continue
    if len(parts := line.split()) != 2: raise ValueError(f"{merges_path}: line {n + 1} is not a merge of two tokens: {line!r}")
    merges.append(tuple(parts))
  return vocab, merges

def _read_tokenizer_json(path: str) -> tuple[dict[str, int], list[tuple[str, str]], dict[int, dict]]:
  """The vocabulary, merges and added tokens of a tokenizer.json (transformers 5 saves CLIP's tokenizer as that alone).
  Its pipeline is not read: transformers' CLIPTokenizer builds CLIP's own whatever the file says; a model other than a
  BPE closing words with "</w>" is refused."""
  spec = read_json(path)
  model = spec.get("model") if isinstance(spec, dict) else None
  if not isinstance(model, dict) or model.get("type", "BPE") != "BPE" or model.get("end_of_word_suffix") != _SUFFIX:
    raise ValueError(f"{path}: not a CLIP tokenizer (its model must be a BPE with end_of_word_suffix '</w>')")
  vocab, merges = model.get("vocab"), []
  if not isinstance(vocab, dict) or not all(isinstance(k, str) and type(v) is int for k, v in vocab.items()):
    raise ValueError(f"{path}: the model's vocab is not a JSON object of token: id")
  for n, m in enumerate(model.get("merges") or []):
    parts = m.split() if isinstance(m, str) else m
    if not (isinstance(parts, list) and len(parts) == 2 and all(isinstance(p, str) for p in parts)):
      raise ValueError(f"{path}: merge {n + 1} is not a merge of two tokens: {m!r}")
    merges.append(tuple(parts))
  added = {}
  for t in spec.get("added_tokens") or []:
    if not isinstance(t, dict) or type(t.get("id")) is not int: raise ValueError(f"{path}: added token {t!r} has no id")
    added[t["id"]] = t
  return vocab, merges, added

# ---------------------------------------------------------------------------------------------------------------
# the text encoders

_ACTIVATIONS = {"quick_gelu": Tensor.quick_gelu, "gelu": lambda x: x.gelu(approximate="none"),
                "gelu_new": lambda x: x.gelu(approximate="tanh"), "gelu_pytorch_tanh": lambda x: x.gelu(approximate="tanh")}

class CLIPTextConfig(NamedTuple):
  """The settings of transformers' CLIPTextConfig that the text encoders use (its defaults for the optional ones)."""
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_hidden_layers: int
  num_attention_heads: int
  max_position_embeddings: int = 77
  hidden_act: str = "quick_gelu"
  layer_norm_eps: float = 1e-5
  projection_dim: int = 512
  eos_token_id: int = 49407

  @classmethod
  def from_dict(cls, config: dict, name: str = "config") -> CLIPTextConfig:
    """A config.json's dict; a ValueError naming the file and the key for what is missing or not implemented. A whole
    CLIPModel config is refused (give its text_config)."""
    if not isinstance(config, dict): raise ValueError(f"{name}: a CLIP text config must be a JSON object, got {type(config).__name__}")
    if config.get("model_type", "clip_text_model") != "clip_text_model":
      raise ValueError(f"{name}: model_type {config['model_type']!r} is not a CLIP text encoder's ('clip_text_model')")
    need = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    if (missing := [k for k in need if k not in config]): raise ValueError(f"{name}: the config lacks {', '.join(missing)}")
    c = {k: config[k] for k in cls._fields if config.get(k) is not None}
    for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings",
              "projection_dim", "eos_token_id"):
      if k in c and not (type(c[k]) is int and c[k] >= (0 if k == "eos_token_id" else 1)):
        raise ValueError(f"{name}: {k} must be a {'non-negative' if k == 'eos_token_id' else 'positive'} int, got {c[k]!r}")
    if c.get("hidden_act", "quick_gelu") not in _ACTIVATIONS:
      raise ValueError(f"{name}: hidden_act {c['hidden_act']!r} is not supported (one of {', '.join(_ACTIVATIONS)})")
    if c["hidden_size"] % c["num_attention_heads"]:
      raise ValueError(f"{name}: hidden_size {c['hidden_size']} is not a multiple of num_attention_heads {c['num_attention_heads']}")
    if not isinstance(c.get("layer_norm_eps", 1e-5), (int, float)) or isinstance(c.get("layer_norm_eps"), bool):
      raise ValueError(f"{name}: layer_norm_eps must be a number, got {c['layer_norm_eps']!r}")
    return cls(**c)

class CLIPTextOutput(NamedTuple):
  last_hidden_state: Tensor        # (batch, length, hidden): the last layer's output through final_layer_norm
  pooler_output: Tensor            # (batch, hidden): last_hidden_state at each row's EOS
  hidden_states: tuple[Tensor, ...]   # the embeddings, then each layer's output (none through final_layer_norm)
  text_embeds: Optional[Tensor] = None   # (batch, projection_dim): CLIPTextModelWithProjection's pooled output projected

class _LayerNorm(LayerNorm):
  """LayerNorm computed in float32 whatever the input's dtype (a float16 residual stream's squares can overflow)."""
  def __call__(self, x: Tensor) -> Tensor: return super().__call__(x.float()).cast(x.dtype)

class CLIPTextEmbeddings:
  def __init__(self, c: CLIPTextConfig, device=None):
    self.token_embedding = Embedding(c.vocab_size, c.hidden_size, device=device)
    self.position_embedding = Embedding(c.max_position_embeddings, c.hidden_size, device=device)

  def __call__(self, ids: Tensor) -> Tensor: return self.token_embedding(ids) + self.position_embedding.weight[:ids.shape[1]]

class CLIPAttention:
  def __init__(self, c: CLIPTextConfig, device=None):
    self.heads, h = c.num_attention_heads, c.hidden_size
    self.q_proj, self.k_proj, self.v_proj, self.out_proj = (Linear(h, h, device=device) for _ in range(4))

  def __call__(self, x: Tensor, mask: Tensor) -> Tensor:
    (b, n, h), d = x.shape, x.shape[2] // self.heads
    q, k, v = (p(x).reshape(b, n, self.heads, d).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
    return self.out_proj(q.scaled_dot_product_attention(k, v, mask).transpose(1, 2).reshape(b, n, h))

class CLIPMLP:
  def __init__(self, c: CLIPTextConfig, device=None):
    self.fc1, self.fc2 = Linear(c.hidden_size, c.intermediate_size, device=device), Linear(c.intermediate_size, c.hidden_size, device=device)
    self.act = _ACTIVATIONS[c.hidden_act]

  def __call__(self, x: Tensor) -> Tensor: return self.fc2(self.act(self.fc1(x)))

class CLIPEncoderLayer:
  """Pre-norm: x + attention(layer_norm1(x)), then + mlp(layer_norm2(.))."""
  def __init__(self, c: CLIPTextConfig, device=None):
    self.self_attn, self.mlp = CLIPAttention(c, device), CLIPMLP(c, device)
    self.layer_norm1 = _LayerNorm(c.hidden_size, c.layer_norm_eps, device=device)
    self.layer_norm2 = _LayerNorm(c.hidden_size, c.layer_norm_eps, device=device)

  def __call__(self, x: Tensor, mask: Tensor) -> Tensor:
    x = x + self.self_attn(self.layer_norm1(x), mask)
    return x + self.mlp(self.layer_norm2(x))

class CLIPEncoder:
  def __init__(self, c: CLIPTextConfig, device=None): self.layers = [CLIPEncoderLayer(c, device) for _ in range(c.num_hidden_layers)]

class CLIPTextTransformer:
  """transformers' text_model: embeddings, causal encoder, final_layer_norm, the EOS position pooled."""
  def __init__(self, c: CLIPTextConfig, device=None):
    self.config = c
    self.embeddings, self.encoder = CLIPTextEmbeddings(c, device), CLIPEncoder(c, device)
    self.final_layer_norm = _LayerNorm(c.hidden_size, c.layer_norm_eps, device=device)

  def __call__(self, input_ids, attention_mask=None) -> CLIPTextOutput:
    device = self.embeddings.token_embedding.weight.device
    ids = input_ids if isinstance(input_ids, Tensor) else Tensor(input_ids, dtype=dtypes.int32, device=device)
    if ids.ndim != 2 or ids.dtype.is_float or ids.dtype == dtypes.bool:
      raise ValueError(f"CLIPTextModel: input_ids must be integers of shape (batch, length), got {ids.dtype} {ids.shape}")
    (b, n), c = ids.shape, self.config
    if n > c.max_position_embeddings:
      raise ValueError(f"CLIPTextModel: {n} tokens is more than max_position_embeddings ({c.max_position_embeddings})")
    if n == 0: raise ValueError("CLIPTextModel: input_ids has no tokens")
    mask = Tensor.arange(n, device=device).unsqueeze(-1) >= Tensor.arange(n, device=device)   # causal: each token sees those before it
    if attention_mask is not None:
      m = attention_mask if isinstance(attention_mask, Tensor) else Tensor(attention_mask, device=device)
      if m.shape != ids.shape: raise ValueError(f"CLIPTextModel: attention_mask must be shaped like input_ids {ids.shape}, got {m.shape}")
      mask = mask & (m != 0).reshape(b, 1, 1, n)   # (padding keys get no attention)
    x = self.embeddings(ids)
    dtype = self.embeddings.token_embedding.weight.dtype
    hidden = [x]
    for layer in self.encoder.layers:
      x = layer(x, mask)
      hidden.append(x)
    last = self.final_layer_norm(x)
    # transformers' rule: configs from before its fix (eos_token_id 2) take each row's largest id (CLIP's EOS is the
    # vocabulary's last token); the others, the first position of eos_token_id (padding may be EOS too)
    pos = ids.argmax(-1) if c.eos_token_id == 2 else (ids == c.eos_token_id).cast(dtypes.int32).argmax(-1)
    at = (Tensor.arange(n, device=device) == pos.unsqueeze(-1)).reshape(b, n, 1)
    pooled = at.where(last, Tensor.zeros((), dtype=dtype, device=device)).sum(1).cast(dtype)
    return CLIPTextOutput(last, pooled, tuple(hidden))

class CLIPTextModel:
  """transformers' CLIPTextModel at inference, from its config (a dict of config.json or a CLIPTextConfig), with its
  parameter names (text_model.embeddings.token_embedding.weight, text_model.encoder.layers.0.self_attn.q_proj.weight,
  text_model.final_layer_norm.bias, ...). model(input_ids, attention_mask=None) -> CLIPTextOutput; input_ids is a Tensor
  or list of lists of ints (batch, length <= max_position_embeddings); attention_mask (optional, 1 token, 0 padding)
  keeps padding keys out of the attention (Stable Diffusion's pipelines give none). The outputs are lazy: realize what
  you use, together (Tensor.realize_all) when you use several."""
  def __init__(self, config: Union[dict, CLIPTextConfig], device=None):
    self.config = config if isinstance(config, CLIPTextConfig) else CLIPTextConfig.from_dict(config)
    self.text_model = CLIPTextTransformer(self.config, device)

  def __call__(self, input_ids, attention_mask=None) -> CLIPTextOutput: return self.text_model(input_ids, attention_mask)

  @classmethod
  def from_pretrained(cls, folder: Union[str, os.PathLike], device: Optional[str] = None, dtype: Optional[DType] = None,
                      variant: Optional[str] = None):
    """A transformers folder (save_pretrained's, or a diffusers pipeline's text_encoder/ or text_encoder_2/): config.json
    and model[.variant].safetensors, or its sharded form (model.safetensors.index[.variant].json and the shards). The
    weights are converted to float32 unless dtype says otherwise (dtypes.float16 keeps a float16 file's weights as they
    are; the device must have float16)."""
    cfg_path = os.path.join(os.fspath(folder), "config.json")
    model = cls(CLIPTextConfig.from_dict(read_json(cfg_path, "a transformers model folder"), cfg_path), device)
    if dtype is not None: set_parameter_dtype(model, dtype, device, f"{cls.__name__}.from_pretrained")
    load_state_dict(model, clip_state_dict(load_safetensors(folder, "model", device, variant)))
    return model

class CLIPTextModelWithProjection(CLIPTextModel):
  """transformers' CLIPTextModelWithProjection (SDXL's text_encoder_2): CLIPTextModel and text_projection (no bias) on
  the pooled output, which the output gives as text_embeds."""
  def __init__(self, config: Union[dict, CLIPTextConfig], device=None):
    super().__init__(config, device)
    self.text_projection = Linear(self.config.hidden_size, self.config.projection_dim, bias=False, device=device)

  def __call__(self, input_ids, attention_mask=None) -> CLIPTextOutput:
    out = self.text_model(input_ids, attention_mask)
    return out._replace(text_embeds=self.text_projection(out.pooler_output))

def clip_state_dict(state_dict: dict[str, Tensor]) -> dict[str, Tensor]:
  """A transformers CLIP text checkpoint's tensors under CLIPTextModel's names: the text_model. prefix put back where
  transformers >= 5.6 saved CLIPTextModel without it, and the position_ids buffer older checkpoints saved dropped."""
  out = {}
  for k, v in state_dict.items():
    if k.startswith(("embeddings.", "encoder.", "final_layer_norm.")): k = "text_model." + k
    if k != "text_model.embeddings.position_ids": out[k] = v
  return out

# ---------------------------------------------------------------------------------------------------------------
# original single-file checkpoints

SD1_CLIP_PREFIX = "cond_stage_model.transformer."            # SD 1.x: CLIP ViT-L/14's text encoder, transformers' names
SDXL_CLIP_PREFIX = "conditioner.embedders.0.transformer."    # SDXL base: the same encoder
SD2_OPEN_CLIP_PREFIX = "cond_stage_model.model."             # SD 2.x: OpenCLIP ViT-H/14's, OpenCLIP's names
SDXL_OPEN_CLIP_PREFIX = "conditioner.embedders.1.model."     # SDXL base: OpenCLIP ViT-bigG/14's
SDXL_REFINER_OPEN_CLIP_PREFIX = "conditioner.embedders.0.model."

def clip_state_dict_from_ldm(state_dict: dict[str, Tensor], prefix: str = SD1_CLIP_PREFIX) -> dict[str, Tensor]:
  """The CLIP text encoder of an original checkpoint whose tensors are transformers' under a prefix (SD1_CLIP_PREFIX,
  SDXL_CLIP_PREFIX): those tensors, the prefix taken off (the position_ids buffer dropped). The checkpoint's other
  tensors (UNet, VAE, ...) are left out; none under the prefix is a ValueError."""
  out = clip_state_dict({k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)})
  if not out: raise ValueError(f"clip_state_dict_from_ldm: the checkpoint has no tensor under {prefix!r}")
  return out

_OPEN_CLIP_TOP = {"token_embedding.weight": "text_model.embeddings.token_embedding.weight",
                  "positional_embedding": "text_model.embeddings.position_embedding.weight",
                  "ln_final.weight": "text_model.final_layer_norm.weight", "ln_final.bias": "text_model.final_layer_norm.bias"}
_OPEN_CLIP_BLOCK = {"ln_1": "layer_norm1", "ln_2": "layer_norm2", "mlp.c_fc": "mlp.fc1", "mlp.c_proj": "mlp.fc2",
                    "attn.out_proj": "self_attn.out_proj"}

def clip_state_dict_from_open_clip(state_dict: dict[str, Tensor], prefix: str = SDXL_OPEN_CLIP_PREFIX, num_layers: Optional[int] = None,
                                   projection: bool = True) -> dict[str, Tensor]:
  """An OpenCLIP text tower of an original checkpoint (SD2_OPEN_CLIP_PREFIX, SDXL_OPEN_CLIP_PREFIX, ...) under
  CLIPTextModelWithProjection's names: transformer.resblocks.N -> text_model.encoder.layers.N, each attention's
  in_proj (q, k, v stacked) split into q_proj, k_proj, v_proj, ln_1/ln_2 -> layer_norm1/2, mlp.c_fc/c_proj ->
  mlp.fc1/fc2, ln_final -> final_layer_norm, text_projection (hidden, projection_dim) transposed into
  text_projection.weight; logit_scale is dropped. num_layers: keep only the first blocks (SD 2.x's CLIPTextModel has 23
  of OpenCLIP's 24); projection=False: leave text_projection out (for a CLIPTextModel). Any other name under the prefix
  is a ValueError."""
  out: dict[str, Tensor] = {}
  for key, t in state_dict.items():
    if not key.startswith(prefix): continue
    k = key[len(prefix):]
    if k in _OPEN_CLIP_TOP: out[_OPEN_CLIP_TOP[k]] = t
    elif k == "text_projection":
      if projection: out["text_projection.weight"] = t.T
    elif k == "logit_scale": pass
    elif k.startswith("transformer.resblocks.") and (parts := k[len("transformer.resblocks."):].split(".", 1))[0].isdigit() and len(parts) == 2:
      n, rest = int(parts[0]), parts[1]
      if num_layers is not None and n >= num_layers: continue
      base = f"text_model.encoder.layers.{n}."
      if rest in ("attn.in_proj_weight", "attn.in_proj_bias"):
        if t.shape[0] % 3: raise ValueError(f"clip_state_dict_from_open_clip: {key!r} has shape {t.shape}, not three stacked projections")
        kind, third = rest.rpartition("_")[2], t.shape[0] // 3
        for i, p in enumerate("qkv"): out[f"{base}self_attn.{p}_proj.{kind}"] = t[i * third:(i + 1) * third]
      elif (name := rest.rpartition(".")) and name[0] in _OPEN_CLIP_BLOCK and name[2] in ("weight", "bias"):
        out[base + _OPEN_CLIP_BLOCK[name[0]] + "." + name[2]] = t
      else: raise ValueError(f"clip_state_dict_from_open_clip: {key!r} is not a tensor of an OpenCLIP text transformer")
    else: raise ValueError(f"clip_state_dict_from_open_clip: {key!r} is not a tensor of an OpenCLIP text transformer")
  if not out: raise ValueError(f"clip_state_dict_from_open_clip: the checkpoint has no tensor under {prefix!r}")
  return out
