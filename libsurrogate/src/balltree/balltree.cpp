// Ball tree construction and partition (semantics: share/docs/balltree.md, reference-models.md §1.2).
//
// The order left inside every node is whatever libstdc++'s std::nth_element leaves behind, so this
// file must be compiled against libstdc++ and must call std::nth_element exactly where the official
// builder does: once per inner node with more than one point, on the node's index range, with the
// strict float64 less-than on the split coordinate, starting from the identity order of the sample. It
// runs on records of the coordinates and the index (up to four coordinates): the same comparisons, so
// the same order, from memory read in sequence.
#include "surrogate/balltree.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <type_traits>
#include <vector>

#include "surrogate/error.hpp"

namespace surrogate::balltree {
namespace {

using Index = std::int64_t;

std::size_t sz(Index i) { return static_cast<std::size_t>(i); }

/// Subtrees of at least this many points are built as OpenMP tasks. The two halves of a node own disjoint
/// index and slot ranges and std::nth_element on a range depends on that range alone, so the result is
/// the serial one whatever the thread count; one sample's tree thus uses every thread below its root.
constexpr Index kTaskPoints = 8192;

/// Whether a build over `points` points in `samples` samples opens a parallel region for its tasks.
bool parallel_build(Index points, Index samples) { return samples > 1 || points >= 2 * kTaskPoints; }

/// The split rule shared by the tree and the partition: dimension of largest spread, median split. The
/// sample's points are the elements of a working array E: either their local indices (E = Index,
/// coordinates read from x) or, for up to four coordinates, records of the coordinates and the index
/// (E = Record, read in place). std::nth_element on the records makes the comparisons and moves it
/// makes on the indices (the same comparison outcomes), so both leave the same order; the records keep
/// the points next to each other in memory. Float32 coordinates stay float32 in the records (16 bytes for
/// three): converted to float64 they compare and order alike, and the spreads are taken in float64.
template <int D, class T>
struct Record {
  static constexpr int kDim = D;
  T x[D];
  std::uint32_t id;  // local index: samples of fewer than 2^32 points
};

/// The working element of a build over `dim` coordinates of type T (f is called with a value of it):
/// a Record for dim 1..4 when every sample has fewer than 2^32 points, else Index.
template <class T, class F>
auto with_element(int dim, Index largest_sample, F&& f) {
  if (largest_sample < (Index{1} << 32)) {
    switch (dim) {
      case 1: return f(Record<1, T>{});
      case 2: return f(Record<2, T>{});
      case 3: return f(Record<3, T>{});
      case 4: return f(Record<4, T>{});
      default: break;
    }
  }
  return f(Index{});
}

template <class E, class T>
class Splitter {
 public:
  Splitter(const T* x, Index dim) : x_(x), dim_(dim) {}

  static Index id(const E& e) {
    if constexpr (std::is_same_v<E, Index>) return e;
    else return static_cast<Index>(e.id);
  }
  double coordinate(const E& e, Index c) const {
    if constexpr (std::is_same_v<E, Index>) return static_cast<double>(x_[e * dim_ + c]);
    else return static_cast<double>(e.x[c]);
  }

  /// The dimension with the strictly largest (max - min) over e[0..count), scanning 0, 1, ...; ties keep
  /// the earlier dimension, all-zero spreads give 0.
  Index split_dimension(const E* e, Index count) const {
    if (count <= 1) return 0;
    Index best = 0;
    double best_spread = 0;
    for (Index c = 0; c < dim_; ++c) {
      double lo = coordinate(e[0], c);
      double hi = lo;
      for (Index i = 1; i < count; ++i) {
        const double v = coordinate(e[i], c);
        lo = std::min(lo, v);
        hi = std::max(hi, v);
      }
      const double spread = hi - lo;
      if (spread > best_spread) {
        best_spread = spread;
        best = c;
      }
    }
    return best;
  }

  /// Puts the `k` smallest points of e[0..count) (along `c`) first, in libstdc++'s leftover order.
  void select(E* e, Index count, Index k, Index c) const {
    std::nth_element(e, e + k, e + count, [this, c](const E& a, const E& b) { return coordinate(a, c) < coordinate(b, c); });
  }

