// FLARE's CUDA forward, its weights (forward.hpp): the checks of what the kernels cover and the upload.
// Built from the CPU network's layers, the model's only host copy of its weights: every Linear packed for
// the fused MLP kernel, the norms and the latent queries follow, in one arena and one device allocation.
#include <algorithm>
#include <span>

#include "../../cuda_errors.hpp"
#include "forward.hpp"

namespace surrogate::flare::cuda {
namespace {

/// Every tensor of the fused MLP's layer table and the latent queries start at a multiple of 64 floats.
constexpr std::size_t kAlignment = 64;

/// Error(unsupported) unless `device` is visible and the kernels cover the model: head width <= 64, every
/// MLP width <= 256.
void check_supported(const Config& cfg, int device) {
  surrogate::detail::require_visible_device("flare", device);
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

Forward::Forward(const Config& cfg, const Network& network, const Normalization& normalization, int device)
    : cfg_(cfg), device_(device), C_(cfg.channel_dim), H_(cfg.num_heads), M_(cfg.num_latents), E_(cfg.head_dim()) {
  try {
    check_supported(cfg, device);
    in_proj_ = add_mlp(network.in_proj());
    if (network.out_norm()) out_norm_ = weights_.append_norm(*network.out_norm());
    out_mlp_ = add_mlp(network.out_mlp());
    for (const Network::Block& from : network.blocks()) {
      Block blk;
      blk.norm1 = weights_.append_norm(from.norm1);
      blk.norm2 = weights_.append_norm(from.norm2);
      blk.k_proj = add_mlp(from.k_proj);
      blk.v_proj = add_mlp(from.v_proj);
      blk.ffn = add_mlp(from.ffn);
      blk.out_proj = {static_cast<int>(layer_specs_.size()), 1, C_, C_, C_};
      add_linear(from.out_proj, kernels::Activation::none, false);
      if (from.k_norm) blk.k_norm = weights_.append_norm(*from.k_norm);
      blk.q = weights_.append(std::span<const float>(from.q.data(), from.q.size()), kAlignment);
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
    upload(normalization);
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
    d.bf16 = weights_.words(l.fragments, cu::MlpPrecision::bf16);
    d.tf32 = weights_.words(l.fragments, cu::MlpPrecision::tf32);
    d.in = l.in;
    d.out = l.out;
    d.ld = cu::mlp_weight_ld(l.out);
    d.act = l.act;
    d.add_input = l.add_input;
    table.push_back(d);
  }
  layer_specs_.clear();
  device::upload(layers_, std::span<const cu::MlpLayer>(table), device_, stream_.get());
  caller_ = std::make_unique<device::CallerRows>(nf, cfg_.in_dim, cfg_.out_dim, device_, stream_.get());
  stream_.synchronize();  // the host copies may go now
}

void Forward::add_linear(const kernels::PackedLinear& layer, kernels::Activation act, bool add_input) {
  // The CPU's packing holds W^T (in rows of out_pad values): back to PyTorch's (out, in) for the kernel's.
  const int in = layer.in(), out = layer.out();
  std::vector<float> weight(static_cast<std::size_t>(out) * static_cast<std::size_t>(in));
  for (int k = 0; k < in; ++k)
    for (int o = 0; o < out; ++o)
      weight[static_cast<std::size_t>(o) * in + k] = layer.wt()[static_cast<std::size_t>(k) * layer.out_pad() + o];
  std::vector<float> wt, bias;
  cu::pack_mlp_linear(weight.data(), layer.bias(), out, in, wt, bias);
  LayerSpec l;
  l.weight_t = weights_.append(std::span<const float>(wt), kAlignment);
  l.bias = weights_.append(std::span<const float>(bias), kAlignment);
  l.fragments = weights_.append_fragments(weight.data(), out, in);
  l.in = in;
  l.out = out;
  l.act = act;
  l.add_input = add_input;
  layer_specs_.push_back(l);
}

Forward::Mlp Forward::add_mlp(const ResidualMlp& mlp) {
  // FLARE.py's ResidualMLP (model-format.md 4.1), as ResidualMlp runs it: L = -1 is one Linear (+ x iff
  // both residual flags and in == out); else h = act(fc1 x) (+ x), h = h + act(fcs.j h), y = fc2 h (+ h).
  const auto& layers = mlp.layers();
  Mlp m;
  m.first = static_cast<int>(layer_specs_.size());
  m.count = static_cast<int>(layers.size());
  m.in = mlp.in();
  m.out = mlp.out();
  m.max_width = std::max(m.in, m.out);
  if (mlp.num_layers() == -1) {
    add_linear(layers.front(), kernels::Activation::none, mlp.single_residual());
    return m;
  }
  for (std::size_t j = 0; j < layers.size(); ++j) {
    const bool first = j == 0, last = j + 1 == layers.size();
    m.max_width = std::max(m.max_width, layers[j].out());
    add_linear(layers[j], last ? kernels::Activation::none : mlp.act(),
               first ? mlp.input_residual() : last ? mlp.output_residual() : true);
  }
  return m;
}

}  // namespace surrogate::flare::cuda
