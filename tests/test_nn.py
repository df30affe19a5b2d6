"""tinyweb.nn layers against torch.nn: the same weights copied in, then forward values and the gradients of the input and
of every parameter; BatchNorm's running statistics over training steps; initialization statistics; state-dict keys."""
import numpy as np
import pytest
import torch
from tinyweb import Tensor, dtypes
import tinyweb.nn as nn
from tinyweb.nn.state import get_state_dict

pytestmark = pytest.mark.filterwarnings("ignore:Using padding='same'")

def _rand(shape, seed, low=-2.0, high=2.0):
  return np.random.default_rng(seed).uniform(low, high, size=shape).astype(np.float32)

def _copy_from_torch(layer, module, device):
  """Give the tinyweb layer torch's parameters and buffers (new tensors, under torch's names)."""
  for name, p in module.named_parameters():
    setattr(layer, name, Tensor(p.detach().numpy().copy(), device=device, requires_grad=True))
  for name, b in module.named_buffers():
    arr = b.numpy().copy()
    setattr(layer, name, Tensor(arr.astype(np.int32) if arr.dtype == np.int64 else arr, device=device))

def _randomize(module, seed=0, low=0.5, high=1.5):
  """Norm layers start at ones/zeros: give them random affine parameters so the tests see them."""
  g = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    for p in module.parameters(): p.copy_(torch.rand(p.shape, generator=g) * (high - low) + low)

def check_layer(layer, module, x_np, device, tw_fn=None, torch_fn=None, atol=1e-5, rtol=1e-4, grad_tol=(1e-4, 1e-3)):
  """Forward and backward of sum(out * cotangent) in both; compares the output, the input's and the parameters' grads."""
  _copy_from_torch(layer, module, device)
  module.zero_grad()
  tw_fn, torch_fn = tw_fn or (lambda m, x: m(x)), torch_fn or (lambda m, x: m(x))
  is_float = np.issubdtype(x_np.dtype, np.floating)
  xt = torch.tensor(x_np, requires_grad=is_float) if is_float else torch.tensor(x_np.astype(np.int64))
  xw = Tensor(x_np, device=device, requires_grad=is_float or None)
  out_t, out_w = torch_fn(module, xt), tw_fn(layer, xw)
  assert out_w.shape == tuple(out_t.shape)
  np.testing.assert_allclose(out_w.numpy(), out_t.detach().numpy(), atol=atol, rtol=rtol, err_msg="forward")
  cot = _rand(tuple(out_t.shape), 99, -1, 1)
  (out_t * torch.tensor(cot)).sum().backward()
  (out_w * Tensor(cot, device=device)).sum().backward()
  if is_float: np.testing.assert_allclose(xw.grad.numpy(), xt.grad.numpy(), atol=grad_tol[0], rtol=grad_tol[1], err_msg="input grad")
  for name, p in module.named_parameters():
    np.testing.assert_allclose(getattr(layer, name).grad.numpy(), p.grad.numpy(), atol=grad_tol[0], rtol=grad_tol[1], err_msg=f"grad of {name}")
  return out_w

# ---------------------------------------------------------------------------------------------------------------
# linear and convolutions

@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 5)])
def test_linear(device, bias, shape):
  check_layer(nn.Linear(5, 3, bias=bias, device=device), torch.nn.Linear(5, 3, bias=bias), _rand(shape, 1), device)

@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, dilation=2, groups=2),
                                dict(kernel_size=4, padding="same", bias=False), dict(kernel_size=3, padding=2, padding_mode="circular")])
def test_conv1d(device, kw):
  check_layer(nn.Conv1d(4, 6, device=device, **kw), torch.nn.Conv1d(4, 6, **kw), _rand((2, 4, 11), 2), device)

