"""What is specific to the CL (OpenCL) device: device selection, its clear errors when pyopencl or a driver is
missing, the on-disk program binary cache, refused dtypes, results that OpenCL leaves undefined or that PoCL computes
differently (float->int casts of NaN/inf/huge values, float16 NaN payloads), and OpenCL C in DEBUG=4. The rest of the
suite runs on CL through the `device` fixture."""
import json, os, subprocess, sys, textwrap
import numpy as np
import pytest
from tinyweb import Tensor, Device, Context, dtypes

ok, why = Device.check("CL")
pytestmark = pytest.mark.skipif(not ok, reason=f"CL unavailable: {why}")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

def run_py(code: str, **env) -> str:
  """Runs `code` in a fresh interpreter (device choice and caches are per process) with `env` added (None: removed);
  returns its stdout."""
  env = {k: v for k, v in {**os.environ, **env}.items() if v is not None}
  out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr
  return out.stdout

CHECK = "from tinyweb.device import Device; print(Device.check('CL')[1])"

def test_device_chosen_by_name():
  name = Device["CL"].info["device"]
  out = run_py("from tinyweb import Tensor, Device\nprint(Device['CL'].info['device']); print(Tensor([1, 2], device='CL').add(1).tolist())",
               TINYWEB_CL_DEVICE=name[len(name) // 3:][:12].lower())   # any substring, any case
  assert out.split("\n")[:2] == [name, "[2, 3]"]
  assert "TINYWEB_CL_DEVICE='no such device' matches no OpenCL device" in run_py(CHECK, TINYWEB_CL_DEVICE="no such device")

def test_missing_pyopencl_or_driver_is_explained(tmp_path):
  assert "install tinyweb[opencl]: pip install 'tinyweb[opencl]'" in run_py("import sys; sys.modules['pyopencl'] = None\n" + CHECK)
  # ocl-icd finds the drivers (ICDs) listed in OCL_ICD_VENDORS: an empty folder means no OpenCL platform at all
  out = run_py(CHECK, OCL_ICD_VENDORS=str(tmp_path))
  assert "no OpenCL device found" in out and "pocl-opencl-icd" in out, out

def test_cpu_opencl_device_is_not_the_default():
  if os.getenv("DEV"): pytest.skip(f"DEV={os.getenv('DEV')} chooses the default device")
  if Device["CL"].is_real_gpu: pytest.skip("the CL device is a GPU here: it may rank first")
  assert Device.DEFAULT != "CL"

def test_second_process_builds_from_the_disk_cache(tmp_path):
  # counts the kernels built from OpenCL source (several may build as one program); a second process with the same
  # cache folder must build none
  code = """
    import json
    from tinyweb import Tensor
    from tinyweb.backends.cl import CLCompiler
    builds, compile = [], CLCompiler.compile
    CLCompiler.compile = lambda self, src: builds.append(src) or compile(self, src)
    x = Tensor([[1.0, -2.0, 3.5], [4.0, 5.0, -6.25]], device="CL")
    out = ((x * 2).relu().sum(1) + x.max()).tolist()
    print(json.dumps([sum(src.count("__kernel ") for src in builds), out]))
  """
  env = {"TINYWEB_CACHE_DIR": str(tmp_path), "DISABLE_COMPILER_CACHE": None}
  (n1, out1), (n2, out2) = json.loads(run_py(code, **env)), json.loads(run_py(code, **env))
  assert out1 == out2 == [9.0 + 5.0, 18.0 + 5.0]
  assert n1 >= 1 and n2 == 0, (n1, n2)
  assert len(os.listdir(tmp_path / "kernels")) == n1

def test_float64_refused_without_fp64(monkeypatch):
  from tinyweb.codegen.opencl import OpenCLRenderer
  r = OpenCLRenderer(has_fp64=False, max_local_size=Device["CL"].renderer.max_local_size)
  monkeypatch.setattr(Device["CL"], "renderer", r)
  with pytest.raises(TypeError, match="float64 is not supported on CL.*fp64"): Tensor([1.0, 2.0], device="CL", dtype=dtypes.float64)
  with pytest.raises(TypeError, match="float64 is not supported on CL"): Tensor([1.0, 2.0], device="CL").cast(dtypes.float64).realize()
  np.testing.assert_array_equal(Tensor([1.0, 2.0], device="CL").mul(3).numpy(), [3.0, 6.0])   # float32 still works

def test_float_to_int_casts_equal_the_cpu_device():
  # NaN, inf and values beyond int32/int64 are undefined in C and OpenCL C: the CL device gives what the CPU device
  # gives (through int64, wrapping; INT64_MIN for NaN, inf and |x| >= 2^63)
  vals = np.array([np.nan, np.inf, -np.inf, 1e20, -1e20, 3e9, -3e9, 300.5, -129.75, 65536.0 * 3 + 7], np.float32)
  for src in (dtypes.float32, dtypes.float64, dtypes.float16):
    for dst in (dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64):
      got, exp = [Tensor(vals, device=d).cast(src).cast(dst).numpy() for d in ("CL", "CPU")]
      np.testing.assert_array_equal(got, exp, err_msg=f"{src.name} -> {dst.name}")

def test_float16_nan_payloads_survive():
  # PoCL's vload_half/vstore_half replace NaN payloads; tinyweb converts NaNs itself (as the CPU device keeps them)
  bits = np.array([0x7C01, 0xFC01, 0x7E00, 0x7D55, 0xFFFF, 0x3C00], np.uint16)
  t = Tensor(bits, device="CL").bitcast(dtypes.float16)
  np.testing.assert_array_equal(t.contiguous().bitcast(dtypes.uint16).numpy(), bits)
  np.testing.assert_array_equal(t.flip(0).numpy().view(np.uint16), bits[::-1])

def test_debug4_prints_opencl_c(capsys):
  with Context(DEBUG=4): (Tensor([1.0, 2.0], device="CL") * 7.5).realize()
  out = capsys.readouterr().out
  assert "__kernel" in out and "reqd_work_group_size" in out and "__global" in out
