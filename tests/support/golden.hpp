// The golden FLARE cases of tests/data/flare (made with the official FLARE.py, see its README.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "surrogate/model.hpp"

namespace surrogate::testing {

struct GoldenCase {
  std::string name;
  std::string model_path;
  std::string io_path;
  int in_dim = 0, out_dim = 0;
  std::vector<float> features;           // N x in_dim
  std::vector<std::int64_t> sample_ids;  // N (all zero when the file has no /batch_idx)
  std::vector<double> reference;         // N x out_dim, the official model in float64
  double float32_error = 0;              // official float32 vs float64 (max abs / max abs)
  std::int64_t points() const { return static_cast<std::int64_t>(sample_ids.size()); }
};

std::string data_dir();  // tests/data (compiled in; $SURROGATE_TEST_DATA_DIR overrides it)
std::vector<std::string> golden_case_names();
GoldenCase load_golden_case(const std::string& name);

/// max |a - b| / max |b|
double relative_max_error(const std::vector<float>& a, const std::vector<double>& b);

/// The case's model on the rows `rows` of the case (this rank's share, in that order): inputs and sample
/// ids gathered, one SampleLayout, one predict; the outputs rows.size() x out_dim.
std::vector<float> predict_rows(const Comm& comm, Model& model, const GoldenCase& c, const std::vector<std::int64_t>& rows,
                                const RunOptions& options);

}  // namespace surrogate::testing
