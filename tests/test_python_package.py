"""The Python package as a user gets it: in a fresh virtualenv (its own pip, the setuptools its ensurepip brings or none,
nothing of this machine's site-packages), the wheel is built the way `npm run build` builds it for the browser
(vite.lib.config.ts, with the venv's Python as $PYTHON: pip falls back to an isolated build, with setuptools from the
package index), then installed with pip; its metadata, its files and its `tinyweb` command are checked there.
Needs Node and node_modules (scripts/setup.sh), and the package index for setuptools."""
import configparser, email, hashlib, json, os, re, shutil, subprocess, sys, tomllib, zipfile
from pathlib import Path
import pytest
import tinyweb
from tinyweb.device import Device

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

def run(cmd: list, **kw) -> subprocess.CompletedProcess:
  # (no PYTHONPATH: the venv's Python must find the installed tinyweb, not this checkout)
  env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "DEV")} | kw.pop("env", {})
  p = subprocess.run([str(c) for c in cmd], env=env, capture_output=True, text=True, timeout=300, **kw)
  assert p.returncode == 0, f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
  return p

def test_the_version_is_written_once_and_package_json_repeats_it():
  assert "version" in PYPROJECT["project"]["dynamic"] and "version" not in PYPROJECT["project"]
  assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tinyweb.__version__"}
  assert json.loads((ROOT / "package.json").read_text())["version"] == tinyweb.__version__

@pytest.fixture(scope="module")
def package(tmp_path_factory):
  """{venv: the virtualenv, wheel: the wheel its pip built, runtime: the runtime folder the build wrote}; the wheel is
  installed in the venv."""
  vite = ROOT / "node_modules" / "vite" / "bin" / "vite.js"
  if shutil.which("node") is None or not vite.is_file(): pytest.skip("needs Node.js and node_modules (npm ci; scripts/setup.sh runs it)")
  tmp = tmp_path_factory.mktemp("package")
  run([sys.executable, "-m", "venv", tmp / "venv"])
  python = tmp / "venv" / "bin" / "python"
  # npm run build's step that runs Python, into a folder of its own (dist/ may be serving e2e tests meanwhile)
  run(["node", vite, "build", "-c", "vite.lib.config.ts", "--outDir", tmp / "dist", "--emptyOutDir", "--logLevel", "warn"],
      cwd=ROOT, env={"PYTHON": str(python)})
  runtime = tmp / "dist" / "runtime"
  (wheel,) = (runtime / "wheels").glob("*.whl")
  run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", wheel])
  return {"venv": tmp / "venv", "wheel": wheel, "runtime": runtime}

def test_the_venvs_own_setuptools_could_not_build_it(package):
  # what made `pip wheel --no-build-isolation` fail in a fresh venv (invalid command 'bdist_wheel'): setuptools missing
  # (Python 3.12+) or older than the build needs (3.11 brings 65.5); the build fell back to an isolated environment
  own = subprocess.run([package["venv"] / "bin" / "python", "-c", "import setuptools; print(setuptools.__version__)"],
                       capture_output=True, text=True, timeout=60)
  (needed,) = [int(m[1]) for r in PYPROJECT["build-system"]["requires"] if (m := re.fullmatch(r"setuptools>=(\d+)", r))]
  assert own.returncode != 0 or int(own.stdout.split(".")[0]) < needed, (own.stdout, needed)

def test_the_build_wrote_the_runtime_manifest_for_its_wheel(package):
  manifest = json.loads((package["runtime"] / "tinyweb-manifest.json").read_text())
  assert manifest["tinyweb"] == tinyweb.__version__
  assert manifest["wheel"] == {"file": f"wheels/{package['wheel'].name}",
                               "sha256": hashlib.sha256(package["wheel"].read_bytes()).hexdigest()}

