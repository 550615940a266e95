// Units and their formatting. Sizes are bytes (binary prefixes when printed: KiB, MiB, GiB, TiB),
// bandwidths are bytes per second (decimal prefixes when printed: GB/s, as the paper and vendors do),
// compute rates are FLOP/s, times are seconds. Quantities that can exceed 2^53 exactly are still held in
// double: memwall models sizes up to ~1e15 bytes, where double keeps integer precision.
#pragma once

#include <cstdint>
#include <string>

namespace memwall {

inline constexpr double kKiB = 1024.0;
inline constexpr double kMiB = 1024.0 * kKiB;
inline constexpr double kGiB = 1024.0 * kMiB;
inline constexpr double kTiB = 1024.0 * kGiB;
inline constexpr double kGB = 1e9;  // bandwidth unit (GB/s)
inline constexpr double kTB = 1e12;

// "1.83 TiB", "512.00 MiB", "0 B": two decimals, the largest binary unit that keeps the value >= 1.
std::string format_bytes(double bytes);
// "12.00 GB/s", "1.52 TB/s".
std::string format_bandwidth(double bytes_per_s);
// "70.0 TFLOP/s".
std::string format_flops(double flops_per_s);
// Parameter counts: "124.4M", "6.74B", "1.01T".
std::string format_count(double count);
// printf-style into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

// A number read from a file as a whole number: `v` truncated when it is finite and within +-2^53 (where a
// double still holds every integer), else `fallback` (casting anything larger is undefined behaviour).
inline long whole_or(double v, long fallback) {
  return v == v && v >= -9007199254740992.0 && v <= 9007199254740992.0 ? static_cast<long>(v) : fallback;
}

}  // namespace memwall

namespace memwall {
struct ParsedBytes {
  bool ok = false;
  double bytes = 0;
};
// "2GiB", "512MiB", "1.5GB", "4096", "1e9": binary (KiB..TiB, also K/M/G/T) or decimal (KB..TB) units.
ParsedBytes parse_bytes(const std::string& text);
}  // namespace memwall
