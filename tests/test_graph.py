"""GRAPH=1 / Context(GRAPH=1): each realize's schedule written as Graphviz DOT (and SVG where `dot` is installed): one
cluster per kernel with a node per op and an edge per source, buffers between kernels, copies as nodes."""
import os, re, shutil, subprocess, sys, pathlib
import numpy as np
import pytest
from tinyweb import Tensor, Context, GlobalCounters

REPO = pathlib.Path(__file__).resolve().parents[1]
NODE = re.compile(r'^\s*(\w+) \[(.*)\];$')
EDGE = re.compile(r'^\s*(\w+) -> (\w+);$')

def parse_dot(text: str):
  """(nodes {id: label}, edges [(a, b)], clusters {name: [node ids]}) of the DOT we write, refusing any other line."""
  nodes, edges, clusters, current = {}, [], {}, None
  lines = text.strip().split("\n")
  assert re.fullmatch(r'digraph "realize \d+" \{', lines[0]) and lines[-1] == "}"
  for line in lines[1:-1]:
    if (m := re.fullmatch(r"\s*subgraph (cluster_\d+) \{", line)): current = clusters.setdefault(m[1], [])
    elif line.strip() == "}": current = None
    elif line.strip().startswith(("node [", "label=")): continue
    elif (m := EDGE.match(line)): edges.append((m[1], m[2]))
    elif (m := NODE.match(line)):
      label = re.search(r'label="((?:[^"\\]|\\.)*)"', m[2])[1]
      nodes[m[1]] = label
      if current is not None: current.append(m[1])
    else: raise AssertionError(f"not a line of our DOT: {line!r}")
  assert all(a in nodes and b in nodes for a, b in edges), "an edge names an undeclared node"
  return nodes, edges, clusters

def realize_with_graph(tmp_path, monkeypatch, capsys, fn):
  monkeypatch.setenv("GRAPHPATH", str(tmp_path / "g"))
  with Context(GRAPH=1): out = fn()
  printed = capsys.readouterr().out
  paths = re.findall(r"GRAPH: realize \d+ \((\d+) kernels, (\d+) copies\) written to (\S+\.dot)", printed)
  assert paths, printed
  return out, paths

def test_graph_of_a_fused_schedule(device, tmp_path, monkeypatch, capsys):
  a, b = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3), device=device).realize(), Tensor(np.ones((3, 2), np.float32), device=device).realize()
  GlobalCounters.reset()
  out, paths = realize_with_graph(tmp_path, monkeypatch, capsys, lambda: ((a @ b).relu() + 1).sum(1).realize())
  assert len(paths) == 1 and int(paths[0][0]) == GlobalCounters.kernel_count == 1 and paths[0][1] == "0"
  np.testing.assert_allclose(out.numpy(), [8.0, 26.0])
  nodes, edges, clusters = parse_dot(pathlib.Path(paths[0][2]).read_text())
  (members,) = clusters.values()
  ops = [nodes[n].split("\\n")[0].split(" ")[0] for n in members]
  assert {"MUL", "REDUCE_AXIS", "ADD", "STORE", "CONST"} <= set(ops) and ops.count("REDUCE_AXIS") == 2   # matmul's sum, then sum(1)
  buffers = [n for n in nodes if n not in members]
  assert sorted(nodes[n] for n in buffers) == sorted([f"{device} float32[6]", f"{device} float32[6]", f"{device} float32[2]"])
  into = {n: [a for a, b in edges if b == n] for n in nodes}
  mul = next(n for n in members if nodes[n].startswith("MUL"))
  assert len(into[mul]) == 2                                         # a binary op: an edge from each source
  store = next(n for n in members if nodes[n] == "STORE")
  assert [b for a, b in edges if a == store] == [next(n for n in buffers if nodes[n].endswith("[2]"))]   # the store writes the output
  assert all(any(a == buf for a, _ in edges) for buf in buffers if not nodes[buf].endswith("[2]"))    # the inputs are read

def test_graph_of_several_kernels_and_a_copy(tmp_path, monkeypatch, capsys):
  x = Tensor([1.0, 2.0, 3.0], device="CPU").realize()
  out, paths = realize_with_graph(tmp_path, monkeypatch, capsys, lambda: x.softmax().to("PYTHON").realize())
  (kernels, copies, path), = paths
  assert int(copies) == 1 and int(kernels) >= 2
  nodes, edges, clusters = parse_dot(pathlib.Path(path).read_text())
  assert len(clusters) == int(kernels)
  copy = next(n for n, label in nodes.items() if label == "COPY CPU -> PYTHON")
  assert [nodes[a] for a, b in edges if b == copy] == ["CPU float32[3]"] and [nodes[b] for a, b in edges if a == copy] == ["PYTHON float32[3]"]
  # kernels are chained through buffers: some buffer is written by one cluster's store and read by another cluster
  owner = {n: c for c, ns in clusters.items() for n in ns}
  written = {b: owner[a] for a, b in edges if a in owner and b not in owner}
  assert any(a in written and b in owner and owner[b] != written[a] for a, b in edges)
  np.testing.assert_allclose(out.numpy(), np.exp([1, 2, 3]) / np.exp([1, 2, 3]).sum(), rtol=1e-6)

def test_no_graph_by_default(tmp_path, monkeypatch, capsys):
  monkeypatch.setenv("GRAPHPATH", str(tmp_path / "g"))
  (Tensor([1.0, 2.0]) * 2).realize()
  assert "GRAPH" not in capsys.readouterr().out and not list(tmp_path.iterdir())

SCRIPT = "from tinyweb import Tensor\nprint((Tensor([1.0, 2.0]) + Tensor([3.0, 4.0])).exp().sum().item())"

def test_graph_env_in_a_process(tmp_path):
  env = {**os.environ, "GRAPH": "1", "GRAPHPATH": str(tmp_path / "run")}
  out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
  assert out.returncode == 0, out.stderr
  paths = re.findall(r"written to (\S+\.dot)", out.stdout)
  assert paths and all(pathlib.Path(p).parent == tmp_path for p in paths)
  nodes, _, clusters = parse_dot(pathlib.Path(paths[-1]).read_text())
  assert any(label.startswith("EXP2") for label in nodes.values()) and clusters
  if shutil.which("dot"):
    assert f"and {paths[-1][:-4]}.svg" in out.stdout and "<svg" in pathlib.Path(paths[-1][:-4] + ".svg").read_text()

@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed (scripts/setup.sh installs the graphviz package)")
def test_dot_accepts_the_graph(tmp_path, monkeypatch, capsys):
  x = Tensor([[1.0, -2.0], [3.0, 4.0]]).realize()
  _, paths = realize_with_graph(tmp_path, monkeypatch, capsys, lambda: (x.T @ x).relu().mean().realize())
  done = subprocess.run(["dot", "-Tplain", paths[0][2]], capture_output=True, text=True, timeout=120)
  assert done.returncode == 0 and done.stderr == "", done.stderr
  nodes, _, _ = parse_dot(pathlib.Path(paths[0][2]).read_text())
  assert sum(line.startswith("node ") for line in done.stdout.splitlines()) == len(nodes)   # dot laid out every node
