"""Bad input must fail loudly, at the call site, with the exception type of the API contract and a message
that names the op and the offending shapes / dtypes / indices. After every error the library must keep working
(an autouse fixture runs a small computation after each test)."""
import re
import numpy as np
import pytest
from tinyweb import Tensor, dtypes, Device

# ---------------------------------------------------------------- helpers

def shp(shape) -> str:
  """regex for a shape as it naturally prints: (3, 4) / (5,) / () -- also accepts list style [3, 4] / torch.Size([5])"""
  inner = r",\s*".join(str(int(s)) for s in shape)
  if len(shape) == 1: inner += ",?"
  return r"[\(\[]" + inner + r"[\)\]]"

def num(n) -> str:
  """regex for an integer that is not part of a bigger number"""
  return r"(?<![\d.])" + re.escape(str(n)) + r"(?!\d)"

def allof(*pats) -> str:
  """case-insensitive regex matching a message that contains every one of `pats` (in any order)"""
  return "(?is)" + "".join(f"(?=.*(?:{p}))" for p in pats)

FLOAT = r"float"

def still_works(*vals_and_tensors):
  """after an error: the tensors involved are still usable and give the right values"""
  for v, t in vals_and_tensors:
    np.testing.assert_allclose((t * 2).numpy(), np.asarray(v) * 2, rtol=1e-6)

@pytest.fixture(autouse=True)
def library_still_works():
  """runs after every test: a failed call must not leave the library (caches, graph, kernels) broken"""
  yield
  x = Tensor([1.0, 2.0, 3.0])
  assert (x * 2 + 1).sum().item() == pytest.approx(15.0)
  np.testing.assert_allclose((Tensor([[1.0, 2.0], [3.0, 4.0]]) * Tensor([10.0, 100.0])).sum(axis=1).numpy(), [210.0, 430.0])
  assert Tensor([1, 2, 3]).sum().item() == 6

def rnd(shape, seed=0):
  return np.random.default_rng(seed).uniform(-2, 2, size=shape).astype(np.float32)

# ---------------------------------------------------------------- broadcasting

BINARY = [  # name, regex for the op name in the message, tinyweb fn, numpy reference
  ("add", r"add|\+", lambda a, b: a + b, np.add),
  ("sub", r"sub|-", lambda a, b: a - b, np.subtract),
  ("mul", r"mul|\*", lambda a, b: a * b, np.multiply),
  ("div", r"div|/", lambda a, b: a / b, np.divide),
  ("maximum", r"max", lambda a, b: a.maximum(b), np.maximum),
  ("minimum", r"min", lambda a, b: a.minimum(b), np.minimum),
  ("where", r"where", lambda a, b: (a > 0).where(a, b), lambda a, b: np.where(a > 0, a, b)),
  ("lt", r"lt|<|less|cmp", lambda a, b: a < b, np.less),
]

@pytest.mark.parametrize("name,opre,fn,npfn", BINARY, ids=[b[0] for b in BINARY])
def test_broadcast_failure_binary(device, name, opre, fn, npfn):
  va, vb = rnd((3, 4)), rnd((5,), 1)
  a, b = Tensor(va, device=device), Tensor(vb, device=device)
  with pytest.raises(ValueError, match=allof(opre, shp((3, 4)), shp((5,)))):
    fn(a, b)  # must raise at the call site, not at realize time
  still_works((va, a), (vb, b))
  # the same op on compatible shapes works
  np.testing.assert_allclose(fn(a, a[:, :1]).numpy(), npfn(va, va[:, :1]), rtol=1e-5, atol=1e-6)

@pytest.mark.parametrize("sa,sb", [((5,), (3, 4)), ((4, 1, 3), (2, 4)), ((2, 3, 4), (2, 5, 4))])
def test_broadcast_failure_add_shapes(device, sa, sb):
  a, b = Tensor(rnd(sa), device=device), Tensor(rnd(sb, 1), device=device)
  with pytest.raises(ValueError, match=allof(r"add|\+", shp(sa), shp(sb))):
    a + b
  with pytest.raises(ValueError, match=allof(r"add|\+", shp(sa), shp(sb))):
    b + a

def test_broadcast_failure_inplace_setitem(device):
  vx = rnd((4, 3))
  x = Tensor(vx, device=device)
  with pytest.raises(ValueError, match=allof(shp((5,)))):
    x[1:3] = Tensor(rnd((5,)), device=device)
  np.testing.assert_allclose(x.numpy(), vx)  # unchanged

# ---------------------------------------------------------------- matmul

MATMUL = r"matmul|dot|@"

def test_matmul_inner_dim_mismatch(device):
  a, b = Tensor(rnd((2, 3)), device=device), Tensor(rnd((4, 5)), device=device)
  with pytest.raises(ValueError, match=allof(MATMUL, shp((2, 3)), shp((4, 5)))):
    a @ b
  with pytest.raises(ValueError, match=allof(MATMUL, shp((2, 3)), shp((4, 5)))):
    a.matmul(b)

