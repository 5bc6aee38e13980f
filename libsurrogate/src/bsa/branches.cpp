// BSA's branches on the CPU kernels (see branches.hpp).
#include "branches.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../balltree/layers.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/nan_keeping.hpp"

namespace surrogate::bsa::detail {
namespace {

using kernels::AlignedBuffer;

constexpr int kQueries = 64;  // queries per task of a streamed softmax

/// Running online-softmax state of up to kQueries queries (the shared latent_encode primitive).
class Stream {
 public:
  explicit Stream(int E)
      : E_(E), ref_exp_(kQueries), sum_(kQueries), weighted_(static_cast<std::size_t>(kQueries) * E),
        q_(static_cast<std::size_t>(kQueries) * E) {}
  /// Query m's row (E floats) to be filled, already multiplied by the attention scale.
  float* query(int m) { return q_.data() + static_cast<std::size_t>(m) * E_; }
  void reset(int M) {
    M_ = M;
    std::fill_n(ref_exp_.begin(), M, kernels::kNoExponent);
    std::fill_n(sum_.begin(), M, 0.0);
    std::fill_n(weighted_.begin(), static_cast<std::size_t>(M) * E_, 0.0);
  }
  void add(const CpuKernels& k, const float* keys, const float* values, index_t ld, index_t rows) {
    k.latent_encode(encode_args(keys, values, ld, rows));
  }
  /// Like add, with the S best keys of every query chosen from the same logits (LatentEncodeArgs::
  /// select_S: the queries unscaled, the logits multiplied by `scale`); all keys in this one call.
  void add_selecting(const CpuKernels& k, const float* keys, const float* values, index_t ld, index_t rows, float scale,
                     int S, const index_t* mask_begin, const index_t* mask_end, std::int32_t* sel) {
    kernels::LatentEncodeArgs a = encode_args(keys, values, ld, rows);
    a.logit_scale = scale;
    a.select_S = S;
    a.mask_begin = mask_begin;
    a.mask_end = mask_end;
    a.sel = sel;
    k.latent_encode(a);
  }
  /// The softmax-weighted values of query m.
  void store(int m, float* out) const {
    const double inv = 1.0 / sum_[static_cast<std::size_t>(m)];
    const double* w = weighted_.data() + static_cast<std::size_t>(m) * E_;
    for (int e = 0; e < E_; ++e) out[e] = static_cast<float>(w[e] * inv);
  }

 private:
  /// The encode of this state's queries against `rows` keys and values (row stride ld).
  kernels::LatentEncodeArgs encode_args(const float* keys, const float* values, index_t ld, index_t rows) {
    kernels::LatentEncodeArgs a;
    a.q = q_.data();
    a.M = M_;
    a.E = E_;
    a.k = keys;
    a.ldk = ld;
    a.v = values;
    a.ldv = ld;
    a.rows = rows;
    a.ref_exp = ref_exp_.data();
    a.sum = sum_.data();
    a.weighted = weighted_.data();
    return a;
  }

