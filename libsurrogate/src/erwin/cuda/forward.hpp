// The Erwin CUDA forward's classes (device.hpp), shared by forward.cpp (weights, the level sequence) and
// geometry.cpp (a layout's geometry on the device). CUDA builds only; share/docs/balltree.md, "Erwin on a
// CUDA device".
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "../../cuda_errors.hpp"
#include "../../device/layers.hpp"
#include "../network.hpp"
#include "device.hpp"
#include "layout.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"

namespace surrogate::erwin::detail::cuda_forward {

namespace cu = kernels::cuda;
using kernels::Activation;
using surrogate::device::Dense;
using surrogate::device::Norm;

/// Call inside a catch block: CUDA runtime errors and rejected launches become Error naming the device.
[[noreturn]] inline void raise_current(int device) { surrogate::detail::raise_current_cuda_error("erwin", device); }

struct Block {
  int dim = 0, heads = 0, ball = 0, hidden = 0;
  Norm norm1, norm2;   // RMSNorms
  std::size_t sigma = 0;
  bool bias = false;  // distance bias (sigma)
  Dense qkv, proj, pe, w1, w2, w3;
};
struct Step {
  Dense message, update;
  Norm message_norm, update_norm;  // LayerNorms
};
struct BatchNorm {  // folded eval BatchNorm
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

/// A layout's geometry on the device and the work arrays sized for it (geometry.cpp): a plan's (kept in
/// the plan) or a one-process batch's (kept by the caller).
struct Geometry final : balltree::DeviceGeometry {
  explicit Geometry(int device) : DeviceGeometry(device) {}
  std::unique_ptr<DeviceLayout> layout;
  std::vector<Level> levels;
  cu::DeviceBuffer<std::int64_t> edge_src, edge_dst, edge_start;  // edges grouped by receiver
  cu::DeviceBuffer<float> edge_rel;                               // p_src - p_dst, in that order
  std::vector<std::pair<index_t, index_t>> receiver_chunks;       // [r0, r1) with few enough edges
  std::vector<std::int64_t> edge_start_host;                      // the same on the host
  cu::DeviceBuffer<float> features, h, msg_in, msg, agg, upd_in, upd, out;
  cu::DeviceBuffer<float> xr, hb, att, u, a1, a2, join, z;
};

class ErwinCudaForward final : public ErwinDeviceForward {
 public:
  ErwinCudaForward(const Network& net, int device, index_t edge_chunk);
  int device() const override { return device_; }
  using ErwinDeviceForward::forward;
  std::unique_ptr<balltree::DeviceGeometry> upload_geometry(const balltree::RotatedTrees& trees,
                                                            std::span<const float> positions, const balltree::Batch& batch,
                                                            std::span<const std::int64_t> edge_index) override;
  std::vector<float> forward(balltree::DeviceGeometry& geometry, std::span<const float> features) override;
  std::vector<float> forward(ErwinPlan& plan, std::span<const float> block_features) override;
  double last_forward_ms() const override { return forward_ms_; }
  double last_geometry_ms() const override { return geometry_ms_; }

 private:
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, std::span<const T> src) {
    surrogate::device::upload(dst, src, device_, stream_.get());
  }
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, const std::vector<T>& src) {
    upload(dst, std::span<const T>(src));
  }
  Block add_block(const BlockWeights& b);
  const float* w(std::size_t offset) const { return weights_.data() + offset; }

  /// Runs `work` (launches) unless an earlier one failed; a failure is kept as pending_ (an Error).
  template <class F>
  void launch(F&& work);
  /// A movement of the layout: after the pending error is agreed; collective on a plan, else a launch.
  template <class F>
  void move(F&& movement);
  /// The pending error agreed over the layout's ranks (or raised, in one process): call before every
  /// collective movement and at the end.
  void agree_pending();
  /// `geometry` with its layout set: the geometry uploaded (collective on a plan; errors agreed).
  void upload_layout(Geometry& geometry);
  /// upload_layout()'s launches and host arithmetic (geometry.cpp).
  void set_geometry(Geometry& geometry);
  /// The whole forward on an uploaded geometry: features (points x c_in, host) -> points x c_hidden[0].
  std::vector<float> run(Geometry& geometry, std::span<const float> features);
  void dense(const Dense& l, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
             Activation act = Activation::none, const float* residual = nullptr, index_t ld_residual = 0);
  void copy(const float* src, index_t ld_src, const std::int64_t* src_index, float* dst, index_t ld_dst,
            const std::int64_t* dst_index, index_t rows, int width);
  void norm(const Norm& n, const float* x, index_t ldx, float* y, index_t ldy, index_t rows);
  void message_passing();
  void run_block(const Block& b, float* x, index_t rows, const float* pos, const float* rel);
  void run_blocks(const std::vector<Block>& blocks, Level& level);
  void levels();

  const Network* net_;
  Config cfg_;
  int device_ = -1;
  index_t edge_chunk_;  // messages per chunk of receivers (bounds msg_in and msg of the geometry)
  cu::Stream stream_;
  surrogate::device::WeightArena weights_;
  Dense embed_;
  std::vector<Step> steps_;
  std::vector<std::vector<Block>> encoder_, decoder_;
  std::vector<Block> bottleneck_;
  std::vector<Dense> pool_, unpool_;
  std::vector<BatchNorm> pool_bn_, unpool_bn_;

  // The current call.
  Geometry* g_ = nullptr;  // the geometry being uploaded or run on
  Status pending_;         // a failed launch, not yet agreed
  double forward_ms_ = 0.0, geometry_ms_ = 0.0;
};

template <class F>
void ErwinCudaForward::launch(F&& work) {
  if (!pending_.ok()) return;
  try {
    work();
  } catch (...) {
    pending_ = surrogate::detail::status_of_current_cuda_error("erwin", device_);
  }
}

template <class F>
void ErwinCudaForward::move(F&& movement) {
  agree_pending();
  if (g_->layout->comm()) movement();  // a plan's exchange: its own errors agreed
  else launch(movement);
}

}  // namespace surrogate::erwin::detail::cuda_forward
