// The host backend's runtime: device memory with guard zones, deferred streams, events, launches and the
// test hooks. The kernels themselves run in emulator_threads.cpp. share/docs/cuda.md, "The host backend".
#include "emulator.hpp"
#include "emulator_internal.hpp"

#include <algorithm>
#include <cstdint>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <unordered_set>
#include <vector>


namespace surrogate::kernels::cuda::emulator {

namespace {

// ------------------------------------------------------------------------------------------------------
// Errors: per host thread, as the CUDA runtime's.

thread_local cudaError_t tl_last_error = cudaSuccess;
thread_local std::string tl_last_message;
__attribute__((tls_model("initial-exec"))) thread_local bool tl_current = false;

cudaError_t fail(cudaError_t code, std::string message) {
  tl_last_error = code;
  tl_last_message = std::move(message);
  return code;
}

// ------------------------------------------------------------------------------------------------------
// Memory: every device allocation has guard zones before and after it, checked after every kernel;
// fresh memory is filled with 0xff bytes (NaN floats, -1 integers) so that reading it before writing shows.

constexpr std::size_t kGuard = 256;
constexpr unsigned char kGuardByte = 0xa5;

struct Allocation {
  unsigned char* base = nullptr;  // guard, user bytes, guard
  std::size_t bytes = 0;
};

std::mutex registry_mutex;
std::map<const unsigned char*, Allocation>& allocations() {  // by the user pointer
  static std::map<const unsigned char*, Allocation> map;
  return map;
}
std::unordered_set<const void*>& host_allocations() {
  static std::unordered_set<const void*> set;
  return set;
}

/// The first allocation whose guard zones were overwritten (and repairs them), or an empty string.
std::string check_guards() {
  std::lock_guard lock(registry_mutex);
  for (auto& [user, a] : allocations()) {
    unsigned char* front = a.base;
    unsigned char* back = a.base + kGuard + a.bytes;
    for (std::size_t i = 0; i < kGuard; ++i) {
      if (front[i] != kGuardByte || back[i] != kGuardByte) {
        const bool before = front[i] != kGuardByte;
        std::memset(front, kGuardByte, kGuard);
        std::memset(back, kGuardByte, kGuard);
        return "a write " + std::to_string(before ? kGuard - i : i + 1) + " byte(s) " +
               (before ? "before the start" : "past the end") + " of a device allocation of " +
               std::to_string(a.bytes) + " bytes";
      }
    }
  }
  return {};
}

// ------------------------------------------------------------------------------------------------------
// Streams and events: work is queued and runs only when synchronised.

struct Op {
  std::function<void()> run;
  std::string name;  // for messages
};

struct Queue {
  std::deque<Op> ops;
  // Between begin_capture and end_capture: what the stream is given goes here instead of `ops`.
  std::shared_ptr<std::vector<Op>> capture;
  std::string capture_failure;  // a call that cannot be captured: end_capture fails with it
};

/// Queues op on q, or records it into the graph q is capturing.
void enqueue(Queue& q, Op op) {
  if (q.capture)
    q.capture->push_back(std::move(op));
  else
    q.ops.push_back(std::move(op));
}

struct EventState {
  Queue* queue = nullptr;  // the stream it was last recorded on
  bool recorded = false, complete = false;
  std::chrono::steady_clock::time_point time;
};

Queue null_queue;
std::unordered_set<const void*>& streams() {
  static std::unordered_set<const void*> set;
  return set;
}
std::unordered_set<const void*>& events() {
  static std::unordered_set<const void*> set;
  return set;
}

Queue* queue_of(cudaStream_t stream) {
  if (!stream) return &null_queue;
  std::lock_guard lock(registry_mutex);
  return streams().count(stream) ? reinterpret_cast<Queue*>(stream) : nullptr;
}

/// The first stream that is capturing a graph, or nullptr.
Queue* capturing_queue() {
  std::lock_guard lock(registry_mutex);
  for (const void* s : streams())
    if (static_cast<const Queue*>(s)->capture) return static_cast<Queue*>(const_cast<void*>(s));
  return nullptr;
}

/// A call that would wait for a stream while it captures: it fails, and so will the capture (CUDA
/// invalidates it).
cudaError_t refuse_in_capture(Queue& q, const std::string& call) {
  q.capture_failure = call + " while the stream was capturing";
  return fail(cudaErrorStreamCaptureUnsupported, "emulated " + call + ": the stream is capturing a graph");
}

/// Work for the default (legacy) stream while a stream captures: outside the capture and unordered with
/// it; refused, failing the capture, as CUDA refuses an implicit dependency on the legacy stream.
cudaError_t refuse_default_stream_in_capture(const Queue& q, const std::string& call) {
  if (&q != &null_queue) return cudaSuccess;
  if (Queue* capturing = capturing_queue()) return refuse_in_capture(*capturing, call + " on the default stream");
  return cudaSuccess;
}

/// Runs the queued work of q in order; a failure drops the rest of the queue and is returned.
cudaError_t drain(Queue& q) {
  while (!q.ops.empty()) {
    Op op = std::move(q.ops.front());
    q.ops.pop_front();
    try {
      op.run();
    } catch (const std::exception& e) {
      q.ops.clear();
      return fail(cudaErrorLaunchFailure, "emulated " + op.name + ": " + e.what());
    }
  }
  return cudaSuccess;
}

cudaError_t drain_all() {
  std::vector<Queue*> all{&null_queue};
  {
    std::lock_guard lock(registry_mutex);
    for (const void* s : streams()) all.push_back(static_cast<Queue*>(const_cast<void*>(s)));
  }
  cudaError_t first = cudaSuccess;
  for (Queue* q : all) {
    const cudaError_t code = drain(*q);
    if (first == cudaSuccess) first = code;
  }
  return first;
}

// ------------------------------------------------------------------------------------------------------
// Test hooks

std::mutex counters_mutex;
Counters counters_total;
int failure_countdown = 0;
std::map<std::string, long long> named_launches;

void count_wait() {
  std::lock_guard lock(counters_mutex);
  ++counters_total.host_waits;
}

void count_copy(const void* dst, const void* src, std::size_t bytes) {
  const bool to_device = find_allocation(dst) && !find_allocation(src);
  const bool to_host = find_allocation(src) && !find_allocation(dst);
  std::lock_guard lock(counters_mutex);
  if (to_device) counters_total.bytes_to_device += static_cast<long long>(bytes);
  if (to_host) counters_total.bytes_to_host += static_cast<long long>(bytes);
}

}  // namespace

// --------------------------------------------------------------------------------------------------------

cudaError_t malloc_device(void** p, std::size_t bytes) {
  *p = nullptr;
  // CUDA refuses an allocation on the thread that captures (cudaStreamCaptureModeThreadLocal).
  if (Queue* q = capturing_queue()) return refuse_in_capture(*q, "cudaMalloc");
  if (bytes > (std::size_t{1} << 40)) return fail(cudaErrorMemoryAllocation, "emulated cudaMalloc: out of memory");
  auto* base = static_cast<unsigned char*>(std::malloc(bytes + 2 * kGuard));
  if (!base) return fail(cudaErrorMemoryAllocation, "emulated cudaMalloc: out of memory");
  std::memset(base, kGuardByte, kGuard);
  std::memset(base + kGuard, 0xff, bytes);
  std::memset(base + kGuard + bytes, kGuardByte, kGuard);
  std::lock_guard lock(registry_mutex);
  allocations()[base + kGuard] = Allocation{base, bytes};
  *p = base + kGuard;
  return cudaSuccess;
}

cudaError_t free_device(void* p) {
  if (!p) return cudaSuccess;
  if (Queue* q = capturing_queue()) return refuse_in_capture(*q, "cudaFree");
  const cudaError_t pending = drain_all();
  std::string damaged = check_guards();
  std::lock_guard lock(registry_mutex);
  auto it = allocations().find(static_cast<const unsigned char*>(p));
  if (it == allocations().end()) return fail(cudaErrorInvalidValue, "emulated cudaFree: not a device allocation");
  std::free(it->second.base);
  allocations().erase(it);
  if (!damaged.empty()) return fail(cudaErrorIllegalAddress, "emulated device memory: " + damaged);
  return pending;
}

void* host_alloc(std::size_t bytes) {
  void* p = std::malloc(std::max<std::size_t>(bytes, 1));
  if (p) {
    std::lock_guard lock(registry_mutex);
    host_allocations().insert(p);
  }
  return p;
}

void host_free(void* p) noexcept {
  if (!p) return;
  std::lock_guard lock(registry_mutex);
  host_allocations().erase(p);
  std::free(p);
}

bool is_host_alloc(const void* p) noexcept {
  std::lock_guard lock(registry_mutex);
  return host_allocations().count(p) != 0;
}

bool find_allocation(const void* p, const void** begin, std::size_t* bytes) noexcept {
  std::lock_guard lock(registry_mutex);
  auto& map = allocations();
  auto it = map.upper_bound(static_cast<const unsigned char*>(p));
  if (it == map.begin()) return false;
  --it;
  const auto* c = static_cast<const unsigned char*>(p);
  if (c >= it->first + std::max<std::size_t>(it->second.bytes, 1)) return false;
  if (begin) *begin = it->first;
  if (bytes) *bytes = it->second.bytes;
  return true;
}

cudaError_t stream_create(cudaStream_t* stream) {
  auto* q = new Queue;
  std::lock_guard lock(registry_mutex);
  streams().insert(q);
  *stream = reinterpret_cast<cudaStream_t>(q);
  return cudaSuccess;
}

cudaError_t stream_destroy(cudaStream_t stream) {
  Queue* q = queue_of(stream);
  if (!q || q == &null_queue) return fail(cudaErrorInvalidResourceHandle, "emulated cudaStreamDestroy: unknown stream");
  const cudaError_t code = drain(*q);  // as CUDA: queued work completes
  {
    std::lock_guard lock(registry_mutex);
    streams().erase(q);
  }
  delete q;
  return code;
}

cudaError_t stream_synchronize(cudaStream_t stream) {
  Queue* q = queue_of(stream);
  if (!q) return fail(cudaErrorInvalidResourceHandle, "emulated cudaStreamSynchronize: unknown stream");
  if (q->capture) return refuse_in_capture(*q, "cudaStreamSynchronize");
  if (!q->ops.empty()) count_wait();
  return drain(*q);
}

cudaError_t device_synchronize() {
  if (Queue* q = capturing_queue()) return refuse_in_capture(*q, "cudaDeviceSynchronize");
  count_wait();
  return drain_all();
}

bool owns_stream(cudaStream_t stream) noexcept {
  if (!stream) return tl_current;
  std::lock_guard lock(registry_mutex);
  return streams().count(stream) != 0;
}
void set_current(bool emulated_device_current) noexcept { tl_current = emulated_device_current; }
bool is_current() noexcept { return tl_current; }

namespace {
/// Page-locked host memory: the emulator's (no GPU) or the CUDA runtime's (cudaMallocHost).
bool is_pinned(const void* p) {
  if (is_host_alloc(p)) return true;
  cudaPointerAttributes attributes{};
  const bool host = cudaPointerGetAttributes(&attributes, p) == cudaSuccess && attributes.type == cudaMemoryTypeHost;
  (void)cudaGetLastError();
  return host;
}

/// CUDA leaves a copy between overlapping ranges undefined (its copies are not memmove); the emulator
/// refuses one, so that no caller relies on what a host memmove would do.
bool ranges_overlap(const void* dst, const void* src, std::size_t bytes) {
  const auto d = reinterpret_cast<std::uintptr_t>(dst), s = reinterpret_cast<std::uintptr_t>(src);
  return d < s + bytes && s < d + bytes;
}
cudaError_t refuse_overlap(const char* call, std::size_t bytes) {
  return fail(cudaErrorInvalidValue, std::string("emulated ") + call + ": the " + std::to_string(bytes) +
                                         " bytes at the source and the destination overlap (undefined in CUDA)");
}
}  // namespace

cudaError_t memcpy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  Queue* q = queue_of(stream);
  if (!q) return fail(cudaErrorInvalidResourceHandle, "emulated cudaMemcpyAsync: unknown stream");
  if (!bytes) return cudaSuccess;
  if (const cudaError_t code = refuse_default_stream_in_capture(*q, "cudaMemcpyAsync")) return code;
  if (ranges_overlap(dst, src, bytes)) return refuse_overlap("cudaMemcpyAsync", bytes);
  count_copy(dst, src, bytes);
  // As CUDA with pageable host memory: the source is staged at the call (the caller may reuse it at
  // once), and a copy into pageable memory returns only when done. Pinned memory is fully asynchronous.
  const bool src_pageable = !find_allocation(src) && !is_pinned(src);
  const bool dst_pageable = !find_allocation(dst) && !is_pinned(dst);
  if (dst_pageable) {
    if (q->capture) return refuse_in_capture(*q, "cudaMemcpyAsync into pageable host memory");
    count_wait();
    const cudaError_t code = drain(*q);
    if (code != cudaSuccess) return code;
    std::memcpy(dst, src, bytes);
    return cudaSuccess;
  }
  if (src_pageable) {
    // Captured, the copy would replay the values of the capture: CUDA refuses pageable memory there.
    if (q->capture) return refuse_in_capture(*q, "cudaMemcpyAsync from pageable host memory");
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + bytes);
    enqueue(*q, Op{[=] { std::memcpy(dst, staged->data(), bytes); }, "cudaMemcpyAsync"});
    return cudaSuccess;
  }
  enqueue(*q, Op{[=] { std::memcpy(dst, src, bytes); }, "cudaMemcpyAsync"});
  return cudaSuccess;
}