  int E_ = 0, M_ = 0;
  std::vector<std::int32_t> ref_exp_;
  std::vector<double> sum_, weighted_;
  AlignedBuffer<float> q_;
};

float attention_scale(int E) { return 1.0f / std::sqrt(static_cast<float>(E)); }

/// The keys or values (compressed blocks, or tokens for the global attention) of every (sample, head),
/// head-major: the nb rows of E floats of one head contiguous. Every query chunk of a head streams all of
/// them; from the rows of all heads (D floats a row) each chunk pulled a cache line per row from beyond the
/// L2 cache (benchmarks/RESULTS.md, "BSA and the global S² attention: keys by head").
AlignedBuffer<float> rows_by_head(const float* src, index_t ld, int samples, index_t nb, int H, int E, int threads) {
  AlignedBuffer<float> dst(static_cast<std::size_t>(samples) * H * static_cast<std::size_t>(nb) * E);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (index_t sh = 0; sh < static_cast<index_t>(samples) * H; ++sh) {
    const index_t smp = sh / H, h = sh % H;
    float* out = dst.data() + sh * nb * E;
    for (index_t g = 0; g < nb; ++g) copy_head(src + (smp * nb + g) * ld + h * E, E, out + g * E);
  }
  return dst;
}

void scaled_copy(const float* src, int E, float scale, float* dst) {
  for (int e = 0; e < E; ++e) dst[e] = src[e] * scale;
}

}  // namespace

void compress_blocks(const CpuKernels& k, const kernels::PackedLinear* mlp, const float* src, index_t ld,
                     index_t blocks, int C, int heads, int E, float* dst, index_t ld_c, int threads) {
  using kernels::kPad;
  using kernels::round_up;
  const int H = heads;
  if (mlp == nullptr) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (index_t b = 0; b < blocks; ++b)
      for (int ch = 0; ch < H * E; ++ch) {
        float sum = 0.0f;
        for (int t = 0; t < C; ++t) sum += src[(b * C + t) * ld + ch];
        dst[b * ld_c + ch] = sum / static_cast<float>(C);
      }
    return;
  }
  // Rows (block, head) of the MLP input, in chunks of kRows.
  constexpr index_t kRows = 64;
  const index_t rows = blocks * H;
  const index_t ld_in = round_up(static_cast<index_t>(C) * E, kPad), ld_h = round_up(mlp[0].out(), kPad);
  const index_t ld_o = round_up(E, kPad);
#pragma omp parallel num_threads(threads)
  {
    AlignedBuffer<float> in(static_cast<std::size_t>(kRows * ld_in)), hid(static_cast<std::size_t>(kRows * ld_h));
    AlignedBuffer<float> out(static_cast<std::size_t>(kRows * ld_o));
#pragma omp for schedule(static)
    for (index_t r0 = 0; r0 < rows; r0 += kRows) {
      const index_t count = std::min(kRows, rows - r0);
      for (index_t r = 0; r < count; ++r) {
        const index_t b = (r0 + r) / H, h = (r0 + r) % H;
        float* row = in.data() + r * ld_in;
        std::fill_n(row + C * E, ld_in - C * E, 0.0f);
        for (int t = 0; t < C; ++t) copy_head(src + (b * C + t) * ld + h * E, E, row + t * E);
      }
      balltree::layers::run_linear(k, mlp[0], in.data(), ld_in, hid.data(), ld_h, count);
      for (index_t i = 0; i < count * ld_h; ++i)
        hid[static_cast<std::size_t>(i)] = kernels::relu_keep_nan(hid[static_cast<std::size_t>(i)]);
      balltree::layers::run_linear(k, mlp[1], hid.data(), ld_h, out.data(), ld_o, count);
      for (index_t r = 0; r < count; ++r) {
        const index_t b = (r0 + r) / H, h = (r0 + r) % H;
        copy_head(out.data() + r * ld_o, E, dst + b * ld_c + h * E);
      }
    }
  }
}

void local_branch(const CpuKernels& k, const Tokens& t, const float* positions, int dim, int ball, const float* sigma,
                  float* out, index_t ldo, int threads) {
  const index_t balls = t.samples * t.n / ball;
#pragma omp parallel num_threads(threads)
  {
    std::vector<float> dist(static_cast<std::size_t>(ball) * static_cast<std::size_t>(ball));
#pragma omp for schedule(static)
    for (index_t b = 0; b < balls; ++b) {
      const index_t r0 = b * ball;
      balltree::layers::ball_distances(k, positions + r0 * dim, ball, dim, dist.data());
      kernels::BallAttentionArgs a;
      a.m = ball;
      a.heads = t.heads;
      a.E = t.E;
      a.q = t.q + r0 * t.ld;
      a.k = t.k + r0 * t.ld;
      a.v = t.v + r0 * t.ld;
      a.ld = t.ld;
      a.scale = attention_scale(t.E);
      a.sigma = sigma;
      a.bias = dist.data();
      a.ld_bias = ball;
      a.out = out + r0 * ldo;
      a.ldo = ldo;
      k.ball_attention(a);
    }
  }
}

