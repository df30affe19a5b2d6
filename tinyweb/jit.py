"""TinyJit: capture the kernels a function launches, then replay them with no Python graph work.

Call 1 runs the function normally (so every kernel gets compiled). Call 2 runs it again while recording every kernel
launch and copy, with the cache of computed values turned off so that everything the function computes is really
launched (and so recorded). From call 3 on, the recorded launches run again with the new inputs' buffers in place
of the recorded inputs' buffers; nothing is scheduled, lowered or compiled. The captured intermediate values share
memory (_share_intermediates), so a replay holds about as much as the most values alive at once, not all of them.
With JIT=0 (or `Context(JIT=0)`) every call runs the function as it is and realizes what it returns, as in tinygrad;
such calls do not count towards capturing.

Rules, as in tinygrad: inputs are the Tensor arguments (positional and keyword); each call must pass tensors of the
same shapes, dtypes and devices (a mismatch raises a ValueError naming the argument; make a new TinyJit for another
shape). Returned tensors live in buffers that the next call overwrites: copy them if you need to keep them. Python
values computed inside the function (e.g. with .item()) are not recomputed by a replay. Random numbers keep changing,
because the random state is advanced by kernels. Calls of one TinyJit may come from any thread, one at a time: a call
while another thread's is running raises a RuntimeError (the second would overwrite the first's outputs).

`TinyJit(fn, prune=True)` (or `@TinyJit(prune=True)`, as in tinygrad) leaves out of the replays the launches whose
results no replay can change: those that read no input and no state the function updates (an assign's buffer), directly
or through what another replayed launch writes. They run once, at capture; their outputs keep their own memory."""
from __future__ import annotations
import functools, time
from collections import defaultdict
from typing import Any, Callable
from tinyweb.tensor import Tensor
from tinyweb.uop import Ops
from tinyweb.device import Buffer, Device, _buffer_serials
from tinyweb.dtype import dtypes
from tinyweb.schedule import realized_cache, apply_realized, is_contiguous_buffer, substitute, buffer_uop
import tinyweb.engine as engine
import tinyweb.events as events
from tinyweb.helpers import DEBUG, JIT, GlobalCounters, fork_safe_lock

def _tensors_in(x: Any) -> list[Tensor]:
  if isinstance(x, Tensor): return [x]
  if isinstance(x, (list, tuple)): return [t for y in x for t in _tensors_in(y)]
  if isinstance(x, dict): return [t for y in x.values() for t in _tensors_in(y)]
  return []

def _input_buffer(t: Tensor) -> Buffer:
  u = apply_realized(t.realize().uop)
  if not is_contiguous_buffer(u):
    u = apply_realized(t.contiguous().realize().uop)
    t.uop = u   # the caller's tensor now holds the contiguous copy
  return u.base.arg[0]

