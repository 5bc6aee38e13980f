// Sequoia's CUDA forward under mpirun at 1-4 ranks (cuda.mpi.* on the host backend, gpu.mpi.* on GPUs):
// whole samples on owner ranks and samples split by lowest voxels (the halo and voxel rows moving between
// the ranks' devices), for the points spread evenly, at random, all on rank 0 or none on the last rank,
// against the CPU forward of the batch in one process: bitwise on the host backend, within 1e-5 of
// max|y| on GPUs (test_gpu_sequoia's bound); per-sample outputs the same on every rank. The dense layers
// in bf16 / tf32 against the one-process device forward in that precision.
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
#include "surrogate/comm.hpp"
#include "surrogate/model.hpp"

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

/// A device forward's outputs against the one-process reference: bitwise on the host backend, within 1e-5
/// of max|y| on GPUs.
void expect_device_result(const std::vector<float>& y, const std::vector<float>& want, int spread) {
  ASSERT_EQ(y.size(), want.size()) << "spread " << spread;
  if (surrogate::testing::on_host_backend()) {
    EXPECT_TRUE(bitwise_equal(y, want)) << "spread " << spread;
    return;
  }
  float top = 1.0f, err = 0.0f;
  for (std::size_t i = 0; i < want.size(); ++i) {
    top = std::max(top, std::fabs(want[i]));
    err = std::max(err, std::fabs(y[i] - want[i]));
  }
  EXPECT_LE(err, 1e-5f * top) << "spread " << spread;
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
      expect_device_result(got.per_point.empty() ? got.per_sample : got.per_point, want, static_cast<int>(s));
      if (got.per_point.empty()) {
        EXPECT_TRUE(same_on_every_rank(got.per_sample));
      }
    }
  }
}

/// The registered model's prediction of the whole batch in one process (on this rank's device).
std::vector<float> one_process(const Batch& c, const surrogate::RunOptions& options) {
  const surrogate::SelfComm comm;
  const auto model = surrogate::make_model(c.file);
  surrogate::PointGeometry g;
  g.positions = c.positions.data();
  g.ld_positions = 3;
  const auto plan = model->plan(comm, surrogate::SampleLayout::build(comm, c.n(), c.batch_idx.data()), g, options);
  const int in = model->in_channels(), out = model->out_channels(), s_out = model->sample_out_channels();
  std::vector<float> per_point(static_cast<std::size_t>(c.n() * std::max(out, 1)));
  std::vector<float> per_sample(c.sizes.size() * static_cast<std::size_t>(std::max(s_out, 1)));
  surrogate::Model::SampleArrays sa;
  sa.in = model->sample_in_channels() > 0 ? c.sample_features.data() : nullptr;
  sa.ld_in = model->sample_in_channels();
  sa.out = s_out > 0 ? per_sample.data() : nullptr;
  sa.ld_out = s_out;
  model->predict(comm, *plan, c.features.data(), in, out > 0 ? per_point.data() : nullptr, out, sa, options);
  return out > 0 ? per_point : per_sample;
}

// The dense layers in bf16 and tf32 across the ranks: the one-process device forward in that precision,
// bitwise on the host backend (the same kernels on the same rows), within 1e-5 of max|y| on GPUs.
TEST(GpuSequoiaMpi, TensorCorePrecisionsAreTheOneProcessForward) {
  SURROGATE_SKIP_WITHOUT_GPU();
  for (const auto precision : {surrogate::Precision::bf16, surrogate::Precision::tf32}) {
    surrogate::RunOptions device;
    device.cuda_device = surrogate::testing::local_device();
    device.precision = precision;
    for (const Batch& c : {sequoia_test::synthetic(sequoia_test::data_path("seg"), {1500}, 29u),
                           sequoia_test::synthetic(sequoia_test::data_path("cls"), {1200, 150}, 29u)}) {
      SCOPED_TRACE(c.model + " " + surrogate::precision_name(precision));
      const std::vector<float> want = one_process(c, device);
      for (const Spread s : {Spread::even, Spread::last_rank_empty}) {
        const Outputs got = distributed(c, s, 43u + static_cast<unsigned>(s), 1, nullptr, {}, device);
        expect_device_result(got.per_point.empty() ? got.per_sample : got.per_point, want, static_cast<int>(s));
      }
    }
  }
}

}  // namespace
