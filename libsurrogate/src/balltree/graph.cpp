// kNN and radius graphs (surrogate/graph.hpp) through a k-d tree per sample. Distances are computed in
// the coordinates' type exactly as the brute-force definition (compiled without fused multiply-add,
// libsurrogate/CMakeLists.txt); the tree only prunes boxes that provably hold no candidate, with a
// margin for that rounding, so the result is the brute-force result whatever the tree looks like.
#include "surrogate/graph.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "graph_distance.hpp"
#include "surrogate/error.hpp"

namespace surrogate::graph {
namespace {

constexpr int kLeafSize = 8;

template <class Real>
struct KdTree {
  struct Node {
    std::int64_t begin = 0, end = 0;  // range of `order`
    std::int32_t left = -1, right = -1;
    std::int32_t axis = -1;  // the coordinate the children were split along
  };
  const Real* points = nullptr;  // the sample's first point (row-major)
  int dim = 0;
  detail::RoundingMargin<Real> margin{dim};  // after dim: initialised from it
  std::vector<std::int64_t> order;  // local point indices, leaves are contiguous ranges
  std::vector<Real> sorted;         // the points' coordinates in `order`: leaves scan contiguous rows
  std::vector<Node> nodes;
  std::vector<double> lo, hi;  // bounding box per node (dim values each)

  KdTree(const Real* p, int d, std::int64_t n) : points(p), dim(d), order(static_cast<std::size_t>(n)) {
    for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
    nodes.reserve(static_cast<std::size_t>(2 * (n / kLeafSize + 1)));
    build(0, n);
    sorted.resize(static_cast<std::size_t>(n) * static_cast<std::size_t>(d));
    for (std::int64_t s = 0; s < n; ++s)
      std::copy(p + order[static_cast<std::size_t>(s)] * d, p + (order[static_cast<std::size_t>(s)] + 1) * d,
                sorted.begin() + s * d);
  }

  Real coord(std::int64_t i, int c) const { return points[i * dim + c]; }

  std::int32_t build(std::int64_t begin, std::int64_t end) {
    const auto id = static_cast<std::int32_t>(nodes.size());
    nodes.push_back({begin, end, -1, -1, -1});
    lo.resize(lo.size() + static_cast<std::size_t>(dim), std::numeric_limits<double>::infinity());
    hi.resize(hi.size() + static_cast<std::size_t>(dim), -std::numeric_limits<double>::infinity());
    double* l = &lo[static_cast<std::size_t>(id) * dim];
    double* h = &hi[static_cast<std::size_t>(id) * dim];
    for (std::int64_t s = begin; s < end; ++s)
      for (int c = 0; c < dim; ++c) {
        const double v = coord(order[static_cast<std::size_t>(s)], c);
        l[c] = std::min(l[c], v);
        h[c] = std::max(h[c], v);
      }
    if (end - begin <= kLeafSize) return id;
    int split = 0;
    for (int c = 1; c < dim; ++c)
      if (h[c] - l[c] > h[split] - l[split]) split = c;
    if (!(h[split] > l[split])) return id;  // all points coincide: a leaf of any size
    const std::int64_t mid = begin + (end - begin) / 2;
    std::nth_element(order.begin() + begin, order.begin() + mid, order.begin() + end,
                     [&](std::int64_t a, std::int64_t b) { return coord(a, split) < coord(b, split); });
    const std::int32_t left = build(begin, mid);
    const std::int32_t right = build(mid, end);
    nodes[static_cast<std::size_t>(id)].left = left;
    nodes[static_cast<std::size_t>(id)].right = right;
    nodes[static_cast<std::size_t>(id)].axis = split;
    return id;
  }

