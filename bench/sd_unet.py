"""One Stable Diffusion 1.5 UNet step: tinyweb (tinyweb.models.unet) against diffusers on torch's CPU (2 threads), the same
random weights, in one run.

  python -m bench.sd_unet                    # the full SD 1.5 UNet: 320/640/1280/1280 channels, 64x64 latents, 77x768 text, batch 2
  python -m bench.sd_unet --small            # a reduced config, as a quick smoke check
  python -m bench.sd_unet --device WEBGPU --reps 5

The weights are random (torch.manual_seed(0)): diffusers builds the model from SD 1.5's config and saves it to a temporary
folder, which both sides load. Batch 2 is classifier-free guidance's (the unconditional and the conditional text).
Each side runs in a subprocess of its own, so its peak memory (ru_maxrss: the weights, mapped or copied, and the
activations) is its own. torch: the median of --reps steps after one warm-up, under torch.no_grad. tinyweb: the first call
(building the graph, scheduling, compiling every kernel; the kernel disk cache is used as a second process would find it,
unless --cold), then the median of --reps replays of a TinyJit of the step. ratio = torch time / tinyweb time: above 1 means
tinyweb is faster. The largest difference of the two outputs is printed as a check that both computed the same thing."""
from __future__ import annotations
import argparse, json, os, resource, subprocess, sys, tempfile, time
import numpy as np
from bench.onnx_models import median_time

SD15 = dict(sample_size=64, in_channels=4, out_channels=4, block_out_channels=[320, 640, 1280, 1280], layers_per_block=2,
            cross_attention_dim=768, attention_head_dim=8, norm_num_groups=32,
            down_block_types=["CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D", "DownBlock2D"],
            up_block_types=["UpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "CrossAttnUpBlock2D"])
SMALL = dict(SD15, sample_size=32, block_out_channels=[32, 64, 128, 128], layers_per_block=1, cross_attention_dim=64)
TIMESTEP = 981

def _peak_mib() -> float: return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024   # (Linux: KiB)

def build(folder: str, small: bool):
  """The random model saved to folder, and the inputs beside it."""
  import torch, diffusers
  config = SMALL if small else SD15
  torch.manual_seed(0)
  diffusers.UNet2DConditionModel(**config).eval().save_pretrained(folder)
  rng = np.random.default_rng(0)
  size = config["sample_size"]
  np.save(os.path.join(folder, "latents.npy"), rng.standard_normal((1, 4, size, size)).astype(np.float32).repeat(2, 0))
  np.save(os.path.join(folder, "text.npy"), rng.standard_normal((2, 77, config["cross_attention_dim"])).astype(np.float32))

def run_torch(folder: str, reps: int) -> dict:
  import torch, diffusers
  torch.set_num_threads(2)
  model = diffusers.UNet2DConditionModel.from_pretrained(folder).eval()
  x, c = (torch.from_numpy(np.load(os.path.join(folder, f))) for f in ("latents.npy", "text.npy"))
  t = torch.tensor([TIMESTEP])
  def step():
    with torch.no_grad(): return model(x, t, c).sample.numpy()
  np.save(os.path.join(folder, "out_torch.npy"), step())   # (the warm-up)
  return {"ms": median_time(step, reps) * 1e3, "peak_mib": _peak_mib()}

def run_tinyweb(folder: str, reps: int, device: str) -> dict:
  from tinyweb import Tensor, TinyJit
  from tinyweb.models.unet import UNet2DConditionModel
  st = time.perf_counter()
  model = UNet2DConditionModel.from_pretrained(folder, device=device)
  x, c = (Tensor(np.load(os.path.join(folder, f)), device=device) for f in ("latents.npy", "text.npy"))
  t = Tensor([float(TIMESTEP)], device=device)
  out = model(x, t, c).numpy()
  first_s = time.perf_counter() - st
  np.save(os.path.join(folder, "out_tinyweb.npy"), out)
  jit = TinyJit(lambda x, t, c: model(x, t, c).realize())
  for _ in range(2): jit(x, t, c).numpy()   # (capture)
  return {"ms": median_time(lambda: jit(x, t, c).numpy(), reps) * 1e3, "first_s": first_s, "peak_mib": _peak_mib()}

def _child(args: list[str]) -> dict:
  """This module run as a subprocess with args; its last stdout line is its result as JSON."""
  p = subprocess.run([sys.executable, "-m", "bench.sd_unet", *args], capture_output=True, text=True,
                     cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  if p.returncode: raise SystemExit(f"bench.sd_unet {' '.join(args)} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
  return json.loads(p.stdout.strip().splitlines()[-1])

def main():
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  ap.add_argument("--small", action="store_true", help="a reduced config (32/64/128/128 channels, 1 layer per block, 32x32 latents)")
  ap.add_argument("--device", default="CPU", help="tinyweb's device")
  ap.add_argument("--reps", type=int, default=None, help="timed steps per side (default 3, --small 10)")
  ap.add_argument("--cold", action="store_true", help="an empty kernel disk cache for tinyweb's first call")
  ap.add_argument("--side", choices=["build", "torch", "tinyweb"], help=argparse.SUPPRESS)   # (the subprocesses)
  ap.add_argument("--folder", help=argparse.SUPPRESS)
  a = ap.parse_args()
  reps = a.reps or (10 if a.small else 3)
  if a.side == "build": return print(json.dumps(build(a.folder, a.small)))
  if a.side == "torch": return print(json.dumps(run_torch(a.folder, reps)))
  if a.side == "tinyweb": return print(json.dumps(run_tinyweb(a.folder, reps, a.device)))
  if a.cold: os.environ["TINYWEB_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-sd-unet-cache-")
  config = SMALL if a.small else SD15
  with tempfile.TemporaryDirectory(prefix="bench-sd-unet-") as folder:
    common = ["--folder", folder, "--reps", str(reps)] + (["--small"] if a.small else [])
    _child(["--side", "build", *common])
    ref = _child(["--side", "torch", *common])
    ours = _child(["--side", "tinyweb", "--device", a.device, *common])
    want, got = np.load(os.path.join(folder, "out_torch.npy")), np.load(os.path.join(folder, "out_tinyweb.npy"))
  size, ch = config["sample_size"], "/".join(map(str, config["block_out_channels"]))
  print(f"SD 1.5 UNet{' (--small)' if a.small else ''}, random weights: {ch} channels, batch 2, {size}x{size} latents, "
        f"77x{config['cross_attention_dim']} text")
  print(f"{'':24} {'ms/step':>10} {'peak RSS':>10}")
  print(f"{'diffusers torch CPU':24} {ref['ms']:10.1f} {ref['peak_mib']:7.0f} MiB")
  print(f"{'tinyweb ' + a.device + ' jit':24} {ours['ms']:10.1f} {ours['peak_mib']:7.0f} MiB   first call {ours['first_s']:.1f} s")
  print(f"ratio {ref['ms'] / ours['ms']:.2f}x   max |diff| {float(np.abs(got - want).max()):.2e} (of max |out| {float(np.abs(want).max()):.3g})   "
        f"load average {os.getloadavg()[0]:.2f}")

if __name__ == "__main__":
  main()
