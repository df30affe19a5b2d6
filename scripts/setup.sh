#!/usr/bin/env bash
# Installs what tinyweb needs and is missing; safe to run again (it skips what is already there).
#   apt: clang (the CPU device compiles kernels with it), dataset-fashion-mnist (real data, offline),
#        mesa-vulkan-drivers libvulkan1 (lavapipe: the WEBGPU device runs on Vulkan on the CPU when there is no GPU)
#   pip: tinyweb itself (editable) with the test, demo, webgpu and bench extras (pytest, numpy, torch==2.13.0 CPU,
#        hypothesis, safetensors; tqdm; wgpu==0.32.0; the benchmarks' peer tinygrad==0.14.0)
set -euo pipefail
cd "$(dirname "$0")/.."

missing_apt=()
command -v clang >/dev/null 2>&1 || missing_apt+=(clang)
[ -d /usr/share/datasets/fashion-mnist ] || missing_apt+=(dataset-fashion-mnist)   # real data for the demo and its test
for pkg in mesa-vulkan-drivers libvulkan1; do   # the WEBGPU device (wgpu-py) on lavapipe
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
if ! $PY -c "import os, sys, tinyweb.backends, pytest, numpy, torch, hypothesis, xdist, safetensors, tqdm, tinygrad, wgpu
sys.exit(os.path.realpath(tinyweb.backends.__file__) != os.path.realpath('backends/__init__.py'))" >/dev/null 2>&1; then
  echo "setup: installing tinyweb[test,demo,webgpu,bench] with pip"
  $PY -m pip install -q --disable-pip-version-check -e ".[test,demo,webgpu,bench]"
fi
# CUDA: NVRTC from pip (no GPU needed: the test suite NVRTC-compiles every kernel it builds for sm_80 and sm_90). NVRTC 12,
# not 13: NVRTC 13's PTX needs a driver as new as it.
if ! $PY -c "from tinyweb.backends.cuda import NVRTC; NVRTC.get()" >/dev/null 2>&1; then
  echo "setup: installing nvidia-cuda-nvrtc-cu12 with pip"
  $PY -m pip install -q --disable-pip-version-check "nvidia-cuda-nvrtc-cu12==12.9.*"
fi
echo "setup: ok ($($PY -c 'import tinyweb; print("tinyweb", tinyweb.__version__)'), $(clang --version | head -1))"