void coarse_branch(const CpuKernels& k, const Tokens& t, const Blocks& b, const SparseShape& s, float* out,
                   index_t ldo, int threads) {
  const int H = t.heads, E = t.E;
  const float scale = attention_scale(E);
  // Queries: the compressed blocks (coarse-q attention) or the tokens.
  const index_t queries = s.coarse_q_attn ? t.n / s.C : t.n;
  const float* qsrc = s.coarse_q_attn ? b.q : t.q;
  const index_t ldq = s.coarse_q_attn ? b.ld : t.ld;
  const index_t chunks = (queries + kQueries - 1) / kQueries;
  const index_t tasks = static_cast<index_t>(t.samples) * H * chunks;
  const AlignedBuffer<float> kh = rows_by_head(b.k, b.ld, t.samples, b.nb, H, E, threads);
  const AlignedBuffer<float> vh = rows_by_head(b.v, b.ld, t.samples, b.nb, H, E, threads);
#pragma omp parallel num_threads(threads)
  {
    Stream st(E);
#pragma omp for schedule(dynamic)
    for (index_t task = 0; task < tasks; ++task) {
      const index_t smp = task / (H * chunks), h = (task / chunks) % H, q0 = (task % chunks) * kQueries;
      const int M = static_cast<int>(std::min<index_t>(kQueries, queries - q0));
      st.reset(M);
      for (int m = 0; m < M; ++m) scaled_copy(qsrc + (smp * queries + q0 + m) * ldq + h * E, E, scale, st.query(m));
      const index_t head = (smp * H + h) * b.nb * E;
      st.add(k, kh.data() + head, vh.data() + head, E, b.nb);
      for (int m = 0; m < M; ++m) {
        if (!s.coarse_q_attn) {
          st.store(m, out + (smp * t.n + q0 + m) * ldo + h * E);
          continue;
        }
        float* first = out + (smp * t.n + (q0 + m) * s.C) * ldo + h * E;
        st.store(m, first);
        for (int c = 1; c < s.C; ++c) copy_head(first, E, first + c * ldo);
      }
    }
  }
}

void coarse_and_select(const CpuKernels& k, const Tokens& t, const Blocks& b, const SparseShape& s, float* out,
                       index_t ldo, std::int32_t* sel, int threads) {
  if (!s.coarse_q_attn || !s.block_level || s.S > kernels::kMaxTopKeys || s.S > b.nb) {
    coarse_branch(k, t, b, s, out, ldo, threads);
    select_blocks(k, t, b, s, sel, threads);  // (refuses S beyond the kernel limit or the blocks)
    return;
  }
  static_assert(kQueries <= kernels::kMaxSelectLatents);
  const int H = t.heads, E = t.E;
  const float scale = attention_scale(E);
  const index_t queries = t.n / s.C, bpb = s.P / s.C, row_shift = t.row0 / s.C;
  const index_t chunks = (queries + kQueries - 1) / kQueries;
  const index_t tasks = static_cast<index_t>(t.samples) * H * chunks;
  const AlignedBuffer<float> kh = rows_by_head(b.k, b.ld, t.samples, b.nb, H, E, threads);
  const AlignedBuffer<float> vh = rows_by_head(b.v, b.ld, t.samples, b.nb, H, E, threads);
#pragma omp parallel num_threads(threads)
  {
    Stream st(E);
    std::vector<index_t> mask_begin(kQueries), mask_end(kQueries);
#pragma omp for schedule(dynamic)
    for (index_t task = 0; task < tasks; ++task) {
      const index_t smp = task / (H * chunks), h = (task / chunks) % H, q0 = (task % chunks) * kQueries;
      const int M = static_cast<int>(std::min<index_t>(kQueries, queries - q0));
      st.reset(M);
      for (int m = 0; m < M; ++m) copy_head(b.q + (smp * queries + q0 + m) * b.ld + h * E, E, st.query(m));
      for (int m = 0; m < M; ++m) {  // the blocks of the query block's own ball
        const index_t ball = (row_shift + q0 + m) / bpb;
        mask_begin[static_cast<std::size_t>(m)] = ball * bpb;
        mask_end[static_cast<std::size_t>(m)] = std::min((ball + 1) * bpb, b.nb);
      }
      const index_t head = (smp * H + h) * b.nb * E;
      st.add_selecting(k, kh.data() + head, vh.data() + head, E, b.nb, scale, s.S,
                       s.mask_own_ball ? mask_begin.data() : nullptr, mask_end.data(),
                       sel + ((smp * H + h) * queries + q0) * s.S);
      for (int m = 0; m < M; ++m) {
        float* first = out + (smp * t.n + (q0 + m) * s.C) * ldo + h * E;
        st.store(m, first);
        for (int c = 1; c < s.C; ++c) copy_head(first, E, first + c * ldo);
      }
    }
  }
}

