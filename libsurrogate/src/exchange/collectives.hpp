// All-to-all helpers on a Comm shared by the exchange plans and the distributed ball tree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "surrogate/comm.hpp"

namespace surrogate::detail {

/// counts.size() + 1 offsets: 0, c0, c0 + c1, ...
std::vector<std::size_t> exclusive_offsets(std::span<const std::size_t> counts);
/// Every rank tells every peer a count: returns the counts received, per source rank. Collective.
std::vector<std::size_t> exchange_counts(const Comm& comm, std::span<const std::size_t> send_counts);
/// alltoallv of elements of `element_bytes` bytes, counts in elements, contiguous per peer. Collective.
void alltoallv_elements(const Comm& comm, const void* send, std::span<const std::size_t> send_counts, void* recv,
                        std::span<const std::size_t> recv_counts, std::size_t element_bytes);
/// What push_records receives: the records (grouped by source rank, in each source's order) and the source
/// rank of each; with the send buffer, kept for the next call.
struct PushedRecords {
  std::vector<std::int64_t> received, sent;
  std::vector<int> source;
};
/// Records of `width` int64 values, record i to rank dest[i], into `out`. Collective.
void push_records(const Comm& comm, std::span<const std::int64_t> records, int width, std::span<const int> dest,
                  PushedRecords& out);

}  // namespace surrogate::detail
