// DISCO convolution (surrogate/sphere/disco.hpp) against torch-harmonics 0.9.3 (golden data
// tests/data/sphere/disco.h5, made by share/tools/golden/sphere_disco_golden.py), a naive dense reference
// built from the table, the exact longitude-shift equivariance, and the argument checks.
//
// Tolerances of the float32 forward: for an output element with A = sum_{c,k} |W| sum_z |psi_z| |x_z|
// (the sum of the absolute values of all terms), float32 evaluation of the contraction (psi rounded to
// float32, n_z products summed into y, y rounded, K*Cg products summed by the linear kernel) is within
// (n_z + K*Cg + 3) u A of the exact value, u = 2^-24 (the classical gamma_n bound, n_z = the largest
// number of table entries of one (k, t) group). The official float32 output obeys the same bound, so the
// two are within twice of it of each other; an index or weight-layout error gives errors of the order A.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "disco_cases.hpp"
#include "h5_reader.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/disco.hpp"

namespace {

using namespace surrogate::sphere;
using sphere_test::H5Reader;
using surrogate::Error;
using surrogate::ErrorCode;

using sphere_test::expect_error;
using sphere_test::from_channels_last;
using sphere_test::kU;
using sphere_test::random_normal;

H5Reader& golden() {
  static H5Reader f(sphere_test::data_file("disco.h5"));
  return f;
}

DiscoConfig read_config(const H5Reader& f, const std::string& g) { return sphere_test::read_disco_config(f, g); }

FilterTable read_table(const H5Reader& f, const std::string& g, const DiscoConfig& c) {
  return sphere_test::read_disco_table(f, g, c, false);
}

using sphere_test::dense_reference;
using sphere_test::Reference;

const char* order_name(DiscoOrder order) { return order == DiscoOrder::gather_first ? "gather first" : "weights first"; }

/// The gamma_n term count of the error bound (header) valid in both orders: gather first sums n_z <=
/// max_group products per (k, c), then K*Cg in the linear layer; weights first sums Cg products in the
/// linear layer, then all entries of the output row (at most K*max_group) in one accumulator; + psi's
/// rounding, the product's and the bias's.
double n_terms_bound(const Reference& ref, int K, int Cg) {
  return std::max(ref.max_group + K * Cg, Cg + K * ref.max_group) + 3.0;
}

TEST(DiscoFilterTable, MatchesTorchHarmonics) {
  const H5Reader& f = golden();
  const auto cases = f.children("/");
  ASSERT_GE(cases.size(), 10u);
  for (const std::string& name : cases) {
    SCOPED_TRACE(name);
    const std::string g = "/" + name;
    const DiscoConfig c = read_config(f, g);
    EXPECT_NEAR(disco_theta_cutoff(c), f.number(g, "theta_cutoff"), 1e-15 * f.number(g, "theta_cutoff"));
    const FilterTable ref = read_table(f, g, c);
    const FilterTable t = compute_filter_table(c);
    ASSERT_EQ(t.kernel_size, ref.kernel_size);
    ASSERT_EQ(filter_basis_size(c.basis, c.kernel_shape), ref.kernel_size);
    ASSERT_EQ(t.val.size(), ref.val.size());
    EXPECT_EQ(t.ker, ref.ker);
    EXPECT_EQ(t.row, ref.row);
    EXPECT_EQ(t.col, ref.col);
    double vmax = 0.0, err = 0.0;
    for (double v : ref.val) vmax = std::max(vmax, std::fabs(v));
    for (std::size_t n = 0; n < t.val.size(); ++n) err = std::max(err, std::fabs(t.val[n] - ref.val[n]));
    // Same operations in float64, but not the same libm (torch evaluates cos/sin/arccos/atan2 with its
    // vectorised SLEEF routines, we with glibc) nor the same Legendre-Gauss nodes (numpy's leggauss, ours
    // more accurate; ~1e-15 apart). r = arccos(z) amplifies a one-ulp difference of z by 1/sin(r) and the
    // basis functions turn it into |d psi| ~ |d r| / dr (piecewise linear) or more near the flat edge of
    // the Hann window, so a few entries differ by up to ~4e-14 of the largest value (measured); most agree
    // to 1e-15. Tolerance 1e-13 of the largest value; any index difference or formula error is far larger.
    EXPECT_LE(err, 1e-13 * vmax) << "max |psi - psi_ref| = " << err << ", max |psi_ref| = " << vmax;
    RecordProperty(name + "_psi_rel_err", std::to_string(err / vmax));
    std::printf("  %-26s nnz %6zu  max|dpsi|/max|psi| = %.2e\n", name.c_str(), t.val.size(), err / vmax);
  }
}

TEST(DiscoConvS2, ForwardMatchesTorchHarmonics) {
  const H5Reader& f = golden();
  for (const std::string& name : f.children("/")) {
    SCOPED_TRACE(name);
    const std::string g = "/" + name;
    const DiscoConfig c = read_config(f, g);
    const int batch = static_cast<int>(f.number(g, "batch"));
    const std::vector<float> w = f.floats(g + "/weight");
    const std::vector<float> bias = c.bias ? f.floats(g + "/bias") : std::vector<float>{};
    const std::vector<float> x = f.floats(g + "/input");
    const std::vector<float> out_ref = f.floats(g + "/output");
    const std::vector<double> out64 = f.doubles(g + "/output_f64");
    const FilterTable table = read_table(f, g, c);
    const Reference ref = dense_reference(c, table, w, bias, batch, x);
    for (const DiscoOrder order : {DiscoOrder::gather_first, DiscoOrder::weights_first}) {
    SCOPED_TRACE(order_name(order));
    const DiscoConvS2 own(c, w, bias, nullptr, order);  // table computed here
    const DiscoConvS2 from_file(c, w, bias, &table, order);  // table as the exporter would store it
    ASSERT_EQ(own.order(), order);
    ASSERT_EQ(from_file.order(), order);
    const std::vector<float> xl = sphere_test::to_channels_last(x, batch, c.in_channels);
    std::vector<float> y1(out_ref.size()), y2(out_ref.size());
    own.forward(batch, xl.data(), y1.data());
    from_file.forward(batch, xl.data(), y2.data());
    const std::vector<float> o1 = from_channels_last(y1, batch, c.out_channels);
    const std::vector<float> o2 = from_channels_last(y2, batch, c.out_channels);
    const double n_terms = n_terms_bound(ref, own.kernel_size(), c.in_channels / c.groups);
    double worst = 0.0, e_off = 0.0, e_own = 0.0;
    for (std::size_t i = 0; i < out_ref.size(); ++i) {
      const double bound = n_terms * kU * ref.abs_sum[i];
      ASSERT_LE(std::fabs(o1[i] - out_ref[i]), 2 * bound) << "element " << i;
      ASSERT_LE(std::fabs(o2[i] - out_ref[i]), 2 * bound) << "element " << i;
      ASSERT_LE(std::fabs(o1[i] - out64[i]), bound) << "element " << i;
      worst = std::max(worst, std::fabs(o1[i] - out_ref[i]) / bound);
      e_off = std::max(e_off, std::fabs(out_ref[i] - out64[i]) / (kU * ref.abs_sum[i]));
      e_own = std::max(e_own, std::fabs(o1[i] - out64[i]) / (kU * ref.abs_sum[i]));
    }
    std::printf("  %-26s %-13s |own-f64|/(uA) %.2f  |official-f64|/(uA) %.2f  |own-official|/bound %.3f\n",
                name.c_str(), order_name(order), e_own, e_off, worst);
    }
  }
}

/// A configuration with groups, bias and p = 2 on random data: forward == the dense reference.
DiscoConfig grouped_config() {
  DiscoConfig c;
  c.in_channels = 6;
  c.out_channels = 4;
  c.nlat_in = 13;
  c.nlon_in = 24;
  c.nlat_out = 7;
  c.nlon_out = 12;
  c.grid_in = Grid::equiangular;
  c.grid_out = Grid::legendre_gauss;
  c.kernel_shape = {3, 4};
  c.groups = 2;
  c.bias = true;
  c.theta_cutoff = 0.5;
  return c;
}

TEST(DiscoConvS2, ForwardMatchesDenseReference) {
  for (const bool grouped : {true, false}) {
    DiscoConfig c = grouped_config();
    if (!grouped) {
      c.groups = 1;
      c.in_channels = 19;  // not a multiple of the kernels' padding
      c.out_channels = 21;
      c.basis = FilterBasis::morlet;
      c.kernel_shape = {3, 3};
      c.nlon_out = 8;  // p = 3
    }
    SCOPED_TRACE(grouped ? "grouped" : "ungrouped");
    std::mt19937 rng(7);
    const int batch = 3, K = filter_basis_size(c.basis, c.kernel_shape);
    const auto w = random_normal(static_cast<std::size_t>(c.out_channels) * (c.in_channels / c.groups) * K, rng);
    const auto bias = random_normal(static_cast<std::size_t>(c.out_channels), rng);
    const auto x = random_normal(static_cast<std::size_t>(batch) * c.in_channels * c.nlat_in * c.nlon_in, rng);
    for (const DiscoOrder order : {DiscoOrder::gather_first, DiscoOrder::weights_first}) {
    SCOPED_TRACE(order_name(order));
    const DiscoConvS2 conv(c, w, bias, nullptr, order);
    ASSERT_EQ(conv.order(), order);
    const Reference ref = dense_reference(c, conv.table(), w, bias, batch, x);
    const auto xl = sphere_test::to_channels_last(x, batch, c.in_channels);
    std::vector<float> yl(static_cast<std::size_t>(batch) * c.out_channels * c.nlat_out * c.nlon_out);
    conv.forward(batch, xl.data(), yl.data());
    const auto y = from_channels_last(yl, batch, c.out_channels);
    const double n_terms = n_terms_bound(ref, K, c.in_channels / c.groups);
    double worst = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double bound = n_terms * kU * ref.abs_sum[i];
      ASSERT_LE(std::fabs(y[i] - ref.out[i]), bound) << "element " << i;
      worst = std::max(worst, std::fabs(y[i] - ref.out[i]) / (kU * ref.abs_sum[i]));
    }
    std::printf("  %-13s max |out - dense| / (u A) = %.2f\n", order_name(order), worst);
    }
  }
}

