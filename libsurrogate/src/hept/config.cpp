// HEPT's /config: reading and checking it, the tensors it implies, its description (`surrogate info`).
// share/docs/model-format.md §4.5, share/docs/hept.md.
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/hept.hpp"

namespace surrogate::hept {
namespace {

void add_linear(ExpectedShapes& s, const std::string& prefix, int out, int in, bool bias = true) {
  s[prefix + ".weight"] = {out, in};
  if (bias) s[prefix + ".bias"] = {out};
}

}  // namespace

Config Config::from_attributes(const AttributeMap& a) {
  Config c;
  auto positive = [&](const char* name, int max = 1 << 20) {
    const std::int64_t v = a.get_int(name);
    if (v < 1 || v > max)
      throw Error(ErrorCode::format, "/config attribute '" + std::string(name) + "' must be an integer in 1.." +
                                         std::to_string(max) + ", found " + std::to_string(v));
    return static_cast<int>(v);
  };
  const std::string layout = a.has("layout") ? a.get_string("layout") : std::string("example");
  if (layout == "src") {
    c.layout = Layout::src;
    auto expect = [&](const char* name, const char* value) {
      if (a.has(name) && a.get_string(name) != value)
        throw Error(ErrorCode::unsupported, "/config attribute '" + std::string(name) + "' is '" + a.get_string(name) +
                                                "': the src layout runs " + name + " '" + value + "' only");
    };
    expect("attn_type", "hept");
    expect("task", "tracking");
    expect("pe_type", "none");
  } else if (layout != "example") {
    throw Error(ErrorCode::format, "/config attribute 'layout' must be 'example' or 'src', found '" + layout + "'");
  }
  c.in_dim = positive("in_dim");
  c.coords_dim = positive("coords_dim", 64);
  if (c.coords_dim < 2)
    throw Error(ErrorCode::format, "/config attribute 'coords_dim' must be at least 2 (eta and phi first)");
  const std::int64_t classes = a.get_int("num_classes", 0);
  if (classes < 0 || classes > (1 << 20) || (classes > 0 && c.layout == Layout::src))
    throw Error(ErrorCode::format, "/config attribute 'num_classes' must be 0 (no out_proj) or positive");
  c.num_classes = static_cast<int>(classes);
  // Beyond kMaxBlockSize a tiny graph, padded to one bucket, would already ask for runaway work.
  c.block_size = positive("block_size", kMaxBlockSize);
  c.n_hashes = positive("n_hashes", 64);
  c.num_heads = positive("num_heads", 256);
  c.h_dim = positive("h_dim", 4096);
  if (c.h_dim < 2)
    throw Error(ErrorCode::format, "/config attribute 'h_dim' must be at least 2 (output width h_dim/2)");
  c.n_layers = positive("n_layers", 256);
  c.num_w_per_dist = positive("num_w_per_dist", 1024);
  c.num_regions = static_cast<int>(a.get_int("num_regions", 0));
  return c;
}

ExpectedShapes Config::expected_shapes() const {
  ExpectedShapes s;
  const int hd = num_heads * h_dim;
  s["regions"] = {n_hashes, 2, num_heads};
  add_linear(s, "feat_encoder.0", h_dim, in_dim);
  add_linear(s, "feat_encoder.2", h_dim, h_dim);
  for (int l = 0; l < n_layers; ++l) {
    const std::string p = "attns." + std::to_string(l) + ".";
    add_linear(s, p + "w_q", hd, h_dim, false);
    add_linear(s, p + "w_k", hd, h_dim, false);
    add_linear(s, p + "w_v", hd, h_dim, false);
    add_linear(s, p + "attn.out_linear", h_dim, hd);
    s[p + "attn.e2lsh.alpha"] = {num_heads, hash_dim(), n_hashes};
    if (layout == Layout::src) s[p + "attn.e2lsh.beta"] = {1, n_hashes};  // unused by the forward
    s[p + "norm1.weight"] = s[p + "norm1.bias"] = s[p + "norm2.weight"] = s[p + "norm2.bias"] = {h_dim};
    add_linear(s, p + "ff.0", h_dim, h_dim);
    add_linear(s, p + "ff.2", h_dim, h_dim);
    add_linear(s, p + "w_rpe", hd, num_w_per_dist * (coords_dim - 1));
  }
  add_linear(s, "W", h_dim / 2, h_dim * (n_layers + 1), false);
  add_linear(s, "mlp_out.lins.0", 256, h_dim / 2);
  for (int j = 1; j < 4; ++j) add_linear(s, "mlp_out.lins." + std::to_string(j), 256, 256);
  add_linear(s, "mlp_out.lins.4", h_dim / 2, 256);
  for (int j = 0; j < 4; ++j)
    s["mlp_out.norms." + std::to_string(j) + ".weight"] = s["mlp_out.norms." + std::to_string(j) + ".bias"] = {256};
  if (num_classes > 0) add_linear(s, "out_proj", num_classes, h_dim / 2);
  return s;
}

std::vector<std::pair<std::string, std::string>> Config::describe() const {
  return {
      {"layout", layout == Layout::src ? "src (one graph, zero padding with +inf keys, additive region shift)"
                                       : "example (padding by duplication, bit-packed region codes)"},
      {"channels", "in_dim " + std::to_string(in_dim) + ", coords_dim " + std::to_string(coords_dim) +
                       " (eta, phi first), h_dim " + std::to_string(h_dim) + ", out " + std::to_string(out_dim())},
      {"layers", std::to_string(n_layers) + " HEPT blocks, " + std::to_string(num_heads) + " heads"},
      {"hashing", std::to_string(n_hashes) + " E2LSH tables (OR), eta x phi regions (AND, num_regions " +
                      std::to_string(num_regions) + "), buckets of " + std::to_string(block_size)},
      {"sorts", "stable (ties by the point's index within its graph)"},
      {"precision", "fp32 or fp64 (CPU); the shipped tracking checkpoint needs fp64"},
      {"multi-rank", "whole samples gathered on owner ranks (global-id order), results returned; bit widths and "
                         "ranges global; bitwise the one-process result"},
      {"device forward", "none (CPU only)"}};
}

}  // namespace surrogate::hept
