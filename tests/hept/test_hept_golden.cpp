// HEPT's geometry and network against the official example/ code (tests/data/hept/README.md): region
// codes, bit widths, bin sizes, padding, bucket permutations, layer-0 keys and attention, the output; the
// stable-sort runs (the library's order) in float32 and float64; the bucket kernel against a naive loop.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "h5_io.hpp"
#include "surrogate/hept.hpp"
#include "surrogate/kernels/bucket_attention.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace hept = surrogate::hept;
using surrogate::testing::read_array;

namespace {

std::string path_of(const std::string& name) {
  return std::string(SURROGATE_TEST_DATA_DIR) + "/hept/hept_" + name + ".h5";
}

std::vector<std::int64_t> ints(const std::vector<double>& v) { return {v.begin(), v.end()}; }

struct Golden {
  std::string path, group;
  surrogate::ModelFile file;
  hept::Config cfg;
  std::vector<float> x, coords;
  std::vector<std::int64_t> sizes, ids;
  Golden(const std::string& name, const std::string& root = "/golden")
      : path(path_of(name)),
        group(root),
        file(surrogate::ModelFile::read(path_of(name))),
        cfg(hept::Config::from_attributes(file.config)) {
    file.check_weights(cfg.expected_shapes());
    x = surrogate::testing::to_float(read_array(path, root + "/x").values);
    coords = surrogate::testing::to_float(read_array(path, root + "/coords").values);
    sizes = ints(read_array(path, root + "/sample_sizes").values);
    for (std::size_t g = 0; g < sizes.size(); ++g) ids.push_back(static_cast<std::int64_t>(g));
  }
  std::vector<double> run(const std::string& r, const std::string& name) const {
    return read_array(path, group + "/" + r + "/" + name).values;
  }
  template <class T>
  hept::Geometry geometry(const std::vector<float>& regions) const {
    hept::Geometry g;
    hept::quantile_bins<T>(cfg, regions, coords.data(), sizes, g);
    hept::finish_geometry(cfg, ids, g);
    return g;
  }
};

template <class A, class B>
void expect_equal(const A& got, const B& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    if (static_cast<double>(got[i]) != static_cast<double>(want[i]) && bad++ == 0) first = i;
  EXPECT_EQ(bad, 0u) << what << ": first difference at " << first << " (" << static_cast<double>(got[first]) << " vs "
                     << static_cast<double>(want[first]) << ")";
}

/// max |got - want| / max(1, max |want|).
template <class T>
double relative_error(const std::vector<T>& got, const std::vector<double>& want) {
  double err = 0, scale = 1;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  std::printf("  max |difference| %.3g (relative to max(1, max|want|) %.3g)\n", err, err / scale);
  return err / scale;
}

template <class T>
void check_geometry(const Golden& c, const hept::Geometry& g, const std::string& r) {
  expect_equal(g.region_eta, c.run(r, "region_eta"), r + " region_eta");
  expect_equal(g.region_phi, c.run(r, "region_phi"), r + " region_phi");
  // bin sizes: graphs x rows as the forward computed them (integers in the run's precision)
  expect_equal(g.bin_eta, c.run(r, "bin_size_eta"), r + " bin_size_eta");
  expect_equal(g.bin_phi, c.run(r, "bin_size_phi"), r + " bin_size_phi");
  expect_equal(g.bits_eta, c.run(r, "bits_eta"), r + " bits_eta");
  expect_equal(g.bits_code1, c.run(r, "bits_code1"), r + " bits_code1");
  expect_equal(g.codes, c.run(r, "codes"), r + " codes");
  expect_equal(g.pad_sort_order, c.run(r, "pad_sort_order"), r + " pad_sort_order");
  expect_equal(g.pad_seq, c.run(r, "pad_seq"), r + " pad_seq");
  expect_equal(g.unpad, c.run(r, "unpad"), r + " unpad");
}

TEST(HeptGolden, ExampleSmallGeometryStableRuns) {
  const Golden c("example_small");
  const hept::Network<float> net(c.file, c.cfg);
  check_geometry<float>(c, c.geometry<float>(net.regions()), "f32_stable");
  check_geometry<double>(c, c.geometry<double>(net.regions()), "f64_stable");
}

TEST(HeptGolden, CheckpointGeometryStableRuns) {
  const Golden c("checkpoint_tracking");
  const hept::Network<float> net(c.file, c.cfg);
  check_geometry<float>(c, c.geometry<float>(net.regions()), "f32_stable");
  check_geometry<double>(c, c.geometry<double>(net.regions()), "f64_stable");
}

/// The network's forward with a trace, in arithmetic T, on the golden inputs.
template <class T>
struct Forward {
  hept::Trace<T> trace;
  std::vector<T> out;
  Forward(const Golden& c, const hept::Network<T>& net, int threads = 1) {
    const hept::Geometry g = c.geometry<T>(net.regions());
    out.resize(static_cast<std::size_t>(g.points() * c.cfg.out_dim()));
    net.forward(g, c.x.data(), c.coords.data(), out.data(), &trace, nullptr, threads);
  }
};

/// Sorted positions whose padded row differs from the golden permutation.
std::size_t permutation_differences(const std::vector<std::int64_t>& got, const std::vector<double>& want) {
  std::size_t bad = 0;
  for (std::size_t i = 0; i < want.size(); ++i) bad += static_cast<double>(got[i]) != want[i];
  return bad;
}

// float64, stable sorts: every bucket permutation of every layer is the official one; the keys, the
// layer-0 attention and the output agree to the rounding of float64 sums in another order. Bound: the
// network's values are sums of at most a few hundred products of magnitude <= 1e2 (logits cancel terms
// up to 1e2 here), each relative 2^-53, so 1e-12 relative to max(1, max|y|) leaves a margin of ~100.
TEST(HeptGolden, ExampleSmallFloat64Stable) {
  const Golden c("example_small");
  const hept::Network<double> net(c.file, c.cfg);
  const Forward<double> f(c, net);
  for (int l = 0; l < c.cfg.n_layers; ++l) {
    const std::string layer = "f64_stable/layer_" + std::to_string(l);
    EXPECT_EQ(permutation_differences(f.trace.perm_q[static_cast<std::size_t>(l)], c.run(layer, "perm_q")), 0u)
        << layer;
    EXPECT_EQ(permutation_differences(f.trace.perm_k[static_cast<std::size_t>(l)], c.run(layer, "perm_k")), 0u)
        << layer;
    EXPECT_LT(relative_error(f.trace.delta[static_cast<std::size_t>(l)], c.run(layer, "delta")), 1e-12) << layer;
  }
  EXPECT_LT(relative_error(f.trace.keys_q0, c.run("f64_stable/layer_0", "keys_q")), 1e-12);
  EXPECT_LT(relative_error(f.trace.keys_k0, c.run("f64_stable/layer_0", "keys_k")), 1e-12);
  EXPECT_LT(relative_error(f.trace.attn_out0, c.run("f64_stable/layer_0", "attn_out")), 1e-12);
  EXPECT_LT(relative_error(f.out, c.run("f64_stable", "output")), 1e-12);
}

// float32, stable sorts: the same buckets except where float32 keys tie or nearly tie (rounding of the
// projections in another summation order can swap two keys within a few ulps); the output within float32
// rounding: 2e-5 relative to max(1, max|y|) (~170 float32 ulps: the errors of ~10 chained layers of sums
// of 10-256 terms).
TEST(HeptGolden, ExampleSmallFloat32Stable) {
  const Golden c("example_small");
  const hept::Network<float> net(c.file, c.cfg);
  const Forward<float> f(c, net);
  const std::size_t layer0 = permutation_differences(f.trace.perm_q[0], c.run("f32_stable/layer_0", "perm_q")) +
                             permutation_differences(f.trace.perm_k[0], c.run("f32_stable/layer_0", "perm_k"));
  EXPECT_EQ(layer0, 0u);
  EXPECT_LT(relative_error(f.trace.attn_out0, c.run("f32_stable/layer_0", "attn_out")), 2e-5);
  EXPECT_LT(relative_error(f.out, c.run("f32_stable", "output")), 2e-5);
}

// The shipped checkpoint in float64 (the precision it needs): layer-0 buckets are the official ones;
// the output to 1e-9 relative to max|y| (~48): the logits cancel terms up to 1e8 (RBF weights ~1.7e7),
// so a float64 rounding of 1e8 * 2^-53 ~ 1e-8 in a logit moves a kernel value by that relative amount.
TEST(HeptGolden, CheckpointFloat64Stable) {
  const Golden c("checkpoint_tracking");
  const hept::Network<double> net(c.file, c.cfg);
  const Forward<double> f(c, net);
  EXPECT_EQ(permutation_differences(f.trace.perm_q[0], c.run("f64_stable/layer_0", "perm_q")), 0u);
  EXPECT_EQ(permutation_differences(f.trace.perm_k[0], c.run("f64_stable/layer_0", "perm_k")), 0u);
  EXPECT_LT(relative_error(f.trace.attn_out0, c.run("f64_stable/layer_0", "attn_out")), 1e-9);
  EXPECT_LT(relative_error(f.out, c.run("f64_stable", "output")), 1e-9);
}

// The src/ layout (one graph of 300 padded to 320 with zero rows and +inf keys, the additive region shift):
// bins over the padded length, every bucket permutation, keys (finite ones), layer-0 attention and the
// output of the stable runs; float64 to 1e-12 and float32 to 2e-5 relative, as the example layout.
// `src_pileup` adds the pileup task: the class embedding of the last input column (fractional and
// negative classes truncated as torch's .long()), out_proj to one channel and the sigmoid.
template <class T>
void check_src(const std::string& name, const std::string& r, double bound) {
  const Golden c(name);
  ASSERT_EQ(c.cfg.layout, hept::Config::Layout::src);
  const hept::Network<T> net(c.file, c.cfg);
  const hept::Geometry g = c.geometry<T>(net.regions());
  expect_equal(g.region_eta, c.run(r, "region_eta"), r + " region_eta");
  expect_equal(g.region_phi, c.run(r, "region_phi"), r + " region_phi");
  expect_equal(g.bin_eta, c.run(r, "bin_size_eta"), r + " bin_size_eta");
  expect_equal(g.bin_phi, c.run(r, "bin_size_phi"), r + " bin_size_phi");
  const Forward<T> f(c, net);
  for (int l = 0; l < c.cfg.n_layers; ++l) {
    const std::string layer = r + "/layer_" + std::to_string(l);
    EXPECT_EQ(permutation_differences(f.trace.perm_q[static_cast<std::size_t>(l)], c.run(layer, "perm_q")), 0u)
        << layer;
    EXPECT_EQ(permutation_differences(f.trace.perm_k[static_cast<std::size_t>(l)], c.run(layer, "perm_k")), 0u)
        << layer;
  }
  auto finite = [](std::vector<T> got, std::vector<double> want) {
    for (std::size_t i = 0; i < want.size(); ++i)
      if (!std::isfinite(want[i])) {
        EXPECT_FALSE(std::isfinite(got[i])) << i;
        got[i] = 0;
        want[i] = 0;
      }
    return relative_error(got, want);
  };
  EXPECT_LT(finite(f.trace.keys_q0, c.run(r + "/layer_0", "keys_q")), bound);
  EXPECT_LT(finite(f.trace.keys_k0, c.run(r + "/layer_0", "keys_k")), bound);
  EXPECT_LT(relative_error(f.trace.attn_out0, c.run(r + "/layer_0", "attn_out")), bound);
  EXPECT_LT(relative_error(f.out, c.run(r, "output")), bound);
}

TEST(HeptGolden, SrcLayoutFloat64Stable) { check_src<double>("src_small", "f64_stable", 1e-12); }
TEST(HeptGolden, SrcLayoutFloat32Stable) { check_src<float>("src_small", "f32_stable", 2e-5); }
TEST(HeptGolden, SrcPileupFloat64Stable) { check_src<double>("src_pileup", "f64_stable", 1e-12); }
TEST(HeptGolden, SrcPileupFloat32Stable) { check_src<float>("src_pileup", "f32_stable", 2e-5); }

// Threads change nothing: every value is computed by one thread in a fixed order.
TEST(HeptGolden, ThreadCountIndependent) {
  const Golden c("example_small");
  const hept::Network<float> net(c.file, c.cfg);
  const Forward<float> one(c, net, 1), three(c, net, 3);
  expect_equal(one.out, three.out, "1 vs 3 threads");
}

// Kept work arrays (ForwardWork, as the registered model's plan keeps them) hold the last forward's values;
// a forward must read none of them before writing it. Every kept value poisoned (NaN; permutations 0),
// one ForwardWork taken through larger and smaller events of both layouts (the src ones with zero pads)
// gives each forward the bits of a forward with fresh arrays. Fails if the first table's bucket sums are
// added to the kept ones instead of stored.
template <class T>
void poison(hept::ForwardWork<T>& w) {
  for (typename hept::ForwardWork<T>::template Array<T>* array : {&w.xp, &w.cp, &w.cat, &w.xn, &w.qh, &w.kh, &w.vh, &w.pq, &w.pk, &w.num,
                                &w.tiles, &w.y, &w.tnum, &w.tden, &w.eh, &w.res, &w.final_out})
    std::fill(array->begin(), array->end(), std::numeric_limits<T>::quiet_NaN());
  std::fill(w.perm_q.begin(), w.perm_q.end(), 0);
  std::fill(w.perm_k.begin(), w.perm_k.end(), 0);
}

template <class T>
void check_kept_work() {
  hept::ForwardWork<T> work;
  for (const char* name : {"checkpoint_tracking", "example_small", "src_pileup", "src_small", "example_small"}) {
    const Golden c(name);
    const hept::Network<T> net(c.file, c.cfg);
    const hept::Geometry g = c.geometry<T>(net.regions());
    const auto size = static_cast<std::size_t>(g.points() * c.cfg.out_dim());
    std::vector<T> fresh(size), kept(size);
    net.forward(g, c.x.data(), c.coords.data(), fresh.data(), nullptr, nullptr, 2);
    poison(work);
    net.forward(g, c.x.data(), c.coords.data(), kept.data(), nullptr, nullptr, 2, nullptr, &work);
    expect_equal(kept, fresh, std::string(name) + ": kept work arrays");
    EXPECT_GT(work.bytes(), size * sizeof(T)) << name;
  }
}

TEST(HeptGolden, KeptWorkArraysGiveTheFreshForwardsBitsFloat32) { check_kept_work<float>(); }
TEST(HeptGolden, KeptWorkArraysGiveTheFreshForwardsBitsFloat64) { check_kept_work<double>(); }


// A network built on another arithmetic's network shares its weights (the registered model holds them
// once for fp32 and fp64) and gives the bits of the network read from the file: its RBF scales are
// computed in its own arithmetic from w_rpe.weight, the float weights widen exactly. Both layouts, the
// pileup task (particle embedding, out_proj), both directions.
template <class T, class U>
void check_shared_weights(const char* name) {
  const Golden c(name);
  const hept::Network<U> other(c.file, c.cfg);
  const hept::Network<T> shared(other), own(c.file, c.cfg);
  EXPECT_TRUE(shared.shares_weights_with(other)) << name;
  EXPECT_FALSE(own.shares_weights_with(other)) << name;
  for (int l = 0; l < c.cfg.n_layers; ++l)
    expect_equal(shared.rbf_scale(l), own.rbf_scale(l),
                 std::string(name) + ": rbf_scale of layer " + std::to_string(l));
  const hept::Geometry g = c.geometry<T>(shared.regions());
  const auto size = static_cast<std::size_t>(g.points() * c.cfg.out_dim());
  std::vector<T> a(size), b(size);
  shared.forward(g, c.x.data(), c.coords.data(), a.data(), nullptr, nullptr, 2);
  own.forward(g, c.x.data(), c.coords.data(), b.data(), nullptr, nullptr, 2);
  expect_equal(a, b, std::string(name) + ": shared weights");
}

TEST(HeptGolden, Float64NetworkOnFloat32WeightsGivesTheFileNetworksBits) {
  for (const char* name : {"example_small", "checkpoint_tracking", "src_pileup"})
    check_shared_weights<double, float>(name);
}
TEST(HeptGolden, Float32NetworkOnFloat64WeightsGivesTheFileNetworksBits) {
  for (const char* name : {"example_small", "src_pileup"}) check_shared_weights<float, double>(name);
}
// The bucket formula evaluated naively in long double for query i: den = sum_j a_ij (without the 1e-20)
// and num[e] = sum_j a_ij v_je, a_ij = exp(-|q_i - k_j|^2 / 2) (= exp(q.k - |q|^2/2 - |k|^2/2), at most 1).
template <class T>
void naive_bucket(const std::vector<T>& q, const std::vector<T>& k, const std::vector<T>& v,
                  const std::vector<std::int64_t>& qrow, const std::vector<std::int64_t>& krow, int i, int dh, int dv,
                  long double& den, std::vector<long double>& num) {
  den = 0;
  num.assign(static_cast<std::size_t>(dv), 0.0L);
  const auto qi = static_cast<std::size_t>(qrow[static_cast<std::size_t>(i)]);
  for (std::size_t j = 0; j < krow.size(); ++j) {
    const auto kj = static_cast<std::size_t>(krow[j]);
    long double dist = 0;
    for (std::size_t t = 0; t < static_cast<std::size_t>(dh); ++t) {
      const long double diff = static_cast<long double>(q[qi * static_cast<std::size_t>(dh) + t]) -
                               static_cast<long double>(k[kj * static_cast<std::size_t>(dh) + t]);
      dist += diff * diff;
    }
    const long double a = std::exp(-0.5L * dist);
    den += a;
    for (std::size_t e = 0; e < static_cast<std::size_t>(dv); ++e)
      num[e] += a * static_cast<long double>(v[kj * static_cast<std::size_t>(dv) + e]);
  }
}

// The bucket kernel against the formula evaluated naively in long double.
TEST(HeptKernel, GaussianBucketAttentionMatchesNaive) {
  const int m = 7, dh = 5, dv = 3;
  std::vector<double> q(20 * dh), k(20 * dh), v(20 * dv);
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.7 * static_cast<double>(i)) * 1.3;
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.3 * static_cast<double>(i) + 1.0);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(1.1 * static_cast<double>(i) + 0.5);
  const std::vector<std::int64_t> qrow = {3, 0, 19, 7, 7, 12, 5}, krow = {1, 18, 4, 4, 9, 0, 13};
  std::vector<double> num(m * dv), den(m),
      scratch(static_cast<std::size_t>(surrogate::kernels::gaussian_bucket_scratch(m, dh, dv)));
  surrogate::kernels::gaussian_bucket_attention<double>(q.data(), dh, qrow.data(), k.data(), dh, krow.data(), v.data(),
                                                        dv, m, dh, dv, num.data(), den.data(), scratch.data());
  for (int i = 0; i < m; ++i) {
    long double d = 0;
    std::vector<long double> n;
    naive_bucket(q, k, v, qrow, krow, i, dh, dv, d, n);
    // Sums of 7 terms of magnitude <= 1 after a cancellation of terms <= ~10: 1e-14 bounds the rounding.
    EXPECT_NEAR(den[static_cast<std::size_t>(i)], static_cast<double>(d + 1e-20L), 1e-14);
    for (int e = 0; e < dv; ++e)
      EXPECT_NEAR(num[static_cast<std::size_t>(i * dv + e)], static_cast<double>(n[static_cast<std::size_t>(e)]), 1e-14);
  }
}

