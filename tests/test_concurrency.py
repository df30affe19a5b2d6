"""Threads, asyncio tasks and os.fork(): settings (grad mode, training mode, Context) are per thread and per task; a
device is used by several threads at once with every result right; a TinyJit capture sees only its own thread; a forked
child keeps computing on CPU/LLVM/PYTHON and refuses, clearly, a device whose runtime does not survive a fork; the
default device is picked without starting the others."""
import asyncio, ctypes, json, os, subprocess, sys, textwrap, threading, time
import numpy as np
import pytest
import torch
from tinyweb import Tensor, Device, Context, TinyJit, dtypes
from tinyweb.device import Allocator, _DeviceRegistry
from tinyweb.helpers import DEBUG, getenv
from tinyweb.uop import UOp, Ops
from test_cuda import nvrtc, fake_driver  # noqa: F401 (fixtures)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# an exception in another thread's weakref callback or finalizer is only printed: here it fails the test
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnraisableExceptionWarning")

def run_threads(fn, n: int):
  """fn(k) for k in range(n), each in its own thread, started together; the first exception of any is raised here."""
  errors, start = [], threading.Barrier(n)
  def body(k):
    try:
      start.wait(60)
      fn(k)
    except BaseException as e: errors.append(e)
  threads = [threading.Thread(target=body, args=(k,)) for k in range(n)]
  for t in threads: t.start()
  for t in threads: t.join(timeout=600)
  assert not any(t.is_alive() for t in threads), "a thread hung"
  if errors: raise errors[0]

def wait(event: threading.Event):
  assert event.wait(60), "timed out waiting for another thread"

@pytest.fixture
def frequent_thread_switches():
  """Threads switch every microsecond instead of every 5 ms: races in a few lines of Python show up at once."""
  old = sys.getswitchinterval()
  sys.setswitchinterval(1e-6)
  yield
  sys.setswitchinterval(old)

def requires_grad(lib) -> bool:
  if lib is torch: return (torch.tensor([1.0], requires_grad=True) * 2).requires_grad
  return bool((Tensor([1.0], requires_grad=True) * 2).requires_grad)

# ---------------------------------------------------------------- settings per thread and task

def test_no_grad_in_another_thread_leaves_this_threads_gradients():
  if getenv("NO_GRAD", 0) or getenv("TRAINING", 0): pytest.skip("NO_GRAD/TRAINING are set in the environment")
  stop = threading.Event()
  def other():   # every form that turns gradients off or training on, over and over
    while not stop.is_set():
      with Tensor.no_grad(), Tensor.train(), Context(DEBUG=0): pass
      Tensor.no_grad, Tensor.training = True, True
  t = threading.Thread(target=other)
  t.start()
  try:
    for _ in range(200):
      a = Tensor([1.0, -2.0], requires_grad=True)
      loss = (a * a * 3).sum()
      assert not Tensor.no_grad and not Tensor.training
      loss.backward()
      np.testing.assert_allclose(a.grad.numpy(), [6.0, -12.0])   # d(3a^2)/da = 6a
  finally:
    stop.set()
    t.join()

def test_a_new_thread_starts_from_the_defaults():
  if getenv("NO_GRAD", 0) or getenv("TRAINING", 0): pytest.skip("NO_GRAD/TRAINING are set in the environment")
  if getattr(sys.flags, "thread_inherit_context", False): pytest.skip("threads inherit their creator's context here")
  seen = {}
  def probe():
    a = Tensor([2.0], requires_grad=True)
    (a * a).sum().backward()
    seen.update(no_grad=bool(Tensor.no_grad), training=Tensor.training, debug=DEBUG.value, grad=a.grad.tolist())
  debug = DEBUG.value   # (the environment's)
  with Tensor.no_grad(), Tensor.train(), Context(DEBUG=debug + 1):
    t = threading.Thread(target=probe)
    t.start()
    t.join()
    assert Tensor.no_grad and Tensor.training and DEBUG.value == debug + 1
  assert seen == dict(no_grad=False, training=False, debug=debug, grad=[4.0])
  assert not Tensor.no_grad and not Tensor.training

