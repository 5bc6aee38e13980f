// Owning, 64-byte aligned, zero-initialised host memory. Blocks of 2 MiB and more are anonymous mappings
// of their own (2 MiB aligned, advised to use transparent huge pages: first-touch page faults on 4 KiB
// pages cost about 2 GB/s on the machines this library targets), unmapped when freed, so they go back to
// the system whatever malloc settings the process runs with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>

namespace surrogate::kernels {

void* aligned_zeroed_alloc(std::size_t bytes);  // throws std::bad_alloc
void aligned_free(void* p, std::size_t bytes) noexcept;  // bytes: as given to aligned_zeroed_alloc

template <class T>
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t count) { resize(count); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  AlignedBuffer(AlignedBuffer&& other) noexcept { swap(other); }
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    AlignedBuffer(std::move(other)).swap(*this);
    return *this;
  }
  ~AlignedBuffer() { aligned_free(data_, count_ * sizeof(T)); }

  /// Reallocates (zeroed) only when the capacity grows; contents are not preserved.
  void resize(std::size_t count) {
    if (count <= count_) return;
    AlignedBuffer fresh;
    fresh.data_ = static_cast<T*>(aligned_zeroed_alloc(count * sizeof(T)));
    fresh.count_ = count;
    swap(fresh);
  }
  void swap(AlignedBuffer& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(count_, other.count_);
  }
  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return count_; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }

 private:
  T* data_ = nullptr;
  std::size_t count_ = 0;
};

/// construct() for the allocators below: a value-less construct default-initialises (writes nothing), so a
/// std::vector's resize() leaves the new elements as the memory holds them and their pages fault where the
/// caller's loops first write them, on every thread, not all on the calling one. For arrays whose every
/// element is written before it is read; elements that a vector shrank away and grows back within its
/// capacity keep their old values. Values given to the vector are constructed as usual.
struct DefaultInitConstruct {
  template <class U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <class U, class... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

/// AlignedBuffer's blocks for a std::vector: fresh large buffers fault in 2 MiB pages and come zeroed
/// (HEPT's geometry: rows x points int64 arrays, a few hundred MB per event).
template <class T>
struct BlockAllocator : DefaultInitConstruct {
  using value_type = T;
  BlockAllocator() = default;
  template <class U>
  BlockAllocator(const BlockAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(aligned_zeroed_alloc(n * sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { aligned_free(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const BlockAllocator<U>&) const noexcept {
    return true;
  }
};

/// std::allocator's memory (malloc: 4 KiB pages for large blocks) for a std::vector whose growth writes
/// nothing: HEPT's kept work arrays, whose first forward 2 MiB pages made slower (share/docs/hept.md,
/// "Memory").
template <class T>
struct FirstTouchAllocator : std::allocator<T>, DefaultInitConstruct {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = FirstTouchAllocator<U>;
  };
  FirstTouchAllocator() = default;
  template <class U>
  FirstTouchAllocator(const FirstTouchAllocator<U>&) noexcept {}
};

}  // namespace surrogate::kernels
