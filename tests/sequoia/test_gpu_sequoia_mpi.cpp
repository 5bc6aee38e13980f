// Sequoia's CUDA forward under mpirun at 1-4 ranks (cuda.mpi.* on the host backend, gpu.mpi.* on GPUs):
// whole samples on owner ranks and samples split by lowest voxels (the halo and voxel rows moving between
// the ranks' devices), for the points spread evenly, at random, all on rank 0 or none on the last rank,
// against the CPU forward of the batch in one process: bitwise on the host backend, within 1e-5 of
// max|y| on GPUs (test_gpu_sequoia's bound); per-sample outputs the same on every rank; predict_device and
// the coupling API's device arrays with per-sample values. The dense layers in bf16 / tf32 against the
// one-process device forward in that precision.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "device_arrays.hpp"
#include "gpu_mpi_test.hpp"
#include "sequoia_batches.hpp"
#include "sequoia_mpi_run.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/model.hpp"
#include "surrogate/surrogate.hpp"

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
      // predict_device on the same rows gives predict()'s bits: per-point outputs, and the per-sample ones
      // of a classification (its head on the device), with the class vectors of a segmentation.
      const Check device_arrays = [&](const surrogate::Comm& comm, surrogate::Model& model, surrogate::Plan& plan,
                                      const std::vector<float>& in, const std::vector<float>& out,
                                      const surrogate::Model::SampleArrays& samples) {
        surrogate::testing::expect_device_arrays_match(comm, model, plan, in, model.in_channels(), out,
                                                       model.out_channels(), 0.0f, device, c.model, samples);
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

// Through the coupling API (surrogate::Surrogate, the engine of the C and Fortran APIs): device arrays for
// the points' inputs and outputs (a classification: no outputs, a null `out`) with the per-sample values
// on the host (set_sample_inputs, sample_outputs) take the device-resident predict, bitwise the predict
// from host arrays, at 1-4 ranks with unequal shares and an empty last rank; ranks that differ (host
// arrays on one, device arrays on the others) are staged, with the same values.
TEST(GpuSequoiaMpi, CouplingApiTakesDeviceArraysWithPerSampleValues) {
  SURROGATE_SKIP_WITHOUT_GPU();
  namespace st = surrogate::testing;
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  surrogate::Options options;
  options.device = st::on_host_backend() ? "cuda-emulated" : "cuda";
  for (const auto& [path, sizes] : std::vector<std::pair<std::string, std::vector<std::int64_t>>>{
           {sequoia_test::data_path("cls"), {600, 150}}, {sequoia_test::data_path("seg"), {500, 400}}}) {
    const Batch c = sequoia_test::synthetic(path, sizes, 23u);
    for (const bool last_empty : {false, true}) {
      SCOPED_TRACE(c.model + (last_empty ? ", last rank empty" : ", unequal shares"));
      std::vector<double> coords;
      std::vector<float> in;
      std::vector<std::int64_t> ids, samples;
      const auto cin = static_cast<std::ptrdiff_t>(c.features.size() / static_cast<std::size_t>(c.n()));
      for (std::int64_t i = 0; i < c.n(); ++i) {
        // unequal: rank 0 twice the others' share; or nothing on the last rank
        const int r = last_empty ? (ranks > 1 ? static_cast<int>(i % (ranks - 1)) : 0) : static_cast<int>(i % (ranks + 1)) % ranks;
        if (r != rank) continue;
        const auto k = static_cast<std::size_t>(i);
        for (std::size_t d = 0; d < 3; ++d) coords.push_back(c.positions[3 * k + d]);
        in.insert(in.end(), c.features.begin() + static_cast<std::ptrdiff_t>(k) * cin,
                  c.features.begin() + static_cast<std::ptrdiff_t>(k + 1) * cin);
        ids.push_back(i);
        samples.push_back(c.batch_idx[k]);
      }
      surrogate::Surrogate s(MPI_COMM_WORLD, path, options);
      ASSERT_EQ(s.in_channels(), cin);
      const auto n = static_cast<std::int64_t>(ids.size());
      s.set_points<double>(n, 3, {coords.data(), 3, 1}, ids.data(), samples.data());
      if (s.sample_in_channels() > 0) s.set_sample_inputs<float>(s.samples(), s.sample_in_channels(), c.sample_features.data());
      const int out = s.out_channels();
      std::vector<float> host_out(static_cast<std::size_t>(std::max<std::int64_t>(n * out, 1)), -1.0f);
      s.predict<float>({in.data(), cin, 1}, {out > 0 ? host_out.data() : nullptr, out, 1});
      const std::vector<double> host_samples = s.sample_outputs();
      std::vector<float> padded = in;
      padded.resize(std::max<std::size_t>(padded.size(), 1));
      auto d_in = st::to_device(padded, st::local_device());
      auto d_out = st::to_device(std::vector<float>(host_out.size(), -1.0f), st::local_device());
      const std::int64_t before = s.predictions();
      s.predict<float>({d_in.data(), cin, 1}, {out > 0 ? d_out.data() : nullptr, out, 1});
      EXPECT_EQ(s.predictions(), before + 1);
      EXPECT_EQ(s.sample_outputs(), host_samples);
      EXPECT_EQ(st::to_host(d_out.data(), d_out.size(), st::local_device()), host_out);
      EXPECT_EQ(host_samples.empty(), s.sample_out_channels() == 0);
      // Ranks that differ (rank 0 host arrays, the others device arrays): staged, the same values.
      auto d_out2 = st::to_device(std::vector<float>(host_out.size(), -1.0f), st::local_device());
      std::vector<float> out2(host_out.size(), -1.0f);
      if (rank == 0) s.predict<float>({in.data(), cin, 1}, {out > 0 ? out2.data() : nullptr, out, 1});
      else s.predict<float>({d_in.data(), cin, 1}, {out > 0 ? d_out2.data() : nullptr, out, 1});
      if (rank != 0) out2 = st::to_host(d_out2.data(), d_out2.size(), st::local_device());
      EXPECT_EQ(out2, host_out);
      EXPECT_EQ(s.sample_outputs(), host_samples);
    }
  }
}

}  // namespace
