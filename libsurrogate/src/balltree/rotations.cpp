// Rotated trees of build_balltree_with_rotations (share/docs/balltree.md, reference-models.md §1.2.5).
//
// The rotated coordinates and their mean pooling must round exactly as PyTorch's float32 CPU kernels do,
// because the partition compares them: every product and sum below is rounded to float32 on its own
// (this file is compiled with -ffp-contract=off: no fused multiply-add).
#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <string>
#include <utility>

#include "surrogate/balltree.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/torch_order_sum.hpp"

namespace surrogate::balltree {
namespace {

using Index = std::int64_t;
std::size_t sz(Index i) { return static_cast<std::size_t>(i); }

}  // namespace

std::array<float, 9> rotation_matrix(double angle_degrees, int dim) {
  // math.radians(a) = a * (pi / 180); math.cos / math.sin are the C library's.
  const double a = angle_degrees * (std::numbers::pi / 180.0);
  const double c = std::cos(a), s = std::sin(a);
  std::array<float, 9> r{};
  auto f = [](double v) { return static_cast<float>(v); };
  if (dim == 2) {
    r = {f(c), f(-s), f(s), f(c), 0, 0, 0, 0, 0};
  } else if (dim == 3) {
    r = {f(c * c),  f(s * c * (s - 1)),  f(s * (s + c * c)),  //
         f(s * c),  f(s * s * s + c * c), f(s * c * (s - 1)),  //
         f(-s),     f(s * c),             f(c * c)};
  } else {
    throw Error(ErrorCode::invalid_argument, "rotated ball trees: dim must be 2 or 3 (as in the official code), found " +
                                                 std::to_string(dim));
  }
  return r;
}

std::vector<float> rotate(std::span<const float> rows, int dim, double angle_degrees) {
  const std::array<float, 9> r = rotation_matrix(angle_degrees, dim);
  const auto n = static_cast<Index>(rows.size()) / dim;
  if (n * dim != static_cast<Index>(rows.size()))
    throw Error(ErrorCode::invalid_argument, "rotate: " + std::to_string(rows.size()) + " values are not rows of dim = " + std::to_string(dim));
  std::vector<float> out(rows.size());
  for (Index i = 0; i < n; ++i) {
    const float* x = rows.data() + i * dim;
    for (Index j = 0; j < dim; ++j) {
      float y = x[0] * r[sz(j)];
      for (Index k = 1; k < dim; ++k) {
        const float p = x[k] * r[sz(k * dim + j)];
        y = y + p;
      }
      out[sz(i * dim + j)] = y;
    }
  }
  return out;
}

int rotation_target_level(std::int64_t total_leaves, std::int64_t ball_size) {
  if (ball_size < 1) throw Error(ErrorCode::invalid_argument, "rotated ball trees: ball size must be positive, found " + std::to_string(ball_size));
  if (total_leaves < 1) throw Error(ErrorCode::invalid_argument, "rotated ball trees: the tree has no leaves");
  // max(0, int(math.log2(T / bs))): true division in double, log2, truncation toward zero.
  const double l = std::log2(static_cast<double>(total_leaves) / static_cast<double>(ball_size));
  return std::max(0, static_cast<int>(std::trunc(l)));
}

std::vector<float> mean_pool(std::span<const float> rows, int dim, int stride) {
  if (dim < 1) throw Error(ErrorCode::invalid_argument, "mean_pool: dim must be at least 1, found " + std::to_string(dim));
  if (stride < 1) throw Error(ErrorCode::invalid_argument, "mean_pool: stride must be positive, found " + std::to_string(stride));
  const auto n = static_cast<Index>(rows.size()) / dim;
  if (n * dim != static_cast<Index>(rows.size()) || n % stride != 0)
    throw Error(ErrorCode::invalid_argument, "mean_pool: " + std::to_string(n) + " rows cannot be pooled by stride " + std::to_string(stride));
  const Index groups = n / stride;
  std::vector<float> out(sz(groups * dim));
  const auto divisor = static_cast<float>(stride);
  for (Index g = 0; g < groups; ++g)
    for (Index c = 0; c < dim; ++c)
      out[sz(g * dim + c)] = kernels::torch_order_sum(rows.data() + g * stride * dim + c, dim, stride) / divisor;
  return out;
}

RotatedTrees build_with_rotations(std::span<const float> points, int dim, const Batch& batch,
                                  std::span<const int> strides, std::span<const int> ball_sizes, double angle_degrees,
                                  NodeFinisher* finisher) {
  if (ball_sizes.empty())
    throw Error(ErrorCode::invalid_argument, "rotated ball trees: ball_sizes is empty (one entry per tree level is needed)");
  if (strides.size() + 1 != ball_sizes.size())
    throw Error(ErrorCode::invalid_argument, "rotated ball trees: strides must have one entry fewer than ball_sizes, found " +
                                                 std::to_string(strides.size()) + " strides and " +
                                                 std::to_string(ball_sizes.size()) + " ball sizes");
  for (std::size_t i = 0; i < ball_sizes.size(); ++i)
    if (ball_sizes[i] < 1)
      throw Error(ErrorCode::invalid_argument, "rotated ball trees: ball_sizes[" + std::to_string(i) + "] must be positive, found " +
                                                   std::to_string(ball_sizes[i]));
  for (std::size_t i = 0; i < strides.size(); ++i)
    if (strides[i] < 1)
      throw Error(ErrorCode::invalid_argument, "rotated ball trees: strides[" + std::to_string(i) + "] must be positive, found " +
                                                   std::to_string(strides[i]));
  RotatedTrees result;
  const bool rotated = angle_degrees > 0;
  if (rotated) rotation_matrix(angle_degrees, dim);  // refuses a dim other than 2 and 3 before any work
  result.tree = finisher ? finisher->build(points, dim, batch) : build(points, dim, batch);
  if (!rotated) return result;

  const Tree& tree = result.tree;
  const Index total = tree.slots();
  for (const int bs : ball_sizes) result.target_levels.push_back(rotation_target_level(total, bs));

  std::vector<float> leaves(sz(total * dim));
  for (Index s = 0; s < total; ++s)
    std::copy_n(points.data() + tree.index[sz(s)] * dim, dim, leaves.data() + s * dim);
  std::vector<float> rot = rotate(leaves, dim, angle_degrees);
  std::vector<std::int64_t> level_batch = tree.slot_batch_idx();
  for (std::size_t i = 0; i < ball_sizes.size(); ++i) {
    Batch b;
    try {
      b = Batch::from_batch_idx(level_batch);
    } catch (const Error& e) {
      throw Error(ErrorCode::invalid_argument, "rotated ball trees: pooling by strides " +
                                                   std::string("does not keep the samples apart at level ") +
                                                   std::to_string(i) + " (" + e.what() + ")");
    }
    const std::span<const float> level_points(rot);
    result.rotated.push_back(finisher ? finisher->partition(level_points, dim, b, result.target_levels[i])
                                      : partition(level_points, dim, b, result.target_levels[i]));
    if (i + 1 == ball_sizes.size()) break;
    const int s = strides[i];
    const Index nodes = static_cast<Index>(level_batch.size());
    if (nodes % s != 0)
      throw Error(ErrorCode::invalid_argument, "rotated ball trees: level " + std::to_string(i) + " has " + std::to_string(nodes) +
                                                   " nodes, not divisible by strides[" + std::to_string(i) + "] = " + std::to_string(s));
    rot = mean_pool(rot, dim, s);
    std::vector<std::int64_t> next(sz(nodes / s));
    for (Index k = 0; k < nodes / s; ++k) next[sz(k)] = level_batch[sz(k * s)];
    level_batch = std::move(next);
  }
  return result;
}

}  // namespace surrogate::balltree
