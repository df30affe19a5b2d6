"""tinygrad code runs unmodified: tinygrad 0.14's public names (Tensor, nn, nn.optim, nn.state, nn.datasets, the top
level, the helpers scripts import) exist in tinyweb with tinygrad's parameter names, except the documented differences
(README, "Differences from tinygrad"); and what was added for them works: helpers (progress bars, timers, colors, fetch,
cpu_profile), optimizers (LARS, Muon, OptimizerGroup, device=), state (archives, TensorIO), datasets (mnist(fashion=True)
on the real Fashion-MNIST, cifar), Device[name] = class, JIT=0, LayerNorm2d, the multi-device and hardware stubs."""
import ast, contextlib, gzip, hashlib, importlib, inspect, io, json, os, pathlib, re, struct, subprocess, sys, tarfile, textwrap, zipfile
import numpy as np
import pytest
import torch
import tinyweb
from tinyweb import Tensor, TinyJit, Context, Device, dtypes, nn
from tinyweb.nn import optim, state, datasets
from tinyweb import helpers

REPO = pathlib.Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------------------------------------------------
# the name test

# names tinyweb does not have, and why (the README's "Differences from tinygrad" names each of them)
DOCUMENTED_DIFFERENCES = {
  "Variable": "symbolic shape variables: tinyweb's shapes are plain ints",
  **{f"Tensor.{n}": "a UOp-level internal of tinygrad's Tensor" for n in (
    "alu", "call", "callify", "custom_kernel", "linear_with_vars", "schedule_linear", "invalids", "ufix", "usum", "uprod",
    "as_param", "is_param", "is_param_", "max_shape", "max_numel")},
}
# names tinyweb has that raise NotImplementedError saying why (also in the README)
RAISING = {"Tensor.image_dot": "Qualcomm image textures", "Tensor.image_conv2d": "Qualcomm image textures",
           "Tensor.decode_hevc_frame": "NVIDIA's video decoder", "nn.state.fs_store": "tinyfs", "nn.state.fs_load": "tinyfs",
           "Tensor.shard": "several devices (issue 18)", "Tensor.shard_": "several devices (issue 18)",
           "Tensor.shard_like": "tinyweb tensors are on one device", "Tensor.to_": "several devices (issue 18)"}
# shared names whose signatures differ where calls written for tinygrad still work
SIGNATURE_DIFFERENCES = {"nn.ConvTranspose1d": "PyTorch's order: groups, bias, dilation (by keyword they agree)",
                         "nn.ConvTranspose2d": "PyTorch's order: groups, bias, dilation (by keyword they agree)",
                         **{f"Tensor.{n}": "tinygrad's **kwargs go to Tensor(): tinyweb names them (device, requires_grad)"
                            for n in ("normal", "randint", "randn", "uniform")},
                         "Tensor.contiguous": "tinygrad's **kwargs are arguments of its UOp graph; tinyweb's takes none",
                         "TinyJit": "tinygrad's **kwargs go to _TinyJit: tinyweb names the one users pass (prune)",
                         "UOp": "tinyweb's IR node has no tag (tinygrad's bookkeeping for its rewrites); op, dtype, src, arg agree"}
# shared names whose signatures do not match tinygrad's yet, and calls written for tinygrad that fail (the README says so)
SIGNATURE_GAPS: dict[str, str] = {}
# what scripts import from tinygrad.helpers
HELPERS = ["getenv", "colored", "trange", "tqdm", "partition", "Timing", "Profiling", "fetch", "cpu_profile", "Context",
           "GlobalCounters", "DEBUG", "JIT", "prod", "flatten", "dedup", "all_same", "argsort", "round_up", "ceildiv", "make_tuple"]
MODULES = ["nn", "nn.optim", "nn.state", "nn.datasets"]

def _tinygrad():
  return pytest.importorskip("tinygrad", reason="tinygrad is not installed (scripts/setup.sh installs tinygrad==0.14.0): "
                                                "the name test compares tinyweb with its API")

def _defined(module) -> list[str]:
  """The public names a module defines itself (def, class, assignment), not the ones it imports."""
  out = []
  for node in ast.parse(inspect.getsource(module)).body:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)): out.append(node.name)
    elif isinstance(node, ast.Assign): out += [t.id for t in node.targets if isinstance(t, ast.Name)]
  return [n for n in out if not n.startswith("_")]

def _public_names():
  """{qualified name: (tinygrad object, tinyweb owner object, attribute)} for every name the test covers."""
  tg = _tinygrad()
  import tinygrad.nn, tinygrad.helpers
  out = {f"Tensor.{n}": (getattr(tg.Tensor, n), Tensor, n) for n in dir(tg.Tensor) if not n.startswith("_")}
  for m in MODULES:
    tgm, twm = importlib.import_module(f"tinygrad.{m}"), importlib.import_module(f"tinyweb.{m}")
    names = _defined(tgm) + (["optim", "state", "datasets"] if m == "nn" else [])
    out.update({f"{m}.{n}": (getattr(tgm, n), twm, n) for n in names})
  for n in HELPERS:
    assert hasattr(tinygrad.helpers, n), f"HELPERS names {n}, which tinygrad.helpers lacks"
    out[f"helpers.{n}"] = (getattr(tinygrad.helpers, n), helpers, n)
  out.update({n: (v, tinyweb, n) for n, v in vars(tg).items() if not n.startswith("_") and not inspect.ismodule(v)})
  out["nn"] = (tg.nn, tinyweb, "nn")
  return out

def _readme_differences() -> str:
  text = (REPO / "README.md").read_text()
  start = text.index("### Differences from tinygrad")
  return text[start:text.index("\n## ", start)]

def test_every_tinygrad_name_exists_or_is_documented():
  names = _public_names()
  missing = sorted(q for q, (_, owner, n) in names.items() if not hasattr(owner, n) and q not in DOCUMENTED_DIFFERENCES)
  assert not missing, f"{len(missing)} tinygrad names are missing in tinyweb and not documented as differences: {missing}"

def test_documented_differences_are_true_and_in_the_readme():
  names, readme = _public_names(), _readme_differences()
  for q in DOCUMENTED_DIFFERENCES:
    assert q in names, f"{q} is documented as a difference but tinygrad 0.14 has no such name"
    _, owner, n = names[q]
    assert not hasattr(owner, n), f"tinyweb has {q} now: take it out of DOCUMENTED_DIFFERENCES and the README"
  for q in [*DOCUMENTED_DIFFERENCES, *RAISING, *SIGNATURE_DIFFERENCES, *SIGNATURE_GAPS]:
    assert f"`{q.split('.')[-1]}`" in readme or f"`{q}`" in readme, f"the README's Differences from tinygrad does not mention {q}"

