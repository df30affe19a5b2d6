"""show() in the playground page: an image tensor is drawn on a canvas pixel for pixel (read back with getImageData), a
list of numbers as an SVG line plot with a point per number; what was shown before an error is still drawn."""
from browser_harness import run_in_playground

CANVASES = """() => [...document.querySelectorAll('#figures canvas')].map((c) =>
  ({w: c.width, h: c.height, px: Array.from(c.getContext('2d').getImageData(0, 0, c.width, c.height).data)}))"""
POLYLINES = """() => [...document.querySelectorAll('#figures svg polyline')].map((p) =>
  p.getAttribute('points').trim().split(/\\s+/).map((xy) => xy.split(',').map(Number)))"""

def test_images_are_drawn_pixel_for_pixel(page):
  out = run_in_playground(page, "from tinyweb import Tensor, dtypes\n"
    "show(Tensor([[[255, 0, 0], [0, 255, 0], [0, 0, 255]], [[0, 0, 0], [128, 128, 128], [255, 255, 255]]], dtype=dtypes.uint8))\n"
    "show(Tensor([[0.0, 0.5], [1.0, 0.25]]))\n"                                           # gray floats, (H, W)
    "show(Tensor([[[10, 20]], [[30, 40]], [[50, 60]], [[255, 128]]], dtype=dtypes.uint8))\n"   # RGBA channels first, (4, 1, 2)
    "print('shown');")   # (';': no repr of print's None)
  assert out == "shown"
  rgb, gray, chw = page.evaluate(CANVASES)
  assert (rgb["w"], rgb["h"], gray["w"], gray["h"], chw["w"], chw["h"]) == (3, 2, 2, 2, 2, 1)
  assert rgb["px"] == [255, 0, 0, 255, 0, 255, 0, 255, 0, 0, 255, 255, 0, 0, 0, 255, 128, 128, 128, 255, 255, 255, 255, 255]
  assert gray["px"] == [0, 0, 0, 255, 128, 128, 128, 255, 255, 255, 255, 255, 64, 64, 64, 255]   # 0.25 * 255 = 63.75
  # the canvas keeps translucent pixels premultiplied: their color comes back within rounding, alpha exactly
  assert chw["px"][:4] == [10, 30, 50, 255] and chw["px"][7] == 128
  assert all(abs(a - b) <= 2 for a, b in zip(chw["px"][4:7], [20, 40, 60])), chw["px"]

def test_numbers_are_drawn_as_a_line_plot(page):
  assert run_in_playground(page, "from tinyweb import Tensor\nshow([1.0, 0.5, 0.25])\nshow(Tensor.arange(10).float().sqrt());") == ""
  assert page.evaluate("document.querySelectorAll('#figures canvas').length") == 0
  falling, rising = page.evaluate(POLYLINES)
  assert len(falling) == 3 and len(rising) == 10
  for line in (falling, rising): assert all(a[0] < b[0] for a, b in zip(line, line[1:])), line   # x: the index
  assert all(a[1] < b[1] for a, b in zip(falling, falling[1:])) and all(a[1] > b[1] for a, b in zip(rising, rising[1:]))   # (SVG's y points down)
  labels = page.evaluate("[...document.querySelectorAll('#figures svg')[0].querySelectorAll('text')].map((t) => t.textContent)")
  assert labels == ["1.000", "0.2500", "0", "2"]   # the value range and the index range

def test_what_was_shown_before_an_error_is_drawn_and_the_next_run_starts_clean(page):
  out = run_in_playground(page, "from tinyweb import Tensor\nshow([1, 2])\nshow(Tensor.zeros(2, 2, 5))")
  assert "ValueError: show: an image must be (H, W), (H, W, C) or (C, H, W)" in out and "(2, 2, 5)" in out, out
  assert page.evaluate("document.querySelectorAll('#figures svg polyline').length") == 1
  assert run_in_playground(page, "1 + 1") == "2"
  assert page.evaluate("document.querySelector('#figures').children.length") == 0
