"""Vector groups: the uops of a lowered kernel that compute neighbouring float32 outputs the same way, found so that a
renderer with vector registers writes each group as one vector op (the CPU's 16-float vectors in clang.py, wasm's f32x4
in wasm.py). The groups never change a value: each lane computes what its scalar uop computes, in the same order."""
from __future__ import annotations
from tinyweb.dtype import dtypes
from tinyweb.uop import UOp, Ops, ALU
from tinyweb.codegen.program import Program
from tinyweb.codegen.lowering import IDX, IDX64

def const_offset(idx: UOp) -> tuple[UOp, int]:
  """An index as (base, constant offset)."""
  return (idx.src[0], idx.src[1].arg) if idx.op is Ops.ADD and idx.src[1].op is Ops.CONST else (idx, 0)

def accumulator_inits(prog: Program) -> dict[UOp, UOp]:
  """reduction -> the value its accumulator starts from, where it is not the identity (Opt BLOCK's blocks)."""
  return {u.src[0]: u.src[1] for u in prog.uops if u.op is Ops.DEFINE_ACC and len(u.src) > 1}

def lane_stride(lanes: tuple[UOp, ...]) -> int:
  """A group of loads' or stores' step between neighbouring lanes' addresses, in elements."""
  return const_offset(lanes[1].src[1])[1] - const_offset(lanes[0].src[1])[1]

def vector_groups(prog: Program, n: int, inits: dict[UOp, UOp]) -> dict[UOp, tuple[tuple[UOp, ...], int]]:
  """Groups of `vector_lanes` uops that compute neighbouring float32 outputs the same way (the copies an UPCAST makes
  along the last axis: a matmul's row of outputs), found from runs of stores to consecutive addresses and followed
  back through their values; as {uop: (its group, its lane)}. Each group is rendered as one vector op: a load of
  consecutive addresses (or a gather of addresses a constant stride apart), an add, a multiply, a select, an
  accumulator. A value that is the same in every lane stays a scalar (widened where a vector op uses it). `n`: the
  target's float32 lanes (Renderer.vector_lanes; 0: no groups)."""
  f32 = dtypes.float32
  if not n: return {}
  def stride(lanes) -> int:   # lane l's address is lane 0's + l * stride (0: no such stride)
    (b0, c0), buf, s = const_offset(lanes[0].src[1]), lanes[0].src[0], lane_stride(lanes)
    return s if all(x.src[0] is buf and const_offset(x.src[1]) == (b0, c0 + l * s) for l, x in enumerate(lanes)) else 0
  def match(lanes: tuple[UOp, ...], got: dict) -> bool:
    u = lanes[0]
    if all(x is u for x in lanes) or lanes in got: return True
    if any(x.op is not u.op or x.dtype != u.dtype or x.arg != u.arg or len(x.src) != len(u.src) for x in lanes): return False
    def srcs(i: int) -> bool: return match(tuple(x.src[i] for x in lanes), got)
    if u.op is Ops.STORE: ok = stride(lanes) == 1 and srcs(2)
    elif u.dtype != f32: ok = False
    elif u.op is Ops.LOAD: ok = len(u.src) == 2 and stride(lanes) != 0   # a vector load, or a gather
    elif u.op in (Ops.ADD, Ops.MUL): ok = srcs(0) and srcs(1)
    elif u.op is Ops.WHERE: ok = all(x.src[0] is u.src[0] for x in lanes) and srcs(1) and srcs(2)
    elif u.op is Ops.REDUCE:
      ok = u.arg in (Ops.ADD, Ops.MUL) and all(x.src[1:] == u.src[1:] and (x in inits) == (u in inits) for x in lanes) and \
           srcs(0) and (u not in inits or match(tuple(inits[x] for x in lanes), got))
    else: ok = False
    if ok: got[lanes] = True
    return ok
  # the loops open where each uop is computed (a reduction: where its accumulator is defined): a group's lanes must agree
  block, open_ranges = {}, ()
  for u in prog.uops:
    if u.op is Ops.RANGE: open_ranges += (u,)
    elif u.op is Ops.ENDRANGE: open_ranges = open_ranges[:-1]
    block[u.src[0] if u.op is Ops.DEFINE_ACC else u] = open_ranges
  stores = {(u.src[0], *const_offset(u.src[1])): u for u in prog.uops if u.op is Ops.STORE and u.src[2].dtype == f32}
  out: dict[UOp, tuple[tuple[UOp, ...], int]] = {}
  for (buf, base, c), st in stores.items():
    lanes = tuple(stores.get((buf, base, c + l)) for l in range(n))
    got: dict = {}
    if c % n or None in lanes or not match(lanes, got): continue
    new = {x: (g, l) for g in got for l, x in enumerate(g)}
    # each uop in one group, at one lane; each group within one loop block
    if sum(len(g) for g in got) == len(new) and all(out.get(x, m) == m for x, m in new.items()) and \
       all(len({block.get(x) for x in g}) == 1 for g in got):
      out.update(new)
  return out

def unused_addresses(prog: Program, vec: dict) -> set[UOp]:
  """The address arithmetic only the other lanes of vector loads and stores would use: a group's load or store is
  rendered at its first lane in program order, from that lane's address."""
  first: dict[tuple[UOp, ...], UOp] = {}
  users: dict[UOp, list[UOp]] = {}
  for u in prog.uops:
    if u in vec: first.setdefault(vec[u][0], u)
    for x in u.src: users.setdefault(x, []).append(u)
  out: set[UOp] = set()
  for u in reversed(prog.uops):
    if u.dtype in (IDX, IDX64) and u.op in ALU and u in users and \
       all(x in out or (x.op in (Ops.LOAD, Ops.STORE) and x in vec and first[vec[x][0]] is not x) for x in users[u]): out.add(u)
  return out
