"""`await t.data_async()` / `await t.tolist_async()` (for code that must not block, e.g. the browser without JSPI) give
what data() / tolist() give, on every device (natively they fall back to the blocking read)."""
import asyncio
import numpy as np
from tinyweb import Tensor, dtypes

def test_async_reads_match_the_blocking_ones(device):
  a = np.arange(12, dtype=np.float32).reshape(3, 4) - 5.5
  t = (Tensor(a, device=device) * 2).relu()
  want = np.maximum(a * 2, 0)
  assert asyncio.run(t.tolist_async()) == want.tolist()
  mv = asyncio.run(t.data_async())
  assert mv.shape == (3, 4) and mv.format == "f" and mv.tolist() == want.tolist()
  b = Tensor([True, False, True], device=device)
  assert asyncio.run(b.tolist_async()) == [True, False, True]
  assert asyncio.run(Tensor.zeros(0, 3, device=device).tolist_async()) == []
  assert asyncio.run(Tensor(7, device=device, dtype=dtypes.int32).tolist_async()) == 7