def test_matmul_vector_mismatch(device):
  a, b = Tensor(rnd((3,)), device=device), Tensor(rnd((4,)), device=device)
  with pytest.raises(ValueError, match=allof(MATMUL, shp((3,)), shp((4,)))):
    a.dot(b)

def test_matmul_batch_broadcast_mismatch(device):
  a, b = Tensor(rnd((2, 3, 4)), device=device), Tensor(rnd((3, 4, 5)), device=device)
  with pytest.raises(ValueError, match=allof(MATMUL, shp((2, 3, 4)), shp((3, 4, 5)))):
    a @ b

@pytest.mark.parametrize("scalar_first", [True, False])
def test_matmul_0d_operand(device, scalar_first):
  s, v = Tensor(2.0, device=device), Tensor(rnd((3,)), device=device)
  with pytest.raises(ValueError, match=allof(MATMUL, r"\(\)|0-?d|scalar|1-?d|dim")):
    (s @ v) if scalar_first else (v @ s)
  assert (s * 2).item() == pytest.approx(4.0)

def test_linear_weight_mismatch(device):
  x, w = Tensor(rnd((2, 3)), device=device), Tensor(rnd((4, 5)), device=device)
  with pytest.raises(ValueError, match=allof(r"linear|matmul|dot|@", shp((2, 3)), shp((4, 5)))):
    x.linear(w)

def test_einsum_shape_mismatch(device):
  a, b = Tensor(rnd((2, 3)), device=device), Tensor(rnd((4, 5)), device=device)
  with pytest.raises(ValueError, match=allof(r"einsum")):
    Tensor.einsum("ij,jk->ik", a, b)

# ---------------------------------------------------------------- reshape / permute / expand

def test_reshape_wrong_size(device):
  vx = rnd((3, 4))
  x = Tensor(vx, device=device)
  with pytest.raises(ValueError, match=allof("reshape", shp((3, 4)), shp((5, 2)))):
    x.reshape(5, 2)
  with pytest.raises(ValueError, match=allof("reshape", shp((3, 4)), shp((5, 2)))):
    x.reshape((5, 2))
  still_works((vx, x))
  np.testing.assert_allclose(x.reshape(2, 6).numpy(), vx.reshape(2, 6))

def test_reshape_two_minus_one(device):
  x = Tensor(rnd((3, 4)), device=device)
  with pytest.raises(ValueError, match=allof("reshape", r"-1")):
    x.reshape(-1, -1)

def test_reshape_minus_one_not_divisible(device):
  x = Tensor(rnd((3, 4)), device=device)
  with pytest.raises(ValueError, match=allof("reshape", shp((3, 4)))):
    x.reshape(5, -1)
  assert x.reshape(6, -1).shape == (6, 2)

def test_reshape_negative_dim(device):
  x = Tensor(rnd((3, 4)), device=device)
  with pytest.raises(ValueError, match=allof("reshape")):
    x.reshape(-2, -6)

@pytest.mark.parametrize("order,exc", [((0, 1), ValueError), ((0, 0, 1), ValueError), ((0, 1, 3), (ValueError, IndexError))],
                         ids=["too_few", "duplicate", "out_of_range"])
def test_permute_bad_order(device, order, exc):
  vx = rnd((2, 3, 4))
  x = Tensor(vx, device=device)
  order_re = r"[\(\[]" + r",\s*".join(map(str, order)) + r"[\)\]]"
  with pytest.raises(exc, match=allof("permute", f"{shp((2, 3, 4))}|{order_re}|{num(order[-1])}")):
    x.permute(*order)
  np.testing.assert_allclose(x.permute(2, 0, 1).numpy(), vx.transpose(2, 0, 1))

def test_expand_non_one_dim(device):
  x = Tensor(rnd((3, 4)), device=device)
  with pytest.raises(ValueError, match=allof("expand", shp((3, 4)), shp((5, 4)))):
    x.expand(5, 4)

def test_expand_fewer_dims(device):
  x = Tensor(rnd((3, 4)), device=device)
  with pytest.raises(ValueError, match=allof("expand", shp((3, 4)))):
    x.expand(4)

def test_expand_mismatch_with_ones(device):
  vx = rnd((2, 1))
  x = Tensor(vx, device=device)
  with pytest.raises(ValueError, match=allof("expand", shp((2, 1)), shp((3, 5)))):
    x.expand(3, 5)
  np.testing.assert_allclose(x.expand(2, 5).numpy(), np.broadcast_to(vx, (2, 5)))

# ---------------------------------------------------------------- cat / stack / split / pad / shrink

