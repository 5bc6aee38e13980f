#include "point_cloud_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>

#include "distributed_internal.hpp"
#include "surrogate/graph.hpp"

namespace surrogate {

CanonicalBlock::CanonicalBlock(const Comm& comm, const CanonicalBatch& all, int dim, std::int64_t solver_rows,
                               const std::string& family) {
  if (all.block_bounds.size() != static_cast<std::size_t>(comm.size()) + 1)
    throw Error(ErrorCode::internal, family + " (distributed): the batch was not gathered in block mode");
  begin_ = all.block_bounds[static_cast<std::size_t>(comm.rank())];
  end_ = all.block_bounds[static_cast<std::size_t>(comm.rank()) + 1];
  const auto n = static_cast<std::size_t>(rows());
  plan_ = balltree::ExchangePlan::from_requests(comm, solver_rows, {all.owner_rank.data() + begin_, n},
                                                {all.owner_row.data() + begin_, n}, {}, {});
  positions_.assign(all.positions.begin() + begin_ * dim, all.positions.begin() + end_ * dim);
}

GeometryKey GeometryKey::of(const Comm& comm, const SampleLayout& layout, const PointGeometry& g, int dim) {
  GeometryKey k;
  k.rank = comm.rank();
  k.size = comm.size();
  const index_t n = layout.local_points();
  k.positions.resize(static_cast<std::size_t>(n * dim));
  for (index_t r = 0; r < n; ++r) std::copy_n(g.positions + r * g.ld_positions, dim, k.positions.begin() + r * dim);
  k.ids.assign(g.global_ids, g.global_ids + n);
  k.samples.resize(static_cast<std::size_t>(n));
  for (const auto& seg : layout.segments()) std::fill(k.samples.begin() + seg.begin, k.samples.begin() + seg.end, seg.sample);
  k.has_edges = g.edge_index != nullptr;
  if (k.has_edges) k.edges.assign(g.edge_index, g.edge_index + 2 * g.num_edges);
  return k;
}

bool GeometryKey::operator==(const GeometryKey& o) const {
  return rank == o.rank && size == o.size && has_edges == o.has_edges && ids == o.ids && samples == o.samples &&
         edges == o.edges && positions.size() == o.positions.size() &&
         (positions.empty() || std::memcmp(positions.data(), o.positions.data(), positions.size() * sizeof(float)) == 0);
}

// ---------------------------------------------------------------------------------------------------
// GraphRule

GraphRule GraphRule::from_attributes(const AttributeMap& config) {
  GraphRule rule;
  const std::string kind = config.has("graph") ? config.get_string("graph") : "none";
  if (kind == "none") return rule;
  if (kind == "knn") {
    rule.kind = Kind::knn;
    rule.k = static_cast<int>(config.get_int("graph_k"));
    if (rule.k < 1) throw Error(ErrorCode::format, "/config: graph_k = " + std::to_string(rule.k) + " must be at least 1");
  } else if (kind == "radius") {
    rule.kind = Kind::radius;
    rule.radius = config.get_double("graph_radius");
    rule.max_num_neighbors = static_cast<int>(config.get_int("graph_max_num_neighbors", 32));
    if (!(rule.radius > 0) || !std::isfinite(rule.radius))
      throw Error(ErrorCode::format, "/config: graph_radius = " + std::to_string(rule.radius) + " must be positive");
    if (rule.max_num_neighbors < 1)
      throw Error(ErrorCode::format, "/config: graph_max_num_neighbors = " + std::to_string(rule.max_num_neighbors) +
                                         " must be at least 1");
  } else {
    throw Error(ErrorCode::format, "/config: graph = '" + kind + "' (expected knn, radius or none)");
  }
  rule.loop = config.get_int("graph_loop", 1) != 0;
  return rule;
}

std::string GraphRule::describe() const {
  const std::string loop_text = loop ? ", self loops" : ", no self loops";
  switch (kind) {
    case Kind::knn: return "knn (k " + std::to_string(k) + loop_text + ")";
    case Kind::radius: {
      char r[32];
      std::snprintf(r, sizeof r, "%.6g", radius);
      return std::string("radius (r ") + r + ", at most " + std::to_string(max_num_neighbors) + " neighbours" + loop_text + ")";
    }
    case Kind::none: break;
  }
  return "none (edges must be given)";
}

std::vector<std::int64_t> GraphRule::build(std::span<const float> positions, int dim, const balltree::Batch& batch,
                                           int threads, graph::ReceiverRange receivers) const {
  switch (kind) {
    case Kind::knn: return graph::knn_graph(positions, dim, batch, k, loop, threads, receivers).index;
    case Kind::radius:
      return graph::radius_graph(positions, dim, batch, radius, max_num_neighbors, loop, threads, receivers).index;
    case Kind::none: break;
  }
  throw Error(ErrorCode::input, "the model passes messages along a graph and its file names no rule to build one: "
                                "give the edges (edge_index)");
}

// ---------------------------------------------------------------------------------------------------
// PointCloudModel

namespace {

/// Every rank's `mine`, rank-major, on every rank.
template <class T>
std::vector<T> gather_all(const Comm& comm, const std::vector<T>& mine) {
  const std::uint64_t count = mine.size();
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(comm.size()));
  comm.allgather(&count, sizeof count, counts.data());
  std::vector<std::size_t> bytes(counts.size()), offsets(counts.size());
  std::size_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = total * sizeof(T);
    bytes[r] = static_cast<std::size_t>(counts[r]) * sizeof(T);
    total += static_cast<std::size_t>(counts[r]);
  }
  std::vector<T> all(total);
  comm.allgatherv(mine.data(), mine.size() * sizeof(T), all.data(), bytes, offsets);
  return all;
}

}  // namespace

