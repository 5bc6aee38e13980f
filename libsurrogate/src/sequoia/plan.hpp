// Sequoia's Plan: whole samples on their owner ranks (detail::SampleOwners) and the voxel hierarchy of
// the samples this rank owns (share/docs/sequoia.md, "Across ranks").
#pragma once

#include <vector>

#include "../exchange/sample_owners.hpp"
#include "surrogate/model.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {

class Plan final : public surrogate::Plan {
 public:
  explicit Plan(surrogate::Plan::Basis basis) : surrogate::Plan(std::move(basis)) {}
  /// Set once by the model's build_plan; the owners' exchanges count into this plan's traffic().
  void set_owners(detail::SampleOwners owners) {
    owners_ = std::move(owners);
    owners_.rows_plan().count_into(&traffic());
    owners_.samples_to_all().count_into(&traffic());
  }
  void set_hierarchy(Hierarchy hierarchy) { hierarchy_ = std::move(hierarchy); }
  /// The owner of every sample; this rank's rows in the owner order (owned samples, each by global id).
  detail::SampleOwners& owners() { return owners_; }
  const detail::SampleOwners& owners() const { return owners_; }
  /// The hierarchy of the owned samples only (in owned() order; empty when this rank owns none).
  const Hierarchy& hierarchy() const { return hierarchy_; }
  void rebind(const Comm& comm) override { owners_.rebind(comm); }

 private:
  detail::SampleOwners owners_;
  Hierarchy hierarchy_;
};

}  // namespace surrogate::sequoia
