#!/usr/bin/env bash
# Causal attention forward + backward (2 sequences of T tokens, 4 heads of 64 channels, fp32), memwall's CPU
# kernels (memwall-kernels-gbench's BM_Attention: unfused and flash) against PyTorch's attention written out
# (bench/attention_vs_torch.py) on the same shapes and threads, alternating rounds; prints each median and
# the ratios. WINDOW 256: a sliding window of 256 keys on both sides (the benchmark's only window).
# PyTorch's matmuls run on OpenBLAS with OPENBLAS_CORETYPE=${TORCH_OPENBLAS_CORETYPE:-SkylakeX} (Debian's
# OpenBLAS 0.3.21 does not know newer CPUs), one OpenBLAS thread under PyTorch's own OpenMP threads (its
# batched matmuls split the batch: 705 ms against 835 ms with OpenBLAS's threads as well, at 1024 tokens);
# the kernel OpenBLAS reports is printed.
# Usage: bash bench/attention_vs_torch.sh [T=1024: 256, 1024 or 4096] [WINDOW=0: 0 or 256] [ROUNDS=2] [THREADS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-1024}; W=${2:-0}; R=${3:-2}; TH=${4:-2}
case "$T" in 256|1024|4096) ;; *) echo "T must be 256, 1024 or 4096 (the benchmark's sizes), got '$T'" >&2; exit 2 ;; esac
case "$W" in 0|256) ;; *) echo "WINDOW must be 0 or 256 (the benchmark's window), got '$W'" >&2; exit 2 ;; esac
PY=/usr/bin/python3
BENCH=./build/bench/memwall-kernels-gbench
[ -x "$BENCH" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "needs python3-torch: bash scripts/setup.sh --bench" >&2; exit 1; }
CORE=${TORCH_OPENBLAS_CORETYPE:-SkylakeX}
ITERS=$([ "$T" = 4096 ] && echo 3 || echo 10)
arg0=$([ "$W" = 0 ] && echo 0 || echo 2); arg1=$((arg0 + 1))
mw=(); pt=()
for i in $(seq "$R"); do
  mw+=("$(OMP_NUM_THREADS=$TH $BENCH --benchmark_filter="Attention/($arg0|$arg1)/$T/" --benchmark_repetitions=3 \
          --benchmark_report_aggregates_only=true --benchmark_format=json 2>/dev/null | tr -d '\n')")
  pt+=("$(OPENBLAS_CORETYPE=$CORE OPENBLAS_NUM_THREADS=1 OPENBLAS_VERBOSE=2 OMP_NUM_THREADS=$TH $PY bench/attention_vs_torch.py "$T" "$W" "$ITERS" "$TH" \
          2>/tmp/memwall-attention-torch.err)")
done
$PY - "$(printf '%s\n' "${mw[@]}")" "$(printf '%s\n' "${pt[@]}")" "$T" "$W" "$arg0" "$(grep -o 'Core: .*' /tmp/memwall-attention-torch.err | head -1 || echo 'Core: none reported')" <<'PY'
import json, statistics, sys
mw = [json.loads(l) for l in sys.argv[1].splitlines()]
pt = [json.loads(l) for l in sys.argv[2].splitlines()]
T, W, arg0 = sys.argv[3], sys.argv[4], int(sys.argv[5])
def median_of(kind):
    ms = []
    for run in mw:
        for b in run["benchmarks"]:
            if b.get("aggregate_name") == "median" and b["run_name"].startswith(f"BM_Attention/{arg0 + kind}/"):
                ms.append(b["real_time"])
    return statistics.median(ms)
unfused, flash = median_of(0), median_of(1)
torch_ms = statistics.median(r["ms"] for r in pt)
print(f"causal attention fwd+bwd, B=2 T={T} C=256 4 heads, {'window ' + W if W != '0' else 'no window'}, fp32, "
      f"{len(mw)} alternating rounds; torch {pt[0]['torch']}, OpenBLAS {sys.argv[6]}")
print(f"{'memwall unfused':18} {unfused:>9.1f} ms   {torch_ms / unfused:.2f}x PyTorch's speed")
print(f"{'memwall flash':18} {flash:>9.1f} ms   {torch_ms / flash:.2f}x PyTorch's speed")
print(f"{'torch':18} {torch_ms:>9.1f} ms")
PY
