"""Tensor: the user-facing API. Every op builds UOps lazily; `realize()` (or reading values) runs the scheduler.

Everything here is written in terms of a few primitives (`_unary`, `_binary`, `_reduce`, movement ops, cast), so the
IR stays small: the gradient rules in gradient.py only need to know those primitives.

This module holds the class's core (construction, properties, realization, autograd, the primitives); the rest of the
API is in mixins by topic, one module each: tensor_creation, tensor_movement, tensor_reduce, tensor_math, tensor_index
and tensor_nn (their shared helpers in tensor_helpers). None of them imports this module."""
from __future__ import annotations
import contextlib, struct, time
from typing import Any, Optional, Sequence
from tinyweb.dtype import DType, dtypes, to_dtype, promote, promote_with_scalar, cast_scalar, bf16_bits_to_float, scalar_dtype, \
  scalar_fits, check_scalar, scalar_range_error, fmt_scalar
from tinyweb.helpers import prod, TRAINING, NO_GRAD, Context, GlobalCounters, RUNNING_FUNCTIONS
from tinyweb.uop import UOp, Ops, unique_id, const_key
from tinyweb.device import Device, Buffer, IdWeakSet
from tinyweb.schedule import create_schedule, realized_cache, buffer_uop, apply_realized, is_contiguous_buffer
from tinyweb.engine import run_schedule
import tinyweb.events as events
from tinyweb.gradient import compute_gradient
from tinyweb.tensor_helpers import _broadcast_shape, _flatten_list, _py_scalar, _int_dtype, _pack, \
  _normalize_axis
from tinyweb.tensor_creation import CreationMixin
from tinyweb.tensor_movement import MovementMixin
from tinyweb.tensor_reduce import ReduceMixin
from tinyweb.tensor_math import MathMixin
from tinyweb.tensor_index import IndexMixin
from tinyweb.tensor_nn import NNMixin
from tinyweb.tensor_hash import HashMixin

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

def _not_in_function(what: str) -> None:
  """tinygrad disables device use while an @function body runs (tinyweb/function.py): refuse realizing and reading there.
  (tinyweb's own eager steps, random numbers and small gathers, realize through realize_all and are not refused.)"""
  if running := RUNNING_FUNCTIONS.get():
    raise RuntimeError(f"{what} inside @function {running[-1]}: a function body must not realize or read tensors (tinygrad "
                       "traces it into one graph node and forbids device use there); return the tensors and realize them after the call")

_grad_leaves = IdWeakSet()
CONST_CACHE_SIZE = 4096
_const_cache: dict[tuple, UOp] = {}   # Tensor._const_uop's

def _array_bytes(arr) -> bytes | memoryview:
  """A C-contiguous numpy array's bytes: a writable array's own memory (copied into the buffer directly: tobytes would
  copy it once more first), else (read-only, or Pyodide's numpy, whose arrays have no buffer interface) a copy."""
  if arr.flags.writeable:
    try: return memoryview(arr.reshape(-1)).cast("B")
    except (TypeError, ValueError): pass   # (ValueError: a dtype the buffer protocol lacks, ml_dtypes' bfloat16)
  return arr.tobytes()

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

def _no_multi_device(op: str, devices):
  raise NotImplementedError(f"{op}: {tuple(devices)} is several devices; tinyweb tensors live on one device (tinygrad's multi-device "
                            "tensors are tinyweb issue 18): pass one device, or move the parts yourself with .to()")

_NP_NAMES = {"bool": dtypes.bool, "int8": dtypes.int8, "uint8": dtypes.uint8, "int16": dtypes.int16, "uint16": dtypes.uint16,
             "int32": dtypes.int32, "uint32": dtypes.uint32, "int64": dtypes.int64, "uint64": dtypes.uint64,
             "float16": dtypes.float16, "float32": dtypes.float32, "float64": dtypes.float64,
             "bfloat16": dtypes.bfloat16}   # (ml_dtypes' bfloat16, which jax and onnx use: the same 16-bit patterns)

