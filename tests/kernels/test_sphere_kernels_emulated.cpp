// The device code of the sphere attention kernels (kernels/cuda/sphere_attention_kernels.cuh), unchanged,
// run on the CPU through a host emulation of the CUDA constructs it uses (cuda_host_emulation.hpp): the
// global and neighbourhood softmax kernels against a float64 evaluation of the formula on the same float
// operands, the qk-norm/scale kernel bitwise against the CPU operators' arithmetic. This checks the
// kernels' indexing (heads, samples, strides, key tiles and partial tiles, query blocks, CSR lists, the
// longitude shift, downsampling, empty lists) and their use of the online softmax without a GPU; it says
// nothing about the hardware (compilation by nvcc, the real launch, memory). Labels unit;cuda, CUDA builds.
// Wide heads (above 64: the column-split kernels, several threads per query): the same formula check at
// widths 72 ... 520 (non-powers of two, ek != ev, several column groups), and bitwise equality with the
// register kernel instantiated on the host for the same width (the arithmetic the design promises).
//
// Tolerance per output element (u = 2^-24; the operands are exact float inputs here): the logit of a key
// is within d_l = (ek + 2) u sum_e |q_e k_e| + 3 u |log w| of the exact one (the dot's rounding, the rounded
// log weight and its addition), the exp polynomial adds 4 u to each weight's relative error, so the
// weighted mean is within sum_j p_j (d_lj + 4 u) |v_j - o| + u |o| (double sums; one final rounding).
#include "cuda_host_emulation.hpp"  // first: replaces the CUDA keywords for the kernel source below

#include "sphere_attention_kernels.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "surrogate/sphere/neighborhood.hpp"
#include "surrogate/sphere/quadrature.hpp"

namespace cu = surrogate::kernels::cuda;
namespace sk = surrogate::kernels::cuda::sphere_kernels;
namespace sp = surrogate::sphere;
using surrogate::kernels::index_t;

namespace {

constexpr double kU = 5.9604644775390625e-08;  // 2^-24

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

struct KernelCase {
  int nlat_in, nlon_in, nlat_out, nlon_out, heads, ek, ev, batch;
  double theta_cutoff;  // 0: global attention
  sp::Grid grid_in, grid_out;
};

/// The register kernel instantiated for kMaxE (as the launchers in sphere_attention.cu for kMaxE <= 64;
/// wider instantiations only here, as the reference arithmetic for the wide kernels).
template <int kMaxE>
void launch_register(const cu::SphereAttentionArgs& a, const cu::SphereNeighbors* n) {
  const dim3 grid(static_cast<unsigned>((a.queries + sk::kQueries - 1) / sk::kQueries), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.batch));
  if (n)
    cuda_host_emulation::launch(grid, sk::kQueries, [&] { sk::neighborhood_attention_kernel<kMaxE>(a, *n); });
  else
    cuda_host_emulation::launch(grid, sk::kQueries, [&] { sk::global_attention_kernel<kMaxE>(a); });
}

/// A wide kernel with `parts` threads per query on the column group starting at col0 (as sphere_attention.cu).
void launch_wide_group(const cu::SphereAttentionArgs& a, const cu::SphereNeighbors* n, int parts, int col0) {
  const unsigned threads = static_cast<unsigned>(sk::kWideQueries * parts);
  if (n)
    cuda_host_emulation::launch(sk::wide_grid(a), threads, [&] { sk::wide_neighborhood_attention_kernel(a, *n, col0); });
  else
    cuda_host_emulation::launch(sk::wide_grid(a), threads, [&] { sk::wide_global_attention_kernel(a, col0); });
}

/// The wide kernels with `parts` threads per query (any number), one launch per column group.
void launch_wide(const cu::SphereAttentionArgs& a, const cu::SphereNeighbors* n, int parts) {
  for (int col0 = 0; col0 < a.ev; col0 += parts * sk::kWideColumns) launch_wide_group(a, n, parts, col0);
}

