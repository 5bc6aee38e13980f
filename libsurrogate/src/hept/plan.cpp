// HEPT's plan of a point set (plan.hpp).
#include "plan.hpp"

#include <algorithm>
#include <span>
#include <string>

#include "surrogate/error.hpp"

namespace surrogate::hept {

Plan::Plan(const Comm& comm, Basis basis, const Config& cfg, const std::vector<float>& regions)
    : surrogate::Plan(std::move(basis)) {
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
  std::vector<std::int64_t> sizes, ids;
  for (const auto& o : owners_.owned()) {
    sizes.push_back(o.end - o.begin);
    ids.push_back(o.sample);
  }
  collectively(comm, [&] {
    quantile_bins<float>(cfg, regions, coords_.data(), sizes, geometry32_);
    quantile_bins<double>(cfg, regions, coords_.data(), sizes, geometry64_);
  });
  const auto reduce_max = [&comm](std::vector<std::int64_t>& v) {
    comm.allreduce(std::span<std::int64_t>(v), ReduceOp::max);
  };
  // Both calls make the same allreduces on every rank; graphs below the block size were refused above.
  finish_geometry(cfg, ids, geometry32_, reduce_max);
  finish_geometry(cfg, ids, geometry64_, reduce_max);
}

}  // namespace surrogate::hept