cudaError_t memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
  Queue* q = queue_of(stream);
  if (!q) return fail(cudaErrorInvalidResourceHandle, "emulated cudaMemsetAsync: unknown stream");
  if (!bytes) return cudaSuccess;
  if (const cudaError_t code = refuse_default_stream_in_capture(*q, "cudaMemsetAsync")) return code;
  enqueue(*q, Op{[=] { std::memset(dst, value, bytes); }, "cudaMemsetAsync"});
  return cudaSuccess;
}

cudaError_t memcpy_blocking(void* dst, const void* src, std::size_t bytes) {
  if (bytes && ranges_overlap(dst, src, bytes)) return refuse_overlap("cudaMemcpy", bytes);
  if (Queue* q = capturing_queue()) return refuse_in_capture(*q, "cudaMemcpy");
  count_wait();
  const cudaError_t code = drain(null_queue);
  if (code != cudaSuccess) return code;
  if (bytes) std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t event_create(cudaEvent_t* event) {
  auto* e = new EventState;
  std::lock_guard lock(registry_mutex);
  events().insert(e);
  *event = reinterpret_cast<cudaEvent_t>(e);
  return cudaSuccess;
}

namespace {
EventState* event_of(cudaEvent_t event) {
  std::lock_guard lock(registry_mutex);
  return events().count(event) ? reinterpret_cast<EventState*>(event) : nullptr;
}
}  // namespace

cudaError_t event_destroy(cudaEvent_t event) {
  EventState* e = event_of(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "emulated cudaEventDestroy: unknown event");
  {
    std::lock_guard lock(registry_mutex);
    events().erase(e);
  }
  // A record still queued refers to the event: keep it alive (a few bytes) until the queue runs.
  e->queue = nullptr;
  return cudaSuccess;
}

cudaError_t event_record(cudaEvent_t event, cudaStream_t stream) {
  EventState* e = event_of(event);
  Queue* q = queue_of(stream);
  if (!e || !q) return fail(cudaErrorInvalidResourceHandle, "emulated cudaEventRecord: unknown event or stream");
  if (q->capture) return refuse_in_capture(*q, "cudaEventRecord (event nodes are not emulated)");
  e->queue = q;
  e->recorded = true;
  e->complete = false;
  q->ops.push_back(Op{[e] {
                        e->complete = true;
                        e->time = std::chrono::steady_clock::now();
                      },
                      "cudaEventRecord"});
  return cudaSuccess;
}

cudaError_t event_synchronize(cudaEvent_t event) {
  EventState* e = event_of(event);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "emulated cudaEventSynchronize: unknown event");
  if (e->recorded && !e->complete) count_wait();
  while (e->recorded && !e->complete && e->queue && !e->queue->ops.empty()) {
    Queue& q = *e->queue;
    Op op = std::move(q.ops.front());
    q.ops.pop_front();
    try {
      op.run();
    } catch (const std::exception& ex) {
      q.ops.clear();
      return fail(cudaErrorLaunchFailure, "emulated " + op.name + ": " + ex.what());
    }
  }
  return cudaSuccess;
}

