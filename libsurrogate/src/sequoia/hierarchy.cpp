// The voxel hierarchy of util/voxel_fixed.py, its batch collation and level indexing
// (share/docs/sequoia.md, "Hierarchy"). Float32 operations in the reference's order; no contraction.
#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>
#include <string>
#include <unordered_map>
#include <utility>

#include "surrogate/error.hpp"
#include "surrogate/kernels/stable_key_sort.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {
namespace {

constexpr std::uint64_t kFnvOffset = 14695981039346656037ull;
constexpr std::uint64_t kFnvPrime = 1099511628211ull;

/// Ranks of `hashes` by ascending value with the first occurrence of each distinct value:
/// returns (sorted distinct hashes, index of first occurrence, inverse: element -> rank).
struct Unique {
  std::vector<std::uint64_t> values;
  std::vector<index_t> first, inverse;
};
Unique unique_by_table(const std::vector<std::uint64_t>& hashes) {
  const std::size_t n = hashes.size();
  // The distinct values are few against the elements (every element of a level is in one of its voxels):
  // an open-addressing table of the values (slot: value, first occurrence), filled in element order, so
  // that a value's first insertion is its first occurrence; then the distinct values sorted.
  std::size_t capacity = 64;  // grows by doubling (small, so that the golden tests' clouds grow it)
  std::vector<std::uint64_t> slot_value(capacity);
  std::vector<index_t> slot_first(capacity, -1);
  std::vector<std::uint32_t> slot_of(n);  // each element's slot (rehashing renumbers them)
  std::size_t used = 0;
  auto home = [](std::uint64_t h, std::size_t mask) {
    h ^= h >> 33;  // the FNV values' low bits follow their last column: mixed before masking
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return static_cast<std::size_t>(h) & mask;
  };
  auto find_or_insert = [&](std::uint64_t h, index_t e) {
    std::size_t s = home(h, capacity - 1);
    while (slot_first[s] >= 0 && slot_value[s] != h) s = (s + 1) & (capacity - 1);
    if (slot_first[s] < 0) {
      slot_value[s] = h;
      slot_first[s] = e;
      ++used;
    }
    return s;
  };
  for (std::size_t e = 0; e < n; ++e) {
    if (2 * (used + 1) > capacity) {  // keep the table at most half full
      std::vector<std::uint64_t> old_value = std::move(slot_value);
      std::vector<index_t> old_first = std::move(slot_first);
      if (capacity >= (std::size_t{1} << 31))
        throw Error(ErrorCode::input, "sequoia hierarchy: more than 2^30 distinct voxels");
      capacity *= 2;
      slot_value.assign(capacity, 0);
      slot_first.assign(capacity, -1);
      std::vector<std::uint32_t> renumber(old_first.size());
      used = 0;
      for (std::size_t t = 0; t < old_first.size(); ++t)
        if (old_first[t] >= 0) renumber[t] = static_cast<std::uint32_t>(find_or_insert(old_value[t], old_first[t]));
      for (std::size_t f = 0; f < e; ++f) slot_of[f] = renumber[slot_of[f]];
    }
    slot_of[e] = static_cast<std::uint32_t>(find_or_insert(hashes[e], static_cast<index_t>(e)));
  }
  std::vector<std::uint32_t> slots;
  slots.reserve(used);
  for (std::size_t t = 0; t < capacity; ++t)
    if (slot_first[t] >= 0) slots.push_back(static_cast<std::uint32_t>(t));
  std::sort(slots.begin(), slots.end(), [&](std::uint32_t x, std::uint32_t y) { return slot_value[x] < slot_value[y]; });
  Unique u{std::vector<std::uint64_t>(slots.size()), std::vector<index_t>(slots.size()), std::vector<index_t>(n)};
  std::vector<index_t> rank_of_slot(capacity);
  for (std::size_t r = 0; r < slots.size(); ++r) {
    u.values[r] = slot_value[slots[r]];
    u.first[r] = slot_first[slots[r]];
    rank_of_slot[slots[r]] = static_cast<index_t>(r);
  }
  for (std::size_t e = 0; e < n; ++e) u.inverse[e] = rank_of_slot[slot_of[e]];
  return u;
}

/// unique_by_table's result by a stable radix sort of all the elements: for values nearly all distinct.
/// A hash with its top bit flipped, read as int64, orders as the hash does as uint64.
Unique unique_by_sort(const std::vector<std::uint64_t>& hashes) {
  const auto n = static_cast<index_t>(hashes.size());
  std::vector<index_t> order(static_cast<std::size_t>(n));
  if (n < (index_t{1} << 32)) {
    std::vector<std::int64_t> keys(static_cast<std::size_t>(n));
    for (std::size_t i = 0; i < keys.size(); ++i)
      keys[i] = static_cast<std::int64_t>(hashes[i] ^ (std::uint64_t{1} << 63));
    kernels::StableKeySortWork<std::int64_t> work;
    kernels::stable_key_sort(keys.data(), n, 0, order.data(), work);
  } else {  // beyond the radix sort's positions
    std::iota(order.begin(), order.end(), index_t{0});
    std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
      return hashes[static_cast<std::size_t>(a)] < hashes[static_cast<std::size_t>(b)];
    });
  }
  Unique u;
  u.inverse.assign(static_cast<std::size_t>(n), 0);
  for (index_t k = 0; k < n; ++k) {
    const index_t e = order[static_cast<std::size_t>(k)];
    const std::uint64_t h = hashes[static_cast<std::size_t>(e)];
    if (u.values.empty() || u.values.back() != h) {
      u.values.push_back(h);
      u.first.push_back(e);  // stable: the first element of a run is the first occurrence
    }
    u.inverse[static_cast<std::size_t>(e)] = static_cast<index_t>(u.values.size()) - 1;
  }
  return u;
}

