// Nearest same-sample nodes of a level: the sibling lists and PointConv's kNN (share/docs/sequoia.md,
// "Neighbour order"): squared distances of the float32 positions in double, ties by ascending id. Small
// samples by brute force, larger ones through a k-d tree (the same lists).
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

/// A query's k best candidates so far, ascending by (distance, id): its list once the search ends.
class Candidates {
 public:
  explicit Candidates(int k) : k_(k), d_(static_cast<std::size_t>(k)), id_(static_cast<std::size_t>(k)) {}
  void clear() { n_ = 0; }
  double bound() const { return n_ < k_ ? INFINITY : d_[static_cast<std::size_t>(k_ - 1)]; }  // the k-th distance
  void offer(double dist, std::int64_t id) {
    int t = n_;  // the slot freed: the next one, or the k-th's
    if (n_ == k_) {
      if (!before(dist, id, --t)) return;
    } else {
      ++n_;
    }
    for (; t > 0 && before(dist, id, t - 1); --t) {
      d_[static_cast<std::size_t>(t)] = d_[static_cast<std::size_t>(t - 1)];
      id_[static_cast<std::size_t>(t)] = id_[static_cast<std::size_t>(t - 1)];
    }
    d_[static_cast<std::size_t>(t)] = dist;
    id_[static_cast<std::size_t>(t)] = id;
  }
  /// The list: the k best, or all of them followed by the first repeated up to k.
  void write(std::int64_t* out) const {
    for (int t = 0; t < k_; ++t) out[t] = id_[static_cast<std::size_t>(t < n_ ? t : 0)];
  }

 private:
  bool before(double dist, std::int64_t id, int t) const {
    const double o = d_[static_cast<std::size_t>(t)];
    return dist < o || (dist == o && id < id_[static_cast<std::size_t>(t)]);
  }
  int k_, n_ = 0;
  std::vector<double> d_;
  std::vector<std::int64_t> id_;
};

/// A k-d tree over the nodes [begin, end): ranges of a permutation split at their middle element along
/// the axis of largest extent, down to leaves of at most kLeaf nodes. Every node of a range's first half
/// has a coordinate at most its split value, every node of the second half at least. A query descends
/// to the nearer half first and visits the farther one unless that half's box (bounded by the splitting
/// planes on the way down) lies beyond its k-th candidate; the box's distance loses a margin far above
/// the rounding of the squared distances per axis, so the lists are the brute force's, ties included,
/// whatever the cloud's shape (surfaces, clusters, repeats).
class KdTree {
 public:
  KdTree(const float* pos, std::int64_t begin, std::int64_t end) : m_(end - begin) {
    ids_.resize(static_cast<std::size_t>(m_));
    std::iota(ids_.begin(), ids_.end(), begin);
    double scale = 0.0;
    for (std::int64_t a = begin; a < end; ++a)
      for (int c = 0; c < 3; ++c) scale = std::max(scale, std::abs(static_cast<double>(pos[a * 3 + c])));
    margin_ = 3e-9 * scale;
    split_.resize(static_cast<std::size_t>(m_));  // split_[mid] belongs to the range whose middle is mid
    axis_.resize(static_cast<std::size_t>(m_));
    build(pos, 0, m_);
    at_.resize(static_cast<std::size_t>(m_) * 3);
    for (std::size_t e = 0; e < ids_.size(); ++e)
      for (std::size_t c = 0; c < 3; ++c) at_[e * 3 + c] = static_cast<double>(pos[ids_[e] * 3 + static_cast<std::int64_t>(c)]);
  }

  void search(const float* p, Candidates& best) const {
    const double q[3] = {p[0], p[1], p[2]};
    double off[3] = {0.0, 0.0, 0.0};
    visit(q, 0, m_, off, 0.0, best);
  }

 private:
  static constexpr std::int64_t kLeaf = 8;

