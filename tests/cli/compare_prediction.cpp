// Checks a `surrogate predict` output.
//   compare_prediction golden IO.h5 PREDICTION.h5   /prediction vs /prediction_f64 within 4 x float32_error
//   compare_prediction identical A.h5 B.h5 [NAME]    the two /prediction (or /NAME) datasets are bitwise equal,
//                                                    stored as the same type
//   compare_prediction close A.h5 B.h5 R             max |A - B| <= R max |B| (/prediction of both)
//   compare_prediction stored A.h5 NAME BYTES        /NAME is stored with BYTES-byte elements (8: float64)
#include <cmath>
#include <iostream>
#include <string>

#include "h5_io.hpp"

using namespace surrogate::testing;

int main(int argc, char** argv) {
  if (argc != 4 && !(argc == 5 && (std::string(argv[1]) == "close" || std::string(argv[1]) == "identical" ||
                                    std::string(argv[1]) == "stored"))) {
    std::cerr << "usage: compare_prediction golden IO.h5 PREDICTION.h5 | identical A.h5 B.h5 [NAME] | close A.h5 B.h5 R"
                 " | stored A.h5 NAME BYTES\n";
    return 2;
  }
  const std::string mode = argv[1];
  try {
    if (mode == "golden") {
      const Array ref = read_array(argv[2], "prediction_f64");
      const Array got = read_array(argv[3], "prediction");
      const double f32 = read_double_attribute(argv[2], "float32_error");
      if (got.shape != ref.shape) {
        std::cerr << "shape mismatch\n";
        return 1;
      }
      double num = 0, den = 0;
      for (std::size_t i = 0; i < ref.values.size(); ++i) {
        num = std::max(num, std::abs(got.values[i] - ref.values[i]));
        den = std::max(den, std::abs(ref.values[i]));
      }
      std::cout << "relative error " << num / den << " (official float32: " << f32 << ")\n";
      return num / den <= 4 * f32 ? 0 : 1;
    }
    if (mode == "identical") {
      const std::string name = argc == 5 ? argv[4] : "prediction";
      const Array a = read_array(argv[2], name), b = read_array(argv[3], name);
      // The same stored type too: a float64 reference is not matched by float32 values that happen to agree.
      const std::size_t ea = stored_element_size(argv[2], name), eb = stored_element_size(argv[3], name);
      const bool same = a.shape == b.shape && a.values == b.values && ea == eb;
      std::cout << (same ? "bitwise identical\n" : ea != eb ? "DIFFERENT element types (" + std::to_string(ea) + " and " +
                                                               std::to_string(eb) + " bytes)\n" : "DIFFERENT\n");
      return same ? 0 : 1;
    }
    if (mode == "stored") {
      const std::size_t size = stored_element_size(argv[2], argv[3]);
      std::cout << "/" << argv[3] << " stored with " << size << "-byte elements\n";
      return size == std::stoul(argv[4]) ? 0 : 1;
    }
    if (mode == "close") {
      const Array a = read_array(argv[2], "prediction"), b = read_array(argv[3], "prediction");
      if (a.shape != b.shape) {
        std::cerr << "shape mismatch\n";
        return 1;
      }
      double diff = 0, scale = 0;
      for (std::size_t i = 0; i < b.values.size(); ++i) {
        diff = std::max(diff, std::abs(a.values[i] - b.values[i]));
        scale = std::max(scale, std::abs(b.values[i]));
      }
      const double bound = std::stod(argv[4]) * scale;
      std::cout << "max |a - b| " << diff << " (bound " << bound << ")\n";
      return diff <= bound ? 0 : 1;
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  std::cerr << "unknown mode " << mode << "\n";
  return 2;
}
