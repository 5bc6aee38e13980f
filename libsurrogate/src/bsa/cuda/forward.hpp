// The BSA CUDA forward's classes (device.hpp), shared by forward.cpp (weights, the one-process geometry,
// program.hpp's Exec on the device) and distributed.cpp (a plan's slots, what crosses ranks): the CPU
// forward's stage program runs through ops::CudaOps on the rows of a Geometry cut into the segments of
// its RowLayout, the whole batch in one process or the rank's slots on a plan. CUDA builds only;
// share/docs/balltree.md, "BSA on a CUDA device".
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "../../device/compute_graph.hpp"
#include "../../device/layers.hpp"
#include "../../device/steps.hpp"
#include "../../ops/cuda_ops.hpp"
#include "../host_ops.hpp"
#include "../network.hpp"
#include "../plan.hpp"
#include "../program.hpp"
#include "device.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::bsa::detail {

namespace cu = kernels::cuda;
using ops::CudaOps;

/// The rows of a forward on the device: their positions and index arrays, sized work arrays and the
/// selection's host buffers (forward.cpp set_rows); a plan's (kept in the plan) or a one-process batch's
/// (kept by the caller).
struct Geometry final : balltree::DeviceGeometry {
  explicit Geometry(int device) : DeviceGeometry(device) {}
  bool on_plan = false;  // a plan's slots (else a one-process batch)
  RowLayout layout;
  index_t points = 0, rows = 0, n = 0;  // points (one process), rows here, slots per sample
  cu::DeviceBuffer<float> pos, rel, pos_rot, rel_rot;
  cu::DeviceBuffer<float> centres;  // the balls' centres while rel and rel_rot are computed
  cu::DeviceBuffer<std::int64_t> tree_index, slot, rot, compress_index, block_start;
  bool any_partial = false;  // a plan where some rank holds part of a sample (else nothing is fetched)
  // Work arrays.
  cu::DeviceBuffer<float> features, e, x, residual, xr, h, u, o, local, coarse, fine, gates, a1, a2, out;
  cu::DeviceBuffer<float> kc, vc, qc, mlp_in, mlp_hidden, kc_all, vc_all, fetched;
  cu::DeviceBuffer<float> block;  // forward_rows on a plan: the rank's block rows (c_in, then c_hidden values)
  cu::DeviceBuffer<float> positions;  // one process: the points' positions, point order
  cu::DeviceBuffer<float> head_hidden, values;  // the wrapper's
  cu::DeviceBuffer<std::int32_t> sel;
  cu::DeviceBuffer<std::int64_t> first_row;
  std::vector<std::int32_t> sel_host;     // a plan's selection on the host (the blocks to fetch)
  std::vector<std::size_t> sel_offsets;  // segment i's selection at sel[sel_offsets[i]]
  std::vector<std::int64_t> first_row_host;
};

class BsaCudaForward final : public BsaDeviceForward {
 public:
  BsaCudaForward(const Network& net, int device);
  int device() const override { return device_; }
  using BsaDeviceForward::forward;
  std::unique_ptr<balltree::DeviceGeometry> upload_geometry(const balltree::RotatedTrees& trees,
                                                            std::span<const float> positions,
                                                            const balltree::Batch& batch) override;
  std::vector<float> forward(balltree::DeviceGeometry& geometry, std::span<const float> features) override;
  std::vector<float> forward(BsaPlan& plan, std::span<const float> slot_features) override;
  void forward_rows(BsaPlan& plan, balltree::DeviceGeometry* batch, const float* rows, index_t ld, float* out,
                    index_t ld_out) override;
  void* stream() const override { return stream_.get(); }
  void set_precision(Precision precision) override {
    precision_ = surrogate::device::tensor_core_precision(precision);
  }
  double last_forward_ms() const override { return forward_ms_; }
  double last_geometry_ms() const override { return geometry_ms_; }

 protected:
  const Network& net() const override { return *net_; }