@pytest.mark.parametrize("kw", [
  dict(kernel_size=3), dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=(2, 3), stride=(1, 2), padding=(1, 0)),
  dict(kernel_size=3, dilation=2, groups=2, bias=False), dict(kernel_size=(3, 4), padding="same"), dict(kernel_size=3, padding="valid"),
  dict(kernel_size=3, padding=1, padding_mode="reflect"), dict(kernel_size=3, padding=2, padding_mode="replicate"),
  dict(kernel_size=(2, 3), padding="same", padding_mode="circular", dilation=2)])
@pytest.mark.browser(kw=[dict(kernel_size=3, stride=2, padding=1)])
def test_conv2d(device, kw):
  check_layer(nn.Conv2d(4, 6, device=device, **kw), torch.nn.Conv2d(4, 6, **kw), _rand((2, 4, 9, 8), 3), device)

@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=3, stride=2, padding=1, output_padding=1),
                                dict(kernel_size=(2, 3), stride=(2, 1), groups=2, bias=False), dict(kernel_size=3, dilation=2, padding=2)])
def test_conv_transpose2d(device, kw):
  check_layer(nn.ConvTranspose2d(4, 6, device=device, **kw), torch.nn.ConvTranspose2d(4, 6, **kw), _rand((2, 4, 5, 6), 4), device)

def test_conv_transpose1d(device):
  kw = dict(kernel_size=3, stride=2, padding=1, output_padding=1)
  check_layer(nn.ConvTranspose1d(4, 2, device=device, **kw), torch.nn.ConvTranspose1d(4, 2, **kw), _rand((3, 4, 7), 5), device)

def test_conv_errors(device):
  with pytest.raises(ValueError, match="divisible by groups"): nn.Conv2d(3, 6, 3, groups=2, device=device)
  with pytest.raises(ValueError, match="stride 1"): nn.Conv2d(2, 2, 3, stride=2, padding="same", device=device)
  with pytest.raises(ValueError, match="padding_mode"): nn.Conv2d(2, 2, 3, padding_mode="mirror", device=device)

# ---------------------------------------------------------------------------------------------------------------
# normalization

@pytest.mark.parametrize("case", ["2d", "1d_flat", "1d_seq", "momentum_none", "no_affine"])
@pytest.mark.browser(case=["2d"])
def test_batchnorm_train_then_eval(device, case):
  shape, kw = {"2d": ((4, 3, 5, 5), {}), "1d_flat": ((8, 3), {}), "1d_seq": ((4, 3, 6), {"momentum": 0.3}),
               "momentum_none": ((4, 3, 5, 5), {"momentum": None}), "no_affine": ((4, 3, 2, 2), {"affine": False, "eps": 1e-3})}[case]
  tmod = (torch.nn.BatchNorm2d if len(shape) == 4 else torch.nn.BatchNorm1d)(3, **kw)
  _randomize(tmod)
  bn = nn.BatchNorm2d(3, device=device, **kw)
  _copy_from_torch(bn, tmod, device)
  with Tensor.train():
    tmod.train()
    for step in range(3):
      x = _rand(shape, 10 + step) * (step + 1) + step   # statistics that change from batch to batch
      if step == 0: check_layer(bn, tmod, x, device)   # values and gradients with batch statistics
      else: np.testing.assert_allclose(bn(Tensor(x, device=device)).numpy(), tmod(torch.tensor(x)).detach().numpy(), atol=1e-5, rtol=1e-4)
      np.testing.assert_allclose(bn.running_mean.numpy(), tmod.running_mean.numpy(), atol=1e-5, rtol=1e-5)
      np.testing.assert_allclose(bn.running_var.numpy(), tmod.running_var.numpy(), atol=1e-5, rtol=1e-5)
      assert bn.num_batches_tracked.item() == tmod.num_batches_tracked.item() == step + 1
  assert not Tensor.training
  tmod.eval()
  x = _rand(shape, 20)
  np.testing.assert_allclose(bn(Tensor(x, device=device)).numpy(), tmod(torch.tensor(x)).detach().numpy(), atol=1e-5, rtol=1e-4)
  assert bn.running_mean.numpy().tolist() == pytest.approx(tmod.running_mean.numpy().tolist(), abs=1e-5)   # eval leaves them alone

