#!/usr/bin/env bash
# Replaying the ranks of a job together against replaying each trace on its own, on this machine: trains
# gpt-mini on 2 MPI ranks (one core each) with a trace per rank, once as they are and once with a busy loop
# sharing rank 1's core (a straggler), then replays both ranks' traces on the calibrated spec of this machine
# (two host-emulated devices) and prints each trace's replay error and the joint replay's, and how long each
# rank's collectives waited for the other. The measured iteration of a data-parallel job is set by its slowest
# rank; a trace replayed alone re-simulates its collectives from their bytes and so loses the time the rank
# spent waiting there for the other.
# Usage: bash bench/joint_replay_validate.sh [DIR=/var/tmp/memwall-joint] [STEPS=6] [ROUNDS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/var/tmp/memwall-joint}; S=${2:-6}; N=${3:-2}
MW=${MEMWALL:-$PWD/build/cli/memwall}
[ -x "$MW" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "mpirun not found (Debian: openmpi-bin)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "needs 2 cores (one per rank)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
mkdir -p "$DIR"
head -c 300000 README.md docs/*.md > "$DIR/text.txt"
"$MW" calibrate --path "$DIR" --size 256M --out "$DIR/local.json" >/dev/null
# Both ranks on this one machine: its spec with two devices (each its own core).
python3 - "$DIR" <<'PY'
import json, sys
d = sys.argv[1]
h = json.load(open(f"{d}/local.json"))
h["name"] = "local-2-ranks"
h["gpu"]["count"] = 2
for level in h["pcie"].get("switches", []):
    level["gpus_per_switch"] = 2
json.dump(h, open(f"{d}/local2.json", "w"), indent=1)
PY
hog=""
trap '[ -n "$hog" ] && kill "$hog" 2>/dev/null; true' EXIT
for k in $(seq 1 "$N"); do
  for straggler in 0 1; do
    if [ "$straggler" = 1 ]; then
      taskset -c 1 sh -c 'while :; do :; done' &
      hog=$!
    fi
    mpirun -n 2 --bind-to core "$MW" train --model gpt-mini --data "$DIR/text.txt" --steps "$S" --eval-batches 1 \
      --hardware "$DIR/local2.json" --trace "$DIR/run.json" > /dev/null 2> "$DIR/train.err" ||
      { echo "train failed: $(tail -2 "$DIR/train.err")"; exit 1; }
    if [ -n "$hog" ]; then kill "$hog"; wait "$hog" 2>/dev/null || true; hog=""; fi
    "$MW" replay "$DIR/run.json" "$DIR/run.rank1.json" --hardware "$DIR/local2.json" --steps 2: --json \
      > "$DIR/replay.json"
    python3 - "$DIR/replay.json" "$k" "$straggler" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
j = r["joint"]
rows = " ".join(f"rank {x['rank']} {100 * x['error']:+.1f}%" for x in r["replay"])
wait = ", ".join(f"{1e3 * w:.0f}" for w in j["collective_wait_s"])
print(f"round {sys.argv[2]} {'straggler' if sys.argv[3] == '1' else 'even    '}: measured "
      f"{1e3 * j['measured_iteration_s']:7.1f} ms/iteration; each trace alone: {rows}; together "
      f"{1e3 * j['replayed_iteration_s']:7.1f} ms ({100 * j['error']:+.1f}%), waits at collectives {wait} ms")
PY
  done
done
