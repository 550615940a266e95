#!/usr/bin/env bash
# memwall train's streamed checkpoint of NVMe-resident states against fio on the same disk. Saving reads each
# optimizer sub-group's fp32 states from the NVMe store (O_DIRECT) and writes them to the checkpoint file
# (O_DIRECT, three aligned sequential streams); loading (every state in the store: max_in_cpu 0) reads the
# file once, buffered, staging it in the store and committing once the checksum matched. The peer is fio doing
# the transfers of the checkpoint's size one after another: for saving an O_DIRECT sequential read plus an
# O_DIRECT write; for loading, from a cold page cache, a buffered read, a second one (cached, what a
# check-then-install load does) and an O_DIRECT write. The ratio is fio's time over memwall's (>= 1: memwall
# is as fast as those transfers back to back).
# Usage: bash bench/checkpoint_vs_fio.sh [DIR] [LAYERS] [ROUNDS]   (defaults: ./build/ckpt-bench, 8, 2)
# The model is gpt2-medium's width with LAYERS layers (8: 152 M parameters, a 1.2 GB checkpoint).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-./build/ckpt-bench}
LAYERS=${2:-8}
ROUNDS=${3:-2}
MW=./build/cli/memwall
PY=/usr/bin/python3
command -v fio >/dev/null || { echo "needs fio: bash scripts/setup.sh --bench (or apt-get install fio)" >&2; exit 1; }
mkdir -p "$DIR"
train=("$MW" train --model gpt2-medium --model-set "{\"n_layer\": $LAYERS}" --eval-batches 1 --json
  --nvme-path "$DIR" --checkpoint-dir "$DIR/ckpt"
  --set '{"train_micro_batch_size_per_gpu": 1, "memwall.sequence_length": 16,
          "zero_optimization.offload_param.device": "nvme", "zero_optimization.offload_optimizer.device": "nvme",
          "zero_optimization.offload_param.max_in_cpu": 0, "zero_optimization.sub_group_size": 20000000}')
field() {  # $1: key of the JSON line ("checkpoint" or "resumed"), $2: field
  $PY -c "import json,sys
for l in sys.stdin:
    j = json.loads(l)
    if '$1' in j: print(j['$1']['$2'])"
}
fio_s() {  # rw, direct, size in bytes, extra -> seconds
  fio --name=ckpt-vs-fio --filename="$DIR/fio.dat" --size="$3" --bs=1M --ioengine=psync --direct="$2" \
      --rw="$1" ${4:-} --output-format=json 2>/dev/null |
    $PY -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['job_runtime'] / 1e3)"
}
save=(); load=(); fsave=(); fload=(); bytes=0
for i in $(seq "$ROUNDS"); do
  rm -rf "$DIR/ckpt"
  out=$("${train[@]}" --steps 1)
  bytes=$(field checkpoint bytes <<<"$out")
  save+=("$(field checkpoint seconds <<<"$out")")
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  out=$("${train[@]}" --resume --steps 2)
  load+=("$(field resumed seconds <<<"$out")")
  b=${bytes%.*}
  w=$(fio_s write 1 "$b" --end_fsync=1); r=$(fio_s read 1 "$b")
  fsave+=("$($PY -c "print($w + $r)")")
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  r1=$(fio_s read 0 "$b"); r2=$(fio_s read 0 "$b"); w2=$(fio_s write 1 "$b")
  fload+=("$($PY -c "print($r1 + $r2 + $w2)")")
done
rm -rf "$DIR"
$PY - "$bytes" "${save[*]}" "${fsave[*]}" "${load[*]}" "${fload[*]}" <<'PY'
import statistics, sys
size = float(sys.argv[1])
save, fsave, load, fload = [list(map(float, a.split())) for a in sys.argv[2:]]
med = statistics.median
print(f"checkpoint of {size/1e9:.2f} GB (12 bytes per parameter), states on NVMe, {len(save)} alternating rounds; medians")
print(f"{'':6} {'fio s':>8} {'memwall s':>10} {'memwall GB/s':>13} {'ratio':>7}")
for name, f, m in (("save", fsave, save), ("load", fload, load)):
    print(f"{name:6} {med(f):>8.2f} {med(m):>10.2f} {size/med(m)/1e9:>13.3f} {med(f)/med(m):>7.3f}")
PY
