// Sequoia's CUDA forward under mpirun at 1-4 ranks (cuda.mpi.* on the host backend, gpu.mpi.* on GPUs):
// whole samples on owner ranks and samples split by lowest voxels (the halo and voxel rows moving between
// the ranks' devices), for the points spread evenly, at random, all on rank 0 or none on the last rank,
// against the CPU forward of the batch in one process: bitwise on the host backend, within 1e-5 of
// max|y| on GPUs (test_gpu_sequoia's bound); per-sample outputs the same on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "device_arrays.hpp"
#include "gpu_mpi_test.hpp"
#include "sequoia_batches.hpp"
#include "sequoia_mpi_run.hpp"

namespace {

using namespace sequoia_test::mpi;
using sequoia_test::Batch;

std::vector<Batch> batches() {
  return {sequoia_test::golden("seg", "small"), sequoia_test::golden("cls", "small"),
          sequoia_test::without_class_vectors(sequoia_test::synthetic(sequoia_test::data_path("seg"), {700, 800}, 31u)),
          sequoia_test::synthetic(sequoia_test::data_path("seg"), {1500}, 29u),
          sequoia_test::synthetic(sequoia_test::data_path("cls"), {1200, 150}, 29u),
          sequoia_test::synthetic(sequoia_test::example_model("cls"), {1500}, 29u)};
}

TEST(GpuSequoiaMpi, MatchesTheCpuForwardOfOneProcess) {
  SURROGATE_SKIP_WITHOUT_GPU();
  surrogate::RunOptions device;
  device.cuda_device = surrogate::testing::local_device();
  for (const Batch& c : batches()) {
    SCOPED_TRACE(c.model);
    const std::vector<float> want = sequoia_test::single_process(c);
    for (const Spread s : {Spread::even, Spread::random_skewed, Spread::all_on_rank0, Spread::last_rank_empty}) {
      // A segmentation model's predict_device on the same rows gives predict()'s bits (a classification's
      // per-sample outputs are predict()'s alone).
      const Check device_arrays = [&](const surrogate::Comm& comm, surrogate::Model& model, surrogate::Plan& plan,
                                      const std::vector<float>& in, const std::vector<float>& out) {
        if (model.sample_in_channels() == 0 && model.sample_out_channels() == 0)
          surrogate::testing::expect_device_arrays_match(comm, model, plan, in, model.in_channels(), out,
                                                         model.out_channels(), 0.0f, device, c.model);
      };
      const Outputs got = distributed(c, s, 41u + static_cast<unsigned>(s), 1, nullptr, {}, device, device_arrays);
      const std::vector<float>& y = got.per_point.empty() ? got.per_sample : got.per_point;
      ASSERT_EQ(y.size(), want.size()) << "spread " << static_cast<int>(s);
      if (surrogate::testing::on_host_backend()) {
        EXPECT_TRUE(bitwise_equal(y, want)) << "spread " << static_cast<int>(s);
      } else {
        float top = 1.0f, err = 0.0f;
        for (std::size_t i = 0; i < want.size(); ++i) {
          top = std::max(top, std::fabs(want[i]));
          err = std::max(err, std::fabs(y[i] - want[i]));
        }
        EXPECT_LE(err, 1e-5f * top) << "spread " << static_cast<int>(s);
      }
      if (got.per_point.empty()) {
        EXPECT_TRUE(same_on_every_rank(got.per_sample));
      }
    }
  }
}

}  // namespace
