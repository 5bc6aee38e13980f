// BSA's branches on the CPU kernels (see bsa_branches.hpp).
#include "bsa_branches.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../erwin/erwin_layers.hpp"
#include "surrogate/balltree.hpp"

namespace surrogate::bsa::detail {
namespace {

using kernels::AlignedBuffer;

constexpr int kQueries = 64;  // queries per task of a streamed softmax
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

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
    k.latent_encode(a);
  }
  /// The softmax-weighted values of query m.
  void store(int m, float* out) const {
    const double inv = 1.0 / sum_[static_cast<std::size_t>(m)];
    const double* w = weighted_.data() + static_cast<std::size_t>(m) * E_;
    for (int e = 0; e < E_; ++e) out[e] = static_cast<float>(w[e] * inv);
  }

 private:
  int E_ = 0, M_ = 0;
  std::vector<std::int32_t> ref_exp_;
  std::vector<double> sum_, weighted_;
  AlignedBuffer<float> q_;
};

float attention_scale(int E) { return 1.0f / std::sqrt(static_cast<float>(E)); }

void scaled_copy(const float* src, int E, float scale, float* dst) {
  for (int e = 0; e < E; ++e) dst[e] = src[e] * scale;
}

/// Keeps the S best (score, index) pairs of a row scanned in ascending index order: a later index
/// displaces an earlier one only with a strictly larger score (equal scores: the lower index wins).
class TopS {
 public:
  explicit TopS(int S) : S_(S), score_(static_cast<std::size_t>(S) + 1), index_(static_cast<std::size_t>(S) + 1) {}
  void reset() { count_ = 0; }
  void offer(float score, std::int32_t index) {
    if (count_ == S_ && !(score > score_[static_cast<std::size_t>(S_) - 1])) return;
    int pos = std::min(count_, S_ - 1);  // insertion point: after every entry with a score >= this one
    while (pos > 0 && score_[static_cast<std::size_t>(pos) - 1] < score) {
      score_[static_cast<std::size_t>(pos)] = score_[static_cast<std::size_t>(pos) - 1];
      index_[static_cast<std::size_t>(pos)] = index_[static_cast<std::size_t>(pos) - 1];
      --pos;
    }
    score_[static_cast<std::size_t>(pos)] = score;
    index_[static_cast<std::size_t>(pos)] = index;
    count_ = std::min(count_ + 1, S_);
  }
  /// The chosen indices in ascending order; `next` is the best score that was not chosen (-inf if none).
  void finish(std::int32_t* out) const {
    std::copy_n(index_.begin(), S_, out);
    std::sort(out, out + S_);
  }
  float kth() const { return score_[static_cast<std::size_t>(S_) - 1]; }

 private:
  int S_ = 0, count_ = 0;
  std::vector<float> score_;
  std::vector<std::int32_t> index_;
};

}  // namespace

index_t SparseShape::selection_rows(index_t n) const {
  if (block_level) return n / C;
  return group_selection ? n / G : n;
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
      balltree_layers::ball_distances(positions + r0 * dim, ball, dim, dist.data());
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
  const index_t queries = s.coarse_q_attn ? b.nb : t.n;
  const float* qsrc = s.coarse_q_attn ? b.q : t.q;
  const index_t ldq = s.coarse_q_attn ? b.ld : t.ld;
  const index_t chunks = (queries + kQueries - 1) / kQueries;
  const index_t tasks = static_cast<index_t>(t.samples) * H * chunks;
#pragma omp parallel num_threads(threads)
  {
    Stream st(E);
#pragma omp for schedule(dynamic)
    for (index_t task = 0; task < tasks; ++task) {
      const index_t smp = task / (H * chunks), h = (task / chunks) % H, q0 = (task % chunks) * kQueries;
      const int M = static_cast<int>(std::min<index_t>(kQueries, queries - q0));
      st.reset(M);
      for (int m = 0; m < M; ++m) scaled_copy(qsrc + (smp * queries + q0 + m) * ldq + h * E, E, scale, st.query(m));
      st.add(k, b.k + smp * b.nb * b.ld + h * E, b.v + smp * b.nb * b.ld + h * E, b.ld, b.nb);
      for (int m = 0; m < M; ++m) {
        if (!s.coarse_q_attn) {
          st.store(m, out + (smp * t.n + q0 + m) * ldo + h * E);
          continue;
        }
        float* first = out + (smp * t.n + (q0 + m) * s.C) * ldo + h * E;
        st.store(m, first);
        for (int c = 1; c < s.C; ++c) std::copy_n(first, E, first + c * ldo);
      }
    }
  }
}

