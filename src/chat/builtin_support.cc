// Shared by the builtins: argument helpers, Python string semantics over UTF-8, value helpers.
#include "chat/builtin_support.h"

#include <algorithm>
#include <cstdlib>

#include <utf8proc.h>

namespace gb::chat::builtin {

// ---- arguments ----

const Value* arg(const CallArgs& a, size_t index, std::string_view name) {
  for (const auto& [k, v] : a.keyword) {
    if (k == name) return &v;
  }
  if (index < a.positional.size()) return &a.positional[index];
  return nullptr;
}

bool arg_bool(const CallArgs& a, size_t index, std::string_view name, bool def) {
  const Value* v = arg(a, index, name);
  return v == nullptr ? def : v->truthy();
}

constexpr size_t kMaxStrBytes = size_t{64} << 20;

Result<std::string> str_of(const Value& v) { return to_display_string(v, kMaxStrBytes); }

Result<int64_t> int_arg(const CallArgs& a, size_t index, std::string_view name, int64_t def) {
  const Value* v = arg(a, index, name);
  if (v == nullptr || v->is_none()) return def;
  if (v->is_int()) return v->as_int();
  if (v->is_bool()) return static_cast<int64_t>(v->as_bool());
  return error(std::string("argument '") + std::string(name) + "' must be an integer, got " + type_name(*v));
}

Result<std::string> string_arg(const CallArgs& a, size_t index, std::string_view name) {
  const Value* v = arg(a, index, name);
  if (v == nullptr) return error(std::string("missing argument '") + std::string(name) + "'");
  if (!v->is_string())
    return error(std::string("argument '") + std::string(name) + "' must be a string, got " + type_name(*v));
  return v->str();
}

// ---- UTF-8 / Unicode helpers ----

std::vector<CodePoint> decode(std::string_view s) {
  std::vector<CodePoint> out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(s.data() + i),
                                          static_cast<utf8proc_ssize_t>(s.size() - i), &cp);
    if (n <= 0) {  // invalid byte: keep it as one opaque unit
      out.push_back({-1, i, 1});
      ++i;
      continue;
    }
    out.push_back({cp, i, static_cast<size_t>(n)});
    i += static_cast<size_t>(n);
  }
  return out;
}

namespace {

void encode(int32_t cp, std::string& out) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

}  // namespace

std::string map_case(std::string_view s, Case c) {
  std::string out;
  out.reserve(s.size());
  for (const CodePoint& p : decode(s)) {
    if (p.cp < 0) {
      out.append(s.substr(p.offset, p.length));
      continue;
    }
    const int32_t m = c == Case::kUpper   ? utf8proc_toupper(p.cp)
                      : c == Case::kLower ? utf8proc_tolower(p.cp)
                                          : utf8proc_totitle(p.cp);
    encode(m, out);
  }
  return out;
}

bool is_cased_letter(int32_t cp) {
  if (cp < 0) return false;
  const auto cat = utf8proc_category(cp);
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}
bool is_alpha(int32_t cp) {
  if (cp < 0) return false;
  const auto cat = utf8proc_category(cp);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}
bool is_digit_cp(int32_t cp) { return cp >= 0 && utf8proc_category(cp) == UTF8PROC_CATEGORY_ND; }
bool is_numeric_cp(int32_t cp) {
  if (cp < 0) return false;
  const auto cat = utf8proc_category(cp);
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}
bool is_space_cp(int32_t cp) {
  if (cp < 0) return false;
  if ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0) return true;
  if (cp < 0x80) return false;
  const auto cat = utf8proc_category(cp);
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

// Python str.title(): uppercase after a non-cased character, lowercase otherwise.
std::string py_title(std::string_view s) {
  std::string out;
  bool prev_cased = false;
  for (const CodePoint& p : decode(s)) {
    if (p.cp < 0) {
      out.append(s.substr(p.offset, p.length));
      prev_cased = false;
      continue;
    }
    encode(prev_cased ? utf8proc_tolower(p.cp) : utf8proc_totitle(p.cp), out);
    prev_cased = is_cased_letter(p.cp);
  }
  return out;
}

std::string py_capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (const CodePoint& p : decode(s)) {
    if (p.cp < 0) out.append(s.substr(p.offset, p.length));
    else encode(first ? utf8proc_totitle(p.cp) : utf8proc_tolower(p.cp), out);
    first = false;
  }
  return out;
}

// Words start after whitespace or one of -({[<.
std::string jinja_title(std::string_view s) {
  std::string out;
  bool word_start = true;
  for (const CodePoint& p : decode(s)) {
    const bool sep = is_space_cp(p.cp) || p.cp == '-' || p.cp == '(' || p.cp == '{' || p.cp == '[' || p.cp == '<';
    if (p.cp < 0) out.append(s.substr(p.offset, p.length));
    else if (sep) encode(p.cp, out);
    else encode(word_start ? utf8proc_toupper(p.cp) : utf8proc_tolower(p.cp), out);
    word_start = sep;
  }
  return out;
}

