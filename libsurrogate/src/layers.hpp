// Building blocks shared by the model families: norms and the residual MLP of FLARE.py, packed for the
// CPU kernels. They run on one block of rows (one thread); the family decides how blocks are spread.
#pragma once

#include <cmath>
#include <string>
#include <vector>

#include "surrogate/kernels/cpu.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/norm_layer.hpp"

namespace surrogate {

using kernels::AlignedBuffer;
using kernels::CpuKernels;
using kernels::index_t;

/// FLARE.py's ResidualMLP(in, hidden, out, num_layers, act, input_residual, output_residual).
class ResidualMlp {
 public:
  ResidualMlp() = default;
  ResidualMlp(const ModelFile& file, const std::string& prefix, int in, int hidden, int out, int num_layers,
              kernels::Activation act, bool input_residual, bool output_residual);
  /// y = mlp(x) [+ extra]; `extra` may alias y (in-place residual), x must not. scratch_a/b hold
  /// rows x scratch_width() floats each with row stride ld_scratch.
  void run(const CpuKernels& k, const float* x, index_t ldx, float* y, index_t ldy, index_t rows, float* scratch_a,
           float* scratch_b, index_t ld_scratch, const float* extra = nullptr, index_t ld_extra = 0) const;
  int scratch_width() const;
  void run_rows(const CpuKernels& k, const float* x, index_t ldx, float* y, index_t ldy, index_t rows, float* scratch_a,
                float* scratch_b, index_t ld_scratch, const float* extra, index_t ld_extra) const;
  int in() const { return in_; }
  int out() const { return out_; }
  // What a device forward needs to rebuild the MLP from these layers (the weights are held once).
  int num_layers() const { return num_layers_; }
  kernels::Activation act() const { return act_; }
  /// Whether a layer adds its input: fc (L = -1), fc1 (L >= 0), fc2 (L >= 0); every fcs.j does.
  bool single_residual() const { return single_residual_; }
  bool input_residual() const { return input_residual_; }
  bool output_residual() const { return output_residual_; }
  /// fc, or fc1, fcs.0 .. fcs.{L-1}, fc2.
  const std::vector<kernels::PackedLinear>& layers() const { return layers_; }

 private:
  int in_ = 0, hidden_ = 0, out_ = 0, num_layers_ = 0;
  kernels::Activation act_ = kernels::Activation::gelu_tanh;
  bool input_residual_ = false, output_residual_ = false, single_residual_ = false;
  std::vector<kernels::PackedLinear> layers_;  // fc, or fc1, fcs.0 .. fcs.{L-1}, fc2
};

/// Exact (erf) GELU in float32, as torch.nn.GELU() computes it.
inline float gelu_erf(float x) { return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752440f)); }

/// n values padded with zeros to a multiple of kPad; `fill_if_null` everywhere when values is null.
inline AlignedBuffer<float> padded_vector(const float* values, int n, float fill_if_null) {
  AlignedBuffer<float> out(static_cast<std::size_t>(kernels::round_up(n, kernels::kPad)));  // zeroed
  for (int c = 0; c < n; ++c) out[static_cast<std::size_t>(c)] = values ? values[c] : fill_if_null;
  return out;
}

/// Packs the Linear `prefix`.weight / .bias of a model file.
kernels::PackedLinear pack_linear(const ModelFile& file, const std::string& prefix);

/// The running variance `prefix`.running_var of an eval BatchNorm, checked: a variance is a mean of
/// squares, and a negative one makes var + eps < 0 and every prediction NaN in eval mode, so the model is
/// refused when it is built (Error(weights) naming the file, the tensor and the channel).
const std::vector<float>& batch_norm_variance(const ModelFile& file, const std::string& prefix);

}  // namespace surrogate
