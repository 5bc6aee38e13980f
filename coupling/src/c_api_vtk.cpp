// The C API of the VTK output (surrogate.h): a thin layer over surrogate::VtkSeries, like c_api.cpp. No
// exception crosses it; every error becomes a status code and the thread-local message that
// surrogate_last_error() returns.
//
// The staging calls (set_cells, add_array, add_prediction) are local: a bad argument is returned at once
// AND kept by the VtkSeries, so that the next surrogate_vtk_write fails with the same status and message
// on every rank (a rank that ignores the status cannot leave the others waiting).
#include <string>
#include <vector>

#include "c_api_handles.hpp"
#include "surrogate.h"
#include "surrogate/vtk.hpp"

struct surrogate_vtk_s {
  surrogate::VtkSeries object;
};

namespace {

using surrogate::c_api::last_error;

using surrogate::c_api::fail;
using surrogate::c_api::guarded;

surrogate::Status invalid(const std::string& message) { return {surrogate::ErrorCode::invalid_argument, message}; }

/// After a staging call: its (or an earlier one's) pending error, raised for guarded().
void raise_pending(const surrogate_vtk_s& vtk) {
  const surrogate::Status& pending = vtk.object.staging_error();
  if (!pending.ok()) pending.raise();
}

#define SURROGATE_CHECK_VTK(h) \
  if (!(h)) return fail(SURROGATE_ERR_INVALID_ARGUMENT, std::string(__func__) + ": null VTK handle")

template <class Real>
int add_array(surrogate_vtk_t vtk, const char* function, const char* name, const char* unit, int components,
              const Real* values, int64_t point_stride, int64_t component_stride) {
  return guarded([&] {
    if (!name)
      vtk->object.defer_error(invalid(std::string(function) + ": null array name"));
    else
      vtk->object.add_array(name, unit ? unit : "", components,
                            surrogate::Strided<const Real>{values, point_stride, component_stride});
    raise_pending(*vtk);
  });
}

}  // namespace

extern "C" {

int surrogate_vtk_open(MPI_Comm comm, const char* directory, const char* name, surrogate_vtk_t* vtk) {
  return surrogate_vtk_open_format(comm, directory, name, SURROGATE_VTK_FORMAT_VTU, vtk);
}

int surrogate_vtk_open_f(MPI_Fint comm, const char* directory, const char* name, surrogate_vtk_t* vtk) {
  return surrogate_vtk_open(MPI_Comm_f2c(comm), directory, name, vtk);
}

int surrogate_vtk_open_format(MPI_Comm comm, const char* directory, const char* name, int format,
                              surrogate_vtk_t* vtk) {
  if (!vtk) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_vtk_open_format: null handle pointer");
  *vtk = nullptr;
  return guarded([&] {
    // Null strings become "" so that every rank still takes part in the collective constructor, which
    // agrees on the outcome ("" directory: the current directory; "" name: an error on every rank). An
    // unknown format is passed on as it is: the constructor compares it over the ranks and refuses it.
    auto* h = new surrogate_vtk_s{surrogate::VtkSeries(comm, directory ? directory : "", name ? name : "",
                                                       static_cast<surrogate::VtkFormat>(format))};
    *vtk = h;
  });
}

int surrogate_vtk_open_format_f(MPI_Fint comm, const char* directory, const char* name, int format,
                                surrogate_vtk_t* vtk) {
  return surrogate_vtk_open_format(MPI_Comm_f2c(comm), directory, name, format, vtk);
}

int surrogate_vtk_format_available(int format, int* available) {
  if (!available) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_vtk_format_available: null pointer");
  *available = 0;
  if (format != SURROGATE_VTK_FORMAT_VTU && format != SURROGATE_VTK_FORMAT_VTKHDF)
    return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_vtk_format_available: unknown VTK format " +
                                                    std::to_string(format) + " (SURROGATE_VTK_FORMAT_VTU or _VTKHDF)");
  *available = surrogate::VtkSeries::available(static_cast<surrogate::VtkFormat>(format)) ? 1 : 0;
  return SURROGATE_OK;
}

