// In-memory serialisation of a ModelFile, used to broadcast a file read by rank 0 to the other ranks.
#include <cstring>

#include "surrogate/model_file.hpp"

namespace surrogate {
namespace {

class Writer {
 public:
  explicit Writer(std::vector<std::uint8_t>& out) : out_(out) {}
  void raw(const void* p, std::size_t n) {
    const auto* b = static_cast<const std::uint8_t*>(p);
    out_.insert(out_.end(), b, b + n);
  }
  void u64(std::uint64_t v) { raw(&v, sizeof v); }
  void i64(std::int64_t v) { raw(&v, sizeof v); }
  void str(const std::string& s) {
    u64(s.size());
    raw(s.data(), s.size());
  }
  template <class T> void vec(const std::vector<T>& v) {
    u64(v.size());
    raw(v.data(), v.size() * sizeof(T));
  }
  void strings(const std::vector<std::string>& v) {
    u64(v.size());
    for (const auto& s : v) str(s);
  }
  void attributes(const AttributeMap& map) {
    u64(map.values().size());
    for (const auto& [name, value] : map.values()) {
      str(name);
      u64(value.index());
      std::visit(
          [this](const auto& x) {
            using X = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<X, std::string>) str(x);
            else if constexpr (std::is_same_v<X, std::int64_t> || std::is_same_v<X, double>) raw(&x, sizeof x);
            else vec(x);
          },
          value);
    }
  }
  void tensors(const std::map<std::string, Tensor32>& map) {
    u64(map.size());
    for (const auto& [name, t] : map) {
      str(name);
      vec(t.shape);
      vec(t.values);
    }
  }

 private:
  std::vector<std::uint8_t>& out_;
};

class Reader {
 public:
  explicit Reader(const std::vector<std::uint8_t>& in) : in_(in) {}
  void raw(void* p, std::size_t n) {
    if (pos_ + n > in_.size()) throw Error(ErrorCode::communication, "corrupt model broadcast");
    if (n) std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  std::uint64_t u64() {
    std::uint64_t v;
    raw(&v, sizeof v);
    return v;
  }
  std::int64_t i64() {
    std::int64_t v;
    raw(&v, sizeof v);
    return v;
  }
  std::string str() {
    std::string s(u64(), '\0');
    raw(s.data(), s.size());
    return s;
  }
  template <class T> std::vector<T> vec() {
    std::vector<T> v(u64());
    raw(v.data(), v.size() * sizeof(T));
    return v;
  }
  std::vector<std::string> strings() {
    std::vector<std::string> v(u64());
    for (auto& s : v) s = str();
    return v;
  }
  AttributeMap attributes(const std::string& group) {
    AttributeMap map(group);
    const std::uint64_t n = u64();
    for (std::uint64_t k = 0; k < n; ++k) {
      const std::string name = str();
      switch (u64()) {
        case 0: map.set(name, i64()); break;
        case 1: {
          double d;
          raw(&d, sizeof d);
          map.set(name, d);
          break;
        }
        case 2: map.set(name, str()); break;
        case 3: map.set(name, vec<std::int64_t>()); break;
        case 4: map.set(name, vec<double>()); break;
        default: throw Error(ErrorCode::communication, "corrupt model broadcast");
      }
    }
    return map;
  }
  std::map<std::string, Tensor32> tensors() {
    std::map<std::string, Tensor32> map;
    const std::uint64_t n = u64();
    for (std::uint64_t k = 0; k < n; ++k) {
      const std::string name = str();
      Tensor32 t;
      t.shape = vec<std::int64_t>();
      t.values = vec<float>();
      map.emplace(name, std::move(t));
    }
    return map;
  }

 private:
  const std::vector<std::uint8_t>& in_;
  std::size_t pos_ = 0;
};

}  // namespace

std::vector<std::uint8_t> ModelFile::serialize() const {
  std::vector<std::uint8_t> bytes;
  Writer w(bytes);
  w.str(path);
  w.str(architecture);
  w.str(source);
  w.i64(format_version);
  w.attributes(root);
  w.attributes(config);
  w.tensors(weights);
  w.tensors(tables);
  w.vec(normalization.input_mean);
  w.vec(normalization.input_std);
  w.vec(normalization.output_mean);
  w.vec(normalization.output_std);
  w.strings(fields.input_names);
  w.strings(fields.input_units);
  w.strings(fields.output_names);
  w.strings(fields.output_units);
  return bytes;
}

ModelFile ModelFile::deserialize(const std::vector<std::uint8_t>& bytes) {
  Reader r(bytes);
  ModelFile m;
  m.path = r.str();
  m.architecture = r.str();
  m.source = r.str();
  m.format_version = r.i64();
  m.root = r.attributes("/");
  m.config = r.attributes("/config");
  m.weights = r.tensors();
  m.tables = r.tensors();
  m.normalization.input_mean = r.vec<double>();
  m.normalization.input_std = r.vec<double>();
  m.normalization.output_mean = r.vec<double>();
  m.normalization.output_std = r.vec<double>();
  m.fields.input_names = r.strings();
  m.fields.input_units = r.strings();
  m.fields.output_names = r.strings();
  m.fields.output_units = r.strings();
  return m;
}

}  // namespace surrogate
