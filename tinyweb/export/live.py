"""An exported model run live: built by tinyweb itself from the weights it was exported from, the way
`python -m tinyweb.export` built it (tinyweb.export.cli.MODELS), and run as a TinyJit on the device. The demo pages'
?backend=live (web/model_live.ts) does this in Pyodide on the page's WebGPU device, from the files an export made with
`--with-source` keeps in its source/ folder, in place of the exported kernels: the same inputs and outputs, computed by
the framework's Python running in the browser. Natively it runs the same way on any device."""
from __future__ import annotations
from typing import Optional
from tinyweb.jit import TinyJit, _tensors_in
from tinyweb.tensor import Tensor
from tinyweb.export.cli import MODELS, Parts

# (model, weights, size, device) -> what MODELS built: the parts of one pipeline (its folders) share one build
_built: dict[tuple, object] = {}

class LiveModel:
  """The function of MODELS[model](weights, size, device)'s Exportable (or of its part `part`, for a model exported as
  Parts), called with an export's inputs in the manifest's order and returning its outputs in the manifest's order
  (realized, contiguous). Each shape of inputs gets a TinyJit of its own (an export's variants), so the first two calls
  of a shape run it plainly and capture it, and the later ones replay the kernels."""
  def __init__(self, model: str, weights: Optional[str], size: Optional[int], part: Optional[str] = None, device: str = "WEBGPU"):
    if model not in MODELS: raise ValueError(f"live: unknown model {model!r}; the models are {', '.join(sorted(MODELS))}")
    key = (model, weights, size, device)
    if key not in _built: _built[key] = MODELS[model](weights, size, device)[1]
    built = _built[key]
    if isinstance(built, Parts):
      if part not in built.parts: raise ValueError(f"live: {model} has the parts {', '.join(built.parts)}, not {part!r}")
      built = built.parts[part]
    elif part is not None: raise ValueError(f"live: {model} is one function, not parts (asked for {part!r})")
    self.fn, self.device = built.fn, device
    self._jits: dict[tuple, TinyJit] = {}

  def __call__(self, *inputs: Tensor) -> list[Tensor]:
    shapes = tuple((t.shape, t.dtype) for t in inputs)
    if shapes not in self._jits: self._jits[shapes] = TinyJit(lambda *xs: [t.contiguous() for t in _tensors_in(self.fn(*xs))])
    return [t.realize() for t in self._jits[shapes](*[t.to(self.device) for t in inputs])]