def test_cat_mismatched_shapes(device):
  a, b = Tensor(rnd((2, 3)), device=device), Tensor(rnd((2, 4)), device=device)
  with pytest.raises(ValueError, match=allof("cat", shp((2, 3)), shp((2, 4)))):
    Tensor.cat(a, b, dim=0)
  with pytest.raises(ValueError, match=allof("cat", shp((2, 3)), shp((2, 4)))):
    a.cat(b, dim=0)
  assert Tensor.cat(a, b, dim=1).shape == (2, 7)

def test_cat_mismatched_rank(device):
  a, b = Tensor(rnd((2, 3)), device=device), Tensor(rnd((3,)), device=device)
  with pytest.raises(ValueError, match=allof("cat", shp((2, 3)), shp((3,)))):
    Tensor.cat(a, b, dim=0)

def test_cat_bad_dim(device):
  a = Tensor(rnd((2, 3)), device=device)
  with pytest.raises((IndexError, ValueError), match=allof(num(5))):
    Tensor.cat(a, a, dim=5)

def test_cat_empty(device):
  with pytest.raises((ValueError, TypeError), match=r"(?i)cat|empty|tensor|argument"):
    Tensor.cat()

def test_stack_mismatched_shapes(device):
  a, b = Tensor(rnd((2, 3)), device=device), Tensor(rnd((3, 2)), device=device)
  with pytest.raises(ValueError, match=r"(?i)stack|cat"):
    Tensor.stack(a, b)
  assert Tensor.stack(a, a).shape == (2, 2, 3)

def test_split_sizes_dont_sum(device):
  x = Tensor(rnd((6,)), device=device)
  with pytest.raises(ValueError, match=allof("split", num(6))):
    x.split([2, 3])
  assert [t.shape for t in x.split([2, 4])] == [(2,), (4,)]

def test_unflatten_wrong_sizes(device):
  x = Tensor(rnd((6,)), device=device)
  with pytest.raises(ValueError, match=allof(r"unflatten|reshape", shp((6,)))):
    x.unflatten(0, (4, 2))

def test_pad_too_many_dims(device):
  x = Tensor(rnd((2, 3)), device=device)
  with pytest.raises(ValueError, match=allof("pad")):
    x.pad((1, 1, 1, 1, 1, 1))

def test_shrink_out_of_bounds(device):
  x = Tensor(rnd((3, 4)), device=device)
  with pytest.raises(ValueError, match=allof("shrink", shp((3, 4)))):
    x.shrink(((0, 5), None))

def test_masked_fill_bad_mask(device):
  x = Tensor(rnd((3, 4)), device=device)
  mask = Tensor(np.array([True, False, True, False, True]), device=device)
  with pytest.raises(ValueError, match=allof(shp((3, 4)), shp((5,)))):
    x.masked_fill(mask, 0.0)

# ---------------------------------------------------------------- dtypes

BITWISE = [
  ("and", r"and|&", lambda a, b: a & b),
  ("or", r"or|\|", lambda a, b: a | b),
  ("xor", r"xor|\^", lambda a, b: a ^ b),
  ("invert", r"invert|not|~", lambda a, b: ~a),
  ("lshift", r"lshift|shl|<<|shift", lambda a, b: a << 1),
  ("rshift", r"rshift|shr|>>|shift", lambda a, b: a >> 1),
]

@pytest.mark.parametrize("name,opre,fn", BITWISE, ids=[b[0] for b in BITWISE])
def test_bitwise_on_float(device, name, opre, fn):
  va = rnd((4,))
  a, b = Tensor(va, device=device), Tensor(rnd((4,), 1), device=device)
  with pytest.raises(TypeError, match=allof(opre, FLOAT)):
    fn(a, b)
  still_works((va, a))
  # the same op on ints is fine and matches numpy
  ia, ib = np.array([5, 3, 12, 7], dtype=np.int32), np.array([3, 6, 10, 1], dtype=np.int32)
  got = fn(Tensor(ia, device=device), Tensor(ib, device=device)).numpy()
  np.testing.assert_array_equal(got, fn(ia, ib))

def test_bitwise_int_and_float_mixed(device):
  i, f = Tensor([1, 2, 3], device=device), Tensor([1.0, 2.0, 3.0], device=device)
  with pytest.raises(TypeError, match=allof(r"and|&", FLOAT)):
    i & f

def test_bitwise_on_bool_ok(device):
  a, b = np.array([True, False, True]), np.array([True, True, False])
  np.testing.assert_array_equal((Tensor(a, device=device) ^ Tensor(b, device=device)).numpy(), a ^ b)
  np.testing.assert_array_equal((~Tensor(a, device=device)).numpy(), ~a)

def test_one_hot_on_float(device):
  x = Tensor([0.0, 1.0, 2.0], device=device)
  with pytest.raises(TypeError, match=allof(r"one.?hot", FLOAT)):
    x.one_hot(3)
  np.testing.assert_array_equal(Tensor([0, 2], device=device).one_hot(3).numpy(), [[1, 0, 0], [0, 0, 1]])

