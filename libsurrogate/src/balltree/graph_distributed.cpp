// kNN and radius graphs over canonical blocks with a halo (surrogate/graph_distributed.hpp).
//
// Rank r holds the canonical points [begin, end) of the batch. For every sample its block touches it
// computes a region (an axis-aligned box, in double) that provably holds every point of the sample that
// can be a neighbour of one of its receivers there:
//   * radius: a point j is a neighbour of i only if its rounded squared distance is < r^2 (in float), so
//     its exact distance is at most t = sqrt(RoundingMargin::exact_above(r^2)): the receivers' box
//     widened by t;
//   * kNN (two rounds): round 1 is the kNN graph of the block alone; its k-th neighbour of i (same
//     sample, same loop rule, same distance function) has rounded squared distance rho_i, so every
//     point among the true k nearest of i (ties by index included) has rounded distance <= rho_i, exact
//     distance <= t_i = sqrt(exact_above(rho_i)); the region is the union over receivers of the boxes
//     q_i +- t_i. A receiver with fewer than k candidates in the block has t_i = infinity: that sample's
//     every foreign point comes to this rank (DistributedGraphStats::whole_samples). Round 1 is skipped
//     (every t_i infinite) when most of the block lies inside other ranks' bounding boxes of the same
//     samples: the halo would be (nearly) the whole samples anyway (global ids not coherent in space).
// The regions (one box per rank and touched sample) are all-gathered; every rank sends each other rank
// its points that lie in that rank's box of their sample (index and position, one all-to-all). Blocks are
// consecutive canonical ranges, so what comes from lower ranks has indices below `begin` and lies in the
// block's first sample, what comes from higher ranks lies above `end` in its last sample: the halo, the
// block and the halo above, in this order, are the candidates in canonical order, and the one-process
// graph code on them (receivers = the block) gives the one-process edges: the same candidates ranked by
// the same (distance, index) order, the distances computed by the same function. kNN: round 2 searches
// only the receivers whose box q_i -+ t_i meets the bounding box of their sample's halo (all of them
// when that is most of the block); the others' round-1 neighbours are final, since no foreign point lies
// within their reach. Box bounds are rounded outwards, so the tests can only admit points, never lose one.
#include "surrogate/graph_distributed.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "distributed_internal.hpp"
#include "graph_distance.hpp"
#include "surrogate/error.hpp"

