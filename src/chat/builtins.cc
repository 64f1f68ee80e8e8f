// Builtin filters, tests, string/dict/list methods and globals (range, namespace, dict,
// raise_exception, strftime_now), each following Jinja 3 / Python 3 / transformers semantics.
#include <algorithm>
#include <initializer_list>
#include <cmath>
#include <cstring>
#include <ctime>

#include <utf8proc.h>

#include "chat/ast.h"
#include "chat/interpreter.h"

namespace gb::chat {
namespace {

// ---- argument helpers ----

// Positional argument `index` or keyword `name`, or null.
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

Status error(const std::string& what) { return Status::error(what); }

// Caps str() of nested containers, which can grow exponentially through shared references.
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
  if (!v->is_string()) return error(std::string("argument '") + std::string(name) + "' must be a string, got " + type_name(*v));
  return v->str();
}

// ---- UTF-8 / Unicode helpers ----

struct CodePoint {
  int32_t cp;
  size_t offset;
  size_t length;
};

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

void encode(int32_t cp, std::string& out) {
  utf8proc_uint8_t buf[4];
  const utf8proc_ssize_t n = utf8proc_encode_char(cp, buf);
  out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

enum class Case { kUpper, kLower, kTitle };

std::string map_case(std::string_view s, Case c) {
  std::string out;
  out.reserve(s.size());
  for (const CodePoint& p : decode(s)) {
    if (p.cp < 0) {
      out.append(s.substr(p.offset, p.length));
      continue;
    }
    const int32_t m = c == Case::kUpper ? utf8proc_toupper(p.cp) : c == Case::kLower ? utf8proc_tolower(p.cp) : utf8proc_totitle(p.cp);
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
// Python's str.isspace / str.split() whitespace.
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

// Jinja's title filter: words start after whitespace or one of -({[<.
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

// str.strip / lstrip / rstrip; chars == nullptr strips whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right) {
  const std::vector<CodePoint> cps = decode(s);
  std::vector<int32_t> set;
  if (chars != nullptr) {
    for (const CodePoint& p : decode(*chars)) set.push_back(p.cp < 0 ? -1 - static_cast<unsigned char>((*chars)[p.offset]) : p.cp);
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
    const size_t f = (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) ? std::string_view::npos : s.find(d, pos);
    if (f == std::string_view::npos) {
      out.emplace_back(std::string(s.substr(pos)));
      break;
    }
    out.emplace_back(std::string(s.substr(pos, f - pos)));
    pos = f + d.size();
  }
  return out;
}

Result<std::string> py_replace(Interpreter& in, std::string_view s, std::string_view old, std::string_view repl, int64_t count) {
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

// Sort key comparison used by sort/unique/dictsort/min/max: strings compare case-insensitively
// unless case_sensitive, as Jinja's ignore_case does.
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

// ---- filters ----

Result<Value> f_trim(Interpreter&, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::string s, str_of(v));
  const Value* chars = arg(a, 0, "chars");
  if (chars != nullptr && !chars->is_none()) {
    if (!chars->is_string()) return error("chars must be a string");
    return Value(py_strip(s, &chars->str(), true, true));
  }
  return Value(py_strip(s, nullptr, true, true));
}

Result<Value> f_length(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value(0);
  const int64_t n = length_of(v);
  if (n < 0) return error(std::string("object of type '") + type_name(v) + "' has no len()");
  return Value(n);
}

Result<Value> f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
  JsonFormat f;
  f.ensure_ascii = arg_bool(a, 0, "ensure_ascii", false);
  const Value* indent = arg(a, 1, "indent");
  if (indent != nullptr && !indent->is_none()) {
    if (!indent->is_int() || indent->as_int() < 0 || indent->as_int() > 64) return error("indent must be an integer 0..64");
    f.indent = static_cast<int>(indent->as_int());
  }
  const Value* seps = arg(a, 2, "separators");
  if (seps != nullptr && !seps->is_none()) {
    if (!seps->is_list() || seps->items().size() != 2 || !seps->items()[0].is_string() || !seps->items()[1].is_string()) {
      return error("separators must be a pair of strings");
    }
    f.item_separator = seps->items()[0].str();
    f.key_separator = seps->items()[1].str();
    if (f.item_separator.empty()) f.item_separator = std::string();  // json.dumps treats "" literally
  }
  f.sort_keys = arg_bool(a, 3, "sort_keys", false);
  f.max_bytes = in.max_bytes();
  GB_ASSIGN_OR_RETURN(std::string s, to_json(v, f));
  return Value(std::move(s));
}

Result<Value> f_items(Interpreter& in, const Value& v, CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) return error(std::string("can only get item pairs from a mapping, not ") + type_name(v));
  std::vector<Value> out;
  out.reserve(v.dict_ref().items.size());
  for (const auto& [k, item] : v.dict_ref().items) out.push_back(Value::tuple({Value(k), item}));
  GB_RETURN_IF_ERROR(in.charge(static_cast<int64_t>(out.size())));
  return Value::list(std::move(out));
}

Result<Value> f_list(Interpreter& in, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  GB_RETURN_IF_ERROR(in.charge(static_cast<int64_t>(items.size())));
  return Value::list(std::move(items));
}

Result<Value> f_first(Interpreter&, const Value& v, CallArgs& a) {
  if (v.is_list()) return v.items().empty() ? Value(Undefined{}) : v.items().front();
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  return items.empty() ? Value(Undefined{}) : items.front();
}

Result<Value> f_last(Interpreter&, const Value& v, CallArgs& a) {
  if (v.is_list()) return v.items().empty() ? Value(Undefined{}) : v.items().back();
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  return items.empty() ? Value(Undefined{}) : items.back();
}

Result<Value> f_join(Interpreter& in, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  std::string sep;
  if (const Value* d = arg(a, 0, "d")) {
    GB_ASSIGN_OR_RETURN(sep, str_of(*d));
  }
  const Value* attribute = arg(a, 1, "attribute");
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    Value item = items[i];
    if (attribute != nullptr && !attribute->is_none()) {
      GB_ASSIGN_OR_RETURN(item, attribute_of(item, *attribute));
    }
    GB_ASSIGN_OR_RETURN(std::string s, str_of(item));
    out += s;
    GB_RETURN_IF_ERROR(in.check_size(out.size()));
  }
  return Value(std::move(out));
}

