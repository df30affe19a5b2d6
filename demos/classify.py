"""Classify a photo with EfficientNet-Lite (ImageNet-1k) and print the top classes.

  python -m demos.classify IMAGE                        # EfficientNet-Lite0 from the test data (scripts/setup.sh fetches it)
  python -m demos.classify IMAGE --weights efficientnet-lite2-*.pth --device WEBGPU --top 10
  python -m demos.classify --export site/lite0/          # the model for a static page (tinyweb.export; loadModel runs it)

The weights are an `efficientnet_lite_pytorch` state dict (.pth, read without torch); the variant (lite0..lite4) comes
from the file's name unless --variant says it. The image is any file Pillow reads."""
from __future__ import annotations
import argparse, os, sys, time

def default_weights() -> str:
  from tests import testdata
  return os.path.join(testdata.folder(), "efficientnet-lite0.pth")

def classify(image: str, weights: str, device=None, variant=None, top: int = 5) -> list[tuple[float, str]]:
  """The `top` (probability, class name) pairs for the image, best first."""
  from PIL import Image
  from tinyweb import Tensor
  from tinyweb.models.efficientnet import EfficientNetLite, preprocess, top_k
  model = EfficientNetLite.load(weights, variant=variant, device=device)
  with Image.open(image) as im: pixels = Tensor(im.convert("RGB").tobytes(), device=device).reshape(im.height, im.width, 3)
  return top_k(model(preprocess(pixels, model.resolution)).softmax(-1)[0], top)

def main(argv=None) -> list[tuple[float, str]]:
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("image", nargs="?", help="the photo (PNG, JPEG, ...)")
  ap.add_argument("--weights", default=None, help="an efficientnet_lite_pytorch .pth (default: Lite0 from the test data)")
  ap.add_argument("--export", metavar="DIR", help="instead of classifying, write the model for static hosting to DIR "
                  "(python -m tinyweb.export: WGSL kernels, manifest.json, weights; a page runs it with loadModel)")
  ap.add_argument("--variant", choices=["lite0", "lite1", "lite2", "lite3", "lite4"], help="default: from the weights' file name")
  ap.add_argument("--device", default=None, help="tinyweb device (default: Device.DEFAULT)")
  ap.add_argument("--top", type=int, default=5, help="how many classes to print (default 5)")
  a = ap.parse_args(argv)
  weights = a.weights or default_weights()
  if not os.path.exists(weights): sys.exit(f"classify: no weights at {weights}: run `python -m tests.testdata` or pass --weights")
  if a.export:
    from tinyweb.export.cli import main as export_main
    return export_main([f"efficientnet-{a.variant}" if a.variant else "efficientnet-lite", a.export, "--weights", weights])
  if a.image is None: ap.error("the image is required (unless --export)")
  from tinyweb import Device
  st = time.perf_counter()
  result = classify(a.image, weights, a.device, a.variant, a.top)
  for p, name in result: print(f"{p * 100:6.2f}%  {name}")
  print(f"({os.path.basename(weights)} on {Device.canonicalize(a.device)}, {time.perf_counter() - st:.1f} s)", file=sys.stderr)
  return result

if __name__ == "__main__":
  main()
