#!/usr/bin/env bash
# memwall tokenize against a Python implementation of GPT-2's encoder (tests/engine/bpe_reference.py: its
# pattern on the `regex` module, a cache per piece, the lowest-ranked pair merged until none is left) on the
# same text and tokenizer: checks that every token id agrees, then prints the times (memwall on one thread and
# on every core; Python is one thread) and the ratios.
# Needs python3-regex. Usage: bash bench/tokenize_vs_python.sh [TOKENIZER_DIR=tests/data/tiny-bpe] [TEXT=KJV]
set -euo pipefail
cd "$(dirname "$0")/.."
TOK=${1:-tests/data/tiny-bpe}
TEXT=${2:-${XDG_CACHE_HOME:-$HOME/.cache}/memwall/kjv.txt}
source bench/tokenize_common.sh regex python3-regex
mw1=$($MW tokenize --tokenizer "$TOK" --data "$TEXT" --threads 1 --json)
mw=$($MW tokenize --tokenizer "$TOK" --data "$TEXT" --out "$WORK/mw.bin" --dtype u32 --json)
py=$($PY tests/engine/bpe_reference.py --encode "$TOK" "$TEXT" "$WORK/py.json")
$PY - "$mw" "$py" "$WORK" "$mw1" <<'PY'
import json, struct, sys
mw, py, work, mw1 = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
with open(work + "/mw.bin", "rb") as f:
    data = f.read()
mine = list(struct.unpack("<%dI" % (len(data) // 4), data))
with open(work + "/py.json") as f:
    ref = json.load(f)
first = next((i for i, (a, b) in enumerate(zip(mine, ref)) if a != b), None)
if len(mine) != len(ref) or first is not None:
    sys.exit(f"DIFFERENT tokens: memwall {len(mine)}, Python {len(ref)}, first difference at {first}")
mb = mw["bytes"] / 1e6
print(f"{mw['tokenizer']}: {mw['vocab']} tokens; {mb:.1f} MB of text -> {len(mine):,} tokens, every id the same")
print(f"{'':30} {'seconds':>8} {'MB/s':>7} {'ratio':>7}")
print(f"{'Python GPT-2 encoder (regex)':30} {py['seconds']:>8.2f} {mb / py['seconds']:>7.1f}")
for run, label in ((mw1, "memwall tokenize, 1 thread"), (mw, f"memwall tokenize, {mw['threads']} threads")):
    print(f"{label:30} {run['seconds']:>8.2f} {mb / run['seconds']:>7.1f} {py['seconds'] / run['seconds']:>6.1f}x")
if mw1["tokens"] != mw["tokens"]:
    sys.exit(f"DIFFERENT token counts: {mw1['tokens']} with 1 thread, {mw['tokens']} with {mw['threads']}")
PY