TEST(DiscoConvS2, LongitudeShiftEquivarianceIsExact) {
  const DiscoConfig c = grouped_config();  // p = 2
  const int p = c.nlon_in / c.nlon_out, batch = 2;
  std::mt19937 rng(11);
  const int K = filter_basis_size(c.basis, c.kernel_shape);
  const auto w = random_normal(static_cast<std::size_t>(c.out_channels) * (c.in_channels / c.groups) * K, rng);
  const auto bias = random_normal(static_cast<std::size_t>(c.out_channels), rng);
  const auto x = random_normal(static_cast<std::size_t>(batch) * c.nlat_in * c.nlon_in * c.in_channels, rng);
  for (const DiscoOrder order : {DiscoOrder::gather_first, DiscoOrder::weights_first}) {
  SCOPED_TRACE(order_name(order));
  const DiscoConvS2 conv(c, w, bias, nullptr, order);
  const std::size_t Po = static_cast<std::size_t>(c.nlat_out) * c.nlon_out;
  std::vector<float> y(batch * Po * c.out_channels), ys(y.size());
  conv.forward(batch, x.data(), y.data());
  for (int s : {1, 3, c.nlon_out - 1}) {
    std::vector<float> xs(x.size());  // xs[h, w] = x[h, w - p s]
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < c.nlat_in; ++h)
        for (int wi = 0; wi < c.nlon_in; ++wi)
          for (int ch = 0; ch < c.in_channels; ++ch)
            xs[((static_cast<std::size_t>(b) * c.nlat_in + h) * c.nlon_in + wi) * c.in_channels + ch] =
                x[((static_cast<std::size_t>(b) * c.nlat_in + h) * c.nlon_in + (wi - p * s + c.nlon_in) % c.nlon_in) *
                      c.in_channels + ch];
    conv.forward(batch, xs.data(), ys.data());
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t < c.nlat_out; ++t)
        for (int wo = 0; wo < c.nlon_out; ++wo)
          for (int o = 0; o < c.out_channels; ++o) {
            const std::size_t i = ((b * Po) + static_cast<std::size_t>(t) * c.nlon_out + wo) * c.out_channels + o;
            const std::size_t j = ((b * Po) + static_cast<std::size_t>(t) * c.nlon_out + (wo - s + c.nlon_out) % c.nlon_out) *
                                      c.out_channels + o;
            ASSERT_EQ(ys[i], y[j]) << "shift " << s << " b " << b << " t " << t << " wo " << wo << " o " << o;
          }
  }
  }
}

