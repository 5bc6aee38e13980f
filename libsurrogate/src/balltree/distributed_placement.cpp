// Exact distributed placement (share/docs/balltree.md, "Distributed tree").
//
// The single-process builder leaves, in every node, the order std::nth_element produced from the order the
// node was handed; the subtree below depends on that order, not only on the node's point set. A node's
// result is, however, a function of its array alone (coordinates in array order): nth_element is a
// comparison algorithm, so running build()/partition() on the node's points re-numbered 0..count-1 in
// array order gives the same permutation. Hence:
//   1. every sample's serial array is gathered on one planner rank (sample b on rank b % P);
//   2. the planner replays the serial recursion, one split at a time (partition(.., 1) of the node's
//      array), but only for nodes whose output range straddles two ranks; a node inside one rank's range
//      is sent whole, in its current array order, to that rank;
//   3. each rank finishes its nodes with the serial build()/partition() of the received arrays.
#include <algorithm>
#include <numeric>
#include <string>

#include "distributed_internal.hpp"
#include "surrogate/error.hpp"

namespace surrogate::balltree::detail {
namespace {

using Index = std::int64_t;
std::size_t sz(Index i) { return static_cast<std::size_t>(i); }

constexpr std::size_t header_size = 4;  // out_begin, out_size, remaining levels, count

/// Pieces bound for every rank: headers, element ids, coordinates.
template <class T>
struct Outbox {
  std::vector<std::vector<Index>> headers, ids;
  std::vector<std::vector<T>> coords;
  explicit Outbox(int p) : headers(sz(p)), ids(sz(p)), coords(sz(p)) {}
};

template <class T>
struct Planner {
  Placement mode;
  int target_level;
  int dim;
  const RankRanges& ranges;
  std::vector<Index>& ids;  // the sample's serial array, reordered in place as the serial code does
  std::vector<T>& coords;
  Outbox<T>& out;

  void emit(Index start, Index count, Index out_begin, Index out_size, Index levels) const {
    const int r = ranges.owner(out_begin);
    auto& h = out.headers[sz(r)];
    h.insert(h.end(), {out_begin, out_size, levels, count});
    auto& i = out.ids[sz(r)];
    i.insert(i.end(), ids.begin() + start, ids.begin() + start + count);
    auto& c = out.coords[sz(r)];
    c.insert(c.end(), coords.begin() + start * dim, coords.begin() + (start + count) * dim);
  }

  /// One serial split of [start, end): the split dimension and nth_element of partition(.., 1).
  void split(Index start, Index end) const {
    const Index count = end - start;
    const std::vector<std::int64_t> perm =
        partition(std::span<const T>(coords.data() + start * dim, sz(count * dim)), dim, Batch::single(count), 1);
    std::vector<Index> new_ids(sz(count));
    std::vector<T> new_coords(sz(count * dim));
    for (Index i = 0; i < count; ++i) {
      new_ids[sz(i)] = ids[sz(start + perm[sz(i)])];
      std::copy_n(coords.begin() + (start + perm[sz(i)]) * dim, dim, new_coords.begin() + i * dim);
    }
    std::copy(new_ids.begin(), new_ids.end(), ids.begin() + start);
    std::copy(new_coords.begin(), new_coords.end(), coords.begin() + start * dim);
  }

