"""VIZ=1 (or `python -m tinyweb.viz script.py [args]`): what each realize did, as a local web page.

For each realize (the first VIZ_MAX_REALIZES, default 200, that had work) the page shows the tensor graph of the
targets before scheduling, the schedule (kernels and copies in order, the buffers each writes and reads, their lower,
compile, launch and device times) and, for each kernel, its AST (the ops fused into it), the uops after each pass of
the code generator (codegen/lower.py's PASSES, with each pass's time and uop count) and the generated source.

At exit the data is written with the page's built assets into a temporary folder, which is served on
http://127.0.0.1:$VIZ_PORT (default 8765; 0: a free port) until Ctrl-C; a browser opens the page unless VIZ_BROWSER=0
or there is no display. `python -m tinyweb.serve FOLDER` serves such a folder again.

In Python (and tests), nothing blocks:
  with capture() as rec: ...            record the realizes of the block
  data = rec.data()                     JSON-able: the realizes, and each kernel lowered again pass by pass
  write_site(data, folder)              the page and its data in `folder` (returns the path of viz.html)
  serve(folder)                         serve it until Ctrl-C (blocks)

The passes are recorded after the run, not while it runs: each kernel is lowered again with the settings it was built
with (lowering is deterministic), and the page says where the source of that lowering differs from the compiled one.
TinyJit's replays (launches without a schedule) are not shown; the realizes that captured them are.

The page's assets (web/viz.html, web/viz.ts) are built by `npm run build` into tinyweb/viz_page/, which the wheel
ships as package data."""
from __future__ import annotations
import argparse, atexit, contextlib, dataclasses, json, os, runpy, shutil, sys, tempfile, threading, time, traceback, webbrowser
from pathlib import Path
import tinyweb.events as events
from tinyweb.device import Device
from tinyweb.engine import kernel_key, kernel_opts
from tinyweb.graph import _COLORS, _label
from tinyweb.helpers import Context, getenv
from tinyweb.serve import StaticServer
from tinyweb.uop import UOp, Ops, listing
from tinyweb.codegen.lower import lower, current_uops

PAGE_DIR = Path(__file__).resolve().parent / "viz_page"
MAX_NODES = 2000        # a bigger tensor graph is shown as its text listing...
MAX_LISTING = 20_000    # ...of at most this many lines

class VizPageMissing(FileNotFoundError):
  """The page's built assets are not in the package."""

def page_dir() -> Path:
  if not (PAGE_DIR / "viz.html").is_file():
    raise VizPageMissing(f"tinyweb.viz: the page is not built ({PAGE_DIR / 'viz.html'} is missing). In a tinyweb "
                         "checkout run `npm ci && npm run build` (it writes tinyweb/viz_page/); or install a tinyweb "
                         "wheel built after that, which ships the page")
  return PAGE_DIR

def tensor_graph(targets: list[UOp]) -> dict:
  """The targets' UOp graph: nodes (label, color, sources as node indexes), or its listing where it is too big to draw."""
  uops = [u for u in UOp(Ops.SINK, None, tuple(targets)).toposort()[:-1] if u.op is not Ops.DEVICE]
  if len(uops) > MAX_NODES:
    lines = listing(uops).split("\n")
    more = [f"... ({len(lines) - MAX_LISTING} more lines)"] if len(lines) > MAX_LISTING else []
    return {"total": len(uops), "listing": "\n".join(lines[:MAX_LISTING] + more)}
  index, targets = {u: i for i, u in enumerate(uops)}, set(targets)
  return {"total": len(uops), "nodes": [{"label": _label(u), "color": _COLORS.get(u.op, "white"), "target": u in targets,
                                         "src": [index[s] for s in u.src if s in index]} for u in uops]}

@dataclasses.dataclass
class _Kernel:
  key: tuple   # engine.kernel_key: (device, ast, BEAM, NOOPT, TILES)
  name: str    # as compiled (not the CompiledKernel: that would keep its loaded program from being unloaded)
  src: str