def _params(f):
  if inspect.isclass(f): f = f.__init__
  try: return [p for p in inspect.signature(f).parameters.values() if p.name != "self"]
  except (TypeError, ValueError): return None   # (builtins without a signature)

def _signature_problems(tg, tw) -> list[str]:
  """What a call written for tg would do wrong with tw: a parameter name tw lacks (a keyword call fails), one at another
  position (a positional call passes it to another parameter), *args or **kwargs tw does not take."""
  a, b = _params(tg), _params(tw)
  if a is None or b is None: return []
  names = {p.name: p for p in b}
  problems = []
  for i, p in enumerate(a):
    if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
      if not any(q.kind == p.kind for q in b): problems.append(f"takes no {'*' if p.kind == p.VAR_POSITIONAL else '**'}{p.name}")
    elif p.name not in names and not any(q.kind == q.VAR_KEYWORD for q in b): problems.append(f"has no parameter {p.name!r}")
    elif p.kind == p.POSITIONAL_OR_KEYWORD and (i >= len(b) or b[i].name != p.name):
      problems.append(f"has {p.name!r} at another position than {i}")
  return problems

def test_signatures_match_tinygrads():
  # (every name the test covers: Tensor's, nn's, the helpers and the top level's, e.g. function, fetch, getenv, Context)
  names = _public_names()
  problems = {q: pr for q, (tg, owner, n) in names.items() if hasattr(owner, n) and q not in SIGNATURE_DIFFERENCES
              and q not in SIGNATURE_GAPS and (pr := _signature_problems(tg, getattr(owner, n)))}
  assert not problems, f"keyword names or positions that differ from tinygrad's: {problems}"
  for q in [*SIGNATURE_DIFFERENCES, *SIGNATURE_GAPS]:   # (still true: the entry is not stale)
    tg, owner, n = names[q]
    assert _signature_problems(tg, getattr(owner, n)), f"{q}'s signature matches tinygrad's now: take it out of SIGNATURE_DIFFERENCES / SIGNATURE_GAPS"

def test_nn_submodules_load_with_nn():
  code = "from tinyweb import nn\nprint(nn.state.get_parameters, nn.datasets.mnist, nn.datasets.cifar, nn.optim.Adam)"
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
  assert out.returncode == 0, out.stderr
  assert "function get_parameters" in out.stdout and "function mnist" in out.stdout

# ---------------------------------------------------------------------------------------------------------------------
# helpers

def test_colored(monkeypatch):
  assert helpers.colored("x", "red") == "\x1b[31mx\x1b[0m"        # ANSI: 30 + color index
  assert helpers.colored("x", "RED") == "\x1b[91mx\x1b[0m"        # upper case: bright (+60)
  assert helpers.colored("x", "blue", background=True) == "\x1b[44mx\x1b[0m"
  assert helpers.colored("x", None) == "x"
  with pytest.raises(ValueError, match="colored: unknown color 'purple'; valid: black, red"): helpers.colored("x", "purple")
  with contextlib.suppress(ImportError):
    from tinygrad.helpers import colored
    for c in ("black", "green", "WHITE", "cyan"): assert helpers.colored("s", c) == colored("s", c) and helpers.colored("s", c, True) == colored("s", c, True)
  monkeypatch.setenv("NO_COLOR", "true")   # (no-color.org: any value)
  assert helpers.colored("x", "red") == "x"

def test_small_helpers():
  assert helpers.partition([3, 1, 4, 1, 5, 9, 2, 6], lambda x: x % 2) == ([3, 1, 1, 5, 9], [4, 2, 6])
  assert helpers.partition([], bool) == ([], [])
  assert helpers.make_tuple(3, 2) == (3, 3) and helpers.make_tuple([1, 2], 2) == (1, 2)
  assert helpers.prod(x=[2, 3, 4]) == 24 and helpers.flatten(l=[[1], [2, 3]]) == [1, 2, 3] and helpers.dedup(x=[1, 2, 1]) == [1, 2]
  assert helpers.round_up(num=10, amt=4) == 12 and helpers.ceildiv(num=10, amt=4) == 3 and helpers.argsort(x=[3, 1, 2]) == [1, 2, 0]

def test_older_tinygrad_names():
  # tinygrad's docs/quickstart.md and examples/mnist_gan.py still call leaky_relu by its older name
  x = np.array([-2.0, -0.5, 0.0, 1.5], np.float32)
  np.testing.assert_allclose(Tensor(x).leakyrelu(0.2).numpy(), torch.nn.functional.leaky_relu(torch.tensor(x), 0.2).numpy())

@pytest.mark.parametrize("device", ["CPU", "WEBGPU"])
def test_clone_to_a_device_and_realize_without_stats(device):
  from tinyweb.helpers import GlobalCounters
  a = Tensor([1.0, 2.0, 3.0])
  c = a.clone(device)
  assert c.device == device and c.tolist() == [1.0, 2.0, 3.0]
  GlobalCounters.reset()
  (a * 2).realize(do_update_stats=False)
  assert GlobalCounters.kernel_count == 0
  (a * 3).realize()
  assert GlobalCounters.kernel_count == 1

def test_sdpa_takes_enable_gqa_in_tinygrads_position():
  q, k, v = (np.random.default_rng(i).standard_normal((1, 4, 3, 2), np.float32) for i in range(3))
  kv = [torch.tensor(x[:, :2]) for x in (k, v)]
  ref = torch.nn.functional.scaled_dot_product_attention(torch.tensor(q), *kv, None, 0.0, False, enable_gqa=True)
  got = Tensor(q).scaled_dot_product_attention(Tensor(k[:, :2]), Tensor(v[:, :2]), None, 0.0, False, True)   # (positional, as tinygrad's)
  np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)

def test_timing(capsys):
  with helpers.Timing("load: ", on_exit=lambda ns: f" ({ns} ns)") as t: sum(range(1000))
  out = capsys.readouterr().out
  assert re.fullmatch(rf"load: +\d+\.\d\d ms \({t.et} ns\)\n", out) and t.et > 0
  with helpers.Timing("quiet", enabled=False): pass
  @helpers.Timing("fn ")
  def f(): return 7
  assert f() == 7 and re.fullmatch(r"fn +\d+\.\d\d ms\n", capsys.readouterr().out)

