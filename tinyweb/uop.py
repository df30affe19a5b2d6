"""The IR: immutable, hash-consed UOps, and the pattern matcher that every compiler pass is written in.

One UOp type serves two levels:
- the tensor graph (what `Tensor` ops build): BUFFER/CONST/ARANGE leaves, ALU ops, REDUCE_AXIS, movement ops
  (RESHAPE, PERMUTE, EXPAND, PAD, SHRINK, FLIP), CONTIGUOUS, COPY, ASSIGN, DETACH. These have a `shape`.
- the kernel program (what the code generator builds): DEFINE_GLOBAL, RANGE, LOAD, STORE, REDUCE, ACC ops, ALU ops
  over scalar index and value expressions.
"""
from __future__ import annotations
import math, weakref, itertools, functools, sys
from enum import Enum, auto
from typing import Any, Callable, Optional
from tinyweb.dtype import DType, dtypes, cast_scalar
from tinyweb.helpers import prod, fork_safe_lock

class Ops(Enum):
  __hash__ = object.__hash__   # members are singletons; Enum's own __hash__ is Python code and ops are hashed constantly
  # tensor-graph leaves
  DEVICE = auto(); BUFFER = auto(); CONST = auto(); ARANGE = auto()
  # unary ALU
  NEG = auto(); EXP2 = auto(); LOG2 = auto(); SIN = auto(); COS = auto(); SQRT = auto(); RECIP = auto(); TRUNC = auto()
  # binary ALU
  ADD = auto(); MUL = auto(); FDIV = auto(); IDIV = auto(); MOD = auto(); MAX = auto(); MIN = auto()
  CMPLT = auto(); CMPNE = auto(); CMPEQ = auto(); AND = auto(); OR = auto(); XOR = auto(); SHL = auto(); SHR = auto()
  # ternary ALU
  WHERE = auto()
  CAST = auto(); BITCAST = auto()
  # tensor-graph reductions and movement
  REDUCE_AXIS = auto()
  RESHAPE = auto(); PERMUTE = auto(); EXPAND = auto(); PAD = auto(); SHRINK = auto(); FLIP = auto()
  CONTIGUOUS = auto(); COPY = auto(); ASSIGN = auto(); DETACH = auto()
  CUSTOM_GRAD = auto()   # src = (value, *inputs), arg = backward(grad, *inputs) -> a gradient (or None) per input
  # kernel program
  SINK = auto(); DEFINE_GLOBAL = auto(); RANGE = auto(); ENDRANGE = auto(); SPECIAL = auto()
  LOAD = auto(); STORE = auto(); REDUCE = auto(); DEFINE_ACC = auto(); ACC_UPDATE = auto()
  INDEX = auto()   # lowering: src = (AST node, gate, *index): the node's value at that index
  DEFINE_LOCAL = auto()   # GPU workgroup memory: arg = (name, elements); LOAD/STORE take it as their buffer
  BARRIER = auto()        # GPU: the threads of a workgroup wait for each other (workgroup-memory writes become visible)
  # one warp's tensor-core product (codegen/tensor_cores.py): src = the lane's A and B registers, arg = (input dtype, j):
  # element j of the lane's part of A @ B
  WMMA = auto()

UNARY = {Ops.NEG, Ops.EXP2, Ops.LOG2, Ops.SIN, Ops.COS, Ops.SQRT, Ops.RECIP, Ops.TRUNC}
BINARY = {Ops.ADD, Ops.MUL, Ops.FDIV, Ops.IDIV, Ops.MOD, Ops.MAX, Ops.MIN, Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ,
          Ops.AND, Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR}
ALU = UNARY | BINARY | {Ops.WHERE}
ELEMENTWISE = ALU | {Ops.CAST, Ops.BITCAST}
MOVEMENT = {Ops.RESHAPE, Ops.PERMUTE, Ops.EXPAND, Ops.PAD, Ops.SHRINK, Ops.FLIP}
COMMUTATIVE = {Ops.ADD, Ops.MUL, Ops.MAX, Ops.MIN, Ops.CMPNE, Ops.CMPEQ, Ops.AND, Ops.OR, Ops.XOR}
COMPARISON = {Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ}

def const_key(x):
  """A constant's key where Python's equality is not enough: -0.0 and 0.0 stay apart, and every NaN is one key (NaN != NaN
  would make each lookup of a NaN miss)."""
  return (None if x != x else x, math.copysign(1.0, x)) if isinstance(x, float) else x

_UNKNOWN = object()   # UOp._device not computed yet (None is a result: a graph without a device)

