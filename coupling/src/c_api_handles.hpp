// Private to the C API sources (c_api.cpp, c_api_vtk.cpp): the Surrogate handle, which the VTK functions
// reach too, and the calling thread's last error message that surrogate_last_error() returns.
#pragma once

#include <string>

#include "surrogate/surrogate.hpp"

struct surrogate_handle_s {
  surrogate::Surrogate object;
};

namespace surrogate::c_api {
/// Message of the calling thread's last failed C call, shared by every C API source file.
inline thread_local std::string last_error;
}  // namespace surrogate::c_api
