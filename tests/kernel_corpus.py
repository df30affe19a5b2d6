"""Kernel corpus: are the kernel sources of two checkouts byte-identical? For a change that claims to change no kernel
(a restructuring), in three steps:

  python -m tests.kernel_corpus collect DUMP [pytest args]      # run the suite, record every kernel AST it builds
  PYTHONPATH=CHECKOUT python tests/kernel_corpus.py render DUMP OUT [--targets CPU,LLVM,...]
  python -m tests.kernel_corpus compare OUT_BEFORE OUT_AFTER [--show N]

`collect` runs pytest with a plugin that records, per process, every (device, kernel AST, BEAM, NOOPT, TILES) that
engine.build_kernel is asked for and every AST the CUDA compile check lowers, pickled to DUMP.<pid>.pkl (dtypes by name,
so another checkout's dtypes load them). `render` lowers and renders each recorded AST, for every target named (default
all six: CPU, LLVM, CL, WEBGPU, PYTHON and CUDA), with the checkout that Python imports (run it once per checkout, on
the same DUMP, with that checkout first on PYTHONPATH; a checkout older than 6fb49d7 needs `tinyweb/backends` linked to
`../backends`); BEAM-searched kernels are left out (BEAM times its candidates: its choice follows the machine's load).
`compare` says, per target, how many of the sources are identical (kernel names replaced, errors compared as text) and
shows the first differences as diffs.

This checks lowering and rendering of the same ASTs. Whether the scheduler makes the same ASTs is a comparison of two
`collect` runs' records (`compare-asts DUMP_A DUMP_B`), which needs each checkout's own suite run."""
from __future__ import annotations
import argparse, collections, difflib, glob, os, pickle, subprocess, sys, time

TARGETS = ["CPU", "LLVM", "CL", "WEBGPU", "PYTHON", "CUDA"]
_DIR = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------- collect (a pytest plugin, loaded by `collect`)

class _Pickler(pickle.Pickler):
  """dtypes by name: the checkout that loads the records gets its own instances (lowering may compare them by identity)"""
  def reducer_override(self, obj):
    from tinyweb.dtype import DType, dtypes
    if isinstance(obj, DType): return getattr, (dtypes, obj.name)
    return NotImplemented

class RecordingPlugin:
  def __init__(self, dump: str):
    self.dump, self.seen, self.out = dump, set(), None
  def record(self, key):
    if key in self.seen: return
    self.seen.add(key)
    _Pickler(self.out, protocol=4).dump(key)
  def pytest_configure(self, config):
    if self.out is not None: return
    from tinyweb import engine
    from tinyweb.helpers import BEAM, NOOPT, TILES
    self.out = open(f"{self.dump}.{os.getpid()}.pkl", "wb")
    build = engine.build_kernel
    def build_kernel(device, ast):
      self.record((device, ast, BEAM.value, NOOPT.value, TILES.value))
      return build(device, ast)
    engine.build_kernel = build_kernel
    engine.kernel_observers.append(lambda device, ast: self.record(("CUDA", ast, 0, 0, -1)))
  def pytest_unconfigure(self, config):
    if self.out: self.out.close()

def pytest_configure(config):   # (as `-p kernel_corpus` with $KERNEL_CORPUS_DUMP set: what `collect` runs)
  if (dump := os.environ.get("KERNEL_CORPUS_DUMP")) and not config.pluginmanager.has_plugin("kernel-corpus-recorder"):
    plugin = RecordingPlugin(dump)
    config.pluginmanager.register(plugin, "kernel-corpus-recorder")   # (pytest then calls its pytest_configure)

def collect(dump: str, pytest_args: list[str]) -> int:
  os.makedirs(os.path.dirname(os.path.abspath(dump)), exist_ok=True)
  for f in glob.glob(f"{dump}.*.pkl"): os.remove(f)
  env = dict(os.environ, KERNEL_CORPUS_DUMP=os.path.abspath(dump), PYTHONPATH=os.pathsep.join(
    [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p] + [_DIR]))
  return subprocess.call([sys.executable, "-m", "pytest", "-p", "kernel_corpus", *(pytest_args or ["-q", "tests"])], env=env)

def load_records(dump: str) -> list[tuple]:
  """The distinct records of every process of a `collect` run, in a fixed order (file name, then record order)."""
  keys, seen = [], set()
  for fn in sorted(glob.glob(f"{dump}.*.pkl")):
    with open(fn, "rb") as f:
      while True:
        try: k = pickle.load(f)
        except EOFError: break
        except Exception as e:   # (a file still being written ends mid-record)
          print(f"kernel_corpus: {fn}: stopped at an unreadable record ({type(e).__name__}: {e})", file=sys.stderr)
          break
        if k not in seen: seen.add(k); keys.append(k)
  return keys

