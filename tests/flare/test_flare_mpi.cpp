// FLARE across MPI ranks (run by ctest at 1, 2, 3 and 4 ranks): every golden case, partitioned in
// several ways, against the single-process result computed on each rank. Default mode agrees within
// 1e-6 (max abs difference / max abs value); reproducible mode is bitwise identical. A kept plan gives the
// bits of a fresh one. Errors on one rank become the same error on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "flare_partitions.hpp"
#include "golden.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace st = surrogate::testing;
using surrogate::Error;
using surrogate::ErrorCode;

namespace {



class FlareMpi : public ::testing::TestWithParam<std::string> {};

TEST_P(FlareMpi, PredictionsDoNotDependOnTheRanks) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  surrogate::SelfComm self;
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto file = surrogate::ModelFile::read(comm, c.model_path);
  const auto model = surrogate::make_model(file);
  std::vector<std::int64_t> all(static_cast<std::size_t>(c.points()));
  std::iota(all.begin(), all.end(), 0);
  surrogate::RunOptions fast, exact;
  exact.reproducible = true;
  const auto single_fast = st::predict_rows(self, *model, c, all, fast);
  const auto single_exact = st::predict_rows(self, *model, c, all, exact);
  double scale = 0;
  for (float v : single_fast) scale = std::max(scale, double(std::abs(v)));
  for (const Partition& p : partitions(c.points(), comm.rank(), comm.size())) {
    for (int threads : {1, 2}) {
      fast.threads = exact.threads = threads;
      const auto out_fast = st::predict_rows(comm, *model, c, p.rows, fast);
      const auto out_exact = st::predict_rows(comm, *model, c, p.rows, exact);
      double worst = 0;
      bool identical = true;
      for (std::size_t i = 0; i < p.rows.size(); ++i)
        for (int j = 0; j < c.out_dim; ++j) {
          const std::size_t local = i * static_cast<std::size_t>(c.out_dim) + static_cast<std::size_t>(j);
          const std::size_t global = static_cast<std::size_t>(p.rows[i] * c.out_dim + j);
          worst = std::max(worst, double(std::abs(out_fast[local] - single_fast[global])));
          identical = identical && out_exact[local] == single_exact[global];
        }
      EXPECT_LE(worst / scale, 1e-6) << c.name << " " << p.name << " threads " << threads << " on " << comm.size() << " ranks";
      EXPECT_TRUE(identical) << c.name << " " << p.name << " threads " << threads
                             << ": reproducible mode is not bitwise identical to one process";
    }
  }
}

// The plan of a point set (Model::plan): predictions on one kept plan, on a second plan of the same points
// and through the one-shot predict are bitwise identical, in both modes; FLARE's plan moves no rows.
TEST_P(FlareMpi, APlanIsReusedBitwise) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.model_path));
  const Partition shuffled = partitions(c.points(), comm.rank(), comm.size())[1];  // samples straddle ranks
  std::vector<float> in;
  std::vector<std::int64_t> ids;
  gather(c, shuffled.rows, in, ids);
  const auto n = static_cast<std::int64_t>(shuffled.rows.size());
  const auto layout = surrogate::SampleLayout::build(comm, n, ids.data());
  const auto plan = model->plan(comm, layout);
  const auto second_plan = model->plan(comm, layout);
  for (bool reproducible : {false, true}) {
    surrogate::RunOptions options;
    options.reproducible = reproducible;
    options.threads = 2;
    auto predict = [&](surrogate::Plan* p) {
      std::vector<float> out(static_cast<std::size_t>(n) * static_cast<std::size_t>(c.out_dim), -1.0f);
      if (p) model->predict(comm, *p, in.data(), c.in_dim, out.data(), c.out_dim, options);
      else model->predict(comm, layout, in.data(), c.in_dim, out.data(), c.out_dim, options);
      return out;
    };
    const auto first = predict(plan.get());
    const std::string mode = reproducible ? " reproducible" : " default";
    EXPECT_EQ(predict(plan.get()), first) << c.name << mode << ": the kept plan changed the bits";
    EXPECT_EQ(predict(second_plan.get()), first) << c.name << mode << ": a second plan of the points";
    EXPECT_EQ(predict(nullptr), first) << c.name << mode << ": the one-shot predict";
  }
  const surrogate::Traffic& traffic = plan->traffic();
  EXPECT_EQ(traffic.sent + traffic.received + traffic.local + traffic.moves, 0u) << "FLARE moves no rows";
}

