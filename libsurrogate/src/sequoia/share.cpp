// Share (share.hpp): a rank's lowest voxels and points, the key lists of its queries, the halo of other
// ranks' points those lists name. share/docs/sequoia.md, "Across ranks".
#include "share.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "neighbours.hpp"
#include "surrogate/error.hpp"

namespace surrogate::sequoia {
namespace {

/// Lists from edges sorted by query (query local id, key).
KeyLists lists_of(const std::vector<std::pair<std::int64_t, std::int64_t>>& edges, index_t queries) {
  KeyLists l;
  l.first.assign(static_cast<std::size_t>(queries) + 1, 0);
  for (const auto& e : edges) ++l.first[static_cast<std::size_t>(e.first) + 1];
  std::partial_sum(l.first.begin(), l.first.end(), l.first.begin());
  l.keys.reserve(edges.size());
  for (const auto& e : edges) l.keys.push_back(e.second);
  return l;
}

KeyLists fixed_lists(std::vector<std::int64_t> keys, int k) {
  KeyLists l;
  l.first.resize(keys.size() / static_cast<std::size_t>(k) + 1);
  for (std::size_t a = 0; a < l.first.size(); ++a) l.first[a] = static_cast<std::int64_t>(a) * k;
  l.keys = std::move(keys);
  return l;
}

/// The lists of `queries` (ascending) out of lists over all nodes, keys through `key`.
template <class KeyMap>
KeyLists select(const KeyLists& all, const std::vector<index_t>& queries, KeyMap key) {
  KeyLists l;
  l.first.reserve(queries.size() + 1);
  l.first.push_back(0);
  for (const index_t q : queries) {
    for (auto e = all.first[static_cast<std::size_t>(q)]; e < all.first[static_cast<std::size_t>(q) + 1]; ++e)
      l.keys.push_back(key(all.keys[static_cast<std::size_t>(e)]));
    l.first.push_back(static_cast<std::int64_t>(l.keys.size()));
  }
  return l;
}

/// Whether `ids` (ascending, distinct) are 0 .. count - 1.
bool is_range(const std::vector<index_t>& ids, index_t count) {
  return static_cast<index_t>(ids.size()) == count && (count == 0 || ids.back() == count - 1);
}

std::vector<index_t> range(index_t begin, index_t end) {
  std::vector<index_t> r(static_cast<std::size_t>(end - begin));
  std::iota(r.begin(), r.end(), begin);
  return r;
}

/// The first `k` of every row of `lists` (`width` per row).
std::vector<std::int64_t> first_columns(const std::vector<std::int64_t>& lists, int width, int k) {
  std::vector<std::int64_t> out;
  out.reserve(lists.size() / static_cast<std::size_t>(width) * static_cast<std::size_t>(k));
  for (auto row = lists.begin(); row != lists.end(); row += width) out.insert(out.end(), row, row + k);
  return out;
}

/// The rows of `fixed` (k per node) of the nodes `queries`.
std::vector<std::int64_t> rows_of(const std::vector<std::int64_t>& fixed, const std::vector<index_t>& queries, int k) {
  std::vector<std::int64_t> out;
  out.reserve(queries.size() * static_cast<std::size_t>(k));
  for (const index_t q : queries) out.insert(out.end(), fixed.begin() + q * k, fixed.begin() + (q + 1) * k);
  return out;
}

Share build(const Hierarchy& h, const Config& cfg, std::vector<index_t> points, std::vector<index_t> owned_voxels,
            const std::vector<std::vector<std::int64_t>>* given, const NearestFinder& finder) {
  const auto find = [&](const std::vector<float>& positions, const std::vector<std::int64_t>& batch, int k,
                        const std::vector<std::int64_t>& queries) {
    return finder ? finder(positions, batch, k, queries) : nearest_lists(positions, batch, k, queries);
  };
  Share s;
  const int L = cfg.levels(), ks = cfg.k_siblings();
  const bool cls = cfg.kind == Config::Kind::classification;
  s.points = std::move(points);
  s.voxels = std::move(owned_voxels);
  const std::vector<index_t>& voxels = s.voxels;
  {
    std::vector<index_t> slot_of(static_cast<std::size_t>(h.nodes(1)), -1);
    for (std::size_t j = 0; j < voxels.size(); ++j) slot_of[static_cast<std::size_t>(voxels[j])] = static_cast<index_t>(j);
    for (const index_t r : s.points) s.slot.push_back(slot_of[static_cast<std::size_t>(h.pool_parent[0][static_cast<std::size_t>(r)])]);
    if (std::count(s.slot.begin(), s.slot.end(), index_t{-1}) > 0)
      throw Error(ErrorCode::internal, "sequoia share: a point's lowest voxel is not among the voxels computed here");
  }
  const auto& pos0 = h.level_positions[0];
  const auto& batch0 = h.level_batch[0];
  // Classification's PointConv lists and the point siblings rank the same candidates: the k_siblings
  // nearest are the first k_siblings of the k_pointconv nearest (the padding too), so one search gives both.
  std::vector<std::int64_t> conv = cls ? find(pos0, batch0, Config::k_pointconv, s.points) : std::vector<std::int64_t>{};
  std::vector<std::int64_t> sib0;
  if (given) sib0 = rows_of((*given)[0], s.points, ks);
  else if (cls && ks <= Config::k_pointconv) sib0 = first_columns(conv, Config::k_pointconv, ks);
  else sib0 = find(pos0, batch0, ks, s.points);

  // Extended rows: the points, then the other ranks' points the lists name (ascending). A share of every
  // point (and every lowest voxel) has no halo and numbers its rows as the nodes: its lists are the
  // hierarchy's as they stand (renumbering them is a random read per key, most of the share's time at
  // 10^6 points).
  const auto n0 = static_cast<index_t>(s.points.size());
  const bool every_point = is_range(s.points, h.nodes(0)), every_voxel = every_point && is_range(voxels, h.nodes(1));
  std::vector<index_t> extended;  // empty: the identity
  if (!every_point) {
    extended.assign(static_cast<std::size_t>(h.nodes(0)), -1);
    for (index_t t = 0; t < n0; ++t) extended[static_cast<std::size_t>(s.points[static_cast<std::size_t>(t)])] = t;
    for (const auto* list : {&sib0, &conv})
      for (const std::int64_t key : *list)
        if (extended[static_cast<std::size_t>(key)] < 0) s.halo.push_back(key);
    std::sort(s.halo.begin(), s.halo.end());
    s.halo.erase(std::unique(s.halo.begin(), s.halo.end()), s.halo.end());
    for (std::size_t j = 0; j < s.halo.size(); ++j) extended[static_cast<std::size_t>(s.halo[j])] = n0 + static_cast<index_t>(j);
    for (auto* list : {&sib0, &conv})
      for (std::int64_t& key : *list) key = extended[static_cast<std::size_t>(key)];
  }
  if (cls) s.pointconv = fixed_lists(std::move(conv), Config::k_pointconv);

  const auto same = [](std::int64_t key) { return key; };
  s.parents.resize(static_cast<std::size_t>(L));
  s.children.resize(static_cast<std::size_t>(L));
  s.siblings.resize(static_cast<std::size_t>(L));
  for (int i = 0; i < L; ++i) {
    const auto si = static_cast<std::size_t>(i);
    KeyLists up = lists_of(h.parent_edges[si], h.nodes(i)), down = lists_of(h.child_edges[si], h.nodes(i));
    if (i == 0) {
      s.parents[si] = every_point ? std::move(up) : select(up, s.points, same);
      s.children[si] = every_point ? std::move(down) : select(down, s.points, same);
      s.siblings[si] = fixed_lists(std::move(sib0), ks);
    } else if (i == 1) {
      std::string foreign;
      s.parents[si] = every_voxel ? std::move(up) : select(up, voxels, same);
      if (every_voxel) s.children[si] = std::move(down);  // every key a point here, numbered as its node
      else
        s.children[si] = select(down, voxels, [&](std::int64_t key) {
          const index_t t = extended.empty() ? key : extended[static_cast<std::size_t>(key)];
          if ((t < 0 || t >= n0) && foreign.empty()) foreign = "point " + std::to_string(key);
          return t;
        });
      if (!foreign.empty())
        throw Error(ErrorCode::internal, "sequoia share: a lowest voxel's child (" + foreign + ") is not among its points");
      if (i + 1 < L)
        s.siblings[si] = fixed_lists(given ? rows_of((*given)[si], voxels, ks)
                                           : find(h.level_positions[si], h.level_batch[si], ks, voxels), ks);
    } else {
      s.parents[si] = up;
      s.children[si] = down;
      if (i + 1 < L)
        s.siblings[si] =
            fixed_lists(given ? (*given)[si] : find(h.level_positions[si], h.level_batch[si], ks, range(0, h.nodes(i))), ks);
    }
  }
  return s;
}

}  // namespace

Share Share::whole(const Hierarchy& h, const Config& cfg, const std::vector<std::vector<std::int64_t>>* siblings,
                   const NearestFinder& find) {
  return build(h, cfg, range(0, h.nodes(0)), range(0, h.nodes(1)), siblings, find);
}

namespace {

/// Bit i of x to bit 3i (x < 2^21).
std::uint64_t spread_bits(std::uint64_t x) {
  std::uint64_t r = 0;
  for (int i = 0; i < 21; ++i) r |= ((x >> i) & 1u) << (3 * i);
  return r;
}

}  // namespace

std::vector<int> Share::voxel_owners(const Hierarchy& h, int ranks) {
  const index_t V = h.nodes(1);
  const auto& pos = h.level_positions[1];
  const auto& batch = h.level_batch[1];
  // Morton codes of the centres, quantised to 2^16 steps of the longest side of the sample's box of centres.
  std::vector<std::uint64_t> code(static_cast<std::size_t>(V));
  for (index_t begin = 0; begin < V;) {
    index_t end = begin;
    while (end < V && batch[static_cast<std::size_t>(end)] == batch[static_cast<std::size_t>(begin)]) ++end;
    double lo[3], hi[3];
    for (int a = 0; a < 3; ++a) lo[a] = hi[a] = pos[static_cast<std::size_t>(begin * 3 + a)];
    for (index_t v = begin; v < end; ++v)
      for (int a = 0; a < 3; ++a) {
        lo[a] = std::min(lo[a], static_cast<double>(pos[static_cast<std::size_t>(v * 3 + a)]));
        hi[a] = std::max(hi[a], static_cast<double>(pos[static_cast<std::size_t>(v * 3 + a)]));
      }
    // One scale for the three axes (cubic cells); the longest axis takes the highest bit of each triple,
    // so that the first cuts cross the sample's longest extent.
    const double extent = std::max({hi[0] - lo[0], hi[1] - lo[1], hi[2] - lo[2]});
    int shift[3] = {0, 1, 2};
    std::sort(shift, shift + 3, [&](int a, int b) { return hi[a] - lo[a] < hi[b] - lo[b] || (hi[a] - lo[a] == hi[b] - lo[b] && a < b); });
    for (index_t v = begin; v < end; ++v) {
      std::uint64_t c = 0;
      for (int k = 0; k < 3; ++k) {
        const int a = shift[k];
        const double t = extent > 0 ? (pos[static_cast<std::size_t>(v * 3 + a)] - lo[a]) / extent : 0.0;
        c |= spread_bits(static_cast<std::uint64_t>(std::clamp(t, 0.0, 1.0) * 65535.0)) << k;
      }
      code[static_cast<std::size_t>(v)] = c;
    }
    begin = end;
  }
  std::vector<index_t> order(static_cast<std::size_t>(V));
  std::iota(order.begin(), order.end(), index_t{0});
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
    const auto sa = batch[static_cast<std::size_t>(a)], sb = batch[static_cast<std::size_t>(b)];
    return sa != sb ? sa < sb : code[static_cast<std::size_t>(a)] < code[static_cast<std::size_t>(b)];
  });
  std::vector<index_t> points(static_cast<std::size_t>(V), 0);
  for (const std::int64_t v : h.pool_parent[0]) ++points[static_cast<std::size_t>(v)];
  const auto total = static_cast<double>(h.pool_parent[0].size());
  std::vector<int> owner(static_cast<std::size_t>(V));
  index_t before = 0;
  for (const index_t v : order) {
    owner[static_cast<std::size_t>(v)] = std::min(ranks - 1, static_cast<int>(static_cast<double>(before) / total * ranks));
    before += points[static_cast<std::size_t>(v)];
  }
  return owner;
}

