// The device counterparts of layers.hpp for the families' CUDA forwards (CUDA builds only): a layer's
// weights uploaded once into a device arena, and one call per layer — dense with activation and residual,
// LayerNorm / RMSNorm, row copies, row-wise sums and products, row maps — instead of kernel argument structs
// filled by hand. share/docs/adding-a-family.md, "Device forward".
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "surrogate/kernels/cpu.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_bsa_gate.hpp"  // row_map
#include "surrogate/kernels/cuda_point_layers.hpp"
#include "surrogate/model.hpp"  // Precision
#include "surrogate/norm_layer.hpp"

namespace surrogate::device {

using kernels::index_t;

/// The arithmetic of the device's dense layers for a run's precision: tf32 / bf16 on the tensor cores,
/// else FP32 (fp64 never reaches a device forward: Model::check_precision and the families refuse it).
inline kernels::cuda::MlpPrecision tensor_core_precision(Precision p) {
  switch (p) {
    case Precision::tf32: return kernels::cuda::MlpPrecision::tf32;
    case Precision::bf16: return kernels::cuda::MlpPrecision::bf16;
    case Precision::fp32:
    case Precision::fp64: break;
  }
  return kernels::cuda::MlpPrecision::fp32;
}

/// A layer's tensor-core fragments (pack_mlp_fragments), as offsets in a weight arena's words().
struct Fragments {
  std::size_t bf16 = 0, tf32 = 0;
};

/// The words of `f` for `precision` (tf32 or bf16) in an uploaded arena's words() at `words`.
inline const std::uint32_t* fragment_words(const std::uint32_t* words, const Fragments& f,
                                           kernels::cuda::MlpPrecision precision) {
  return words + (precision == kernels::cuda::MlpPrecision::bf16 ? f.bf16 : f.tf32);
}

/// A dense layer's place in a weight arena: the CPU's packed W^T (in x ldw) and its padded bias, and in
/// the arena's words its tensor-core fragments (pack_mlp_fragments) for bf16 and tf32.
struct Dense {
  std::size_t wt = 0, bias = 0;
  Fragments fragments;
  int in = 0, out = 0;
  index_t ldw = 0;
};

/// A norm's place in a weight arena (bias: LayerNorm with bias only).
struct Norm {
  std::size_t weight = 0, bias = 0;
  int dim = 0;
  bool has_bias = false, rms = false;
  float eps = 1e-5f;
};

/// A device array of at least n values (and at least one) on `device`, resized only when it must grow.
template <class T>
T* sized(kernels::cuda::DeviceBuffer<T>& b, std::int64_t n, int device) {
  b.resize(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)), device);
  return b.data();
}

/// The weights of a model, collected on the host and uploaded once (one device allocation).
class WeightArena {
 public:
  /// Appends `count` values at an offset that is a multiple of `alignment` floats (default 4: 16 bytes);
  /// returns the offset.
  std::size_t append(const float* values, std::size_t count, std::size_t alignment = 4) {
    const std::size_t offset = (host_.size() + alignment - 1) / alignment * alignment;
    host_.resize(offset);
    host_.insert(host_.end(), values, values + count);
    return offset;
  }
  std::size_t append(std::span<const float> values, std::size_t alignment = 4) {
    return append(values.data(), values.size(), alignment);
  }
  /// A packed Linear layer (W^T with its padded row stride, then the padded bias), and its tensor-core
  /// fragments in the words.
  Dense append_dense(const kernels::PackedLinear& layer) {
    Dense d;
    d.in = layer.in();
    d.out = layer.out();
    d.ldw = layer.out_pad();
    d.wt = append(layer.wt(), static_cast<std::size_t>(std::max(d.in, 1)) * static_cast<std::size_t>(d.ldw));
    d.bias = append(layer.bias(), static_cast<std::size_t>(d.ldw));
    d.fragments = append_fragments(layer.weight().data(), d.out, d.in);
    return d;
  }
  /// The tensor-core fragments of W (out, in), both precisions, appended to the words.
  Fragments append_fragments(const float* weight, int out, int in) {
    Fragments f;
    f.bf16 = words_host_.size();
    kernels::cuda::pack_mlp_fragments(weight, out, in, kernels::cuda::MlpPrecision::bf16, words_host_);
    f.tf32 = words_host_.size();
    kernels::cuda::pack_mlp_fragments(weight, out, in, kernels::cuda::MlpPrecision::tf32, words_host_);
    return f;
  }
  /// The words of `f` for `precision` (tf32 or bf16), once uploaded.
  const std::uint32_t* words(const Fragments& f, kernels::cuda::MlpPrecision precision) const {
    return fragment_words(words_.data(), f, precision);
  }
  /// A norm of `dim` channels (bias may be empty).
  Norm append_norm(std::span<const float> weight, std::span<const float> bias, bool rms, float eps) {
    Norm n;
    n.dim = static_cast<int>(weight.size());
    n.weight = append(weight);
    n.has_bias = !bias.empty();
    if (n.has_bias) n.bias = append(bias);
    n.rms = rms;
    n.eps = eps;
    return n;
  }
  /// A CPU norm layer's weights (and bias, LayerNorm) and its kind.
  Norm append_norm(const NormLayer& layer) {
    const auto dim = static_cast<std::size_t>(layer.dim());
    std::span<const float> bias;  // none: RMSNorm
    if (layer.bias() != nullptr) bias = {layer.bias(), dim};
    return append_norm({layer.weight(), dim}, bias, layer.rms(), layer.eps());
  }
  /// Copies the arena to `device` (synchronously: the host image may be released afterwards).
  void upload(int device, cudaStream_t stream) {
    device_.resize(std::max<std::size_t>(host_.size(), 1), device);
    if (!host_.empty()) kernels::cuda::copy_to_device(device_.data(), host_.data(), host_.size() * sizeof(float), stream);
    words_.resize(std::max<std::size_t>(words_host_.size(), 1), device);
    if (!words_host_.empty())
      kernels::cuda::copy_to_device(words_.data(), words_host_.data(), words_host_.size() * sizeof(std::uint32_t), stream);
    kernels::cuda::synchronize(stream);
    host_ = {};
    words_host_ = {};
  }
  const float* data() const { return device_.data(); }
  /// The layers' tensor-core fragments (Dense::fragments, append_fragments: offsets in them).
  const std::uint32_t* words() const { return words_.data(); }

