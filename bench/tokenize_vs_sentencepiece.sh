#!/usr/bin/env bash
# memwall tokenize with a SentencePiece-style tokenizer.json (Llama 2's kind) against the SentencePiece library
# itself (Debian's python3-sentencepiece, C++ behind a Python call) on the same text: trains a BPE model with
# Llama 2's settings on the text (tests/engine/spm_reference.py), writes it as Hugging Face's tokenizer.json,
# checks that every token id agrees, then prints the times (memwall on one thread and on every core;
# SentencePiece's one encode call is one thread; its usual call, the lines as a batch of sentences, is timed
# too, though its ids differ by the U+2581 it puts before each line) and the ratios.
# Needs python3-sentencepiece. Usage: bash bench/tokenize_vs_sentencepiece.sh [VOCAB=8000] [TEXT=KJV]
set -euo pipefail
cd "$(dirname "$0")/.."
VOCAB=${1:-8000}
TEXT=${2:-${XDG_CACHE_HOME:-$HOME/.cache}/memwall/kjv.txt}
source bench/tokenize_common.sh sentencepiece python3-sentencepiece
sp=$($PY tests/engine/spm_reference.py "$WORK" "$TEXT" "$TEXT" "$VOCAB")
mw1=$($MW tokenize --tokenizer "$WORK" --data "$TEXT" --threads 1 --json)
mw=$($MW tokenize --tokenizer "$WORK" --data "$TEXT" --out "$WORK/mw.bin" --dtype u32 --json)
$PY - "$mw" "$sp" "$WORK" "$mw1" <<'PY'
import json, struct, sys
mw, sp, work, mw1 = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4])
with open(work + "/mw.bin", "rb") as f:
    data = f.read()
mine = list(struct.unpack("<%dI" % (len(data) // 4), data))
if mine[:1] == [mw["bos"]]:
    mine = mine[1:]  # the <s> memwall train puts before a document; SentencePiece's encode adds none
with open(work + "/ids.json") as f:
    ref = json.load(f)
first = next((i for i, (a, b) in enumerate(zip(mine, ref)) if a != b), None)
if len(mine) != len(ref) or first is not None:
    sys.exit(f"DIFFERENT tokens: memwall {len(mine)}, SentencePiece {len(ref)}, first difference at {first}")
mb = mw["bytes"] / 1e6
print(f"SentencePiece BPE of {mw['vocab']} pieces trained on the text; {mb:.1f} MB -> {len(ref):,} tokens, "
      "every id the same")
print(f"{'':34} {'seconds':>8} {'MB/s':>7} {'ratio':>7}")
print(f"{'SentencePiece 0.1.97 encode':34} {sp['seconds']:>8.2f} {mb / sp['seconds']:>7.1f}")
print(f"{'  the same, line by line (batch)':34} {sp['line_seconds']:>8.2f} {mb / sp['line_seconds']:>7.1f}"
      f"   ({sp['line_tokens']:,} tokens: a U+2581 before each line)")
for run, label in ((mw1, "memwall tokenize, 1 thread"), (mw, f"memwall tokenize, {mw['threads']} threads")):
    print(f"{label:34} {run['seconds']:>8.2f} {mb / run['seconds']:>7.1f} {sp['seconds'] / run['seconds']:>6.2f}x"
          f" ({sp['line_seconds'] / run['seconds']:.2f}x line by line)")
PY