  /// A lower bound of the rounded squared distance from q to any point of the node's box.
  double lower_bound(std::int32_t node, const Real* q) const {
    const double* l = &lo[static_cast<std::size_t>(node) * dim];
    const double* h = &hi[static_cast<std::size_t>(node) * dim];
    double sum = 0.0;
    for (int c = 0; c < dim; ++c) {
      const double v = q[c];
      const double d = v < l[c] ? l[c] - v : (v > h[c] ? v - h[c] : 0.0);
      sum += d * d;
    }
    return margin.rounded_below(sum);
  }
};

using detail::squared_distance;

template <class Real>
using Candidate = std::pair<Real, std::int64_t>;  // (squared distance, local index): lexicographic order

/// Distance from v to the interval [l, h] (0 inside).
inline double gap(double v, double l, double h) { return v < l ? l - v : (v > h ? v - h : 0.0); }

/// The k nearest (distance, index) of q among the tree's points, excluding `skip` (-1: none), sorted.
/// The candidates are kept sorted (a new one shifts the larger ones up): k is small, and the k-th, the
/// pruning bound, is always at hand. A node's bound is the sum over coordinates of the squared distance
/// to the nearest interval known to enclose it: the child's own along its parent's split coordinate,
/// the ancestors' along the others (one coordinate changes per level). Dim: the dimension when fixed at
/// compile time (0: t.dim).
template <class Real, int Dim = 0>
void knn_query(const KdTree<Real>& t, const Real* q, int k, std::int64_t skip, std::vector<Candidate<Real>>& best) {
  best.resize(static_cast<std::size_t>(k));
  std::size_t found = 0;  // best[0, found): the candidates so far
  const auto kk = static_cast<std::size_t>(k);
  const int dim = Dim > 0 ? Dim : t.dim;
  double fixed[8];
  std::vector<double> wide;
  double* off = dim <= 8 ? fixed : (wide.resize(static_cast<std::size_t>(dim)), wide.data());
  for (int c = 0; c < dim; ++c) off[c] = gap(static_cast<double>(q[c]), t.lo[static_cast<std::size_t>(c)], t.hi[static_cast<std::size_t>(c)]);
  const auto bound_of = [&] {
    double sum = 0.0;
    for (int c = 0; c < dim; ++c) sum += off[c] * off[c];
    return t.margin.rounded_below(sum);
  };
  auto visit = [&](auto&& self, std::int32_t node, double bound) -> void {
    if (found == kk && bound > static_cast<double>(best[kk - 1].first)) return;
    const auto& nd = t.nodes[static_cast<std::size_t>(node)];
    if (nd.left < 0) {
      for (std::int64_t s = nd.begin; s < nd.end; ++s) {
        const std::int64_t j = t.order[static_cast<std::size_t>(s)];
        if (j == skip) continue;
        const Candidate<Real> c{squared_distance(q, t.sorted.data() + s * dim, dim), j};
        std::size_t at = found;
        if (at < kk) {
          ++found;
        } else if (c < best[kk - 1]) {
          --at;
        } else {
          continue;
        }
        for (; at > 0 && c < best[at - 1]; --at) best[at] = best[at - 1];
        best[at] = c;
      }
      return;
    }
    const int a = nd.axis;
    const double v = q[a], was = off[a];
    const auto along = [&](std::int32_t child) {
      const std::size_t at = static_cast<std::size_t>(child) * static_cast<std::size_t>(dim) + static_cast<std::size_t>(a);
      return gap(v, t.lo[at], t.hi[at]);
    };
    const double gl = along(nd.left), gr = along(nd.right);
    off[a] = gl;
    const double bl = bound_of();
    off[a] = gr;
    const double br = bound_of();
    const bool left_first = bl <= br;
    off[a] = left_first ? gl : gr;
    self(self, left_first ? nd.left : nd.right, left_first ? bl : br);
    off[a] = left_first ? gr : gl;
    self(self, left_first ? nd.right : nd.left, left_first ? br : bl);
    off[a] = was;
  };
  visit(visit, 0, bound_of());
  best.resize(found);
}

template <class Real>
void radius_query(const KdTree<Real>& t, const Real* q, Real r2, std::int64_t skip, std::vector<Candidate<Real>>& out) {
  out.clear();
  auto visit = [&](auto&& self, std::int32_t node) -> void {
    if (t.lower_bound(node, q) >= static_cast<double>(r2)) return;
    const auto& nd = t.nodes[static_cast<std::size_t>(node)];
    if (nd.left < 0) {
      for (std::int64_t s = nd.begin; s < nd.end; ++s) {
        const std::int64_t j = t.order[static_cast<std::size_t>(s)];
        if (j == skip) continue;
        const Real d2 = squared_distance(q, t.sorted.data() + s * t.dim, t.dim);
        if (d2 < r2) out.push_back({d2, j});
      }
      return;
    }
    self(self, nd.left);
    self(self, nd.right);
  };
  visit(visit, 0);
  std::sort(out.begin(), out.end());
}

template <class Real>
void check_points(std::span<const Real> positions, int dim, const balltree::Batch& batch) {
  if (dim < 1) throw Error(ErrorCode::invalid_argument, "graph: dim must be at least 1, got " + std::to_string(dim));
  if (static_cast<std::int64_t>(positions.size()) != batch.points() * dim)
    throw Error(ErrorCode::input, "graph: positions has " + std::to_string(positions.size()) + " values, expected " +
                                      std::to_string(batch.points()) + " points x " + std::to_string(dim));
  std::int64_t bad = 0;
  for (const Real v : positions) bad += !std::isfinite(v);
  if (bad > 0) throw Error(ErrorCode::input, "graph: positions has " + std::to_string(bad) + " NaN/Inf coordinate(s)");
}

/// Runs `query(tree, local point, candidates)` for every receiver (the range, or its subset) and lists
/// the edges receiver by receiver (a sample's k-d tree is built only when it holds a receiver).
template <class Real, class Query>
Edges build_edges(std::span<const Real> positions, int dim, const balltree::Batch& batch, int threads,
                  ReceiverRange receivers, Query query) {
  const std::int64_t n = batch.points();
  const std::int64_t first = receivers.begin, last = receivers.end < 0 ? n : receivers.end;
  if (first < 0 || first > last || last > n)
    throw Error(ErrorCode::invalid_argument, "graph: receivers [" + std::to_string(first) + ", " + std::to_string(last) +
                                                 ") is not a range of the " + std::to_string(n) + " points");
  const std::span<const std::int64_t> subset = receivers.subset;
  for (std::size_t m = 0; m < subset.size(); ++m)
    if (subset[m] < first || subset[m] >= last || (m > 0 && subset[m] <= subset[m - 1]))
      throw Error(ErrorCode::invalid_argument, "graph: the receivers' subset must increase within [" + std::to_string(first) +
                                                   ", " + std::to_string(last) + "), entry " + std::to_string(m) + " is " +
                                                   std::to_string(subset[m]));
  const bool all = subset.empty();
  const std::int64_t count = all ? last - first : static_cast<std::int64_t>(subset.size());
  auto receiver = [&](std::int64_t m) { return all ? first + m : subset[static_cast<std::size_t>(m)]; };
  auto first_at_or_after = [&](std::int64_t point) {  // the first receiver number whose point is >= point
    if (all) return std::clamp<std::int64_t>(point - first, 0, count);
    return static_cast<std::int64_t>(std::lower_bound(subset.begin(), subset.end(), point) - subset.begin());
  };
  std::vector<std::vector<std::int64_t>> sources(static_cast<std::size_t>(count));
  for (std::int64_t b = 0; b < batch.samples(); ++b) {
    const std::int64_t begin = batch.begin(b), size = batch.size(b);
    const std::int64_t m0 = first_at_or_after(begin), m1 = first_at_or_after(begin + size);
    if (m0 >= m1) continue;
    const KdTree<Real> tree(positions.data() + begin * dim, dim, size);
    const int nt = threads > 0 ? threads : omp_get_max_threads();
#pragma omp parallel num_threads(nt)
    {
      std::vector<Candidate<Real>> found;
#pragma omp for schedule(dynamic, 64)
      for (std::int64_t m = m0; m < m1; ++m) {
        query(tree, receiver(m) - begin, found);
        auto& list = sources[static_cast<std::size_t>(m)];
        list.reserve(found.size());
        for (const auto& c : found) list.push_back(begin + c.second);
      }
    }
  }
  std::int64_t total = 0;
  for (const auto& l : sources) total += static_cast<std::int64_t>(l.size());
  Edges edges;
  edges.index.resize(static_cast<std::size_t>(2 * total));
  std::int64_t e = 0;
  for (std::int64_t m = 0; m < count; ++m)
    for (const std::int64_t j : sources[static_cast<std::size_t>(m)]) {
      edges.index[static_cast<std::size_t>(e)] = j;
      edges.index[static_cast<std::size_t>(total + e)] = receiver(m);
      ++e;
    }
  return edges;
}

template <class Real>
Edges knn_impl(std::span<const Real> positions, int dim, const balltree::Batch& batch, int k, bool loop, int threads,
               ReceiverRange receivers) {
  if (k < 1) throw Error(ErrorCode::invalid_argument, "knn_graph: k must be at least 1, got " + std::to_string(k));
  check_points(positions, dim, batch);
  return build_edges<Real>(positions, dim, batch, threads, receivers, [&](const KdTree<Real>& t, std::int64_t i, auto& found) {
    if (dim == 3) knn_query<Real, 3>(t, t.points + i * dim, k, loop ? -1 : i, found);
    else knn_query(t, t.points + i * dim, k, loop ? -1 : i, found);
  });
}

template <class Real>
Edges radius_impl(std::span<const Real> positions, int dim, const balltree::Batch& batch, double r,
                  int max_num_neighbors, bool loop, int threads, ReceiverRange receivers) {
  if (!(r > 0) || !std::isfinite(r))
    throw Error(ErrorCode::invalid_argument, "radius_graph: r must be positive and finite, got " + std::to_string(r));
  if (max_num_neighbors < 1)
    throw Error(ErrorCode::invalid_argument, "radius_graph: max_num_neighbors must be at least 1, got " +
                                                 std::to_string(max_num_neighbors));
  check_points(positions, dim, batch);
  const Real r2 = static_cast<Real>(r * r);
  return build_edges<Real>(positions, dim, batch, threads, receivers, [&](const KdTree<Real>& t, std::int64_t i, auto& found) {
    radius_query(t, t.points + i * dim, r2, loop ? -1 : i, found);
    if (static_cast<int>(found.size()) > max_num_neighbors) found.resize(static_cast<std::size_t>(max_num_neighbors));
  });
}

}  // namespace

Edges knn_graph(std::span<const float> positions, int dim, const balltree::Batch& batch, int k, bool loop, int threads,
                ReceiverRange receivers) {
  return knn_impl(positions, dim, batch, k, loop, threads, receivers);
}
Edges knn_graph(std::span<const double> positions, int dim, const balltree::Batch& batch, int k, bool loop, int threads,
                ReceiverRange receivers) {
  return knn_impl(positions, dim, batch, k, loop, threads, receivers);
}
Edges radius_graph(std::span<const float> positions, int dim, const balltree::Batch& batch, double r,
                   int max_num_neighbors, bool loop, int threads, ReceiverRange receivers) {
  return radius_impl(positions, dim, batch, r, max_num_neighbors, loop, threads, receivers);
}
Edges radius_graph(std::span<const double> positions, int dim, const balltree::Batch& batch, double r,
                   int max_num_neighbors, bool loop, int threads, ReceiverRange receivers) {
  return radius_impl(positions, dim, batch, r, max_num_neighbors, loop, threads, receivers);
}

}  // namespace surrogate::graph
