// The "fourier-bessel" filter basis and the transpose DISCO convolution (surrogate/sphere/disco.hpp)
// against torch-harmonics 0.9.3 (golden data tests/data/sphere/disco_transpose.h5, made by
// share/tools/golden/sphere_disco_transpose_golden.py), tabulated Bessel zeros, naive float64 references,
// the exact longitude-shift equivariance, latitude-band rows and the argument checks.
//
// Tolerances of the float32 outputs: as in test_disco.cpp, for an output element with A = the sum of the
// absolute values of all its terms, a float32 evaluation that sums at most n products in any one
// accumulation chain is within n u A of the exact value (gamma_n bound, u = 2^-24). Ours sums n_z table
// entries into y, then K*Cg products in the linear layer (+ bias, + roundings: n_z + K*Cg + 3); the
// official transpose first sums Cg products (W x), then the entries of all k. Taking n_z = the largest
// number of entries of one output row (all k) covers both; the two are within twice the bound of each
// other, ours within the bound of the official float64 output. Index or layout errors give errors ~ A.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "disco_cases.hpp"
#include "h5_reader.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/disco.hpp"

namespace {

using namespace surrogate::sphere;
using sphere_test::expect_error;
using sphere_test::from_channels_last;
using sphere_test::H5Reader;
using sphere_test::kU;
using sphere_test::random_normal;
using surrogate::ErrorCode;

H5Reader& golden() {
  static H5Reader f(sphere_test::data_file("disco_transpose.h5"));
  return f;
}

std::vector<std::string> cases() {
  std::vector<std::string> out;
  for (const std::string& n : golden().children("/"))
    if (n != "bessel_zeros") out.push_back(n);
  return out;
}

bool is_transpose(const std::string& name) { return golden().number("/" + name, "transpose") != 0; }

/// The naive transpose in float64 (psi rounded to float32 as the operator uses it), straight from the
/// official definition: the input, spread to the output longitudes wi -> p*wi, convolved with the
/// semi-transposed psi, out[ho, wo] = sum_{k,c,t,wi} W[o,c,k] psi[k, t, ho*Wo + (wo - p*wi) mod Wo] x[c,t,wi].
/// Dense psi, O(points_out * points_in) per (k, c, o). Also A (abs sums) and the largest row count.
sphere_test::Reference transpose_reference(const DiscoConfig& c, const FilterTable& t, const std::vector<float>& w,
                                           const std::vector<float>& bias, int batch, const std::vector<float>& x_cf) {
  const int K = t.kernel_size, Hi = c.nlat_in, Wi = c.nlon_in, Ho = c.nlat_out, Wo = c.nlon_out, p = Wo / Wi;
  const int Cg = c.in_channels / c.groups, Og = c.out_channels / c.groups;
  std::vector<double> psi(static_cast<std::size_t>(K) * Hi * Ho * Wo, 0.0);  // [k][t][ho*Wo + wo]
  std::map<std::int64_t, int> per_row;
  for (std::size_t n = 0; n < t.val.size(); ++n) {
    psi[static_cast<std::size_t>((t.ker[n] * Hi + t.row[n]) * Ho * Wo + t.col[n])] += static_cast<float>(t.val[n]);
    ++per_row[t.col[n] / Wo];
  }
  sphere_test::Reference r;
  for (const auto& kv : per_row) r.max_group = std::max(r.max_group, kv.second);
  r.out.assign(static_cast<std::size_t>(batch) * c.out_channels * Ho * Wo, 0.0);
  r.abs_sum = r.out;
  for (int b = 0; b < batch; ++b)
    for (int o = 0; o < c.out_channels; ++o) {
      const int g = o / Og;
      for (int ho = 0; ho < Ho; ++ho)
        for (int wo = 0; wo < Wo; ++wo) {
          double s = c.bias ? bias[static_cast<std::size_t>(o)] : 0.0, a = std::fabs(s);
          for (int cc = 0; cc < Cg; ++cc)
            for (int k = 0; k < K; ++k) {
              const double wk = w[(static_cast<std::size_t>(o) * Cg + cc) * K + k];
              const float* xc = x_cf.data() + (static_cast<std::size_t>(b) * c.in_channels + g * Cg + cc) * Hi * Wi;
              for (int ti = 0; ti < Hi; ++ti) {
                const double* pk = psi.data() + (static_cast<std::size_t>(k) * Hi + ti) * Ho * Wo + static_cast<std::size_t>(ho) * Wo;
                for (int wi = 0; wi < Wi; ++wi) {
                  const double v = pk[((wo - p * wi) % Wo + Wo) % Wo];
                  if (v == 0.0) continue;
                  const double term = wk * v * xc[ti * Wi + wi];
                  s += term;
                  a += std::fabs(term);
                }
              }
            }
          const std::size_t i = ((static_cast<std::size_t>(b) * c.out_channels + o) * Ho + ho) * Wo + wo;
          r.out[i] = s;
          r.abs_sum[i] = a;
        }
    }
  return r;
}

// ---------------------------------------------------------------------------------------------------------
// Bessel zeros and the fourier-bessel basis

TEST(DiscoBesselZeros, MatchTabulatedValues) {
  // j_{m,s}, m = 0..3, s = 1..5 (Abramowitz & Stegun table 9.5 / DLMF 10.21, here to 17 digits).
  const double table[4][5] = {
      {2.4048255576957728, 5.5200781102863106, 8.6537279129110122, 11.791534439014282, 14.930917708487786},
      {3.8317059702075123, 7.0155866698156188, 10.173468135062722, 13.323691936314223, 16.470630050877633},
      {5.1356223018406826, 8.4172441403998649, 11.619841172149059, 14.795951782351261, 17.959819494987826},
      {6.3801618959239835, 9.7610231299816697, 13.015200721698434, 16.223466160318768, 19.409415226435012}};
  double worst = 0.0;
  for (int m = 0; m < 4; ++m) {
    const std::vector<double> z = bessel_j_zeros(m, 5);
    ASSERT_EQ(z.size(), 5u);
    for (int s = 0; s < 5; ++s) {
      // std::cyl_bessel_j is accurate to a few 1e-16 near its zeros, where |J_m'| ~ 0.2 .. 0.5: the zero is
      // then good to ~1e-15 absolute; a wrong or skipped zero is off by ~3.
      EXPECT_NEAR(z[static_cast<std::size_t>(s)], table[m][s], 4e-15 * table[m][s]) << "m " << m << " s " << s;
      worst = std::max(worst, std::fabs(z[static_cast<std::size_t>(s)] - table[m][s]) / table[m][s]);
    }
  }
  // scipy.special.jn_zeros(m, 8), m = 0..5, as the official basis uses them
  const std::vector<double> scipy_zeros = golden().doubles("/bessel_zeros");
  ASSERT_EQ(scipy_zeros.size(), 48u);
  for (int m = 0; m < 6; ++m) {
    const std::vector<double> z = bessel_j_zeros(m, 8);
    for (int s = 0; s < 8; ++s) {
      const double ref = scipy_zeros[static_cast<std::size_t>(m * 8 + s)];
      EXPECT_NEAR(z[static_cast<std::size_t>(s)], ref, 4e-15 * ref) << "m " << m << " s " << s;
      worst = std::max(worst, std::fabs(z[static_cast<std::size_t>(s)] - ref) / ref);
    }
  }
  std::printf("  max relative zero error %.2e\n", worst);
  expect_error([] { bessel_j_zeros(-1, 3); }, ErrorCode::invalid_argument, "bessel_j_zeros");
  expect_error([] { bessel_j_zeros(2, 0); }, ErrorCode::invalid_argument, "bessel_j_zeros");
}

TEST(DiscoFourierBessel, BasisSizes) {
  // Counted by hand from the zeros: (n_radial, m_max) = (3, 3): alpha_max = j_{0,3} = 8.654; J_0: 3 zeros,
  // J_1: 3.83, 7.02 (x2), J_2: 5.14, 8.42 (x2), J_3: 6.38 (x2) -> 3 + 4 + 4 + 2 = 13.
  EXPECT_EQ(filter_basis_size(FilterBasis::fourier_bessel, {3}), 13);
  EXPECT_EQ(filter_basis_size(FilterBasis::fourier_bessel, {3, 3}), 13);
  // (2, 1): alpha_max = 5.52; J_0: 2, J_1: 3.83 (x2) -> 4;  (1, 4): only J_0's first zero -> 1
  EXPECT_EQ(filter_basis_size(FilterBasis::fourier_bessel, {2, 1}), 4);
  EXPECT_EQ(filter_basis_size(FilterBasis::fourier_bessel, {1, 4}), 1);
  EXPECT_EQ(filter_basis_size(FilterBasis::fourier_bessel, {2, 0}), 2);
  for (const std::string& name : cases()) {
    const DiscoConfig c = sphere_test::read_disco_config(golden(), "/" + name);
    EXPECT_EQ(filter_basis_size(c.basis, c.kernel_shape), golden().number("/" + name, "kernel_size")) << name;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Tables and outputs against the official modules

TEST(DiscoTransposeFilterTable, MatchesTorchHarmonics) {
  const auto names = cases();
  ASSERT_GE(names.size(), 12u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const std::string g = "/" + name;
    const bool tr = is_transpose(name);
    const DiscoConfig c = sphere_test::read_disco_config(golden(), g);
    const double cutoff = tr ? disco_transpose_theta_cutoff(c) : disco_theta_cutoff(c);
    EXPECT_NEAR(cutoff, golden().number(g, "theta_cutoff"), 1e-15 * golden().number(g, "theta_cutoff"));
    const FilterTable ref = sphere_test::read_disco_table(golden(), g, c, tr);
    const FilterTable t = tr ? compute_transpose_filter_table(c) : compute_filter_table(c);
    ASSERT_EQ(t.kernel_size, ref.kernel_size);
    EXPECT_EQ(t.nlat_out, ref.nlat_out);
    EXPECT_EQ(t.nlat_in, ref.nlat_in);
    EXPECT_EQ(t.nlon_in, ref.nlon_in);
    ASSERT_EQ(t.val.size(), ref.val.size());
    EXPECT_EQ(t.ker, ref.ker);
    EXPECT_EQ(t.row, ref.row);
    EXPECT_EQ(t.col, ref.col);
    // Tolerance. The raw basis values (before the normalisation) carry the errors described in
    // test_disco.cpp: same float64 operations, different libm (SLEEF in torch, glibc here), Legendre-Gauss
    // nodes ~1e-15 apart, arccos amplifying by 1/sin r, steep basis functions; the Bessel functions add
    // std::cyl_bessel_j (within 2.7e-15 of mpmath on [0, 20], m <= 6) against scipy's jv (4e-16). That is
    // within 1e-13 of the largest value, as there. The per-group normalisations ("nodal", "modal") then
    // multiply a group by 1/scale: a group of small raw values (points near the edge of a hat function,
    // e.g. a pole row) is amplified by up to ~1e3 relative to the table, and its absolute errors with it.
    // The amplification of each group is measured on our own un-normalised table (norm mode "none", same
    // entries): amp_g = (max_g |psi| / max_g |psi_none|) / (max |psi| / max |psi_none|), at least 1; the
    // tolerance of an entry is 1e-13 max|psi| amp_g. A group whose official values are all below 1e-6 of
    // the largest is rounding noise in both codes (an anisotropic function whose raw values are all equal,
    // e.g. at a pole output row, minus their "modal" mean, divided by the clamped scale 1e-9): an entry of
    // such a group outside the tolerance must stay below 1e-6 of the largest value (counted and printed).
    DiscoConfig cn = c;
    cn.norm_mode = BasisNormMode::none;
    const FilterTable raw = tr ? compute_transpose_filter_table(cn) : compute_filter_table(cn);
    ASSERT_EQ(raw.val.size(), t.val.size());
    const std::int64_t col_lon = t.nlon_in;
    auto group = [&](std::size_t n) { return t.ker[n] * (1 << 20) + (tr ? t.col[n] / col_lon : t.row[n]); };
    std::map<std::int64_t, double> gmax_ref, gmax, gmax_raw;
    double vmax = 0.0, rawmax = 0.0;
    for (std::size_t n = 0; n < t.val.size(); ++n) {
      vmax = std::max(vmax, std::fabs(ref.val[n]));
      rawmax = std::max(rawmax, std::fabs(raw.val[n]));
      gmax_ref[group(n)] = std::max(gmax_ref[group(n)], std::fabs(ref.val[n]));
      gmax[group(n)] = std::max(gmax[group(n)], std::fabs(t.val[n]));
      gmax_raw[group(n)] = std::max(gmax_raw[group(n)], std::fabs(raw.val[n]));
    }
    double err = 0.0, worst = 0.0, amp_max = 1.0;
    int noise_entries = 0;
    for (std::size_t n = 0; n < t.val.size(); ++n) {
      const std::int64_t grp = group(n);
      const double d = std::fabs(t.val[n] - ref.val[n]);
      const double amp = gmax_raw[grp] > 0 ? std::max(1.0, (gmax[grp] / gmax_raw[grp]) / (vmax / rawmax)) : 1.0;
      if (d > 1e-13 * vmax * amp && gmax_ref[grp] < 1e-6 * vmax) {
        EXPECT_LT(std::fabs(t.val[n]), 1e-6 * vmax) << "entry " << n << " of a rounding-noise group";
        ++noise_entries;
        continue;
      }
      EXPECT_LE(d, 1e-13 * vmax * amp) << "entry " << n << " (k " << t.ker[n] << ", row " << t.row[n] << ", col "
                                       << t.col[n] << "): " << t.val[n] << " vs " << ref.val[n] << ", amp " << amp;
      err = std::max(err, d);
      worst = std::max(worst, d / (1e-13 * vmax * amp));
      amp_max = std::max(amp_max, amp);
    }
    std::printf("  %-26s %s nnz %5zu  max|dpsi|/max|psi| %.1e  max|dpsi|/tol %.3f  max amp %.0f  noise entries %d\n",
                name.c_str(), tr ? "transpose" : "forward  ", t.val.size(), err / vmax, worst, amp_max, noise_entries);
  }
}

TEST(DiscoConvTransposeS2, OutputsMatchTorchHarmonics) {
  for (const std::string& name : cases()) {
    SCOPED_TRACE(name);
    const std::string g = "/" + name;
    const bool tr = is_transpose(name);
    const DiscoConfig c = sphere_test::read_disco_config(golden(), g);
    const int batch = static_cast<int>(golden().number(g, "batch"));
    const std::vector<float> w = golden().floats(g + "/weight");
    const std::vector<float> bias = c.bias ? golden().floats(g + "/bias") : std::vector<float>{};
    const std::vector<float> x = golden().floats(g + "/input");
    const std::vector<float> out_ref = golden().floats(g + "/output");
    const std::vector<double> out64 = golden().doubles(g + "/output_f64");
    const FilterTable table = sphere_test::read_disco_table(golden(), g, c, tr);
    const sphere_test::Reference ref = tr ? transpose_reference(c, table, w, bias, batch, x)
                                          : sphere_test::dense_reference(c, table, w, bias, batch, x);
    const std::vector<float> xl = sphere_test::to_channels_last(x, batch, c.in_channels);
    std::vector<float> y1(out_ref.size()), y2(out_ref.size()), y3(out_ref.size());
    int K = 0;
    if (tr) {
      // both orders of the two contractions; the table from the file with the other one
      const DiscoConvTransposeS2 own(c, w, bias, nullptr, DiscoTransposeOrder::gather_first);
      const DiscoConvTransposeS2 own_wf(c, w, bias, nullptr, DiscoTransposeOrder::weights_first);
      const DiscoConvTransposeS2 from_file(c, w, bias, &table, DiscoTransposeOrder::weights_first);
      ASSERT_EQ(own.order(), DiscoTransposeOrder::gather_first);
      ASSERT_EQ(own_wf.order(), DiscoTransposeOrder::weights_first);
      own.forward(batch, xl.data(), y1.data());
      from_file.forward(batch, xl.data(), y2.data());
      own_wf.forward(batch, xl.data(), y3.data());
      K = own.kernel_size();
    } else {
      // the forward in both orders as well (DiscoOrder)
      const DiscoConvS2 own(c, w, bias, nullptr, DiscoOrder::gather_first);
      const DiscoConvS2 own_wf(c, w, bias, nullptr, DiscoOrder::weights_first);
      const DiscoConvS2 from_file(c, w, bias, &table, DiscoOrder::weights_first);
      ASSERT_EQ(own.order(), DiscoOrder::gather_first);
      ASSERT_EQ(own_wf.order(), DiscoOrder::weights_first);
      own.forward(batch, xl.data(), y1.data());
      from_file.forward(batch, xl.data(), y2.data());
      own_wf.forward(batch, xl.data(), y3.data());
      K = own.kernel_size();
    }
    const std::vector<float> o1 = from_channels_last(y1, batch, c.out_channels);
    const std::vector<float> o2 = from_channels_last(y2, batch, c.out_channels);
    const std::vector<float> o3 = from_channels_last(y3, batch, c.out_channels);
    // The forward's weights first sums Cg products, then up to K*max_group entries of the output row
    // (test_disco.cpp); the transpose's max_group already counts a whole output row.
    const int Cg = c.in_channels / c.groups;
    const double n_terms = tr ? ref.max_group + K * Cg + 3 : std::max(ref.max_group + K * Cg, Cg + K * ref.max_group) + 3;
    double worst = 0.0, e_off = 0.0, e_own = 0.0, e_naive = 0.0, e_wf = 0.0;
    for (std::size_t i = 0; i < out_ref.size(); ++i) {
      const double bound = n_terms * kU * ref.abs_sum[i];
      ASSERT_LE(std::fabs(o1[i] - out_ref[i]), 2 * bound) << "element " << i;
      ASSERT_LE(std::fabs(o2[i] - out_ref[i]), 2 * bound) << "element " << i;
      ASSERT_LE(std::fabs(o1[i] - out64[i]), bound) << "element " << i;
      ASSERT_LE(std::fabs(o1[i] - ref.out[i]), bound) << "element " << i;
      ASSERT_LE(std::fabs(o3[i] - out64[i]), bound) << "element " << i << " (weights first)";
      ASSERT_LE(std::fabs(o3[i] - out_ref[i]), 2 * bound) << "element " << i << " (weights first)";
      e_wf = std::max(e_wf, std::fabs(o3[i] - out64[i]) / (kU * ref.abs_sum[i]));
      worst = std::max(worst, std::fabs(o1[i] - out_ref[i]) / bound);
      e_off = std::max(e_off, std::fabs(out_ref[i] - out64[i]) / (kU * ref.abs_sum[i]));
      e_own = std::max(e_own, std::fabs(o1[i] - out64[i]) / (kU * ref.abs_sum[i]));
      e_naive = std::max(e_naive, std::fabs(o1[i] - ref.out[i]) / (kU * ref.abs_sum[i]));
    }
    std::printf("  %-26s |own-f64|/(uA) %.2f (weights first %.2f)  |official-f64|/(uA) %.2f  |own-naive|/(uA) %.2f  "
                "|own-official|/bound %.3f\n", name.c_str(), e_own, e_wf, e_off, e_naive, worst);
  }
}

// ---------------------------------------------------------------------------------------------------------
// Random configurations: naive reference, shift equivariance, latitude bands, errors

DiscoConfig upsampling_config() {
  DiscoConfig c;
  c.in_channels = 6;
  c.out_channels = 4;
  c.nlat_in = 7;
  c.nlon_in = 12;
  c.nlat_out = 13;
  c.nlon_out = 24;
  c.grid_in = Grid::legendre_gauss;
  c.grid_out = Grid::equiangular;
  c.kernel_shape = {3, 4};
  c.groups = 2;
  c.bias = true;
  return c;
}

TEST(DiscoConvTransposeS2, MatchesNaiveReference) {
  for (int variant = 0; variant < 3; ++variant) {
    DiscoConfig c = upsampling_config();
    if (variant == 1) {  // ungrouped, channel counts off the kernels' padding, p = 3, fourier-bessel
      c.groups = 1;
      c.in_channels = 19;
      c.out_channels = 21;
      c.nlon_out = 36;
      c.basis = FilterBasis::fourier_bessel;
      c.kernel_shape = {2, 2};
      c.theta_cutoff = 0.7;
    } else if (variant == 2) {  // p = 1 (same longitudes), zernike, modal
      c.nlon_out = 12;
      c.basis = FilterBasis::zernike;
      c.kernel_shape = {3};
      c.norm_mode = BasisNormMode::modal;
    }
    SCOPED_TRACE("variant " + std::to_string(variant));
    std::mt19937 rng(static_cast<unsigned>(17 + variant));
    const int batch = 2, K = filter_basis_size(c.basis, c.kernel_shape);
    const auto w = random_normal(static_cast<std::size_t>(c.out_channels) * (c.in_channels / c.groups) * K, rng);
    const auto bias = random_normal(static_cast<std::size_t>(c.out_channels), rng);
    const auto x = random_normal(static_cast<std::size_t>(batch) * c.in_channels * c.nlat_in * c.nlon_in, rng);
    for (const auto order : {DiscoTransposeOrder::gather_first, DiscoTransposeOrder::weights_first}) {
      const DiscoConvTransposeS2 conv(c, w, bias, nullptr, order);
      const auto ref = transpose_reference(c, conv.table(), w, bias, batch, x);
      const auto xl = sphere_test::to_channels_last(x, batch, c.in_channels);
      std::vector<float> yl(static_cast<std::size_t>(batch) * c.out_channels * c.nlat_out * c.nlon_out);
      conv.forward(batch, xl.data(), yl.data());
      const auto y = from_channels_last(yl, batch, c.out_channels);
      const double n_terms = ref.max_group + K * (c.in_channels / c.groups) + 3;
      double worst = 0.0;
      for (std::size_t i = 0; i < y.size(); ++i) {
        const double bound = n_terms * kU * ref.abs_sum[i];
        ASSERT_LE(std::fabs(y[i] - ref.out[i]), bound) << "element " << i;
        worst = std::max(worst, std::fabs(y[i] - ref.out[i]) / (kU * ref.abs_sum[i]));
      }
      std::printf("  %s: max |out - naive| / (u A) = %.2f\n",
                  order == DiscoTransposeOrder::gather_first ? "gather first " : "weights first", worst);
    }
  }
}

TEST(DiscoConvTransposeS2, LongitudeShiftEquivarianceIsExact) {
  const DiscoConfig c = upsampling_config();  // p = 2
  const int p = c.nlon_out / c.nlon_in, batch = 2;
  std::mt19937 rng(23);
  const int K = filter_basis_size(c.basis, c.kernel_shape);
  const auto w = random_normal(static_cast<std::size_t>(c.out_channels) * (c.in_channels / c.groups) * K, rng);
  const auto bias = random_normal(static_cast<std::size_t>(c.out_channels), rng);
  const auto x = random_normal(static_cast<std::size_t>(batch) * c.nlat_in * c.nlon_in * c.in_channels, rng);
  for (const auto order : {DiscoTransposeOrder::gather_first, DiscoTransposeOrder::weights_first}) {
  SCOPED_TRACE(order == DiscoTransposeOrder::gather_first ? "gather first" : "weights first");
  const DiscoConvTransposeS2 conv(c, w, bias, nullptr, order);
  const std::size_t Po = static_cast<std::size_t>(c.nlat_out) * c.nlon_out;
  std::vector<float> y(batch * Po * c.out_channels), ys(y.size());
  conv.forward(batch, x.data(), y.data());
  for (int s : {1, 5, c.nlon_in - 1}) {
    std::vector<float> xs(x.size());  // xs[h, w] = x[h, w - s]
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < c.nlat_in; ++h)
        for (int wi = 0; wi < c.nlon_in; ++wi)
          for (int ch = 0; ch < c.in_channels; ++ch)
            xs[((static_cast<std::size_t>(b) * c.nlat_in + h) * c.nlon_in + wi) * c.in_channels + ch] =
                x[((static_cast<std::size_t>(b) * c.nlat_in + h) * c.nlon_in + (wi - s + c.nlon_in) % c.nlon_in) *
                      c.in_channels + ch];
    conv.forward(batch, xs.data(), ys.data());
    for (int b = 0; b < batch; ++b)  // ys[ho, wo] = y[ho, wo - p s]
      for (int t = 0; t < c.nlat_out; ++t)
        for (int wo = 0; wo < c.nlon_out; ++wo)
          for (int o = 0; o < c.out_channels; ++o) {
            const std::size_t i = ((b * Po) + static_cast<std::size_t>(t) * c.nlon_out + wo) * c.out_channels + o;
            const std::size_t j = ((b * Po) + static_cast<std::size_t>(t) * c.nlon_out +
                                   (wo - p * s + c.nlon_out) % c.nlon_out) * c.out_channels + o;
            ASSERT_EQ(ys[i], y[j]) << "shift " << s << " b " << b << " t " << t << " wo " << wo << " o " << o;
          }
  }
  }
}

TEST(DiscoConvTransposeS2, RowBandsEqualWholeForward) {
  const DiscoConfig c = upsampling_config();
  const int batch = 2, K = filter_basis_size(c.basis, c.kernel_shape);
  std::mt19937 rng(29);
  const auto w = random_normal(static_cast<std::size_t>(c.out_channels) * (c.in_channels / c.groups) * K, rng);
  const auto bias = random_normal(static_cast<std::size_t>(c.out_channels), rng);
  const auto x = random_normal(static_cast<std::size_t>(batch) * c.nlat_in * c.nlon_in * c.in_channels, rng);
  for (const auto order : {DiscoTransposeOrder::gather_first, DiscoTransposeOrder::weights_first}) {
  SCOPED_TRACE(order == DiscoTransposeOrder::gather_first ? "gather first" : "weights first");
  const DiscoConvTransposeS2 conv(c, w, bias, nullptr, order);
  const std::size_t Pi = static_cast<std::size_t>(c.nlat_in) * c.nlon_in, Po = static_cast<std::size_t>(c.nlat_out) * c.nlon_out;
  std::vector<float> whole(batch * Po * c.out_channels);
  conv.forward(batch, x.data(), whole.data());
  for (const auto& [ob, oe] : std::vector<std::pair<int, int>>{{0, 4}, {4, 5}, {5, 13}, {12, 13}}) {
    const auto [ib, ie] = conv.input_rows(ob, oe);
    ASSERT_LT(ib, ie);
    EXPECT_LT(ie - ib, c.nlat_in) << "a band's halo should not need the whole grid";
    std::vector<float> xin(static_cast<std::size_t>(batch) * (ie - ib) * c.nlon_in * c.in_channels);
    for (int b = 0; b < batch; ++b)
      std::copy_n(x.begin() + static_cast<std::ptrdiff_t>((b * Pi + static_cast<std::size_t>(ib) * c.nlon_in) * c.in_channels),
                  static_cast<std::size_t>(ie - ib) * c.nlon_in * c.in_channels,
                  xin.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(b) * (ie - ib) * c.nlon_in * c.in_channels));
    std::vector<float> part(static_cast<std::size_t>(batch) * (oe - ob) * c.nlon_out * c.out_channels);
    conv.forward_rows(batch, xin.data(), ib, ie, part.data(), ob, oe);
    for (int b = 0; b < batch; ++b)
      for (std::size_t i = 0; i < static_cast<std::size_t>(oe - ob) * c.nlon_out * c.out_channels; ++i)
        ASSERT_EQ(part[static_cast<std::size_t>(b) * (oe - ob) * c.nlon_out * c.out_channels + i],
                  whole[(b * Po + static_cast<std::size_t>(ob) * c.nlon_out) * c.out_channels + i])
            << "rows [" << ob << ", " << oe << ") b " << b << " i " << i;
    if (ib > 0) {
      expect_error([&, ib = ib, ie = ie] { conv.forward_rows(batch, xin.data(), ib + 1, ie, part.data(), ob, oe); },
                   ErrorCode::invalid_argument, "input rows");
    }
  }
  }
}

TEST(DiscoConvTransposeS2, RejectsBadArguments) {
  const DiscoConfig c = upsampling_config();
  const int K = filter_basis_size(c.basis, c.kernel_shape);
  const std::vector<float> w(static_cast<std::size_t>(c.out_channels) * (c.in_channels / c.groups) * K, 0.5f);
  const std::vector<float> bias(static_cast<std::size_t>(c.out_channels), 0.0f);
  expect_error([&] { DiscoConvTransposeS2(c, std::vector<float>(w.size() + 1, 0.5f), bias); }, ErrorCode::weights,
               "DiscoConvTransposeS2: weight");
  expect_error([&] { DiscoConvTransposeS2(c, w, {}); }, ErrorCode::weights, "bias");
  DiscoConfig down = c;
  down.nlon_out = 6;  // downsampling
  expect_error([&] { DiscoConvTransposeS2(down, w, bias); }, ErrorCode::unsupported, "DiscoConvS2");
  expect_error([&] { compute_transpose_filter_table(down); }, ErrorCode::unsupported, "nlon_out");
  DiscoConfig odd = c;
  odd.nlon_out = 30;
  expect_error([&] { DiscoConvTransposeS2(odd, w, bias); }, ErrorCode::unsupported, "nlon_out (30)");
  DiscoConfig nan = c;
  nan.theta_cutoff = std::numeric_limits<double>::infinity();
  expect_error([&] { DiscoConvTransposeS2(nan, w, bias); }, ErrorCode::invalid_argument, "theta_cutoff");

  // A table of the forward direction (wrong grid roles) or out of range is refused, naming the entry.
  const FilterTable good = compute_transpose_filter_table(c);
  EXPECT_EQ(good.nlat_out, c.nlat_in);
  EXPECT_EQ(good.nlat_in, c.nlat_out);
  EXPECT_EQ(good.nlon_in, c.nlon_out);
  FilterTable t = good;
  std::swap(t.nlat_out, t.nlat_in);
  expect_error([&] { DiscoConvTransposeS2(c, w, bias, &t); }, ErrorCode::weights, "grid");
  t = good;
  t.row[3] = c.nlat_in;
  expect_error([&] { DiscoConvTransposeS2(c, w, bias, &t); }, ErrorCode::weights, "row[3]");
  t = good;
  t.col[4] = static_cast<std::int64_t>(c.nlat_out) * c.nlon_out;
  expect_error([&] { DiscoConvTransposeS2(c, w, bias, &t); }, ErrorCode::weights, "col[4]");

  const DiscoConvTransposeS2 conv(c, w, bias);
  std::vector<float> buf(16);
  expect_error([&] { conv.forward(-1, buf.data(), buf.data()); }, ErrorCode::invalid_argument, "batch");
  expect_error([&] { conv.forward(1, buf.data(), nullptr); }, ErrorCode::invalid_argument, "null");
  expect_error([&] { conv.forward_rows(1, buf.data(), 0, 7, buf.data(), 3, 14); }, ErrorCode::invalid_argument,
               "output rows");
}

}  // namespace
