// VtkFormat::vtkhdf: one VTKHDF UnstructuredGrid file per step, every rank writing its own piece into it
// with parallel HDF5 (MPI-IO driver, collective hyperslab writes), and ParaView's JSON file-series index.
// Plain HDF5: no VTK needed.
//
// Layout (ParaView 5.11's vtkHDFReader; share/docs/vtk.md), one piece per rank, in rank order:
//   /VTKHDF                   attributes Version = [1, 0] (int64), Type = "UnstructuredGrid" (fixed ASCII)
//     NumberOfPoints, NumberOfCells, NumberOfConnectivityIds   int64 (ranks)      one entry per piece
//     Points                                                    float64 (N, 3)
//     Types                                                     uint8 (cells)
//     Connectivity                                              int64 (ids)        local to the piece
//     Offsets                                                   int64 (cells + ranks): n_cells + 1 per piece
//     PointData/<array>                                         float64 or float32 (N) or (N, components)
//     CellData                                                  empty
//     FieldData/TimeValue (1) float64, FieldData/units (variable-length ASCII strings, when any unit)
//
// Order of work; every step's outcome is agreed on every rank before the next, so that no rank is left in
// a collective call that the others skipped:
//   1. the counts are allgathered (each rank's rows in every dataset);
//   2. rank 0 creates the temporary beside the target (OutputFile, OutputWriters::by_name) and reserves
//      the disk the file needs; every rank checks that it sees that very file (a shared file system).
//      A full disk or a quota fails here, on rank 0 alone, not inside HDF5's collective writes (on a full
//      disk parallel HDF5 fails on some ranks only and can leave the others waiting: reliability.md);
//   3. every rank opens it with the MPI-IO driver, creates the objects, writes its rows of each dataset;
//   4. flush (MPI_File_sync on every rank) and close;
//   5. rank 0 alone reopens it with the default driver and writes FieldData (parallel HDF5 1.10 cannot
//      write variable-length strings), then syncs it and renames it over the target.
#include <hdf5.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

#include "output_file.hpp"
#include "surrogate/hdf5.hpp"
#include "surrogate/vtk.hpp"
#include "vtk_detail.hpp"