def _busy_function_for_profiling(): return sum(i * i for i in range(20000))

def test_profiling(tmp_path, capsys):
  import pstats
  with helpers.Profiling(frac=1.0, fn=str(tmp_path / "p.prof")):
    for _ in range(3): _busy_function_for_profiling()
  out = capsys.readouterr().out
  line = next(ln for ln in out.splitlines() if "_busy_function_for_profiling" in ln)
  assert re.match(r"n: +3 +tm: +\d+\.\d\dms +tot: +\d+\.\d\dms", line)
  assert any(f[2] == "_busy_function_for_profiling" for f in pstats.Stats(str(tmp_path / "p.prof")).stats)
  with helpers.Profiling(enabled=False): _busy_function_for_profiling()
  assert capsys.readouterr().out == ""

def test_tqdm(capsys):
  assert list(helpers.tqdm(["a", "b", "c"], desc="letters")) == ["a", "b", "c"]
  err = capsys.readouterr().err
  assert err.endswith("\n") and "letters: 100%|" in err and "| 3/3 [" in err and "it/s]" in err
  assert list(helpers.trange(4)) == [0, 1, 2, 3] and "4/4" in capsys.readouterr().err
  with helpers.tqdm(total=26_421_856, unit="B", unit_scale=True) as bar:
    bar.set_description("download")
    bar.update(26_421_856)
  assert "download: 100%|" in (err := capsys.readouterr().err) and "26.4M/26.4M" in err and "B/s]" in err
  bar = helpers.tqdm(iter(range(5)), desc="no total")   # no len(): counts without a percentage
  assert sum(bar) == 10 and bar.n == 5 and re.search(r"no total: 5it \[00:00, .*it/s\]\n$", capsys.readouterr().err)
  assert list(helpers.tqdm(range(3), disable=None)) == [0, 1, 2] and capsys.readouterr().err == ""   # stderr is no terminal here
  helpers.tqdm.write("note")
  assert capsys.readouterr().err == "\r\x1b[Knote\n"
  with pytest.raises(TypeError, match="tqdm: made without an iterable"): list(helpers.tqdm(total=3, disable=True))

