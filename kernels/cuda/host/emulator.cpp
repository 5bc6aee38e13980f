// The host backend's engine: memory with guard zones, deferred streams, events, and kernels run as
// fibers (one per CUDA thread, a block at a time) in a chosen order between barriers. share/docs/cuda.md,
// "The host backend".
#include "emulator.hpp"

#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define SURROGATE_EMULATOR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SURROGATE_EMULATOR_ASAN 1
#endif
#endif
#if defined(SURROGATE_EMULATOR_ASAN)
#include <sanitizer/common_interface_defs.h>
#endif

namespace surrogate::kernels::cuda::emulator {

namespace {

/// A failure inside a kernel; ends the launch (and the stream's queued work) with its message.
struct KernelFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

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
};

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

void count_copy(const void* dst, const void* src, std::size_t bytes) {
  const bool to_device = find_allocation(dst) && !find_allocation(src);
  const bool to_host = find_allocation(src) && !find_allocation(dst);
  std::lock_guard lock(counters_mutex);
  if (to_device) counters_total.bytes_to_device += static_cast<long long>(bytes);
  if (to_host) counters_total.bytes_to_host += static_cast<long long>(bytes);
}

// ------------------------------------------------------------------------------------------------------
// Schedules

std::mutex schedule_mutex;
bool schedule_ready = false;
ScheduleChoice schedule_choice;

// ------------------------------------------------------------------------------------------------------
// Kernel execution: the threads of a block are fibers (ucontext) run by this host thread.

#if defined(SURROGATE_EMULATOR_ASAN)
constexpr std::size_t kStackBytes = 1024 * 1024;
#else
constexpr std::size_t kStackBytes = 256 * 1024;
#endif

enum class LaneState { ready, barrier, warp, done };

#if defined(__x86_64__)
// A context switch of the callee-saved registers (System V x86-64), without the signal-mask system
// calls of swapcontext, which made them 80 % of the emulator's time: pushes rbp, rbx, r12-r15, MXCSR and
// the x87 control word, stores rsp in *save, loads `to` and pops the same from there.
extern "C" void surrogate_emulator_switch(void** save, void* to);
asm(R"(
  .text
  .p2align 4
  .type surrogate_emulator_switch,@function
surrogate_emulator_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size surrogate_emulator_switch, .-surrogate_emulator_switch
)");
#endif

struct Lane {
#if defined(__x86_64__)
  void* sp = nullptr;  // saved stack pointer while suspended
#else
  ucontext_t context{};
#endif
  std::unique_ptr<unsigned char[]> stack;
  LaneState state = LaneState::ready;
  ThreadContext ctx;
};

struct Warp {
  unsigned arrived = 0;  // lanes waiting in the current operation
  unsigned generation = 0;
  unsigned long long slots[2][32] = {};
};

struct Engine {
  std::vector<Lane> lanes;
  std::vector<Warp> warps;
#if defined(__x86_64__)
  void* scheduler_sp = nullptr;
#else
  ucontext_t scheduler{};
#endif
  int current = -1;  // running lane
  const std::function<void()>* body = nullptr;
  std::vector<unsigned char> smem;
  std::string fault;
  void* fake_stack = nullptr;  // AddressSanitizer's bookkeeping of the scheduler's stack
  const void* scheduler_stack_bottom = nullptr;
  std::size_t scheduler_stack_size = 0;
};
// initial-exec: no __tls_get_addr call per access (5 % of the time in a shared library otherwise).
__attribute__((tls_model("initial-exec"))) thread_local Engine engine;

void switch_to_lane(Lane& lane) {
#if defined(__x86_64__)
  surrogate_emulator_switch(&engine.scheduler_sp, lane.sp);
#else
  swapcontext(&engine.scheduler, &lane.context);
#endif
}

void switch_to_scheduler(Lane& lane) {
#if defined(__x86_64__)
  surrogate_emulator_switch(&lane.sp, engine.scheduler_sp);
#else
  swapcontext(&lane.context, &engine.scheduler);
#endif
}

void enter_fiber(Lane& lane) {
#if defined(SURROGATE_EMULATOR_ASAN)
  __sanitizer_start_switch_fiber(&engine.fake_stack, lane.stack.get(), kStackBytes);
#endif
  switch_to_lane(lane);
#if defined(SURROGATE_EMULATOR_ASAN)
  __sanitizer_finish_switch_fiber(engine.fake_stack, nullptr, nullptr);
#endif
}

void leave_fiber(Lane& lane, bool finished) {
#if defined(SURROGATE_EMULATOR_ASAN)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(finished ? nullptr : &fake, engine.scheduler_stack_bottom,
                                 engine.scheduler_stack_size);
  switch_to_scheduler(lane);
  __sanitizer_finish_switch_fiber(fake, &engine.scheduler_stack_bottom, &engine.scheduler_stack_size);
#else
  (void)finished;
  switch_to_scheduler(lane);
#endif
}

