// AttentionS2 on the CPU: against the official torch-harmonics module (tests/data/sphere/attention.h5),
// against a naive O(N^2) float64 evaluation of the formula, longitude-shift equivariance, bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <omp.h>

#include "attention_cases.hpp"
#include "h5_reader.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/attention.hpp"

namespace sphere = surrogate::sphere;

namespace {

using sphere_test::data_file;
using sphere_test::random_vector;
using sphere_test::random_weights;
using sphere_test::to_channels_last;


/// The formula of docs/reference-models.md §5.3 in float64, one query at a time (naive, O(N^2)).
std::vector<double> naive_attention(const sphere::AttentionS2Config& c, const sphere::AttentionS2Weights& w, int batch,
                                    const std::vector<float>& xq, const std::vector<float>& xk, const std::vector<float>& xv) {
  const int cin = c.in_channels, ck = c.k_channels, co = c.out_channels, H = c.num_heads, ek = ck / H, ev = co / H;
  const int po = c.nlat_out * c.nlon_out, pi = c.nlat_in * c.nlon_in;
  auto conv = [&](const std::vector<float>& x, int rows, const std::vector<float>& W, const std::vector<float>& b, int out) {
    std::vector<double> y(static_cast<std::size_t>(rows) * out);
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < out; ++o) {
        double s = c.bias ? b[static_cast<std::size_t>(o)] : 0.0;
        for (int i = 0; i < cin; ++i) s += static_cast<double>(W[static_cast<std::size_t>(o * cin + i)]) * x[static_cast<std::size_t>(r * cin + i)];
        y[static_cast<std::size_t>(r * out + o)] = s;
      }
    return y;
  };
  auto norm = [&](std::vector<double>& x, int rows, const std::vector<float>& g) {
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < H; ++h) {
        double* v = x.data() + static_cast<std::size_t>(r) * ck + h * ek;
        double sq = 0;
        for (int e = 0; e < ek; ++e) sq += v[e] * v[e];
        const double inv = 1 / std::sqrt(sq / ek + 1.1920928955078125e-07);
        for (int e = 0; e < ek; ++e) v[e] *= inv * (1.0 + g[static_cast<std::size_t>(e)]);
      }
  };
  std::vector<double> q = conv(xq, batch * po, w.q_weights, w.q_bias, ck);
  std::vector<double> k = conv(xk, batch * pi, w.k_weights, w.k_bias, ck);
  std::vector<double> v = conv(xv, batch * pi, w.v_weights, w.v_bias, co);
  if (c.use_qknorm) {
    norm(q, batch * po, w.q_norm_weights);
    norm(k, batch * pi, w.k_norm_weights);
  }
  const double s = c.scale_mode == sphere::ScaleMode::standard ? 1 / std::sqrt(static_cast<double>(ek)) : c.scale;
  const sphere::Latitudes lat = sphere::latitudes(c.nlat_in, c.grid_in);
  std::vector<double> o(static_cast<std::size_t>(batch) * po * co), y(o.size());
  std::vector<double> logit(static_cast<std::size_t>(pi));
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < po; ++i) {
        double mx = -1e300;
        for (int j = 0; j < pi; ++j) {
          double d = 0;
          for (int e = 0; e < ek; ++e)
            d += q[static_cast<std::size_t>((b * po + i) * ck + h * ek + e)] * k[static_cast<std::size_t>((b * pi + j) * ck + h * ek + e)];
          const double qw = 2 * M_PI * lat.weight[static_cast<std::size_t>(j / c.nlon_in)] / c.nlon_in;
          logit[static_cast<std::size_t>(j)] = s * d + std::log(qw);
          mx = std::max(mx, logit[static_cast<std::size_t>(j)]);
        }
        double den = 0;
        std::vector<double> num(static_cast<std::size_t>(ev), 0.0);
        for (int j = 0; j < pi; ++j) {
          const double p = std::exp(logit[static_cast<std::size_t>(j)] - mx);
          den += p;
          for (int e = 0; e < ev; ++e) num[static_cast<std::size_t>(e)] += p * v[static_cast<std::size_t>((b * pi + j) * co + h * ev + e)];
        }
        for (int e = 0; e < ev; ++e) o[static_cast<std::size_t>((b * po + i) * co + h * ev + e)] = num[static_cast<std::size_t>(e)] / den;
      }
  for (int r = 0; r < batch * po; ++r)
    for (int oc = 0; oc < co; ++oc) {
      double acc = c.bias ? w.proj_bias[static_cast<std::size_t>(oc)] : 0.0;
      for (int i = 0; i < co; ++i) acc += static_cast<double>(w.proj_weights[static_cast<std::size_t>(oc * co + i)]) * o[static_cast<std::size_t>(r * co + i)];
      y[static_cast<std::size_t>(r * co + oc)] = acc;
    }
  return y;
}



}  // namespace

