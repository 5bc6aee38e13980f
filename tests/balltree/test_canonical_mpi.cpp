// The canonical order of a distributed batch without gathering (route_canonical, run by ctest at 1-4
// ranks): against a naive reference that every rank computes from the whole batch (sort by sample, then
// global id; blocks N r / P), for global ids shuffled over the ranks, samples with interleaved ids, a rank
// with no points, given edges; the largest buffer of a rank is at most max(local points, ceil(N / P));
// agreed errors for a duplicate id on one rank, an id >= N, an edge joining two samples. Then Erwin (kNN
// graph built, and given edges) and BSA with interleaved, shuffled ids: bitwise equal to the
// single-process forward of the batch put in canonical order.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "balltree/point_cloud_model.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/error.hpp"
#include "surrogate/graph.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace bt = surrogate::balltree;
using surrogate::PointGeometry;
using surrogate::SampleLayout;

namespace {

enum class Spread { shuffled, random_skewed, last_rank_empty, all_on_rank0 };

/// A batch whose global ids are interleaved among samples: sample_of_id[id] is random (every sample
/// gets at least `min_size` points), `holder[id]` the rank holding id.
struct Points {
  std::int64_t n = 0;
  int dim = 3, channels = 0;
  std::vector<std::int64_t> sample_of_id;
  std::vector<float> positions, features;  // by id
  std::vector<int> holder;
};

Points make_points(const std::vector<std::int64_t>& sizes, int channels, Spread spread, unsigned seed, int ranks) {
  Points pts;
  pts.channels = channels;
  for (std::size_t s = 0; s < sizes.size(); ++s)
    pts.sample_of_id.insert(pts.sample_of_id.end(), static_cast<std::size_t>(sizes[s]), static_cast<std::int64_t>(s));
  std::mt19937 gen(seed);
  std::shuffle(pts.sample_of_id.begin(), pts.sample_of_id.end(), gen);  // interleaved ids
  pts.n = static_cast<std::int64_t>(pts.sample_of_id.size());
  std::normal_distribution<float> normal;
  pts.positions.resize(static_cast<std::size_t>(pts.n * pts.dim));
  pts.features.resize(static_cast<std::size_t>(pts.n * channels));
  for (float& v : pts.positions) v = normal(gen);
  for (float& v : pts.features) v = normal(gen);
  pts.holder.resize(static_cast<std::size_t>(pts.n));
  for (std::int64_t id = 0; id < pts.n; ++id) {
    int r = 0;
    switch (spread) {
      case Spread::shuffled: r = static_cast<int>(gen() % static_cast<unsigned>(ranks)); break;
      case Spread::random_skewed: {
        const unsigned u = gen() % 100u;
        r = ranks == 1 ? 0 : (u < 60u ? 0 : 1 + static_cast<int>(u % static_cast<unsigned>(ranks - 1)));
        break;
      }
      case Spread::last_rank_empty: r = ranks > 1 ? static_cast<int>(gen() % static_cast<unsigned>(ranks - 1)) : 0; break;
      case Spread::all_on_rank0: r = 0; break;
    }
    pts.holder[static_cast<std::size_t>(id)] = r;
  }
  return pts;
}

/// Rank `rank`'s ids, in a shuffled order grouped by sample (so the working order is the caller's).
std::vector<std::int64_t> ids_of(const Points& pts, int rank, unsigned seed) {
  std::vector<std::int64_t> ids;
  for (std::int64_t id = 0; id < pts.n; ++id)
    if (pts.holder[static_cast<std::size_t>(id)] == rank) ids.push_back(id);
  std::mt19937 gen(seed + 1000u * static_cast<unsigned>(rank));
  std::shuffle(ids.begin(), ids.end(), gen);
  std::stable_sort(ids.begin(), ids.end(), [&](std::int64_t a, std::int64_t b) {
    return pts.sample_of_id[static_cast<std::size_t>(a)] < pts.sample_of_id[static_cast<std::size_t>(b)];
  });
  return ids;
}

/// The canonical order (sort by sample, then id): canonical index -> id.
std::vector<std::int64_t> canonical_ids(const Points& pts) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(pts.n));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return pts.sample_of_id[static_cast<std::size_t>(a)] < pts.sample_of_id[static_cast<std::size_t>(b)];
  });
  return order;
}

