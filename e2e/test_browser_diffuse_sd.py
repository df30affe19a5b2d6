"""The diffuse page's Stable Diffusion mode (web/diffuse.html?sd=URL, issue 23) in Chromium: demos.diffusion's tiny
random-weight pipeline (SD 1.x's architecture, CLIP's real tokenizer) exported by scripts/build_models.py
(sd-tiny-random), an image generated as a user would (prompt, steps, guidance, seed, Generate): the page's initial
latents are its seeded generator's (web/diffuse_sampler.ts), its prompt ids CLIPTokenizer's, and its image that of
StableDiffusionPipeline on the CPU device, with the export's weights, from the same latents, prompt, steps and guidance;
the page's tokenizer against the Python one on awkward texts; without WebGPU the export's WASM parts (its wasm/ folder)
give the same image; what the page says when a file is missing, when a part is not what it should be, and without
WebGPU or WASM parts; a screenshot (browser_harness.checked_screenshot)."""
from __future__ import annotations
import numpy as np
import pytest
from browser_harness import assert_says_no_webgpu, checked_screenshot, launch_chromium, open_model_page, page_model
from test_browser_diffuse import normals

LOAD_TIMEOUT_MS = 300_000   # (three parts' kernels compiled by SwiftShader on a busy 2-core machine)
RUN_TIMEOUT_MS = 300_000
PROMPT, NEGATIVE, STEPS, GUIDANCE, SEED = "A lighthouse on a cliff at dusk, oil painting", "blurry", 2, 7.5, 2024
PARTS = ("text_encoder", "unet", "vae_decoder")
TEXTS = ["a photo of a cat", "", "  Leading   and trailing\t\tspaces \n", "I'M sure it's fine, don't you think? we'll see; they'd've",
         "Café naïve résumé Ångström e\u0301 ﬁ ß İstanbul ΣΑΣ σς", "我爱北京天安门, 東京 and 서울 مرحبا ٣ Ⅻ ² 10,000.5%",
         "emoji 😀 snowman ☃ dna \U0001F9EC flags 🇫🇷 zwj 👩‍👩‍👧", "<|startoftext|>inside<|endoftext|>!<|ENDOFTEXT|> <|foo|>",
         "nbsp\u00a0nel\u0085bom\ufeffzwsp\u200bideographic\u3000space", "'''quoted''' \"double\" ‘curly’ it’s `back`",
         "#hashtag @user https://example.com/a?b=c&d=e <b>bold</b> x^2 + y_1 = z",
         "a very long prompt " + " ".join(f"word{i}" for i in range(120))]

EXPORT_SECONDS: list[float] = []

@pytest.fixture(scope="session")
def sd_export(site):
  """The export's folder (browser_harness.page_model), served at /e2e-data/models/sd-tiny-random/."""
  _, seconds = page_model(site, "sd-tiny-random")
  if seconds is not None: EXPORT_SECONDS.append(seconds)
  return site.data_dir / "models" / "sd-tiny-random"

def _native(folder):
  """The tiny pipeline on the CPU device with the weights of the export in `folder` (each part's, by its tensors' names)."""
  from demos.diffusion import tiny_random_pipeline
  from tinyweb.nn.state import load_state_dict, safe_load
  pipe = tiny_random_pipeline("CPU")
  for part, model in zip(PARTS, (pipe.text_encoder, pipe.unet, pipe.vae)):
    weights = {k: t for f in sorted((folder / part).glob("weights-*.safetensors")) for k, t in safe_load(str(f), "CPU").items()}
    missing, unexpected = load_state_dict(model, weights, strict=False)
    assert not unexpected and (not missing or part == "vae_decoder" and all(k.startswith(("encoder.", "quant_conv.")) for k in missing)), \
      (part, missing, unexpected)
  return pipe

@pytest.fixture(scope="module")
def native(sd_export):
  """The reference: the pipeline with the WebGPU export's weights."""
  return _native(sd_export)

def _open(chromium, site, folder: str = "/e2e-data/models/sd-tiny-random/"):
  return open_model_page(chromium, f"{site.url}diffuse.html?sd={folder}", LOAD_TIMEOUT_MS)

@pytest.fixture(scope="module")
def sd_page(chromium, site, sd_export):
  page = _open(chromium, site)
  assert page.get_attribute("body", "data-state") == "ready", page.text_content("#notice") + "\n" + "\n".join(page.console_messages)
  yield page
  page.context.close()

