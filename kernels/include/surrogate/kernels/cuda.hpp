// CUDA compute kernels (CUDA builds only; needs the CUDA toolkit's include directory): RAII device memory,
// streams and events, a guard for the caller's current device, and host-callable launchers of the FLARE
// kernels. Every launcher enqueues on the given stream and returns at once; errors of the CUDA runtime
// become kernels::cuda::CudaError (a std::runtime_error naming the call), never an exit.
//
// Layout conventions (device buffers, row-major, one point per row):
//  * a row stride (`ld*`) is any value >= the row's width; no padding columns are required or written;
//  * a point's result never depends on the other rows of a launch (which block, which rank): the same
//    arithmetic, in the same order, is applied to every row. The reproducible mode relies on this.
//  * FLARE heads: a row of keys or values holds C = H E channels, head h at columns [h E, h E + E).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "surrogate/kernels/cpu.hpp"  // index_t, Activation, ExactScale, kNoExponent

namespace surrogate::kernels::cuda {

// ---------------------------------------------------------------------------------------------------
// Errors, devices

/// A failed CUDA runtime call: what() is "<call>: <error name>: <error string>".
class CudaError : public std::runtime_error {
 public:
  CudaError(cudaError_t code, const std::string& message) : std::runtime_error(message), code_(code) {}
  cudaError_t code() const noexcept { return code_; }

 private:
  cudaError_t code_;
};

/// Throws CudaError naming `call` unless code is cudaSuccess.
void check(cudaError_t code, const char* call);
/// Checks the launch of the kernels just enqueued (cudaGetLastError).
void check_launch(const char* kernel);

/// The number of visible CUDA devices; 0 when there is none or no usable driver, with the runtime's
/// reason in *why (e.g. "cudaGetDeviceCount: cudaErrorInsufficientDriver: CUDA driver version is
/// insufficient for CUDA runtime version"). Never throws; clears the runtime's error state where it can
/// (without a usable driver the initialisation error is sticky and every runtime call keeps failing).
int device_count(std::string* why = nullptr) noexcept;

/// The device of the host backend ("cuda-emulated"): the CUDA kernels compiled by the host compiler and
/// run on the CPU by an emulator with deferred streams (share/docs/cuda.md, "The host backend").
/// Every function here takes it where it takes a device index.
inline constexpr int kEmulatedDevice = 1 << 20;
/// How messages name a device: its index, or "cuda-emulated".
inline std::string device_label(int device) {
  return device == kEmulatedDevice ? std::string("cuda-emulated") : std::to_string(device);
}

/// Makes `device` current for the guard's lifetime and restores the caller's current device afterwards.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_ = -1;
  bool was_emulated_ = false;
};

// ---------------------------------------------------------------------------------------------------
// Memory, streams, events

void* device_alloc(std::size_t bytes, int device);        // cudaMalloc on `device`; throws CudaError
void device_free(void* p, int device) noexcept;           // cudaFree on `device` (restores the current one)
void* pinned_alloc(std::size_t bytes);                    // cudaMallocHost; throws CudaError
void pinned_free(void* p) noexcept;

/// Owning device memory of `count` T on one device. Contents are uninitialised.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t count, int device) { resize(count, device); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept { swap(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    DeviceBuffer(std::move(o)).swap(*this);
    return *this;
  }
  ~DeviceBuffer() { device_free(data_, device_); }

  /// Reallocates only when the capacity grows or the device changes; contents are not preserved.
  void resize(std::size_t count, int device) {
    if (count <= count_ && device == device_ && data_) return;
    DeviceBuffer fresh;
    fresh.data_ = static_cast<T*>(device_alloc(std::max<std::size_t>(count, 1) * sizeof(T), device));
    fresh.count_ = count;
    fresh.device_ = device;
    swap(fresh);
  }
  void swap(DeviceBuffer& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(count_, o.count_);
    std::swap(device_, o.device_);
  }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t bytes() const noexcept { return count_ * sizeof(T); }
  int device() const noexcept { return device_; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
  int device_ = -1;
};

/// Page-locked host memory (fast, asynchronous copies).
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() { pinned_free(data_); }
  void resize(std::size_t count) {
    if (count <= count_ && data_) return;
    void* fresh = pinned_alloc(std::max<std::size_t>(count, 1) * sizeof(T));
    pinned_free(data_);
    data_ = static_cast<T*>(fresh);
    count_ = count;
  }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return count_; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

