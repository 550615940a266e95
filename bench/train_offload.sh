#!/usr/bin/env bash
# `memwall train` step time with the model states offloaded (CPU; NVMe with and without prefetching) against
# the same training with everything on the (host-emulated) device, on this machine. The losses of every
# configuration are bitwise the same (tests/engine/zero3_test.cpp); this measures what the offload costs.
# The default shape is compute-dominated (32 x 256 tokens per step for a 3.3M-parameter GPT), the case
# ZeRO-Infinity targets: the NVMe traffic per step is ~113 MiB against seconds of compute.
# Medians over the steps after 2 warm-up steps. NVMe files go to SWAP_DIR (a local disk; O_DIRECT).
# Usage: bash bench/train_offload.sh [SWAP_DIR=/var/tmp/memwall-bench] [B=32] [STEPS=8] [LAYERS=4] [CHANNELS=256]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/var/tmp/memwall-bench}; B=${2:-32}; S=${3:-8}; L=${4:-4}; C=${5:-256}
MW=./build/cli/memwall
[ -x "$MW" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 1; }
mkdir -p "$DIR"
model="{\"n_layer\":$L,\"n_embd\":$C,\"n_head\":4,\"n_positions\":256}"
nvme='"zero_optimization.offload_param.device":"nvme","zero_optimization.offload_param.max_in_cpu":0,"zero_optimization.offload_optimizer.device":"nvme","zero_optimization.offload_optimizer.pipeline_read":true,"zero_optimization.offload_optimizer.pipeline_write":true,"zero_optimization.sub_group_size":1000000,"zero_optimization.stage3_max_reuse_distance":0'
declare -A sets=(
  [none]="{\"train_micro_batch_size_per_gpu\":$B}"
  [cpu]="{\"train_micro_batch_size_per_gpu\":$B,\"zero_optimization.offload_param.device\":\"cpu\",\"zero_optimization.offload_optimizer.device\":\"cpu\"}"
  [nvme]="{\"train_micro_batch_size_per_gpu\":$B,$nvme}"
  [nvme-noprefetch]="{\"train_micro_batch_size_per_gpu\":$B,$nvme,\"memwall.prefetch\":false}"
)
out=""
for name in none cpu nvme nvme-noprefetch; do
  line=$($MW train --steps "$S" --json --eval-batches 1 --model-set "$model" --set "${sets[$name]}" --nvme-path "$DIR" |
    python3 -c '
import json, statistics, sys
rows = [r for r in map(json.loads, sys.stdin) if "step" in r][2:]
med = lambda k: statistics.median(r[k] for r in rows)
b = rows[-1]["bytes"]
keys = ("seconds", "compute_s", "exposed_io_s", "optimizer_s")
print(*[med(k) for k in keys], *[b[k] for k in ("nvme_read", "nvme_write", "h2d")])')
  out+="$name $line"$'\n'
done
python3 - "$out" "$B" <<'PY'
import sys
rows = {l.split()[0]: [float(x) for x in l.split()[1:]] for l in sys.argv[1].strip().splitlines()}
base = rows["none"][0]
print(f"memwall train, {sys.argv[2]} x 256 tokens per step, medians after 2 warm-up steps")
print(f"{'config':<17}{'s/step':>8}{'compute':>9}{'exposed':>9}{'optim':>8}{'nvme r MiB':>12}{'nvme w MiB':>12}{'vs none':>9}")
for k, (s, c, e, o, r, w, h) in rows.items():
    print(f"{k:<17}{s:8.3f}{c:9.3f}{e:9.3f}{o:8.3f}{r/2**20:12.1f}{w/2**20:12.1f}{s/base:8.2f}x")
n, o = rows["nvme"], rows["nvme-noprefetch"]
print(f"NVMe prefetch on vs off: step {o[0]/n[0]:.2f}x faster, exposed I/O+comm {o[2]*1e3:.0f} -> {n[2]*1e3:.0f} ms")
PY