class UOpMeta(type):
  # key -> weak reference to the UOp; a plain dict of weakrefs (not a WeakValueDictionary): UOp() is the hottest call of
  # the compiler and WeakValueDictionary's get and set are Python code
  table: dict[tuple, weakref.ref] = {}
  def __call__(cls, op: Ops, dtype: Optional[DType] = None, src: tuple = (), arg: Any = None):
    key = (op, dtype, src, const_key(arg) if op is Ops.CONST else arg)
    try:
      if (ref := UOpMeta.table.get(key)) is not None and (ret := ref()) is not None: return ret
    except TypeError: return super().__call__(op, dtype, src, arg)   # unhashable arg: not interned
    ret = super().__call__(op, dtype, src, arg)
    ref = weakref.ref(ret, functools.partial(_forget, key))
    # a key must stay one object, also when threads make it at once: setdefault hashes the key (Python code, where a
    # thread may switch) and then finds or adds the entry in one step; an entry is replaced or dropped only under the lock
    if (old := UOpMeta.table.setdefault(key, ref)) is not ref:
      with _TABLE_LOCK:
        if (old := UOpMeta.table.get(key, ref)) is not ref and (other := old()) is not None: return other
        UOpMeta.table[key] = ref   # (the entry was dead: its _forget has not run yet)
    return ret

_TABLE_LOCK = fork_safe_lock()
def _forget(key, ref):   # a UOp died: drop its entry unless a newer UOp with the same key replaced it
  with _TABLE_LOCK:
    if UOpMeta.table.get(key) is ref: del UOpMeta.table[key]

