#include "ball_attention.hpp"

#include <algorithm>
#include <cmath>

namespace surrogate::erwin {

void ball_attention(const BallAttentionArgs& a) {
  const int m = a.m, E = a.E;
  float* s = a.scores;
  float* kt = a.keys_t;
  for (int h = 0; h < a.heads; ++h) {
    const float sigma = a.sigma ? a.sigma[h] : 0.0f;
    const std::int64_t c0 = static_cast<std::int64_t>(h) * E;
    for (int j = 0; j < m; ++j)
      for (int e = 0; e < E; ++e) kt[static_cast<std::int64_t>(e) * m + j] = a.k[j * a.ld + c0 + e];
    for (int i = 0; i < m; ++i) {
      const float* qi = a.q + i * a.ld + c0;
      for (int j = 0; j < m; ++j) s[j] = 0.0f;
      for (int e = 0; e < E; ++e) {
        const float qe = qi[e];
        const float* ke = kt + static_cast<std::int64_t>(e) * m;
        for (int j = 0; j < m; ++j) s[j] += qe * ke[j];
      }
      if (a.sigma) {
        const float* di = a.dist + static_cast<std::int64_t>(i) * m;
        for (int j = 0; j < m; ++j) s[j] = s[j] * a.scale + sigma * di[j];
      } else {
        for (int j = 0; j < m; ++j) s[j] *= a.scale;
      }
      float mx = -INFINITY;
      for (int j = 0; j < m; ++j) mx = std::max(mx, s[j]);
      for (int j = 0; j < m; ++j) s[j] -= mx;
      a.exp(s, s, m);
      float sum = 0.0f;
      for (int j = 0; j < m; ++j) sum += s[j];
      const float inv = 1.0f / sum;
      float* oi = a.out + i * a.ldo + c0;
      for (int e = 0; e < E; ++e) oi[e] = 0.0f;
      for (int j = 0; j < m; ++j) {
        const float p = s[j] * inv;
        const float* vj = a.v + j * a.ld + c0;
        for (int e = 0; e < E; ++e) oi[e] += p * vj[e];
      }
    }
  }
}

void ball_distances(const float* pos, int m, int dim, float* dist) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < m; ++j) {
      float sum = 0.0f;
      for (int c = 0; c < dim; ++c) {
        const float diff = pos[i * dim + c] - pos[j * dim + c];
        sum += diff * diff;
      }
      dist[static_cast<std::int64_t>(i) * m + j] = std::sqrt(sum);
    }
}

}  // namespace surrogate::erwin
