// Nearest same-sample nodes of a level: the sibling lists and PointConv's kNN (share/docs/sequoia.md,
// "Neighbour order"): squared distances of the float32 positions in double, ties by ascending id.
#include <algorithm>
#include <numeric>

#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {

std::vector<std::int64_t> sibling_lists(const Hierarchy& h, int level, int k) {
  const auto& batch = h.level_batch[static_cast<std::size_t>(level)];
  const auto& pos = h.level_positions[static_cast<std::size_t>(level)];
  const std::int64_t n = static_cast<std::int64_t>(batch.size());
  std::vector<std::int64_t> lists(static_cast<std::size_t>(n) * static_cast<std::size_t>(k));
  std::int64_t begin = 0;
  while (begin < n) {
    std::int64_t end = begin;
    while (end < n && batch[static_cast<std::size_t>(end)] == batch[static_cast<std::size_t>(begin)]) ++end;
    const std::int64_t m = end - begin;
    const std::int64_t take = std::min<std::int64_t>(k, m);
#pragma omp parallel
    {
      std::vector<std::pair<double, std::int64_t>> d(static_cast<std::size_t>(m));
#pragma omp for schedule(static)
      for (std::int64_t a = begin; a < end; ++a) {
        const float* pa = &pos[static_cast<std::size_t>(a) * 3];
        for (std::int64_t j = begin; j < end; ++j) {
          const float* pj = &pos[static_cast<std::size_t>(j) * 3];
          double s = 0.0;
          for (int c = 0; c < 3; ++c) {
            const double t = static_cast<double>(pa[c]) - static_cast<double>(pj[c]);
            s += t * t;
          }
          d[static_cast<std::size_t>(j - begin)] = {s, j};
        }
        std::partial_sort(d.begin(), d.begin() + take, d.end());  // pairs: distance, then id
        std::int64_t* out = &lists[static_cast<std::size_t>(a) * static_cast<std::size_t>(k)];
        for (std::int64_t t = 0; t < k; ++t) out[t] = d[static_cast<std::size_t>(t < take ? t : 0)].second;
      }
    }
    begin = end;
  }
  return lists;
}

}  // namespace surrogate::sequoia
