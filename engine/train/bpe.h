// BPE tokenizers, read from a Hugging Face model directory's vocab.json and merges.txt (GPT-2's; with its
// added_tokens.json when there is one) or its tokenizer.json (GPT-2's, GPT-NeoX's, Llama 3's, Qwen2's,
// gpt-oss's, Mistral Nemo's and Small's (Tekken), Falcon's or StarCoder's: byte-level BPE behind one of their
// pre-tokenizers; Llama 2's or Mistral's: SentencePiece-style BPE over characters), so that memwall train can
// continue a real checkpoint on new text and memwall generate can sample it.
//
// Encoding follows GPT-2's: the text is split by its pre-tokenizer pattern (contractions 's 't 're 've 'm 'll
// 'd; an optional space then letters; an optional space then numbers; an optional space then other
// characters; whitespace, leaving a space to start the next piece), each piece's bytes become the byte
// tokens, and the lowest-ranked adjacent pair in merges.txt is merged, everywhere in the piece, until none
// is left. Letters and numbers are Unicode's general categories L* and N* (a table generated from Unicode
// 14, scripts/gen_unicode_classes.py); whitespace is Unicode's White_Space property. Bytes that are not valid
// UTF-8 are pieces of their own, so any file encodes, and decode(encode(x)) == x for every byte string.
//
// Llama 3's and Qwen2's tokenizer.json split the text by another pattern (PreTokenizer::kLlama3 / kQwen2, see
// pretokenize()) before the same byte-level BPE, and so do gpt-oss's (o200k's pattern, kO200k: letter runs by
// case, [Lu Lt Lm Lo M]* then [Ll Lm Lo M]+ or [Lu Lt Lm Lo M]+ then [Ll Lm Lo M]*, each with an optional
// contraction after it) and Mistral's Tekken (kTekken: that without the contractions, each number alone);
// Qwen2's first normalizes the text to Unicode's NFC (nfc.h), so there decode(encode(x)) == nfc(x). Llama 3's
// BPE model has ignore_merges: a piece that is a vocabulary token as a whole is that token, merges or not.
// encode() adds no beginning-of-text token (see bos()). Llama 2's and Mistral's tokenizer.json
// (PreTokenizer::kSentencePiece) are SentencePiece models converted to BPE: a text's spaces become "\u2581"
// (U+2581, written ▁ below), which is also put before the text (Llama 2's Prepend normalizer: before every
// text between special tokens; a Metaspace pre-tokenizer: unless it starts with a space, before the first
// text only or every one, as its prepend_scheme says), then the whole text is one piece whose characters are
// the symbols: a character the vocabulary lacks becomes the tokens of its UTF-8 bytes (<0x00>..<0xFF>,
// byte_fallback), and merges apply lowest rank first, leftmost first, as Hugging Face's BPE does. Tokens'
// bytes() have ▁ as a space and a byte token as its byte; decode() drops the one leading space the encoder
// put there, as their decoders do, so decode(encode(x)) == x for every byte string that does not start with a
// space (Metaspace) and holds no special token. Special tokens, the vocabulary's entries written <|...|>
// (GPT-2's <|endoftext|>), and added tokens (tokenizer.json's, special or not; added_tokens.json's) are
// recognised in the text as themselves before anything else, the leftmost first, the longest where several
// start there, as Hugging Face's tokenizers do (GPT-2's own encoder did not); a document separator in the
// training text thus becomes the token the model was trained with. Their lstrip, rstrip and single_word flags
// are not implemented: a token is matched where it stands.
//
// Immutable after load(); const methods are safe from several threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace memwall::train {

// The pattern a text is split by before BPE (Hugging Face's pre-tokenizer). GPT-2's; or the one Llama 3 and
// Qwen2 share: contractions case-insensitively, a run of letters with at most one leading character that
// is not a newline, letter or number, numbers in runs of at most 3 (Llama 3) or one by one (Qwen2), an
// optional space then other characters and the newlines after them, whitespace through its last newline,
// then GPT-2's whitespace rules.
// StarCoder's (GPT-BigCode's) first makes each number (N*) a piece of its own, then splits the rest by
// GPT-2's pattern. Falcon's first splits the text into runs of punctuation (Unicode's P* and ASCII's
// punctuation and symbols) and runs of the rest, then each by GPT-2's pattern, then each piece's bytes into
// runs of number bytes and the rest (a byte whose GPT-2 character is a number: the ASCII digits, and the
// bytes B2 B3 B9 BC BD BE, as Hugging Face's tokenizers see them after the byte mapping, even inside a UTF-8
// sequence), then cuts three ASCII digits off where they start, left to right.
// BLOOM's splits the text by its pattern " ?[^(\s|[.,!?…。，、।۔،])]+" (an optional space, then a run of
// characters that are neither whitespace, a paren, a bar nor one of those marks) and keeps the text between
// matches as pieces too.
// kSentencePiece: no split (the text between special tokens is one piece), characters then bytes.
enum class PreTokenizer {
  kGpt2,
  kLlama3,
  kQwen2,
  kO200k,
  kTekken,
  kFalcon,
  kStarCoder,
  kBloom,
  kSentencePiece
};
// "GPT-2", "Llama 3", "Qwen2", "o200k", "Tekken", "Falcon", "StarCoder", "BLOOM", "SentencePiece".
const char* pre_tokenizer_name(PreTokenizer pre);