Result<Value> f_upper(Interpreter&, const Value& v, CallArgs&) {
  GB_ASSIGN_OR_RETURN(std::string s, str_of(v));
  return Value(map_case(s, Case::kUpper));
}
Result<Value> f_lower(Interpreter&, const Value& v, CallArgs&) {
  GB_ASSIGN_OR_RETURN(std::string s, str_of(v));
  return Value(map_case(s, Case::kLower));
}
Result<Value> f_capitalize(Interpreter&, const Value& v, CallArgs&) {
  GB_ASSIGN_OR_RETURN(std::string s, str_of(v));
  return Value(py_capitalize(s));
}
Result<Value> f_title(Interpreter&, const Value& v, CallArgs&) {
  GB_ASSIGN_OR_RETURN(std::string s, str_of(v));
  return Value(jinja_title(s));
}

Result<Value> f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::string s, str_of(v));
  const Value* old_v = arg(a, 0, "old");
  const Value* new_v = arg(a, 1, "new");
  if (old_v == nullptr || new_v == nullptr) return error("replace needs 'old' and 'new'");
  GB_ASSIGN_OR_RETURN(std::string old_s, str_of(*old_v));
  GB_ASSIGN_OR_RETURN(std::string new_s, str_of(*new_v));
  GB_ASSIGN_OR_RETURN(int64_t count, int_arg(a, 2, "count", -1));
  GB_ASSIGN_OR_RETURN(std::string r, py_replace(in, s, old_s, new_s, count));
  return Value(std::move(r));
}

Result<Value> f_default(Interpreter&, const Value& v, CallArgs& a) {
  const bool boolean = arg_bool(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !v.truthy())) {
    const Value* d = arg(a, 0, "default_value");
    return d == nullptr ? Value(std::string()) : *d;
  }
  return v;
}

Result<Value> f_string(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_string()) return v;
  GB_ASSIGN_OR_RETURN(std::string s, str_of(v));
  return Value(std::move(s));
}

Result<Value> f_int(Interpreter&, const Value& v, CallArgs& a) {
  const Value* def = arg(a, 0, "default");
  GB_ASSIGN_OR_RETURN(int64_t base, int_arg(a, 1, "base", 10));
  const Value fallback = def == nullptr ? Value(0) : *def;
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  if (v.is_float()) {
    const double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    int64_t i = 0;
    if (parse_int(v.str(), base, i)) return Value(i);
    double d = 0;
    if (base == 10 && parse_float(v.str(), d) && std::isfinite(d) && std::fabs(d) < 9.2e18) return Value(static_cast<int64_t>(d));
  }
  return fallback;
}

Result<Value> f_float(Interpreter&, const Value& v, CallArgs& a) {
  const Value* def = arg(a, 0, "default");
  const Value fallback = def == nullptr ? Value(0.0) : *def;
  if (v.is_number()) return Value(v.to_double());
  if (v.is_string()) {
    double d = 0;
    if (parse_float(v.str(), d)) return Value(d);
  }
  return fallback;
}

Result<Value> f_safe(Interpreter&, const Value& v, CallArgs&) { return v; }

Result<Value> f_escape(Interpreter&, const Value& v, CallArgs&) {
  GB_ASSIGN_OR_RETURN(std::string s, str_of(v));
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return Value(std::move(out));
}

// Applies test `name` (with extra args) for select/reject/selectattr/rejectattr.
Result<bool> apply_named_test(Interpreter& in, const Value& v, const Value* name, const std::vector<Value>& extra, int line) {
  if (name == nullptr) return v.truthy();
  if (!name->is_string()) return error("test name must be a string");
  TestFn fn = find_test(name->str());
  if (fn == nullptr) return error("unknown test '" + name->str() + "'");
  CallArgs ta;
  ta.line = line;
  ta.positional = extra;
  return fn(in, v, ta);
}

Result<Value> select_impl(Interpreter& in, const Value& v, CallArgs& a, bool by_attr, bool keep_when) {
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  size_t next = 0;
  const Value* attribute = nullptr;
  if (by_attr) {
    if (a.positional.empty()) return error("missing attribute name");
    attribute = &a.positional[next++];
  }
  const Value* test = next < a.positional.size() ? &a.positional[next++] : nullptr;
  std::vector<Value> extra(a.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, a.positional.size())), a.positional.end());
  std::vector<Value> out;
  for (const Value& item : items) {
    GB_RETURN_IF_ERROR(in.charge(1));
    Value probe = item;
    if (attribute != nullptr) {
      GB_ASSIGN_OR_RETURN(probe, attribute_of(item, *attribute));
    }
    GB_ASSIGN_OR_RETURN(bool ok, apply_named_test(in, probe, test, extra, a.line));
    if (ok == keep_when) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> f_select(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, true); }
