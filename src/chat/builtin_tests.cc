// Builtin tests (`x is defined`, `x is divisibleby 3`, ...) with Jinja 3 semantics, and the table
// the parser resolves test names and checks their arguments against.
#include <string>

#include "chat/ast.h"
#include "chat/builtin_support.h"
#include "chat/interpreter.h"

namespace gb::chat {
namespace {

using namespace builtin;

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
Result<bool> t_lower(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && py_islower(v.str()); }
Result<bool> t_upper(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && py_isupper(v.str()); }
Result<bool> t_escaped(Interpreter&, const Value&, CallArgs&) { return false; }
Result<bool> t_filter(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() && find_filter(v.str()) != nullptr;
}
Result<bool> t_test(Interpreter&, const Value& v, CallArgs&) { return v.is_string() && find_test(v.str()) != nullptr; }

const Signature kTestSignatures[] = {
    {"divisibleby", {"num"}},   {"in", {"seq"}},   {"sameas", {"other"}}, {"eq", {"other"}}, {"equalto", {"other"}},
    {"==", {"other"}},          {"ne", {"other"}}, {"!=", {"other"}},     {"lt", {"other"}}, {"<", {"other"}},
    {"lessthan", {"other"}},    {"le", {"other"}}, {"<=", {"other"}},     {"gt", {"other"}}, {">", {"other"}},
    {"greaterthan", {"other"}}, {"ge", {"other"}}, {">=", {"other"}},
};

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

}  // namespace

TestFn find_test(std::string_view name) {
  for (const auto& [n, fn] : kTests) {
    if (n == name) return fn;
  }
  return nullptr;
}

Status check_test_args(std::string_view name, size_t positional, const std::vector<std::string_view>& keywords) {
  for (const Signature& sig : kTestSignatures) {
    if (sig.name == name) return check_signature(&sig, "test", name, positional, keywords);
  }
  return check_signature(nullptr, "test", name, positional, keywords);
}

}  // namespace gb::chat
