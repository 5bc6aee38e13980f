// The row contraction shared by DiscoConvS2 and DiscoConvTransposeS2 (share/docs/sphere.md, "DISCO
// convolution"). Both compute each (sample, output latitude) row independently:
//  1. y[wo][g][k][c] = sum over the table entries z of the groups (output row, k), in table order, of
//     psi_z x[lat_z, lon, g*Cg + c] in float32 with psi rounded to float32, where an entry pairs input and
//     output longitudes along a stride:
//       forward   (p = nlon_in / nlon_out):  output wo = j, input (lon_z + p*j) mod nlon_in,  j < nlon_out;
//       transpose (p = nlon_out / nlon_in):  input wi = j, output (lon_z + p*j) mod nlon_out, j < nlon_in
//     (lon_z: the entry's input longitude, resp. output longitude, for the other grid's longitude 0);
//  2. out[wo][g*Og + o] = sum_{k,c} W[g*Og + o, c, k] y[wo][g][k][c] (+ bias): one packed linear layer per
//     group (kernels::PackedLinear, K*Cg inputs) over the nlon_out longitudes of the row.
// The scratch is one row's y (nlon_out x K*Cin floats) per thread, never the whole grid.
//
// Both have a second order (DiscoOrder::weights_first), used when it is cheaper by the cost model in the
// constructor (counting the padded widths of the linear layers; e.g. few output channels, as the
// transformer's decoder, or upsampling, where the output grid has p^2 times the points); it is the
// official order of the transpose. Per sample, xw[h, w][g][k][o] = sum_c W[g*Og + o, c, k] x[h, w, g*Cg + c]
// (one packed linear layer per group, Cg inputs, K*Og outputs) for the input rows the output rows read,
// then per output row out[.][o] = sum over the row's entries z (k-major, table order) of psi_z
// xw[lat_z, src][k][o] along the stride pairing above, in float32, + bias. Scratch: those input rows of xw
// (rows x nlon_in x K*Cout floats, one sample) and one output row per thread.
// The scratch of either order is kept between calls in the operator's pool (../workspace_pool.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../workspace_pool.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/sphere/disco.hpp"

namespace surrogate::sphere::detail {

/// One call's scratch: per OpenMP thread two row buffers (y and o; weights first: lin and acc), and the
/// weights-first order's xw.
struct DiscoScratch {
  std::vector<kernels::AlignedBuffer<float>> first, second;
  kernels::AlignedBuffer<float> xw;

  /// Room for `threads` threads' row buffers.
  void reserve_threads(int threads) {
    if (first.size() < static_cast<std::size_t>(threads)) first.resize(static_cast<std::size_t>(threads));
    if (second.size() < static_cast<std::size_t>(threads)) second.resize(static_cast<std::size_t>(threads));
  }
  std::size_t bytes() const {
    std::size_t floats = xw.size();
    for (const auto* v : {&first, &second})
      for (const auto& b : *v) floats += b.size();
    return floats * sizeof(float);
  }
};

class DiscoRows {
 public:
  /// who: the operator name for messages. transpose: the table is a compute_transpose_filter_table table.
  /// weight (out_channels, in_channels/groups, K) and bias as the operators take them (checked here).
  /// order: the contraction order (automatic: by the cost model).
  DiscoRows(const char* who, const DiscoConfig& config, int kernel_size, const FilterTable& table, bool transpose,
            const std::vector<float>& weight, const std::vector<float>& bias,
            DiscoOrder order = DiscoOrder::automatic);

  std::pair<int, int> input_rows(int lat_begin, int lat_end) const;
  void run(int batch, const float* in, int in_begin, int in_end, float* out, int out_begin, int out_end) const;
  /// Whether the rows run weights first (see above).
  bool weights_first() const { return weights_first_; }
  /// The weight (out_channels, in_channels/groups, K) and the bias (empty without) as the constructor
  /// took them, read back from the per-group layers (exact copies).
  std::vector<float> weight() const;
  std::vector<float> bias() const;
  void release_scratch() const noexcept { scratch_.release(); }
  std::size_t scratch_bytes() const { return scratch_.idle_bytes(); }

 private:
  void run_weights_first(int batch, const float* in, int in_begin, int in_end, float* out, int out_begin,
                         int out_end, std::pair<int, int> needed) const;

  std::string who_;
  DiscoConfig config_;
  bool transpose_ = false;
  int K = 0, Cg = 0, Og = 0, blk = 0, ld_y = 0, out_pad = 0;
  // Entries regrouped by (output row t, k), table order kept within a group: [seg[t*K+k], seg[t*K+k+1]).
  std::vector<std::int64_t> seg;
  std::vector<std::int32_t> e_lat, e_lon;  // input latitude; longitude as described above
  std::vector<float> e_val;
  std::vector<kernels::PackedLinear> layers;  // one per group, inputs ordered (k, c)
  // weights first: one layer per group, Cg inputs, outputs ordered (k, o)
  bool weights_first_ = false;
  int xw_pad = 0;
  std::vector<kernels::PackedLinear> in_layers;
  std::vector<float> bias_;
  mutable WorkspacePool<DiscoScratch> scratch_;
};

}  // namespace surrogate::sphere::detail
