#!/usr/bin/env bash
# Installs memwall's Debian packages (once), then configures and builds it (Release) in ./build.
# Idempotent: re-running only rebuilds what changed. Run as root, or as a user with sudo.
# --bench also installs the peers the bench/ scripts compare against: fio, Debian's PyTorch and OpenBLAS
# (which becomes the system libblas.so.3 that Debian's torch calls).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  cmake g++ make pkg-config ccache
  nlohmann-json3-dev libcli11-dev libgtest-dev libgmock-dev libbenchmark-dev
  liburing-dev libaio-dev libopenmpi-dev openmpi-bin libsimgrid-dev
  qt6-base-dev zlib1g-dev libdnnl-dev ocl-icd-opencl-dev xvfb xauth imagemagick pybind11-dev python3-dev python3-numpy python3-regex python3-sentencepiece
  jupyter-nbconvert python3-ipykernel python3-matplotlib python3-pandas
  bible-kjv
)
for arg in "$@"; do
  case "$arg" in
    --bench) PACKAGES+=(fio python3-torch libopenblas0-pthread) ;;
    *) echo "setup: unknown option '$arg' (allowed: --bench)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "setup: run as root (or install sudo) to install: ${missing[*]}" >&2; exit 1; }
    SUDO="sudo"
  fi
  echo "setup: installing ${#missing[@]} Debian package(s): ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR="$PWD"
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
# nvcc from the CUDA toolkit, when it is installed but not on PATH.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" ${MEMWALL_CMAKE_ARGS:-}
cmake --build build -j "$(nproc)"
