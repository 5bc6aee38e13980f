// Block plans (surrogate/kernels/block_plan.hpp; share/docs/adding-a-family.md, section 6c): record a
// forward's large blocks, place them by their lifetimes, replay them from one mapping.
#include "surrogate/kernels/block_plan.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "huge_blocks.hpp"

namespace surrogate::kernels {

namespace {

constexpr std::int64_t kNever = std::numeric_limits<std::int64_t>::max();

/// One mapping that replayed blocks live in; it outlives its plan while any of its blocks is in use.
struct Arena {
  char* base = nullptr;
  std::size_t bytes = 0;
  std::size_t live = 0;                 // blocks handed out and not yet freed
  BlockPlan::State* owner = nullptr;    // nullptr once retired
};

struct Block {
  std::size_t size = 0;
  std::int64_t born = 0, dies = kNever;  // event times of the recording
  std::size_t offset = 0;
  bool planned = false;                  // freed within the recorded forward: placed in the arena
  std::vector<std::size_t> earlier;      // planned blocks allocated before it that share its bytes
};

// All bookkeeping under one mutex: large blocks are few (hundreds per forward), each already a system call.
std::mutex registry_mutex;
std::vector<Arena*> arenas;                       // live mappings, retired ones included
std::vector<BlockPlan::State*> recording;        // plans recording now (frees may come from any thread)
std::atomic<int> plans_in_use{0};                // nothing to look up while no plan is recording or mapped
thread_local BlockPlan::State* active = nullptr;

void unmap(Arena* a) {
  munmap(a->base, a->bytes);
  arenas.erase(std::find(arenas.begin(), arenas.end(), a));
  delete a;
  --plans_in_use;
}

}  // namespace

struct BlockPlan::State {
  enum class Mode { idle, recording, replaying } mode = Mode::idle;
  std::vector<Block> blocks;  // in allocation order
  std::int64_t clock = 0;
  std::unordered_map<void*, std::size_t> fresh;     // recording: live recorded blocks
  bool has_plan = false;
  std::size_t arena_bytes = 0;
  Arena* arena = nullptr;
  std::size_t next = 0;                             // replaying: the next block's index
  bool diverged = false;
  std::vector<char> freed;                          // replaying: per block, freed in this forward
  std::unordered_map<void*, std::size_t> handed;    // replaying: live planned blocks
  std::size_t replays = 0;

  /// Places the planned blocks: largest first, each at the lowest offset free of the bytes of every
  /// placed block whose lifetime meets its own.
  void place() {
    std::vector<std::size_t> order;
    for (std::size_t i = 0; i < blocks.size(); ++i)
      if (blocks[i].planned) order.push_back(i);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return blocks[a].size > blocks[b].size; });
    std::vector<std::size_t> placed;
    arena_bytes = 0;
    for (const std::size_t i : order) {
      Block& b = blocks[i];
      std::vector<std::pair<std::size_t, std::size_t>> taken;  // [offset, end) of blocks alive with b
      for (const std::size_t j : placed)
        if (blocks[j].born < b.dies && b.born < blocks[j].dies) taken.emplace_back(blocks[j].offset, blocks[j].offset + blocks[j].size);
      std::sort(taken.begin(), taken.end());
      std::size_t at = 0;
      for (const auto& [lo, hi] : taken) {
        if (lo >= at + b.size) break;
        at = std::max(at, hi);
      }
      b.offset = at;
      arena_bytes = std::max(arena_bytes, at + b.size);
      placed.push_back(i);
    }
    for (const std::size_t i : order) {
      Block& b = blocks[i];
      b.earlier.clear();
      for (const std::size_t j : order)
        if (j < i && blocks[j].offset < b.offset + b.size && b.offset < blocks[j].offset + blocks[j].size) b.earlier.push_back(j);
    }
    has_plan = !order.empty();
  }

  void retire_arena() {
    if (!arena) return;
    arena->owner = nullptr;
    if (arena->live == 0) unmap(arena);
    arena = nullptr;
  }
};

BlockPlan::BlockPlan() : state_(std::make_unique<State>()) {}

BlockPlan::~BlockPlan() {
  const std::lock_guard<std::mutex> lock(registry_mutex);
  const auto it = std::find(recording.begin(), recording.end(), state_.get());
  if (it != recording.end()) {  // destroyed inside its own forward's scope (a caller's error): forget it
    recording.erase(it);
    --plans_in_use;
  }
  if (active == state_.get()) active = nullptr;
  state_->retire_arena();
}

