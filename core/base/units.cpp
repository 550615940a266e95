// Formatting of sizes, bandwidths, rates and counts.
#include "base/units.h"

#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace memwall {

std::string strprintf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  va_end(args);
  return out;
}

std::string format_bytes(double bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes == 0) return "0 B";
  double v = bytes;
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return strprintf("%.0f B", v);
  return strprintf("%.2f %s", v, kUnits[u]);
}

std::string format_bandwidth(double bytes_per_s) {
  if (bytes_per_s >= 1e12) return strprintf("%.2f TB/s", bytes_per_s / 1e12);
  if (bytes_per_s >= 1e9) return strprintf("%.2f GB/s", bytes_per_s / 1e9);
  return strprintf("%.1f MB/s", bytes_per_s / 1e6);
}

std::string format_flops(double flops_per_s) {
  if (flops_per_s >= 1e15) return strprintf("%.2f PFLOP/s", flops_per_s / 1e15);
  return strprintf("%.1f TFLOP/s", flops_per_s / 1e12);
}

std::string format_count(double count) {
  if (count >= 1e12) return strprintf("%.2fT", count / 1e12);
  if (count >= 1e9) return strprintf("%.2fB", count / 1e9);
  if (count >= 1e6) return strprintf("%.1fM", count / 1e6);
  if (count >= 1e3) return strprintf("%.1fK", count / 1e3);
  return strprintf("%.0f", count);
}

}  // namespace memwall

namespace memwall {

ParsedBytes parse_bytes(const std::string& text) {
  ParsedBytes r;
  if (text.empty()) return r;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str() || !std::isfinite(v) || v < 0) return r;
  std::string unit(end);
  for (char& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  static const struct {
    const char* name;
    double scale;
  } kUnits[] = {{"", 1},       {"b", 1},    {"k", kKiB},   {"kib", kKiB}, {"m", kMiB},
                {"mib", kMiB}, {"g", kGiB}, {"gib", kGiB}, {"t", kTiB},   {"tib", kTiB},
                {"kb", 1e3},   {"mb", 1e6}, {"gb", 1e9},   {"tb", 1e12}};
  for (const auto& u : kUnits) {
    if (unit == u.name) {
      r.ok = true;
      r.bytes = v * u.scale;
      return r;
    }
  }
  return r;
}

}  // namespace memwall
