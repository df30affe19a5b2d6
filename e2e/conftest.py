"""End-to-end tests: the built site (npm run build -> dist/) served on 127.0.0.1, driven in headless Chromium by
Playwright, with tinyweb running inside the page (Pyodide) on the browser's WebGPU (SwiftShader on machines without a GPU).

Fixtures:
- `site`: builds dist/ when its sources changed (under a lock, so xdist workers build once) and serves it on 127.0.0.1
  with tinyweb.serve (HTTP Range support); files under `site.data_dir` are served at `/e2e-data/` (tests write weights
  there); `site.server.bytes_sent` counts the bytes sent per URL path.
- `chromium`: one headless Chromium per test process (/usr/lib/chromium/chromium, never a downloaded browser).
- `page`: the playground page with tinyweb loaded (Python in its Web Worker, the default), opened once per test process
  (Pyodide's boot is the slow part; snippets run in fresh Python namespaces).
- `main_page`: the same with Python in the page itself (`loadTinyweb({worker: false})`), for what needs `tw.pyodide`
  or compares the two modes; opened when a test first asks for it.
- `browser`: `browser(code)` runs a Python snippet inside that page on its WEBGPU device and returns its last
  expression (JSON-able values). `browser.compare(code)` runs the snippet natively on the CPU device too (the reference, computed in the same
  run) and returns both results; snippets say `DEVICE` wherever a device name goes.
Measurements a test records with `record_property("measure:<name>", value)` are printed at the end of the run.
"""
from __future__ import annotations
import pytest
from browser_harness import BrowserRunner, Site, build_site, launch_chromium, missing_requirement, open_playground, serve_site

@pytest.fixture(scope="session")
def site(tmp_path_factory):
  if (why := missing_requirement()): pytest.skip(f"e2e needs {why}")
  build_site()
  data_dir = tmp_path_factory.mktemp("e2e-data")
  server = serve_site(data_dir)
  yield Site(server, data_dir)
  server.shutdown()
  server.server_close()

@pytest.fixture(scope="session")
def playwright_instance():
  if (why := missing_requirement()): pytest.skip(f"e2e needs {why}")
  from playwright.sync_api import sync_playwright
  with sync_playwright() as p: yield p

@pytest.fixture(scope="session")
def chromium(playwright_instance):
  b = launch_chromium(playwright_instance)
  yield b
  b.close()

@pytest.fixture(scope="session")
def page(chromium, site):
  p, _ = open_playground(chromium, site)
  yield p
  p.context.close()

@pytest.fixture(scope="session")
def main_page(chromium, site):
  p, _ = open_playground(chromium, site, worker=False)
  yield p
  p.context.close()

@pytest.fixture(scope="session")
def browser(page): return BrowserRunner(page, "WEBGPU")

# ---------------------------------------------------------------------------------------------------------------
# measurements: recorded by tests as user properties (they travel from xdist workers), printed in the summary

_measurements: list[tuple[str, object]] = []

def pytest_runtest_logreport(report):
  if report.when == "call":
    _measurements.extend((k[len("measure:"):], v) for k, v in report.user_properties if k.startswith("measure:"))

def pytest_terminal_summary(terminalreporter):
  if _measurements:
    terminalreporter.section("browser measurements (e2e)")
    for k, v in _measurements: terminalreporter.write_line(f"{k}: {v}")
