// What FLARE's CUDA forward keeps per point set on its device (CUDA builds), in the point set's Plan: the
// encode chunks and decode tiles of the local segments, the segments' samples and the working order.
// share/docs/cuda.md, "FLARE on the device".
#pragma once

#include <cstdint>

#include "../../serial.hpp"
#include "../plan.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::flare::cuda {

namespace cu = kernels::cuda;

class Tables final : public DeviceTables {
 public:
  /// Uploads the tables of `plan` to `device` (synchronously): encode chunks of at most `chunk_rows`
  /// rows and decode tiles of cu::kDecodeRows rows, neither straddling two samples.
  Tables(const Plan& plan, int device, int chunk_rows, cudaStream_t stream);

  int num_chunks() const { return num_chunks_; }
  int num_tiles() const { return num_tiles_; }
  const cu::LatentChunk* chunks() const { return chunks_.data(); }
  const cu::LatentChunk* tiles() const { return tiles_.data(); }
  /// The local segments for the encode kernels: their chunks and their global samples.
  cu::SegmentInfo segment_info() const;
  /// Working row -> caller's row (the layout's order) on the device; null when the caller's order is
  /// already the working order.
  const index_t* order() const { return has_order_ ? order_.data() : nullptr; }
  /// A number no other Tables of this process had: what the forward's captured graph was built for.
  std::uint64_t serial() const { return serial_.value(); }

 private:
  surrogate::detail::Serial serial_;
  int num_chunks_ = 0, num_tiles_ = 0, segments_ = 0;
  bool has_order_ = false;
  cu::DeviceBuffer<cu::LatentChunk> chunks_, tiles_;
  cu::DeviceBuffer<int> segment_chunk_begin_;
  cu::DeviceBuffer<index_t> segment_sample_, order_;
};

}  // namespace surrogate::flare::cuda
