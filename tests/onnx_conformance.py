"""The ONNX backend node tests (the `onnx` wheel's case generators: onnx.backend.test.case.node.collect_testcases) run with
tinyweb.onnx and with onnxruntime, side by side, under one comparison: outputs of the expected shape and kind
(float/int/bool), values within rtol 1e-3 and atol 1e-5, NaN equal.

  python -m tests.onnx_conformance --device CPU            # pass counts of both, and tinyweb's failures by reason
  python -m tests.onnx_conformance --only relu,conv -v     # the cases whose name contains one of these, each listed
  python -m tests.onnx_conformance --tinygrad              # also tinygrad 0.14's OnnxRunner, the peer"""
from __future__ import annotations
import argparse, collections, sys, time, warnings
import numpy as np

RTOL, ATOL = 1e-3, 1e-5

def cases(only: list[str] | None = None) -> list:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases
    out = collect_testcases()
  return [c for c in out if not only or any(o in c.name for o in only)]

def kind(a: np.ndarray) -> str:   # (ml_dtypes' bfloat16 and float8 types are floats of numpy kind "V")
  return "b" if a.dtype == np.bool_ else "f" if a.dtype.kind in "fc" or "float" in a.dtype.name else "i"

def compare(got: list, want: list) -> str | None:
  """None where got matches want, else why not."""
  if len(got) < len(want): return f"{len(got)} outputs, expected {len(want)}"
  for k, (g, w) in enumerate(zip(got, want)):
    w = as_array(w)
    if isinstance(w, list) or w is None:   # a sequence (element by element) or an empty optional
      if w is None: ok = g is None
      else: ok = isinstance(g, list) and len(g) == len(w) and compare(g, w) is None
      if not ok: return f"output {k}: {'a sequence' if w is not None else 'an empty optional'} differs"
      continue
    if not isinstance(w, np.ndarray): return f"output {k}: expected a {type(w).__name__} (sequences/maps are not tensors)"
    g = np.asarray(g)
    if g.shape != w.shape: return f"output {k}: shape {g.shape}, expected {w.shape}"
    if w.dtype.kind in "OSU": return f"output {k}: string output"
    if kind(g) != kind(w): return f"output {k}: dtype {g.dtype}, expected {w.dtype}"
    if not np.allclose(g.astype(np.float64), w.astype(np.float64), rtol=RTOL, atol=ATOL, equal_nan=True):
      bad = ~np.isclose(g.astype(np.float64), w.astype(np.float64), rtol=RTOL, atol=ATOL, equal_nan=True)
      i = tuple(int(x) for x in np.argwhere(bad)[0]) if bad.ndim else ()
      return f"output {k}: {int(bad.sum())}/{bad.size} values differ, at {i}: {g[i]!r}, expected {w[i]!r}"
  return None

def as_array(v):
  """A test datum as numpy: numpy scalars as 0-d arrays, TensorProtos (how the cast tests give theirs) converted by onnx,
  a sequence element by element (an empty optional stays None)."""
  from onnx import TensorProto, numpy_helper
  if isinstance(v, list): return [as_array(x) for x in v]
  return np.asarray(v) if isinstance(v, np.generic) else numpy_helper.to_array(v) if isinstance(v, TensorProto) else v

def inputs_of(model, data: list) -> dict:
  names = [v.name for v in model.graph.input if v.name not in {t.name for t in model.graph.initializer}]
  return dict(zip(names, [as_array(v) for v in data]))

def run_tinyweb(case, device: str) -> str | None:
  from tinyweb.onnx import load
  try:
    runner = load(case.model.SerializeToString(), device=device)
    for inputs, outputs in case.data_sets:
      feed = inputs_of(case.model, inputs)
      if any(not isinstance(v, (np.ndarray, list)) and v is not None for v in feed.values()): return "an input that is neither a tensor nor a sequence"
      got = runner(feed)
      def host(v): return [host(x) for x in v] if isinstance(v, list) else None if v is None else v.numpy()
      if (why := compare([host(got[n]) for n in runner.outputs], outputs)) is not None: return why
  except Exception as e: return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
  return None