/// Which kernels run_case launches.
enum class Path {
  dispatch,          // the launchers' choice (sk::dispatch_attention): register kernels up to width 64, else wide
  wide_and_register  // the wide kernels (wide_parts, and one part per query when that differs), each compared
                     // bitwise with the register kernel instantiated for the case's width
};

/// The register kernel for any width up to 1024 (its bucket, or the next power of two above 64).
void launch_register_any(const cu::SphereAttentionArgs& a, const cu::SphereNeighbors* n) {
  const int widest = std::max(a.ek, a.ev);
  if (widest <= 64)
    sk::dispatch_attention(a, [&](auto w) { launch_register<decltype(w)::value>(a, n); }, [](int, int) {});
  else if (widest <= 128) launch_register<128>(a, n);
  else if (widest <= 256) launch_register<256>(a, n);
  else if (widest <= 512) launch_register<512>(a, n);
  else launch_register<1024>(a, n);
}

void run_case(const KernelCase& c, std::mt19937& rng, Path path = Path::dispatch) {
  const bool neighborhood = c.theta_cutoff > 0;
  const index_t po = static_cast<index_t>(c.nlat_out) * c.nlon_out, pi = static_cast<index_t>(c.nlat_in) * c.nlon_in;
  // Row strides wider than the rows: the kernels must not read or write the padding.
  const index_t ldq = c.heads * c.ek + 3, ldk = c.heads * c.ek + 1, ldv = c.heads * c.ev + 2, ldo = c.heads * c.ev + 5;
  // q as if scaled by 1/sqrt(ek) beyond width 48 (logits of the same spread as at 48): wide heads then do not
  // all give a one-key softmax, where only the final rounding would be tested.
  const float q_stddev = 0.7f * static_cast<float>(std::sqrt(48.0 / std::max(48, c.ek)));
  const std::vector<float> q = random_vector(static_cast<std::size_t>(c.batch * po * ldq), rng, q_stddev),
                           k = random_vector(static_cast<std::size_t>(c.batch * pi * ldk), rng, 0.7f),
                           v = random_vector(static_cast<std::size_t>(c.batch * pi * ldv), rng, 1.0f);
  constexpr float kUntouched = -7.0f;
  std::vector<float> o(static_cast<std::size_t>(c.batch * po * ldo), kUntouched);
  const std::vector<float> quad = sp::attention_latitude_weights(c.nlat_in, c.nlon_in, c.grid_in);
  std::vector<float> log_w;
  for (float x : quad) log_w.push_back(std::log(x));
  cu::SphereAttentionArgs a;
  a.q = q.data();
  a.ldq = ldq;
  a.k = k.data();
  a.ldk = ldk;
  a.v = v.data();
  a.ldv = ldv;
  a.o = o.data();
  a.ldo = ldo;
  a.log_w_lat = log_w.data();
  a.batch = c.batch;
  a.heads = c.heads;
  a.ek = c.ek;
  a.ev = c.ev;
  a.queries = po;
  a.keys = pi;
  a.nlon_in = c.nlon_in;
  sp::NeighborhoodCsr csr;
  cu::SphereNeighbors n;
  if (neighborhood) {
    csr = sp::neighborhood_csr(c.nlat_in, c.nlon_in, c.grid_in, c.nlat_out, c.nlon_out, c.grid_out, c.theta_cutoff);
    n.row_offsets = csr.row_offsets.data();
    n.columns = csr.columns.data();
    n.nlat_out = c.nlat_out;
    n.nlon_out = c.nlon_out;
  }
  const cu::SphereNeighbors* const nb = neighborhood ? &n : nullptr;
  std::size_t register_mismatch = 0;
  if (path == Path::dispatch) {
    sk::dispatch_attention(
        a, [&](auto w) { launch_register<decltype(w)::value>(a, nb); },
        [&](int parts, int col0) { launch_wide_group(a, nb, parts, col0); });
  } else {
    std::vector<float> reference(o.size(), kUntouched);
    a.o = reference.data();
    launch_register_any(a, nb);
    a.o = o.data();
    for (const int parts : {sk::wide_parts(c.ek, c.ev), 1}) {
      std::fill(o.begin(), o.end(), kUntouched);
      launch_wide(a, nb, parts);
      // Equal bits (NaN included: 0 * inf from the same operations).
      register_mismatch += std::memcmp(o.data(), reference.data(), o.size() * sizeof(float)) != 0 ? 1 : 0;
      if (parts == 1) break;
    }
  }

  double worst = 0, max_err = 0;
  std::size_t nan = 0, nan_mismatch = 0, padding_written = 0;
  std::vector<index_t> keys;
  std::vector<double> logit, d_logit;
  for (index_t b = 0; b < c.batch; ++b)
    for (index_t i = 0; i < po; ++i) {
      keys.clear();
      if (neighborhood) {
        const auto t = static_cast<std::size_t>(i / c.nlon_out);
        for (std::int64_t j = csr.row_offsets[t]; j < csr.row_offsets[t + 1]; ++j)
          keys.push_back(csr.shifted(csr.columns[static_cast<std::size_t>(j)], static_cast<int>(i % c.nlon_out)));
      } else {
        for (index_t j = 0; j < pi; ++j) keys.push_back(j);
      }
      for (int h = 0; h < c.heads; ++h) {
        logit.clear();
        d_logit.clear();
        double mx = -INFINITY;
        for (index_t j : keys) {
          double dot = 0, abs_dot = 0;
          for (int e = 0; e < c.ek; ++e) {
            const double p = static_cast<double>(q[static_cast<std::size_t>((b * po + i) * ldq + h * c.ek + e)]) *
                             k[static_cast<std::size_t>((b * pi + j) * ldk + h * c.ek + e)];
            dot += p;
            abs_dot += std::abs(p);
          }
          const double lw = std::log(static_cast<double>(quad[static_cast<std::size_t>(j / c.nlon_in)]));
          logit.push_back(dot + lw);
          d_logit.push_back((c.ek + 2) * kU * abs_dot + 3 * kU * std::abs(lw));
          mx = std::max(mx, dot + lw);
        }
        double den = 0;
        for (double l : logit) den += std::exp(l - mx);
        for (int e = 0; e < c.ev; ++e) {
          const auto value = [&](std::size_t m) {
            return static_cast<double>(v[static_cast<std::size_t>((b * pi + keys[m]) * ldv + h * c.ev + e)]);
          };
          double num = 0;
          for (std::size_t m = 0; m < keys.size(); ++m) num += std::exp(logit[m] - mx) * value(m);
          const double exact = num / den;
          double bound = 0;
          for (std::size_t m = 0; m < keys.size(); ++m)
            bound += std::exp(logit[m] - mx) / den * (d_logit[m] + 4 * kU) * std::abs(value(m) - exact);
          bound += kU * std::abs(exact);
          const float got = o[static_cast<std::size_t>((b * po + i) * ldo + h * c.ev + e)];
          if (keys.empty() || std::isnan(got)) {
            ++nan;
            nan_mismatch += keys.empty() != std::isnan(got) ? 1 : 0;
            continue;
          }
          const double err = std::abs(got - exact);
          max_err = std::max(max_err, err);
          worst = std::max(worst, err / bound);
        }
      }
      for (index_t col = c.heads * c.ev; col < ldo; ++col)
        padding_written += o[static_cast<std::size_t>((b * po + i) * ldo + col)] != kUntouched ? 1 : 0;
    }
  const std::string name = std::string(neighborhood ? "neighbourhood " : "global ") + std::to_string(c.nlat_in) + "x" +
                           std::to_string(c.nlon_in) + " -> " + std::to_string(c.nlat_out) + "x" +
                           std::to_string(c.nlon_out) + ", heads " + std::to_string(c.heads) + ", ek " +
                           std::to_string(c.ek) + ", ev " + std::to_string(c.ev) + ", batch " + std::to_string(c.batch);
  EXPECT_EQ(nan_mismatch, 0u) << name << ": NaN exactly for the outputs without keys";
  EXPECT_EQ(padding_written, 0u) << name << ": padding columns of o written";
  EXPECT_LE(worst, 1.0) << name << ": max error " << max_err;
  EXPECT_EQ(register_mismatch, 0u) << name << ": the wide kernels differ from the register kernel's arithmetic";
  std::printf("  %-62s max err %.3g (%.3g of the bound), NaN %zu\n", name.c_str(), max_err, worst, nan);
}

}  // namespace

