// Errors: exceptions inside C++ (surrogate::Error, with a code), status values at the boundaries.
#pragma once

#include <stdexcept>
#include <string>

namespace surrogate {

/// Stable numeric codes; the C and Fortran interfaces return them (0 is success).
enum class ErrorCode : int {
  ok = 0,
  invalid_argument = 1,  // a caller's argument is wrong (count, dimension, option value)
  io = 2,                // file missing, unreadable, not HDF5, truncated
  format = 3,            // the file is HDF5 but not a valid surrogate file (version, attribute, config)
  weights = 4,           // missing, unexpected or mis-shaped tensors; non-finite weights
  input = 5,             // bad input data: NaN/Inf, wrong channel count, inconsistent lengths, no points
  unsupported = 6,       // valid request this build or device cannot serve
  communication = 7,     // MPI/NCCL failure or ranks that disagree
  out_of_memory = 8,
  internal = 9,          // a bug: please report
};

const char* to_string(ErrorCode code) noexcept;

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

/// The outcome of an operation, as exchanged between ranks and returned by the C API.
struct Status {
  ErrorCode code = ErrorCode::ok;
  std::string message;
  bool ok() const noexcept { return code == ErrorCode::ok; }
  static Status from_current_exception() noexcept;  // call inside a catch block
  [[noreturn]] void raise() const;
};

}  // namespace surrogate
