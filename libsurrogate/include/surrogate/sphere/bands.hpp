// Latitude bands of the spherical models across ranks. A distributed field on a latitude-longitude grid
// is a set of "global rows" g = b*P + lat*nlon + lon (sample b, P = nlat*nlon points per sample); every
// rank holds some ranges of them. Rows move between ranks by surrogate::ExchangePlan (from_ranges: the
// ranges a rank holds and the ranges it wants), built once per point set. share/docs/sphere.md
// ("Multi-rank mode").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "surrogate/comm.hpp"
#include "surrogate/exchange.hpp"

namespace surrogate::sphere {

/// Global rows [begin, end).
using RowRange = surrogate::RowRange;

/// The latitude rows [begin, end) each rank computes on a grid of `nlat` rows: contiguous, in rank order,
/// covering every row once (empty bands allowed).
struct BandPartition {
  std::vector<int> first;  // size ranks + 1: rank r computes rows [first[r], first[r+1])
  int begin(int rank) const { return first[static_cast<std::size_t>(rank)]; }
  int end(int rank) const { return first[static_cast<std::size_t>(rank) + 1]; }
  int rows(int rank) const { return end(rank) - begin(rank); }
  int nlat() const { return first.back(); }
};

/// Rows split as evenly as possible: rank r gets [nlat*r/ranks, nlat*(r+1)/ranks).
BandPartition balanced_bands(int nlat, int ranks);

/// The band of the solver's own partition: rank r computes the rows whose first point (longitude 0) it
/// holds in sample 0. `first_point[r]` = index in the sample of the first point rank r holds (ranks
/// in rank order, non-decreasing), `first_point[ranks]` = nlat*nlon.
BandPartition bands_from_points(int nlat, int nlon, std::span<const std::int64_t> first_point);

/// The partition of a second grid of `nlat_to` rows derived from `from` (colatitudes `colat_from`,
/// `colat_to`, both ascending): row t goes to the rank computing the row of `from` nearest in colatitude
/// (ties to the northern one), so that bands of the two grids cover about the same zone.
BandPartition matching_bands(const BandPartition& from, std::span<const double> colat_from,
                             std::span<const double> colat_to);

/// The row ranges of rows [lat_begin, lat_end) of every sample of a grid with `nlon` longitudes and
/// `points` points per sample, sample-major (empty when lat_begin >= lat_end).
std::vector<RowRange> band_ranges(std::int64_t batch, std::int64_t points, int nlon, int lat_begin, int lat_end);

/// Collective. The exchange from a band buffer (this rank's rows [lat_begin, lat_end) of every sample,
/// sample-major: the ranges of band_ranges, packed) to the rows `wanted` (concatenated in order), e.g. a
/// halo. Every wanted row must lie in some rank's band (else Error(internal) on every rank).
ExchangePlan band_exchange(const Comm& comm, std::int64_t batch, std::int64_t points, int nlon, int lat_begin,
                           int lat_end, std::span<const RowRange> wanted);

/// Collective. Every row of every sample (sample-major, grid order) to each rank whose band under `bands`
/// is non-empty, from the ranks' band buffers (as band_exchange; `points` = bands.nlat() * nlon). With
/// one sample and no empty band this is ExchangePlan::all_gather (the bands are in rank order); otherwise
/// from_ranges, ranks without a band receiving nothing.
ExchangePlan gather_bands(const Comm& comm, const BandPartition& bands, std::int64_t batch, int nlon);

}  // namespace surrogate::sphere
