// The BSA CUDA forward's class (bsa_device.hpp), shared by its two source files: bsa_cuda.cpp (weights,
// the one-rank geometry and forward, the layers) and bsa_cuda_distributed.cpp (the rank's slots of the
// distributed tree, the exchanges through host memory). CUDA builds only; internal to libsurrogate.
//
// The layers run on `rows_` rows in tree order cut into the segments of `layout_`: on one rank the whole
// batch (one segment of all samples), distributed the rank's slots (whole samples, and at most two parts
// of samples whose other rows live on other ranks). Every kernel computes a row, ball, block or query
// from the same inputs in the same order either way, so the two give the same bits.
//
// NOT YET RUN ON A GPU (share/docs/balltree.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <utility>
#include <span>
#include <vector>

#include "surrogate/model.hpp"  // index_t, used by point_device.hpp
#include "../balltree/device_exchange.hpp"
#include "../balltree/point_device.hpp"
#include "bsa_device.hpp"
#include "bsa_stages.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_bsa_gate.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"

namespace surrogate::bsa::detail {

namespace cu = kernels::cuda;

struct DeviceLayer {
  std::size_t norm1 = 0, norm2 = 0, sigma = 0, static_gate = 0;
  balltree::device::Dense qkv, out_proj, position_proj, w1, w2, w3, gate;
  balltree::device::Dense q_mlp[2], k_mlp[2], v_mlp[2];
  bool token_gate = false;
};

class BsaCudaForward final : public BsaDeviceForward {
 public:
  BsaCudaForward(const Network& net, int device);
  int device() const override { return device_; }
  std::vector<float> forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                             std::span<const float> positions, const balltree::Batch& batch, bool same_geometry,
                             int threads) override;
  std::vector<float> forward_distributed(const DistributedRows& rows, std::span<const float> slot_features,
                                         bool same_geometry, int threads) override;
  double last_forward_ms() const override { return forward_ms_; }
  double last_geometry_ms() const override { return geometry_ms_; }

