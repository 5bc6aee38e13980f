// device::VoxelHierarchies (voxel_hierarchy.hpp): the samples packed and uploaded, one launcher, its flat
// lists cut into the Hierarchy's per-level vectors.
#include "voxel_hierarchy.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "layers.hpp"

namespace surrogate::device {

namespace cu = kernels::cuda;
using sequoia::index_t;

namespace {

/// values[first[i] * width .. first[i + 1] * width) of every list i < lists.
template <class T>
std::vector<std::vector<T>> cut(const std::vector<T>& values, const std::vector<std::int64_t>& first, std::size_t lists,
                                std::size_t width = 1) {
  std::vector<std::vector<T>> out(lists);
  for (std::size_t i = 0; i < lists; ++i)
    out[i].assign(values.begin() + static_cast<std::ptrdiff_t>(first[i] * width),
                  values.begin() + static_cast<std::ptrdiff_t>(first[i + 1] * width));
  return out;
}

std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> cut_edges(const std::vector<std::int64_t>& edges,
                                                                          const std::vector<std::int64_t>& first,
                                                                          std::size_t lists) {
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> out(lists);
  for (std::size_t i = 0; i < lists; ++i) {
    out[i].reserve(static_cast<std::size_t>(first[i + 1] - first[i]));
    for (std::int64_t e = first[i]; e < first[i + 1]; ++e)
      out[i].emplace_back(edges[static_cast<std::size_t>(2 * e)], edges[static_cast<std::size_t>(2 * e + 1)]);
  }
  return out;
}

}  // namespace

sequoia::Hierarchy VoxelHierarchies::operator()(int device, cudaStream_t stream,
                                                const std::vector<sequoia::SamplePoints>& samples, int divide,
                                                int depth, std::vector<index_t> sample_ids, bool node_arrays) {
  const auto on_host = [&] { return sequoia::collate(sequoia::build_sample_hierarchies(samples, divide, depth),
                                                     std::move(sample_ids)); };
  bool takes = !samples.empty() && divide >= 2 && depth >= 2 &&
               std::pow(static_cast<double>(divide), depth - 1) < 2147483648.0 &&
               (sample_ids.empty() || sample_ids.size() == samples.size());
  std::vector<std::int64_t> first{0};
  for (const sequoia::SamplePoints& s : samples) {
    takes = takes && s.n > 0 && s.points != nullptr;
    first.push_back(first.back() + std::max<index_t>(s.n, 0));
  }
  if (!takes || static_cast<double>(first.back()) * (depth + 1) >= 2147483647.0) return on_host();
  const cu::DeviceGuard guard(device);
  float* points = sized(points_, first.back() * 3, device);
  std::vector<float> packed(static_cast<std::size_t>(first.back()) * 3);
  for (std::size_t b = 0; b < samples.size(); ++b)
    std::memcpy(packed.data() + first[b] * 3, samples[b].points, static_cast<std::size_t>(samples[b].n) * 3 * sizeof(float));
  cu::copy_to_device(points, packed.data(), packed.size() * sizeof(float), stream);
  cu::VoxelHierarchyArgs a;
  a.samples = static_cast<int>(samples.size());
  a.divide = divide;
  a.depth = depth;
  a.first = first.data();
  a.points = points;
  a.node_arrays = node_arrays;
  a.work = &work_;
  cu::VoxelHierarchyResult r;
  cu::voxel_hierarchy(a, r, stream);
  if (!r.valid) return on_host();  // the host builder throws the error that names the sample and point

  sequoia::Hierarchy h;
  h.depth = depth;
  h.point_offsets = std::move(first);
  h.offset = std::move(r.offset);
  h.sample_ids = std::move(sample_ids);
  if (h.sample_ids.empty())
    for (std::size_t b = 0; b < samples.size(); ++b) h.sample_ids.push_back(static_cast<index_t>(b));
  h.coords = std::move(r.coords);
  h.mapping = std::move(r.mapping);
  h.mapping_local = std::move(r.mapping_local);
  const auto levels = static_cast<std::size_t>(depth) + 1;
  h.level_ids = cut(r.level_ids, r.level_first, levels);
  h.level_batch = cut(r.level_batch, r.level_first, levels);
  h.level_positions = cut(r.level_positions, r.level_first, levels, 3);
  h.pool_parent = cut(r.pool_parent, r.pool_first, levels - 1);
  h.parent_edges = cut_edges(r.parent_edges, r.parent_first, levels);
  h.child_edges = cut_edges(r.child_edges, r.child_first, levels);
  return h;
}

}  // namespace surrogate::device
