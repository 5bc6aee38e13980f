// Complaints about a model file's contents name the file, once (share/docs/reliability.md, promise 15):
// the families and the attribute readers report the attribute or tensor, the entry points add the file.
#pragma once

#include <string>

#include "surrogate/error.hpp"
#include "surrogate/model_file.hpp"

namespace surrogate::detail {

/// Runs `step`; an Error(format) or Error(weights) it throws that does not already name `file` is thrown
/// again with "'<path>': " in front.
template <class F>
decltype(auto) naming_the_file(const ModelFile& file, F&& step) {
  try {
    return step();
  } catch (const Error& e) {
    const std::string what = e.what();
    if ((e.code() != ErrorCode::format && e.code() != ErrorCode::weights) || file.path.empty() ||
        what.find(file.path) != std::string::npos)
      throw;
    throw Error(e.code(), "'" + file.path + "': " + what);
  }
}

}  // namespace surrogate::detail
