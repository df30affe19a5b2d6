"""Gemma-3-270M from a GGUF file (tinyweb.gguf, tinyweb.models.gemma) against transformers, which reads the same file
through the gguf package: the dequantization of each tensor type against gguf's numpy dequantizer (the real file's
tensors, and a file gguf-py writes with every type and metadata value type), the tokenizer against the one transformers
builds from the file, the logits of a prompt and 32 greedy tokens against Gemma3ForCausalLM in float32, the demo's
text, and malformed files. tests/testdata.py fetches the model (scripts/setup.sh runs it)."""
import hashlib, importlib.metadata, json, os, re, struct
import numpy as np
import pytest
from tinyweb import Tensor
import tinyweb.engine as engine
from tinyweb.nn.state import FormatError
from tinyweb.gguf import GGUFFile, GGML_TYPES, gguf_load, dequantize
from tinyweb.models.gemma import Gemma, GemmaTokenizer
import testdata

gguf = pytest.importorskip("gguf")
from gguf.quants import dequantize as gguf_dequantize   # noqa: E402

NAME = "gemma-3-270m-q4_k_m.gguf"
PROMPTS = ["The capital of France is", "def fibonacci(n):"]
TEXTS = PROMPTS + [
  "Hello, world! How's it going?", "  leading spaces and trailing   ", "Café naïve résumé: Ångström, façade",
  "我爱北京天安门, 東京 and 서울 and カタカナ", "emoji 😀 snowman ☃ dna \U0001F9EC \U000E0001 \uffff",   # byte fallback
  "tab\tnew\nline\n\n\nthree\r\nwindows\x00nul", "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n",
  "<bos>x<eos><pad><unk><mask>[multimodal]<unused5> <start_of_turn", "<table><tr><td>1</td></tr></table> <b>bold</b>",
  "def f(n):\n    if n < 2:\n        return n\n" + "    " * 12 + "deep", "\n" * 40, "", " ", "x" * 300,
  "2024-01-15 12:30:45 +0100, 1,000,000 and 1e-9", "مرحبا بالعالم שלום नमस्ते", "▁ already has the marker ▁▁ <0x41>",
]
DECODE_IDS = np.random.default_rng(0).integers(0, 262144, (40, 40)).tolist()   # any ids: byte tokens and special ones too
GREEDY_TOKENS = 32
TYPE_IDS = {name: i for i, (name, _, _) in GGML_TYPES.items()}

@pytest.fixture(scope="module")
def path() -> str: return testdata.path(NAME)

