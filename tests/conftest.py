import os, pytest
from tinyweb.device import Device

# Every test that takes `device` runs on each device of TEST_DEVICES (default: all devices tinyweb knows);
# a device this machine lacks is skipped with the reason the device registry gives.
ALL_DEVICES = [d.strip().upper() for d in os.getenv("TEST_DEVICES", ",".join(Device.known())).split(",") if d.strip()]

@pytest.fixture(params=ALL_DEVICES)
def device(request):
  ok, why = Device.check(request.param)
  if not ok: pytest.skip(f"{request.param} unavailable: {why}")
  return request.param

# without an NVIDIA GPU every kernel the tests build is also NVRTC-compiled as CUDA (see cuda_check.py)
from cuda_check import cuda_compile_check, cuda_compile_errors_fail_the_test  # noqa: E402,F401
