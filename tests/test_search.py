"""Optimization actions (codegen/opts.py `Opt`) and BEAM search (tinyweb/search.py), issue 6.

Actions must change the code but never the results: kernels lowered with many action lists are compared with numpy.
BEAM search: its cache answers a second search without timing anything, its choice is at least as fast as the
heuristics' in the same search, and a candidate that computes wrong values is dropped with a warning."""
import os, warnings
import numpy as np
import pytest
from tinyweb import Tensor, Device, Context
from tinyweb.codegen.opts import Opt, OptError
from tinyweb.codegen.heuristics import heuristic_opts, choose_upcasts, fit_upcasts, reduction_terms, upcast_budget, BLOCK_SIZE
from tinyweb.codegen.lowering import load_axes
from tinyweb.helpers import prod
from tinyweb.codegen.lower import lower
from tinyweb.codegen.program import CompiledKernel
from tinyweb.schedule import create_schedule
from tinyweb import search
from tinyweb.search import beam_search, SearchCounters, mismatches
from tinyweb.dtype import dtypes

@pytest.fixture
def cache(tmp_path, monkeypatch):
  """An empty search cache (disk and memory) for the test."""
  monkeypatch.setenv("TINYWEB_CACHE_DIR", str(tmp_path))
  monkeypatch.setattr(search, "_memory_cache", {})
  return tmp_path

def kernel_of(t: Tensor):
  """The one kernel that computes `t` (its inputs realized first): its schedule item."""
  items, _, _ = create_schedule([t.uop])
  assert len(items) == 1, [it.ast for it in items]
  return items[0]

def run_with(item, device: str, opts) -> np.ndarray:
  dev = Device[device]
  p = lower(item.ast, dev.renderer, opts)
  src = dev.renderer.render(p)
  for b in item.bufs: b.ensure_allocated()
  CompiledKernel(p, dev.get_program(p.name, src), src).run([b.handle for b in item.bufs], wait=True)
  out = item.bufs[0]
  return np.frombuffer(bytes(out.as_memoryview()), dtype=np.dtype(out.dtype.fmt)).copy(), src

rng = np.random.default_rng(0)
A, B = rng.standard_normal((12, 20), dtype=np.float32), rng.standard_normal((20, 16), dtype=np.float32)
X, W = rng.standard_normal((2, 3, 6, 6), dtype=np.float32), rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
R = rng.standard_normal((6, 4, 10), dtype=np.float32)

def conv_ref(x, w):   # 3x3, padding 1, by sliding windows
  win = np.lib.stride_tricks.sliding_window_view(np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3), axis=(2, 3))
  return np.einsum("nchwij,kcij->nkhw", win, w)

CPU_OPTS = [[], [Opt("UPCAST", 1, 4)], [Opt("UPCAST", 0, 4), Opt("UPCAST", 1, 8)], [Opt("UNROLL", 0, 4)],
            [Opt("UNROLL", 0, 4), Opt("UNROLL", 0, 5)], [Opt("UPCAST", 1, 2), Opt("UNROLL", 0, 2), Opt("SWAP", 0, 1)],
            [Opt("UPCAST", 0, 12), Opt("UPCAST", 1, 16)]]
GPU_OPTS = [[Opt("LOCAL", 0, 16)], [Opt("UPCAST", 1, 4), Opt("LOCAL", 0, 8)], [Opt("GROUP", 0, 8)], [Opt("GROUP", 0, 32)]]
# targets that run the output loops (no threads): reductions in blocks, with the accumulators kept in the output between
# them; an output loop in blocks, the loop over them outermost
LOOP_OPTS = [[Opt("BLOCK", 0, 4)], [Opt("UNROLL", 0, 2), Opt("BLOCK", 0, 10)],
             [Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 4), Opt("SWAP", 0, 1), Opt("BLOCK", 0, 5)], [Opt("SPLIT", 1, 4)],
             [Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 2), Opt("SWAP", 0, 1), Opt("BLOCK", 0, 5), Opt("SPLIT", 0, 3)]]