@pytest.mark.parametrize("bad", ["float7"])
def test_cast_unknown_dtype(device, bad):
  vx = rnd((3,))
  x = Tensor(vx, device=device)
  with pytest.raises((TypeError, ValueError), match=allof(f"{bad}|dtype")):
    x.cast(bad)
  np.testing.assert_array_equal(x.cast(dtypes.int32).numpy(), vx.astype(np.int32))

# ---------------------------------------------------------------- indexing

def test_index_out_of_range(device):
  vx = rnd((3,))
  x = Tensor(vx, device=device)
  with pytest.raises(IndexError, match=allof(num(5), r"dim|axis", num(0), num(3))):
    x[5]
  still_works((vx, x))
  assert x[2].item() == pytest.approx(float(vx[2]))

def test_index_negative_out_of_range(device):
  x = Tensor(rnd((3,)), device=device)
  with pytest.raises(IndexError, match=allof(r"-4", num(3))):
    x[-4]
  assert x[-3].item() == pytest.approx(float(rnd((3,))[0]))

def test_index_second_dim_negative_out_of_range(device):
  vx = rnd((2, 3))
  x = Tensor(vx, device=device)
  with pytest.raises(IndexError, match=allof(r"-4", r"dim|axis", num(1), num(3))):
    x[:, -4]
  np.testing.assert_allclose(x[:, -3].numpy(), vx[:, -3])

def test_index_first_of_two_dims_out_of_range(device):
  x = Tensor(rnd((3, 4)), device=device)
  with pytest.raises(IndexError, match=allof(num(3), r"dim|axis", num(0))):
    x[3, 0]

def test_too_many_indices(device):
  vx = rnd((2, 3))
  x = Tensor(vx, device=device)
  with pytest.raises(IndexError, match=r"(?i)too many|indices|index"):
    x[0, 0, 0]
  assert x[1, 2].item() == pytest.approx(float(vx[1, 2]))

def test_two_ellipsis(device):
  x = Tensor(rnd((2, 3)), device=device)
  with pytest.raises(IndexError, match=r"(?i)ellipsis|\.\.\."):
    x[..., 0, ...]

def test_setitem_out_of_range(device):
  vx = rnd((3,))
  x = Tensor(vx, device=device)
  with pytest.raises(IndexError, match=allof(num(5), num(3))):
    x[5] = 1.0
  np.testing.assert_allclose(x.numpy(), vx)

def test_item_on_many_elements(device):
  x = Tensor(rnd((3,)), device=device)
  with pytest.raises((ValueError, RuntimeError), match=allof(r"item|scalar|element|one|numel|3")):
    x.item()

# ---------------------------------------------------------------- reductions: bad axis

@pytest.mark.parametrize("axis", [5, -4, (0, 7)], ids=["5", "-4", "tuple"])
def test_sum_invalid_axis(device, axis):
  x = Tensor(rnd((2, 3, 4)), device=device)
  bad = axis[1] if isinstance(axis, tuple) else axis
  with pytest.raises((IndexError, ValueError), match=allof(r"(?<!\d)" + re.escape(str(bad)) + r"(?!\d)", num(3))):
    x.sum(axis=axis)
  assert x.sum(axis=-3).shape == (3, 4)

RED = {
  "mean": lambda x: x.mean(axis=5), "max": lambda x: x.max(axis=5), "argmax": lambda x: x.argmax(axis=5),
  "softmax": lambda x: x.softmax(5), "cumsum": lambda x: x.cumsum(5),
}

@pytest.mark.parametrize("name", list(RED))
def test_reduction_invalid_axis(device, name):
  x = Tensor(rnd((2, 3, 4)), device=device)
  with pytest.raises((IndexError, ValueError), match=allof(num(5))):
    RED[name](x)

# ---------------------------------------------------------------- nn ops

def test_conv2d_channel_mismatch(device):
  x, w = Tensor(rnd((1, 3, 5, 5)), device=device), Tensor(rnd((4, 2, 3, 3)), device=device)
  with pytest.raises(ValueError, match=allof("conv", shp((1, 3, 5, 5)), shp((4, 2, 3, 3)))):
    x.conv2d(w)
  assert x.conv2d(Tensor(rnd((4, 3, 3, 3)), device=device)).shape == (1, 4, 3, 3)

def test_conv2d_groups_mismatch(device):
  x, w = Tensor(rnd((1, 4, 5, 5)), device=device), Tensor(rnd((4, 2, 3, 3)), device=device)
  with pytest.raises(ValueError, match=allof("conv", shp((1, 4, 5, 5)), shp((4, 2, 3, 3)))):
    x.conv2d(w, groups=3)

def test_conv2d_weight_rank_mismatch(device):
  x, w = Tensor(rnd((1, 3, 5, 5)), device=device), Tensor(rnd((4, 3, 3)), device=device)
  with pytest.raises(ValueError, match=allof("conv", shp((4, 3, 3)))):
    x.conv2d(w)

