// The host arithmetic both of Sequoia's execs share (program.hpp): the input checks, the classification
// head's level and the host arrays of the geometry.
#include "program.hpp"

#include <algorithm>
#include <string>

#include "surrogate/error.hpp"

namespace surrogate::sequoia::program {

void check_inputs(const Config& c, const Hierarchy& h, const float* sample_features) {
  if (h.depth != c.depth)
    throw Error(ErrorCode::invalid_argument, "sequoia: hierarchy of depth " + std::to_string(h.depth) +
                                                 " for a model of depth " + std::to_string(c.depth));
  if (c.kind == Config::Kind::segmentation && c.n_class > 0 && !sample_features)
    throw Error(ErrorCode::input, "sequoia TreeTransformerSeg: the per-sample class vector is missing");
}

int head_level(const Config& c) { return c.selection == "root" ? c.depth : c.selection == "inner" ? c.depth - 1 : 0; }

namespace {

/// Per list l < lists the rows r with owner[r] == l, in row order (a counting sort).
KeyLists lists_by_owner(const std::vector<std::int64_t>& owner, index_t lists) {
  KeyLists l;
  l.first.assign(static_cast<std::size_t>(lists) + 1, 0);
  for (const std::int64_t o : owner) ++l.first[static_cast<std::size_t>(o) + 1];
  for (std::size_t o = 1; o < l.first.size(); ++o) l.first[o] += l.first[o - 1];
  l.keys.assign(owner.size(), 0);
  std::vector<std::int64_t> next(l.first.begin(), l.first.end() - 1);
  for (std::size_t r = 0; r < owner.size(); ++r)
    l.keys[static_cast<std::size_t>(next[static_cast<std::size_t>(owner[r])]++)] = static_cast<std::int64_t>(r);
  return l;
}

/// The pooling lists of `level`: per parent its rows (level 0: per owned voxel the share's points).
KeyLists pool_lists(const Share& s, const Hierarchy& h, int level) {
  const auto si = static_cast<std::size_t>(level);
  if (level == 0) return lists_by_owner(s.slot, static_cast<index_t>(s.voxels.size()));
  const std::vector<std::int64_t> parent_of(
      h.pool_parent[si].begin(),
      h.pool_parent[si].begin() + std::min<std::ptrdiff_t>(h.nodes(level), static_cast<std::ptrdiff_t>(h.pool_parent[si].size())));
  return lists_by_owner(parent_of, h.nodes(level + 1));
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
  if (c.kind == Config::Kind::segmentation) {
    for (const index_t r : s.points) g.batch.push_back(h.level_batch[0][static_cast<std::size_t>(r)]);
    return g;
  }
  const int level = head_level(c);
  g.samples = lists_by_owner(h.level_batch[static_cast<std::size_t>(std::max(level, 1))], h.samples());
  if (level == 0)
    for (index_t b = 0; b < h.samples(); ++b)
      g.sample_counts.push_back(static_cast<double>(h.point_offsets[static_cast<std::size_t>(b) + 1] - h.point_offsets[static_cast<std::size_t>(b)]));
  return g;
}

}  // namespace surrogate::sequoia::program
