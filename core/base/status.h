// Status and Result<T>: how everything in memwall that can fail at run time reports it.
//
// A Status is a code plus a one-line, human-readable message that already carries its context
// (file, key, value, offset, tensor). Libraries return Status/Result and never exit(); the CLI maps
// codes to exit codes (kInvalidArgument/kNotFound -> 2, everything else -> 1).
// MW_CHECK is for invariants only: it is active in every build type and aborts with file:line.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace memwall {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad input: a config value, a flag, an inconsistent combination
  kNotFound,            // a file or named scenario that does not exist
  kIoError,             // read/write/open failed (errno text in the message)
  kOutOfMemory,         // a plan or allocation does not fit a tier
  kFailedPrecondition,  // the operation is not valid in the current state
  kUnavailable,         // an optional capability is missing (no GPU, no io_uring)
  kInternal,            // a bug: should not happen
};

const char* status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  static Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
  static Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
  static Status io_error(std::string m) { return {StatusCode::kIoError, std::move(m)}; }
  static Status out_of_memory(std::string m) { return {StatusCode::kOutOfMemory, std::move(m)}; }
  static Status failed_precondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
  static Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
  static Status internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: <message>", or "ok".
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {
    if (status_.is_ok()) status_ = Status::internal("Result constructed from an ok Status");
  }

  bool is_ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

[[noreturn]] void check_failed(const char* file, int line, const char* condition, const std::string& message);

}  // namespace memwall

// Always-on invariant check (never for I/O or user input: those return Status).
#define MW_CHECK(cond, msg)                                                 \
  do {                                                                      \
    if (!(cond)) ::memwall::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

// Propagate a non-ok Status from an expression returning Status.
#define MW_RETURN_IF_ERROR(expr)                \
  do {                                          \
    ::memwall::Status mw_status_ = (expr);      \
    if (!mw_status_.is_ok()) return mw_status_; \
  } while (0)
