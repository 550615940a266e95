#!/usr/bin/env bash
# Renders memwall-gui in a real X window under Xvfb on a trace of a real `memwall train` run (2 steps of
# gpt-mini with parameters and optimizer states on NVMe) and saves the screen to docs/images/memwall-gui.png
# (or $1). Needs xvfb and imagemagick (scripts/setup.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-docs/images/memwall-gui.png}
command -v xvfb-run >/dev/null && command -v import >/dev/null || { echo "needs xvfb-run and imagemagick (scripts/setup.sh)" >&2; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build/cli/memwall train --steps 2 --eval-batches 1 --nvme-path "$work" --trace "$work/train.json" \
  --set '{"zero_optimization.offload_param.device": "nvme", "zero_optimization.offload_param.max_in_cpu": 0, "zero_optimization.offload_optimizer.device": "nvme", "zero_optimization.offload_param.buffer_size": 1e6, "activation_checkpointing": null}' >/dev/null
xvfb-run -a -s "-screen 0 1280x860x24 -nolisten tcp" sh -c \
  "build/gui/memwall-gui '$work/train.json' --quit-after 5000 & p=\$!; sleep 3; import -window root '$OUT'; wait \$p"
sd=$(convert "$OUT" -format '%[fx:standard_deviation]' info:)
echo "$OUT: standard deviation $sd (a blank screen is 0)"
awk -v sd="$sd" 'BEGIN { exit !(sd > 0.05) }' || { echo "the screenshot is blank" >&2; exit 1; }
