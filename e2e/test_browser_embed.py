"""The embed page (web/embed.html, issue 23) in Chromium: all-MiniLM-L6-v2 exported by scripts/build_models.py (real
weights), sentences typed and embedded as a user would, the similarity matrix and the embeddings read back and compared
with sentence-transformers (the reference implementation, in this process); the page's WordPiece tokenizer
(web/wordpiece.ts) against Hugging Face's (transformers' AutoTokenizer of the same folder) on awkward texts; what the page
says when the adapter lacks a limit; without WebGPU the page runs the model's WASM export, with the same results; a
screenshot of a result (browser_harness.checked_screenshot)."""
from __future__ import annotations
import json, os
import numpy as np
import pytest
from browser_harness import checked_screenshot, launch_chromium, open_model_page, page_model

SENTENCES = ["A man is playing a guitar.", "Someone plays an instrument on stage.", "The new movie is awesome.",
             "The film was really good.", "Stock markets fell sharply today."]
LOAD_TIMEOUT_MS = 300_000   # (weights, then every kernel compiled by SwiftShader on a busy 2-core machine)

EXPORT_SECONDS: list[float] = []   # (the export's time, when this process made it)

@pytest.fixture(scope="session")
def minilm(site):
  """The export's folder (browser_harness.page_model), served at /e2e-data/models/minilm/."""
  _, seconds = page_model(site, "minilm")
  if seconds is not None: EXPORT_SECONDS.append(seconds)
  return site.data_dir / "models" / "minilm"

def _open(chromium, site, model: str = "/e2e-data/models/minilm/"):
  return open_model_page(chromium, f"{site.url}embed.html?model={model}", LOAD_TIMEOUT_MS)

@pytest.fixture(scope="module")
def embed_page(chromium, site, minilm):
  page = _open(chromium, site)
  assert page.get_attribute("body", "data-state") == "ready", page.text_content("#status") + "\n" + "\n".join(page.console_messages)
  yield page
  page.context.close()

def _embed(page) -> tuple[dict, np.ndarray, np.ndarray]:
  """SENTENCES typed and embedded on the page: its result (window.embedDemo.result), sentence-transformers' embeddings of
  them and each one's cosine to the page's."""
  page.fill("#sentences", "\n".join(SENTENCES) + "\n \n")   # (blank lines are skipped)
  page.click("#embed")
  page.wait_for_selector("body[data-state=done], body[data-state=error]", timeout=LOAD_TIMEOUT_MS)
  assert page.get_attribute("body", "data-state") == "done", page.text_content("#status")
  result = page.evaluate("window.embedDemo.result")
  assert result["sentences"] == SENTENCES
  # the reference: sentence-transformers on the original folder (float32 weights, torch on the CPU)
  from sentence_transformers import SentenceTransformer
  from tinyweb.helpers import testdata_dir
  reference = SentenceTransformer(os.path.join(testdata_dir(), "all-MiniLM-L6-v2"), device="cpu")
  want = reference.encode(SENTENCES, convert_to_numpy=True, normalize_embeddings=True)
  got = np.asarray(result["embeddings"], np.float32)
  assert got.shape == want.shape == (5, 384)
  cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
  assert cos.min() > 0.999, cos
  return result, want, cos

