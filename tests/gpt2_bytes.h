// GPT-2's byte-to-character map as its vocab.json writes bytes (the printable Latin-1 bytes 33-126, 161-172
// and 174-255 as themselves, the other 68 as U+0100 onwards, in order), for tests that build byte-level
// vocabularies or read tests/data/tiny-bpe back. Test code only: no memwall headers, so that any test (the
// CLI tests included) may use it.
#pragma once

#include <string>

namespace test_files {

// The UTF-8 of byte b's stand-in character.
inline std::string gpt2_byte_key(int b) {
  int cp = b, hidden = 256;
  const auto printable = [](int v) { return (v >= 33 && v <= 126) || (v >= 161 && v <= 172) || v >= 174; };
  if (!printable(b)) {
    for (int v = 0; v < b; ++v) hidden += printable(v) ? 0 : 1;
    cp = hidden;
  }
  std::string key;
  if (cp < 0x80) {
    key += static_cast<char>(cp);
  } else {
    key += static_cast<char>(0xC0 | (cp >> 6));
    key += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return key;
}

}  // namespace test_files
