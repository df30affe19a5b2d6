"""`@function`: tinygrad 0.14's decorator for a function (or method) of Tensors, so that tinygrad code using it runs.

tinygrad turns each call into one CALL node of its UOp graph (the body traced once, its inputs made parameters), so a
compiled subgraph can be reused where the function is called again. tinyweb's graph has no CALL node: it traces the body
inline, as if the function were not decorated. The result (values and gradients) is the same; only tinygrad's reuse of
the compiled subgraph is missing, and tinyweb's scheduler fuses across the call instead.

What tinygrad's decorator checks, tinyweb's checks too: the function must return a Tensor or a tuple of Tensors (any
other value raises a RuntimeError naming the function), and it must not realize or read a tensor while it runs (tinygrad
disables device use there; in tinyweb `realize()`, `numpy()`, `item()`, `tolist()` and `data()` raise a RuntimeError
naming the function). tinygrad's keywords are accepted: `precompile` and `precompile_backward` (compile the subgraph
ahead of time in tinygrad) change nothing here; `allow_implicit` is accepted, but tinyweb does not look for implicit
inputs (tensors the body reads that are not among the arguments), so a body that tinygrad refuses for them runs here.
`grad_fxn` (a custom gradient written on the CALL node's UOps) raises NotImplementedError: use `Tensor.custom_gradient`
inside the body instead."""
from __future__ import annotations
import functools
from typing import Any, Callable, Optional
from tinyweb.tensor import Tensor
from tinyweb.helpers import RUNNING_FUNCTIONS

class _function:
  """A decorated function; a descriptor, so that decorating a method binds it to its instance like a plain method."""
  def __init__(self, fxn: Callable[..., Any], *, precompile: bool, precompile_backward: bool, allow_implicit: bool,
               grad_fxn: Optional[Callable]):
    if not callable(fxn): raise TypeError(f"function: expected a callable to decorate, got {type(fxn).__name__}")
    self.fxn, self.precompile, self.precompile_backward, self.allow_implicit = fxn, precompile, precompile_backward, allow_implicit
    self.name = getattr(fxn, "__qualname__", None) or type(fxn).__qualname__
    if grad_fxn is not None:
      raise NotImplementedError(f"function {self.name}: grad_fxn= is not supported in tinyweb (tinygrad's grad_fxn computes the "
                                "gradient on the UOps of the function's CALL node, which tinyweb's graph does not have); give "
                                "the body's result its gradient with Tensor.custom_gradient(inputs, backward) instead")
    self.grad_fxn = None
    functools.update_wrapper(self, fxn)

  def __get__(self, obj, objtype=None): return functools.partial(self.__call__, obj) if obj is not None else self

  def __call__(self, *args, **kwargs):
    token = RUNNING_FUNCTIONS.set(RUNNING_FUNCTIONS.get() + (self.name,))
    try: ret = self.fxn(*args, **kwargs)
    finally: RUNNING_FUNCTIONS.reset(token)
    if isinstance(ret, Tensor) or (isinstance(ret, tuple) and all(isinstance(x, Tensor) for x in ret)): return ret
    raise RuntimeError(f"function {self.name}: return type {type(ret)} not supported (return a Tensor or a tuple of Tensors)")

  def __repr__(self): return f"<tinyweb.function {self.name}>"

def function(fxn: Optional[Callable[..., Any]] = None, *, precompile: bool = False, precompile_backward: bool = False,
             allow_implicit: bool = False, grad_fxn: Optional[Callable] = None):
  """`@function` or `@function(precompile=..., precompile_backward=..., allow_implicit=..., grad_fxn=...)`: tinygrad's
  decorator for a function or method that takes and returns Tensors. tinyweb traces the body inline (see the module's
  docstring): the result is the same as tinygrad's, which additionally reuses the compiled subgraph. The body must
  return a Tensor or a tuple of Tensors and must not realize or read tensors; grad_fxn raises NotImplementedError."""
  def make(f: Callable[..., Any]) -> _function:
    return _function(f, precompile=precompile, precompile_backward=precompile_backward, allow_implicit=allow_implicit,
                     grad_fxn=grad_fxn)
  return make if fxn is None else make(fxn)