 private:
  std::vector<float> host_;
  std::vector<std::uint32_t> words_host_;
  kernels::cuda::DeviceBuffer<float> device_;
  kernels::cuda::DeviceBuffer<std::uint32_t> words_;
};

/// Copies host values into dst (grown as needed) on `stream`. From pageable memory the runtime stages the
/// values before it returns, so `src` may be a temporary.
template <class T>
void upload(kernels::cuda::DeviceBuffer<T>& dst, std::span<const T> src, int device, cudaStream_t stream) {
  dst.resize(std::max<std::size_t>(src.size(), 1), device);
  if (!src.empty()) kernels::cuda::copy_to_device(dst.data(), src.data(), src.size() * sizeof(T), stream);
}

/// y = act(x W^T + b) (+ residual rows; `residual` may alias y): the CPU Linear's arithmetic in fp32, or
/// the tensor cores for tf32 / bf16 with `words` the arena's words().
inline void dense(const Dense& l, const float* weights, const float* x, index_t ldx, float* y, index_t ldy,
                  index_t rows, cudaStream_t stream, kernels::Activation act = kernels::Activation::none,
                  const float* residual = nullptr, index_t ld_residual = 0,
                  kernels::cuda::MlpPrecision precision = kernels::cuda::MlpPrecision::fp32,
                  const std::uint32_t* words = nullptr) {
  kernels::cuda::DenseArgs a;
  a.wt = weights + l.wt;
  a.bias = weights + l.bias;
  a.in = l.in;
  a.out = l.out;
  a.ldw = l.ldw;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.rows = rows;
  a.act = act;
  a.add = residual;
  a.ld_add = ld_residual;
  a.precision = precision;
  if (words && precision != kernels::cuda::MlpPrecision::fp32) a.fragments = fragment_words(words, l.fragments, precision);
  kernels::cuda::dense(a, stream);
}

/// LayerNorm / RMSNorm of `rows` rows (y may equal x).
inline void norm(const Norm& n, const float* weights, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
                 cudaStream_t stream) {
  kernels::cuda::NormArgs a;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.rows = rows;
  a.dim = n.dim;
  a.weight = weights + n.weight;
  a.bias = n.has_bias ? weights + n.bias : nullptr;
  a.eps = n.eps;
  a.rms = n.rms;
  kernels::cuda::norm(a, stream);
}

/// Row gather/scatter: dst[dst_index[r]] = src[src_index[r]] (an index array may be null: r itself).
inline void copy_rows(const float* src, index_t ld_src, const std::int64_t* src_index, float* dst, index_t ld_dst,
                      const std::int64_t* dst_index, index_t rows, int width, cudaStream_t stream) {
  if (rows <= 0) return;
  kernels::cuda::RowCopyArgs a;
  a.src = src;
  a.ld_src = ld_src;
  a.src_index = src_index;
  a.dst = dst;
  a.ld_dst = ld_dst;
  a.dst_index = dst_index;
  a.rows = rows;
  a.width = width;
  kernels::cuda::copy_rows(a, stream);
}

/// x = f(x) in place for `width` columns of `rows` rows: ReLU, sigmoid or tanh (kernels::cuda::RowMap).
inline void map_rows(kernels::cuda::RowMap op, float* x, index_t ld, index_t rows, int width, cudaStream_t stream) {
  kernels::cuda::RowMapArgs a;
  a.op = op;
  a.x = x;
  a.ld = ld;
  a.rows = rows;
  a.width = width;
  kernels::cuda::row_map(a, stream);
}

/// y = a + b (op add, a residual) or a * b (op multiply, a gate), row-wise; y may equal a or b.
inline void combine_rows(kernels::cuda::RowOp op, const float* a, index_t lda, const float* b, index_t ldb, float* y,
                         index_t ldy, index_t rows, int width, cudaStream_t stream) {
  kernels::cuda::RowBinaryArgs r;
  r.op = op;
  r.a = a;
  r.lda = lda;
  r.b = b;
  r.ldb = ldb;
  r.y = y;
  r.ldy = ldy;
  r.rows = rows;
  r.width = width;
  kernels::cuda::row_binary(r, stream);
}

}  // namespace surrogate::device
