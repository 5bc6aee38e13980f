// CUDA runtime wrappers: errors, devices, memory, streams, events, copies (host code, no kernels). The
// emulated device (kEmulatedDevice) and its streams go to the host backend's runtime (host/emulator.hpp).
#include <cuda_bf16.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "host/emulator.hpp"
#include "host/mma.hpp"  // tf32_bits
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {

namespace {
std::string describe(cudaError_t code) {
  return std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code);
}

/// check() for a result of the emulator: its message says what failed.
void check_emulated(cudaError_t code, const char* call) {
  if (code == cudaSuccess) return;
  (void)emulator::get_last_error();
  throw CudaError(code, std::string(call) + " (emulated device): " + cudaGetErrorName(code) + ": " +
                            emulator::last_message());
}

/// Whether `device` is the emulated one; throws where this CPU cannot run the host backend (its kernels
/// are built with FMA instructions on x86-64, kernels/cmake/cuda.cmake).
bool emulated(int device) {
  if (device != kEmulatedDevice) return false;
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("fma"))
    throw CudaError(cudaErrorNotSupported, "device cuda-emulated: the host backend needs a CPU with FMA instructions");
#endif
  return true;
}
/// The same without the check, for destructors and noexcept functions (construction checked it).
bool is_emulated(int device) noexcept { return device == kEmulatedDevice; }
}  // namespace

void check(cudaError_t code, const char* call) {
  if (code == cudaSuccess) return;
  // Non-sticky errors (bad arguments, allocation failures) would otherwise surface again at the next
  // cudaGetLastError; sticky ones cannot be cleared and keep failing, which is what callers should see.
  (void)cudaGetLastError();
  throw CudaError(code, std::string(call) + ": " + describe(code));
}

void check_launch(const char* kernel) {
  const cudaError_t code = cudaGetLastError();
  if (code != cudaSuccess) throw CudaError(code, std::string("launch of ") + kernel + ": " + describe(code));
}

int device_count(std::string* why) noexcept {
  int count = 0;
  const cudaError_t code = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  if (code != cudaSuccess) {
    if (why) *why = "cudaGetDeviceCount: " + describe(code);
    return 0;
  }
  if (count == 0 && why) *why = "cudaGetDeviceCount reports 0 devices";
  return count;
}

DeviceGuard::DeviceGuard(int device) : device_(device), was_emulated_(emulator::is_current()) {
  if (emulated(device)) {
    emulator::set_current(true);
    return;
  }
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device_) check(cudaSetDevice(device_), ("cudaSetDevice(" + std::to_string(device_) + ")").c_str());
  emulator::set_current(false);
}

DeviceGuard::~DeviceGuard() {
  emulator::set_current(was_emulated_);
  if (is_emulated(device_)) return;
  if (previous_ >= 0 && previous_ != device_) (void)cudaSetDevice(previous_);
}

void* device_alloc(std::size_t bytes, int device) {
  if (emulated(device)) {
    void* p = nullptr;
    check_emulated(emulator::malloc_device(&p, bytes), ("cudaMalloc(" + std::to_string(bytes) + " bytes)").c_str());
    return p;
  }
  DeviceGuard guard(device);
  void* p = nullptr;
  const cudaError_t code = cudaMalloc(&p, bytes);
  if (code != cudaSuccess) {
    check(code, ("cudaMalloc(" + std::to_string(bytes) + " bytes) on device " + std::to_string(device)).c_str());
  }
  return p;
}

void device_free(void* p, int device) noexcept {
  if (!p) return;
  if (is_emulated(device)) {
    (void)emulator::free_device(p);  // a failure stays the emulator's last error, as CUDA's sticky errors
    return;
  }
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (previous != device) (void)cudaSetDevice(device);
  (void)cudaFree(p);
  if (previous >= 0 && previous != device) (void)cudaSetDevice(previous);
}

