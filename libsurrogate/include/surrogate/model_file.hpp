// The HDF5 model file (format: share/docs/model-format.md). Reading checks the container completely
// (format, version, attributes, dataset types); each family then checks its weights with check_weights().
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <variant>
#include <vector>

#include "surrogate/comm.hpp"

namespace surrogate {

inline constexpr const char* kModelFormatName = "surrogate-model";
inline constexpr std::int64_t kModelFormatVersion = 1;
/// Sane limits on what a model file may declare (share/docs/reliability.md): any one size or count in
/// /config, and the elements of any one tensor.
inline constexpr std::int64_t kMaxConfigSize = std::int64_t{1} << 24;
inline constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 33;

using AttributeValue =
    std::variant<std::int64_t, double, std::string, std::vector<std::int64_t>, std::vector<double>>;

/// The attributes of one HDF5 group, with typed getters whose errors name the group and the attribute.
class AttributeMap {
 public:
  AttributeMap() = default;
  explicit AttributeMap(std::string group) : group_(std::move(group)) {}
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  std::int64_t get_int(const std::string& name) const;
  double get_double(const std::string& name) const;  // integers are accepted; NaN and Inf are refused
  bool get_bool(const std::string& name) const;       // 0 or 1
  std::string get_string(const std::string& name) const;
  std::int64_t get_int(const std::string& name, std::int64_t fallback) const;
  double get_double(const std::string& name, double fallback) const;
  /// An integer array attribute (a single integer is accepted as a list of one).
  std::vector<std::int64_t> get_int_list(const std::string& name) const;
  /// Checked accessors for what drives an allocation, a loop or a division: an integer in [min, max]
  /// (default max kMaxConfigSize), a list of them, a finite number > 0. Errors name the group, the
  /// attribute, the value found and the range expected.
  std::int64_t get_size(const std::string& name, std::int64_t min, std::int64_t max = kMaxConfigSize) const;
  std::int64_t get_size_or(const std::string& name, std::int64_t fallback, std::int64_t min,
                           std::int64_t max = kMaxConfigSize) const;
  std::vector<std::int64_t> get_size_list(const std::string& name, std::int64_t min,
                                          std::int64_t max = kMaxConfigSize) const;
  double get_positive(const std::string& name) const;
  double get_positive(const std::string& name, double fallback) const;
  void set(const std::string& name, AttributeValue value) { values_[name] = std::move(value); }
  void erase(const std::string& name) { values_.erase(name); }
  const std::map<std::string, AttributeValue>& values() const { return values_; }
  const std::string& group() const { return group_; }
  static std::string to_text(const AttributeValue& value);

 private:
  const AttributeValue& at(const std::string& name) const;
  std::string group_;
  std::map<std::string, AttributeValue> values_;
};

/// A float32 tensor (weights are converted to float32 on reading).
struct Tensor32 {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
  std::int64_t numel() const;
  std::string shape_text() const;  // "(64, 2)"
};

struct Normalization {
  std::vector<double> input_mean, input_std, output_mean, output_std;  // empty when absent
  bool has_input() const { return !input_mean.empty(); }
  bool has_output() const { return !output_mean.empty(); }
};

struct Fields {
  std::vector<std::string> input_names, input_units, output_names, output_units;  // empty when absent
};

using ExpectedShapes = std::map<std::string, std::vector<std::int64_t>>;

class ModelFile {
 public:
  /// Reads and checks the file on this process. Throws Error (io, format) naming the file.
  static ModelFile read(const std::string& path);
  /// Collective: rank 0 reads, every rank gets the same content or the same error.
  static ModelFile read(const Comm& comm, const std::string& path);
  /// Writes the file (used by tools and tests); overwrites an existing file.
  void write(const std::string& path) const;

  std::vector<std::uint8_t> serialize() const;
  static ModelFile deserialize(const std::vector<std::uint8_t>& bytes);

  /// Throws Error(weights) listing every missing, unexpected and mis-shaped tensor, and any tensor with
  /// non-finite values.
  void check_weights(const ExpectedShapes& expected) const;
  const Tensor32& weight(const std::string& key) const;
  /// Refuses a repeat count read from /config (blocks, layers, steps) that asks for more than the
  /// `tensors_each` tensors per repetition the file holds: checked before the expected shapes are built.
  void check_repeat_count(const std::string& attribute, std::int64_t count, std::int64_t tensors_each = 1) const;

  std::string path;
  std::string architecture;
  std::string source;
  std::int64_t format_version = kModelFormatVersion;
  AttributeMap root{"/"};      // every root attribute, including the four required ones
  AttributeMap config{"/config"};
  std::map<std::string, Tensor32> weights;
  std::map<std::string, Tensor32> tables;
  Normalization normalization;
  Fields fields;
};

}  // namespace surrogate