Result<Value> f_reject(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, false, false); }
Result<Value> f_selectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, true); }
Result<Value> f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) { return select_impl(in, v, a, true, false); }

Result<Value> f_map(Interpreter& in, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  std::vector<Value> out;
  out.reserve(items.size());
  const Value* attribute = arg(a, 99, "attribute");
  if (attribute != nullptr) {
    const Value* def = arg(a, 99, "default");
    for (const Value& item : items) {
      GB_RETURN_IF_ERROR(in.charge(1));
      GB_ASSIGN_OR_RETURN(Value r, attribute_of(item, *attribute));
      if (r.is_undefined() && def != nullptr) r = *def;
      out.push_back(std::move(r));
    }
    return Value::list(std::move(out));
  }
  if (a.positional.empty() || !a.positional[0].is_string()) return error("map needs a filter name or attribute=");
  FilterFn fn = find_filter(a.positional[0].str());
  if (fn == nullptr) return error("unknown filter '" + a.positional[0].str() + "'");
  CallArgs fa;
  fa.line = a.line;
  fa.positional.assign(a.positional.begin() + 1, a.positional.end());
  fa.keyword = a.keyword;
  for (const Value& item : items) {
    GB_RETURN_IF_ERROR(in.charge(1));
    GB_ASSIGN_OR_RETURN(Value r, fn(in, item, fa));
    out.push_back(std::move(r));
  }
  return Value::list(std::move(out));
}

Result<Value> f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
  const Value* attribute = arg(a, 1, "attribute");
  std::vector<Value> seen;
  std::vector<Value> out;
  for (const Value& item : items) {
    GB_RETURN_IF_ERROR(in.charge(static_cast<int64_t>(seen.size()) + 1));
    Value key = item;
    if (attribute != nullptr && !attribute->is_none()) {
      GB_ASSIGN_OR_RETURN(key, attribute_of(item, *attribute));
    }
    key = sort_key(key, case_sensitive);
    bool dup = false;
    for (const Value& s : seen) dup = dup || values_equal(s, key);
    if (!dup) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Result<Value> f_reverse(Interpreter&, const Value& v, CallArgs& a) {
  if (v.is_string()) {
    const std::vector<CodePoint> cps = decode(v.str());
    std::string out;
    for (size_t i = cps.size(); i-- > 0;) out.append(v.str(), cps[i].offset, cps[i].length);
    return Value(std::move(out));
  }
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Result<std::vector<Value>> sorted(Interpreter& in, std::vector<Value> items, bool reverse, bool case_sensitive,
                                  const Value* attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  keyed.reserve(items.size());
  for (Value& item : items) {
    Value key = item;
    if (attribute != nullptr && !attribute->is_none()) {
      GB_ASSIGN_OR_RETURN(key, attribute_of(item, *attribute));
    }
    keyed.emplace_back(sort_key(key, case_sensitive), std::move(item));
  }
  GB_RETURN_IF_ERROR(in.charge(static_cast<int64_t>(keyed.size()) * 8));
  Status failure;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    if (!failure.is_ok()) return false;
    auto r = reverse ? value_less(y.first, x.first) : value_less(x.first, y.first);
    if (!r.is_ok()) {
      failure = r.status();
      return false;
    }
    return *r;
  });
  GB_RETURN_IF_ERROR(failure);
  std::vector<Value> out;
  out.reserve(keyed.size());
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

Result<Value> f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  GB_ASSIGN_OR_RETURN(items, sorted(in, std::move(items), arg_bool(a, 0, "reverse", false),
                                    arg_bool(a, 1, "case_sensitive", false), arg(a, 2, "attribute")));
  return Value::list(std::move(items));
}

Result<Value> f_dictsort(Interpreter& in, const Value& v, CallArgs& a) {
  if (!v.is_dict()) return error(std::string("dictsort expects a mapping, got ") + type_name(v));
  const bool case_sensitive = arg_bool(a, 0, "case_sensitive", false);
  const Value* by = arg(a, 1, "by");
  const bool by_value = by != nullptr && by->is_string() && by->str() == "value";
  const bool reverse = arg_bool(a, 2, "reverse", false);
  std::vector<Value> pairs;
  for (const auto& [k, item] : v.dict_ref().items) pairs.push_back(Value::tuple({Value(k), item}));
  const Value attribute(static_cast<int64_t>(by_value ? 1 : 0));
  GB_ASSIGN_OR_RETURN(pairs, sorted(in, std::move(pairs), reverse, case_sensitive, &attribute));
  return Value::list(std::move(pairs));
}

