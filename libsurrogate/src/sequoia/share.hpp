// The part of a forward one rank computes over a hierarchy (share/docs/sequoia.md, "Across ranks"): whole
// lowest-level voxels with their points, the voxel levels above on every rank, the neighbour lists of the
// queries computed here and the exchanges that feed them.
#pragma once

#include <cstdint>
#include <vector>

#include "layers.hpp"
#include "neighbours.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {

struct Share {
  /// Level-0 rows (points) computed here, ascending; then `halo`: the rows of other ranks that their
  /// neighbour lists name. "Extended rows" below are points then halo.
  std::vector<index_t> points, halo;
  /// Model-level-1 nodes (lowest voxels) computed here, ascending; their points are all in `points`, and
  /// point t lies in voxels[slot[t]]. The levels above are computed whole on every rank.
  std::vector<index_t> voxels, slot;
  /// Per model level, the key lists of the queries computed here (levels 0 and 1: `points` and the owned
  /// voxels, in order; levels >= 2: all nodes). Keys: level-0 siblings as extended rows, level-1 children as
  /// rows of `points`, every other list as node ids of the key level. `pointconv`: classification's k = 16
  /// lists of the points, as extended rows.
  std::vector<KeyLists> parents, children, siblings;
  KeyLists pointconv;
  /// Set when the share was split over ranks: `to_halo` moves rows of `points` to the rows of `halo`,
  /// `voxels_to_all` the rows of `voxels` to every rank (all level-1 rows, in node order).
  bool split = false;
  ExchangePlan to_halo, voxels_to_all;

  /// Every node of `h` on one process (`siblings`: per model level, lists replacing sibling_lists; `find`:
  /// where the neighbour lists are computed, the host when empty).
  static Share whole(const Hierarchy& h, const Config& cfg,
                     const std::vector<std::vector<std::int64_t>>* siblings = nullptr, const NearestFinder& find = {});
  /// Collective: this rank's share of the hierarchy that every rank of `comm` holds whole (voxel_owners).
  static Share split_over(const Comm& comm, const Hierarchy& h, const Config& cfg, const NearestFinder& find = {});
  /// The rank of every lowest voxel: the voxels in spatial order (samples in order, then the Morton order
  /// of the voxel centres), voxel v to rank floor(P * (points of the voxels before v in that order) / N).
  static std::vector<int> voxel_owners(const Hierarchy& h, int ranks);
};

}  // namespace surrogate::sequoia
