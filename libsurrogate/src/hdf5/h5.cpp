#include "h5.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <system_error>

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

std::vector<std::int64_t> checked_dataset_shape(hid_t dset, std::int64_t max_elements, const std::string& what) {
  Handle space = dataspace(check(H5Dget_space(dset), ErrorCode::format, what + ": cannot read its shape"));
  const int rank = H5Sget_simple_extent_ndims(space);
  if (rank < 0) throw Error(ErrorCode::format, what + ": cannot read its shape");
  if (rank > kMaxDatasetRank)
    throw Error(ErrorCode::format, what + ": has " + std::to_string(rank) + " dimensions; at most " +
                                       std::to_string(kMaxDatasetRank) + " are accepted");
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  if (rank > 0 && H5Sget_simple_extent_dims(space, dims.data(), nullptr) < 0)
    throw Error(ErrorCode::format, what + ": cannot read its shape");
  std::vector<std::int64_t> shape;
  std::string text = "(";
  for (std::size_t k = 0; k < dims.size(); ++k) text += (k ? ", " : "") + std::to_string(dims[k]);
  text += dims.size() == 1 ? ",)" : ")";
  std::int64_t elements = 1;
  for (const hsize_t d : dims) {
    if (d > static_cast<hsize_t>(max_elements) ||
        (d != 0 && elements > max_elements / static_cast<std::int64_t>(d)))
      throw Error(ErrorCode::format, what + ": declared shape " + text + " exceeds the accepted maximum of " +
                                         std::to_string(max_elements) + " elements");
    elements *= static_cast<std::int64_t>(d);
    shape.push_back(static_cast<std::int64_t>(d));
  }
  if (elements == 0) return shape;
  // The bytes the file holds must back the declared shape: an unwritten or truncated dataset is refused
  // before a buffer of its declared size is allocated (compressed chunks may be up to kMaxCompression
  // times smaller than the data).
  Handle dcpl = plist(check(H5Dget_create_plist(dset), ErrorCode::format, what + ": cannot read its layout"));
  if (H5Pget_external_count(dcpl) > 0) throw Error(ErrorCode::format, what + ": data in external files is not accepted");
  if (H5Pget_layout(dcpl) == H5D_VIRTUAL)
    throw Error(ErrorCode::format, what + ": a virtual dataset (data mapped from other files) is not accepted");
  Handle type = datatype(check(H5Dget_type(dset), ErrorCode::format, what + ": cannot read its type"));
  const auto declared = static_cast<double>(elements) * static_cast<double>(H5Tget_size(type));
  const auto stored = static_cast<double>(H5Dget_storage_size(dset));
  const bool filtered = H5Pget_nfilters(dcpl) > 0;
  if (stored <= 0.0 || (!filtered && stored < declared) || (filtered && declared > stored * kMaxCompression))
    throw Error(ErrorCode::format, what + ": declared shape " + text + " (" + std::to_string(elements) +
                                       " elements) is not backed by the data in the file (" +
                                       std::to_string(static_cast<long long>(stored)) +
                                       " bytes stored; truncated, unwritten or corrupt dataset)");
  return shape;
}

void check_regular_file(const std::string& path, const std::string& what) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int error = errno;
    throw Error(ErrorCode::io, what + " '" + path + "' " +
                                   (error == ENOENT ? std::string("does not exist") : "cannot be read: " + std::generic_category().message(error)));
  }
  if (S_ISREG(info.st_mode)) return;
  const char* kind = S_ISDIR(info.st_mode)    ? "a directory"
                     : S_ISFIFO(info.st_mode) ? "a FIFO"
                     : S_ISCHR(info.st_mode)  ? "a character device"
                     : S_ISBLK(info.st_mode)  ? "a block device"
                     : S_ISSOCK(info.st_mode) ? "a socket"
                                              : "not a regular file";
  throw Error(ErrorCode::io, what + " '" + path + "' is " + kind + ": only regular files are read");
}

namespace {
struct LinkWalk {
  std::string first_external;  // "/name -> file:/object" of the first link that leaves the file
};

herr_t find_external_link(hid_t, const char* name, const H5L_info_t* info, void* data) {
  if (info->type == H5L_TYPE_HARD || info->type == H5L_TYPE_SOFT) return 0;
  auto* walk = static_cast<LinkWalk*>(data);
  walk->first_external = std::string("/") + name;
  return 1;  // stop: one is enough to refuse the file
}
}  // namespace

