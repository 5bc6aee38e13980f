// Model families by the `architecture` attribute of the model file.
#include <functional>
#include <map>

#include "surrogate/bsa.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/flare.hpp"
#include "surrogate/model.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace surrogate {
namespace {
using Factory = std::function<std::unique_ptr<Model>(const ModelFile&)>;
const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> factories = {
      {"bsa", bsa::make_bsa_model},
      {"erwin", erwin::make_erwin_model},
      {"flare", make_flare_model},
      {"sphere_transformer", sphere::make_sphere_transformer_model},
      {"s2_attention", sphere::make_s2_attention_model},
      {"s2_neighborhood_attention", sphere::make_s2_neighborhood_attention_model},
  };
  return factories;
}
}  // namespace

std::vector<std::string> architectures() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Model> make_model(const ModelFile& file) {
  const auto it = registry().find(file.architecture);
  if (it == registry().end()) {
    std::string known;
    for (const auto& name : architectures()) known += (known.empty() ? "" : ", ") + name;
    throw Error(ErrorCode::format, "'" + file.path + "': unknown architecture '" + file.architecture +
                                       "' (this build knows: " + known + ")");
  }
  return it->second(file);
}

}  // namespace surrogate
