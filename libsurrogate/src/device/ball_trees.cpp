// device::BallTrees (ball_trees.hpp): one upload of the points, one launcher, one download.
#include "ball_trees.hpp"

#include <cmath>
#include <stdexcept>
#include <string>

#include "layers.hpp"

namespace surrogate::device {

namespace cu = kernels::cuda;

void BallTrees::run(std::span<const float> points, int dim, const balltree::Batch& batch, int target_level,
                    std::int64_t outputs) {
  const std::int64_t n = batch.points();
  if (dim < 1 || static_cast<std::int64_t>(points.size()) != n * dim)
    throw std::invalid_argument("device ball trees: " + std::to_string(points.size()) + " coordinates for " +
                                std::to_string(n) + " points of dimension " + std::to_string(dim));
  for (std::size_t i = 0; i < points.size(); ++i)
    if (!std::isfinite(points[i]))
      throw std::invalid_argument("device ball trees: point " + std::to_string(i / static_cast<std::size_t>(dim)) +
                                  " has a NaN/Inf coordinate (coordinate " + std::to_string(i % static_cast<std::size_t>(dim)) + ")");
  const cu::DeviceGuard guard(device_);
  cu::copy_to_device(sized(positions_, n * dim, device_), points.data(), points.size() * sizeof(float), stream_);
  cu::BallTreeArgs a;
  a.points = n;
  a.dim = dim;
  a.positions = positions_.data();
  a.samples = static_cast<int>(batch.samples());
  a.first = batch.offsets().data();
  a.target_level = target_level;
  a.index = sized(index_, outputs, device_);
  a.mask = target_level < 0 ? sized(mask_, outputs, device_) : nullptr;
  a.wide_points = wide_points_;
  a.work = &work_;
  cu::ball_tree(a, stream_);
}

balltree::Tree BallTrees::build(std::span<const float> points, int dim, const balltree::Batch& batch) {
  balltree::Tree t;
  t.slot_offsets.assign(1, 0);
  for (std::int64_t b = 0; b < batch.samples(); ++b)
    t.slot_offsets.push_back(t.slot_offsets.back() + balltree::padded_size(batch.size(b)));
  const std::int64_t slots = t.slot_offsets.back();
  run(points, dim, batch, -1, slots);
  t.index.resize(static_cast<std::size_t>(slots));
  t.mask.resize(static_cast<std::size_t>(slots));
  cu::copy_to_host(t.index.data(), index_.data(), t.index.size() * sizeof(std::int64_t), stream_);
  cu::copy_to_host(t.mask.data(), mask_.data(), t.mask.size(), stream_);
  cu::synchronize(stream_);
  return t;
}

std::vector<std::int64_t> BallTrees::partition(std::span<const float> points, int dim, const balltree::Batch& batch,
                                               int target_level) {
  if (target_level < 0)
    throw std::invalid_argument("device ball trees: target_level must be non-negative, found " + std::to_string(target_level));
  std::vector<std::int64_t> out(static_cast<std::size_t>(batch.points()));
  run(points, dim, batch, target_level, batch.points());
  cu::copy_to_host(out.data(), index_.data(), out.size() * sizeof(std::int64_t), stream_);
  cu::synchronize(stream_);
  return out;
}

}  // namespace surrogate::device
