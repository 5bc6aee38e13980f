// Sorting keys within segments over the ranks of a communicator (a sample sort): this rank's piece of
// the global order with every element's rank in its segment, or the ranks returned to their records.
// share/docs/adding-a-family.md, "Moving data".
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "surrogate/comm.hpp"

namespace surrogate::detail {

/// An element to sort: its key as an order image (order_image, or kernels' ordered_bits), the
/// tie-breaker, a payload the caller reads back, its segment and the rank it came from. The pairs
/// (segment, tie) must be unique over all ranks.
struct SortElement {
  std::uint64_t bits = 0;
  std::int64_t tie = 0, payload = 0;
  std::int32_t segment = 0, origin = 0;
};

/// Unsigned images that order as the values do: doubles with -0 equal to +0 (as `<` orders them; NaN
/// above +inf), signed integers.
std::uint64_t order_image(double value);
std::uint64_t order_image(std::int64_t value);

/// This rank's piece of the global order: the elements of segment s at held[first[s] .. first[s+1]) in
/// (bits, tie) order, the first of them at rank offset[s] of its segment (0-based, over all ranks); and
/// every rank's piece sizes, counts[r * segments + s] (rank r's pieces follow in rank order).
struct SortedPiece {
  std::vector<SortElement> held;
  std::vector<std::int64_t> first, offset, counts;
  std::vector<SortElement> sent, received;  // buffers of the sort, kept for the next call
};

/// Collective sample sort. `local`: this rank's elements grouped by segment (segment s at
/// local[local_first[s] .. local_first[s+1])), each group in (bits, tie) order; `local_first` has
/// `segments` + 1 entries on every rank. Splitters per segment from min(4P, 128) regular samples of every
/// rank's group, each weighted by the share of the group it stands for, so that the pieces hold about
/// 1/P of every segment however the elements are spread; each rank merges the runs it receives (OpenMP
/// over segments with `threads`). The ranks do not depend on how the elements are spread over the ranks.
/// The result goes to `piece`, whose vectors are reused (a piece kept between calls allocates nothing
/// once its buffers are large enough).
void sort_segments(const Comm& comm, std::span<const SortElement> local, std::span<const std::int64_t> local_first,
                   int threads, SortedPiece& piece);

/// sort_segments with the pieces cut between groups (reference-models §4.12's region-aware sort): element
/// i of `local` belongs to group[i] in [0, groups), and a segment's groups are meant to follow its key
/// order (HEPT's region codes: keys P + code Delta). One reduction of every segment's group counts and key
/// bounds picks, per segment, the group boundary nearest each q / P of the segment; no samples are
/// gathered. Where the groups' keys overlap at a chosen boundary (rounding can interleave neighbouring
/// regions), a piece would exceed 1/P of its segment by more than a quarter, or segments x groups exceeds
/// kMaxSortGroupCells, it uses sort_segments' sampled splitters instead (the same choice on every rank).
/// Either way the result is sort_segments' (the same global order, pieces of other sizes). Returns whether
/// the pieces were cut between groups. Collective; a group out of range is an agreed internal error.
inline constexpr std::int64_t kMaxSortGroupCells = std::int64_t{1} << 20;
bool sort_segments_by_group(const Comm& comm, std::span<const SortElement> local,
                            std::span<const std::int64_t> local_first, std::span<const std::int64_t> group,
                            std::int64_t groups, int threads, SortedPiece& piece);

/// A record to rank: its segment, its key (an order image) and a tie-breaker.
struct RankRecord {
  std::uint64_t segment = 0, key = 0;
  std::int64_t tie = 0;
};

/// For every local record, its 0-based rank among all ranks' records of its segment ordered by (key,
/// tie): the position of a stable sort by key when `tie` is the record's index in its segment. Segments
/// are numbered below `segments` (the same count on every rank). Collective: sort_segments, then the
/// ranks back to the records' ranks.
std::vector<std::int64_t> ranks_in_segments(const Comm& comm, std::span<const RankRecord> records,
                                            std::uint64_t segments);

}  // namespace surrogate::detail
