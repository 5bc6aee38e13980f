// Minimal read-only HDF5 access for the sphere tests: datasets as flat vectors, numeric and string
// attributes. Failures throw std::runtime_error naming the path.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace sphere_test {

class H5Reader {
 public:
  explicit H5Reader(const std::string& path) : id_(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)) {
    if (id_ < 0) throw std::runtime_error("cannot open " + path);
  }
  ~H5Reader() { H5Fclose(id_); }
  H5Reader(const H5Reader&) = delete;
  H5Reader& operator=(const H5Reader&) = delete;

  bool exists(const std::string& path) const { return H5Lexists(id_, path.c_str(), H5P_DEFAULT) > 0; }

  std::vector<std::string> children(const std::string& group) const {
    std::vector<std::string> names;
    const hid_t g = H5Gopen2(id_, group.c_str(), H5P_DEFAULT);
    if (g < 0) throw std::runtime_error("no group " + group);
    H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, nullptr, &H5Reader::collect, &names);
    H5Gclose(g);
    return names;
  }

  std::vector<double> doubles(const std::string& path, std::vector<std::size_t>* shape = nullptr) const {
    return read<double>(path, H5T_NATIVE_DOUBLE, shape);
  }
  std::vector<float> floats(const std::string& path, std::vector<std::size_t>* shape = nullptr) const {
    return read<float>(path, H5T_NATIVE_FLOAT, shape);
  }

  double number(const std::string& object, const std::string& name) const {
    const hid_t a = H5Aopen_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) throw std::runtime_error("no attribute " + object + "@" + name);
    double v = 0;
    H5Aread(a, H5T_NATIVE_DOUBLE, &v);
    H5Aclose(a);
    return v;
  }

  std::string text(const std::string& object, const std::string& name) const {
    const hid_t a = H5Aopen_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) throw std::runtime_error("no attribute " + object + "@" + name);
    const hid_t file_type = H5Aget_type(a);
    std::string out;
    if (H5Tis_variable_str(file_type) > 0) {
      const hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, H5T_VARIABLE);
      H5Tset_cset(t, H5Tget_cset(file_type));
      char* s = nullptr;
      H5Aread(a, t, &s);
      if (s) out = s;
      const hid_t space = H5Aget_space(a);
      H5Dvlen_reclaim(t, space, H5P_DEFAULT, &s);
      H5Sclose(space);
      H5Tclose(t);
    } else {
      std::vector<char> buf(H5Tget_size(file_type) + 1, '\0');
      H5Aread(a, file_type, buf.data());
      out = buf.data();
    }
    H5Tclose(file_type);
    H5Aclose(a);
    return out;
  }

 private:
  template <class T>
  std::vector<T> read(const std::string& path, hid_t memtype, std::vector<std::size_t>* shape) const {
    const hid_t d = H5Dopen2(id_, path.c_str(), H5P_DEFAULT);
    if (d < 0) throw std::runtime_error("no dataset " + path);
    const hid_t s = H5Dget_space(d);
    std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(s)));
    H5Sget_simple_extent_dims(s, dims.data(), nullptr);
    std::size_t n = 1;
    for (hsize_t v : dims) n *= static_cast<std::size_t>(v);
    std::vector<T> v(n);
    if (n > 0 && H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
      throw std::runtime_error("cannot read " + path);
    H5Sclose(s);
    H5Dclose(d);
    if (shape) shape->assign(dims.begin(), dims.end());
    return v;
  }

  static herr_t collect(hid_t, const char* name, const H5L_info_t*, void* data) {
    static_cast<std::vector<std::string>*>(data)->push_back(name);
    return 0;
  }

  hid_t id_;
};

}  // namespace sphere_test
