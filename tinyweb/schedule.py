"""The scheduler: decides which values of a tensor graph become buffers and groups everything else into kernels.

Fusion rules (each kernel stores one value):
- elementwise ops and movement ops are computed inside the kernel that uses them (movement ops become index arithmetic
  on the loads), except where that would compute them many times over (below);
- a reduction fuses with the elementwise ops that feed it and with the elementwise ops that consume it;
- a reduction gets its own buffer when its result is expanded (recomputing it per element would repeat the whole
  reduction), padded (a piece of a concatenation: the kernel's loops would be the concatenation's, not the
  reduction's, and a conv computed that way ran 8x slower), or read in several places: by several kernels, or by one
  through several views (an LSTM's gates.chunk(4) ran the gates' matmul four times);
- an elementwise value gets a buffer when it is read in several places and costs RECOMPUTE_MAX ALU ops or more (an
  RNN cell's gate gradient, read by the weight, bias and input gradients: recomputed in each, kernels of 10,000 uops
  took seconds to compile), or when it is broadcast into a reduction's loop and costs BROADCAST_RECOMPUTE_MAX or more
  (a SiLU or a concatenation feeding a conv, a matmul's elementwise operand: recomputed for every output it meets);
- CONTIGUOUS, COPY and ASSIGN, and every value asked for (`realize()` targets), are stored in buffers. A target that is
  only a view of an existing buffer needs no kernel at all.
"""
from __future__ import annotations
import contextlib, contextvars, itertools, weakref
from dataclasses import dataclass
from collections import defaultdict
from typing import Optional
from tinyweb.device import Buffer, Device
from tinyweb.dtype import DType
from tinyweb.helpers import deep_recursion, prod, largest_divisor, make_room
from tinyweb.uop import UOp, Ops, ALU, MOVEMENT, ELEMENTWISE, substitute, const_key
from tinyweb.codegen.lowering import reduce_identity, selects

@dataclass(eq=False)
class ScheduleItem:
  kind: str            # "kernel" or "copy"
  ast: Optional[UOp]   # kernel: SINK(STORE(DEFINE_GLOBAL 0, value)); copy: None
  bufs: list[Buffer]   # bufs[0] is written
  deps: tuple = ()     # items whose output this one reads
  reads_existing: frozenset = frozenset()   # buffers read as they were before this schedule ran

class RealizedCache:
  """value uop -> uop of the buffer (view) holding its computed value, so a value is computed once even when it is
  reached again through another graph (values that read no buffer are not kept). Keys are weak: an entry lives while
  some graph still uses the uop. An entry remembers `writes` of each input buffer; if one was overwritten since (a TinyJit replay, a copyin), the entry
  is stale and dropped. (In-place assigns into an input need no check: they give the tensor a new BUFFER version, so
  later graphs differ from the cached ones, and older graphs keep the value computed before the assign.) It also
  remembers `stores` of the buffer holding the value: any write into that buffer (an in-place assign, a replay) replaces
  the value, so the entry is dropped. Inside `with capture():` (TinyJit) a thread sees only the entries it made in that
  block, so values are recomputed and their kernels recorded (also values another thread computed meanwhile); values
  computed during the capture are reused as usual. Other threads see every entry."""
  def __init__(self):
    self.entries: "weakref.WeakKeyDictionary[UOp, tuple]" = weakref.WeakKeyDictionary()
    self.captures = itertools.count(1)
    self.current = contextvars.ContextVar("tinyweb_capture", default=0)   # this thread's capture (0: none)
  @contextlib.contextmanager
  def capture(self):
    token = self.current.set(next(self.captures))
    try: yield
    finally: self.current.reset(token)
  def put(self, key: UOp, result: UOp):
    deps = tuple((u.arg[0], u.arg[0].writes) for u in key.toposort() if u.op is Ops.BUFFER)
    if not deps: return   # a value made of constants only: recomputing it is cheap, and a buffer in its place would
                          # turn those constants into loads in every later kernel that uses them
    holder = result.base.arg[0]
    self.entries[key] = (result, deps, (holder, holder.stores), self.current.get())
  def get(self, key: UOp) -> Optional[UOp]:
    if (e := self.entries.get(key)) is None: return None
    result, deps, (holder, stores), made_in = e
    if (capture := self.current.get()) and made_in != capture: return None
    if holder.stores != stores or any(b.writes != w for b, w in deps):
      self.entries.pop(key, None)   # (another thread may have dropped it too)
      return None
    return result
  def __contains__(self, key: UOp) -> bool: return self.get(key) is not None