class Recorder:
  """A watcher of the engine's events (tinyweb.events): for each realize with work, its graph, its schedule and the
  times of its items; each kernel once (by kernel_key), to be lowered again by `data()`. Events come from the thread
  that realizes (one realize open per thread), compiles also from the compile pool's threads (matched by source)."""
  def __init__(self, max_realizes: int | None = None):
    self.max_realizes = getenv("VIZ_MAX_REALIZES", 200) if max_realizes is None else max_realizes
    self.realizes: list[dict] = []
    self.skipped = 0                              # realizes with work past max_realizes
    self.kernels: dict[tuple, int] = {}           # kernel_key -> index in _kernels
    self._kernels: list[_Kernel] = []
    self._compiles: dict[str, tuple[float, int]] = {}   # source -> (seconds, sources compiled together)
    self._lock, self._open = threading.Lock(), threading.local()

  def __call__(self, event: str, f: dict):
    if event == "compile":
      with self._lock:
        for src in f["srcs"]: self._compiles[src] = (f["end"] - f["start"], len(f["srcs"]))
      return
    if event == "schedule":
      self._open.r = None
      if not f["items"]: return
      with self._lock:
        if len(self.realizes) + self.skipped >= self.max_realizes:
          self.skipped += 1
          return
      self._open.r = {"targets": f["targets"], "items": f["items"], "schedule_s": f["end"] - f["start"], "lowers": {},
                      "launches": {}, "copies": []}
      return
    r = getattr(self._open, "r", None)
    if r is None: return   # (outside a recorded realize: a TinyJit replay, or past the cap)
    if event == "lower": r["lowers"][(f["device"], f["ast"])] = (f["end"] - f["start"], f["cached"])
    elif event == "launch": r["launches"][id(f["bufs"])] = (f["kernel"], f["end"] - f["start"], f["kernel_s"])
    elif event == "copy": r["copies"].append(f["end"] - f["start"])
    elif event == "realize" and f["items"] is r["items"]:
      self._open.r = None
      self._finish(r, f["end"] - f["start"])

  def _finish(self, r: dict, run_s: float):
    bufs: dict[int, int] = {}   # id(Buffer) -> index in `buffers`
    buffers, items, copies = [], [], iter(r["copies"])
    def buf(b) -> int:
      if id(b) not in bufs:
        bufs[id(b)] = len(buffers)
        buffers.append({"device": b.device, "dtype": b.dtype.name, "size": b.size})
      return bufs[id(b)]
    for it in r["items"]:
      io = {"writes": [buf(it.bufs[0])], "reads": [buf(b) for b in it.bufs[1:]]}
      if it.kind == "copy":
        items.append({"kind": "copy", "name": f"COPY {it.bufs[1].device} -> {it.bufs[0].device}", **io, "seconds": next(copies, None)})
        continue
      ck, launch_s, kernel_s = r["launches"][id(it.bufs)]
      device = it.bufs[0].device
      lower_s, from_disk = r["lowers"].get((device, it.ast), (None, False))
      with self._lock:
        compile_s, batch = self._compiles.pop(ck.src, (None, 0))
        kid = self.kernels.setdefault(key := kernel_key(device, it.ast), len(self._kernels))
        if kid == len(self._kernels): self._kernels.append(_Kernel(key, ck.program.name, ck.src))
      # built: in this realize ("now"), read back from the disk cache of lowered kernels ("disk"), or by an earlier one
      built = "earlier" if lower_s is None else "disk" if from_disk else "now"
      items.append({"kind": "kernel", "name": ck.program.name, "device": device, "kernel": kid, **io, "built": built,
                    "lower_s": lower_s, "compile_s": compile_s, "compiled_with": batch, "launch_s": launch_s, "kernel_s": kernel_s})
    realize = {"graph": tensor_graph(r["targets"]), "schedule_s": r["schedule_s"], "run_s": run_s, "buffers": buffers, "items": items}
    with self._lock: self.realizes.append(realize)

  def data(self) -> dict:
    """Everything recorded, as JSON-able values; each kernel is lowered again here to list it after each pass."""
    with self._lock: realizes, kernels, skipped = list(self.realizes), list(self._kernels), self.skipped
    return {"format": 1, "realizes": realizes, "kernels": [kernel_passes(k) for k in kernels],
            "skipped_realizes": skipped, "max_realizes": self.max_realizes, "max_nodes": MAX_NODES}

def kernel_passes(kernel: _Kernel) -> dict:
  """The kernel lowered again with the settings it was built with, listed after each pass (a uop keeps its %n through
  the passes, so consecutive listings diff well); and what the engine compiled for it."""
  device, ast, beam, noopt, tiles = kernel.key
  renderer, passes, names = Device[device].renderer, [], {}
  def on_pass(name, k, seconds):
    uops = current_uops(k)
    passes.append({"name": name, "seconds": seconds, "uops": len(uops), "listing": listing(uops, names)})
  with Context(BEAM=beam, NOOPT=noopt, TILES=tiles):
    opts = kernel_opts(device, ast)
    st = time.perf_counter()
    prog = lower(ast, renderer, opts, on_pass)
  if passes[-1]["name"] != "program":   # a tensor-core kernel: codegen/tensor_cores.py lowered it after `optimize`
    passes.append({"name": "tensor_cores", "seconds": time.perf_counter() - st - sum(p["seconds"] for p in passes),
                   "uops": len(prog.uops), "listing": listing(prog.uops, names)})
  # (the engine may have renamed the kernel: compiled in one batch with another of the same name)
  same = renderer.render(dataclasses.replace(prog, name=kernel.name)) == kernel.src
  return {"name": kernel.name, "device": device, "ast": str(ast), "src": kernel.src, "same_source": same,
          "opts": [str(o) for o in prog.opts], "settings": {"BEAM": beam, "NOOPT": noopt, "TILES": tiles},
          "global_shape": list(prog.global_shape), "flops": prog.flops, "mem_estimate": prog.mem_estimate, "passes": passes}