/// This rank's local arrays of `pts` (ids from ids_of), a layout and a geometry over them.
struct Local {
  std::vector<std::int64_t> ids, samples, edges;
  std::vector<float> positions, features;
  SampleLayout layout;
  PointGeometry geometry;
};

Local local_of(const surrogate::Comm& comm, const Points& pts, const std::vector<std::int64_t>& ids,
               const std::vector<std::int64_t>& edges) {
  Local l;
  l.ids = ids;
  for (const std::int64_t id : ids) {
    l.samples.push_back(pts.sample_of_id[static_cast<std::size_t>(id)]);
    l.positions.insert(l.positions.end(), pts.positions.begin() + id * pts.dim, pts.positions.begin() + (id + 1) * pts.dim);
    l.features.insert(l.features.end(), pts.features.begin() + id * pts.channels,
                      pts.features.begin() + (id + 1) * pts.channels);
  }
  l.edges = edges;
  l.layout = SampleLayout::build(comm, static_cast<std::int64_t>(ids.size()), l.samples.data());
  l.geometry.positions = l.positions.data();
  l.geometry.ld_positions = pts.dim;
  l.geometry.global_ids = l.ids.data();
  if (!edges.empty()) {
    l.geometry.edge_index = l.edges.data();
    l.geometry.num_edges = static_cast<std::int64_t>(edges.size() / 2);
  }
  return l;
}

/// Random edges inside samples (as ids), dealt to ranks at random: per rank, 2 x E (sources, receivers).
std::vector<std::vector<std::int64_t>> random_edges(const Points& pts, int ranks, unsigned seed) {
  std::vector<std::vector<std::int64_t>> by_sample;
  for (std::int64_t id = 0; id < pts.n; ++id) {
    const auto s = static_cast<std::size_t>(pts.sample_of_id[static_cast<std::size_t>(id)]);
    if (by_sample.size() <= s) by_sample.resize(s + 1);
    by_sample[s].push_back(id);
  }
  std::mt19937 gen(seed);
  std::vector<std::vector<std::int64_t>> src(static_cast<std::size_t>(ranks)), dst(src.size());
  for (std::int64_t e = 0; e < 3 * pts.n; ++e) {
    const auto& ids = by_sample[gen() % by_sample.size()];
    const auto r = static_cast<std::size_t>(gen() % static_cast<unsigned>(ranks));
    src[r].push_back(ids[gen() % ids.size()]);
    dst[r].push_back(ids[gen() % ids.size()]);
  }
  std::vector<std::vector<std::int64_t>> out(src.size());
  for (std::size_t r = 0; r < src.size(); ++r) {
    out[r] = src[r];
    out[r].insert(out[r].end(), dst[r].begin(), dst[r].end());
  }
  return out;
}

