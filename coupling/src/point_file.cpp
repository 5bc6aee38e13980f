#include "surrogate/point_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <limits>
#include <system_error>
#include <type_traits>

#include "output_file.hpp"
#include "surrogate/hdf5.hpp"

namespace surrogate {
namespace {

struct DatasetInfo {
  bool present = false;
  std::vector<std::int64_t> shape;
  H5T_class_t type_class = H5T_NO_CLASS;
};

/// Most columns a point file's dataset may have (coordinates, channels): they become int widths.
constexpr std::int64_t kMaxColumns = std::int64_t{1} << 16;

DatasetInfo inspect(hid_t file, const char* name, const std::string& path) {
  DatasetInfo info;
  if (!h5::link_exists(file, name)) return info;
  const std::string what = "'" + path + "': /" + name;
  h5::Handle dset = h5::dataset(H5Dopen2(file, name, H5P_DEFAULT));
  if (!dset.valid()) throw Error(ErrorCode::format, what + " is not a dataset");
  h5::Handle type = h5::datatype(H5Dget_type(dset));
  info.present = true;
  info.shape = h5::checked_dataset_shape(dset, kMaxTensorElements, what);
  info.type_class = H5Tget_class(type);
  if (info.shape.size() == 2 && std::string(name) != "edge_index" && info.shape[1] > kMaxColumns)
    throw Error(ErrorCode::format, what + " has " + std::to_string(info.shape[1]) + " columns; at most " +
                                       std::to_string(kMaxColumns) + " are accepted");
  return info;
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return Tensor32{shape, {}}.shape_text(); }

/// Reads rows [offset, offset + count) of a 1-D or 2-D dataset, collectively.
void read_rows(hid_t file, const char* name, hid_t mem_type, std::int64_t offset, std::int64_t count, int columns,
               void* out, const std::string& path) {
  h5::Handle dset = h5::dataset(H5Dopen2(file, name, H5P_DEFAULT));
  h5::Handle file_space = h5::dataspace(H5Dget_space(dset));
  const int rank = H5Sget_simple_extent_ndims(file_space);
  hsize_t start[2] = {static_cast<hsize_t>(offset), 0};
  hsize_t extent[2] = {static_cast<hsize_t>(count), static_cast<hsize_t>(columns)};
  h5::Handle mem_space = h5::dataspace(H5Screate_simple(rank, extent, nullptr));
  if (count > 0) {
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, extent, nullptr);
  } else {
    H5Sselect_none(file_space);
    H5Sselect_none(mem_space);
  }
  h5::Handle xfer = h5::plist(H5Pcreate(H5P_DATASET_XFER));
  H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE);
  double dummy = 0;  // HDF5 wants a buffer even when this rank selects nothing
  h5::check_status(H5Dread(dset, mem_type, mem_space, file_space, xfer, count > 0 ? out : &dummy), ErrorCode::io,
                   "'" + path + "': cannot read /" + name + " (truncated or corrupt file?)");
}

/// Reads columns [first, first + count) of the (2, E) /edge_index, collectively: count sources, then count receivers.
void read_edge_columns(hid_t file, std::int64_t first, std::int64_t count, std::int64_t* out, const std::string& path) {
  h5::Handle dset = h5::dataset(H5Dopen2(file, "edge_index", H5P_DEFAULT));
  h5::Handle file_space = h5::dataspace(H5Dget_space(dset));
  hsize_t start[2] = {0, static_cast<hsize_t>(first)};
  hsize_t extent[2] = {2, static_cast<hsize_t>(count)};
  h5::Handle mem_space = h5::dataspace(H5Screate_simple(2, extent, nullptr));
  if (count > 0) {
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, extent, nullptr);
  } else {
    H5Sselect_none(file_space);
    H5Sselect_none(mem_space);
  }
  h5::Handle xfer = h5::plist(H5Pcreate(H5P_DATASET_XFER));
  H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE);
  std::int64_t dummy = 0;
  h5::check_status(H5Dread(dset, H5T_NATIVE_INT64, mem_space, file_space, xfer, count > 0 ? out : &dummy), ErrorCode::io,
                   "'" + path + "': cannot read /edge_index (truncated or corrupt file?)");
}

}  // namespace

