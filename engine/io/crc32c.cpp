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

// Product of two polynomials modulo the CRC polynomial, in the CRC's reflected bit order (bit 31 is x^0).
std::uint32_t mul_mod_poly(std::uint32_t a, std::uint32_t b) {
  std::uint32_t product = 0;
  for (std::uint32_t bit = 1u << 31; bit != 0; bit >>= 1) {
    if (a & bit) product ^= b;
    b = (b & 1) ? (b >> 1) ^ kPoly : b >> 1;  // b * x
  }
  return product;
}

}  // namespace

// Appending B to A feeds crc(A)'s register through 8 * |B| more bit steps, which multiplies it by
// x^(8 |B|); the pre- and post-inversions cancel in the sum (the same identity zlib's crc32_combine uses).
std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t bytes_b) {
  std::uint32_t shift = 1u << 31;   // x^0
  std::uint32_t square = 1u << 23;  // x^8: one byte
  for (std::uint64_t n = bytes_b; n != 0; n >>= 1) {
    if (n & 1) shift = mul_mod_poly(shift, square);
    square = mul_mod_poly(square, square);
  }
  return mul_mod_poly(shift, crc_a) ^ crc_b;
}

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
