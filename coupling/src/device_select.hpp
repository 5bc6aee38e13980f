// Maps an Options::device string to the CUDA device a rank uses (-1: the CPU).
#pragma once

#include <string>

#include "surrogate/mpi_comm.hpp"

namespace surrogate::detail {

/// "cpu" -> -1; "cuda" -> the node-local rank modulo the visible devices; "cuda:N" -> N. Local (no
/// collective calls); throws Error(unsupported) for CUDA in builds without it or when no device is
/// visible, Error(invalid_argument) for malformed strings.
int select_device(const std::string& device, const MpiComm& comm);

}  // namespace surrogate::detail