void select_blocks(const CpuKernels& k, const Tokens& t, const Blocks& b, const SparseShape& s, std::int32_t* sel,
                   int threads, double* min_gap) {
  const int H = t.heads, E = t.E;
  const index_t nb = b.nb, rows = s.selection_rows(t.n), bpb = s.P / s.C;
  const int per_row = s.block_level ? 1 : s.tokens_per_row();
  const index_t row_shift = s.selection_rows(t.row0);  // in-sample index of selection row 0
  if (s.S > kernels::kMaxTopKeys || s.S > nb)
    throw Error(ErrorCode::unsupported, "bsa: selected_blocks_number = " + std::to_string(s.S) +
                                            " exceeds the blocks per sample (" + std::to_string(nb) +
                                            ") or the kernel limit " + std::to_string(kernels::kMaxTopKeys));
  // Compressed keys transposed per (sample, head): E rows of nb (padded), the layout of the top_keys kernel.
  const index_t ldk = kernels::round_up(nb, kernels::kPad);
  AlignedBuffer<float> kt(static_cast<std::size_t>(t.samples) * H * E * static_cast<std::size_t>(ldk));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (index_t sh = 0; sh < static_cast<index_t>(t.samples) * H; ++sh) {
    const index_t smp = sh / H, h = sh % H;
    float* dst = kt.data() + sh * E * ldk;
    for (int e = 0; e < E; ++e) {
      float* row = dst + e * ldk;
      for (index_t g = 0; g < nb; ++g) row[g] = b.k[(smp * nb + g) * b.ld + h * E + e];
      std::fill(row + nb, row + ldk, 0.0f);
    }
  }
  constexpr index_t chunk = 64;  // selection rows per task
  const index_t chunks = (rows + chunk - 1) / chunk;
  const index_t tasks = static_cast<index_t>(t.samples) * H * chunks;
  double gap = std::numeric_limits<double>::infinity();
#pragma omp parallel num_threads(threads) reduction(min : gap)
  {
    std::vector<index_t> mask_begin(chunk), mask_end(chunk);
    std::vector<float> kth(chunk), next(chunk);
#pragma omp for schedule(dynamic)
    for (index_t task = 0; task < tasks; ++task) {
      const index_t smp = task / (H * chunks), h = (task / chunks) % H, r0 = (task % chunks) * chunk;
      const index_t count = std::min(chunk, rows - r0);
      kernels::TopKeysArgs a;
      if (s.block_level) {
        a.q = b.q + (smp * (t.n / s.C) + r0) * b.ld + h * E;
        a.ldq = b.ld;
      } else {
        a.q = t.q + (smp * t.n + r0 * per_row) * t.ld + h * E;
        a.ldq = t.ld;
      }
      a.group = per_row;
      a.E = E;
      a.rows = count;
      a.kt = kt.data() + (smp * H + h) * E * ldk;
      a.ldk = ldk;
      a.keys = nb;
      a.scale = attention_scale(E);
      if (s.mask_own_ball) {
        // Blocks of the balls of the row's tokens (block-level: the block's ball).
        for (index_t i = 0; i < count; ++i) {
          const index_t r = row_shift + r0 + i;
          const index_t first = s.block_level ? r / bpb : r * per_row / s.P;
          const index_t last = s.block_level ? first : (r * per_row + per_row - 1) / s.P;
          mask_begin[static_cast<std::size_t>(i)] = first * bpb;
          mask_end[static_cast<std::size_t>(i)] = std::min((last + 1) * bpb, nb);
        }
        a.mask_begin = mask_begin.data();
        a.mask_end = mask_end.data();
      }
      a.S = s.S;
      a.sel = sel + ((smp * H + h) * rows + r0) * s.S;
      if (min_gap) {
        a.kth = kth.data();
        a.next = next.data();
      }
      k.top_keys(a);
      if (min_gap)
        for (index_t i = 0; i < count; ++i) {
          const float hi = kth[static_cast<std::size_t>(i)], lo = next[static_cast<std::size_t>(i)];
          if (std::isfinite(hi) && std::isfinite(lo)) gap = std::min(gap, static_cast<double>(hi) - static_cast<double>(lo));
        }
    }
  }
  if (min_gap) *min_gap = gap;
}