class UOp(metaclass=UOpMeta):
  """An immutable IR node. Two UOps built from the same op, dtype, sources and arg are the same object."""
  __slots__ = ("op", "dtype", "src", "arg", "_shape", "_bounds", "_sum", "_device", "__weakref__")
  def __init__(self, op: Ops, dtype: Optional[DType] = None, src: tuple = (), arg: Any = None):
    self.op, self.dtype, self.src, self.arg = op, dtype, tuple(src), arg
    self._shape, self._bounds, self._device = None, None, _UNKNOWN
    self._sum = None   # symbolic.simplify_sum's memo: the terms of an int ADD that is already a canonical sum
  def __reduce__(self): return UOp, (self.op, self.dtype, self.src, self.arg)
  def replace(self, **kw) -> UOp:
    return UOp(kw.get("op", self.op), kw.get("dtype", self.dtype), kw.get("src", self.src), kw.get("arg", self.arg))

  # ---- construction helpers ----
  @staticmethod
  def const(dtype: DType, value: Any) -> UOp:
    if type(value) is int and dtype is dtypes.int32 and -0x80000000 <= value <= 0x7fffffff:   # index math: already exact
      return UOp(Ops.CONST, dtype, (), value)
    return UOp(Ops.CONST, dtype, (), cast_scalar(value, dtype))
  def alu(self, op: Ops, *srcs: UOp) -> UOp:
    out = dtypes.bool if op in COMPARISON else (srcs[-1].dtype if op is Ops.WHERE else self.dtype)
    return UOp(op, out, (self,) + srcs)
  def _c(self, x) -> UOp: return x if isinstance(x, UOp) else UOp.const(self.dtype, x)
  def __add__(self, x): return self.alu(Ops.ADD, self._c(x))
  def __radd__(self, x): return self._c(x).alu(Ops.ADD, self)
  def __mul__(self, x): return self.alu(Ops.MUL, self._c(x))
  def __rmul__(self, x): return self._c(x).alu(Ops.MUL, self)
  def __sub__(self, x): return self.alu(Ops.ADD, self._c(x).alu(Ops.NEG))
  def __rsub__(self, x): return self._c(x).alu(Ops.ADD, self.alu(Ops.NEG))
  def __neg__(self): return self.alu(Ops.NEG)
  def __floordiv__(self, x): return self.alu(Ops.IDIV, self._c(x))
  def __mod__(self, x): return self.alu(Ops.MOD, self._c(x))
  def __lt__(self, x): return self.alu(Ops.CMPLT, self._c(x))
  def __ge__(self, x): return (self < x).alu(Ops.CMPNE, UOp.const(dtypes.bool, True))
  def logical_and(self, x: UOp) -> UOp: return self.alu(Ops.AND, x)
  def where(self, a, b) -> UOp:
    a = a if isinstance(a, UOp) else UOp.const(b.dtype, a)
    return self.alu(Ops.WHERE, a, b if isinstance(b, UOp) else UOp.const(a.dtype, b))
  def clamp(self, lo: int, hi: int) -> UOp:
    """min(max(self, lo), hi): for index expressions that are known to lie in [lo, hi] where they are used; the
    clamp makes that range visible to the simplifier (and is a no-op at run time)."""
    return self.alu(Ops.MAX, self._c(lo)).alu(Ops.MIN, self._c(hi))
  def cast(self, dtype: DType) -> UOp: return self if dtype == self.dtype else UOp(Ops.CAST, dtype, (self,))

  # ---- graph utilities ----
  def toposort(self) -> list[UOp]:
    """All UOps this one depends on (itself last), each after its sources. Iterative: graphs can be deep."""
    out, seen, stack = [], {self}, [(self, iter(self.src))]   # (a node, its sources not yet visited)
    while stack:
      u, srcs = stack[-1]
      for s in srcs:
        if s not in seen:
          seen.add(s)
          stack.append((s, iter(s.src)))
          break
      else:   # all its sources are out: it goes next
        stack.pop()
        out.append(u)
    return out

  @property
  def device(self) -> Optional[str]:
    """The device of a tensor-graph node: found by walking down to a DEVICE, BUFFER or COPY (which moves data); kept
    (every op of a tensor expression asks its sources)."""
    if self._device is not _UNKNOWN: return self._device
    stack, seen, dev = [self], set(), None
    while stack and dev is None:
      u = stack.pop()
      if u._device is not _UNKNOWN: dev = u._device
      elif u.op is Ops.DEVICE: dev = u.arg
      elif u.op is Ops.BUFFER: dev = u.arg[0].device
      elif u.op is Ops.COPY: dev = u.arg
      elif u not in seen:
        seen.add(u)
        stack.extend(reversed(u.src))
    self._device = dev
    return dev

  @property
  def base(self) -> UOp:
    """The first non-movement UOp under a chain of movement ops (DETACH is looked through too)."""
    u = self
    while u.op in MOVEMENT or u.op is Ops.DETACH: u = u.src[0]
    return u

  @property
  def shape(self) -> tuple[int, ...]:
    if self._shape is None: self._shape = self._compute_shape()
    return self._shape
  def _compute_shape(self) -> tuple[int, ...]:
    op, a = self.op, self.arg
    if op is Ops.BUFFER: return (a[0].size,)
    if op is Ops.DEFINE_GLOBAL: return (a[1],)
    if op in (Ops.CONST, Ops.DEVICE): return ()
    if op is Ops.ARANGE: return (a,)
    if op in (Ops.RESHAPE, Ops.EXPAND): return tuple(a)
    s = self.src[0].shape if self.src else ()
    if op is Ops.PERMUTE: return tuple(s[i] for i in a)
    if op is Ops.PAD: return tuple(n + b + e for n, (b, e) in zip(s, a))
    if op is Ops.SHRINK: return tuple(e - b for b, e in a)
    if op is Ops.REDUCE_AXIS: return tuple(1 if i in a[1] else n for i, n in enumerate(s))
    if op in (Ops.ASSIGN, Ops.CUSTOM_GRAD): return self.src[0].shape
    if op is Ops.WHERE: return self.src[1].shape
    return s
  @property
  def size(self) -> int: return prod(self.shape)

  # ---- value bounds, used by the index simplifier ----
  @property
  def vmin(self): return self.bounds[0]
  @property
  def vmax(self): return self.bounds[1]
  @property
  def bounds(self) -> tuple:
    if self._bounds is None: self._bounds = self._compute_bounds()
    return self._bounds
  def _compute_bounds(self) -> tuple:
    dt = self.dtype
    if dt is None or not (dt.is_int or dt.is_bool): return (-math.inf, math.inf)
    full = (dt.min, dt.max)
    if self.op is Ops.CONST: return (self.arg, self.arg)
    if self.op in (Ops.RANGE, Ops.SPECIAL): return (0, self.src[0].arg - 1) if self.src[0].op is Ops.CONST else (0, dt.max)
    if not self.src: return full
    b = [s.bounds for s in self.src]
    def clamp(lo, hi): return (lo, hi) if lo >= dt.min and hi <= dt.max else full
    if self.op is Ops.ADD: return clamp(b[0][0] + b[1][0], b[0][1] + b[1][1])
    if self.op is Ops.NEG: return clamp(-b[0][1], -b[0][0])
    if self.op is Ops.MUL:
      vals = [x * y for x in b[0] for y in b[1]]
      return clamp(min(vals), max(vals)) if all(math.isfinite(v) for v in vals) else full
    if self.op is Ops.IDIV and self.src[1].op is Ops.CONST and self.src[1].arg > 0:
      c = self.src[1].arg
      return (int(b[0][0] / c), int(b[0][1] / c))   # C division truncates toward zero
    if self.op is Ops.MOD and self.src[1].op is Ops.CONST and self.src[1].arg > 0:
      c = self.src[1].arg
      if b[0][0] >= 0: return (0, min(c - 1, b[0][1])) if b[0][1] >= c else b[0]
      return (-(c - 1), c - 1)
    if self.op is Ops.MAX: return (max(b[0][0], b[1][0]), max(b[0][1], b[1][1]))
    if self.op is Ops.MIN: return (min(b[0][0], b[1][0]), min(b[0][1], b[1][1]))
    if self.op is Ops.WHERE: return (min(b[1][0], b[2][0]), max(b[1][1], b[2][1]))
    if self.op is Ops.CMPLT:
      if b[0][1] < b[1][0]: return (True, True)
      if b[0][0] >= b[1][1]: return (False, False)
      return (False, True)
    if self.op is Ops.CAST and (self.src[0].dtype.is_int or self.src[0].dtype.is_bool):
      lo, hi = int(b[0][0]), int(b[0][1])
      return (lo, hi) if dt.min <= lo and hi <= dt.max else full
    if self.op is Ops.AND and dt.is_bool: return (b[0][0] and b[1][0], b[0][1] and b[1][1])
    return full

  # ---- printing: a numbered listing, one line per node, like a jaxpr ----
  def __repr__(self) -> str:
    if self.op is Ops.CONST: return f"UOp(CONST, {self.dtype}, {self.arg!r})"
    return f"UOp({self.op.name}, {self.dtype}, arg={_fmt_arg(self)}, src=#{len(self.src)})"
  def __str__(self) -> str: return listing(self.toposort())

