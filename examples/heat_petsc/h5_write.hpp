// Small HDF5 writers for the examples' training-data generators (heat_generate, nonlinear_generate): one
// file written by rank 0, datasets created whole and filled row by row along their leading dimension.
#pragma once

#include <hdf5.h>
#include <petscsys.h>

#include <string>
#include <vector>

namespace example_h5 {

/// An HDF5 file handle closed on scope exit.
struct File {
  hid_t file = -1;
  File() = default;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File() {
    if (file >= 0) H5Fclose(file);
  }
};

/// Creates (truncating) `path`; a PETSc error naming the file when it cannot.
PetscErrorCode Create(const char* path, File* file);
/// Creates dataset `name` of file type `type` and shape `dims`; writes `data` (of `mem_type`) unless null.
PetscErrorCode Write(hid_t file, const char* name, hid_t type, hid_t mem_type, std::vector<hsize_t> dims, const void* data);
/// Writes rows [first, first + count) along the leading dimension of an existing dataset.
PetscErrorCode WriteRows(hid_t file, const char* name, hsize_t first, hsize_t count, hid_t mem_type, const void* data);
/// Scalar attributes of the file's root group.
PetscErrorCode Attribute(hid_t file, const char* name, double value);
PetscErrorCode StringAttribute(hid_t file, const char* name, const std::string& value);

}  // namespace example_h5