def test_wheel_metadata(package):
  with zipfile.ZipFile(package["wheel"]) as z:
    meta = email.message_from_bytes(z.read(f"tinyweb-{tinyweb.__version__}.dist-info/METADATA"))
  assert (meta["Name"], meta["Version"], meta["License-Expression"], meta["License-File"]) == \
         ("tinyweb", tinyweb.__version__, "MIT", "LICENSE")
  assert meta["Requires-Python"] == PYPROJECT["project"]["requires-python"] == ">=3.11"
  classifiers = meta.get_all("Classifier")
  assert {"Development Status :: 3 - Alpha", "Operating System :: OS Independent", "Typing :: Typed",
          "Topic :: Scientific/Engineering :: Artificial Intelligence",
          *(f"Programming Language :: Python :: 3.{v}" for v in range(11, 15))} <= set(classifiers)
  assert not [c for c in classifiers if c.startswith("License ::")]   # (PEP 639: the expression replaces them)
  urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
  assert set(urls) == {"Homepage", "Documentation", "Repository", "Issues"}
  assert all(u.startswith("https://github.com/tinyweb-dev/tinyweb") for u in urls.values()), urls
  assert {"test", "demo", "bench", "dev", "webgpu", "opencl", "llvm", "cuda", "web"} <= set(meta.get_all("Provides-Extra"))
  requires = meta.get_all("Requires-Dist")
  assert 'matplotlib; extra == "demo"' in requires and 'wgpu==0.32.0; extra == "webgpu"' in requires
  assert all("extra ==" in r for r in requires), requires   # the core needs nothing

def test_wheel_files(package):
  with zipfile.ZipFile(package["wheel"]) as z:
    names, info = set(z.namelist()), f"tinyweb-{tinyweb.__version__}.dist-info"
    license, entry_points = z.read(f"{info}/licenses/LICENSE"), z.read(f"{info}/entry_points.txt").decode()
  assert license == (ROOT / "LICENSE").read_bytes() and b"Copyright (c) 2026 the tinyweb authors" in license
  assert {"tinyweb/py.typed", "tinyweb/cli.py", "tinyweb/export/__main__.py"} <= names
  # the runtimes (the CPU device's C source too) and the models' data, as in the checkout
  assert {f"tinyweb/backends/{f.name}" for f in (ROOT / "backends").iterdir() if f.suffix in (".py", ".c")} <= names
  assert {f"tinyweb/models/{f.name}" for f in (ROOT / "tinyweb" / "models").glob("*.txt")} <= names
  assert "tinyweb/backends/cpu_threads.c" in names and "tinyweb/models/imagenet_classes.txt" in names
  assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
  scripts = configparser.ConfigParser()
  scripts.read_string(entry_points)
  assert dict(scripts["console_scripts"]) == {"tinyweb": "tinyweb.cli:main"}

def test_the_tinyweb_command_in_the_venv(package, tmp_path):
  venv = package["venv"]
  where = run([venv / "bin" / "python", "-c", "import tinyweb; print(tinyweb.__file__)"], cwd=tmp_path).stdout.strip()
  assert Path(where).is_relative_to(venv), where   # the installed wheel, not this checkout
  assert run([venv / "bin" / "tinyweb", "--version"], cwd=tmp_path).stdout == f"tinyweb {tinyweb.__version__}\n"
  lines = run([venv / "bin" / "tinyweb", "devices"], cwd=tmp_path).stdout.splitlines()
  cpu = next(l for l in lines if l.startswith("CPU "))
  assert ("unavailable" not in cpu) == Device.check("CPU")[0], cpu   # (clang on PATH: as in this process)
  # the venv has none of the optional runtimes' packages: each device says which extra installs it
  for name, module, extra in [("WEBGPU", "wgpu", "webgpu"), ("CL", "pyopencl", "opencl"), ("LLVM", "llvmlite", "llvm")]:
    line = next(l for l in lines if l.startswith(name + " "))
    assert re.fullmatch(rf"{name} +unavailable: ModuleNotFoundError: No module named '{module}'; install tinyweb\[{extra}\]: "
                        rf"pip install 'tinyweb\[{extra}\]'", line), line
  assert re.fullmatch(r"default: (CPU|PYTHON) \(.+\)", lines[-1]), lines[-1]
