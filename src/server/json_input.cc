#include "server/json_input.h"

#include <cmath>
#include <limits>

namespace gb::server {

using json = nlohmann::json;

namespace {

struct TooDeep {};

// At most max_bytes of text, cut at a character boundary (then "..."), invalid UTF-8 replaced.
std::string bounded_utf8(std::string_view text, size_t max_bytes) {
  std::string out;
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    // The length of a well-formed UTF-8 sequence starting here; 0: invalid.
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n > 1) {
      if (i + n > text.size()) n = 0;
      for (size_t k = 1; n != 0 && k < n; ++k) {
        if ((static_cast<unsigned char>(text[i + k]) >> 6) != 0x2) n = 0;
      }
    }
    const size_t width = n == 0 ? 3 : n;  // U+FFFD is 3 bytes
    if (out.size() + width > max_bytes) {
      out += "...";
      break;
    }
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      i += 1;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

// "syntax error while parsing value - invalid literal" out of nlohmann's what(), without the
// exception id, the position and the "last read" echo of the input.
std::string parse_error_reason(const json::parse_error& e) {
  const std::string w = e.what();
  size_t a = w.find("parse error");
  if (a != std::string::npos) a = w.find(": ", a);
  std::string reason = a == std::string::npos ? std::string("syntax error") : w.substr(a + 2);
  if (const size_t b = reason.find("; last read"); b != std::string::npos) reason.resize(b);
  return bounded_utf8(reason, 120);
}

}  // namespace

std::optional<ApiError> parse_json_body(std::string_view body, json* out) {
  // The callback sees each container as it opens, with the depth of its parent: stop the parse
  // there, before anything deeper is built.
  auto limit = [](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= kMaxJsonDepth)
      throw TooDeep{};
    return true;
  };
  try {
    *out = json::parse(body.begin(), body.end(), limit);
  } catch (const TooDeep&) {
    return invalid_field("", "the request body nests objects and arrays deeper than " + std::to_string(kMaxJsonDepth) +
                                 " levels (the limit)");
  } catch (const json::parse_error& e) {
    return invalid_field("", "the request body is not valid JSON: " + parse_error_reason(e) + " (at byte " +
                                 std::to_string(e.byte) + ")");
  } catch (const json::out_of_range&) {
    // 406: a number literal beyond a double (1e400); nlohmann's message would quote all of it.
    return invalid_field("", "the request body has a number too large for a 64-bit float (beyond ±1.8e308)");
  } catch (const json::exception&) {
    return invalid_field("", "the request body is not valid JSON");
  }
  return std::nullopt;
}

bool json_integer(const json& v, int64_t lo, int64_t hi, int64_t* out) {
  int64_t i = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    i = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    i = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(std::floor(d) == d) || std::fabs(d) >= 9e15) return false;
    i = static_cast<int64_t>(d);
  } else {
    return false;
  }
  if (i < lo || i > hi) return false;
  *out = i;
  return true;
}

std::string quote_input(std::string_view text, size_t max_bytes) {
  std::string out(1, '\'');
  out.append(bounded_utf8(text, max_bytes));
  out.push_back('\'');
  return out;
}

}  // namespace gb::server
