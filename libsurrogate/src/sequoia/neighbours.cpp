// Nearest same-sample nodes of a level: the sibling lists and PointConv's kNN (share/docs/sequoia.md,
// "Neighbour order"): squared distances of the float32 positions in double, ties by ascending id. Small
// samples by brute force, large ones through a uniform grid searched ring by ring (the same lists).
#include "neighbours.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace surrogate::sequoia {
namespace {

using Candidate = std::pair<double, std::int64_t>;  // squared distance, node id: compared in that order

double squared_distance(const float* a, const float* b) {
  double s = 0.0;
  for (int c = 0; c < 3; ++c) {
    const double t = static_cast<double>(a[c]) - static_cast<double>(b[c]);
    s += t * t;
  }
  return s;
}

/// The k first of `d` (all when fewer), then the first entry repeated up to k.
void take(std::vector<Candidate>& d, int k, std::int64_t* out) {
  const auto take = static_cast<std::ptrdiff_t>(std::min<std::size_t>(static_cast<std::size_t>(k), d.size()));
  std::partial_sort(d.begin(), d.begin() + take, d.end());
  for (std::ptrdiff_t t = 0; t < k; ++t) out[t] = d[static_cast<std::size_t>(t < take ? t : 0)].second;
}

/// The nodes a list is asked for: queries[0 .. count) (node ids within the sample's [begin, end)), the
/// list of queries[t] written at lists + t * k.
struct Queries {
  const std::int64_t* ids;
  std::int64_t count;
};

void brute_force(const float* pos, std::int64_t begin, std::int64_t end, Queries q, int k, std::int64_t* lists) {
#pragma omp parallel if (q.count * (end - begin) > 1 << 14)  // tiny samples on the calling thread
  {
    std::vector<Candidate> d(static_cast<std::size_t>(end - begin));
#pragma omp for schedule(static)
    for (std::int64_t t = 0; t < q.count; ++t) {
      const std::int64_t a = q.ids[t];
      for (std::int64_t j = begin; j < end; ++j) d[static_cast<std::size_t>(j - begin)] = {squared_distance(pos + a * 3, pos + j * 3), j};
      take(d, k, lists + t * k);
    }
  }
}

/// Uniform grid over the nodes [begin, end): about one node per cell. A query scans its cell, then the
/// rings of cells at Chebyshev distance 1, 2, ...; after ring r every unscanned node lies beyond one of
/// the scanned box's inner faces, so once the k-th candidate is nearer than the nearest such face (less
/// a margin far above the rounding of the cell assignment) the k nearest are among the candidates: the
/// result is the brute force's, ties included.
void grid_search(const float* pos, std::int64_t begin, std::int64_t end, Queries q, int k, std::int64_t* lists) {
  const std::int64_t m = end - begin;
  double lo[3], hi[3];
  for (int c = 0; c < 3; ++c) lo[c] = hi[c] = pos[begin * 3 + c];
  for (std::int64_t a = begin; a < end; ++a)
    for (int c = 0; c < 3; ++c) {
      lo[c] = std::min(lo[c], static_cast<double>(pos[a * 3 + c]));
      hi[c] = std::max(hi[c], static_cast<double>(pos[a * 3 + c]));
    }
  const int g = std::max(1, static_cast<int>(std::cbrt(static_cast<double>(m))));
  double width[3], min_width = INFINITY;
  for (int c = 0; c < 3; ++c) {
    width[c] = (hi[c] - lo[c]) / g;
    if (width[c] > 0) min_width = std::min(min_width, width[c]);
  }
  const double margin = 1e-9 * (std::max(std::abs(lo[0]), std::abs(hi[0])) + std::max(std::abs(lo[1]), std::abs(hi[1])) +
                                 std::max(std::abs(lo[2]), std::abs(hi[2])));
  if (!std::isfinite(min_width)) {  // all nodes at one position
    brute_force(pos, begin, end, q, k, lists);
    return;
  }
  auto cell_of = [&](std::int64_t a, int c) {
    if (width[c] <= 0) return 0;
    const auto i = static_cast<int>(std::floor((static_cast<double>(pos[a * 3 + c]) - lo[c]) / width[c]));
    return std::clamp(i, 0, g - 1);
  };
  // Nodes by cell (counting sort; ascending ids within a cell).
  const std::size_t cells = static_cast<std::size_t>(g) * static_cast<std::size_t>(g) * static_cast<std::size_t>(g);
  std::vector<std::int64_t> first(cells + 1, 0), members(static_cast<std::size_t>(m));
  std::vector<std::int32_t> cell(static_cast<std::size_t>(m) * 3);
  for (std::int64_t a = begin; a < end; ++a) {
    std::int32_t* ca = &cell[static_cast<std::size_t>(a - begin) * 3];
    for (int c = 0; c < 3; ++c) ca[c] = cell_of(a, c);
    ++first[(static_cast<std::size_t>(ca[0]) * static_cast<std::size_t>(g) + static_cast<std::size_t>(ca[1])) * static_cast<std::size_t>(g) +
            static_cast<std::size_t>(ca[2]) + 1];
  }
  std::partial_sum(first.begin(), first.end(), first.begin());
  {
    std::vector<std::int64_t> next(first.begin(), first.end() - 1);
    for (std::int64_t a = begin; a < end; ++a) {
      const std::int32_t* ca = &cell[static_cast<std::size_t>(a - begin) * 3];
      const std::size_t id = (static_cast<std::size_t>(ca[0]) * static_cast<std::size_t>(g) + static_cast<std::size_t>(ca[1])) *
                                 static_cast<std::size_t>(g) + static_cast<std::size_t>(ca[2]);
      members[static_cast<std::size_t>(next[id]++)] = a;
    }
  }
#pragma omp parallel
  {
    std::vector<Candidate> d, kth;
#pragma omp for schedule(dynamic, 256)
    for (std::int64_t t = 0; t < q.count; ++t) {
      const std::int64_t a = q.ids[t];
      const std::int32_t* ca = &cell[static_cast<std::size_t>(a - begin) * 3];
      d.clear();
      bool listed = false;
      for (int r = 0;; ++r) {
        // Ring r: the cells with max |offset| == r.
        for (int x = ca[0] - r; x <= ca[0] + r; ++x)
          for (int y = ca[1] - r; y <= ca[1] + r; ++y)
            for (int z = ca[2] - r; z <= ca[2] + r; ++z) {
              if (std::max({std::abs(x - ca[0]), std::abs(y - ca[1]), std::abs(z - ca[2])}) != r) continue;
              if (x < 0 || y < 0 || z < 0 || x >= g || y >= g || z >= g) continue;
              const std::size_t id = (static_cast<std::size_t>(x) * static_cast<std::size_t>(g) + static_cast<std::size_t>(y)) *
                                         static_cast<std::size_t>(g) + static_cast<std::size_t>(z);
              for (std::int64_t e = first[id]; e < first[id + 1]; ++e) {
                const std::int64_t j = members[static_cast<std::size_t>(e)];
                d.emplace_back(squared_distance(pos + a * 3, pos + j * 3), j);
              }
            }
        // Every unscanned node lies beyond a face of the scanned box of cells that is not on the grid's
        // edge: at least `reach` from the query, less a margin far above the rounding of cell_of.
        double reach = INFINITY;
        for (int c = 0; c < 3; ++c) {
          if (width[c] <= 0) continue;
          const double p = static_cast<double>(pos[a * 3 + c]);
          if (ca[c] - r > 0) reach = std::min(reach, p - (lo[c] + (ca[c] - r) * width[c]));
          if (ca[c] + r < g - 1) reach = std::min(reach, lo[c] + (ca[c] + r + 1) * width[c] - p);
        }
        if (reach == INFINITY) break;  // every cell scanned
        reach -= margin;
        if (d.size() >= static_cast<std::size_t>(k) && reach > 0) {
          kth = d;
          std::nth_element(kth.begin(), kth.begin() + (k - 1), kth.end());
          if (kth[static_cast<std::size_t>(k - 1)].first < reach * reach) {  // kth's k first are the list
            std::sort(kth.begin(), kth.begin() + k);
            for (int i = 0; i < k; ++i) lists[t * k + i] = kth[static_cast<std::size_t>(i)].second;
            listed = true;
            break;
          }
        }
      }
      if (!listed) take(d, k, lists + t * k);
    }
  }
}

}  // namespace

