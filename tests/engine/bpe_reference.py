#!/usr/bin/env python3
"""Reference for engine/train/bpe.cpp's test: learns a small byte-level BPE on a corpus and writes it in
Hugging Face GPT-2's layout (vocab.json, merges.txt), then encodes a text the way Hugging Face's GPT-2 tokenizer does:
special tokens (<|...|>) split out, then GPT-2's pre-tokenizer pattern run by the `regex` module (Unicode
\\p{L}, \\p{N}, \\s), then the lowest-ranked pair merged everywhere until none is left. Writes OUT/ids.json (the text's tokens) and OUT/pieces.json (its pieces).
With PATTERN llama3, qwen2, o200k or tekken the same with their pre-tokenizer pattern (as their tokenizer.json's
Split has it), written as a tokenizer.json: Llama 3's and o200k's BPE ignores merges for a piece that is a token (and the
vocabulary gets one token no merge makes, " quux"), Qwen2's normalizes the text to NFC first (Python's
unicodedata); their special tokens are added tokens after the vocabulary. With falcon, starcoder or bloom:
their pre-tokenizer Sequences (split_text), in a tokenizer.json. Pieces are written as lists of their bytes.

With PATTERN llama2, mistral or gemma: a SentencePiece-style tokenizer.json as Hugging Face converts Llama 2's,
Mistral's and Gemma's: spaces become U+2581 (META), which Llama 2's Prepend normalizer puts before every text
between special tokens, Gemma's Replace normalizer nowhere else, and Mistral's Metaspace pre-tokenizer
(prepend_scheme first) before the first one unless it
starts with a space; the whole text is one piece of characters (a character the vocabulary lacks becomes its
UTF-8 bytes' tokens <0x00>..<0xFF>) merged lowest rank first, leftmost first. Its merges are learnt on the
corpus's words (each from a META on) and the vocabulary keeps the characters seen at least twice but the
newline (Llama 2's and Mistral's vocabularies write it as its byte token <0x0A> only).

usage: bpe_reference.py OUT CORPUS TEXT MERGES
           [gpt2|llama3|qwen2|falcon|starcoder|bloom|llama2|mistral|gemma]
       bpe_reference.py --encode DIR TEXT OUT.json   (DIR's vocab.json and merges.txt; prints {"tokens", "seconds"})
       bpe_reference.py --pieces PATTERN IN.json OUT.json   (a list of texts -> [{"pieces", "nfc"}] each;
                                                             PATTERN also o200k or tekken)
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
    # gpt-oss's (tiktoken's o200k) and Mistral's Tekken (without the contractions, each number alone)
    "o200k": r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
             r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?"""
             r"""|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
    "tekken": r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"""
              r"""|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"""
              r"""|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}
PATTERN = regex.compile(PATTERNS["gpt2"])
NFC = False  # Qwen2's normalizer
WHOLE = False  # Llama 3's ignore_merges
NAME = "gpt2"

# Falcon's and StarCoder's pre-tokenizers: Hugging Face Sequences of several steps, each splitting every piece
# the one before left (Split's "Isolated": the matches and the text between them). Punctuation is Unicode's
# P* or ASCII's punctuation and symbols (Rust's is_ascii_punctuation); a number is Unicode's N* (Rust's
# is_numeric). Steps after ByteLevel see the GPT-2 characters of the piece's bytes.
PRE_TOKENIZERS = {
    "falcon": {"type": "Sequence", "pretokenizers": [
        {"type": "Punctuation", "behavior": "Contiguous"},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        {"type": "Digits", "individual_digits": False},
        {"type": "Split", "pattern": {"Regex": "[0-9][0-9][0-9]"}, "behavior": "Isolated", "invert": False}]},
    "bloom": {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": " ?[^(\\s|[.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c])]+"},
         "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]},
    "starcoder": {"type": "Sequence", "pretokenizers": [
        {"type": "Digits", "individual_digits": True},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]},
}
PUNCTUATION_RUN = regex.compile(r"[\p{P}!-/:-@\[-`{-~]+")
NUMBER, NUMBER_RUN, THREE_DIGITS = regex.compile(r"\p{N}"), regex.compile(r"\p{N}+"), regex.compile("[0-9]{3}")
# BLOOM's Split, its Oniguruma nested class written flat (as transformers.js rewrites it).
BLOOM_WORD = regex.compile(" ?[^()|\\s.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c]+")


def isolated(pattern, text):
    """Split's Isolated behaviour: the matches of `pattern` and the (non-empty) text between them."""
    out, at = [], 0
    for m in pattern.finditer(text):
        if m.start() > at:
            out.append(text[at:m.start()])
        out.append(m.group())
        at = m.end()
    if at < len(text):
        out.append(text[at:])
    return out