TEST(SphereKernelsEmulated, GlobalAttentionMatchesTheFormula) {
  std::mt19937 rng(5);
  using G = sp::Grid;
  run_case({8, 16, 8, 16, 2, 4, 4, 1, 0.0, G::equiangular, G::equiangular}, rng);
  run_case({12, 24, 6, 12, 3, 3, 5, 2, 0.0, G::legendre_gauss, G::equiangular}, rng);  // cross, ek != ev
  run_case({10, 20, 10, 20, 1, 40, 24, 1, 0.0, G::lobatto, G::lobatto}, rng);          // the 64 bucket
  run_case({9, 15, 9, 15, 2, 16, 33, 1, 0.0, G::equiangular, G::equiangular}, rng);    // 135 keys: a partial tile; 2 query blocks
}

TEST(SphereKernelsEmulated, NeighborhoodAttentionMatchesTheFormula) {
  std::mt19937 rng(6);
  using G = sp::Grid;
  run_case({12, 24, 12, 24, 2, 4, 4, 1, 0.3, G::equiangular, G::equiangular}, rng);
  run_case({16, 32, 8, 16, 4, 3, 2, 2, 0.5, G::legendre_gauss, G::equiangular}, rng);   // downsampling, p = 2
  run_case({16, 32, 8, 8, 2, 8, 8, 1, 0.4, G::equiangular, G::legendre_gauss}, rng);    // p = 4
  run_case({10, 20, 10, 20, 1, 48, 48, 3, 1.2, G::equiangular, G::equiangular}, rng);   // wide, 2 query blocks
  run_case({9, 36, 8, 12, 2, 2, 2, 1, 0.05, G::legendre_gauss, G::equiangular}, rng);   // empty lists: NaN
}

