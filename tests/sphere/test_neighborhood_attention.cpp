// NeighborhoodAttentionS2 on the CPU: against the official torch-harmonics 0.9.3 module
// (tests/data/sphere/neighborhood_attention.h5), against a naive float64 evaluation with brute-force
// neighbourhoods, against global attention for a whole-sphere cutoff, longitude-shift equivariance,
// thread-count independence, bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include "attention_cases.hpp"
#include "h5_reader.hpp"
#include "neighborhood_reference.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"

namespace sphere = surrogate::sphere;

namespace {

using sphere_test::data_file;
using sphere_test::random_vector;
using sphere_test::random_weights;
using sphere_test::naive;
using sphere_test::to_channels_last;

}  // namespace

// Every case of the official module (tests/data/sphere/README.md): default cutoffs on equiangular,
// Legendre-Gauss and trapezoidal grids, explicit cutoffs, no bias, qk-norm, k_channels / out_channels
// different from in_channels, float and tensor scales, 1 and 2 heads, batch 2, downsampling (p = 2 and
// p = 4, different grids), a whole-sphere cutoff. Tolerance: the official output is float32 arithmetic;
// its distance to the float64 evaluation of the same formula on the module's buffers (output_f64, made
// by the generator) is the rounding that float32 brings; ours sums in double, so it must be as close to
// the float64 result as the official one is: within 4x that gap plus 8 float32 ulps of the output's
// magnitude.
TEST(NeighborhoodAttentionS2, MatchesTorchHarmonics) {
  sphere_test::H5Reader f(data_file("neighborhood_attention.h5"));
  int cases = 0;
  for (const std::string& name : f.children("/")) {
    const std::string g = "/" + name;
    sphere::NeighborhoodAttentionS2Config c;
    const std::string scale_kind = sphere_test::read_common_config(f, g, c);
    ASSERT_TRUE(scale_kind == "none" || scale_kind == "float" || scale_kind == "tensor") << scale_kind;
    const bool default_cutoff = f.number(g, "default_cutoff") != 0;
    c.theta_cutoff = default_cutoff ? 0.0 : f.number(g, "theta_cutoff");
    const sphere::AttentionS2Weights w = sphere_test::read_weights(f, g, c.bias, c.use_qknorm);
    sphere::NeighborhoodAttentionS2 att(c, w);
    // The default cutoff is the module's (0.9.3) value.
    EXPECT_DOUBLE_EQ(att.config().theta_cutoff, f.number(g, "theta_cutoff")) << name;
    std::vector<std::size_t> shape;
    const std::vector<float> q = f.floats(g + "/query", &shape);
    const int batch = static_cast<int>(shape[0]);
    const std::vector<float> xq = to_channels_last(q, batch, c.in_channels);
    const bool self = f.number(g, "self_attention") != 0;
    std::vector<float> xk, xv;
    if (!self) {
      xk = to_channels_last(f.floats(g + "/key"), batch, c.in_channels);
      xv = to_channels_last(f.floats(g + "/value"), batch, c.in_channels);
    }
    const std::vector<float> ref = to_channels_last(f.floats(g + "/output"), batch, c.out_channels);
    const std::vector<float> ref64 = to_channels_last(f.floats(g + "/output_f64"), batch, c.out_channels);
    std::vector<float> out(ref.size(), std::nanf(""));
    att.forward(batch, xq.data(), self ? nullptr : xk.data(), self ? nullptr : xv.data(), out.data());
    double err = 0, gap = 0, mag = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      err = std::max(err, static_cast<double>(std::abs(out[i] - ref[i])));
      gap = std::max(gap, static_cast<double>(std::abs(ref64[i] - ref[i])));
      mag = std::max(mag, static_cast<double>(std::abs(ref[i])));
    }
    const double tol = 4 * gap + 8 * 6e-8 * mag;
    EXPECT_LE(err, tol) << name << ": max |ours - official| " << err << ", official float32 vs float64 " << gap;
    EXPECT_FALSE(std::isnan(err)) << name;
    std::printf("  %-42s max |ours - torch-harmonics| %.3g (official f32 vs f64 %.3g, max |out| %.3g)\n", name.c_str(),
                err, gap, mag);
    ++cases;
  }
  EXPECT_GE(cases, 9);
}

