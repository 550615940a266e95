#!/usr/bin/env bash
# The train -> calibrate -> simulate / replay loop on this machine: trains gpt-mini a few steps with a trace,
# measures the machine into a hardware spec, then predicts the measured iteration time two ways: replaying
# the trace on the calibrated spec (measured compute, re-simulated transfers), and simulating the same run
# config from scratch (compute from FLOPs and the achievable rate calibrate measured on memwall train's
# compute for gpt-mini at the same batch). Prints both errors per round. Each round calibrates afresh (this
# VM's compute rate drifts by 10-20% between minutes); the last lines give the median error and the range.
# Usage: bash bench/replay_validate.sh [DIR=/var/tmp/memwall-validate] [B=8] [STEPS=6] [OFFLOAD=nvme|cpu|none] [ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/var/tmp/memwall-validate}; B=${2:-8}; S=${3:-6}; OFF=${4:-nvme}; N=${5:-3}
MW=${MEMWALL:-./build/cli/memwall}  # MEMWALL=path/to/memwall: another build
[ -x "$MW" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 1; }
mkdir -p "$DIR"
off="\"zero_optimization.offload_param.device\":\"$OFF\",\"zero_optimization.offload_optimizer.device\":\"$OFF\""
[ "$OFF" = none ] && off="\"zero_optimization.offload_optimizer.device\":\"none\""
run="{\"train_micro_batch_size_per_gpu\":$B,$off,\"zero_optimization.offload_param.max_in_cpu\":0,\"zero_optimization.offload_param.buffer_size\":1000000}"
one_round() {  # $1: round number; writes $DIR/round$1.json (a failed step is reported and the round skipped)
  local err="$DIR/round.err"
  rm -f "$DIR/round$1.json"
  step() { "$@" 2>"$err" || { echo "round $k: $2 failed (exit $?): $(tail -2 "$err" | tr '\n' ' ')"; return 1; }; }
  local k=$1
  step $MW calibrate --path "$DIR" --out "$DIR/local.json" --model gpt-mini --batch "$B" --tensor-size 128K >/dev/null || return 0
  step $MW train --steps "$S" --eval-batches 1 --hardware "$DIR/local.json" --nvme-path "$DIR" --set "$run" \
    --trace "$DIR/train.json" --json > "$DIR/train.jsonl" || return 0
  step $MW replay "$DIR/train.json" --hardware "$DIR/local.json" --steps 2: --json > "$DIR/replay.json" || return 0
  # The same run as memwall train plans it: stage 3, every parameter partitioned, bf16 with fp32
  # gradients, alloc/free in program order.
  local sim_set="${run%\}},\"zero_optimization.stage3_param_persistence_threshold\":0,\"communication_data_type\":\"fp32\",\"memwall.memory_order\":\"program\",\"fp16\":{\"enabled\":false},\"bf16\":{\"enabled\":true}}"
  step $MW simulate --hardware "$DIR/local.json" --model gpt-mini --model-set '{"vocab_size":256}' --run train-gpt \
    --set "$sim_set" --json > "$DIR/simulate.json" || return 0
  python3 - "$DIR" "$1" <<'PY'
import json, sys
d, k = sys.argv[1], sys.argv[2]
r = json.load(open(f"{d}/replay.json"))["replay"][0]
s = json.load(open(f"{d}/simulate.json"))
sim = s.get("iteration_s") or s.get("simulation", {}).get("iteration_s")
m = r["measured_iteration_s"]
rep = r["replayed_iteration_s"]
print(f"round {k}: measured (trace steps {r['steps'][0]}:{r['steps'][1]}) {m*1e3:7.1f} ms/iteration; "
      f"replay {rep*1e3:7.1f} ms ({100*(rep-m)/m:+.1f}%); simulate {sim*1e3:7.1f} ms ({100*(sim-m)/m:+.1f}%)")
json.dump({"measured": m, "replay": rep, "simulate": sim}, open(f"{d}/round{k}.json", "w"))
PY
}
for k in $(seq 1 "$N"); do one_round "$k"; done
python3 - "$DIR" "$N" <<'PY'
import json, statistics, sys
d, n = sys.argv[1], int(sys.argv[2])
import os
rounds = [json.load(open(f"{d}/round{k}.json")) for k in range(1, n + 1) if os.path.exists(f"{d}/round{k}.json")]
if not rounds:
    sys.exit("no round completed")
n = len(rounds)
for what in ("replay", "simulate"):
    errs = sorted(100 * (r[what] - r["measured"]) / r["measured"] for r in rounds)
    within = sum(abs(e) <= 10 for e in errs)
    print(f"{what:<8} error: median {statistics.median(errs):+.1f}%, range {errs[0]:+.1f}% .. {errs[-1]:+.1f}%, "
          f"{within}/{n} rounds within 10%")
PY
