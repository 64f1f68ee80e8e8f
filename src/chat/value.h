// The dynamic value of the chat-template interpreter: Python/Jinja semantics (None, bool, int,
// float, str, list, dict, undefined, callables) and their printing, comparison and JSON forms.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace gb::chat {

class Value;
class Interpreter;

// Jinja's Undefined: what a missing variable, attribute or key evaluates to. It prints as "",
// is falsy and iterates as empty; most other uses are errors. `name` points into the template.
struct Undefined {
  std::string_view name;
};
struct NoneValue {};

struct ValueList {
  std::vector<Value> items;
  bool is_tuple = false;  // only changes printing: "(1, 2)" as Python prints tuples
};

// Insertion-ordered like a Python dict (tojson and `items` keep the caller's key order).
struct ValueDict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // namespace(...) objects are the only mutable values

  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string_view, Value>> keyword;
  int line = 0;
};

// A function value: macros, caller(), and the builtins (range, namespace, raise_exception, ...).
struct Callable {
  std::string name;
  std::function<Result<Value>(Interpreter&, CallArgs&)> fn;
};

using StringPtr = std::shared_ptr<const std::string>;
using ListPtr = std::shared_ptr<ValueList>;
using DictPtr = std::shared_ptr<ValueDict>;
using CallablePtr = std::shared_ptr<const Callable>;

class Value {
 public:
  // Order matches the variant alternatives.
  enum class Type : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };

  Value() = default;
  Value(Undefined u) : v_(u) {}                                                    // NOLINT
  Value(NoneValue n) : v_(n) {}                                                    // NOLINT
  Value(bool b) : v_(b) {}                                                         // NOLINT
  Value(int64_t i) : v_(i) {}                                                      // NOLINT
  Value(int i) : v_(static_cast<int64_t>(i)) {}                                    // NOLINT
  Value(double d) : v_(d) {}                                                       // NOLINT
  Value(std::string s) : v_(std::make_shared<const std::string>(std::move(s))) {}  // NOLINT
  Value(const char* s) : Value(std::string(s)) {}                                  // NOLINT
  Value(StringPtr s) : v_(std::move(s)) {}                                         // NOLINT
  Value(ListPtr l) : v_(std::move(l)) {}                                           // NOLINT
  Value(DictPtr d) : v_(std::move(d)) {}                                           // NOLINT
  Value(CallablePtr c) : v_(std::move(c)) {}                                       // NOLINT

  static Value none() { return Value(NoneValue{}); }
  static Value list(std::vector<Value> items) {
    return Value(std::make_shared<ValueList>(ValueList{std::move(items)}));
  }
  static Value tuple(std::vector<Value> items) {
    return Value(std::make_shared<ValueList>(ValueList{std::move(items), true}));
  }
  static Value dict() { return Value(std::make_shared<ValueDict>()); }

  Type type() const { return static_cast<Type>(v_.index()); }
  bool is_undefined() const { return type() == Type::kUndefined; }
  bool is_none() const { return type() == Type::kNone; }
  bool is_bool() const { return type() == Type::kBool; }
  bool is_int() const { return type() == Type::kInt; }
  bool is_float() const { return type() == Type::kFloat; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return type() == Type::kString; }
  bool is_list() const { return type() == Type::kList; }
  bool is_dict() const { return type() == Type::kDict; }
  bool is_callable() const { return type() == Type::kCallable; }
  bool is_namespace() const { return is_dict() && dict_ptr()->is_namespace; }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  // Numeric value of an int, float or bool (Python bools are ints).
  double to_double() const;
  const std::string& str() const { return *std::get<StringPtr>(v_); }
  const StringPtr& str_ptr() const { return std::get<StringPtr>(v_); }
  const std::vector<Value>& items() const { return std::get<ListPtr>(v_)->items; }
  const ListPtr& list_ptr() const { return std::get<ListPtr>(v_); }
  const ValueDict& dict_ref() const { return *std::get<DictPtr>(v_); }
  const DictPtr& dict_ptr() const { return std::get<DictPtr>(v_); }
  const Callable& callable() const { return *std::get<CallablePtr>(v_); }
  std::string_view undefined_name() const { return std::get<Undefined>(v_).name; }

  // Python truthiness.
  bool truthy() const;

 private:
  std::variant<Undefined, NoneValue, bool, int64_t, double, StringPtr, ListPtr, DictPtr, CallablePtr> v_;
};

// Python type name for error messages ("str", "int", "dict", ...).
const char* type_name(const Value& v);

// str(v) as Jinja prints it: None -> "None", True -> "True", lists/dicts in Python repr,
// undefined -> "". Fails only on structures nested too deeply (e.g. a namespace holding itself).
Result<std::string> to_display_string(const Value& v, size_t max_bytes = SIZE_MAX);
// repr(v): strings quoted the way Python quotes them.
Result<std::string> to_repr(const Value& v, size_t max_bytes = SIZE_MAX);
// Python's repr() of a float: shortest round-trip digits, "1.0", "1e+16", "inf", "nan".
std::string format_float(double d);

struct JsonFormat {
  int indent = -1;             // < 0: single line
  std::string item_separator;  // empty: Python's default for the indent mode
  std::string key_separator;
  bool sort_keys = false;
  bool ensure_ascii = false;
  size_t max_bytes = SIZE_MAX;  // fail instead of building a larger string
};
// json.dumps(v, ...) as the transformers `tojson` filter calls it.
Result<std::string> to_json(const Value& v, const JsonFormat& format);

// Python ==, and < for sortable pairs (numbers, strings, lists); an error for other pairs.
bool values_equal(const Value& a, const Value& b);
Result<bool> value_less(const Value& a, const Value& b);

// Conversions from the request's JSON. ordered_json keeps key order, which tojson reproduces.
Value from_json(const nlohmann::ordered_json& j);
Value from_json(const nlohmann::json& j);

// UTF-8 helpers shared with the interpreter (Python strings count code points).
size_t utf8_length(std::string_view s);
// Byte offsets of each code point start, plus s.size() at the end.
std::vector<size_t> utf8_offsets(std::string_view s);

}  // namespace gb::chat
