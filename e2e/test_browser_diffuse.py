"""The diffuse page (web/diffuse.html, issue 23) in Chromium: adaptive-terrain-diffusion's UNet exported by
scripts/build_models.py (real weights), a map generated as a user would (steps, seed, difficulty, Generate), each step's
noise and denoised map read back and compared with the same sampler written here in numpy around onnxruntime's CPU
session of the ONNX file (the reference); the page's noise against SplitMix32 + Box-Muller written here, its sigma
schedule against Karras et al.'s formula; without WebGPU the page runs the model's WASM export (one step, against
onnxruntime too); what the page says when the adapter lacks a limit; a screenshot of the result
(browser_harness.checked_screenshot)."""
from __future__ import annotations
import json
import numpy as np
import pytest
from browser_harness import checked_screenshot, launch_chromium, load_testdata, open_model_page, page_model

LOAD_TIMEOUT_MS = 300_000    # (weights, then every kernel compiled by SwiftShader on a busy 2-core machine)
STEP_TIMEOUT_MS = 120_000    # (one step: ~23 s on SwiftShader)
STEPS, SEED, DIFFICULTY = 2, 1234, 80
SIGMA_MIN, SIGMA_MAX, RHO = 0.002, 80.0, 7.0   # (adaptive-terrain-diffusion's terrain_diffusion/generator.py)

EXPORT_SECONDS: list[float] = []

@pytest.fixture(scope="session")
def terrain_unet(site):
  """The export's folder (browser_harness.page_model), served at /e2e-data/models/terrain-unet/."""
  _, seconds = page_model(site, "terrain-unet")
  if seconds is not None: EXPORT_SECONDS.append(seconds)
  return site.data_dir / "models" / "terrain-unet"

def _open(chromium, site, model: str = "/e2e-data/models/terrain-unet/"):
  return open_model_page(chromium, f"{site.url}diffuse.html?model={model}", LOAD_TIMEOUT_MS)

def karras(steps: int) -> np.ndarray:
  """Karras et al. (2022) eq. 5 with N = steps + 1 points from SIGMA_MAX to SIGMA_MIN, the last (SIGMA_MIN) dropped."""
  i, n = np.arange(steps + 1, dtype=np.float64), steps + 1
  return ((SIGMA_MAX ** (1 / RHO) + i / (n - 1) * (SIGMA_MIN ** (1 / RHO) - SIGMA_MAX ** (1 / RHO))) ** RHO)[:-1]

def normals(seed: int, n: int) -> np.ndarray:
  """SplitMix32 (golden-ratio Weyl sequence, MurmurHash3's finalizer) and Box-Muller, as web/diffuse_sampler.ts documents."""
  state = (seed + 0x9E3779B9 * np.arange(1, n + 1, dtype=np.uint64)) & 0xFFFFFFFF   # (n is even: pairs)
  z = state.astype(np.uint64)
  z = ((z ^ (z >> 16)) * 0x85EBCA6B) & 0xFFFFFFFF
  z = ((z ^ (z >> 13)) * 0xC2B2AE35) & 0xFFFFFFFF
  u = (z ^ (z >> 16)).astype(np.float64)
  r, angle = np.sqrt(-2 * np.log((u[0::2] + 1) / 2 ** 32)), 2 * np.pi * u[1::2] / 2 ** 32
  return np.stack([r * np.cos(angle), r * np.sin(angle)], 1).reshape(-1).astype(np.float32)

def metres(denoised: np.ndarray) -> np.ndarray:
  """The model's -1..1 as heights above the lowest point (the authors' TerrainGenerator._from_model_space, zero floor)."""
  unit = np.clip((denoised + 1) / 2, 0, 1)
  h = np.clip(0.1 * np.sinh(unit * np.arcsinh(22.16864013671875 / 0.1)), 0, 22.16864013671875)
  return h - h.min()

@pytest.fixture(scope="module")
def diffuse_page(chromium, site, terrain_unet):
  page = _open(chromium, site)
  assert page.get_attribute("body", "data-state") == "ready", page.text_content("#notice") + "\n" + "\n".join(page.console_messages)
  yield page
  page.context.close()

def _generate(page, n_steps: int) -> tuple[list[dict], np.ndarray, list[float]]:
  """A map of n_steps generated on the page (SEED, DIFFICULTY) and checked against the sampler in numpy around
  onnxruntime, step by step (within 1e-3 of the range): the page's steps, the last denoised map and each step's error."""
  for control, value in [("#steps", n_steps), ("#difficulty", DIFFICULTY)]:   # (range inputs, moved as a user would)
    page.eval_on_selector(control, "(e, v) => { e.value = v; e.dispatchEvent(new Event('input')); }", str(value))
  page.fill("#seed", str(SEED))
  page.click("#generate")
  page.wait_for_selector("body[data-state=done], body[data-state=error]", timeout=LOAD_TIMEOUT_MS + n_steps * STEP_TIMEOUT_MS)
  assert page.get_attribute("body", "data-state") == "done", page.text_content("#status")
  steps = page.evaluate("""() => window.diffuseDemo.result.steps.map((s) =>
    ({sigma: s.sigma, ms: s.ms, noise: Array.from(s.noise), denoised: Array.from(s.denoised)}))""")
  assert len(steps) == n_steps and page.text_content("#difficulty-value") == str(DIFFICULTY)
  np.testing.assert_allclose([s["sigma"] for s in steps], karras(n_steps), rtol=1e-12)
  noise = [np.array(s["noise"], np.float32).reshape(1, 1, 128, 128) for s in steps]
  # the page's noise is the documented generator's, from the seed on, step after step
  np.testing.assert_allclose(np.concatenate([z.ravel() for z in noise]), normals(SEED, n_steps * 128 * 128), atol=2e-6)
  # the reference: the sampler in numpy, onnxruntime denoising, from the page's noise
  import onnxruntime as ort
  session = ort.InferenceSession(str(load_testdata().path("terrain_unet.onnx")), providers=["CPUExecutionProvider"])
  label = np.array([(DIFFICULTY - 1) / 99], np.float32)
  want, errors = None, []
  for s, sigma, z in zip(steps, karras(n_steps), noise):
    x = sigma * z if want is None else want + np.sqrt(sigma ** 2 - SIGMA_MIN ** 2) * z
    want = session.run(["denoised"], {"noisy": x.astype(np.float32), "sigma": np.array([sigma], np.float32), "difficulty": label})[0]
    got = np.array(s["denoised"], np.float32).reshape(want.shape)
    errors.append(np.abs(got - want).max() / np.ptp(want))
    assert errors[-1] < 1e-3, (len(errors), errors)
  return steps, want, errors

