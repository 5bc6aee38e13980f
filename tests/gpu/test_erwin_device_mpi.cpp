// The Erwin model with RunOptions::cuda_device across MPI ranks (ctest at 1 and 2 ranks; no GPU needed):
// with several ranks the CUDA forward is refused on every rank with Error(unsupported) naming what is
// missing, before any device is touched; at one rank it runs on the device (with a GPU: within the
// float32 bound of the CPU prediction) or, without one, is refused with the runtime's reason.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "golden.hpp"
#include "gpu_test.hpp"
#include "h5_io.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace st = surrogate::testing;

namespace {

TEST(ErwinDeviceMpi, SeveralRanksAreRefusedAndOneRankRunsOrNamesTheMissingDevice) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const std::string p = st::data_dir() + "/erwin/erwin_shapenet_car.h5";
  const auto model = surrogate::make_model(surrogate::ModelFile::read(p));
  const std::vector<float> positions = st::to_float(st::read_array(p, "/golden/positions").values);
  std::vector<std::int64_t> sample;
  std::int64_t b = 0;
  for (const double s : st::read_array(p, "/golden/sample_sizes").values) {
    sample.insert(sample.end(), static_cast<std::size_t>(s), b);
    ++b;
  }
  // Contiguous blocks of the points on the ranks, global ids = the golden order.
  const auto n = static_cast<std::int64_t>(sample.size());
  const std::int64_t first = n * comm.rank() / comm.size(), last = n * (comm.rank() + 1) / comm.size();
  std::vector<std::int64_t> ids, mine_sample;
  std::vector<float> mine_positions;
  for (std::int64_t i = first; i < last; ++i) {
    ids.push_back(i);
    mine_sample.push_back(sample[static_cast<std::size_t>(i)]);
    mine_positions.insert(mine_positions.end(), positions.begin() + i * 3, positions.begin() + i * 3 + 3);
  }
  const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, last - first, mine_sample.data());
  surrogate::PointGeometry g;
  g.positions = mine_positions.data();
  g.ld_positions = 3;
  g.global_ids = ids.data();
  std::vector<float> cpu(static_cast<std::size_t>(std::max<std::int64_t>(1, last - first))), gpu(cpu.size());
  model->predict(comm, layout, g, nullptr, 0, cpu.data(), 1);
  surrogate::RunOptions options;
  options.cuda_device = 0;
  std::string why;
  const bool have_gpu = st::cuda_device_visible(&why);
  try {
    model->predict(comm, layout, g, nullptr, 0, gpu.data(), 1, options);
    EXPECT_EQ(comm.size(), 1) << "several ranks were accepted";
    EXPECT_TRUE(have_gpu) << "no device, but no error";
    const std::vector<double> exact = st::read_array(p, "/golden/output_f64").values;
    double scale = 0, err = 0;
    for (const double v : exact) scale = std::max(scale, std::abs(v));
    for (std::size_t i = 0; i < static_cast<std::size_t>(last - first); ++i)
      err = std::max(err, std::abs(static_cast<double>(gpu[i]) - cpu[i]));
    EXPECT_LE(err, 8e-6 * scale);  // 2 x the 4e-6 max|y| float32 bound of test_gpu_erwin.cpp
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
    const std::string message = e.what();
    if (comm.size() > 1) {
      EXPECT_NE(message.find("runs on one rank only"), std::string::npos) << message;
    } else {
      EXPECT_FALSE(have_gpu) << message;
      EXPECT_NE(message.find("no CUDA device is visible"), std::string::npos) << message;
    }
  }
}

}  // namespace