def run_onnxruntime(case) -> str | None:
  import onnxruntime as ort
  try:
    sess = ort.InferenceSession(case.model.SerializeToString(), providers=["CPUExecutionProvider"])
    for inputs, outputs in case.data_sets:
      got = sess.run(None, inputs_of(case.model, inputs))
      if (why := compare(got, outputs)) is not None: return why
  except Exception as e: return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
  return None

def run_tinygrad(case) -> str | None:
  """tinygrad 0.14's OnnxRunner (tinygrad.nn.onnx; DEV=CPU), the peer."""
  import os, tempfile
  os.environ.setdefault("DEV", "CPU")
  from tinygrad import Tensor as TgTensor
  from tinygrad.nn.onnx import OnnxRunner
  try:
    with tempfile.NamedTemporaryFile(suffix=".onnx") as f:
      f.write(case.model.SerializeToString()); f.flush()
      runner = OnnxRunner(f.name)
    for inputs, outputs in case.data_sets:
      got = runner({k: TgTensor(v) if isinstance(v, np.ndarray) else v for k, v in inputs_of(case.model, inputs).items()})
      names = [o.name for o in case.model.graph.output]
      if (why := compare([got[n].numpy() if hasattr(got[n], "numpy") else got[n] for n in names], outputs)) is not None: return why
  except Exception as e: return f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
  return None

def reason_class(why: str) -> str:
  """A failure's reason without its details, to count them."""
  if "operator set domain" in why: return "operator set domain not supported: " + why.split("'")[1]
  if "is not supported" in why and "operator" in why: return "operator not supported: " + why.split("operator ")[1].split(" ")[0]
  return why.split(":")[0][:80] if why.startswith(("OnnxError", "output")) else why[:80]

def main(argv=None):
  ap = argparse.ArgumentParser(prog="python -m tests.onnx_conformance", description=__doc__.split("\n\n")[0])
  ap.add_argument("--device", default="CPU")
  ap.add_argument("--only", default=None, help="comma-separated parts of case names")
  ap.add_argument("--no-ort", action="store_true", help="skip onnxruntime")
  ap.add_argument("--tinygrad", action="store_true", help="also tinygrad 0.14's OnnxRunner (the peer; slow)")
  ap.add_argument("-v", action="store_true", help="list every case")
  a = ap.parse_args(argv)
  cs = cases(a.only.split(",") if a.only else None)
  t0, tw_fail, ort_fail, tg_fail = time.perf_counter(), {}, {}, {}
  for c in cs:
    if (why := run_tinyweb(c, a.device)) is not None: tw_fail[c.name] = why
    if not a.no_ort and (why_ort := run_onnxruntime(c)) is not None: ort_fail[c.name] = why_ort
    if a.tinygrad and (why_tg := run_tinygrad(c)) is not None: tg_fail[c.name] = why_tg
    if a.v: print(f"{c.name:70} tinyweb {'ok' if c.name not in tw_fail else tw_fail[c.name]}", flush=True)
  n = len(cs)
  print(f"\nONNX backend node tests: {n} cases, device {a.device}, rtol {RTOL} atol {ATOL} ({time.perf_counter() - t0:.0f} s)")
  print(f"  tinyweb     passes {n - len(tw_fail)}")
  if not a.no_ort: print(f"  onnxruntime passes {n - len(ort_fail)}")
  if a.tinygrad: print(f"  tinygrad    passes {n - len(tg_fail)}")
  by = collections.Counter(reason_class(w) for w in tw_fail.values())
  print("tinyweb's failures by reason:")
  for r, k in by.most_common(40): print(f"  {k:5}  {r}")
  return 0

if __name__ == "__main__": sys.exit(main())
