// Analytic arithmetic of one forward, from which the benchmarks print their share of the machine limit
// (benchmarks/README.md, "Share of the machine limit"): multiply-adds of the linear layers and attention
// products as 2 FLOPs each, softmax exponentials counted apart. Norms, activations, biases, the softmax's
// other arithmetic, tree builds and sorts are not counted: they are what the share leaves for them.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bench_io.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/hept.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/sequoia.hpp"

namespace bench_counts {

using bench_io::Work;

/// One transformer block on `nodes` rows of width D: SwiGLU (3 matrices D x ratio*D), q/k/v and output
/// projections, the ball position projection (d -> D), and attention over `keys` keys per query.
inline Work ball_block(double nodes, int D, int heads, double keys, int mlp_ratio, int d) {
  const double per_node = 6.0 * mlp_ratio * D * D + 8.0 * D * D + 2.0 * d * D + 4.0 * keys * D;
  return {nodes * per_node, nodes * heads * keys};
}

/// Erwin (share/docs/balltree.md): embedding and message passing on the N points (`edges` graph edges),
/// then the U-Net over the padded tree (next power of two), pooling and unpooling included.
inline Work erwin(const surrogate::erwin::Config& c, std::int64_t points, double edges) {
  const double n = static_cast<double>(points), d = c.dimensionality, D0 = c.c_hidden.front();
  Work w{2.0 * c.c_in * D0 * n, 0};
  w.flop += c.mp_steps * (edges * 2.0 * (2 * D0 + d) * D0 + n * 2.0 * 2 * D0 * D0);
  double nodes = static_cast<double>(surrogate::balltree::padded_size(points));
  const int L = c.levels();
  for (int i = 0; i < L; ++i) {
    for (int j = 0; j < c.enc_depths[i]; ++j)
      w += ball_block(nodes, c.c_hidden[i], c.enc_num_heads[i], c.ball_sizes[i], c.mlp_ratio, c.dimensionality);
    if (i == L - 1) break;
    const int s = c.strides[i];
    const double parents = nodes / s;
    if (s > 1) w.flop += parents * 2.0 * (s * c.c_hidden[i] + s * d) * c.c_hidden[i + 1];  // pooling
    w.flop += parents * 2.0 * (c.c_hidden[i + 1] + s * d) * s * c.c_hidden[i];          // unpooling
    w += [&] {  // the decoder blocks of level i run on the same node count as its encoder blocks
      Work dec;
      for (int j = 0; j < c.dec_depths[i]; ++j)
        dec += ball_block(nodes, c.c_hidden[i], c.dec_num_heads[i], c.ball_sizes[i], c.mlp_ratio, c.dimensionality);
      return dec;
    }();
    nodes = parents;
  }
  return w;
}

/// BSA (share/docs/balltree.md): embedding on the N points, `depth` layers on the padded tree; the
/// sparse attention's local, coarse (compressed blocks, quadratic in n/C) and fine (S blocks of C) branches,
/// the compression MLPs and the token gate; global and ball attention for those attention types.
inline Work bsa(const surrogate::bsa::Config& c, std::int64_t points) {
  using surrogate::bsa::AttentionType;
  const double n = static_cast<double>(surrogate::balltree::padded_size(points)), D = c.c_hidden, H = c.num_heads;
  const double E = c.head_dim(), C = c.compress_block_size;
  Work w{2.0 * c.c_in * D * static_cast<double>(points), 0};
  Work layer = ball_block(n, c.c_hidden, c.num_heads, 0, c.mlp_ratio, c.dimensionality);
  if (c.attention_type == AttentionType::global) {
    layer += Work{n * 4.0 * n * D, n * H * n};
  } else if (c.attention_type == AttentionType::ball) {
    layer += Work{n * 4.0 * c.attention_ball_size * D, n * H * c.attention_ball_size};
  } else {
    const double blocks = n / C, fine_keys = static_cast<double>(c.selected_blocks_number) * C;
    layer += Work{n * 4.0 * (c.ball_size + fine_keys) * D, n * H * (c.ball_size + fine_keys)};  // local, fine
    const double coarse_queries = c.use_coarse_q_attn ? blocks : n;  // compressed queries, or every token
    layer += Work{coarse_queries * blocks * 4.0 * D, coarse_queries * blocks * H};
    if (!c.use_coarse_q_attn)  // importance scores apart from the coarse logits
      layer.flop += (c.block_level_importance() ? blocks : n) * blocks * 2.0 * D;
    const double mlps = c.block_level_importance() ? 3 : 2, hidden = c.compress_hidden();
    if (c.use_compress_mlp) layer.flop += blocks * H * mlps * 2.0 * (C * E * hidden + hidden * E);
    if (c.use_token_gated_attention) layer.flop += n * 2.0 * D * 3 * H;
  }
  w.flop += c.depth * layer.flop;
  w.exps += c.depth * layer.exps;
  return w;
}

/// S2 attention with C channels: q, k, v and output projections on every point, and attention over
/// `pairs` (output point, input point) pairs: the neighbourhood's entries, or points^2 for global.
inline Work sphere_attention(double points, int channels, int heads, double pairs) {
  return {8.0 * channels * channels * points + 4.0 * channels * pairs, heads * pairs};
}

/// HEPT (share/docs/hept.md, "Semantics reproduced") on `padded` rows (every layer runs on the padded
/// sequence): its Linear layers (shapes read from the model file), per block the E2LSH projections of
/// q-hat and k-hat (hash_dim per table and head) and the bucket attention, per table, head and query its
/// block_size keys' logits and weighted values (2 (hash_dim + h_dim + 1) flops each, as BM_bucket counts)
/// and exponentials. Norms, sorts, gathers and the geometry are not counted.
inline Work hept(const surrogate::ModelFile& file, const surrogate::hept::Config& c, double padded) {
  std::vector<std::string> linear = {"feat_encoder.0", "feat_encoder.2", "W"};
  for (int l = 0; l < c.n_layers; ++l)
    for (const char* name : {"w_q", "w_k", "w_v", "attn.out_linear", "ff.0", "ff.2"})
      linear.push_back("attns." + std::to_string(l) + "." + name);
  for (int j = 0; j < 5; ++j) linear.push_back("mlp_out.lins." + std::to_string(j));
  if (c.num_classes > 0) linear.push_back("out_proj");
  Work w;
  for (const std::string& name : linear) {
    const auto& shape = file.weight(name + ".weight").shape;
    w.flop += 2.0 * static_cast<double>(shape[0]) * static_cast<double>(shape[1]) * padded;
  }
  const double tables = static_cast<double>(c.n_hashes) * c.num_heads, keys = c.block_size;
  w.flop += c.n_layers * tables * padded * (2.0 * 2.0 * c.hash_dim() + keys * 2.0 * (c.hash_dim() + c.h_dim + 1));
  w.exps += c.n_layers * tables * padded * keys;
  return w;
}

/// Sequoia (share/docs/sequoia.md, "Forward") on the collated hierarchy h (widths D_i = dim 2^i on the
/// n_i nodes of model level i): Init's projections; per block and level the MLP and q, k, v (4 D_i x D_i),
/// the parents' keys and values shrunk from level i + 1 (D_{i+1} -> D_i on its nodes) and the children's
/// expanded from level i - 1; per edge of the three attentions (parents and children: h's edge lists;
/// siblings: k_siblings per node) its logits and weighted values (4 D_i) and its positional MLP
/// (9 + 3 D_i / H multiply-adds), H exponentials; the segmentation head. The classification head (a few
/// rows per sample) is not counted.
inline Work sequoia(const surrogate::sequoia::Config& c, const surrogate::sequoia::Hierarchy& h) {
  using Kind = surrogate::sequoia::Config::Kind;
  const int L = c.levels();
  const double H = c.heads, ks = c.k_siblings();
  const auto n = [&](int i) { return static_cast<double>(h.nodes(i)); };
  const auto D = [&](int i) { return static_cast<double>(c.width(i)); };
  Work w;
  w.flop = c.kind == Kind::segmentation ? 2.0 * c.c * D(0) * n(0)
                                        : 2.0 * surrogate::sequoia::Config::k_pointconv * (c.c + 3) * D(0) * n(0);
  for (int i = 1; i < L; ++i) w.flop += 2.0 * D(i - 1) * D(i) * n(i);
  Work block;
  for (int i = 0; i < L; ++i) {
    const auto level = static_cast<std::size_t>(i);
    block.flop += 8.0 * D(i) * D(i) * n(i);
    double edges = 0;
    if (i + 1 < L) {
      block.flop += 4.0 * D(i + 1) * D(i) * n(i + 1);
      edges += static_cast<double>(h.parent_edges[level].size()) + ks * n(i);
    }
    if (i > 0) {
      block.flop += 4.0 * D(i - 1) * D(i) * n(i - 1);
      edges += static_cast<double>(h.child_edges[level].size());
    }
    block.flop += edges * (4.0 * D(i) + 2.0 * (9.0 + 3.0 * D(i) / H));
    block.exps += edges * H;
  }
  w.flop += c.layers * block.flop;
  w.exps += c.layers * block.exps;
  if (c.kind == Kind::segmentation) w.flop += 2.0 * (c.dim + c.n_class) * 512.0 * n(0) + 2.0 * 512.0 * c.n_part * n(0);
  return w;
}

}  // namespace bench_counts
