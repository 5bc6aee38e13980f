// AlignedBuffer (surrogate/kernels/aligned_buffer.hpp): zeroed, 64-byte aligned (2 MiB aligned from
// 2 MiB on), and a large block gives its memory back to the system when freed even when malloc has
// been told never to use mmap and never to trim its heap, which is what Debian's libsuperlu_dist.so.8
// does when it is loaded (it comes with PETSc): a process linking PETSc then kept every large block
// freed during a forward resident (share/docs/balltree.md, "Memory per rank").
#include <gtest/gtest.h>
#include <malloc.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "surrogate/kernels/aligned_buffer.hpp"

namespace k = surrogate::kernels;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

/// Resident set size of this process in bytes (VmRSS of /proc/self/status).
std::size_t resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string key;
  while (status >> key) {
    if (key == "VmRSS:") {
      std::size_t kib = 0;
      status >> kib;
      return kib * 1024;
    }
    status.ignore(1 << 12, '\n');
  }
  ADD_FAILURE() << "no VmRSS in /proc/self/status";
  return 0;
}

bool all_zero(const k::AlignedBuffer<float>& b) {
  for (std::size_t i = 0; i < b.size(); ++i)
    if (b[i] != 0.0f) return false;
  return true;
}

/// malloc as libsuperlu_dist.so.8 leaves it for the test, glibc's defaults back afterwards.
struct MallocWithoutMmapOrTrim {
  MallocWithoutMmapOrTrim() {
    EXPECT_EQ(mallopt(M_MMAP_MAX, 0), 1);
    EXPECT_EQ(mallopt(M_TRIM_THRESHOLD, -1), 1);
  }
  ~MallocWithoutMmapOrTrim() {
    mallopt(M_MMAP_MAX, 65536);
    mallopt(M_TRIM_THRESHOLD, 128 * 1024);
  }
};

}  // namespace

TEST(AlignedBuffer, ZeroedAndAlignedAroundTheLargeBlockSize) {
  const MallocWithoutMmapOrTrim settings;
  // Below, at and above 2 MiB (the size from which a block is a mapping of its own).
  for (const std::size_t floats : {std::size_t{1}, std::size_t{17}, 2 * kMiB / 4 - 16, 2 * kMiB / 4 - 1, 2 * kMiB / 4,
                                   2 * kMiB / 4 + 1, 5 * kMiB / 4 + 3}) {
    k::AlignedBuffer<float> b(floats);
    ASSERT_EQ(b.size(), floats);
    const auto address = reinterpret_cast<std::uintptr_t>(b.data());
    EXPECT_EQ(address % 64, 0u) << floats << " floats";
    if (floats * sizeof(float) >= 2 * kMiB) {
      EXPECT_EQ(address % (2 * kMiB), 0u) << floats << " floats";
    }
    EXPECT_TRUE(all_zero(b)) << floats << " floats";
    for (std::size_t i = 0; i < floats; ++i) b[i] = 1.0f;  // every byte writable
    // Growing reallocates zeroed; shrinking keeps the block.
    b.resize(floats + 64);
    EXPECT_TRUE(all_zero(b)) << floats << " floats";
    const float* before = b.data();
    b.resize(floats);
    EXPECT_EQ(b.data(), before);
  }
}

TEST(AlignedBuffer, LargeBlockReturnsToTheSystemWhenMallocNeverMapsNorTrims) {
  const MallocWithoutMmapOrTrim settings;
  const std::size_t floats = 64 * kMiB / sizeof(float);
  const std::size_t at_start = resident_bytes();
  {
    k::AlignedBuffer<float> b(floats);
    for (std::size_t i = 0; i < floats; ++i) b[i] = static_cast<float>(i % 7);  // touch every page
    EXPECT_GE(resident_bytes(), at_start + 60 * kMiB);
    // Moving the buffer moves the block; the moved-from one owns nothing.
    k::AlignedBuffer<float> moved(std::move(b));
    EXPECT_EQ(moved[floats - 1], static_cast<float>((floats - 1) % 7));
  }
  // Freed: back within a few MiB of the start (a block from malloc's heap would stay resident here).
  EXPECT_LT(resident_bytes(), at_start + 8 * kMiB);
}

// FirstTouchAllocator: a vector's growth writes none of the new elements, so a large fresh buffer stays
// untouched (not resident) until the caller's loops write it, on whichever threads they run; values given
// to the vector are still constructed.
TEST(FirstTouchAllocator, GrowthWritesNothing) {
  using Vector = std::vector<float, k::FirstTouchAllocator<float>>;
  const std::size_t floats = 64 * kMiB / sizeof(float);
  const std::size_t at_start = resident_bytes();
  {
    Vector v;
    v.resize(floats);  // glibc maps a block this large on its own: fresh pages, none touched
    EXPECT_LT(resident_bytes(), at_start + 8 * kMiB) << "resize wrote the new elements";
    for (std::size_t i = 0; i < floats; ++i) v[i] = 1.0f;
    EXPECT_GE(resident_bytes(), at_start + 60 * kMiB);
  }
  Vector small(4, 2.0f);
  small.resize(8, 3.0f);
  EXPECT_EQ(small, Vector({2.0f, 2.0f, 2.0f, 2.0f, 3.0f, 3.0f, 3.0f, 3.0f}));
  const std::vector<double, k::FirstTouchAllocator<double>> copied(small.begin(), small.end());
  EXPECT_EQ(copied.back(), 3.0);
}