namespace surrogate::graph {
namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

/// The samples of rank `rank`'s block [begin, end): first .. first + count - 1, and the block-local
/// offsets of their parts in the block (count + 1 values).
struct BlockSamples {
  std::int64_t begin = 0, end = 0, first = 0, count = 0;
  std::vector<std::int64_t> offsets{0};
  std::int64_t rows() const { return end - begin; }
};

BlockSamples block_samples(const balltree::Batch& batch, std::span<const std::int64_t> bounds, int rank) {
  BlockSamples s;
  s.begin = bounds[static_cast<std::size_t>(rank)];
  s.end = bounds[static_cast<std::size_t>(rank) + 1];
  if (s.end <= s.begin) return s;
  const std::vector<std::int64_t>& off = batch.offsets();
  s.first = std::upper_bound(off.begin(), off.end(), s.begin) - off.begin() - 1;
  const std::int64_t last = std::upper_bound(off.begin(), off.end(), s.end - 1) - off.begin() - 1;
  s.count = last - s.first + 1;
  for (std::int64_t b = s.first + 1; b <= last; ++b) s.offsets.push_back(off[static_cast<std::size_t>(b)] - s.begin);
  s.offsets.push_back(s.rows());
  return s;
}

void check_blocks(const Comm& comm, const CanonicalBlocks& blocks) {
  const int P = comm.size();
  if (blocks.dim < 1) throw Error(ErrorCode::invalid_argument, "graph (distributed): dim must be at least 1, got " + std::to_string(blocks.dim));
  if (blocks.batch == nullptr) throw Error(ErrorCode::invalid_argument, "graph (distributed): no batch given");
  const std::span<const std::int64_t> b = blocks.block_bounds;
  if (b.size() != static_cast<std::size_t>(P) + 1 || b.front() != 0 || b.back() != blocks.batch->points() ||
      !std::is_sorted(b.begin(), b.end()))
    throw Error(ErrorCode::invalid_argument, "graph (distributed): block_bounds must be " + std::to_string(P + 1) +
                                                 " non-decreasing values from 0 to the batch's " +
                                                 std::to_string(blocks.batch->points()) + " points");
  const std::int64_t rows = b[static_cast<std::size_t>(comm.rank()) + 1] - b[static_cast<std::size_t>(comm.rank())];
  if (static_cast<std::int64_t>(blocks.block_positions.size()) != rows * blocks.dim)
    throw Error(ErrorCode::input, "graph (distributed): block_positions has " + std::to_string(blocks.block_positions.size()) +
                                      " values, expected " + std::to_string(rows) + " points x " + std::to_string(blocks.dim));
  std::int64_t bad = 0;
  for (const float v : blocks.block_positions) bad += !std::isfinite(v);
  if (bad > 0)
    throw Error(ErrorCode::input, "graph (distributed): block_positions has " + std::to_string(bad) + " NaN/Inf coordinate(s)");
}

/// The region of every touched sample: 2 x dim doubles per sample (lower corner, then upper corner), the
/// union of the boxes q_i -+ reach[i] over the sample's receivers, rounded outwards. A sample without
/// receivers (none: samples are never empty) would keep an empty box.
std::vector<double> regions(const BlockSamples& s, std::span<const float> positions, int dim, std::span<const double> reach) {
  std::vector<double> box(static_cast<std::size_t>(s.count * 2 * dim));
  for (std::int64_t t = 0; t < s.count; ++t) {
    double* lo = box.data() + t * 2 * dim;
    double* hi = lo + dim;
    std::fill(lo, hi, kInfinity);
    std::fill(hi, hi + dim, -kInfinity);
    for (std::int64_t i = s.offsets[static_cast<std::size_t>(t)]; i < s.offsets[static_cast<std::size_t>(t) + 1]; ++i)
      for (int c = 0; c < dim; ++c) {
        const double q = positions[static_cast<std::size_t>(i * dim + c)], w = reach[static_cast<std::size_t>(i)];
        lo[c] = std::min(lo[c], std::nextafter(q - w, -kInfinity));
        hi[c] = std::max(hi[c], std::nextafter(q + w, kInfinity));
      }
  }
  return box;
}

/// The bounding box of row-major points (lower corner, then upper corner), rounded outwards; empty
/// (lower > upper) for no point.
std::vector<double> bounding_box(std::span<const float> points, int dim) {
  std::vector<double> box(static_cast<std::size_t>(2 * dim));
  std::fill(box.begin(), box.begin() + dim, kInfinity);
  std::fill(box.begin() + dim, box.end(), -kInfinity);
  for (std::size_t i = 0; i < points.size(); i += static_cast<std::size_t>(dim))
    for (int c = 0; c < dim; ++c) {
      box[static_cast<std::size_t>(c)] = std::min(box[static_cast<std::size_t>(c)], static_cast<double>(points[i + static_cast<std::size_t>(c)]));
      box[static_cast<std::size_t>(dim + c)] = std::max(box[static_cast<std::size_t>(dim + c)], static_cast<double>(points[i + static_cast<std::size_t>(c)]));
    }
  return box;
}

/// The candidates of this rank's receivers: the other ranks' points of its samples inside its regions
/// (the halo), sorted by canonical index, and the positions of the halo below the block, the block and
/// the halo above, in this (canonical) order.
struct Halo {
  std::vector<std::int64_t> index;  // the halo's canonical indices
  std::vector<float> candidates;    // (halo + block) x dim
  std::int64_t below = 0;           // halo points before the block
};

/// Every rank's boxes, one per touched sample (its sample range follows from the bounds, so only the
/// boxes travel). Collective.
struct GatheredRegions {
  std::vector<BlockSamples> ranks;
  std::vector<double> boxes;
  std::vector<std::size_t> at;  // bytes: where rank r's boxes start
  const double* box(int r, std::int64_t sample, int dim) const {
    return boxes.data() + at[static_cast<std::size_t>(r)] / sizeof(double) + (sample - ranks[static_cast<std::size_t>(r)].first) * 2 * dim;
  }
};

GatheredRegions gather_regions(const Comm& comm, const CanonicalBlocks& blocks, const std::vector<double>& my_regions) {
  const int P = comm.size(), dim = blocks.dim;
  GatheredRegions g;
  g.ranks.resize(static_cast<std::size_t>(P));
  g.at.resize(static_cast<std::size_t>(P));
  std::vector<std::size_t> bytes(static_cast<std::size_t>(P));
  std::size_t total = 0;
  for (int r = 0; r < P; ++r) {
    g.ranks[static_cast<std::size_t>(r)] = block_samples(*blocks.batch, blocks.block_bounds, r);
    g.at[static_cast<std::size_t>(r)] = total;
    bytes[static_cast<std::size_t>(r)] = static_cast<std::size_t>(g.ranks[static_cast<std::size_t>(r)].count * 2 * dim) * sizeof(double);
    total += bytes[static_cast<std::size_t>(r)];
  }
  g.boxes.resize(total / sizeof(double) + 1);  // + 1: never a null buffer
  const double none = 0.0;
  comm.allgatherv(my_regions.empty() ? &none : my_regions.data(), my_regions.size() * sizeof(double), g.boxes.data(), bytes, g.at);
  return g;
}

/// Calls inside(i) for every block row i of this rank (`mine`) in rank r's box of i's sample, in order.
template <class F>
void points_inside(const GatheredRegions& g, int r, const CanonicalBlocks& blocks, const BlockSamples& mine, F inside) {
  const BlockSamples& other = g.ranks[static_cast<std::size_t>(r)];
  if (other.count == 0 || mine.count == 0) return;
  const int dim = blocks.dim;
  const std::vector<std::int64_t>& offsets = blocks.batch->offsets();
  const float* p = blocks.block_positions.data();
  const std::int64_t b0 = std::max(mine.first, other.first), b1 = std::min(mine.first + mine.count, other.first + other.count);
  for (std::int64_t b = b0; b < b1; ++b) {
    const double* lo = g.box(r, b, dim);
    const double* hi = lo + dim;
    const std::int64_t i0 = std::max(offsets[static_cast<std::size_t>(b)], mine.begin) - mine.begin;
    const std::int64_t i1 = std::min(offsets[static_cast<std::size_t>(b) + 1], mine.end) - mine.begin;
    for (std::int64_t i = i0; i < i1; ++i) {
      bool in = true;
      for (int c = 0; c < dim && in; ++c) {
        const double v = p[i * dim + c];
        in = v >= lo[c] && v <= hi[c];
      }
      if (in) inside(i);
    }
  }
}

Halo exchange_halo(const Comm& comm, const CanonicalBlocks& blocks, const BlockSamples& mine,
                   const std::vector<double>& my_regions, DistributedGraphStats& stats) {
  const int P = comm.size(), me = comm.rank(), dim = blocks.dim;
  const GatheredRegions regions_of = gather_regions(comm, blocks, my_regions);
  // The points each other rank's regions hold, rank by rank, each rank's in canonical order.
  std::vector<std::size_t> send_counts(static_cast<std::size_t>(P), 0);
  std::vector<std::int64_t> send_index;
  std::vector<float> send_positions;
  const float* p = blocks.block_positions.data();
  for (int r = 0; r < P; ++r) {
    if (r == me) continue;
    points_inside(regions_of, r, blocks, mine, [&](std::int64_t i) {
      send_index.push_back(mine.begin + i);
      send_positions.insert(send_positions.end(), p + i * dim, p + (i + 1) * dim);
      ++send_counts[static_cast<std::size_t>(r)];
    });
  }
  const std::vector<std::size_t> recv_counts = balltree::detail::exchange_counts(comm, send_counts);
  std::size_t received = 0;
  for (const std::size_t c : recv_counts) received += c;
  Halo halo;
  halo.index.resize(received);
  balltree::detail::alltoallv_elements(comm, send_index.data(), send_counts, halo.index.data(), recv_counts, sizeof(std::int64_t));
  // Lower ranks send points before the block, higher ranks after it: the positions go straight to their
  // places around the block's.
  const std::size_t row_bytes = sizeof(float) * static_cast<std::size_t>(dim), n = static_cast<std::size_t>(mine.rows());
  std::vector<std::size_t> sb(static_cast<std::size_t>(P)), so(sb.size()), rb(sb.size()), ro(sb.size());
  std::size_t sent = 0, got = 0;
  for (std::size_t r = 0; r < sb.size(); ++r) {
    if (r == static_cast<std::size_t>(me) + 1) got += n;  // the block's place
    sb[r] = send_counts[r] * row_bytes;
    so[r] = sent * row_bytes;
    sent += send_counts[r];
    rb[r] = recv_counts[r] * row_bytes;
    ro[r] = got * row_bytes;
    got += recv_counts[r];
    if (r < static_cast<std::size_t>(me)) halo.below += static_cast<std::int64_t>(recv_counts[r]);
  }
  halo.candidates.resize((received + n) * static_cast<std::size_t>(dim));
  static const float no_send = 0.0f;  // never a null buffer, even for empty messages
  static float no_recv = 0.0f;
  comm.alltoallv(send_positions.empty() ? &no_send : send_positions.data(), sb, so,
                 halo.candidates.empty() ? &no_recv : halo.candidates.data(), rb, ro);
  std::copy(blocks.block_positions.begin(), blocks.block_positions.end(), halo.candidates.begin() + halo.below * dim);
  stats.sent_points = static_cast<std::int64_t>(send_index.size());
  stats.foreign_points = static_cast<std::int64_t>(received);
  return halo;
}

/// The block's receivers' edges (only those of `subset`, block rows, when not empty) from the halo, the
/// block and the halo above as one candidate array in canonical order; `build(positions, batch,
/// receivers)` is the one-process graph. Indices back to canonical ones.
template <class Build>
Edges edges_on_candidates(const BlockSamples& mine, const Halo& halo, std::vector<std::int64_t> subset, Build build) {
  const std::int64_t n = mine.rows(), below = halo.below, above = static_cast<std::int64_t>(halo.index.size()) - below;
  if (n == 0) return {};
  if (!std::is_sorted(halo.index.begin(), halo.index.end()) || (below > 0 && halo.index[static_cast<std::size_t>(below) - 1] >= mine.begin) ||
      (above > 0 && halo.index[static_cast<std::size_t>(below)] < mine.end))
    throw Error(ErrorCode::internal, "graph (distributed): the halo is not in canonical order");
  std::vector<std::int64_t> offsets{0};  // the halo below joins the first sample, the halo above the last
  for (std::int64_t t = 1; t < mine.count; ++t) offsets.push_back(below + mine.offsets[static_cast<std::size_t>(t)]);
  offsets.push_back(below + n + above);
  for (std::int64_t& i : subset) i += below;
  Edges edges = build(halo.candidates, balltree::Batch::from_offsets(offsets), ReceiverRange{below, below + n, subset});
  for (std::int64_t& v : edges.index)
    v = v < below ? halo.index[static_cast<std::size_t>(v)] : v < below + n ? mine.begin + v - below : halo.index[static_cast<std::size_t>(v - n)];
  return edges;
}

}  // namespace