def listing(uops: list[UOp], names: Optional[dict[UOp, str]] = None) -> str:
  """`uops` (a graph's toposort, or a linearized program) one line each, `%n = OP sources arg : dtype shape`. `names`
  (uop -> its %n) may be shared between listings: a uop keeps its name in each (VIZ lists a kernel after each pass so)."""
  names = {} if names is None else names
  lines = []
  for u in uops:
    if u.op is Ops.DEVICE: continue
    if u not in names: names[u] = f"%{len(names)}"
    srcs = " ".join(names.get(s, "") for s in u.src if s.op is not Ops.DEVICE)
    arg = _fmt_arg(u)
    shape = f" {u.shape}" if u.op not in _PROGRAM_OPS and u.dtype is not None else ""
    dt = u.dtype.name if u.dtype is not None else ""
    lines.append(f"{names[u]:>5} = {u.op.name:<12} {srcs:<14} {arg:<24} : {dt}{shape}".rstrip())
  return "\n".join(lines)

_PROGRAM_OPS = {Ops.SINK, Ops.INDEX, Ops.DEFINE_GLOBAL, Ops.RANGE, Ops.ENDRANGE, Ops.SPECIAL, Ops.LOAD, Ops.STORE, Ops.REDUCE,
                Ops.DEFINE_ACC, Ops.ACC_UPDATE, Ops.DEFINE_LOCAL, Ops.BARRIER, Ops.WMMA}

def _fmt_arg(u: UOp) -> str:
  if u.op is Ops.BUFFER: return f"{u.arg[0].device} #{u.arg[1]}"
  if u.op is Ops.REDUCE_AXIS: return f"{u.arg[0].name} axis={u.arg[1]}"
  if u.op is Ops.REDUCE: return u.arg.name
  if u.arg is None: return ""
  return repr(u.arg)

# ---------------------------------------------------------------------------------------------------------------
# Pattern matching: a UPat describes a subgraph; a PatternMatcher is a list of (UPat, rewrite function) rules.

