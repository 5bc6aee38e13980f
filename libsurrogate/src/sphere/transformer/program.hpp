// The SphericalTransformer's forward written once, for the CPU (network.cpp) and a CUDA device
// (../cuda/transformer.cpp): the layers over an Ops (SphereHostOps, host_ops.hpp; SphereCudaOps,
// ../cuda/ops.hpp: the shared ops/ members and the spherical ones below) and the forward in latitude bands
// over an Exec (the whole grid is one band of one rank):
//
//   using Ops;  const TransformerConfig& config();  const Layers<Ops>& layers();
//   const TransformerBands::Exchanges& bands();  index_t ld()   the residual stream's row stride
//   tiles(n, tile, f)       f(Ops&, Work&, r0, rows) for rows r0 .. r0 + rows - 1 of n in tiles of `tile`
//                           rows (the CPU: one tile per OpenMP iteration; a device: once, all n rows)
//   once(f)                 f(Ops&) once: the spherical operators, which thread themselves on the CPU
//   Work::rows(slot, rows, width), rows(buf, rows, width), sums(buf, count)   work rows of a tile; a
//                           forward's buffers (dense rows, or the residual stream's x and y at ld());
//                           double buffers
//   exchange(plan, src, dst, width)   an ExchangePlan move of rows (float or double; collective)
//   phase(stage)            a profile phase for the scope (the CPU's surrogate/profile.hpp)
//
// The Ops' spherical members (each one *Args struct below):
//   disco, s2_attention, resample     the operators' row-range forwards (DiscoConvS2, AttentionS2 or
//                                     NeighborhoodAttentionS2, ResampleS2 and their device twins)
//   position(PositionArgs)            x = encoded + position embedding (+ 0 without one)
//   grid_row_sums, grid_norm_stats, channel_affine   the instance norm over the grid: per (sample, row)
//                                     double sums, their statistics over every row in row order, y = x s + t
//   relu(Rows)                        the MLP's ReLU in place (NaN kept)
//   sht_fourier, sht_legendre, sht_synthesis   the SHT upsampling's steps between its two exchanges;
//                                     Ops::sht_coefficients(bands, lmax, C): the plan and row width of the
//                                     coefficients' exchange in the Ops' layout
//
// share/docs/sphere.md, "Source layout" and "Forward workspaces".
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "../../ops/rows.hpp"
#include "bands.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace surrogate::sphere::program {

using kernels::Activation;
using kernels::index_t;
using ops::Rows;

template <class Ops>
struct Block {
  typename Ops::Norm norm[2];  // layer norm or instance norm weights (eps 1e-6); empty with no norm
  std::unique_ptr<typename Ops::Attention> attention;
  typename Ops::Dense fc1, fc2;  // use_mlp only
};

template <class Ops>
struct Layers {
  int h = 0, w = 0, C = 0, hidden = 0;  // the internal grid, embed_dim, the MLP's hidden width
  std::unique_ptr<typename Ops::Disco> encoder, decoder;
  std::unique_ptr<typename Ops::Resample> resample;  // bilinear upsampling
  std::unique_ptr<typename Ops::Sht> sht;            // upsample_sht
  typename Ops::Vector pos;                          // h*w rows of pos_ld values (zeros past C), or empty
  index_t pos_ld = 0;
  std::vector<Block<Ops>> blocks;
};

/// The layers of one Ops as another's: `f` has dense, norm, vector, attention, disco, resample and sht
/// members, each taking the source layer.
template <class To, class From, class F>
Layers<To> convert(const Layers<From>& from, F& f) {
  Layers<To> to;
  to.h = from.h;
  to.w = from.w;
  to.C = from.C;
  to.hidden = from.hidden;
  to.encoder = f.disco(*from.encoder);
  to.decoder = f.disco(*from.decoder);
  if (from.resample) to.resample = f.resample(*from.resample);
  if (from.sht) to.sht = f.sht(*from.sht);
  to.pos = f.vector(from.pos);
  to.pos_ld = from.pos_ld;
  for (std::size_t i = 0; i < from.blocks.size(); ++i) {
    const Block<From>& b = from.blocks[i];
    Block<To>& t = to.blocks.emplace_back();
    for (int n = 0; n < 2; ++n) t.norm[n] = f.norm(b.norm[n]);
    t.attention = f.attention(*b.attention);
    if (from.hidden > 0) {
      t.fc1 = f.dense(b.fc1);
      t.fc2 = f.dense(b.fc2);
    }
  }
  return to;
}

