// The canonical order of a distributed batch without gathering it (point_cloud_model.hpp,
// route_canonical; share/docs/balltree.md "Running Erwin", multi-rank). Canonical order: samples in
// order, the points of a sample by increasing global id. Global ids are dense (0 .. N-1, each once), so
// the id ranges [N r / P, N (r+1) / P) split the keys evenly and the rank owning a range can number its
// ids without seeing the others': the canonical slot of id i of sample s is
//   sample_offset[s] + (points of s with ids on ranks before) + (points of s with smaller ids in the range).
// Every buffer holds either this rank's rows, its id range or its block: O(N / P + local points).
#include <algorithm>
#include <cstring>
#include <string>

#include "distributed_internal.hpp"
#include "point_cloud_model.hpp"
#include "surrogate/error.hpp"

namespace surrogate {
namespace {

using balltree::RankRanges;
namespace bd = balltree::detail;

constexpr int kScanTag = 9217;

/// rank r owns [total * r / P, total * (r+1) / P) (ids, and canonical slots for the blocks).
RankRanges balanced_ranges(std::int64_t total, int ranks) {
  RankRanges ranges;
  ranges.bounds.resize(static_cast<std::size_t>(ranks) + 1);
  for (int r = 0; r <= ranks; ++r) ranges.bounds[static_cast<std::size_t>(r)] = total * r / ranks;
  return ranges;
}

/// Element-wise exclusive prefix sum over ranks of `values` (the same length on every rank), by recursive
/// doubling (ceil(log2 P) sendrecv rounds of values.size() integers).
std::vector<std::int64_t> exclusive_scan_over_ranks(const Comm& comm, std::vector<std::int64_t> values) {
  const int rank = comm.rank(), ranks = comm.size();
  const std::size_t bytes = values.size() * sizeof(std::int64_t);
  std::vector<std::int64_t> prefix(values.size(), 0), received(values.size());
  for (int distance = 1; distance < ranks; distance *= 2) {
    const int dest = rank + distance < ranks ? rank + distance : -1, source = rank - distance;
    comm.sendrecv(values.data(), dest >= 0 ? bytes : 0, dest, received.data(), source >= 0 ? bytes : 0,
                  source >= 0 ? source : -1, kScanTag);
    if (source < 0) continue;
    for (std::size_t i = 0; i < values.size(); ++i) {
      prefix[i] += received[i];
      values[i] += received[i];
    }
  }
  return prefix;
}

/// An all-to-all of per-element records: element e goes to rank destination[e]; a rank receives the
/// elements of rank 0 first, then rank 1, ..., each rank's in its element order. back() returns answers
/// (one record per received element) to the elements' ranks, in element order. Collective.
class Route {
 public:
  Route(const Comm& comm, std::span<const int> destination) : comm_(comm) {
    const auto p = static_cast<std::size_t>(comm.size());
    send_counts_.assign(p, 0);
    for (const int r : destination) ++send_counts_[static_cast<std::size_t>(r)];
    std::vector<std::size_t> fill = bd::exclusive_offsets(send_counts_);
    position_.resize(destination.size());
    for (std::size_t e = 0; e < destination.size(); ++e) position_[e] = fill[static_cast<std::size_t>(destination[e])]++;
    recv_counts_ = bd::exchange_counts(comm, send_counts_);
    for (const std::size_t c : recv_counts_) received_ += c;
  }
  std::size_t received() const { return received_; }
  /// The source rank of every received element.
  std::vector<int> sources() const {
    std::vector<int> source;
    source.reserve(received_);
    for (std::size_t r = 0; r < recv_counts_.size(); ++r) source.insert(source.end(), recv_counts_[r], static_cast<int>(r));
    return source;
  }
  /// values: elements x width -> received x width.
  template <class T>
  std::vector<T> send(std::span<const T> values, std::size_t width) const {
    std::vector<T> packed(position_.size() * width), out(received_ * width);
    for (std::size_t e = 0; e < position_.size(); ++e)
      std::copy_n(values.data() + e * width, width, packed.data() + position_[e] * width);
    bd::alltoallv_elements(comm_, packed.data(), send_counts_, out.data(), recv_counts_, width * sizeof(T));
    return out;
  }
  /// answers: received x width -> elements x width.
  template <class T>
  std::vector<T> back(std::span<const T> answers, std::size_t width) const {
    std::vector<T> packed(position_.size() * width), out(position_.size() * width);
    bd::alltoallv_elements(comm_, answers.data(), recv_counts_, packed.data(), send_counts_, width * sizeof(T));
    for (std::size_t e = 0; e < position_.size(); ++e)
      std::copy_n(packed.data() + position_[e] * width, width, out.data() + e * width);
    return out;
  }