def test_nested_blocks_and_decorators_restore_like_torch():
  def trace(lib) -> list:
    off, on = (torch.no_grad, torch.enable_grad) if lib is torch else (Tensor.no_grad, lambda: Context(NO_GRAD=0))
    out = [requires_grad(lib)]
    with off():
      out.append(requires_grad(lib))
      with on():
        out.append(requires_grad(lib))
        with off(): out.append(requires_grad(lib))
        out.append(requires_grad(lib))
      out.append(requires_grad(lib))
      try:
        with on(): raise KeyError
      except KeyError: out.append(requires_grad(lib))
    out.append(requires_grad(lib))
    @off()
    def depth(n: int) -> list: return [requires_grad(lib)] + (depth(n - 1) if n else [])
    out += depth(3) + [requires_grad(lib)]
    return out
  assert trace(Tensor) == trace(torch) == [True, False, True, False, True, False, False, True, False, False, False, False, True]
  @Tensor.no_grad   # without the call, and Tensor.train() as a decorator
  def plain(): return requires_grad(Tensor)
  @Tensor.train()
  def training(): return Tensor.training
  assert (plain(), requires_grad(Tensor), training(), Tensor.training) == (False, True, True, False)

def test_one_manager_open_in_two_threads_at_once():
  # thread 0 enters the shared `Tensor.no_grad` object, then thread 1 does; thread 0 leaves first: its gradients are back
  # on while thread 1's stay off until it leaves too
  step = [threading.Event() for _ in range(3)]
  seen = {}
  def run(k):
    if k == 0:
      with Tensor.no_grad:
        step[0].set()
        wait(step[1])
      seen["0 after"] = requires_grad(Tensor)
      step[2].set()
    else:
      wait(step[0])
      with Tensor.no_grad:
        step[1].set()
        wait(step[2])
        seen["1 inside"] = requires_grad(Tensor)
      seen["1 after"] = requires_grad(Tensor)
  run_threads(run, 2)
  assert seen == {"0 after": True, "1 inside": False, "1 after": True}

def test_asyncio_tasks_have_their_own_grad_mode():
  async def in_no_grad(entered: asyncio.Event, leave: asyncio.Event) -> bool:
    with Tensor.no_grad():
      entered.set()
      await leave.wait()   # other tasks run meanwhile
      return requires_grad(Tensor)
  async def backward(entered: asyncio.Event) -> list:
    await entered.wait()
    a = Tensor([3.0], requires_grad=True)
    (a * a).sum().backward()
    return a.grad.tolist()
  async def probe() -> bool: return requires_grad(Tensor)
  @Tensor.no_grad()
  async def decorated() -> bool:
    await asyncio.sleep(0)
    return requires_grad(Tensor)
  async def main():
    entered, leave = asyncio.Event(), asyncio.Event()
    waiting = asyncio.create_task(in_no_grad(entered, leave))
    grad = await asyncio.create_task(backward(entered))
    leave.set()
    with Tensor.no_grad(): inherited = await asyncio.create_task(probe())   # a task starts from a copy of its creator's
    return grad, await waiting, inherited, await decorated(), requires_grad(Tensor)
  assert asyncio.run(main()) == ([6.0], False, False, False, True)

# ---------------------------------------------------------------- devices from several threads

def test_threads_compute_on_one_device(device, frequent_thread_switches):
  rounds = 3 if device == "PYTHON" else 12
  a = np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32)
  def work(k):
    k += 1
    # every thread launches the same kernel on buffers of its own (CL: one kernel object's arguments)
    x, y = Tensor(np.full(64, k, np.float32), device=device), Tensor(np.full(64, 2 * k, np.float32), device=device)
    for _ in range(rounds):
      assert (Tensor.ones(128, device=device) * k).sum().item() == 128 * k
      assert (x * y + 1).sum().item() == 64 * (2 * k * k + 1)
      if device != "PYTHON":   # big enough to be split over the cores (CPU, LLVM: the thread pools)
        assert (Tensor.ones(256, 1024, device=device) * k).sum(1).tolist() == [1024.0 * k] * 256
      np.testing.assert_allclose((Tensor(a * k, device=device) @ Tensor(a, device=device)).numpy(), (a * k) @ a, rtol=1e-5, atol=1e-5)
  run_threads(work, 4)

