// The device code of the point-cloud layers (kernels/cuda/point_layers_kernels.cuh), unchanged, run on the
// CPU through the host emulation of the CUDA constructs (cuda_host_emulation.hpp), against the CPU code's
// arithmetic: the dense layer against the CPU Linear kernel of every instruction set this machine has
// (bitwise without an activation where the CPU kernel fuses the multiply-adds, i.e. AVX2 / AVX-512)
// and against a double reference with the float32 bound of a k-term FMA chain; the row copies, products,
// sums, eval BatchNorm and the per-receiver message mean bitwise against the loops of erwin/network.cpp
// written out here. Checks the kernels' indexing and arithmetic without a GPU; says nothing about nvcc's
// code or the hardware. Labels unit;cuda, CUDA builds.
#include "cuda_host_emulation.hpp"  // first: replaces the CUDA keywords for the kernel source below

#include "point_layers_kernels.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <tuple>
#include <vector>

#include "surrogate/kernels/aligned_buffer.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
namespace pk = surrogate::kernels::cuda::point_kernels;
namespace kn = surrogate::kernels;
using kn::index_t;

template <class Kernel>
void run(index_t elements, Kernel kernel) {
  const auto blocks = static_cast<unsigned>((elements + pk::kThreads - 1) / pk::kThreads);
  cuda_host_emulation::launch(dim3(blocks), pk::kThreads, kernel);
}

std::vector<float> random_values(std::size_t n, std::uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

double activation_double(kn::Activation act, double s) {
  switch (act) {
    case kn::Activation::silu: return s / (1.0 + std::exp(-s));
    case kn::Activation::gelu_erf: return 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));
    case kn::Activation::gelu_tanh: return 0.5 * s * (1.0 + std::tanh(0.7978845608028654 * (s + 0.044715 * s * s * s)));
    case kn::Activation::relu: return s < 0.0 ? 0.0 : s;
    case kn::Activation::none: break;
  }
  return s;
}

struct DenseCase {
  int in, out;
  index_t rows;
  kn::Activation act;
  bool residual;
};