// Wide heads (above 64: the model zoo's one head of width 128 or 256, and wider), through the launchers'
// choice (the wide kernels): the formula within the same bound.
TEST(SphereKernelsEmulated, WideHeadsMatchTheFormula) {
  std::mt19937 rng(7);
  using G = sp::Grid;
  // global: 135 keys = 3 windows of kWideSlots, several query blocks with a partial last one
  run_case({9, 15, 9, 15, 1, 128, 128, 2, 0.0, G::equiangular, G::equiangular}, rng);
  run_case({6, 12, 6, 12, 1, 96, 96, 1, 0.0, G::legendre_gauss, G::legendre_gauss}, rng);
  run_case({8, 16, 4, 8, 2, 100, 130, 1, 0.0, G::lobatto, G::equiangular}, rng);        // 3 parts, the last 2 columns
  run_case({6, 12, 6, 12, 1, 256, 256, 1, 0.0, G::equiangular, G::equiangular}, rng);  // e256: 4 q chunks
  // neighbourhood: blocks spanning several output latitudes with lists of different lengths
  run_case({12, 24, 12, 24, 1, 128, 128, 2, 0.3, G::equiangular, G::equiangular}, rng);
  run_case({16, 32, 8, 8, 2, 96, 160, 1, 0.5, G::legendre_gauss, G::equiangular}, rng);  // p = 4, ev 160
  run_case({10, 20, 10, 20, 1, 256, 256, 1, 1.2, G::equiangular, G::equiangular}, rng);  // lists of 100+ keys
  run_case({9, 36, 8, 12, 1, 72, 72, 1, 0.05, G::legendre_gauss, G::equiangular}, rng);  // empty lists: NaN
}

