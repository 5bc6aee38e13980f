// The upsampling (scatter) mode's neighbour lists: torch-harmonics' construction with the grids swapped
// (neighborhood_csr_scatter), and their regrouping per output latitude and longitude residue.
#include "neighborhood_upsample.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>

#include "surrogate/error.hpp"

namespace surrogate::sphere {

NeighborhoodCsr neighborhood_csr_scatter(int nlat_in, int nlon_in, Grid grid_in, int nlat_out, int nlon_out,
                                         Grid grid_out, double theta_cutoff) {
  const auto invalid = [](const std::string& message) {
    throw Error(ErrorCode::invalid_argument, "neighborhood_csr_scatter: " + message);
  };
  if (nlat_in < 2 || nlon_in < 1) invalid("in_shape must be at least (2, 1)");
  if (nlat_out < 2 || nlon_out < 1) invalid("out_shape must be at least (2, 1)");
  if (nlon_out % nlon_in)
    invalid("nlon_out (" + std::to_string(nlon_out) + ") must be an integer multiple of nlon_in (" +
            std::to_string(nlon_in) + ") in the upsampling mode");
  if (!(theta_cutoff > 0.0) || !std::isfinite(theta_cutoff)) invalid("theta_cutoff must be positive and finite");
  // torch-harmonics passes (out_shape, in_shape, grid_in=grid_out, grid_out=grid_in) to its construction.
  return neighborhood_csr(nlat_out, nlon_out, grid_out, nlat_in, nlon_in, grid_in, theta_cutoff);
}

}  // namespace surrogate::sphere

namespace surrogate::sphere::detail {

using kernels::index_t;

UpsampleLists upsample_lists(const NeighborhoodCsr& scatter) {
  UpsampleLists l;
  // The swapped construction: its "input" grid is the operator's output grid and vice versa.
  l.nlat_out = scatter.nlat_in;
  l.nlon_out = scatter.nlon_in;
  l.nlat_in = scatter.nlat_out;
  l.nlon_in = scatter.nlon_out;
  l.p = l.nlon_out / l.nlon_in;
  const int p = l.p;
  const std::size_t classes = static_cast<std::size_t>(l.nlat_out) * static_cast<std::size_t>(p);
  std::vector<index_t> count(classes + 1, 0);
  const auto class_of = [&](std::int64_t col) {
    return static_cast<std::size_t>(col / l.nlon_out) * static_cast<std::size_t>(p) +
           static_cast<std::size_t>(col % l.nlon_out % p);
  };
  for (std::int64_t col : scatter.columns) ++count[class_of(col) + 1];
  std::partial_sum(count.begin(), count.end(), count.begin());
  l.offsets = count;
  l.row.resize(scatter.columns.size());
  l.lon0.resize(scatter.columns.size());
  std::vector<index_t> fill(count.begin(), count.end() - 1);
  for (int hi = 0; hi < l.nlat_in; ++hi)
    for (std::int64_t j = scatter.row_offsets[static_cast<std::size_t>(hi)];
         j < scatter.row_offsets[static_cast<std::size_t>(hi) + 1]; ++j) {
      const std::int64_t col = scatter.columns[static_cast<std::size_t>(j)];
      const std::size_t cls = class_of(col);
      const index_t at = fill[cls]++;
      // Output longitude r + p*m meets input longitude m - wo_c div p (mod nlon_in).
      const std::int64_t c = col % l.nlon_out / p;
      l.row[static_cast<std::size_t>(at)] = hi;
      l.lon0[static_cast<std::size_t>(at)] = static_cast<std::int32_t>((l.nlon_in - c % l.nlon_in) % l.nlon_in);
    }
  // Ascending (hi, lon0) within each class (hi is already ascending: the rows were visited in order).
  std::vector<std::pair<std::int32_t, std::int32_t>> tmp;
  for (std::size_t k = 0; k < classes; ++k) {
    const auto b = static_cast<std::size_t>(l.offsets[k]), e = static_cast<std::size_t>(l.offsets[k + 1]);
    tmp.clear();
    for (std::size_t j = b; j < e; ++j) tmp.emplace_back(l.row[j], l.lon0[j]);
    std::sort(tmp.begin(), tmp.end());
    for (std::size_t j = b; j < e; ++j) std::tie(l.row[j], l.lon0[j]) = tmp[j - b];
  }
  return l;
}

std::pair<int, int> upsample_input_rows(const UpsampleLists& l, int lat_begin, int lat_end) {
  lat_begin = std::max(lat_begin, 0);
  lat_end = std::min(lat_end, l.nlat_out);
  int first = l.nlat_in, last = -1;
  for (int t = lat_begin; t < lat_end; ++t)
    for (index_t j = l.offsets[static_cast<std::size_t>(t) * static_cast<std::size_t>(l.p)];
         j < l.offsets[static_cast<std::size_t>(t + 1) * static_cast<std::size_t>(l.p)]; ++j) {
      first = std::min(first, static_cast<int>(l.row[static_cast<std::size_t>(j)]));
      last = std::max(last, static_cast<int>(l.row[static_cast<std::size_t>(j)]));
    }
  return last < 0 ? std::pair{lat_begin, lat_begin} : std::pair{first, last + 1};
}

}  // namespace surrogate::sphere::detail
