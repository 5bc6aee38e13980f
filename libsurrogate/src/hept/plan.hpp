// What HEPT builds once per point set (share/docs/hept.md, "Plan and ranks"): every sample's points
// gathered on its owner rank in global-id order (detail::SampleOwners), their coordinates and geometry
// for each arithmetic; or, with fewer samples than ranks, the graphs split over the ranks (SplitGraphs).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "../exchange/sample_owners.hpp"
#include "cuda/device.hpp"
#include "split_graphs.hpp"
#include "surrogate/hept.hpp"
#include "surrogate/model.hpp"

namespace surrogate::hept {

/// The owners' rows move through owners().rows_plan() (forward: working rows -> owner order, backward:
/// the results back), counted in traffic(); the ranks also share the batch-wide bit widths (here) and
/// the projection ranges (each forward).
class Plan final : public surrogate::Plan {
 public:
  Plan(const Comm& comm, Basis basis, const Config& cfg, const std::vector<float>& regions);

  void rebind(const Comm& comm) override {
    if (split_) split_->rebind(comm);
    else owners_.rebind(comm);
  }
  /// Whether the graphs are split over the ranks (fewer samples than ranks, `example` layout); then
  /// split_graphs() holds the rows and owners() is empty.
  bool split() const { return split_ != nullptr; }
  const SplitGraphs& split_graphs() const { return *split_; }
  detail::SampleOwners& owners() { return owners_; }
  /// Coordinates of the owned samples' points in owner order (points x coords_dim).
  const std::vector<float>& coords() const { return coords_; }
  /// The owned samples' geometry in the forward's arithmetic, built at its first use on the CPU: a
  /// collective step (every rank runs the same precision and device in a forward).
  const Geometry& geometry_of(bool fp64, const Comm& comm);
  /// The owned samples' sizes and batch numbers (the graphs of coords()).
  const std::vector<std::int64_t>& sizes() const { return sizes_; }
  const std::vector<std::int64_t>& graph_ids() const { return ids_; }
  /// The geometry a device forward built or uploaded for this plan (null until then; kept with the plan,
  /// so that a forward on an unchanged plan builds nothing).
  std::unique_ptr<gpu::DeviceGeometry>& device_geometry() { return device_geometry_; }
  /// The CPU forward's work arrays in arithmetic T, kept with the plan (taken at the first forward).
  template <class T>
  ForwardWork<T>& work() {
    if constexpr (sizeof(T) == sizeof(double)) return work64_;
    else return work32_;
  }

 private:
  template <class T>
  void build_geometry(const Comm& comm, Geometry& g) const;

  Config cfg_;
  std::vector<float> regions_;
  detail::SampleOwners owners_;
  std::vector<float> coords_;
  std::vector<std::int64_t> sizes_, ids_;  // the owned samples' sizes and batch numbers
  Geometry geometry32_, geometry64_;
  bool have32_ = false, have64_ = false;
  std::unique_ptr<gpu::DeviceGeometry> device_geometry_;
  ForwardWork<float> work32_;
  ForwardWork<double> work64_;
  std::unique_ptr<SplitGraphs> split_;
};

}  // namespace surrogate::hept