@pytest.fixture(scope="module")
def reference(path) -> dict:
  """What transformers computes from the file: its tokenizer's ids and texts for TEXTS and DECODE_IDS, the float32
  Gemma3ForCausalLM's logits of PROMPTS[0] and its 32 greedy tokens for each prompt. Building both from the GGUF takes
  about a minute (gguf-py parses the file's 262,144 tokens twice), so the results are kept in
  $TINYWEB_TESTDATA/reference/, keyed by the file's digest, the versions of transformers, torch, gguf and tokenizers, and the
  inputs: a later run reads them (delete the folder to compute them again)."""
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  pytest.importorskip("accelerate")   # (transformers asks for it to load a GGUF file)
  versions = [importlib.metadata.version(p) for p in ("transformers", "torch", "gguf", "tokenizers")]
  key = hashlib.sha256(json.dumps([testdata.FILES[NAME].sha256, versions,
                                   TEXTS, DECODE_IDS, PROMPTS, GREEDY_TOKENS]).encode()).hexdigest()[:16]
  stem = os.path.join(testdata.folder(), "reference", f"gemma-3-270m-transformers-{key}")
  if os.path.exists(stem + ".json") and os.path.exists(stem + ".npy"):
    with open(stem + ".json", encoding="utf-8") as fp: out = json.load(fp)
    return {**out, "logits": np.load(stem + ".npy")}
  folder = os.path.dirname(path)
  tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=NAME)
  model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=NAME, dtype=torch.float32).eval()
  ids = {text: tok(text).input_ids for text in TEXTS}
  greedy = {}
  for prompt in PROMPTS:
    with torch.no_grad(): greedy[prompt] = model.generate(torch.tensor([ids[prompt]]), max_new_tokens=GREEDY_TOKENS, do_sample=False)[0, len(ids[prompt]):].tolist()
  decode = [[seq, skip, tok.decode(seq, skip_special_tokens=skip)] for seq in [*ids.values(), *DECODE_IDS, *greedy.values()] for skip in (True, False)]
  decode += [[seq[:6], True, tok.decode(seq[:6], skip_special_tokens=True)] for seq in greedy.values()]   # (the demo's text)
  with torch.no_grad(): logits = model(torch.tensor([ids[PROMPTS[0]]])).logits[0].numpy()
  out = {"ids": ids, "greedy": greedy, "decode": decode}
  os.makedirs(os.path.dirname(stem), exist_ok=True)
  tmp = f"{stem}.{os.getpid()}.tmp"
  with open(tmp + ".npy", "wb") as fp: np.save(fp, logits)
  os.replace(tmp + ".npy", stem + ".npy")
  with open(tmp, "w", encoding="utf-8") as fp: json.dump(out, fp)
  os.replace(tmp, stem + ".json")   # (last: the pair is complete once the JSON is there)
  return {**out, "logits": logits}

def decoded(reference: dict, ids: list, skip: bool = True) -> str:
  return next(text for seq, sk, text in reference["decode"] if seq == ids and sk == skip)

@pytest.fixture(scope="module")
def gemma(path) -> Gemma: return Gemma.load(path, device="CPU")

def as_bits(a: np.ndarray) -> np.ndarray: return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)

def file_rows(f: GGUFFile, name: str) -> np.ndarray:
  """A tensor's bytes from the file, one row of blocks per row of the tensor (what gguf's dequantize takes)."""
  t = f.tensors[name]
  return np.frombuffer(f.mem[t.offset:t.offset + t.nbytes], np.uint8).reshape(int(np.prod(t.shape[:-1])), -1)

# ---------------------------------------------------------------------------------------------------------------------
# dequantization

def test_every_tensor_type_of_the_file_dequantizes_like_gguf(path):
  f = GGUFFile(path)
  by_type: dict[str, list] = {}
  for t in f.tensors.values(): by_type.setdefault(t.type, []).append(t)
  assert sorted(by_type) == ["F32", "Q4_K", "Q5_0", "Q6_K", "Q8_0"]
  for kind, infos in by_type.items():
    for t in sorted(infos, key=lambda t: t.nbytes)[:2] + [max(infos, key=lambda t: t.nbytes)] * (kind != "Q8_0"):
      want = gguf_dequantize(file_rows(f, t.name), TYPE_IDS[kind]).reshape(t.shape)
      got = f.tensor(t.name, "CPU").numpy()
      assert got.shape == want.shape == t.shape, t.name
      assert np.array_equal(as_bits(got), as_bits(want)), t.name   # bit for bit

def test_quantized_weights_are_computed_in_the_kernels_that_read_them(path):
  """A matmul reads the raw blocks: no kernel stores the float32 weight (the scales of each block or sub-block of 16 may
  get a buffer: at most a 16th of its size)."""
  f = GGUFFile(path)
  for name in ["blk.0.ffn_down.weight", "blk.0.attn_output.weight", "blk.0.ffn_up.weight", "blk.0.attn_v.weight"]:
    w = f.tensor(name, "CPU")
    x = Tensor(np.random.default_rng(0).standard_normal((1, w.shape[1]), dtype=np.float32), device="CPU")
    with engine.recording() as launches: y = (x @ w.T).numpy()
    assert max(bufs[0].nbytes for _, bufs in launches) <= w.numel() * 4 // 16, name
    np.testing.assert_allclose(y, x.numpy() @ w.numpy().T, rtol=1e-5, atol=1e-5)