def test_the_page_generates_what_the_sampler_gives_with_onnxruntime(diffuse_page, record_property):
  page = diffuse_page   # (the first thing done once the page is ready: its first image's time is the page's own)
  steps, want, errors = _generate(page, STEPS)
  heights = np.array(page.evaluate("Array.from(window.diffuseDemo.result.heights)"), np.float32)
  want_h = metres(want[0, 0]).ravel()
  assert np.abs(heights - want_h).max() < 1e-3 * np.ptp(want_h) and np.ptp(want_h) > 0.5, (np.abs(heights - want_h).max(), np.ptp(want_h))
  assert page.locator("#thumbs canvas").count() == STEPS and page.locator("#times li").count() == STEPS
  assert page.text_content("#status").startswith(f"{STEPS} steps in ")
  adapter = page.text_content("#adapter")
  assert adapter.startswith("WebGPU: "), adapter
  ms = [s["ms"] for s in steps]
  load = page.evaluate("window.diffuseDemo.model.timings")
  record_property("measure:diffuse: export of the terrain UNet (s)", f"{EXPORT_SECONDS[0]:.0f}" if EXPORT_SECONDS else "cached")
  record_property("measure:diffuse: page open -> first image (s)", f"{page.evaluate('window.diffuseDemo.firstImageAt') / 1000:.1f}")
  record_property("measure:diffuse: load (s): manifest / device / kernels / weights / total",
                  " / ".join(f"{load[k]:.2f}" for k in ["manifest", "device", "kernels", "weights", "total"]))
  record_property("measure:diffuse: per step, 128 x 128, batch 1 (s): each", f"{' / '.join(f'{t / 1000:.1f}' for t in ms)} on {adapter[8:]}")
  record_property("measure:diffuse: max |page - onnxruntime| / range, per step", " / ".join(f"{e:.1e}" for e in errors))
  checked_screenshot(page, "diffuse")

def test_the_schedule_is_karras(diffuse_page):
  for n in [1, 2, 4, 10, 50]:
    np.testing.assert_allclose(diffuse_page.evaluate("(n) => window.diffuseDemo.sampler.sigmas(n)", n), karras(n), rtol=1e-12)
  assert diffuse_page.evaluate("window.diffuseDemo.sampler.sigmas(1)") == [SIGMA_MAX]   # (the authors' one step)
  with pytest.raises(Exception, match="steps must be a whole number >= 1"): diffuse_page.evaluate("window.diffuseDemo.sampler.sigmas(0)")

def test_the_page_says_why_it_cannot_run(chromium, site, terrain_unet):
  # an adapter without a limit the model needs: the limit, the need and what the adapter has
  folder = site.data_dir / "terrain-unet-needs-more"
  folder.mkdir()
  for f in terrain_unet.iterdir():
    if f.name != "manifest.json": (folder / f.name).symlink_to(f)
  manifest = json.loads((terrain_unet / "manifest.json").read_text())
  manifest["limits"]["maxStorageBufferBindingSize"] = 1 << 40
  (folder / "manifest.json").write_text(json.dumps(manifest))
  page = _open(chromium, site, "/e2e-data/terrain-unet-needs-more/")
  try:
    assert page.get_attribute("body", "data-state") == "error"
    notice = page.text_content("#notice")
    assert notice.startswith("The model cannot be loaded: ") and \
      f"the model needs maxStorageBufferBindingSize >= {1 << 40} (the adapter has " in notice, notice
    assert page.is_disabled("#generate") and page.text_content("#adapter").startswith("WebGPU: ")
  finally: page.context.close()

def test_runs_on_webassembly_without_webgpu(playwright_instance, site, terrain_unet, record_property):
  # Chromium without WebGPU: the page runs the model's WASM export (its wasm/ folder) on the CPU, says so, and one
  # step gives what onnxruntime gives
  browser = launch_chromium(playwright_instance, webgpu=False)
  try:
    page = _open(browser, site)
    assert page.get_attribute("body", "data-state") == "ready", page.text_content("#notice") + "\n" + "\n".join(page.console_messages)
    steps, _, errors = _generate(page, 1)
    adapter, first = page.text_content("#adapter"), page.evaluate("window.diffuseDemo.firstImageAt")
  finally: browser.close()
  assert adapter == "WebAssembly on the CPU (no WebGPU in this browser: slower than WebGPU)", adapter
  record_property("measure:diffuse wasm: page open -> first image (1 step, s) / the step (s)", f"{first / 1000:.1f} / {steps[0]['ms'] / 1000:.1f}")
  record_property("measure:diffuse wasm: max |page - onnxruntime| / range", f"{errors[0]:.1e}")
