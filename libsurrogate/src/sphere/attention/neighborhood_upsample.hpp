// NeighborhoodAttentionS2's upsampling (scatter) mode (internal): the official lists are keyed by input
// latitude (neighborhood_csr_scatter); the forward wants, for each output point, its input neighbours.
// Output longitude wo = r + p*m (p = nlon_out / nlon_in, residue r = wo mod p) is reached from input
// longitude wi exactly when a scatter entry (hi, ho, wo_c) has wo_c = r (mod p) and wi = m - wo_c div p
// (mod nlon_in): so the output points of one latitude ho and one residue r share one list of (input
// row, input longitude for m = 0), shifted by m input longitudes - the gather mode's structure on each
// residue class, which the ring-attention kernel runs with the queries of consecutive m as SIMD lanes.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "heads.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/sphere/neighborhood.hpp"

namespace surrogate::sphere::detail {

/// The scatter lists regrouped per output point class (ho, r).
struct UpsampleLists {
  int nlat_in = 0, nlon_in = 0, nlat_out = 0, nlon_out = 0, p = 1;
  std::vector<kernels::index_t> offsets;  // nlat_out * p + 1: list of (ho, r) is [offsets[ho*p + r], offsets[ho*p + r + 1])
  std::vector<std::int32_t> row;          // input latitude hi
  std::vector<std::int32_t> lon0;         // input longitude of output longitude r (m = 0), in [0, nlon_in)
};

/// Regroups `scatter` (neighborhood_csr_scatter's lists, nlon_out = p * nlon_in). Entries of one class in
/// ascending (hi, lon0). Every scatter entry lands in exactly one class.
UpsampleLists upsample_lists(const NeighborhoodCsr& scatter);

/// The input latitude rows [first, second) that output rows [lat_begin, lat_end) reach ({lat_begin,
/// lat_begin} when none).
std::pair<int, int> upsample_input_rows(const UpsampleLists& lists, int lat_begin, int lat_end);

/// The forward of output rows [lat_begin, lat_end) of every sample in the upsampling mode, the contract
/// of neighborhood_attention_rows (query / out rows b*po + (t - lat_begin)*nlon_out + wo, key / value rows
/// b*pi + (lat - in_begin)*nlon_in + w for input rows [in_begin, in_end), which must hold every row the
/// output rows reach). Every output value is the same bits whatever the band, batch or thread count.
/// Scratch from ws (workspace.hpp).
void upsample_attention_rows(const UpsampleLists& lists, const std::vector<float>& quad_w, const S2Heads& heads,
                             int batch, int lat_begin, int lat_end, int in_begin, int in_end, const float* query,
                             const float* key, const float* value, float* out, S2Workspace& ws);

}  // namespace surrogate::sphere::detail
