"""The MNIST demo on real Fashion-MNIST (Debian's dataset-fashion-mnist, installed by scripts/setup.sh): the CNN, Adam and
the jitted step must actually learn; a run stopped at a checkpoint and continued from it must give the same losses as
one that never stopped; checkpoints are valid safetensors files written atomically; the plots are PNGs of the right
size; the confusion matrix counts what an independent count gives."""
import json, os, struct, sys
import numpy as np
import pytest
from tinyweb import Tensor, dtypes
from tinyweb.nn import optim
from tinyweb.nn.state import StateDictError, get_parameters
from demos.common import confusion_matrix, format_confusion, load_training, save_training
from demos.mnist import train as demo
from demos.mnist.train import Model, check_resume, train

FASHION = "/usr/share/datasets/fashion-mnist"
needs_fashion = pytest.mark.skipif(not os.path.isdir(FASHION), reason="apt package dataset-fashion-mnist not installed")
RUN = dict(dataset="fashion", steps=8, batch_size=8, lr=0.003, seed=3, test_limit=100)   # seconds on 2 CPU cores

@needs_fashion
def test_short_fashion_mnist_training_run_learns():
  r = train("fashion", steps=100, batch_size=32, lr=0.002, seed=1, test_limit=1000)
  assert r["dataset"] == "fashion-mnist" and r["device"] and r["steps"] == 100
  # chance is 10%; 100 steps of 32 images reach about 70-75% with this model
  assert r["test_accuracy"] > 0.65, r

def png_size(path) -> tuple[int, int]:
  """(width, height) from the IHDR chunk, which must come first after the 8-byte signature."""
  with open(path, "rb") as f: head = f.read(24)
  assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG: {head[:8]!r}"
  assert head[12:16] == b"IHDR"
  return struct.unpack(">II", head[16:24])

@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """The same 8-step one-cycle run three ways: uninterrupted; steps 1-4 saved (also every 3 steps); steps 5-8 loaded
  from that checkpoint, with plots."""
  if not os.path.isdir(FASHION): pytest.skip("apt package dataset-fashion-mnist not installed")
  d = tmp_path_factory.mktemp("mnist")
  whole = train(**RUN, eval_every=4)
  saved_at, real_save = [], demo.save_training
  def recording_save(path, model, opt, meta):
    saved_at.append(meta["step"])
    real_save(path, model, opt, meta)
  demo.save_training = recording_save
  try: first = train(**RUN, stop_at=4, save=str(d / "ck.safetensors"), save_every=3, eval_every=4)
  finally: demo.save_training = real_save
  second = train(**RUN, load=str(d / "ck.safetensors"), eval_every=4, plot=str(d / "curve.png"))
  return d, whole, first, second, saved_at

def test_resumed_run_matches_the_uninterrupted_one(runs):
  _, whole, first, second, saved_at = runs
  assert saved_at == [3, 4]   # every 3 steps, and where the part ended
  assert (first["start_step"], first["stop_step"], second["start_step"], second["stop_step"]) == (0, 4, 4, 8)
  assert len(whole["history"]["loss"]) == 8 and second["history"]["step"] == list(range(1, 9))   # the history goes on too
  np.testing.assert_allclose(first["history"]["loss"], whole["history"]["loss"][:4], rtol=1e-4)
  np.testing.assert_allclose(second["history"]["loss"], whole["history"]["loss"], rtol=1e-4)
  np.testing.assert_allclose(second["final_loss"], whole["final_loss"], rtol=1e-4)
  assert second["history"]["test_step"] == whole["history"]["test_step"] == [4, 8]
  np.testing.assert_allclose(second["history"]["test_accuracy"], whole["history"]["test_accuracy"])
  assert second["test_accuracy"] == whole["test_accuracy"] and second["confusion"] == whole["confusion"]
  # the losses change from step to step (the comparison is not of constants), and the second part's first step (5) is
  # not a fresh start: a fresh model's first loss is near ln(10)
  assert len(set(whole["history"]["loss"])) == 8 and abs(whole["history"]["loss"][4] - whole["history"]["loss"][0]) > 0.1