/// The automatic order is the one with fewer multiply-adds: many input channels to few output channels
/// (the transformer's decoder, 128 -> 3) weights first, few to many (its encoder, 3 -> 128) gather first.
TEST(DiscoConvS2, AutomaticOrderByMultiplyAdds) {
  DiscoConfig c;
  c.nlat_in = c.nlat_out = 25;
  c.nlon_in = c.nlon_out = 48;
  c.kernel_shape = {3, 3};
  c.theta_cutoff = 0.3;
  std::mt19937 rng(5);
  for (const bool decoder : {true, false}) {
    c.in_channels = decoder ? 128 : 3;
    c.out_channels = decoder ? 3 : 128;
    const int K = filter_basis_size(c.basis, c.kernel_shape);
    const auto w = random_normal(static_cast<std::size_t>(c.out_channels) * c.in_channels * K, rng);
    EXPECT_EQ(DiscoConvS2(c, w, {}).order(), decoder ? DiscoOrder::weights_first : DiscoOrder::gather_first);
    EXPECT_EQ(DiscoConvS2(c, w, {}, nullptr, DiscoOrder::gather_first).order(), DiscoOrder::gather_first);
    EXPECT_EQ(DiscoConvS2(c, w, {}, nullptr, DiscoOrder::weights_first).order(), DiscoOrder::weights_first);
  }
}

