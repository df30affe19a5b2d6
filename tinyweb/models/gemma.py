"""Gemma 3 language models (the text part: Gemma3ForCausalLM) from a GGUF file, its tokenizer from the same file, and
generation with a KV cache.

  model = Gemma.load("gemma-3-270m-q4_k_m.gguf")                      # device=None: Device.DEFAULT
  for text in model.generate("The capital of France is", max_new_tokens=32): print(text, end="", flush=True)
  model.generate(prompt, temperature=0.8, top_k=40, seed=1)            # sampled (seeded); temperature=0: greedy

The architecture is transformers' Gemma3ForCausalLM: the embedding scaled by sqrt(hidden size), RMSNorms whose weights
are 1 + the trained ones (GGUF files store the sum), q and k normalized per head, grouped-query attention, RoPE with the
local base frequency (10,000) on sliding-window layers and the file's on the global ones (every sixth layer), a
GELU-tanh gated MLP, norms before and after both the attention and the MLP, the embedding as the output layer, logits
soft-capped where the file asks for it. The weights stay quantized on the device (tinyweb.gguf); each matmul computes
the float weights it reads.

Generation runs the prompt in chunks of PREFILL_CHUNK tokens, then one token per step; each is a TinyJit-ted step whose
position is a tensor input, writing its keys and values in place into a cache of `max_context` positions per layer.

`GemmaTokenizer` is pure Python (no numpy): the BPE of the file's vocabulary as transformers builds it for Gemma (merges
ranked by the order of the tokens they make, spaces as "▁", characters outside the vocabulary as their UTF-8 bytes'
<0xXX> tokens), control tokens and user-defined ones (runs of newlines, HTML tags) matched whole in the text first."""
from __future__ import annotations
import functools, heapq, math, random, struct
from dataclasses import dataclass
from typing import Iterator, Optional, Sequence, Union
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes
from tinyweb.helpers import prod
from tinyweb.jit import TinyJit
from tinyweb.gguf import GGUFFile, dequantize, GGML_TYPES

# ---------------------------------------------------------------------------------------------------------------------
# the tokenizer

CONTROL, USER_DEFINED = 3, 4   # tokenizer.ggml.token_type values (llama.cpp's; 1 is a normal token, 6 a byte)
SPACE = "\u2581"               # "▁", SentencePiece's space

def _byte_value(token: str) -> Optional[int]:
  """The byte of a byte-fallback token "<0xXX>", else None."""
  if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
    try: return int(token[3:5], 16)
    except ValueError: return None
  return None