def test_batchnorm_eval_gradients(device):
  tmod = torch.nn.BatchNorm2d(3)
  _randomize(tmod)
  with torch.no_grad(): tmod.running_mean.uniform_(-1, 1); tmod.running_var.uniform_(0.5, 2)
  tmod.eval()
  check_layer(nn.BatchNorm2d(3, device=device), tmod, _rand((2, 3, 4, 4), 6), device)

def test_batchnorm_without_running_stats(device):
  tmod = torch.nn.BatchNorm2d(3, track_running_stats=False)
  _randomize(tmod)
  bn = nn.BatchNorm2d(3, track_running_stats=False, device=device)
  assert bn.running_mean is None and bn.num_batches_tracked is None
  for train in (True, False):   # batch statistics in both modes
    tmod.train(train)
    with Tensor.train(train): check_layer(bn, tmod, _rand((4, 3, 3, 3), 7), device)

def test_batchnorm_needs_two_values_per_channel(device):
  with Tensor.train(), pytest.raises(ValueError, match="more than 1 value"): nn.BatchNorm1d(3, device=device)(Tensor.ones(1, 3, device=device))

@pytest.mark.parametrize("kw", [dict(normalized_shape=6), dict(normalized_shape=(5, 6), eps=1e-3), dict(normalized_shape=6, elementwise_affine=False),
                                dict(normalized_shape=6, bias=False)])
def test_layernorm(device, kw):
  tmod = torch.nn.LayerNorm(**kw)
  _randomize(tmod)
  check_layer(nn.LayerNorm(device=device, **kw), tmod, _rand((2, 3, 5, 6), 8), device)

@pytest.mark.parametrize("kw", [dict(normalized_shape=8), dict(normalized_shape=(4, 8), eps=1e-3), dict(normalized_shape=8, elementwise_affine=False)])
def test_rmsnorm(device, kw):
  tmod = torch.nn.RMSNorm(**{"eps": 1e-6, **kw})
  _randomize(tmod)
  ours = nn.RMSNorm(kw["normalized_shape"], device=device, **{k: v for k, v in kw.items() if k != "normalized_shape"})
  check_layer(ours, tmod, _rand((3, 4, 8), 9), device)

@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(2, 6, 4, 4), (3, 6, 5)])
def test_groupnorm(device, affine, shape):
  tmod = torch.nn.GroupNorm(3, 6, affine=affine)
  _randomize(tmod)
  check_layer(nn.GroupNorm(3, 6, affine=affine, device=device), tmod, _rand(shape, 11), device)

@pytest.mark.parametrize("affine", [True, False])
def test_instancenorm(device, affine):
  t2 = torch.nn.InstanceNorm2d(4, affine=affine)
  _randomize(t2)
  check_layer(nn.InstanceNorm2d(4, affine=affine, device=device), t2, _rand((2, 4, 5, 5), 12), device)
  t1 = torch.nn.InstanceNorm1d(3, eps=1e-3, affine=affine)
  _randomize(t1)
  check_layer(nn.InstanceNorm1d(3, eps=1e-3, affine=affine, device=device), t1, _rand((2, 3, 7), 13), device)

def test_norm_shape_errors(device):
  with pytest.raises(ValueError, match="normalized shape"): nn.LayerNorm(4, device=device)(Tensor.ones(2, 5, device=device))
  with pytest.raises(ValueError, match="divisible"): nn.GroupNorm(4, 6, device=device)
  with pytest.raises(ValueError, match="N, 6"): nn.GroupNorm(3, 6, device=device)(Tensor.ones(2, 4, 3, device=device))

# ---------------------------------------------------------------------------------------------------------------
# embedding and LSTM

