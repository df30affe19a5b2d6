"""Tensor-indexed reads (x[idx], gather, Embedding, a user's own one-hot sum) are built as sums over one-hot positions;
the code generator turns each into a read of the selected positions (codegen/lowering.select_reduce): one kernel that
reads the chosen rows, not a loop over the whole table. Values and gradients against torch on every device; the kernel's
shape checked on the lowered program."""
import numpy as np
import pytest
import torch
from tinyweb import Tensor, Device, dtypes, nn
from tinyweb.uop import Ops
from tinyweb.schedule import create_schedule
from tinyweb.codegen.lower import lower
from tests.helpers import refused

def lowered(t: Tensor, device: str):
  """The lowered program of the last kernel that realizes t."""
  items, _, _ = create_schedule([t.uop])
  return lower(items[-1].ast, Device[device].renderer)

def lazy_index(x: Tensor, *idx) -> Tensor:
  """x[idx] as the graph __getitem__ builds (a small read of realized tensors is computed at once instead: see
  test_small_reads_of_realized_tensors_replay_one_kernel)."""
  return x._getitem(idx)

def loop_sizes(prog) -> list[int]: return [u.src[0].arg for u in prog.uops if u.op is Ops.RANGE]

def test_row_gather_reads_only_the_selected_rows(device):
  rng = np.random.default_rng(0)
  table = rng.standard_normal((3000, 24)).astype(np.float32)
  idx = rng.integers(-3000, 3000, 40)
  X, I = Tensor(table, device=device).realize(), Tensor(idx.astype(np.int32), device=device).realize()
  prog = lowered(lazy_index(X, I), device)
  assert not any(u.op is Ops.DEFINE_ACC for u in prog.uops), "a gather kept its accumulator loop"
  assert all(n < 3000 for n in loop_sizes(prog)), f"a loop spans the table's rows: {loop_sizes(prog)}"
  np.testing.assert_array_equal(X[I].numpy(), table[idx])
  # the bytes it moves (DEBUG's GB/s, and the CPU's choice to split a kernel across cores) are the rows it reads and
  # writes and the indices, not the whole table
  assert prog.mem_estimate == 2 * 40 * 24 * 4 + 40 * 4, prog.mem_estimate

def test_a_gather_is_one_kernel_and_a_computed_table_is_not_stored(device):
  # the index's wrap (i < 0 -> i + n) is computed where the read uses it, not stored first; an elementwise table
  # (W * 2 + 1) is computed at the selected rows only, not written out whole before the read
  rng = np.random.default_rng(1)
  table, idx = rng.standard_normal((5000, 16)).astype(np.float32), rng.integers(-5000, 5000, 12)
  W, I = Tensor(table, device=device).realize(), Tensor(idx.astype(np.int32), device=device).realize()
  for t, want in [(lazy_index(W, I), table[idx]), ((W * 2 + 1)[I], table[idx] * 2 + 1)]:
    items, _, _ = create_schedule([t.uop])
    assert [it.bufs[0].size for it in items] == [12 * 16], f"kernels writing {[it.bufs[0].size for it in items]} elements"
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6)

def test_small_reads_of_realized_tensors_replay_one_kernel(device):
  """x[idx] of a realized table and index, with a small result, is computed at once by launching the kernel the first
  such read built (no graph, no schedule: the Python of a lazy realize is several times a 128-row gather). Values as
  numpy's, the table's current contents, out-of-range rows 0 as the lazy read gives, inside TinyJit too."""
  from tinyweb import TinyJit
  from tinyweb.helpers import GlobalCounters
  from tinyweb.schedule import is_contiguous_buffer
  rng = np.random.default_rng(6)
  table = rng.standard_normal((700, 12)).astype(np.float32)
  X = Tensor(table, device=device).realize()
  for dt in [dtypes.int32, dtypes.int64, dtypes.uint8]:
    if refused(device, dt): continue
    for k in range(3):
      idx = rng.integers(-255 if dt != dtypes.uint8 else 0, 256, (5, 3))
      I = Tensor(idx.astype(dt.fmt if dt != dtypes.int64 else np.int64), dtype=dt, device=device).realize()
      before = GlobalCounters.kernel_count
      out = X[I]
      assert is_contiguous_buffer(out.uop) and GlobalCounters.kernel_count == before + 1, "the read was not computed at once"
      np.testing.assert_array_equal(out.numpy(), table[idx])
  X.assign(X * 2).realize()   # the replay reads what the table holds now
  I = Tensor(np.array([3, -1, 700, -701], dtype=np.int32), device=device).realize()
  np.testing.assert_array_equal(X[I].numpy(), np.stack([table[3] * 2, table[-1] * 2, np.zeros(12), np.zeros(12)]))
  step = TinyJit(lambda i: (X[i] + 1).realize())
  for k in range(4):
    idx = rng.integers(0, 700, 9)
    np.testing.assert_array_equal(step(Tensor(idx.astype(np.int32), device=device).realize()).numpy(), table[idx] * 2 + 1)
  big = Tensor.zeros(12000, 12, device=device).contiguous().realize()[Tensor(np.zeros(12000, np.int32), device=device).realize()]
  assert not is_contiguous_buffer(big.uop), "a large read stays lazy (it fuses with what uses it)"

