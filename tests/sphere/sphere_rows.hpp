// Latitude bands of channels-last grids, shared by the band tests (surrogate/sphere/bands.hpp).
#pragma once

#include <cstddef>
#include <vector>

/// Rows [lat_begin, lat_end) of every sample of a channels-last grid (nlat x nlon points per sample).
inline std::vector<float> rows_of(const std::vector<float>& x, int batch, int nlat, int nlon, int channels,
                                  int lat_begin, int lat_end) {
  std::vector<float> out;
  const std::size_t row = static_cast<std::size_t>(nlon) * static_cast<std::size_t>(channels);
  for (int b = 0; b < batch; ++b) {
    const auto first = x.begin() + static_cast<std::ptrdiff_t>((static_cast<std::size_t>(b) * nlat + lat_begin) * row);
    out.insert(out.end(), first, first + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(lat_end - lat_begin) * row));
  }
  return out;
}
