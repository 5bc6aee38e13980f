// The spherical models' Ops on a CUDA device (CUDA builds only): ops::CudaOps (the shared members, one
// launch over all rows) and the spherical members of ../transformer/program.hpp, each the device operator's
// row-range forward (surrogate/sphere/attention_device.hpp, grid_ops_device.hpp) or the launches of
// kernels/cuda_sphere_*.hpp the device forward has always made, on the Ops' stream. `Upload` turns the CPU
// network's layers into these (program::convert). A family-local extension, as SphereHostOps.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "../../ops/cuda_ops.hpp"
#include "../transformer/host_ops.hpp"
#include "../transformer/program.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/sphere/attention_device.hpp"
#include "surrogate/sphere/grid_ops_device.hpp"

namespace surrogate::sphere {

/// A block's attention on the device: global or neighbourhood (one of the two).
struct DeviceAttention {
  std::optional<AttentionS2Device> global;
  std::optional<NeighborhoodAttentionS2Device> neighborhood;
  /// The projections' arithmetic (the operator's set_precision).
  void set_precision(Precision precision) {
    if (global) global->set_precision(precision);
    else neighborhood->set_precision(precision);
  }
};

/// The SHT upsampling on the kernels of cuda_sphere_sht.hpp with the CPU classes' tables and truncation:
/// analysis on the internal grid (nlat_in x nlon_in), synthesis on the image grid (nlat_out x nlon_out).
struct DeviceSht {
  int device = 0, nlat_in = 0, nlon_in = 0, nlat_out = 0, nlon_out = 0;
  int lmax_ = 0, mmax_ = 0, modes_in = 0, modes_out = 0, nyquist = -1;
  kernels::cuda::DeviceBuffer<float> analysis, synthesis;       // RealSHT::weights(), InverseRealSHT::table()
  kernels::cuda::DeviceBuffer<double> twiddle_in, twiddle_out;  // cos, sin(2 pi t / nlon) of both grids
  mutable kernels::cuda::DeviceBuffer<float> g;                 // the synthesis' Fourier rows
  int lmax() const { return lmax_; }
  int mmax() const { return mmax_; }
};

class SphereCudaOps : public ops::CudaOps {
 public:
  using Disco = DiscoConvS2Device;
  using Attention = DeviceAttention;
  using Resample = ResampleS2Device;
  using Sht = DeviceSht;

  SphereCudaOps(const float* weights, cudaStream_t stream) : CudaOps(weights, stream) {}
  SphereCudaOps(const device::WeightArena& arena, cudaStream_t stream, kernels::cuda::MlpPrecision precision)
      : CudaOps(arena, stream, precision) {}

  void disco(const program::DiscoArgs<Disco>& a) const {
    a.op->forward_rows(a.batch, a.in.data, a.in0, a.in1, a.out.data, a.out0, a.out1, stream());
  }
  void s2_attention(const program::AttentionArgs<Attention>& a) const {
    if (a.op->global) {
      if (a.kv0 != 0 || a.kv1 != a.op->global->host().config().nlat_in)
        throw Error(ErrorCode::internal, "s2 attention: global attention needs every key/value row");
      a.op->global->forward_rows(a.batch, a.lat0, a.lat1, a.q.data, a.kv.data, a.kv.data, a.out.data, stream());
    } else {
      a.op->neighborhood->forward_rows(a.batch, a.lat0, a.lat1, a.q.data, a.kv0, a.kv1, a.kv.data, a.kv.data,
                                       a.out.data, stream());
    }
  }
  void resample(const program::ResampleArgs<Resample>& a) const {
    a.op->forward_rows(a.batch, a.in.width, a.in.data, a.in0, a.in1, a.out.data, a.out0, a.out1, stream());
  }
  /// Per sample: x = enc + pos (combine_rows); without an embedding, enc copied unless it is x.
  void position(const program::PositionArgs<Vector>& a) const;
  void grid_row_sums(const program::RowSumsArgs& a) const;
  void grid_norm_stats(const program::NormStatsArgs<Norm>& a) const;
  void channel_affine(const program::AffineArgs& a) const;
  void relu(const ops::Rows& h) const;
  void sht_fourier(const program::ShtFourierArgs<Sht>& a) const;
  void sht_legendre(const program::ShtLegendreArgs<Sht>& a) const;
  void sht_synthesis(const program::ShtSynthesisArgs<Sht>& a) const;
  /// The coefficients move as rows (b*L + l)*M + m of 2C floats (the device kernels' layout).
  static std::pair<const ExchangePlan*, int> sht_coefficients(const TransformerBands::Exchanges& bands, int /*lmax*/,
                                                              int C) {
    return {&bands.sht_coefficients_device, 2 * C};
  }

  /// The CPU network's layers -> this Ops' (program::convert): the dense, norm and vector weights appended
  /// to `arena`; the device operators built on the CPU operators (which must outlive them: the host holds
  /// their tables and weights once).
  struct Upload {
    ops::CudaOps::Upload weights;
    int device = 0;
    cudaStream_t stream = nullptr;  // the tables' uploads (synchronized by the caller)

    Dense dense(const SphereHostOps::Dense& l) const { return weights(l); }
    Norm norm(const SphereHostOps::Norm& n) const { return n.dim() > 0 ? weights(n) : Norm{}; }
    Vector vector(const SphereHostOps::Vector& v) const { return weights(v); }
    std::unique_ptr<Disco> disco(const DiscoConvS2& op) const { return std::make_unique<Disco>(op, device); }
    std::unique_ptr<Resample> resample(const ResampleS2& op) const { return std::make_unique<Resample>(op, device); }
    std::unique_ptr<Sht> sht(const HostSht& op) const;
    std::unique_ptr<Attention> attention(const HostAttention& op) const;
  };

};

}  // namespace surrogate::sphere
