#!/usr/bin/env bash
# Executes one notebook headless (a failing cell fails the test), from its own directory, into a temp copy:
# the stored notebook keeps no outputs. Usage: run_notebook.sh BUILD_DIR NOTEBOOK
set -euo pipefail
build=$1; nb=$2
command -v jupyter >/dev/null || { echo "jupyter-nbconvert is not installed (scripts/setup.sh)"; exit 77; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cd "$(dirname "$nb")"
MEMWALL_BUILD="$build" PYDEVD_DISABLE_FILE_VALIDATION=1 \
  jupyter nbconvert --to notebook --execute "$(basename "$nb")" --output-dir "$out" \
  --ExecutePreprocessor.kernel_name=python3 --ExecutePreprocessor.timeout=300
