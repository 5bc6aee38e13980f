// The weights of Sequoia's networks (Network::Impl): program.hpp's layers as HostOps', run by the CPU
// forward (network.cpp) and converted to CudaOps' by the CUDA forward (cuda/forward.cpp).
// share/docs/sequoia.md, "Code layout".
#pragma once

#include "program.hpp"
#include "surrogate/kernels/block_plan.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {

struct Network::Impl {
  Config cfg;
  program::Layers<ops::HostOps> layers;
  mutable kernels::BlockPlan work_blocks;  // the CPU forward's large arrays, replayed from the second forward
};

}  // namespace surrogate::sequoia