  void build(const float* pos, std::int64_t lo, std::int64_t hi) {
    if (hi - lo <= kLeaf) return;
    float mn[3], mx[3];
    for (int c = 0; c < 3; ++c) mn[c] = mx[c] = pos[ids_[static_cast<std::size_t>(lo)] * 3 + c];
    for (std::int64_t e = lo; e < hi; ++e)
      for (int c = 0; c < 3; ++c) {
        const float v = pos[ids_[static_cast<std::size_t>(e)] * 3 + c];
        mn[c] = std::min(mn[c], v);
        mx[c] = std::max(mx[c], v);
      }
    int axis = 0;
    for (int c = 1; c < 3; ++c)
      if (mx[c] - mn[c] > mx[axis] - mn[axis]) axis = c;
    const std::int64_t mid = lo + (hi - lo) / 2;
    const auto first = ids_.begin();
    std::nth_element(first + lo, first + mid, first + hi, [&](std::int64_t u, std::int64_t v) {
      const float a = pos[u * 3 + axis], b = pos[v * 3 + axis];
      return a < b || (a == b && u < v);
    });
    split_[static_cast<std::size_t>(mid)] = pos[ids_[static_cast<std::size_t>(mid)] * 3 + axis];
    axis_[static_cast<std::size_t>(mid)] = static_cast<std::int8_t>(axis);
    build(pos, lo, mid);
    build(pos, mid, hi);
  }

  /// Visits the range [lo, hi), whose box lies at least off[c] from the query along each axis c and at
  /// least `box` (the sum of their squares) away.
  void visit(const double q[3], std::int64_t lo, std::int64_t hi, double off[3], double box, Candidates& best) const {
    if (hi - lo <= kLeaf) {
      for (auto e = static_cast<std::size_t>(lo); e < static_cast<std::size_t>(hi); ++e) {
        const double* pj = &at_[e * 3];
        const double t0 = q[0] - pj[0], t1 = q[1] - pj[1], t2 = q[2] - pj[2];
        double dist = 0.0;  // squared_distance's sum, in its order
        dist += t0 * t0;
        dist += t1 * t1;
        dist += t2 * t2;
        best.offer(dist, ids_[e]);
      }
      return;
    }
    const std::int64_t mid = lo + (hi - lo) / 2;
    const int axis = axis_[static_cast<std::size_t>(mid)];
    const double gap = q[axis] - split_[static_cast<std::size_t>(mid)];
    const bool left_first = gap <= 0;
    visit(q, left_first ? lo : mid, left_first ? mid : hi, off, box, best);
    const double was = off[axis], now = std::max(was, std::abs(gap) - margin_);
    const double far = box - was * was + now * now;
    if (far <= best.bound()) {
      off[axis] = now;
      visit(q, left_first ? mid : lo, left_first ? hi : mid, off, far, best);
      off[axis] = was;
    }
  }

  std::int64_t m_;
  double margin_ = 0.0;
  std::vector<std::int64_t> ids_;  // the nodes in tree order
  std::vector<double> at_;         // their positions, x y z
  std::vector<double> split_;
  std::vector<std::int8_t> axis_;
};

void tree_search(const float* pos, std::int64_t begin, std::int64_t end, Queries q, int k, std::int64_t* lists) {
  const KdTree tree(pos, begin, end);
#pragma omp parallel if (q.count > 256)
  {
    Candidates best(k);
#pragma omp for schedule(dynamic, 256)
    for (std::int64_t t = 0; t < q.count; ++t) {
      best.clear();
      tree.search(pos + q.ids[t] * 3, best);
      best.write(lists + t * k);
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
    else tree_search(positions.data(), begin, end, q, k, out);
    t = u;
  }
  return lists;
}

std::vector<std::int64_t> sibling_lists(const Hierarchy& h, int level, int k) {
  return nearest_lists(h.level_positions[static_cast<std::size_t>(level)], h.level_batch[static_cast<std::size_t>(level)], k);
}

}  // namespace surrogate::sequoia
