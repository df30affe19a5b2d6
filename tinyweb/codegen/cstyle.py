"""C-like renderers: a linear kernel program -> source text. `CStyleRenderer` holds everything C-like languages share;
a target (C for clang in clang.py, WGSL, OpenCL C, CUDA C) subclasses it and overrides only what differs."""
from __future__ import annotations
import copy, math
from tinyweb.dtype import DType, dtypes
from tinyweb.uop import UOp, Ops
from tinyweb.codegen.program import Program
from tinyweb.codegen.lowering import reduce_identity
from tinyweb.codegen.renderer import Renderer
from tinyweb.codegen.vectors import const_offset

UNSIGNED = {dtypes.int8: dtypes.uint8, dtypes.int16: dtypes.uint16, dtypes.int32: dtypes.uint32, dtypes.int64: dtypes.uint64}

def may_overflow(op: Ops, dt: DType, srcs: list[UOp]) -> bool:
  """Whether a signed int32/int64 ADD, MUL or NEG of operands in their bounds can leave dt's range."""
  if op not in (Ops.ADD, Ops.MUL, Ops.NEG) or dt.kind != "i" or dt.itemsize < 4: return False
  b = [s.bounds for s in srcs]
  ends = [-b[0][0], -b[0][1]] if op is Ops.NEG else [b[0][0] + b[1][0], b[0][1] + b[1][1]] if op is Ops.ADD else \
         [x * y for x in b[0] for y in b[1]]
  return min(ends) < dt.min or max(ends) > dt.max

