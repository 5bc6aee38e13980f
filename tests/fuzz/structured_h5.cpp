// Structure-aware fuzzing: the items of an HDF5 file, their mutations and their writer
// (share/docs/reliability.md §4).
#include "structured_h5.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>

namespace fuzz {

namespace {
constexpr std::uint64_t kSaturated = std::uint64_t{1} << 62;
constexpr std::uint64_t kMaxWritten = std::uint64_t{1} << 20;    // elements actually written per dataset
constexpr std::uint64_t kMaxAttribute = 4096;                    // elements of an attribute (object header)

// Releases an HDF5 id on scope exit (the harness must leave nothing open: the readers are checked for that).
struct Id {
  hid_t id = -1;
  herr_t (*close)(hid_t) = nullptr;
  Id(hid_t i, herr_t (*c)(hid_t)) : id(i), close(c) {}
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() {
    if (id >= 0) close(id);
  }
  operator hid_t() const { return id; }
};

hid_t make_type(const Item& item, std::size_t fixed_len) {
  switch (item.cls) {
    case Cls::i64: return H5Tcopy(H5T_STD_I64LE);
    case Cls::i32: return H5Tcopy(H5T_STD_I32LE);
    case Cls::u8: return H5Tcopy(H5T_STD_U8LE);
    case Cls::boolean: {  // h5py's bool: an enum of int8 FALSE = 0, TRUE = 1
      hid_t t = H5Tenum_create(H5T_NATIVE_INT8);
      const std::int8_t f = 0, t1 = 1;
      H5Tenum_insert(t, "FALSE", &f);
      H5Tenum_insert(t, "TRUE", &t1);
      return t;
    }
    case Cls::f64: return H5Tcopy(H5T_IEEE_F64LE);
    case Cls::f32: return H5Tcopy(H5T_IEEE_F32LE);
    case Cls::f16: {  // IEEE binary16 (HDF5 1.10 has no predefined one)
      hid_t t = H5Tcopy(H5T_IEEE_F32LE);
      H5Tset_fields(t, 15, 10, 5, 0, 10);
      H5Tset_precision(t, 16);
      H5Tset_size(t, 2);
      H5Tset_ebias(t, 15);
      return t;
    }
    case Cls::str_fixed: {
      hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, std::max<std::size_t>(fixed_len, 1));
      H5Tset_strpad(t, H5T_STR_NULLPAD);
      return t;
    }
    case Cls::str_vlen: {
      hid_t t = H5Tcopy(H5T_C_S1);
      H5Tset_size(t, H5T_VARIABLE);
      H5Tset_cset(t, H5T_CSET_UTF8);
      return t;
    }
  }
  return -1;
}

// The buffer of `n` elements in memory and its memory type; false when nothing can be written.
struct Buffer {
  std::vector<std::int64_t> ints;
  std::vector<std::int8_t> bools;
  std::vector<double> reals;
  std::vector<char> fixed;
  std::vector<const char*> vlen;
  hid_t mem_type = -1;
  const void* data = nullptr;
};

void fill(const Item& item, std::uint64_t n, std::size_t fixed_len, hid_t file_type, Buffer& b) {
  auto at = [](const auto& v, std::uint64_t i) { return v.empty() ? decltype(v[0]){} : v[i % v.size()]; };
  if (is_integer(item.cls) && item.cls != Cls::boolean) {
    b.ints.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) b.ints[i] = at(item.ints, i);
    b.mem_type = H5T_NATIVE_INT64, b.data = b.ints.data();
  } else if (item.cls == Cls::boolean) {  // raw int8, so that values other than 0 and 1 are stored as they are
    b.bools.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) b.bools[i] = static_cast<std::int8_t>(at(item.ints, i));
    b.mem_type = file_type, b.data = b.bools.data();
  } else if (is_float(item.cls)) {
    b.reals.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) b.reals[i] = at(item.reals, i);
    b.mem_type = H5T_NATIVE_DOUBLE, b.data = b.reals.data();
  } else if (item.cls == Cls::str_fixed) {
    b.fixed.assign(n * std::max<std::size_t>(fixed_len, 1), '\0');
    for (std::uint64_t i = 0; i < n && !item.strings.empty(); ++i) {
      const std::string& s = item.strings[i % item.strings.size()];
      std::copy(s.begin(), s.end(), b.fixed.begin() + static_cast<std::ptrdiff_t>(i * fixed_len));
    }
    b.mem_type = file_type, b.data = b.fixed.data();
  } else {
    static const std::string empty;
    b.vlen.resize(n);
    for (std::uint64_t i = 0; i < n; ++i)
      b.vlen[i] = item.strings.empty() ? empty.c_str() : item.strings[i % item.strings.size()].c_str();
    b.mem_type = file_type, b.data = b.vlen.data();
  }
}

