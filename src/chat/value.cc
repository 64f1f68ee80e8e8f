// Value printing (Python str/repr), JSON output as Python's json.dumps writes it, equality and
// ordering, and conversion from nlohmann::json.
#include "chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace gb::chat {
namespace {

// Bounds recursion through nested containers; namespaces can be made to contain themselves.
constexpr int kMaxNesting = 128;

Status too_deep() { return Status::error("value nested too deeply (a namespace containing itself?)"); }
Status too_large() { return Status::error("value too large to print"); }

void repr_string(std::string_view s, std::string& out) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  out += quote;
  for (unsigned char c : s) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c == static_cast<unsigned char>(quote)) {
          out += '\\';
          out += static_cast<char>(c);
        } else if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\x%02x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += quote;
}

Status append_repr(const Value& v, std::string& out, int depth, size_t max);

Status append_str(const Value& v, std::string& out, int depth, size_t max) {
  if (depth > kMaxNesting) return too_deep();
  if (out.size() > max) return too_large();
  switch (v.type()) {
    case Value::Type::kUndefined: return Status::ok();
    case Value::Type::kNone: out += "None"; return Status::ok();
    case Value::Type::kBool: out += v.as_bool() ? "True" : "False"; return Status::ok();
    case Value::Type::kInt: out += std::to_string(v.as_int()); return Status::ok();
    case Value::Type::kFloat: out += format_float(v.as_float()); return Status::ok();
    case Value::Type::kString: out += v.str(); return Status::ok();
    case Value::Type::kList: {
      const bool tuple = v.list_ptr()->is_tuple;
      out += tuple ? '(' : '[';
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out += ", ";
        first = false;
        GB_RETURN_IF_ERROR(append_repr(item, out, depth + 1, max));
      }
      if (tuple && v.items().size() == 1) out += ',';
      out += tuple ? ')' : ']';
      return Status::ok();
    }
    case Value::Type::kDict: {
      if (v.is_namespace()) out += "<Namespace ";
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.dict_ref().items) {
        if (!first) out += ", ";
        first = false;
        repr_string(key, out);
        out += ": ";
        GB_RETURN_IF_ERROR(append_repr(item, out, depth + 1, max));
      }
      out += '}';
      if (v.is_namespace()) out += '>';
      return Status::ok();
    }
    case Value::Type::kCallable: out += "<function " + v.callable().name + ">"; return Status::ok();
  }
  return Status::ok();
}

Status append_repr(const Value& v, std::string& out, int depth, size_t max) {
  if (v.is_string()) {
    repr_string(v.str(), out);
    return Status::ok();
  }
  if (v.is_undefined()) return Status::ok();
  return append_str(v, out, depth, max);
}

