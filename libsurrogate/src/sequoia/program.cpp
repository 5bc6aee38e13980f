// The host arithmetic both of Sequoia's execs share (program.hpp): the input checks, the classification
// head and the host arrays of the geometry.
#include "program.hpp"

#include <algorithm>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/kernels/aligned_buffer.hpp"

namespace surrogate::sequoia::program {

void check_inputs(const Config& c, const Hierarchy& h, const float* sample_features) {
  if (h.depth != c.depth)
    throw Error(ErrorCode::invalid_argument, "sequoia: hierarchy of depth " + std::to_string(h.depth) +
                                                 " for a model of depth " + std::to_string(c.depth));
  if (c.kind == Config::Kind::segmentation && c.n_class > 0 && !sample_features)
    throw Error(ErrorCode::input, "sequoia TreeTransformerSeg: the per-sample class vector is missing");
}

int head_level(const Config& c) { return c.selection == "root" ? c.depth : c.selection == "inner" ? c.depth - 1 : 0; }

std::vector<double> mean_terms(const Share& s, const std::vector<float>& xs, int cols, int level) {
  if (level > 0) return {xs.begin(), xs.end()};
  const auto w = static_cast<std::size_t>(cols);
  std::vector<double> sums(s.voxels.size() * w, 0.0);
  for (std::size_t t = 0; t < xs.size() / w; ++t) {
    const auto v = static_cast<std::size_t>(s.slot[t]);
    for (std::size_t c = 0; c < w; ++c) sums[v * w + c] += xs[t * w + c];
  }
  return sums;
}

std::vector<float> sample_means(const Hierarchy& h, const std::vector<double>& all, int level, int cols) {
  const auto B = static_cast<std::size_t>(h.samples()), w = static_cast<std::size_t>(cols);
  const auto& batch = h.level_batch[static_cast<std::size_t>(std::max(level, 1))];
  std::vector<double> sum(B * w, 0.0);
  std::vector<std::int64_t> count(B, 0);
  for (std::size_t r = 0; r < batch.size(); ++r) {
    const auto b = static_cast<std::size_t>(batch[r]);
    ++count[b];
    for (std::size_t c = 0; c < w; ++c) sum[b * w + c] += all[r * w + c];
  }
  if (level == 0)
    for (std::size_t b = 0; b < B; ++b) count[b] = h.point_offsets[b + 1] - h.point_offsets[b];
  std::vector<float> z(B * w);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t c = 0; c < w; ++c) z[b * w + c] = static_cast<float>(sum[b * w + c] / static_cast<double>(count[b]));
  return z;
}

std::vector<float> classify(const Layers<ops::HostOps>& w, const std::vector<float>& z, int cols) {
  const auto B = static_cast<index_t>(z.size() / static_cast<std::size_t>(cols));
  const int hidden = w.head0.out(), classes = w.head3.out();
  // The kernel writes whole rows of its padded width: the layers' outputs in padded rows.
  kernels::AlignedBuffer<float> u(static_cast<std::size_t>(std::max<index_t>(B, 1) * w.head0.out_pad())),
      o(static_cast<std::size_t>(std::max<index_t>(B, 1) * w.head3.out_pad()));
  const Rows zr = ops::view(z.data(), cols, B, cols, ops::Place::host);
  const Rows ur{u.data(), w.head0.out_pad(), B, hidden, ops::Place::host};
  const Rows orows{o.data(), w.head3.out_pad(), B, classes, ops::Place::host};
  ops::HostOps host(kernels::cpu());
  host.dense({&w.head0, zr, ur});
  host.tree_norm({&w.head_bn, ur, true});
  host.dense({&w.head3, ur, orows});
  std::vector<float> result(static_cast<std::size_t>(B) * static_cast<std::size_t>(classes));
  host.copy({orows, nullptr, {result.data(), classes, B, classes, ops::Place::host}});
  return result;
}

namespace {

KeyLists pool_lists(const Share& s, const Hierarchy& h, int level) {
  const auto si = static_cast<std::size_t>(level);
  std::vector<std::int64_t> parent_of;
  if (level == 0) parent_of.assign(s.slot.begin(), s.slot.end());
  else
    parent_of.assign(h.pool_parent[si].begin(),
                     h.pool_parent[si].begin() + std::min<std::ptrdiff_t>(h.nodes(level), static_cast<std::ptrdiff_t>(h.pool_parent[si].size())));
  KeyLists pool;
  pool.first.assign(static_cast<std::size_t>(level == 0 ? static_cast<index_t>(s.voxels.size()) : h.nodes(level + 1)) + 1, 0);
  for (const std::int64_t p : parent_of) ++pool.first[static_cast<std::size_t>(p) + 1];
  for (std::size_t p = 1; p < pool.first.size(); ++p) pool.first[p] += pool.first[p - 1];
  pool.keys.assign(parent_of.size(), 0);
  std::vector<std::int64_t> next(pool.first.begin(), pool.first.end() - 1);
  for (std::size_t r = 0; r < parent_of.size(); ++r)
    pool.keys[static_cast<std::size_t>(next[static_cast<std::size_t>(parent_of[r])]++)] = static_cast<std::int64_t>(r);
  return pool;
}

}  // namespace

HostGeometry host_geometry(const Config& c, const Share& s, const Hierarchy& h) {
  HostGeometry g;
  const auto n0 = static_cast<index_t>(s.points.size()), ne = n0 + static_cast<index_t>(s.halo.size());
  g.pos0.resize(static_cast<std::size_t>(ne) * 3);
  for (index_t t = 0; t < ne; ++t) {
    const index_t r = t < n0 ? s.points[static_cast<std::size_t>(t)] : s.halo[static_cast<std::size_t>(t - n0)];
    std::copy_n(h.level_positions[0].begin() + r * 3, 3, g.pos0.begin() + t * 3);
  }
  for (const index_t v : s.voxels)
    g.pos1.insert(g.pos1.end(), h.level_positions[1].begin() + v * 3, h.level_positions[1].begin() + (v + 1) * 3);
  for (int i = 0; i + 1 < c.levels(); ++i) g.pool.push_back(pool_lists(s, h, i));
  if (c.kind == Config::Kind::segmentation)
    for (const index_t r : s.points) g.batch.push_back(h.level_batch[0][static_cast<std::size_t>(r)]);
  return g;
}

}  // namespace surrogate::sequoia::program
