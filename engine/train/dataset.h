// Text corpus for training, as tokens: every byte one token (vocabulary 256), or GPT-2's BPE tokens
// (engine/train/bpe.h). The last `val_fraction` of the tokens is held out for validation, and training
// batches are a pure function of (seed, step), so a resumed run sees exactly the batches an uninterrupted run
// would.
//
// The default corpus is the King James Bible from Debian's bible-kjv package (`bible 'Gen1:1-Rev22:21'`,
// 4.3 MB of English text), materialised once into a cache file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/train/bpe.h"

namespace memwall::comm {
class Communicator;
}

namespace memwall::train {

class TextDataset {
 public:
  static constexpr int kVocab = 256;  // byte tokens

  // Errors name the file (or source), its size and what is needed: at least one window of T+1 tokens in
  // each split, and 0 < val_fraction < 1. With a tokenizer the file's text is encoded by it; without, each
  // byte is a token. Every reader of a path here also takes a directory: its regular files (not hidden) by
  // name, one after another; text files are then documents, marked as document_marks() says. A JSON Lines
  // file (.jsonl, .ndjson: one object per line, Hugging Face datasets' to_json) is a document per line, its
  // string "text" field (errors name the file and line); with byte tokens each such document ends in a
  // newline (one is added where it does not).
  // With `comm`, its ranks share the encoding (text_tokens); every rank must call alike.
  static Result<TextDataset> from_file(const std::string& path, double val_fraction, int seq,
                                       const BpeTokenizer* tokenizer = nullptr,
                                       comm::Communicator* comm = nullptr);
  static Result<TextDataset> from_bytes(std::vector<std::uint8_t> bytes, double val_fraction, int seq,
                                        std::string source);
  // Pre-tokenized text: little-endian unsigned token ids of `width` bytes each (2: nanoGPT's train.bin; 4),
  // every one below `vocab`. With the tokenizer that made them, val_bytes_per_token() is known; without, 0.
  static Result<TextDataset> from_token_file(const std::string& path, int width, int vocab,
                                             double val_fraction, int seq,
                                             const BpeTokenizer* tokenizer = nullptr);
  // Training tokens from all of `path`, held-out tokens from all of `val_path` (nanoGPT's train.bin and
  // val.bin, or two texts): `width` 0 reads text (bytes, or the tokenizer's encoding; `vocab` then follows),
  // 2 or 4 token ids below `vocab`. Each file needs seq+1 tokens. `comm`: as for from_file.
  static Result<TextDataset> from_files(const std::string& path, const std::string& val_path, int width,
                                        int vocab, int seq, const BpeTokenizer* tokenizer = nullptr,
                                        comm::Communicator* comm = nullptr);
  // Tokens of a vocabulary of `vocab` (each in [0, vocab)).
  static Result<TextDataset> from_tokens(std::vector<std::int32_t> tokens, int vocab, double val_fraction,
                                         int seq, std::string source);

  // B windows of T+1 tokens at offsets drawn uniformly from the training split by a generator seeded with
  // (seed, step); inputs are tokens [o, o+T), targets tokens [o+1, o+T]. tokens/targets: [B*T].
  void train_batch(std::uint64_t seed, std::uint64_t step, int B, int T, int* tokens, int* targets) const;
  // Validation batch k: consecutive, non-overlapping windows of the held-out split, wrapping around.
  void val_batch(std::uint64_t k, int B, int T, int* tokens, int* targets) const;
  // How many distinct validation windows of length T the held-out split holds.
  std::size_t val_windows(int T) const;

  std::size_t train_tokens() const { return split_; }
  std::size_t val_tokens() const { return tokens_.size() - split_; }
  int vocab() const { return vocab_; }
  // Bytes of text per token over the held-out split (1 for byte tokens; 0: unknown, token ids without their
  // tokenizer): a loss per token over ln 2 times its inverse is bits per byte, comparable across tokenizers.
  double val_bytes_per_token() const { return val_bytes_per_token_; }
  const std::string& source() const { return source_; }

 private:
  TextDataset(std::vector<std::int32_t> tokens, int vocab, std::size_t split, std::string source)
      : tokens_(std::move(tokens)), vocab_(vocab), split_(split), source_(std::move(source)) {}
  // val_bytes_per_token_ over the held-out split: the bytes of text its tokens stand for (special tokens:
  // none) per token; without a tokenizer, 1 for bytes read as tokens, 0 (unknown) for token ids.
  void measure_val_bytes(const BpeTokenizer* tokenizer, bool token_ids);

  std::vector<std::int32_t> tokens_;
  int vocab_ = kVocab;
  double val_bytes_per_token_ = 1;
  std::size_t split_ = 0;  // [0, split_) trains, [split_, size) validates
  std::string source_;
};

// The files a data path stands for: itself, or a directory's regular files (not hidden), by name (an error
// for a directory without any).
Result<std::vector<std::string>> data_files(const std::string& path);
// All the tokens of a text file, or of a directory's files as documents (the datasets' reading: with a
// tokenizer that has <|endoftext|>, or another special token, it separates them; bytes are joined as they
// are). `bytes` (when given) grows by the text's size.
// With a tokenizer and a `comm` of several ranks (every rank calls alike), the ranks share the work: each
// reads every file, they agree on that (a file one rank cannot read is that rank's error on all of them),
// each encodes a 1/size share of the text (encode_share) and they all-gather the shares: the same tokens.
Result<std::vector<std::int32_t>> text_tokens(const std::string& path, const BpeTokenizer* tokenizer,
                                              std::size_t* bytes = nullptr,
                                              comm::Communicator* comm = nullptr);
// The special tokens a training text's documents are marked with (-1: none): `between` two documents
// (<|endoftext|>: GPT-2's and Qwen2's), else `before` each (the beginning-of-text token Llama's
// post-processor puts before a text: documents as Hugging Face's tokenizers, and run_clm, give them), else
// the tokenizer's first special token between them.
struct DocumentMarks {
  int between = -1;
  int before = -1;
};
DocumentMarks document_marks(const BpeTokenizer* tokenizer);

// Share `part` of `parts` of the tokens of documents `docs` marked with `marks`: the text is cut where the
// tokenizer allows (BpeTokenizer::cuts, pieces of at least `min_bytes`), the pieces dealt out in order by
// their bytes; the shares of parts 0..parts-1, concatenated, are the tokens of one pass.
std::vector<std::int32_t> encode_share(const std::vector<std::string>& docs, const BpeTokenizer& tokenizer,
                                       DocumentMarks marks, int part, int parts, std::size_t min_bytes);

// Writes `tokens` as little-endian unsigned ids of `width` bytes (2 or 4), atomically (a temporary file
// renamed into place). Error when an id does not fit the width.
Status write_token_file(const std::string& path, const std::vector<int>& tokens, int width);
// All the token ids of a token file (little-endian, `width` 2 or 4 bytes each, every one below `vocab`), or
// of a directory's files one after another; an id out of range is one line naming the file and position.
Result<std::vector<std::int32_t>> read_token_ids(const std::string& path, int width, int vocab);

// Path of the King James Bible text, generating it with bible-kjv's `bible` into `cache_path` (written to a
// temporary file and renamed) when that file does not exist yet. Error, with the package to install, when
// `bible` is not available.
Result<std::string> kjv_corpus(const std::string& cache_path);

}  // namespace memwall::train