void* pinned_alloc(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t code = cudaMallocHost(&p, bytes);
  if (code != cudaSuccess && device_count() == 0) {  // no GPU: the emulated device's host memory
    (void)cudaGetLastError();
    if (void* host = emulator::host_alloc(bytes)) return host;
  }
  check(code, ("cudaMallocHost(" + std::to_string(bytes) + " bytes)").c_str());
  return p;
}

void pinned_free(void* p) noexcept {
  if (!p) return;
  if (emulator::is_host_alloc(p)) emulator::host_free(p);
  else (void)cudaFreeHost(p);
}

Stream::Stream(int device) : device_(device) {
  if (emulated(device)) {
    check_emulated(emulator::stream_create(&stream_), "cudaStreamCreateWithFlags");
    return;
  }
  DeviceGuard guard(device);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

Stream::~Stream() {
  if (!stream_) return;
  if (is_emulated(device_)) {
    (void)emulator::stream_destroy(stream_);
    return;
  }
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (previous != device_) (void)cudaSetDevice(device_);
  (void)cudaStreamDestroy(stream_);
  if (previous >= 0 && previous != device_) (void)cudaSetDevice(previous);
}

void Graph::capture(int device, cudaStream_t stream, const std::function<void()>& work) {
  reset();
  if (emulated(device)) {
    check_emulated(emulator::begin_capture(stream), "cudaStreamBeginCapture");
    try {
      work();
    } catch (...) {
      void* discarded = nullptr;
      (void)emulator::end_capture(stream, &discarded);
      emulator::graph_destroy(discarded);
      (void)emulator::get_last_error();
      throw;
    }
    void* graph = nullptr;
    check_emulated(emulator::end_capture(stream, &graph), "cudaStreamEndCapture");
    exec_ = graph;
    device_ = device;
    return;
  }
  DeviceGuard guard(device);
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  cudaGraph_t graph = nullptr;
  try {
    work();
  } catch (...) {
    (void)cudaStreamEndCapture(stream, &graph);
    if (graph) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    throw;
  }
  check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t code = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);
  check(code, "cudaGraphInstantiate");
  exec_ = exec;
  device_ = device;
}

void Graph::launch(cudaStream_t stream) const {
  if (!exec_) throw std::logic_error("cuda::Graph::launch: no graph was captured");
  if (is_emulated(device_)) check_emulated(emulator::graph_launch(exec_, stream), "cudaGraphLaunch");
  else check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), stream), "cudaGraphLaunch");
}

