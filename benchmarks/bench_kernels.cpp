// Google Benchmark of the CPU kernels on one thread, at the shapes of the FLARE model (C = 64, E = 8),
// of the ball attention, of HEPT's bucket attention and of Sequoia's tree attention.
//   build/benchmarks/bench_kernels [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <cmath>
#include <random>
#include <vector>

#include "machine_limits.hpp"
#include "surrogate/kernels/bucket_attention.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/kernels/tree_attention.hpp"

namespace k = surrogate::kernels;

namespace {
std::vector<float> random_values(std::size_t n, float scale, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

/// A width x width layer (state.range(0)) with activation state.range(1) and a residual over `rows` rows,
/// run by `kern`; FLOP/s count its FP32-equivalent arithmetic.
void run_linear(benchmark::State& state, const k::CpuKernels& kern, k::index_t rows) {
  const int width = static_cast<int>(state.range(0));
  const k::index_t ld = k::round_up(width, k::kPad);
  const auto w = random_values(static_cast<std::size_t>(width) * width, 0.1f, 1);
  const auto b = random_values(static_cast<std::size_t>(width), 0.1f, 2);
  const k::PackedLinear layer(w.data(), b.data(), width, width);
  auto x = random_values(static_cast<std::size_t>(rows * ld), 1.0f, 3);
  std::vector<float> y(x.size());
  k::LinearArgs a;
  a.layer = &layer;
  a.x = x.data();
  a.ldx = ld;
  a.y = y.data();
  a.ldy = ld;
  a.rows = rows;
  a.act = static_cast<k::Activation>(state.range(1));
  a.add1 = x.data();
  a.ld_add1 = ld;
  for (auto _ : state) {
    kern.linear(a);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * rows * width * width, benchmark::Counter::kIsIterationInvariantRate);
}

void BM_linear(benchmark::State& state) { run_linear(state, k::cpu(), 256); }
BENCHMARK(BM_linear)->Args({64, 0})->Args({64, 1})->Args({64, 3})->Args({128, 1})->Args({256, 1});

/// The same layer with BF16 operands (Precision::bf16): the engine cpu_bf16() picks (AMX, else AVX512-BF16;
/// SURROGATE_CPU_BF16 chooses), 240 rows per call as the FLARE forward passes them to the AMX engine.
void BM_linear_bf16(benchmark::State& state) {
  if (*k::bf16_unavailable_reason()) {
    state.SkipWithError(k::bf16_unavailable_reason());
    return;
  }
  run_linear(state, k::cpu_bf16(), 240);
}
BENCHMARK(BM_linear_bf16)->Args({64, 0})->Args({64, 1})->Args({128, 1});

/// An encode of M latents (q: M x E) against `rows` points whose keys and values share rows of width C
/// (keys in columns 0..E-1, values from column E), into the streaming state ref/sum/weighted.
k::LatentEncodeArgs encode_args(const std::vector<float>& q, int M, int E, const std::vector<float>& kv, int C,
                                k::index_t rows, std::vector<std::int32_t>& ref, std::vector<double>& sum,
                                std::vector<double>& weighted) {
  k::LatentEncodeArgs a;
  a.q = q.data();
  a.M = M;
  a.E = E;
  a.k = kv.data();
  a.ldk = C;
  a.v = kv.data() + E;
  a.ldv = C;
  a.rows = rows;
  a.ref_exp = ref.data();
  a.sum = sum.data();
  a.weighted = weighted.data();
  return a;
}

void BM_latent(benchmark::State& state) {
  const int M = static_cast<int>(state.range(0));
  const bool decode = state.range(1) == 1;  // 0: the encode (double sums), 1: the decode
  const int E = 8, C = 64;
  const k::index_t rows = 256;
  const auto q = random_values(static_cast<std::size_t>(M) * E, 0.7f, 4);
  const auto z = random_values(static_cast<std::size_t>(M) * E, 1.0f, 5);
  const auto kv = random_values(static_cast<std::size_t>(rows) * C, 1.0f, 6);
  std::vector<float> y(static_cast<std::size_t>(rows) * C);
  std::vector<std::int32_t> ref(static_cast<std::size_t>(M), k::kNoExponent);
  std::vector<double> sum(static_cast<std::size_t>(M)), weighted(static_cast<std::size_t>(M) * E);
  const auto& kern = k::cpu();
  for (auto _ : state) {
    if (decode) {
      k::LatentDecodeArgs a;
      a.q = q.data();
      a.z = z.data();
      a.M = M;
      a.E = E;
      a.k = kv.data();
      a.ldk = C;
      a.y = y.data();
      a.ldy = C;
      a.rows = rows;
      kern.latent_decode(a);
    } else {
      kern.latent_encode(encode_args(q, M, E, kv, C, rows, ref, sum, weighted));
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(weighted.data());
  }
  // 4 M E flops per point (logits + weighted sum), M exponentials per point.
  state.counters["FLOP/s"] = benchmark::Counter(4.0 * M * E * rows, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["exp/s"] = benchmark::Counter(1.0 * M * rows, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_latent)->Args({64, 0})->Args({64, 1})->Args({256, 0})->Args({256, 1});

// BSA's coarse branch: 64 block queries against 2048 compressed keys, the top 4 of each chosen from the
// same logits (LatentEncodeArgs::select_S; the own ball's 8 keys masked). Arg: 1 = select, 0 = plain encode.
void BM_select_encode(benchmark::State& state) {
  const bool select = state.range(0) != 0;
  const int M = 64, E = 8, C = 16, S = 4;
  const k::index_t rows = 2048;
  const auto q = random_values(static_cast<std::size_t>(M) * E, 0.7f, 7);
  const auto kv = random_values(static_cast<std::size_t>(rows) * C, 1.0f, 8);
  std::vector<std::int32_t> ref(static_cast<std::size_t>(M)), sel(static_cast<std::size_t>(M) * S);
  std::vector<double> sum(static_cast<std::size_t>(M)), weighted(static_cast<std::size_t>(M) * E);
  std::vector<k::index_t> mask_begin(static_cast<std::size_t>(M)), mask_end(mask_begin.size());
  for (int m = 0; m < M; ++m) {
    mask_begin[static_cast<std::size_t>(m)] = 8 * m;
    mask_end[static_cast<std::size_t>(m)] = 8 * m + 8;
  }
  const auto& kern = k::cpu();
  for (auto _ : state) {
    std::fill(ref.begin(), ref.end(), k::kNoExponent);
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(weighted.begin(), weighted.end(), 0.0);
    k::LatentEncodeArgs a = encode_args(q, M, E, kv, C, rows, ref, sum, weighted);
    if (select) {
      a.logit_scale = 0.35f;
      a.select_S = S;
      a.mask_begin = mask_begin.data();
      a.mask_end = mask_end.data();
      a.sel = sel.data();
    }
    kern.latent_encode(a);
    benchmark::DoNotOptimize(weighted.data());
    benchmark::DoNotOptimize(sel.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(4.0 * M * E * rows, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_select_encode)->Arg(0)->Arg(1);

/// The ball attention (Erwin's BMSA, BSA's local branch) on one ball of 256 points, 64 channels in heads of
/// width state.range(0), with the distance bias; FLOP/s count the logits' and weighted values' multiply-adds
/// (4 m^2 E per head), exp/s the softmax terms.
void BM_ball_attention(benchmark::State& state) {
  const int m = 256, E = static_cast<int>(state.range(0)), heads = 64 / E;
  const k::index_t ld = 3 * 64;
  const auto u = random_values(static_cast<std::size_t>(m * ld), 1.0f, 30);
  const auto pos = random_values(static_cast<std::size_t>(m * 3), 1.0f, 31);
  std::vector<float> dist(static_cast<std::size_t>(m * m)), sigma(static_cast<std::size_t>(heads), -0.5f);
  std::vector<float> out(static_cast<std::size_t>(m * 64));
  const auto& kern = k::cpu();
  k::BallDistanceArgs d;
  d.pos = pos.data();
  d.m = m;
  d.dim = 3;
  d.dist = dist.data();
  d.ld_dist = m;
  kern.ball_distances(d);
  k::BallAttentionArgs a;
  a.m = m;
  a.heads = heads;
  a.E = E;
  a.q = u.data();
  a.k = u.data() + 64;
  a.v = u.data() + 128;
  a.ld = ld;
  a.scale = 1.0f / std::sqrt(static_cast<float>(E));
  a.sigma = sigma.data();
  a.bias = dist.data();
  a.ld_bias = m;
  a.out = out.data();
  a.ldo = 64;
  for (auto _ : state) {
    kern.ball_attention(a);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(4.0 * m * m * 64, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["exp/s"] = benchmark::Counter(double(m) * m * heads, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_ball_attention)->Arg(8)->Arg(16)->Arg(32);

void BM_activation(benchmark::State& state) {
  const auto act = static_cast<k::Activation>(state.range(0));
  const auto x = random_values(16384, 2.0f, 8);
  std::vector<float> y(x.size());
  const auto& kern = k::cpu();
  for (auto _ : state) {
    kern.activation(act, x.data(), y.data(), static_cast<k::index_t>(x.size()));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["values/s"] = benchmark::Counter(double(x.size()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_activation)->Arg(1)->Arg(2);

void BM_exp(benchmark::State& state) {  // Arg 0: the general exp; 1: the softmax's
  const auto x = random_values(16384, 5.0f, 9);
  std::vector<float> y(x.size());
  const auto& kern = k::cpu();
  const auto map = state.range(0) == 0 ? kern.exp : kern.softmax_exp;
  for (auto _ : state) {
    map(x.data(), y.data(), static_cast<k::index_t>(x.size()));
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["values/s"] = benchmark::Counter(double(x.size()), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_exp)->Arg(0)->Arg(1);

/// HEPT's bucket attention (CpuKernels::gaussian_bucket, _f64) at the shipped checkpoint's shape: buckets
/// of 100 queries and keys, hash width 30, 24 values; Arg 0: float32, 1: float64, 2: float32 with the
/// rows spread (standard deviation 1.7 instead of 0.3) so that about half the pairs fall below exp's range
/// (logits under -87), as a real event's distant pairs do. FLOP/s count the logits' and numerators'
/// multiply-adds (2 m^2 (dh + dv + 1)), not the exponentials.
template <class T>
void run_bucket(benchmark::State& state, float spread) {
  constexpr int m = 100, dh = 30, dv = 24;
  const auto q = random_values(static_cast<std::size_t>(m * dh), spread, 10), kv = random_values(q.size(), spread, 11);
  const auto v = random_values(static_cast<std::size_t>(m * dv), 1.0f, 12);
  const std::vector<T> qt(q.begin(), q.end()), kt(kv.begin(), kv.end()), vt(v.begin(), v.end());
  std::vector<std::int64_t> rows(m);
  for (int i = 0; i < m; ++i) rows[static_cast<std::size_t>(i)] = (i * 37) % m;  // gathered out of order
  std::vector<T> num(static_cast<std::size_t>(m * dv)), den(m),
      scratch(static_cast<std::size_t>(k::gaussian_bucket_scratch(m, dh, dv)));
  const k::GaussianBucketArgsOf<T> a{qt.data(), dh, rows.data(), kt.data(), dh, rows.data(), vt.data(), dv,
                                     m, dh, dv, num.data(), den.data(), scratch.data()};
  const auto& kern = k::cpu();
  for (auto _ : state) {
    if constexpr (sizeof(T) == sizeof(float)) kern.gaussian_bucket(a);
    else kern.gaussian_bucket_f64(a);
    benchmark::DoNotOptimize(num.data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * m * m * (dh + dv + 1), benchmark::Counter::kIsIterationInvariantRate);
}
void BM_bucket(benchmark::State& state) {
  if (state.range(0) == 0) run_bucket<float>(state, 0.3f);
  else if (state.range(0) == 1) run_bucket<double>(state, 0.3f);
  else run_bucket<float>(state, 1.7f);
}
BENCHMARK(BM_bucket)->Arg(0)->Arg(1)->Arg(2);

/// The same float32 buckets streamed one after another from arrays larger than the caches (2,400 buckets,
/// 80 MB of rows, as HEPT's ranks hold them when graphs are split by buckets); Arg 0: no hint, 1: each call
/// names the next bucket's rows in GaussianBucketArgsOf::next. Buckets/s and FLOP/s; compare with
/// BM_bucket/0, whose rows stay in cache.
void BM_bucket_stream(benchmark::State& state) {
  constexpr int m = 100, dh = 30, dv = 24;
  constexpr k::index_t buckets = 2400, slots = buckets * m;
  const auto q = random_values(static_cast<std::size_t>(slots * dh), 0.3f, 13), kv = random_values(q.size(), 0.3f, 14);
  const auto v = random_values(static_cast<std::size_t>(slots * dv), 1.0f, 15);
  std::vector<std::int64_t> rows(m);
  for (int i = 0; i < m; ++i) rows[static_cast<std::size_t>(i)] = i;
  std::vector<float> num(static_cast<std::size_t>(slots * dv)), den(static_cast<std::size_t>(slots)),
      scratch(static_cast<std::size_t>(k::gaussian_bucket_scratch(m, dh, dv)));
  const auto& kern = k::cpu();
  for (auto _ : state) {
    for (k::index_t s = 0; s < slots; s += m) {
      k::GaussianBucketArgs a{q.data() + s * dh, dh, rows.data(), kv.data() + s * dh, dh, rows.data(),
                              v.data() + s * dv, dv, m, dh, dv, num.data() + s * dv, den.data() + s, scratch.data()};
      if (state.range(0) == 1 && s + m < slots) {
        a.next[0] = q.data() + (s + m) * dh;
        a.next[1] = kv.data() + (s + m) * dh;
        a.next[2] = v.data() + (s + m) * dv;
        a.next_bytes[0] = a.next_bytes[1] = sizeof(float) * m * dh;
        a.next_bytes[2] = sizeof(float) * m * dv;
      }
      kern.gaussian_bucket(a);
    }
    benchmark::DoNotOptimize(num.data());
  }
  state.counters["buckets/s"] = benchmark::Counter(double(buckets), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOP/s"] = benchmark::Counter(2.0 * m * m * (dh + dv + 1) * double(buckets),
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_bucket_stream)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

/// Sequoia's tree attention (CpuKernels::tree_attention) at the official configuration's level 0 (Arg:
/// the width, 4 heads) over 1,024 queries of 16 keys each (the sibling lists) drawn from 8,192 key rows.
/// FLOP/s count as bench_counts::sequoia does per edge: logits and weighted values 4 D, the positional MLP
/// 2 (9 + 3 D / H); edges/s as well.
void BM_tree_attention(benchmark::State& state) {
  constexpr int heads = 4, keys_per_query = 16;
  constexpr k::index_t queries = 1024, key_rows = 8192;
  const int d = static_cast<int>(state.range(0)), e = d / heads;
  const auto q = random_values(static_cast<std::size_t>(queries * d), 1.0f, 20);
  const auto kv = random_values(static_cast<std::size_t>(key_rows * d), 1.0f, 21);
  const auto v = random_values(kv.size(), 1.0f, 22);
  const auto pq = random_values(static_cast<std::size_t>(queries * 3), 1.0f, 23);
  const auto pk = random_values(static_cast<std::size_t>(key_rows * 3), 1.0f, 24);
  const auto w1 = random_values(9, 0.5f, 25), b1 = random_values(3, 0.1f, 26), scale = random_values(3, 1.0f, 27),
             shift = random_values(3, 0.1f, 28), w3f = random_values(static_cast<std::size_t>(3 * e), 0.5f, 29),
             b3f = random_values(static_cast<std::size_t>(e), 0.1f, 30);
  const std::vector<double> w3(w3f.begin(), w3f.end()), b3(b3f.begin(), b3f.end());
  std::vector<std::int64_t> first(static_cast<std::size_t>(queries) + 1), keys(static_cast<std::size_t>(queries * keys_per_query));
  std::mt19937 gen(31);
  std::uniform_int_distribution<std::int64_t> pick(0, key_rows - 1);
  for (std::size_t i = 0; i < first.size(); ++i) first[i] = static_cast<std::int64_t>(i) * keys_per_query;
  for (auto& key : keys) key = pick(gen);
  std::vector<float> out(static_cast<std::size_t>(queries * d));
  std::vector<double> scratch(static_cast<std::size_t>(k::tree_attention_scratch(heads, e, keys_per_query)));
  k::TreeAttentionArgs a;
  a.queries = queries;
  a.heads = heads;
  a.e = e;
  a.q = q.data();
  a.ldq = d;
  a.k = kv.data();
  a.v = v.data();
  a.ldkv = d;
  a.query_positions = pq.data();
  a.key_positions = pk.data();
  a.first = first.data();
  a.keys = keys.data();
  a.pe_w1 = w1.data();
  a.pe_b1 = b1.data();
  a.bn_scale = scale.data();
  a.bn_shift = shift.data();
  a.pe_w3 = w3.data();
  a.pe_b3 = b3.data();
  a.tau = 11.3f;
  a.out = out.data();
  a.ldo = d;
  a.scratch = scratch.data();
  const auto& kern = k::cpu();
  for (auto _ : state) {
    kern.tree_attention(a);
    benchmark::DoNotOptimize(out.data());
  }
  const double edges = static_cast<double>(keys.size());
  state.counters["edges/s"] = benchmark::Counter(edges, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["FLOP/s"] = benchmark::Counter(edges * (4.0 * d + 2.0 * (9.0 + 3.0 * d / heads)),
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_tree_attention)->Arg(128)->Arg(256);

void BM_machine(benchmark::State& state) {
  double fma = 0, exps = 0;
  for (auto _ : state) {
    fma = surrogate::bench::fma_gflops_one_thread();
    exps = surrogate::bench::exp_gexps_one_thread();
  }
  state.counters["FMA GFLOP/s"] = fma;
  state.counters["exp Gexp/s"] = exps;
}
BENCHMARK(BM_machine)->Iterations(1);
}  // namespace

BENCHMARK_MAIN();
