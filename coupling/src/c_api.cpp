// The C API: a thin layer over surrogate::Surrogate. No exception crosses it; every error becomes a
// status code and a thread-local message.
#include "surrogate.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "c_api_handles.hpp"
#include "surrogate/surrogate.hpp"
#include "surrogate/version.hpp"

namespace {

using surrogate::c_api::last_error;  // shared with c_api_vtk.cpp (c_api_handles.hpp)

using surrogate::c_api::fail;
using surrogate::c_api::guarded;

surrogate::Options to_options(const surrogate_options* options) {
  surrogate::Options o;
  if (options) {
    if (options->device) o.device = options->device;
    o.threads = options->threads;
    o.reproducible = options->reproducible != 0;
    if (options->precision) o.precision = options->precision;
    o.allow_non_finite_output = options->allow_non_finite_output != 0;
  }
  return o;
}

int copy_string(const std::string& text, char* buffer, size_t size) {
  if (!buffer || size == 0) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "null or empty output buffer");
  const std::size_t n = std::min(text.size(), size - 1);
  std::memcpy(buffer, text.data(), n);
  buffer[n] = '\0';
  return SURROGATE_OK;
}

#define SURROGATE_CHECK_HANDLE(h) \
  if (!(h)) return fail(SURROGATE_ERR_INVALID_ARGUMENT, std::string(__func__) + ": null handle")

}  // namespace

extern "C" {

void surrogate_options_default(surrogate_options* options) {
  if (!options) return;
  options->device = "cpu";
  options->threads = 0;
  options->reproducible = 0;
  options->precision = "fp32";
  options->allow_non_finite_output = 0;
}

int surrogate_open(MPI_Comm comm, const char* model_path, const surrogate_options* options, surrogate_t* handle) {
  if (!handle) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_open: null handle pointer");
  *handle = nullptr;
  // A handle MPI cannot use is this rank's status (nothing collective is possible on it).
  const int usable = guarded([&] { surrogate::MpiComm::check_communicator(comm, "surrogate_open"); });
  if (usable != SURROGATE_OK) return usable;
  // A null path on any rank is refused on every rank (agreed before anything else collective).
  int null_paths = model_path ? 0 : 1;
  if (MPI_Allreduce(MPI_IN_PLACE, &null_paths, 1, MPI_INT, MPI_SUM, comm) != MPI_SUCCESS)
    return fail(SURROGATE_ERR_COMMUNICATION, "surrogate_open: MPI_Allreduce failed on the communicator");
  if (null_paths > 0)
    return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_open: null model path on " + std::to_string(null_paths) +
                                                    " rank(s)");
  return guarded([&] {
    const std::string path = model_path ? model_path : "";
    auto* h = new surrogate_handle_s{surrogate::Surrogate(comm, path, to_options(options))};
    *handle = h;
  });
}

int surrogate_open_f(MPI_Fint comm, const char* model_path, const surrogate_options* options, surrogate_t* handle) {
  return surrogate_open(MPI_Comm_f2c(comm), model_path, options, handle);
}

int surrogate_close(surrogate_t* handle) {
  if (!handle || !*handle) return SURROGATE_OK;
  const int rc = guarded([&] { delete *handle; });
  *handle = nullptr;
  return rc;
}

int surrogate_set_options(surrogate_t handle, const surrogate_options* options) {
  SURROGATE_CHECK_HANDLE(handle);
  return guarded([&] { handle->object.set_options(to_options(options)); });
}

int surrogate_set_points_f64(surrogate_t handle, int64_t n_local, int dim, const double* coords, int64_t point_stride,
                             int64_t dim_stride, const int64_t* global_ids, const int64_t* sample_ids) {
  SURROGATE_CHECK_HANDLE(handle);
  return guarded([&] {
    handle->object.set_points<double>(n_local, dim, {coords, point_stride, dim_stride}, global_ids, sample_ids);
  });
}