def test_an_embedding_lookup_reads_only_its_rows(path, gemma):
  rows = [2, 818, 262143]
  with engine.recording() as launches: got = gemma.embedding(Tensor([rows], device="CPU")).numpy()
  assert max(bufs[0].nbytes for _, bufs in launches) <= 1 << 14   # the rows' blocks and values (the table's float32: 671 MB)
  f = GGUFFile(path)
  want = gguf_dequantize(file_rows(f, "token_embd.weight")[rows], TYPE_IDS["Q8_0"]) * np.float32(np.sqrt(640))
  assert np.array_equal(as_bits(got[0]), as_bits(want))

def random_blocks(kind: str, n: int, rng) -> np.ndarray:
  """n blocks of random bytes, their float16 scales set to finite values (a NaN scale makes the values NaN)."""
  _, _, size = GGML_TYPES[TYPE_IDS[kind]]
  b = rng.integers(0, 256, (n, size), dtype=np.uint8)
  for at in {"Q4_0": [0], "Q5_0": [0], "Q8_0": [0], "Q4_1": [0, 2], "Q5_1": [0, 2], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208]}[kind]:
    b[:, at:at + 2] = (rng.standard_normal(n) * 0.01).astype(np.float16).view(np.uint8).reshape(n, 2)
  return b

def write_test_file(fn, rng) -> dict:
  """A GGUF file written by gguf-py: metadata of every value type and one tensor of each type tinyweb dequantizes.
  Returns {tensor name: (type, the tensor's bytes as (rows, bytes per row))}."""
  w = gguf.GGUFWriter(fn, "llama")
  w.add_uint8("t.u8", 200); w.add_int8("t.i8", -100); w.add_uint16("t.u16", 60000); w.add_int16("t.i16", -30000)
  w.add_uint32("t.u32", 4_000_000_000); w.add_int32("t.i32", -2_000_000_000); w.add_float32("t.f32", 0.1)
  w.add_uint64("t.u64", 2**63 + 5); w.add_int64("t.i64", -2**62); w.add_float64("t.f64", 0.1); w.add_bool("t.bool", True)
  w.add_string("t.str", "héllo ▁ wörld 😀"); w.add_array("t.ints", [1, -2, 3]); w.add_array("t.strs", ["a", "", "βγ"])
  w.add_array("t.floats", [0.5, -1.25]); w.add_array("t.nested", [[1, 2], [3]])
  tensors = {"f32": ("F32", rng.standard_normal((3, 64)).astype(np.float32).view(np.uint8))}
  bits16 = np.arange(65536, dtype=np.uint16).reshape(256, 256)   # every float16 and bfloat16 bit pattern
  tensors["f16"], tensors["bf16"] = ("F16", bits16.view(np.uint8)), ("BF16", bits16.view(np.uint8))
  for kind in ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]:
    _, block, size = GGML_TYPES[TYPE_IDS[kind]]
    rows, per_row = 3, 512 // block
    tensors[kind.lower()] = (kind, random_blocks(kind, rows * per_row, rng).reshape(rows, per_row * size))
  for name, (kind, data) in tensors.items():
    w.add_tensor(name, data, raw_dtype=gguf.GGMLQuantizationType[kind])
  w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
  return tensors

