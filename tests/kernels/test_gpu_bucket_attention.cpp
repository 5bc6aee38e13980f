// HEPT's bucket kernels through their launchers (surrogate/kernels/cuda_bucket_attention.hpp), on the host
// backend (cuda.*) and on a GPU (gpu.*, skipped without one): the segment sorts against std::stable_sort
// (ties, +-0, +-inf, empty segments), the Gaussian bucket attention against a long double evaluation of
// its formula with a float32 / float64 error bound derived below, bitwise repeatability, its two steps
// (sums, combine) against the one launch, argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "gpu_test.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_bucket_attention.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
using surrogate::kernels::index_t;
using surrogate::testing::to_device;
using surrogate::testing::to_host;

template <class T>
void launch_sort(const cu::SegmentSortLaunchOf<T>& a) {
  if constexpr (sizeof(T) == 4) cu::segment_sort(a, nullptr);
  else cu::segment_sort_f64(a, nullptr);
}

template <class T>
void launch_buckets(const cu::GaussianBucketsLaunchOf<T>& a) {
  if constexpr (sizeof(T) == 4) cu::gaussian_buckets(a, nullptr);
  else cu::gaussian_buckets_f64(a, nullptr);
}

/// Positions first..last-1 ordered by key, ties by position (the reference order).
template <class T>
std::vector<std::int64_t> stable_order(const T* keys, std::int64_t first, std::int64_t last) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(last - first));
  std::iota(p.begin(), p.end(), first);
  std::stable_sort(p.begin(), p.end(), [&](std::int64_t a, std::int64_t b) { return keys[a] < keys[b]; });
  return p;
}

template <class T>
class GpuBucketKernels : public ::testing::Test {};
using Types = ::testing::Types<float, double>;
TYPED_TEST_SUITE(GpuBucketKernels, Types);

TYPED_TEST(GpuBucketKernels, SegmentSortIsStdStableSort) {
  SURROGATE_SKIP_WITHOUT_GPU();
  using T = TypeParam;
  const std::vector<std::int64_t> first = {0, 16, 16, 57, 64};  // an empty segment, unequal lengths
  const int rows = 3;
  const index_t points = first.back();
  std::mt19937 gen(11);
  std::uniform_int_distribution<int> pick(0, 9);
  const T inf = std::numeric_limits<T>::infinity();
  // Few distinct values, so that most keys tie; -0 and +0 must tie too.
  const T values[10] = {T(-0.0), T(0.0), T(1.5), T(-2.25), inf, -inf, T(1e-30), T(-1e-30), T(3), T(1.5)};
  std::vector<T> keys(static_cast<std::size_t>(rows * points));
  for (T& k : keys) k = values[pick(gen)];
  auto d_keys = to_device(keys);
  auto d_first = to_device(first);
  cu::DeviceBuffer<std::int64_t> d_perm(keys.size(), surrogate::testing::test_device());
  cu::SegmentSortWork work;
  cu::SegmentSortLaunchOf<T> a;
  a.rows = rows;
  a.points = points;
  a.segments = static_cast<int>(first.size()) - 1;
  a.first = d_first.data();
  a.keys = d_keys.data();
  a.perm = d_perm.data();
  a.work = &work;
  launch_sort(a);
  const std::vector<std::int64_t> perm = to_host(d_perm.data(), keys.size());
  for (int r = 0; r < rows; ++r)
    for (std::size_t g = 0; g + 1 < first.size(); ++g) {
      const T* row = keys.data() + r * points;
      const auto want = stable_order(row, first[g], first[g + 1]);
      const std::vector<std::int64_t> got(perm.begin() + r * points + first[g], perm.begin() + r * points + first[g + 1]);
      EXPECT_EQ(got, want) << "row " << r << ", segment " << g;
    }
}

/// A problem of `tables` x `heads` rows over graphs of the given padded sizes, its permutations from
/// random keys (stable order within each graph), random q̂, k̂ in [-1, 1], v in [-1, 1].
template <class T>
struct Problem {
  int tables = 3, heads = 2, bucket = 8, dh = 7, dv = 5;
  std::vector<std::int64_t> graph_first = {0, 16, 40};
  index_t points = 40;
  std::vector<T> qh, kh, v;
  std::vector<std::int64_t> perm_q, perm_k;
  index_t ldv() const { return static_cast<index_t>(heads) * dv + 3; }  // a padded stride

