// Nearest same-sample nodes (share/docs/sequoia.md, "Neighbour order"); sibling_lists is the public form.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {

/// k nearest nodes of each node among the nodes of its sample (`batch`: sample of each node, grouped),
/// positions row-major x 3: squared distance in double, ties by ascending index, fewer than k nodes
/// padded with the first entry. Samples of at most `brute_force_up_to` nodes by brute force, larger ones
/// on a uniform grid (surrogate/kernels/grid_nearest.hpp; k above its 32 through surrogate::graph's k-d
/// tree): the same lists.
std::vector<std::int64_t> nearest_lists(const std::vector<float>& positions, const std::vector<std::int64_t>& batch, int k,
                                        std::int64_t brute_force_up_to = 64);
/// The lists of the nodes `queries` only (ascending node ids), query t's at t * k: each the list
/// nearest_lists gives that node (the tree of a large sample still spans all its nodes).
std::vector<std::int64_t> nearest_lists(const std::vector<float>& positions, const std::vector<std::int64_t>& batch, int k,
                                        const std::vector<std::int64_t>& queries, std::int64_t brute_force_up_to = 64);

/// What computes nearest_lists(positions, batch, k, queries) for a plan: empty for the host's, or a
/// device's (gpu::DeviceForward::nearest_lists: the same lists, bit for bit).
using NearestFinder = std::function<std::vector<std::int64_t>(const std::vector<float>& positions,
                                                              const std::vector<std::int64_t>& batch, int k,
                                                              const std::vector<std::int64_t>& queries)>;

}  // namespace surrogate::sequoia
