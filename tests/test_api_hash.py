"""tinygrad 0.14's hashing and counter-based random bits (issue 14): Tensor.keccak against hashlib (SHA-3, SHAKE) and
tinygrad's own values for its (rate, dsbyte) configurations; Tensor.hash against tinygrad's definition computed with
hashlib (tinygrad 0.14's own hash() of a 12-byte tensor ran for over two minutes and passed 19 GB of memory here, so it
cannot be the reference); Tensor.threefry and Tensor.random_bits against tinygrad's values and Random123's known answers for
Threefry-2x32-20. The reference values from tinygrad are computed here, on its CPU device."""
import functools, hashlib, inspect
import numpy as np
import pytest
from tinyweb import Tensor, dtypes
from helpers import expect_unsupported

def _tinygrad():
  return pytest.importorskip("tinygrad", reason="tinygrad is not installed (scripts/setup.sh installs tinygrad==0.14.0): "
                                                "it computes the reference values")

def rand_bytes(shape, seed=0): return np.random.default_rng(seed).integers(0, 256, shape, dtype=np.uint8)

# ---------------------------------------------------------------- signatures

@pytest.mark.parametrize("name", ["keccak", "hash", "threefry", "random_bits"])
def test_signature_matches_tinygrad(name):
  tg = _tinygrad()
  want, got = inspect.signature(getattr(tg.Tensor, name)), inspect.signature(getattr(Tensor, name))
  assert [(p.name, p.kind, p.default) for p in got.parameters.values()] == [(p.name, p.kind, p.default) for p in want.parameters.values()]
  assert isinstance(inspect.getattr_static(Tensor, name), classmethod) == isinstance(inspect.getattr_static(tg.Tensor, name), classmethod)

# ---------------------------------------------------------------- keccak

HASHLIB = {"sha3_224": (144, lambda b: hashlib.sha3_224(b).digest()), "sha3_256": (136, lambda b: hashlib.sha3_256(b).digest()),
           "shake_128": (168, lambda b: hashlib.shake_128(b).digest(16))}   # cfg: (rate, hashlib's digest)

def check_rows(got: np.ndarray, msgs: np.ndarray, ref):
  """Each message (the last dim of msgs) hashed to the matching row of got."""
  rows = msgs.reshape(int(np.prod(msgs.shape[:-1])), msgs.shape[-1])
  assert got.dtype == np.uint8 and got.shape == msgs.shape[:-1] + (len(ref(b"")),)
  for m, h in zip(rows, got.reshape(len(rows), got.shape[-1])): assert h.tobytes().hex() == ref(m.tobytes()).hex()

@pytest.mark.parametrize("cfg", list(HASHLIB))
def test_keccak_matches_hashlib(device, cfg):
  """Messages with no bytes, one byte short of a block (one byte of padding: the domain byte and the final 0x80 in one),
  exactly a block (a block of padding follows) and over two blocks, two at a time."""
  rate, ref = HASHLIB[cfg]
  for n in (0, rate - 1, rate, 2 * rate + 3):
    a = rand_bytes((2, n), seed=n)
    check_rows(Tensor(a, device=device).keccak(cfg).numpy(), a, ref)

def test_keccak_default_shapes_and_byte_dtypes(device):
  """sha3_256 by default; leading dims are kept; views hash their elements in order; int8 and bool tensors hash their
  bytes (bool: 0 and 1); empty messages and empty batches too (tinygrad 0.14 raises on both; hashlib hashes the empty
  message)."""
  ref = HASHLIB["sha3_256"][1]
  a = rand_bytes((3, 2, 7), seed=1)
  check_rows(Tensor(a, device=device).keccak().numpy(), a, ref)
  check_rows(Tensor(a.view(np.int8), device=device).keccak().numpy(), a, ref)
  check_rows(Tensor(np.ascontiguousarray(a.T), device=device).permute(2, 1, 0).keccak().numpy(), a, ref)   # (a view that is not contiguous)
  b = rand_bytes((2, 9), seed=2) < 128
  check_rows(Tensor(b, device=device).keccak().numpy(), b.astype(np.uint8), ref)
  for shape in ((0,), (2, 0), (0, 5), (1, 1)):
    a = rand_bytes(shape, seed=3)
    check_rows(Tensor(a, device=device).keccak().numpy(), a, ref)

