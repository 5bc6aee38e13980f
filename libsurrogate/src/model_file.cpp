#include "surrogate/model_file.hpp"

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <new>
#include <sstream>

#include "hdf5/h5.hpp"

namespace surrogate {

// ---------------------------------------------------------------------------------------------------
// AttributeMap

std::string AttributeMap::to_text(const AttributeValue& value) {
  std::ostringstream out;
  if (const auto* i = std::get_if<std::int64_t>(&value)) out << *i;
  if (const auto* d = std::get_if<double>(&value)) out << *d;
  if (const auto* s = std::get_if<std::string>(&value)) out << *s;
  auto list = [&out](const auto& values) {
    out << '[';
    for (std::size_t k = 0; k < values.size(); ++k) out << (k ? ", " : "") << values[k];
    out << ']';
  };
  if (const auto* iv = std::get_if<std::vector<std::int64_t>>(&value)) list(*iv);
  if (const auto* dv = std::get_if<std::vector<double>>(&value)) list(*dv);
  return out.str();
}

const AttributeValue& AttributeMap::at(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) throw Error(ErrorCode::format, "missing attribute '" + name + "' in " + group_);
  return it->second;
}

std::int64_t AttributeMap::get_int(const std::string& name) const {
  const AttributeValue& v = at(name);
  if (const auto* i = std::get_if<std::int64_t>(&v)) return *i;
  if (const auto* d = std::get_if<double>(&v); d && std::floor(*d) == *d && std::abs(*d) < 9.0e15)
    return static_cast<std::int64_t>(*d);
  throw Error(ErrorCode::format, "attribute '" + name + "' in " + group_ + " must be an integer, found '" +
                                     to_text(v) + "'");
}

double AttributeMap::get_double(const std::string& name) const {
  const AttributeValue& v = at(name);
  if (const auto* d = std::get_if<double>(&v)) {
    if (!std::isfinite(*d))
      throw Error(ErrorCode::format, "attribute '" + name + "' in " + group_ + " must be a finite number, found " +
                                         to_text(v));
    return *d;
  }
  if (const auto* i = std::get_if<std::int64_t>(&v)) return static_cast<double>(*i);
  throw Error(ErrorCode::format, "attribute '" + name + "' in " + group_ + " must be a number, found '" +
                                     to_text(v) + "'");
}

bool AttributeMap::get_bool(const std::string& name) const {
  const std::int64_t value = get_int(name);
  if (value != 0 && value != 1)
    throw Error(ErrorCode::format, "attribute '" + name + "' in " + group_ + " must be 0 or 1, found " +
                                       std::to_string(value));
  return value == 1;
}

std::string AttributeMap::get_string(const std::string& name) const {
  const AttributeValue& v = at(name);
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  throw Error(ErrorCode::format, "attribute '" + name + "' in " + group_ + " must be a string, found '" +
                                     to_text(v) + "'");
}

std::vector<std::int64_t> AttributeMap::get_int_list(const std::string& name) const {
  const AttributeValue& v = at(name);
  if (const auto* list = std::get_if<std::vector<std::int64_t>>(&v)) return *list;
  if (const auto* one = std::get_if<std::int64_t>(&v)) return {*one};
  throw Error(ErrorCode::format, "attribute '" + name + "' in " + group_ + " must be a list of integers, found '" +
                                     to_text(v) + "'");
}

std::int64_t AttributeMap::get_size(const std::string& name, std::int64_t min, std::int64_t max) const {
  const std::int64_t v = get_int(name);
  if (v < min || v > max)
    throw Error(ErrorCode::format, "attribute '" + name + "' in " + group_ + " is " + std::to_string(v) +
                                       ", expected an integer from " + std::to_string(min) + " to " +
                                       std::to_string(max));
  return v;
}

std::int64_t AttributeMap::get_size_or(const std::string& name, std::int64_t fallback, std::int64_t min,
                                       std::int64_t max) const {
  return has(name) ? get_size(name, min, max) : fallback;
}

std::vector<std::int64_t> AttributeMap::get_size_list(const std::string& name, std::int64_t min,
                                                      std::int64_t max) const {
  const std::vector<std::int64_t> list = get_int_list(name);
  if (static_cast<std::int64_t>(list.size()) > kMaxConfigSize)
    throw Error(ErrorCode::format, "attribute '" + name + "' in " + group_ + " has " + std::to_string(list.size()) +
                                       " entries");
  for (std::size_t k = 0; k < list.size(); ++k)
    if (list[k] < min || list[k] > max)
      throw Error(ErrorCode::format, "attribute '" + name + "' in " + group_ + ": entry " + std::to_string(k) +
                                         " is " + std::to_string(list[k]) + ", expected an integer from " +
                                         std::to_string(min) + " to " + std::to_string(max));
  return list;
}

