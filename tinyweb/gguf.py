"""GGUF files (llama.cpp's model format), read in pure Python (no numpy: it runs in Pyodide), with their quantized
tensors dequantized on the device, inside tinyweb's graph.

  f = GGUFFile("gemma-3-270m-q4_k_m.gguf")         # header, metadata and tensor infos; a path is mapped with mmap
  f.metadata["general.architecture"]               # 'gemma3'
  w = f.tensor("blk.0.attn_q.weight", device)      # float32 (1024, 640), lazy: computed in the kernels that read it
  metadata, tensors = gguf_load(path)              # every tensor so

The layout (GGUF versions 2 and 3, little-endian): magic "GGUF", version (uint32), tensor count and metadata count
(uint64), the metadata (key string, value type, value), the tensor infos (name, dimension count, dimensions fastest
first, ggml type, offset into the data), padding to `general.alignment` (default 32), then the tensor data. A string is a
uint64 length and UTF-8 bytes; an array is its element type (uint32), a uint64 count and the elements.

A quantized tensor is uploaded as its raw blocks (a uint8 tensor, (blocks, bytes per block)); its scales, minimums and
quants are unpacked with tensor bit operations, and the float weight is an expression of them, so the kernel that uses
the weight (a matmul) reads the blocks and computes the values it needs: the float32 weight is never stored. Types:
F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K (ggml's block layouts), to the bit of gguf-py's
dequantizer. A file with other types reads; `tensor()` of such a tensor raises ValueError naming its type.

A malformed file raises tinyweb.nn.state.FormatError naming the file and the problem. Every count and size is checked
against the bytes left in the file before anything is allocated for it, so memory stays within a small multiple of
the file's size (a path is mapped, not read, where mmap exists)."""
from __future__ import annotations
import os, struct
from typing import Any, NamedTuple, Optional
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes
from tinyweb.helpers import prod, FormatError
from tinyweb.nn.state import Source, _as_memory, _naming

MAGIC = b"GGUF"
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4          # ggml's GGML_MAX_DIMS
MAX_NESTING = 8       # arrays of arrays

# metadata value types: id -> (name, struct code or None, smallest encoding in bytes)
VALUE_TYPES = {0: ("UINT8", "B", 1), 1: ("INT8", "b", 1), 2: ("UINT16", "H", 2), 3: ("INT16", "h", 2), 4: ("UINT32", "I", 4),
               5: ("INT32", "i", 4), 6: ("FLOAT32", "f", 4), 7: ("BOOL", None, 1), 8: ("STRING", None, 8),
               9: ("ARRAY", None, 12), 10: ("UINT64", "Q", 8), 11: ("INT64", "q", 8), 12: ("FLOAT64", "d", 8)}

# ggml tensor types: id -> (name, elements per block, bytes per block)
GGML_TYPES = {0: ("F32", 1, 4), 1: ("F16", 1, 2), 2: ("Q4_0", 32, 18), 3: ("Q4_1", 32, 20), 6: ("Q5_0", 32, 22),
              7: ("Q5_1", 32, 24), 8: ("Q8_0", 32, 34), 9: ("Q8_1", 32, 40), 10: ("Q2_K", 256, 84), 11: ("Q3_K", 256, 110),
              12: ("Q4_K", 256, 144), 13: ("Q5_K", 256, 176), 14: ("Q6_K", 256, 210), 15: ("Q8_K", 256, 292),
              16: ("IQ2_XXS", 256, 66), 17: ("IQ2_XS", 256, 74), 18: ("IQ3_XXS", 256, 98), 19: ("IQ1_S", 256, 50),
              20: ("IQ4_NL", 32, 18), 21: ("IQ3_S", 256, 110), 22: ("IQ2_S", 256, 82), 23: ("IQ4_XS", 256, 136),
              24: ("I8", 1, 1), 25: ("I16", 1, 2), 26: ("I32", 1, 4), 27: ("I64", 1, 8), 28: ("F64", 1, 8),
              29: ("IQ1_M", 256, 56), 30: ("BF16", 1, 2), 34: ("TQ1_0", 256, 54), 35: ("TQ2_0", 256, 66),
              39: ("MXFP4", 32, 17)}