// ---------------------------------------------------------------------------------------------------
// The spherical members' arguments. Rows of the spherical operators are dense (ld = width), sample-major,
// latitude rows of nlon points each.

/// out rows [out0, out1) of every sample from the input rows [in0, in1) (DiscoConvS2::forward_rows).
template <class Disco>
struct DiscoArgs {
  Disco* op = nullptr;
  int batch = 0;
  Rows in;
  int in0 = 0, in1 = 0;
  Rows out;
  int out0 = 0, out1 = 0;
};

/// Self-attention of the query rows [lat0, lat1) (q, out: those rows of every sample) on the key/value
/// rows kv (every row for global attention; rows [kv0, kv1) for neighbourhood attention).
template <class Attention>
struct AttentionArgs {
  Attention* op = nullptr;
  int batch = 0, lat0 = 0, lat1 = 0;
  Rows q;
  int kv0 = 0, kv1 = 0;
  Rows kv;
  Rows out;
};

/// The bilinear resampling of rows [in0, in1) into the rows [out0, out1) (ResampleS2::forward_rows).
template <class Resample>
struct ResampleArgs {
  Resample* op = nullptr;
  int batch = 0;
  Rows in;
  int in0 = 0, in1 = 0;
  Rows out;
  int out0 = 0, out1 = 0;
};

/// x row r = enc row r + pos row (first_point + (row0 + r) % points), + 0.0f without `pos`: the rows
/// row0 .. of a band of `points` points per sample (enc may equal x).
template <class Vector>
struct PositionArgs {
  Rows enc, x;
  const Vector* pos = nullptr;  // nullptr or empty: none
  index_t pos_ld = 0, row0 = 0, points = 0, first_point = 0;
};

/// part[(b*lat_rows + row)*C + c] = sum over the row's nlon points of x (mean == nullptr) or of
/// (x - mean[b*C + c])^2, in double, in longitude order.
struct RowSumsArgs {
  int batch = 0, lat_rows = 0, nlon = 0;
  Rows x;
  const double* mean = nullptr;
  double* part = nullptr;
};

/// From the per-row sums of every row (all: batch x nlat rows of C, rows in order): mean = sum / points
/// (finish false), or scale = w / sqrt(sum / points + 1e-6), shift = b - mean scale (finish true).
template <class Norm>
struct NormStatsArgs {
  const Norm* norm = nullptr;
  int batch = 0, nlat = 0, C = 0;
  double points = 0.0;
  const double* all = nullptr;
  double* mean = nullptr;
  bool finish = false;
  float *scale = nullptr, *shift = nullptr;  // batch x C
};

/// y row r = x row r * scale[s] + shift[s], s the sample of band row row0 + r (`points` rows per sample).
struct AffineArgs {
  Rows x, y;
  const float *scale = nullptr, *shift = nullptr;
  index_t row0 = 0, points = 0;
};

/// The Fourier rows (mmax orders of 2C floats each) of the lat_rows latitude rows of every sample in x.
template <class Sht>
struct ShtFourierArgs {
  Sht* op = nullptr;
  int batch = 0, lat_rows = 0;
  Rows x;
  float* fourier = nullptr;
};

/// The coefficients of the orders [m0, m1) from their Fourier rows of every latitude (`orders`).
template <class Sht>
struct ShtLegendreArgs {
  Sht* op = nullptr;
  int batch = 0, C = 0, m0 = 0, m1 = 0;
  const float* orders = nullptr;
  float* coeffs = nullptr;
};