def test_checkpoint_is_a_valid_safetensors_file(runs):
  from safetensors import safe_open
  import torch
  d, _, first, _, _ = runs
  with safe_open(str(d / "ck.safetensors"), framework="numpy") as f:
    meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}
  assert meta["format"] == "tinyweb-demo-training/1" and json.loads(meta["step"]) == 4
  assert json.loads(meta["run"]) == {"dataset": "fashion-mnist", "steps": 8, "batch_size": 8, "lr": 0.003, "schedule": "onecycle"}
  assert json.loads(meta["history"])["loss"] == first["history"]["loss"]
  model_keys = {f"model.layers.{i}.{w}" for i in (0, 2, 6, 8, 13) for w in ("weight", "bias")}
  bn_keys = {f"model.layers.{i}.{w}" for i in (4, 10) for w in ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")}
  adam_keys = {f"optimizer.{m}.{i}" for m in "mv" for i in range(14)} | {"optimizer.lr", "optimizer.t"}
  assert set(tensors) == model_keys | bn_keys | adam_keys
  assert tensors["model.layers.0.weight"].shape == (32, 1, 5, 5) and tensors["model.layers.13.weight"].shape == (10, 576)
  assert tensors["model.layers.4.num_batches_tracked"].dtype == np.int32 and tensors["model.layers.4.num_batches_tracked"] == 4
  assert tensors["optimizer.t"] == 4 and np.abs(tensors["optimizer.m.0"]).sum() > 0
  assert not np.allclose(tensors["model.layers.4.running_var"], 1)   # the running statistics moved from their start
  # the learning rate is where torch's OneCycleLR is after 4 of 8 steps
  p = torch.zeros(1, requires_grad=True)
  topt = torch.optim.Adam([p], lr=0.003)
  sched = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.003, total_steps=8, cycle_momentum=False)
  for _ in range(4): topt.step(); sched.step()
  np.testing.assert_allclose(tensors["optimizer.lr"], sched.get_last_lr()[0], rtol=1e-6)

def test_plots_are_pngs_of_the_documented_size(runs):
  from PIL import Image
  d = runs[0]
  assert png_size(d / "curve.png") == (900, 500) and png_size(d / "curve_confusion.png") == (700, 600)
  assert os.path.getsize(d / "curve.png") < 150_000
  for name in ("curve.png", "curve_confusion.png"):
    with Image.open(d / name) as im: assert len(im.convert("RGB").getcolors(1 << 20)) > 10   # drawn, not blank

def test_plot_without_matplotlib_says_how_to_install(monkeypatch, tmp_path):
  monkeypatch.setitem(sys.modules, "matplotlib", None)   # (import matplotlib raises ImportError)
  monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
  def no_data(name): raise AssertionError("the data was loaded before the missing matplotlib was noticed")
  monkeypatch.setattr(demo, "load_dataset", no_data)
  with pytest.raises(ModuleNotFoundError, match=r"pip install 'tinyweb\[demo\]'"): train(**RUN, plot=str(tmp_path / "c.png"))

def small_state(seed=0):
  Tensor.manual_seed(seed)
  model = Model()
  return model, optim.Adam(get_parameters(model), lr=0.001)

def temp_files(folder) -> list[str]: return [f for f in os.listdir(folder) if f.endswith(".tmp")]

def test_checkpoint_writes_are_atomic(tmp_path, monkeypatch):
  import tinyweb.nn.state as state
  model, opt = small_state()
  path = tmp_path / "ck.safetensors"
  save_training(path, model, opt, {"step": 1})
  before = path.read_bytes()
  # a write that fails midway (after the first tensor's bytes) leaves the old checkpoint as it was, and no temporary file
  real, calls = state._tensor_bytes, []
  def failing(t):
    calls.append(t)
    if len(calls) > 1: raise OSError("disk full")
    return real(t)
  monkeypatch.setattr(state, "_tensor_bytes", failing)
  model2, opt2 = small_state(seed=1)
  with pytest.raises(OSError, match="disk full"): save_training(path, model2, opt2, {"step": 2})
  monkeypatch.undo()
  assert len(calls) == 2 and path.read_bytes() == before and temp_files(tmp_path) == []
  # a rename that fails (the target is a folder) leaves no temporary file either
  (tmp_path / "taken").mkdir()
  with pytest.raises(OSError): save_training(tmp_path / "taken", model, opt, {"step": 1})
  assert temp_files(tmp_path) == [] and os.listdir(tmp_path / "taken") == []

