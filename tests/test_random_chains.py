"""Randomized differential tests: random chains of 3-8 ops (elementwise unary/binary with broadcasting, movement ops,
reductions) on random shapes (rank 0-4, dims 1-5), built identically in torch and tinyweb. Forward values are
compared for every chain, gradients of every leaf for float chains.

Torch runs each chain twice, in float64 (the reference) and in float32; the allowed error grows with the
float32-vs-float64 difference, so numerically touchy chains don't fail spuriously while wrong results do.
Non-smooth points are kept out of gradient checks: relu/abs/leaky_relu/where near 0, maximum/minimum near ties and
max-reductions with near-tied maxima are replaced by a smooth op (the replacement is logged).

The number of examples is fixed (derandomized hypothesis, no shrinking, no example database); scale it with
TW_CHAIN_EXAMPLES (float chains with grads), TW_CHAIN_EXAMPLES_FWD and TW_CHAIN_EXAMPLES_INT."""
import math, os
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, Phase, given, settings, strategies as st
from tinyweb import Tensor
from helpers import Draw, rng_draw

MAX_NUMEL = 720
ATOL, RTOL, SLACK32 = 2e-5, 1e-3, 8.0   # allowed |got-ref| <= ATOL*scale + RTOL*|ref| + SLACK32*|ref32-ref64|
GRAD_ATOL = 1e-4

# ---------------------------------------------------------------- drawing random choices

def hyp_draw(data): return Draw(lambda lo, hi: data.draw(st.integers(lo, hi)))

# ---------------------------------------------------------------- op tables: (name, torch fn, tinyweb fn)

def same(f): return f, f