def _generate_and_check(page, native) -> tuple[dict, float]:
  """An image generated on the page as a user would (PROMPT, NEGATIVE, STEPS, GUIDANCE, SEED), checked against `native`
  from the page's initial latents: the page's result and the image's largest error."""
  page.fill("#prompt", PROMPT)
  page.fill("#negative", NEGATIVE)
  for control, value in [("#steps", STEPS), ("#guidance", GUIDANCE)]:   # (range inputs, moved as a user would)
    page.eval_on_selector(control, "(e, v) => { e.value = v; e.dispatchEvent(new Event('input')); }", str(value))
  page.fill("#seed", str(SEED))
  page.click("#generate")
  page.wait_for_selector("body[data-state=done], body[data-state=error]", timeout=RUN_TIMEOUT_MS)
  assert page.get_attribute("body", "data-state") == "done", page.text_content("#status") + "\n" + "\n".join(page.console_messages)
  r = page.evaluate("""() => { const r = window.diffuseDemo.result;
    return {...r, latents: Array.from(r.latents), image: Array.from(r.image)}; }""")
  assert (r["prompt"], r["negative"], r["steps"], r["guidance"], r["seed"], r["preview"]) == (PROMPT, NEGATIVE, STEPS, GUIDANCE, SEED, True)
  assert r["ids"] == native.tokenizer.encode(PROMPT)
  # the initial latents: the page's seeded generator (SplitMix32 + Box-Muller, as documented), in the UNet's shape
  latents = np.array(r["latents"], np.float32)
  np.testing.assert_allclose(latents, normals(SEED, 4 * 16 * 16), atol=2e-6)
  from tinyweb import Tensor
  want = native(PROMPT, negative_prompt=NEGATIVE, steps=STEPS, guidance_scale=GUIDANCE, latents=Tensor(latents.reshape(1, 4, 16, 16)),
                output="float").numpy()[0]
  got = np.array(r["image"], np.float32).reshape(want.shape)
  error = float(np.abs(got - want).max())
  # float32 on SwiftShader against float32 on the CPU, the kernels' sums in other orders: measured 4.3e-6. Small
  # mistakes move this image more than 1e-4 (measured natively: guidance 7.4 for 7.5, 2.5e-4; latents off by 1e-3,
  # 4e-4; a token more in the prompt, 1e-2; no guidance, 1.6e-2), and 1e-4 is a 40th of one of the canvas's 255 levels
  assert error < 1e-4 and want.std() > 0.05, (error, want.std())
  assert page.locator("#thumbs canvas").count() == STEPS and page.locator("#times li").count() == STEPS + 2   # (prompt, steps, image)
  assert page.text_content("#status").startswith(f"{STEPS} steps in ") and page.evaluate("document.querySelector('#step-progress').value") == 1
  return r, error

def test_the_page_generates_the_native_pipelines_image(sd_page, native, record_property):
  page = sd_page   # (the first thing done once the page is ready: its first image's time is the page's own)
  assert page.is_hidden("#difficulty") and page.is_hidden("#map") and page.is_visible("#prompt") and page.is_visible("#image")
  r, error = _generate_and_check(page, native)
  adapter = page.text_content("#adapter")
  assert adapter.startswith("WebGPU: "), adapter
  model = page.evaluate("window.diffuseDemo.model")
  assert (model["width"], model["height"], model["maxSteps"], model["scheduler"]) == (32, 32, 50, "EulerDiscreteScheduler")
  record_property("measure:diffuse-sd: export of the tiny random pipeline (s)", f"{EXPORT_SECONDS[0]:.0f}" if EXPORT_SECONDS else "cached")
  record_property("measure:diffuse-sd: page open -> first image (s)", f"{page.evaluate('window.diffuseDemo.firstImageAt') / 1000:.1f}")
  record_property("measure:diffuse-sd: load (s), each part: total", " / ".join(f"{p} {model['timings'][p]['total']:.2f}" for p in PARTS))
  record_property("measure:diffuse-sd: prompts / steps / decoding (s)",
                  f"{r['encodeMs'] / 1000:.2f} / {' / '.join(f'{t / 1000:.2f}' for t in r['stepMs'])} / {r['decodeMs'] / 1000:.2f} on {adapter[8:]}")
  record_property("measure:diffuse-sd: max |page - native| of the image (0..1)", f"{error:.1e}")
  checked_screenshot(page, "diffuse-sd")

