"""The PYTHON device's renderer: a kernel's "source" is its linear program itself, one uop per line, which the
pure-Python runtime (backends/python.py) interprets.

Kernels are lowered the GPU way (`has_threads`): the output loops become one flat thread index `gid`, and with a
workgroup of one thread (`local_size = 1`, so heuristics.group_size is 0) no reduction is split across threads. Every
thread then runs the same loops with the same trip counts, which lets the interpreter evaluate each uop for many
threads at once.

Format (text, so DEBUG=4 shows it): `name NAME`, `threads N`, then one line per uop with five fields:
`index OP dtype sources arg`, where sources are comma-separated indices of earlier lines and `-` marks an empty field.
DEFINE_GLOBAL's arg is `position,size`; DEFINE_ACC's and ACC_UPDATE's is the reduction op (a REDUCE is referred to by
its DEFINE_ACC's index; ACC_UPDATE's sources are the accumulator and the value, or for a fused product
(linearize.fused_products) the accumulator and the two factors: acc = fma(a, b, acc)); CONST's is the value's repr; an
integer ALU op whose value bounds (UOp.vmin/vmax) prove it cannot overflow has `inrange` (no wrap-around check); EXP2
and LOG2 have `fused` where their polynomials take fused multiply-adds (as the CPU device's, see its TW_FMA).
"""
from __future__ import annotations
from tinyweb.uop import UOp, Ops, ALU
from tinyweb.codegen.program import Program
from tinyweb.codegen.renderer import Renderer

class PythonRenderer(Renderer):
  device = "PYTHON"
  has_threads = True   # one thread per workgroup (local_size = max_local_size = 1); it ignores the launch grid

  def render(self, prog: Program) -> str:
    index: dict[UOp, int] = {}
    lines = [f"name {prog.name}", f"threads {prog.threads}"]
    def emit(u: UOp, op: str, srcs: tuple, arg):
      index[u] = len(lines) - 2
      lines.append(f"{index[u]} {op} {u.dtype.name if u.dtype is not None else '-'} {','.join(map(str, srcs)) or '-'} "
                   f"{'-' if arg is None else arg}")
    for u in prog.uops:
      if u.op in (Ops.SINK, Ops.REDUCE): continue
      for s in u.src:   # a loop's bound is not in the program when nothing else uses it
        if s.op is Ops.CONST and s not in index: emit(s, "CONST", (), repr(s.arg))
      if u.op is Ops.CONST: emit(u, "CONST", (), repr(u.arg))
      elif u.op is Ops.SPECIAL and u.arg != "gid":
        raise NotImplementedError(f"PYTHON: no workgroups, got SPECIAL {u.arg!r}")
      elif u.op is Ops.DEFINE_ACC:   # the accumulator stands for its REDUCE from here on
        emit(u, "DEFINE_ACC", (), u.src[0].arg.name)
        index[u.src[0]] = index[u]
      else:
        if u.op is Ops.DEFINE_GLOBAL: arg = f"{u.arg[0]},{u.arg[1]}"
        else: arg = u.src[0].arg.name if u.op is Ops.ACC_UPDATE else u.arg
        if u.op in ALU and u.dtype.is_int and (u.vmin > u.dtype.min or u.vmax < u.dtype.max): arg = "inrange"
        if u.op in (Ops.EXP2, Ops.LOG2) and self.fused_multiply_add: arg = "fused"   # (the CPU device's TW_FMA)
        if not (arg is None or isinstance(arg, (int, str))) or " " in str(arg):
          raise NotImplementedError(f"PYTHON: cannot serialize {u.op} arg {arg!r}")
        emit(u, u.op.name, tuple(index[s] for s in u.src), arg)
    return "\n".join(lines) + "\n"