cudaError_t event_elapsed(float* ms, cudaEvent_t start, cudaEvent_t end) {
  EventState* a = event_of(start);
  EventState* b = event_of(end);
  if (!a || !b) return fail(cudaErrorInvalidResourceHandle, "emulated cudaEventElapsedTime: unknown event");
  if (!a->complete || !b->complete) return fail(cudaErrorNotReady, "emulated cudaEventElapsedTime: event not complete");
  *ms = std::chrono::duration<float, std::milli>(b->time - a->time).count();
  return cudaSuccess;
}

cudaError_t get_last_error() noexcept {
  const cudaError_t code = tl_last_error;
  tl_last_error = cudaSuccess;
  return code;
}
cudaError_t peek_last_error() noexcept { return tl_last_error; }
std::string last_message() { return tl_last_message; }

cudaError_t device_attribute(int* value, cudaDeviceAttr attribute) {
  switch (attribute) {
    case cudaDevAttrMultiProcessorCount: *value = 4; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 227 * 1024; return cudaSuccess;
    case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue, "emulated cudaDeviceGetAttribute: attribute not emulated");
  }
}

cudaError_t occupancy(int* blocks, int threads, std::size_t smem) {
  if (threads < 1 || threads > 1024) return fail(cudaErrorInvalidValue, "emulated occupancy: " + std::to_string(threads) + " threads a block");
  const std::size_t by_smem = (228 * 1024) / (smem + 1024);
  *blocks = static_cast<int>(std::min<std::size_t>({std::size_t{32}, static_cast<std::size_t>(2048 / threads), by_smem}));
  return cudaSuccess;
}