@pytest.mark.browser
def test_embedding(device):
  idx = np.random.default_rng(14).integers(0, 10, size=(3, 5)).astype(np.int32)
  idx[0, :3] = 7   # repeated indices: their gradients add up
  check_layer(nn.Embedding(10, 4, device=device), torch.nn.Embedding(10, 4), idx, device)
  emb = nn.Embedding(10, 4, device=device)
  assert emb(Tensor([2, 3], device=device)).shape == (2, 4) and emb(Tensor(3, device=device)).shape == (4,)
  with pytest.raises(TypeError, match="integer"): emb(Tensor([1.0], device=device))

@pytest.mark.parametrize("with_state", [False, True])
@pytest.mark.parametrize("bias", [True, False])
def test_lstm_cell(device, with_state, bias):
  tmod = torch.nn.LSTMCell(5, 7, bias=bias)
  h0, c0 = _rand((3, 7), 15, -1, 1), _rand((3, 7), 16, -1, 1)
  def torch_fn(m, x):
    h, c = m(x, (torch.tensor(h0), torch.tensor(c0)) if with_state else None)
    h2, c2 = m(x * 0.5, (h, c))   # two steps, so the recurrent weights get gradients either way
    return torch.cat([h2, c2], -1)
  def tw_fn(m, x):
    h, c = m(x, (Tensor(h0, device=device), Tensor(c0, device=device)) if with_state else None)
    h2, c2 = m(x * 0.5, (h, c))
    return h2.cat(c2, dim=-1)
  check_layer(nn.LSTMCell(5, 7, bias=bias, device=device), tmod, _rand((3, 5), 17), device, tw_fn, torch_fn)

# ---------------------------------------------------------------------------------------------------------------
# initialization and naming

def _check_uniform(ours: Tensor, theirs: torch.Tensor, bound: float):
  """U(-bound, bound) like torch's: inside the bound, reaching both ends, the same spread as torch's."""
  a, b = ours.numpy().ravel(), theirs.detach().numpy().ravel()
  assert np.abs(b).max() <= bound * (1 + 1e-6)   # the bound we expect is torch's
  assert np.abs(a).max() <= bound * (1 + 1e-6) and a.max() > 0.98 * bound and a.min() < -0.98 * bound
  # five standard errors of a sample of this size from U(-bound, bound): the sample std's relative error is
  # sqrt(0.2 / n) (a uniform's fourth moment is 9/5 sigma^4), the mean's is 1 / sqrt(n)
  std, n = bound / np.sqrt(3), a.size
  assert abs(a.std() - std) < 5 * np.sqrt(0.2 / n) * std and abs(a.std() - b.std()) < 5 * np.sqrt(0.4 / n) * std
  assert abs(a.mean()) < 5 * std / np.sqrt(n)