  void node(Index start, Index end, Index out_begin, Index out_size, int depth) const {
    const Index count = end - start;
    const Index levels = mode == Placement::partition ? target_level - depth : -1;
    if (ranges.owner(out_begin) == ranges.owner(out_begin + out_size - 1)) {
      emit(start, count, out_begin, out_size, levels);
      return;
    }
    if (mode == Placement::partition && (levels <= 0 || count <= 1)) {
      // The serial code copies this range unchanged: cut it at the rank boundaries.
      for (Index pos = out_begin; pos < out_begin + out_size;) {
        const int r = ranges.owner(pos);
        const Index stop = std::min(ranges.end(r), out_begin + out_size);
        emit(start + (pos - out_begin), stop - pos, pos, stop - pos, 0);
        pos = stop;
      }
      return;
    }
    if (mode == Placement::tree && out_size <= 2)
      throw Error(ErrorCode::internal, "distributed ball tree: a leaf straddles two ranks");
    split(start, end);
    const Index mid = (start + end) / 2;
    const Index left_out = mode == Placement::tree ? out_size / 2 : mid - start;
    node(start, mid, out_begin, left_out, depth + 1);
    node(mid, end, out_begin + left_out, out_size - left_out, depth + 1);
  }
};

}  // namespace

template <class T>
PlacedRange place(const Comm& comm, const SpreadSamples<T>& data, Placement mode, int target_level,
                  std::span<const std::int64_t> out_offsets, const RankRanges& ranges) {
  const int p = comm.size(), me = comm.rank();
  const auto up = sz(p);
  const Index samples = data.samples;
  const int dim = data.dim;
  auto count = [&](int r, Index b) { return data.counts[sz(r) * sz(samples) + sz(b)]; };

  // 1. Every sample's elements to its planner (sample b: rank b % p), in serial order.
  std::vector<std::size_t> send_n(up, 0), recv_n(up, 0);
  std::vector<Index> send_ids;
  std::vector<T> send_coords;
  collectively(comm, [&] {
    std::vector<Index> local_begin(sz(samples) + 1, 0);
    for (Index b = 0; b < samples; ++b) local_begin[sz(b) + 1] = local_begin[sz(b)] + count(me, b);
    if (local_begin.back() != static_cast<Index>(data.ids.size()))
      throw Error(ErrorCode::internal, "distributed ball tree: local element count differs from the count table");
    for (int d = 0; d < p; ++d)
      for (Index b = d; b < samples; b += p) {
        send_n[sz(d)] += sz(count(me, b));
        send_ids.insert(send_ids.end(), data.ids.begin() + local_begin[sz(b)], data.ids.begin() + local_begin[sz(b) + 1]);
        send_coords.insert(send_coords.end(), data.coords.begin() + local_begin[sz(b)] * dim,
                           data.coords.begin() + local_begin[sz(b) + 1] * dim);
      }
    for (int r = 0; r < p; ++r)
      for (Index b = me; b < samples; b += p) recv_n[sz(r)] += sz(count(r, b));
  });
  const auto recv_off = exclusive_offsets(recv_n);
  std::vector<Index> got_ids(recv_off.back());
  std::vector<T> got_coords(recv_off.back() * sz(dim));
  alltoallv_elements(comm, send_ids.data(), send_n, got_ids.data(), recv_n, sizeof(Index));
  alltoallv_elements(comm, send_coords.data(), send_n, got_coords.data(), recv_n, sizeof(T) * sz(dim));
  send_ids = {};
  send_coords = {};

  // 2. The planner replays the serial splits of the nodes that straddle ranks.
  Outbox<T> out(p);
  collectively(comm, [&] {
    std::vector<std::size_t> cursor(recv_off.begin(), recv_off.end() - 1);
    for (Index b = me; b < samples; b += p) {
      std::vector<Index> ids;
      std::vector<T> coords;
      for (int r = 0; r < p; ++r) {
        const std::size_t c = sz(count(r, b)), at = cursor[sz(r)];
        ids.insert(ids.end(), got_ids.begin() + static_cast<std::ptrdiff_t>(at), got_ids.begin() + static_cast<std::ptrdiff_t>(at + c));
        coords.insert(coords.end(), got_coords.begin() + static_cast<std::ptrdiff_t>(at * sz(dim)),
                      got_coords.begin() + static_cast<std::ptrdiff_t>((at + c) * sz(dim)));
        cursor[sz(r)] += c;
      }
      const Index n = static_cast<Index>(ids.size());
      const Index out_size = out_offsets[sz(b) + 1] - out_offsets[sz(b)];
      Planner<T> planner{mode, target_level, dim, ranges, ids, coords, out};
      planner.node(0, n, out_offsets[sz(b)], out_size, 0);
    }
  });
  got_ids = {};
  got_coords = {};

  // 3. The pieces to their ranks; each rank finishes its pieces with the serial code.
  std::vector<std::size_t> piece_n(up), elem_n(up);
  std::vector<Index> headers, ids;
  std::vector<T> coords;
  for (std::size_t r = 0; r < up; ++r) {
    piece_n[r] = out.headers[r].size() / header_size;
    elem_n[r] = out.ids[r].size();
    headers.insert(headers.end(), out.headers[r].begin(), out.headers[r].end());
    ids.insert(ids.end(), out.ids[r].begin(), out.ids[r].end());
    coords.insert(coords.end(), out.coords[r].begin(), out.coords[r].end());
  }
  out = Outbox<T>(p);
  const auto piece_in = exchange_counts(comm, piece_n), elem_in = exchange_counts(comm, elem_n);
  const std::size_t pieces = exclusive_offsets(piece_in).back(), elems = exclusive_offsets(elem_in).back();
  std::vector<Index> in_headers(pieces * header_size), in_ids(elems);
  std::vector<T> in_coords(elems * sz(dim));
  alltoallv_elements(comm, headers.data(), piece_n, in_headers.data(), piece_in, sizeof(Index) * header_size);
  alltoallv_elements(comm, ids.data(), elem_n, in_ids.data(), elem_in, sizeof(Index));
  alltoallv_elements(comm, coords.data(), elem_n, in_coords.data(), elem_in, sizeof(T) * sz(dim));

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
    std::size_t at = 0;
    for (std::size_t q = 0; q < pieces; ++q) {
      const Index* h = in_headers.data() + q * header_size;
      const Index out_begin = h[0], out_size = h[1], levels = h[2], n = h[3];
      const Index* pid = in_ids.data() + at;
      const std::span<const T> pc(in_coords.data() + at * sz(dim), sz(n * dim));
      at += sz(n);
      if (mode == Placement::tree) {
        // A node of out_size slots holds n in [out_size/2, out_size] points. With n > out_size/2 the
        // serial recursion below it is exactly build() of its array (same depth). With n == out_size/2
        // (a power of two) the serial builder splits down to one point per leaf, which build() of n
        // points would not do (it stops at two per leaf): that is partition() to one point per range,
        // each point followed by its padding duplicate.
        if (2 * n == out_size) {
          int levels_below = 0;
          while ((Index{2} << levels_below) < out_size) ++levels_below;
          std::vector<std::int64_t> perm(sz(n), 0);
          if (n > 1) perm = partition(pc, dim, Batch::single(n), levels_below);
          for (Index i = 0; i < n; ++i) {
            put(out_begin + 2 * i, pid[perm[sz(i)]], 1);
            put(out_begin + 2 * i + 1, pid[perm[sz(i)]], 0);
          }
          continue;
        }
        const Tree t = build(pc, dim, Batch::single(n));
        if (t.slots() != out_size)
          throw Error(ErrorCode::internal, "distributed ball tree: a subtree of " + std::to_string(n) + " points has " +
                                               std::to_string(t.slots()) + " slots, expected " + std::to_string(out_size));
        for (Index s = 0; s < out_size; ++s) put(out_begin + s, pid[t.index[sz(s)]], t.mask[sz(s)]);
      } else {
        std::vector<std::int64_t> perm(sz(n));
        if (levels > 0 && n > 1) perm = partition(pc, dim, Batch::single(n), static_cast<int>(levels));
        else std::iota(perm.begin(), perm.end(), 0);
        for (Index i = 0; i < n; ++i) put(out_begin + i, pid[perm[sz(i)]], 0);
      }
    }
    if (std::find(filled.begin(), filled.end(), 0) != filled.end())
      throw Error(ErrorCode::internal, "distributed ball tree: some local output positions were not placed");
  });
  return result;
}

template PlacedRange place<float>(const Comm&, const SpreadSamples<float>&, Placement, int, std::span<const std::int64_t>,
                                  const RankRanges&);
template PlacedRange place<double>(const Comm&, const SpreadSamples<double>&, Placement, int,
                                   std::span<const std::int64_t>, const RankRanges&);

}  // namespace surrogate::balltree::detail
