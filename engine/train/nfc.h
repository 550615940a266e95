// Unicode normalization form C (NFC), as a Hugging Face tokenizer.json's "NFC" normalizer applies it (Qwen2's
// tokenizers have one) before pre-tokenizing: canonical decomposition, canonical ordering of combining marks,
// canonical composition (UAX #15). Tables from Unicode 14 (scripts/gen_unicode_classes.py).
#pragma once

#include <string>
#include <string_view>

namespace memwall::train {

// `text` in NFC. Bytes that are not UTF-8 pass through unchanged and compose with nothing.
std::string nfc(std::string_view text);
// False when nfc(text) == text for certain without decoding it: no code point from U+0300 on (ASCII,
// Latin-1, ...), none of which decomposes or combines.
bool nfc_may_change(std::string_view text);

}  // namespace memwall::train