// bf16 on the CPU (share/docs/cpu-bf16.md), where the CPU has it: the BF16 Linear layers are row-local, so
// the reproducible mode stays bitwise identical to one process for every partition and thread count.
TEST_P(FlareMpi, Bf16ReproducibleModeDoesNotDependOnTheRanks) {
  if (!surrogate::kernels::cpu_bf16(surrogate::kernels::LinearEngine::avx512_bf16))
    GTEST_SKIP() << "no BF16 on this CPU: " << surrogate::kernels::bf16_unavailable_reason();
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  surrogate::SelfComm self;
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.model_path));
  std::vector<std::int64_t> all(static_cast<std::size_t>(c.points()));
  std::iota(all.begin(), all.end(), 0);
  surrogate::RunOptions exact;
  exact.reproducible = true;
  exact.precision = surrogate::Precision::bf16;
  const auto single = st::predict_rows(self, *model, c, all, exact);
  for (const Partition& p : partitions(c.points(), comm.rank(), comm.size())) {
    for (int threads : {1, 2}) {
      exact.threads = threads;
      const auto out = st::predict_rows(comm, *model, c, p.rows, exact);
      bool identical = true;
      for (std::size_t i = 0; i < p.rows.size(); ++i)
        for (int j = 0; j < c.out_dim; ++j)
          identical = identical && out[i * static_cast<std::size_t>(c.out_dim) + static_cast<std::size_t>(j)] ==
                                       single[static_cast<std::size_t>(p.rows[i] * c.out_dim + j)];
      EXPECT_TRUE(identical) << c.name << " " << p.name << " threads " << threads << " on " << comm.size()
                             << " ranks: bf16 reproducible mode is not bitwise identical to one process";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, FlareMpi, ::testing::ValuesIn(st::golden_case_names()),
                         [](const auto& param_info) { return param_info.param; });

// ---------------------------------------------------------------------------------------------------
// Collective errors: the same error on every rank, nobody hangs.

template <class F>
Error expect_error_everywhere(const surrogate::Comm& comm, F&& f) {
  Error caught(ErrorCode::ok, "");
  try {
    f();
  } catch (const Error& e) {
    caught = e;
  }
  EXPECT_NE(caught.code(), ErrorCode::ok) << "rank " << comm.rank() << " got no error";
  // every rank holds the same code and message
  const std::string message = caught.what();
  const std::string root_message = comm.broadcast_string(message, 0);
  EXPECT_EQ(message, root_message) << "rank " << comm.rank();
  int code = static_cast<int>(caught.code()), root_code = code;
  comm.broadcast(&root_code, sizeof root_code, 0);
  EXPECT_EQ(code, root_code);
  return caught;
}

TEST(FlareMpiErrors, NonFiniteInputOnOneRankFailsOnAll) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const st::GoldenCase c = st::load_golden_case("default");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.model_path));
  std::vector<std::int64_t> rows;
  for (std::int64_t i = c.points() * comm.rank() / comm.size(); i < c.points() * (comm.rank() + 1) / comm.size(); ++i) rows.push_back(i);
  std::vector<float> in;
  std::vector<std::int64_t> ids;
  gather(c, rows, in, ids);
  const int bad_rank = comm.size() - 1;
  if (comm.rank() == bad_rank) in[1] = std::nanf(""), in[3] = INFINITY;  // channel 1, twice
  const auto layout = surrogate::SampleLayout::build(comm, static_cast<std::int64_t>(rows.size()), ids.data());
  std::vector<float> out(rows.size());
  const Error e = expect_error_everywhere(comm, [&] { model->predict(comm, layout, in.data(), 2, out.data(), 1); });
  EXPECT_EQ(e.code(), ErrorCode::input);
  const std::string m = e.what();
  EXPECT_NE(m.find("channel 1"), std::string::npos) << m;
  EXPECT_NE(m.find("2 NaN/Inf"), std::string::npos) << m;
  if (comm.size() > 1) {
    EXPECT_NE(m.find("rank " + std::to_string(bad_rank)), std::string::npos) << m;
  }
}

