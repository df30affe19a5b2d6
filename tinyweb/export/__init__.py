"""Export a jitted function for static hosting: its kernels (WGSL for WebGPU, or WebAssembly), a manifest and its
weights, run in a browser by the small TypeScript runtime `web/model.ts` (npm `tinyweb/model`: `loadModel(url)`, then
`model.run({input: ...})`), with no Pyodide and no Python on the page.

`export(fn, *example_inputs, path=..., target="WEBGPU")` runs `fn` as a `TinyJit` on the target's device (WEBGPU or
WASM) until it is captured, then writes into the folder `path` (natively, or in the browser's Pyodide on the page's
WebGPU device, into Pyodide's file system):

- `kernels/NNN_<name>.wgsl` (target WEBGPU): each distinct kernel's WGSL (entry point `<name>`, storage bindings 0..n-1
  of group 0), without the prelude's helpers it does not use.
- `kernels/NNN_<name>.wasm` (target WASM): each distinct kernel as a WebAssembly module (tinyweb/codegen/wasm.py's
  binary; its text is not written: DEBUG=4 prints it, and a browser's devtools or wasm2wat show the binary as text). It
  imports "env" "memory" (the one linear memory holding every buffer) and the math it needs ("math" "sin", "cos",
  "fmod", "exp2", "log2", on float64), and exports the function `<name>`, whose i32 parameters are its buffers' byte
  addresses in that memory, in the step's order.
- `weights-XXXXX-of-YYYYY.safetensors`: the model's constants, sharded (`shard_bytes` each at most, unless one tensor is
  larger), and `weights.json`, their index in Hugging Face's form (`weight_map`, plus `sha256` per file and
  `tensor_sha256` per tensor: the digest of its data bytes) that the runtime's loader (web/weights.ts: Range requests,
  the Cache API, sha256 checks) reads.
- `manifest.json` (FORMAT, VERSION below):
  - `kernels`: [{file, entryPoint, workgroupSize: [x, y, z], bindings}] (bindings: how many storage buffers); WASM:
    [{file, entryPoint, params, imports}] (params: how many buffer addresses it takes; imports: the "math" functions).
  - `variants`: one per batch size exported (`batch_sizes`; one when not asked), the example inputs' own first; each
    {inputs, outputs, buffers, steps}, its ids its own; they share the kernels and the weights (by tensor name). A page
    runs the variant whose inputs have the sizes of the arrays it is given.
    - `buffers`: [{id, kind, bytes, dtype?, tensor?, stored?}] (bytes: exact; a page rounds sizes up to 4; stored:
      "float16" where a float32 weight's shard holds it as float16, converted on the GPU), kind is one of
        input   (written by `run` from the caller's array),  output (read back after the dispatches),
        weight  (only read: its bytes are in the shards, as the tensor named `tensor`; an output may be one),
        state   (read, then written: random numbers' state, a KV cache; its first value is in the shards like a
                 weight's, and a page keeps what the runs write into it from one run to the next, for every variant),
        scratch (intermediate values; one entry per memory slot: buffers whose lifetimes do not overlap share one, as
                 TinyJit's replays share them: `TinyJit.memory`).
    - `steps`, in order: {kernel, buffers: [buffer ids, binding 0 first], workgroups: [x, y, z]} is a dispatch (WASM:
      no workgroups, the buffers are the function's arguments); {copy: {src, dst, bytes}} a buffer-to-buffer copy.
    - `inputs` / `outputs`: [{name, buffer, shape, dtype}] (dtype: tinyweb's name, "float32"...). Names: `names` /
      `output_names`, else a returned dict's keys, else "input"/"output" (input0, input1.. when there are several).
  - `features`: the WebGPU features it needs ([] or ["shader-f16"]); `limits`: the adapter limits it needs (camelCase
    names), never above WebGPU's defaults (DEFAULT_LIMITS) unless the caller passes `limits=` (their new ceilings).
    WASM instead: `memory`: {bytes}, the size of the linear memory that holds every buffer (at most wasm32's 4 GiB), each
    buffer entry's `offset` its byte address there: the weights and state once each, the variants' other buffers in
    slots they share (variant's n-th such buffer -> slot n), every buffer on a 64-byte boundary (codegen/wasm.ALIGN).
  - `weights`: {index: "weights.json", shards: [{file, bytes, sha256, tensors}]}.
  - `capturedOn` (WEBGPU): {adapter, portable}: the native adapter the kernels were captured on, and whether its WEBGPU
    device was made for the portable target.

Where the kernels run well: they are tuned for the WEBGPU device that captured them. Make that device with
TINYWEB_WEBGPU_LIMITS=default (before its first use; `python -m tinyweb.export` does) for pages on any adapter: WebGPU's
default limits, no f16, and no workgroup tiles or grouped reductions, whose barriers CPU-emulated adapters (SwiftShader,
the browsers' fallback) run very slowly (EfficientNet-Lite0 in headless Chromium: 22 s per inference with them, 0.7 s
without), and register tiling within a budget of reads per loop step that SwiftShader's shader compiler copes with
(backends/webgpu_shared.PORTABLE_UPCAST_READS: it lost the device on a YOLOv8 head kernel beyond it). A device made
with the adapter's limits also works while the kernels stay within the defaults.

State: a buffer the function reads and then writes (random numbers' state, a KV cache written in place, an assign)
starts in the page with the value it has when it is exported, which is after the calls that captured the function (export
runs it up to three times): to start elsewhere, capture a TinyJit, set the state, then export the TinyJit.
Sizes: each variant is a capture at fixed shapes; sizes other than the batch need one export each.
WASM kernels compute what the WASM device computes natively, bit for bit where the page's math imports (JavaScript's
Math) agree with tinyweb.scalar's: scalar code, one thread, no SIMD yet.
Progress (on stderr where it is a terminal, or with PROGRESS=1; PROGRESS=0 never): a line per capture counting the kernels
lowered, and one for the weights written.
`python -m tinyweb.export efficientnet-lite0 OUT_DIR [--target wasm]` exports a demo model (tinyweb/export/cli.py; also yolov8n..x, random weights
unless --weights, and minilm: a sentence-transformers folder, token ids and mask in, embeddings out)."""
from __future__ import annotations
import contextlib, hashlib, json, math, os, re, struct
from typing import Any, Callable, Optional, Sequence
from tinyweb.tensor import Tensor
from tinyweb.device import Buffer, Device
from tinyweb.dtype import dtypes
from tinyweb.jit import TinyJit, _tensors_in, written_by
from tinyweb.schedule import buffer_uop, is_contiguous_buffer
from tinyweb.nn.state import safe_save, _SAFETENSORS_NAMES
from tinyweb.helpers import tqdm
import tinyweb.events as events
from tinyweb.backends.webgpu_shared import DEFAULT_LIMITS as WEBGPU_DEFAULT_LIMITS, camel
from tinyweb.codegen.wasm import assemble, ALIGN as WASM_ALIGN, MAX_PAGES as WASM_MAX_PAGES, PAGE as WASM_PAGE

