// Model::predict_device against predict() for the device tests of every family: the caller's rows copied
// to the device under test, predicted there from device arrays (per-sample arrays on the host, as both
// take them), the result bitwise what predict() wrote from host arrays (the same gather arithmetic, the
// same forward).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "surrogate/model.hpp"

namespace surrogate::testing {

/// predict_device on `plan` with device copies of `in` (rows at stride ld_in) into an output array of
/// `out_size` values at row stride ld_out, filled with `fill` before the call (as the caller filled its
/// host output array), with the per-sample host arrays `samples`; returns that array.
inline std::vector<float> predict_device_rows(const Comm& comm, Model& model, Plan& plan, const std::vector<float>& in,
                                              std::int64_t ld_in, std::size_t out_size, std::int64_t ld_out,
                                              float fill, const RunOptions& options,
                                              const Model::SampleArrays& samples = {}) {
  std::vector<float> padded_in = in, out(std::max<std::size_t>(out_size, 1), fill);
  padded_in.resize(std::max<std::size_t>(padded_in.size(), 1));
  auto d_in = to_device(padded_in, options.cuda_device);
  auto d_out = to_device(out, options.cuda_device);
  Model::DeviceArrays arrays;
  arrays.in = d_in.data();
  arrays.out = d_out.data();
  arrays.in_point_stride = ld_in;
  arrays.out_point_stride = ld_out;
  model.predict_device(comm, plan, arrays, samples, options);
  out = to_host(d_out.data(), d_out.size(), options.cuda_device);
  out.resize(out_size);
  return out;
}

/// EXPECT that predict_device gives `host_out`, the array predict() wrote from `in` (see above), and, for
/// a model with per-sample arrays, the per-sample outputs predict() wrote into `samples.out` (a fresh
/// array of NaNs is passed to predict_device; the same per-sample inputs).
inline void expect_device_arrays_match(const Comm& comm, Model& model, Plan& plan, const std::vector<float>& in,
                                       std::int64_t ld_in, const std::vector<float>& host_out, std::int64_t ld_out,
                                       float fill, const RunOptions& options, const std::string& what,
                                       const Model::SampleArrays& samples = {}) {
  Model::SampleArrays device_samples = samples;
  std::vector<float> host_sample_out, sample_out;
  if (samples.out) {
    const auto values = static_cast<std::size_t>(plan.layout().num_samples() * samples.ld_out);
    host_sample_out.assign(samples.out, samples.out + values);
    sample_out.assign(values, std::numeric_limits<float>::quiet_NaN());
    device_samples.out = sample_out.data();
  }
  const std::vector<float> got =
      predict_device_rows(comm, model, plan, in, ld_in, host_out.size(), ld_out, fill, options, device_samples);
  const auto at = std::mismatch(got.begin(), got.end(), host_out.begin()).first - got.begin();
  EXPECT_EQ(got, host_out) << what << ", rank " << comm.rank() << ": predict_device differs from predict at value "
                           << at << " of " << got.size();
  EXPECT_EQ(sample_out, host_sample_out) << what << ", rank " << comm.rank()
                                         << ": predict_device's per-sample outputs differ from predict's";
}

}  // namespace surrogate::testing