def test_the_page_embeds_sentences_as_sentence_transformers_does(embed_page, minilm, record_property):
  page = embed_page   # (the first thing done once the page is ready: its first result's time is the page's own)
  result, want, cos = _embed(page)
  # the matrix as shown: each cell's value (data-value) near the reference's, printed with two decimals
  cells = page.locator("#matrix td")
  values = np.array([float(v) for v in cells.evaluate_all("tds => tds.map((td) => td.dataset.value)")]).reshape(5, 5)
  texts = np.array(cells.all_text_contents()).reshape(5, 5)
  want_sim = want @ want.T
  assert np.abs(values - want_sim).max() < 2e-3, np.abs(values - want_sim).max()
  assert (texts == np.vectorize(lambda v: f"{v:.2f}")(values)).all(), texts
  assert page.locator("#matrix th.row span").all_text_contents() == [f"{i + 1}. {s}" for i, s in enumerate(SENTENCES)]
  # each sentence's nearest other sentence is the reference's
  nearest = lambda sim: (sim - 2 * np.eye(len(sim))).argmax(1)
  assert (nearest(values) == nearest(want_sim)).all() and list(nearest(want_sim)[:4]) == [1, 0, 3, 2]
  tokens = json.loads((minilm / "manifest.json").read_text())["variants"][0]["inputs"][0]["shape"][1]
  assert page.evaluate("window.embedDemo.info.tokens") == tokens
  assert page.text_content("#model").startswith(f"minilm · {tokens} tokens · 384 dimensions · loaded in ")
  ms, first = result["ms"], page.evaluate("window.embedDemo.firstResultAt")
  assert page.text_content("#timing").startswith("5 sentences in ")
  adapter = page.text_content("#device")
  assert adapter.startswith("WebGPU: "), adapter
  record_property("measure:embed: export of MiniLM (s)", f"{EXPORT_SECONDS[0]:.0f}" if EXPORT_SECONDS else "cached")
  record_property("measure:embed: page open -> first result (5 sentences, s)", f"{first / 1000:.1f}")
  load = page.evaluate("window.embedDemo.info.timings")
  record_property("measure:embed: load (s): manifest / device / kernels / weights / total",
                  " / ".join(f"{load[k]:.2f}" for k in ["manifest", "device", "kernels", "weights", "total"]))
  record_property(f"measure:embed: per sentence, {tokens} tokens, batch 1 (ms): first / median",
                  f"{ms[0]:.0f} / {sorted(ms)[len(ms) // 2]:.0f} on {adapter[len('WebGPU: '):]}")
  record_property("measure:embed: min cosine to sentence-transformers / max |similarity - reference|",
                  f"{cos.min():.6f} / {np.abs(values - want_sim).max():.1e}")
  _screenshot(page)

def _screenshot(page):
  """The page with its result, checked not to be blank; kept as TINYWEB_SCREENSHOTS/embed.png when that is set."""
  pixels = checked_screenshot(page, "embed")
  # the heat map's darkest blue (similarity 1 on the diagonal) is there
  assert ((np.abs(pixels - [8, 48, 107]).max(-1)) < 8).sum() > 500

# texts that take each rule of BERT's tokenizer (kept short, but for the two meant to be long)
TEXTS = ["Hello, world!", "", "   ", "Crème brûlée is a French dessert; naïve café-goers love it.",
         "The price rose 3.5% to $1,234.56 on 2024-01-15 (or so).", "don't U.S.A. e-mail #hashtag @user http://example.com/a?q=1&b=2",
         "日本語のテキストと中文字符が混在する。", "안녕하세요 세계", "مرحبا بالعالم", "नमस्ते दुनिया", "ΟΔΟΣ ΣΟΦΙΑΣ Σ",
         "İstanbul Ångström Øresund ǅemal ß ﬁne", "Emoji 😀🎉🥰 and symbols ©®™ € ± ∞ ⌘",
         "“Quotes” — dashes… «guillemets» ¿Qué? ¡Sí! 「括弧」", "non\u00a0breaking\u2003em\u3000ideographic\u2028line",
         "tab\there\nnew line\r\u0000null\u200bzero\u00adsoft\u0085next\ufffdreplacement\x7fdel",
         "Fill the [MASK] in, [SEP] here, [cls] stays text, [UNK][PAD]joined",
         "supercalifragilisticexpialidocious antidisestablishmentarianism " + "a" * 100 + " " + "b" * 101 + " x",
         " ".join(["The quick brown fox jumps over the lazy dog."] * 12)]

def test_the_tokenizer_gives_hugging_faces_ids(embed_page, minilm):
  from transformers import AutoTokenizer
  from tinyweb.helpers import testdata_dir
  tokens = embed_page.evaluate("window.embedDemo.info.tokens")
  ref = AutoTokenizer.from_pretrained(os.path.join(testdata_dir(), "all-MiniLM-L6-v2"))
  got = embed_page.evaluate("""([texts, n]) => texts.map((t) => {
    const e = window.embedDemo.tokenizer.encode(t, n);
    return { ids: Array.from(e.ids), mask: Array.from(e.mask), tokens: e.tokens, truncated: e.truncated };
  })""", [TEXTS, tokens])
  for text, g in zip(TEXTS, got):
    want = ref(text, max_length=tokens, truncation=True, padding="max_length")
    shown = lambda ids, n: ref.convert_ids_to_tokens(ids[:n])
    assert (g["ids"], g["mask"]) == (want["input_ids"], want["attention_mask"]), \
      f"{text!r}:\n  page: {shown(g['ids'], g['tokens'])}\n  want: {shown(want['input_ids'], sum(want['attention_mask']))}"
    untruncated = len(ref(text)["input_ids"])
    assert g["tokens"] == min(untruncated, tokens) and g["truncated"] == (untruncated > tokens), (text, g["tokens"], untruncated)
  assert got[1]["ids"][:3] == [101, 102, 0] and got[-1]["truncated"]   # ("": [CLS] [SEP]; the long one is cut)
  # a word of more than 100 characters is [UNK] (id 100) whole; one of 100 is cut into pieces
  assert embed_page.evaluate("window.embedDemo.tokenizer.tokenize('b'.repeat(101))") == [100]
  assert 100 not in embed_page.evaluate("window.embedDemo.tokenizer.tokenize('a'.repeat(100))")

