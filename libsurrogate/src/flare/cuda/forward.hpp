// FLARE's forward pass on a CUDA device (CUDA builds): the weights uploaded once (weights.cpp), every
// point-local stage on the device (forward.cpp), the encode of each block merged across the ranks through
// the communicator's DeviceTransport (encode_merge.cpp). share/docs/cuda.md, "FLARE on the device".
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../../cuda_errors.hpp"
#include "../../device/caller_rows.hpp"
#include "../../device/compute_graph.hpp"
#include "../../device/layers.hpp"
#include "../config.hpp"
#include "../network.hpp"
#include "../plan.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "tables.hpp"

namespace surrogate::flare::cuda {

/// CUDA-event timings of the last forward (milliseconds on the device's clock: upload of the inputs,
/// everything between, download of the outputs) and the transport of its encode merges.
struct Timing {
  float upload_ms = 0, compute_ms = 0, download_ms = 0, total_ms = 0;
  std::string transport;  // "none" (one rank) or the communicator's DeviceTransport::name()
};

class Forward {
 public:
  /// Uploads the CPU network's layers (the model's only host copy of its weights) and the model's
  /// normalisation to CUDA device `device`. Error(unsupported) when no such device is visible or the
  /// kernels do not cover the model (head width above 64, an MLP width above 256); CUDA errors as
  /// cuda_errors.hpp maps them.
  Forward(const Config& cfg, const Network& network, const Normalization& normalization, int device);
  ~Forward();
  Forward(const Forward&) = delete;
  Forward& operator=(const Forward&) = delete;

  /// The device the weights live on.
  int device() const { return device_; }
  /// Model::forward on host arrays (normalised inputs in the plan's working order): the inputs are copied
  /// to the device, the outputs back. Collective; errors agreed.
  void forward_host_arrays(const Comm& comm, Plan& plan, const float* in, index_t ld_in, float* out, index_t ld_out,
                           const RunOptions& options);
  /// Model::predict_device: the caller's arrays are in this device's memory; the inputs are gathered into
  /// the working order and normalised, the outputs de-normalised and scattered, all on the device.
  /// `check_inputs` receives this rank's per-channel counts of non-finite inputs, on every rank at the same
  /// point, before any collective of the forward (it may itself be collective); `check_outputs`, unless
  /// empty, those of the outputs after the forward. Collective; errors agreed.
  using CountCheck = std::function<void(const std::vector<std::uint64_t>&)>;
  void forward_device_arrays(const Comm& comm, Plan& plan, const surrogate::Model::DeviceArrays& arrays,
                             const RunOptions& options, const CountCheck& check_inputs, const CountCheck& check_outputs);
  const Timing& timing() const { return timing_; }
  /// Whether a kept point set's compute runs as one captured graph (default; compute()), or kernel by
  /// kernel: the benchmark's comparison of the launch cost.
  void set_graphs(bool on) { graph_.set_enabled(on); }

 private:
  /// A residual MLP: layers [first, first + count) of the layer table.
  struct Mlp {
    int first = 0, count = 0;
    int in = 0, out = 0, max_width = 0;
  };
  /// One layer of the table before the upload: offsets of its packed weights in the arena.
  struct LayerSpec {
    std::size_t weight_t = 0, bias = 0;
    device::Fragments fragments;
    int in = 0, out = 0;
    kernels::Activation act = kernels::Activation::none;
    bool add_input = false;
  };
  struct Block {
    device::Norm norm1, norm2;
    std::optional<device::Norm> k_norm;
    Mlp k_proj, v_proj, ffn, out_proj;
    std::size_t q = 0;  // latent_queries(): [H][M][E]
  };

  // the weights (weights.cpp)
  Mlp add_mlp(const ResidualMlp& mlp);
  /// One layer of the table, packed for the fused MLP kernel.
  void add_linear(const kernels::PackedLinear& layer, kernels::Activation act, bool add_input);
  void upload(const Normalization& normalization);

