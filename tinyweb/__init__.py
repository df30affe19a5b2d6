"""tinyweb: a small, transparent deep-learning framework whose one Python core runs natively and in the browser."""
from tinyweb.tensor import Tensor
from tinyweb.dtype import dtypes, DType
from tinyweb.device import Device
from tinyweb.helpers import Context, GlobalCounters, getenv
from tinyweb.uop import UOp, Ops
from tinyweb.jit import TinyJit

__all__ = ["Tensor", "dtypes", "DType", "Device", "Context", "GlobalCounters", "getenv", "UOp", "Ops", "TinyJit"]
__version__ = "0.1.0"
