"""What the demos share: the progress bar, the timed training loop and its history, training checkpoints, the confusion
matrix, and the plots of both (matplotlib, imported only when a plot is asked for)."""
from __future__ import annotations
import json, math, os, sys, time
from typing import Any, Callable, Optional
from tinyweb import Tensor, dtypes
from tinyweb.nn.state import StateDictError, get_state_dict, load_state_dict, safe_load, safe_load_metadata, safe_save

class PlainBar:
  """Stands in for tqdm when it is not installed: prints the description every 10 steps."""
  def __init__(self, start: int, total: int): self.start, self.total, self.i = start, total, start
  def __iter__(self):
    for self.i in range(self.start, self.total): yield self.i
  def set_description(self, s: str):
    if self.i % 10 == 0 or self.i == self.total - 1: print(f"{self.i + 1}/{self.total} {s}", file=sys.stderr)

def progress(start: int, total: int):
  """Iterate start..total-1 with a progress bar of `total` steps that begins at `start`."""
  try:
    from tqdm import tqdm
    return tqdm(range(start, total), initial=start, total=total)
  except ImportError: return PlainBar(start, total)

def new_history() -> dict[str, list]:
  """What train_loop records (JSON-able, so a checkpoint can carry it): after each step, its number (1-based), loss and
  batch accuracy; after each evaluation, the step and the test accuracy."""
  return {"step": [], "loss": [], "train_accuracy": [], "test_step": [], "test_accuracy": []}

def train_loop(step: Callable, next_batch: Callable, steps: int, evaluate: Callable[[], float], eval_every: int = 0,
               start: int = 0, history: Optional[dict] = None, after_step: Optional[Callable[[int], Any]] = None) -> dict:
  """Run the jitted steps start..steps-1 on fresh batches with a progress bar of loss and accuracy (and test accuracy
  every `eval_every` steps), appending to `history` (a new_history() by default). after_step(n) runs after the n-th
  step (n = 1..steps; e.g. to save a checkpoint). steps/s is measured after the first two steps of this call (TinyJit's
  warm-up and capture)."""
  history = new_history() if history is None else history
  st, t_first = time.perf_counter(), None
  bar = progress(start, steps)
  for i in bar:
    loss, acc = step(*next_batch())
    loss_v, acc_v = loss.item(), acc.item()
    if i == start + 1: t_first = time.perf_counter()   # steps from here on are replays of the captured kernels
    history["step"].append(i + 1); history["loss"].append(loss_v); history["train_accuracy"].append(acc_v)
    msg = f"loss {loss_v:6.3f} acc {acc_v * 100:5.1f}%"
    if eval_every and (i + 1) % eval_every == 0:
      test = evaluate()
      history["test_step"].append(i + 1); history["test_accuracy"].append(test)
      msg += f" test {test * 100:5.2f}%"
    bar.set_description(msg)
    if after_step is not None: after_step(i + 1)
  end, n = time.perf_counter(), steps - start
  sps = (n - 2) / (end - t_first) if t_first and n > 2 else n / max(end - st, 1e-9)
  return {"final_loss": history["loss"][-1] if history["loss"] else math.nan, "train_seconds": end - st,
          "steps_per_second": sps, "history": history}

# ---------------------------------------------------------------------------------------------------------------
# checkpoints: one safetensors file with the model's tensors ("model.*": weights and BatchNorm statistics), the
# optimizer's ("optimizer.*": learning rate, step count, moments) and JSON metadata (where the run is, how to go on)

CHECKPOINT_FORMAT = "tinyweb-demo-training/1"

def optimizer_state(opt) -> dict[str, Tensor]:
  """The optimizer's own tensors: all it holds but the parameters and buffers it updates (saved with the model)."""
  return {k: t for k, t in get_state_dict(opt).items() if not k.startswith(("params.", "buffers."))}

def save_training(path, model, opt, meta: dict[str, Any]) -> None:
  """Model, optimizer state and `meta` (JSON-able values) in one safetensors file. safe_save writes it atomically: a
  temporary file in the same folder, renamed over `path` (a crash or full disk never leaves a partial checkpoint)."""
  tensors = {**get_state_dict(model, "model."), **get_state_dict(optimizer_state(opt), "optimizer.")}
  safe_save(tensors, path, {"format": CHECKPOINT_FORMAT, **{k: json.dumps(v) for k, v in meta.items()}})

def training_metadata(path) -> dict[str, Any]:
  """The metadata save_training wrote into `path` (ValueError if it is not such a checkpoint)."""
  meta = safe_load_metadata(path)
  if meta.get("format") != CHECKPOINT_FORMAT:
    raise ValueError(f"{os.fspath(path)}: not a training checkpoint of the demos (metadata format {meta.get('format')!r}, "
                     f"expected {CHECKPOINT_FORMAT!r})")
  return {k: json.loads(v) for k, v in meta.items() if k != "format"}

def load_training(path, model, opt) -> None:
  """Copy a checkpoint's tensors into the model and the optimizer. A checkpoint of another model raises StateDictError
  naming every tensor that is missing, unexpected or of another shape; nothing is loaded then."""
  try: load_state_dict({"model": model, "optimizer": optimizer_state(opt)}, safe_load(path))
  except StateDictError as e: raise StateDictError(f"{os.fspath(path)}: the checkpoint does not fit this model and optimizer:\n{e}") from None