TEST(FlareMpiErrors, NonFiniteInputErrorSummarisesEveryRank) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const st::GoldenCase c = st::load_golden_case("default");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.model_path));
  std::vector<float> in;
  std::vector<std::int64_t> ids;
  gather(c, partitions(c.points(), comm.rank(), comm.size())[0].rows, in, ids);  // contiguous shares
  // A NaN in channel 0 on rank 0, an Inf in channel 1 on the last rank: both must be reported.
  const int last = comm.size() - 1;
  if (comm.rank() == 0) in[0] = std::nanf("");
  if (comm.rank() == last) in[in.size() - 1] = INFINITY;
  const auto layout = surrogate::SampleLayout::build(comm, static_cast<std::int64_t>(ids.size()), ids.data());
  std::vector<float> out(ids.size());
  const Error e = expect_error_everywhere(comm, [&] { model->predict(comm, layout, in.data(), 2, out.data(), 1); });
  const std::string m = e.what();
  EXPECT_EQ(e.code(), ErrorCode::input);
  EXPECT_NE(m.find("(channel 0) has 1 NaN/Inf value(s) (rank 0: 1)"), std::string::npos) << m;
  EXPECT_NE(m.find("(channel 1) has 1 NaN/Inf value(s) (rank " + std::to_string(last) + ": 1)"), std::string::npos) << m;
}

TEST(FlareMpiErrors, NonFinitePredictionsAreAnAgreedErrorUnlessAllowed) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const st::GoldenCase c = st::load_golden_case("default");
  // An output std of 1e300 overflows float32 at every point: every rank with points holds Inf.
  surrogate::ModelFile file = surrogate::ModelFile::read(comm, c.model_path);
  file.normalization.output_mean.assign(1, 0.0);
  file.normalization.output_std.assign(1, 1e300);
  const auto model = surrogate::make_model(file);
  std::vector<float> in;
  std::vector<std::int64_t> ids;
  gather(c, partitions(c.points(), comm.rank(), comm.size())[0].rows, in, ids);  // contiguous shares
  const auto layout = surrogate::SampleLayout::build(comm, static_cast<std::int64_t>(ids.size()), ids.data());
  std::vector<float> out(ids.size());
  const Error e = expect_error_everywhere(comm, [&] { model->predict(comm, layout, in.data(), 2, out.data(), 1); });
  const std::string m = e.what();
  EXPECT_EQ(e.code(), ErrorCode::input);
  EXPECT_NE(m.find("non-finite predictions: output field"), std::string::npos) << m;
  EXPECT_NE(m.find("(channel 0) has " + std::to_string(c.points()) + " NaN/Inf value(s)"), std::string::npos) << m;
  const std::int64_t last_count = c.points() - c.points() * (comm.size() - 1) / comm.size();
  EXPECT_NE(m.find("rank " + std::to_string(comm.size() - 1) + ": " + std::to_string(last_count)), std::string::npos) << m;
  surrogate::RunOptions allow;
  allow.allow_non_finite_output = true;
  model->predict(comm, layout, in.data(), 2, out.data(), 1, allow);
  for (const float v : out) EXPECT_FALSE(std::isfinite(v));
}