FORMAT, VERSION = "tinyweb-export", 2
# WebGPU's default limits (the spec's; every adapter has at least these), by their names in the browser's API: what a
# page can ask for anywhere
DEFAULT_LIMITS = {camel(k): v for k, v in WEBGPU_DEFAULT_LIMITS.items()}
SHARD_BYTES = 32 << 20
WEIGHTS_DTYPES = ("auto", "float16", "float32")   # export's weights_dtype: how float32 weights are stored
TARGETS = ("WEBGPU", "WASM")   # export's target: the device that captures, and the kernels' language
# WGSL types' sizes, for the workgroup memory a kernel declares
_WGSL_SIZES = {"f32": 4, "i32": 4, "u32": 4, "f16": 2, "bool": 4}

class ExportError(ValueError):
  """What cannot be exported, and why (a bad argument, or a function the exported format cannot express)."""

def _padded(nbytes: int) -> int: return (max(nbytes, 4) + 3) // 4 * 4   # (WebGPU buffer sizes: multiples of 4 bytes)

def _io_names(names: Optional[Sequence[str]], n: int, what: str, default: str) -> list[str]:
  if names is None: return [default] if n == 1 else [f"{default}{i}" for i in range(n)]
  if isinstance(names, str): names = [names]
  names = list(names)
  if len(names) != n: raise ExportError(f"export: {len(names)} {what} names {names} for {n} {what}s")
  for nm in names:
    if not isinstance(nm, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", nm):
      raise ExportError(f"export: {what} name {nm!r} is not a plain identifier (letters, digits, _ . -)")
  if len(set(names)) != n: raise ExportError(f"export: {what} names {names} are not unique")
  return names

def _kernel_needs(src: str) -> tuple[str, list[str], tuple[int, int, int], int, int]:
  """(source as written, features, workgroup size, bindings, workgroup memory bytes) of one kernel. The WEBGPU device
  enables f16 in every kernel when its adapter has shader-f16: a kernel that uses no f16 drops that line."""
  features = []
  if src.startswith("enable f16;\n"):
    rest = src[len("enable f16;\n"):]
    if re.search(r"\bf16\b", rest): features.append("shader-f16")
    else: src = rest
  if re.search(r"^\s*enable\s", src, re.M) and not features:
    raise ExportError(f"export: a kernel enables a WGSL extension the export does not know: {src.splitlines()[0]}")
  m = re.search(r"@workgroup_size\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?(?:,\s*(\d+)\s*)?\)", src)
  if m is None: raise ExportError("export: a kernel has no @workgroup_size")
  wg = tuple(int(g) if g else 1 for g in m.groups())
  bindings = len(re.findall(r"@binding\(", src))
  shared = sum(_WGSL_SIZES.get(t, 4) * int(n) for t, n in re.findall(r"var<workgroup>\s+\w+\s*:\s*array<(\w+),\s*(\d+)>", src))
  return src, features, wg, bindings, shared   # type: ignore[return-value]

_ITEM_HEAD = re.compile(r"(?:@\w+(?:\([^)]*\))?\s*)*(fn|struct|var(?:<[^>]*>)?|const|alias|override)\s+(\w+)")

def _top_level_items(src: str) -> Optional[list[tuple[str, str, str]]]:
  """The WGSL module's top-level items in order, as (kind, name, text with the comments and space before it); None when
  it does not split cleanly (the caller then keeps the source whole)."""
  items, i, start, n = [], 0, 0, len(src)
  while True:
    while i < n:   # space and comments before the next item
      if src[i].isspace(): i += 1
      elif src.startswith("//", i): i = n if (j := src.find("\n", i)) < 0 else j + 1
      else: break
    if i >= n: break
    m = _ITEM_HEAD.match(src, i)
    if m is None:
      if not src.startswith("enable ", i) or (j := src.find(";", i)) < 0: return None
      items.append(("enable", "", src[start:j + 1]))
      i = start = j + 1
      continue
    depth, j, braces = 0, m.end(), m.group(1) in ("fn", "struct")
    while j < n:
      c = src[j]
      if src.startswith("//", j): j = src.find("\n", j) if src.find("\n", j) >= 0 else n; continue
      if c in "({[": depth += 1
      elif c in ")}]":
        depth -= 1
        if depth < 0: return None
        if braces and c == "}" and depth == 0: break
      elif c == ";" and depth == 0 and not braces: break
      j += 1
    if j >= n: return None
    items.append((m.group(1), m.group(2), src[start:j + 1]))
    i = start = j + 1
  if src[start:].strip(): return None
  items.append(("tail", "", src[start:]))
  return items

def _tree_shake(src: str, entry: str) -> str:
  """The kernel without the prelude's helper functions, structs and private constants that its entry point does not use
  (the WGSL renderer puts all of them in every kernel): smaller files, less for the browser to compile."""
  items = _top_level_items(src)
  if items is None: return src
  removable = {name: k for k, (kind, name, _) in enumerate(items) if kind in ("fn", "struct", "const", "alias", "var<private>") and name != entry}
  keep = {k for k in range(len(items)) if items[k][1] not in removable}
  todo = list(keep)
  while todo:
    for word in re.findall(r"\b[A-Za-z_]\w*\b", items[todo.pop()][2]):
      if (k := removable.get(word)) is not None and k not in keep:
        keep.add(k)
        todo.append(k)
  out = "".join(items[k][2] for k in sorted(keep))
  return out if re.search(rf"\bfn {re.escape(entry)}\(", out) else src

def export(fn: Callable, *example_inputs: Tensor, path, names: Optional[Sequence[str]] = None,
           output_names: Optional[Sequence[str]] = None, limits: Optional[dict[str, int]] = None,
           features: Sequence[str] = (), state_dict: Optional[dict[str, Tensor]] = None, shard_bytes: int = SHARD_BYTES,
           weights_dtype: str = "auto", batch_sizes: Optional[Sequence[int]] = None,
           more_examples: Sequence[Sequence[Tensor]] = (), target: str = "WEBGPU") -> dict:
  """Capture `fn(*example_inputs)` (tensors on the target's device) as a TinyJit and write it to the folder `path` for
  `loadModel` (web/model.ts); returns the manifest. `target`: "WEBGPU" (WGSL kernels) or "WASM" (WebAssembly kernels,
  for browsers without WebGPU; limits and features are WebGPU's, a WASM export takes neither). `names`: the inputs'
  names (default "input", or input0, input1..); `output_names` likewise ("output"...). `limits`: adapter limits the page may ask above WebGPU's defaults
  (camelCase names -> the most it may need); `features`: WebGPU features it may need ("shader-f16"). `state_dict`: names
  for the weights (a weight that is one of its tensors' buffers gets its name, others are called "buffer<n>").
  `weights_dtype`: how float32 weights are stored in the shards: "auto" as float16 where that is exact (every value
  survives the round trip: weights that were float16 before, like ultralytics' checkpoints), "float16" all of them
  (rounded; a value beyond float16's range is refused), "float32" as they are. The page converts float16 weights to
  float32 on load, so the kernels and their results do not change with the storage.
  `batch_sizes`: the batch sizes the page may run, where every input's first dimension is the batch: one capture per
  size (the others' example inputs are zeros), each a variant of the manifest; the variants share the kernels and the
  weights, and the page picks the one its inputs' sizes fit. Default: the example inputs' batch only.
  `more_examples`: other example inputs, each a tuple like `example_inputs` (as many tensors, the same dtypes) in other
  shapes: each is captured as a variant too (a language model's prompt chunk of 16 tokens beside its 1-token step).
  A TinyJit that already captured is exported as it is (its example inputs are then not run; other batch sizes are
  captured by new TinyJits of its function)."""
  if not callable(fn): raise ExportError(f"export: fn must be a function (or a TinyJit), got {type(fn).__name__}")
  if target not in TARGETS: raise ExportError(f"export: target must be one of {', '.join(TARGETS)}, got {target!r}")
  if target != "WEBGPU" and (limits or features):
    raise ExportError(f"export: limits and features are WebGPU's; a {target} export takes neither")
  if path is None: raise ExportError("export: path (the folder to write) is required")
  if not example_inputs: raise ExportError("export: no example inputs: pass the tensors the function takes, e.g. "
                                           f"export(model, Tensor.zeros(1, 3, 224, 224, device={target!r}), path=...)")
  for i, t in enumerate(example_inputs):
    if not isinstance(t, Tensor):
      raise ExportError(f"export: example input {i} is a {type(t).__name__}, not a Tensor (only tensors can be inputs; "
                        f"bind other arguments with functools.partial or a lambda)")
    if Device.canonicalize(t.device) != target:
      raise ExportError(f"export: example input {i} is on {t.device}; the export captures {target} kernels: pass tensors "
                        f"on {target} (t.to({target!r})), and keep the model's weights there too")
  limits = dict(limits or {})
  for k in limits:
    if k not in DEFAULT_LIMITS: raise ExportError(f"export: unknown limit {k!r}; the limits are {sorted(DEFAULT_LIMITS)}")
  ceilings = {**DEFAULT_LIMITS, **{k: max(v, DEFAULT_LIMITS[k]) for k, v in limits.items()}}
  if shard_bytes < 1: raise ExportError(f"export: shard_bytes must be positive, got {shard_bytes}")
  if weights_dtype not in WEIGHTS_DTYPES:
    raise ExportError(f"export: weights_dtype must be one of {', '.join(WEIGHTS_DTYPES)}, got {weights_dtype!r}")
  in_names = _io_names(names, len(example_inputs), "input", "input")
  captures = _captures(example_inputs, batch_sizes, more_examples, target)

  if state_dict: Tensor.realize_all(*[t for t in state_dict.values() if isinstance(t, Tensor)])   # (weights, not their recipe)
  kernels: dict[str, tuple[int, Any]] = {}   # a kernel's source -> (its index, the kernel), in launch order (variants share them)
  variants: list[_Variant] = []
  for inputs, what in captures:
    own = inputs is example_inputs
    with _counting_kernels(f"export: capturing {what}" if len(captures) > 1 else "export: capturing"):
      jit, keys = _capture(fn, inputs, new_jit=not own)
    outs = _tensors_in(jit.outputs)
    if not variants:
      if output_names is None and keys is not None and len(keys) == len(outs) and \
         all(isinstance(k, str) and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.\-]*", k) for k in keys): output_names = keys
      out_names = _io_names(output_names, len(outs), "output", "output")
    elif [t.dtype for t in outs] != [t.dtype for t in variants[0].out_tensors]:
      raise ExportError(f"export: for {what} the function returns {len(outs)} outputs of {[t.dtype.name for t in outs]}, "
                        f"for {captures[0][1]} {[t.dtype.name for t in variants[0].out_tensors]}: the variants must differ only in shapes")
    variants.append(_Variant(jit, outs, in_names, out_names, kernels, target))
  kernel_list = [k for _, k in kernels.values()]
  head, files = _webgpu_kernels(variants, kernel_list, ceilings, set(features)) if target == "WEBGPU" else _wasm_kernels(variants, kernel_list)
  return _write(os.fspath(path), target, head, files, variants, state_dict, shard_bytes, weights_dtype)

@contextlib.contextmanager
def _counting_kernels(desc: str):
  """A progress line (helpers.tqdm, by the PROGRESS rule) counting the kernels lowered in the block."""
  with tqdm(desc=desc, unit=" kernels", disable=None) as bar:
    def lowered(event: str, fields: dict):
      if event == "lower": bar.update(1)
    with events.watching(lowered): yield

def _captures(example_inputs: tuple[Tensor, ...], batch_sizes: Optional[Sequence[int]],
              more_examples: Sequence[Sequence[Tensor]], target: str) -> list[tuple[tuple[Tensor, ...], str]]:
  """The inputs of each capture (each a variant), the example inputs first (a TinyJit passed in captured them), with
  what they are for the progress and errors ("batch size 4", "inputs of shapes [(1, 16)]")."""
  if batch_sizes is not None and more_examples:
    raise ExportError("export: give batch_sizes or more_examples, not both (more_examples can hold any batch size)")
  shapes = lambda ts: f"inputs of shapes {[tuple(t.shape) for t in ts]}"
  if batch_sizes is None:
    out = [(example_inputs, shapes(example_inputs))]
    for k, more in enumerate(more_examples):
      more = tuple(more) if isinstance(more, (list, tuple)) else (more,)
      if len(more) != len(example_inputs) or not all(isinstance(t, Tensor) for t in more):
        raise ExportError(f"export: more_examples[{k}] must be {len(example_inputs)} tensors like the example inputs, got "
                          f"{[type(t).__name__ for t in more]}")
      if [t.dtype for t in more] != [t.dtype for t in example_inputs] or any(Device.canonicalize(t.device) != target for t in more):
        raise ExportError(f"export: more_examples[{k}] has dtypes {[t.dtype.name for t in more]} on {[t.device for t in more]}; "
                          f"the variants take the example inputs' dtypes {[t.dtype.name for t in example_inputs]}, on {target}")
      if any(tuple(t.shape for t in more) == tuple(t.shape for t in ins) for ins, _ in out):
        raise ExportError(f"export: more_examples[{k}] has the {shapes(more)} of an earlier variant (a page picks a variant by its inputs' sizes)")
      out.append((more, shapes(more)))
    return out
  sizes = [batch_sizes] if isinstance(batch_sizes, int) else list(batch_sizes)
  if not sizes or not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in sizes) or len(set(sizes)) != len(sizes):
    raise ExportError(f"export: batch_sizes must be distinct positive integers, got {batch_sizes!r}")
  firsts = [t.shape[0] if t.ndim else None for t in example_inputs]
  if None in firsts or len(set(firsts)) != 1:
    raise ExportError(f"export: batch_sizes needs every input's first dimension to be the batch; the example inputs' "
                      f"shapes are {[tuple(t.shape) for t in example_inputs]}")
  zeros = lambda b: tuple(Tensor.zeros(b, *t.shape[1:], dtype=t.dtype, device=t.device).contiguous().realize() for t in example_inputs)
  return [(example_inputs, f"batch size {firsts[0]}")] * (firsts[0] in sizes) + \
         [(zeros(b), f"batch size {b}") for b in sizes if b != firsts[0]]

