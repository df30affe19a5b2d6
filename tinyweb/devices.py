"""`tinyweb devices` (or `python -m tinyweb.devices`): every device tinyweb knows, whether it works here and, if not,
why; then the default device and why it is the default."""
from tinyweb.device import Device

def report() -> str:
  lines = []
  for name in Device.known():
    ok, why = Device.check(name)
    info = getattr(Device[name], "info", None) if ok else None
    extra = f" ({info.get('device', '')}, {info.get('adapter_type', '')} adapter)" if isinstance(info, dict) or hasattr(info, "get") else ""
    lines.append(f"{name:8s} {'available' + extra if ok else 'unavailable: ' + why}")
  lines.append(f"default: {Device.DEFAULT} ({Device.default_reason})")
  return "\n".join(lines)

if __name__ == "__main__": print(report())
