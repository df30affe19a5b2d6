"""ONNX models: `load(path_or_bytes)` reads a .onnx file (the protobuf wire format, decoded here in pure Python so it runs
in Pyodide, where the `onnx` package does not exist) and returns a runner that builds the graph from tinyweb Tensors:
lazy like every tensor expression, so it fuses, jits and exports.

    runner = tinyweb.onnx.load("model.onnx", device="CPU")
    outputs = runner({"input": image})        # {output name: Tensor}

Values that shapes depend on (a Shape node's output and what is computed from it, the shape input of Reshape, Slice's
starts, ...) are read as Python ints when an op needs them: such subgraphs are small and constant for a given input
shape. An operator without an implementation raises OnnxError naming it and its node."""
from __future__ import annotations
import itertools, math, os, struct
from typing import Any, Callable, Optional
from tinyweb.dtype import DType, dtypes
from tinyweb.device import Device
from tinyweb.tensor import Tensor

class OnnxError(ValueError):
  """A malformed or unsupported ONNX file, or an operator this runner lacks (the message names the node)."""

# ---------------------------------------------------------------------------------------------------------------------
# the protobuf wire format

def _varint(buf: memoryview, pos: int) -> tuple[int, int]:
  result = shift = 0
  while True:
    if pos >= len(buf): raise OnnxError("truncated protobuf: a varint runs past the end of its message")
    b = buf[pos]
    pos += 1
    result |= (b & 0x7F) << shift
    if b < 0x80: return result, pos
    shift += 7
    if shift > 63: raise OnnxError("malformed protobuf: a varint longer than 10 bytes")

def _signed(v: int) -> int: return v - (1 << 64) if v >= 1 << 63 else v   # int64/int32 fields: two's complement in 64 bits

def _packed_varints(buf: memoryview) -> list[int]:
  out, pos = [], 0
  while pos < len(buf):
    v, pos = _varint(buf, pos)
    out.append(_signed(v))
  return out

class Message:
  """A protobuf message decoded by its schema: FIELDS maps a field number to (attribute, kind, repeated), kind one of
  "int" (int32/int64/enum varints), "float", "double", "str", "bytes", or a Message subclass. Unknown fields are skipped,
  as protobuf requires."""
  FIELDS: dict[int, tuple[str, Any, bool]] = {}
  DEFAULTS = {"int": 0, "float": 0.0, "double": 0.0, "str": "", "bytes": b""}

  def __init__(self):
    for name, kind, repeated in self.FIELDS.values(): setattr(self, name, [] if repeated else self.DEFAULTS.get(kind) if isinstance(kind, str) else None)

  @classmethod
  def parse(cls, data) -> "Message":
    buf, msg, pos = memoryview(data).cast("B"), cls(), 0
    while pos < len(buf):
      key, pos = _varint(buf, pos)
      num, wire = key >> 3, key & 7
      if wire == 0: val, pos = _varint(buf, pos)
      elif wire == 1: val, pos = buf[pos:pos + 8], pos + 8
      elif wire == 2:
        n, pos = _varint(buf, pos)
        val, pos = buf[pos:pos + n], pos + n
      elif wire == 5: val, pos = buf[pos:pos + 4], pos + 4
      else: raise OnnxError(f"malformed protobuf in {cls.__name__}: wire type {wire} (field {num})")
      if pos > len(buf): raise OnnxError(f"truncated protobuf in {cls.__name__}: field {num} runs past the end")
      if (spec := cls.FIELDS.get(num)) is None: continue
      name, kind, repeated = spec
      if wire == 2 and repeated and kind in ("int", "float", "double"):   # a packed repeated scalar field
        vals = _packed_varints(val) if kind == "int" else list(struct.unpack(f"<{len(val) // (4 if kind == 'float' else 8)}{'f' if kind == 'float' else 'd'}", val))
        getattr(msg, name).extend(vals)
        continue
      v = cls._value(kind, wire, val, num)
      if repeated: getattr(msg, name).append(v)
      else: setattr(msg, name, v)
    return msg

  @classmethod
  def _value(cls, kind, wire: int, val, num: int):
    expected = {"int": 0, "float": 5, "double": 1}.get(kind, 2) if isinstance(kind, str) else 2
    if wire != expected: raise OnnxError(f"malformed protobuf in {cls.__name__}: field {num} has wire type {wire}, expected {expected}")
    if kind == "int": return _signed(val)
    if kind == "float": return struct.unpack("<f", val)[0]
    if kind == "double": return struct.unpack("<d", val)[0]
    if kind == "str":
      try: return bytes(val).decode()
      except UnicodeDecodeError: raise OnnxError(f"malformed protobuf in {cls.__name__}: field {num} is not UTF-8") from None
    if kind == "bytes": return bytes(val)
    return kind.parse(val)

# the messages of onnx.proto (field numbers as there; tests/test_onnx.py checks them against the onnx package)
class StringStringEntry(Message): FIELDS = {1: ("key", "str", False), 2: ("value", "str", False)}
class OperatorSetId(Message): FIELDS = {1: ("domain", "str", False), 2: ("version", "int", False)}
class Dimension(Message): FIELDS = {1: ("dim_value", "int", False), 2: ("dim_param", "str", False)}
class TensorShape(Message): FIELDS = {1: ("dim", Dimension, True)}
class TensorType(Message): FIELDS = {1: ("elem_type", "int", False), 2: ("shape", TensorShape, False)}
class TypeProto(Message): FIELDS = {1: ("tensor_type", TensorType, False)}
class ValueInfo(Message): FIELDS = {1: ("name", "str", False), 2: ("type", TypeProto, False)}
class TensorProto(Message):
  FIELDS = {1: ("dims", "int", True), 2: ("data_type", "int", False), 4: ("float_data", "float", True), 5: ("int32_data", "int", True),
            6: ("string_data", "bytes", True), 7: ("int64_data", "int", True), 8: ("name", "str", False), 9: ("raw_data", "bytes", False),
            10: ("double_data", "double", True), 11: ("uint64_data", "int", True), 13: ("external_data", StringStringEntry, True),
            14: ("data_location", "int", False)}
class Attribute(Message): pass   # (fields below: it refers to Graph, which refers to Node, which refers to it)
class Node(Message):
  FIELDS = {1: ("input", "str", True), 2: ("output", "str", True), 3: ("name", "str", False), 4: ("op_type", "str", False),
            5: ("attribute", Attribute, True), 7: ("domain", "str", False)}
class Graph(Message):
  FIELDS = {1: ("node", Node, True), 2: ("name", "str", False), 5: ("initializer", TensorProto, True), 11: ("input", ValueInfo, True),
            12: ("output", ValueInfo, True), 13: ("value_info", ValueInfo, True)}
Attribute.FIELDS = {1: ("name", "str", False), 20: ("type", "int", False), 2: ("f", "float", False), 3: ("i", "int", False),
                    4: ("s", "bytes", False), 5: ("t", TensorProto, False), 6: ("g", Graph, False), 7: ("floats", "float", True),
                    8: ("ints", "int", True), 9: ("strings", "bytes", True), 10: ("tensors", TensorProto, True), 11: ("graphs", Graph, True)}
class Model(Message):
  FIELDS = {1: ("ir_version", "int", False), 2: ("producer_name", "str", False), 7: ("graph", Graph, False),
            8: ("opset_import", OperatorSetId, True)}

# ---------------------------------------------------------------------------------------------------------------------
# tensors and attributes

# TensorProto.DataType -> dtype (STRING, complex and the 8/4/2-bit floats and ints have no tinyweb dtype)
ONNX_DTYPES: dict[int, DType] = {1: dtypes.float32, 2: dtypes.uint8, 3: dtypes.int8, 4: dtypes.uint16, 5: dtypes.int16, 6: dtypes.int32,
                                 7: dtypes.int64, 9: dtypes.bool, 10: dtypes.float16, 11: dtypes.float64, 12: dtypes.uint32,
                                 13: dtypes.uint64, 16: dtypes.bfloat16}