  explicit Problem(std::uint32_t seed) : Problem(seed, 8, {0, 16, 40}, 7, 5) {}
  Problem(std::uint32_t seed, int bucket_size, std::vector<std::int64_t> first, int qk_width, int v_width)
      : bucket(bucket_size), dh(qk_width), dv(v_width), graph_first(std::move(first)), points(graph_first.back()) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    qh.resize(static_cast<std::size_t>(heads * points * dh));
    kh.resize(qh.size());
    v.resize(static_cast<std::size_t>(points * ldv()));
    for (T& x : qh) x = static_cast<T>(unit(gen));
    for (T& x : kh) x = static_cast<T>(unit(gen));
    for (T& x : v) x = static_cast<T>(unit(gen));
    std::vector<T> keys(static_cast<std::size_t>(points));
    for (int r = 0; r < tables * heads; ++r)
      for (auto* perm : {&perm_q, &perm_k}) {
        for (T& k : keys) k = static_cast<T>(unit(gen));
        for (std::size_t g = 0; g + 1 < graph_first.size(); ++g) {
          const auto order = stable_order(keys.data(), graph_first[g], graph_first[g + 1]);
          perm->insert(perm->end(), order.begin(), order.end());
        }
      }
  }

  /// The attention in long double and, per output, the float bound: a logit is an FMA chain of dh
  /// products plus two additions, each -|x|^2/2 another chain of dh (error <= gamma(dh + 2) times the sum
  /// of the magnitudes S); exp adds 2 ulp (CUDA's expf; libm's is within 1); the weights' relative error
  /// e = gamma S + 4u then moves the weighted mean sum w v / sum w by at most 2 e max|v|, and the sums
  /// over tables x bucket terms add gamma(tables bucket + 2) each to numerator and denominator.
  /// operand_u > 0: the bound of the tensor-core kernel whose products' operands are rounded to a format of
  /// unit roundoff operand_u (each logit product off by (2 operand_u + operand_u^2) |q_t k_t| more, a weight
  /// then by expm1 of its logit's error relative, moving the mean by 2 e / (1 - e) max|v|; the weights and
  /// values rounded add operand_u each).
  void reference(std::vector<long double>& out, std::vector<long double>& bound, long double operand_u = 0) const {
    const long double u = std::numeric_limits<T>::epsilon() / 2;
    auto gamma = [u](long double k) { return k * u / (1 - k * u); };
    out.assign(static_cast<std::size_t>(points * heads * dv), 0.0L);
    bound.assign(out.size(), 0.0L);
    std::vector<long double> num(out.size()), den(static_cast<std::size_t>(points * heads)),
        worst(den.size());
    const auto row_of = [&](const std::vector<T>& x, int h, std::int64_t p) { return x.data() + (h * points + p) * dh; };
    for (int c = 0; c < tables; ++c)
      for (int h = 0; h < heads; ++h) {
        const std::size_t r = static_cast<std::size_t>((c * heads + h) * points);
        for (index_t s = 0; s < points; ++s) {
          const std::int64_t qp = perm_q[r + static_cast<std::size_t>(s)];
          const T* q = row_of(qh, h, qp);
          long double total = 0;
          const index_t b0 = s / bucket * bucket;
          for (int j = 0; j < bucket; ++j) {
            const std::int64_t kp = perm_k[r + static_cast<std::size_t>(b0 + j)];
            const T* k = row_of(kh, h, kp);
            long double dot = 0, qq = 0, kk = 0, mag = 0;
            for (int t = 0; t < dh; ++t) {
              dot += static_cast<long double>(q[t]) * k[t];
              qq += static_cast<long double>(q[t]) * q[t];
              kk += static_cast<long double>(k[t]) * k[t];
              mag += std::fabs(static_cast<long double>(q[t]) * k[t]);
            }
            const long double x = std::min(0.0L, dot - qq / 2 - kk / 2);
            const long double w = std::exp(x);
            const std::size_t slot = static_cast<std::size_t>(qp * heads + h);
            worst[slot] = std::max(worst[slot], gamma(dh + 2) * (mag + qq / 2 + kk / 2) + 4 * u +
                                                    (2 * operand_u + operand_u * operand_u) * mag);
            total += w;
            for (int d = 0; d < dv; ++d) num[slot * dv + d] += w * v[static_cast<std::size_t>(kp * ldv() + h * dv + d)];
          }
          den[static_cast<std::size_t>(qp * heads + h)] += total + 1e-20L;
        }
      }
    long double vmax = 0;
    for (T x : v) vmax = std::max(vmax, std::fabs(static_cast<long double>(x)));
    for (std::size_t slot = 0; slot < den.size(); ++slot)
      for (int d = 0; d < dv; ++d) {
        out[slot * dv + d] = num[slot * dv + d] / den[slot];
        const long double e = operand_u > 0 ? std::expm1(worst[slot]) : worst[slot];
        bound[slot * dv + d] =
            (2 * e / (1 - e) + 2 * gamma(tables * bucket + 2) + 2 * u + 2 * operand_u) * vmax;
      }
  }
};