realized_cache = RealizedCache()

def buffer_uop(buf: Buffer, shape: tuple[int, ...], version: int = 0) -> UOp:
  b = UOp(Ops.BUFFER, buf.dtype, (), (buf, version))
  return b if shape == (buf.size,) else UOp(Ops.RESHAPE, buf.dtype, (b,), tuple(shape))

def is_buffer_view(u: UOp) -> bool: return u.base.op is Ops.BUFFER

def is_contiguous_buffer(u: UOp) -> bool:
  """A whole buffer in row-major order (only reshapes, and DETACH, over it)."""
  while u.op in (Ops.RESHAPE, Ops.DETACH): u = u.src[0]
  return u.op is Ops.BUFFER

def apply_realized(root: UOp) -> UOp:
  """Replace every value that was already computed by the buffer holding it."""
  if (r := realized_cache.get(root)) is not None: return r
  if not realized_cache.entries: return root
  hits = {u: r for u in root.toposort() if (r := realized_cache.get(u)) is not None}
  return substitute(root, hits) if hits else root

def _expands(u: UOp) -> bool: return u.op is Ops.EXPAND and u.shape != u.src[0].shape

@deep_recursion
def create_schedule(targets: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp], dict[UOp, UOp]]:
  """Returns the kernels/copies to run, in order; for every target the uop of the buffer (view) holding it; and for
  every ASSIGN in the graph the uop of its buffer after it runs. A graph with the structure of one scheduled before
  (other buffers, the same ops, shapes and constants) reuses that schedule (see ScheduleTemplate)."""
  sink = UOp(Ops.SINK, None, tuple(targets))
  graph = sink.toposort()
  key, inputs = structure_key(graph)
  if (template := _schedule_cache.get(key)) is not None: out = template.instantiate(graph, inputs, list(targets))
  else:
    out = _create_schedule(list(targets), sink, graph)
    if (template := ScheduleTemplate.capture(graph, inputs, list(targets), *out)) is not None:
      make_room(_schedule_cache, SCHEDULE_CACHE_SIZE)   # (the oldest schedules go)
      _schedule_cache[key] = template
  _mark_transient(*out)
  return out

def _mark_transient(items: list[ScheduleItem], results: dict[UOp, UOp], assigned: dict[UOp, UOp]):
  """Mark the buffers that hold a schedule's intermediate values: written by one of its items and not holding a
  target or an assign's result. Only the schedule's own items read them (results and assigns are all it gives out),
  so engine.run_schedule releases each after its last reader and TinyJit lets them share memory."""
  kept = {x.arg[0] for r in itertools.chain(results.values(), assigned.values()) for x in r.toposort() if x.op is Ops.BUFFER}
  for it in items:
    if it.bufs[0] not in kept: it.bufs[0].transient = True

# ---- schedules reused for graphs of the same structure ----

SCHEDULE_CACHE_SIZE = 1024

def structure_key(graph: list[UOp]) -> tuple[tuple, list[tuple[Buffer, int]]]:
  """What a graph's schedule depends on, without its buffers: each node's op, dtype, arg and sources (by position in the
  toposorted graph), with each buffer replaced by its first position among the graph's buffers (with its device, size,
  and version counted from the version of its first node: an in-place update's next step has the same key); and
  those buffers in that order, each with that first version. CONTIGUOUS's unique id and CUSTOM_GRAD's rule do not
  change the schedule: only whether they are there."""
  index: dict[UOp, int] = {}
  slots: dict[Buffer, tuple[int, int]] = {}   # buffer -> (position, first version)
  parts = []
  for u in graph:   # (every realize runs this loop: written for speed)
    op, arg = u.op, u.arg
    if op is Ops.BUFFER:
      b, version = arg
      i, first = slots.setdefault(b, (len(slots), version))
      arg = (i, b.device, b.size, version - first)
    elif op is Ops.CONST: arg = const_key(arg)   # (0.0 == -0.0 in Python: their kernels differ)
    elif op is Ops.CONTIGUOUS or op is Ops.CUSTOM_GRAD: arg = arg is not None
    index[u] = len(parts)
    parts.append((op, u.dtype, arg, tuple([index[s] for s in u.src])))
  return tuple(parts), [(b, first) for b, (_, first) in slots.items()]