@contextlib.contextmanager
def capture(max_realizes: int | None = None):
  """`with capture() as rec:` records the realizes of the block (every launch waits for its kernel, to time it);
  `rec.data()` is what the page shows."""
  rec = Recorder(max_realizes)
  with events.watching(rec, time_launches=True): yield rec

def write_site(data: dict, folder: str | os.PathLike) -> Path:
  """The page with `data` (Recorder.data()) in `folder`: the built assets, viz.json (the realizes and the kernels' names)
  and kernels/<i>.json (each kernel's passes and source, fetched when the page shows it). Returns viz.html's path."""
  folder = Path(folder)
  shutil.copytree(page_dir(), folder, dirs_exist_ok=True)
  (folder / "kernels").mkdir(exist_ok=True)
  for i, k in enumerate(data["kernels"]): (folder / "kernels" / f"{i}.json").write_text(json.dumps(k))
  index = {**data, "kernels": [{"name": k["name"], "device": k["device"]} for k in data["kernels"]]}
  (folder / "viz.json").write_text(json.dumps(index))
  return folder / "viz.html"

def _has_display() -> bool:
  return not sys.platform.startswith("linux") or bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))

def serve(folder: str | os.PathLike, port: int | None = None, browser: bool | None = None):
  """Serve the page in `folder` on 127.0.0.1 (port: VIZ_PORT, default 8765, taken: any free one) until Ctrl-C, opening
  it in a browser (VIZ_BROWSER=0 or no display: not)."""
  port = getenv("VIZ_PORT", 8765) if port is None else port
  try: server = StaticServer(folder, port=port, quiet=True)
  except OSError as e:
    if port == 0: raise
    print(f"VIZ: port {port} is not free ({e.strerror or e}): serving on another one (VIZ_PORT chooses)")
    server = StaticServer(folder, port=0, quiet=True)
  url = server.url + "viz.html"
  print(f"VIZ: {url} (Ctrl-C stops; `python -m tinyweb.serve {folder}` serves it again)", flush=True)
  if (getenv("VIZ_BROWSER", 1) if browser is None else browser) and _has_display(): webbrowser.open(url)
  with server:
    try: server.serve_forever()
    except KeyboardInterrupt: pass

def show(rec: Recorder, port: int | None = None, browser: bool | None = None):
  """Write the page of what `rec` recorded into a new temporary folder and serve it (blocks until Ctrl-C)."""
  if not rec.realizes:
    print("VIZ: no realize recorded")
    return
  n = len(rec.realizes)
  print(f"VIZ: {n} realize{'s' * (n != 1)} recorded" + (f" ({rec.skipped} more past VIZ_MAX_REALIZES={rec.max_realizes})" if rec.skipped else "")
        + f"; lowering their {len(rec.kernels)} kernels again, pass by pass", flush=True)
  folder = tempfile.mkdtemp(prefix="tinyweb-viz-")
  write_site(rec.data(), folder)
  serve(folder, port, browser)

# ---- VIZ=1: the whole process (tinyweb/__init__.py calls start), shown at exit
_process: tuple[Recorder, contextlib.ExitStack] | None = None

def start():
  """Record every realize of this process from now on, and show them when it exits."""
  global _process
  if _process is not None: return
  page_dir()   # (refused now, not after the run, if there is no page to show it on)
  stack = contextlib.ExitStack()
  _process = (stack.enter_context(capture()), stack)
  atexit.register(finish)

def finish(port: int | None = None, browser: bool | None = None):
  """Stop recording the process (see start) and show what was recorded."""
  global _process
  if _process is None: return
  (rec, stack), _process = _process, None
  atexit.unregister(finish)
  stack.close()
  show(rec, port, browser)

def main(argv: list[str] | None = None) -> int:
  p = argparse.ArgumentParser(prog="python -m tinyweb.viz", description="Run a Python script and show what each of its "
                              "realizes did (tensor graph, schedule, kernels pass by pass, source) as a local web page.")
  p.add_argument("--port", type=int, help="port to serve the page on (default $VIZ_PORT or 8765; 0: any free port)")
  p.add_argument("--no-browser", action="store_true", help="do not open a browser (also VIZ_BROWSER=0)")
  p.add_argument("script", help="the script to run, as `python script.py` would")
  p.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
  args = p.parse_args(argv)
  sys.argv = [args.script, *args.args]
  sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))   # (as cProfile does)
  try: start()
  except VizPageMissing as e:
    print(e, file=sys.stderr)
    return 1
  code = 0
  try: runpy.run_path(args.script, run_name="__main__")
  except SystemExit as e: code = e.code
  except BaseException:   # (shown too: what ran until the error)
    traceback.print_exc()
    code = 1
  finish(args.port, False if args.no_browser else None)
  return code

if __name__ == "__main__":
  from tinyweb.viz import main as imported_main   # (the imported module's: with VIZ=1 too, one recording, not two)
  sys.exit(imported_main())
