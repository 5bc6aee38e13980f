// The spherical models' Ops on the CPU: ops::HostOps (the shared members, one tile of rows inside the
// OpenMP loops) and the spherical members of program.hpp, each the CPU operator's row-range forward or the
// loop the CPU forward has always run. The spherical operators thread themselves (they are called once, from
// Exec::once); the row-wise members work on the tile they are given. A family-local extension rather than
// members of ops/host_ops.hpp: the operators and their arguments are the spherical family's own.
#pragma once

#include <algorithm>
#include <cmath>
#include <utility>
#include <variant>
#include <vector>

#include "../../ops/host_ops.hpp"
#include "program.hpp"
#include "surrogate/kernels/nan_keeping.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"
#include "surrogate/sphere/resample.hpp"
#include "surrogate/sphere/sht.hpp"

namespace surrogate::sphere {

/// A block's attention: global or neighbourhood (one of the two).
struct HostAttention {
  std::variant<std::monostate, AttentionS2, NeighborhoodAttentionS2> op;
};

/// The SHT upsampling: the analysis on the internal grid, the synthesis on the image grid (same lmax, mmax).
struct HostSht {
  RealSHT analysis;
  InverseRealSHT synthesis;
  int lmax() const { return analysis.lmax(); }
  int mmax() const { return analysis.mmax(); }
};

class SphereHostOps : public ops::HostOps {
 public:
  using Disco = DiscoConvS2;
  using Attention = HostAttention;
  using Resample = ResampleS2;
  using Sht = HostSht;
  using HostOps::HostOps;

  void disco(const program::DiscoArgs<Disco>& a) const {
    a.op->forward_rows(a.batch, a.in.data, a.in0, a.in1, a.out.data, a.out0, a.out1);
  }

  void s2_attention(const program::AttentionArgs<Attention>& a) const {
    if (const auto* g = std::get_if<AttentionS2>(&a.op->op))
      g->forward_rows(a.batch, a.lat0, a.lat1, a.q.data, a.kv.data, a.kv.data, a.out.data);
    else
      std::get<NeighborhoodAttentionS2>(a.op->op)
          .forward_rows(a.batch, a.lat0, a.lat1, a.q.data, a.kv0, a.kv1, a.kv.data, a.kv.data, a.out.data);
  }

  void resample(const program::ResampleArgs<Resample>& a) const {
    a.op->forward_rows(a.batch, a.in.width, a.in.data, a.in0, a.in1, a.out.data, a.out0, a.out1);
  }

  void position(const program::PositionArgs<Vector>& a) const {
    const float* pos = a.pos != nullptr && !a.pos->empty() ? a.pos->data() : nullptr;
    for (index_t r = 0; r < a.x.rows; ++r) {
      const index_t p = a.first_point + (a.row0 + r) % a.points;  // the point of the internal grid
      const float* enc = a.enc.row(r);
      float* x = a.x.row(r);
      for (int c = 0; c < a.x.width; ++c) x[c] = enc[c] + (pos != nullptr ? pos[p * a.pos_ld + c] : 0.0f);
    }
  }

  void grid_row_sums(const program::RowSumsArgs& a) const {
    const int C = a.x.width, tasks = a.batch * a.lat_rows;
    std::fill_n(a.part, static_cast<std::size_t>(tasks) * static_cast<std::size_t>(C), 0.0);
#pragma omp parallel for schedule(static)
    for (int t = 0; t < tasks; ++t) {
      double* acc = a.part + static_cast<std::size_t>(t) * static_cast<std::size_t>(C);
      const float* row = a.x.row(static_cast<index_t>(t) * a.nlon);
      if (a.mean == nullptr) {
        for (int lon = 0; lon < a.nlon; ++lon)
          for (int c = 0; c < C; ++c) acc[c] += static_cast<double>(row[lon * a.x.ld + c]);
        continue;
      }
      const double* ms = a.mean + static_cast<std::size_t>(t / a.lat_rows) * static_cast<std::size_t>(C);
      for (int lon = 0; lon < a.nlon; ++lon)
        for (int c = 0; c < C; ++c) {
          const double d = row[lon * a.x.ld + c] - ms[c];
          acc[c] += d * d;
        }
    }
  }

  void grid_norm_stats(const program::NormStatsArgs<Norm>& a) const {
    const auto C = static_cast<std::size_t>(a.C);
    std::vector<double> sum(static_cast<std::size_t>(a.batch) * C, 0.0);
    for (int b = 0; b < a.batch; ++b)
      for (int row = 0; row < a.nlat; ++row) {  // the rows in order
        const double* src = a.all + (static_cast<std::size_t>(b) * static_cast<std::size_t>(a.nlat) +
                                     static_cast<std::size_t>(row)) * C;
        for (std::size_t c = 0; c < C; ++c) sum[static_cast<std::size_t>(b) * C + c] += src[c];
      }
    if (!a.finish) {
      for (std::size_t i = 0; i < sum.size(); ++i) a.mean[i] = sum[i] / a.points;
      return;
    }
    const float* w = a.norm->weight();
    const float* bias = a.norm->bias();
    for (std::size_t i = 0; i < sum.size(); ++i) {
      const std::size_t c = i % C;
      const double inv = 1.0 / std::sqrt(sum[i] / a.points + 1e-6);
      a.scale[i] = static_cast<float>(inv * w[c]);
      a.shift[i] = static_cast<float>(bias[c] - a.mean[i] * inv * w[c]);
    }
  }

  void channel_affine(const program::AffineArgs& a) const {
    const int C = a.x.width;
    for (index_t r = 0; r < a.x.rows; ++r) {
      const index_t s = (a.row0 + r) / a.points;
      const float* scale = a.scale + s * C;
      const float* shift = a.shift + s * C;
      const float* x = a.x.row(r);
      float* y = a.y.row(r);
      for (int c = 0; c < C; ++c) y[c] = x[c] * scale[c] + shift[c];
    }
  }

  void relu(const ops::Rows& h) const {
    for (index_t r = 0; r < h.rows; ++r) {
      float* row = h.row(r);
      for (int c = 0; c < h.width; ++c) row[c] = kernels::relu_keep_nan(row[c]);
    }
  }

  void sht_fourier(const program::ShtFourierArgs<Sht>& a) const {
    const int C = a.x.width;
    const index_t points = a.x.rows / a.batch;
    const std::int64_t width = a.op->analysis.fourier_width(C);
    for (int b = 0; b < a.batch; ++b)
      a.op->analysis.fourier_rows(a.lat_rows, C, a.x.row(b * points), a.x.ld, a.fourier + b * a.lat_rows * width);
  }
  void sht_legendre(const program::ShtLegendreArgs<Sht>& a) const {
    a.op->analysis.legendre_orders(a.batch, a.C, a.m0, a.m1, a.orders, a.coeffs);
  }
  void sht_synthesis(const program::ShtSynthesisArgs<Sht>& a) const {
    a.op->synthesis.forward_rows_by_order(a.batch, a.out.width, a.coeffs, a.out.data, a.lat0, a.lat1);
  }
  /// The coefficients move as rows b*M + m of L*2C floats (RealSHT::legendre_orders' layout).
  static std::pair<const ExchangePlan*, int> sht_coefficients(const TransformerBands::Exchanges& bands, int lmax,
                                                              int C) {
    return {&bands.sht_coefficients, lmax * 2 * C};
  }
};

}  // namespace surrogate::sphere
