// HEPT's plan of a point set (plan.hpp).
#include "plan.hpp"

#include <algorithm>
#include <numeric>
#include <span>
#include <string>

#include "surrogate/error.hpp"

namespace surrogate::hept {

Plan::Plan(const Comm& comm, Basis basis, const Config& cfg, const std::vector<float>& regions)
    : surrogate::Plan(std::move(basis)) {
  const SampleLayout& l = layout();
  const int cd = cfg.coords_dim;
  std::vector<std::int64_t> sizes, ids;
  collectively(comm, [&] {
    if (cfg.layout == Config::Layout::src && l.num_samples() > 1)
      throw Error(ErrorCode::input,
                  "hept: the src layout runs one graph per batch (the official code asserts it); "
                  "this batch has " +
                      std::to_string(l.num_samples()) + " samples");
    for (const auto& segment : l.segments()) {
      const index_t whole = l.sample_sizes()[static_cast<std::size_t>(segment.sample)];
      if (segment.end - segment.begin != whole)
        throw Error(ErrorCode::unsupported, "hept: sample " + std::to_string(segment.sample) + " has " +
                                                std::to_string(segment.end - segment.begin) + " of its " +
                                                std::to_string(whole) +
                                                " points on this rank: each graph must lie on one rank");
      std::vector<index_t> rows(static_cast<std::size_t>(whole));
      std::iota(rows.begin(), rows.end(), segment.begin);
      const std::int64_t* gid = geometry().global_ids;
      std::stable_sort(rows.begin(), rows.end(), [gid](index_t a, index_t b) { return gid[a] < gid[b]; });
      for (const index_t r : rows) {
        rows_.push_back(r);
        for (int c = 0; c < cd; ++c) coords_.push_back(geometry().positions[r * cd + c]);
      }
      if (whole < cfg.block_size && cfg.layout == Config::Layout::example)
        throw Error(ErrorCode::input, "hept: sample " + std::to_string(segment.sample) + " has " +
                                          std::to_string(whole) + " points, fewer than the block size " +
                                          std::to_string(cfg.block_size) +
                                          " (the official code then pads it with points of other graphs)");
      sizes.push_back(whole);
      ids.push_back(segment.sample);
    }
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