// The float32 CPU kernel of every instruction set this CPU runs against the same naive long double
// formula, with bucket sizes and widths that are not multiples of any vector width (every count of key
// vectors left after the kernel's blocks of 2 or 4, groups of fewer than 4 queries). Bound: a logit sums
// dh + 2 float32 terms of magnitude <= |q|^2 + |k|^2 (<= 2 here), so it is off by <= 4 (dh + 2) 2^-24 * 2;
// exp adds 2 ulps; a weight is then off by <= 1e-5 relative, and a sum of m <= 1-bounded weights (times
// |v| <= 1) by m * 1e-5 plus its own rounding m * 2^-24.
TEST(HeptKernel, Float32BucketKernelOfEveryIsaMatchesNaive) {
  namespace k = surrogate::kernels;
  for (const k::Isa isa : {k::Isa::generic, k::Isa::avx2, k::Isa::avx512}) {
    const k::CpuKernels* table = k::cpu(isa);
    if (!table) continue;
    for (const auto [m, dh, dv] : {std::array{37, 30, 24}, std::array{5, 7, 3}, std::array{90, 30, 24}, std::array{100, 30, 24}}) {
      const int rows = m + 11;
      std::vector<float> q(static_cast<std::size_t>(rows * dh)), kk(q.size()), v(static_cast<std::size_t>(rows * dv));
      for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.25f * static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
      for (std::size_t i = 0; i < kk.size(); ++i) kk[i] = 0.25f * static_cast<float>(std::cos(0.3 * static_cast<double>(i) + 1.0));
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(1.1 * static_cast<double>(i) + 0.5));
      std::vector<std::int64_t> qrow(static_cast<std::size_t>(m)), krow(qrow.size());
      for (int i = 0; i < m; ++i) {
        qrow[static_cast<std::size_t>(i)] = (7 * i + 3) % rows;
        krow[static_cast<std::size_t>(i)] = (5 * i + 1) % rows;
      }
      std::vector<float> num(static_cast<std::size_t>(m * dv), -1.0f), den(static_cast<std::size_t>(m), -1.0f),
          scratch(static_cast<std::size_t>(k::gaussian_bucket_scratch(m, dh, dv)));
      table->gaussian_bucket({q.data(), dh, qrow.data(), kk.data(), dh, krow.data(), v.data(), dv, m, dh, dv, num.data(),
                              den.data(), scratch.data()});
      const double bound = m * (1e-5 + std::ldexp(1.0, -24));
      for (int i = 0; i < m; ++i) {
        long double d = 0;
        std::vector<long double> n;
        naive_bucket(q, kk, v, qrow, krow, i, dh, dv, d, n);
        EXPECT_NEAR(den[static_cast<std::size_t>(i)], static_cast<double>(d), bound) << k::to_string(isa) << " m " << m << " i " << i;
        for (int e = 0; e < dv; ++e)
          EXPECT_NEAR(num[static_cast<std::size_t>(i * dv + e)], static_cast<double>(n[static_cast<std::size_t>(e)]), bound)
              << k::to_string(isa) << " m " << m << " i " << i << " e " << e;
      }
    }
  }
}