// Every case of the official module: defaults, no bias, qk-norm, k_channels / out_channels different from
// in_channels, float and tensor scales, cross-attention from a finer Legendre-Gauss grid, batch 2, all
// four grids. Tolerance: the official float32 output itself differs from the same module run in float64
// by up to 9e-7 (rounding cases; recorded in the file as output_f64); ours accumulates the softmax in
// double, so it must be as close to the float64 result as the official one is, within 4x that gap plus
// a few float32 ulps of the output's magnitude.
TEST(AttentionS2, MatchesTorchHarmonics) {
  sphere_test::H5Reader f(data_file("attention.h5"));
  int cases = 0;
  for (const std::string& name : f.children("/")) {
    const std::string g = "/" + name;
    sphere::AttentionS2Config c;
    const std::string scale_kind = sphere_test::read_common_config(f, g, c);
    ASSERT_TRUE(scale_kind == "none" || scale_kind == "float" || scale_kind == "tensor") << scale_kind;
    const sphere::AttentionS2Weights w = sphere_test::read_weights(f, g, c.bias, c.use_qknorm);
    sphere::AttentionS2 att(c, w);
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
    // qk-norm cases: the float64 run used a different eps, so its gap is not rounding; bound by 2e-6.
    const double rounding_gap = c.use_qknorm ? 2e-6 : gap;
    const double tol = 4 * rounding_gap + 8 * 6e-8 * mag;
    EXPECT_LE(err, tol) << name << ": max |ours - official| " << err << ", official float32 vs float64 " << gap;
    std::printf("  %-28s max |ours - torch-harmonics| %.3g (official f32 vs f64 %.3g, max |out| %.3g)\n", name.c_str(), err,
                gap, mag);
    ++cases;
  }
  EXPECT_GE(cases, 8);
}

