// BPE tokenizers: vocab.json/merges.txt or tokenizer.json loading (byte-level or SentencePiece-style), the
// pre-tokenizers, merging, decoding.
#include "engine/train/bpe.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <queue>
#include <thread>
#include <type_traits>

#include "base/utf8.h"
#include "engine/io/read_file.h"
#include "engine/train/nfc.h"
#include "spec/json_text.h"

namespace memwall::train {

namespace {

struct CodeRange {
  char32_t first, last;
};
#include "engine/train/unicode_classes.inc"

template <std::size_t N>
bool in_ranges(const CodeRange (&ranges)[N], char32_t c) {
  const CodeRange* end = ranges + N;
  const CodeRange* it =
      std::upper_bound(ranges, end, c, [](char32_t v, const CodeRange& r) { return v < r.first; });
  return it != ranges && c <= (it - 1)->last;
}

// Unicode's White_Space property.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

enum class Cls { kLetter, kNumber, kSpace, kOther };

struct CodePoint {
  char32_t c;
  std::size_t len;  // bytes; an invalid byte is a code point of its own (class other)
  Cls cls;
};

Cls ascii_class(unsigned char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return Cls::kLetter;
  if (c >= '0' && c <= '9') return Cls::kNumber;
  if (c == ' ' || (c >= 0x09 && c <= 0x0D)) return Cls::kSpace;
  return Cls::kOther;
}

CodePoint decode_at(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {b0, 1, ascii_class(b0)};  // most text: no table lookups
  char32_t c = 0;
  const std::size_t len = decode_utf8(s, i, c);
  if (len == 0) return {b0, 1, Cls::kOther};  // not UTF-8: a piece of its own byte
  const Cls cls = is_space(c)                   ? Cls::kSpace
                  : in_ranges(kLetterRanges, c) ? Cls::kLetter
                  : in_ranges(kNumberRanges, c) ? Cls::kNumber
                                                : Cls::kOther;
  return {c, len, cls};
}

// The end of the run of code points from `from` on that `inside` holds for.
template <typename F>
std::size_t class_run_end(std::string_view s, std::size_t from, F inside) {
  std::size_t k = from;
  while (k < s.size()) {
    const CodePoint cp = decode_at(s, k);
    if (!inside(cp)) break;
    k += cp.len;
  }
  return k;
}

// The end of the run of code points of class `cls` starting at `from`.
std::size_t run_end(std::string_view s, std::size_t from, Cls cls) {
  return class_run_end(s, from, [cls](const CodePoint& cp) { return cp.cls == cls; });
}

// Where GPT-2's pre-tokenizer's piece starting at `i` (< s.size()) ends: the first of its alternatives that
// matches there.
std::size_t gpt2_piece_end(std::string_view s, std::size_t i) {
  const std::size_t n = s.size();
  if (s[i] == '\'') {
    for (std::string_view suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
      if (s.substr(i + 1, suffix.size()) == suffix) return i + 1 + suffix.size();
    }
  }
  const CodePoint cp = decode_at(s, i);
  const Cls after = s[i] == ' ' && i + 1 < n ? decode_at(s, i + 1).cls : Cls::kSpace;
  if (after != Cls::kSpace) return run_end(s, i + 1, after);  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+"
  if (cp.cls != Cls::kSpace) return run_end(s, i, cp.cls);
  // "\s+(?!\S)": a run of whitespace, less its last code point when a non-space follows; "\s+": a lone
  // whitespace code point before a non-space.
  std::size_t last = i, end = i;
  while (end < n) {
    const CodePoint w = decode_at(s, end);
    if (w.cls != Cls::kSpace) break;
    last = end;
    end += w.len;
  }
  return end < n && last > i ? last : end;
}

// The length of a contraction's letters (s, t, re, ve, m, ll, d in any case; s also as U+017F, long s,
// which Unicode case folding makes an s) at s[i], or 0.
std::size_t contraction(std::string_view s, std::size_t i) {
  const auto lower = [&](std::size_t k) {
    return k < s.size() ? static_cast<char>(s[k] >= 'A' && s[k] <= 'Z' ? s[k] - 'A' + 'a' : s[k]) : '\0';
  };
  if (s.substr(i, 2) == "\xC5\xBF") return 2;
  const char a = lower(i), b = lower(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 1;
  if ((a == 'r' || a == 'v') && b == 'e') return 2;
  if (a == 'l' && b == 'l') return 2;
  return 0;
}

bool is_newline(char b) {
  return b == '\r' || b == '\n';
}

// A whitespace piece of the patterns Llama 3's, Qwen2's and o200k's end with, \s*[\r\n]+|\s+(?!\S)|\s+:
// through its last newline ("\s*[\r\n]+" backtracks to there), else GPT-2's rules.
std::size_t whitespace_piece_end(std::string_view s, std::size_t i) {
  const std::size_t n = s.size();
  std::size_t last = i, end = i, after_newline = 0;
  while (end < n) {
    const CodePoint w = decode_at(s, end);
    if (w.cls != Cls::kSpace) break;
    if (is_newline(s[end])) after_newline = end + 1;
    last = end;
    end += w.len;
  }
  if (after_newline > 0) return after_newline;
  return end < n && last > i ? last : end;
}

// The alternatives Llama 3's, Qwen2's and o200k's patterns end with, where their letters' do not match at i:
// \p{N}{1,digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ (o200k's `slash`: [\r\n/]* after the
// other characters).
std::size_t later_piece_end(std::string_view s, std::size_t i, int digits, bool slash) {
  const std::size_t n = s.size();
  if (decode_at(s, i).cls == Cls::kNumber) {
    std::size_t k = i;
    for (int d = 0; d < digits && k < n; ++d) {
      const CodePoint x = decode_at(s, k);
      if (x.cls != Cls::kNumber) break;
      k += x.len;
    }
    return k;
  }
  const std::size_t o = s[i] == ' ' && i + 1 < n && decode_at(s, i + 1).cls == Cls::kOther ? i + 1 : i;
  if (decode_at(s, o).cls == Cls::kOther) {
    std::size_t k = run_end(s, o, Cls::kOther);
    while (k < n && (is_newline(s[k]) || (slash && s[k] == '/'))) ++k;
    return k;
  }
  return whitespace_piece_end(s, i);
}

// The same for the pattern Llama 3 and Qwen2 share (numbers in runs of at most `digits`):
// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,digits}| ?[^\s\p{L}\p{N}]+[\r\n]*|
// \s*[\r\n]+|\s+(?!\S)|\s+
std::size_t llama3_piece_end(std::string_view s, std::size_t i, int digits) {
  const std::size_t n = s.size();
  if (s[i] == '\'') {
    if (const std::size_t len = contraction(s, i + 1); len > 0) return i + 1 + len;
  }
  const CodePoint cp = decode_at(s, i);
  if (cp.cls == Cls::kLetter) return run_end(s, i, Cls::kLetter);
  if (!is_newline(s[i]) && cp.cls != Cls::kNumber && i + cp.len < n &&
      decode_at(s, i + cp.len).cls == Cls::kLetter) {
    return run_end(s, i + cp.len, Cls::kLetter);  // one leading space, tab, punctuation mark, ...
  }
  return later_piece_end(s, i, digits, false);
}

// The o200k pattern's two letter classes: [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] and [\p{Ll}\p{Lm}\p{Lo}\p{M}] (a
// byte that is not UTF-8 is neither).
bool upper_like(const CodePoint& cp) {
  if (cp.c < 0x80) return cp.c >= 'A' && cp.c <= 'Z';
  return cp.len > 1 && in_ranges(kUpperLikeRanges, cp.c);
}
bool lower_like(const CodePoint& cp) {
  if (cp.c < 0x80) return cp.c >= 'a' && cp.c <= 'z';
  return cp.len > 1 && in_ranges(kLowerLikeRanges, cp.c);
}

// Where "[upper-like]*[lower-like]+" matching from j ends, or npos: the upper-like run backs off to the last
// place a lower-like code point starts (the run's end, or inside it: Lm, Lo and M are both), from which the
// lower-like run goes on.
std::size_t upper_lower_end(std::string_view s, std::size_t j) {
  std::size_t k = j, last_lower = std::string_view::npos;
  while (k < s.size()) {
    const CodePoint cp = decode_at(s, k);
    if (!upper_like(cp)) break;
    if (lower_like(cp)) last_lower = k;
    k += cp.len;
  }
  const std::size_t m = k < s.size() && lower_like(decode_at(s, k)) ? k : last_lower;
  return m == std::string_view::npos ? m : class_run_end(s, m, lower_like);
}

// The o200k pattern's (gpt-oss's; GPT-4o's in tiktoken), whose letter runs follow case and take a
// contraction after them:
// [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
// [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
// \p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
// Mistral's Tekken (`suffixes` false, `digits` 1): the same without the contractions, each number alone.
std::size_t o200k_piece_end(std::string_view s, std::size_t i, bool suffixes, int digits) {
  const std::size_t n = s.size();
  const CodePoint cp = decode_at(s, i);
  const auto with_suffix = [&](std::size_t e) {
    if (suffixes && e < n && s[e] == '\'') {
      if (const std::size_t len = contraction(s, e + 1); len > 0) return e + 1 + len;
    }
    return e;
  };
  // The letter alternatives, each with its one leading [^\r\n\p{L}\p{N}] first, then without.
  const bool lead = !is_newline(s[i]) && cp.cls != Cls::kLetter && cp.cls != Cls::kNumber;
  const std::size_t starts[2] = {lead ? i + cp.len : i, i};
  for (const std::size_t j : starts) {
    if (const std::size_t e = upper_lower_end(s, j); e != std::string_view::npos) return with_suffix(e);
  }
  for (const std::size_t j : starts) {
    if (const std::size_t k = class_run_end(s, j, upper_like); k > j)
      return with_suffix(class_run_end(s, k, lower_like));
  }
  return later_piece_end(s, i, digits, true);
}

// GPT-2 maps every byte to a printable code point so that vocab.json's keys are text: the printable Latin-1
// bytes (33-126, 161-172, 174-255) map to themselves, the others, in order, to 256, 257, ...
char32_t byte_to_unicode(unsigned b) {
  const auto printable = [](unsigned v) {
    return (v >= 33 && v <= 126) || (v >= 161 && v <= 172) || v >= 174;
  };
  if (printable(b)) return b;
  char32_t next = 256;
  for (unsigned v = 0; v < b; ++v) {
    if (!printable(v)) ++next;
  }
  return next;
}

// The steps of a pre-tokenizer Sequence memwall implements, each splitting every piece the one before left.
enum class Step {
  kGpt2,         // GPT-2's pattern (ByteLevel with use_regex)
  kLlama3,       // Llama 3's pattern (a Split, Isolated)
  kQwen2,        // Qwen2's
  kO200k,        // o200k's (gpt-oss's)
  kTekken,       // Mistral's Tekken (o200k's without contractions, each number alone)
  kPunctuation,  // Punctuation, Contiguous: runs of punctuation (Unicode's P*, or ASCII's) and the rest
  kEachNumber,   // Digits with individual_digits: each number (N*) a piece of its own
  kNumberBytes,  // Digits without, after ByteLevel: runs of bytes whose byte-level character is a number
  kThreeDigits,  // a Split by [0-9][0-9][0-9], Isolated
  kBloom,        // BLOOM's Split, Isolated: an optional space, then a run of characters but its delimiters
  kWhole,        // none: SentencePiece's text is one piece
};

bool is_punctuation(const CodePoint& cp) {
  if (cp.c < 0x80) return cp.len == 1 && cp.cls == Cls::kOther && cp.c > 0x20 && cp.c < 0x7F;
  return cp.len > 1 && in_ranges(kPunctuationRanges, cp.c);
}

// The bytes whose byte-level character (byte_to_unicode) is a number: the digits, and Latin-1's ² ³ ¹ ¼ ½ ¾,
// which stand for themselves, so that Falcon's Digits after its ByteLevel splits a UTF-8 sequence holding
// one (Hugging Face's tokenizers do the same).
const std::array<bool, 256>& number_bytes() {
  static const std::array<bool, 256> table = [] {
    std::array<bool, 256> t{};
    for (unsigned b = 0; b < 256; ++b) t[b] = in_ranges(kNumberRanges, byte_to_unicode(b));
    return t;
  }();
  return table;
}

// The end of the run of code points from s[i] on that `inside` says the same of as s[i]'s.
template <typename F>
std::size_t same_run_end(std::string_view s, std::size_t i, F inside) {
  const bool first = inside(decode_at(s, i));
  return class_run_end(s, i, [&](const CodePoint& cp) { return inside(cp) == first; });
}

// BLOOM's pattern " ?[^(\s|[.,!?…。，、।۔،])]+" (Oniguruma's nested class: neither whitespace nor a paren,
// a bar or one of those marks) at s[i]: where its match ends, or 0 when none starts there. (Listed code
// points are at most 0xFFFF and never a byte that is not UTF-8, which counts as a word character.)
bool bloom_word_char(const CodePoint& cp) {
  if (cp.cls == Cls::kSpace) return false;
  switch (cp.c) {
    case '(':
    case ')':
    case '|':
    case '.':
    case ',':
    case '!':
    case '?':
    case 0x2026:
    case 0x3002:
    case 0xFF0C:
    case 0x3001:
    case 0x0964:
    case 0x06D4:
    case 0x060C:
      return false;
    default:
      return true;
  }
}
std::size_t bloom_match_end(std::string_view s, std::size_t i) {
  std::size_t k = i;
  if (s[k] == ' ' && k + 1 < s.size() && bloom_word_char(decode_at(s, k + 1))) ++k;
  if (!bloom_word_char(decode_at(s, k))) return 0;
  while (k < s.size()) {
    const CodePoint cp = decode_at(s, k);
    if (!bloom_word_char(cp)) break;
    k += cp.len;
  }
  return k;
}

bool three_digits_at(std::string_view s, std::size_t i) {
  const auto digit = [&](std::size_t k) { return k < s.size() && s[k] >= '0' && s[k] <= '9'; };
  return digit(i) && digit(i + 1) && digit(i + 2);
}

// Where `step`'s piece starting at s[i] (i < s.size()) ends.
std::size_t step_end(Step step, std::string_view s, std::size_t i) {
  switch (step) {
    case Step::kGpt2:
      return gpt2_piece_end(s, i);
    case Step::kLlama3:
      return llama3_piece_end(s, i, 3);
    case Step::kQwen2:
      return llama3_piece_end(s, i, 1);
    case Step::kO200k:
      return o200k_piece_end(s, i, true, 3);
    case Step::kTekken:
      return o200k_piece_end(s, i, false, 1);
    case Step::kPunctuation:
      return same_run_end(s, i, is_punctuation);
    case Step::kEachNumber:
      return decode_at(s, i).cls == Cls::kNumber
                 ? i + decode_at(s, i).len
                 : same_run_end(s, i, [](const CodePoint& cp) { return cp.cls == Cls::kNumber; });
    case Step::kNumberBytes: {
      const std::array<bool, 256>& number = number_bytes();
      const bool first = number[static_cast<unsigned char>(s[i])];
      std::size_t k = i + 1;
      while (k < s.size() && number[static_cast<unsigned char>(s[k])] == first) ++k;
      return k;
    }
    case Step::kThreeDigits: {
      if (three_digits_at(s, i)) return i + 3;
      std::size_t k = i + 1;  // the text up to the next match
      while (k < s.size() && !three_digits_at(s, k)) ++k;
      return k;
    }
    case Step::kBloom: {
      if (const std::size_t end = bloom_match_end(s, i); end > 0) return end;
      std::size_t k = i + decode_at(s, i).len;  // the text up to the next match
      while (k < s.size() && bloom_match_end(s, k) == 0) k += decode_at(s, k).len;
      return k;
    }
    case Step::kWhole:
      break;
  }
  return s.size();
}

// The steps of each pre-tokenizer, in order.
std::vector<Step> steps_of(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kLlama3:
      return {Step::kLlama3};
    case PreTokenizer::kQwen2:
      return {Step::kQwen2};
    case PreTokenizer::kO200k:
      return {Step::kO200k};
    case PreTokenizer::kTekken:
      return {Step::kTekken};
    case PreTokenizer::kFalcon:
      return {Step::kPunctuation, Step::kGpt2, Step::kNumberBytes, Step::kThreeDigits};
    case PreTokenizer::kStarCoder:
      return {Step::kEachNumber, Step::kGpt2};
    case PreTokenizer::kBloom:
      return {Step::kBloom};
    case PreTokenizer::kSentencePiece:
      return {Step::kWhole};
    case PreTokenizer::kGpt2:
      break;
  }
  return {Step::kGpt2};
}

// A text's pieces, one after another: each step splits the piece of the step before that holds the position
// (a step sees that piece alone, as a pattern's lookahead does in Hugging Face's Sequence).
class Pieces {
 public:
  Pieces(std::string_view text, PreTokenizer pre)
      : text_(text), steps_(steps_of(pre)), ends_(steps_.size()) {}
  // The end of the piece that starts at `i`, the end of the one before (0 first).
  std::size_t end(std::size_t i) {
    if (steps_.size() == 1) return step_end(steps_[0], text_, i);
    std::size_t limit = text_.size();
    for (std::size_t k = 0; k < steps_.size(); ++k) {
      if (i >= ends_[k]) ends_[k] = step_end(steps_[k], text_.substr(0, limit), i);
      limit = ends_[k];
    }
    return limit;
  }