 private:
  friend class DeviceExec;  // forward.cpp: program.hpp's Exec on this forward
  /// The layers' Ops on this forward's weights, stream and precision.
  CudaOps device_ops() const { return {weights_, stream_.get(), precision_}; }
  /// Values a row of a forward's result: c_hidden, or 1 through the ShapeNet-Car wrapper.
  int out_width() const { return wrapper_ ? 1 : cfg_.c_hidden; }
  /// The wrapper's stages on g_ (rows rows): its Fourier features of `positions` into g_->features (once
  /// per geometry: they depend on the points alone), and pred_head of `y` (c_hidden values a row) into
  /// g_->values (every forward).
  void wrapper_features(const float* positions, index_t rows);
  void wrapper_head(const float* y, index_t rows);
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, std::span<const T> src) {
    surrogate::device::upload(dst, src, device_, stream_.get());
  }
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, const std::vector<T>& src) {
    upload(dst, std::span<const T>(src));
  }
  /// The device and stream of the moves, with the transport of the plan's communicator.
  Place place() const;

  /// With g_->pos and g_->pos_rot (tree and rotated order) on the device: their ball-relative offsets, the
  /// work arrays and the compression's index arrays sized for g_->rows rows in g_->layout.
  void set_rows(index_t points);
  void set_batch_geometry(const balltree::RotatedTrees& trees, std::span<const float> positions, index_t points);
  /// program.hpp's stages on g_ (DeviceExec, forward.cpp): the embedding of `features` into h, h's rows
  /// gathered into g_->x through to_tree (one process; null on a plan: h is g_->x), the layers.
  void run(const ops::Rows& features, const ops::Rows& h, const std::int64_t* to_tree);
  /// A one-process batch (g_): its features through the layers into g_->out (points x c_hidden, point
  /// order), captured as one graph from the second forward on the same geometry on (device::ComputeGraph).
  void compute_batch();

  // distributed.cpp: a plan's slots and what crosses ranks (the plan's exchanges on device rows).
  void set_plan_geometry(Geometry& geometry, const BsaPlan& plan);
  /// The layers on the plan's slots (its geometry uploaded by the first call, kept in the plan): `load`
  /// fills g_->features (slots x c_in), `store` takes g_->x (slots x c_hidden); with `timed`, CUDA events
  /// around the whole, read by waiting for the device. Collective; errors agreed.
  template <class Load, class Store>
  void run_on_plan(BsaPlan& plan, Load&& load, Store&& store, bool timed);
  /// forward_rows on the plan's slots: the rows to the block and the slots, and back, on the device.
  void forward_plan_rows(BsaPlan& plan, const float* rows, index_t ld, float* out, index_t ld_out);
  /// g_->kc_all / vc_all = the batch's compressed K/V (the plan's all-gather).
  void gather_compressed();
  /// The token K/V rows of the blocks that the partial segments selected, fetched from their owners into
  /// g_->fetched, and g_->first_row (per partial segment, nb entries: the block's first fetched row or -1).
  void fetch_selected_blocks();
  /// Global attention: the K/V rows of every partial segment's sample into g_->fetched (n rows each).
  void fetch_sample_rows();

  const Network* net_;
  Config cfg_;
  int device_ = -1;
  cu::Stream stream_;
  surrogate::device::WeightArena weights_;
  program::Layers<CudaOps> layers_;
  std::unique_ptr<balltree::wrapper::Layers<CudaOps>> wrapper_;  // the ShapeNet-Car wrapper's, or null
  cu::MlpPrecision precision_ = cu::MlpPrecision::fp32;  // of the dense layers
  surrogate::device::ComputeGraph graph_;  // compute_batch()'s

  // The current call.
  Geometry* g_ = nullptr;  // the rows being uploaded or run on
  BsaPlan* plan_ = nullptr;  // on a plan: its exchanges
  surrogate::device::Steps steps_;  // its device steps (device/steps.hpp): agreed across the plan's ranks
  double forward_ms_ = 0.0, geometry_ms_ = 0.0;
};

}  // namespace surrogate::bsa::detail
