// What HEPT builds once per point set (share/docs/hept.md, "Plan and ranks"): every sample's points
// gathered on its owner rank in global-id order (detail::SampleOwners), their coordinates, and their
// geometry (quantile bins, bit widths over every rank's graphs, region codes, padding) for each arithmetic.
#pragma once

#include <cstdint>
#include <vector>

#include "../exchange/sample_owners.hpp"
#include "surrogate/hept.hpp"
#include "surrogate/model.hpp"

namespace surrogate::hept {

/// The owners' rows move through owners().rows_plan() (forward: working rows -> owner order, backward:
/// the results back), counted in traffic(); the ranks also share the batch-wide bit widths (here) and
/// the projection ranges (each forward).
class Plan final : public surrogate::Plan {
 public:
  Plan(const Comm& comm, Basis basis, const Config& cfg, const std::vector<float>& regions);

  void rebind(const Comm& comm) override { owners_.rebind(comm); }
  detail::SampleOwners& owners() { return owners_; }
  /// Coordinates of the owned samples' points in owner order (points x coords_dim).
  const std::vector<float>& coords() const { return coords_; }
  const Geometry& geometry_of(bool fp64) const { return fp64 ? geometry64_ : geometry32_; }

 private:
  detail::SampleOwners owners_;
  std::vector<float> coords_;
  Geometry geometry32_, geometry64_;
};

}  // namespace surrogate::hept