/// A Problem's inputs on the device and the launch arguments over them (out and ldo: the caller's).
template <class T>
struct DeviceProblem {
  cu::DeviceBuffer<T> qh, kh, v, work;
  cu::DeviceBuffer<std::int64_t> perm_q, perm_k;
  cu::GaussianBucketsLaunchOf<T> args;
  explicit DeviceProblem(const Problem<T>& pb)
      : qh(to_device(pb.qh)), kh(to_device(pb.kh)), v(to_device(pb.v)),
        work(cu::gaussian_buckets_work(pb.tables, pb.heads, pb.points, pb.dv), surrogate::testing::test_device()),
        perm_q(to_device(pb.perm_q)), perm_k(to_device(pb.perm_k)) {
    args.tables = pb.tables;
    args.heads = pb.heads;
    args.points = pb.points;
    args.bucket = pb.bucket;
    args.dh = pb.dh;
    args.dv = pb.dv;
    args.qh = qh.data();
    args.kh = kh.data();
    args.v = v.data();
    args.ldv = pb.ldv();
    args.perm_q = perm_q.data();
    args.perm_k = perm_k.data();
    args.work = work.data();
  }
};

template <class T>
void expect_within_the_bound(const Problem<T>& pb) {
  DeviceProblem<T> dp(pb);
  const index_t ldo = pb.heads * pb.dv + 1;
  std::vector<T> sentinel(static_cast<std::size_t>(pb.points * ldo), T(-7));
  auto out = to_device(sentinel);
  cu::GaussianBucketsLaunchOf<T> a = dp.args;
  a.out = out.data();
  a.ldo = ldo;
  launch_buckets(a);
  const std::vector<T> got = to_host(out.data(), sentinel.size());
  std::vector<long double> want, bound;
  pb.reference(want, bound);
  long double worst_ratio = 0;
  for (index_t p = 0; p < pb.points; ++p) {
    for (int c = 0; c < pb.heads * pb.dv; ++c) {
      const auto i = static_cast<std::size_t>(p * pb.heads * pb.dv + c);
      const long double err = std::fabs(static_cast<long double>(got[static_cast<std::size_t>(p * ldo + c)]) - want[i]);
      ASSERT_LE(err, bound[i]) << "point " << p << ", column " << c;
      worst_ratio = std::max(worst_ratio, err / bound[i]);
    }
    EXPECT_EQ(got[static_cast<std::size_t>(p * ldo + pb.heads * pb.dv)], T(-7)) << "the padding column was written";
  }
  std::printf("max error / bound: %.3Lg\n", worst_ratio);
  // A second launch gives the same bits.
  launch_buckets(a);
  EXPECT_EQ(to_host(out.data(), sentinel.size()), got);
}

TYPED_TEST(GpuBucketKernels, GaussianBucketsWithinTheirBoundOfTheFormula) {
  SURROGATE_SKIP_WITHOUT_GPU();
  expect_within_the_bound(Problem<TypeParam>(5));
}

// Buckets of 200 at HEPT's widths (dh 30, dv 24): several staged key chunks per bucket and two blocks of
// queries per bucket.
TYPED_TEST(GpuBucketKernels, LargeBucketsSpanSeveralKeyChunksAndQueryBlocks) {
  SURROGATE_SKIP_WITHOUT_GPU();
  expect_within_the_bound(Problem<TypeParam>(7, 200, {0, 200, 600}, 30, 24));
}

