// Syntax tree of a parsed chat template: expressions and statements, immutable after parsing and
// shared by every render. Filters and tests are resolved to builtins at parse time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace gb::chat {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

// Signatures of builtin filters and tests (defined in builtins.cc).
using FilterFn = Result<Value> (*)(Interpreter&, const Value& input, CallArgs& args);
using TestFn = Result<bool> (*)(Interpreter&, const Value& input, CallArgs& args);

enum class ExprKind : uint8_t {
  kLiteral,  // literal
  kName,     // name
  kList,     // args: items
  kTuple,    // args: items
  kDict,     // args: key0, value0, key1, value1, ...
  kAttr,     // args[0].name
  kItem,     // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]], absent parts are null
  kCall,     // args[0](args[1:], kwargs)
  kFilter,   // args[0] | name(args[1:], kwargs); args[0] is null inside {% filter %}
  kTest,     // args[0] is [not] name(args[1:])
  kNot,      // not args[0]
  kNeg,      // -args[0]
  kPos,      // +args[0]
  kBinary,   // args[0] op args[1]
  kAnd,      // args[0] and args[1]
  kOr,       // args[0] or args[1]
  kCompare,  // args[0] cmp_ops[0] args[1] cmp_ops[1] args[2] ...
  kCond,     // args[0] if args[1] else args[2] (args[2] may be null)
};

enum class BinOp : uint8_t { kAdd, kSub, kMul, kDiv, kFloorDiv, kMod, kPow, kConcat };
enum class CmpOp : uint8_t { kEq, kNe, kLt, kLe, kGt, kGe, kIn, kNotIn };

struct Expr {
  ExprKind kind;
  int line = 0;
  int depth = 1;  // height of this subtree; bounded so evaluation cannot exhaust the stack
  Value literal;
  std::string name;
  BinOp bin_op = BinOp::kAdd;
  bool negated = false;  // `is not`
  std::vector<CmpOp> cmp_ops;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  FilterFn filter = nullptr;
  TestFn test = nullptr;
};

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches (cond, body)..., else_body
  kFor,          // for targets in expr [if cond]: body [else else_body]
  kSet,          // set targets = expr  |  set targets[0].attr = expr
  kSetBlock,     // set targets[0] %} body {% endset
  kMacro,        // macro name(params) body
  kCallBlock,    // call(params) expr (a kCall) body
  kFilterBlock,  // filter expr (chain of kFilter, innermost input null) body
  kBreak,
  kContinue,
  kWith,   // with params (name = expr)... body
  kBlock,  // a plain body ({% generation %})
};

struct Stmt {
  StmtKind kind;
  int line = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr cond;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attr;
  std::string name;
  std::vector<std::pair<std::string, ExprPtr>> params;
};

struct Program {
  Body body;
};

// Builtin lookup used by the parser to reject unknown filters, tests and methods up front.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
bool is_known_method(std::string_view name);
// Argument count and keyword names of a filter / test call, checked at parse time.
Status check_filter_args(std::string_view name, size_t positional, const std::vector<std::string_view>& keywords);
Status check_test_args(std::string_view name, size_t positional, const std::vector<std::string_view>& keywords);

struct ParseLimits {
  int max_expr_depth = 96;   // height of one expression tree
  int max_block_depth = 64;  // nested {% if %} / {% for %} / ...
};

Result<std::unique_ptr<Program>> parse_template(std::string_view source, const ParseLimits& limits = {});

}  // namespace gb::chat
