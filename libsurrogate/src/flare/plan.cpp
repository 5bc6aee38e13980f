// FLARE's plan of a point set (plan.hpp).
#include "plan.hpp"

#include <algorithm>

namespace surrogate::flare {

Plan::Plan(Basis basis) : surrogate::Plan(std::move(basis)) {
  const SampleLayout& l = layout();
  for (const auto& segment : l.segments()) {
    const int s = static_cast<int>(segment_sample_.size());
    segment_sample_.push_back(segment.sample);
    segment_size_.push_back(l.sample_sizes()[static_cast<std::size_t>(segment.sample)]);
    for (index_t r = segment.begin; r < segment.end; r += kTileRows)
      tiles_.push_back({r, std::min(kTileRows, segment.end - r), s});
  }
}

}  // namespace surrogate::flare
