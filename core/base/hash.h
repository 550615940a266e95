// FNV-1a, 64 bit: a hash that is the same in every process and build (unlike std::hash), for comparing what
// ranks planned or are about to run.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memwall {

inline constexpr std::uint64_t kFnv1aOffset = 1469598103934665603ull;

// Extends `h` (kFnv1aOffset to start) with `n` bytes.
inline std::uint64_t fnv1a(const void* data, std::size_t n, std::uint64_t h = kFnv1aOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace memwall
