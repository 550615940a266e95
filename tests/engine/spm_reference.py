#!/usr/bin/env python3
"""Reference for memwall's SentencePiece-style tokenizer.json (engine/train/bpe.cpp) from the SentencePiece
library itself (Debian's python3-sentencepiece): trains a BPE model on CORPUS with Llama 2's settings
(byte_fallback, split_digits, a dummy prefix, whitespace kept, no normalization), writes it as the
tokenizer.json Hugging Face converts such a model to (Llama 2's layout: <unk> <s> </s>, the byte tokens, the
pieces; Prepend and Replace normalizer; every split of a piece into two pieces a merge, ranked by the piece's
score), and encodes TEXT with SentencePiece: OUT/tokenizer.json, OUT/ids.json; prints {"tokens", "seconds"}
(the encoding's, one call on one thread) and the same for the text's lines as a batch ("line_tokens",
"line_seconds"; SentencePiece puts U+2581 before each line, so those ids are not the text's).

usage: spm_reference.py OUT CORPUS TEXT VOCAB_SIZE
"""
import json
import sys
import time

import sentencepiece

META = "\u2581"


def main():
    out, corpus, text_path, vocab_size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    sentencepiece.SentencePieceTrainer.train(
        input=corpus, model_prefix=out + "/spm", vocab_size=vocab_size, model_type="bpe", byte_fallback=True,
        split_digits=True, add_dummy_prefix=True, remove_extra_whitespaces=False,
        normalization_rule_name="identity", allow_whitespace_only_pieces=True, character_coverage=0.9995,
        max_sentencepiece_length=16, shuffle_input_sentence=False, num_threads=1, minloglevel=2,
        input_sentence_size=0)
    sp = sentencepiece.SentencePieceProcessor(model_file=out + "/spm.model")
    vocab = {sp.id_to_piece(i): i for i in range(sp.get_piece_size())}
    # SentencePiece merges the adjacent pair whose concatenation is the piece of the highest score: as a
    # merges list, every split of a piece into two pieces, the pieces by score, a piece's splits left first.
    merges = []
    for i in range(sp.get_piece_size()):
        if sp.is_byte(i) or sp.is_control(i) or sp.is_unknown(i):
            continue
        piece = sp.id_to_piece(i)
        for k in range(1, len(piece)):
            if piece[:k] in vocab and piece[k:] in vocab:
                merges.append((-sp.get_score(i), i, k, piece[:k], piece[k:]))
    merges.sort()
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, t in enumerate(["<unk>", "<s>", "</s>"])]
    bos = {"SpecialToken": {"id": "<s>", "type_id": 0}}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": META},
            {"type": "Replace", "pattern": {"String": " "}, "content": META}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing", "single": [bos, {"Sequence": {"id": "A", "type_id": 0}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": META}, "content": " "}, {"type": "ByteFallback"},
            {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for _, _, _, a, b in merges]}}
    with open(out + "/tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(text_path, encoding="utf-8", newline="") as f:
        text = f.read()
    start = time.perf_counter()
    ids = sp.encode(text)
    seconds = time.perf_counter() - start
    with open(out + "/ids.json", "w", encoding="utf-8") as f:
        json.dump(ids, f)
    # SentencePiece's usual call: a batch of sentences, here the text's lines (each gets its own U+2581).
    lines = text.split("\n")
    start = time.perf_counter()
    line_ids = sp.encode(lines)
    line_seconds = time.perf_counter() - start
    print(json.dumps({"tokens": len(ids), "seconds": seconds, "line_tokens": sum(len(x) for x in line_ids),
                      "line_seconds": line_seconds}))


if __name__ == "__main__":
    main()
