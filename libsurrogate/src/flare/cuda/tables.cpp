// FLARE's device tables of a point set (tables.hpp).
#include "tables.hpp"

#include <span>
#include <vector>

#include "../../device/layers.hpp"

namespace surrogate::flare::cuda {

Tables::Tables(const Plan& plan, int device, int chunk_rows, cudaStream_t stream)
    : DeviceTables(device) {
  const SampleLayout& layout = plan.layout();
  std::vector<cu::LatentChunk> chunks, tiles;
  std::vector<int> chunk_begin;
  const auto& segments = layout.segments();
  for (std::size_t s = 0; s < segments.size(); ++s) {
    chunk_begin.push_back(static_cast<int>(chunks.size()));
    cu::append_chunks(segments[s].begin, segments[s].end, static_cast<int>(s), chunk_rows, chunks);
    cu::append_chunks(segments[s].begin, segments[s].end, static_cast<int>(s), cu::kDecodeRows, tiles);
  }
  chunk_begin.push_back(static_cast<int>(chunks.size()));
  device::upload(chunks_, std::span<const cu::LatentChunk>(chunks), device, stream);
  device::upload(tiles_, std::span<const cu::LatentChunk>(tiles), device, stream);
  device::upload(segment_chunk_begin_, std::span<const int>(chunk_begin), device, stream);
  device::upload(segment_sample_, std::span<const index_t>(plan.segment_sample()), device, stream);
  device::upload(order_, std::span<const index_t>(layout.order()), device, stream);
  cu::synchronize(stream);  // the host vectors go out of scope
  num_chunks_ = static_cast<int>(chunks.size());
  num_tiles_ = static_cast<int>(tiles.size());
  segments_ = plan.segments();
  has_order_ = !layout.order().empty();
}

cu::SegmentInfo Tables::segment_info() const {
  cu::SegmentInfo s;
  s.chunk_begin = segment_chunk_begin_.data();
  s.sample = segment_sample_.data();
  s.segments = segments_;
  return s;
}

}  // namespace surrogate::flare::cuda