void fiber_main() {
#if defined(SURROGATE_EMULATOR_ASAN)
  __sanitizer_finish_switch_fiber(nullptr, &engine.scheduler_stack_bottom, &engine.scheduler_stack_size);
#endif
  Lane& lane = engine.lanes[static_cast<std::size_t>(engine.current)];
  try {
    (*engine.body)();
  } catch (const std::exception& e) {
    if (engine.fault.empty()) engine.fault = e.what();
  } catch (...) {
    if (engine.fault.empty()) engine.fault = "unknown exception in a kernel thread";
  }
  lane.state = LaneState::done;
  leave_fiber(lane, true);
}

/// Prepares `lane` to start fiber_main at its next switch.
void reset_lane(Lane& lane) {
#if defined(__x86_64__)
  // The frame surrogate_emulator_switch pops: MXCSR and x87 control word, r15..rbp, then the return
  // address fiber_main, entered with rsp = 8 (mod 16) as after a call (its own return address is 0).
  auto top = reinterpret_cast<std::uintptr_t>(lane.stack.get() + kStackBytes) & ~std::uintptr_t{15};
  auto* frame = reinterpret_cast<std::uint64_t*>(top) - 9;
  std::uint32_t mxcsr = 0;
  std::uint16_t fpu_cw = 0;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpu_cw));
  frame[0] = static_cast<std::uint64_t>(mxcsr) | static_cast<std::uint64_t>(fpu_cw) << 32;
  for (int i = 1; i <= 6; ++i) frame[i] = 0;  // r15, r14, r13, r12, rbx, rbp
  frame[7] = reinterpret_cast<std::uint64_t>(&fiber_main);
  frame[8] = 0;
  lane.sp = frame;
#else
  getcontext(&lane.context);
  lane.context.uc_stack.ss_sp = lane.stack.get();
  lane.context.uc_stack.ss_size = kStackBytes;
  lane.context.uc_link = nullptr;
  makecontext(&lane.context, fiber_main, 0);
#endif
  lane.state = LaneState::ready;
}

Lane& running_lane() {
  if (engine.current < 0) throw std::logic_error("CUDA device function called outside an emulated kernel");
  return engine.lanes[static_cast<std::size_t>(engine.current)];
}

void yield_lane() { leave_fiber(running_lane(), false); }

std::vector<int> phase_order(int n, const ScheduleChoice& s, unsigned phase) {
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  if (s.order == Schedule::reverse) std::reverse(order.begin(), order.end());
  if (s.order == Schedule::shuffle) std::shuffle(order.begin(), order.end(), std::mt19937(s.seed * 7919u + phase));
  return order;
}

/// Runs one block to completion; throws KernelFault on a fault or a deadlock.
void run_block(const ScheduleChoice& s, int threads) {
  for (int t = 0; t < threads; ++t) reset_lane(engine.lanes[static_cast<std::size_t>(t)]);
  for (Warp& w : engine.warps) w = Warp{};
  engine.fault.clear();
  for (unsigned phase = 0;; ++phase) {
    bool progress = false;
    for (int t : phase_order(threads, s, phase)) {
      Lane& lane = engine.lanes[static_cast<std::size_t>(t)];
      if (lane.state != LaneState::ready) continue;
      engine.current = t;
      enter_fiber(lane);
      engine.current = -1;
      progress = true;
      if (!engine.fault.empty()) throw KernelFault(engine.fault);
    }
    int done = 0, at_barrier = 0, at_warp = 0;
    for (int t = 0; t < threads; ++t) {
      const LaneState st = engine.lanes[static_cast<std::size_t>(t)].state;
      done += st == LaneState::done;
      at_barrier += st == LaneState::barrier;
      at_warp += st == LaneState::warp;
    }
    if (done == threads) return;
    if (at_barrier > 0 && at_barrier + done == threads) {  // every live thread reached __syncthreads
      for (int t = 0; t < threads; ++t)
        if (engine.lanes[static_cast<std::size_t>(t)].state == LaneState::barrier)
          engine.lanes[static_cast<std::size_t>(t)].state = LaneState::ready;
      continue;
    }
    if (!progress)
      throw KernelFault("deadlock: " + std::to_string(at_warp) + " thread(s) wait in a warp operation for lanes that " +
                        "exited or wait at __syncthreads (" + std::to_string(at_barrier) + " at the barrier, " +
                        std::to_string(done) + " exited)");
  }
}