class TinyJit:
  def __init__(self, fxn: Callable | None = None, *, prune: bool = False):
    self.fn, self.prune = fxn, prune
    self.calls = 0
    self.launches: list[tuple] = []       # (kernel or None for a copy, buffers)
    self.input_buffers: list[Buffer] = []
    self.signature: list[tuple] = []
    self.outputs: Any = None
    self.plan = None   # built on the first replay (see _make_plan)
    self.memory: list[Buffer] = []   # the memory the captured intermediates share (see _share_intermediates)
    self.state: set[Buffer] = set()   # buffers made before the capture that its launches write (see updated_state)
    self.busy = fork_safe_lock()   # held by the thread whose call is running
    if fxn is not None: functools.update_wrapper(self, fxn)

  def reset(self):
    self.calls, self.launches, self.input_buffers, self.signature, self.outputs, self.plan = 0, [], [], [], None, None
    self.memory, self.state = [], set()

  def __get__(self, obj, objtype=None):   # decorating a method
    return self if obj is None else functools.partial(self.__call__, obj)

  def __call__(self, *args, **kwargs):
    if self.fn is None:   # TinyJit(prune=True) used as a decorator: this call passes the function
      if len(args) != 1 or kwargs or not callable(args[0]):
        raise TypeError("TinyJit made without a function takes one: use @TinyJit(prune=True) on a def, or TinyJit(fn, prune=True)")
      self.fn = args[0]
      functools.update_wrapper(self, self.fn)
      return self
    if not self.busy.acquire(blocking=False):
      raise RuntimeError(f"TinyJit: {getattr(self.fn, '__name__', 'the function')} is running in another thread; a TinyJit's "
                         "outputs live in buffers that each call overwrites, so calls must not overlap: use one TinyJit per "
                         "thread, or a lock around the calls")
    try: return self._call(*args, **kwargs)
    finally: self.busy.release()

  def _call(self, *args, **kwargs):
    if not JIT:
      ret = self.fn(*args, **kwargs)
      Tensor.realize_all(*_tensors_in(ret))
      return ret
    inputs = _tensors_in(args) + _tensors_in(kwargs)
    bufs = [_input_buffer(t) for t in inputs]
    sig = [(t.shape, t.dtype, t.device) for t in inputs]
    self.calls += 1
    if self.calls == 1:
      ret = self.fn(*args, **kwargs)
      Tensor.realize_all(*_tensors_in(ret))
      return ret
    if self.calls == 2:
      self.signature, self.input_buffers = sig, bufs
      made_from = next(_buffer_serials)   # (the capture's own buffers come after this)
      with engine.recording() as record, realized_cache.capture():
        ret = self.fn(*args, **kwargs)
        outs = _tensors_in(ret)
        Tensor.realize_all(*outs)
      self.launches, self.state = record, updated_state(record, made_from)
      constant = []
      if self.prune:
        self.launches, constant = _split_constant(record, bufs, self.state)
        for kernel, kbufs in constant:   # (their values must last for every replay)
          for b in written_by(kernel, kbufs): b.transient = False
      self.memory = _share_intermediates(self.launches)
      _run_once(constant)   # (the capture's run released the intermediates among their outputs)
      self.outputs = ret
      self.output_uops = [apply_realized(t.uop) for t in outs]
      if DEBUG >= 1: print(f"TinyJit: captured {len(self.launches)} launches of {getattr(self.fn, '__name__', 'fn')}"
                           + (f" (pruned {len(constant)} that no input reaches)" if self.prune else ""))
      return ret
    return self._replay(sig, bufs)

  def _make_plan(self) -> list[tuple]:
    """(kernel, buffers, bound launch) per recorded launch. Launches that touch no input are bound once (arguments
    converted once), so a replay costs one Python call per kernel; the others are launched with this call's inputs."""
    inputs = set(self.input_buffers)
    plan, self.written = [], []
    for kernel, kbufs in self.launches:
      static = kernel is not None and not inputs.intersection(kbufs)
      plan.append((kernel, kbufs, kernel.bind([b.handle for b in kbufs]) if static else None))
      if static and kbufs[0] not in self.written: self.written.append(kbufs[0])
    kernels = [k for k, _ in self.launches if k is not None]
    self.totals = (len(kernels), sum(k.program.flops for k in kernels), sum(k.program.mem_estimate for k in kernels))
    self.devices = {kbufs[0].device for _, kbufs in self.launches}
    return plan

  def _replay(self, sig: list, bufs: list[Buffer]):
    if sig != self.signature:
      for i, (a, b) in enumerate(zip(sig, self.signature)):
        if a != b: raise ValueError(f"TinyJit: tensor argument {i} is {a[0]} {a[1].name} on {a[2]}, but the function was "
                                    f"captured with {b[0]} {b[1].name} on {b[2]}; use a new TinyJit for other shapes")
      raise ValueError(f"TinyJit: called with {len(sig)} tensor arguments, captured with {len(self.signature)}")
    if self.plan is None: self.plan = self._make_plan()
    devices = [Device[d] for d in self.devices]   # (refused in a forked child, before a launch of the parent's runs)
    swap = {old: new for old, new in zip(self.input_buffers, bufs) if old is not new}
    reporting = bool(events.watchers)   # (then every launch runs through _relaunch, which reports it)
    for kernel, kbufs, bound in self.plan:
      if bound is not None and not reporting: bound()
      else:   # a launch that touches an input (its buffers are this call's), or any launch while watchers look
        _relaunch(kernel, [swap.get(b, b) for b in kbufs] if swap else kbufs)
    for b in self.written: b.mark_written()
    for d in devices: d.flush()
    GlobalCounters.kernel_count += self.totals[0]
    GlobalCounters.global_ops += self.totals[1]
    GlobalCounters.global_mem += self.totals[2]
    # outputs: the captured output buffers (or views of the new inputs)
    uop_swap = {}
    for u in self.output_uops:
      for x in u.toposort():
        if x.op is Ops.BUFFER and x.arg[0] in swap: uop_swap[x] = buffer_uop(swap[x.arg[0]], (swap[x.arg[0]].size,))
    return _rebuild(self.outputs, iter([Tensor(substitute(u, uop_swap) if uop_swap else u) for u in self.output_uops]))

def written_by(kernel, kbufs: list[Buffer]) -> list[Buffer]:
  """The buffers a recorded launch writes: a copy's destination, a kernel's outputs (its first buffer unless the
  program lists others)."""
  if kernel is None: return [kbufs[0]]
  return [kbufs[i] for i in (kernel.program.outputs or [0])]

