// AttentionS2Device / NeighborhoodAttentionS2Device (the CUDA forward of the S2 attention operators)
// against the exact float64 result and against the CPU operators on random weights and inputs: self- and
// cross-attention, several grids, heads, head widths in every kernel bucket, qk-norm, bias, the three scale
// modes, explicit and default cutoffs, downsampling, empty neighbourhoods (NaN where the CPU gives NaN);
// bitwise run-to-run determinism; self-attention by nullptr equals passing the query as key and value,
// bitwise. Every test SKIPS when no CUDA device is visible.
//
// Tolerance: the per-element float32 error bound d_y of sphere_attention_reference.hpp (derived there;
// test_cuda_sphere_host.cpp checks, without a GPU, that the CPU operators stay within it):
// |y_gpu - y_exact| <= d_y and |y_gpu - y_cpu| <= 2 d_y.
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
#include "sphere_attention_reference.hpp"
#include "surrogate/kernels/cuda_sphere.hpp"
#include "surrogate/sphere/attention_device.hpp"
#include "surrogate/sphere/quadrature.hpp"

namespace sphere = surrogate::sphere;
namespace st = surrogate::testing;

namespace {

using namespace sphere_cuda_test;

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
  cu::DeviceBuffer<float> dy(out_size, st::test_device());
  cu::device_synchronize(st::test_device());  // the pageable uploads are complete
  cu::Stream stream(st::test_device());
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

/// The device forward against the exact result and the CPU forward of the same operator.
template <class Op, class DeviceOp>
void compare(const Case& t, const Op& cpu, DeviceOp& gpu, const sphere::AttentionS2Weights& w, std::mt19937& rng) {
  const Inputs in = random_inputs(t, rng);
  const std::size_t out_size = in.q.size() / static_cast<std::size_t>(t.cin) * static_cast<std::size_t>(t.cout);
  std::vector<float> y_cpu(out_size);
  cpu.forward(t.batch, in.q.data(), t.self ? nullptr : in.k.data(), t.self ? nullptr : in.v.data(), y_cpu.data());
  const std::vector<float> y_gpu = run_on_device(gpu, t, in.q, in.k, in.v, out_size);
  const Reference ref = reference(t, cpu, w, in);
  std::size_t nan_mismatch = 0, nan = 0;
  double err_exact = 0, err_cpu = 0, worst_cpu = 0;
  const double worst_exact = worst_ratio(y_gpu, ref, 1.0, &nan_mismatch, &err_exact);
  for (std::size_t i = 0; i < out_size; ++i) {
    nan += std::isnan(y_cpu[i]) ? 1 : 0;
    if (std::isnan(y_cpu[i]) || std::isnan(y_gpu[i])) {
      nan_mismatch += std::isnan(y_cpu[i]) != std::isnan(y_gpu[i]) ? 1 : 0;
      continue;
    }
    const double e = std::abs(static_cast<double>(y_gpu[i]) - y_cpu[i]);
    err_cpu = std::max(err_cpu, e);
    worst_cpu = std::max(worst_cpu, e / (2 * ref.bound[i]));
  }
  EXPECT_EQ(nan_mismatch, 0u) << t.name << ": NaN on one side only";
  EXPECT_LT(nan, out_size) << t.name << ": every output is NaN";
  EXPECT_LE(worst_exact, 1.0) << t.name << ": |gpu - exact| above the float32 bound (max |gpu - exact| " << err_exact << ")";
  EXPECT_LE(worst_cpu, 1.0) << t.name << ": |gpu - cpu| above twice the float32 bound (max |gpu - cpu| " << err_cpu << ")";
  std::printf("  %-46s max |gpu - exact| %.3g (%.3g of the bound), max |gpu - cpu| %.3g (%.3g of 2x), NaN %zu\n",
              t.name.c_str(), err_exact, worst_exact, err_cpu, worst_cpu, nan);
}

}  // namespace

TEST(SphereAttentionDevice, GlobalMatchesCpu) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(2024);
  for (const Case& t : global_cases()) {
    const auto c = config_of<sphere::AttentionS2Config>(t);
    const sphere::AttentionS2Weights w = random_weights(t, rng);
    sphere::AttentionS2Device gpu(c, w, st::test_device());
    compare(t, gpu.host(), gpu, w, rng);
  }
}

TEST(SphereAttentionDevice, NeighborhoodMatchesCpu) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  for (const Case& t : neighborhood_cases()) {
    const auto c = config_of<sphere::NeighborhoodAttentionS2Config>(t);
    const sphere::AttentionS2Weights w = random_weights(t, rng);
    sphere::NeighborhoodAttentionS2Device gpu(c, w, st::test_device());
    compare(t, gpu.host(), gpu, w, rng);
  }
}

