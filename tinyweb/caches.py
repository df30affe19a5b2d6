"""Every cache tinyweb keeps, listed in one place (`caches()`), and `clear()`, which empties them all.

A cache only saves work: clearing any of them at any time changes no result, only how long the next use takes. Not
caches, so not here: the UOp interning table (uop.UOpMeta.table: its weak entries die with their UOps, and two equal
UOps must stay one object), the loaded programs (Compiled.programs: weak, a program lives while a cached kernel or a
TinyJit holds it), the opened devices (Device[...]) and Device.DEFAULT, the CPU device's loaded thread pool
(backends/cpu.py thread_pool: a second load would start a second pool of threads), and the buffers themselves."""
from __future__ import annotations
import shutil, os, sys
from dataclasses import dataclass
from typing import Callable
from tinyweb import engine, schedule, search, tensor, tensor_index, helpers
from tinyweb.device import Device
from tinyweb.uop import PatternMatcher

@dataclass(frozen=True)
class Cache:
  name: str
  holds: str                    # what it maps to what
  owner: str                    # where it lives: module.name (or module:function for a memoized function)
  size: Callable[[], int]       # entries now (disk: files)
  clear: Callable[[], None]
  on_disk: bool = False

def _memo(module_name: str, fn: str, holds: str) -> list[Cache]:
  """A functools.cache'd function of a module, where that module is imported (the runtimes are imported on first use)."""
  if (module := sys.modules.get(module_name)) is None: return []
  f = getattr(module, fn)
  return [Cache(f"{module_name.rsplit('.', 1)[-1]}.{fn}", holds, f"{module_name}:{fn}", lambda: f.cache_info().currsize, f.cache_clear)]

def _compilers():
  return [dev.compiler for dev in Device._instances.values() if getattr(dev, "compiler", None) is not None]

def _allocators():
  return [dev.allocator for dev in Device._instances.values() if getattr(dev, "allocator", None) is not None]

def _disk(sub: str, name: str, holds: str, owner: str) -> Cache:
  path = os.path.join(helpers.cache_dir(), sub)
  def size() -> int: return len(os.listdir(path)) if os.path.isdir(path) else 0
  return Cache(name, holds, owner, size, lambda: shutil.rmtree(path, ignore_errors=True), on_disk=True)

def caches() -> list[Cache]:
  """The caches, in the order data flows (tensor graph -> schedule -> kernels -> binaries); memoized functions last."""
  memos = list(PatternMatcher.instances)
  return [
    Cache("constants", "(value, dtype, device, shape) -> the constant's uop", "tinyweb.tensor._const_cache",
          lambda: len(tensor._const_cache), tensor._const_cache.clear),
    Cache("realized values", "value uop -> the buffer view holding it (checked against the buffers' write counters)",
          "tinyweb.schedule.realized_cache", lambda: len(schedule.realized_cache.entries), schedule.realized_cache.entries.clear),
    Cache("schedules", "graph structure -> schedule template", "tinyweb.schedule._schedule_cache",
          lambda: len(schedule._schedule_cache), schedule._schedule_cache.clear),
    Cache("replayed reads", "x[idx] signature (device, shapes, dtypes) -> the kernel a small read of realized tensors launches",
          "tinyweb.tensor_index._gather_replays", lambda: len(tensor_index._gather_replays), tensor_index._gather_replays.clear),
    Cache("rewrite memos", "uop -> its rewrite, per pattern matcher (graph_rewrite without a context)",
          "tinyweb.uop.PatternMatcher.memo", lambda: sum(len(pm.memo) for pm in memos), lambda: [pm.memo.clear() for pm in memos]),
    Cache("beam results", "(kernel, device, target) -> the actions BEAM search chose", "tinyweb.search._memory_cache",
          lambda: len(search._memory_cache), search._memory_cache.clear),
    Cache("kernels", "(device, kernel AST, BEAM, NOOPT, TILES) -> compiled kernel", "tinyweb.engine._kernel_cache",
          lambda: len(engine._kernel_cache), engine._kernel_cache.clear),
    Cache("binaries", "(compiler, source) -> compiled binary, per opened device", "tinyweb.device.Compiler.mem",
          lambda: sum(len(c.mem) for c in _compilers()), lambda: [c.mem.clear() for c in _compilers()]),
    Cache("free buffers", "size -> freed device allocations kept for reuse, per opened device", "tinyweb.device.Allocator.cache",
          lambda: sum(len(v) for a in _allocators() for v in a.cache.values()), lambda: [a.free_cache() for a in _allocators()]),
    _disk("kernels", "binaries on disk", "hash of (compiler, source) -> compiled binary", "tinyweb.device.Compiler._disk_path"),
    _disk("lowered", "lowered kernels on disk", "hash of (tinyweb's sources, kernel, device, target, settings) -> source and launch "
          "settings", "tinyweb.engine.build_kernel"),
    _disk("beam", "beam results on disk", "hash of (kernel, device, target) -> the actions BEAM search chose", "tinyweb.search.beam_search"),
    *_memo("tinyweb.helpers", "getenv", "environment variable -> its value, read once"),
    *_memo("tinyweb.helpers", "_host_cpu_flags", "the CPU's instruction-set flags"),
    *_memo("tinyweb.backends.cpu", "_piece_bounds", "(loop length, pieces) -> the C thread pool's piece bounds"),
    *_memo("tinyweb.models.efficientnet", "_imagenet_class_names", "ImageNet-1k's class names, read once from the package's file"),
    *_memo("tinyweb.engine", "sources_digest", "a digest of tinyweb's sources, read once (the lowered kernels' disk key)"),
    *[c for fn in ("alu", "cast", "bitcast", "make_fold") for c in _memo("tinyweb.backends.python", fn, f"(op, dtypes) -> the PYTHON device's {fn} function")],
  ]

def clear(disk: bool = False):
  """Empty every cache in memory; with disk=True also the compiled binaries and BEAM results on disk."""
  for c in caches():
    if disk or not c.on_disk: c.clear()
