// UTF-8 helpers, the GPT-2 byte <-> unicode table, and Unicode normalization (utf8proc).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gb::tok {

// Length of the UTF-8 sequence starting with lead byte c (1 for invalid lead bytes).
inline int utf8_len(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

// Length of the valid UTF-8 character at s[i], or 0 if the bytes there are not one.
int valid_char_len(std::string_view s, size_t i);
bool is_valid_utf8(std::string_view s);
// Replaces each maximal invalid subsequence with U+FFFD (like String::from_utf8_lossy).
std::string to_valid_utf8(std::string_view s);
void append_utf8(uint32_t cp, std::string* out);
// Decodes one code point at s[*i] (valid UTF-8 assumed) and advances *i.
uint32_t next_code_point(std::string_view s, size_t* i);

// GPT-2's reversible byte -> printable code point map used by byte-level BPE vocabularies.
uint32_t byte_to_unicode(uint8_t b);
// The inverse; -1 for code points outside the map.
int unicode_to_byte(uint32_t cp);
// Vocabulary string ("Ġhello") -> raw bytes (" hello"); false if a char is outside the map.
bool byte_level_decode(std::string_view s, std::string* out);
std::string byte_level_encode(std::string_view raw);

enum class NormForm { kNfc, kNfd, kNfkc, kNfkd };
// Valid UTF-8 in, valid UTF-8 out.
std::string normalize(std::string_view s, NormForm form);
std::string to_lower(std::string_view s);
bool is_whitespace(uint32_t cp);
// Unicode general category L* / N* / P*.
bool is_letter(uint32_t cp);
bool is_number(uint32_t cp);
bool is_punctuation(uint32_t cp);

}  // namespace gb::tok
