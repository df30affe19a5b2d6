"""Runs a schedule: lowers each kernel AST, renders and compiles it (all cached), launches it, and reports.

DEBUG=1 prints a summary per realize, DEBUG=2 one line per kernel (time, GFLOP/s, GB/s), DEBUG=3 adds the kernel's
lowered loop structure, DEBUG=4 prints the generated source."""
from __future__ import annotations
import functools, time
from dataclasses import dataclass
from tinyweb.device import Device, Buffer
from tinyweb.helpers import DEBUG, BEAM, NOOPT, TILES, GlobalCounters, prod
from tinyweb.uop import UOp, Ops
from tinyweb.codegen.lower import lower, Program
from tinyweb.schedule import ScheduleItem

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

_kernel_cache: dict[tuple[str, UOp, int, int, int], CompiledKernel] = {}   # (device, ast, BEAM, NOOPT, TILES)
kernel_observers: list = []   # fn(device, ast), called when get_kernel builds a kernel (the tests' CUDA compile check)
capturing: list[list] = []   # TinyJit appends a list here to record every launch as (kernel or None for a copy, buffers)

INDEX_MAX = 2**31 - 1   # index arithmetic is 32-bit on every target (int in C, i32 in WGSL)

def check_index_range(ast: UOp, device: str):
  """Refuse a kernel whose index math would wrap: a dimension past 32 bits, or a reshape of a view with more elements
  than that (a reshape flattens the index, up to the view's size). Huge broadcasts are fine while no index is flat."""
  for u in ast.toposort():
    if not u.shape: continue
    flat = max(u.size, u.src[0].size) if u.op is Ops.RESHAPE else max(u.shape)
    if flat > INDEX_MAX:
      raise OverflowError(f"{device}: a kernel {'reshapes' if u.op is Ops.RESHAPE else 'indexes'} a view of shape "
                          f"{u.src[0].shape if u.op is Ops.RESHAPE else u.shape}, {flat} elements along one flat index, but "
                          f"index math is 32-bit (< 2^31); split the tensor or realize() a smaller part first")

def get_kernel(device: str, ast: UOp) -> CompiledKernel:
  key = (device, ast, BEAM.value, NOOPT.value, TILES.value)
  if (k := _kernel_cache.get(key)) is None:
    dev = Device[device]
    check_index_range(ast, device)
    opts = None   # the heuristics choose (or NOOPT)
    if BEAM >= 1 and not NOOPT:
      from tinyweb.search import beam_search   # imported when first needed: it imports this module
      opts = beam_search(ast, device, BEAM.value).opts
    prog = lower(ast, dev.renderer, opts)
    src = dev.renderer.render(prog)
    if DEBUG >= 3: print(f"{prog.name}: loops {[u.src[0].arg for u in prog.uops if u.op is Ops.RANGE]} optimizations {prog.opts or 'none'}")
    if DEBUG >= 4: print(src)
    k = _kernel_cache[key] = CompiledKernel(prog, dev.get_program(prog.name, src), src)
    for observe in kernel_observers: observe(device, ast)
  return k

def run_schedule(items: list[ScheduleItem]):
  st = time.perf_counter()
  devices = set()
  for it in items:
    for b in it.bufs: b.ensure_allocated()
    if it.kind == "copy":
      dst, src = it.bufs
      t0 = time.perf_counter()
      dst.copyin(src.as_memoryview())
      for cap in capturing: cap.append((None, it.bufs))
      et = time.perf_counter() - t0
      GlobalCounters.global_mem += dst.nbytes
      if DEBUG >= 2: print(f"*** copy {src.device} -> {dst.device} {dst.nbytes:>10d} bytes {et*1e3:8.3f} ms")
      continue
    device = it.bufs[0].device
    for b in it.bufs[1:]:
      if b.device != device:
        raise RuntimeError(f"kernel reads a buffer on {b.device} while writing on {device}: move tensors with .to() first")
    k = get_kernel(device, it.ast)
    devices.add(device)
    et = k.run([b.handle for b in it.bufs], wait=DEBUG >= 2)
    it.bufs[0].stores += 1
    for cap in capturing: cap.append((k, it.bufs))
    GlobalCounters.kernel_count += 1
    GlobalCounters.global_ops += k.program.flops
    GlobalCounters.global_mem += k.program.mem_estimate
    if et is not None: GlobalCounters.time_sum_s += et
    if DEBUG >= 2:
      p = k.program
      t = max(et or 0.0, 1e-9)
      print(f"*** {device:6s} {GlobalCounters.kernel_count:4d} {p.name:28s} shape {str(p.global_shape):18s} "
            f"{t*1e3:9.3f} ms {p.flops/t/1e9:9.2f} GFLOP/s {p.mem_estimate/t/1e9:8.2f} GB/s")
  for d in devices: Device[d].flush()
  if DEBUG >= 1 and items:
    print(f"realize: {len(items)} items ({sum(it.kind == 'kernel' for it in items)} kernels) in {(time.perf_counter()-st)*1e3:.2f} ms")
