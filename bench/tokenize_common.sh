# Sourced by the tokenizer benchmarks (tokenize_vs_python.sh, tokenize_vs_sentencepiece.sh,
# o200k_vs_regex.sh), from the repository root with TEXT set: MW and PY, the build and the Python module
# `$1` (Debian's package `$2`) checked, the default corpus (the KJV) materialised where TEXT is missing, and
# WORK a temporary directory removed on exit.
MW=./build/cli/memwall
PY=/usr/bin/python3
[ -x "$MW" ] || { echo "build first: bash scripts/setup.sh" >&2; exit 1; }
$PY -c "import $1" 2>/dev/null || { echo "needs $2: apt-get install $2" >&2; exit 1; }
[ -f "$TEXT" ] || $MW train --steps 1 --eval-batches 1 >/dev/null  # materialises the default corpus
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