def _capture(fn: Callable, example_inputs: tuple[Tensor, ...], new_jit: bool) -> tuple[TinyJit, Optional[list]]:
  """The function captured as a TinyJit whose outputs are whole buffers, and the keys of the dict it returns (if so:
  the outputs' default names). new_jit: capture with a new TinyJit even when fn is one (for another batch size)."""
  if isinstance(fn, TinyJit) and fn.launches and not new_jit: return fn, None
  inner = fn.fn if isinstance(fn, TinyJit) else fn
  if inner is None: raise ExportError("export: the TinyJit has no function yet (TinyJit() takes one on its first call)")
  keys = None
  def contiguous_outputs(*args):
    nonlocal keys
    ret = inner(*args)
    outs = _tensors_in(ret)
    if not outs: raise ExportError(f"export: {getattr(inner, '__name__', 'the function')} returned {type(ret).__name__}, not a "
                                   f"Tensor (or a list, tuple or dict of them): nothing to export")
    if isinstance(ret, dict) and all(isinstance(v, Tensor) for v in ret.values()): keys = list(ret)
    return [t.contiguous() for t in outs]
  jit = fn if isinstance(fn, TinyJit) and not new_jit else TinyJit(contiguous_outputs, prune=getattr(fn, "prune", False))
  for _ in range(3):
    if jit.launches: break
    jit(*example_inputs)
  if not jit.launches:
    raise ExportError("export: the function was not captured (is JIT=0 set?), or it launched no kernel: an export needs "
                      "TinyJit's capture")
  if len(jit.input_buffers) != len(example_inputs):
    raise ExportError(f"export: the TinyJit was captured with {len(jit.input_buffers)} tensor inputs, not {len(example_inputs)}")
  return jit, keys

