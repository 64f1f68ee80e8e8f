// Renders a parsed template: one Interpreter per render call (scopes, output buffer, budgets),
// so a shared Program can be rendered from many threads at once.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "chat/ast.h"
#include "chat/value.h"

namespace gb::chat {

struct RenderLimits {
  size_t max_output_bytes = size_t{64} << 20;  // also bounds any single string built on the way
  int64_t max_steps = 20'000'000;              // statements, loop iterations, calls, list elements
  int max_depth = 400;                         // nested evaluation frames (macro recursion included)
};

class Interpreter {
 public:
  Interpreter(const RenderLimits& limits, std::optional<std::time_t> now) : limits_(limits), now_(now) {}
  ~Interpreter();

  // `globals` is a dict of the variables the template sees (messages, bos_token, ...).
  Result<std::string> render(const Program& program, const Value& globals);

  // Used by builtins.
  Result<Value> call(const Value& fn, CallArgs& args, int line);
  Status charge(int64_t steps);
  Status check_size(size_t bytes) const;
  size_t max_bytes() const { return limits_.max_output_bytes; }
  std::time_t now() const;
  // Registers a namespace so its contents can be dropped after rendering (breaks cycles).
  void track_namespace(const DictPtr& ns) { namespaces_.push_back(ns); }

 private:
  struct Scope {
    Scope* parent = nullptr;
    std::vector<std::pair<std::string, Value>> vars;
    const Value* find(std::string_view name) const;
    void set(const std::string& name, Value v);
  };
  enum class Flow : uint8_t { kNormal, kBreak, kContinue };
  struct DepthGuard;

  Status exec_body(const Body& body);
  Status exec(const Stmt& s);
  Status exec_if(const Stmt& s);
  Status exec_for(const Stmt& s);
  Status exec_set(const Stmt& s);
  Status exec_macro_def(const Stmt& s);
  Status exec_call_block(const Stmt& s);
  Status exec_filter_block(const Stmt& s);
  Status exec_with(const Stmt& s);
  Status assign_targets(Scope& scope, const std::vector<std::string>& targets, const Value& v, int line);
  Result<std::string> capture(const Body& body, Scope& scope);

  Result<Value> eval(const Expr& e);
  Result<Value> eval_name(const Expr& e);
  Result<Value> eval_attr(const Expr& e);
  Result<Value> eval_item(const Expr& e);
  Result<Value> eval_slice(const Expr& e);
  Result<Value> eval_call(const Expr& e);
  Result<Value> eval_filter(const Expr& e, const Value* input);
  Result<Value> eval_test(const Expr& e);
  Result<Value> eval_binary(const Expr& e);
  // The operators that need the budgets (the others are free functions in interpreter.cc).
  Result<Value> binary_concat(Value a, const Value& b, int line);
  Result<Value> binary_add(Value a, const Value& b, int line);
  Result<Value> binary_mul(const Value& a, const Value& b, int line);
  Result<Value> eval_compare(const Expr& e);
  Result<Value> eval_collection(const Expr& e);
  Status eval_args(const Expr& e, size_t first, CallArgs& out);
  Result<Value> call_macro(const Stmt& macro, CallArgs& args, const Value* caller);

  Status output(const Value& v, int line);

  RenderLimits limits_;
  std::optional<std::time_t> now_;
  std::string out_;
  Scope* scope_ = nullptr;
  Scope* root_ = nullptr;
  Flow flow_ = Flow::kNormal;
  int64_t steps_ = 0;
  int depth_ = 0;
  std::vector<DictPtr> namespaces_;
};

// Attribute / item lookup with Jinja's rules (missing -> undefined). Shared with builtins.
Result<Value> get_attr(const Value& obj, std::string_view name, int line);
Result<Value> get_item(const Value& obj, const Value& key, int line);
// The elements a `for` loop visits (dict -> keys, string -> characters, undefined -> none).
Result<std::vector<Value>> iterate(const Value& v, int line);
// Error with the template line prefixed, the form every render error takes.
Status render_error(int line, const std::string& what);
// Builtin globals: range, namespace, dict, raise_exception, strftime_now, ...
const Value* find_global(std::string_view name);
// `obj.name(args)` for strings, dicts and lists.
Result<Value> call_method(Interpreter& in, const Value& obj, std::string_view name, CallArgs& args, int line);

}  // namespace gb::chat