// Finite inputs that overflow inside the network (found by the fuzzer: the reproducible encode then
// overflowed its int64 sums, undefined behaviour): in both modes the agreed non-finite-prediction error.
TEST(FlareMpiErrors, ActivationsOverflowingToInfAreAnAgreedErrorInBothModes) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const st::GoldenCase c = st::load_golden_case("default");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.model_path));
  std::vector<float> in;
  std::vector<std::int64_t> ids;
  gather(c, partitions(c.points(), comm.rank(), comm.size())[0].rows, in, ids);
  for (float& v : in) v = 3e38f;
  const auto layout = surrogate::SampleLayout::build(comm, static_cast<std::int64_t>(ids.size()), ids.data());
  std::vector<float> out(ids.size());
  for (bool reproducible : {false, true}) {
    surrogate::RunOptions options;
    options.reproducible = reproducible;
    const Error e = expect_error_everywhere(comm, [&] { model->predict(comm, layout, in.data(), 2, out.data(), 1, options); });
    EXPECT_EQ(e.code(), ErrorCode::input) << e.what();
    EXPECT_NE(std::string(e.what()).find("non-finite predictions"), std::string::npos) << e.what();
  }
}

TEST(FlareMpiErrors, APlanOfAnotherModelIsRefusedOnAll) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const st::GoldenCase c = st::load_golden_case("default");
  const auto file = surrogate::ModelFile::read(comm, c.model_path);
  const auto model = surrogate::make_model(file), other = surrogate::make_model(file);
  const std::int64_t n = comm.rank() == 0 ? 5 : 0;
  const auto layout = surrogate::SampleLayout::build(comm, n, nullptr);
  const auto plan = model->plan(comm, layout);
  std::vector<float> in(static_cast<std::size_t>(n * c.in_dim), 0.5f), out(static_cast<std::size_t>(n * c.out_dim));
  Error e = expect_error_everywhere(comm, [&] { other->predict(comm, *plan, in.data(), c.in_dim, out.data(), c.out_dim); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("the plan was built by another model"), std::string::npos) << e.what();
  surrogate::RunOptions device;
  device.cuda_device = 0;
  surrogate::Model::DeviceArrays arrays;
  e = expect_error_everywhere(comm, [&] { other->predict_device(comm, *plan, arrays, device); });
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
  EXPECT_NE(std::string(e.what()).find("the plan was built by another model"), std::string::npos) << e.what();
  // The plan still serves its own model.
  EXPECT_NO_THROW(model->predict(comm, *plan, in.data(), c.in_dim, out.data(), c.out_dim));
}

TEST(FlareMpiErrors, EmptyPointSetFailsOnAll) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const Error e = expect_error_everywhere(comm, [&] { surrogate::SampleLayout::build(comm, 0, nullptr); });
  EXPECT_EQ(e.code(), ErrorCode::input);
  EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos) << e.what();
}

TEST(FlareMpiErrors, BadSampleIndicesFailOnAll) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  std::vector<std::int64_t> ids = {0, 0, 0};
  if (comm.rank() == comm.size() - 1) ids[1] = -4;
  Error e = expect_error_everywhere(comm, [&] { surrogate::SampleLayout::build(comm, 3, ids.data()); });
  EXPECT_NE(std::string(e.what()).find("negative"), std::string::npos) << e.what();
  ids = {0, 2, 2};  // sample 1 has no points
  e = expect_error_everywhere(comm, [&] { surrogate::SampleLayout::build(comm, 3, ids.data()); });
  EXPECT_NE(std::string(e.what()).find("sample 1 has no points"), std::string::npos) << e.what();
}

TEST(FlareMpiErrors, MissingModelFileFailsOnAll) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const Error e = expect_error_everywhere(comm, [&] { surrogate::ModelFile::read(comm, "/nonexistent/model.h5"); });
  EXPECT_EQ(e.code(), ErrorCode::io);
  EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
}

}  // namespace
