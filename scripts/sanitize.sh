#!/usr/bin/env bash
# The C++ test suite under AddressSanitizer and UndefinedBehaviorSanitizer, in its own build (build-asan/):
# out-of-bounds accesses, use-after-free, leaks and undefined behaviour (signed overflow, misaligned loads,
# float-to-int casts out of range) abort the test that hits them. CUDA, Qt and the Python module are left out
# (their runtimes are not built with the sanitizers); the MPI tests run without leak checking (OpenMPI's own
# allocations at MPI_Init/Finalize, from components it unloads, cannot be told apart). Each test may take 10
# minutes (the sanitizers slow them down 2-5x).
# Not part of scripts/test.sh: the first build takes ~25 min on 2 cores, the run ~2-3x the plain suite.
# Usage: bash scripts/sanitize.sh [ctest -R regex]
set -euo pipefail
cd "$(dirname "$0")/.."
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
flags="-fsanitize=address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer"
mkdir -p build-asan
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo "${launcher[@]}" \
  -DMEMWALL_CUDA=OFF -DMEMWALL_NCCL=OFF -DMEMWALL_QT=OFF -DMEMWALL_PYTHON=OFF -DMEMWALL_TEST_TIMEOUT=600 \
  -DCMAKE_C_FLAGS="$flags" -DCMAKE_CXX_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined" \
  >build-asan/configure.log
cmake --build build-asan -j "$(nproc)"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
leaks="abort_on_error=1:detect_leaks=1:strict_string_checks=1" no_leaks="abort_on_error=1:detect_leaks=0"
rc=0
if [ -n "${1:-}" ]; then
  opts=$leaks
  case "$1" in *Mpi*) opts=$no_leaks ;; esac
  ASAN_OPTIONS=$opts ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -R "$1" || rc=$?
else
  ASAN_OPTIONS=$leaks ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -E Mpi || rc=$?
  ASAN_OPTIONS=$no_leaks ctest --test-dir build-asan --output-on-failure -R Mpi || rc=$?
fi
exit $rc
