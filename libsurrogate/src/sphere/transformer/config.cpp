// SphericalTransformer configuration (/config attributes) and the official state_dict shapes.
#include <cmath>
#include <numbers>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/transformer.hpp"
#include "../config.hpp"

namespace surrogate::sphere {
namespace {

[[noreturn]] void bad(const std::string& what) { throw Error(ErrorCode::format, "sphere_transformer /config: " + what); }

template <class Enum, std::size_t N>
Enum choose(const AttributeMap& a, const char* name, const char* fallback, const std::pair<const char*, Enum> (&choices)[N]) {
  const std::string value = a.has(name) ? a.get_string(name) : fallback;
  std::string known;
  for (const auto& [text, e] : choices) {
    if (value == text) return e;
    known += (known.empty() ? "'" : ", '") + std::string(text) + "'";
  }
  bad("attribute '" + std::string(name) + "' is '" + value + "'; expected one of " + known);
}

/// The official SphericalTransformer's DISCO cutoff factor per basis: it knows "piecewise linear", "morlet"
/// and "zernike" only (a KeyError for the others, which the model therefore never had).
double cutoff_factor(const std::string& basis_type) {
  if (basis_type == "piecewise linear" || basis_type == "morlet") return 0.5;
  if (basis_type == "zernike") return std::sqrt(2.0);
  throw Error(ErrorCode::unsupported,
              "sphere_transformer /config: filter_basis_type '" + basis_type +
                  "' has no DISCO cutoff in torch-harmonics' SphericalTransformer; accepted values: 'piecewise linear', "
                  "'morlet', 'zernike'");
}

}  // namespace

double TransformerConfig::disco_cutoff(int nlat_for_cutoff) const {
  const double factor = cutoff_factor(filter_basis_type);
  return (encoder_kernel_shape.at(0) + 1) * factor * std::numbers::pi / static_cast<double>(nlat_for_cutoff - 1);
}

double TransformerConfig::attention_cutoff() const {
  if (theta_cutoff > 0.0) return theta_cutoff;
  return (7.0 / std::sqrt(std::numbers::pi)) * std::numbers::pi / static_cast<double>(internal_nlat() - 1);
}

TransformerConfig TransformerConfig::from_attributes(const AttributeMap& a) {
  TransformerConfig c;
  c.torch_harmonics_version = detail::check_release(a, "sphere_transformer");
  const auto img = detail::grid_shape(a, "img_size", "sphere_transformer");
  c.nlat = static_cast<int>(img[0]);
  c.nlon = static_cast<int>(img[1]);
  c.grid = parse_grid(a.has("grid") ? a.get_string("grid") : "equiangular", "grid");
  c.grid_internal = parse_grid(a.has("grid_internal") ? a.get_string("grid_internal") : "legendre-gauss", "grid_internal");
  c.scale_factor = static_cast<int>(a.get_size_or("scale_factor", 3, 1));
  c.in_chans = static_cast<int>(a.get_size_or("in_chans", 3, 1));
  c.out_chans = static_cast<int>(a.get_size_or("out_chans", 3, 1));
  c.embed_dim = static_cast<int>(a.get_size_or("embed_dim", 256, 1));
  c.num_layers = static_cast<int>(a.get_size_or("num_layers", 4, 0));
  c.activation = choose<MlpActivation>(a, "activation_function", "gelu",
                                       {{"gelu", MlpActivation::gelu}, {"relu", MlpActivation::relu},
                                        {"identity", MlpActivation::identity}});
  if (a.has("encoder_kernel_shape")) {
    c.encoder_kernel_shape.clear();
    for (auto k : a.get_size_list("encoder_kernel_shape", 1, 64)) c.encoder_kernel_shape.push_back(static_cast<int>(k));
  }
  c.filter_basis_type = a.has("filter_basis_type") ? a.get_string("filter_basis_type") : "morlet";
  c.basis_norm_mode = a.has("basis_norm_mode") ? a.get_string("basis_norm_mode") : "nodal";
  c.num_heads = static_cast<int>(a.get_size_or("num_heads", 1, 1));
  c.use_mlp = a.has("use_mlp") ? a.get_bool("use_mlp") : true;
  c.mlp_ratio = a.get_double("mlp_ratio", 2.0);
  if (c.mlp_ratio < 0.0 || c.mlp_ratio > 64.0) bad("attribute 'mlp_ratio' must lie in [0, 64]");
  c.drop_rate = a.get_double("drop_rate", 0.0);
  c.normalization_layer = choose<BlockNorm>(a, "normalization_layer", "none",
                                            {{"none", BlockNorm::none}, {"instance_norm", BlockNorm::instance_norm},
                                             {"layer_norm", BlockNorm::layer_norm}});
  c.residual_prediction = a.has("residual_prediction") && a.get_bool("residual_prediction");
  c.pos_embed = choose<PositionEmbedding>(a, "pos_embed", "spectral",
                                          {{"none", PositionEmbedding::none},
                                           {"sequence", PositionEmbedding::sequence},
                                           {"spectral", PositionEmbedding::spectral},
                                           {"learnable lat", PositionEmbedding::learnable_lat},
                                           {"learnable latlon", PositionEmbedding::learnable_latlon}});
  c.upsample_sht = a.has("upsample_sht") && a.get_bool("upsample_sht");
  const std::string mode = a.has("attention_mode") ? a.get_string("attention_mode") : "neighborhood";
  if (mode != "neighborhood" && mode != "global")
    bad("attribute 'attention_mode' is '" + mode + "'; expected 'neighborhood' or 'global'");
  c.neighborhood = mode == "neighborhood";
  c.bias = a.has("bias") && a.get_bool("bias");
  c.theta_cutoff = a.get_double("theta_cutoff", 0.0);
  c.validate();
  return c;
}

void TransformerConfig::validate() const {
  if (nlat < 2 || nlon < 1) bad("img_size must be at least (2, 1)");
  if (scale_factor < 1) bad("scale_factor must be at least 1");
  if (internal_nlat() < 2 || internal_nlon() < 1)
    bad("the internal grid ((nlat - 1) / scale_factor + 1, nlon / scale_factor) = (" + std::to_string(internal_nlat()) +
        ", " + std::to_string(internal_nlon()) + ") is too small");
  if (nlon % internal_nlon() != 0)
    bad("nlon (" + std::to_string(nlon) + ") must be a multiple of the internal nlon (" +
        std::to_string(internal_nlon()) + ") for the encoder's DISCO convolution");
  if (in_chans < 1 || out_chans < 1 || embed_dim < 1) bad("in_chans, out_chans and embed_dim must be positive");
  if (num_layers < 0) bad("num_layers must not be negative");
  if (num_heads < 1 || embed_dim % num_heads) bad("embed_dim must be a positive multiple of num_heads");
  if (encoder_kernel_shape.empty() || encoder_kernel_shape.size() > 2)
    bad("encoder_kernel_shape must hold one or two integers");
  if (use_mlp && mlp_hidden() < 1) bad("mlp_ratio gives an empty MLP");
  if (residual_prediction && in_chans != out_chans) bad("residual_prediction needs in_chans == out_chans");
  (void)parse_filter_basis(filter_basis_type);
  (void)cutoff_factor(filter_basis_type);
  (void)parse_basis_norm_mode(basis_norm_mode);
}

ExpectedShapes expected_shapes(const TransformerConfig& c) {
  using S = std::vector<std::int64_t>;
  const std::int64_t C = c.embed_dim, h = c.internal_nlat(), w = c.internal_nlon();
  const std::int64_t K = filter_basis_size(parse_filter_basis(c.filter_basis_type), c.encoder_kernel_shape);
  ExpectedShapes e;
  e["encoder.conv.weight"] = S{C, c.in_chans, K};
  e["decoder.conv.weight"] = S{c.out_chans, C, K};
  switch (c.pos_embed) {
    case PositionEmbedding::none: break;
    case PositionEmbedding::learnable_lat: e["pos_embed.position_embeddings"] = S{1, C, h, 1}; break;
    default: e["pos_embed.position_embeddings"] = S{1, C, h, w}; break;
  }
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    for (const char* norm : {"norm0", "norm1"}) {
      if (c.normalization_layer == BlockNorm::instance_norm) {
        e[b + norm + ".weight"] = S{C};
        e[b + norm + ".bias"] = S{C};
      } else if (c.normalization_layer == BlockNorm::layer_norm) {
        e[b + norm + ".norm.weight"] = S{C};
        e[b + norm + ".norm.bias"] = S{C};
      }
    }
    for (const char* m : {"q", "k", "v", "proj"}) {
      e[b + "self_attn." + m + "_weights"] = S{C, C, 1, 1};
      if (c.bias) e[b + "self_attn." + m + "_bias"] = S{C};
    }
    if (c.use_mlp) {
      const std::int64_t hid = c.mlp_hidden();
      e[b + "mlp.fwd.0.weight"] = S{hid, C, 1, 1};
      e[b + "mlp.fwd.0.bias"] = S{hid};
      e[b + (c.drop_rate > 0.0 ? "mlp.fwd.3.weight" : "mlp.fwd.2.weight")] = S{C, hid, 1, 1};
    }
  }
  return e;
}

}  // namespace surrogate::sphere