 private:
  std::string_view text_;
  std::vector<Step> steps_;
  std::vector<std::size_t> ends_;  // [step] where its current piece ends
};

std::uint64_t pair_key(int left, int right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
         static_cast<std::uint32_t>(right);
}

// o[key] where o is an object holding it with T's JSON type, else `def`: a tokenizer.json with a value of
// another type is refused by the checks that follow (never thrown on).
template <typename T>
T field(const nlohmann::json& o, const char* key, T def) {
  if (!o.is_object() || !o.contains(key)) return def;
  const nlohmann::json& v = o.at(key);
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean() ? v.get<bool>() : def;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string() ? v.get<std::string>() : def;
  } else if constexpr (std::is_same_v<T, long>) {
    return v.is_number_integer() ? v.get<long>() : def;
  } else {
    return v;
  }
}

// The pre-tokenizers of tokenizer.json that memwall implements.
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kBloomPattern = " ?[^(\\s|[.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C])]+";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kO200kPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|)"
    R"(\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kTekkenPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|)"
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|)"
    R"(\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Result<PreTokenizer> pre_tokenizer_of(const nlohmann::json& pre) {
  const auto is = [](const nlohmann::json& o, const char* type) {
    return field(o, "type", std::string()) == type;
  };
  // GPT-2's pattern and byte mapping, alone or in a Sequence.
  const auto byte_level = [&](const nlohmann::json& o) {
    return is(o, "ByteLevel") && !field(o, "add_prefix_space", false) && field(o, "use_regex", true);
  };
  if (byte_level(pre)) return PreTokenizer::kGpt2;
  const nlohmann::json steps = field(pre, "pretokenizers", nlohmann::json());
  const auto split_by = [&](const nlohmann::json& o, std::string_view pattern) {
    return is(o, "Split") && field(o, "behavior", std::string()) == "Isolated" &&
           !field(o, "invert", false) &&
           field(field(o, "pattern", nlohmann::json()), "Regex", std::string()) == pattern;
  };
  if (is(pre, "Sequence") && steps.is_array()) {
    // StarCoder's (GPT-BigCode's): each number alone, then GPT-2's.
    if (steps.size() == 2 && is(steps[0], "Digits") && field(steps[0], "individual_digits", false) &&
        byte_level(steps[1]))
      return PreTokenizer::kStarCoder;
    // Falcon's: runs of punctuation, GPT-2's, runs of number bytes, then runs of digits cut in threes.
    if (steps.size() == 4 && is(steps[0], "Punctuation") &&
        field(steps[0], "behavior", std::string("Isolated")) == "Contiguous" && byte_level(steps[1]) &&
        is(steps[2], "Digits") && !field(steps[2], "individual_digits", false) &&
        split_by(steps[3], "[0-9][0-9][0-9]"))
      return PreTokenizer::kFalcon;
  }
  // Llama 3's and Qwen2's: a Split by their pattern, then ByteLevel without its own pattern.
  if (is(pre, "Sequence") && pre.contains("pretokenizers") && pre["pretokenizers"].is_array() &&
      pre["pretokenizers"].size() == 2) {
    const nlohmann::json& split = pre["pretokenizers"][0];
    const nlohmann::json& bytes = pre["pretokenizers"][1];
    if (is(bytes, "ByteLevel") && !field(bytes, "add_prefix_space", false) &&
        !field(bytes, "use_regex", true)) {
      if (split_by(split, kLlama3Pattern)) return PreTokenizer::kLlama3;
      if (split_by(split, kQwen2Pattern)) return PreTokenizer::kQwen2;
      if (split_by(split, kO200kPattern)) return PreTokenizer::kO200k;
      if (split_by(split, kTekkenPattern)) return PreTokenizer::kTekken;
      if (split_by(split, kBloomPattern)) return PreTokenizer::kBloom;
    }
  }
  std::string shown = pre.dump();
  if (shown.size() > 300) shown = shown.substr(0, 300) + "...";
  return Status::invalid_argument(
      "pre_tokenizer " + shown +
      " is not one memwall implements; allowed: GPT-2's (ByteLevel, "
      "add_prefix_space false), Llama 3's, Qwen2's, o200k's (gpt-oss's) or Mistral's Tekken (a Split by "
      "their pattern, "
      "then ByteLevel with use_regex false), BLOOM's (a Split by its pattern, then that ByteLevel), "
      "StarCoder's (Digits with individual_digits, "
      "then GPT-2's), Falcon's (Punctuation Contiguous, GPT-2's, Digits, a Split by "
      "[0-9][0-9][0-9]), or Llama 2's and Mistral's SentencePiece style (none, or Metaspace)");
}

