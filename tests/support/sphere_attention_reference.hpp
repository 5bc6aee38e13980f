// Shared by the S2 attention CUDA tests (test_gpu_sphere_attention.cpp, test_cuda_sphere_host.cpp): the
// test cases, random weights, and the exact (float64) output of AttentionS2 / NeighborhoodAttentionS2 for
// float32 inputs and weights together with a per-element bound on the float32 rounding error of one
// implementation that follows the operators' order of operations (CPU or CUDA).
//
// The bound (u = 2^-24; first order, the products of relative errors are below 1e-12 here):
//   projection      d_c = (cin + 2) u (sum_i |W_ci x_i| + |b_c|)        (any summation order, bias included);
//   qk-norm         d'_e = (1 + sqrt(ek)) |1 + g_e| max_c d_c / rms + 4 u |y'_e|   (the Jacobian of x / rms(x)
//                   moves a component by at most (1 + sqrt(ek)) max|dx| / rms; inv, two products);
//   scale           d''_e = |s| d'_e + u |s y'_e|;
//   logit           d_l = sum_e (d_qe |k_e| + d_ke |q_e|) + (ek + 2) u sum_e |q_e k_e| + 3 u |log w|
//                   (products and sums of the dot, the rounded log weight and its addition);
//   softmax output  d_o = sum_j p_j ((d_lj + 4 u) |v_j - o| + d_vj) + u |o|   (a relative change r_j of the
//                   weights moves the weighted mean by sum_j p_j r_j (v_j - o); exp_parts' polynomial and the
//                   quadrature factor add 4 u to r_j; double sums; one final rounding);
//   output          d_y = sum_c |W_rc| d_oc + (cout + 2) u (sum_c |W_rc o_c| + |b_r|).
// Two implementations each within d_y of the exact value differ by at most 2 d_y.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"
#include "surrogate/sphere/quadrature.hpp"

namespace sphere_cuda_test {

namespace sphere = surrogate::sphere;

inline constexpr double kU = 5.9604644775390625e-08;  // 2^-24

inline std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
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
  if constexpr (std::is_same_v<Config, sphere::NeighborhoodAttentionS2Config>) c.theta_cutoff = t.theta_cutoff;
  return c;
}

/// PyTorch-like scales: weights N(0, 1/fan_in), biases and norm weights N(0, 0.25).
inline sphere::AttentionS2Weights random_weights(const Case& t, std::mt19937& rng) {
  const auto cin = static_cast<std::size_t>(t.cin), ck = static_cast<std::size_t>(t.ck),
             co = static_cast<std::size_t>(t.cout);
  sphere::AttentionS2Weights w;
  const float sw = 1.0f / std::sqrt(static_cast<float>(cin));
  w.q_weights = random_vector(ck * cin, rng, sw);
  w.k_weights = random_vector(ck * cin, rng, sw);
  w.v_weights = random_vector(co * cin, rng, sw);
  w.proj_weights = random_vector(co * co, rng, 1.0f / std::sqrt(static_cast<float>(co)));
  if (t.bias) {
    w.q_bias = random_vector(ck, rng, 0.5f);
    w.k_bias = random_vector(ck, rng, 0.5f);
    w.v_bias = random_vector(co, rng, 0.5f);
    w.proj_bias = random_vector(co, rng, 0.5f);
  }
  if (t.qknorm) {
    w.q_norm_weights = random_vector(ck / static_cast<std::size_t>(t.heads), rng, 0.5f);
    w.k_norm_weights = random_vector(ck / static_cast<std::size_t>(t.heads), rng, 0.5f);
  }
  return w;
}

/// Heads wider than 64 (the device's column-split kernels): the model zoo's one head of width 128, two
/// heads of widths 96 / 160 with 320 output channels (projections above 256 channels: cuda::dense). Few
/// input channels: the worst-case bound grows with every width, and with 16 inputs it stays below 1 % of
/// the outputs (test_cuda_sphere_host.cpp), tight enough to catch a wrong key, column or weight.
inline std::vector<Case> wide_global_cases() {
  std::vector<Case> cases;
  Case z{"self 8x16, 1 head of width 128 (zoo e128)", 16, 1, 128, 128, 8, 16, 8, 16};
  z.bias = false;
  z.grid_in = z.grid_out = sphere::Grid::legendre_gauss;
  cases.push_back(z);
  Case c{"cross 12x24 -> 6x12, widths 96 / 160", 16, 2, 192, 320, 12, 24, 6, 12};
  c.self = false;
  c.batch = 2;
  cases.push_back(c);
  return cases;
}

/// Heads wider than 64, neighbourhood: the zoo's e256 (one head of width 256) and a downsampling case
/// with 264 value columns (5 threads per query on the device, the last with 8 columns; the CPU operator
/// takes at most 512).
inline std::vector<Case> wide_neighborhood_cases() {
  std::vector<Case> cases;
  Case z{"self 12x24, 1 head of width 256 (zoo e256)", 16, 1, 256, 256, 12, 24, 12, 24};
  z.bias = false;
  cases.push_back(z);
  Case d{"LG 16x32 -> 8x8, widths 72 / 264, cutoff 0.5", 16, 1, 72, 264, 16, 32, 8, 8};
  d.grid_in = sphere::Grid::legendre_gauss;
  d.theta_cutoff = 0.5;
  d.self = false;
  d.batch = 2;
  cases.push_back(d);
  return cases;
}

