// Distributed Erwin (run by ctest at 1, 2, 3 and 4 ranks): the registered model runs on the distributed
// ball tree (every rank its subtrees, message passing with a halo, rotated blocks through exchanges);
// its output must equal bit for bit erwin::Network::forward of the whole batch in one process, which
// every rank computes itself. Golden models of tests/data/erwin (rotation, message passing with given
// and built edges, three levels, stride 4, the erwin_flash layout, the ShapeNet-Car wrapper) and a batch
// of four samples of random points; points spread evenly, unevenly at random (local orders shuffled),
// all on rank 0, none on the last rank; few points (tree ranges empty on some ranks); 3 threads per
// rank on one spread.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "surrogate/erwin.hpp"
#include "surrogate/error.hpp"
#include "surrogate/graph.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"
#include "surrogate/profile.hpp"

namespace bt = surrogate::balltree;
namespace ew = surrogate::erwin;
using surrogate::ModelFile;
using surrogate::PointGeometry;
using surrogate::SampleLayout;

namespace {

std::string path_of(const std::string& name) { return std::string(SURROGATE_TEST_DATA_DIR) + "/erwin/erwin_" + name + ".h5"; }

template <class T>
std::vector<T> read(const std::string& path, const std::string& name, hid_t type) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("cannot open " + path);
  std::vector<T> v;
  if (H5Lexists(f, name.c_str(), H5P_DEFAULT) > 0) {
    const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    const hid_t s = H5Dget_space(d);
    v.resize(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
    H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Sclose(s);
    H5Dclose(d);
  }
  H5Fclose(f);
  return v;
}

/// A batch in canonical order (samples in order; the global id of a point is its index).
struct Batch {
  ModelFile file;
  std::vector<float> features, positions;
  std::vector<std::int64_t> batch_idx, edges;  // edges: given to predict (empty: the file's rule builds them)
  std::int64_t n() const { return static_cast<std::int64_t>(batch_idx.size()); }
};

std::vector<std::int64_t> batch_of(const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> b;
  for (std::size_t s = 0; s < sizes.size(); ++s) b.insert(b.end(), static_cast<std::size_t>(sizes[s]), static_cast<std::int64_t>(s));
  return b;
}

Batch golden(const std::string& name) {
  Batch c{ModelFile::read(path_of(name)), {}, {}, {}, {}};
  const std::string p = path_of(name);
  c.features = read<float>(p, "/golden/features", H5T_NATIVE_FLOAT);
  c.positions = read<float>(p, "/golden/positions", H5T_NATIVE_FLOAT);
  c.edges = read<std::int64_t>(p, "/golden/edge_index", H5T_NATIVE_INT64);
  c.batch_idx = batch_of(read<std::int64_t>(p, "/golden/sample_sizes", H5T_NATIVE_INT64));
  return c;
}

ModelFile with_knn(ModelFile file, int k) {
  file.config.set("graph", std::string("knn"));
  file.config.set("graph_k", std::int64_t{k});
  return file;
}

/// Random points and features for a golden model's weights, the graph built by the rule (kNN k).
Batch random_batch(const std::string& name, const std::vector<std::int64_t>& sizes, int k, unsigned seed) {
  Batch c{with_knn(ModelFile::read(path_of(name)), k), {}, {}, batch_of(sizes), {}};
  const ew::Network net(c.file);
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  c.positions.resize(static_cast<std::size_t>(c.n() * net.config().dimensionality));
  c.features.resize(static_cast<std::size_t>(c.n() * net.in_channels()));
  for (float& v : c.positions) v = normal(gen);
  for (float& v : c.features) v = normal(gen);
  return c;
}

/// What one process computes: erwin::Network on the whole batch (edges given, or the rule's kNN graph).
std::vector<float> single_process(const Batch& c, int k) {
  const ew::Network net(c.file);
  const bt::Batch batch = bt::Batch::from_batch_idx(c.batch_idx);
  std::vector<std::int64_t> edges = c.edges;
  if (edges.empty() && net.config().mp_steps > 0)
    edges = surrogate::graph::knn_graph(c.positions, net.config().dimensionality, batch, k, true, 1).index;
  return net.forward(c.features, c.positions, batch, edges, 1);
}

enum class Spread { even, random_skewed, all_on_rank0, last_rank_empty };

/// Model::predict over MPI_COMM_WORLD with the points spread as asked (local orders shuffled, global ids
/// = canonical index), `threads` OpenMP threads per rank (0: the default); every rank's rows are
/// gathered back into canonical order on every rank. `kept_plan` (with `reused_model`): the plan of the
/// points, built by the call that finds it empty and used by the next ones.
std::vector<float> distributed(const Batch& c, Spread spread, unsigned seed, int threads = 0,
                               surrogate::Model* reused_model = nullptr,
                               std::unique_ptr<surrogate::Plan>* kept_plan = nullptr) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), ranks = comm.size();
  const std::int64_t n = c.n();
  std::mt19937 gen(seed);
  std::vector<int> owner(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    int r = 0;
    switch (spread) {
      case Spread::even: r = static_cast<int>(i * ranks / n); break;
      case Spread::random_skewed: {  // the last rank gets about 55 %, the others share the rest at random
        const unsigned u = gen() % 100u;
        r = ranks == 1 ? 0 : (u < 55u ? ranks - 1 : static_cast<int>(u % static_cast<unsigned>(ranks - 1)));
        break;
      }
      case Spread::all_on_rank0: r = 0; break;
      case Spread::last_rank_empty: r = ranks > 1 ? static_cast<int>(gen() % static_cast<unsigned>(ranks - 1)) : 0; break;
    }
    owner[static_cast<std::size_t>(i)] = r;
  }
  std::vector<std::int64_t> mine;
  for (std::int64_t i = 0; i < n; ++i)
    if (owner[static_cast<std::size_t>(i)] == rank) mine.push_back(i);
  std::shuffle(mine.begin(), mine.end(), gen);
  const auto own_model = reused_model ? nullptr : surrogate::make_model(c.file);
  surrogate::Model* model = reused_model ? reused_model : own_model.get();
  const int dim = model->position_dim(), cin = model->in_channels(), cout = model->out_channels();
  const auto local = static_cast<std::int64_t>(mine.size());
  std::vector<float> f(static_cast<std::size_t>(local * cin)), p(static_cast<std::size_t>(local * dim));
  std::vector<std::int64_t> samples(mine.size());
  for (std::int64_t r = 0; r < local; ++r) {
    const auto i = static_cast<std::size_t>(mine[static_cast<std::size_t>(r)]);
    std::copy_n(c.features.begin() + static_cast<std::ptrdiff_t>(i) * cin, cin, f.begin() + r * cin);
    std::copy_n(c.positions.begin() + static_cast<std::ptrdiff_t>(i) * dim, dim, p.begin() + r * dim);
    samples[static_cast<std::size_t>(r)] = c.batch_idx[i];
  }
  // Given edges: each rank passes the edges whose receiver it holds (global ids), in the file's order
  // per rank; the union in rank order is then a reordering of the file's edges, which changes the sum
  // order of a receiver's messages only if its edges come from two ranks: they never do here.
  std::vector<std::int64_t> edges;
  if (!c.edges.empty()) {
    const std::size_t E = c.edges.size() / 2;
    std::vector<std::int64_t> src, dst;
    for (std::size_t e = 0; e < E; ++e)
      if (owner[static_cast<std::size_t>(c.edges[E + e])] == rank) {
        src.push_back(c.edges[e]);
        dst.push_back(c.edges[E + e]);
      }
    edges = src;
    edges.insert(edges.end(), dst.begin(), dst.end());
  }
  PointGeometry g;
  g.positions = p.data();
  g.ld_positions = dim;
  g.global_ids = mine.data();
  if (!c.edges.empty()) {
    g.edge_index = edges.data();
    g.num_edges = static_cast<std::int64_t>(edges.size() / 2);
  }
  const SampleLayout layout = SampleLayout::build(comm, local, samples.data());
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(1, local * cout)));
  surrogate::RunOptions options;
  options.threads = threads;
  std::unique_ptr<surrogate::Plan> own_plan;
  std::unique_ptr<surrogate::Plan>& plan = kept_plan ? *kept_plan : own_plan;
  if (!plan) plan = model->plan(comm, layout, g, options);
  model->predict(comm, *plan, f.data(), cin, out.data(), cout, options);
  // Back to canonical order on every rank.
  std::vector<float> all(static_cast<std::size_t>(n * cout));
  std::vector<int> counts(static_cast<std::size_t>(ranks)), displs(static_cast<std::size_t>(ranks));
  const int mine_count = static_cast<int>(local);
  MPI_Allgather(&mine_count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  MPI_Allgatherv(mine.data(), mine_count, MPI_INT64_T, ids.data(), counts.data(), displs.data(), MPI_INT64_T, MPI_COMM_WORLD);
  for (int& x : counts) x *= cout;
  for (int& x : displs) x *= cout;
  std::vector<float> rows(static_cast<std::size_t>(n * cout));
  MPI_Allgatherv(out.data(), mine_count * cout, MPI_FLOAT, rows.data(), counts.data(), displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
  for (std::int64_t r = 0; r < n; ++r)
    std::copy_n(rows.begin() + r * cout, cout, all.begin() + ids[static_cast<std::size_t>(r)] * cout);
  return all;
}

void expect_all_spreads_equal(const Batch& c, const std::vector<float>& want, const std::string& name) {
  for (const Spread s : {Spread::even, Spread::random_skewed, Spread::all_on_rank0, Spread::last_rank_empty}) {
    // The skewed spread also with 3 threads per rank (the other spreads with OMP_NUM_THREADS, 1 in ctest).
    const std::vector<float> got = distributed(c, s, 17u + static_cast<unsigned>(s), s == Spread::random_skewed ? 3 : 0);
    ASSERT_EQ(got.size(), want.size()) << name;
    std::size_t first = got.size();
    for (std::size_t i = 0; i < got.size() && first == got.size(); ++i)
      if (got[i] != want[i]) first = i;
    EXPECT_EQ(first, got.size()) << name << ", spread " << static_cast<int>(s) << ": first difference at value " << first
                                 << " (" << (first < got.size() ? got[first] : 0.0f) << " vs "
                                 << (first < got.size() ? want[first] : 0.0f) << ")";
  }
}

TEST(ErwinMpi, GoldenModelsBitwiseEqualToOneProcess) {
  for (const char* name : {"mpnn_rot", "plain_rot_2d", "mpnn_norot", "flash_ref"}) {
    const Batch c = golden(name);
    expect_all_spreads_equal(c, single_process(c, 0), std::string(name) + " (given edges)");
  }
}

TEST(ErwinMpi, BuiltGraphAndWrapperBitwiseEqualToOneProcess) {
  Batch c = golden("mpnn_rot");
  c.file = with_knn(c.file, 6);
  c.edges.clear();
  expect_all_spreads_equal(c, single_process(c, 6), "mpnn_rot (kNN 6 built)");
  // The ShapeNet-Car wrapper (kNN 8 from its file), against its single-process registered model.
  const std::string p = path_of("shapenet_car");
  Batch w{ModelFile::read(p), {}, read<float>(p, "/golden/positions", H5T_NATIVE_FLOAT),
          batch_of(read<std::int64_t>(p, "/golden/sample_sizes", H5T_NATIVE_INT64)), {}};
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(w.file);
  const SampleLayout layout = SampleLayout::build(self, w.n(), w.batch_idx.data());
  PointGeometry g;
  g.positions = w.positions.data();
  g.ld_positions = 3;
  std::vector<float> want(static_cast<std::size_t>(w.n()));
  model->predict(self, layout, g, nullptr, 0, want.data(), 1);
  expect_all_spreads_equal(w, want, "shapenet_car wrapper");
}

TEST(ErwinMpi, SeveralSamplesAndFewPoints) {
  // Four samples: the rotated trees' target levels depend on the batch's total slot count (704).
  const Batch many = random_batch("mpnn_rot", {150, 97, 40, 201}, 6, 5u);
  expect_all_spreads_equal(many, single_process(many, 6), "mpnn_rot, 4 random samples");
  // One sample of 100 points, granularity 64 slots: two chunks, so ranks 2 and 3 hold no slot.
  const Batch few = random_batch("mpnn_norot", {100}, 5, 9u);
  expect_all_spreads_equal(few, single_process(few, 5), "mpnn_norot, 100 points");
}

TEST(ErwinMpi, PlanReusedWhileTheGeometryStays) {
  // One model object, several calls (each with a new communicator object): new features on the same
  // points reuse the plan; changed positions, another spread of the same points and given edges get a
  // new one. Every result equals the one-process forward of its inputs.
  for (const bool given : {false, true}) {
    Batch c = golden("mpnn_rot");
    if (!given) {
      c.file = with_knn(c.file, 6);
      c.edges.clear();
    }
    const int k = given ? 0 : 6;
    const auto model = surrogate::make_model(c.file);
    const std::string name = given ? "given edges" : "kNN 6";
    std::unique_ptr<surrogate::Plan> plan;
    EXPECT_EQ(distributed(c, Spread::random_skewed, 3u, 0, model.get(), &plan), single_process(c, k)) << name << ", first call";
    std::mt19937 gen(11u);
    std::normal_distribution<float> normal;
    for (float& v : c.features) v = normal(gen);
    EXPECT_EQ(distributed(c, Spread::random_skewed, 3u, 0, model.get(), &plan), single_process(c, k)) << name << ", new features";
    for (float& v : c.positions) v += 0.01f * normal(gen);
    if (given) c.positions[0] += 0.5f;
    plan.reset();
    EXPECT_EQ(distributed(c, Spread::random_skewed, 3u, 0, model.get(), &plan), single_process(c, k)) << name << ", moved points";
    plan.reset();
    EXPECT_EQ(distributed(c, Spread::even, 3u, 0, model.get(), &plan), single_process(c, k)) << name << ", another spread";
  }
}

/// The bytes the plan's exchanges move (Plan::traffic), per predict on the same plan: at one rank nothing
/// is sent or received; at several, the bytes sent over all ranks equal those received and are > 0; every
/// predict adds the same bytes again (the plan moves the same rows each time).
void expect_traffic_counted(const Batch& c, const std::string& name) {
  const auto model = surrogate::make_model(c.file);
  std::unique_ptr<surrogate::Plan> plan;
  std::vector<surrogate::Traffic> after;
  for (int call = 0; call < 3; ++call) {
    static_cast<void>(distributed(c, Spread::random_skewed, 3u, 0, model.get(), &plan));
    after.push_back(plan->traffic());
  }
  auto moved = [&](int call) {  // what predict `call` (1 or 2) added on this rank
    const surrogate::Traffic& a = after[static_cast<std::size_t>(call - 1)];
    const surrogate::Traffic& b = after[static_cast<std::size_t>(call)];
    return std::vector<std::uint64_t>{b.sent - a.sent, b.received - a.received, b.local - a.local, b.moves - a.moves};
  };
  const std::vector<std::uint64_t> once = moved(1);
  EXPECT_EQ(moved(2), once) << name << ": a second predict on the plan moved other bytes";
  EXPECT_GT(once[3], 0u) << name << ": no exchange counted";
  std::uint64_t totals[2] = {once[0], once[1]};
  MPI_Allreduce(MPI_IN_PLACE, totals, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks == 1) {
    EXPECT_EQ(totals[0], 0u) << name;
    EXPECT_EQ(totals[1], 0u) << name;
  } else {
    EXPECT_EQ(totals[0], totals[1]) << name << ": bytes sent and received over all ranks differ";
    EXPECT_GT(totals[0], 0u) << name;
  }
}

TEST(ErwinMpi, PlanTrafficCountsWhatMoves) {
  // Rotated blocks (per-level exchanges) and message passing with a halo (given edges, and kNN 6 built).
  expect_traffic_counted(golden("mpnn_rot"), "mpnn_rot");
  Batch knn = golden("mpnn_rot");
  knn.file = with_knn(knn.file, 6);
  knn.edges.clear();
  expect_traffic_counted(knn, "mpnn_rot, kNN 6");
}

TEST(ErwinMpi, PlanProfileNestsPhases) {
  // Plan::profile (what --timing and Surrogate::profile report): the build under "plan" with the ball
  // tree inside it, every predict under "forward" with the layer kinds inside it; calls counted per
  // predict; an inner phase never takes longer than its outer one. The same phase list on every rank.
  const Batch c = golden("mpnn_rot");
  const auto model = surrogate::make_model(c.file);
  std::unique_ptr<surrogate::Plan> plan;
  for (int call = 0; call < 2; ++call)
    static_cast<void>(distributed(c, Spread::random_skewed, 3u, 0, model.get(), &plan));
  const std::vector<surrogate::Profile::Phase> phases = plan->profile().phases();
  auto find = [&](const std::string& name) {
    const auto it = std::find_if(phases.begin(), phases.end(), [&](const auto& p) { return p.name == name; });
    EXPECT_NE(it, phases.end()) << "no phase '" << name << "'";
    return it == phases.end() ? surrogate::Profile::Phase{} : *it;
  };
  const auto built = find("plan"), tree = find("ball tree"), forward = find("forward");
  const auto mpnn = find("message passing"), levels = find("ball attention levels");
  EXPECT_EQ(built.depth, 0);
  EXPECT_EQ(built.calls, 1u);
  EXPECT_EQ(tree.depth, 1);
  EXPECT_LE(tree.seconds, built.seconds);
  EXPECT_EQ(forward.depth, 0);
  EXPECT_EQ(forward.calls, 2u);
  EXPECT_EQ(mpnn.depth, 1);
  EXPECT_EQ(levels.depth, 1);
  EXPECT_EQ(levels.calls, 2u);
  EXPECT_LE(mpnn.seconds + levels.seconds, forward.seconds);
  EXPECT_EQ(phases.front().name, "plan");  // listed in the order they first started
  std::string names;
  for (const auto& p : phases) names += p.name + ";";
  const int length = static_cast<int>(names.size());
  int lo = length, hi = length;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << "phases differ between ranks: " << names;
}

TEST(ErwinMpi, ErrorsAreAgreed) {
  // A NaN feature on one rank only: every rank throws the same Error(input).
  Batch c = golden("mpnn_rot");
  c.features[4 * (c.n() - 1)] = std::numeric_limits<float>::quiet_NaN();
  try {
    distributed(c, Spread::even, 1u);
    FAIL() << "no error for a NaN feature";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("NaN/Inf"), std::string::npos) << e.what();
  }
}

}  // namespace
