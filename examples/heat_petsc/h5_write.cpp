// Small HDF5 writers for the examples' training-data generators (h5_write.hpp).
#include "h5_write.hpp"

namespace example_h5 {

namespace {

PetscErrorCode Check(bool ok, const char* what) {
  PetscFunctionBeginUser;
  PetscCheck(ok, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "HDF5: writing %s failed", what);
  PetscFunctionReturn(0);
}

}  // namespace

PetscErrorCode Create(const char* path, File* file) {
  PetscFunctionBeginUser;
  file->file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  PetscCall(Check(file->file >= 0, path));
  PetscFunctionReturn(0);
}

PetscErrorCode Write(hid_t file, const char* name, hid_t type, hid_t mem_type, std::vector<hsize_t> dims, const void* data) {
  PetscFunctionBeginUser;
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t set = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Sclose(space);
  PetscCall(Check(set >= 0, name));
  const bool ok = !data || H5Dwrite(set, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0;
  H5Dclose(set);
  PetscCall(Check(ok, name));
  PetscFunctionReturn(0);
}

PetscErrorCode WriteRows(hid_t file, const char* name, hsize_t first, hsize_t count, hid_t mem_type, const void* data) {
  PetscFunctionBeginUser;
  const hid_t set = H5Dopen2(file, name, H5P_DEFAULT);
  PetscCall(Check(set >= 0, name));
  const hid_t space = H5Dget_space(set);
  hsize_t dims[4] = {0, 0, 0, 0}, start[4] = {first, 0, 0, 0};
  const int rank = H5Sget_simple_extent_dims(space, dims, nullptr);
  dims[0] = count;
  bool ok = rank >= 1 && rank <= 4 && H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, dims, nullptr) >= 0;
  if (ok) {
    const hid_t mem = H5Screate_simple(rank, dims, nullptr);
    ok = H5Dwrite(set, mem_type, mem, space, H5P_DEFAULT, data) >= 0;
    H5Sclose(mem);
  }
  H5Sclose(space);
  H5Dclose(set);
  PetscCall(Check(ok, name));
  PetscFunctionReturn(0);
}

PetscErrorCode Attribute(hid_t file, const char* name, double value) {
  PetscFunctionBeginUser;
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  const bool ok = attr >= 0 && H5Awrite(attr, H5T_NATIVE_DOUBLE, &value) >= 0;
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  PetscCall(Check(ok, name));
  PetscFunctionReturn(0);
}

PetscErrorCode StringAttribute(hid_t file, const char* name, const std::string& value) {
  PetscFunctionBeginUser;
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size() + 1);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  const bool ok = attr >= 0 && H5Awrite(attr, type, value.c_str()) >= 0;
  if (attr >= 0) H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  PetscCall(Check(ok, name));
  PetscFunctionReturn(0);
}

}  // namespace example_h5