/// The distinct values of `hashes`, of which there are at most `distinct_bound`: by the table when they
/// are few against the elements, else by the sort (the same result either way).
Unique unique_sorted(const std::vector<std::uint64_t>& hashes, double distinct_bound) {
  return 4.0 * distinct_bound <= static_cast<double>(hashes.size()) ? unique_by_table(hashes) : unique_by_sort(hashes);
}

/// Edges (query, other) in ascending query order, ties in their order (std::stable_sort's), by the radix
/// sort of the queries (local ids, >= 0).
void sort_by_query(std::vector<std::pair<std::int64_t, std::int64_t>>& edges,
                   kernels::StableKeySortWork<std::int64_t>& work) {
  const auto n = static_cast<std::int64_t>(edges.size());
  const auto by_query = [](const auto& a, const auto& b) { return a.first < b.first; };
  if (std::is_sorted(edges.begin(), edges.end(), by_query)) return;  // e.g. the points' parents, in point order
  if (n >= (std::int64_t{1} << 32)) {  // beyond the radix sort's positions
    std::stable_sort(edges.begin(), edges.end(), by_query);
    return;
  }
  std::vector<std::int64_t> queries(edges.size()), order(edges.size());
  for (std::size_t e = 0; e < edges.size(); ++e) queries[e] = edges[e].first;
  kernels::stable_key_sort(queries.data(), n, 0, order.data(), work);
  std::vector<std::pair<std::int64_t, std::int64_t>> sorted(edges.size());
  for (std::size_t e = 0; e < edges.size(); ++e) sorted[e] = edges[static_cast<std::size_t>(order[e])];
  edges = std::move(sorted);
}

}  // namespace

std::uint64_t fnv64(const std::int64_t* columns, int count) {
  std::uint64_t h = kFnvOffset;
  for (int j = 0; j < count; ++j) {
    h *= kFnvPrime;
    h ^= static_cast<std::uint64_t>(columns[j]);
  }
  return h;
}