int surrogate_set_points_f32(surrogate_t handle, int64_t n_local, int dim, const float* coords, int64_t point_stride,
                             int64_t dim_stride, const int64_t* global_ids, const int64_t* sample_ids) {
  SURROGATE_CHECK_HANDLE(handle);
  return guarded([&] {
    handle->object.set_points<float>(n_local, dim, {coords, point_stride, dim_stride}, global_ids, sample_ids);
  });
}

int surrogate_set_edges(surrogate_t handle, int64_t n_edges, const int64_t* sources, const int64_t* receivers) {
  SURROGATE_CHECK_HANDLE(handle);
  return guarded([&] {
    std::vector<std::int64_t> edges;
    const bool given = sources || receivers;
    surrogate::collectively(handle->object.comm(), [&] {
      if (n_edges < 0) throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "surrogate_set_edges: negative n_edges");
      if (n_edges > 0 && (!sources || !receivers))
        throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "surrogate_set_edges: null sources or receivers");
      edges.assign(sources, sources ? sources + n_edges : sources);
      edges.insert(edges.end(), receivers, receivers ? receivers + n_edges : receivers);
    });
    // A rank that gives no edges takes part with an empty share as long as some rank gives edges.
    handle->object.set_edges(n_edges, given ? edges.data() : nullptr);
  });
}

int surrogate_position_dim(surrogate_t handle, int* dim) {
  SURROGATE_CHECK_HANDLE(handle);
  if (!dim) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_position_dim: null pointer");
  *dim = handle->object.model().position_dim();
  return SURROGATE_OK;
}

int surrogate_predict_f64(surrogate_t handle, const double* in, int64_t in_point_stride, int64_t in_channel_stride,
                          double* out, int64_t out_point_stride, int64_t out_channel_stride) {
  SURROGATE_CHECK_HANDLE(handle);
  return guarded([&] {
    handle->object.predict<double>({in, in_point_stride, in_channel_stride}, {out, out_point_stride, out_channel_stride});
  });
}

int surrogate_predict_f32(surrogate_t handle, const float* in, int64_t in_point_stride, int64_t in_channel_stride,
                          float* out, int64_t out_point_stride, int64_t out_channel_stride) {
  SURROGATE_CHECK_HANDLE(handle);
  return guarded([&] {
    handle->object.predict<float>({in, in_point_stride, in_channel_stride}, {out, out_point_stride, out_channel_stride});
  });
}

int surrogate_sample_channels(surrogate_t handle, int* sample_in, int* sample_out) {
  SURROGATE_CHECK_HANDLE(handle);
  if (!sample_in || !sample_out) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_sample_channels: null pointer");
  *sample_in = handle->object.sample_in_channels();
  *sample_out = handle->object.sample_out_channels();
  return SURROGATE_OK;
}

int surrogate_samples(surrogate_t handle, int64_t* samples) {
  SURROGATE_CHECK_HANDLE(handle);
  if (!samples) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_samples: null pointer");
  *samples = handle->object.samples();
  return SURROGATE_OK;
}

int surrogate_set_sample_inputs_f64(surrogate_t handle, int64_t samples, int channels, const double* values) {
  SURROGATE_CHECK_HANDLE(handle);
  if (samples < 0 || channels < 0 || (!values && samples * channels > 0))
    return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_set_sample_inputs_f64: negative count or null values");
  handle->object.set_sample_inputs<double>(samples, channels, values);
  return SURROGATE_OK;
}

int surrogate_set_sample_inputs_f32(surrogate_t handle, int64_t samples, int channels, const float* values) {
  SURROGATE_CHECK_HANDLE(handle);
  if (samples < 0 || channels < 0 || (!values && samples * channels > 0))
    return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_set_sample_inputs_f32: negative count or null values");
  handle->object.set_sample_inputs<float>(samples, channels, values);
  return SURROGATE_OK;
}

int surrogate_get_sample_outputs_f64(surrogate_t handle, int64_t capacity, double* values) {
  SURROGATE_CHECK_HANDLE(handle);
  const std::vector<double>& v = handle->object.sample_outputs();
  if (capacity < static_cast<int64_t>(v.size()) || (!values && !v.empty()))
    return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_get_sample_outputs_f64: room for " + std::to_string(capacity) +
                                                    " values, the last predict gave " + std::to_string(v.size()));
  std::copy(v.begin(), v.end(), values);
  return SURROGATE_OK;
}

