// The host arithmetic both of Erwin's execs share (program.hpp): relative positions and the edges grouped
// by receiver.
#include "program.hpp"

#include <algorithm>

#include "surrogate/balltree.hpp"
#include "surrogate/kernels/aligned_buffer.hpp"

namespace surrogate::erwin::program {

std::vector<float> relative_to_group(std::span<const float> rows, int d, int group, index_t ld) {
  // A group of one is its own centre (x - x = +0, also for x = -0).
  const std::vector<float> centres =
      group == 1 ? std::vector<float>(rows.begin(), rows.end()) : balltree::mean_pool(rows, d, group);
  const std::size_t n = rows.size() / static_cast<std::size_t>(d);
  const auto du = static_cast<std::size_t>(d), g = static_cast<std::size_t>(group), ldu = static_cast<std::size_t>(ld);
  std::vector<float> rel(n * ldu, 0.0f);
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t c = 0; c < du; ++c) rel[r * ldu + c] = rows[r * du + c] - centres[(r / g) * du + c];
  return rel;
}

EdgeOrder order_edges(std::span<const std::int64_t> edge_index, std::span<const float> positions, int d, index_t n,
                      index_t n_all, index_t chunk_edges, int threads) {
  EdgeOrder o;
  const auto nu = static_cast<std::size_t>(n), du = static_cast<std::size_t>(d);
  std::size_t E = edge_index.size() / 2;
  const std::int64_t* src = edge_index.data();
  const std::int64_t* dst = edge_index.data() + E;
  for (std::size_t e = 0; e < E; ++e)
    if (src[e] < 0 || src[e] >= n_all || dst[e] < 0 || dst[e] >= n) {
      o.bad_edge = static_cast<std::int64_t>(e);
      E = 0;  // ends the loop
    }
  o.start.assign(nu + 1, 0);
  for (std::size_t e = 0; e < E; ++e) ++o.start[static_cast<std::size_t>(dst[e]) + 1];
  for (std::size_t i = 0; i < nu; ++i) o.start[i + 1] += o.start[i];
  std::vector<std::int64_t> fill(o.start.begin(), o.start.end() - 1);
  std::vector<std::int64_t, kernels::FirstTouchAllocator<std::int64_t>> order(E);
  for (std::size_t e = 0; e < E; ++e)
    order[static_cast<std::size_t>(fill[static_cast<std::size_t>(dst[e])]++)] = static_cast<std::int64_t>(e);
  o.src.resize(E);
  o.dst.resize(E);
  o.rel.resize(E * du);
  const auto edges = static_cast<std::int64_t>(E);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t q = 0; q < edges; ++q) {
    const auto qu = static_cast<std::size_t>(q), e = static_cast<std::size_t>(order[qu]);
    o.src[qu] = src[e];
    o.dst[qu] = dst[e];
    const float* ps = positions.data() + static_cast<std::size_t>(src[e]) * du;
    const float* pd = positions.data() + static_cast<std::size_t>(dst[e]) * du;
    for (std::size_t c = 0; c < du; ++c) o.rel[qu * du + c] = ps[c] - pd[c];
  }
  o.chunks = receiver_chunks(o.start, n, chunk_edges);
  return o;
}

std::vector<std::pair<index_t, index_t>> receiver_chunks(std::span<const std::int64_t> start, index_t n,
                                                         index_t chunk_edges) {
  std::vector<std::pair<index_t, index_t>> chunks;
  for (index_t r0 = 0; r0 < n;) {
    index_t r1 = r0 + 1;
    auto edges_to = [&](index_t r) { return start[static_cast<std::size_t>(r)] - start[static_cast<std::size_t>(r0)]; };
    while (r1 < n && edges_to(r1 + 1) <= chunk_edges) ++r1;
    chunks.emplace_back(r0, r1);
    r0 = r1;
  }
  return chunks;
}

}  // namespace surrogate::erwin::program