class _Variant:
  """One capture's launches as a variant of the manifest: its buffers, steps, inputs and outputs. `weights`: buffer id
  -> the Buffer holding its bytes (weights and state, named and written to the shards by _write)."""
  def __init__(self, jit: TinyJit, outs: list[Tensor], in_names: list[str], out_names: list[str], kernels: dict[str, tuple[int, Any]],
               target: str):
    self.out_tensors = outs
    self.ids: dict[Buffer, int] = {}
    self.buffers: list[dict] = []
    self.weights: dict[int, Buffer] = {}
    # inputs and outputs first, so their ids are small and stable
    self.inputs = []
    for name, (shape, dtype, _), b in zip(in_names, jit.signature, jit.input_buffers):
      if b in self.ids: raise ExportError(f"export: input {name!r} is the same tensor as an earlier input; pass distinct tensors")
      self.inputs.append({"name": name, "buffer": self._add(b, "input"), "shape": list(shape), "dtype": dtype.name})
    out_bufs = []
    for name, t, u in zip(out_names, outs, jit.output_uops):
      if not is_contiguous_buffer(u):
        raise ExportError(f"export: output {name!r} is not a whole buffer (a TinyJit passed to export must return contiguous tensors)")
      out_bufs.append(b := u.base.arg[0])
      if b not in self.ids: self._add(b, "output")
    self.outputs = [{"name": name, "buffer": self.ids[b], "shape": list(t.shape), "dtype": t.dtype.name}
                    for name, t, b in zip(out_names, outs, out_bufs)]
    # the memory slots TinyJit gave the intermediates (their Buffers use the slot's handle)
    slot_of_handle = {id(s._handle): s for s in jit.memory}
    slot_ids: dict[int, int] = {}
    first_access: dict[Buffer, str] = {}
    all_written = {b for kernel, kbufs in jit.launches for b in written_by(kernel, kbufs)}
    self.steps = []
    for kernel, kbufs in jit.launches:
      written = written_by(kernel, kbufs)
      for b in kbufs:
        if b not in first_access: first_access[b] = "write" if b in written and not (kernel is not None and kbufs.count(b) > 1) else "read"
        if b.device != target and not (kernel is None and b is kbufs[1]):
          raise ExportError(f"export: the function launches work on {b.device} (a {b.nbytes}-byte buffer); this export "
                            f"runs on {target} only: keep every tensor it uses on {target}")
      for b in kbufs:
        if b in self.ids: continue
        if b.transient and (slot := slot_of_handle.get(id(b._handle))) is not None:
          if id(slot) not in slot_ids: slot_ids[id(slot)] = self._new("scratch", slot.nbytes)
          self.ids[b] = slot_ids[id(slot)]
          self.buffers[self.ids[b]]["bytes"] = max(self.buffers[self.ids[b]]["bytes"], b.nbytes)
        elif b in jit.state:   # (made before the capture and written by it: an assign's buffer)
          self._add(b, "state")
          self.weights[self.ids[b]] = b
        elif first_access[b] == "write": self._add(b, "scratch")
        else:
          self._add(b, "weight")
          self.weights[self.ids[b]] = b
      if kernel is None:
        dst, src = kbufs
        if src.device != target and src in all_written:
          raise ExportError(f"export: the function computes on {src.device} and copies the result to {target}; this "
                            f"export runs on {target} only")
        self.steps.append({"copy": {"src": self.ids[src], "dst": self.ids[dst], "bytes": dst.nbytes}})
        continue
      step = {"kernel": kernels.setdefault(kernel.src, (len(kernels), kernel))[0], "buffers": [self.ids[b] for b in kbufs]}
      if target == "WEBGPU":
        p = kernel.program
        grid = tuple(p.grid or p.global_shape)
        grid = grid + (1,) * (3 - len(grid))
        if len(grid) != 3: raise ExportError(f"export: kernel {p.name} has a {len(grid)}-dimensional launch grid")
        step["workgroups"] = list(grid)
      self.steps.append(step)
    for b in out_bufs:   # (an output that nothing writes: a constant the function returns)
      if b not in all_written and self.buffers[i := self.ids[b]]["kind"] == "output":
        self.buffers[i]["kind"] = "weight"
        self.weights[i] = b
    # a buffer that outlives a call, read by it and then written (random state, a KV cache, running statistics, an
    # assign): state, which a page keeps between runs, starting from its value now; an input must not be written
    for kernel, kbufs in jit.launches:
      for b in written_by(kernel, kbufs):
        kind = self.buffers[self.ids[b]]["kind"]
        if kind == "input": raise ExportError("export: the function writes into its input "
                                              f"{next(i['name'] for i in self.inputs if i['buffer'] == self.ids[b])!r}; exported functions must not")
        if kind == "weight": self.buffers[self.ids[b]]["kind"] = "state"   # (read before it is written)

  def _new(self, kind: str, nbytes: int) -> int:
    self.buffers.append({"id": len(self.buffers), "kind": kind, "bytes": nbytes})
    return len(self.buffers) - 1
  def _add(self, b: Buffer, kind: str) -> int:
    i = self.ids[b] = self._new(kind, b.nbytes)
    self.buffers[i]["dtype"] = b.dtype.name
    return i