def split_text(text):
    """The pre-tokenizer's pieces of `text`, as bytes."""
    if NAME == "bloom":
        return [p.encode("utf-8") for p in isolated(BLOOM_WORD, text)]
    if NAME == "starcoder":
        return [p.encode("utf-8") for part in isolated(NUMBER, text) for p in PATTERN.findall(part)]
    if NAME != "falcon":
        return [p.encode("utf-8") for p in PATTERN.findall(text)]
    chars = byte_chars()
    inverse = {c: b for b, c in chars.items()}
    out = []
    for part in isolated(PUNCTUATION_RUN, text):
        for piece in PATTERN.findall(part):
            mapped = "".join(chars[b] for b in piece.encode("utf-8"))
            for numbers in isolated(NUMBER_RUN, mapped):
                out.extend(bytes(inverse[c] for c in p) for p in isolated(THREE_DIGITS, numbers))
    return out


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
    words = collections.Counter(tuple(chars[b] for b in piece) for piece in split_text(corpus))
    return learn_words(words, merges, lambda a, b: True)


def learn_words(words, merges, allowed):
    """`merges` merges of the most frequent allowed pair (the greatest on a tie) of the words' symbols."""
    ranks = []
    for _ in range(merges):
        pairs = collections.Counter()
        for word, n in words.items():
            for a, b in zip(word, word[1:]):
                if allowed(a, b):
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


META = "\u2581"
SP_SPECIALS = ["<unk>", "<s>", "</s>"]


def sp_normalize(part, scheme, first):
    """A text between special tokens as the SentencePiece-style normalizer / pre-tokenizer leaves it."""
    text = part.replace(" ", META)
    if scheme == "llama2":
        prepend = bool(part)
    elif scheme == "gemma":  # the Replace alone: no U+2581 is added
        prepend = False
    else:  # Metaspace, prepend_scheme first
        prepend = first and bool(part) and not text.startswith(META)
    return (META if prepend else "") + text


def sp_learn(corpus, merges):
    words = collections.Counter()
    for line in sp_normalize(corpus, "llama2", True).split(META):
        if line:
            words[(META,) + tuple(line)] += 1
    return learn_words(words, merges, lambda a, b: a != "\n" and b != "\n")  # a newline stays a byte token


def sp_encode(text, ranks, vocab, scheme):
    rank = {pair: r for r, pair in enumerate(ranks)}
    ids, pieces = [], []
    parts = regex.split("(" + "|".join(regex.escape(t) for t in SP_SPECIALS) + ")", text)
    offset = 0
    for k, part in enumerate(parts):
        if k % 2 == 1:
            ids.append(vocab[part])
        elif part:
            piece = sp_normalize(part, scheme, offset == 0)
            pieces.append(piece)
            symbols = []
            for ch in piece:
                if ch in vocab:
                    symbols.append(ch)
                else:
                    symbols.extend(f"<0x{b:02X}>" for b in ch.encode("utf-8"))
            while True:  # one merge at a time: the lowest rank, then the leftmost
                best = None
                for i in range(len(symbols) - 1):
                    r = rank.get((symbols[i], symbols[i + 1]))
                    if r is not None and (best is None or r < best[0]):
                        best = (r, i)
                if best is None:
                    break
                i = best[1]
                symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
            ids.extend(vocab[s] for s in symbols)
        offset += len(part)
    return ids, pieces


