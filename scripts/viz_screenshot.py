"""The README's picture of the VIZ page: `python scripts/viz_screenshot.py [OUT.png]` (default docs/images/viz.png).

A small MLP's forward pass is recorded on the CPU (tinyweb.viz.capture), its page written and served, and headless
Chromium (as the e2e tests run it; the page is built first if its sources changed) shows the kernel of the second
layer's product after its `simplify` pass (as a diff with the pass before), next to its C source, in a 1200x800 window."""
import os, pathlib, sys, tempfile, threading
ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "e2e")]
import numpy as np
from playwright.sync_api import sync_playwright
from browser_harness import build_site, launch_chromium
from tinyweb import Tensor
import tinyweb.viz as viz
from tinyweb.serve import StaticServer

def main(out: pathlib.Path):
  build_site()
  with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as folder:
    os.environ["TINYWEB_CACHE_DIR"] = cache   # (kernels lowered and compiled in this run: the page shows their times)
    rng = np.random.default_rng(0)
    x, w1, b1, w2 = [Tensor(rng.standard_normal(s, dtype=np.float32), device="CPU").realize() for s in [(8, 16), (16, 32), (32,), (32, 10)]]
    with viz.capture() as rec: ((x @ w1 + b1).relu() @ w2).softmax(-1).realize()
    viz.write_site(rec.data(), folder)
    server = StaticServer(folder, port=0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with sync_playwright() as p:
      browser = launch_chromium(p, webgpu=False)
      page = browser.new_page(viewport={"width": 1200, "height": 800})
      page.goto(server.url + "viz.html#r=0&i=1&p=simplify")
      page.wait_for_selector("#listing[data-pass=simplify]")
      out.parent.mkdir(parents=True, exist_ok=True)
      page.screenshot(path=str(out))
      browser.close()
    server.shutdown()
    server.server_close()
  print(f"{out}: {out.stat().st_size // 1024} KiB")

if __name__ == "__main__": main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "images" / "viz.png")
