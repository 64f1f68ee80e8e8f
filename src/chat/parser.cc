// Recursive-descent parser from lexer tokens to the template syntax tree, with Jinja's operator
// precedence (jinja2/parser.py). Errors name the construct and its line.
#include <algorithm>
#include <initializer_list>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace gb::chat {
namespace {

// Tags Jinja has but chat templates never need; named in the error so the user knows why.
constexpr std::string_view kUnsupportedTags[] = {"include", "import",     "from",  "extends",   "block",
                                                 "do",      "autoescape", "trans", "pluralize", "endblock"};

class Parser {
 public:
  Parser(std::vector<Token> tokens, const ParseLimits& limits) : toks_(std::move(tokens)), limits_(limits) {}

  Result<std::unique_ptr<Program>> run() {
    auto program = std::make_unique<Program>();
    std::string end;
    GB_RETURN_IF_ERROR(parse_body(program->body, {}, "", 0, end));
    return program;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return toks_[pos_]; }
  const Token& peek(size_t n = 1) const { return toks_[std::min(pos_ + n, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  bool is_op(std::string_view op, size_t n = 0) const {
    const Token& t = peek(n);
    return t.type == TokenType::kOp && t.value == op;
  }
  bool is_name(std::string_view name, size_t n = 0) const {
    const Token& t = peek(n);
    return t.type == TokenType::kName && t.value == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  Status error(int line, const std::string& what) const {
    return Status::error("chat template syntax error at line " + std::to_string(line) + ": " + what);
  }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case TokenType::kName: return "'" + t.value + "'";
      case TokenType::kOp: return "'" + t.value + "'";
      case TokenType::kString: return "string literal";
      case TokenType::kInt:
      case TokenType::kFloat: return "number " + t.value;
      default: return token_type_name(t.type);
    }
  }
  Status unexpected(const std::string& expected) const {
    return error(cur().line, "expected " + expected + ", got " + describe(cur()));
  }
  Status expect_op(std::string_view op) {
    if (!skip_op(op)) return unexpected("'" + std::string(op) + "'");
    return Status::ok();
  }
  Status expect_block_end(std::string_view tag) {
    if (cur().type != TokenType::kBlockEnd) {
      return error(cur().line, "expected '%}' to end '" + std::string(tag) + "', got " + describe(cur()));
    }
    advance();
    return Status::ok();
  }
  Result<std::string> expect_name(const std::string& what) {
    if (cur().type != TokenType::kName) return unexpected(what);
    std::string n = cur().value;
    advance();
    return n;
  }

  // ---- node helpers ----
  Result<ExprPtr> make(ExprKind kind, int line, std::vector<ExprPtr> args) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    int depth = 0;
    for (const auto& a : args) {
      if (a) depth = std::max(depth, a->depth);
    }
    e->depth = depth + 1;
    e->args = std::move(args);
    if (e->depth > limits_.max_expr_depth) return error(line, "expression nested too deeply");
    return e;
  }
  Status refresh_depth(Expr& e) {
    int depth = 0;
    for (const auto& a : e.args) {
      if (a) depth = std::max(depth, a->depth);
    }
    for (const auto& [k, a] : e.kwargs) depth = std::max(depth, a->depth);
    e.depth = depth + 1;
    if (e.depth > limits_.max_expr_depth) return error(e.line, "expression nested too deeply");
    return Status::ok();
  }
  static std::vector<ExprPtr> two(ExprPtr a, ExprPtr b) {
    std::vector<ExprPtr> v;
    v.push_back(std::move(a));
    v.push_back(std::move(b));
    return v;
  }
  static std::vector<ExprPtr> one(ExprPtr a) {
    std::vector<ExprPtr> v;
    v.push_back(std::move(a));
    return v;
  }

  // Guards the parser's own recursion (e.g. "not not not ..." or "((((...").
  struct RecursionGuard {
    explicit RecursionGuard(Parser& p) : p_(p) { ++p_.recursion_; }
    ~RecursionGuard() { --p_.recursion_; }
    Parser& p_;
  };
  Status check_recursion() const {
    if (recursion_ > limits_.max_expr_depth * 2) return error(cur().line, "expression nested too deeply");
    return Status::ok();
  }

  // ---- expressions ----
  Result<ExprPtr> parse_expression() {
    RecursionGuard guard(*this);
    GB_RETURN_IF_ERROR(check_recursion());
    GB_ASSIGN_OR_RETURN(ExprPtr e, parse_or());
    while (is_name("if")) {
      const int line = cur().line;
      advance();
      GB_ASSIGN_OR_RETURN(ExprPtr cond, parse_or());
      ExprPtr otherwise;
      if (skip_name("else")) {
        GB_ASSIGN_OR_RETURN(otherwise, parse_expression());
      }
      std::vector<ExprPtr> args;
      args.push_back(std::move(e));
      args.push_back(std::move(cond));
      args.push_back(std::move(otherwise));
      GB_ASSIGN_OR_RETURN(e, make(ExprKind::kCond, line, std::move(args)));
    }
    return e;
  }

  // `a or b or c`, left-associative; `or` binds looser than `and`, `and` looser than `not`.
  Result<ExprPtr> parse_or() { return parse_left_assoc("or", ExprKind::kOr, &Parser::parse_and); }
  Result<ExprPtr> parse_and() { return parse_left_assoc("and", ExprKind::kAnd, &Parser::parse_not); }

  Result<ExprPtr> parse_left_assoc(std::string_view word, ExprKind kind, Result<ExprPtr> (Parser::*operand)()) {
    GB_ASSIGN_OR_RETURN(ExprPtr e, (this->*operand)());
    while (is_name(word)) {
      const int line = cur().line;
      advance();
      GB_ASSIGN_OR_RETURN(ExprPtr rhs, (this->*operand)());
      GB_ASSIGN_OR_RETURN(e, make(kind, line, two(std::move(e), std::move(rhs))));
    }
    return e;
  }

  Result<ExprPtr> parse_not() {
    if (is_name("not")) {
      RecursionGuard guard(*this);
      GB_RETURN_IF_ERROR(check_recursion());
      const int line = cur().line;
      advance();
      GB_ASSIGN_OR_RETURN(ExprPtr operand, parse_not());
      return make(ExprKind::kNot, line, one(std::move(operand)));
    }
    return parse_compare();
  }

  Result<ExprPtr> parse_compare() {
    const int line = cur().line;
    GB_ASSIGN_OR_RETURN(ExprPtr first, parse_math1());
    std::vector<ExprPtr> operands;
    std::vector<CmpOp> ops;
    operands.push_back(std::move(first));
    while (true) {
      CmpOp op;
      if (is_op("==")) op = CmpOp::kEq;
      else if (is_op("!=")) op = CmpOp::kNe;
      else if (is_op("<")) op = CmpOp::kLt;
      else if (is_op("<=")) op = CmpOp::kLe;
      else if (is_op(">")) op = CmpOp::kGt;
      else if (is_op(">=")) op = CmpOp::kGe;
      else if (is_name("in")) op = CmpOp::kIn;
      else if (is_name("not") && is_name("in", 1)) op = CmpOp::kNotIn;
      else break;
      advance();
      if (op == CmpOp::kNotIn) advance();
      GB_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math1());
      operands.push_back(std::move(rhs));
      ops.push_back(op);
    }
    if (ops.empty()) return std::move(operands[0]);
    GB_ASSIGN_OR_RETURN(ExprPtr e, make(ExprKind::kCompare, line, std::move(operands)));
    e->cmp_ops = std::move(ops);
    return e;
  }