// Distant pairs, whose logits fall below exp's range (-87), weigh exactly 0 and pairs within it keep their
// weights, in vectors that mix both (the float32 kernels take such exponentials without a branch): every
// instruction set gives a bucket of near and far keys the bits of the bucket of its near keys alone (a
// key of weight 0 adds exactly nothing to a sum), with near weights from e^-2.4 down to e^-84 and, where
// any far weight above 1e-37 would show, from e^-80 to e^-86. A query with a NaN gives NaN.
TEST(HeptKernel, Float32BucketWeightsBelowExpsRangeAreZero) {
  namespace k = surrogate::kernels;
  constexpr int m = 40, dh = 30, dv = 24;
  std::vector<float> q(static_cast<std::size_t>(m * dh)), kk(q.size()), v(static_cast<std::size_t>(m * dv));
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.25f * static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(1.1 * static_cast<double>(i) + 0.5));
  q[static_cast<std::size_t>(dh + 4)] = std::numeric_limits<float>::quiet_NaN();  // query 1
  std::vector<std::int64_t> queries(static_cast<std::size_t>(m));
  for (int i = 0; i < m; ++i) queries[static_cast<std::size_t>(i)] = i;
  for (const auto [lo, hi] : {std::array{2.4, 84.0}, std::array{80.0, 86.0}}) {
    // Key j: query 0 moved by s_j along t = j % dh, half the squared move its -logit against query 0, in
    // [lo, hi] for the near keys (j % 3 != 0) and [88, 400] for the far ones.
    std::vector<std::int64_t> all(m), near;
    for (int j = 0; j < m; ++j) {
      all[static_cast<std::size_t>(j)] = j;
      if (j % 3 != 0) near.push_back(j);
    }
    for (int j = 0, n = 0; j < m; ++j) {
      const double logit = j % 3 == 0 ? 88.0 + 8.0 * j : lo + (hi - lo) * n++ / static_cast<double>(near.size() - 1);
      for (int t = 0; t < dh; ++t) kk[static_cast<std::size_t>(j * dh + t)] = q[static_cast<std::size_t>(t)];
      kk[static_cast<std::size_t>(j * dh + j % dh)] += static_cast<float>(std::sqrt(2.0 * logit));
    }
    const int mn = static_cast<int>(near.size());
    for (const k::Isa isa : {k::Isa::generic, k::Isa::avx2, k::Isa::avx512}) {
      const k::CpuKernels* table = k::cpu(isa);
      if (!table) continue;
      std::vector<float> num(static_cast<std::size_t>(m * dv)), den(m), num_near(static_cast<std::size_t>(mn * dv)),
          den_near(static_cast<std::size_t>(mn)),
          scratch(static_cast<std::size_t>(k::gaussian_bucket_scratch(m, dh, dv)));
      table->gaussian_bucket({q.data(), dh, queries.data(), kk.data(), dh, all.data(), v.data(), dv, m, dh, dv,
                              num.data(), den.data(), scratch.data()});
      table->gaussian_bucket({q.data(), dh, queries.data(), kk.data(), dh, near.data(), v.data(), dv, mn, dh, dv,
                              num_near.data(), den_near.data(), scratch.data()});
      const std::string where = std::string(k::to_string(isa)) + ", near logits down to -" + std::to_string(hi);
      EXPECT_EQ(std::memcmp(den.data(), den_near.data(), sizeof(float)), 0) << where << ": " << den[0] << " vs " << den_near[0];
      EXPECT_EQ(std::memcmp(num.data(), num_near.data(), sizeof(float) * dv), 0) << where;
      float largest = 0;  // the nearest key's weight times values up to about 1 is in the numerators
      for (int e = 0; e < dv; ++e) largest = std::max(largest, std::abs(num[static_cast<std::size_t>(e)]));
      EXPECT_GT(largest, 0.1 * std::exp(-lo - 0.1)) << where;
      EXPECT_TRUE(std::isnan(den[1])) << where;
      for (int e = 0; e < dv; ++e) EXPECT_TRUE(std::isnan(num[static_cast<std::size_t>(dv + e)])) << where;
    }
  }
}