# The API by topic, in mixins (one module each, none of which imports this one); the core is here: construction,
# properties, realization, autograd and the primitives everything else is built from.
class Tensor(CreationMixin, MovementMixin, ReduceMixin, MathMixin, IndexMixin, NNMixin, HashMixin, metaclass=_TensorMeta):
  __slots__ = ("uop", "requires_grad", "grad", "__weakref__")
  __array_priority__ = 1000   # numpy defers to our reflected operators

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
    Device[device].check_dtype(dt, f"{op}: the constant {fmt_scalar(value)}")
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
    st = time.perf_counter()
    items, results, assigned = create_schedule(targets)
    if events.watchers: events.emit("schedule", targets=targets, items=items, start=st, end=time.perf_counter())
    run_schedule(items)
    for a, r in assigned.items(): realized_cache.put(a, r)   # an assign inside the graph ran: it must not run again
    for t, u in zip(ts, targets):
      realized_cache.put(t.uop, results[u])
      # a tensor that gradients may flow through keeps its graph (the value is found through realized_cache)
      if not t.requires_grad or t in _grad_leaves:
        t.uop = results[u]
        if is_contiguous_buffer(t.uop): t.uop.base.arg[0].holders.add(t)
    # a tensor whose assign ran inside the graph (not a target) now is its buffer's new version too: its next assign is
    # in place again, and a TinyJit's capture (which does not see realized_cache) does not run this one a second time
    for a, r in assigned.items():
      for t in list(a.src[0].base.arg[0].holders) if is_contiguous_buffer(a.src[0]) else ():
        if t.uop is a and (not t.requires_grad or t in _grad_leaves): t.uop = r

  def realize(self, *others: Tensor, do_update_stats: bool = True) -> Tensor:
    """Compute self and others now. do_update_stats=False: the work is not counted in GlobalCounters."""
    _not_in_function("realize")
    with contextlib.nullcontext() if do_update_stats else GlobalCounters.not_counting(): Tensor.realize_all(self, *others)
    return self

  def _host_buffer(self) -> tuple[Buffer, tuple[int, ...]]:
    _not_in_function("reading values (numpy, item, tolist, data)")
    Tensor.realize_all(self)
    u = apply_realized(self.uop)
    if not is_contiguous_buffer(u):
      Tensor.realize_all(c := Tensor(UOp(Ops.CONTIGUOUS, self.dtype, (u,))))
      u = apply_realized(c.uop)
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
    raw = buf.as_memoryview()   # (the device's memory where it is host-visible: copied once, below, into the array)
    if self.dtype == dtypes.bfloat16:
      return (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
    return np.frombuffer(raw, dtype=self.dtype.name).reshape(shape).copy()

  def to(self, device: Optional[str]) -> Tensor:
    dev = Device.canonicalize(device)
    if dev == self.device: return self
    return self._wrap(UOp(Ops.COPY, self.dtype, (self.uop,), dev))
  def cpu(self) -> Tensor: return self.to("CPU")
  def to_(self, device: Optional[str]) -> Tensor:
    """Move this tensor (and its gradient) to `device` in place. (A tuple of devices, tinygrad's multi-device tensors: not yet.)"""
    if isinstance(device, (tuple, list)): _no_multi_device("to_", device)
    self.uop, self.grad = self.to(device).uop, None if self.grad is None else self.grad.to(device)
    if self.requires_grad: self._make_grad_leaf()
    return self

  # tinygrad's multi-device API (one device works; several: tinyweb issue 18) and its hardware-specific ops
  def shard(self, devices: tuple[str, ...], axis: Optional[int] = None) -> Tensor:
    """This tensor on `devices`: one device is `to(device)`; split over several (tinygrad's multi-device tensors): not yet."""
    if len(devices) != 1: _no_multi_device("shard", devices)
    return self.to(devices[0])
  def shard_(self, devices: tuple[str, ...], axis: Optional[int] = None) -> Tensor:
    """shard in place."""
    if len(devices) != 1: _no_multi_device("shard_", devices)
    return self.to_(devices[0])
  def shard_like(self, y: Tensor) -> Tensor:
    """This tensor on y's device (tinygrad: sharded like y; tinyweb tensors are on one device)."""
    return self.to(y.device)
  def image_dot(self, w: Tensor, dtype=None) -> Tensor:
    """tinygrad's matmul through Qualcomm GPU image textures: not in tinyweb (use dot or matmul)."""
    raise NotImplementedError("image_dot: tinygrad's image-texture path for Qualcomm GPUs (IMAGE=1) does not exist in tinyweb; use dot")
  def image_conv2d(self, weight: Tensor, bias: Optional[Tensor] = None, groups=1, stride=1, dilation=1, padding=0, dtype=None) -> Tensor:
    """tinygrad's conv2d through Qualcomm GPU image textures: not in tinyweb (use conv2d)."""
    raise NotImplementedError("image_conv2d: tinygrad's image-texture path for Qualcomm GPUs (IMAGE=1) does not exist in tinyweb; use conv2d")
  def decode_hevc_frame(self, frame_pos, shape: tuple[int, ...], state: Tensor, ref_frames: Optional[list[Tensor]] = None) -> Tensor:
    """tinygrad's HEVC decode on NVIDIA's video decoder (NVDEC): not in tinyweb."""
    raise NotImplementedError("decode_hevc_frame: tinygrad decodes HEVC on NVIDIA's hardware video decoder (NVDEC); tinyweb has no video decoding")
  def clone(self, device: Optional[str] = None) -> Tensor:
    """A copy in a buffer of its own (on `device` where given)."""
    src = self if device is None else self.to(device)
    return src._wrap(UOp(Ops.CONTIGUOUS, src.dtype, (src.uop,), unique_id()))
  def contiguous(self) -> Tensor:
    return self if is_contiguous_buffer(self.uop) else self._wrap(UOp(Ops.CONTIGUOUS, self.dtype, (self.uop,)))
  def contiguous_backward(self) -> Tensor:
    """self, unchanged; in the backward pass its gradient is made contiguous (computed into a buffer of its own)."""
    return self.custom_gradient([self], lambda g: (g.contiguous(),))
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

  def replace(self, x: Tensor) -> Tensor:
    """Make this tensor x's value (its data, dtype and device) instead of its own: the shapes must match (no copy, no cast)."""
    if not isinstance(x, Tensor): raise TypeError(f"replace: expected a Tensor, got {type(x).__name__}")
    if x.shape != self.shape: raise ValueError(f"replace: the new value's shape {x.shape} does not match the tensor's {self.shape}")
    self.uop = x.uop
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