// Larger grids than the golden cases, batch 2, head widths that are not special cases of the kernel,
// downsampling with p = 3, against the float64 formula with brute-force neighbourhoods.
TEST(NeighborhoodAttentionS2, MatchesNaiveFormula) {
  std::mt19937 rng(17);
  struct Case {
    int nlat_in, nlon_in, nlat_out, nlon_out, cin, heads, ck, co;
    sphere::Grid grid_in, grid_out;
    double cutoff;
    bool bias, qknorm;
    sphere::ScaleMode mode;
  };
  const Case cases[] = {
      {20, 40, 20, 40, 12, 3, 15, 12, sphere::Grid::legendre_gauss, sphere::Grid::legendre_gauss, 0.0, true, false,
       sphere::ScaleMode::standard},
      {24, 48, 12, 16, 10, 2, 10, 10, sphere::Grid::equiangular, sphere::Grid::lobatto, 0.37123, true, true,
       sphere::ScaleMode::tensor},
      {17, 32, 17, 32, 5, 1, 7, 3, sphere::Grid::equiangular_trapezoidal, sphere::Grid::equiangular_trapezoidal,
       7.0 / std::sqrt(M_PI) * M_PI / 16, false, true, sphere::ScaleMode::value},
  };
  for (const Case& t : cases) {
    sphere::NeighborhoodAttentionS2Config c;
    c.in_channels = t.cin;
    c.num_heads = t.heads;
    c.nlat_in = t.nlat_in;
    c.nlon_in = t.nlon_in;
    c.nlat_out = t.nlat_out;
    c.nlon_out = t.nlon_out;
    c.grid_in = t.grid_in;
    c.grid_out = t.grid_out;
    c.k_channels = t.ck;
    c.out_channels = t.co;
    c.bias = t.bias;
    c.use_qknorm = t.qknorm;
    c.scale_mode = t.mode;
    c.scale = 0.6f;
    c.theta_cutoff = t.cutoff;
    const sphere::AttentionS2Weights w = random_weights(c, rng);
    const int batch = 2;
    const bool self = t.nlat_in == t.nlat_out && t.nlon_in == t.nlon_out;
    const auto nq = static_cast<std::size_t>(batch * t.nlat_out * t.nlon_out * t.cin);
    const auto nk = static_cast<std::size_t>(batch * t.nlat_in * t.nlon_in * t.cin);
    const std::vector<float> xq = random_vector(nq, rng, 1.0f);
    const std::vector<float> xk = self ? xq : random_vector(nk, rng, 1.0f);
    const std::vector<float> xv = self ? xq : random_vector(nk, rng, 1.0f);
    sphere::NeighborhoodAttentionS2 att(c, w);
    std::vector<float> out(static_cast<std::size_t>(batch * t.nlat_out * t.nlon_out * t.co));
    att.forward(batch, xq.data(), self ? nullptr : xk.data(), self ? nullptr : xv.data(), out.data());
    int ambiguous = 0;
    const std::vector<double> ref = naive(att.config(), w, att.scale(), batch, xq, xk, xv, ambiguous);
    ASSERT_EQ(ambiguous, 0) << "a pair lies on the cutoff; choose another cutoff for this case";
    double err = 0, mag = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      err = std::max(err, std::abs(out[i] - ref[i]));
      mag = std::max(mag, std::abs(ref[i]));
    }
    EXPECT_LE(err, 2e-6 * std::max(1.0, mag)) << t.nlat_in << "x" << t.nlon_in << " -> " << t.nlat_out << "x" << t.nlon_out;
    EXPECT_FALSE(std::isnan(err));
  }
}

