"""The compiled devices whose code is not C (LLVM IR, WebAssembly) against the CPU device bit for bit where their
instruction sets leave a result undefined or trap: LLVM's fptosi/fptoui are poison for NaN and out-of-range values and
its sdiv/udiv undefined for a zero divisor and INT_MIN / -1; wasm's trunc and div/rem trap on the same. The CPU device's
x86 code answers INT64_MIN for such a float -> int (all ones for uint64, wrapping through int64), and 0 for x / 0 and
x % 0. (tests/test_llvm.py and tests/test_wasm.py check what is each device's own.)"""
import numpy as np
import pytest
from tinyweb import Tensor, Device, dtypes
from helpers import assert_same_bits, same_as_cpu

@pytest.fixture(params=["LLVM", "WASM"])
def device(request):
  ok, why = Device.check(request.param)
  if not ok: pytest.skip(f"{request.param} unavailable: {why}")
  return request.param

EDGE = [float("nan"), float("inf"), -float("inf"), 1e10, -1e10, 3e38, -1.0, -0.5, 2.0**63, 2.0**64, -2.0**63, 4e9, 300.0, -300.7]

@pytest.mark.parametrize("src", [dtypes.float32, dtypes.float64, dtypes.float16, dtypes.bfloat16], ids=lambda d: d.name)
def test_float_to_int_out_of_range_matches_cpu(device, src):
  """Both the cast of a stored value and of a computed one."""
  for dst in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64, dtypes.uint64,
              dtypes.bool):
    got, exp = same_as_cpu(device, lambda d: Tensor(EDGE, device=d).cast(src).realize().cast(dst).numpy())
    assert_same_bits(got, exp)
    got, exp = same_as_cpu(device, lambda d: (Tensor(EDGE, device=d).cast(src) * 1).cast(dst).numpy())
    assert_same_bits(got, exp)

@pytest.mark.parametrize("dt", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint32, np.uint64],
                         ids=lambda d: np.dtype(d).name)
def test_int_division_by_zero_and_overflow_match_cpu(device, dt):
  """The guarded division gives the CPU device's values for a zero divisor and INT_MIN / -1."""
  info = np.iinfo(dt)
  a = np.array([7, -7, 0, info.min, info.max, info.min, 5, info.min], dt) if info.min < 0 else np.array([7, 0, info.max, 5], dt)
  b = np.array([0, 0, 0, -1, -1, 0, 3, 1], dt) if info.min < 0 else np.array([0, 0, 0, 3], dt)
  ops = [lambda x, y: x // y, lambda x, y: x % y, lambda x, y: x // 0, lambda x, y: x % 0]
  if info.min < 0: ops.append(lambda x, y: x // -1)
  for op in ops:
    got, exp = same_as_cpu(device, lambda d: op(Tensor(a, device=d), Tensor(b, device=d)).numpy())
    assert_same_bits(got, exp)
