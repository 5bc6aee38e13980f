// AttentionS2Device / NeighborhoodAttentionS2Device (the CUDA forward of the S2 attention operators)
// against the CPU operators on random weights and inputs: self- and cross-attention, several grids,
// heads, head widths in every kernel bucket, qk-norm, bias, the three scale modes, explicit and default
// cutoffs, downsampling, empty neighbourhoods (NaN where the CPU gives NaN); bitwise run-to-run
// determinism; self-attention by nullptr equals passing the query as key and value, bitwise.
// Every test that needs a device SKIPS when no CUDA device is visible.
//
// Tolerance (float32 rounding; u = 2^-24; both implementations are bounded against the exact result of
// the same float inputs and weights, so they differ by at most twice the bound). With P_q, P_k, P_v the
// largest sum_i |W x_i| + |b| of a projected channel, rms the smallest per-head RMS of q / k before the
// qk-norm, G the largest |1 + g| of the norm weights, s the scale:
//   projection error        d_q = (cin + 2) u P_q   (d_k, d_v alike), after the qk-norm
//                           d_q' = (1 + sqrt(ek)) G d_q / rms + 4 u max|q'| (the Jacobian of x / rms(x)
//                           moves a component by at most (1 + sqrt(ek)) max|dx| / rms), then times s;
//   logit error             d_l = d_q' |k'|_1 + d_k' |s q'|_1 + (ek + 2) u |s q'|_1 max|k'| + 3 u max|log w|
//                           (|.|_1 the largest per-head L1 norm: the dot's products and the rounded log
//                           weight; the exp polynomial adds 3 u relative to each term);
//   attention output        d_o = (2 d_l + 8 u) 2 max|v| + d_v + u max|v|   (a relative change r of the
//                           weights moves a weighted mean by at most r max|v_j - o| <= 2 r max|v|; the
//                           double sums are exact to far below u; the result is rounded to float once);
//   output projection       d_y = max_r sum_c |W_proj[r][c]| d_o + (cout + 2) u P_y.
// The test asserts |y_gpu - y_cpu| <= 2 d_y (first order; the neglected products of the relative
// errors are below 1e-10 here).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "surrogate/sphere/attention_device.hpp"
#include "surrogate/sphere/quadrature.hpp"

namespace sphere = surrogate::sphere;
namespace st = surrogate::testing;

