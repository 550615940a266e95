#!/usr/bin/env bash
# memwall-gui with a million-event trace: how long parsing + modelling take, how long until the window's first
# frame is drawn, and the time per frame while zooming in (offscreen). The trace is synthetic
# (memwall-trace-gen: 900 K spans on 4 ranks x 7 resources, 100 K memory/bandwidth samples, ~160 MB of JSON).
# Usage: bash bench/gui_open.sh [EVENTS=1000000] [DIR=/tmp]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000000}; DIR=${2:-/tmp}
[ -x build/gui/memwall-gui ] && [ -x build/bench/memwall-trace-gen ] || { echo "build first: bash scripts/setup.sh" >&2; exit 1; }
build/bench/memwall-trace-gen "$DIR/memwall-gui-bench.json" "$N"
build/bench/memwall-trace-gen "$DIR/memwall-gui-bench.json.gz" "$N"
ls -l "$DIR"/memwall-gui-bench.json "$DIR"/memwall-gui-bench.json.gz | awk '{print $5, $9}'
QT_QPA_PLATFORM=offscreen build/gui/memwall-gui --time-open "$DIR/memwall-gui-bench.json" "$DIR/memwall-gui-bench.json.gz" 2>/dev/null
rm -f "$DIR/memwall-gui-bench.json" "$DIR/memwall-gui-bench.json.gz"
