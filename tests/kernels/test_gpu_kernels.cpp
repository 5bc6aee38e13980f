// The CUDA kernels against the CPU kernels (surrogate/kernels/cpu.hpp) on random data with awkward sizes:
// norms, the fused residual MLP, the latent encode (default and reproducible) and decode; plus the
// properties the distributed forward relies on: a row's result does not depend on its block, and the
// encode sums do not depend on how the points are split into chunks (bitwise in reproducible mode).
// Every test SKIPS when no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test.hpp"
#include "precision_emulation.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"

namespace k = surrogate::kernels;
namespace cu = surrogate::kernels::cuda;
namespace st = surrogate::testing;
using surrogate::testing::to_device;
using surrogate::testing::to_host;

namespace {

std::vector<float> random_vector(std::size_t n, float scale, std::mt19937& gen) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

class GpuKernels : public ::testing::Test {
 protected:
  void SetUp() override { SURROGATE_SKIP_WITHOUT_GPU(); }
};

// ---------------------------------------------------------------------------------------------------
TEST_F(GpuKernels, NormMatchesTheCpuKernel) {
  std::mt19937 gen(1);
  const k::CpuKernels& cpu = k::cpu();
  for (int dim : {1, 3, 8, 24, 64, 100, 256, 300}) {
    for (bool rms : {false, true}) {
      for (k::index_t rows : {1, 9, 1000}) {
        const k::index_t ldg = dim + 5, ldc = k::round_up(dim, k::kPad);
        auto x = random_vector(static_cast<std::size_t>(rows * ldg), 2.0f, gen);
        for (auto& v : x) v += 3.0f;  // a non-zero mean
        std::vector<float> w(static_cast<std::size_t>(ldc), 0.0f), b(static_cast<std::size_t>(ldc), 0.0f);
        for (int c = 0; c < dim; ++c) w[c] = 1.0f + 0.3f * std::sin(float(c)), b[c] = 0.1f * std::cos(float(c));
        const float eps = rms ? 1.1920929e-07f : 1e-5f;
        std::vector<float> xc(static_cast<std::size_t>(rows * ldc), 0.0f), yc(xc.size(), 0.0f);
        for (k::index_t r = 0; r < rows; ++r)
          for (int c = 0; c < dim; ++c) xc[r * ldc + c] = x[r * ldg + c];
        k::NormArgs a;
        a.x = xc.data();
        a.ldx = ldc;
        a.y = yc.data();
        a.ldy = ldc;
        a.rows = rows;
        a.dim = dim;
        a.weight = w.data();
        a.bias = rms ? nullptr : b.data();
        a.eps = eps;
        a.rms = rms;
        cpu.norm(a);

        auto dx = to_device(x), dw = to_device(w), db = to_device(b);
        cu::DeviceBuffer<float> dy(x.size(), st::test_device());
        cu::NormArgs g;
        g.x = dx.data();
        g.ldx = ldg;
        g.y = dy.data();
        g.ldy = ldg;
        g.rows = rows;
        g.dim = dim;
        g.weight = dw.data();
        g.bias = rms ? nullptr : db.data();
        g.eps = eps;
        g.rms = rms;
        cu::norm(g, nullptr);
        const auto y = to_host(dy.data(), x.size());
        for (k::index_t r = 0; r < rows; ++r) {
          // Both round (x - mean) and the variance differently: a few ulp of max|x| times 1/std.
          double mean = 0, var = 0, max_x = 0;
          for (int c = 0; c < dim; ++c) mean += rms ? 0.0 : x[r * ldg + c] / double(dim);
          for (int c = 0; c < dim; ++c) {
            var += (x[r * ldg + c] - mean) * (x[r * ldg + c] - mean) / dim;
            max_x = std::max(max_x, std::abs(double(x[r * ldg + c])));
          }
          const double rstd = 1.0 / std::sqrt(var + eps);
          for (int c = 0; c < dim; ++c) {
            const float ref = yc[r * ldc + c];
            ASSERT_LE(std::abs(y[r * ldg + c] - ref), 0x1p-24 * (64 * max_x * rstd * std::abs(w[c]) + 8 * std::abs(ref)))
                << "dim " << dim << " rms " << rms << " row " << r << " channel " << c;
          }
        }
        g.y = dx.data();  // in place: the same bits
        cu::norm(g, nullptr);
        const auto yi = to_host(dx.data(), x.size());
        for (k::index_t r = 0; r < rows; ++r)
          for (int c = 0; c < dim; ++c) ASSERT_EQ(yi[r * ldg + c], y[r * ldg + c]) << "in place, dim " << dim;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Residual MLPs (FLARE.py's ResidualMLP structure) on the GPU and through the CPU's linear kernel.

struct HostLayer {
  std::vector<float> w, b;  // torch layout (out, in), (out)
  int in = 0, out = 0;
  k::Activation act = k::Activation::none;
  bool add_input = false;
};

struct MlpShape {
  int in, hidden, out, layers;  // layers = -1: one Linear
  bool input_residual, output_residual;
  k::Activation act;
};

std::vector<HostLayer> make_mlp(const MlpShape& s, std::mt19937& gen) {
  std::vector<HostLayer> layers;
  auto linear = [&](int in, int out, k::Activation act, bool add_input) {
    HostLayer l;
    l.in = in, l.out = out, l.act = act, l.add_input = add_input;
    l.w = random_vector(static_cast<std::size_t>(in) * out, 1.2f / std::sqrt(float(in)), gen);
    l.b = random_vector(static_cast<std::size_t>(out), 0.1f, gen);
    layers.push_back(l);
  };
  if (s.layers == -1) {
    linear(s.in, s.out, k::Activation::none, s.input_residual && s.output_residual && s.in == s.out);
    return layers;
  }
  linear(s.in, s.hidden, s.act, s.input_residual && s.in == s.hidden);
  for (int j = 0; j < s.layers; ++j) linear(s.hidden, s.hidden, s.act, true);
  linear(s.hidden, s.out, k::Activation::none, s.output_residual && s.hidden == s.out);
  return layers;
}

int max_width(const std::vector<HostLayer>& layers) {
  int w = 0;
  for (const auto& l : layers) w = std::max({w, l.in, l.out});
  return w;
}

/// rows x out (dense) through the CPU kernels, plus `extra` (rows x out dense) when given.
std::vector<float> cpu_mlp(const std::vector<HostLayer>& layers, const std::vector<float>& x, k::index_t ldx,
                           k::index_t rows, const std::vector<float>* extra) {
  const k::CpuKernels& cpu = k::cpu();
  const k::index_t ld = k::round_up(max_width(layers), k::kPad);
  std::vector<float> cur(static_cast<std::size_t>(rows * ld), 0.0f), next(cur.size(), 0.0f);
  for (k::index_t r = 0; r < rows; ++r)
    for (int c = 0; c < layers[0].in; ++c) cur[r * ld + c] = x[r * ldx + c];
  for (const auto& l : layers) {
    const k::PackedLinear p(l.w.data(), l.b.data(), l.out, l.in);
    k::LinearArgs a;
    a.layer = &p;
    a.x = cur.data();
    a.ldx = ld;
    a.y = next.data();
    a.ldy = ld;
    a.rows = rows;
    a.act = l.act;
    if (l.add_input) a.add1 = cur.data(), a.ld_add1 = ld;
    cpu.linear(a);
    std::swap(cur, next);
  }
  const int out = layers.back().out;
  std::vector<float> y(static_cast<std::size_t>(rows * out));
  for (k::index_t r = 0; r < rows; ++r)
    for (int c = 0; c < out; ++c) y[r * out + c] = cur[r * ld + c] + (extra ? (*extra)[r * out + c] : 0.0f);
  return y;
}

/// The layers packed and uploaded for the fused kernel.
struct DeviceMlp {
  cu::DeviceBuffer<float> weights, biases;
  cu::DeviceBuffer<std::uint32_t> fragments;
  cu::DeviceBuffer<cu::MlpLayer> table;
  int count = 0, width = 0;
  explicit DeviceMlp(const std::vector<HostLayer>& layers) {
    std::vector<float> wt, b;
    std::vector<std::uint32_t> words;
    std::vector<std::size_t> woff, boff, bf16off, tf32off;
    for (const auto& l : layers) {
      woff.push_back(wt.size());
      boff.push_back(b.size());
      cu::pack_mlp_linear(l.w.data(), l.b.data(), l.out, l.in, wt, b);
      bf16off.push_back(words.size());
      cu::pack_mlp_fragments(l.w.data(), l.out, l.in, cu::MlpPrecision::bf16, words);
      tf32off.push_back(words.size());
      cu::pack_mlp_fragments(l.w.data(), l.out, l.in, cu::MlpPrecision::tf32, words);
    }
    weights = to_device(wt);
    biases = to_device(b);
    fragments = to_device(words);
    std::vector<cu::MlpLayer> t;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      cu::MlpLayer d;
      d.weight_t = weights.data() + woff[i];
      d.bias = biases.data() + boff[i];
      d.bf16 = fragments.data() + bf16off[i];
      d.tf32 = fragments.data() + tf32off[i];
      d.in = layers[i].in;
      d.out = layers[i].out;
      d.ld = cu::mlp_weight_ld(layers[i].out);
      d.act = layers[i].act;
      d.add_input = layers[i].add_input;
      t.push_back(d);
    }
    table = to_device(t);
    count = static_cast<int>(layers.size());
    width = max_width(layers);
  }
  void run(const float* x, k::index_t ldx, float* y, k::index_t ldy, k::index_t rows, const float* extra,
           k::index_t ld_extra, cu::MlpPrecision precision = cu::MlpPrecision::fp32,
           const cu::MlpInputNorm& norm = {}) const {
    cu::MlpArgs a;
    a.precision = precision;
    a.norm = norm;
    a.layers = table.data();
    a.num_layers = count;
    a.max_width = width;
    a.x = x;
    a.ldx = ldx;
    a.y = y;
    a.ldy = ldy;
    a.rows = rows;
    a.extra = extra;
    a.ld_extra = ld_extra;
    cu::mlp(a, nullptr);
  }
};

TEST_F(GpuKernels, FusedMlpMatchesTheCpuKernels) {
  std::mt19937 gen(2);
  const auto gelu = k::Activation::gelu_tanh, silu = k::Activation::silu;
  const MlpShape shapes[] = {
      {2, 32, 64, 2, false, true, gelu},   {64, 64, 64, 3, true, true, gelu},  {64, 64, 1, 2, true, false, gelu},
      {3, 5, 7, -1, true, true, gelu},     {64, 0, 64, -1, true, true, gelu},  {17, 130, 33, 1, true, true, silu},
      {256, 256, 256, 2, true, true, gelu}, {64, 48, 64, 0, true, true, silu}, {130, 256, 17, 1, true, true, gelu},
      {1, 1, 1, 1, true, true, silu},      {255, 3, 250, 1, true, true, gelu}};
  for (const MlpShape& s : shapes) {
    const auto layers = make_mlp(s, gen);
    const DeviceMlp dev(layers);
    for (k::index_t rows : {1, 63, 64, 65, 1000}) {
      for (bool with_extra : {false, true}) {
        const k::index_t ldx = s.in + 3, ldy = s.out + 1;
        const auto x = random_vector(static_cast<std::size_t>(rows * ldx), 1.0f, gen);
        const auto extra = random_vector(static_cast<std::size_t>(rows * s.out), 1.0f, gen);
        const auto ref = cpu_mlp(layers, x, ldx, rows, with_extra ? &extra : nullptr);
        std::vector<float> y0(static_cast<std::size_t>(rows * ldy), 0.0f);
        for (k::index_t r = 0; r < rows; ++r)
          for (int c = 0; c < s.out; ++c) y0[r * ldy + c] = extra[r * s.out + c];
        auto dx = to_device(x);
        auto dy = to_device(y0);  // with_extra: y = mlp(x) + y in place
        dev.run(dx.data(), ldx, dy.data(), ldy, rows, with_extra ? dy.data() : nullptr, ldy);
        const auto y = to_host(dy.data(), y0.size());
        for (k::index_t r = 0; r < rows; ++r)
          for (int c = 0; c < s.out; ++c) {
            const float e = ref[r * s.out + c];
            ASSERT_LE(std::abs(y[r * ldy + c] - e), 1e-4 * (1 + std::abs(e)))
                << "mlp " << s.in << "-" << s.hidden << "-" << s.out << " L " << s.layers << " rows " << rows << " row "
                << r << " col " << c;
          }
      }
    }
  }
}

/// The same MLP in float64 with unrounded operands: what the tensor-core results and their emulation are
/// both measured against.
std::vector<double> exact_mlp(const std::vector<HostLayer>& layers, const std::vector<float>& x, k::index_t ldx,
                              k::index_t rows) {
  std::vector<double> y;
  for (k::index_t r = 0; r < rows; ++r) {
    std::vector<double> cur(x.begin() + r * ldx, x.begin() + r * ldx + layers[0].in);
    for (const auto& l : layers) {
      std::vector<double> next(static_cast<std::size_t>(l.out));
      for (int o = 0; o < l.out; ++o) {
        double v = l.b[o];
        for (int i = 0; i < l.in; ++i) v += double(l.w[static_cast<std::size_t>(o) * l.in + i]) * cur[i];
        if (l.act == k::Activation::gelu_tanh) v /= 1.0 + std::exp(-v * (1.5957691216057308 + 0.07135481627260025 * v * v));
        if (l.act == k::Activation::silu) v /= 1.0 + std::exp(-v);
        next[o] = v + (l.add_input ? cur[o] : 0.0);
      }
      cur.swap(next);
    }
    y.insert(y.end(), cur.begin(), cur.end());
  }
  return y;
}

// The tensor-core MLP (tf32, bf16) against the CPU emulation of the same arithmetic (operands rounded to
// nearest, FP32 accumulation; tests/support/precision_emulation). The two accumulate in different
// orders, so now and then a hidden activation lands on the other side of a rounding boundary and that
// operand rounds the other way; the flip spreads through the later layers, and single outputs differ by
// up to ~4e-3 (tf32) of 1 + |y| though both are right. What must agree, per shape over 1,066 rows, is the
// error against the float64 forward: its RMS within 5 % (a model of the flips gives 0.1 %; truncated
// operands give 1.7-6x, unrounded ones ~0) and its maximum within 1.5x (share/docs/cuda.md, "Precision").
// On the host backend, whose mma.sync accumulates in the emulation's order, every output is bitwise.
TEST_F(GpuKernels, FusedMlpOnTensorCoresMatchesTheEmulation) {
  std::mt19937 gen(4);
  const auto gelu = k::Activation::gelu_tanh, silu = k::Activation::silu;
  const MlpShape shapes[] = {{64, 64, 64, 3, true, true, gelu}, {3, 5, 7, -1, true, true, gelu},
                             {17, 130, 33, 1, true, true, silu}, {256, 256, 256, 2, true, true, gelu},
                             {2, 32, 64, 2, false, true, gelu},  {1, 1, 1, 1, true, true, silu}};
  for (auto [precision, model_precision] : {std::pair{cu::MlpPrecision::tf32, surrogate::Precision::tf32},
                                            std::pair{cu::MlpPrecision::bf16, surrogate::Precision::bf16}}) {
    for (const MlpShape& s : shapes) {
      const auto layers = make_mlp(s, gen);
      const DeviceMlp dev(layers);
      double sq_dev = 0, sq_emu = 0, max_dev = 0, max_emu = 0, count = 0;
      for (k::index_t rows : {1, 65, 1000}) {
        const k::index_t ldx = s.in + 3, ldy = s.out + 1;
        const auto x = random_vector(static_cast<std::size_t>(rows * ldx), 1.0f, gen);
        std::vector<float> emu;
        {
          st::ScopedPrecisionEmulation emulate(model_precision);
          emu = cpu_mlp(layers, x, ldx, rows, nullptr);
        }
        const auto exact = exact_mlp(layers, x, ldx, rows);
        auto dx = to_device(x);
        cu::DeviceBuffer<float> dy(static_cast<std::size_t>(rows * ldy), st::test_device());
        dev.run(dx.data(), ldx, dy.data(), ldy, rows, nullptr, 0, precision);
        const auto y = to_host(dy.data(), static_cast<std::size_t>(rows * ldy));
        for (k::index_t r = 0; r < rows; ++r)
          for (int c = 0; c < s.out; ++c) {
            const double e = exact[r * s.out + c], d = y[r * ldy + c] - e, m = emu[r * s.out + c] - e;
            ASSERT_TRUE(std::isfinite(d)) << "row " << r << " col " << c;
            // The host backend's mma.sync sums in k order, as the emulation: the same bits.
            if (st::on_host_backend()) {
              ASSERT_EQ(y[r * ldy + c], emu[r * s.out + c]) << "row " << r << " col " << c;
            }
            sq_dev += d * d, sq_emu += m * m, count += 1;
            max_dev = std::max(max_dev, std::abs(d)), max_emu = std::max(max_emu, std::abs(m));
          }
      }
      const std::string what = std::string(precision == cu::MlpPrecision::tf32 ? "tf32" : "bf16") + " mlp " +
                               std::to_string(s.in) + "-" + std::to_string(s.hidden) + "-" + std::to_string(s.out) +
                               " L " + std::to_string(s.layers);
      ASSERT_GT(sq_emu, 0.0) << what;
      EXPECT_NEAR(std::sqrt(sq_dev / sq_emu), 1.0, 0.05) << what;
      EXPECT_LE(max_dev, 1.5 * max_emu) << what;
      std::printf("%s: error against float64 RMS %.3g (emulation %.3g), max %.3g (emulation %.3g)\n", what.c_str(),
                  std::sqrt(sq_dev / count), std::sqrt(sq_emu / count), max_dev, max_emu);
    }
  }
}

// The MLP kernels (FP32 and tensor cores) read their rows and write their results with 16-byte accesses
// where the strides, widths and addresses allow it and 4-byte ones elsewhere (kernels/cuda/row_tiles.cuh):
// both give the same bits, with `extra` apart or in place (x = y = extra), for rows that end inside a
// warp's tile (and a wide MLP whose first layer is one k step, its B fragments loaded ahead), and neither
// touches the columns of y past `out`. On the host backend the tensor cores'
// 4-byte layout is also bitwise the CPU emulation with the extra added.
TEST_F(GpuKernels, FusedMlpGivesTheSameBitsForEveryRowLayout) {
  std::mt19937 gen(12);
  const auto gelu = k::Activation::gelu_tanh, silu = k::Activation::silu;
  const MlpShape shapes[] = {{64, 64, 64, 3, true, true, gelu}, {16, 40, 16, 1, true, true, silu},
                             {12, 24, 20, 1, false, false, gelu}, {3, 5, 7, -1, true, true, gelu},
                             {256, 256, 256, 1, true, true, gelu}, {3, 130, 5, 1, true, true, silu}};
  const float sentinel = -7.25f;
  for (auto [precision, model_precision] : {std::pair{cu::MlpPrecision::fp32, surrogate::Precision::fp32},
                                            std::pair{cu::MlpPrecision::tf32, surrogate::Precision::tf32},
                                            std::pair{cu::MlpPrecision::bf16, surrogate::Precision::bf16}})
    for (const MlpShape& s : shapes) {
      const auto layers = make_mlp(s, gen);
      const DeviceMlp dev(layers);
      for (k::index_t rows : {1, 65, 301}) {
        const std::string what = "in " + std::to_string(s.in) + " out " + std::to_string(s.out) + " rows " +
                                 std::to_string(rows) + " precision " + std::to_string(static_cast<int>(precision));
        const k::index_t ld4 = k::round_up(std::max(s.in, s.out), 4) + 4;  // 16-byte rows
        const auto x = random_vector(static_cast<std::size_t>(rows * ld4), 1.0f, gen);
        const auto extra = random_vector(static_cast<std::size_t>(rows * ld4), 1.0f, gen);
        // 4-byte layout: odd strides.
        const k::index_t ldx1 = s.in + 3, ldy1 = s.out + 1, lde1 = s.out + 2;
        std::vector<float> x1(static_cast<std::size_t>(rows * ldx1)), e1(static_cast<std::size_t>(rows * lde1));
        std::vector<float> xc(static_cast<std::size_t>(rows * s.in)), ec(static_cast<std::size_t>(rows * s.out));
        for (k::index_t r = 0; r < rows; ++r) {
          std::copy_n(x.begin() + r * ld4, s.in, x1.begin() + r * ldx1);
          std::copy_n(x.begin() + r * ld4, s.in, xc.begin() + r * s.in);
          std::copy_n(extra.begin() + r * ld4, s.out, e1.begin() + r * lde1);
          std::copy_n(extra.begin() + r * ld4, s.out, ec.begin() + r * s.out);
        }
        const auto dx1 = to_device(x1), de1 = to_device(e1);
        auto dy1 = to_device(std::vector<float>(static_cast<std::size_t>(rows * ldy1), sentinel));
        dev.run(dx1.data(), ldx1, dy1.data(), ldy1, rows, de1.data(), lde1, precision);
        const auto y1 = to_host(dy1.data(), static_cast<std::size_t>(rows * ldy1));
        if (st::on_host_backend() && precision != cu::MlpPrecision::fp32) {
          st::ScopedPrecisionEmulation emulate(model_precision);
          const auto emu = cpu_mlp(layers, xc, s.in, rows, &ec);
          for (k::index_t r = 0; r < rows; ++r)
            for (int c = 0; c < s.out; ++c)
              ASSERT_EQ(y1[r * ldy1 + c], emu[r * s.out + c]) << what << " row " << r << " col " << c;
        }
        // 16-byte layout (in, out multiples of 4): the same bits, the padding columns untouched.
        const auto dx4 = to_device(x), de4 = to_device(extra);
        auto dy4 = to_device(std::vector<float>(static_cast<std::size_t>(rows * ld4), sentinel));
        dev.run(dx4.data(), ld4, dy4.data(), ld4, rows, de4.data(), ld4, precision);
        const auto y4 = to_host(dy4.data(), static_cast<std::size_t>(rows * ld4));
        for (k::index_t r = 0; r < rows; ++r)
          for (int c = 0; c < ld4; ++c)
            ASSERT_EQ(y4[r * ld4 + c], c < s.out ? y1[r * ldy1 + c] : sentinel) << what << " row " << r << " col " << c;
        if (s.in != s.out) continue;
        // In place, x = y = extra (FLARE's x = x + ffn(x)), in both layouts.
        for (k::index_t ld : {ld4, ldx1}) {
          std::vector<float> xy(static_cast<std::size_t>(rows * ld), sentinel);
          for (k::index_t r = 0; r < rows; ++r) std::copy_n(x.begin() + r * ld4, s.in, xy.begin() + r * ld);
          auto dxy = to_device(xy);
          auto dref = to_device(std::vector<float>(static_cast<std::size_t>(rows * ld), sentinel));
          dev.run(dxy.data(), ld, dref.data(), ld, rows, dxy.data(), ld, precision);  // y = mlp(x) + x, apart
          dev.run(dxy.data(), ld, dxy.data(), ld, rows, dxy.data(), ld, precision);
          const auto got = to_host(dxy.data(), xy.size()), ref = to_host(dref.data(), xy.size());
          for (k::index_t r = 0; r < rows; ++r)
            for (int c = 0; c < ld; ++c)
              ASSERT_EQ(got[r * ld + c], c < s.out ? ref[r * ld + c] : sentinel)
                  << what << " in place, ld " << ld << " row " << r << " col " << c;
        }
      }
    }
}

// An input norm fused into the MLP (MlpArgs::norm) gives the bits of the norm kernel and then the MLP, in
// every precision, for LayerNorm with bias and RMSNorm, out of place and in place (x = y = extra: FLARE's
// x = x + ffn(norm2(x))), over rows that end inside a block.
TEST_F(GpuKernels, FusedMlpInputNormGivesTheBitsOfTheNormKernelThenTheMlp) {
  std::mt19937 gen(6);
  // 45: the tensor-core kernel's lane-a-row norm with both of each lane's channels in part of the row.
  const MlpShape shapes[] = {{64, 64, 64, 1, true, true, k::Activation::gelu_tanh},
                             {45, 45, 45, 1, true, true, k::Activation::relu},
                             {17, 130, 17, 0, true, true, k::Activation::silu}};
  for (const MlpShape& s : shapes) {
    const auto layers = make_mlp(s, gen);
    const DeviceMlp dev(layers);
    const k::index_t rows = 301, ld = s.in + 3;
    auto x = random_vector(static_cast<std::size_t>(rows * ld), 2.0f, gen);
    for (auto& v : x) v += 1.5f;  // a non-zero mean
    const auto w = random_vector(static_cast<std::size_t>(s.in), 1.0f, gen), b = random_vector(w.size(), 0.5f, gen);
    const auto dx = to_device(x), dw = to_device(w), db = to_device(b);
    for (bool rms : {false, true})
      for (auto precision : {cu::MlpPrecision::fp32, cu::MlpPrecision::tf32, cu::MlpPrecision::bf16}) {
        cu::MlpInputNorm norm;
        norm.weight = dw.data();
        norm.bias = rms ? nullptr : db.data();
        norm.eps = rms ? 1.1920929e-07f : 1e-5f;
        norm.rms = rms;
        cu::NormArgs n;
        cu::DeviceBuffer<float> normed(x.size(), st::test_device()), two_step(x.size(), st::test_device());
        n.x = dx.data(), n.ldx = ld, n.y = normed.data(), n.ldy = ld, n.rows = rows, n.dim = s.in;
        n.weight = norm.weight, n.bias = norm.bias, n.eps = norm.eps, n.rms = rms;
        cu::norm(n, nullptr);
        cu::copy_blocking(two_step.data(), dx.data(), x.size() * sizeof(float), st::test_device());
        dev.run(normed.data(), ld, two_step.data(), ld, rows, two_step.data(), ld, precision);  // x + mlp(norm(x))
        auto fused = to_device(x);
        dev.run(fused.data(), ld, fused.data(), ld, rows, fused.data(), ld, precision, norm);  // in place
        const auto expected = to_host(two_step.data(), x.size()), got = to_host(fused.data(), x.size());
        for (k::index_t r = 0; r < rows; ++r)
          for (int c = 0; c < s.out; ++c)
            ASSERT_EQ(got[r * ld + c], expected[r * ld + c])
                << "in " << s.in << (rms ? " rms" : " layer norm") << " precision " << static_cast<int>(precision)
                << " row " << r << " col " << c;
      }
  }
}

// The dense layer on the tensor cores (DenseArgs::precision, any width) against the CPU emulation of its
// arithmetic (the emulated kernel table's Linear: operands rounded, FP32 sums from zero, bias, activation,
// residual): on the host backend bitwise, whose mma.sync sums in the emulation's order; on a GPU, which
// sums in its own order, within the FP32 accumulation's bound of the rounded products,
// in * 2^-23 * sum |x w| per output (a loose one: the products are exact, only the sums round).
TEST_F(GpuKernels, DenseOnTensorCoresMatchesTheEmulation) {
  std::mt19937 gen(8);
  struct Shape {
    int in, out;
    k::Activation act;
    bool residual;
  };
  const Shape shapes[] = {{64, 64, k::Activation::none, true},   {3, 17, k::Activation::gelu_erf, false},
                          {520, 130, k::Activation::silu, true}, {33, 520, k::Activation::gelu_tanh, false},
                          {1, 1, k::Activation::none, true},     {40, 24, k::Activation::relu, true}};
  for (auto [precision, model_precision] : {std::pair{cu::MlpPrecision::tf32, surrogate::Precision::tf32},
                                            std::pair{cu::MlpPrecision::bf16, surrogate::Precision::bf16}})
    for (const Shape& s : shapes)
      for (k::index_t rows : {1, 70, 300}) {
        const k::index_t ldx = s.in + 5, ldy = s.out + 3;
        const auto w = random_vector(static_cast<std::size_t>(s.in) * s.out, 1.2f / std::sqrt(float(s.in)), gen);
        const auto b = random_vector(static_cast<std::size_t>(s.out), 0.1f, gen);
        const auto x = random_vector(static_cast<std::size_t>(rows * ldx), 1.0f, gen);
        const auto y0 = random_vector(static_cast<std::size_t>(rows * ldy), 1.0f, gen);  // the residual, in place
        const k::PackedLinear packed(w.data(), b.data(), s.out, s.in);
        std::vector<float> ref(y0);
        {  // the CPU kernels take rows padded to kPad
          const k::index_t lxc = k::round_up(s.in, k::kPad), lyc = k::round_up(s.out, k::kPad);
          std::vector<float> xc(static_cast<std::size_t>(rows * lxc), 0.0f), yc(static_cast<std::size_t>(rows * lyc)),
              ac(yc.size(), 0.0f);
          for (k::index_t r = 0; r < rows; ++r) {
            std::copy_n(x.begin() + r * ldx, s.in, xc.begin() + r * lxc);
            std::copy_n(y0.begin() + r * ldy, s.out, ac.begin() + r * lyc);
          }
          const k::CpuKernels& emu = st::emulated_cpu_kernels(model_precision);
          k::LinearArgs a;
          a.layer = &packed;
          a.x = xc.data(), a.ldx = lxc, a.y = yc.data(), a.ldy = lyc, a.rows = rows, a.act = s.act;
          if (s.residual) a.add1 = ac.data(), a.ld_add1 = lyc;
          emu.linear(a);
          for (k::index_t r = 0; r < rows; ++r) std::copy_n(yc.begin() + r * lyc, s.out, ref.begin() + r * ldy);
        }
        std::vector<std::uint32_t> words;
        cu::pack_mlp_fragments(w.data(), s.out, s.in, precision, words);
        auto dwt = to_device(std::vector<float>(packed.wt(), packed.wt() + std::size_t(s.in) * packed.out_pad()));
        auto dbias = to_device(std::vector<float>(packed.bias(), packed.bias() + packed.out_pad()));
        auto dwords = to_device(words);
        auto dx = to_device(x), dy = to_device(y0);
        cu::DenseArgs a;
        a.wt = dwt.data(), a.bias = dbias.data(), a.in = s.in, a.out = s.out, a.ldw = packed.out_pad();
        a.x = dx.data(), a.ldx = ldx, a.y = dy.data(), a.ldy = ldy, a.rows = rows, a.act = s.act;
        if (s.residual) a.add = dy.data(), a.ld_add = ldy;
        a.precision = precision;
        a.fragments = dwords.data();
        cu::dense(a, nullptr);
        const auto y = to_host(dy.data(), y0.size());
        const std::string what = std::string(precision == cu::MlpPrecision::tf32 ? "tf32 " : "bf16 ") +
                                 std::to_string(s.in) + " -> " + std::to_string(s.out) + ", " + std::to_string(rows) + " rows";
        for (k::index_t r = 0; r < rows; ++r)
          for (int c = 0; c < ldy; ++c) {
            const std::size_t i = static_cast<std::size_t>(r * ldy + c);
            if (c >= s.out) {
              ASSERT_EQ(y[i], y0[i]) << what << ": a column past out was written";
            } else if (st::on_host_backend()) {
              ASSERT_EQ(y[i], ref[i]) << what << ", row " << r << " col " << c;
            } else {
              double bound = 0;
              for (int kk = 0; kk < s.in; ++kk) bound += std::abs(double(x[r * ldx + kk]) * w[std::size_t(c) * s.in + kk]);
              ASSERT_LE(std::abs(y[i] - ref[i]), 4 * (s.in * 0x1p-23 * bound + 1e-6 * (1 + std::abs(ref[i]))))
                  << what << ", row " << r << " col " << c;
            }
          }
      }
}

TEST_F(GpuKernels, FusedMlpRowsDoNotDependOnTheirBlock) {
  std::mt19937 gen(3);
  const auto layers = make_mlp({64, 64, 64, 3, true, true, k::Activation::gelu_tanh}, gen);
  const DeviceMlp dev(layers);
  const k::index_t rows = 1000, ld = 64;
  const auto x = random_vector(static_cast<std::size_t>(rows * ld), 1.0f, gen);
  auto dx = to_device(x);
  cu::DeviceBuffer<float> all(x.size(), st::test_device()), part(x.size(), st::test_device());
  for (auto precision : {cu::MlpPrecision::fp32, cu::MlpPrecision::tf32, cu::MlpPrecision::bf16}) {
    dev.run(dx.data(), ld, all.data(), ld, rows, nullptr, 0, precision);
    // The same rows in other blocks and positions: [37, 137), then [500, 501), then [901, 1000).
    for (auto [begin, count] : {std::pair<k::index_t, k::index_t>{37, 100}, {500, 1}, {901, 99}})
      dev.run(dx.data() + begin * ld, ld, part.data() + begin * ld, ld, count, nullptr, 0, precision);
    const auto a = to_host(all.data(), x.size()), p = to_host(part.data(), x.size());
    for (auto [begin, count] : {std::pair<k::index_t, k::index_t>{37, 100}, {500, 1}, {901, 99}})
      for (k::index_t i = begin * ld; i < (begin + count) * ld; ++i)
        ASSERT_EQ(a[i], p[i]) << "precision " << static_cast<int>(precision) << " element " << i;
  }
}

// Up to width 64 both MLP kernels run one wave of resident blocks whose warps (tensor cores) or blocks
// (FP32, the streamed form: the next layer's weights arrive as well) take a row tile after another, the
// next arriving by cp.async while they compute (kernels/cuda/mlp_tensor_cores.cu, mlp.cu). With more rows
// than a wave holds (the host backend's 4 SMs: 1,536 rows on the tensor cores, 512 in FP32; an H200's
// about 50,000 and 17,000), in place with the input norm (FLARE's x = x + ffn(norm2(x))) and a last tile
// cut short, every row gets the bits of launches of 500 rows, in which no warp or block takes a second
// tile; on the host backend the tensor cores also give the bits of the CPU emulation. A kernel computing
// on rows before their copies land, or fetching into a tile it still reads, fails here: the host
// backend's copies land at their wait (forward schedule) or at once (shuffle).
TEST_F(GpuKernels, FusedMlpWarpsTakingTileAfterTileGiveEveryRowItsBits) {
  std::mt19937 gen(21);
  const auto layers = make_mlp({64, 64, 64, 3, true, true, k::Activation::gelu_tanh}, gen);
  const DeviceMlp dev(layers);
  const k::index_t rows = st::on_host_backend() ? 5003 : 400003, ld = 68, chunk = 500;
  auto x = random_vector(static_cast<std::size_t>(rows * ld), 2.0f, gen);
  for (auto& v : x) v += 0.5f;
  const auto w = random_vector(64, 1.0f, gen), b = random_vector(64, 0.5f, gen);
  const auto dw = to_device(w), db = to_device(b);
  cu::MlpInputNorm norm;
  norm.weight = dw.data(), norm.bias = db.data(), norm.eps = 1e-5f;
  for (auto [precision, model_precision] : {std::pair{cu::MlpPrecision::fp32, surrogate::Precision::fp32},
                                            std::pair{cu::MlpPrecision::tf32, surrogate::Precision::tf32},
                                            std::pair{cu::MlpPrecision::bf16, surrogate::Precision::bf16}}) {
    auto all = to_device(x), parts = to_device(x);
    dev.run(all.data(), ld, all.data(), ld, rows, all.data(), ld, precision, norm);
    for (k::index_t r0 = 0; r0 < rows; r0 += chunk) {
      const k::index_t n = std::min(chunk, rows - r0);
      float* p = parts.data() + r0 * ld;
      dev.run(p, ld, p, ld, n, p, ld, precision, norm);
    }
    const auto a = to_host(all.data(), x.size()), p = to_host(parts.data(), x.size());
    const std::string what = precision == cu::MlpPrecision::fp32   ? "fp32"
                             : precision == cu::MlpPrecision::tf32 ? "tf32"
                                                                   : "bf16";
    for (k::index_t i = 0; i < rows * ld; ++i) ASSERT_EQ(a[i], p[i]) << what << " row " << i / ld << " col " << i % ld;
    // FP32 sums in the CPU kernels' other order: FusedMlpMatchesTheCpuKernels bounds its error.
    if (!st::on_host_backend() || precision == cu::MlpPrecision::fp32) continue;
    // The emulation of the MLP on the norm kernel's rows (the fused norm gives its bits: the test above).
    const auto dx = to_device(x);
    cu::DeviceBuffer<float> dn(x.size(), st::test_device());
    cu::NormArgs n;
    n.x = dx.data(), n.ldx = ld, n.y = dn.data(), n.ldy = ld, n.rows = rows, n.dim = 64;
    n.weight = norm.weight, n.bias = norm.bias, n.eps = norm.eps;
    cu::norm(n, nullptr);
    const auto hn = to_host(dn.data(), x.size());
    std::vector<float> xc(static_cast<std::size_t>(rows * 64)), normed(xc.size());
    for (k::index_t r = 0; r < rows; ++r) {
      std::copy_n(x.begin() + r * ld, 64, xc.begin() + r * 64);
      std::copy_n(hn.begin() + r * ld, 64, normed.begin() + r * 64);
    }
    st::ScopedPrecisionEmulation emulate(model_precision);
    const auto emu = cpu_mlp(layers, normed, 64, rows, &xc);
    for (k::index_t r = 0; r < rows; ++r)
      for (int c = 0; c < 64; ++c)
        ASSERT_EQ(a[r * ld + c], emu[r * 64 + c]) << what << " against the emulation, row " << r << " col " << c;
  }
}

// ---------------------------------------------------------------------------------------------------
// Latent attention: several segments (samples), every head, against the CPU kernels per segment and head.

struct LatentData {
  int H, M, E, C;
  std::vector<int> seg_rows;
  std::vector<k::index_t> seg_begin;
  k::index_t rows = 0;
  std::vector<float> q, kk, v;  // q [H][M][E]; k, v rows x C (ld C)
  LatentData(int h, int m, int e, std::vector<int> sizes, std::mt19937& gen) : H(h), M(m), E(e), C(h * e), seg_rows(std::move(sizes)) {
    for (int n : seg_rows) seg_begin.push_back(rows), rows += n;
    q = random_vector(static_cast<std::size_t>(H) * M * E, 0.7f, gen);
    kk = random_vector(static_cast<std::size_t>(rows) * C, 1.0f, gen);
    v = random_vector(static_cast<std::size_t>(rows) * C, 1.0f, gen);
  }
  int segments() const { return static_cast<int>(seg_rows.size()); }
  int samples() const { return segments() + 1; }  // segment s is sample s + 1; sample 0 stays untouched
  /// A CPU copy of rows x C at the padded stride.
  std::vector<float> padded(const std::vector<float>& a) const {
    const k::index_t ld = k::round_up(C, k::kPad);
    std::vector<float> out(static_cast<std::size_t>(std::max<k::index_t>(rows, 1) * ld), 0.0f);
    for (k::index_t r = 0; r < rows; ++r)
      for (int c = 0; c < C; ++c) out[r * ld + c] = a[r * C + c];
    return out;
  }
  float max_abs_v() const {
    float m = 0;
    for (float x : v) m = std::max(m, std::abs(x));
    return m;
  }
};

/// Device copies of a LatentData with its chunks (at most chunk_rows rows each).
struct DeviceLatent {
  cu::DeviceBuffer<float> q, kk, v;
  cu::DeviceBuffer<cu::LatentChunk> chunks;
  cu::DeviceBuffer<int> chunk_begin;
  cu::DeviceBuffer<k::index_t> sample;
  int num_chunks = 0;
  cu::LatentProblem p;
  cu::SegmentInfo seg;
  DeviceLatent(const LatentData& d, int chunk_rows) {
    q = to_device(d.q);
    kk = to_device(d.kk);
    v = to_device(d.v);
    std::vector<cu::LatentChunk> c;
    std::vector<int> begin;
    std::vector<k::index_t> samples;
    for (int s = 0; s < d.segments(); ++s) {
      begin.push_back(static_cast<int>(c.size()));
      samples.push_back(s + 1);
      cu::append_chunks(d.seg_begin[s], d.seg_begin[s] + d.seg_rows[s], s, chunk_rows, c);
    }
    begin.push_back(static_cast<int>(c.size()));
    num_chunks = static_cast<int>(c.size());
    chunks = to_device(c);
    chunk_begin = to_device(begin);
    sample = to_device(samples);
    p.q = q.data();
    p.H = d.H, p.M = d.M, p.E = d.E;
    p.k = kk.data();
    p.v = v.data();
    p.ld = d.C;
    p.chunks = chunks.data();
    p.num_chunks = num_chunks;
    seg.chunk_begin = chunk_begin.data();
    seg.sample = sample.data();
    seg.segments = d.segments();
  }
};

struct DefaultEncode {
  std::vector<std::int32_t> ref;  // [B][H][M]
  std::vector<double> acc;        // [B][H][M][E+1]
  std::vector<float> z;           // [S][H][M][E]
};

DefaultEncode gpu_default_encode(const LatentData& d, int chunk_rows, cu::MlpPrecision precision = cu::MlpPrecision::fp32) {
  DeviceLatent dl(d, chunk_rows);
  dl.p.precision = precision;
  const cu::EncodeShape shape = cu::encode_shape(d.M);
  const std::size_t hm = static_cast<std::size_t>(d.H) * d.M, width = static_cast<std::size_t>(d.E) + 1;
  const std::size_t parts = static_cast<std::size_t>(std::max(dl.num_chunks, 1)) * shape.slices;
  cu::DeviceBuffer<std::int32_t> part_ref(parts * hm, st::test_device()), ref(d.samples() * hm, st::test_device());
  cu::DeviceBuffer<double> part_acc(parts * hm * width, st::test_device());
  auto acc = to_device(std::vector<double>(d.samples() * hm * width, 12345.0));  // sentinel: sample 0
  cu::fill(ref.data(), ref.size(), 777, nullptr);
  cu::DeviceBuffer<float> z(static_cast<std::size_t>(d.segments()) * hm * d.E, st::test_device());
  cu::latent_encode_partials(dl.p, part_ref.data(), part_acc.data(), nullptr);
  cu::latent_encode_merge(dl.p, part_ref.data(), part_acc.data(), dl.seg, ref.data(), acc.data(), nullptr);
  cu::latent_encode_finalize(acc.data(), dl.seg, d.H, d.M, d.E, z.data(), nullptr);
  return {to_host(ref.data(), ref.size()), to_host(acc.data(), acc.size()), to_host(z.data(), z.size())};
}

struct ExactEncode {
  std::vector<std::int64_t> acc;  // [B][H][M][E+1][2]
  std::vector<float> z;
};

ExactEncode gpu_exact_encode(const LatentData& d, int chunk_rows) {
  DeviceLatent dl(d, chunk_rows);
  const cu::EncodeShape shape = cu::encode_shape(d.M);
  const std::size_t hm = static_cast<std::size_t>(d.H) * d.M, width = static_cast<std::size_t>(d.E) + 1;
  const std::size_t parts = static_cast<std::size_t>(std::max(dl.num_chunks, 1)) * shape.slices;
  const std::size_t B = static_cast<std::size_t>(d.samples()), S = static_cast<std::size_t>(d.segments());
  cu::DeviceBuffer<float> part_max(parts * hm, st::test_device()), part_vmax(static_cast<std::size_t>(std::max(dl.num_chunks, 1)) * d.H, st::test_device());
  cu::DeviceBuffer<float> maxima(B * hm + B * d.H, st::test_device());
  cu::fill(maxima.data(), maxima.size(), -INFINITY, nullptr);
  cu::latent_max_partials(dl.p, part_max.data(), part_vmax.data(), nullptr);
  cu::latent_max_merge(dl.p, part_max.data(), part_vmax.data(), dl.seg, maxima.data(), maxima.data() + B * hm, nullptr);
  const auto vmax = to_host(maxima.data() + B * hm, B * d.H);
  std::vector<k::ExactScale> scales(S * (1 + static_cast<std::size_t>(d.H)));
  for (std::size_t s = 0; s < S; ++s) {
    scales[s] = k::exact_scale(d.seg_rows[s], 1.0);
    for (int h = 0; h < d.H; ++h) scales[S + s * d.H + h] = k::exact_scale(d.seg_rows[s], vmax[(s + 1) * d.H + h]);
  }
  auto dscales = to_device(scales);
  cu::DeviceBuffer<std::int64_t> acc(B * hm * width * 2, st::test_device()), bad(B * hm, st::test_device());
  cu::zero(acc.data(), acc.bytes(), nullptr);
  cu::zero(bad.data(), bad.bytes(), nullptr);
  cu::latent_encode_exact(dl.p, maxima.data(), dl.seg, dscales.data(), dscales.data() + S, acc.data(), bad.data(),
                          nullptr);
  cu::DeviceBuffer<float> z(S * hm * d.E, st::test_device());
  cu::latent_exact_finalize(acc.data(), bad.data(), dl.seg, dscales.data(), dscales.data() + S, d.H, d.M, d.E, z.data(),
                            nullptr);
  return {to_host(acc.data(), acc.size()), to_host(z.data(), z.size())};
}

/// Z of every segment and head by the CPU kernels (default or reproducible encode).
std::vector<float> cpu_encode(const LatentData& d, bool exact) {
  const k::CpuKernels& cpu = k::cpu();
  const k::index_t ld = k::round_up(d.C, k::kPad);
  const auto kc = d.padded(d.kk), vc = d.padded(d.v);
  std::vector<float> z(static_cast<std::size_t>(d.segments()) * d.H * d.M * d.E);
  for (int s = 0; s < d.segments(); ++s)
    for (int h = 0; h < d.H; ++h) {
      const float* q = d.q.data() + static_cast<std::size_t>(h) * d.M * d.E;
      const float* kh = kc.data() + d.seg_begin[s] * ld + h * d.E;
      const float* vh = vc.data() + d.seg_begin[s] * ld + h * d.E;
      float* zh = z.data() + (static_cast<std::size_t>(s) * d.H + h) * d.M * d.E;
      if (!exact) {
        std::vector<std::int32_t> ref(d.M, k::kNoExponent);
        std::vector<double> sum(d.M, 0.0), weighted(static_cast<std::size_t>(d.M) * d.E, 0.0);
        k::LatentEncodeArgs a;
        a.q = q, a.M = d.M, a.E = d.E, a.k = kh, a.ldk = ld, a.v = vh, a.ldv = ld, a.rows = d.seg_rows[s];
        a.ref_exp = ref.data(), a.sum = sum.data(), a.weighted = weighted.data();
        cpu.latent_encode(a);
        for (int m = 0; m < d.M; ++m)
          for (int e = 0; e < d.E; ++e) zh[m * d.E + e] = static_cast<float>(weighted[m * d.E + e] / sum[m]);
        continue;
      }
      std::vector<float> mx(d.M, -INFINITY);
      k::LatentMaxArgs ma;
      ma.q = q, ma.M = d.M, ma.E = d.E, ma.k = kh, ma.ldk = ld, ma.rows = d.seg_rows[s], ma.max = mx.data();
      cpu.latent_max(ma);
      float vmax = 0;
      for (int r = 0; r < d.seg_rows[s]; ++r)
        for (int e = 0; e < d.E; ++e) vmax = std::max(vmax, std::abs(vh[r * ld + e]));
      std::vector<std::int64_t> acc(static_cast<std::size_t>(d.M) * (d.E + 1) * 2, 0);
      k::LatentExactArgs a;
      a.q = q, a.M = d.M, a.E = d.E, a.k = kh, a.ldk = ld, a.v = vh, a.ldv = ld, a.rows = d.seg_rows[s];
      a.ref_max = mx.data();
      a.sum_scale = k::exact_scale(d.seg_rows[s], 1.0);
      a.value_scale = k::exact_scale(d.seg_rows[s], vmax);
      a.acc = acc.data();
      cpu.latent_encode_exact(a);
      for (int m = 0; m < d.M; ++m) {
        const std::int64_t* am = acc.data() + static_cast<std::size_t>(m) * (d.E + 1) * 2;
        const double total = k::exact_value(am[0], am[1], a.sum_scale);
        for (int e = 0; e < d.E; ++e)
          zh[m * d.E + e] = static_cast<float>(k::exact_value(am[2 * (1 + e)], am[2 * (1 + e) + 1], a.value_scale) / total);
      }
    }
  return z;
}

struct LatentShape {
  int H, M, E;
  std::vector<int> seg_rows;
};
const LatentShape kLatentShapes[] = {
    {1, 1, 1, {1}},          {4, 16, 8, {150, 173}},  {3, 12, 8, {1, 64, 100}}, {8, 64, 8, {1000}},
    {2, 100, 3, {777, 5}},   {8, 256, 8, {5000}},     {2, 300, 16, {2048, 9}},  {1, 64, 64, {300}},
    {2, 8, 33, {100, 1, 40}}, {1, 1000, 5, {600}}};

TEST_F(GpuKernels, DefaultEncodeMatchesTheCpuAndDoesNotDependOnTheChunks) {
  std::mt19937 gen(4);
  for (const LatentShape& s : kLatentShapes) {
    const LatentData d(s.H, s.M, s.E, s.seg_rows, gen);
    const auto ref = cpu_encode(d, false);
    const float tol = 1e-5f * d.max_abs_v();
    const DefaultEncode base = gpu_default_encode(d, 1 << 30);  // one chunk per segment
    for (std::size_t i = 0; i < ref.size(); ++i)
      ASSERT_LE(std::abs(base.z[i] - ref[i]), tol) << "H " << s.H << " M " << s.M << " E " << s.E << " entry " << i;
    // sample 0 has no local segment: untouched
    const std::size_t hm = static_cast<std::size_t>(s.H) * s.M, width = static_cast<std::size_t>(s.E) + 1;
    for (std::size_t i = 0; i < hm; ++i) ASSERT_EQ(base.ref[i], 777);
    for (std::size_t i = 0; i < hm * width; ++i) ASSERT_EQ(base.acc[i], 12345.0);
    for (int chunk_rows : {256, 37, 1}) {
      if (chunk_rows == 1 && d.rows > 1000) continue;  // (one partial per point: large)
      const DefaultEncode other = gpu_default_encode(d, chunk_rows);
      ASSERT_EQ(other.ref, base.ref) << "the reference exponents depend on the chunks (" << chunk_rows << " rows)";
      // only the order of the double additions differs: relative to the sum of |terms| <= sum * max|v|
      for (std::size_t i = 0; i < base.acc.size(); ++i)
        ASSERT_LE(std::abs(other.acc[i] - base.acc[i]), 1e-12 * std::abs(base.acc[i / width * width]) * d.max_abs_v())
            << "chunks of " << chunk_rows << ": entry " << i;
    }
  }
}

TEST_F(GpuKernels, ReproducibleEncodeIsBitwiseIndependentOfTheChunks) {
  std::mt19937 gen(5);
  for (const LatentShape& s : kLatentShapes) {
    const LatentData d(s.H, s.M, s.E, s.seg_rows, gen);
    const auto ref = cpu_encode(d, true);
    const float tol = 1e-5f * d.max_abs_v();
    const ExactEncode base = gpu_exact_encode(d, 1 << 30);
    for (std::size_t i = 0; i < ref.size(); ++i)
      ASSERT_LE(std::abs(base.z[i] - ref[i]), tol) << "H " << s.H << " M " << s.M << " E " << s.E << " entry " << i;
    const DefaultEncode fast = gpu_default_encode(d, 1 << 30);
    for (std::size_t i = 0; i < ref.size(); ++i) ASSERT_LE(std::abs(base.z[i] - fast.z[i]), tol) << "vs default, entry " << i;
    for (int chunk_rows : {256, 37, 1}) {
      if (chunk_rows == 1 && d.rows > 1000) continue;
      const ExactEncode other = gpu_exact_encode(d, chunk_rows);
      EXPECT_EQ(other.acc, base.acc) << "fixed-point sums differ with chunks of " << chunk_rows << " rows";
      EXPECT_EQ(other.z, base.z) << "chunks of " << chunk_rows;
    }
  }
}

// The default encode on the tensor cores (partials per chunk, merged in double) against a float64 encode,
// within a bound derived as the decode's (DecodeOnTensorCoresIsWithinItsFormatsBound): the logits' rounding
// delta through the softmax over the segment's points, the weights' and values' rounding, the FP32 sums
// within a chunk of at most `chunk` points, relative to max_n |v_n| of the head; chunks of 256 and 37 rows.
TEST_F(GpuKernels, DefaultEncodeOnTensorCoresIsWithinItsFormatsBound) {
  std::mt19937 gen(17);
  for (const auto precision : {cu::MlpPrecision::tf32, cu::MlpPrecision::bf16}) {
    const double u = precision == cu::MlpPrecision::bf16 ? 0x1p-8 : 0x1p-11;
    double worst = 0.0;
    for (const LatentShape& s : kLatentShapes) {
      const LatentData d(s.H, s.M, s.E, s.seg_rows, gen);
      for (const int chunk : {256, 37}) {
        const DefaultEncode got = gpu_default_encode(d, chunk, precision);
        for (int seg = 0; seg < d.segments(); ++seg)
          for (int h = 0; h < d.H; ++h) {
            const k::index_t r0 = d.seg_begin[seg], r1 = r0 + d.seg_rows[seg];
            double vmax = 0.0;
            for (k::index_t r = r0; r < r1; ++r)
              for (int e = 0; e < d.E; ++e) vmax = std::max(vmax, std::abs(double{d.v[r * d.C + h * d.E + e]}));
            for (int m = 0; m < d.M; ++m) {
              const float* q = d.q.data() + (static_cast<std::size_t>(h) * d.M + m) * d.E;
              std::vector<double> logit;
              double delta = 0.0, top = -1e300;
              for (k::index_t r = r0; r < r1; ++r) {
                double l = 0.0, mag = 0.0;
                for (int e = 0; e < d.E; ++e) {
                  l += double{q[e]} * d.kk[r * d.C + h * d.E + e];
                  mag += std::abs(double{q[e]} * d.kk[r * d.C + h * d.E + e]);
                }
                logit.push_back(l);
                top = std::max(top, l);
                delta = std::max(delta, (2.0 * u + u * u + d.E * 0x1p-24) * mag);
              }
              double sum = 0.0;
              std::vector<double> want(static_cast<std::size_t>(d.E), 0.0);
              for (k::index_t r = r0; r < r1; ++r) {
                const double w = std::exp(logit[static_cast<std::size_t>(r - r0)] - top);
                sum += w;
                for (int e = 0; e < d.E; ++e) want[static_cast<std::size_t>(e)] += w * d.v[r * d.C + h * d.E + e];
              }
              const double bound = (std::expm1(2.0 * delta) + 2.0 * u + (chunk + d.E + 16) * 0x1p-23) * vmax;
              for (int e = 0; e < d.E; ++e) {
                const float z = got.z[((static_cast<std::size_t>(seg) * d.H + h) * d.M + m) * d.E + e];
                const double err = std::abs(z - want[static_cast<std::size_t>(e)] / sum);
                worst = std::max(worst, err / bound);
                ASSERT_LE(err, bound) << (precision == cu::MlpPrecision::bf16 ? "bf16" : "tf32") << ", H " << s.H
                                      << " M " << s.M << " E " << s.E << " chunks of " << chunk << ", segment " << seg
                                      << " head " << h << " latent " << m << " channel " << e;
              }
            }
          }
      }
    }
    std::printf("%s encode: largest error / bound %.3f\n", precision == cu::MlpPrecision::bf16 ? "bf16" : "tf32", worst);
  }
}

// A term whose fixed-point image does not fit (a NaN value) makes its latents NaN, as on the CPU; the other
// head is untouched.
TEST_F(GpuKernels, ReproducibleEncodeGivesNaNWhereATermDoesNotFit) {
  std::mt19937 gen(7);
  LatentData d(2, 16, 8, {50}, gen);
  d.v[static_cast<std::size_t>(3 * d.C + 1 * d.E + 2)] = NAN;  // row 3, head 1, channel 2
  const auto ref = cpu_encode(d, true);
  const ExactEncode got = gpu_exact_encode(d, 1 << 30);
  const std::size_t per_head = static_cast<std::size_t>(d.M) * d.E;
  for (std::size_t i = 0; i < per_head; ++i) {
    ASSERT_LE(std::abs(got.z[i] - ref[i]), 1e-5f * d.max_abs_v()) << "head 0, entry " << i;
    ASSERT_TRUE(std::isnan(got.z[per_head + i])) << "head 1, entry " << i;
  }
}

/// The device decode of d's keys against latent values z ([segments][H][M][E]), rows at stride ldy.
std::vector<float> gpu_decode(const LatentData& d, const std::vector<float>& z, k::index_t ldy,
                              cu::MlpPrecision precision) {
  std::vector<cu::LatentChunk> tiles;
  for (int seg = 0; seg < d.segments(); ++seg)
    cu::append_chunks(d.seg_begin[seg], d.seg_begin[seg] + d.seg_rows[seg], seg, cu::kDecodeRows, tiles);
  auto dq = to_device(d.q), dz = to_device(z), dk = to_device(d.kk);
  auto dtiles = to_device(tiles);
  cu::DeviceBuffer<float> dy(static_cast<std::size_t>(d.rows * ldy), st::test_device());
  cu::LatentDecodeArgs a;
  a.q = dq.data(), a.z = dz.data(), a.H = d.H, a.M = d.M, a.E = d.E, a.k = dk.data(), a.ldk = d.C;
  a.y = dy.data(), a.ldy = ldy, a.tiles = dtiles.data(), a.num_tiles = static_cast<int>(tiles.size());
  a.precision = precision;
  cu::latent_decode(a, nullptr);
  return to_host(dy.data(), static_cast<std::size_t>(d.rows * ldy));
}

TEST_F(GpuKernels, DecodeMatchesTheCpuKernel) {
  std::mt19937 gen(6);
  const k::CpuKernels& cpu = k::cpu();
  for (const LatentShape& s : kLatentShapes) {
    const LatentData d(s.H, s.M, s.E, s.seg_rows, gen);
    const auto z = random_vector(static_cast<std::size_t>(d.segments()) * d.H * d.M * d.E, 1.0f, gen);
    const k::index_t ldy = d.C + 3;
    const auto y = gpu_decode(d, z, ldy, cu::MlpPrecision::fp32);

    const k::index_t ld = k::round_up(d.C, k::kPad);
    const auto kc = d.padded(d.kk);
    std::vector<float> yc(kc.size(), 0.0f);
    for (int seg = 0; seg < d.segments(); ++seg)
      for (int h = 0; h < d.H; ++h) {
        k::LatentDecodeArgs c;
        c.q = d.q.data() + static_cast<std::size_t>(h) * d.M * d.E;
        c.z = z.data() + (static_cast<std::size_t>(seg) * d.H + h) * d.M * d.E;
        c.M = d.M, c.E = d.E;
        c.k = kc.data() + d.seg_begin[seg] * ld + h * d.E, c.ldk = ld;
        c.y = yc.data() + d.seg_begin[seg] * ld + h * d.E, c.ldy = ld;
        c.rows = d.seg_rows[seg];
        cpu.latent_decode(c);
      }
    for (k::index_t r = 0; r < d.rows; ++r)
      for (int c = 0; c < d.C; ++c)
        ASSERT_LE(std::abs(y[r * ldy + c] - yc[r * ld + c]), 1e-5)
            << "H " << s.H << " M " << s.M << " E " << s.E << " row " << r << " channel " << c;
  }
}

// The decode on the tensor cores against a float64 decode, within a bound derived from the operand format
// (unit roundoff u: bf16 2^-8, tf32 2^-11). A logit's products of rounded operands are off by at most
// (2u + u^2) |q_e k_e| each and its FP32 sum by E 2^-24 sum |q_e k_e|: delta = max_m of that; a softmax
// weight then moves by at most e^(2 delta) - 1 relative, the weights and values rounded to the format add
// u each, the exp (the fp32 kernel's) and the FP32 sums over M latents and E channels (M + E) 2^-23: all
// of it relative to max_m |z_m|.
TEST_F(GpuKernels, DecodeOnTensorCoresIsWithinItsFormatsBound) {
  std::mt19937 gen(16);
  for (const auto precision : {cu::MlpPrecision::tf32, cu::MlpPrecision::bf16}) {
    const double u = precision == cu::MlpPrecision::bf16 ? 0x1p-8 : 0x1p-11;
    double worst = 0.0;  // the largest error / bound seen
    for (const LatentShape& s : kLatentShapes) {
      const LatentData d(s.H, s.M, s.E, s.seg_rows, gen);
      const auto z = random_vector(static_cast<std::size_t>(d.segments()) * d.H * d.M * d.E, 1.0f, gen);
      const k::index_t ldy = d.C + 3;
      const auto y = gpu_decode(d, z, ldy, precision);
      for (int seg = 0; seg < d.segments(); ++seg)
        for (int h = 0; h < d.H; ++h) {
          const float* q = d.q.data() + static_cast<std::size_t>(h) * d.M * d.E;
          const float* zh = z.data() + (static_cast<std::size_t>(seg) * d.H + h) * d.M * d.E;
          double zmax = 0.0;
          for (std::size_t i = 0; i < static_cast<std::size_t>(d.M) * d.E; ++i) zmax = std::max(zmax, std::abs(double{zh[i]}));
          for (k::index_t r = d.seg_begin[seg]; r < d.seg_begin[seg] + d.seg_rows[seg]; ++r) {
            const float* kr = d.kk.data() + r * d.C + h * d.E;
            std::vector<double> logit(static_cast<std::size_t>(d.M));
            double delta = 0.0, top = -1e300;
            for (int m = 0; m < d.M; ++m) {
              double l = 0.0, mag = 0.0;
              for (int e = 0; e < d.E; ++e) {
                l += double{q[m * d.E + e]} * kr[e];
                mag += std::abs(double{q[m * d.E + e]} * kr[e]);
              }
              logit[static_cast<std::size_t>(m)] = l;
              top = std::max(top, l);
              delta = std::max(delta, (2.0 * u + u * u + d.E * 0x1p-24) * mag);
            }
            double sum = 0.0;
            std::vector<double> want(static_cast<std::size_t>(d.E), 0.0);
            for (int m = 0; m < d.M; ++m) {
              const double w = std::exp(logit[static_cast<std::size_t>(m)] - top);
              sum += w;
              for (int e = 0; e < d.E; ++e) want[static_cast<std::size_t>(e)] += w * zh[m * d.E + e];
            }
            const double bound = (std::expm1(2.0 * delta) + 2.0 * u + (d.M + d.E) * 0x1p-23) * zmax;
            for (int e = 0; e < d.E; ++e) {
              const double err = std::abs(y[r * ldy + h * d.E + e] - want[static_cast<std::size_t>(e)] / sum);
              worst = std::max(worst, err / bound);
              ASSERT_LE(err, bound) << (precision == cu::MlpPrecision::bf16 ? "bf16" : "tf32") << ", H " << s.H
                                    << " M " << s.M << " E " << s.E << " row " << r << " head " << h << " channel " << e;
            }
          }
        }
    }
    std::printf("%s decode: largest error / bound %.3f\n", precision == cu::MlpPrecision::bf16 ? "bf16" : "tf32", worst);
  }
}

// ---------------------------------------------------------------------------------------------------
TEST_F(GpuKernels, RuntimeErrorsNameTheCall) {
  try {
    cu::DeviceBuffer<char> huge(std::size_t{1} << 60, st::test_device());
    FAIL() << "allocating 2^60 bytes succeeded";
  } catch (const cu::CudaError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cudaMalloc"), std::string::npos) << what;
    EXPECT_EQ(e.code(), cudaErrorMemoryAllocation) << what;
  }
  // the error state is cleared: the next call works
  cu::DeviceBuffer<float> small(16, st::test_device());
  EXPECT_NE(small.data(), nullptr);
}

TEST_F(GpuKernels, DeviceGuardRestoresTheCurrentDevice) {
  if (st::on_host_backend()) GTEST_SKIP() << "the CUDA runtime's current device: real devices only";
  const int count = cu::device_count();
  const int last = count - 1;
  cu::check(cudaSetDevice(last), "cudaSetDevice");
  {
    cu::DeviceGuard guard(0);
    int current = -1;
    cu::check(cudaGetDevice(&current), "cudaGetDevice");
    EXPECT_EQ(current, 0);
  }
  int current = -1;
  cu::check(cudaGetDevice(&current), "cudaGetDevice");
  EXPECT_EQ(current, last);
  cu::check(cudaSetDevice(0), "cudaSetDevice");
}

}  // namespace