double AttributeMap::get_positive(const std::string& name) const {
  const double v = get_double(name);
  if (!(v > 0.0))
    throw Error(ErrorCode::format, "attribute '" + name + "' in " + group_ + " is " + to_text(v) +
                                       ", expected a positive finite number");
  return v;
}

double AttributeMap::get_positive(const std::string& name, double fallback) const {
  return has(name) ? get_positive(name) : fallback;
}

std::int64_t AttributeMap::get_int(const std::string& name, std::int64_t fallback) const {
  return has(name) ? get_int(name) : fallback;
}

double AttributeMap::get_double(const std::string& name, double fallback) const {
  return has(name) ? get_double(name) : fallback;
}

// ---------------------------------------------------------------------------------------------------
// Tensor32

std::int64_t Tensor32::numel() const {
  std::int64_t n = 1;
  for (auto d : shape) {
    if (d < 0 || (d > 0 && n > INT64_MAX / d))
      throw Error(ErrorCode::format, "tensor shape " + shape_text() + " has no valid element count");
    n *= d;
  }
  return n;
}

std::string Tensor32::shape_text() const {
  std::string text = "(";
  for (std::size_t k = 0; k < shape.size(); ++k) text += (k ? ", " : "") + std::to_string(shape[k]);
  if (shape.size() == 1) text += ",";
  return text + ")";
}

namespace {

std::string shape_text(const std::vector<std::int64_t>& shape) { return Tensor32{shape, {}}.shape_text(); }

// ---------------------------------------------------------------------------------------------------
// Reading

/// A group of tensors; `integers_allowed` for /tables, whose index tables are integers (model-format.md, /tables).
std::map<std::string, Tensor32> read_float_group(hid_t file, const std::string& group_name, const std::string& path,
                                                 bool integers_allowed) {
  std::map<std::string, Tensor32> result;
  h5::Handle group = h5::group(
      h5::check(H5Gopen2(file, group_name.c_str(), H5P_DEFAULT), ErrorCode::format,
                "'" + path + "': cannot open group /" + group_name));
  for (const std::string& name : h5::member_names(group)) {
    const std::string what = "'" + path + "': dataset /" + group_name + "/" + name;
    h5::Handle dset = h5::dataset(H5Dopen2(group, name.c_str(), H5P_DEFAULT));
    if (!dset.valid()) throw Error(ErrorCode::format, what + " is not a dataset");
    h5::Handle type = h5::datatype(H5Dget_type(dset));
    const H5T_class_t cls = H5Tget_class(type);
    const std::size_t bytes = H5Tget_size(type);
    // 32-bit floats as the format says; 64-bit floats are converted (model-format.md §2); anything else
    // (integers, 16-bit or extended floats) is refused rather than converted silently.
    const bool accepted = cls == H5T_FLOAT ? bytes == 4 || bytes == 8 : cls == H5T_INTEGER && integers_allowed;
    if (!accepted)
      throw Error(ErrorCode::format, what + " must hold 32-bit (or 64-bit) floating-point numbers, found " +
                                         (cls == H5T_INTEGER ? std::to_string(8 * bytes) + "-bit integers"
                                          : cls == H5T_FLOAT ? std::to_string(8 * bytes) + "-bit floats"
                                                             : std::string("another type")));
    Tensor32 tensor;
    tensor.shape = h5::checked_dataset_shape(dset, kMaxTensorElements, what);
    tensor.values.resize(static_cast<std::size_t>(tensor.numel()));
    if (!tensor.values.empty()) h5::read_dataset(dset, H5T_NATIVE_FLOAT, tensor.values.data(), what);
    result.emplace(name, std::move(tensor));
  }
  return result;
}

std::vector<double> read_vector(hid_t group, const std::string& name, const std::string& what) {
  h5::Handle dset = h5::dataset(h5::check(H5Dopen2(group, name.c_str(), H5P_DEFAULT), ErrorCode::format,
                                          what + ": cannot open"));
  const auto shape = h5::checked_dataset_shape(dset, kMaxConfigSize, what);
  if (shape.size() != 1) throw Error(ErrorCode::format, what + " must be one-dimensional");
  std::vector<double> values(static_cast<std::size_t>(shape[0]));
  if (!values.empty()) h5::read_dataset(dset, H5T_NATIVE_DOUBLE, values.data(), what);
  return values;
}

Normalization read_normalization(hid_t file, const std::string& path) {
  Normalization norm;
  if (!h5::link_exists(file, "normalization")) return norm;
  h5::Handle group = h5::group(h5::check(H5Gopen2(file, "normalization", H5P_DEFAULT), ErrorCode::format,
                                         "'" + path + "': cannot open /normalization"));
  auto member = [&](const char* name, std::vector<double>& out) {
    if (h5::link_exists(group, name)) out = read_vector(group, name, "'" + path + "': /normalization/" + name);
  };
  member("input_mean", norm.input_mean);
  member("input_std", norm.input_std);
  member("output_mean", norm.output_mean);
  member("output_std", norm.output_std);
  auto pair = [&](const std::vector<double>& mean, const std::vector<double>& stdev, const char* what) {
    if (mean.size() != stdev.size())
      throw Error(ErrorCode::format, "'" + path + "': /normalization/" + what + "_mean and _std must both be " +
                                         "present and of the same length");
    for (std::size_t c = 0; c < stdev.size(); ++c)
      if (!std::isfinite(mean[c]) || !std::isfinite(stdev[c]) || stdev[c] == 0.0)
        throw Error(ErrorCode::format, "'" + path + "': /normalization/" + what + " channel " + std::to_string(c) +
                                           ": mean and std must be finite and std non-zero");
  };
  pair(norm.input_mean, norm.input_std, "input");
  pair(norm.output_mean, norm.output_std, "output");
  return norm;
}

Fields read_fields(hid_t file, const std::string& path) {
  Fields fields;
  if (!h5::link_exists(file, "fields")) return fields;
  h5::Handle group = h5::group(h5::check(H5Gopen2(file, "fields", H5P_DEFAULT), ErrorCode::format,
                                         "'" + path + "': cannot open /fields"));
  auto member = [&](const char* name, std::vector<std::string>& out) {
    if (h5::link_exists(group, name)) out = h5::read_strings(group, name, "'" + path + "': /fields/" + name);
  };
  member("input_names", fields.input_names);
  member("input_units", fields.input_units);
  member("output_names", fields.output_names);
  member("output_units", fields.output_units);
  return fields;
}

}  // namespace

