// Run-time choice of the kernel table.
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels {

const CpuKernels& kernels_generic();
const CpuKernels& kernels_avx2();
const CpuKernels& kernels_avx512();

const char* to_string(Isa isa) noexcept {
  switch (isa) {
    case Isa::generic: return "generic";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "unknown";
}

namespace {
bool supported(Isa isa) noexcept {
  __builtin_cpu_init();
  switch (isa) {
    case Isa::generic: return true;
    case Isa::avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("fma");
  }
  return false;
}

const CpuKernels& select_from_environment() {
  const char* requested = std::getenv("SURROGATE_CPU_ISA");
  if (!requested || !*requested) return *cpu(best_cpu_isa());
  const std::string name(requested);
  for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) {
    if (name == to_string(isa)) {
      if (const CpuKernels* table = cpu(isa)) return *table;
      throw std::runtime_error("SURROGATE_CPU_ISA=" + name + ": this CPU does not support that instruction set");
    }
  }
  throw std::runtime_error("SURROGATE_CPU_ISA=" + name + ": expected generic, avx2 or avx512");
}
}  // namespace

Isa best_cpu_isa() noexcept {
  if (supported(Isa::avx512)) return Isa::avx512;
  if (supported(Isa::avx2)) return Isa::avx2;
  return Isa::generic;
}

const CpuKernels* cpu(Isa isa) noexcept {
  if (!supported(isa)) return nullptr;
  switch (isa) {
    case Isa::generic: return &kernels_generic();
    case Isa::avx2: return &kernels_avx2();
    case Isa::avx512: return &kernels_avx512();
  }
  return nullptr;
}

namespace {
std::atomic<const CpuKernels*> g_replacement{nullptr};
}  // namespace

const CpuKernels& cpu() {
  if (const CpuKernels* replacement = g_replacement.load(std::memory_order_acquire)) return *replacement;
  static const CpuKernels& table = select_from_environment();
  return table;
}

void replace_cpu_kernels(const CpuKernels* table) noexcept { g_replacement.store(table, std::memory_order_release); }

}  // namespace surrogate::kernels