namespace {
std::mutex opt_in_mutex;
std::map<const void*, std::size_t> shared_opt_in;  // kernel -> MaxDynamicSharedMemorySize set for it
}  // namespace

cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute attribute, int value) {
  if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
  if (value < 0 || value > 227 * 1024)
    return fail(cudaErrorInvalidValue, "emulated cudaFuncSetAttribute: " + std::to_string(value) +
                                           " bytes of dynamic shared memory exceed the 227 KiB of sm_90");
  std::lock_guard lock(opt_in_mutex);
  shared_opt_in[kernel] = static_cast<std::size_t>(value);
  return cudaSuccess;
}

void launch(const void* kernel, dim3 grid, dim3 block, std::size_t dynamic_smem, cudaStream_t stream,
            std::function<void()> body) {
  Queue* q = queue_of(stream);
  if (!q) {
    fail(cudaErrorInvalidResourceHandle, "emulated launch: unknown stream");
    return;
  }
  if (refuse_default_stream_in_capture(*q, "a kernel launch") != cudaSuccess) return;
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.z > 64 || grid.x == 0 || grid.y == 0 || grid.z == 0 ||
      grid.x > 2147483647u || grid.y > 65535u || grid.z > 65535u) {
    fail(cudaErrorInvalidConfiguration,
         "emulated launch: invalid configuration (grid " + std::to_string(grid.x) + "x" + std::to_string(grid.y) + "x" +
             std::to_string(grid.z) + ", block " + std::to_string(block.x) + "x" + std::to_string(block.y) + "x" +
             std::to_string(block.z) + ")");
    return;
  }
  if (dynamic_smem > 227 * 1024) {
    fail(cudaErrorInvalidValue, "emulated launch: " + std::to_string(dynamic_smem) + " bytes of dynamic shared memory");
    return;
  }
  if (dynamic_smem > 48 * 1024) {
    std::size_t allowed = 48 * 1024;
    {
      std::lock_guard lock(opt_in_mutex);
      if (const auto it = shared_opt_in.find(kernel); it != shared_opt_in.end()) allowed = std::max(allowed, it->second);
    }
    if (dynamic_smem > allowed) {
      fail(cudaErrorInvalidValue, "emulated launch: " + std::to_string(dynamic_smem) +
                                      " bytes of dynamic shared memory, above the kernel's limit of " +
                                      std::to_string(allowed) + " (cudaFuncSetAttribute MaxDynamicSharedMemorySize)");
      return;
    }
  }
  {
    std::lock_guard lock(counters_mutex);
    if (!q->capture) ++counters_total.launches;  // a captured kernel runs when its graph is launched
    if (failure_countdown > 0 && --failure_countdown == 0) {
      fail(cudaErrorLaunchFailure, "emulated launch failure (injected by fail_launch_after)");
      return;
    }
  }
  enqueue(*q, Op{[grid, block, dynamic_smem, body = std::move(body)] {
                   detail::run_kernel(grid, block, dynamic_smem, body);
                   const std::string damaged = check_guards();
                   if (!damaged.empty()) throw detail::KernelFault("out-of-bounds device access: " + damaged);
                 },
                 "kernel"});
}