Result<Value> f_indent(Interpreter& in, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::string s, str_of(v));
  std::string indentation;
  const Value* width = arg(a, 0, "width");
  if (width == nullptr) {
    indentation = "    ";
  } else if (width->is_string()) {
    indentation = width->str();
  } else if (width->is_int() && width->as_int() >= 0 && width->as_int() <= 1024) {
    indentation.assign(static_cast<size_t>(width->as_int()), ' ');
  } else {
    return error("width must be a string or an integer 0..1024");
  }
  const bool first = arg_bool(a, 1, "first", false);
  const bool blank = arg_bool(a, 2, "blank", false);
  s += "\n";  // Jinja appends a newline so splitlines keeps a trailing empty line
  const std::vector<std::string> lines = splitlines(s);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (blank || !lines[i].empty()) out += indentation;
    }
    out += lines[i];
    GB_RETURN_IF_ERROR(in.check_size(out.size()));
  }
  if (first) out = indentation + out;
  return Value(std::move(out));
}

Result<Value> f_abs(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_int()) {
    if (v.as_int() == INT64_MIN) return error("integer overflow");
    return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  }
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  return error(std::string("bad operand type for abs(): '") + type_name(v) + "'");
}

Result<Value> f_round(Interpreter&, const Value& v, CallArgs& a) {
  if (!v.is_number()) return error(std::string("round expects a number, got ") + type_name(v));
  GB_ASSIGN_OR_RETURN(int64_t precision, int_arg(a, 0, "precision", 0));
  std::string method = "common";
  if (const Value* m = arg(a, 1, "method")) {
    if (!m->is_string()) return error("method must be a string");
    method = m->str();
  }
  precision = std::clamp<int64_t>(precision, -300, 300);
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.to_double() * scale;
  double r;
  // "common" is Python's round(): ties go to the even neighbour (nearbyint's default mode).
  if (method == "common") r = std::nearbyint(x);
  else if (method == "ceil") r = std::ceil(x);
  else if (method == "floor") r = std::floor(x);
  else return error("method must be common, ceil or floor");
  return Value(r / scale);
}

Result<Value> f_wordcount(Interpreter&, const Value& v, CallArgs&) {
  GB_ASSIGN_OR_RETURN(std::string s, str_of(v));
  int64_t n = 0;
  bool in_word = false;
  for (const CodePoint& p : decode(s)) {
    const bool word = p.cp == '_' || is_alpha(p.cp) || is_numeric_cp(p.cp);
    if (word && !in_word) ++n;
    in_word = word;
  }
  return Value(n);
}

Result<Value> f_center(Interpreter& in, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::string s, str_of(v));
  GB_ASSIGN_OR_RETURN(int64_t width, int_arg(a, 0, "width", 80));
  const int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value(std::move(s));
  GB_RETURN_IF_ERROR(in.check_size(static_cast<size_t>(std::min<int64_t>(width, INT32_MAX))));
  const int64_t pad = width - len;
  const int64_t left = pad / 2 + (pad & width & 1);  // CPython's centering rule
  return Value(std::string(static_cast<size_t>(left), ' ') + s + std::string(static_cast<size_t>(pad - left), ' '));
}

Result<Value> f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  const Value* attribute = arg(a, 0, "attribute");
  const Value* start = arg(a, 1, "start");
  Value total = start == nullptr ? Value(0) : *start;
  for (const Value& item : items) {
    GB_RETURN_IF_ERROR(in.charge(1));
    Value x = item;
    if (attribute != nullptr && !attribute->is_none()) {
      GB_ASSIGN_OR_RETURN(x, attribute_of(item, *attribute));
    }
    if (!x.is_number() || !total.is_number()) return error(std::string("cannot sum '") + type_name(x) + "'");
    if (x.is_float() || total.is_float()) {
      total = Value(total.to_double() + x.to_double());
    } else {
      int64_t r;
      const int64_t xi = x.is_bool() ? x.as_bool() : x.as_int();
      const int64_t ti = total.is_bool() ? total.as_bool() : total.as_int();
      if (__builtin_add_overflow(ti, xi, &r)) return error("integer overflow");
      total = Value(r);
    }
  }
  return total;
}

Result<Value> minmax(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  if (items.empty()) return Value(Undefined{});
  GB_ASSIGN_OR_RETURN(items, sorted(in, std::move(items), false, arg_bool(a, 0, "case_sensitive", false), arg(a, 1, "attribute")));
  return want_max ? items.back() : items.front();
}
Result<Value> f_min(Interpreter& in, const Value& v, CallArgs& a) { return minmax(in, v, a, false); }
Result<Value> f_max(Interpreter& in, const Value& v, CallArgs& a) { return minmax(in, v, a, true); }

Result<Value> f_attr(Interpreter&, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::string name, string_arg(a, 0, "name"));
  if (v.is_undefined()) return Value(Undefined{});
  return get_attr(v, name, a.line);
}

Result<Value> f_batch(Interpreter& in, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(v, a.line));
  GB_ASSIGN_OR_RETURN(int64_t size, int_arg(a, 0, "linecount", 1));
  if (size <= 0) return error("linecount must be positive");
  const Value* fill = arg(a, 1, "fill_with");
  std::vector<Value> out;
  std::vector<Value> cur;
  for (const Value& item : items) {
    cur.push_back(item);
    if (static_cast<int64_t>(cur.size()) == size) out.push_back(Value::list(std::exchange(cur, {})));
  }
  if (!cur.empty()) {
    if (fill != nullptr) {
      GB_RETURN_IF_ERROR(in.charge(size));
      while (static_cast<int64_t>(cur.size()) < size) cur.push_back(*fill);
    }
    out.push_back(Value::list(std::move(cur)));
  }
  return Value::list(std::move(out));
}

