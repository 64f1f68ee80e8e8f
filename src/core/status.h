// Status and Result<T>: how fallible I/O and parsing report errors. No exception crosses a
// module boundary; a message says what failed and what the user can do about it.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace gb {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status ok() { return Status(); }
  static Status error(std::string message) {
    Status s;
    s.failed_ = true;
    s.message_ = std::move(message);
    return s;
  }

  bool is_ok() const { return !failed_; }
  explicit operator bool() const { return !failed_; }
  const std::string& message() const { return message_; }

  // Prefixes context ("loading model.safetensors: ") to an error; a no-op on success.
  Status with_context(const std::string& context) const {
    if (!failed_) return *this;
    return error(context + ": " + message_);
  }

 private:
  bool failed_ = false;
  std::string message_;
};

template <class T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) { assert(!std::get<Status>(v_).is_ok()); }  // NOLINT

  bool is_ok() const { return v_.index() == 0; }
  explicit operator bool() const { return is_ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  Status status() const { return is_ok() ? Status::ok() : std::get<1>(v_); }
  const std::string& message() const {
    static const std::string empty;
    return is_ok() ? empty : std::get<1>(v_).message();
  }

 private:
  std::variant<T, Status> v_;
};

}  // namespace gb

// Propagates an error Status / Result from the current function.
#define GB_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::gb::Status gb_status_ = (expr);           \
    if (!gb_status_.is_ok()) return gb_status_; \
  } while (0)

#define GB_CONCAT_INNER(a, b) a##b
#define GB_CONCAT(a, b) GB_CONCAT_INNER(a, b)
#define GB_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.is_ok()) return tmp.status();         \
  lhs = std::move(tmp).value()
// GB_ASSIGN_OR_RETURN(auto x, make_x()); — assigns the value or returns the error.
#define GB_ASSIGN_OR_RETURN(lhs, expr) GB_ASSIGN_OR_RETURN_IMPL(GB_CONCAT(gb_result_, __LINE__), lhs, expr)
