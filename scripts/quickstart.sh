#!/usr/bin/env bash
# Quick start: install, build, then answer memwall's first question on the built-in default scenario:
# does the paper's 1T-parameter GPT fit one DGX-2 node with ZeRO-Infinity NVMe offload, and where does
# the memory go? Extra arguments go to `memwall predict` (e.g. --max-model, --json).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
echo
exec ./build/cli/memwall predict "$@"
