#!/usr/bin/env bash
# memwall's CPU Adam against torch.optim.Adam (foreach off and on) on one flat fp32 tensor, same machine, same
# thread count, alternating runs; prints each median ms/step, params/s, memwall's state traffic and the ratios.
# Goal (issue 6): >= 7.5x torch.optim.Adam. Needs Debian's python3-torch (run with /usr/bin/python3).
# Usage: bash bench/adam_vs_torch.sh [PARAMS=100000000] [THREADS=2] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-100000000}; T=${2:-2}; R=${3:-3}
PY=/usr/bin/python3
BENCH=./build/bench/memwall-adam-bench
[ -x "$BENCH" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 1; }
$PY -c "import torch" 2>/dev/null || { echo "needs python3-torch: apt-get install python3-torch" >&2; exit 1; }
mw=(); t0=(); t1=()
for i in $(seq "$R"); do
  mw+=("$($BENCH "$N" "$T" 10)")
  t0+=("$($PY bench/adam_vs_torch.py "$N" "$T" 5 0)")
  t1+=("$($PY bench/adam_vs_torch.py "$N" "$T" 5 1)")
done
$PY - "$(printf '%s\n' "${mw[@]}")" "$(printf '%s\n' "${t0[@]}")" "$(printf '%s\n' "${t1[@]}")" <<'PY'
import json, statistics, sys
mw, t0, t1 = ([json.loads(l) for l in a.splitlines()] for a in sys.argv[1:4])
med = lambda rows: statistics.median(r["ms_per_step"] for r in rows)
m, a, b = med(mw), med(t0), med(t1)
print(f"Adam, {mw[0]['params']:,} fp32 params, {mw[0]['threads']} threads, {len(mw)} alternating rounds; torch {t0[0]['torch']}")
print(f"{'':28} {'ms/step':>9} {'params/s':>12} {'ratio':>7}")
print(f"{'memwall (' + mw[0]['isa'] + ')':28} {m:>9.1f} {mw[0]['params']/(m/1e3):>12.3g} {'':>7}  state traffic {28*mw[0]['params']/(m/1e3)/1e9:.1f} GB/s")
print(f"{'torch.optim.Adam foreach=False':28} {a:>9.1f} {t0[0]['params']/(a/1e3):>12.3g} {a/m:>6.2f}x")
print(f"{'torch.optim.Adam foreach=True':28} {b:>9.1f} {t1[0]['params']/(b/1e3):>12.3g} {b/m:>6.2f}x")
PY
