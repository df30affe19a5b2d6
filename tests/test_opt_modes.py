"""The differential tests of issue 6 under each optimization mode: heuristics off (NOOPT=1), a small BEAM search
(BEAM=2), on every device, and GPU workgroup tiles forced on (TILES=1) on the devices with workgroups (tests/test_tiles.py
has cases sized for them). The rest of the suite runs with the default heuristics; this module reruns a representative
subset (elementwise, reductions, matmul, conv, pooling, softmax, norms, a loss, with gradients) in the other modes.
TEST_OPT_MODES=noopt,beam,tiles chooses the modes (default: all three). BEAM searches start from an empty cache (a fresh
TINYWEB_CACHE_DIR for this module), so every kernel is really searched: every candidate is checked against the
unoptimized kernel by the search itself, and the chosen one against torch here."""
import os
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Context
from tinyweb.device import Device
from helpers import check_op

MODES = [m.strip() for m in os.getenv("TEST_OPT_MODES", "noopt,beam,tiles").split(",") if m.strip()]
# tiles: GPU workgroup tiles with loads staged through workgroup memory, which the heuristics choose on real GPUs only
SETTINGS = {"noopt": {"NOOPT": 1}, "beam": {"BEAM": 2}, "tiles": {"TILES": 1}}

CASES = {
  "elementwise_broadcast": ([(4, 1, 6), (5, 6)], lambda a, b: ((a * b + 1).relu() - a).exp() * 0.5 + b.abs()),
  "sum_axes": ([(6, 7, 5)], lambda x: x.sum((0, 2))),
  "max_and_mean": ([(6, 7, 5)], lambda x: x.amax(1) * x.mean(1), lambda x: x.max(1) * x.mean(1)),
  "matmul_bias_relu": ([(9, 12), (12, 10), (10,)], lambda a, b, c: (a @ b + c).relu()),
  "conv2d": ([(1, 2, 5, 5), (3, 2, 3, 3)], lambda x, w: F.conv2d(x, w, padding=1),
             lambda x, w: x.conv2d(w, padding=1)),
  "max_pool": ([(2, 3, 6, 6)], lambda x: F.max_pool2d(x, 2), lambda x: x.max_pool2d(2)),
  "log_softmax": ([(5, 11)], lambda x: x.log_softmax(-1)),
  "layer_norm": ([(4, 12)], lambda x: F.layer_norm(x, (12,)), lambda x: x.layernorm()),
}

# where every candidate is slow to build or to time, BEAM runs the cases with the fewest kernels unless TEST_SLOW_BEAM=all
# (the others take minutes there): lavapipe compiles each candidate's pipeline in 0.2-0.5 s, PoCL each kernel in 0.4 s
# (conv2d 35 s, the broadcast chain 28 s, matmul 25 s on CI's 2 cores), PYTHON interprets them (conv2d 34 s)
SLOW_BEAM_DEVICES = {"WEBGPU", "CL", "PYTHON"}
FEW_KERNEL_CASES = {"sum_axes", "max_and_mean", "log_softmax"}

@pytest.fixture(scope="module", autouse=True)
def fresh_cache(tmp_path_factory):
  old = os.environ.get("TINYWEB_CACHE_DIR")
  os.environ["TINYWEB_CACHE_DIR"] = str(tmp_path_factory.mktemp("opt-modes-cache"))
  yield
  if old is None: del os.environ["TINYWEB_CACHE_DIR"]
  else: os.environ["TINYWEB_CACHE_DIR"] = old

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", list(CASES))
def test_differential_under_mode(case, mode, device):
  if mode == "beam" and device in SLOW_BEAM_DEVICES and case not in FEW_KERNEL_CASES and os.getenv("TEST_SLOW_BEAM") != "all":
    pytest.skip(f"BEAM on {device} runs {sorted(FEW_KERNEL_CASES)} only (TEST_SLOW_BEAM=all for every case: minutes)")
  renderer = Device[device].renderer
  if mode == "tiles" and not (getattr(renderer, "has_threads", False) and renderer.max_local_size >= 8):
    pytest.skip(f"{device} has no workgroups to tile (TILES applies to GPU targets)")
  shapes, torch_fn, *tw_fn = CASES[case]
  with Context(**SETTINGS[mode]): check_op(shapes, torch_fn, tw_fn[0] if tw_fn else None, device=device, atol=1e-4, rtol=1e-4)
