"""The browser WEBGPU runtime itself: validation errors as Python exceptions, reading without JSPI, the typed-array
helpers of web/tinyweb.ts, and the measurements (cold start, per-op overhead) printed at the end of the run."""
import re, time
from browser_harness import open_playground

def test_invalid_wgsl_raises_naming_the_kernel(browser):
  msg = browser("""
from tinyweb import Device
try: Device["WEBGPU"].get_program("broken_kernel", "@compute @workgroup_size(1) fn broken_kernel() { let x: f32 = 1u; }")
except RuntimeError as e: msg = str(e)
msg
""")
  assert "broken_kernel" in msg and "failed to compile" in msg and "f32" in msg, msg

def test_launch_validation_error_raises_at_the_next_read(browser):
  # a kernel launched with a buffer too few: WebGPU reports it only through an error scope
  msg = browser("""
from tinyweb import Tensor, Device
x = Tensor([1.0, 2.0, 3.0], device="WEBGPU").realize()
prog = Device["WEBGPU"].get_program("two_buffers", '''@group(0) @binding(0) var<storage, read_write> a: array<f32>;
@group(0) @binding(1) var<storage, read_write> b: array<f32>;
@compute @workgroup_size(1) fn two_buffers() { a[0] = b[0]; }''')
prog(x.uop.base.arg[0].handle)
try: x.tolist(); msg = "no error"
except RuntimeError as e: msg = str(e)
[msg, (x + 1).tolist()]
""")
  assert "validation error" in msg[0] and "two_buffers" in msg[0], msg[0]
  assert msg[1] == [2.0, 3.0, 4.0]   # the device still works afterwards

def test_debug_output_times_each_kernel(browser):
  # DEBUG=2 waits for every kernel (synchronize through JSPI) and prints its time
  out = browser("""
import contextlib, io
from tinyweb import Tensor, Context
buf = io.StringIO()
with contextlib.redirect_stdout(buf), Context(DEBUG=2):
  y = (Tensor([1.0, 2.0, 3.0], device="WEBGPU") * 4).sum().item()
[y, buf.getvalue()]
""")
  assert out[0] == 24.0
  assert "WEBGPU" in out[1] and " ms " in out[1] and "GFLOP/s" in out[1], out[1]

def test_reading_without_jspi_needs_the_async_variants(main_page):
  # Python called from JavaScript as a plain (not promising) call cannot block: .tolist() says what to use instead.
  # The async variants are then run with the runtime's run_sync replaced by one that fails, as in a browser without JSPI.
  # (Through Pyodide itself, tw.pyodide: there in the main-thread mode only.)
  got = main_page.evaluate("""async () => {
    const tw = window.tinyweb, g = tw.pyodide.globals.get("dict")();
    tw.pyodide.runPython(`
from pyodide.ffi import can_run_sync
from tinyweb import Tensor
from tinyweb.backends import webgpu_browser
def read_sync(t):
  try: t.tolist(); return [can_run_sync(), "no error"]
  except RuntimeError as e: return [can_run_sync(), str(e)]
async def read_async():
  def no_jspi(*args): raise AssertionError("run_sync was called")
  saved = webgpu_browser.run_sync, webgpu_browser.can_run_sync
  webgpu_browser.run_sync, webgpu_browser.can_run_sync = no_jspi, lambda: False
  try:
    t = (Tensor([[1.0, 2.0], [3.0, 4.0]], device="WEBGPU") * 10).sum(0)   # (new kernels: their checks are deferred too)
    return [await t.tolist_async(), list(await (t - 5).data_async())]
  finally: webgpu_browser.run_sync, webgpu_browser.can_run_sync = saved`, {globals: g});
    const t = tw.pyodide.runPython("Tensor([1.0, 2.0], device='WEBGPU') + 1", {globals: g});
    const sync = g.get("read_sync")(t).toJs();
    const r = await g.get("read_async")();
    const v = r.toJs(); r.destroy(); t.destroy(); g.destroy();
    return [sync, v];
  }""")
  (jspi, sync_error), (values, data) = got
  assert jspi is False
  assert "JSPI" in sync_error and "data_async" in sync_error, sync_error
  assert values == [40.0, 60.0] and data == [35.0, 55.0]

