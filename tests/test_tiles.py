"""GPU workgroup tiles (Opt TILE) and the loads they stage through workgroup memory (staging.stage_loads), on every device
with workgroups (CL on PoCL, WEBGPU on lavapipe here). The heuristics choose tiles on real GPUs only, so these tests
force them with TILES=1 and compare against torch; each case also checks that the kernels it built were tiled and
staged, so a change that silently stops tiling fails here instead of passing untested."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from tinyweb import Context, Tensor, engine
from tinyweb.device import Device
from tinyweb.uop import UOp, Ops
from tinyweb.codegen.opts import Opt, OptError
from tinyweb.codegen.lower import lower
from tinyweb.schedule import create_schedule
from helpers import check_op

def gpu_renderer(device):
  r = Device[device].renderer
  if not getattr(r, "has_threads", False) or r.max_local_size < 8:
    pytest.skip(f"{device} has no workgroups to tile (TILE applies to GPU targets)")
  return r

def tiled_kernels() -> dict:
  """The tiled kernels the engine holds, as id(program) -> its AST (a program read back from the disk cache of lowered
  kernels has no uops: lower the AST again to look inside)."""
  return {id(k.program): key[1] for key, k in engine._kernel_cache.items() if k.program.tiled}

CASES = {   # name: (input shapes, torch fn[, tinyweb fn]); sizes chosen so that TILE applies
  "matmul": ([(32, 48), (48, 64)], lambda a, b: a @ b),
  "matmul_k12": ([(32, 12), (12, 64)], lambda a, b: a @ b),                 # a 4-deep block (12 = 3 x 4)
  "matmul_k7": ([(16, 7), (7, 32)], lambda a, b: a @ b),                    # 7: tiles without staging
  "batched_matmul_bias_relu": ([(3, 32, 24), (3, 24, 16), (16,)], lambda a, b, c: (a @ b + c).relu()),
  "conv2d_pad": ([(2, 8, 8, 8), (16, 8, 3, 3)], lambda x, w: F.conv2d(x, w, padding=1),   # gated (padded) loads
                 lambda x, w: x.conv2d(w, padding=1)),
  "max_of_products": ([(16, 24), (32, 24)], lambda a, b: (a[:, None, :] * b[None]).amax(-1),
                      lambda a, b: (a[:, None, :] * b[None]).max(-1)),
}

@pytest.mark.parametrize("case", list(CASES))
def test_tiled_matches_torch(case, device):
  gpu_renderer(device)
  shapes, torch_fn, *tw_fn = CASES[case]
  before = set(tiled_kernels())
  with Context(TILES=1): check_op(shapes, torch_fn, tw_fn[0] if tw_fn else None, device=device, atol=1e-4, rtol=1e-4)
  new = [ast for p, ast in tiled_kernels().items() if p not in before]
  assert new, f"{case}: no kernel was tiled"
  if case != "matmul_k7":
    with Context(TILES=1): staged = any(u.op is Ops.DEFINE_LOCAL for ast in new for u in lower(ast, Device[device].renderer).uops)
    assert staged, f"{case}: no load was staged through workgroup memory"

@pytest.mark.parametrize("dtype", ["float16", "int32"])
def test_tiled_matmul_dtypes(dtype, device):
  gpu_renderer(device)
  rng = np.random.default_rng(0)
  a, b = (rng.integers(-3, 4, size=s).astype(dtype) for s in [(32, 16), (16, 32)])
  try: ta, tb = Tensor(a, device=device), Tensor(b, device=device)
  except TypeError as e: pytest.skip(f"{device}: {e}")   # float16 where the adapter lacks shader-f16
  with Context(TILES=1): got = (ta @ tb).numpy()
  np.testing.assert_array_equal(got, (torch.tensor(a.astype(np.float32)) @ torch.tensor(b.astype(np.float32))).numpy().astype(dtype))

def matmul_ast(device, m=32, k=48, n=64):
  a, b = Tensor.rand(m, k, device=device).realize(), Tensor.rand(k, n, device=device).realize()
  items, _, _ = create_schedule([(a @ b).uop])
  return [it for it in items if it.kind == "kernel"][-1].ast

def test_staging_layout(device):
  """The program of a tiled matmul: both inputs staged, the loop over k split in blocks between barriers."""
  r = gpu_renderer(device)
  p = lower(matmul_ast(device), r, [Opt("UPCAST", 1, 2), Opt("TILE", 0, 4), Opt("TILE", 1, 8)])
  ops = [u.op for u in p.uops]
  assert p.tiled and p.local_size == 32 and p.threads == (32 // 4) * (64 // 2 // 8)
  assert ops.count(Ops.BARRIER) == 2 and len({u for u in p.uops if u.op is Ops.DEFINE_LOCAL}) == 3   # A once, B per upcast

def test_tile_errors(device):
  r = Device[device].renderer
  ast = matmul_ast(device)
  if not getattr(r, "has_threads", False):
    with pytest.raises(OptError, match="only GPU targets"): lower(ast, r, [Opt("TILE", 0, 4)])
    return
  gpu_renderer(device)
  with pytest.raises(OptError, match="does not divide"): lower(ast, r, [Opt("TILE", 0, 5)])
  with pytest.raises(OptError, match="GROUP cannot be combined"): lower(ast, r, [Opt("TILE", 0, 4), Opt("GROUP", 0, 16)])
  with pytest.raises(OptError, match="not tiled yet"): lower(ast, r, [Opt("TILE", 0, 4), Opt("TILE", 0, 2)])
  with pytest.raises(OptError, match="at most"): lower(ast, r, [Opt("TILE", 0, 32), Opt("TILE", 1, r.max_local_size)])

def one_kernel(t: Tensor) -> UOp:
  """The AST of t's whole graph as one kernel: the fusion the scheduler made of a reduction inside a concatenation before
  it gave such reductions buffers of their own. Lowering must still handle it (BEAM, hand-built kernels)."""
  from tinyweb.device import Buffer
  from tinyweb.schedule import _kernel
  def plain(u: UOp) -> UOp:   # the values without their custom gradients (only autograd needs those)
    if u.op is Ops.CUSTOM_GRAD: return plain(u.src[0])
    return u.replace(src=tuple(plain(s) for s in u.src)) if u.src else u
  return _kernel(plain(t.uop), Buffer(t.device, t.numel(), t.dtype), set(), {}, {}).ast

def test_values_the_staging_stores_share_with_later_code_are_defined_before_the_loop():
  """A padded stride-2 convolution + SiLU concatenated with another tensor (YOLOv8's downsampling conv and Concat, issue 17),
  lowered for CUDA, whose heuristics stage it: its staging stores (inside the reduction's outer loop) and the code after
  the loop share a clamped channel index. Each value must be defined in a scope enclosing all its uses; defined inside
  the loop, it was an undefined identifier after it, which NVRTC refused."""
  from tinyweb.codegen.cuda import CUDARenderer
  rng = np.random.default_rng(0)
  x, w, b, o, b2 = (Tensor(rng.standard_normal(s).astype(np.float32), device="CPU") for s in [(1, 64, 32, 32), (64, 64, 3, 3), (64,), (1, 2, 16, 16), (2,)])
  y = x.conv2d(w, b, stride=2, padding=1).silu().cat((o + b2.reshape(1, -1, 1, 1)).silu(), dim=1)
  ast = one_kernel(y)
  p = lower(ast, CUDARenderer())
  assert any(u.op is Ops.DEFINE_LOCAL for u in p.uops), "not staged: the case no longer tests staging"
  open_loops, scope, misplaced = [], {}, []
  for u in p.uops:
    misplaced += [(s.op, u.op) for s in u.src if s in scope and scope[s] != tuple(open_loops[:len(scope[s])])]
    if u.op is Ops.ENDRANGE: open_loops.pop()
    else:
      scope[u] = tuple(open_loops)
      if u.op is Ops.RANGE: open_loops.append(u)
  assert not misplaced, f"values used outside the loop they are defined in (value, user): {misplaced}"
