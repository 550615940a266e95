#!/usr/bin/env python3
"""Reference for engine/train/bpe.cpp's test: learns a small byte-level BPE on a corpus and writes it in
Hugging Face GPT-2's layout (vocab.json, merges.txt), then encodes a text the way Hugging Face's GPT-2 tokenizer does:
special tokens (<|...|>) split out, then GPT-2's pre-tokenizer pattern run by the `regex` module (Unicode
\\p{L}, \\p{N}, \\s), then the lowest-ranked pair merged everywhere until none is left. Writes OUT/ids.json (the text's tokens) and OUT/pieces.json (its pieces).
With PATTERN llama3 or qwen2 the same with their pre-tokenizer pattern (as their tokenizer.json's Split has
it), written as a tokenizer.json: Llama 3's BPE ignores merges for a piece that is a token (and the
vocabulary gets one token no merge makes, " quux"), Qwen2's normalizes the text to NFC first (Python's
unicodedata); their special tokens are added tokens after the vocabulary.

usage: bpe_reference.py OUT CORPUS TEXT MERGES [gpt2|llama3|qwen2]
       bpe_reference.py --encode DIR TEXT OUT.json   (DIR's vocab.json and merges.txt; prints {"tokens", "seconds"})
       bpe_reference.py --pieces PATTERN IN.json OUT.json   (a list of texts -> [{"pieces", "nfc"}] each)
"""
import collections
import json
import sys
import time

import unicodedata

import regex

PATTERNS = {
    "gpt2": r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
              r"""|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "qwen2": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
             r"""|\s*[\r\n]+|\s+(?!\S)|\s+""",
}
PATTERN = regex.compile(PATTERNS["gpt2"])
NFC = False  # Qwen2's normalizer
WHOLE = False  # Llama 3's ignore_merges


def byte_chars():
    """GPT-2's byte -> printable character map."""
    keep = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or b >= 174]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def learn(corpus, merges):
    chars = byte_chars()
    words = collections.Counter(
        tuple(chars[b] for b in piece.encode("utf-8")) for piece in PATTERN.findall(corpus))
    ranks = []
    for _ in range(merges):
        pairs = collections.Counter()
        for word, n in words.items():
            for a, b in zip(word, word[1:]):
                pairs[(a, b)] += n
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        ranks.append(best)
        merged = collections.Counter()
        for word, n in words.items():
            merged[merge(word, best)] += n
        words = merged
    return ranks


def merge(word, pair):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == pair[0] and word[i + 1] == pair[1]:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def encode(text, ranks, vocab):
    chars = byte_chars()
    rank = {pair: r for r, pair in enumerate(ranks)}
    ids, pieces = [], []
    # Special tokens (<|...|>) first, as Hugging Face's GPT-2 tokenizers split them out.
    specials = sorted((t for t in vocab if len(t) > 4 and t.startswith("<|") and t.endswith("|>")), key=len,
                      reverse=True)
    if specials:
        parts = regex.split("(" + "|".join(regex.escape(t) for t in specials) + ")", text)
    else:
        parts = [text]
    for k, part in enumerate(parts):
        if k % 2 == 1:
            ids.append(vocab[part])
            continue
        if NFC:
            part = unicodedata.normalize("NFC", part)
        part_ids, part_pieces = encode_ordinary(part, chars, rank, vocab)
        ids.extend(part_ids)
        pieces.extend(part_pieces)
    return ids, pieces


def encode_ordinary(text, chars, rank, vocab):
    ids, pieces, cache = [], [], {}
    for piece in PATTERN.findall(text):
        pieces.append(piece)
        if piece not in cache:  # GPT-2's encoder caches each piece's tokens too
            word = tuple(chars[b] for b in piece.encode("utf-8"))
            if WHOLE and "".join(word) in vocab:
                cache[piece] = [vocab["".join(word)]]
                ids.extend(cache[piece])
                continue
            while len(word) > 1:
                pairs = [(rank[p], p) for p in zip(word, word[1:]) if p in rank]
                if not pairs:
                    break
                word = merge(word, min(pairs)[1])
            cache[piece] = [vocab[t] for t in word]
        ids.extend(cache[piece])
    return ids, pieces


def encode_with(directory, text_path, out):
    with open(directory + "/vocab.json", encoding="utf-8") as f:
        vocab = json.load(f)
    with open(directory + "/merges.txt", encoding="utf-8") as f:
        ranks = [tuple(line.split(" ")) for line in f.read().splitlines()
                 if line and not line.startswith("#version")]
    with open(text_path, "rb") as f:
        text = f.read().decode("utf-8")
    start = time.perf_counter()
    ids, _ = encode(text, ranks, vocab)
    seconds = time.perf_counter() - start
    with open(out, "w", encoding="utf-8") as f:
        json.dump(ids, f)
    print(json.dumps({"tokens": len(ids), "seconds": seconds}))


def pieces_of(name, in_path, out):
    pattern = regex.compile(PATTERNS[name])
    with open(in_path, encoding="utf-8") as f:
        texts = json.load(f)
    rows = [{"pieces": pattern.findall(t), "nfc": unicodedata.normalize("NFC", t)} for t in texts]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(rows, f, ensure_ascii=False)


def main():
    global PATTERN, NFC, WHOLE
    if sys.argv[1] == "--encode":
        encode_with(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    if sys.argv[1] == "--pieces":
        pieces_of(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    out, corpus_path, text_path, merges = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    name = sys.argv[5] if len(sys.argv) > 5 else "gpt2"
    PATTERN, NFC, WHOLE = regex.compile(PATTERNS[name]), name == "qwen2", name == "llama3"
    with open(corpus_path, encoding="utf-8", newline="") as f:
        corpus = f.read()
    with open(text_path, encoding="utf-8", newline="") as f:
        text = f.read()
    ranks = learn(corpus, merges)
    chars = byte_chars()
    vocab = {chars[b]: i for i, b in enumerate(sorted(range(256), key=lambda b: ord(chars[b])))}
    for a, b in ranks:
        vocab.setdefault(a + b, len(vocab))
    if name == "gpt2":
        vocab["<|endoftext|>"] = len(vocab)
        with open(out + "/vocab.json", "w", encoding="utf-8") as f:
            json.dump(vocab, f, ensure_ascii=False)
        with open(out + "/merges.txt", "w", encoding="utf-8") as f:
            f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in ranks))
    else:
        if WHOLE:
            vocab.setdefault("".join(chars[b] for b in b" quux"), len(vocab))
        model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                 "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": WHOLE,
                 "vocab": dict(vocab), "merges": [[a, b] for a, b in ranks]}
        added = [{"id": len(vocab), "content": "<|endoftext|>", "special": True},
                 {"id": len(vocab) + 1, "content": "<|im_start|>", "special": True}]
        for a in added:
            vocab[a["content"]] = a["id"]
        tokenizer = {
            "version": "1.0", "added_tokens": added,
            "normalizer": {"type": "NFC"} if NFC else None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": PATTERNS[name]}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
            "decoder": {"type": "ByteLevel"}, "model": model}
        with open(out + "/tokenizer.json", "w", encoding="utf-8") as f:
            json.dump(tokenizer, f, ensure_ascii=False)
    ids, pieces = encode(text, ranks, vocab)
    with open(out + "/ids.json", "w", encoding="utf-8") as f:
        json.dump(ids, f)
    with open(out + "/pieces.json", "w", encoding="utf-8") as f:
        json.dump(pieces, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