// SentencePiece's space, U+2581.
constexpr std::string_view kMeta = "\xE2\x96\x81";

// The byte of a byte-fallback token's name "<0xAB>" (upper-case hex), else -1.
int fallback_byte(std::string_view key) {
  const auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (key.size() != 6 || key.substr(0, 3) != "<0x" || key[5] != '>') return -1;
  const int hi = hex(key[3]), lo = hex(key[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

// A merge written "a b" (merges.txt's lines, tokenizer.json's strings): two tokens and one space.
bool split_merge(std::string_view line, std::string& left, std::string& right) {
  const std::size_t space = line.find(' ');
  if (space == std::string_view::npos || space == 0 || space + 1 >= line.size() ||
      line.find(' ', space + 1) != std::string_view::npos)
    return false;
  left = line.substr(0, space);
  right = line.substr(space + 1);
  return true;
}

// A merges entry of tokenizer.json: "a b" or ["a", "b"].
bool merge_parts(const nlohmann::json& m, std::string& left, std::string& right) {
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
    left = m[0].get<std::string>();
    right = m[1].get<std::string>();
    return true;
  }
  return m.is_string() && split_merge(m.get<std::string>(), left, right);
}

// The ids of a merge's two parts and of their concatenation; the error names the one the vocabulary lacks.
Result<std::array<int, 3>> merge_ids(const std::unordered_map<std::string, int>& id_of,
                                     const std::string& left, const std::string& right) {
  const auto l = id_of.find(left), r = id_of.find(right), merged = id_of.find(left + right);
  if (l == id_of.end() || r == id_of.end() || merged == id_of.end()) {
    const std::string lacked = l == id_of.end() ? left : r == id_of.end() ? right : left + right;
    // Escaped (a token may hold a newline), and bytes that are not UTF-8 (a damaged merges.txt) replaced.
    return Status::invalid_argument(
        "the vocabulary lacks " +
        nlohmann::json(lacked).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return std::array<int, 3>{l->second, r->second, merged->second};
}

// A vocabulary object's token -> id, checked: integer ids 0..n-1, each once. `name` names it in errors.
Result<std::unordered_map<std::string, int>> vocabulary_ids(const nlohmann::json& vocab,
                                                            const std::string& name) {
  std::unordered_map<std::string, int> id_of;
  id_of.reserve(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [key, value] : vocab.items()) {
    if (!value.is_number_integer() || value.get<long>() < 0 ||
        value.get<long>() >= static_cast<long>(vocab.size())) {
      return Status::invalid_argument(name + ": token \"" + key + "\": id " + value.dump() +
                                      "; allowed: an integer in [0, " + std::to_string(vocab.size()) + ")");
    }
    const auto id = static_cast<std::size_t>(value.get<long>());
    if (seen[id]) return Status::invalid_argument(name + ": id " + std::to_string(id) + " is used twice");
    seen[id] = true;
    id_of.emplace(key, static_cast<int>(id));
  }
  return id_of;
}

bool has_vocab_and_merges(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_regular_file(dir + "/vocab.json", ec) &&
         std::filesystem::is_regular_file(dir + "/merges.txt", ec);
}

}  // namespace

bool BpeTokenizer::present(const std::string& dir) {
  std::error_code ec;
  return has_vocab_and_merges(dir) || std::filesystem::is_regular_file(dir + "/tokenizer.json", ec);
}

Result<BpeTokenizer> BpeTokenizer::load(const std::string& dir) {
  if (!has_vocab_and_merges(dir)) {
    auto whole = io::read_file(dir + "/tokenizer.json");
    if (!whole.is_ok()) return whole.status();
    return parse_tokenizer_json(*whole, dir);
  }
  auto vocab = io::read_file(dir + "/vocab.json");
  if (!vocab.is_ok()) return vocab.status();
  auto merges = io::read_file(dir + "/merges.txt");
  if (!merges.is_ok()) return merges.status();
  auto t = parse(*vocab, *merges, dir);
  std::error_code ec;
  if (!t.is_ok() || !std::filesystem::is_regular_file(dir + "/added_tokens.json", ec)) return t;
  // Hugging Face's slow tokenizers' added tokens ({"content": id}, CodeGen's and Phi's runs of spaces and
  // tabs): matched in the text as themselves, not special.
  const std::string name = dir + "/added_tokens.json";
  auto text = io::read_file(name);
  if (!text.is_ok()) return text.status();
  auto added = parse_json_object(*text, name);
  if (!added.is_ok()) return added.status();
  std::vector<std::pair<long, std::string>> by_id;
  for (const auto& item : added->items()) {
    if (!item.value().is_number_integer()) {
      return Status::invalid_argument(name + ": \"" + item.key() + "\": " + item.value().dump() +
                                      "; allowed: a token id (an integer)");
    }
    by_id.emplace_back(item.value().get<long>(), item.key());
  }
  std::sort(by_id.begin(), by_id.end());
  for (const auto& [id, content] : by_id) {
    const Status s = t->add_token(content, id, false);
    if (!s.is_ok()) {
      return Status::invalid_argument(name + ": \"" + content + "\": " + std::to_string(id) + s.message());
    }
  }
  t->sort_specials();
  t->files_.emplace_back("added_tokens.json");
  return t;
}

Result<BpeTokenizer> BpeTokenizer::parse(std::string_view vocab_json, std::string_view merges_txt,
                                         const std::string& source) {
  auto t = parse_named(vocab_json, merges_txt, source, source + "/vocab.json", source + "/merges.txt");
  if (t.is_ok()) t->files_ = {"vocab.json", "merges.txt"};
  return t;
}

Result<BpeTokenizer> BpeTokenizer::parse_tokenizer_json(std::string_view text, const std::string& source) {
  using nlohmann::json;
  const std::string name = source + "/tokenizer.json";
  auto parsed = parse_json_object(text, name);
  if (!parsed.is_ok()) return parsed.status();
  const json& j = *parsed;
  if (!j.contains("model") || !j.at("model").is_object())
    return Status::invalid_argument(name + ": not a Hugging Face tokenizer (no \"model\" object)");
  const json& model = j.at("model");
  const auto kind = [](const json& o) { return field(o, "type", std::string()); };
  if (kind(model) != "BPE") {
    return Status::invalid_argument(
        name + ": model.type \"" + kind(model) +
        "\"; allowed: BPE (GPT-2's, Llama 3's, Qwen2's, Falcon's, StarCoder's, BLOOM's byte-level BPE; "
        "Llama 2's, Mistral's SentencePiece-style BPE)");
  }
  for (const char* key : {"dropout", "continuing_subword_prefix", "end_of_word_suffix"}) {
    const json v = field(model, key, json());
    if (!v.is_null() && v != json("")) {
      return Status::invalid_argument(name + ": model." + key + " " + v.dump() + "; allowed: null");
    }
  }
  if (!model.contains("vocab") || !model.at("vocab").is_object() || !model.contains("merges") ||
      !model.at("merges").is_array()) {
    return Status::invalid_argument(name + ": model.vocab (an object) and model.merges (a list) are needed");
  }
  const json pre_json = field(j, "pre_tokenizer", json());
  const json normalizer = field(j, "normalizer", json());
  // SentencePiece-style: Llama 2's and Mistral's Prepend("▁") + Replace(" " -> "▁") normalizer without a
  // pre-tokenizer, the Replace alone, or no normalizer and a Metaspace pre-tokenizer that does not split.
  const auto replaces_spaces = [&](const json& n) {
    return kind(n) == "Replace" && field(field(n, "pattern", json()), "String", std::string()) == " " &&
           field(n, "content", std::string()) == kMeta;
  };
  std::optional<Prepend> sentencepiece;
  if (pre_json.is_null() && replaces_spaces(normalizer)) sentencepiece = Prepend::kNever;
  if (pre_json.is_null() && kind(normalizer) == "Sequence") {
    const json parts = field(normalizer, "normalizers", json());
    if (parts.is_array() && parts.size() == 2 && kind(parts[0]) == "Prepend" &&
        field(parts[0], "prepend", std::string()) == kMeta && replaces_spaces(parts[1]))
      sentencepiece = Prepend::kEvery;
  }
  if (normalizer.is_null() && kind(pre_json) == "Metaspace") {
    const std::string scheme =
        field(pre_json, "prepend_scheme",
              std::string(field(pre_json, "add_prefix_space", true) ? "always" : "never"));
    if (field(pre_json, "replacement", std::string()) != kMeta || field(pre_json, "split", true) ||
        (scheme != "always" && scheme != "first" && scheme != "never")) {
      return Status::invalid_argument(name + ": pre_tokenizer " + pre_json.dump() +
                                      "; allowed: Metaspace with replacement \"\u2581\", split false and "
                                      "prepend_scheme first, always or never");
    }
    sentencepiece = scheme == "first"    ? Prepend::kFirstUnlessSpace
                    : scheme == "always" ? Prepend::kEveryUnlessSpace
                                         : Prepend::kNever;
  }
  Result<BpeTokenizer> t = Status::internal("unset");
  if (sentencepiece) {
    t = parse_sentencepiece(model, name, source, *sentencepiece);
    if (!t.is_ok()) return t;
  } else {
    auto pre = pre_tokenizer_of(pre_json);
    if (!pre.is_ok()) return Status::invalid_argument(name + ": " + pre.status().message());
    if (!normalizer.is_null() && kind(normalizer) != "NFC") {
      return Status::invalid_argument(name + ": normalizer " + normalizer.dump() +
                                      "; allowed: none (GPT-2's, Llama 3's), NFC (Qwen2's) or Llama 2's "
                                      "(Prepend \"\u2581\" then Replace \" \" by \"\u2581\")");
    }
    // The merges as merges.txt lines (byte-level tokens hold no spaces).
    std::string merges, left, right;
    for (const json& m : model.at("merges")) {
      if (!merge_parts(m, left, right)) {
        return Status::invalid_argument(name + ": model.merges entry " + m.dump() +
                                        "; allowed: \"a b\" or [\"a\", \"b\"]");
      }
      merges += left + " " + right + "\n";
    }
    t = parse_named(model.at("vocab").dump(), merges, source, name + " model.vocab", name + " model.merges");
    if (!t.is_ok()) return t;
    t->pre_ = *pre;
    t->nfc_ = !normalizer.is_null();
  }
  t->files_ = {"tokenizer.json"};
  if (field(model, "ignore_merges", false)) {  // Llama 3's: a piece that is a token is that token
    if (sentencepiece) {
      return Status::invalid_argument(name +
                                      ": model.ignore_merges true with a SentencePiece-style vocabulary; "
                                      "allowed: false");
    }
    t->whole_.reserve(t->bytes_.size());
    for (std::size_t id = 0; id < t->bytes_.size(); ++id)
      t->whole_.emplace(t->bytes_[id], static_cast<int>(id));
  }
  // Added tokens: in the vocabulary already (GPT-2's <|endoftext|>), or appended after it (Llama 3's and
  // Qwen2's special tokens, CodeGen's and Phi's runs of spaces), in id order.
  for (const json& a : field(j, "added_tokens", json::array())) {
    if (!a.is_object()) continue;
    const Status s =
        t->add_token(field(a, "content", std::string()), field(a, "id", -1L), field(a, "special", false));
    if (!s.is_ok()) return Status::invalid_argument(name + ": added token " + a.dump() + s.message());
  }
  t->sort_specials();
  // The post-processor's leading special token, from a TemplateProcessing alone or in a Sequence.
  json template_processing = field(j, "post_processor", json());
  if (kind(template_processing) == "Sequence") {
    for (const json& p : field(template_processing, "processors", json::array())) {
      if (kind(p) == "TemplateProcessing") template_processing = p;
    }
  }
  const json single = field(template_processing, "single", json());
  if (kind(template_processing) == "TemplateProcessing" && single.is_array() && !single.empty()) {
    const std::string first = field(field(single[0], "SpecialToken", json()), "id", std::string());
    const json ids = field(field(field(template_processing, "special_tokens", json()), first.c_str(), json()),
                           "ids", json());
    if (!first.empty()) {
      if (!ids.is_array() || ids.size() != 1 || !ids[0].is_number_integer() || ids[0].get<long>() < 0 ||
          ids[0].get<long>() >= t->vocab_size()) {
        return Status::invalid_argument(name + ": post_processor's special token \"" + first + "\" has ids " +
                                        ids.dump() + "; allowed: one id in [0, " +
                                        std::to_string(t->vocab_size()) + ")");
      }
      t->bos_ = ids[0].get<int>();
    }
  }
  return t;
}

Result<BpeTokenizer> BpeTokenizer::parse_sentencepiece(const nlohmann::json& model, const std::string& name,
                                                       const std::string& source, Prepend prepend) {
  if (!field(model, "byte_fallback", false)) {
    return Status::invalid_argument(name +
                                    ": model.byte_fallback is not true; a SentencePiece-style vocabulary "
                                    "needs it (allowed: true, with the tokens <0x00>..<0xFF>)");
  }
  const nlohmann::json& vocab = model.at("vocab");
  BpeTokenizer t;
  t.source_ = source;
  t.pre_ = PreTokenizer::kSentencePiece;
  t.prepend_ = prepend;
  t.bytes_.assign(vocab.size(), std::string());
  std::fill(std::begin(t.byte_token_), std::end(t.byte_token_), -1);
  auto ids = vocabulary_ids(vocab, name + " model.vocab");
  if (!ids.is_ok()) return ids.status();
  const std::unordered_map<std::string, int>& id_of = *ids;
  bool mid_meta = false;  // a token with ▁ after another character
  for (const auto& item : vocab.items()) {
    const std::string& key = item.key();
    const auto id = static_cast<std::size_t>(id_of.at(key));
    if (const int b = fallback_byte(key); b >= 0) {
      t.bytes_[id] = std::string(1, static_cast<char>(b));
      t.byte_token_[b] = static_cast<int>(id);
      continue;
    }
    std::string& text = t.bytes_[id];
    for (std::size_t at = 0;;) {  // ▁ is a space
      const std::size_t meta = key.find(kMeta, at);
      text.append(key, at, meta == std::string::npos ? std::string::npos : meta - at);
      if (meta == std::string::npos) break;
      text += ' ';
      at = meta + kMeta.size();
    }
    char32_t c = 0;
    if (!key.empty() && decode_utf8(key, 0, c) == key.size()) t.char_token_.emplace(c, static_cast<int>(id));
    for (std::size_t at = key.find(kMeta, 1); at != std::string::npos; at = key.find(kMeta, at + 1)) {
      if (at < kMeta.size() || key.compare(at - kMeta.size(), kMeta.size(), kMeta) != 0) mid_meta = true;
    }
  }
  t.word_pieces_ = !mid_meta;
  for (int b = 0; b < 256; ++b) {
    if (t.byte_token_[b] < 0) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "<0x%02X>", b);
      return Status::invalid_argument(name + " model.vocab: no byte token " + hex +
                                      " (byte_fallback needs all 256, <0x00>..<0xFF>)");
    }
  }
  int rank = 0;
  std::string left, right;
  for (const nlohmann::json& m : model.at("merges")) {
    if (!merge_parts(m, left, right)) {
      return Status::invalid_argument(name + ": model.merges entry " + m.dump() +
                                      "; allowed: \"a b\" or [\"a\", \"b\"]");
    }
    auto ids_of = merge_ids(id_of, left, right);
    if (!ids_of.is_ok())
      return Status::invalid_argument(name + ": model.merges entry " + m.dump() + ": " +
                                      ids_of.status().message());
    const auto [l, r, merged] = *ids_of;
    t.merges_.insert_or_assign(pair_key(l, r), Merge{rank++, merged});
  }
  // A cut after a newline keeps the tokens of one pass when a newline is only ever its byte token, which no
  // merge takes.
  const int newline = t.byte_token_[static_cast<unsigned char>('\n')];
  t.newline_cuts_ = t.char_token_.count(U'\n') == 0 &&
                    std::none_of(t.merges_.begin(), t.merges_.end(), [newline](const auto& m) {
                      return static_cast<int>(m.first >> 32) == newline ||
                             static_cast<int>(m.first & 0xFFFFFFFFu) == newline;
                    });
  return t;
}

Status BpeTokenizer::add_token(const std::string& content, long id, bool special) {
  const auto size = static_cast<long>(bytes_.size());
  if (id >= 0 && id < size && bytes_[static_cast<std::size_t>(id)] == content) {
    if (std::find(specials_.begin(), specials_.end(), id) != specials_.end()) return Status::ok();
  } else if (id == size && !content.empty()) {
    bytes_.push_back(content);
  } else {
    return Status::invalid_argument(" is neither its vocabulary entry nor the next id (" +
                                    std::to_string(size) + ")");
  }
  specials_.push_back(static_cast<int>(id));
  if (!special) text_added_.push_back(static_cast<int>(id));
  return Status::ok();
}

void BpeTokenizer::sort_specials() {
  // Longest first, so that one special token that begins another does not cut it.
  std::stable_sort(specials_.begin(), specials_.end(),
                   [this](int x, int y) { return bytes(x).size() > bytes(y).size(); });
}

Result<BpeTokenizer> BpeTokenizer::parse_named(std::string_view vocab_json, std::string_view merges_txt,
                                               const std::string& source, const std::string& vocab_name,
                                               const std::string& merges_name) {
  auto parsed = parse_json_object(vocab_json, vocab_name);
  if (!parsed.is_ok()) return parsed.status();
  const nlohmann::json& j = *parsed;
  if (j.empty()) {
    return Status::invalid_argument(vocab_name + ": not a JSON object of token -> id");
  }
  // The inverse of byte_to_unicode, for the code points vocab.json's keys use.
  std::vector<int> unicode_to_byte(324, -1);
  for (unsigned b = 0; b < 256; ++b) unicode_to_byte[byte_to_unicode(b)] = static_cast<int>(b);

  BpeTokenizer t;
  t.source_ = source;
  t.bytes_.assign(j.size(), std::string());
  auto ids = vocabulary_ids(j, vocab_name);
  if (!ids.is_ok()) return ids.status();
  const std::unordered_map<std::string, int>& id_of = *ids;
  for (const auto& item : j.items()) {  // in the file's key order, so that the first bad token is named
    const std::string& key = item.key();
    const auto id = static_cast<std::size_t>(id_of.at(key));
    std::string& raw = t.bytes_[id];
    for (std::size_t i = 0; i < key.size();) {
      const CodePoint cp = decode_at(key, i);
      const int b =
          cp.len > 1 || cp.c < 0x80 ? (cp.c < unicode_to_byte.size() ? unicode_to_byte[cp.c] : -1) : -1;
      if (b < 0) {
        return Status::invalid_argument(vocab_name + ": token \"" + key +
                                        "\" is not byte-level BPE (GPT-2's byte-to-character mapping)");
      }
      raw += static_cast<char>(b);
      i += cp.len;
    }
  }
  for (std::size_t id = 0; id < t.bytes_.size(); ++id) {
    const std::string& raw = t.bytes_[id];
    if (raw.size() > 4 && raw.rfind("<|", 0) == 0 && raw.compare(raw.size() - 2, 2, "|>") == 0)
      t.specials_.push_back(static_cast<int>(id));
  }
  t.sort_specials();
  for (unsigned b = 0; b < 256; ++b) {
    std::string key;
    append_utf8(byte_to_unicode(b), key);
    auto it = id_of.find(key);
    if (it == id_of.end()) {
      return Status::invalid_argument(vocab_name + ": no token for byte " + std::to_string(b) +
                                      " (byte-level BPE needs all 256)");
    }
    t.byte_token_[b] = it->second;
  }

  std::size_t line_no = 0, begin = 0;
  int rank = 0;
  while (begin < merges_txt.size()) {
    std::size_t end = merges_txt.find('\n', begin);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(begin, end - begin);
    begin = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const auto where = [&] {
      return merges_name + " line " + std::to_string(line_no) + " \"" + std::string(line) + "\"";
    };
    std::string left, right;
    if (!split_merge(line, left, right))
      return Status::invalid_argument(where() + ": allowed: two tokens separated by one space");
    auto ids_of = merge_ids(id_of, left, right);
    if (!ids_of.is_ok()) return Status::invalid_argument(where() + ": " + ids_of.status().message());
    // A pair listed twice takes its last rank, as GPT-2's dictionary of ranks does.
    const auto [l, r, merged] = *ids_of;
    t.merges_.insert_or_assign(pair_key(l, r), Merge{rank++, merged});
  }
  return t;
}

void BpeTokenizer::encode_long_piece(std::string_view piece, std::vector<int>& out) const {
  std::vector<int> id(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) id[i] = byte_token_[static_cast<unsigned char>(piece[i])];
  merge_from_heap(std::move(id), out);
}

void BpeTokenizer::encode_sentencepiece(std::string_view piece, std::vector<int>& out) const {
  std::vector<int> id;
  id.reserve(piece.size());
  for (std::size_t i = 0; i < piece.size();) {
    char32_t c = 0;
    const std::size_t len = decode_utf8(piece, i, c);
    if (len > 0) {
      if (auto it = char_token_.find(c); it != char_token_.end()) {
        id.push_back(it->second);
        i += len;
        continue;
      }
    }
    // Not in the vocabulary (or not UTF-8): its bytes' tokens.
    for (const std::size_t end = i + std::max<std::size_t>(len, 1); i < end; ++i)
      id.push_back(byte_token_[static_cast<unsigned char>(piece[i])]);
  }
  merge_from_heap(std::move(id), out);
}

void BpeTokenizer::merge_from_heap(std::vector<int> id, std::vector<int>& out) const {
  if (id.empty()) return;
  const auto n = static_cast<int>(id.size());
  // The symbols as a linked list over their first positions; a merge keeps the left one.
  std::vector<int> prev(id.size()), next(id.size());
  std::vector<bool> gone(id.size(), false);
  for (int i = 0; i < n; ++i) {
    prev[static_cast<std::size_t>(i)] = i - 1;
    next[static_cast<std::size_t>(i)] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int rank, pos, left, right;
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> heap(later);
  const auto consider = [&](int pos) {
    if (pos < 0) return;
    const int nx = next[static_cast<std::size_t>(pos)];
    if (nx < 0) return;
    const int l = id[static_cast<std::size_t>(pos)], r = id[static_cast<std::size_t>(nx)];
    if (auto it = merges_.find(pair_key(l, r)); it != merges_.end()) heap.push({it->second.rank, pos, l, r});
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    const auto p = static_cast<std::size_t>(c.pos);
    const int nx = next[p];
    // Stale: one side merged away or into something else since the pair was seen.
    if (gone[p] || nx < 0 || id[p] != c.left || id[static_cast<std::size_t>(nx)] != c.right) continue;
    id[p] = merges_.at(pair_key(c.left, c.right)).merged;
    gone[static_cast<std::size_t>(nx)] = true;
    next[p] = next[static_cast<std::size_t>(nx)];
    if (next[p] >= 0) prev[static_cast<std::size_t>(next[p])] = c.pos;
    consider(prev[p]);
    consider(c.pos);
  }
  for (int i = 0; i >= 0; i = next[static_cast<std::size_t>(i)])
    out.push_back(id[static_cast<std::size_t>(i)]);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int>& out) const {
  if (pre_ == PreTokenizer::kSentencePiece) {
    encode_sentencepiece(piece, out);
    return;
  }
  if (!whole_.empty()) {
    if (auto it = whole_.find(std::string(piece)); it != whole_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (piece.size() > long_piece_bytes_) {
    encode_long_piece(piece, out);
    return;
  }
  std::vector<int> word(piece.size());
  for (std::size_t i = 0; i < piece.size(); ++i) word[i] = byte_token_[static_cast<unsigned char>(piece[i])];
  std::vector<int> next;
  while (word.size() > 1) {
    const Merge* best = nullptr;
    int left = 0, right = 0;
    for (std::size_t i = 0; i + 1 < word.size(); ++i) {
      auto it = merges_.find(pair_key(word[i], word[i + 1]));
      if (it != merges_.end() && (best == nullptr || it->second.rank < best->rank)) {
        best = &it->second;
        left = word[i];
        right = word[i + 1];
      }
    }
    if (best == nullptr) break;
    next.clear();
    for (std::size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
        next.push_back(best->merged);
        i += 2;
      } else {
        next.push_back(word[i++]);
      }
    }
    word.swap(next);
  }
  out.insert(out.end(), word.begin(), word.end());
}

std::vector<int> BpeTokenizer::special_tokens() const {
  std::vector<int> ids;
  for (const int id : specials_) {
    if (std::find(text_added_.begin(), text_added_.end(), id) == text_added_.end()) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::vector<std::size_t> BpeTokenizer::cuts(std::string_view text, std::size_t parts,
                                            std::size_t min_part) const {
  // Every pattern starts a piece where a line starts with a non-space character (a newline never joins what
  // follows it), and a special token without a newline cannot span one. The newline must follow a
  // non-space character too: GPT-2's "\s+(?!\S)" leaves the last of a run of whitespace ("  \n", "\n\n")
  // to the next piece when a non-space follows, which a text cut there does not see.
  const bool specials_cross_lines = std::any_of(specials_.begin(), specials_.end(), [this](int id) {
    return bytes(id).find('\n') != std::string::npos;
  });
  parts = std::min(parts, text.size() / std::max<std::size_t>(min_part, 1));
  std::vector<std::size_t> at{0};
  const bool sentencepiece = pre_ == PreTokenizer::kSentencePiece;
  if (parts > 1 && !specials_cross_lines && (!sentencepiece || newline_cuts_)) {
    for (std::size_t k = 1; k < parts; ++k) {
      std::size_t p = std::max(at.back() + 1, k * text.size() / parts);
      const auto line_start = [&](std::size_t q) {
        if (text[q - 1] != '\n') return false;
        if (sentencepiece) return true;
        const auto before = q >= 2 ? static_cast<unsigned char>(text[q - 2]) : 0x20;
        // (BLOOM's pattern keeps the text between its matches as one piece: "\n(" is one.)
        return before < 0x80 && ascii_class(before) != Cls::kSpace && decode_at(text, q).cls != Cls::kSpace &&
               (pre_ != PreTokenizer::kBloom || bloom_match_end(text, q) > 0);
      };
      while (p < text.size() && !line_start(p)) ++p;
      if (p < text.size()) at.push_back(p);
    }
  }
  at.push_back(text.size());
  return at;
}

std::vector<int> BpeTokenizer::encode(std::string_view text, bool continues) const {
  // A long text in pieces of at least 1 MiB on several threads.
  const std::vector<std::size_t> at = cuts(text, static_cast<std::size_t>(threads_), 1 << 20);
  if (at.size() == 2) return encode_serial(text, continues);
  std::vector<std::vector<int>> chunks(at.size() - 1);
  std::vector<std::thread> workers;
  for (std::size_t k = 1; k < chunks.size(); ++k) {
    workers.emplace_back([&, k] { chunks[k] = encode_serial(text.substr(at[k], at[k + 1] - at[k]), true); });
  }
  chunks[0] = encode_serial(text.substr(0, at[1]), continues);
  for (std::thread& w : workers) w.join();
  std::vector<int> out = std::move(chunks[0]);
  for (std::size_t k = 1; k < chunks.size(); ++k) out.insert(out.end(), chunks[k].begin(), chunks[k].end());
  return out;
}

std::vector<int> BpeTokenizer::encode_serial(std::string_view text, bool continues) const {
  std::vector<int> out;
  out.reserve(text.size() / 2 + 16);  // English runs at 2 to 4 bytes per token
  PieceCache cache;
  // Split at the special tokens: the earliest occurrence of any (the longest where several start there). Each
  // special token's next occurrence is looked up again only once the text has passed it.
  std::vector<std::size_t> next(specials_.size(), 0);
  for (std::size_t k = 0; k < specials_.size(); ++k) next[k] = text.find(bytes(specials_[k]));
  // Normalized text between special tokens (NFC, SentencePiece's ▁), which the cache's pieces point into.
  std::deque<std::string> normalized;
  std::size_t from = 0;
  const auto plain = [&](std::string_view part) {
    if (nfc_ && nfc_may_change(part)) {
      normalized.push_back(nfc(part));
      part = normalized.back();
    }
    if (pre_ == PreTokenizer::kSentencePiece && !part.empty()) {
      const bool space = part[0] == ' ' || part.substr(0, kMeta.size()) == kMeta;
      const bool starts = from > 0 || !continues;  // not a continuation after a cut
      const bool prepend =
          starts && (prepend_ == Prepend::kEvery || (prepend_ == Prepend::kEveryUnlessSpace && !space) ||
                     (prepend_ == Prepend::kFirstUnlessSpace && !space && from == 0));
      std::string& s = normalized.emplace_back();
      s.reserve(part.size() + part.size() / 4 + kMeta.size());
      if (prepend) s += kMeta;
      for (const char ch : part) {
        if (ch == ' ') {
          s += kMeta;
        } else {
          s += ch;
        }
      }
      part = s;
    }
    encode_text(part, out, cache);
  };
  while (from < text.size()) {
    std::size_t at = std::string_view::npos;
    int special = -1;
    for (std::size_t k = 0; k < specials_.size(); ++k) {
      if (next[k] != std::string_view::npos && next[k] < from) next[k] = text.find(bytes(specials_[k]), from);
      if (next[k] < at) {
        at = next[k];
        special = specials_[k];
      }
    }
    plain(text.substr(from, at == std::string_view::npos ? at : at - from));
    if (special < 0) break;
    out.push_back(special);
    from = at + bytes(special).size();
  }
  return out;
}

std::size_t BpeTokenizer::sentencepiece_piece_end(std::string_view s, std::size_t i) const {
  if (!word_pieces_) return s.size();
  // The next ▁ after another character: no token spans it, so merging each side alone changes nothing.
  for (std::size_t at = s.find(kMeta, i + 1); at != std::string_view::npos; at = s.find(kMeta, at + 1)) {
    if (at < kMeta.size() || s.compare(at - kMeta.size(), kMeta.size(), kMeta) != 0) return at;
  }
  return s.size();
}

void BpeTokenizer::encode_text(std::string_view text, std::vector<int>& out, PieceCache& cache) const {
  Pieces pieces(text, pre_);
  for (std::size_t i = 0, end = 0; i < text.size(); i = end) {
    end = pre_ == PreTokenizer::kSentencePiece ? sentencepiece_piece_end(text, i) : pieces.end(i);
    const std::string_view piece = text.substr(i, end - i);
    if (auto it = cache.find(piece); it != cache.end()) {
      const auto [first, last] = it->second;
      for (std::size_t k = first; k < last; ++k) {
        const int id = out[k];
        out.push_back(id);
      }
      continue;
    }
    const std::size_t first = out.size();
    encode_piece(piece, out);
    cache.emplace(piece, std::make_pair(first, out.size()));
  }
}

std::string BpeTokenizer::decode(const int* ids, std::size_t n) const {
  std::string out;
  for (std::size_t i = 0; i < n; ++i) {
    if (ids[i] >= 0 && ids[i] < vocab_size()) out += bytes_[static_cast<std::size_t>(ids[i])];
  }
  if (pre_ == PreTokenizer::kSentencePiece && prepend_ != Prepend::kNever && !out.empty() && out[0] == ' ')
    out.erase(0, 1);
  return out;
}

Result<std::optional<BpeTokenizer>> choose_tokenizer(const std::string& choice, const std::string& model_dir,
                                                     int max_vocab, const std::string& what) {
  if (choice == "bytes") return std::optional<BpeTokenizer>();
  const char* allowed =
      "; allowed: a directory holding BPE tokenizer files (GPT-2's, Llama 3's, Qwen2's, Falcon's, "
      "StarCoder's, BLOOM's, Llama 2's, Mistral's), its tokenizer.json, or bytes";
  std::string dir = choice;
  std::error_code ec;
  const std::filesystem::path file(choice);
  bool whole_file = false;  // --tokenizer DIR/tokenizer.json: that file, even where DIR also has the pair
  if (dir.empty()) {
    if (model_dir.empty() || !BpeTokenizer::present(model_dir)) return std::optional<BpeTokenizer>();
    dir = model_dir;
  } else if (std::filesystem::is_regular_file(file, ec)) {
    // A tokenizer's own file stands for its directory (where memwall also finds a pair's other file).
    const std::string name = file.filename().string();
    if (name != "tokenizer.json" && name != "vocab.json" && name != "merges.txt")
      return Status::invalid_argument(what + " " + choice + ": a file that is not a tokenizer's" + allowed);
    dir = file.has_parent_path() ? file.parent_path().string() : ".";
    whole_file = name == "tokenizer.json";
    if (!whole_file && !BpeTokenizer::present(dir))
      return Status::not_found(what + " " + choice +
                               ": the other file of the pair (vocab.json and merges.txt) is not beside it" +
                               allowed);
  } else if (!BpeTokenizer::present(dir)) {
    return Status::not_found(what + " " + dir + ": no vocab.json and merges.txt (or tokenizer.json) there" +
                             allowed);
  }
  auto t = [&]() -> Result<BpeTokenizer> {
    if (!whole_file) return BpeTokenizer::load(dir);
    auto text = io::read_file(choice);
    if (!text.is_ok()) return text.status();
    return BpeTokenizer::parse_tokenizer_json(*text, dir);
  }();
  if (!t.is_ok()) return Status(t.status().code(), what + ": " + t.status().message());
  if (max_vocab > 0 && t->vocab_size() > max_vocab) {
    return Status::invalid_argument(what + " " + dir + ": " + std::to_string(t->vocab_size()) +
                                    " tokens, more than the model's vocabulary of " +
                                    std::to_string(max_vocab));
  }
  return std::optional<BpeTokenizer>(std::move(t).value());
}

const char* pre_tokenizer_name(PreTokenizer pre) {
  switch (pre) {
    case PreTokenizer::kLlama3:
      return "Llama 3";
    case PreTokenizer::kQwen2:
      return "Qwen2";
    case PreTokenizer::kO200k:
      return "o200k";
    case PreTokenizer::kTekken:
      return "Tekken";
    case PreTokenizer::kFalcon:
      return "Falcon";
    case PreTokenizer::kStarCoder:
      return "StarCoder";
    case PreTokenizer::kBloom:
      return "BLOOM";
    case PreTokenizer::kSentencePiece:
      return "SentencePiece";
    case PreTokenizer::kGpt2:
      break;
  }
  return "GPT-2";
}

std::vector<std::string_view> pretokenize(std::string_view s, PreTokenizer pre) {
  std::vector<std::string_view> pieces;
  Pieces split(s, pre);
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t end = split.end(i);
    pieces.push_back(s.substr(i, end - i));
    i = end;
  }
  return pieces;
}

}  // namespace memwall::train
