// Latitude bands of the spherical models across ranks. A distributed field on a
// latitude-longitude grid is a set of "global rows" g = b*P + lat*nlon + lon (sample b, P = nlat*nlon
// points per sample); every rank holds some contiguous ranges of them. The one collective here,
// fetch_rows, hands every rank any ranges of rows it asks for from whichever ranks hold them (one
// alltoallv over surrogate::Comm); it serves to move the solver's pieces to the working bands, to fetch
// halos, and to return the output to the solver's pieces. share/docs/sphere.md ("Multi-rank mode").
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "surrogate/comm.hpp"

namespace surrogate::sphere {

/// Global rows [begin, end).
struct RowRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

/// Rows [range.begin, range.end) held by this rank: row g at data + (g - range.begin) * ld, `width` floats.
struct HeldRows {
  RowRange range;
  const float* data = nullptr;
  std::int64_t ld = 0;
};

/// Collective. Every rank passes the rows it holds (disjoint across all ranks and within the rank) and the
/// ranges it wants; returns the wanted rows (`width` floats each, dense), concatenated in the order of
/// `wanted`. Rows may come from any ranks, this one included. Throws Error(internal) on every rank when a
/// wanted row is held by no rank.
std::vector<float> fetch_rows(const Comm& comm, std::span<const HeldRows> held, std::span<const RowRange> wanted,
                              int width);

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

/// HeldRows of a band buffer (rows [lat_begin, lat_end) of every sample, sample-major, `ld` floats each).
std::vector<HeldRows> band_held(std::int64_t batch, std::int64_t points, int nlon, int lat_begin, int lat_end,
                                const float* data, std::int64_t ld);

}  // namespace surrogate::sphere
