// Exact distributed placement (share/docs/balltree.md, "Distributed tree").
//
// The single-process builder leaves, in every node, the order std::nth_element produced from the order the
// node was handed; the subtree below depends on that order, not only on the node's point set. A node's
// result is, however, a function of its array alone (coordinates in array order): nth_element is a
// comparison algorithm, so running build()/partition() on the node's points re-numbered 0..count-1 in
// array order gives the same permutation. Hence:
//   1. the samples' serial arrays, concatenated, are spread evenly over the ranks in serial order (the
//      work array: no rank holds more than ceil(n / P) of them);
//   2. every rank replays the serial recursion over the node ranges, but splits only the nodes whose
//      output range straddles two ranks, with the distributed selection on the work array
//      (distributed_selection.cpp); a node inside one rank's output range becomes a piece;
//   3. each piece's array goes, in its current order, to the rank owning its output range (one
//      all-to-all), which finishes it with the serial build()/partition() (or DistributedOptions::finisher:
//      the same on a device), the pieces of one kind in one batch.
#include <algorithm>
#include <map>
#include <numeric>
#include <string>

#include "distributed_internal.hpp"
#include "surrogate/error.hpp"

namespace surrogate::balltree::detail {
namespace {

using Index = std::int64_t;
std::size_t sz(Index i) { return static_cast<std::size_t>(i); }

/// A node left to one rank: positions [start, start + count) of the work array, output range
/// [out_begin, out_begin + out_size), `levels` partition steps left (partition mode).
struct Piece {
  Index start, count, out_begin, out_size, levels;
};

/// build() / partition() of a group of pieces: by the finisher when there is one (float32 points only).
Tree finish_build(NodeFinisher* finisher, std::span<const float> points, int dim, const Batch& batch) {
  return finisher ? finisher->build(points, dim, batch) : build(points, dim, batch);
}
Tree finish_build(NodeFinisher*, std::span<const double> points, int dim, const Batch& batch) {
  return build(points, dim, batch);
}
std::vector<std::int64_t> finish_partition(NodeFinisher* finisher, std::span<const float> points, int dim,
                                           const Batch& batch, int level) {
  return finisher ? finisher->partition(points, dim, batch, level) : partition(points, dim, batch, level);
}
std::vector<std::int64_t> finish_partition(NodeFinisher*, std::span<const double> points, int dim, const Batch& batch,
                                           int level) {
  return partition(points, dim, batch, level);
}

/// The serial recursion over the node ranges (identical on every rank): splits the nodes that straddle
/// two output ranks, lists the others as pieces.
template <class T>
struct Recursion {
  Placement mode;
  int target_level;
  const RankRanges& ranges;
  DistributedSelection<T>& selection;
  std::vector<Piece>& pieces;