def test_two_indexed_dims_and_gather_dim(device):
  rng = np.random.default_rng(1)
  a = rng.standard_normal((50, 7, 30)).astype(np.float32)
  i0, i2 = rng.integers(0, 50, (4, 5)), rng.integers(-30, 30, (4, 5))
  A = Tensor(a, device=device)
  I0, I2 = Tensor(i0.astype(np.int32), device=device), Tensor(i2.astype(np.int32), device=device)
  prog = lowered(A[I0, :, I2], device)
  assert all(n < 30 for n in loop_sizes(prog)), loop_sizes(prog)
  np.testing.assert_array_equal(A[I0, :, I2].numpy(), a[i0, :, i2])
  g = rng.integers(0, 7, (50, 3, 30))
  G = Tensor(g.astype(np.int32), device=device)
  assert all(n < 7 or n in (50, 30) for n in loop_sizes(lowered(A.gather(1, G), device)))
  np.testing.assert_array_equal(A.gather(1, G).numpy(), torch.gather(torch.tensor(a), 1, torch.tensor(g)).numpy())

def test_gather_keeps_values_torch_keeps(device):
  """A selected -0.0, inf or NaN comes through as itself; the rows not selected do not leak into the result."""
  table = np.array([[-0.0, 1.0], [np.inf, -np.inf], [np.nan, 2.0], [5.0, np.nan]], dtype=np.float32)
  idx = np.array([0, 1, 2, 3, 0])
  got = Tensor(table, device=device)[Tensor(idx.astype(np.int32), device=device)].numpy()
  exp = torch.tensor(table)[torch.tensor(idx)].numpy()
  np.testing.assert_array_equal(got, exp)
  assert np.signbit(got[0, 0]) and np.signbit(got[4, 0])

def test_integer_and_half_tables(device):
  rng = np.random.default_rng(2)
  idx = rng.integers(0, 100, 17)
  for dt, npdt in ((dtypes.int32, np.int32), (dtypes.uint8, np.uint8), (dtypes.float16, np.float16), (dtypes.bool, np.bool_)):
    if refused(device, dt): continue
    table = (rng.integers(0, 2, (100, 9)) if dt == dtypes.bool else rng.integers(0, 200, (100, 9))).astype(npdt)
    got = Tensor(table, device=device)[Tensor(idx.astype(np.int32), device=device)]
    assert got.dtype == dt
    np.testing.assert_array_equal(got.numpy(), table[idx])

def test_embedding_forward_and_backward_match_torch(device):
  torch.manual_seed(0)
  ref = torch.nn.Embedding(300, 16)
  emb = nn.Embedding(300, 16, device=device)
  emb.weight = Tensor(ref.weight.detach().numpy(), device=device, requires_grad=True)
  idx = np.random.default_rng(3).integers(0, 300, (6, 11))
  out = emb(Tensor(idx.astype(np.int32), device=device))
  tout = ref(torch.tensor(idx))
  np.testing.assert_array_equal(out.numpy(), tout.detach().numpy())
  w = torch.randn(6, 11, 16).numpy()
  (out * Tensor(w, device=device)).sum().backward()
  (tout * torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(emb.weight.grad.numpy(), ref.weight.grad.numpy(), rtol=1e-5, atol=1e-6)
  assert all(n < 300 for n in loop_sizes(lowered(emb(Tensor(idx.astype(np.int32), device=device)), device)))

def test_index_gradient_adds_repeated_positions(device):
  a = np.random.default_rng(4).standard_normal((40, 3)).astype(np.float32)
  idx = np.array([5, 5, -1, 0, 5, 39])
  A = Tensor(a, device=device, requires_grad=True)
  ta = torch.tensor(a, requires_grad=True)
  w = np.random.default_rng(5).standard_normal((6, 3)).astype(np.float32)
  (A[Tensor(idx.astype(np.int32), device=device)] * Tensor(w, device=device)).sum().backward()
  (ta[torch.tensor(idx)] * torch.tensor(w)).sum().backward()
  np.testing.assert_allclose(A.grad.numpy(), ta.grad.numpy(), rtol=1e-6)

def test_a_users_one_hot_sum_is_a_read_and_out_of_range_gives_zero(device):
  """tinygrad code writes its own: (idx[:, None] == arange(n)).where(table, 0).sum(1). Positions outside [0, n) select
  nothing: 0, as the sum over no matching position is."""
  table = np.arange(20 * 4, dtype=np.float32).reshape(20, 4)
  idx = np.array([3, -1, 20, 19, 7])
  T, I = Tensor(table, device=device), Tensor(idx.astype(np.int32), device=device)
  out = (I.reshape(5, 1, 1) == Tensor.arange(20, device=device).reshape(1, 20, 1)).where(T.reshape(1, 20, 4), 0).sum(1)
  assert all(n < 20 for n in loop_sizes(lowered(out, device)))
  exp = np.where(((idx >= 0) & (idx < 20))[:, None], table[np.clip(idx, 0, 19)], 0)
  np.testing.assert_array_equal(out.numpy(), exp)

def test_a_sum_that_is_not_a_selection_still_loops(device):
  """where(idx <= k, x, 0) summed over k is a prefix sum, not a selection: every k counts."""
  x = np.arange(1, 11, dtype=np.float32)
  idx = np.array([0, 4, 9])
  X, I = Tensor(x, device=device), Tensor(idx.astype(np.int32), device=device)
  out = (I.reshape(3, 1) <= Tensor.arange(10, device=device).reshape(1, 10)).where(X.reshape(1, 10), 0).sum(1)
  np.testing.assert_array_equal(out.numpy(), np.array([x[i:].sum() for i in idx], dtype=np.float32))