/// The image rows [lat0, lat1) of every sample from the coefficients of every order.
template <class Sht>
struct ShtSynthesisArgs {
  Sht* op = nullptr;
  int batch = 0;
  const float* coeffs = nullptr;
  Rows out;
  int lat0 = 0, lat1 = 0;
};

// ---------------------------------------------------------------------------------------------------
// The forward over an Exec (see the top of this file).

/// Rows per tile of the row-wise stages on the CPU.
inline constexpr index_t kTileRows = 256;

/// The stages a forward times (Exec::phase).
enum class Stage : std::uint8_t { encoder, blocks, decoder };

/// The forward's buffers (Exec::rows, Exec::sums) and a tile's work rows (Work::rows).
enum class Buf : std::uint8_t {
  enc_in, dense, x, y, attn_in, attn_out, kv, upsampled, fourier, orders, partial, coeffs, inner_rows, own_in,
  part, all_sums, mean, scale, shift, hidden, out, count
};

/// y = norm_which(x) over the band's rows (x, y: the residual stream). Instance norm: the statistics over
/// the whole grid from every rank's per-row sums, added in row order (the same for any partition).
template <class Exec>
void norm(Exec& e, const Block<typename Exec::Ops>& b, int which, const Rows& x, const Rows& y) {
  const TransformerConfig& c = e.config();
  const auto& L = e.layers();
  const auto& bands = e.bands();
  const int batch = bands.batch, lat_rows = bands.i1 - bands.i0;
  const index_t rows = x.rows;
  const auto* n = &b.norm[which];
  switch (c.normalization_layer) {
    case BlockNorm::none:  // the whole rows, padding included
      e.tiles(rows, kTileRows, [&](auto& ops, auto&, index_t r0, index_t m) {
        const auto ld = static_cast<int>(x.ld);
        ops.copy({Rows{x.data, x.ld, rows, ld, x.place}.range(r0, m), nullptr,
                  Rows{y.data, y.ld, rows, ld, y.place}.range(r0, m)});
      });
      return;
    case BlockNorm::layer_norm:
      e.tiles(rows, kTileRows,
              [&](auto& ops, auto&, index_t r0, index_t m) { ops.norm({n, x.range(r0, m), y.range(r0, m)}); });
      return;
    case BlockNorm::instance_norm: {
      const int C = L.C;
      double* const part = e.sums(Buf::part, static_cast<index_t>(batch) * lat_rows * C);
      double* const all = e.sums(Buf::all_sums, bands.row_sums.target_rows() * C);
      double* const mean = e.sums(Buf::mean, static_cast<index_t>(batch) * C);
      const NormStatsArgs<typename Exec::Ops::Norm> stats{n, batch, L.h, C, static_cast<double>(L.h) * L.w, all, mean};
      if (rows > 0) e.once([&](auto& ops) { ops.grid_row_sums({batch, lat_rows, L.w, x, nullptr, part}); });
      e.exchange(bands.row_sums, part, all, C);
      if (rows > 0)
        e.once([&](auto& ops) {
          ops.grid_norm_stats(stats);  // the means from every row
          ops.grid_row_sums({batch, lat_rows, L.w, x, mean, part});
        });
      e.exchange(bands.row_sums, part, all, C);
      if (rows == 0) return;
      float* const scale = e.rows(Buf::scale, batch, C).data;
      float* const shift = e.rows(Buf::shift, batch, C).data;
      e.once([&](auto& ops) {
        auto finish = stats;
        finish.finish = true;
        finish.scale = scale;
        finish.shift = shift;
        ops.grid_norm_stats(finish);
      });
      const index_t points = static_cast<index_t>(lat_rows) * L.w;
      e.tiles(rows, kTileRows, [&](auto& ops, auto&, index_t r0, index_t m) {
        ops.channel_affine({x.range(r0, m), y.range(r0, m), scale, shift, r0, points});
      });
      return;
    }
  }
}

