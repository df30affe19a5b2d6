"""The lowered kernel (`Program`): what `lower` produces and every renderer and the PYTHON runtime consume; and the
compiled kernel (`CompiledKernel`): a Program with its device program, which the engine, TinyJit and BEAM search launch."""
from __future__ import annotations
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional
from tinyweb.uop import UOp
if TYPE_CHECKING: from tinyweb.codegen.opts import Opt

@dataclass
class Program:
  """A lowered kernel: its name, ordered ops, the buffers it touches and cost estimates for DEBUG output. One read back
  from the disk cache of lowered kernels (engine.build_kernel) has only what launching needs: no uops, globals or
  parallel_range."""
  name: str
  uops: list[UOp]
  globals: list[UOp]                 # DEFINE_GLOBALs in argument order
  outputs: list[int]                 # indices of the globals that are written
  global_shape: tuple[int, ...]      # the output loop sizes
  flops: int = 0
  mem_estimate: int = 0
  parallel_range: Optional[UOp] = None   # the outermost output loop: a runtime may split it across cores...
  parallel: int = 0                      # ...its length (0: none)
  opts: list[Opt] = field(default_factory=list)  # the optimization actions applied, for DEBUG=3
  # GPU targets (renderer.has_threads): the output loops are one flat thread index `gid` < threads (a SPECIAL uop),
  # run as `grid` workgroups of `local_size` threads; the kernel returns early for gid >= threads.
  threads: int = 0
  local_size: int = 0
  grid: Optional[tuple[int, int, int]] = None
  # GPU grouped reductions: one workgroup of `group` threads per output (gid is the workgroup index)
  group: int = 0
  # GPU workgroup tiles (Opt TILE): the workgroup's threads span a block of outputs; gid is the workgroup index
  tiled: bool = False
  @property
  def gid_is_workgroup(self) -> bool: return bool(self.group or self.tiled)

@dataclass
class CompiledKernel:
  program: Program
  runner: object
  src: str
  def launch_args(self) -> dict:
    p = self.program
    return dict(global_size=p.grid or p.global_shape, parallel=p.parallel, work=p.flops + p.mem_estimate)
  def run(self, handles: list, wait: bool = False): return self.runner(*handles, **self.launch_args(), wait=wait)
  def bind(self, handles: list):
    """A no-argument callable that launches the kernel on these buffers: TinyJit replays these. A runtime may offer a
    faster `bind` (arguments converted once); otherwise the launch arguments are just stored."""
    if (bind := getattr(self.runner, "bind", None)) is not None: return bind(*handles, **self.launch_args())
    return functools.partial(self.runner, *handles, **self.launch_args())