// The ranges a caller names for its next call (GaussianBucketArgsOf::next) are only asked of the caches:
// with them, partly empty or null, every instruction set gives the bits it gives without them.
TEST(HeptKernel, NextCallHintsLeaveTheBitsAlone) {
  namespace k = surrogate::kernels;
  constexpr int m = 100, dh = 30, dv = 24, rows = 2 * m;
  std::vector<float> q(static_cast<std::size_t>(rows * dh)), kk(q.size()), v(static_cast<std::size_t>(rows * dv));
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = 0.25f * static_cast<float>(std::sin(0.7 * static_cast<double>(i)));
  for (std::size_t i = 0; i < kk.size(); ++i) kk[i] = 0.25f * static_cast<float>(std::cos(0.3 * static_cast<double>(i)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(1.1 * static_cast<double>(i) + 0.5));
  std::vector<std::int64_t> row(m);
  for (int i = 0; i < m; ++i) row[static_cast<std::size_t>(i)] = (3 * i + 1) % m;
  for (const k::Isa isa : {k::Isa::generic, k::Isa::avx2, k::Isa::avx512}) {
    const k::CpuKernels* table = k::cpu(isa);
    if (!table) continue;
    std::vector<float> scratch(static_cast<std::size_t>(k::gaussian_bucket_scratch(m, dh, dv)));
    std::vector<float> num0(static_cast<std::size_t>(m * dv)), den0(m), num1(num0.size()), den1(den0.size());
    k::GaussianBucketArgs a{q.data(), dh, row.data(), kk.data(), dh, row.data(), v.data(), dv, m, dh, dv,
                            num0.data(), den0.data(), scratch.data()};
    table->gaussian_bucket(a);
    a.num = num1.data();
    a.den = den1.data();
    a.next[0] = q.data() + m * dh;  // the second half of the rows, a range of no bytes and none
    a.next[1] = kk.data() + m * dh;
    a.next[2] = nullptr;
    a.next_bytes[0] = sizeof(float) * m * dh;
    a.next_bytes[1] = 0;
    a.next_bytes[2] = 64;
    table->gaussian_bucket(a);
    EXPECT_EQ(std::memcmp(num0.data(), num1.data(), sizeof(float) * num0.size()), 0) << k::to_string(isa);
    EXPECT_EQ(std::memcmp(den0.data(), den1.data(), sizeof(float) * den0.size()), 0) << k::to_string(isa);
  }
}

}  // namespace

