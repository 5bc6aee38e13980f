// SplitGraphs::route and attend (split_graphs.hpp): each hash table's keys sorted over the ranks (local
// radix sorts, then detail::sort_segments_by_group, pieces cut between regions), every slot's rows routed
// to its bucket's rank, the Gaussian kernel there and the sums back. share/docs/hept.md, "Plan and ranks".
#include <omp.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <type_traits>

#include "../exchange/collectives.hpp"
#include "../exchange/segment_ranks.hpp"
#include "split_graphs.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/bucket_attention.hpp"
#include "surrogate/kernels/stable_key_sort.hpp"
#include "surrogate/profile.hpp"

namespace surrogate::hept {
namespace {

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

// The phases of route (surrogate/profile.hpp): the sort, and inside it an empty phase naming its path.
const PhaseName kBucketSortPhase{"bucket sort over ranks"};
const PhaseName kSortByRegionPhase{"cut between regions"};
const PhaseName kSortBySamplesPhase{"cut by samples"};

}  // namespace

template <class T>
void SplitGraphs::route(const Comm& comm, int table, const T* keys_q, const T* keys_k, int threads) const {
  const int H = cfg_.num_heads, me = comm.rank();
  const std::int64_t bs = cfg_.block_size, G = static_cast<std::int64_t>(graph_first_.size()) - 1;
  const auto np = static_cast<std::int64_t>(graph_.size()), S = 2 * H * G;
  // 1. Every segment's local keys in stable order: this rank's rows of a graph are contiguous and in
  // position order, so the radix sort's ties by row are ties by position.
  std::vector<std::int64_t> row_first(sz(G) + 1);
  for (std::int64_t g = 0; g <= G; ++g) row_first[sz(g)] = std::lower_bound(graph_.begin(), graph_.end(), g) - graph_.begin();
  std::vector<std::int64_t> seg_first(sz(S) + 1, 0);
  for (std::int64_t s = 0; s < S; ++s) seg_first[sz(s) + 1] = seg_first[sz(s)] + row_first[sz(s % G) + 1] - row_first[sz(s % G)];
  std::vector<detail::SortElement>& local = work_.local;
  std::vector<std::int64_t>& group = work_.group;
  local.resize(sz(seg_first.back()));
  group.resize(local.size());
  const Part& part_t = part(std::is_same_v<T, double>);
#pragma omp parallel num_threads(threads)
  {
    kernels::StableKeySortWork<T> work;
    std::vector<std::int64_t> perm;
#pragma omp for schedule(dynamic)
    for (std::int64_t s = 0; s < S; ++s) {
      const std::int64_t g = s % G, h = s / G / 2, j0 = row_first[sz(g)], n = row_first[sz(g) + 1] - j0;
      const T* keys = (s / G % 2 == 0 ? keys_q : keys_k) + h * np + j0;
      perm.resize(sz(n));
      kernels::stable_key_sort(keys, n, j0, perm.data(), work);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::int64_t j = perm[sz(i)];
        local[sz(seg_first[sz(s)] + i)] = {kernels::detail::ordered_bits(keys[j - j0]), position_[sz(j)], h * np + j,
                                           static_cast<std::int32_t>(s), me};
        group[sz(seg_first[sz(s)] + i)] = part_t.groups[sz((table * H + h) * np + j)];
      }
    }
  }
  // 2. The keys sorted over the ranks; every element's rank gives its bucket and slot. Bucket b of (head,
  // graph) is computed by the rank whose piece of the query order holds its start b * bs (a function of
  // the pieces' sizes, which every rank has): with spatially coherent ids most of its rows are there.
  // Regions follow the key order (keys P + code * Delta), so whole ranges of them can go to the ranks: the
  // pieces are cut between the plan's groups of regions where that is exact and balanced (sampled
  // splitters otherwise).
  detail::SortedPiece& piece = work_.piece;
  {
    const ScopedPhase phase(kBucketSortPhase);
    const bool by_region =
        detail::sort_segments_by_group(comm, local, seg_first, group, part_t.group_count[sz(table)], threads, piece);
    const ScopedPhase path(by_region ? kSortByRegionPhase : kSortBySamplesPhase);  // counts the path taken
  }
  const auto P = static_cast<std::size_t>(comm.size());
  std::vector<std::int64_t> piece_end(sz(S) * P);  // [segment][rank]: where each rank's piece ends
  for (std::int64_t s = 0; s < S; ++s)
    for (std::size_t r = 0, end = 0; r < P; ++r)
      piece_end[sz(s) * P + r] = static_cast<std::int64_t>(end += sz(piece.counts[r * sz(S) + sz(s)]));
  const auto holder = [&](std::int64_t s, std::int64_t x) {  // the rank whose piece of segment s holds rank x
    const auto first = piece_end.begin() + static_cast<std::ptrdiff_t>(sz(s) * P);
    return static_cast<int>(std::upper_bound(first, first + static_cast<std::ptrdiff_t>(P), x) - first);
  };
  std::vector<std::int64_t>& records = work_.records;
  std::vector<int>& dest = work_.dest;
  records.clear();
  dest.clear();
  for (std::int64_t s = 0; s < S; ++s) {
    const std::int64_t query_segment = s / G / 2 * 2 * G + s % G;
    for (std::int64_t i = piece.first[sz(s)]; i < piece.first[sz(s) + 1]; ++i) {
      const std::int64_t rank = piece.offset[sz(s)] + i - piece.first[sz(s)], b = rank / bs;
      const detail::SortElement& e = piece.held[sz(i)];
      records.insert(records.end(), {s / G, s % G, b, rank % bs, e.origin, e.payload});
      dest.push_back(holder(query_segment, b * bs));
    }
  }
  detail::push_records(comm, records, 6, dest, work_.pushed);
  const std::vector<std::int64_t>& got_slots = work_.pushed.received;
  const std::vector<int>& from = work_.pushed.source;
  // This rank's buckets: per (head, graph) those starting in its piece of the query order.
  Routes& routes = work_.routes;
  routes.buckets.clear();
  std::vector<std::int64_t> first_bucket(sz(H * G)), first_index(sz(H * G) + 1, 0);
  for (std::int64_t hg = 0; hg < H * G; ++hg) {
    const std::int64_t query_segment = hg / G * 2 * G + hg % G;
    const std::int64_t begin = piece.offset[sz(query_segment)],
                       end = begin + piece.first[sz(query_segment) + 1] - piece.first[sz(query_segment)];
    first_bucket[sz(hg)] = (begin + bs - 1) / bs;
    first_index[sz(hg) + 1] = first_index[sz(hg)] + std::max<std::int64_t>(0, (end + bs - 1) / bs - first_bucket[sz(hg)]);
    for (std::int64_t b = first_bucket[sz(hg)]; b < (end + bs - 1) / bs; ++b) routes.buckets.push_back({hg / G, hg % G, b});
  }
  const std::int64_t slots = first_index.back() * bs;
  for (int side = 0; side < 2; ++side) {
    routes.rank[side].assign(sz(slots), -1);
    routes.key[side].assign(sz(slots), 0);
  }
  for (std::size_t i = 0; i < from.size(); ++i) {
    const std::int64_t* rec = got_slots.data() + 6 * i;
    const std::int64_t h = rec[0] / 2, side = rec[0] % 2, hg = h * G + rec[1];
    const std::size_t t = sz((first_index[sz(hg)] + rec[2] - first_bucket[sz(hg)]) * bs + rec[3]);
    routes.rank[side][t] = static_cast<int>(rec[4]);
    routes.key[side][t] = rec[5];
  }
  std::string hole;
  for (int side = 0; side < 2 && hole.empty(); ++side)
    for (std::int64_t t = 0; t < slots && hole.empty(); ++t)
      if (routes.rank[side][sz(t)] < 0)
        hole = "hept: rank " + std::to_string(me) + " has no row for slot " + std::to_string(t % bs) + " of bucket " +
               std::to_string(routes.buckets[sz(t / bs)][2]) + " of head " + std::to_string(routes.buckets[sz(t / bs)][0]) +
               (side == 0 ? " (queries)" : " (keys)");
  comm.agree_or_throw(hole.empty() ? Status{} : Status{ErrorCode::internal, hole});
}

