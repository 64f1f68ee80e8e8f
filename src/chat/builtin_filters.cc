// Builtin filters (Jinja 3 semantics; the Python-flavoured ones as transformers renders them)
// and the table the parser resolves filter names and checks their arguments against.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "chat/ast.h"
#include "chat/builtin_support.h"
#include "chat/interpreter.h"

namespace gb::chat {
namespace {

using namespace builtin;

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
    if (!indent->is_int() || indent->as_int() < 0 || indent->as_int() > 64)
      return error("indent must be an integer 0..64");
    f.indent = static_cast<int>(indent->as_int());
  }
  const Value* seps = arg(a, 2, "separators");
  if (seps != nullptr && !seps->is_none()) {
    if (!seps->is_list() || seps->items().size() != 2 || !seps->items()[0].is_string() ||
        !seps->items()[1].is_string()) {
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

Result<Value> f_items(Interpreter& in, const Value& v, CallArgs&) { return items_of(in, v); }

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
    if (base == 10 && parse_float(v.str(), d) && std::isfinite(d) && std::fabs(d) < 9.2e18)
      return Value(static_cast<int64_t>(d));
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
Result<bool> apply_named_test(Interpreter& in, const Value& v, const Value* name, const std::vector<Value>& extra,
                              int line) {
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
  std::vector<Value> extra(a.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next, a.positional.size())),
                           a.positional.end());
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
  GB_ASSIGN_OR_RETURN(
      items, sorted(in, std::move(items), false, arg_bool(a, 0, "case_sensitive", false), arg(a, 1, "attribute")));
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

const Signature kFilterSignatures[] = {
    {"abs", {}},
    {"attr", {"name"}},
    {"batch", {"linecount", "fill_with"}},
    {"capitalize", {}},
    {"center", {"width"}},
    {"count", {}},
    {"d", {"default_value", "boolean"}},
    {"default", {"default_value", "boolean"}},
    {"dictsort", {"case_sensitive", "by", "reverse"}},
    {"e", {}},
    {"escape", {}},
    {"first", {}},
    {"float", {"default"}},
    {"forceescape", {}},
    {"indent", {"width", "first", "blank"}},
    {"int", {"default", "base"}},
    {"items", {}},
    {"join", {"d", "attribute"}},
    {"last", {}},
    {"length", {}},
    {"list", {}},
    {"lower", {}},
    {"map", {"attribute", "default"}, true},
    {"max", {"case_sensitive", "attribute"}},
    {"min", {"case_sensitive", "attribute"}},
    {"reject", {}, true},
    {"rejectattr", {}, true},
    {"replace", {"old", "new", "count"}},
    {"reverse", {}},
    {"round", {"precision", "method"}},
    {"safe", {}},
    {"select", {}, true},
    {"selectattr", {}, true},
    {"sort", {"reverse", "case_sensitive", "attribute"}},
    {"string", {}},
    {"sum", {"attribute", "start"}},
    {"title", {}},
    {"tojson", {"ensure_ascii", "indent", "separators", "sort_keys"}},
    {"trim", {"chars"}},
    {"unique", {"case_sensitive", "attribute"}},
    {"upper", {}},
    {"wordcount", {}},
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

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& [n, fn] : kFilters) {
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

}  // namespace gb::chat
