import os, pytest
from tinyweb.device import Device

# Every test that takes `device` runs on each device of TEST_DEVICES (default: all devices tinyweb knows);
# a device this machine lacks is skipped with the reason the device registry gives.
# A device can be left out of the default list here (none is now: the whole suite runs on CPU and WEBGPU).
NOT_BY_DEFAULT: set[str] = set()
ALL_DEVICES = [d.strip().upper() for d in os.getenv("TEST_DEVICES", ",".join(d for d in Device.known() if d not in NOT_BY_DEFAULT)).split(",")
               if d.strip()]

@pytest.fixture(params=ALL_DEVICES)
def device(request):
  ok, why = Device.check(request.param)
  if not ok: pytest.skip(f"{request.param} unavailable: {why}")
  return request.param
