// Neighbour lists of NeighborhoodAttentionS2: identical to torch-harmonics' psi_roff_idx / psi_col_idx
// (tests/data/sphere/neighborhood.h5), against brute force over the whole grid for every output
// longitude (poles, the seam at 0 / 2 pi, the longitude-shift trick), default cutoffs, bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <numbers>
#include <set>
#include <string>
#include <vector>

#include "h5_reader.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/neighborhood.hpp"

namespace sphere = surrogate::sphere;
using sphere::Grid;

namespace {

std::string data_file(const char* name) { return std::string(SURROGATE_TEST_DATA_DIR) + "/sphere/" + name; }

std::vector<std::int64_t> to_int(const std::vector<double>& v) {
  std::vector<std::int64_t> r;
  for (double x : v) r.push_back(static_cast<std::int64_t>(x));
  return r;
}

/// Brute force: great-circle distance between unit vectors in long double, for output point (t, wo).
/// Returns the neighbours and counts the pairs too close to the cutoff to decide (|d - cutoff| < 1e-9).
std::set<std::int64_t> brute_force(const sphere::Latitudes& in, int nlon_in, const sphere::Latitudes& out, int nlon_out,
                                   int t, int wo, double cutoff, std::set<std::int64_t>& ambiguous) {
  std::set<std::int64_t> result;
  const long double pi = std::numbers::pi_v<long double>;
  const long double to = out.colatitude[static_cast<std::size_t>(t)], lo = 2 * pi * wo / nlon_out;
  const long double ox = std::sin(to) * std::cos(lo), oy = std::sin(to) * std::sin(lo), oz = std::cos(to);
  for (std::size_t h = 0; h < in.colatitude.size(); ++h)
    for (int w = 0; w < nlon_in; ++w) {
      const long double ti = in.colatitude[h], li = 2 * pi * w / nlon_in;
      const long double ix = std::sin(ti) * std::cos(li), iy = std::sin(ti) * std::sin(li), iz = std::cos(ti);
      // atan2 of |cross| and dot: accurate for small and large angles alike.
      const long double cx = oy * iz - oz * iy, cy = oz * ix - ox * iz, cz = ox * iy - oy * ix;
      const long double d = std::atan2(std::sqrt(cx * cx + cy * cy + cz * cz), ox * ix + oy * iy + oz * iz);
      const auto col = static_cast<std::int64_t>(h) * nlon_in + w;
      if (std::abs(d - static_cast<long double>(cutoff)) < 1e-9L) ambiguous.insert(col);
      if (d <= static_cast<long double>(cutoff)) result.insert(col);
    }
  return result;
}

}  // namespace

TEST(SphereNeighborhood, MatchesTorchHarmonics) {
  sphere_test::H5Reader f(data_file("neighborhood.h5"));
  int cases = 0;
  for (const std::string& name : f.children("/")) {
    const std::string g = "/" + name;
    const int nlat_in = static_cast<int>(f.number(g, "nlat_in")), nlon_in = static_cast<int>(f.number(g, "nlon_in"));
    const int nlat_out = static_cast<int>(f.number(g, "nlat_out")), nlon_out = static_cast<int>(f.number(g, "nlon_out"));
    const Grid grid_in = sphere::parse_grid(f.text(g, "grid_in")), grid_out = sphere::parse_grid(f.text(g, "grid_out"));
    const double cutoff = f.number(g, "theta_cutoff");
    if (f.number(g, "default_cutoff") != 0) {
      EXPECT_NEAR(sphere::default_theta_cutoff(nlat_out, grid_out), cutoff, 1e-15) << name;
    }
    const sphere::NeighborhoodCsr csr = sphere::neighborhood_csr(nlat_in, nlon_in, grid_in, nlat_out, nlon_out, grid_out, cutoff);
    const std::vector<std::int64_t> roff = to_int(f.doubles(g + "/roff_idx")), col = to_int(f.doubles(g + "/col_idx"));
    EXPECT_EQ(csr.row_offsets, roff) << name;
    EXPECT_EQ(csr.columns, col) << name;
    ++cases;
  }
  EXPECT_GE(cases, 9);
}

