// CRC32C (Castagnoli), as used by iSCSI, ext4 and leveldb: SSE4.2 instructions when the CPU has them, a
// table otherwise. `crc32c_extend(0, data, n)` is the CRC of the data; extend continues a running CRC.
#pragma once

#include <cstddef>
#include <cstdint>

namespace memwall::io {

std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t n);
inline std::uint32_t crc32c(const void* data, std::size_t n) {
  return crc32c_extend(0, data, n);
}
// The CRC of A followed by B from crc(A), crc(B) and B's length: for data written out of order, e.g. arrays
// written piece by piece at their offsets, each with its own running CRC.
std::uint32_t crc32c_combine(std::uint32_t crc_a, std::uint32_t crc_b, std::uint64_t bytes_b);
// The portable table implementation, for tests against the hardware path.
std::uint32_t crc32c_extend_portable(std::uint32_t crc, const void* data, std::size_t n);

}  // namespace memwall::io
