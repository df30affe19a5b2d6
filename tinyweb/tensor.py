"""Tensor: the user-facing API. Every op builds UOps lazily; `realize()` (or reading values) runs the scheduler.

Everything here is written in terms of a few primitives (`_unary`, `_binary`, `_reduce`, movement ops, cast), so the
IR stays small: the gradient rules in gradient.py only need to know those primitives."""
from __future__ import annotations
import math, operator, struct, weakref, itertools
from array import array
from typing import Any, Optional, Sequence, Union
from tinyweb.dtype import DType, dtypes, to_dtype, promote, promote_with_scalar, least_upper_dtype, cast_scalar, \
  float_to_bf16_bits, bf16_bits_to_float, scalar_dtype, scalar_fits, check_scalar, scalar_range_error, fmt_scalar
from tinyweb.helpers import prod, argsort, flatten, largest_divisor, TRAINING, NO_GRAD, all_same, Context, fork_safe_lock
from tinyweb.uop import UOp, Ops, MOVEMENT, unique_id, const_key
from tinyweb.device import Device, Buffer, IdWeakSet
from tinyweb.schedule import create_schedule, realized_cache, buffer_uop, apply_realized, substitute, is_contiguous_buffer
from tinyweb.engine import run_schedule
from tinyweb.gradient import compute_gradient
from tinyweb.tensor_nn import NNMixin

class _GradMode(Context):
  """`Tensor.no_grad`: truthy when gradients are off in this thread (or asyncio task); `with Tensor.no_grad():`,
  `@Tensor.no_grad()` and `@Tensor.no_grad` turn them off for a block or a function, in this thread only."""
  def __init__(self): super().__init__(NO_GRAD=1)
  def __bool__(self): return bool(NO_GRAD.value)
  def __call__(self, fn=None): return self if fn is None else super().__call__(fn)

class _TrainMode(Context):
  def __init__(self, mode: bool): super().__init__(TRAINING=int(mode))

class _TensorMeta(type):
  @property
  def training(cls) -> bool: return bool(TRAINING.value)
  @training.setter
  def training(cls, v: bool): TRAINING.value = int(v)
  @property
  def no_grad(cls) -> _GradMode: return _NO_GRAD
  @no_grad.setter
  def no_grad(cls, v: bool): NO_GRAD.value = int(v)

_NO_GRAD = _GradMode()

SPLIT_MIN = 1 << 16        # a sum of at least this many elements per output...
SPLIT_MAX_OUTPUTS = 64     # ...into at most this many outputs is done in two kernels (Tensor._split_sum)
SPLIT_CHUNKS = 256         # at most this many partial sums per output and vector lane
_grad_leaves = IdWeakSet()
_rng_lock = fork_safe_lock()   # Tensor._random_bits's
CONST_CACHE_SIZE = 4096
_const_cache: dict[tuple, UOp] = {}   # Tensor._const_uop's

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

def _array_bytes(arr) -> bytes | memoryview:
  """A C-contiguous numpy array's bytes: a writable array's own memory (copied into the buffer directly: tobytes would
  copy it once more first), else (read-only, or Pyodide's numpy, whose arrays have no buffer interface) a copy."""
  if arr.flags.writeable:
    try: return memoryview(arr.reshape(-1)).cast("B")
    except TypeError: pass
  return arr.tobytes()

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
    try: v = v.item()
    except ValueError: pass
  if isinstance(v, bool): return bool(v)
  if isinstance(v, int): return int(v)
  if isinstance(v, float): return float(v)
  raise TypeError(f"{op}: expected a number (bool, int or float), got {type(v).__name__}")

def _check_device_dtype(dt: DType, device: str, what: str) -> None:
  """TypeError naming the device where it refuses dt (WEBGPU: no 64-bit types), before anything is built with it."""
  Device[device].renderer.check_dtype(dt, what)

def _device_has(dt: DType, device: str) -> bool:
  try: _check_device_dtype(dt, device, "")
  except TypeError: return False
  return True

def _int_dtype(op: str, lo: int, hi: int, device: str) -> DType:
  """The dtype for ints in [lo, hi] given without one: int32, or int64 (PyTorch's default int) past int32's range,
  where the device has int64."""
  if -0x80000000 <= lo and hi <= 0x7fffffff: return dtypes.default_int
  v = lo if lo < -0x80000000 else hi
  check_scalar(op, v, dtypes.int64)
  _check_device_dtype(dtypes.int64, device, f"{op}: {fmt_scalar(v)} does not fit int32")
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

def _pack_values(op: str, vals: list, dt: Optional[DType], device: str) -> tuple[DType, bytes]:
  """Flattened list elements as bytes, with their dtype: dt, or without one the dtype PyTorch infers (all bools: bool;
  ints and bools: int32, or int64 past its range; any float: the default float). A value that does not fit the dtype
  raises OverflowError (dtype.scalar_fits), as in PyTorch."""
  if not (kinds := set(map(type, vals))) <= {bool, int, float}:   # numpy scalars, tensors, subclasses, or not numbers
    vals = [_py_scalar(op, v) for v in vals]
    kinds = set(map(type, vals))
  if dt is None:
    dt = dtypes.bool if kinds == {bool} else _int_dtype(op, min(vals), max(vals), device) if vals and float not in kinds \
      else dtypes.default_float
  elif dt.is_int and vals:
    bad = next((v for v in vals if not scalar_fits(v, dt)), None) if float in kinds else \
      next((v for v in (min(vals), max(vals)) if not scalar_fits(v, dt)), None)
    if bad is not None: raise scalar_range_error(op, bad, dt)
  try: return dt, _pack(vals, dt)
  except OverflowError: raise scalar_range_error(op, next(v for v in vals if not scalar_fits(v, dt)), dt) from None   # (huge ints)

_NP_NAMES = {"bool": dtypes.bool, "int8": dtypes.int8, "uint8": dtypes.uint8, "int16": dtypes.int16, "uint16": dtypes.uint16,
             "int32": dtypes.int32, "uint32": dtypes.uint32, "int64": dtypes.int64, "uint64": dtypes.uint64,
             "float16": dtypes.float16, "float32": dtypes.float32, "float64": dtypes.float64}

ShapeArg = Union[int, Sequence[int]]
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

def _int_pair(op: str, what: str, p) -> tuple[int, int]:
  if type(p) is tuple and len(p) == 2 and type(p[0]) is int and type(p[1]) is int: return p
  if not isinstance(p, (tuple, list)) or len(p) != 2: raise ValueError(f"{op}: expected a {what} pair of ints per dimension, got {p!r}")
  return _as_int(op, f"a {what} bound", p[0]), _as_int(op, f"a {what} bound", p[1])

def _index_scalar(i):
  """An index element, with numpy scalars and 0-d arrays or tensors of ints or bools as the Python int or bool."""
  if type(i) is int or type(i) is slice or i is None or i is Ellipsis: return i
  if isinstance(i, Tensor): return i.item() if i.ndim == 0 and not i.dtype.is_float else i
  if type(i).__module__ == "numpy" and getattr(i, "ndim", None) == 0 and i.dtype.kind in "biu": return i.item()
  return i

def _tensors(op: str, *ts) -> list:
  if (bad := next((t for t in ts if not isinstance(t, Tensor)), None)) is not None: raise TypeError(f"{op}: expected Tensors, got {type(bad).__name__}")
  return list(ts)

def _normalize_axis(op: str, axis: int, ndim: int) -> int:
  if type(axis) is not int: axis = _as_int(op, "axis", axis)
  lim = max(ndim, 1)
  if not -lim <= axis < lim: raise IndexError(f"{op}: axis {axis} is out of range for a tensor with {ndim} dimensions (valid: {-lim}..{lim-1})")
  return axis % lim if ndim > 0 else 0