class BpeTokenizer {
 public:
  // DIR/vocab.json and DIR/merges.txt, else DIR/tokenizer.json. Errors name the file and the entry (a token
  // that is not byte-level BPE, a merge whose parts or result the vocabulary lacks, ids that are not 0..n-1,
  // a tokenizer.json of another kind of tokenizer).
  static Result<BpeTokenizer> load(const std::string& dir);
  // The same from the files' contents; `source` (the directory) names them in errors.
  static Result<BpeTokenizer> parse(std::string_view vocab_json, std::string_view merges_txt,
                                    const std::string& source);
  static Result<BpeTokenizer> parse_tokenizer_json(std::string_view tokenizer_json,
                                                   const std::string& source);
  // Whether DIR holds vocab.json and merges.txt, or tokenizer.json.
  static bool present(const std::string& dir);
  // The files of source() it was read from: {"vocab.json", "merges.txt"} or {"tokenizer.json"}.
  const std::vector<std::string>& files() const { return files_; }

  // A text of several MiB is encoded on up to set_threads() threads (the same tokens as one pass).
  // `continues`: the text goes on from text already encoded (a piece after one of cuts()), so SentencePiece's
  // ▁ is not put before it.
  std::vector<int> encode(std::string_view text, bool continues = false) const;
  // Where `text` may be cut into at most `parts` pieces of at least `min_part` bytes (roughly equal) so
  // that encoding each alone (the ones after the first with `continues`) gives the tokens of one pass: 0,
  // the cuts (where a line starts with a non-space character after a line that ends with one, as in
  // "a\nb"; SentencePiece: after any newline, when the
  // vocabulary writes a newline only as its byte token, which no merge takes), text.size(). {0, size}
  // alone when it cannot be cut (short, no such line start, or a special token holding a newline).
  std::vector<std::size_t> cuts(std::string_view text, std::size_t parts, std::size_t min_part) const;
  // The bytes of ids[0..n) (ids outside the vocabulary are skipped; SentencePiece: less one leading space
  // when the encoder puts ▁ before a text).
  std::string decode(const int* ids, std::size_t n) const;
  // One token's bytes.
  const std::string& bytes(int id) const { return bytes_[static_cast<std::size_t>(id)]; }
  int vocab_size() const { return static_cast<int>(bytes_.size()); }
  std::size_t merges() const { return merges_.size(); }
  // The special tokens' ids, in vocabulary order: the vocabulary's <|...|> entries and the added tokens
  // marked special. Added tokens that are not (runs of spaces in CodeGen's, Phi's and GPT-NeoX's) are
  // matched in the text as themselves too, as Hugging Face's tokenizers do, but stand for text.
  std::vector<int> special_tokens() const;
  // The beginning-of-text token tokenizer.json's post-processor puts before a text (a TemplateProcessing
  // whose single template starts with a special token: Llama 2's <s>, Llama 3's <|begin_of_text|>), else -1.
  // encode() does not add it; memwall generate puts it before the prompt, and a training text's documents
  // each start with it when the vocabulary has no <|endoftext|> (dataset.h, DocumentMarks).
  int bos() const { return bos_; }
  PreTokenizer pre_tokenizer() const { return pre_; }
  // Whether the text is normalized to NFC first (Qwen2's normalizer).
  bool normalizes() const { return nfc_; }
  const std::string& source() const { return source_; }
  // Pieces longer than this many bytes are merged from a heap (default 64; tests set 0 or a huge value to
  // run one path only).
  void set_long_piece_bytes(std::size_t n) { long_piece_bytes_ = n; }
  // Threads encode() may use on a long text, cut into pieces of at least 1 MiB (default 1).
  void set_threads(int n) { threads_ = n < 1 ? 1 : n; }