// gaussian_bucket_sums, then gaussian_buckets_combine (the split forward's two steps) give the one launch's
// bits; the combine takes any number of points (the split forward's rows are not whole buckets).
TEST(GpuBucketKernels, SumsThenCombineAreTheOneLaunchBits) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const Problem<float> pb(11);
  DeviceProblem<float> dp(pb);
  const auto rows = static_cast<std::size_t>(pb.tables * pb.heads), n = static_cast<std::size_t>(pb.points);
  const int device = surrogate::testing::test_device();
  cu::DeviceBuffer<float> num(rows * n * static_cast<std::size_t>(pb.dv), device), den(rows * n, device);
  const index_t ldo = pb.heads * pb.dv;
  auto one = to_device(std::vector<float>(n * static_cast<std::size_t>(ldo), -7.0f));
  auto two = to_device(std::vector<float>(n * static_cast<std::size_t>(ldo), -7.0f));
  cu::GaussianBucketsLaunchOf<float> a = dp.args;
  a.out = one.data();
  a.ldo = ldo;
  cu::gaussian_buckets(a, nullptr);
  cu::gaussian_bucket_sums(a, num.data(), den.data(), nullptr);
  a.out = two.data();
  cu::gaussian_buckets_combine(a, num.data(), den.data(), nullptr);
  const std::vector<float> want = to_host(one.data(), n * static_cast<std::size_t>(ldo));
  EXPECT_EQ(to_host(two.data(), want.size()), want);
  // The combine alone of the first 5 points (the sums' rows of a table are `points` apart): their bits.
  a.points = 5;
  a.bucket = 0;
  std::vector<float> first5_num, first5_den;
  const std::vector<float> all_num = to_host(num.data(), num.size()), all_den = to_host(den.data(), den.size());
  for (std::size_t r = 0; r < rows; ++r) {
    first5_num.insert(first5_num.end(), all_num.begin() + static_cast<std::ptrdiff_t>(r * n * static_cast<std::size_t>(pb.dv)),
                      all_num.begin() + static_cast<std::ptrdiff_t>((r * n + 5) * static_cast<std::size_t>(pb.dv)));
    first5_den.insert(first5_den.end(), all_den.begin() + static_cast<std::ptrdiff_t>(r * n),
                      all_den.begin() + static_cast<std::ptrdiff_t>(r * n + 5));
  }
  auto num5 = to_device(first5_num), den5 = to_device(first5_den);
  auto three = to_device(std::vector<float>(5 * static_cast<std::size_t>(ldo), -7.0f));
  a.out = three.data();
  cu::gaussian_buckets_combine(a, num5.data(), den5.data(), nullptr);
  EXPECT_EQ(to_host(three.data(), 5 * static_cast<std::size_t>(ldo)),
            std::vector<float>(want.begin(), want.begin() + 5 * ldo));
  a.out = nullptr;
  EXPECT_THROW(cu::gaussian_buckets_combine(a, num5.data(), den5.data(), nullptr), std::invalid_argument);
  a.points = pb.points;
  a.bucket = pb.bucket;
  EXPECT_THROW(cu::gaussian_bucket_sums(a, num.data(), nullptr, nullptr), std::invalid_argument);
  a.points = pb.points - 1;
  EXPECT_THROW(cu::gaussian_bucket_sums(a, num.data(), den.data(), nullptr), std::invalid_argument);  // not whole buckets
}

