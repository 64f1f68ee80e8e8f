// Builtin globals: range, dict, namespace, raise_exception, strftime_now.
#include <cmath>
#include <ctime>
#include <memory>

#include "chat/builtin_support.h"
#include "chat/interpreter.h"

namespace gb::chat {
namespace {

using namespace builtin;

Result<Value> g_range(Interpreter& in, CallArgs& a) {
  if (!a.keyword.empty() || a.positional.empty() || a.positional.size() > 3)
    return error("range expects 1 to 3 integer arguments");
  for (const Value& v : a.positional) {
    if (!v.is_int() && !v.is_bool())
      return error(std::string("range: '") + type_name(v) + "' object cannot be interpreted as an integer");
  }
  auto iv = [&](size_t i) {
    return a.positional[i].is_bool() ? int64_t{a.positional[i].as_bool()} : a.positional[i].as_int();
  };
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
  const double count_d =
      std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
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