namespace {

// The float64 CPU kernel of every instruction set this CPU runs against the template in float64, on rows
// of scales 0.25 ... 2.25 and one of 40, so that weights range from 1 down to subnormals and 0 (the exp's
// clamp). Bound, per query i: both compute logit_ij = (<q_i, k_j> + qsq_i) + ksq_j summing dh + 2 terms in the
// same order (the kernel with fused multiply-adds), so each is within (dh + 2) u M_ij of the exact value,
// M_ij = sum_t |q_it k_jt| + |qsq_i| + |ksq_j|; their weights then differ by 2 (dh + 2) u M_ij relative, plus 3 u
// for the two exps (simd_double.hpp: 2 u; std::exp: 1 u). The sums over m keys (each product rounded)
// add 2 (m + 1) u of sum_j a_ij |v_j|; weights below the normal range add m 2^-1074 absolute.
TEST(HeptKernel, Float64BucketKernelOfEveryIsaMatchesTemplate) {
  namespace k = surrogate::kernels;
  constexpr long double u = 0x1p-53L;
  for (const k::Isa isa : {k::Isa::generic, k::Isa::avx2, k::Isa::avx512}) {
    const k::CpuKernels* table = k::cpu(isa);
    if (!table) continue;
    for (const auto [m, dh, dv] : {std::array{37, 30, 24}, std::array{5, 7, 3}, std::array{90, 30, 24}, std::array{100, 30, 24}}) {
      const int rows = m + 11;
      std::vector<double> q(static_cast<std::size_t>(rows * dh)), kk(q.size()), v(static_cast<std::size_t>(rows * dv));
      auto scale = [dh](std::size_t i) {
        const std::size_t r = i / static_cast<std::size_t>(dh);
        return r == 3 ? 40.0 : 0.25 * static_cast<double>(1 + r % 9);
      };
      for (std::size_t i = 0; i < q.size(); ++i) q[i] = scale(i) * std::sin(0.7 * static_cast<double>(i));
      for (std::size_t i = 0; i < kk.size(); ++i)
        kk[i] = scale(i + 5 * static_cast<std::size_t>(dh)) * std::cos(0.3 * static_cast<double>(i) + 1.0);
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::sin(1.1 * static_cast<double>(i) + 0.5);
      std::vector<std::int64_t> qrow(static_cast<std::size_t>(m)), krow(qrow.size());
      for (int i = 0; i < m; ++i) {
        qrow[static_cast<std::size_t>(i)] = (7 * i + 3) % rows;
        krow[static_cast<std::size_t>(i)] = (5 * i + 1) % rows;
      }
      const auto scratch_size = static_cast<std::size_t>(k::gaussian_bucket_scratch(m, dh, dv));
      std::vector<double> num(static_cast<std::size_t>(m * dv), -1.0), den(static_cast<std::size_t>(m), -1.0),
          ref_num(num.size()), ref_den(den.size()), scratch(scratch_size), ref_scratch(scratch_size);
      table->gaussian_bucket_f64({q.data(), dh, qrow.data(), kk.data(), dh, krow.data(), v.data(), dv, m, dh, dv,
                                  num.data(), den.data(), scratch.data()});
      k::gaussian_bucket_attention<double>(q.data(), dh, qrow.data(), kk.data(), dh, krow.data(), v.data(), dv, m, dh,
                                           dv, ref_num.data(), ref_den.data(), ref_scratch.data());
      int zeros = 0;
      for (int i = 0; i < m; ++i) {
        const double* qi = q.data() + qrow[static_cast<std::size_t>(i)] * dh;
        long double qsq = 0, den_tol = 0;
        for (int t = 0; t < dh; ++t) qsq += 0.5L * qi[t] * qi[t];
        std::vector<long double> num_tol(static_cast<std::size_t>(dv));
        for (int j = 0; j < m; ++j) {
          const double* kj = kk.data() + krow[static_cast<std::size_t>(j)] * dh;
          const double* vj = v.data() + krow[static_cast<std::size_t>(j)] * dv;
          long double dot = 0, mag = 0, ksq = 0;
          for (int t = 0; t < dh; ++t) {
            dot += static_cast<long double>(qi[t]) * kj[t];
            mag += std::fabs(static_cast<long double>(qi[t]) * kj[t]);
            ksq += 0.5L * kj[t] * kj[t];
          }
          const long double a = std::exp(std::min(0.0L, dot - qsq - ksq));
          zeros += a < 0x1p-1074L;
          const long double rel = 2 * (dh + 2) * u * (mag + qsq + ksq) + 3 * u + 2 * (m + 1) * u;
          den_tol += a * rel + 0x1p-1074L;
          for (int e = 0; e < dv; ++e) num_tol[static_cast<std::size_t>(e)] += a * std::fabs(vj[e]) * rel + 0x1p-1074L;
        }
        EXPECT_NEAR(den[static_cast<std::size_t>(i)], ref_den[static_cast<std::size_t>(i)], static_cast<double>(den_tol))
            << k::to_string(isa) << " m " << m << " i " << i;
        for (int e = 0; e < dv; ++e)
          EXPECT_NEAR(num[static_cast<std::size_t>(i * dv + e)], ref_num[static_cast<std::size_t>(i * dv + e)],
                      static_cast<double>(num_tol[static_cast<std::size_t>(e)]))
              << k::to_string(isa) << " m " << m << " i " << i << " e " << e;
      }
      if (m == 100) {
        EXPECT_GT(zeros, 0);  // the clamp is exercised
      }
    }
  }
}

}  // namespace
