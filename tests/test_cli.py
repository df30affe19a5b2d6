"""The `tinyweb` command, run as `python -m tinyweb.cli` in a fresh interpreter on this checkout (the installed console
script runs the same main(): tests/test_python_package.py runs it from a wheel installed in a fresh virtualenv)."""
import importlib.util, json, os, re, subprocess, sys, urllib.request
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent

def tinyweb(*args: str, timeout: int = 120) -> subprocess.CompletedProcess:
  env = {**os.environ, "PYTHONPATH": str(ROOT)}
  return subprocess.run([sys.executable, "-m", "tinyweb.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=timeout)

def test_version_is_the_packages():
  out = tinyweb("--version")
  assert out.returncode == 0, out.stderr
  assert out.stdout == f"tinyweb {json.loads((ROOT / 'package.json').read_text())['version']}\n"

def test_devices_is_the_device_report():
  out = tinyweb("devices")
  assert out.returncode == 0, out.stderr
  report = subprocess.run([sys.executable, "-m", "tinyweb.devices"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
  assert out.stdout == report.stdout   # (one report, two ways to ask for it)
  lines = out.stdout.splitlines()
  assert re.fullmatch(r"CPU +(available.*|unavailable: .+)", lines[0]), lines[0]
  assert re.fullmatch(r"default: [A-Z]+ \(.+\)", lines[-1]), lines[-1]   # the default, and why

def test_export_and_serve_get_the_rest_of_the_command_line():
  # --help after the command is the command's own: the export parser's options, not tinyweb's
  out = tinyweb("export", "--help")
  assert out.returncode == 0 and "usage: python -m tinyweb.export" in out.stdout and "--batch-sizes" in out.stdout, out
  out = tinyweb("export", "no-such-model", "out")
  assert out.returncode == 2 and "argument model: invalid choice: 'no-such-model'" in out.stderr, out.stderr

def test_serve_serves_a_folder(tmp_path):
  (tmp_path / "hello.txt").write_bytes(b"hello from tinyweb serve\n")
  p = subprocess.Popen([sys.executable, "-m", "tinyweb.cli", "serve", str(tmp_path), "--port", "0", "--quiet"], cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    line = p.stdout.readline()
    m = re.fullmatch(r"tinyweb\.serve: serving (.+) at (http://127\.0\.0\.1:\d+/)\n", line)
    assert m, line or p.stderr.read()   # (no line: it stopped; stderr says why)
    assert os.path.samefile(m[1], tmp_path)
    with urllib.request.urlopen(m[2] + "hello.txt", timeout=30) as r: assert r.read() == b"hello from tinyweb serve\n"
  finally:
    p.terminate()
    p.communicate(timeout=30)

def test_viz_is_tinyweb_viz():
  if importlib.util.find_spec("tinyweb.viz") is None: pytest.skip("tinyweb.viz is not in this tree yet (it is being written)")
  out = tinyweb("viz", "--help")
  assert out.returncode == 0 and out.stdout.startswith("usage: "), out

def test_no_or_unknown_command_is_a_usage_error():
  out = tinyweb()
  assert out.returncode == 2 and "usage: tinyweb" in out.stderr and "devices" in out.stderr, out
  out = tinyweb("nope")
  assert out.returncode == 2 and "invalid choice: 'nope'" in out.stderr, out.stderr