def test_typed_arrays_in_and_out(page):
  got = page.evaluate("""async () => {
    const tw = window.tinyweb;
    const counter = await tw.newGlobals();   // counts uploads that go straight from JavaScript memory to the device
    await tw.runPython(`
from tinyweb import Device
direct = []
def counting(alloc):
  def counted(handle, array, upload=alloc.copyin_js): direct.append(array.length); upload(handle, array)
  alloc.copyin_js = counted
for d in ("WEBGPU", "WASM"): counting(Device[d].allocator)`, {globals: counter});
    const a = await tw.tensor(new Float32Array([1, 2, 3, 4, 5, 6]), [2, 3], "WEBGPU");
    const b = await tw.tensor(new Int32Array([7, -8, 9]), undefined, "WEBGPU");
    const c = await tw.tensor(new Uint8Array([1, 2, 250, 4, 5]), undefined, "WEBGPU");   // 5 bytes: not a whole number of words, copied via Python
    const g = await tw.newGlobals(); await g.set("a", a); await g.set("b", b); await g.set("c", c);
    const prod = await tw.runPython("a @ a.T", {globals: g});
    const sum = await tw.runPython("b * 2", {globals: g});
    const bytes = await tw.runPython("c + 10", {globals: g});
    const out = [await tw.toTypedArray(prod), await tw.toTypedArray(sum), await tw.toTypedArray(bytes)];
    const w = await tw.tensor(new Float32Array([0.5, -1, 2, 8]), [2, 2], "WASM");   // (into the WASM device's memory)
    const wasm = Array.from(await tw.toTypedArray(w));
    const err = await tw.tensor(new Float64Array([1, 2]), undefined, "WEBGPU").then(() => "no error", (e) => `${e.name}: ${e.message}`);
    const direct = await tw.runPython("for d in ('WEBGPU', 'WASM'): del Device[d].allocator.copyin_js\\ndirect", {globals: counter});
    const shapeErr = await tw.tensor(new Float32Array(6), [4, 2], "WEBGPU").then(() => "no error", (e) => e.message);
    [a, b, c, w, prod, sum, bytes, g, counter].forEach((p) => p.destroy());
    return {types: out.map((x) => x.constructor.name), values: out.map((x) => Array.from(x)), err, shapeErr, direct, wasm,
            refs: [a, b, c, prod].map(String)};
  }""")
  assert got["types"] == ["Float32Array", "Int32Array", "Uint8Array"]
  assert got["values"] == [[14.0, 32.0, 32.0, 77.0], [14, -16, 18], [11, 12, 4, 14, 15]]   # [[1,2,3],[4,5,6]] @ its T; 260 wraps
  assert got["direct"] == [6, 3, 4]   # the Float32Array and the Int32Array; the 5 bytes took the other way; the WASM one
  assert got["wasm"] == [0.5, -1.0, 2.0, 8.0]
  assert "(4, 2)" in got["shapeErr"] and "6" in got["shapeErr"], got["shapeErr"]
  assert got["err"].startswith("PythonError: ") and "float64" in got["err"] and "WEBGPU" in got["err"], got["err"]
  assert got["refs"] == ["[PyRef Tensor [2,3] float32 on WEBGPU]", "[PyRef Tensor [3] int32 on WEBGPU]",
                         "[PyRef Tensor [5] uint8 on WEBGPU]", "[PyRef Tensor [2,2] float32 on WEBGPU]"]

def test_cold_start_and_dispatch_overhead(chromium, site, record_property):
  st, urls = time.perf_counter(), []
  page, _ = open_playground(chromium, site, on_request=urls.append)   # a new context: nothing cached
  try:
    marks = dict(page.evaluate("performance.getEntriesByType('mark').map((m) => [m.name, m.startTime / 1000])"))
    first = page.evaluate("window.tinyweb.runPython('from tinyweb import Tensor\\n(Tensor([1.0, 2.0]) + 1).tolist()')")
    cold = time.perf_counter() - st
    assert first == [2.0, 3.0]
    n = 200
    got = page.evaluate("""async (n) => {
      const r = await window.tinyweb.runPython(`
import time
from tinyweb import Tensor, Device
from tinyweb import engine
x = Tensor.zeros(64, device="WEBGPU").contiguous().realize()
for _ in range(5): x = (x + 1).realize()   # compiles the kernel
x.tolist()
st = time.perf_counter()
for _ in range(${n}): x = (x + 1).realize()
value = x.tolist()[0]
per_realize = (time.perf_counter() - st) / ${n}
with engine.recording() as launches: x = (x + 1).realize()
kernel, bufs = launches[0]
handles = [b.handle for b in bufs]
st = time.perf_counter()
for _ in range(${n}): kernel.run(handles)
Device["WEBGPU"].synchronize()
per_launch = (time.perf_counter() - st) / ${n}
[value, per_realize, per_launch, x.tolist()[0]]`);
      return r;
    }""", n)
  finally: page.context.close()
  foreign = [u for u in urls if not (u.startswith(site.url) or re.match(r"(data|blob):", u))]
  assert urls and foreign == [], foreign   # no CDN: Pyodide and the wheel come from the site itself
  value, per_realize, per_launch, last = got
  assert value == 5 + n and last == 6 + n   # (the raw launches recompute the same out = in + 1)
  record_property("measure:cold start, page open to first result (s)", round(cold, 2))
  record_property("measure:  of which: Pyodide boot (the wheel fetched meanwhile) / wheel unpack / tinyweb import+WebGPU device open (s)", " / ".join(
    f"{marks['tinyweb:' + b] - marks['tinyweb:' + a]:.2f}" for a, b in [("pyodide", "tinyweb"), ("tinyweb", "device"), ("device", "ready")]))
  record_property("measure:tiny op realize in the browser, graph+schedule+launch (ms)", round(per_realize * 1e3, 3))
  record_property("measure:kernel launch in the browser, recorded into a batch (ms)", round(per_launch * 1e3, 3))