  // the forward (forward.cpp); stages enqueue on stream_
  /// The plan's tables on this device, built on first use.
  const Tables& tables(Plan& plan);
  /// Sizes the workspace for the plan's points (buffers only grow).
  void reserve(const Plan& plan, const Tables& t, bool reproducible);
  cu::LatentProblem problem(const Tables& t, int b) const;
  /// program.hpp's Ops and Exec on this device (forward.cpp).
  class DeviceOps;
  class DeviceExec;
  /// The compute of a default-mode forward in one process (input MLP, every block, the head): on the
  /// second forward with the same tables, buffers and precision, captured as one graph, then replayed.
  void compute(const Tables& t);
  void compute_direct(const Tables& t);
  /// The forward: `load` fills in_ (n x in_dim, normalised, working order) on the stream, `store`
  /// enqueues the use of out_ (n x out_dim), `finish` runs on the host after the stream completed;
  /// `loaded`, when given, runs on every rank once the load step succeeded everywhere (collectives allowed).
  using Stage = std::function<void(cudaStream_t, const Tables&)>;
  void run(const Comm& comm, Plan& plan, const RunOptions& options, const Stage& load, const Stage& store,
           const std::function<void()>& finish, const std::function<void()>& loaded = {});

  // the encode across ranks (encode_merge.cpp)
  /// The global part of the encode of block b, between its local partials and its Z (collective).
  void merge_encode(const Comm& comm, const Plan& plan, const Tables& t, int b, bool reproducible);
  void allreduce(const Comm& comm, void* device_data, std::size_t count, DType type, ReduceOp op);
  /// Fixed-point scales of the local segments from the global sample sizes and |v| maxima (host).
  void exact_scales(const Plan& plan);
  /// Layout of exact_: 2 (E + 1) fixed-point words per (sample, head, latent), then one count per
  /// (sample, head, latent) of the terms that did not fit; exact_words() is where the counts begin.
  std::size_t exact_latents() const { return static_cast<std::size_t>(samples_) * H_ * M_; }
  std::size_t exact_words() const { return exact_latents() * (static_cast<std::size_t>(E_) + 1) * 2; }
  std::size_t exact_size() const { return exact_words() + exact_latents(); }

  /// Runs `work` under the device guard and agrees on the outcome (collective). Across ranks the agreement
  /// comes before a collective and needs the step's kernels finished: it waits for the stream. One process
  /// has no collective to guard: the step's asynchronous errors surface at the forward's last wait.
  template <class F>
  void local_step(const Comm& comm, F&& work) {
    Status status;
    try {
      kernels::cuda::DeviceGuard guard(device_);
      work();
      if (comm.size() > 1) stream_.synchronize();
    } catch (...) {
      status = detail::status_of_current_cuda_error("flare", device_);
    }
    comm.agree_or_throw(status);
  }

  Config cfg_;
  int device_;
  int C_, H_, M_, E_;
  int sm_count_ = 1;
  int slices_ = 1;                                       // point slices per latent of the encode kernels
  cu::MlpPrecision precision_ = cu::MlpPrecision::fp32;  // of the current forward
  cu::Stream stream_;
  cu::Event ev_start_, ev_uploaded_, ev_computed_, ev_end_;
  Timing timing_;
  DeviceTransport* transport_ = nullptr;  // the communicator's, for the current forward (several ranks)

  // weights
  device::WeightArena weights_;
  std::vector<LayerSpec> layer_specs_;  // until the upload
  cu::DeviceBuffer<cu::MlpLayer> layers_;
  Mlp in_proj_, out_mlp_;
  std::optional<device::Norm> out_norm_;
  std::vector<Block> blocks_;
  std::unique_ptr<device::CallerRows> caller_;  // the normalisation, for the caller's device arrays

  // workspace, reused between calls; n_ and samples_ of the current forward
  index_t n_ = 0, samples_ = 0;
  cu::DeviceBuffer<float> in_, x_, scratch_, keys_, values_, out_;
  device::ComputeGraph graph_;  // the captured compute (compute())
  cu::PinnedBuffer<float> in_host_, out_host_;
  cu::DeviceBuffer<std::int32_t> part_ref_, local_ref_, global_ref_;
  cu::DeviceBuffer<double> part_acc_, sums_;
  cu::DeviceBuffer<float> part_max_, part_vmax_, maxima_;  // maxima_: [B][H][M] logits, then [B][H] |v|
  cu::DeviceBuffer<std::int64_t> exact_;
  cu::DeviceBuffer<kernels::ExactScale> scales_;  // [S] sum scales, then [S][H] value scales
  std::vector<kernels::ExactScale> scales_host_;
  std::vector<float> value_max_host_;
  cu::DeviceBuffer<float> z_;  // [S][H][M][E]
};

}  // namespace surrogate::flare::cuda