_schedule_cache: dict[tuple, ScheduleTemplate] = {}

@dataclass
class ScheduleTemplate:
  """A schedule with its buffers as references: ("in", i) the graph's i-th buffer (structure_key's order), ("new", j) the
  j-th buffer the schedule allocates (`new`: their device, size and dtype). Kernel ASTs hold no buffers (DEFINE_GLOBALs
  only), so they are shared. A result is (node position, None): that node of the graph (a target that was already a
  buffer view), or (buffer reference, (shape, version)): a view of a buffer, the version of an input buffer counted
  from its first version in the graph."""
  new: list[tuple[str, int, DType]]
  items: list[tuple[str, Optional[UOp], list[tuple], tuple[int, ...], frozenset]]   # kind, ast, bufs, deps, reads_existing
  results: list[tuple]    # per target
  assigned: list[tuple]   # (position of the ASSIGN node, its result)

  @staticmethod
  def capture(graph: list[UOp], inputs: list[tuple[Buffer, int]], targets: list[UOp], items, results, assigned) -> Optional[ScheduleTemplate]:
    """The template of a schedule just made for `graph`, or None where its results are not of the forms above."""
    index = {u: i for i, u in enumerate(graph)}
    slot = {b: ("in", i) for i, (b, _) in enumerate(inputs)}
    first = {b: v for b, v in inputs}
    new: list[tuple[str, int, DType]] = []
    def ref(b: Buffer) -> tuple:
      if b not in slot:
        slot[b] = ("new", len(new))
        new.append((b.device, b.size, b.dtype))
      return slot[b]
    def result(u: UOp) -> Optional[tuple]:
      if u in index: return (index[u], None)
      base = u.src[0] if u.op is Ops.RESHAPE else u
      if base.op is not Ops.BUFFER: return None
      b, version = base.arg
      return (ref(b), (u.shape, version - first.get(b, 0)))
    position = {it: i for i, it in enumerate(items)}
    t_items = [(it.kind, it.ast, [ref(b) for b in it.bufs], tuple(position[d] for d in it.deps),
                frozenset(ref(b) for b in it.reads_existing)) for it in items]
    t_results = [result(results[t]) for t in targets]
    t_assigned = [(index.get(a), result(r)) for a, r in assigned.items()]
    if None in t_results or any(a is None or r is None for a, r in t_assigned): return None
    return ScheduleTemplate(new, t_items, t_results, t_assigned)

  def instantiate(self, graph: list[UOp], inputs: list[tuple[Buffer, int]], targets: list[UOp]):
    """The schedule for `graph` (whose structure key is this template's), with its own new buffers."""
    new = [Buffer(device, size, dt) for device, size, dt in self.new]
    def buf(ref: tuple) -> Buffer: return inputs[ref[1]][0] if ref[0] == "in" else new[ref[1]]
    def result(r: tuple) -> UOp:
      where, view = r
      if view is None: return graph[where]
      return buffer_uop(buf(where), view[0], view[1] + (inputs[where[1]][1] if where[0] == "in" else 0))
    items: list[ScheduleItem] = []
    for kind, ast, bufs, deps, existing in self.items:
      items.append(ScheduleItem(kind, ast, [buf(r) for r in bufs], tuple(items[d] for d in deps), frozenset(buf(r) for r in existing)))
    return items, {t: result(r) for t, r in zip(targets, self.results)}, {graph[a]: result(r) for a, r in self.assigned}

# ---- big sums into few outputs run as two kernels ----

SPLIT_MIN = 1 << 16        # a sum of at least this many elements per output...
SPLIT_MAX_OUTPUTS = 64     # ...into at most this many outputs is done in two kernels (split_sum)
SPLIT_CHUNKS = 256         # at most this many partial sums per output and vector lane

