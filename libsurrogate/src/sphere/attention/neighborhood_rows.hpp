// NeighborhoodAttentionS2's softmax over the neighbours for a band of output latitude rows (internal),
// on the shared ring-attention kernel (kernels::CpuKernels::ring_attention).
#pragma once

#include <vector>

#include "heads.hpp"
#include "surrogate/sphere/neighborhood.hpp"

namespace surrogate::sphere::detail {

/// NeighborhoodAttentionS2's forward of output latitude rows [lat_begin, lat_end) of every sample: the
/// q/k/v projections, the softmax over each output point's neighbours and the output projection into out
/// (rows b*po + (t - lat_begin)*nlon_out + wo, cout channels last), band by band. Query rows b*po +
/// (t - lat_begin)*nlon_out + wo, key/value rows b*pi + (lat - in_begin)*nlon_in + w (channels last) for
/// the input rows [in_begin, in_end), which must hold every row the lists of the output rows reach (key =
/// value = query for self-attention on the whole grid). quad_w: w_lat of every input latitude of the
/// grid. Every output value is the same bits whatever the band, the batch or the number of OpenMP threads.
/// Scratch (rings, operands, band results) from ws (workspace.hpp).
void neighborhood_attention_rows(const NeighborhoodCsr& csr, const std::vector<float>& quad_w, const S2Heads& heads,
                                 int batch, int lat_begin, int lat_end, int in_begin, int in_end, const float* query,
                                 const float* key, const float* value, float* out, S2Workspace& ws);

}  // namespace surrogate::sphere::detail