SampleHierarchy build_sample_hierarchy(const float* points, index_t n, int divide, int depth, const std::string& what) {
  if (divide < 2 || depth < 2)
    throw Error(ErrorCode::invalid_argument, "sequoia hierarchy: divide (" + std::to_string(divide) +
                                                 ") and depth (" + std::to_string(depth) + ") must be at least 2");
  if (n <= 0) throw Error(ErrorCode::input, "sequoia hierarchy: " + what + " has no points");
  for (index_t j = 0; j < n; ++j)
    for (int a = 0; a < 3; ++a)
      if (!std::isfinite(points[j * 3 + a]))
        throw Error(ErrorCode::input, "sequoia hierarchy: " + what + ", point " + std::to_string(j) +
                                          ": non-finite coordinate " + std::to_string(a));
  SampleHierarchy s;
  s.points.assign(points, points + n * 3);
  s.n = n;
  s.divide = divide;
  s.depth = depth;
  for (int a = 0; a < 3; ++a) {
    float mn = points[a], mx = points[a];
    for (index_t j = 1; j < n; ++j) {
      mn = std::min(mn, points[j * 3 + a]);
      mx = std::max(mx, points[j * 3 + a]);
    }
    s.lo[a] = mn - 1e-6f;
    s.hi[a] = mx + 1e-6f;
  }
  if (std::pow(static_cast<double>(divide), depth - 1) >= 2147483648.0)
    throw Error(ErrorCode::invalid_argument, "sequoia hierarchy: divide^(depth-1) = " + std::to_string(divide) + "^" +
                                                 std::to_string(depth - 1) + " voxels per axis exceed int32 coordinates");
  for (int a = 0; a < 3; ++a)
    if (!(s.hi[a] > s.lo[a]))  // coordinates so large that the +-1e-6 margin vanishes, all equal on this axis
      throw Error(ErrorCode::input, "sequoia hierarchy: " + what + ": the points span no extent along axis " +
                                        std::to_string(a) + " (all at " + std::to_string(s.lo[a]) +
                                        ", where float32 cannot add the 1e-6 margin): no voxel can be formed");
  s.steps.resize(static_cast<std::size_t>(depth) * 3);
  float cells = 1.0f;
  for (int l = 0; l < depth; ++l, cells *= static_cast<float>(divide))
    for (int a = 0; a < 3; ++a) s.steps[static_cast<std::size_t>(l * 3 + a)] = (s.hi[a] - s.lo[a]) / cells;
  // Voxel coordinates trunc((p - lo) / step) in float32, and the level-major rows (vx, vy, vz, level).
  const std::size_t rows = static_cast<std::size_t>(depth) * static_cast<std::size_t>(n);
  s.voxel_coords.resize(rows * 3);
  std::vector<std::uint64_t> hashes(rows);
  for (int l = 0; l < depth; ++l)
    for (index_t j = 0; j < n; ++j) {
      const std::size_t r = static_cast<std::size_t>(l) * static_cast<std::size_t>(n) + static_cast<std::size_t>(j);
      std::int64_t cols[4];
      for (int a = 0; a < 3; ++a) {
        const float shifted = points[j * 3 + a] - s.lo[a];
        const float v = std::trunc(shifted / s.steps[static_cast<std::size_t>(l * 3 + a)]);
        if (!(v >= 0.0f && v < 2147483648.0f))  // a step that underflowed to 0 (a tiny extent at a large magnitude)
          throw Error(ErrorCode::input, "sequoia hierarchy: " + what + ", point " + std::to_string(j) +
                                            ": voxel coordinate " + std::to_string(v) + " on axis " + std::to_string(a) +
                                            " at level " + std::to_string(l) + " is outside the int32 range");
        s.voxel_coords[r * 3 + static_cast<std::size_t>(a)] = static_cast<std::int32_t>(v);
        cols[a] = static_cast<std::int32_t>(v);
      }
      cols[3] = l;
      hashes[r] = fnv64(cols, 4);
    }
  // At most min(n, divide^(3l)) voxels at level l.
  double voxel_bound = 0.0;
  for (int l = 0; l < depth; ++l) voxel_bound += std::min(static_cast<double>(n), std::pow(double(divide), 3.0 * l));
  const Unique voxels = unique_sorted(hashes, voxel_bound);
  const index_t V = static_cast<index_t>(voxels.values.size());
  s.voxel_hashes = voxels.values;
  s.voxel_rows.resize(static_cast<std::size_t>(V) * 4);
  s.virtual_positions.resize(static_cast<std::size_t>(V) * 3);
  std::vector<index_t> roots, level1;
  for (index_t r = 0; r < V; ++r) {
    const std::size_t e = static_cast<std::size_t>(voxels.first[static_cast<std::size_t>(r)]);
    const int l = static_cast<int>(e / static_cast<std::size_t>(n));
    for (int a = 0; a < 3; ++a) {
      const std::int32_t v = s.voxel_coords[e * 3 + static_cast<std::size_t>(a)];
      s.voxel_rows[static_cast<std::size_t>(r * 4 + a)] = v;
      // v * step + step / 2 in float64 (the reference promotes), then rounded to float32 by the loader.
      const float step = s.steps[static_cast<std::size_t>(l * 3 + a)];
      s.virtual_positions[static_cast<std::size_t>(r * 3 + a)] =
          static_cast<float>(static_cast<double>(v) * static_cast<double>(step) + static_cast<double>(step / 2.0f));
    }
    s.voxel_rows[static_cast<std::size_t>(r * 4 + 3)] = l;
    if (l == 0) roots.push_back(n + r);
    if (l == 1) level1.push_back(n + r);
  }
  if (roots.size() != 1)
    throw Error(ErrorCode::input,
                "sequoia hierarchy: " + what + " spans " + std::to_string(roots.size()) +
                    " root voxels: its extent is too large for the float32 margins of 1e-6 (the reference fails "
                    "on such input; normalise the coordinates, e.g. to the unit ball)");
  auto node_of = [&](int l, index_t j) {
    return n + voxels.inverse[static_cast<std::size_t>(l) * static_cast<std::size_t>(n) + static_cast<std::size_t>(j)];
  };
  auto add_row = [&](std::int64_t parent, std::int64_t child, int pl) {
    s.mapping.insert(s.mapping.end(), {parent, child, std::int64_t{pl}, std::int64_t{pl + 1}});
  };
  s.mapping.reserve(static_cast<std::size_t>(4 * (V + n)));  // a row per voxel below the root, one per point
  for (const index_t v : level1) add_row(roots[0], v, 0);
  for (int l = 1; l + 1 < depth; ++l) {
    std::vector<std::uint64_t> pair_hash(static_cast<std::size_t>(n));
    for (index_t j = 0; j < n; ++j) {
      const std::int64_t pair[2] = {node_of(l, j), node_of(l + 1, j)};
      pair_hash[static_cast<std::size_t>(j)] = fnv64(pair, 2);
    }
    // One pair per voxel of level l + 1 (its parent is unique).
    const Unique pairs =
        unique_sorted(pair_hash, std::min(static_cast<double>(n), std::pow(double(divide), 3.0 * (l + 1))));
    s.pair_hashes.push_back(pairs.values);
    for (const index_t j : pairs.first) add_row(node_of(l, j), node_of(l + 1, j), l);
  }
  for (index_t j = 0; j < n; ++j) add_row(node_of(depth - 1, j), j, depth - 1);
  return s;
}

