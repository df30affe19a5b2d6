"""Tensor hashing and counter-based random bits, as tinygrad has them: keccak (SHA-3, SHAKE), hash, threefry and
random_bits. 64-bit words are pairs of uint32 (low word first), so everything runs on WEBGPU too. A mixin of Tensor (tensor.py)."""
from __future__ import annotations
import operator
from typing import Self
from tinyweb.dtype import dtypes
from tinyweb.helpers import prod, ceildiv

_KECCAK_CFGS = {"sha3_224": (144, 6), "sha3_256": (136, 6), "shake_128": (168, 31)}   # (rate in bytes, domain byte)

def _keccak_tables() -> tuple[list[int], list[list[int]]]:
  """keccak-f[1600]'s 24 round constants (from its LFSR), and the ρ rotation of each lane of the state after π, as [y][x]."""
  rcs, lfsr = [], 1
  for _ in range(24):
    rc = 0
    for j in range(7):
      if lfsr & 1: rc |= 1 << ((1 << j) - 1)
      lfsr = ((lfsr << 1) ^ (0x71 if lfsr & 0x80 else 0)) & 0xff
    rcs.append(rc)
  rho, (x, y) = [[0] * 5 for _ in range(5)], (1, 0)
  for t in range(24): rho[y][x], (x, y) = (t + 1) * (t + 2) // 2 % 64, (y, (2 * x + 3 * y) % 5)
  return rcs, [[rho[x][(x + 3 * y) % 5] for x in range(5)] for y in range(5)]   # (π moves lane [x][(x+3y)%5] to [y][x])
_RC, _RHO_PI = _keccak_tables()

def _rotl(t, n):
  """Rotate 32-bit words left by n (a Python int, 0 < n < 32)."""
  return (t << n) | (t >> (32 - n))

def _rotl64(t, n):
  """Rotate 64-bit words, held as uint32 pairs along the last dim, left by n: a Python int in 1..31, or tensors per word
  (n mod 32, 31 - that, and whether n >= 32: then the two halves trade places first)."""
  if isinstance(n, int): return (t << n) | (t.flip(-1) >> (32 - n))
  n, n31, swap = n
  t = swap.where(t.flip(-1), t)
  return (t << n) | ((t.flip(-1) >> 1) >> n31)   # (two shifts: an amount of 0 would shift by 32)

def _keccak_round(s, rho, rc):
  """One round of keccak-f[1600] on s, the 25 lanes as [batch, y, x, low/high word]; rho: _rotl64's amounts per lane (after
  π), rc: the round constant's two words."""
  def part(t, dim, b, e): return t.shrink(tuple((b, e) if i == dim else None for i in range(4)))
  c = part(s, 1, 0, 1) ^ part(s, 1, 1, 2) ^ part(s, 1, 2, 3) ^ part(s, 1, 3, 4) ^ part(s, 1, 4, 5)   # θ: column parities
  c = c.repeat(1, 1, 3, 1)   # (columns x-1 and x+1 at offsets 4 and 6)
  a = s ^ (part(c, 2, 4, 9) ^ _rotl64(part(c, 2, 6, 11), 1)).expand(s.shape)
  # π: lane [y][x] takes lane [x][(x+3y)%5]: the rows repeated to 20 lanes and flattened hold it at 21x+3y = 3(7x+y), so every
  # third lane of that, in rows of 7, has it at [x][y]
  bs = s.shape[0]
  a = a.repeat(1, 1, 4, 1).reshape(bs, 100, 2)._pad_zero(((0, 0), (0, 5), (0, 0))).reshape(bs, 35, 3, 2)
  a = part(a, 2, 0, 1).reshape(bs, 5, 7, 2).shrink((None, None, (0, 5), None)).permute(0, 2, 1, 3)
  b = _rotl64(a, rho)   # ρ
  b2 = b.repeat(1, 1, 2, 1)
  return (b ^ (part(b2, 2, 1, 6).bitwise_not() & part(b2, 2, 2, 7)) ^ rc).contiguous()   # χ, ι