// Every output point (all longitudes, so the shifted lists are checked too) against brute force, on
// grids with poles, with a cutoff that reaches across the pole, and downsampling.
TEST(SphereNeighborhood, MatchesBruteForce) {
  struct Case {
    int nlat_in, nlon_in;
    Grid grid_in;
    int nlat_out, nlon_out;
    Grid grid_out;
    double cutoff;
  };
  const Case cases[] = {
      {9, 16, Grid::equiangular, 9, 16, Grid::equiangular, 0.45},
      {12, 24, Grid::legendre_gauss, 12, 24, Grid::legendre_gauss, 0.6},
      {10, 12, Grid::lobatto, 10, 12, Grid::lobatto, 1.3},
      {16, 30, Grid::legendre_gauss, 7, 10, Grid::equiangular, 0.5},
      {8, 8, Grid::equiangular_trapezoidal, 8, 8, Grid::equiangular_trapezoidal, 0.8},
  };
  for (const Case& c : cases) {
    const sphere::NeighborhoodCsr csr =
        sphere::neighborhood_csr(c.nlat_in, c.nlon_in, c.grid_in, c.nlat_out, c.nlon_out, c.grid_out, c.cutoff);
    const sphere::Latitudes in = sphere::latitudes(c.nlat_in, c.grid_in), out = sphere::latitudes(c.nlat_out, c.grid_out);
    ASSERT_EQ(csr.row_offsets.size(), static_cast<std::size_t>(c.nlat_out) + 1);
    int compared = 0;
    for (int t = 0; t < c.nlat_out; ++t)
      for (int wo = 0; wo < c.nlon_out; ++wo) {
        std::set<std::int64_t> ambiguous;
        std::set<std::int64_t> expected =
            brute_force(in, c.nlon_in, out, c.nlon_out, t, wo, (1 + sphere::kThetaCutoffEps) * c.cutoff, ambiguous);
        std::set<std::int64_t> got;
        for (auto e = csr.row_offsets[static_cast<std::size_t>(t)]; e < csr.row_offsets[static_cast<std::size_t>(t) + 1]; ++e)
          got.insert(csr.shifted(csr.columns[static_cast<std::size_t>(e)], wo));
        for (std::int64_t a : ambiguous) {
          expected.erase(a);
          got.erase(a);
        }
        EXPECT_EQ(got, expected) << "output (" << t << ", " << wo << ") of " << c.nlat_in << "x" << c.nlon_in;
        ++compared;
      }
    EXPECT_EQ(compared, c.nlat_out * c.nlon_out);
  }
}

TEST(SphereNeighborhood, DefaultCutoffAndArguments) {
  EXPECT_NEAR(sphere::default_theta_cutoff(9, Grid::equiangular), std::numbers::pi / 8, 1e-15);
  // Lobatto nodes cluster at the equator: the polar gap is the largest, wider than pi/(n-1).
  const sphere::Latitudes lob = sphere::latitudes(10, Grid::lobatto);
  EXPECT_DOUBLE_EQ(sphere::default_theta_cutoff(10, Grid::lobatto), lob.colatitude[1] - lob.colatitude[0]);
  EXPECT_GT(sphere::default_theta_cutoff(10, Grid::lobatto), std::numbers::pi / 9);
  // A cutoff covering the whole sphere: every input point is a neighbour of every output latitude.
  const sphere::NeighborhoodCsr all = sphere::neighborhood_csr(5, 6, Grid::equiangular, 5, 6, Grid::equiangular, std::numbers::pi);
  for (int t = 0; t < 5; ++t) EXPECT_EQ(all.row_offsets[static_cast<std::size_t>(t) + 1] - all.row_offsets[static_cast<std::size_t>(t)], 30);
  // Every point is its own neighbour.
  const sphere::NeighborhoodCsr self = sphere::neighborhood_csr(7, 14, Grid::legendre_gauss, 7, 14, Grid::legendre_gauss, 0.05);
  for (int t = 0; t < 7; ++t) {
    bool found = false;
    for (auto e = self.row_offsets[static_cast<std::size_t>(t)]; e < self.row_offsets[static_cast<std::size_t>(t) + 1]; ++e)
      found = found || self.columns[static_cast<std::size_t>(e)] == static_cast<std::int64_t>(t) * 14;
    EXPECT_TRUE(found) << t;
  }
  EXPECT_THROW(sphere::neighborhood_csr(8, 16, Grid::equiangular, 8, 32, Grid::equiangular, 0.3), surrogate::Error);
  EXPECT_THROW(sphere::neighborhood_csr(8, 16, Grid::equiangular, 8, 16, Grid::equiangular, 0.0), surrogate::Error);
  EXPECT_THROW(sphere::neighborhood_csr(1, 16, Grid::equiangular, 8, 16, Grid::equiangular, 0.3), surrogate::Error);
  EXPECT_THROW(sphere::default_theta_cutoff(1, Grid::equiangular), surrogate::Error);
}
