// Neighbour lists of torch-harmonics' NeighborhoodAttentionS2 (gather mode: nlon_in a multiple of
// nlon_out, which includes self-attention): for each output latitude t and output longitude 0, every
// input point within the geodesic disc of radius (1 + 1e-3) theta_cutoff, as CSR over the output
// latitudes; output longitude wo uses the same list shifted by p*wo input longitudes, p = nlon_in /
// nlon_out. The upsampling mode's lists: neighborhood_csr_scatter. Semantics and version notes:
// share/docs/sphere.md; specification:
// docs/reference-models.md §5.4.
#pragma once

#include <cstdint>
#include <vector>

#include "surrogate/sphere/quadrature.hpp"

namespace surrogate::sphere {

/// The slack of torch-harmonics' support test (THETA_CUTOFF_EPS): points with distance
/// <= (1 + 1e-3) theta_cutoff are neighbours.
inline constexpr double kThetaCutoffEps = 1e-3;

/// torch-harmonics' default cutoff (compute_theta_cutoff, v0.9.3): the largest gap between adjacent
/// colatitudes of the grid (pi / (nlat-1) on equiangular grids). Releases before v0.9.3 used
/// pi / (nlat-1) on every grid.
double default_theta_cutoff(int nlat, Grid grid);

/// CSR neighbour lists (torch-harmonics' psi_roff_idx / psi_col_idx).
struct NeighborhoodCsr {
  int nlat_in = 0, nlon_in = 0, nlat_out = 0, nlon_out = 0;
  double theta_cutoff = 0.0;               // as given (the test uses (1 + kThetaCutoffEps) times it)
  std::vector<std::int64_t> row_offsets;   // nlat_out + 1
  std::vector<std::int64_t> columns;       // hi * nlon_in + wi, ascending within a row
  /// The input longitude of neighbour `column` for output longitude wo: (wi + p*wo) mod nlon_in.
  std::int64_t shifted(std::int64_t column, int wo) const {
    const std::int64_t p = nlon_in / nlon_out, wi = column % nlon_in;
    return column - wi + (wi + p * wo) % nlon_in;
  }
};

/// Builds the lists exactly as torch-harmonics does (float64: the input point rotated into the frame of
/// the output point, normalised, arccos of its z component compared with the widened cutoff; candidate
/// input latitudes restricted to |theta_in - theta_out| <= widened cutoff, found by binary search).
/// Requires nlon_in % nlon_out == 0 (the upsampling mode has its own lists, neighborhood_csr_scatter) and
/// theta_cutoff > 0; errors name the argument.
NeighborhoodCsr neighborhood_csr(int nlat_in, int nlon_in, Grid grid_in, int nlat_out, int nlon_out, Grid grid_out,
                                 double theta_cutoff);

/// The lists of the upsampling (scatter) mode (nlon_out a multiple of nlon_in, not the reverse), exactly
/// torch-harmonics 0.9.3's psi_roff_idx / psi_col_idx there: the construction above with the two grids
/// swapped, i.e. CSR over the *input* latitudes hi (row_offsets: nlat_in + 1 entries), columns ho *
/// nlon_out + wo (ascending) of the output points within (1 + 1e-3) theta_cutoff of input point (hi,
/// longitude 0), the distance evaluated in the input point's frame. Input longitude wi pairs with output
/// longitude (wo + (nlon_out / nlon_in) wi) mod nlon_out. The returned struct describes the swapped
/// construction: its nlat_in / nlon_in fields are the output grid's, nlat_out / nlon_out the input
/// grid's, so shifted(column, wi) gives the output point of input longitude wi. Requires nlon_out %
/// nlon_in == 0 and theta_cutoff > 0; errors name the argument.
NeighborhoodCsr neighborhood_csr_scatter(int nlat_in, int nlon_in, Grid grid_in, int nlat_out, int nlon_out,
                                         Grid grid_out, double theta_cutoff);

}  // namespace surrogate::sphere
