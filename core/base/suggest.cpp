// Edit distances for "did you mean" hints (optimal string alignment: Levenshtein plus swaps).
#include "base/suggest.h"

#include <algorithm>
#include <cctype>

namespace memwall {

namespace {
char lower(char c) {
  return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
}
}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  const std::size_t n = a.size(), m = b.size();
  // Three rows of the (n+1) x (m+1) table: two back for a swap, one back, and the one being filled.
  std::vector<std::size_t> before(m + 1), prev(m + 1), cur(m + 1);
  for (std::size_t j = 0; j <= m; ++j) prev[j] = j;
  for (std::size_t i = 1; i <= n; ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= m; ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) && lower(a[i - 2]) == lower(b[j - 1])) {
        cur[j] = std::min(cur[j], before[j - 2] + 1);
      }
    }
    std::swap(before, prev);
    std::swap(prev, cur);
  }
  return prev[m];
}

std::string closest_name(std::string_view word, const std::vector<std::string>& candidates) {
  if (word.empty()) return "";
  std::string best;
  std::size_t best_distance = 0;
  bool tie = false;
  for (const std::string& c : candidates) {
    if (c == word) return "";
    const std::size_t d = edit_distance(word, c);
    if (d > std::max<std::size_t>(1, std::max(word.size(), c.size()) / 3)) continue;
    if (best.empty() || d < best_distance) {
      best = c;
      best_distance = d;
      tie = false;
    } else if (d == best_distance && c != best) {
      tie = true;
    }
  }
  if (!best.empty()) return tie ? "" : best;
  if (word.size() < 3) return "";
  std::string prefixed;
  for (const std::string& c : candidates) {
    if (c.size() <= word.size() || !std::equal(word.begin(), word.end(), c.begin(),
                                               [](char x, char y) { return lower(x) == lower(y); })) {
      continue;
    }
    if (!prefixed.empty() && prefixed != c) return "";
    prefixed = c;
  }
  return prefixed;
}

std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string name = closest_name(word, candidates);
  return name.empty() ? "" : " (did you mean '" + name + "'?)";
}

}  // namespace memwall
