// device::NearestLists (nearest_lists.hpp): the samples' offsets from the grouped batch on the host, three
// uploads, one launcher, one download.
#include "nearest_lists.hpp"

#include <stdexcept>
#include <string>

#include "layers.hpp"

namespace surrogate::device {

namespace cu = kernels::cuda;

std::vector<std::int64_t> NearestLists::operator()(int device, cudaStream_t stream, const std::vector<float>& positions,
                                                   const std::vector<std::int64_t>& batch, int k,
                                                   const std::vector<std::int64_t>& queries) {
  const auto nodes = static_cast<std::int64_t>(batch.size());
  if (positions.size() != batch.size() * 3)
    throw std::invalid_argument("nearest lists: " + std::to_string(positions.size()) + " coordinates for " +
                                std::to_string(nodes) + " nodes");
  std::vector<std::int64_t> first{0};
  for (std::int64_t i = 1; i < nodes; ++i)
    if (batch[static_cast<std::size_t>(i)] != batch[static_cast<std::size_t>(i) - 1]) first.push_back(i);
  first.push_back(nodes);
  const auto count = static_cast<std::int64_t>(queries.size());
  std::vector<std::int64_t> lists(static_cast<std::size_t>(count) * static_cast<std::size_t>(k));
  if (count == 0) return lists;
  const cu::DeviceGuard guard(device);
  cu::copy_to_device(sized(positions_, nodes * 3, device), positions.data(), positions.size() * sizeof(float), stream);
  cu::copy_to_device(sized(first_, static_cast<std::int64_t>(first.size()), device), first.data(),
                     first.size() * sizeof(std::int64_t), stream);
  cu::copy_to_device(sized(queries_, count, device), queries.data(), queries.size() * sizeof(std::int64_t), stream);
  cu::NearestListsArgs a;
  a.nodes = nodes;
  a.positions = positions_.data();
  a.samples = static_cast<int>(first.size()) - 1;
  a.first = first_.data();
  a.queries = count;
  a.query_ids = queries_.data();
  a.k = k;
  a.lists = sized(lists_, count * k, device);
  a.work = &work_;
  cu::nearest_lists(a, stream);
  cu::copy_to_host(lists.data(), lists_.data(), lists.size() * sizeof(std::int64_t), stream);
  cu::synchronize(stream);
  return lists;
}

}  // namespace surrogate::device
