// Errors as values: a status code from the public enum plus a detail string.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "ssd/ssd.h"

namespace ssd {

struct Status {
  ssd_status code = SSD_OK;
  std::string detail;

  bool ok() const { return code == SSD_OK; }
  static Status Ok() { return {}; }
};

inline Status make_error(ssd_status code, std::string detail) { return Status{code, std::move(detail)}; }

// A value or an error. Access value() only when ok().
template <class T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}  // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace ssd

// Evaluates `expr` (a Status) and returns it from the enclosing function when it is an error.
#define SSD_RETURN_IF_ERROR(expr)        \
  do {                                   \
    ::ssd::Status ssd_status_ = (expr);  \
    if (!ssd_status_.ok()) return ssd_status_; \
  } while (0)

// Evaluates `expr` (a Result<T>): on an error returns its status from the enclosing function (which
// returns a Status or any Result), else moves the value into `lhs`, an existing variable or member:
//   Options o;
//   SSD_ASSIGN_OR_RETURN(o.mode, parse_mode(text));
// One statement, so it is safe as the body of an unbraced if/else.
#define SSD_ASSIGN_OR_RETURN(lhs, expr) \
  do {                                  \
    auto r_ = (expr);                   \
    if (!r_.ok()) return r_.status();   \
    lhs = std::move(r_).value();        \
  } while (0)