std::vector<std::int64_t> nearest_lists(const std::vector<float>& positions, const std::vector<std::int64_t>& batch, int k,
                                        std::int64_t brute_force_up_to) {
  std::vector<std::int64_t> all(batch.size());
  std::iota(all.begin(), all.end(), std::int64_t{0});
  return nearest_lists(positions, batch, k, all, brute_force_up_to);
}

std::vector<std::int64_t> nearest_lists(const std::vector<float>& positions, const std::vector<std::int64_t>& batch, int k,
                                        const std::vector<std::int64_t>& queries, std::int64_t brute_force_up_to) {
  const std::int64_t n = static_cast<std::int64_t>(batch.size());
  std::vector<std::int64_t> lists(queries.size() * static_cast<std::size_t>(k));
  std::size_t t = 0;  // the first query not yet listed
  while (t < queries.size()) {
    std::int64_t begin = queries[t], end = begin;  // the query's sample: [begin, end)
    while (begin > 0 && batch[static_cast<std::size_t>(begin) - 1] == batch[static_cast<std::size_t>(end)]) --begin;
    while (end < n && batch[static_cast<std::size_t>(end)] == batch[static_cast<std::size_t>(begin)]) ++end;
    std::size_t u = t;
    while (u < queries.size() && queries[u] < end) ++u;
    const Queries q{queries.data() + t, static_cast<std::int64_t>(u - t)};
    std::int64_t* out = lists.data() + t * static_cast<std::size_t>(k);
    if (end - begin <= brute_force_up_to) brute_force(positions.data(), begin, end, q, k, out);
    else grid_search(positions.data(), begin, end, q, k, out);
    t = u;
  }
  return lists;
}

std::vector<std::int64_t> sibling_lists(const Hierarchy& h, int level, int k) {
  return nearest_lists(h.level_positions[static_cast<std::size_t>(level)], h.level_batch[static_cast<std::size_t>(level)], k);
}

}  // namespace surrogate::sequoia