void run_kernel(dim3 grid, dim3 block, std::size_t dynamic_smem, const std::function<void()>& body) {
  const ScheduleChoice s = schedule();
  const int threads = static_cast<int>(block.x * block.y * block.z);
  if (engine.lanes.size() < static_cast<std::size_t>(threads)) {
    const std::size_t old = engine.lanes.size();
    engine.lanes.resize(static_cast<std::size_t>(threads));
    for (std::size_t t = old; t < engine.lanes.size(); ++t)
      engine.lanes[t].stack = std::make_unique<unsigned char[]>(kStackBytes);
  }
  engine.warps.assign(static_cast<std::size_t>((threads + 31) / 32), Warp{});
  engine.smem.assign(dynamic_smem, 0xff);
  engine.body = &body;
  for (int t = 0; t < threads; ++t) {
    ThreadContext& c = engine.lanes[static_cast<std::size_t>(t)].ctx;
    c.thread_index = dim3(static_cast<unsigned>(t) % block.x, static_cast<unsigned>(t) / block.x % block.y,
                          static_cast<unsigned>(t) / (block.x * block.y));
    c.block_dim = block;
    c.grid_dim = grid;
  }
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        if (dynamic_smem) std::fill(engine.smem.begin(), engine.smem.end(), static_cast<unsigned char>(0xff));
        for (int t = 0; t < threads; ++t) {
          ThreadContext& c = engine.lanes[static_cast<std::size_t>(t)].ctx;
          c.block_index = dim3(x, y, z);
          c.dynamic_smem = engine.smem.data();
        }
        run_block(s, threads);
      }
  engine.body = nullptr;
}

/// A lane's arrival at a warp operation; returns the generation whose slots hold the lanes' bits.
unsigned warp_arrive(unsigned mask, unsigned long long bits) {
  Lane& lane = running_lane();
  const int me = engine.current;
  const int lane_id = me % 32;
  Warp& w = engine.warps[static_cast<std::size_t>(me / 32)];
  if (!((mask >> lane_id) & 1u)) kernel_fault("a warp operation whose mask does not hold the calling lane");
  const int threads = static_cast<int>(lane.ctx.block_dim.x * lane.ctx.block_dim.y * lane.ctx.block_dim.z);
  const int lanes_here = std::min(32, threads - me / 32 * 32);
  const unsigned present = lanes_here == 32 ? 0xffffffffu : (1u << lanes_here) - 1u;
  if (mask & ~present) kernel_fault("a warp operation whose mask names lanes the block does not have");
  const unsigned generation = w.generation;
  w.slots[generation & 1u][lane_id] = bits;
  w.arrived |= 1u << lane_id;
  if ((w.arrived & mask) == mask) {  // the last lane: release the others
    w.arrived &= ~mask;
    ++w.generation;
    const int first = me / 32 * 32;
    for (int l = 0; l < 32; ++l)
      if ((mask >> l) & 1u) {
        Lane& other = engine.lanes[static_cast<std::size_t>(first + l)];
        if (other.state == LaneState::warp) other.state = LaneState::ready;
      }
  } else {
    lane.state = LaneState::warp;
    yield_lane();
  }
  return generation;
}

}  // namespace

// --------------------------------------------------------------------------------------------------------

ScheduleChoice parse_schedule(const std::string& text) {
  ScheduleChoice c;
  if (text == "forward") return c;
  if (text == "reverse") {
    c.order = Schedule::reverse;
    return c;
  }
  if (text == "shuffle" || text.rfind("shuffle:", 0) == 0) {
    c.order = Schedule::shuffle;
    if (text.size() > 8) {
      char* end = nullptr;
      const unsigned long seed = std::strtoul(text.c_str() + 8, &end, 10);
      if (!end || *end != '\0') throw std::invalid_argument("schedule '" + text + "': expected shuffle:SEED");
      c.seed = static_cast<unsigned>(seed);
    }
    return c;
  }
  throw std::invalid_argument("schedule '" + text + "': expected forward, reverse or shuffle:SEED");
}

void set_schedule(ScheduleChoice choice) {
  std::lock_guard lock(schedule_mutex);
  schedule_choice = choice;
  schedule_ready = true;
}

ScheduleChoice schedule() {
  std::lock_guard lock(schedule_mutex);
  if (!schedule_ready) {
    schedule_ready = true;
    if (const char* env = std::getenv("SURROGATE_CUDA_EMULATED_SCHEDULE"); env && *env) schedule_choice = parse_schedule(env);
  }
  return schedule_choice;
}

cudaError_t malloc_device(void** p, std::size_t bytes) {
  *p = nullptr;
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
  return drain(*q);
}

cudaError_t device_synchronize() { return drain_all(); }

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
}  // namespace