PointSlab read_point_file(const MpiComm& comm, const std::string& path) {
  h5::QuietErrors quiet;
  Status status;
  // Every rank opens the file (collective MPI-IO): each checks that it is a regular file it can see.
  try {
    h5::check_regular_file(path, "input file");
    if (comm.rank() == 0 && H5Fis_hdf5(path.c_str()) <= 0)
      status = {ErrorCode::io, "input file '" + path + "' is not an HDF5 file (or it is truncated or unreadable)"};
  } catch (...) {
    status = Status::from_current_exception();
  }
  comm.agree_or_throw(status);

  h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_mpio(fapl, comm.get(), MPI_INFO_NULL);
  h5::Handle file = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
  comm.agree_or_throw(file.valid() ? Status{}
                                   : Status{ErrorCode::io, "cannot open input file '" + path + "' (truncated or corrupt HDF5 file?)"});
  collectively(comm, [&] { h5::refuse_external_links(file, path); });

  PointSlab slab;
  DatasetInfo coords, features, batch, target, edges, sample_features;
  collectively(comm, [&] {
    coords = inspect(file, "coords", path);
    sample_features = inspect(file, "sample_features", path);
    features = inspect(file, "features", path);
    batch = inspect(file, "batch_idx", path);
    target = inspect(file, "target", path);
    edges = inspect(file, "edge_index", path);
    if (!coords.present && !features.present)
      throw Error(ErrorCode::format, "'" + path + "' has neither /coords (N x d point coordinates) nor /features "
                                                  "(N x c_in inputs): at least one is needed");
    auto numeric = [&](const DatasetInfo& d, const char* name) {
      if (d.type_class != H5T_FLOAT && d.type_class != H5T_INTEGER)
        throw Error(ErrorCode::format, "'" + path + "': /" + name + " must hold numbers");
    };
    if (coords.present) {
      if (coords.shape.size() != 2 || coords.shape[1] < 1)
        throw Error(ErrorCode::format, "'" + path + "': /coords must be two-dimensional (N, d), found shape " +
                                           shape_text(coords.shape));
      numeric(coords, "coords");
    }
    if (features.present) {
      numeric(features, "features");
      if (features.shape.size() != 2)
        throw Error(ErrorCode::format, "'" + path + "': /features must be two-dimensional (N, c_in), found shape " +
                                           shape_text(features.shape));
      if (coords.present && features.shape[0] != coords.shape[0])
        throw Error(ErrorCode::input, "'" + path + "': /coords has " + std::to_string(coords.shape[0]) +
                                          " rows but /features has " + std::to_string(features.shape[0]));
      // Without /coords the rows of /features are the points: with no column, no byte of the file would
      // back their number (a declared shape (2^33, 0) would otherwise make 2^33 points).
      if (!coords.present && features.shape[1] == 0 && features.shape[0] > 0)
        throw Error(ErrorCode::format, "'" + path + "': /features has " + std::to_string(features.shape[0]) +
                                           " rows but no column, and there is no /coords: the points hold no data");
    }
    const std::int64_t n = coords.present ? coords.shape[0] : features.shape[0];
    if (batch.present) {
      if (batch.type_class != H5T_INTEGER)
        throw Error(ErrorCode::format, "'" + path + "': /batch_idx must hold integers (int64 sample indices)");
      if (batch.shape.size() != 1 || batch.shape[0] != n)
        throw Error(ErrorCode::input, "'" + path + "': /batch_idx must have one entry per point (" + std::to_string(n) +
                                          "), found shape " + shape_text(batch.shape));
    }
    if (edges.present && (edges.type_class != H5T_INTEGER || edges.shape.size() != 2 || edges.shape[0] != 2))
      throw Error(ErrorCode::format, "'" + path + "': /edge_index must hold integers of shape (2, E) (row 0 sources, "
                                         "row 1 receivers), found shape " + shape_text(edges.shape));
    if (sample_features.present) {
      numeric(sample_features, "sample_features");
      if (sample_features.shape.size() != 2)
        throw Error(ErrorCode::format, "'" + path + "': /sample_features must be two-dimensional (B, n), found shape " +
                                           shape_text(sample_features.shape));
    }
    if (target.present) {
      numeric(target, "target");
      if (target.shape.size() != 2 || target.shape[0] != n)
        throw Error(ErrorCode::input, "'" + path + "': /target must have shape (" + std::to_string(n) +
                                          ", c_out), found " + shape_text(target.shape));
    }
  });

  const std::int64_t n = coords.present ? coords.shape[0] : features.shape[0];
  if (n == 0)
    throw Error(ErrorCode::input, "'" + path + "' holds no points (/" + (coords.present ? "coords" : "features") +
                                      " has 0 rows): the point set is empty");
  const std::int64_t p = comm.size(), r = comm.rank();
  slab.global_points = n;
  slab.offset = n * r / p;
  slab.count = n * (r + 1) / p - slab.offset;
  if (coords.present) {
    slab.has_coords = true;
    slab.dim = static_cast<int>(coords.shape[1]);
    slab.coords.resize(static_cast<std::size_t>(slab.count * slab.dim));
    read_rows(file, "coords", H5T_NATIVE_FLOAT, slab.offset, slab.count, slab.dim, slab.coords.data(), path);
  }
  if (features.present) {
    slab.has_features = true;
    slab.channels = static_cast<int>(features.shape[1]);
    slab.features.resize(static_cast<std::size_t>(slab.count * slab.channels));
    if (slab.channels > 0)
      read_rows(file, "features", H5T_NATIVE_FLOAT, slab.offset, slab.count, slab.channels, slab.features.data(), path);
  }
  if (sample_features.present) {  // every rank reads all of it
    slab.has_sample_features = true;
    slab.sample_rows = sample_features.shape[0];
    slab.sample_channels = static_cast<int>(sample_features.shape[1]);
    slab.sample_features.resize(static_cast<std::size_t>(slab.sample_rows * slab.sample_channels));
    read_rows(file, "sample_features", H5T_NATIVE_FLOAT, 0, slab.sample_rows, slab.sample_channels,
              slab.sample_features.data(), path);
  }
  if (target.present) {
    slab.target_channels = static_cast<int>(target.shape[1]);
    slab.target.resize(static_cast<std::size_t>(slab.count * slab.target_channels));
    if (slab.target_channels > 0)
      read_rows(file, "target", H5T_NATIVE_FLOAT, slab.offset, slab.count, slab.target_channels, slab.target.data(),
                path);
  }
  if (edges.present) {
    slab.has_edges = true;
    slab.global_edges = edges.shape[1];
    const std::int64_t first = slab.global_edges * r / p;
    slab.edge_count = slab.global_edges * (r + 1) / p - first;
    slab.edges.resize(static_cast<std::size_t>(2 * slab.edge_count));
    read_edge_columns(file, first, slab.edge_count, slab.edges.data(), path);
    Status edge_status;
    for (const std::int64_t v : slab.edges)
      if (v < 0 || v >= n) {
        edge_status = {ErrorCode::input, "'" + path + "': /edge_index holds point " + std::to_string(v) + ", outside the rows 0.." +
                                        std::to_string(n - 1) + " of the file"};
        break;
      }
    comm.agree_or_throw(edge_status);
  }
  if (batch.present) {
    slab.sample_ids.resize(static_cast<std::size_t>(slab.count));
    read_rows(file, "batch_idx", H5T_NATIVE_INT64, slab.offset, slab.count, 1, slab.sample_ids.data(), path);
    // Sample-major and contiguous: non-decreasing over the whole file, including across rank boundaries.
    struct Ends {
      std::int64_t count, first, last, bad_row;
    } mine{slab.count, 0, 0, -1};
    if (slab.count > 0) {
      mine.first = slab.sample_ids.front();
      mine.last = slab.sample_ids.back();
    }
    for (std::int64_t i = 1; i < slab.count; ++i)
      if (slab.sample_ids[static_cast<std::size_t>(i)] < slab.sample_ids[static_cast<std::size_t>(i - 1)]) {
        mine.bad_row = slab.offset + i;
        break;
      }
    std::vector<Ends> all(static_cast<std::size_t>(p));
    comm.allgather(&mine, sizeof mine, all.data());
    std::int64_t previous = -1, row = 0;
    for (const Ends& e : all) {
      if (e.bad_row >= 0 || (e.count > 0 && e.first < previous)) {
        const std::int64_t at = e.bad_row >= 0 ? e.bad_row : row;
        throw Error(ErrorCode::input, "'" + path + "': /batch_idx must be sample-major (non-decreasing); it decreases at row " +
                                          std::to_string(at));
      }
      if (e.count > 0) previous = e.last;
      row += e.count;
    }
  }
  return slab;
}

