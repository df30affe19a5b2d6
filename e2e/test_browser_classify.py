"""The classify page (web/classify.html) in headless Chromium: dist/ served with EfficientNet-Lite0 as
scripts/build_models.py exports it (real weights, the sample photo), the page opened cold (nothing cached), the sample
photo classified in the page's Web Worker on WebGPU, then the same photo picked as a file and dropped. The page's input
tensor is compared with the native preprocessing (tinyweb.models.efficientnet.preprocess on the CPU device: equal, value
for value; torch's bilinear interpolate: within float32 rounding), its probabilities and the top 5 it shows with the
reference model (efficientnet_lite_pytorch in torch) on that input. Without WebGPU the page runs the model's WASM export
with the same results; with ?backend=live tinyweb itself (Pyodide in the page's worker) builds the model from the
checkpoint the export keeps and runs it on WebGPU, with the same results. Also what the page says for a file that is not an image, without WebGPU or a WASM export, when the adapter lacks a limit the model needs, and for a model whose input it cannot take.

The export (build_models.py in a subprocess: 7-16 s here, with the kernel cache warm or cold) is shared with the other
pages' tests and kept across runs (browser_harness.page_model)."""
from __future__ import annotations
import functools, io, json
from types import SimpleNamespace
import numpy as np
import pytest
from browser_harness import launch_chromium, load_testdata, page_model

MODEL = "efficientnet-lite0"
LOAD_TIMEOUT_MS = 300_000   # (cold: the weights, and every kernel compiled by SwiftShader on a busy 2-core machine)
# a probability's tolerance, the page (SwiftShader) against torch on the CPU (measured: 1.5e-6)
PROB_ATOL = 2e-5

@pytest.fixture(scope="module")
def models(site):
  """build_models.py's output for EfficientNet-Lite0 (browser_harness.page_model): `url`, its folder's URL, and
  `export_s`, how long the export took when this process made it."""
  for name in ["efficientnet-lite0.pth", "chelsea.png"]: load_testdata().path(name)   # (skips the tests without them)
  url, export_s = page_model(site, MODEL)
  return SimpleNamespace(url=url, export_s=export_s)

def _open(chromium, site, model_path: str):
  """A new context (nothing cached) on the classify page of that model; (page, console messages, URLs requested)."""
  page = chromium.new_context(viewport={"width": 1000, "height": 700}).new_page()
  console, urls = [], []
  page.on("console", lambda m: console.append(m.text))
  page.on("request", lambda r: urls.append(r.url))
  page.goto(f"{site.url}classify.html?model={model_path}")
  return page, console, urls

# a file (the one at the URL given) dropped onto the page's drop zone, as a browser delivers a dragged file
DROP = """async (url) => {
  const data = new DataTransfer();
  data.items.add(new File([await (await fetch(url)).blob()], "dropped.png", { type: "image/png" }));
  document.querySelector("#drop").dispatchEvent(new DragEvent("drop", { dataTransfer: data, bubbles: true, cancelable: true }));
}"""

def _wait_for_result(page, image_id: int, console: list[str]) -> dict:
  """The page's result for its image_id-th image (window.classifyResult, its typed arrays as lists)."""
  try: page.wait_for_function(f"window.classifyResult?.id === {image_id} || !document.querySelector('#notice').hidden",
                              timeout=LOAD_TIMEOUT_MS)
  except Exception as e: raise AssertionError(f"no result: {e}\nconsole:\n" + "\n".join(console)) from None
  assert page.is_hidden("#notice"), page.text_content("#notice") + "\nconsole:\n" + "\n".join(console)
  return page.evaluate("""() => { const r = window.classifyResult;
    return { ...r, input: Array.from(r.input), probabilities: Array.from(r.probabilities) }; }""")

def _shown(page) -> list[dict]:
  """The top 5 as the page shows them."""
  return page.eval_on_selector_all("#results li", """lis => lis.map((li) => ({ index: Number(li.dataset.class),
    probability: Number(li.dataset.probability), label: li.querySelector('.label').textContent,
    value: li.querySelector('.value').textContent, width: li.querySelector('.bar span').getBoundingClientRect().width }))""")