int surrogate_in_channels(surrogate_t handle, int* channels) {
  SURROGATE_CHECK_HANDLE(handle);
  if (!channels) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_in_channels: null pointer");
  *channels = handle->object.in_channels();
  return SURROGATE_OK;
}

int surrogate_out_channels(surrogate_t handle, int* channels) {
  SURROGATE_CHECK_HANDLE(handle);
  if (!channels) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_out_channels: null pointer");
  *channels = handle->object.out_channels();
  return SURROGATE_OK;
}

int surrogate_channel_name(surrogate_t handle, int output, int channel, char* buffer, size_t size) {
  SURROGATE_CHECK_HANDLE(handle);
  const surrogate::Model& m = handle->object.model();
  const int count = output ? m.out_channels() : m.in_channels();
  if (channel < 0 || channel >= count)
    return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_channel_name: channel " + std::to_string(channel) +
                                                    " out of range 0.." + std::to_string(count - 1));
  return copy_string(output ? m.output_name(channel) : m.input_name(channel), buffer, size);
}

int surrogate_channel_unit(surrogate_t handle, int output, int channel, char* buffer, size_t size) {
  SURROGATE_CHECK_HANDLE(handle);
  const surrogate::Model& m = handle->object.model();
  const int count = output ? m.out_channels() : m.in_channels();
  if (channel < 0 || channel >= count)
    return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_channel_unit: channel " + std::to_string(channel) +
                                                    " out of range 0.." + std::to_string(count - 1));
  const auto& units = output ? m.fields().output_units : m.fields().input_units;
  return copy_string(channel < static_cast<int>(units.size()) ? units[static_cast<std::size_t>(channel)] : "", buffer, size);
}

int surrogate_architecture(surrogate_t handle, char* buffer, size_t size) {
  SURROGATE_CHECK_HANDLE(handle);
  return copy_string(handle->object.model().architecture(), buffer, size);
}

int surrogate_local_points(surrogate_t handle, int64_t* n_local) {
  SURROGATE_CHECK_HANDLE(handle);
  if (!n_local) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_local_points: null pointer");
  *n_local = handle->object.has_points() ? handle->object.local_points() : 0;
  return SURROGATE_OK;
}

int surrogate_global_points(surrogate_t handle, int64_t* n_global) {
  SURROGATE_CHECK_HANDLE(handle);
  if (!n_global) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_global_points: null pointer");
  *n_global = handle->object.has_points() ? handle->object.global_points() : 0;
  return SURROGATE_OK;
}

int surrogate_point_dim(surrogate_t handle, int* dim) {
  SURROGATE_CHECK_HANDLE(handle);
  if (!dim) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_point_dim: null pointer");
  *dim = handle->object.has_points() ? handle->object.dim() : 0;
  return SURROGATE_OK;
}

int surrogate_agree(surrogate_t handle, int status, const char* message) {
  SURROGATE_CHECK_HANDLE(handle);
  return guarded([&] {
    surrogate::Status local;
    if (status != SURROGATE_OK) {
      const bool known = status > 0 && status <= static_cast<int>(surrogate::ErrorCode::internal);
      local = {known ? static_cast<surrogate::ErrorCode>(status) : surrogate::ErrorCode::internal,
               message ? message : "error reported by the caller"};
    }
    handle->object.comm().agree_or_throw(local);
  });
}

int surrogate_last_predict_seconds(surrogate_t handle, double* seconds) {
  SURROGATE_CHECK_HANDLE(handle);
  if (!seconds) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_last_predict_seconds: null pointer");
  *seconds = handle->object.last_predict_seconds();
  return SURROGATE_OK;
}

const char* surrogate_last_error(void) { return last_error.c_str(); }

const char* surrogate_status_string(int status) {
  if (status < 0 || status > static_cast<int>(surrogate::ErrorCode::internal)) return "unknown status";
  return surrogate::to_string(static_cast<surrogate::ErrorCode>(status));
}

const char* surrogate_version(void) { return surrogate::version(); }

}  // extern "C"