def test_actions_change_code_not_results(device):
  r = Device[device].renderer   # LOCAL/GROUP need workgroups of several threads (PYTHON runs one thread per group)
  gpu = getattr(r, "has_threads", False) and getattr(r, "max_local_size", 1) > 1
  loops = not getattr(r, "has_threads", False)
  cases = [  # (tensor, numpy reference, action lists)
    (lambda: Tensor(A, device=device) @ Tensor(B, device=device), A @ B, CPU_OPTS + (GPU_OPTS if gpu else []) + (LOOP_OPTS if loops else [])),
    (lambda: Tensor(X, device=device).conv2d(Tensor(W, device=device), padding=1), conv_ref(X, W),
     [[], [Opt("UPCAST", 3, 3), Opt("UNROLL", 0, 3)], [Opt("UNROLL", 1, 3), Opt("UNROLL", 2, 3), Opt("UPCAST", 1, 4)],
      [Opt("SWAP", 0, 3), Opt("UPCAST", 2, 2)]] + ([[Opt("GROUP", 0, 16)]] if gpu else [])),
    (lambda: Tensor(R, device=device).max((0, 2)), R.max((0, 2)),
     [[], [Opt("UNROLL", 0, 3), Opt("UNROLL", 1, 5)], [Opt("UPCAST", 0, 4), Opt("UNROLL", 1, 10)]] + ([[Opt("GROUP", 0, 64)]] if gpu else []) +
     ([[Opt("BLOCK", 1, 5)], [Opt("BLOCK", 0, 3), Opt("BLOCK", 1, 2)]] if loops else [])),
  ]
  for make, ref, opt_lists in cases:
    srcs = set()
    for opts in opt_lists:
      got, src = run_with(kernel_of(make()), device, opts)
      np.testing.assert_allclose(got.reshape(ref.shape), ref, rtol=1e-4, atol=1e-4, err_msg=f"{opts}")
      srcs.add(src)
    assert len(srcs) == len(opt_lists)   # every action list made different code

def test_actions_that_do_not_apply_raise_clearly():
  ast = kernel_of(Tensor(A) @ Tensor(B)).ast
  r = Device["CPU"].renderer
  for opts, msg in [([Opt("UPCAST", 1, 5)], "5 does not divide the axis size 16"), ([Opt("UPCAST", 2, 2)], "output axes are 0..1"),
                    ([Opt("UNROLL", 1, 2)], "1 reduction loops"), ([Opt("UPCAST", 1, 4), Opt("UPCAST", 1, 8)], "32 does not divide"),
                    ([Opt("LOCAL", 0, 64)], "only GPU targets"), ([Opt("SWAP", 1, 1)], "two different output axes"),
                    ([Opt("TILE", 0, 2)], "only GPU targets"), ([Opt("SPREAD", 0, 2)], "unknown kind"),
                    ([Opt("SPLIT", 0, 5)], "must divide the 12 loop trips"), ([Opt("UPCAST", 0, 4), Opt("SPLIT", 0, 3)], "be fewer"),
                    ([Opt("SPLIT", 0, 2), Opt("SPLIT", 1, 2)], "split once"),
                    ([Opt("BLOCK", 0, 20)], "must divide the loop size 20"), ([Opt("UNROLL", 0, 4), Opt("BLOCK", 0, 4)], "larger")]:
    with pytest.raises(OptError, match=msg) as e: lower(ast, r, opts)
    assert "(12, 16)" in str(e.value) and str(opts[-1]) in str(e.value)

def test_heuristics_and_noopt_are_action_lists(capsys):
  ast = kernel_of(Tensor(A) @ Tensor(B)).ast
  r = Device["CPU"].renderer
  assert lower(ast, r).opts == heuristic_opts(ast.src[0].src[1], r) == [Opt("UPCAST", 1, 16), Opt("UPCAST", 0, 4)]
  with Context(NOOPT=1): assert lower(ast, r).opts == []
  with Context(DEBUG=3): (Tensor(A) @ Tensor(B)).realize()
  assert "optimizations [UPCAST(1,16), UPCAST(0,4)]" in capsys.readouterr().out

def test_upcasts_fit_the_read_budget():
  # a matmul's 16 x 4 outputs per thread read 16 + 4 values a step: within 64, kept
  mm = kernel_of(Tensor(A) @ Tensor(B)).ast.src[0].src[1]
  assert fit_upcasts(mm, choose_upcasts(mm), 64) == choose_upcasts(mm) == {1: 8, 0: 4}
  # YOLOv8's head: the max over 16 bins of three sources concatenated along the anchors, each read's index depending
  # on both output axes: 3 x 32 reads a step for 8 x 4 outputs; shrunk along the first axis until the reads fit
  srcs = [Tensor(rng.standard_normal((1, 64, n), dtype=np.float32)).realize() for n in (64, 16, 8)]
  t = srcs[0].cat(*srcs[1:], dim=2).reshape(1, 4, 16, 88).max(2)
  item = kernel_of(t)
  value = item.ast.src[0].src[1]
  ups = choose_upcasts(value)
  def reads(u): return sum(prod(u.get(a, 1) for a in axes) for axes in load_axes(value))
  assert reads(ups) > 64
  fitted = fit_upcasts(value, ups, 64)
  assert reads(fitted) <= 64 and fitted[max(ups)] == ups[max(ups)] and all(ups[a] % n == 0 for a, n in fitted.items())
  assert fit_upcasts(value, ups, 0) == ups
  got, _ = run_with(item, "CPU", [Opt("UPCAST", a, n) for a, n in fitted.items()])
  want = np.concatenate([s.numpy() for s in srcs], axis=2).reshape(1, 4, 16, 88).max(2)
  np.testing.assert_array_equal(got.reshape(want.shape), want)