@functools.cache
def _reference_model():
  """efficientnet_lite_pytorch's EfficientNet-Lite0 with the same weights, in torch."""
  efficientnet_lite_pytorch = pytest.importorskip("efficientnet_lite_pytorch")
  return efficientnet_lite_pytorch.EfficientNet.from_pretrained(MODEL, weights_path=load_testdata().path("efficientnet-lite0.pth")).eval()

def _reference_probabilities(x: np.ndarray) -> np.ndarray:
  import torch
  with torch.no_grad(): return _reference_model()(torch.from_numpy(x)).softmax(-1)[0].numpy()

def _torch_preprocess(pixels: np.ndarray) -> np.ndarray:
  """The shorter side to 224 (bilinear, align_corners=False), the center crop, (x - 127) / 128: in torch."""
  import torch
  t = torch.from_numpy(pixels).permute(2, 0, 1)[None].float()
  h, w = pixels.shape[:2]
  size = (224, round(w * 224 / h)) if h <= w else (round(h * 224 / w), 224)
  t = torch.nn.functional.interpolate(t, size=size, mode="bilinear", align_corners=False)
  top, left = (size[0] - 224) // 2, (size[1] - 224) // 2
  return ((t[:, :, top:top + 224, left:left + 224] - 127.0) / 128.0).numpy()

def test_classifies_photos_as_the_reference_model_does(site, chromium, models, record_property):
  from PIL import Image
  from tinyweb import Tensor
  from tinyweb.models.efficientnet import imagenet_classes, preprocess
  photos = {name: load_testdata().path(name) for name in ["chelsea.png", "bus.jpg"]}   # (chelsea.png: the sample too)
  page, console, urls = _open(chromium, site, models.url)
  try:
    page.click("#sample")   # (at once: the page classifies it when the model is loaded)
    results = [_wait_for_result(page, 1, console)]
    shown = _shown(page)
    screenshot = page.screenshot()
    for i, name in [(2, "bus.jpg"), (3, "chelsea.png")]:   # picked as files
      page.set_input_files("#file", photos[name])
      results.append(_wait_for_result(page, i, console))
    page.evaluate(DROP, f"{models.url}sample.png")
    results.append(_wait_for_result(page, 4, console))
    adapter, model_text, loading_hidden = page.text_content("#adapter"), page.text_content("#model"), page.is_hidden("#loading")
    # files that are not images, or not decodable ones: the page says so
    errors = []
    for name, mime, data in [("notes.txt", "text/plain", b"hello"), ("broken.png", "image/png", b"not a PNG")]:
      page.set_input_files("#file", {"name": name, "mimeType": mime, "buffer": data})
      page.wait_for_selector("#notice:not([hidden])")
      errors.append(page.text_content("#notice"))
      page.evaluate("document.querySelector('#notice').hidden = true")
  finally: page.context.close()
  assert not [u for u in urls if "pyodide" in u.lower() or u.endswith(".whl")], urls   # (no Python on this page)

  # each input: the native preprocessing's, value for value (the same float32 roundings; a landscape PNG and a portrait
  # JPEG, so both crops and both decoders); torch's within its own roundings. The probabilities: the reference model's in
  # torch, on the same input
  errs, wants = [], []
  for r, name in zip(results, ["chelsea.png", "bus.jpg", "chelsea.png", "chelsea.png"]):
    with Image.open(photos[name]) as im: pixels = np.array(im.convert("RGB"))
    x = preprocess(Tensor(pixels, device="CPU"), 224).numpy()
    got = np.asarray(r["input"], np.float32).reshape(x.shape)
    np.testing.assert_array_equal(got, x, err_msg=name)
    np.testing.assert_allclose(got, _torch_preprocess(pixels), atol=2e-5, rtol=0, err_msg=name)
    assert (r["width"], r["height"]) == (pixels.shape[1], pixels.shape[0])
    wants.append(_reference_probabilities(x))
    errs.append(float(np.abs(np.asarray(r["probabilities"], np.float32) - wants[-1]).max()))
  assert max(errs) <= PROB_ATOL, f"max |page - torch| = {errs}"
  first, probs, want = results[0], np.asarray(results[0]["probabilities"], np.float32), wants[0]
  np.testing.assert_array_equal(np.asarray(results[2]["probabilities"], np.float32), probs)   # (the same photo again)

  # the top 5 shown: ImageNet's labels, the bars and percentages of the page's probabilities, the reference's classes
  # (a class may change places with one whose reference probability is within the tolerance)
  labels, order = imagenet_classes(), np.argsort(-want)
  assert [s["index"] for s in shown] == [t["index"] for t in first["top"]]
  assert int(np.argmax(probs)) == shown[0]["index"]
  for i, s in enumerate(shown):
    assert s["label"] == labels[s["index"]]
    assert s["probability"] == pytest.approx(float(probs[s["index"]]), abs=1e-7)
    assert s["value"] == f"{s['probability'] * 100:.1f} %"
    assert abs(want[s["index"]] - want[order[i]]) <= 2 * PROB_ATOL, (i, labels[s["index"]], labels[order[i]])
  assert shown[0]["width"] > shown[-1]["width"]
  if want[order[4]] - want[order[5]] > 2 * PROB_ATOL: assert {s["index"] for s in shown} == set(order[:5].tolist())
  assert labels[shown[0]["index"]] in ("Egyptian cat", "tabby", "tiger cat")

  assert errors == ["notes.txt is not an image (its type is text/plain).",
                    "broken.png could not be classified: it is not an image this browser can decode (type image/png)."], errors

  # what else the page shows: the adapter (SwiftShader here), the model's size
  assert adapter.startswith("WebGPU: ") and "fallback adapter" in adapter, adapter
  assert "224 × 224 input" in model_text and "kernels" in model_text and loading_hidden, model_text

  # the screenshot (1000 x 700) is not blank: the photo and the bars make many colors and contrast
  shot = np.asarray(Image.open(io.BytesIO(screenshot)).convert("RGB"))
  assert shot.shape == (700, 1000, 3)
  assert shot.std() > 30 and len(np.unique(shot.reshape(-1, 3), axis=0)) > 5000

  per_run = sorted(r["inferenceMs"] for r in results[1:])[1]
  record_property("measure:classify page EfficientNet-Lite0: page open -> first result, cold (s)", f"{first['at'] / 1000:.2f}")
  record_property("measure:classify page: inference first / median of the next 3 (ms), preprocessing (ms)",
                  f"{first['inferenceMs']:.0f} / {per_run:.0f}, {first['preprocessMs']:.0f}")
  record_property("measure:classify page: max |probability - torch|", f"{max(errs):.1e}")
  if models.export_s is not None: record_property("measure:classify page: build_models.py (the export) (s)", f"{models.export_s:.0f}")

