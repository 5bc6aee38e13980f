#include "surrogate/point_file.hpp"

#include <filesystem>

#include "h5.hpp"

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
  if (comm.rank() == 0) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) status = {ErrorCode::io, "input file '" + path + "' does not exist"};
    else if (H5Fis_hdf5(path.c_str()) <= 0)
      status = {ErrorCode::io, "'" + path + "' is not an HDF5 file (or it is truncated or unreadable)"};
  }
  comm.agree_or_throw(status);

  h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_mpio(fapl, comm.get(), MPI_INFO_NULL);
  h5::Handle file = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, fapl));
  comm.agree_or_throw(file.valid() ? Status{}
                                   : Status{ErrorCode::io, "cannot open '" + path + "' (truncated or corrupt HDF5 file?)"});

  PointSlab slab;
  DatasetInfo coords, features, batch, target, edges;
  collectively(comm, [&] {
    coords = inspect(file, "coords", path);
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
    read_rows(file, "features", H5T_NATIVE_FLOAT, slab.offset, slab.count, slab.channels, slab.features.data(), path);
  }
  if (target.present) {
    slab.target_channels = static_cast<int>(target.shape[1]);
    slab.target.resize(static_cast<std::size_t>(slab.count * slab.target_channels));
    read_rows(file, "target", H5T_NATIVE_FLOAT, slab.offset, slab.count, slab.target_channels, slab.target.data(), path);
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

void write_prediction_file(const MpiComm& comm, const std::string& path, std::int64_t global_points,
                           std::int64_t offset, std::int64_t count, int channels, const float* values,
                           const std::vector<std::pair<std::string, std::string>>& attributes) {
  h5::QuietErrors quiet;
  h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_mpio(fapl, comm.get(), MPI_INFO_NULL);
  h5::Handle file = h5::file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
  comm.agree_or_throw(file.valid() ? Status{} : Status{ErrorCode::io, "cannot create output file '" + path + "'"});
  for (const auto& [name, value] : attributes) h5::write_attribute(file, name, value);
  hsize_t dims[2] = {static_cast<hsize_t>(global_points), static_cast<hsize_t>(channels)};
  h5::Handle file_space = h5::dataspace(H5Screate_simple(2, dims, nullptr));
  h5::Handle dset = h5::dataset(
      H5Dcreate2(file, "prediction", H5T_IEEE_F32LE, file_space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  comm.agree_or_throw(dset.valid() ? Status{} : Status{ErrorCode::io, "cannot create /prediction in '" + path + "'"});
  hsize_t start[2] = {static_cast<hsize_t>(offset), 0};
  hsize_t extent[2] = {static_cast<hsize_t>(count), static_cast<hsize_t>(channels)};
  h5::Handle mem_space = h5::dataspace(H5Screate_simple(2, extent, nullptr));
  if (count > 0) {
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, extent, nullptr);
  } else {
    H5Sselect_none(file_space);
    H5Sselect_none(mem_space);
  }
  h5::Handle xfer = h5::plist(H5Pcreate(H5P_DATASET_XFER));
  H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE);
  const float dummy = 0;
  const herr_t rc = H5Dwrite(dset, H5T_NATIVE_FLOAT, mem_space, file_space, xfer, count > 0 ? values : &dummy);
  comm.agree_or_throw(rc >= 0 ? Status{} : Status{ErrorCode::io, "cannot write /prediction to '" + path + "'"});
}

}  // namespace surrogate