namespace {

constexpr double kU = 5.9604644775390625e-08;  // 2^-24

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// PyTorch-like scales: weights N(0, 1/fan_in), biases and norm weights N(0, 0.25).
template <class Config>
sphere::AttentionS2Weights random_weights(const Config& c, std::mt19937& rng) {
  const auto cin = static_cast<std::size_t>(c.in_channels), ck = static_cast<std::size_t>(c.k_channels),
             co = static_cast<std::size_t>(c.out_channels);
  sphere::AttentionS2Weights w;
  const float sw = 1.0f / std::sqrt(static_cast<float>(cin));
  w.q_weights = random_vector(ck * cin, rng, sw);
  w.k_weights = random_vector(ck * cin, rng, sw);
  w.v_weights = random_vector(co * cin, rng, sw);
  w.proj_weights = random_vector(co * co, rng, 1.0f / std::sqrt(static_cast<float>(co)));
  if (c.bias) {
    w.q_bias = random_vector(ck, rng, 0.5f);
    w.k_bias = random_vector(ck, rng, 0.5f);
    w.v_bias = random_vector(co, rng, 0.5f);
    w.proj_bias = random_vector(co, rng, 0.5f);
  }
  if (c.use_qknorm) {
    w.q_norm_weights = random_vector(ck / static_cast<std::size_t>(c.num_heads), rng, 0.5f);
    w.k_norm_weights = random_vector(ck / static_cast<std::size_t>(c.num_heads), rng, 0.5f);
  }
  return w;
}

/// The magnitudes of one projection (in double): the projected rows, max over channels of
/// sum_i |W x_i| + |b|, and after the optional per-head RMS norm the smallest RMS.
struct Projected {
  std::vector<double> y;
  double magnitude = 0, min_rms = std::numeric_limits<double>::infinity();
};

Projected project(const std::vector<float>& x, std::size_t rows, int cin, const std::vector<float>& W,
                  const std::vector<float>& b, int out, int heads, const std::vector<float>* norm) {
  Projected p;
  p.y.resize(rows * static_cast<std::size_t>(out));
  for (std::size_t r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[static_cast<std::size_t>(o)], m = b.empty() ? 0.0 : std::abs(s);
      for (int i = 0; i < cin; ++i) {
        const double t = static_cast<double>(W[static_cast<std::size_t>(o * cin + i)]) * x[r * cin + static_cast<std::size_t>(i)];
        s += t;
        m += std::abs(t);
      }
      p.y[r * out + static_cast<std::size_t>(o)] = s;
      p.magnitude = std::max(p.magnitude, m);
    }
  if (norm) {
    const int width = out / heads;
    for (std::size_t r = 0; r < rows; ++r)
      for (int h = 0; h < heads; ++h) {
        double* v = p.y.data() + r * out + static_cast<std::size_t>(h * width);
        double sq = 0;
        for (int e = 0; e < width; ++e) sq += v[e] * v[e];
        const double rms = std::sqrt(sq / width);
        p.min_rms = std::min(p.min_rms, rms);
        const double inv = 1 / std::sqrt(sq / width + 1.1920928955078125e-07);
        for (int e = 0; e < width; ++e) v[e] *= inv * (1.0 + (*norm)[static_cast<std::size_t>(e)]);
      }
  }
  return p;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

/// Largest per-head L1 norm of rows x (heads * width).
double max_head_l1(const std::vector<double>& v, int heads, int width, double factor) {
  double m = 0;
  for (std::size_t r = 0; r < v.size() / static_cast<std::size_t>(heads * width); ++r)
    for (int h = 0; h < heads; ++h) {
      double s = 0;
      for (int e = 0; e < width; ++e) s += std::abs(v[r * heads * width + static_cast<std::size_t>(h * width + e)]);
      m = std::max(m, s * factor);
    }
  return m;
}

struct Case {
  std::string name;
  int cin, heads, ck, cout;
  int nlat_in, nlon_in, nlat_out, nlon_out;
  sphere::Grid grid_in = sphere::Grid::equiangular, grid_out = sphere::Grid::equiangular;
  bool bias = true, qknorm = false;
  sphere::ScaleMode scale_mode = sphere::ScaleMode::standard;
  float scale = 0.0f;
  int batch = 1;
  bool self = true;
  double theta_cutoff = 0.0;  // neighbourhood only
};

template <class Config>
Config config_of(const Case& t) {
  Config c;
  c.in_channels = t.cin;
  c.num_heads = t.heads;
  c.k_channels = t.ck;
  c.out_channels = t.cout;
  c.nlat_in = t.nlat_in;
  c.nlon_in = t.nlon_in;
  c.nlat_out = t.nlat_out;
  c.nlon_out = t.nlon_out;
  c.grid_in = t.grid_in;
  c.grid_out = t.grid_out;
  c.bias = t.bias;
  c.use_qknorm = t.qknorm;
  c.scale_mode = t.scale_mode;
  c.scale = t.scale;
  return c;
}

/// The tolerance of the header for one case (the operator's scale s).
double tolerance(const Case& t, const sphere::AttentionS2Weights& w, float s, const std::vector<float>& xq,
                 const std::vector<float>& xk, const std::vector<float>& xv) {
  const std::size_t rq = xq.size() / static_cast<std::size_t>(t.cin), rk = xk.size() / static_cast<std::size_t>(t.cin);
  const int ek = t.ck / t.heads;
  const Projected q = project(xq, rq, t.cin, w.q_weights, w.q_bias, t.ck, t.heads, t.qknorm ? &w.q_norm_weights : nullptr);
  const Projected k = project(xk, rk, t.cin, w.k_weights, w.k_bias, t.ck, t.heads, t.qknorm ? &w.k_norm_weights : nullptr);
  const Projected v = project(xv, rk, t.cin, w.v_weights, w.v_bias, t.cout, t.heads, nullptr);
  double g = 1;
  for (const auto* n : {&w.q_norm_weights, &w.k_norm_weights})
    for (float x : *n) g = std::max(g, std::abs(1.0 + x));
  const double proj_err = (t.cin + 2) * kU;
  double dq = proj_err * q.magnitude, dk = proj_err * k.magnitude;
  if (t.qknorm) {
    const double jacobian = 1 + std::sqrt(static_cast<double>(ek));
    dq = jacobian * g * dq / q.min_rms + 4 * kU * max_abs(q.y);
    dk = jacobian * g * dk / k.min_rms + 4 * kU * max_abs(k.y);
  }
  dq = std::abs(s) * dq + kU * std::abs(s) * max_abs(q.y);
  const double q1 = max_head_l1(q.y, t.heads, ek, std::abs(s)), k1 = max_head_l1(k.y, t.heads, ek, 1.0);
  double log_w = 0;
  for (float x : sphere::attention_latitude_weights(t.nlat_in, t.nlon_in, t.grid_in))
    log_w = std::max(log_w, std::abs(std::log(static_cast<double>(x))));
  const double dl = dq * k1 + dk * q1 + (ek + 2) * kU * q1 * max_abs(k.y) + 3 * kU * log_w;
  const double vmax = max_abs(v.y);
  const double d_o = (2 * dl + 8 * kU) * 2 * vmax + proj_err * v.magnitude + kU * vmax;
  double row_l1 = 0;
  for (int r = 0; r < t.cout; ++r) {
    double sum = 0;
    for (int c = 0; c < t.cout; ++c) sum += std::abs(w.proj_weights[static_cast<std::size_t>(r * t.cout + c)]);
    row_l1 = std::max(row_l1, sum);
  }
  // P_y <= row_l1 * max|o| + |b|, with |o| <= max|v|.
  double b_max = 0;
  for (float x : w.proj_bias) b_max = std::max(b_max, static_cast<double>(std::abs(x)));
  const double y_mag = row_l1 * vmax + b_max;
  const double dy = row_l1 * d_o + (t.cout + 2) * kU * y_mag;
  return 2 * dy;
}

/// Uploads the inputs, runs `op.forward` twice (self-attention with nullptr key/value when t.self) and
/// returns the first output after checking the second is bitwise equal.
template <class Op>
std::vector<float> run_on_device(Op& op, const Case& t, const std::vector<float>& xq, const std::vector<float>& xk,
                                 const std::vector<float>& xv, std::size_t out_size) {
  namespace cu = surrogate::kernels::cuda;
  const cu::DeviceBuffer<float> dq = st::to_device(xq);
  cu::DeviceBuffer<float> dk, dv;
  if (!t.self) {
    dk = st::to_device(xk);
    dv = st::to_device(xv);
  }
  cu::DeviceBuffer<float> dy(out_size, 0);
  cu::Stream stream(0);
  op.forward(t.batch, dq.data(), t.self ? nullptr : dk.data(), t.self ? nullptr : dv.data(), dy.data(), stream.get());
  stream.synchronize();
  const std::vector<float> first = st::to_host(dy.data(), out_size);
  cu::fill(dy.data(), out_size, 0.0f, stream.get());
  op.forward(t.batch, dq.data(), t.self ? nullptr : dk.data(), t.self ? nullptr : dv.data(), dy.data(), stream.get());
  stream.synchronize();
  const std::vector<float> second = st::to_host(dy.data(), out_size);
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), out_size * sizeof(float)))
      << t.name << ": two forwards of the same input differ (the kernels are meant to be deterministic)";
  if (t.self) {  // key = value = query given explicitly: the same result, bitwise
    op.forward(t.batch, dq.data(), dq.data(), dq.data(), dy.data(), stream.get());
    stream.synchronize();
    const std::vector<float> explicit_self = st::to_host(dy.data(), out_size);
    EXPECT_EQ(0, std::memcmp(first.data(), explicit_self.data(), out_size * sizeof(float))) << t.name;
  }
  return first;
}

