"""C-like renderers: a linear kernel program -> source text. `CStyleRenderer` holds everything C-like languages share;
a target (C for clang in clang.py, WGSL, OpenCL C, CUDA C) subclasses it and overrides only what differs."""
from __future__ import annotations
import copy, math
from tinyweb.dtype import DType, dtypes
from tinyweb.uop import UOp, Ops, ALU
from tinyweb.codegen.program import Program
from tinyweb.codegen.lowering import reduce_identity, IDX
from tinyweb.codegen.renderer import Renderer

UNSIGNED = {dtypes.int8: dtypes.uint8, dtypes.int16: dtypes.uint16, dtypes.int32: dtypes.uint32, dtypes.int64: dtypes.uint64}

def may_overflow(op: Ops, dt: DType, srcs: list[UOp]) -> bool:
  """Whether a signed int32/int64 ADD, MUL or NEG of operands in their bounds can leave dt's range."""
  if op not in (Ops.ADD, Ops.MUL, Ops.NEG) or dt.kind != "i" or dt.itemsize < 4: return False
  b = [s.bounds for s in srcs]
  ends = [-b[0][0], -b[0][1]] if op is Ops.NEG else [b[0][0] + b[1][0], b[0][1] + b[1][1]] if op is Ops.ADD else \
         [x * y for x in b[0] for y in b[1]]
  return min(ends) < dt.min or max(ends) > dt.max

def const_offset(idx: UOp) -> tuple[UOp, int]:
  """An index as (base, constant offset)."""
  return (idx.src[0], idx.src[1].arg) if idx.op is Ops.ADD and idx.src[1].op is Ops.CONST else (idx, 0)

