"""What the two WebGPU runtimes share: native (wgpu-py, backends/webgpu.py) and in the browser (navigator.gpu through
Pyodide, backends/webgpu_browser.py). Both are a `WebGPUDeviceBase`: the adapter's limits and features configure the
WGSL renderer here, buffer sizes and binding counts are checked here, and WGSL needs no compiler step of its own.

Limits are named as wgpu-py names them, in kebab case ("max-storage-buffer-binding-size"); the browser's camelCase
names ("maxStorageBufferBindingSize") are converted with `camel`.
"""
from __future__ import annotations
import os, re
from tinyweb.device import Compiler, Compiled
from tinyweb.codegen.wgsl import WGSLRenderer

# requested when the adapter has them (the subgroup feature is "subgroup" in wgpu-native, "subgroups" in browsers)
OPTIONAL_FEATURES = ("shader-f16", "timestamp-query", "subgroup", "subgroups")
# the limits tinyweb reads; a device is requested with the adapter's values for them (never the spec's defaults)
LIMITS = ("max-storage-buffer-binding-size", "max-buffer-size", "max-storage-buffers-per-shader-stage",
          "max-compute-invocations-per-workgroup", "max-compute-workgroup-size-x", "max-compute-workgroups-per-dimension",
          "max-compute-workgroup-storage-size")

# WebGPU's default limits (every adapter has at least these) for the limits above. TINYWEB_WEBGPU_LIMITS=default makes the
# native device declare these instead of its adapter's (and leave out shader-f16): its kernels then run on any adapter,
# which is what tinyweb.export needs (python -m tinyweb.export sets it)
DEFAULT_LIMITS = {"max-storage-buffers-per-shader-stage": 8, "max-compute-workgroups-per-dimension": 65535,
                  "max-storage-buffer-binding-size": 128 << 20, "max-buffer-size": 256 << 20,
                  "max-compute-invocations-per-workgroup": 256, "max-compute-workgroup-size-x": 256,
                  "max-compute-workgroup-size-y": 256, "max-compute-workgroup-size-z": 64,
                  "max-compute-workgroup-storage-size": 16384}

# the portable target's register-tiling budget (Renderer.max_upcast_reads; a quarter of it for small windows: see
# heuristics.upcast_budget): SwiftShader lost the device compiling a YOLOv8 head kernel that read 192 values a loop step,
# and its compile time grows with the unrolled code (about 0.25 ms per WGSL line; 32 for all kernels cut EfficientNet-Lite0's
# pipelines from 2.75 to 1.85 s of CPU but cost 11-28% per inference: the small windows alone cost nothing)
PORTABLE_UPCAST_READS = 64

def portable_limits() -> bool:
  """Whether TINYWEB_WEBGPU_LIMITS asks for WebGPU's default limits ("default"); anything else but unset is refused."""
  v = os.environ.get("TINYWEB_WEBGPU_LIMITS", "")
  if v not in ("", "adapter", "default"):
    raise ValueError(f"TINYWEB_WEBGPU_LIMITS={v!r}: expected 'default' (WebGPU's default limits) or 'adapter' (the adapter's, the default)")
  return v == "default"

def camel(limit: str) -> str:
  """'max-buffer-size' -> 'maxBufferSize' (the name in the browser's GPUSupportedLimits)."""
  first, *rest = limit.split("-")
  return first + "".join(p[:1].upper() + p[1:] for p in rest)

def padded_size(nbytes: int) -> int:
  """WebGPU buffer sizes and copies are multiples of 4 bytes."""
  return (max(nbytes, 4) + 3) // 4 * 4

class WGSLCompiler(Compiler):
  """WGSL is compiled by the driver when the pipeline is created; here the source is just passed on."""
  def compile(self, src: str) -> bytes: return src.encode()

class WebGPUDeviceBase(Compiled):
  """Set up from an adapter's description: `limits` (kebab-case names -> values), `features` (names), `adapter_text`
  (its names, to recognise drivers with known quirks) and whether it is a real GPU (it then ranks above CPU devices).
  `portable`: kernels for any adapter (tinyweb.export's target, TINYWEB_WEBGPU_LIMITS=default): the limits passed are
  the defaults, no f16, no workgroup tiles or grouped reductions, whose barriers CPU-emulated adapters (SwiftShader,
  the browsers' fallback) run very slowly, and register tiling within PORTABLE_UPCAST_READS."""
  def setup(self, name: str, limits: dict, features, adapter_text: str, is_real_gpu: bool, allocator, program_cls,
            portable: bool = False):
    self.limits, self.features, self.is_real_gpu = dict(limits), set(features), is_real_gpu
    self.adapter_text = adapter_text.strip()   # (what tinyweb.export records as the adapter it captured on)
    self.max_binding = self.limits["max-storage-buffer-binding-size"]
    self.max_storage_buffers = self.limits["max-storage-buffers-per-shader-stage"]
    # lavapipe/SwiftShader get no workgroup tiles and share a reduction across a workgroup only when it has very few
    # outputs: their barriers cost more than the loads they save (lavapipe, EfficientNet-Lite0: 701 -> 275 ms without
    # grouped reductions; SwiftShader 22 s -> 0.8 s). llvmpipe (lavapipe) stops the loops of one shader invocation after
    # 65535 iterations in all, silently (Mesa's LP_MAX_TGSI_LOOP_ITERATIONS): the lowering then still splits large
    # reductions across workgroup threads, and refuses kernels that would loop longer
    self.portable = portable
    renderer = WGSLRenderer(has_f16="shader-f16" in self.features and not os.environ.get("TINYWEB_WEBGPU_NO_F16") and not portable,
                            max_local_size=min(self.limits["max-compute-invocations-per-workgroup"], self.limits["max-compute-workgroup-size-x"]),
                            max_groups=self.limits["max-compute-workgroups-per-dimension"],
                            max_buffers=self.max_storage_buffers,   # the scheduler splits kernels that would bind more
                            workgroup_tiles=is_real_gpu and not portable, group_reductions=is_real_gpu and not portable,
                            max_upcast_reads=PORTABLE_UPCAST_READS if portable else 0,
                            max_loop_iterations=65535 if "llvmpipe" in adapter_text.lower() else None)
    Compiled.__init__(self, name, allocator, renderer, WGSLCompiler(), program_cls)

  def buffer_size(self, nbytes: int) -> int:
    """The size to allocate for `nbytes`, or MemoryError when the adapter cannot bind a buffer that large."""
    if (size := padded_size(nbytes)) > self.max_binding:
      raise MemoryError(f"{self.name}: a buffer of {nbytes} bytes exceeds the adapter's maxStorageBufferBindingSize "
                        f"({self.max_binding} bytes); split the tensor")
    return size

  def binding_count(self, name: str, src: str) -> int:
    """How many storage buffers kernel `name` binds; RuntimeError when the adapter allows fewer per shader stage."""
    n = len(re.findall(r"@binding\(", src))
    if n > self.max_storage_buffers:
      raise RuntimeError(f"{self.name}: kernel {name} uses {n} buffers; the adapter allows "
                         f"{self.max_storage_buffers} storage buffers per shader stage")
    return n