namespace surrogate::vtk_detail {
namespace {

/// Rows of one rank in the per-point, per-cell and per-connectivity-id datasets.
struct Counts {
  std::int64_t points = 0, cells = 0, ids = 0;
};

/// Where this rank's rows start, and the totals.
struct Layout {
  Counts mine, first, total;
  int rank = 0, ranks = 1;
};

Layout layout_of(const MpiComm& comm, const Step& step) {
  Layout l;
  l.rank = comm.rank();
  l.ranks = comm.size();
  l.mine = {step.n, step.cells(), step.connectivity_ids()};
  std::vector<Counts> all(static_cast<std::size_t>(l.ranks));
  comm.allgather(&l.mine, sizeof l.mine, all.data());
  for (int r = 0; r < l.ranks; ++r) {
    const Counts& c = all[static_cast<std::size_t>(r)];
    if (r == l.rank) l.first = l.total;
    l.total.points += c.points;
    l.total.cells += c.cells;
    l.total.ids += c.ids;
  }
  return l;
}

/// Bytes of the datasets (the file's data; the metadata comes on top).
std::uint64_t data_bytes(const Layout& l, const Step& step) {
  const auto ranks = static_cast<std::uint64_t>(l.ranks);
  const auto points = static_cast<std::uint64_t>(l.total.points), cells = static_cast<std::uint64_t>(l.total.cells);
  std::uint64_t bytes = 3 * 8 * ranks + 3 * 8 * points + cells + 8 * static_cast<std::uint64_t>(l.total.ids) +
                        8 * (cells + ranks);
  for (const StagedArray& a : step.arrays)
    bytes += points * static_cast<std::uint64_t>(a.components) * (a.single ? 4u : 8u);
  return bytes;
}

/// Generous room for the metadata (object headers, group heaps and B-trees, the global heap of the
/// strings), so that HDF5 never extends the file past the reservation.
std::uint64_t metadata_margin(const Step& step) {
  std::uint64_t units = 0;
  for (const StagedArray& a : step.arrays) units += a.name.size() + a.unit.size() + 64;
  return (std::uint64_t{64} << 10) + (std::uint64_t{8} << 10) * (step.arrays.size() + 16) + 2 * units;
}

/// A 1-D (columns == 0) or 2-D (rows x columns) dataset, contiguous, allocated at creation and never
/// filled (every byte is written by some rank).
h5::Handle create_dataset(hid_t location, const std::string& name, hid_t type, std::int64_t rows, int columns,
                          const std::string& what) {
  const hsize_t dims[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(columns)};
  h5::Handle space = h5::dataspace(H5Screate_simple(columns > 0 ? 2 : 1, dims, nullptr));
  h5::Handle dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE));
  H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
  H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
  return h5::dataset(h5::check(H5Dcreate2(location, name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                               ErrorCode::io, what + ": cannot create the dataset"));
}

/// Collective: this rank's `rows` rows from row `first` (none: an empty selection, still collective).
void write_rows(hid_t dataset, hid_t memory_type, std::int64_t first, std::int64_t rows, int columns,
                const void* data, const std::string& what) {
  h5::Handle file_space = h5::dataspace(H5Dget_space(dataset));
  const int rank = columns > 0 ? 2 : 1;
  const hsize_t start[2] = {static_cast<hsize_t>(first), 0};
  const hsize_t count[2] = {static_cast<hsize_t>(rows), static_cast<hsize_t>(columns)};
  h5::Handle memory_space = h5::dataspace(H5Screate_simple(rank, count, nullptr));
  if (rows > 0) {
    H5Sselect_hyperslab(file_space, H5S_SELECT_SET, start, nullptr, count, nullptr);
  } else {
    H5Sselect_none(file_space);
    H5Sselect_none(memory_space);
  }
  h5::Handle xfer = h5::plist(H5Pcreate(H5P_DATASET_XFER));
  H5Pset_dxpl_mpio(xfer, H5FD_MPIO_COLLECTIVE);
  const double dummy = 0;  // HDF5 wants a buffer even when this rank selects nothing
  h5::check_status(H5Dwrite(dataset, memory_type, memory_space, file_space, xfer, rows > 0 ? data : &dummy),
                   ErrorCode::io, what + ": cannot write this rank's rows");
}

hsize_t dataset_rows(hid_t dataset) {
  h5::Handle space = h5::dataspace(H5Dget_space(dataset));
  hsize_t dims[2] = {0, 0};
  return H5Sget_simple_extent_dims(space, dims, nullptr) > 0 ? dims[0] : 0;
}

void write_attribute_array(hid_t object, const char* name, const std::vector<std::int64_t>& values) {
  const hsize_t n = values.size();
  h5::Handle space = h5::dataspace(H5Screate_simple(1, &n, nullptr));
  h5::Handle attribute = h5::attribute(H5Acreate2(object, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT));
  h5::check_status(attribute.valid() ? H5Awrite(attribute, H5T_NATIVE_INT64, values.data()) : -1, ErrorCode::io,
                   std::string("cannot write the attribute ") + name);
}

/// A fixed-length ASCII string attribute (the length of the text, no terminator), as the reader expects.
void write_attribute_text(hid_t object, const char* name, const std::string& text) {
  h5::Handle type = h5::datatype(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, text.size());
  H5Tset_strpad(type, H5T_STR_NULLPAD);
  H5Tset_cset(type, H5T_CSET_ASCII);
  h5::Handle space = h5::dataspace(H5Screate(H5S_SCALAR));
  h5::Handle attribute = h5::attribute(H5Acreate2(object, name, type, space, H5P_DEFAULT, H5P_DEFAULT));
  h5::check_status(attribute.valid() ? H5Awrite(attribute, type, text.data()) : -1, ErrorCode::io,
                   std::string("cannot write the attribute ") + name);
}

/// This rank's values of a staged array, contiguous (n x components).
template <class Real>
std::vector<Real> gathered(Strided<const Real> v, std::int64_t n, int components) {
  std::vector<Real> out(static_cast<std::size_t>(n) * static_cast<std::size_t>(components));
  for (std::int64_t i = 0; i < n; ++i)
    for (int j = 0; j < components; ++j)
      out[static_cast<std::size_t>(i * components + j)] = v.data[i * v.point_stride + j * v.component_stride];
  return out;
}

/// Rank 0, once the parallel part is closed: FieldData/TimeValue and FieldData/units, with the default
/// (serial) driver.
void write_field_data(const std::string& temporary, const std::string& what, const Step& step) {
  h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
#if H5_VERSION_GE(1, 10, 7)
  H5Pset_file_locking(fapl, false, true);  // file locks fail on some parallel file systems; one writer here
#endif
  h5::Handle file = h5::file(h5::check(H5Fopen(temporary.c_str(), H5F_ACC_RDWR, fapl), ErrorCode::io,
                                       what + ": cannot reopen the written file"));
  {
  h5::Handle field = h5::group(h5::check(H5Gopen2(file, "/VTKHDF/FieldData", H5P_DEFAULT), ErrorCode::io,
                                         what + ": cannot open /VTKHDF/FieldData"));
  h5::write_dataset(field, "TimeValue", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {1}, &step.time);
  std::vector<std::string> units;
  for (const StagedArray& a : step.arrays)
    if (!a.unit.empty()) units.push_back(a.name + ": " + a.unit);
  if (!units.empty()) {
    // Variable-length ASCII: the only string form ParaView 5.11's reader converts into a vtkStringArray.
    std::vector<const char*> pointers;
    for (const std::string& u : units) pointers.push_back(u.c_str());
    h5::Handle type = h5::datatype(H5Tcopy(H5T_C_S1));
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_ASCII);
    const hsize_t n = units.size();
    h5::Handle space = h5::dataspace(H5Screate_simple(1, &n, nullptr));
    h5::Handle dataset = h5::dataset(H5Dcreate2(field, "units", type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    h5::check_status(dataset.valid() ? H5Dwrite(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()) : -1,
                     ErrorCode::io, what + ": cannot write /VTKHDF/FieldData/units");
  }
  }  // the group and datasets are closed before the file, whose close writes them
  h5::check_status(H5Fclose(file.release()), ErrorCode::io, what + ": cannot complete the file");
}

}  // namespace

void write_vtkhdf_step(const MpiComm& comm, const std::string& path, const std::string& context, const Step& step) {
  h5::QuietErrors quiet;
  const std::string what = context + ": '" + path + "'";
  const Layout l = layout_of(comm, step);

  // 2. Rank 0's temporary (its name broadcast), the disk reserved, seen by every rank.
  std::optional<detail::OutputFile> output;
  std::string temporary;
  struct stat created {};
  collectively(comm, [&] {
    if (l.rank != 0) return;
    output.emplace(path, context + " step file", std::span<const std::string>{}, detail::OutputWriters::by_name);
    output->reserve(data_bytes(l, step) + metadata_margin(step));
    temporary = output->temporary_path();
    if (::stat(temporary.c_str(), &created) != 0) throw Error(ErrorCode::io, what + ": its temporary vanished");
  });
  temporary = comm.broadcast_string(temporary, 0);
  std::uint64_t inode = static_cast<std::uint64_t>(created.st_ino);
  comm.broadcast(&inode, sizeof inode, 0);
  collectively(comm, [&] {
    struct stat seen {};
    if (::stat(temporary.c_str(), &seen) != 0 || static_cast<std::uint64_t>(seen.st_ino) != inode)
      throw Error(ErrorCode::io, what + ": this rank does not see rank 0's temporary file '" + temporary +
                                     "' (the output directory must be on a file system that every rank shares)");
  });

  // 3. The file, collectively (the handles close in reverse order on every rank, also on errors).
  h5::Handle fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS));
  H5Pset_fapl_mpio(fapl, comm.get(), MPI_INFO_NULL);
  H5Pset_coll_metadata_write(fapl, true);
  h5::Handle file = h5::file(H5Fcreate(temporary.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl));
  comm.agree_or_throw(file.valid() ? Status{} : Status{ErrorCode::io, what + ": cannot create it with parallel HDF5"});

  h5::Handle root, point_data, cell_data, field_data;
  h5::Handle n_points, n_cells, n_ids, points, types, connectivity, offsets;
  std::vector<h5::Handle> arrays;
  collectively(comm, [&] {
    root = h5::group(h5::check(H5Gcreate2(file, "VTKHDF", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), ErrorCode::io,
                               what + ": cannot create /VTKHDF"));
    write_attribute_array(root, "Version", {1, 0});
    write_attribute_text(root, "Type", "UnstructuredGrid");
    const std::string in = what + ": /VTKHDF/";
    n_points = create_dataset(root, "NumberOfPoints", H5T_STD_I64LE, l.ranks, 0, in + "NumberOfPoints");
    n_cells = create_dataset(root, "NumberOfCells", H5T_STD_I64LE, l.ranks, 0, in + "NumberOfCells");
    n_ids = create_dataset(root, "NumberOfConnectivityIds", H5T_STD_I64LE, l.ranks, 0, in + "NumberOfConnectivityIds");
    points = create_dataset(root, "Points", H5T_IEEE_F64LE, l.total.points, 3, in + "Points");
    types = create_dataset(root, "Types", H5T_STD_U8LE, l.total.cells, 0, in + "Types");
    connectivity = create_dataset(root, "Connectivity", H5T_STD_I64LE, l.total.ids, 0, in + "Connectivity");
    offsets = create_dataset(root, "Offsets", H5T_STD_I64LE, l.total.cells + l.ranks, 0, in + "Offsets");
    point_data = h5::group(h5::check(H5Gcreate2(root, "PointData", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                     ErrorCode::io, in + "PointData: cannot create the group"));
    cell_data = h5::group(h5::check(H5Gcreate2(root, "CellData", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), ErrorCode::io,
                                    in + "CellData: cannot create the group"));
    field_data = h5::group(h5::check(H5Gcreate2(root, "FieldData", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                                     ErrorCode::io, in + "FieldData: cannot create the group"));
    for (const StagedArray& a : step.arrays)
      arrays.push_back(create_dataset(point_data, a.name, a.single ? H5T_IEEE_F32LE : H5T_IEEE_F64LE, l.total.points,
                                      a.components > 1 ? a.components : 0, in + "PointData/" + a.name));
  });

  // Each dataset: this rank's rows built (agreed: out of memory is a status), then written collectively.
  // A dataset without rows (no point on any rank) is left as created: HDF5 refuses to write it.
  const auto put = [&](hid_t dataset, hid_t type, std::int64_t first, std::int64_t rows, int columns,
                       const auto& build, const std::string& name) {
    if (dataset_rows(dataset) == 0) return;  // the same on every rank
    decltype(build()) values;
    collectively(comm, [&] { values = build(); });
    collectively(comm, [&] {
      write_rows(dataset, type, first, rows, columns, values.data(), what + ": /VTKHDF/" + name);
    });
  };
  const auto one = [](std::int64_t v) { return [v] { return std::vector<std::int64_t>{v}; }; };
  put(n_points, H5T_NATIVE_INT64, l.rank, 1, 0, one(l.mine.points), "NumberOfPoints");
  put(n_cells, H5T_NATIVE_INT64, l.rank, 1, 0, one(l.mine.cells), "NumberOfCells");
  put(n_ids, H5T_NATIVE_INT64, l.rank, 1, 0, one(l.mine.ids), "NumberOfConnectivityIds");
  put(points, H5T_NATIVE_DOUBLE, l.first.points, step.n, 3, [&] {
    std::vector<double> xyz(static_cast<std::size_t>(3 * step.n), 0.0);  // padded to 3-D with zeros
    for (std::int64_t i = 0; i < step.n; ++i)
      for (int j = 0; j < step.dim; ++j)
        xyz[static_cast<std::size_t>(3 * i + j)] = step.coords.data[i * step.coords.point_stride + j * step.coords.component_stride];
    return xyz;
  }, "Points");
  put(types, H5T_NATIVE_UINT8, l.first.cells, l.mine.cells, 0, [&] {
    return step.has_cells ? std::vector<std::uint8_t>(step.types.begin(), step.types.end())
                          : std::vector<std::uint8_t>(static_cast<std::size_t>(step.n), static_cast<std::uint8_t>(VtkCell::vertex));
  }, "Types");
  put(connectivity, H5T_NATIVE_INT64, l.first.ids, l.mine.ids, 0, [&] {
    std::vector<std::int64_t> ids(static_cast<std::size_t>(l.mine.ids));
    if (step.has_cells) std::copy(step.connectivity.begin(), step.connectivity.end(), ids.begin());
    else std::iota(ids.begin(), ids.end(), std::int64_t{0});
    return ids;
  }, "Connectivity");
  put(offsets, H5T_NATIVE_INT64, l.first.cells + l.rank, l.mine.cells + 1, 0, [&] {
    std::vector<std::int64_t> ends(static_cast<std::size_t>(l.mine.cells + 1), 0);
    if (step.has_cells) std::copy(step.offsets.begin(), step.offsets.end(), ends.begin() + 1);
    else std::iota(ends.begin(), ends.end(), std::int64_t{0});
    return ends;
  }, "Offsets");
  for (std::size_t k = 0; k < step.arrays.size(); ++k) {
    const StagedArray& a = step.arrays[k];
    const int columns = a.components > 1 ? a.components : 0;
    if (a.single)
      put(arrays[k], H5T_NATIVE_FLOAT, l.first.points, step.n, columns,
          [&] { return gathered(a.f32, step.n, a.components); }, "PointData/" + a.name);
    else
      put(arrays[k], H5T_NATIVE_DOUBLE, l.first.points, step.n, columns,
          [&] { return gathered(a.f64, step.n, a.components); }, "PointData/" + a.name);
  }

  // 4. Everything on disk on every rank (MPI_File_sync), then closed.
  collectively(comm, [&] {
    h5::check_status(H5Fflush(file, H5F_SCOPE_GLOBAL), ErrorCode::io, what + ": cannot flush it");
  });
  arrays.clear();
  for (h5::Handle* h : {&offsets, &connectivity, &types, &points, &n_ids, &n_cells, &n_points, &field_data,
                        &cell_data, &point_data, &root})
    h->reset();
  const herr_t closed = H5Fclose(file.release());
  comm.agree_or_throw(closed >= 0 ? Status{} : Status{ErrorCode::io, what + ": cannot close it"});

  // 5. Rank 0: FieldData, then sync and rename.
  collectively(comm, [&] {
    if (l.rank != 0) return;
    write_field_data(temporary, what, step);
    output->commit();
  });
}

std::string hdf_series_text(const SeriesIndex& series) {
  // JSON strings: the file names hold no control characters (VtkSeries checks the name); escape \ and ".
  const auto quoted = [](const std::string& text) {
    std::string q = "\"";
    for (const char ch : text) {
      if (ch == '\\' || ch == '"') q += '\\';
      q += ch;
    }
    return q + "\"";
  };
  std::string x = "{\n  \"file-series-version\": \"1.0\",\n  \"files\": [\n";
  for (std::size_t k = 0; k < series.size(); ++k)
    x += "    {\"name\": " + quoted(series[k].second) + ", \"time\": " + number(series[k].first) + "}" +
         (k + 1 < series.size() ? ",\n" : "\n");
  x += "  ]\n}\n";
  return x;
}

}  // namespace surrogate::vtk_detail