class CStyleRenderer(Renderer):
  """C-like source; the target capabilities it shares with every renderer are declared in codegen/renderer.py."""
  kernel_prefix = "void"
  buffer_qualifier = " restrict"
  # C type used to hold a value in registers / in memory
  reg_types: dict[DType, str] = {}
  mem_types: dict[DType, str] = {}
  infinity, nan = "INFINITY", "NAN"
  local_id = "lid"     # GPU targets: the thread's index within its workgroup (in grouped reductions thread 0 stores)
  float_suffix = {dtypes.float32: "f", dtypes.float16: "f", dtypes.bfloat16: "f", dtypes.float64: ""}
  int_suffix = {dtypes.int64: "ll", dtypes.uint64: "ull", dtypes.uint32: "u"}
  index_type = ""   # a wider C type for loop indices and address arithmetic (see wide_indices); "": the int32 type
  vector_type = ""  # the C type of `vector_lanes` (CPU) or `vector_width` (GPU) float32s
  signed_overflow_wraps = False   # the language defines signed int overflow as wrapping (WGSL); C leaves it undefined

  def reg(self, dt: DType) -> str: return self.reg_types[dt]
  def mem(self, dt: DType) -> str: return self.mem_types.get(dt, self.reg_types[dt])

  def render_const(self, v, dt: DType) -> str:
    if dt.is_bool: return "1" if v else "0"
    if dt.is_float:
      sfx = self.float_suffix[dt]
      if math.isnan(v): return self.nan
      if math.isinf(v): return ("-" if v < 0 else "") + self.infinity
      r = f"{float(v)!r}{sfx}" if "e" not in repr(float(v)) else f"{float(v):.17g}{sfx}"
      return f"({r})" if v < 0 else r
    if dt in (dtypes.int32, dtypes.int64) and v == dt.min: return f"({v + 1}{self.int_suffix.get(dt, '')}-1)"
    return f"({v}{self.int_suffix.get(dt, '')})" if v < 0 else f"{v}{self.int_suffix.get(dt, '')}"

  # ---- ops: op -> fn(self, a, b, c, dt) over rendered operands and the result dtype; a target overrides entries ----
  def math_fn(self, name: str, dt: DType) -> str: return name + ("" if dt == dtypes.float64 else "f")
  code_for_op: dict = {
    Ops.NEG: lambda self, a, b, c, dt: f"(!{a})" if dt.is_bool else f"(-{a})",
    Ops.EXP2: lambda self, a, b, c, dt: f"{self.math_fn('exp2', dt)}({a})",
    Ops.LOG2: lambda self, a, b, c, dt: f"{self.math_fn('log2', dt)}({a})",
    Ops.SIN: lambda self, a, b, c, dt: f"{self.math_fn('sin', dt)}({a})",
    Ops.COS: lambda self, a, b, c, dt: f"{self.math_fn('cos', dt)}({a})",
    Ops.SQRT: lambda self, a, b, c, dt: f"{self.math_fn('sqrt', dt)}({a})",
    Ops.TRUNC: lambda self, a, b, c, dt: f"{self.math_fn('trunc', dt)}({a})",
    Ops.RECIP: lambda self, a, b, c, dt: f"(1.0{self.float_suffix.get(dt, '')}/{a})",
    Ops.ADD: lambda self, a, b, c, dt: f"({a}||{b})" if dt.is_bool else f"({a}+{b})",
    Ops.MUL: lambda self, a, b, c, dt: f"({a}&&{b})" if dt.is_bool else f"({a}*{b})",
    Ops.FDIV: lambda self, a, b, c, dt: f"({a}/{b})",
    Ops.MOD: lambda self, a, b, c, dt: f"{self.math_fn('fmod', dt)}({a}, {b})",   # (floats: integers go to render_int_div)
    # NaN-propagating like PyTorch's maximum/minimum
    Ops.MAX: lambda self, a, b, c, dt: f"(({a}>{b}||{a}!={a})?{a}:{b})" if dt.is_float else f"({a}>{b}?{a}:{b})",
    Ops.MIN: lambda self, a, b, c, dt: f"(({a}<{b}||{a}!={a})?{a}:{b})" if dt.is_float else f"({a}<{b}?{a}:{b})",
    Ops.CMPLT: lambda self, a, b, c, dt: f"({a}<{b})", Ops.CMPNE: lambda self, a, b, c, dt: f"({a}!={b})",
    Ops.CMPEQ: lambda self, a, b, c, dt: f"({a}=={b})", Ops.AND: lambda self, a, b, c, dt: f"({a}&{b})",
    Ops.OR: lambda self, a, b, c, dt: f"({a}|{b})", Ops.XOR: lambda self, a, b, c, dt: f"({a}^{b})",
    Ops.SHL: lambda self, a, b, c, dt: f"({a}<<{b})", Ops.SHR: lambda self, a, b, c, dt: f"({a}>>{b})",
    Ops.WHERE: lambda self, a, b, c, dt: f"({a}?{b}:{c})",
  }
  def render_fma(self, a: str, b: str, c: str) -> str: return f"fma({a}, {b}, {c})"   # float32 a*b+c, rounded once
  def render_alu(self, op: Ops, srcs: list[str], dt: DType, sdt: DType, src_uops: list[UOp]) -> str:
    if op in (Ops.IDIV, Ops.MOD) and not dt.is_float: return self.render_int_div(op, srcs[0], srcs[1], dt, src_uops[1])
    if not self.signed_overflow_wraps and may_overflow(op, dt, src_uops):
      # in the unsigned type, which wraps: a signed overflow is undefined in C, and clang then derives wrong facts from
      # it (the sign of (float)(acc * -2147483647 + -2), which the simplifier's int32 rewrites can produce)
      u = self.reg(UNSIGNED[dt])
      wrapped = f"0-({u})({srcs[0]})" if op is Ops.NEG else f"({u})({srcs[0]}){'+' if op is Ops.ADD else '*'}({u})({srcs[1]})"
      return f"(({self.reg(dt)})({wrapped}))"
    if (fn := self.code_for_op.get(op)) is None: raise NotImplementedError(f"{type(self).__name__}: no rendering for {op}")
    return fn(self, *srcs, *([None] * (3 - len(srcs))), dt)
  def render_int_div(self, op: Ops, a: str, b: str, dt: DType, divisor: UOp) -> str:
    sym = "/" if op is Ops.IDIV else "%"
    if divisor.op is Ops.CONST and divisor.arg not in (0, -1): return f"({a}{sym}{b})"
    # division or modulo by zero (which would trap) gives 0; INT_MIN / -1 (which would trap too) wraps to INT_MIN
    if dt.kind != "i": return f"({b}==0?0:({a}{sym}{b}))"
    if op is Ops.MOD: return f"(({b}==0||{b}==-1)?0:({a}%{b}))"
    wrapping_neg = f"(({self.reg(dt)})(0-({self.reg(UNSIGNED[dt])})({a})))"
    return f"({b}==0?0:({b}==-1?{wrapping_neg}:({a}/{b})))"

  def render_cast(self, x: str, dt: DType, sdt: DType) -> str:
    if dt.is_bool: return f"(({x})!=0)"
    if dt.is_int and sdt.is_float: return f"(({self.reg(dt)}){self.float_to_int(x, dt)})"
    return self.round_result(f"(({self.reg(dt)})({x}))", dt)
  # float -> int: every device gives x86-64's answers where C leaves them undefined (dtype.cast_scalar says which)
  def float_to_int(self, x: str, dt: DType) -> str: return f"({x})"
  def render_bitcast(self, x: str, dt: DType, sdt: DType) -> str: raise NotImplementedError
  def render_load(self, buf: str, idx: str, dt: DType) -> str: return f"{buf}[{idx}]"
  def render_store(self, buf: str, idx: str, val: str, dt: DType) -> str: return f"{buf}[{idx}] = {val};"
  def round_result(self, expr: str, dt: DType) -> str: return expr   # round a float computed in wider precision
  # ---- declarations and control flow (a target with other syntax overrides these) ----
  def render_param(self, g: UOp, name: str, is_output: bool) -> str:
    return f"{'' if is_output else 'const '}{self.mem(g.dtype)}*{self.buffer_qualifier} {name}"
  def render_decl(self, dt: DType, name: str, expr: str, mutable: bool = False) -> str: return f"{self.reg(dt)} {name} = {expr};"
  def render_range(self, name: str, lo: str, hi: str) -> str: return f"for ({self.index_type or 'int'} {name} = {lo}; {name} < {hi}; {name}++) {{"
  def render_special(self, u: UOp, name: str, prog: Program, srcs: list[str]) -> list[str]:
    raise NotImplementedError(f"{type(self).__name__} has no thread indices")
  def to_int(self, unsigned: str) -> str: return f"(int)({unsigned})"
  def render_thread_index(self, u: UOp, name: str, prog: Program) -> list[str]:
    """SPECIAL "lid...": the thread's index in its workgroup, (local_id / stride) % n (src: n[, stride])."""
    n, stride = u.src[0].arg, u.src[1].arg if len(u.src) > 1 else 1
    e = self.local_id if stride == 1 else f"({self.local_id}/{stride}u)"
    if n * stride < prog.local_size: e = f"({e}%{n}u)"
    return [self.render_decl(IDX, name, self.to_int(e))]
  def render_kernel(self, name: str, params: list[str], body: list[str], prog: Program) -> str: raise NotImplementedError
  # ---- GPU targets: a grouped reduction (SPECIAL ("group", op, G)) combines the partial results of the G threads of a
  # workgroup (thread index `local_id`, unsigned) in workgroup memory, halving the active threads each step ----
  barrier = ""   # the workgroup barrier statement
  def render_local(self, name: str, dt: DType, n: int) -> str: raise NotImplementedError   # a workgroup-memory array
  # ---- tensor cores (codegen/tensor_cores.py): one warp-level product into the float array `name` of the lane's elements ----
  def render_wmma(self, name: str, dt: DType, regs: list[str]) -> list[str]:
    raise NotImplementedError(f"{type(self).__name__} has no tensor cores")
  def render_group_reduce(self, u: UOp, name: str, partial: str) -> list[str]:
    _, rop, g = u.arg
    mem = f"tw_{name}"
    self._local_decls.append(self.render_local(mem, u.dtype, g))
    t = self.local_id
    out = [f"{mem}[{t}] = {partial};", self.barrier]
    s = g // 2
    while s >= 1:
      upd = self.round_result(self.render_alu(rop, [f"{mem}[{t}]", f"{mem}[{t} + {s}u]"], u.dtype, u.dtype, [u, u]), u.dtype)
      out += [f"if ({t} < {s}u) {{ {mem}[{t}] = {upd}; }}", self.barrier]
      s //= 2
    return out + [self.render_decl(u.dtype, name, f"{mem}[0]")]

  # ---- GPU vector memory access: `vector_width` float32 loads (stores) at neighbouring aligned addresses become one ----
  def vector_address(self, first: UOp, r) -> str:
    base, c = const_offset(first.src[1])
    return r(base) if c == 0 else f"({r(base)}+{c})"
  def render_vector_load(self, buf: str, idx: str) -> str: raise NotImplementedError
  def render_vector_store(self, buf: str, idx: str, vals: list[str]) -> str: raise NotImplementedError

  def vector_runs(self, prog: Program) -> dict[UOp, list[UOp]]:
    """Runs of `vector_width` ungated float32 loads (or stores) of one global buffer at addresses base+c ... base+c+n-1
    with base and c multiples of n (so the vector is aligned), in one stretch of the program (no loop opens or closes,
    no store to (load of) that buffer in between). Keyed by the op where the vector access goes: a run of loads at its
    first load (every value is read there), a run of stores at its last store (every value is computed by then)."""
    n = self.vector_width
    if not n: return {}
    def multiple(u: UOp) -> bool:
      if u.op is Ops.CONST: return u.arg % n == 0
      if u.op is Ops.ADD: return all(multiple(s) for s in u.src)
      if u.op is Ops.MUL: return any(multiple(s) for s in u.src)
      return False
    candidates: dict[tuple, dict[int, tuple[int, UOp]]] = {}   # (op, buffer, base, stretch) -> offset -> (position, uop)
    stretch = 0
    for pos, u in enumerate(prog.uops):
      if u.op in (Ops.RANGE, Ops.ENDRANGE, Ops.BARRIER): stretch += 1
      elif u.op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.DEFINE_GLOBAL and u.src[0].dtype == dtypes.float32 and \
          (u.op is Ops.STORE or len(u.src) == 2):
        base, c = const_offset(u.src[1])
        candidates.setdefault((u.op, u.src[0], base, stretch), {})[c] = (pos, u)
    out: dict[UOp, list[UOp]] = {}
    for (op, buf, base, _), offs in candidates.items():
      if not multiple(base): continue
      for c0 in sorted(c for c in offs if c % n == 0):
        if not all(c0 + i in offs for i in range(n)): continue
        run = [offs[c0 + i] for i in range(n)]
        lo, hi = min(p for p, _ in run), max(p for p, _ in run)
        other = Ops.STORE if op is Ops.LOAD else Ops.LOAD   # nothing may touch the buffer the other way in between
        if any(u.op is other and u.src[0] is buf for u in prog.uops[lo:hi]): continue
        out[prog.uops[lo] if op is Ops.LOAD else prog.uops[hi]] = [u for _, u in run]
    return out

  @staticmethod
  def wide_indices(prog: Program) -> set[UOp]:
    """The int uops that compute load and store addresses from loop indices and constants. Their values are below 2^31
    (engine.check_index_range), so computing them in 64 bits changes no value, and lets clang see that neighbouring
    addresses are adjacent (with 32-bit ints, each one's sign extension hides that) and vectorize the loads."""
    pure: set[UOp] = set()
    for u in prog.uops:
      if u.op is Ops.RANGE or (u.op in ALU and u.dtype == IDX and all(s in pure or s.op is Ops.CONST for s in u.src)): pure.add(u)
    out: set[UOp] = set()
    todo = [u.src[1] for u in prog.uops if u.op in (Ops.LOAD, Ops.STORE)]
    while todo:
      if (x := todo.pop()) in pure and x not in out: out.add(x); todo.extend(x.src)
    return out

  def vector_groups(self, prog: Program, inits: dict[UOp, UOp]) -> dict[UOp, tuple[tuple[UOp, ...], int]]:
    """Groups of `vector_lanes` uops that compute neighbouring float32 outputs the same way (the copies an UPCAST makes
    along the last axis: a matmul's row of outputs), found from runs of stores to consecutive addresses and followed
    back through their values; as {uop: (its group, its lane)}. Each group is rendered as one vector op: a load of
    consecutive addresses (or a gather of addresses a constant stride apart), an add, a multiply, a select, an
    accumulator. A value that is the same in every lane stays a scalar (C widens it). clang's SLP vectorizer finds some of
    these itself, but only in 256-bit vectors on AVX-512 CPUs unless told to prefer 512 bits for every kernel (which
    slows others down), never gathers, and not in a loop of two trips."""
    n, f32 = self.vector_lanes, dtypes.float32
    if not n or self.mem(f32) != self.reg(f32): return {}
    def stride(lanes) -> int:   # lane l's address is lane 0's + l * stride (0: no such stride)
      (b0, c0), buf, s = const_offset(lanes[0].src[1]), lanes[0].src[0], const_offset(lanes[1].src[1])[1] - const_offset(lanes[0].src[1])[1]
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

  @staticmethod
  def wide_loops(prog: Program) -> set[UOp]:
    """An elementwise kernel's (no reduction) innermost loops of at least 16 trips, or split across cores: there clang's
    vectorizer would use 8-float vectors on most AVX-512 CPUs, where 16-float ones run a compute-heavy chain (an exp, a
    sigmoid) up to 1.5x faster. Not for reductions: their vectorized sums got slower with 16 floats."""
    if any(u.op is Ops.DEFINE_ACC for u in prog.uops): return set()
    inner, parent = set(), None
    for u in prog.uops:
      if u.op is Ops.RANGE: inner.discard(parent); inner.add(parent := u)
      elif u.op is Ops.ENDRANGE: parent = None
    return {u for u in inner if u is prog.parallel_range or (u.src[0].op is Ops.CONST and u.src[0].arg >= 16)}

  @staticmethod
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
      if u.dtype == IDX and u.op in ALU and u in users and \
         all(x in out or (x.op in (Ops.LOAD, Ops.STORE) and x in vec and first[vec[x][0]] is not x) for x in users[u]): out.add(u)
    return out

  def render(self, prog: Program) -> str:
    # each kernel is rendered by its own shallow copy of the renderer, which holds that kernel's scratch state
    # (_local_decls, _vectors, WGSL's _atomic): threads render at once, and the shared renderer never changes
    return copy.copy(self)._render(prog)
  def _render(self, prog: Program) -> str:
    wide = self.wide_indices(prog) if self.index_type else set()
    runs = self.vector_runs(prog)   # GPU targets: float4-style loads and stores
    in_run = {u for run in runs.values() for u in run}
    inits = {u.src[0]: u.src[1] for u in prog.uops if u.op is Ops.DEFINE_ACC and len(u.src) > 1}   # (Opt BLOCK)
    vec = self.vector_groups(prog, inits)
    wide_loops = self.wide_loops(prog) if self.wide_loop_pragma and not vec else set()
    self._vectors = bool(vec or wide_loops)
    vnames: dict[tuple[UOp, ...], str] = {}   # a group's vector variable
    emitted: set = set()                      # (group, op): rendered, at the first of its lanes in program order
    self._local_decls: list[str] = []   # workgroup-memory declarations the kernel needs (render_local)
    names: dict[UOp, str] = {}
    counters: dict[str, int] = {}
    def new_name(prefix: str) -> str:
      counters[prefix] = counters.get(prefix, -1) + 1
      return f"{prefix}{counters[prefix]}"
    def r(u: UOp) -> str:
      if u in vec: return f"{vnames[vec[u][0]]}[{vec[u][1]}]"   # one lane of a vector
      return self.render_const(u.arg, u.dtype) if u.op is Ops.CONST else names[u]
    def v(lanes: tuple[UOp, ...]) -> str: return vnames[lanes] if lanes in vnames else r(lanes[0])   # a vector, or a scalar
    def splat(lanes: tuple[UOp, ...]) -> str: return v(lanes) if lanes in vnames else f"(({self.vector_type})({r(lanes[0])}))"
    def vector_line(u: UOp, lanes: tuple[UOp, ...], lane: int) -> str:
      step = const_offset(lanes[1].src[1])[1] - const_offset(lanes[0].src[1])[1] if u.op in (Ops.LOAD, Ops.STORE) else 0
      def addr(x: UOp) -> str: return f"({r(x.src[0])}+{r(x.src[1])}{f'{-lane * step:+d}' if lane else ''})"   # lane 0's element
      def srcs(i: int) -> tuple[UOp, ...]: return tuple(x.src[i] for x in lanes)
      if u.op is Ops.STORE: return f"*({self.vector_type}*){addr(u)} = {splat(srcs(2))};"
      if u.op is Ops.ACC_UPDATE:
        if len(u.src) == 3:   # fused: lanes are the reductions, their values the products
          return f"{vnames[lanes]} = tw_fma16({splat(tuple(x.src[0].src[0] for x in lanes))}, {splat(tuple(x.src[0].src[1] for x in lanes))}, {vnames[lanes]});"
        return f"{vnames[lanes]} = {self.render_alu(lanes[0].arg, [vnames[lanes], v(tuple(x.src[0] for x in lanes))], u.dtype, u.dtype, list(u.src))};"
      if u.op is Ops.DEFINE_ACC:
        red = lanes[0]
        vnames[lanes] = new_name("acc")
        init = v(tuple(inits[x] for x in lanes)) if len(u.src) > 1 else splat((UOp.const(red.dtype, reduce_identity(red.arg, red.dtype)),))
        return f"{self.vector_type} {vnames[lanes]} = {init};"
      vnames[lanes] = new_name("vec")
      if u.op is Ops.LOAD:
        expr = f"*(const {self.vector_type}*){addr(u)}" if step == 1 else \
               f"(({self.vector_type}){{{', '.join(f'{addr(u)}[{l * step}]' for l in range(len(lanes)))}}})"
      elif u.op is Ops.WHERE: expr = self.code_for_op[Ops.WHERE](self, r(u.src[0]), splat(srcs(1)), splat(srcs(2)), u.dtype)
      else: expr = self.render_alu(u.op, [v(srcs(i)) for i in range(len(u.src))], u.dtype, u.src[0].dtype, list(u.src))
      return f"{self.vector_type} {vnames[lanes]} = {expr};"
    unused = self.unused_addresses(prog, vec) if vec else set()
    params = []
    for g in prog.globals:
      names[g] = f"data{g.arg[0]}"
      params.append(self.render_param(g, names[g], g.arg[0] in prog.outputs))
    if self.core_split and prog.parallel_range is not None: params += ["int core_lo", "int core_hi"]
    body: list[str] = []
    wmma: dict[tuple, str] = {}   # the sources of each tensor-core instruction issued -> its result array
    depth = 1
    def line(s: str): body.append("  " * depth + s)
    # a store of a grouped reduction: the workgroup's threads hold one value, thread 0 stores it
    def store_line(st: str): line(f"if ({self.local_id} == 0u) {{ {st} }}" if prog.group else st)
    for u in prog.uops:
      op = u.op
      if op in (Ops.CONST, Ops.DEFINE_GLOBAL, Ops.SINK) or u in unused: continue
      if (m := vec.get(u.src[0] if op in (Ops.DEFINE_ACC, Ops.ACC_UPDATE) else u)) is not None:
        if (m[0], op) not in emitted:
          emitted.add((m[0], op))
          line(vector_line(u, *m))
        continue
      if op is Ops.RANGE:
        if u in wide_loops: line(self.wide_loop_pragma)
        names[u] = new_name("ridx")
        lo, hi = ("core_lo", "core_hi") if self.core_split and u is prog.parallel_range else ("0", r(u.src[0]))
        line(self.render_range(names[u], lo, hi))
        depth += 1
      elif op is Ops.ENDRANGE:
        depth -= 1
        line("}")
      elif op is Ops.DEFINE_ACC:
        red = u.src[0]
        names[red] = new_name("acc")
        init = r(u.src[1]) if len(u.src) > 1 else self.render_const(reduce_identity(red.arg, u.dtype), u.dtype)
        line(self.render_decl(u.dtype, names[red], init, mutable=True))
      elif op is Ops.ACC_UPDATE:
        red, *vals = u.src
        acc = names[red]
        upd = self.render_fma(r(vals[0]), r(vals[1]), acc) if len(vals) == 2 else \
              self.render_alu(red.arg, [acc, r(vals[0])], u.dtype, u.dtype, [red, vals[0]])
        line(f"{acc} = {self.round_result(upd, u.dtype)};")
      elif op is Ops.REDUCE: continue
      elif op is Ops.SPECIAL:   # GPU only: a thread index (arg: its name), or a workgroup reduction (arg: ("group", ...))
        names[u] = u.arg if isinstance(u.arg, str) else new_name(u.arg[0])
        if isinstance(u.arg, str) and u.arg.startswith("lid"): lines = self.render_thread_index(u, names[u], prog)
        else: lines = self.render_special(u, names[u], prog, [r(x) for x in u.src])
        for s in lines: line(s)
      elif op is Ops.DEFINE_LOCAL:   # workgroup memory (see staging.stage_loads): declared at the top of the kernel
        names[u] = u.arg[0]
        self._local_decls.append(self.render_local(names[u], u.dtype, u.arg[1]))
      elif op is Ops.BARRIER: line(self.barrier)
      elif op in (Ops.LOAD, Ops.STORE) and u.src[0].op is Ops.DEFINE_LOCAL:   # values in registers' types: no conversion
        if op is Ops.STORE: line(f"{r(u.src[0])}[{r(u.src[1])}] = {r(u.src[2])};")
        else:
          names[u] = new_name("val")
          line(self.render_decl(u.dtype, names[u], f"{r(u.src[0])}[{r(u.src[1])}]"))
      elif u in runs and op is Ops.LOAD:
        run, vname = runs[u], new_name("vec")
        line(f"{self.vector_type} {vname} = {self.render_vector_load(r(u.src[0]), self.vector_address(run[0], r))};")
        for i, x in enumerate(run): names[x] = f"{vname}.{'xyzw'[i]}"
      elif u in runs:
        run = runs[u]
        store_line(self.render_vector_store(r(u.src[0]), self.vector_address(run[0], r), [r(x.src[2]) for x in run]))
      elif u in in_run: continue   # rendered with its run
      elif op is Ops.LOAD:
        buf, idx = u.src[0], u.src[1]
        ld = self.render_load(r(buf), r(idx), u.dtype)
        if len(u.src) > 2: ld = self.code_for_op[Ops.WHERE](self, r(u.src[2]), ld, self.render_const(0, u.dtype), u.dtype)
        names[u] = new_name("val")
        line(self.render_decl(u.dtype, names[u], ld))
      elif op is Ops.WMMA:   # the lane's elements of one product are uops with the same sources: issued once
        if u.src not in wmma:
          wmma[u.src] = new_name("wmma")
          for s in self.render_wmma(wmma[u.src], u.arg[0], [r(x) for x in u.src]): line(s)
        names[u] = f"{wmma[u.src]}[{u.arg[1]}]"
      elif op is Ops.STORE:
        store_line(self.render_store(r(u.src[0]), r(u.src[1]), r(u.src[2]), u.src[2].dtype))
      else:
        srcs = [r(s) for s in u.src]
        if op is Ops.CAST: expr = self.render_cast(srcs[0], u.dtype, u.src[0].dtype)
        elif op is Ops.BITCAST: expr = self.render_bitcast(srcs[0], u.dtype, u.src[0].dtype)
        else: expr = self.round_result(self.render_alu(op, srcs, u.dtype, u.src[0].dtype, list(u.src)), u.dtype)
        names[u] = new_name("alu")
        line(f"{self.index_type} {names[u]} = {expr};" if u in wide else self.render_decl(u.dtype, names[u], expr))
    return self.render_kernel(prog.name, params, body, prog)