ONNX_DTYPE_NAMES = {0: "UNDEFINED", 8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ",
                    19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2"}

def onnx_dtype(code: int, what: str) -> DType:
  if (dt := ONNX_DTYPES.get(code)) is None:
    raise OnnxError(f"{what}: ONNX data type {ONNX_DTYPE_NAMES.get(code, code)} is not supported (supported: "
                    f"{', '.join(d.name for d in ONNX_DTYPES.values())})")
  return dt

def tensor_bytes(t: TensorProto, base_dir: Optional[str]) -> tuple[DType, tuple[int, ...], bytes]:
  """A TensorProto's dtype, shape and little-endian element bytes (raw_data, the typed fields, or an external file)."""
  what = f"tensor {t.name!r}" if t.name else "a tensor"
  dt, shape = onnx_dtype(t.data_type, what), tuple(t.dims)
  if any(d < 0 for d in shape): raise OnnxError(f"{what}: negative dimension in {shape}")
  n = math.prod(shape)
  if t.data_location == 1:   # EXTERNAL: location, offset, length in external_data
    info = {e.key: e.value for e in t.external_data}
    if base_dir is None: raise OnnxError(f"{what} is stored in an external file ({info.get('location')!r}): load the model from its path")
    loc = info.get("location", "")
    path = os.path.normpath(os.path.join(base_dir, loc))
    if os.path.isabs(loc) or not path.startswith(os.path.normpath(base_dir) + os.sep):
      raise OnnxError(f"{what}: external data location {loc!r} is outside the model's folder")
    offset, length = int(info.get("offset", 0)), int(info.get("length", n * dt.itemsize))
    with open(path, "rb") as f:
      f.seek(offset)
      raw = f.read(length)
  elif t.raw_data or n == 0: raw = t.raw_data
  elif dt == dtypes.float32: raw = struct.pack(f"<{len(t.float_data)}f", *t.float_data)
  elif dt == dtypes.float64: raw = struct.pack(f"<{len(t.double_data)}d", *t.double_data)
  elif dt == dtypes.int64: raw = struct.pack(f"<{len(t.int64_data)}q", *t.int64_data)
  elif dt in (dtypes.uint32, dtypes.uint64): raw = struct.pack(f"<{len(t.uint64_data)}{dt.fmt}", *t.uint64_data)
  else:   # int32 and narrower, bool, and float16/bfloat16 as their bit patterns: one int32_data entry per element
    fmt = "H" if dt in (dtypes.float16, dtypes.bfloat16) else dt.fmt
    raw = struct.pack(f"<{len(t.int32_data)}{fmt}", *[v & 0xFFFF for v in t.int32_data] if fmt == "H" else t.int32_data)
  if len(raw) != n * dt.itemsize: raise OnnxError(f"{what}: {len(raw)} bytes of data for shape {shape} of {dt.name} ({n * dt.itemsize} bytes)")
  return dt, shape, raw

def to_tensor(t: TensorProto, device: str, base_dir: Optional[str] = None) -> Tensor:
  dt, shape, raw = tensor_bytes(t, base_dir)
  if dt in (dtypes.int64, dtypes.uint64) and not Device[device].has_dtype(dt):
    return narrowed(list(struct.unpack(f"<{len(raw) // 8}{dt.fmt}", raw)), shape, dt, device, f"tensor {t.name!r}")
  return Tensor(raw, dtype=dt, device=device).reshape(shape)

def narrowed(vals: list, shape: tuple, dt: DType, device: str, what: str) -> Tensor:
  """64-bit integers on a device without them (WEBGPU), as int32/uint32 where every value fits, else OnnxError."""
  narrow = dtypes.int32 if dt == dtypes.int64 else dtypes.uint32
  if any(not narrow.min <= v <= narrow.max for v in vals):
    raise OnnxError(f"{what}: {dt.name} values past {narrow.name}'s range, and {device} has no {dt.name}")
  return Tensor(vals, dtype=narrow, device=device).reshape(shape)


def attribute_value(a: Attribute, device: str) -> Any:
  # AttributeProto.AttributeType: FLOAT 1, INT 2, STRING 3, TENSOR 4, GRAPH 5, FLOATS 6, INTS 7, STRINGS 8, TENSORS 9, GRAPHS 10
  kind = a.type
  if kind == 1: return a.f
  if kind == 2: return a.i
  if kind == 3: return a.s.decode()
  if kind == 4: return to_tensor(a.t, device)
  if kind == 5: return a.g
  if kind == 6: return list(a.floats)
  if kind == 7: return list(a.ints)
  if kind == 8: return [s.decode() for s in a.strings]
  if kind == 9: return [to_tensor(t, device) for t in a.tensors]
  if kind == 10: return list(a.graphs)
  raise OnnxError(f"attribute {a.name!r}: type {kind} is not supported")

# ---------------------------------------------------------------------------------------------------------------------
# the runner

class OnnxRunner:
  """A loaded model: call it with {input name: Tensor or array} to get {output name: Tensor}."""
  def __init__(self, model: Model, device: Optional[str] = None, base_dir: Optional[str] = None):
    if model.graph is None: raise OnnxError("the model has no graph")
    self.model, self.graph, self.device = model, model.graph, Device.canonicalize(device)
    self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    for o in model.opset_import:
      if o.domain not in ("", "ai.onnx"): raise OnnxError(f"operator set domain {o.domain!r} is not supported (only the default ONNX domain)")
    self.initializers = {t.name: to_tensor(t, self.device, base_dir) for t in self.graph.initializer}
    self.inputs = [v.name for v in self.graph.input if v.name not in self.initializers]
    self.outputs = [v.name for v in self.graph.output]

  def __call__(self, inputs: dict[str, Any]) -> dict[str, Tensor]:
    if missing := [n for n in self.inputs if n not in inputs]: raise OnnxError(f"missing model inputs {missing}; the model takes {self.inputs}")
    values: dict[str, Optional[Tensor]] = {"": None, **self.initializers}
    for name, v in inputs.items():
      if name not in self.inputs and name not in self.initializers: raise OnnxError(f"unknown input {name!r}; the model takes {self.inputs}")
      values[name] = self._value(v)
    self.run_graph(self.graph, values)
    return {n: values[n] for n in self.outputs}

  def _value(self, v: Any) -> Any:
    """An input as the runner holds it: a Tensor on its device, a sequence as a list of them, an empty optional as None."""
    if v is None: return None
    if isinstance(v, (list, tuple)): return [self._value(x) for x in v]
    if isinstance(v, Tensor): return v.to(self.device)
    # a numpy array of 64-bit integers (shapes, axes, indices) on a device without them: narrowed like initializers
    if (dt := {"int64": dtypes.int64, "uint64": dtypes.uint64}.get(str(getattr(v, "dtype", "")))) and not Device[self.device].has_dtype(dt):
      return narrowed(v.reshape(-1).tolist(), tuple(v.shape), dt, self.device, "an input")
    return Tensor(v, device=self.device)

  def run_graph(self, graph: Graph, values: dict, where: str = "") -> list:
    """Runs graph's nodes on values (name -> Tensor, updated in place: a subgraph sees its outer scope's names) and
    returns its outputs."""
    if graph is not self.graph:
      for t in graph.initializer: values[t.name] = to_tensor(t, self.device)
    for k, node in enumerate(graph.node):
      label = f"{where}node {k} ({node.op_type}{' ' + repr(node.name) if node.name else ''})"
      if node.domain not in ("", "ai.onnx"): raise OnnxError(f"{label}: domain {node.domain!r} is not supported")
      if (op := OPS.get(node.op_type)) is None: raise OnnxError(f"{label}: operator {node.op_type} is not supported")
      try: args = [values[n] for n in node.input]
      except KeyError as e: raise OnnxError(f"{label}: input {e.args[0]!r} is not computed before it") from None
      attrs = {a.name: attribute_value(a, self.device) for a in node.attribute}
      try: out = op(Ctx(self, node, attrs, label, values), *args)
      except OnnxError: raise
      except (ValueError, TypeError, RuntimeError, IndexError, NotImplementedError) as e:
        raise OnnxError(f"{label}: {type(e).__name__}: {e}") from e
      outs = out if isinstance(out, tuple) else (out,)   # (an op's several outputs come as a tuple; a list is one sequence)
      for name, v in zip(node.output, outs): values[name] = v
    return [values[o.name] for o in graph.output]

class Ctx:
  """What an operator sees besides its inputs: its attributes, the model's opset, the device."""
  def __init__(self, runner: OnnxRunner, node: Node, attrs: dict, label: str, values: dict):
    self.runner, self.node, self.attrs, self.label, self.values = runner, node, attrs, label, values
  @property
  def device(self) -> str: return self.runner.device
  @property
  def opset(self) -> int: return self.runner.opset
  def get(self, name: str, default=None): return self.attrs.get(name, default)
  def ints(self, t: Optional[Tensor]) -> Optional[list[int]]:
    """A tensor whose values a shape depends on, as Python ints (realized now)."""
    return None if t is None else [int(v) for v in (t.tolist() if t.ndim else [t.item()])]
  def unsupported(self, why: str) -> OnnxError: return OnnxError(f"{self.label}: {why}")

def load(model: str | bytes | os.PathLike, device: Optional[str] = None) -> OnnxRunner:
  """An ONNX model from a path or its bytes, as a runner (external data files are found beside a model loaded by path)."""
  if isinstance(model, (bytes, bytearray, memoryview)): return OnnxRunner(Model.parse(model), device)
  with open(model, "rb") as f: data = f.read()
  return OnnxRunner(Model.parse(data), device, os.path.dirname(os.path.abspath(model)))

# ---------------------------------------------------------------------------------------------------------------------
# operators: each takes (ctx, *inputs) with absent optional inputs as None

OPS: dict[str, Callable] = {}
def op(*names: str):
  def register(fn):
    for n in names: OPS[n] = fn
    return fn
  return register

def _axis(ctx: Ctx, x: Tensor, default=0) -> int:
  a = ctx.get("axis", default)
  return a + x.ndim if a < 0 else a

# elementwise
for _name, _fn in {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
                   "Pow": lambda a, b: (a.float() ** b).cast(a.dtype) if not a.dtype.is_float else a ** b.cast(a.dtype),
                   "Equal": lambda a, b: a == b, "Less": lambda a, b: a < b, "Greater": lambda a, b: a > b,
                   "LessOrEqual": lambda a, b: a <= b, "GreaterOrEqual": lambda a, b: a >= b, "And": lambda a, b: a & b,
                   "Or": lambda a, b: a | b, "Xor": lambda a, b: a ^ b, "BitwiseAnd": lambda a, b: a & b,
                   "BitwiseOr": lambda a, b: a | b, "BitwiseXor": lambda a, b: a ^ b}.items():
  OPS[_name] = (lambda f: lambda ctx, a, b: f(a, b))(_fn)
for _name, _fn in {"Neg": lambda x: -x, "Abs": lambda x: x.abs(), "Exp": lambda x: x.exp(), "Log": lambda x: x.log(),
                   "Sqrt": lambda x: x.sqrt(), "Reciprocal": lambda x: x.reciprocal(), "Relu": lambda x: x.relu(),
                   "Sigmoid": lambda x: x.sigmoid(), "Tanh": lambda x: x.tanh(), "Sin": lambda x: x.sin(), "Cos": lambda x: x.cos(),
                   "Tan": lambda x: x.tan(), "Asin": lambda x: x.asin(), "Acos": lambda x: x.acos(), "Atan": lambda x: x.atan(),
                   "Sinh": lambda x: x.sinh(), "Cosh": lambda x: x.cosh(), "Asinh": lambda x: x.asinh(), "Acosh": lambda x: x.acosh(),
                   "Atanh": lambda x: x.atanh(), "Erf": lambda x: x.erf(), "Floor": lambda x: x.floor(), "Ceil": lambda x: x.ceil(),
                   "Round": lambda x: x.round(), "Sign": lambda x: x.sign(), "Not": lambda x: x.logical_not(),
                   "BitwiseNot": lambda x: ~x, "IsNaN": lambda x: x.isnan(), "Softsign": lambda x: x.softsign(),
                   "Identity": lambda x: x, "Mish": lambda x: x.mish(), "Softplus": lambda x: x.softplus()}.items():
  OPS[_name] = (lambda f: lambda ctx, x: f(x))(_fn)

@op("Div")
def _div(ctx, a, b): return a.div(b, rounding_mode="trunc") if not a.dtype.is_float else a / b
@op("Mod")
def _mod(ctx, a, b): return a.fmod(b) if ctx.get("fmod", 0) else a.mod(b)
@op("Max", "Min", "Sum", "Mean")
def _variadic(ctx, *xs):
  name, out = ctx.node.op_type, xs[0]
  for x in xs[1:]: out = out.maximum(x) if name == "Max" else out.minimum(x) if name == "Min" else out + x
  return out / len(xs) if name == "Mean" else out
@op("IsInf")
def _isinf(ctx, x): return x.isinf(bool(ctx.get("detect_positive", 1)), bool(ctx.get("detect_negative", 1)))
@op("LeakyRelu")
def _leaky(ctx, x): return x.leaky_relu(ctx.get("alpha", 0.01))
@op("Elu")
def _elu(ctx, x): return x.elu(ctx.get("alpha", 1.0))
@op("Celu")
def _celu(ctx, x): return x.celu(ctx.get("alpha", 1.0))
@op("Selu")
def _selu(ctx, x): return x.selu(ctx.get("alpha", 1.67326319217681884765625), ctx.get("gamma", 1.05070102214813232421875))
@op("HardSigmoid")
def _hardsigmoid(ctx, x): return (x * ctx.get("alpha", 0.2) + ctx.get("beta", 0.5)).clip(0, 1)
@op("HardSwish")
def _hardswish(ctx, x): return x.hardswish()
@op("ThresholdedRelu")
def _thresholded(ctx, x): return (x > ctx.get("alpha", 1.0)).where(x, 0)
@op("PRelu")
def _prelu(ctx, x, slope): return (x < 0).where(x * slope, x)
@op("Gelu")
def _gelu(ctx, x): return x.gelu("tanh" if ctx.get("approximate", "none") == "tanh" else "none")
@op("Clip")
def _clip(ctx, x, lo=None, hi=None):
  if ctx.opset < 11: lo, hi = ctx.get("min"), ctx.get("max")
  return x if lo is None and hi is None else x.clip(lo, hi)
@op("Where")
def _where(ctx, c, a, b): return c.where(a, b)
@op("Cast")
def _cast(ctx, x): return x.cast(onnx_dtype(ctx.get("to"), ctx.label))
@op("CastLike")
def _castlike(ctx, x, like): return x.cast(like.dtype)
@op("Constant")
def _constant(ctx):
  for k in ("value", "value_float", "value_int", "value_floats", "value_ints"):
    if (v := ctx.get(k)) is not None:
      return v if isinstance(v, Tensor) else Tensor(v, dtype=dtypes.float32 if "float" in k else _index_dtype(ctx), device=ctx.device)
  raise ctx.unsupported(f"a Constant with attributes {list(ctx.attrs)}")

# matrix products, convolution, pooling
@op("MatMul")
def _matmul(ctx, a, b): return a @ b
@op("Gemm")
def _gemm(ctx, a, b, c=None):
  a, b = a.transpose() if ctx.get("transA", 0) else a, b.transpose() if ctx.get("transB", 0) else b
  out = (a @ b) * ctx.get("alpha", 1.0)
  return out if c is None else out + c * ctx.get("beta", 1.0)

def _padding(ctx: Ctx, x: Tensor, kernel: list[int], strides: list[int], dilations: list[int]) -> list[tuple[int, int]]:
  """Per spatial dim (before, after), from pads or auto_pad."""
  n, auto = len(kernel), ctx.get("auto_pad", "NOTSET")
  if auto in ("SAME_UPPER", "SAME_LOWER"):
    out = []
    for i, (k, s, d) in enumerate(zip(kernel, strides, dilations)):
      size = x.shape[2 + i]
      total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
      out.append((total // 2, total - total // 2) if auto == "SAME_UPPER" else (total - total // 2, total // 2))
    return out
  if auto == "VALID": return [(0, 0)] * n
  pads = ctx.get("pads", [0] * (2 * n))
  return list(zip(pads[:n], pads[n:]))

@op("Conv")
def _conv(ctx, x, w, b=None):
  kernel = ctx.get("kernel_shape", list(w.shape[2:]))
  n = len(kernel)
  strides, dilations = ctx.get("strides", [1] * n), ctx.get("dilations", [1] * n)
  pads = _padding(ctx, x, kernel, strides, dilations)
  return x.conv2d(w, b, groups=ctx.get("group", 1), stride=tuple(strides), dilation=tuple(dilations), padding=tuple(pads))

@op("ConvTranspose")
def _conv_transpose(ctx, x, w, b=None):
  kernel = ctx.get("kernel_shape", list(w.shape[2:]))
  n = len(kernel)
  strides, dilations = ctx.get("strides", [1] * n), ctx.get("dilations", [1] * n)
  out_pad, auto = ctx.get("output_padding", [0] * n), ctx.get("auto_pad", "NOTSET")
  # the whole transposed convolution, then each spatial dim cut to [begin, begin + size) (zeros past its end)
  full = x.conv_transpose2d(w, None, groups=ctx.get("group", 1), stride=tuple(strides), dilation=tuple(dilations))
  span = [full.shape[2 + i] for i in range(n)]   # (in - 1) * stride + (kernel - 1) * dilation + 1
  out_shape = ctx.get("output_shape")
  if out_shape is None and auto in ("SAME_UPPER", "SAME_LOWER"): out_shape = [x.shape[2 + i] * strides[i] for i in range(n)]
  if out_shape is not None:
    out_shape = out_shape[-n:]
    total = [max(0, span[i] + out_pad[i] - out_shape[i]) for i in range(n)]   # (an output longer than the span: zeros at its end)
    begins = [t - t // 2 if auto == "SAME_LOWER" else t // 2 for t in total]
    sizes = list(out_shape)
  else:
    pads = [0] * (2 * n) if auto == "VALID" else ctx.get("pads", [0] * (2 * n))
    begins, sizes = pads[:n], [span[i] - pads[i] - pads[n + i] + out_pad[i] for i in range(n)]
  y = full.pad(tuple([None, None] + [(0, max(0, bg + sz - sp)) for bg, sz, sp in zip(begins, sizes, span)]))
  y = y.shrink(tuple([None, None] + [(bg, bg + sz) for bg, sz in zip(begins, sizes)]))
  return y if b is None else y + b.reshape((1, -1) + (1,) * n)

def _pool(ctx, x, name: str):
  kernel = ctx.get("kernel_shape")
  n = len(kernel)
  strides, dilations = ctx.get("strides", [1] * n), ctx.get("dilations", [1] * n)
  pads = _padding(ctx, x, kernel, strides, dilations)
  ceil, padded = bool(ctx.get("ceil_mode", 0)), any(a or b for a, b in pads)
  spec = dict(kernel_size=tuple(kernel), stride=tuple(strides), dilation=tuple(dilations), ceil_mode=ceil)
  if name == "max":   # (the padding explicit, as -inf: ONNX allows pads up to the kernel's size, torch half of it)
    if padded: x = x.pad(tuple([None, None] + list(pads)), value=-math.inf if x.dtype.is_float else x.dtype.min)
    return x.max_pool2d(**spec).cast(x.dtype)
  include = bool(ctx.get("count_include_pad", 0))
  if not padded: return x.avg_pool2d(**spec)
  if ceil:   # torch's rule for windows past the end needs its own padding argument: symmetric, at most half the kernel
    if any(a != b for a, b in pads): raise ctx.unsupported("AveragePool with ceil_mode and unequal pads")
    return x.avg_pool2d(**spec, padding=tuple(a for a, _ in pads), count_include_pad=include)
  total = x.pad(tuple([None, None] + list(pads))).avg_pool2d(**spec)
  if include: return total
  inside = Tensor.ones(*x.shape[2:], dtype=x.dtype, device=x.device).pad(tuple(pads))
  return total / inside.reshape((1, 1) + inside.shape).avg_pool2d(**spec)   # (the mean over the window's elements inside the input)
@op("MaxPool")
def _maxpool(ctx, x):
  if len(ctx.node.output) < 2: return _pool(ctx, x, "max")
  # with indices: positions in the whole input, flattened row-major (storage_order 0; 1: column-major over H, W)
  kernel = ctx.get("kernel_shape")
  n = len(kernel)
  strides, dilations = ctx.get("strides", [1] * n), ctx.get("dilations", [1] * n)
  if any(a or b for a, b in _padding(ctx, x, kernel, strides, dilations)): raise ctx.unsupported("MaxPool indices with padding")
  values, idx = x.max_pool2d(tuple(kernel), tuple(strides), tuple(dilations), ceil_mode=bool(ctx.get("ceil_mode", 0)), return_indices=True)
  spatial = x.shape[2:]
  idx = idx.cast(_index_dtype(ctx))
  if ctx.get("storage_order", 0):
    if n != 2: raise ctx.unsupported("MaxPool storage_order 1 with other than 2 spatial dims")
    idx = (idx % spatial[1]) * spatial[0] + idx // spatial[1]
  base = Tensor.arange(x.shape[0] * x.shape[1], device=ctx.device).cast(idx.dtype).reshape((x.shape[0], x.shape[1]) + (1,) * n)
  return values, idx + base * math.prod(spatial)
@op("AveragePool")
def _avgpool(ctx, x): return _pool(ctx, x, "avg")
@op("GlobalAveragePool")
def _gap(ctx, x): return x.mean(tuple(range(2, x.ndim)), keepdim=True)
@op("GlobalMaxPool")
def _gmp(ctx, x): return x.max(tuple(range(2, x.ndim)), keepdim=True)

# normalization
@op("BatchNormalization")
def _batchnorm(ctx, x, scale, bias, mean, var):
  shape, eps = (1, -1) + (1,) * (x.ndim - 2), ctx.get("epsilon", 1e-5)
  if not ctx.get("training_mode", 0):
    return (x - mean.reshape(shape)) * (scale.reshape(shape) * (var.reshape(shape) + eps).rsqrt()) + bias.reshape(shape)
  # training: the batch's statistics normalize, and the running ones move towards them by 1 - momentum
  axes, m = (0,) + tuple(range(2, x.ndim)), ctx.get("momentum", 0.9)
  bmean, bvar = x.mean(axes), x.var(axes, correction=0)
  y = (x - bmean.reshape(shape)) * (scale.reshape(shape) * (bvar.reshape(shape) + eps).rsqrt()) + bias.reshape(shape)
  return y, mean * m + bmean * (1 - m), var * m + bvar * (1 - m)
@op("InstanceNormalization")
def _instancenorm(ctx, x, scale, bias):
  axes, shape = tuple(range(2, x.ndim)), (1, -1) + (1,) * (x.ndim - 2)
  mean = x.mean(axes, keepdim=True)
  return (x - mean) * (x.var(axes, keepdim=True, correction=0) + ctx.get("epsilon", 1e-5)).rsqrt() * scale.reshape(shape) + bias.reshape(shape)
@op("LayerNormalization")
def _layernorm(ctx, x, scale, bias=None):
  axis = _axis(ctx, x, -1)
  axes = tuple(range(axis, x.ndim))
  mean = x.mean(axes, keepdim=True)
  invstd = (x.var(axes, keepdim=True, correction=0) + ctx.get("epsilon", 1e-5)).rsqrt()
  y = (x - mean) * invstd * scale
  return (y if bias is None else y + bias), mean, invstd
@op("LRN")
def _lrn(ctx, x):
  size, alpha, beta, bias = ctx.get("size"), ctx.get("alpha", 1e-4), ctx.get("beta", 0.75), ctx.get("bias", 1.0)
  sq = (x * x).pad(tuple([None, ((size - 1) // 2, size - 1 - (size - 1) // 2)] + [None] * (x.ndim - 2)))
  window = sum(sq.shrink(tuple([None, (i, i + x.shape[1])] + [None] * (x.ndim - 2))) for i in range(size))
  return x / (window * (alpha / size) + bias) ** beta

# softmax family
def _softmax_like(ctx, x, fn: str):
  axis = _axis(ctx, x, -1 if ctx.opset >= 13 else 1)
  if ctx.opset >= 13: return getattr(x, fn)(axis)
  flat = x.reshape(math.prod(x.shape[:axis]), -1)   # (before opset 13: over all dims from axis on, flattened)
  return getattr(flat, fn)(-1).reshape(x.shape)
@op("Softmax")
def _softmax(ctx, x): return _softmax_like(ctx, x, "softmax")
@op("LogSoftmax")
def _logsoftmax(ctx, x): return _softmax_like(ctx, x, "log_softmax")
def _last_to(x: Tensor, axis: int) -> Tensor:
  """x with its last dim moved to position `axis` (negative: counted from the end)."""
  a = axis % x.ndim
  return x.permute(*range(a), x.ndim - 1, *range(a, x.ndim - 1))
@op("Hardmax")
def _hardmax(ctx, x):
  axis = _axis(ctx, x, -1)
  return _last_to(x.argmax(axis).one_hot(x.shape[axis]).cast(x.dtype), axis)

# reductions: axes as an attribute (before opset 18; 13 for ReduceSum) or as the second input
def _extreme(x: Tensor, axes: tuple, keep: bool, name: str) -> Tensor:
  """max/min, with ONNX's value for an empty set: the dtype's lowest (max) or highest (min) value, -inf/inf for floats."""
  if all(x.shape[a] for a in axes): return getattr(x, name)(axes, keepdim=keep)
  shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape) if keep or i not in axes)
  fill = (x.dtype.min if name == "max" else x.dtype.max) if not x.dtype.is_float else -math.inf if name == "max" else math.inf
  return Tensor.full(shape, fill, dtype=x.dtype, device=x.device)
def _reduce(ctx, x, axes_t, fn):
  axes = ctx.ints(axes_t) if axes_t is not None else ctx.get("axes")
  keep = bool(ctx.get("keepdims", 1))
  if not axes:
    if ctx.get("noop_with_empty_axes", 0): return x
    axes = list(range(x.ndim))
  return fn(x, tuple(a + x.ndim if a < 0 else a for a in axes), keep)
for _name, _fn in {"ReduceSum": lambda x, a, k: x.sum(a, keepdim=k), "ReduceMean": lambda x, a, k: x.mean(a, keepdim=k),
                   "ReduceMax": lambda x, a, k: _extreme(x, a, k, "max"), "ReduceMin": lambda x, a, k: _extreme(x, a, k, "min"),
                   "ReduceProd": lambda x, a, k: x.prod(a, keepdim=k), "ReduceSumSquare": lambda x, a, k: (x * x).sum(a, keepdim=k),
                   "ReduceL1": lambda x, a, k: x.abs().sum(a, keepdim=k), "ReduceL2": lambda x, a, k: (x * x).sum(a, keepdim=k).sqrt(),
                   "ReduceLogSum": lambda x, a, k: x.sum(a, keepdim=k).log(), "ReduceLogSumExp": lambda x, a, k: x.logsumexp(a, keepdim=k)}.items():
  OPS[_name] = (lambda f: lambda ctx, x, axes=None: _reduce(ctx, x, axes, f))(_fn)
@op("ArgMax", "ArgMin")
def _argminmax(ctx, x):
  axis, keep = _axis(ctx, x), bool(ctx.get("keepdims", 1))
  name = ctx.node.op_type.lower()
  if ctx.get("select_last_index", 0):
    return ((x.shape[axis] - 1) - getattr(x.flip(axis), name)(axis, keepdim=keep)).cast(_index_dtype(ctx))
  return getattr(x, name)(axis, keepdim=keep).cast(_index_dtype(ctx))
@op("CumSum")
def _cumsum(ctx, x, axis):
  a = ctx.ints(axis)[0]
  y = x.flip(a) if ctx.get("reverse", 0) else x
  out = y.cumsum(a)
  if ctx.get("exclusive", 0): out = out - y
  return out.flip(a) if ctx.get("reverse", 0) else out

# shapes and movement
def _index_dtype(ctx) -> DType: return dtypes.int64 if Device[ctx.device].has_dtype(dtypes.int64) else dtypes.int32
@op("Shape")
def _shape(ctx, x):
  dims = list(x.shape)
  start, end = ctx.get("start", 0), ctx.get("end", len(dims))
  return Tensor(dims[start:end], dtype=_index_dtype(ctx), device=ctx.device)
@op("Size")
def _size(ctx, x): return Tensor(x.numel(), dtype=_index_dtype(ctx), device=ctx.device)
@op("Reshape")
def _reshape(ctx, x, shape):
  s = ctx.ints(shape)
  if not ctx.get("allowzero", 0): s = [x.shape[i] if v == 0 else v for i, v in enumerate(s)]
  return x.reshape(s)
@op("Flatten")
def _flatten(ctx, x):
  axis = _axis(ctx, x, 1)
  return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
@op("Transpose")
def _transpose(ctx, x): return x.permute(ctx.get("perm", list(range(x.ndim))[::-1]))
@op("Squeeze")
def _squeeze(ctx, x, axes=None):
  axes = ctx.ints(axes) if axes is not None else ctx.get("axes")
  if axes is None: return x.reshape(tuple(s for s in x.shape if s != 1))
  axes = {a + x.ndim if a < 0 else a for a in axes}
  return x.reshape(tuple(s for i, s in enumerate(x.shape) if i not in axes))
@op("Unsqueeze")
def _unsqueeze(ctx, x, axes=None):
  axes = ctx.ints(axes) if axes is not None else ctx.get("axes")
  n = x.ndim + len(axes)
  axes, shape, it = {a + n if a < 0 else a for a in axes}, [], iter(x.shape)
  return x.reshape(tuple(1 if i in axes else next(it) for i in range(n)))
@op("Concat")
def _concat(ctx, *xs): return xs[0].cat(*xs[1:], dim=_axis(ctx, xs[0]))
@op("Split")
def _split(ctx, x, split=None):
  axis = _axis(ctx, x)
  sizes = ctx.ints(split) if split is not None else ctx.get("split")
  if sizes is None:
    parts = ctx.get("num_outputs") or len(ctx.node.output)
    size = math.ceil(x.shape[axis] / parts)
    sizes = [min(size, x.shape[axis] - i * size) for i in range(parts)]
  return x.split(sizes, axis)
@op("Slice")
def _slice(ctx, x, starts=None, ends=None, axes=None, steps=None):
  if ctx.opset < 10: starts, ends, axes, steps = ctx.get("starts"), ctx.get("ends"), ctx.get("axes"), None
  else: starts, ends, axes, steps = ctx.ints(starts), ctx.ints(ends), ctx.ints(axes), ctx.ints(steps)
  axes = list(range(len(starts))) if axes is None else [a + x.ndim if a < 0 else a for a in axes]
  steps = steps or [1] * len(starts)
  index = [slice(None)] * x.ndim
  for a, s, e, st in zip(axes, starts, ends, steps):
    big = 1 << 62   # (INT64_MAX / INT64_MIN as "to the end": Python slices clamp any out-of-range bound)
    index[a] = slice(max(min(s, big), -big), max(min(e, big), -big), st)
  return x[tuple(index)]
@op("Gather")
def _gather(ctx, x, idx):
  axis = _axis(ctx, x)
  i = idx.cast(dtypes.int32)
  i = (i < 0).where(i + x.shape[axis], i)
  return x[(slice(None),) * axis + (i,)]
@op("GatherElements")
def _gather_elements(ctx, x, idx):
  axis = _axis(ctx, x)
  i = idx.cast(dtypes.int32)
  return x.gather(axis, (i < 0).where(i + x.shape[axis], i))
@op("Expand")
def _expand(ctx, x, shape):
  s = ctx.ints(shape)
  n = max(len(s), x.ndim)
  xs, s = (1,) * (n - x.ndim) + x.shape, [1] * (n - len(s)) + s
  return x.reshape(xs).expand(tuple(a if b == 1 else b for a, b in zip(xs, s)))
@op("Tile")
def _tile(ctx, x, repeats): return x.repeat(ctx.ints(repeats))
@op("Pad")
def _pad(ctx, x, pads=None, value=None, axes=None):
  mode = ctx.get("mode", "constant")
  if ctx.opset < 11: pads, value = ctx.get("pads"), ctx.get("value", 0.0)
  else: pads, value = ctx.ints(pads), (value.item() if value is not None else 0)
  axes = list(range(x.ndim)) if axes is None else [a + x.ndim if a < 0 else a for a in ctx.ints(axes)]
  per = [None] * x.ndim
  for k, a in enumerate(axes): per[a] = (pads[k], pads[k + len(axes)])
  if any(p is not None and min(p) < 0 for p in per): raise ctx.unsupported(f"Pad with negative pads {pads}")
  return x.pad(tuple(per), mode={"edge": "replicate", "wrap": "circular"}.get(mode, mode), value=value)
@op("ConstantOfShape")
def _constant_of_shape(ctx, shape):
  v = ctx.get("value")
  s = ctx.ints(shape)
  if v is None: return Tensor.zeros(*s, device=ctx.device) if s else Tensor.zeros((), device=ctx.device)
  return v.reshape(()).expand(tuple(s)) if s else v.reshape(())
@op("Range")
def _range(ctx, start, limit, delta):
  s, l, d = start.item(), limit.item(), delta.item()
  n = max(0, math.ceil((l - s) / d))
  return (Tensor.arange(n, device=ctx.device).cast(start.dtype) * d + s).cast(start.dtype)
@op("Trilu")
def _trilu(ctx, x, k=None):
  k = ctx.ints(k)[0] if k is not None else 0
  return x.triu(k) if ctx.get("upper", 1) else x.tril(k)
@op("DepthToSpace")
def _depth_to_space(ctx, x):
  b, n, (c, h, w) = ctx.get("blocksize"), x.shape[0], x.shape[1:]
  if ctx.get("mode", "DCR") == "DCR": y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
  else: y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
  return y.reshape(n, c // (b * b), h * b, w * b)
@op("SpaceToDepth")
def _space_to_depth(ctx, x):
  b, (n, c, h, w) = ctx.get("blocksize"), x.shape
  order = (0, 1, 3, 5, 2, 4) if ctx.get("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
  return x.reshape(n, c, h // b, b, w // b, b).permute(*order).reshape(n, c * b * b, h // b, w // b)
@op("OneHot")
def _onehot(ctx, idx, depth, values):
  d, axis = int(ctx.ints(depth)[0]), ctx.get("axis", -1)
  i = idx.cast(dtypes.int32)
  i = (i < 0).where(i + d, i)
  hot = i.unsqueeze(-1) == Tensor.arange(d, device=ctx.device)
  return _last_to(hot.where(values[1], values[0]), axis)
@op("Einsum")
def _einsum(ctx, *xs): return Tensor.einsum(ctx.get("equation"), *xs)
@op("TopK")
def _topk(ctx, x, k):
  axis = _axis(ctx, x, -1)
  values, indices = x.topk(ctx.ints(k)[0], axis, largest=bool(ctx.get("largest", 1)), sorted_=bool(ctx.get("sorted", 1)))
  return values, indices.cast(_index_dtype(ctx))
@op("ScatterElements")
def _scatter_elements(ctx, x, idx, updates):
  axis = _axis(ctx, x)
  i = idx.cast(dtypes.int32)
  i = (i < 0).where(i + x.shape[axis], i)
  reduction = ctx.get("reduction", "none")
  if reduction == "none": return x.scatter(axis, i, updates)
  return x.scatter_reduce(axis, i, updates, {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction])
@op("CumProd")
def _cumprod(ctx, x, axis):
  a = ctx.ints(axis)[0]
  a = a + x.ndim if a < 0 else a
  y = x.flip(a) if ctx.get("reverse", 0) else x
  if ctx.get("exclusive", 0):   # each position gets the product of those before it: y shifted on by one, with 1 first
    y = y.shrink(tuple((0, s - 1) if d == a else None for d, s in enumerate(y.shape))).pad(tuple((1, 0) if d == a else None for d in range(y.ndim)), value=1)
  out = y.cumprod(a)
  return out.flip(a) if ctx.get("reverse", 0) else out
@op("BitShift")
def _bitshift(ctx, x, y):
  # a shift by the width or more, or by a negative amount, is defined: 0 (right: -1 for a negative signed x, as all of
  # its bits shifted out in an arithmetic shift), where C's shifts would be undefined
  bits = x.dtype.itemsize * 8
  y = y.cast(x.dtype)
  s = y.clip(0, bits - 1)
  if ctx.get("direction") == "LEFT": return ((y >= 0) & (y < bits)).where(x.lshift(s), 0)
  past = (x < 0).where(-1, 0).cast(x.dtype) if not x.dtype.is_unsigned else 0
  return (y < 0).where(0, (y >= bits).where(past, x.rshift(s)))
@op("Dropout")
def _dropout(ctx, x, ratio=None, training=None):
  if training is not None and bool(training.item()): raise ctx.unsupported("Dropout in training mode (random)")
  return x, Tensor.ones(*x.shape, dtype=dtypes.bool, device=ctx.device) if x.ndim else Tensor(True, device=ctx.device)
@op("Swish")
def _swish(ctx, x): return x * (x * ctx.get("alpha", 1.0)).sigmoid()
@op("RMSNormalization")
def _rmsnorm(ctx, x, scale):
  axis = _axis(ctx, x, -1)
  xf = x.float() if x.dtype != dtypes.float64 else x
  y = xf * ((xf * xf).mean(tuple(range(axis, x.ndim)), keepdim=True) + ctx.get("epsilon", 1e-5)).rsqrt()
  return y.cast(x.dtype) * scale
@op("LpNormalization")
def _lpnorm(ctx, x):
  axis, p = _axis(ctx, x, -1), ctx.get("p", 2)
  norm = x.abs().sum(axis, keepdim=True) if p == 1 else (x * x).sum(axis, keepdim=True).sqrt()
  return (norm == 0).where(0, x / norm)   # (a zero vector stays zero)
@op("LpPool")
def _lppool(ctx, x):
  kernel, p = ctx.get("kernel_shape"), ctx.get("p", 2)
  n = len(kernel)
  strides, dilations = ctx.get("strides", [1] * n), ctx.get("dilations", [1] * n)
  pads = _padding(ctx, x, kernel, strides, dilations)
  y = x.abs() ** p
  if any(a or b for a, b in pads): y = y.pad(tuple([None, None] + list(pads)))
  total = y.avg_pool2d(tuple(kernel), tuple(strides), tuple(dilations), 0, ceil_mode=bool(ctx.get("ceil_mode", 0))) * math.prod(kernel)
  return total ** (1 / p)

def _nll(ctx, logp: Tensor, target: Tensor, weight: Optional[Tensor]) -> Tensor:
  """ONNX's NegativeLogLikelihoodLoss of log-probabilities (N, C, d...) and targets (N, d...), reduced as asked."""
  c, ignore = logp.shape[1], ctx.get("ignore_index")
  t = target.cast(dtypes.int32)
  classes = Tensor.arange(c, device=ctx.device).reshape((1, c) + (1,) * (t.ndim - 1))
  hot = t.unsqueeze(1) == classes
  if ignore is not None: hot = hot & (t != ignore).unsqueeze(1)
  w = hot.where(weight.reshape((1, c) + (1,) * (t.ndim - 1)) if weight is not None else 1.0, 0.0).sum(1)
  loss = -hot.where(logp, 0.0).sum(1) * (w if weight is not None else 1.0)
  reduction = ctx.get("reduction", "mean")
  if reduction == "none": return loss
  if reduction == "sum": return loss.sum()
  return loss.sum() / w.sum()
@op("NegativeLogLikelihoodLoss")
def _nll_loss(ctx, x, target, weight=None): return _nll(ctx, x, target, weight)
@op("SoftmaxCrossEntropyLoss")
def _sce_loss(ctx, scores, labels, weights=None):
  logp = scores.log_softmax(1)
  return _nll(ctx, logp, labels, weights), logp

# Resize: separable, one axis at a time, each output position a weighted sum of n input taps found as ONNX's reference
# finds them (the edge repeated past the ends); nearest reads the chosen tap, linear and cubic contract with an
# (out, in) weight matrix
def _resize_taps(ratio: float, scale: float, mode: str, ctx) -> list[float]:
  if mode == "nearest":
    if ratio == 1.0: return [0.0, 1.0]   # (an integer coordinate: its own position, the right of the two taps)
    nearest = ctx.get("nearest_mode", "round_prefer_floor")
    if nearest == "round_prefer_floor": return [float(ratio <= 0.5), float(ratio > 0.5)]
    if nearest == "round_prefer_ceil": return [float(ratio < 0.5), float(ratio >= 0.5)]
    return [1.0, 0.0] if nearest == "floor" else [0.0, 1.0]
  antialias, s = bool(ctx.get("antialias", 0)), min(scale, 1.0)
  if mode == "linear":
    if not antialias: return [1 - ratio, ratio]
    start = math.floor(-1 / s) + 1
    ws = [min(1.0, max(0.0, 1 - abs((start + k - ratio) * s))) for k in range(2 - 2 * start)]
    return [w / sum(ws) for w in ws]
  a = ctx.get("cubic_coeff_a", -0.75)
  def cubic(t: float) -> float:
    t = abs(t)
    return ((a + 2) * t - (a + 3)) * t * t + 1 if t <= 1 else ((a * t - 5 * a) * t + 8 * a) * t - 4 * a if t < 2 else 0.0
  if not antialias: return [cubic(ratio + 1), cubic(ratio), cubic(1 - ratio), cubic(2 - ratio)]
  start = math.floor(-2 / s) + 1
  ws = [cubic(s * (k - ratio)) for k in range(start, 2 - start)]
  return [w / sum(ws) for w in ws]

def _resize_axis(ctx, x: Tensor, axis: int, scale: float, out_len: int, mode: str, roi: Optional[tuple[float, float]]) -> Tensor:
  n_in, ctm = x.shape[axis], ctx.get("coordinate_transformation_mode", "half_pixel")
  width = scale * n_in   # (the output length as a float: align_corners and half_pixel_symmetric use it)
  rows, outside = [], []
  for o in range(out_len):
    if ctm == "align_corners": src = 0.0 if width == 1 else o * (n_in - 1) / (width - 1)
    elif ctm == "asymmetric": src = o / scale
    elif ctm == "pytorch_half_pixel": src = -0.5 if width == 1 else (o + 0.5) / scale - 0.5
    elif ctm == "half_pixel": src = (o + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric": src = n_in / 2 * (1 - out_len / width) + (o + 0.5) / scale - 0.5
    elif ctm == "tf_crop_and_resize":
      lo, hi = roi if roi is not None else (0.0, 1.0)
      src = (hi - lo) * (n_in - 1) / 2 if width == 1 else o * (hi - lo) * (n_in - 1) / (width - 1)
      src += lo * (n_in - 1)
    else: raise ctx.unsupported(f"Resize coordinate_transformation_mode {ctm!r}")
    outside.append(ctm == "tf_crop_and_resize" and not 0 <= src <= n_in - 1)
    base = math.floor(src)
    taps = _resize_taps(1.0 if src == base else src - base, scale, mode, ctx)
    n, pad = len(taps), math.ceil(len(taps) / 2)
    p = math.floor(src + pad)
    frac = src + pad - p
    first = p + ((-(n // 2) if frac == 0 else -(n // 2) + 1) if n % 2 == 0 else (-((n - 1) // 2) + (frac > 0.5)))
    idx = [first + k - pad for k in range(n)]
    if ctx.get("exclude_outside", 0):
      taps = [0.0 if not 0 <= i < n_in else w for i, w in zip(idx, taps)]
      total = sum(taps) or 1.0
      taps = [w / total for w in taps]
    rows.append([(min(max(i, 0), n_in - 1), w) for i, w in zip(idx, taps)])
  moved = x.transpose(axis, -1) if axis != x.ndim - 1 else x
  if mode == "nearest":   # one tap per output: read it
    pick = Tensor([next(i for i, w in r if w == 1.0) for r in rows], dtype=dtypes.int32, device=ctx.device)
    out = moved[(Ellipsis, pick)]
  else:
    weights = [[0.0] * n_in for _ in range(out_len)]
    for o, r in enumerate(rows):
      for i, w in r: weights[o][i] += w
    wt = Tensor(weights, dtype=x.dtype if x.dtype.is_float else dtypes.float32, device=ctx.device)
    out = (moved.cast(wt.dtype) @ wt.transpose()).cast(x.dtype)
  if any(outside):
    mask = Tensor(outside, device=ctx.device)
    out = mask.where(Tensor(ctx.get("extrapolation_value", 0.0), dtype=out.dtype, device=ctx.device), out)
  return out.transpose(axis, -1) if axis != x.ndim - 1 else out

@op("Resize", "Upsample")
def _resize(ctx, x, roi=None, scales=None, sizes=None):
  if ctx.node.op_type == "Upsample": scales, roi = roi, None   # (Upsample takes X, scales: its second input is the scales)
  mode = ctx.get("mode", "nearest")
  if mode not in ("nearest", "linear", "cubic"): raise ctx.unsupported(f"Resize mode {mode!r}")
  r = x.ndim
  axes = [a + r if a < 0 else a for a in ctx.get("axes", list(range(r)))]
  sc = [float(v) for v in scales.tolist()] if scales is not None and scales.numel() else (ctx.get("scales") if ctx.node.op_type == "Upsample" else None)
  sz = ctx.ints(sizes) if sizes is not None and sizes.numel() else None
  roi_vals = [float(v) for v in roi.tolist()] if roi is not None and roi.numel() else None
  scale, out = [1.0] * r, list(x.shape)
  if sz is not None:
    for i, a in enumerate(axes): scale[a], out[a] = sz[i] / x.shape[a], sz[i]
    policy = ctx.get("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
      common = (min if policy == "not_larger" else max)(scale[a] for a in axes)
      for a in axes: scale[a], out[a] = common, int(common * x.shape[a] + 0.5)
  elif sc is not None:
    for i, a in enumerate(axes): scale[a], out[a] = sc[i], int(sc[i] * x.shape[a])
  else: raise ctx.unsupported("Resize without scales or sizes")
  rois = {a: (roi_vals[i], roi_vals[i + len(axes)]) for i, a in enumerate(axes)} if roi_vals else {}
  for a in axes:
    if math.isclose(scale[a], 1.0) and out[a] == x.shape[a] and a not in rois: continue
    x = _resize_axis(ctx, x, a, scale[a], out[a], mode, rois.get(a))
  return x

@op("Attention")
def _attention(ctx, q, k, v, mask=None, past_k=None, past_v=None, nonpad=None):
  """ONNX's Attention (opset 23+): softmax((Q * s)(K * s)^T [softcapped] + bias) V with s = sqrt(scale), the bias from
  attn_mask (bool: -inf where False; float: added; shorter than the keys: padded), is_causal (aligned to the bottom
  right, after past keys) and nonpad_kv_seqlen; grouped heads share K/V; a row with every key masked gives 0."""
  three_d = q.ndim == 3
  if three_d:
    qh, kvh = ctx.get("q_num_heads"), ctx.get("kv_num_heads")
    q = q.reshape(q.shape[0], q.shape[1], qh, -1).transpose(1, 2)
    k, v = (t.reshape(t.shape[0], t.shape[1], kvh, -1).transpose(1, 2) for t in (k, v))
  scale = ctx.get("scale")
  s = math.sqrt(scale if scale is not None else 1 / math.sqrt(q.shape[3]))
  if past_k is not None: k = past_k.cat(k, dim=2)
  if past_v is not None: v = past_v.cat(v, dim=2)
  present_k, present_v = k, v
  n_q, n_kv = q.shape[2], k.shape[2]
  ninf = Tensor(-math.inf, dtype=q.dtype, device=ctx.device)
  bias = Tensor.zeros(n_q, n_kv, dtype=q.dtype, device=ctx.device)
  if mask is not None:
    if (short := n_kv - mask.shape[-1]) > 0:
      mask = mask.pad(tuple([None] * (mask.ndim - 1) + [(0, short)]), value=False if mask.dtype == dtypes.bool else -math.inf)
    bias = bias + (mask.where(0.0, ninf) if mask.dtype == dtypes.bool else mask.cast(q.dtype))
  # causal and sliding-window masks compare a query's position (its row plus the keys before its block: the past keys,
  # or per batch nonpad_kv_seqlen - n_q) with a key's
  rows, cols = Tensor.arange(n_q, device=ctx.device).reshape(1, 1, n_q, 1), Tensor.arange(n_kv, device=ctx.device).reshape(1, 1, 1, n_kv)
  offset = (nonpad.cast(dtypes.int32) - n_q).reshape(-1, 1, 1, 1) if past_k is None and nonpad is not None else \
    (past_k.shape[2] if past_k is not None else 0)
  diff = rows + offset - cols
  if ctx.get("is_causal", 0): bias = bias + (diff >= 0).where(0.0, ninf)
  left, right = ctx.get("left_window_size", -1), ctx.get("right_window_size", -1)
  if left >= 0: bias = bias + (diff <= left).where(0.0, ninf)
  if right >= 0: bias = bias + (-diff <= right).where(0.0, ninf)
  if nonpad is not None:
    keep = Tensor.arange(n_kv, device=ctx.device).reshape(1, 1, 1, n_kv) < nonpad.cast(dtypes.int32).reshape(-1, 1, 1, 1)
    bias = bias + keep.where(0.0, ninf)
  if q.shape[1] != k.shape[1] and q.shape[1] % k.shape[1] == 0 and k.shape[1] == v.shape[1]:   # grouped-query heads
    k, v = k.repeat_interleave(q.shape[1] // k.shape[1], 1), v.repeat_interleave(q.shape[1] // k.shape[1], 1)
  qk = (q * s) @ (k * s).transpose(-1, -2)
  if (cap := ctx.get("softcap", 0.0)) and cap > 0: qk = (qk / cap).tanh() * cap
  with_bias = qk + bias
  mode = ctx.get("qk_matmul_output_mode", 0)
  qk_out = with_bias if mode == 2 else qk
  precision = ctx.get("softmax_precision")
  logits = with_bias.cast(onnx_dtype(precision, ctx.label)) if precision else with_bias
  probs = logits.softmax(-1)
  all_masked = bias.max(-1, keepdim=True) == -math.inf
  probs = all_masked.where(0.0, probs)
  if mode == 3: qk_out = probs
  out = probs.cast(q.dtype) @ v
  if three_d: out = out.transpose(1, 2).reshape(out.shape[0], out.shape[2], -1)
  return out, present_k, present_v, qk_out.cast(q.dtype)

# control flow, evaluated when the graph is built (the condition is read)
@op("If")
def _if(ctx, cond):
  branch = ctx.get("then_branch") if bool(cond.item()) else ctx.get("else_branch")
  return tuple(ctx.runner.run_graph(branch, dict(ctx.values), f"{ctx.label} > "))

# quantization (y = saturate(round_half_even(x / scale) + zero_point), x = (y - zero_point) * scale), per tensor, per
# axis or per block
def _along(ctx, p: Tensor, x: Tensor, axis_default: int = 1) -> Tensor:
  """A scale or zero point shaped to broadcast against x: a scalar as it is, a 1-D one along `axis`, a blocked one
  repeated block_size times along it."""
  if p.ndim == 0 or p.numel() == 1: return p.reshape(())
  axis = ctx.get("axis", axis_default)
  axis = axis + x.ndim if axis < 0 else axis
  if (block := ctx.get("block_size", 0)) and p.ndim == x.ndim:
    return p.repeat_interleave(block, axis).shrink(tuple((0, x.shape[axis]) if d == axis else None for d in range(x.ndim)))
  return p.reshape(tuple(-1 if d == axis else 1 for d in range(x.ndim)))
def _saturate(y: Tensor, dt: DType) -> Tensor: return y.clip(dt.min, dt.max).cast(dt)
@op("QuantizeLinear")
def _quantize(ctx, x, scale, zp=None):
  dt = zp.dtype if zp is not None else onnx_dtype(ctx.get("output_dtype", 2) or 2, ctx.label)
  q = (x.float() / _along(ctx, scale, x).float()).round()
  if zp is not None: q = q + _along(ctx, zp, x).float()
  return _saturate(q, dt)
@op("DequantizeLinear")
def _dequantize(ctx, x, scale, zp=None):
  y = x.float() if zp is None else x.cast(dtypes.int32) - _along(ctx, zp, x).cast(dtypes.int32)
  return (y.float() * _along(ctx, scale, x).float()).cast(scale.dtype)
@op("DynamicQuantizeLinear")
def _dynamic_quantize(ctx, x):
  lo, hi = x.min().minimum(0.0), x.max().maximum(0.0)
  scale = (hi - lo) / 255
  zp = _saturate((-lo / scale).round(), dtypes.uint8)
  return _saturate((x / scale).round() + zp.float(), dtypes.uint8), scale, zp
def _minus_zero_point(x: Tensor, zp: Optional[Tensor], axis: int) -> Tensor:
  x = x.cast(dtypes.int32)
  if zp is None: return x
  return x - (zp.reshape(()) if zp.numel() == 1 else zp.reshape(tuple(-1 if d == axis else 1 for d in range(x.ndim)))).cast(dtypes.int32)
@op("MatMulInteger")
def _matmul_integer(ctx, a, b, a_zp=None, b_zp=None):
  return _minus_zero_point(a, a_zp, a.ndim - 2) @ _minus_zero_point(b, b_zp, b.ndim - 1)
@op("ConvInteger")
def _conv_integer(ctx, x, w, x_zp=None, w_zp=None):
  xs, ws = _minus_zero_point(x, x_zp, -1), _minus_zero_point(w, w_zp, 0)
  return _conv(ctx, xs.float(), ws.float()).round().cast(dtypes.int32)   # (exact: the tests' sums stay below 2^24)
@op("QLinearMatMul")
def _qlinear_matmul(ctx, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
  real = ((a.cast(dtypes.int32) - a_zp.cast(dtypes.int32)).float() * a_scale) @ ((b.cast(dtypes.int32) - b_zp.cast(dtypes.int32)).float() * b_scale)
  return _saturate((real / y_scale).round() + y_zp.float(), y_zp.dtype)
@op("QLinearConv")
def _qlinear_conv(ctx, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b=None):
  xr = (x.cast(dtypes.int32) - x_zp.cast(dtypes.int32)).float() * x_scale
  ws = w_scale.reshape(-1, *([1] * (w.ndim - 1))) if w_scale.numel() > 1 else w_scale
  wz = w_zp.reshape(-1, *([1] * (w.ndim - 1))) if w_zp.numel() > 1 else w_zp
  wr = (w.cast(dtypes.int32) - wz.cast(dtypes.int32)).float() * ws
  br = None if b is None else b.float() * (x_scale * w_scale.reshape(-1))
  return _saturate((_conv(ctx, xr, wr, br) / y_scale).round() + y_zp.float(), y_zp.dtype)

# gathers and scatters by index tuples (GatherND/ScatterND): each index row names a slice of data; flattened here to
# element positions
def _nd_positions(data: Tensor, idx: Tensor, batch_dims: int = 0) -> tuple[Tensor, int]:
  """For each index row of idx (..., k): the flat positions of the slice data[batch..., i0, ..., ik-1, :] it names
  (an extra last dim of the slice's size), and that size."""
  k = idx.shape[-1]
  dims = data.shape[batch_dims:batch_dims + k]
  inner = math.prod(data.shape[batch_dims + k:])
  i = idx.cast(dtypes.int32)
  i = (i < 0).where(i + Tensor(list(dims), dtype=dtypes.int32, device=data.device), i)
  strides = [math.prod(dims[j + 1:]) * inner for j in range(k)]
  flat = (i * Tensor(strides, dtype=dtypes.int32, device=data.device)).sum(-1)
  if batch_dims:   # each batch position's own block of data
    per_batch = math.prod(data.shape[batch_dims:])
    nb = math.prod(data.shape[:batch_dims])
    flat = flat.reshape(nb, -1) + Tensor.arange(nb, device=data.device).reshape(nb, 1) * per_batch
  return flat.reshape(-1, 1) + Tensor.arange(inner, device=data.device).reshape(1, inner), inner
@op("GatherND")
def _gather_nd(ctx, data, idx):
  b = ctx.get("batch_dims", 0)
  pos, _ = _nd_positions(data, idx, b)
  return data.flatten()[pos.flatten()].reshape(idx.shape[:-1] + data.shape[b + idx.shape[-1]:])
@op("ScatterND")
def _scatter_nd(ctx, data, idx, updates):
  pos, _ = _nd_positions(data, idx)
  flat, src, reduction = data.flatten(), updates.flatten().cast(data.dtype), ctx.get("reduction", "none")
  out = flat.scatter(0, pos.flatten(), src) if reduction == "none" else \
    flat.scatter_reduce(0, pos.flatten(), src, {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}[reduction])
  return out.reshape(data.shape)
OPS["Scatter"] = OPS["ScatterElements"]   # (the old name, opset 9-10)

# data-dependent shapes: the values are read
@op("Compress")
def _compress(ctx, x, cond):
  keep = [i for i, c in enumerate(cond.tolist()) if c]
  axis = ctx.get("axis")
  if axis is None: x, axis = x.flatten(), 0
  axis = axis + x.ndim if axis < 0 else axis
  keep = [i for i in keep if i < x.shape[axis]]
  return x[(slice(None),) * axis + (Tensor(keep, dtype=dtypes.int32, device=ctx.device),)] if keep else \
    x.shrink(tuple((0, 0) if d == axis else None for d in range(x.ndim)))
@op("NonZero")
def _nonzero(ctx, x):
  flat = x.flatten().tolist()
  hits = [pos for pos, v in zip(itertools.product(*[range(s) for s in x.shape]), flat) if v]
  cols = [[p[d] for p in hits] for d in range(x.ndim)]
  return Tensor(cols, dtype=_index_dtype(ctx), device=ctx.device).reshape(x.ndim, len(hits))
@op("ReverseSequence")
def _reverse_sequence(ctx, x, lens):
  t_axis, b_axis = ctx.get("time_axis", 0), ctx.get("batch_axis", 1)
  T, B, ls = x.shape[t_axis], x.shape[b_axis], ctx.ints(lens)
  order = [[ls[b] - 1 - t if t < ls[b] else t for b in range(B)] for t in range(T)]   # (time, batch)
  idx = Tensor(order, dtype=dtypes.int32, device=ctx.device)
  if t_axis > b_axis: idx = idx.transpose()
  shape = [1] * x.ndim
  shape[t_axis], shape[b_axis] = T, B
  return x.gather(t_axis, idx.reshape(shape).expand(x.shape))

@op("EyeLike")
def _eyelike(ctx, x):
  n, m = x.shape
  dt = onnx_dtype(ctx.get("dtype"), ctx.label) if ctx.get("dtype") is not None else x.dtype
  rows, cols = Tensor.arange(n, device=ctx.device).reshape(n, 1), Tensor.arange(m, device=ctx.device).reshape(1, m)
  return (cols - rows == ctx.get("k", 0)).cast(dt)
@op("Shrink")
def _shrink(ctx, x):
  lambd, bias = ctx.get("lambd", 0.5), ctx.get("bias", 0.0)
  return (x < -lambd).where(x + bias, (x > lambd).where(x - bias, 0)).cast(x.dtype)
@op("GroupNormalization")
def _group_norm(ctx, x, scale, bias):
  g, eps = ctx.get("num_groups"), ctx.get("epsilon", 1e-5)
  n, c = x.shape[:2]
  grouped = x.reshape(n, g, -1)
  mean, var = grouped.mean(-1, keepdim=True), grouped.var(-1, keepdim=True, correction=0)
  y = ((grouped - mean) * (var + eps).rsqrt()).reshape(x.shape)
  if scale.shape[0] != c: scale, bias = scale.repeat_interleave(c // g, 0), bias.repeat_interleave(c // g, 0)   # (opset 18: per group)
  shape = (1, c) + (1,) * (x.ndim - 2)
  return y * scale.reshape(shape) + bias.reshape(shape)
@op("MeanVarianceNormalization")
def _mvn(ctx, x):
  axes = tuple(a + x.ndim if a < 0 else a for a in ctx.get("axes", [0, 2, 3]))
  mean = x.mean(axes, keepdim=True)
  return (x - mean) / (((x * x).mean(axes, keepdim=True) - mean * mean).sqrt() + 1e-9)

def _window(ctx, size, terms: list[float]) -> Tensor:
  n = int(ctx.ints(size)[0])
  period = n if ctx.get("periodic", 1) else n - 1
  vals = [sum(c * math.cos(2 * math.pi * j * i / period) for j, c in enumerate(terms)) if period else 1.0 for i in range(n)]
  return Tensor(vals, dtype=onnx_dtype(ctx.get("output_datatype", 1), ctx.label), device=ctx.device)
@op("HannWindow")
def _hann(ctx, size): return _window(ctx, size, [0.5, -0.5])
@op("HammingWindow")
def _hamming(ctx, size): return _window(ctx, size, [25 / 46, -(1 - 25 / 46)])
@op("BlackmanWindow")
def _blackman(ctx, size): return _window(ctx, size, [0.42, -0.5, 0.08])
@op("BitCast")
def _bitcast(ctx, x): return x.bitcast(onnx_dtype(ctx.get("to"), ctx.label))
@op("CenterCropPad")
def _center_crop_pad(ctx, x, shape):
  target = ctx.ints(shape)
  axes = [a + x.ndim if a < 0 else a for a in ctx.get("axes", list(range(x.ndim)))]
  for a, t in zip(axes, target):
    n = x.shape[a]
    if t < n: x = x.shrink(tuple(((n - t) // 2, (n - t) // 2 + t) if d == a else None for d in range(x.ndim)))
    elif t > n: x = x.pad(tuple(((t - n) // 2, t - n - (t - n) // 2) if d == a else None for d in range(x.ndim)))
  return x
@op("Unique")
def _unique(ctx, x):
  """Unique values (or slices along `axis`), first occurrences' indices, each element's position among them, counts."""
  axis = ctx.get("axis")
  rows = [tuple([v]) for v in x.flatten().tolist()] if axis is None else \
    [tuple(x.transpose(0, axis if axis >= 0 else axis + x.ndim)[i].flatten().tolist()) for i in range(x.shape[axis])]
  first: dict = {}
  for i, r in enumerate(rows): first.setdefault(r, i)
  keys = sorted(first) if ctx.get("sorted", 1) else list(first)
  pos = {k: j for j, k in enumerate(keys)}
  idx = Tensor([first[k] for k in keys], dtype=_index_dtype(ctx), device=ctx.device)
  y = x.flatten()[idx.cast(dtypes.int32)] if axis is None else x[(slice(None),) * (axis % x.ndim) + (idx.cast(dtypes.int32),)]
  inverse = Tensor([pos[r] for r in rows], dtype=_index_dtype(ctx), device=ctx.device)
  counts = Tensor([sum(1 for r in rows if r == k) for k in keys], dtype=_index_dtype(ctx), device=ctx.device)
  return y, idx, inverse, counts

@op("DFT")
def _dft(ctx, x, length=None, axis_t=None):
  """The discrete Fourier transform of x (..., n, 1 real or 2 complex) along `axis` as two matrix products with cos/sin
  tables; onesided forward keeps the frequencies up to n/2, onesided inverse rebuilds the rest by symmetry (real out)."""
  axis = ctx.ints(axis_t)[0] if axis_t is not None else ctx.get("axis", 1 if ctx.opset < 20 else -2)
  axis = axis % x.ndim
  inverse, onesided = bool(ctx.get("inverse", 0)), bool(ctx.get("onesided", 0))
  m = x.shape[axis]
  n = ctx.ints(length)[0] if length is not None else (2 * (m - 1) if inverse and onesided else m)
  re = x[..., 0].transpose(axis, -1)
  im = x[..., 1].transpose(axis, -1) if x.shape[-1] == 2 else None
  used = min(m, n)   # (numpy's n: the signal cut to n or padded with zeros, which add nothing)
  re, im = re[..., :used], (im[..., :used] if im is not None else None)
  def table(rows: int, cols: int, fn) -> Tensor:
    return Tensor([[fn(k, t) for t in range(cols)] for k in range(rows)], dtype=x.dtype, device=ctx.device)
  ang = lambda k, t: 2 * math.pi * k * t / n
  if inverse and onesided:   # X[k] for k > n/2 is conj(X[n - k])
    src = [(k, 1) if k < used else (n - k, -1) for k in range(n)]
    A = table(n, used, lambda t, j: sum(math.cos(ang(k, t)) for k, (s, _) in enumerate(src) if s == j) / n)
    B = table(n, used, lambda t, j: sum(sg * math.sin(ang(k, t)) for k, (s, sg) in enumerate(src) if s == j) / n)
    out = re @ A.transpose() - (im @ B.transpose() if im is not None else 0)
    return out.transpose(axis, -1).unsqueeze(-1)
  k_out = n // 2 + 1 if onesided and not inverse else n
  C, S = table(k_out, used, lambda k, t: math.cos(ang(k, t))), table(k_out, used, lambda k, t: math.sin(ang(k, t)))
  sign = 1.0 if inverse else -1.0   # e^{sign i theta}
  yr = re @ C.transpose() - sign * (im @ S.transpose() if im is not None else 0)
  yi = sign * (re @ S.transpose()) + (im @ C.transpose() if im is not None else 0)
  if inverse: yr, yi = yr / n, yi / n
  return yr.transpose(axis, -1).unsqueeze(-1).cat(yi.transpose(axis, -1).unsqueeze(-1), dim=-1)

# recurrent layers (RNN, GRU, LSTM): one step after the other over the sequence, each direction on its own
_RNN_ACTS = {"Relu": (0, lambda x, a, b: x.relu()), "Tanh": (0, lambda x, a, b: x.tanh()), "Sigmoid": (0, lambda x, a, b: x.sigmoid()),
             "Softsign": (0, lambda x, a, b: x.softsign()), "Softplus": (0, lambda x, a, b: x.softplus()),
             "Affine": (2, lambda x, a, b: x * a + b), "LeakyRelu": (1, lambda x, a, b: x.leaky_relu(a)),
             "ThresholdedRelu": (1, lambda x, a, b: (x > a).where(x, 0)), "ScaledTanh": (2, lambda x, a, b: (x * b).tanh() * a),
             "HardSigmoid": (2, lambda x, a, b: (x * a + b).clip(0, 1)), "Elu": (1, lambda x, a, b: x.elu(a))}
_RNN_DEFAULTS = {"Affine": (1.0, 0.0), "LeakyRelu": (0.01, 0.0), "ThresholdedRelu": (1.0, 0.0), "ScaledTanh": (1.0, 1.0),
                 "HardSigmoid": (0.2, 0.5), "Elu": (1.0, 0.0)}

def _rnn_activations(ctx, defaults: list[str], n_dirs: int) -> list[list[Callable]]:
  names = ctx.get("activations") or defaults * n_dirs
  alphas, betas = list(ctx.get("activation_alpha", [])), list(ctx.get("activation_beta", []))
  fns = []
  for name in names:
    if name not in _RNN_ACTS: raise ctx.unsupported(f"activation {name}")
    takes, fn = _RNN_ACTS[name]
    a, b = _RNN_DEFAULTS.get(name, (0.0, 0.0))
    if takes >= 1 and alphas: a = alphas.pop(0)
    if takes >= 2 and betas: b = betas.pop(0)
    fns.append(lambda x, fn=fn, a=a, b=b: fn(x, a, b))
  per = len(defaults)
  return [fns[d * per:(d + 1) * per] for d in range(n_dirs)]

def _recurrent(ctx, kind: str, x, w, r, b=None, lens=None, h0=None, c0=None, p=None):
  gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[kind]
  hidden, layout, clip = ctx.get("hidden_size"), ctx.get("layout", 0), ctx.get("clip")
  direction = ctx.get("direction", "forward")
  n_dirs = 2 if direction == "bidirectional" else 1
  if layout: x = x.transpose(0, 1)   # (seq, batch, input)
  seq, batch = x.shape[0], x.shape[1]
  if layout and h0 is not None: h0 = h0.transpose(0, 1)
  if layout and c0 is not None: c0 = c0.transpose(0, 1)
  acts = _rnn_activations(ctx, {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}[kind], n_dirs)
  ls = ctx.ints(lens) if lens is not None else [seq] * batch
  def reverse(t: Tensor) -> Tensor:   # each batch entry's valid steps reversed (the rest stays)
    order = [[ls[bi] - 1 - s if s < ls[bi] else s for bi in range(batch)] for s in range(seq)]
    idx = Tensor(order, dtype=dtypes.int32, device=ctx.device).reshape(seq, batch, *([1] * (t.ndim - 2)))
    return t.gather(0, idx.expand(t.shape))
  valid = Tensor([[s < ls[bi] for bi in range(batch)] for s in range(seq)], device=ctx.device).reshape(seq, batch, 1)
  def cl(t: Tensor) -> Tensor: return t.clip(-clip, clip) if clip is not None else t
  ys, hs, cs = [], [], []
  for d in range(n_dirs):
    rev = direction == "reverse" or d == 1
    xd = reverse(x) if rev else x
    wd, rd = w[d], r[d]
    wb, rb = (b[d][:gates * hidden], b[d][gates * hidden:]) if b is not None else (None, None)
    f = acts[d]
    h = h0[d] if h0 is not None else Tensor.zeros(batch, hidden, dtype=x.dtype, device=ctx.device)
    c = c0[d] if c0 is not None else Tensor.zeros(batch, hidden, dtype=x.dtype, device=ctx.device)
    xw = xd @ wd.transpose() + (wb if wb is not None else 0)   # (seq, batch, gates * hidden): every step's input part at once
    outs = []
    for s in range(seq):
      hr = h @ rd.transpose() + (rb if rb is not None else 0)
      xs = xw[s]
      if kind == "RNN": h_new = f[0](cl(xs + hr))
      elif kind == "GRU":
        z = f[0](cl(xs[:, :hidden] + hr[:, :hidden]))
        rg = f[0](cl(xs[:, hidden:2 * hidden] + hr[:, hidden:2 * hidden]))
        if ctx.get("linear_before_reset", 0): cand = xs[:, 2 * hidden:] + rg * hr[:, 2 * hidden:]
        else:
          cand = xs[:, 2 * hidden:] + (rg * h) @ rd[2 * hidden:].transpose() + (rb[2 * hidden:] if rb is not None else 0)
        h_new = (1 - z) * f[1](cl(cand)) + z * h
      else:
        g = xs + hr
        pi, po, pf = (p[d][:hidden], p[d][hidden:2 * hidden], p[d][2 * hidden:]) if p is not None else (0, 0, 0)
        i = f[0](cl(g[:, :hidden] + pi * c))
        fg = 1 - i if ctx.get("input_forget", 0) else f[0](cl(g[:, 2 * hidden:3 * hidden] + pf * c))
        c_new = fg * c + i * f[1](cl(g[:, 3 * hidden:]))
        o = f[0](cl(g[:, hidden:2 * hidden] + po * c_new))
        h_new = o * f[2](c_new)
        c = valid[s].where(c_new, c)
      h = valid[s].where(h_new, h)
      outs.append(valid[s].where(h_new, 0.0))
    y = Tensor.stack(*outs) if seq else Tensor.zeros(0, batch, hidden, dtype=x.dtype, device=ctx.device)
    ys.append(reverse(y) if rev else y)
    hs.append(h); cs.append(c)
  y = Tensor.stack(*ys, dim=1)                       # (seq, dirs, batch, hidden)
  yh, yc = Tensor.stack(*hs), Tensor.stack(*cs)     # (dirs, batch, hidden)
  if layout: y, yh, yc = y.permute(2, 0, 1, 3), yh.transpose(0, 1), yc.transpose(0, 1)
  return (y, yh, yc) if kind == "LSTM" else (y, yh)
@op("RNN")
def _rnn(ctx, x, w, r, b=None, lens=None, h0=None): return _recurrent(ctx, "RNN", x, w, r, b, lens, h0)
@op("GRU")
def _gru(ctx, x, w, r, b=None, lens=None, h0=None): return _recurrent(ctx, "GRU", x, w, r, b, lens, h0)
@op("LSTM")
def _lstm(ctx, x, w, r, b=None, lens=None, h0=None, c0=None, p=None): return _recurrent(ctx, "LSTM", x, w, r, b, lens, h0, c0, p)

@op("NonMaxSuppression")
def _nms(ctx, boxes, scores, max_out=None, iou=None, score_min=None):
  """Greedy per batch and class, on the host (the output's length depends on the values): boxes by score, highest first
  (ties: lower index first), each kept unless its IoU with a kept one exceeds iou_threshold; [batch, class, box] rows."""
  limit = ctx.ints(max_out)[0] if max_out is not None and max_out.numel() else 0
  iou_t = float(iou.item()) if iou is not None and iou.numel() else 0.0
  floor = float(score_min.item()) if score_min is not None and score_min.numel() else None
  center = ctx.get("center_point_box", 0)
  def extent(b) -> tuple[float, float, float, float]:   # (x_min, x_max, y_min, y_max)
    if center: return b[0] - b[2] / 2, b[0] + b[2] / 2, b[1] - b[3] / 2, b[1] + b[3] / 2
    return min(b[1], b[3]), max(b[1], b[3]), min(b[0], b[2]), max(b[0], b[2])
  def overlaps(a, b) -> bool:
    (ax0, ax1, ay0, ay1), (bx0, bx1, by0, by1) = extent(a), extent(b)
    w, h = min(ax1, bx1) - max(ax0, bx0), min(ay1, by1) - max(ay0, by0)
    if w <= 0 or h <= 0: return False
    inter, area_a, area_b = w * h, (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = area_a + area_b - inter
    return area_a > 0 and area_b > 0 and union > 0 and inter / union > iou_t
  all_boxes, all_scores, picked = boxes.tolist(), scores.tolist(), []
  for bi, (bb, cls_scores) in enumerate(zip(all_boxes, all_scores)):
    for ci, sc in enumerate(cls_scores):
      order = sorted((i for i in range(len(sc)) if floor is None or sc[i] > floor), key=lambda i: (-sc[i], i))
      kept: list[int] = []
      for i in order:
        if len(kept) >= limit: break
        if not any(overlaps(bb[i], bb[j]) for j in kept): kept.append(i)
      picked += [[bi, ci, i] for i in kept]
  return Tensor(picked, dtype=_index_dtype(ctx), device=ctx.device).reshape(len(picked), 3)

@op("RotaryEmbedding")
def _rotary(ctx, x, cos, sin, pos=None):
  shape4 = x.ndim == 4
  y = x.transpose(1, 2) if shape4 else x.reshape(x.shape[0], x.shape[1], ctx.get("num_heads"), -1)   # (batch, seq, heads, head)
  dim = ctx.get("rotary_embedding_dim", 0) or y.shape[3]
  rot, keep = y[..., :dim], y[..., dim:]
  if pos is not None:
    p = pos.cast(dtypes.int32)
    cos, sin = cos[p], sin[p]
  cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
  if ctx.get("interleaved", 0): x1, x2 = rot[..., 0::2], rot[..., 1::2]
  else: x1, x2 = rot[..., :dim // 2], rot[..., dim // 2:]
  real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
  rot = real.unsqueeze(-1).cat(imag.unsqueeze(-1), dim=-1).reshape(rot.shape) if ctx.get("interleaved", 0) else real.cat(imag, dim=-1)
  out = rot.cat(keep, dim=-1) if keep.shape[-1] else rot
  return out.transpose(1, 2) if shape4 else out.reshape(x.shape)

def _reflect(v: Tensor, lo: float, hi: float) -> Tensor:
  """v folded back into [lo, hi] by reflecting at its ends, as often as needed."""
  rng = hi - lo
  below, above = v < lo, v > hi
  d = below.where(lo - v, v - hi)
  k = (d / rng).floor()
  rem = d - k * rng
  even = (k - (k / 2).floor() * 2) == 0
  folded = below.where(even.where(lo + rem, hi - rem), even.where(hi - rem, lo + rem))
  return (below | above).where(folded, v)

@op("GridSample")
def _grid_sample(ctx, x, grid):
  """Samples x (N, C, *spatial) at grid's normalized points (N, *out, r; the last dim in x, y, z order): each spatial
  dim's taps (nearest 1, linear 2, cubic 4) with their weights and padding rule, combined over dims as a sum of
  weighted reads."""
  mode = {"bilinear": "linear", "bicubic": "cubic"}.get(ctx.get("mode", "linear"), ctx.get("mode", "linear"))
  pad, align = ctx.get("padding_mode", "zeros"), bool(ctx.get("align_corners", 0))
  n, c, dims = x.shape[0], x.shape[1], x.shape[2:]
  r, out = len(dims), grid.shape[1:-1]
  q = math.prod(out)
  g = grid.reshape(n, q, r).float()
  per_dim = []   # per spatial dim: [(index as float, weight, inside)] for each tap
  for i, size in enumerate(dims):
    v = g[:, :, r - 1 - i]
    xf = (v + 1) / 2 * (size - 1) if align else ((v + 1) * size - 1) / 2
    if mode == "nearest": xf = xf.round()
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    outside = (xf < lo) | (xf > hi)
    if pad == "border": xf = outside.where(xf.clip(0, size - 1), xf)
    elif pad == "reflection": xf = _reflect(xf, lo, hi)
    if mode == "nearest": taps = [(xf, None)]
    else:
      x0 = xf.floor()
      t = xf - x0
      if mode == "linear": taps = [(x0, 1 - t), (x0 + 1, t)]
      else:
        a = -0.75   # (Keys' cubic convolution, as in Resize)
        w = [((a * (t + 1) - 5 * a) * (t + 1) + 8 * a) * (t + 1) - 4 * a, ((a + 2) * t - (a + 3)) * t * t + 1,
             ((a + 2) * (1 - t) - (a + 3)) * (1 - t) * (1 - t) + 1, ((a * (2 - t) - 5 * a) * (2 - t) + 8 * a) * (2 - t) - 4 * a]
        taps = [(x0 - 1, w[0]), (x0, w[1]), (x0 + 1, w[2]), (x0 + 2, w[3])]
    dim_taps = []
    for idx, w in taps:   # each tap's read under the padding rule
      if pad == "zeros": inside, idx = (idx >= 0) & (idx < size), idx.clip(0, size - 1)
      elif pad == "border": inside, idx = None, idx.clip(0, size - 1)
      else: inside, idx = None, _reflect(idx, lo, hi).trunc().clip(0, size - 1)
      dim_taps.append((idx.cast(dtypes.int32), w, inside))
    per_dim.append(dim_taps)
  flat_x = x.reshape(n, c, -1)
  strides = [math.prod(dims[i + 1:]) for i in range(r)]
  total = None
  for combo in itertools.product(*per_dim):
    pos = sum(idx * s for (idx, _, _), s in zip(combo, strides))
    vals = flat_x.gather(2, pos.reshape(n, 1, q).expand(n, c, q))
    weight, inside = None, None
    for _, w, ins in combo:
      if w is not None: weight = w if weight is None else weight * w
      if ins is not None: inside = ins if inside is None else inside & ins
    if inside is not None: vals = inside.reshape(n, 1, q).where(vals, 0)
    term = vals if weight is None else vals * weight.reshape(n, 1, q).cast(vals.dtype)
    total = term if total is None else total + term
  return total.cast(x.dtype).reshape((n, c) + tuple(out))

def _run_body(ctx, body: Graph, bound: list[Tensor]) -> list:
  """One run of a loop's body graph with its inputs bound (in order), in the enclosing scope."""
  scope = dict(ctx.values)
  for vi, v in zip(body.input, bound): scope[vi.name] = v
  return ctx.runner.run_graph(body, scope, f"{ctx.label} > ")

def _stack_along(parts: list[Tensor], axis: int) -> Tensor:
  axis = axis % (parts[0].ndim + 1)
  return Tensor.stack(*parts, dim=axis)

@op("Scan")
def _scan(ctx, *args):
  """Runs the body once per position along each scan input's axis (unrolled when the graph is built), carrying the
  states; the scan outputs are stacked."""
  body, m = ctx.get("body"), ctx.get("num_scan_inputs")
  if ctx.opset < 9: raise ctx.unsupported("Scan before opset 9 (with a batch axis and sequence_lens)")
  n = len(args) - m
  states, xs = list(args[:n]), args[n:]
  in_axes, in_dirs = ctx.get("scan_input_axes", [0] * m), ctx.get("scan_input_directions", [0] * m)
  k = len(body.output) - n
  out_axes, out_dirs = ctx.get("scan_output_axes", [0] * k), ctx.get("scan_output_directions", [0] * k)
  length = xs[0].shape[in_axes[0] % xs[0].ndim]
  collected: list[list[Tensor]] = [[] for _ in range(k)]
  for t in range(length):
    slices = [x[(slice(None),) * (in_axes[j] % x.ndim) + (length - 1 - t if in_dirs[j] else t,)] for j, x in enumerate(xs)]
    outs = _run_body(ctx, body, states + slices)
    states = outs[:n]
    for j in range(k): collected[j].append(outs[n + j])
  return tuple(states + [_stack_along(col[::-1] if out_dirs[j] else col, out_axes[j]) for j, col in enumerate(collected)])

@op("Loop")
def _loop(ctx, trips=None, cond=None, *carried):
  """Runs the body while the condition holds and fewer than M iterations ran (both read as the graph is built)."""
  body = ctx.get("body")
  limit = ctx.ints(trips)[0] if trips is not None else None
  go = bool(cond.item()) if cond is not None else True
  states, collected, i = list(carried), None, 0
  while go and (limit is None or i < limit):
    outs = _run_body(ctx, body, [Tensor(i, dtype=_index_dtype(ctx), device=ctx.device), Tensor(go, device=ctx.device)] + states)
    go, states = bool(outs[0].item()), outs[1:1 + len(carried)]
    scans = outs[1 + len(carried):]
    collected = [[] for _ in scans] if collected is None else collected
    for col, v in zip(collected, scans): col.append(v)
    i += 1
  if collected is None:   # no iteration: empty scan outputs of the body's declared element types
    collected = [[] for _ in body.output[1 + len(carried):]]
  return tuple(states + [Tensor.stack(*col) if col else Tensor.zeros(0, device=ctx.device) for col in collected])

@op("CausalConvWithState")
def _causal_conv(ctx, x, w, b=None, past=None):
  """A depthwise 1-D convolution over the past state (zeros when absent) and x; the last k-1 steps are the new state."""
  k = w.shape[2]
  padded = (past.cat(x, dim=2) if past is not None else x.pad((None, None, (k - 1, 0)))) if k > 1 else x
  y = padded.conv2d(w, b, groups=x.shape[1])
  if ctx.get("activation", "none") in ("silu", "swish"): y = (y.float() * y.float().sigmoid()).cast(x.dtype)
  return y, padded[:, :, padded.shape[2] - (k - 1):] if k > 1 else padded[:, :, :0]

@op("LinearAttention")
def _linear_attention(ctx, q, k, v, past=None, decay=None, beta=None):
  """Linear attention over time with a (d_k, d_v) state per head: decayed (gated), corrected towards v (delta),
  grown by k v^T, read by q; step after step."""
  rule, hq, hkv = ctx.get("update_rule", "gated_delta"), ctx.get("q_num_heads"), ctx.get("kv_num_heads")
  gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
  bsz, t = q.shape[0], q.shape[1]
  def heads(a: Tensor, h: int) -> Tensor: return a.reshape(bsz, t, h, -1).transpose(1, 2).float()   # (B, H, T, D)
  q4, k4, v4 = heads(q, hq), heads(k, hkv), heads(v, hkv)
  dk, dv = q4.shape[-1], v4.shape[-1]
  if gating:
    dec = decay.reshape(bsz, t, hkv, 1).transpose(1, 2) if decay.shape[-1] == hkv else heads(decay, hkv)
    dec = dec.float()
  if delta: bet = beta.reshape(bsz, t, beta.shape[-1], 1).transpose(1, 2).float()
  state = past.float() if past is not None else Tensor.zeros(bsz, hkv, dk, dv, device=ctx.device)
  scale = ctx.get("scale", 0.0) or 1 / math.sqrt(dk)
  outs = []
  for i in range(t):
    kt, vt = k4[:, :, i, :], v4[:, :, i, :]
    if gating: state = state * dec[:, :, i, :].exp().unsqueeze(-1)
    if delta: vt = bet[:, :, i, :] * (vt - (state * kt.unsqueeze(-1)).sum(2))
    state = state + kt.unsqueeze(-1) * vt.unsqueeze(-2)
    read = state.repeat_interleave(hq // hkv, 1) if hq != hkv else state
    outs.append((q4[:, :, i, :].unsqueeze(-1) * read).sum(2) * scale)
  out = Tensor.stack(*outs, dim=2).transpose(1, 2).reshape(bsz, t, hq * dv)
  return out.cast(q.dtype), state.cast(past.dtype if past is not None else q.dtype)

@op("AffineGrid")
def _affine_grid(ctx, theta, size):
  """Normalized sampling points (N, *spatial, r) of theta applied to the output grid's own points (x, y[, z], 1)."""
  dims = ctx.ints(size)[2:]
  align = bool(ctx.get("align_corners", 0))
  def axis_points(n: int) -> list[float]:
    return [-1 + 2 * i / (n - 1) for i in range(n)] if align and n > 1 else [-1 + (2 * i + 1) / n for i in range(n)]
  pts = [list(reversed(p)) + [1.0] for p in itertools.product(*[axis_points(n) for n in dims])]   # (x, y[, z], 1) per point
  base = Tensor(pts, dtype=theta.dtype, device=ctx.device)   # (P, r + 1)
  return (base @ theta.transpose(1, 2)).reshape((theta.shape[0],) + tuple(dims) + (len(dims),))

@op("Col2Im")
def _col2im(ctx, x, image_shape, block_shape):
  """Sums the columns' blocks back into images: a (blocks x pixels) 0/1 matrix built on the host, applied by matmul."""
  image, block = ctx.ints(image_shape), ctx.ints(block_shape)
  r = len(image)
  dil, strides, pads = ctx.get("dilations", [1] * r), ctx.get("strides", [1] * r), ctx.get("pads", [0] * (2 * r))
  counts = [(image[i] + pads[i] + pads[r + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(r)]
  n, ck, L = x.shape
  K, P = math.prod(block), math.prod(image)
  rows = []
  for kpos in itertools.product(*[range(b) for b in block]):
    for lpos in itertools.product(*[range(c) for c in counts]):
      pix = [lpos[i] * strides[i] + kpos[i] * dil[i] - pads[i] for i in range(r)]
      rows.append(sum(p * math.prod(image[i + 1:]) for i, p in enumerate(pix)) if all(0 <= p < image[i] for i, p in enumerate(pix)) else -1)
  m = Tensor(rows, dtype=dtypes.int32, device=ctx.device).reshape(K * L, 1) == Tensor.arange(P, device=ctx.device).reshape(1, P)
  return (x.reshape(n, ck // K, K * L) @ m.cast(x.dtype)).reshape((n, ck // K) + tuple(image))

@op("Det")
def _det(ctx, x):
  """Determinants by Gaussian elimination with partial pivoting on the host (float64), per matrix."""
  def det(a: list) -> float:
    a, n, sign = [list(map(float, row)) for row in a], len(a), 1.0
    for col in range(n):
      piv = max(range(col, n), key=lambda i: abs(a[i][col]))
      if a[piv][col] == 0: return 0.0
      if piv != col: a[col], a[piv], sign = a[piv], a[col], -sign
      for i in range(col + 1, n):
        f = a[i][col] / a[col][col]
        a[i] = [a[i][j] - f * a[col][j] for j in range(n)]
    return sign * math.prod(a[i][i] for i in range(n))
  mats = x.reshape(-1, *x.shape[-2:]).tolist()
  return Tensor([det(m) for m in mats], dtype=x.dtype, device=ctx.device).reshape(x.shape[:-2])

@op("MaxUnpool")
def _max_unpool(ctx, x, idx, out_shape=None):
  """x's values written at idx (positions in the flattened output) of a zero tensor of the pooled input's shape."""
  kernel = ctx.get("kernel_shape")
  r = len(kernel)
  strides, pads = ctx.get("strides", [1] * r), ctx.get("pads", [0] * (2 * r))
  shape = ctx.ints(out_shape) if out_shape is not None else \
    list(x.shape[:2]) + [(x.shape[2 + i] - 1) * strides[i] - pads[i] - pads[r + i] + kernel[i] for i in range(r)]
  flat = Tensor.zeros(math.prod(shape), dtype=x.dtype, device=ctx.device)
  return flat.scatter(0, idx.flatten().cast(dtypes.int32), x.flatten()).reshape(shape)

# sequences (Python lists of tensors) and optionals (a value or None)
@op("SequenceConstruct")
def _seq_construct(ctx, *xs): return list(xs)
@op("SequenceEmpty")
def _seq_empty(ctx): return []
def _seq_pos(ctx, seq: list, pos: Optional[Tensor], default: int) -> int:
  p = ctx.ints(pos)[0] if pos is not None else default
  if not -len(seq) <= p < len(seq) + (default == len(seq)): raise ctx.unsupported(f"position {p} outside a sequence of {len(seq)}")
  return p + len(seq) if p < 0 else p
@op("SequenceAt")
def _seq_at(ctx, seq, pos): return seq[_seq_pos(ctx, seq, pos, 0)]
@op("SequenceInsert")
def _seq_insert(ctx, seq, x, pos=None):
  p = _seq_pos(ctx, seq, pos, len(seq))
  return seq[:p] + [x] + seq[p:]
@op("SequenceErase")
def _seq_erase(ctx, seq, pos=None):
  p = _seq_pos(ctx, seq, pos, len(seq) - 1)
  return seq[:p] + seq[p + 1:]
@op("SequenceLength")
def _seq_length(ctx, seq): return Tensor(len(seq), dtype=_index_dtype(ctx), device=ctx.device)
@op("ConcatFromSequence")
def _concat_from_seq(ctx, seq):
  axis = ctx.get("axis")
  if ctx.get("new_axis", 0): return Tensor.stack(*seq, dim=axis if axis >= 0 else axis + seq[0].ndim + 1)
  return seq[0].cat(*seq[1:], dim=axis)
@op("SplitToSequence")
def _split_to_seq(ctx, x, split=None):
  axis = _axis(ctx, x)
  if split is None:
    parts = list(x.split(1, axis))
    return [p.squeeze(axis) for p in parts] if ctx.get("keepdims", 1) == 0 else parts
  sizes = ctx.ints(split)
  if split.ndim == 0: sizes = [sizes[0]] * (x.shape[axis] // sizes[0]) + ([x.shape[axis] % sizes[0]] if x.shape[axis] % sizes[0] else [])
  return list(x.split(sizes, axis))
@op("SequenceMap")
def _seq_map(ctx, seq, *others):
  body = ctx.get("body")
  outs = [_run_body(ctx, body, [x] + [o[i] if isinstance(o, list) else o for o in others]) for i, x in enumerate(seq)]
  return tuple([o[j] for o in outs] for j in range(len(body.output)))
@op("Optional")
def _optional(ctx, x=None): return x
@op("OptionalHasElement")
def _optional_has(ctx, x=None): return Tensor(x is not None, device=ctx.device)
@op("OptionalGetElement")
def _optional_get(ctx, x):
  if x is None: raise ctx.unsupported("OptionalGetElement of an empty optional")
  return x