def test_gather_index_wrong_rank(device):
  x = Tensor(rnd((3, 4)), device=device)
  idx = Tensor(np.array([0, 1, 2], dtype=np.int32), device=device)
  with pytest.raises(ValueError, match=allof("gather", shp((3, 4)), shp((3,)))):
    x.gather(1, idx)
  np.testing.assert_allclose(x.gather(1, idx.reshape(3, 1)).numpy(), rnd((3, 4))[np.arange(3), [0, 1, 2]][:, None])

def test_gather_bad_dim(device):
  x = Tensor(rnd((3, 4)), device=device)
  idx = Tensor(np.zeros((3, 1), dtype=np.int32), device=device)
  with pytest.raises((IndexError, ValueError), match=allof(num(2))):
    x.gather(2, idx)

# ---------------------------------------------------------------- autograd misuse

def test_backward_non_scalar_without_gradient(device):
  vx = rnd((2, 3))
  x = Tensor(vx, device=device, requires_grad=True)
  y = x * 2
  with pytest.raises(RuntimeError, match=r"(?i)scalar|grad"):
    y.backward()
  # with an explicit gradient it works
  y.backward(gradient=Tensor(np.ones((2, 3), np.float32), device=device))
  np.testing.assert_allclose(x.grad.numpy(), np.full((2, 3), 2.0))

def test_backward_without_requires_grad(device):
  x = Tensor(rnd((3,)), device=device)
  with pytest.raises(RuntimeError, match=r"(?i)grad"):
    x.sum().backward()

def test_backward_gradient_wrong_shape(device):
  x = Tensor(rnd((2,)), device=device, requires_grad=True)
  with pytest.raises((ValueError, RuntimeError), match=allof(shp((2,)), shp((3,)))):
    (x * 2).backward(gradient=Tensor(np.ones(3, np.float32), device=device))

def test_gradient_non_scalar(device):
  x = Tensor(rnd((2, 3)), device=device, requires_grad=True)
  with pytest.raises((RuntimeError, ValueError), match=r"(?i)scalar|grad|shape"):
    (x * 2).gradient(x)

# ---------------------------------------------------------------- creation

@pytest.mark.parametrize("ragged", [[[1, 2], [3]], [[1.0, 2.0], [3.0, 4.0, 5.0]], [[[1]], [2]]], ids=["int", "float", "depth"])
def test_tensor_from_ragged_list(device, ragged):
  with pytest.raises(ValueError, match=r"(?i)ragged|inhomogeneous|shape|length|size|dimension|sequence|nested"):
    Tensor(ragged, device=device)
  np.testing.assert_array_equal(Tensor([[1, 2], [3, 4]], device=device).numpy(), [[1, 2], [3, 4]])

# ---------------------------------------------------------------- devices

def _available():
  return [d for d in Device.known() if Device.check(d)[0]]

def test_device_check_unknown_name():
  ok, reason = Device.check("NOT_A_REAL_DEVICE")
  assert not ok and isinstance(reason, str) and reason

@pytest.mark.parametrize("op", ["add", "matmul"])
def test_mixing_devices(op):
  avail = _available()
  if len(avail) < 2: pytest.skip(f"needs two devices, only available: {avail}")
  d0, d1 = avail[0], avail[1]
  va, vb = rnd((2, 2)), rnd((2, 2), 1)
  a, b = Tensor(va, device=d0), Tensor(vb, device=d1)
  fn = {"add": lambda: a + b, "matmul": lambda: a @ b}[op]
  with pytest.raises(RuntimeError, match=allof(re.escape(d0), re.escape(d1))):
    fn()
  # moving one side over fixes it
  np.testing.assert_allclose((a + b.to(d0)).numpy(), va + vb, rtol=1e-6)

# ---------------------------------------------------------------- movement arguments: torch refuses them, so must we
import torch
import torch.nn.functional as F

class _TW:   # the calls spelled differently in tinyweb and torch
  cat = staticmethod(lambda ts, dim=0: Tensor.cat(*ts, dim=dim))
  stack = staticmethod(lambda ts, dim=0: Tensor.stack(*ts, dim=dim))
  pad = staticmethod(lambda x, p, mode="constant": x.pad(p, mode=mode))
  ones = staticmethod(lambda *s, **kw: Tensor.ones(*s, **kw))
class _TO:
  cat = staticmethod(lambda ts, dim=0: torch.cat(ts, dim=dim))
  stack = staticmethod(lambda ts, dim=0: torch.stack(ts, dim=dim))
  pad = staticmethod(lambda x, p, mode="constant": F.pad(x, p, mode=mode))
  ones = staticmethod(lambda *s, **kw: torch.ones(*s))