class GemmaTokenizer:
  """encode(text) -> ids (BOS first where the file says so); decode(ids) -> text (special tokens left out unless
  skip_special_tokens=False). Texts are cut at control and user-defined tokens (leftmost-longest), each piece between
  them has its spaces made "▁" and is BPE-merged as one word, best merge first: the merge making the token that comes
  first in the vocabulary, and of two ways to make it the one with the longer left part."""
  def __init__(self, tokens: Sequence[str], token_types: Sequence[int], bos_id: int, eos_id: int, unk_id: int,
               add_bos: bool = True, add_eos: bool = False, name: str = "tokenizer"):
    if len(token_types) != len(tokens): raise ValueError(f"{name}: {len(tokens)} tokens but {len(token_types)} token types")
    for what, i in (("bos", bos_id), ("eos", eos_id), ("unknown", unk_id)):
      if not 0 <= i < len(tokens): raise ValueError(f"{name}: the {what} token's id {i} is not in the vocabulary of {len(tokens)}")
    self.name, self.bos_id, self.eos_id, self.unk_id, self.add_bos, self.add_eos = name, bos_id, eos_id, unk_id, add_bos, add_eos
    self.tokens, self.token_types = list(tokens), list(token_types)
    # (transformers looks up a token of spaces as "▁" runs, so such tokens are renamed before anything else)
    self.pieces = [SPACE * len(t) if " " in t and not t.strip() else t for t in tokens]
    self.vocab = {t: i for i, t in enumerate(self.pieces)}
    self.bytes = [self.vocab.get(f"<0x{b:02X}>") for b in range(256)]
    self.special = {i for i, k in enumerate(token_types) if k == CONTROL} | {bos_id, eos_id, unk_id}
    self.added = {tokens[i]: i for i in sorted(self.special)}
    self.added.update({t: i for i, (t, k) in enumerate(zip(tokens, token_types)) if k == USER_DEFINED and t in self.vocab})
    self.added_lengths: dict[str, list[int]] = {}   # first character -> the lengths of the added tokens starting with it
    for t in self.added:
      if t: self.added_lengths.setdefault(t[0], []).append(len(t))
    for lengths in self.added_lengths.values(): lengths.sort(reverse=True)
    self.text_of = {i: t for t, i in self.added.items()}

  @classmethod
  def from_gguf(cls, metadata: dict, name: str = "gguf") -> "GemmaTokenizer":
    need = ["tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"]
    if missing := [k for k in need if k not in metadata]: raise ValueError(f"{name}: no tokenizer: the metadata lacks {', '.join(missing)}")
    if (model := metadata.get("tokenizer.ggml.model")) != "llama":
      raise ValueError(f"{name}: tokenizer.ggml.model is {model!r}; GemmaTokenizer reads SentencePiece vocabularies ('llama')")
    return cls(metadata["tokenizer.ggml.tokens"], metadata["tokenizer.ggml.token_type"], metadata["tokenizer.ggml.bos_token_id"],
               metadata["tokenizer.ggml.eos_token_id"], metadata.get("tokenizer.ggml.unknown_token_id", 3),
               metadata.get("tokenizer.ggml.add_bos_token", True), metadata.get("tokenizer.ggml.add_eos_token", False), name)

  def __len__(self): return len(self.pieces)

  def to_json(self) -> dict:
    """What the constructor takes, as JSON: web/gemma_tokenizer.ts builds the same tokenizer from it in a page."""
    return {"format": "tinyweb-gemma-tokenizer", "tokens": self.tokens, "types": self.token_types, "bos": self.bos_id,
            "eos": self.eos_id, "unk": self.unk_id, "addBos": self.add_bos, "addEos": self.add_eos}

  def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
    ids = [self.bos_id] if add_special_tokens and self.add_bos else []
    start = i = 0
    while i < len(text):
      for n in self.added_lengths.get(text[i], ()):
        if text[i:i + n] in self.added: break
      else:
        i += 1
        continue
      ids += self._bpe(text[start:i].replace(" ", SPACE))
      ids.append(self.added[text[i:i + n]])
      start = i = i + n
    ids += self._bpe(text[start:].replace(" ", SPACE))
    return ids + [self.eos_id] if add_special_tokens and self.add_eos else ids

  def _bpe(self, word: str) -> list[int]:
    # the symbols: the word's characters, or their UTF-8 bytes' tokens (the unknown token where one is missing); merged
    # best pair first, as a linked list with a heap of candidate pairs
    syms: list[Optional[str]] = []
    for c in word:
      if c in self.vocab: syms.append(c)
      elif None in (ids := [self.bytes[x] for x in c.encode("utf-8")]): syms.append(self.pieces[self.unk_id])
      else: syms += [self.pieces[i] for i in ids]
    nxt, prv = list(range(1, len(syms) + 1)), list(range(-1, len(syms) - 1))
    def pair(k: int):
      if (n := nxt[k]) < len(syms) and (m := self.vocab.get(syms[k] + syms[n])) is not None: return (m, -len(syms[k]), k, syms[k], syms[n])
    heap = [p for k in range(len(syms) - 1) if (p := pair(k))]
    heapq.heapify(heap)
    while heap:
      _, _, i, left, right = heapq.heappop(heap)
      if syms[i] != left or (j := nxt[i]) >= len(syms) or syms[j] != right: continue   # stale: a neighbour merged meanwhile
      syms[i], syms[j], nxt[i] = left + right, None, nxt[j]
      if nxt[i] < len(syms): prv[nxt[i]] = i
      for k in (prv[i], i):
        if k >= 0 and (p := pair(k)): heapq.heappush(heap, p)
    return [self.vocab[s] for s in syms if s is not None]

  def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
    out, pending = [], bytearray()
    def flush():
      if pending:
        try: out.append(pending.decode("utf-8"))
        except UnicodeDecodeError: out.append("\ufffd" * len(pending))
        pending.clear()
    for i in ids:
      if not 0 <= i < len(self.pieces): raise ValueError(f"{self.name}: token id {i} is not in the vocabulary of {len(self.pieces)}")
      if skip_special_tokens and i in self.special: continue
      piece = self.text_of.get(i, self.pieces[i])
      if (b := _byte_value(piece)) is not None: pending.append(b)
      else:
        flush()
        out.append(piece.replace(SPACE, " "))
    flush()
    return "".join(out)