std::size_t BlockPlan::held_bytes() const {
  const std::lock_guard<std::mutex> lock(registry_mutex);
  return state_->arena ? state_->arena->bytes : 0;
}

std::size_t BlockPlan::replays() const {
  const std::lock_guard<std::mutex> lock(registry_mutex);
  return state_->replays;
}

BlockPlan::Scope::Scope(BlockPlan* plan) {
  if (!plan || active) return;  // no plan, or one is active on this thread already
  const std::lock_guard<std::mutex> lock(registry_mutex);
  State& s = *plan->state_;
  if (s.mode != State::Mode::idle) return;  // in use by another forward
  if (!s.has_plan) {
    s.mode = State::Mode::recording;
    s.blocks.clear();
    s.fresh.clear();
    s.clock = 0;
    recording.push_back(&s);
    ++plans_in_use;
  } else {
    if (!s.arena) {
      void* base = detail::map_huge_aligned(s.arena_bytes);
      if (!base) return;  // no room for the arena: this forward runs without the plan
      s.arena = new Arena{static_cast<char*>(base), s.arena_bytes, 0, &s};
      arenas.push_back(s.arena);
      ++plans_in_use;
    }
    s.mode = State::Mode::replaying;
    s.next = 0;
    s.diverged = false;
    s.freed.assign(s.blocks.size(), 0);
    s.handed.clear();
  }
  plan_ = plan;
  active = &s;
}

BlockPlan::Scope::~Scope() {
  if (!plan_) return;
  active = nullptr;
  const std::lock_guard<std::mutex> lock(registry_mutex);
  State& s = *plan_->state_;
  if (s.mode == State::Mode::recording) {
    recording.erase(std::find(recording.begin(), recording.end(), &s));
    --plans_in_use;
    for (Block& b : s.blocks) b.planned = b.dies != kNever;  // the others outlive the forward
    s.place();
  } else {
    // A forward that asked for other blocks, or kept a planned one beyond its end, records anew.
    if (s.diverged || s.next != s.blocks.size() || !s.handed.empty()) {
      s.has_plan = false;
      s.retire_arena();
    } else {
      ++s.replays;
    }
  }
  s.mode = State::Mode::idle;
}

namespace detail {

void* planned_alloc(std::size_t size) {
  BlockPlan::State* s = active;
  if (!s || s->mode != BlockPlan::State::Mode::replaying) return nullptr;
  const std::lock_guard<std::mutex> lock(registry_mutex);
  if (s->diverged) return nullptr;
  const std::size_t k = s->next++;
  bool ok = k < s->blocks.size() && s->blocks[k].size == size;
  if (ok && !s->blocks[k].planned) return nullptr;  // a block that outlives the forward: fresh, as recorded
  if (ok)
    for (const std::size_t j : s->blocks[k].earlier) ok = ok && s->freed[j];
  if (!ok) {
    s->diverged = true;
    return nullptr;
  }
  void* p = s->arena->base + s->blocks[k].offset;
  s->handed.emplace(p, k);
  ++s->arena->live;
  return p;
}

void planned_note_fresh(void* p, std::size_t size) {
  BlockPlan::State* s = active;
  if (!s || s->mode != BlockPlan::State::Mode::recording) return;
  const std::lock_guard<std::mutex> lock(registry_mutex);
  s->fresh.emplace(p, s->blocks.size());
  Block b;
  b.size = size;
  b.born = s->clock++;
  s->blocks.push_back(std::move(b));
}

bool planned_free(void* p) noexcept {
  if (plans_in_use.load() == 0) return false;
  const std::lock_guard<std::mutex> lock(registry_mutex);
  for (BlockPlan::State* s : recording) {
    const auto it = s->fresh.find(p);
    if (it == s->fresh.end()) continue;
    s->blocks[it->second].dies = s->clock++;
    s->fresh.erase(it);
    return false;  // a fresh block: the caller unmaps it
  }
  const auto c = reinterpret_cast<std::uintptr_t>(p);
  for (Arena* a : arenas) {
    const auto base = reinterpret_cast<std::uintptr_t>(a->base);
    if (c < base || c >= base + a->bytes) continue;
    if (BlockPlan::State* s = a->owner) {
      const auto it = s->handed.find(p);
      if (it != s->handed.end()) {
        s->freed[it->second] = 1;
        s->handed.erase(it);
      }
    }
    if (--a->live == 0 && !a->owner) unmap(a);
    return true;
  }
  return false;
}

}  // namespace detail

}  // namespace surrogate::kernels