Share Share::split_over(const Comm& comm, const Hierarchy& h, const Config& cfg, const NearestFinder& find) {
  const int rank = comm.rank();
  std::vector<int> owner;
  Share s;
  collectively(comm, [&] {
    owner = voxel_owners(h, comm.size());
    std::vector<index_t> my_points, my_voxels;
    for (std::size_t r = 0; r < h.pool_parent[0].size(); ++r)
      if (owner[static_cast<std::size_t>(h.pool_parent[0][r])] == rank) my_points.push_back(static_cast<index_t>(r));
    for (std::size_t v = 0; v < owner.size(); ++v)
      if (owner[v] == rank) my_voxels.push_back(static_cast<index_t>(v));
    s = build(h, cfg, std::move(my_points), std::move(my_voxels), nullptr, find);
  });
  // A point's key at its owner is its index among the owner's points; a voxel's, among its voxels.
  const auto keys_at_owners = [&](std::size_t count, auto owner_of) {
    std::vector<index_t> key(count), seen(static_cast<std::size_t>(comm.size()), 0);
    for (std::size_t i = 0; i < count; ++i) key[i] = seen[static_cast<std::size_t>(owner_of(i))]++;
    return key;
  };
  const auto point_owner = [&](std::size_t r) { return owner[static_cast<std::size_t>(h.pool_parent[0][r])]; };
  const std::vector<index_t> point_key = keys_at_owners(h.pool_parent[0].size(), point_owner);
  const std::vector<index_t> voxel_key = keys_at_owners(owner.size(), [&](std::size_t v) { return owner[v]; });
  std::vector<int> source_rank;
  std::vector<std::int64_t> source_key;
  for (const index_t g : s.halo) {
    source_rank.push_back(point_owner(static_cast<std::size_t>(g)));
    source_key.push_back(point_key[static_cast<std::size_t>(g)]);
  }
  s.to_halo = ExchangePlan::from_requests(comm, static_cast<std::int64_t>(s.points.size()), source_rank, source_key, {}, {});
  source_rank.assign(owner.begin(), owner.end());
  source_key.assign(voxel_key.begin(), voxel_key.end());
  s.voxels_to_all = ExchangePlan::from_requests(comm, static_cast<std::int64_t>(s.voxels.size()), source_rank, source_key, {}, {});
  s.split = true;
  return s;
}

}  // namespace surrogate::sequoia
