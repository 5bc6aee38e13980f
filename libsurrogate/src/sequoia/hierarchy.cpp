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
Unique unique_sorted(const std::vector<std::uint64_t>& hashes) {
  const index_t n = static_cast<index_t>(hashes.size());
  std::vector<index_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), index_t{0});
  std::stable_sort(order.begin(), order.end(), [&](index_t a, index_t b) {
    return hashes[static_cast<std::size_t>(a)] < hashes[static_cast<std::size_t>(b)];
  });
  Unique u;
  u.inverse.assign(static_cast<std::size_t>(n), 0);
  for (index_t k = 0; k < n; ++k) {
    const index_t e = order[static_cast<std::size_t>(k)];
    const std::uint64_t h = hashes[static_cast<std::size_t>(e)];
    if (u.values.empty() || u.values.back() != h) {
      u.values.push_back(h);
      u.first.push_back(e);  // stable sort: the first element of a run is the first occurrence
    }
    u.inverse[static_cast<std::size_t>(e)] = static_cast<index_t>(u.values.size()) - 1;
  }
  return u;
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
  const Unique voxels = unique_sorted(hashes);
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
  for (const index_t v : level1) add_row(roots[0], v, 0);
  for (int l = 1; l + 1 < depth; ++l) {
    std::vector<std::uint64_t> pair_hash(static_cast<std::size_t>(n));
    for (index_t j = 0; j < n; ++j) {
      const std::int64_t pair[2] = {node_of(l, j), node_of(l + 1, j)};
      pair_hash[static_cast<std::size_t>(j)] = fnv64(pair, 2);
    }
    const Unique pairs = unique_sorted(pair_hash);
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
  std::vector<char> seen(static_cast<std::size_t>(nodes), 0);
  for (int i = 0; i < levels; ++i) {
    const int t = h.depth - i;  // tree level of model level i
    auto& pe = h.parent_edges[static_cast<std::size_t>(i)];
    auto& ce = h.child_edges[static_cast<std::size_t>(i)];
    for (std::size_t r = 0; r < M; ++r) {
      const std::int64_t* m = &h.mapping_local[4 * r];
      if (m[3] == t) pe.emplace_back(m[1], m[0]);
      if (m[2] == t) ce.emplace_back(m[0], m[1]);
    }
    auto by_query = [](const auto& a, const auto& b) { return a.first < b.first; };
    std::stable_sort(pe.begin(), pe.end(), by_query);
    std::stable_sort(ce.begin(), ce.end(), by_query);
    if (i + 1 < levels) {
      // Init pools child row r of level i into the parent of the r-th mapping row of this parent level
      // (the reference's positional pairing); a child listed twice keeps its first row.
      auto& pool = h.pool_parent[static_cast<std::size_t>(i)];
      for (std::size_t r = 0; r < M; ++r) {
        const std::int64_t* m = &h.mapping[4 * r];
        if (m[2] != t - 1 || seen[static_cast<std::size_t>(m[1])]) continue;
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
