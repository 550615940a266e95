#!/usr/bin/env bash
# Simulator scale benchmark (issue 4): one iteration of the paper's 1T model on one DGX-2 node and of the 20T
# model on 32 nodes (512 GPUs). Prints simulated iteration time, wall time, activities, events per second and
# the simulating process's peak memory, beside the closed-form (reference executor: no contention but the NVMe
# drives' between reads and writes) iteration time of the same schedule. Targets: 1T/1 node <= 5 s, 20T/512 GPUs <= 120 s and < 4 GiB.
# A third row, DeepSeek-V3 on one node (2 million tasks a rank: 256 experts a layer), shows the simulator's
# memory and speed on the largest schedules (about 2 minutes).
# Usage: bash bench/sim_scale.sh [path/to/memwall]
set -euo pipefail
cd "$(dirname "$0")/.."
MW=${1:-./build/cli/memwall}
python3=/usr/bin/python3
row() {  # name, then memwall simulate arguments
  local name=$1; shift
  local sim fast
  sim=$("$MW" simulate "$@" --json)
  fast=$("$MW" simulate "$@" --json --fast)
  "$python3" - "$name" "$sim" "$fast" <<'PY'
import json, sys
name, sim, fast = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
s = sim["simulation"]
print(f"{name:<28} {sim['iteration_s']:>12.1f} {fast['iteration_s']:>12.1f} {sim['iteration_s']/fast['iteration_s']:>6.3f}"
      f" {s['wall_s']:>8.2f} {s['activities']:>10} {s['events_per_s']:>10.0f} {s['peak_rss_bytes']/2**30:>8.2f}")
PY
}
echo "machine: $(nproc) cores, $(uname -r), $("$MW" info --json | "$python3" -c 'import json,sys; print("SimGrid", json.load(sys.stdin)["simgrid"])')"
printf "%-28s %12s %12s %6s %8s %10s %10s %8s\n" "case" "sim iter s" "closed-form" "ratio" "wall s" "activities" "events/s" "RSS GiB"
row "1T, 1 node (16 GPUs)" --hardware dgx2 --model paper-1t --run zero-infinity-nvme
row "20T, 32 nodes (512 GPUs)" --hardware dgx2-32n --model paper-20t --run zero-infinity-nvme \
  --set '{"memwall.model_parallel": 8, "train_micro_batch_size_per_gpu": 10, "activation_checkpointing.partition_activations": true}'
row "DeepSeek-V3, 1 node, 4K tok" --hardware dgx2 --model deepseek-v3 --run zero-infinity-nvme \
  --set '{"memwall.sequence_length": 4096}'
