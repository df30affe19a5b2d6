"""Autograd on the UOp graph: one gradient rule per op, applied in reverse topological order.

Each rule gets the op's node and the gradient flowing into it and returns one gradient per source (None where a
source gets no gradient). Gradients are themselves lazy UOps, so they fuse and schedule like any other value."""
from __future__ import annotations
import math
from typing import Optional
from tinyweb.dtype import dtypes, cast_scalar
from tinyweb.helpers import argsort, deep_recursion
from tinyweb.uop import UOp, Ops

def _c(u: UOp, v) -> UOp:
  """A constant with u's dtype, device and shape."""
  c = UOp(Ops.CONST, u.dtype, (UOp(Ops.DEVICE, None, (), u.device),), cast_scalar(v, u.dtype))
  if u.shape == (): return c
  return UOp(Ops.EXPAND, u.dtype, (UOp(Ops.RESHAPE, u.dtype, (c,), (1,) * len(u.shape)),), u.shape)

def _alu(op: Ops, *srcs: UOp) -> UOp:
  dt = dtypes.bool if op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ) else srcs[-1].dtype
  return UOp(op, dt, srcs)

def _reduce_sum(g: UOp, shape: tuple[int, ...]) -> UOp:
  """Sum g over the axes where it was broadcast from `shape` (same rank)."""
  axes = tuple(i for i, (a, b) in enumerate(zip(shape, g.shape)) if a != b)
  return UOp(Ops.REDUCE_AXIS, g.dtype, (g,), (Ops.ADD, axes)) if axes else g

def _expand_to(g: UOp, shape: tuple[int, ...]) -> UOp:
  return g if g.shape == shape else UOp(Ops.EXPAND, g.dtype, (g,), shape)