// y = act(x W^T + b) [+ add] with padded strides: every element against a double reference within the
// bound of a float32 FMA chain (K + 1 roundings of partial sums bounded by |b| + sum |x_k w_k|), the
// activation's slope (<= 1.13 for GELU and SiLU) times that plus a few ulps of the activation itself
// (expf / erff and the division: 4 ulp of |ref| + 1e-30 absolute below the normal range); and against
// the CPU Linear kernel of each instruction set: bitwise without an activation on AVX2 / AVX-512 (both
// accumulate bias + x_k w_k with FMAs in k order), else within twice the bound.
TEST(PointLayersEmulated, DenseMatchesTheCpuLinearAndADoubleReference) {
  const DenseCase cases[] = {{5, 7, 13, kn::Activation::none, false},
                             {37, 45, 29, kn::Activation::gelu_erf, false},
                             {48, 16, 40, kn::Activation::silu, true},
                             {31, 20, 17, kn::Activation::relu, false},
                             {19, 67, 9, kn::Activation::none, true},
                             {70, 130, 131, kn::Activation::none, true},  // several tiles each way, a partial k tile
                             {64, 64, 128, kn::Activation::gelu_tanh, false}};
  std::uint32_t seed = 1;
  for (const DenseCase& c : cases) {
    const index_t ldx = kn::round_up(c.in, kn::kPad) + 3, ldy = kn::round_up(c.out, kn::kPad);
    const std::vector<float> w = random_values(static_cast<std::size_t>(c.out) * c.in, seed++);
    const std::vector<float> b = random_values(static_cast<std::size_t>(c.out), seed++);
    const kn::PackedLinear layer(w.data(), b.data(), c.out, c.in);
    kn::AlignedBuffer<float> x(static_cast<std::size_t>(c.rows * ldx));
    const std::vector<float> xv = random_values(x.size(), seed++, -2.0f, 2.0f);
    std::copy(xv.begin(), xv.end(), x.data());
    const std::vector<float> addv = random_values(static_cast<std::size_t>(c.rows * ldy), seed++);
    std::vector<float> y = c.residual ? addv : std::vector<float>(addv.size(), -7.0f);

    cu::DenseArgs a;
    a.wt = layer.wt();
    a.bias = layer.bias();
    a.in = c.in;
    a.out = c.out;
    a.ldw = layer.out_pad();
    a.x = x.data();
    a.ldx = ldx;
    a.y = y.data();
    a.ldy = ldy;
    a.rows = c.rows;
    a.act = c.act;
    a.add = c.residual ? y.data() : nullptr;  // in place, as the blocks' residuals
    a.ld_add = ldy;
    const dim3 tiles(static_cast<unsigned>((c.rows + pk::kDenseTile - 1) / pk::kDenseTile),
                     static_cast<unsigned>((c.out + pk::kDenseTile - 1) / pk::kDenseTile));
    cuda_host_emulation::launch(tiles, pk::kDenseThreads, [&] { pk::dense_tiled_kernel(a); });

    const double eps = std::numeric_limits<float>::epsilon() / 2;
    std::vector<double> bound(y.size(), 0.0);
    for (index_t r = 0; r < c.rows; ++r)
      for (int o = 0; o < c.out; ++o) {
        double s = b[static_cast<std::size_t>(o)], mag = std::abs(s);
        for (int k = 0; k < c.in; ++k) {
          const double t = static_cast<double>(x[static_cast<std::size_t>(r * ldx + k)]) * w[static_cast<std::size_t>(o * c.in + k)];
          s += t;
          mag += std::abs(t);
        }
        const double chain = (c.in + 1) * eps * mag;
        double ref = activation_double(c.act, s);
        double tol = c.act == kn::Activation::none ? chain : 1.13 * chain + 8 * eps * std::abs(ref) + 1e-30;
        const auto i = static_cast<std::size_t>(r * ldy + o);
        if (c.residual) {
          ref += addv[i];
          tol += eps * std::abs(ref);  // the residual's rounding
        }
        bound[i] = tol;
        ASSERT_LE(std::abs(y[i] - ref), tol) << "row " << r << " column " << o << " in " << c.in;
      }
    for (index_t r = 0; r < c.rows; ++r)  // columns >= out untouched
      for (index_t o = c.out; o < ldy; ++o)
        ASSERT_EQ(y[static_cast<std::size_t>(r * ldy + o)], c.residual ? addv[static_cast<std::size_t>(r * ldy + o)] : -7.0f);

    for (const kn::Isa isa : {kn::Isa::generic, kn::Isa::avx2, kn::Isa::avx512}) {
      const kn::CpuKernels* cpu = kn::cpu(isa);
      if (!cpu) continue;
      kn::AlignedBuffer<float> ycpu(static_cast<std::size_t>(c.rows * ldy));
      std::copy(addv.begin(), addv.end(), ycpu.data());
      kn::LinearArgs l;
      l.layer = &layer;
      l.x = x.data();
      l.ldx = ldx;
      l.y = ycpu.data();
      l.ldy = ldy;
      l.rows = c.rows;
      l.act = c.act;
      l.add1 = c.residual ? ycpu.data() : nullptr;
      l.ld_add1 = ldy;
      cpu->linear(l);
      const bool bitwise = isa != kn::Isa::generic && c.act == kn::Activation::none;
      for (index_t r = 0; r < c.rows; ++r)
        for (int o = 0; o < c.out; ++o) {
          const auto i = static_cast<std::size_t>(r * ldy + o);
          if (bitwise)
            ASSERT_EQ(y[i], ycpu[i]) << kn::to_string(isa) << " row " << r << " column " << o;
          else
            ASSERT_LE(std::abs(static_cast<double>(y[i]) - ycpu[i]), 2 * bound[i]) << kn::to_string(isa) << " row " << r;
        }
    }
  }
}

// Gathers (tree order, rotated order), scatters (back from the rotated order) and strided copies into
// column ranges of concatenated rows: bitwise, and nothing outside the written rows and columns.
TEST(PointLayersEmulated, RowCopiesGatherAndScatterExactly) {
  const index_t rows = 23;
  const int width = 5;
  const index_t ld_src = 8, ld_dst = 11;
  const std::vector<float> src = random_values(static_cast<std::size_t>(rows * ld_src), 7);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(rows));
  for (index_t r = 0; r < rows; ++r) perm[static_cast<std::size_t>(r)] = (r * 7 + 3) % rows;
  for (const int mode : {0, 1, 2}) {  // gather, scatter, plain
    std::vector<float> dst(static_cast<std::size_t>(rows * ld_dst), -1.0f);
    cu::RowCopyArgs a;
    a.src = src.data();
    a.ld_src = ld_src;
    a.src_index = mode == 0 ? perm.data() : nullptr;
    a.dst = dst.data() + 2;  // columns 2 .. 6 of the destination rows
    a.ld_dst = ld_dst;
    a.dst_index = mode == 1 ? perm.data() : nullptr;
    a.rows = rows;
    a.width = width;
    run(rows * width, [&] { pk::copy_rows_kernel(a); });
    for (index_t r = 0; r < rows; ++r) {
      const index_t from = mode == 0 ? perm[static_cast<std::size_t>(r)] : r;
      const index_t to = mode == 1 ? perm[static_cast<std::size_t>(r)] : r;
      for (int c = 0; c < width; ++c)
        ASSERT_EQ(dst[static_cast<std::size_t>(to * ld_dst + 2 + c)], src[static_cast<std::size_t>(from * ld_src + c)]);
    }
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < ld_dst; ++c)
        if (c < 2 || c >= 2 + width) {
          ASSERT_EQ(dst[static_cast<std::size_t>(r * ld_dst + c)], -1.0f);
        }
  }
}