def test_small_windows_get_a_quarter_of_the_read_budget():
  """A depthwise conv (each output sums its 3 x 3 window) gets a quarter of the renderer's budget, a 1 x 1 conv (a sum over 32
  channels) and a matmul all of it; no budget stays no budget."""
  from types import SimpleNamespace
  x = Tensor(rng.standard_normal((1, 32, 16, 16), dtype=np.float32)).realize()
  depthwise = x.conv2d(Tensor(rng.standard_normal((32, 1, 3, 3), dtype=np.float32)).realize(), groups=32, padding=1)
  pointwise = x.conv2d(Tensor(rng.standard_normal((64, 32, 1, 1), dtype=np.float32)).realize())
  values = [kernel_of(t).ast.src[0].src[1] for t in (depthwise, pointwise, Tensor(A) @ Tensor(B))]
  assert [reduction_terms(v) for v in values] == [9, 32, A.shape[1]]
  assert [upcast_budget(v, SimpleNamespace(max_upcast_reads=64)) for v in values] == [16, 64, 64]
  assert [upcast_budget(v, SimpleNamespace(max_upcast_reads=0)) for v in values] == [0, 0, 0]

def sequential_matmul(a: np.ndarray, b: np.ndarray, fused: bool) -> np.ndarray:
  """float32 sums in increasing k order: each product and each sum rounded, or (fused) each a*b+acc rounded once. The fused
  step is computed in long double (64-bit mantissa on x86-64: the product of two float32s exact, the sum rounded there,
  then to float32; that double rounding differs from one rounding with probability ~2^-40 per step)."""
  out = np.zeros((a.shape[0], b.shape[1]), np.float32)
  for k in range(a.shape[1]):
    if fused: out = (a[:, k:k + 1].astype(np.longdouble) * b[k:k + 1, :] + out).astype(np.float32)
    else: out = out + a[:, k:k + 1] * b[k:k + 1, :]
  return out

def test_matmul_keeps_sum_order(device):
  """The CPU's register tiles of 16-float vectors (loaded, or gathered from a transposed operand), blocked reduction
  (the accumulators kept in the output between blocks of BLOCK_SIZE steps) and rows in blocks (SPLIT) leave each
  output's sum in increasing k order:
  bitwise equal to that sum done by numpy (with one fma per step where the device fuses multiply-adds, as the CPU device
  does on CPUs with fma instructions). A kernel with more than the reduction (a bias added) is tiled but not blocked."""
  assert np.finfo(np.longdouble).nmant >= 63, "the fused reference needs an 80-bit long double (x86-64) or wider"
  fused = Device[device].renderer.fused_multiply_add
  rows = 64 if device == "CPU" else 16   # (CPU: 8 row tiles, in blocks of 4)
  a, b, bias = rng.standard_normal((rows, 512), dtype=np.float32), rng.standard_normal((512, 128), dtype=np.float32), rng.standard_normal(128, dtype=np.float32)
  bt = rng.standard_normal((32, 512), dtype=np.float32)
  ref, ref_t = sequential_matmul(a, b, fused), sequential_matmul(a, bt.T, fused)
  item = kernel_of(Tensor(a, device=device) @ Tensor(b, device=device))
  got, src = run_with(item, device, None)
  np.testing.assert_array_equal(got.reshape(ref.shape), ref)
  with_bias = kernel_of(Tensor(a, device=device) @ Tensor(b, device=device) + Tensor(bias, device=device))
  np.testing.assert_array_equal(run_with(with_bias, device, None)[0].reshape(ref.shape), ref + bias)
  transposed = kernel_of(Tensor(a, device=device) @ Tensor(bt, device=device).T)
  got_t, src_t = run_with(transposed, device, None)
  np.testing.assert_array_equal(got_t.reshape(ref_t.shape), ref_t)
  if device == "CPU":
    opts = lower(item.ast, Device[device].renderer).opts
    assert Opt("BLOCK", 0, BLOCK_SIZE) in opts and "tw_float16" in src
    assert Opt("SPLIT", 0, 4) in opts or (os.cpu_count() or 1) > 2   # (at least one block per core)
    assert not any(o.kind == "BLOCK" for o in lower(with_bias.ast, Device[device].renderer).opts)
    assert "(tw_float16){" in src_t   # gathered