void check_against_reference(const Points& pts, Spread spread, unsigned seed, bool with_edges) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), P = comm.size();
  const std::string name = "spread " + std::to_string(static_cast<int>(spread)) + (with_edges ? ", given edges" : "");
  const std::vector<std::vector<std::int64_t>> edges = with_edges ? random_edges(pts, P, seed) : std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(P));
  const Local l = local_of(comm, pts, ids_of(pts, rank, seed), edges[static_cast<std::size_t>(rank)]);
  ASSERT_TRUE(l.layout.order().empty()) << "the test's local rows should already be grouped by sample";
  const surrogate::CanonicalBatch got =
      surrogate::route_canonical(comm, l.layout, l.geometry, pts.dim, l.features.data(), pts.channels, pts.channels,
                                 with_edges ? surrogate::GivenEdges::to_blocks : surrogate::GivenEdges::ignore);

  // The naive reference, from the whole batch.
  const std::vector<std::int64_t> order = canonical_ids(pts);
  std::vector<std::int64_t> slot_of_id(order.size());
  for (std::size_t s = 0; s < order.size(); ++s) slot_of_id[static_cast<std::size_t>(order[s])] = static_cast<std::int64_t>(s);
  std::vector<std::int64_t> row_of_id(order.size());
  for (int r = 0; r < P; ++r) {
    const std::vector<std::int64_t> ids = ids_of(pts, r, seed);
    for (std::size_t row = 0; row < ids.size(); ++row) row_of_id[static_cast<std::size_t>(ids[row])] = static_cast<std::int64_t>(row);
  }
  const std::int64_t begin = pts.n * rank / P, end = pts.n * (rank + 1) / P;
  ASSERT_EQ(got.block_bounds.size(), static_cast<std::size_t>(P) + 1) << name;
  EXPECT_EQ(got.block_bounds[static_cast<std::size_t>(rank)], begin) << name;
  EXPECT_EQ(got.block_bounds[static_cast<std::size_t>(rank) + 1], end) << name;
  ASSERT_EQ(got.positions.size(), static_cast<std::size_t>((end - begin) * pts.dim)) << name;
  ASSERT_EQ(got.features.size(), static_cast<std::size_t>((end - begin) * pts.channels)) << name;
  ASSERT_EQ(got.owner_rank.size(), static_cast<std::size_t>(end - begin)) << name;
  std::int64_t wrong = 0;
  for (std::int64_t c = begin; c < end; ++c) {
    const std::int64_t id = order[static_cast<std::size_t>(c)];
    const auto k = static_cast<std::size_t>(c - begin);
    wrong += got.owner_rank[k] != pts.holder[static_cast<std::size_t>(id)];
    wrong += got.owner_row[k] != row_of_id[static_cast<std::size_t>(id)];
    for (int d = 0; d < pts.dim; ++d)
      wrong += got.positions[k * 3 + static_cast<std::size_t>(d)] != pts.positions[static_cast<std::size_t>(id * pts.dim + d)];
    for (int ch = 0; ch < pts.channels; ++ch)
      wrong += got.features[k * static_cast<std::size_t>(pts.channels) + static_cast<std::size_t>(ch)] !=
               pts.features[static_cast<std::size_t>(id * pts.channels + ch)];
  }
  EXPECT_EQ(wrong, 0) << name << ": block rows differing from the reference";
  ASSERT_EQ(got.canonical_of_row.size(), l.ids.size()) << name;
  for (std::size_t row = 0; row < l.ids.size(); ++row)
    EXPECT_EQ(got.canonical_of_row[row], slot_of_id[static_cast<std::size_t>(l.ids[row])]) << name << ", row " << row;
  std::vector<std::int64_t> offsets{0};
  for (const std::int64_t size : l.layout.sample_sizes()) offsets.push_back(offsets.back() + size);
  EXPECT_EQ(got.batch.offsets(), offsets) << name;

  // Edges: the rank-major union's edges whose receiver is in the block, in that order, canonical.
  std::vector<std::int64_t> want_src, want_dst;
  for (const auto& e : edges) {
    const std::size_t E = e.size() / 2;
    for (std::size_t k = 0; k < E; ++k) {
      const std::int64_t i = slot_of_id[static_cast<std::size_t>(e[E + k])];
      if (i < begin || i >= end) continue;
      want_src.push_back(slot_of_id[static_cast<std::size_t>(e[k])]);
      want_dst.push_back(i);
    }
  }
  want_src.insert(want_src.end(), want_dst.begin(), want_dst.end());
  EXPECT_EQ(got.edges, want_src) << name;
  EXPECT_EQ(got.edges_given, with_edges) << name;

  // Memory: no buffer of the step larger than this rank's rows or its share of the batch.
  const std::int64_t share = (pts.n + P - 1) / P;
  EXPECT_LE(got.largest_point_buffer, std::max<std::int64_t>(static_cast<std::int64_t>(l.ids.size()), share)) << name;
  EXPECT_GE(got.largest_point_buffer, std::max<std::int64_t>(static_cast<std::int64_t>(l.ids.size()), end - begin)) << name;
}