void Graph::reset() noexcept {
  if (!exec_) return;
  if (is_emulated(device_)) {
    emulator::graph_destroy(exec_);
  } else {
    int previous = -1;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
    if (previous != device_) (void)cudaSetDevice(device_);
    (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
    if (previous >= 0 && previous != device_) (void)cudaSetDevice(previous);
  }
  exec_ = nullptr;
  device_ = -1;
}

void Stream::synchronize() const { cuda::synchronize(stream_); }
void synchronize(cudaStream_t stream) {
  if (emulator::owns_stream(stream)) check_emulated(emulator::stream_synchronize(stream), "cudaStreamSynchronize");
  else check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
}

void wait_for_default_stream(cudaStream_t stream, int device) {
  if (emulated(device)) return check_emulated(emulator::stream_synchronize(nullptr), "cudaStreamSynchronize(0)");
  DeviceGuard guard(device);
  cudaEvent_t event = nullptr;
  check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  cudaError_t code = cudaEventRecord(event, cudaStreamLegacy);
  if (code == cudaSuccess) code = cudaStreamWaitEvent(stream, event, 0);
  (void)cudaEventDestroy(event);  // (released once the wait has passed it)
  check(code, "cudaEventRecord(default stream) / cudaStreamWaitEvent");
}

void device_synchronize(int device) {
  if (emulated(device)) return check_emulated(emulator::device_synchronize(), "cudaDeviceSynchronize");
  DeviceGuard guard(device);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

int multiprocessor_count(int device) {
  int count = 0;
  if (emulated(device)) {
    check_emulated(emulator::device_attribute(&count, cudaDevAttrMultiProcessorCount), "cudaDeviceGetAttribute");
  } else {
    check(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device),
          "cudaDeviceGetAttribute(MultiProcessorCount)");
  }
  return count;
}

int pointer_device(const void* p) noexcept {
  if (!p) return -1;
  if (emulator::find_allocation(p)) return kEmulatedDevice;
  cudaPointerAttributes attributes{};
  const cudaError_t code = cudaPointerGetAttributes(&attributes, p);
  (void)cudaGetLastError();
  return code == cudaSuccess && attributes.type == cudaMemoryTypeDevice ? attributes.device : -1;
}

void copy_blocking(void* dst, const void* src, std::size_t bytes, int device) {
  if (bytes == 0) return;
  if (emulated(device)) return check_emulated(emulator::memcpy_blocking(dst, src, bytes), "cudaMemcpy");
  DeviceGuard guard(device);
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
  // From pageable memory cudaMemcpy may return before the data lands on the device, and the library's
  // non-blocking streams do not wait for the default stream: wait here.
  check(cudaStreamSynchronize(cudaStreamLegacy), "cudaStreamSynchronize(default stream)");
}

Event::Event(int device) : device_(device) {
  if (emulated(device)) {
    check_emulated(emulator::event_create(&event_), "cudaEventCreate");
    return;
  }
  DeviceGuard guard(device);
  check(cudaEventCreate(&event_), "cudaEventCreate");
}

Event::~Event() {
  if (!event_) return;
  if (is_emulated(device_)) (void)emulator::event_destroy(event_);
  else (void)cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream) {
  if (emulated(device_)) check_emulated(emulator::event_record(event_, stream), "cudaEventRecord");
  else check(cudaEventRecord(event_, stream), "cudaEventRecord");
}

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.0f;
  if (emulated(device_)) {
    check_emulated(emulator::event_synchronize(event_), "cudaEventSynchronize");
    check_emulated(emulator::event_elapsed(&ms, start.event_, event_), "cudaEventElapsedTime");
  } else {
    check(cudaEventElapsedTime(&ms, start.event_, event_), "cudaEventElapsedTime");
  }
  return ms;
}

void copy_to_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (!bytes) return;
  if (emulator::owns_stream(stream)) check_emulated(emulator::memcpy_async(dst, src, bytes, stream), "cudaMemcpyAsync");
  else check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync(host to device)");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (!bytes) return;
  if (emulator::owns_stream(stream)) check_emulated(emulator::memcpy_async(dst, src, bytes, stream), "cudaMemcpyAsync");
  else check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync(device to host)");
}

void copy_on_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (!bytes) return;
  if (emulator::owns_stream(stream)) check_emulated(emulator::memcpy_async(dst, src, bytes, stream), "cudaMemcpyAsync");
  else check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync(device to device)");
}

void zero(void* dst, std::size_t bytes, cudaStream_t stream) {
  if (!bytes) return;
  if (emulator::owns_stream(stream)) check_emulated(emulator::memset_async(dst, 0, bytes, stream), "cudaMemsetAsync");
  else check(cudaMemsetAsync(dst, 0, bytes, stream), "cudaMemsetAsync");
}

void append_chunks(index_t begin, index_t end, int segment, int chunk_rows, std::vector<LatentChunk>& chunks) {
  if (chunk_rows < 1) throw std::invalid_argument("append_chunks: chunk_rows must be >= 1");
  for (index_t r = begin; r < end; r += chunk_rows) {
    LatentChunk c;
    c.begin = r;
    c.rows = static_cast<int>(std::min<index_t>(chunk_rows, end - r));
    c.segment = segment;
    chunks.push_back(c);
  }
}

