// The weights of Sequoia's networks (Network::Impl), shared by the CPU forward (network.cpp) and the
// CUDA forward (cuda/forward.cpp). share/docs/sequoia.md, "Forward".
#pragma once

#include <vector>

#include "layers.hpp"
#include "surrogate/kernels/block_plan.hpp"
#include "share.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {

struct Network::Impl {
  struct Level {  // one model level of one block
    Dense mlp1, q, k, v, expand_k, expand_v, shrink_k, shrink_v;
    BatchNorm mlp1_norm, out_norm;
    PositionalMlp parents, children, siblings;
  };
  struct Block {
    std::vector<Level> levels;
    float mix[3] = {0, 0, 0};  // softmax of attn2a.weight
  };
  Config cfg;
  std::vector<Dense> init;          // level 0 (seg: Linear; cls: PointConv's Linear), then one per level
  std::vector<BatchNorm> init_norm; // seg level 0 and every level >= 1 (index = level; cls level 0 unused)
  std::vector<Block> blocks;
  Dense head0, head3;
  BatchNorm head_bn;                // cls
  std::vector<float> ln_w, ln_b;    // seg LayerNorm(512)
  mutable kernels::BlockPlan work_blocks;  // the CPU forward's large Rows, replayed from the second forward

  Rows init_level0(const Share& s, const std::vector<float>& positions, const float* features) const;
  Rows head(const Share& s, const Hierarchy& h, const Rows& x0, const float* sample_features) const;  // seg
  /// y = ReLU(BN(mlp1 x)) of one level and its queries, keys and values.
  static void projections(const Level& lv, const Rows& x, Rows& y, Rows& Q, Rows& K, Rows& V);
  /// Classification: the model level its head reads; the terms of that level's means on this rank (level
  /// >= 1: every node's row; the points: the sums of this rank's lowest voxels, each voxel's points in
  /// order); the per-sample means from every rank's terms in node order; the head on the means.
  int head_level() const;
  std::vector<double> mean_terms(const Share& s, const Rows& xs, int level) const;
  Rows sample_means(const Hierarchy& h, const std::vector<double>& all, int level, int cols) const;
  Rows classify(const Rows& z) const;
};

}  // namespace surrogate::sequoia