class KernelWriter:
  """Writes one kernel's source: walks the program's uops in order, names each value and appends its lines, one method
  per kind of uop (`write`). The renderer says how each piece is spelled; a target that writes more (the CPU's vector
  groups, clang.py) subclasses this (`CStyleRenderer.writer`)."""
  def __init__(self, rd: CStyleRenderer, prog: Program):
    self.rd, self.prog = rd, prog
    self.names: dict[UOp, str] = {}
    self.counters: dict[str, int] = {}
    self.body: list[str] = []
    self.depth = 1
    self.runs = rd.vector_runs(prog)   # GPU targets: float4-style loads and stores
    self.in_run = {u for run in self.runs.values() for u in run}
    self.wmma: dict[tuple, str] = {}   # the sources of each tensor-core instruction issued -> its result array
  def new_name(self, prefix: str) -> str:
    self.counters[prefix] = self.counters.get(prefix, -1) + 1
    return f"{prefix}{self.counters[prefix]}"
  def r(self, u: UOp) -> str: return self.rd.render_const(u.arg, u.dtype) if u.op is Ops.CONST else self.names[u]
  def line(self, s: str): self.body.append("  " * self.depth + s)
  def store_line(self, st: str):   # a store of a grouped reduction: the workgroup's threads hold one value, thread 0 stores it
    self.line(f"if ({self.rd.local_id} == 0u) {{ {st} }}" if self.prog.group else st)
  def declare(self, u: UOp, expr: str):   # an ALU result
    self.line(self.rd.render_decl(u.dtype, self.names[u], expr))

  def write_kernel(self) -> str:
    rd, prog = self.rd, self.prog
    params = []
    for g in prog.globals:
      self.names[g] = f"data{g.arg[0]}"
      params.append(rd.render_param(g, self.names[g], g.arg[0] in prog.outputs))
    if rd.core_split and prog.parallel_range is not None: params += ["int core_lo", "int core_hi"]
    for u in prog.uops: self.write(u)
    return rd.render_kernel(prog.name, params, self.body, prog)
  def write(self, u: UOp):
    if u.op in (Ops.CONST, Ops.DEFINE_GLOBAL, Ops.SINK, Ops.REDUCE): return   # (inline, parameters; a REDUCE is its ACC ops)
    getattr(self, KernelWriter.WRITERS.get(u.op, "write_alu"))(u)

  def write_range(self, u: UOp):
    self.names[u] = self.new_name("ridx")
    lo, hi = ("core_lo", "core_hi") if self.rd.core_split and u is self.prog.parallel_range else ("0", self.r(u.src[0]))
    self.line(self.rd.render_range(self.names[u], lo, hi, u.dtype))
    self.depth += 1
  def write_endrange(self, u: UOp):
    self.depth -= 1
    self.line("}")
  def write_define_acc(self, u: UOp):
    red = u.src[0]
    self.names[red] = self.new_name("acc")
    init = self.r(u.src[1]) if len(u.src) > 1 else self.rd.render_const(reduce_identity(red.arg, u.dtype), u.dtype)
    self.line(self.rd.render_decl(u.dtype, self.names[red], init, mutable=True))
  def write_acc_update(self, u: UOp):
    red, *vals = u.src
    acc = self.names[red]
    upd = self.rd.render_fma(self.r(vals[0]), self.r(vals[1]), acc) if len(vals) == 2 else \
          self.rd.render_alu(red.arg, [acc, self.r(vals[0])], u.dtype, u.dtype, [red, vals[0]])
    self.line(f"{acc} = {self.rd.round_result(upd, u.dtype)};")
  def write_special(self, u: UOp):   # GPU only: a thread index (arg: its name), or a workgroup reduction (arg: ("group", ...))
    self.names[u] = u.arg if isinstance(u.arg, str) else self.new_name(u.arg[0])
    if isinstance(u.arg, str) and u.arg.startswith("lid"): lines = self.rd.render_thread_index(u, self.names[u], self.prog)
    else: lines = self.rd.render_special(u, self.names[u], self.prog, [self.r(x) for x in u.src])
    for s in lines: self.line(s)
  def write_define_local(self, u: UOp):   # workgroup memory (see staging.stage_loads): declared at the top of the kernel
    self.names[u] = u.arg[0]
    self.rd._local_decls.append(self.rd.render_local(self.names[u], u.dtype, u.arg[1]))
  def write_barrier(self, u: UOp): self.line(self.rd.barrier)
  def write_load(self, u: UOp):
    r = self.r
    if u.src[0].op is Ops.DEFINE_LOCAL:   # values in registers' types: no conversion
      self.names[u] = self.new_name("val")
      self.line(self.rd.render_decl(u.dtype, self.names[u], f"{r(u.src[0])}[{r(u.src[1])}]"))
    elif u in self.runs:
      run, vname = self.runs[u], self.new_name("vec")
      self.line(f"{self.rd.vector_type} {vname} = {self.rd.render_vector_load(r(u.src[0]), self.rd.vector_address(run[0], r))};")
      for i, x in enumerate(run): self.names[x] = f"{vname}.{'xyzw'[i]}"
    elif u not in self.in_run:   # (one of a run: rendered with it)
      ld = self.rd.render_load(r(u.src[0]), r(u.src[1]), u.dtype)
      if len(u.src) > 2: ld = self.rd.code_for_op[Ops.WHERE](self.rd, r(u.src[2]), ld, self.rd.render_const(0, u.dtype), u.dtype)
      self.names[u] = self.new_name("val")
      self.line(self.rd.render_decl(u.dtype, self.names[u], ld))
  def write_store(self, u: UOp):
    r = self.r
    if u.src[0].op is Ops.DEFINE_LOCAL: self.line(f"{r(u.src[0])}[{r(u.src[1])}] = {r(u.src[2])};")
    elif u in self.runs:
      run = self.runs[u]
      self.store_line(self.rd.render_vector_store(r(u.src[0]), self.rd.vector_address(run[0], r), [r(x.src[2]) for x in run]))
    elif u not in self.in_run: self.store_line(self.rd.render_store(r(u.src[0]), r(u.src[1]), r(u.src[2]), u.src[2].dtype))
  def write_wmma(self, u: UOp):   # the lane's elements of one product are uops with the same sources: issued once
    if u.src not in self.wmma:
      self.wmma[u.src] = self.new_name("wmma")
      for s in self.rd.render_wmma(self.wmma[u.src], u.arg[0], [self.r(x) for x in u.src]): self.line(s)
    self.names[u] = f"{self.wmma[u.src]}[{u.arg[1]}]"
  def write_alu(self, u: UOp):   # also CAST and BITCAST
    rd, srcs = self.rd, [self.r(s) for s in u.src]
    if u.op is Ops.CAST: expr = rd.render_cast(srcs[0], u.dtype, u.src[0].dtype)
    elif u.op is Ops.BITCAST: expr = rd.render_bitcast(srcs[0], u.dtype, u.src[0].dtype)
    else: expr = rd.round_result(rd.render_alu(u.op, srcs, u.dtype, u.src[0].dtype, list(u.src)), u.dtype)
    self.names[u] = self.new_name("alu")
    self.declare(u, expr)
  WRITERS = {Ops.RANGE: "write_range", Ops.ENDRANGE: "write_endrange", Ops.DEFINE_ACC: "write_define_acc",
             Ops.ACC_UPDATE: "write_acc_update", Ops.SPECIAL: "write_special", Ops.DEFINE_LOCAL: "write_define_local",
             Ops.BARRIER: "write_barrier", Ops.LOAD: "write_load", Ops.STORE: "write_store", Ops.WMMA: "write_wmma"}

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
  vector_type = ""  # the C type of `vector_lanes` (CPU) or `vector_width` (GPU) float32s
  signed_overflow_wraps = False   # the language defines signed int overflow as wrapping (WGSL); C leaves it undefined
  writer = KernelWriter   # writes one kernel (a subclass for a target that writes more)

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
  def render_range(self, name: str, lo: str, hi: str, dt: DType) -> str: return f"for ({self.reg(dt)} {name} = {lo}; {name} < {hi}; {name}++) {{"
  def render_special(self, u: UOp, name: str, prog: Program, srcs: list[str]) -> list[str]:
    raise NotImplementedError(f"{type(self).__name__} has no thread indices")
  def to_int(self, unsigned: str) -> str: return f"(int)({unsigned})"
  def render_thread_index(self, u: UOp, name: str, prog: Program) -> list[str]:
    """SPECIAL "lid...": the thread's index in its workgroup, (local_id / stride) % n (src: n[, stride])."""
    n, stride = u.src[0].arg, u.src[1].arg if len(u.src) > 1 else 1
    e = self.local_id if stride == 1 else f"({self.local_id}/{stride}u)"
    if n * stride < prog.local_size: e = f"({e}%{n}u)"
    return [self.render_decl(u.dtype, name, self.to_int(e))]
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

  def render(self, prog: Program) -> str:
    # each kernel is rendered by its own shallow copy of the renderer, which holds that kernel's scratch state
    # (_local_decls, _vectors, WGSL's _atomic): threads render at once, and the shared renderer never changes
    rd = copy.copy(self)
    rd.begin_kernel()
    return rd.writer(rd, prog).write_kernel()
  def begin_kernel(self):
    """The per-kernel scratch state, on this render's copy of the renderer (a target that needs more adds to it)."""
    self._local_decls: list[str] = []   # workgroup-memory declarations the kernel needs (render_local)
    self._vectors = False               # explicit 512-bit vectors in the kernel (the CPU's writer sets it)
