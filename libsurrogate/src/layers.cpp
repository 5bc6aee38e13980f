#include "layers.hpp"

#include <algorithm>
#include <cmath>

#include "surrogate/error.hpp"

namespace surrogate {

kernels::PackedLinear pack_linear(const ModelFile& file, const std::string& prefix) {
  const Tensor32& w = file.weight(prefix + ".weight");
  const Tensor32& b = file.weight(prefix + ".bias");
  return kernels::PackedLinear(w.values.data(), b.values.data(), static_cast<int>(w.shape.at(0)),
                               static_cast<int>(w.shape.at(1)));
}

const std::vector<float>& batch_norm_variance(const ModelFile& file, const std::string& prefix) {
  const std::string name = prefix + ".running_var";
  const std::vector<float>& var = file.weight(name).values;
  for (std::size_t c = 0; c < var.size(); ++c)
    if (!(var[c] >= 0.0f))
      throw Error(ErrorCode::weights, "tensor '" + name + "' holds " +
                                          std::to_string(var[c]) + " at channel " + std::to_string(c) +
                                          ": a BatchNorm's running variance cannot be negative (eval mode would "
                                          "compute sqrt(var + eps) of a negative number, NaN for every point)");
  return var;
}

// ---------------------------------------------------------------------------------------------------

NormLayer::NormLayer(const ModelFile& file, const std::string& prefix, int dim, bool rms, double eps)
    : dim_(dim), rms_(rms), eps_(static_cast<float>(eps)) {
  const auto padded = static_cast<std::size_t>(kernels::round_up(dim, kernels::kPad));
  weight_.resize(padded);
  const Tensor32& w = file.weight(prefix + ".weight");
  for (int c = 0; c < dim; ++c) weight_[c] = w.values[static_cast<std::size_t>(c)];
  if (!rms) {
    bias_.resize(padded);
    const Tensor32& b = file.weight(prefix + ".bias");
    for (int c = 0; c < dim; ++c) bias_[c] = b.values[static_cast<std::size_t>(c)];
  }
}

NormLayer::NormLayer(const float* weight, const float* bias, int dim, bool rms, float eps)
    : dim_(dim), rms_(rms), eps_(eps) {
  const auto padded = static_cast<std::size_t>(kernels::round_up(dim, kernels::kPad));
  weight_.resize(padded);
  for (int c = 0; c < dim; ++c) weight_[static_cast<std::size_t>(c)] = weight != nullptr ? weight[c] : 1.0f;
  if (!rms) {
    bias_.resize(padded);
    for (int c = 0; c < dim; ++c) bias_[static_cast<std::size_t>(c)] = bias != nullptr ? bias[c] : 0.0f;
  }
}

void NormLayer::apply(const CpuKernels& k, const float* x, index_t ldx, float* y, index_t ldy, index_t rows) const {
  kernels::NormArgs a;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.rows = rows;
  a.dim = dim_;
  a.weight = weight_.data();
  a.bias = rms_ ? nullptr : bias_.data();
  a.eps = eps_;
  a.rms = rms_;
  k.norm(a);
}

void NormLayer::apply_vector(float* x) const {
  float mean = 0.0f;
  if (!rms_) {
    for (int c = 0; c < dim_; ++c) mean += x[c];
    mean /= static_cast<float>(dim_);
  }
  float var = 0.0f;
  for (int c = 0; c < dim_; ++c) var += (x[c] - mean) * (x[c] - mean);
  var /= static_cast<float>(dim_);
  const float rstd = 1.0f / std::sqrt(var + eps_);
  for (int c = 0; c < dim_; ++c) x[c] = (x[c] - mean) * rstd * weight_[c] + (rms_ ? 0.0f : bias_[c]);
}

void NormLayer::apply_grouped(float* x, index_t ldx, index_t rows, int groups) const {
  for (index_t r = 0; r < rows; ++r)
    for (int g = 0; g < groups; ++g) apply_vector(x + r * ldx + static_cast<index_t>(g) * dim_);
}

// ---------------------------------------------------------------------------------------------------

ResidualMlp::ResidualMlp(const ModelFile& file, const std::string& prefix, int in, int hidden, int out,
                         int num_layers, kernels::Activation act, bool input_residual, bool output_residual)
    : in_(in), hidden_(hidden), out_(out), num_layers_(num_layers), act_(act) {
  if (num_layers == -1) {
    single_residual_ = input_residual && output_residual && in == out;
    layers_.push_back(pack_linear(file, prefix + ".fc"));
    return;
  }
  input_residual_ = input_residual && in == hidden;
  output_residual_ = output_residual && hidden == out;
  layers_.push_back(pack_linear(file, prefix + ".fc1"));
  for (int j = 0; j < num_layers; ++j) layers_.push_back(pack_linear(file, prefix + ".fcs." + std::to_string(j)));
  layers_.push_back(pack_linear(file, prefix + ".fc2"));
}

int ResidualMlp::scratch_width() const {
  return num_layers_ == -1 ? 0 : static_cast<int>(kernels::round_up(hidden_, kernels::kPad));
}

void ResidualMlp::run(const CpuKernels& k, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
                      float* scratch_a, float* scratch_b, index_t ld_scratch, const float* extra,
                      index_t ld_extra) const {
  // Blocks of rows small enough that a layer's input, output and weights stay in cache together.
  const index_t block = std::max(k.linear_rows, 1);
  for (index_t r0 = 0; r0 < rows; r0 += block)
    run_rows(k, x + r0 * ldx, ldx, y + r0 * ldy, ldy, std::min(block, rows - r0), scratch_a, scratch_b, ld_scratch,
             extra ? extra + r0 * ld_extra : nullptr, ld_extra);
}

void ResidualMlp::run_rows(const CpuKernels& k, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
                           float* scratch_a, float* scratch_b, index_t ld_scratch, const float* extra,
                           index_t ld_extra) const {
  kernels::LinearArgs a;
  a.rows = rows;
  if (num_layers_ == -1) {
    a.layer = &layers_[0];
    a.x = x;
    a.ldx = ldx;
    a.y = y;
    a.ldy = ldy;
    a.act = kernels::Activation::none;
    a.add1 = single_residual_ ? x : nullptr;
    a.ld_add1 = ldx;
    a.add2 = extra;
    a.ld_add2 = ld_extra;
    k.linear(a);
    return;
  }
  // fc1
  a.layer = &layers_[0];
  a.x = x;
  a.ldx = ldx;
  a.y = scratch_a;
  a.ldy = ld_scratch;
  a.act = act_;
  a.add1 = input_residual_ ? x : nullptr;
  a.ld_add1 = ldx;
  k.linear(a);
  // fcs.j: h = h + act(fcs.j h)
  float* current = scratch_a;
  float* next = scratch_b;
  for (int j = 0; j < num_layers_; ++j) {
    a.layer = &layers_[1 + static_cast<std::size_t>(j)];
    a.x = current;
    a.ldx = ld_scratch;
    a.y = next;
    a.ldy = ld_scratch;
    a.add1 = current;
    a.ld_add1 = ld_scratch;
    k.linear(a);
    std::swap(current, next);
  }
  // fc2
  a.layer = &layers_.back();
  a.x = current;
  a.ldx = ld_scratch;
  a.y = y;
  a.ldy = ldy;
  a.act = kernels::Activation::none;
  a.add1 = output_residual_ ? current : nullptr;
  a.ld_add1 = ld_scratch;
  a.add2 = extra;
  a.ld_add2 = ld_extra;
  k.linear(a);
}

}  // namespace surrogate
