// The host backend's threads: a block's CUDA threads as fibers run between barriers in the order of the
// schedule, warp operations with CUDA's lane semantics. share/docs/cuda.md, "The host backend".
#include <ucontext.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "emulator.hpp"
#include "emulator_internal.hpp"

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

using detail::KernelFault;

namespace {

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

/// A cp.async of a lane, done at the lane's async_wait that covers its group.
struct AsyncCopy {
  void* dst;
  const void* src;
  unsigned bytes, src_bytes;
};

struct Lane {
#if defined(__x86_64__)
  void* sp = nullptr;  // saved stack pointer while suspended
#else
  ucontext_t context{};
#endif
  std::unique_ptr<unsigned char[]> stack;
  LaneState state = LaneState::ready;
  ThreadContext ctx;
  std::vector<AsyncCopy> async_open;                 // issued since the last commit
  std::deque<std::vector<AsyncCopy>> async_groups;  // committed, oldest first
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
  bool copies_at_issue = false;  // cp.async lands as issued (else at the wait that covers it)
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
  lane.async_open.clear();
  lane.async_groups.clear();
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

void run_blocks(dim3 grid, dim3 block, std::size_t dynamic_smem, const std::function<void()>& body) {
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
  engine.copies_at_issue = s.order != Schedule::forward;
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

void detail::run_kernel(dim3 grid, dim3 block, std::size_t dynamic_smem, const std::function<void()>& body) {
  run_blocks(grid, block, dynamic_smem, body);
}

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

namespace {
void land(const AsyncCopy& c) {
  if (c.src_bytes) std::memcpy(c.dst, c.src, c.src_bytes);
  std::memset(static_cast<unsigned char*>(c.dst) + c.src_bytes, 0, c.bytes - c.src_bytes);
}
}  // namespace

void async_copy(void* dst, const void* src, unsigned bytes, unsigned src_bytes) {
  if (src_bytes > bytes) kernel_fault("cp.async: src-size " + std::to_string(src_bytes) + " above its size " + std::to_string(bytes));
  const AsyncCopy c{dst, src, bytes, src_bytes};
  if (engine.copies_at_issue)
    land(c);
  else
    running_lane().async_open.push_back(c);
}

void async_commit() {
  Lane& lane = running_lane();
  lane.async_groups.push_back(std::move(lane.async_open));
  lane.async_open.clear();
}

void async_wait(int pending) {
  Lane& lane = running_lane();
  while (static_cast<int>(lane.async_groups.size()) > pending) {
    for (const AsyncCopy& c : lane.async_groups.front()) land(c);
    lane.async_groups.pop_front();
  }
}

void kernel_fault(const std::string& what) { throw KernelFault(what); }

}  // namespace surrogate::kernels::cuda::emulator