MOVE_BAD = [  # id, input shape, call (the same on both sides, through _TW/_TO where spelled differently), tinyweb's exception, pattern
  ("expand_negative", (1, 3), lambda x, m: x.expand(-2, 3), ValueError, r"expand: invalid target shape \(-2, 3\)"),
  ("expand_minus1_new_dim", (1, 3), lambda x, m: x.expand(-1, -1, 3), ValueError, r"expand: invalid target shape \(-1, -1, 3\)"),
  ("expand_float", (1, 3), lambda x, m: x.expand(2.0, 3), TypeError, r"expand: a size must be an int, got float"),
  ("reshape_two_minus1", (2, 3), lambda x, m: x.reshape(-1, -1), ValueError, r"reshape: only one dimension can be -1"),
  ("reshape_negative", (2, 3), lambda x, m: x.reshape(-2, -3), ValueError, r"reshape: invalid shape \(-2, -3\)"),
  ("reshape_float", (2, 3), lambda x, m: x.reshape(2.0, 3), TypeError, r"reshape: a size must be an int, got float 2\.0"),
  ("reshape_bool", (1, 6), lambda x, m: x.reshape(True, 6), TypeError, r"reshape: a size must be an int, got bool"),
  ("reshape_zero_infer", (0, 3), lambda x, m: x.reshape(0, -1), ValueError, r"reshape: cannot reshape tensor of shape \(0, 3\)"),
  ("permute_duplicate", (2, 3), lambda x, m: x.permute(0, 0), ValueError, r"permute: order \(0, 0\) is not a permutation"),
  ("permute_out_of_range", (2, 3), lambda x, m: x.permute(0, 2), IndexError, r"permute: axis 2 is out of range"),
  ("permute_float", (2, 3), lambda x, m: x.permute(0.0, 1), TypeError, r"permute: axis must be an int"),
  ("flip_out_of_range", (2, 3), lambda x, m: x.flip(2), IndexError, r"flip: axis 2 is out of range"),
  ("flip_duplicate", (2, 3), lambda x, m: x.flip(0, 0), ValueError, r"flip: dims \(0, 0\) name a dimension more than once"),
  ("flip_float", (2, 3), lambda x, m: x.flip(0.0), TypeError, r"flip: axis must be an int"),
  ("flip_bool", (2, 3), lambda x, m: x.flip(True), TypeError, r"flip: axis must be an int, got bool"),
  ("squeeze_out_of_range", (2, 3), lambda x, m: x.squeeze(2), IndexError, r"squeeze: axis 2 is out of range"),
  ("unsqueeze_out_of_range", (2, 3), lambda x, m: x.unsqueeze(-4), IndexError, r"unsqueeze: axis -4 is out of range"),
  ("transpose_out_of_range", (2, 3), lambda x, m: x.transpose(0, 2), IndexError, r"transpose: axis 2 is out of range"),
  ("transpose_float", (2, 3), lambda x, m: x.transpose(0.0, 1), TypeError, r"transpose: axis must be an int"),
  ("flatten_start_after_end", (2, 3, 4), lambda x, m: x.flatten(2, 1), ValueError, r"flatten: start_dim 2 comes after end_dim 1"),
  ("unflatten_wrong_product", (2, 3), lambda x, m: x.unflatten(1, (2, 2)), ValueError, r"unflatten: sizes \(2, 2\) do not multiply to the size 3"),
  ("unflatten_two_minus1", (2, 3), lambda x, m: x.unflatten(1, (-1, -1)), ValueError, r"unflatten: sizes \(-1, -1\)"),
  ("repeat_fewer", (2, 3), lambda x, m: x.repeat(2), ValueError, r"repeat: need at least 2 repeat counts"),
  ("repeat_negative", (2, 3), lambda x, m: x.repeat(-1, 2), ValueError, r"repeat: counts \(-1, 2\) for shape \(2, 3\) give a negative size \(-2, 6\)"),
  ("repeat_float", (2, 3), lambda x, m: x.repeat(2.0, 1), TypeError, r"repeat: a repeat count must be an int"),
  ("pad_odd", (2, 3), lambda x, m: m.pad(x, (1,)), ValueError, r"pad: flat padding \(1,\) must have an even length"),
  ("pad_too_long", (2, 3), lambda x, m: m.pad(x, (1, 1, 1, 1, 1, 1)), ValueError, r"pad: flat padding"),
  ("pad_crops_too_much", (2, 3), lambda x, m: m.pad(x, (-2, -2)), ValueError, r"pad: padding \(-2, -2\) crops more than the 3 elements of dimension 1"),
  ("pad_crops_past_the_start", (2, 3), lambda x, m: m.pad(x, (-4, 0)), ValueError, r"pad: padding \(-4, 0\) crops more"),
  ("pad_float", (2, 3), lambda x, m: m.pad(x, (1.0, 1)), TypeError, r"pad: a padding amount must be an int, got float"),
  ("pad_reflect_too_wide", (2, 3), lambda x, m: m.pad(x, (3, 3), mode="reflect"), ValueError, r"pad: reflect padding \(3, 3\)"),
  ("split_zero", (2, 3), lambda x, m: x.split(0), ValueError, r"split: size must be positive"),
  ("split_negative", (2, 3), lambda x, m: x.split(-1), ValueError, r"split: size must be positive"),
  ("split_negative_sizes", (2, 3), lambda x, m: x.split([1, -1, 3], 1), ValueError, r"split: sizes must be non-negative, got \(1, -1, 3\)"),
  ("split_float_sizes", (2, 3), lambda x, m: x.split([1.0, 2], 1), TypeError, r"split: a size must be an int"),
  ("split_float", (2, 3), lambda x, m: x.split(2.0, 1), TypeError, r"split: the split size must be an int"),
  ("chunk_zero", (2, 3), lambda x, m: x.chunk(0), ValueError, r"chunk: number of chunks must be positive"),
  ("chunk_float", (2, 3), lambda x, m: x.chunk(2.0), TypeError, r"chunk: chunks must be an int"),
  ("cat_sizes", (2, 3), lambda x, m: m.cat([x, m.ones(2, 4)]), ValueError, r"cat: shapes \[\(2, 3\), \(2, 4\)\] must match"),
  ("cat_rank", (2, 3), lambda x, m: m.cat([x, m.ones(2, 3, 1)]), ValueError, r"cat: shapes \[\(2, 3\), \(2, 3, 1\)\]"),
  ("cat_dim", (2, 3), lambda x, m: m.cat([x, x], dim=2), IndexError, r"cat: axis 2 is out of range"),
  ("cat_not_a_tensor", (2, 3), lambda x, m: m.cat([x, 5]), TypeError, r"cat: expected Tensors, got int"),
  ("stack_shapes", (2, 3), lambda x, m: m.stack([x, m.ones(3, 2)]), ValueError, r"stack: all tensors must have the same shape"),
  ("stack_dim", (2, 3), lambda x, m: m.stack([x, x], dim=3), IndexError, r"stack: axis 3 is out of range"),
  ("stack_not_a_tensor", (2, 3), lambda x, m: m.stack([x, [1.0]]), TypeError, r"stack: expected Tensors, got list"),
]

