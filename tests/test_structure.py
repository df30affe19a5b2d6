"""The package's structure (issue 13). Its import graph has no cycle: every `import` of a tinyweb module in tinyweb/ and
backends/, including imports inside functions (only `if TYPE_CHECKING:` blocks, which never run, are left out), is an
edge; a cycle is a strongly connected component of more than one module (a module importing from its own package's
`__init__` while that `__init__` imports it counts too). Importing it changes nothing in the process; one method owns
the write counters that cached values are checked against."""
import ast, os, pathlib, re, subprocess, sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

def package_modules() -> dict[str, pathlib.Path]:
  mods = {}
  for path in (ROOT / "tinyweb").rglob("*.py"):
    if "backends" in path.relative_to(ROOT / "tinyweb").parts: continue   # (the checkout's backends/, below)
    parts = path.relative_to(ROOT).with_suffix("").parts
    mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
  for path in (ROOT / "backends").glob("*.py"):
    mods["tinyweb.backends" + ("" if path.stem == "__init__" else "." + path.stem)] = path
  return mods

def imported_modules(name: str, path: pathlib.Path, mods: dict) -> set[str]:
  tree = ast.parse(path.read_text())
  never_run = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
               for n in ast.walk(node)}
  package = name if path.name == "__init__.py" else name.rpartition(".")[0]
  out = set()
  for node in ast.walk(tree):
    if id(node) in never_run: continue
    if isinstance(node, ast.Import): out |= {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom):
      base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([node.module] if node.module else [])) \
        if node.level else node.module
      out.add(base)
      out |= {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods}   # `from pkg import submodule`
  return {m for m in out if m in mods and m != name}

def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
  index, low, on_stack, stack, found, counter = {}, {}, set(), [], [], 0
  for root in graph:
    if root in index: continue
    work = [(root, iter(sorted(graph[root])))]
    index[root] = low[root] = counter; counter += 1; stack.append(root); on_stack.add(root)
    while work:
      v, children = work[-1]
      w = next(children, None)
      if w is not None:
        if w not in index:
          index[w] = low[w] = counter; counter += 1; stack.append(w); on_stack.add(w)
          work.append((w, iter(sorted(graph[w]))))
        elif w in on_stack: low[v] = min(low[v], index[w])
        continue
      work.pop()
      if work: low[work[-1][0]] = min(low[work[-1][0]], low[v])
      if low[v] == index[v]:
        component = []
        while True:
          w = stack.pop(); on_stack.discard(w); component.append(w)
          if w == v: break
        if len(component) > 1: found.append(sorted(component))
  return found

def test_the_cycle_finder_finds_a_cycle():
  assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
  assert cycles({"a": {"b"}, "b": set()}) == []

def test_no_import_cycles():
  mods = package_modules()
  assert "tinyweb.codegen.lower" in mods and "tinyweb.backends.cpu" in mods
  graph = {name: imported_modules(name, path, mods) for name, path in mods.items()}
  assert "tinyweb.codegen.lowering" in graph["tinyweb.codegen.lower"]   # (imports are found)
  assert cycles(graph) == [], f"import cycles: {cycles(graph)}"

def test_importing_and_using_tinyweb_leaves_the_process_as_it_was():
  # nothing but definitions at import time: the recursion limit is raised only while a deep graph is walked
  code = ("import sys, threading; limit, threads = sys.getrecursionlimit(), threading.active_count()\n"
          "import tinyweb, tinyweb.nn, tinyweb.nn.state, tinyweb.search\n"
          "assert sys.getrecursionlimit() == limit and threading.active_count() == threads, 'import'\n"
          "from tinyweb import Tensor\n"
          "x = Tensor([1.0, 2.0], device='PYTHON', requires_grad=True)\n"
          "y = x\n"
          "for i in range(3000): y = y * 1.0001 if i % 2 else y + x\n"
          "ref, dref = 1.0, 1.0\n"
          "for i in range(3000): ref, dref = (ref * 1.0001, dref * 1.0001) if i % 2 else (ref + 1.0, dref + 1.0)\n"
          "y.sum().backward()\n"
          "assert abs(float(y.numpy()[0]) / ref - 1) < 1e-4 and abs(float(x.grad.numpy()[0]) / dref - 1) < 1e-4, (y.numpy(), ref)\n"
          "assert sys.getrecursionlimit() == limit, 'use'\n")
  r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert r.returncode == 0, r.stderr[-2000:]

