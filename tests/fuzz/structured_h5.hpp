// Structure-aware fuzzing (share/docs/reliability.md §4): an HDF5 file as a list of attributes and datasets
// whose classes, shapes and values the fuzzer's bytes choose. The harness writes it with HDF5 itself, so the
// file is always well formed and the fuzzer explores what our readers and models decide, not HDF5's parser.
#pragma once

#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fuzz {

/// The stored class of an item: integers, the h5py boolean enum, floats (float16 a custom IEEE type),
/// fixed or variable-length strings.
enum class Cls : std::uint8_t { i64, i32, u8, boolean, f64, f32, f16, str_fixed, str_vlen };
inline constexpr int kClasses = 9;

struct Item {
  std::string group;  // "" for the root, else one level: "config", "weights", ...
  std::string name;
  bool dataset = false;
  Cls cls = Cls::f64;
  std::vector<std::uint64_t> shape;  // empty: a scalar
  std::vector<std::int64_t> ints;    // the values of integer classes
  std::vector<double> reals;         // of float classes
  std::vector<std::string> strings;  // of string classes
};

/// Elements of a shape (saturating at 2^62).
std::uint64_t numel(const std::vector<std::uint64_t>& shape);
bool is_integer(Cls c);
bool is_float(Cls c);
bool is_string(Cls c);

/// Converts the item's values to another class (numbers <-> text).
void convert(Item& item, Cls to);

/// Values the fuzzer picks from: extremes, specials and the data's own bytes.
std::int64_t pick_int(FuzzedDataProvider& fdp);
double pick_real(FuzzedDataProvider& fdp);
std::string pick_string(FuzzedDataProvider& fdp, const std::vector<std::string>& pool);
std::vector<std::uint64_t> pick_shape(FuzzedDataProvider& fdp, const std::vector<std::uint64_t>& old, bool dataset);
/// Sets one, or every, value of the item to a picked one (growing the value list to the shape).
void mutate_values(FuzzedDataProvider& fdp, Item& item, const std::vector<std::string>& pool);

/// Writes the items into a new file at `path` (groups created on demand). Datasets whose shape holds more
/// than a few MiB are declared (chunked, never written: HDF5 reads them as fill values) rather than
/// filled, so that huge declared shapes cost nothing to write. Returns false when HDF5 refuses an item
/// that the harness built (then the input is skipped).
bool write_file(const std::string& path, const std::vector<Item>& items);

/// A scratch file name for this process: in /dev/shm when it is writable (memory), else in $TMPDIR or /tmp.
std::string scratch_path(const std::string& stem);

/// Number of HDF5 objects (files, groups, datasets, types, attributes) open in this process.
long open_hdf5_objects();

/// Closes the HDF5 library (it reopens on the next call), releasing its free lists and the conversion
/// paths it caches for every file's variable-length types. Called at the end of every input: memory kept
/// there makes an input's mallocs and frees differ, and libFuzzer then runs the input a second time for
/// its leak check (more than half of them did: a third of the model harness's time).
void reset_hdf5();

}  // namespace fuzz
