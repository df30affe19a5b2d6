"""What the demos share: the progress bar and the timed training loop."""
from __future__ import annotations
import sys, time
from typing import Callable

class PlainBar:
  """Stands in for tqdm when it is not installed: prints the description every 10 steps."""
  def __init__(self, total: int): self.total, self.i = total, 0
  def __iter__(self):
    for self.i in range(self.total): yield self.i
  def set_description(self, s: str):
    if self.i % 10 == 0 or self.i == self.total - 1: print(f"{self.i + 1}/{self.total} {s}", file=sys.stderr)

def progress(total: int):
  try:
    from tqdm import trange
    return trange(total)
  except ImportError: return PlainBar(total)

def train_loop(step: Callable, next_batch: Callable, steps: int, evaluate: Callable[[], float], eval_every: int = 0) -> dict:
  """Run `steps` jitted steps on fresh batches with a progress bar of loss and accuracy (and test accuracy every
  `eval_every` steps). steps/s is measured after the first two steps (TinyJit's warm-up and capture)."""
  st, t_first, loss_v = time.perf_counter(), None, float("nan")
  bar = progress(steps)
  for i in bar:
    loss, acc = step(*next_batch())
    loss_v, acc_v = loss.item(), acc.item()
    if i == 1: t_first = time.perf_counter()   # steps from here on are replays of the captured kernels
    msg = f"loss {loss_v:6.3f} acc {acc_v * 100:5.1f}%"
    if eval_every and (i + 1) % eval_every == 0: msg += f" test {evaluate() * 100:5.2f}%"
    bar.set_description(msg)
  end = time.perf_counter()
  sps = (steps - 2) / (end - t_first) if t_first and steps > 2 else steps / (end - st)
  return {"final_loss": loss_v, "train_seconds": end - st, "steps_per_second": sps}