// A cutoff of pi makes every input point a neighbour: the result is AttentionS2's (torch-harmonics'
// test_neighborhood_global_equivalence), up to float rounding of the two logit paths.
TEST(NeighborhoodAttentionS2, WholeSphereEqualsGlobalAttention) {
  std::mt19937 rng(23);
  sphere::NeighborhoodAttentionS2Config c;
  c.in_channels = 8;
  c.num_heads = 2;
  c.nlat_in = 12;
  c.nlon_in = 24;
  c.nlat_out = 6;
  c.nlon_out = 12;
  c.grid_in = sphere::Grid::legendre_gauss;
  c.grid_out = sphere::Grid::equiangular;
  c.use_qknorm = true;
  c.theta_cutoff = M_PI;
  const sphere::AttentionS2Weights w = random_weights(c, rng);
  sphere::NeighborhoodAttentionS2 nat(c, w);
  ASSERT_EQ(nat.neighbors().columns.size(), static_cast<std::size_t>(6 * 12 * 24));
  sphere::AttentionS2Config g;
  g.in_channels = c.in_channels;
  g.num_heads = c.num_heads;
  g.nlat_in = c.nlat_in;
  g.nlon_in = c.nlon_in;
  g.nlat_out = c.nlat_out;
  g.nlon_out = c.nlon_out;
  g.grid_in = c.grid_in;
  g.grid_out = c.grid_out;
  g.use_qknorm = true;
  sphere::AttentionS2 glob(g, w);
  EXPECT_EQ(nat.scale(), glob.scale());
  const std::vector<float> xq = random_vector(static_cast<std::size_t>(2 * 6 * 12 * 8), rng, 1.0f);
  const std::vector<float> xk = random_vector(static_cast<std::size_t>(2 * 12 * 24 * 8), rng, 1.0f);
  const std::vector<float> xv = random_vector(xk.size(), rng, 1.0f);
  std::vector<float> y1(xq.size()), y2(xq.size());
  nat.forward(2, xq.data(), xk.data(), xv.data(), y1.data());
  glob.forward(2, xq.data(), xk.data(), xv.data(), y2.data());
  for (std::size_t i = 0; i < y1.size(); ++i) ASSERT_NEAR(y1[i], y2[i], 2e-6) << i;
}

// A grid-aligned longitude shift of the input shifts the output (downsampling, p = 2: an input shift of
// 2p columns is an output shift of 2). The same neighbours in the same order: equal bits.
TEST(NeighborhoodAttentionS2, LongitudeShiftEquivariance) {
  std::mt19937 rng(11);
  sphere::NeighborhoodAttentionS2Config c;
  c.in_channels = 6;
  c.num_heads = 2;
  c.nlat_in = 16;
  c.nlon_in = 32;
  c.nlat_out = 8;
  c.nlon_out = 16;
  c.grid_in = sphere::Grid::legendre_gauss;
  const sphere::AttentionS2Weights w = random_weights(c, rng);
  sphere::NeighborhoodAttentionS2 att(c, w);
  const int cin = 6, out_shift = 2, in_shift = 4;
  const std::vector<float> xq = random_vector(static_cast<std::size_t>(8 * 16 * cin), rng, 1.0f);
  const std::vector<float> xk = random_vector(static_cast<std::size_t>(16 * 32 * cin), rng, 1.0f);
  auto shift = [&](const std::vector<float>& x, int nlat, int nlon, int s) {
    std::vector<float> y(x.size());
    for (int t = 0; t < nlat; ++t)
      for (int l = 0; l < nlon; ++l)
        for (int ch = 0; ch < cin; ++ch)
          y[static_cast<std::size_t>((t * nlon + (l + s) % nlon) * cin + ch)] = x[static_cast<std::size_t>((t * nlon + l) * cin + ch)];
    return y;
  };
  const std::vector<float> xqs = shift(xq, 8, 16, out_shift), xks = shift(xk, 16, 32, in_shift);
  std::vector<float> y(xq.size()), ys(xq.size());
  att.forward(1, xq.data(), xk.data(), xk.data(), y.data());
  att.forward(1, xqs.data(), xks.data(), xks.data(), ys.data());
  const std::vector<float> yshift = shift(y, 8, 16, out_shift);
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(ys[i], yshift[i]) << i;
}

