// The single-layer spherical models' forward ("s2_attention", "s2_neighborhood_attention": self-attention
// on the model's grid) written once, for the CPU (model.cpp) and a CUDA device (cuda/layer.cpp), over an
// Exec of transformer/program.hpp's kind (once, rows, exchange; its Ops' s2_attention): the band's query
// and key/value rows from their owners, the operator's row-range forward, the output band back to the
// caller's rows. share/docs/sphere.md, "Multi-rank mode".
#pragma once

#include "plan.hpp"
#include "transformer/program.hpp"

namespace surrogate::sphere::program {

/// `input`: this rank's rows (the plan's pieces, in_channels each); `out`: the same rows, out_channels each.
template <class Exec>
void layer_forward(Exec& e, typename Exec::Ops::Attention* op, const LayerBands& l, const ExchangePlan& outputs,
                   int batch, int nlon, const Rows& input, const Rows& out) {
  const int cin = input.width, cout = out.width;
  const index_t band_rows = static_cast<index_t>(batch) * (l.lat_end - l.lat_begin) * nlon;
  const Rows rows = e.rows(Buf::enc_in, l.inputs.target_rows(), cin);
  e.exchange(l.inputs, input, rows, cin);
  const Rows band = e.rows(Buf::attn_out, band_rows, cout);
  if (band_rows > 0)
    e.once([&](auto& ops) {
      ops.s2_attention({op, batch, l.lat_begin, l.lat_end, rows.range(l.query_row, band_rows), l.kv_begin, l.kv_end,
                        rows.range(l.kv_row, rows.rows - l.kv_row), band});
    });
  e.exchange(outputs, band, out, cout);
}

}  // namespace surrogate::sphere::program