def _webgpu_kernels(variants: list[_Variant], kernels: list, ceilings: dict[str, int], allowed_features: set[str]) -> tuple[dict, dict[str, str]]:
  """A WEBGPU export's kernels, checked against the limits and features allowed: (what the manifest says of them:
  features, capturedOn, limits and the kernel entries; file -> WGSL)."""
  needs = {k: 1 for k in DEFAULT_LIMITS}
  needs["maxComputeWorkgroupStorageSize"] = 0
  kernel_entries, files, features = [], {}, set()
  for i, k in enumerate(kernels):
    name = k.program.name
    src, feats, wg, nbind, shared = _kernel_needs(_tree_shake(k.src, name))
    features.update(feats)
    if not re.search(rf"\bfn {re.escape(name)}\(", src): raise ExportError(f"export: kernel {name}'s source has no entry point {name}")
    kernel_entries.append({"file": f"kernels/{i:03d}_{name}.wgsl", "entryPoint": name, "workgroupSize": list(wg), "bindings": nbind})
    files[kernel_entries[-1]["file"]] = src
    for key, v in (("maxStorageBuffersPerShaderStage", nbind), ("maxComputeInvocationsPerWorkgroup", wg[0] * wg[1] * wg[2]),
                   ("maxComputeWorkgroupSizeX", wg[0]), ("maxComputeWorkgroupSizeY", wg[1]), ("maxComputeWorkgroupSizeZ", wg[2]),
                   ("maxComputeWorkgroupStorageSize", shared)):
      needs[key] = max(needs[key], v)
  for v in variants:
    for step in v.steps:
      if "kernel" not in step: continue
      k = kernel_entries[step["kernel"]]
      if len(step["buffers"]) != k["bindings"]:
        raise ExportError(f"export: kernel {k['entryPoint']} declares {k['bindings']} bindings but was launched with {len(step['buffers'])} buffers")
      if len(set(step["buffers"])) != len(step["buffers"]):
        raise ExportError(f"export: kernel {k['entryPoint']} binds one buffer twice ({step['buffers']}); WebGPU forbids that")
      needs["maxComputeWorkgroupsPerDimension"] = max(needs["maxComputeWorkgroupsPerDimension"], *step["workgroups"])
      for bid in step["buffers"]: needs["maxStorageBufferBindingSize"] = max(needs["maxStorageBufferBindingSize"], _padded(v.buffers[bid]["bytes"]))
    needs["maxBufferSize"] = max(needs["maxBufferSize"], *(_padded(b["bytes"]) for b in v.buffers))
  over = {k: (v, ceilings[k]) for k, v in needs.items() if v > ceilings[k]}
  if over:
    raise ExportError("export: the kernels need adapter limits above " +
                      ("WebGPU's defaults" if ceilings == DEFAULT_LIMITS else "the limits allowed") + ": " +
                      ", ".join(f"{k} {v} (allowed: {c})" for k, (v, c) in over.items()) +
                      ". Pass limits={...} to allow them (the page then needs an adapter that has them), or capture on a "
                      "WEBGPU device that declares the defaults: set TINYWEB_WEBGPU_LIMITS=default before it is first used "
                      "(python -m tinyweb.export does)" + (", or export fewer or smaller batch sizes" if len(variants) > 1 else ""))
  if (missing := features - allowed_features):
    raise ExportError(f"export: the kernels need the WebGPU feature(s) {sorted(missing)}, which browsers do not all have; "
                      "pass features=[...] to allow them, or compute in float32")
  dev = Device["WEBGPU"]
  return {"features": sorted(features), "capturedOn": {"adapter": getattr(dev, "adapter_text", ""), "portable": bool(getattr(dev, "portable", False))},
          "limits": needs, "kernels": kernel_entries}, files