Edges knn_graph_distributed(const Comm& comm, const CanonicalBlocks& blocks, int k, bool loop, int threads,
                            DistributedGraphStats* stats) {
  DistributedGraphStats local_stats;
  BlockSamples mine;
  std::vector<double> my_regions;
  Edges local;                // round 1: the kNN graph of the block alone (block indices)
  std::vector<double> reach;  // per receiver: the largest exact distance of a true neighbour
  std::vector<double> block_boxes;
  collectively(comm, [&] {
    if (k < 1) throw Error(ErrorCode::invalid_argument, "knn_graph (distributed): k must be at least 1, got " + std::to_string(k));
    check_blocks(comm, blocks);
    mine = block_samples(*blocks.batch, blocks.block_bounds, comm.rank());
    block_boxes = regions(mine, blocks.block_positions, blocks.dim, std::vector<double>(static_cast<std::size_t>(mine.rows()), 0.0));
  });
  // A block spread over its samples (ids not coherent in space): most of its points lie in other ranks'
  // boxes, the halo will be (nearly) the whole samples, and round 1 would be wasted: skipped (reach
  // infinite, every receiver searched in round 2). Only the cost depends on this choice, not the edges.
  const GatheredRegions others = gather_regions(comm, blocks, block_boxes);
  std::vector<char> overlapped(static_cast<std::size_t>(mine.rows()), 0);
  for (int r = 0; r < comm.size(); ++r)
    if (r != comm.rank()) points_inside(others, r, blocks, mine, [&](std::int64_t i) { overlapped[static_cast<std::size_t>(i)] = 1; });
  const bool round1 = 2 * std::count(overlapped.begin(), overlapped.end(), char{1}) <= mine.rows();
  collectively(comm, [&] {
    const int dim = blocks.dim;
    // Round 1: the k-th neighbour of every receiver within the block bounds its k-th distance overall.
    reach.assign(static_cast<std::size_t>(mine.rows()), kInfinity);
    if (mine.rows() > 0 && round1) {
      local = knn_graph(blocks.block_positions, dim, balltree::Batch::from_offsets(mine.offsets), k, loop, threads);
      const std::int64_t E = local.count();
      const std::int64_t* src = local.index.data();
      const std::int64_t* dst = src + E;
      const detail::RoundingMargin<float> margin(dim);
      const float* p = blocks.block_positions.data();
      for (std::int64_t e = 0; e < E;) {
        std::int64_t last = e;
        while (last + 1 < E && dst[last + 1] == dst[e]) ++last;
        if (last - e + 1 == k) {
          const float rho = detail::squared_distance(p + dst[e] * dim, p + src[last] * dim, dim);
          reach[static_cast<std::size_t>(dst[e])] = std::sqrt(margin.exact_above(rho)) * (1.0 + 1e-12);
        }
        e = last + 1;
      }
    }
    const std::vector<std::int64_t>& offsets = blocks.batch->offsets();
    for (std::int64_t t = 0; t < mine.count; ++t) {
      const auto b = static_cast<std::size_t>(mine.first + t);
      const bool spans_ranks = offsets[b] < mine.begin || offsets[b + 1] > mine.end;
      local_stats.whole_samples += spans_ranks && std::any_of(reach.begin() + mine.offsets[static_cast<std::size_t>(t)],
                                                              reach.begin() + mine.offsets[static_cast<std::size_t>(t) + 1],
                                                              [](double w) { return std::isinf(w); });
    }
    my_regions = regions(mine, blocks.block_positions, dim, reach);
  });
  const Halo halo = exchange_halo(comm, blocks, mine, my_regions, local_stats);
  Edges edges;
  collectively(comm, [&] {
    if (halo.index.empty() && round1) {  // the block holds every candidate: round 1 was the graph (one rank, small samples)
      edges = std::move(local);
      for (std::int64_t& v : edges.index) v += mine.begin;
      return;
    }
    // Round 2 for the receivers whose box q_i -+ reach_i meets the bounding box of their sample's halo
    // (below the block: its first sample, above: its last); no other receiver has a foreign point within
    // reach, so its round-1 neighbours are the true ones.
    const int dim = blocks.dim;
    const std::int64_t n = mine.rows(), below = halo.below;
    const std::span<const float> all(halo.candidates);
    const std::vector<double> halo_below = bounding_box(all.first(static_cast<std::size_t>(below * dim)), dim);
    const std::vector<double> halo_above = bounding_box(all.subspan(static_cast<std::size_t>((below + n) * dim)), dim);
    auto meets = [&](const std::vector<double>& box, std::int64_t i) {
      if (box[0] > box[static_cast<std::size_t>(dim)]) return false;  // no halo there
      const float* q = blocks.block_positions.data() + i * dim;
      const double w = reach[static_cast<std::size_t>(i)];
      for (int c = 0; c < dim; ++c)
        if (std::nextafter(q[c] - w, -kInfinity) > box[dim + c] || std::nextafter(q[c] + w, kInfinity) < box[c]) return false;
      return true;
    };
    std::vector<std::int64_t> again;
    for (std::int64_t t = 0; t < mine.count; ++t)
      for (std::int64_t i = mine.offsets[static_cast<std::size_t>(t)]; i < mine.offsets[static_cast<std::size_t>(t) + 1]; ++i)
        if ((t == 0 && meets(halo_below, i)) || (t == mine.count - 1 && meets(halo_above, i))) again.push_back(i);
    local_stats.requeried = static_cast<std::int64_t>(again.size());
    if (!round1 || 2 * again.size() > static_cast<std::size_t>(n)) {  // most receivers: all of them, round 1 freed
      local = Edges{};
      edges = edges_on_candidates(mine, halo, {}, [&](std::span<const float> candidates, const balltree::Batch& batch,
                                                      ReceiverRange receivers) {
        return knn_graph(candidates, dim, batch, k, loop, threads, receivers);
      });
      local_stats.requeried = n;
      return;
    }
    const Edges second = again.empty() ? Edges{}
                                       : edges_on_candidates(mine, halo, again, [&](std::span<const float> candidates,
                                                                                   const balltree::Batch& batch, ReceiverRange receivers) {
                                           return knn_graph(candidates, dim, batch, k, loop, threads, receivers);
                                         });
    // Merge, receiver by receiver: round 2 where it ran, round 1 elsewhere (a counting pass, then the fill).
    const std::int64_t E1 = local.count(), E2 = second.count();
    auto merge = [&](auto&& emit) {
      std::int64_t e1 = 0, e2 = 0;
      std::size_t a = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        while (e1 < E1 && local.index[static_cast<std::size_t>(E1 + e1)] < i) ++e1;
        if (a < again.size() && again[a] == i) {
          ++a;
          for (; e2 < E2 && second.index[static_cast<std::size_t>(E2 + e2)] == mine.begin + i; ++e2)
            emit(second.index[static_cast<std::size_t>(e2)], mine.begin + i);
        } else {
          for (; e1 < E1 && local.index[static_cast<std::size_t>(E1 + e1)] == i; ++e1)
            emit(mine.begin + local.index[static_cast<std::size_t>(e1)], mine.begin + i);
        }
      }
    };
    std::int64_t E = 0;
    merge([&](std::int64_t, std::int64_t) { ++E; });
    if (E == E1) {  // every receiver searched again kept its count (the usual case): round 2's sources in place
      std::int64_t e2 = 0;
      std::size_t a = 0;
      for (std::int64_t e = 0; e < E1; ++e) {
        std::int64_t& j = local.index[static_cast<std::size_t>(e)];
        std::int64_t& i = local.index[static_cast<std::size_t>(E1 + e)];
        while (a < again.size() && again[a] < i) ++a;
        j = a < again.size() && again[a] == i ? second.index[static_cast<std::size_t>(e2++)] : mine.begin + j;
        i += mine.begin;
      }
      edges = std::move(local);
      return;
    }
    edges.index.resize(static_cast<std::size_t>(2 * E));
    std::int64_t e = 0;
    merge([&](std::int64_t j, std::int64_t i) {
      edges.index[static_cast<std::size_t>(e)] = j;
      edges.index[static_cast<std::size_t>(E + e)] = i;
      ++e;
    });
  });
  if (stats != nullptr) *stats = local_stats;
  return edges;
}

