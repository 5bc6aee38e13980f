// Reading the Sequoia golden files (tests/data/sequoia/README.md) whole-dataset, in the types they hold.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace sequoia_test {

inline std::string data_path(const std::string& name) {
  return std::string(SURROGATE_TEST_DATA_DIR) + "/sequoia/sequoia_" + name + ".h5";
}

class H5 {
 public:
  explicit H5(const std::string& path) : id_(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)) {
    if (id_ < 0) throw std::runtime_error("cannot open " + path);
  }
  ~H5() { H5Fclose(id_); }
  H5(const H5&) = delete;
  H5& operator=(const H5&) = delete;
  bool exists(const std::string& path) const { return H5Lexists(id_, path.c_str(), H5P_DEFAULT) > 0; }
  template <typename T>
  std::vector<T> read(const std::string& path, hid_t type) const {
    const hid_t d = H5Dopen2(id_, path.c_str(), H5P_DEFAULT);
    if (d < 0) throw std::runtime_error("no dataset " + path);
    const hid_t s = H5Dget_space(d);
    std::vector<T> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
    const herr_t rc = v.empty() ? 0 : H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Sclose(s);
    H5Dclose(d);
    if (rc < 0) throw std::runtime_error("cannot read " + path);
    return v;
  }
  std::vector<float> f32(const std::string& p) const { return read<float>(p, H5T_NATIVE_FLOAT); }
  std::vector<double> f64(const std::string& p) const { return read<double>(p, H5T_NATIVE_DOUBLE); }
  std::vector<std::int64_t> i64(const std::string& p) const { return read<std::int64_t>(p, H5T_NATIVE_INT64); }
  std::vector<std::int32_t> i32(const std::string& p) const { return read<std::int32_t>(p, H5T_NATIVE_INT32); }
  std::vector<std::uint64_t> u64(const std::string& p) const { return read<std::uint64_t>(p, H5T_NATIVE_UINT64); }
  std::string string_attribute(const std::string& object, const std::string& name) const {
    const hid_t a = H5Aopen_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) throw std::runtime_error("no attribute " + object + "@" + name);
    const hid_t t = H5Aget_type(a);
    std::string out;
    if (H5Tis_variable_str(t) > 0) {
      char* s = nullptr;
      const hid_t mt = H5Tcopy(H5T_C_S1);
      H5Tset_size(mt, H5T_VARIABLE);
      H5Aread(a, mt, &s);
      out = s ? s : "";
      H5free_memory(s);
      H5Tclose(mt);
    } else {
      out.resize(H5Tget_size(t));
      H5Aread(a, t, out.data());
      out = out.c_str();
    }
    H5Tclose(t);
    H5Aclose(a);
    return out;
  }

 private:
  hid_t id_;
};

}  // namespace sequoia_test
