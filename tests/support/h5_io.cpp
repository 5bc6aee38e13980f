#include "h5_io.hpp"

#include <hdf5.h>

#include <stdexcept>

namespace surrogate::testing {
namespace {
struct File {
  hid_t id;
  explicit File(const std::string& path, bool create = false) {
    id = create ? H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT)
                : H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (id < 0) throw std::runtime_error("cannot open " + path);
  }
  ~File() { H5Fclose(id); }
};
}  // namespace

bool has_dataset(const std::string& file, const std::string& name) {
  File f(file);
  return H5Lexists(f.id, name.c_str(), H5P_DEFAULT) > 0;
}

Array read_array(const std::string& file, const std::string& name) {
  File f(file);
  const hid_t d = H5Dopen2(f.id, name.c_str(), H5P_DEFAULT);
  if (d < 0) throw std::runtime_error("no dataset " + name + " in " + file);
  const hid_t s = H5Dget_space(d);
  const int rank = H5Sget_simple_extent_ndims(s);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  H5Sget_simple_extent_dims(s, dims.data(), nullptr);
  Array a;
  std::int64_t n = 1;
  for (auto x : dims) {
    a.shape.push_back(static_cast<std::int64_t>(x));
    n *= static_cast<std::int64_t>(x);
  }
  a.values.resize(static_cast<std::size_t>(n));
  if (n > 0) H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.values.data());
  H5Sclose(s);
  H5Dclose(d);
  return a;
}

std::size_t stored_element_size(const std::string& file, const std::string& name) {
  File f(file);
  const hid_t d = H5Dopen2(f.id, name.c_str(), H5P_DEFAULT);
  if (d < 0) throw std::runtime_error("no dataset " + name + " in " + file);
  const hid_t t = H5Dget_type(d);
  const std::size_t size = H5Tget_size(t);
  H5Tclose(t);
  H5Dclose(d);
  return size;
}

double read_double_attribute(const std::string& file, const std::string& name) {
  File f(file);
  const hid_t a = H5Aopen(f.id, name.c_str(), H5P_DEFAULT);
  if (a < 0) throw std::runtime_error("no attribute " + name + " in " + file);
  double v = 0;
  H5Aread(a, H5T_NATIVE_DOUBLE, &v);
  H5Aclose(a);
  return v;
}

void write_file(const std::string& file, const std::vector<Dataset>& datasets) {
  File f(file, true);
  for (const Dataset& ds : datasets) {
    std::vector<hsize_t> dims(ds.shape.begin(), ds.shape.end());
    const hid_t s = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t type = ds.as_int64 ? H5T_STD_I64LE : ds.as_float64 ? H5T_IEEE_F64LE : H5T_IEEE_F32LE;
    const hid_t d = H5Dcreate2(f.id, ds.name.c_str(), type, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (ds.as_int64) {
      std::vector<std::int64_t> v(ds.values.begin(), ds.values.end());
      H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    } else {
      H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, ds.values.data());
    }
    H5Dclose(d);
    H5Sclose(s);
  }
}

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

}  // namespace surrogate::testing