def test_a_file_gguf_py_writes(tmp_path):
  """Every metadata value type, and every tensor type tinyweb dequantizes (random blocks), bit for bit as gguf's."""
  fn = tmp_path / "all.gguf"
  tensors = write_test_file(fn, np.random.default_rng(0))
  f = GGUFFile(fn)
  meta = {k: v for k, v in f.metadata.items() if k.startswith("t.")}
  assert meta == {"t.u8": 200, "t.i8": -100, "t.u16": 60000, "t.i16": -30000, "t.u32": 4_000_000_000, "t.i32": -2_000_000_000,
                  "t.f32": np.float32(0.1).item(), "t.u64": 2**63 + 5, "t.i64": -2**62, "t.f64": 0.1, "t.bool": True,
                  "t.str": "héllo ▁ wörld 😀", "t.ints": [1, -2, 3], "t.strs": ["a", "", "βγ"], "t.floats": [0.5, -1.25],
                  "t.nested": [[1, 2], [3]]}
  assert f.metadata["general.architecture"] == "llama" and f.version == 3
  metadata, loaded = gguf_load(fn, "CPU")
  assert metadata == f.metadata and list(loaded) == list(tensors)
  for name, (kind, data) in tensors.items():
    want = gguf_dequantize(data, TYPE_IDS[kind])
    assert f.tensors[name].type == kind and f.tensors[name].shape == want.shape, name
    assert np.array_equal(as_bits(loaded[name].numpy()), as_bits(want)), name
  with pytest.raises(ValueError, match="type Q2_K is not one tinyweb.gguf dequantizes"): dequantize(Tensor.zeros(1, 84, dtype="uint8"), "Q2_K")
  with pytest.raises(KeyError, match="no tensor 'nope'"): f.tensor("nope")

# ---------------------------------------------------------------------------------------------------------------------
# malformed files

def header(n_tensors: int, n_kv: int, version: int = 3) -> bytes: return b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv)
def gstr(s: bytes) -> bytes: return struct.pack("<Q", len(s)) + s

@pytest.mark.parametrize("data, message", [
  (b"GGML" + bytes(20), "bad magic b'GGML'"),
  (b"GG", "the magic number needs 4 bytes"),
  (header(0, 0, version=1), "GGUF version 1 is not supported"),
  (header(0, 2**40), "a count of 1099511627776 needs at least"),                           # refused before any allocation
  (header(2**62, 0), "the tensor count: a count of 4611686018427387904"),
  (header(0, 1) + gstr(b"k") + struct.pack("<I", 8) + struct.pack("<Q", 2**60), "metadata 'k': a count of 1152921504606846976"),
  (header(0, 1) + gstr(b"k") + struct.pack("<IIQ", 9, 8, 2**50), r"metadata 'k' \(an array of STRING\): a count of"),
  (header(0, 1) + gstr(b"k") + struct.pack("<I", 13), "metadata 'k' has unknown value type 13"),
  (header(0, 1) + gstr(b"k") + struct.pack("<IB", 7, 2), "a bool must be 0 or 1, got 2"),
  (header(0, 1) + gstr(b"k") + struct.pack("<I", 8) + gstr(b"\xff\xfe"), "metadata 'k' is not valid UTF-8"),
  (header(0, 2) + (gstr(b"k") + struct.pack("<IB", 0, 1)) * 2, "metadata key 'k' appears twice"),
  (header(0, 1) + gstr(b"general.alignment") + struct.pack("<II", 4, 24), "general.alignment must be a power of two, got 24"),
  (header(1, 0) + gstr(b"w") + struct.pack("<I", 9) + bytes(80), "tensor 'w' has 9 dimensions"),
  (header(1, 0) + gstr(b"w") + struct.pack("<IQIQ", 1, 4, 99, 0) + bytes(32), "tensor 'w' has unknown ggml type 99"),
  (header(1, 0) + gstr(b"w") + struct.pack("<IQIQ", 1, 33, 8, 0) + bytes(64), r"tensor 'w' \(Q8_0\): its rows of 33 are not whole blocks of 32"),
  (header(1, 0) + gstr(b"w") + struct.pack("<IQIQ", 1, 4, 0, 8) + bytes(64), "tensor 'w': offset 8 is not a multiple of the alignment 32"),
  (header(1, 0) + gstr(b"w") + struct.pack("<IQIQ", 1, 2**40, 0, 0) + bytes(64), r"tensor 'w' \(F32, dims \[1099511627776\]\): its 4398046511104 bytes"),
])
def test_malformed_files_raise_format_errors_naming_the_file(tmp_path, data, message):
  fn = tmp_path / "bad.gguf"
  fn.write_bytes(data)
  with pytest.raises(FormatError, match=f"^{re.escape(str(fn))}: gguf: .*{message}"): GGUFFile(fn)
  with pytest.raises(FormatError, match=r"^<bytes of \d+ bytes>: gguf: "): GGUFFile(data)

