#!/usr/bin/env bash
# `memwall train` on 2 MPI ranks with each ZeRO stage, and ZeRO-Offload with and without its delayed parameter
# update: step time and the network bytes each step moved, against the closed form of what the stage must
# move for Psi parameters (bf16 parameters, fp32 gradients; a collective counted as its whole tensor):
#   stage 0: all-reduce of the gradients (2 x 4 Psi); every rank steps all of the states      =  8 Psi
#   stage 1: all-reduce of the gradients (2 x 4 Psi) + all-gather of the updated parameters (2 Psi) = 10 Psi
#   stage 2: reduce-scatter (4 Psi) + all-gather (2 Psi)                                            =  6 Psi
#   stage 3: all-gather once (2 Psi; the parameters stay gathered from forward to backward when the
#            live-parameter budget holds them, as here) + reduce-scatter (4 Psi)                    =  6 Psi
# The losses of stages 2 and 3 are bitwise the same (tests); this measures what each stage moves and costs.
# Medians over the steps after 2 warm-up steps, rank 0, and its device tier's peak (model states, activations
# and working buffers, as planned).
# Usage: bash bench/train_stages.sh [STEPS=12] [LAYERS=4] [CHANNELS=256] [MICRO_BATCH=4]
set -euo pipefail
cd "$(dirname "$0")/.."
S=${1:-12}; L=${2:-4}; C=${3:-256}; B=${4:-4}
MW=./build/cli/memwall
[ -x "$MW" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "mpirun not found (Debian: openmpi-bin)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
model="{\"n_layer\":$L,\"n_embd\":$C,\"n_head\":4,\"n_positions\":256}"
names=(z0 z1 z2 z3 z2-offload z2-offload-dpu)
declare -A sets=(
  [z0]='"zero_optimization.stage":0'
  [z1]='"zero_optimization.stage":1'
  [z2]='"zero_optimization.stage":2'
  [z3]='"zero_optimization.stage":3'
  [z2-offload]='"zero_optimization.stage":2,"zero_optimization.offload_optimizer.device":"cpu"'
  [z2-offload-dpu]='"zero_optimization.stage":2,"zero_optimization.offload_optimizer.device":"cpu","memwall.delayed_parameter_update":true'
)
declare -A factor=([z0]=8 [z1]=10 [z2]=6 [z3]=6 [z2-offload]=6 [z2-offload-dpu]=6)
out=""
for name in "${names[@]}"; do
  line=$(mpirun -n 2 $MW train --steps "$S" --json --eval-batches 1 --adam-threads 1 --model-set "$model" \
    --set "{\"train_micro_batch_size_per_gpu\":$B,${sets[$name]}}" 2>/dev/null |
    python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in sys.stdin if l.startswith("{")]
steps = [r for r in rows if "step" in r][2:]
summary = [r["summary"] for r in rows if "summary" in r][0]
med = lambda k: statistics.median(r[k] for r in steps)
print(med("seconds"), med("compute_s"), med("optimizer_s"), steps[-1]["bytes"]["network"], summary["params"],
      summary["peak_bytes"]["gpu"])')
  out+="$name ${factor[$name]} $line"$'\n'
done
python3 - "$out" "$B" <<'PY'
import sys
rows = [l.split() for l in sys.argv[1].strip().splitlines()]
print(f"memwall train, 2 ranks x {sys.argv[2]} x 256 tokens, medians after 2 warm-up steps")
print(f"{'config':<16}{'s/step':>8}{'compute':>9}{'optim':>8}{'net MiB':>9}{'closed form':>13}{'ratio':>7}"
      f"{'GPU peak MiB':>14}")
base = None
for name, f, s, c, o, net, psi, gpu in rows:
    s, c, o, net, psi, gpu = map(float, (s, c, o, net, psi, gpu))
    closed = int(f) * psi
    print(f"{name:<16}{s:8.3f}{c:9.3f}{o:8.3f}{net/2**20:9.2f}{closed/2**20:9.2f} MiB{net/closed:7.3f}"
          f"{gpu/2**20:14.2f}")
    if name == "z2-offload": base = s
    if name == "z2-offload-dpu" and base: print(f"delayed parameter update: step {base/s:.2f}x faster than without")
PY