def test_runs_on_webassembly_without_webgpu(playwright_instance, site, models, record_property):
  # Chromium without WebGPU: the page runs the model's WASM export (its wasm/ folder) on the CPU, says so, and gives the
  # reference model's probabilities within the same tolerance
  from tinyweb import Tensor
  from PIL import Image
  from tinyweb.models.efficientnet import preprocess
  browser = launch_chromium(playwright_instance, webgpu=False)
  try:
    page, console, urls = _open(browser, site, models.url)
    page.click("#sample")
    r = _wait_for_result(page, 1, console)
    adapter = page.text_content("#adapter")
  finally: browser.close()
  assert adapter == "WebAssembly on the CPU (no WebGPU in this browser: slower than WebGPU)", adapter
  model_urls = [u for u in urls if u.startswith(f"{site.url}e2e-data/models/{MODEL}/") and not u.endswith("sample.png")]
  assert model_urls and all(u.startswith(f"{site.url}e2e-data/models/{MODEL}/wasm/") for u in model_urls), model_urls
  with Image.open(load_testdata().path("chelsea.png")) as im: x = preprocess(Tensor(np.array(im.convert("RGB")), device="CPU"), 224).numpy()
  np.testing.assert_array_equal(np.asarray(r["input"], np.float32).reshape(x.shape), x)
  probs, want = np.asarray(r["probabilities"], np.float32), _reference_probabilities(x)
  err = float(np.abs(probs - want).max())
  assert err <= PROB_ATOL, err
  assert np.argsort(-probs)[:5].tolist() == np.argsort(-want)[:5].tolist()
  record_property("measure:classify wasm: page open -> first result, cold (s) / inference (ms)", f"{r['at'] / 1000:.2f} / {r['inferenceMs']:.0f}")
  record_property("measure:classify wasm: max |probability - torch|", f"{err:.1e}")

