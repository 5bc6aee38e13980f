// Aligned allocation and packed layers.
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels {

void* aligned_zeroed_alloc(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  constexpr std::size_t kAlign = 64;
  constexpr std::size_t kHuge = std::size_t{2} << 20;
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  void* p = nullptr;
  if (rounded >= kHuge) {
    // 2 MiB alignment lets the kernel back the block with transparent huge pages.
    p = std::aligned_alloc(kHuge, (rounded + kHuge - 1) / kHuge * kHuge);
    if (p) madvise(p, rounded, MADV_HUGEPAGE);
  } else {
    p = std::aligned_alloc(kAlign, rounded);
  }
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, rounded);
  return p;
}

void aligned_free(void* p, std::size_t) noexcept { std::free(p); }

PackedLinear::PackedLinear(const float* weight, const float* bias, int out, int in)
    : in_(in), out_(out), out_pad_(static_cast<int>(round_up(out, kPad))) {
  wt_.resize(static_cast<std::size_t>(std::max(in, 1)) * out_pad_);
  bias_.resize(out_pad_);
  for (int o = 0; o < out; ++o) {
    for (int i = 0; i < in; ++i) wt_[static_cast<std::size_t>(i) * out_pad_ + o] = weight[static_cast<std::size_t>(o) * in + i];
    bias_[o] = bias ? bias[o] : 0.0f;
  }
}

}  // namespace surrogate::kernels
