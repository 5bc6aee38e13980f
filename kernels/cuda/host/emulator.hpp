// The engine of the host backend (share/docs/cuda.md, "The host backend"): the CUDA runtime's memory,
// streams and events, and the execution of kernels compiled from kernels/cuda/*.cu by the host compiler.
// Streams are deferred (work runs when a stream, event or the device is synchronised); a block's threads
// are fibers scheduled between barriers in a chosen order; warp operations follow CUDA's lane semantics.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <string>

namespace surrogate::kernels::cuda::emulator {

/// The order in which a block's threads run between two barriers.
enum class Schedule { forward, reverse, shuffle };
struct ScheduleChoice {
  Schedule order = Schedule::forward;
  unsigned seed = 0;  // shuffle: the seed of the first phase
};
/// The schedule of later launches. The default comes from SURROGATE_CUDA_EMULATED_SCHEDULE
/// ("forward", "reverse" or "shuffle:SEED"), else forward.
void set_schedule(ScheduleChoice choice);
ScheduleChoice schedule();
/// Parses "forward", "reverse", "shuffle" or "shuffle:SEED"; throws std::invalid_argument.
ScheduleChoice parse_schedule(const std::string& text);

// --- the runtime (cudaError_t results, as the CUDA runtime's) ---------------------------------------
cudaError_t malloc_device(void** p, std::size_t bytes);
cudaError_t free_device(void* p);  // synchronises the device first, as cudaFree does
void* host_alloc(std::size_t bytes);
void host_free(void* p) noexcept;
bool is_host_alloc(const void* p) noexcept;
/// The emulated allocation holding p (begin and size), or false.
bool find_allocation(const void* p, const void** begin = nullptr, std::size_t* bytes = nullptr) noexcept;

cudaError_t stream_create(cudaStream_t* stream);
cudaError_t stream_destroy(cudaStream_t stream);
cudaError_t stream_synchronize(cudaStream_t stream);
cudaError_t device_synchronize();
/// True for a stream of the host backend. The null stream is the host backend's while a DeviceGuard
/// holds the emulated device current on this thread (set_current).
bool owns_stream(cudaStream_t stream) noexcept;
void set_current(bool emulated_device_current) noexcept;
bool is_current() noexcept;

cudaError_t memcpy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);
cudaError_t memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream);
/// cudaMemcpy: runs the null stream's queued work, then copies (other streams are not waited for).
cudaError_t memcpy_blocking(void* dst, const void* src, std::size_t bytes);

cudaError_t event_create(cudaEvent_t* event);
cudaError_t event_destroy(cudaEvent_t event);
cudaError_t event_record(cudaEvent_t event, cudaStream_t stream);
cudaError_t event_synchronize(cudaEvent_t event);
cudaError_t event_elapsed(float* ms, cudaEvent_t start, cudaEvent_t end);

cudaError_t get_last_error() noexcept;   // returns and clears
cudaError_t peek_last_error() noexcept;
/// The message of the last failure (what failed, in which kernel), for CudaError's text.
std::string last_message();
cudaError_t device_attribute(int* value, cudaDeviceAttr attribute);
/// cudaFuncSetAttribute of `kernel` (the host backend's function): the dynamic shared memory opt-in is
/// kept per kernel, and a launch above 48 KiB without an opt-in at least as large fails as on a GPU.
cudaError_t func_set_attribute(const void* kernel, cudaFuncAttribute attribute, int value);

// --- graphs (cudaStreamBeginCapture ... cudaGraphLaunch) ----------------------------------------------
/// From begin_capture to end_capture, the work given to `stream` (not the null stream) is recorded
/// instead of queued; a call that would wait for it meanwhile (a synchronisation, a copy into pageable
/// memory, an event record) fails with cudaErrorStreamCaptureUnsupported and so does end_capture
/// (cudaErrorStreamCaptureInvalidated). Kernels recorded are not counted as launches.
cudaError_t begin_capture(cudaStream_t stream);
/// The recorded work as a new graph (graph_destroy frees it).
cudaError_t end_capture(cudaStream_t stream, void** graph);
/// Queues the graph's work on `stream`, in the recorded order.
cudaError_t graph_launch(const void* graph, cudaStream_t stream);
void graph_destroy(void* graph) noexcept;