def test_cpu_profile_records_with_profile_on():
  before = len(helpers.cpu_events)
  with helpers.cpu_profile("off") as e: pass
  assert e.name == "off" and e.device == "TINY" and e.en >= e.st and len(helpers.cpu_events) == before   # PROFILE=0: not kept
  code = textwrap.dedent("""
    import time
    from tinyweb.helpers import cpu_profile, Context, cpu_events
    with cpu_profile("load weights", "DISK"): time.sleep(0.05)
    try:
      with cpu_profile("fails"): time.sleep(0.02); raise ValueError("x")
    except ValueError: pass
    with cpu_profile("hidden", display=False): pass
    with Context(PROFILE=0):
      with cpu_profile("not profiled"): pass
    print([e.name for e in cpu_events])
  """)
  path = REPO / "tests" / f".profile-{os.getpid()}.json"
  try:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300,
                         env={**os.environ, "PROFILE": "1", "PROFILE_PATH": str(path)})
    assert out.returncode == 0, out.stderr
    assert "['load weights', 'fails']" in out.stdout and f"PROFILE: trace written to {path}" in out.stderr
    events = {e["name"]: e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"}
    assert set(events) == {"load weights", "fails"}
    assert events["load weights"]["dur"] >= 50_000 and events["fails"]["dur"] >= 20_000   # microseconds
    threads = {e["args"]["name"]: e["tid"] for e in json.loads(path.read_text())["traceEvents"] if e["name"] == "thread_name"}
    assert threads.keys() == {"DISK", "TINY"} and events["load weights"]["tid"] == threads["DISK"]
  finally: path.unlink(missing_ok=True)

@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("TINYWEB_CACHE_DIR", str(tmp_path / "cache"))
  return tmp_path / "cache" / "downloads"

def test_fetch(tmp_path, cache, capsys):
  src = tmp_path / "weights.bin"
  src.write_bytes(b"first")
  url = src.as_uri()
  with Context(PROGRESS=1): p = helpers.fetch(url)   # (progress drawn: stderr is no terminal here)
  assert p == cache / hashlib.md5(url.encode()).hexdigest() and p.read_bytes() == b"first"
  assert "100%|" in capsys.readouterr().err
  src.write_bytes(b"second")
  assert helpers.fetch(url).read_bytes() == b"first"                          # cached
  assert helpers.fetch(url, allow_caching=False).read_bytes() == b"second"    # downloaded again
  assert helpers.fetch(url, name="w.bin", subdir="models") == cache / "models" / "w.bin"
  assert helpers.fetch(url, name=tmp_path / "here.bin").read_bytes() == b"second"
  assert helpers.fetch("/already/a/path") == pathlib.Path("/already/a/path")
  ok = hashlib.sha256(b"second").hexdigest()
  assert helpers.fetch(url, name="checked", sha256=ok).read_bytes() == b"second"
  with pytest.raises(OSError, match="sha256"): helpers.fetch(url, name="bad", sha256="0" * 64)
  assert not (cache / "bad").exists()
  (tmp_path / "x.gz").write_bytes(gzip.compress(b"unzipped"))
  g = helpers.fetch((tmp_path / "x.gz").as_uri(), gunzip=True)
  assert g.name.endswith(".gunzip") and g.read_bytes() == b"unzipped"
  with pytest.raises(OSError): helpers.fetch("http://127.0.0.1:1/nothing", name="never")   # connection refused
  assert sorted(os.listdir(cache)) == sorted([p.name, "models", "checked", g.name])       # no partial files

def test_fetch_extract(tmp_path, cache):
  with tarfile.open(tmp_path / "a.tar.gz", "w:gz") as tf:
    for name, data in (("d/one.txt", b"1"), ("two.txt", b"22")):
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tf.addfile(info, io.BytesIO(data))
  folder = helpers.fetch((tmp_path / "a.tar.gz").as_uri(), name="a.tar.gz", extract=True)
  assert folder == cache / "a.tar.gz.extract" and (folder / "d" / "one.txt").read_bytes() == b"1" and (folder / "two.txt").read_bytes() == b"22"

# ---------------------------------------------------------------------------------------------------------------------
# optimizers: LARS / SGD(classic) / Muon against numpy references of tinygrad's update rules (and tinygrad itself)

def _np_newton_schulz(g, steps, coefs, eps=1e-7):
  if g.shape[0] > g.shape[1]: return _np_newton_schulz(g.T, steps, coefs, eps).T
  x = g / (np.sqrt((g * g).sum()) + eps)
  for _ in range(steps):
    gram, term, out = x @ x.T, x, 0
    for k, c in enumerate(coefs):
      if k: term = gram @ term
      out = out + c * term
    x = out
  return x

def _np_lars(ps, grads, bufs, lr, momentum, wd, ns_steps, ns_coefs, nesterov, classic, pre_wd, tcoef):
  """One step of tinygrad's LARS rule in float64 (its docstring and the paper): returns the new params, updates bufs."""
  out = []
  for i, (p, g) in enumerate(zip(ps, grads)):
    r = 1.0
    if tcoef:
      pn, gn = np.linalg.norm(p), np.linalg.norm(g)
      r = tcoef * pn / (gn + wd * pn) if pn > 0 and gn > 0 else 1.0
    if pre_wd and wd: g = g + wd * p
    if classic: g = g * r * lr
    if momentum:
      bufs[i] = momentum * bufs[i] + g
      g = g + momentum * bufs[i] if nesterov else bufs[i]
    if ns_coefs: g = _np_newton_schulz(g.reshape(g.shape[0], -1), ns_steps, ns_coefs).reshape(g.shape)
    if not classic: g = g * r * lr
    if not pre_wd and wd: g = g + wd * lr * p
    out.append(p - g)
  return out

LARS_CASES = {   # name: (make optimizer, the rule's arguments for the reference)
  "LARS": (lambda ps: optim.LARS(ps, lr=0.1), dict(momentum=0.9, wd=1e-4, ns_steps=0, ns_coefs=None, nesterov=False, classic=True, pre_wd=True, tcoef=0.001)),
  "LARS-nesterov-popular": (lambda ps: optim.LARS(ps, lr=0.1, nesterov=True, classic=False, tcoef=0.01, weight_decay=0.01),
                            dict(momentum=0.9, wd=0.01, ns_steps=0, ns_coefs=None, nesterov=True, classic=False, pre_wd=True, tcoef=0.01)),
  "SGD-classic": (lambda ps: optim.SGD(ps, 0.1, 0.9, 0.01, classic=True),
                  dict(momentum=0.9, wd=0.01, ns_steps=0, ns_coefs=None, nesterov=False, classic=True, pre_wd=True, tcoef=0.0)),
  "Muon": (lambda ps: optim.Muon(ps, lr=0.05), dict(momentum=0.95, wd=0.1, ns_steps=5, ns_coefs=(3.4445, -4.775, 2.0315), nesterov=True,
                                                   classic=False, pre_wd=False, tcoef=0.0)),
}

def _quadratic_grads(ps, cs): return [c + p for p, c in zip(ps, cs)]   # d/dp of sum(c * p) + sum(p * p) / 2

@pytest.mark.parametrize("case", LARS_CASES)
def test_lars_family_matches_the_rule(device, case):
  make, rule = LARS_CASES[case]
  rng = np.random.default_rng(1)
  start = [rng.standard_normal((4, 3)), rng.standard_normal(5), rng.standard_normal((2, 3, 2))]
  cs = [rng.standard_normal(p.shape) for p in start]
  ps = [Tensor(p.astype(np.float32), device=device, requires_grad=True) for p in start]
  opt = make(ps)
  ref, bufs = [p.copy() for p in start], [np.zeros_like(p) for p in start]
  for _ in range(3):
    opt.zero_grad()
    sum((p * Tensor(c.astype(np.float32), device=device)).sum() + (p * p).sum() / 2 for p, c in zip(ps, cs)).backward()
    opt.step()
    ref = _np_lars(ref, _quadratic_grads(ref, cs), bufs, lr=opt.lr.item(), **rule)
    for p, r in zip(ps, ref): np.testing.assert_allclose(p.numpy(), r, rtol=2e-4, atol=2e-5)

def test_lars_family_matches_tinygrad():
  tg = _tinygrad()
  rng = np.random.default_rng(2)
  start, c = rng.standard_normal((6, 4)).astype(np.float32), rng.standard_normal((6, 4)).astype(np.float32)
  for make_tw, make_tg in [(lambda ps: optim.Muon(ps, lr=0.05), lambda ps: tg.nn.optim.Muon(ps, lr=0.05)),
                           (lambda ps: optim.LARS(ps, lr=0.1, tcoef=0.01), lambda ps: tg.nn.optim.LARS(ps, lr=0.1, tcoef=0.01)),
                           (lambda ps: optim.SGD(ps, 0.1, 0.9, 0.01, True, True), lambda ps: tg.nn.optim.SGD(ps, 0.1, 0.9, 0.01, True, True))]:
    w = Tensor(start.copy(), requires_grad=True)
    tw_opt = make_tw([w])
    gw = tg.Tensor(start.copy(), device="CPU")   # (every tinygrad 0.14 tensor is a parameter)
    tg_opt = make_tg([gw])
    with tg.Context(TRAINING=1):
      for _ in range(3):
        tw_opt.zero_grad(); ((w * Tensor(c)).sum() + (w * w).sum() / 2).backward(); tw_opt.step()
        tg_opt.zero_grad(); ((gw * tg.Tensor(c, device="CPU")).sum() + (gw * gw).sum() / 2).backward(); tg_opt.step()
        np.testing.assert_allclose(w.numpy(), gw.numpy(), rtol=1e-4, atol=1e-5)

def test_sgd_signature_positional_like_tinygrad(device):
  w = Tensor([1.0, -2.0], device=device, requires_grad=True)
  opt = optim.SGD([w], 0.5, 0.0, 0.0, False, False, None, False)   # params, lr, momentum, weight_decay, nesterov, classic, device, fused
  (w * w).sum().backward()
  opt.step()
  np.testing.assert_allclose(w.numpy(), [0.0, 0.0])
  with pytest.raises(ValueError, match="nesterov"): optim.SGD([w], nesterov=True)

def test_adam_takes_tinygrads_arguments_in_order(device):
  w = Tensor([1.0, -2.0], device=device, requires_grad=True)
  opt = optim.Adam([w], 0.1, 0.8, 0.9, 1e-6, None, False)   # params, lr, b1, b2, eps, device, fused
  assert (opt.b1, opt.b2, opt.eps, opt.weight_decay, opt.fused) == (0.8, 0.9, 1e-6, 0.0, False)
  tw = torch.tensor([1.0, -2.0], requires_grad=True)
  topt = torch.optim.Adam([tw], lr=0.1, betas=(0.8, 0.9), eps=1e-6)
  for _ in range(3):
    opt.zero_grad(); (w * w).sum().backward(); opt.step()
    topt.zero_grad(); (tw * tw).sum().backward(); topt.step()
  np.testing.assert_allclose(w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)

def test_optimizer_state_on_another_device(device):
  if device == "PYTHON": pytest.skip("the state goes to PYTHON here: needs another device for the parameters")
  rng = np.random.default_rng(3)
  start, c = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((3, 4)).astype(np.float32)
  results = []
  for state_device in (None, "PYTHON"):
    w = Tensor(start.copy(), device=device, requires_grad=True)
    opt = optim.AdamW([w], lr=0.1, device=state_device)
    for _ in range(2):
      opt.zero_grad(); ((w * Tensor(c, device=device)).sum() + (w * w).sum()).backward(); opt.step()
    assert w.device == device and opt.m[0].device == (state_device or device) and opt.lr.device == (state_device or device)
    results.append(w.numpy())
  np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-7)

