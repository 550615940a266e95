#!/usr/bin/env bash
# One GPT-2 block (pre-LN, causal attention, GELU MLP), forward + backward, memwall's CPU kernels against
# PyTorch on the same shapes and thread count, alternating runs; prints each median ms and the ratio.
# fp32: memwall's oneDNN matmuls vs torch fp32 on OpenBLAS. PyTorch runs in its best configuration: Debian's
# torch calls libblas.so.3, which must be OpenBLAS (apt-get install libopenblas0-pthread; the reference BLAS is
# ~25x slower), and OpenBLAS 0.3.21 does not know this CPU and falls back to generic kernels, so the torch run
# gets OPENBLAS_CORETYPE=${TORCH_OPENBLAS_CORETYPE:-SkylakeX}; the kernel OpenBLAS reports is printed.
# bf16: memwall bf16 matmuls with fp32 master copies vs torch.autocast(bfloat16).
# Needs Debian's python3-torch (run with /usr/bin/python3).
# Usage: bash bench/block_vs_torch.sh [bf16|fp32] [B=4] [T=512] [C=1024] [NH=16] [ITERS=3] [THREADS=2] [ROUNDS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${1:-bf16}; B=${2:-4}; T=${3:-512}; C=${4:-1024}; NH=${5:-16}; IT=${6:-3}; TH=${7:-2}; R=${8:-2}
case "$MODE" in fp32|bf16) ;; *) echo "mode must be fp32 or bf16, got '$MODE'" >&2; exit 2 ;; esac
PY=/usr/bin/python3
BENCH=./build/bench/memwall-block-bench
[ -x "$BENCH" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "needs python3-torch: apt-get install python3-torch" >&2; exit 1; }
BLAS=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 || echo unknown)
case "$BLAS" in *openblas*) ;; *) echo "warning: libblas.so.3 is $BLAS, not OpenBLAS; torch fp32 will be far from its best (apt-get install libopenblas0-pthread)" >&2 ;; esac
CORE=${TORCH_OPENBLAS_CORETYPE:-SkylakeX}
mw=(); pt=()
for i in $(seq "$R"); do
  mw+=("$(OMP_NUM_THREADS=$TH $BENCH "$MODE" "$B" "$T" "$C" "$NH" "$IT")")
  pt+=("$(OPENBLAS_CORETYPE=$CORE OPENBLAS_VERBOSE=2 OMP_NUM_THREADS=$TH $PY bench/block_vs_torch.py "$MODE" "$B" "$T" "$C" "$NH" "$IT" "$TH" 2>/tmp/memwall-block-torch.err)")
done
$PY - "$(printf '%s\n' "${mw[@]}")" "$(printf '%s\n' "${pt[@]}")" "$(grep -o 'Core: .*' /tmp/memwall-block-torch.err | head -1 || echo 'Core: none reported') ($BLAS)" <<'PY'
import json, statistics, sys
mw, pt = ([json.loads(l) for l in a.splitlines()] for a in sys.argv[1:3])
m, p = statistics.median(r["ms"] for r in mw), statistics.median(r["ms"] for r in pt)
r = mw[0]
print(f"GPT-2 block fwd+bwd, {r['mode']}, B={r['B']} T={r['T']} C={r['C']}, {len(mw)} alternating rounds; "
      f"torch {pt[0]['torch']}, OpenBLAS {sys.argv[3]}")
print(f"{'memwall (' + r['matmul'] + ')':24} {m:>9.1f} ms")
print(f"{'torch':24} {p:>9.1f} ms   memwall speedup {p/m:.2f}x")
PY
