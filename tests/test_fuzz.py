"""The CI slice of the differential fuzzer (tests/fuzz.py): fixed, small random graphs over every op with special values
and their gradients, each compared with torch on every device. A failure prints the case's standalone repro; to shrink
it or to run more cases: python -m tests.fuzz --device D --start CASE --cases 1 --max-ops 4 (or --cases 10000).
Also tests of the fuzzer itself: cases are reproducible, the comparison flags what it should, and a planted defect is
found, shrunk to one op on one element, and printed as a repro that runs."""
import contextlib, io
import numpy as np
import pytest
from fuzz import Op, OPS, check, compare, generate, repro, shrink, fingerprint, int_min_by_minus_one, run_torch, after_overflow, scan_in_float32

SEED, MAX_OPS, N_CASES = 0, 4, 150

@pytest.mark.parametrize("case", range(N_CASES))
def test_fuzz_case(device, case):
  c = generate(SEED, case, max_ops=MAX_OPS)
  out = check(c, device)
  if out.status == "torch-raised": pytest.skip(f"{out.op}: {out.detail}")
  assert out.status in ("pass", "raised", "unsupported", "refused", "refused-arg"), f"{out.kind} in {out.op}: {out.detail}\n{repro(c, device, out)}"

def test_cases_are_reproducible():
  for i in range(20):
    assert fingerprint(generate(7, i)) == fingerprint(generate(7, i)), f"case {i} of seed 7 differs between two draws"
  assert fingerprint(generate(7, 0)) != fingerprint(generate(8, 0))

def test_torch_is_never_asked_for_int_min_by_minus_one():
  # torch divides ints with a trapping instruction: INT_MIN // -1 kills the process (SIGFPE). LLVM seed 13 case 997 drew
  # it (torch.div(int32 holding -2**31, -1, rounding_mode='trunc')); the fuzzer now draws another op there
  import torch
  assert int_min_by_minus_one([torch.tensor([5, -2 ** 31], dtype=torch.int32), -1])
  assert int_min_by_minus_one([torch.tensor([-2 ** 31], dtype=torch.int32), torch.tensor([[3], [-1]], dtype=torch.int32)])
  assert not int_min_by_minus_one([torch.tensor([-2 ** 31 + 1, 4], dtype=torch.int32), -1])
  assert not int_min_by_minus_one([torch.tensor([-2.0 ** 31]), -1])
  assert len(generate(13, 997, max_ops=6).nodes) > 1

def test_compare_classes():
  ref = np.array([1.0, np.nan, np.inf, -np.inf, 0.5], np.float32)
  assert compare(ref.copy(), [ref, ref], "x") is None
  for i, bad, kind in [(0, 1.01, "value"), (0, np.nan, "nan"), (1, 0.0, "nan"), (2, -np.inf, "inf"), (4, np.inf, "inf")]:
    got = ref.copy()
    got[i] = bad
    assert compare(got, [ref, ref], "x")[0] == kind, (i, bad)
  wide = np.array([1.0, 1.0], np.float32)   # where the float64 reference lies far from float32's, so may tinyweb
  assert compare(np.array([1.0, 1.5], np.float32), [wide, np.array([1.0, 1.3])], "x") is None
  assert compare(np.array([1, 2], np.int32), [np.array([1, 2 ** 32 + 2], np.int64)] * 2, "x") is None   # int64 wrapped to int32
  assert compare(np.zeros((2, 1), np.float32), [np.zeros((1, 2), np.float32)] * 2, "x")[0] == "shape"
  # beyond float32's range in float64: the inf of its sign is as good as float32's class (an order-dependent overflow)
  assert compare(np.array([-np.inf], np.float32), [np.array([np.nan], np.float32), np.array([-9e83])], "x") is None
  assert compare(np.array([np.inf], np.float32), [np.array([np.nan], np.float32), np.array([-9e83])], "x") is None
  # torch's float32 run overflowed on the way to a float64 value within range: any inf or NaN will do, a finite value
  # is one of the runs' classes (checked against nothing), but where float32 did not overflow an inf is wrong
  assert compare(np.array([np.inf], np.float32), [np.array([np.nan], np.float32), np.array([-9e37])], "x") is None
  assert compare(np.array([np.inf], np.float32), [np.array([-9e37], np.float32), np.array([-9e37])], "x")[0] == "inf"
  assert compare(np.array([np.nan], np.float32), [np.array([-np.inf], np.float32), np.array([-np.inf])], "x")[0] == "nan"
  # WGSL's finite math: where IEEE gives NaN or inf any value will do, but a finite result must still be right
  nan_ref = [np.array([np.nan, np.inf, 1.0], np.float32)] * 2
  assert compare(np.array([0.0, 5.0, 1.0], np.float32), nan_ref, "x", finite_math=True) is None
  assert compare(np.array([0.0, 5.0, 1.0], np.float32), nan_ref, "x")[0] == "nan"
  assert compare(np.array([0.0, 5.0, np.nan], np.float32), nan_ref, "x", finite_math=True)[0] == "nan"
  assert compare(np.array([0.0, 5.0, 1.5], np.float32), nan_ref, "x", finite_math=True)[0] == "value"

