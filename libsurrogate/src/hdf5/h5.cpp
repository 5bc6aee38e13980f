#include "h5.hpp"

#include <cstring>
#include <memory>

namespace surrogate::h5 {

hid_t check(hid_t id, ErrorCode code, const std::string& what) {
  if (id < 0) throw Error(code, what);
  return id;
}

void check_status(herr_t status, ErrorCode code, const std::string& what) {
  if (status < 0) throw Error(code, what);
}

bool link_exists(hid_t location, const std::string& name) {
  return H5Lexists(location, name.c_str(), H5P_DEFAULT) > 0;
}

std::vector<std::int64_t> dataset_shape(hid_t dataset) {
  Handle space = dataspace(H5Dget_space(dataset));
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) throw Error(ErrorCode::format, "cannot read a dataset's shape");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  return {dims.begin(), dims.end()};
}

namespace {
herr_t collect_name(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<std::vector<std::string>*>(data)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> member_names(hid_t group_id) {
  std::vector<std::string> names;
  hsize_t index = 0;
  H5Literate(group_id, H5_INDEX_NAME, H5_ITER_INC, &index, collect_name, &names);
  return names;
}

namespace {

std::string read_string_attribute(hid_t attr, hid_t type, const std::string& what) {
  Handle space = dataspace(H5Aget_space(attr));
  if (H5Sget_simple_extent_npoints(space) != 1) throw Error(ErrorCode::format, what + ": expected one string");
  if (H5Tis_variable_str(type) > 0) {
    Handle mem = datatype(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    char* text = nullptr;
    check_status(H5Aread(attr, mem, &text), ErrorCode::format, what + ": cannot read string");
    std::string result = text ? text : "";
    H5free_memory(text);
    return result;
  }
  const std::size_t size = H5Tget_size(type);
  std::vector<char> buffer(size + 1, '\0');
  Handle mem = datatype(H5Tcopy(H5T_C_S1));
  H5Tset_size(mem, size);
  check_status(H5Aread(attr, mem, buffer.data()), ErrorCode::format, what + ": cannot read string");
  return std::string(buffer.data(), strnlen(buffer.data(), size));
}

struct AttributeVisit {
  AttributeMap* map;
  std::string object_name;
  std::string error;
};

herr_t visit_attribute(hid_t object, const char* name, const H5A_info_t*, void* data) {
  auto* visit = static_cast<AttributeVisit*>(data);
  const std::string what = "attribute '" + std::string(name) + "' of " + visit->object_name;
  try {
    Handle attr = attribute(check(H5Aopen(object, name, H5P_DEFAULT), ErrorCode::format, what + ": cannot open"));
    Handle type = datatype(H5Aget_type(attr));
    Handle space = dataspace(H5Aget_space(attr));
    const hssize_t count = H5Sget_simple_extent_npoints(space);
    const int rank = H5Sget_simple_extent_ndims(space);
    switch (H5Tget_class(type)) {
      case H5T_INTEGER: {
        std::vector<std::int64_t> values(static_cast<std::size_t>(count));
        check_status(H5Aread(attr, H5T_NATIVE_INT64, values.data()), ErrorCode::format, what + ": cannot read");
        if (rank == 0 && count == 1) visit->map->set(name, values[0]);
        else visit->map->set(name, values);
        break;
      }
      case H5T_FLOAT: {
        std::vector<double> values(static_cast<std::size_t>(count));
        check_status(H5Aread(attr, H5T_NATIVE_DOUBLE, values.data()), ErrorCode::format, what + ": cannot read");
        if (rank == 0 && count == 1) visit->map->set(name, values[0]);
        else visit->map->set(name, values);
        break;
      }
      case H5T_STRING: visit->map->set(name, read_string_attribute(attr, type, what)); break;
      case H5T_ENUM: {  // h5py writes numpy booleans as an enum over int8
        std::int64_t value = 0;
        check_status(H5Aread(attr, H5T_NATIVE_INT64, &value), ErrorCode::format, what + ": cannot read");
        visit->map->set(name, value);
        break;
      }
      default: throw Error(ErrorCode::format, what + ": unsupported attribute type");
    }
  } catch (const Error& e) {
    visit->error = e.what();
    return -1;
  }
  return 0;
}

}  // namespace

AttributeMap read_attributes(hid_t object, const std::string& object_name) {
  AttributeMap map(object_name);
  AttributeVisit visit{&map, object_name, {}};
  hsize_t index = 0;
  const herr_t status = H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &index, visit_attribute, &visit);
  if (!visit.error.empty()) throw Error(ErrorCode::format, visit.error);
  if (status < 0) throw Error(ErrorCode::format, "cannot read the attributes of " + object_name);
  return map;
}

void write_attribute(hid_t object, const std::string& name, const AttributeValue& value) {
  const std::string what = "cannot write attribute '" + name + "'";
  if (const auto* text = std::get_if<std::string>(&value)) {
    Handle type = datatype(H5Tcopy(H5T_C_S1));
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    Handle space = dataspace(H5Screate(H5S_SCALAR));
    Handle attr = attribute(check(H5Acreate2(object, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                                  ErrorCode::io, what));
    const char* pointer = text->c_str();
    check_status(H5Awrite(attr, type, &pointer), ErrorCode::io, what);
    return;
  }
  auto write_numbers = [&](hid_t file_type, hid_t mem_type, const void* data, std::size_t count, bool scalar) {
    const hsize_t dims[1] = {count};
    Handle space = dataspace(scalar ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, dims, nullptr));
    Handle attr = attribute(check(H5Acreate2(object, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT),
                                  ErrorCode::io, what));
    check_status(H5Awrite(attr, mem_type, data), ErrorCode::io, what);
  };
  if (const auto* i = std::get_if<std::int64_t>(&value)) write_numbers(H5T_STD_I64LE, H5T_NATIVE_INT64, i, 1, true);
  if (const auto* d = std::get_if<double>(&value)) write_numbers(H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, d, 1, true);
  if (const auto* iv = std::get_if<std::vector<std::int64_t>>(&value))
    write_numbers(H5T_STD_I64LE, H5T_NATIVE_INT64, iv->data(), iv->size(), false);
  if (const auto* dv = std::get_if<std::vector<double>>(&value))
    write_numbers(H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, dv->data(), dv->size(), false);
}

std::vector<std::string> read_strings(hid_t location, const std::string& name, const std::string& what) {
  Handle dset = dataset(check(H5Dopen2(location, name.c_str(), H5P_DEFAULT), ErrorCode::format, what + ": cannot open"));
  Handle type = datatype(H5Dget_type(dset));
  if (H5Tget_class(type) != H5T_STRING) throw Error(ErrorCode::format, what + ": expected strings");
  const auto shape = dataset_shape(dset);
  if (shape.size() > 1) throw Error(ErrorCode::format, what + ": expected a 1-D list of strings");
  const std::size_t count = shape.empty() ? 1 : static_cast<std::size_t>(shape[0]);
  std::vector<std::string> result;
  if (H5Tis_variable_str(type) > 0) {
    Handle mem = datatype(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem, H5T_VARIABLE);
    H5Tset_cset(mem, H5Tget_cset(type));
    std::vector<char*> pointers(count, nullptr);
    check_status(H5Dread(dset, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()), ErrorCode::format,
                 what + ": cannot read");
    for (char* p : pointers) {
      result.emplace_back(p ? p : "");
      H5free_memory(p);
    }
  } else {
    const std::size_t size = H5Tget_size(type);
    std::vector<char> buffer(count * size, '\0');
    Handle mem = datatype(H5Tcopy(H5T_C_S1));
    H5Tset_size(mem, size);
    check_status(H5Dread(dset, mem, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()), ErrorCode::format,
                 what + ": cannot read");
    for (std::size_t i = 0; i < count; ++i) result.emplace_back(buffer.data() + i * size, strnlen(buffer.data() + i * size, size));
  }
  return result;
}

void write_strings(hid_t location, const std::string& name, const std::vector<std::string>& values) {
  Handle type = datatype(H5Tcopy(H5T_C_S1));
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  const hsize_t dims[1] = {values.size()};
  Handle space = dataspace(H5Screate_simple(1, dims, nullptr));
  Handle dset = dataset(check(H5Dcreate2(location, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                              ErrorCode::io, "cannot create dataset '" + name + "'"));
  std::vector<const char*> pointers;
  for (const auto& v : values) pointers.push_back(v.c_str());
  check_status(H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, pointers.data()), ErrorCode::io,
               "cannot write dataset '" + name + "'");
}

void read_dataset(hid_t dset, hid_t mem_type, void* out, const std::string& what) {
  check_status(H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out), ErrorCode::io,
               what + ": cannot read the data (truncated or corrupt file?)");
}

void write_dataset(hid_t location, const std::string& name, hid_t file_type, hid_t mem_type,
                   const std::vector<std::int64_t>& shape, const void* data) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  Handle space = dataspace(dims.empty() ? H5Screate(H5S_SCALAR)
                                        : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  Handle dset = dataset(check(H5Dcreate2(location, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                              ErrorCode::io, "cannot create dataset '" + name + "'"));
  check_status(H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), ErrorCode::io,
               "cannot write dataset '" + name + "'");
}

}  // namespace surrogate::h5