def _threefry2x32(x0, x1, k0, k1):
  """Threefry-2x32 with 20 rounds (Random123's, JAX's) of the counter words x0, x1 under the key words k0, k1 (uint32)."""
  ks = (k0, k1, k0 ^ k1 ^ 0x1BD11BDA)
  x0, x1 = x0 + k0, x1 + k1
  for i in range(5):
    for r in ((13, 15, 26, 6), (17, 29, 16, 24))[i % 2]:
      x0 = x0 + x1
      x1 = _rotl(x1, r) ^ x0
    x0, x1 = x0 + ks[(i + 1) % 3], x1 + ks[(i + 2) % 3] + (i + 1)
  return x0, x1

def _check_words(op: str, dt, cls, *ts):
  for t in ts:
    if not isinstance(t, cls): raise TypeError(f"{op}: expected Tensors, got {type(t).__name__}")
    if t.dtype != dt: raise TypeError(f"{op}: needs {dt.name} tensors, got {t.dtype.name}")
  if len({t.device for t in ts}) > 1: raise RuntimeError(f"{op}: expected all tensors on the same device, got {[t.device for t in ts]}")

class HashMixin:
  __slots__ = ()
  # (Tensor, in tensor.py, is built from this mixin and must not be imported here: methods find the class as
  # type(self), often as a local `Tensor = type(self)`; annotations say Self)

  def _le_bytes(self) -> Self:
    """The bytes of each element, little-endian, along a new last dim (uint8)."""
    x = self.detach()
    if x.dtype.itemsize == 1: return (x.cast(dtypes.uint8) if x.dtype.is_bool else x.bitcast(dtypes.uint8)).unsqueeze(-1)
    u = x.bitcast({2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[self.dtype.itemsize])
    return type(self).stack(*[((u >> (8 * i)) & 0xff).cast(dtypes.uint8) for i in range(self.dtype.itemsize)], dim=-1)

  def keccak(self, cfg: str | tuple[int, int] = "sha3_256") -> Self:
    """Keccak hash of the bytes along the last dim: "sha3_224", "sha3_256" (hashlib's), "shake_128" (its first 16 bytes) or
    cfg=(rate in bytes, domain separation byte). uint8, of shape self.shape[:-1] + ((200 - rate) // 2,)."""
    Tensor = type(self)
    if isinstance(cfg, str):
      if cfg not in _KECCAK_CFGS: raise ValueError(f"keccak: unknown cfg {cfg!r}; valid: {', '.join(_KECCAK_CFGS)} or (rate, dsbyte)")
      rate, dsbyte = _KECCAK_CFGS[cfg]
    elif isinstance(cfg, (tuple, list)) and len(cfg) == 2 and all(type(v) is int for v in cfg):
      rate, dsbyte = cfg
      if not (0 < rate <= 200 and 0 <= dsbyte < 256):
        raise ValueError(f"keccak: cfg {cfg} needs a rate in 1..200 bytes and a domain separation byte in 0..255")
    else: raise TypeError(f"keccak: cfg must be one of {', '.join(_KECCAK_CFGS)} or a (rate, dsbyte) pair of ints, got {cfg!r}")
    if self.dtype.itemsize != 1:
      raise TypeError(f"keccak: hashes bytes (uint8, int8 or bool), got {self.dtype.name}; hash() takes any dtype")
    if self.ndim == 0: raise ValueError("keccak: hashes the last dimension; got a 0-d tensor")
    *lead, n = self.shape
    bs, m = prod(lead), n + rate - n % rate   # (the padding is 1 to rate bytes: the domain byte, zeros, 0x80; xored together if 1)
    def byte_at(v, i): return Tensor.full((1, 1), v, dtype=dtypes.uint8, device=self.device)._pad_zero(((0, 0), (i, m - 1 - i)))
    msg = self._le_bytes().reshape(bs, n)._pad_zero(((0, 0), (0, m - n))) ^ byte_at(dsbyte, n) ^ byte_at(0x80, m - 1)
    b = msg.reshape(bs, nb := m // rate, rate)._pad_zero(((0, 0), (0, 0), (0, 200 - rate))).reshape(bs, nb, 50, 4).cast(dtypes.uint32)
    words = (b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)).reshape(bs, nb, 5, 5, 2).contiguous()
    # (the tables in the state's shape, so that the rounds broadcast nothing)
    def table(f, dt): return Tensor([[f(v) for v in row] for row in _RHO_PI], dtype=dt, device=self.device).reshape(1, 5, 5, 1).expand(bs, 5, 5, 2)
    rho = (table(lambda v: v % 32, dtypes.uint32), table(lambda v: 31 - v % 32, dtypes.uint32), table(lambda v: v >= 32, dtypes.bool))
    # the round constants as buffers, not constants in the code: all rounds then run one kernel, compiled once
    rcs = [Tensor([v & 0xffffffff, v >> 32], dtype=dtypes.uint32, device=self.device).reshape(1, 1, 1, 2)
           ._pad_zero(((0, 0), (0, 4), (0, 4), (0, 0))).expand(bs, 5, 5, 2) for v in _RC]
    state = None   # the 25 lanes as [batch, y, x, low/high word]
    for k in range(nb):
      state = (words[:, k] if state is None else state ^ words[:, k]).contiguous()
      for rc in rcs: state = _keccak_round(state, rho, rc)
    out = state.reshape(bs, 50)._le_bytes().reshape(bs, 200)[:, :(200 - rate) // 2]
    return out.reshape(*lead, (200 - rate) // 2)

  def hash(self) -> Self:
    """tinygrad's 16-byte hash of the tensor's bytes (uint8): a 1 MiB chunk (zero padded) hashes to the shake_128 of the
    shake_128s of its 4 KiB rows; the digests of several chunks are hashed the same way, until one is left."""
    data, mib = self._le_bytes().flatten(), 1 << 20
    while True:
      chunks = max(1, ceildiv(data.shape[0], mib))
      data = data.pad_to(chunks * mib).reshape(chunks * 256, 4096).keccak("shake_128").reshape(chunks, 4096).keccak("shake_128").flatten()
      if chunks == 1: return data

  def threefry(self, seed: Self) -> Self:
    """Threefry-2x32 (20 rounds) of each uint64 counter in self under the uint64 key seed (broadcast): uint64."""
    _check_words("threefry", dtypes.uint64, type(self), self, seed)
    x, k = self._broadcasted(seed, "threefry")
    def words(t): return (t & 0xffffffff).cast(dtypes.uint32), (t >> 32).cast(dtypes.uint32)
    y0, y1 = _threefry2x32(*words(x), *words(k))
    return (y1.cast(dtypes.uint64) << 32) | y0.cast(dtypes.uint64)

  @classmethod
  def random_bits(cls, key: Self, counter: Self, num: int) -> Self:
    """num random uint32s from key and counter (uint32 pairs: elements 0 and 1 of each), tinygrad's Threefry stream."""
    _check_words("random_bits", dtypes.uint32, cls, key, counter)
    for name, t in (("key", key), ("counter", counter)):
      if t.ndim != 1 or t.shape[0] < 2: raise ValueError(f"random_bits: {name} must be 1-d with 2 elements (low, high), got shape {t.shape}")
    try: num = operator.index(num)
    except TypeError: raise TypeError(f"random_bits: num must be an int, got {type(num).__name__}") from None
    if num < 0: raise ValueError(f"random_bits: num must be >= 0, got {num}")
    lo, hi, step, parts = counter[0:1], counter[1:2], dtypes.uint32.max, []
    for i in range(0, num, step):   # (2**32 - 1 numbers at a time, each part under a key of its own)
      c_lo = lo + (i & 0xffffffff)
      k0, k1 = _threefry2x32(c_lo, hi + (i >> 32) + (c_lo < lo).cast(dtypes.uint32), key[0:1], key[1:2])
      half = ceildiv(min(num - i, step), 2)
      idx = cls.arange(half, dtype=dtypes.uint32, device=key.device)
      y0, y1 = _threefry2x32(idx, idx + half, k0, k1)
      parts.append(y0.cat(y1)[:min(num - i, step)])
    return parts[0].cat(*parts[1:]) if parts else counter[0:0]