namespace {

/// The whole prediction file as bytes, built in memory (HDF5 core driver, no backing store) on rank 0.
/// Per-point values are `points` (gathered), per-sample values `output.sample_*`; float64 when the
/// output holds doubles.
template <class Real>
std::vector<unsigned char> prediction_image(const std::string& path, const PredictionOutput& output, const Real* points) {
  constexpr bool f64 = std::is_same_v<Real, double>;
  const hid_t file_type = f64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
  const hid_t memory_type = f64 ? H5T_NATIVE_DOUBLE : H5T_NATIVE_FLOAT;
  h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_core(fapl, std::size_t{1} << 20, 0);
  h5::Handle file = h5::file(h5::check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), ErrorCode::io,
                                       "cannot create output file '" + path + "'"));
  for (const auto& [name, value] : output.attributes) h5::write_attribute(file, name, value);
  if (output.channels > 0 || output.sample_channels == 0)
    h5::write_dataset(file, "prediction", file_type, memory_type, {output.global_points, output.channels}, points);
  if (output.sample_channels > 0) {
    const void* samples = f64 ? static_cast<const void*>(output.sample_values_f64) : output.sample_values;
    h5::write_dataset(file, "sample_prediction", file_type, memory_type, {output.samples, output.sample_channels},
                      samples);
  }
  h5::check_status(H5Fflush(file, H5F_SCOPE_GLOBAL), ErrorCode::io, "cannot complete '" + path + "'");
  const ssize_t size = H5Fget_file_image(file, nullptr, 0);
  if (size <= 0) throw Error(ErrorCode::io, "cannot complete '" + path + "'");
  std::vector<unsigned char> image(static_cast<std::size_t>(size));
  if (H5Fget_file_image(file, image.data(), image.size()) != size) throw Error(ErrorCode::io, "cannot complete '" + path + "'");
  return image;
}