template <class T>
SplitGraphs::BucketMoves SplitGraphs::bucket_moves(const Comm& comm, int table, const T* keys_q, const T* keys_k,
                                                   int threads) const {
  const auto rows = cfg_.num_heads * static_cast<std::int64_t>(graph_.size());
  route(comm, table, keys_q, keys_k, threads > 0 ? threads : omp_get_max_threads());
  const Routes& routes = work_.routes;
  BucketMoves moves;
  moves.queries = ExchangePlan::from_requests(comm, rows, routes.rank[0], routes.key[0], {}, {});
  moves.keys = ExchangePlan::from_requests(comm, rows, routes.rank[1], routes.key[1], {}, {});
  moves.queries.count_into(traffic_);
  moves.keys.count_into(traffic_);
  moves.slots = static_cast<std::int64_t>(routes.rank[0].size());
  return moves;
}

template <class T>
void SplitGraphs::attend(const Comm& comm, int table, const T* keys_q, const T* keys_k, const T* qh, const T* kh, const T* vh,
                         T* num, T* den, int threads) const {
  const int D = cfg_.h_dim, Dh = cfg_.hash_dim(), bs = cfg_.block_size;
  threads = threads > 0 ? threads : omp_get_max_threads();
  const BucketMoves moves = bucket_moves(comm, table, keys_q, keys_k, threads);
  const ExchangePlan &queries = moves.queries, &keys = moves.keys;
  // The rows of every bucket in slot order (the sorted order), the kernel, the sums back to the queries.
  const std::int64_t slots = moves.slots;
  const std::size_t cap = sz(std::max<std::int64_t>(slots, 1));
  std::vector<T>* rows = nullptr;
  if constexpr (std::is_same_v<T, float>) rows = work_.rows32;
  else rows = work_.rows64;
  std::vector<T>&qs = rows[0], &ks = rows[1], &vs = rows[2], &bnum = rows[3], &bden = rows[4];
  qs.resize(cap * sz(Dh));
  ks.resize(cap * sz(Dh));
  vs.resize(cap * sz(D));
  bnum.resize(cap * sz(D));
  bden.resize(cap);
  queries.forward(qh, Dh, qs.data());
  keys.forward(kh, Dh, ks.data());
  keys.forward(vh, D, vs.data());
  std::vector<std::int64_t> identity(sz(bs));
  std::iota(identity.begin(), identity.end(), std::int64_t{0});
#pragma omp parallel num_threads(threads)
  {
    std::vector<T> scratch(sz(kernels::gaussian_bucket_scratch(bs, Dh, D)));
#pragma omp for schedule(static)
    for (std::int64_t s = 0; s < slots; s += bs) {
      kernels::GaussianBucketArgsOf<T> args{qs.data() + s * Dh, Dh, identity.data(), ks.data() + s * Dh, Dh,
                                            identity.data(), vs.data() + s * D, D, bs, Dh, D,
                                            bnum.data() + s * D, bden.data() + s, scratch.data()};
      if (s + bs < slots) {  // the next bucket's rows stream from arrays larger than the caches
        const std::int64_t n = s + bs;
        args.next[0] = qs.data() + n * Dh;
        args.next[1] = ks.data() + n * Dh;
        args.next[2] = vs.data() + n * D;
        args.next_bytes[0] = args.next_bytes[1] = sizeof(T) * sz(bs) * sz(Dh);
        args.next_bytes[2] = sizeof(T) * sz(bs) * sz(D);
      }
      if constexpr (std::is_same_v<T, float>)
        kernels::cpu().gaussian_bucket(args);
      else
        kernels::cpu().gaussian_bucket_f64(args);
    }
  }
  queries.backward(bnum.data(), D, num);
  queries.backward(bden.data(), 1, den);
}

template SplitGraphs::BucketMoves SplitGraphs::bucket_moves<float>(const Comm&, int, const float*, const float*,
                                                                    int) const;
template void SplitGraphs::attend<float>(const Comm&, int, const float*, const float*, const float*, const float*,
                                         const float*, float*, float*, int) const;
template void SplitGraphs::attend<double>(const Comm&, int, const double*, const double*, const double*, const double*,
                                          const double*, double*, double*, int) const;

}  // namespace surrogate::hept
