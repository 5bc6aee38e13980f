#include "surrogate/error.hpp"

#include <exception>
#include <new>
#include <stdexcept>
#include <string>

namespace surrogate {

const char* to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::ok: return "ok";
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::io: return "I/O error";
    case ErrorCode::format: return "invalid model or data file";
    case ErrorCode::weights: return "invalid weights";
    case ErrorCode::input: return "invalid input";
    case ErrorCode::unsupported: return "unsupported";
    case ErrorCode::communication: return "communication error";
    case ErrorCode::out_of_memory: return "out of memory";
    case ErrorCode::internal: return "internal error";
  }
  return "unknown error";
}

Status Status::from_current_exception() noexcept {
  try {
    throw;
  } catch (const Error& e) {
    return {e.code(), e.what()};
  } catch (const std::bad_array_new_length&) {
    return {ErrorCode::out_of_memory, "out of memory: a requested array size is too large to allocate"};
  } catch (const std::bad_alloc&) {
    return {ErrorCode::out_of_memory,
            "out of memory: an allocation failed (the model, the points or the batch need more memory than this "
            "process can get)"};
  } catch (const std::length_error&) {
    return {ErrorCode::out_of_memory, "out of memory: a requested size exceeds what a container can hold"};
  } catch (const std::exception& e) {
    return {ErrorCode::internal, std::string("internal error (please report): ") + e.what()};
  } catch (...) {
    return {ErrorCode::internal, "unknown exception"};
  }
}

void Status::raise() const { throw Error(code == ErrorCode::ok ? ErrorCode::internal : code, message); }

}  // namespace surrogate