def test_a_checkpoint_of_another_model_names_the_tensor_and_shapes(tmp_path):
  from safetensors.numpy import load_file, save_file
  from safetensors import safe_open
  model, opt = small_state()
  path = tmp_path / "ck.safetensors"
  save_training(path, model, opt, {"step": 1})
  with safe_open(str(path), framework="numpy") as f: meta = f.metadata()
  tensors = load_file(str(path))
  tensors["model.layers.0.weight"] = np.zeros((16, 1, 5, 5), np.float32)   # a narrower first conv
  save_file(tensors, str(path), metadata=meta)
  fresh, fresh_opt = small_state(seed=1)
  w_before = fresh.layers[0].weight.tolist()
  with pytest.raises(StateDictError) as e: load_training(path, fresh, fresh_opt)
  msg = str(e.value)
  assert str(path) in msg and "model.layers.0.weight" in msg and "(32, 1, 5, 5)" in msg and "(16, 1, 5, 5)" in msg, msg
  assert fresh.layers[0].weight.tolist() == w_before   # nothing was loaded

def test_resume_refuses_other_settings():
  run = {"dataset": "fashion-mnist", "steps": 8, "batch_size": 8, "lr": 0.003, "schedule": "onecycle"}
  check_resume("ck", dict(run), dict(run), 4)
  with pytest.raises(ValueError, match=r"steps 8 \(given: 16\)"): check_resume("ck", dict(run), {**run, "steps": 16}, 4)
  with pytest.raises(ValueError, match=r"batch_size 8 \(given: 32\)"): check_resume("ck", dict(run), {**run, "batch_size": 32}, 4)
  constant = {**run, "schedule": "constant"}
  check_resume("ck", dict(constant), {**constant, "steps": 16}, 4)   # a constant lr: the run may grow
  with pytest.raises(ValueError, match="past --steps 2"): check_resume("ck", dict(constant), {**constant, "steps": 2}, 4)

def test_confusion_matrix_against_an_independent_count():
  rng = np.random.default_rng(0)
  labels = rng.integers(0, 10, 1000)
  preds = np.where(rng.random(1000) < 0.6, labels, rng.integers(0, 10, 1000))   # mostly right, like a trained model
  want = np.zeros((10, 10), np.int64)
  for y, p in zip(labels, preds): want[y, p] += 1
  got = confusion_matrix(Tensor(labels.astype(np.uint8)), Tensor(preds.astype(np.int32)), 10)
  assert np.array_equal(np.array(got), want) and np.trace(want) > 500
  with pytest.raises(ValueError, match=r"\(3,\) and \(4,\)"): confusion_matrix(Tensor([0, 1, 2]), Tensor([0, 1, 2, 3]), 10)

def test_confusion_table_text():
  text = format_confusion([[3, 1, 0], [0, 0, 0], [2, 0, 8]], ["cat", "dog", "bird"])
  assert text.splitlines() == [
    "confusion matrix (14 test images; rows: true class, columns: predicted class)",
    "           0    1    2  recall",
    "0 cat      3    1    0   75.0%",
    "1 dog      0    0    0       -",
    "2 bird     2    0    8   80.0%"]

def test_train_confusion_agrees_with_its_accuracy(runs):
  whole = runs[1]
  cm = np.array(whole["confusion"])
  assert cm.shape == (10, 10) and cm.sum() == RUN["test_limit"]
  assert np.trace(cm) / cm.sum() == whole["test_accuracy"]