def sp_main(out, corpus, text, merges, scheme):
    ranks = sp_learn(corpus, merges)
    vocab = {t: i for i, t in enumerate(SP_SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    counts = collections.Counter(sp_normalize(corpus, "llama2", True))
    for ch, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        if n >= 2 and ch != "\n":
            vocab.setdefault(ch, len(vocab))
    for a, b in ranks:
        vocab.setdefault(a + b, len(vocab))
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(SP_SPECIALS)]
    model = {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
             "vocab": vocab}
    replace = {"type": "Replace", "pattern": {"String": " "}, "content": META}
    if scheme == "llama2":
        model["merges"] = [f"{a} {b}" for a, b in ranks]
        normalizer = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": META}, replace]}
        pre_tokenizer = None
        decoder = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": META}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    elif scheme == "gemma":  # Gemma's: the Replace alone, nothing stripped when decoding
        model["merges"] = [f"{a} {b}" for a, b in ranks]
        normalizer, pre_tokenizer = replace, None
        decoder = {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": META}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}]}
    else:
        model["merges"] = [[a, b] for a, b in ranks]
        normalizer = None
        pre_tokenizer = {"type": "Metaspace", "replacement": META, "prepend_scheme": "first", "split": False}
        decoder = {"type": "Metaspace", "replacement": META, "prepend_scheme": "first", "split": False}
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    post = {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [bos, {"Sequence": {"id": "A", "type_id": 0}}, bos, {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    tokenizer = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
                 "normalizer": normalizer, "pre_tokenizer": pre_tokenizer, "post_processor": post,
                 "decoder": decoder, "model": model}
    with open(out + "/tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    ids, pieces = sp_encode(text, ranks, vocab, scheme)
    with open(out + "/ids.json", "w", encoding="utf-8") as f:
        json.dump(ids, f)
    with open(out + "/pieces.json", "w", encoding="utf-8") as f:
        json.dump(pieces, f, ensure_ascii=False)


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
    for piece in split_text(text):
        pieces.append(list(piece))
        if piece not in cache:  # GPT-2's encoder caches each piece's tokens too
            word = tuple(chars[b] for b in piece)
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
    global PATTERN, NAME
    PATTERN, NAME = regex.compile(PATTERNS.get(name, PATTERNS["gpt2"])), name
    with open(in_path, encoding="utf-8") as f:
        texts = json.load(f)
    rows = [{"pieces": [list(p) for p in split_text(t)], "nfc": unicodedata.normalize("NFC", t)} for t in texts]
    with open(out, "w", encoding="utf-8") as f:
        json.dump(rows, f, ensure_ascii=False)


def main():
    global PATTERN, NFC, WHOLE, NAME
    if sys.argv[1] == "--encode":
        encode_with(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    if sys.argv[1] == "--pieces":
        pieces_of(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    out, corpus_path, text_path, merges = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    name = sys.argv[5] if len(sys.argv) > 5 else "gpt2"
    if name in ("llama2", "mistral", "gemma"):
        with open(corpus_path, encoding="utf-8", newline="") as f:
            corpus = f.read()
        with open(text_path, encoding="utf-8", newline="") as f:
            text = f.read()
        sp_main(out, corpus, text, merges, name)
        return
    NAME = name
    PATTERN = regex.compile(PATTERNS.get(name, PATTERNS["gpt2"]))
    NFC, WHOLE = name == "qwen2", name in ("llama3", "o200k")  # (tiktoken's conversions ignore merges)
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
            "pre_tokenizer": PRE_TOKENIZERS.get(name) or {"type": "Sequence", "pretokenizers": [
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