std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::vector<CodePoint> cps = decode(s);
  std::vector<int32_t> set;
  if (chars != nullptr) {
    for (const CodePoint& p : decode(*chars))
      set.push_back(p.cp < 0 ? -1 - static_cast<unsigned char>((*chars)[p.offset]) : p.cp);
  }
  auto strip_it = [&](const CodePoint& p) {
    if (chars == nullptr) return is_space_cp(p.cp);
    const int32_t key = p.cp < 0 ? -1 - static_cast<unsigned char>(s[p.offset]) : p.cp;
    return std::find(set.begin(), set.end(), key) != set.end();
  };
  size_t b = 0;
  size_t e = cps.size();
  if (left) {
    while (b < e && strip_it(cps[b])) ++b;
  }
  if (right) {
    while (e > b && strip_it(cps[e - 1])) --e;
  }
  if (b == e) return std::string();
  return std::string(s.substr(cps[b].offset, cps[e - 1].offset + cps[e - 1].length - cps[b].offset));
}

Result<std::vector<Value>> py_split(std::string_view s, const Value* sep, int64_t maxsplit) {
  std::vector<Value> out;
  if (sep == nullptr || sep->is_none()) {
    const std::vector<CodePoint> cps = decode(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && is_space_cp(cps[i].cp)) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && is_space_cp(cps[e - 1].cp)) --e;
        out.emplace_back(std::string(s.substr(cps[i].offset, cps[e - 1].offset + cps[e - 1].length - cps[i].offset)));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !is_space_cp(cps[j].cp)) ++j;
      out.emplace_back(std::string(s.substr(cps[i].offset, cps[j - 1].offset + cps[j - 1].length - cps[i].offset)));
      i = j;
    }
    return out;
  }
  if (!sep->is_string()) return error(std::string("must be str or None, not ") + type_name(*sep));
  const std::string& d = sep->str();
  if (d.empty()) return error("empty separator");
  size_t pos = 0;
  while (true) {
    const size_t f =
        (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) ? std::string_view::npos : s.find(d, pos);
    if (f == std::string_view::npos) {
      out.emplace_back(std::string(s.substr(pos)));
      break;
    }
    out.emplace_back(std::string(s.substr(pos, f - pos)));
    pos = f + d.size();
  }
  return out;
}

Result<std::string> py_replace(Interpreter& in, std::string_view s, std::string_view old, std::string_view repl,
                               int64_t count) {
  std::string out;
  int64_t done = 0;
  if (old.empty()) {  // Python inserts `repl` between every character and at both ends
    const std::vector<CodePoint> cps = decode(s);
    for (size_t i = 0; i <= cps.size(); ++i) {
      if (count < 0 || done < count) {
        out += repl;
        ++done;
      }
      if (i < cps.size()) out.append(s.substr(cps[i].offset, cps[i].length));
      GB_RETURN_IF_ERROR(in.check_size(out.size()));
    }
    return out;
  }
  size_t pos = 0;
  while (count < 0 || done < count) {
    const size_t f = s.find(old, pos);
    if (f == std::string_view::npos) break;
    out.append(s.substr(pos, f - pos));
    out += repl;
    pos = f + old.size();
    ++done;
    GB_RETURN_IF_ERROR(in.check_size(out.size()));
  }
  out.append(s.substr(pos));
  GB_RETURN_IF_ERROR(in.check_size(out.size()));
  return out;
}

// Python's str.splitlines() (without keepends).
std::vector<std::string> splitlines(std::string_view s) {
  std::vector<std::string> out;
  const std::vector<CodePoint> cps = decode(s);
  size_t start = 0;  // byte offset
  for (size_t i = 0; i < cps.size(); ++i) {
    const int32_t c = cps[i].cp;
    const bool br = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                    c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!br) continue;
    out.emplace_back(s.substr(start, cps[i].offset - start));
    size_t next = cps[i].offset + cps[i].length;
    if (c == '\r' && i + 1 < cps.size() && cps[i + 1].cp == '\n') {
      ++i;
      next = cps[i].offset + cps[i].length;
    }
    start = next;
  }
  if (start < s.size()) out.emplace_back(s.substr(start));
  return out;
}

size_t byte_to_cp_index(std::string_view s, size_t byte) { return utf8_length(s.substr(0, byte)); }