def test_keccak_rate_and_domain_byte(device):
  """cfg=(rate, dsbyte): (136, 1) is Ethereum's Keccak-256 (its published digests of "" and "abc"), (72, 6) SHA3-512,
  (136, 31) the first 32 bytes of SHAKE256; the output is (200 - rate) // 2 bytes."""
  eth = {b"": "c5d2460186f7233c927e7db2dcc703c0e500b653ca82273b7bfad8045d85a470",
         b"abc": "4e03657aea45a94fc7d47ba826c8d667c0d1e6e33a64a036ec44f58fa12d6c45"}
  for msg, want in eth.items(): assert Tensor(msg, device=device).keccak((136, 1)).numpy().tobytes().hex() == want
  a = rand_bytes((2, 80), seed=4)
  check_rows(Tensor(a, device=device).keccak((72, 6)).numpy(), a, lambda b: hashlib.sha3_512(b).digest())
  check_rows(Tensor(a, device=device).keccak(cfg=(136, 31)).numpy(), a, lambda b: hashlib.shake_256(b).digest(32))

@functools.cache
def _tinygrad_keccak() -> tuple[np.ndarray, np.ndarray]:
  # a rate that is not a multiple of 8 bytes, and a domain byte with its top bit set in a message one byte short of the
  # block (tinygrad xors it with the final 0x80 there). One block only: tinygrad takes ~15 s per block, more memory per block
  tg = _tinygrad()
  a = rand_bytes((2, 99), seed=5)
  return a, tg.Tensor(a, device="CPU").keccak((100, 0x9f)).numpy()

def test_keccak_matches_tinygrad(device):
  a, want = _tinygrad_keccak()
  got = Tensor(a, device=device).keccak((100, 0x9f)).numpy()
  assert got.dtype == want.dtype and got.shape == want.shape == (2, 50)
  np.testing.assert_array_equal(got, want)

def test_keccak_bad_input():
  x = Tensor(b"abc")
  with pytest.raises(ValueError, match=r"keccak: unknown cfg 'sha3_512'; valid: sha3_224, sha3_256, shake_128"): x.keccak("sha3_512")
  for cfg in ((0, 6), (201, 6), (136, 256), (136, -1)):
    with pytest.raises(ValueError, match=r"keccak: cfg .* needs a rate in 1\.\.200 bytes and a domain separation byte in 0\.\.255"):
      x.keccak(cfg)
  for cfg in (5, (136,), (136, 6, 1), (136.0, 6), None):
    with pytest.raises(TypeError, match=r"keccak: cfg must be one of .* or a \(rate, dsbyte\) pair of ints"): x.keccak(cfg)
  for dt in (dtypes.float32, dtypes.uint32, dtypes.int16):
    with pytest.raises(TypeError, match=rf"keccak: hashes bytes \(uint8, int8 or bool\), got {dt.name}"): Tensor([1, 2], dtype=dt).keccak()
  with pytest.raises(ValueError, match="keccak: hashes the last dimension; got a 0-d tensor"): Tensor(7, dtype=dtypes.uint8).keccak()

# ---------------------------------------------------------------- hash