namespace {
/// A device operator built on a CPU operator the caller keeps uploads that operator's weights (read back
/// from its packed copy) and gives, bitwise, what one built from the weights gives; host() is the given
/// operator.
template <class Config, class Cpu, class DeviceOp>
void check_built_on_cpu_operator(const std::vector<Case>& cases, std::mt19937& rng) {
  for (const Case& t : cases) {
    if (t.cin > 16 || t.nlat_in * t.nlon_in > 512) continue;  // the small cases: bias, none, qk-norm, both grids
    const auto c = config_of<Config>(t);
    const sphere::AttentionS2Weights w = random_weights(t, rng);
    const Cpu cpu(c, w);
    DeviceOp from_weights(c, w, st::test_device());
    DeviceOp on_cpu(cpu, st::test_device());
    EXPECT_EQ(&on_cpu.host(), &cpu) << t.name;
    const Inputs in = random_inputs(t, rng);
    const std::size_t out_size = in.q.size() / static_cast<std::size_t>(t.cin) * static_cast<std::size_t>(t.cout);
    const std::vector<float> a = run_on_device(from_weights, t, in.q, in.k, in.v, out_size);
    const std::vector<float> b = run_on_device(on_cpu, t, in.q, in.k, in.v, out_size);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), out_size * sizeof(float))) << t.name;
  }
}
}  // namespace

TEST(SphereAttentionDevice, BuiltOnACpuOperatorGivesTheSameBits) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(31);
  check_built_on_cpu_operator<sphere::AttentionS2Config, sphere::AttentionS2, sphere::AttentionS2Device>(global_cases(),
                                                                                                         rng);
  check_built_on_cpu_operator<sphere::NeighborhoodAttentionS2Config, sphere::NeighborhoodAttentionS2,
                              sphere::NeighborhoodAttentionS2Device>(neighborhood_cases(), rng);
}

namespace {
/// cuda::sphere_global_attention on random operands held in device buffers; returns the output rows.
std::vector<float> global_attention(surrogate::kernels::cuda::SphereAttentionArgs a, const std::vector<float>& q,
                                    const std::vector<float>& k, const std::vector<float>& v,
                                    const std::vector<float>& log_w) {
  namespace cu = surrogate::kernels::cuda;
  const cu::DeviceBuffer<float> dq = st::to_device(q), dk = st::to_device(k), dv = st::to_device(v);
  const cu::DeviceBuffer<float> dw = st::to_device(log_w);
  const std::size_t size = static_cast<std::size_t>(a.batch * a.queries * a.ldo);
  cu::DeviceBuffer<float> o = st::to_device(std::vector<float>(size, -7.0f));  // a sentinel outside the heads
  a.q = dq.data();
  a.k = dk.data();
  a.v = dv.data();
  a.log_w_lat = dw.data();
  a.o = o.data();
  cu::device_synchronize(st::test_device());
  cu::sphere_global_attention(a, nullptr);
  return st::to_host(o.data(), size);
}
}  // namespace

