"""Module-level helpers shared by tensor.py and its parts (tensor_creation, tensor_movement, ...): checks and
conversions of size, axis and scalar arguments, the broadcast of shapes, and the dtype and bytes of Python values."""
from __future__ import annotations
import operator, struct
from array import array
from typing import Union
from tinyweb.dtype import DType, dtypes, cast_scalar, float_to_bf16_bits, check_scalar, fmt_scalar
from tinyweb.helpers import reading_internally
from tinyweb.device import Device

def _fmt_shape(s) -> str: return str(tuple(s))

def _broadcast_shape(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
  if all(s == shapes[0] for s in shapes[1:]): return tuple(shapes[0])   # (the common case)
  nd = max(len(s) for s in shapes)
  padded = [(1,) * (nd - len(s)) + tuple(s) for s in shapes]
  out = []
  for dims in zip(*padded):
    non1 = {d for d in dims if d != 1}
    if len(non1) > 1:
      raise ValueError(f"{op}: shapes {' and '.join(_fmt_shape(s) for s in shapes)} cannot be broadcast together "
                       f"(sizes {sorted(non1)} in the same dimension; each must match or be 1)")
    out.append(non1.pop() if non1 else 1)
  return tuple(out)

def _flatten_list(data, op="Tensor") -> tuple[list, tuple[int, ...]]:
  if not isinstance(data, (list, tuple)):
    if getattr(data, "ndim", 0) and hasattr(data, "tolist"): return _flatten_list(data.tolist(), op)   # numpy arrays in a list
    return [data], ()
  if len(data) == 0: return [], (0,)
  if set(map(type, data)) <= {float, int, bool}: return list(data), (len(data),)   # (a row of numbers, the common case)
  subs = [_flatten_list(d, op) for d in data]
  shapes = {s for _, s in subs}
  if len(shapes) != 1: raise ValueError(f"{op}: ragged nested sequence: elements have shapes {sorted(shapes)}; all must match")
  return [x for vals, _ in subs for x in vals], (len(data),) + subs[0][1]

def _py_scalar(op: str, v) -> Union[bool, int, float]:
  """A number argument as a Python bool, int or float (numpy scalars and one-element tensors through .item())."""
  t = type(v)
  if t is float or t is int or t is bool: return v
  if hasattr(v, "item") and not isinstance(v, (str, bytes)):
    try:
      with reading_internally(): v = v.item()
    except ValueError: pass
  if isinstance(v, bool): return bool(v)
  if isinstance(v, int): return int(v)
  if isinstance(v, float): return float(v)
  raise TypeError(f"{op}: expected a number (bool, int or float), got {type(v).__name__}")

def _int_dtype(op: str, lo: int, hi: int, device: str) -> DType:
  """The dtype for ints in [lo, hi] given without one: int32, or int64 (PyTorch's default int) past int32's range,
  where the device has int64."""
  if -0x80000000 <= lo and hi <= 0x7fffffff: return dtypes.default_int
  v = lo if lo < -0x80000000 else hi
  check_scalar(op, v, dtypes.int64)
  Device[device].check_dtype(dtypes.int64, f"{op}: {fmt_scalar(v)} does not fit int32")
  return dtypes.int64

def _pack(vals: list, dt: DType) -> bytes:
  """Python numbers that fit dt (scalar_fits) as dt's bytes."""
  if dt.is_bool: return bytes(map(bool, vals))
  if dt.fmt in ("f", "d"): return array(dt.fmt, vals).tobytes()   # C's conversion: rounds to nearest, inf past the range
  if dt.is_int:
    try: return array(dt.fmt, vals).tobytes()
    except (TypeError, OverflowError): pass   # floats (truncated below) or negative ints for an unsigned dtype (wrapped)
  vals = [cast_scalar(v, dt) for v in vals]
  if dt == dtypes.bfloat16: return struct.pack(f"{len(vals)}H", *[float_to_bf16_bits(v) for v in vals])
  return struct.pack(f"{len(vals)}{dt.fmt}", *vals)

def _shape_args(shape) -> tuple:
  if len(shape) == 1 and isinstance(shape[0], (tuple, list)): return tuple(shape[0])
  return tuple(shape)

def _as_int(op: str, what: str, v) -> int:
  """v as a Python int: an int or a numpy integer, not a bool or a float (PyTorch's rule for sizes and dims)."""
  if type(v) is int: return v
  if not isinstance(v, bool):
    try: return operator.index(v)
    except TypeError: pass
  raise TypeError(f"{op}: {what} must be an int, got {type(v).__name__} {v!r}")

def _sizes(op: str, shape) -> tuple[int, ...]:
  """A shape argument checked: ints >= 0."""
  if all(type(s) is int and s >= 0 for s in shape): return tuple(shape)   # (the common case, cheap)
  out = tuple(_as_int(op, "a size", s) for s in shape)
  if any(s < 0 for s in out): raise ValueError(f"{op}: sizes must be non-negative, got {out}")
  return out

def _normalize_axis(op: str, axis: int, ndim: int) -> int:
  if type(axis) is not int: axis = _as_int(op, "axis", axis)
  lim = max(ndim, 1)
  if not -lim <= axis < lim: raise IndexError(f"{op}: axis {axis} is out of range for a tensor with {ndim} dimensions (valid: {-lim}..{lim-1})")
  return axis % lim if ndim > 0 else 0
