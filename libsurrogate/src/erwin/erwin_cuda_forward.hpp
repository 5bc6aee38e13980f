// The Erwin CUDA forward's class (erwin_device.hpp), shared by its two sources: erwin_cuda.cpp (weights,
// the level sequence, the forward) and erwin_cuda_geometry.cpp (the geometry of a layout on the device).
// CUDA builds only; internal to libsurrogate.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "erwin_cuda_layout.hpp"
#include "erwin_device.hpp"
#include "erwin_stages.hpp"
#include "surrogate/model.hpp"  // index_t, used by point_device.hpp
#include "../balltree/point_device.hpp"
#include "../cuda_errors.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"

namespace surrogate::erwin::detail::cuda_forward {

namespace cu = kernels::cuda;
using kernels::Activation;

/// Call inside a catch block: CUDA runtime errors and rejected launches become Error naming the device.
[[noreturn]] inline void raise_current(int device) { surrogate::detail::raise_current_cuda_error("erwin", device); }

using balltree::device::Dense;
using balltree::device::ball_relative;
struct Block {
  int dim = 0, heads = 0, ball = 0, hidden = 0;
  std::size_t norm1 = 0, norm2 = 0, sigma = 0;
  bool bias = false;  // distance bias (sigma)
  Dense qkv, proj, pe, w1, w2, w3;
};
struct Step {
  Dense message, update;
  std::size_t message_w = 0, message_b = 0, update_w = 0, update_b = 0;
};
struct Norm {  // folded eval BatchNorm
  std::size_t alpha = 0, beta = 0;
};

/// The geometry of one level: positions (level order) and ball-relative positions, the same for the
/// rotated order, and the children's positions relative to their parent (transition to the next level).
struct Level {
  int index = 0;
  index_t nodes = 0;
  int width = 0;  // c_hidden of the level = row stride of its node array
  cu::DeviceBuffer<float> pos, rel, pos_rot, rel_rot, child_rel;
  cu::DeviceBuffer<float> x;  // the node array (nodes x width); the encoder's output is the decoder's skip
};

class ErwinCudaForward final : public ErwinDeviceForward {
 public:
  ErwinCudaForward(const Network& net, int device, index_t edge_chunk);
  int device() const override { return device_; }
  std::vector<float> forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                             std::span<const float> positions, const balltree::Batch& batch,
                             std::span<const std::int64_t> edge_index, bool same_geometry) override;
  std::vector<float> forward(const DistributedPlan& plan, std::span<const float> block_features,
                             bool same_geometry) override;
  double last_forward_ms() const override { return forward_ms_; }
  double last_geometry_ms() const override { return geometry_ms_; }

 private:
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, std::span<const T> src) {
    balltree::device::upload(dst, src, device_, stream_.get());
  }
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, const std::vector<T>& src) {
    upload(dst, std::span<const T>(src));
  }
  std::size_t add(const float* values, std::size_t count) { return balltree::device::append(arena_, values, count); }
  Dense add_dense(const kernels::PackedLinear& layer) { return balltree::device::append_dense(arena_, layer); }
  Block add_block(const BlockWeights& b);
  const float* w(std::size_t offset) const { return weights_.data() + offset; }

  /// Runs `work` (launches) unless an earlier one failed; a failure is kept as pending_ (an Error).
  template <class F>
  void launch(F&& work);
  /// A movement of the layout: after the pending error is agreed; collective when distributed, else a launch.
  template <class F>
  void move(F&& movement);
  /// The pending error agreed over the layout's ranks (or raised, in one process): call before every
  /// collective movement and at the end.
  void agree_pending();
  /// The whole forward on the current layout: features (points x c_in, host) -> points x c_hidden[0].
  std::vector<float> run(std::span<const float> features, const void* geometry_source, bool same_geometry,
                         const std::function<std::unique_ptr<DeviceLayout>()>& make_layout);
  void set_geometry();
  void dense(const Dense& l, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
             Activation act = Activation::none, const float* add = nullptr, index_t ld_add = 0);
  void copy(const float* src, index_t ld_src, const std::int64_t* src_index, float* dst, index_t ld_dst,
            const std::int64_t* dst_index, index_t rows, int width);
  void norm(const float* x, index_t ldx, float* y, index_t ldy, index_t rows, int dim, const float* weight,
            const float* bias, float eps, bool rms);
  void message_passing();
  void run_block(const Block& b, float* x, index_t rows, const float* pos, const float* rel);
  void run_blocks(const std::vector<Block>& blocks, Level& level);
  void levels();

  const Network* net_;
  Config cfg_;
  int device_ = -1;
  index_t edge_chunk_;  // messages per chunk of receivers (bounds msg_in_ and msg_)
  cu::Stream stream_;
  std::vector<float> arena_;  // host image of the weights (kept only until the upload)
  cu::DeviceBuffer<float> weights_;
  Dense embed_;
  std::vector<Step> steps_;
  std::vector<std::vector<Block>> encoder_, decoder_;
  std::vector<Block> bottleneck_;
  std::vector<Dense> pool_, unpool_;
  std::vector<Norm> pool_bn_, unpool_bn_;

  // Geometry (set_geometry).
  std::unique_ptr<DeviceLayout> layout_;
  const void* geometry_source_ = nullptr;  // the trees or the plan the layout was made of
  Status pending_;                         // a failed launch, not yet agreed
  std::vector<Level> levels_;
  cu::DeviceBuffer<std::int64_t> edge_src_, edge_dst_, edge_start_;  // edges grouped by receiver
  cu::DeviceBuffer<float> edge_rel_;                                 // p_src - p_dst, in that order
  std::vector<std::pair<index_t, index_t>> receiver_chunks_;          // [r0, r1) with few enough edges
  std::vector<std::int64_t> edge_start_host_;  // the same on the host
  // Work arrays (sized by set_geometry).
  cu::DeviceBuffer<float> features_, h_, msg_in_, msg_, agg_, upd_in_, upd_, out_;
  cu::DeviceBuffer<float> xr_, hb_, att_, u_, a1_, a2_, join_, z_;
  double forward_ms_ = 0.0, geometry_ms_ = 0.0;
};

template <class F>
void ErwinCudaForward::launch(F&& work) {
  if (!pending_.ok()) return;
  try {
    work();
  } catch (...) {
    try {
      raise_current(device_);
    } catch (...) {
      pending_ = Status::from_current_exception();
    }
  }
}

template <class F>
void ErwinCudaForward::move(F&& movement) {
  agree_pending();
  if (layout_->comm()) movement();  // DeviceExchange: its own errors agreed
  else launch(movement);
}

}  // namespace surrogate::erwin::detail::cuda_forward