# ---------------------------------------------------------------- render (with the checkout on PYTHONPATH)

def render(dump: str, out: str, targets: list[str]):
  import tinyweb
  from tinyweb.device import Device
  from tinyweb.helpers import Context
  from tinyweb.codegen.lower import lower
  from tinyweb.codegen.cuda import CUDARenderer
  jobs, seen = [], set()
  for _, ast, beam, noopt, tiles in load_records(dump):
    if beam: continue
    for t in targets:
      if (job := (t, ast, noopt, tiles)) not in seen: seen.add(job); jobs.append(job)
  print(f"kernel_corpus: {tinyweb.__file__}: {len(jobs)} kernels to render", flush=True)
  cuda, results, start = CUDARenderer(), [], time.time()
  for i, (target, ast, noopt, tiles) in enumerate(jobs):
    try:
      with Context(NOOPT=noopt, TILES=tiles):
        # (lowered here, not by engine.build_kernel, which may read the result back from its disk cache)
        renderer = cuda if target == "CUDA" else Device[target].renderer
        prog = lower(ast, renderer); src = renderer.render(prog)
      results.append((target, src.replace(prog.name, "KERNEL")))
    except Exception as e: results.append((target, f"ERROR {type(e).__name__}: {str(e)[:300]}"))
    if i and i % 5000 == 0: print(f"  {i} in {time.time() - start:.0f} s", flush=True)
  with open(out, "wb") as f: pickle.dump(results, f)
  print(f"kernel_corpus: {len(results)} rendered in {time.time() - start:.0f} s -> {out}")

# ---------------------------------------------------------------- compare

def compare(a_path: str, b_path: str, show: int) -> int:
  with open(a_path, "rb") as f: a = pickle.load(f)
  with open(b_path, "rb") as f: b = pickle.load(f)
  if len(a) != len(b) or any(x[0] != y[0] for x, y in zip(a, b)): raise SystemExit("the two renders are not of the same DUMP and targets")
  total, same, errors, diffs = collections.Counter(), collections.Counter(), collections.Counter(), []
  for i, ((target, sa), (_, sb)) in enumerate(zip(a, b)):
    total[target] += 1
    if sa.startswith("ERROR") or sb.startswith("ERROR"): errors[target] += 1
    if sa == sb: same[target] += 1
    else: diffs.append(i)
  print(f"{sum(same.values())} of {sum(total.values())} kernel sources identical")
  for t in sorted(total): print(f"  {t}: {same[t]} / {total[t]} identical ({errors[t]} raised in one or both)")
  for i in diffs[:show]:
    print(f"--- kernel {i} ({a[i][0]})")
    print("\n".join(list(difflib.unified_diff(a[i][1].split("\n"), b[i][1].split("\n"), "before", "after", lineterm="", n=1))[:80]))
  return 1 if diffs else 0

def compare_asts(a_dump: str, b_dump: str) -> int:
  """The kernels (device, AST, settings) two suites asked for: the same set?"""
  a, b = set(load_records(a_dump)), set(load_records(b_dump))
  print(f"{len(a & b)} kernels in both; {len(a - b)} only in {a_dump}, {len(b - a)} only in {b_dump}")
  for name, only in ((a_dump, a - b), (b_dump, b - a)):
    for k in sorted(only, key=repr)[:5]: print(f"  only in {name}: {k[0]} {str(k[1])[:300]}")
  return 1 if a != b else 0

def main(argv=None) -> int:
  p = argparse.ArgumentParser(prog="python -m tests.kernel_corpus", description=__doc__.split("\n\n")[0])
  sub = p.add_subparsers(dest="cmd", required=True)
  c = sub.add_parser("collect", help="run pytest, recording every kernel AST"); c.add_argument("dump")
  c.add_argument("pytest_args", nargs=argparse.REMAINDER)
  r = sub.add_parser("render", help="lower and render the records with the checkout Python imports")
  r.add_argument("dump"); r.add_argument("out"); r.add_argument("--targets", default=",".join(TARGETS))
  m = sub.add_parser("compare", help="compare two renders"); m.add_argument("a"); m.add_argument("b")
  m.add_argument("--show", type=int, default=5)
  s = sub.add_parser("compare-asts", help="compare two collect runs' records"); s.add_argument("a"); s.add_argument("b")
  args = p.parse_args(argv)
  if args.cmd == "collect": return collect(args.dump, args.pytest_args)
  if args.cmd == "render":
    if (bad := set(args.targets.split(",")) - set(TARGETS)): p.error(f"unknown targets {sorted(bad)}: valid are {TARGETS}")
    render(args.dump, args.out, args.targets.split(","))
    return 0
  if args.cmd == "compare": return compare(args.a, args.b, args.show)
  return compare_asts(args.a, args.b)

if __name__ == "__main__": sys.exit(main())
