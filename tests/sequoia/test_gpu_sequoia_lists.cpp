// Sequoia's neighbour lists computed on the device (device::NearestLists, the lists a plan for a CUDA
// device uses) against the host's (sequoia::nearest_lists: the same grid search compiled for the CPU) for
// all nodes, and against the host's brute force (an independent reference) for every 7th node, on the host
// backend (cuda.*) and on a GPU (gpu.*, skipped without one): every level of the hierarchy of a batch with a
// 12,000-point surface, a 4,000-point box and a 40-point sample, k = 8 and 16 (the two models' sibling and
// PointConv k). Identical lists, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "device/nearest_lists.hpp"
#include "gpu_test.hpp"
#include "sequoia/neighbours.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/sequoia.hpp"

namespace {

namespace sq = surrogate::sequoia;
namespace cu = surrogate::kernels::cuda;

TEST(GpuSequoiaLists, DeviceListsAreTheHosts) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<float> points;
  for (int i = 0; i < 12000; ++i) {  // a bumpy ellipsoid's surface
    const double z = 2.0 * unit(gen) - 1.0, phi = 6.283185307179586 * unit(gen), s = std::sqrt(1.0 - z * z);
    const double r = 1.0 + 0.1 * std::sin(5.0 * phi) * s;
    points.insert(points.end(), {static_cast<float>(2.0 * r * s * std::cos(phi)),
                                 static_cast<float>(r * s * std::sin(phi)), static_cast<float>(0.7 * r * z)});
  }
  for (int i = 0; i < 4000 + 40; ++i)
    for (int c = 0; c < 3; ++c) points.push_back(static_cast<float>(unit(gen)));
  const sq::Hierarchy h = sq::build_hierarchy(points.data(), {0, 12000, 16000, 16040}, 2, 5);
  const int device = surrogate::testing::test_device();
  const cu::Stream stream(device);
  surrogate::device::NearestLists on_device;
  for (int level = 0; level < static_cast<int>(h.level_positions.size()); ++level) {
    const auto& pos = h.level_positions[static_cast<std::size_t>(level)];
    const auto& batch = h.level_batch[static_cast<std::size_t>(level)];
    std::vector<std::int64_t> all(batch.size()), some;
    for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
    for (std::size_t i = 0; i < all.size(); i += 7) some.push_back(all[i]);
    for (const int k : {8, 16}) {
      EXPECT_EQ(on_device(device, stream.get(), pos, batch, k, all), sq::nearest_lists(pos, batch, k, all))
          << "level " << level << " (" << all.size() << " nodes), k " << k;
      EXPECT_EQ(on_device(device, stream.get(), pos, batch, k, some),
                sq::nearest_lists(pos, batch, k, some, std::int64_t{1} << 40))  // every sample by brute force
          << "level " << level << ", every 7th node, k " << k;
    }
  }
  const std::vector<std::int64_t> none;
  EXPECT_TRUE(on_device(device, stream.get(), h.level_positions[0], h.level_batch[0], 8, none).empty());
}

}  // namespace