  Result<ExprPtr> binary(BinOp op, int line, ExprPtr a, ExprPtr b) {
    GB_ASSIGN_OR_RETURN(ExprPtr e, make(ExprKind::kBinary, line, two(std::move(a), std::move(b))));
    e->bin_op = op;
    return e;
  }

  Result<ExprPtr> parse_math1() {
    GB_ASSIGN_OR_RETURN(ExprPtr e, parse_concat());
    while (is_op("+") || is_op("-")) {
      const BinOp op = is_op("+") ? BinOp::kAdd : BinOp::kSub;
      const int line = cur().line;
      advance();
      GB_ASSIGN_OR_RETURN(ExprPtr rhs, parse_concat());
      GB_ASSIGN_OR_RETURN(e, binary(op, line, std::move(e), std::move(rhs)));
    }
    return e;
  }

  Result<ExprPtr> parse_concat() {
    GB_ASSIGN_OR_RETURN(ExprPtr e, parse_math2());
    while (is_op("~")) {
      const int line = cur().line;
      advance();
      GB_ASSIGN_OR_RETURN(ExprPtr rhs, parse_math2());
      GB_ASSIGN_OR_RETURN(e, binary(BinOp::kConcat, line, std::move(e), std::move(rhs)));
    }
    return e;
  }