void name_last_launch(const char* kernel) {
  {
    std::lock_guard count_lock(counters_mutex);
    ++named_launches[kernel];
  }
  // The launch just queued is at the back of its queue: name the kernels still unnamed.
  std::lock_guard lock(registry_mutex);
  auto rename = [&](Queue& q) {
    if (q.capture) {
      if (!q.capture->empty() && q.capture->back().name == "kernel") q.capture->back().name = std::string("kernel ") + kernel;
    } else if (!q.ops.empty() && q.ops.back().name == "kernel") {
      q.ops.back().name = std::string("kernel ") + kernel;
    }
  };
  rename(null_queue);
  for (const void* s : streams()) rename(*static_cast<Queue*>(const_cast<void*>(s)));
}

// ------------------------------------------------------------------------------------------------------
// Graphs: the work a stream was given between begin_capture and end_capture, replayed by graph_launch.

cudaError_t begin_capture(cudaStream_t stream) {
  Queue* q = stream ? queue_of(stream) : nullptr;
  if (!q) return fail(cudaErrorInvalidResourceHandle, "emulated cudaStreamBeginCapture: unknown or null stream");
  if (q->capture) return fail(cudaErrorIllegalState, "emulated cudaStreamBeginCapture: the stream is capturing already");
  q->capture = std::make_shared<std::vector<Op>>();
  q->capture_failure.clear();
  return cudaSuccess;
}

