// Methods of strings (Python 3 str semantics over UTF-8), dicts and lists: `s.split(",")`,
// `d.items()`, `l.index(x)`.
#include <algorithm>
#include <string>

#include "chat/ast.h"
#include "chat/builtin_support.h"
#include "chat/interpreter.h"

namespace gb::chat {
namespace {

using namespace builtin;

constexpr std::string_view kStringMethods[] = {
    "capitalize", "count",   "endswith",   "find",       "format", "isalnum",      "isalpha",      "isdigit", "islower",
    "isspace",    "isupper", "join",       "lower",      "lstrip", "removeprefix", "removesuffix", "replace", "rfind",
    "rstrip",     "split",   "splitlines", "startswith", "strip",  "title",        "upper"};
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

// str.count(sub): non-overlapping occurrences; "" occurs between every character and at both ends.
Value count_of(const std::string& s, const std::string& sub) {
  if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(s)) + 1);
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return Value(n);
}

// str.find / str.rfind: the character (not byte) index, or -1.
Value find_of(const std::string& s, const std::string& sub, bool last) {
  const size_t p = last ? s.rfind(sub) : s.find(sub);
  if (p == std::string::npos) return Value(-1);
  return Value(static_cast<int64_t>(byte_to_cp_index(s, p)));
}

Result<Value> join_with(Interpreter& in, const std::string& s, CallArgs& a) {
  const Value* items_v = arg(a, 0, "iterable");
  if (items_v == nullptr) return error("join takes exactly one argument");
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(*items_v, a.line));
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string())
      return error(std::string("sequence item ") + std::to_string(i) + ": expected str instance, " +
                   type_name(items[i]) + " found");
    if (i > 0) out += s;
    out += items[i].str();
    GB_RETURN_IF_ERROR(in.check_size(out.size()));
  }
  return Value(std::move(out));
}

// str.isdigit / isalpha / isalnum / isspace: non-empty and every character in the class.
bool all_of_class(const std::string& s, std::string_view name) {
  const std::vector<CodePoint> cps = decode(s);
  if (cps.empty()) return false;
  for (const CodePoint& p : cps) {
    bool ok = false;
    if (name == "isdigit") ok = is_digit_cp(p.cp);
    else if (name == "isalpha") ok = is_alpha(p.cp);
    else if (name == "isalnum") ok = is_alpha(p.cp) || is_numeric_cp(p.cp);
    else ok = is_space_cp(p.cp);
    if (!ok) return false;
  }
  return true;
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
    return name == "count" ? count_of(s, sub) : find_of(s, sub, name == "rfind");
  }
  if (name == "join") return join_with(in, s, a);
  if (name == "splitlines") {
    std::vector<Value> out;
    for (std::string& line : splitlines(s)) out.emplace_back(std::move(line));
    return Value::list(std::move(out));
  }
  if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace")
    return Value(all_of_class(s, name));
  if (name == "islower" || name == "isupper") {
    return Value(name == "islower" ? py_islower(s) : py_isupper(s));
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
  if (name == "items") return items_of(in, d);
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

}  // namespace

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

}  // namespace gb::chat