void json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else if (c >= 0x80 && ensure_ascii) {
          // Decode one code point (invalid bytes pass through as U+FFFD) and escape it as UTF-16.
          uint32_t cp = 0xFFFD;
          size_t len = 1;
          if ((c & 0xE0) == 0xC0) {
            cp = c & 0x1F;
            len = 2;
          } else if ((c & 0xF0) == 0xE0) {
            cp = c & 0x0F;
            len = 3;
          } else if ((c & 0xF8) == 0xF0) {
            cp = c & 0x07;
            len = 4;
          }
          if (len > 1 && i + len <= s.size()) {
            for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
            i += len - 1;
          } else {
            cp = 0xFFFD;
          }
          char buf[16];
          if (cp >= 0x10000) {
            cp -= 0x10000;
            std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
          } else {
            std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
          }
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void newline_indent(const JsonFormat& f, int level, std::string& out) {
  out += '\n';
  out.append(static_cast<size_t>(f.indent) * level, ' ');
}

Status append_json(const Value& v, const JsonFormat& f, int level, std::string& out) {
  if (level > kMaxNesting) return too_deep();
  if (out.size() > f.max_bytes) return too_large();
  const std::string& item_sep = f.item_separator;
  const std::string& key_sep = f.key_separator;
  switch (v.type()) {
    case Value::Type::kUndefined:
      return Status::error(
          "tojson: cannot serialize an undefined value" +
          (v.undefined_name().empty() ? std::string() : " ('" + std::string(v.undefined_name()) + "')"));
    case Value::Type::kNone: out += "null"; return Status::ok();
    case Value::Type::kBool: out += v.as_bool() ? "true" : "false"; return Status::ok();
    case Value::Type::kInt: out += std::to_string(v.as_int()); return Status::ok();
    case Value::Type::kFloat: {
      const double d = v.as_float();
      if (std::isnan(d)) out += "NaN";
      else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
      else out += format_float(d);
      return Status::ok();
    }
    case Value::Type::kString: json_string(v.str(), f.ensure_ascii, out); return Status::ok();
    case Value::Type::kList: {
      const auto& items = v.items();
      if (items.empty()) {
        out += "[]";
        return Status::ok();
      }
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += item_sep;
        if (f.indent >= 0) newline_indent(f, level + 1, out);
        GB_RETURN_IF_ERROR(append_json(items[i], f, level + 1, out));
      }
      if (f.indent >= 0) newline_indent(f, level, out);
      out += ']';
      return Status::ok();
    }
    case Value::Type::kDict: {
      const auto& entries = v.dict_ref().items;
      if (entries.empty()) {
        out += "{}";
        return Status::ok();
      }
      std::vector<const std::pair<std::string, Value>*> order;
      order.reserve(entries.size());
      for (const auto& e : entries) order.push_back(&e);
      if (f.sort_keys) {
        std::stable_sort(order.begin(), order.end(), [](auto* a, auto* b) { return a->first < b->first; });
      }
      out += '{';
      for (size_t i = 0; i < order.size(); ++i) {
        if (i > 0) out += item_sep;
        if (f.indent >= 0) newline_indent(f, level + 1, out);
        json_string(order[i]->first, f.ensure_ascii, out);
        out += key_sep;
        GB_RETURN_IF_ERROR(append_json(order[i]->second, f, level + 1, out));
      }
      if (f.indent >= 0) newline_indent(f, level, out);
      out += '}';
      return Status::ok();
    }
    case Value::Type::kCallable: return Status::error("tojson: cannot serialize a function");
  }
  return Status::ok();
}

bool equal_impl(const Value& a, const Value& b, int depth) {
  if (depth > kMaxNesting) return false;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x == y;
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::kUndefined:
    case Value::Type::kNone: return true;
    case Value::Type::kString: return a.str() == b.str();
    case Value::Type::kList: {
      if (a.list_ptr() == b.list_ptr()) return true;
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!equal_impl(x[i], y[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Type::kDict: {
      if (a.dict_ptr() == b.dict_ptr()) return true;
      if (a.is_namespace() || b.is_namespace()) return false;  // identity only, as in Python
      const auto& x = a.dict_ref().items;
      const auto& y = b.dict_ref();
      if (x.size() != y.items.size()) return false;
      for (const auto& [key, item] : x) {
        const Value* other = y.find(key);
        if (other == nullptr || !equal_impl(item, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Type::kCallable: return &a.callable() == &b.callable();
    default: return false;
  }
}

Result<bool> less_impl(const Value& a, const Value& b, int depth) {
  if (depth > kMaxNesting) return too_deep();
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() < b.to_double();
    const int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    const int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x < y;
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order == code point order
  if (a.is_list() && b.is_list()) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equal_impl(x[i], y[i], depth + 1)) continue;
      return less_impl(x[i], y[i], depth + 1);
    }
    return x.size() < y.size();
  }
  return Status::error(std::string("'<' not supported between instances of '") + type_name(a) + "' and '" +
                       type_name(b) + "'");
}

template <class J>
Value from_json_impl(const J& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value(j.template get<double>());
    case nlohmann::json::value_t::string: return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json_impl(e));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto d = std::make_shared<ValueDict>();
      d->items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d->items.emplace_back(it.key(), from_json_impl(it.value()));
      return Value(std::move(d));
    }
    default: return Value::none();  // binary / discarded: not produced by JSON text
  }
}

}  // namespace

const Value* ValueDict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void ValueDict::set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