std::vector<SampleHierarchy> build_sample_hierarchies(const std::vector<SamplePoints>& samples, int divide, int depth) {
  const auto count = static_cast<std::int64_t>(samples.size());
  std::vector<SampleHierarchy> built(samples.size());
  std::vector<std::exception_ptr> errors(samples.size());  // no exception may leave the parallel loop
#pragma omp parallel for schedule(dynamic) if (count > 1)
  for (std::int64_t b = 0; b < count; ++b) {
    const SamplePoints& s = samples[static_cast<std::size_t>(b)];
    try {
      built[static_cast<std::size_t>(b)] = build_sample_hierarchy(s.points, s.n, divide, depth, s.what);
    } catch (...) {
      errors[static_cast<std::size_t>(b)] = std::current_exception();
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return built;
}

Hierarchy collate(const std::vector<SampleHierarchy>& samples, std::vector<index_t> sample_ids) {
  if (samples.empty()) throw Error(ErrorCode::input, "sequoia hierarchy: no samples");
  if (!sample_ids.empty() && sample_ids.size() != samples.size())
    throw Error(ErrorCode::invalid_argument, "sequoia hierarchy: " + std::to_string(sample_ids.size()) +
                                                 " sample ids for " + std::to_string(samples.size()) + " samples");
  Hierarchy h;
  h.sample_ids = std::move(sample_ids);
  if (h.sample_ids.empty())
    for (std::size_t b = 0; b < samples.size(); ++b) h.sample_ids.push_back(static_cast<index_t>(b));
  h.depth = samples.front().depth;
  const int levels = h.depth + 1;
  h.point_offsets.push_back(0);
  index_t nodes = 0;
  std::vector<std::int64_t> sample_of;
  std::size_t coord_count = 0, mapping_count = 0;
  for (const SampleHierarchy& s : samples) {
    coord_count += s.points.size() + s.virtual_positions.size();
    mapping_count += s.mapping.size();
  }
  h.coords.reserve(coord_count);
  h.mapping.reserve(mapping_count);
  sample_of.reserve(coord_count / 3);
  for (std::size_t b = 0; b < samples.size(); ++b) {
    const SampleHierarchy& s = samples[b];
    h.point_offsets.push_back(h.point_offsets.back() + s.n);
    h.coords.insert(h.coords.end(), s.points.begin(), s.points.end());
    h.coords.insert(h.coords.end(), s.virtual_positions.begin(), s.virtual_positions.end());
    for (std::size_t r = 0; r < s.mapping.size(); r += 4)
      h.mapping.insert(h.mapping.end(), {s.mapping[r] + nodes, s.mapping[r + 1] + nodes, s.mapping[r + 2], s.mapping[r + 3]});
    nodes += s.n + s.voxels();
    sample_of.resize(static_cast<std::size_t>(nodes), static_cast<std::int64_t>(b));
    h.offset.push_back(nodes);
  }
  // Level ids (the reference's _index): per tree level the sorted global ids that appear at that level.
  std::vector<std::int64_t> local(static_cast<std::size_t>(nodes), -1);
  std::vector<int> level_of(static_cast<std::size_t>(nodes), -1);
  const std::size_t M = h.mapping.size() / 4;
  for (std::size_t r = 0; r < M; ++r)
    for (std::size_t side = 0; side < 2; ++side)
      level_of[static_cast<std::size_t>(h.mapping[4 * r + side])] = static_cast<int>(h.mapping[4 * r + 2 + side]);
  h.level_ids.assign(static_cast<std::size_t>(levels), {});
  h.level_batch.assign(static_cast<std::size_t>(levels), {});
  h.level_positions.assign(static_cast<std::size_t>(levels), {});
  {
    std::vector<std::size_t> count(static_cast<std::size_t>(levels), 0);
    for (const int t : level_of)
      if (t >= 0) ++count[static_cast<std::size_t>(h.depth - t)];
    for (std::size_t i = 0; i < count.size(); ++i) {
      h.level_ids[i].reserve(count[i]);
      h.level_batch[i].reserve(count[i]);
      h.level_positions[i].reserve(3 * count[i]);
    }
  }
  for (index_t id = 0; id < nodes; ++id) {
    const int t = level_of[static_cast<std::size_t>(id)];
    if (t < 0) continue;
    const auto i = static_cast<std::size_t>(h.depth - t);
    local[static_cast<std::size_t>(id)] = static_cast<std::int64_t>(h.level_ids[i].size());
    h.level_ids[i].push_back(id);
    h.level_batch[i].push_back(sample_of[static_cast<std::size_t>(id)]);
    const float* p = &h.coords[static_cast<std::size_t>(id) * 3];
    h.level_positions[i].insert(h.level_positions[i].end(), p, p + 3);
  }
  h.mapping_local = h.mapping;
  for (std::size_t r = 0; r < M; ++r)
    for (std::size_t side = 0; side < 2; ++side) {
      auto& v = h.mapping_local[4 * r + side];
      v = local[static_cast<std::size_t>(v)];
    }
  h.pool_parent.assign(static_cast<std::size_t>(h.depth), {});
  h.parent_edges.assign(static_cast<std::size_t>(levels), {});
  h.child_edges.assign(static_cast<std::size_t>(levels), {});
  // The mapping rows by the tree level in column 2 (parent) and 3 (child), each list in row order: what
  // a scan of all rows per level would visit, in one pass.
  auto rows_by_level = [&](std::size_t column) {
    std::vector<std::vector<std::size_t>> rows(static_cast<std::size_t>(levels));
    std::vector<std::size_t> count(static_cast<std::size_t>(levels), 0);
    for (std::size_t r = 0; r < M; ++r) {
      const std::int64_t t = h.mapping[4 * r + column];
      if (t >= 0 && t < levels) ++count[static_cast<std::size_t>(t)];
    }
    for (std::size_t t = 0; t < rows.size(); ++t) rows[t].reserve(count[t]);
    for (std::size_t r = 0; r < M; ++r) {
      const std::int64_t t = h.mapping[4 * r + column];
      if (t >= 0 && t < levels) rows[static_cast<std::size_t>(t)].push_back(r);
    }
    return rows;
  };
  const std::vector<std::vector<std::size_t>> by_parent_level = rows_by_level(2), by_child_level = rows_by_level(3);
  std::vector<char> seen(static_cast<std::size_t>(nodes), 0);
  kernels::StableKeySortWork<std::int64_t> sort_work;
  for (int i = 0; i < levels; ++i) {
    const int t = h.depth - i;  // tree level of model level i
    auto& pe = h.parent_edges[static_cast<std::size_t>(i)];
    auto& ce = h.child_edges[static_cast<std::size_t>(i)];
    pe.reserve(by_child_level[static_cast<std::size_t>(t)].size());
    ce.reserve(by_parent_level[static_cast<std::size_t>(t)].size());
    for (const std::size_t r : by_child_level[static_cast<std::size_t>(t)]) {
      const std::int64_t* m = &h.mapping_local[4 * r];
      pe.emplace_back(m[1], m[0]);
    }
    for (const std::size_t r : by_parent_level[static_cast<std::size_t>(t)]) {
      const std::int64_t* m = &h.mapping_local[4 * r];
      ce.emplace_back(m[0], m[1]);
    }
    sort_by_query(pe, sort_work);
    sort_by_query(ce, sort_work);
    if (i + 1 < levels) {
      // Init pools child row r of level i into the parent of the r-th mapping row of this parent level
      // (the reference's positional pairing); a child listed twice keeps its first row.
      auto& pool = h.pool_parent[static_cast<std::size_t>(i)];
      for (const std::size_t r : by_parent_level[static_cast<std::size_t>(t - 1)]) {
        const std::int64_t* m = &h.mapping[4 * r];
        if (seen[static_cast<std::size_t>(m[1])]) continue;
        seen[static_cast<std::size_t>(m[1])] = 1;
        pool.push_back(local[static_cast<std::size_t>(m[0])]);
      }
    }
  }
  return h;
}

Hierarchy build_hierarchy(const float* points, const std::vector<index_t>& point_offsets, int divide, int depth) {
  std::vector<SamplePoints> samples;
  for (std::size_t b = 0; b + 1 < point_offsets.size(); ++b)
    samples.push_back({points + point_offsets[b] * 3, point_offsets[b + 1] - point_offsets[b], "sample " + std::to_string(b)});
  return collate(build_sample_hierarchies(samples, divide, depth));
}

}  // namespace surrogate::sequoia
