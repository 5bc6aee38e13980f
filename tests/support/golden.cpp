#include "golden.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "h5_io.hpp"

namespace surrogate::testing {

// The environment variable SURROGATE_TEST_DATA_DIR, when set, replaces the compiled-in tests/data: the GPU
// bundle (share/tools/gpu-bundle) runs the tests on another machine, where the data lies elsewhere.
std::string data_dir() {
  if (const char* dir = std::getenv("SURROGATE_TEST_DATA_DIR"); dir != nullptr && *dir != '\0') return dir;
  return SURROGATE_TEST_DATA_DIR;
}

std::vector<std::string> golden_case_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(data_dir() + "/flare"))
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "io.h5")) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

GoldenCase load_golden_case(const std::string& name) {
  GoldenCase c;
  c.name = name;
  c.model_path = data_dir() + "/flare/" + name + "/model.h5";
  c.io_path = data_dir() + "/flare/" + name + "/io.h5";
  const Array features = read_array(c.io_path, "features");
  const Array reference = read_array(c.io_path, "prediction_f64");
  c.in_dim = static_cast<int>(features.cols());
  c.out_dim = static_cast<int>(reference.cols());
  c.features = to_float(features.values);
  c.reference = reference.values;
  c.sample_ids.assign(static_cast<std::size_t>(features.rows()), 0);
  if (has_dataset(c.io_path, "batch_idx")) {
    const Array ids = read_array(c.io_path, "batch_idx");
    for (std::size_t i = 0; i < c.sample_ids.size(); ++i) c.sample_ids[i] = static_cast<std::int64_t>(ids.values[i]);
  }
  c.float32_error = read_double_attribute(c.io_path, "float32_error");
  return c;
}

double relative_max_error(const std::vector<float>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::abs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::abs(b[i]));
  }
  return num / den;
}

std::vector<float> predict_rows(const Comm& comm, Model& model, const GoldenCase& c, const std::vector<std::int64_t>& rows,
                                const RunOptions& options) {
  std::vector<float> in;
  std::vector<std::int64_t> ids;
  for (std::int64_t g : rows) {
    ids.push_back(c.sample_ids[static_cast<std::size_t>(g)]);
    for (int j = 0; j < c.in_dim; ++j) in.push_back(c.features[static_cast<std::size_t>(g * c.in_dim + j)]);
  }
  const auto layout = SampleLayout::build(comm, static_cast<std::int64_t>(rows.size()), ids.data());
  std::vector<float> out(rows.size() * static_cast<std::size_t>(c.out_dim), -1.0f);
  model.predict(comm, layout, in.data(), c.in_dim, out.data(), c.out_dim, options);
  return out;
}

}  // namespace surrogate::testing