template <class F>
void expect_agreed_input_error(F&& call, const std::string& needle) {
  try {
    call();
    FAIL() << "no error (expected one naming '" << needle << "')";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CanonicalOrder, EqualsTheNaiveOrderForAnySpread) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  for (const Spread s : {Spread::shuffled, Spread::random_skewed, Spread::last_rank_empty, Spread::all_on_rank0}) {
    const unsigned seed = 3u + static_cast<unsigned>(s);
    check_against_reference(make_points({300, 41, 7, 152}, 2, s, seed, comm.size()), s, seed, false);
    check_against_reference(make_points({120, 95}, 0, s, seed + 50u, comm.size()), s, seed + 50u, true);
  }
  // Fewer points than ranks at 4 ranks (a block and an id range empty).
  check_against_reference(make_points({2, 1}, 1, Spread::shuffled, 8u, comm.size()), Spread::shuffled, 8u, true);
}

TEST(CanonicalOrder, BadIdsAndEdgesAreAgreedErrors) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), P = comm.size();
  const Points pts = make_points({60, 40}, 0, Spread::shuffled, 21u, P);
  const int last = P - 1;
  // A duplicate id on the last rank only (its second row takes its first row's id): every rank throws.
  {
    std::vector<std::int64_t> ids = ids_of(pts, rank, 21u);
    std::int64_t dup = -1;
    if (rank == last && ids.size() >= 2) {
      // The same sample, so the layout stays valid: the first two rows of the first sample with two.
      for (std::size_t r = 0; r + 1 < ids.size() && dup < 0; ++r)
        if (pts.sample_of_id[static_cast<std::size_t>(ids[r])] == pts.sample_of_id[static_cast<std::size_t>(ids[r + 1])]) {
          dup = ids[r];
          ids[r + 1] = dup;
        }
    }
    comm.broadcast(&dup, sizeof dup, last);
    ASSERT_GE(dup, 0);
    const Local l = local_of(comm, pts, ids, {});
    expect_agreed_input_error([&] { surrogate::route_canonical(comm, l.layout, l.geometry, 3, nullptr, 0, 0, surrogate::GivenEdges::ignore); },
                              "global id " + std::to_string(dup) + " is given to more than one point");
  }
  // An id >= N on rank 0: the row keeps its sample and position (so the layout is valid), only its id
  // is out of range (changed after local_of, which reads the batch by id).
  {
    Local l = local_of(comm, pts, ids_of(pts, rank, 21u), {});
    if (rank == 0 && !l.ids.empty()) l.ids.back() = pts.n;  // l.geometry.global_ids points at l.ids
    const bool any = comm.allreduce<std::int64_t>(rank == 0 && !l.ids.empty() ? 1 : 0, surrogate::ReduceOp::max) > 0;
    ASSERT_TRUE(any);
    expect_agreed_input_error([&] { surrogate::route_canonical(comm, l.layout, l.geometry, 3, nullptr, 0, 0, surrogate::GivenEdges::ignore); },
                              "global id " + std::to_string(pts.n) + " of local point");
  }
  // An edge joining sample 0 and sample 1, given by the last rank only.
  {
    std::int64_t a = -1, b = -1;
    for (std::int64_t id = 0; id < pts.n; ++id) {
      if (pts.sample_of_id[static_cast<std::size_t>(id)] == 0 && a < 0) a = id;
      if (pts.sample_of_id[static_cast<std::size_t>(id)] == 1 && b < 0) b = id;
    }
    const std::vector<std::int64_t> edge = rank == last ? std::vector<std::int64_t>{a, b} : std::vector<std::int64_t>{};
    const Local l = local_of(comm, pts, ids_of(pts, rank, 21u), edge);
    expect_agreed_input_error(
        [&] { surrogate::route_canonical(comm, l.layout, l.geometry, 3, nullptr, 0, 0, surrogate::GivenEdges::to_blocks); },
        "edge " + std::to_string(a) + " -> " + std::to_string(b) + " joins two samples");
  }
}

