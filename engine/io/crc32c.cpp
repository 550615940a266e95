// CRC32C with the SSE4.2 crc32 instruction, and the table-driven reference.
#include "engine/io/crc32c.h"

#include <array>
#include <cstring>

namespace memwall::io {

namespace {

constexpr std::uint32_t kPoly = 0x82f63b78u;  // reflected Castagnoli polynomial

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}
constexpr auto kTable = make_table();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_sse42(std::uint32_t crc, const void* data,
                                                             std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t c = ~crc;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n-- > 0) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}
#endif

}  // namespace

std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* data, std::size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  while (n-- > 0) c = kTable[(c ^ *p++) & 0xff] ^ (c >> 8);
  return ~c;
}

std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n) {
#if defined(__x86_64__)
  static const bool kHardware = __builtin_cpu_supports("sse4.2");
  if (kHardware) return crc32c_sse42(crc, data, n);
#endif
  return crc32c_extend_portable(crc, data, n);
}

}  // namespace memwall::io