# ---------------------------------------------------------------------------------------------------------------------
# the model

@dataclass(frozen=True)
class GemmaConfig:
  vocab_size: int
  hidden_size: int
  layers: int
  heads: int
  kv_heads: int
  head_dim: int
  intermediate_size: int
  rms_eps: float
  rope_base: float                 # global layers
  rope_local_base: float           # sliding-window layers
  rope_scale: float                # linear RoPE scaling of the global layers (positions divided by it)
  sliding_window: int
  sliding_window_pattern: int      # every n-th layer is global
  query_scale: float               # attention scores are q.k times this
  final_logit_softcapping: Optional[float]
  context_length: int

  @classmethod
  def from_gguf(cls, meta: dict, name: str = "gguf") -> "GemmaConfig":
    arch = meta.get("general.architecture")
    if arch != "gemma3": raise ValueError(f"{name}: general.architecture is {arch!r}; Gemma reads 'gemma3' files")
    def get(key: str, default=None):
      v = meta.get(f"gemma3.{key}", default)
      if v is None: raise ValueError(f"{name}: the metadata lacks gemma3.{key}")
      return v
    heads, head_dim = get("attention.head_count"), get("attention.key_length")
    if get("attention.value_length", head_dim) != head_dim: raise ValueError(f"{name}: key and value lengths differ")
    scaling = meta.get("gemma3.rope.scaling.type", "none")
    if scaling not in ("none", "linear"): raise ValueError(f"{name}: RoPE scaling {scaling!r} is not supported (none, linear)")
    return cls(vocab_size=len(meta.get("tokenizer.ggml.tokens", ())) or get("vocab_size"), hidden_size=get("embedding_length"),
               layers=get("block_count"), heads=heads, kv_heads=get("attention.head_count_kv", heads), head_dim=head_dim,
               intermediate_size=get("feed_forward_length"), rms_eps=get("attention.layer_norm_rms_epsilon"),
               rope_base=get("rope.freq_base", 1_000_000.0), rope_local_base=10_000.0,
               rope_scale=get("rope.scaling.factor", 1.0) if scaling == "linear" else 1.0,
               sliding_window=get("attention.sliding_window"), sliding_window_pattern=6,
               # transformers' query_pre_attn_scalar, which a GGUF file does not record: the head size for Gemma 3
               query_scale=head_dim ** -0.5, final_logit_softcapping=meta.get("gemma3.final_logit_softcapping"),
               context_length=get("context_length"))

  def is_global(self, layer: int) -> bool: return (layer + 1) % self.sliding_window_pattern == 0

def _f32(x: float) -> float: return struct.unpack("<f", struct.pack("<f", x))[0]

def _inv_freq(base: float, dim: int) -> list[float]:
  """RoPE's frequencies as transformers computes them in float32: 1 / base ** (2i / dim)."""
  return [_f32(1.0 / _f32(base ** _f32(i / dim))) for i in range(0, dim, 2)]

