// Structure-aware libFuzzer harness of the model families (share/docs/reliability.md §4): the input picks a
// valid seed model (FLARE, Erwin, BSA, sphere, HEPT, Sequoia) and mutates its attributes and datasets
// (presence, class, shape, values); the file is written well formed, read, built and, when small, run on
// a few points. surrogate::Error is the expected outcome; anything else is a finding.

#include <cstdlib>
#include <cstdio>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "structured_h5.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"

namespace {

using fuzz::Cls;
using fuzz::Item;

struct Seed {
  std::vector<Item> items;
};
std::vector<Seed> seeds;
std::vector<std::string> names;  // every attribute and dataset name of the seeds, and the family names

Item attribute_item(const std::string& group, const std::string& name, const surrogate::AttributeValue& value) {
  Item item{group, name, false, Cls::f64, {}, {}, {}, {}};
  if (auto* i = std::get_if<std::int64_t>(&value)) item.cls = Cls::i64, item.ints = {*i};
  if (auto* r = std::get_if<double>(&value)) item.cls = Cls::f64, item.reals = {*r};
  if (auto* s = std::get_if<std::string>(&value)) item.cls = Cls::str_vlen, item.strings = {*s};
  if (auto* v = std::get_if<std::vector<std::int64_t>>(&value)) item.cls = Cls::i64, item.ints = *v;
  if (auto* v = std::get_if<std::vector<double>>(&value)) item.cls = Cls::f64, item.reals = *v;
  if (!item.ints.empty() && std::holds_alternative<std::vector<std::int64_t>>(value)) item.shape = {item.ints.size()};
  if (!item.reals.empty() && std::holds_alternative<std::vector<double>>(value)) item.shape = {item.reals.size()};
  return item;
}

void add_tensors(Seed& seed, const std::string& group, const std::map<std::string, surrogate::Tensor32>& tensors) {
  for (const auto& [name, t] : tensors) {
    Item item{group, name, true, Cls::f32, {}, {}, {}, {}};
    item.shape.assign(t.shape.begin(), t.shape.end());
    item.reals.assign(t.values.begin(), t.values.end());
    seed.items.push_back(std::move(item));
  }
}

Seed load_seed(const std::string& path) {
  const surrogate::ModelFile file = surrogate::ModelFile::read(path);
  Seed seed;
  for (const auto& [name, value] : file.root.values()) seed.items.push_back(attribute_item("", name, value));
  for (const auto& [name, value] : file.config.values()) seed.items.push_back(attribute_item("config", name, value));
  add_tensors(seed, "weights", file.weights);
  add_tensors(seed, "tables", file.tables);
  const auto& n = file.normalization;
  const std::pair<const char*, const std::vector<double>*> norms[] = {
      {"input_mean", &n.input_mean}, {"input_std", &n.input_std}, {"output_mean", &n.output_mean},
      {"output_std", &n.output_std}};
  for (const auto& [name, values] : norms)
    if (!values->empty())
      seed.items.push_back(Item{"normalization", name, true, Cls::f64, {values->size()}, {}, *values, {}});
  const auto& f = file.fields;
  const std::pair<const char*, const std::vector<std::string>*> fields[] = {
      {"input_names", &f.input_names}, {"input_units", &f.input_units}, {"output_names", &f.output_names},
      {"output_units", &f.output_units}};
  for (const auto& [name, values] : fields)
    if (!values->empty())
      seed.items.push_back(Item{"fields", name, true, Cls::str_vlen, {values->size()}, {}, {}, *values});
  return seed;
}

void mutate(FuzzedDataProvider& fdp, std::vector<Item>& items) {
  const int count = fdp.ConsumeIntegralInRange<int>(0, 6);
  for (int m = 0; m < count && fdp.remaining_bytes() > 0; ++m) {
    const int op = fdp.ConsumeIntegralInRange<int>(0, 5);
    if (op == 5 || items.empty()) {  // a new attribute or dataset under a known name
      static const char* groups[] = {"", "config", "weights", "tables", "normalization", "fields", "config"};
      Item item{groups[fdp.ConsumeIntegralInRange<int>(0, 6)], names[fdp.ConsumeIntegralInRange<std::size_t>(0, names.size() - 1)],
                false, Cls::f64, {}, {}, {}, {}};
      item.dataset = item.group != "" && item.group != "config";
      fuzz::convert(item, static_cast<Cls>(fdp.ConsumeIntegralInRange<int>(0, fuzz::kClasses - 1)));
      item.shape = fuzz::pick_shape(fdp, {}, item.dataset);
      fuzz::mutate_values(fdp, item, names);
      items.push_back(std::move(item));
      continue;
    }
    Item& item = items[fdp.ConsumeIntegralInRange<std::size_t>(0, items.size() - 1)];
    switch (op) {
      case 0: items.erase(items.begin() + (&item - items.data())); break;
      case 1: fuzz::convert(item, static_cast<Cls>(fdp.ConsumeIntegralInRange<int>(0, fuzz::kClasses - 1))); break;
      case 2: item.shape = fuzz::pick_shape(fdp, item.shape, item.dataset); break;
      default: fuzz::mutate_values(fdp, item, names); break;
    }
  }
}

// Points of the grid of a spherical model (its in_shape or img_size), else a picked count.
surrogate::index_t point_count(FuzzedDataProvider& fdp, const surrogate::ModelFile& file) {
  for (const char* key : {"in_shape", "img_size"}) {
    if (!file.config.has(key)) continue;
    try {
      const auto shape = file.config.get_int_list(key);
      if (shape.size() == 2 && shape[0] > 0 && shape[1] > 0 && shape[0] * shape[1] <= 4096 && fdp.ConsumeBool())
        return shape[0] * shape[1];
    } catch (const surrogate::Error&) {
    }
  }
  static constexpr surrogate::index_t counts[] = {1, 2, 3, 5, 8, 17, 33, 64};
  return counts[fdp.ConsumeIntegralInRange<int>(0, 7)];
}

float value(FuzzedDataProvider& fdp) {
  return fdp.ConsumeIntegralInRange<int>(0, 15) == 0 ? static_cast<float>(fuzz::pick_real(fdp))
                                                      : fdp.ConsumeFloatingPointInRange<float>(-2.0f, 2.0f);
}

void run_once(FuzzedDataProvider& fdp, const surrogate::ModelFile& file, surrogate::Model& model) {
  const surrogate::SelfComm comm;
  const surrogate::index_t n = point_count(fdp, file);
  std::vector<std::int64_t> ids;
  if (fdp.ConsumeBool()) {  // a few samples, sample-major; sometimes a gap or a negative id
    const int samples = fdp.ConsumeIntegralInRange<int>(1, 3);
    for (surrogate::index_t i = 0; i < n; ++i) ids.push_back(i * samples / n);
    if (fdp.ConsumeIntegralInRange<int>(0, 7) == 0) ids[fdp.ConsumeIntegralInRange<std::size_t>(0, ids.size() - 1)] = fuzz::pick_int(fdp);
  }
  const auto layout = surrogate::SampleLayout::build(comm, n, ids.empty() ? nullptr : ids.data());
  surrogate::RunOptions options;
  options.threads = 1;
  options.allow_non_finite_output = fdp.ConsumeBool();
  options.reproducible = fdp.ConsumeIntegralInRange<int>(0, 3) == 0;
  if (fdp.ConsumeIntegralInRange<int>(0, 3) == 0) options.precision = surrogate::Precision::fp64;
  const int pd = model.position_dim();
  std::vector<float> positions(static_cast<std::size_t>(n * pd));
  for (float& p : positions) p = value(fdp);
  std::vector<std::int64_t> edges;
  surrogate::PointGeometry geometry;
  if (pd > 0) geometry.positions = positions.data(), geometry.ld_positions = pd;
  if (model.needs_edges() || fdp.ConsumeIntegralInRange<int>(0, 7) == 0) {
    const int e = fdp.ConsumeIntegralInRange<int>(0, 8);
    for (int k = 0; k < 2 * e; ++k) edges.push_back(fdp.ConsumeIntegralInRange<std::int64_t>(-1, n));
    geometry.edge_index = edges.data(), geometry.num_edges = e;
  }
  auto plan = model.plan(comm, layout, geometry, options);
  const int ci = model.in_channels(), co = model.out_channels();
  std::vector<float> in(static_cast<std::size_t>(n * std::max(ci, 1))), out(static_cast<std::size_t>(n * std::max(co, 1)));
  for (float& v : in) v = value(fdp);
  const auto b = static_cast<std::size_t>(layout.num_samples());
  std::vector<float> sample_in(b * static_cast<std::size_t>(std::max(model.sample_in_channels(), 1)));
  std::vector<float> sample_out(b * static_cast<std::size_t>(std::max(model.sample_out_channels(), 1)));
  for (float& v : sample_in) v = value(fdp);
  surrogate::Model::SampleArrays arrays{sample_in.data(), std::max(model.sample_in_channels(), 1), sample_out.data(),
                                        std::max(model.sample_out_channels(), 1)};
  model.predict(comm, *plan, in.data(), std::max(ci, 1), out.data(), std::max(co, 1), arrays, options);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* env = std::getenv("SURROGATE_SOURCE_DIR");
  const std::string root = env ? env : SURROGATE_SOURCE_DIR;
  for (const char* seed : {"flare/default/model.h5", "erwin/erwin_mpnn_norot.h5", "bsa/bsa_global.h5",
                           "hept/hept_src_small.h5", "hept/hept_src_pileup.h5", "sequoia/sequoia_seg.h5",
                           "sphere/models/s2_attention_self_qknorm/model.h5",
                           "sphere/models/st_sht_global_lobatto/model.h5"})
    seeds.push_back(load_seed(root + "/tests/data/" + seed));
  std::set<std::string> unique{"flare", "erwin", "bsa", "hept", "sequoia", "s2_attention", "sphere_transformer",
                               "s2_neighborhood_attention", "surrogate-model", "none", "shapenet_car"};
  for (const Seed& s : seeds)
    for (const Item& item : s.items) unique.insert(item.name);
  names.assign(unique.begin(), unique.end());
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = fuzz::scratch_path("surrogate_fuzz_model");
  FuzzedDataProvider fdp(data, size);
  std::vector<Item> items = seeds[fdp.ConsumeIntegralInRange<std::size_t>(0, seeds.size() - 1)].items;
  mutate(fdp, items);
  fuzz::write_file(path, items);
  try {
    const surrogate::ModelFile file = surrogate::ModelFile::read(path);
    auto model = surrogate::make_model(file);
    // A forward on a few points when the model is small (a fuzzed width could ask for seconds per input).
    if (model->parameter_count() <= 2'000'000) run_once(fdp, file, *model);
  } catch (const surrogate::Error&) {
  }
  std::remove(path.c_str());
  // Every HDF5 object the library opened is closed again, on every path.
  if (fuzz::open_hdf5_objects() != 0) __builtin_trap();
  fuzz::reset_hdf5();
  return 0;
}