  /// The working array of a sample of n points in the identity order.
  void fill(E* e, Index n) const {
    for (Index i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<E, Index>) {
        e[i] = i;
      } else {
        for (int c = 0; c < E::kDim; ++c) e[i].x[c] = x_[i * dim_ + c];
        e[i].id = static_cast<std::uint32_t>(i);
      }
    }
  }

 private:
  const T* x_;
  Index dim_;
};

template <class E, class T>
struct TreeBuilder {
  Splitter<E, T> split;
  E* idx;          // working array of the sample
  Index* out;      // the sample's slots (local indices)
  std::uint8_t* mask;
  Index max_level;  // L

  void build(Index start, Index end, Index out_start, Index level) const {
    const Index count = end - start;
    if (level == max_level) {
      // 1 or 2 points (n lies in (2^L, 2^(L+1)] and every split is floor/ceil).
      out[out_start] = split.id(idx[start]);
      mask[out_start] = 1;
      if (count == 1) {
        out[out_start + 1] = split.id(idx[start]);
        mask[out_start + 1] = 0;
      } else {
        out[out_start + 1] = split.id(idx[start + 1]);
        mask[out_start + 1] = 1;
      }
      return;
    }
    const Index c = split.split_dimension(idx + start, count);
    const Index mid = (start + end) / 2;
    if (count > 1) split.select(idx + start, count, mid - start, c);
    const Index child_slots = Index{1} << (max_level - level);  // slots of a subtree at level + 1
    if (count >= kTaskPoints) {
#pragma omp task default(shared) firstprivate(start, mid, out_start, level)
      build(start, mid, out_start, level + 1);
    } else {
      build(start, mid, out_start, level + 1);
    }
    build(mid, end, out_start + child_slots, level + 1);
  }
};

template <class E, class T>
struct Partitioner {
  Splitter<E, T> split;
  E* idx;
  Index* out;
  Index target_level;