def test_mismatches_tolerates_reordered_sums_only():
  f32 = lambda *v: np.array(v, np.float32).tobytes()
  assert mismatches(f32(1, 2, np.nan), f32(1, 2, np.nan), dtypes.float32) == 0
  assert mismatches(f32(1, 2.0000002, 3), f32(1, 2, 3), dtypes.float32) == 0
  assert mismatches(f32(1, 2.5, np.nan), f32(1, 2, 3), dtypes.float32) == 2
  assert mismatches(np.array([1, 2, 3], np.int32).tobytes(), np.array([1, 2, 4], np.int32).tobytes(), dtypes.int32) == 1

def test_beam_cache_answers_second_search(cache):
  ast = kernel_of(Tensor(A) @ Tensor(B)).ast
  SearchCounters.reset()
  first = beam_search(ast, "CPU", 2)
  assert SearchCounters.searches == 1 and SearchCounters.timings >= first.candidates >= 2
  assert len(os.listdir(cache / "beam")) == 1
  search._memory_cache.clear()   # as in a new process: only the disk cache is left
  SearchCounters.reset()
  second = beam_search(ast, "CPU", 2)
  assert SearchCounters.searches == 0 and SearchCounters.timings == 0
  assert second.opts == first.opts

def test_beam_matmul_at_least_as_fast_as_heuristics(cache):
  a, b = rng.standard_normal((32, 64), dtype=np.float32), rng.standard_normal((64, 32), dtype=np.float32)
  res = beam_search(kernel_of(Tensor(a) @ Tensor(b)).ast, "CPU", 2)
  assert res.candidates > 2 and res.time_s <= res.heuristic_time_s   # both measured in this search
  with Context(BEAM=2): out = (Tensor(a) @ Tensor(b)).numpy()   # the cached choice, used by the engine
  np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)

def test_beam_drops_wrong_candidates(cache, monkeypatch):
  """A candidate whose output differs from the unoptimized kernel's (here: UNROLL made wrong on purpose) is dropped."""
  real = search.Search.output
  def broken(self, k):
    out = real(self, k)
    if any(o.kind == "UNROLL" for o in k.program.opts): out = bytes(4) + out[4:]   # first element wrong
    return out
  monkeypatch.setattr(search.Search, "output", broken)
  a, b = rng.standard_normal((8, 64), dtype=np.float32) + 3, rng.standard_normal((64, 8), dtype=np.float32)
  with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    res = beam_search(kernel_of(Tensor(a) @ Tensor(b)).ast, "CPU", 2)
  assert any("computes 1 of 64 outputs differently" in str(x.message) for x in w)
  assert not any(o.kind == "UNROLL" for o in res.opts)

def test_beam_on_webgpu(cache):
  ok, why = Device.check("WEBGPU")
  if not ok: pytest.skip(f"WEBGPU unavailable: {why}")
  x = rng.standard_normal((16, 512), dtype=np.float32)
  res = beam_search(kernel_of(Tensor(x, device="WEBGPU").sum(1)).ast, "WEBGPU", 2)
  assert res.candidates > 2 and res.time_s <= res.heuristic_time_s
  with Context(BEAM=2): out = Tensor(x, device="WEBGPU").sum(1).numpy()
  np.testing.assert_allclose(out, x.sum(1), rtol=1e-4, atol=1e-4)

def test_cache_key_covers_the_whole_declared_target(device, monkeypatch):
  # a search done for one target configuration must not be reused for another: every declared setting is in the key,
  # a class-level default as much as a value the runtime passed to the constructor
  from tinyweb.codegen.renderer import DECLARED
  ast = kernel_of(Tensor(A, device=device).realize() @ Tensor(B, device=device).realize()).ast
  r, key = Device[device].renderer, search.cache_key(ast, device, 2)
  assert DECLARED >= {"local_size", "vector_lanes", "max_buffers", "fused_multiply_add", "tensor_cores"}
  def other(v): return {**v, dtypes.int8: "x"} if isinstance(v, dict) else (dtypes.float16,) if isinstance(v, tuple) else \
                      "x" if isinstance(v, str) else not v if isinstance(v, bool) else 3 if v is None else v + 1
  for name in sorted(DECLARED):
    for where in ([type(r)] if name not in vars(r) else []) + [r]:   # the class's default (if r has no value of its own), r's
      with monkeypatch.context() as m:
        m.setattr(where, name, other(getattr(r, name)))
        assert search.cache_key(ast, device, 2) != key, (name, where)
    assert search.cache_key(ast, device, 2) == key
  with pytest.raises(TypeError, match="'max_threads' is not a declared target setting"): type(r)(max_threads=4)