def linear(x: Tensor, w: Tensor, block: int) -> Tensor:
  """x @ w.T for a weight stored in blocks of `block` along its rows. One row against 32-element blocks is summed over
  (blocks, 32) instead: the same sum in the same order, whose inner loop walks one block (a third faster on the CPU)."""
  if block != 32 or prod(x.shape[:-1]) != 1 or w.shape[1] % 32: return x @ w.T
  n, k = w.shape
  return (x.reshape(*x.shape[:-1], 1, k // 32, 32) * w.reshape(n, k // 32, 32)).sum((-1, -2))

class QuantizedLinear:
  """y = x @ weight.T for a GGUF weight (out, in) in any of tinyweb.gguf's types, computed from its blocks."""
  def __init__(self, f: GGUFFile, name: str, device):
    self.weight, self.block = f.tensor(name, device), next(b for n, b, _ in GGML_TYPES.values() if n == f.info(name).type)
  def __call__(self, x: Tensor) -> Tensor: return linear(x, self.weight, self.block)

class GemmaBlock:
  def __init__(self, f: GGUFFile, i: int, cfg: GemmaConfig, device):
    w = lambda n: f.tensor(f"blk.{i}.{n}.weight", device)
    lin = lambda n: QuantizedLinear(f, f"blk.{i}.{n}.weight", device)
    self.attn_norm, self.post_attention_norm, self.ffn_norm, self.post_ffw_norm = \
      w("attn_norm"), w("post_attention_norm"), w("ffn_norm"), w("post_ffw_norm")
    self.q, self.k, self.v, self.o = lin("attn_q"), lin("attn_k"), lin("attn_v"), lin("attn_output")
    self.q_norm, self.k_norm = w("attn_q_norm"), w("attn_k_norm")
    self.gate, self.up, self.down = lin("ffn_gate"), lin("ffn_up"), lin("ffn_down")
    self.cfg, self.is_global = cfg, cfg.is_global(i)
    base = cfg.rope_base if self.is_global else cfg.rope_local_base
    self.inv_freq = Tensor(_inv_freq(base, cfg.head_dim) * 2, device=device)   # (both halves of a head turn alike)
    self.rope_scale = cfg.rope_scale if self.is_global else 1.0

  def norm(self, x: Tensor, weight: Tensor) -> Tensor: return x.rmsnorm(-1, self.cfg.rms_eps) * weight   # (the file's weight is 1 + w)

  def rope(self, x: Tensor, pos: Tensor) -> Tensor:
    """x (1, heads, T, D) rotated by the angles of positions `pos` (T,), in transformers' half-split layout."""
    p = pos.cast(dtypes.float32)
    freqs = (p if self.rope_scale == 1.0 else p / self.rope_scale).unsqueeze(1) * self.inv_freq
    cos, sin = freqs.cos(), freqs.sin()
    half = x.shape[-1] // 2
    rotated = (-x[..., half:]).cat(x[..., :half], dim=-1)
    return x * cos + rotated * sin

  def __call__(self, x: Tensor, pos: Tensor, start: Tensor, cache_k: Tensor, cache_v: Tensor) -> Tensor:
    cfg, (_, T, _) = self.cfg, x.shape
    L, H, KV, D = cache_k.shape[2], cfg.heads, cfg.kv_heads, cfg.head_dim
    h = self.norm(x, self.attn_norm)
    q = self.q(h).reshape(1, T, H, D).transpose(1, 2)
    k = self.k(h).reshape(1, T, KV, D).transpose(1, 2)
    v = self.v(h).reshape(1, T, KV, D).transpose(1, 2)
    q, k = self.rope(self.norm(q, self.q_norm), pos), self.rope(self.norm(k, self.k_norm), pos)
    # the cache rows start .. start+T-1 take the new keys and values: row l reads row l - start of the chunk, a selecting
    # sum (one read per element), and the cache is written in place
    slots = Tensor.arange(L, device=x.device)
    pick = (Tensor.arange(T, device=x.device).reshape(T, 1) == (slots - start).reshape(1, L)).reshape(1, 1, T, L, 1)
    fresh = ((slots >= start) & (slots < start + T)).reshape(1, 1, L, 1)
    cache_k.assign(fresh.where(pick.where(k.unsqueeze(3), 0.0).sum(2), cache_k))
    cache_v.assign(fresh.where(pick.where(v.unsqueeze(3), 0.0).sum(2), cache_v))
    # grouped-query attention: the H / KV query heads of a key head as one (H / KV * T) block of rows
    qg = q.reshape(1, KV, H // KV * T, D)
    scores = (qg @ cache_k.transpose(2, 3)) * cfg.query_scale
    qpos, kpos = pos.reshape(1, T), slots.reshape(L, 1)
    allowed = kpos <= qpos if self.is_global else (kpos <= qpos) & (qpos - kpos < cfg.sliding_window)   # (L, T)
    allowed = allowed.T.reshape(1, 1, 1, T, L).expand(1, KV, H // KV, T, L).reshape(1, KV, H // KV * T, L)
    attn = allowed.where(scores, -1e30).softmax(-1) @ cache_v   # (not -inf: WGSL may assume there are no infinities)
    attn = attn.reshape(1, H, T, D).transpose(1, 2).reshape(1, T, H * D)
    x = x + self.norm(self.o(attn), self.post_attention_norm)
    h = self.norm(x, self.ffn_norm)
    mlp = self.down(self.gate(h).gelu("tanh") * self.up(h))
    return x + self.norm(mlp, self.post_ffw_norm)

PREFILL_CHUNK = 16
MAX_PART_BYTES = 1 << 27   # WebGPU binds at most 128 MB per buffer (maxStorageBufferBindingSize): the vocabulary in parts

class VocabularyTable:
  """A (vocabulary, hidden) GGUF tensor (the embedding, the output layer) kept as its raw blocks, in parts of rows
  whose float32 values would fit in MAX_PART_BYTES. `lookup(ids)` reads and dequantizes only the rows asked for;
  `project(h)` is h @ table.T, each part's float values computed by the kernel that reads them."""
  def __init__(self, f: GGUFFile, name: str, device):
    info = f.info(name)
    self.type, (self.rows, self.width) = info.type, info.shape
    self.block, self.size = next((b, s) for n, b, s in GGML_TYPES.values() if n == info.type)
    step = 1 << max(0, (MAX_PART_BYTES // (4 * self.width)).bit_length() - 1)
    self.parts = [(a, f.raw(name, device, (a, min(a + step, self.rows))).reshape(min(step, self.rows - a), -1)) for a in range(0, self.rows, step)]

  def values(self, raw: Tensor) -> Tensor: return dequantize(raw.reshape(-1, self.size), self.type).reshape(raw.shape[0], self.width)

  def lookup(self, ids: Tensor) -> Tensor:
    def rows(begin: int, part: Tensor) -> Tensor:   # zeros for the ids outside the part (an index past the end reads 0)
      local = ids - begin
      return part[((local >= 0) & (local < part.shape[0])).where(local, part.shape[0])]
    return self.values(functools.reduce(lambda acc, p: acc + rows(*p), self.parts[1:], rows(*self.parts[0])))

  def project(self, h: Tensor) -> Tensor:
    outs = [linear(h, self.values(raw), self.block) for _, raw in self.parts]
    return outs[0].cat(*outs[1:], dim=-1)

class Gemma:
  """A Gemma 3 model: `Gemma.load(path)`; `model(ids)` -> logits; `generate` / `generate_ids` for text."""
  def __init__(self, f: GGUFFile, device=None, max_context: int = 512):
    name = f.name
    self.config = cfg = GemmaConfig.from_gguf(f.metadata, name)
    self.tokenizer = GemmaTokenizer.from_gguf(f.metadata, name)
    if not 1 <= max_context <= cfg.context_length:
      raise ValueError(f"Gemma: max_context must be 1 .. {cfg.context_length} (the model's context length), got {max_context}")
    self.max_context = max_context
    for t in ["token_embd.weight", "output.weight"]:
      if t in f.tensors and f.tensors[t].shape != (cfg.vocab_size, cfg.hidden_size):
        raise ValueError(f"{name}: {t} is {f.tensors[t].shape}, expected ({cfg.vocab_size}, {cfg.hidden_size})")
    self.embed = VocabularyTable(f, "token_embd.weight", device)
    self.output = VocabularyTable(f, "output.weight", device) if "output.weight" in f.tensors else self.embed   # (tied)
    self.output_norm = f.tensor("output_norm.weight", device)
    self.blocks = [GemmaBlock(f, i, cfg, device) for i in range(cfg.layers)]
    self.device = self.output_norm.device
    self.cache = [(Tensor.zeros(1, cfg.kv_heads, max_context, cfg.head_dim, device=device).contiguous().realize(),
                   Tensor.zeros(1, cfg.kv_heads, max_context, cfg.head_dim, device=device).contiguous().realize()) for _ in self.blocks]
    self._steps: dict[tuple[int, bool], TinyJit] = {}

  @classmethod
  def load(cls, path, device=None, max_context: int = 512) -> "Gemma":
    """The model of a Gemma 3 GGUF file (any of tinyweb.gguf's types); keys and values cached for `max_context` tokens."""
    return cls(GGUFFile(path), device, max_context)

  def embedding(self, tokens: Tensor) -> Tensor:
    """(1, T) token ids -> (1, T, hidden), scaled by sqrt(hidden): only the tokens' rows are read and dequantized."""
    return self.embed.lookup(tokens.reshape(-1)).unsqueeze(0) * _f32(math.sqrt(self.config.hidden_size))

  def hidden(self, tokens: Tensor, start: Tensor) -> Tensor:
    """The final-normed hidden states (1, T, hidden) of tokens (1, T) at positions start.. (start: a (1,) int32 tensor),
    their keys and values written into the cache (lazily: realized with the result)."""
    pos = start + Tensor.arange(tokens.shape[1], device=self.device, dtype=dtypes.int32)
    x = self.embedding(tokens)
    for block, (ck, cv) in zip(self.blocks, self.cache): x = block(x, pos, start, ck, cv)
    return x.rmsnorm(-1, self.config.rms_eps) * self.output_norm

  def logits(self, h: Tensor) -> Tensor:
    out = self.output.project(h)
    if (cap := self.config.final_logit_softcapping): out = (out / cap).tanh() * cap
    return out

  def __call__(self, ids: Union[Sequence[int], Tensor], start: int = 0) -> Tensor:
    """Logits (T, vocab) of the token ids at positions start.. (the cache must hold the earlier positions)."""
    tokens = self._tokens(ids, start)
    logits = self.logits(self.hidden(tokens, Tensor([start], dtype=dtypes.int32, device=self.device)))[0]
    Tensor.realize_all(logits, *[c for kv in self.cache for c in kv])
    return logits

  def _tokens(self, ids, start: int) -> Tensor:
    tokens = ids if isinstance(ids, Tensor) else Tensor([list(ids)], dtype=dtypes.int32, device=self.device)
    tokens = tokens.reshape(1, -1).cast(dtypes.int32)
    if start < 0 or start + tokens.shape[1] > self.max_context:
      raise ValueError(f"Gemma: positions {start}..{start + tokens.shape[1] - 1} do not fit the cache of {self.max_context} (max_context)")
    return tokens

  def step(self, tokens: Tensor, start: Tensor, last: Tensor, greedy: bool = False) -> Tensor:
    """One step of generation: tokens (1, n) at positions start.. (start: (1,) int32) written into the cache, then the
    next token (1,) int32 (greedy: the most likely) or its logits (1, vocab), from row `last` (1,) int32 of the tokens
    (the prompt's last one: a chunk may be padded). Realizes the result and the cache (what TinyJit captures)."""
    h = self.hidden(tokens, start)
    logits = self.logits(h[0, last])
    out = logits.argmax(-1).cast(dtypes.int32) if greedy else logits
    Tensor.realize_all(out, *[c for kv in self.cache for c in kv])
    return out

  def _step(self, n: int, greedy: bool) -> TinyJit:
    """`step` jitted for n tokens."""
    if (key := (n, greedy)) not in self._steps: self._steps[key] = TinyJit(functools.partial(self.step, greedy=greedy))
    return self._steps[key]

  def generate_ids(self, ids: Sequence[int], max_new_tokens: int = 32, temperature: float = 0.0, top_k: int = 0,
                   seed: Optional[int] = None) -> Iterator[int]:
    """The next tokens after `ids` (which should start with BOS), one at a time, until EOS (not yielded) or
    max_new_tokens. temperature 0: greedy (the most likely token); else sampled from softmax(logits / temperature),
    restricted to the top_k most likely tokens when top_k > 0, with Python's random seeded by `seed`."""
    if not ids: raise ValueError("Gemma.generate_ids: no tokens to start from (encode a prompt; it starts with BOS)")
    if temperature < 0 or top_k < 0: raise ValueError(f"Gemma.generate_ids: temperature ({temperature}) and top_k ({top_k}) must be >= 0")
    if len(ids) + max_new_tokens > self.max_context:
      raise ValueError(f"Gemma.generate_ids: {len(ids)} prompt tokens + {max_new_tokens} new ones do not fit max_context={self.max_context}")
    greedy, rng = temperature == 0, random.Random(seed)
    def pick(out: Tensor) -> int:
      if greedy: return int(out.item())
      row = out.tolist()[0]
      cand = heapq.nlargest(top_k, range(len(row)), key=row.__getitem__) if top_k else range(len(row))
      top = max(row[i] for i in cand)
      return rng.choices(cand, [math.exp((row[i] - top) / temperature) for i in cand])[0]
    dev, i32 = self.device, dtypes.int32
    ids, out = list(ids), None
    for s in range(0, len(ids), PREFILL_CHUNK):
      chunk = ids[s:s + PREFILL_CHUNK]
      last = len(chunk) - 1
      tokens = Tensor([chunk + [0] * (PREFILL_CHUNK - len(chunk))], dtype=i32, device=dev)   # (padding rows: computed, not used)
      out = self._step(PREFILL_CHUNK, greedy)(tokens, Tensor([s], dtype=i32, device=dev), Tensor([last], dtype=i32, device=dev))
    zero = Tensor([0], dtype=i32, device=dev)
    for n in range(max_new_tokens):
      token = pick(out)
      if token == self.tokenizer.eos_id: return
      yield token
      if n + 1 < max_new_tokens:
        out = self._step(1, greedy)(Tensor([[token]], dtype=i32, device=dev), Tensor([len(ids) + n], dtype=i32, device=dev), zero)

  def generate(self, prompt: str, max_new_tokens: int = 32, temperature: float = 0.0, top_k: int = 0,
               seed: Optional[int] = None) -> Iterator[str]:
    """The prompt's continuation as text: one piece per new token, the text it adds. A run of byte tokens (the UTF-8
    bytes of a character outside the vocabulary) is decoded as a whole, as `decode` does: its tokens give "" and the
    text comes with the next token (or in one piece after the last), so the pieces add up to decode(all new tokens)."""
    tok, new, done = self.tokenizer, [], ""
    for token in self.generate_ids(tok.encode(prompt), max_new_tokens, temperature, top_k, seed):
      new.append(token)
      last = next((t for t in reversed(new) if t not in tok.special), None)   # (decode skips special tokens)
      if last is not None and _byte_value(tok.pieces[last]) is not None:
        yield ""
        continue
      text = tok.decode(new)
      yield text[len(done):]
      done = text
    if (text := tok.decode(new)) != done: yield text[len(done):]