// The global attention on the tensor cores (tf32, bf16) against the attention in double, within the bound
// of FLARE's decode test (test_gpu_kernels.cpp): a logit's products of rounded operands off by at most
// (2u + u^2) |q_e k_e| each (u: bf16 2^-8, tf32 2^-11) and its FP32 sum by E 2^-24 sum |q_e k_e|, the log
// weight's FP32 addition by 2^-24 |l|: delta = max_j of that; a weight then moves by at most e^(2 delta) - 1
// relative, the weights and values rounded add u each, the exp and the FP32 sums over the keys and the
// channels (keys + E + 8) 2^-23: all relative to max_j |v_j|. Unequal ek and ev, partial query tiles and key
// passes, several samples and heads; the rounding must show (the error above four times the fp32 kernel's),
// run to run the same bits; heads wider than 64 keep the fp32 kernel, bitwise.
TEST(SphereAttentionDevice, GlobalOnTensorCoresIsWithinItsFormatsBound) {
  SURROGATE_SKIP_WITHOUT_GPU();
  namespace cu = surrogate::kernels::cuda;
  struct Shape {
    int batch, heads, ek, ev;
    long queries;
    int nlat, nlon;
  };
  const Shape shapes[] = {{1, 1, 8, 8, 100, 8, 16}, {2, 3, 16, 12, 70, 5, 12}, {1, 2, 32, 32, 33, 10, 20},
                          {1, 1, 64, 40, 130, 6, 10}, {2, 2, 3, 5, 17, 4, 8}, {1, 1, 80, 72, 20, 3, 8}};
  std::mt19937 rng(97);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> weight(0.01f, 0.2f);
  for (const auto precision : {cu::MlpPrecision::tf32, cu::MlpPrecision::bf16}) {
    const double u = precision == cu::MlpPrecision::bf16 ? 0x1p-8 : 0x1p-11;
    const char* name = precision == cu::MlpPrecision::bf16 ? "bf16" : "tf32";
    double worst = 0.0, largest = 0.0, largest_fp32 = 0.0;  // error / bound; errors / max|v|
    for (const Shape& s : shapes) {
      cu::SphereAttentionArgs a;
      a.batch = s.batch;
      a.heads = s.heads;
      a.ek = s.ek;
      a.ev = s.ev;
      a.queries = s.queries;
      a.keys = static_cast<long>(s.nlat) * s.nlon;
      a.nlon_in = s.nlon;
      a.ldq = a.ldk = s.heads * s.ek + 1;
      a.ldv = s.heads * s.ev + 2;
      a.ldo = s.heads * s.ev + 3;
      auto random = [&](std::size_t n, float scale) {
        std::vector<float> x(n);
        for (float& e : x) e = scale * normal(rng);
        return x;
      };
      const auto q = random(static_cast<std::size_t>(s.batch * s.queries * a.ldq), 0.5f);
      const auto k = random(static_cast<std::size_t>(s.batch * a.keys * a.ldk), 0.5f);
      const auto v = random(static_cast<std::size_t>(s.batch * a.keys * a.ldv), 1.0f);
      std::vector<float> log_w(static_cast<std::size_t>(s.nlat));
      for (float& w : log_w) w = std::log(weight(rng));
      const std::vector<float> fp32 = global_attention(a, q, k, v, log_w);
      a.precision = precision;
      const std::vector<float> out = global_attention(a, q, k, v, log_w);
      const std::string what = std::string(name) + ", ek " + std::to_string(s.ek) + " ev " + std::to_string(s.ev);
      EXPECT_EQ(global_attention(a, q, k, v, log_w), out) << what << ": run to run";
      if (std::max(s.ek, s.ev) > surrogate::kernels::cuda::kSphereRegisterHeadDim) {
        EXPECT_EQ(out, fp32) << what << ": wide heads keep the fp32 kernel";
        continue;
      }
      for (int b = 0; b < s.batch; ++b)
        for (int h = 0; h < s.heads; ++h)
          for (long i = 0; i < s.queries; ++i) {
            const float* qi = &q[static_cast<std::size_t>((b * s.queries + i) * a.ldq + h * s.ek)];
            std::vector<double> logit(static_cast<std::size_t>(a.keys));
            double delta = 0.0, top = -1e300, max_v = 0.0;
            for (long j = 0; j < a.keys; ++j) {
              const float* kj = &k[static_cast<std::size_t>((b * a.keys + j) * a.ldk + h * s.ek)];
              double l = 0.0, mag = 0.0;
              for (int e = 0; e < s.ek; ++e) {
                l += static_cast<double>(qi[e]) * kj[e];
                mag += std::abs(static_cast<double>(qi[e]) * kj[e]);
              }
              l += log_w[static_cast<std::size_t>(j / s.nlon)];
              for (int e = 0; e < s.ev; ++e)
                max_v = std::max(max_v, std::abs(static_cast<double>(v[static_cast<std::size_t>((b * a.keys + j) * a.ldv + h * s.ev + e)])));
              logit[static_cast<std::size_t>(j)] = l;
              top = std::max(top, l);
              delta = std::max(delta, (2.0 * u + u * u + s.ek * 0x1p-24) * mag + 0x1p-24 * std::abs(l));
            }
            double sum = 0.0;
            std::vector<double> want(static_cast<std::size_t>(s.ev), 0.0);
            for (long j = 0; j < a.keys; ++j) {
              const double w = std::exp(logit[static_cast<std::size_t>(j)] - top);
              sum += w;
              for (int e = 0; e < s.ev; ++e)
                want[static_cast<std::size_t>(e)] += w * v[static_cast<std::size_t>((b * a.keys + j) * a.ldv + h * s.ev + e)];
            }
            const double bound = (std::expm1(2.0 * delta) + 2.0 * u + static_cast<double>(a.keys + s.ev + 8) * 0x1p-23) * max_v;
            for (int e = 0; e < s.ev; ++e) {
              const std::size_t at = static_cast<std::size_t>((b * s.queries + i) * a.ldo + h * s.ev + e);
              const double exact = want[static_cast<std::size_t>(e)] / sum, err = std::abs(out[at] - exact);
              worst = std::max(worst, err / bound);
              largest = std::max(largest, err / max_v);
              largest_fp32 = std::max(largest_fp32, std::abs(fp32[at] - exact) / max_v);
              ASSERT_LE(err, bound) << what << " sample " << b << " head " << h << " query " << i << " channel " << e;
            }
          }
      for (long r = 0; r < s.batch * s.queries; ++r)  // the columns past the heads are not written
        for (long c = s.heads * s.ev; c < a.ldo; ++c) ASSERT_EQ(out[static_cast<std::size_t>(r * a.ldo + c)], -7.0f) << what;
    }
    EXPECT_GT(largest, 4.0 * largest_fp32) << name << ": the operands' rounding does not show";
    std::printf("%s global S2 attention: largest error / bound %.3f, error / max|v| %.3g (fp32 kernel %.3g)\n", name,
                worst, largest, largest_fp32);
  }
}