 private:
  enum class Geometry { none, batch, distributed };

  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, std::span<const T> src) {
    balltree::device::upload(dst, src, device_, stream_.get());
  }
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, const std::vector<T>& src) {
    upload(dst, std::span<const T>(src));
  }
  const float* w(std::size_t offset) const { return weights_.data() + offset; }
  /// Call inside a catch block: the current exception as an Error naming the device.
  [[noreturn]] void raise_current() const;
  /// Runs `work` (device launches, copies, host work between exchanges) with the device current; a
  /// failure is an Error naming the device: thrown at once on one rank; distributed (dist_ set) kept, the
  /// rank's later device work skipped, until agree() before the next collective throws it on every rank.
  template <class Work>
  void on_device(Work&& work);
  /// Distributed: the kept failure of any rank becomes the same Error on every rank (one allreduce).
  /// Called before every collective, so no rank waits in one another rank has left.
  void agree();

  // bsa_cuda.cpp: launches on the stream.
  void dense(const balltree::device::Dense& l, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
             kernels::Activation act = kernels::Activation::none, const float* add_rows = nullptr, index_t ld_add = 0);
  void copy(const float* src, index_t ld_src, const std::int64_t* src_index, float* dst, index_t ld_dst,
            const std::int64_t* dst_index, index_t rows, int width);
  void rms_norm(const float* x, float* y, const float* weight);
  void map(cu::RowMap op, float* x, index_t ld, index_t rows, int width);
  void add_rows(float* x, const float* y);

  /// Positions (tree and rotated order) uploaded with their ball-relative offsets, the work arrays and
  /// the compression's index arrays sized for rows_ rows in layout_ (bsa_cuda.cpp).
  void set_rows(std::span<const float> pos, std::span<const float> pos_rot, index_t points);
  void set_geometry(const balltree::RotatedTrees& trees, std::span<const float> positions, index_t points);
  void compress(const balltree::device::Dense* mlp, int column, float* dst);
  void sparse_attention(const DeviceLayer& L, const float* pos, int threads);
  void global_attention();
  void run_layer(const DeviceLayer& L, float* x, const float* pos, const float* rel, int threads);
  /// The depth layers with the long residual on x_ (rows_ rows); rotated layers through rot_ on one
  /// rank, through the rotation exchange distributed.
  void layers(int threads);

  // bsa_cuda_distributed.cpp: what crosses ranks (host staging, the CPU path's plans).
  void set_distributed_geometry(const DistributedRows& rows);
  /// k_all/v_all (device) and kc_all_host_ = the batch's compressed K/V (all-gathered).
  void gather_compressed(index_t local_blocks);
  /// The token K/V rows of the blocks that the partial segments selected, fetched from their owners into
  /// fetched_, and first_row_ (per partial segment, nb entries: the block's first fetched row or -1).
  void fetch_selected_blocks();
  /// Global attention: the K/V rows of every partial segment's sample into fetched_ (n rows each).
  void fetch_sample_rows();

  const Network* net_;
  Config cfg_;
  int device_ = -1;
  cu::Stream stream_;
  std::vector<float> arena_;  // host image of the weights (kept only until the upload)
  cu::DeviceBuffer<float> weights_;
  balltree::device::Dense embed_;
  std::vector<DeviceLayer> layers_;

  // Geometry: the rows (set_geometry / set_distributed_geometry).
  Geometry geometry_ = Geometry::none;
  RowLayout layout_;
  index_t points_ = 0, rows_ = 0, n_ = 0;  // points (one rank), rows here, slots per sample
  std::vector<std::int64_t> geometry_index_;  // tree.index of the uploaded one-rank geometry (for the check)
  cu::DeviceBuffer<float> pos_, rel_, pos_rot_, rel_rot_;
  cu::DeviceBuffer<std::int64_t> tree_index_, slot_, rot_, compress_index_, block_start_;
  // Distributed (valid during forward_distributed; the exchanges kept with the geometry).
  const DistributedRows* dist_ = nullptr;
  std::exception_ptr pending_;  // distributed: this rank's failure, not yet agreed
  bool any_partial_ = false;  // some rank holds part of a sample (else nothing is fetched)
  std::unique_ptr<balltree::device::DeviceExchange> rotation_, sample_rows_;
  // Work arrays.
  cu::DeviceBuffer<float> features_, e_, x_, residual_, xr_, h_, u_, o_, local_, coarse_, fine_, gates_, a1_, a2_, out_;
  cu::DeviceBuffer<float> kc_, vc_, qc_, mlp_in_, mlp_hidden_, kc_all_, vc_all_, fetched_;
  cu::DeviceBuffer<std::int32_t> sel_;
  cu::DeviceBuffer<std::int64_t> first_row_;
  std::vector<float> kc_host_, vc_host_, kc_all_host_, vc_all_host_, q_host_;
  std::vector<std::int32_t> sel_host_;
  std::vector<std::size_t> sel_offsets_;  // segment i's selection at sel_host_[sel_offsets_[i]]
  std::vector<std::int64_t> first_row_host_;
  double forward_ms_ = 0.0, geometry_ms_ = 0.0;
};

template <class Work>
void BsaCudaForward::on_device(Work&& work) {
  if (pending_) return;  // this rank failed earlier: nothing more until the failure is agreed
  try {
    try {
      cu::DeviceGuard guard(device_);
      work();
    } catch (...) {
      raise_current();
    }
  } catch (...) {
    if (dist_ == nullptr) throw;
    pending_ = std::current_exception();
  }
}

inline void BsaCudaForward::agree() {
  if (dist_ == nullptr) return;
  collectively(*dist_->comm, [&] {
    if (pending_) std::rethrow_exception(std::exchange(pending_, nullptr));
  });
}

}  // namespace surrogate::bsa::detail
