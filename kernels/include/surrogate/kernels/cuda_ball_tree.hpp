// The ball trees of Erwin and BSA on a CUDA device (CUDA builds only): what surrogate::balltree::build and
// surrogate::balltree::partition compute for float32 points, bit for bit — the split dimension of largest
// spread and libstdc++'s std::nth_element at every node (surrogate/kernels/introselect.hpp), run node by
// node level after level (share/docs/cuda.md, "Ball trees").
#pragma once

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "surrogate/kernels/cpu.hpp"  // index_t
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {

/// Nodes of at most this many points are finished, with all their descendants, by one thread each
/// (BallTreeArgs::serial_points = 0); larger nodes by a block of threads each.
inline constexpr int kBallTreeSerialPoints = 64;

/// Nodes of more than this many points are split by many blocks each, the round's steps one launch each
/// over (tile, node) blocks, with one wait for the device per four rounds (BallTreeArgs::wide_points = 0);
/// smaller ones by a block each.
inline constexpr int kBallTreeWidePoints = 32768;

/// Scratch of ball_tree: the working order, the partition's stop lists and the level schedule (device
/// memory, grown on demand, reused across calls).
struct BallTreeWork {
  DeviceBuffer<unsigned char> bytes;
};

struct BallTreeArgs {
  index_t points = 0;                   // rows of positions, 1 .. 2^31 - 2
  int dim = 0;                          // >= 1
  const float* positions = nullptr;     // device, points x dim, finite
  int samples = 0;                      // >= 1
  const std::int64_t* first = nullptr;  // HOST, samples + 1 increasing offsets, 0 first, points last
  /// -1: the tree (balltree::build: every sample of n >= 2 points gets balltree::padded_size(n) slots,
  /// sample after sample); >= 0: balltree::partition to this level (one position per point).
  int target_level = -1;
  std::int64_t* index = nullptr;        // device: the slots' or positions' point (global row of positions)
  std::uint8_t* mask = nullptr;         // device, the tree only: 1 for a point, 0 for a padding duplicate
  int serial_points = 0;                // 0: kBallTreeSerialPoints (other values >= 2: tests)
  int wide_points = 0;                  // 0: kBallTreeWidePoints (other values >= 3: tests)
  BallTreeWork* work = nullptr;         // host object holding the device scratch
};

/// The levels of the tree of a sample of n >= 2 points (balltree::tree_depth: ceil(log2(n)) in double,
/// minus one, as the official code) and its slots (balltree::padded_size).
inline int ball_tree_depth(std::int64_t n) {
  return static_cast<int>(std::ceil(std::log2(static_cast<double>(n)))) - 1;
}
inline std::int64_t ball_tree_padded_size(std::int64_t n) { return std::int64_t{2} << ball_tree_depth(n); }
/// The slots of a tree over the samples of `first` (host, samples + 1 offsets, every sample >= 2 points).
inline std::int64_t ball_tree_slots(const std::int64_t* first, int samples) {
  std::int64_t slots = 0;
  for (int b = 0; b < samples; ++b) slots += ball_tree_padded_size(first[b + 1] - first[b]);
  return slots;
}

/// Enqueues the tree or partition on `stream` (waiting for it between the rounds of the wide nodes, when
/// there are any); std::invalid_argument for arguments it does not take, before anything is enqueued.
void ball_tree(const BallTreeArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
