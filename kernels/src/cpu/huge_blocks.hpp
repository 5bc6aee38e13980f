// Large host blocks: the 2 MiB aligned mappings of memory.cpp and the block plans that replay them
// (surrogate/kernels/block_plan.hpp).
#pragma once

#include <cstddef>

namespace surrogate::kernels::detail {

constexpr std::size_t kHugeBytes = std::size_t{2} << 20;

/// Bytes a block of `bytes` occupies: 64-byte multiples; from 2 MiB on, whole 2 MiB pages.
std::size_t block_bytes(std::size_t bytes);
/// A fresh 2 MiB aligned anonymous mapping of `size` bytes (a multiple of 2 MiB); nullptr on failure.
void* map_huge_aligned(std::size_t size);

/// A block of `size` bytes (a multiple of 2 MiB) from this thread's block plan; nullptr when none serves
/// it (then the caller maps one and reports it with planned_note_fresh).
void* planned_alloc(std::size_t size);
void planned_note_fresh(void* p, std::size_t size);
/// Whether `p` was a planned block (now released); false: the caller unmaps it.
bool planned_free(void* p) noexcept;

}  // namespace surrogate::kernels::detail
