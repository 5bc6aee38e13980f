// What a SphericalTransformer forward in latitude bands moves between the ranks (TransformerBands,
// surrogate/sphere/transformer.hpp): this rank's rows of each stage and one ExchangePlan per pattern,
// built once by SphericalTransformer::plan_bands and applied by the CPU forward (network.cpp) and the
// device forward (cuda/transformer_bands.cpp). share/docs/sphere.md, "Multi-rank mode".
#pragma once

#include <utility>
#include <vector>

#include "../../serial.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/sphere/bands.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace surrogate::sphere {

struct TransformerBands::Exchanges {
  surrogate::detail::Serial serial;  // a device forward's graph key
  int batch = 0;
  BandPartition image, internal;  // the ranks' rows of the image grid and of the internal grid
  // This rank's rows: internal [i0, i1), image [g0, g1); the input rows of the encoder, of the
  // key/value projections, of the decoder, of the resampling (bilinear); the SHT orders [m0, m1).
  int i0 = 0, i1 = 0, g0 = 0, g1 = 0, m0 = 0, m1 = 0;
  std::pair<int, int> encoder_rows, kv_rows, decoder_rows, resample_rows;

  // Sources and targets (rows of `width` values, sample-major unless said otherwise):
  ExchangePlan encoder_input;   // the caller's input rows -> image rows encoder_rows (in_chans)
  ExchangePlan residual_input;  // the caller's input rows -> image rows [g0, g1) (residual_prediction)
  ExchangePlan key_value;       // internal rows [i0, i1) -> kv_rows (embed_dim; every row: gather_bands)
  ExchangePlan row_sums;        // instance norm: per (sample, row) sums of [i0, i1) -> every row (C doubles)
  ExchangePlan resample_input;  // internal rows [i0, i1) -> resample_rows (bilinear decoder)
  // upsample_sht: Fourier rows (b*h + lat)*M + m of [i0, i1) -> this rank's orders of every latitude
  // (2C floats); the coefficients of orders [m0, m1) -> every order, to ranks with decoder rows: rows
  // b*M + m of L*2C floats ([b][m][l], the CPU's RealSHT::legendre_orders layout), or rows (b*L + l)*M + m
  // of 2C floats ([b][l][m], the device kernels' layout).
  ExchangePlan sht_orders, sht_coefficients, sht_coefficients_device;

  /// Calls f(plan) for every exchange plan.
  template <class F>
  void for_each(F&& f) {
    for (ExchangePlan* p : {&encoder_input, &residual_input, &key_value, &row_sums, &resample_input, &sht_orders,
                            &sht_coefficients, &sht_coefficients_device})
      f(*p);
  }
};

/// The orders [first[r], first[r+1]) whose SHT coefficients rank r sums in the band forward of
/// upsample_sht: contiguous, in rank order, about equal shares of the work (order m has lmax - m degrees).
std::vector<int> order_split(int lmax, int mmax, int ranks);

}  // namespace surrogate::sphere