def test_truncated_files_are_refused(tmp_path):
  good = tmp_path / "good.gguf"
  write_test_file(good, np.random.default_rng(1))
  data, f = good.read_bytes(), GGUFFile(good)
  end = max(t.offset + t.nbytes for t in f.tensors.values())   # (what follows is padding)
  for cut in sorted({*range(0, 600, 7), *range(600, end, 997), end - 1}):
    with pytest.raises(FormatError, match=r"truncated"): GGUFFile(data[:cut])

# ---------------------------------------------------------------------------------------------------------------------
# the model against transformers


def test_tokenizer_matches_transformers(path, reference):
  tok = GemmaTokenizer.from_gguf(GGUFFile(path).metadata)
  for text in TEXTS: assert tok.encode(text) == reference["ids"][text], text
  for ids, skip, text in reference["decode"]: assert tok.decode(ids, skip_special_tokens=skip) == text, (ids, skip)

def test_logits_match_transformers(path, reference, model_device):
  gemma = Gemma.load(path, device=model_device)
  ids = reference["ids"][PROMPTS[0]]
  got, want = gemma(ids).numpy(), reference["logits"]
  assert got.shape == want.shape == (len(ids), 262144)
  np.testing.assert_allclose(got, want, rtol=0, atol=5e-4)   # measured 7.0e-5 (CPU), 5.3e-5 (WEBGPU) of |logits| <= 22.4
  assert (got.argmax(-1) == want.argmax(-1)).all()

def test_greedy_generation_matches_transformers(gemma, reference):
  """32 greedy tokens for each prompt: the prompt in a jitted chunk, then a jitted step per token (replays from the third)."""
  for prompt in PROMPTS:
    want = reference["greedy"][prompt]
    got = list(gemma.generate_ids(reference["ids"][prompt], GREEDY_TOKENS))
    assert got == want, (prompt, gemma.tokenizer.decode(got), decoded(reference, want))

def test_sampling_is_seeded_and_top_k_1_is_greedy(gemma, reference):
  ids = reference["ids"][PROMPTS[0]]
  assert list(gemma.generate_ids(ids, 4, temperature=1.0, top_k=1, seed=5)) == reference["greedy"][PROMPTS[0]][:4]
  a, b = (list(gemma.generate_ids(ids, 4, temperature=1.5, top_k=50, seed=3)) for _ in range(2))
  assert a == b and len(a) == 4

def test_generate_demo_prints_transformers_text(path, reference, capsys):
  from demos.generate import main
  text = main([PROMPTS[1], "--max-new-tokens", "6", "--device", "CPU", "--model", path])
  assert text == decoded(reference, reference["greedy"][PROMPTS[1]][:6]) and capsys.readouterr().out == text + "\n"

def test_clear_errors(tmp_path, gemma):
  fn = tmp_path / "llama.gguf"
  write_test_file(fn, np.random.default_rng(2))
  with pytest.raises(ValueError, match="general.architecture is 'llama'; Gemma reads 'gemma3' files"): Gemma.load(fn)
  with pytest.raises(ValueError, match="do not fit max_context=512"): next(gemma.generate_ids([2] * 500, 32))
  with pytest.raises(ValueError, match="must be >= 0"): next(gemma.generate_ids([2], 4, temperature=-1))
  with pytest.raises(ValueError, match="token id 262144 is not in the vocabulary"): gemma.tokenizer.decode([262144])