PointCloudModel::PointCloudModel(const ModelFile& file, int in_channels, int out_channels, int dim, bool uses_edges)
    : Model(file, in_channels, out_channels), dim_(dim), uses_edges_(uses_edges), rule_(GraphRule::from_attributes(file.config)) {}

CanonicalBatch PointCloudModel::gather_canonical(const Comm& comm, const SampleLayout& layout,
                                                 const PointGeometry& geometry, const float* in, index_t ld_in,
                                                 bool with_features, bool block_edges, int threads) const {
  const index_t n = layout.local_points();
  const int cin = with_features ? in_channels() : 0;
  // Local rows (working order): (global id, sample) pairs, compact features and positions.
  std::vector<std::int64_t> keys(static_cast<std::size_t>(2 * n));
  std::vector<float> features(static_cast<std::size_t>(n * cin)), positions(static_cast<std::size_t>(n * dim_));
  for (const auto& seg : layout.segments())
    for (index_t row = seg.begin; row < seg.end; ++row) {
      keys[static_cast<std::size_t>(2 * row)] = geometry.global_ids[row];
      keys[static_cast<std::size_t>(2 * row + 1)] = seg.sample;
    }
  for (index_t row = 0; row < n; ++row) {
    std::copy_n(in + row * ld_in, cin, features.begin() + row * cin);
    std::copy_n(geometry.positions + row * geometry.ld_positions, dim_, positions.begin() + row * dim_);
  }
  const std::vector<std::int64_t> all_keys = gather_all(comm, keys);
  const std::vector<float> all_features = with_features ? gather_all(comm, features) : std::vector<float>{};
  const std::vector<float> all_positions = gather_all(comm, positions);
  const std::vector<std::int64_t> rank_rows = gather_all(comm, std::vector<std::int64_t>{n});
  // Edges given by the caller (as pairs of global ids): gathered rank-major on every rank, or, for
  // block_edges, sent to the owner of the receiver's block below.
  const bool given = uses_edges_ && comm.allreduce<std::int64_t>(geometry.edge_index ? 1 : 0, ReduceOp::max) > 0;
  std::vector<std::int64_t> pairs;
  if (given) {
    pairs.resize(static_cast<std::size_t>(2 * geometry.num_edges));
    for (index_t e = 0; e < geometry.num_edges; ++e) {
      pairs[static_cast<std::size_t>(2 * e)] = geometry.edge_index[e];
      pairs[static_cast<std::size_t>(2 * e + 1)] = geometry.edge_index[geometry.num_edges + e];
    }
  }
  const std::vector<std::int64_t> all_pairs = given && !block_edges ? gather_all(comm, pairs) : std::vector<std::int64_t>{};

  // From here on every rank computes the same thing from the same arrays; the outcome is agreed.
  CanonicalBatch result;
  const index_t total = layout.global_points();
  std::vector<index_t> slot_of_id(static_cast<std::size_t>(total), -1);
  std::vector<std::int64_t> sample_of_slot;
  collectively(comm, [&] {
    // Canonical order: by sample, then by global id.
    std::vector<index_t> canonical(static_cast<std::size_t>(total));
    std::iota(canonical.begin(), canonical.end(), index_t{0});
    std::sort(canonical.begin(), canonical.end(), [&](index_t a, index_t b) {
      const auto sa = all_keys[static_cast<std::size_t>(2 * a + 1)], sb = all_keys[static_cast<std::size_t>(2 * b + 1)];
      return sa != sb ? sa < sb : all_keys[static_cast<std::size_t>(2 * a)] < all_keys[static_cast<std::size_t>(2 * b)];
    });
    // Gathered (rank-major) row -> owner rank and local row.
    std::vector<int> gathered_rank(static_cast<std::size_t>(total));
    std::vector<std::int64_t> gathered_row(static_cast<std::size_t>(total));
    for (std::size_t r = 0, g = 0; r < rank_rows.size(); ++r)
      for (std::int64_t row = 0; row < rank_rows[r]; ++row, ++g) {
        gathered_rank[g] = static_cast<int>(r);
        gathered_row[g] = row;
      }
    result.features.resize(static_cast<std::size_t>(total * cin));
    result.positions.resize(static_cast<std::size_t>(total * dim_));
    result.owner_rank.resize(static_cast<std::size_t>(total));
    result.owner_row.resize(static_cast<std::size_t>(total));
    for (index_t s = 0; s < total; ++s) {
      const auto src = static_cast<std::size_t>(canonical[static_cast<std::size_t>(s)]);
      const std::int64_t id = all_keys[2 * src];
      if (slot_of_id[static_cast<std::size_t>(id)] >= 0)
        throw Error(ErrorCode::input, "global id " + std::to_string(id) + " is given to more than one point");
      slot_of_id[static_cast<std::size_t>(id)] = s;
      std::copy_n(all_features.begin() + static_cast<std::ptrdiff_t>(src) * cin, cin, result.features.begin() + s * cin);
      std::copy_n(all_positions.begin() + static_cast<std::ptrdiff_t>(src) * dim_, dim_, result.positions.begin() + s * dim_);
      result.owner_rank[static_cast<std::size_t>(s)] = gathered_rank[src];
      result.owner_row[static_cast<std::size_t>(s)] = gathered_row[src];
    }
    result.canonical_of_row.resize(static_cast<std::size_t>(n));
    for (index_t row = 0; row < n; ++row)
      result.canonical_of_row[static_cast<std::size_t>(row)] = slot_of_id[static_cast<std::size_t>(geometry.global_ids[row])];
    std::vector<std::int64_t> offsets{0};
    for (const index_t size : layout.sample_sizes()) offsets.push_back(offsets.back() + size);
    result.batch = balltree::Batch::from_offsets(offsets);
    sample_of_slot = result.batch.batch_idx();
    const int p = block_edges ? comm.size() : 1;
    result.block_bounds.resize(static_cast<std::size_t>(p) + 1);
    for (int r = 0; r <= p; ++r) result.block_bounds[static_cast<std::size_t>(r)] = total * r / p;
  });
  const int block_rank = block_edges ? comm.rank() : 0;
  const graph::ReceiverRange receivers{result.block_bounds[static_cast<std::size_t>(block_rank)],
                                       result.block_bounds[static_cast<std::size_t>(block_rank) + 1]};

  result.edges_given = given;
  // Edge (source id, receiver id) -> canonical (j, i), refusing an edge that joins two samples.
  auto canonical_edge = [&](std::int64_t source_id, std::int64_t receiver_id) {
    const index_t j = slot_of_id[static_cast<std::size_t>(source_id)];
    const index_t i = slot_of_id[static_cast<std::size_t>(receiver_id)];
    if (sample_of_slot[static_cast<std::size_t>(j)] != sample_of_slot[static_cast<std::size_t>(i)])
      throw Error(ErrorCode::input, "edge_index: edge " + std::to_string(source_id) + " -> " + std::to_string(receiver_id) +
                                        " joins two samples (" + std::to_string(sample_of_slot[static_cast<std::size_t>(j)]) +
                                        " and " + std::to_string(sample_of_slot[static_cast<std::size_t>(i)]) + ")");
    return std::pair<std::int64_t, std::int64_t>{j, i};
  };
  std::vector<std::int64_t> canonical_pairs;  // (j, i) pairs of this rank's block (block_edges) or all
  if (given && block_edges) {
    // Each rank converts its own edges and sends each to the owner of its receiver's block: a block
    // receives them rank by rank, each rank's in its order, i.e. the rank-major union's order.
    const auto p = static_cast<std::size_t>(comm.size());
    std::vector<std::size_t> send_counts(p, 0);
    std::vector<std::int64_t> send(pairs.size());
    collectively(comm, [&] {
      std::vector<int> owner(pairs.size() / 2);
      for (std::size_t e = 0; e < owner.size(); ++e) {
        const auto [j, i] = canonical_edge(pairs[2 * e], pairs[2 * e + 1]);
        const auto it = std::upper_bound(result.block_bounds.begin(), result.block_bounds.end() - 1, i);
        owner[e] = static_cast<int>(it - result.block_bounds.begin()) - 1;
        ++send_counts[static_cast<std::size_t>(owner[e])];
        pairs[2 * e] = j;
        pairs[2 * e + 1] = i;
      }
      std::vector<std::size_t> fill = balltree::detail::exclusive_offsets(send_counts);
      for (std::size_t e = 0; e < owner.size(); ++e) {
        const std::size_t at = fill[static_cast<std::size_t>(owner[e])]++;
        send[2 * at] = pairs[2 * e];
        send[2 * at + 1] = pairs[2 * e + 1];
      }
    });
    std::vector<std::size_t> send_values(p), recv_values = balltree::detail::exchange_counts(comm, send_counts);
    for (std::size_t r = 0; r < p; ++r) {
      send_values[r] = 2 * send_counts[r];
      recv_values[r] *= 2;
    }
    std::size_t received = 0;
    for (const std::size_t v : recv_values) received += v;
    canonical_pairs.resize(received);
    balltree::detail::alltoallv_elements(comm, send.data(), send_values, canonical_pairs.data(), recv_values,
                                         sizeof(std::int64_t));
  } else if (given) {
    canonical_pairs.assign(all_pairs.size(), std::int64_t{0});
    collectively(comm, [&] {
      for (std::size_t e = 0; e < all_pairs.size() / 2; ++e) {
        const auto [j, i] = canonical_edge(all_pairs[2 * e], all_pairs[2 * e + 1]);
        canonical_pairs[2 * e] = j;
        canonical_pairs[2 * e + 1] = i;
      }
    });
  }
  if (given) {
    const std::size_t e_count = canonical_pairs.size() / 2;
    result.edges.resize(canonical_pairs.size());
    for (std::size_t e = 0; e < e_count; ++e) {
      result.edges[e] = canonical_pairs[2 * e];
      result.edges[e_count + e] = canonical_pairs[2 * e + 1];
    }
  } else if (uses_edges_) {
    collectively(comm, [&] { result.edges = rule_.build(result.positions, dim_, result.batch, threads, receivers); });
  }
  return result;
}

void PointCloudModel::forward_geometry(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry,
                                       const float* in, index_t ld_in, float* out, index_t ld_out,
                                       const RunOptions& options) {
  const CanonicalBatch all = gather_canonical(comm, layout, geometry, in, ld_in, true, false, options.threads);
  const index_t n = layout.local_points();
  const int cout = out_channels();
  collectively(comm, [&] {
    const std::vector<float> y = run_batch(all.features, all.positions, all.batch, all.edges, options.threads);
    for (index_t row = 0; row < n; ++row)
      std::copy_n(y.begin() + all.canonical_of_row[static_cast<std::size_t>(row)] * cout, cout, out + row * ld_out);
  });
}

}  // namespace surrogate