def test_runs_live_with_tinyweb_in_pyodide(site, chromium, models, record_property):
  # ?backend=live: Pyodide and the tinyweb wheel in the page's worker, the export's source/ checkpoint (not its kernels
  # or shards) fetched and built by tinyweb.export.live on WebGPU; the reference model's probabilities, as exported
  from tinyweb import Tensor
  from PIL import Image
  from tinyweb.models.efficientnet import preprocess
  page, console, urls = _open(chromium, site, f"{models.url}&backend=live")
  try:
    page.click("#sample")
    first = _wait_for_result(page, 1, console)
    page.set_input_files("#file", load_testdata().path("chelsea.png"))   # (the second run of the shape: TinyJit's capture)
    second = _wait_for_result(page, 2, console)
    adapter, model_text = page.text_content("#adapter"), page.text_content("#model")
  finally: page.context.close()
  assert adapter.startswith("WebGPU: ") and adapter.endswith("live: tinyweb's Python in Pyodide runs the model (?backend=live)"), adapter
  assert "built live by tinyweb" in model_text, model_text
  fetched = lambda part: [u for u in urls if part in u]
  assert fetched("/pyodide/") and fetched(".whl") and fetched(f"models/{MODEL}/source/{MODEL}.pth"), urls
  assert not fetched("/kernels/") and not fetched(".safetensors") and not fetched("/wasm/"), urls
  with Image.open(load_testdata().path("chelsea.png")) as im: x = preprocess(Tensor(np.array(im.convert("RGB")), device="CPU"), 224).numpy()
  want = _reference_probabilities(x)
  errs = [float(np.abs(np.asarray(r["probabilities"], np.float32) - want).max()) for r in (first, second)]
  assert max(errs) <= PROB_ATOL, errs
  assert [t["index"] for t in first["top"]] == np.argsort(-np.asarray(first["probabilities"]))[:5].tolist()
  record_property("measure:classify live (Pyodide): page open -> first result, cold (s) / inference first, second (ms)",
                  f"{first['at'] / 1000:.2f} / {first['inferenceMs']:.0f}, {second['inferenceMs']:.0f}")

def _webgpu_only(site) -> str:
  """A copy of the model's folder without its WASM export (wasm/): links to its files, served at the URL returned."""
  folder = site.data_dir / f"{MODEL}-webgpu-only"
  folder.mkdir(exist_ok=True)
  for f in (site.data_dir / "models" / MODEL).iterdir():
    if f.name != "wasm" and not (folder / f.name).exists(): (folder / f.name).symlink_to(f)
  return f"/e2e-data/{folder.name}/"

def test_says_so_without_webgpu_or_a_wasm_export_and_downloads_nothing(playwright_instance, site, models):
  url = _webgpu_only(site)
  browser = launch_chromium(playwright_instance, webgpu=False)
  try:
    page, console, urls = _open(browser, site, url)
    page.wait_for_selector("#notice:not([hidden])", timeout=60_000)
    notice = page.text_content("#notice")
    assert notice.startswith("WebGPU is not available (headless Chromium has WebGPU only when launched with "
                             "--enable-unsafe-webgpu)"), notice
    assert page.is_disabled("#sample") and page.is_disabled("#file")
    assert page.text_content("#adapter") == "no WebGPU adapter"
    # (only the WASM export's manifest looked for: not found)
    assert [u for u in urls if u.startswith(f"{site.url}e2e-data/")] == [f"{site.url}{url[1:]}wasm/manifest.json"], urls
    # ?backend=live needs WebGPU too: said, before any download
    page, console, urls = _open(browser, site, f"{models.url}&backend=live")
    page.wait_for_selector("#notice:not([hidden])", timeout=60_000)
    assert page.text_content("#notice") == ("?backend=live runs tinyweb on WebGPU, which is not available (headless Chromium "
                                            "has WebGPU only when launched with --enable-unsafe-webgpu)."), page.text_content("#notice")
    assert not [u for u in urls if u.startswith(f"{site.url}e2e-data/")], urls
  finally: browser.close()

