"""Continue a prompt with Gemma-3-270M (tinyweb.models.gemma), printing the text as the tokens come.

  python -m demos.generate "The capital of France is"                  # greedy, 32 new tokens
  python -m demos.generate "Once upon a time" --max-new-tokens 100 --temperature 0.8 --top-k 40 --seed 1
  python -m demos.generate "def fibonacci(n):" --device WEBGPU --model other-gemma-3.gguf

--model is a Gemma 3 GGUF file; the default is the one `python -m tests.testdata` fetches ($TINYWEB_TESTDATA/
gemma-3-270m-q4_k_m.gguf, by default under ~/.cache/tinyweb/testdata). The prompt is plain text (BOS is added); the
timings (load, first token, tokens/s of the rest) go to stderr."""
from __future__ import annotations
import argparse, os, sys, time
from typing import Optional, Sequence
from tinyweb import Device

def default_model() -> str:
  from tests import testdata
  return os.path.join(testdata.folder(), "gemma-3-270m-q4_k_m.gguf")

def main(argv: Optional[Sequence[str]] = None) -> str:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("prompt")
  ap.add_argument("--max-new-tokens", type=int, default=32)
  ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy (default); else sample from softmax(logits / T)")
  ap.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens only (default 0: all)")
  ap.add_argument("--seed", type=int, default=None, help="the sampling's random seed")
  ap.add_argument("--device", default=None, help=f"the device (default: {Device.DEFAULT})")
  ap.add_argument("--model", default=None, help="a Gemma 3 GGUF file (default: the test data's Gemma-3-270M)")
  a = ap.parse_args(argv)
  path = a.model or default_model()
  if not os.path.isfile(path): sys.exit(f"generate: no model at {path}: give --model, or fetch Gemma-3-270M with `python -m tests.testdata`")
  from tinyweb.gguf import GGUFFile
  from tinyweb.models.gemma import Gemma, GemmaTokenizer
  st = time.perf_counter()
  f = GGUFFile(path)
  need = len(GemmaTokenizer.from_gguf(f.metadata, path).encode(a.prompt)) + a.max_new_tokens
  model = Gemma(f, a.device, max_context=max(512, -(-need // 256) * 256))   # (each step attends over the whole cache)
  loaded, pieces, first = time.perf_counter(), [], None
  for text in model.generate(a.prompt, a.max_new_tokens, a.temperature, a.top_k, a.seed):
    if first is None: first = time.perf_counter()
    pieces.append(text)
    print(text, end="", flush=True)
  end = time.perf_counter()
  print(flush=True)
  rate = f", then {(len(pieces) - 1) / (end - first):.1f} tokens/s" if len(pieces) > 1 else ""
  print(f"({os.path.basename(path)} on {Device.canonicalize(a.device)}: loaded in {loaded - st:.1f} s, first token after "
        f"{(first or end) - loaded:.1f} s{rate})", file=sys.stderr)
  return "".join(pieces)

if __name__ == "__main__":
  main()
