"""numpy and torch for tests that run inside the page (test_browser_suite.py runs tests/ in Pyodide, which has neither).

In the page, `import numpy` / `import torch` (and their submodules) give proxies: every attribute, call and operator on
them is sent to the test process (through a function Playwright exposes to the page, awaited with Pyodide's JSPI
`run_sync`), runs there on the real objects, and comes back by value (None, bool, int, float, str, bytes, and tuples,
lists, dicts of values) or as a proxy of the object, which stays in the test process. So the tests' references are
computed by the real numpy and torch and only tinyweb runs in the page. A proxy's type has the module and name of its
object's type (tinyweb recognizes numpy arrays by `type(x).__module__`), `isinstance(x, np.ndarray)` works, and an
exception raised there is raised again in the page (builtin types as themselves, others as `RemoteError`).
The objects a test created stay alive in the test process until the page closes.

This file holds both halves: `Server` runs in the test process, `install` in the page (with only the standard library)."""
from __future__ import annotations
import base64, builtins, contextvars, importlib, json, operator, sys

# ---------------------------------------------------------------------------------------------------------------
# the wire format (both sides): JSON; scalars as themselves, everything else tagged; objects that stay on the other
# side are {"ref": id} (from the test process also with their type's module and name)

SCALARS = (type(None), bool, int, float, str)

def encode(v, ref):
  if type(v) in SCALARS: return v   # (exact types: numpy's float64 subclasses float but stays an object)
  if type(v) in (tuple, list): return {type(v).__name__: [encode(x, ref) for x in v]}
  if type(v) is dict: return {"dict": [[encode(k, ref), encode(x, ref)] for k, x in v.items()]}
  if type(v) in (bytes, bytearray, memoryview): return {"bytes": base64.b64encode(v).decode()}   # (all arrive as bytes)
  if type(v) is slice: return {"slice": [encode(x, ref) for x in (v.start, v.stop, v.step)]}
  if v is Ellipsis: return {"ellipsis": None}
  return ref(v)

def decode(v, deref):
  if not isinstance(v, dict): return v
  (tag, x), = v.items() if len(v) == 1 else [("ref", v)]
  if tag == "tuple": return tuple(decode(y, deref) for y in x)
  if tag == "list": return [decode(y, deref) for y in x]
  if tag == "dict": return {decode(k, deref): decode(y, deref) for k, y in x}
  if tag == "bytes": return base64.b64decode(x)
  if tag == "slice": return slice(*(decode(y, deref) for y in x))
  if tag == "ellipsis": return Ellipsis
  return deref(v)

# what a proxy's special methods do in the test process: operator's functions and a few builtins
OPS = {name: getattr(operator, name) for name in [
  "add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift", "and_", "or_", "xor",
  "iadd", "isub", "imul", "imatmul", "itruediv", "ifloordiv", "imod", "ipow", "ilshift", "irshift", "iand", "ior", "ixor",
  "lt", "le", "eq", "ne", "gt", "ge", "neg", "pos", "abs", "invert", "index", "getitem", "setitem", "delitem", "contains"]}
OPS.update(len=len, bool=bool, float=float, int=int, hash=hash, repr=repr, str=str, format=format, iter=list,
           isinstance=isinstance, issubclass=issubclass)

# ---------------------------------------------------------------------------------------------------------------
# the test process

class Server:
  """Answers the page's requests (a JSON string in, a JSON string out); `modules` are the top-level names it may import."""
  def __init__(self, modules: tuple[str, ...]):
    # every request runs in one context (Playwright calls each in its own): numpy's errstate sets a ContextVar on
    # __enter__ and resets it on __exit__, two requests
    self.modules, self.objects, self.context = modules, {}, contextvars.Context()

  def __call__(self, message: str) -> str:
    try: return json.dumps({"value": encode(self.context.run(self.run, **json.loads(message)), self.ref)})
    except Exception as e: return json.dumps({"error": [type(e).__module__, type(e).__name__, str(e)]})

  def ref(self, obj) -> dict:
    self.objects[id(obj)] = obj   # (kept alive, so the id stays this object's)
    return {"ref": id(obj), "module": type(obj).__module__, "type": type(obj).__name__}

  def run(self, op: str, args: list):
    args = [decode(a, lambda r: self.objects[r["ref"]]) for a in args]
    if op == "import":
      if args[0].split(".")[0] not in self.modules: raise ModuleNotFoundError(f"the page may import only {self.modules}, not {args[0]}")
      return importlib.import_module(args[0])
    if op == "getattr": return getattr(*args)
    if op == "setattr": return setattr(*args)
    if op == "call": return args[0](*args[1], **args[2])
    return OPS[op](*args)

# ---------------------------------------------------------------------------------------------------------------
# the page

class RemoteError(Exception):
  """An exception of a type the page does not have, raised in the test process (its message names the type)."""