/// A non-blocking stream on one device (created with that device current; the caller's is restored).
class Stream {
 public:
  Stream() = default;
  explicit Stream(int device);
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  Stream(Stream&& o) noexcept { swap(o); }
  Stream& operator=(Stream&& o) noexcept {
    Stream(std::move(o)).swap(*this);
    return *this;
  }
  ~Stream();
  void swap(Stream& o) noexcept {
    std::swap(stream_, o.stream_);
    std::swap(device_, o.device_);
  }
  cudaStream_t get() const noexcept { return stream_; }
  int device() const noexcept { return device_; }
  /// cudaStreamSynchronize; throws CudaError (errors of earlier asynchronous work surface here).
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
  int device_ = -1;
};

/// A timing event on one device.
class Event {
 public:
  Event() = default;
  explicit Event(int device);
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept { swap(o); }
  Event& operator=(Event&& o) noexcept {
    Event(std::move(o)).swap(*this);
    return *this;
  }
  ~Event();
  void swap(Event& o) noexcept {
    std::swap(event_, o.event_);
    std::swap(device_, o.device_);
  }
  void record(cudaStream_t stream);
  /// Milliseconds from `start` to this event (both recorded and complete).
  float elapsed_ms_since(const Event& start) const;
  cudaEvent_t get() const noexcept { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
  int device_ = -1;
};

/// The work one stream was given, captured once as a CUDA graph and replayed with one launch: no
/// per-kernel launch cost, and the kernels' arguments as they were at the capture (the same buffers).
/// The emulated device's streams are captured by the host backend.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() { reset(); }
  /// Captures what `work` enqueues on `stream` (a stream of `device`, not the default stream; nothing
  /// runs) and instantiates it, replacing the graph held. A call inside `work` that waits for the stream
  /// fails the capture (CudaError); an exception of `work` ends the capture and passes through. Either
  /// way no graph is held afterwards.
  void capture(int device, cudaStream_t stream, const std::function<void()>& work);
  /// Enqueues the captured work on `stream` (throws CudaError; std::logic_error when none is held).
  void launch(cudaStream_t stream) const;
  bool empty() const noexcept { return exec_ == nullptr; }
  void reset() noexcept;

 private:
  void* exec_ = nullptr;  // cudaGraphExec_t, or the host backend's graph
  int device_ = -1;
};

/// cudaStreamSynchronize of a stream the caller holds as a raw handle; throws CudaError.
void synchronize(cudaStream_t stream);
/// cudaDeviceSynchronize on `device`; throws CudaError.
void device_synchronize(int device);
/// Orders the later work of `stream` (a stream of `device`) after everything enqueued so far on the
/// device's default stream (the legacy stream; with it, every blocking stream's earlier work): an event
/// recorded there that `stream` waits for. The host does not wait. Emulated device: drains its null queue.
void wait_for_default_stream(cudaStream_t stream, int device);
/// The number of multiprocessors of `device`.
int multiprocessor_count(int device);
/// The device whose memory holds p, or -1 (host memory, or not CUDA memory). Never throws.
int pointer_device(const void* p) noexcept;
/// A blocking copy between host memory and the memory of `device` (cudaMemcpy, cudaMemcpyDefault), then a
/// wait for the default stream: on return the data is in place, for work on any stream.
void copy_blocking(void* dst, const void* src, std::size_t bytes, int device);

