"""The generate page (web/generate.html, issue 23) in Chromium: Gemma-3-270M's generation step exported by
scripts/build_models.py (the real Q4_K_M weights), a prompt continued as a user would (prompt, new tokens, Generate):
the prompt's token ids equal tinyweb.models.gemma's tokenizer's (itself checked against transformers in
tests/test_model_gemma.py), and the greedy tokens equal the native run's (Gemma.generate_ids on the CPU); the page's
tokenizer against the Python one on awkward texts; without WebGPU the page runs the model's WASM export, with the same
tokens; what the page says without its tokenizer, and for a reply longer than the context; a screenshot of the result
(browser_harness.checked_screenshot)."""
from __future__ import annotations
import numpy as np
import pytest
from browser_harness import checked_screenshot, launch_chromium, load_testdata, open_model_page, page_model

LOAD_TIMEOUT_MS = 300_000    # (256 MB of weights checked, then 85 kernels compiled by SwiftShader on a busy 2-core machine)
TOKEN_TIMEOUT_MS = 60_000    # (a prompt chunk: ~15 s on SwiftShader, a token ~4.5 s)
# two prompt chunks (16 tokens each) and three single-token steps: both variants, and the KV cache they share as state
PROMPT = "Here is a list of the five largest cities in Europe, ordered by population, with one line about each:"
NEW_TOKENS = 4
TEXTS = ["The capital of France is", "  leading spaces and trailing   ", "Café naïve résumé: Ångström", "我爱北京天安门, 東京 and 서울",
         "emoji 😀 snowman ☃ dna \U0001F9EC \U000E0001", "tab\tnew\nline\n\n\nthree\r\nwindows", "",
         "<start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n", "<table><tr><td>1</td></tr></table> <b>bold</b>",
         "def f(n):\n    if n < 2:\n        return n\n" + "    " * 12 + "deep", "▁ already has the marker ▁▁ <0x41>", "x" * 300]

EXPORT_SECONDS: list[float] = []

@pytest.fixture(scope="session")
def gemma_export(site):
  """The export's folder (browser_harness.page_model), served at /e2e-data/models/gemma/."""
  _, seconds = page_model(site, "gemma")
  if seconds is not None: EXPORT_SECONDS.append(seconds)
  return site.data_dir / "models" / "gemma"

@pytest.fixture(scope="module")
def native():
  """Gemma-3-270M natively on the CPU: the reference run."""
  from tinyweb.models.gemma import Gemma
  return Gemma.load(load_testdata().path("gemma-3-270m-q4_k_m.gguf"), device="CPU", max_context=256)

def _open(chromium, site, model: str = "/e2e-data/models/gemma/"):
  return open_model_page(chromium, f"{site.url}generate.html?model={model}", LOAD_TIMEOUT_MS)

@pytest.fixture(scope="module")
def generate_page(chromium, site, gemma_export):
  page = _open(chromium, site)
  assert page.get_attribute("body", "data-state") == "ready", page.text_content("#notice") + "\n" + "\n".join(page.console_messages)
  yield page
  page.context.close()

def _generate(page, prompt: str, new_tokens: int, state: str = "done"):
  page.fill("#prompt", prompt)
  page.fill("#max-tokens", str(new_tokens))
  page.click("#generate")
  page.wait_for_selector("body[data-state=done], body[data-state=error]", timeout=3 * TOKEN_TIMEOUT_MS + new_tokens * TOKEN_TIMEOUT_MS)
  assert page.get_attribute("body", "data-state") == state, page.text_content("#stats")

