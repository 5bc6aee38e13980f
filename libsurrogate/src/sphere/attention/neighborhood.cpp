// Neighbour lists of NeighborhoodAttentionS2 (docs/reference-models.md §5.4). The arithmetic follows
// the official construction operation by operation in float64 so that points near the cutoff fall on
// the same side; compiled without fused multiply-add.
#include "surrogate/sphere/neighborhood.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "surrogate/error.hpp"

namespace surrogate::sphere {

namespace {
[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::invalid_argument, message); }
}  // namespace

double default_theta_cutoff(int nlat, Grid grid) {
  if (nlat < 2) invalid("default_theta_cutoff: nlat must be at least 2, got " + std::to_string(nlat));
  const Latitudes lat = latitudes(nlat, grid);
  double gap = 0.0;
  for (std::size_t i = 1; i < lat.colatitude.size(); ++i) gap = std::max(gap, lat.colatitude[i] - lat.colatitude[i - 1]);
  return gap;
}

NeighborhoodCsr neighborhood_csr(int nlat_in, int nlon_in, Grid grid_in, int nlat_out, int nlon_out, Grid grid_out,
                                 double theta_cutoff) {
  if (nlat_in < 2 || nlon_in < 1) invalid("neighborhood_csr: in_shape must be at least (2, 1)");
  if (nlat_out < 2 || nlon_out < 1) invalid("neighborhood_csr: out_shape must be at least (2, 1)");
  if (nlon_in % nlon_out)
    throw Error(ErrorCode::unsupported, "neighborhood_csr: nlon_in (" + std::to_string(nlon_in) +
                                            ") must be an integer multiple of nlon_out (" + std::to_string(nlon_out) +
                                            "); the upsampling (scatter) mode has its own lists (neighborhood_csr_scatter)");
  if (!(theta_cutoff > 0.0) || !std::isfinite(theta_cutoff))
    invalid("neighborhood_csr: theta_cutoff must be positive and finite");

  const Latitudes in = latitudes(nlat_in, grid_in), out = latitudes(nlat_out, grid_out);
  const std::vector<double> lon = longitudes(nlon_in);
  const double cutoff = (1.0 + kThetaCutoffEps) * theta_cutoff;
  std::vector<double> cbeta(lon.size()), sbeta(lon.size()), cgamma(in.colatitude.size()), sgamma(in.colatitude.size());
  for (std::size_t w = 0; w < lon.size(); ++w) {
    cbeta[w] = std::cos(lon[w]);
    sbeta[w] = std::sin(lon[w]);
  }
  for (std::size_t h = 0; h < in.colatitude.size(); ++h) {
    cgamma[h] = std::cos(in.colatitude[h]);
    sgamma[h] = std::sin(in.colatitude[h]);
  }

  NeighborhoodCsr csr;
  csr.nlat_in = nlat_in;
  csr.nlon_in = nlon_in;
  csr.nlat_out = nlat_out;
  csr.nlon_out = nlon_out;
  csr.theta_cutoff = theta_cutoff;
  csr.row_offsets.assign(1, 0);
  const auto& ci = in.colatitude;
  for (int t = 0; t < nlat_out; ++t) {
    const double theta_out = out.colatitude[static_cast<std::size_t>(t)];
    // Candidate band: first input latitude >= theta_out - cutoff, last <= theta_out + cutoff.
    const auto lo = static_cast<int>(std::lower_bound(ci.begin(), ci.end(), theta_out - cutoff) - ci.begin());
    const auto hi = static_cast<int>(std::upper_bound(ci.begin(), ci.end(), theta_out + cutoff) - ci.begin()) - 1;
    const double alpha = -theta_out;
    const double ca = std::cos(alpha), sa = std::sin(alpha);
    for (int h = lo; h <= hi; ++h) {
      const double cg = cgamma[static_cast<std::size_t>(h)], sg = sgamma[static_cast<std::size_t>(h)];
      for (int w = 0; w < nlon_in; ++w) {
        const double cb = cbeta[static_cast<std::size_t>(w)], sb = sbeta[static_cast<std::size_t>(w)];
        // The input point rotated into the output point's frame (YZY Euler angles), normalised.
        const double x = ca * cb * sg + cg * sa;
        const double y = sb * sg;
        double z = -cb * sa * sg + ca * cg;
        const double norm = std::sqrt(x * x + y * y + z * z);
        z = z / norm;
        if (std::acos(z) <= cutoff) csr.columns.push_back(static_cast<std::int64_t>(h) * nlon_in + w);
      }
    }
    csr.row_offsets.push_back(static_cast<std::int64_t>(csr.columns.size()));
  }
  return csr;
}

}  // namespace surrogate::sphere