def test_typed_arrays_out_of_each_dtype_copied_once(page):
  # toTypedArray copies a WEBGPU tensor once, from the mapped GPU buffer into the new array (never through Python's
  # memory: copyout_async is not called), and a PYTHON tensor once, from the interpreter's memory
  got = page.evaluate("""async () => {
    const tw = window.tinyweb, g = await tw.newGlobals();
    await tw.runPython(`
from tinyweb import Tensor, Device, dtypes
alloc, calls = Device["WEBGPU"].allocator, []
def counted(name, f):
  def call(*args): calls.append(name); return f(*args)
  return call
alloc.copyout_js, alloc.copyout_async = counted("js", alloc.copyout_js), counted("async", alloc.copyout_async)
x = Tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], device="WEBGPU").T * 1   # (a view: made contiguous first)
tensors = [x, Tensor([-128, -1, 0, 5, 127], dtype=dtypes.int8, device="WEBGPU"),
           Tensor([True, False, True], device="WEBGPU"), Tensor([65535, 1, 2], dtype=dtypes.uint16, device="WEBGPU"),
           Tensor([1.0, -2.0, 3.0], device="WEBGPU").cast(dtypes.bfloat16), Tensor.zeros(0, 3, device="WEBGPU"),
           Tensor([1.5, 2.5], device="PYTHON") * 2]`, {globals: g});
    const tensors = await g.get("tensors"), out = [];   // (a list of Tensors: an Array of PyRefs)
    for (const t of tensors) { out.push(await tw.toTypedArray(t)); t.destroy(); }
    const first = await tw.toTypedArray(await g.get("x"));
    first[0] = 99;   // an array of its own: neither the tensor nor a later read sees the write
    const again = Array.from(await tw.toTypedArray(await g.get("x")));
    const calls = await tw.runPython("del alloc.copyout_js, alloc.copyout_async\\ncalls", {globals: g});
    g.destroy();
    return {types: out.map((a) => a.constructor.name), values: out.map((a) => Array.from(a)), again, calls};
  }""")
  assert got["types"] == ["Float32Array", "Int8Array", "Uint8Array", "Uint16Array", "Uint16Array", "Float32Array", "Float32Array"]
  assert got["values"] == [[1, 4, 2, 5, 3, 6], [-128, -1, 0, 5, 127], [1, 0, 1], [65535, 1, 2], [0x3F80, 0xC000, 0x4040], [], [3, 5]]
  assert got["again"] == [1, 4, 2, 5, 3, 6]
  assert got["calls"] == ["js"] * 7   # 5 WEBGPU tensors with values, then x twice; the empty and the PYTHON one: no GPU read

def test_numpy_is_not_in_the_page_and_the_error_says_what_to_use(browser):
  # there is no Pyodide build of numpy to self-host offline: .numpy() (which imports it) fails saying what reads values
  got = browser("""
from tinyweb import Tensor
t = Tensor([1.0, 2.0], device=DEVICE)
try: t.numpy(); msg = "no error"
except ModuleNotFoundError as e: msg = [e.name, str(e)]
try:
  import numpy
except ImportError as e: msg.append(type(e).__name__)
[msg, t.tolist()]
""")
  (name, msg, again), values = got
  assert name == "numpy" and again == "ModuleNotFoundError" and values == [1.0, 2.0]
  assert msg.startswith("No module named 'numpy'") and "t.tolist()" in msg and "tw.toTypedArray(t)" in msg, msg