EncodeShape encode_shape(int M) {
  // Latents spread over as few blocks as possible (<= 256 threads each); the spare threads of a block
  // split the points into slices, so small M still fills the block.
  EncodeShape s;
  s.groups = (std::max(M, 1) + 255) / 256;
  s.latents = (std::max(M, 1) + s.groups - 1) / s.groups;
  s.slices = std::max(1, 256 / s.latents);
  s.threads = s.latents * s.slices;
  return s;
}

int mlp_weight_ld(int out) { return static_cast<int>(round_up(out, 64)); }

void pack_mlp_linear(const float* weight, const float* bias, int out, int in, std::vector<float>& weight_t,
                     std::vector<float>& bias_out) {
  const int ld = mlp_weight_ld(out);
  const auto k4 = static_cast<std::size_t>(round_up(in, 4));
  const std::size_t w0 = weight_t.size(), b0 = bias_out.size();
  weight_t.resize(w0 + k4 * static_cast<std::size_t>(ld), 0.0f);
  bias_out.resize(b0 + static_cast<std::size_t>(ld), 0.0f);
  for (int o = 0; o < out; ++o) {
    for (int i = 0; i < in; ++i)
      weight_t[w0 + static_cast<std::size_t>(i) * ld + static_cast<std::size_t>(o)] =
          weight[static_cast<std::size_t>(o) * in + static_cast<std::size_t>(i)];
    if (bias) bias_out[b0 + static_cast<std::size_t>(o)] = bias[o];
  }
}

std::size_t mlp_fragment_words(MlpPrecision precision, int out, int in) {
  if (precision == MlpPrecision::fp32)
    throw std::invalid_argument("cuda::mlp_fragment_words: precision fp32 has no fragments");
  const std::size_t k = precision == MlpPrecision::bf16 ? 16 : 8;
  const std::size_t k_tiles = (static_cast<std::size_t>(std::max(in, 0)) + k - 1) / k;
  const std::size_t n_tiles = (static_cast<std::size_t>(std::max(out, 0)) + 7) / 8;
  return n_tiles * k_tiles * 64;
}

void pack_mlp_fragments(const float* weight, int out, int in, MlpPrecision precision, std::vector<std::uint32_t>& words) {
  const std::size_t first = words.size();
  words.resize(first + mlp_fragment_words(precision, out, in), 0u);
  const int kK = precision == MlpPrecision::bf16 ? 16 : 8, k_tiles = (in + kK - 1) / kK, n_tiles = (out + 7) / 8;
  auto w = [&](int n, int k) { return n < out && k < in ? weight[static_cast<std::size_t>(n) * in + k] : 0.0f; };
  // The roundings of the device: __float2bfloat16_rn, cvt.rna.tf32 (host/mma.hpp).
  auto bf16 = [](float v) { return static_cast<std::uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(v))); };
  for (int nt = 0; nt < n_tiles; ++nt)
    for (int kt = 0; kt < k_tiles; ++kt)
      for (int lane = 0; lane < 32; ++lane) {
        const int n = 8 * nt + lane / 4, t = lane % 4, k = kt * kK;
        std::uint32_t* const out_words =
            words.data() + first + ((static_cast<std::size_t>(nt) * k_tiles + kt) * 32 + lane) * 2;
        if (precision == MlpPrecision::bf16) {  // b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g] with B = W^T
          out_words[0] = bf16(w(n, k + 2 * t)) | bf16(w(n, k + 2 * t + 1)) << 16;
          out_words[1] = bf16(w(n, k + 2 * t + 8)) | bf16(w(n, k + 2 * t + 9)) << 16;
        } else {  // b[0] = B[t][g], b[1] = B[t+4][g]
          out_words[0] = emulator::tf32_bits(w(n, k + t));
          out_words[1] = emulator::tf32_bits(w(n, k + t + 4));
        }
      }
}

}  // namespace surrogate::kernels::cuda