TEST(DiscoConvS2, RejectsBadArguments) {
  const DiscoConfig c = grouped_config();
  const int K = filter_basis_size(c.basis, c.kernel_shape);
  const std::vector<float> w(static_cast<std::size_t>(c.out_channels) * (c.in_channels / c.groups) * K, 0.5f);
  const std::vector<float> bias(static_cast<std::size_t>(c.out_channels), 0.0f);
  expect_error([&] { DiscoConvS2(c, std::vector<float>(w.size() - 1, 0.5f), bias); }, ErrorCode::weights, "weight");
  auto wn = w;
  wn[3] = std::numeric_limits<float>::quiet_NaN();
  expect_error([&] { DiscoConvS2(c, wn, bias); }, ErrorCode::weights, "weight");
  expect_error([&] { DiscoConvS2(c, w, std::vector<float>(3, 0.0f)); }, ErrorCode::weights, "bias");
  DiscoConfig up = c;
  up.nlon_out = 36;  // upsampling
  expect_error([&] { DiscoConvS2(up, w, bias); }, ErrorCode::unsupported, "nlon_in");
  expect_error([&] { compute_filter_table(up); }, ErrorCode::unsupported, "Transpose");
  DiscoConfig odd = c;
  odd.nlon_out = 7;
  expect_error([&] { DiscoConvS2(odd, w, bias); }, ErrorCode::unsupported, "nlon_out");
  DiscoConfig groups = c;
  groups.groups = 4;
  expect_error([&] { DiscoConvS2(groups, w, bias); }, ErrorCode::invalid_argument, "groups");

  const FilterTable good = compute_filter_table(c);
  FilterTable t = good;
  t.kernel_size = K + 1;
  expect_error([&] { DiscoConvS2(c, w, bias, &t); }, ErrorCode::weights, "kernel_size");
  t = good;
  t.col[5] = static_cast<std::int64_t>(c.nlat_in) * c.nlon_in;
  expect_error([&] { DiscoConvS2(c, w, bias, &t); }, ErrorCode::weights, "col[5]");
  t = good;
  t.ker[2] = -1;
  expect_error([&] { DiscoConvS2(c, w, bias, &t); }, ErrorCode::weights, "ker[2]");
  t = good;
  t.row[0] = c.nlat_out;
  expect_error([&] { DiscoConvS2(c, w, bias, &t); }, ErrorCode::weights, "row[0]");
  t = good;
  t.val[1] = std::numeric_limits<double>::infinity();
  expect_error([&] { DiscoConvS2(c, w, bias, &t); }, ErrorCode::weights, "val[1]");
  t = good;
  t.nlat_in = c.nlat_in + 1;
  expect_error([&] { DiscoConvS2(c, w, bias, &t); }, ErrorCode::weights, "grid");
  t = good;
  t.val.pop_back();
  expect_error([&] { DiscoConvS2(c, w, bias, &t); }, ErrorCode::weights, "same length");

  expect_error([] { parse_filter_basis("piecewise-linear"); }, ErrorCode::invalid_argument, "basis_type");
  expect_error([] { parse_basis_norm_mode("sum"); }, ErrorCode::invalid_argument, "basis_norm_mode");
  expect_error([] { filter_basis_size(FilterBasis::piecewise_linear, {}); }, ErrorCode::invalid_argument, "kernel_shape");
  expect_error([] { filter_basis_size(FilterBasis::zernike, {3, 0}); }, ErrorCode::invalid_argument, "kernel_shape");
  expect_error([] { filter_basis_size(FilterBasis::fourier_bessel, {0, 2}); }, ErrorCode::invalid_argument, "kernel_shape");
  EXPECT_EQ(parse_basis_norm_mode("individual"), BasisNormMode::nodal);
  EXPECT_EQ(parse_basis_norm_mode("area ratio"), BasisNormMode::geometric);
  EXPECT_EQ(filter_basis_size(FilterBasis::piecewise_linear, {5, 4}), 9);
  EXPECT_EQ(filter_basis_size(FilterBasis::piecewise_linear, {4, 3}), 6);
  EXPECT_EQ(filter_basis_size(FilterBasis::piecewise_linear, {3}), 2);
  EXPECT_EQ(filter_basis_size(FilterBasis::morlet, {3, 3}), 9);
  EXPECT_EQ(filter_basis_size(FilterBasis::harmonic, {2, 3}), 6);
  EXPECT_EQ(filter_basis_size(FilterBasis::zernike, {4}), 10);

  const DiscoConvS2 conv(c, w, bias);
  std::vector<float> buf(16);
  expect_error([&] { conv.forward(-1, buf.data(), buf.data()); }, ErrorCode::invalid_argument, "batch");
  expect_error([&] { conv.forward(1, nullptr, buf.data()); }, ErrorCode::invalid_argument, "null");
}

}  // namespace