@pytest.mark.parametrize("name", ["linear", "conv2d", "conv2d_groups", "conv_transpose2d", "conv1d", "lstm"])
def test_init_matches_torch_distribution(device, name):
  Tensor.manual_seed(1)
  torch.manual_seed(1)   # the same torch sample every run: the comparison cannot flake
  ours, theirs, bound = {
    "linear": (lambda: (nn.Linear(1024, 256, device=device), torch.nn.Linear(1024, 256), 1 / 32)),
    "conv2d": (lambda: (nn.Conv2d(64, 128, 3, device=device), torch.nn.Conv2d(64, 128, 3), 1 / 24)),
    "conv2d_groups": (lambda: (nn.Conv2d(64, 128, 3, groups=4, device=device), torch.nn.Conv2d(64, 128, 3, groups=4), 1 / 12)),
    # a transposed conv's fan_in comes from weight dim 1: out_channels // groups
    "conv_transpose2d": (lambda: (nn.ConvTranspose2d(64, 256, 4, groups=2, device=device), torch.nn.ConvTranspose2d(64, 256, 4, groups=2),
                                  (256 // 2 * 16) ** -0.5)),
    "conv1d": (lambda: (nn.Conv1d(100, 200, 4, device=device), torch.nn.Conv1d(100, 200, 4), 1 / 20)),
    "lstm": (lambda: (nn.LSTMCell(100, 256, device=device), torch.nn.LSTMCell(100, 256), 1 / 16)),
  }[name]()
  for key, t in theirs.named_parameters():
    o = getattr(ours, key)
    assert o.shape == tuple(t.shape) and o.requires_grad and o.dtype == dtypes.float32
    if o.numel() >= 1000: _check_uniform(o, t, bound)
    else: assert np.abs(o.numpy()).max() <= bound and o.numpy().std() > 0.3 * bound   # biases: few values, same bound

def test_init_embedding_and_norms(device):
  Tensor.manual_seed(2)
  w = nn.Embedding(1000, 64, device=device).weight.numpy()
  assert abs(w.mean()) < 0.01 and abs(w.std() - 1) < 0.01 and (np.abs(w) > 3).mean() == pytest.approx(0.0027, abs=0.001)
  bn = nn.BatchNorm2d(5, device=device)
  for key, t in torch.nn.BatchNorm2d(5).state_dict().items():
    np.testing.assert_array_equal(getattr(bn, key).numpy(), t.numpy())
  for ours, theirs in [(nn.LayerNorm((3, 4), device=device), torch.nn.LayerNorm((3, 4))),
                       (nn.GroupNorm(2, 4, device=device), torch.nn.GroupNorm(2, 4)), (nn.RMSNorm(6, device=device), torch.nn.RMSNorm(6)),
                       (nn.InstanceNorm2d(3, affine=True, device=device), torch.nn.InstanceNorm2d(3, affine=True))]:
    for key, t in theirs.state_dict().items(): np.testing.assert_array_equal(getattr(ours, key).numpy(), t.numpy())

def test_random_init_differs_between_layers(device):
  a, b = nn.Linear(8, 8, device=device), nn.Linear(8, 8, device=device)
  assert not np.allclose(a.weight.numpy(), b.weight.numpy())
  bn1, bn2 = nn.BatchNorm1d(4, device=device), nn.BatchNorm1d(4, device=device)
  Tensor.realize_all(bn1.running_mean, bn2.running_mean)   # equal values, separate storage
  with Tensor.train(): bn1(Tensor(_rand((5, 4), 0), device=device)).realize()
  np.testing.assert_array_equal(bn2.running_mean.numpy(), 0)
  assert bn1.running_mean.numpy().any()

def test_state_dict_keys_match_torch(device):
  pairs = [(nn.Linear(3, 2, device=device), torch.nn.Linear(3, 2)),
           (nn.Linear(3, 2, bias=False, device=device), torch.nn.Linear(3, 2, bias=False)), (nn.Conv2d(2, 4, 3, device=device), torch.nn.Conv2d(2, 4, 3)),
           (nn.Conv1d(2, 4, 3, bias=False, device=device), torch.nn.Conv1d(2, 4, 3, bias=False)),
           (nn.ConvTranspose2d(2, 4, 3, device=device), torch.nn.ConvTranspose2d(2, 4, 3)), (nn.BatchNorm2d(3, device=device), torch.nn.BatchNorm2d(3)),
           (nn.BatchNorm1d(3, affine=False, device=device), torch.nn.BatchNorm1d(3, affine=False)),
           (nn.LayerNorm(3, device=device), torch.nn.LayerNorm(3)), (nn.GroupNorm(1, 3, device=device), torch.nn.GroupNorm(1, 3)),
           (nn.RMSNorm(3, device=device), torch.nn.RMSNorm(3)), (nn.Embedding(5, 3, device=device), torch.nn.Embedding(5, 3)),
           (nn.LSTMCell(3, 4, device=device), torch.nn.LSTMCell(3, 4))]
  for ours, theirs in pairs:
    sd = get_state_dict(ours)
    assert list(sd) == list(theirs.state_dict()), type(theirs).__name__
    for k, t in theirs.state_dict().items(): assert sd[k].shape == tuple(t.shape), k
