// FLARE on CUDA devices across MPI ranks (run by ctest at 1, 2 and 3 ranks; ranks may share one GPU:
// rank r uses device node-local-rank mod device count). Every golden case, partitioned in several ways,
// against the single-process GPU result computed on each rank: default mode within 1e-6 (max abs
// difference / max abs value), reproducible mode bitwise identical. SKIPS when no CUDA device is visible.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "golden.hpp"
#include "gpu_test.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace st = surrogate::testing;

namespace {

int local_device() {
  if (surrogate::testing::on_host_backend()) return surrogate::kernels::cuda::kEmulatedDevice;
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int rank = 0;
  MPI_Comm_rank(local, &rank);
  MPI_Comm_free(&local);
  return rank % surrogate::kernels::cuda::device_count();
}

std::vector<std::vector<std::int64_t>> partitions(std::int64_t n, int rank, int size, std::vector<std::string>& names) {
  std::vector<std::vector<std::int64_t>> result;
  std::vector<std::int64_t> contiguous;
  for (std::int64_t i = n * rank / size; i < n * (rank + 1) / size; ++i) contiguous.push_back(i);
  result.push_back(contiguous);
  names.push_back("contiguous");
  std::mt19937 gen(1234);  // the same permutation and cuts on every rank
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), gen);
  std::vector<std::int64_t> cuts = {0, n};
  std::uniform_int_distribution<std::int64_t> cut(0, n);
  for (int r = 1; r < size; ++r) cuts.push_back(cut(gen));
  std::sort(cuts.begin(), cuts.end());
  result.emplace_back(perm.begin() + cuts[rank], perm.begin() + cuts[rank + 1]);
  names.push_back("shuffled");
  std::vector<std::int64_t> first, last;
  for (std::int64_t i = 0; i < n; ++i) {
    if (rank == 0) first.push_back(i);
    if (rank == size - 1) last.push_back(i);
  }
  result.push_back(first);
  names.push_back("all-on-rank-0");
  result.push_back(last);
  names.push_back("all-on-last-rank");
  return result;
}

class FlareMpiGpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { SURROGATE_SKIP_WITHOUT_GPU(); }
};

TEST_P(FlareMpiGpu, PredictionsDoNotDependOnTheRanks) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  surrogate::SelfComm self;
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.model_path));
  std::vector<std::int64_t> all(static_cast<std::size_t>(c.points()));
  std::iota(all.begin(), all.end(), 0);
  surrogate::RunOptions fast, exact;
  fast.cuda_device = exact.cuda_device = local_device();
  exact.reproducible = true;
  const auto single_fast = st::predict_rows(self, *model, c, all, fast);
  const auto single_exact = st::predict_rows(self, *model, c, all, exact);
  double scale = 0;
  for (float v : single_fast) scale = std::max(scale, double(std::abs(v)));
  std::vector<std::string> names;
  const auto parts = partitions(c.points(), comm.rank(), comm.size(), names);
  for (std::size_t p = 0; p < parts.size(); ++p) {
    const auto& rows = parts[p];
    const auto out_fast = st::predict_rows(comm, *model, c, rows, fast);
    const auto out_exact = st::predict_rows(comm, *model, c, rows, exact);
    double worst = 0;
    bool identical = true;
    for (std::size_t i = 0; i < rows.size(); ++i)
      for (int j = 0; j < c.out_dim; ++j) {
        const std::size_t local = i * static_cast<std::size_t>(c.out_dim) + static_cast<std::size_t>(j);
        const std::size_t global = static_cast<std::size_t>(rows[i] * c.out_dim + j);
        worst = std::max(worst, double(std::abs(out_fast[local] - single_fast[global])));
        identical = identical && out_exact[local] == single_exact[global];
      }
    EXPECT_LE(worst / scale, 1e-6) << c.name << " " << names[p] << " on " << comm.size() << " ranks";
    EXPECT_TRUE(identical) << c.name << " " << names[p] << " on " << comm.size()
                           << " ranks: reproducible mode is not bitwise identical to one process";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, FlareMpiGpu, ::testing::ValuesIn(st::golden_case_names()),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