/// PointCloudModel (its gather_canonical) with no forward of its own (not needed here).
class Probe final : public surrogate::PointCloudModel {
 public:
  Probe(const surrogate::ModelFile& file, int channels) : PointCloudModel(file, channels, 1, 3, true) {}
  surrogate::index_t parameter_count() const override { return 0; }
  std::vector<std::pair<std::string, std::string>> describe() const override { return {}; }

 protected:
  // Only gather_canonical is probed; a forward is never run.
  void forward(const surrogate::Comm&, surrogate::Plan&, const Io&, const surrogate::RunOptions&) override {
    throw surrogate::Error(surrogate::ErrorCode::internal, "Probe has no forward");
  }
};

TEST(CanonicalOrder, GatheredModeAndBuiltGraphEqualTheNaiveOrder) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), P = comm.size();
  surrogate::ModelFile file = surrogate::ModelFile::read(std::string(SURROGATE_TEST_DATA_DIR) + "/erwin/erwin_mpnn_rot.h5");
  const unsigned seed = 61u;
  const Points pts = make_points({80, 33, 120}, 2, Spread::last_rank_empty, seed, P);
  const std::vector<std::int64_t> order = canonical_ids(pts);
  std::vector<std::int64_t> slot_of_id(order.size());
  for (std::size_t s = 0; s < order.size(); ++s) slot_of_id[static_cast<std::size_t>(order[s])] = static_cast<std::int64_t>(s);
  std::vector<float> positions, features;
  std::vector<std::int64_t> batch_idx;
  for (const std::int64_t id : order) {
    positions.insert(positions.end(), pts.positions.begin() + id * 3, pts.positions.begin() + (id + 1) * 3);
    features.insert(features.end(), pts.features.begin() + id * 2, pts.features.begin() + (id + 1) * 2);
    batch_idx.push_back(pts.sample_of_id[static_cast<std::size_t>(id)]);
  }
  const bt::Batch batch = bt::Batch::from_batch_idx(batch_idx);

  // Gathered mode, given edges: every point with its features, every edge in rank-major order.
  const std::vector<std::vector<std::int64_t>> edges = random_edges(pts, P, seed);
  {
    const Probe probe(file, 2);
    const Local l = local_of(comm, pts, ids_of(pts, rank, seed), edges[static_cast<std::size_t>(rank)]);
    const surrogate::CanonicalBatch got = probe.gather_canonical(comm, l.layout, l.geometry, l.features.data(), 2, true, false, 1);
    EXPECT_EQ(got.positions, positions);
    EXPECT_EQ(got.features, features);
    std::vector<std::int64_t> want_src, want_dst;
    for (const auto& e : edges)
      for (std::size_t k = 0; k < e.size() / 2; ++k) {
        want_src.push_back(slot_of_id[static_cast<std::size_t>(e[k])]);
        want_dst.push_back(slot_of_id[static_cast<std::size_t>(e[e.size() / 2 + k])]);
      }
    want_src.insert(want_src.end(), want_dst.begin(), want_dst.end());
    EXPECT_EQ(got.edges, want_src);
    for (std::size_t row = 0; row < l.ids.size(); ++row)
      EXPECT_EQ(got.canonical_of_row[row], slot_of_id[static_cast<std::size_t>(l.ids[row])]);
  }
  // The kNN rule: gathered mode builds the whole graph; block mode each block's receivers' edges, from
  // the positions of their samples only.
  file.config.set("graph", std::string("knn"));
  file.config.set("graph_k", std::int64_t{5});
  const Probe probe(file, 2);
  const Local l = local_of(comm, pts, ids_of(pts, rank, seed), {});
  const surrogate::graph::Edges whole = surrogate::graph::knn_graph(positions, 3, batch, 5, true, 1);
  const surrogate::CanonicalBatch gathered = probe.gather_canonical(comm, l.layout, l.geometry, l.features.data(), 2, true, false, 1);
  EXPECT_EQ(gathered.edges, whole.index);
  const surrogate::CanonicalBatch block = probe.gather_canonical(comm, l.layout, l.geometry, nullptr, 0, false, true, 1);
  const std::int64_t begin = pts.n * rank / P, end = pts.n * (rank + 1) / P;
  const surrogate::graph::Edges mine = surrogate::graph::knn_graph(positions, 3, batch, 5, true, 1, {begin, end});
  EXPECT_EQ(block.edges, mine.index);
  // The halo: other ranks' points of the block's samples only (at most all of them).
  std::int64_t candidates = 0;
  if (end > begin)
    candidates = batch.end(batch_idx[static_cast<std::size_t>(end - 1)]) - batch.begin(batch_idx[static_cast<std::size_t>(begin)]);
  EXPECT_LE(block.graph_stats.foreign_points, std::max<std::int64_t>(0, candidates - (end - begin)));
  if (P == 1) {
    EXPECT_EQ(block.graph_stats.foreign_points, 0);
  }
}