@pytest.mark.parametrize("name,shape,fn,exc,pat", MOVE_BAD, ids=[c[0] for c in MOVE_BAD])
def test_movement_bad_arguments_raise_like_torch(device, name, shape, fn, exc, pat):
  with pytest.raises(Exception):   # torch refuses it too
    fn(torch.ones(shape), _TO)
  vx = rnd(shape)
  x = Tensor(vx, device=device)
  with pytest.raises(exc, match=pat): fn(x, _TW)
  still_works((vx, x))

def test_shrink_bad_ranges(device):
  x = Tensor(rnd((2, 3)), device=device)
  for arg, exc, pat in [(((0, 1), (2, 1)), ValueError, r"shrink: range \(2, 1\) is invalid for a dimension of size 3"),
                        (((0, 1), (0, 1.5)), TypeError, r"shrink: a \(start, end\) bound must be an int, got float"),
                        (((0, 1), (0, 1, 2)), ValueError, r"shrink: expected a \(start, end\) pair of ints per dimension, got \(0, 1, 2\)"),
                        (((0, 1),), ValueError, r"shrink: need one \(start, end\) per dimension of \(2, 3\)")]:
    with pytest.raises(exc, match=pat): x.shrink(arg)
  with pytest.raises(ValueError, match=r"pad: expected a \(before, after\) pair of ints per dimension, got \(1,\)"): x.pad(((1, 1), (1,)))

# ---------------------------------------------------------------- indexing: what is not an index

def test_index_bad_types_raise_index_error(device):
  vx = rnd((2, 3))
  x = Tensor(vx, device=device)
  for idx, pat in [(1.0, "unsupported index type float"), (np.float64(1.0), "unsupported index type float64"), ("a", "unsupported index type str"),
                   ([0.5], "list and array indices must hold ints.*got float 0.5"), ([0, None], "got NoneType"),
                   ([True, 0], "got bool True"), (np.array([0.5, 1.0]), "got float 0.5"),
                   (Tensor([0.0], device=device), "tensors used as indices must be integer or bool, got float32")]:
    with pytest.raises(IndexError, match=pat): x[idx]
    with pytest.raises(IndexError, match=pat): x[idx] = 1.0
  with pytest.raises(IndexError, match=r"single ellipsis"): x[..., ...]
  with pytest.raises(ValueError, match=r"slice step cannot be zero"): x[::0]
  with pytest.raises(IndexError, match=r"index 5 is out of bounds for dimension 1 with size 3"): x[0, 5]
  with pytest.raises(IndexError, match=r"index -4 is out of bounds for dimension 1 with size 3"): x[None, 1, True, -4]
  with pytest.raises(IndexError, match=r"index 5 is out of bounds for dimension 1 with size 3"): x[0, [5]]
  with pytest.raises(IndexError, match=r"index -3 is out of bounds for dimension 0 with size 2"): x[None, [0, -3]]
  with pytest.raises(OverflowError, match=r"setitem: 1e\+40 is out of range for int32"): Tensor([1, 2], device=device)[0] = 1e40
  np.testing.assert_array_equal(x.numpy(), vx)