class TensorInfo(NamedTuple):
  name: str
  shape: tuple[int, ...]   # PyTorch's order: the file's dimensions reversed (rows of the last dimension are contiguous)
  type: str                # the ggml type's name ("Q4_K")
  offset: int              # of the data, from the start of the file
  nbytes: int

# ---------------------------------------------------------------------------------------------------------------------
# the file

class _Reader:
  def __init__(self, mem: memoryview): self.mem, self.pos = mem, 0

  def left(self) -> int: return len(self.mem) - self.pos

  def take(self, n: int, what: str) -> memoryview:
    if n > self.left(): raise FormatError(f"{what} needs {n} bytes at offset {self.pos}, but the file ends at {len(self.mem)} (truncated?)")
    self.pos += n
    return self.mem[self.pos - n:self.pos]

  def unpack(self, fmt: str, what: str) -> tuple:
    return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))

  def count(self, n: int, each: int, what: str) -> int:
    """n, checked to fit in the rest of the file at `each` bytes or more apiece (before anything is allocated for it)."""
    if n * each > self.left():
      raise FormatError(f"{what}: a count of {n} needs at least {n * each} bytes, but only {self.left()} are left at offset {self.pos} (corrupt or truncated?)")
    return n

  def string(self, what: str) -> str:
    (n,) = self.unpack("<Q", what)
    raw = self.take(self.count(n, 1, what), what)
    try: return str(raw, "utf-8")
    except UnicodeDecodeError as e: raise FormatError(f"{what} is not valid UTF-8 ({e.reason} at byte {e.start})") from None

  def value(self, vtype: int, what: str, depth: int = 0) -> Any:
    if vtype not in VALUE_TYPES: raise FormatError(f"{what} has unknown value type {vtype} (known: 0..12)")
    _, code, _ = VALUE_TYPES[vtype]
    if code is not None: return self.unpack("<" + code, what)[0]
    if vtype == 7: return self.boolean(self.take(1, what)[0], what)
    if vtype == 8: return self.string(what)
    etype, n = self.unpack("<IQ", what)
    if etype not in VALUE_TYPES: raise FormatError(f"{what} is an array of unknown value type {etype} (known: 0..12)")
    ename, code, size = VALUE_TYPES[etype]
    self.count(n, size, f"{what} (an array of {ename})")
    if code is not None: return list(struct.unpack(f"<{n}{code}", self.take(n * size, what)))
    if etype == 7: return [self.boolean(b, what) for b in self.take(n, what)]
    if etype == 8: return [self.string(what) for _ in range(n)]
    if depth >= MAX_NESTING: raise FormatError(f"{what}: arrays nested deeper than {MAX_NESTING} levels")
    return [self.value(9, what, depth + 1) for _ in range(n)]

  @staticmethod
  def boolean(b: int, what: str) -> bool:
    if b > 1: raise FormatError(f"{what}: a bool must be 0 or 1, got {b}")
    return bool(b)