/// Model::predict over MPI_COMM_WORLD with this rank's ids of `pts`; the output rows by id on every rank.
std::vector<float> predict_by_id(surrogate::Model& model, const Points& pts, unsigned seed,
                                 const std::vector<std::vector<std::int64_t>>& edges) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), P = comm.size();
  std::vector<std::int64_t> ids = ids_of(pts, rank, seed);
  std::mt19937 gen(seed + 7u * static_cast<unsigned>(rank));
  std::shuffle(ids.begin(), ids.end(), gen);  // predict groups the rows by sample itself
  const Local l = local_of(comm, pts, ids, edges.empty() ? std::vector<std::int64_t>{} : edges[static_cast<std::size_t>(rank)]);
  const int cout = model.out_channels();
  std::vector<float> out(std::max<std::size_t>(1, ids.size() * static_cast<std::size_t>(cout)));
  model.predict(comm, l.layout, l.geometry, l.features.data(), pts.channels, out.data(), cout);
  // Every rank's (id, row) on every rank, by id.
  std::vector<int> counts(static_cast<std::size_t>(P)), displs(static_cast<std::size_t>(P));
  const int mine = static_cast<int>(ids.size());
  MPI_Allgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
  std::vector<std::int64_t> all_ids(static_cast<std::size_t>(pts.n));
  MPI_Allgatherv(ids.data(), mine, MPI_INT64_T, all_ids.data(), counts.data(), displs.data(), MPI_INT64_T, MPI_COMM_WORLD);
  for (int& x : counts) x *= cout;
  for (int& x : displs) x *= cout;
  std::vector<float> rows(static_cast<std::size_t>(pts.n * cout)), by_id(rows.size());
  MPI_Allgatherv(out.data(), mine * cout, MPI_FLOAT, rows.data(), counts.data(), displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
  for (std::int64_t r = 0; r < pts.n; ++r)
    std::copy_n(rows.begin() + r * cout, cout, by_id.begin() + all_ids[static_cast<std::size_t>(r)] * cout);
  return by_id;
}

/// The batch in canonical order (features, positions, batch) for a single-process forward.
struct CanonicalInputs {
  std::vector<std::int64_t> order;  // canonical index -> id
  std::vector<float> features, positions;
  bt::Batch batch;
};

CanonicalInputs canonical_inputs(const Points& pts) {
  CanonicalInputs c;
  c.order = canonical_ids(pts);
  std::vector<std::int64_t> batch_idx;
  for (const std::int64_t id : c.order) {
    c.features.insert(c.features.end(), pts.features.begin() + id * pts.channels, pts.features.begin() + (id + 1) * pts.channels);
    c.positions.insert(c.positions.end(), pts.positions.begin() + id * pts.dim, pts.positions.begin() + (id + 1) * pts.dim);
    batch_idx.push_back(pts.sample_of_id[static_cast<std::size_t>(id)]);
  }
  c.batch = bt::Batch::from_batch_idx(batch_idx);
  return c;
}