def test_threads_draw_distinct_random_numbers(frequent_thread_switches):
  """Each rand() takes its own slice of the stream: the snapshot and advance of the shared state are one step."""
  draws = [[], []]
  def work(k):
    for _ in range(150): draws[k].append(tuple(Tensor.rand(4).tolist()))
  run_threads(work, 2)
  assert len(set(draws[0] + draws[1])) == 300

def test_backward_in_one_thread_while_another_realizes(device):
  rng = np.random.default_rng(1)
  x, w = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32)
  tw = torch.tensor(w, requires_grad=True)
  (torch.tensor(x) @ tw).relu().square().sum().backward()
  rounds = 3 if device == "PYTHON" else 10
  def run(k):
    for r in range(rounds):
      if k == 0:
        wt = Tensor(w, device=device, requires_grad=True)
        (Tensor(x, device=device) @ wt).relu().square().sum().backward()
        np.testing.assert_allclose(wt.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-5)
      else:
        with Tensor.no_grad(): np.testing.assert_allclose((Tensor(x, device=device) * r).sum(1).numpy(), (x * r).sum(1), rtol=1e-5, atol=1e-5)
  run_threads(run, 2)

def test_graph_nodes_stay_one_object_per_key_across_threads(frequent_thread_switches):
  # UOps are hash-consed: the same op, dtype, sources and arg must give the same object in every thread, or a kernel
  # could hold two copies of one loop variable. Nodes that die at once (their table entry dropped) while other threads
  # make them again must not break the table either (an error in that weakref callback is only printed: see pytestmark)
  for r in range(100):
    built: list = [None] * 4
    def build(k):
      u = UOp(Ops.CONST, dtypes.float32, (), 0.5 + r * 1e-3 + 1e4)   # new to the process
      built[k] = chain = [u]
      for _ in range(20): chain.append(chain[-1] + chain[0])
      for j in range(20): UOp(Ops.CONST, dtypes.float32, (), 0.25 + j * 1e-3 + 2e4) * 2   # made and dropped
    run_threads(build, 4)
    assert all(all(a is b for a, b in zip(built[0], other)) for other in built[1:]), f"round {r}"

def test_allocator_pool_shared_by_threads():
  # threads give buffers back to the pool (of new sizes too) while another empties it (free_cache, as CUDA does when out
  # of memory): no error, and every buffer given back is released exactly once
  released, done = [], threading.Event()
  class HostAllocator(Allocator):
    def _alloc(self, nbytes: int): return bytearray(nbytes)
    def _free(self, handle, nbytes: int):
      released.append(handle)
      time.sleep(0)   # (lets other threads run, as a driver call does)
  pool, frees = HostAllocator(), 5000
  def run(k):
    if k == 0:
      while not done.is_set(): pool.free_cache()
    else:
      for i in range(frees): pool.free(bytearray(1), 1 + i * 3 + k)
      if k == 1: done.set()
  run_threads(run, 3)
  pool.free_cache()
  assert len(released) == len({id(h) for h in released}) == 2 * frees

# ---------------------------------------------------------------- TinyJit and threads