inline std::vector<Case> global_cases() {
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
  Case l{"self 16x32 Lobatto (8 key tiles), 4 heads", 16, 4, 16, 16, 16, 32, 16, 32};
  l.grid_in = l.grid_out = sphere::Grid::lobatto;
  cases.push_back(l);
  for (const Case& wide : wide_global_cases()) cases.push_back(wide);
  return cases;
}

inline std::vector<Case> neighborhood_cases() {
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
  Case e{"LG 9x36 -> 8x12, cutoff 0.05 (empty lists)", 4, 2, 4, 4, 9, 36, 8, 12};
  e.grid_in = sphere::Grid::legendre_gauss;
  e.theta_cutoff = 0.05;  // the polar output rows have no input point that close: NaN, as the CPU
  e.self = false;
  cases.push_back(e);
  for (const Case& wide : wide_neighborhood_cases()) cases.push_back(wide);
  return cases;
}

/// The random inputs of a case (key = value = query for self-attention).
struct Inputs {
  std::vector<float> q, k, v;
};
inline Inputs random_inputs(const Case& t, std::mt19937& rng) {
  const std::size_t po = static_cast<std::size_t>(t.nlat_out) * t.nlon_out,
                    pi = static_cast<std::size_t>(t.nlat_in) * t.nlon_in, b = static_cast<std::size_t>(t.batch),
                    cin = static_cast<std::size_t>(t.cin);
  Inputs in;
  in.q = random_vector(b * po * cin, rng, 1.0f);
  in.k = t.self ? in.q : random_vector(b * pi * cin, rng, 1.0f);
  in.v = t.self ? in.q : random_vector(b * pi * cin, rng, 1.0f);
  return in;
}

/// A projection in float64 with the per-element bound of the header (norm: the per-head weights, or null).
struct Projected {
  std::vector<double> y, err;
};
inline Projected project(const std::vector<float>& x, std::size_t rows, int cin, const std::vector<float>& W,
                         const std::vector<float>& b, int out, int heads, const std::vector<float>* norm, double scale) {
  Projected p;
  const auto uout = static_cast<std::size_t>(out);
  p.y.resize(rows * uout);
  p.err.resize(rows * uout);
  for (std::size_t r = 0; r < rows; ++r)
    for (std::size_t o = 0; o < uout; ++o) {
      double s = b.empty() ? 0.0 : b[o], m = std::abs(s);
      for (std::size_t i = 0; i < static_cast<std::size_t>(cin); ++i) {
        const double t = static_cast<double>(W[o * static_cast<std::size_t>(cin) + i]) * x[r * static_cast<std::size_t>(cin) + i];
        s += t;
        m += std::abs(t);
      }
      p.y[r * uout + o] = s;
      p.err[r * uout + o] = (cin + 2) * kU * m;
    }
  const int width = out / heads;
  for (std::size_t r = 0; r < rows; ++r)
    for (int h = 0; h < heads; ++h) {
      double* y = p.y.data() + r * uout + static_cast<std::size_t>(h * width);
      double* err = p.err.data() + r * uout + static_cast<std::size_t>(h * width);
      if (norm) {
        double sq = 0, dmax = 0;
        for (int e = 0; e < width; ++e) {
          sq += y[e] * y[e];
          dmax = std::max(dmax, err[e]);
        }
        const double rms = std::sqrt(sq / width), inv = 1 / std::sqrt(sq / width + 1.1920928955078125e-07);
        for (int e = 0; e < width; ++e) {
          const double g = 1.0 + (*norm)[static_cast<std::size_t>(e)];
          y[e] *= inv * g;
          err[e] = (1 + std::sqrt(static_cast<double>(width))) * std::abs(g) * dmax / rms + 4 * kU * std::abs(y[e]);
        }
      }
      if (scale != 1.0)
        for (int e = 0; e < width; ++e) {
          y[e] *= scale;
          err[e] = std::abs(scale) * err[e] + kU * std::abs(y[e]);
        }
    }
  return p;
}

/// The exact output (rows x cout; NaN for a query without keys) and the per-element bound of one
/// implementation.
struct Reference {
  std::vector<double> y, bound;
};