// Every output point is computed by the same arithmetic whatever thread runs it: 1 and 3 threads give
// the same bits (batch 2, downsampling, qk-norm).
TEST(NeighborhoodAttentionS2, ThreadCountDoesNotChangeBits) {
  std::mt19937 rng(5);
  sphere::NeighborhoodAttentionS2Config c;
  c.in_channels = 8;
  c.num_heads = 2;
  c.nlat_in = 20;
  c.nlon_in = 40;
  c.nlat_out = 10;
  c.nlon_out = 20;
  c.grid_in = sphere::Grid::legendre_gauss;
  c.use_qknorm = true;
  c.theta_cutoff = 0.5;
  const sphere::AttentionS2Weights w = random_weights(c, rng);
  sphere::NeighborhoodAttentionS2 att(c, w);
  const std::vector<float> xq = random_vector(static_cast<std::size_t>(2 * 10 * 20 * 8), rng, 1.0f);
  const std::vector<float> xk = random_vector(static_cast<std::size_t>(2 * 20 * 40 * 8), rng, 1.0f);
  const std::vector<float> xv = random_vector(xk.size(), rng, 1.0f);
  std::vector<float> y1(xq.size()), y3(xq.size());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  att.forward(2, xq.data(), xk.data(), xv.data(), y1.data());
  omp_set_num_threads(3);
  att.forward(2, xq.data(), xk.data(), xv.data(), y3.data());
  omp_set_num_threads(saved);
  for (std::size_t i = 0; i < y1.size(); ++i) ASSERT_EQ(y1[i], y3[i]) << i;
}

// With 128 output longitudes the forward projects and attends 8 output rows at a time (about 1024
// points): three such steps per sample give the same bits as forward_rows one output row at a time
// (batch 2, downsampling, separate key and value).
TEST(NeighborhoodAttentionS2, ForwardStepsDoNotChangeBits) {
  std::mt19937 rng(9);
  sphere::NeighborhoodAttentionS2Config c;
  c.in_channels = 6;
  c.num_heads = 2;
  c.nlat_in = 20;
  c.nlon_in = 256;
  c.nlat_out = 20;
  c.nlon_out = 128;
  const sphere::AttentionS2Weights w = random_weights(c, rng);
  sphere::NeighborhoodAttentionS2 att(c, w);
  const int batch = 2, rq = 128 * 6, rk = 256 * 6;
  const std::vector<float> xq = random_vector(static_cast<std::size_t>(batch * 20 * rq), rng, 1.0f);
  const std::vector<float> xk = random_vector(static_cast<std::size_t>(batch * 20 * rk), rng, 1.0f);
  const std::vector<float> xv = random_vector(xk.size(), rng, 1.0f);
  std::vector<float> whole(xq.size()), row(static_cast<std::size_t>(batch * rq));
  att.forward(batch, xq.data(), xk.data(), xv.data(), whole.data());
  for (int t = 0; t < 20; ++t) {
    std::vector<float> q(row.size());
    for (int b = 0; b < batch; ++b)
      std::copy_n(xq.begin() + (b * 20 + t) * rq, rq, q.begin() + b * rq);
    att.forward_rows(batch, t, t + 1, q.data(), 0, 20, xk.data(), xv.data(), row.data());
    for (int b = 0; b < batch; ++b)
      for (int i = 0; i < rq; ++i)
        ASSERT_EQ(row[static_cast<std::size_t>(b * rq + i)], whole[static_cast<std::size_t>((b * 20 + t) * rq + i)])
            << "sample " << b << " row " << t << " value " << i;
  }
}