// Larger grids than the golden cases (several key chunks of the streamed softmax), batch 2, a head
// width that is not a special case of the kernel, against the float64 formula.
TEST(AttentionS2, MatchesNaiveFormula) {
  std::mt19937 rng(7);
  struct Case {
    int nlat_in, nlon_in, nlat_out, nlon_out, cin, heads, ck, co;
    sphere::Grid grid;
    bool bias, qknorm;
    sphere::ScaleMode mode;
  };
  const Case cases[] = {
      {24, 48, 24, 48, 12, 3, 15, 12, sphere::Grid::legendre_gauss, true, false, sphere::ScaleMode::standard},
      {33, 40, 9, 20, 10, 2, 10, 10, sphere::Grid::lobatto, true, true, sphere::ScaleMode::value},
      {17, 64, 17, 64, 5, 1, 7, 3, sphere::Grid::equiangular, false, true, sphere::ScaleMode::tensor},
  };
  for (const Case& t : cases) {
    sphere::AttentionS2Config c;
    c.in_channels = t.cin;
    c.num_heads = t.heads;
    c.nlat_in = t.nlat_in;
    c.nlon_in = t.nlon_in;
    c.nlat_out = t.nlat_out;
    c.nlon_out = t.nlon_out;
    c.grid_in = t.grid;
    c.k_channels = t.ck;
    c.out_channels = t.co;
    c.bias = t.bias;
    c.use_qknorm = t.qknorm;
    c.scale_mode = t.mode;
    c.scale = 0.6f;
    const sphere::AttentionS2Weights w = random_weights(c, rng);
    const int batch = 2;
    const bool self = t.nlat_in == t.nlat_out && t.nlon_in == t.nlon_out;
    const auto nq = static_cast<std::size_t>(batch * t.nlat_out * t.nlon_out * t.cin);
    const auto nk = static_cast<std::size_t>(batch * t.nlat_in * t.nlon_in * t.cin);
    const std::vector<float> xq = random_vector(nq, rng, 1.0f);
    const std::vector<float> xk = self ? xq : random_vector(nk, rng, 1.0f);
    const std::vector<float> xv = self ? xq : random_vector(nk, rng, 1.0f);
    sphere::AttentionS2 att(c, w);
    std::vector<float> out(static_cast<std::size_t>(batch * t.nlat_out * t.nlon_out * t.co));
    att.forward(batch, xq.data(), self ? nullptr : xk.data(), self ? nullptr : xv.data(), out.data());
    const std::vector<double> ref = naive_attention(att.config(), w, batch, xq, xk, xv);
    double err = 0, mag = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      err = std::max(err, std::abs(out[i] - ref[i]));
      mag = std::max(mag, std::abs(ref[i]));
    }
    EXPECT_LE(err, 2e-6 * std::max(1.0, mag)) << t.nlat_in << "x" << t.nlon_in << " -> " << t.nlat_out << "x" << t.nlon_out;
  }
}

// Rotating the input by a grid-aligned longitude shift rotates the output: self-attention on a 10 x 16
// grid shifted by 5 columns. The keys are summed in another order, so equal to float rounding.
TEST(AttentionS2, LongitudeShiftEquivariance) {
  std::mt19937 rng(11);
  sphere::AttentionS2Config c;
  c.in_channels = 6;
  c.num_heads = 2;
  c.nlat_in = c.nlat_out = 10;
  c.nlon_in = c.nlon_out = 16;
  const sphere::AttentionS2Weights w = random_weights(c, rng);
  sphere::AttentionS2 att(c, w);
  const std::vector<float> x = random_vector(static_cast<std::size_t>(10 * 16 * 6), rng, 1.0f);
  std::vector<float> xs(x.size()), y(x.size()), ys(x.size());
  const int shift = 5;
  for (int t = 0; t < 10; ++t)
    for (int l = 0; l < 16; ++l)
      for (int ch = 0; ch < 6; ++ch)
        xs[static_cast<std::size_t>((t * 16 + (l + shift) % 16) * 6 + ch)] = x[static_cast<std::size_t>((t * 16 + l) * 6 + ch)];
  att.forward(1, x.data(), nullptr, nullptr, y.data());
  att.forward(1, xs.data(), nullptr, nullptr, ys.data());
  for (int t = 0; t < 10; ++t)
    for (int l = 0; l < 16; ++l)
      for (int ch = 0; ch < 6; ++ch)
        EXPECT_NEAR(ys[static_cast<std::size_t>((t * 16 + (l + shift) % 16) * 6 + ch)],
                    y[static_cast<std::size_t>((t * 16 + l) * 6 + ch)], 2e-6);
}

