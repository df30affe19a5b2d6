"""Find the objects in a photo with a YOLOv8 detector and print them (class, score, box); --out draws them.

  python -m demos.detect IMAGE                          # the YOLOv8s fall detector from the test data (scripts/setup.sh fetches it)
  python -m demos.detect IMAGE --weights yolov8n.pt --out boxes.png --device WEBGPU --conf 0.4
  python -m demos.detect --export site/fall/ --size 320   # the model for the detect page (web/detect.html ?model=site/fall/)

The weights are an ultralytics YOLOv8 detection checkpoint (.pt, read without torch or ultralytics); the image is any
file Pillow reads. The detections are those of ultralytics' `model.predict(IMAGE, imgsz=640, conf=..., iou=...)`.
--export writes the network (a fixed square input, raw boxes and scores out) with `python -m tinyweb.export` and
detect.json beside it, which the page reads: {title, names (the classes'), size, sample?, credit?}."""
from __future__ import annotations
import argparse, json, os, shutil, sys, time
from typing import Optional, Sequence

def default_weights() -> str:
  from tests import testdata
  return os.path.join(testdata.folder(), "yolov8s_fall.pt")

def draw(image, detections, out: str) -> None:
  """The image (a Pillow image) with each detection's box and label, saved to `out`."""
  from PIL import ImageDraw
  im = image.copy()
  pen = ImageDraw.Draw(im)
  for d in detections:
    pen.rectangle(d.box, outline=(255, 64, 0), width=3)
    label = f"{d.name} {d.score:.2f}"
    left, top, right, bottom = pen.textbbox((d.box[0], d.box[1]), label)
    pen.rectangle((left, top - (bottom - top) - 4, right + 4, top), fill=(255, 64, 0))
    pen.text((left + 2, top - (bottom - top) - 2), label, fill=(255, 255, 255))
  im.save(out)

def export_page(weights: str, out: str, size: int = 640, title: Optional[str] = None, sample: Optional[str] = None,
                credit: Optional[str] = None, target: str = "webgpu", with_source: bool = False) -> dict:
  """The detect page's model folder: the network exported for a `size` x `size` input (the page letterboxes each image
  into it: `letterbox(pixels, size, stride=None)`) and detect.json (returned): the class names from the checkpoint, and
  a sample photo copied in when given. `target`: tinyweb.export's --target (webgpu, or wasm: for browsers without WebGPU);
  `with_source`: its --with-source (the checkpoint kept beside the export, for the page's ?backend=live)."""
  from tinyweb.export.cli import main as export_main
  from tinyweb.models.yolov8 import YOLOv8
  if export_main(["yolov8", out, "--weights", weights, "--size", str(size), "--target", target] + ["--with-source"] * with_source) != 0: raise RuntimeError(f"detect: exporting {weights} failed")
  meta = {"title": title or f"YOLOv8 ({os.path.basename(weights)})", "names": YOLOv8.load(weights, device="CPU").names, "size": size}
  if sample:
    meta["sample"] = os.path.basename(sample)
    shutil.copyfile(sample, os.path.join(out, meta["sample"]))
  if credit: meta["credit"] = credit
  with open(os.path.join(out, "detect.json"), "w") as f: json.dump(meta, f, indent=1)
  return meta

def main(argv: Optional[Sequence[str]] = None) -> list | dict:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("image", nargs="?", help="the photo (PNG, JPEG, ...)")
  ap.add_argument("--weights", default=None, help="an ultralytics YOLOv8 .pt (default: the fall detector from the test data)")
  ap.add_argument("--export", metavar="DIR", help="instead of detecting, write the network (--size x --size in, raw boxes and "
                  "scores out) and detect.json (the class names) for the detect page to DIR (python -m tinyweb.export)")
  ap.add_argument("--size", type=int, default=640, help="the input size: the letterbox's longer side, or the export's "
                  "square input (default 640; multiples of 32)")
  ap.add_argument("--target", choices=["webgpu", "wasm"], default="webgpu", help="with --export: the kernels' target "
                  "(python -m tinyweb.export's --target: webgpu, the default, or wasm for browsers without WebGPU)")
  ap.add_argument("--title", help="with --export: the page's title for the model")
  ap.add_argument("--sample", metavar="IMAGE", help="with --export: a photo copied beside the model, the page's sample")
  ap.add_argument("--credit", help="with --export: a line of credits (model, sample) the page shows")
  ap.add_argument("--with-source", action="store_true", help="with --export: keep the checkpoint beside the export, so that "
                  "the page can also run the model live (?backend=live: tinyweb in Pyodide; python -m tinyweb.export's --with-source)")
  ap.add_argument("--out", default=None, help="write the image with the boxes drawn here (PNG, JPEG, ...)")
  ap.add_argument("--device", default=None, help="tinyweb device (default: Device.DEFAULT)")
  ap.add_argument("--conf", type=float, default=0.25, help="confidence threshold (default 0.25)")
  ap.add_argument("--iou", type=float, default=0.7, help="IoU over which a box is suppressed by a better one of its class (default 0.7)")
  a = ap.parse_args(argv)
  weights = a.weights or default_weights()
  if not os.path.exists(weights): sys.exit(f"detect: no weights at {weights}: run `python -m tests.testdata` or pass --weights")
  if a.size % 32: ap.error(f"--size must be a multiple of 32, not {a.size}")
  if a.export: return export_page(weights, a.export, a.size, a.title, a.sample, a.credit, a.target, a.with_source)
  if a.image is None: ap.error("the image is required (unless --export)")
  from PIL import Image
  from tinyweb import Tensor, Device
  from tinyweb.models.yolov8 import YOLOv8
  st = time.perf_counter()
  model = YOLOv8.load(weights, device=a.device)
  with Image.open(a.image) as im: image = im.convert("RGB")
  pixels = Tensor(image.tobytes(), device=a.device).reshape(image.height, image.width, 3)
  detections = model.detect(pixels, conf=a.conf, iou=a.iou, size=a.size)
  for d in detections: print(f"{d.name:<12} {d.score:.3f}  ({d.box[0]:.1f}, {d.box[1]:.1f}, {d.box[2]:.1f}, {d.box[3]:.1f})")
  if a.out: draw(image, detections, a.out)
  print(f"({len(detections)} found by {os.path.basename(weights)} on {Device.canonicalize(a.device)}, {time.perf_counter() - st:.1f} s)", file=sys.stderr)
  return detections

if __name__ == "__main__":
  main()
