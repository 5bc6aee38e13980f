// Track candidates from the HEPT embeddings and their scores against the truth (README.md, "Track
// finding" and "Figures"): a radius graph in the embedding space (L2), its connected components, the
// double-majority matching, and the official code's accuracy@0.9 (k nearest neighbours in L2).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <queue>
#include <utility>
#include <vector>

namespace hept_tracking {

/// Exact neighbour queries on n points of `dim` values (row-major) by a sweep along the coordinate of
/// largest variance: the points sorted by it (ties by index), a query scans outwards until the gap along
/// that coordinate alone exceeds the radius (the current k-th distance).
class NeighbourSearch {
 public:
  NeighbourSearch(const std::vector<double>& points, int dim) : p_(points), dim_(dim) {
    const auto n = static_cast<std::int64_t>(points.size()) / dim;
    double best = -1.0;
    for (int d = 0; d < dim; ++d) {
      double mean = 0.0, var = 0.0;
      for (std::int64_t i = 0; i < n; ++i) mean += at(i, d);
      mean /= static_cast<double>(std::max<std::int64_t>(n, 1));
      for (std::int64_t i = 0; i < n; ++i) var += (at(i, d) - mean) * (at(i, d) - mean);
      if (var > best) best = var, axis_ = d;
    }
    order_.resize(static_cast<std::size_t>(n));
    std::iota(order_.begin(), order_.end(), std::int64_t{0});
    std::sort(order_.begin(), order_.end(), [&](std::int64_t a, std::int64_t b) {
      return at(a, axis_) != at(b, axis_) ? at(a, axis_) < at(b, axis_) : a < b;
    });
    position_.resize(order_.size());
    for (std::size_t s = 0; s < order_.size(); ++s)
      position_[static_cast<std::size_t>(order_[s])] = static_cast<std::int64_t>(s);
  }

  double distance2(std::int64_t i, std::int64_t j) const {
    double s = 0.0;
    for (int d = 0; d < dim_; ++d) s += (at(i, d) - at(j, d)) * (at(i, d) - at(j, d));
    return s;
  }

  /// Every pair (i, j), i ≠ j, at distance ≤ radius, each once.
  template <class F>
  void pairs_within(double radius, F&& f) const {
    for (std::size_t s = 0; s < order_.size(); ++s) {
      const std::int64_t i = order_[s];
      for (std::size_t t = s + 1; t < order_.size() && at(order_[t], axis_) - at(i, axis_) <= radius; ++t)
        if (distance2(i, order_[t]) <= radius * radius) f(i, order_[t]);
    }
  }

  /// The k nearest other points of i, nearest first (ties by index).
  std::vector<std::int64_t> nearest(std::int64_t i, int k) const {
    using Entry = std::pair<double, std::int64_t>;  // (distance², index); the heap's top is the worst kept
    std::priority_queue<Entry> heap;
    const auto s = static_cast<std::size_t>(position_[static_cast<std::size_t>(i)]);
    std::size_t lo = s, hi = s + 1;
    bool left = lo > 0, right = hi < order_.size();
    while (left || right) {
      for (int side = 0; side < 2; ++side) {
        bool& open = side == 0 ? left : right;
        if (!open) continue;
        const std::int64_t j = side == 0 ? order_[lo - 1] : order_[hi];
        const double gap = at(j, axis_) - at(i, axis_);
        if (static_cast<int>(heap.size()) == k && gap * gap > heap.top().first) {
          open = false;
          continue;
        }
        const Entry e{distance2(i, j), j};
        if (static_cast<int>(heap.size()) < k) heap.push(e);
        else if (e < heap.top()) heap.pop(), heap.push(e);
        if (side == 0) open = --lo > 0;
        else open = ++hi < order_.size();
      }
    }
    std::vector<std::int64_t> out(heap.size());
    for (auto r = out.rbegin(); r != out.rend(); ++r) *r = heap.top().second, heap.pop();
    return out;
  }

