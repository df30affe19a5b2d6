"""tests/kernel_corpus.py: records kernel ASTs as a suite builds them, renders them again, and tells equal renders from
different ones."""
import pickle
import numpy as np
from tinyweb import Tensor, engine
import kernel_corpus

def test_recorded_kernels_render_as_the_engine_built_them_and_a_changed_source_is_reported(tmp_path, capsys):
  dump = str(tmp_path / "dump")
  unwrapped, observers = engine.build_kernel, list(engine.kernel_observers)
  rec = kernel_corpus.RecordingPlugin(dump)
  rec.pytest_configure(None)   # wraps engine.build_kernel (and observes the CUDA check's kernels) until restored below
  recording, built = engine.build_kernel, {}
  def spy(device, ast):   # what the engine built, kernel name replaced as the corpus does
    prog, src = recording(device, ast)
    built[ast] = src.replace(prog.name, "KERNEL")
    return prog, src
  try:
    engine.build_kernel = spy
    x = np.arange(12, dtype=np.float32).reshape(3, 4) + 0.25
    got = ((Tensor(x, device="CPU") * 3.0625).exp2().sum(1) + 7.53125).numpy()   # (constants no other test uses: a new kernel)
    np.testing.assert_allclose(got, np.exp2(x.astype(np.float64) * 3.0625).sum(1) + 7.53125, rtol=1e-5)
  finally:
    engine.build_kernel, engine.kernel_observers[:] = unwrapped, observers
    rec.pytest_unconfigure(None)
  records = kernel_corpus.load_records(dump)
  assert built and {k[1] for k in records if k[0] == "CPU"} == set(built)   # every kernel the engine built, recorded once
  out_a, out_b = str(tmp_path / "a"), str(tmp_path / "b")
  kernel_corpus.render(dump, out_a, ["CPU", "PYTHON"])
  with open(out_a, "rb") as f: rendered = pickle.load(f)
  assert sorted(s for t, s in rendered if t == "CPU") == sorted(built.values())   # the same sources as the engine built
  assert kernel_corpus.compare(out_a, out_a, show=0) == 0
  rendered[0] = (rendered[0][0], rendered[0][1] + "\n// changed")
  with open(out_b, "wb") as f: pickle.dump(rendered, f)
  capsys.readouterr()
  assert kernel_corpus.compare(out_a, out_b, show=1) == 1
  report = capsys.readouterr().out
  assert f"{len(rendered) - 1} of {len(rendered)} kernel sources identical" in report and "+// changed" in report
