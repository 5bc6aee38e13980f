// The registered Sequoia model at 1-4 ranks, whole samples on owners or samples split by lowest voxels:
// bitwise equal to sequoia::Network in one process for points spread evenly, unevenly at random (local
// orders shuffled), all on rank 0, none on the last rank; the plan's division of the work; plan reuse; bad
// input (a seg sample with one voxel per level, missing or rank-dependent per-sample inputs, NaN positions)
// as the same Error on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "sequoia_batches.hpp"
#include "sequoia_mpi_run.hpp"
#include "sequoia/plan.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"
#include "surrogate/sequoia.hpp"

namespace sq = surrogate::sequoia;
using sequoia_test::Batch;
using sequoia_test::example_model;
using sequoia_test::golden;
using sequoia_test::single_process;
using sequoia_test::synthetic;
using namespace sequoia_test::mpi;
using surrogate::ModelFile;

namespace {

class SequoiaMpi : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(SequoiaMpi, BitwiseEqualToOneProcess) {
  const auto [model, name] = GetParam();
  const Batch c = golden(model, name);
  const std::vector<float> want = single_process(c);
  for (const Spread s : {Spread::even, Spread::random_skewed, Spread::all_on_rank0, Spread::last_rank_empty}) {
    const Outputs got = distributed(c, s, 11u + static_cast<unsigned>(s), s == Spread::even ? 2 : 1);
    if (std::string(model) == "seg") {
      EXPECT_TRUE(bitwise_equal(got.per_point, want)) << name << ", spread " << static_cast<int>(s);
    } else {
      EXPECT_TRUE(bitwise_equal(got.per_sample, want)) << name << ", spread " << static_cast<int>(s);
      EXPECT_TRUE(same_on_every_rank(got.per_sample)) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, SequoiaMpi,
                         ::testing::Values(std::make_pair("seg", "small"), std::make_pair("seg", "ties"),
                                           std::make_pair("cls", "small"), std::make_pair("cls", "medium"),
                                           std::make_pair("cls", "one_voxel_sample")),
                         [](const auto& param_info) {
                           return std::string(param_info.param.first) + "_" + param_info.param.second;
                         });

/// The plan's division of the work. Whole samples (no sample larger than N / P points): each sample's
/// hierarchy built and run on exactly one rank, its owner by the SampleOwners rule (samples contiguous,
/// about N / P points per rank). Split samples: every rank holds every sample's hierarchy, the ranks'
/// lowest voxels and points are partitions, every point with its voxel, at most N / P points plus one
/// voxel's per rank. Either way the traffic balances over the ranks.
void expect_shared_work(const Batch& c, surrogate::Plan& base) {
  const auto B = static_cast<std::int64_t>(c.sizes.size());
  const std::int64_t largest = *std::max_element(c.sizes.begin(), c.sizes.end());
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  auto* plan = dynamic_cast<sq::Plan*>(&base);
  ASSERT_NE(plan, nullptr);
  const sq::Hierarchy& h = plan->hierarchy();
  EXPECT_EQ(plan->split(), ranks > 1 && largest * ranks > c.n());
  if (!plan->split()) {
    const auto& owners = plan->owners();
    std::vector<std::int64_t> owned(static_cast<std::size_t>(B), 0), expect_ids;
    for (const auto& o : owners.owned()) {
      owned[static_cast<std::size_t>(o.sample)] = 1;
      expect_ids.push_back(o.sample);
      EXPECT_EQ(o.end - o.begin, c.sizes[static_cast<std::size_t>(o.sample)]);
    }
    EXPECT_EQ(h.samples(), static_cast<std::int64_t>(owners.owned().size()));
    EXPECT_EQ(h.sample_ids, expect_ids);
    EXPECT_EQ(h.point_offsets.empty() ? 0 : h.point_offsets.back(), owners.rows());
    EXPECT_LE(owners.rows(), c.n() / ranks + largest) << "more than about N / P points on one rank";
    MPI_Allreduce(MPI_IN_PLACE, owned.data(), static_cast<int>(B), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    for (std::int64_t s = 0; s < B; ++s) EXPECT_EQ(owned[static_cast<std::size_t>(s)], 1) << "sample " << s;
  } else {
    const sq::Share& share = plan->share();
    EXPECT_EQ(h.samples(), B);
    EXPECT_EQ(h.nodes(0), c.n());
    std::vector<std::int64_t> points(static_cast<std::size_t>(c.n()), 0), voxel_points(static_cast<std::size_t>(h.nodes(1)), 0);
    for (const auto r : share.points) ++points[static_cast<std::size_t>(r)];
    for (const auto p : h.pool_parent[0]) ++voxel_points[static_cast<std::size_t>(p)];
    const std::int64_t biggest_voxel = *std::max_element(voxel_points.begin(), voxel_points.end());
    MPI_Allreduce(MPI_IN_PLACE, points.data(), static_cast<int>(c.n()), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_TRUE(std::all_of(points.begin(), points.end(), [](std::int64_t k) { return k == 1; })) << "points partitioned";
    EXPECT_LE(static_cast<std::int64_t>(share.points.size()), c.n() / ranks + biggest_voxel);
    std::vector<std::int64_t> voxels(static_cast<std::size_t>(h.nodes(1)), 0);
    for (const auto v : share.voxels) ++voxels[static_cast<std::size_t>(v)];
    for (const auto r : share.points)
      EXPECT_EQ(voxels[static_cast<std::size_t>(h.pool_parent[0][static_cast<std::size_t>(r)])], 1) << "point " << r << " outside the rank's voxels";
    MPI_Allreduce(MPI_IN_PLACE, voxels.data(), static_cast<int>(voxels.size()), MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    EXPECT_TRUE(std::all_of(voxels.begin(), voxels.end(), [](std::int64_t k) { return k == 1; })) << "voxels partitioned";
    for (const auto g : share.halo) EXPECT_EQ(std::count(share.points.begin(), share.points.end(), g), 0);
  }
  std::uint64_t bytes[2] = {plan->traffic().sent, plan->traffic().received};
  MPI_Allreduce(MPI_IN_PLACE, bytes, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(bytes[0], bytes[1]) << "bytes sent and received over all ranks";
  if (ranks > 1) EXPECT_GT(bytes[0], 0u) << "the skewed spread moves rows to their owners";
  else EXPECT_EQ(bytes[0], 0u);
  EXPECT_GE(plan->traffic().moves, 2u) << "inputs and outputs moved through the counted plans";
}

TEST_P(SequoiaMpi, PlanSharesTheWork) {
  const auto [model, name] = GetParam();
  const Batch c = golden(model, name);
  distributed(c, Spread::random_skewed, 3u, 1, nullptr, [&](surrogate::Plan& plan) { expect_shared_work(c, plan); });
}

/// Samples larger than a rank's share, split by lowest voxels: bitwise the one-process forward for every
/// spread, both models of the golden files (cls: root selection) and the example's (cls: leaf selection,
/// the per-voxel partial sums), one sample or a large and a small one.
class SequoiaMpiSplit : public ::testing::TestWithParam<std::pair<std::string, std::vector<std::int64_t>>> {};

TEST_P(SequoiaMpiSplit, BitwiseEqualToOneProcess) {
  const auto& [path, sizes] = GetParam();
  const Batch c = synthetic(path, sizes, 29u);
  const sq::Config cfg = sq::Config::from_file(c.file);
  const std::vector<float> want = single_process(c);
  for (const Spread s : {Spread::even, Spread::random_skewed, Spread::all_on_rank0, Spread::last_rank_empty}) {
    const Outputs got = distributed(c, s, 41u + static_cast<unsigned>(s), s == Spread::even ? 2 : 1, nullptr,
                                    [&](surrogate::Plan& plan) { expect_shared_work(c, plan); });
    if (cfg.kind == sq::Config::Kind::segmentation) {
      EXPECT_TRUE(bitwise_equal(got.per_point, want)) << path << ", spread " << static_cast<int>(s);
    } else {
      EXPECT_TRUE(bitwise_equal(got.per_sample, want)) << path << ", spread " << static_cast<int>(s);
      EXPECT_TRUE(same_on_every_rank(got.per_sample)) << path;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Synthetic, SequoiaMpiSplit,
    ::testing::Values(std::make_pair(sequoia_test::data_path("seg"), std::vector<std::int64_t>{1500}),
                      std::make_pair(sequoia_test::data_path("cls"), std::vector<std::int64_t>{1200, 150}),
                      std::make_pair(example_model("seg"), std::vector<std::int64_t>{150, 1200}),
                      std::make_pair(example_model("cls"), std::vector<std::int64_t>{1500})),
    [](const auto& param_info) { return "case" + std::to_string(param_info.index); });

/// The error of a run, which must be the same Error on every rank.
surrogate::ErrorCode error_of(const std::function<void()>& run) {
  int code = 0;
  try {
    run();
  } catch (const surrogate::Error& e) {
    code = static_cast<int>(e.code());
  }
  int lo = 0, hi = 0;
  MPI_Allreduce(&code, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&code, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << "ranks disagree";
  return static_cast<surrogate::ErrorCode>(code);
}

TEST(SequoiaMpiErrors, SegSampleWithOneVoxelPerLevel) {
  const Batch c = golden("seg", "one_voxel_sample");
  EXPECT_EQ(error_of([&] { distributed(c, Spread::random_skewed, 5u); }), surrogate::ErrorCode::input);
}

TEST(SequoiaMpiErrors, MissingPerSampleInputs) {
  Batch c = golden("seg", "small");
  c.sample_features.clear();  // the model takes 4 values per sample; none given
  EXPECT_EQ(error_of([&] { distributed(c, Spread::even, 5u); }), surrogate::ErrorCode::input);
}

TEST(SequoiaMpiErrors, PerSampleInputsDifferBetweenRanks) {
  const Batch c = golden("seg", "small");
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks == 1) GTEST_SKIP() << "needs two ranks";
  std::vector<float> mine = c.sample_features;
  if (rank == ranks - 1) mine[1] += 1.0f;
  EXPECT_EQ(error_of([&] { distributed(c, Spread::even, 5u, 1, mine.data()); }), surrogate::ErrorCode::input);
}

/// A plan of one model given to another, and a CUDA device where none is visible: agreed errors.
TEST(SequoiaMpiErrors, ForeignPlanAndCudaDevice) {
  const Batch c = golden("cls", "small");
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const auto model = surrogate::make_model(c.file), other = surrogate::make_model(c.file);
  const std::int64_t n = comm.rank() == 0 ? c.n() : 0;
  const auto layout = surrogate::SampleLayout::build(comm, n, comm.rank() == 0 ? c.batch_idx.data() : nullptr);
  surrogate::PointGeometry g;
  g.positions = c.positions.data();
  g.ld_positions = 3;
  const auto plan = model->plan(comm, layout, g);
  std::vector<float> logits(c.sizes.size() * 40);
  surrogate::Model::SampleArrays sa;
  sa.out = logits.data();
  sa.ld_out = 40;
  EXPECT_EQ(error_of([&] { other->predict(comm, *plan, c.features.data(), 3, nullptr, 0, sa); }),
            surrogate::ErrorCode::invalid_argument);
  surrogate::RunOptions cuda;
  cuda.cuda_device = 0;
  EXPECT_EQ(error_of([&] { model->predict(comm, *plan, c.features.data(), 3, nullptr, 0, sa, cuda); }),
            surrogate::ErrorCode::unsupported);
  EXPECT_EQ(error_of([&] { model->predict(comm, *plan, c.features.data(), 3, nullptr, 0, sa); }), surrogate::ErrorCode{});
}

/// Two points of a sample given one global id (the order that fixes node ids would be ambiguous): the
/// same Error(input) on every rank, whole samples (one rank) or split (more).
TEST(SequoiaMpiErrors, DuplicateGlobalIds) {
  const Batch c = synthetic(sequoia_test::data_path("cls"), {300}, 3u);
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), ranks = comm.size();
  std::vector<std::int64_t> ids;
  std::vector<float> p;
  for (std::int64_t i = 0; i < c.n(); ++i)
    if (static_cast<int>(i % ranks) == rank) {
      ids.push_back(i);
      p.insert(p.end(), c.positions.begin() + i * 3, c.positions.begin() + i * 3 + 3);
    }
  ids.back() = 0;  // point 0 is the first point of rank 0
  const auto model = surrogate::make_model(c.file);
  const auto layout = surrogate::SampleLayout::build(comm, static_cast<std::int64_t>(ids.size()), nullptr);
  surrogate::PointGeometry g;
  g.positions = p.data();
  g.ld_positions = 3;
  g.global_ids = ids.data();
  EXPECT_EQ(error_of([&] { model->plan(comm, layout, g); }), surrogate::ErrorCode::input);
}

TEST(SequoiaMpiErrors, NonFinitePosition) {
  Batch c = golden("cls", "small");
  c.positions[7] = std::nanf("");
  EXPECT_NE(error_of([&] { distributed(c, Spread::random_skewed, 5u); }), surrogate::ErrorCode{});
}

}  // namespace