void fine_branch(const CpuKernels& k, const Tokens& t, const SparseShape& s, const std::int32_t* sel, float* out,
                 index_t ldo, int threads, const SelectedRows* rows_from) {
  const int H = t.heads, E = t.E;
  const float scale = attention_scale(E);
  const index_t rows = s.selection_rows(t.n);
  const int M = s.tokens_per_row();  // block-level importance: G == C tokens per block
  // Tasks of several selection rows when a row holds one token (per-token selection).
  const index_t per_task = std::max<index_t>(1, 64 / M);
  const index_t chunks = (rows + per_task - 1) / per_task;
  const index_t tasks = static_cast<index_t>(t.samples) * H * chunks;
#pragma omp parallel num_threads(threads)
  {
    Stream st(E);
    // The S*C selected keys and values of a row gathered head-wise (E floats per key), so that one
    // streamed call covers them all rather than S calls of C keys.
    const index_t keys = static_cast<index_t>(s.S) * s.C;
    AlignedBuffer<float> kg(static_cast<std::size_t>(keys * E)), vg(kg.size());
#pragma omp for schedule(dynamic)
    for (index_t task = 0; task < tasks; ++task) {
      const index_t smp = task / (H * chunks), h = (task / chunks) % H, r0 = (task % chunks) * per_task;
      for (index_t r = r0; r < std::min(rows, r0 + per_task); ++r) {
        const index_t tok0 = smp * t.n + r * M;
        st.reset(M);
        for (int m = 0; m < M; ++m) scaled_copy(t.q + (tok0 + m) * t.ld + h * E, E, scale, st.query(m));
        const std::int32_t* chosen = sel + ((smp * H + h) * rows + r) * s.S;
        for (int j = 0; j < s.S; ++j) {
          const index_t key0 = rows_from ? rows_from->first_row[smp * rows_from->nb + chosen[j]]
                                         : smp * t.n + static_cast<index_t>(chosen[j]) * s.C;
          const float* ks = rows_from ? rows_from->k : t.k;
          const float* vs = rows_from ? rows_from->v : t.v;
          const index_t ldk = rows_from ? rows_from->ld : t.ld;
          for (int c = 0; c < s.C; ++c) {
            const index_t dst = (static_cast<index_t>(j) * s.C + c) * E;
            copy_head(ks + (key0 + c) * ldk + h * E, E, kg.data() + dst);
            copy_head(vs + (key0 + c) * ldk + h * E, E, vg.data() + dst);
          }
        }
        st.add(k, kg.data(), vg.data(), E, keys);
        for (int m = 0; m < M; ++m) st.store(m, out + (tok0 + m) * ldo + h * E);
      }
    }
  }
}

void global_attention(const CpuKernels& k, const Tokens& t, float* out, index_t ldo, int threads,
                      const SampleKeys* keys) {
  const int H = t.heads, E = t.E;
  const SampleKeys own{t.k, t.v, t.ld, t.n};
  const SampleKeys& from = keys ? *keys : own;
  const float scale = attention_scale(E);
  const index_t chunks = (t.n + kQueries - 1) / kQueries;
  const index_t tasks = static_cast<index_t>(t.samples) * H * chunks;
  const AlignedBuffer<float> kh = rows_by_head(from.k, from.ld, t.samples, from.n, H, E, threads);
  const AlignedBuffer<float> vh = rows_by_head(from.v, from.ld, t.samples, from.n, H, E, threads);
#pragma omp parallel num_threads(threads)
  {
    Stream st(E);
#pragma omp for schedule(dynamic)
    for (index_t task = 0; task < tasks; ++task) {
      const index_t smp = task / (H * chunks), h = (task / chunks) % H, q0 = (task % chunks) * kQueries;
      const int M = static_cast<int>(std::min<index_t>(kQueries, t.n - q0));
      st.reset(M);
      for (int m = 0; m < M; ++m) scaled_copy(t.q + (smp * t.n + q0 + m) * t.ld + h * E, E, scale, st.query(m));
      const index_t head = (smp * H + h) * from.n * E;
      st.add(k, kh.data() + head, vh.data() + head, E, from.n);
      for (int m = 0; m < M; ++m) st.store(m, out + (smp * t.n + q0 + m) * ldo + h * E);
    }
  }
}

}  // namespace surrogate::bsa::detail
