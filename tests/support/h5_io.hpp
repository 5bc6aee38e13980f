// Minimal HDF5 reading/writing for tests and tools (whole datasets, serial).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace surrogate::testing {

struct Array {
  std::vector<std::int64_t> shape;
  std::vector<double> values;  // converted to double
  std::int64_t rows() const { return shape.empty() ? 1 : shape[0]; }
  std::int64_t cols() const { return shape.size() < 2 ? 1 : shape[1]; }
};

bool has_dataset(const std::string& file, const std::string& name);
Array read_array(const std::string& file, const std::string& name);
/// The size in bytes of one element of the dataset as stored (4 for float32, 8 for float64).
std::size_t stored_element_size(const std::string& file, const std::string& name);
double read_double_attribute(const std::string& file, const std::string& name);

/// Writes float32 (int64 when as_int64, float64 when as_float64) datasets into a new file.
struct Dataset {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<double> values;
  bool as_int64 = false;
  bool as_float64 = false;
};
void write_file(const std::string& file, const std::vector<Dataset>& datasets);

std::vector<float> to_float(const std::vector<double>& v);

}  // namespace surrogate::testing
