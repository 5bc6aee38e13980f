// The spherical families across MPI ranks (run by ctest at 1, 2, 3 and 4 ranks): every golden case of
// tests/data/sphere/models, its grid rows split over the ranks in several ways (contiguous in the
// canonical row-major latitude-longitude order, as the convention requires: even, uneven at random cut
// points that need not fall on latitude boundaries, all on rank 0, all on the last rank), against the
// single-process result computed on each rank: bitwise identical (the prediction of a point does not
// depend on the number of ranks), with 1 and 2 threads.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

#include "golden.hpp"
#include "h5_io.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace st = surrogate::testing;
using surrogate::index_t;

namespace {

std::vector<std::string> case_dirs() {
  std::vector<std::string> dirs;
  const std::filesystem::path root = std::filesystem::path(st::data_dir()) / "sphere" / "models";
  if (std::filesystem::is_directory(root))
    for (const auto& e : std::filesystem::directory_iterator(root))
      if (std::filesystem::exists(e.path() / "model.h5")) {
        const auto f = surrogate::ModelFile::read((e.path() / "model.h5").string());
        // layers between two grids are not generic Models (tests/sphere/test_sphere_models.cpp)
        if (!f.config.has("out_shape") || f.config.get_int_list("out_shape") == f.config.get_int_list("in_shape"))
          dirs.push_back(e.path().string());
      }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

/// [begin, end) of the global rows this rank owns, for each split.
std::vector<std::pair<std::string, std::pair<index_t, index_t>>> splits(index_t n, int rank, int size) {
  std::vector<std::pair<std::string, std::pair<index_t, index_t>>> out;
  out.push_back({"even", {n * rank / size, n * (rank + 1) / size}});
  std::mt19937 gen(4321);
  std::uniform_int_distribution<index_t> cut(0, n);
  std::vector<index_t> cuts = {0, n};
  for (int r = 1; r < size; ++r) cuts.push_back(cut(gen));
  std::sort(cuts.begin(), cuts.end());
  out.push_back({"uneven", {cuts[static_cast<std::size_t>(rank)], cuts[static_cast<std::size_t>(rank) + 1]}});
  out.push_back({"all-on-rank-0", {0, rank == 0 ? n : 0}});
  out.push_back({"all-on-last-rank", {rank == size - 1 ? 0 : n, n}});
  return out;
}

/// Predictions of rows [begin, end) of the canonical order (features: rows x cin).
std::vector<float> predict(const surrogate::Comm& comm, surrogate::Model& model, const std::vector<float>& features,
                           index_t points_per_sample, index_t begin, index_t end, int threads) {
  const int cin = model.in_channels(), cout = model.out_channels();
  std::vector<std::int64_t> ids;
  for (index_t r = begin; r < end; ++r) ids.push_back(r / points_per_sample);
  const auto layout = surrogate::SampleLayout::build(comm, end - begin, ids.data());
  std::vector<float> out(static_cast<std::size_t>((end - begin) * cout));
  surrogate::RunOptions options;
  options.threads = threads;
  model.predict(comm, layout, features.data() + begin * cin, cin, out.data(), cout, options);
  return out;
}

}  // namespace

TEST(SphereMpi, PredictionsDoNotDependOnTheRanks) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  surrogate::SelfComm self;
  const auto dirs = case_dirs();
  ASSERT_FALSE(dirs.empty());
  for (const std::string& dir : dirs) {
    const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, dir + "/model.h5"));
    const st::Array x = st::read_array(dir + "/io.h5", "input");  // (B, C, nlat, nlon)
    const index_t B = x.shape[0], C = x.shape[1], P = x.shape[2] * x.shape[3], n = B * P;
    std::vector<float> rows(static_cast<std::size_t>(n * C));
    for (index_t b = 0; b < B; ++b)
      for (index_t c = 0; c < C; ++c)
        for (index_t p = 0; p < P; ++p)
          rows[static_cast<std::size_t>((b * P + p) * C + c)] = static_cast<float>(x.values[static_cast<std::size_t>((b * C + c) * P + p)]);
    const std::vector<float> single = predict(self, *model, rows, P, 0, n, 1);
    const int cout = model->out_channels();
    for (const auto& [name, range] : splits(n, comm.rank(), comm.size()))
      for (int threads : {1, 2}) {
        const std::vector<float> mine = predict(comm, *model, rows, P, range.first, range.second, threads);
        const bool identical = std::equal(mine.begin(), mine.end(), single.begin() + range.first * cout);
        EXPECT_TRUE(identical) << std::filesystem::path(dir).filename() << " split " << name << " threads " << threads
                               << " on " << comm.size() << " ranks: not bitwise identical to one process";
      }
  }
}