namespace {
ModelFile read_unguarded(const std::string& path);
}  // namespace

ModelFile ModelFile::read(const std::string& path) {
  try {
    return read_unguarded(path);
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::out_of_memory, "'" + path + "': not enough memory to hold the model file's contents");
  } catch (const std::length_error&) {
    throw Error(ErrorCode::out_of_memory, "'" + path + "': the model file declares sizes too large to hold in memory");
  }
}

namespace {
ModelFile read_unguarded(const std::string& path) {
  h5::QuietErrors quiet;
  h5::check_regular_file(path, "model file");
  if (H5Fis_hdf5(path.c_str()) <= 0)
    throw Error(ErrorCode::io, "model file '" + path + "' is not an HDF5 file (or it is truncated or unreadable)");
  h5::Handle file = h5::file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw Error(ErrorCode::io, "cannot open model file '" + path + "' (truncated or corrupt HDF5 file?)");
  h5::refuse_external_links(file, path);

  ModelFile model;
  model.path = path;
  model.root = h5::read_attributes(file, "the root of '" + path + "'");
  if (!model.root.has("format") || model.root.get_string("format") != kModelFormatName)
    throw Error(ErrorCode::format, "'" + path + "' is not a surrogate model file (root attribute format = '" +
                                       std::string(kModelFormatName) + "' is missing)");
  model.format_version = model.root.get_int("format_version");
  if (model.format_version != kModelFormatVersion)
    throw Error(ErrorCode::format, "'" + path + "' has format_version " + std::to_string(model.format_version) +
                                       "; this library reads format_version " + std::to_string(kModelFormatVersion));
  model.architecture = model.root.get_string("architecture");
  model.source = model.root.get_string("source");

  if (!h5::link_exists(file, "config")) throw Error(ErrorCode::format, "'" + path + "' has no /config group");
  {
    h5::Handle config = h5::group(h5::check(H5Gopen2(file, "config", H5P_DEFAULT), ErrorCode::format,
                                            "'" + path + "': /config is not a group"));
    model.config = h5::read_attributes(config, "/config of '" + path + "'");
  }
  if (!h5::link_exists(file, "weights")) throw Error(ErrorCode::format, "'" + path + "' has no /weights group");
  model.weights = read_float_group(file, "weights", path, false);
  if (h5::link_exists(file, "tables")) model.tables = read_float_group(file, "tables", path, true);
  model.normalization = read_normalization(file, path);
  model.fields = read_fields(file, path);
  return model;
}
}  // namespace

ModelFile ModelFile::read(const Comm& comm, const std::string& path) {
  std::vector<std::uint8_t> bytes;
  Status status;
  if (comm.rank() == 0) {
    try {
      bytes = read(path).serialize();
    } catch (...) {
      status = Status::from_current_exception();
    }
  }
  comm.agree_or_throw(status);
  if (comm.size() == 1) return deserialize(bytes);
  std::uint64_t size = bytes.size();
  comm.broadcast(&size, sizeof size, 0);
  bytes.resize(size);
  comm.broadcast(bytes.data(), bytes.size(), 0);
  ModelFile model = deserialize(bytes);
  model.path = path;
  return model;
}

