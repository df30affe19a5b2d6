"""Differential fuzzer: random graphs over every Tensor op, run on one tinyweb device and in torch (float32, CPU), forward
values and the gradients of every leaf compared.

  python -m tests.fuzz --cases 300 --device CPU [--seed 0] [--ops conv,cumsum] [--skip-ops nn,tanh] [--no-grad] [-q]
  python -m tests.fuzz --device CL --start 123 --cases 1        # one case again: its failure, shrunk, as a repro
  python -m tests.fuzz --list-ops                               # the ops, by family (--ops/--skip-ops take both)

A case is a small DAG (leaves, 1-6 ops; every node that no other node uses is an output) drawn from (seed, case index)
alone: case i of seed S is the same graph on every device and every run (given the same --ops, --skip-ops and
--max-ops). Leaves are float32/int32/bool arrays of rank 0-4 with size-1 and zero-size dims; float leaves mix special
values (+-inf, NaN, +-0, 1e30, 3e38, 1e-40, 1e-30) and large ones (+-50, 1e4, 1e7, ...) into ordinary random values.
Each op's generator draws valid arguments (conv strides, paddings, dilations and groups, pool windows, pad modes, index
tensors, ...), now and then one made invalid on purpose; the new node is probed in torch: an op torch rejects is
usually drawn again, sometimes kept (the case then checks that tinyweb raises too).

The reference is torch's float32 result. Torch also runs the graph in float64, and twice with every inexact op's
output (and the inputs of ops that sum many terms, whose order of additions is free) perturbed by a few float32 ulps: a
multiplier that is a hash of the value's bits, so equal values stay equal and ties are kept; on a device that flushes
denormals to zero, once more with them flushed. How far these runs lie apart is how ill-conditioned the graph is
there, and sets the tolerance:
  |tinyweb - ref64| <= ATOL + RTOL*|ref64| + SLACK*max_k |ref_k - ref64|    (finite elements)
An element whose runs disagree on NaN/inf/finite may be any of the classes they give (and one whose float64 value is
beyond float32's range may be any inf or NaN: how a float32 sum overflows depends on its order; so may one whose torch
float32 run overflowed on the way to a float64 value within range); elsewhere NaN
positions, inf positions and signs must match. Integer and bool elements must be equal wherever the runs agree (torch's int64 results
wrapped to tinyweb's int32, its default, also where later nodes use them). Shapes must be equal, dtypes of the same class (float/int/uint/bool). With
grads, the loss is a random scalar reduction of each float output (a weighted sum, sum or mean) and every float leaf's
grad is compared the same way (ATOL scaled by the grad's size; a leaf torch gives no grad must get none or zeros). An
exception in tinyweb where torch succeeds is a failure; where torch raises, tinyweb must raise too (any exception) or
the case is skipped and counted. On WEBGPU, whose shaders may assume that no overflow, inf or NaN occurs (WGSL's finite
math), an element torch gives as inf or NaN may be any value, and so may every output computed from a node that
overflowed (an inf or NaN out of finite inputs) and, then, the gradients: those are not compared, and counted.

On a failure the case is shrunk (outputs dropped, ops bypassed or cut to a leaf holding their value, leaf shapes
shrunk, values simplified, parameters simplified) while it keeps failing the same way, and printed as a standalone
tinyweb + torch repro. The summary lists mismatches by class (op + kind: value/nan/inf/shape/dtype/crash, grad-*)."""
from __future__ import annotations
import argparse, math, os, re, sys, time, traceback, warnings
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Callable, Optional
import numpy as np
import torch
import torch.nn.functional as F
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from helpers import rng_draw, hardtanh_ref, hardswish_ref, elu_ref, selu_ref, amax_ref, amin_ref  # noqa: E402
from tinyweb import Tensor, Device, dtypes  # noqa: E402
from tinyweb.device import Device  # noqa: E402

nan, inf = math.nan, math.inf
MAX_NUMEL = 512           # largest tensor a case builds
ATOL, RTOL, SLACK = 1e-5, 1e-4, 8.0   # grads: ATOL times max(1, the largest |grad| of that leaf)
NOISE32, NOISE64 = 2.0 ** -22, 2.0 ** -21   # relative perturbation of each inexact op's output in the noisy runs
SPECIAL = [nan, inf, -inf, 0.0, -0.0, 1e30, -1e30, 3e38, -3e38, 1e-40, -1e-40, 1e-30, -1e-30]
LARGE = [20.0, -20.0, 50.0, -50.0, 100.0, -100.0, 88.7, -88.7, 1e4, -1e4, 1e7, -1e7]
SPECIAL_INT = [0, -1, 1, 127, -128, 255, 2 ** 31 - 1, -2 ** 31]
COT = np.array([1.0, -0.5, 2.0, -1.5, 0.25, 3.0, -2.0], dtype=np.float32)   # cotangent pattern of the weighted-sum loss

# ---------------------------------------------------------------- graph model

@dataclass(frozen=True)
class Const:
  """a Python scalar (or None) operand, written into the op's code"""
  v: Any

@dataclass(frozen=True)
class DT:
  """a dtype parameter: dtypes.X in tinyweb, torch.X in torch (float32 becomes float64 in the float64 reference)"""
  name: str

@dataclass(frozen=True)
class Code:
  """a parameter that is a piece of code, different in tinyweb and torch"""
  tw: str
  pt: str

@dataclass(eq=False)
class Node:
  op: str                       # "leaf" or a key of OPS
  ins: tuple = ()               # node indices and Consts
  p: dict = field(default_factory=dict)   # op parameters; a leaf's are v (np array) and grad (bool)
  red: str = "wsum"             # how the loss reduces this node if it is a float output: wsum, sum or mean
  mutated: bool = False         # a parameter was set to a likely invalid value (mutate) and torch accepted it

@dataclass(eq=False)
class Case:
  nodes: list
  outs: list                    # indices of the output nodes
  grad: bool = True
  seed: Optional[int] = None
  index: Optional[int] = None
  expect_raise: bool = False    # the last op was kept although torch rejects it

  def refs(self, i): return [a for a in self.nodes[i].ins if isinstance(a, int)]

def lit(v, side: str, f64: bool = False) -> str:
  """Python source for a parameter value."""
  if isinstance(v, Const): v = v.v
  if isinstance(v, DT): return f"dtypes.{v.name}" if side == "tw" else f"torch.{'float64' if f64 and v.name == 'float32' else v.name}"
  if isinstance(v, Code): return v.tw if side == "tw" else v.pt
  if isinstance(v, bool) or v is None: return repr(v)
  if isinstance(v, float):
    if math.isnan(v): return "nan"
    if math.isinf(v): return "inf" if v > 0 else "-inf"
    return repr(v)
  if isinstance(v, tuple): return "(" + ", ".join(lit(x, side, f64) for x in v) + ("," if len(v) == 1 else "") + ")"
  if isinstance(v, list): return "[" + ", ".join(lit(x, side, f64) for x in v) + "]"
  return repr(v)

# ---------------------------------------------------------------- the op table

@dataclass
class Op:
  name: str
  fam: str                      # unary, binary, reduce, movement, index, matmul, nn, cast, creation
  gen: Callable                 # gen(g: Gen) -> (ins, params) or None (not applicable now)
  tw: Any                       # format string ({0}.. inputs, {name} params) or fn(ins, params) -> code
  pt: Any = None                # the same for torch (default: tw)
  w: float = 1.0                # relative weight when drawing ops
  exact: bool = False           # the op rounds nothing: the noisy references do not perturb it

  def code(self, side: str, ins: list, params: dict) -> str:
    tpl = self.tw if side == "tw" or self.pt is None else self.pt
    return tpl(ins, params) if callable(tpl) else tpl.format(*ins, **params)

OPS: dict[str, Op] = {}
def op(name, fam, gen, tw, pt=None, w=1.0, exact=False): OPS[name] = Op(name, fam, gen, tw, pt, w, exact)

def tkind(t) -> str:
  if t.dtype == torch.bool: return "b"
  if t.is_floating_point(): return "f"
  return "u" if t.dtype == torch.uint8 else "i"

def npkind(a) -> str: return {"b": "b", "f": "f", "u": "u"}.get(a.dtype.kind, "i")

# -- generators: each picks its inputs (existing nodes or new leaves) and draws parameters valid for them

def g_unary(kinds="f", **draws):
  def gen(g):
    return [g.pick(kinds)], {k: g.d.choice(v) for k, v in draws.items()}
  return gen

def g_binary(kinds="fi", consts=None, rconsts=None, kinds_b=None, vals=None):
  """x op y, y a node of a broadcastable shape or a Python scalar (rconsts: scalar on the left)."""
  def gen(g):
    a = g.pick(kinds)
    k = g.kind(a)
    r = g.d.int(0, 9)
    if rconsts and r == 0: return [Const(g.d.choice(rconsts)), a], {}
    if consts and r <= 2:
      cs = consts(k) if callable(consts) else consts
      if cs: return [a, Const(g.d.choice(cs))], {}
    return [a, g.pick_broadcast(a, kinds_b or kinds, vals)], {}
  return gen

def int_consts(k): return [2, -3, 1, 7, 2 ** 31 - 1, -2 ** 31] if k in "iu" else [True, False] if k == "b" else FLOAT_CONSTS
def nz_consts(k): return [2, -3, 1, 7, -1] if k in "iu" else FLOAT_CONSTS
FLOAT_CONSTS = [2.0, -1.5, 0.5, 0.0, -0.0, 1.0, 3.0, inf, -inf, nan, 1e30, 1e-30, 1e-40, 100.0, -3e38, 2, -3, 0]
POW_EXPS = [2, 3, 0.5, -1, 2.5, -2, 0, 1, 1 / 3, -0.5, 4, 1.5, 88.7, 2.0, 3.0, -3, inf, -inf, nan, 0.0]
POW_BASES = [2.0, 0.5, -2.0, 10.0, 0.0, inf, -1.0, 1.0, 2]

def axes_arg(g, nd, mode):
  """(tinyweb axis, torch dims) for a reduction: mode multi (None, int or tuple), single (None or int), int."""
  if nd == 0: return (g.d.choice([0, -1]) if mode == "int" or g.d.int(0, 3) == 0 else None), ()
  if mode != "int" and g.d.int(0, 4) == 0: return None, tuple(range(nd))
  k = g.d.int(1, nd) if mode == "multi" and g.d.bool() else 1   # one axis, the usual case, half the time
  axes = [a - nd if g.d.int(0, 2) == 0 else a for a in g.d.subset(nd, k)]
  ax = axes[0] if len(axes) == 1 and (mode != "multi" or g.d.bool()) else tuple(axes)
  return ax, tuple(axes)

def g_reduce(kinds, mode, keepdim=True, **draws):
  def gen(g):
    x = g.pick(kinds)
    ax, dims = axes_arg(g, g.nd(x), mode)
    p = {"ax": ax, "dims": dims if mode == "multi" else ax, "kd": keepdim and g.d.bool()}
    p.update({k: g.d.choice(v) for k, v in draws.items()})
    return [x], p
  return gen

def g_where(g):
  c = g.pick("bfi")
  x = Const(g.d.choice([0.0, 1.5, -inf, nan, 2])) if g.d.int(0, 3) == 0 else g.pick_broadcast(c, "fib")
  y = Const(g.d.choice([0.0, -1.0, inf, 3])) if g.d.int(0, 3) == 0 else g.pick_broadcast(c, "fib")
  return [c, x, y], {}

def g_lerp(g):
  a = g.pick("f")
  w = Const(g.d.choice([0.5, 0.25, 2.0, -1.0, 0.0, 1.0])) if g.d.bool() else g.pick_broadcast(a, "f")
  return [a, g.pick_broadcast(a, "f"), w], {}

def g_masked_fill(g):
  x = g.pick("fib")
  m = g.pick("b", ok=lambda s: broadcastable_to(s, g.shape(x)), fresh=lambda: sub_broadcast(g, g.shape(x)))
  return [x, m, Const(g.d.choice([0.0, -inf, nan, 1e30, 2] if g.kind(x) == "f" else [0, 5, -1]))], {}

def broadcastable_to(s, t) -> bool:
  return len(s) <= len(t) and all(a in (1, b) for a, b in zip(reversed(s), reversed(t)))

def sub_broadcast(g, s):
  out = [1 if g.d.int(0, 2) == 0 else k for k in s]
  return tuple(out[g.d.int(0, len(out)):] if out and g.d.int(0, 3) == 0 else out)

def g_cast(g):
  x = g.pick("fib")
  k = g.kind(x)
  targets = ["bool", "float32", "float64", "int32", "int8", "uint8", "int16", "int64"] if k != "f" else ["bool", "float64"]
  return [x], {"dt": DT(g.d.choice(targets))}

INT_RANGE = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int32": (-2 ** 31, 2 ** 31 - 128), "int64": (-2 ** 62, 2 ** 62)}
def g_cast_f2i(g):   # float -> int of the values every device and torch define: NaN -> 0, clipped to the target's range
  dt = g.d.choice(list(INT_RANGE))
  lo, hi = INT_RANGE[dt]
  return [g.pick("f")], {"dt": DT(dt), "lo": float(lo), "hi": float(hi)}

# -- movement