// Python str.format with "{}", "{0}" and "{name}" fields (no format specs) and "{{" / "}}".
Result<std::string> py_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '{' && i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < fmt.size() && fmt[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t close = fmt.find('}', i);
      if (close == std::string::npos) return error("format(): unmatched '{'");
      const std::string field = fmt.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        return error("format(): format specs are not supported ('{" + field + "}')");
      }
      const Value* v = nullptr;
      if (field.empty()) {
        v = auto_index < a.positional.size() ? &a.positional[auto_index] : nullptr;
        ++auto_index;
      } else if (std::all_of(field.begin(), field.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
        const size_t idx = field.size() > 9 ? SIZE_MAX : std::stoul(field);
        v = idx < a.positional.size() ? &a.positional[idx] : nullptr;
      } else {
        for (const auto& [k, kv] : a.keyword) {
          if (k == field) v = &kv;
        }
      }
      if (v == nullptr) return error("format(): no argument for '{" + field + "}'");
      GB_ASSIGN_OR_RETURN(std::string s, str_of(*v));
      out += s;
      i = close;
    } else if (c == '}') {
      return error("format(): single '}' encountered");
    } else {
      out += c;
    }
  }
  return out;
}

int64_t length_of(const Value& v) {
  switch (v.type()) {
    case Value::Type::kString: return static_cast<int64_t>(utf8_length(v.str()));
    case Value::Type::kList: return static_cast<int64_t>(v.items().size());
    case Value::Type::kDict: return static_cast<int64_t>(v.dict_ref().items.size());
    default: return -1;
  }
}

// Python int(str): optional sign, digits with single underscores, surrounding whitespace.
bool parse_int(std::string_view s, int64_t base, int64_t& out) {
  std::string t = py_strip(s, nullptr, true, true);
  if (t.empty() || base < 2 || base > 36) return false;
  size_t i = 0;
  bool neg = false;
  if (t[0] == '+' || t[0] == '-') {
    neg = t[0] == '-';
    i = 1;
  }
  if (i >= t.size()) return false;
  int64_t v = 0;
  bool prev_digit = false;
  for (; i < t.size(); ++i) {
    const char c = t[i];
    if (c == '_' && prev_digit && i + 1 < t.size()) {
      prev_digit = false;
      continue;
    }
    int d = -1;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'z') d = c - 'a' + 10;
    else if (c >= 'A' && c <= 'Z') d = c - 'A' + 10;
    if (d < 0 || d >= base) return false;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
    prev_digit = true;
  }
  out = neg ? -v : v;
  return true;
}

bool parse_float(std::string_view s, double& out) {
  std::string t = py_strip(s, nullptr, true, true);
  if (t.empty()) return false;
  char* end = nullptr;
  out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size();
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(map_case(v.str(), Case::kLower));
  return v;
}

Result<Value> attribute_of(const Value& item, const Value& attribute) {
  // "a.b" and integer parts as in Jinja's make_attrgetter.
  if (attribute.is_int()) return get_item(item, attribute, 0);
  GB_ASSIGN_OR_RETURN(std::string path, str_of(attribute));
  Value cur = item;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    int64_t idx = 0;
    if (!part.empty() && parse_int(part, 10, idx) && part.find_first_not_of("0123456789") == std::string::npos) {
      GB_ASSIGN_OR_RETURN(cur, get_item(cur, Value(idx), 0));
    } else {
      if (cur.is_undefined()) return Value(Undefined{});
      GB_ASSIGN_OR_RETURN(cur, get_attr(cur, part, 0));
    }
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

namespace {

bool cased_without(std::string_view s, utf8proc_category_t other_case) {
  bool cased = false;
  for (const CodePoint& p : decode(s)) {
    if (p.cp >= 0 && utf8proc_category(p.cp) == other_case) return false;
    cased = cased || is_cased_letter(p.cp);
  }
  return cased;
}

}  // namespace

bool py_islower(std::string_view s) { return cased_without(s, UTF8PROC_CATEGORY_LU); }
bool py_isupper(std::string_view s) { return cased_without(s, UTF8PROC_CATEGORY_LL); }

Result<Value> items_of(Interpreter& in, const Value& v) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) return error(std::string("can only get item pairs from a mapping, not ") + type_name(v));
  std::vector<Value> out;
  out.reserve(v.dict_ref().items.size());
  for (const auto& [k, item] : v.dict_ref().items) out.push_back(Value::tuple({Value(k), item}));
  GB_RETURN_IF_ERROR(in.charge(static_cast<int64_t>(out.size())));
  return Value::list(std::move(out));
}

Status check_signature(const Signature* sig, std::string_view kind, std::string_view name, size_t positional,
                       const std::vector<std::string_view>& keywords) {
  static const std::initializer_list<std::string_view> kNone = {};
  const auto& params = sig != nullptr ? sig->params : kNone;
  if (sig != nullptr && sig->variadic) return Status::ok();
  if (positional > params.size()) {
    return error(std::string(kind) + " '" + std::string(name) + "' takes at most " + std::to_string(params.size()) +
                 " argument(s), got " + std::to_string(positional));
  }
  for (std::string_view k : keywords) {
    if (std::find(params.begin(), params.end(), k) == params.end()) {
      return error(std::string(kind) + " '" + std::string(name) + "' got an unexpected keyword argument '" +
                   std::string(k) + "'");
    }
  }
  return Status::ok();
}

}  // namespace gb::chat::builtin
