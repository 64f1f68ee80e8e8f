// What the builtin filters, tests, methods and globals share: argument lookup, Python's string
// semantics over UTF-8 (case mapping, strip, split, replace, format, int()/float() parsing),
// Jinja's attribute paths, and the parse-time signature check.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "chat/interpreter.h"
#include "chat/value.h"

namespace gb::chat::builtin {

// ---- arguments ----

// Positional argument `index` or keyword `name`, or null.
const Value* arg(const CallArgs& a, size_t index, std::string_view name);
bool arg_bool(const CallArgs& a, size_t index, std::string_view name, bool def);
Result<int64_t> int_arg(const CallArgs& a, size_t index, std::string_view name, int64_t def);
Result<std::string> string_arg(const CallArgs& a, size_t index, std::string_view name);
inline Status error(const std::string& what) { return Status::error(what); }
// str() of a value, capped: str() of nested containers can grow exponentially through shared references.
Result<std::string> str_of(const Value& v);

// Parameter names of each builtin, in positional order (checked when the template is parsed).
// A null list means variadic (select/map/...: test or filter arguments follow).
struct Signature {
  std::string_view name;
  std::initializer_list<std::string_view> params;
  bool variadic = false;
};
// sig == nullptr: the builtin takes no arguments.
Status check_signature(const Signature* sig, std::string_view kind, std::string_view name, size_t positional,
                       const std::vector<std::string_view>& keywords);

// ---- UTF-8 / Unicode ----

struct CodePoint {
  int32_t cp;  // -1: an invalid byte, kept as one opaque unit
  size_t offset;
  size_t length;
};
std::vector<CodePoint> decode(std::string_view s);

enum class Case { kUpper, kLower, kTitle };
std::string map_case(std::string_view s, Case c);
bool is_cased_letter(int32_t cp);
bool is_alpha(int32_t cp);
bool is_digit_cp(int32_t cp);
bool is_numeric_cp(int32_t cp);
bool is_space_cp(int32_t cp);  // Python's str.isspace / str.split() whitespace

// ---- Python str methods ----

std::string py_title(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string jinja_title(std::string_view s);  // Jinja's title filter
// str.strip / lstrip / rstrip; chars == nullptr strips whitespace.
std::string py_strip(std::string_view s, const std::string* chars, bool left, bool right);
Result<std::vector<Value>> py_split(std::string_view s, const Value* sep, int64_t maxsplit);
Result<std::string> py_replace(Interpreter& in, std::string_view s, std::string_view old, std::string_view repl,
                               int64_t count);
std::vector<std::string> splitlines(std::string_view s);
size_t byte_to_cp_index(std::string_view s, size_t byte);
Result<std::string> py_format(const std::string& fmt, const CallArgs& a);
// str.islower / str.isupper: at least one cased letter and none of the other case.
bool py_islower(std::string_view s);
bool py_isupper(std::string_view s);

// ---- values ----

int64_t length_of(const Value& v);                               // -1 when the value has no len()
bool parse_int(std::string_view s, int64_t base, int64_t& out);  // Python int(str)
bool parse_float(std::string_view s, double& out);
// Sort key used by sort/unique/dictsort/min/max: strings compare case-insensitively unless
// case_sensitive, as Jinja's ignore_case does.
Value sort_key(const Value& v, bool case_sensitive);
// item's attribute (or "a.b" path, integer parts as indexes), as Jinja's make_attrgetter.
Result<Value> attribute_of(const Value& item, const Value& attribute);
// A mapping's (key, value) pairs as a list of tuples (the items filter and dict.items()).
Result<Value> items_of(Interpreter& in, const Value& v);

}  // namespace gb::chat::builtin
