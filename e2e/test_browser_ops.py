"""A representative subset of the op suite, run inside the browser (Pyodide) on each of its devices, WebGPU and WASM
(the browser's WebAssembly engine), and compared with the same snippet run natively on the CPU device in this test run.
Inputs come from Python's `random` with a fixed seed, so both sides compute on identical values; tensors are small
(SwiftShader is slow)."""
import pytest
from browser_harness import BrowserRunner, assert_close

@pytest.fixture(params=["WEBGPU", "WASM"])
def browser(request, page): return BrowserRunner(page, request.param)

INPUTS = """
import random
from tinyweb import Tensor, dtypes
rng = random.Random(0)
def rand(*shape, lo=-2.0, hi=2.0):
  if len(shape) == 1: return [rng.uniform(lo, hi) for _ in range(shape[0])]
  return [rand(*shape[1:], lo=lo, hi=hi) for _ in range(shape[0])]
"""

def check(browser, body: str, atol=1e-5, rtol=1e-5):
  got, want = browser.compare(INPUTS + body)
  assert_close(got, want, atol=atol, rtol=rtol)
  return got

def test_runs_on_its_device(browser):
  assert browser("from tinyweb import Tensor\nTensor([1.0], device=DEVICE).device") == browser.device

def test_the_default_device_is_wasm_where_webgpu_is_emulated(page):
  """WEBGPU on a real GPU's adapter; on a fallback adapter (SwiftShader: the CPU emulating a GPU, this machine's) WASM,
  which runs the same CPU's code far faster; the report says which and why."""
  report = page.evaluate("window.tinyweb.report")
  assert report["devices"]["WASM"] == "" and report["webgpu"] is not None
  assert report["device"] == ("WASM" if report["webgpu"]["isFallbackAdapter"] else "WEBGPU"), report
  assert report["reason"] and "real GPU" in report["reason"], report
  assert page.text_content("#device") == report["device"] and page.text_content("#device-reason") == report["reason"]
  assert BrowserRunner(page)("from tinyweb import Tensor\nTensor([1.0]).device") == report["device"]

def test_wasm_runs_on_the_pages_main_thread(main_page):
  """With Python in the page itself (no worker), where the browser is strictest about synchronous compiles (Chromium:
  up to 8 MB there), a matmul's and a padded conv's f32x4 kernels."""
  body = """
a, b = Tensor(rand(32, 64), device=DEVICE), Tensor(rand(64, 32), device=DEVICE)
x, w = Tensor(rand(1, 8, 16, 16), device=DEVICE), Tensor(rand(16, 8, 3, 3), device=DEVICE)
[(a @ b).relu().tolist(), x.conv2d(w, padding=1).relu().max_pool2d(2).tolist()]
"""
  check(BrowserRunner(main_page, "WASM"), body, atol=1e-4, rtol=1e-4)

def test_elementwise(browser):
  check(browser, """
a, b = Tensor(rand(3, 5), device=DEVICE), Tensor(rand(3, 5), device=DEVICE)
i = Tensor([[rng.randint(-50, 50) for _ in range(5)] for _ in range(3)], device=DEVICE)
[(a + b).tolist(), (a * b - 1).tolist(), (a / (b.abs() + 0.5)).tolist(), a.relu().tolist(), (a > b).tolist(),
 (a < 0).where(a, b * 2).tolist(), a.maximum(b).tolist(), (i // 7).tolist(), (i % 7).tolist(), (i * 3 + 1).tolist(),
 a.cast(dtypes.int32).tolist(), (i.cast(dtypes.uint8) + 200).tolist(), (a.clip(-1, 1) ** 2).tolist()]
""")

def test_transcendental_and_special_values(browser):
  # WGSL lets sin/cos be off by 2^-11 (absolute) on [-pi, pi]; SwiftShader uses that freedom. Where WGSL leaves a
  # result indeterminate (log2(-1), exp2(NaN), ...) the renderer makes it what C gives.
  check(browser, """
a = Tensor(rand(4, 6, lo=0.1, hi=3.0), device=DEVICE)
z = Tensor([0.0, 1.0, -1.0, float("inf"), float("nan")], device=DEVICE)
[a.exp().tolist(), a.log().tolist(), a.sqrt().tolist(), a.sin().tolist(), a.tanh().tolist(), a.sigmoid().tolist(),
 (z / 0).tolist(), z.log().tolist(), z.sqrt().tolist(), z.sin().tolist(), z.exp().tolist(), z.sigmoid().tolist(),
 Tensor([float("inf"), float("nan"), 2.0], device=DEVICE).maximum(1.0).tolist()]
""", atol=2**-11, rtol=1e-4)

def test_sin_of_large_arguments(browser):
  # the WGSL renderer takes whole turns off before sin, so the result stays within WGSL's 2^-11 for sin on [-pi, pi]
  # (without that, SwiftShader's sin is off by 1e-3 at 1e5 and by 0.3 at 1e7)
  check(browser, """
x = Tensor([1e3, 12345.678, -3e4, 1e5, 7e5, 0.001, -3.14159], device=DEVICE)
[x.sin().tolist(), x.cos().tolist()]
""", atol=2**-11, rtol=0)