// ---------------------------------------------------------------------------------------------------
// Writing

void ModelFile::write(const std::string& output_path) const {
  h5::QuietErrors quiet;
  h5::Handle file = h5::file(h5::check(H5Fcreate(output_path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                                       ErrorCode::io, "cannot create '" + output_path + "'"));
  AttributeMap attributes = root;
  attributes.set("format", std::string(kModelFormatName));
  attributes.set("format_version", format_version);
  attributes.set("architecture", architecture);
  attributes.set("source", source);
  for (const auto& [name, value] : attributes.values()) h5::write_attribute(file, name, value);
  auto make_group = [&](const char* name) {
    return h5::group(h5::check(H5Gcreate2(file, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), ErrorCode::io,
                               "cannot create group /" + std::string(name) + " in '" + output_path + "'"));
  };
  {
    h5::Handle group = make_group("config");
    for (const auto& [name, value] : config.values()) h5::write_attribute(group, name, value);
  }
  auto write_tensors = [&](const char* name, const std::map<std::string, Tensor32>& tensors) {
    h5::Handle group = make_group(name);
    for (const auto& [key, tensor] : tensors)
      h5::write_dataset(group, key, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, tensor.shape, tensor.values.data());
  };
  write_tensors("weights", weights);
  if (!tables.empty()) write_tensors("tables", tables);
  if (normalization.has_input() || normalization.has_output()) {
    h5::Handle group = make_group("normalization");
    auto vec = [&](const char* name, const std::vector<double>& values) {
      if (!values.empty())
        h5::write_dataset(group, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE,
                          {static_cast<std::int64_t>(values.size())}, values.data());
    };
    vec("input_mean", normalization.input_mean);
    vec("input_std", normalization.input_std);
    vec("output_mean", normalization.output_mean);
    vec("output_std", normalization.output_std);
  }
  if (!fields.input_names.empty() || !fields.output_names.empty() || !fields.input_units.empty() ||
      !fields.output_units.empty()) {
    h5::Handle group = make_group("fields");
    auto strings = [&](const char* name, const std::vector<std::string>& values) {
      if (!values.empty()) h5::write_strings(group, name, values);
    };
    strings("input_names", fields.input_names);
    strings("input_units", fields.input_units);
    strings("output_names", fields.output_names);
    strings("output_units", fields.output_units);
  }
}

// ---------------------------------------------------------------------------------------------------
// Validation

const Tensor32& ModelFile::weight(const std::string& key) const {
  const auto it = weights.find(key);
  if (it == weights.end()) throw Error(ErrorCode::weights, "'" + path + "': missing weight tensor '" + key + "'");
  return it->second;
}

void ModelFile::check_repeat_count(const std::string& attribute, std::int64_t count, std::int64_t tensors_each) const {
  const auto present = static_cast<std::int64_t>(weights.size());
  if (count < 0 || tensors_each < 0 || (tensors_each > 0 && count > present / tensors_each))
    throw Error(ErrorCode::weights, "'" + path + "': /config " + attribute + " = " + std::to_string(count) +
                                        " asks for at least " + std::to_string(tensors_each) +
                                        " tensor(s) each, but /weights holds only " + std::to_string(present) +
                                        " tensors");
}

void ModelFile::check_weights(const ExpectedShapes& expected) const {
  std::vector<std::string> missing, unexpected, misshaped, non_finite;
  for (const auto& [key, shape] : expected) {
    const auto it = weights.find(key);
    if (it == weights.end()) missing.push_back(key);
    else if (it->second.shape != shape)
      misshaped.push_back(key + " " + it->second.shape_text() + ", expected " + shape_text(shape));
  }
  for (const auto& [key, tensor] : weights) {
    if (!expected.count(key)) unexpected.push_back(key);
    else if (std::any_of(tensor.values.begin(), tensor.values.end(), [](float v) { return !std::isfinite(v); }))
      non_finite.push_back(key);
  }
  if (missing.empty() && unexpected.empty() && misshaped.empty() && non_finite.empty()) return;
  std::ostringstream out;
  out << "'" << path << "': the weights do not match the " << architecture << " configuration in /config";
  auto section = [&out](const char* title, const std::vector<std::string>& items) {
    if (items.empty()) return;
    out << "\n  " << title << " (" << items.size() << "):";
    for (const auto& item : items) out << "\n    " << item;
  };
  section("missing tensors", missing);
  section("unexpected tensors", unexpected);
  section("mis-shaped tensors", misshaped);
  section("tensors with NaN or Inf values", non_finite);
  throw Error(ErrorCode::weights, out.str());
}

}  // namespace surrogate