// Every query row is computed by the same arithmetic whatever thread runs it: 1 and 3 threads give the
// same bits (batch 2, cross-attention, several query blocks).
TEST(AttentionS2, ThreadCountDoesNotChangeBits) {
  std::mt19937 rng(5);
  sphere::AttentionS2Config c;
  c.in_channels = 8;
  c.num_heads = 2;
  c.nlat_in = 20;
  c.nlon_in = 40;
  c.nlat_out = 10;
  c.nlon_out = 20;
  c.grid_in = sphere::Grid::legendre_gauss;
  c.use_qknorm = true;
  const sphere::AttentionS2Weights w = random_weights(c, rng);
  sphere::AttentionS2 att(c, w);
  const std::vector<float> xq = random_vector(static_cast<std::size_t>(2 * 10 * 20 * 8), rng, 1.0f);
  const std::vector<float> xk = random_vector(static_cast<std::size_t>(2 * 20 * 40 * 8), rng, 1.0f);
  const std::vector<float> xv = random_vector(xk.size(), rng, 1.0f);
  std::vector<float> y1(static_cast<std::size_t>(2 * 10 * 20 * 8)), y3(y1.size());
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  att.forward(2, xq.data(), xk.data(), xv.data(), y1.data());
  omp_set_num_threads(3);
  att.forward(2, xq.data(), xk.data(), xv.data(), y3.data());
  omp_set_num_threads(saved);
  for (std::size_t i = 0; i < y1.size(); ++i) ASSERT_EQ(y1[i], y3[i]) << i;
}

TEST(AttentionS2, RejectsBadArguments) {
  std::mt19937 rng(3);
  sphere::AttentionS2Config c;
  c.in_channels = 4;
  c.num_heads = 2;
  c.nlat_in = c.nlat_out = 4;
  c.nlon_in = c.nlon_out = 8;
  sphere::AttentionS2Weights w = random_weights(c, rng);
  auto expect_error = [](auto&& fn, surrogate::ErrorCode code, const std::string& word) {
    try {
      fn();
      ADD_FAILURE() << "no exception; expected one naming " << word;
    } catch (const surrogate::Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  sphere::AttentionS2Config bad = c;
  bad.num_heads = 3;
  expect_error([&] { sphere::AttentionS2(bad, w); }, surrogate::ErrorCode::invalid_argument, "k_channels");
  bad = c;
  bad.nlon_out = 3;
  expect_error([&] { sphere::AttentionS2(bad, w); }, surrogate::ErrorCode::invalid_argument, "nlon_out");
  sphere::AttentionS2Weights bw = random_weights(c, rng);
  bw.v_weights.pop_back();
  expect_error([&] { sphere::AttentionS2(c, bw); }, surrogate::ErrorCode::weights, "v_weights");
  bw = random_weights(c, rng);
  bw.proj_bias[1] = std::nanf("");
  expect_error([&] { sphere::AttentionS2(c, bw); }, surrogate::ErrorCode::weights, "proj_bias");
  bad = c;
  bad.in_channels = bad.k_channels = bad.out_channels = 520;  // head width 520 > 512
  bad.num_heads = 1;
  expect_error([&] { sphere::AttentionS2(bad, random_weights(bad, rng)); }, surrogate::ErrorCode::unsupported, "num_heads");
  sphere::AttentionS2 att(c, w);
  std::vector<float> x(static_cast<std::size_t>(4 * 8 * 4)), y(x.size());
  expect_error([&] { att.forward(0, x.data(), nullptr, nullptr, y.data()); }, surrogate::ErrorCode::invalid_argument, "batch");
  expect_error([&] { att.forward(1, x.data(), x.data(), nullptr, y.data()); }, surrogate::ErrorCode::invalid_argument, "value");
}

// weights() reads the weights back from the operator's packed layers exactly (a device operator built on
// this operator uploads them): with and without bias and qk-norm.
TEST(AttentionS2, WeightsReadBackExactly) {
  std::mt19937 rng(19);
  sphere::AttentionS2Config c;
  c.in_channels = 10;
  c.num_heads = 2;
  c.k_channels = 6;
  c.out_channels = 14;
  c.nlat_in = c.nlat_out = 6;
  c.nlon_in = c.nlon_out = 12;
  sphere_test::expect_weights_read_back<sphere::AttentionS2>(c, rng);
}
