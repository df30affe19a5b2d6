"""Tensor creation: constants (full, zeros, ones, empty, the *_like), ranges (arange, linspace, eye) and random numbers
(a counter-based hash whose seed and counter live in a device buffer). A mixin of Tensor (tensor.py)."""
from __future__ import annotations
import math, zlib
from typing import Any, Optional, Self, Sequence, Union
from tinyweb.dtype import DType, dtypes, to_dtype, scalar_dtype, scalar_fits, scalar_range_error
from tinyweb.helpers import prod, fork_safe_lock, fetch
from tinyweb.uop import UOp, Ops, unique_id
from tinyweb.device import Device, Buffer
from tinyweb.schedule import buffer_uop
from tinyweb.tensor_helpers import _py_scalar, _int_dtype, _pack, _shape_args, _as_int, _sizes

_rng_lock = fork_safe_lock()   # Tensor._random_bits's
ShapeArg = Union[int, Sequence[int]]

class CreationMixin:
  __slots__ = ()
  # (Tensor, in tensor.py, is built from this mixin and must not be imported here: the constructors are classmethods
  # that make tensors with cls, methods use type(self); annotations say Self)
  _seed: int = 0
  _rng_state: dict = {}   # device -> realized uint32 tensor [seed low, seed high, counter], advanced by kernels

  @classmethod
  def full(cls, shape: ShapeArg, fill_value: Any, dtype=None, device=None, buffer: bool = True, requires_grad=None) -> Self:
    """A tensor of shape filled with fill_value. (buffer is tinygrad's: tinyweb's constants are lazy either way, given a
    buffer where they are realized.)"""
    shape = _sizes("full", shape if isinstance(shape, (tuple, list)) else (shape,))
    fill_value = _py_scalar("full", fill_value)
    dt = to_dtype(dtype) if dtype is not None else scalar_dtype(fill_value)
    return cls(cls._const_uop(fill_value, dt, Device.canonicalize(device), shape, "full"), requires_grad=requires_grad)
  @classmethod
  def const(cls, b, dtype=None) -> Self:
    """A 0-d tensor holding the number b, on the default device (dtype: given, or the one PyTorch infers from b)."""
    b = _py_scalar("const", b)
    return cls(cls._const_uop(b, to_dtype(dtype) if dtype is not None else scalar_dtype(b), Device.canonicalize(None), (), "const"))
  @classmethod
  def zeros(cls, *shape, dtype=None, **kwargs) -> Self:
    return cls.full(_sizes("zeros", _shape_args(shape)), 0.0, dtype=dtype or dtypes.default_float, **kwargs)
  @classmethod
  def ones(cls, *shape, dtype=None, **kwargs) -> Self:
    return cls.full(_sizes("ones", _shape_args(shape)), 1.0, dtype=dtype or dtypes.default_float, **kwargs)
  @classmethod
  def empty(cls, *shape, dtype=None, device=None) -> Self:
    shape = _sizes("empty", _shape_args(shape))
    buf = Buffer(Device.canonicalize(device), prod(shape), to_dtype(dtype or dtypes.default_float))
    return cls(buffer_uop(buf, shape))
  def full_like(self, fill_value, dtype=None, device=None, buffer: bool = True, requires_grad=None) -> Self:
    return type(self).full(self.shape, fill_value, dtype=dtype or self.dtype, device=device or self.device, requires_grad=requires_grad, buffer=buffer)
  def zeros_like(self, **kw) -> Self: return self.full_like(0, **kw)
  def ones_like(self, **kw) -> Self: return self.full_like(1, **kw)
  def rand_like(self, **kw) -> Self: return type(self).rand(*self.shape, device=kw.pop("device", self.device), dtype=kw.pop("dtype", self.dtype if self.dtype.is_float else None), **kw)
  def randn_like(self, dtype=None, **kw) -> Self:
    return type(self).randn(*self.shape, device=kw.pop("device", self.device), dtype=dtype or (self.dtype if self.dtype.is_float else None), **kw)
  def empty_like(self, dtype=None, device=None) -> Self:
    """An uninitialized tensor of self's shape, dtype and device (unless given)."""
    return type(self).empty(*self.shape, dtype=dtype or self.dtype, device=device or self.device)

  @classmethod
  def from_blob(cls, ptr: int, shape: tuple[int, ...], **kwargs) -> Self:
    """A tensor over the memory at host address ptr (keywords dtype and device), not copied on the CPU: the memory must
    outlive the tensor, and writes to either show in the other. Other devices copy it."""
    import ctypes   # (here: importing tinyweb does not need it)
    ptr, shape = _as_int("from_blob", "ptr", ptr), _sizes("from_blob", _shape_args((shape,)))
    if (extra := set(kwargs) - {"dtype", "device"}): raise TypeError(f"from_blob: unexpected keyword arguments {sorted(extra)} (valid: dtype, device)")
    dt = to_dtype(kwargs.get("dtype") or dtypes.default_float)
    if ptr <= 0 and (nbytes := prod(shape) * dt.itemsize): raise ValueError(f"from_blob: {ptr:#x} is not an address of {nbytes} bytes")
    return cls.frombuffer((ctypes.c_uint8 * (prod(shape) * dt.itemsize)).from_address(ptr), dt, shape, kwargs.get("device"))
  @classmethod
  def from_url(cls, url: str, gunzip: bool = False, **kwargs) -> Self:
    """A uint8 tensor of the bytes at url (http://, https://, file://, a local path), fetched once into the download cache
    (helpers.fetch) and gzip-decompressed with gunzip=True; the keywords go to Tensor() (a dtype reinterprets the bytes,
    as tinygrad's disk tensors do). The bytes are read into memory: tinyweb has no disk tensors."""
    try: data = fetch(url, gunzip=gunzip).read_bytes()
    except ValueError as e: raise ValueError(f"from_url: cannot open {url!r}: {e}") from None
    except (OSError, EOFError, zlib.error) as e: raise OSError(f"from_url: cannot read {url!r}{' as gzip data' if gunzip else ''}: {e}") from e
    return cls(data, **kwargs)

  @classmethod
  def arange(cls, start, stop=None, step=1, dtype=None, device=None, requires_grad=None) -> Self:
    """Ints give int32 (int64 where a value is past int32's range: PyTorch's default int), any float the default float."""
    if stop is None: start, stop = 0, start
    start, stop, step = _py_scalar("arange", start), _py_scalar("arange", stop), _py_scalar("arange", step)
    if any(isinstance(v, float) and not math.isfinite(v) for v in (start, stop, step)):
      raise ValueError(f"arange: unsupported range {start} -> {stop} with step {step}: all must be finite")
    if step == 0: raise ValueError("arange: step must be non-zero")
    if (stop - start) * step < 0: raise ValueError(f"arange: the range {start} -> {stop} and the step {step} go in opposite directions")
    is_int = all(isinstance(v, int) for v in (start, stop, step))
    n = -((start - stop) // step) if is_int else math.ceil((stop - start) / step)
    if n > 0x7fffffff: raise OverflowError(f"arange: {n} elements; its positions are int32 values (at most 2**31-1 elements)")
    dt, dev = to_dtype(dtype) if dtype is not None else None, Device.canonicalize(device)
    idx = cls(UOp(Ops.ARANGE, dtypes.int32, (UOp(Ops.DEVICE, None, (), dev),), n))
    if is_int and (dt is None or not dt.is_float):   # computed exactly, in int32 or int64 (or dt, where the values fit it)
      last, step = (start + (n - 1) * step, step) if n > 1 else (start, 1)   # (a single value needs no step)
      if dt is not None and (bad := next((v for v in (start, last) if not scalar_fits(v, dt)), None)) is not None:
        raise scalar_range_error("arange", bad, dt)
      lo, hi = min(start, last, step), max(start, last, step)
      ct = dt if dt is not None and dt.is_int and dt.itemsize >= 4 and dt.min <= lo and hi <= dt.max else _int_dtype("arange", lo, hi, dev)
      dt = dt or ct
      out = idx if ct == dtypes.int32 else idx.cast(ct)
      if (start, step) != (0, 1): out = out * step + start   # (0, 1, ..., n-1 is the positions themselves)
      out = out.cast(dt)
    else:
      dt = dt or dtypes.default_float
      out = (idx.cast(dt) * step + start) if dt.is_float else (idx * step + start).cast(dt)
    if requires_grad: out.requires_grad_()
    return out
  @classmethod
  def linspace(cls, start, stop, steps: int, dtype=None, device=None) -> Self:
    steps = _as_int("linspace", "steps", steps)
    if steps < 0: raise ValueError(f"linspace: steps must be >= 0, got {steps}")
    start, stop = _py_scalar("linspace", start), _py_scalar("linspace", stop)
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if steps == 1: return cls.full((1,), start, dtype=dt, device=device)
    idx = cls.arange(steps, device=device).cast(dtypes.float32)
    return (idx * ((stop - start) / (steps - 1)) + start).cast(dt)
  @classmethod
  def eye(cls, n: int, m: Optional[int] = None, dtype=None, device=None, requires_grad=None) -> Self:
    n, m = _sizes("eye", (n, n if m is None else m))
    out = (cls.arange(n, device=device).reshape(n, 1) == cls.arange(m, device=device).reshape(1, m)).cast(dtype or dtypes.default_float)
    if requires_grad: out.requires_grad_()
    return out

  # random numbers: a counter-based hash (stateless per element, so it runs on every device and in one kernel)
  @classmethod
  def manual_seed(cls, seed: int = 0):
    cls._seed = int(seed)
    for st in cls._rng_state.values():   # rewrite in place: jitted functions keep using the same buffers
      st.uop.base.arg[0].copyin(memoryview(_pack(cls._seed_words(), dtypes.uint32)))

  @classmethod
  def _seed_words(cls) -> list[int]: return [cls._seed & 0xffffffff, (cls._seed >> 32) & 0xffffffff, 0]

  @classmethod
  def _random_bits(cls, n: int, device) -> Self:
    """n uint32 values from the global stream. The seed and counter live in a device buffer that a kernel advances,
    so random numbers keep changing when a TinyJit replays the kernels."""
    with _rng_lock, cls.no_grad():   # (snapshot and advance as one step: two threads must not draw the same numbers)
      if device not in cls._rng_state:
        cls._rng_state[device] = cls(cls._seed_words(), dtype=dtypes.uint32, device=device)
      state = cls._rng_state[device]
      # (realize_all, not realize: random numbers are allowed inside an @function body, where realize is refused)
      cls.realize_all(key := cls(UOp(Ops.CONTIGUOUS, dtypes.uint32, (state.uop,), unique_id())))   # this call's snapshot
      cls.realize_all(state.assign(state + cls([0, 0, n & 0xffffffff], dtype=dtypes.uint32, device=device)))
    def mix(x: Self) -> Self:   # a 32-bit integer hash with good avalanche (xor-shift-multiply rounds)
      x = x ^ (x >> 16); x = x * 0x7feb352d; x = x ^ (x >> 15); x = x * 0x846ca68b
      return x ^ (x >> 16)
    ctr = cls.arange(n, device=device).cast(dtypes.uint32) + key[2]
    return mix(mix(ctr ^ mix(key[0] + 0x9e3779b9)) + mix(key[1] ^ 0x85ebca6b))

  @staticmethod
  def _random_float_dtype(op: str, dtype) -> DType:
    dt = to_dtype(dtype) if dtype is not None else dtypes.default_float
    if not dt.is_float: raise TypeError(f"{op}: random values need a float dtype, got {dt.name} (randint makes random integers)")
    return dt
  @classmethod
  def rand(cls, *shape, dtype=None, device=None, requires_grad=None, contiguous: bool = True) -> Self:
    """Uniform in [0, 1). contiguous (tinygrad's default): the values get a buffer of their own, computed once;
    contiguous=False computes them inside the kernels that use them, which saves the buffer for one elementwise use but
    repeats the hashing wherever a use broadcasts them (into a matmul: once per output column)."""
    shape, dt = _sizes("rand", _shape_args(shape)), cls._random_float_dtype("rand", dtype)
    bits = cls._random_bits(prod(shape), Device.canonicalize(device))
    out = ((bits >> 8).cast(dtypes.float32) * (1.0 / (1 << 24))).cast(dt).reshape(shape)
    if contiguous: out = out.contiguous()
    if requires_grad: out.requires_grad_()
    return out
  @classmethod
  def randn(cls, *shape, dtype=None, device=None, requires_grad=None) -> Self:
    shape, dt = _sizes("randn", _shape_args(shape)), cls._random_float_dtype("randn", dtype)
    u = cls.rand(2, *shape, device=device, contiguous=False)   # (hashed in the kernel that makes the result)
    r = (1 - u[0]).log().mul(-2).sqrt() * (u[1] * (2 * math.pi)).cos()   # Box-Muller
    out = r.cast(dt).contiguous()
    if requires_grad: out.requires_grad_()
    return out
  @classmethod
  def randint(cls, *shape, low=0, high=10, dtype=None, device=None) -> Self:
    """Integers in [low, high), of int32 (int64 past its range) unless dtype says otherwise. Drawn from a float32 uniform:
    a range wider than 2**24 does not reach every integer."""
    low, high, dev = _as_int("randint", "low", low), _as_int("randint", "high", high), Device.canonicalize(device)
    if high <= low: raise ValueError(f"randint: high ({high}) must be greater than low ({low})")
    dt = to_dtype(dtype) if dtype is not None else _int_dtype("randint", low, high - 1, dev)
    ct = _int_dtype("randint", min(low, 0), max(high - 1, high - low - 1), dev)   # (holds the offsets from low too)
    if not dt.is_float and not dt.min <= low <= high - 1 <= dt.max:
      raise OverflowError(f"randint: the range [{low}, {high}) does not fit {dt.name} ({dt.min}..{dt.max})")
    r = (cls.rand(*shape, device=dev, contiguous=False) * (high - low)).floor().cast(ct)
    if high - low > 1 << 24: r = r.minimum(high - low - 1)   # (float32 rounding may reach the range's end there)
    return (r + low).cast(dt).contiguous()
  @classmethod
  def randperm(cls, n: int, device=None, dtype=dtypes.int32, **kwargs) -> Self:
    """A random permutation of 0..n-1: the ranks of n random numbers (rand's keywords), which takes n*n comparisons."""
    if (n := _as_int("randperm", "n", n)) < 0: raise ValueError(f"randperm: n must be >= 0, got {n}")
    return cls.rand(n, device=device, **kwargs)._ranks().cast(dtype)
  def _ranks(self) -> Self:
    """int32: the position of each value of the last dim in a descending order of it (ties: the earlier first)."""
    n, i = self.shape[-1], type(self).arange(self.shape[-1], device=self.device)
    a, b = self.unsqueeze(-1), self.unsqueeze(-2)
    return ((b > a) | ((b == a) & (i.reshape(1, n) < i.reshape(n, 1)))).sum(-1).cast(dtypes.int32)
  def multinomial(self, num_samples: int = 1, replacement: bool = False) -> Self:
    """int32 indices of categories drawn with probabilities proportional to the weights in self's last dim (1-D: one
    distribution, 2-D: one per row). The weights are not read (the draw stays lazy): where torch raises (negative, inf or
    NaN weights, all zero, fewer non-zero than num_samples without replacement) the indices are meaningless."""
    Tensor, num_samples = type(self), _as_int("multinomial", "num_samples", num_samples)
    if self.ndim not in (1, 2) or self.shape[-1] == 0:
      raise ValueError(f"multinomial: expected 1-D or 2-D weights with at least one category, got shape {self.shape}")
    if num_samples <= 0 or (not replacement and num_samples > self.shape[-1]):
      raise ValueError(f"multinomial: cannot draw {num_samples} samples from {self.shape[-1]} categories "
                       f"{'with' if replacement else 'without'} replacement (need 1..{'any' if replacement else self.shape[-1]})")
    w = (self if self.ndim == 2 else self.unsqueeze(0)).cast(dtypes.float32)
    rows, n = w.shape
    if replacement or num_samples == 1:   # inverse CDF: the number of categories whose cumulative probability is <= u
      cdf = (c := w.cumsum(1)) / c[:, -1:]   # (its last value exactly 1, above every u)
      out = (cdf.unsqueeze(1) <= Tensor.rand(rows, num_samples, 1, device=self.device)).sum(2)
    else:   # Efraimidis-Spirakis: the categories of the num_samples largest log(u) / w, in descending order
      keys = (w > 0).where((1 - Tensor.rand(rows, n, device=self.device)).log() / w, -math.inf)
      hit = keys._ranks().unsqueeze(1) == Tensor.arange(num_samples, device=self.device).reshape(num_samples, 1)
      out = hit.where(Tensor.arange(n, device=self.device), 0).sum(2)
    return (out if self.ndim == 2 else out.squeeze(0)).cast(dtypes.int32)
  @classmethod
  def uniform(cls, *shape, low=0.0, high=1.0, dtype=None, device=None, requires_grad=None) -> Self:
    low, high, dt = _py_scalar("uniform", low), _py_scalar("uniform", high), cls._random_float_dtype("uniform", dtype)
    if not low <= high: raise ValueError(f"uniform: low ({low}) must not be greater than high ({high})")
    out = (cls.rand(*shape, device=device, contiguous=False) * (high - low) + low).cast(dt).contiguous()
    if requires_grad: out.requires_grad_()
    return out
  @classmethod
  def normal(cls, *shape, mean=0.0, std=1.0, dtype=None, device=None, requires_grad=None) -> Self:
    mean, std, dt = _py_scalar("normal", mean), _py_scalar("normal", std), cls._random_float_dtype("normal", dtype)
    if not std >= 0: raise ValueError(f"normal: std must be >= 0, got {std}")
    out = (cls.randn(*shape, device=device) * std + mean).cast(dt)
    if requires_grad: out.requires_grad_()
    return out
  @classmethod
  def scaled_uniform(cls, *shape, **kw) -> Self:
    return cls.uniform(*shape, low=-1.0, high=1.0, **kw).mul(prod(_shape_args(shape)) ** -0.5)
  @classmethod
  def kaiming_uniform(cls, *shape, a: float = 0.01, **kw) -> Self:
    shape = _shape_args(shape)
    bound = math.sqrt(3.0) * math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
    return cls.uniform(*shape, low=-bound, high=bound, **kw)
  @classmethod
  def kaiming_normal(cls, *shape, a: float = 0.01, **kw) -> Self:
    shape = _shape_args(shape)
    std = math.sqrt(2.0 / (1 + a ** 2)) / math.sqrt(prod(shape[1:]))
    return cls.normal(*shape, mean=0.0, std=std, **kw)
  @classmethod
  def glorot_uniform(cls, *shape, **kw) -> Self:
    shape = _shape_args(shape)
    bound = math.sqrt(6 / (shape[0] + prod(shape[1:])))
    return cls.uniform(*shape, low=-bound, high=bound, **kw)
