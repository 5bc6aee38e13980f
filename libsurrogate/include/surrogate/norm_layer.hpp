// The one norm layer of the families' CPU forwards: a LayerNorm or RMSNorm of a model file, its weights
// padded for the CPU kernels (the dense layer is kernels::PackedLinear; the others: src/layers.hpp).
#pragma once

#include <string>

#include "surrogate/kernels/cpu.hpp"
#include "surrogate/model_file.hpp"

namespace surrogate {

/// LayerNorm (weight, bias) or RMSNorm (weight) over `dim` channels.
class NormLayer {
 public:
  NormLayer() = default;
  NormLayer(const ModelFile& file, const std::string& prefix, int dim, bool rms, double eps);
  /// From values: `dim` weights and (LayerNorm) biases; a null pointer gives weights 1 / biases 0.
  NormLayer(const float* weight, const float* bias, int dim, bool rms, float eps);
  void apply(const kernels::CpuKernels& k, const float* x, kernels::index_t ldx, float* y, kernels::index_t ldy,
             kernels::index_t rows) const;
  /// Normalises each of the `groups` consecutive slices of dim() channels of every row, in place (the
  /// q/k norms over the head width).
  void apply_grouped(float* x, kernels::index_t ldx, kernels::index_t rows, int groups) const;
  /// Normalises one vector of dim() values in place.
  void apply_vector(float* x) const;
  int dim() const { return dim_; }
  bool rms() const { return rms_; }
  float eps() const { return eps_; }
  const float* weight() const { return weight_.data(); }  // padded with zeros
  const float* bias() const { return rms_ ? nullptr : bias_.data(); }

 private:
  int dim_ = 0;
  bool rms_ = false;
  float eps_ = 0.0f;
  kernels::AlignedBuffer<float> weight_, bias_;  // padded to kPad with zeros
};

}  // namespace surrogate