def test_greedy_tokens_equal_the_native_run(generate_page, native, record_property):
  page = generate_page   # (the first thing done once the page is ready: its first token's time is the page's own)
  _generate(page, PROMPT, NEW_TOKENS)
  reply = page.evaluate("window.generateDemo.reply")
  ids = native.tokenizer.encode(PROMPT)
  assert reply["promptIds"] == ids and len(ids) > 16   # (two chunks)
  want = list(native.generate_ids(ids, NEW_TOKENS))
  assert reply["tokens"] == want, (native.tokenizer.decode(reply["tokens"]), native.tokenizer.decode(want))
  assert reply["ended"] == "length" and reply["text"] == native.tokenizer.decode(want)
  assert page.text_content("#text") == PROMPT + reply["text"]
  stats = page.text_content("#stats")
  assert stats.startswith(f"prompt: {len(ids)} tokens in ") and f"{NEW_TOKENS} new tokens" in stats and "tokens/s" in stats, stats
  adapter = page.text_content("#adapter")
  assert adapter.startswith("WebGPU: "), adapter
  model = page.evaluate("window.generateDemo.model")
  assert model["context"] == 256 and model["chunk"] == 16 and model["vocabulary"] == len(native.tokenizer)
  load = model["timings"]
  record_property("measure:generate: export of Gemma-3-270M (s)", f"{EXPORT_SECONDS[0]:.0f}" if EXPORT_SECONDS else "cached")
  record_property("measure:generate: page open -> first token (s)", f"{page.evaluate('window.generateDemo.firstTokenAt') / 1000:.1f}")
  record_property("measure:generate: load (s): manifest / device / kernels / weights / total",
                  " / ".join(f"{load[k]:.2f}" for k in ["manifest", "device", "kernels", "weights", "total"]))
  record_property("measure:generate: prompt of 2 chunks (s); per new token (s)",
                  f"{reply['promptMs'] / 1000:.1f}; {' / '.join(f'{t / 1000:.2f}' for t in reply['tokenMs'][1:])} on {adapter[8:]}")
  checked_screenshot(page, "generate")

def test_the_pages_tokenizer_is_the_python_one(generate_page, native):
  got = generate_page.evaluate("(texts) => texts.map((t) => window.generateDemo.tokenizer.encode(t))", TEXTS)
  want = [native.tokenizer.encode(t) for t in TEXTS]
  for text, g, w in zip(TEXTS, got, want): assert g == w, text
  ids = np.random.default_rng(0).integers(0, len(native.tokenizer), (10, 30)).tolist() + want   # (any ids: byte and special tokens too)
  for skip in (True, False):
    got = generate_page.evaluate("([ids, skip]) => ids.map((s) => window.generateDemo.tokenizer.decode(s, skip))", [ids, skip])
    assert got == [native.tokenizer.decode(s, skip_special_tokens=skip) for s in ids]

def test_a_reply_beyond_the_context_is_refused(generate_page):
  _generate(generate_page, "Hello", 300, state="error")
  assert generate_page.text_content("#stats") == ("The text could not be generated: the prompt's 2 tokens and 300 new ones do not "
                                                  "fit the model's context of 256 tokens")

def test_the_page_says_why_it_cannot_run(chromium, site, gemma_export):
  # the tokenizer missing beside the model: which file, and who writes it
  folder = site.data_dir / "gemma-without-tokenizer"
  folder.mkdir()
  for f in gemma_export.iterdir():
    if f.name != "tokenizer.json": (folder / f.name).symlink_to(f)
  page = _open(chromium, site, "/e2e-data/gemma-without-tokenizer/")
  try:
    assert page.get_attribute("body", "data-state") == "error"
    assert page.text_content("#notice") == (f"{site.url}e2e-data/gemma-without-tokenizer/tokenizer.json: HTTP 404 "
                                            "(python -m tinyweb.export gemma writes it beside the model)")
    assert page.is_disabled("#generate")
  finally: page.context.close()

def test_runs_on_webassembly_without_webgpu(playwright_instance, site, gemma_export, native, record_property):
  # Chromium without WebGPU: the page runs the model's WASM export (its wasm/ folder) on the CPU, says so, and gives
  # the native run's greedy tokens (a short prompt: one chunk, then single tokens)
  browser = launch_chromium(playwright_instance, webgpu=False)
  try:
    page = _open(browser, site)
    assert page.get_attribute("body", "data-state") == "ready", page.text_content("#notice") + "\n" + "\n".join(page.console_messages)
    _generate(page, TEXTS[0], 3)
    reply, adapter = page.evaluate("window.generateDemo.reply"), page.text_content("#adapter")
    first = page.evaluate("window.generateDemo.firstTokenAt")
  finally: browser.close()
  assert adapter == "WebAssembly on the CPU (no WebGPU in this browser: slower than WebGPU)", adapter
  ids = native.tokenizer.encode(TEXTS[0])
  assert reply["promptIds"] == ids and reply["tokens"] == list(native.generate_ids(ids, 3)), reply
  record_property("measure:generate wasm: page open -> first token (s)", f"{first / 1000:.1f}")
