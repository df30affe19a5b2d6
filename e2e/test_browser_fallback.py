"""Chromium without WebGPU (no --enable-unsafe-webgpu): tinyweb still loads, says why WEBGPU is unavailable and what to
do about it in this browser (not a native machine's advice), shows a notice, and Device.DEFAULT falls through to WASM
(the browser's WebAssembly engine); the pure-Python PYTHON device, the last resort, still runs when asked for."""
import pytest
from browser_harness import BrowserRunner, assert_close, launch_chromium, open_playground, run_native

@pytest.fixture(scope="module")
def no_webgpu_page(playwright_instance, site):
  b = launch_chromium(playwright_instance, webgpu=False)
  page, _ = open_playground(b, site)
  yield page
  b.close()

def test_reports_why_webgpu_is_unavailable(no_webgpu_page):
  report = no_webgpu_page.evaluate("window.tinyweb.report")
  assert report["webgpu"] is None
  assert "WEBGPU" in report["devices"] and "adapter" in report["devices"]["WEBGPU"] or "navigator.gpu" in report["devices"]["WEBGPU"]
  assert report["device"] != "WEBGPU"
  notice = no_webgpu_page.text_content("#notice")
  assert no_webgpu_page.is_visible("#notice") and "WebGPU is not available" in notice, notice
  # advice for this browser (headless Chromium: the flag), none for a native machine's (no "apt-get install clang")
  assert report["advice"] == "headless Chromium has WebGPU only when launched with --enable-unsafe-webgpu", report["advice"]
  assert notice == report["notice"] and report["advice"] in notice, notice
  assert report["devices"]["CPU"] == "a native device: not available in a browser", report["devices"]
  said = [notice, *report["devices"].values(), *no_webgpu_page.console_messages]
  assert not [s for s in said if "apt-get" in s or "install" in s], said
  assert any(m == f"tinyweb: {report['notice']}" for m in no_webgpu_page.console_messages), no_webgpu_page.console_messages
  # the page names the device it falls back to, or says that there is none
  assert no_webgpu_page.text_content("#device") == (report["device"] or f"none ({report['error']})")

def test_falls_back_to_wasm_and_python_still_runs(no_webgpu_page):
  report = no_webgpu_page.evaluate("window.tinyweb.report")
  assert report["device"] == "WASM" and report["devices"]["WASM"] == report["devices"]["PYTHON"] == "", report
  assert report["notice"].endswith("running on WASM instead."), report["notice"]
  code = """
from tinyweb import Tensor
a = Tensor([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]], device=DEVICE)
[(a @ a.T).tolist(), a.softmax(-1).tolist(), a.relu().sum(0).tolist(), a.max().item()]
"""
  want = run_native(code, "CPU")
  for device in ("WASM", "PYTHON"): assert_close(BrowserRunner(no_webgpu_page)(code, device=device), want, atol=1e-5)