// --- kernels ------------------------------------------------------------------------------------------
/// Queues a launch on `stream` (checks the configuration as CUDA does: a bad one sets the last error).
/// `body` runs once per thread with the thread's context current.
void launch(const void* kernel, dim3 grid, dim3 block, std::size_t dynamic_smem, cudaStream_t stream,
            std::function<void()> body);
/// Names the last queued launch (check_launch's argument) for the messages of deferred failures.
void name_last_launch(const char* kernel);

/// The running thread's coordinates (valid inside a kernel body).
struct ThreadContext {
  dim3 thread_index, block_index, block_dim, grid_dim;
  unsigned char* dynamic_smem = nullptr;
};
const ThreadContext& current_thread();
void sync_threads();
/// The warp's exchange: every lane of `mask` deposits `bits` and receives the bits of lane `source`
/// (its own when `source` is outside 0..31); all lanes of the mask must take part.
unsigned long long warp_exchange(unsigned mask, unsigned long long bits, int source);
unsigned warp_ballot(unsigned mask, bool predicate);
/// Every lane of `mask` deposits `bits` and receives all lanes' deposits (out[l] for lane l of the mask).
void warp_all(unsigned mask, unsigned long long bits, unsigned long long out[32]);
void sync_warp(unsigned mask);
/// cp.async of the calling thread: `bytes` into shared memory at dst, the first `src_bytes` from src and
/// the rest zero, at either end of the time a GPU may take. Under the forward schedule the copy lands
/// when a later async_wait of this thread covers its group (a read of dst before that sees the old
/// contents); under the others as it is issued (a tile still being read is overwritten at once).
void async_copy(void* dst, const void* src, unsigned bytes, unsigned src_bytes);
/// cp.async.commit_group: the thread's copies issued since the last commit become one group.
void async_commit();
/// cp.async.wait_group: completes the thread's committed groups but the `pending` newest.
void async_wait(int pending);
/// cudaOccupancyMaxActiveBlocksPerMultiprocessor on the emulated device: blocks of `threads` threads and
/// `smem` bytes of dynamic shared memory an SM of 2,048 threads, 32 blocks and 228 KiB of shared memory
/// holds (1 KiB reserved a block), registers not counted.
cudaError_t occupancy(int* blocks, int threads, std::size_t smem);
// --- for tests ----------------------------------------------------------------------------------------
/// Kernels launched on the emulated device (one by one: not those a graph replays), and bytes copied host
/// to device and device to host.
struct Counters {
  long long launches = 0, bytes_to_device = 0, bytes_to_host = 0;
  /// Times the host waited for the device: stream and event synchronisations that found work pending,
  /// device synchronisations, and copies into pageable host memory (which return when done).
  long long host_waits = 0;
  /// Graphs captured (end_capture) and launched (graph_launch).
  long long graph_captures = 0, graph_launches = 0;
};
Counters counters();
/// Launches checked (check_launch) under a kernel name that contains `part`.
long long launches_named(const std::string& part);
/// Fault injection: the n-th kernel launch from now fails as a CUDA launch failure (check_launch throws;
/// a kernel of a launched graph fails as it runs, surfacing at the next wait); 0 clears it. launches_until_failure() is what is left (0 once it fired, or when none is set).
void fail_launch_after(int n);
int launches_until_failure();

/// A failure inside a kernel (__trap, a bad warp operation): ends the launch with this message.
[[noreturn]] void kernel_fault(const std::string& what);

}  // namespace surrogate::kernels::cuda::emulator