def grad_rule(u: UOp, g: UOp) -> tuple[Optional[UOp], ...]:
  op, s = u.op, u.src
  if op is Ops.ADD: return (g, g)
  if op is Ops.MUL: return (_alu(Ops.MUL, g, s[1]), _alu(Ops.MUL, g, s[0]))
  if op is Ops.NEG: return (_alu(Ops.NEG, g),)
  if op is Ops.FDIV:
    # (torch's grouping for the divisor, g * (-(a / b) / b): 2 * (3e38 / -1.4) / -1.4 overflows where this stays finite)
    return (_alu(Ops.FDIV, g, s[1]), _alu(Ops.MUL, g, _alu(Ops.FDIV, _alu(Ops.NEG, u), s[1])))
  if op is Ops.EXP2: return (_alu(Ops.MUL, _alu(Ops.MUL, g, u), _c(u, math.log(2))),)
  if op is Ops.LOG2: return (_alu(Ops.FDIV, g, _alu(Ops.MUL, s[0], _c(u, math.log(2)))),)
  if op is Ops.SIN: return (_alu(Ops.MUL, g, _alu(Ops.COS, s[0])),)
  if op is Ops.COS: return (_alu(Ops.NEG, _alu(Ops.MUL, g, _alu(Ops.SIN, s[0]))),)
  if op is Ops.SQRT: return (_alu(Ops.FDIV, g, _alu(Ops.MUL, u, _c(u, 2.0))),)
  if op is Ops.RECIP: return (_alu(Ops.NEG, _alu(Ops.MUL, g, _alu(Ops.MUL, u, u))),)
  if op in (Ops.MAX, Ops.MIN):
    # PyTorch's maximum/minimum: a tie splits the gradient evenly; where a NaN is compared, both sides get all of it
    # (selected, not multiplied by a 0/1 mask: the loser gets exactly 0 even from an infinite g, like PyTorch)
    half, zero = _c(u, 0.5), _c(u, 0.0)
    def share(x: UOp, y: UOp) -> UOp:   # x's share of g: none where x loses to y
      loses = _alu(Ops.CMPLT, x, y) if op is Ops.MAX else _alu(Ops.CMPLT, y, x)
      return _alu(Ops.WHERE, loses, zero, _alu(Ops.WHERE, _alu(Ops.CMPEQ, x, y), _alu(Ops.MUL, g, half), g))
    return (share(s[0], s[1]), share(s[1], s[0]))
  if op is Ops.WHERE:
    zero = _c(g, 0.0)
    return (None, _alu(Ops.WHERE, s[0], g, zero), _alu(Ops.WHERE, s[0], zero, g))
  if op is Ops.CAST: return (UOp(Ops.CAST, s[0].dtype, (g,)) if s[0].dtype.is_float else None,)
  if op is Ops.CUSTOM_GRAD: return (None, *u.arg(g, *s[1:]))
  if op in (Ops.CONTIGUOUS, Ops.COPY): return (g if op is Ops.CONTIGUOUS else UOp(Ops.COPY, g.dtype, (g,), s[0].device),)
  if op is Ops.ASSIGN: return (None, g)   # the written value; the overwritten contents get none
  if op is Ops.RESHAPE: return (UOp(Ops.RESHAPE, g.dtype, (g,), s[0].shape),)
  if op is Ops.PERMUTE: return (UOp(Ops.PERMUTE, g.dtype, (g,), tuple(argsort(u.arg))),)
  if op is Ops.EXPAND: return (_reduce_sum(g, s[0].shape),)
  if op is Ops.PAD: return (UOp(Ops.SHRINK, g.dtype, (g,), tuple((b, b + n) for (b, _), n in zip(u.arg, s[0].shape))),)
  if op is Ops.SHRINK:
    return (UOp(Ops.PAD, g.dtype, (g,), tuple((b, n - e) for (b, e), n in zip(u.arg, s[0].shape))),)
  if op is Ops.FLIP: return (UOp(Ops.FLIP, g.dtype, (g,), u.arg),)
  if op is Ops.REDUCE_AXIS:
    rop, axes = u.arg
    x = s[0]
    if rop is Ops.ADD: return (_expand_to(g, x.shape),)
    if rop is Ops.MAX:  # gradient shared evenly between all maxima (a NaN maximum: the NaNs, like PyTorch's max())
      ue = _expand_to(u, x.shape)
      hit = _alu(Ops.CMPEQ, x, ue)
      if x.dtype.is_float: hit = _alu(Ops.OR, hit, _alu(Ops.AND, _alu(Ops.CMPNE, x, x), _alu(Ops.CMPNE, ue, ue)))
      mask = UOp(Ops.CAST, x.dtype, (hit,))
      count = UOp(Ops.REDUCE_AXIS, x.dtype, (mask,), (Ops.ADD, axes))
      return (_alu(Ops.MUL, mask, _expand_to(_alu(Ops.FDIV, g, count), x.shape)),)
    # (MUL: prod's gradient is Tensor.prod's custom gradient)
  # trunc (and floor/ceil/round/sign built on it) passes an explicit zero, as PyTorch does: that zero still meets
  # 0 * inf and 0 / 0 further back, where PyTorch's gradient becomes NaN
  if op is Ops.TRUNC: return (_c(g, 0.0),)
  if op in (Ops.DETACH, Ops.BITCAST) or op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ, Ops.IDIV, Ops.MOD, Ops.AND,
                                                               Ops.OR, Ops.XOR, Ops.SHL, Ops.SHR):
    return tuple(None for _ in s)
  raise NotImplementedError(f"no gradient rule for {op}")

@deep_recursion
def compute_gradient(root: UOp, root_grad: UOp, targets: set[UOp]) -> dict[UOp, UOp]:
  """Gradients of `root` (seeded with root_grad) with respect to every uop in `targets` that root depends on."""
  graph = root.toposort()
  # only walk nodes that lie on a path from a target to the root
  on_path: set[UOp] = set()
  for u in graph:
    if u in targets or any(s in on_path for s in u.src if u.op is not Ops.DETACH): on_path.add(u)
  grads: dict[UOp, UOp] = {root: root_grad}
  for u in reversed(graph):
    if u not in grads or u not in on_path or u.op in (Ops.BUFFER, Ops.CONST, Ops.ARANGE, Ops.DEVICE): continue
    for s, sg in zip(u.src, grad_rule(u, grads[u])):
      if sg is None or s not in on_path or not s.dtype.is_float: continue
      grads[s] = sg if s not in grads else _alu(Ops.ADD, grads[s], sg)
  return {t: grads[t] for t in targets if t in grads}
