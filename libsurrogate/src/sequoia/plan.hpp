// Sequoia's Plan: the batch in canonical order on every rank (gathered) and its voxel hierarchy
// (share/docs/sequoia.md, "Across ranks").
#pragma once

#include <vector>

#include "../balltree/point_cloud_model.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {

class Plan final : public surrogate::Plan {
 public:
  explicit Plan(surrogate::Plan::Basis basis) : surrogate::Plan(std::move(basis)) {}
  /// Set once by the model's build_plan, from the plan's own layout and geometry.
  void set(CanonicalBatch batch, Hierarchy hierarchy) {
    batch_ = std::move(batch);
    hierarchy_ = std::move(hierarchy);
  }
  /// Every point of every sample, in canonical order (samples in order, points by increasing global id).
  const CanonicalBatch& batch() const { return batch_; }
  const Hierarchy& hierarchy() const { return hierarchy_; }

 private:
  CanonicalBatch batch_;
  Hierarchy hierarchy_;
};

}  // namespace surrogate::sequoia
