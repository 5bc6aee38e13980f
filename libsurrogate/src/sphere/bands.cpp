// Latitude bands across ranks: the row-fetch collective and the band partitions (bands.hpp).
#include "surrogate/sphere/bands.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "surrogate/error.hpp"

namespace surrogate::sphere {

using index_t = std::int64_t;

namespace {

/// One rank's held and wanted ranges as exchanged: [n_held, n_wanted, held pairs..., wanted pairs...].
struct Plan {
  std::vector<RowRange> held;  // sorted by begin
  std::vector<RowRange> wanted;
};

std::vector<Plan> exchange_plans(const Comm& comm, std::span<const HeldRows> held, std::span<const RowRange> wanted) {
  std::vector<std::int64_t> mine{static_cast<std::int64_t>(held.size()), static_cast<std::int64_t>(wanted.size())};
  std::vector<RowRange> sorted;
  for (const HeldRows& h : held)
    if (h.range.size() > 0) sorted.push_back(h.range);
  std::sort(sorted.begin(), sorted.end(), [](const RowRange& a, const RowRange& b) { return a.begin < b.begin; });
  mine[0] = static_cast<std::int64_t>(sorted.size());
  for (const RowRange& r : sorted) mine.insert(mine.end(), {r.begin, r.end});
  for (const RowRange& r : wanted) mine.insert(mine.end(), {r.begin, r.end});
  const int P = comm.size();
  std::vector<std::size_t> bytes(static_cast<std::size_t>(P)), offsets(static_cast<std::size_t>(P));
  const std::size_t my_bytes = mine.size() * sizeof(std::int64_t);
  comm.allgather(&my_bytes, sizeof(std::size_t), bytes.data());
  std::size_t total = 0;
  for (int r = 0; r < P; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += bytes[static_cast<std::size_t>(r)];
  }
  std::vector<std::int64_t> all(total / sizeof(std::int64_t));
  comm.allgatherv(mine.data(), my_bytes, all.data(), bytes, offsets);
  std::vector<Plan> plans(static_cast<std::size_t>(P));
  for (int r = 0; r < P; ++r) {
    const std::int64_t* p = all.data() + offsets[static_cast<std::size_t>(r)] / sizeof(std::int64_t);
    const std::int64_t nh = p[0], nw = p[1];
    Plan& plan = plans[static_cast<std::size_t>(r)];
    for (std::int64_t i = 0; i < nh; ++i) plan.held.push_back({p[2 + 2 * i], p[3 + 2 * i]});
    for (std::int64_t i = 0; i < nw; ++i) plan.wanted.push_back({p[2 + 2 * nh + 2 * i], p[3 + 2 * nh + 2 * i]});
  }
  return plans;
}

/// Calls f(wanted_index, intersection) for every non-empty intersection of `wanted` (in order) with
/// `held` (sorted by begin).
template <class F>
void for_each_overlap(const std::vector<RowRange>& wanted, const std::vector<RowRange>& held, F&& f) {
  for (std::size_t i = 0; i < wanted.size(); ++i)
    for (const RowRange& h : held) {
      const RowRange o{std::max(wanted[i].begin, h.begin), std::min(wanted[i].end, h.end)};
      if (o.begin < o.end) f(i, o);
    }
}

}  // namespace

std::vector<float> fetch_rows(const Comm& comm, std::span<const HeldRows> held, std::span<const RowRange> wanted,
                              int width) {
  const int P = comm.size(), me = comm.rank();
  const std::vector<Plan> plans = exchange_plans(comm, held, wanted);
  const std::vector<RowRange>& my_wanted = plans[static_cast<std::size_t>(me)].wanted;
  const std::size_t W = static_cast<std::size_t>(width);

  // Where each wanted range starts in the result.
  std::vector<index_t> out_offset(my_wanted.size() + 1, 0);
  for (std::size_t i = 0; i < my_wanted.size(); ++i) out_offset[i + 1] = out_offset[i] + my_wanted[i].size();
  // Every wanted row of every rank must be held exactly once: checked by every rank on the same data, so
  // all ranks throw together without another collective.
  for (int q = 0; q < P; ++q) {
    const std::vector<RowRange>& wanted_q = plans[static_cast<std::size_t>(q)].wanted;
    std::vector<index_t> covered(wanted_q.size(), 0);
    for (int r = 0; r < P; ++r)
      for_each_overlap(wanted_q, plans[static_cast<std::size_t>(r)].held,
                       [&](std::size_t i, const RowRange& o) { covered[i] += o.size(); });
    for (std::size_t i = 0; i < wanted_q.size(); ++i)
      if (wanted_q[i].size() < 0 || covered[i] != wanted_q[i].size())
        throw Error(ErrorCode::internal, "sphere bands: fetch_rows on " + comm.name() + ": rank " + std::to_string(q) +
                                             " wants rows [" + std::to_string(wanted_q[i].begin) + ", " +
                                             std::to_string(wanted_q[i].end) + "), of which " +
                                             std::to_string(covered[i]) + " are held (each must be held by exactly "
                                             "one rank)");
  }

  // Pack what every peer wants from this rank, in the peer's wanted order, then by global row.
  std::vector<HeldRows> mine(held.begin(), held.end());
  std::sort(mine.begin(), mine.end(), [](const HeldRows& a, const HeldRows& b) { return a.range.begin < b.range.begin; });
  std::vector<RowRange> my_held;
  for (const HeldRows& h : mine)
    if (h.range.size() > 0) my_held.push_back(h.range);
  const auto source = [&](index_t g) -> const float* {
    for (const HeldRows& h : mine)
      if (g >= h.range.begin && g < h.range.end) return h.data + (g - h.range.begin) * h.ld;
    return nullptr;  // unreachable: g lies in an overlap with a held range
  };
  std::vector<std::size_t> send_bytes(static_cast<std::size_t>(P), 0), send_offsets(static_cast<std::size_t>(P), 0);
  std::vector<float> send;
  for (int r = 0; r < P; ++r) {
    send_offsets[static_cast<std::size_t>(r)] = send.size() * sizeof(float);
    for_each_overlap(plans[static_cast<std::size_t>(r)].wanted, my_held, [&](std::size_t, const RowRange& o) {
      for (index_t g = o.begin; g < o.end; ++g) {
        const float* row = source(g);
        send.insert(send.end(), row, row + W);
      }
    });
    send_bytes[static_cast<std::size_t>(r)] = send.size() * sizeof(float) - send_offsets[static_cast<std::size_t>(r)];
  }

  // Receive buffer in peer order; then the rows are placed where the wanted ranges put them.
  std::vector<std::size_t> recv_bytes(static_cast<std::size_t>(P), 0), recv_offsets(static_cast<std::size_t>(P), 0);
  std::size_t total = 0;
  for (int r = 0; r < P; ++r) {
    recv_offsets[static_cast<std::size_t>(r)] = total;
    index_t rows = 0;
    for_each_overlap(my_wanted, plans[static_cast<std::size_t>(r)].held,
                     [&](std::size_t, const RowRange& o) { rows += o.size(); });
    recv_bytes[static_cast<std::size_t>(r)] = static_cast<std::size_t>(rows) * W * sizeof(float);
    total += recv_bytes[static_cast<std::size_t>(r)];
  }
  std::vector<float> recv(total / sizeof(float));
  comm.alltoallv(send.data(), send_bytes, send_offsets, recv.data(), recv_bytes, recv_offsets);

  std::vector<float> result(static_cast<std::size_t>(out_offset.back()) * W);
  for (int r = 0; r < P; ++r) {
    const float* src = recv.data() + recv_offsets[static_cast<std::size_t>(r)] / sizeof(float);
    for_each_overlap(my_wanted, plans[static_cast<std::size_t>(r)].held, [&](std::size_t i, const RowRange& o) {
      const std::size_t n = static_cast<std::size_t>(o.size()) * W;
      std::memcpy(result.data() + static_cast<std::size_t>(out_offset[i] + o.begin - my_wanted[i].begin) * W, src,
                  n * sizeof(float));
      src += n;
    });
  }
  return result;
}

BandPartition balanced_bands(int nlat, int ranks) {
  BandPartition b;
  b.first.resize(static_cast<std::size_t>(ranks) + 1);
  for (int r = 0; r <= ranks; ++r)
    b.first[static_cast<std::size_t>(r)] =
        static_cast<int>(static_cast<std::int64_t>(nlat) * r / static_cast<std::int64_t>(ranks));
  return b;
}

BandPartition bands_from_points(int nlat, int nlon, std::span<const index_t> first_point) {
  const int ranks = static_cast<int>(first_point.size()) - 1;
  BandPartition b;
  b.first.resize(static_cast<std::size_t>(ranks) + 1);
  // Rank r computes the rows whose first point lies in [first_point[r], first_point[r+1]).
  for (int r = 0; r <= ranks; ++r) {
    const index_t p = first_point[static_cast<std::size_t>(r)];
    b.first[static_cast<std::size_t>(r)] = static_cast<int>(std::min<index_t>(nlat, (p + nlon - 1) / nlon));
  }
  b.first[0] = 0;
  b.first.back() = nlat;
  return b;
}

BandPartition matching_bands(const BandPartition& from, std::span<const double> colat_from,
                             std::span<const double> colat_to) {
  const int ranks = static_cast<int>(from.first.size()) - 1;
  const int n_from = static_cast<int>(colat_from.size()), n_to = static_cast<int>(colat_to.size());
  // owner of each row of `from`
  std::vector<int> owner(static_cast<std::size_t>(n_from), 0);
  for (int r = 0; r < ranks; ++r)
    for (int i = from.begin(r); i < from.end(r); ++i) owner[static_cast<std::size_t>(i)] = r;
  BandPartition b;
  b.first.assign(static_cast<std::size_t>(ranks) + 1, n_to);
  b.first[0] = 0;
  std::vector<int> count(static_cast<std::size_t>(ranks), 0);
  for (int t = 0; t < n_to; ++t) {
    const double c = colat_to[static_cast<std::size_t>(t)];
    const auto it = std::lower_bound(colat_from.begin(), colat_from.end(), c);
    int i = static_cast<int>(it - colat_from.begin());
    if (i == n_from) i = n_from - 1;
    else if (i > 0 && c - colat_from[static_cast<std::size_t>(i - 1)] <= colat_from[static_cast<std::size_t>(i)] - c) --i;
    ++count[static_cast<std::size_t>(owner[static_cast<std::size_t>(i)])];
  }
  for (int r = 0; r < ranks; ++r) b.first[static_cast<std::size_t>(r) + 1] = b.first[static_cast<std::size_t>(r)] + count[static_cast<std::size_t>(r)];
  return b;
}

std::vector<RowRange> band_ranges(index_t batch, index_t points, int nlon, int lat_begin, int lat_end) {
  std::vector<RowRange> out;
  if (lat_begin >= lat_end) return out;
  for (index_t b = 0; b < batch; ++b)
    out.push_back({b * points + static_cast<index_t>(lat_begin) * nlon, b * points + static_cast<index_t>(lat_end) * nlon});
  return out;
}

std::vector<HeldRows> band_held(index_t batch, index_t points, int nlon, int lat_begin, int lat_end, const float* data,
                                index_t ld) {
  std::vector<HeldRows> out;
  const index_t rows = static_cast<index_t>(std::max(0, lat_end - lat_begin)) * nlon;
  for (const RowRange& r : band_ranges(batch, points, nlon, lat_begin, lat_end))
    out.push_back({r, data + (r.begin / points) * rows * ld, ld});
  return out;
}

}  // namespace surrogate::sphere
