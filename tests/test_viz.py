"""VIZ (tinyweb/viz.py, issue 21): what a realize did, recorded for the page: the targets' graph, the schedule and its
times, each kernel after each lowering pass and its source. The page itself is tested in e2e/test_browser_viz.py."""
import json
import numpy as np
import pytest
from tinyweb import Tensor, GlobalCounters
import tinyweb.viz as viz
from tinyweb import engine
from tinyweb.engine import _kernel_cache, kernel_key
from tinyweb.schedule import create_schedule, apply_realized
from tinyweb.codegen.lower import PASSES
from tinyweb.uop import Ops

def inputs(device="CPU"):
  rng = np.random.default_rng(0)
  return [Tensor(rng.random(s, dtype=np.float32), device=device).realize() for s in [(8, 16), (16, 4), (8, 4)]]

def test_capture_records_the_schedule_each_kernel_pass_by_pass_and_the_compiled_source(monkeypatch):
  monkeypatch.setattr(engine, "_lowered_path", lambda device, ast: None)   # (lowered here, not read back from disk: with uops)
  a, b, c = inputs()
  out = ((a @ b).relu() + c).softmax(1)   # (several kernels)
  target = apply_realized(out.uop)
  items, _, _ = create_schedule([target])   # the same schedule, made on its own
  want = [it for it in items if it.kind == "kernel"]
  for it in want: _kernel_cache.pop(kernel_key("CPU", it.ast), None)   # (built in the capture, whatever ran before)
  GlobalCounters.reset()
  with viz.capture() as rec: out.realize()
  data = rec.data()
  (r,) = data["realizes"]
  got = [it for it in r["items"] if it["kind"] == "kernel"]
  assert len(got) == len(want) == GlobalCounters.kernel_count > 1 and len(r["items"]) == len(items)
  for g, w in zip(got, want):
    compiled = _kernel_cache[kernel_key("CPU", w.ast)]   # what the engine built and ran
    k = data["kernels"][g["kernel"]]
    assert g["name"] == k["name"] == compiled.program.name and k["src"] == compiled.src and k["same_source"]
    assert k["ast"] == str(w.ast)
    assert [(r["buffers"][i]["device"], r["buffers"][i]["dtype"], r["buffers"][i]["size"]) for i in g["writes"] + g["reads"]] == \
      [(buf.device, buf.dtype.name, buf.size) for buf in w.bufs]
    assert g["built"] == "now" and g["lower_s"] > 0 and g["launch_s"] > 0 and g["kernel_s"] is not None
    assert [p["name"] for p in k["passes"]] == [name for name, _ in PASSES]
    for p in k["passes"]: assert p["uops"] == len(p["listing"].split("\n")) > 0 and p["seconds"] >= 0, p["name"]
    # the last listing is the program the engine lowered, op by op
    assert [line.split()[2] for line in k["passes"][-1]["listing"].split("\n")] == [u.op.name for u in compiled.program.uops]
    # a uop keeps its name from pass to pass (the output buffer, in every listing)
    (out_line,) = [line for line in k["passes"][0]["listing"].split("\n") if "DEFINE_GLOBAL" in line and "(0, " in line]
    assert all(out_line in p["listing"].split("\n") for p in k["passes"])
  # the tensor graph: each node of the target's graph once, with its sources, and the target marked
  graph = [u for u in target.toposort() if u.op is not Ops.DEVICE]
  nodes = r["graph"]["nodes"]
  assert r["graph"]["total"] == len(nodes) == len(graph)
  assert [n["label"].split()[0] for n in nodes] == [u.op.name for u in graph]
  assert sum(len(n["src"]) for n in nodes) == sum(len([s for s in u.src if s.op is not Ops.DEVICE]) for u in graph)
  assert [n["target"] for n in nodes] == [False] * (len(nodes) - 1) + [True]
  assert json.loads(json.dumps(data)) == data   # JSON as it is

def test_copies_kernels_built_earlier_and_the_realize_cap():
  x = Tensor([1.0, 2.0, 3.0], device="CPU").realize()
  x.softmax().realize()   # (its kernels built before the capture)
  with viz.capture(max_realizes=2) as rec:
    x.softmax().to("PYTHON").realize()
    (x + 1).realize()
    (x * 3).realize()
  data = rec.data()
  assert len(data["realizes"]) == 2 and data["skipped_realizes"] == 1 and data["max_realizes"] == 2
  first = data["realizes"][0]
  (copy,) = [it for it in first["items"] if it["kind"] == "copy"]
  assert copy["name"] == "COPY CPU -> PYTHON" and copy["seconds"] >= 0
  assert [(first["buffers"][i]["device"], first["buffers"][i]["size"]) for i in copy["writes"] + copy["reads"]] == [("PYTHON", 3), ("CPU", 3)]
  assert {it["built"] for it in first["items"] if it["kind"] == "kernel"} == {"earlier"}
  # (x + 1 is new to this process; another one may have left it in the disk cache of lowered kernels)
  assert [it["built"] for it in data["realizes"][1]["items"]] in (["now"], ["disk"])

def test_a_big_graph_comes_as_its_listing(monkeypatch):
  monkeypatch.setattr(viz, "MAX_NODES", 5)
  a, b, c = inputs()
  with viz.capture() as rec: ((a @ b).relu() + c).realize()
  graph = rec.data()["realizes"][0]["graph"]
  assert "nodes" not in graph and graph["total"] > 5 and len(graph["listing"].split("\n")) == graph["total"]

def test_write_site_puts_the_page_and_its_data_in_a_folder(tmp_path, monkeypatch):
  page = tmp_path / "page"
  (page / "assets").mkdir(parents=True)
  (page / "viz.html").write_text("<!doctype html>")
  (page / "assets" / "viz.js").write_text("// the page's script")
  monkeypatch.setattr(viz, "PAGE_DIR", page)
  a, b, c = inputs()
  with viz.capture() as rec: (((a @ b) + c).exp2().sum(0)).realize()
  data = rec.data()
  html = viz.write_site(data, tmp_path / "site")
  assert html == tmp_path / "site" / "viz.html" and html.read_text() == "<!doctype html>" and (tmp_path / "site" / "assets" / "viz.js").is_file()
  index = json.loads((tmp_path / "site" / "viz.json").read_text())
  assert index["realizes"] == data["realizes"] and index["kernels"] == [{"name": k["name"], "device": k["device"]} for k in data["kernels"]]
  assert [json.loads((tmp_path / "site" / "kernels" / f"{i}.json").read_text()) for i in range(len(data["kernels"]))] == data["kernels"]

def test_a_missing_page_says_how_to_build_it(tmp_path, monkeypatch):
  monkeypatch.setattr(viz, "PAGE_DIR", tmp_path / "viz_page")
  with pytest.raises(viz.VizPageMissing, match=r"npm run build"): viz.write_site({"kernels": []}, tmp_path / "site")
