// Internal HDF5 helpers of the model file: the public ones (surrogate/hdf5.hpp: handles, checks, datasets)
// and the reads and writes only the model file needs (attribute maps, string datasets, group members).
// Not installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "surrogate/hdf5.hpp"

namespace surrogate::h5 {

std::vector<std::int64_t> dataset_shape(hid_t dataset);
inline constexpr double kMaxCompression = 4096.0;  // declared bytes per stored byte of a filtered dataset
inline constexpr std::size_t kMaxStringBytes = std::size_t{1} << 20;
/// Names of the links directly under a group, in name order.
std::vector<std::string> member_names(hid_t group);

/// Every attribute of an object (integers, floats, strings; scalars or 1-D arrays).
AttributeMap read_attributes(hid_t object, const std::string& object_name);

/// A 1-D dataset of strings (variable or fixed length).
std::vector<std::string> read_strings(hid_t location, const std::string& name, const std::string& what);
void write_strings(hid_t location, const std::string& name, const std::vector<std::string>& values);

}  // namespace surrogate::h5
