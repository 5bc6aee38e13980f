// A forward's large work blocks replayed at planned offsets of one mapping (share/docs/memory.md,
// "Block plans"): no page faults and no page clearing from the second forward on.
#pragma once

#include <cstddef>
#include <memory>

namespace surrogate::kernels {

/// Records the blocks of 2 MiB and more that one thread takes with aligned_uninitialised_alloc during a
/// forward (sizes, and when each is freed), places those freed within the forward at offsets of one
/// mapping so that no two live at once overlap, and serves the next forwards' blocks from it while they
/// ask for the same sizes in the same order. Any other sequence falls back to fresh blocks for the rest of
/// that forward, and the following forward records again. The mapping is held between forwards (about the
/// forward's peak of such blocks) and unmapped with the plan, or later once no block of it is in use.
/// One forward at a time uses a plan: a Scope opened while it is in use elsewhere leaves it alone.
class BlockPlan {
 public:
  BlockPlan();
  ~BlockPlan();
  BlockPlan(const BlockPlan&) = delete;
  BlockPlan& operator=(const BlockPlan&) = delete;

  /// Bytes of the mapping held now (0 until a second forward has used the plan).
  std::size_t held_bytes() const;
  /// Forwards served from the mapping, all their planned blocks included.
  std::size_t replays() const;

  /// This thread's large aligned_uninitialised_alloc blocks go through `plan` while the scope lives
  /// (nullptr: through none).
  class Scope {
   public:
    explicit Scope(BlockPlan* plan);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    BlockPlan* plan_ = nullptr;  // the plan this scope opened, if any
  };

  struct State;

 private:
  std::unique_ptr<State> state_;
};

/// 64-byte aligned, contents unspecified (zero when fresh, a previous forward's data when a BlockPlan
/// serves it); freed with aligned_free. Throws std::bad_alloc.
void* aligned_uninitialised_alloc(std::size_t bytes);

}  // namespace surrogate::kernels