def test_optimizer_group_and_buffers(device):
  a, b = Tensor([1.0, 2.0], device=device, requires_grad=True), Tensor([3.0], device=device, requires_grad=True)
  frozen = Tensor([5.0], device=device, requires_grad=False)
  adam, sgd = optim.Adam([a, frozen], lr=0.1), optim.SGD([b], lr=0.5)
  assert adam.params == [a] and adam.buffers == [frozen]
  group = optim.OptimizerGroup(adam, sgd)
  assert group[0] is adam and group[1] is sgd and group.params == [a, b] and group.buffers == [frozen]
  ta, tb = torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([3.0], requires_grad=True)
  tadam, tsgd = torch.optim.Adam([ta], lr=0.1), torch.optim.SGD([tb], lr=0.5)
  for _ in range(2):
    group.zero_grad()
    assert a.grad is None and b.grad is None
    ((a * a).sum() + (b * a[0]).sum()).backward()
    group.step()
    tadam.zero_grad(); tsgd.zero_grad(); ((ta * ta).sum() + (tb * ta[0]).sum()).backward(); tadam.step(); tsgd.step()
    np.testing.assert_allclose(a.numpy(), ta.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b.numpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-6)
  assert frozen.tolist() == [5.0]

# ---------------------------------------------------------------------------------------------------------------------
# nn.state: archives, TensorIO, the loaders' tinygrad forms

def test_tar_extract(tmp_path):
  files = {"a.bin": bytes(range(256)) * 3, "dir/b.txt": b"hello", "empty": b""}
  with tarfile.open(tmp_path / "x.tar", "w") as tf:
    for name, data in files.items():
      info = tarfile.TarInfo(name)
      info.size = len(data)
      tf.addfile(info, io.BytesIO(data))
    d = tarfile.TarInfo("a-folder"); d.type = tarfile.DIRTYPE; tf.addfile(d)
  raw = (tmp_path / "x.tar").read_bytes()
  for src in (tmp_path / "x.tar", str(tmp_path / "x.tar"), raw, Tensor(raw)):
    out = state.tar_extract(src)
    assert {k: bytes(v.data()) for k, v in out.items()} == files and all(v.dtype == dtypes.uint8 for v in out.values())
  with pytest.raises(state.FormatError, match="gzip-compressed"): state.tar_extract(gzip.compress(raw))
  with pytest.raises(state.FormatError, match="tar_extract: not a tar archive, or a truncated one"): state.tar_extract(raw[:1500])
  with pytest.raises(state.FormatError, match="tar_extract: not a tar archive"): state.tar_extract(b"\x01" * 1024)

def test_zip_extract(tmp_path):
  files = {"stored.bin": bytes(range(200)), "deflated.txt": b"abc" * 1000, "sub/e": b""}
  with zipfile.ZipFile(tmp_path / "x.zip", "w") as zf:
    zf.writestr(zipfile.ZipInfo("stored.bin"), files["stored.bin"], compress_type=zipfile.ZIP_STORED)
    zf.writestr("deflated.txt", files["deflated.txt"], compress_type=zipfile.ZIP_DEFLATED)
    zf.writestr("sub/e", b"")
    zf.writestr("sub/", b"")
  raw = (tmp_path / "x.zip").read_bytes()
  for src in (tmp_path / "x.zip", raw, Tensor(raw)):
    assert {k: bytes(v.data()) for k, v in state.zip_extract(src).items()} == files
  with pytest.raises(state.FormatError, match="zip_extract: not a zip archive"): state.zip_extract(b"PK" + b"\0" * 100)

def test_tensor_io_reads_like_a_file():
  data = bytes(range(100))
  f, ref = state.TensorIO(Tensor(data)), io.BytesIO(data)
  for op in (lambda x: x.read(10), lambda x: x.seek(5, io.SEEK_CUR), lambda x: x.read(3), lambda x: x.seek(-7, io.SEEK_END),
             lambda x: x.read(), lambda x: x.read(4), lambda x: x.seek(500), lambda x: x.tell(), lambda x: x.read(2),
             lambda x: x.seek(20), lambda x: x.readline(), lambda x: x.seek(0), lambda x: x.read(1000)):
    assert op(f) == op(ref)
  with pytest.raises(ValueError, match="negative seek position -1"): f.seek(-1)
  with pytest.raises(ValueError, match="TensorIO: needs a 1-D uint8 Tensor"): state.TensorIO(Tensor([1.0, 2.0]))

def test_accept_filename_and_safetensors_forms(tmp_path):
  @state.accept_filename
  def first_bytes(t: Tensor) -> list: return t[:4].tolist()
  (tmp_path / "f").write_bytes(b"\x01\x02\x03\x04\x05")
  assert first_bytes(tmp_path / "f") == first_bytes(str(tmp_path / "f")) == first_bytes(Tensor(b"\x01\x02\x03\x04")) == [1, 2, 3, 4]
  state.safe_save({"w": Tensor([[1.0, 2.0]]), "i": Tensor([7], dtype=dtypes.int16)}, fn=tmp_path / "m.safetensors", metadata={"k": "v"})
  for src in (tmp_path / "m.safetensors", Tensor((tmp_path / "m.safetensors").read_bytes())):
    sd = state.safe_load(fn=src)
    assert sd["w"].tolist() == [[1.0, 2.0]] and sd["i"].dtype == dtypes.int16 and state.safe_load_metadata(t=src) == {"k": "v"}
  with pytest.raises(TypeError, match="1-D uint8 Tensor, got float32"): state.safe_load(Tensor([1.0]))
  assert state.safe_dtypes["F32"] == dtypes.float32 and state.inverse_safe_dtypes[dtypes.bfloat16] == "BF16"
  assert all(state.inverse_safe_dtypes[dt] == name for name, dt in state.safe_dtypes.items())