/// One block: x += attention(norm0(x)); x += mlp(norm1(x)) (or x += norm1(x) without the MLP).
template <class Exec>
void block(Exec& e, const Block<typename Exec::Ops>& b, const Rows& x, const Rows& y) {
  const TransformerConfig& c = e.config();
  const auto& L = e.layers();
  const auto& bands = e.bands();
  const int C = L.C;
  const index_t rows = x.rows;
  norm(e, b, 0, x, y);
  Rows q = y.columns(0, C);
  if (y.ld != C) {  // the operators take dense rows
    q = e.rows(Buf::attn_in, rows, C);
    e.tiles(rows, kTileRows, [&](auto& ops, auto&, index_t r0, index_t m) {
      ops.copy({y.range(r0, m), nullptr, q.range(r0, m)});
    });
  }
  // Keys and values: the rows inside the neighbourhood cutoff, or every row for global attention.
  const Rows kv = e.rows(Buf::kv, bands.key_value.target_rows(), C);
  e.exchange(bands.key_value, y, kv, C);
  const Rows att = e.rows(Buf::attn_out, rows, C);
  if (rows > 0)
    e.once([&](auto& ops) {
      ops.s2_attention({b.attention.get(), bands.batch, bands.i0, bands.i1, q, bands.kv_rows.first,
                        bands.kv_rows.second, kv, att});
    });
  e.tiles(rows, kTileRows, [&](auto& ops, auto&, index_t r0, index_t m) {  // x = x + attention
    ops.combine({ops::Combine::add, x.range(r0, m), att.range(r0, m), x.range(r0, m)});
  });
  norm(e, b, 1, x, y);
  e.tiles(rows, kTileRows, [&](auto& ops, auto& work, index_t r0, index_t m) {
    const Rows xs = x.range(r0, m), ys = y.range(r0, m);
    if (L.hidden == 0) {  // x = x + norm1(x)
      ops.combine({ops::Combine::add, xs, ys, xs});
      return;
    }
    // x += fc2(act(fc1(norm1(x)))): the exact GELU or the ReLU (or nothing) in fc1's epilogue.
    const Rows hid = work.rows(Buf::hidden, m, L.hidden);
    const Activation act = c.activation == MlpActivation::gelu   ? Activation::gelu_erf
                           : c.activation == MlpActivation::relu ? Activation::relu
                                                                 : Activation::none;
    ops.dense({&b.fc1, ys, hid, act});
    ops.dense({&b.fc2, hid, xs, Activation::none, xs});
  });
}

/// upsampled (the decoder's input rows decoder_rows of the image grid) from the internal rows x.
template <class Exec>
void upsample(Exec& e, const Rows& x, const Rows& upsampled) {
  using Ops = typename Exec::Ops;
  const auto& L = e.layers();
  const auto& bands = e.bands();
  const int batch = bands.batch, C = L.C, d0 = bands.decoder_rows.first, d1 = bands.decoder_rows.second;
  if (L.sht) {
    // SHT (share/docs/sphere.md, "Multi-rank mode"): the Fourier rows of the own internal rows; this
    // rank's orders of every latitude (sht_orders) summed over the latitudes in order; the coefficients
    // of every order to every rank with image rows, which synthesises only the rows its decoder reads.
    // Every coefficient is summed by one rank in the same order: the same bits for any number of ranks.
    auto* sht = L.sht.get();
    const int lmax = sht->lmax(), mmax = sht->mmax(), C2 = 2 * C, lat_rows = bands.i1 - bands.i0;
    const Rows fourier = e.rows(Buf::fourier, static_cast<index_t>(batch) * lat_rows * mmax, C2);
    if (x.rows > 0) e.once([&](auto& ops) { ops.sht_fourier({sht, batch, lat_rows, x, fourier.data}); });
    const Rows orders = e.rows(Buf::orders, bands.sht_orders.target_rows(), C2);
    e.exchange(bands.sht_orders, fourier, orders, C2);
    const Rows part = e.rows(Buf::partial, static_cast<index_t>(batch) * (bands.m1 - bands.m0) * lmax, C2);
    if (bands.m1 > bands.m0)
      e.once([&](auto& ops) { ops.sht_legendre({sht, batch, C, bands.m0, bands.m1, orders.data, part.data}); });
    const auto [plan, width] = Ops::sht_coefficients(bands, lmax, C);
    const Rows coeffs = e.rows(Buf::coeffs, plan->target_rows(), width);
    e.exchange(*plan, {part.data, width, part.rows * C2 / width, width, part.place}, coeffs, width);
    if (d0 < d1)  // a rank without image rows receives no coefficients
      e.once([&](auto& ops) { ops.sht_synthesis({sht, batch, coeffs.data, upsampled, d0, d1}); });
    return;
  }
  // Bilinear: the internal rows of the interpolation stencils (the resampling of the halo rows is
  // recomputed here rather than exchanged).
  const Rows inner = e.rows(Buf::inner_rows, bands.resample_input.target_rows(), C);
  e.exchange(bands.resample_input, x, inner, C);
  if (d0 < d1)
    e.once([&](auto& ops) {
      ops.resample({L.resample.get(), batch, inner, bands.resample_rows.first, bands.resample_rows.second, upsampled,
                    d0, d1});
    });
}

