// HEPT's plan of a point set (plan.hpp).
#include "plan.hpp"

#include <algorithm>
#include <span>
#include <string>

#include "surrogate/error.hpp"

namespace surrogate::hept {

Plan::Plan(const Comm& comm, Basis basis, const Config& cfg, const std::vector<float>& regions)
    : surrogate::Plan(std::move(basis)), cfg_(cfg), regions_(regions) {
  const SampleLayout& l = layout();
  const int cd = cfg.coords_dim;
  // Every rank sees every sample's size: a bad batch is refused before any message.
  collectively(comm, [&] {
    if (cfg.layout == Config::Layout::src && l.num_samples() > 1)
      throw Error(ErrorCode::input,
                  "hept: the src layout runs one graph per batch (the official code asserts it); "
                  "this batch has " +
                      std::to_string(l.num_samples()) + " samples");
    for (index_t s = 0; s < l.num_samples(); ++s)
      if (l.sample_sizes()[static_cast<std::size_t>(s)] < cfg.block_size && cfg.layout == Config::Layout::example)
        throw Error(ErrorCode::input, "hept: sample " + std::to_string(s) + " has " +
                                          std::to_string(l.sample_sizes()[static_cast<std::size_t>(s)]) +
                                          " points, fewer than the block size " + std::to_string(cfg.block_size) +
                                          " (the official code then pads it with points of other graphs)");
  });
  // Fewer graphs than ranks: every graph's padded rows spread evenly over the ranks.
  if (comm.size() > 1 && l.num_samples() < comm.size()) {
    split_ = std::make_unique<SplitGraphs>(comm, l, geometry(), cfg, regions, &traffic());
    return;
  }
  // Every sample on its owner rank, its points in global-id order.
  owners_ = detail::SampleOwners::build(comm, l, geometry().global_ids);
  owners_.rows_plan().count_into(&traffic());
  owners_.samples_to_all().count_into(&traffic());
  const index_t m = owners_.rows();
  coords_.assign(static_cast<std::size_t>(std::max<index_t>(m, 1) * cd), 0.0f);
  owners_.rows_plan().forward(geometry().positions, cd, coords_.data(), cd, cd);
  for (const auto& o : owners_.owned()) {
    sizes_.push_back(o.end - o.begin);
    ids_.push_back(o.sample);
  }
}

template <class T>
void Plan::build_geometry(const Comm& comm, Geometry& g) const {
  collectively(comm, [&] { quantile_bins<T>(cfg_, regions_, coords_.data(), sizes_, g); });
  // The same allreduces on every rank; graphs below the block size were refused when the plan was built.
  finish_geometry(cfg_, ids_, g, [&comm](std::vector<std::int64_t>& v) {
    comm.allreduce(std::span<std::int64_t>(v), ReduceOp::max);
  });
}

const Geometry& Plan::geometry_of(bool fp64, const Comm& comm) {
  bool& have = fp64 ? have64_ : have32_;
  Geometry& g = fp64 ? geometry64_ : geometry32_;
  if (!have) {
    if (fp64) build_geometry<double>(comm, g);
    else build_geometry<float>(comm, g);
    have = true;
  }
  return g;
}

}  // namespace surrogate::hept