cudaError_t end_capture(cudaStream_t stream, void** graph) {
  *graph = nullptr;
  Queue* q = stream ? queue_of(stream) : nullptr;
  if (!q || !q->capture) return fail(cudaErrorIllegalState, "emulated cudaStreamEndCapture: the stream is not capturing");
  std::shared_ptr<std::vector<Op>> ops = std::move(q->capture);
  q->capture.reset();
  if (!q->capture_failure.empty())
    return fail(cudaErrorStreamCaptureInvalidated, "emulated cudaStreamEndCapture: " + q->capture_failure);
  *graph = new std::vector<Op>(std::move(*ops));
  std::lock_guard lock(counters_mutex);
  ++counters_total.graph_captures;
  return cudaSuccess;
}

cudaError_t graph_launch(const void* graph, cudaStream_t stream) {
  Queue* q = queue_of(stream);
  if (!q || !graph) return fail(cudaErrorInvalidResourceHandle, "emulated cudaGraphLaunch: unknown stream or graph");
  std::lock_guard lock(counters_mutex);
  for (const Op& op : *static_cast<const std::vector<Op>*>(graph)) {
    // An injected failure counts the graph's kernels too; it fails as the kernel runs, asynchronously.
    if (op.name.rfind("kernel", 0) == 0 && failure_countdown > 0 && --failure_countdown == 0) {
      enqueue(*q, Op{[] { throw std::runtime_error("emulated launch failure (injected by fail_launch_after)"); }, op.name});
      continue;
    }
    enqueue(*q, op);
  }
  ++counters_total.graph_launches;
  return cudaSuccess;
}

void graph_destroy(void* graph) noexcept { delete static_cast<std::vector<Op>*>(graph); }

Counters counters() {
  std::lock_guard lock(counters_mutex);
  return counters_total;
}

long long launches_named(const std::string& part) {
  std::lock_guard lock(counters_mutex);
  long long n = 0;
  for (const auto& [name, count] : named_launches)
    if (name.find(part) != std::string::npos) n += count;
  return n;
}

void fail_launch_after(int n) {
  std::lock_guard lock(counters_mutex);
  failure_countdown = n > 0 ? n : 0;
}

int launches_until_failure() {
  std::lock_guard lock(counters_mutex);
  return failure_countdown;
}

}  // namespace surrogate::kernels::cuda::emulator
