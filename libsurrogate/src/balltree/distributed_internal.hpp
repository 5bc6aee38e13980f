// Internals of the distributed ball tree (not installed): all-to-all helpers, the distributed exact
// selection (distributed_selection.cpp) and the exact placement of distributed per-sample arrays into an
// output order cut among ranks (distributed_placement.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "surrogate/balltree_distributed.hpp"
#include "../exchange/collectives.hpp"
#include "surrogate/comm.hpp"

namespace surrogate::balltree::detail {

// All-to-all helpers (shared with the exchange plans).
using surrogate::detail::alltoallv_elements;
using surrogate::detail::exchange_counts;
using surrogate::detail::exclusive_offsets;

/// Elements of several samples spread over ranks. Sample b's serial array is the concatenation over
/// ranks r = 0, 1, ... of the counts[r * samples + b] elements rank r holds of it. Locally the elements
/// are grouped by sample (ascending), each group in serial order.
template <class T>
struct SpreadSamples {
  int dim = 0;
  std::int64_t samples = 0;
  std::vector<std::int64_t> counts;  // ranks x samples, the same on every rank
  std::vector<std::int64_t> ids;     // global id of every local element
  std::vector<T> coords;             // local elements x dim
};

/// Positions of [first, last) held by rank r of `layout`: [lo, hi), empty when lo == hi.
inline std::pair<std::int64_t, std::int64_t> overlap(const RankRanges& layout, int r, std::int64_t first, std::int64_t last) {
  const std::int64_t lo = first > layout.begin(r) ? first : layout.begin(r);
  const std::int64_t hi = last < layout.end(r) ? last : layout.end(r);
  return {lo, hi > lo ? hi : lo};
}

/// Points held by this rank during a build (work array, message buffers, gathered ranges): the current
/// count and the largest so far.
struct HeldPoints {
  std::int64_t now = 0, peak = 0;
  void add(std::int64_t k) {
    now += k;
    peak = now > peak ? now : peak;
  }
  void remove(std::int64_t k) { now -= k; }
};

/// Elements a rank sends in one batch of a selection round's swaps: max(serial_threshold, ceil(total /
/// ranks) / 8, 4096).
inline std::int64_t swap_batch_size(std::int64_t total, int ranks, std::int64_t serial_threshold) {
  const std::int64_t share = (total + ranks - 1) / ranks, eighth = share / 8;
  const std::int64_t batch = serial_threshold > eighth ? serial_threshold : eighth;
  return batch > 4096 ? batch : 4096;
}

/// The concatenated arrays of all samples (positions 0 .. layout.total()-1, sample after sample, each in
/// the order the serial code has it at that moment) laid out over the ranks: this rank holds positions
/// [layout.begin(me), layout.end(me)), element k of `ids` / `coords` being position begin + k.
template <class T>
struct WorkArray {
  int dim = 0;
  RankRanges layout;
  std::int64_t begin = 0;
  std::vector<std::int64_t> ids;
  std::vector<T> coords;
};

/// The serial split of a node, run on a range of a WorkArray in place, with the comparisons and the
/// element moves of the serial code (share/docs/balltree.md, "Distributed tree"). Every rank calls every
/// member with the same arguments (collective); a range inside one rank involves only that rank.
template <class T>
class DistributedSelection {
 public:
  /// Ranges of at most `serial_threshold` elements spread over ranks are finished on one rank.
  DistributedSelection(const Comm& comm, WorkArray<T>& work, std::int64_t serial_threshold, HeldPoints& held)
      : comm_(comm), work_(work), threshold_(serial_threshold), held_(held) {}

  /// Splitter::split_dimension of positions [first, last): the dimension of strictly largest max - min.
  int split_dimension(std::int64_t first, std::int64_t last);
  /// std::nth_element(first, nth, last) with the comparator "coordinate c less than", as libstdc++ runs it.
  void nth_element(std::int64_t first, std::int64_t nth, std::int64_t last, int c);

 private:
  double key(std::int64_t pos, int c) const {
    return static_cast<double>(work_.coords[static_cast<std::size_t>((pos - work_.begin) * work_.dim + c)]);
  }
  std::int64_t round(std::int64_t first, std::int64_t last, int c);
  void finish(std::int64_t first, std::int64_t nth, std::int64_t last, std::int64_t depth_limit, int c);
  /// Swaps elements between ranks: peer_positions[q] lists local positions whose elements are exchanged
  /// one for one, in that order, with those rank q lists for this rank. The exchange runs in `batches`
  /// all-to-alls (the same number on every rank): batch b moves elements [b L / batches, (b + 1) L /
  /// batches) of a list of length L, which both partners of a pair cut alike.
  void swap_with_peers(const std::vector<std::vector<std::int64_t>>& peer_positions, std::int64_t batches);
  /// Elements a rank sends in one batch of a round's swaps, about: max(serial_threshold, ceil(n / P) / 8,
  /// 4096).
  std::int64_t swap_batch() const;
  void swap_local(std::int64_t a, std::int64_t b);

  const Comm& comm_;
  WorkArray<T>& work_;
  std::int64_t threshold_;
  HeldPoints& held_;
};

/// What the single-process code does with each sample's array.
enum class Placement {
  tree,       // build(): padded slots, mask, recursion to the leaves
  partition,  // partition(target_level): no padding
};

/// The result for this rank's output range: ids[k] and (tree) mask[k] of output position range.begin + k;
/// the largest number of points this rank held at once (HeldPoints::peak).
struct PlacedRange {
  std::vector<std::int64_t> ids;
  std::vector<std::uint8_t> mask;
  std::int64_t peak_points = 0;
};

/// Places every sample exactly as the single-process build()/partition() of its serial array would, into
/// the global output order (sample b's outputs start at out_offsets[b]) cut among ranks by `ranges`.
/// Collective. See share/docs/balltree.md "Distributed tree" for the algorithm and its costs.
/// `serial_threshold`, `finisher`: see DistributedOptions.
template <class T>
PlacedRange place(const Comm& comm, const SpreadSamples<T>& data, Placement mode, int target_level,
                  std::span<const std::int64_t> out_offsets, const RankRanges& ranges, std::int64_t serial_threshold,
                  NodeFinisher* finisher);

}  // namespace surrogate::balltree::detail
