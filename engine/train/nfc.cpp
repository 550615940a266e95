// Normalization form C: decompose, order the combining marks, compose (UAX #15's algorithm).
#include "engine/train/nfc.h"

#include <algorithm>
#include <vector>

#include "base/utf8.h"

namespace memwall::train {

namespace {

struct CombiningClass {
  char32_t c;
  unsigned char ccc;
};
struct Decomposition {
  char32_t c;
  unsigned short at, n;  // kDecomposed[at .. at + n)
};
struct Composition {
  char32_t first, second, composite;
};
#include "engine/train/unicode_nfc.inc"

// Hangul syllables (UAX #15, 3.12): S = SBase + (L index * VCount + V index) * TCount + T index.
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28, kSCount = kLCount * kVCount * kTCount;
// A byte that is not UTF-8, kept as a code point past Unicode's: a starter that composes with nothing.
constexpr char32_t kRawByte = 0x110000;

int ccc(char32_t c) {
  if (c < 0x300) return 0;
  const auto* end = std::end(kCombiningClasses);
  const auto* it = std::lower_bound(std::begin(kCombiningClasses), end, c,
                                    [](const CombiningClass& e, char32_t v) { return e.c < v; });
  return it != end && it->c == c ? it->ccc : 0;
}

void decompose(char32_t c, std::vector<char32_t>& out) {
  if (c >= kSBase && c < kSBase + kSCount) {
    const char32_t s = c - kSBase;
    out.push_back(kLBase + s / (kVCount * kTCount));
    out.push_back(kVBase + s % (kVCount * kTCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = std::end(kDecompositions);
  const auto* it = std::lower_bound(std::begin(kDecompositions), end, c,
                                    [](const Decomposition& e, char32_t v) { return e.c < v; });
  if (it == end || it->c != c) {
    out.push_back(c);
    return;
  }
  out.insert(out.end(), kDecomposed + it->at, kDecomposed + it->at + it->n);
}

// The primary composite of (first, second), or 0.
char32_t compose(char32_t first, char32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  const auto* end = std::end(kCompositions);
  const auto* it = std::lower_bound(std::begin(kCompositions), end, std::make_pair(first, second),
                                    [](const Composition& e, const std::pair<char32_t, char32_t>& v) {
                                      return e.first != v.first ? e.first < v.first : e.second < v.second;
                                    });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

}  // namespace

bool nfc_may_change(std::string_view text) {
  return std::any_of(text.begin(), text.end(), [](char b) { return static_cast<unsigned char>(b) >= 0xCC; });
}

std::string nfc(std::string_view text) {
  if (!nfc_may_change(text)) return std::string(text);
  // 1. The full canonical decomposition.
  std::vector<char32_t> cps;
  cps.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    char32_t c = 0;
    const std::size_t len = decode_utf8(text, i, c);
    if (len == 0) {
      cps.push_back(kRawByte + static_cast<unsigned char>(text[i]));
      ++i;
      continue;
    }
    decompose(c, cps);
    i += len;
  }
  // 2. Canonical ordering: each run of combining marks sorted by class, stably.
  for (std::size_t i = 0; i < cps.size();) {
    if (ccc(cps[i]) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < cps.size() && ccc(cps[j]) != 0) ++j;
    std::stable_sort(cps.begin() + static_cast<std::ptrdiff_t>(i),
                     cps.begin() + static_cast<std::ptrdiff_t>(j),
                     [](char32_t a, char32_t b) { return ccc(a) < ccc(b); });
    i = j;
  }
  // 3. Canonical composition: a mark joins the last starter unless a mark of the same or a higher class, or
  // a starter, stands between them.
  std::size_t kept = 0, starter = 0;
  bool have_starter = false;
  int last_class = -1;  // of the last kept code point; -1: none yet
  for (const char32_t c : cps) {
    const int cls = ccc(c);
    if (have_starter && (last_class < cls || last_class == 0) && c < kRawByte) {
      if (const char32_t joined = compose(cps[starter], c); joined != 0) {
        cps[starter] = joined;
        continue;
      }
    }
    if (cls == 0) {
      starter = kept;
      have_starter = c < kRawByte;
    }
    last_class = cls;
    cps[kept++] = c;
  }
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < kept; ++i) {
    if (cps[i] >= kRawByte) {
      out += static_cast<char>(cps[i] - kRawByte);
    } else {
      append_utf8(cps[i], out);
    }
  }
  return out;
}

}  // namespace memwall::train