/// Asynchronous copies (count elements) on `stream`.
void copy_to_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);
void copy_to_host(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);
void copy_on_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);
void zero(void* dst, std::size_t bytes, cudaStream_t stream);
/// Fills n values.
void fill(std::int32_t* dst, std::size_t n, std::int32_t value, cudaStream_t stream);
void fill(float* dst, std::size_t n, float value, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------
// The caller's arrays on the device (device-resident predict). Element (point i, component c) of a
// caller array is at data[i * point_stride + c * component_stride] (any strides), float or double.
// Row r of the working order is the caller's point order[r] (order == nullptr: the identity).

struct CallerInput {
  const void* data = nullptr;         // device, float or double
  bool is_double = false;
  index_t point_stride = 0, component_stride = 1;
  int channels = 0;
  index_t rows = 0;
  const index_t* order = nullptr;     // device, rows entries, or nullptr
  const double* mean = nullptr;       // device, channels entries; nullptr: no normalisation
  const double* std = nullptr;        // device, channels entries
  float* work = nullptr;              // device, rows x ld_work: (float(x) - mean) / std in double, as float
  index_t ld_work = 0;
  unsigned long long* bad = nullptr;  // device, channels counters of non-finite inputs (incremented)
  // Optional: a channel whose working values must lie strictly between range_lo and range_hi (a class
  // index, say). `outside` (device, zeroed by the caller) is raised to rows - r for every working row r
  // outside (atomicMax): afterwards 0 means none, else the first such row is rows - *outside.
  int range_channel = -1;
  float range_lo = 0, range_hi = 0;
  unsigned long long* outside = nullptr;
};
void gather_caller_input(const CallerInput& a, cudaStream_t stream);

struct CallerOutput {
  void* data = nullptr;               // device, float or double
  bool is_double = false;
  index_t point_stride = 0, component_stride = 1;
  int channels = 0;
  index_t rows = 0;
  const index_t* order = nullptr;
  const double* mean = nullptr;       // nullptr: no de-normalisation
  const double* std = nullptr;
  const float* work = nullptr;        // rows x ld_work: float(work * std + mean in double)
  index_t ld_work = 0;
  unsigned long long* bad = nullptr;  // device, channels counters of non-finite outputs, or nullptr: not counted
};
void scatter_caller_output(const CallerOutput& a, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------
// LayerNorm / RMSNorm, one warp per row. y may equal x.

struct NormArgs {
  const float* x = nullptr;
  index_t ldx = 0;
  float* y = nullptr;
  index_t ldy = 0;
  index_t rows = 0;
  int dim = 0;
  const float* weight = nullptr;  // dim values
  const float* bias = nullptr;    // dim values, or nullptr (LayerNorm without bias; RMSNorm)
  float eps = 1e-5f;
  bool rms = false;
};
void norm(const NormArgs& a, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------------
// Fused residual MLP: the activations of a row stay on chip between the layers (shared memory). Every
// width (in, out) must be <= kMaxMlpWidth.
//
// Layer l computes  h_{l+1} = act_l(h_l W_l^T + b_l) [+ h_l if add_input_l]; the last layer writes
// y = h_L [+ extra] to global memory.

inline constexpr int kMaxMlpWidth = 256;
inline constexpr int kMlpRows = 64;  // rows of one thread block of the FP32 kernel

/// Arithmetic of the products x W^T: FP32 FMAs (default), or tensor cores (mma.sync) with both operands
/// rounded to TF32 (cvt.rna: 10-bit mantissa, nearest, ties away) or BF16 (nearest even), FP32
/// accumulation. Bias, activation and residuals are FP32 in every mode.
enum class MlpPrecision { fp32, tf32, bf16 };

/// Row stride of a packed weight: round_up(out, 64).
int mlp_weight_ld(int out);
/// Appends the packed form of a torch.nn.Linear (weight (out, in) row-major, bias (out) or nullptr):
/// W^T as [round_up(in, 4)][mlp_weight_ld(out)] to `weight_t`, the bias as [mlp_weight_ld(out)] to `bias`,
/// zero padded.
void pack_mlp_linear(const float* weight, const float* bias, int out, int in, std::vector<float>& weight_t,
                     std::vector<float>& bias_out);
/// Words of pack_mlp_fragments for a layer (precision tf32 or bf16; std::invalid_argument for fp32).
std::size_t mlp_fragment_words(MlpPrecision precision, int out, int in);
/// Appends W (out, in) row-major as the tensor-core MLP's B fragments of `precision`, rounded to it and
/// zero padded: for each 8-column tile of W^T and each k tile (16 bf16, 8 tf32), 32 lanes x 2 words in
/// the order mma.sync reads them (kernels/cuda/host/mma.hpp).
void pack_mlp_fragments(const float* weight, int out, int in, MlpPrecision precision, std::vector<std::uint32_t>& words);

struct MlpLayer {                   // lives in device memory (an array of them per MLP)
  const float* weight_t = nullptr;  // device, packed by pack_mlp_linear (the FP32 kernel)
  const float* bias = nullptr;      // device, packed, 8-byte aligned
  const std::uint32_t* bf16 = nullptr;  // device, pack_mlp_fragments(bf16): needed by MlpPrecision::bf16
  const std::uint32_t* tf32 = nullptr;  // device, pack_mlp_fragments(tf32): needed by MlpPrecision::tf32
  int in = 0, out = 0, ld = 0;      // ld = mlp_weight_ld(out)
  Activation act = Activation::none;
  bool add_input = false;           // requires in == out
};

/// A LayerNorm / RMSNorm of the MLP's input rows, applied as the kernel reads them, with the norm
/// kernel's arithmetic (so the bits of norm() and then mlp()). weight == nullptr: none.
struct MlpInputNorm {
  const float* weight = nullptr;  // layers[0].in values
  const float* bias = nullptr;    // layers[0].in values, or nullptr (LayerNorm without bias; RMSNorm)
  float eps = 1e-5f;
  bool rms = false;
};

struct MlpArgs {
  MlpPrecision precision = MlpPrecision::fp32;
  const MlpLayer* layers = nullptr;  // DEVICE array of num_layers descriptors
  int num_layers = 0;
  int max_width = 0;                 // max over the layers of in and out
  MlpInputNorm norm;                 // optional, on x
  const float* x = nullptr;          // rows x layers[0].in; may be y with ldx == ldy (each row is read whole
  index_t ldx = 0;                   // before it is written), must not overlap y otherwise
  float* y = nullptr;                // rows x layers[last].out
  index_t ldy = 0;
  index_t rows = 0;
  const float* extra = nullptr;      // added to the output; may alias y (in-place residual)
  index_t ld_extra = 0;
};
/// Throws std::invalid_argument for widths above kMaxMlpWidth. FP32: a thread block takes kMlpRows rows
/// through every layer. Up to width 64 one wave of blocks takes tile after tile, the next tile's rows and
/// the next layer's W^T arriving while it computes (mlp_streamed_smem); wider, a block a tile, each layer's
/// W^T staged 64 output columns at a time (kernels/cuda/mlp.cu). The same sums either way.
void mlp(const MlpArgs& a, cudaStream_t stream);
/// Shared memory of the FP32 MLP's streamed form (three row tiles, two weight stages) for layers up to
/// max_width wide, or 0 above 64, where the staged form runs instead.
std::size_t mlp_streamed_smem(int max_width);
/// The tensor-core variant (a.precision tf32 or bf16; mlp() dispatches to it): each warp takes tiles of
/// 16 or 32 rows through every layer with mma.sync, the layer's B fragments read from global memory
/// (kernels/cuda/mlp_tensor_cores.cu). Shared memory of a block: 4 warps x 2 x 32 x lda floats for widths
/// up to 64 (the tile a warp computes on and the next rows'), else 2 warps x 2 x 16 x lda (ping-pong);
/// lda = round_up(w, 16) + 8 (bf16) or + 4 (tf32).
void mlp_tensor_cores(const MlpArgs& a, cudaStream_t stream);
/// Dynamic shared memory (bytes) of mlp_tensor_cores for the largest width w (host-side, testable).
std::size_t mlp_tensor_core_smem(MlpPrecision precision, int max_width);

// ---------------------------------------------------------------------------------------------------
// Latent (FLARE) attention. q: the latent queries of every head, [H][M][E] (normalised, times the
// attention scale). Points are processed in chunks (encode) or tiles (decode) that never straddle two
// samples; `segment` indexes the caller's local segments, whose sample index is `SegmentInfo::sample`.
//
// Default encode (partition-independent terms, double sums, exactly as the CPU's LatentEncodeArgs): for
// each (chunk, head, latent) and each of the chunk's `slices` point slices, a partial
//   ref = max_n k_n,   sum = sum_n 2^(l_n log2 e - ref),   acc[e] = sum_n 2^(l_n log2 e - ref) v_ne,
// with k_n = round(l_n log2 e); each term is a float whose bits depend only on l_n, the sums are double.
// The merge moves the partials of a segment to their largest exponent (exact power-of-two scalings) and
// adds them in a fixed order; ranks merge the same way (rescale, then sum).

inline constexpr int kMaxHeadDim = 64;

struct LatentChunk {
  index_t begin = 0;  // first row
  int rows = 0;
  int segment = 0;    // local segment
};
/// Appends the chunks of rows [begin, end) of one segment, at most `chunk_rows` rows each.
void append_chunks(index_t begin, index_t end, int segment, int chunk_rows, std::vector<LatentChunk>& chunks);

/// How the encode kernels cover the latents: grid.z = groups, `latents` latents per block, `slices`
/// threads per latent (point slices), threads = latents * slices <= 256.
struct EncodeShape {
  int groups = 1, latents = 1, slices = 1, threads = 1;
};
EncodeShape encode_shape(int M);

struct LatentProblem {
  const float* q = nullptr;  // device [H][M][E]
  int H = 0, M = 0, E = 0;
  const float* k = nullptr;  // device, rows of H E channels
  const float* v = nullptr;
  index_t ld = 0;            // row stride of k and v
  const LatentChunk* chunks = nullptr;  // device
  int num_chunks = 0;
  /// The default-mode partials (latent_encode_partials, _merge): fp32 SIMT with double sums, or tf32 /
  /// bf16 on the tensor cores (queries, keys, weights and values rounded to the format, FP32 sums within
  /// a chunk, one partial per chunk; compute capability >= 8.0). The reproducible mode ignores it.
  MlpPrecision precision = MlpPrecision::fp32;
};

struct SegmentInfo {
  const int* chunk_begin = nullptr;  // device [segments + 1]: the chunks of segment s are [begin[s], begin[s+1])
  const index_t* sample = nullptr;   // device [segments]: global sample of each local segment
  int segments = 0;
};

/// Partial sums: part_ref [num_chunks * slices][H][M], part_acc the same x (E + 1) (sum, then acc[e]);
/// slices = encode_shape(M).slices in fp32, 1 on the tensor cores.
void latent_encode_partials(const LatentProblem& p, std::int32_t* part_ref, double* part_acc, cudaStream_t stream);
/// Merges the partials of every local segment into ref/acc at the segment's *sample* index
/// ([B][H][M] and [B][H][M][E + 1]); entries of other samples are not touched.
void latent_encode_merge(const LatentProblem& p, const std::int32_t* part_ref, const double* part_acc,
                         const SegmentInfo& seg, std::int32_t* ref, double* acc, cudaStream_t stream);
/// acc[i] *= 2^(local_ref[i] - global_ref[i]) for the `entries` (sample, head, latent) entries that have
/// local terms (local_ref != kNoExponent); exact.
void latent_encode_rescale(const std::int32_t* local_ref, const std::int32_t* global_ref, double* acc,
                           index_t entries, int E, cudaStream_t stream);
/// z[s][h][m][e] = acc[sample(s)][h][m][1 + e] / acc[sample(s)][h][m][0] for the local segments.
void latent_encode_finalize(const double* acc, const SegmentInfo& seg, int H, int M, int E, float* z,
                            cudaStream_t stream);

// Reproducible encode (RunOptions::reproducible), as the CPU's LatentMaxArgs / LatentExactArgs:
/// Pass 1: part_max [num_chunks * slices][H][M] = max logit; part_vmax [num_chunks][H] = max |v|.
void latent_max_partials(const LatentProblem& p, float* part_max, float* part_vmax, cudaStream_t stream);
/// max_out[sample][h][m] and vmax_out[sample][h] of the local segments (other samples not touched).
void latent_max_merge(const LatentProblem& p, const float* part_max, const float* part_vmax, const SegmentInfo& seg,
                      float* max_out, float* vmax_out, cudaStream_t stream);
/// Pass 2: with p = exp(l - max[sample][h][m]), adds the fixed-point images of p (scale sum_scale[s]) and
/// p v_e (scale value_scale[s][h]) to acc[sample][h][m][c][{hi, lo}] (c = 0 the sum, 1 + e the values)
/// with 64-bit atomic additions (exact, so the order does not matter). Terms whose image does not fit
/// (NaN, Inf) are left out and counted in bad[sample][h][m], as the CPU's LatentExactArgs::bad.
void latent_encode_exact(const LatentProblem& p, const float* max, const SegmentInfo& seg,
                         const ExactScale* sum_scale, const ExactScale* value_scale, std::int64_t* acc,
                         std::int64_t* bad, cudaStream_t stream);
/// z[s][h][m][e] from the exact sums of sample(s); NaN where bad[sample][h][m] > 0.
void latent_exact_finalize(const std::int64_t* acc, const std::int64_t* bad, const SegmentInfo& seg,
                           const ExactScale* sum_scale, const ExactScale* value_scale, int H, int M, int E, float* z,
                           cudaStream_t stream);

/// Decode: y_n[h] = sum_m softmax_m(q_m . k_n) z[segment][h][m] for every row of every tile (tiles of at
/// most kDecodeRows rows, inside one segment), all heads.
inline constexpr int kDecodeRows = 256;
struct LatentDecodeArgs {
  const float* q = nullptr;  // [H][M][E]
  const float* z = nullptr;  // [segments][H][M][E]
  int H = 0, M = 0, E = 0;
  const float* k = nullptr;
  index_t ldk = 0;
  float* y = nullptr;
  index_t ldy = 0;
  const LatentChunk* tiles = nullptr;  // device
  int num_tiles = 0;
  /// fp32: SIMT, FP32 products; tf32 / bf16: keys, latent queries, weights and values rounded to the
  /// format on the tensor cores, FP32 accumulation and softmax statistics (compute capability >= 8.0).
  MlpPrecision precision = MlpPrecision::fp32;
};
void latent_decode(const LatentDecodeArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