template <class Real>
void write_prediction_file(const MpiComm& comm, const std::string& path, const PredictionOutput& output,
                           const Real* values) {
  // Rank 0 gathers the rows, builds the file in memory and writes it through an OutputFile (a unique
  // temporary beside the target, synced and renamed over it: output_file.hpp), so that a failed write
  // (full disk, quota, I/O error) is an agreed error and leaves the previous file intact. Parallel HDF5
  // is not used here: share/docs/reliability.md, promise 6.
  const MPI_Datatype type = std::is_same_v<Real, double> ? MPI_DOUBLE : MPI_FLOAT;
  const int p = comm.size();
  std::vector<int> counts(static_cast<std::size_t>(p)), displacements(static_cast<std::size_t>(p));
  Status status;
  if (output.global_points * output.channels > std::numeric_limits<int>::max())
    status = {ErrorCode::unsupported, "output file '" + path + "': " + std::to_string(output.global_points) + " x " +
                                          std::to_string(output.channels) +
                                          " values exceed what one file write gathers (2^31)"};
  comm.agree_or_throw(status);
  const int mine = static_cast<int>(output.count * output.channels);
  MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm.get());
  std::vector<Real> all;
  if (comm.rank() == 0) {
    int total = 0;
    for (int r = 0; r < p; ++r) {
      displacements[static_cast<std::size_t>(r)] = total;
      total += counts[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(std::max(total, 1)));
  }
  // Rows arrive in rank order, which is the file's order (the slabs are rank-major).
  MPI_Gatherv(values, mine, type, all.data(), counts.data(), displacements.data(), type, 0, comm.get());
  if (comm.rank() == 0) {
    try {
      detail::OutputFile file(path, "output file", output.inputs);
      file.write(prediction_image(path, output, all.data()));
      file.commit();
    } catch (...) {
      status = Status::from_current_exception();
    }
  }
  comm.agree_or_throw(status);
}

}  // namespace

void write_prediction_file(const MpiComm& comm, const std::string& path, const PredictionOutput& output) {
  h5::QuietErrors quiet;
  Status status;
  const bool f64 = output.float64;
  if ((output.count > 0 && output.channels > 0 && !(f64 ? static_cast<const void*>(output.values_f64) : output.values)) ||
      (output.sample_channels > 0 && !(f64 ? static_cast<const void*>(output.sample_values_f64) : output.sample_values)))
    status = {ErrorCode::invalid_argument, "write_prediction_file('" + path + "'): no " + (f64 ? "double" : "float") +
                                               " values given (PredictionOutput::float64 says which)"};
  comm.agree_or_throw(status);
  if (comm.allreduce<int>(f64 ? 1 : 0, ReduceOp::min) != comm.allreduce<int>(f64 ? 1 : 0, ReduceOp::max))
    throw Error(ErrorCode::invalid_argument, "write_prediction_file('" + path + "'): the ranks disagree on float or double values");
  if (f64) write_prediction_file(comm, path, output, output.values_f64);
  else write_prediction_file(comm, path, output, output.values);
}

}  // namespace surrogate
