// Latitude bands (surrogate/sphere/bands.hpp and the operators' forward_rows): every operator run on a
// range of output latitude rows, fed only the input rows its input_rows() names, gives bitwise the rows of
// the whole-grid forward - for every single-row band (the worst halo case: a band of one row whose
// stencil or neighbourhood spans several rows, poles included) and a few wider bands; the partition
// helpers against hand-computed partitions. The distributed use (the exchanges of the bands,
// forward_bands under MPI) is tested in tests/sphere/test_sphere_mpi.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "sphere_rows.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/bands.hpp"
#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"
#include "surrogate/sphere/quadrature.hpp"
#include "surrogate/sphere/resample.hpp"

namespace sphere = surrogate::sphere;
using sphere::Grid;

namespace {

std::vector<float> random_values(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

/// The bands checked on a grid of nlat rows: every single row, the northern and southern halves, the whole.
std::vector<std::pair<int, int>> bands(int nlat) {
  std::vector<std::pair<int, int>> out;
  for (int t = 0; t < nlat; ++t) out.push_back({t, t + 1});
  out.push_back({0, nlat / 2});
  out.push_back({nlat / 2, nlat});
  out.push_back({0, nlat});
  return out;
}

sphere::AttentionS2Weights attention_weights(int cin, int ck, int cout, bool qknorm, int heads, unsigned seed) {
  sphere::AttentionS2Weights w;
  const float s = 0.4f;
  w.q_weights = random_values(static_cast<std::size_t>(ck * cin), seed + 1, s);
  w.k_weights = random_values(static_cast<std::size_t>(ck * cin), seed + 2, s);
  w.v_weights = random_values(static_cast<std::size_t>(cout * cin), seed + 3, s);
  w.proj_weights = random_values(static_cast<std::size_t>(cout * cout), seed + 4, s);
  w.q_bias = random_values(static_cast<std::size_t>(ck), seed + 5, s);
  w.k_bias = random_values(static_cast<std::size_t>(ck), seed + 6, s);
  w.v_bias = random_values(static_cast<std::size_t>(cout), seed + 7, s);
  w.proj_bias = random_values(static_cast<std::size_t>(cout), seed + 8, s);
  if (qknorm) {
    w.q_norm_weights = random_values(static_cast<std::size_t>(ck / heads), seed + 9, 0.1f);
    w.k_norm_weights = random_values(static_cast<std::size_t>(ck / heads), seed + 10, 0.1f);
  }
  return w;
}

}  // namespace

TEST(SphereBands, DiscoRowsEqualTheWholeForward) {
  struct Case {
    int hi, wi, ho, wo;
    Grid gi, go;
    std::vector<int> shape;
    double cutoff;
  };
  // Encoder-like (17x32 equiangular -> 9x16 Legendre-Gauss) and decoder-like (same grid, a cutoff of
  // several rows: the coarse grid's), p = 2 and 1.
  const std::vector<Case> cases = {{17, 32, 9, 16, Grid::equiangular, Grid::legendre_gauss, {3, 3}, 3 * 0.5 * 3.14159265358979 / 16},
                                   {13, 24, 13, 24, Grid::equiangular, Grid::equiangular, {4, 2}, 5 * 0.5 * 3.14159265358979 / 6}};
  for (const Case& k : cases) {
    sphere::DiscoConfig c;
    c.in_channels = 3;
    c.out_channels = 5;
    c.nlat_in = k.hi;
    c.nlon_in = k.wi;
    c.nlat_out = k.ho;
    c.nlon_out = k.wo;
    c.grid_in = k.gi;
    c.grid_out = k.go;
    c.kernel_shape = k.shape;
    c.theta_cutoff = k.cutoff;
    const int K = sphere::filter_basis_size(c.basis, c.kernel_shape);
    for (const auto order : {sphere::DiscoOrder::gather_first, sphere::DiscoOrder::weights_first}) {
    SCOPED_TRACE(order == sphere::DiscoOrder::gather_first ? "gather first" : "weights first");
    const sphere::DiscoConvS2 conv(c, random_values(static_cast<std::size_t>(5 * 3 * K), 11), {}, nullptr, order);
    const int B = 2;
    const auto x = random_values(static_cast<std::size_t>(B * k.hi * k.wi * 3), 12);
    std::vector<float> whole(static_cast<std::size_t>(B * k.ho * k.wo * 5));
    conv.forward(B, x.data(), whole.data());
    int widest_halo = 0;
    for (const auto& [t0, t1] : bands(k.ho)) {
      const auto [i0, i1] = conv.input_rows(t0, t1);
      ASSERT_LT(i0, i1);
      if (t1 == t0 + 1) widest_halo = std::max(widest_halo, i1 - i0);
      const auto in = rows_of(x, B, k.hi, k.wi, 3, i0, i1);
      std::vector<float> out(static_cast<std::size_t>(B * (t1 - t0) * k.wo * 5));
      conv.forward_rows(B, in.data(), i0, i1, out.data(), t0, t1);
      EXPECT_EQ(out, rows_of(whole, B, k.ho, k.wo, 5, t0, t1)) << "DISCO " << k.hi << "x" << k.wi << " rows " << t0 << ".." << t1;
      if (t0 == t1 - 1 && i0 > 0) {  // one input row less than needed is refused
        EXPECT_THROW(conv.forward_rows(B, in.data() + k.wi * 3, i0 + 1, i1, out.data(), t0, t1), surrogate::Error);
      }
    }
    EXPECT_GE(widest_halo, 3) << "the case should need a halo of several rows";
    }
  }
}

TEST(SphereBands, ResampleRowsEqualTheWholeForward) {
  struct Case {
    int hi, wi, ho, wo;
    Grid gi, go;
  };
  // Legendre-Gauss -> equiangular expands the poles (the pole rows read the whole first/last input row).
  const std::vector<Case> cases = {{9, 16, 17, 32, Grid::legendre_gauss, Grid::equiangular},
                                   {17, 32, 9, 16, Grid::equiangular, Grid::legendre_gauss},
                                   {7, 12, 7, 12, Grid::lobatto, Grid::lobatto}};
  for (const Case& k : cases)
    for (const auto mode : {sphere::ResampleMode::bilinear, sphere::ResampleMode::bilinear_spherical}) {
      const sphere::ResampleS2 r({k.hi, k.wi, k.ho, k.wo, k.gi, k.go, mode});
      const int B = 2, C = 3;
      const auto x = random_values(static_cast<std::size_t>(B * k.hi * k.wi * C), 21, 2.0f);
      std::vector<float> whole(static_cast<std::size_t>(B * k.ho * k.wo * C));
      r.forward(B, C, x.data(), whole.data());
      for (const auto& [t0, t1] : bands(k.ho)) {
        const auto [i0, i1] = r.input_rows(t0, t1);
        const auto in = rows_of(x, B, k.hi, k.wi, C, i0, i1);
        std::vector<float> out(static_cast<std::size_t>(B * (t1 - t0) * k.wo * C));
        r.forward_rows(B, C, in.data(), i0, i1, out.data(), t0, t1);
        EXPECT_EQ(out, rows_of(whole, B, k.ho, k.wo, C, t0, t1))
            << "resample " << k.hi << "->" << k.ho << " mode " << to_string(mode) << " rows " << t0 << ".." << t1;
      }
    }
}

TEST(SphereBands, NeighborhoodAttentionRowsEqualTheWholeForward) {
  struct Case {
    int hi, wi, ho, wo;
    Grid gi, go;
    double cutoff;
    bool qknorm;
  };
  // Self-attention with a cutoff of several rows (0.9 rad on a 12-row grid: about 3 rows each side, the
  // whole cap near the poles) and downsampling cross-attention 16x32 -> 8x16.
  const std::vector<Case> cases = {{12, 24, 12, 24, Grid::equiangular, Grid::equiangular, 0.9, false},
                                   {16, 32, 8, 16, Grid::legendre_gauss, Grid::equiangular, 0.5, true}};
  for (const Case& k : cases) {
    sphere::NeighborhoodAttentionS2Config c;
    c.in_channels = 8;
    c.num_heads = 2;
    c.nlat_in = k.hi;
    c.nlon_in = k.wi;
    c.nlat_out = k.ho;
    c.nlon_out = k.wo;
    c.grid_in = k.gi;
    c.grid_out = k.go;
    c.theta_cutoff = k.cutoff;
    c.use_qknorm = k.qknorm;
    const sphere::NeighborhoodAttentionS2 att(c, attention_weights(8, 8, 8, k.qknorm, 2, 31));
    const int B = 2, C = 8;
    const auto q = random_values(static_cast<std::size_t>(B * k.ho * k.wo * C), 32);
    const auto kv = k.hi == k.ho ? q : random_values(static_cast<std::size_t>(B * k.hi * k.wi * C), 33);
    std::vector<float> whole(static_cast<std::size_t>(B * k.ho * k.wo * C));
    att.forward(B, q.data(), kv.data(), kv.data(), whole.data());
    int widest_halo = 0;
    for (const auto& [t0, t1] : bands(k.ho)) {
      const auto [i0, i1] = att.input_rows(t0, t1);
      if (t1 == t0 + 1) widest_halo = std::max(widest_halo, i1 - i0);
      const auto qb = rows_of(q, B, k.ho, k.wo, C, t0, t1);
      const auto kvb = rows_of(kv, B, k.hi, k.wi, C, i0, i1);
      std::vector<float> out(static_cast<std::size_t>(B * (t1 - t0) * k.wo * C));
      att.forward_rows(B, t0, t1, qb.data(), i0, i1, kvb.data(), kvb.data(), out.data());
      EXPECT_EQ(out, rows_of(whole, B, k.ho, k.wo, C, t0, t1)) << "neighbourhood " << k.hi << "->" << k.ho << " rows " << t0 << ".." << t1;
    }
    EXPECT_GE(widest_halo, 5) << "the case should need a halo of several rows";
  }
}

TEST(SphereBands, GlobalAttentionRowsEqualTheWholeForward) {
  // Self-attention 9x16 (Legendre-Gauss) with qk-norm, and cross-attention 6x12 queries from 12x24 keys.
  struct Case {
    int hi, wi, ho, wo;
    bool qknorm;
  };
  for (const Case& k : std::vector<Case>{{9, 16, 9, 16, true}, {12, 24, 6, 12, false}}) {
    sphere::AttentionS2Config c;
    c.in_channels = 8;
    c.num_heads = 2;
    c.nlat_in = k.hi;
    c.nlon_in = k.wi;
    c.nlat_out = k.ho;
    c.nlon_out = k.wo;
    c.grid_in = c.grid_out = Grid::legendre_gauss;
    c.use_qknorm = k.qknorm;
    const sphere::AttentionS2 att(c, attention_weights(8, 8, 8, k.qknorm, 2, 41));
    const int B = 2, C = 8;
    const auto q = random_values(static_cast<std::size_t>(B * k.ho * k.wo * C), 42);
    const auto kv = k.hi == k.ho ? q : random_values(static_cast<std::size_t>(B * k.hi * k.wi * C), 43);
    std::vector<float> whole(static_cast<std::size_t>(B * k.ho * k.wo * C));
    att.forward(B, q.data(), kv.data(), kv.data(), whole.data());
    for (const auto& [t0, t1] : bands(k.ho)) {
      const auto qb = rows_of(q, B, k.ho, k.wo, C, t0, t1);
      std::vector<float> out(static_cast<std::size_t>(B * (t1 - t0) * k.wo * C));
      att.forward_rows(B, t0, t1, qb.data(), kv.data(), kv.data(), out.data());
      EXPECT_EQ(out, rows_of(whole, B, k.ho, k.wo, C, t0, t1)) << "global " << k.hi << "->" << k.ho << " rows " << t0 << ".." << t1;
    }
    // A part of the grid without explicit keys is refused.
    std::vector<float> out(static_cast<std::size_t>(B * k.wo * C));
    EXPECT_THROW(att.forward_rows(B, 0, 1, q.data(), nullptr, nullptr, out.data()), surrogate::Error);
  }
}

TEST(SphereBands, Partitions) {
  const auto even = sphere::balanced_bands(10, 4);
  EXPECT_EQ(even.first, (std::vector<int>{0, 2, 5, 7, 10}));
  EXPECT_EQ(sphere::balanced_bands(2, 4).first, (std::vector<int>{0, 0, 1, 1, 2}));  // empty bands allowed
  // 5 rows of 8 points; ranks hold points [0, 11), [11, 16), [16, 16), [16, 40): rows whose first point
  // they hold: rank 0 rows 0-1 (points 0, 8), rank 1 none (point 16 is rank 3's), rank 2 none, rank 3 rows 2-4.
  const std::vector<std::int64_t> first_point{0, 11, 16, 16, 40};
  EXPECT_EQ(sphere::bands_from_points(5, 8, first_point).first, (std::vector<int>{0, 2, 2, 2, 5}));
  // Matching bands: each row of the second grid goes to the owner of the nearest row of the first.
  const std::vector<double> a{0.0, 1.0, 2.0, 3.0, 4.0}, b{0.4, 1.6, 3.5};
  sphere::BandPartition p;
  p.first = {0, 2, 5};  // rank 0: a rows 0-1, rank 1: a rows 2-4
  EXPECT_EQ(sphere::matching_bands(p, a, b).first, (std::vector<int>{0, 1, 3}));  // 1.6 is nearest to 2.0
  const auto lat17 = sphere::latitudes(17, Grid::equiangular).colatitude, lat9 = sphere::latitudes(9, Grid::legendre_gauss).colatitude;
  const auto m = sphere::matching_bands(sphere::balanced_bands(17, 3), lat17, lat9);
  EXPECT_EQ(m.first.front(), 0);
  EXPECT_EQ(m.first.back(), 9);
  EXPECT_TRUE(std::is_sorted(m.first.begin(), m.first.end()));
}

TEST(SphereBands, HalosAreNoWiderThanTheCutoff) {
  // Model-zoo sizes: neighbourhood attention on the 64x128 Legendre-Gauss internal grid with the
  // transformer's cutoff, the decoder DISCO on the 128x256 equiangular image grid with the coarse cutoff.
  // The halo of every single-row band holds only rows within the (widened) cutoff in colatitude, so a
  // band's working size is the band plus about 2 cutoff/spacing rows, not the grid.
  const double pi = 3.14159265358979323846;
  const int h = 64, w = 128, nlat = 128, nlon = 256;
  sphere::NeighborhoodAttentionS2Config na;
  na.in_channels = 4;
  na.nlat_in = na.nlat_out = h;
  na.nlon_in = na.nlon_out = w;
  na.grid_in = na.grid_out = Grid::legendre_gauss;
  na.theta_cutoff = 7.0 / std::sqrt(pi) * pi / (h - 1);
  const sphere::NeighborhoodAttentionS2 att(na, attention_weights(4, 4, 4, false, 1, 51));
  sphere::DiscoConfig dc;
  dc.in_channels = dc.out_channels = 1;
  dc.nlat_in = dc.nlat_out = nlat;
  dc.nlon_in = dc.nlon_out = nlon;
  dc.kernel_shape = {5, 4};
  dc.theta_cutoff = 6 * 0.5 * pi / (h - 1);
  const int K = sphere::filter_basis_size(dc.basis, dc.kernel_shape);
  const sphere::DiscoConvS2 dec(dc, random_values(static_cast<std::size_t>(K), 52), {});
  struct Op {
    const char* name;
    std::vector<double> colat;
    double cutoff;
    std::function<std::pair<int, int>(int, int)> rows;
  };
  const std::vector<Op> ops = {
      {"neighbourhood attention", sphere::latitudes(h, Grid::legendre_gauss).colatitude, na.theta_cutoff,
       [&](int a, int b) { return att.input_rows(a, b); }},
      {"decoder DISCO", sphere::latitudes(nlat, Grid::equiangular).colatitude, dc.theta_cutoff,
       [&](int a, int b) { return dec.input_rows(a, b); }}};
  for (const Op& op : ops) {
    const int n = static_cast<int>(op.colat.size());
    for (int t = 0; t < n; ++t) {
      const auto [i0, i1] = op.rows(t, t + 1);
      ASSERT_LE(i0, t);
      ASSERT_GT(i1, t);
      for (int i : {i0, i1 - 1})
        EXPECT_LE(std::fabs(op.colat[static_cast<std::size_t>(i)] - op.colat[static_cast<std::size_t>(t)]),
                  (1.0 + 1e-3) * op.cutoff + 1e-12)
            << op.name << ": row " << t << " reaches row " << i;
    }
    // Eight ranks: every balanced band plus its halo is well under half the grid.
    const auto bands8 = sphere::balanced_bands(n, 8);
    for (int r = 0; r < 8; ++r) {
      const auto [i0, i1] = op.rows(bands8.begin(r), bands8.end(r));
      EXPECT_LT(i1 - i0, n / 2) << op.name << ": rank " << r << " of 8 works on " << i1 - i0 << " of " << n << " rows";
    }
  }
}
