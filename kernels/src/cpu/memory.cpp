// Aligned allocation and packed layers.
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "huge_blocks.hpp"
#include "surrogate/kernels/block_plan.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels {

namespace detail {

namespace {
constexpr std::size_t kAlign = 64;
constexpr std::size_t kHuge = kHugeBytes;
}  // namespace

std::size_t block_bytes(std::size_t bytes) {
  const std::size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
  return rounded >= kHuge ? (rounded + kHuge - 1) / kHuge * kHuge : rounded;
}

// A 2 MiB aligned anonymous mapping of `bytes` (a multiple of 2 MiB), zero-filled by the kernel. Large
// blocks bypass malloc so that freeing one always returns its memory to the system, whatever the
// process's malloc settings: a library loaded into the process can switch off malloc's use of mmap and
// the trimming of its heap (Debian's libsuperlu_dist.so.8, which libpetsc_real.so.3.18 pulls in, calls
// mallopt(M_MMAP_MAX, 0) and mallopt(M_TRIM_THRESHOLD, -1) when it is loaded), and then every large
// block lands on the brk heap and the heap never shrinks (share/docs/balltree.md, "Memory per rank").
void* map_huge_aligned(std::size_t bytes) {
  const std::size_t span = bytes + kHuge;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto begin = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (begin + kHuge - 1) & ~(std::uintptr_t{kHuge} - 1);
  if (aligned > begin) munmap(raw, aligned - begin);
  const std::uintptr_t end = aligned + bytes;
  if (begin + span > end) munmap(reinterpret_cast<void*>(end), begin + span - end);
  void* p = reinterpret_cast<void*>(aligned);
  // 2 MiB alignment lets the kernel back the block with transparent huge pages.
  madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

}  // namespace detail

using detail::block_bytes;
using detail::kAlign;
using detail::kHuge;
using detail::map_huge_aligned;

void* aligned_zeroed_alloc(std::size_t bytes) {
  if (bytes == 0) return nullptr;
  const std::size_t size = block_bytes(bytes);
  if (size >= kHuge) {
    void* p = map_huge_aligned(size);
    if (!p) throw std::bad_alloc();
    return p;  // fresh anonymous pages read as zero
  }
  void* p = std::aligned_alloc(kAlign, size);
  if (!p) throw std::bad_alloc();
  std::memset(p, 0, size);
  return p;
}

void* aligned_uninitialised_alloc(std::size_t bytes) {
  const std::size_t size = block_bytes(bytes);
  if (size < kHuge) return aligned_zeroed_alloc(bytes);
  if (void* planned = detail::planned_alloc(size)) return planned;
  void* p = map_huge_aligned(size);
  if (!p) throw std::bad_alloc();
  detail::planned_note_fresh(p, size);
  return p;
}

void aligned_free(void* p, std::size_t bytes) noexcept {
  if (!p) return;
  const std::size_t size = block_bytes(bytes);
  if (size >= kHuge) {
    if (!detail::planned_free(p)) munmap(p, size);
  } else {
    std::free(p);
  }
}

struct PackedLinear::Bf16Copy {
  std::once_flag packed;
  AlignedBuffer<std::uint16_t> wt;
};

namespace {
/// BF16 nearest even of a float's bit pattern (NaN stays a quiet NaN), as the CUDA kernels round.
std::uint16_t bf16_bits(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x0040u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
}  // namespace

const std::uint16_t* PackedLinear::wt_bf16() const {
  if (!bf16_) return nullptr;
  std::call_once(bf16_->packed, [this] {
    const int pad = in_bf16_pad();
    AlignedBuffer<std::uint16_t> wt(static_cast<std::size_t>(pad) * out_pad_);  // zeroed: rows in()..pad
    for (int k = 0; k < in_; ++k)
      for (int o = 0; o < out_pad_; ++o)
        wt[(static_cast<std::size_t>(k / 2) * out_pad_ + o) * 2 + k % 2] =
            bf16_bits(wt_[static_cast<std::size_t>(k) * out_pad_ + o]);
    bf16_->wt = std::move(wt);
  });
  return bf16_->wt.data();
}

PackedLinear::PackedLinear(const float* weight, const float* bias, int out, int in)
    : in_(in),
      out_(out),
      out_pad_(static_cast<int>(round_up(out, kPad))),
      has_bias_(bias != nullptr),
      bf16_(std::make_shared<Bf16Copy>()) {
  wt_.resize(static_cast<std::size_t>(std::max(in, 1)) * out_pad_);
  bias_.resize(out_pad_);
  for (int o = 0; o < out; ++o) {
    for (int i = 0; i < in; ++i) wt_[static_cast<std::size_t>(i) * out_pad_ + o] = weight[static_cast<std::size_t>(o) * in + i];
    bias_[o] = bias ? bias[o] : 0.0f;
  }
}

std::vector<float> PackedLinear::weight() const {
  std::vector<float> w(static_cast<std::size_t>(out_) * static_cast<std::size_t>(in_));
  for (int o = 0; o < out_; ++o)
    for (int i = 0; i < in_; ++i) w[static_cast<std::size_t>(o) * in_ + i] = wt_[static_cast<std::size_t>(i) * out_pad_ + o];
  return w;
}

}  // namespace surrogate::kernels