TEST(NeighborhoodAttentionS2, RejectsBadArguments) {
  std::mt19937 rng(3);
  sphere::NeighborhoodAttentionS2Config c;
  c.in_channels = 4;
  c.num_heads = 2;
  c.nlat_in = c.nlat_out = 4;
  c.nlon_in = c.nlon_out = 8;
  const sphere::AttentionS2Weights w = random_weights(c, rng);
  auto expect_error = [](auto&& fn, surrogate::ErrorCode code, const std::string& word) {
    try {
      fn();
      ADD_FAILURE() << "no exception; expected one naming " << word;
    } catch (const surrogate::Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  using surrogate::ErrorCode;
  sphere::NeighborhoodAttentionS2Config bad = c;
  bad.num_heads = 3;
  expect_error([&] { sphere::NeighborhoodAttentionS2(bad, w); }, ErrorCode::invalid_argument, "k_channels");
  bad = c;
  bad.nlon_out = 3;
  expect_error([&] { sphere::NeighborhoodAttentionS2(bad, w); }, ErrorCode::invalid_argument, "nlon_out");
  bad = c;
  bad.nlat_out = 8;
  bad.nlon_out = 16;  // upsampling: self-attention impossible
  sphere::NeighborhoodAttentionS2 up(bad, w);
  std::vector<float> xo(static_cast<std::size_t>(8 * 16 * 4)), yo(xo.size());
  expect_error([&] { up.forward(1, xo.data(), nullptr, nullptr, yo.data()); }, ErrorCode::invalid_argument, "self-attention");
  bad = c;
  bad.theta_cutoff = -0.1;
  expect_error([&] { sphere::NeighborhoodAttentionS2(bad, w); }, ErrorCode::invalid_argument, "theta_cutoff");
  bad = c;
  bad.scale_mode = sphere::ScaleMode::value;
  bad.scale = std::nanf("");
  expect_error([&] { sphere::NeighborhoodAttentionS2(bad, w); }, ErrorCode::invalid_argument, "scale");
  sphere::AttentionS2Weights bw = w;
  bw.k_weights.pop_back();
  expect_error([&] { sphere::NeighborhoodAttentionS2(c, bw); }, ErrorCode::weights, "k_weights");
  bw = w;
  bw.v_bias[1] = std::nanf("");
  expect_error([&] { sphere::NeighborhoodAttentionS2(c, bw); }, ErrorCode::weights, "v_bias");
  bw = w;
  bw.q_norm_weights.assign(2, 0.0f);
  expect_error([&] { sphere::NeighborhoodAttentionS2(c, bw); }, ErrorCode::invalid_argument, "use_qknorm");
  bad = c;
  bad.in_channels = bad.k_channels = bad.out_channels = 520;  // head width 520 > 512
  bad.num_heads = 1;
  expect_error([&] { sphere::NeighborhoodAttentionS2(bad, random_weights(bad, rng)); }, ErrorCode::unsupported, "num_heads");
  sphere::NeighborhoodAttentionS2 att(c, w);
  std::vector<float> x(static_cast<std::size_t>(4 * 8 * 4)), y(x.size());
  expect_error([&] { att.forward(0, x.data(), nullptr, nullptr, y.data()); }, ErrorCode::invalid_argument, "batch");
  expect_error([&] { att.forward(1, x.data(), x.data(), nullptr, y.data()); }, ErrorCode::invalid_argument, "value");
  bad = c;
  bad.nlat_in = 8;
  bad.nlon_in = 16;  // downsampling: self-attention impossible
  sphere::NeighborhoodAttentionS2 down(bad, w);
  expect_error([&] { down.forward(1, x.data(), nullptr, nullptr, y.data()); }, ErrorCode::invalid_argument, "self-attention");
}

// weights() reads the weights back from the operator's packed layers exactly, as AttentionS2's.
TEST(NeighborhoodAttentionS2, WeightsReadBackExactly) {
  std::mt19937 rng(23);
  sphere::NeighborhoodAttentionS2Config c;
  c.in_channels = 12;
  c.num_heads = 3;
  c.out_channels = 9;
  c.nlat_in = c.nlat_out = 8;
  c.nlon_in = c.nlon_out = 16;
  sphere_test::expect_weights_read_back<sphere::NeighborhoodAttentionS2>(c, rng);
}