// The bucket sums on the tensor cores (tf32, bf16) within the bound of their operand format against the
// long double formula (Problem::reference with operand_u); the rounding must show (the largest error above
// four times the fp32 kernel's); the same bits run to run; the two steps (sums, combine) the one launch's
// bits. Buckets of 8 to 200 (several query tiles and key passes), widths 3 to 64.
TEST(GpuBucketKernels, TensorCoresAreWithinTheirFormatsBound) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const Problem<float> problems[] = {Problem<float>(5), Problem<float>(7, 200, {0, 200, 600}, 30, 24),
                                     Problem<float>(13, 100, {0, 300}, 64, 40), Problem<float>(17, 17, {0, 34, 51}, 3, 5)};
  for (const auto precision : {cu::MlpPrecision::tf32, cu::MlpPrecision::bf16}) {
    const long double u = precision == cu::MlpPrecision::bf16 ? 0x1p-8L : 0x1p-11L;
    const char* name = precision == cu::MlpPrecision::bf16 ? "bf16" : "tf32";
    long double worst_ratio = 0, largest = 0, largest_fp32 = 0;
    for (const Problem<float>& pb : problems) {
      DeviceProblem<float> dp(pb);
      const index_t ldo = pb.heads * pb.dv + 1;
      const std::size_t size = static_cast<std::size_t>(pb.points * ldo);
      auto out = to_device(std::vector<float>(size, -7.0f));
      cu::GaussianBucketsLaunchOf<float> a = dp.args;
      a.out = out.data();
      a.ldo = ldo;
      cu::gaussian_buckets(a, nullptr);
      const std::vector<float> fp32 = to_host(out.data(), size);
      a.precision = precision;
      cu::gaussian_buckets(a, nullptr);
      const std::vector<float> got = to_host(out.data(), size);
      std::vector<long double> want, bound;
      pb.reference(want, bound, u);
      for (index_t p = 0; p < pb.points; ++p) {
        for (int c = 0; c < pb.heads * pb.dv; ++c) {
          const auto i = static_cast<std::size_t>(p * pb.heads * pb.dv + c), at = static_cast<std::size_t>(p * ldo + c);
          const long double err = std::fabs(static_cast<long double>(got[at]) - want[i]);
          ASSERT_LE(err, bound[i]) << name << ", bucket " << pb.bucket << " dh " << pb.dh << ": point " << p << ", column " << c;
          worst_ratio = std::max(worst_ratio, err / bound[i]);
          largest = std::max(largest, err);
          largest_fp32 = std::max(largest_fp32, std::fabs(static_cast<long double>(fp32[at]) - want[i]));
        }
        EXPECT_EQ(got[static_cast<std::size_t>(p * ldo + pb.heads * pb.dv)], -7.0f) << "the padding column was written";
      }
      cu::gaussian_buckets(a, nullptr);
      EXPECT_EQ(to_host(out.data(), size), got) << name << ": run to run";
      const auto rows = static_cast<std::size_t>(pb.tables * pb.heads), n = static_cast<std::size_t>(pb.points);
      cu::DeviceBuffer<float> num(rows * n * static_cast<std::size_t>(pb.dv), surrogate::testing::test_device());
      cu::DeviceBuffer<float> den(rows * n, surrogate::testing::test_device());
      cu::gaussian_bucket_sums(a, num.data(), den.data(), nullptr);
      auto two = to_device(std::vector<float>(size, -7.0f));
      a.out = two.data();
      cu::gaussian_buckets_combine(a, num.data(), den.data(), nullptr);
      EXPECT_EQ(to_host(two.data(), size), got) << name << ": sums then combine";
    }
    EXPECT_GT(largest, 4 * largest_fp32) << name << ": the operands' rounding does not show";
    std::printf("%s buckets: max error / bound %.3Lg, largest error %.3Lg (fp32 kernel %.3Lg)\n", name, worst_ratio, largest,
                largest_fp32);
  }
}

TEST(GpuBucketKernels, SizesTheKernelsDoNotTakeAreRefused) {
  SURROGATE_SKIP_WITHOUT_GPU();
  float dummy = 0;
  std::int64_t index = 0;
  cu::GaussianBucketsLaunchOf<float> a;
  a.tables = 2;
  a.heads = 2;
  a.points = 16;
  a.bucket = 8;
  a.dh = cu::kMaxBucketWidth + 1;
  a.dv = 4;
  a.qh = a.kh = a.v = &dummy;
  a.out = a.work = &dummy;
  a.perm_q = a.perm_k = &index;
  a.ldv = a.ldo = 8;
  EXPECT_THROW(cu::gaussian_buckets(a, nullptr), std::invalid_argument);  // dh too wide
  a.dh = 4;
  a.points = 12;
  EXPECT_THROW(cu::gaussian_buckets(a, nullptr), std::invalid_argument);  // not whole buckets
  a.points = 16;
  a.ldv = 7;
  EXPECT_THROW(cu::gaussian_buckets(a, nullptr), std::invalid_argument);  // stride below heads x dv
  cu::SegmentSortLaunchOf<double> s;
  s.rows = 1;
  s.points = 4;
  s.segments = 0;
  EXPECT_THROW(cu::segment_sort_f64(s, nullptr), std::invalid_argument);  // no segments, no arrays
}

}  // namespace
