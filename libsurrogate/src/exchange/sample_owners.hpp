// Whole samples on one rank each: every sample's rows gathered on its owner rank in global-id order, for
// families whose forward needs all points of a sample together (HEPT buckets, Sequoia's voxel tree).
// share/docs/adding-a-family.md, "Moving data".
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "surrogate/exchange.hpp"
#include "surrogate/model.hpp"

namespace surrogate::detail {

class SampleOwners {
 public:
  /// A sample this rank owns: its rows [begin, end) of the owner order.
  struct Owned {
    index_t sample = 0;
    index_t begin = 0, end = 0;
  };

  /// Collective. `layout` and the global ids of its working rows (null: rank-major ids, rank r's local
  /// point i in the caller's order is n_0 + ... + n_{r-1} + i). Sample s goes to rank
  /// floor(P * (points of the samples before s) / N): contiguous samples per rank, about N / P points
  /// each, a function of the sample sizes and the rank count only.
  static SampleOwners build(const Comm& comm, const SampleLayout& layout, const std::int64_t* global_ids);

  /// Collective: the global id of each working row of `layout` (`global_ids`, or rank-major ids when no
  /// rank gives them; Error(invalid_argument) on every rank when some ranks give ids and others not).
  static std::vector<std::int64_t> working_ids(const Comm& comm, const SampleLayout& layout,
                                               const std::int64_t* global_ids);

  int owner(index_t sample) const;
  const std::vector<Owned>& owned() const { return owned_; }
  /// Rows on this rank in the owner order, and the global id of each (increasing within a sample).
  index_t rows() const { return static_cast<index_t>(ids_.size()); }
  std::span<const std::int64_t> ids() const { return ids_; }

  /// The layout's working rows (sources) -> the owner order (targets); backward returns the rows.
  ExchangePlan& rows_plan() { return rows_; }
  /// One row per owned sample (sources, in owned() order) -> every rank, all samples in order (forward).
  ExchangePlan& samples_to_all() { return samples_; }
  /// Re-points both plans at `comm` (Plan::rebind).
  void rebind(const Comm& comm);

 private:
  std::vector<index_t> first_point_;  // points of the samples before s, s = 0 .. B (global)
  int ranks_ = 1;
  std::vector<Owned> owned_;
  std::vector<std::int64_t> ids_;
  ExchangePlan rows_, samples_;
};

}  // namespace surrogate::detail