def g_reshape(g):
  x = g.pick("fib")
  s = list(g.shape(x))
  n = math.prod(s)
  r = g.d.int(0, 6)
  if r == 0: new = [n]
  elif r == 1 and len(s) >= 2:
    i = g.d.int(0, len(s) - 2)
    new = s[:i] + [s[i] * s[i + 1]] + s[i + 2:]
  elif r == 2 and len(s) < 4 and any(k > 3 and any(k % a == 0 for a in range(2, k)) for k in s):
    i = g.d.choice([i for i, k in enumerate(s) if k > 3 and any(k % a == 0 for a in range(2, k))])
    a = g.d.choice([a for a in range(2, s[i]) if s[i] % a == 0])
    new = s[:i] + [a, s[i] // a] + s[i + 1:]
  elif r == 3 and len(s) < 4:
    i = g.d.int(0, len(s))
    new = s[:i] + [1] + s[i:]
  elif r == 4 and 1 in s:
    i = g.d.choice([i for i, k in enumerate(s) if k == 1])
    new = s[:i] + s[i + 1:]
  elif r == 5 and n == 1: new = []
  else:
    new = factor(g, n)
  if new and g.d.int(0, 2) == 0: new[g.d.int(0, len(new) - 1)] = -1
  return [x], {"shape": tuple(new)}

def factor(g, n):
  out = []
  for _ in range(g.d.int(0, 3)):
    ds = [a for a in range(2, 6) if n % a == 0]
    if not ds: break
    out.append(g.d.choice(ds)); n //= out[-1]
  return out + [n]

def g_permute(g):
  x = g.pick("fib", ok=lambda s: len(s) >= 2)
  nd = g.nd(x)
  return [x], {"order": tuple(o - nd if g.d.int(0, 3) == 0 else o for o in g.d.perm(nd))}

def g_transpose(g):
  x = g.pick("fib", ok=lambda s: len(s) >= 1)
  nd = g.nd(x)
  return [x], {"a": g.d.int(-nd, nd - 1), "b": g.d.int(-nd, nd - 1)}

def g_expand(g):
  x = g.pick("fib", ok=lambda s: len(s) < 4)
  s = g.shape(x)
  new = [g.d.choice([2, 3, 4, 0 if g.d.int(0, 5) == 0 else 1]) if k == 1 and g.d.int(0, 2) else k for k in s]
  arg = [-1 if (a == b and g.d.int(0, 2) == 0) else a for a, b in zip(new, s)]
  if len(s) < 4 and g.d.int(0, 2) == 0: arg = [g.d.int(1, 3)] + arg
  return [x], {"shape": tuple(arg)}

PAD_VALUES = [0.0, 1.5, -2.0, inf, -inf, nan, 1e30]
def g_pad(g):
  x = g.pick("fib", ok=lambda s: len(s) >= 1)
  s = g.shape(x)
  k = g.d.int(1, min(len(s), 3))
  pairs = []
  for n in s[len(s) - k:]:
    pairs.append(tuple(g.d.int(-min(n, 1) if n else 0, 2) for _ in range(2)))
  kind = g.kind(x)
  value = g.d.choice(PAD_VALUES) if kind == "f" else g.d.choice([0, 3]) if kind in "iu" else g.d.choice([False, True])
  flat = tuple(v for p in reversed(pairs) for v in p)
  # tinyweb takes torch's flat form or one (before, after) pair (or None) per dim from the first
  arg = flat if g.d.bool() else tuple([None] * (len(s) - k) + pairs)
  return [x], {"arg": arg, "flat": flat, "value": value}

def g_pad_mode(g):
  mode = g.d.choice(["reflect", "replicate", "circular"])
  x = g.pick("f", ok=lambda s: 2 <= len(s) <= 5 and all(s))
  s = g.shape(x)
  k = g.d.choice([k for k in (1, 2, 3) if len(s) in (k + 1, k + 2)])
  lim = {"reflect": lambda n: n - 1, "replicate": lambda n: 3, "circular": lambda n: n}[mode]
  flat = tuple(g.d.int(0, min(2, lim(n))) for n in reversed(s[len(s) - k:]) for _ in range(2))
  return [x], {"flat": flat, "mode": mode}

def g_shrink(g):
  x = g.pick("fib", ok=lambda s: len(s) >= 1)
  arg = []
  for n in g.shape(x):
    if g.d.int(0, 2) == 0: arg.append(None)
    else:
      b = g.d.int(0, n)
      arg.append((b, g.d.int(b, n) if g.d.int(0, 5) else b))
  narrow = "".join(f".narrow({d}, {a[0]}, {a[1] - a[0]})" for d, a in enumerate(arg) if a is not None)
  return [x], {"arg": tuple(arg), "narrow": Code("", narrow)}

def g_flip(g):
  x = g.pick("fib", ok=lambda s: len(s) >= 1)
  nd = g.nd(x)
  axes = tuple(a - nd if g.d.int(0, 2) == 0 else a for a in g.d.subset(nd, g.d.int(1, nd)))
  return [x], {"axes": axes}

def g_getitem(g):
  """ints, slices (negative steps only over the whole dim: torch writes them as a flip), None and Ellipsis"""
  x = g.pick("fib", ok=lambda s: len(s) >= 1)
  s = g.shape(x)
  tw, pt, flips = [], [], []
  for d, n in enumerate(s):
    r = g.d.int(0, 5)
    if r == 0 and n:
      i = g.d.int(-n, n - 1)
      tw.append(str(i)); pt.append(str(i))
    elif r == 1:
      tw.append(":"); pt.append(":")
    elif r == 2:
      st = g.d.choice([-1, -2, -3])
      tw.append(f"::{st}"); pt.append(f"::{-st}" if st != -1 else ":"); flips.append(d)
    else:
      a, b, st = g.d.choice(["", str(g.d.int(-n - 1, n))]), g.d.choice(["", str(g.d.int(-n - 1, n + 1))]), g.d.choice([1, 1, 2, 3])
      sl = f"{a}:{b}" + (f":{st}" if st != 1 else "")
      tw.append(sl); pt.append(sl)
  if g.d.int(0, 3) == 0:
    i = g.d.int(0, len(tw))
    tw.insert(i, "None"); pt.insert(i, "None")
  if g.d.int(0, 3) == 0:   # a run of ':' written as '...'
    full = [i for i, t in enumerate(tw) if t == ":" and pt[i] == ":"]
    if full:
      i = g.d.choice(full)
      tw[i] = pt[i] = "..."
  while len(tw) > 1 and tw[-1] == ":" and pt[-1] == ":" and g.d.bool(): tw.pop(); pt.pop()
  flip = f".flip({tuple(flips)})" if flips else ""
  return [x], {"idx": Code(", ".join(tw), flip + "[" + ", ".join(pt) + "]")}

def g_fancy(g):
  """tensor (and list) indices: x[i], x[:, i], x[i, j], x[i, :, j], x[mask]"""
  x = g.pick("fib", ok=lambda s: len(s) >= 1 and all(s))
  s = g.shape(x)
  r = g.d.int(0, 5)
  if r == 0:   # a 1-D bool mask on dim 0
    return [x, g.leaf((s[0],), "b")], {"spec": ("t",)}
  if r == 1: return [x], {"spec": ((g.d.int(-s[0], s[0] - 1), g.d.int(0, s[0] - 1)),)}
  dims = g.d.subset(len(s), min(len(s), g.d.int(1, 2)))
  ishape = tuple(g.d.int(1, 3) for _ in range(g.d.int(0, 2)))
  ins, spec = [x], []
  for d in range(dims[-1] + 1):
    if d in dims:
      ins.append(g.leaf(ishape, "i", vals=("index", s[d])))
      spec.append("t")
    else: spec.append(":")
  return ins, {"spec": tuple(spec)}

def fancy_code(ins, p):
  it = iter(ins[1:])
  spec = eval(p["spec"])
  return ins[0] + "[" + ", ".join(next(it) if t == "t" else ":" if t == ":" else str(list(t)) for t in spec) + "]"

def setitem(x, idx, v):
  x = x.clone()
  x[idx] = v
  return x

def sdpa_math(*args, **kw):   # torch's reference path: its fused CPU kernel differs on NaN, overflow and fully masked rows
  from torch.nn.attention import sdpa_kernel, SDPBackend
  with sdpa_kernel(SDPBackend.MATH): return F.scaled_dot_product_attention(*args, **kw)

def g_setitem(g):
  """x[idx] = v on a copy: ints and slices (positive steps), v a scalar or a node that broadcasts to the selection"""
  x = g.pick("fib", ok=lambda s: len(s) >= 1)
  s, k = g.shape(x), g.kind(x)
  items = []
  for n in s[:g.d.int(1, len(s))]:
    r = g.d.int(0, 3)
    if r == 0 and n: items.append(str(g.d.int(-n, n - 1)))
    elif r == 1: items.append(":")
    else:
      a = g.d.int(0, n)
      items.append(f"{a}:{g.d.int(a, n)}" + (f":{g.d.int(2, 3)}" if g.d.int(0, 3) == 0 else ""))
  idx = ", ".join(items)
  sel = np.empty(s)[eval(f"np.s_[{idx}]")].shape
  if g.d.bool(): v = Const(g.d.choice([1.5, -inf, nan, 0.0, 1e30] if k == "f" else [3, -1] if k == "i" else [True]))
  else: v = g.pick(k, ok=lambda t: broadcastable_to(t, sel), fresh=lambda: sub_broadcast(g, sel))
  return [x, v], {"idx": Code(idx, idx)}

def g_gather(g):
  x = g.pick("fib", ok=lambda s: len(s) >= 1 and all(s))
  s = g.shape(x)
  d = g.d.int(0, len(s) - 1)
  ishape = tuple(g.d.int(1, 4) if i == d else g.d.int(1, n) for i, n in enumerate(s))
  return [x, g.leaf(ishape, "i", vals=("index_pos", s[d]))], {"d": d - len(s) if g.d.bool() else d}

def g_scatter(g):
  x = g.pick("f", ok=lambda s: len(s) >= 1 and all(s))
  s = g.shape(x)
  d = g.d.int(0, len(s) - 1)
  ishape = tuple(g.d.int(1, n) for n in s)
  src = g.leaf(tuple(k + g.d.int(0, 1) for k in ishape), "f")
  return [x, g.leaf(ishape, "i", vals=("perm", s[d], d)), src], {"d": d}

def g_scatter_add(g):
  ins, p = g_scatter(g)
  g.nodes[ins[1]].p["v"] = g.rng.integers(0, g.shape(ins[0])[p["d"]], size=g.shape(ins[1])).astype(np.int32)  # repeats are fine here
  g.vals[ins[1]] = torch.tensor(g.nodes[ins[1]].p["v"])
  return ins, p

def g_cat(g):
  x = g.pick("fib", ok=lambda s: len(s) >= 1)
  s = g.shape(x)
  d = g.d.int(0, len(s) - 1)
  ins = [x]
  for _ in range(g.d.int(1, 2)):
    ins.append(g.pick(g.kind(x), ok=lambda t: len(t) == len(s) and all(a == b for i, (a, b) in enumerate(zip(t, s)) if i != d),
                      fresh=lambda: s[:d] + (g.d.int(0, 3),) + s[d + 1:]))
  return ins, {"d": d - len(s) if g.d.int(0, 2) == 0 else d}

def g_stack(g):
  x = g.pick("fib", ok=lambda s: len(s) < 4)
  s = g.shape(x)
  ins = [x] + [g.pick(g.kind(x), ok=lambda t: t == s, fresh=lambda: s) for _ in range(g.d.int(1, 2))]
  return ins, {"d": g.d.int(-len(s) - 1, len(s))}

def g_split(g):
  x = g.pick("fib", ok=lambda s: len(s) >= 1)
  s = g.shape(x)
  d = g.d.int(0, len(s) - 1)
  n = s[d]
  if g.d.bool() or n == 0:
    sz = g.d.int(1, max(1, n))
    return [x], {"sizes": sz, "d": d, "k": g.d.int(0, max(0, math.ceil(n / sz) - 1))}
  cuts = sorted(g.d.int(0, n) for _ in range(g.d.int(1, 2)))
  sizes = [b - a for a, b in zip([0] + cuts, cuts + [n])]
  return [x], {"sizes": sizes, "d": d, "k": g.d.int(0, len(sizes) - 1)}

def g_chunk(g):
  x = g.pick("fib", ok=lambda s: len(s) >= 1 and all(s))
  s = g.shape(x)
  d = g.d.int(0, len(s) - 1)
  c = g.d.int(1, 4)
  return [x], {"c": c, "d": d, "k": g.d.int(0, len(range(0, s[d], math.ceil(s[d] / c))) - 1)}

def g_squeeze(g):
  x = g.pick("fib")
  nd = g.nd(x)
  if not nd or g.d.int(0, 3) == 0: return [x], {"d": Code("", "")}   # squeeze()
  ones = [i for i, k in enumerate(g.shape(x)) if k == 1]
  return [x], {"d": g.d.choice(ones) if ones and g.d.int(0, 3) else g.d.int(-nd, nd - 1)}

def g_unsqueeze(g):
  x = g.pick("fib", ok=lambda s: len(s) < 4)
  return [x], {"d": g.d.int(-g.nd(x) - 1, g.nd(x))}

def g_flatten(g):
  x = g.pick("fib", ok=lambda s: len(s) >= 1)
  nd = g.nd(x)
  a = g.d.int(0, nd - 1)
  return [x], {"a": a, "b": g.d.int(a, nd - 1) - (nd if g.d.bool() else 0)}

def g_unflatten(g):
  x = g.pick("fib", ok=lambda s: 1 <= len(s) < 4)
  s = g.shape(x)
  d = g.d.int(0, len(s) - 1)
  return [x], {"d": d, "sizes": tuple(factor(g, s[d]))}

def g_repeat(g):
  x = g.pick("fib", ok=lambda s: len(s) < 4)
  nd = g.nd(x)
  return [x], {"reps": tuple(g.d.choice([1, 1, 2, 3, 0]) for _ in range(nd + g.d.int(0, 1)))}

def g_repeat_interleave(g):
  x = g.pick("fib")
  nd = g.nd(x)
  return [x], {"r": g.d.int(1, 3), "d": None if nd == 0 or g.d.int(0, 3) == 0 else g.d.int(-nd, nd - 1)}

def g_tri(g):
  return [g.pick("fib", ok=lambda s: len(s) >= 2)], {"k": g.d.int(-2, 2)}

def g_one_hot(g):
  n = g.d.int(1, 5)
  return [g.leaf(g.rand_shape(max_nd=3), "i", vals=("index_pos", n))], {"n": n}

# -- matmul, einsum, linear

def g_matmul(g):
  a = g.pick("f", ok=lambda s: len(s) >= 1)
  s = g.shape(a)
  k, m = s[-1], g.d.choice([1, 2, 3, 4, 5, 0])
  r = g.d.int(0, 3)
  if r == 0: bs = (k,)
  elif r == 1: bs = (k, m)
  else: bs = sub_broadcast(g, s[:-2]) + (k, m) if len(s) > 2 else (g.d.int(1, 3), k, m)
  return [a, g.pick("f", ok=lambda t: t == bs, fresh=lambda: bs)], {}

EINSUMS = ["ij,jk->ik", "bij,bjk->bik", "i,i->", "ij->ji", "ii->i", "ii", "ij,ij->i", "...ij,...jk->...ik", "i,j->ij", "ijk->",
           "ij,j", "bhqd,bhkd->bhqk", "ab,bc,cd->ad", "ij->", "i...->...", "iij->j"]
def g_einsum(g):
  f = g.d.choice(EINSUMS)
  size = {c: g.d.choice([1, 2, 3, 4]) if g.d.int(0, 12) else 0 for c in "abcdhijkq"}
  ell = tuple(g.d.int(1, 3) for _ in range(g.d.int(0, 2)))
  ins = []
  for term in f.split("->")[0].split(","):
    pre, dots, post = term.partition("...")
    shp = tuple(size[c] for c in pre) + (ell if dots else ()) + tuple(size[c] for c in post)
    ins.append(g.pick("f", ok=lambda t: t == shp, fresh=lambda: shp))
  return ins, {"f": f}

def g_linear(g):
  x = g.pick("f", ok=lambda s: len(s) >= 1)
  n, m = g.shape(x)[-1], g.d.int(1, 4)
  ins = [x, g.leaf((n, m), "f")] + ([g.leaf((m,), "f")] if g.d.bool() else [Const(None)])
  return ins, {}

# -- nn

def conv_input(g, shape):
  """an existing float node viewed as `shape` (a reshape node is added) or a new leaf"""
  cands = [i for i in range(len(g.nodes)) if g.kind(i) == "f" and g.vals[i].numel() == math.prod(shape)]
  if cands and g.d.int(0, 2) == 0: return g.add("reshape", [g.d.choice(cands)], {"shape": tuple(shape)})
  return g.pick("f", ok=lambda s: s == tuple(shape), fresh=lambda: tuple(shape))

def g_conv(g, transposed=False):
  n = g.d.int(1, 2)
  groups, cin_g, cout_g = g.d.choice([1, 1, 2, 3]), g.d.int(1, 2), g.d.int(1, 2)
  k = tuple(g.d.int(1, 3) for _ in range(n))
  st = tuple(g.d.choice([1, 1, 1, 2, 3]) for _ in range(n))
  dl = tuple(g.d.choice([1, 1, 2]) for _ in range(n))
  if transposed:
    pad = tuple(g.d.int(0, d * (kk - 1)) for kk, d in zip(k, dl))
    opad = tuple(g.d.int(0, max(s, d) - 1) for s, d in zip(st, dl))
    # inputs long enough for a nonempty output (torch returns an empty one for some groups, raises for others)
    sp = tuple(g.d.int(lo, lo + 3) for lo in (max(1, -(-(2 * p - d * (kk - 1) - o) // s) + 1) for p, d, kk, o, s in zip(pad, dl, k, opad, st)))
    x = conv_input(g, (g.d.int(1, 2), groups * cin_g) + sp)
    w = g.leaf((groups * cin_g, cout_g) + k, "f")
    b = g.leaf((groups * cout_g,), "f") if g.d.bool() else Const(None)
    p = {"g": groups, "s": st if g.d.bool() else st[0] if len(set(st)) == 1 else st, "d": dl, "p": pad, "op": opad, "nd": n}
    return [x, w, b], p
  same = all(s == 1 for s in st) and g.d.int(0, 3) == 0
  if same: pad = "same"
  else: pad = g.d.choice(["valid", tuple(g.d.int(0, 2) for _ in range(n))]) if g.d.int(0, 5) == 0 else tuple(g.d.int(0, 2) for _ in range(n))
  sp = []
  for kk, d, pp in zip(k, dl, pad if isinstance(pad, tuple) else (0,) * n):
    lo = max(1, d * (kk - 1) + 1 - 2 * pp)
    sp.append(g.d.int(lo, lo + 5))
  x = conv_input(g, (g.d.int(1, 2), groups * cin_g) + tuple(sp))
  w = g.leaf((groups * cout_g, cin_g) + k, "f")
  b = g.leaf((groups * cout_g,), "f") if g.d.bool() else Const(None)
  return [x, w, b], {"g": groups, "s": st, "d": dl if g.d.bool() else dl[0] if len(set(dl)) == 1 else dl, "p": pad, "nd": n}

def g_pool(g, kind):
  n = g.d.int(1, 2)
  k = tuple(g.d.int(1, 3) for _ in range(n))
  st = None if g.d.int(0, 3) == 0 else tuple(g.d.int(1, 3) for _ in range(n))
  dl = tuple(g.d.choice([1, 1, 2]) for _ in range(n)) if kind == "max" else (1,) * n
  # no padding with dilation: a dilated window can then lie wholly in the padding, and torch's (2.13, CPU) max_pool2d
  # backward writes out of bounds for it (heap corruption)
  pad = tuple(g.d.int(0, ((kk - 1) * d + 1) // 2) if d == 1 else 0 for kk, d in zip(k, dl))
  sp = tuple(g.d.int(max(1, d * (kk - 1) + 1 - 2 * pp), d * (kk - 1) + 6) for kk, d, pp in zip(k, dl, pad))
  lead = tuple(g.d.int(1, 3) for _ in range(g.d.int(1, 2)))
  x = conv_input(g, lead + sp)
  p = {"k": k, "s": st, "p": pad, "cm": g.d.bool(), "nd": n}
  if kind == "max": p["d"] = dl
  else: p["cip"] = g.d.bool()
  return [x], p

def g_adaptive(g):
  lead = tuple(g.d.int(1, 2) for _ in range(g.d.int(1, 2)))
  x = conv_input(g, lead + (g.d.int(1, 6), g.d.int(1, 6)))
  return [x], {"o": (g.d.int(1, 4), g.d.int(1, 4))}

def g_interpolate(g):
  mode = g.d.choice(["nearest", "nearest-exact", "linear", "bilinear", "area"])
  n = 1 if mode == "linear" else 2 if mode == "bilinear" else g.d.int(1, 2)
  x = conv_input(g, (g.d.int(1, 2), g.d.int(1, 2)) + tuple(g.d.int(1, 5) for _ in range(n)))
  ac = mode in ("linear", "bilinear") and g.d.bool()
  size = tuple(g.d.int(1, 7) for _ in range(n))
  return [x], {"size": size, "mode": mode, "ac": Code(str(ac), str(ac) if mode in ("linear", "bilinear") else "None")}

def g_norm(g):
  x = g.pick("f", ok=lambda s: len(s) >= 1)
  nd = g.nd(x)
  k = g.d.int(1, min(nd, 2))
  ax = tuple(range(nd - k, nd))
  return [x], {"ax": ax if k > 1 or g.d.bool() else -1, "ns": g.shape(x)[nd - k:]}

def g_ce(g):
  c = g.d.int(1, 5)
  lead = () if g.d.int(0, 4) == 0 else (g.d.int(1, 4),) + tuple(g.d.int(1, 3) for _ in range(g.d.int(0, 1)))
  shape = lead[:1] + (c,) + lead[1:]
  x = g.pick("f", ok=lambda s: s == shape, fresh=lambda: shape)
  tshape = lead
  prob = g.d.int(0, 3) == 0
  y = g.leaf(shape, "f", vals="prob") if prob else g.leaf(tshape, "i", vals=("target", c))
  return [x, y], {"r": g.d.choice(["mean", "sum", "none"]), "ls": g.d.choice([0.0, 0.0, 0.1, 1.0]), "long": Code("", "" if prob else ".long()")}

def g_nll(g):
  ins, p = g_ce(g)
  if g.kind(ins[1]) == "f": return None
  return ins, {"r": p["r"]}

def g_bce(g, logits):
  x = g.pick("f") if logits else g.leaf(g.rand_shape(), "f", vals="prob")
  y = g.leaf(g.shape(x), "f", vals="prob")
  p = {"r": g.d.choice(["mean", "sum", "none"])}
  if logits:
    pw = g.leaf(sub_broadcast(g, g.shape(x)), "f", vals="pos", grad=False) if g.d.int(0, 3) == 0 else Const(None)   # torch has no grad for it
    return [x, y, pw], p
  return [x, y], p

def g_mse(g):
  x = g.pick("f")
  return [x, g.pick("f", ok=lambda s: s == g.shape(x), fresh=lambda: g.shape(x))], {"r": g.d.choice(["mean", "sum", "none"])}

def g_sdpa(g):
  lead = tuple(g.d.int(1, 2) for _ in range(g.d.int(0, 2)))
  L, S, E, Ev = g.d.int(1, 4), g.d.int(1, 4), g.d.int(1, 4), g.d.int(1, 3)
  q = g.pick("f", ok=lambda s: s == lead + (L, E), fresh=lambda: lead + (L, E))
  k, v = g.leaf(lead + (S, E), "f"), g.leaf(lead + (S, Ev), "f")
  r = g.d.int(0, 3)
  mask = g.leaf((L, S), "b") if r == 0 else g.leaf((L, S), "f") if r == 1 else Const(None)
  return [q, k, v, mask], {"causal": r == 2 and g.d.bool(), "scale": g.d.choice([None, 0.5, 2.0])}

# -- creation

def g_arange(g):
  if g.d.bool(): a, b, s = g.d.int(-5, 5), g.d.int(-5, 10), g.d.choice([1, 2, 3, -1, -2])
  else: a, b, s = g.d.choice([0.0, -1.5, 0.25]), g.d.choice([3.0, 2.7, -2.0, 0.1]), g.d.choice([0.5, 0.3, -0.7, 1.0, 0.1])
  return [], {"a": a, "b": b, "s": s}

# -- the table (tw template, torch template; {0}.. are the inputs)

F_UNARY = [  # name, tinyweb, torch (None: same), inputs (f: float, i: int, b: bool), exact
  ("neg", "-{0}", None, "fi", True), ("exp", "{0}.exp()", None, "fib", False), ("exp2", "{0}.exp2()", None, "fi", False),
  ("log", "{0}.log()", None, "fi", False), ("log2", "{0}.log2()", None, "f", False), ("log10", "{0}.log10()", None, "f", False),
  ("log1p", "{0}.log1p()", None, "f", False), ("expm1", "{0}.expm1()", None, "f", False), ("sqrt", "{0}.sqrt()", None, "fi", False),
  ("rsqrt", "{0}.rsqrt()", None, "f", False), ("reciprocal", "{0}.reciprocal()", None, "f", False), ("sin", "{0}.sin()", None, "fib", False),
  ("cos", "{0}.cos()", None, "fi", False), ("tan", "{0}.tan()", None, "f", False), ("abs", "{0}.abs()", None, "fi", True),
  ("sign", "{0}.sign()", None, "fib", True), ("trunc", "{0}.trunc()", None, "fi", True), ("floor", "{0}.floor()", None, "fi", True),
  ("ceil", "{0}.ceil()", None, "fi", True), ("round", "{0}.round()", None, "fi", True), ("frac", "{0}.frac()", None, "f", True),
  ("square", "{0}.square()", None, "fi", False), ("sigmoid", "{0}.sigmoid()", None, "fi", False), ("tanh", "{0}.tanh()", None, "fi", False),
  ("sinh", "{0}.sinh()", None, "f", False), ("cosh", "{0}.cosh()", None, "f", False), ("atanh", "{0}.atanh()", None, "f", False),
  ("asinh", "{0}.asinh()", None, "f", False), ("acosh", "{0}.acosh()", None, "f", False), ("relu", "{0}.relu()", None, "fi", True),
  ("selu", "{0}.selu()", "selu_ref({0})", "f", False), ("gelu", "{0}.gelu()", "F.gelu({0}, approximate='tanh')", "f", False),
  ("quick_gelu", "{0}.quick_gelu()", "{0} * torch.sigmoid(1.702 * {0})", "f", False), ("silu", "{0}.silu()", "F.silu({0})", "f", False),
  ("mish", "{0}.mish()", "F.mish({0})", "f", False), ("relu6", "{0}.relu6()", "hardtanh_ref({0}, 0.0, 6.0)", "f", True),
  ("hardswish", "{0}.hardswish()", "hardswish_ref({0})", "f", False), ("hardsigmoid", "{0}.hardsigmoid()", "F.hardsigmoid({0})", "f", False),
  ("softsign", "{0}.softsign()", "F.softsign({0})", "f", False), ("logsigmoid", "{0}.logsigmoid()", "F.logsigmoid({0})", "f", False),
  ("isnan", "{0}.isnan()", None, "f", True), ("isinf", "{0}.isinf()", None, "f", True), ("isfinite", "{0}.isfinite()", None, "f", True),
  ("logical_not", "{0}.logical_not()", None, "fib", True), ("bitwise_not", "~{0}", None, "ib", True),
  ("contiguous", "{0}.contiguous()", None, "fib", True), ("clone", "{0}.clone()", None, "fib", True), ("detach", "{0}.detach()", None, "f", True),
]
for _n, _tw, _pt, _k, _ex in F_UNARY: op(_n, "unary", g_unary(_k), _tw, _pt, exact=_ex, w=0.6)
op("leaky_relu", "unary", g_unary("f", s=[0.01, 0.2, 1.5, -0.3]), "{0}.leaky_relu({s})", "F.leaky_relu({0}, {s})")
op("elu", "unary", g_unary("f", a=[1.0, 0.5, 2.0]), "{0}.elu({a})", "elu_ref({0}, {a})")
op("celu", "unary", g_unary("f", a=[1.0, 0.5, 2.0]), "{0}.celu({a})", "elu_ref({0}, {a}, 1.0, 1 / {a})")
op("softplus", "unary", g_unary("f", b=[1.0, 2.0, 0.5], t=[20.0, 5.0]), "{0}.softplus({b}, {t})", "F.softplus({0}, {b}, {t})")
op("hardtanh", "unary", g_unary("f", r=[(-1.0, 1.0), (-2.5, 0.5), (0.0, 6.0)]), "{0}.hardtanh(*{r})", "hardtanh_ref({0}, *{r})", exact=True)
op("clip", "unary", g_unary("fi", lo=[None, -1, 0.5, -inf, 0], hi=[1, 2.5, inf, 100]), "{0}.clip({lo}, {hi})", "{0}.clamp({lo}, {hi})", exact=True)
op("cast", "cast", g_cast, "{0}.cast({dt})", "{0}.to({dt})", exact=True)
op("cast_f2i", "cast", g_cast_f2i, "{0}.isnan().where(0, {0}).clip({lo}, {hi}).cast({dt})",
   "torch.where({0}.isnan(), 0, {0}).clamp({lo}, {hi}).to({dt})", exact=True)
op("half", "cast", g_unary("f"), "{0}.half().float()", "{0}.half().to({f32})", exact=True)
op("bfloat16", "cast", g_unary("f"), "{0}.bfloat16().float()", "{0}.bfloat16().to({f32})", exact=True)

for _n, _sym, _k, _c, _rc, _v, _ex in [
    ("add", "+", "fi", int_consts, [1.5, 2, -inf], None, False), ("sub", "-", "fi", int_consts, [1.0, 3, nan], None, False),
    ("mul", "*", "fib", int_consts, [2.0, -1, 0.0], None, False), ("div", "/", "fi", int_consts, [1.0, 2], None, False),
    ("floordiv", "//", "fi", nz_consts, [7.0, 5], "nonzero", False), ("mod", "%", "fi", nz_consts, [7.0, 5], "nonzero", False),
    ("pow", "**", "fi", lambda k: POW_EXPS if k == "f" else [0, 1, 2, 3, 2.5, -1.0, -1], POW_BASES, "exp", False),
    ("lt", "<", "fib", int_consts, [0.5, 1], None, True), ("gt", ">", "fib", int_consts, [0.5], None, True),
    ("le", "<=", "fib", int_consts, [0.0], None, True), ("ge", ">=", "fib", int_consts, [1], None, True),
    ("eq", "==", "fib", int_consts, [0.0, 2], None, True), ("ne", "!=", "fib", int_consts, [nan], None, True),
    ("and", "&", "ib", lambda k: [3, -1, 0] if k in "iu" else [True, False], [6], None, True),
    ("or", "|", "ib", lambda k: [3, -2] if k in "iu" else [True], [1], None, True),
    ("xor", "^", "ib", lambda k: [5, -1] if k in "iu" else [True], [2], None, True),
    ("lshift", "<<", "i", [0, 1, 3], None, "shift", True), ("rshift", ">>", "i", [0, 1, 3], None, "shift", True)]:
  op(_n, "binary", g_binary(_k, _c, _rc, vals=_v), "{0} %s {1}" % _sym, exact=_ex)
op("maximum", "binary", g_binary("fi"), "{0}.maximum({1})", "torch.maximum({0}, {1})", exact=True)
op("minimum", "binary", g_binary("fi"), "{0}.minimum({1})", "torch.minimum({0}, {1})", exact=True)
op("fmod", "binary", g_binary("fi", nz_consts, vals="nonzero"), "{0}.fmod({1})", "torch.fmod({0}, {1})")
op("div_floor", "binary", g_binary("fi", nz_consts, vals="nonzero"), "{0}.div({1}, rounding_mode='floor')",
   "torch.div({0}, {1}, rounding_mode='floor')")
op("div_trunc", "binary", g_binary("fi", nz_consts, vals="nonzero"), "{0}.div({1}, rounding_mode='trunc')",
   "torch.div({0}, {1}, rounding_mode='trunc')")
op("logical_and", "binary", g_binary("fib"), "{0}.logical_and({1})", "torch.logical_and({0}, {1})", exact=True)
op("logical_or", "binary", g_binary("fib"), "{0}.logical_or({1})", "torch.logical_or({0}, {1})", exact=True)
op("logical_xor", "binary", g_binary("fib"), "{0}.logical_xor({1})", "torch.logical_xor({0}, {1})", exact=True)
op("where", "binary", g_where, "{0}.where({1}, {2})", "torch.where({0}.bool(), {1}, {2})", exact=True)
op("lerp", "binary", g_lerp, "{0}.lerp({1}, {2})", "torch.lerp({0}, {1}, {2})")
op("masked_fill", "binary", g_masked_fill, "{0}.masked_fill({1}, {2})", exact=True)

R = "{0}.%s({ax}, keepdim={kd})"
op("sum", "reduce", g_reduce("fib", "multi"), R % "sum", "torch.sum({0}, dim={dims}, keepdim={kd})", w=2)
op("prod", "reduce", g_reduce("fi", "single", keepdim=False), "{0}.prod({ax})",
   lambda i, p: f"torch.prod({i[0]})" if p["ax"] == "None" else f"torch.prod({i[0]}, {p['ax']})")
op("max", "reduce", g_reduce("fib", "multi"), R % "max", "amax_ref({0}, dim={dims}, keepdim={kd})", exact=True)
op("min", "reduce", g_reduce("fib", "multi"), R % "min", "amin_ref({0}, dim={dims}, keepdim={kd})", exact=True)
op("mean", "reduce", g_reduce("f", "multi"), R % "mean", "torch.mean({0}, dim={dims}, keepdim={kd})")
op("var", "reduce", g_reduce("f", "multi", c=[0, 1, 1, 2]), "{0}.var({ax}, keepdim={kd}, correction={c})",
   "torch.var({0}, dim={ax}, keepdim={kd}, correction={c})")   # (dim=None: torch's all-dims gradient, as var(None))
op("std", "reduce", g_reduce("f", "multi", c=[0, 1, 1, 2]), "{0}.std({ax}, keepdim={kd}, correction={c})",
   "torch.std({0}, dim={ax}, keepdim={kd}, correction={c})")   # (dim=None: torch's all-dims gradient, as var(None))
op("any", "reduce", g_reduce("fib", "multi"), R % "any", "torch.any({0}, dim={dims}, keepdim={kd})", exact=True)
op("all", "reduce", g_reduce("fib", "multi"), R % "all", "torch.all({0}, dim={dims}, keepdim={kd})", exact=True)
op("argmax", "reduce", g_reduce("fib", "single"), R % "argmax", "torch.argmax({0}, dim={ax}, keepdim={kd})", exact=True)
op("argmin", "reduce", g_reduce("fib", "single"), R % "argmin", "torch.argmin({0}, dim={ax}, keepdim={kd})", exact=True)
op("cumsum", "reduce", g_reduce("fib", "int", keepdim=False), "{0}.cumsum({ax})", "torch.cumsum({0}, {ax})")
op("cumprod", "reduce", g_reduce("fi", "int", keepdim=False), "{0}.cumprod({ax})", "torch.cumprod({0}, {ax})")
op("cummax", "reduce", g_reduce("fi", "int", keepdim=False), "{0}.cummax({ax})[0]", "torch.cummax({0}, {ax}).values", exact=True)
op("logcumsumexp", "reduce", g_reduce("f", "int", keepdim=False), "{0}.logcumsumexp({ax})", "torch.logcumsumexp({0}, {ax})")
op("logsumexp", "reduce", g_reduce("f", "multi"), R % "logsumexp", "torch.logsumexp({0}, dim={dims}, keepdim={kd})")
op("softmax", "reduce", g_reduce("f", "int", keepdim=False), "{0}.softmax({ax})", "torch.softmax({0}, {ax})")
op("log_softmax", "reduce", g_reduce("f", "int", keepdim=False), "{0}.log_softmax({ax})", "torch.log_softmax({0}, {ax})")

op("reshape", "movement", g_reshape, "{0}.reshape({shape})", exact=True, w=2)
op("permute", "movement", g_permute, "{0}.permute({order})", exact=True)
op("transpose", "movement", g_transpose, "{0}.transpose({a}, {b})", exact=True)
op("expand", "movement", g_expand, "{0}.expand({shape})", exact=True)
op("pad", "movement", g_pad, "{0}.pad({arg}, value={value})", "F.pad({0}, {flat}, value={value})", exact=True, w=1.5)
op("pad_mode", "movement", g_pad_mode, "{0}.pad({flat}, mode={mode})", "F.pad({0}, {flat}, mode={mode})", exact=True)
op("shrink", "movement", g_shrink, "{0}.shrink({arg})", "{0}{narrow}", exact=True)
op("flip", "movement", g_flip, "{0}.flip({axes})", exact=True)
op("getitem", "index", g_getitem, "{0}[{idx}]", "{0}{idx}", exact=True, w=1.5)
op("fancy_index", "index", g_fancy, fancy_code, exact=True)
op("setitem", "index", g_setitem, "setitem({0}, np.s_[{idx}], {1})")
op("gather", "index", g_gather, "{0}.gather({d}, {1})", "torch.gather({0}, {d}, {1}.long())", exact=True)
op("scatter", "index", g_scatter, "{0}.scatter({d}, {1}, {2})", "torch.scatter({0}, {d}, {1}.long(), {2})", exact=True)
op("scatter_add", "index", g_scatter_add, "{0}.scatter_add({d}, {1}, {2})", "torch.scatter_add({0}, {d}, {1}.long(), {2})")
op("cat", "movement", g_cat, lambda i, p: f"{i[0]}.cat({', '.join(i[1:])}, dim={p['d']})",
   lambda i, p: f"torch.cat([{', '.join(i)}], dim={p['d']})", exact=True)
op("stack", "movement", g_stack, lambda i, p: f"{i[0]}.stack({', '.join(i[1:])}, dim={p['d']})",
   lambda i, p: f"torch.stack([{', '.join(i)}], dim={p['d']})", exact=True)
op("split", "movement", g_split, "{0}.split({sizes}, dim={d})[{k}]", "torch.split({0}, {sizes}, dim={d})[{k}]", exact=True)
op("chunk", "movement", g_chunk, "{0}.chunk({c}, dim={d})[{k}]", "torch.chunk({0}, {c}, dim={d})[{k}]", exact=True)
op("squeeze", "movement", g_squeeze, "{0}.squeeze({d})", exact=True)
op("unsqueeze", "movement", g_unsqueeze, "{0}.unsqueeze({d})", exact=True)
op("flatten", "movement", g_flatten, "{0}.flatten({a}, {b})", exact=True)
op("unflatten", "movement", g_unflatten, "{0}.unflatten({d}, {sizes})", "torch.unflatten({0}, {d}, {sizes})", exact=True)
op("repeat", "movement", g_repeat, "{0}.repeat({reps})", exact=True)
op("repeat_interleave", "movement", g_repeat_interleave, "{0}.repeat_interleave({r}, dim={d})", exact=True)
op("triu", "movement", g_tri, "{0}.triu({k})", "torch.triu({0}, {k})", exact=True)
op("tril", "movement", g_tri, "{0}.tril({k})", "torch.tril({0}, {k})", exact=True)
op("one_hot", "index", g_one_hot, "{0}.one_hot({n})", "F.one_hot({0}.long(), {n})", exact=True, w=0.5)

op("matmul", "matmul", g_matmul, "{0} @ {1}", w=2)
op("einsum", "matmul", g_einsum, lambda i, p: f"Tensor.einsum({p['f']}, {', '.join(i)})", lambda i, p: f"torch.einsum({p['f']}, {', '.join(i)})")
op("linear", "matmul", g_linear, "{0}.linear({1}, {2})", "F.linear({0}, {1}.T, {2})")

op("conv", "nn", g_conv, "{0}.conv{nd}d({1}, {2}, groups={g}, stride={s}, dilation={d}, padding={p})",
   "F.conv{nd}d({0}, {1}, {2}, stride={s}, padding={p}, dilation={d}, groups={g})", w=2)
op("conv_transpose", "nn", lambda g: g_conv(g, True),
   "{0}.conv_transpose2d({1}, {2}, groups={g}, stride={s}, dilation={d}, padding={p}, output_padding={op})",
   "F.conv_transpose{nd}d({0}, {1}, {2}, stride={s}, padding={p}, output_padding={op}, groups={g}, dilation={d})", w=1.5)
op("max_pool", "nn", lambda g: g_pool(g, "max"), "{0}.max_pool{nd}d(kernel_size={k}, stride={s}, dilation={d}, padding={p}, ceil_mode={cm})",
   "F.max_pool{nd}d({0}, kernel_size={k}, stride={s}, padding={p}, dilation={d}, ceil_mode={cm})")
op("avg_pool", "nn", lambda g: g_pool(g, "avg"), "{0}.avg_pool{nd}d(kernel_size={k}, stride={s}, padding={p}, ceil_mode={cm}, count_include_pad={cip})",
   "F.avg_pool{nd}d({0}, kernel_size={k}, stride={s}, padding={p}, ceil_mode={cm}, count_include_pad={cip})")
op("adaptive_avg_pool2d", "nn", g_adaptive, "{0}.adaptive_avg_pool2d({o})", "F.adaptive_avg_pool2d({0}, {o})", w=0.5)
op("interpolate", "nn", g_interpolate, "{0}.interpolate({size}, mode={mode}, align_corners={ac})",
   "F.interpolate({0}, size={size}, mode={mode}, align_corners={ac})", w=0.5)
op("layernorm", "nn", g_norm, "{0}.layernorm({ax})", "F.layer_norm({0}, {ns})", w=0.5)
op("rmsnorm", "nn", g_norm, "{0}.rmsnorm({ax})", "F.rms_norm({0}, {ns}, eps=1e-6)", w=0.5)
op("cross_entropy", "nn", g_ce, "{0}.cross_entropy({1}, reduction={r}, label_smoothing={ls})",
   "F.cross_entropy({0}, {1}{long}, reduction={r}, label_smoothing={ls})", w=0.5)
op("nll_loss", "nn", g_nll, "{0}.nll_loss({1}, reduction={r})", "F.nll_loss({0}, {1}.long(), reduction={r})", w=0.3)
op("bce", "nn", lambda g: g_bce(g, False), "{0}.binary_crossentropy({1}, reduction={r})", "F.binary_cross_entropy({0}, {1}, reduction={r})", w=0.3)
op("bce_logits", "nn", lambda g: g_bce(g, True), "{0}.binary_crossentropy_logits({1}, reduction={r}, pos_weight={2})",
   "F.binary_cross_entropy_with_logits({0}, {1}, reduction={r}, pos_weight={2})", w=0.3)
op("mse_loss", "nn", g_mse, "{0}.mse_loss({1}, reduction={r})", "F.mse_loss({0}, {1}, reduction={r})", w=0.3)
op("sdpa", "nn", g_sdpa, "{0}.scaled_dot_product_attention({1}, {2}, attn_mask={3}, is_causal={causal}, scale={scale})",
   "sdpa_math({0}, {1}, {2}, attn_mask={3}, is_causal={causal}, scale={scale})", w=0.5)

op("arange", "creation", g_arange, "Tensor.arange({a}, {b}, {s}, device=DEV)", "torch.arange({a}, {b}, {s})", exact=True, w=0.3)
op("linspace", "creation", lambda g: ([], {"a": g.d.choice([0.0, -1.0, 2.5]), "b": g.d.choice([1.0, 10.0, -3.0]), "n": g.d.int(0, 6)}),
   "Tensor.linspace({a}, {b}, {n}, device=DEV)", "torch.linspace({a}, {b}, {n})", w=0.3)
def g_tensor(g):
  dt = g.d.choice([None, "int8", "uint8", "int16", "int32", "int64", "float32", "bool"])
  pool = [0, 1, -3, 7, True, 2.5, -0.5] + ([300, -1, 2 ** 31, -2 ** 31 - 1, 2 ** 40, nan, inf] if g.d.int(0, 2) == 0 else [])
  vals = [g.d.choice(pool) for _ in range(g.d.int(1, 4))]
  if g.d.int(0, 3) == 0: vals = [vals, [g.d.choice(pool) for _ in vals]]
  return [], {"v": vals, "dt": DT(dt) if dt else None}
op("tensor", "creation", g_tensor, "Tensor({v}, dtype={dt}, device=DEV)", "torch.tensor({v}, dtype={dt})", exact=True, w=0.3)
op("eye", "creation", lambda g: ([], {"n": g.d.int(0, 4), "m": g.d.int(0, 4)}), "Tensor.eye({n}, {m}, device=DEV)",
   "torch.eye({n}, {m})", exact=True, w=0.2)
op("full", "creation", lambda g: ([], {"s": g.rand_shape(), "v": g.d.choice([1.5, nan, -inf, 3, True, 1e-40])}),
   "Tensor.full({s}, {v}, device=DEV)", "torch.full({s}, {v})", exact=True, w=0.3)

FAMILIES = sorted({o.fam for o in OPS.values()})
# ops that sum many terms: their result depends on the order of the additions (and cancellations in them), so the noisy
# references perturb their inputs too, elementwise
ACCUMULATING = {"sum", "prod", "mean", "var", "std", "logsumexp", "softmax", "log_softmax", "cumsum", "cumprod", "logcumsumexp", "matmul",
                "einsum", "linear", "conv", "conv_transpose", "avg_pool", "adaptive_avg_pool2d", "interpolate", "layernorm", "rmsnorm",
                "cross_entropy", "nll_loss", "bce", "bce_logits", "mse_loss", "sdpa", "scatter_add"}

# ---------------------------------------------------------------- generation

class Gen:
  """Builds one case: nodes, their torch float32 values (for shapes, dtypes and value-dependent choices)."""
  def __init__(self, seed: int, index: int, ops: list[str], max_ops: int, specials: bool):
    self.d = rng_draw([seed, index])
    self.rng = np.random.default_rng(self.d.int(0, 2 ** 31 - 1))
    self.ops, self.max_ops, self.specials = ops, max_ops, specials
    self.nodes, self.vals = [], []
    self.grad = self.d.int(0, 3) > 0

  def shape(self, i): return tuple(self.vals[i].shape)
  def nd(self, i): return self.vals[i].ndim
  def kind(self, i): return tkind(self.vals[i])

  def rand_shape(self, max_nd=4):
    nd = self.d.choice([0, 1, 1, 2, 2, 2, 3, 3, 4][: 2 * max_nd + 1])
    s = [self.d.choice([1, 1, 2, 3, 4, 5, 6, 7]) for _ in range(nd)]
    if s and self.d.int(0, 15) == 0: s[self.d.int(0, nd - 1)] = 0
    while math.prod(s) > 256: s[s.index(max(s))] //= 2
    return tuple(s)

  def values(self, shape, kind, vals):
    r = self.rng
    if kind == "b": return r.random(shape) < 0.5
    if kind == "i":
      if isinstance(vals, tuple):
        what, n = vals[0], vals[1]
        if what == "index": return r.integers(-n, n, size=shape).astype(np.int32)
        if what == "index_pos": return r.integers(0, n, size=shape).astype(np.int32)
        if what == "target":   # class indices, sometimes torch's ignore_index
          v = r.integers(0, n, size=shape)
          return np.where(r.random(shape) < 0.1, -100, v).astype(np.int32)
        if what == "perm":   # distinct indices along dim vals[2] (scatter without repeats)
          d = vals[2]
          out = np.empty(shape, dtype=np.int32)
          for idx in np.ndindex(*[k for i, k in enumerate(shape) if i != d]):
            sl = list(idx)
            sl.insert(d, slice(None))
            out[tuple(sl)] = r.permutation(n)[: shape[d]]
          return out
      if vals == "nonzero": v = r.integers(1, 6, size=shape) * r.choice([-1, 1], size=shape)
      elif vals == "shift": v = r.integers(0, 5, size=shape)
      elif vals == "exp": v = r.integers(0, 4, size=shape)
      else:
        v = r.integers(-5, 6, size=shape) if r.random() < 0.7 else r.integers(-100, 101, size=shape)
        if self.specials and v.size and r.random() < 0.2: v.flat[r.integers(0, v.size, size=r.integers(1, 3))] = r.choice(SPECIAL_INT)
      return np.asarray(v, dtype=np.int32)
    if vals == "prob":
      v = r.uniform(0, 1, size=shape)
      if v.size and r.random() < 0.3: v.flat[r.integers(0, v.size)] = r.choice([0.0, 1.0])
      return v.astype(np.float32)
    mode = r.integers(0, 6)
    v = [lambda: r.uniform(-2, 2, shape), lambda: r.uniform(-2, 2, shape), lambda: r.uniform(-10, 10, shape),
         lambda: r.normal(0, 100, shape), lambda: r.integers(-3, 4, shape).astype(np.float64), lambda: r.uniform(0, 1, shape)][mode]()
    if vals == "pos": v = np.abs(v) + 0.1
    elif vals == "nonzero": v = np.where(v == 0, 1.0, v)
    elif self.specials and v.size and vals is None and r.random() < 0.4:
      pool = SPECIAL if r.random() < 0.6 else LARGE
      for i in r.integers(0, v.size, size=r.integers(1, max(2, v.size // 4 + 1))): v.flat[i] = pool[r.integers(0, len(pool))]
    return np.asarray(v, dtype=np.float32)

  def leaf(self, shape, kind="f", vals=None, grad=True) -> int:
    v = self.values(tuple(shape), kind, vals)
    self.nodes.append(Node("leaf", (), {"v": v, "grad": kind == "f" and self.grad and self.d.int(0, 4) > 0 and grad}))
    self.vals.append(torch.tensor(v))
    return len(self.nodes) - 1

  def pick(self, kinds="f", ok=lambda s: True, fresh=None, vals=None) -> int:
    """An existing node of one of `kinds` whose shape passes `ok` (recent ones first), else a new leaf."""
    if vals is None:
      cands = [i for i in range(len(self.nodes)) if self.kind(i) in kinds and ok(self.shape(i))]
      if cands and self.d.int(0, 9) < 8: return cands[-1] if self.d.bool() else self.d.choice(cands)
    kind = self.d.choice([k for k in kinds if k in "fib"] if "f" not in kinds or self.d.int(0, 3) == 0 else ["f"])
    if fresh is not None: shape = fresh()
    else:
      for _ in range(50):
        shape = self.rand_shape()
        if ok(shape): break
      else: raise Retry()
    return self.leaf(shape, kind, vals)

  def pick_broadcast(self, a, kinds, vals=None) -> int:
    """a node whose shape broadcasts with node a's (a new leaf of such a shape if none fits); vals: nonzero (divisors),
    shift (amounts 0-4), exp (integer exponents >= 0 of an integer base)"""
    s = self.shape(a)
    if vals == "exp" and self.kind(a) == "f": vals = None
    def ok(t):
      try: return math.prod(np.broadcast_shapes(s, t)) <= MAX_NUMEL
      except ValueError: return False
    def fresh():
      out = [1 if self.d.int(0, 3) == 0 else self.d.int(2, 3) if (k == 1 and self.d.int(0, 3) == 0) else k for k in s]
      if out and self.d.int(0, 3) == 0: out = out[self.d.int(1, len(out)):]
      elif len(out) < 4 and self.d.int(0, 5) == 0: out = [self.d.int(1, 3)] + out
      return tuple(out)
    if not vals: return self.pick(kinds, ok=ok, fresh=fresh)
    good = {"nonzero": lambda t: bool((t != 0).all()), "shift": lambda t: bool(((t >= 0) & (t < 8)).all()), "exp": lambda t: bool((t >= 0).all())}[vals]
    cands = [i for i in range(len(self.nodes)) if self.kind(i) in kinds and ok(self.shape(i)) and good(self.vals[i])]
    if cands and self.d.int(0, 2): return self.d.choice(cands)
    return self.leaf(fresh(), "f" if self.kind(a) == "f" and vals == "nonzero" else "i", vals)

  def add(self, name, ins, p) -> int:
    """append an op node, computing its torch value; raises Reject if torch rejects it or it is too large"""
    node = Node(name, tuple(ins), p, red=self.d.choice(["wsum"] * 6 + ["sum", "mean"]))
    self.nodes.append(node)
    try:
      v = eval_node(OPS[name], node, lambda i: self.vals[i], "pt", False)
      if not isinstance(v, torch.Tensor): raise TypeError(f"{name} gave {type(v).__name__}, not a tensor")
    except Exception as e:
      self.nodes.pop()
      raise Reject(e) from None
    if v.numel() > MAX_NUMEL:
      self.nodes.pop()
      raise Retry()
    self.vals.append(v.detach())
    return len(self.nodes) - 1

  def build(self) -> tuple[list, bool]:
    weights = np.array([OPS[o].w for o in self.ops])
    self.leaf(self.rand_shape(), self.d.choice(["f"] * 6 + ["i", "b"]))
    expect_raise = False
    for _ in range(self.d.int(1, self.max_ops)):
      for _try in range(30):
        name = self.ops[int(np.searchsorted(np.cumsum(weights), self.d.int(0, 10 ** 6 - 1) / 10 ** 6 * weights.sum(), side="right"))]
        n0 = len(self.nodes)
        try:
          got = OPS[name].gen(self)
          if got is None: raise Retry()
          mutated = self.d.int(0, 24) == 0 and (m := mutate(self, got[1])) is not None
          if mutated: got = (got[0], m)
          self.add(name, *got)
          self.nodes[-1].mutated = mutated
          break
        except Retry: pass
        except Reject:
          if mutated or self.d.int(0, 9) == 0:   # keep it: tinyweb must raise too
            self.nodes.append(Node(name, tuple(got[0]), got[1]))
            expect_raise = True
            break
        del self.nodes[n0:], self.vals[n0:]
      if expect_raise: break
    return self.nodes, expect_raise

class Retry(Exception): pass
class Reject(Exception): pass

# parameters both sides get alike, which a case may set to something likely invalid (0, negative, a float, a wrong length)
MUTABLE = {"s", "d", "p", "op", "shape", "order", "reps", "sizes", "c", "n", "m", "k", "a", "b", "r", "o", "size", "g"}
def mutate(g: Gen, p: dict) -> Optional[dict]:
  keys = [k for k, v in p.items() if k in MUTABLE and isinstance(v, (int, tuple, list)) and not isinstance(v, bool)]
  if not keys: return None
  k = g.d.choice(keys)
  v, bad = p[k], g.d.choice([0, -1, -2, 1.5])
  if isinstance(v, int): return {**p, k: bad}
  if not v or g.d.int(0, 3) == 0: return {**p, k: type(v)(v[:-1]) if v else type(v)([bad])}
  i = g.d.int(0, len(v) - 1)
  return {**p, k: type(v)(v[:i]) + type(v)([bad]) + type(v)(v[i + 1:])}

def generate(seed: int, index: int, ops: Optional[list[str]] = None, max_ops: int = 6, specials: bool = True) -> Case:
  g = Gen(seed, index, ops or list(OPS), max_ops, specials)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    nodes, expect_raise = g.build()
  used = {a for n in nodes for a in n.ins if isinstance(a, int)}
  outs = [i for i, n in enumerate(nodes) if n.op != "leaf" and i not in used] or [len(nodes) - 1]
  return prune(Case(nodes, outs, g.grad, seed, index, expect_raise))

def prune(case: Case) -> Case:
  """drop leaf outputs (unless there is nothing else) and nodes the outputs do not use, renumbering the rest"""
  case = replace(case, outs=list(dict.fromkeys(o for o in case.outs if case.nodes[o].op != "leaf")) or case.outs[-1:])
  keep, todo = set(), list(case.outs)
  while todo:
    i = todo.pop()
    if i in keep: continue
    keep.add(i)
    todo.extend(case.refs(i))
  order = sorted(keep)
  new = {o: j for j, o in enumerate(order)}
  nodes = [replace(case.nodes[o], ins=tuple(new[a] if isinstance(a, int) else a for a in case.nodes[o].ins)) for o in order]
  return replace(case, nodes=nodes, outs=[new[o] for o in case.outs])

# ---------------------------------------------------------------- evaluation

@lru_cache(maxsize=4096)
def _compile(code: str): return compile(code, "<fuzz>", "eval")

TW_NS = {"Tensor": Tensor, "dtypes": dtypes, "nan": nan, "inf": inf, "np": np, "setitem": setitem}
# the fuzzer's torch-side helpers (a repro imports those it uses from here)
TORCH_HELPERS = {"setitem": setitem, "sdpa_math": sdpa_math, "hardtanh_ref": hardtanh_ref, "hardswish_ref": hardswish_ref, "elu_ref": elu_ref, "selu_ref": selu_ref, "amax_ref": amax_ref, "amin_ref": amin_ref}
PT_NS = {"torch": torch, "F": F, "nan": nan, "inf": inf, "np": np, **TORCH_HELPERS}

def node_code(o: Op, node: Node, name: Callable, side: str, f64: bool) -> str:
  ins = [name(a) if isinstance(a, int) else lit(a, side, f64) for a in node.ins]
  params = {k: lit(v, side, f64) for k, v in node.p.items()}
  params["f32"] = lit(DT("float32"), side, f64)
  return o.code(side, ins, params)

INT_DIVISIONS = {"floordiv", "mod", "fmod", "div_floor", "div_trunc"}
INT_WIDENING = {"sum", "prod", "cumsum", "cumprod"}   # ops whose torch result for int32 or narrower ints is int64

def int_min_by_minus_one(vals: list) -> bool:
  """Whether an integer division of vals[0] by vals[1] meets INT_MIN / -1 (which torch computes with a trapping
  instruction: the process dies of SIGFPE instead of raising)."""
  try:
    dt = torch.result_type(*vals)   # (a Python int beside a tensor takes the tensor's type)
    if dt.is_floating_point or dt == torch.bool: return False
    a, b = (torch.as_tensor(v) for v in vals)
    return bool(((a == torch.iinfo(dt).min) & (b == -1)).any())
  except RuntimeError: return False   # (shapes that do not broadcast: torch raises on its own)

def eval_node(o: Op, node: Node, val: Callable, side: str, f64: bool, device: Optional[str] = None):
  env = dict(TW_NS if side == "tw" else PT_NS)
  env["DEV"] = device
  code = node_code(o, node, lambda i: f"v{i}", side, f64)
  for a in node.ins:
    if isinstance(a, int): env[f"v{a}"] = val(a)
  if side == "pt" and o.name in INT_DIVISIONS and int_min_by_minus_one([val(a) if isinstance(a, int) else getattr(a, "v", a) for a in node.ins][:2]):
    raise FloatingPointError(f"{o.name}: integer INT_MIN / -1, which kills torch (SIGFPE)")
  return eval(_compile(code), env)

def noisy(t: torch.Tensor, salt: int, eps: float) -> torch.Tensor:
  """t * (1 + eps*h) with h in [-1, 1) a hash of each value's bits: equal values get equal noise"""
  if not t.is_floating_point() or t.numel() == 0: return t
  h = t.detach().to(torch.float64).contiguous().view(torch.int64) ^ salt
  for k, c in ((31, 0x3f58476d1ce4e5b9), (29, 0x14d049bb133111eb), (32, 1)): h = (h ^ (h >> k)) * c   # mix every bit into the low ones
  return t * (1 + eps * ((h & 0xFFFF).to(torch.float64) / 32768 - 1)).to(t.dtype)

@dataclass
class Run:
  outs: dict = field(default_factory=dict)      # output node -> np array
  grads: dict = field(default_factory=dict)     # grad leaf -> np array or None
  err: Optional[tuple] = None                   # (stage, node index or None, exception)
  has_backward: bool = False
  vals: dict = field(default_factory=dict)      # torch: every node's value
  terms: list = field(default_factory=list)     # torch: the outputs in the loss

def loss_terms(case: Case, vals: dict, side: str, device=None):
  """the float outputs that take part in the loss, and the loss"""
  terms, loss = [], None
  for i in case.outs:
    v = vals[i]
    if not (v.is_floating_point() if side == "pt" else v.dtype.is_float) or not v.requires_grad: continue
    red = case.nodes[i].red
    if red == "wsum":
      c = np.resize(COT, tuple(v.shape))
      t = (v * (torch.tensor(c, dtype=v.dtype) if side == "pt" else Tensor(c, device=device))).sum()
    else: t = getattr(v, red)()
    terms.append(i)
    loss = t if loss is None else loss + t
  return terms, loss

def flush(t: torch.Tensor) -> torch.Tensor:
  """float32 denormals to (signed) zero"""
  return torch.where(t.abs() < 1.1754944e-38, t * 0, t) if t.dtype == torch.float32 else t

def scan_in_float32(x: torch.Tensor, ax: int, op: str) -> torch.Tensor:
  """cumsum/cumprod of float32 accumulated in float32, one element after the other (torch's CPU scans accumulate in
  float64)"""
  xs, outs = x.movedim(ax, -1), []
  for k in range(xs.shape[-1]): outs.append(xs[..., k] if not outs else outs[-1] + xs[..., k] if op == "cumsum" else outs[-1] * xs[..., k])
  return torch.stack(outs, -1).movedim(-1, ax) if outs else x.clone()

def run_torch(case: Case, f64=False, salt=None, eps=0.0, ftz=False, scans32=False) -> Run:
  """the graph in torch: float32, or float64 (f64), perturbed (salt, eps), with denormals flushed (ftz: every node's
  value, and inside torch's kernels where the CPU's flush-to-zero mode reaches), or with float32 scans accumulated in
  float32 (scans32: what a device without float64 does, README)"""
  out = Run()
  vals, leaves = {}, {}
  prev = torch.get_default_dtype()
  if f64: torch.set_default_dtype(torch.float64)
  if ftz: torch.set_flush_denormal(True)
  try:
    for i, node in enumerate(case.nodes):
      try:
        if node.op == "leaf":
          v = node.p["v"]
          t = torch.tensor(v.astype(np.float64) if f64 and v.dtype == np.float32 else v)
          if case.grad and node.p["grad"]: leaves[i] = t.requires_grad_(True)
          vals[i] = flush(t) if ftz else t
          continue
        perturb_inputs = salt is not None and node.op in ACCUMULATING
        v = eval_node(OPS[node.op], node, (lambda a: noisy(vals[a], salt * 31 + a, eps)) if perturb_inputs else vals.__getitem__, "pt", f64)
        if not isinstance(v, torch.Tensor): raise TypeError(f"{node.op} gave {type(v).__name__}")
        if scans32 and node.op in ("cumsum", "cumprod") and v.dtype == torch.float32 and vals[node.ins[0]].ndim:
          v = scan_in_float32(vals[node.ins[0]], node.p["ax"], node.op)
        if node.op in INT_WIDENING and v.dtype == torch.int64 and not any(vals[a].dtype == torch.int64 for a in node.ins if isinstance(a, int)):
          v = v.to(torch.int32)   # torch's int64 sum of narrower ints: tinyweb's is int32 (README), which later nodes see
        vals[i] = noisy(v, salt + i, eps) if salt is not None and not OPS[node.op].exact else flush(v) if ftz else v
      except Exception as e:
        out.err = ("build", i, e)
        return out
    out.outs, out.vals = {i: vals[i].detach().numpy() for i in case.outs}, vals
    if case.grad:
      out.terms, loss = loss_terms(case, vals, "pt")
      if loss is not None:
        try: loss.backward()
        except Exception as e:
          out.err = ("backward", None, e)
          return out
        out.has_backward = True
        out.grads = {i: (t.grad.numpy() if t.grad is not None else None) for i, t in leaves.items()}
  finally:
    torch.set_default_dtype(prev)
    torch.set_flush_denormal(False)
  return out

def run_tinyweb(case: Case, device: str, backward: bool) -> Run:
  out = Run()
  vals = {}
  for i, node in enumerate(case.nodes):
    try:
      if node.op == "leaf":
        vals[i] = Tensor(node.p["v"], device=device, requires_grad=True if case.grad and node.p["grad"] else None)
        continue
      v = eval_node(OPS[node.op], node, vals.__getitem__, "tw", False, device)
      if not isinstance(v, Tensor): raise TypeError(f"{node.op} gave {type(v).__name__}, not a Tensor")
      vals[i] = v
    except Exception as e:
      out.err = ("build", i, e)
      return out
  try:
    Tensor.realize_all(*[vals[i] for i in case.outs])
    for i in case.outs: out.outs[i] = vals[i].numpy()
  except Exception as e:
    out.err = ("realize", find_failing(case, vals), e)
    return out
  if backward:
    try:
      _, loss = loss_terms(case, vals, "tw", device)
      if loss is None: raise RuntimeError("no float output takes part in the loss (torch's does)")
      loss.backward()
      leaves = [i for i, n in enumerate(case.nodes) if n.op == "leaf" and case.grad and n.p["grad"]]
      Tensor.realize_all(*[vals[i].grad for i in leaves if vals[i].grad is not None])
      out.grads = {i: (vals[i].grad.numpy() if vals[i].grad is not None else None) for i in leaves}
      out.has_backward = True
    except Exception as e:
      out.err = ("backward", None, e)
  return out

def find_failing(case: Case, vals: dict) -> Optional[int]:
  """which output fails to realize on its own (the first one)"""
  for i in case.outs:
    try: vals[i].numpy()
    except Exception: return i
  return None

# ---------------------------------------------------------------- comparison

@dataclass
class Outcome:
  status: str                  # pass, fail, raised (both raised), torch-raised (torch raised, tinyweb did not), unsupported,
                               # refused (an out-of-range int scalar), refused-arg (a mutated argument torch accepts)
  kind: str = ""               # value, nan, inf, shape, dtype, crash; grad-value, grad-nan, grad-inf, grad-crash, grad-missing
  op: str = ""                 # the op blamed: of the mismatching output, of the op that raised, or of the case's last op
  detail: str = ""
  sig: tuple = ()              # what shrinking must keep
  unchecked: int = 0           # outputs (and the grads, as 1) not compared: indeterminate on a finite-math device

F32_MAX = float(np.finfo(np.float32).max)
def classes(a):   # 0 NaN, 1 +inf, 2 -inf, 3 finite
  return np.where(np.isnan(a), 0, np.where(a == inf, 1, np.where(a == -inf, 2, 3)))

def compare(got: np.ndarray, refs: list, what: str, grad_scale: bool = False, finite_math: bool = False) -> Optional[tuple[str, str]]:
  """(kind, detail) of the first mismatch of got against the reference runs (refs[0]: float32, refs[1]: float64).
  finite_math: the device may give any value where IEEE arithmetic gives NaN or inf (WGSL's finite math assumption)"""
  r0 = refs[0]
  if tuple(got.shape) != tuple(r0.shape): return "shape", f"{what}: shape {tuple(got.shape)}, torch {tuple(r0.shape)}"
  if npkind(got) != npkind(r0): return "dtype", f"{what}: dtype {got.dtype}, torch {r0.dtype}"
  if got.size == 0: return None
  with np.errstate(all="ignore"): return _compare(got, refs, what, grad_scale, finite_math)

def _compare(got, refs, what, grad_scale, finite_math):
  r0 = refs[0]
  if npkind(got) != "f":   # where torch's integers are wider (its int64 sums of int32), they wrap like tinyweb's
    R = np.stack([r.astype(got.dtype) if got.dtype.itemsize < r.dtype.itemsize else r for r in refs])
    certain = (R == R[0]).all(0)
    bad = certain & (got != R[0])
    if bad.any():
      i = tuple(int(x) for x in np.argwhere(bad)[0])
      return "value", f"{what}: {int(bad.sum())}/{bad.size} elements differ; at {i}: tinyweb {got[i]}, torch {r0[i]}"
    return None
  R = np.stack([r.astype(np.float64) for r in refs])
  g = got.astype(np.float64)
  C, cg = classes(R), classes(g)
  bad_cls = ~(C == cg).any(0)
  center = R[1] if len(R) > 1 else R[0]
  # a float64 value beyond float32's range: a float32 sum overflows on the way, to either inf or to NaN (both met),
  # depending on an order of additions no one fixes, so any of those is as good as the float32 reference's class
  bad_cls &= ~((np.abs(center) > F32_MAX) & np.isfinite(center) & (cg != 3))
  # likewise where torch's float32 run overflowed on the way to a float64 value within range (a product or partial sum
  # beyond float32's range): inf, -inf or NaN then depends on that order and on fused multiply-adds (a*b + c rounded
  # once), which torch's kernels use in some places and not others, so any non-finite class will do
  bad_cls &= ~((C[0] != 3) & (classes(center) == 3) & (cg != 3))
  if finite_math: bad_cls &= (C == 3).all(0)   # a NaN or inf result is indeterminate: any value will do
  fin = (C == 3).all(0) & (cg == 3)
  spread = np.where(fin, np.abs(R - center).max(0), 0)
  atol = ATOL * (max(1.0, float(np.abs(np.where(fin, center, 0)).max())) if grad_scale else 1.0)
  allowed = atol + RTOL * np.abs(center) + SLACK * spread
  err = np.where(fin, np.abs(g - center), 0)
  bad_val = fin & ~(err <= allowed)
  if not bad_cls.any() and not bad_val.any(): return None
  if bad_cls.any():
    i = tuple(np.argwhere(bad_cls)[0])
    kind = "nan" if np.isnan(g[i]) or (C[(slice(None),) + i] == 0).any() else "inf"
  else:
    i = np.unravel_index(int(np.argmax(np.where(bad_val, err - allowed, -np.inf))), got.shape) if got.ndim else ()
    kind = "value"
  n_bad = int((bad_cls | bad_val).sum())
  return kind, (f"{what}: {n_bad}/{got.size} elements off; at {tuple(int(x) for x in i)}: tinyweb {float(got[i])!r}, torch {float(r0[i])!r} "
                f"(float64 {float(center[i])!r}{', allowed ' + format(allowed[i], '.3g') if not bad_cls.any() else ''})")

def exc_line(e: BaseException) -> str:
  s = str(e).strip().splitlines()
  return f"{type(e).__name__}: {s[0] if s else ''}"[:300]

def exc_sig(e: BaseException) -> str:
  """the error without its numbers and shapes (one class for all of them)"""
  return re.sub(r"\(#(, #)*,?\)", "(..)", re.sub(r"-?\d+", "#", exc_line(e)))[:120]

def out_of_range_scalar(e: BaseException) -> bool:
  """tinyweb's documented rule (README): a Python int outside an int tensor's dtype raises, where torch wraps it"""
  return isinstance(e, OverflowError) and "is out of range for" in str(e) and "use a wider dtype" in str(e)

def unsupported(e: BaseException, device: str) -> bool:
  return isinstance(e, TypeError) and f"is not supported on {device}" in str(e)

@lru_cache(maxsize=None)
def flushes_denormals(device: str) -> bool:
  """whether the device flushes float32 denormals to zero, in arithmetic or in exp2 (GPUs may: WGSL and OpenCL allow it)"""
  return 0.0 in (Tensor([1e-40], device=device) * 3.0).cat(Tensor([-130.0], device=device).exp2()).numpy().tolist()

def finite_math(device: str) -> bool:
  """WGSL lets a shader assume that no overflow, infinity or NaN occurs (WGSL 15.7.2, "Finite Math Assumption"): where the
  IEEE result would be one, the value is indeterminate, and lavapipe does fold x - x to 0 and 0 * inf to 0"""
  return device.split(":")[0] == "WEBGPU"

def after_overflow(case: Case, vals: dict) -> tuple[set, bool]:
  """For a finite-math device: the nodes computed from an overflow or an invalid operation (a node whose float32 torch
  value holds an inf or NaN where its inputs hold none: x / 0, exp(100), 0 * inf of a huge product), whose values WGSL
  makes indeterminate (hardsigmoid(x / 0) may be any number there, not 1); and whether the graph has such a node (then
  its gradients are indeterminate too). The node itself is still compared: its finite elements must be right."""
  def nonfinite(t) -> bool: return isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all())
  born, after = set(), set()
  for i, node in enumerate(case.nodes):
    if node.op == "leaf": continue
    ins = [a for a in node.ins if isinstance(a, int)]
    if any(a in born or a in after for a in ins): after.add(i)
    if nonfinite(vals[i]) and not any(nonfinite(vals[a]) for a in ins): born.add(i)
  return after, bool(born)

def check(case: Case, device: str, grad: bool = True) -> Outcome:
  """run one case in torch (the references) and on the device, and compare"""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    ref32 = run_torch(case)
    refs = [ref32, run_torch(case, f64=True), run_torch(case, True, 0x5bd1e995, NOISE64), run_torch(case, False, 0x1b873593, NOISE32)]
    if flushes_denormals(device): refs.append(run_torch(case, ftz=True))
    if not Device[device].has_dtype(dtypes.float64): refs.append(run_torch(case, scans32=True))
  last = case.nodes[-1].op
  if ref32.err and ref32.err[0] == "build":   # torch rejected the graph: tinyweb must raise too
    tw = run_tinyweb(case, device, False)
    _, i, e = ref32.err
    if tw.err: return Outcome("raised", op=case.nodes[i].op)
    return Outcome("torch-raised", op=case.nodes[i].op, detail=f"torch raised {exc_line(e)}; tinyweb did not")
  refs = [r for r in refs if r.err is None or r.err[0] == "backward"]
  refs = [r for r in refs if all(r.outs[i].shape == ref32.outs[i].shape for i in case.outs)]
  do_grad = grad and case.grad and ref32.has_backward
  tw = run_tinyweb(case, device, do_grad)
  if tw.err:
    stage, i, e = tw.err
    if unsupported(e, device): return Outcome("unsupported", detail=exc_line(e))
    if out_of_range_scalar(e): return Outcome("refused", detail=exc_line(e))
    if stage == "build" and i is not None and case.nodes[i].mutated and isinstance(e, ValueError):   # (conv_transpose's dilation 0)
      return Outcome("refused-arg", op=case.nodes[i].op, detail=exc_line(e))
    if stage != "backward":
      blamed = case.nodes[i].op if i is not None else last
      return Outcome("fail", "crash", blamed, f"{stage}: {exc_line(e)}", ("crash", exc_sig(e)))
  after, overflowed = after_overflow(case, ref32.vals) if finite_math(device) else (set(), False)
  for i in case.outs:
    if i in after: continue
    bad = compare(tw.outs[i], [r.outs[i] for r in refs], f"output v{i} ({case.nodes[i].op})", finite_math=finite_math(device))
    if bad: return Outcome("fail", bad[0], case.nodes[i].op, bad[1], (value_sig(bad[0]),))
  unchecked = len(after & set(case.outs)) + (do_grad and overflowed)
  if tw.err:   # backward raised
    e = tw.err[2]
    if overflowed: return Outcome("pass", unchecked=unchecked)
    return Outcome("fail", "grad-crash", last, f"backward: {exc_line(e)}", ("grad-crash", exc_sig(e)))
  if not do_grad or overflowed: return Outcome("pass", unchecked=unchecked)
  grefs = [r for r in refs if r.has_backward]
  for i, g in tw.grads.items():
    rg = [r.grads.get(i) for r in grefs]
    rg = [x if x is not None else np.zeros(case.nodes[i].p["v"].shape, np.float32) for x in rg]
    if g is None:
      if rg and rg[0].any(): return Outcome("fail", "grad-missing", consumer_op(case, i), f"leaf v{i}: no grad, torch's is nonzero", ("grad-missing",))
      continue
    bad = compare(g, rg, f"grad of leaf v{i}", grad_scale=True, finite_math=finite_math(device))
    if bad: return Outcome("fail", "grad-" + bad[0], consumer_op(case, i), bad[1], ("grad-" + value_sig(bad[0]),))
  return Outcome("pass")

def value_sig(kind: str) -> str: return "values" if kind in ("value", "nan", "inf") else kind   # a wrong value, whichever class

def consumer_op(case: Case, leaf: int) -> str:
  """the op a leaf's grad comes from (its first consumer)"""
  for n in case.nodes:
    if leaf in n.ins: return n.op
  return "leaf"

# ---------------------------------------------------------------- shrinking

SIMPLE_PARAMS = {"kd", "cm", "cip", "causal", "s", "d", "p", "op", "ls", "c", "scale", "r"}   # each used alike by both sides

def torch_run(case: Case) -> Run:
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return run_torch(case)

def as_leaf_array(t: torch.Tensor) -> np.ndarray:
  v = t.numpy()
  if v.dtype == np.int64 and (v.size == 0 or (v.min() >= -2 ** 31 and v.max() < 2 ** 31)): v = v.astype(np.int32)
  return v

def with_node(case: Case, i: int, node: Node) -> Case:
  return replace(case, nodes=case.nodes[:i] + [node] + case.nodes[i + 1:])

def simpler_values(v: np.ndarray):
  if v.size == 0: return
  if v.dtype == np.bool_:
    yield np.ones_like(v); yield np.zeros_like(v); return
  if v.dtype.kind in "iu":
    yield np.ones_like(v)
    yield np.clip(v, -3, 3).astype(v.dtype)
    return
  f = v.astype(np.float64)
  special = ~np.isfinite(f) | (np.abs(f) > 1e3) | ((f != 0) & (np.abs(f) < 1e-3)) | ((f == 0) & np.signbit(f))
  if special.any() and not special.all():
    yield np.ones_like(v)
    yield np.where(special, v, 1.0).astype(v.dtype)
  else: yield np.ones_like(v)
  pos = np.flatnonzero(special)
  groups = [pos[: len(pos) // 2], pos[len(pos) // 2:]] if len(pos) > 8 else [pos[k:k + 1] for k in range(len(pos))]
  for grp in groups:   # drop special values (to 1.0)
    if len(grp):
      w = v.copy(); w.flat[grp] = 1.0; yield w
  for r in (np.round(f, 1), np.round(f)):
    w = np.where(special, f, r).astype(v.dtype)
    if not np.array_equal(w, v, equal_nan=True): yield w

def simpler_param(v):
  if isinstance(v, bool): return [False] if v else []
  if isinstance(v, int): return [x for x in (1, 0) if x != v and abs(x) < abs(v)]
  if isinstance(v, float): return [0.0] if v else []
  if isinstance(v, str): return ["sum"] if v in ("mean", "none") else []
  if isinstance(v, tuple) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
    return [t for t in ((1,) * len(v), (0,) * len(v)) if t != v and all(abs(a) <= abs(b) for a, b in zip(t, v))]
  return []

def candidates(case: Case, sig: tuple):
  """smaller or simpler versions of a failing case, the biggest simplifications first"""
  if len(case.outs) > 1:
    for o in case.outs: yield prune(replace(case, outs=[o]))
  if case.grad and not sig[0].startswith("grad"): yield replace(case, grad=False)
  vals = torch_run(case).vals
  ops = [i for i, n in enumerate(case.nodes) if n.op != "leaf"]
  for i in ops:   # an intermediate node becomes the output
    if i not in case.outs: yield prune(replace(case, outs=[i]))
  for i in reversed(ops):   # cut: a node becomes a leaf holding torch's value of it (everything above it goes)
    t = vals[i].detach()
    if any(case.refs(i)):
      yield prune(with_node(case, i, Node("leaf", (), {"v": as_leaf_array(t), "grad": t.is_floating_point()})))
  for i in reversed(ops):   # bypass: the node's users take one of its inputs instead
    for j in dict.fromkeys(case.refs(i)):
      sub = lambda a: j if a == i else a  # noqa: E731
      nodes = [replace(n, ins=tuple(sub(a) if isinstance(a, int) else a for a in n.ins)) for n in case.nodes]
      yield prune(replace(case, nodes=nodes, outs=[sub(o) for o in case.outs]))
  leaves = [i for i, n in enumerate(case.nodes) if n.op == "leaf"]
  if case.grad:
    for i in leaves:
      if case.nodes[i].p["grad"] and sum(case.nodes[k].p["grad"] for k in leaves) > 1:
        yield with_node(case, i, replace(case.nodes[i], p={**case.nodes[i].p, "grad": False}))
  for i in leaves:   # smaller leaves: halves, then single slices, then without size-1 dims
    v = case.nodes[i].p["v"]
    if 1 in v.shape: yield with_node(case, i, replace(case.nodes[i], p={**case.nodes[i].p, "v": v.reshape([k for k in v.shape if k != 1])}))
    for d, n in enumerate(v.shape):
      for a, b in ([(0, n // 2), (n // 2, n)] if n > 3 else []) + [(k, k + 1) for k in range(n) if n > 1]:
        yield with_node(case, i, replace(case.nodes[i], p={**case.nodes[i].p, "v": np.take(v, range(a, b), axis=d)}))
  for i in leaves:   # simpler values
    for w in simpler_values(case.nodes[i].p["v"]):
      yield with_node(case, i, replace(case.nodes[i], p={**case.nodes[i].p, "v": w}))
  for i in ops:   # simpler scalar operands and parameters
    n = case.nodes[i]
    for k, a in enumerate(n.ins):
      if isinstance(a, Const) and a.v is not None and not isinstance(a.v, bool):
        for c in (1.0, 2.0, 0.0) if isinstance(a.v, float) else (1, 2, 0):
          if c != a.v: yield with_node(case, i, replace(n, ins=n.ins[:k] + (Const(c),) + n.ins[k + 1:]))
    for key in SIMPLE_PARAMS & set(n.p):
      for c in simpler_param(n.p[key]): yield with_node(case, i, replace(n, p={**n.p, key: c}))
    if n.red != "sum" and i in case.outs: yield with_node(case, i, replace(n, red="sum"))

def fingerprint(case: Case) -> tuple:
  return (case.grad, tuple(case.outs), tuple((n.op, n.ins, n.red, tuple((k, v.tobytes() + str(v.shape).encode() + v.dtype.str.encode()
          if isinstance(v, np.ndarray) else repr(v)) for k, v in n.p.items())) for n in case.nodes))

def shrink(case: Case, device: str, outcome: Outcome, grad: bool, max_checks=200, max_time=120.0) -> tuple[Case, Outcome, int]:
  """Greedy: take the first candidate that fails the same way, until none does (or the budget is spent). First the
  failure must stay in the same op; then it may move to another op of what is left (upstream, to the op at fault)."""
  t0, checks, seen = time.perf_counter(), 0, {fingerprint(case)}
  def same_op(out): return out.sig == outcome.sig and out.op == outcome.op
  for accept, budget in ((same_op, max_checks * 2 // 3), (lambda out: out.sig == outcome.sig and out.op in {n.op for n in case.nodes}, max_checks)):
    progress = True
    while progress and checks < budget and time.perf_counter() - t0 < max_time:
      progress = False
      try: cands = candidates(case, outcome.sig)
      except Exception: break
      for cand in cands:
        if checks >= budget or time.perf_counter() - t0 > max_time: break
        if not cand.outs or (fp := fingerprint(cand)) in seen: continue
        seen.add(fp)
        checks += 1
        try: out = check(cand, device, grad)
        except Exception: continue
        if out.status == "fail" and accept(out):
          case, outcome, progress = cand, out, True
          break
    seen = {fingerprint(case)}
  return case, outcome, checks

# ---------------------------------------------------------------- repro

def num(x: np.ndarray) -> str:
  """one element (a 0-d array), as short as it can be written and still read back to the same value"""
  if x.dtype == np.bool_: return str(bool(x))
  if x.dtype.kind in "iu": return str(int(x))
  if math.isnan(x): return "nan"
  if math.isinf(x): return "inf" if x > 0 else "-inf"
  return str(x.astype(np.float32)) if x.dtype == np.float32 else repr(float(x))

def array_code(v: np.ndarray) -> str:
  dt = "bool" if v.dtype == np.bool_ else v.dtype.name
  if v.size == 0: return f"np.zeros({v.shape}, np.{dt})"
  def rec(a): return num(a) if a.ndim == 0 else "[" + ", ".join(rec(x) for x in a) + "]"
  return f"np.array({rec(v)}, np.{dt})"

def repro(case: Case, device: str, outcome: Outcome) -> str:
  """a standalone tinyweb + torch script that shows the failure"""
  head = f"fuzz seed {case.seed} case {case.index}" if case.seed is not None else "fuzz case"
  lines = [f"# {head} on {device}: {outcome.kind} in {outcome.op}: {outcome.detail}",
           "import numpy as np, torch, torch.nn.functional as F", "from tinyweb import Tensor, dtypes",
           f"nan, inf, DEV = float('nan'), float('inf'), {device!r}"]
  grad = case.grad and outcome.kind.startswith("grad")
  helpers_at = len(lines)
  for i, n in enumerate(case.nodes):
    if n.op == "leaf":
      rg = ", requires_grad=True" if grad and n.p["grad"] else ""
      lines.append(f"x{i} = {array_code(n.p['v'])}")
      lines.append(f"t{i} = Tensor(x{i}, device=DEV{rg}); p{i} = torch.tensor(x{i}{rg})")
    else:
      o = OPS[n.op]
      lines.append(f"t{i} = {node_code(o, n, lambda a: f't{a}', 'tw', False)}; p{i} = {node_code(o, n, lambda a: f'p{a}', 'pt', False)}")
  used = [f for f in TORCH_HELPERS if any(f + "(" in line for line in lines)]
  if used: lines.insert(helpers_at, f"from tests.fuzz import {', '.join(used)}   # (run from the repository root)")
  if not grad:
    for i in case.outs: lines.append(f"print('tinyweb', t{i}.numpy()); print('torch  ', p{i}.detach().numpy())")
    return "\n".join(lines)
  r = torch_run(case)
  terms = [f"({{}}{i} * {{}}(np.resize(COT, {tuple(r.vals[i].shape)}){{}})).sum()" if case.nodes[i].red == "wsum" else f"{{}}{i}.{case.nodes[i].red}()"
           for i in r.terms]
  if any("COT" in t for t in terms): lines.append(f"COT = np.array({COT.tolist()}, np.float32)")
  tw = " + ".join(t.format("t", "Tensor", ", device=DEV") if "COT" in t else t.format("t") for t in terms)
  pt = " + ".join(t.format("p", "torch.tensor", "") if "COT" in t else t.format("p") for t in terms)
  lines.append(f"({tw}).backward(); ({pt}).backward()")
  for i, n in enumerate(case.nodes):
    if n.op == "leaf" and n.p["grad"]:
      lines.append(f"print('tinyweb grad x{i}', t{i}.grad.numpy() if t{i}.grad is not None else None); print('torch   grad x{i}', p{i}.grad)")
  return "\n".join(lines)

# ---------------------------------------------------------------- the command line

def select_ops(only: Optional[str], skip: Optional[str]) -> list[str]:
  def names(s):
    out = set()
    for x in filter(None, (t.strip() for t in s.split(","))):
      if x in FAMILIES: out |= {n for n, o in OPS.items() if o.fam == x}
      elif x in OPS: out.add(x)
      else: raise SystemExit(f"unknown op or family {x!r}; ops: {', '.join(OPS)}; families: {', '.join(FAMILIES)}")
    return out
  ops = names(only) if only else set(OPS)
  if skip: ops -= names(skip)
  if not ops: raise SystemExit("no ops left to draw")
  return [n for n in OPS if n in ops]

def main(argv=None):
  ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[0])
  ap.add_argument("--cases", type=int, default=100, help="number of cases (default 100)")
  ap.add_argument("--device", default=None, help="tinyweb device (default: Device.DEFAULT)")
  ap.add_argument("--seed", type=int, default=0, help="seed: case i of seed S is always the same graph")
  ap.add_argument("--start", type=int, default=0, help="index of the first case")
  ap.add_argument("--ops", help="draw only these ops or families (comma-separated; see --list-ops)")
  ap.add_argument("--skip-ops", help="never draw these ops or families (e.g. known failure classes)")
  ap.add_argument("--list-ops", action="store_true", help="list the ops by family and exit")
  ap.add_argument("--max-ops", type=int, default=6, help="at most this many ops per graph (default 6)")
  ap.add_argument("--no-grad", action="store_true", help="compare forward values only")
  ap.add_argument("--no-specials", action="store_true", help="no special values (inf, NaN, huge, tiny, ...) in the leaves")
  ap.add_argument("--no-shrink", action="store_true", help="do not shrink failures")
  ap.add_argument("--shrink-per-class", type=int, default=1, help="failures to shrink per class (op + kind + error) (default 1)")
  ap.add_argument("--shrink-checks", type=int, default=200, help="at most this many candidate runs per shrink (default 200)")
  ap.add_argument("--shrink-time", type=float, default=120, help="at most this many seconds per shrink (default 120)")
  ap.add_argument("--time-limit", type=float, default=None, help="stop starting new cases after this many seconds")
  ap.add_argument("--show", action="store_true", help="print every case's program")
  ap.add_argument("-q", "--quiet", action="store_true", help="print only the summary and the shrunk repros")
  a = ap.parse_args(argv)
  if a.list_ops:
    for fam in FAMILIES: print(f"{fam}: {', '.join(n for n, o in OPS.items() if o.fam == fam)}")
    return 0
  device = (a.device or Device.DEFAULT).upper()
  ok, why = Device.check(device)
  if not ok: raise SystemExit(f"device {device} is unavailable: {why}")
  ops = select_ops(a.ops, a.skip_ops)
  stats: dict = {"pass": 0, "raised": 0, "torch-raised": 0, "unsupported": 0, "refused": 0, "refused-arg": 0, "fail": 0, "unchecked": 0}
  classes_: dict = {}          # (op, kind, error) -> [count, first case, what its first case shrank to]
  torch_raised: dict = {}      # op -> [count, example]
  shrunk: dict = {}            # shrunk signature -> (ops of the minimal graph, repro, devices...)
  t_start, t_cases, n = time.perf_counter(), 0.0, 0
  for i in range(a.start, a.start + a.cases):
    if a.time_limit and time.perf_counter() - t_start > a.time_limit: break
    t0 = time.perf_counter()
    case = generate(a.seed, i, ops, a.max_ops, not a.no_specials)
    if a.show: print(f"--- case {i}\n" + repro(case, device, Outcome("show", "", "", "")))
    try: out = check(case, device, not a.no_grad)
    except Exception as e:
      out = Outcome("fail", "fuzzer-error", case.nodes[-1].op, exc_line(e), ("fuzzer-error",))
      traceback.print_exc()
    t_cases += time.perf_counter() - t0
    n += 1
    stats[out.status] += 1
    stats["unchecked"] += out.unchecked > 0
    if out.status == "torch-raised":
      torch_raised.setdefault(out.op, [0, out.detail])[0] += 1
      continue
    if out.status != "fail": continue
    key = (out.op, out.kind, out.sig[1] if len(out.sig) > 1 else "")
    entry = classes_.setdefault(key, [0, i, ""])
    entry[0] += 1
    if not a.quiet: print(f"case {i}: {out.kind} in {out.op}: {out.detail}", flush=True)
    if a.no_shrink or entry[0] > a.shrink_per_class: continue
    small, sout, checks = shrink(case, device, out, not a.no_grad, a.shrink_checks, a.shrink_time)
    ops_in = tuple(sorted({nd.op for nd in small.nodes if nd.op != "leaf"}))
    skey = (ops_in, sout.kind, sout.sig[1] if len(sout.sig) > 1 else "")
    text = repro(small, device, sout)
    entry[2] = f"-> {sout.kind} in {'+'.join(nd.op for nd in small.nodes if nd.op != 'leaf')}"
    if skey not in shrunk:
      shrunk[skey] = text
      if not a.quiet: print(f"  shrunk in {checks} runs to {len(small.nodes)} nodes:\n" + "\n".join("    " + l for l in text.splitlines()), flush=True)
    elif not a.quiet: print(f"  shrinks to the same minimal graph as before ({', '.join(ops_in)}: {sout.kind})")
  total = time.perf_counter() - t_start
  print(f"\n=== fuzz summary: device {device}, seed {a.seed}, cases {a.start}..{a.start + n - 1} ({n}), "
        f"{'forward only' if a.no_grad else 'forward and gradients'}, {len(ops)} ops")
  print(f"passed {stats['pass']}, both raised {stats['raised']}, device refused a dtype {stats['unsupported']}, "
        f"refused an out-of-range int scalar {stats['refused']}, refused an invalid argument torch accepts {stats['refused-arg']}, "
        f"torch raised but tinyweb did not {stats['torch-raised']} (skipped), "
        f"FAILED {stats['fail']}")
  if stats["unchecked"]: print(f"  ({stats['unchecked']} passed cases computed some outputs or their gradients from an overflow, x / 0 or the "
                               f"like: {device} may assume none occurs (WGSL's finite math), so those values were not compared)")
  print(f"time {total:.1f} s ({t_cases:.1f} s in cases: {n / max(t_cases, 1e-9):.2f} cases/s; the rest shrinking)")
  if classes_:
    print("failures by class (op, kind[, error]): count, first case[, what it shrank to]")
    for (o, k, e), (c, first, to) in sorted(classes_.items(), key=lambda kv: -kv[1][0]):
      print(f"  {o:<20} {k:<12} {c:>4}  case {first}  {e} {to}")
  if torch_raised:
    print("torch raised, tinyweb did not (skipped):")
    for o, (c, ex) in sorted(torch_raised.items(), key=lambda kv: -kv[1][0]): print(f"  {o:<20} {c:>4}  {ex[:160]}")
  if shrunk and a.quiet:
    print("minimal repros:")
    for text in shrunk.values(): print(text + "\n")
  return 1 if stats["fail"] else 0

if __name__ == "__main__":
  sys.exit(main())