def test_buffer_write_counters_have_one_owner():
  # RealizedCache trusts Buffer.writes/stores: every write path calls Buffer.mark_written instead of counting by hand
  bumps = [f"{path.relative_to(ROOT)}:{i}" for path in package_modules().values()
           for i, line in enumerate(path.read_text().splitlines(), 1)
           if re.search(r"\.(writes|stores)\b\s*(\+=|=[^=])", line) and not (path.name == "device.py" and "self." in line)]
  assert bumps == [], f"write counters changed outside Buffer.mark_written: {bumps}"

def test_debug5_prints_each_lowering_pass(capsys):
  from tinyweb import Tensor, Context
  from tinyweb.codegen.lower import PASSES
  with Context(DEBUG=5): (Tensor.ones(4, 8, device="PYTHON") * 3).sum(1).realize()
  lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.strip().startswith("lower pass")]
  names = [name for name, _ in PASSES]
  assert lines and [line[2] for line in lines] == names * (len(lines) // len(names))   # (one list per kernel lowered)
  assert all(int(line[3]) > 0 and line[4] == "uops" and float(line[5]) >= 0 for line in lines)

def test_a_checkout_runs_its_own_runtimes_without_installing(tmp_path):
  # a copy of the source tree (the package and the top-level backends/ folder) in another place, run there with no
  # install and no PYTHONPATH: `python -m tinyweb.devices` finds its devices, and every tinyweb module imported, the
  # runtimes included, is the copy's (not this checkout's editable install)
  import shutil
  shutil.copytree(ROOT / "tinyweb", tmp_path / "tinyweb", ignore=shutil.ignore_patterns("backends", "__pycache__"))
  shutil.copytree(ROOT / "backends", tmp_path / "backends", ignore=shutil.ignore_patterns("__pycache__"))
  code = ("import runpy, sys; runpy.run_module('tinyweb.devices', run_name='__main__')\n"
          "print('MODULES', *sorted(m.__file__ for n, m in sys.modules.items() if n.startswith('tinyweb') and getattr(m, '__file__', None)))")
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
  assert r.returncode == 0, r.stderr[-2000:]
  assert re.search(r"^CPU +available", r.stdout, re.M) and re.search(r"^PYTHON +available", r.stdout, re.M), r.stdout
  files = r.stdout.split("MODULES", 1)[1].split()
  assert any(f.endswith(os.path.join("backends", "cpu.py")) for f in files), files
  assert all(pathlib.Path(f).resolve().is_relative_to(tmp_path.resolve()) for f in files), files

def module_level_caches() -> set[str]:
  """Module-level names that hold a cache: assignments to a name with "cache" in it, and functools.cache'd functions"""
  out = set()
  for name, path in package_modules().items():
    for node in ast.parse(path.read_text()).body:
      if isinstance(node, (ast.Assign, ast.AnnAssign)):
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
          if isinstance(t, ast.Name) and "cache" in t.id.lower() and not t.id.isupper(): out.add(f"{name}.{t.id}")
      elif isinstance(node, ast.FunctionDef) and any("cache" in ast.unparse(d) for d in node.decorator_list):
        out.add(f"{name}:{node.name}")
  return out

def test_every_cache_is_listed_and_clear_empties_them():
  import importlib
  import numpy as np
  from tinyweb import Tensor, caches
  found = module_level_caches()
  # (a memoized function is listed once its module is imported: the module of each one found is imported first)
  for owner in found: importlib.import_module(owner.split(":")[0] if ":" in owner else owner.rsplit(".", 1)[0])
  listed = {c.owner for c in caches.caches()} | {"tinyweb.backends.cpu:thread_pool"}   # (not a cache: see caches.py)
  assert "tinyweb.engine._kernel_cache" in found and "tinyweb.helpers:getenv" in found   # (the scan finds them)
  assert found <= listed, f"caches missing from tinyweb/caches.py: {sorted(found - listed)}"
  a = np.arange(12, dtype=np.float32).reshape(3, 4)
  def work(): return ((Tensor(a, device="PYTHON") * 2.5).sum(1) + 1).numpy()
  first = work()
  sizes = {c.name: c.size() for c in caches.caches() if not c.on_disk}
  assert all(sizes[n] > 0 for n in ("constants", "schedules", "kernels", "binaries", "rewrite memos")), sizes
  caches.clear()
  assert {c.name: c.size() for c in caches.caches() if not c.on_disk and c.size()} == {}
  np.testing.assert_array_equal(work(), first)
  np.testing.assert_allclose(first, (a * 2.5).sum(1) + 1)
