// Latitude bands across ranks: the band partitions and the exchanges between bands (bands.hpp).
#include "surrogate/sphere/bands.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "surrogate/error.hpp"

namespace surrogate::sphere {

using index_t = std::int64_t;

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

ExchangePlan band_exchange(const Comm& comm, index_t batch, index_t points, int nlon, int lat_begin, int lat_end,
                           std::span<const RowRange> wanted) {
  const std::vector<RowRange> held = band_ranges(batch, points, nlon, lat_begin, lat_end);
  const index_t rows = static_cast<index_t>(std::max(0, lat_end - lat_begin)) * nlon;
  std::vector<index_t> first_row;
  for (std::size_t b = 0; b < held.size(); ++b) first_row.push_back(static_cast<index_t>(b) * rows);
  return ExchangePlan::from_ranges(comm, batch * rows, held, first_row, wanted);
}

ExchangePlan gather_bands(const Comm& comm, const BandPartition& bands, index_t batch, int nlon) {
  const int me = comm.rank(), nlat = bands.nlat();
  const index_t points = static_cast<index_t>(nlat) * nlon;
  bool every_band = true;
  for (int r = 0; r < comm.size(); ++r) every_band = every_band && bands.rows(r) > 0;
  if (batch == 1 && every_band) return ExchangePlan::all_gather(comm, static_cast<index_t>(bands.rows(me)) * nlon);
  const std::vector<RowRange> wanted = band_ranges(batch, points, nlon, 0, bands.rows(me) > 0 ? nlat : 0);
  return band_exchange(comm, batch, points, nlon, bands.begin(me), bands.end(me), wanted);
}

}  // namespace surrogate::sphere
