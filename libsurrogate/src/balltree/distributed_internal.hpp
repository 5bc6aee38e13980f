// Internals of the distributed ball tree (not installed): all-to-all helpers and the exact placement of
// distributed per-sample arrays into an output order cut among ranks (distributed_placement.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "surrogate/balltree_distributed.hpp"
#include "surrogate/comm.hpp"

namespace surrogate::balltree::detail {

std::vector<std::size_t> exclusive_offsets(std::span<const std::size_t> counts);
/// Every rank tells every peer a count: returns the counts received, per source rank.
std::vector<std::size_t> exchange_counts(const Comm& comm, std::span<const std::size_t> send_counts);
/// alltoallv of elements of `element_bytes` bytes, counts in elements, contiguous per peer.
void alltoallv_elements(const Comm& comm, const void* send, std::span<const std::size_t> send_counts, void* recv,
                        std::span<const std::size_t> recv_counts, std::size_t element_bytes);

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

/// What the single-process code does with each sample's array.
enum class Placement {
  tree,       // build(): padded slots, mask, recursion to the leaves
  partition,  // partition(target_level): no padding
};

/// The result for this rank's output range: ids[k] and (tree) mask[k] of output position range.begin + k.
struct PlacedRange {
  std::vector<std::int64_t> ids;
  std::vector<std::uint8_t> mask;
};

/// Places every sample exactly as the single-process build()/partition() of its serial array would, into
/// the global output order (sample b's outputs start at out_offsets[b]) cut among ranks by `ranges`.
/// Collective. See share/docs/balltree.md "Distributed tree" for the algorithm and its costs.
template <class T>
PlacedRange place(const Comm& comm, const SpreadSamples<T>& data, Placement mode, int target_level,
                  std::span<const std::int64_t> out_offsets, const RankRanges& ranges);

}  // namespace surrogate::balltree::detail