def test_gather_scatter_take_integer_indices(device):
  x = Tensor(rnd((2, 3)), device=device)
  for bad in (Tensor([[True, False, True]], device=device), Tensor([[0.0, 1.0, 0.0]], device=device), [[0, 1, 0]]):
    with pytest.raises(TypeError, match=r"gather: index must be an integer Tensor"): x.gather(0, bad)
    with pytest.raises(TypeError, match=r"scatter: index must be an integer Tensor"): x.scatter(0, bad, 1.0)

def test_one_hot_num_classes(device):
  v = np.array([0, 2, 1, 2], np.int32)
  x = Tensor(v, device=device)
  ref = torch.nn.functional.one_hot(torch.tensor(v, dtype=torch.long))   # num_classes=-1: the largest value + 1
  np.testing.assert_array_equal(x.one_hot().numpy(), ref.numpy())
  np.testing.assert_array_equal(x.one_hot(-1).numpy(), ref.numpy())
  for args, tv, exc, pat in [((-2,), v, ValueError, r"one_hot: num_classes must be -1 \(infer it\) or >= 0, got -2"),
                             ((0,), v, ValueError, r"one_hot: num_classes=0 leaves no class for the 4 values"),
                             ((3.0,), v, TypeError, r"one_hot: num_classes must be an int, got float"),
                             ((), np.array([0, -1], np.int32), ValueError, r"one_hot: class values must be non-negative, got -1"),
                             ((), np.zeros(0, np.int32), ValueError, r"one_hot: cannot infer num_classes from an empty tensor")]:
    with pytest.raises(Exception): torch.nn.functional.one_hot(torch.tensor(tv, dtype=torch.long), *args)
    with pytest.raises(exc, match=pat): Tensor(tv, device=device).one_hot(*args)
  # with num_classes given nothing is read: a value outside [0, num_classes) is a row of zeros (documented; torch raises)
  np.testing.assert_array_equal(Tensor([0, -1, 3], device=device).one_hot(3).numpy(), [[1, 0, 0], [0, 0, 0], [0, 0, 0]])
  assert Tensor(np.zeros(0, np.int32), device=device).one_hot(3).shape == (0, 3)

def test_index_shapes_that_do_not_broadcast(device):
  x = Tensor(rnd((2, 3)), device=device)
  for idx in [(False, [0, 1]), ([0, 1], [[0, 1, 2]] * 3)]:
    with pytest.raises(IndexError): torch.ones(2, 3)[idx]
    with pytest.raises(IndexError, match=r"index: shapes .* cannot be broadcast together"): x[idx]

def test_hardtanh_bounds_and_triu_diagonal_type(device):
  x = Tensor(rnd((3, 3)), device=device)
  with pytest.raises(ValueError): torch.nn.functional.hardtanh(torch.ones(2), 1.0, -1.0)
  with pytest.raises(ValueError, match=r"hardtanh: min_val \(1.0\) must not be greater than max_val \(-1.0\)"): x.hardtanh(1.0, -1.0)
  with pytest.raises(TypeError): torch.ones(3, 3).triu(1.5)
  for fn in ("triu", "tril"):
    with pytest.raises(TypeError, match=fr"{fn}: diagonal must be an int, got 1.5 \(float\)"): getattr(x, fn)(1.5)
  np.testing.assert_allclose(x.hardtanh(0.5, 0.5).numpy(), torch.nn.functional.hardtanh(torch.tensor(rnd((3, 3))), 0.5, 0.5).numpy())

def test_bce_logits_pos_weight_cannot_require_grad(device):
  x, y, pw = (Tensor(rnd((4,), s), device=device) for s in (0, 1, 2))
  with pytest.raises(RuntimeError): torch.nn.functional.binary_cross_entropy_with_logits(
    torch.ones(4), torch.ones(4), pos_weight=torch.ones(4, requires_grad=True))
  with pytest.raises(RuntimeError, match=r"binary_crossentropy_logits: pos_weight cannot require a gradient"):
    x.binary_crossentropy_logits(y, pos_weight=Tensor(rnd((4,), 2), device=device, requires_grad=True))
  still_works((rnd((4,), 2), pw))

def test_a_setting_of_the_wrong_type_in_the_environment_is_named():
  import subprocess, sys, os
  out = subprocess.run([sys.executable, "-c", "import tinyweb"], capture_output=True, text=True,
                       env={**os.environ, "DEBUG": "yes"}, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  assert out.returncode != 0 and "environment variable DEBUG='yes': expected int" in out.stderr, out.stderr[-2000:]
