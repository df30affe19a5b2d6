"""The PYTHON device's renderer: a kernel's "source" is its linear program itself, one uop per line, which the
pure-Python runtime (backends/python.py) interprets.

Kernels are lowered the GPU way (`has_threads`): the output loops become one flat thread index `gid`, and with a
workgroup of one thread (`local_size = 1`, so lower.group_size is 0) no reduction is split across threads. Every
thread then runs the same loops with the same trip counts, which lets the interpreter evaluate each uop for many
threads at once.

Format (text, so DEBUG=4 shows it): `name: '...'`, `threads: N`, then `index: (op, dtype, sources, arg)` per uop, where
sources are indices of earlier lines. DEFINE_GLOBAL's arg is (argument position, size); DEFINE_ACC carries the
reduction op's name (a REDUCE is referred to by its DEFINE_ACC's index) and ACC_UPDATE has (accumulator, value);
non-finite float constants are written as strings ('inf', '-inf', 'nan')."""
from __future__ import annotations
import math
from tinyweb.uop import UOp, Ops
from tinyweb.codegen.lower import Program

class PythonRenderer:
  device = "PYTHON"
  has_threads = True
  local_size = max_local_size = 1
  max_groups = 2**31 - 1   # the interpreter ignores the launch grid: one dimension always fits

  def render(self, prog: Program) -> str:
    index: dict[UOp, int] = {}
    lines = [f"name: {prog.name!r}", f"threads: {prog.threads}"]
    def emit(u: UOp, op: str, srcs: tuple, arg):
      index[u] = len(lines) - 2
      lines.append(f"{index[u]}: {(op, u.dtype.name if u.dtype is not None else None, srcs, arg)!r}")
    def emit_const(u: UOp):
      emit(u, "CONST", (), repr(u.arg) if isinstance(u.arg, float) and not math.isfinite(u.arg) else u.arg)
    for u in prog.uops:
      if u.op in (Ops.SINK, Ops.REDUCE): continue
      for s in u.src:   # a loop's bound is not in the program when nothing else uses it
        if s.op is Ops.CONST and s not in index: emit_const(s)
      if u.op is Ops.CONST: emit_const(u)
      elif u.op is Ops.SPECIAL and u.arg != "gid": raise NotImplementedError(f"PYTHON: no workgroups, got SPECIAL {u.arg!r}")
      elif u.op is Ops.DEFINE_ACC:   # the accumulator stands for its REDUCE from here on
        emit(u, "DEFINE_ACC", (), u.src[0].arg.name)
        index[u.src[0]] = index[u]
      else:
        arg = (u.arg[0], u.arg[1]) if u.op is Ops.DEFINE_GLOBAL else u.src[0].arg.name if u.op is Ops.ACC_UPDATE else u.arg
        if not (arg is None or isinstance(arg, (int, float, str, tuple))): raise NotImplementedError(f"PYTHON: cannot serialize {u.op} arg {arg!r}")
        emit(u, u.op.name, tuple(index[s] for s in u.src), arg)
    return "\n".join(lines) + "\n"