def _is_big_sum(u: UOp) -> bool:
  if u.op is not Ops.REDUCE_AXIS or u.arg[0] is not Ops.ADD or not u.arg[1]: return False
  shape, axes = u.src[0].shape, u.arg[1]
  return prod(shape[a] for a in axes) >= SPLIT_MIN and prod(s for i, s in enumerate(shape) if i not in axes) <= SPLIT_MAX_OUTPUTS

def split_sum(u: UOp) -> Optional[UOp]:
  """A sum of many elements into few outputs (a full sum, a norm's statistics), in two kernels: one loop over all of
  them would run on one core, one add after the other. The outermost reduced axis is split into A chunks (the first
  kernel's partial sums, split across the cores) and the innermost into V neighbours in memory (summed in vector
  registers); the first kernel sums over the rest into A x V partials, the second sums those. (The order of the
  additions differs from one loop's.) None where `u` is not such a sum."""
  if not _is_big_sum(u): return None
  x, (_, axes) = u.src[0], u.arg
  shape = x.shape
  keep = [i for i in range(len(shape)) if i not in axes]
  red = [shape[i] for i in axes]
  v = largest_divisor(red[-1], 16)
  if len(red) == 1: a = largest_divisor(red[0] // v, SPLIT_CHUNKS); split = (a, red[0] // (a * v), v)
  else: a = largest_divisor(red[0], SPLIT_CHUNKS); split = (a, red[0] // a, *red[1:-1], red[-1] // v, v)
  n = len(keep)
  if (order := tuple(keep + list(axes))) != tuple(range(len(shape))): x = UOp(Ops.PERMUTE, x.dtype, (x,), order)
  if (grouped := tuple(shape[i] for i in keep) + split) != x.shape: x = UOp(Ops.RESHAPE, x.dtype, (x,), grouped)
  partial = UOp(Ops.CONTIGUOUS, x.dtype, (UOp(Ops.REDUCE_AXIS, x.dtype, (x,), (Ops.ADD, tuple(range(n + 1, n + len(split) - 1)))),))
  out = UOp(Ops.REDUCE_AXIS, x.dtype, (partial,), (Ops.ADD, tuple(range(n, n + len(split)))))
  return out if out.shape == u.shape else UOp(Ops.RESHAPE, u.dtype, (out,), u.shape)

def _create_schedule(targets: list[UOp], sink: UOp, graph: list[UOp]) -> tuple[list[ScheduleItem], dict[UOp, UOp], dict[UOp, UOp]]:
  orig_targets = list(targets)
  # the graph as the kernels compute it: CUSTOM_GRAD's plain value (only autograd needs its rule), and big sums split
  if any(u.op is Ops.CUSTOM_GRAD or _is_big_sum(u) for u in graph):
    done: dict[UOp, UOp] = {}
    for u in graph:
      if u.op is Ops.CUSTOM_GRAD: done[u] = done[u.src[0]]
      else:
        nu = u.replace(src=tuple(done[s] for s in u.src)) if u.src else u
        done[u] = split_sum(nu) or nu
    sink = done[sink]
    targets, graph = list(sink.src), sink.toposort()
  consumers: dict[UOp, list[UOp]] = defaultdict(list)
  for u in graph:
    for s in u.src: consumers[s].append(u)

  # ---- which values get a buffer ----
  realize: set[UOp] = set()
  for t in targets:
    if not is_buffer_view(t): realize.add(t)
  for u in graph:
    if u.op in (Ops.CONTIGUOUS, Ops.ASSIGN): realize.add(u)
    if u.op is Ops.COPY:
      realize.add(u)
      if not is_contiguous_buffer(u.src[0]): realize.add(u.src[0])
  # walk from the outputs down, deciding what else gets a buffer: what kernels would otherwise compute many times over
  # (see the module's docstring). A place is a kernel and the chain of movement ops and reductions between its output
  # and the value: each place computes the value again (two places are enough to decide: no node keeps more).
  under_expand: dict[UOp, bool] = {}            # the value is broadcast on its way to its kernel's output
  under_pad: dict[UOp, bool] = {}               # ...padded (a piece of a concatenation)
  in_reduction: dict[UOp, bool] = {}            # ...read inside a reduction's loop
  expanded_into_reduction: dict[UOp, bool] = {} # ...broadcast into a reduction's loop (a matmul's or conv's operand)
  places: dict[UOp, set] = {}
  target_set = set(targets)
  for u in reversed(graph):
    if u.op is Ops.SINK: continue
    cs = [c for c in consumers[u] if c.op is not Ops.SINK]
    fused = [c for c in cs if c not in realize]
    under_expand[u] = any(_expands(c) for c in cs) or any(under_expand[c] for c in fused)
    under_pad[u] = any(c.op is Ops.PAD for c in cs) or any(under_pad[c] for c in fused)
    # (a reduction's own input is computed in its loop, whether the reduction gets a buffer or not; a selecting sum
    # (x[idx]) has no loop: it reads its input once, at the selected position)
    in_reduction[u] = any(c.op is Ops.REDUCE_AXIS and not selects(c) for c in cs) or any(in_reduction[c] for c in fused)
    expanded_into_reduction[u] = any((_expands(c) and in_reduction[c]) or expanded_into_reduction[c] for c in fused)
    read_at: set = {u} if u in target_set else set()
    for c in cs:
      if len(read_at) > 1: break
      if c in realize: read_at.add(c)
      elif c.op in MOVEMENT or c.op is Ops.REDUCE_AXIS: read_at.update((c, p) for p in places[c])
      else: read_at.update(places[c])
    if u.op is Ops.REDUCE_AXIS:
      if under_expand[u] or under_pad[u] or len(read_at) > 1: realize.add(u)
    elif u.op in ELEMENTWISE:
      if (len(read_at) > 1 and _costs_at_least(u, realize, RECOMPUTE_MAX)) or \
         (expanded_into_reduction[u] and _costs_at_least(u, realize, BROADCAST_RECOMPUTE_MAX)): realize.add(u)
    places[u] = {u} if u in realize else set(itertools.islice(read_at, 2))
  for u in list(realize):
    if u.op in (Ops.BUFFER, Ops.DEVICE) or (u.op in MOVEMENT and is_buffer_view(u) and u not in target_set): realize.discard(u)
  _split_for_buffer_limit(graph, realize)

  # ---- one kernel per realized value, in dependency order ----
  items: list[ScheduleItem] = []
  result: dict[UOp, UOp] = {}       # realized value -> uop of its buffer
  producer: dict[UOp, ScheduleItem] = {}
  assigns: list[ScheduleItem] = []
  for u in graph:
    if u not in realize: continue
    if u.op is Ops.COPY:
      src = result.get(u.src[0], u.src[0])
      sbuf = src.base.arg[0]
      out = Buffer(u.arg, sbuf.size, sbuf.dtype)
      it = ScheduleItem("copy", None, [out, sbuf], tuple(producer[x] for x in [u.src[0]] if x in producer),
                        frozenset() if u.src[0] in producer else frozenset([sbuf]))
      items.append(it)
      result[u], producer[u] = buffer_uop(out, u.shape), it
      continue
    if u.op is Ops.ASSIGN:
      target, value = u.src
      tbase = target.base
      if not (is_contiguous_buffer(target) and tbase.arg[0].size == target.size):
        raise RuntimeError(f"assign: the target must be a whole realized tensor, got a view {target.shape} of a buffer")
      tbuf = tbase.arg[0]
      if _reads_other_elements(value, target, realize):
        tmp = Buffer(tbuf.device, tbuf.size, tbuf.dtype)
        first = _kernel(value, tmp, realize, result, producer)
        items.append(first)
        it = _kernel(buffer_uop(tmp, target.shape), tbuf, set(), {}, {})
        it.deps = (first,)
      else: it = _kernel(value, tbuf, realize, result, producer)
      items.append(it)
      assigns.append(it)
      result[u], producer[u] = buffer_uop(tbuf, u.shape, tbase.arg[1] + 1), it
      continue
    src = _kernel_value(u)
    buf = Buffer(u.device, u.size, u.dtype)
    if u.size == 0:   # nothing to compute
      result[u] = buffer_uop(buf, u.shape)
      continue
    it = _kernel(src, buf, realize - {u}, result, producer)
    items.append(it)
    result[u], producer[u] = buffer_uop(buf, u.shape), it

  return _order(items, assigns), {t: result.get(s, s) for t, s in zip(orig_targets, targets)}, \
         {u: r for u, r in result.items() if u.op is Ops.ASSIGN}

RECOMPUTE_MAX = 24            # ALU ops an elementwise value read in several places may cost before it gets a buffer of its own
BROADCAST_RECOMPUTE_MAX = 2   # ...and one broadcast into a reduction's loop (a conv's input: recomputed for every use)

def _costs_at_least(u: UOp, realize: set, limit: int) -> bool:
  """Whether computing `u` inside a kernel takes `limit` or more ALU ops (a pad counts as one: its bounds check; a
  concatenation is pads and adds). It stops at values with buffers, reductions and leaves; a shared subexpression
  counts once."""
  seen, stack, n = set(), [u], 0
  while stack:
    if (x := stack.pop()) in seen or (x is not u and (x in realize or x.op is Ops.REDUCE_AXIS)): continue
    seen.add(x)
    if (x.op in ALU or x.op is Ops.PAD) and (n := n + 1) >= limit: return True
    stack.extend(x.src)
  return False

def _kernel_value(u: UOp) -> Optional[UOp]:
  """What the kernel realizing `u` computes (None for copies)."""
  return None if u.op is Ops.COPY else u.src[1] if u.op is Ops.ASSIGN else u.src[0] if u.op is Ops.CONTIGUOUS else u

def _split_for_buffer_limit(graph: list[UOp], realize: set):
  """A device may bind only so many buffers to one kernel (WebGPU's maxStorageBuffersPerShaderStage: 8 in most
  browsers). While a kernel would read more, the part of it that reads the most inputs that still fit gets a buffer of
  its own (preferring the smallest such value), so one kernel becomes several."""
  # the devices in the graph, found in one pass (u.device walks the graph: only paid once some device has a limit)
  devices = {u.arg if u.op in (Ops.DEVICE, Ops.COPY) else u.arg[0].device for u in graph if u.op in (Ops.DEVICE, Ops.COPY, Ops.BUFFER)}
  limits = {d: Device[d].renderer.max_buffers for d in devices}
  if not any(limits.values()): return
  while True:
    reads: dict[UOp, frozenset] = {}   # node -> the buffers a kernel computing it reads (realized values count as one)
    def inputs_of(u: UOp) -> frozenset: return _kernel_inputs(u, realize, reads)
    over = next(((u, limit) for u in graph if u in realize and (value := _kernel_value(u)) is not None and
                 (limit := limits.get(u.device)) and len(inputs_of(value)) + 1 > limit), None)
    if over is None: return
    u, limit = over
    value = _kernel_value(u)
    inside, stack, seen = [], [value], set()   # the nodes this kernel computes itself
    while stack:
      if (n := stack.pop()) in seen or (n in realize and n is not u): continue
      seen.add(n)
      if n is not value and n.op not in (Ops.BUFFER, Ops.CONST, Ops.ARANGE) and not is_buffer_view(n): inside.append(n)
      stack.extend(n.src)
    fits = [n for n in inside if 2 <= len(inputs_of(n)) <= limit - 1]
    if not fits:
      raise RuntimeError(f"schedule: a kernel on {u.device} reads {len(inputs_of(value))} buffers and cannot be split "
                         f"under the device's limit of {limit} buffers per kernel")
    realize.add(max(fits, key=lambda n: (len(inputs_of(n)), -n.size)))

def _kernel_inputs(u: UOp, realize: set, reads: dict) -> frozenset:
  """The buffers a kernel computing `u` reads, a realized value below it counting as one (memoized in `reads`)."""
  if (r := reads.get(u)) is None:
    r = reads[u] = frozenset([u.arg[0]]) if u.op is Ops.BUFFER else \
        frozenset().union(*[frozenset([s]) if s in realize else _kernel_inputs(s, realize, reads) for s in u.src])
  return r

def _reads_other_elements(value: UOp, target: UOp, realize: set) -> bool:
  """True when computing `value` in place would read elements of `target` that were already overwritten:
  the target buffer is read through anything other than the target view itself used elementwise."""
  return _reads_target(value, False, value, target, realize, {})

def _reads_target(u: UOp, under_non_elementwise: bool, value: UOp, target: UOp, realize: set, seen: dict) -> bool:
  # (a module-level function, not a closure: a recursive closure is a reference cycle, which would keep the graph's
  # buffers allocated until the garbage collector runs)
  if (key := (u, under_non_elementwise)) in seen: return seen[key]   # the graph is a DAG: each (node, context) once
  if u is target: r = under_non_elementwise
  elif u is target.base: r = True
  elif u in realize and u is not value: r = False
  else:
    bad = under_non_elementwise or u.op not in ELEMENTWISE
    r = any(_reads_target(s, bad, value, target, realize, seen) for s in u.src)
  seen[key] = r
  return r

def _kernel(value: UOp, out: Buffer, realize: set, result: dict, producer: dict) -> ScheduleItem:
  """Build the kernel AST storing `value` into `out`: realized inputs become DEFINE_GLOBAL loads."""
  k = _KernelBuilder(out, realize, result, producer)
  store = UOp(Ops.STORE, None, (k.glob(out), k.build(value)))
  return ScheduleItem("kernel", UOp(Ops.SINK, None, (store,)), k.bufs, tuple(k.deps), frozenset(k.existing))

class _KernelBuilder:
  """The AST of one kernel, with the buffers it binds (bufs[0] is written), the items it waits for and the buffers it
  reads as they were. (A class rather than recursive closures: those are reference cycles, which would keep the
  buffers allocated until the garbage collector runs.)"""
  def __init__(self, out: Buffer, realize: set, result: dict, producer: dict):
    self.realize, self.result, self.producer = realize, result, producer
    self.bufs: list[Buffer] = [out]
    self.index: dict[Buffer, int] = {out: 0}
    self.deps: list[ScheduleItem] = []
    self.existing: set[Buffer] = set()
    self.done: dict[UOp, UOp] = {}
  def glob(self, buf: Buffer) -> UOp:
    if buf not in self.index:
      self.index[buf] = len(self.bufs)
      self.bufs.append(buf)
    return UOp(Ops.DEFINE_GLOBAL, buf.dtype, (), (self.index[buf], buf.size))
  def build(self, u: UOp) -> UOp:   # stops at realized values: their inputs belong to other kernels
    if (r := self.done.get(u)) is not None: return r
    # empty values are constants: no buffer, no kernel to wait for, no loop of no iterations (an empty value is never read:
    # a pad around it reads only padding; a reduction of one is its identity)
    if 0 in u.shape: r = _filled(u, 0)
    elif u.op is Ops.REDUCE_AXIS and 0 in u.src[0].shape: r = _filled(u, reduce_identity(u.arg[0], u.dtype))
    elif u in self.realize:
      r = self.result[u]
      r = substitute(r, {r.base: self.glob(r.base.arg[0])})
      self.deps.append(self.producer[u])
    elif u.op is Ops.BUFFER:
      r = self.glob(u.arg[0])
      self.existing.add(u.arg[0])
    elif u.op in (Ops.CONST, Ops.ARANGE): r = UOp(u.op, u.dtype, (), u.arg)
    elif u.op in (Ops.CONTIGUOUS, Ops.DETACH): r = self.build(u.src[0])
    else: r = u.replace(src=tuple(self.build(s) for s in u.src))
    self.done[u] = r
    return r

def _filled(u: UOp, value) -> UOp:
  """A constant of u's shape and dtype, as a kernel AST node."""
  return UOp(Ops.EXPAND, u.dtype, (UOp(Ops.RESHAPE, u.dtype, (UOp.const(u.dtype, value),), (1,) * len(u.shape)),), u.shape)

def _order(items: list[ScheduleItem], assigns: list[ScheduleItem]) -> list[ScheduleItem]:
  """Topological order of the items (stable): data dependencies, plus: an in-place write runs after every other item
  that reads the buffer's previous contents."""
  if not assigns: return items
  after: dict[ScheduleItem, set] = {it: set(it.deps) for it in items}
  for a in assigns:
    for it in items:
      if it is not a and a.bufs[0] in it.reads_existing: after[a].add(it)
  out, placed = [], set()
  pending = list(items)
  while pending:
    for i, it in enumerate(pending):
      if all(d in placed for d in after[it]):
        out.append(pending.pop(i)); placed.add(it)
        break
    else:
      raise RuntimeError("schedule: a value reads a buffer both before and after it is assigned; realize() the old value first")
  return out