class Unsendable(TypeError):
  """A value that can go to the test process neither by value nor as a proxy (e.g. a tinyweb Tensor)."""

def remote_error(module: str, name: str, msg: str) -> Exception:
  cls = getattr(builtins, name, None) if module == "builtins" else None
  if isinstance(cls, type) and issubclass(cls, Exception):
    try: return cls(msg)
    except TypeError: pass   # (a constructor with other arguments, e.g. UnicodeDecodeError's)
  return RemoteError(f"{module}.{name}: {msg}")

def install(send, modules: tuple[str, ...]):
  """Make `modules` (and their submodules) importable in this interpreter as proxies; send(json) -> json is the link."""
  import importlib.abc, importlib.util, types
  proxies: dict[int, object] = {}   # one proxy per object: `is` works
  classes: dict[tuple[str, str], type] = {}

  def ref(v):
    if not isinstance(v, (Proxy, ModuleProxy)): raise Unsendable(f"a {type(v).__name__} cannot be sent to the test process")
    return {"ref": object.__getattribute__(v, "_id")}

  def deref(r):
    if r["ref"] not in proxies:
      key = (r["module"], r["type"])
      if key not in classes: classes[key] = type(r["type"], (Proxy,), {"__module__": r["module"], "__slots__": ()})
      p = object.__new__(classes[key])
      object.__setattr__(p, "_id", r["ref"])
      proxies[r["ref"]] = p
    return proxies[r["ref"]]

  def rpc(op, *args):
    __tracebackhide__ = True   # (pytest shows the test's line, not these)
    reply = json.loads(send(json.dumps({"op": op, "args": [encode(a, ref) for a in args]})))
    if "error" in reply: raise remote_error(*reply["error"])
    return decode(reply["value"], deref)

  class Proxy:
    __slots__ = ("_id",)
    def __getattr__(self, name):
      __tracebackhide__ = True
      return rpc("getattr", self, name)
    def __setattr__(self, name, value): rpc("setattr", self, name, value)
    def __call__(self, *args, **kwargs):
      __tracebackhide__ = True
      return rpc("call", self, args, kwargs)
    def __iter__(self): return iter(rpc("iter", self))
    def __format__(self, spec): return rpc("format", self, spec)
    def __instancecheck__(self, obj): return isinstance(obj, Proxy) and rpc("isinstance", obj, self)
    def __subclasscheck__(self, cls): return isinstance(cls, Proxy) and rpc("issubclass", cls, self)
    def __enter__(self): return rpc("getattr", self, "__enter__")()
    # (the exception, if any, stays in the page: torch's no_grad and numpy's errstate do not look at it)
    def __exit__(self, *exc): return rpc("getattr", self, "__exit__")(None, None, None)

  def binary(op, reflected=False):
    def method(self, other):
      __tracebackhide__ = True
      try: return rpc(op, other, self) if reflected else rpc(op, self, other)
      except Unsendable: return NotImplemented   # e.g. a tinyweb Tensor: its own (reflected) method runs next
    return method
  for op in ["add", "sub", "mul", "matmul", "truediv", "floordiv", "mod", "pow", "lshift", "rshift", "and_", "or_", "xor"]:
    name = op.rstrip("_")
    setattr(Proxy, f"__{name}__", binary(op))
    setattr(Proxy, f"__r{name}__", binary(op, reflected=True))
    setattr(Proxy, f"__i{name}__", binary(f"i{name}"))
  for op in ["lt", "le", "eq", "ne", "gt", "ge"]: setattr(Proxy, f"__{op}__", binary(op))
  for op in ["neg", "pos", "abs", "invert", "index", "len", "bool", "float", "int", "hash", "repr", "str"]:
    setattr(Proxy, f"__{op}__", lambda self, op=op: rpc(op, self))
  Proxy.__getitem__ = lambda self, key: rpc("getitem", self, key)
  Proxy.__setitem__ = lambda self, key, value: rpc("setitem", self, key, value)
  Proxy.__delitem__ = lambda self, key: rpc("delitem", self, key)
  Proxy.__contains__ = lambda self, item: rpc("contains", self, item)

  class ModuleProxy(types.ModuleType):
    def __getattr__(self, name):
      if name.startswith("__"): raise AttributeError(name)   # (the import machinery probes __path__, __file__, ...)
      return rpc("getattr", self, name)

  class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
      return importlib.util.spec_from_loader(name, self, is_package=True) if name.split(".")[0] in modules else None
    def create_module(self, spec):
      r = rpc("import", spec.name)   # (a proxy first: raises here when the test process has no such module)
      m = ModuleProxy(spec.name)
      m._id = object.__getattribute__(r, "_id")
      proxies[m._id] = m
      return m
    def exec_module(self, module): pass

  sys.meta_path.insert(0, Finder())