def test_torch_load_takes_a_tensor(tmp_path):
  torch.save({"w": torch.arange(6, dtype=torch.float32).reshape(2, 3)}, tmp_path / "ck.pt")
  assert state.torch_load(t=Tensor((tmp_path / "ck.pt").read_bytes()))["w"].tolist() == [[0, 1, 2], [3, 4, 5]]

def test_get_state_dict_tensor_type_and_load_state_dict_options():
  class Mark: pass
  m1, m2 = Mark(), Mark()
  model = {"a": [Tensor([1.0]), m1], "b": m2}
  assert state.get_state_dict(model, tensor_type=Mark) == {"a.1": m1, "b": m2}
  lin = nn.Linear(2, 1)
  sd = {"weight": Tensor([[3.0, 4.0]]), "bias": Tensor([5.0])}
  state.load_state_dict(lin, sd, consume=True, realize=False)
  assert sd == {} and lin.weight.tolist() == [[3.0, 4.0]] and lin.bias.tolist() == [5.0]

def test_tinyfs_is_refused():
  with pytest.raises(NotImplementedError, match="fs_store: tinyfs"): state.fs_store(Tensor([1]))
  with pytest.raises(NotImplementedError, match="fs_load: tinyfs"): state.fs_load(Tensor([1]), 4)

# ---------------------------------------------------------------------------------------------------------------------
# nn.datasets: mnist(fashion=True) on the real Fashion-MNIST, cifar with tinygrad's dtypes, its offline error

FASHION = "/usr/share/datasets/fashion-mnist"

def _idx(path) -> tuple[tuple[int, ...], bytes]:
  raw = gzip.open(path).read()
  ndim = raw[3]
  shape = struct.unpack(f">{ndim}I", raw[4:4 + 4 * ndim])
  return shape, raw[4 + 4 * ndim:]

@pytest.mark.skipif(not os.path.isdir(FASHION), reason="the apt package dataset-fashion-mnist is not installed (scripts/setup.sh installs it)")
def test_mnist_fashion_reads_the_real_fashion_mnist(monkeypatch, tmp_path):
  for env in ("TINYWEB_MNIST_DIR", "TINYWEB_FASHION_MNIST_DIR"): monkeypatch.delenv(env, raising=False)
  monkeypatch.setenv("TINYWEB_CACHE_DIR", str(tmp_path / "cache"))
  X, Y, Xt, Yt = datasets.mnist(device="CPU", fashion=True)
  assert (X.shape, Y.shape, Xt.shape, Yt.shape) == ((60000, 1, 28, 28), (60000,), (10000, 1, 28, 28), (10000,))
  assert X.dtype == Y.dtype == dtypes.uint8 and X.device == "CPU"
  shape, images = _idx(f"{FASHION}/t10k-images-idx3-ubyte.gz")
  assert shape == (10000, 28, 28) and bytes(Xt[[0, 9999]].data()) == images[:784] + images[-784:]
  _, labels = _idx(f"{FASHION}/train-labels-idx1-ubyte.gz")
  counts = np.bincount(np.frombuffer(bytes(Y.data()), np.uint8), minlength=10)
  assert counts.tolist() == np.bincount(np.frombuffer(labels, np.uint8)).tolist() == [6000] * 10   # Fashion-MNIST is balanced
  assert np.bincount(np.frombuffer(bytes(Yt.data()), np.uint8)).tolist() == [1000] * 10

def _cifar_bin(folder: pathlib.Path, n: int):
  d = folder / "cifar-10-batches-bin"
  d.mkdir(parents=True)
  rng = np.random.default_rng(0)
  records = {}
  for b in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
    labels, pixels = rng.integers(0, 10, n, dtype=np.uint8), rng.integers(0, 256, (n, 3072), dtype=np.uint8)
    (d / f"{b}.bin").write_bytes(np.concatenate([labels[:, None], pixels], 1).tobytes())
    records[b] = (labels, pixels)
  return records

def test_cifar_has_tinygrads_dtypes(tmp_path, monkeypatch):
  monkeypatch.delenv("TINYWEB_CIFAR10_DIR", raising=False)
  recs = _cifar_bin(tmp_path, 3)
  X, Y, Xt, Yt = datasets.cifar(device="CPU", folder=str(tmp_path))
  assert (X.shape, Y.shape, Xt.shape, Yt.shape) == ((15, 3, 32, 32), (15,), (3, 3, 32, 32), (3,))
  assert X.dtype == Y.dtype == Yt.dtype == dtypes.uint8 and datasets.cifar10(str(tmp_path))[1].dtype == dtypes.int32
  assert Y.tolist() == np.concatenate([recs[f"data_batch_{i}"][0] for i in range(1, 6)]).tolist()
  assert bytes(Xt.data()) == recs["test_batch"][1].tobytes()

def test_cifar_offline_says_where_to_put_the_files(tmp_path, monkeypatch):
  monkeypatch.delenv("TINYWEB_CIFAR10_DIR", raising=False)
  monkeypatch.setenv("TINYWEB_CACHE_DIR", str(tmp_path / "cache"))
  monkeypatch.setattr(datasets, "CIFAR10_URLS", ["http://127.0.0.1:1/cifar-10-python.tar.gz"])   # refused: no network needed
  with pytest.raises(RuntimeError) as e: datasets.cifar()
  msg = str(e.value)
  assert "could not find or download cifar-10-python.tar.gz" in msg and "http://127.0.0.1:1/cifar-10-python.tar.gz: URLError" in msg
  assert f"the cache {tmp_path / 'cache' / 'datasets' / 'cifar10'}" in msg and "$TINYWEB_CIFAR10_DIR: not set" in msg
  assert "Put the CIFAR-10 batches (cifar-10-batches-py: data_batch_1..5 and test_batch" in msg and "folder=" in msg

# ---------------------------------------------------------------------------------------------------------------------
# Device[name] = class, JIT=0, LayerNorm2d, the multi-device and hardware stubs

