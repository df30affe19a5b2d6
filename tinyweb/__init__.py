"""tinyweb: a small, transparent deep-learning framework whose one Python core runs natively and in the browser."""
import importlib.util, os, sys

# the one place the version is written: the wheel's metadata reads it from here (pyproject.toml); package.json repeats it
# (npm run build refuses a difference, and so does tests/test_python_package.py)
__version__ = "0.1.0"

def _bind_this_checkouts_backends():
  """The runtimes live in the top-level backends/ folder of a source checkout; the wheel installs them as tinyweb/backends.
  In a checkout, bind `tinyweb.backends` to the folder beside this package (the one thing importing tinyweb does besides
  defining it): a checkout run without installing (PYTHONPATH=., python -m in its root) has its devices, and never imports
  another checkout's runtimes through that checkout's editable install."""
  here = os.path.dirname(os.path.abspath(__file__))
  folder = os.path.join(os.path.dirname(here), "backends")
  if os.path.isdir(os.path.join(here, "backends")) or not os.path.isfile(os.path.join(folder, "__init__.py")): return
  spec = importlib.util.spec_from_file_location(f"{__name__}.backends", os.path.join(folder, "__init__.py"), submodule_search_locations=[folder])
  module = importlib.util.module_from_spec(spec)
  sys.modules[spec.name] = module
  spec.loader.exec_module(module)
  globals()["backends"] = module
_bind_this_checkouts_backends()

from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes, DType
from tinyweb.device import Device
from tinyweb.helpers import Context, GlobalCounters, getenv, fetch
from tinyweb.uop import UOp, Ops
from tinyweb.jit import TinyJit
from tinyweb.function import function   # (the decorator: it shadows the submodule of the same name, as in tinygrad)
from tinyweb.export import export       # (likewise; `python -m tinyweb.export` and `from tinyweb.export import ...` still work)

__all__ = ["Tensor", "dtypes", "DType", "Device", "Context", "GlobalCounters", "getenv", "fetch", "UOp", "Ops", "TinyJit", "function", "export"]   # (and `from tinyweb import nn`, a subpackage: imported when asked for)
if getenv("PROFILE"): importlib.import_module("tinyweb.profile").start()   # (a trace and a kernel table at exit: profile.py)
if getenv("VIZ"): importlib.import_module("tinyweb.viz").start()   # VIZ=1: every realize recorded, shown as a web page at exit