def test_the_page_says_why_it_cannot_run(playwright_instance, chromium, site, minilm):
  # an adapter without a limit the model needs: the limit, the need and what the adapter has
  folder = site.data_dir / "minilm-needs-more"
  folder.mkdir()
  for f in minilm.iterdir():
    if f.name != "manifest.json": (folder / f.name).symlink_to(f)
  manifest = json.loads((minilm / "manifest.json").read_text())
  manifest["limits"]["maxStorageBufferBindingSize"] = 1 << 40
  (folder / "manifest.json").write_text(json.dumps(manifest))
  page = _open(chromium, site, "/e2e-data/minilm-needs-more/")
  try:
    assert page.get_attribute("body", "data-state") == "error", (page.get_attribute("body", "data-state"), page.text_content("#status"), page.console_messages)
    error = page.text_content("#status .error")
    assert error.startswith(f"The model cannot be loaded: the model needs maxStorageBufferBindingSize >= {1 << 40} "
                            "(the adapter has "), error
    assert page.is_disabled("#embed") and page.text_content("#device").startswith("WebGPU: ")
  finally: page.context.close()

def test_runs_on_webassembly_without_webgpu(playwright_instance, site, minilm, record_property):
  # Chromium without WebGPU: the page runs the model's WASM export (its wasm/ folder) on the CPU, says so, and embeds
  # as sentence-transformers does
  browser = launch_chromium(playwright_instance, webgpu=False)
  try:
    page = _open(browser, site)
    assert page.get_attribute("body", "data-state") == "ready", page.text_content("#status") + "\n" + "\n".join(page.console_messages)
    result, _, cos = _embed(page)
    adapter, first = page.text_content("#device"), page.evaluate("window.embedDemo.firstResultAt")
  finally: browser.close()
  assert adapter == "WebAssembly on the CPU (no WebGPU in this browser: slower than WebGPU)", adapter
  ms = result["ms"]
  record_property("measure:embed wasm: page open -> first result (5 sentences, s) / per sentence (ms): first / median",
                  f"{first / 1000:.1f} / {ms[0]:.0f} / {sorted(ms)[len(ms) // 2]:.0f}")
  record_property("measure:embed wasm: min cosine to sentence-transformers", f"{cos.min():.6f}")

def test_runs_live_with_tinyweb_in_pyodide(chromium, site, minilm, record_property):
  # ?backend=live: tinyweb in Pyodide (the page's worker) builds the encoder from the sentence-transformers folder the
  # export keeps (source/, float32: not the export's float16 shards) and embeds as sentence-transformers does
  page = _open(chromium, site, "/e2e-data/models/minilm/&backend=live")
  try:
    assert page.get_attribute("body", "data-state") == "ready", page.text_content("#status") + "\n" + "\n".join(page.console_messages)
    result, _, cos = _embed(page)
    adapter, first = page.text_content("#device"), page.evaluate("window.embedDemo.firstResultAt")
  finally: page.context.close()
  assert adapter.endswith("live: tinyweb's Python in Pyodide runs the model (?backend=live)"), adapter
  ms = result["ms"]
  record_property("measure:embed live (Pyodide): page open -> first result (5 sentences, s) / per sentence (ms): first / median",
                  f"{first / 1000:.1f} / {ms[0]:.0f} / {sorted(ms)[len(ms) // 2]:.0f}")
  record_property("measure:embed live: min cosine to sentence-transformers", f"{cos.min():.6f}")