cudaError_t memcpy_async(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  Queue* q = queue_of(stream);
  if (!q) return fail(cudaErrorInvalidResourceHandle, "emulated cudaMemcpyAsync: unknown stream");
  if (!bytes) return cudaSuccess;
  count_copy(dst, src, bytes);
  // As CUDA with pageable host memory: the source is staged at the call (the caller may reuse it at
  // once), and a copy into pageable memory returns only when done. Pinned memory is fully asynchronous.
  const bool src_pageable = !find_allocation(src) && !is_pinned(src);
  const bool dst_pageable = !find_allocation(dst) && !is_pinned(dst);
  if (dst_pageable) {
    const cudaError_t code = drain(*q);
    if (code != cudaSuccess) return code;
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  }
  if (src_pageable) {
    auto staged = std::make_shared<std::vector<unsigned char>>(static_cast<const unsigned char*>(src),
                                                               static_cast<const unsigned char*>(src) + bytes);
    q->ops.push_back(Op{[=] { std::memcpy(dst, staged->data(), bytes); }, "cudaMemcpyAsync"});
    return cudaSuccess;
  }
  q->ops.push_back(Op{[=] { std::memmove(dst, src, bytes); }, "cudaMemcpyAsync"});
  return cudaSuccess;
}

cudaError_t memset_async(void* dst, int value, std::size_t bytes, cudaStream_t stream) {
  Queue* q = queue_of(stream);
  if (!q) return fail(cudaErrorInvalidResourceHandle, "emulated cudaMemsetAsync: unknown stream");
  if (bytes) q->ops.push_back(Op{[=] { std::memset(dst, value, bytes); }, "cudaMemsetAsync"});
  return cudaSuccess;
}

cudaError_t memcpy_blocking(void* dst, const void* src, std::size_t bytes) {
  const cudaError_t code = drain(null_queue);
  if (code != cudaSuccess) return code;
  if (bytes) std::memmove(dst, src, bytes);
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

cudaError_t func_set_attribute(cudaFuncAttribute attribute, int value) {
  if (attribute == cudaFuncAttributeMaxDynamicSharedMemorySize && (value < 0 || value > 227 * 1024))
    return fail(cudaErrorInvalidValue, "emulated cudaFuncSetAttribute: " + std::to_string(value) +
                                           " bytes of dynamic shared memory exceed the 227 KiB of sm_90");
  return cudaSuccess;
}

void launch(dim3 grid, dim3 block, std::size_t dynamic_smem, cudaStream_t stream, std::function<void()> body) {
  Queue* q = queue_of(stream);
  if (!q) {
    fail(cudaErrorInvalidResourceHandle, "emulated launch: unknown stream");
    return;
  }
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
  {
    std::lock_guard lock(counters_mutex);
    ++counters_total.launches;
    if (failure_countdown > 0 && --failure_countdown == 0) {
      fail(cudaErrorLaunchFailure, "emulated launch failure (injected by fail_launch_after)");
      return;
    }
  }
  q->ops.push_back(Op{[grid, block, dynamic_smem, body = std::move(body)] {
                        run_kernel(grid, block, dynamic_smem, body);
                        const std::string damaged = check_guards();
                        if (!damaged.empty()) throw KernelFault("out-of-bounds device access: " + damaged);
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
    if (!q.ops.empty() && q.ops.back().name == "kernel") q.ops.back().name = std::string("kernel ") + kernel;
  };
  rename(null_queue);
  for (const void* s : streams()) rename(*static_cast<Queue*>(const_cast<void*>(s)));
}

const ThreadContext& current_thread() { return running_lane().ctx; }

void sync_threads() {
  Lane& lane = running_lane();
  lane.state = LaneState::barrier;
  yield_lane();
}

unsigned long long warp_exchange(unsigned mask, unsigned long long bits, int source) {
  const unsigned generation = warp_arrive(mask, bits);
  const int me = engine.current;
  const int lane_id = me % 32;
  const int from = source >= 0 && source < 32 ? source : lane_id;
  if (!((mask >> from) & 1u)) kernel_fault("a warp shuffle reads lane " + std::to_string(from) + ", outside its mask");
  return engine.warps[static_cast<std::size_t>(me / 32)].slots[generation & 1u][from];
}

unsigned warp_ballot(unsigned mask, bool predicate) {
  const unsigned generation = warp_arrive(mask, predicate ? 1u : 0u);
  const Warp& w = engine.warps[static_cast<std::size_t>(engine.current / 32)];
  unsigned result = 0;
  for (int l = 0; l < 32; ++l)
    if (((mask >> l) & 1u) && w.slots[generation & 1u][l]) result |= 1u << l;
  return result;
}

void warp_all(unsigned mask, unsigned long long bits, unsigned long long out[32]) {
  const unsigned generation = warp_arrive(mask, bits);
  const Warp& w = engine.warps[static_cast<std::size_t>(engine.current / 32)];
  for (int l = 0; l < 32; ++l) out[l] = ((mask >> l) & 1u) ? w.slots[generation & 1u][l] : 0;
}

void sync_warp(unsigned mask) { (void)warp_arrive(mask, 0); }

void kernel_fault(const std::string& what) { throw KernelFault(what); }

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
