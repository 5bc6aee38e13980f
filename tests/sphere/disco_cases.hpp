// Helpers shared by the DISCO tests (test_disco.cpp, test_disco_transpose.cpp): golden cases as the
// generators (share/tools/golden/sphere_disco_golden.py, sphere_disco_transpose_golden.py) write them,
// layout conversion, random data and error checks.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "attention_cases.hpp"
#include "h5_reader.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/disco.hpp"

namespace sphere_test {

inline constexpr double kU = 1.0 / 16777216.0;  // 2^-24

inline surrogate::sphere::DiscoConfig read_disco_config(const H5Reader& f, const std::string& g) {
  using namespace surrogate::sphere;
  DiscoConfig c;
  c.in_channels = static_cast<int>(f.number(g, "in_channels"));
  c.out_channels = static_cast<int>(f.number(g, "out_channels"));
  c.nlat_in = static_cast<int>(f.number(g, "nlat_in"));
  c.nlon_in = static_cast<int>(f.number(g, "nlon_in"));
  c.nlat_out = static_cast<int>(f.number(g, "nlat_out"));
  c.nlon_out = static_cast<int>(f.number(g, "nlon_out"));
  c.grid_in = parse_grid(f.text(g, "grid_in"));
  c.grid_out = parse_grid(f.text(g, "grid_out"));
  for (double v : f.doubles(g + "/kernel_shape")) c.kernel_shape.push_back(static_cast<int>(v));
  c.basis = parse_filter_basis(f.text(g, "basis_type"));
  c.norm_mode = parse_basis_norm_mode(f.text(g, "basis_norm_mode"));
  c.groups = static_cast<int>(f.number(g, "groups"));
  c.bias = f.number(g, "bias") != 0;
  c.theta_cutoff = f.number(g, "default_cutoff") != 0 ? 0.0 : f.number(g, "theta_cutoff");
  return c;
}

/// The module's psi buffers. transpose: the table's rows are the input latitudes and its column grid is
/// the output grid (compute_transpose_filter_table's roles).
inline surrogate::sphere::FilterTable read_disco_table(const H5Reader& f, const std::string& g,
                                                       const surrogate::sphere::DiscoConfig& c, bool transpose) {
  surrogate::sphere::FilterTable t;
  t.kernel_size = static_cast<int>(f.number(g, "kernel_size"));
  t.nlat_out = transpose ? c.nlat_in : c.nlat_out;
  t.nlat_in = transpose ? c.nlat_out : c.nlat_in;
  t.nlon_in = transpose ? c.nlon_out : c.nlon_in;
  auto ints = [&](const char* name) {
    std::vector<std::int64_t> v;
    for (double d : f.doubles(g + "/" + name)) v.push_back(static_cast<std::int64_t>(d));
    return v;
  };
  t.ker = ints("psi_ker_idx");
  t.row = ints("psi_row_idx");
  t.col = ints("psi_col_idx");
  t.val = f.doubles(g + "/psi_vals");
  return t;
}

/// (B, P, C) -> (B, C, P)
inline std::vector<float> from_channels_last(const std::vector<float>& y, int batch, int channels) {
  const std::size_t points = y.size() / static_cast<std::size_t>(batch) / static_cast<std::size_t>(channels);
  std::vector<float> x(y.size());
  for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b)
    for (std::size_t c = 0; c < static_cast<std::size_t>(channels); ++c)
      for (std::size_t p = 0; p < points; ++p)
        x[(b * static_cast<std::size_t>(channels) + c) * points + p] = y[(b * points + p) * static_cast<std::size_t>(channels) + c];
  return x;
}

/// Standard normal floats (the generator of attention_cases.hpp with stddev 1).
inline std::vector<float> random_normal(std::size_t n, std::mt19937& rng) { return random_vector(n, rng, 1.0f); }

/// The naive dense reference in float64 with psi rounded to float32 (as the forward uses it): out and the
/// absolute-value sum A of every output element, channels first (B, O, Ho, Wo). Straight from the formula
/// of disco.hpp, O(points^2) with a dense psi.
struct Reference {
  std::vector<double> out, abs_sum;
  int max_group = 0;  // largest number of entries of one (k, t) group
};
inline Reference dense_reference(const surrogate::sphere::DiscoConfig& c, const surrogate::sphere::FilterTable& t, const std::vector<float>& w,
                          const std::vector<float>& bias, int batch, const std::vector<float>& x_cf) {
  const int K = t.kernel_size, Hi = c.nlat_in, Wi = c.nlon_in, Ho = c.nlat_out, Wo = c.nlon_out, p = Wi / Wo;
  const int Cg = c.in_channels / c.groups, Og = c.out_channels / c.groups;
  std::vector<double> psi(static_cast<std::size_t>(K) * Ho * Hi * Wi, 0.0);
  std::map<std::int64_t, int> count;
  for (std::size_t n = 0; n < t.val.size(); ++n) {
    psi[static_cast<std::size_t>((t.ker[n] * Ho + t.row[n]) * Hi * Wi + t.col[n])] += static_cast<float>(t.val[n]);
    ++count[t.ker[n] * Ho + t.row[n]];
  }
  Reference r;
  for (const auto& kv : count) r.max_group = std::max(r.max_group, kv.second);
  r.out.assign(static_cast<std::size_t>(batch) * c.out_channels * Ho * Wo, 0.0);
  r.abs_sum = r.out;
  for (int b = 0; b < batch; ++b)
    for (int o = 0; o < c.out_channels; ++o) {
      const int g = o / Og;
      for (int to = 0; to < Ho; ++to)
        for (int wo = 0; wo < Wo; ++wo) {
          double s = c.bias ? bias[static_cast<std::size_t>(o)] : 0.0, a = std::fabs(s);
          for (int cc = 0; cc < Cg; ++cc)
            for (int k = 0; k < K; ++k) {
              const double wk = w[(static_cast<std::size_t>(o) * Cg + cc) * K + k];
              double yk = 0.0, ya = 0.0;
              const float* xc = x_cf.data() + (static_cast<std::size_t>(b) * c.in_channels + g * Cg + cc) * Hi * Wi;
              const double* pk = psi.data() + static_cast<std::size_t>(k * Ho + to) * Hi * Wi;
              for (int hi = 0; hi < Hi; ++hi)
                for (int wi = 0; wi < Wi; ++wi) {
                  const double v = pk[hi * Wi + wi];
                  if (v == 0.0) continue;
                  const double xv = xc[hi * Wi + (wi + p * wo) % Wi];
                  yk += v * xv;
                  ya += std::fabs(v * xv);
                }
              s += wk * yk;
              a += std::fabs(wk) * ya;
            }
          const std::size_t i = ((static_cast<std::size_t>(b) * c.out_channels + o) * Ho + to) * Wo + wo;
          r.out[i] = s;
          r.abs_sum[i] = a;
        }
    }
  return r;
}

template <class F>
void expect_error(F&& f, surrogate::ErrorCode code, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no Error thrown (expected one mentioning \"" << needle << "\")";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace sphere_test
