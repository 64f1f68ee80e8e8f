// UTF-8 handling and the byte-level table; normalization and categories come from utf8proc.
#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <array>
#include <cstdlib>

namespace gb::tok {

int valid_char_len(std::string_view s, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  const size_t left = s.size() - i;
  const unsigned char c = p[0];
  if (c < 0x80) return 1;
  auto cont = [&](size_t k) { return k < left && (p[k] & 0xC0) == 0x80; };
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (!cont(1) || !cont(2)) return 0;
    if (c == 0xE0 && p[1] < 0xA0) return 0;   // overlong
    if (c == 0xED && p[1] >= 0xA0) return 0;  // surrogate
    return 3;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (!cont(1) || !cont(2) || !cont(3)) return 0;
    if (c == 0xF0 && p[1] < 0x90) return 0;
    if (c == 0xF4 && p[1] >= 0x90) return 0;
    return 4;
  }
  return 0;
}

bool is_valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    // ASCII fast path: eight bytes at a time.
    while (i + 8 <= s.size()) {
      uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const int n = valid_char_len(s, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string to_valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const int n = valid_char_len(s, i);
    if (n > 0) {
      out.append(s.data() + i, n);
      i += n;
      continue;
    }
    // Skip the maximal prefix of a valid sequence (one U+FFFD for it), as from_utf8_lossy does.
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const unsigned char c = p[i];
    size_t j = i + 1;
    int want = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) want = 1;
    else if (c >= 0xE0 && c <= 0xEF) {
      want = 2;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      want = 3;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    for (int k = 0; k < want && j < s.size(); ++k, ++j) {
      if (p[j] < lo || p[j] > hi) break;
      lo = 0x80;
      hi = 0xBF;
    }
    out += "\xEF\xBF\xBD";
    i = j;
  }
  return out;
}

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

uint32_t next_code_point(std::string_view s, size_t* i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + *i;
  const int n = utf8_len(p[0]);
  uint32_t cp = 0;
  switch (n) {
    case 1: cp = p[0]; break;
    case 2: cp = ((p[0] & 0x1Fu) << 6) | (p[1] & 0x3Fu); break;
    case 3: cp = ((p[0] & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu); break;
    default: cp = ((p[0] & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu); break;
  }
  *i += n;
  return cp;
}

namespace {
struct ByteTable {
  std::array<uint32_t, 256> to_cp{};
  ByteTable() {
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? static_cast<uint32_t>(b) : next++;
    }
  }
};
const ByteTable& byte_table() {
  static const ByteTable t;
  return t;
}
}  // namespace

uint32_t byte_to_unicode(uint8_t b) { return byte_table().to_cp[b]; }

int unicode_to_byte(uint32_t cp) {
  // The printable bytes map to themselves; the rest to 256.. in byte order.
  if ((cp >= 33 && cp <= 126) || (cp >= 161 && cp <= 172) || (cp >= 174 && cp <= 255)) return static_cast<int>(cp);
  if (cp < 256 || cp >= 256 + 68) return -1;
  static const auto inverse = [] {
    std::array<int, 68> inv{};
    for (int b = 0; b < 256; ++b) {
      const uint32_t c = byte_table().to_cp[b];
      if (c >= 256) inv[c - 256] = b;
    }
    return inv;
  }();
  return inverse[cp - 256];
}

bool byte_level_decode(std::string_view s, std::string* out) {
  out->clear();
  size_t i = 0;
  while (i < s.size()) {
    if (valid_char_len(s, i) == 0) return false;
    const int b = unicode_to_byte(next_code_point(s, &i));
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
  }
  return true;
}

std::string byte_level_encode(std::string_view raw) {
  std::string out;
  for (unsigned char c : raw) append_utf8(byte_to_unicode(c), &out);
  return out;
}

std::string normalize(std::string_view s, NormForm form) {
  // Pure ASCII is invariant under every normalization form.
  bool ascii = true;
  for (unsigned char c : s) {
    if (c >= 0x80) {
      ascii = false;
      break;
    }
  }
  if (ascii) return std::string(s);
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* result = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), static_cast<utf8proc_ssize_t>(s.size()),
                   &result, static_cast<utf8proc_option_t>(options));
  if (n < 0) return std::string(s);  // only on invalid input, which callers have already fixed
  std::string out(reinterpret_cast<const char*>(result), static_cast<size_t>(n));
  std::free(result);
  return out;
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const uint32_t cp = next_code_point(s, &i);
    append_utf8(static_cast<uint32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), &out);
  }
  return out;
}

bool is_whitespace(uint32_t cp) {
  // Rust char::is_whitespace: White_Space property.
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000: return true;
    default: return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_letter(uint32_t cp) {
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO;
}
bool is_number(uint32_t cp) {
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO;
}
bool is_punctuation(uint32_t cp) {
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c >= UTF8PROC_CATEGORY_PC && c <= UTF8PROC_CATEGORY_PO;
}

}  // namespace gb::tok