// The wide kernels are the register kernels' arithmetic: bitwise equal to the register kernel instantiated
// for the same width (on the device only up to 64; on the host, as a reference, for any width), with the
// launchers' number of threads per query and with one (every column group a launch of its own), including
// ek > ev, ev > 512 (two column groups at 8 parts) and the register kernels' own widths (<= 64).
TEST(SphereKernelsEmulated, WideKernelsAreTheRegisterKernelsArithmetic) {
  std::mt19937 rng(8);
  using G = sp::Grid;
  const Path w = Path::wide_and_register;
  run_case({9, 15, 9, 15, 2, 16, 33, 1, 0.0, G::equiangular, G::equiangular}, rng, w);
  run_case({8, 16, 8, 16, 1, 64, 64, 1, 0.0, G::lobatto, G::lobatto}, rng, w);
  run_case({9, 15, 9, 15, 1, 128, 128, 1, 0.0, G::equiangular, G::equiangular}, rng, w);
  run_case({6, 12, 3, 6, 1, 200, 40, 2, 0.0, G::legendre_gauss, G::equiangular}, rng, w);  // ek > ev
  run_case({4, 8, 4, 8, 1, 72, 520, 1, 0.0, G::equiangular, G::equiangular}, rng, w);      // 2 column groups
  run_case({12, 24, 12, 24, 2, 5, 3, 1, 0.3, G::equiangular, G::equiangular}, rng, w);
  run_case({16, 32, 8, 8, 1, 96, 160, 2, 0.5, G::legendre_gauss, G::equiangular}, rng, w);
  run_case({10, 20, 10, 20, 1, 256, 256, 1, 1.2, G::equiangular, G::equiangular}, rng, w);
  run_case({9, 36, 8, 12, 1, 72, 72, 1, 0.05, G::legendre_gauss, G::equiangular}, rng, w);   // NaN, same bits
}

// The kernel's arithmetic is the CPU operators' (s2_heads.cpp, rms_norm_heads and the scale): equal bits.
TEST(SphereKernelsEmulated, HeadNormScaleIsTheCpuArithmetic) {
  std::mt19937 rng(3);
  constexpr int kRows = 300, kHeads = 3, kWidth = 5, kLd = 17;
  std::vector<float> x = random_vector(kRows * kLd, rng, 1.0f), weight = random_vector(kWidth, rng, 0.5f);
  for (float& w : weight) w += 1.0f;
  for (const bool norm : {true, false}) {
    std::vector<float> expected = x, got = x;
    for (int r = 0; r < kRows; ++r)
      for (int h = 0; h < kHeads; ++h) {
        float* p = expected.data() + r * kLd + h * kWidth;
        if (norm) {
          double sq = 0.0;
          for (int e = 0; e < kWidth; ++e) sq += static_cast<double>(p[e]) * p[e];
          const float inv = static_cast<float>(1.0 / std::sqrt(sq / kWidth + static_cast<double>(FLT_EPSILON)));
          for (int e = 0; e < kWidth; ++e) p[e] = p[e] * inv * weight[static_cast<std::size_t>(e)];
        }
        for (int e = 0; e < kWidth; ++e) p[e] *= 0.37f;
      }
    const index_t n = kRows * kHeads;
    cuda_host_emulation::launch(dim3(static_cast<unsigned>((n + 255) / 256)), 256, [&] {
      sk::head_norm_scale_kernel(got.data(), kLd, kRows, kHeads, kWidth, norm ? weight.data() : nullptr, 0.37f);
    });
    EXPECT_EQ(0, std::memcmp(expected.data(), got.data(), got.size() * sizeof(float))) << "norm " << norm;
  }
}