def _wasm_kernels(variants: list[_Variant], kernels: list) -> tuple[dict, dict[str, bytes]]:
  """A WASM export's kernels, assembled, and the memory layout: (what the manifest says of them: memory and the kernel
  entries; file -> module bytes). Sets each variant buffer's `offset`."""
  kernel_entries, files = [], {}
  for i, k in enumerate(kernels):
    name = k.program.name
    head = re.search(rf'\(func \${re.escape(name)} \(export "{re.escape(name)}"\)((?: \(param \$\w+ i32\))*)', k.src)
    if head is None: raise ExportError(f"export: kernel {name}'s module exports no function {name}")
    kernel_entries.append({"file": f"kernels/{i:03d}_{name}.wasm", "entryPoint": name, "params": head.group(1).count("(param"),
                           "imports": sorted(set(re.findall(r'\(import "math" "(\w+)"', k.src)))})
    files[kernel_entries[-1]["file"]] = assemble(k.src)
  for v in variants:
    for step in v.steps:
      if "kernel" in step and len(step["buffers"]) != (n := kernel_entries[step["kernel"]]["params"]):
        raise ExportError(f"export: kernel {kernel_entries[step['kernel']]['entryPoint']} takes {n} buffers but was launched with {len(step['buffers'])}")
  # the layout: address 0 unused (no buffer at "null", as on the WASM device), then each weight or state once, then the
  # slots of the variants' other buffers (they run one at a time)
  aligned = lambda n: -(-max(n, 1) // WASM_ALIGN) * WASM_ALIGN
  top, placed, slots = WASM_ALIGN, {}, []
  for v in variants:
    for b in v.weights.values():
      if b not in placed: placed[b], top = top, top + aligned(b.nbytes)
    own = [e for e in v.buffers if e["id"] not in v.weights]
    slots[len(slots):] = [0] * (len(own) - len(slots))
    for n, e in enumerate(own): slots[n] = max(slots[n], aligned(e["bytes"]))
  slot_offsets = []
  for size in slots: slot_offsets, top = slot_offsets + [top], top + size
  if top > WASM_MAX_PAGES * WASM_PAGE:
    raise ExportError(f"export: the buffers need {top} bytes of WebAssembly memory; wasm32 holds at most {WASM_MAX_PAGES * WASM_PAGE} (4 GiB)"
                      + (": export fewer or smaller variants" if len(variants) > 1 else ""))
  for v in variants:
    own = iter(slot_offsets)
    for e in v.buffers: e["offset"] = placed[v.weights[e["id"]]] if e["id"] in v.weights else next(own)
  return {"memory": {"bytes": top}, "kernels": kernel_entries}, files

def _write(path: str, target: str, head: dict, files: dict[str, str | bytes], variants: list[_Variant],
           state_dict: Optional[dict[str, Tensor]], shard_bytes: int, weights_dtype: str) -> dict:
  """Write the kernels' files, the weights and the manifest (`head`: what the target's manifest says of its kernels)."""
  os.makedirs(os.path.join(path, "kernels"), exist_ok=True)
  for f in os.listdir(os.path.join(path, "kernels")):   # (an earlier export's kernels, of either target)
    if re.fullmatch(r"\d{3}_\w+\.(wgsl|wasm)", f): os.remove(os.path.join(path, "kernels", f))
  for file, data in files.items():
    with open(os.path.join(path, file), "wb" if isinstance(data, bytes) else "w") as f: f.write(data)
  shards = _Weights(variants, state_dict, weights_dtype).write(path, shard_bytes)
  manifest = {"format": FORMAT, "version": VERSION, "target": target, **head,
              "variants": [{"inputs": v.inputs, "outputs": v.outputs, "buffers": v.buffers, "steps": v.steps} for v in variants],
              "weights": {"index": "weights.json", "shards": shards}}
  _write_json(os.path.join(path, "manifest.json"), manifest)
  return manifest

class _Weights:
  """The variants' weights and state, each Buffer once (the variants share them): named, stored (float16 where
  weights_dtype says so) and written as safetensors shards. Naming and storage are marked in the variants' buffer
  entries (`tensor`, `stored`)."""
  def __init__(self, variants: list[_Variant], state_dict: Optional[dict[str, Tensor]], weights_dtype: str):
    kinds: dict[Buffer, str] = {}
    for v in variants:
      for i, b in v.weights.items():
        if kinds.setdefault(b, v.buffers[i]["kind"]) != v.buffers[i]["kind"]:
          raise ExportError(f"export: a {b.nbytes}-byte buffer is {kinds[b]} at one batch size and {v.buffers[i]['kind']} at another")
    named = {}
    for k, t in (state_dict or {}).items():
      if isinstance(t, Tensor) and is_contiguous_buffer(u := t.uop) and u.base.op.name == "BUFFER": named.setdefault(u.base.arg[0], (k, t.shape))
    self.tensors: dict[str, Tensor] = {}   # name -> what its shard holds
    entries: dict[Buffer, dict] = {}       # Buffer -> what its manifest entries say of it (tensor, stored)
    taken, unnamed = {k for k, _ in named.values()}, 0
    for b, kind in kinds.items():
      if b in named: name, shape = named[b]
      else:
        while f"buffer{unnamed}" in taken: unnamed += 1
        name, shape = f"buffer{unnamed}", (b.size,)
        taken.add(name)
      if _prod(shape) != b.size: shape = (b.size,)
      self.tensors[name], stored = self._stored(b, name, shape, weights_dtype if kind == "weight" else "float32")
      entries[b] = {"tensor": name, **({"stored": stored} if stored else {})}
    for v in variants:
      for i, b in v.weights.items(): v.buffers[i].update(entries[b])

  @staticmethod
  def _stored(b: Buffer, name: str, shape, weights_dtype: str) -> tuple[Tensor, Optional[str]]:
    """(the tensor its shard holds, "float16" when a float32 weight is stored so). (struct, not numpy: the core runs
    in Pyodide without it.)"""
    if b.dtype not in _SAFETENSORS_NAMES: raise ExportError(f"export: weight {name!r} has dtype {b.dtype.name}, which safetensors cannot hold")
    t = Tensor(buffer_uop(b, (b.size,))).reshape(shape)
    if b.dtype != dtypes.float32 or weights_dtype == "float32": return t, None
    raw = bytes(b.as_memoryview())
    values = struct.unpack(f"<{b.size}f", raw)
    try: half = struct.pack(f"<{b.size}e", *values)
    except OverflowError:   # (a value beyond float16's range)
      if weights_dtype == "auto": return t, None
      big = next(v for v in values if abs(v) > 65504 and math.isfinite(v))
      raise ExportError(f"export: weight {name!r} holds {big!r}, beyond float16's range (65504): store it as float32 "
                        f"(weights_dtype='auto' or 'float32')") from None
    if weights_dtype == "auto" and struct.pack(f"<{b.size}f", *struct.unpack(f"<{b.size}e", half)) != raw: return t, None   # (not exact)
    return Tensor(half, dtype=dtypes.float16, device="CPU").reshape(shape), "float16"

  def write(self, path: str, shard_bytes: int) -> list[dict]:
    groups: list[list[str]] = [[]]
    size = 0
    for name in sorted(self.tensors):
      n = self.tensors[name].nbytes()
      if groups[-1] and size + n > shard_bytes: groups, size = groups + [[]], 0
      groups[-1].append(name)
      size += n
    if not groups[-1]: groups.pop()
    for f in os.listdir(path):   # (an earlier export's shards)
      if re.fullmatch(r"weights-\d{5}-of-\d{5}\.safetensors", f): os.remove(os.path.join(path, f))
    shards, weight_map, sha, tensor_sha = [], {}, {}, {}
    with tqdm(desc="export: writing weights", total=sum(t.nbytes() for t in self.tensors.values()), unit="B", unit_scale=True,
              disable=None) as bar:
      for n, group in enumerate(groups):
        file = f"weights-{n + 1:05d}-of-{len(groups):05d}.safetensors"
        safe_save({name: self.tensors[name] for name in group}, os.path.join(path, file))
        with open(os.path.join(path, file), "rb") as f: data = f.read()
        digest = hashlib.sha256(data).hexdigest()
        shards.append({"file": file, "bytes": len(data), "sha256": digest, "tensors": sorted(group)})
        weight_map.update({name: file for name in group})
        sha[file] = digest
        tensor_sha.update(_tensor_digests(data))
        bar.update(sum(self.tensors[name].nbytes() for name in group))
    _write_json(os.path.join(path, "weights.json"), {"metadata": {"format": FORMAT}, "weight_map": weight_map, "sha256": sha,
                                                     "tensor_sha256": tensor_sha})
    return shards

def _tensor_digests(safetensors: bytes) -> dict[str, str]:
  """sha256 of each tensor's data bytes in a safetensors file (the loader checks a tensor it fetches alone with it)."""
  n = struct.unpack("<Q", safetensors[:8])[0]
  header, data = json.loads(safetensors[8:8 + n]), memoryview(safetensors)[8 + n:]
  return {name: hashlib.sha256(data[a:b]).hexdigest() for name, info in header.items() if name != "__metadata__"
          for a, b in [info["data_offsets"]]}

def _prod(xs) -> int:
  out = 1
  for x in xs: out *= x
  return out

def _write_json(file: str, obj: Any):
  tmp = file + ".tmp"
  with open(tmp, "w") as f: json.dump(obj, f, indent=1)
  os.replace(tmp, file)
