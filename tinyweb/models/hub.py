"""The files of Hugging Face style model folders (transformers', diffusers', sentence-transformers' save_pretrained): their
JSON files read with errors naming the file, their safetensors weights whole or in shards, and the parameters' dtype set
before the weights are loaded; and what their tokenizers (the `tokenizers` library's) share: the added tokens' matching."""
from __future__ import annotations
import json, os
from typing import Callable, Optional, Union
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes, DType
from tinyweb.device import Device
from tinyweb.nn.state import safe_load, get_state_dict

def read_json(path: Union[str, os.PathLike], what: str = ""):
  """The JSON value of a file; what: the kind of folder that has it, for the FileNotFoundError's message."""
  path = os.fspath(path)
  try:
    with open(path, encoding="utf-8") as f: return json.load(f)
  except FileNotFoundError: raise FileNotFoundError(f"{path}: not found{f' ({what} has it)' if what else ''}") from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e: raise ValueError(f"{path}: not JSON ({e})") from None

def load_safetensors(folder: Union[str, os.PathLike], stem: str, device: Optional[str] = None, variant: Optional[str] = None) -> dict[str, Tensor]:
  """The tensors of stem[.variant].safetensors in the folder, or of the shards its index (stem.safetensors.index[.variant].json,
  the name transformers and diffusers save) maps them to: each key taken from its own shard alone."""
  folder = os.fspath(folder)
  name, index_name = f"{stem}.{variant}" if variant else stem, f"{stem}.safetensors.index{f'.{variant}' if variant else ''}.json"
  if os.path.exists(single := os.path.join(folder, name + ".safetensors")): return safe_load(single, device)
  if not os.path.exists(index := os.path.join(folder, index_name)):
    raise FileNotFoundError(f"{folder}: neither {name}.safetensors nor {index_name} is there")
  weight_map = read_json(index)
  if not isinstance(weight_map, dict) or not isinstance(weight_map := weight_map.get("weight_map"), dict):
    raise ValueError(f"{index}: not a safetensors index (no weight_map object)")
  out: dict[str, Tensor] = {}
  for shard in dict.fromkeys(weight_map.values()):
    if not isinstance(shard, str) or os.path.basename(shard) != shard: raise ValueError(f"{index}: shard {shard!r} is not a file name in the folder")
    out.update({k: v for k, v in safe_load(os.path.join(folder, shard), device).items() if weight_map.get(k) == shard})
  if (missing := [k for k in weight_map if k not in out]): raise ValueError(f"{index}: {missing[0]!r} is not in its shard {weight_map[missing[0]]}")
  return out

def set_parameter_dtype(model, dtype: DType, device: Optional[str], who: str):
  """Every parameter of the model replaced by an (uninitialized) one of dtype, so load_state_dict, which casts what it
  loads to the parameters' dtype, loads the weights in that dtype. who: the caller, for the ValueError's message."""
  if dtype not in (dtypes.float16, dtypes.bfloat16, dtypes.float32):
    raise ValueError(f"{who}: dtype {dtype} is not supported (float16, bfloat16 or float32)")
  if not Device[device := Device.canonicalize(device)].has_dtype(dtype): raise ValueError(f"{who}: device {device} has no {dtype.name}")
  made: dict[int, Tensor] = {}   # (a tensor under two keys stays one tensor)
  for key, t in get_state_dict(model).items():
    *path, last = key.split(".")
    obj = model
    for p in path: obj = obj[int(p)] if isinstance(obj, list) else obj[p] if isinstance(obj, dict) else getattr(obj, p)
    if (new := made.get(id(t))) is None: new = made[id(t)] = Tensor.empty(*t.shape, dtype=dtype, device=t.device)
    if isinstance(obj, list): obj[int(last)] = new
    elif isinstance(obj, dict): obj[last] = new
    else: setattr(obj, last, new)

# Unicode's White_Space characters: what the `tokenizers` library's regex \s matches (not U+001C..U+001F, which Python's
# str.isspace also takes)
WHITESPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
                       "\u2028\u2029\u202f\u205f\u3000")

def split_added_tokens(text: str, added: dict[str, dict]) -> list[tuple[str, Optional[int]]]:
  """text cut at the added tokens ({content: AddedToken dict with its id}), leftmost-longest: (piece, None) for the text
  between, (token, id) for each token; a token's lstrip/rstrip takes the whitespace on that side with it."""
  if not added or not text: return [(text, None)] if text else []
  out, start, i, firsts = [], 0, 0, {s[0] for s in added if s}
  while i < len(text):
    match = max((s for s in added if s and text.startswith(s, i)), key=len, default=None) if text[i] in firsts else None
    if not match:
      i += 1
      continue
    tok, begin, end = added[match], i, i + len(match)
    if tok.get("lstrip"):
      while begin > start and text[begin - 1] in WHITESPACE: begin -= 1
    if tok.get("rstrip"):
      while end < len(text) and text[end] in WHITESPACE: end += 1
    if start < begin: out.append((text[start:begin], None))
    out.append((match, tok["id"]))
    start = i = end
  if start < len(text): out.append((text[start:], None))
  return out

def ids_with_added_tokens(text: str, raw_added: dict[str, dict], normalized_added: dict[str, dict], normalize: Callable[[str], str],
                          piece_ids: Callable[[str], list[int]]) -> list[int]:
  """A text's ids as the `tokenizers` library makes them: the added tokens that are not normalized matched in the raw
  text, the others in the normalized rest, and piece_ids of each normalized piece between them (the model's own
  pre-tokenizer and BPE or WordPiece)."""
  ids: list[int] = []
  for raw, raw_id in split_added_tokens(text, raw_added):
    if raw_id is not None:
      ids.append(raw_id)
      continue
    for piece, piece_id in split_added_tokens(normalize(raw), normalized_added):
      if piece_id is not None: ids.append(piece_id)
      else: ids.extend(piece_ids(piece))
  return ids
