#!/usr/bin/env bash
# gpt-oss's o200k pre-tokenizer (and Llama 3's beside it) against the Python `regex` module: tokenizer.json
# files of each pattern that tests/engine/bpe_reference.py learns (2000 merges) on the text's first 300 KB,
# then `memwall tokenize --threads 1` of the whole text (pre-tokenizer and BPE) against `regex.findall` of the
# same pattern alone (the pre-tokenization only, no BPE), one thread each.
# Needs python3-regex. Usage: bash bench/o200k_vs_regex.sh [TEXT=KJV]
set -euo pipefail
cd "$(dirname "$0")/.."
TEXT=${1:-${XDG_CACHE_HOME:-$HOME/.cache}/memwall/kjv.txt}
source bench/tokenize_common.sh regex python3-regex
head -c 300000 "$TEXT" >"$WORK/corpus.txt"
echo x >"$WORK/x.txt"
for p in llama3 o200k; do
  mkdir -p "$WORK/$p"
  $PY tests/engine/bpe_reference.py "$WORK/$p" "$WORK/corpus.txt" "$WORK/x.txt" 2000 "$p" >/dev/null
  mw=$($MW tokenize --tokenizer "$WORK/$p" --data "$TEXT" --threads 1 --json)
  $PY - "$p" "$TEXT" "$mw" <<'PY'
import json, sys, time
sys.path.insert(0, "tests/engine")
import bpe_reference
import regex
name, path, mw = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
text = open(path, encoding="utf-8").read()
pattern = regex.compile(bpe_reference.PATTERNS[name])
t0 = time.perf_counter()
pieces = len(pattern.findall(text))
py = time.perf_counter() - t0
mb = mw["bytes"] / 1e6
print(f"{mw['pre_tokenizer']:8s} memwall tokenize {mw['seconds']:.3f} s ({mb / mw['seconds']:.0f} MB/s, {mw['tokens']:,} tokens)"
      f"   regex.findall {py:.3f} s ({mb / py:.1f} MB/s, {pieces:,} pieces)   memwall {py / mw['seconds']:.1f}x")
PY
done