// Parameter names of each builtin, in positional order (checked when the template is parsed).
// A null list means variadic (select/map/...: test or filter arguments follow).
struct Signature {
  std::string_view name;
  std::initializer_list<std::string_view> params;
  bool variadic = false;
};

const Signature kFilterSignatures[] = {
    {"abs", {}}, {"attr", {"name"}}, {"batch", {"linecount", "fill_with"}}, {"capitalize", {}},
    {"center", {"width"}}, {"count", {}}, {"d", {"default_value", "boolean"}},
    {"default", {"default_value", "boolean"}}, {"dictsort", {"case_sensitive", "by", "reverse"}}, {"e", {}},
    {"escape", {}}, {"first", {}}, {"float", {"default"}}, {"forceescape", {}},
    {"indent", {"width", "first", "blank"}}, {"int", {"default", "base"}}, {"items", {}},
    {"join", {"d", "attribute"}}, {"last", {}}, {"length", {}}, {"list", {}}, {"lower", {}},
    {"map", {"attribute", "default"}, true}, {"max", {"case_sensitive", "attribute"}},
    {"min", {"case_sensitive", "attribute"}}, {"reject", {}, true}, {"rejectattr", {}, true},
    {"replace", {"old", "new", "count"}}, {"reverse", {}}, {"round", {"precision", "method"}}, {"safe", {}},
    {"select", {}, true}, {"selectattr", {}, true}, {"sort", {"reverse", "case_sensitive", "attribute"}},
    {"string", {}}, {"sum", {"attribute", "start"}}, {"title", {}},
    {"tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}}, {"trim", {"chars"}},
    {"unique", {"case_sensitive", "attribute"}}, {"upper", {}}, {"wordcount", {}},
};

constexpr std::pair<std::string_view, FilterFn> kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_escape},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

// ---- tests ----

Result<bool> t_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
Result<bool> t_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
Result<bool> t_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
Result<bool> t_boolean(Interpreter&, const Value& v, CallArgs&) { return v.is_bool(); }
Result<bool> t_true(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
Result<bool> t_false(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
Result<bool> t_integer(Interpreter&, const Value& v, CallArgs&) { return v.is_int(); }
Result<bool> t_float(Interpreter&, const Value& v, CallArgs&) { return v.is_float(); }
Result<bool> t_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
Result<bool> t_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
Result<bool> t_mapping(Interpreter&, const Value& v, CallArgs&) { return v.is_dict() && !v.is_namespace(); }
// Jinja's Undefined defines __iter__ and __len__, so it passes both of these tests.
Result<bool> t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace()) || v.is_undefined();
}
Result<bool> t_sequence(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() || v.is_list() || (v.is_dict() && !v.is_namespace()) || v.is_undefined();
}
Result<bool> t_callable(Interpreter&, const Value& v, CallArgs&) { return v.is_callable(); }

Result<const Value*> other(const CallArgs& a) {
  const Value* o = arg(a, 0, "other");
  if (o == nullptr) o = arg(a, 0, "num");
  if (o == nullptr) o = arg(a, 0, "seq");
  if (o == nullptr) return error("missing argument");
  return o;
}
Result<bool> t_eq(Interpreter&, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(const Value* o, other(a));
  return values_equal(v, *o);
}
Result<bool> t_ne(Interpreter&, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(const Value* o, other(a));
  return !values_equal(v, *o);
}
Result<bool> t_lt(Interpreter&, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(const Value* o, other(a));
  return value_less(v, *o);
}
Result<bool> t_gt(Interpreter&, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(const Value* o, other(a));
  return value_less(*o, v);
}
Result<bool> t_le(Interpreter&, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(const Value* o, other(a));
  GB_ASSIGN_OR_RETURN(bool gt, value_less(*o, v));
  return !gt;
}
Result<bool> t_ge(Interpreter&, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(const Value* o, other(a));
  GB_ASSIGN_OR_RETURN(bool lt, value_less(v, *o));
  return !lt;
}
Result<bool> t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(const Value* o, other(a));
  if (v.type() != o->type()) return false;
  switch (v.type()) {
    case Value::Type::kNone:
    case Value::Type::kUndefined: return true;
    case Value::Type::kBool: return v.as_bool() == o->as_bool();
    case Value::Type::kInt: return v.as_int() == o->as_int();
    case Value::Type::kString: return v.str_ptr() == o->str_ptr();
    case Value::Type::kList: return v.list_ptr() == o->list_ptr();
    case Value::Type::kDict: return v.dict_ptr() == o->dict_ptr();
    case Value::Type::kCallable: return &v.callable() == &o->callable();
    default: return false;
  }
}
Result<bool> t_in(Interpreter&, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(const Value* o, other(a));
  if (o->is_string()) return v.is_string() && o->str().find(v.str()) != std::string::npos;
  if (o->is_list()) {
    for (const Value& x : o->items()) {
      if (values_equal(x, v)) return true;
    }
    return false;
  }
  if (o->is_dict()) return v.is_string() && o->dict_ref().find(v.str()) != nullptr;
  if (o->is_undefined()) return false;
  return error(std::string("argument of type '") + type_name(*o) + "' is not iterable");
}
Result<bool> t_odd(Interpreter&, const Value& v, CallArgs&) {
  if (!v.is_int() && !v.is_bool()) return error(std::string("expects an integer, got ") + type_name(v));
  return ((v.is_bool() ? v.as_bool() : v.as_int()) & 1) != 0;
}
Result<bool> t_even(Interpreter&, const Value& v, CallArgs&) {
  if (!v.is_int() && !v.is_bool()) return error(std::string("expects an integer, got ") + type_name(v));
  return ((v.is_bool() ? v.as_bool() : v.as_int()) & 1) == 0;
}
Result<bool> t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(const Value* o, other(a));
  if (!v.is_int() || !o->is_int()) return error("expects integers");
  if (o->as_int() == 0) return error("division by zero");
  if (o->as_int() == -1) return true;
  return v.as_int() % o->as_int() == 0;
}
Result<bool> t_lower(Interpreter&, const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (const CodePoint& p : decode(v.str())) {
    if (p.cp >= 0 && utf8proc_category(p.cp) == UTF8PROC_CATEGORY_LU) return false;
    cased = cased || is_cased_letter(p.cp);
  }
  return cased;
}
Result<bool> t_upper(Interpreter&, const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  bool cased = false;
  for (const CodePoint& p : decode(v.str())) {
    if (p.cp >= 0 && utf8proc_category(p.cp) == UTF8PROC_CATEGORY_LL) return false;
    cased = cased || is_cased_letter(p.cp);
  }
  return cased;
}
Result<bool> t_escaped(Interpreter&, const Value&, CallArgs&) { return false; }
Result<bool> t_filter(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && find_filter(v.str()) != nullptr; }
Result<bool> t_test(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && find_test(v.str()) != nullptr; }