// The SwiGLU gate (a1 *= a2, in place) and the message-passing residual (h = h + out): bitwise.
TEST(PointLayersEmulated, RowProductsAndSumsAreTheCpuOperations) {
  const index_t rows = 17, ld = 12;
  const int width = 9;
  const std::vector<float> a0 = random_values(static_cast<std::size_t>(rows * ld), 11, -3.0f, 3.0f);
  const std::vector<float> b = random_values(static_cast<std::size_t>(rows * ld), 12, -3.0f, 3.0f);
  for (const cu::RowOp op : {cu::RowOp::multiply, cu::RowOp::add}) {
    std::vector<float> y = a0;
    cu::RowBinaryArgs a;
    a.op = op;
    a.a = y.data();
    a.lda = ld;
    a.b = b.data();
    a.ldb = ld;
    a.y = y.data();
    a.ldy = ld;
    a.rows = rows;
    a.width = width;
    run(rows * width, [&] { pk::row_binary_kernel(a); });
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < ld; ++c) {
        const auto i = static_cast<std::size_t>(r * ld + c);
        const float want = c >= width ? a0[i] : op == cu::RowOp::multiply ? a0[i] * b[i] : a0[i] + b[i];
        ASSERT_EQ(y[i], want) << "row " << r << " column " << c;
      }
  }
}

// Eval BatchNorm after pooling (x = x alpha + beta) and after unpooling (x = (x + z) alpha + beta, z the
// unpooled rows at their own stride): bitwise against the CPU's BatchNorm::apply (product rounded, then
// the sum; erwin/network.cpp is compiled without FMA contraction on x86-64).
TEST(PointLayersEmulated, BatchNormIsTheCpuFold) {
  const index_t rows = 19, ld = 16, ld_z = 10;
  const int dim = 10;
  std::vector<float> alpha = random_values(dim, 21, 0.5f, 2.0f), beta = random_values(dim, 22);
  const std::vector<float> x0 = random_values(static_cast<std::size_t>(rows * ld), 23, -4.0f, 4.0f);
  const std::vector<float> z = random_values(static_cast<std::size_t>(rows * ld_z), 24, -4.0f, 4.0f);
  for (const bool with_add : {false, true}) {
    std::vector<float> x = x0;
    cu::BatchNormArgs a;
    a.x = x.data();
    a.ld = ld;
    a.rows = rows;
    a.dim = dim;
    a.alpha = alpha.data();
    a.beta = beta.data();
    a.add = with_add ? z.data() : nullptr;
    a.ld_add = ld_z;
    run(rows * dim, [&] { pk::batch_norm_kernel(a); });
    for (index_t r = 0; r < rows; ++r)
      for (index_t c = 0; c < ld; ++c) {
        const auto i = static_cast<std::size_t>(r * ld + c);
        float want = x0[i];
        if (c < dim) {
          if (with_add) want += z[static_cast<std::size_t>(r * ld_z + c)];
          const float product = want * alpha[static_cast<std::size_t>(c)];
          want = product + beta[static_cast<std::size_t>(c)];
        }
        ASSERT_EQ(x[i], want) << "row " << r << " column " << c;
      }
  }
}