# ---------------------------------------------------------------------------------------------------------------
# the confusion matrix

def confusion_matrix(labels: Tensor, preds: Tensor, n: int) -> list[list[int]]:
  """cm[i][j]: how many samples of class i (labels) were predicted as class j (preds); both 1-D, values in 0..n-1.
  Computed on the device as one_hot(labels).T @ one_hot(preds) (float32 counts are exact up to 2**24 samples)."""
  if labels.ndim != 1 or labels.shape != preds.shape:
    raise ValueError(f"confusion_matrix: labels and preds must be 1-D of the same length, got {labels.shape} and {preds.shape}")
  def one_hot(t: Tensor) -> Tensor: return t.cast(dtypes.int32).one_hot(n).float()
  return (one_hot(labels).T @ one_hot(preds)).cast(dtypes.int32).tolist()

def format_confusion(cm: list[list[int]], names: list[str]) -> str:
  """The matrix as a text table: a row per true class (its number and name), a column per predicted class (by
  number), and each class's recall (the share of its samples predicted right)."""
  w = max(5, len(str(max(max(r) for r in cm))) + 1)
  name_w = max(len(s) for s in names) + 3
  lines = [f"confusion matrix ({sum(map(sum, cm))} test images; rows: true class, columns: predicted class)",
           " " * name_w + "".join(f"{j:>{w}}" for j in range(len(cm))) + "  recall"]
  for i, (row, name) in enumerate(zip(cm, names)):
    recall = f"{row[i] / sum(row) * 100:5.1f}%" if sum(row) else f"{'-':>6}"
    lines.append(f"{f'{i} {name}':<{name_w}}" + "".join(f"{c:>{w}}" for c in row) + "  " + recall)
  return "\n".join(lines)

# ---------------------------------------------------------------------------------------------------------------
# plots (PNG files)

def matplotlib_figure():
  """matplotlib's Figure class, imported when a plot is asked for (not when the demos are). A Figure saved to a .png is
  drawn by Agg: no window, no pyplot state."""
  try: from matplotlib.figure import Figure
  except ImportError:
    raise ModuleNotFoundError("plotting needs matplotlib: pip install 'tinyweb[demo]' (or pip install matplotlib)", name="matplotlib") from None
  return Figure

def figure(width_px: int, height_px: int):
  """A matplotlib Figure of that size in pixels."""
  return matplotlib_figure()(figsize=(width_px / 100, height_px / 100), dpi=100)

def smooth(xs: list[float], window: int) -> list[float]:
  """The running mean of the last `window` values (fewer at the start)."""
  out, acc = [], 0.0
  for i, x in enumerate(xs):
    acc += x - (xs[i - window] if i >= window else 0.0)
    out.append(acc / min(i + 1, window))
  return out

def plot_training(path, history: dict, title: str, size: tuple[int, int] = (900, 500)) -> None:
  """The training curve as a PNG: the loss of every step (and its running mean) on the left axis; the batch accuracy
  (running mean) and the test accuracy where it was measured on the right one."""
  fig = figure(*size)
  ax = fig.subplots()
  steps, window = history["step"], max(1, len(history["step"]) // 25)
  ax.plot(steps, history["loss"], color="tab:blue", alpha=0.3, linewidth=0.8, label="loss (each step)")
  ax.plot(steps, smooth(history["loss"], window), color="tab:blue", label=f"loss (mean of {window})")
  ax.set_xlabel("step"); ax.set_ylabel("training loss"); ax.set_ylim(bottom=0); ax.grid(alpha=0.3)
  acc = ax.twinx()
  acc.plot(steps, [a * 100 for a in smooth(history["train_accuracy"], window)], color="tab:orange", label=f"batch accuracy (mean of {window})")
  if history["test_step"]:
    acc.plot(history["test_step"], [a * 100 for a in history["test_accuracy"]], "o-", color="tab:green", label="test accuracy")
  acc.set_ylabel("accuracy (%)"); acc.set_ylim(0, 100)
  handles = [h for a in (ax, acc) for h in a.get_legend_handles_labels()[0]]
  ax.legend(handles, [h.get_label() for h in handles], loc="center right")
  ax.set_title(title)
  fig.tight_layout()
  fig.savefig(path, format="png")

def plot_confusion(path, cm: list[list[int]], names: list[str], title: str, size: tuple[int, int] = (700, 600)) -> None:
  """The confusion matrix as a PNG: counts in the cells, shaded by count."""
  fig = figure(*size)
  ax = fig.subplots()
  n, top = len(cm), max(max(r) for r in cm)
  im = ax.imshow(cm, cmap="Blues")
  for i in range(n):
    for j in range(n): ax.text(j, i, str(cm[i][j]), ha="center", va="center", fontsize=8, color="white" if cm[i][j] > top / 2 else "black")
  ax.set_xticks(range(n), names, rotation=45, ha="right"); ax.set_yticks(range(n), names)
  ax.set_xlabel("predicted class"); ax.set_ylabel("true class"); ax.set_title(title)
  fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)   # (as tall as the matrix)
  fig.tight_layout()
  fig.savefig(path, format="png")
