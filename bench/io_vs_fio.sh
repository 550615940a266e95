#!/usr/bin/env bash
# memwall io-bench against fio on the same disk, file size, block size, queue depth and job count, alternating
# runs, printing each median and the ratio (goal: memwall >= 0.95 x fio for sequential read and write).
# Usage: bash bench/io_vs_fio.sh [DIR] [SIZE] [ROUNDS]   (defaults: ./build/io-bench, 2G, 5)
# Needs fio (`bash scripts/setup.sh --bench` installs it with the other peers).
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-./build/io-bench}
SIZE=${2:-2G}
ROUNDS=${3:-5}
BS=1M
QD=32
JOBS=1
ENGINE=io_uring
MW=./build/cli/memwall
PY=/usr/bin/python3
command -v fio >/dev/null || { echo "needs fio: bash scripts/setup.sh --bench (or apt-get install fio)" >&2; exit 1; }
mkdir -p "$DIR"
fio_run() {  # rw -> bytes/s
  fio --name=memwall-vs-fio --filename="$DIR/fio.dat" --size="$SIZE" --bs=$BS --iodepth=$QD --numjobs=$JOBS \
      --ioengine=$ENGINE --direct=1 --rw="$1" --output-format=json 2>/dev/null |
    $PY -c "import json,sys; j=json.load(sys.stdin)['jobs'][0]; print(j['$2']['bw_bytes'])"
}
mw_run() {  # -> "write_Bps read_Bps"
  $MW io-bench --path "$DIR" --size "$SIZE" --block-size $BS --queue-depth $QD --parallelism $JOBS \
      --backend $ENGINE --keep --json | $PY -c "import json,sys; d=json.load(sys.stdin); print(d['write_Bps'], d['read_Bps'])"
}
fio_run write write >/dev/null   # lay out fio's file once
fw=(); fr=(); mw=(); mr=()
for i in $(seq "$ROUNDS"); do
  fw+=("$(fio_run write write)"); fr+=("$(fio_run read read)")
  read -r w r <<<"$(mw_run)"; mw+=("$w"); mr+=("$r")
done
rm -f "$DIR/fio.dat" "$DIR/memwall-io-bench.dat"
$PY - "$SIZE" "${fw[*]}" "${fr[*]}" "${mw[*]}" "${mr[*]}" <<'PY'
import statistics, sys
size, fw, fr, mw, mr = sys.argv[1], *[list(map(float, a.split())) for a in sys.argv[2:]]
med = statistics.median
print(f"sequential O_DIRECT, {size} file, 1 MiB blocks, queue depth 32, 1 job, io_uring, {len(fw)} alternating rounds")
print(f"{'':6} {'fio GB/s':>10} {'memwall GB/s':>13} {'ratio':>7}")
for name, f, m in (("write", fw, mw), ("read", fr, mr)):
    print(f"{name:6} {med(f)/1e9:>10.3f} {med(m)/1e9:>13.3f} {med(m)/med(f):>7.3f}")
PY
