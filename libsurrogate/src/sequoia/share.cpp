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

std::vector<index_t> range(index_t begin, index_t end) {
  std::vector<index_t> r(static_cast<std::size_t>(end - begin));
  std::iota(r.begin(), r.end(), begin);
  return r;
}

/// The rows of `fixed` (k per node) of the nodes `queries`.
std::vector<std::int64_t> rows_of(const std::vector<std::int64_t>& fixed, const std::vector<index_t>& queries, int k) {
  std::vector<std::int64_t> out;
  out.reserve(queries.size() * static_cast<std::size_t>(k));
  for (const index_t q : queries) out.insert(out.end(), fixed.begin() + q * k, fixed.begin() + (q + 1) * k);
  return out;
}

Share build(const Hierarchy& h, const Config& cfg, std::vector<index_t> points, index_t voxels_begin, index_t voxels_end,
            const std::vector<std::vector<std::int64_t>>* given) {
  Share s;
  const int L = cfg.levels(), ks = cfg.k_siblings();
  const bool cls = cfg.kind == Config::Kind::classification;
  s.points = std::move(points);
  s.voxels_begin = voxels_begin;
  s.voxels_end = voxels_end;
  const std::vector<index_t> voxels = range(voxels_begin, voxels_end);
  const auto& pos0 = h.level_positions[0];
  const auto& batch0 = h.level_batch[0];
  std::vector<std::int64_t> sib0 = given ? rows_of((*given)[0], s.points, ks) : nearest_lists(pos0, batch0, ks, s.points);
  std::vector<std::int64_t> conv = cls ? nearest_lists(pos0, batch0, Config::k_pointconv, s.points) : std::vector<std::int64_t>{};

  // Extended rows: the points, then the other ranks' points the lists name (ascending).
  const auto n0 = static_cast<index_t>(s.points.size());
  std::vector<index_t> extended(static_cast<std::size_t>(h.nodes(0)), -1);
  for (index_t t = 0; t < n0; ++t) extended[static_cast<std::size_t>(s.points[static_cast<std::size_t>(t)])] = t;
  for (const auto* list : {&sib0, &conv})
    for (const std::int64_t key : *list)
      if (extended[static_cast<std::size_t>(key)] < 0) s.halo.push_back(key);
  std::sort(s.halo.begin(), s.halo.end());
  s.halo.erase(std::unique(s.halo.begin(), s.halo.end()), s.halo.end());
  for (std::size_t j = 0; j < s.halo.size(); ++j) extended[static_cast<std::size_t>(s.halo[j])] = n0 + static_cast<index_t>(j);
  for (auto* list : {&sib0, &conv})
    for (std::int64_t& key : *list) key = extended[static_cast<std::size_t>(key)];
  if (cls) s.pointconv = fixed_lists(std::move(conv), Config::k_pointconv);

  const auto same = [](std::int64_t key) { return key; };
  s.parents.resize(static_cast<std::size_t>(L));
  s.children.resize(static_cast<std::size_t>(L));
  s.siblings.resize(static_cast<std::size_t>(L));
  for (int i = 0; i < L; ++i) {
    const auto si = static_cast<std::size_t>(i);
    const KeyLists up = lists_of(h.parent_edges[si], h.nodes(i)), down = lists_of(h.child_edges[si], h.nodes(i));
    if (i == 0) {
      s.parents[si] = select(up, s.points, same);
      s.children[si] = select(down, s.points, same);
      s.siblings[si] = fixed_lists(std::move(sib0), ks);
    } else if (i == 1) {
      std::string foreign;
      s.parents[si] = select(up, voxels, same);
      s.children[si] = select(down, voxels, [&](std::int64_t key) {
        const index_t t = extended[static_cast<std::size_t>(key)];
        if ((t < 0 || t >= n0) && foreign.empty()) foreign = "point " + std::to_string(key);
        return t;
      });
      if (!foreign.empty())
        throw Error(ErrorCode::internal, "sequoia share: a lowest voxel's child (" + foreign + ") is not among its points");
      if (i + 1 < L)
        s.siblings[si] = fixed_lists(given ? rows_of((*given)[si], voxels, ks)
                                           : nearest_lists(h.level_positions[si], h.level_batch[si], ks, voxels), ks);
    } else {
      s.parents[si] = up;
      s.children[si] = down;
      if (i + 1 < L) s.siblings[si] = fixed_lists(given ? (*given)[si] : sibling_lists(h, i, ks), ks);
    }
  }
  return s;
}

}  // namespace

Share Share::whole(const Hierarchy& h, const Config& cfg, const std::vector<std::vector<std::int64_t>>* siblings) {
  return build(h, cfg, range(0, h.nodes(0)), 0, h.nodes(1), siblings);
}

std::vector<int> Share::point_owners(const Hierarchy& h, int ranks) {
  const auto& parent = h.pool_parent[0];  // a point's lowest voxel
  std::vector<index_t> before(static_cast<std::size_t>(h.nodes(1)) + 1, 0);
  for (const std::int64_t v : parent) ++before[static_cast<std::size_t>(v) + 1];
  std::partial_sum(before.begin(), before.end(), before.begin());
  const auto total = static_cast<index_t>(parent.size());
  std::vector<int> owner(parent.size());
  for (std::size_t r = 0; r < parent.size(); ++r) {
    const double share = static_cast<double>(before[static_cast<std::size_t>(parent[r])]) / static_cast<double>(total);
    owner[r] = std::min(ranks - 1, static_cast<int>(share * ranks));
  }
  return owner;
}

Share Share::split_over(const Comm& comm, const Hierarchy& h, const Config& cfg) {
  const int rank = comm.rank();
  std::vector<int> owner;
  std::vector<index_t> points;
  index_t voxels_begin = h.nodes(1), voxels_end = 0;
  Share s;
  collectively(comm, [&] {
    owner = point_owners(h, comm.size());
    for (std::size_t r = 0; r < owner.size(); ++r) {
      if (owner[r] != rank) continue;
      points.push_back(static_cast<index_t>(r));
      voxels_begin = std::min<index_t>(voxels_begin, h.pool_parent[0][r]);
      voxels_end = std::max<index_t>(voxels_end, h.pool_parent[0][r] + 1);
    }
    if (points.empty()) {  // an empty range where the rank's voxels would start
      voxels_begin = h.nodes(1);
      for (std::size_t r = 0; r < owner.size(); ++r)
        if (owner[r] > rank) voxels_begin = std::min<index_t>(voxels_begin, h.pool_parent[0][r]);
      voxels_end = voxels_begin;
    }
    s = build(h, cfg, std::move(points), voxels_begin, voxels_end, nullptr);
  });
  // Halo rows from their owners: the key of a point is its index among its owner's points.
  std::vector<index_t> index_at_owner(owner.size());
  std::vector<index_t> seen(static_cast<std::size_t>(comm.size()), 0);
  for (std::size_t r = 0; r < owner.size(); ++r) index_at_owner[r] = seen[static_cast<std::size_t>(owner[r])]++;
  std::vector<int> source_rank;
  std::vector<std::int64_t> source_key;
  for (const index_t g : s.halo) {
    source_rank.push_back(owner[static_cast<std::size_t>(g)]);
    source_key.push_back(index_at_owner[static_cast<std::size_t>(g)]);
  }
  s.to_halo = ExchangePlan::from_requests(comm, static_cast<std::int64_t>(s.points.size()), source_rank, source_key, {}, {});
  s.voxels_to_all = ExchangePlan::all_gather(comm, s.voxels_end - s.voxels_begin);
  s.split = true;
  return s;
}

}  // namespace surrogate::sequoia