  void part(Index start, Index end, Index out_start, Index level) const {
    const Index count = end - start;
    if (level == target_level || count <= 1) {
      for (Index i = start; i < end; ++i) out[out_start + (i - start)] = split.id(idx[i]);
      return;
    }
    const Index c = split.split_dimension(idx + start, count);
    const Index mid = (start + end) / 2;
    split.select(idx + start, count, mid - start, c);
    if (count >= kTaskPoints) {
#pragma omp task default(shared) firstprivate(start, mid, out_start, level)
      part(start, mid, out_start, level + 1);
    } else {
      part(start, mid, out_start, level + 1);
    }
    part(mid, end, out_start + (mid - start), level + 1);
  }
};

std::string point_text(Index p, const Batch& batch) {
  const auto& o = batch.offsets();
  const auto b = static_cast<Index>(std::upper_bound(o.begin(), o.end(), p) - o.begin()) - 1;
  return "point " + std::to_string(p) + " (sample " + std::to_string(b) + ", local point " +
         std::to_string(p - batch.begin(b)) + ")";
}

/// Checks the shape and the values of `points` against `batch`; the message names `what`.
template <typename T>
void check_points(std::span<const T> points, int dim, const Batch& batch, const char* what) {
  if (dim < 1) throw Error(ErrorCode::invalid_argument, std::string(what) + ": dim must be at least 1, found " + std::to_string(dim));
  if (points.size() % static_cast<std::size_t>(dim) != 0)
    throw Error(ErrorCode::input, std::string(what) + ": points has " + std::to_string(points.size()) +
                                      " values, not a multiple of dim = " + std::to_string(dim));
  const auto n = static_cast<Index>(points.size() / static_cast<std::size_t>(dim));
  if (n == 0) throw Error(ErrorCode::input, std::string(what) + ": points is empty");
  if (n != batch.points())
    throw Error(ErrorCode::input, std::string(what) + ": points has " + std::to_string(n) + " points (rows of " +
                                      std::to_string(dim) + ") but the batch has " + std::to_string(batch.points()));
  Index bad = 0, first = -1;
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (!std::isfinite(points[i])) {
      if (bad++ == 0) first = static_cast<Index>(i);
    }
  }
  if (bad > 0) {
    const Index p = first / dim;
    throw Error(ErrorCode::input, std::string(what) + ": points has " + std::to_string(bad) +
                                      " NaN/Inf coordinate(s); the first is coordinate " + std::to_string(first % dim) +
                                      " of " + point_text(p, batch));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
Batch Batch::single(std::int64_t points) {
  if (points < 1) throw Error(ErrorCode::input, "ball tree: a sample needs at least one point, found " + std::to_string(points));
  Batch b;
  b.offsets_ = {0, points};
  return b;
}

Batch Batch::from_batch_idx(std::span<const std::int64_t> batch_idx) {
  if (batch_idx.empty()) throw Error(ErrorCode::input, "batch_idx is empty (no points)");
  if (batch_idx[0] != 0)
    throw Error(ErrorCode::input, "batch_idx must start at 0, found batch_idx[0] = " + std::to_string(batch_idx[0]));
  Batch b;
  b.offsets_ = {0};
  for (std::size_t i = 1; i < batch_idx.size(); ++i) {
    const std::int64_t step = batch_idx[i] - batch_idx[i - 1];
    if (step == 1) {
      b.offsets_.push_back(static_cast<std::int64_t>(i));
    } else if (step != 0) {
      throw Error(ErrorCode::input, "batch_idx must be sample-major and contiguous (each entry equal to the previous or one "
                                    "more): batch_idx[" + std::to_string(i) + "] = " + std::to_string(batch_idx[i]) +
                                        " follows batch_idx[" + std::to_string(i - 1) + "] = " + std::to_string(batch_idx[i - 1]));
    }
  }
  b.offsets_.push_back(static_cast<std::int64_t>(batch_idx.size()));
  return b;
}

Batch Batch::from_offsets(std::span<const std::int64_t> offsets) {
  if (offsets.size() < 2) throw Error(ErrorCode::input, "sample offsets need at least two entries (one sample)");
  if (offsets[0] != 0) throw Error(ErrorCode::input, "sample offsets must start at 0, found " + std::to_string(offsets[0]));
  for (std::size_t i = 1; i < offsets.size(); ++i)
    if (offsets[i] <= offsets[i - 1])
      throw Error(ErrorCode::input, "sample offsets must increase strictly (no empty sample): offsets[" + std::to_string(i) +
                                        "] = " + std::to_string(offsets[i]) + " after " + std::to_string(offsets[i - 1]));
  Batch b;
  b.offsets_.assign(offsets.begin(), offsets.end());
  return b;
}

std::vector<std::int64_t> Batch::batch_idx() const {
  std::vector<std::int64_t> r(sz(points()));
  for (Index b = 0; b < samples(); ++b) std::fill(r.begin() + begin(b), r.begin() + end(b), b);
  return r;
}

int tree_depth(std::int64_t n) {
  if (n < 2)
    throw Error(ErrorCode::input, "ball tree: a sample needs at least 2 points, found " + std::to_string(n) +
                                      " (the official balltree-erwin fails on it too)");
  // As the official code: ceil(log2(n)) in double, minus one.
  return static_cast<int>(std::ceil(std::log2(static_cast<double>(n)))) - 1;
}

std::int64_t padded_size(std::int64_t n) { return std::int64_t{2} << tree_depth(n); }

std::vector<std::int64_t> Tree::slot_batch_idx() const {
  std::vector<std::int64_t> r(index.size());
  for (std::size_t b = 0; b + 1 < slot_offsets.size(); ++b)
    std::fill(r.begin() + slot_offsets[b], r.begin() + slot_offsets[b + 1], static_cast<std::int64_t>(b));
  return r;
}

std::vector<std::int64_t> Tree::slot_of_point() const {
  Index n = 0;
  for (std::size_t s = 0; s < index.size(); ++s) n += mask[s] ? 1 : 0;
  std::vector<std::int64_t> r(sz(n), -1);
  for (std::size_t s = 0; s < index.size(); ++s)
    if (mask[s]) r[sz(index[s])] = static_cast<std::int64_t>(s);
  return r;
}

// ---------------------------------------------------------------------------------------------------
namespace {

template <class T>
Tree build_tree(std::span<const T> points, int dim, const Batch& batch) {
  check_points(points, dim, batch, "ball tree");
  Tree t;
  t.slot_offsets.assign(1, 0);
  Index largest = 0;
  for (Index b = 0; b < batch.samples(); ++b) {
    if (batch.size(b) < 2)
      throw Error(ErrorCode::input, "ball tree: sample " + std::to_string(b) + " has " + std::to_string(batch.size(b)) +
                                        " point; every sample needs at least 2 points (the official balltree-erwin fails "
                                        "on a 1-point sample too)");
    t.slot_offsets.push_back(t.slot_offsets.back() + padded_size(batch.size(b)));
    largest = std::max(largest, batch.size(b));
  }
  t.index.resize(sz(t.slot_offsets.back()));
  t.mask.resize(t.index.size());
  const T* x = points.data();
  const Index samples = batch.samples();
  with_element<T>(dim, largest, [&](auto element) {
    using E = decltype(element);
    std::vector<E> work(sz(batch.points()));  // allocated here: nothing allocates in the parallel region
    // One task per sample, and inside it one per large subtree (TreeBuilder::build); nothing in them throws.
#pragma omp parallel if (parallel_build(batch.points(), samples))
#pragma omp single
    for (Index b = 0; b < samples; ++b) {
#pragma omp task default(shared) firstprivate(b)
      {
        const Index first = batch.begin(b), n = batch.size(b);
        const Splitter<E, T> split(x + first * dim, dim);
        E* idx = work.data() + first;
        split.fill(idx, n);
        const Index slot0 = t.slot_offsets[sz(b)];
        const TreeBuilder<E, T> builder{split, idx, t.index.data() + slot0, t.mask.data() + slot0,
                                        static_cast<Index>(tree_depth(n))};
#pragma omp taskgroup  // waits for every subtree task, not only the children
        builder.build(0, n, 0, 0);
        const Index slots = t.slot_offsets[sz(b) + 1] - slot0;
        for (Index s = 0; s < slots; ++s) t.index[sz(slot0 + s)] += first;
      }
    }
  });
  return t;
}

template <class T>
std::vector<std::int64_t> partition_points(std::span<const T> points, int dim, const Batch& batch, int target_level) {
  check_points(points, dim, batch, "ball tree partition");
  if (target_level < 0)
    throw Error(ErrorCode::invalid_argument, "ball tree partition: target_level must be non-negative, found " + std::to_string(target_level));
  std::vector<std::int64_t> out(sz(batch.points()));
  const T* x = points.data();
  const Index samples = batch.samples();
  Index largest = 0;
  for (Index b = 0; b < samples; ++b) largest = std::max(largest, batch.size(b));
  with_element<T>(dim, largest, [&](auto element) {
    using E = decltype(element);
    std::vector<E> work(out.size());
#pragma omp parallel if (parallel_build(batch.points(), samples))
#pragma omp single
    for (Index b = 0; b < samples; ++b) {
#pragma omp task default(shared) firstprivate(b)
      {
        const Index first = batch.begin(b), n = batch.size(b);
        const Splitter<E, T> split(x + first * dim, dim);
        E* idx = work.data() + first;
        split.fill(idx, n);
        const Partitioner<E, T> p{split, idx, out.data() + first, target_level};
#pragma omp taskgroup
        p.part(0, n, 0, 0);
        for (Index i = 0; i < n; ++i) out[sz(first + i)] += first;
      }
    }
  });
  return out;
}

}  // namespace

Tree build(std::span<const double> points, int dim, const Batch& batch) { return build_tree(points, dim, batch); }
Tree build(std::span<const float> points, int dim, const Batch& batch) { return build_tree(points, dim, batch); }

std::vector<std::int64_t> partition(std::span<const double> points, int dim, const Batch& batch, int target_level) {
  return partition_points(points, dim, batch, target_level);
}
std::vector<std::int64_t> partition(std::span<const float> points, int dim, const Batch& batch, int target_level) {
  return partition_points(points, dim, batch, target_level);
}

}  // namespace surrogate::balltree