  Result<ExprPtr> parse_math2() {
    GB_ASSIGN_OR_RETURN(ExprPtr e, parse_pow());
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().value;
      const int line = cur().line;
      advance();
      GB_ASSIGN_OR_RETURN(ExprPtr rhs, parse_pow());
      const BinOp bop = op == "*" ? BinOp::kMul : op == "/" ? BinOp::kDiv : op == "//" ? BinOp::kFloorDiv : BinOp::kMod;
      GB_ASSIGN_OR_RETURN(e, binary(bop, line, std::move(e), std::move(rhs)));
    }
    return e;
  }

  Result<ExprPtr> parse_pow() {
    GB_ASSIGN_OR_RETURN(ExprPtr e, parse_unary(true));
    while (is_op("**")) {
      const int line = cur().line;
      advance();
      GB_ASSIGN_OR_RETURN(ExprPtr rhs, parse_unary(true));
      GB_ASSIGN_OR_RETURN(e, binary(BinOp::kPow, line, std::move(e), std::move(rhs)));
    }
    return e;
  }

  Result<ExprPtr> parse_unary(bool with_filter) {
    RecursionGuard guard(*this);
    GB_RETURN_IF_ERROR(check_recursion());
    const int line = cur().line;
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const ExprKind kind = is_op("-") ? ExprKind::kNeg : ExprKind::kPos;
      advance();
      GB_ASSIGN_OR_RETURN(ExprPtr operand, parse_unary(false));
      GB_ASSIGN_OR_RETURN(e, make(kind, line, one(std::move(operand))));
    } else {
      GB_ASSIGN_OR_RETURN(e, parse_primary());
    }
    GB_ASSIGN_OR_RETURN(e, parse_postfix(std::move(e)));
    if (with_filter) {
      GB_ASSIGN_OR_RETURN(e, parse_filter_expr(std::move(e)));
    }
    return e;
  }

  Result<ExprPtr> literal(Value v, int line) {
    GB_ASSIGN_OR_RETURN(ExprPtr e, make(ExprKind::kLiteral, line, {}));
    e->literal = std::move(v);
    return e;
  }

  Result<ExprPtr> parse_primary() {
    const Token& t = cur();
    const int line = t.line;
    switch (t.type) {
      case TokenType::kName: {
        const std::string& n = t.value;
        if (n == "true" || n == "True") {
          advance();
          return literal(Value(true), line);
        }
        if (n == "false" || n == "False") {
          advance();
          return literal(Value(false), line);
        }
        if (n == "none" || n == "None") {
          advance();
          return literal(Value::none(), line);
        }
        GB_ASSIGN_OR_RETURN(ExprPtr e, make(ExprKind::kName, line, {}));
        e->name = n;
        advance();
        return e;
      }
      case TokenType::kString: {
        std::string s = t.value;
        advance();
        while (cur().type == TokenType::kString) {  // adjacent literals concatenate, as in Python
          s += cur().value;
          advance();
        }
        return literal(Value(std::move(s)), line);
      }
      case TokenType::kInt: {
        const int64_t v = t.int_value;
        advance();
        return literal(Value(v), line);
      }
      case TokenType::kFloat: {
        const double v = t.float_value;
        advance();
        return literal(Value(v), line);
      }
      case TokenType::kOp:
        if (t.value == "(") return parse_paren();
        if (t.value == "[") return parse_list();
        if (t.value == "{") return parse_dict();
        break;
      default: break;
    }
    return unexpected("an expression");
  }

  Result<ExprPtr> parse_paren() {
    const int line = cur().line;
    advance();  // (
    if (skip_op(")")) return make(ExprKind::kTuple, line, {});
    GB_ASSIGN_OR_RETURN(ExprPtr first, parse_expression());
    if (skip_op(")")) return first;
    std::vector<ExprPtr> items;
    items.push_back(std::move(first));
    while (skip_op(",")) {
      if (is_op(")")) break;
      GB_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
      items.push_back(std::move(item));
    }
    GB_RETURN_IF_ERROR(expect_op(")"));
    return make(ExprKind::kTuple, line, std::move(items));
  }

  Result<ExprPtr> parse_list() {
    const int line = cur().line;
    advance();  // [
    std::vector<ExprPtr> items;
    while (!is_op("]")) {
      if (!items.empty()) {
        GB_RETURN_IF_ERROR(expect_op(","));
        if (is_op("]")) break;
      }
      GB_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
      items.push_back(std::move(item));
    }
    advance();  // ]
    return make(ExprKind::kList, line, std::move(items));
  }

  Result<ExprPtr> parse_dict() {
    const int line = cur().line;
    advance();  // {
    std::vector<ExprPtr> items;
    while (!is_op("}")) {
      if (!items.empty()) {
        GB_RETURN_IF_ERROR(expect_op(","));
        if (is_op("}")) break;
      }
      GB_ASSIGN_OR_RETURN(ExprPtr key, parse_expression());
      GB_RETURN_IF_ERROR(expect_op(":"));
      GB_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
      items.push_back(std::move(key));
      items.push_back(std::move(value));
    }
    advance();  // }
    return make(ExprKind::kDict, line, std::move(items));
  }

  Result<ExprPtr> parse_postfix(ExprPtr e) {
    while (true) {
      const int line = cur().line;
      if (is_op(".")) {
        advance();
        if (cur().type == TokenType::kName) {
          std::string attr = cur().value;
          advance();
          GB_ASSIGN_OR_RETURN(e, make(ExprKind::kAttr, line, one(std::move(e))));
          e->name = std::move(attr);
        } else if (cur().type == TokenType::kInt) {
          GB_ASSIGN_OR_RETURN(ExprPtr index, literal(Value(cur().int_value), line));
          advance();
          GB_ASSIGN_OR_RETURN(e, make(ExprKind::kItem, line, two(std::move(e), std::move(index))));
        } else {
          return unexpected("an attribute name after '.'");
        }
      } else if (is_op("[")) {
        advance();
        GB_ASSIGN_OR_RETURN(e, parse_subscript(std::move(e), line));
      } else if (is_op("(")) {
        GB_ASSIGN_OR_RETURN(e, parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  Result<ExprPtr> parse_subscript(ExprPtr obj, int line) {
    ExprPtr parts[3];
    bool is_slice = false;
    for (int i = 0; i < 3; ++i) {
      if (!is_op(":") && !is_op("]")) {
        GB_ASSIGN_OR_RETURN(parts[i], parse_expression());
      }
      if (i < 2 && skip_op(":")) {
        is_slice = true;
        continue;
      }
      break;
    }
    GB_RETURN_IF_ERROR(expect_op("]"));
    if (!is_slice) {
      if (!parts[0]) return error(line, "empty subscript '[]'");
      return make(ExprKind::kItem, line, two(std::move(obj), std::move(parts[0])));
    }
    std::vector<ExprPtr> args;
    args.push_back(std::move(obj));
    for (auto& p : parts) args.push_back(std::move(p));
    return make(ExprKind::kSlice, line, std::move(args));
  }

  // Parses "(a, b, k=v)" into e's args (after any already there) and kwargs.
  Status parse_call_args(Expr& e) {
    GB_RETURN_IF_ERROR(expect_op("("));
    bool first = true;
    while (!is_op(")")) {
      if (!first) {
        GB_RETURN_IF_ERROR(expect_op(","));
        if (is_op(")")) break;
      }
      first = false;
      if (is_op("*") || is_op("**")) return error(cur().line, "unsupported construct: '*args' / '**kwargs' in a call");
      if (cur().type == TokenType::kName && is_op("=", 1)) {
        std::string key = cur().value;
        advance();
        advance();
        GB_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
        e.kwargs.emplace_back(std::move(key), std::move(value));
      } else {
        if (!e.kwargs.empty()) return error(cur().line, "positional argument follows keyword argument");
        GB_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
        e.args.push_back(std::move(value));
      }
    }
    advance();  // )
    return refresh_depth(e);
  }

  Result<ExprPtr> parse_call(ExprPtr callee) {
    const int line = cur().line;
    if (callee->kind == ExprKind::kAttr && !is_known_method(callee->name) && callee->name != "cycle") {
      return error(line, "unknown method '" + callee->name + "'");
    }
    GB_ASSIGN_OR_RETURN(ExprPtr e, make(ExprKind::kCall, line, one(std::move(callee))));
    GB_RETURN_IF_ERROR(parse_call_args(*e));
    return e;
  }

  Result<ExprPtr> parse_filter(ExprPtr input) {
    const int line = cur().line;
    GB_ASSIGN_OR_RETURN(std::string name, expect_name("a filter name after '|'"));
    FilterFn fn = find_filter(name);
    if (fn == nullptr) return error(line, "unknown filter '" + name + "'");
    GB_ASSIGN_OR_RETURN(ExprPtr e, make(ExprKind::kFilter, line, one(std::move(input))));
    e->name = std::move(name);
    e->filter = fn;
    if (is_op("(")) GB_RETURN_IF_ERROR(parse_call_args(*e));
    GB_RETURN_IF_ERROR(check_args(*e, line, true));
    return e;
  }

  Result<ExprPtr> parse_filter_expr(ExprPtr e) {
    while (true) {
      if (skip_op("|")) {
        GB_ASSIGN_OR_RETURN(e, parse_filter(std::move(e)));
      } else if (is_name("is")) {
        const int line = cur().line;
        advance();
        const bool negated = skip_name("not");
        GB_ASSIGN_OR_RETURN(std::string name, expect_name("a test name after 'is'"));
        TestFn fn = find_test(name);
        if (fn == nullptr) return error(line, "unknown test '" + name + "'");
        GB_ASSIGN_OR_RETURN(ExprPtr t, make(ExprKind::kTest, line, one(std::move(e))));
        t->name = std::move(name);
        t->test = fn;
        t->negated = negated;
        if (is_op("(")) {
          GB_RETURN_IF_ERROR(parse_call_args(*t));
        } else if (starts_test_argument()) {
          GB_ASSIGN_OR_RETURN(ExprPtr arg, parse_primary());
          GB_ASSIGN_OR_RETURN(arg, parse_postfix(std::move(arg)));
          t->args.push_back(std::move(arg));
          GB_RETURN_IF_ERROR(refresh_depth(*t));
        }
        GB_RETURN_IF_ERROR(check_args(*t, line, false));
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  Status check_args(const Expr& e, int line, bool is_filter) {
    std::vector<std::string_view> keywords;
    for (const auto& [k, v] : e.kwargs) keywords.push_back(k);
    const size_t positional = e.args.size() - 1;  // args[0] is the input
    Status st =
        is_filter ? check_filter_args(e.name, positional, keywords) : check_test_args(e.name, positional, keywords);
    if (!st.is_ok()) return error(line, st.message());
    return Status::ok();
  }

  // `x is divisibleby 3`: a test may take one argument without parentheses.
  bool starts_test_argument() const {
    const Token& t = cur();
    if (t.type == TokenType::kString || t.type == TokenType::kInt || t.type == TokenType::kFloat) return true;
    if (t.type == TokenType::kOp) return t.value == "[" || t.value == "{";
    if (t.type != TokenType::kName) return false;
    static constexpr std::string_view kStop[] = {"else", "or", "and", "if", "is", "in", "not", "recursive"};
    return std::find(std::begin(kStop), std::end(kStop), t.value) == std::end(kStop);
  }

  // ---- statements ----
  // Parses statements until a block tag named in `ends`; `end` receives that tag's name.
  Status parse_body(Body& body, std::initializer_list<std::string_view> ends, std::string_view opener, int opener_line,
                    std::string& end) {
    if (++block_depth_ > limits_.max_block_depth) return error(cur().line, "blocks nested too deeply");
    struct DepthGuard {
      int& d;
      ~DepthGuard() { --d; }
    } guard{block_depth_};
    while (true) {
      const Token& t = cur();
      switch (t.type) {
        case TokenType::kText: {
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kText;
          s->line = t.line;
          s->text = t.value;
          body.push_back(std::move(s));
          advance();
          break;
        }
        case TokenType::kVarBegin: {
          const int line = t.line;
          advance();
          auto s = std::make_unique<Stmt>();
          s->kind = StmtKind::kOutput;
          s->line = line;
          GB_ASSIGN_OR_RETURN(s->expr, parse_expression());
          if (cur().type != TokenType::kVarEnd) return unexpected("'}}'");
          advance();
          body.push_back(std::move(s));
          break;
        }
        case TokenType::kBlockBegin: {
          advance();
          if (cur().type != TokenType::kName) return unexpected("a tag name after '{%'");
          const std::string tag = cur().value;
          const int line = cur().line;
          if (std::find(ends.begin(), ends.end(), tag) != ends.end()) {
            advance();
            end = tag;
            return Status::ok();
          }
          advance();
          GB_RETURN_IF_ERROR(parse_statement(tag, line, body));
          break;
        }
        case TokenType::kEof:
          if (ends.size() == 0) return Status::ok();
          return error(opener_line, "unclosed '" + std::string(opener) + "' block (expected '" +
                                        std::string(*(ends.end() - 1)) + "' before the end of the template)");
        default: return unexpected("text, '{{' or '{%'");
      }
    }
  }

  Status parse_statement(const std::string& tag, int line, Body& body) {
    auto s = std::make_unique<Stmt>();
    s->line = line;
    if (tag == "if") {
      GB_RETURN_IF_ERROR(parse_if(*s));
    } else if (tag == "for") {
      GB_RETURN_IF_ERROR(parse_for(*s));
    } else if (tag == "set") {
      GB_RETURN_IF_ERROR(parse_set(*s));
    } else if (tag == "macro") {
      s->kind = StmtKind::kMacro;
      GB_ASSIGN_OR_RETURN(s->name, expect_name("a macro name"));
      GB_RETURN_IF_ERROR(parse_params(s->params));
      GB_RETURN_IF_ERROR(expect_block_end("macro"));
      GB_RETURN_IF_ERROR(parse_body_to(s->body, "macro", "endmacro", line, /*outside_loops=*/true));
    } else if (tag == "call") {
      s->kind = StmtKind::kCallBlock;
      if (is_op("(")) GB_RETURN_IF_ERROR(parse_params(s->params));
      GB_ASSIGN_OR_RETURN(s->expr, parse_expression());
      if (s->expr->kind != ExprKind::kCall) return error(line, "'call' expects a macro call");
      GB_RETURN_IF_ERROR(expect_block_end("call"));
      GB_RETURN_IF_ERROR(parse_body_to(s->body, "call", "endcall", line, /*outside_loops=*/true));
    } else if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      GB_ASSIGN_OR_RETURN(s->expr, parse_filter(nullptr));
      while (skip_op("|")) {
        GB_ASSIGN_OR_RETURN(s->expr, parse_filter(std::move(s->expr)));
      }
      GB_RETURN_IF_ERROR(expect_block_end("filter"));
      GB_RETURN_IF_ERROR(parse_body_to(s->body, "filter", "endfilter", line));
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) return error(line, "'" + tag + "' outside of a 'for' loop");
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
      GB_RETURN_IF_ERROR(expect_block_end(tag));
    } else if (tag == "with") {
      GB_RETURN_IF_ERROR(parse_with(*s));
    } else if (tag == "generation") {
      // transformers' AssistantTracker marks assistant text for masks; rendering is unchanged.
      s->kind = StmtKind::kBlock;
      GB_RETURN_IF_ERROR(expect_block_end("generation"));
      GB_RETURN_IF_ERROR(parse_body_to(s->body, "generation", "endgeneration", line));
    } else if (std::find(std::begin(kUnsupportedTags), std::end(kUnsupportedTags), tag) != std::end(kUnsupportedTags)) {
      return error(line, "unsupported tag '" + tag + "'");
    } else if (tag.rfind("end", 0) == 0 || tag == "else" || tag == "elif") {
      return error(line, "unexpected '" + tag + "' (no matching open block)");
    } else {
      return error(line, "unknown tag '" + tag + "'");
    }
    body.push_back(std::move(s));
    return Status::ok();
  }

  // The body of a block up to its `{% end_tag %}`. outside_loops: break/continue inside do not
  // reach an enclosing loop (macro and call bodies).
  Status parse_body_to(Body& body, std::string_view tag, std::string_view end_tag, int line,
                       bool outside_loops = false) {
    std::string end;
    const int saved_loop_depth = loop_depth_;
    if (outside_loops) loop_depth_ = 0;
    Status st = parse_body(body, {end_tag}, tag, line, end);
    loop_depth_ = saved_loop_depth;
    GB_RETURN_IF_ERROR(st);
    return expect_block_end(end_tag);
  }

  // if / elif... / else / endif
  Status parse_if(Stmt& s) {
    s.kind = StmtKind::kIf;
    std::string current = "if";
    std::string end;
    while (true) {
      GB_ASSIGN_OR_RETURN(ExprPtr cond, parse_expression());
      GB_RETURN_IF_ERROR(expect_block_end(current));
      Body branch;
      GB_RETURN_IF_ERROR(parse_body(branch, {"elif", "else", "endif"}, "if", s.line, end));
      s.branches.emplace_back(std::move(cond), std::move(branch));
      if (end != "elif") break;
      current = "elif";
    }
    if (end == "else") {
      GB_RETURN_IF_ERROR(expect_block_end("else"));
      GB_RETURN_IF_ERROR(parse_body(s.else_body, {"endif"}, "if", s.line, end));
    }
    return expect_block_end("endif");
  }

  // for targets in iterable [if cond] / else / endfor
  Status parse_for(Stmt& s) {
    s.kind = StmtKind::kFor;
    GB_RETURN_IF_ERROR(parse_targets(s.targets, "for"));
    if (!skip_name("in")) return unexpected("'in' in 'for'");
    GB_ASSIGN_OR_RETURN(s.expr, parse_or());
    if (skip_name("if")) {
      GB_ASSIGN_OR_RETURN(s.cond, parse_expression());
    }
    if (is_name("recursive")) return error(cur().line, "unsupported construct: recursive 'for' loop");
    GB_RETURN_IF_ERROR(expect_block_end("for"));
    std::string end;
    ++loop_depth_;
    Status st = parse_body(s.body, {"else", "endfor"}, "for", s.line, end);
    --loop_depth_;
    GB_RETURN_IF_ERROR(st);
    if (end == "else") {
      GB_RETURN_IF_ERROR(expect_block_end("else"));
      GB_RETURN_IF_ERROR(parse_body(s.else_body, {"endfor"}, "for", s.line, end));
    }
    return expect_block_end("endfor");
  }

  // set x = expr, set a, b = x, y, set ns.attr = expr, or the block form set x / endset.
  Status parse_set(Stmt& s) {
    GB_RETURN_IF_ERROR(parse_targets(s.targets, "set"));
    if (s.targets.size() == 1 && skip_op(".")) {
      GB_ASSIGN_OR_RETURN(s.attr, expect_name("an attribute name in 'set'"));
    }
    if (!skip_op("=")) {
      if (s.targets.size() != 1 || !s.attr.empty()) return unexpected("'=' in 'set'");
      s.kind = StmtKind::kSetBlock;
      GB_RETURN_IF_ERROR(expect_block_end("set"));
      return parse_body_to(s.body, "set", "endset", s.line);
    }
    s.kind = StmtKind::kSet;
    GB_ASSIGN_OR_RETURN(s.expr, parse_expression());
    if (is_op(",")) {  // set a, b = x, y
      std::vector<ExprPtr> items;
      items.push_back(std::move(s.expr));
      while (skip_op(",")) {
        GB_ASSIGN_OR_RETURN(ExprPtr item, parse_expression());
        items.push_back(std::move(item));
      }
      GB_ASSIGN_OR_RETURN(s.expr, make(ExprKind::kTuple, s.line, std::move(items)));
    }
    return expect_block_end("set");
  }

  // with a = x, b = y / endwith
  Status parse_with(Stmt& s) {
    s.kind = StmtKind::kWith;
    while (cur().type != TokenType::kBlockEnd) {
      if (!s.params.empty()) GB_RETURN_IF_ERROR(expect_op(","));
      GB_ASSIGN_OR_RETURN(std::string name, expect_name("a variable name in 'with'"));
      GB_RETURN_IF_ERROR(expect_op("="));
      GB_ASSIGN_OR_RETURN(ExprPtr value, parse_expression());
      s.params.emplace_back(std::move(name), std::move(value));
    }
    GB_RETURN_IF_ERROR(expect_block_end("with"));
    return parse_body_to(s.body, "with", "endwith", s.line);
  }

  // "a" or "a, b" or "(a, b)".
  Status parse_targets(std::vector<std::string>& targets, std::string_view tag) {
    const bool paren = skip_op("(");
    do {
      GB_ASSIGN_OR_RETURN(std::string name, expect_name("a variable name in '" + std::string(tag) + "'"));
      targets.push_back(std::move(name));
    } while (skip_op(","));
    if (paren) GB_RETURN_IF_ERROR(expect_op(")"));
    return Status::ok();
  }

  // "(a, b=default, ...)" for macros and call blocks.
  Status parse_params(std::vector<std::pair<std::string, ExprPtr>>& params) {
    GB_RETURN_IF_ERROR(expect_op("("));
    while (!is_op(")")) {
      if (!params.empty()) {
        GB_RETURN_IF_ERROR(expect_op(","));
        if (is_op(")")) break;
      }
      GB_ASSIGN_OR_RETURN(std::string name, expect_name("a parameter name"));
      ExprPtr def;
      if (skip_op("=")) {
        GB_ASSIGN_OR_RETURN(def, parse_expression());
      }
      params.emplace_back(std::move(name), std::move(def));
    }
    advance();  // )
    return Status::ok();
  }

  std::vector<Token> toks_;
  ParseLimits limits_;
  size_t pos_ = 0;
  int recursion_ = 0;
  int block_depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<std::unique_ptr<Program>> parse_template(std::string_view source, const ParseLimits& limits) {
  GB_ASSIGN_OR_RETURN(std::vector<Token> tokens, tokenize(source));
  return Parser(std::move(tokens), limits).run();
}

}  // namespace gb::chat