void expect_rows_by_id(const std::vector<float>& got_by_id, const std::vector<float>& want_canonical,
                       const CanonicalInputs& c, int cout, const std::string& name) {
  ASSERT_EQ(got_by_id.size(), want_canonical.size()) << name;
  std::int64_t differing = 0;
  for (std::size_t s = 0; s < c.order.size(); ++s)
    for (int ch = 0; ch < cout; ++ch)
      differing += got_by_id[static_cast<std::size_t>(c.order[s] * cout + ch)] != want_canonical[s * static_cast<std::size_t>(cout) + static_cast<std::size_t>(ch)];
  EXPECT_EQ(differing, 0) << name << ": values differing from the single-process forward";
}

TEST(CanonicalOrder, ErwinWithInterleavedIdsBitwiseEqualToOneProcess) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  surrogate::ModelFile file = surrogate::ModelFile::read(std::string(SURROGATE_TEST_DATA_DIR) + "/erwin/erwin_mpnn_rot.h5");
  const surrogate::erwin::Network net(file);
  const int cin = net.in_channels(), cout = net.out_channels();
  for (const Spread s : {Spread::shuffled, Spread::last_rank_empty}) {
    const unsigned seed = 31u + static_cast<unsigned>(s);
    const Points pts = make_points({150, 97, 201}, cin, s, seed, comm.size());
    const CanonicalInputs c = canonical_inputs(pts);
    // The graph built by the rule (kNN 6).
    surrogate::ModelFile knn = file;
    knn.config.set("graph", std::string("knn"));
    knn.config.set("graph_k", std::int64_t{6});
    const auto knn_model = surrogate::make_model(knn);
    const std::vector<std::int64_t> graph = surrogate::graph::knn_graph(c.positions, 3, c.batch, 6, true, 1).index;
    expect_rows_by_id(predict_by_id(*knn_model, pts, seed, {}), net.forward(c.features, c.positions, c.batch, graph, 1),
                      c, cout, "erwin, kNN built, spread " + std::to_string(static_cast<int>(s)));
    // Given edges (as ids), dealt to ranks at random: the reference takes the rank-major union's order.
    const std::vector<std::vector<std::int64_t>> edges = random_edges(pts, comm.size(), seed);
    std::vector<std::int64_t> src, dst;
    for (const auto& e : edges)
      for (std::size_t k = 0; k < e.size() / 2; ++k) {
        src.push_back(e[k]);
        dst.push_back(e[e.size() / 2 + k]);
      }
    std::vector<std::int64_t> slot_of_id(c.order.size());
    for (std::size_t k = 0; k < c.order.size(); ++k) slot_of_id[static_cast<std::size_t>(c.order[k])] = static_cast<std::int64_t>(k);
    std::vector<std::int64_t> given;
    for (const std::int64_t id : src) given.push_back(slot_of_id[static_cast<std::size_t>(id)]);
    for (const std::int64_t id : dst) given.push_back(slot_of_id[static_cast<std::size_t>(id)]);
    const auto model = surrogate::make_model(file);
    expect_rows_by_id(predict_by_id(*model, pts, seed, edges), net.forward(c.features, c.positions, c.batch, given, 1),
                      c, cout, "erwin, given edges, spread " + std::to_string(static_cast<int>(s)));
  }
}

TEST(CanonicalOrder, BsaWithInterleavedIdsBitwiseEqualToOneProcess) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::ModelFile file = surrogate::ModelFile::read(std::string(SURROGATE_TEST_DATA_DIR) + "/bsa/bsa_sparse_rot.h5");
  const surrogate::bsa::Network net(file);
  const Points pts = make_points({1000, 1024}, net.in_channels(), Spread::random_skewed, 41u, comm.size());
  const CanonicalInputs c = canonical_inputs(pts);
  const auto model = surrogate::make_model(file);
  expect_rows_by_id(predict_by_id(*model, pts, 41u, {}), net.forward(c.features, c.positions, c.batch, 1),
                    c, net.out_channels(), "bsa sparse_rot");
}

}  // namespace
