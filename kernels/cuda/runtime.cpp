// CUDA runtime wrappers: errors, devices, memory, streams, events, copies (host code, no kernels).
#include <string>

#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {

namespace {
std::string describe(cudaError_t code) {
  return std::string(cudaGetErrorName(code)) + ": " + cudaGetErrorString(code);
}
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

DeviceGuard::DeviceGuard(int device) : device_(device) {
  check(cudaGetDevice(&previous_), "cudaGetDevice");
  if (previous_ != device_) check(cudaSetDevice(device_), ("cudaSetDevice(" + std::to_string(device_) + ")").c_str());
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0 && previous_ != device_) (void)cudaSetDevice(previous_);
}

void* device_alloc(std::size_t bytes, int device) {
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
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (previous != device) (void)cudaSetDevice(device);
  (void)cudaFree(p);
  if (previous >= 0 && previous != device) (void)cudaSetDevice(previous);
}

void* pinned_alloc(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes), ("cudaMallocHost(" + std::to_string(bytes) + " bytes)").c_str());
  return p;
}

void pinned_free(void* p) noexcept {
  if (p) (void)cudaFreeHost(p);
}

Stream::Stream(int device) : device_(device) {
  DeviceGuard guard(device);
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

Stream::~Stream() {
  if (!stream_) return;
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) previous = -1;
  if (previous != device_) (void)cudaSetDevice(device_);
  (void)cudaStreamDestroy(stream_);
  if (previous >= 0 && previous != device_) (void)cudaSetDevice(previous);
}

void Stream::synchronize() const { check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
void synchronize(cudaStream_t stream) { check(cudaStreamSynchronize(stream), "cudaStreamSynchronize"); }

Event::Event(int device) : device_(device) {
  DeviceGuard guard(device);
  check(cudaEventCreate(&event_), "cudaEventCreate");
}

Event::~Event() {
  if (event_) (void)cudaEventDestroy(event_);
}

void Event::record(cudaStream_t stream) { check(cudaEventRecord(event_, stream), "cudaEventRecord"); }

float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, start.event_, event_), "cudaEventElapsedTime");
  return ms;
}

void copy_to_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync(host to device)");
}

void copy_to_host(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync(device to host)");
}

void copy_on_device(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync(device to device)");
}

void zero(void* dst, std::size_t bytes, cudaStream_t stream) {
  if (bytes) check(cudaMemsetAsync(dst, 0, bytes, stream), "cudaMemsetAsync");
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

}  // namespace surrogate::kernels::cuda
