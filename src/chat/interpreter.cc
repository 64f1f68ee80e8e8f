// Statement execution and expression evaluation with Jinja semantics: scoping (for/macro/with
// open a scope, if does not), Undefined, Python arithmetic and comparison, and the budgets that
// stop a hostile template from hanging the server or exhausting its stack.
#include "chat/interpreter.h"

#include <cmath>

namespace gb::chat {

struct Interpreter::DepthGuard {
  explicit DepthGuard(Interpreter& in) : in_(in) { ++in_.depth_; }
  ~DepthGuard() { --in_.depth_; }
  bool exceeded() const { return in_.depth_ > in_.limits_.max_depth; }
  Interpreter& in_;
};

namespace {

// Restores the interpreter's current scope on every exit path.
template <class T>
struct Restore {
  Restore(T& slot, T value) : slot_(slot), saved_(slot) { slot_ = value; }
  ~Restore() { slot_ = saved_; }
  T& slot_;
  T saved_;
};

bool is_intlike(const Value& v) { return v.is_int() || v.is_bool(); }
int64_t int_of(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); }

// a + b for strings. A left operand that nothing else references (the result of the previous
// `+` in a chain like 'x' + a + 'y' + b) is extended in place instead of copied, so chains cost
// O(total length) rather than O(length x terms).
Value concat(Value a, const std::string& b) {
  StringPtr p = a.str_ptr();
  a = Value();
  if (p.use_count() == 1) {
    const_cast<std::string&>(*p) += b;  // sole owner: no one can observe the mutation
    return Value(std::move(p));
  }
  std::string out;
  out.reserve(p->size() + b.size());
  out += *p;
  out += b;
  return Value(std::move(out));
}

Status undefined_error(const Value& v, int line) {
  if (v.undefined_name().empty()) return render_error(line, "value is undefined");
  return render_error(line, "'" + std::string(v.undefined_name()) + "' is undefined");
}

Status type_error(int line, const char* op, const Value& a, const Value& b) {
  return render_error(line, std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
                                type_name(b) + "'");
}

Result<bool> contains(const Value& container, const Value& item, int line) {
  switch (container.type()) {
    case Value::Type::kString:
      if (!item.is_string()) {
        return render_error(line, std::string("'in <string>' requires string as left operand, not ") + type_name(item));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Type::kList:
      for (const Value& v : container.items()) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case Value::Type::kDict: return item.is_string() && container.dict_ref().find(item.str()) != nullptr;
    case Value::Type::kUndefined: return false;
    default: return render_error(line, std::string("argument of type '") + type_name(container) + "' is not iterable");
  }
}

// Python slice semantics (slice.indices) over n elements.
std::vector<size_t> slice_indices(int64_t n, const Value& start_v, const Value& stop_v, const Value& step_v) {
  int64_t step = step_v.is_none() || step_v.is_undefined() ? 1 : int_of(step_v);
  std::vector<size_t> out;
  if (step == 0) return out;
  auto clamp = [&](const Value& v, int64_t def, bool neg_step) -> int64_t {
    if (v.is_none() || v.is_undefined()) return def;
    int64_t x = int_of(v);
    if (x < 0) x += n;
    if (neg_step) return std::max<int64_t>(-1, std::min<int64_t>(x, n - 1));
    return std::max<int64_t>(0, std::min<int64_t>(x, n));
  };
  if (step > 0) {
    const int64_t start = clamp(start_v, 0, false);
    const int64_t stop = clamp(stop_v, n, false);
    for (int64_t i = start; i < stop; i += step) out.push_back(static_cast<size_t>(i));
  } else {
    const int64_t start = clamp(start_v, n - 1, true);
    const int64_t stop = clamp(stop_v, -1, true);
    for (int64_t i = start; i > stop; i += step) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

}  // namespace

Status render_error(int line, const std::string& what) {
  return Status::error("chat template error at line " + std::to_string(line) + ": " + what);
}

// ---------------------------------------------------------------------------------------------
// Scopes and top level

const Value* Interpreter::Scope::find(std::string_view name) const {
  for (const auto& [k, v] : vars) {
    if (k == name) return &v;
  }
  return nullptr;
}

void Interpreter::Scope::set(const std::string& name, Value v) {
  for (auto& [k, old] : vars) {
    if (k == name) {
      old = std::move(v);
      return;
    }
  }
  vars.emplace_back(name, std::move(v));
}

Interpreter::~Interpreter() {
  // Namespaces are the only mutable values, so the only way to build a reference cycle.
  for (const DictPtr& ns : namespaces_) ns->items.clear();
}

std::time_t Interpreter::now() const { return now_ ? *now_ : std::time(nullptr); }

Status Interpreter::charge(int64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps) {
    return Status::error("chat template error: render budget exceeded (" + std::to_string(limits_.max_steps) +
                         " steps); the template loops too long");
  }
  return Status::ok();
}

Status Interpreter::check_size(size_t bytes) const {
  if (bytes > limits_.max_output_bytes) {
    return Status::error("chat template error: output exceeds " + std::to_string(limits_.max_output_bytes) + " bytes");
  }
  return Status::ok();
}

Result<std::string> Interpreter::render(const Program& program, const Value& globals) {
  Scope root;
  if (globals.is_dict()) {
    for (const auto& [k, v] : globals.dict_ref().items) root.vars.emplace_back(k, v);
  }
  scope_ = root_ = &root;
  out_.clear();
  Status st = exec_body(program.body);
  scope_ = root_ = nullptr;
  if (!st.is_ok()) return st;
  return std::move(out_);
}

Status Interpreter::output(const Value& v, int line) {
  if (v.is_string()) {
    GB_RETURN_IF_ERROR(check_size(out_.size() + v.str().size()));
    out_ += v.str();
    return Status::ok();
  }
  if (v.is_undefined()) return Status::ok();
  auto s = to_display_string(v, limits_.max_output_bytes);
  if (!s.is_ok()) return render_error(line, s.message());
  GB_RETURN_IF_ERROR(check_size(out_.size() + s->size()));
  out_ += *s;
  return Status::ok();
}

// ---------------------------------------------------------------------------------------------
// Statements

Status Interpreter::exec_body(const Body& body) {
  for (const StmtPtr& s : body) {
    GB_RETURN_IF_ERROR(exec(*s));
    if (flow_ != Flow::kNormal) return Status::ok();
  }
  return Status::ok();
}

Status Interpreter::exec(const Stmt& s) {
  DepthGuard guard(*this);
  if (guard.exceeded()) return render_error(s.line, "template recursion too deep");
  GB_RETURN_IF_ERROR(charge(1));
  switch (s.kind) {
    case StmtKind::kText:
      GB_RETURN_IF_ERROR(check_size(out_.size() + s.text.size()));
      out_ += s.text;
      return Status::ok();
    case StmtKind::kOutput: {
      GB_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
      return output(v, s.line);
    }
    case StmtKind::kIf: return exec_if(s);
    case StmtKind::kFor: return exec_for(s);
    case StmtKind::kSet: return exec_set(s);
    case StmtKind::kSetBlock: {
      GB_ASSIGN_OR_RETURN(std::string text, capture(s.body, *scope_));
      scope_->set(s.targets[0], Value(std::move(text)));
      return Status::ok();
    }
    case StmtKind::kMacro: return exec_macro_def(s);
    case StmtKind::kCallBlock: return exec_call_block(s);
    case StmtKind::kFilterBlock: return exec_filter_block(s);
    case StmtKind::kBreak: flow_ = Flow::kBreak; return Status::ok();
    case StmtKind::kContinue: flow_ = Flow::kContinue; return Status::ok();
    case StmtKind::kWith: return exec_with(s);
    case StmtKind::kBlock: return exec_body(s.body);
  }
  return Status::ok();
}

Status Interpreter::exec_if(const Stmt& s) {
  for (const auto& [cond, body] : s.branches) {
    GB_ASSIGN_OR_RETURN(Value c, eval(*cond));
    if (c.truthy()) return exec_body(body);
  }
  return exec_body(s.else_body);
}

Status Interpreter::assign_targets(Scope& scope, const std::vector<std::string>& targets, const Value& v, int line) {
  if (targets.size() == 1) {
    scope.set(targets[0], v);
    return Status::ok();
  }
  if (!v.is_list()) {
    return render_error(line, std::string("cannot unpack a '") + type_name(v) + "' into " +
                                  std::to_string(targets.size()) + " variables");
  }
  const auto& items = v.items();
  if (items.size() != targets.size()) {
    return render_error(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                                  std::to_string(targets.size()) + " variables");
  }
  for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
  return Status::ok();
}

Status Interpreter::exec_for(const Stmt& s) {
  GB_ASSIGN_OR_RETURN(Value seq, eval(*s.expr));
  GB_ASSIGN_OR_RETURN(std::vector<Value> items, iterate(seq, s.line));
  Scope loop_scope;
  loop_scope.parent = scope_;
  Restore<Scope*> restore(scope_, &loop_scope);
  if (s.cond) {  // `for x in xs if cond`: filtered before the loop, so loop.length counts kept items
    std::vector<Value> kept;
    for (Value& item : items) {
      GB_RETURN_IF_ERROR(charge(1));
      loop_scope.vars.clear();
      GB_RETURN_IF_ERROR(assign_targets(loop_scope, s.targets, item, s.line));
      GB_ASSIGN_OR_RETURN(Value keep, eval(*s.cond));
      if (keep.truthy()) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    GB_RETURN_IF_ERROR(charge(1));
    loop_scope.vars.clear();
    GB_RETURN_IF_ERROR(assign_targets(loop_scope, s.targets, items[i], s.line));
    auto loop = std::make_shared<ValueDict>();
    loop->items.reserve(11);
    loop->items.emplace_back("index", Value(i + 1));
    loop->items.emplace_back("index0", Value(i));
    loop->items.emplace_back("revindex", Value(n - i));
    loop->items.emplace_back("revindex0", Value(n - i - 1));
    loop->items.emplace_back("first", Value(i == 0));
    loop->items.emplace_back("last", Value(i == n - 1));
    loop->items.emplace_back("length", Value(n));
    loop->items.emplace_back("depth", Value(1));
    loop->items.emplace_back("depth0", Value(0));
    if (i > 0) loop->items.emplace_back("previtem", items[i - 1]);
    if (i + 1 < n) loop->items.emplace_back("nextitem", items[i + 1]);
    loop_scope.vars.emplace_back("loop", Value(std::move(loop)));
    GB_RETURN_IF_ERROR(exec_body(s.body));
    if (flow_ == Flow::kBreak) {
      flow_ = Flow::kNormal;
      break;
    }
    flow_ = Flow::kNormal;
  }
  if (n == 0 && !s.else_body.empty()) {
    loop_scope.vars.clear();
    return exec_body(s.else_body);
  }
  return Status::ok();
}

Status Interpreter::exec_set(const Stmt& s) {
  GB_ASSIGN_OR_RETURN(Value v, eval(*s.expr));
  if (s.attr.empty()) return assign_targets(*scope_, s.targets, v, s.line);
  const Value* target = nullptr;
  for (Scope* sc = scope_; sc != nullptr && target == nullptr; sc = sc->parent) target = sc->find(s.targets[0]);
  if (target == nullptr || !target->is_namespace()) {
    return render_error(s.line, "cannot assign attribute '" + s.attr + "' on '" + s.targets[0] +
                                    "': only namespace() objects can be modified");
  }
  target->dict_ptr()->set(s.attr, std::move(v));
  return Status::ok();
}

Result<std::string> Interpreter::capture(const Body& body, Scope& scope) {
  std::string saved;
  saved.swap(out_);
  Status st;
  {
    Restore<Scope*> restore(scope_, &scope);
    st = exec_body(body);
  }
  saved.swap(out_);
  if (!st.is_ok()) return st;
  return saved;
}

Status Interpreter::exec_macro_def(const Stmt& s) {
  const Stmt* macro = &s;
  auto fn = std::make_shared<Callable>();
  fn->name = s.name;
  fn->fn = [macro](Interpreter& in, CallArgs& args) { return in.call_macro(*macro, args, nullptr); };
  scope_->set(s.name, Value(CallablePtr(std::move(fn))));
  return Status::ok();
}

Result<Value> Interpreter::call_macro(const Stmt& macro, CallArgs& args, const Value* caller) {
  DepthGuard guard(*this);
  if (guard.exceeded()) return render_error(args.line, "macro recursion too deep in '" + macro.name + "'");
  // Macros see the template's top-level variables and their arguments, not the caller's locals.
  Scope ms;
  ms.parent = root_;
  Restore<Scope*> restore(scope_, &ms);
  const auto& params = macro.params;
  if (args.positional.size() > params.size()) {
    return render_error(args.line, "macro '" + macro.name + "' takes at most " + std::to_string(params.size()) +
                                       " argument(s), got " + std::to_string(args.positional.size()));
  }
  for (const auto& [key, value] : args.keyword) {
    if (key == "caller") {
      ms.set("caller", value);
      continue;
    }
    bool known = false;
    for (const auto& p : params) known = known || p.first == key;
    if (!known)
      return render_error(args.line, "macro '" + macro.name + "' has no parameter '" + std::string(key) + "'");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& [pname, def] = params[i];
    Value v = Undefined{pname};
    bool bound = false;
    if (i < args.positional.size()) {
      v = args.positional[i];
      bound = true;
    }
    for (const auto& [key, value] : args.keyword) {
      if (key == pname) {
        v = value;
        bound = true;
      }
    }
    if (!bound && def) {
      GB_ASSIGN_OR_RETURN(v, eval(*def));
    }
    ms.set(pname, std::move(v));
  }
  if (caller != nullptr) ms.set("caller", *caller);
  GB_ASSIGN_OR_RETURN(std::string text, capture(macro.body, ms));
  return Value(std::move(text));
}

Status Interpreter::exec_call_block(const Stmt& s) {
  const Expr& call_expr = *s.expr;
  GB_ASSIGN_OR_RETURN(Value callee, eval(*call_expr.args[0]));
  CallArgs args;
  args.line = s.line;
  GB_RETURN_IF_ERROR(eval_args(call_expr, 1, args));
  // caller() renders the block body in the scope of the {% call %}; it must not outlive it.
  auto alive = std::make_shared<bool>(true);
  Scope* block_scope = scope_;
  const Stmt* stmt = &s;
  auto fn = std::make_shared<Callable>();
  fn->name = "caller";
  fn->fn = [stmt, block_scope, alive](Interpreter& in, CallArgs& a) -> Result<Value> {
    if (!*alive) return render_error(a.line, "caller() used outside its {% call %} block");
    Scope cs;
    cs.parent = block_scope;
    for (size_t i = 0; i < stmt->params.size(); ++i) {
      Value v = i < a.positional.size() ? a.positional[i] : Value(Undefined{stmt->params[i].first});
      for (const auto& [key, value] : a.keyword) {
        if (key == stmt->params[i].first) v = value;
      }
      cs.set(stmt->params[i].first, std::move(v));
    }
    GB_ASSIGN_OR_RETURN(std::string text, in.capture(stmt->body, cs));
    return Value(std::move(text));
  };
  args.keyword.emplace_back("caller", Value(CallablePtr(std::move(fn))));
  auto result = call(callee, args, s.line);
  *alive = false;
  if (!result.is_ok()) return result.status();
  return output(*result, s.line);
}

Status Interpreter::exec_filter_block(const Stmt& s) {
  Scope fs;
  fs.parent = scope_;
  GB_ASSIGN_OR_RETURN(std::string text, capture(s.body, fs));
  const Value input(std::move(text));
  GB_ASSIGN_OR_RETURN(Value v, eval_filter(*s.expr, &input));
  return output(v, s.line);
}

Status Interpreter::exec_with(const Stmt& s) {
  Scope ws;
  ws.parent = scope_;
  for (const auto& [name, expr] : s.params) {
    GB_ASSIGN_OR_RETURN(Value v, eval(*expr));
    ws.set(name, std::move(v));
  }
  Restore<Scope*> restore(scope_, &ws);
  return exec_body(s.body);
}

// ---------------------------------------------------------------------------------------------
// Expressions

Result<Value> Interpreter::eval(const Expr& e) {
  DepthGuard guard(*this);
  if (guard.exceeded()) return render_error(e.line, "template recursion too deep");
  switch (e.kind) {
    case ExprKind::kLiteral: return e.literal;
    case ExprKind::kName: return eval_name(e);
    case ExprKind::kList:
    case ExprKind::kTuple:
    case ExprKind::kDict: return eval_collection(e);
    case ExprKind::kAttr: return eval_attr(e);
    case ExprKind::kItem: return eval_item(e);
    case ExprKind::kSlice: return eval_slice(e);
    case ExprKind::kCall: return eval_call(e);
    case ExprKind::kFilter: return eval_filter(e, nullptr);
    case ExprKind::kTest: return eval_test(e);
    case ExprKind::kNot: {
      GB_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
      return Value(!v.truthy());
    }
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      GB_ASSIGN_OR_RETURN(Value v, eval(*e.args[0]));
      if (v.is_float()) return Value(e.kind == ExprKind::kNeg ? -v.as_float() : v.as_float());
      if (is_intlike(v)) {
        const int64_t x = int_of(v);
        if (e.kind == ExprKind::kPos) return Value(x);
        if (x == INT64_MIN) return render_error(e.line, "integer overflow");
        return Value(-x);
      }
      if (v.is_undefined()) return undefined_error(v, e.line);
      return render_error(e.line, std::string("bad operand type for unary ") + (e.kind == ExprKind::kNeg ? "-" : "+") +
                                      ": '" + type_name(v) + "'");
    }
    case ExprKind::kBinary: return eval_binary(e);
    case ExprKind::kAnd: {
      GB_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
      if (!a.truthy()) return a;
      return eval(*e.args[1]);
    }
    case ExprKind::kOr: {
      GB_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
      if (a.truthy()) return a;
      return eval(*e.args[1]);
    }
    case ExprKind::kCompare: return eval_compare(e);
    case ExprKind::kCond: {
      GB_ASSIGN_OR_RETURN(Value c, eval(*e.args[1]));
      if (c.truthy()) return eval(*e.args[0]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value(Undefined{});
    }
  }
  return Value(Undefined{});
}

Result<Value> Interpreter::eval_name(const Expr& e) {
  for (Scope* sc = scope_; sc != nullptr; sc = sc->parent) {
    if (const Value* v = sc->find(e.name)) return *v;
  }
  if (const Value* g = find_global(e.name)) return *g;
  return Value(Undefined{e.name});
}

Result<Value> Interpreter::eval_collection(const Expr& e) {
  GB_RETURN_IF_ERROR(charge(static_cast<int64_t>(e.args.size())));
  if (e.kind == ExprKind::kDict) {
    auto d = std::make_shared<ValueDict>();
    for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
      GB_ASSIGN_OR_RETURN(Value k, eval(*e.args[i]));
      if (!k.is_string()) return render_error(e.line, std::string("dict keys must be strings, got ") + type_name(k));
      GB_ASSIGN_OR_RETURN(Value v, eval(*e.args[i + 1]));
      d->set(k.str(), std::move(v));
    }
    return Value(std::move(d));
  }
  std::vector<Value> items;
  items.reserve(e.args.size());
  for (const ExprPtr& a : e.args) {
    GB_ASSIGN_OR_RETURN(Value v, eval(*a));
    items.push_back(std::move(v));
  }
  if (e.kind == ExprKind::kTuple) return Value::tuple(std::move(items));
  return Value::list(std::move(items));
}

Result<Value> Interpreter::eval_attr(const Expr& e) {
  GB_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
  if (obj.is_undefined()) return undefined_error(obj, e.line);
  GB_ASSIGN_OR_RETURN(Value v, get_attr(obj, e.name, e.line));
  if (v.is_undefined()) return Value(Undefined{e.name});  // the AST owns the name
  return v;
}

Result<Value> Interpreter::eval_item(const Expr& e) {
  GB_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
  if (obj.is_undefined()) return undefined_error(obj, e.line);
  GB_ASSIGN_OR_RETURN(Value key, eval(*e.args[1]));
  return get_item(obj, key, e.line);
}

Result<Value> Interpreter::eval_slice(const Expr& e) {
  GB_ASSIGN_OR_RETURN(Value obj, eval(*e.args[0]));
  if (obj.is_undefined()) return undefined_error(obj, e.line);
  Value parts[3] = {Value::none(), Value::none(), Value::none()};
  for (int i = 0; i < 3; ++i) {
    if (!e.args[i + 1]) continue;
    GB_ASSIGN_OR_RETURN(parts[i], eval(*e.args[i + 1]));
    if (!parts[i].is_none() && !is_intlike(parts[i])) {
      return render_error(e.line, "slice indices must be integers or None");
    }
  }
  if (!parts[2].is_none() && int_of(parts[2]) == 0) return render_error(e.line, "slice step cannot be zero");
  if (obj.is_list()) {
    const auto& items = obj.items();
    std::vector<Value> out;
    for (size_t i : slice_indices(static_cast<int64_t>(items.size()), parts[0], parts[1], parts[2])) {
      out.push_back(items[i]);
    }
    GB_RETURN_IF_ERROR(charge(static_cast<int64_t>(out.size())));
    return Value::list(std::move(out));
  }
  if (obj.is_string()) {
    const std::string& s = obj.str();
    const std::vector<size_t> offsets = utf8_offsets(s);
    const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
    std::string out;
    for (size_t i : slice_indices(n, parts[0], parts[1], parts[2])) {
      out.append(s, offsets[i], offsets[i + 1] - offsets[i]);
    }
    return Value(std::move(out));
  }
  return render_error(e.line, std::string("'") + type_name(obj) + "' object is not subscriptable");
}

Status Interpreter::eval_args(const Expr& e, size_t first, CallArgs& out) {
  for (size_t i = first; i < e.args.size(); ++i) {
    GB_ASSIGN_OR_RETURN(Value v, eval(*e.args[i]));
    out.positional.push_back(std::move(v));
  }
  for (const auto& [key, expr] : e.kwargs) {
    GB_ASSIGN_OR_RETURN(Value v, eval(*expr));
    out.keyword.emplace_back(key, std::move(v));
  }
  return Status::ok();
}

Result<Value> Interpreter::call(const Value& fn, CallArgs& args, int line) {
  if (!fn.is_callable()) return render_error(line, std::string("'") + type_name(fn) + "' object is not callable");
  DepthGuard guard(*this);
  if (guard.exceeded()) return render_error(line, "template recursion too deep");
  GB_RETURN_IF_ERROR(charge(1));
  args.line = line;
  return fn.callable().fn(*this, args);
}

Result<Value> Interpreter::eval_call(const Expr& e) {
  const Expr& callee = *e.args[0];
  CallArgs args;
  args.line = e.line;
  if (callee.kind == ExprKind::kAttr) {
    GB_ASSIGN_OR_RETURN(Value obj, eval(*callee.args[0]));
    if (obj.is_undefined()) return undefined_error(obj, e.line);
    GB_RETURN_IF_ERROR(eval_args(e, 1, args));
    if ((obj.is_string() || obj.is_list() || (obj.is_dict() && !obj.is_namespace())) && is_known_method(callee.name)) {
      GB_RETURN_IF_ERROR(charge(1));
      return call_method(*this, obj, callee.name, args, e.line);
    }
    GB_ASSIGN_OR_RETURN(Value fn, get_attr(obj, callee.name, e.line));
    if (!fn.is_callable()) {
      return render_error(e.line, std::string("'") + type_name(obj) + "' object has no method '" + callee.name + "'");
    }
    return call(fn, args, e.line);
  }
  GB_ASSIGN_OR_RETURN(Value fn, eval(callee));
  if (fn.is_undefined() && callee.kind == ExprKind::kName) {
    return render_error(e.line, "unknown function '" + callee.name + "'");
  }
  GB_RETURN_IF_ERROR(eval_args(e, 1, args));
  return call(fn, args, e.line);
}

Result<Value> Interpreter::eval_filter(const Expr& e, const Value* input) {
  Value in;
  const Expr* src = e.args[0].get();
  if (src == nullptr) {
    in = *input;
  } else if (input != nullptr && src->kind == ExprKind::kFilter) {
    GB_ASSIGN_OR_RETURN(in, eval_filter(*src, input));
  } else {
    GB_ASSIGN_OR_RETURN(in, eval(*src));
  }
  CallArgs args;
  args.line = e.line;
  GB_RETURN_IF_ERROR(eval_args(e, 1, args));
  GB_RETURN_IF_ERROR(charge(1));
  auto r = e.filter(*this, in, args);
  if (!r.is_ok() && r.message().rfind("chat template", 0) != 0) {
    return render_error(e.line, "filter '" + e.name + "': " + r.message());
  }
  return r;
}

Result<Value> Interpreter::eval_test(const Expr& e) {
  GB_ASSIGN_OR_RETURN(Value in, eval(*e.args[0]));
  CallArgs args;
  args.line = e.line;
  GB_RETURN_IF_ERROR(eval_args(e, 1, args));
  auto r = e.test(*this, in, args);
  if (!r.is_ok()) {
    if (r.message().rfind("chat template", 0) == 0) return r.status();
    return render_error(e.line, "test '" + e.name + "': " + r.message());
  }
  return Value(*r != e.negated);
}

namespace {

Result<Value> binary_sub(const Value& a, const Value& b, int line) {
  if (is_intlike(a) && is_intlike(b)) {
    int64_t r;
    if (__builtin_sub_overflow(int_of(a), int_of(b), &r)) return render_error(line, "integer overflow");
    return Value(r);
  }
  if (a.is_number() && b.is_number()) return Value(a.to_double() - b.to_double());
  return type_error(line, "-", a, b);
}

Result<Value> binary_div(const Value& a, const Value& b, int line) {
  if (!(a.is_number() && b.is_number())) return type_error(line, "/", a, b);
  if (b.to_double() == 0.0) return render_error(line, "division by zero");
  return Value(a.to_double() / b.to_double());
}

// `//` and `%`, flooring toward negative infinity as Python does.
Result<Value> binary_floor_div_mod(BinOp op, const Value& a, const Value& b, int line) {
  if (a.is_string() && op == BinOp::kMod) {
    return render_error(line, "unsupported construct: '%' string formatting (use '~' or format())");
  }
  if (!(a.is_number() && b.is_number())) return type_error(line, op == BinOp::kMod ? "%" : "//", a, b);
  if (b.to_double() == 0.0) return render_error(line, "division by zero");
  if (is_intlike(a) && is_intlike(b)) {
    const int64_t x = int_of(a);
    const int64_t y = int_of(b);
    if (x == INT64_MIN && y == -1) return render_error(line, "integer overflow");
    int64_t q = x / y;
    int64_t r = x % y;
    if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors toward negative infinity
      --q;
      r += y;
    }
    return Value(op == BinOp::kMod ? r : q);
  }
  const double x = a.to_double();
  const double y = b.to_double();
  const double q = std::floor(x / y);
  if (op == BinOp::kFloorDiv) return Value(q);
  double r = std::fmod(x, y);
  if (r != 0 && ((r < 0) != (y < 0))) r += y;
  return Value(r);
}

Result<Value> binary_pow(const Value& a, const Value& b, int line) {
  if (!(a.is_number() && b.is_number())) return type_error(line, "**", a, b);
  if (is_intlike(a) && is_intlike(b) && int_of(b) >= 0) {
    int64_t base = int_of(a);
    int64_t exp = int_of(b);
    int64_t r = 1;
    while (exp > 0) {  // square-and-multiply: at most 63 rounds before overflow
      if (exp & 1) {
        if (__builtin_mul_overflow(r, base, &r)) return render_error(line, "integer overflow");
      }
      exp >>= 1;
      if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return render_error(line, "integer overflow");
    }
    return Value(r);
  }
  if (a.to_double() == 0.0 && b.to_double() < 0) return render_error(line, "0.0 cannot be raised to a negative power");
  return Value(std::pow(a.to_double(), b.to_double()));
}

}  // namespace

// `~`: both sides as strings.
Result<Value> Interpreter::binary_concat(Value a, const Value& b, int line) {
  auto sa = to_display_string(a, limits_.max_output_bytes);
  if (!sa.is_ok()) return render_error(line, sa.message());
  auto sb = to_display_string(b, limits_.max_output_bytes);
  if (!sb.is_ok()) return render_error(line, sb.message());
  GB_RETURN_IF_ERROR(check_size(sa->size() + sb->size()));
  if (a.is_string()) return concat(std::move(a), *sb);
  return Value(*sa + *sb);
}

Result<Value> Interpreter::binary_add(Value a, const Value& b, int line) {
  if (is_intlike(a) && is_intlike(b)) {
    int64_t r;
    if (__builtin_add_overflow(int_of(a), int_of(b), &r)) return render_error(line, "integer overflow");
    return Value(r);
  }
  if (a.is_number() && b.is_number()) return Value(a.to_double() + b.to_double());
  if (a.is_string() && b.is_string()) {
    GB_RETURN_IF_ERROR(check_size(a.str().size() + b.str().size()));
    return concat(std::move(a), b.str());
  }
  if (a.is_list() && b.is_list()) {
    std::vector<Value> items = a.items();
    items.insert(items.end(), b.items().begin(), b.items().end());
    GB_RETURN_IF_ERROR(charge(static_cast<int64_t>(items.size())));
    return Value::list(std::move(items));
  }
  return type_error(line, "+", a, b);
}

// Numbers multiply; a string or list times an integer repeats, within the size and step budgets.
Result<Value> Interpreter::binary_mul(const Value& a, const Value& b, int line) {
  if (is_intlike(a) && is_intlike(b)) {
    int64_t r;
    if (__builtin_mul_overflow(int_of(a), int_of(b), &r)) return render_error(line, "integer overflow");
    return Value(r);
  }
  if (a.is_number() && b.is_number()) return Value(a.to_double() * b.to_double());
  const Value* seq = a.is_string() || a.is_list() ? &a : &b;
  const Value* count = seq == &a ? &b : &a;
  if (!(seq->is_string() || seq->is_list()) || !is_intlike(*count)) return type_error(line, "*", a, b);
  const int64_t n = std::max<int64_t>(0, int_of(*count));
  if (seq->is_string()) {
    const size_t len = seq->str().size();
    if (len > 0 && static_cast<uint64_t>(n) > max_bytes() / len) return check_size(max_bytes() + 1);
    std::string out;
    out.reserve(len * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += seq->str();
    return Value(std::move(out));
  }
  const size_t len = seq->items().size();
  if (len > 0 && static_cast<uint64_t>(n) > static_cast<uint64_t>(limits_.max_steps) / len) {
    return charge(limits_.max_steps + 1);
  }
  GB_RETURN_IF_ERROR(charge(static_cast<int64_t>(len) * n));
  std::vector<Value> out;
  out.reserve(len * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq->items().begin(), seq->items().end());
  return Value::list(std::move(out));
}

Result<Value> Interpreter::eval_binary(const Expr& e) {
  GB_ASSIGN_OR_RETURN(Value a, eval(*e.args[0]));
  GB_ASSIGN_OR_RETURN(Value b, eval(*e.args[1]));
  const int line = e.line;
  if (e.bin_op == BinOp::kConcat) return binary_concat(std::move(a), b, line);
  if (a.is_undefined()) return undefined_error(a, line);
  if (b.is_undefined()) return undefined_error(b, line);
  switch (e.bin_op) {
    case BinOp::kAdd: return binary_add(std::move(a), b, line);
    case BinOp::kSub: return binary_sub(a, b, line);
    case BinOp::kMul: return binary_mul(a, b, line);
    case BinOp::kDiv: return binary_div(a, b, line);
    case BinOp::kFloorDiv:
    case BinOp::kMod: return binary_floor_div_mod(e.bin_op, a, b, line);
    case BinOp::kPow: return binary_pow(a, b, line);
    case BinOp::kConcat: break;
  }
  return type_error(line, "?", a, b);
}

Result<Value> Interpreter::eval_compare(const Expr& e) {
  GB_ASSIGN_OR_RETURN(Value lhs, eval(*e.args[0]));
  for (size_t i = 0; i < e.cmp_ops.size(); ++i) {
    GB_ASSIGN_OR_RETURN(Value rhs, eval(*e.args[i + 1]));
    bool r = false;
    switch (e.cmp_ops[i]) {
      case CmpOp::kEq: r = values_equal(lhs, rhs); break;
      case CmpOp::kNe: r = !values_equal(lhs, rhs); break;
      case CmpOp::kLt:
      case CmpOp::kGe:
      case CmpOp::kGt:
      case CmpOp::kLe: {
        const bool swap = e.cmp_ops[i] == CmpOp::kGt || e.cmp_ops[i] == CmpOp::kLe;
        auto less = swap ? value_less(rhs, lhs) : value_less(lhs, rhs);
        if (!less.is_ok()) return render_error(e.line, less.message());
        r = (e.cmp_ops[i] == CmpOp::kLt || e.cmp_ops[i] == CmpOp::kGt) ? *less : !*less;
        break;
      }
      case CmpOp::kIn:
      case CmpOp::kNotIn: {
        GB_ASSIGN_OR_RETURN(bool c, contains(rhs, lhs, e.line));
        r = (e.cmp_ops[i] == CmpOp::kIn) == c;
        break;
      }
    }
    if (!r) return Value(false);
    lhs = std::move(rhs);
  }
  return Value(true);
}

// ---------------------------------------------------------------------------------------------
// Lookup helpers

Result<Value> get_attr(const Value& obj, std::string_view name, int line) {
  if (obj.is_undefined()) return undefined_error(obj, line);
  if (obj.is_dict()) {
    if (const Value* v = obj.dict_ref().find(name)) return *v;
  }
  return Value(Undefined{});
}

Result<Value> get_item(const Value& obj, const Value& key, int line) {
  switch (obj.type()) {
    case Value::Type::kUndefined: return undefined_error(obj, line);
    case Value::Type::kDict:
      if (key.is_string()) {
        if (const Value* v = obj.dict_ref().find(key.str())) return *v;
      }
      return Value(Undefined{});
    case Value::Type::kList: {
      if (!is_intlike(key)) return Value(Undefined{});
      const auto& items = obj.items();
      int64_t i = int_of(key);
      if (i < 0) i += static_cast<int64_t>(items.size());
      if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value(Undefined{});
      return items[static_cast<size_t>(i)];
    }
    case Value::Type::kString: {
      if (!is_intlike(key)) return Value(Undefined{});
      const std::vector<size_t> offsets = utf8_offsets(obj.str());
      const int64_t n = static_cast<int64_t>(offsets.size()) - 1;
      int64_t i = int_of(key);
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value(Undefined{});
      return Value(obj.str().substr(offsets[i], offsets[i + 1] - offsets[i]));
    }
    default: return Value(Undefined{});
  }
}

Result<std::vector<Value>> iterate(const Value& v, int line) {
  switch (v.type()) {
    case Value::Type::kUndefined: return std::vector<Value>{};
    case Value::Type::kList: return v.items();
    case Value::Type::kDict: {
      if (v.is_namespace()) return render_error(line, "'Namespace' object is not iterable");
      std::vector<Value> keys;
      keys.reserve(v.dict_ref().items.size());
      for (const auto& [k, item] : v.dict_ref().items) keys.emplace_back(k);
      return keys;
    }
    case Value::Type::kString: {
      const std::string& s = v.str();
      const std::vector<size_t> offsets = utf8_offsets(s);
      std::vector<Value> chars;
      chars.reserve(offsets.size());
      for (size_t i = 0; i + 1 < offsets.size(); ++i)
        chars.emplace_back(s.substr(offsets[i], offsets[i + 1] - offsets[i]));
      return chars;
    }
    default: return render_error(line, std::string("'") + type_name(v) + "' object is not iterable");
  }
}

}  // namespace gb::chat
