// Errors as values.
//
// Inside the library every fallible function returns `Result<T>` (a
// std::expected) or `Status` (Result<void>). Exceptions are used only at the
// boundaries: the CLI's main() and the Python binding turn an `Error` into an
// exit code or a Python exception. `Error::message` is written for the user and
// names the place, e.g. "ops[12].accesses[3].storage: undeclared storage 77".
#pragma once

#include <expected>
#include <stdexcept>
#include <string>
#include <utility>

namespace hyperoffload {

enum class ErrorCode {
  kInvalidInput,        // malformed or inconsistent input (a file, a trace, an option)
  kInvalidArgument,     // a caller broke an API precondition
  kNotFound,            // a named thing (file, storage, planner) does not exist
  kIo,                  // reading or writing a file failed
  kOutOfMemory,         // a device arena or host pool could not satisfy a request
  kFailedPrecondition,  // the operation is not valid in the current state
  kDiverged,            // a replayed step does not match the recorded one
  kInternal,            // a bug in hyperoffload
};

// Short lower-case name of a code, for messages ("invalid input").
const char* to_string(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string message;
};

template <class T>
using Result = std::expected<T, Error>;
using Status = std::expected<void, Error>;

inline std::unexpected<Error> make_error(ErrorCode code, std::string message) {
  return std::unexpected<Error>(Error{code, std::move(message)});
}
inline Status ok_status() { return {}; }

// The exception the boundaries throw; carries the code so main() can pick an exit
// status and the Python binding an exception type.
class HyperoffloadError : public std::runtime_error {
 public:
  explicit HyperoffloadError(Error error)
      : std::runtime_error(error.message), code_(error.code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

// Boundary helper: returns the value or throws HyperoffloadError.
template <class T>
T value_or_throw(Result<T> result) {
  if (!result) throw HyperoffloadError(std::move(result.error()));
  return std::move(*result);
}
inline void value_or_throw(Status status) {
  if (!status) throw HyperoffloadError(std::move(status.error()));
}

}  // namespace hyperoffload

// Early-return helpers for functions returning Result<T> or Status.
//   HO_RETURN_IF_ERROR(status_expr);
//   HO_ASSIGN_OR_RETURN(lhs, result_expr);   // lhs = *result, or return its error
#define HO_INTERNAL_CONCAT2(a, b) a##b
#define HO_INTERNAL_CONCAT(a, b) HO_INTERNAL_CONCAT2(a, b)
#define HO_RETURN_IF_ERROR(expr)                                     \
  do {                                                               \
    if (auto ho_status_ = (expr); !ho_status_) {                     \
      return std::unexpected(std::move(ho_status_.error()));         \
    }                                                                \
  } while (false)
#define HO_ASSIGN_OR_RETURN(lhs, expr) \
  HO_INTERNAL_ASSIGN_OR_RETURN(HO_INTERNAL_CONCAT(ho_result_, __LINE__), lhs, expr)
#define HO_INTERNAL_ASSIGN_OR_RETURN(tmp, lhs, expr)          \
  auto tmp = (expr);                                          \
  if (!tmp) return std::unexpected(std::move(tmp.error())); \
  lhs = std::move(*tmp)
