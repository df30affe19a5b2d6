"""GRAPH=1 (or `with Context(GRAPH=1):`): each realize's schedule drawn as a Graphviz graph.

One file per realize, `$GRAPHPATH_<n>.dot` (default GRAPHPATH: <tempdir>/tinyweb-graph-<pid>/realize), and an SVG beside
it where Graphviz's `dot` is installed; the paths are printed. In the graph each kernel is a box (cluster) holding the
ops of its AST, one node per op (movement ops blue, elementwise green, reductions orange, constants grey, the store
red), with an edge from each source to the op that uses it; buffers are the nodes between kernels: an edge from a
buffer to each op of a kernel that reads it, and from a kernel's store to the buffer it writes. Copies between devices
are nodes of their own."""
from __future__ import annotations
import itertools, os, shutil, subprocess, tempfile
from tinyweb.uop import UOp, Ops, MOVEMENT, ELEMENTWISE, _fmt_arg

_realizes = itertools.count(1)
_COLORS = {Ops.REDUCE_AXIS: "#ffcc80", Ops.CONST: "#eeeeee", Ops.STORE: "#ef9a9a", **{op: "#bbdefb" for op in MOVEMENT},
           **{op: "#c8e6c9" for op in ELEMENTWISE}}

def _quote(s: str) -> str: return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'

def _label(u: UOp) -> str:
  arg = f" {_fmt_arg(u)}" if u.arg is not None else ""
  return f"{u.op.name}{arg if len(arg) < 40 else arg[:37] + '...'}" + (f"\n{u.dtype.name} {u.shape}" if u.dtype is not None and u.op is not Ops.STORE else "")

def schedule_dot(items, name: str = "realize") -> str:
  """The schedule `items` (engine.run_schedule's list of ScheduleItem) as Graphviz DOT text."""
  lines = [f"digraph {_quote(name)} {{", '  node [shape=box, style="rounded,filled", fontname=monospace, fontsize=10, fillcolor=white];']
  bufs: dict[int, str] = {}
  buf_lines: list[str] = []   # (declared outside the clusters: a node declared inside one belongs to it)
  def buf(b) -> str:
    if id(b) not in bufs:
      bufs[id(b)] = f"b{len(bufs)}"
      buf_lines.append(f'  {bufs[id(b)]} [shape=cylinder, style=filled, fillcolor="#fff9c4", label={_quote(f"{b.device} {b.dtype.name}[{b.size}]")}];')
    return bufs[id(b)]
  for k, it in enumerate(items):
    if it.kind == "copy":
      dst, src = it.bufs
      lines += [f'  c{k} [shape=cds, fillcolor="#e1bee7", label={_quote(f"COPY {src.device} -> {dst.device}")}];',
                f"  {buf(src)} -> c{k};", f"  c{k} -> {buf(dst)};"]
      continue
    lines.append(f"  subgraph cluster_{k} {{")
    lines.append(f"    label={_quote(f'kernel {k} ({it.bufs[0].device})')};")
    nodes, edges = {}, []
    for u in it.ast.toposort():
      if u.op in (Ops.SINK, Ops.DEFINE_GLOBAL): continue
      nodes[u] = f"k{k}_{len(nodes)}"
      lines.append(f"    {nodes[u]} [fillcolor={_quote(_COLORS.get(u.op, 'white'))}, label={_quote(_label(u))}];")
      for s in u.src:
        if s.op is not Ops.DEFINE_GLOBAL: edges.append(f"  {nodes[s]} -> {nodes[u]};")
        elif u.op is Ops.STORE and s is u.src[0]: edges.append(f"  {nodes[u]} -> {buf(it.bufs[s.arg[0]])};")
        else: edges.append(f"  {buf(it.bufs[s.arg[0]])} -> {nodes[u]};")
    lines.append("  }")
    lines += edges
  return "\n".join(lines + buf_lines + ["}"]) + "\n"

def write_graph(items) -> str:
  """Write the schedule's graph as `$GRAPHPATH_<n>.dot` (and .svg where `dot` is installed), print the paths and
  return the .dot path."""
  n = next(_realizes)
  base = os.getenv("GRAPHPATH") or os.path.join(tempfile.gettempdir(), f"tinyweb-graph-{os.getpid()}", "realize")
  path = f"{base}_{n:04d}.dot"
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f: f.write(schedule_dot(items, f"realize {n}"))
  svg = ""
  if (dot := shutil.which("dot")) is not None:
    done = subprocess.run([dot, "-Tsvg", path, "-o", path[:-4] + ".svg"], capture_output=True, text=True, timeout=120)
    svg = f" and {path[:-4]}.svg" if done.returncode == 0 else f" (dot failed: {done.stderr.strip()[:200]})"
  kernels = sum(it.kind == "kernel" for it in items)
  print(f"GRAPH: realize {n} ({kernels} kernels, {len(items) - kernels} copies) written to {path}{svg}")
  return path