class GGUFFile:
  """A GGUF file's metadata ({key: value}; arrays are lists) and tensor infos ({name: TensorInfo}, in file order), its
  tensors read on demand. `src` is a path (mapped with mmap where possible), bytes, or a 1-D uint8 Tensor of the file."""
  def __init__(self, src: Source):
    self.src, self.name, self.mem = src, _name(src), _as_memory(src)
    with _naming(src, "gguf"): self._parse()

  def _parse(self):
    r = _Reader(self.mem)
    magic = bytes(r.take(4, "the magic number"))
    if magic != MAGIC: raise FormatError(f"bad magic {magic!r}: not a GGUF file (expected {MAGIC!r})")
    (self.version,) = r.unpack("<I", "the version")
    if self.version not in (2, 3):
      raise FormatError(f"GGUF version {self.version} is not supported (2 and 3 are; a huge number: a big-endian file?)")
    n_tensors, n_kv = r.unpack("<QQ", "the tensor and metadata counts")
    self.metadata: dict[str, Any] = {}
    for i in range(r.count(n_kv, 13, "the metadata count")):   # (a key of 1 byte, the type, a 1-byte value)
      key = r.string(f"metadata key {i}")
      if key in self.metadata: raise FormatError(f"metadata key {key!r} appears twice")
      (vtype,) = r.unpack("<I", f"the type of metadata {key!r}")
      self.metadata[key] = r.value(vtype, f"metadata {key!r}")
    self.alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if type(self.alignment) is not int or self.alignment <= 0 or self.alignment & (self.alignment - 1):
      raise FormatError(f"general.alignment must be a power of two, got {self.alignment!r}")
    infos = []
    for i in range(r.count(n_tensors, 32, "the tensor count")):   # (name length, 1 dim, type, offset)
      name = r.string(f"the name of tensor {i}")
      (n_dims,) = r.unpack("<I", f"tensor {name!r}'s dimension count")
      if not 1 <= n_dims <= MAX_DIMS: raise FormatError(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
      dims = r.unpack(f"<{n_dims}Q", f"tensor {name!r}'s dimensions")
      ttype, offset = r.unpack("<IQ", f"tensor {name!r}'s type and offset")
      infos.append((name, dims, ttype, offset))
    self.data_offset = -(-r.pos // self.alignment) * self.alignment
    data_size = len(self.mem) - self.data_offset
    self.tensors: dict[str, TensorInfo] = {}
    for name, dims, ttype, offset in infos:
      if name in self.tensors: raise FormatError(f"tensor {name!r} appears twice")
      if ttype not in GGML_TYPES: raise FormatError(f"tensor {name!r} has unknown ggml type {ttype}")
      tname, block, size = GGML_TYPES[ttype]
      if dims[0] % block: raise FormatError(f"tensor {name!r} ({tname}): its rows of {dims[0]} are not whole blocks of {block}")
      if offset % self.alignment: raise FormatError(f"tensor {name!r}: offset {offset} is not a multiple of the alignment {self.alignment}")
      nbytes = prod(dims) // block * size
      if offset + nbytes > data_size:
        raise FormatError(f"tensor {name!r} ({tname}, dims {list(dims)}): its {nbytes} bytes at data offset {offset} run past the "
                          f"end of the file ({max(data_size, 0)} bytes of data; truncated?)")
      self.tensors[name] = TensorInfo(name, tuple(reversed(dims)), tname, self.data_offset + offset, nbytes)

  def __repr__(self): return f"<GGUFFile {self.name}: {len(self.metadata)} metadata keys, {len(self.tensors)} tensors>"

  def info(self, name: str) -> TensorInfo:
    if name not in self.tensors: raise KeyError(f"{self.name}: no tensor {name!r} in the file ({len(self.tensors)} tensors)")
    return self.tensors[name]

  def raw(self, name: str, device: Optional[str] = None, rows: Optional[tuple[int, int]] = None) -> Tensor:
    """The tensor's bytes as a uint8 tensor (blocks, bytes per block); on the CPU, the mapped file itself (no copy).
    rows=(begin, end): only those rows (of the last dimension's rows; e.g. a part of a table too big for one buffer)."""
    t, n = self.info(name), prod(self.info(name).shape[:-1])
    begin, end = (0, n) if rows is None else rows
    if not 0 <= begin <= end <= n: raise ValueError(f"{self.name}: tensor {name!r} has {n} rows, asked for rows {begin}..{end}")
    size, row_bytes = next(s for tn, _, s in GGML_TYPES.values() if tn == t.type), t.nbytes // n if n else 0
    start = t.offset + begin * row_bytes
    return Tensor.frombuffer(self.mem[start:start + (end - begin) * row_bytes], dtypes.uint8, ((end - begin) * row_bytes // size, size), device)

  def tensor(self, name: str, device: Optional[str] = None) -> Tensor:
    """The tensor as float32, of `info(name).shape`: F32 as stored, the other types computed from the raw blocks in the
    kernels that read them."""
    t = self.info(name)
    if t.type == "F32":
      raw = self.mem[t.offset:t.offset + t.nbytes]
      return Tensor.frombuffer(raw if t.offset % 4 == 0 else bytearray(raw), dtypes.float32, t.shape, device)
    return dequantize(self.raw(name, device), t.type, f"{self.name}: tensor {name!r}").reshape(t.shape)

def gguf_load(src: Source, device: Optional[str] = None) -> tuple[dict[str, Any], dict[str, Tensor]]:
  """(metadata, {name: float32 tensor}) of a GGUF file; the tensors are lazy (see GGUFFile.tensor)."""
  f = GGUFFile(src)
  return f.metadata, {name: f.tensor(name, device) for name in f.tensors}

def _name(src) -> str: return os.fspath(src) if isinstance(src, (str, os.PathLike)) else f"<{type(src).__name__}>"

# ---------------------------------------------------------------------------------------------------------------------
# dequantization: blocks (N, bytes per block) uint8 -> (N, elements per block) float32, as tensor expressions

def _f16(b: Tensor, at: int) -> Tensor:
  """The little-endian float16 at byte `at` of each block, as float32 (N, 1): its bits moved into a float32's, so
  it needs no float16 support on the device."""
  h = b[:, at:at + 1].cast(dtypes.uint32) | (b[:, at + 1:at + 2].cast(dtypes.uint32) << 8)
  sign, exp, mant = (h >> 15) << 31, (h >> 10) & 0x1F, h & 0x3FF
  bits = sign | (exp.eq(0x1F).where(0xFF, exp + 112) << 23) | (mant << 13)   # normal numbers, infinities and NaNs
  subnormal = mant.cast(dtypes.float32) * 2.0 ** -24
  return exp.eq(0).where(sign.eq(0).where(subnormal, -subnormal), bits.bitcast(dtypes.float32))

def _bits(x: Tensor, shifts: int, step: int, mask: int) -> Tensor:
  """(N, ..., n) bytes -> (N, ..., shifts, n): field k is (x >> k*step) & mask (k = 0 .. shifts-1)."""
  x = x.cast(dtypes.int32).unsqueeze(-2)
  return (x >> (Tensor.arange(shifts, device=x.device) * step).reshape(shifts, 1)) & mask

def _nibbles(qs: Tensor) -> Tensor:
  """(N, 16) bytes -> (N, 32): the 16 low nibbles, then the 16 high ones (ggml's order in a 32-element block)."""
  return _bits(qs, 2, 4, 0xF).reshape(qs.shape[0], 32)

def _high_bits(qh: Tensor) -> Tensor:
  """(N, 4) bytes (a little-endian uint32) -> (N, 32): bit j for element j."""
  return _bits(qh, 8, 1, 1).transpose(-1, -2).reshape(qh.shape[0], 32)

def _q8_0(b: Tensor) -> Tensor: return b[:, 2:34].bitcast(dtypes.int8).cast(dtypes.float32) * _f16(b, 0)
def _q4_0(b: Tensor) -> Tensor: return _f16(b, 0) * (_nibbles(b[:, 2:18]) - 8).cast(dtypes.float32)
def _q4_1(b: Tensor) -> Tensor: return _f16(b, 0) * _nibbles(b[:, 4:20]).cast(dtypes.float32) + _f16(b, 2)
def _q5_0(b: Tensor) -> Tensor: return _f16(b, 0) * ((_nibbles(b[:, 6:22]) | (_high_bits(b[:, 2:6]) << 4)) - 16).cast(dtypes.float32)
def _q5_1(b: Tensor) -> Tensor: return _f16(b, 0) * (_nibbles(b[:, 8:24]) | (_high_bits(b[:, 4:8]) << 4)).cast(dtypes.float32) + _f16(b, 2)

def _k_scales(s: Tensor) -> tuple[Tensor, Tensor]:
  """Q4_K/Q5_K's 12 scale bytes -> the 8 sub-blocks' 6-bit scales and minimums, (N, 8) each. Bytes 0-3 hold scales 0-3
  (low 6 bits) and the top 2 bits of scales 4-7; bytes 4-7 the same for the minimums; bytes 8-11 the low 4 bits of
  scales 4-7 (low nibble) and of minimums 4-7 (high nibble)."""
  s = s.cast(dtypes.int32)
  d, m, md = s[:, 0:4], s[:, 4:8], s[:, 8:12]
  scale = (d & 0x3F).cat((md & 0xF) | ((d >> 2) & 0x30), dim=1)
  minimum = (m & 0x3F).cat((md >> 4) | ((m >> 2) & 0x30), dim=1)
  return scale, minimum

def _q4_k(b: Tensor) -> Tensor:
  scale, minimum = _k_scales(b[:, 4:16])
  q = _bits(b[:, 16:144].reshape(-1, 4, 32), 2, 4, 0xF).reshape(-1, 8, 32)   # 4 runs of 32 bytes: low nibbles, high nibbles
  d, dmin = _f16(b, 0).unsqueeze(-1), _f16(b, 2).unsqueeze(-1)
  return ((d * scale.cast(dtypes.float32).unsqueeze(-1)) * q.cast(dtypes.float32) - dmin * minimum.cast(dtypes.float32).unsqueeze(-1)).reshape(-1, 256)

def _q5_k(b: Tensor) -> Tensor:
  scale, minimum = _k_scales(b[:, 4:16])
  low = _bits(b[:, 48:176].reshape(-1, 4, 32), 2, 4, 0xF).reshape(-1, 8, 32)
  high = _bits(b[:, 16:48], 8, 1, 1)   # sub-block j's fifth bits: bit j of the 32 bytes
  d, dmin = _f16(b, 0).unsqueeze(-1), _f16(b, 2).unsqueeze(-1)
  q = (low | (high << 4)).cast(dtypes.float32)
  return ((d * scale.cast(dtypes.float32).unsqueeze(-1)) * q - dmin * minimum.cast(dtypes.float32).unsqueeze(-1)).reshape(-1, 256)

def _q6_k(b: Tensor) -> Tensor:
  # two halves of 128 elements; in each, 64 bytes of low nibbles (4 runs of 32 elements) and 32 bytes of 2-bit high parts
  low = _bits(b[:, 0:128].reshape(-1, 2, 64), 2, 4, 0xF).reshape(-1, 8, 32)
  high = _bits(b[:, 128:192].reshape(-1, 2, 32), 4, 2, 3).reshape(-1, 8, 32)
  q = ((low | (high << 4)) - 32).cast(dtypes.float32).reshape(-1, 16, 16)
  scales = b[:, 192:208].bitcast(dtypes.int8).cast(dtypes.float32)
  return ((_f16(b, 208) * scales).unsqueeze(-1) * q).reshape(-1, 256)

def _f32(b: Tensor) -> Tensor:
  u = b.cast(dtypes.uint32)
  return (u[:, 0:1] | (u[:, 1:2] << 8) | (u[:, 2:3] << 16) | (u[:, 3:4] << 24)).bitcast(dtypes.float32)
def _f16_elements(b: Tensor) -> Tensor: return _f16(b, 0)
def _bf16(b: Tensor) -> Tensor:
  return ((b[:, 0:1].cast(dtypes.uint32) << 16) | (b[:, 1:2].cast(dtypes.uint32) << 24)).bitcast(dtypes.float32)

DEQUANTIZE = {"F32": _f32, "F16": _f16_elements, "BF16": _bf16, "Q4_0": _q4_0, "Q4_1": _q4_1, "Q5_0": _q5_0, "Q5_1": _q5_1, "Q8_0": _q8_0,
              "Q4_K": _q4_k, "Q5_K": _q5_k, "Q6_K": _q6_k}

def dequantize(blocks: Tensor, type_name: str, what: str = "dequantize") -> Tensor:
  """Blocks of a ggml type (a uint8 tensor (N, bytes per block), e.g. rows picked from `GGUFFile.raw`) as float32
  (N, elements per block), a lazy expression of the bytes."""
  if type_name not in DEQUANTIZE:
    raise ValueError(f"{what}: type {type_name} is not one tinyweb.gguf dequantizes ({', '.join(DEQUANTIZE)})")
  size = next(s for n, _, s in GGML_TYPES.values() if n == type_name)
  if blocks.dtype != dtypes.uint8 or blocks.ndim != 2 or blocks.shape[1] != size:
    raise ValueError(f"{what}: {type_name} blocks must be a uint8 tensor (N, {size}), got {blocks.dtype.name} {blocks.shape}")
  return DEQUANTIZE[type_name](blocks)
