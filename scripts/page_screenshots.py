"""The README's pictures of the model demo pages: `python scripts/page_screenshots.py [NAME ...]` writes
docs/images/NAME.png for each page of PAGES (default: all of them).

The site is built first when its sources changed (as the e2e tests build it), then the models a page runs are exported
into dist/models/ where missing (scripts/build_models.py: `npm run build:models` puts them there too), and dist/ is
served on 127.0.0.1 as a static host would serve it: each page loads its models from their default place. Headless
Chromium with WebGPU (as the e2e tests launch it) takes each page to a state worth showing, in a 1000 x 700 window."""
import io, pathlib, sys, threading
from typing import Callable
ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "e2e")]
from PIL import Image
from playwright.sync_api import Page, sync_playwright
from browser_harness import DIST, build_site, launch_chromium
from build_models import build
from tinyweb.serve import StaticServer

SIZE = {"width": 1000, "height": 700}
TIMEOUT_MS = 300_000   # (a cold load compiles every kernel on the adapter: minutes on a CPU-emulated one)

def classify(page: Page, url: str):
  """The sample photo classified."""
  page.goto(url + "classify.html")
  page.click("#sample")
  page.wait_for_function("window.classifyResult || !document.querySelector('#notice').hidden", timeout=TIMEOUT_MS)
  page.mouse.move(0, 0)   # (the button not hovered)

def detect(page: Page, url: str):
  """The sample photo's detections drawn."""
  page.goto(url + "detect.html")
  page.click("#sample", timeout=TIMEOUT_MS)   # (enabled once the model is loaded)
  page.wait_for_function("window.detectResult", timeout=TIMEOUT_MS)
  page.mouse.move(0, 0)

def embed(page: Page, url: str):
  """The example sentences compared."""
  page.goto(url + "embed.html")
  page.wait_for_selector("body[data-state=ready]", timeout=TIMEOUT_MS)
  page.click("#embed")
  page.wait_for_selector("body[data-state=done]", timeout=TIMEOUT_MS)
  page.mouse.move(0, 0)

def diffuse(page: Page, url: str):
  """A map generated with the page's defaults (1 step: the model's authors' sampler)."""
  page.goto(url + "diffuse.html")
  page.wait_for_selector("body[data-state=ready]", timeout=TIMEOUT_MS)
  page.click("#generate")
  page.wait_for_selector("body[data-state=done]", timeout=TIMEOUT_MS)
  page.mouse.move(0, 0)

def generate(page: Page, url: str):
  """The default prompt continued by 20 greedy tokens (~4.5 s each on SwiftShader)."""
  page.goto(url + "generate.html")
  page.wait_for_selector("body[data-state=ready]", timeout=TIMEOUT_MS)
  page.fill("#max-tokens", "20")
  page.click("#generate")
  page.wait_for_selector("body[data-state=done]", timeout=TIMEOUT_MS)
  page.mouse.move(0, 0)

# name -> (the models it runs, fn(page, site URL) that takes it to the state shown)
PAGES: dict[str, tuple[list[str], Callable[[Page, str], None]]] = {
  "classify": (["efficientnet-lite0"], classify),
  "detect": (["yolov8s-fall"], detect),
  "embed": (["minilm"], embed),
  "diffuse": (["terrain-unet"], diffuse),
  "generate": (["gemma"], generate),
}

def main(names: list[str]):
  if unknown := set(names) - set(PAGES): sys.exit(f"page_screenshots: no page {', '.join(sorted(unknown))} (the pages: {', '.join(PAGES)})")
  build_site()
  for model in dict.fromkeys(m for n in names for m in PAGES[n][0]):
    if not (DIST / "models" / model / "manifest.json").exists() and not build(model, DIST / "models"):
      sys.exit(f"page_screenshots: {model} is not available here (above: why)")
  server = StaticServer(DIST, port=0, quiet=True)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  try:
    with sync_playwright() as p:
      browser = launch_chromium(p)
      for name in names:
        page = browser.new_page(viewport=SIZE)
        PAGES[name][1](page, server.url)
        if page.is_visible("#notice"): sys.exit(f"page_screenshots: {name}: the page says: {page.text_content('#notice')}")
        out = ROOT / "docs" / "images" / f"{name}.png"
        with Image.open(io.BytesIO(page.screenshot())) as shot:   # (256 colours: a third of the bytes, and looks the same)
          shot.convert("RGB").quantize(256, dither=Image.Dither.NONE).save(out, optimize=True)
        page.close()
        print(f"{out}: {out.stat().st_size // 1024} KiB")
      browser.close()
  finally:
    server.shutdown()
    server.server_close()

if __name__ == "__main__": main(sys.argv[1:] or list(PAGES))