class Tensor(NNMixin, metaclass=_TensorMeta):
  __slots__ = ("uop", "requires_grad", "grad", "__weakref__")
  __array_priority__ = 1000   # numpy defers to our reflected operators
  _seed: int = 0
  _rng_state: dict = {}   # device -> realized uint32 tensor [seed low, seed high, counter], advanced by kernels

  def __init__(self, data: Any, device: Optional[str] = None, dtype: Optional[Any] = None, requires_grad: Optional[bool] = None):
    dt = to_dtype(dtype) if dtype is not None else None
    dev = Device.canonicalize(device)
    if isinstance(data, UOp): uop = data
    elif isinstance(data, Tensor): uop = data.uop if dt is None else data.cast(dt).uop
    elif isinstance(data, (bool, int, float)):
      uop = Tensor._const_uop(data, dt or scalar_dtype(data), dev, (), "Tensor")
    elif isinstance(data, (bytes, bytearray, memoryview)) and not isinstance(data, memoryview):
      uop = Tensor._from_bytes(bytes(data), dt or dtypes.uint8, dev, None)
    elif isinstance(data, (list, tuple)):
      vals, shape = _flatten_list(data)
      dt, raw = _pack_values("Tensor", vals, dt, dev)
      uop = Tensor._from_bytes(raw, dt, dev, shape)
    elif type(data).__module__ == "numpy" and hasattr(data, "dtype"):
      import numpy as np
      arr = np.asarray(data, order="C")   # (ascontiguousarray would turn 0-d into 1-d)
      if arr.dtype.name not in _NP_NAMES: raise TypeError(f"Tensor: numpy dtype {arr.dtype} is not supported; valid: {list(_NP_NAMES)}")
      src_dt = _NP_NAMES[arr.dtype.name]
      if not arr.dtype.isnative: arr = arr.astype(arr.dtype.newbyteorder("="))   # ('>f4' is named float32 too)
      uop = Tensor._from_bytes(_array_bytes(arr), src_dt, dev, arr.shape)
      if dt is not None and dt != src_dt: uop = Tensor(uop).cast(dt).uop
    else: raise TypeError(f"Tensor: cannot create a tensor from {type(data).__name__}")
    self.uop: UOp = uop
    self.grad: Optional[Tensor] = None
    self.requires_grad: Optional[bool] = requires_grad
    if requires_grad: self._make_grad_leaf()

  def _make_grad_leaf(self):
    if self.dtype is not None and not self.dtype.is_float:
      raise RuntimeError(f"only floating point tensors can require gradients, got {self.dtype}")
    # a leaf needs an identity of its own: two equal constants must not share one gradient
    if not is_contiguous_buffer(self.uop): self.uop = UOp(Ops.CONTIGUOUS, self.uop.dtype, (self.uop,), unique_id())
    _grad_leaves.add(self)

  @staticmethod
  def _const_uop(value, dt: DType, device: str, shape: tuple[int, ...], op: str = "Tensor") -> UOp:
    """A constant of this shape: the view Tensor(value).reshape(1, ...).expand(shape) would make. Kept in a small cache:
    the scalars of an expression (x * 0.5 + 1) recur on every call, and building their four uops is a good part of it.
    A value that does not fit dt (dtype.scalar_fits) or a dtype the device refuses raises, naming `op`."""
    key = (type(value), const_key(value), dt, device, shape)   # (the type: True == 1 == 1.0)
    if (c := _const_cache.get(key)) is not None: return c   # (checked when it was made)
    value = _py_scalar(op, value)
    check_scalar(op, value, dt)
    _check_device_dtype(dt, device, f"{op}: the constant {fmt_scalar(value)}")
    c = UOp(Ops.CONST, dt, (UOp(Ops.DEVICE, None, (), device),), cast_scalar(value, dt))
    if shape != ():
      c = UOp(Ops.RESHAPE, dt, (c,), (1,) * len(shape))
      if not all(n == 1 for n in shape): c = UOp(Ops.EXPAND, dt, (c,), tuple(shape))
    if len(_const_cache) >= CONST_CACHE_SIZE: _const_cache.clear()
    _const_cache[key] = c
    return c

  @staticmethod
  def _from_bytes(data: bytes | memoryview, dt: DType, device: str, shape: Optional[tuple[int, ...]]) -> UOp:
    n = len(data) // dt.itemsize
    if n * dt.itemsize != len(data): raise ValueError(f"Tensor: {len(data)} bytes is not a whole number of {dt.name} elements")
    buf = Buffer(device, n, dt).copyin(memoryview(data))
    return buffer_uop(buf, tuple(shape) if shape is not None else (n,))

  @staticmethod
  def frombuffer(buffer, dtype, shape: Optional[Sequence[int]] = None, device: Optional[str] = None) -> Tensor:
    """A tensor over the bytes of `buffer` (bytes, bytearray, memoryview, mmap). On the CPU a writable buffer is
    used in place, without a copy: it must outlive the tensor, and writes to the tensor show up in it."""
    dt, dev = to_dtype(dtype), Device.canonicalize(device)
    mv = memoryview(buffer).cast("B")
    if mv.nbytes % dt.itemsize: raise ValueError(f"frombuffer: {mv.nbytes} bytes is not a whole number of {dt.name} elements")
    n = mv.nbytes // dt.itemsize
    shape = (n,) if shape is None else tuple(shape)
    if prod(shape) != n: raise ValueError(f"frombuffer: shape {shape} needs {prod(shape)} elements, the buffer holds {n} {dt.name}")
    return Tensor(buffer_uop(Buffer.from_host(dev, mv, dt), shape))

  # ---------------------------------------------------------------------------------------------------------------
  # properties

  @property
  def shape(self) -> tuple[int, ...]: return self.uop.shape
  @property
  def dtype(self) -> DType: return self.uop.dtype
  @property
  def device(self) -> str: return self.uop.device
  @property
  def ndim(self) -> int: return len(self.shape)
  def numel(self) -> int: return prod(self.shape)
  def element_size(self) -> int: return self.dtype.itemsize
  def nbytes(self) -> int: return self.numel() * self.element_size()
  def __len__(self):
    if not self.shape: raise TypeError("len() of a 0-d tensor")
    return self.shape[0]
  def size(self, dim: Optional[int] = None):
    return self.shape if dim is None else self.shape[_normalize_axis("size", dim, self.ndim)]
  @property
  def is_leaf(self) -> bool: return self in _grad_leaves or not self.requires_grad
  def __repr__(self): return f"<Tensor {self.shape} {self.dtype.name} on {self.device}{' with grad' if self.grad is not None else ''}>"
  def __hash__(self): return id(self)
  def __bool__(self):
    if self.numel() != 1: raise RuntimeError(f"the truth value of a tensor with {self.numel()} elements is ambiguous")
    return bool(self.item())

  # ---------------------------------------------------------------------------------------------------------------
  # realization and reading values

  @staticmethod
  def realize_all(*tensors: Tensor) -> None:
    """Compute several tensors in one schedule, sharing work between them."""
    todo = [(t, u) for t in tensors if not is_contiguous_buffer(u := apply_realized(t.uop))]
    if not todo: return
    ts, targets = [t for t, _ in todo], [u for _, u in todo]
    items, results, assigned = create_schedule(targets)
    run_schedule(items)
    for a, r in assigned.items(): realized_cache.put(a, r)   # an assign inside the graph ran: it must not run again
    for t, u in zip(ts, targets):
      realized_cache.put(t.uop, results[u])
      # a tensor that gradients may flow through keeps its graph (the value is found through realized_cache)
      if not t.requires_grad or t in _grad_leaves:
        t.uop = results[u]
        if is_contiguous_buffer(t.uop): t.uop.base.arg[0].holders.add(t)

  def realize(self, *others: Tensor) -> Tensor:
    Tensor.realize_all(self, *others)
    return self

  def _host_buffer(self) -> tuple[Buffer, tuple[int, ...]]:
    u = apply_realized(self.realize().uop)
    if not is_contiguous_buffer(u): u = apply_realized(Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (u,))).realize().uop)
    return u.base.arg[0], self.shape

  def data(self) -> memoryview:
    """The values as a memoryview in this tensor's shape (bfloat16: the raw 16-bit patterns). No numpy needed."""
    buf, _ = self._host_buffer()
    return self._shaped(memoryview(bytes(buf.as_memoryview())))   # a snapshot: the buffer may be overwritten or reused later
  async def data_async(self) -> memoryview:
    """`data()` for code that must not block: awaits the device's readback (the browser's WebGPU without JSPI)."""
    buf, _ = self._host_buffer()
    return self._shaped(await buf.as_memoryview_async())
  def _shaped(self, mv: memoryview) -> memoryview:
    fmt = "H" if self.dtype == dtypes.float16 else self.dtype.fmt   # memoryview cannot cast to "e"
    if 0 in self.shape: return mv.cast(fmt)
    return mv.cast(fmt, self.shape)

  def tolist(self) -> Any: return self._as_list(self.data())
  async def tolist_async(self) -> Any:
    """`tolist()` through `data_async()`."""
    return self._as_list(await self.data_async())
  def _as_list(self, mv: memoryview) -> Any:
    if 0 in self.shape:
      def empty(s): return [] if len(s) == 1 else [empty(s[1:]) for _ in range(s[0])]
      return empty(self.shape)
    out = mv.tolist()
    if self.dtype in (dtypes.bfloat16, dtypes.float16):
      to_float = bf16_bits_to_float if self.dtype == dtypes.bfloat16 else (lambda b: struct.unpack("e", struct.pack("H", b))[0])
      def conv(x): return [conv(y) for y in x] if isinstance(x, list) else to_float(x)
      out = conv(out)
    return out

  def item(self) -> Any:
    if self.numel() != 1: raise ValueError(f"item: only one-element tensors can be converted to a Python scalar, shape is {self.shape}")
    v = self.reshape(()).tolist()
    return v

  def numpy(self):
    import numpy as np
    buf, shape = self._host_buffer()
    raw = bytes(buf.as_memoryview())
    if self.dtype == dtypes.bfloat16:
      return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=self.dtype.name).reshape(shape).copy()

  def to(self, device: Optional[str]) -> Tensor:
    dev = Device.canonicalize(device)
    if dev == self.device: return self
    return self._wrap(UOp(Ops.COPY, self.dtype, (self.uop,), dev))
  def cpu(self) -> Tensor: return self.to("CPU")
  def clone(self) -> Tensor: return self._wrap(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,), unique_id()))
  def contiguous(self) -> Tensor:
    return self if is_contiguous_buffer(self.uop) else self._wrap(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
  def detach(self) -> Tensor: return Tensor(UOp(Ops.DETACH, self.dtype, (self.uop,)), requires_grad=False)
  def requires_grad_(self, requires_grad: bool = True) -> Tensor:
    self.requires_grad = requires_grad
    if requires_grad: self._make_grad_leaf()
    return self

  def assign(self, x: Any) -> Tensor:
    """Write x into this tensor's storage (in place when the tensor is realized)."""
    x = x if isinstance(x, Tensor) else Tensor(x, device=self.device, dtype=self.dtype)
    if x.shape != self.shape:
      x = x._broadcast_to(self.shape, "assign") if len(x.shape) <= len(self.shape) else x
      if x.shape != self.shape: raise ValueError(f"assign: value of shape {x.shape} does not match the tensor's shape {self.shape}")
    if x.device != self.device: raise RuntimeError(f"assign: value is on {x.device}, tensor on {self.device}")
    if x.dtype != self.dtype: x = x.cast(self.dtype)
    if is_contiguous_buffer(self.uop) and self._owns(self.uop.base.arg[0]):
      self.uop = UOp(Ops.ASSIGN, self.dtype, (self.uop, x.uop))
    else:   # no storage of its own (lazy, or a buffer shared with another tensor): the value is replaced instead
      self.uop = UOp(Ops.CONTIGUOUS, self.dtype, (x.uop,), unique_id())
    if x.requires_grad and not NO_GRAD.value: self.requires_grad = True   # (x[i] = v: the result's gradient reaches v)
    return self

  def _owns(self, buf: Buffer) -> bool:
    """Whether this tensor may write into buf in place: no other live tensor holds it. Identical computations share
    one result buffer (the graph is hash-consed), so a tensor that shares its buffer copies on write instead."""
    buf.holders.add(self)
    return all(t is self for t in buf.holders)

  # ---------------------------------------------------------------------------------------------------------------
  # autograd

  def _wrap(self, uop: UOp, *others: Tensor) -> Tensor:
    """A result of an op on self (and others): it requires grad when an input does and the result is float."""
    needs = any(x.requires_grad for x in (self, *others))
    if needs and NO_GRAD.value: uop = UOp(Ops.DETACH, uop.dtype, (uop,))   # computed without a graph: a constant for autograd
    t = Tensor(uop)
    t.requires_grad = (needs and not NO_GRAD.value and uop.dtype.is_float) or None
    return t

  def _grad_targets(self, tensors) -> dict[Tensor, list[UOp]]:
    """For each tensor, the nodes of self's graph that stand for it: its uop, or an older uop that was realized
    into the buffer it now holds."""
    graph = self.uop.toposort()
    by_result: dict[UOp, list[UOp]] = {}
    for u in graph:
      by_result.setdefault(u, []).append(u)
      if (r := realized_cache.get(u)) is not None and r is not u: by_result.setdefault(r, []).append(u)
    return {t: by_result[t.uop] for t in tensors if t.uop in by_result}

  def backward(self, gradient: Optional[Tensor] = None) -> Tensor:
    if not self.requires_grad:
      raise RuntimeError("backward: this tensor does not require grad (no input of it has requires_grad=True)")
    if gradient is None:
      if self.numel() != 1:
        raise RuntimeError(f"backward: grad can be implicitly created only for scalar outputs, got shape {self.shape}; pass gradient=")
      gradient = Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
    elif gradient.shape != self.shape:
      raise ValueError(f"backward: gradient shape {gradient.shape} does not match tensor shape {self.shape}")
    leaves = self._grad_targets([t for t in list(_grad_leaves) if t.requires_grad])
    grads = compute_gradient(self.uop, gradient.cast(self.dtype).uop, {u for us in leaves.values() for u in us})
    for t, us in leaves.items():
      gs = [grads[u] for u in us if u in grads]
      if not gs: gs = [Tensor.zeros(t.shape, dtype=t.dtype, device=t.device).uop]   # in the graph, but no gradient flows (e.g. floor)
      g = Tensor(gs[0])
      for extra in gs[1:]: g = g + Tensor(extra)
      t.grad = g if t.grad is None else (t.grad + g)
    return self

  def gradient(self, *targets: Tensor, gradient: Optional[Tensor] = None) -> list[Tensor]:
    """d self / d target for each target (self must be a scalar unless `gradient` is given)."""
    if gradient is None:
      if self.numel() != 1: raise RuntimeError(f"gradient: output must be a scalar, got shape {self.shape}; pass gradient=")
      gradient = Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
    found = self._grad_targets(targets)
    grads = compute_gradient(self.uop, gradient.cast(self.dtype).uop, {u for us in found.values() for u in us})
    out = []
    for t in targets:
      gs = [Tensor(grads[u]) for u in found.get(t, []) if u in grads]
      out.append(sum(gs[1:], gs[0]) if gs else Tensor.zeros(t.shape, dtype=t.dtype, device=t.device))
    return out

  @staticmethod
  def train(mode: bool = True) -> _TrainMode: return _TrainMode(mode)
  @staticmethod
  def test() -> _TrainMode: return _TrainMode(False)

  def custom_gradient(self, inputs: Sequence[Tensor], backward) -> Tensor:
    """self, computed from `inputs`, with its gradient given by `backward(grad) -> one Tensor (or None) per input`
    instead of by differentiating the ops that computed it (used where the derivative's own graph is simpler)."""
    if not any(t.requires_grad for t in inputs) or NO_GRAD.value: return self
    def rule(g: UOp, *srcs: UOp):
      return tuple(None if r is None else r.uop for r in backward(Tensor(g)))
    return self._wrap(UOp(Ops.CUSTOM_GRAD, self.dtype, (self.uop, *[t.uop for t in inputs]), rule), *inputs)

  # ---------------------------------------------------------------------------------------------------------------
  # creation

  @staticmethod
  def full(shape: ShapeArg, fill_value: Any, dtype=None, device=None, requires_grad=None) -> Tensor:
    shape = _sizes("full", shape if isinstance(shape, (tuple, list)) else (shape,))
    fill_value = _py_scalar("full", fill_value)
    dt = to_dtype(dtype) if dtype is not None else scalar_dtype(fill_value)
    return Tensor(Tensor._const_uop(fill_value, dt, Device.canonicalize(device), shape, "full"), requires_grad=requires_grad)
  @staticmethod
  def zeros(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
    return Tensor.full(_sizes("zeros", _shape_args(shape)), 0.0, dtype=dtype or dtypes.default_float, device=device, requires_grad=requires_grad)
  @staticmethod
  def ones(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
    return Tensor.full(_sizes("ones", _shape_args(shape)), 1.0, dtype=dtype or dtypes.default_float, device=device, requires_grad=requires_grad)
  @staticmethod
  def empty(*shape, dtype=None, device=None) -> Tensor:
    shape = _sizes("empty", _shape_args(shape))
    buf = Buffer(Device.canonicalize(device), prod(shape), to_dtype(dtype or dtypes.default_float))
    return Tensor(buffer_uop(buf, shape))
  def full_like(self, fill_value, dtype=None, device=None, requires_grad=None) -> Tensor:
    return Tensor.full(self.shape, fill_value, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad)
  def zeros_like(self, **kw) -> Tensor: return self.full_like(0, **kw)
  def ones_like(self, **kw) -> Tensor: return self.full_like(1, **kw)
  def rand_like(self, **kw) -> Tensor: return Tensor.rand(*self.shape, device=kw.pop("device", self.device), dtype=kw.pop("dtype", self.dtype if self.dtype.is_float else None), **kw)
  def randn_like(self, **kw) -> Tensor: return Tensor.randn(*self.shape, device=kw.pop("device", self.device), dtype=kw.pop("dtype", self.dtype if self.dtype.is_float else None), **kw)

  @staticmethod
  def arange(start, stop=None, step=1, dtype=None, device=None, requires_grad=None) -> Tensor:
    """Ints give int32 (int64 where a value is past int32's range: PyTorch's default int), any float the default float."""
    if stop is None: start, stop = 0, start
    start, stop, step = _py_scalar("arange", start), _py_scalar("arange", stop), _py_scalar("arange", step)
    if any(isinstance(v, float) and not math.isfinite(v) for v in (start, stop, step)):
      raise ValueError(f"arange: unsupported range {start} -> {stop} with step {step}: all must be finite")
    if step == 0: raise ValueError("arange: step must be non-zero")
    if (stop - start) * step < 0: raise ValueError(f"arange: the range {start} -> {stop} and the step {step} go in opposite directions")
    is_int = all(isinstance(v, int) for v in (start, stop, step))
    n = -((start - stop) // step) if is_int else math.ceil((stop - start) / step)
    if n > 0x7fffffff: raise OverflowError(f"arange: {n} elements; index arithmetic is 32-bit, which allows at most 2**31-1")
    dt, dev = to_dtype(dtype) if dtype is not None else None, Device.canonicalize(device)
    idx = Tensor(UOp(Ops.ARANGE, dtypes.int32, (UOp(Ops.DEVICE, None, (), dev),), n))
    if is_int and (dt is None or not dt.is_float):   # computed exactly, in int32 or int64 (or dt, where the values fit it)
      last, step = (start + (n - 1) * step, step) if n > 1 else (start, 1)   # (a single value needs no step)
      if dt is not None and (bad := next((v for v in (start, last) if not scalar_fits(v, dt)), None)) is not None:
        raise scalar_range_error("arange", bad, dt)
      lo, hi = min(start, last, step), max(start, last, step)
      ct = dt if dt is not None and dt.is_int and dt.itemsize >= 4 and dt.min <= lo and hi <= dt.max else _int_dtype("arange", lo, hi, dev)
      dt = dt or ct
      out = ((idx if ct == dtypes.int32 else idx.cast(ct)) * step + start).cast(dt)
    else:
      dt = dt or dtypes.default_float
      out = (idx.cast(dt) * step + start) if dt.is_float else (idx * step + start).cast(dt)
    if requires_grad: out.requires_grad_()
    return out
  @staticmethod
  def linspace(start, stop, steps: int, dtype=None, device=None) -> Tensor:
    steps = _as_int("linspace", "steps", steps)
    if steps < 0: raise ValueError(f"linspace: steps must be >= 0, got {steps}")
    start, stop = _py_scalar("linspace", start), _py_scalar("linspace", stop)
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if steps == 1: return Tensor.full((1,), start, dtype=dt, device=device)
    idx = Tensor.arange(steps, device=device).cast(dtypes.float32)
    return (idx * ((stop - start) / (steps - 1)) + start).cast(dt)
  @staticmethod
  def eye(n: int, m: Optional[int] = None, dtype=None, device=None, requires_grad=None) -> Tensor:
    n, m = _sizes("eye", (n, n if m is None else m))
    out = (Tensor.arange(n, device=device).reshape(n, 1) == Tensor.arange(m, device=device).reshape(1, m)).cast(dtype or dtypes.default_float)
    if requires_grad: out.requires_grad_()
    return out

  # random numbers: a counter-based hash (stateless per element, so it runs on every device and in one kernel)
  @staticmethod
  def manual_seed(seed: int = 0):
    Tensor._seed = int(seed)
    for st in Tensor._rng_state.values():   # rewrite in place: jitted functions keep using the same buffers
      st.uop.base.arg[0].copyin(memoryview(_pack(Tensor._seed_words(), dtypes.uint32)))

  @staticmethod
  def _seed_words() -> list[int]: return [Tensor._seed & 0xffffffff, (Tensor._seed >> 32) & 0xffffffff, 0]

  @staticmethod
  def _random_bits(n: int, device) -> Tensor:
    """n uint32 values from the global stream. The seed and counter live in a device buffer that a kernel advances,
    so random numbers keep changing when a TinyJit replays the kernels."""
    with _rng_lock, Tensor.no_grad():   # (snapshot and advance as one step: two threads must not draw the same numbers)
      if device not in Tensor._rng_state:
        Tensor._rng_state[device] = Tensor(Tensor._seed_words(), dtype=dtypes.uint32, device=device)
      state = Tensor._rng_state[device]
      key = Tensor(UOp(Ops.CONTIGUOUS, dtypes.uint32, (state.uop,), unique_id())).realize()   # this call's snapshot
      state.assign(state + Tensor([0, 0, n & 0xffffffff], dtype=dtypes.uint32, device=device)).realize()
    def mix(x: Tensor) -> Tensor:   # a 32-bit integer hash with good avalanche (xor-shift-multiply rounds)
      x = x ^ (x >> 16); x = x * 0x7feb352d; x = x ^ (x >> 15); x = x * 0x846ca68b
      return x ^ (x >> 16)
    ctr = Tensor.arange(n, device=device).cast(dtypes.uint32) + key[2]
    return mix(mix(ctr ^ mix(key[0] + 0x9e3779b9)) + mix(key[1] ^ 0x85ebca6b))

  @staticmethod
  def _random_float_dtype(op: str, dtype) -> DType:
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dt.is_float: raise TypeError(f"{op}: random values need a float dtype, got {dt.name} (randint makes random integers)")
    return dt
  @staticmethod
  def rand(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
    shape, dt = _sizes("rand", _shape_args(shape)), Tensor._random_float_dtype("rand", dtype)
    bits = Tensor._random_bits(prod(shape), Device.canonicalize(device))
    out = ((bits >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))).cast(dt).reshape(shape)
    if requires_grad: out.requires_grad_()
    return out
  @staticmethod
  def randn(*shape, dtype=None, device=None, requires_grad=None) -> Tensor:
    shape, dt = _sizes("randn", _shape_args(shape)), Tensor._random_float_dtype("randn", dtype)
    u = Tensor.rand(2, *shape, device=device)
    r = (1 - u[0]).log().mul(-2).sqrt() * (u[1] * (2 * math.pi)).cos()   # Box-Muller
    out = r.cast(dt)
    if requires_grad: out.requires_grad_()
    return out
  @staticmethod
  def randint(*shape, low=0, high=10, dtype=None, device=None) -> Tensor:
    """Integers in [low, high), of int32 (int64 past its range) unless dtype says otherwise. Drawn from a float32 uniform:
    a range wider than 2**24 does not reach every integer."""
    low, high, dev = _as_int("randint", "low", low), _as_int("randint", "high", high), Device.canonicalize(device)
    if high <= low: raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    dt = to_dtype(dtype) if dtype is not None else _int_dtype("randint", low, high - 1, dev)
    ct = _int_dtype("randint", min(low, 0), max(high - 1, high - low - 1), dev)   # (holds the offsets from low too)
    if not dt.is_float and not dt.min <= low <= high - 1 <= dt.max:
      raise OverflowError(f"randint: the range [{low}, {high}) does not fit {dt.name} ({dt.min}..{dt.max})")
    r = (Tensor.rand(*shape, device=dev) * (high - low)).floor().cast(ct)
    if high - low > 1 << 24: r = r.minimum(high - low - 1)   # (float32 rounding may reach the range's end there)
    return (r + low).cast(dt)
  @staticmethod
  def uniform(*shape, low=0.0, high=1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
    low, high, dt = _py_scalar("uniform", low), _py_scalar("uniform", high), Tensor._random_float_dtype("uniform", dtype)
    if not low <= high: raise ValueError(f"uniform: low ({low}) must not be greater than high ({high})")
    out = (Tensor.rand(*shape, device=device) * (high - low) + low).cast(dt)
    if requires_grad: out.requires_grad_()
    return out
  @staticmethod
  def normal(*shape, mean=0.0, std=1.0, dtype=None, device=None, requires_grad=None) -> Tensor:
    mean, std, dt = _py_scalar("normal", mean), _py_scalar("normal", std), Tensor._random_float_dtype("normal", dtype)
    if not std >= 0: raise ValueError(f"normal: std must be >= 0, got {std}")
    out = (Tensor.randn(*shape, device=device) * std + mean).cast(dt)
    if requires_grad: out.requires_grad_()
    return out
  @staticmethod
  def scaled_uniform(*shape, **kw) -> Tensor:
    return Tensor.uniform(*shape, low=-1.0, high=1.0, **kw).mul(prod(_shape_args(shape)) ** -0.5)
  @staticmethod
  def kaiming_uniform(*shape, a: float = 0.01, **kw) -> Tensor:
    shape = _shape_args(shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
    return Tensor.uniform(*shape, low=-bound, high=bound, **kw)
  @staticmethod
  def kaiming_normal(*shape, a: float = 0.01, **kw) -> Tensor:
    shape = _shape_args(shape)
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
    return Tensor.normal(*shape, mean=0.0, std=std, **kw)
  @staticmethod
  def glorot_uniform(*shape, **kw) -> Tensor:
    shape = _shape_args(shape)
    bound = math.sqrt(6 / (shape[0] + prod(shape[1:])))
    return Tensor.uniform(*shape, low=-bound, high=bound, **kw)

  # ---------------------------------------------------------------------------------------------------------------
  # primitives: everything else is built from these

  def _unary(self, op: Ops) -> Tensor: return self._wrap(UOp(op, self.dtype, (self.uop,)), self)

  def _to_tensor(self, x: Any, op: str) -> Tensor:
    if isinstance(x, Tensor): return x
    if isinstance(x, (bool, int, float)) or (hasattr(x, "item") and not hasattr(x, "__len__")):
      x = x.item() if hasattr(x, "item") else x
      return Tensor(Tensor._const_uop(x, promote_with_scalar(self.dtype, x), self.device, (), op))
    return Tensor(x, device=self.device)

  def _broadcasted(self, y: Any, op: str, reverse: bool = False, match_dtype: bool = True) -> tuple[Tensor, Tensor]:
    x = self
    if isinstance(y, Tensor):
      if y.device != x.device:
        raise RuntimeError(f"{op}: expected all tensors on the same device, got {x.device} and {y.device}")
      dt = promote(x.dtype, y.dtype)
    else:
      scalar = y.item() if hasattr(y, "item") and not hasattr(y, "__len__") else y
      if isinstance(scalar, (bool, int, float)):   # (made in x's shape at once: the commonest case, kept cheap)
        dt = promote_with_scalar(x.dtype, scalar)
        y = Tensor(Tensor._const_uop(scalar, dt, x.device, x.shape, op))
      else:
        y = Tensor(y, device=x.device)
        dt = promote(x.dtype, y.dtype)
    if reverse: x, y = y, x
    if match_dtype: x, y = x.cast(dt), y.cast(dt)
    shape = _broadcast_shape(op, x.shape, y.shape)
    return x._broadcast_to(shape, op), y._broadcast_to(shape, op)

  def _broadcast_to(self, shape: tuple[int, ...], op: str = "expand") -> Tensor:
    if self.shape == tuple(shape): return self
    if len(self.shape) > len(shape): raise ValueError(f"{op}: cannot broadcast shape {self.shape} to {tuple(shape)}")
    x = self.reshape((1,) * (len(shape) - len(self.shape)) + self.shape)
    return x.expand(shape)

  def _binary(self, op: Ops, y: Any, reverse: bool = False, name: str = "", out_dtype: Optional[DType] = None) -> Tensor:
    x, y = self._broadcasted(y, name or op.name.lower(), reverse)
    dt = out_dtype or (dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else x.dtype)
    return x._wrap(UOp(op, dt, (x.uop, y.uop)), y)

  def cast(self, dtype) -> Tensor:
    dt = to_dtype(dtype)
    return self if dt == self.dtype else self._wrap(UOp(Ops.CAST, dt, (self.uop,)), self)
  def bitcast(self, dtype) -> Tensor:
    dt = to_dtype(dtype)
    if dt.itemsize != self.dtype.itemsize:
      raise ValueError(f"bitcast: {self.dtype.name} and {dt.name} have different sizes ({self.dtype.itemsize} vs {dt.itemsize} bytes)")
    if self.requires_grad: raise RuntimeError("bitcast: not differentiable; detach() first")
    return self if dt == self.dtype else Tensor(UOp(Ops.BITCAST, dt, (self.uop,)))
  def float(self) -> Tensor: return self.cast(dtypes.float32)
  def half(self) -> Tensor: return self.cast(dtypes.float16)
  def bfloat16(self) -> Tensor: return self.cast(dtypes.bfloat16)
  def double(self) -> Tensor: return self.cast(dtypes.float64)
  def int(self) -> Tensor: return self.cast(dtypes.int32)
  def long(self) -> Tensor: return self.cast(dtypes.int64)
  def bool(self) -> Tensor: return self.cast(dtypes.bool)
  def type(self, dtype) -> Tensor: return self.cast(dtype)

  def _float_input(self) -> Tensor: return self if self.dtype.is_float else self.cast(dtypes.default_float)

  # ---------------------------------------------------------------------------------------------------------------
  # movement (views: nothing is copied)

  def reshape(self, *shape) -> Tensor:
    shape, cur = _shape_args(shape), self.shape
    if not all(type(s) is int and s >= 0 for s in shape):   # None (keep that size), -1 (infer it), numpy ints, or invalid
      shape = tuple(cur[i] if s is None and i < len(cur) else _as_int("reshape", "a size", s) for i, s in enumerate(shape))
      if any(s < -1 for s in shape): raise ValueError(f"reshape: invalid shape {shape}: sizes are >= 0, or -1 (once) to infer one")
      if shape.count(-1) > 1: raise ValueError(f"reshape: only one dimension can be -1, got {shape}")
      if -1 in shape:
        known, n = prod(s for s in shape if s != -1), prod(cur)
        if known == 0 or n % known != 0: raise ValueError(f"reshape: cannot reshape tensor of shape {cur} ({n} elements) to {shape}")
        shape = tuple(n // known if s == -1 else s for s in shape)
    if shape == cur: return self
    if prod(shape) != (n := prod(cur)):
      raise ValueError(f"reshape: cannot reshape tensor of shape {cur} ({n} elements) to {shape} ({prod(shape)} elements)")
    return self._wrap(UOp(Ops.RESHAPE, self.dtype, (self.uop,), shape), self)
  def view(self, *shape) -> Tensor: return self.reshape(*shape)

  def expand(self, *shape) -> Tensor:
    shape = _shape_args(shape)
    if not all(type(s) is int and s >= -1 for s in shape): shape = tuple(_as_int("expand", "a size", s) for s in shape)
    lead = len(shape) - self.ndim
    if lead < 0: raise ValueError(f"expand: target shape {shape} has fewer dimensions than the tensor {self.shape}")
    if any(s < -1 for s in shape) or -1 in shape[:lead]:
      raise ValueError(f"expand: invalid target shape {shape} for {self.shape}: sizes are >= 0, or -1 (keep the size) in the tensor's own dimensions")
    x = self.reshape((1,) * lead + self.shape) if lead else self
    new = tuple(o if s == -1 else s for s, o in zip(shape, x.shape))
    for s, o in zip(new, x.shape):
      if o != s and o != 1:
        raise ValueError(f"expand: cannot expand shape {self.shape} to {shape}: a dimension of size {o} can only expand if it is 1")
    if new == x.shape: return x
    return x._wrap(UOp(Ops.EXPAND, self.dtype, (x.uop,), new), x)

  def permute(self, *order) -> Tensor:
    given = _shape_args(order)
    order = tuple(_normalize_axis("permute", o, self.ndim) for o in given)
    if len(order) != self.ndim or len(set(order)) != len(order):
      raise ValueError(f"permute: order {given} is not a permutation of the {self.ndim} dimensions of shape {self.shape}")
    if order == tuple(range(self.ndim)): return self
    return self._wrap(UOp(Ops.PERMUTE, self.dtype, (self.uop,), order), self)

  def flip(self, *axis) -> Tensor:
    axis = _shape_args(axis)
    axes = [_normalize_axis("flip", a, self.ndim) for a in axis]
    if len(set(axes)) != len(axes): raise ValueError(f"flip: dims {axis} name a dimension more than once (shape {self.shape})")
    if not axes or self.ndim == 0: return self
    return self._wrap(UOp(Ops.FLIP, self.dtype, (self.uop,), tuple(i in axes for i in range(self.ndim))), self)

  def shrink(self, arg: Sequence[Optional[tuple[int, int]]]) -> Tensor:
    if len(arg) != self.ndim: raise ValueError(f"shrink: need one (start, end) per dimension of {self.shape}, got {arg}")
    arg = tuple((0, s) if a is None else _int_pair("shrink", "(start, end)", a) for a, s in zip(arg, self.shape))
    for (b, e), s in zip(arg, self.shape):
      if not 0 <= b <= e <= s: raise ValueError(f"shrink: range {(b, e)} is invalid for a dimension of size {s} (shape {self.shape})")
    if all(a == (0, s) for a, s in zip(arg, self.shape)): return self
    return self._wrap(UOp(Ops.SHRINK, self.dtype, (self.uop,), arg), self)

  def _pad_zero(self, arg: tuple[tuple[int, int], ...]) -> Tensor:
    """Pad with zeros (negative amounts crop)."""
    if any(b < 0 or e < 0 for b, e in arg):
      for i, ((b, e), n) in enumerate(zip(arg, self.shape)):
        if max(0, -b) + max(0, -e) > n:
          raise ValueError(f"pad: padding {(b, e)} crops more than the {n} elements of dimension {i} (shape {self.shape})")
      x = self.shrink(tuple((max(0, -b), s - max(0, -e)) for (b, e), s in zip(arg, self.shape)))
      return x._pad_zero(tuple((max(0, b), max(0, e)) for b, e in arg))
    if all(b == 0 and e == 0 for b, e in arg): return self
    return self._wrap(UOp(Ops.PAD, self.dtype, (self.uop,), tuple(arg)), self)

  def pad(self, padding, mode: str = "constant", value: float = 0.0) -> Tensor:
    """padding: PyTorch style flat (left, right, top, bottom, ...) starting at the last dim, or one (before, after)
    (or None) per dimension starting at the first. mode: constant, reflect, replicate, circular."""
    padding, value = tuple(padding), _py_scalar("pad", value)
    if all(p is not None and not isinstance(p, (tuple, list)) for p in padding):
      if not all(type(p) is int for p in padding): padding = tuple(_as_int("pad", "a padding amount", p) for p in padding)
      if len(padding) % 2 or len(padding) // 2 > self.ndim:
        raise ValueError(f"pad: flat padding {padding} must have an even length of at most 2*ndim ({2*self.ndim})")
      pairs = [(0, 0)] * (self.ndim - len(padding) // 2) + [(padding[i], padding[i + 1]) for i in range(len(padding) - 2, -1, -2)]
    else:
      if len(padding) != self.ndim: raise ValueError(f"pad: need one (before, after) per dimension of {self.shape}, got {padding}")
      pairs = [(0, 0) if p is None else _int_pair("pad", "(before, after)", p) for p in padding]
    pairs = tuple(pairs)
    if mode == "constant":
      x = self._pad_zero(pairs)
      if value == 0: return x
      inside = Tensor.ones(self.shape, dtype=dtypes.bool, device=self.device)._pad_zero(pairs)
      return inside.where(x, value)
    if mode not in ("reflect", "replicate", "circular"):
      raise ValueError(f"pad: mode {mode!r} is not supported; valid: constant, reflect, replicate, circular")
    x = self
    for ax, (b, e) in enumerate(pairs):
      if b == 0 and e == 0: continue
      n = x.shape[ax]
      if b < 0 or e < 0: raise ValueError(f"pad: negative padding is only valid in constant mode, got {(b, e)}")
      if mode == "reflect" and (b >= n or e >= n):
        raise ValueError(f"pad: reflect padding {(b, e)} must be smaller than the dimension size {n} (shape {self.shape})")
      if mode == "circular" and (b > n or e > n):
        raise ValueError(f"pad: circular padding {(b, e)} cannot exceed the dimension size {n} (shape {self.shape})")
      def sl(s, t): return x.shrink(tuple((s, t) if i == ax else None for i in range(x.ndim)))
      if mode == "reflect": parts = [sl(1, b + 1).flip(ax), x, sl(n - e - 1, n - 1).flip(ax)]
      elif mode == "replicate": parts = [sl(0, 1).expand(*[b if i == ax else -1 for i in range(x.ndim)]), x,
                                         sl(n - 1, n).expand(*[e if i == ax else -1 for i in range(x.ndim)])]
      else: parts = [sl(n - b, n), x, sl(0, e)]
      x = Tensor.cat(*[p for p in parts if p.shape[ax] > 0], dim=ax)
    return x

  @property
  def T(self) -> Tensor: return self.transpose()
  def transpose(self, dim0: int = 1, dim1: int = 0) -> Tensor:
    if self.ndim < 2 and (dim0, dim1) == (1, 0): return self
    order = list(range(self.ndim))
    a, b = _normalize_axis("transpose", dim0, self.ndim), _normalize_axis("transpose", dim1, self.ndim)
    order[a], order[b] = order[b], order[a]
    return self.permute(order)
  def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
    if self.ndim == 0: return self.reshape(1)
    s, e = _normalize_axis("flatten", start_dim, self.ndim), _normalize_axis("flatten", end_dim, self.ndim)
    if s > e: raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim} (shape {self.shape})")
    return self.reshape(self.shape[:s] + (prod(self.shape[s:e + 1]),) + self.shape[e + 1:])
  def unflatten(self, dim: int, sizes: Sequence[int]) -> Tensor:
    d = _normalize_axis("unflatten", dim, self.ndim)
    n = self.shape[d]
    sizes = tuple(_as_int("unflatten", "a size", s) for s in sizes)
    known = prod(s for s in sizes if s != -1)
    if any(s < -1 for s in sizes) or sizes.count(-1) > 1 or (known == 0 or n % known if -1 in sizes else known != n):
      raise ValueError(f"unflatten: sizes {sizes} do not multiply to the size {n} of dimension {d} of {self.shape} (one may be -1)")
    return self.reshape(self.shape[:d] + sizes + self.shape[d + 1:])
  def squeeze(self, dim: Optional[int] = None) -> Tensor:
    if dim is None: return self.reshape(tuple(s for s in self.shape if s != 1))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    ds = {_normalize_axis("squeeze", d, self.ndim) for d in dims}
    return self.reshape(tuple(s for i, s in enumerate(self.shape) if not (i in ds and s == 1)))
  def unsqueeze(self, dim: int) -> Tensor:
    d = _normalize_axis("unsqueeze", dim, self.ndim + 1)
    return self.reshape(self.shape[:d] + (1,) + self.shape[d:])
  def repeat(self, *repeats) -> Tensor:
    repeats = tuple(_as_int("repeat", "a repeat count", r) for r in _shape_args(repeats))
    if len(repeats) < self.ndim: raise ValueError(f"repeat: need at least {self.ndim} repeat counts for shape {self.shape}, got {repeats}")
    shape = (1,) * (len(repeats) - self.ndim) + self.shape
    # like torch, a count is refused only where it makes a negative size (a negative count of an empty dim is empty)
    if any(r * s < 0 for r, s in zip(repeats, shape)):
      raise ValueError(f"repeat: counts {repeats} for shape {self.shape} give a negative size {tuple(r * s for r, s in zip(repeats, shape))}")
    repeats = tuple(max(r, 0) for r in repeats)
    # insert a broadcast dim before each dim, expand it, then merge
    x = self.reshape(flatten((1, s) for s in shape)).expand(flatten((r, s) for r, s in zip(repeats, shape)))
    return x.reshape(tuple(r * s for r, s in zip(repeats, shape)))
  def repeat_interleave(self, repeats: int, dim: Optional[int] = None) -> Tensor:
    (repeats,) = _sizes("repeat_interleave", (repeats,))
    x = self.flatten() if dim is None else self
    d = 0 if dim is None else _normalize_axis("repeat_interleave", dim, x.ndim)
    return x.unsqueeze(d + 1).expand(*x.shape[:d + 1], repeats, *x.shape[d + 1:]).flatten(d, d + 1)

  def cat(self, *others: Tensor, dim: int = 0) -> Tensor:
    ts = _tensors("cat", self, *others)
    d = _normalize_axis("cat", dim, self.ndim)
    for t in ts:
      if t.ndim != self.ndim or any(a != b for i, (a, b) in enumerate(zip(t.shape, self.shape)) if i != d):
        raise ValueError(f"cat: shapes {[x.shape for x in ts]} must match except in dimension {d}")
      if t.device != self.device: raise RuntimeError(f"cat: expected all tensors on the same device, got {self.device} and {t.device}")
    dt = least_upper_dtype(*[t.dtype for t in ts])
    total = sum(t.shape[d] for t in ts)
    out, off = None, 0
    for t in ts:
      p = t.cast(dt)._pad_zero(tuple((off, total - off - t.shape[d]) if i == d else (0, 0) for i in range(self.ndim)))
      out = p if out is None else out + p
      off += t.shape[d]
    return out
  def stack(self, *others: Tensor, dim: int = 0) -> Tensor:
    ts = _tensors("stack", self, *others)
    for t in ts:
      if t.shape != self.shape: raise ValueError(f"stack: all tensors must have the same shape, got {[x.shape for x in ts]}")
    d = _normalize_axis("stack", dim, self.ndim + 1)
    return Tensor.cat(*[t.unsqueeze(d) for t in ts], dim=d)
  def split(self, sizes, dim: int = 0) -> tuple[Tensor, ...]:
    d = _normalize_axis("split", dim, self.ndim)
    n = self.shape[d]
    if not isinstance(sizes, (tuple, list)):
      size = _as_int("split", "the split size", sizes)
      if size < 0 or size == 0 < n: raise ValueError(f"split: size must be positive (0 only for an empty dimension), got {size}")
      sizes = [min(size, n - i) for i in range(0, n, size or 1)] or [0]
    else: sizes = _sizes("split", sizes)
    if sum(sizes) != n: raise ValueError(f"split: sizes {list(sizes)} must add up to {n} (dimension {d} of {self.shape})")
    out, off = [], 0
    for s in sizes:
      out.append(self.shrink(tuple((off, off + s) if i == d else None for i in range(self.ndim))))
      off += s
    return tuple(out)
  def chunk(self, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    chunks = _as_int("chunk", "chunks", chunks)
    if chunks <= 0: raise ValueError(f"chunk: number of chunks must be positive, got {chunks}")
    d = _normalize_axis("chunk", dim, self.ndim)
    return self.split(max(1, math.ceil(self.shape[d] / chunks)), dim=d) if self.shape[d] else (self,) * chunks

  # ---------------------------------------------------------------------------------------------------------------
  # reductions

  def _axes(self, op: str, axis) -> tuple[int, ...]:
    if axis is None: return tuple(range(self.ndim))
    axes = tuple(sorted({_normalize_axis(op, a, self.ndim) for a in (axis if isinstance(axis, (tuple, list)) else (axis,))}))
    return axes if self.ndim else ()   # (a 0-d tensor's dim 0 or -1 is itself: reducing over it changes nothing, as in torch)

  def _reduce(self, op: Ops, axis=None, keepdim=False, name="reduce") -> Tensor:
    axes = self._axes(name, axis)
    if op is Ops.ADD and prod(self.shape[a] for a in axes) >= SPLIT_MIN and \
       prod(s for i, s in enumerate(self.shape) if i not in axes) <= SPLIT_MAX_OUTPUTS:
      out = self._split_sum(axes).reshape(tuple(1 if i in axes else s for i, s in enumerate(self.shape)))
    else: out = self._reduce_axes(op, axes) if axes else self
    if keepdim: return out
    return out.reshape(tuple(s for i, s in enumerate(self.shape) if i not in axes))

  def _split_sum(self, axes: tuple[int, ...]) -> Tensor:
    """A sum of many elements into few outputs (a full sum, a norm's statistics), in two kernels: one loop over all of
    them would run on one core, one add after the other. The outermost reduced axis is split into A chunks (the first
    kernel's partial sums, split across the cores) and the innermost into V neighbours in memory (summed in vector
    registers); the first kernel sums over the rest into A x V partials, the second sums those. (The order of the
    additions differs from one loop's.)"""
    keep = [i for i in range(self.ndim) if i not in axes]
    red = [self.shape[i] for i in axes]
    v = largest_divisor(red[-1], 16)
    if len(red) == 1: a = largest_divisor(red[0] // v, SPLIT_CHUNKS); split = (a, red[0] // (a * v), v)
    else: a = largest_divisor(red[0], SPLIT_CHUNKS); split = (a, red[0] // a, *red[1:-1], red[-1] // v, v)
    n = len(keep)
    x = self.permute(keep + list(axes)).reshape(tuple(self.shape[i] for i in keep) + split)
    partial = x._reduce_axes(Ops.ADD, tuple(range(n + 1, n + len(split) - 1))).contiguous()
    return partial._reduce_axes(Ops.ADD, tuple(range(n, n + len(split))))

  def _reduce_axes(self, op: Ops, axes: tuple[int, ...]) -> Tensor:   # one REDUCE_AXIS, keeping the reduced dims as 1
    return self._wrap(UOp(Ops.REDUCE_AXIS, self.dtype, (self.uop,), (op, axes)), self)

  def sum(self, axis=None, keepdim=False, dtype=None) -> Tensor:
    acc = to_dtype(dtype) if dtype is not None else \
      (dtypes.int64 if self.dtype == dtypes.int64 else dtypes.uint64 if self.dtype == dtypes.uint64 else
       dtypes.uint32 if self.dtype == dtypes.uint32 else dtypes.default_int) if not self.dtype.is_float else \
      (dtypes.float32 if self.dtype.itemsize < 4 else self.dtype)
    out = self.cast(acc)._reduce(Ops.ADD, axis, keepdim, "sum")
    return out.cast(self.dtype) if self.dtype.is_float and dtype is None else out
  def prod(self, axis=None, keepdim=False, dtype=None) -> Tensor:
    acc = to_dtype(dtype) if dtype is not None else (self.dtype if self.dtype.is_float else dtypes.default_int if self.dtype.itemsize < 8 else self.dtype)
    x = self.cast(acc)
    out = x.detach()._reduce(Ops.MUL, axis, keepdim, "prod")
    if not acc.is_float: return out
    axes = x._axes("prod", axis)
    def backward(g):
      if x.ndim == 0: return (g,)   # (torch: the product of no others is 1, even for an inf or NaN x)
      # d out / d x_j is the product of the others. PyTorch's: g * out / x when the whole tensor holds no zero, else the
      # product of the others itself (exclusive running products), which differs from out / x at zeros, infs and NaNs.
      # That product is built here from per-slice counts: NaN if the others hold a NaN or both a 0 and an inf, else a
      # signed 0 if they hold a 0, a signed inf if an inf, else the finite non-zero product divided by x_j
      xd, outk = x.detach(), out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
      def count_in_others(m): return (c := m.cast(dtypes.int32)).sum(axes, keepdim=True) - c   # (the slice's count less x_j's)
      is_zero, is_inf, finite_nz = xd == 0, xd.isinf(), xd.isfinite() & (xd != 0)
      # (float32's finite product is taken in float64 where the device has it: the others' product of [-2, 3e38] is -2,
      # torch's running products get it, while the whole product overflows float32 and inf / 3e38 stays inf)
      wide = xd.double() if xd._scans_in_float64() else xd
      fin = finite_nz.where(wide, 1)._reduce(Ops.MUL, axes, True, "prod")
      fin = finite_nz.where(fin / wide, fin).cast(xd.dtype)
      signed_inf = (count_in_others(xd == -math.inf) % 2 == 1).where(-math.inf, math.inf) * fin.sign()
      zeros, infs = count_in_others(is_zero) > 0, count_in_others(is_inf) > 0
      others = ((count_in_others(xd.isnan()) > 0) | (zeros & infs)).where(math.nan, zeros.where(fin.sign() * 0, infs.where(signed_inf, fin)))
      grad = g.reshape(outk.shape) * is_zero.any().where(others, outk / xd)
      # (torch.prod(x) without a dim gives exactly 0 when two or more elements are 0)
      return ((is_zero.cast(dtypes.int32).sum() > 1).where(0.0, grad) if axis is None else grad,)
    return out.custom_gradient([x], backward)
  def max(self, axis=None, keepdim=False) -> Tensor:
    self._check_nonempty_reduce("max", axis)
    return self._reduce(Ops.MAX, axis, keepdim, "max")
  def min(self, axis=None, keepdim=False) -> Tensor:
    self._check_nonempty_reduce("min", axis)
    if self.dtype.is_bool: return self.logical_not().max(axis, keepdim).logical_not()
    if self.dtype.is_int: return (~(~self).max(axis, keepdim))
    return -((-self).max(axis, keepdim))
  def _check_nonempty_reduce(self, op, axis):   # (torch's exception types: IndexError naming the dim, RuntimeError without one)
    if any(self.shape[a] == 0 for a in self._axes(op, axis)):
      raise (RuntimeError if axis is None else IndexError)(
        f"{op}: cannot reduce over an empty dimension (shape {self.shape}, axis {axis}); the operation has no identity")
  def mean(self, axis=None, keepdim=False) -> Tensor:
    x = self._float_input()
    n = prod(self.shape[a] for a in self._axes("mean", axis))
    s = x.sum(axis, keepdim)
    return s * (1.0 / n) if n else s * math.nan
  def _detached_half_mean(self, axes: tuple[int, ...], n: int) -> Tensor:
    # half the mean (kept dims), as half a finite first element + the mean of half the differences from it: exact for a
    # constant input (a variance of 0, where sum / n may be off by an ulp), and no sum overflows even for +-3e38 inputs.
    # var/std do not differentiate it: their gradients are PyTorch's 2 (x - mean) / (n - c) and (x - mean) / ((n - c) std)
    d = self.detach()
    first = d[tuple(slice(0, 1) if i in axes else slice(None) for i in range(self.ndim))]
    first = first.isfinite().where(first, 0)
    return first * 0.5 + (d * (0.5 / n) - first * (0.5 / n)).sum(axes, keepdim=True)
  def var(self, axis=None, keepdim=False, correction=1) -> Tensor:
    x = self._float_input()
    axes = x._axes("var", axis)
    n = prod(self.shape[a] for a in axes)
    if n == 0: return x.sum(axis, keepdim) * math.nan
    mean = x._detached_half_mean(axes, n) * 2
    sq = (x - mean).square().sum(axis, keepdim)
    if n - correction > 0: return sq / (n - correction)
    # PyTorch divides by max(0, n - c) (inf, or 0/0). Its gradient: over all dims, inf (NaN where x is the mean); over
    # some, 2 (x - mean) / (n - c)
    dof = n - correction
    def backward(g):
      g = g.reshape(mean.shape)
      if axis is None or axis == () or self.ndim == 0: return ((x.detach() == mean).where(math.nan, math.inf) * g,)
      return ((x - mean) * (2 / dof if dof else math.inf) * g,)
    return (sq.detach() > 0).where(math.inf, math.nan).custom_gradient([x], backward)   # (sq * inf: WGSL may fold 0 * inf to 0)
  def std(self, axis=None, keepdim=False, correction=1) -> Tensor:
    x = self._float_input()
    axes = x._axes("std", axis)
    n = prod(self.shape[a] for a in axes)
    if n - correction <= 0:   # var's inf/NaN conventions; PyTorch's std gradient: 0 where std is 0, not inf * 0
      s = (v := x.var(axis, keepdim, correction)).sqrt()
      return s.custom_gradient([v], lambda g: ((s == 0).where(0.0, g / (2 * s)),))
    # half deviations (exact, and within float32 even for +-3e38), divided by the largest before squaring: std([1, -1e30])
    # fits float32 while the squares do not (PyTorch accumulates in double). The scale is 1 for a constant slice and NaN
    # where a deviation is NaN
    half_dev = x.detach() * 0.5 - x._detached_half_mean(axes, n)
    scale = half_dev.abs().max(axes, keepdim=True)
    scale = (scale == 0).where(1.0, scale)
    s = ((half_dev / scale).square().sum(axes, keepdim=True) / (n - correction)).sqrt() * scale * 2
    out = s if keepdim else s.reshape(tuple(d for i, d in enumerate(self.shape) if i not in axes))
    def backward(g): return ((s == 0).where(0.0, half_dev / s * 2 * (g.reshape(s.shape) / (n - correction))),)   # (bounded)
    return out.custom_gradient([x], backward)
  def var_mean(self, axis=None, keepdim=False, correction=1): return self.var(axis, keepdim, correction), self.mean(axis, keepdim)
  def std_mean(self, axis=None, keepdim=False, correction=1): return self.std(axis, keepdim, correction), self.mean(axis, keepdim)
  def any(self, axis=None, keepdim=False) -> Tensor: return self.bool()._reduce(Ops.MAX, axis, keepdim, "any") if self.numel() else self.bool().sum(axis, keepdim).bool()
  def all(self, axis=None, keepdim=False) -> Tensor: return self.logical_not().any(axis, keepdim).logical_not()

  def _arg_reduce(self, op: str, x: Tensor, axis, keepdim) -> Tensor:
    if axis is None:
      if self.numel() == 0: raise IndexError(f"{op}: cannot take {op} of an empty tensor (shape {self.shape}) without an axis")
      return x.flatten()._arg_reduce(op, x.flatten(), 0, False).reshape((1,) * self.ndim if keepdim else ())
    a = _normalize_axis(op, axis, self.ndim)
    if self.ndim == 0: return self.reshape(1)._arg_reduce(op, x.reshape(1), 0, False)
    n = self.shape[a]
    if n == 0: raise IndexError(f"{op}: cannot take {op} over an empty dimension (shape {self.shape}, axis {axis})")   # (torch's type)
    is_max = x == x.max(a, keepdim=True)
    if x.dtype.is_float: is_max = is_max | x.isnan()   # a NaN is the maximum (and the minimum), like PyTorch
    # the first maximal position: larger weights for earlier positions, then take the max
    rev = Tensor.arange(n, 0, -1, device=self.device).reshape((n,) + (1,) * (self.ndim - a - 1))
    return (n - (is_max * rev).max(a, keepdim)).cast(dtypes.int32)
  def argmax(self, axis=None, keepdim=False) -> Tensor: return self._arg_reduce("argmax", self, axis, keepdim)
  def argmin(self, axis=None, keepdim=False) -> Tensor:
    neg = self.logical_not() if self.dtype.is_bool else (~self if self.dtype.is_int else -self)
    return self._arg_reduce("argmin", neg, axis, keepdim)

  def cumsum(self, axis: int = 0) -> Tensor:
    if self.ndim == 0: return self.reshape(1).cumsum(_normalize_axis("cumsum", axis, 1)).reshape(())   # (a bool's sum is an int)
    a = _normalize_axis("cumsum", axis, self.ndim)
    if self._scans_in_float64(): return self.double().cumsum(a).cast(self.dtype)
    return self.transpose(a, -1)._cumsum_last().transpose(a, -1)
  def _scans_in_float64(self) -> bool:
    """PyTorch's CPU scans of float32 accumulate in float64 (cumprod([3e38, -1.4, -0.6]) stays finite, a long cumsum
    keeps its digits): so do tinyweb's, on devices that have float64."""
    return self.dtype == dtypes.float32 and _device_has(dtypes.float64, self.device)
  def _cumsum_last(self) -> Tensor:
    n = self.shape[-1]
    if n <= 256:  # out[i] = sum_j x[j] for j <= i: one fused kernel with n*n work (selected, not masked by * 0: inf * 0 is NaN)
      return self._tri_mask_last().where(self.unsqueeze(-2), 0).sum(-1, dtype=self.sum().dtype)
    b = math.isqrt(n - 1) + 1   # two levels: within blocks of b, then the running total of the blocks before each
    nb = math.ceil(n / b)
    x = self._pad_zero(((0, 0),) * (self.ndim - 1) + ((0, nb * b - n),)).reshape(*self.shape[:-1], nb, b)
    inner = x._cumsum_last()
    offsets = inner[..., -1]._cumsum_last()._shift_last()
    return (inner + offsets.unsqueeze(-1)).reshape(*self.shape[:-1], nb * b)[..., :n]
  def _tri_mask_last(self) -> Tensor:
    """(n, n) bool: [i, j] is j <= i, for scans over the last axis (of size n)."""
    n = self.shape[-1]
    return Tensor.arange(n, device=self.device).reshape(n, 1) >= Tensor.arange(n, device=self.device).reshape(1, n)
  def _shift_last(self, fill=0) -> Tensor:
    """The last axis moved one place on: [fill, x0, ..., x(n-2)] (an exclusive scan from an inclusive one)."""
    return self[..., :-1].pad(((0, 0),) * (self.ndim - 1) + ((1, 0),), value=fill)
  def cumprod(self, axis: int = 0) -> Tensor:
    a = _normalize_axis("cumprod", axis, self.ndim)
    if self.ndim == 0 or self.numel() == 0 or (self.shape[a] == 1 and self.dtype.is_float): return self   # (its gradient passes through)
    if self._scans_in_float64(): return self.double().cumprod(a).cast(self.dtype)
    x = self.transpose(a, -1)
    tri = x._tri_mask_last()
    out = tri.where(x.detach().unsqueeze(-2), 1).prod(-1)
    def backward(g):
      # PyTorch's (its first-order formula): with k the first zero of a row and k2 the second, position j < k gets
      # sum_{j<=i<k} g_i out_i / x_j; k gets out_{k-1} * sum_i G_i P_i with G = g on [k, k2) and 0 elsewhere, P the running
      # product of x over (k, k2) (1 elsewhere); positions after k get exactly 0 (not 0 * an inf g)
      n, xd = x.shape[-1], x.detach()
      pos = Tensor.arange(n, device=self.device)
      k = (xd == 0).where(pos, n).min(-1, keepdim=True)
      k2 = ((xd == 0) & (pos > k)).where(pos, n).min(-1, keepdim=True)
      before = (tri & (pos.unsqueeze(-1) < k.unsqueeze(-1))).where((g * out).unsqueeze(-1), 0.0).sum(-2) / xd
      P = tri.where(((pos > k) & (pos < k2)).where(xd, 1).unsqueeze(-2), 1).prod(-1)
      at = (((pos >= k) & (pos < k2)).where(g, 0.0) * P).sum(-1, keepdim=True) * (pos < k).where(xd, 1).prod(-1, keepdim=True)
      return ((pos < k).where(before, (pos == k).where(at, 0.0)),)
    return (out.custom_gradient([x], backward) if x.dtype.is_float else out).transpose(a, -1)
  def cummax(self, axis: int = 0) -> Tensor:
    a = _normalize_axis("cummax", axis, self.ndim)
    if self.numel() == 0 or self.ndim == 0: return self   # (an empty scan is empty, max refuses an empty axis; a 0-d one is itself)
    x = self.transpose(a, -1)
    tri = x._tri_mask_last()
    out = tri.where(x.detach().unsqueeze(-2), x.dtype.min if not x.dtype.is_float else -math.inf).max(-1)
    def backward(g):   # PyTorch's: out[i]'s gradient all to the last j <= i holding it (a NaN: the last NaN)
      xd, o = x.detach().unsqueeze(-2), out.unsqueeze(-1)
      score = (tri & ((xd == o) | (xd.isnan() & o.isnan()))).where(Tensor.arange(x.shape[-1], device=self.device), -1)
      return ((score == score.max(-1, keepdim=True)).where(g.unsqueeze(-1), 0.0).sum(-2),)
    return (out.custom_gradient([x], backward) if x.dtype.is_float else out).transpose(a, -1)

  def softmax(self, axis=-1, dtype=None) -> Tensor:
    x = self._float_input() if dtype is None else self.cast(dtype)
    m = x - x.max(axis, keepdim=True).detach() if x.numel() else x   # (empty: nothing to scale, and max refuses an empty axis)
    e = m.exp()
    return e / e.sum(axis, keepdim=True)
  def log_softmax(self, axis=-1, dtype=None) -> Tensor:
    x = self._float_input() if dtype is None else self.cast(dtype)
    m = x - x.max(axis, keepdim=True).detach() if x.numel() else x
    return m - m.exp().sum(axis, keepdim=True).log()
  def logsumexp(self, axis=None, keepdim=False) -> Tensor:
    x = self._float_input()
    if x.numel() == 0: return x.exp().sum(axis, keepdim).log()   # over an empty axis: log(0) = -inf, like torch
    xd = x.detach()
    m = xd.max(axis, keepdim=True)
    m = (m.isinf()).where(0, m)
    out = (xd - m).exp().sum(axis, keepdim=True).log() + m
    out = out.custom_gradient([x], lambda g: (g * (xd - out).exp(),))   # PyTorch's (exp(x - out): 0 beside an inf out, not inf/inf)
    return out if keepdim else out.reshape(tuple(s for i, s in enumerate(x.shape) if i not in x._axes("logsumexp", axis)))
  def logcumsumexp(self, axis=0) -> Tensor:
    x = self._float_input()
    a = _normalize_axis("logcumsumexp", axis, max(x.ndim, 1))
    if x.ndim == 0 or x.numel() == 0: return x   # (an empty scan is empty; its running max refuses an empty axis)
    out = x.detach().transpose(a, -1)._logcumsumexp_last().transpose(a, -1)
    # PyTorch's gradient, the sum over i >= j of g_i exp(x_j - out_i), in log space for g > 0 and g < 0 (where an infinite
    # out_i adds 0, instead of inf * 0); log(0) is the dtype's lowest finite value
    lowest = {2: -65504.0, 4: -3.4028234663852886e38, 8: -1.7976931348623157e308}[x.dtype.itemsize]
    def part(g: Tensor, mask: Tensor) -> Tensor:
      return ((mask.where(g.abs().log(), lowest) - out).flip(a).logcumsumexp(a).flip(a) + x).exp()
    return out.custom_gradient([x], lambda g: (part(g, g > 0) - part(g, g < 0),))
  def _logcumsumexp_last(self) -> Tensor:
    n = self.shape[-1]
    if n <= 256:
      # each output around its own running max (a global max would underflow the terms before it): n*n work like cumsum
      tri, x = self._tri_mask_last(), self.unsqueeze(-2)
      x = tri.where(x, -math.inf)   # (masked before exp: an inf in the masked part would make the gradient NaN)
      m = x.max(-1).detach()
      m = m.isinf().where(0, m)   # (an infinite max: the sum of exps is inf or 0 as it should be)
      return (x - m.unsqueeze(-1)).exp().sum(-1).log() + m
    b = math.isqrt(n - 1) + 1   # blocks as in _cumsum_last, each block's scan and the blocks before it added by logaddexp
    nb = math.ceil(n / b)
    x = self.pad(((0, 0),) * (self.ndim - 1) + ((0, nb * b - n),), value=-math.inf).reshape(*self.shape[:-1], nb, b)
    inner = x._logcumsumexp_last()
    before = inner[..., -1]._logcumsumexp_last()._shift_last(-math.inf).unsqueeze(-1)
    m = inner.maximum(before).detach()
    m = m.isinf().where(0, m)
    out = ((inner - m).exp() + (before - m).exp()).log() + m
    return out.reshape(*self.shape[:-1], nb * b)[..., :n]

  # ---------------------------------------------------------------------------------------------------------------
  # elementwise math

  def _check_int_op(self, op: str, *others):
    for t in (self, *others):
      dt = t.dtype if isinstance(t, Tensor) else scalar_dtype(t)
      if dt.is_float: raise TypeError(f"{op}: only integer and bool tensors are supported, got {dt.name}")

  def add(self, x, reverse=False) -> Tensor: return self._binary(Ops.ADD, x, reverse, "add")
  def mul(self, x, reverse=False) -> Tensor: return self._binary(Ops.MUL, x, reverse, "mul")
  def sub(self, x, reverse=False) -> Tensor:
    a, b = self._broadcasted(x, "sub", reverse)
    if a.dtype.is_bool: raise TypeError("sub: subtraction of bool tensors is not supported; use logical_xor or ^")
    return a + (-b)
  def div(self, x, reverse=False, rounding_mode: Optional[str] = None) -> Tensor:
    if rounding_mode is None and not self.dtype.is_float and isinstance(x, (int, float)):
      return self._float_input().div(x, reverse)   # (true division: a scalar outside an int tensor's range is fine, like PyTorch)
    a, b = self._broadcasted(x, "div", reverse, match_dtype=False)
    if rounding_mode == "floor": return a // b
    if rounding_mode == "trunc": return a._trunc_div(b)
    dt = promote(a.dtype, b.dtype)
    dt = dt if dt.is_float else dtypes.default_float
    a, b = a.cast(dt), b.cast(dt)
    return a._wrap(UOp(Ops.FDIV, dt, (a.uop, b.uop)), b)
  def _trunc_div(self, b: Tensor) -> Tensor:   # (self and b broadcast already)
    if self.dtype.is_float or b.dtype.is_float:   # PyTorch's gradient for a rounding mode: an explicit 0 to both
      return self.detach().div(b.detach()).trunc().custom_gradient([self, b], lambda g: (g.zeros_like(), g.zeros_like()))
    a, b = self._broadcasted(b, "div")
    return a._wrap(UOp(Ops.IDIV, a.dtype, (a.uop, b.uop)), b)
  def floordiv(self, x, reverse=False) -> Tensor:
    a, b = self._broadcasted(x, "floordiv", reverse)
    if a.dtype.is_float:   # Python's (and PyTorch's) floor division: from the exact remainder, rounded to the nearest integer
      ad, bd = a.detach(), b.detach()
      r = ad.fmod(bd)
      q = (ad - r) / bd
      q = ((r != 0) & ((bd < 0) != (r < 0))).where(q - 1, q)
      fq = q.floor()
      fq = (q - fq > 0.5).where(fq + 1, fq)
      out = (bd == 0).where(ad / bd, (q == 0).where((ad / bd)._signbit().where(-0.0, 0.0), fq))
      return out.custom_gradient([a, b], lambda g: (g.zeros_like(), g.zeros_like()))   # (PyTorch's: an explicit 0)
    if a.dtype.is_bool: raise TypeError("floordiv: not supported for bool tensors")
    q = a._wrap(UOp(Ops.IDIV, a.dtype, (a.uop, b.uop)), b)
    if a.dtype.is_unsigned: return q
    r = a._wrap(UOp(Ops.MOD, a.dtype, (a.uop, b.uop)), b)
    return q - ((r != 0) & ((r < 0) != (b < 0))).cast(a.dtype)
  def mod(self, x, reverse=False) -> Tensor:
    a, b = self._broadcasted(x, "mod", reverse)
    if a.dtype.is_float:   # the exact fmod, moved to b's sign; PyTorch's gradients
      r = a.detach().fmod(b.detach())
      r = ((r != 0) & ((r < 0) != (b.detach() < 0))).where(r + b.detach(), r)
      return r.custom_gradient([a, b], lambda g: (g, -g * (a.detach() // b.detach())))
    if a.dtype.is_bool: raise TypeError("mod: not supported for bool tensors")
    r = a._wrap(UOp(Ops.MOD, a.dtype, (a.uop, b.uop)), b)
    if a.dtype.is_unsigned: return r
    return ((r != 0) & ((r < 0) != (b < 0))).where(r + b, r)
  def fmod(self, x) -> Tensor:
    """C's fmod (for floats exact, like PyTorch's: the MOD op renders as fmod)."""
    a, b = self._broadcasted(x, "fmod")
    r = a._wrap(UOp(Ops.MOD, a.dtype, (a.uop, b.uop)), b)
    return r.custom_gradient([a, b], lambda g: (g, -g * (a / b).trunc())) if a.dtype.is_float else r
  def pow(self, x, reverse=False) -> Tensor:
    """PyTorch's pow: C's powf for floats, with its gradients. An integer tensor to a negative integer constant raises
    RuntimeError (like PyTorch); with an integer tensor exponent a negative exponent gives PyTorch's integer result
    (1 for a base of 1, +-1 for -1, else 0)."""
    if not reverse and isinstance(x, (int, float)) and not isinstance(x, bool):
      if not self.dtype.is_float and isinstance(x, int):
        if x < 0: raise RuntimeError(f"pow: integers to negative integer powers are not allowed ({self.dtype.name} tensor ** {x}); "
                                     "cast the base to a float dtype first")
        return self._pow_by_squaring(x)
      if self.dtype.is_float:   # PyTorch's own cases (x*x, x*x*x, sqrt, rsqrt, 1/x, 1/(x*x)), other small integers by squaring
        d, small_int = self.detach(), math.isfinite(x) and x == int(x) and abs(x) <= 32
        out = d.sqrt() if x == 0.5 else d.rsqrt() if x == -0.5 else None if not small_int else \
          d._pow_by_squaring(int(x)) if x >= 0 else d._pow_by_squaring(-int(x)).reciprocal()
        if out is not None: return out.custom_gradient([self], lambda g: (g.zeros_like() if x == 0 else g * (x * self.pow(x - 1)),))
    base, ex = self._broadcasted(x, "pow", reverse)
    if not base.dtype.is_float: return base._int_pow(ex)
    # C's powf: |b|^e via exp2/log2; the sign of b for odd integer e (-0.0 and -inf included), NaN for b < 0 and
    # non-integer e; 1 for e = 0, b = 1 and b = -1 with e = +-inf
    b, e = base.detach(), ex.detach()
    mag = (e * b.abs().log2()).exp2_()
    e_int = e.trunc() == e
    out = (b._signbit() & e_int & ((e * 0.5).trunc() != e * 0.5)).where(-mag, mag)
    out = ((b < 0) & (b != -math.inf) & e_int.logical_not()).where(math.nan, out)
    out = ((e == 0) | (b == 1) | ((b == -1) & e.isinf())).where(1.0, out)
    # PyTorch's gradients: e * b**(e-1) (0 where e = 0) and b**e * ln(b) (0 where b = 0 and e >= 0)
    # (grouped as torch: e * b**(e-1) first, so 3e38 * 0**3e38 is 0 before it meets g)
    return out.custom_gradient([base, ex], lambda g: ((ex == 0).where(0.0, g * (ex * base.pow(ex - 1))),
                                                      g * ((base == 0) & (ex >= 0)).where(0.0, out * base.log())))
  def _pow_by_squaring(self, n: int) -> Tensor:
    """self ** n for an int n >= 0, multiplying (exact for ints; for floats PyTorch's x*x and x*x*x, few roundings)."""
    if n == 0: return Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
    out, sq = None, self
    while n:
      if n & 1: out = sq if out is None else out * sq
      n >>= 1
      if n: sq = sq * sq
    return out
  def _signbit(self) -> Tensor:
    """Whether the sign bit is set (true for -0.0 and -inf, unlike self < 0)."""
    return self.bitcast({2: dtypes.int16, 4: dtypes.int32, 8: dtypes.int64}[self.dtype.itemsize]) < 0
  def _int_pow(self, ex: Tensor) -> Tensor:
    out = Tensor.ones(self.shape, dtype=self.dtype, device=self.device)
    base, e = self, ex
    for _ in range(self.dtype.bits if self.dtype.itemsize < 8 else 63):  # square-and-multiply, unrolled
      out = ((e & 1) != 0).where(out * base, out)
      e, base = e >> 1, base * base
    return (ex < 0).where((self.abs() == 1).where(((ex & 1) != 0).where(self, 1), 0), out)
  def maximum(self, x) -> Tensor: return self._binary(Ops.MAX, x, name="maximum")
  def minimum(self, x) -> Tensor:
    a, b = self._broadcasted(x, "minimum")
    if a.dtype.is_bool: return a & b
    return -((-a).maximum(-b)) if a.dtype.is_float else ~((~a).maximum(~b))
  def where(self, x, y) -> Tensor:
    """self is the condition: out = x where self else y."""
    cond = self if self.dtype.is_bool else self.bool()
    if isinstance(x, Tensor) or isinstance(y, Tensor):
      ref = x if isinstance(x, Tensor) else y
      x, y = ref._broadcasted(y, "where") if ref is x else (y._broadcasted(x, "where", reverse=True))
    else:
      dt = least_upper_dtype(scalar_dtype(x), scalar_dtype(y))
      x, y = Tensor(Tensor._const_uop(x, dt, cond.device, ())), Tensor(Tensor._const_uop(y, dt, cond.device, ()))
    shape = _broadcast_shape("where", cond.shape, x.shape, y.shape)
    c, x, y = cond._broadcast_to(shape, "where"), x._broadcast_to(shape, "where"), y._broadcast_to(shape, "where")
    if c.device != x.device: raise RuntimeError(f"where: expected all tensors on the same device, got {c.device} and {x.device}")
    return x._wrap(UOp(Ops.WHERE, x.dtype, (c.uop, x.uop, y.uop)), y, c)
  def masked_fill(self, mask: Tensor, value) -> Tensor: return mask.where(value, self).cast(self.dtype)   # (self's dtype, like torch)

  def neg(self) -> Tensor:
    if self.dtype.is_bool: raise TypeError("neg: negation of a bool tensor is not supported; use logical_not or ~")
    return self._unary(Ops.NEG)
  def logical_not(self) -> Tensor: return self.bool() != True  # noqa: E712
  def logical_and(self, x) -> Tensor: return self.bool() & (x.bool() if isinstance(x, Tensor) else bool(x))
  def logical_or(self, x) -> Tensor: return self.bool() | (x.bool() if isinstance(x, Tensor) else bool(x))
  def logical_xor(self, x) -> Tensor: return self.bool() ^ (x.bool() if isinstance(x, Tensor) else bool(x))
  def bitwise_and(self, x, reverse=False) -> Tensor: self._check_int_op("bitwise_and", x); return self._binary(Ops.AND, x, reverse, "bitwise_and")
  def bitwise_or(self, x, reverse=False) -> Tensor: self._check_int_op("bitwise_or", x); return self._binary(Ops.OR, x, reverse, "bitwise_or")
  def bitwise_xor(self, x, reverse=False) -> Tensor: self._check_int_op("bitwise_xor", x); return self._binary(Ops.XOR, x, reverse, "bitwise_xor")
  def bitwise_not(self) -> Tensor:
    self._check_int_op("bitwise_not")
    return self.logical_not() if self.dtype.is_bool else self ^ -1 if not self.dtype.is_unsigned else self ^ self.dtype.max
  def lshift(self, x, reverse=False) -> Tensor:
    self._check_int_op("lshift", x)
    return self._binary(Ops.SHL, x, reverse, "lshift")
  def rshift(self, x, reverse=False) -> Tensor:
    self._check_int_op("rshift", x)
    return self._binary(Ops.SHR, x, reverse, "rshift")

  def exp2_(self) -> Tensor: return self._float_input()._unary(Ops.EXP2)   # the primitive, used by exp and pow
  def exp(self) -> Tensor: return (self._float_input() * (1 / math.log(2))).exp2_()
  def exp2(self) -> Tensor: return self.exp2_()
  def log2(self) -> Tensor: return self._float_input()._unary(Ops.LOG2)
  def log(self) -> Tensor: return self.log2() * math.log(2)
  def log10(self) -> Tensor: return self.log2() * (math.log(2) / math.log(10))
  def log1p(self) -> Tensor:
    x = self._float_input()
    d = x.detach()
    # log(1 + x) loses the low digits of a small x: for -0.3 < x < 0.5 the series 2 atanh(s) = 2 (s + s^3/3 + ... + s^11/11)
    # in s = x / (2 + x) (|s| <= 0.2: within 1e-8 relative), which has no 1 + x - 1 for a compiler to "simplify"
    s = d / (2 + d)
    s2 = s * s
    poly = s2 * (1 / 11)
    for k in (9, 7, 5, 3): poly = (poly + 1 / k) * s2
    out = ((d > -0.3) & (d < 0.5)).where((poly + 1) * (s + s), (1 + d).log())
    return out.custom_gradient([x], lambda g: (g / (x + 1),))
  def expm1(self) -> Tensor:
    x = self._float_input()
    d = x.detach()
    # exp(x) - 1 loses the low digits of a small x: there the Taylor series to x^8/8! (within 1e-8 relative for |x| < 0.5)
    poly = d * (1 / 40320)
    for k in (5040, 720, 120, 24, 6, 2, 1): poly = (poly + 1 / k) * d
    out = ((d > -0.5) & (d < 0.5)).where(poly, d.exp() - 1)
    return out.custom_gradient([x], lambda g: (g * (out + 1),))
  def sqrt(self) -> Tensor: return self._float_input()._unary(Ops.SQRT)
  def rsqrt(self) -> Tensor: return self.sqrt().reciprocal()
  def reciprocal(self) -> Tensor: return self._float_input()._unary(Ops.RECIP)
  def sin(self) -> Tensor: return self._float_input()._unary(Ops.SIN)
  def cos(self) -> Tensor: return self._float_input()._unary(Ops.COS)
  def tan(self) -> Tensor:
    x = self._float_input()
    out = x.detach().sin() / x.detach().cos()
    return out.custom_gradient([x], lambda g: (g * (1 + out * out),))   # torch's (the quotient rule met inf * 0 at x = 0)
  def square(self) -> Tensor: return self * self
  def abs(self) -> Tensor:
    if self.dtype.is_bool or self.dtype.is_unsigned: return self
    if not self.dtype.is_float: return (self < 0).where(-self, self)
    # a float's sign bit cleared: one instruction in a fused kernel, and PyTorch's value for -0.0 and NaN too. The gradient
    # is PyTorch's, g * sign(x) (0 at 0 and NaN)
    bits = {2: dtypes.uint16, 4: dtypes.uint32, 8: dtypes.uint64}[self.dtype.itemsize]
    out = (self.detach().bitcast(bits) & (bits.max >> 1)).bitcast(self.dtype)
    return out.custom_gradient([self], lambda g: (g * self.sign(),))
  def sign(self) -> Tensor:
    """-1, 0 or 1; 0 for NaN, like PyTorch. Its gradient is an explicit 0 (as trunc's)."""
    if self.dtype.is_bool: return self
    if self.dtype.is_unsigned: return (self > 0).cast(self.dtype)
    return (self > 0).where(1, (self < 0).where(-1, 0)).cast(self.dtype).custom_gradient([self], lambda g: (g.zeros_like(),))
  def trunc(self) -> Tensor: return self._unary(Ops.TRUNC) if self.dtype.is_float else self
  def floor(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self < t).where(t - 1, t)
  def ceil(self) -> Tensor:
    if not self.dtype.is_float: return self
    t = self.trunc()
    return (self > t).where(t + 1, t)
  def round(self) -> Tensor:
    """Round half to even, like PyTorch."""
    if not self.dtype.is_float: return self
    f = self.floor()
    d = self - f
    f_even = (f * 0.5).floor() * 2 == f
    return (d > 0.5).where(f + 1, (d < 0.5).where(f, f_even.where(f, f + 1)))
  def frac(self) -> Tensor: return self - self.trunc()
  def isnan(self) -> Tensor: return self != self
  def isinf(self, detect_positive=True, detect_negative=True) -> Tensor:
    return ((self == math.inf) & detect_positive) | ((self == -math.inf) & detect_negative)
  def isfinite(self) -> Tensor: return (self.isinf() | self.isnan()).logical_not()
  def lerp(self, end: Tensor, weight) -> Tensor:
    """PyTorch's formula (from self where |weight| < 0.5, else from end: exact at weight 0 and 1) and its gradients."""
    a, b = self._broadcasted(end, "lerp")
    w = weight
    if isinstance(w, Tensor): a, w = a._broadcasted(w, "lerp"); b = b._broadcast_to(a.shape)
    ad, bd, wd = a.detach(), b.detach(), w.detach() if isinstance(w, Tensor) else w
    near_a, near_b = ad + wd * (bd - ad), bd - (bd - ad) * (1 - wd)
    # PyTorch's kernel forms end - diff * (1 - w) with a fused multiply-add: a product past float32's range whose result
    # is within it comes out finite. In halves (exact at these magnitudes) that product fits; used only where it overflowed
    halved = (bd * 0.5 - (bd - ad) * 0.5 * (1 - wd)) * 2
    near_b = (near_b.isinf() & halved.isfinite()).where(halved, near_b)
    out = (wd.abs() < 0.5).where(near_a, near_b) if isinstance(w, Tensor) else near_a if abs(w) < 0.5 else near_b
    if not isinstance(w, Tensor): return out.custom_gradient([a, b], lambda g: (g * (1 - w), g * w))
    return out.custom_gradient([a, b, w], lambda g: (g * (1 - w), g * w, g * (b - a)))
  def clip(self, min_=None, max_=None) -> Tensor:
    if min_ is None and max_ is None: raise ValueError("clip: at least one of min and max must be given")
    out = self.detach()
    # as PyTorch: the bound where x passes it or the bound is NaN, else x itself (so -0.0 stays -0.0 against a bound of 0)
    for bound, past in ((min_, Tensor.__lt__), (max_, Tensor.__gt__)):
      if bound is not None:
        out, b = out._broadcasted(bound, "clip")   # (a scalar bound checked against the dtype, a float bound promoting)
        out = (past(out, b) | (b != b)).where(b, out)
    # a float bound on an int tensor promotes, like PyTorch; otherwise the dtype stays
    out = out if not self.dtype.is_float and any(isinstance(b, float) for b in (min_, max_)) else out.cast(self.dtype)
    # PyTorch's gradients: to x where lo <= x <= hi (none for NaN); to a tensor bound where x passes it (to hi where hi < lo)
    x, lo, hi = (t._broadcast_to(out.shape) if isinstance(t, Tensor) else t for t in (self, min_, max_))
    ge, le = None if lo is None else x >= lo, None if hi is None else x <= hi
    def backward(g):
      grads = [(le if ge is None else ge if le is None else ge & le).where(g, 0.0)]
      if isinstance(lo, Tensor): grads.append((x < lo if hi is None else (x < lo) & (lo < hi)).where(g, 0.0))
      if isinstance(hi, Tensor): grads.append((x > hi if lo is None else (x > hi) | (hi < lo)).where(g, 0.0))
      return tuple(grads)
    return out.custom_gradient([x] + [t for t in (lo, hi) if isinstance(t, Tensor)], backward)
  def clamp(self, min=None, max=None) -> Tensor: return self.clip(min, max)  # noqa: A002

  # activations: PyTorch's formulas and gradients (custom where the gradient of the formula would meet inf * 0)
  def relu(self) -> Tensor: return (self < 0).where(0, self).custom_gradient([self], lambda g: ((self <= 0).where(0.0, g),))
  def sigmoid(self) -> Tensor:
    x = self._float_input()
    out = (1 + (-x.detach()).exp()).reciprocal()
    return out.custom_gradient([x], lambda g: (g * out * (1 - out),))
  def hardsigmoid(self, alpha=1 / 6, beta=0.5) -> Tensor:
    x = self._float_input()
    y = x.detach() * alpha + beta
    return y.clip(0, 1).custom_gradient([x], lambda g: (((y > 0) & (y < 1)).where(g * alpha, 0.0),))
  def tanh(self) -> Tensor:
    x = self._float_input()
    d = x.detach()
    # with e = expm1(2|x|): e / (e + 2) near 0, 1 - 2 / (e + 2) further out (neither 1 - tiny nor inf / inf); x's sign
    a = d.abs()
    e = (a + a).expm1()
    r = (e + 2).reciprocal()
    t = (a < 0.55).where(e * r, 1 - 2 * r)
    out = d._signbit().where(-t, t)
    return out.custom_gradient([x], lambda g: (g * (1 - out * out),))
  def sinh(self) -> Tensor:
    x = self._float_input()
    d, a = x.detach(), x.detach().abs()
    # (e - 1/e) / 2 with e = expm1(|x|) + 1 near 0, else with e = h * h, h = exp(|x| / 2) (finite up to |x| = 89.4)
    em, h = a.expm1(), (a * 0.5).exp()
    out = (a < 1).where((em + em / (em + 1)) * 0.5, (h * 0.5) * h - (0.5 / h) / h)
    return d._signbit().where(-out, out).custom_gradient([x], lambda g: (g * x.cosh(),))
  def cosh(self) -> Tensor:
    x = self._float_input()
    h = (x.detach().abs() * 0.5).exp()
    return ((h * 0.5) * h + (0.5 / h) / h).custom_gradient([x], lambda g: (g * x.sinh(),))
  def atanh(self) -> Tensor:
    x = self._float_input()
    d = x.detach()
    return ((2 * d / (1 - d)).log1p() * 0.5).custom_gradient([x], lambda g: (g / (1 - x * x),))
  def asinh(self) -> Tensor:
    x = self._float_input()
    d, a = x.detach(), x.detach().abs()
    # log1p(|x| + x^2 / (1 + sqrt(1 + x^2))) with x's sign; ln(2|x|) where 1 + x^2 rounds to x^2 (before x^2 overflows)
    big = x._square_loses_one()
    out = (a > big).where(a.log() + math.log(2), (a + a * a / (1 + (a * a + 1).sqrt())).log1p())
    return d._signbit().where(-out, out).custom_gradient([x], lambda g: (g * (x * x + 1).rsqrt(),))
  def acosh(self) -> Tensor:
    x = self._float_input()
    d = x.detach()
    big = x._square_loses_one()
    out = (d < 1).where(math.nan, (d > big).where(d.log() + math.log(2), ((d - 1) + ((d - 1) * (d + 1)).sqrt()).log1p()))
    return out.custom_gradient([x], lambda g: (g * (x * x - 1).rsqrt(),))
  def _square_loses_one(self) -> float:
    """The magnitude above which x^2 +- 1 rounds to x^2 in this float dtype: 2^(significand bits / 2)."""
    return {dtypes.float16: 2.0 ** 6, dtypes.bfloat16: 2.0 ** 4, dtypes.float32: 2.0 ** 12, dtypes.float64: 2.0 ** 27}[self.dtype]
  def leaky_relu(self, neg_slope=0.01) -> Tensor: return (self > 0).where(self, self * neg_slope)
  def _elu(self, alpha: float, scale: float, input_scale: float) -> Tensor:
    """PyTorch's elu family: scale * x for x > 0, else scale * alpha * expm1(x * input_scale). The gradient at NaN is
    NaN, as in PyTorch's vectorized kernel (its scalar tail gives scale)."""
    x = self._float_input()
    d = x.detach()
    return (d > 0).where(d * scale, (d * input_scale).expm1() * (scale * alpha)).custom_gradient(
      [x], lambda g: ((d > 0).logical_not().where(g * (input_scale * scale * alpha) * (d * input_scale).exp(), g * scale),))
  def elu(self, alpha=1.0) -> Tensor: return self._elu(alpha, 1.0, 1.0)
  def celu(self, alpha=1.0) -> Tensor: return self._elu(alpha, 1.0, 1 / alpha)
  def selu(self, alpha=1.6732632423543772, gamma=1.0507009873554805) -> Tensor: return self._elu(alpha, gamma, 1.0)
  def gelu(self) -> Tensor:
    """The tanh approximation, x * (1 + tanh(z)) / 2 = x * sigmoid(2z), z = sqrt(2/pi) * (x + 0.044715 x^3)."""
    x, k = self._float_input(), math.sqrt(2 / math.pi)
    d = x.detach()
    s = (d * (2 * k) * (1 + 0.044715 * d * d)).sigmoid()
    # PyTorch's gradient: (1 + tanh(z)) / 2 + x / 2 * (1 - tanh(z)^2) * dz/dx, where 1 + tanh(z) = 2s, 1 - tanh(z)^2 = 4s(1 - s)
    return (d * s).custom_gradient([x], lambda g: (g * (s + 2 * d * s * (1 - s) * (k * (1 + 3 * 0.044715 * d * d))),))
  def quick_gelu(self) -> Tensor: return self * (self * 1.702).sigmoid()
  def silu(self) -> Tensor:
    x = self._float_input()
    s = x.detach().sigmoid()
    # PyTorch's gradient g * s * (1 + x (1 - s)): x (1 - s) is 0 at a huge x, where (g x) s (1 - s) would be inf * 0
    return (x.detach() * s).custom_gradient([x], lambda g: (g * s * (1 + x.detach() * (1 - s)),))
  def swish(self) -> Tensor: return self.silu()
  def softplus(self, beta=1.0, threshold=20.0) -> Tensor:
    x = self._float_input()
    d = x.detach()
    # log1p(exp(bx)) as max(bx, 0) + log1p(exp(-|bx|)), which does not overflow (in float16 exp(bx) would above 11)
    bx = d * beta
    out = (bx > threshold).where(d, (bx.maximum(0) + (-bx.abs()).exp().log1p()) / beta)
    return out.custom_gradient([x], lambda g: ((x * beta > threshold).where(g, g * (x * beta).sigmoid()),))
  def mish(self) -> Tensor:
    x = self._float_input()
    d = x.detach()
    t = d.exp().log1p().tanh()   # tanh(softplus(x)), without softplus's threshold (as PyTorch)
    return (d * t).custom_gradient([x], lambda g: (g * (t + d * d.sigmoid() * (1 - t * t)),))
  def hardtanh(self, min_val=-1.0, max_val=1.0) -> Tensor:
    if min_val > max_val: raise ValueError(f"hardtanh: min_val ({min_val}) must not be greater than max_val ({max_val})")
    # PyTorch's gradient (of its vectorized kernel: 0 at NaN; its scalar tail passes a NaN's gradient through)
    return self.detach().clip(min_val, max_val).custom_gradient([self], lambda g: (((self > min_val) & (self < max_val)).where(g, 0.0),))
  def relu6(self) -> Tensor: return self.hardtanh(0, 6)
  def hardswish(self) -> Tensor:
    x = self._float_input()
    d = x.detach()
    # torch's gradient (its vectorized kernel's: the middle branch is the one left for NaN)
    return (d * (d + 3).clip(0, 6) / 6).custom_gradient([x], lambda g: ((d <= -3).where(0.0, (d >= 3).where(g, g * (d / 3 + 0.5))),))
  def softsign(self) -> Tensor: return self / (1 + self.abs())
  def logsigmoid(self) -> Tensor:
    x = self._float_input()
    d = x.detach()
    z = (-d.abs()).exp()
    return (d.minimum(0) - z.log1p()).custom_gradient([x], lambda g: (g * (d < 0).where(1 - z / (1 + z), z / (1 + z)),))

  # operators
  def __neg__(self): return self.neg()
  def __add__(self, x): return self.add(x)
  def __radd__(self, x): return self.add(x, True)
  def __sub__(self, x): return self.sub(x)
  def __rsub__(self, x): return self.sub(x, True)
  def __mul__(self, x): return self.mul(x)
  def __rmul__(self, x): return self.mul(x, True)
  def __truediv__(self, x): return self.div(x)
  def __rtruediv__(self, x): return self.div(x, True)
  def __floordiv__(self, x): return self.floordiv(x)
  def __rfloordiv__(self, x): return self.floordiv(x, True)
  def __mod__(self, x): return self.mod(x)
  def __rmod__(self, x): return self.mod(x, True)
  def __pow__(self, x): return self.pow(x)
  def __rpow__(self, x): return self.pow(x, True)
  def __matmul__(self, x): return self.matmul(x)
  def __rmatmul__(self, x): return Tensor(x, device=self.device).matmul(self) if not isinstance(x, Tensor) else x.matmul(self)
  def __and__(self, x): return self.bitwise_and(x)
  def __rand__(self, x): return self.bitwise_and(x, True)
  def __or__(self, x): return self.bitwise_or(x)
  def __ror__(self, x): return self.bitwise_or(x, True)
  def __xor__(self, x): return self.bitwise_xor(x)
  def __rxor__(self, x): return self.bitwise_xor(x, True)
  def __invert__(self): return self.bitwise_not()
  def __lshift__(self, x): return self.lshift(x)
  def __rshift__(self, x): return self.rshift(x)
  def __rlshift__(self, x): return self.lshift(x, True)
  def __rrshift__(self, x): return self.rshift(x, True)
  def __abs__(self): return self.abs()
  def __iadd__(self, x): return self.assign(self + x)
  def __isub__(self, x): return self.assign(self - x)
  def __imul__(self, x): return self.assign(self * x)
  def __itruediv__(self, x): return self.assign(self / x)
  def __lt__(self, x): return self._binary(Ops.CMPLT, x, name="lt")
  def __gt__(self, x): return self._binary(Ops.CMPLT, x, reverse=True, name="gt")
  def __le__(self, x): return self._binary(Ops.CMPLT, x, name="le") | self._binary(Ops.CMPEQ, x, name="le")
  def __ge__(self, x): return self._binary(Ops.CMPLT, x, reverse=True, name="ge") | self._binary(Ops.CMPEQ, x, name="ge")
  def __eq__(self, x): return self._binary(Ops.CMPEQ, x, name="eq")  # type: ignore[override]
  def __ne__(self, x): return self._binary(Ops.CMPNE, x, name="ne")  # type: ignore[override]
  def eq(self, x): return self == x
  def ne(self, x): return self != x
  def lt(self, x): return self < x
  def gt(self, x): return self > x
  def le(self, x): return self <= x
  def ge(self, x): return self >= x

  # ---------------------------------------------------------------------------------------------------------------
  # indexing

  def _basic_index(self, index: tuple) -> tuple[Tensor, list, list[tuple[int, Any]]]:
    """Apply ints, slices, None, bools and Ellipsis. Returns the view, the movement ops applied (to invert them for
    __setitem__), and (dim in the view, index, dim of self) for every tensor/list index, whose dims are kept whole. True and False
    add a dimension of size 1 and 0 (PyTorch's and numpy's meaning: a 0-d mask, not an int). A lone bool is applied
    here; with other bools or tensor/list indices it is an index of that new dimension, combined with them."""
    index = tuple(_index_scalar(i) for i in index)
    lone_bool = sum(type(i) is bool for i in index) == 1 and \
      not any(isinstance(i, (Tensor, list, tuple)) or (type(i).__module__ == "numpy" and getattr(i, "ndim", 0) > 0) for i in index)
    n_real = sum(1 for i in index if i is not None and i is not Ellipsis and type(i) is not bool)
    if sum(1 for i in index if i is Ellipsis) > 1: raise IndexError("an index can only have a single ellipsis ('...')")
    if n_real > self.ndim: raise IndexError(f"too many indices for tensor of dimension {self.ndim} (got {n_real})")
    if (e := next((k for k, i in enumerate(index) if i is Ellipsis), None)) is not None:
      index = index[:e] + (slice(None),) * (self.ndim - n_real) + index[e + 1:]
    else: index = index + (slice(None),) * (self.ndim - n_real)
    x, ops, fancy = self, [], []
    dim, src = 0, 0   # the current dim in x, and the dim of self it comes from
    def do(name, arg):
      nonlocal x
      ops.append((name, arg, x.shape))
      x = getattr(x, name)(arg) if name != "reshape" else x.reshape(arg)
    for idx in index:
      if idx is None or type(idx) is bool:
        do("reshape", x.shape[:dim] + (1,) + x.shape[dim:])
        if type(idx) is bool and not lone_bool: fancy.append((dim, idx, None))
        elif idx is False: do("shrink", tuple((0, 0) if d == dim else None for d in range(x.ndim)))
        dim += 1
        continue
      if isinstance(idx, int):
        n = x.shape[dim]
        if not -n <= idx < n: raise IndexError(f"index {idx} is out of bounds for dimension {src} with size {n}")
        i = idx % n
        do("shrink", tuple((i, i + 1) if d == dim else None for d in range(x.ndim)))
        do("reshape", x.shape[:dim] + x.shape[dim + 1:])
      elif isinstance(idx, slice):
        n = x.shape[dim]
        start, stop, step = idx.indices(n)
        count = len(range(start, stop, step))
        if step < 0:
          do("flip", (dim,))
          start, step = n - 1 - start, -step
        length = (count - 1) * step + 1 if count else 0
        if (start, start + length) != (0, n):
          do("shrink", tuple((start, start + length) if d == dim else None for d in range(x.ndim)))
        if step > 1 and count > 1:
          do("_pad_zero", tuple((0, count * step - length) if d == dim else (0, 0) for d in range(x.ndim)))
          do("reshape", x.shape[:dim] + (count, step) + x.shape[dim + 1:])
          do("shrink", tuple((0, 1) if d == dim + 1 else None for d in range(x.ndim)))
          do("reshape", x.shape[:dim + 1] + x.shape[dim + 2:])
        dim += 1
      elif isinstance(idx, (Tensor, list, tuple)) or (type(idx).__module__ == "numpy" and getattr(idx, "ndim", 0) > 0):
        fancy.append((dim, idx, src)); dim += 1
      else: raise IndexError(f"unsupported index type {type(idx).__name__}: valid are int, bool, slice, None, Ellipsis, Tensor, list")
      src += 1
    return x, ops, fancy

  def _index_tensor(self, idx, size: int, dim: int) -> Tensor:
    """An index given as Tensor/list/array -> int32 Tensor with negative values wrapped (bounds checked for constants)."""
    if type(idx) is bool: return Tensor([0] if idx else [], dtype=dtypes.int32, device=self.device)   # (of a new size-1 dim)
    if not isinstance(idx, Tensor):
      vals, shape = _flatten_list(idx.tolist() if hasattr(idx, "tolist") else list(idx), "index")
      if vals and all(type(v) is bool for v in vals): return self._index_tensor(Tensor(vals, device=self.device).reshape(shape), size, dim)
      if (bad := [v for v in vals if isinstance(v, bool) or not hasattr(type(v), "__index__")]):
        raise IndexError(f"index: list and array indices must hold ints (or only bools: a mask), got {type(bad[0]).__name__} {bad[0]!r}")
      vals = [operator.index(v) for v in vals]
      for v in vals:
        if not -size <= v < size: raise IndexError(f"index {v} is out of bounds for dimension {dim} with size {size}")
      idx = Tensor(vals, dtype=dtypes.int32, device=self.device).reshape(shape)
    if idx.dtype.is_bool:  # a mask selects the positions where it is True (needs the values now)
      flat = idx.flatten().tolist()
      if idx.ndim != 1: raise IndexError(f"boolean mask indexing is supported for 1-D masks here, got shape {idx.shape}")
      if len(flat) != size: raise IndexError(f"boolean mask of length {len(flat)} does not match dimension {dim} of size {size}")
      return Tensor([i for i, b in enumerate(flat) if b], dtype=dtypes.int32, device=self.device)
    if idx.dtype.is_float: raise IndexError(f"tensors used as indices must be integer or bool, got {idx.dtype.name}")
    if idx.device != self.device: raise RuntimeError(f"index: index is on {idx.device}, tensor on {self.device}")
    idx = idx.cast(dtypes.int32)
    return (idx < 0).where(idx + size, idx)

  def __getitem__(self, index) -> Tensor:
    index = index if isinstance(index, tuple) else (index,)
    x, _, fancy = self._basic_index(index)
    if not fancy: return x
    dims = [d for d, _, _ in fancy]
    idxs = [self._index_tensor(i, x.shape[d], src) for d, i, src in fancy]
    try: bshape = _broadcast_shape("index", *[i.shape for i in idxs])
    except ValueError as e: raise IndexError(str(e)) from None   # (numpy's and PyTorch's type for it)
    rest = [d for d in range(x.ndim) if d not in dims]
    # one-hot selection: out[r, b] = sum_k x[r, k] * prod_d (idx_d[b] == k_d)
    xp = x.permute(rest + dims)
    rshape, nshape = tuple(x.shape[d] for d in rest), tuple(x.shape[d] for d in dims)
    mask = None
    for j, (i, n) in enumerate(zip(idxs, nshape)):
      oh = i._broadcast_to(bshape).reshape(bshape + (1,) * j + (1,) + (1,) * (len(nshape) - j - 1))
      ar = Tensor.arange(n, device=self.device).reshape((1,) * len(bshape) + (1,) * j + (n,) + (1,) * (len(nshape) - j - 1))
      m = oh == ar
      mask = m if mask is None else mask & m
    xe = xp.reshape(rshape + (1,) * len(bshape) + nshape)
    out = mask.where(xe, 0).sum(tuple(range(len(rshape) + len(bshape), len(rshape) + len(bshape) + len(nshape))), dtype=x.dtype) \
      if x.dtype.is_float else mask.where(xe, 0).sum(tuple(range(len(rshape) + len(bshape), len(rshape) + len(bshape) + len(nshape)))).cast(x.dtype)
    # where the indexed dims go: in place of the first one if they were adjacent, else in front (PyTorch/numpy rule)
    if dims == list(range(dims[0], dims[0] + len(dims))) and dims[0] > 0:
      p = dims[0]
      nr, nb = len(rshape), len(bshape)
      out = out.permute(list(range(p)) + list(range(nr, nr + nb)) + list(range(p, nr)))
    elif dims[0] == 0 or dims != list(range(dims[0], dims[0] + len(dims))):
      nr, nb = len(rshape), len(bshape)
      out = out.permute(list(range(nr, nr + nb)) + list(range(nr)))
    return out

  def __setitem__(self, index, value) -> None:
    index = index if isinstance(index, tuple) else (index,)
    v = value if isinstance(value, Tensor) else Tensor(value, device=self.device, dtype=self.dtype) \
      if isinstance(value, (list, tuple)) or getattr(value, "ndim", 0) else Tensor(Tensor._const_uop(value, self.dtype, self.device, (), "setitem"))
    if v.device != self.device: raise RuntimeError(f"setitem: value is on {v.device}, tensor on {self.device}")
    v = v.cast(self.dtype)
    sel, ops, fancy = self._basic_index(index)
    if fancy:
      # positions of the selected elements in the flattened tensor, then a one-hot scatter of the values
      sel_pos = Tensor.arange(self.numel(), device=self.device).reshape(self.shape)[index]
      pos, vals = sel_pos.flatten(), v._broadcast_to(sel_pos.shape, "setitem").flatten()
      hit = pos.unsqueeze(1) == Tensor.arange(self.numel(), device=self.device).unsqueeze(0)
      # the last write wins for repeated positions, like sequential assignment
      order = Tensor.arange(pos.shape[0], device=self.device).unsqueeze(1)
      last = hit.where(order, -1).max(0)
      chosen = hit & (order == last.unsqueeze(0))
      newv = chosen.where(vals.unsqueeze(1), 0).sum(0, dtype=self.dtype).cast(self.dtype) if not self.dtype.is_bool else chosen.where(vals.unsqueeze(1), False).any(0)
      self.assign((last >= 0).reshape(self.shape).where(newv.reshape(self.shape), self))
      return
    try: v = v._broadcast_to(sel.shape, "setitem")
    except ValueError: raise ValueError(f"setitem: value of shape {v.shape} cannot be broadcast to the selection {sel.shape}") from None
    inside = Tensor.ones(sel.shape, dtype=dtypes.bool, device=self.device)
    for name, arg, before in reversed(ops):   # undo each view op to place the values at their positions
      if name == "shrink":
        pad = tuple((b, n - e) if a is not None else (0, 0) for a, (b, e), n in
                    zip(arg, [a if a is not None else (0, n) for a, n in zip(arg, before)], before))
        v, inside = v._pad_zero(pad), inside._pad_zero(pad)
      elif name == "_pad_zero":
        sh = tuple((b, b + n) for (b, _), n in zip(arg, before))
        v, inside = v.shrink(sh), inside.shrink(sh)
      elif name == "flip": v, inside = v.flip(*arg), inside.flip(*arg)
      else: v, inside = v.reshape(before), inside.reshape(before)
    self.assign(inside.where(v, self))

  def gather(self, dim: int, index: Tensor) -> Tensor:
    d = _normalize_axis("gather", dim, self.ndim)
    if not isinstance(index, Tensor) or not index.dtype.is_int:
      raise TypeError(f"gather: index must be an integer Tensor, got {getattr(index, 'dtype', type(index).__name__)}")
    if index.ndim != self.ndim:
      raise ValueError(f"gather: index must have the same number of dimensions as the input, got {index.shape} for input {self.shape}")
    if any(i > s for j, (i, s) in enumerate(zip(index.shape, self.shape)) if j != d):
      raise ValueError(f"gather: index shape {index.shape} is larger than input {self.shape} outside dimension {d}")
    n = self.shape[d]
    x = self.shrink(tuple(None if j == d else (0, i) for j, i in enumerate(index.shape)))
    idx = self._index_tensor(index, n, d)
    mask = idx.unsqueeze(-1) == Tensor.arange(n, device=self.device)
    xe = x.permute([j for j in range(self.ndim) if j != d] + [d]).unsqueeze(d)   # (..., 1 at d, ..., n)
    out = mask.where(xe, 0).sum(-1, dtype=self.dtype if self.dtype.is_float else None)
    return out.cast(self.dtype)

  def scatter(self, dim: int, index: Tensor, src, reduce: Optional[str] = None) -> Tensor:
    d = _normalize_axis("scatter", dim, self.ndim)
    if not isinstance(index, Tensor) or not index.dtype.is_int:
      raise TypeError(f"scatter: index must be an integer Tensor, got {getattr(index, 'dtype', type(index).__name__)}")
    if index.ndim != self.ndim: raise ValueError(f"scatter: index {index.shape} must have as many dims as the input {self.shape}")
    if reduce not in (None, "add", "multiply"): raise ValueError(f"scatter: reduce must be None, 'add' or 'multiply', got {reduce!r}")
    n = self.shape[d]
    src = src if isinstance(src, Tensor) else Tensor.full(index.shape, src, dtype=self.dtype, device=self.device)
    src = src.shrink(tuple((0, i) for i in index.shape)).cast(self.dtype)
    idx = self._index_tensor(index, n, d)
    # mask[..., m at d, ..., k] = index[..., m, ...] == k; reduce over m, then move k into dim d
    mask = idx.unsqueeze(-1) == Tensor.arange(n, device=self.device)
    s = src.unsqueeze(-1)
    full = tuple((0, self.shape[j] - index.shape[j]) if j != d else (0, 0) for j in range(self.ndim))
    def place(t: Tensor) -> Tensor: return t.transpose(d, -1).squeeze(-1)._pad_zero(full)
    hit = place(mask.any(d, keepdim=True))
    if reduce is None:
      # where several index entries name one position, the last of them writes it (as torch's CPU loop does); the value
      # is taken with max against the lowest value, which keeps it exactly (-0.0 too). Gradients as torch's: to src
      # the output's gradient at each entry's position (duplicates included), to self where nothing was written
      m = Tensor.arange(index.shape[d], device=self.device).reshape(*[index.shape[d] if j == d else 1 for j in range(self.ndim)], 1)
      mask = mask & (m == mask.where(m, -1)._reduce(Ops.MAX, d, True, "scatter"))
      written = place(mask.where(s, self.dtype.min)._reduce(Ops.MAX, d, True, "scatter"))
      return hit.where(written.detach(), self.detach()).custom_gradient([self, src], lambda g: (hit.where(0.0, g), g.gather(d, idx)))
    if reduce == "multiply":
      prodv = place(mask.where(s, 1).prod(d, keepdim=True).cast(self.dtype))
      return hit.where(self * prodv, self)
    total = place(mask.where(s, 0).sum(d, keepdim=True, dtype=self.dtype if self.dtype.is_float else None).cast(self.dtype))
    return self + total   # (reduce == "add")
  def scatter_add(self, dim: int, index: Tensor, src: Tensor) -> Tensor: return self.scatter(dim, index, src, "add")

  def one_hot(self, num_classes: int = -1) -> Tensor:
    """int32 rows with a 1 at each value's class. num_classes=-1 takes the largest value + 1, which reads the values (one
    realize; a negative value raises then). With num_classes given nothing is read: a value outside [0, num_classes)
    gives a row of zeros (PyTorch raises)."""
    if self.dtype.is_float: raise TypeError(f"one_hot: input must be an integer tensor, got {self.dtype.name}")
    num_classes = _as_int("one_hot", "num_classes", num_classes)
    if num_classes == -1:
      if self.numel() == 0: raise ValueError(f"one_hot: cannot infer num_classes from an empty tensor (shape {self.shape}); pass it")
      lo, hi = self.min(), self.max()
      Tensor.realize_all(lo, hi)
      if lo.item() < 0: raise ValueError(f"one_hot: class values must be non-negative, got {lo.item()}")
      num_classes = int(hi.item()) + 1
    elif num_classes < 0: raise ValueError(f"one_hot: num_classes must be -1 (infer it) or >= 0, got {num_classes}")
    elif num_classes == 0 and self.numel(): raise ValueError(f"one_hot: num_classes=0 leaves no class for the {self.numel()} values")
    return (self.unsqueeze(-1) == Tensor.arange(num_classes, device=self.device)).cast(dtypes.int32)

  def _tri_mask(self, diagonal: int, upper: bool) -> Tensor:
    op = 'triu' if upper else 'tril'
    if self.ndim < 2: raise ValueError(f"{op}: input must have at least 2 dimensions, got {self.shape}")
    if not hasattr(diagonal, "__index__"): raise TypeError(f"{op}: diagonal must be an int, got {diagonal!r} ({type(diagonal).__name__})")
    diagonal = diagonal.__index__()
    r, c = self.shape[-2:]
    rows = Tensor.arange(r, device=self.device).reshape(r, 1)
    cols = Tensor.arange(c, device=self.device).reshape(1, c)
    return (cols - rows >= diagonal) if upper else (cols - rows <= diagonal)
  def triu(self, diagonal: int = 0) -> Tensor: return self._tri_mask(diagonal, True).where(self, 0).cast(self.dtype)
  def tril(self, diagonal: int = 0) -> Tensor: return self._tri_mask(diagonal, False).where(self, 0).cast(self.dtype)

  # ---------------------------------------------------------------------------------------------------------------
  # matrix multiplication

  def dot(self, w: Tensor, dtype=None) -> Tensor:
    x = self
    if not isinstance(w, Tensor): w = Tensor(w, device=self.device)
    xs, ws = x.shape, w.shape
    if not xs or not ws: raise ValueError(f"matmul: both arguments need at least 1 dimension, got shapes {xs} and {ws}")
    k_w = ws[-2] if len(ws) > 1 else ws[0]
    if xs[-1] != k_w: raise ValueError(f"matmul: shapes {xs} and {ws} cannot be multiplied ({xs[-1]} != {k_w})")
    if x.device != w.device: raise RuntimeError(f"matmul: expected all tensors on the same device, got {x.device} and {w.device}")
    if len(xs) > 2 or len(ws) > 2:
      try: _broadcast_shape("matmul", xs[:-2], ws[:-2])
      except ValueError: raise ValueError(f"matmul: batch dimensions of {xs} and {ws} cannot be broadcast together") from None
    # out[..., n, m] = sum_k x[..., n, 1, k] * w[..., 1, m, k]: one fused multiply-reduce kernel
    if len(ws) > 1:
      wv = w.transpose(-1, -2)
      if len(xs) > 1: xv, wv = x.reshape(xs[:-1] + (1, xs[-1])), wv.reshape(ws[:-2] + (1, ws[-1], ws[-2]))
      else: xv = x.reshape((1, xs[-1]))   # (k,) @ (..., k, m): x as one row
    else: xv, wv = x, w
    out = (xv * wv).sum(-1, dtype=dtype)
    return out.cast(dtype) if dtype is not None else out
  def matmul(self, x: Tensor, reverse=False, dtype=None) -> Tensor: return x.dot(self, dtype=dtype) if reverse else self.dot(x, dtype=dtype)