int surrogate_vtk_series_path(surrogate_vtk_t vtk, const char** path) {
  SURROGATE_CHECK_VTK(vtk);
  if (!path) return fail(SURROGATE_ERR_INVALID_ARGUMENT, "surrogate_vtk_series_path: null pointer");
  *path = vtk->object.series_path().c_str();
  return SURROGATE_OK;
}

int surrogate_vtk_close(surrogate_vtk_t* vtk) {
  if (!vtk || !*vtk) return SURROGATE_OK;
  const int rc = guarded([&] { delete *vtk; });
  *vtk = nullptr;
  return rc;
}

int surrogate_vtk_set_cells(surrogate_vtk_t vtk, int64_t n_cells, const int64_t* connectivity, const int64_t* offsets,
                            const uint8_t* types) {
  SURROGATE_CHECK_VTK(vtk);
  return guarded([&] {
    surrogate::VtkSeries& series = vtk->object;
    if (n_cells == 0) {
      series.clear_cells();
    } else if (n_cells < 0) {
      series.clear_cells();
      series.defer_error(invalid("surrogate_vtk_set_cells: negative number of cells (" + std::to_string(n_cells) + ")"));
    } else if (!offsets || !types) {
      series.clear_cells();
      series.defer_error(invalid("surrogate_vtk_set_cells: null offsets or types for " + std::to_string(n_cells) + " cells"));
    } else if (offsets[n_cells - 1] < 0 || (offsets[n_cells - 1] > 0 && !connectivity)) {
      series.clear_cells();
      series.defer_error(invalid("surrogate_vtk_set_cells: null connectivity or negative last offset (" +
                                 std::to_string(offsets[n_cells - 1]) + ")"));
    } else {
      const auto n = static_cast<std::size_t>(n_cells);
      std::vector<surrogate::VtkCell> cell_types(n);
      for (std::size_t c = 0; c < n; ++c) cell_types[c] = static_cast<surrogate::VtkCell>(types[c]);
      series.set_cells({connectivity, static_cast<std::size_t>(offsets[n - 1])}, {offsets, n}, cell_types);
    }
    raise_pending(*vtk);
  });
}

int surrogate_vtk_add_array_f64(surrogate_vtk_t vtk, const char* name, const char* unit, int components,
                                const double* values, int64_t point_stride, int64_t component_stride) {
  SURROGATE_CHECK_VTK(vtk);
  return add_array(vtk, __func__, name, unit, components, values, point_stride, component_stride);
}

int surrogate_vtk_add_array_f32(surrogate_vtk_t vtk, const char* name, const char* unit, int components,
                                const float* values, int64_t point_stride, int64_t component_stride) {
  SURROGATE_CHECK_VTK(vtk);
  return add_array(vtk, __func__, name, unit, components, values, point_stride, component_stride);
}

int surrogate_vtk_add_prediction_f64(surrogate_vtk_t vtk, surrogate_t handle, const double* prediction,
                                     int64_t point_stride, int64_t channel_stride, const char* prefix) {
  SURROGATE_CHECK_VTK(vtk);
  return guarded([&] {
    if (!handle)
      vtk->object.defer_error(invalid("surrogate_vtk_add_prediction_f64: null surrogate handle"));
    else
      vtk->object.add_prediction(handle->object, {prediction, point_stride, channel_stride}, prefix ? prefix : "");
    raise_pending(*vtk);
  });
}

int surrogate_vtk_write(surrogate_vtk_t vtk, double time, int64_t n_local, int dim, const double* coords,
                        int64_t point_stride, int64_t dim_stride, int* step) {
  SURROGATE_CHECK_VTK(vtk);
  return guarded([&] {
    const int written = vtk->object.write(time, n_local, dim, {coords, point_stride, dim_stride});
    if (step) *step = written;
  });
}

int surrogate_vtk_write_points_of(surrogate_vtk_t vtk, double time, surrogate_t handle, int* step) {
  SURROGATE_CHECK_VTK(vtk);
  return guarded([&] {
    int written = 0;
    if (!handle) {
      // Still take part in the collective write, which fails with this message on every rank.
      vtk->object.defer_error(invalid("surrogate_vtk_write_points_of: null surrogate handle"));
      written = vtk->object.write(time, 0, 1, {});
    } else {
      written = vtk->object.write(time, handle->object);
    }
    if (step) *step = written;
  });
}

}  // extern "C"