void refuse_external_links(hid_t file, const std::string& path) {
  LinkWalk walk;
  // H5Lvisit follows hard links only: it never opens another file to walk an external link.
  if (H5Lvisit(file, H5_INDEX_NAME, H5_ITER_INC, find_external_link, &walk) < 0)
    throw Error(ErrorCode::format, "'" + path + "': cannot list its objects (corrupt file?)");
  if (!walk.first_external.empty())
    throw Error(ErrorCode::format, "'" + path + "': " + walk.first_external +
                                       " is an external link (to an object of another file): links out of the file are "
                                       "not accepted; copy the data into the file (h5copy, or h5py's copy)");
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
  if (size == 0 || size > kMaxStringBytes)
    throw Error(ErrorCode::format, what + ": a fixed-length string of " + std::to_string(size) + " bytes is not accepted");
  std::vector<char> buffer(size + 1, '\0');
  Handle mem = datatype(H5Tcopy(H5T_C_S1));
  H5Tset_size(mem, size);
  check_status(H5Aread(attr, mem, buffer.data()), ErrorCode::format, what + ": cannot read string");
  return std::string(buffer.data(), strnlen(buffer.data(), size));
}

// Attributes are read by one typed path: the class, the rank (scalar or 1-D) and the size are checked
// before anything is read, and the buffer always holds every element the file declares.
constexpr hssize_t kMaxAttributeValues = hssize_t{1} << 16;

std::string class_text(H5T_class_t cls) {
  switch (cls) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "floating-point";
    case H5T_STRING: return "string";
    case H5T_ENUM: return "enum";
    case H5T_COMPOUND: return "compound";
    case H5T_ARRAY: return "array";
    case H5T_VLEN: return "variable-length";
    case H5T_REFERENCE: return "reference";
    case H5T_OPAQUE: return "opaque";
    case H5T_BITFIELD: return "bitfield";
    case H5T_TIME: return "time";
    default: return "unknown";
  }
}

/// Integer values of an integer or enum attribute, exactly (unsigned values above INT64_MAX refused).
std::vector<std::int64_t> read_integers(hid_t attr, hid_t type, std::size_t count, const std::string& what) {
  const std::size_t size = H5Tget_size(type);
  const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
  if (size == 0 || size > 8) throw Error(ErrorCode::format, what + ": integers wider than 64 bits are not accepted");
  std::vector<std::int64_t> values(count);
  if (is_signed) {
    check_status(H5Aread(attr, H5T_NATIVE_INT64, values.data()), ErrorCode::format, what + ": cannot read");
    return values;
  }
  std::vector<std::uint64_t> unsigned_values(count);
  check_status(H5Aread(attr, H5T_NATIVE_UINT64, unsigned_values.data()), ErrorCode::format, what + ": cannot read");
  for (std::size_t k = 0; k < count; ++k) {
    if (unsigned_values[k] > static_cast<std::uint64_t>(INT64_MAX))
      throw Error(ErrorCode::format, what + ": value " + std::to_string(unsigned_values[k]) +
                                         " does not fit in a signed 64-bit integer");
    values[k] = static_cast<std::int64_t>(unsigned_values[k]);
  }
  return values;
}