Edges radius_graph_distributed(const Comm& comm, const CanonicalBlocks& blocks, double r, int max_num_neighbors, bool loop,
                               int threads, DistributedGraphStats* stats) {
  DistributedGraphStats local_stats;
  BlockSamples mine;
  std::vector<double> my_regions;
  collectively(comm, [&] {
    if (!(r > 0) || !std::isfinite(r))
      throw Error(ErrorCode::invalid_argument, "radius_graph (distributed): r must be positive and finite, got " + std::to_string(r));
    if (max_num_neighbors < 1)
      throw Error(ErrorCode::invalid_argument, "radius_graph (distributed): max_num_neighbors must be at least 1, got " +
                                                   std::to_string(max_num_neighbors));
    check_blocks(comm, blocks);
    mine = block_samples(*blocks.batch, blocks.block_bounds, comm.rank());
    // Neighbours have rounded squared distance < r^2 (rounded to float as in radius_graph).
    const auto r2 = static_cast<float>(r * r);
    const double reach = std::sqrt(detail::RoundingMargin<float>(blocks.dim).exact_above(r2)) * (1.0 + 1e-12);
    my_regions = regions(mine, blocks.block_positions, blocks.dim, std::vector<double>(static_cast<std::size_t>(mine.rows()), reach));
  });
  const Halo halo = exchange_halo(comm, blocks, mine, my_regions, local_stats);
  Edges edges;
  collectively(comm, [&] {
    edges = edges_on_candidates(mine, halo, {}, [&](std::span<const float> candidates, const balltree::Batch& batch,
                                                    ReceiverRange receivers) {
      return radius_graph(candidates, blocks.dim, batch, r, max_num_neighbors, loop, threads, receivers);
    });
  });
  if (stats != nullptr) *stats = local_stats;
  return edges;
}

}  // namespace surrogate::graph