 private:
  struct Merge {
    int rank, merged;
  };
  // Where SentencePiece's ▁ goes before a text between special tokens: never; before every one (Llama 2's
  // Prepend normalizer); before every one / the first that does not start with a space (Metaspace's
  // prepend_scheme always / first).
  enum class Prepend { kNever, kEvery, kEveryUnlessSpace, kFirstUnlessSpace };
  BpeTokenizer() = default;
  // A tokenizer.json's SentencePiece-style BPE model (vocabulary, merges, byte tokens).
  static Result<BpeTokenizer> parse_sentencepiece(const nlohmann::json& model, const std::string& name,
                                                  const std::string& source, Prepend prepend);
  // parse() with the names its errors give the two texts.
  static Result<BpeTokenizer> parse_named(std::string_view vocab_json, std::string_view merges_txt,
                                          const std::string& source, const std::string& vocab_name,
                                          const std::string& merges_name);
  // An added token (tokenizer.json's added_tokens, added_tokens.json): its vocabulary entry, or the next id
  // with `content` as its bytes; matched in the text as itself, and one of special_tokens() when `special`.
  // The error's message continues the entry's name.
  Status add_token(const std::string& content, long id, bool special);
  void sort_specials();
  // encode() on one thread.
  std::vector<int> encode_serial(std::string_view text, bool continues) const;
  // One piece's tokens appended to `out`: GPT-2's loop (merge every occurrence of the lowest-ranked pair,
  // again) for pieces up to long_piece_bytes_, else the same merges from a heap of candidate pairs (lowest
  // rank, then leftmost), O(n log n) instead of O(n) per merge for a long run of letters or punctuation.
  // The two agree for merges lists where a merge comes after the merges that make its parts (every trained
  // one); tests compare them.
  void encode_piece(std::string_view piece, std::vector<int>& out) const;
  void encode_long_piece(std::string_view piece, std::vector<int>& out) const;
  // The merges from the heap over symbols `id` (consumed), appended to `out`.
  void merge_from_heap(std::vector<int> id, std::vector<int>& out) const;
  // A SentencePiece piece: its characters' tokens (else their bytes'), merged from the heap.
  void encode_sentencepiece(std::string_view piece, std::vector<int>& out) const;
  // A piece already encoded -> [first, last) of its tokens in the output.
  using PieceCache = std::unordered_map<std::string_view, std::pair<std::size_t, std::size_t>>;
  // Ordinary text (no special tokens in it), appended to `out`.
  void encode_text(std::string_view text, std::vector<int>& out, PieceCache& cache) const;
  // SentencePiece: where the piece starting at s[i] ends (the text's end unless word_pieces_).
  std::size_t sentencepiece_piece_end(std::string_view s, std::size_t i) const;

  std::vector<std::string> bytes_;                   // [vocab] each token's bytes
  int byte_token_[256] = {};                         // the token of each single byte
  std::unordered_map<std::uint64_t, Merge> merges_;  // (left << 32 | right) -> rank and merged token
  std::vector<int> specials_;    // tokens matched in the text as themselves (special or added), longest first
  std::vector<int> text_added_;  // those of them that are not special (added tokens that stand for text)
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  bool nfc_ = false;
  std::unordered_map<std::string, int> whole_;  // ignore_merges: the vocabulary by bytes (else empty)
  // SentencePiece: the single-character tokens, where ▁ goes, whether a newline is only ever its byte token,
  // whether no token has a ▁ after another character (then a ▁ after another character starts a piece
  // no merge crosses, and the pieces are cached as GPT-2's are).
  std::unordered_map<char32_t, int> char_token_;
  Prepend prepend_ = Prepend::kNever;
  bool newline_cuts_ = false;
  bool word_pieces_ = false;
  int bos_ = -1;
  std::string source_;
  std::vector<std::string> files_;
  std::size_t long_piece_bytes_ = 64;
  int threads_ = 1;
};

// The tokenizer a command uses: `choice` "bytes": none; a directory: its files (an error when they are
// missing); empty: `model_dir`'s files when it has them, else none (bytes are tokens). `what` names the
// option in errors. A tokenizer of more tokens than `max_vocab` (when > 0) is refused.
Result<std::optional<BpeTokenizer>> choose_tokenizer(const std::string& choice, const std::string& model_dir,
                                                     int max_vocab, const std::string& what);

// The pre-tokenizer's pieces of `text`, in order, covering it exactly.
std::vector<std::string_view> pretokenize(std::string_view text, PreTokenizer pre = PreTokenizer::kGpt2);

}  // namespace memwall::train
