// Private to the C API sources (c_api.cpp, c_api_vtk.cpp): the Surrogate handle, which the VTK functions
// reach too, and the calling thread's last error message that surrogate_last_error() returns.
#pragma once

#include <string>

#include "surrogate.h"
#include "surrogate/surrogate.hpp"

struct surrogate_handle_s {
  surrogate::Surrogate object;
};

namespace surrogate::c_api {
/// Message of the calling thread's last failed C call, shared by every C API source file.
inline thread_local std::string last_error;

/// Runs `body`, turning any exception into its status code and the thread's last error message.
template <class F>
int guarded(F&& body) {
  try {
    body();
    return SURROGATE_OK;
  } catch (...) {
    const Status status = Status::from_current_exception();
    last_error = status.message;
    return static_cast<int>(status.code);
  }
}

/// Records `message` as the last error and returns `code`.
inline int fail(int code, const std::string& message) {
  last_error = message;
  return code;
}
}  // namespace surrogate::c_api