bool write_item(hid_t file, std::map<std::string, hid_t>& groups, const Item& item) {
  hid_t parent = file;
  if (!item.group.empty()) {
    auto it = groups.find(item.group);
    if (it == groups.end()) {
      const hid_t g = H5Gcreate2(file, item.group.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
      if (g < 0) return false;
      it = groups.emplace(item.group, g).first;
    }
    parent = it->second;
  }
  const std::uint64_t n = numel(item.shape);
  if (!item.dataset && n > kMaxAttribute) return false;
  std::size_t fixed_len = 1;
  for (const std::string& s : item.strings) fixed_len = std::max(fixed_len, s.size());
  Id type(make_type(item, fixed_len), H5Tclose);
  std::vector<hsize_t> dims(item.shape.begin(), item.shape.end());
  Id space(item.shape.empty() ? H5Screate(H5S_SCALAR)
                              : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
           H5Sclose);
  if (type < 0 || space < 0) return false;
  // Strings are kept to a few MiB per item: the harness must not be what hits the allocation cap.
  const bool written = n <= kMaxWritten && (!is_string(item.cls) || n * fixed_len <= (std::uint64_t{1} << 24));
  Buffer buffer;
  if (written) fill(item, n, fixed_len, type, buffer);
  if (!item.dataset) {
    Id attr(H5Acreate2(parent, item.name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    return attr >= 0 && (n == 0 || H5Awrite(attr, buffer.mem_type, buffer.data) >= 0);
  }
  Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (!written) {  // declared, never written: chunks are allocated on write only
    std::vector<hsize_t> chunk(dims.size());
    for (std::size_t d = 0; d < dims.size(); ++d) chunk[d] = std::clamp<hsize_t>(dims[d], 1, 16);
    if (H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data()) < 0) return false;
  }
  Id dset(H5Dcreate2(parent, item.name.c_str(), type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose);
  if (dset < 0) return false;
  return !written || n == 0 || H5Dwrite(dset, buffer.mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data) >= 0;
}
}  // namespace

std::uint64_t numel(const std::vector<std::uint64_t>& shape) {
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) {
    if (d == 0) return 0;
    n = n > kSaturated / d ? kSaturated : n * d;
  }
  return n;
}

bool is_integer(Cls c) { return c == Cls::i64 || c == Cls::i32 || c == Cls::u8 || c == Cls::boolean; }
bool is_float(Cls c) { return c == Cls::f64 || c == Cls::f32 || c == Cls::f16; }
bool is_string(Cls c) { return c == Cls::str_fixed || c == Cls::str_vlen; }

void convert(Item& item, Cls to) {
  if (is_integer(to) && !is_integer(item.cls)) {
    item.ints.clear();
    for (double r : item.reals)
      item.ints.push_back(std::isfinite(r) && std::fabs(r) < 9e18 ? static_cast<std::int64_t>(r) : 0);
    for (const std::string& s : item.strings) item.ints.push_back(static_cast<std::int64_t>(s.size()));
  } else if (is_float(to) && !is_float(item.cls)) {
    item.reals.clear();
    for (std::int64_t i : item.ints) item.reals.push_back(static_cast<double>(i));
    for (const std::string& s : item.strings) item.reals.push_back(static_cast<double>(s.size()));
  } else if (is_string(to) && !is_string(item.cls)) {
    // At most kMaxAttribute strings (the writer repeats them cyclically): a million to_string calls of
    // 1e300 took the harness itself past the 30 s timeout under ASan.
    item.strings.clear();
    for (std::int64_t i : item.ints)
      if (item.strings.size() < kMaxAttribute) item.strings.push_back(std::to_string(i));
    for (double r : item.reals)
      if (item.strings.size() < kMaxAttribute) item.strings.push_back(std::to_string(r));
  }
  item.cls = to;
}

std::int64_t pick_int(FuzzedDataProvider& fdp) {
  static constexpr std::int64_t table[] = {0, 1, -1, 2, 3, 4, 7, 8, 16, 64, 255, 256, 65535,
                                           std::numeric_limits<std::int32_t>::max(), std::int64_t{1} << 31,
                                           (std::int64_t{1} << 32) + 16, std::int64_t{1} << 24,
                                           (std::int64_t{1} << 24) + 1, std::int64_t{1} << 40,
                                           std::numeric_limits<std::int64_t>::max(),
                                           std::numeric_limits<std::int64_t>::min()};
  const int choice = fdp.ConsumeIntegralInRange<int>(0, std::size(table));
  return choice < static_cast<int>(std::size(table)) ? table[choice] : fdp.ConsumeIntegral<std::int64_t>();
}

double pick_real(FuzzedDataProvider& fdp) {
  static constexpr double inf = std::numeric_limits<double>::infinity();
  static const double table[] = {0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-300, 1e-45, 1e30, 1e38, 3.5e38, 1e300,
                                 inf, -inf, std::numeric_limits<double>::quiet_NaN(), 4.9e-324, 65504.0, 1e5};
  const int choice = fdp.ConsumeIntegralInRange<int>(0, std::size(table));
  return choice < static_cast<int>(std::size(table)) ? table[choice] : fdp.ConsumeFloatingPoint<double>();
}

std::string pick_string(FuzzedDataProvider& fdp, const std::vector<std::string>& pool) {
  if (!pool.empty() && fdp.ConsumeBool()) return pool[fdp.ConsumeIntegralInRange<std::size_t>(0, pool.size() - 1)];
  if (fdp.ConsumeBool()) return std::string(fdp.ConsumeIntegralInRange<std::size_t>(0, 5000), 'x');
  return fdp.ConsumeRandomLengthString(32);
}

std::vector<std::uint64_t> pick_shape(FuzzedDataProvider& fdp, const std::vector<std::uint64_t>& old,
                                      bool dataset) {
  const int rank = fdp.ConsumeIntegralInRange<int>(0, dataset ? 4 : 2);
  std::vector<std::uint64_t> shape;
  for (int d = 0; d < rank; ++d) {
    const std::uint64_t base = old.empty() ? 1 : old[static_cast<std::size_t>(d) % old.size()];
    switch (fdp.ConsumeIntegralInRange<int>(0, dataset ? 6 : 4)) {
      case 0: shape.push_back(base); break;
      case 1: shape.push_back(base + 1); break;
      case 2: shape.push_back(base > 0 ? base - 1 : 0); break;
      case 3: shape.push_back(fdp.ConsumeIntegralInRange<std::uint64_t>(0, 3)); break;
      case 4: shape.push_back(fdp.ConsumeIntegralInRange<std::uint64_t>(0, 300)); break;
      case 5: shape.push_back(std::uint64_t{1} << fdp.ConsumeIntegralInRange<int>(20, 40)); break;
      default: shape.push_back(fdp.ConsumeIntegral<std::uint32_t>()); break;
    }
  }
  if (!dataset && numel(shape) > kMaxAttribute) shape = {kMaxAttribute};
  return shape;
}

void mutate_values(FuzzedDataProvider& fdp, Item& item, const std::vector<std::string>& pool) {
  const std::uint64_t cap = is_string(item.cls) ? kMaxAttribute : kMaxWritten;
  const std::uint64_t n = std::max<std::uint64_t>(1, std::min(numel(item.shape), cap));
  const bool all = fdp.ConsumeBool();
  auto apply = [&](auto& values, auto value) {
    if (values.size() < n) values.resize(n);
    if (all) std::fill(values.begin(), values.end(), value);
    else values[fdp.ConsumeIntegralInRange<std::uint64_t>(0, n - 1)] = value;
  };
  if (is_integer(item.cls)) apply(item.ints, pick_int(fdp));
  else if (is_float(item.cls)) apply(item.reals, pick_real(fdp));
  else apply(item.strings, pick_string(fdp, pool));
}

bool write_file(const std::string& path, const std::vector<Item>& items) {
  // The core driver builds the file in memory and writes it out once, on close.
  Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  H5Pset_fapl_core(fapl, 1 << 20, 1);
  bool ok = true;
  {
    Id file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl), H5Fclose);
    if (file < 0) return false;
    std::map<std::string, hid_t> groups;
    for (const Item& item : items) {
      bool written = false;
      H5E_BEGIN_TRY { written = write_item(file, groups, item); }
      H5E_END_TRY;
      if (!written) ok = false;
    }
    for (auto& [name, g] : groups) H5Gclose(g);
  }
  return ok;
}

std::string scratch_path(const std::string& stem) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = ::access("/dev/shm", W_OK) == 0 ? "/dev/shm" : tmp && *tmp ? tmp : "/tmp";
  return dir + "/" + stem + "_" + std::to_string(::getpid()) + ".h5";
}

long open_hdf5_objects() { return static_cast<long>(H5Fget_obj_count(static_cast<hid_t>(H5F_OBJ_ALL), H5F_OBJ_ALL)); }

void reset_hdf5() { H5close(); }

}  // namespace fuzz
