// The single-layer model files' configuration (config.hpp) and the operators of their files
// (surrogate/sphere/layer_file.hpp).
#include "config.hpp"

#include <algorithm>
#include <iterator>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/sphere/layer_file.hpp"

namespace surrogate::sphere {

namespace {

std::vector<float> weight_or_empty(const ModelFile& f, const std::string& key) {
  return f.weights.count(key) ? f.weight(key).values : std::vector<float>{};
}

}  // namespace

void refuse_between_grids(const ModelFile& f, bool neighborhood) {
  const AttributeMap& a = f.config;
  const std::string& family = f.architecture;
  const std::string where = "'" + f.path + "' " + family;
  const auto in_shape = detail::grid_shape(a, "in_shape", where);
  const auto out_shape = a.has("out_shape") ? detail::grid_shape(a, "out_shape", where) : in_shape;
  if (in_shape == out_shape) return;
  throw Error(ErrorCode::unsupported,
              "'" + f.path + "': " + family + " with in_shape != out_shape (" + std::to_string(in_shape[0]) + "x" +
                  std::to_string(in_shape[1]) + " -> " + std::to_string(out_shape[0]) + "x" +
                  std::to_string(out_shape[1]) +
                  ") is not a generic Model: its query lies on the output grid and its keys/values on the input "
                  "grid (two fields), while a Model maps each input point to one output row; build the operator "
                  "with surrogate::sphere::" + (neighborhood ? "neighborhood_attention_from_file" : "attention_from_file") +
                  " (surrogate/sphere/layer_file.hpp) and call its forward(query, key, value)");
}

LayerSetup layer_setup(const ModelFile& f, bool neighborhood, bool between_grids) {
  const AttributeMap& a = f.config;
  const std::string family = f.architecture;
  detail::check_release(a, family);
  LayerSetup s;
  AttentionS2Config& c = s.att;
  c.in_channels = static_cast<int>(a.get_size("in_channels", 1));
  c.num_heads = static_cast<int>(a.get_size_or("num_heads", 1, 1));
  if (!between_grids) refuse_between_grids(f, neighborhood);
  const auto in_shape = detail::grid_shape(a, "in_shape", family);
  const auto out_shape = a.has("out_shape") ? detail::grid_shape(a, "out_shape", family) : in_shape;
  c.nlat_in = static_cast<int>(in_shape[0]);
  c.nlon_in = static_cast<int>(in_shape[1]);
  c.nlat_out = static_cast<int>(out_shape[0]);
  c.nlon_out = static_cast<int>(out_shape[1]);
  c.grid_in = parse_grid(a.has("grid_in") ? a.get_string("grid_in") : "equiangular", "grid_in");
  c.grid_out = parse_grid(a.has("grid_out") ? a.get_string("grid_out") : "equiangular", "grid_out");
  c.bias = a.has("bias") ? a.get_bool("bias") : true;
  c.use_qknorm = a.has("use_qknorm") && a.get_bool("use_qknorm");
  // Absent (0) means "as in_channels"; present, they must be positive.
  c.k_channels = static_cast<int>(a.get_size_or("k_channels", 0, 1));
  c.out_channels = static_cast<int>(a.get_size_or("out_channels", 0, 1));
  if (a.has("scale")) {
    c.scale_mode = a.has("scale_is_tensor") && a.get_bool("scale_is_tensor") ? ScaleMode::tensor : ScaleMode::value;
    c.scale = static_cast<float>(a.get_positive("scale"));
  }
  AttentionS2Weights& w = s.weights;
  w.q_weights = f.weight("q_weights").values;
  w.k_weights = f.weight("k_weights").values;
  w.v_weights = f.weight("v_weights").values;
  w.proj_weights = f.weight("proj_weights").values;
  w.q_bias = weight_or_empty(f, "q_bias");
  w.k_bias = weight_or_empty(f, "k_bias");
  w.v_bias = weight_or_empty(f, "v_bias");
  w.proj_bias = weight_or_empty(f, "proj_bias");
  w.q_norm_weights = weight_or_empty(f, "q_norm_weights");
  w.k_norm_weights = weight_or_empty(f, "k_norm_weights");
  if (neighborhood) {
    NeighborhoodAttentionS2Config& n = s.nbh;
    n.in_channels = c.in_channels;
    n.num_heads = c.num_heads;
    n.nlat_in = c.nlat_in;
    n.nlon_in = c.nlon_in;
    n.nlat_out = c.nlat_out;
    n.nlon_out = c.nlon_out;
    n.grid_in = c.grid_in;
    n.grid_out = c.grid_out;
    n.bias = c.bias;
    n.use_qknorm = c.use_qknorm;
    n.k_channels = c.k_channels;
    n.out_channels = c.out_channels;
    n.scale_mode = c.scale_mode;
    n.scale = c.scale;
    n.theta_cutoff = a.get_double("theta_cutoff", 0.0);
  }
  // Every stored tensor must be one the operator takes (the operator checks the sizes of those).
  for (const auto& [key, t] : f.weights) {
    static const char* known[] = {"q_weights", "k_weights", "v_weights", "proj_weights", "q_bias",
                                  "k_bias",    "v_bias",    "proj_bias", "q_norm_weights", "k_norm_weights"};
    const std::string& name = key;  // a structured binding cannot be captured before clang 16
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return name == k; }) == std::end(known))
      throw Error(ErrorCode::weights, "'" + f.path + "': unexpected tensor '" + key + "' for " + family);
  }
  return s;
}

std::int64_t count_parameters(const ModelFile& f) {
  std::int64_t n = 0;
  for (const auto& [key, t] : f.weights) n += t.numel();
  return n;
}


AttentionS2 attention_from_file(const ModelFile& file) {
  if (file.architecture != "s2_attention")
    throw Error(ErrorCode::format, "'" + file.path + "': attention_from_file needs an s2_attention file, not " +
                                       file.architecture);
  LayerSetup s = layer_setup(file, false, true);
  return AttentionS2(s.att, s.weights);
}

NeighborhoodAttentionS2 neighborhood_attention_from_file(const ModelFile& file) {
  if (file.architecture != "s2_neighborhood_attention")
    throw Error(ErrorCode::format, "'" + file.path + "': neighborhood_attention_from_file needs an "
                                   "s2_neighborhood_attention file, not " + file.architecture);
  LayerSetup s = layer_setup(file, true, true);
  return NeighborhoodAttentionS2(s.nbh, s.weights);
}

}  // namespace surrogate::sphere
