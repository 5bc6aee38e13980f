// The part of a forward one rank computes over a hierarchy (share/docs/sequoia.md, "Across ranks"): whole
// lowest-level voxels with their points, the voxel levels above on every rank, the neighbour lists of the
// queries computed here and the exchanges that feed them.
#pragma once

#include <cstdint>
#include <vector>

#include "layers.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {

struct Share {
  /// Level-0 rows (points) computed here, ascending; then `halo`: the rows of other ranks that their
  /// neighbour lists name. "Extended rows" below are points then halo.
  std::vector<index_t> points, halo;
  /// Model-level-1 nodes (lowest voxels) computed here: [voxels_begin, voxels_end); their points are all
  /// in `points`. The levels above are computed whole on every rank.
  index_t voxels_begin = 0, voxels_end = 0;
  /// Per model level, the key lists of the queries computed here (levels 0 and 1: `points` and the owned
  /// voxels, in order; levels >= 2: all nodes). Keys: level-0 siblings as extended rows, level-1 children as
  /// rows of `points`, every other list as node ids of the key level. `pointconv`: classification's k = 16
  /// lists of the points, as extended rows.
  std::vector<KeyLists> parents, children, siblings;
  KeyLists pointconv;
  /// Set when the share was split over ranks: `to_halo` moves rows of `points` to the rows of `halo`,
  /// `voxels_to_all` the owned level-1 rows to every rank (all level-1 rows, in node order).
  bool split = false;
  ExchangePlan to_halo, voxels_to_all;

  /// Every node of `h` on one process (`siblings`: per model level, lists replacing sibling_lists).
  static Share whole(const Hierarchy& h, const Config& cfg,
                     const std::vector<std::vector<std::int64_t>>* siblings = nullptr);
  /// Collective: this rank's share of the hierarchy that every rank of `comm` holds whole. Lowest voxels
  /// go to ranks in node order, voxel v to rank floor(P * (points of the voxels before v) / N).
  static Share split_over(const Comm& comm, const Hierarchy& h, const Config& cfg);
  /// Which rank computes each point (level-0 row) under split_over's rule.
  static std::vector<int> point_owners(const Hierarchy& h, int ranks);
};

}  // namespace surrogate::sequoia
