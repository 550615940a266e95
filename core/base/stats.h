// Small statistics over measurements.
#pragma once

#include <algorithm>
#include <vector>

namespace memwall {

// The median of a list (the mean of the middle two for an even count; 0 for an empty list).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

}  // namespace memwall
