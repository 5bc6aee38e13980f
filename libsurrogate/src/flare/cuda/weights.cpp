// FLARE's CUDA forward, its weights (forward.hpp): the checks of what the kernels cover and the upload.
// Every Linear is packed for the fused MLP kernel, the norms and the latent queries (latent_queries(),
// the CPU network's own) follow, all in one arena and one device allocation.
#include <algorithm>
#include <span>

#include "forward.hpp"

namespace surrogate::flare::cuda {
namespace {

/// Every tensor of the fused MLP's layer table and the latent queries start at a multiple of 64 floats.
constexpr std::size_t kAlignment = 64;

/// Error(unsupported) unless `device` is visible and the kernels cover the model: head width <= 64, every
/// MLP width <= 256.
void check_supported(const Config& cfg, int device) {
  std::string why;
  const int count = device == cu::kEmulatedDevice ? 0 : cu::device_count(&why);
  if (device != cu::kEmulatedDevice && (device < 0 || device >= count))
    throw Error(ErrorCode::unsupported, "CUDA device " + std::to_string(device) + " requested, but " +
                                            (count == 0 ? "no CUDA device is visible (" + why + ")"
                                                        : std::to_string(count) + " device(s) are visible"));
  std::vector<std::string> problems;
  if (cfg.head_dim() > cu::kMaxHeadDim)
    problems.push_back("head width " + std::to_string(cfg.head_dim()) + " > " + std::to_string(cu::kMaxHeadDim));
  auto width = [&](const char* what, int w) {
    if (w > cu::kMaxMlpWidth)
      problems.push_back(std::string(what) + " " + std::to_string(w) + " > " + std::to_string(cu::kMaxMlpWidth));
  };
  width("in_dim", cfg.in_dim);
  width("out_dim", cfg.out_dim);
  width("channel_dim", cfg.channel_dim);
  width("in_proj_hidden_dim", cfg.in_proj_hidden_dim);
  width("out_proj_hidden_dim", cfg.out_proj_hidden_dim);
  width("k_proj_hidden_dim", cfg.k_proj_hidden_dim);
  width("v_proj_hidden_dim", cfg.v_proj_hidden_dim);
  width("ffn_hidden_dim", cfg.ffn_hidden_dim);
  if (!problems.empty()) {
    std::string text;
    for (const auto& p : problems) text += (text.empty() ? "" : ", ") + p;
    throw Error(ErrorCode::unsupported, "the CUDA backend does not support this FLARE model (" + text +
                                            "); run it on the CPU (device 'cpu')");
  }
}

}  // namespace

Forward::Forward(const Config& cfg, const ModelFile& file, int device)
    : cfg_(cfg), device_(device), C_(cfg.channel_dim), H_(cfg.num_heads), M_(cfg.num_latents), E_(cfg.head_dim()) {
  try {
    check_supported(cfg, device);
    const LayerNames names(cfg);
    in_proj_ = add_mlp(file, "in_proj", cfg.in_dim, cfg.in_proj_hidden_dim, C_, cfg.num_layers_in_out_proj, false, true);
    if (cfg.out_proj_norm) out_norm_ = add_norm(file, names.out_norm());
    out_mlp_ = add_mlp(file, names.out_mlp(), C_, cfg.out_proj_hidden_dim, cfg.out_dim, cfg.num_layers_in_out_proj,
                       true, false);
    for (int b = 0; b < cfg.num_blocks; ++b) {
      Block blk;
      const std::string p = LayerNames::block(b);
      blk.norm1 = add_norm(file, names.norm1(b));
      blk.norm2 = add_norm(file, names.norm2(b));
      blk.k_proj = add_mlp(file, p + "att.k_proj", C_, cfg.k_proj_hidden_dim, C_, cfg.num_layers_k_proj, true, true);
      blk.v_proj = add_mlp(file, p + "att.v_proj", C_, cfg.v_proj_hidden_dim, C_, cfg.num_layers_v_proj, true, true);
      blk.ffn = add_mlp(file, p + "mlp", C_, cfg.ffn_hidden_dim, C_, cfg.num_layers_ffn, true, true);
      blk.out_proj = add_linear(file, p + "att.out_proj", C_, C_);
      if (cfg.qk_norm) blk.k_norm = add_norm(file, p + "att.k_norm");
      blk.q = weights_.append(std::span<const float>(latent_queries(file, cfg, b)), kAlignment);
      blocks_.push_back(blk);
    }
    slices_ = cu::encode_shape(M_).slices;
    kernels::cuda::DeviceGuard guard(device_);
    sm_count_ = cu::multiprocessor_count(device_);
    stream_ = cu::Stream(device_);
    ev_start_ = cu::Event(device_);
    ev_uploaded_ = cu::Event(device_);
    ev_computed_ = cu::Event(device_);
    ev_end_ = cu::Event(device_);
    upload(file.normalization);
  } catch (...) {
    detail::raise_current_cuda_error("flare", device);
  }
}

Forward::~Forward() = default;

/// The arena, then the layer table pointing into it, then the normalisation (synchronously).
void Forward::upload(const Normalization& nf) {
  weights_.upload(device_, stream_.get());
  std::vector<cu::MlpLayer> table;
  for (const LayerSpec& l : layer_specs_) {
    cu::MlpLayer d;
    d.weight_t = weights_.data() + l.weight_t;
    d.bias = weights_.data() + l.bias;
    d.in = l.in;
    d.out = l.out;
    d.ld = cu::mlp_weight_ld(l.out);
    d.act = l.act;
    d.add_input = l.add_input;
    table.push_back(d);
  }
  layer_specs_.clear();
  device::upload(layers_, std::span<const cu::MlpLayer>(table), device_, stream_.get());
  std::vector<double> norm;
  has_input_norm_ = nf.has_input();
  has_output_norm_ = nf.has_output();
  for (const auto* v : {&nf.input_mean, &nf.input_std, &nf.output_mean, &nf.output_std})
    norm.insert(norm.end(), v->begin(), v->end());
  device::upload(normalization_, std::span<const double>(norm), device_, stream_.get());
  stream_.synchronize();  // the host copies may go now
}

device::Norm Forward::add_norm(const ModelFile& file, const std::string& prefix) {
  std::span<const float> bias;
  if (!cfg_.rmsnorm) bias = file.weight(prefix + ".bias").values;
  return weights_.append_norm(file.weight(prefix + ".weight").values, bias, cfg_.rmsnorm, static_cast<float>(norm_eps(cfg_)));
}

Forward::Mlp Forward::add_linear(const ModelFile& file, const std::string& prefix, int in, int out) {
  Mlp m;
  m.first = static_cast<int>(layer_specs_.size());
  m.count = 1;
  m.in = in;
  m.out = out;
  m.max_width = std::max(in, out);
  std::vector<float> wt, bias;
  cu::pack_mlp_linear(file.weight(prefix + ".weight").values.data(), file.weight(prefix + ".bias").values.data(), out,
                      in, wt, bias);
  LayerSpec l;
  l.weight_t = weights_.append(std::span<const float>(wt), kAlignment);
  l.bias = weights_.append(std::span<const float>(bias), kAlignment);
  l.in = in;
  l.out = out;
  layer_specs_.push_back(l);
  return m;
}

Forward::Mlp Forward::add_mlp(const ModelFile& file, const std::string& prefix, int in, int hidden, int out,
                              int num_layers, bool input_residual, bool output_residual) {
  // FLARE.py's ResidualMLP (model-format.md 4.1): L = -1 is one Linear (+ x iff both residual flags and
  // in == out); else h = act(fc1 x) (+ x), h = h + act(fcs.j h), y = fc2 h (+ h).
  if (num_layers == -1) {
    Mlp m = add_linear(file, prefix + ".fc", in, out);
    layer_specs_.back().add_input = input_residual && output_residual && in == out;
    return m;
  }
  const kernels::Activation act = kernel_activation(cfg_);
  Mlp m;
  m.first = static_cast<int>(layer_specs_.size());
  m.in = in;
  m.out = out;
  m.max_width = std::max({in, hidden, out});
  add_linear(file, prefix + ".fc1", in, hidden);
  layer_specs_.back().act = act;
  layer_specs_.back().add_input = input_residual && in == hidden;
  for (int j = 0; j < num_layers; ++j) {
    add_linear(file, prefix + ".fcs." + std::to_string(j), hidden, hidden);
    layer_specs_.back().act = act;
    layer_specs_.back().add_input = true;
  }
  add_linear(file, prefix + ".fc2", hidden, out);
  layer_specs_.back().add_input = output_residual && hidden == out;
  m.count = static_cast<int>(layer_specs_.size()) - m.first;
  return m;
}

}  // namespace surrogate::flare::cuda