def updated_state(launches: list[tuple], made_from: int) -> set[Buffer]:
  """The buffers that existed before the capture (buffers made at or after serial `made_from` are the capture's own)
  that its launches write: state the function updates, as an optimizer's step or a counter's assign does."""
  return {b for kernel, kbufs in launches for b in written_by(kernel, kbufs) if b.serial < made_from}

def _split_constant(launches: list[tuple], inputs: list[Buffer], state: set[Buffer]) -> tuple[list[tuple], list[tuple]]:
  """prune=True: (the launches a replay must run, those whose results no replay changes). What changes between calls:
  the inputs and the state the function updates. A launch is replayed when one of its buffers changes, and then what it
  writes changes too, until no more launches join. (tinygrad's prune looks only forward from the inputs: a launch
  reading what a later launch updates, such as a learning rate derived from a step counter, would run just once there;
  here it is replayed.)"""
  changing = set(inputs) | state
  replayed, grew = [False] * len(launches), True
  while grew:
    grew = False
    for i, (kernel, kbufs) in enumerate(launches):
      if not replayed[i] and changing.intersection(kbufs):
        replayed[i] = grew = True
        changing.update(written_by(kernel, kbufs))
  return [l for l, r in zip(launches, replayed) if r], [l for l, r in zip(launches, replayed) if not r]

def _relaunch(kernel, kbufs: list[Buffer]):
  """Run a recorded launch again (kernel None: a copy of kbufs[1] into kbufs[0]); a kernel's launch is reported to the
  event watchers (events.py)."""
  if kernel is None: kbufs[0].copyin(kbufs[1].as_memoryview())
  else:
    st = time.perf_counter()
    et = kernel.run([b.handle for b in kbufs], wait=events.timing_launches)
    if events.watchers: events.emit("launch", device=kbufs[0].device, kernel=kernel, bufs=kbufs, start=st, end=time.perf_counter(), kernel_s=et)
  kbufs[0].mark_written()

def _run_once(launches: list[tuple]):
  for kernel, kbufs in launches:
    for b in kbufs: b.ensure_allocated()
    _relaunch(kernel, kbufs)
  for d in {kbufs[0].device for _, kbufs in launches}: Device[d].flush()

def _share_intermediates(launches: list[tuple]) -> list[Buffer]:
  """Give the captured launches' intermediate buffers (Buffer.transient: read only by launches of their own schedule,
  released after the last) memory again for the replays: slots that buffers whose launches do not overlap share, as
  the capture's run shared the device's pool. Each slot goes to the free slot that fits it most tightly, else grows
  the largest free one, else is new. Returns the slots (their owners); the buffers use their memory."""
  first: dict[Buffer, int] = {}
  last: dict[Buffer, int] = {}
  for i, (_, kbufs) in enumerate(launches):
    for b in kbufs:
      if b.transient: first.setdefault(b, i); last[b] = i
  sizes: list[int] = []                            # slot -> bytes
  device_of: list[str] = []
  free: dict[str, list[int]] = defaultdict(list)  # device -> its free slots
  slot_of: dict[Buffer, int] = {}
  ending: dict[int, list[Buffer]] = defaultdict(list)
  for b, i in last.items(): ending[i].append(b)
  for i, (_, kbufs) in enumerate(launches):
    for b in kbufs:
      if first.get(b) != i or b in slot_of: continue
      need, pool = max(b.nbytes, 1), free[b.device]
      if pool:
        fits = [s for s in pool if sizes[s] >= need]
        s = min(fits, key=sizes.__getitem__) if fits else max(pool, key=sizes.__getitem__)
        pool.remove(s)
        sizes[s] = max(sizes[s], need)
      else:
        s = len(sizes)
        sizes.append(need)
        device_of.append(b.device)
      slot_of[b] = s
    for b in ending[i]: free[b.device].append(slot_of[b])
  slots = [Buffer(device, n, dtypes.uint8).ensure_allocated() for device, n in zip(device_of, sizes)]
  for b, s in slot_of.items():
    b.release()   # (had the capture kept it)
    b._handle, b._external = slots[s].handle, True
  return slots

def _rebuild(x, new_outs):
  """`x` (the captured function's return value) with its tensors replaced, in order, by those of `new_outs`."""
  if isinstance(x, Tensor): return next(new_outs)
  if isinstance(x, (list, tuple)): return type(x)(_rebuild(y, new_outs) for y in x)
  if isinstance(x, dict): return {k: _rebuild(v, new_outs) for k, v in x.items()}
  return x