/// Compares the device forward with the CPU forward of the same operator (NaN where the CPU has NaN).
template <class Op, class DeviceOp>
void compare(const Case& t, const Op& cpu, DeviceOp& gpu, const sphere::AttentionS2Weights& w, std::mt19937& rng) {
  const std::size_t po = static_cast<std::size_t>(t.nlat_out) * t.nlon_out,
                    pi = static_cast<std::size_t>(t.nlat_in) * t.nlon_in, b = static_cast<std::size_t>(t.batch),
                    cin = static_cast<std::size_t>(t.cin);
  const std::vector<float> xq = random_vector(b * po * cin, rng, 1.0f);
  const std::vector<float> xk = t.self ? xq : random_vector(b * pi * cin, rng, 1.0f);
  const std::vector<float> xv = t.self ? xq : random_vector(b * pi * cin, rng, 1.0f);
  const std::size_t out_size = b * po * static_cast<std::size_t>(t.cout);
  std::vector<float> y_cpu(out_size);
  cpu.forward(t.batch, xq.data(), t.self ? nullptr : xk.data(), t.self ? nullptr : xv.data(), y_cpu.data());
  const std::vector<float> y_gpu = run_on_device(gpu, t, xq, xk, xv, out_size);
  const double tol = tolerance(t, w, cpu.scale(), xq, xk, xv);
  double err = 0;
  std::size_t nan_cpu = 0, mismatched_nan = 0;
  for (std::size_t i = 0; i < out_size; ++i) {
    if (std::isnan(y_cpu[i]) || std::isnan(y_gpu[i])) {
      nan_cpu += std::isnan(y_cpu[i]) ? 1 : 0;
      mismatched_nan += std::isnan(y_cpu[i]) != std::isnan(y_gpu[i]) ? 1 : 0;
      continue;
    }
    err = std::max(err, static_cast<double>(std::abs(y_gpu[i] - y_cpu[i])));
  }
  EXPECT_EQ(mismatched_nan, 0u) << t.name << ": NaN on one side only";
  EXPECT_LT(nan_cpu, out_size) << t.name << ": every output is NaN";
  EXPECT_LE(err, tol) << t.name;
  std::printf("  %-34s max |gpu - cpu| %.3g (bound %.3g), NaN outputs %zu\n", t.name.c_str(), err, tol, nan_cpu);
}