const Signature kTestSignatures[] = {
    {"divisibleby", {"num"}}, {"in", {"seq"}}, {"sameas", {"other"}}, {"eq", {"other"}}, {"equalto", {"other"}},
    {"==", {"other"}}, {"ne", {"other"}}, {"!=", {"other"}}, {"lt", {"other"}}, {"<", {"other"}},
    {"lessthan", {"other"}}, {"le", {"other"}}, {"<=", {"other"}}, {"gt", {"other"}}, {">", {"other"}},
    {"greaterthan", {"other"}}, {"ge", {"other"}}, {">=", {"other"}},
};

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

constexpr std::pair<std::string_view, TestFn> kTests[] = {
    {"!=", t_ne},
    {"<", t_lt},
    {"<=", t_le},
    {"==", t_eq},
    {">", t_gt},
    {">=", t_ge},
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_ge},
    {"greaterthan", t_gt},
    {"gt", t_gt},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_le},
    {"lessthan", t_lt},
    {"lower", t_lower},
    {"lt", t_lt},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
};

// ---- methods ----

constexpr std::string_view kStringMethods[] = {
    "capitalize", "count",    "endswith", "find",       "format",       "isalnum", "isalpha", "isdigit",
    "islower",    "isspace",  "isupper",  "join",       "lower",        "lstrip",  "removeprefix",
    "removesuffix", "replace", "rfind",   "rstrip",     "split",        "splitlines", "startswith",
    "strip",      "title",    "upper"};
constexpr std::string_view kDictMethods[] = {"get", "items", "keys", "values"};
constexpr std::string_view kListMethods[] = {"count", "index"};

template <size_t N>
bool contains_name(const std::string_view (&names)[N], std::string_view name) {
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

Status no_method(const Value& obj, std::string_view name) {
  return error(std::string("'") + type_name(obj) + "' object has no method '" + std::string(name) + "'");
}

Result<bool> affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const std::string& x) {
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_string()) return one(affix.str());
  if (affix.is_list()) {
    for (const Value& x : affix.items()) {
      if (!x.is_string()) return error("tuple for startswith/endswith must contain only strings");
      if (one(x.str())) return true;
    }
    return false;
  }
  return error(std::string("startswith/endswith expects a string or tuple, not ") + type_name(affix));
}