def test_runs_on_webassembly_without_webgpu(playwright_instance, site, sd_export, record_property):
  # Chromium without WebGPU: the page runs the export's WASM parts (wasm/<part>/) on the CPU, says so, and gives the
  # image of the native pipeline with those parts' weights
  browser = launch_chromium(playwright_instance, webgpu=False)
  try:
    page = _open(browser, site)
    assert page.get_attribute("body", "data-state") == "ready", page.text_content("#notice") + "\n" + "\n".join(page.console_messages)
    r, error = _generate_and_check(page, _native(sd_export / "wasm"))
    adapter, first = page.text_content("#adapter"), page.evaluate("window.diffuseDemo.firstImageAt")
  finally: browser.close()
  assert adapter == "WebAssembly on the CPU (no WebGPU in this browser: slower than WebGPU)", adapter
  record_property("measure:diffuse-sd wasm: page open -> first image (s) / prompts / steps / decoding (s)",
                  f"{first / 1000:.1f} / {r['encodeMs'] / 1000:.2f} / {' / '.join(f'{t / 1000:.2f}' for t in r['stepMs'])} / {r['decodeMs'] / 1000:.2f}")
  record_property("measure:diffuse-sd wasm: max |page - native| of the image (0..1)", f"{error:.1e}")

def test_the_pages_tokenizer_is_the_python_one(sd_page, native):
  got = sd_page.evaluate("(texts) => texts.map((t) => [window.diffuseDemo.tokenizer.encode(t), Array.from(window.diffuseDemo.tokenizer.inputIds(t))])", TEXTS)
  for text, (encoded, row) in zip(TEXTS, got):
    assert encoded == native.tokenizer.encode(text), text
    assert row == native.tokenizer([text]).input_ids[0], text
  assert len(got[-1][0]) > 77   # (the long one: truncated in its row)

def _copy(site, sd_export, name: str, change: dict[str, str | None]) -> str:
  """A folder of links to the export's files, with `change` (path -> another of its paths to link, or None: left out);
  its URL."""
  (folder := site.data_dir / name).mkdir()
  for f in sd_export.rglob("*"):
    if f.is_file() and (rel := str(f.relative_to(sd_export))).split("/")[0] not in change and rel not in change:
      (folder / rel).parent.mkdir(parents=True, exist_ok=True)
      (folder / rel).symlink_to(f)
  for path, source in change.items():
    if source is not None: (folder / path).symlink_to(sd_export / source)
  return f"/e2e-data/{name}/"

def test_the_page_says_why_it_cannot_run(playwright_instance, chromium, site, sd_export):
  # scheduler.json missing: which file, and who writes it
  page = _open(chromium, site, _copy(site, sd_export, "sd-without-scheduler", {"scheduler.json": None}))
  try:
    assert page.get_attribute("body", "data-state") == "error"
    assert page.text_content("#notice") == (f"{site.url}e2e-data/sd-without-scheduler/scheduler.json: HTTP 404 "
                                            "(python -m tinyweb.export stable-diffusion writes it)")
    assert page.is_disabled("#generate")
  finally: page.context.close()
  # a text encoder where the UNet should be: what the page needs of it
  page = _open(chromium, site, _copy(site, sd_export, "sd-wrong-unet", {"unet": "text_encoder"}))
  try:
    notice = page.text_content("#notice")
    assert notice.startswith(f"The model cannot be used: {site.url}e2e-data/sd-wrong-unet/unet/ is not Stable Diffusion's unet "
                             "(python -m tinyweb.export stable-diffusion): it takes input_ids [1, 77] int32 -> "
                             "last_hidden_state [1, 77, 64] float32; this page needs latents [2, channels, height, width] float32"), notice
  finally: page.context.close()
  # no WebGPU (Chromium without --enable-unsafe-webgpu) and no WASM parts: said, with what to do about it in this browser
  browser = launch_chromium(playwright_instance, webgpu=False)
  try:
    assert_says_no_webgpu(_open(browser, site, _copy(site, sd_export, "sd-webgpu-only", {"wasm": None})), "#generate")
  finally: browser.close()
