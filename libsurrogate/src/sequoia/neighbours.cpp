// Nearest same-sample nodes of a level: the sibling lists and PointConv's kNN (share/docs/sequoia.md,
// "Neighbour order"): squared distances of the float32 positions in double, ties by ascending id. Small
// samples by brute force, larger ones through the graph library's k-d tree (the same lists).
#include "neighbours.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "surrogate/balltree.hpp"
#include "surrogate/graph.hpp"

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

/// Larger samples through the graph library's k-d tree (surrogate/graph.hpp) on the positions in double:
/// its squared distance, sum_c (a_c - b_c)^2 accumulated from c = 0 without fused multiply-add, is this
/// rule's, and its ties go to the smaller index, so the lists are the brute force's.
void tree_search(const float* pos, std::int64_t begin, std::int64_t end, Queries q, int k, std::int64_t* lists) {
  const std::vector<double> at(pos + begin * 3, pos + end * 3);
  std::vector<std::int64_t> local(static_cast<std::size_t>(q.count));
  for (std::int64_t t = 0; t < q.count; ++t) local[static_cast<std::size_t>(t)] = q.ids[t] - begin;
  const graph::Edges e = graph::knn_graph(std::span<const double>(at), 3, balltree::Batch::single(end - begin), k, true, 0,
                                          graph::ReceiverRange{0, -1, local});
  const std::int64_t found = std::min<std::int64_t>(k, end - begin);  // per query, nearest first
  for (std::int64_t t = 0; t < q.count; ++t)
    for (int j = 0; j < k; ++j) lists[t * k + j] = begin + e.index[static_cast<std::size_t>(t * found + (j < found ? j : 0))];
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
    else tree_search(positions.data(), begin, end, q, k, out);
    t = u;
  }
  return lists;
}

std::vector<std::int64_t> sibling_lists(const Hierarchy& h, int level, int k) {
  return nearest_lists(h.level_positions[static_cast<std::size_t>(level)], h.level_batch[static_cast<std::size_t>(level)], k);
}

}  // namespace surrogate::sequoia