def test_device_class_is_created_on_first_use():
  from tinyweb.backends.cpu import CPUDevice
  made = []
  class MyDevice(CPUDevice):
    def __init__(self, name: str):
      made.append(name)
      super().__init__(name)
  try:
    Device["MYCUSTOM"] = MyDevice
    assert made == [] and "MYCUSTOM" in Device.known()
    assert (Tensor([1.0, 2.0], device="mycustom") * 3).tolist() == [3.0, 6.0]
    assert made == ["MYCUSTOM"] and isinstance(Device["MYCUSTOM"], MyDevice) and Device.check("MYCUSTOM") == (True, "")
    with pytest.raises(TypeError, match=r"Device\['BAD'\] = \.\.\.: expected a subclass of tinyweb.device.Compiled"): Device["bad"] = int
    with pytest.raises(TypeError, match="or an instance of one, got 'CPU'"): Device["bad"] = "CPU"
    assert "BAD" not in Device.known()
  finally:
    Device._specs.pop("MYCUSTOM", None)
    Device._instances.pop("MYCUSTOM", None)

def test_a_device_class_that_fails_says_why():
  from tinyweb.device import Compiled
  class Broken(Compiled):
    def __init__(self, name): raise OSError("no such hardware")
  try:
    Device["BROKEN"] = Broken
    with pytest.raises(RuntimeError, match="device BROKEN is not available here: OSError: no such hardware"): Tensor([1], device="BROKEN")
  finally:
    for d in (Device._specs, Device._instances, Device._failures): d.pop("BROKEN", None)

JIT_SCRIPT = """
from tinyweb import Tensor, TinyJit
runs = []
@TinyJit
def step(x):
  runs.append(1)
  return (x * 2 + 1).sum()
outs = [step(Tensor([float(i), 1.0])).item() for i in range(5)]
print(len(runs), outs)
"""

@pytest.mark.parametrize("jit, runs", [("0", 5), ("1", 2)])
def test_jit_env(jit, runs):
  out = subprocess.run([sys.executable, "-c", JIT_SCRIPT], capture_output=True, text=True, cwd=REPO, timeout=300, env={**os.environ, "JIT": jit})
  assert out.returncode == 0, out.stderr
  assert out.stdout.split("\n")[0] == f"{runs} [4.0, 6.0, 8.0, 10.0, 12.0]"   # (2i + 1) + (2 + 1)

def test_jit_context(device):
  runs = []
  @TinyJit
  def f(x):
    runs.append(1)
    return x.exp() + 1
  with Context(JIT=0):
    for i in range(4):
      out = f(Tensor([float(i)], device=device))
      assert out.uop.base.op.name == "BUFFER" and out.tolist() == pytest.approx([np.exp(i) + 1], rel=1e-6)   # realized
  assert len(runs) == 4 and f.calls == 0
  for i in range(4): assert f(Tensor([float(i)], device=device)).tolist() == pytest.approx([np.exp(i) + 1], rel=1e-6)
  assert len(runs) == 6   # captured on calls 1 and 2, replayed after

def test_layernorm2d(device):
  x = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)
  ln = nn.LayerNorm2d(3, device=device)
  ln.weight, ln.bias = Tensor([1.5, -1.0, 0.5], device=device, requires_grad=True), Tensor([0.1, 0.2, 0.3], device=device, requires_grad=True)
  t = Tensor(x, device=device, requires_grad=True)
  out = ln(t)
  out.square().sum().backward()
  tx = torch.tensor(x, requires_grad=True)
  tw, tb = torch.tensor([1.5, -1.0, 0.5], requires_grad=True), torch.tensor([0.1, 0.2, 0.3], requires_grad=True)
  tout = torch.nn.functional.layer_norm(tx.permute(0, 2, 3, 1), (3,), tw, tb, 1e-5).permute(0, 3, 1, 2)
  tout.square().sum().backward()
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-4, atol=1e-5)
  for ours, ref in ((t, tx), (ln.weight, tw), (ln.bias, tb)): np.testing.assert_allclose(ours.grad.numpy(), ref.grad.numpy(), rtol=1e-4, atol=1e-4)
  with pytest.raises(ValueError, match=r"LayerNorm2d: input must be \(N, C, H, W\), got \(3, 4\)"): ln(Tensor.ones(3, 4, device=device))

def test_multi_device_and_hardware_stubs(device):
  t = Tensor([1.0, 2.0], device=device, requires_grad=True)
  (t * t).sum().backward()
  assert t.shard((device,)).tolist() == [1.0, 2.0] and Tensor([3]).shard_like(t).device == device
  for op in (lambda: t.shard((device, "PYTHON"), axis=0), lambda: t.shard_((device, "CPU")), lambda: t.to_((device, "PYTHON"))):
    with pytest.raises(NotImplementedError, match=r"several devices; tinyweb tensors live on one device \(tinygrad's multi-device tensors are tinyweb issue 18\)"): op()
  other = "PYTHON" if device != "PYTHON" else "CPU"
  assert t.to_(other) is t and t.device == other and t.grad.device == other and t.grad.tolist() == [2.0, 4.0] and t.tolist() == [1.0, 2.0]
  (t * 3).sum().backward()   # still a leaf that gets gradients, now on the other device
  assert t.grad.tolist() == [5.0, 7.0]
  with pytest.raises(NotImplementedError, match="image_dot: .*Qualcomm.*use dot"): t.image_dot(t)
  with pytest.raises(NotImplementedError, match="image_conv2d: .*use conv2d"): t.image_conv2d(t)
  with pytest.raises(NotImplementedError, match="decode_hevc_frame: .*NVDEC"): t.decode_hevc_frame(0, (2,), t)

# ---------------------------------------------------------------------------------------------------------------------
# @function (tinygrad 0.14's `from tinygrad import function`): the body traced inline, tinygrad's checks

class _FnModel:
  def __init__(self, w, b, device=None):
    self.w, self.b = Tensor(w, device=device, requires_grad=True), Tensor(b, device=device, requires_grad=True)
  @tinyweb.function
  def __call__(self, x: Tensor) -> Tensor: return (x @ self.w + self.b).relu()
  @tinyweb.function(precompile=True, precompile_backward=True, allow_implicit=True)
  def both(self, x: Tensor) -> tuple[Tensor, Tensor]: return x @ self.w, (x * 2).sum(1)

def _fn_data(seed=0):
  rng = np.random.default_rng(seed)
  return rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal(3).astype(np.float32), rng.standard_normal((5, 4)).astype(np.float32)

