// Model families by the `architecture` attribute of the model file (the list: families.hpp).
#include <map>
#include <memory>
#include <new>
#include <stdexcept>

#include "surrogate/kernels/cpu.hpp"
#include "surrogate/model.hpp"

#include "file_errors.hpp"

// Every family's factory, declared in its namespace.
#define SURROGATE_MODEL(family, architecture, factory) \
  namespace surrogate::family {                        \
  std::unique_ptr<Model> factory(const ModelFile& file); \
  }
#include "families.hpp"
#undef SURROGATE_MODEL

namespace surrogate {
namespace {
using Factory = std::unique_ptr<Model> (*)(const ModelFile&);
const std::map<std::string, Factory>& registry() {
  static const std::map<std::string, Factory> factories = {
#define SURROGATE_MODEL(family, architecture, factory) {architecture, &family::factory},
#include "families.hpp"
#undef SURROGATE_MODEL
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
  // The CPU kernel table (SURROGATE_CPU_ISA) is chosen here, before any forward: a forward may first ask
  // for it inside an OpenMP region, where an exception would end the process.
  try {
    (void)kernels::cpu();
  } catch (const std::runtime_error& e) {
    throw Error(ErrorCode::unsupported, e.what());
  }
  try {
    return detail::naming_the_file(file, [&] { return it->second(file); });
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::out_of_memory, "'" + file.path + "': not enough memory to build the " + file.architecture +
                                              " model its /config describes");
  } catch (const std::length_error&) {
    throw Error(ErrorCode::out_of_memory, "'" + file.path + "': the " + file.architecture +
                                              " model its /config describes needs sizes too large to allocate");
  }
}

}  // namespace surrogate