// weight() and bias() read the weights back from the per-group packed layers exactly (a device operator
// built on this operator uploads them), in both orders, grouped or not, with and without bias.
TEST(DiscoConvS2, WeightsReadBackExactly) {
  std::mt19937 rng(13);
  for (const bool grouped : {true, false})
    for (const bool bias : {true, false})
      for (const DiscoOrder order : {DiscoOrder::gather_first, DiscoOrder::weights_first}) {
        DiscoConfig c = grouped_config();
        if (!grouped) c.groups = 1;
        c.bias = bias;
        const int K = filter_basis_size(c.basis, c.kernel_shape);
        const auto w = random_normal(static_cast<std::size_t>(c.out_channels) * (c.in_channels / c.groups) * K, rng);
        const auto b = bias ? random_normal(static_cast<std::size_t>(c.out_channels), rng) : std::vector<float>();
        const DiscoConvS2 conv(c, w, b, nullptr, order);
        const std::string what = std::string(grouped ? "grouped" : "ungrouped") + (bias ? ", bias, " : ", no bias, ") +
                                 order_name(order);
        EXPECT_EQ(conv.weight(), w) << what;
        EXPECT_EQ(conv.bias(), b) << what;
        DiscoConfig t = c;  // the transpose maps the coarse grid to the fine one
        std::swap(t.nlat_in, t.nlat_out);
        std::swap(t.nlon_in, t.nlon_out);
        std::swap(t.grid_in, t.grid_out);
        const DiscoConvTransposeS2 transpose(t, w, b, nullptr, order);
        EXPECT_EQ(transpose.weight(), w) << "transpose, " << what;
        EXPECT_EQ(transpose.bias(), b) << "transpose, " << what;
      }
}
