// What HEPT builds once per point set (share/docs/hept.md, "Plan"): the graphs this rank holds in the
// order of their points' global ids, and their geometry (quantile bins, bit widths, region codes,
// padding) for each arithmetic, with the bit widths taken over every rank's graphs.
#pragma once

#include <cstdint>
#include <vector>

#include "surrogate/hept.hpp"
#include "surrogate/model.hpp"

namespace surrogate::hept {

/// HEPT moves no rows between ranks: every graph must lie on one rank (its traffic() stays zero); the
/// ranks share only the batch-wide bit widths (here) and the projection ranges (each forward).
class Plan final : public surrogate::Plan {
 public:
  Plan(const Comm& comm, Basis basis, const Config& cfg, const std::vector<float>& regions);

  /// Working row of every local point, graph by graph, each graph in global-id order.
  const std::vector<index_t>& rows() const { return rows_; }
  /// Coordinates in that order (points x coords_dim).
  const std::vector<float>& coords() const { return coords_; }
  const Geometry& geometry_of(bool fp64) const { return fp64 ? geometry64_ : geometry32_; }

 private:
  std::vector<index_t> rows_;
  std::vector<float> coords_;
  Geometry geometry32_, geometry64_;
};

}  // namespace surrogate::hept