Result<Value> string_method(Interpreter& in, const std::string& s, std::string_view name, CallArgs& a) {
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const Value* chars = arg(a, 0, "chars");
    const std::string* set = nullptr;
    if (chars != nullptr && !chars->is_none()) {
      if (!chars->is_string()) return error(std::string(name) + " arg must be None or str");
      set = &chars->str();
    }
    return Value(py_strip(s, set, name != "rstrip", name != "lstrip"));
  }
  if (name == "split") {
    GB_ASSIGN_OR_RETURN(int64_t maxsplit, int_arg(a, 1, "maxsplit", -1));
    GB_ASSIGN_OR_RETURN(std::vector<Value> parts, py_split(s, arg(a, 0, "sep"), maxsplit));
    GB_RETURN_IF_ERROR(in.charge(static_cast<int64_t>(parts.size())));
    return Value::list(std::move(parts));
  }
  if (name == "startswith" || name == "endswith") {
    const Value* affix = arg(a, 0, name == "startswith" ? "prefix" : "suffix");
    if (affix == nullptr) return error(std::string(name) + " takes at least 1 argument");
    GB_ASSIGN_OR_RETURN(bool r, affix_match(s, *affix, name == "startswith"));
    return Value(r);
  }
  if (name == "upper") return Value(map_case(s, Case::kUpper));
  if (name == "lower") return Value(map_case(s, Case::kLower));
  if (name == "title") return Value(py_title(s));
  if (name == "capitalize") return Value(py_capitalize(s));
  if (name == "replace") {
    GB_ASSIGN_OR_RETURN(std::string old_s, string_arg(a, 0, "old"));
    GB_ASSIGN_OR_RETURN(std::string new_s, string_arg(a, 1, "new"));
    GB_ASSIGN_OR_RETURN(int64_t count, int_arg(a, 2, "count", -1));
    GB_ASSIGN_OR_RETURN(std::string r, py_replace(in, s, old_s, new_s, count));
    return Value(std::move(r));
  }
  if (name == "find" || name == "rfind" || name == "count") {
    GB_ASSIGN_OR_RETURN(std::string sub, string_arg(a, 0, "sub"));
    if (name == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s)) + 1);
      int64_t n = 0;
      for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
      return Value(n);
    }
    const size_t p = name == "find" ? s.find(sub) : s.rfind(sub);
    if (p == std::string::npos) return Value(-1);
    return Value(static_cast<int64_t>(byte_to_cp_index(s, p)));
  }
  if (name == "join") {
    const Value* items_v = arg(a, 0, "iterable");
    if (items_v == nullptr) return error("join takes exactly one argument");
    GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(*items_v, a.line));
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) return error(std::string("sequence item ") + std::to_string(i) + ": expected str instance, " + type_name(items[i]) + " found");
      if (i > 0) out += s;
      out += items[i].str();
      GB_RETURN_IF_ERROR(in.check_size(out.size()));
    }
    return Value(std::move(out));
  }
  if (name == "splitlines") {
    std::vector<Value> out;
    for (std::string& line : splitlines(s)) out.emplace_back(std::move(line));
    return Value::list(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace") {
    const std::vector<CodePoint> cps = decode(s);
    if (cps.empty()) return Value(false);
    for (const CodePoint& p : cps) {
      bool ok = false;
      if (name == "isdigit") ok = is_digit_cp(p.cp);
      else if (name == "isalpha") ok = is_alpha(p.cp);
      else if (name == "isalnum") ok = is_alpha(p.cp) || is_numeric_cp(p.cp);
      else ok = is_space_cp(p.cp);
      if (!ok) return Value(false);
    }
    return Value(true);
  }
  if (name == "islower" || name == "isupper") {
    CallArgs none;
    GB_ASSIGN_OR_RETURN(bool r, name == "islower" ? t_lower(in, Value(s), none) : t_upper(in, Value(s), none));
    return Value(r);
  }
  if (name == "format") {
    GB_ASSIGN_OR_RETURN(std::string r, py_format(s, a));
    GB_RETURN_IF_ERROR(in.check_size(r.size()));
    return Value(std::move(r));
  }
  if (name == "removeprefix" || name == "removesuffix") {
    GB_ASSIGN_OR_RETURN(std::string affix, string_arg(a, 0, name == "removeprefix" ? "prefix" : "suffix"));
    GB_ASSIGN_OR_RETURN(bool match, affix_match(s, Value(affix), name == "removeprefix"));
    if (!match) return Value(s);
    return Value(name == "removeprefix" ? s.substr(affix.size()) : s.substr(0, s.size() - affix.size()));
  }
  return no_method(Value(s), name);
}

Result<Value> dict_method(Interpreter& in, const Value& d, std::string_view name, CallArgs& a) {
  if (name == "items") {
    CallArgs none;
    return f_items(in, d, none);
  }
  if (name == "keys" || name == "values") {
    std::vector<Value> out;
    for (const auto& [k, v] : d.dict_ref().items) out.push_back(name == "keys" ? Value(k) : v);
    GB_RETURN_IF_ERROR(in.charge(static_cast<int64_t>(out.size())));
    return Value::list(std::move(out));
  }
  if (name == "get") {
    const Value* key = arg(a, 0, "key");
    if (key == nullptr) return error("get expected at least 1 argument");
    if (key->is_string()) {
      if (const Value* v = d.dict_ref().find(key->str())) return *v;
    }
    const Value* def = arg(a, 1, "default");
    return def == nullptr ? Value::none() : *def;
  }
  return no_method(d, name);
}

Result<Value> list_method(const Value& l, std::string_view name, CallArgs& a) {
  const Value* x = arg(a, 0, "value");
  if (x == nullptr) return error(std::string(name) + " takes exactly one argument");
  const auto& items = l.items();
  if (name == "count") {
    int64_t n = 0;
    for (const Value& v : items) n += values_equal(v, *x);
    return Value(n);
  }
  if (name == "index") {
    for (size_t i = 0; i < items.size(); ++i) {
      if (values_equal(items[i], *x)) return Value(static_cast<int64_t>(i));
    }
    return error("value is not in list");
  }
  return no_method(l, name);
}

// ---- globals ----

Result<Value> g_range(Interpreter& in, CallArgs& a) {
  if (!a.keyword.empty() || a.positional.empty() || a.positional.size() > 3) return error("range expects 1 to 3 integer arguments");
  for (const Value& v : a.positional) {
    if (!v.is_int() && !v.is_bool()) return error(std::string("range: '") + type_name(v) + "' object cannot be interpreted as an integer");
  }
  auto iv = [&](size_t i) { return a.positional[i].is_bool() ? int64_t{a.positional[i].as_bool()} : a.positional[i].as_int(); };
  int64_t start = 0, stop = 0, step = 1;
  if (a.positional.size() == 1) {
    stop = iv(0);
  } else {
    start = iv(0);
    stop = iv(1);
    if (a.positional.size() == 3) step = iv(2);
  }
  if (step == 0) return error("range() arg 3 must not be zero");
  // Count first so a huge range fails on the budget instead of allocating.
  const double count_d = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
  const int64_t count = count_d > 0 ? static_cast<int64_t>(std::min(count_d, 9.0e18)) : 0;
  GB_RETURN_IF_ERROR(in.charge(count));
  std::vector<Value> out;
  out.reserve(static_cast<size_t>(count));
  for (int64_t i = 0, v = start; i < count; ++i, v += step) out.emplace_back(v);
  return Value::list(std::move(out));
}