  void node(Index start, Index end, Index out_begin, Index out_size, int depth) const {
    const Index count = end - start;
    const Index levels = mode == Placement::partition ? target_level - depth : -1;
    if (ranges.owner(out_begin) == ranges.owner(out_begin + out_size - 1)) {
      pieces.push_back({start, count, out_begin, out_size, levels});
      return;
    }
    if (mode == Placement::partition && (levels <= 0 || count <= 1)) {
      // The serial code copies this range unchanged: cut it at the rank boundaries.
      for (Index pos = out_begin; pos < out_begin + out_size;) {
        const Index stop = std::min(ranges.end(ranges.owner(pos)), out_begin + out_size);
        pieces.push_back({start + (pos - out_begin), stop - pos, pos, stop - pos, 0});
        pos = stop;
      }
      return;
    }
    if (mode == Placement::tree && out_size <= 2)
      throw Error(ErrorCode::internal, "distributed ball tree: a leaf straddles two ranks");
    // The serial split (Splitter): dimension of largest spread, nth_element at the middle.
    const Index mid = start + count / 2;
    selection.nth_element(start, mid, end, selection.split_dimension(start, end));
    const Index left_out = mode == Placement::tree ? out_size / 2 : mid - start;
    node(start, mid, out_begin, left_out, depth + 1);
    node(mid, end, out_begin + left_out, out_size - left_out, depth + 1);
  }
};

/// Points of a sample of `n` points and `slots` output positions that the serial recursion puts before
/// output offset `o` (tree: left children get floor(n / 2) points in half the slots; partition: the
/// outputs are the points). Depends on the counts only, not on the coordinates.
Index points_before(Placement mode, Index n, Index slots, Index o) {
  Index before = 0;
  while (o > 0 && o < slots) {
    if (mode == Placement::partition) return before + o;
    const Index half = slots / 2;
    if (o >= half) {
      before += n / 2;
      n -= n / 2;
      o -= half;
    } else {
      n /= 2;
    }
    slots = half;
  }
  return before + (o <= 0 ? 0 : n);
}

}  // namespace

template <class T>
PlacedRange place(const Comm& comm, const SpreadSamples<T>& data, Placement mode, int target_level,
                  std::span<const std::int64_t> out_offsets, const RankRanges& ranges, std::int64_t serial_threshold,
                  NodeFinisher* finisher) {
  const int p = comm.size(), me = comm.rank();
  const auto up = sz(p);
  const Index samples = data.samples;
  const int dim = data.dim;
  auto count = [&](int r, Index b) { return data.counts[sz(r) * sz(samples) + sz(b)]; };
  HeldPoints held;

  // 1. The work array: sample b at positions array_offsets[b] .., rank r's elements of b at
  //    array_offsets[b] + rank_first[b * p + r] ..; rank r holds positions [r n / P, (r + 1) n / P).
  std::vector<Index> array_offsets(sz(samples) + 1, 0), rank_first(sz(samples) * up, 0);
  for (Index b = 0; b < samples; ++b) {
    Index at = 0;
    for (int r = 0; r < p; ++r) {
      rank_first[sz(b) * up + sz(r)] = at;
      at += count(r, b);
    }
    array_offsets[sz(b) + 1] = array_offsets[sz(b)] + at;
  }
  const Index total = array_offsets.back();
  WorkArray<T> work;
  work.dim = dim;
  work.layout.bounds.resize(up + 1);
  for (int r = 0; r <= p; ++r) work.layout.bounds[sz(r)] = total * r / p;
  const Index held_here = work.layout.size(me);

  // Work positions [received_bounds[r], received_bounds[r + 1]) make up rank r's pieces (the points of
  // its output range; they depend on the counts only). Where this rank's work range and received run
  // overlap, one buffer spans both: the positions in both stay where they are, the others leave and
  // arrive in place in one all-to-all, and nothing is held twice (step 3).
  std::vector<Index> received_bounds(up + 1, total);
  for (int r = 0; r < p; ++r) {
    const Index o = ranges.bounds[sz(r)];
    for (Index b = 0; b < samples; ++b)
      if (o < out_offsets[sz(b) + 1]) {
        received_bounds[sz(r)] = array_offsets[sz(b)] + points_before(mode, array_offsets[sz(b) + 1] - array_offsets[sz(b)],
                                                                      out_offsets[sz(b) + 1] - out_offsets[sz(b)], o - out_offsets[sz(b)]);
        break;
      }
  }
  const Index work_first = work.layout.begin(me), work_end = work.layout.end(me);
  const Index recv_first = received_bounds[sz(me)], recv_end = received_bounds[sz(me) + 1];
  const Index recv_size = recv_end - recv_first;
  Index span_first = work_first, span_end = work_end;
  if (held_here == 0) {
    span_first = recv_first;
    span_end = recv_end;
  } else if (recv_size > 0) {
    span_first = std::min(work_first, recv_first);
    span_end = std::max(work_end, recv_end);
  }
  // One buffer is held from the start, through the selection rounds (their swap batches and gathered
  // ranges, `transient`, come on top); two buffers hold the work part during the rounds and both parts
  // during the delivery. Take one buffer where its bound is not larger: always where the received run
  // lies within the work part, never where the runs are disjoint (then the span exceeds both).
  const Index transient = std::max(2 * (swap_batch_size(total, p, serial_threshold) + p), serial_threshold);
  const bool one_buffer = span_end - span_first + transient <= held_here + std::max(transient, recv_size);
  if (!one_buffer) {
    span_first = work_first;
    span_end = work_end;
  }
  const Index span = span_end - span_first;
  work.begin = span_first;
  const Index work_offset = work_first - span_first;  // buffer index of work position work_first

  std::vector<std::size_t> send_n(up, 0), recv_n(up, 0);
  collectively(comm, [&] {
    if (static_cast<Index>(data.ids.size()) * dim != static_cast<Index>(data.coords.size()))
      throw Error(ErrorCode::internal, "distributed ball tree: ids and coordinates of different lengths");
    Index local = 0;
    for (Index b = 0; b < samples; ++b) {
      const Index first = array_offsets[sz(b)] + rank_first[sz(b) * up + sz(me)];
      for (int r = 0; r < p; ++r) {
        const auto [lo, hi] = overlap(work.layout, r, first, first + count(me, b));
        send_n[sz(r)] += sz(hi - lo);
      }
      local += count(me, b);
      for (int q = 0; q < p; ++q) {
        const Index qf = array_offsets[sz(b)] + rank_first[sz(b) * up + sz(q)];
        const auto [lo, hi] = overlap(work.layout, me, qf, qf + count(q, b));
        recv_n[sz(q)] += sz(hi - lo);
      }
    }
    if (local != static_cast<Index>(data.ids.size()))
      throw Error(ErrorCode::internal, "distributed ball tree: local element count differs from the count table");
  });
  // This rank's elements, grouped by sample and in serial order, have increasing positions: the part
  // for each rank is contiguous. The parts arrive source by source, sample by sample, straight into the
  // work array, and are then moved to their positions in place (the identity for one sample).
  {
    held.add(span);
    work.ids.resize(sz(span));
    work.coords.resize(sz(span * dim));
    Index* const ids_here = work.ids.data() + work_offset;
    T* const coords_here = work.coords.data() + work_offset * dim;
    alltoallv_elements(comm, data.ids.data(), send_n, ids_here, recv_n, sizeof(Index));
    alltoallv_elements(comm, data.coords.data(), send_n, coords_here, recv_n, sizeof(T) * sz(dim));
    std::vector<Index> position;  // position - work_first of every received element, in arrival order
    position.reserve(sz(held_here));
    for (int q = 0; q < p; ++q)
      for (Index b = 0; b < samples; ++b) {
        const Index qf = array_offsets[sz(b)] + rank_first[sz(b) * up + sz(q)];
        const auto [lo, hi] = overlap(work.layout, me, qf, qf + count(q, b));
        for (Index x = lo; x < hi; ++x) position.push_back(x - work_first);
      }
    // Cycles of the permutation arrival -> position, each element moved once.
    std::vector<T> row(sz(dim)), next_row(sz(dim));
    for (Index start = 0; start < held_here; ++start) {
      if (position[sz(start)] < 0 || position[sz(start)] == start) continue;
      Index id = ids_here[start];
      std::copy_n(coords_here + start * dim, dim, row.begin());
      for (Index at = position[sz(start)]; at >= 0;) {
        const Index next = position[sz(at)];
        position[sz(at)] = -1;
        std::swap(id, ids_here[at]);
        std::copy_n(coords_here + at * dim, dim, next_row.begin());
        std::copy_n(row.begin(), dim, coords_here + at * dim);
        std::swap(row, next_row);
        if (at == start) break;
        at = next;
      }
    }
  }

  // 2. The serial recursion: distributed splits of the nodes that straddle output ranks.
  std::vector<Piece> pieces;
  DistributedSelection<T> selection(comm, work, serial_threshold, held);
  const Recursion<T> recursion{mode, target_level, ranges, selection, pieces};
  for (Index b = 0; b < samples; ++b)
    recursion.node(array_offsets[sz(b)], array_offsets[sz(b) + 1], out_offsets[sz(b)], out_offsets[sz(b) + 1] - out_offsets[sz(b)], 0);

  // 3. Every piece to the rank owning its output range. The pieces come in depth-first order, so their
  //    arrays cover the work array in position order and their output ranges, hence their ranks, are
  //    in increasing order too: this rank's work array is already grouped by destination, and what a
  //    rank receives, source rank after source rank, is the contiguous run of positions of its pieces.
  std::fill(send_n.begin(), send_n.end(), 0);
  std::fill(recv_n.begin(), recv_n.end(), 0);
  Index next_start = 0;
  int last_d = 0;
  for (const Piece& piece : pieces) {
    const int d = ranges.owner(piece.out_begin);
    if (piece.start != next_start || d < last_d)
      throw Error(ErrorCode::internal, "distributed ball tree: the pieces are not in position and rank order");
    next_start = piece.start + piece.count;
    last_d = d;
    const auto [lo, hi] = overlap(work.layout, me, piece.start, piece.start + piece.count);
    send_n[sz(d)] += sz(hi - lo);
    if (d != me) continue;
    for (int q = 0; q < p; ++q) {
      const auto [qlo, qhi] = overlap(work.layout, q, piece.start, piece.start + piece.count);
      recv_n[sz(q)] += sz(qhi - qlo);
    }
  }
  const std::size_t received = exclusive_offsets(recv_n).back();
  // The runs computed from the counts (received_bounds) must be those of the pieces: checked for every
  // rank on every rank (the pieces are the same everywhere), so a mismatch throws on all of them.
  {
    for (int r = 0; r < p; ++r) {
      Index first = -1, n = 0;
      for (const Piece& piece : pieces)
        if (ranges.owner(piece.out_begin) == r) {
          if (first < 0) first = piece.start;
          n += piece.count;
        }
      if (n != received_bounds[sz(r) + 1] - received_bounds[sz(r)] || (n > 0 && first != received_bounds[sz(r)]))
        throw Error(ErrorCode::internal, "distributed ball tree: the pieces of rank " + std::to_string(r) +
                                             " are not the positions its output range holds");
    }
  }
  const Index* in_ids_at = nullptr;  // this rank's pieces: ids and coordinates of positions recv_first ..
  const T* in_coords_at = nullptr;
  std::vector<Index> in_ids;
  std::vector<T> in_coords;
  if (one_buffer) {
    // Positions of both ranges stay; the others leave from and arrive at their place in the buffer.
    std::vector<std::size_t> sn(up, 0), so(up, 0), rn(up, 0), ro(up, 0);
    Index send_lo = span, recv_lo = span;
    for (int r = 0; r < p; ++r) {
      if (r == me) continue;
      const auto [slo, shi] = overlap(work.layout, me, received_bounds[sz(r)], received_bounds[sz(r) + 1]);
      if (shi > slo) {
        sn[sz(r)] = sz(shi - slo);
        so[sz(r)] = sz(slo - span_first);
        send_lo = std::min(send_lo, slo - span_first);
      }
      const auto [rlo, rhi] = overlap(work.layout, r, recv_first, recv_end);
      if (rhi > rlo) {
        rn[sz(r)] = sz(rhi - rlo);
        ro[sz(r)] = sz(rlo - span_first);
        recv_lo = std::min(recv_lo, rlo - span_first);
      }
    }
    // Base pointers at the first element sent / received (distinct elements, never a null pointer).
    static char no_element = 0;
    const auto exchange = [&](void* buffer, std::size_t bytes) {
      auto* base = static_cast<char*>(buffer);
      std::vector<std::size_t> sb(up), sd(up), rb(up), rd(up);
      for (std::size_t r = 0; r < up; ++r) {
        sb[r] = sn[r] * bytes;
        sd[r] = sn[r] ? (so[r] - sz(send_lo)) * bytes : 0;
        rb[r] = rn[r] * bytes;
        rd[r] = rn[r] ? (ro[r] - sz(recv_lo)) * bytes : 0;
      }
      comm.alltoallv(send_lo < span ? base + sz(send_lo) * bytes : &no_element, sb, sd,
                     recv_lo < span ? base + sz(recv_lo) * bytes : &no_element, rb, rd);
    };
    exchange(work.ids.data(), sizeof(Index));
    exchange(work.coords.data(), sizeof(T) * sz(dim));
    in_ids_at = work.ids.data() + (recv_first - span_first);
    in_coords_at = work.coords.data() + (recv_first - span_first) * dim;
  } else {
    held.add(static_cast<Index>(received));
    in_ids.resize(received);
    in_coords.resize(received * sz(dim));
    alltoallv_elements(comm, work.ids.data(), send_n, in_ids.data(), recv_n, sizeof(Index));
    alltoallv_elements(comm, work.coords.data(), send_n, in_coords.data(), recv_n, sizeof(T) * sz(dim));
    held.remove(held_here);
    work.ids = {};
    work.coords = {};
    in_ids_at = in_ids.data();
    in_coords_at = in_coords.data();
  }

  PlacedRange result;
  collectively(comm, [&] {
    const Index begin = ranges.begin(me), size = ranges.size(me);
    result.ids.assign(sz(size), -1);
    if (mode == Placement::tree) result.mask.assign(sz(size), 0);
    std::vector<std::uint8_t> filled(sz(size), 0);
    auto put = [&](Index pos, Index id, std::uint8_t m) {
      const Index k = pos - begin;
      if (k < 0 || k >= size || filled[sz(k)])
        throw Error(ErrorCode::internal, "distributed ball tree: output position " + std::to_string(pos) + " placed twice or off-range");
      filled[sz(k)] = 1;
      result.ids[sz(k)] = id;
      if (mode == Placement::tree) result.mask[sz(k)] = m;
    };
    // This rank's pieces, grouped by what finishes them: build() (level -1) or partition() to a level.
    // A node of out_size slots holds n in [out_size/2, out_size] points. With n > out_size/2 the serial
    // recursion below it is exactly build() of its array (same depth). With n == out_size/2 (a power of
    // two) the serial builder splits down to one point per leaf, which build() of n points would not do
    // (it stops at two per leaf): that is partition() to one point per range, each point followed by its
    // padding duplicate. A partition piece of one point or no level left keeps its order.
    std::map<int, std::vector<const Piece*>> groups;
    for (const Piece& piece : pieces) {
      if (ranges.owner(piece.out_begin) != me) continue;
      const Index at = piece.start - recv_first;
      if (at < 0 || at + piece.count > recv_size)
        throw Error(ErrorCode::internal, "distributed ball tree: a piece outside the received positions");
      int level = -1;
      if (mode == Placement::tree && 2 * piece.count == piece.out_size) {
        level = 0;
        while ((Index{2} << level) < piece.out_size) ++level;
      } else if (mode == Placement::partition) {
        level = piece.levels > 0 && piece.count > 1 ? static_cast<int>(piece.levels) : 0;
      }
      groups[level].push_back(&piece);
    }
    for (const auto& [level, group] : groups) {
      // The group's points as the samples of one batch (no copy for a single piece).
      std::vector<Index> offsets{0};
      for (const Piece* piece : group) offsets.push_back(offsets.back() + piece->count);
      std::vector<T> joined;
      std::span<const T> points(in_coords_at + (group[0]->start - recv_first) * dim, sz(offsets.back() * dim));
      if (group.size() > 1) {
        joined.reserve(sz(offsets.back() * dim));
        for (const Piece* piece : group) {
          const T* from = in_coords_at + (piece->start - recv_first) * dim;
          joined.insert(joined.end(), from, from + piece->count * dim);
        }
        points = joined;
      }
      if (level < 0) {
        const Tree t = finish_build(finisher, points, dim, Batch::from_offsets(offsets));
        for (std::size_t k = 0; k < group.size(); ++k) {
          const Piece& piece = *group[k];
          const Index slots = t.slot_offsets[k + 1] - t.slot_offsets[k];
          if (slots != piece.out_size)
            throw Error(ErrorCode::internal, "distributed ball tree: a subtree of " + std::to_string(piece.count) + " points has " +
                                                 std::to_string(slots) + " slots, expected " + std::to_string(piece.out_size));
          const Index* pid = in_ids_at + (piece.start - recv_first);
          for (Index s = 0; s < slots; ++s) {
            const auto slot = sz(t.slot_offsets[k] + s);
            put(piece.out_begin + s, pid[t.index[slot] - offsets[k]], t.mask[slot]);
          }
        }
        continue;
      }
      std::vector<std::int64_t> perm(sz(offsets.back()));
      if (level > 0)
        perm = finish_partition(finisher, points, dim, Batch::from_offsets(offsets), level);
      else
        std::iota(perm.begin(), perm.end(), 0);
      for (std::size_t k = 0; k < group.size(); ++k) {
        const Piece& piece = *group[k];
        const Index* pid = in_ids_at + (piece.start - recv_first);
        for (Index i = 0; i < piece.count; ++i) {
          const Index id = pid[perm[sz(offsets[k] + i)] - offsets[k]];
          if (mode == Placement::tree) {
            put(piece.out_begin + 2 * i, id, 1);
            put(piece.out_begin + 2 * i + 1, id, 0);
          } else {
            put(piece.out_begin + i, id, 0);
          }
        }
      }
    }
    if (std::find(filled.begin(), filled.end(), 0) != filled.end())
      throw Error(ErrorCode::internal, "distributed ball tree: some local output positions were not placed");
  });
  result.peak_points = held.peak;
  return result;
}

template PlacedRange place<float>(const Comm&, const SpreadSamples<float>&, Placement, int, std::span<const std::int64_t>,
                                  const RankRanges&, std::int64_t, NodeFinisher*);
template PlacedRange place<double>(const Comm&, const SpreadSamples<double>&, Placement, int,
                                   std::span<const std::int64_t>, const RankRanges&, std::int64_t, NodeFinisher*);

}  // namespace surrogate::balltree::detail
