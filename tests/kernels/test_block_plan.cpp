// BlockPlan (surrogate/kernels/block_plan.hpp): a forward's large blocks replayed from one mapping. Every
// block is filled with its own tag when taken and checked when freed, so two live blocks sharing bytes
// show; replays, fallbacks, blocks that outlive a forward and a plan in use elsewhere are checked.
#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "surrogate/kernels/aligned_buffer.hpp"
#include "surrogate/kernels/block_plan.hpp"

namespace k = surrogate::kernels;

namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

struct Taken {
  std::uint32_t* p = nullptr;
  std::size_t bytes = 0;
  std::uint32_t tag = 0;
};

Taken take(std::size_t bytes, std::uint32_t tag) {
  Taken t{static_cast<std::uint32_t*>(k::aligned_uninitialised_alloc(bytes)), bytes, tag};
  for (std::size_t i = 0; i < bytes / 4; i += 1024) t.p[i] = tag;  // one word per 4 KiB page
  return t;
}

/// Whether the block still holds its tag everywhere; frees it.
bool give_back(const Taken& t) {
  bool intact = true;
  for (std::size_t i = 0; i < t.bytes / 4; i += 1024) intact = intact && t.p[i] == t.tag;
  k::aligned_free(t.p, t.bytes);
  return intact;
}

bool inside(const void* p, const std::vector<const void*>& arena_blocks) {
  for (const void* q : arena_blocks)
    if (p == q) return true;
  return false;
}

/// A forward's pattern: a chain of layers, each reading the previous output; one block kept to the end,
/// small blocks between. Returns the block addresses; every block must come back intact.
std::vector<const void*> forward(k::BlockPlan& plan, std::uint32_t salt, std::size_t grow = 0) {
  const k::BlockPlan::Scope scope(&plan);
  std::vector<const void*> at;
  bool intact = true;
  Taken kept = take(3 * kMiB, salt + 1);
  Taken previous = take(8 * kMiB + grow, salt + 2);
  at.push_back(kept.p);
  at.push_back(previous.p);
  for (std::uint32_t layer = 0; layer < 6; ++layer) {
    Taken small = take(64 * 1024, salt + 100 + layer);
    Taken next = take((2 + layer % 3 * 5) * kMiB, salt + 10 + layer);
    at.push_back(next.p);
    intact = give_back(small) && intact;
    intact = give_back(previous) && intact;
    previous = next;
  }
  intact = give_back(previous) && intact;
  intact = give_back(kept) && intact;
  EXPECT_TRUE(intact) << "a block was overwritten while in use (salt " << salt << ")";
  return at;
}

}  // namespace

TEST(BlockPlan, SecondForwardReplaysFromOneMappingWithoutOverlaps) {
  k::BlockPlan plan;
  const auto first = forward(plan, 1000);
  EXPECT_EQ(plan.held_bytes(), 0u);  // the first forward records
  const auto second = forward(plan, 2000);
  const auto third = forward(plan, 3000);
  EXPECT_EQ(plan.replays(), 2u);
  EXPECT_EQ(second, third) << "a replay hands out the planned offsets";
  // The peak of blocks alive at once is 3 + 8 + 7 MiB; the mapping is no larger than all blocks.
  EXPECT_GE(plan.held_bytes(), 18 * kMiB);
  EXPECT_LE(plan.held_bytes(), (3 + 8 + 2 + 7 + 12 + 2 + 7 + 12) * kMiB);
}

TEST(BlockPlan, AnotherSequenceFallsBackAndIsRecordedAgain) {
  k::BlockPlan plan;
  forward(plan, 1000);
  forward(plan, 2000);
  forward(plan, 3000, 4 * kMiB);  // the second block grows: fresh blocks from there on, plan dropped
  EXPECT_EQ(plan.replays(), 1u);
  EXPECT_EQ(plan.held_bytes(), 0u);
  forward(plan, 4000, 4 * kMiB);  // records the new sequence
  forward(plan, 5000, 4 * kMiB);
  EXPECT_EQ(plan.replays(), 2u);
  EXPECT_GE(plan.held_bytes(), 22 * kMiB);
}

TEST(BlockPlan, BlocksThatOutliveTheForwardAreNeverInTheMapping) {
  k::BlockPlan plan;
  std::vector<Taken> results;
  for (std::uint32_t f = 0; f < 3; ++f) {
    const k::BlockPlan::Scope scope(&plan);
    Taken work = take(4 * kMiB, 7000 + f);
    results.push_back(take(2 * kMiB, 8000 + f));  // returned to the caller
    EXPECT_TRUE(give_back(work));
  }
  EXPECT_EQ(plan.replays(), 2u);
  for (const Taken& r : results) EXPECT_TRUE(give_back(r)) << "result " << r.tag;
}

TEST(BlockPlan, PlannedBlockKeptPastItsForwardStaysValid) {
  Taken kept;
  {
    k::BlockPlan plan;
    forward(plan, 1000);
    {
      const k::BlockPlan::Scope scope(&plan);
      kept = take(3 * kMiB, 42);  // planned (freed within the recorded forward), kept this time
    }
    EXPECT_EQ(plan.held_bytes(), 0u) << "the mapping is retired, not reused";
    forward(plan, 3000);  // records again; must not touch the kept block
  }  // plan destroyed while the block lives
  EXPECT_TRUE(give_back(kept));
}

TEST(BlockPlan, APlanInUseElsewhereIsLeftAlone) {
  k::BlockPlan plan;
  forward(plan, 1000);
  forward(plan, 2000);
  const auto replayed = forward(plan, 2500);
  const k::BlockPlan::Scope scope(&plan);  // this thread's forward holds the plan
  std::vector<const void*> other;
  std::thread([&] { other = forward(plan, 3000); }).join();
  for (const void* p : other) EXPECT_FALSE(inside(p, replayed)) << "the other thread got a planned block";
  EXPECT_EQ(plan.replays(), 2u);
}

TEST(BlockPlan, SmallBlocksAndZeroedBlocksAreNotPlanned) {
  k::BlockPlan plan;
  for (int f = 0; f < 3; ++f) {
    const k::BlockPlan::Scope scope(&plan);
    void* small = k::aligned_uninitialised_alloc(kMiB);
    k::AlignedBuffer<float> zeroed(4 * kMiB / sizeof(float));
    for (std::size_t i = 0; i < zeroed.size(); i += 1024) EXPECT_EQ(zeroed[i], 0.0f);
    zeroed[0] = 1.0f;
    k::aligned_free(small, kMiB);
  }
  EXPECT_EQ(plan.held_bytes(), 0u);
}