void select_blocks(const Tokens& t, const Blocks& b, const SparseShape& s, std::int32_t* sel, int threads,
                   double* min_gap) {
  const int H = t.heads, E = t.E;
  const index_t nb = b.nb, rows = s.selection_rows(t.n), bpb = s.P / s.C;
  const float scale = attention_scale(E);
  const int per_row = s.block_level ? 1 : s.tokens_per_row();
  // Compressed keys transposed per (sample, head): E rows of nb, so that a row of scores is a sum of
  // E contiguous axpy's.
  std::vector<float> kt(static_cast<std::size_t>(t.samples) * H * E * static_cast<std::size_t>(nb));
  for (int smp = 0; smp < t.samples; ++smp)
    for (int h = 0; h < H; ++h)
      for (index_t g = 0; g < nb; ++g)
        for (int e = 0; e < E; ++e)
          kt[((static_cast<std::size_t>(smp) * H + h) * E + e) * nb + g] = b.k[(smp * nb + g) * b.ld + h * E + e];
  const index_t chunk = 16;
  const index_t chunks = (rows + chunk - 1) / chunk;
  const index_t tasks = static_cast<index_t>(t.samples) * H * chunks;
  double gap = std::numeric_limits<double>::infinity();
#pragma omp parallel num_threads(threads) reduction(min : gap)
  {
    std::vector<float> row(static_cast<std::size_t>(nb)), part(static_cast<std::size_t>(nb));
    TopS top(s.S);
#pragma omp for schedule(dynamic)
    for (index_t task = 0; task < tasks; ++task) {
      const index_t smp = task / (H * chunks), h = (task / chunks) % H, r0 = (task % chunks) * chunk;
      const float* kth = kt.data() + (static_cast<std::size_t>(smp) * H + h) * E * nb;
      for (index_t r = r0; r < std::min(rows, r0 + chunk); ++r) {
        // Scores of this row (the mean over the group's tokens for grouped token-level importance).
        for (int tok = 0; tok < per_row; ++tok) {
          const float* q = s.block_level ? b.q + (smp * nb + r) * b.ld + h * E
                                         : t.q + (smp * t.n + r * per_row + tok) * t.ld + h * E;
          float* dst = tok == 0 ? row.data() : part.data();
          std::fill(dst, dst + nb, 0.0f);
          for (int e = 0; e < E; ++e) {
            const float qe = q[e];
            const float* ke = kth + static_cast<std::size_t>(e) * nb;
            for (index_t g = 0; g < nb; ++g) dst[g] += qe * ke[g];
          }
          for (index_t g = 0; g < nb; ++g) dst[g] *= scale;
          if (tok > 0)
            for (index_t g = 0; g < nb; ++g) row[static_cast<std::size_t>(g)] += part[static_cast<std::size_t>(g)];
        }
        if (per_row > 1)
          for (index_t g = 0; g < nb; ++g) row[static_cast<std::size_t>(g)] /= static_cast<float>(per_row);
        if (s.mask_own_ball) {
          // Balls of the row's tokens (block-level: the block's ball).
          const index_t first = s.block_level ? r / bpb : r * per_row / s.P;
          const index_t last = s.block_level ? first : (r * per_row + per_row - 1) / s.P;
          for (index_t ball = first; ball <= last; ++ball)
            std::fill_n(row.begin() + ball * bpb, std::min(bpb, nb - ball * bpb), kNegInf);
        }
        top.reset();
        for (index_t g = 0; g < nb; ++g) top.offer(row[static_cast<std::size_t>(g)], static_cast<std::int32_t>(g));
        if (min_gap && nb > s.S) {
          // The best score left out.
          std::int32_t* chosen = sel + ((smp * H + h) * rows + r) * s.S;
          top.finish(chosen);
          float next = kNegInf;
          for (index_t g = 0, j = 0; g < nb; ++g) {
            if (j < s.S && chosen[j] == g) {
              ++j;
              continue;
            }
            next = std::max(next, row[static_cast<std::size_t>(g)]);
          }
          if (std::isfinite(top.kth()) && std::isfinite(next))
            gap = std::min(gap, static_cast<double>(top.kth()) - static_cast<double>(next));
        } else {
          top.finish(sel + ((smp * H + h) * rows + r) * s.S);
        }
      }
    }
  }
  if (min_gap) *min_gap = gap;
}

void fine_branch(const CpuKernels& k, const Tokens& t, const SparseShape& s, const std::int32_t* sel, float* out,
                 index_t ldo, int threads) {
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
#pragma omp for schedule(dynamic)
    for (index_t task = 0; task < tasks; ++task) {
      const index_t smp = task / (H * chunks), h = (task / chunks) % H, r0 = (task % chunks) * per_task;
      for (index_t r = r0; r < std::min(rows, r0 + per_task); ++r) {
        const index_t tok0 = smp * t.n + r * M;
        st.reset(M);
        for (int m = 0; m < M; ++m) scaled_copy(t.q + (tok0 + m) * t.ld + h * E, E, scale, st.query(m));
        const std::int32_t* chosen = sel + ((smp * H + h) * rows + r) * s.S;
        for (int j = 0; j < s.S; ++j) {
          const index_t key0 = smp * t.n + static_cast<index_t>(chosen[j]) * s.C;
          st.add(k, t.k + key0 * t.ld + h * E, t.v + key0 * t.ld + h * E, t.ld, s.C);
        }
        for (int m = 0; m < M; ++m) st.store(m, out + (tok0 + m) * ldo + h * E);
      }
    }
  }
}

void global_attention(const CpuKernels& k, const Tokens& t, float* out, index_t ldo, int threads) {
  const int H = t.heads, E = t.E;
  const float scale = attention_scale(E);
  const index_t chunks = (t.n + kQueries - 1) / kQueries;
  const index_t tasks = static_cast<index_t>(t.samples) * H * chunks;
#pragma omp parallel num_threads(threads)
  {
    Stream st(E);
#pragma omp for schedule(dynamic)
    for (index_t task = 0; task < tasks; ++task) {
      const index_t smp = task / (H * chunks), h = (task / chunks) % H, q0 = (task % chunks) * kQueries;
      const int M = static_cast<int>(std::min<index_t>(kQueries, t.n - q0));
      st.reset(M);
      for (int m = 0; m < M; ++m) scaled_copy(t.q + (smp * t.n + q0 + m) * t.ld + h * E, E, scale, st.query(m));
      st.add(k, t.k + smp * t.n * t.ld + h * E, t.v + smp * t.n * t.ld + h * E, t.ld, t.n);
      for (int m = 0; m < M; ++m) st.store(m, out + (smp * t.n + q0 + m) * ldo + h * E);
    }
  }
}

}  // namespace surrogate::bsa::detail
