// Nearest same-sample nodes of a level: the sibling lists and PointConv's kNN (share/docs/sequoia.md,
// "Neighbour order"): squared distances of the float32 positions in double, ties by ascending id. Small
// samples by brute force, larger ones on a uniform grid, the device's search (surrogate/kernels/
// grid_nearest.hpp; the same lists); a k above its limit through the graph library's k-d tree.
#include "neighbours.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>

#include "surrogate/balltree.hpp"
#include "surrogate/graph.hpp"
#include "surrogate/kernels/grid_nearest.hpp"

namespace surrogate::sequoia {
namespace {

using Candidate = std::pair<double, std::int64_t>;  // squared distance, node id: compared in that order

namespace gn = kernels::grid_nearest;

double squared_distance(const float* a, const float* b) {
  const double q[3] = {static_cast<double>(a[0]), static_cast<double>(a[1]), static_cast<double>(a[2])};
  return gn::squared_distance(q, b);
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

/// Larger samples on a uniform grid (grid_nearest.hpp, as on the device), made finer where the nodes crowd
/// few cells (a surface): the nodes binned by cell with a counting sort, their positions copied next to
/// their neighbours', the queries in parallel.
void grid_search(const float* pos, std::int64_t begin, std::int64_t end, Queries q, int k, std::int64_t* lists) {
  const std::int64_t n = end - begin;
  float mn[3], mx[3];
  for (int c = 0; c < 3; ++c) mn[c] = mx[c] = pos[begin * 3 + c];
  for (std::int64_t j = begin; j < end; ++j)
    for (int c = 0; c < 3; ++c) {
      mn[c] = std::fmin(mn[c], pos[j * 3 + c]);
      mx[c] = std::fmax(mx[c], pos[j * 3 + c]);
    }
  gn::Grid g = gn::make_grid(mn, mx, n);
  std::vector<std::int64_t> start, cell(static_cast<std::size_t>(n));
  const auto bin = [&] {  // the nodes per cell, at start[cell + 1]
    start.assign(static_cast<std::size_t>(g.cells()) + 1, 0);
    for (std::int64_t j = 0; j < n; ++j) {
      cell[static_cast<std::size_t>(j)] = gn::cell_of(g, pos + (begin + j) * 3);
      ++start[static_cast<std::size_t>(cell[static_cast<std::size_t>(j)]) + 1];
    }
  };
  bin();
  const auto occupied = static_cast<long long>(std::count_if(start.begin() + 1, start.end(), [](std::int64_t c) { return c; }));
  if (const gn::Grid finer = gn::refine_grid(g, mx, n, occupied); finer.h != g.h) {
    g = finer;
    bin();
  }
  std::partial_sum(start.begin(), start.end(), start.begin());
  std::vector<std::int64_t> cursor(start.begin(), start.end() - 1), id(static_cast<std::size_t>(n));
  std::vector<float> at(static_cast<std::size_t>(n) * 3);
  for (std::int64_t j = 0; j < n; ++j) {
    const auto slot = static_cast<std::size_t>(cursor[static_cast<std::size_t>(cell[static_cast<std::size_t>(j)])]++);
    id[slot] = begin + j;
    std::copy_n(pos + (begin + j) * 3, 3, at.begin() + static_cast<std::ptrdiff_t>(slot * 3));
  }
  const int kk = static_cast<int>(std::min<std::int64_t>(k, n));
  // The queries in cell order, so that a thread's consecutive queries read the same cells from cache (the
  // lists go to the queries' own places: the same lists in any order).
  std::vector<std::int64_t> order(static_cast<std::size_t>(q.count));
  {
    const auto cell_of_query = [&](std::int64_t t) { return static_cast<std::size_t>(cell[static_cast<std::size_t>(q.ids[t] - begin)]); };
    std::vector<std::int64_t> next(static_cast<std::size_t>(g.cells()) + 1, 0);
    for (std::int64_t t = 0; t < q.count; ++t) ++next[cell_of_query(t) + 1];
    std::partial_sum(next.begin(), next.end(), next.begin());
    for (std::int64_t t = 0; t < q.count; ++t) order[static_cast<std::size_t>(next[cell_of_query(t)]++)] = t;
  }
#pragma omp parallel for schedule(dynamic, 64) if (q.count > 256)
  for (std::int64_t s = 0; s < q.count; ++s) {
    const std::int64_t t = order[static_cast<std::size_t>(s)];
    const float* p = pos + q.ids[t] * 3;
    const double qd[3] = {static_cast<double>(p[0]), static_cast<double>(p[1]), static_cast<double>(p[2])};
    gn::Best best;
    gn::search(g, qd, kk, best, [&](long long c) {
      for (auto slot = start[static_cast<std::size_t>(c)]; slot < start[static_cast<std::size_t>(c) + 1]; ++slot)
        best.consider(gn::squared_distance(qd, at.data() + slot * 3), id[static_cast<std::size_t>(slot)], kk);
    });
    for (int j = 0; j < k; ++j) lists[t * k + j] = best.id[j < kk ? j : 0];
  }
}

/// k above the grid's limit: the graph library's k-d tree (surrogate/graph.hpp) on the positions in double:
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
    else if (k <= gn::kMaxK) grid_search(positions.data(), begin, end, q, k, out);
    else tree_search(positions.data(), begin, end, q, k, out);
    t = u;
  }
  return lists;
}

std::vector<std::int64_t> sibling_lists(const Hierarchy& h, int level, int k) {
  return nearest_lists(h.level_positions[static_cast<std::size_t>(level)], h.level_batch[static_cast<std::size_t>(level)], k);
}

}  // namespace surrogate::sequoia
