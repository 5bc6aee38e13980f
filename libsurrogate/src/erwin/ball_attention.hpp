// Multi-head self-attention inside one ball of m consecutive nodes, with an optional additive distance
// bias per head (Erwin's BMSA; the local branch of BSA has the same form). Runs on one thread.
#pragma once

#include <cstdint>

namespace surrogate::erwin {

struct BallAttentionArgs {
  int m = 0;                  // nodes in the ball
  int heads = 0, E = 0;       // D = heads * E
  const float* q = nullptr;   // row r: q at q[r*ld + h*E + e]; k and v likewise (head-major channels)
  const float* k = nullptr;
  const float* v = nullptr;
  std::int64_t ld = 0;
  float scale = 1.0f;         // multiplies q.k (1/sqrt(E))
  const float* sigma = nullptr;  // per head bias factor, or nullptr: no bias
  const float* dist = nullptr;   // m x m distances |p_i - p_j| (read only when sigma is set)
  float* out = nullptr;       // row r, head h at out[r*ldo + h*E + e]
  std::int64_t ldo = 0;
  float* scores = nullptr;    // scratch of m floats
  float* keys_t = nullptr;    // scratch of E * m floats (one head's keys, transposed)
  /// Vectorised exp of the kernels (kernels::cpu().exp): every lane computes the same bits, so a row's
  /// result does not depend on its position.
  void (*exp)(const float* x, float* y, std::int64_t n) = nullptr;
};

/// out_i = sum_j softmax_j(scale q_i.k_j + sigma_h dist_ij) v_j for every row i and head h; softmax with
/// the maximum subtracted, float32 arithmetic (q.k summed over e in order, the exponential sum over j in
/// order).
void ball_attention(const BallAttentionArgs& a);

/// Distances |p_i - p_j| between the m points of a ball (dim coordinates each, row-major), computed as
/// torch.cdist does for up to 25 rows: sqrt(sum_c (p_ic - p_jc)^2) in float32.
void ball_distances(const float* pos, int m, int dim, float* dist);

}  // namespace surrogate::erwin
