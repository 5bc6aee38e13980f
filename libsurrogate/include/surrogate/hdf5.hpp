// RAII handles and checked I/O over the HDF5 C API: what the library's own HDF5 files beside the model file
// use (the coupling layer's parallel point files and VTKHDF output, `surrogate selftest`), for code that
// reads or writes HDF5 files next to the library with the same checks and messages. Every error is a
// surrogate::Error naming the file and the object. Includes <hdf5.h>: a target that includes this header
// links HDF5::HDF5 itself (find_package(surrogate) finds HDF5); the library's other headers need no HDF5.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

#include "surrogate/error.hpp"
#include "surrogate/model_file.hpp"

namespace surrogate::h5 {

/// Owns an HDF5 identifier and closes it with the right H5*close function.
class Handle {
 public:
  using Closer = herr_t (*)(hid_t);
  Handle() = default;
  Handle(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle(Handle&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_;
      closer_ = o.closer_;
      o.id_ = H5I_INVALID_HID;
    }
    return *this;
  }
  ~Handle() { reset(); }
  void reset() {
    if (id_ >= 0 && closer_) closer_(id_);
    id_ = H5I_INVALID_HID;
  }
  /// Gives up ownership (for a close whose result matters): the caller closes the id.
  hid_t release() {
    const hid_t id = id_;
    id_ = H5I_INVALID_HID;
    return id;
  }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  operator hid_t() const { return id_; }

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

inline Handle file(hid_t id) { return {id, H5Fclose}; }
inline Handle group(hid_t id) { return {id, H5Gclose}; }
inline Handle dataset(hid_t id) { return {id, H5Dclose}; }
inline Handle dataspace(hid_t id) { return {id, H5Sclose}; }
inline Handle datatype(hid_t id) { return {id, H5Tclose}; }
inline Handle attribute(hid_t id) { return {id, H5Aclose}; }
inline Handle plist(hid_t id) { return {id, H5Pclose}; }

/// Turns off HDF5's automatic error stack printing for the lifetime of the object (we report errors
/// ourselves, with the file and the object named).
class QuietErrors {
 public:
  QuietErrors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

/// Throws Error(code, "<what>") when id < 0.
hid_t check(hid_t id, ErrorCode code, const std::string& what);
void check_status(herr_t status, ErrorCode code, const std::string& what);

bool link_exists(hid_t location, const std::string& name);
/// Throws Error(io) naming `what` ("model file", "input file") unless `path` is a regular file (through
/// links): a FIFO would block the open for ever, a device is not data.
void check_regular_file(const std::string& path, const std::string& what);
/// Throws Error(format) naming the first link of `file` that points into another file (external or
/// user-defined): the data of a model or point file must be in the file itself.
void refuse_external_links(hid_t file, const std::string& path);
inline constexpr int kMaxDatasetRank = 8;
/// The shape of a dataset, checked before any of it is read: at most kMaxDatasetRank dimensions, at most
/// max_elements elements (no overflow), and backed by the bytes the file stores. Errors name `what`.
std::vector<std::int64_t> checked_dataset_shape(hid_t dataset, std::int64_t max_elements, const std::string& what);

/// A new attribute of `object` (integers, floats, a string; scalars or 1-D arrays): Error(io) when it
/// cannot be created (one of that name exists) or written.
void write_attribute(hid_t object, const std::string& name, const AttributeValue& value);

/// A whole dataset converted to the memory type (H5T_NATIVE_FLOAT, _DOUBLE, _INT64); Error(io) naming `what`.
void read_dataset(hid_t dataset, hid_t mem_type, void* out, const std::string& what);
/// A new dataset `name` under `location` of the given shape (empty: a scalar), written whole from `data`.
void write_dataset(hid_t location, const std::string& name, hid_t file_type, hid_t mem_type,
                   const std::vector<std::int64_t>& shape, const void* data);

}  // namespace surrogate::h5