FLOAT_UNARY = [
  ("neg", *same(lambda x: -x)),
  ("exp(tanh)", *same(lambda x: x.tanh().exp())),
  ("log(x*x+1)", *same(lambda x: (x * x + 1).log())),
  ("sqrt(x*x+1)", *same(lambda x: (x * x + 1).sqrt())),
  ("sigmoid", *same(lambda x: x.sigmoid())),
  ("tanh", *same(lambda x: x.tanh())),
  ("sin", *same(lambda x: x.sin())),
  ("cos", *same(lambda x: x.cos())),
  ("x*1.5", *same(lambda x: x * 1.5)),
  ("0.5-x", *same(lambda x: 0.5 - x)),
  ("x+2", *same(lambda x: x + 2)),
  ("x/4", *same(lambda x: x / 4)),
  ("1/(x*x+1)", *same(lambda x: 1 / (x * x + 1))),
  ("2**tanh", *same(lambda x: 2 ** x.tanh())),
  ("(x*x+1)**0.75", *same(lambda x: (x * x + 1) ** 0.75)),
  ("x*tanh(x)", *same(lambda x: x * x.tanh())),
  ("softplus", lambda x: F.softplus(x), lambda x: x.softplus()),
  ("gelu", lambda x: F.gelu(x, approximate="tanh"), lambda x: x.gelu()),
]
# non-smooth at 0: only applied when no element is near 0
FLOAT_KINKED = [
  ("relu", *same(lambda x: x.relu())),
  ("abs", *same(lambda x: x.abs())),
  ("leaky_relu", lambda x: F.leaky_relu(x, 0.1), lambda x: x.leaky_relu(0.1)),
]
FLOAT_BINARY = [
  ("add", *same(lambda x, y: x + y)),
  ("radd", *same(lambda x, y: y + x)),
  ("sub", *same(lambda x, y: x - y)),
  ("rsub", *same(lambda x, y: y - x)),
  ("mul", *same(lambda x, y: x * y)),
  ("rmul", *same(lambda x, y: y * x)),
  ("div", *same(lambda x, y: x / (y * y + 0.5))),
  ("rdiv", *same(lambda x, y: y / (x * x + 0.5))),
]
INT_UNARY = [
  ("neg", *same(lambda x: -x)),
  ("x*2", *same(lambda x: x * 2)),
  ("3-x", *same(lambda x: 3 - x)),
  ("x+1", *same(lambda x: x + 1)),
  ("x<<1", *same(lambda x: x << 1)),
  ("abs", *same(lambda x: x.abs())),
]
INT_BINARY = [
  ("add", *same(lambda x, y: x + y)),
  ("sub", *same(lambda x, y: x - y)),
  ("mul", *same(lambda x, y: x * y)),
  ("rmul", *same(lambda x, y: y * x)),
  ("maximum", lambda x, y: torch.maximum(x, y), lambda x, y: x.maximum(y)),
  ("minimum", lambda x, y: torch.minimum(x, y), lambda x, y: x.minimum(y)),
  ("where", lambda x, y: torch.where(x > 0, x, y), lambda x, y: (x > 0).where(x, y)),
  ("and", *same(lambda x, y: x & y)),
  ("or", *same(lambda x, y: x | y)),
  ("xor", *same(lambda x, y: x ^ y)),
]
INT_DIVISION = [  # the right operand is drawn nonzero
  ("floordiv", *same(lambda x, y: x // y)),
  ("mod", *same(lambda x, y: x % y)),
]

def prod(s): return math.prod(s)

# ---------------------------------------------------------------- the chain builder

class Chain:
  def __init__(self, d: Draw, kind: str, grad: bool, device: str):
    assert kind in ("float", "int")
    self.d, self.kind, self.grad, self.device = d, kind, grad and kind == "float", device
    self.rng = np.random.default_rng(d.int(0, 2**31 - 1))
    self.leaves, self.log, self.scale = [], [], 1.0
    shape = tuple(d.int(1, 5) for _ in range(d.int(0, 4)))
    self.t64, self.t32, self.w = self.leaf(shape)

  # ---- state
  @property
  def shape(self): return tuple(self.t64.shape)
  @property
  def nd(self): return len(self.shape)
  def maxabs(self, t=None):
    t = self.t64 if t is None else t
    return float(t.detach().abs().max()) if t.numel() else 0.0
  def describe(self): return "\n  ".join(["chain:"] + self.log)

  def leaf(self, shape, low=-2, high=2, nonzero=False):
    if self.kind == "float":
      v = np.asarray(self.rng.uniform(low, high, size=shape), dtype=np.float32)
      t64, t32 = torch.tensor(v.astype(np.float64), requires_grad=self.grad), torch.tensor(v, requires_grad=self.grad)
    else:
      v = np.asarray(self.rng.integers(low, high + 1, size=shape), dtype=np.int32)
      if nonzero: v = np.where(v == 0, 1, v).astype(np.int32)
      t64, t32 = torch.tensor(v.astype(np.int64)), torch.tensor(v)
    w = Tensor(v, device=self.device, requires_grad=True) if self.grad else Tensor(v, device=self.device)
    self.leaves.append((t64, t32, w))
    self.log.append(f"leaf {len(self.leaves) - 1}: shape {shape}")
    return t64, t32, w

  def apply(self, desc, tfn, wfn, *others):
    self.t64 = tfn(self.t64, *[o[0] for o in others])
    self.t32 = tfn(self.t32, *[o[1] for o in others])
    self.w = wfn(self.w, *[o[2] for o in others])
    self.log.append(f"{desc} -> {self.shape}")
    assert tuple(self.w.shape) == self.shape, f"shape mismatch after {desc}: tinyweb {self.w.shape} vs torch {self.shape}\n{self.describe()}"
    if self.kind == "float": self.scale = max(self.scale, self.maxabs())
    return True

  # ---- elementwise
  def op_unary(self):
    d = self.d
    if self.kind == "int":
      name, tf, wf = d.choice(INT_UNARY)
      return self.apply(name, tf, wf)
    if d.int(0, 3) == 0:
      name, tf, wf = d.choice(FLOAT_KINKED)
      if self.near_zero(self.t64):
        self.log.append(f"({name} skipped: values near its kink)")
        name, tf, wf = FLOAT_UNARY[5]  # tanh
      return self.apply(name, tf, wf)
    name, tf, wf = d.choice(FLOAT_UNARY)
    return self.apply(name, tf, wf)

  def near_zero(self, t): return bool((t.detach().abs() <= 1e-5 * self.scale).any())

  def other_shape(self):
    d, s = self.d, list(self.shape)
    out = []
    for dim in s:
      r = d.int(0, 4)
      out.append(1 if r == 0 else d.int(2, 4) if (r == 1 and dim == 1) else dim)
    if out and d.int(0, 3) == 0: out = out[d.int(1, len(out)):]
    elif len(out) < 4 and d.int(0, 4) == 0: out = [d.int(1, 3)] + out
    if prod(np.broadcast_shapes(tuple(s), tuple(out))) > MAX_NUMEL: out = s
    return tuple(out)

  def op_binary(self):
    d = self.d
    oshape = self.other_shape()
    if self.kind == "int":
      if d.int(0, 5) == 0:
        name, tf, wf = d.choice(INT_DIVISION)
        y = self.leaf(oshape, -3, 3, nonzero=True)
      else:
        name, tf, wf = d.choice(INT_BINARY)
        y = self.leaf(oshape, -3, 3)
      return self.apply(f"{name} with leaf {len(self.leaves) - 1} {oshape}", tf, wf, y)
    r = d.int(0, 5)
    y = self.leaf(oshape)
    if r == 0:  # maximum/minimum: kink at ties
      name, tf, wf = d.choice([("maximum", lambda x, y: torch.maximum(x, y), lambda x, y: x.maximum(y)),
                               ("minimum", lambda x, y: torch.minimum(x, y), lambda x, y: x.minimum(y))])
      if self.near_zero(self.t64 - y[0]):
        self.log.append(f"({name} replaced: near ties)")
        name, tf, wf = FLOAT_BINARY[0]
    elif r == 1:  # where(x > 0, x, y): jump at 0
      name, tf, wf = "where(x>0,x,y)", lambda x, y: torch.where(x > 0, x, y), lambda x, y: (x > 0).where(x, y)
      if self.near_zero(self.t64):
        self.log.append("(where replaced: values near 0)")
        name, tf, wf = FLOAT_BINARY[4]
    else:
      name, tf, wf = d.choice(FLOAT_BINARY)
    return self.apply(f"{name} with leaf {len(self.leaves) - 1} {oshape}", tf, wf, y)

  # ---- movement
  def op_reshape(self):
    d, s, n = self.d, list(self.shape), prod(self.shape)
    r = d.int(0, 5)
    if r == 0: new = [n]
    elif r == 1 and self.nd >= 2:
      i = d.int(0, self.nd - 2)
      new = s[:i] + [s[i] * s[i + 1]] + s[i + 2:]
    elif r == 2 and 0 < self.nd < 4 and any(any(k % a == 0 for a in range(2, k)) for k in s):
      i = d.choice([i for i, k in enumerate(s) if any(k % a == 0 for a in range(2, k))])
      a = d.choice([a for a in range(2, s[i]) if s[i] % a == 0])
      new = s[:i] + [a, s[i] // a] + s[i + 1:]
    elif r == 3 and self.nd < 4:
      i = d.int(0, self.nd)
      new = s[:i] + [1] + s[i:]
    elif r == 4 and 1 in s:
      i = d.choice([i for i, k in enumerate(s) if k == 1])
      new = s[:i] + s[i + 1:]
    elif n == 1: new = []
    else: new = [n] if self.nd != 1 else [1, n]
    arg = list(new)
    if arg and d.int(0, 2) == 0: arg[d.int(0, len(arg) - 1)] = -1
    if not arg: return self.apply("reshape(())", lambda x: x.reshape(()), lambda x: x.reshape(()))
    return self.apply(f"reshape{tuple(arg)}", lambda x: x.reshape(*arg), lambda x: x.reshape(*arg))

  def op_permute(self):
    if self.nd < 2: return False
    order = self.d.perm(self.nd)
    if self.d.int(0, 2) == 0: order = [o - self.nd if self.d.bool() else o for o in order]
    return self.apply(f"permute{tuple(order)}", lambda x: x.permute(*order), lambda x: x.permute(*order))

  def op_expand(self):
    d, s = self.d, list(self.shape)
    new = [d.int(2, 4) if k == 1 and d.int(0, 2) > 0 else k for k in s]
    arg = [-1 if (a == b and d.int(0, 2) == 0) else a for a, b in zip(new, s)]
    if self.nd < 4 and d.int(0, 2) == 0:
      lead = d.int(2, 3)
      new, arg = [lead] + new, [lead] + arg
    if new == s or prod(new) > MAX_NUMEL: return False
    return self.apply(f"expand{tuple(arg)}", lambda x: x.expand(*arg), lambda x: x.expand(*arg))

  def op_pad(self):
    d = self.d
    if self.nd == 0: return False
    value = d.choice([0.0, 1.5]) if self.kind == "float" else d.choice([0, 2])
    if d.bool():  # torch style: flat (left, right) pairs starting from the last dim
      k = d.int(1, min(self.nd, 3))
      flat = [d.int(0, 2) for _ in range(2 * k)]
      if not any(flat): flat[d.int(0, 2 * k - 1)] = 1
      arg = tuple(flat)
    else:  # tinygrad style: one (before, after) or None per dim, from dim 0
      arg = tuple(None if d.int(0, 2) == 0 else (d.int(0, 2), d.int(0, 2)) for _ in range(self.nd))
      if all(p is None or p == (0, 0) for p in arg): arg = arg[:-1] + ((1, 0),)
      flat = [v for p in reversed(arg) for v in (p if p is not None else (0, 0))]
    new = list(self.shape)
    for i in range(len(flat) // 2): new[self.nd - 1 - i] += flat[2 * i] + flat[2 * i + 1]
    if prod(new) > MAX_NUMEL: return False
    return self.apply(f"pad({arg}, value={value})", lambda x: F.pad(x, flat, value=value), lambda x: x.pad(arg, value=value))

  def op_shrink(self):
    d = self.d
    if self.nd == 0: return False
    arg = []
    for k in self.shape:
      if d.int(0, 2) == 0: arg.append(None)
      else:
        s = d.int(0, k - 1)
        arg.append((s, d.int(s + 1, k)))
    arg = tuple(arg)
    if all(a is None or a == (0, k) for a, k in zip(arg, self.shape)): return False
    sl = tuple(slice(None) if a is None else slice(*a) for a in arg)
    return self.apply(f"shrink({arg})", lambda x: x[sl], lambda x: x.shrink(arg))

  def op_flip(self):
    d = self.d
    if self.nd == 0: return False
    axes = [a - self.nd if d.int(0, 2) == 0 else a for a in d.subset(self.nd, d.int(1, self.nd))]
    arg = axes[0] if len(axes) == 1 and d.bool() else tuple(axes)
    return self.apply(f"flip({arg})", lambda x: x.flip(axes), lambda x: x.flip(arg))

  def op_getitem(self):
    d = self.d
    if self.nd == 0: return False
    items, out_rank = [], 0
    for k in self.shape:
      r = d.int(0, 4)
      if r == 0:
        items.append(d.int(-k, k - 1)); continue
      if r == 1: sl = slice(None)
      else:
        step = d.choice([1, 1, 2, 3, -1, -2])
        sl = slice(d.choice([None, d.int(-k, k - 1)]), d.choice([None, d.int(-k, k)]), step)
        if len(range(*sl.indices(k))) == 0: sl = slice(None, None, step)
      items.append(sl)
      out_rank += 1
    if out_rank < 4 and d.int(0, 3) == 0:
      items.insert(d.int(0, len(items)), None)
    # tinyweb gets the same index, maybe with one ':' written as Ellipsis, or with the trailing ':' left out
    widx = list(items)
    full = [i for i, it in enumerate(widx) if isinstance(it, slice) and it == slice(None)]
    r = d.int(0, 2)
    if r == 0 and full: widx[d.choice(full)] = Ellipsis  # stands for exactly one ':'
    elif r == 1:
      while len(widx) > 1 and isinstance(widx[-1], slice) and widx[-1] == slice(None): widx.pop()
    widx = tuple(widx)
    def tf(x):
      dim = 0
      for it in items:
        if it is None: x = x.unsqueeze(dim); dim += 1
        elif isinstance(it, int): x = x.select(dim, it)
        else:
          idx = list(range(*it.indices(x.shape[dim])))
          x = x.index_select(dim, torch.tensor(idx, dtype=torch.long)); dim += 1
      return x
    return self.apply(f"getitem[{widx}]", tf, lambda x: x[widx])

  # ---- reductions
  def draw_axes(self):
    d = self.d
    if self.nd == 0 or d.int(0, 5) == 0: return None
    axes = d.subset(self.nd, d.int(1, self.nd))
    axes = [a - self.nd if d.int(0, 2) == 0 else a for a in axes]
    return axes[0] if len(axes) == 1 and d.bool() else tuple(axes)

  def op_reduce(self):
    d = self.d
    axis, keepdim = self.draw_axes(), d.bool()
    names = ["sum", "max", "mean"] if self.kind == "float" else ["sum", "max", "min"]
    name = d.choice(names)
    dims = tuple(range(self.nd)) if axis is None else (axis if isinstance(axis, tuple) else (axis,))
    dims = tuple(a % self.nd for a in dims) if self.nd else ()
    if name == "max" and self.grad and self.near_tie(dims):
      self.log.append("(max replaced: near-tied maxima)")
      name = "sum"
    tred = {"sum": torch.sum, "mean": torch.mean, "max": torch.amax, "min": torch.amin}[name]
    def tf(x): return tred(x) if x.ndim == 0 else tred(x, dim=dims, keepdim=keepdim)
    def wf(x): return getattr(x, name)(axis=axis, keepdim=keepdim)
    return self.apply(f"{name}(axis={axis}, keepdim={keepdim})", tf, wf)

  def near_tie(self, dims):
    t = self.t64.detach()
    if t.ndim == 0: return False
    rest = [i for i in range(t.ndim) if i not in dims]
    p = t.permute(*rest, *dims).reshape(*[t.shape[i] for i in rest], -1)
    if p.shape[-1] < 2: return False
    top = p.topk(2, dim=-1).values
    return bool(((top[..., 0] - top[..., 1]) <= 1e-4 * self.scale).any())

  # ---- driver
  def step(self):
    for _ in range(30):
      ops = [self.op_unary] * 3 + [self.op_binary] * 3 + [self.op_reshape, self.op_permute, self.op_expand, self.op_pad,
             self.op_shrink, self.op_flip, self.op_getitem] + [self.op_reduce] * 2
      if self.d.choice(ops)(): return
    self.apply("neg", lambda x: -x, lambda x: -x)

  def build(self):
    for _ in range(self.d.int(3, 8)): self.step()
    return self

# ---------------------------------------------------------------- comparison

def assert_close(got, ref64, ref32, base_atol, what, chain):
  ref64 = ref64.detach().numpy().astype(np.float64)
  ref32 = ref32.detach().numpy().astype(np.float64)
  assert got.shape == ref64.shape, f"{what}: shape {got.shape} vs {ref64.shape}\n{chain.describe()}"
  got = got.astype(np.float64)
  assert np.isfinite(got).all() == np.isfinite(ref64).all(), f"{what}: non-finite values\n{chain.describe()}"
  allowed = base_atol + RTOL * np.abs(ref64) + SLACK32 * np.abs(ref32 - ref64)
  err = np.abs(got - ref64)
  bad = ~(err <= allowed)
  if bad.any():
    i = np.unravel_index(int(np.argmax(np.where(bad, err - allowed, -np.inf))), got.shape) if got.ndim else ()
    raise AssertionError(f"{what}: {int(bad.sum())}/{bad.size} elements off; worst at {i}: tinyweb {got[i]} vs torch {ref64[i]} "
                         f"(allowed {allowed[i]:.3g})\n{chain.describe()}")

def run_chain(d: Draw, kind: str, grad: bool, device: str):
  c = Chain(d, kind, grad, device).build()
  got = c.w.numpy()
  if kind == "int":
    ref = c.t64.numpy()
    assert got.shape == ref.shape, f"shape {got.shape} vs {ref.shape}\n{c.describe()}"
    assert got.dtype.kind in "iu", f"dtype {got.dtype}, expected an integer dtype\n{c.describe()}"
    np.testing.assert_array_equal(got, ref, err_msg=c.describe())
    return c
  assert got.dtype == np.float32, f"dtype {got.dtype}\n{c.describe()}"
  assert_close(got, c.t64, c.t32, ATOL * c.scale, "forward", c)
  if not grad: return c
  cot = np.asarray(c.rng.uniform(-1, 1, size=c.shape), dtype=np.float32)
  (c.t64 * torch.tensor(cot.astype(np.float64))).sum().backward()
  (c.t32 * torch.tensor(cot)).sum().backward()
  (c.w * Tensor(cot, device=device)).sum().backward()
  gscale = max([1.0] + [c.maxabs(l[0].grad) for l in c.leaves if l[0].grad is not None])
  for i, (t64, t32, w) in enumerate(c.leaves):
    assert w.grad is not None, f"no grad for leaf {i}\n{c.describe()}"
    g64 = t64.grad if t64.grad is not None else torch.zeros_like(t64)
    g32 = t32.grad if t32.grad is not None else torch.zeros_like(t32)
    assert_close(w.grad.numpy(), g64, g32, GRAD_ATOL * gscale, f"grad of leaf {i}", c)
  return c

# ---------------------------------------------------------------- hypothesis-driven tests

HYP = dict(deadline=None, derandomize=True, database=None, phases=[Phase.explicit, Phase.generate],
           suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large])

@settings(max_examples=int(os.getenv("TW_CHAIN_EXAMPLES", "25")), **HYP)
@given(data=st.data())
def test_random_float_chain_fwd_bwd(device, data):
  run_chain(hyp_draw(data), "float", True, device)

@settings(max_examples=int(os.getenv("TW_CHAIN_EXAMPLES_FWD", "8")), **HYP)
@given(data=st.data())
def test_random_float_chain_forward_only(device, data):
  c = run_chain(hyp_draw(data), "float", False, device)
  assert not c.w.requires_grad

@settings(max_examples=int(os.getenv("TW_CHAIN_EXAMPLES_INT", "10")), **HYP)
@given(data=st.data())
def test_random_int_chain(device, data):
  run_chain(hyp_draw(data), "int", False, device)

# ---------------------------------------------------------------- seeded chains (stable ids, easy to rerun one)

@pytest.mark.parametrize("seed", range(8))
def test_seeded_float_chain(device, seed):
  run_chain(rng_draw(1000 + seed), "float", True, device)

@pytest.mark.parametrize("seed", range(4))
def test_seeded_int_chain(device, seed):
  run_chain(rng_draw(2000 + seed), "int", False, device)

# ---------------------------------------------------------------- hand-written chains around movement-op interplay

class _Fixed:
  """minimal stand-in for Chain so that assert_close can print a description"""
  def __init__(self, name): self.name = name
  def describe(self): return f"fixed chain {self.name}"

def run_fixed(name, shapes, tf, wf, device, seed=0):
  rng = np.random.default_rng(seed)
  vals = [np.asarray(rng.uniform(-2, 2, size=s), dtype=np.float32) for s in shapes]
  t64 = [torch.tensor(v.astype(np.float64), requires_grad=True) for v in vals]
  t32 = [torch.tensor(v, requires_grad=True) for v in vals]
  ww = [Tensor(v, device=device, requires_grad=True) for v in vals]
  o64, o32, ow = tf(*t64), tf(*t32), wf(*ww)
  c = _Fixed(name)
  scale = max(1.0, float(o64.detach().abs().max()))
  assert_close(ow.numpy(), o64, o32, ATOL * scale, "forward", c)
  cot = np.asarray(rng.uniform(-1, 1, size=tuple(o64.shape)), dtype=np.float32)
  (o64 * torch.tensor(cot.astype(np.float64))).sum().backward()
  (o32 * torch.tensor(cot)).sum().backward()
  (ow * Tensor(cot, device=device)).sum().backward()
  for i, (a, b, w) in enumerate(zip(t64, t32, ww)):
    assert w.grad is not None, f"{name}: no grad for input {i}"
    assert_close(w.grad.numpy(), a.grad, b.grad, GRAD_ATOL * max(1.0, float(a.grad.abs().max())), f"grad of input {i}", c)

FIXED = {
  "expand_reshape_sum": ([(3, 1, 4)], lambda x: x.expand(3, 5, 4).reshape(15, 4).sum(0),
                         lambda x: x.expand(3, 5, 4).reshape(15, 4).sum(axis=0)),
  "permute_reshape_pad_flip": ([(2, 3, 4)], lambda x: F.pad(x.permute(2, 0, 1).reshape(4, 6), (1, 2, 0, 1), value=0.5).flip(0),
                               lambda x: x.permute(2, 0, 1).reshape(4, 6).pad((1, 2, 0, 1), value=0.5).flip(0)),
  "pad_shrink_roundtrip": ([(3, 4)], lambda x: F.pad(x, (2, 1, 1, 3))[1:4, 2:6].exp(),
                           lambda x: x.pad(((1, 3), (2, 1))).shrink(((1, 4), (2, 6))).exp()),
  "flip_twice_permute": ([(2, 3, 4)], lambda x: x.flip(0).flip((0, 2)).permute(1, 2, 0) * 2,
                         lambda x: x.flip(0).flip((0, 2)).permute(1, 2, 0) * 2),
  # ties here are copies of the same element, so every tie-splitting rule gives the same input grad
  "reshape_minus1_expand_max": ([(2, 3)], lambda x: torch.amax(x.reshape(-1, 1).expand(-1, 4), dim=1),
                                lambda x: x.reshape(-1, 1).expand(-1, 4).max(axis=1)),
  "scalar_reshape_expand_mean": ([(1, 1)], lambda x: x.reshape(()).reshape(1, 1, 1).expand(2, 3, 4).mean(axis=(0, 2)),
                                 lambda x: x.reshape(()).reshape(1, 1, 1).expand(2, 3, 4).mean(axis=(0, 2))),
  "broadcast_three_way": ([(3, 1), (1, 4), (4,)], lambda x, y, z: ((x + y) * z).sum(0) - (x * y).mean(),
                          lambda x, y, z: ((x + y) * z).sum(axis=0) - (x * y).mean()),
  "negative_step_getitem": ([(5, 4)], lambda x: (x.flip(0)[::2, 1:] * 3).sum(1, keepdim=True),
                            lambda x: (x[::-2, 1:] * 3).sum(axis=1, keepdim=True)),
  "shrink_transpose_expand_mul": ([(4, 5), (3, 1, 4)], lambda x, y: x[1:4, :4].T.unsqueeze(0).expand(3, 4, 3).permute(0, 2, 1) * y,
                                  lambda x, y: x.shrink(((1, 4), (0, 4))).T.unsqueeze(0).expand(3, 4, 3).permute(0, 2, 1) * y),
  "pad_then_sum_then_pad": ([(2, 3)], lambda x: F.pad(F.pad(x, (1, 1), value=1.0).sum(1, keepdim=True), (0, 0, 2, 0)).tanh(),
                            lambda x: x.pad((1, 1), value=1.0).sum(axis=1, keepdim=True).pad((0, 0, 2, 0)).tanh()),
  "reduce_all_keepdim_broadcast": ([(2, 3, 4)], lambda x: x - x.amax(dim=(0, 1, 2), keepdim=True) + x.mean(dim=(1,), keepdim=True),
                                   lambda x: x - x.max(axis=None, keepdim=True) + x.mean(axis=1, keepdim=True)),
}

@pytest.mark.parametrize("name", list(FIXED))
def test_fixed_chain(device, name):
  shapes, tf, wf = FIXED[name]
  run_fixed(name, shapes, tf, wf, device)