double Value::to_double() const {
  switch (type()) {
    case Type::kBool: return as_bool() ? 1.0 : 0.0;
    case Type::kInt: return static_cast<double>(as_int());
    case Type::kFloat: return as_float();
    default: return 0.0;
  }
}

bool Value::truthy() const {
  switch (type()) {
    case Type::kUndefined:
    case Type::kNone: return false;
    case Type::kBool: return as_bool();
    case Type::kInt: return as_int() != 0;
    case Type::kFloat: return as_float() != 0.0;
    case Type::kString: return !str().empty();
    case Type::kList: return !items().empty();
    case Type::kDict: return is_namespace() || !dict_ref().items.empty();
    case Type::kCallable: return true;
  }
  return false;
}

const char* type_name(const Value& v) {
  switch (v.type()) {
    case Value::Type::kUndefined: return "undefined";
    case Value::Type::kNone: return "NoneType";
    case Value::Type::kBool: return "bool";
    case Value::Type::kInt: return "int";
    case Value::Type::kFloat: return "float";
    case Value::Type::kString: return "str";
    case Value::Type::kList: return "list";
    case Value::Type::kDict: return v.is_namespace() ? "Namespace" : "dict";
    case Value::Type::kCallable: return "function";
  }
  return "?";
}

Result<std::string> to_display_string(const Value& v, size_t max_bytes) {
  if (v.is_string()) return v.str();
  std::string out;
  GB_RETURN_IF_ERROR(append_str(v, out, 0, max_bytes));
  if (out.size() > max_bytes) return too_large();
  return out;
}

Result<std::string> to_repr(const Value& v, size_t max_bytes) {
  std::string out;
  GB_RETURN_IF_ERROR(append_repr(v, out, 0, max_bytes));
  if (out.size() > max_bytes) return too_large();
  return out;
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci looks like "-1.2345e+02": split sign, digits and exponent.
  std::string sign;
  size_t p = 0;
  if (sci[0] == '-') {
    sign = "-";
    p = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = p; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  const int exp10 = std::stoi(sci.substr(e + 1));
  const int decpt = exp10 + 1;  // position of the decimal point relative to the digits
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0.";
      out.append(static_cast<size_t>(-decpt), '0');
      out += digits;
    } else if (static_cast<size_t>(decpt) >= digits.size()) {
      out += digits;
      out.append(static_cast<size_t>(decpt) - digits.size(), '0');
      out += ".0";
    } else {
      out += digits.substr(0, decpt);
      out += '.';
      out += digits.substr(decpt);
    }
  } else {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out += digits.substr(1);
    }
    char ebuf[16];
    std::snprintf(ebuf, sizeof(ebuf), "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    out += ebuf;
  }
  return out;
}

Result<std::string> to_json(const Value& v, const JsonFormat& format) {
  JsonFormat f = format;
  if (f.item_separator.empty()) f.item_separator = f.indent >= 0 ? "," : ", ";
  if (f.key_separator.empty()) f.key_separator = ": ";
  std::string out;
  GB_RETURN_IF_ERROR(append_json(v, f, 0, out));
  if (out.size() > f.max_bytes) return too_large();
  return out;
}

bool values_equal(const Value& a, const Value& b) { return equal_impl(a, b, 0); }

Result<bool> value_less(const Value& a, const Value& b) { return less_impl(a, b, 0); }

Value from_json(const nlohmann::ordered_json& j) { return from_json_impl(j); }
Value from_json(const nlohmann::json& j) { return from_json_impl(j); }

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  // Matches utf8_offsets: a stray continuation byte at the start counts as a character.
  if (!s.empty() && (static_cast<unsigned char>(s[0]) & 0xC0) == 0x80) ++n;
  return n;
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> offsets;
  offsets.reserve(s.size() + 1);
  for (size_t i = 0; i < s.size(); ++i) {
    // A continuation byte at the very start still counts as a character, so no byte is lost.
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 || i == 0) offsets.push_back(i);
  }
  offsets.push_back(s.size());
  return offsets;
}

}  // namespace gb::chat