/// The forward of this rank's band: `input` the caller's rows (in_chans values each), `out` the band's
/// image rows [g0, g1) of every sample (out_chans values each).
template <class Exec>
void forward(Exec& e, const Rows& input, const Rows& out) {
  const TransformerConfig& c = e.config();
  const auto& L = e.layers();
  const auto& bands = e.bands();
  const int batch = bands.batch, C = L.C;
  const index_t points = static_cast<index_t>(bands.i1 - bands.i0) * L.w, rows = batch * points;
  const Rows x = e.rows(Buf::x, rows, C), y = e.rows(Buf::y, rows, C);
  {
    // Encoder: the image rows within its cutoff of this band (from whichever ranks hold them), then the
    // residual stream with the position embedding (the encoder writes into it when it has no padding).
    [[maybe_unused]] const auto phase = e.phase(Stage::encoder);
    const Rows in = e.rows(Buf::enc_in, bands.encoder_input.target_rows(), c.in_chans);
    e.exchange(bands.encoder_input, input, in, c.in_chans);
    const Rows dense = x.ld == C ? x.columns(0, C) : e.rows(Buf::dense, rows, C);
    if (rows > 0)
      e.once([&](auto& ops) {
        ops.disco({L.encoder.get(), batch, in, bands.encoder_rows.first, bands.encoder_rows.second, dense, bands.i0,
                   bands.i1});
      });
    e.tiles(rows, kTileRows, [&](auto& ops, auto&, index_t r0, index_t m) {
      ops.position({dense.range(r0, m), x.range(r0, m), &L.pos, L.pos_ld, r0, points,
                    static_cast<index_t>(bands.i0) * L.w});
    });
  }
  for (const auto& b : L.blocks) {
    [[maybe_unused]] const auto phase = e.phase(Stage::blocks);
    block(e, b, x, y);
  }
  [[maybe_unused]] const auto phase = e.phase(Stage::decoder);
  const int d0 = bands.decoder_rows.first, d1 = bands.decoder_rows.second;
  const Rows up = e.rows(Buf::upsampled, static_cast<index_t>(batch) * (d1 - d0) * c.nlon, C);
  upsample(e, x, up);
  if (out.rows > 0)
    e.once([&](auto& ops) {
      ops.disco({L.decoder.get(), batch, up, d0, d1, out, bands.g0, bands.g1});
    });
  if (!c.residual_prediction) return;
  const Rows own = e.rows(Buf::own_in, bands.residual_input.target_rows(), c.in_chans);  // the band's input rows
  e.exchange(bands.residual_input, input, own, c.in_chans);
  e.tiles(out.rows, kTileRows, [&](auto& ops, auto&, index_t r0, index_t m) {
    ops.combine({ops::Combine::add, out.range(r0, m), own.range(r0, m), out.range(r0, m)});
  });
}

}  // namespace surrogate::sphere::program
