#!/usr/bin/env bash
# The train -> calibrate -> simulate / replay loop on this machine: trains gpt-mini a few steps with a trace,
# measures the machine into a hardware spec, then predicts the measured iteration time two ways: replaying
# the trace on the calibrated spec (measured compute, re-simulated transfers), and simulating the same run
# config from scratch (compute from FLOPs and the achievable rate calibrate measured on gpt-mini's forward +
# backward at the same batch). Prints both errors.
# Usage: bash bench/replay_validate.sh [DIR=/var/tmp/memwall-validate] [B=8] [STEPS=6] [OFFLOAD=nvme|cpu|none]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/var/tmp/memwall-validate}; B=${2:-8}; S=${3:-6}; OFF=${4:-nvme}
MW=./build/cli/memwall
[ -x "$MW" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 1; }
mkdir -p "$DIR"
off="\"zero_optimization.offload_param.device\":\"$OFF\",\"zero_optimization.offload_optimizer.device\":\"$OFF\""
[ "$OFF" = none ] && off="\"zero_optimization.offload_optimizer.device\":\"none\""
run="{\"train_micro_batch_size_per_gpu\":$B,$off,\"zero_optimization.offload_param.max_in_cpu\":0,\"zero_optimization.offload_param.buffer_size\":1000000}"
$MW calibrate --path "$DIR" --out "$DIR/local.json" --model gpt-mini --batch "$B" --tensor-size 128K >/dev/null 2>&1
$MW train --steps "$S" --eval-batches 1 --hardware "$DIR/local.json" --nvme-path "$DIR" --set "$run" \
  --trace "$DIR/train.json" --json > "$DIR/train.jsonl"
$MW replay "$DIR/train.json" --hardware "$DIR/local.json" --steps 2: --json > "$DIR/replay.json"
# The same run as memwall train plans it: stage 3, every parameter partitioned, bf16 with fp32 gradients.
sim_set="${run%\}},\"zero_optimization.stage3_param_persistence_threshold\":0,\"communication_data_type\":\"fp32\",\"fp16\":{\"enabled\":false},\"bf16\":{\"enabled\":true}}"
$MW simulate --hardware "$DIR/local.json" --model gpt-mini --model-set '{"vocab_size":256}' --run zero-3 \
  --set "$sim_set" --json > "$DIR/simulate.json"
python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
r = json.load(open(f"{d}/replay.json"))["replay"][0]
s = json.load(open(f"{d}/simulate.json"))
sim = s.get("iteration_s") or s.get("simulation", {}).get("iteration_s")
m = r["measured_iteration_s"]
print(f"measured (trace steps {r['steps'][0]}:{r['steps'][1]}) {m*1e3:8.1f} ms/iteration")
print(f"replay on calibrated spec  {r['replayed_iteration_s']*1e3:8.1f} ms  error {100*(r['replayed_iteration_s']-m)/m:+.1f}%")
print(f"simulate of the run config {sim*1e3:8.1f} ms  error {100*(sim-m)/m:+.1f}%")
PY