MIB = 1 << 20
def tinygrad_hash(data: bytes) -> bytes:
  """tinygrad 0.14's Tensor.hash, from its definition: the bytes zero padded to whole 1 MiB chunks; a chunk's digest is
  the 16-byte shake_128 of the 16-byte shake_128s of its 256 rows of 4 KiB; the chunks' digests, concatenated, are
  hashed again the same way while there is more than one chunk."""
  def shake(b: bytes) -> bytes: return hashlib.shake_128(b).digest(16)
  while True:
    chunks = max(1, -(-len(data) // MIB))
    data = data.ljust(chunks * MIB, b"\0")
    data = b"".join(shake(b"".join(shake(data[c * MIB + r * 4096:c * MIB + (r + 1) * 4096]) for r in range(256))) for c in range(chunks))
    if chunks == 1: return data

def test_hash(device):
  if device == "PYTHON": pytest.skip("PYTHON: hash() runs 1200 kernels over a 1 MiB chunk, too slow for the interpreter")
  got = Tensor(b"Hello World!", device=device).hash()
  assert got.dtype == dtypes.uint8 and got.shape == (16,)
  assert got.numpy().tobytes().hex() == tinygrad_hash(b"Hello World!").hex()

@pytest.mark.parametrize("case", ["float32 over two 4 KiB rows, requires grad", "empty", "two 1 MiB chunks"])
def test_hash_dtypes_and_sizes(case):
  """The tensor's bytes as they are in memory, whatever its dtype and shape; past 1 MiB, the chunks' digests hashed again."""
  a = {"float32 over two 4 KiB rows, requires grad": np.random.default_rng(6).standard_normal((2, 1000)).astype(np.float32),
       "empty": np.zeros(0, np.float32), "two 1 MiB chunks": rand_bytes(MIB + 1, seed=6)}[case]
  t = Tensor(a, requires_grad=case.endswith("requires grad"))
  assert t.hash().numpy().tobytes().hex() == tinygrad_hash(a.tobytes()).hex()

DTYPES = [("bool", dtypes.bool), ("int8", dtypes.int8), ("uint8", dtypes.uint8), ("int16", dtypes.int16), ("uint16", dtypes.uint16),
          ("float16", dtypes.float16), ("int32", dtypes.int32), ("uint32", dtypes.uint32), ("float32", dtypes.float32),
          ("int64", dtypes.int64), ("uint64", dtypes.uint64), ("float64", dtypes.float64)]

@pytest.mark.parametrize("name,dt", DTYPES, ids=[n for n, _ in DTYPES])
def test_bytes_that_hash_reads(device, name, dt):
  """What hash() hashes: each element's bytes in memory order (little-endian), as numpy has them."""
  if name == "bool": a = rand_bytes((2, 3), seed=7) < 128
  elif name.startswith("float"): a = np.array([[1.5, -0.0, 65504], [np.inf, -3.25e-5, np.nan]], name)
  else: a = rand_bytes((2, 3, dt.itemsize), seed=7).view(name).reshape(2, 3)
  with expect_unsupported(device, dt):
    got = Tensor(a, device=device)._le_bytes().numpy()
    assert got.dtype == np.uint8 and got.shape == (2, 3, dt.itemsize)
    np.testing.assert_array_equal(got.reshape(-1), np.frombuffer(a.tobytes(), np.uint8))

# ---------------------------------------------------------------- threefry and random_bits

X = np.array([0, 1, 2**63 + 5, 2**64 - 1, 0x0123456789abcdef], np.uint64)
SEEDS = np.array([3, 2**40, 2**64 - 2, 7, 0xfedcba9876543210], np.uint64)
BITS_CASES = [((1, 2), (3, 4), 0), ((1, 2), (3, 4), 1), ((1, 2), (3, 4), 7), ((1, 2), (3, 4), 8),
              ((0xffffffff, 7), (0xffffffff, 0xffffffff), 8),   # (counters wrap)
              ((5, 6, 99), (7, 8, 100), 7)]                     # (the elements past the first two are not used)

@functools.cache
def _tinygrad_random() -> dict:
  tg = _tinygrad()
  def T(a, dt): return tg.Tensor(np.array(a, dt), device="CPU")
  return {"elementwise": T(X, np.uint64).threefry(T(SEEDS, np.uint64)).numpy(),
          "scalar seed": T(X, np.uint64).threefry(T(12345, np.uint64)).numpy(),
          "broadcast": T(X[:2].reshape(2, 1), np.uint64).threefry(T(SEEDS[:3], np.uint64)).numpy(),
          "bits": [tg.Tensor.random_bits(T(k, np.uint32), T(c, np.uint32), n).numpy() for k, c, n in BITS_CASES]}

def test_threefry_matches_tinygrad(device):
  want = _tinygrad_random()
  with expect_unsupported(device, dtypes.uint64):   # (WEBGPU has no 64-bit integers: random_bits works there, in uint32 pairs)
    def T(a): return Tensor(np.asarray(a, np.uint64), device=device)
    for name, got in (("elementwise", T(X).threefry(T(SEEDS))), ("scalar seed", T(X).threefry(T(12345))),
                      ("broadcast", T(X[:2].reshape(2, 1)).threefry(seed=T(SEEDS[:3])))):
      assert got.dtype == dtypes.uint64
      np.testing.assert_array_equal(got.numpy(), want[name], err_msg=name)

def test_threefry_known_answers(device):
  """Random123's known-answer tests for threefry2x32_20: counter and key words (low, high) packed as tinygrad does."""
  kat = [((0, 0), (0, 0), (0x6b200159, 0x99ba4efe)), ((0xffffffff,) * 2, (0xffffffff,) * 2, (0x1cb996fc, 0xbb002be7)),
         ((0x243f6a88, 0x85a308d3), (0x13198a2e, 0x03707344), (0xc4923a9c, 0x483df7a0))]
  def pack(w): return np.array([lo | hi << 32 for lo, hi in w], np.uint64)
  with expect_unsupported(device, dtypes.uint64):
    got = Tensor(pack([c for c, _, _ in kat]), device=device).threefry(Tensor(pack([k for _, k, _ in kat]), device=device))
    np.testing.assert_array_equal(got.numpy(), pack([o for _, _, o in kat]))

def test_random_bits_matches_tinygrad(device):
  for (k, c, n), want in zip(BITS_CASES, _tinygrad_random()["bits"]):
    got = Tensor.random_bits(Tensor(np.array(k, np.uint32), device=device), Tensor(np.array(c, np.uint32), device=device), n)
    assert got.dtype == dtypes.uint32 and got.shape == (n,) and got.device == device
    np.testing.assert_array_equal(got.numpy(), want, err_msg=f"key {k} counter {c} num {n}")

def test_threefry_and_random_bits_bad_input():
  u64, u32 = Tensor([1, 2], dtype=dtypes.uint64), Tensor([1, 2], dtype=dtypes.uint32)
  with pytest.raises(TypeError, match="threefry: needs uint64 tensors, got uint32"): u32.threefry(u32)
  with pytest.raises(TypeError, match="threefry: needs uint64 tensors, got int64"): u64.threefry(Tensor([1, 2], dtype=dtypes.int64))
  with pytest.raises(TypeError, match="threefry: expected Tensors, got int"): u64.threefry(5)
  with pytest.raises(ValueError, match=r"threefry: shapes \(2,\) and \(3,\) cannot be broadcast"): u64.threefry(Tensor([1, 2, 3], dtype=dtypes.uint64))
  with pytest.raises(RuntimeError, match="threefry: expected all tensors on the same device"): u64.threefry(u64.to("PYTHON"))
  with pytest.raises(TypeError, match="random_bits: needs uint32 tensors, got int32"): Tensor.random_bits(Tensor([1, 2]), u32, 3)
  with pytest.raises(TypeError, match="random_bits: expected Tensors, got list"): Tensor.random_bits(u32, [1, 2], 3)
  with pytest.raises(ValueError, match=r"random_bits: key must be 1-d with 2 elements \(low, high\), got shape \(1,\)"):
    Tensor.random_bits(u32[:1], u32, 3)
  with pytest.raises(ValueError, match=r"random_bits: counter must be 1-d with 2 elements \(low, high\), got shape \(1, 2\)"):
    Tensor.random_bits(u32, u32.reshape(1, 2), 3)
  with pytest.raises(ValueError, match="random_bits: num must be >= 0, got -1"): Tensor.random_bits(u32, u32, -1)
  with pytest.raises(TypeError, match="random_bits: num must be an int, got float"): Tensor.random_bits(u32, u32, 2.0)
  with pytest.raises(RuntimeError, match="random_bits: expected all tensors on the same device"): Tensor.random_bits(u32, u32.to("PYTHON"), 2)
