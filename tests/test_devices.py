"""Which device is the default, and what an unavailable device says: the registry's choice of Device.DEFAULT (a real
GPU, then code compiled for this CPU, then a GPU runtime on an emulated adapter, then the fallback) and its advice to
install the extra of tinyweb whose package a runtime is missing (RUNTIME_PACKAGES)."""
import importlib.util, os, subprocess, sys, textwrap
from pathlib import Path
import pytest
from tinyweb.device import Device, _DeviceRegistry

ROOT = Path(__file__).resolve().parent.parent

def run_py(code: str, **env) -> str:
  """stdout of `code` in a fresh interpreter on this checkout, without $DEV, with `env` added."""
  env = {**{k: v for k, v in os.environ.items() if k != "DEV"}, "PYTHONPATH": str(ROOT), **env}
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
  assert out.returncode == 0, out.stderr
  return out.stdout

# ---------------------------------------------------------------- the default device

class Native:
  """A device that compiles for the CPU (not a GPU runtime)."""
  created: list = []
  def __init__(self, name: str): Native.created.append(name)

class Broken(Native):
  def __init__(self, name: str):
    super().__init__(name)
    raise RuntimeError("no compiler here")

class Emulated(Native):
  """A GPU runtime on a CPU adapter (lavapipe, PoCL)."""
  is_real_gpu = False

class Fallback(Native): is_fallback = True

@pytest.mark.parametrize("gpu_here", [False, True])
def test_native_code_ranks_above_a_gpu_runtime_on_an_emulated_adapter(gpu_here, monkeypatch):
  from tinyweb import device
  monkeypatch.delenv("DEV", raising=False)
  monkeypatch.setattr(device, "gpu_present", lambda: gpu_here)
  def registry(*names: str) -> _DeviceRegistry:
    reg = _DeviceRegistry()
    reg.register("CPU", "test_devices:Broken")   # as the CPU device without clang
    for name in names: reg.register(name, f"test_devices:{name.title()}", gpu=name == "EMULATED")
    reg.register("FALLBACK", "test_devices:Fallback")
    return reg
  monkeypatch.setattr(Native, "created", [])
  reg = registry("EMULATED", "NATIVE")   # (the GPU runtime registered first, as WEBGPU is before LLVM)
  no_gpu = "no device runs on a real GPU here" if gpu_here else "this machine shows no GPU"
  assert (reg.DEFAULT, reg.default_reason) == ("NATIVE", f"{no_gpu}; it is the first device that compiles for this CPU")
  # where a GPU shows, the GPU runtime was tried (and found emulated); where none does, it was never created
  assert Native.created == (["EMULATED", "CPU", "NATIVE"] if gpu_here else ["CPU", "NATIVE"])
  reg = registry("EMULATED")   # nothing native works: the emulated adapter beats the fallback
  assert (reg.DEFAULT, reg.default_reason) == ("EMULATED", f"{no_gpu} and no device compiles for this CPU; it is the first GPU "
                                                           "runtime that works, on an emulated (CPU) adapter")
  reg.DEFAULT = "fallback"
  assert (reg.DEFAULT, reg.default_reason) == ("FALLBACK", "set by the program (Device.DEFAULT = ...)")

def test_without_clang_llvm_is_the_default_over_webgpu_on_the_cpu(tmp_path):
  if importlib.util.find_spec("llvmlite") is None: pytest.skip("llvmlite is not installed (tinyweb[llvm])")
  if not (ok := Device.check("WEBGPU"))[0]: pytest.skip(f"needs the WEBGPU device to rank LLVM against: {ok[1]}")
  if Device["WEBGPU"].is_real_gpu: pytest.skip("WEBGPU runs on a real GPU here: it ranks first")
  # PATH with this Python and nothing else: the CPU device finds no clang
  (tmp_path / "bin").mkdir()
  os.symlink(sys.executable, tmp_path / "bin" / "python3")
  out = run_py("""
    import shutil
    from tinyweb import Device
    print(shutil.which("clang"), Device.DEFAULT, Device.check("CPU")[1], Device.check("WEBGPU")[0], sep="\\n")
    print(Device.default_reason)""", PATH=str(tmp_path / "bin")).splitlines()
  assert out[:4] == ["None", "LLVM", "RuntimeError: clang not found on PATH (install it: apt-get install -y clang)", "True"], out
  assert out[4].endswith("; it is the first device that compiles for this CPU"), out[4]

# ---------------------------------------------------------------- a missing runtime package names its extra

def test_missing_wgpu_names_the_webgpu_extra():
  if sys.platform == "emscripten": pytest.skip("the browser's WEBGPU needs no wgpu")
  out = run_py("""
    import sys
    sys.modules["wgpu"] = None   # as if it were not installed: importing it raises ModuleNotFoundError
    from tinyweb import Device
    try: Device["WEBGPU"]
    except RuntimeError as e: print(e)""")
  assert out.startswith("device WEBGPU is not available here: ModuleNotFoundError: ") and "wgpu" in out, out
  assert out.rstrip().endswith("; install tinyweb[webgpu]: pip install 'tinyweb[webgpu]'"), out

def test_missing_nvrtc_names_the_cuda_extra():
  # no NVIDIA pip package and no system libnvrtc: NVRTC's error is an ImportError naming NVRTC's pip package
  out = run_py("""
    import ctypes.util, sys
    sys.modules["nvidia"] = None
    ctypes.util.find_library = lambda name: None
    from tinyweb.backends.cuda import NVRTC
    from tinyweb.device import install_hint
    try: NVRTC.get()
    except ImportError as e: print(type(e).__name__, e.name, install_hint("CUDA", e), sep="|")""")
  assert out == "ModuleNotFoundError|nvidia.cuda_nvrtc|; install tinyweb[cuda]: pip install 'tinyweb[cuda]'\n", out

class NeedsPackage:
  def __init__(self, name: str): import tinyweb_no_such_package  # noqa: F401

def test_hint_only_for_the_runtimes_own_package(monkeypatch):
  from tinyweb import device
  monkeypatch.setitem(device.RUNTIME_PACKAGES, "NEEDY", ("tinyweb_no_such_package", "needy"))
  reg = _DeviceRegistry()
  for name in ("NEEDY", "OTHER"): reg.register(name, "test_devices:NeedsPackage")
  assert reg.check("NEEDY") == (False, "ModuleNotFoundError: No module named 'tinyweb_no_such_package'; install tinyweb[needy]: "
                                       "pip install 'tinyweb[needy]'")
  # another device missing that module, or this one missing another module: no advice that would not help
  assert reg.check("OTHER") == (False, "ModuleNotFoundError: No module named 'tinyweb_no_such_package'")
  assert device.install_hint("NEEDY", ModuleNotFoundError("No module named 'cffi'", name="cffi")) == ""
  assert device.install_hint("NEEDY", RuntimeError("tinyweb_no_such_package failed")) == ""
