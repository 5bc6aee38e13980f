// The Erwin CUDA forward's classes (device.hpp), shared by forward.cpp (weights, the level sequence) and
// geometry.cpp (a layout's geometry on the device). CUDA builds only; share/docs/balltree.md, "Erwin on a
// CUDA device".
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "../../cuda_errors.hpp"
#include "../../device/compute_graph.hpp"
#include "../../device/layers.hpp"
#include "../../balltree/shapenet_wrapper.hpp"
#include "../../device/steps.hpp"
#include "../../ops/cuda_ops.hpp"
#include "../network.hpp"
#include "../program.hpp"
#include "device.hpp"
#include "layout.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"

namespace surrogate::erwin::detail::cuda_forward {

namespace cu = kernels::cuda;
using ops::CudaOps;

/// Call inside a catch block: CUDA runtime errors and rejected launches become Error naming the device.
[[noreturn]] inline void raise_current(int device) { surrogate::detail::raise_current_cuda_error("erwin", device); }

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
  cu::DeviceBuffer<float> features, h, agg, out;
  cu::DeviceBuffer<float> positions;  // the layout's edge_positions (point_positions without message
                                      // passing), when one process, the edges or the wrapper read them
  cu::DeviceBuffer<float> head_hidden, values;  // the wrapper's: points x c_hidden[0], x 1 (its features, in
                                                // `features`, are the geometry's)
  cu::DeviceBuffer<float> xr;
  /// The work rows of the program's tiles (program::Slot): h, u, att, a1, a2, join, z, msg_in, msg, upd_in, upd.
  std::array<cu::DeviceBuffer<float>, static_cast<std::size_t>(program::Slot::count)> work;
};

class ErwinCudaForward final : public ErwinDeviceForward {
 public:
  ErwinCudaForward(const Network& net, int device, index_t edge_chunk,
                   const balltree::wrapper::Layers<ops::HostOps>* wrapper);
  int device() const override { return device_; }
  using ErwinDeviceForward::forward;
  std::unique_ptr<balltree::DeviceGeometry> upload_geometry(const balltree::RotatedTrees& trees,
                                                            std::span<const float> positions, const balltree::Batch& batch,
                                                            std::span<const std::int64_t> edge_index) override;
  std::vector<float> forward(balltree::DeviceGeometry& geometry, std::span<const float> features) override;
  std::vector<float> forward(ErwinPlan& plan, std::span<const float> block_features) override;
  void forward_rows(ErwinPlan& plan, const float* rows, index_t ld, float* out, index_t ld_out) override;
  void* stream() const override { return stream_.get(); }
  double last_forward_ms() const override { return forward_ms_; }
  double last_geometry_ms() const override { return geometry_ms_; }
  void set_precision(Precision precision) override {
    precision_ = surrogate::device::tensor_core_precision(precision);
  }

 private:
  friend class DeviceExec;  // forward.cpp: program.hpp's Exec on this forward
  /// The layers' Ops on this forward's weights, stream and precision.
  CudaOps device_ops() const { return {weights_, stream_.get(), precision_}; }
  /// The rows a forward's result is read from (g_): the network's out, or the wrapper's values.
  float* result_rows() const { return wrapper_ ? g_->values.data() : g_->out.data(); }
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, std::span<const T> src) {
    surrogate::device::upload(dst, src, device_, stream_.get());
  }
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, const std::vector<T>& src) {
    upload(dst, std::span<const T>(src));
  }
  /// A movement of the layout: after the steps so far are agreed; collective on a plan, else a step.
  template <class F>
  void move(F&& movement);
  /// `geometry` with its layout set: the geometry uploaded (collective on a plan; errors agreed).
  void upload_layout(Geometry& geometry);
  /// upload_layout()'s launches and host arithmetic (geometry.cpp).
  void set_geometry(Geometry& geometry);
  /// The plan's geometry on this device: uploaded by the first forward there (collective, errors agreed),
  /// kept in the plan.
  Geometry& plan_geometry(ErwinPlan& plan);
  /// Values a point of the result: c_hidden[0], or 1 through the wrapper.
  int out_width() const { return wrapper_ ? 1 : cfg_.c_hidden[0]; }
  /// The whole forward on an uploaded geometry: features (points x c_in, host; none with the wrapper)
  /// -> points x out_width();
  /// `traffic`: the plan's count of its exchanges (null without a plan).
  std::vector<float> run(Geometry& geometry, std::span<const float> features, Traffic* traffic);
  /// The same between device rows: `load` fills the geometry's features and `store` takes its result, each
  /// a step or a move; with `timed`, CUDA events around the whole, read by waiting for the device.
  template <class Load, class Store>
  void run(Geometry& geometry, Load&& load, Store&& store, bool timed, Traffic* traffic);
  /// The network between the geometry's features and its out rows (no host wait): in one process one
  /// captured graph from the second forward on a geometry (device::ComputeGraph).
  void compute(Traffic* traffic);
  void compute_direct();

  const Network* net_;
  Config cfg_;
  int device_ = -1;
  index_t edge_chunk_;  // messages per chunk of receivers (bounds msg_in and msg of the geometry)
  cu::Stream stream_;
  surrogate::device::WeightArena weights_;
  program::Layers<CudaOps> layers_;
  std::unique_ptr<balltree::wrapper::Layers<CudaOps>> wrapper_;  // the ShapeNet-Car wrapper's, or null
  cu::MlpPrecision precision_ = cu::MlpPrecision::fp32;  // of the dense layers

  surrogate::device::ComputeGraph graph_;

  // The current call.
  Geometry* g_ = nullptr;          // the geometry being uploaded or run on
  surrogate::device::Steps steps_;  // its device steps (device/steps.hpp): agreed across a plan's ranks
  double forward_ms_ = 0.0, geometry_ms_ = 0.0;
};

template <class F>
void ErwinCudaForward::move(F&& movement) {
  steps_.agree();
  if (steps_.comm()) movement();  // a plan's exchange: its own errors agreed
  else steps_.run(movement);
}

}  // namespace surrogate::erwin::detail::cuda_forward