def test_jit_capture_records_only_its_own_thread(device):
  # while thread 0's TinyJit captures (its second call), thread 1 computes w * 2 too: the capture must neither record
  # thread 1's launches nor reuse thread 1's w * 2 (a replay after w changes would then read a stale buffer)
  w = Tensor(np.arange(8, dtype=np.float32), device=device).realize()
  computed, capturing = threading.Event(), threading.Event()
  def step(x: Tensor) -> Tensor: return (x + w * 2).realize()
  def waits_in_capture(x: Tensor) -> Tensor:
    if jitted.calls == 2:
      capturing.set()
      wait(computed)
    return step(x)
  alone, jitted, x = TinyJit(step), TinyJit(waits_in_capture), Tensor(np.ones(8, np.float32), device=device)
  for _ in range(2): alone(x)
  jitted(x)
  def run(k):
    if k == 0: jitted(x)
    else:
      wait(capturing)
      for _ in range(3): (w * 2).realize(), (w - 1).sum().realize()
      computed.set()
  run_threads(run, 2)
  assert len(jitted.launches) == len(alone.launches), (jitted.launches, alone.launches)
  w.assign(Tensor(np.full(8, 10.0, np.float32), device=device)).realize()
  np.testing.assert_allclose(jitted(x).numpy(), np.full(8, 21.0))

def test_jit_refuses_a_call_while_another_thread_is_in_one():
  inside, leave = threading.Event(), threading.Event()
  def slow(x: Tensor) -> Tensor:
    inside.set()
    wait(leave)
    return x + 1
  jitted, x = TinyJit(slow), Tensor([1.0])
  t = threading.Thread(target=jitted, args=(x,))
  t.start()
  wait(inside)
  try:
    with pytest.raises(RuntimeError, match="slow is running in another thread.*one TinyJit per thread"): jitted(x)
  finally:
    leave.set()
    t.join()
  assert jitted(x).tolist() == [2.0]   # one at a time is fine, from any thread

def test_cuda_from_another_thread_makes_its_context_current(nvrtc, fake_driver):
  """The driver's current context is per thread: a thread that did not create the device must make it current before
  its first call (the fake driver fails calls without one, as libcuda does)."""
  from tinyweb.backends.cuda import CUDADevice
  dev = CUDADevice("CUDA")
  data = np.arange(6, dtype=np.float32)
  def roundtrip(k):
    h = dev.allocator.alloc(data.nbytes)
    dev.allocator.copyin(h, memoryview(data * k).cast("B"))
    out = np.zeros_like(data)
    dev.allocator.copyout(memoryview(out).cast("B"), h)
    np.testing.assert_array_equal(out, data * k)
  run_threads(roundtrip, 3)
  assert ctypes.c_int.in_dll(fake_driver, "live_allocs").value == 3

# ---------------------------------------------------------------- fork

FORK = textwrap.dedent("""
  import json, os, sys, threading, time
  from tinyweb import Tensor, Device
  dev, forks = sys.argv[1], int(sys.argv[2])
  stop = threading.Event()
  def busy():   # picks the default device, then realizes (and compiles: the kernel cache is empty) while the main thread forks
    Device.DEFAULT
    i = 0
    while not stop.is_set():
      i += 1
      (Tensor.ones(64 + i % 40, device=dev) * i).sum().item()
  threading.Thread(target=busy, daemon=True).start()
  results = []
  for i in range(forks):
    time.sleep(0.05 * (i % 3))
    pid = os.fork()
    if pid == 0:
      try: ok = Device.DEFAULT and (Tensor.ones(100 + i, device=dev) * 3).sum().item() == 3 * (100 + i)   # a new kernel
      except BaseException as e:
        print(f"{type(e).__name__}: {e}", flush=True)
        os._exit(2)
      os._exit(0 if ok else 3)
    deadline = time.time() + 60
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.time() < deadline: time.sleep(0.01)
    if done[0] == 0:
      os.kill(pid, 9)
      os.waitpid(pid, 0)
      results.append("hung")
    else: results.append(os.waitstatus_to_exitcode(done[1]))
  stop.set()
  print(json.dumps(results))
""")

def run_script(code: str, *args, tmp_path, timeout=600) -> subprocess.CompletedProcess:
  env = {**os.environ, "TINYWEB_CACHE_DIR": str(tmp_path)}
  return subprocess.run([sys.executable, "-c", code, *map(str, args)], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)

