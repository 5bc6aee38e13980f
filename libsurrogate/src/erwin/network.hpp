// The stages of the Erwin forward (embedding, message passing, the U-Net over the tree levels), shared by
// the one-process forward (network.cpp) and the forward on a plan (network_distributed.cpp), so both run
// the same per-row, per-edge and per-ball code. Every stage works on the rows it is given: the whole
// batch in one process, or one rank's rows (its block, its slots of the distributed tree).
// share/docs/balltree.md, "Code layout".
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "../layers.hpp"
#include "../ops/host_ops.hpp"
#include "program.hpp"
#include "surrogate/erwin.hpp"

namespace surrogate::erwin::detail {

/// How the rotated blocks of a level see their nodes: to_rotated puts the level's rows (`width` values
/// each) into the rotated tree's order, from_rotated writes rotated rows back to the level's order. In
/// the distributed forward both are collective exchanges (every rank calls them the same number of
/// times, with the same level and width).
class RotatedOrder {
 public:
  virtual ~RotatedOrder() = default;
  virtual void to_rotated(int level, const float* rows, int width, float* rotated_rows) const = 0;
  virtual void from_rotated(int level, const float* rotated_rows, int width, float* rows) const = 0;
};

/// Fills the halo rows (n_recv .. n_all) of the message-passing state h (row stride ld) with the current
/// rows of their owners; called before every message-passing step (collective when distributed).
using HaloRefresh = std::function<void(float* h, index_t ld)>;

/// Friend of Network: the stages, implemented in network.cpp.
struct Stages {
  /// The network's layers (the device forward uploads them: cuda/forward.cpp).
  static const program::Layers<ops::HostOps>& layers(const Network& net);
  /// Row stride of the level-0 / embedding rows: round_up(c_hidden[0], kPad).
  static index_t row_stride(const Network& net);
  /// Node counts of every level of a batch of `total_slots` tree slots; Error(input) when a level is not
  /// made of whole balls and whole stride groups (the same message on every rank).
  static std::vector<index_t> level_nodes(const Network& net, index_t total_slots);
  /// Error(input) for a NaN/Inf feature (n rows of c_in values), naming `first_point` + its row.
  static void check_features(const Network& net, std::span<const float> features, index_t first_point);
  /// h (n rows, stride row_stride) = embed.embed_fn(features (n x c_in)).
  static void embed(const Network& net, std::span<const float> features, index_t n, float* h, int threads);
  /// The mp_steps message-passing steps for the receivers 0 .. n_recv-1 of h (stride row_stride).
  /// Sources index rows 0 .. n_all-1 (rows from n_recv on are a halo, refreshed by `refresh` before every
  /// step, may be empty when n_all == n_recv); `pos` holds n_all rows of dimensionality coordinates;
  /// edges are 2 x E (sources, then receivers), grouped per receiver in their given order.
  static void message_passing(const Network& net, float* h, const float* pos, index_t n_recv, index_t n_all,
                              std::span<const std::int64_t> edges, const HaloRefresh& refresh, int threads);
  /// The U-Net: x holds the level-0 nodes (nodes[0] rows, stride row_stride) in tree order, pos their
  /// positions; nodes[i] the (local) node count of level i, whole balls and stride groups; rot the rotated
  /// orders (null when rotate <= 0). On return x holds the final level-0 rows (same layout).
  static void levels(const Network& net, AlignedBuffer<float>& x, std::vector<float> pos, std::span<const index_t> nodes,
                     const RotatedOrder* rot, int threads);
};

}  // namespace surrogate::erwin::detail