def test_function_is_tinygrads_top_level_decorator():
  module = sys.modules["tinyweb.function"]   # (the submodule: `tinyweb.function`, the attribute, is the decorator, as in tinygrad)
  assert tinyweb.function is module.function and "function" in tinyweb.__all__
  tg = _tinygrad()
  assert list(inspect.signature(tinyweb.function).parameters) == list(inspect.signature(tg.function).parameters)

def test_function_method_values_and_gradients_match_torch(device):
  w, b, x = _fn_data()
  m = _FnModel(w, b, device)
  xt = Tensor(x, device=device, requires_grad=True)
  out = m(xt)
  (out * out).sum().backward()
  tw, tb, tx = (torch.tensor(a, requires_grad=True) for a in (w, b, x))
  tout = torch.relu(tx @ tw + tb)
  (tout * tout).sum().backward()
  np.testing.assert_allclose(out.numpy(), tout.detach().numpy(), rtol=1e-5, atol=1e-6)
  for ours, ref in ((m.w, tw), (m.b, tb), (xt, tx)): np.testing.assert_allclose(ours.grad.numpy(), ref.grad.numpy(), rtol=1e-5, atol=1e-5)

def test_function_binds_like_a_method_and_takes_tinygrads_keywords():
  (w, b, x), (w2, b2, _) = _fn_data(0), _fn_data(1)
  m, m2 = _FnModel(w, b), _FnModel(w2, b2)
  assert _FnModel.__call__ is _FnModel.__dict__["__call__"] and _FnModel.__call__.__wrapped__.__name__ == "__call__"
  np.testing.assert_allclose(m2(Tensor(x)).numpy(), np.maximum(x @ w2 + b2, 0), rtol=1e-5, atol=1e-6)   # each instance its own weights
  np.testing.assert_allclose(_FnModel.__call__(m, Tensor(x)).numpy(), np.maximum(x @ w + b, 0), rtol=1e-5, atol=1e-6)
  y, s = m.both(Tensor(x))
  np.testing.assert_allclose(y.numpy(), x @ w, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(s.numpy(), (x * 2).sum(1), rtol=1e-5, atol=1e-6)
  @tinyweb.function()
  def scaled(a: Tensor, *, by: float) -> Tensor: return a * by
  assert scaled(Tensor([1.0, -2.0]), by=3.0).tolist() == [3.0, -6.0]

def test_function_result_must_be_a_tensor_or_a_tuple_of_tensors():
  @tinyweb.function
  def as_list(a): return [a]
  @tinyweb.function
  def mixed(a): return a, 1.0
  @tinyweb.function
  def nothing(a): pass
  for f, kind in ((as_list, "list"), (mixed, "tuple"), (nothing, "NoneType")):
    with pytest.raises(RuntimeError, match=rf"function test_function_result_must_be_a_tensor_or_a_tuple_of_tensors.<locals>.{f.__name__}: "
                                           rf"return type <class '{kind}'> not supported"):
      f(Tensor([1.0]))

def test_function_body_must_not_realize_or_read():
  x = Tensor([1.0, 2.0, 3.0])
  reads = {"realize": lambda a: a.exp().realize(), "numpy": lambda a: a.numpy(), "item": lambda a: a.sum().item(),
           "tolist": lambda a: a.tolist(), "data": lambda a: a.data(), "Tensor.realize": lambda a: Tensor.realize(a * 2, a + 1)}
  for what, read in reads.items():
    @tinyweb.function
    def body(a):
      read(a)
      return a
    with pytest.raises(RuntimeError, match=r"inside @function .*body: a function body must not realize or read tensors"): body(x)
  @tinyweb.function
  def inner(a): return a * a.sum().item()
  @tinyweb.function
  def outer(a): return inner(a) + 1
  with pytest.raises(RuntimeError, match=r"inside @function .*inner:"): outer(x)
  assert (x * 2).sum().item() == 12.0 and x.tolist() == [1.0, 2.0, 3.0]   # (after the error, reading works again)

def test_function_body_may_draw_random_numbers_and_index():
  # what tinygrad 0.14 allows inside @function (checked against it: dropout, rand and a 0-d tensor index are lazy there)
  # and tinyweb computes eagerly on its own: random numbers, a 0-d tensor index, a small gather, a one-element tensor as a number
  table, idx = Tensor(np.arange(12, dtype=np.float32).reshape(6, 2)).realize(), Tensor([4, 1, 4], dtype=dtypes.int32).realize()
  @tinyweb.function
  def body(t, i):
    with Context(TRAINING=1): d = Tensor.ones(64).dropout(0.5)
    return t[i], t[i], t[Tensor(2)], d, Tensor.rand(3), Tensor.full((2,), Tensor(2.5))
  g1, g2, row, d, r, full = body(table, idx)
  assert g1.tolist() == g2.tolist() == [[8.0, 9.0], [2.0, 3.0], [8.0, 9.0]] and row.tolist() == [4.0, 5.0]
  assert set(d.tolist()) <= {0.0, 2.0} and 0 < sum(d.tolist()) < 128 and all(0 <= v < 1 for v in r.tolist()) and full.tolist() == [2.5, 2.5]

def test_function_grad_fxn_raises_and_names_custom_gradient():
  with pytest.raises(NotImplementedError, match=r"function .*f: grad_fxn= is not supported in tinyweb .*Tensor.custom_gradient"):
    @tinyweb.function(grad_fxn=lambda grad, call: (grad,))
    def f(a): return a * 2

def test_function_in_a_jitted_training_step_matches_torch():
  # beautiful_mnist's pattern: a TinyJit method whose forward is a @function method; SGD on fixed data against torch's
  w, b, x = _fn_data()
  y = np.array([0, 2, 1, 1, 0])
  class Model(_FnModel):
    @TinyJit
    def train_step(self, X: Tensor, Y: Tensor) -> Tensor:
      opt.zero_grad()
      loss = self(X).sparse_categorical_crossentropy(Y).backward()
      return loss.realize(*opt.schedule_step())
  m = Model(w, b)
  opt = nn.optim.SGD(nn.state.get_parameters(m), lr=0.1)
  losses = [m.train_step(Tensor(x), Tensor(y)).item() for _ in range(5)]
  tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)
  topt, ref = torch.optim.SGD([tw, tb], lr=0.1), []
  for _ in range(5):
    topt.zero_grad()
    loss = torch.nn.functional.cross_entropy(torch.relu(torch.tensor(x) @ tw + tb), torch.tensor(y))
    loss.backward()
    topt.step()
    ref.append(loss.item())
  np.testing.assert_allclose(losses, ref, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(m.w.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