@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")
@pytest.mark.parametrize("name", ["CPU", "LLVM", "PYTHON"])
def test_forked_children_keep_computing(name, tmp_path):
  if not (ok := Device.check(name))[0]: pytest.skip(f"{name} unavailable: {ok[1]}")
  out = run_script(FORK, name, 8, tmp_path=tmp_path)
  assert out.returncode == 0, out.stderr
  assert json.loads(out.stdout.splitlines()[-1]) == [0] * 8, out.stdout

REFUSED = textwrap.dedent("""
  import os, sys
  from tinyweb import Tensor
  dev = sys.argv[1]
  x = (Tensor.ones(4, device=dev) * 2).realize()
  assert x.sum().item() == 8
  pid = os.fork()
  if pid == 0:
    try:
      (Tensor.ones(4, device=dev) * 3).sum().item()
      os._exit(3)
    except RuntimeError as e: print(e, flush=True)
    try:
      x.tolist()   # a tensor of the parent's
      os._exit(4)
    except RuntimeError: pass
    os._exit(0 if (Tensor.ones(4, device="PYTHON") * 3).sum().item() == 12 else 5)   # a device the parent had not used
  print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
""")

@pytest.mark.skipif(not hasattr(os, "fork"), reason="no os.fork here")
@pytest.mark.parametrize("name", ["CL", "WEBGPU"])
def test_forked_child_refuses_a_device_that_cannot_survive_fork(name, tmp_path):
  if not (ok := Device.check(name))[0]: pytest.skip(f"{name} unavailable: {ok[1]}")
  out = run_script(REFUSED, name, tmp_path=tmp_path, timeout=120)
  assert out.returncode == 0, out.stderr
  message, status = out.stdout.strip().splitlines()
  assert status == "0", out.stdout
  assert f"device {name} is not available here: the parent process had started {name} before os.fork()" in message
  assert "'spawn'" in message

# ---------------------------------------------------------------- the default device

class FakeDevice:
  """A device for a test registry: records that it was created (which is what Device.DEFAULT should avoid)."""
  created: list = []
  def __init__(self, name: str):
    FakeDevice.created.append(name)
    self.is_real_gpu = name.startswith("GPU")

@pytest.mark.parametrize("gpu_here", [False, True])
def test_default_starts_only_the_devices_it_tries(gpu_here, monkeypatch):
  from tinyweb import device
  monkeypatch.delenv("DEV", raising=False)
  monkeypatch.setattr(device, "gpu_present", lambda: gpu_here, raising=False)
  monkeypatch.setattr(FakeDevice, "created", [])
  reg = _DeviceRegistry()
  reg.register("HOST", "test_concurrency:FakeDevice")
  reg.register("GPU_A", "test_concurrency:FakeDevice", gpu=True)
  reg.register("OTHER", "test_concurrency:FakeDevice")
  reg.register("GPU_B", "test_concurrency:FakeDevice", gpu=True)
  # without a GPU: the first device that works, and no other is created; with one: the first GPU runtime on a real GPU
  assert (reg.DEFAULT, FakeDevice.created) == (("GPU_A", ["GPU_A"]) if gpu_here else ("HOST", ["HOST"]))

def test_first_tensor_imports_no_other_runtime(tmp_path):
  from tinyweb import device
  if os.getenv("DEV"): pytest.skip(f"DEV={os.getenv('DEV')} chooses the default device")
  if device.gpu_present() or not Device.check("CPU")[0]: pytest.skip("the default here is not the CPU device alone")
  code = ("import sys, time\nstart = time.perf_counter()\nfrom tinyweb import Tensor, Device\nassert Tensor([1.0, 2.0]).sum().item() == 3\n"
          "print(Device.DEFAULT, sorted(m for m in ('wgpu', 'pyopencl', 'llvmlite') if m in sys.modules))")
  out = run_script(code, tmp_path=tmp_path, timeout=120)
  assert out.returncode == 0, out.stderr
  assert out.stdout.strip() == "CPU []"
