// Sequoia's Plan (share/docs/sequoia.md, "Across ranks"): whole samples on their owner ranks
// (detail::SampleOwners), or, when a sample is larger than a rank's share, every sample split over the
// ranks by lowest voxels (Share::split_over) on a hierarchy every rank holds whole.
#pragma once

#include <cstdint>

#include <vector>

#include "../exchange/sample_owners.hpp"
#include "../serial.hpp"
#include "share.hpp"
#include "surrogate/model.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {

class Plan final : public surrogate::Plan {
 public:
  explicit Plan(surrogate::Plan::Basis basis) : surrogate::Plan(std::move(basis)) {}
  /// Whole samples: set once by the model's build_plan; the exchanges count into traffic().
  void set_owners(detail::SampleOwners owners) {
    owners_ = std::move(owners);
    owners_.rows_plan().count_into(&traffic());
    owners_.samples_to_all().count_into(&traffic());
  }
  /// Split samples: `rows` moves the layout's working rows to the share's points (backward returns them).
  void set_split(ExchangePlan rows) {
    split_ = true;
    rows_ = std::move(rows);
    rows_.count_into(&traffic());
  }
  void set_hierarchy(Hierarchy hierarchy, Share share) {
    geometry_ = surrogate::detail::Serial().value();
    hierarchy_ = std::move(hierarchy);
    share_ = std::move(share);
    share_.to_halo.count_into(&traffic());
    share_.voxels_to_all.count_into(&traffic());
  }
  bool split() const { return split_; }
  /// Whole samples: the owner of every sample; this rank's rows in the owner order.
  detail::SampleOwners& owners() { return owners_; }
  const detail::SampleOwners& owners() const { return owners_; }
  /// Split samples: the working rows -> the share's points.
  const ExchangePlan& split_rows() const { return rows_; }
  /// Whole samples: the hierarchy of the owned samples (in owned() order; empty when this rank owns none);
  /// split samples: the hierarchy of every sample, on every rank.
  const Hierarchy& hierarchy() const { return hierarchy_; }
  /// What this rank computes of hierarchy() (whole samples: all of it).
  const Share& share() const { return share_; }
  /// A number no other hierarchy of this process had: a device forward keeps the arrays it uploaded for
  /// it (gpu::DeviceForward::forward's `geometry`).
  std::uint64_t hierarchy_serial() const { return geometry_; }
  void rebind(const Comm& comm) override {
    if (!split_) return owners_.rebind(comm);
    rows_.rebind(comm);
    share_.to_halo.rebind(comm);
    share_.voxels_to_all.rebind(comm);
  }

 private:
  bool split_ = false;
  detail::SampleOwners owners_;
  ExchangePlan rows_;
  Hierarchy hierarchy_;
  Share share_;
  std::uint64_t geometry_ = 0;
};

}  // namespace surrogate::sequoia