Result<Value> make_dict(const CallArgs& a) {
  auto d = std::make_shared<ValueDict>();
  if (a.positional.size() > 1) return error("expected at most 1 positional argument");
  if (a.positional.size() == 1) {
    const Value& init = a.positional[0];
    if (init.is_dict()) {
      d->items = init.dict_ref().items;
    } else if (init.is_list()) {
      for (const Value& pair : init.items()) {
        if (!pair.is_list() || pair.items().size() != 2 || !pair.items()[0].is_string()) {
          return error("dictionary update sequence elements must be (str, value) pairs");
        }
        d->set(pair.items()[0].str(), pair.items()[1]);
      }
    } else {
      return error(std::string("cannot convert '") + type_name(init) + "' to a dict");
    }
  }
  for (const auto& [k, v] : a.keyword) d->set(std::string(k), v);
  return Value(std::move(d));
}

Result<Value> g_dict(Interpreter&, CallArgs& a) { return make_dict(a); }

Result<Value> g_namespace(Interpreter& in, CallArgs& a) {
  GB_ASSIGN_OR_RETURN(Value d, make_dict(a));
  // A fresh copy: namespaces are mutable and must not alias the argument dict.
  auto ns = std::make_shared<ValueDict>(d.dict_ref());
  ns->is_namespace = true;
  in.track_namespace(ns);
  return Value(std::move(ns));
}

Result<Value> g_raise_exception(Interpreter&, CallArgs& a) {
  std::string msg;
  if (!a.positional.empty()) {
    GB_ASSIGN_OR_RETURN(msg, str_of(a.positional[0]));
  }
  return render_error(a.line, "raise_exception: " + msg);
}

Result<Value> g_strftime_now(Interpreter& in, CallArgs& a) {
  if (a.positional.size() != 1 || !a.positional[0].is_string()) return error("strftime_now expects one format string");
  const std::string& fmt = a.positional[0].str();
  if (fmt.size() > 256) return error("strftime_now: format string too long");
  const std::time_t t = in.now();
  std::tm tm{};
  localtime_r(&t, &tm);
  std::string buf(fmt.size() * 16 + 64, '\0');
  const size_t n = std::strftime(buf.data(), buf.size(), fmt.c_str(), &tm);
  buf.resize(n);
  return Value(std::move(buf));
}

Value make_builtin(const char* name, Result<Value> (*fn)(Interpreter&, CallArgs&)) {
  auto c = std::make_shared<Callable>();
  c->name = name;
  c->fn = fn;
  return Value(CallablePtr(std::move(c)));
}

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& [n, fn] : kFilters) {
    if (n == name) return fn;
  }
  return nullptr;
}

TestFn find_test(std::string_view name) {
  for (const auto& [n, fn] : kTests) {
    if (n == name) return fn;
  }
  return nullptr;
}

Status check_filter_args(std::string_view name, size_t positional, const std::vector<std::string_view>& keywords) {
  for (const Signature& sig : kFilterSignatures) {
    if (sig.name == name) return check_signature(&sig, "filter", name, positional, keywords);
  }
  return Status::ok();
}

Status check_test_args(std::string_view name, size_t positional, const std::vector<std::string_view>& keywords) {
  for (const Signature& sig : kTestSignatures) {
    if (sig.name == name) return check_signature(&sig, "test", name, positional, keywords);
  }
  return check_signature(nullptr, "test", name, positional, keywords);
}

bool is_known_method(std::string_view name) {
  return contains_name(kStringMethods, name) || contains_name(kDictMethods, name) || contains_name(kListMethods, name);
}

Result<Value> call_method(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args, int line) {
  Result<Value> r = Status::error("?");
  if (obj.is_string()) r = string_method(in, obj.str(), name, args);
  else if (obj.is_dict()) r = dict_method(in, obj, name, args);
  else if (obj.is_list()) r = list_method(obj, name, args);
  else r = no_method(obj, name);
  if (!r.is_ok() && r.message().rfind("chat template", 0) != 0) {
    return render_error(line, "method '" + std::string(name) + "': " + r.message());
  }
  return r;
}

const Value* find_global(std::string_view name) {
  // Built once per process; Values are immutable, so sharing them across threads is safe.
  static const std::pair<std::string_view, Value> kGlobals[] = {
      {"dict", make_builtin("dict", g_dict)},
      {"namespace", make_builtin("namespace", g_namespace)},
      {"raise_exception", make_builtin("raise_exception", g_raise_exception)},
      {"range", make_builtin("range", g_range)},
      {"strftime_now", make_builtin("strftime_now", g_strftime_now)},
  };
  for (const auto& [n, v] : kGlobals) {
    if (n == name) return &v;
  }
  return nullptr;
}

}  // namespace gb::chat