 private:
  double at(std::int64_t i, int d) const { return p_[static_cast<std::size_t>(i * dim_ + d)]; }
  const std::vector<double>& p_;
  int dim_, axis_ = 0;
  std::vector<std::int64_t> order_, position_;
};

/// Connected components of the radius graph: the candidate of every hit, numbered 0, 1, … in the order
/// of each component's first hit, or −1 for components of fewer than `min_hits` hits (not a candidate).
inline std::vector<std::int64_t> cluster(const NeighbourSearch& search, std::int64_t n, double radius, int min_hits) {
  std::vector<std::int64_t> parent(static_cast<std::size_t>(n));
  std::iota(parent.begin(), parent.end(), std::int64_t{0});
  const auto root = [&](std::int64_t i) {
    while (parent[static_cast<std::size_t>(i)] != i)
      i = parent[static_cast<std::size_t>(i)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(i)])];
    return i;
  };
  search.pairs_within(radius, [&](std::int64_t i, std::int64_t j) {
    const std::int64_t a = root(i), b = root(j);
    if (a != b) parent[static_cast<std::size_t>(std::max(a, b))] = std::min(a, b);  // the smaller index is the root
  });
  std::vector<std::int64_t> size(static_cast<std::size_t>(n), 0), label(static_cast<std::size_t>(n), -1),
      id(static_cast<std::size_t>(n), -1);
  for (std::int64_t i = 0; i < n; ++i) ++size[static_cast<std::size_t>(root(i))];
  std::int64_t next = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto r = static_cast<std::size_t>(root(i));
    if (size[r] < min_hits) continue;
    if (id[r] < 0) id[r] = next++;
    label[static_cast<std::size_t>(i)] = id[r];
  }
  return label;
}

/// The scores of README.md, "Figures".
struct Scores {
  std::int64_t particles = 0, found = 0;            // reconstructable particles (≥ 3 hits), those found
  std::int64_t particles_hard = 0, found_hard = 0;  // the same with pT > 0.9 GeV
  std::int64_t candidates = 0, matched = 0;         // candidates, those matched to a particle
  double accuracy_09 = 0.0;                         // the official accuracy@0.9
  std::int64_t accuracy_hits = 0;                   // hits it averages over
};

/// Scores of the candidates `label` (cluster()) against the true particles (0 = noise) of the n hits.
inline Scores score(const NeighbourSearch& search, const std::vector<std::int64_t>& label,
                    const std::vector<std::int64_t>& particle, const std::vector<double>& pt) {
  const auto n = static_cast<std::int64_t>(label.size());
  std::map<std::int64_t, std::int64_t> hits_of;                          // particle → hits
  std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t> shared;  // (candidate, particle) → hits
  std::map<std::int64_t, std::int64_t> size_of;                          // candidate → hits
  std::map<std::int64_t, double> pt_of;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (particle[k] != 0) ++hits_of[particle[k]], pt_of[particle[k]] = pt[k];
    if (label[k] >= 0) ++size_of[label[k]], ++shared[{label[k], particle[k]}];
  }
  std::map<std::int64_t, bool> found;
  Scores s;
  s.candidates = static_cast<std::int64_t>(size_of.size());
  for (const auto& [key, count] : shared) {
    const auto [candidate, p] = key;
    // Double majority: more than half of the candidate is p, and it holds at least half of p's hits.
    if (p == 0 || 2 * count <= size_of[candidate] || 2 * count < hits_of[p]) continue;
    ++s.matched;  // at most one particle holds more than half of a candidate
    found[p] = true;
  }
  for (const auto& [p, hits] : hits_of) {
    if (hits < 3) continue;
    const bool hard = pt_of[p] > 0.9, f = found.count(p) > 0;
    ++s.particles, s.found += f;
    if (hard) ++s.particles_hard, s.found_hard += f;
  }
  // accuracy@0.9 (src/utils/metrics.py): for each hit of a reconstructable particle with pT > 0.9 GeV, the
  // fraction of its k = hits − 1 nearest other hits in embedding space (L2) that belong to its particle.
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    if (particle[k] == 0 || pt[k] <= 0.9 || hits_of[particle[k]] < 3) continue;
    const auto want = static_cast<int>(hits_of[particle[k]] - 1);
    int same = 0;
    for (const std::int64_t j : search.nearest(i, want)) same += particle[static_cast<std::size_t>(j)] == particle[k];
    sum += static_cast<double>(same) / want;
    ++s.accuracy_hits;
  }
  s.accuracy_09 = s.accuracy_hits > 0 ? sum / static_cast<double>(s.accuracy_hits) : 0.0;
  return s;
}

}  // namespace hept_tracking