template <class Op>
Reference reference(const Case& t, const Op& op, const sphere::AttentionS2Weights& w, const Inputs& in) {
  constexpr bool kNeighborhood = std::is_same_v<Op, sphere::NeighborhoodAttentionS2>;
  const std::size_t po = static_cast<std::size_t>(t.nlat_out) * t.nlon_out,
                    pi = static_cast<std::size_t>(t.nlat_in) * t.nlon_in, B = static_cast<std::size_t>(t.batch);
  const int H = t.heads, ek = t.ck / H, ev = t.cout / H;
  const auto uck = static_cast<std::size_t>(t.ck), uco = static_cast<std::size_t>(t.cout);
  const Projected q = project(in.q, B * po, t.cin, w.q_weights, w.q_bias, t.ck, H, t.qknorm ? &w.q_norm_weights : nullptr,
                              op.scale());
  const Projected k = project(in.k, B * pi, t.cin, w.k_weights, w.k_bias, t.ck, H, t.qknorm ? &w.k_norm_weights : nullptr, 1.0);
  const Projected v = project(in.v, B * pi, t.cin, w.v_weights, w.v_bias, t.cout, H, nullptr, 1.0);
  std::vector<double> log_w;
  for (float x : sphere::attention_latitude_weights(t.nlat_in, t.nlon_in, t.grid_in)) log_w.push_back(std::log(static_cast<double>(x)));
  Reference ref;
  ref.y.resize(B * po * uco);
  ref.bound.resize(B * po * uco);
  std::vector<double> o(uco), d_o(uco), logit, d_logit;
  std::vector<std::size_t> keys;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t i = 0; i < po; ++i) {
      keys.clear();
      if constexpr (kNeighborhood) {
        const sphere::NeighborhoodCsr& csr = op.neighbors();
        const std::size_t lat = i / static_cast<std::size_t>(t.nlon_out);
        const int wo = static_cast<int>(i % static_cast<std::size_t>(t.nlon_out));
        for (auto j = csr.row_offsets[lat]; j < csr.row_offsets[lat + 1]; ++j)
          keys.push_back(static_cast<std::size_t>(csr.shifted(csr.columns[static_cast<std::size_t>(j)], wo)));
      } else {
        for (std::size_t j = 0; j < pi; ++j) keys.push_back(j);
      }
      for (int h = 0; h < H; ++h) {
        const std::size_t qo = (b * po + i) * uck + static_cast<std::size_t>(h * ek);
        logit.assign(keys.size(), 0.0);
        d_logit.assign(keys.size(), 0.0);
        double mx = -std::numeric_limits<double>::infinity();
        for (std::size_t n = 0; n < keys.size(); ++n) {
          const std::size_t ko = (b * pi + keys[n]) * uck + static_cast<std::size_t>(h * ek);
          double dot = 0, abs_dot = 0, d = 0;
          for (int e = 0; e < ek; ++e) {
            dot += q.y[qo + e] * k.y[ko + e];
            abs_dot += std::abs(q.y[qo + e] * k.y[ko + e]);
            d += q.err[qo + e] * std::abs(k.y[ko + e]) + k.err[ko + e] * std::abs(q.y[qo + e]);
          }
          const double lw = log_w[keys[n] / static_cast<std::size_t>(t.nlon_in)];
          logit[n] = dot + lw;
          d_logit[n] = d + (ek + 2) * kU * abs_dot + 3 * kU * std::abs(lw);
          mx = std::max(mx, logit[n]);
        }
        double den = 0;
        for (double l : logit) den += std::exp(l - mx);
        for (int e = 0; e < ev; ++e) {
          const std::size_t c = static_cast<std::size_t>(h * ev + e);
          double num = 0;
          for (std::size_t n = 0; n < keys.size(); ++n)
            num += std::exp(logit[n] - mx) * v.y[(b * pi + keys[n]) * uco + c];
          o[c] = keys.empty() ? std::nan("") : num / den;
          double dev = 0;
          for (std::size_t n = 0; n < keys.size(); ++n) {
            const std::size_t vr = (b * pi + keys[n]) * uco + c;
            dev += std::exp(logit[n] - mx) / den * ((d_logit[n] + 4 * kU) * std::abs(v.y[vr] - o[c]) + v.err[vr]);
          }
          d_o[c] = dev + kU * std::abs(o[c]);
        }
      }
      for (std::size_t r = 0; r < uco; ++r) {
        double y = t.bias ? w.proj_bias[r] : 0.0, mag = std::abs(y), d = 0;
        for (std::size_t c = 0; c < uco; ++c) {
          const double wr = w.proj_weights[r * uco + c];
          y += wr * o[c];
          mag += std::abs(wr * o[c]);
          d += std::abs(wr) * d_o[c];
        }
        ref.y[(b * po + i) * uco + r] = y;
        ref.bound[(b * po + i) * uco + r] = d + (t.cout + 2) * kU * mag;
      }
    }
  return ref;
}

/// max over elements of |got - exact| / bound (NaN positions must agree; counted in *nan_mismatch).
inline double worst_ratio(const std::vector<float>& got, const Reference& ref, double factor, std::size_t* nan_mismatch,
                          double* max_err = nullptr) {
  double worst = 0, err = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(ref.y[i]) || std::isnan(got[i])) {
      *nan_mismatch += std::isnan(ref.y[i]) != std::isnan(got[i]) ? 1 : 0;
      continue;
    }
    const double e = std::abs(got[i] - ref.y[i]);
    err = std::max(err, e);
    worst = std::max(worst, e / (factor * ref.bound[i]));
  }
  if (max_err) *max_err = err;
  return worst;
}

}  // namespace sphere_cuda_test
