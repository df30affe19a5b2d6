"""The VIZ page (web/viz.ts, tinyweb/viz.py; issue 21) in Chromium: a realize recorded natively on the CPU, its page
written and served, then read as a user would: the kernels in the sidebar, a kernel's source and passes (real clicks),
the tensor graph. And the two ways to start it, `python -m tinyweb.viz script.py` and VIZ=1, serving until Ctrl-C."""
import json, os, re, signal, subprocess, sys, threading, time, urllib.request
import numpy as np
import pytest
from browser_harness import ROOT
from tinyweb import Tensor
import tinyweb.viz as viz
from tinyweb.codegen.lower import PASSES
from tinyweb.engine import _kernel_cache, kernel_key
from tinyweb.schedule import create_schedule, apply_realized
from tinyweb.serve import StaticServer
from tinyweb.uop import Ops

@pytest.fixture(scope="module")
def recorded(site, tmp_path_factory):
  """(served page URL, the recorded data, the schedule made on its own, the target) of one realize on the CPU. (`site`
  builds the page into tinyweb/viz_page.)"""
  rng = np.random.default_rng(0)
  a, b, c = [Tensor(rng.random(s, dtype=np.float32), device="CPU").realize() for s in [(8, 16), (16, 4), (8, 4)]]
  out = ((a @ b).relu() + c).softmax(1)
  target = apply_realized(out.uop)
  items, _, _ = create_schedule([target])
  with viz.capture() as rec: out.realize()
  data = rec.data()
  folder = tmp_path_factory.mktemp("viz")
  viz.write_site(data, folder)
  server = StaticServer(folder, port=0, quiet=True)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  yield server.url + "viz.html", data, [it for it in items if it.kind == "kernel"], target
  server.shutdown()
  server.server_close()

@pytest.fixture
def viz_page(chromium, recorded):
  page = chromium.new_context(viewport={"width": 1200, "height": 800}).new_page()
  errors: list[str] = []
  page.on("pageerror", lambda e: errors.append(str(e)))
  page.goto(recorded[0])
  page.wait_for_selector("#graph")
  page.wait_for_selector("nav a.item")   # (the sidebar lists a realize's items once it is open)
  yield page
  page.context.close()
  assert errors == []

def test_the_sidebar_and_the_schedule_list_the_kernels_that_ran(viz_page, recorded):
  _, data, kernels, _ = recorded
  names = [_kernel_cache[kernel_key("CPU", it.ast)].program.name for it in kernels]   # what the engine compiled
  assert len(names) > 1
  assert viz_page.locator("nav a.item.kernel").all_text_contents() == names
  assert [row.locator("td").nth(1).text_content() for row in viz_page.locator("#schedule tbody tr").all()] == names
  assert viz_page.text_content("header #summary").startswith(f"1 realize, {len(names)} kernel launches")

def test_a_kernel_shows_its_source_and_each_pass(viz_page, recorded):
  _, data, kernels, _ = recorded
  compiled = _kernel_cache[kernel_key("CPU", kernels[1].ast)]
  viz_page.locator("nav a.item.kernel").nth(1).click()
  viz_page.wait_for_selector("#source")
  assert viz_page.text_content("h2").startswith(compiled.program.name)
  assert viz_page.text_content("#source") == compiled.src
  buttons = viz_page.locator(".passes button")
  assert [b.get_attribute("data-pass") for b in buttons.all()] == [name for name, _ in PASSES]
  assert viz_page.get_attribute("#listing", "data-pass") == "program"   # (the last pass first)
  (k,) = [k for k in data["kernels"] if k["name"] == compiled.program.name]
  listing = {p["name"]: p["listing"] for p in k["passes"]}
  viz_page.click(".passes button[data-pass=lowering]")
  viz_page.wait_for_selector("#listing[data-pass=lowering]")
  lines = viz_page.locator("#listing .line:not(.del)").all_text_contents()
  assert lines == listing["lowering"].split("\n")
  # shown as a diff with the previous pass (stores): without the added lines, that pass's listing; every new line added
  assert viz_page.locator("#listing .line:not(.add)").all_text_contents() == listing["stores"].split("\n")
  assert set(lines) - set(listing["stores"].split("\n")) <= set(viz_page.locator("#listing .line.add").all_text_contents())
  viz_page.uncheck("#diff")
  viz_page.wait_for_function("document.querySelector('#listing') && !document.querySelector('#listing .line.del')")
  assert viz_page.locator("#listing .line").all_text_contents() == listing["lowering"].split("\n")

def test_the_tensor_graph_has_a_node_per_uop(viz_page, recorded):
  *_, target = recorded
  graph = [u for u in target.toposort() if u.op is not Ops.DEVICE]
  assert viz_page.locator("svg#graph g.node").count() == len(graph)
  assert viz_page.locator("svg#graph path").count() == sum(len([s for s in u.src if s.op is not Ops.DEVICE]) for u in graph)
  assert viz_page.locator("svg#graph g.node.target").count() == 1
  first_words = viz_page.evaluate("Array.from(document.querySelectorAll('svg#graph g.node'), g => g.querySelector('text').textContent.split(' ')[0])")
  assert first_words == [u.op.name for u in graph]

SCRIPT = """import sys
from tinyweb import Tensor, GlobalCounters
x = Tensor([1.0, 2.0, 3.0], device="CPU").realize()
(x.softmax() * float(sys.argv[1])).realize()
print("kernels", GlobalCounters.kernel_count, flush=True)
"""

def served(cmd: list[str], env: dict) -> tuple[dict, int]:
  """Run `cmd` until it serves its page; (its viz.json, the kernels its script reported), then Ctrl-C and its exit code."""
  p = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "VIZ_PORT": "0", "VIZ_BROWSER": "0", **env},
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  out, deadline = [], time.monotonic() + 120
  try:
    while time.monotonic() < deadline and (line := p.stdout.readline()):
      out.append(line)
      if (m := re.match(r"VIZ: (http://\S+)viz\.html", line)):
        with urllib.request.urlopen(m[1] + "viz.json") as r: data = json.load(r)
        with urllib.request.urlopen(m[1] + "viz.html") as r: assert b"<title>tinyweb VIZ</title>" in r.read()
        kernels = int(next(re.match(r"kernels (\d+)", l)[1] for l in out if l.startswith("kernels")))
        p.send_signal(signal.SIGINT)
        assert p.wait(60) == 0, "".join(out) + p.stdout.read()
        return data, kernels
    raise AssertionError("no page served:\n" + "".join(out))
  finally:
    if p.poll() is None: p.kill()

@pytest.mark.parametrize("how", ["module", "env"])
def test_a_script_run_with_viz_serves_its_page_until_ctrl_c(site, tmp_path, how):
  (tmp_path / "script.py").write_text(SCRIPT)
  cmd, env = ([sys.executable, "-m", "tinyweb.viz", str(tmp_path / "script.py"), "3"], {}) if how == "module" else \
             ([sys.executable, str(tmp_path / "script.py"), "3"], {"VIZ": "1"})
  data, kernels = served(cmd, env)
  assert len(data["realizes"]) == 1 and sum(it["kind"] == "kernel" for it in data["realizes"][0]["items"]) == kernels > 0
