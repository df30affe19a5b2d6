"""The declared target: every capability of a device's code generator that the lowering, its heuristics, BEAM, the
scheduler and the runtimes consult is a field of `Renderer`, documented here. A target's class sets its defaults; a
runtime that learns a value from the hardware passes it to the constructor (`WGSLRenderer(max_buffers=10)`), once:
nothing is patched afterwards. `target_key()` names the whole declaration, for the caches whose results depend on it."""
from __future__ import annotations
from typing import Optional
from tinyweb.dtype import DType

class Renderer:
  device: str = ""
  """The device's name, for messages and for the caches."""
  has_threads: bool = False
  """GPU-style execution: a kernel's output loops become one flat thread index, in workgroups of `local_size` threads
  (grouped reductions, workgroup tiles and barriers are available). False: C-style loops, split across CPU cores."""
  core_split: bool = False
  """CPU: the outermost output loop runs over [core_lo, core_hi) so the runtime's threads can share it."""
  local_size: int = 1
  """Threads per workgroup when no optimization chooses another number."""
  max_local_size: int = 1
  """The most threads one workgroup may have (the hardware's limit)."""
  max_groups: int = 2**31 - 1
  """The most workgroups in one dimension of the launch grid."""
  max_buffers: Optional[int] = None
  """The most buffers one kernel may bind (WebGPU's storage-buffer limit); the scheduler splits kernels that would read
  more. None: no limit."""
  max_loop_iterations: Optional[int] = None
  """A driver that cuts long loops short (lavapipe: 65535 iterations per thread): kernels that would run longer are
  spread over more threads or refused. None: no limit."""
  vector_lanes: int = 0
  """CPU: float32 lanes of the vector type the renderer computes whole vectors in (the heuristics upcast to fill them)."""
  vector_registers: int = 32
  """CPU: how many registers hold those vectors (AVX-512: 32); the register tiling keeps a matmul's accumulators within
  all but 4 of them."""
  vector_width: int = 0
  """GPU: float32 elements per vector load or store; 0: none."""
  fused_multiply_add: bool = False
  """Float32 sums of products update their accumulator with one fused multiply-add (one rounding), and the exp2/log2
  polynomials use fused steps: set where the target's fma is correctly rounded and fast."""
  group_reductions: bool = True
  """GPU: a reduction with few outputs is shared by the threads of a workgroup (Opt GROUP, heuristics.group_size), which
  pays where barriers are cheap (a real GPU). False: only with very few outputs (fewer than heuristics.GROUP_FEW_OUTPUTS)
  or where a thread's loops would be cut short (`max_loop_iterations`): on CPU-emulated GPUs a barrier switches between
  all of the workgroup's threads (SwiftShader: EfficientNet-Lite0 22 s -> 0.8 s per inference without them)."""
  max_upcast_reads: int = 0
  """Register tiling's most reads per loop step of a thread: the sum over the buffers a kernel reads of how many of the
  thread's outputs each read's index tells apart (a matmul's 8 x 4 outputs read 8 + 4; a concat of three sources whose
  index depends on both axes, 3 x 32); the heuristics' upcasts shrink until they fit. 0: no limit. For a shader compiler
  that unrolls poorly: SwiftShader, the browsers' CPU fallback, lost the device compiling a YOLOv8 head kernel that made
  192 reads a step."""
  workgroup_tiles: bool = False
  """Matmul-like kernels stage their inputs through workgroup memory (a real GPU; on CPU-backed GPU drivers barriers
  cost more than the loads they save)."""
  tensor_cores: tuple[DType, ...] = ()
  """Input dtypes of the matrix-multiply instructions the target has (see codegen/tensor_cores.py); (): none."""
  wide_loop_pragma: str = ""
  """CPU with 512-bit vectors: a line put before the innermost loops of elementwise kernels to ask for 16-float
  vectors; "": none."""
  unsupported: dict[DType, str] = {}
  """dtype -> why this target refuses it (checked at buffer creation and when rendering)."""

  def __init__(self, **settings):
    for name, value in settings.items():
      if name not in DECLARED:
        raise TypeError(f"{type(self).__name__}: {name!r} is not a declared target setting; the settings are {sorted(DECLARED)}")
      setattr(self, name, value)

  def target_key(self) -> str:
    """Every declared setting's value (the class's default or the constructor's) and the target's class: two renderers
    with the same key generate the same kernels."""
    def show(v): return sorted((k.name, why) for k, why in v.items()) if isinstance(v, dict) else \
                        [d.name for d in v] if isinstance(v, tuple) else v
    return repr((type(self).__qualname__, sorted((name, show(getattr(self, name))) for name in DECLARED)))

  def check_dtype(self, dt: DType, what: str = ""):
    if dt in self.unsupported:
      raise TypeError(f"{dt.name} is not supported on {self.device}{' (' + what + ')' if what else ''}: {self.unsupported[dt]}")

  def render(self, prog) -> str:
    """A lowered kernel (codegen/program.Program) as this target's source text."""
    raise NotImplementedError

DECLARED = frozenset(Renderer.__annotations__)