def test_reductions(browser):
  check(browser, """
a = Tensor(rand(4, 5, 6), device=DEVICE)
[a.sum().item(), a.sum(axis=1).tolist(), a.max(axis=2).tolist(), a.min(axis=0).tolist(), a.mean(axis=(0, 2)).tolist(),
 a.argmax(axis=1).tolist(), a.std().item(), a.cumsum(axis=2).tolist(), (a * a).sum(axis=-1, keepdim=True).tolist()]
""", atol=1e-4)

def test_movement(browser):
  check(browser, """
a = Tensor(rand(2, 3, 4), device=DEVICE)
[a.reshape(6, 4).tolist(), a.permute(2, 0, 1).tolist(), a[:, 1:, ::2].tolist(), a.flip(1).tolist(),
 a.pad(((0, 0), (1, 0), (0, 2))).tolist(), a[:, :1].expand(2, 3, 4).tolist(), a.cat(a * 2, dim=1).tolist(),
 Tensor.stack(a[0], a[1]).tolist(), a.T.contiguous().tolist(), a[1, 2].tolist(), a.shrink(((1, 2), (0, 2), (1, 3))).tolist()]
""")

def test_matmul(browser):
  check(browser, """
a, b = Tensor(rand(5, 7), device=DEVICE), Tensor(rand(7, 3), device=DEVICE)
c, d = Tensor(rand(2, 4, 6), device=DEVICE), Tensor(rand(2, 6, 5), device=DEVICE)
[(a @ b).tolist(), (c @ d).tolist(), (a @ b).relu().sum(0).tolist(), a.T.matmul(a).tolist()]
""", atol=1e-4)

def test_conv2d_and_pooling(browser):
  check(browser, """
x = Tensor(rand(2, 3, 7, 7), device=DEVICE)
w, bias = Tensor(rand(4, 3, 3, 3), device=DEVICE), Tensor(rand(4), device=DEVICE)
[x.conv2d(w, bias).tolist(), x.conv2d(w, padding=1, stride=2).tolist(), x.conv2d(w[:, :1].expand(4, 3, 3, 3), dilation=2).tolist(),
 x.max_pool2d(2).tolist(), x.avg_pool2d(3, stride=2).tolist()]
""", atol=1e-4)

def test_softmax(browser):
  check(browser, """
a = Tensor(rand(3, 10, lo=-5.0, hi=5.0), device=DEVICE)
[a.softmax(-1).tolist(), a.log_softmax(-1).tolist(), a.softmax(0).tolist(), (a * 30).softmax(-1).tolist()]
""", atol=1e-5)

def test_mlp_backward_and_sgd_step(browser):
  check(browser, """
from tinyweb import nn
from tinyweb.nn.optim import SGD
x = Tensor(rand(8, 5), device=DEVICE)
labels = Tensor([rng.randrange(3) for _ in range(8)], device=DEVICE)
w1 = Tensor(rand(5, 16, lo=-0.5, hi=0.5), device=DEVICE, requires_grad=True)
b1 = Tensor(rand(16, lo=-0.1, hi=0.1), device=DEVICE, requires_grad=True)
w2 = Tensor(rand(16, 3, lo=-0.5, hi=0.5), device=DEVICE, requires_grad=True)
opt = SGD([w1, b1, w2], lr=0.1)
losses = []
for _ in range(3):
  opt.zero_grad()
  loss = (x @ w1 + b1).relu().matmul(w2).sparse_categorical_crossentropy(labels)
  loss.backward()
  grads = [w1.grad.tolist(), b1.grad.tolist(), w2.grad.tolist()]
  opt.step()
  losses.append(loss.item())
[losses, grads, w2.tolist()]
""", atol=1e-5, rtol=1e-4)

def test_integer_and_bool_tensors(browser):
  check(browser, """
u = Tensor([rng.randrange(256) for _ in range(37)], device=DEVICE, dtype=dtypes.uint8)
m = Tensor([rng.random() < 0.5 for _ in range(37)], device=DEVICE)
[u[1::3].tolist(), (u + u).tolist(), m.tolist(), (m & (u > 100)).tolist(), m.where(u, 0).sum().item()]
""")

def test_jitted_adam_step(browser):
  # TinyJit replays recorded launches: in the browser they go into the batched command encoder like any other launch
  check(browser, """
from tinyweb import TinyJit
from tinyweb.nn.optim import Adam
w = Tensor(rand(6, 4, lo=-0.5, hi=0.5), device=DEVICE, requires_grad=True)
opt = Adam([w], lr=0.05)
@TinyJit
def step(x, y):
  opt.zero_grad()
  loss = ((x @ w).tanh() - y).square().mean()
  loss.backward()
  opt.step()
  return loss.realize()
batches = [(Tensor(rand(5, 6), device=DEVICE), Tensor(rand(5, 4, lo=-1.0, hi=1.0), device=DEVICE)) for _ in range(5)]
[[step(x, y).item() for x, y in batches], w.tolist()]
""", atol=1e-5, rtol=1e-4)