def test_the_url_chooses_the_backend(site, chromium, models):
  # ?backend=wasm: the WASM export although there is WebGPU; the same probabilities as on WebGPU
  probabilities, adapters = {}, {}
  for backend in ["webgpu", "wasm"]:
    page, console, urls = _open(chromium, site, f"{models.url}&backend={backend}")
    try:
      page.click("#sample")
      probabilities[backend] = np.asarray(_wait_for_result(page, 1, console)["probabilities"], np.float32)
      adapters[backend] = page.text_content("#adapter")
    finally: page.context.close()
  assert adapters["webgpu"].startswith("WebGPU: ") and adapters["wasm"] == "WebAssembly on the CPU (?backend=wasm: slower than WebGPU)", adapters
  assert np.abs(probabilities["wasm"] - probabilities["webgpu"]).max() <= PROB_ATOL
  # asked for a backend there is not: said
  for query, want in [(f"{_webgpu_only(site)}&backend=wasm", f"?backend=wasm: {site.url}{_webgpu_only(site)[1:]} has no WASM export ("),
                      (f"{models.url}&backend=cuda", "?backend=cuda is not a backend this page has: webgpu, wasm or live"),
                      (f"{_edited_model(site, 'no-source', lambda m: None)}&backend=live",   # (an export without --with-source)
                       f"The model cannot be loaded: {site.url}e2e-data/no-source/source.json: HTTP 404: this export keeps no weights")]:
    page, console, urls = _open(chromium, site, query)
    try:
      page.wait_for_selector("#notice:not([hidden])", timeout=60_000)
      assert page.text_content("#notice").startswith(want), page.text_content("#notice")
    finally: page.context.close()

def _edited_model(site, name: str, edit) -> str:
  """The model's manifest changed by edit(manifest), served from /e2e-data/<name>/ (its files stay where they are)."""
  manifest = json.loads((site.data_dir / "models" / MODEL / "manifest.json").read_text())
  edit(manifest)
  for f in [*manifest["kernels"], *manifest["weights"]["shards"]]: f["file"] = f"../models/{MODEL}/{f['file']}"
  (site.data_dir / name).mkdir(exist_ok=True)
  (site.data_dir / name / "manifest.json").write_text(json.dumps(manifest))
  return f"/e2e-data/{name}/"

def test_names_the_limit_the_adapter_lacks(site, chromium, models):
  """A manifest that needs more than any adapter has (1 TiB per storage binding): the page says which limit, how much."""
  page, console, _ = _open(chromium, site, _edited_model(site, "needs-more",
                                                         lambda m: m["limits"].update(maxStorageBufferBindingSize=1 << 40)))
  try:
    page.wait_for_selector("#notice:not([hidden])", timeout=60_000)
    notice = page.text_content("#notice")
    assert notice.startswith("The model cannot be loaded: the model needs maxStorageBufferBindingSize >= 1099511627776 "
                             "(the adapter has "), notice
    assert page.is_disabled("#sample")
  finally: page.context.close()

def test_says_what_input_it_needs(site, chromium, models):
  """A model whose input is not square (the manifest says 224 x 160): loaded, then refused, with what it takes and what
  the page needs."""
  page, console, _ = _open(chromium, site, _edited_model(site, "not-square",
                                                         lambda m: m["variants"][0]["inputs"][0].update(shape=[1, 3, 224, 160])))
  try:
    page.wait_for_selector("#notice:not([hidden])", timeout=LOAD_TIMEOUT_MS)
    assert page.text_content("#notice") == (
      f"The model cannot be used: {site.url}e2e-data/not-square/ is not an image classifier (python -m tinyweb.export "
      "efficientnet-lite0): it takes input [1, 3, 224, 160] float32 -> output [1, 1000] float32; this page needs "
      "input [1, 3, size, size] float32 -> output [1, classes] float32")
    assert page.is_disabled("#sample") and page.text_content("#adapter").startswith("WebGPU: ")
  finally: page.context.close()