std::vector<Case> global_cases() {
  std::vector<Case> cases;
  cases.push_back({"self 8x16, 2 heads, bias", 8, 2, 8, 8, 8, 16, 8, 16});
  Case c{"cross LG 12x24 -> 6x12, qknorm, value scale", 6, 4, 8, 12, 12, 24, 6, 12};
  c.grid_in = sphere::Grid::legendre_gauss;
  c.bias = false;
  c.qknorm = true;
  c.scale_mode = sphere::ScaleMode::value;
  c.scale = 0.7f;
  c.batch = 2;
  c.self = false;
  cases.push_back(c);
  Case w{"self 10x20, 1 head of width 40, tensor scale", 40, 1, 40, 24, 10, 20, 10, 20};
  w.scale_mode = sphere::ScaleMode::tensor;
  w.scale = 0.25f;
  w.batch = 2;
  w.qknorm = true;
  cases.push_back(w);
  Case l{"self 16x32 (512 keys, 8 tiles), 4 heads", 16, 4, 16, 16, 16, 32, 16, 32};
  l.grid_in = l.grid_out = sphere::Grid::lobatto;
  cases.push_back(l);
  return cases;
}

std::vector<Case> neighborhood_cases() {
  std::vector<Case> cases;
  cases.push_back({"self 12x24, default cutoff", 8, 2, 8, 8, 12, 24, 12, 24});
  Case d{"LG 16x32 -> 8x16, qknorm, cutoff 0.5", 6, 4, 12, 8, 16, 32, 8, 16};
  d.grid_in = sphere::Grid::legendre_gauss;
  d.qknorm = true;
  d.theta_cutoff = 0.5;
  d.self = false;
  d.batch = 2;
  cases.push_back(d);
  Case w{"self 10x20, width 48, cutoff 1.2, batch 3", 48, 1, 48, 48, 10, 20, 10, 20};
  w.theta_cutoff = 1.2;
  w.batch = 3;
  w.bias = false;
  w.scale_mode = sphere::ScaleMode::value;
  w.scale = 0.3f;
  cases.push_back(w);
  Case e{"LG 9x36 -> equiangular 8x12, tiny cutoff", 4, 2, 4, 4, 9, 36, 8, 12};
  e.grid_in = sphere::Grid::legendre_gauss;
  e.theta_cutoff = 0.05;  // some output points have no input point that close: NaN, as the CPU
  e.self = false;
  cases.push_back(e);
  return cases;
}

}  // namespace

TEST(SphereAttentionDevice, GlobalMatchesCpu) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(2024);
  for (const Case& t : global_cases()) {
    const auto c = config_of<sphere::AttentionS2Config>(t);
    const sphere::AttentionS2Weights w = random_weights(c, rng);
    sphere::AttentionS2Device gpu(c, w, 0);
    compare(t, gpu.host(), gpu, w, rng);
  }
}

TEST(SphereAttentionDevice, NeighborhoodMatchesCpu) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  for (const Case& t : neighborhood_cases()) {
    auto c = config_of<sphere::NeighborhoodAttentionS2Config>(t);
    c.theta_cutoff = t.theta_cutoff;
    const sphere::AttentionS2Weights w = random_weights(c, rng);
    sphere::NeighborhoodAttentionS2Device gpu(c, w, 0);
    compare(t, gpu.host(), gpu, w, rng);
  }
}
