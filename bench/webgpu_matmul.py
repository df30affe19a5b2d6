"""512x512 f32 matmul on WEBGPU: tinyweb's generated kernel next to a hand-written 4x4 register-blocked WGSL kernel,
on the same wgpu device, in the same run (issue 3). `python -m bench.webgpu_matmul [--n 512] [--repeats 5]`"""
from __future__ import annotations
import argparse, statistics, time
import numpy as np
from tinyweb import Tensor, Device, GlobalCounters

# each invocation computes a 4x4 block of C; A, B, C are row-major N x N
BLOCKED_WGSL = """
@group(0) @binding(0) var<storage, read_write> C: array<f32>;
@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
const N: u32 = {N}u;
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let row = gid.y * 4u; let col = gid.x * 4u;
  if (row >= N || col >= N) { return; }
  var acc: array<vec4<f32>, 4>;
  for (var k = 0u; k < N; k++) {
    let b = vec4<f32>(B[k * N + col], B[k * N + col + 1u], B[k * N + col + 2u], B[k * N + col + 3u]);
    for (var i = 0u; i < 4u; i++) { acc[i] += A[(row + i) * N + k] * b; }
  }
  for (var i = 0u; i < 4u; i++) {
    for (var j = 0u; j < 4u; j++) { C[(row + i) * N + col + j] = acc[i][j]; }
  }
}
"""

def time_blocked(n: int, a: np.ndarray, b: np.ndarray, repeats: int) -> tuple[list[float], np.ndarray]:
  dev = Device["WEBGPU"]
  w, d = dev.wgpu, dev.device
  usage = w.BufferUsage.STORAGE | w.BufferUsage.COPY_SRC | w.BufferUsage.COPY_DST
  ba, bb = d.create_buffer_with_data(data=a.tobytes(), usage=usage), d.create_buffer_with_data(data=b.tobytes(), usage=usage)
  bc = d.create_buffer(size=n * n * 4, usage=usage)
  pipe = d.create_compute_pipeline(layout="auto", compute={"module": d.create_shader_module(code=BLOCKED_WGSL.replace("{N}", str(n))),
                                                           "entry_point": "main"})
  bg = d.create_bind_group(layout=pipe.get_bind_group_layout(0),
                           entries=[{"binding": i, "resource": {"buffer": x, "offset": 0, "size": x.size}} for i, x in enumerate((bc, ba, bb))])
  times = []
  for _ in range(repeats + 1):   # the first launch compiles the shader: not counted
    st = time.perf_counter()
    enc = d.create_command_encoder()
    cp = enc.begin_compute_pass(); cp.set_pipeline(pipe); cp.set_bind_group(0, bg)
    cp.dispatch_workgroups((n // 4 + 7) // 8, (n // 4 + 7) // 8); cp.end()
    d.queue.submit([enc.finish()])
    dev.synchronize()
    times.append(time.perf_counter() - st)
  out = np.frombuffer(d.queue.read_buffer(bc), np.float32).reshape(n, n)
  return times[1:], out

def time_tinyweb(n: int, a: np.ndarray, b: np.ndarray, repeats: int) -> tuple[list[float], int, np.ndarray]:
  dev, times, kernels, out = Device["WEBGPU"], [], 0, None
  for _ in range(repeats + 1):   # the first run compiles the kernel: not counted
    ta, tb = Tensor(a, device="WEBGPU").realize(), Tensor(b, device="WEBGPU").realize()   # fresh inputs: no cached result
    c = ta @ tb
    GlobalCounters.reset()
    st = time.perf_counter()
    c.realize(); dev.synchronize()
    times.append(time.perf_counter() - st)
    kernels, out = GlobalCounters.kernel_count, c.numpy()
  return times[1:], kernels, out

def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--n", type=int, default=512)
  ap.add_argument("--repeats", type=int, default=5)
  args = ap.parse_args()
  ok, why = Device.check("WEBGPU")
  if not ok: raise SystemExit(f"WEBGPU unavailable: {why}")
  n = args.n
  rng = np.random.default_rng(0)
  a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
  ref = a @ b
  tw_times, kernels, tw_out = time_tinyweb(n, a, b, args.repeats)
  bl_times, bl_out = time_blocked(n, a, b, args.repeats)
  flop = 2 * n ** 3
  print(f"{n}x{n} f32 matmul on WEBGPU ({Device['WEBGPU'].info.get('device', '')}), median of {args.repeats}")
  for name, ts, out in (("tinyweb", tw_times, tw_out), ("hand-written 4x4 WGSL", bl_times, bl_out)):
    m = statistics.median(ts)
    print(f"  {name:24s} {m * 1e3:8.2f} ms {flop / m / 1e9:7.2f} GFLOP/s  max error {np.abs(out - ref).max():.1e}")
  print(f"  tinyweb kernels: {kernels}; tinyweb / hand-written time: {statistics.median(tw_times) / statistics.median(bl_times):.2f}x")

if __name__ == "__main__": main()