def test_values_computed_from_an_overflow_are_indeterminate_only_on_finite_math_devices():
  # seed 30 case 466: x / std(one element) is x / 0 = inf, and hardsigmoid of it 1 in IEEE arithmetic; lavapipe's WGSL
  # compiler, allowed to assume no inf occurs, gave -0.34. That output and the gradients are not compared on WEBGPU;
  # the other output (lerp of finite values) still is
  c = generate(30, 466)
  assert [n.op for n in c.nodes][4:] == ["std", "div", "hardsigmoid"] and c.outs == [3, 6]
  after, overflowed = after_overflow(c, run_torch(c).vals)
  assert after == {6} and overflowed
  assert check(c, "PYTHON").unchecked == 0   # (every other device computes IEEE's answer and is checked)

def test_torchs_int64_sums_reach_later_nodes_as_tinywebs_int32():
  # seed 30 case 266: an int32 cumprod past 2^31 divided by -3: torch divides its int64 product, tinyweb (int32 sums and
  # products, README) the wrapped one; the fuzzer's torch run wraps it too before the division
  c = generate(30, 266)
  assert [n.op for n in c.nodes][:3] == ["leaf", "cumprod", "div"] and c.nodes[0].p["v"].dtype == np.int32
  assert str(run_torch(c).vals[1].dtype) == "torch.int32"
  assert check(c, "PYTHON").status == "pass"

def test_devices_without_float64_are_compared_with_scans_accumulated_in_float32_too():
  # torch's CPU scans of float32 accumulate in float64 (cumprod [-3e38, 1, -1, 2, 0] ends in 0); WEBGPU's, in float32,
  # overflow to inf and then NaN (seed 30 case 345), the README's documented difference: an extra reference accumulates
  # in float32, one element after the other, as numpy does
  import torch
  x = np.array([[-3e38, 1.0, -1.0, 2.0, 0.0, 1.0], [1e-3, 2.0, 3.0, 4.0, 5.0, 6.0]], np.float32)
  for op, ref in (("cumprod", np.cumprod), ("cumsum", np.cumsum)):
    for ax in (1, -1, 0):
      with np.errstate(over="ignore", invalid="ignore"): want = ref(x, axis=ax, dtype=np.float32)
      np.testing.assert_array_equal(scan_in_float32(torch.tensor(x), ax, op).numpy(), want, err_msg=f"{op} {ax}")

def test_an_invalid_argument_tinyweb_refuses_and_torch_accepts_is_counted_apart():
  # seed 30 case 2110: a mutated conv_transpose dilation of 0, which torch's transposed convolution accepts and
  # tinyweb refuses with a ValueError naming it (as torch's conv2d does)
  c = generate(30, 2110)
  assert c.nodes[-1].op == "conv_transpose" and c.nodes[-1].mutated and 0 in c.nodes[-1].p["d"]
  out = check(c, "PYTHON")
  assert out.status == "refused-arg" and "dilation must be positive" in out.detail, out

def test_planted_defect_is_found_shrunk_and_printed(monkeypatch):
  # exp that is 1% off: every case using it fails, and shrinking must reduce one to this op on a single element
  monkeypatch.setitem(OPS, "bad_exp", Op("bad_exp", "unary", OPS["exp"].gen, "{0}.exp() * 1.01", "{0}.exp()"))
  def small_enough(c): return len(c.nodes) > 3 and sum(n.p["v"].size for n in c.nodes if n.op == "leaf") <= 64
  cases = (c for i in range(100) if small_enough(c := generate(3, i, ["bad_exp", "add", "sum", "reshape"], 5)))
  case, out = next((c, out) for c in cases if (out := check(c, "PYTHON")).status == "fail")
  assert out.op == "bad_exp", out
  small, sout, _ = shrink(case, "PYTHON", out, True)
  leaves = [n for n in small.nodes if n.op == "leaf"]
  assert [n.op for n in small.nodes if n.op != "leaf"] == ["bad_exp"] and len(leaves) == 1 and leaves[0].p["v"].size == 1, small.nodes
  text = repro(small, "PYTHON", sout)
  with contextlib.redirect_stdout(io.StringIO()) as printed: exec(compile(text, "<repro>", "exec"), {})
  assert "tinyweb" in printed.getvalue() and "torch" in printed.getvalue()
