// The distributed ball tree with its whole nodes finished on each rank's device (device::BallTrees as
// DistributedOptions::finisher, what Erwin's and BSA's plans use on a CUDA device), run by ctest at 1-3
// ranks on the host backend (cuda.mpi.*) and on a GPU (gpu.mpi.*, skipped without one): the tree order,
// masks and rotated orders equal those of the single-process balltree::build_with_rotations of the
// gathered points (integer equality). Clouds: random and grid coordinates (ties), several samples, a
// sample of 2 or 3 points, shares proportional to the rank, the last rank empty, everything on rank 0; serial
// thresholds 0 and 4096.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "device/ball_trees.hpp"
#include "gpu_mpi_test.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

namespace bt = surrogate::balltree;
using Index = std::int64_t;

enum class Share { by_rank, last_rank_empty, rank0 };

struct Cloud {
  std::vector<Index> offsets{0};
  std::vector<float> serial;             // every point, sample after sample, rank after rank
  std::vector<float> local;              // this rank's points
  std::vector<Index> local_samples;
};

/// Every rank draws the same points and owners and keeps its own; a sample's serial order is its points
/// rank after rank (the order the distributed tree numbers them in).
Cloud make_cloud(const std::vector<Index>& sizes, Share share, unsigned seed, int rank, int ranks) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 3.0f);
  Cloud c;
  for (std::size_t b = 0; b < sizes.size(); ++b) {
    std::vector<std::vector<float>> by_rank(static_cast<std::size_t>(ranks));
    for (Index i = 0; i < sizes[b]; ++i) {
      const bool grid = gen() % 3 == 0;
      int r = 0;
      if (share == Share::by_rank) r = static_cast<int>(gen() % static_cast<std::uint64_t>(ranks * (ranks + 1) / 2));
      if (share == Share::last_rank_empty) r = ranks > 1 ? static_cast<int>(gen() % static_cast<std::uint64_t>(ranks - 1)) : 0;
      if (share == Share::by_rank) {  // rank q gets a share proportional to q + 1
        int q = 0;
        while (r > q) r -= ++q;
        r = q;
      }
      for (int d = 0; d < 3; ++d)
        by_rank[static_cast<std::size_t>(r)].push_back(grid ? static_cast<float>(gen() % 4) : uniform(gen));
    }
    for (int r = 0; r < ranks; ++r) {
      const auto& mine = by_rank[static_cast<std::size_t>(r)];
      c.serial.insert(c.serial.end(), mine.begin(), mine.end());
      if (r == rank) {
        c.local.insert(c.local.end(), mine.begin(), mine.end());
        c.local_samples.insert(c.local_samples.end(), mine.size() / 3, static_cast<Index>(b));
      }
    }
    c.offsets.push_back(c.offsets.back() + sizes[b]);
  }
  return c;
}

/// Forwards to the device's finisher and counts the calls (a rank holding slots must make some).
struct CountingFinisher final : bt::NodeFinisher {
  explicit CountingFinisher(bt::NodeFinisher& to) : inner(to) {}
  bt::Tree build(std::span<const float> points, int dim, const bt::Batch& batch) override {
    ++calls;
    return inner.build(points, dim, batch);
  }
  std::vector<Index> partition(std::span<const float> points, int dim, const bt::Batch& batch, int level) override {
    ++calls;
    return inner.partition(points, dim, batch, level);
  }
  bt::NodeFinisher& inner;
  int calls = 0;
};

TEST(GpuDistributedBallTree, NodesFinishedOnTheDeviceGiveTheSingleProcessTrees) {
  SURROGATE_SKIP_WITHOUT_GPU();
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int device = surrogate::testing::local_device();
  const surrogate::kernels::cuda::Stream stream(device);
  surrogate::device::BallTrees on_device(device, stream.get());
  struct Case {
    std::vector<Index> sizes;
    std::vector<int> strides, balls;
    Index granularity;
    double angle;
  };
  const std::vector<Case> cases = {
      {{3000}, {1}, {64, 64}, 64, 45.0},             // Erwin's ShapeNet-Car shape, smaller
      {{900, 3, 700}, {2, 2}, {8, 8, 4}, 16, 45.0},  // several samples, one of 3 points
      {{1200, 2}, {}, {16}, 2, 0.0},                 // no rotation; a sample of 2 points
  };
  unsigned seed = 40;
  for (const Case& k : cases)
    for (const Share share : {Share::by_rank, Share::last_rank_empty, Share::rank0})
      for (const Index threshold : {Index{0}, Index{4096}}) {
        const Cloud c = make_cloud(k.sizes, share, ++seed, comm.rank(), comm.size());
        SCOPED_TRACE("first sample " + std::to_string(k.sizes[0]) + ", share " + std::to_string(static_cast<int>(share)) +
                     ", serial threshold " + std::to_string(threshold));
        const bt::RotatedTrees ref =
            bt::build_with_rotations(c.serial, 3, bt::Batch::from_offsets(c.offsets), k.strides, k.balls, k.angle);
        CountingFinisher finisher(on_device);
        bt::DistributedOptions options{k.granularity, threshold};
        options.finisher = &finisher;
        const bt::DistributedRotatedTrees d =
            bt::build_distributed_with_rotations(comm, c.local, 3, c.local_samples, k.strides, k.balls, k.angle, options);
        const bt::DistributedTree& t = d.tree;
        if (t.slot_end > t.slot_begin) {
          EXPECT_GT(finisher.calls, 0);
        }
        EXPECT_EQ(t.index, std::vector<Index>(ref.tree.index.begin() + t.slot_begin, ref.tree.index.begin() + t.slot_end));
        EXPECT_EQ(t.mask, std::vector<std::uint8_t>(ref.tree.mask.begin() + t.slot_begin, ref.tree.mask.begin() + t.slot_end));
        ASSERT_EQ(d.rotations.rotated.size(), ref.rotated.size());
        Index per_node = 1;
        for (std::size_t i = 0; i < ref.rotated.size(); ++i) {
          const Index begin = t.slot_begin / per_node, end = t.slot_end / per_node;
          EXPECT_EQ(d.rotations.rotated[i], std::vector<Index>(ref.rotated[i].begin() + begin, ref.rotated[i].begin() + end))
              << "level " << i;
          if (i < k.strides.size()) per_node *= k.strides[i];
        }
      }
}

}  // namespace