 private:
  const Comm& comm_;
  std::vector<std::size_t> send_counts_, recv_counts_, position_;  // position_: element -> packed index
  std::size_t received_ = 0;
};

/// What the rank owning an id range knows: the sample and canonical slot of each of its ids.
struct IdTable {
  std::int64_t first = 0;
  std::vector<std::int64_t> sample, slot;  // per id of the range
};

/// Answers (slot, sample) for ids of this rank's range asked through `route`.
std::vector<std::int64_t> answer_ids(const IdTable& table, std::span<const std::int64_t> asked) {
  std::vector<std::int64_t> answers(2 * asked.size());
  for (std::size_t q = 0; q < asked.size(); ++q) {
    const auto k = static_cast<std::size_t>(asked[q] - table.first);
    answers[2 * q] = table.slot[k];
    answers[2 * q + 1] = table.sample[k];
  }
  return answers;
}

}  // namespace

CanonicalBatch route_canonical(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry, int dim,
                               const float* in, index_t ld_in, int channels, GivenEdges given) {
  const int P = comm.size(), me = comm.rank();
  const index_t n = layout.local_points(), total = layout.global_points();
  const RankRanges ranges = balanced_ranges(total, P);
  CanonicalBatch result;
  result.block_bounds = ranges.bounds;
  std::vector<std::int64_t> offsets{0};
  for (const index_t size : layout.sample_sizes()) offsets.push_back(offsets.back() + size);
  if (total > 0) result.batch = balltree::Batch::from_offsets(offsets);
  const auto B = static_cast<std::size_t>(layout.num_samples());
  std::int64_t largest = n;

  // Steps 1-3 in a scope: the routed records die before the blocks are filled.
  IdTable table;  // kept for the given edges' questions
  table.first = ranges.begin(me);
  largest = std::max<std::int64_t>(largest, ranges.size(me));
  {
    // 1. Every row's (id, sample, row) to the owner of the id's range.
    std::vector<std::int64_t> records(static_cast<std::size_t>(3 * n));
    std::vector<int> id_owner(static_cast<std::size_t>(n));
    collectively(comm, [&] {
      for (const auto& seg : layout.segments())
        for (index_t row = seg.begin; row < seg.end; ++row) {
          const std::int64_t id = geometry.global_ids[row];
          if (id < 0 || id >= total)
            throw Error(ErrorCode::input, "global id " + std::to_string(id) + " of local point " + std::to_string(row) +
                                              " is outside 0.." + std::to_string(total - 1));
          records[static_cast<std::size_t>(3 * row)] = id;
          records[static_cast<std::size_t>(3 * row + 1)] = seg.sample;
          records[static_cast<std::size_t>(3 * row + 2)] = row;
          id_owner[static_cast<std::size_t>(row)] = ranges.owner(id);
        }
    });
    const Route to_id_owners(comm, id_owner);
    id_owner = {};
    const std::vector<std::int64_t> owned = to_id_owners.send<std::int64_t>(records, 3);
    records = {};
    largest = std::max<std::int64_t>(largest, static_cast<std::int64_t>(to_id_owners.received()));

    // 2. The id owner: duplicates, counts per sample, their prefix over ranks, the slot of every id.
    table.sample.assign(static_cast<std::size_t>(ranges.size(me)), -1);
    {
      const std::vector<int> holder = to_id_owners.sources();
      std::vector<std::int64_t> holder_of(table.sample.size());  // id of the range -> the record that gave it
      collectively(comm, [&] {
        for (std::size_t q = 0; q < to_id_owners.received(); ++q) {
          const std::int64_t id = owned[3 * q];
          const auto k = static_cast<std::size_t>(id - table.first);
          if (table.sample[k] >= 0) {
            const auto first = static_cast<std::size_t>(holder_of[k]);
            throw Error(ErrorCode::input, "global id " + std::to_string(id) + " is given to more than one point (rank " +
                                              std::to_string(holder[first]) + " local point " +
                                              std::to_string(owned[3 * first + 2]) + " and rank " +
                                              std::to_string(holder[q]) + " local point " +
                                              std::to_string(owned[3 * q + 2]) + ")");
          }
          table.sample[k] = owned[3 * q + 1];
          holder_of[k] = static_cast<std::int64_t>(q);
        }
      });
    }
    // Every id is now held exactly once (N ids in range, none twice), so every entry of the table is set.
    std::vector<std::int64_t> count(B, 0);
    for (const std::int64_t s : table.sample) ++count[static_cast<std::size_t>(s)];
    std::vector<std::int64_t> next = exclusive_scan_over_ranks(comm, std::move(count));
    for (std::size_t s = 0; s < B; ++s) next[s] += offsets[s];
    table.slot.resize(table.sample.size());
    for (std::size_t k = 0; k < table.sample.size(); ++k) table.slot[k] = next[static_cast<std::size_t>(table.sample[k])]++;

    // 3. The slots back to the rows' ranks.
    std::vector<std::int64_t> slots(to_id_owners.received());
    for (std::size_t q = 0; q < slots.size(); ++q) slots[q] = table.slot[static_cast<std::size_t>(owned[3 * q] - table.first)];
    result.canonical_of_row = to_id_owners.back<std::int64_t>(slots, 1);
  }
  if (given == GivenEdges::ignore) table = {};

  // 4. Every row's (slot, row) and position (and features) to the owner of the slot's block.
  {
    const auto width = static_cast<std::size_t>(dim + channels);
    std::vector<std::int64_t> got_meta;
    std::vector<float> got;
    std::vector<int> source;
    {
      std::vector<int> block_owner(static_cast<std::size_t>(n));
      std::vector<std::int64_t> meta(static_cast<std::size_t>(2 * n));
      std::vector<float> payload(static_cast<std::size_t>(n) * width);
      for (index_t row = 0; row < n; ++row) {
        const std::int64_t slot = result.canonical_of_row[static_cast<std::size_t>(row)];
        block_owner[static_cast<std::size_t>(row)] = ranges.owner(slot);
        meta[static_cast<std::size_t>(2 * row)] = slot;
        meta[static_cast<std::size_t>(2 * row + 1)] = row;
        float* p = payload.data() + static_cast<std::size_t>(row) * width;
        std::copy_n(geometry.positions + row * geometry.ld_positions, dim, p);
        if (channels > 0) std::copy_n(in + row * ld_in, channels, p + dim);
      }
      const Route to_blocks(comm, block_owner);
      block_owner = {};
      got_meta = to_blocks.send<std::int64_t>(meta, 2);
      meta = {};
      got = to_blocks.send<float>(payload, width);
      source = to_blocks.sources();
    }
    const auto rows = static_cast<std::size_t>(ranges.size(me));
    collectively(comm, [&] {
      if (source.size() != rows)
        throw Error(ErrorCode::internal, "canonical order: rank " + std::to_string(me) + " received " +
                                             std::to_string(source.size()) + " points for a block of " +
                                             std::to_string(rows));
    });
    result.positions.resize(rows * static_cast<std::size_t>(dim));
    result.features.resize(rows * static_cast<std::size_t>(channels));
    result.owner_rank.resize(rows);
    result.owner_row.resize(rows);
    for (std::size_t q = 0; q < rows; ++q) {
      const auto k = static_cast<std::size_t>(got_meta[2 * q] - ranges.begin(me));
      const float* p = got.data() + q * width;
      std::copy_n(p, dim, result.positions.data() + k * static_cast<std::size_t>(dim));
      std::copy_n(p + dim, channels, result.features.data() + k * static_cast<std::size_t>(channels));
      result.owner_rank[k] = source[q];
      result.owner_row[k] = got_meta[2 * q + 1];
    }
  }
  result.largest_point_buffer = largest;

  // 5. Given edges: ask the id owners for both ends' slots and samples; refuse an edge joining two samples.
  if (given == GivenEdges::ignore) return result;
  result.edges_given = true;
  const index_t E = geometry.edge_index ? geometry.num_edges : 0;
  std::vector<std::int64_t> pairs(static_cast<std::size_t>(2 * E));  // (j, i) per edge, canonical
  {
    std::vector<int> asked_owner(pairs.size());
    collectively(comm, [&] {
      for (index_t e = 0; e < E; ++e)
        for (int end = 0; end < 2; ++end) {
          const std::int64_t id = geometry.edge_index[end * E + e];
          if (id < 0 || id >= total)
            throw Error(ErrorCode::input, std::string("edge_index: ") + (end == 0 ? "source" : "receiver") + " of edge " +
                                              std::to_string(e) + " is " + std::to_string(id) +
                                              ", outside the global point ids 0.." + std::to_string(total - 1));
          pairs[static_cast<std::size_t>(2 * e + end)] = id;
          asked_owner[static_cast<std::size_t>(2 * e + end)] = ranges.owner(id);
        }
    });
    const Route ask(comm, asked_owner);
    const std::vector<std::int64_t> asked = ask.send<std::int64_t>(pairs, 1);
    const std::vector<std::int64_t> answers = ask.back<std::int64_t>(answer_ids(table, asked), 2);
    collectively(comm, [&] {
      for (index_t e = 0; e < E; ++e) {
        const auto a = static_cast<std::size_t>(4 * e);
        if (answers[a + 1] != answers[a + 3])
          throw Error(ErrorCode::input, "edge_index: edge " + std::to_string(pairs[static_cast<std::size_t>(2 * e)]) + " -> " +
                                            std::to_string(pairs[static_cast<std::size_t>(2 * e + 1)]) +
                                            " joins two samples (" + std::to_string(answers[a + 1]) + " and " +
                                            std::to_string(answers[a + 3]) + ")");
      }
    });
    for (std::size_t e = 0; e < static_cast<std::size_t>(E); ++e) {
      pairs[2 * e] = answers[4 * e];
      pairs[2 * e + 1] = answers[4 * e + 2];
    }
  }
  if (given == GivenEdges::to_blocks) {
    // Each edge to the owner of its receiver's block: a block receives them rank by rank, each rank's in
    // its order, i.e. in the order of the rank-major union.
    std::vector<int> receiver_owner(static_cast<std::size_t>(E));
    for (std::size_t e = 0; e < receiver_owner.size(); ++e) receiver_owner[e] = ranges.owner(pairs[2 * e + 1]);
    const Route to_receivers(comm, receiver_owner);
    pairs = to_receivers.send<std::int64_t>(pairs, 2);
  }
  const std::size_t count_edges = pairs.size() / 2;
  result.edges.resize(pairs.size());
  for (std::size_t e = 0; e < count_edges; ++e) {
    result.edges[e] = pairs[2 * e];
    result.edges[count_edges + e] = pairs[2 * e + 1];
  }
  return result;
}

}  // namespace surrogate