// The mean of the messages per receiver, on a chunk of receivers (start[0] > 0: the messages of the chunk
// begin at row 0), receivers with several, one and no edges: bitwise against run_mpnn's loop (sum from
// 0 in edge order, then divided by max(1, count)).
TEST(PointLayersEmulated, SegmentMeanIsTheCpuReceiverLoop) {
  const std::vector<std::int64_t> start = {40, 43, 43, 44, 50, 52, 52, 60};
  const index_t receivers = static_cast<index_t>(start.size()) - 1;
  const index_t edges = start.back() - start.front(), ld_msg = 9, ld_agg = 13;
  const int width = 7;
  const std::vector<float> msg = random_values(static_cast<std::size_t>(edges * ld_msg), 31, -5.0f, 5.0f);
  std::vector<float> agg(static_cast<std::size_t>(receivers * ld_agg), -1.0f);
  cu::SegmentMeanArgs a;
  a.msg = msg.data();
  a.ld_msg = ld_msg;
  a.start = start.data();
  a.receivers = receivers;
  a.width = width;
  a.agg = agg.data();
  a.ld_agg = ld_agg;
  run(receivers * width, [&] { pk::segment_mean_kernel(a); });
  for (index_t i = 0; i < receivers; ++i) {
    std::vector<float> acc(static_cast<std::size_t>(width), 0.0f);
    for (std::int64_t q = start[static_cast<std::size_t>(i)]; q < start[static_cast<std::size_t>(i) + 1]; ++q)
      for (int c = 0; c < width; ++c) acc[static_cast<std::size_t>(c)] += msg[static_cast<std::size_t>((q - start[0]) * ld_msg + c)];
    const auto count = static_cast<float>(std::max<std::int64_t>(1, start[static_cast<std::size_t>(i) + 1] - start[static_cast<std::size_t>(i)]));
    for (int c = 0; c < width; ++c)
      ASSERT_EQ(agg[static_cast<std::size_t>(i * ld_agg + c)], acc[static_cast<std::size_t>(c)] / count) << "receiver " << i;
    for (index_t c = width; c < ld_agg; ++c) {
      ASSERT_EQ(agg[static_cast<std::size_t>(i * ld_agg + c)], -1.0f);
    }
  }
}

// The ShapeNet-Car wrapper's Fourier features, for 2 and 3 coordinates and 1 to 32 frequencies, rows with
// gaps between them: bitwise the CPU loop (ops::HostOps::fourier, written out here: the projection from
// 0.0f in coordinate order, every product and sum rounded, then cosf / sinf), and against a double
// reference within the float32 bound of a d-term sum (its rounding, amplified by at most 1 through cos
// and sin, plus their own error of a few units in the last place). A zero frequency row gives sin(+0).
TEST(PointLayersEmulated, FourierFeaturesAreTheCpuLoop) {
  for (const auto& [dim, half, rows] : {std::tuple{3, 32, index_t{97}}, {2, 1, 5}, {3, 5, 300}, {2, 17, 1}}) {
    const index_t ld_pos = dim + 2, ld_features = 2 * half + 3;
    const std::vector<float> pos = random_values(static_cast<std::size_t>(rows * ld_pos), 41, -2.0f, 2.0f);
    std::vector<float> freq = random_values(static_cast<std::size_t>(half * dim), 43, -8.0f, 8.0f);
    for (int e = 0; e < dim; ++e) freq[static_cast<std::size_t>(e)] = 0.0f;  // the first projection: 0
    std::vector<float> features(static_cast<std::size_t>(rows * ld_features), -7.0f);
    cu::FourierArgs a;
    a.positions = pos.data();
    a.ld_pos = ld_pos;
    a.rows = rows;
    a.dim = dim;
    a.freq = freq.data();
    a.half = half;
    a.features = features.data();
    a.ld_features = ld_features;
    run(rows * half, [&] { pk::fourier_features_kernel(a); });
    for (index_t r = 0; r < rows; ++r) {
      const float* p = pos.data() + r * ld_pos;
      const float* f = features.data() + r * ld_features;
      for (int j = 0; j < half; ++j) {
        float proj = 0.0f;
        double exact = 0.0, magnitude = 0.0;
        for (int e = 0; e < dim; ++e) {
          const float w = freq[static_cast<std::size_t>(j * dim + e)];
          proj += p[e] * w;
          exact += static_cast<double>(p[e]) * w;
          magnitude += std::abs(static_cast<double>(p[e]) * w);
        }
        ASSERT_EQ(f[j], std::cos(proj)) << "row " << r << " frequency " << j;
        ASSERT_EQ(f[half + j], std::sin(proj)) << "row " << r << " frequency " << j;
        const double bound = (dim + 1) * std::numeric_limits<float>::epsilon() * magnitude +
                             4 * std::numeric_limits<float>::epsilon();
        EXPECT_NEAR(f[j], std::cos(exact), bound);
        EXPECT_NEAR(f[half + j], std::sin(exact), bound);
        if (j == 0) {
          ASSERT_FALSE(std::signbit(f[half]));
        }
      }
      for (index_t c = 2 * half; c < ld_features; ++c) {
        ASSERT_EQ(f[c], -7.0f) << "padding of row " << r;
      }
    }
  }
}

}  // namespace