/// An enum attribute (h5py writes numpy booleans as an enum over int8) as the integers it stores.
std::vector<std::int64_t> read_enum(hid_t attr, hid_t type, std::size_t count, const std::string& what) {
  Handle base = datatype(H5Tget_super(type));
  if (!base.valid() || H5Tget_class(base) != H5T_INTEGER)
    throw Error(ErrorCode::format, what + ": an enum attribute must be based on an integer type");
  const std::size_t size = H5Tget_size(type);
  if (size == 0 || size > 8) throw Error(ErrorCode::format, what + ": enum values wider than 64 bits are not accepted");
  const bool is_signed = H5Tget_sign(base) == H5T_SGN_2;
  Handle memory = datatype(H5Tget_native_type(type, H5T_DIR_ASCEND));
  if (!memory.valid() || H5Tget_size(memory) != size)
    throw Error(ErrorCode::format, what + ": unsupported enum layout");
  std::vector<unsigned char> raw(count * size);
  check_status(H5Aread(attr, memory, raw.data()), ErrorCode::format, what + ": cannot read");
  std::vector<std::int64_t> values(count);
  for (std::size_t k = 0; k < count; ++k) {
    const unsigned char* p = raw.data() + k * size;
    std::int64_t v = 0;
    switch (size) {
      case 1: v = is_signed ? std::int64_t{*reinterpret_cast<const std::int8_t*>(p)} : std::int64_t{*p}; break;
      case 2: {
        std::int16_t s; std::uint16_t u;
        std::memcpy(&s, p, 2); std::memcpy(&u, p, 2);
        v = is_signed ? std::int64_t{s} : std::int64_t{u};
        break;
      }
      case 4: {
        std::int32_t s; std::uint32_t u;
        std::memcpy(&s, p, 4); std::memcpy(&u, p, 4);
        v = is_signed ? std::int64_t{s} : std::int64_t{u};
        break;
      }
      case 8: {
        std::uint64_t u;
        std::memcpy(&u, p, 8);
        if (!is_signed && u > static_cast<std::uint64_t>(INT64_MAX))
          throw Error(ErrorCode::format, what + ": enum value does not fit in a signed 64-bit integer");
        v = static_cast<std::int64_t>(u);
        break;
      }
      default: throw Error(ErrorCode::format, what + ": unsupported enum size " + std::to_string(size));
    }
    values[k] = v;
  }
  return values;
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
    Handle type = datatype(check(H5Aget_type(attr), ErrorCode::format, what + ": cannot read its type"));
    Handle space = dataspace(check(H5Aget_space(attr), ErrorCode::format, what + ": cannot read its shape"));
    const hssize_t count = H5Sget_simple_extent_npoints(space);
    const int rank = H5Sget_simple_extent_ndims(space);
    if (count < 0 || rank < 0) throw Error(ErrorCode::format, what + ": cannot read its shape");
    if (rank > 1)
      throw Error(ErrorCode::format, what + ": expected a scalar or a 1-D array, found a " + std::to_string(rank) +
                                         "-D array");
    if (rank == 0 && count != 1) throw Error(ErrorCode::format, what + ": holds no value (null dataspace)");
    if (count > kMaxAttributeValues)
      throw Error(ErrorCode::format, what + ": holds " + std::to_string(count) + " values; at most " +
                                         std::to_string(kMaxAttributeValues) + " are accepted");
    const bool scalar = rank == 0;
    const auto n = static_cast<std::size_t>(count);
    const H5T_class_t cls = H5Tget_class(type);
    switch (cls) {
      case H5T_INTEGER:
      case H5T_ENUM: {
        const auto values = cls == H5T_ENUM ? read_enum(attr, type, n, what) : read_integers(attr, type, n, what);
        if (scalar) visit->map->set(name, values[0]);
        else visit->map->set(name, values);
        break;
      }
      case H5T_FLOAT: {
        if (H5Tget_size(type) > 8)
          throw Error(ErrorCode::format, what + ": floating-point values wider than 64 bits are not accepted");
        std::vector<double> values(n);
        check_status(H5Aread(attr, H5T_NATIVE_DOUBLE, values.data()), ErrorCode::format, what + ": cannot read");
        if (scalar) visit->map->set(name, values[0]);
        else visit->map->set(name, values);
        break;
      }
      case H5T_STRING:
        if (!scalar && count != 1)
          throw Error(ErrorCode::format, what + ": expected one string, found an array of " + std::to_string(count));
        visit->map->set(name, read_string_attribute(attr, type, what));
        break;
      default:
        throw Error(ErrorCode::format, what + ": unsupported attribute type (" + class_text(cls) +
                                           "); expected an integer, a float, a boolean or a string");
    }
  } catch (const Error& e) {
    visit->error = e.what();
    return -1;
  } catch (const std::bad_alloc&) {
    visit->error = what + ": out of memory while reading it";
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
  const auto shape = checked_dataset_shape(dset, std::int64_t{1} << 20, what);
  if (shape.size() > 1) throw Error(ErrorCode::format, what + ": expected a 1-D list of strings");
  const std::size_t count = shape.empty() ? 1 : static_cast<std::size_t>(shape[0]);
  if (H5Tis_variable_str(type) <= 0 && (H5Tget_size(type) == 0 || H5Tget_size(type) > kMaxStringBytes))
    throw Error(ErrorCode::format, what + ": fixed-length strings of " + std::to_string(H5Tget_size(type)) +
                                       " bytes are not accepted");
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
