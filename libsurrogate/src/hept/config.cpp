// HEPT's /config: reading and checking it, the tensors it implies, its description (`surrogate info`).
// share/docs/model-format.md §4.5, share/docs/hept.md.
#include <sstream>
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
    expect("pe_type", "none");
    const std::string task = a.has("task") ? a.get_string("task") : std::string("tracking");
    if (task == "pileup") c.task = Task::pileup;
    else if (task != "tracking")
      throw Error(ErrorCode::unsupported, "/config attribute 'task' is '" + task +
                                              "': the src layout runs task 'tracking' or 'pileup'");
  } else if (layout != "example") {
    throw Error(ErrorCode::format, "/config attribute 'layout' must be 'example' or 'src', found '" + layout + "'");
  }
  c.in_dim = positive("in_dim");
  c.coords_dim = positive("coords_dim", 64);
  if (c.coords_dim < 2)
    throw Error(ErrorCode::format, "/config attribute 'coords_dim' must be at least 2 (eta and phi first)");
  const std::int64_t classes = a.get_int("num_classes", c.task == Task::pileup ? 1 : 0);
  if (c.task == Task::pileup) {
    if (classes != 1)
      throw Error(ErrorCode::format, "/config attribute 'num_classes' must be 1 for task 'pileup' (out_proj to one "
                                     "probability), found " + std::to_string(classes));
  } else if (classes < 0 || classes > (1 << 20) || (classes > 0 && c.layout == Layout::src)) {
    throw Error(ErrorCode::format, "/config attribute 'num_classes' must be 0 (no out_proj) or positive (example "
                                   "layout), found " + std::to_string(classes));
  }
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
  c.num_regions = static_cast<int>(a.get_size_or("num_regions", 0, 0, std::int64_t{1} << 30));  // described only
  return c;
}

ExpectedShapes Config::expected_shapes() const {
  ExpectedShapes s;
  const int hd = num_heads * h_dim;
  s["regions"] = {n_hashes, 2, num_heads};
  if (task == Task::pileup) s["pids_enc.weight"] = {kPidClasses, kPidEmbedding};
  add_linear(s, "feat_encoder.0", h_dim, encoder_in());
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
      {"task", task == Task::pileup ? "pileup (last input column: particle-id class 0..6 into pids_enc; output: "
                                      "sigmoid probability)"
                                    : "tracking (output: the embedding" +
                                          std::string(num_classes > 0 ? " through out_proj)" : ")")},
      {"channels", "in_dim " + std::to_string(in_dim) + ", coords_dim " + std::to_string(coords_dim) +
                       " (eta, phi first), h_dim " + std::to_string(h_dim) + ", out " + std::to_string(out_dim())},
      {"layers", std::to_string(n_layers) + " HEPT blocks, " + std::to_string(num_heads) + " heads"},
      {"hashing", std::to_string(n_hashes) + " E2LSH tables (OR), eta x phi regions (AND, num_regions " +
                      std::to_string(num_regions) + "), buckets of " + std::to_string(block_size)},
      {"sorts", "stable (ties by the point's index within its graph)"},
      {"precision", "fp32 or fp64 (CPU), fp32 / tf32 / bf16 (CUDA; tf32 / bf16: the dense layers and the bucket "
                    "attention's products on the tensor cores); the shipped tracking checkpoint needs fp64"},
      {"multi-rank", "whole samples gathered on owner ranks (global-id order), results returned; bit widths and "
                         "ranges global; bitwise the one-process result"},
      {"device forward", "CUDA: whole graphs' geometry (regions, hashes, bucket sorts) and forward on the device; "
                         "a graph split over ranks sorts its buckets on the host"}};
}

void refuse_particle_class(const Config& cfg, float value, std::int64_t row) {
  std::ostringstream text;
  text << value;
  throw Error(ErrorCode::input, "hept pileup: input channel " + std::to_string(cfg.in_dim - 1) +
                                    " (the particle-id class, pids_enc = Embedding(7, 10)) of local point " +
                                    std::to_string(row) + " is " + text.str() + "; expected 0..6");
}

void check_particle_classes(const Config& cfg, const float* in, std::int64_t ld, std::int64_t rows) {
  if (cfg.task != Config::Task::pileup) return;
  const int column = cfg.in_dim - 1;
  for (std::int64_t i = 0; i < rows; ++i) {
    const float v = in[i * ld + column];
    // torch's .long() truncates toward zero: (-1, 7) holds the classes 0..6.
    if (!(v > kPidClassLow && v < kPidClassHigh)) refuse_particle_class(cfg, v, i);
  }
}

}  // namespace surrogate::hept
