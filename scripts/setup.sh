#!/usr/bin/env bash
# Installs what tinyweb needs and is missing; safe to run again (it skips what is already there).
#   apt: clang (the CPU device compiles kernels with it), dataset-fashion-mnist (real data, offline),
#        mesa-vulkan-drivers libvulkan1 (lavapipe: the WEBGPU device runs on Vulkan on the CPU when there is no GPU)
#        pocl-opencl-icd ocl-icd-libopencl1 ocl-icd-opencl-dev (PoCL: the CL device runs OpenCL on the CPU)
#   pip: tinyweb itself (editable) with the test, demo, webgpu, opencl and bench extras (pytest, numpy, torch==2.13.0 CPU,
#        hypothesis, safetensors; tqdm; wgpu==0.32.0; pyopencl; the benchmarks' peer tinygrad==0.14.0)
set -euo pipefail
cd "$(dirname "$0")/.."

missing_apt=()
command -v clang >/dev/null 2>&1 || missing_apt+=(clang)
[ -d /usr/share/datasets/fashion-mnist ] || missing_apt+=(dataset-fashion-mnist)   # real data for the demo and its test
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
# (reinstall also when the tinyweb that Python finds is another checkout's editable install)
if ! $PY -c "import os, sys, tinyweb.backends, pytest, numpy, torch, hypothesis, xdist, safetensors, tqdm, tinygrad, wgpu, pyopencl
sys.exit(os.path.realpath(tinyweb.backends.__file__) != os.path.realpath('backends/__init__.py'))" >/dev/null 2>&1; then
  echo "setup: installing tinyweb[test,demo,webgpu,opencl,bench] with pip"
  $PY -m pip install -q --disable-pip-version-check -e ".[test,demo,webgpu,opencl,bench]"
fi
echo "setup: ok ($($PY -c 'import tinyweb; print("tinyweb", tinyweb.__version__)'), $(clang --version | head -1))"