class UPat:
  """Match a UOp by op(s), dtype(s), sources and arg; `name` binds the matched UOp for the rewrite function.
  src=None matches any sources; `commutative=True` also tries the two sources of a binary op swapped."""
  __slots__ = ("ops", "dtypes", "src", "arg", "name", "commutative", "predicate")
  def __init__(self, op=None, dtype=None, src=None, arg=None, name=None, commutative=False, predicate=None):
    self.ops = None if op is None else (frozenset(op) if isinstance(op, (set, frozenset, tuple, list)) else frozenset([op]))
    self.dtypes = None if dtype is None else (frozenset(dtype) if isinstance(dtype, (set, frozenset, tuple, list)) else frozenset([dtype]))
    self.src, self.arg, self.name, self.commutative, self.predicate = src, arg, name, commutative, predicate
  @staticmethod
  def var(name=None, dtype=None) -> UPat: return UPat(name=name, dtype=dtype)
  @staticmethod
  def cvar(name=None, dtype=None) -> UPat: return UPat(Ops.CONST, dtype=dtype, name=name)
  def match(self, u: UOp, binds: dict) -> bool:
    if self.ops is not None and u.op not in self.ops: return False
    if self.dtypes is not None and u.dtype not in self.dtypes: return False
    if self.arg is not None and u.arg != self.arg: return False
    if self.predicate is not None and not self.predicate(u): return False
    if self.name is not None:
      if self.name in binds: return binds[self.name] is u
      binds[self.name] = u
    if self.src is None: return True
    if len(self.src) != len(u.src): return False
    # one order: bind into `binds` directly (a failed match's partial binds are dropped by whoever made the dict)
    if not (self.commutative and len(u.src) == 2): return all(p.match(s, binds) for p, s in zip(self.src, u.src))
    for srcs in (u.src, u.src[::-1]):
      trial = dict(binds)
      if all(p.match(s, trial) for p, s in zip(self.src, srcs)):
        binds.clear(); binds.update(trial)
        return True
    return False

class PatternMatcher:
  instances: weakref.WeakSet = weakref.WeakSet()   # (their memos are caches: tinyweb/caches.py)
  def __init__(self, rules: list[tuple[UPat, Callable]]):
    self.rules = rules
    PatternMatcher.instances.add(self)
    self.memo: dict[UOp, UOp] = {}   # graph_rewrite's results without a ctx
    self.by_op: dict[Ops, list] = {}
    for pat, fn in rules:
      for op in (pat.ops if pat.ops is not None else Ops):
        self.by_op.setdefault(op, []).append((pat, fn))
  def __add__(self, other: PatternMatcher) -> PatternMatcher: return PatternMatcher(self.rules + other.rules)
  def rewrite(self, u: UOp, ctx=None) -> Optional[UOp]:
    for pat, fn in self.by_op.get(u.op, ()):
      binds: dict = {}
      if pat.match(u, binds):
        binds.pop("ctx", None)
        ret = fn(ctx, **binds) if ctx is not None else fn(**binds)
        if ret is not None and ret is not u: return ret
    return None

REWRITE_MEMO_LIMIT = 1 << 16   # entries of a PatternMatcher's memo before it is cleared

def graph_rewrite(root: UOp, pm: PatternMatcher, ctx=None) -> UOp:
  """Rewrite bottom-up until no rule matches anywhere. Every source is rewritten before its user. Without a ctx a node's
  result depends on the node alone (UOps are immutable and hash-consed), so results are kept across calls in
  `pm.memo` (the index arithmetic of one kernel's lowering recurs in the next). Only for kernel graphs: a memo of
  tensor graphs would keep their buffers alive."""
  if ctx is None:
    if len(pm.memo) > REWRITE_MEMO_LIMIT: pm.memo.clear()
    return _rewrite(root, pm, None, pm.memo)
  return _rewrite(root, pm, ctx, {})

def _rewrite(u: UOp, pm: PatternMatcher, ctx, done: dict[UOp, UOp]) -> UOp:
  # iterative post-order over the not-yet-rewritten part of the graph (a module function, not a recursive closure: that
  # would be a reference cycle holding the graph until the garbage collector runs)
  stack = [u]
  while stack:
    n = stack[-1]
    if n in done: stack.pop(); continue
    pending = [s for s in n.src if s not in done]
    if pending: stack.extend(pending); continue
    stack.pop()
    new = n if all(done[s] is s for s in n.src) else n.replace(src=tuple(done[s] for s in n.src))
    for _ in range(1000):
      r = pm.rewrite(new, ctx)
      if r is None: break
      new = _rewrite(r, pm, ctx, done) if r not in done else done[r]
    done[n] = new
  return done[u]

def substitute(root: UOp, mapping: dict[UOp, UOp]) -> UOp:
  """Rebuild `root` with every node found in `mapping` replaced (no rewriting rules run)."""
  done: dict[UOp, UOp] = {}
  for u in root.toposort():
    if (m := mapping.get(u)) is not None: done[u] = m; continue
    new_src = tuple(done[s] for s in u.src)
    done[u] = u if all(a is b for a, b in zip(new_src, u.src)) else u.replace(src=new_src)
  return done[root]

_ids = itertools.count()
def unique_id() -> int: return next(_ids)
