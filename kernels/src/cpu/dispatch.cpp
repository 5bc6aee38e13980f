// Run-time choice of the kernel table, and of the engine of the BF16 Linear layers.
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels {

const CpuKernels& kernels_generic();
const CpuKernels& kernels_avx2();
const CpuKernels& kernels_avx512();
void (*bf16_linear(LinearEngine engine) noexcept)(const LinearArgs&);  // linear_bf16.cpp

const char* to_string(Isa isa) noexcept {
  switch (isa) {
    case Isa::generic: return "generic";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "unknown";
}

const char* to_string(LinearEngine engine) noexcept {
  switch (engine) {
    case LinearEngine::fp32: return "fp32";
    case LinearEngine::amx_bf16: return "amx";
    case LinearEngine::avx512_bf16: return "avx512bf16";
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

// ---------------------------------------------------------------------------------------------------
// BF16 Linear layers: AVX512-BF16 needs the instructions and the AVX-512 register state; AMX needs the
// tile instructions, their state in XCR0 and, on Linux, the process's permission to use the tile data
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once).

namespace {
struct Bf16Support {
  bool dot = false, amx = false;
  std::string why_not_dot, why_not_amx;
};

std::uint64_t enabled_state() noexcept {
  std::uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

Bf16Support detect_bf16() noexcept {
  Bf16Support s;
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool osxsave = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 27));
  unsigned b7 = 0, d7 = 0, a71 = 0;
  if (__get_cpuid_count(7, 0, &a, &b7, &c, &d7)) {
    unsigned b71 = 0, c71 = 0, d71 = 0;
    if (a >= 1) __get_cpuid_count(7, 1, &a71, &b71, &c71, &d71);
  }
  const std::uint64_t xcr0 = osxsave ? enabled_state() : 0;
  if (!supported(Isa::avx512)) s.why_not_dot = "this CPU has no AVX-512 (F, DQ, VL, BW)";
  else if (!(a71 & (1u << 5))) s.why_not_dot = "this CPU has no AVX512-BF16 instructions";
  else s.dot = true;
  if (!s.dot) s.why_not_amx = s.why_not_dot;
  else if (!(d7 & (1u << 24)) || !(d7 & (1u << 22))) s.why_not_amx = "this CPU has no AMX-BF16 tiles";
  else if ((xcr0 & 0x60000u) != 0x60000u) s.why_not_amx = "the operating system has not enabled the AMX tile state";
  else {
#if defined(__linux__)
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    if (syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0) s.amx = true;
    else s.why_not_amx = std::string("the kernel refused the AMX tile state (arch_prctl: ") + std::strerror(errno) + ")";
#else
    s.why_not_amx = "AMX is used on Linux only";
#endif
  }
  return s;
}

const Bf16Support& bf16_support() noexcept {
  static const Bf16Support support = detect_bf16();
  return support;
}

CpuKernels with_engine(LinearEngine engine) {
  CpuKernels table = cpu();
  table.linear = bf16_linear(engine);
  table.linear_engine = engine;
  if (engine == LinearEngine::amx_bf16) table.linear_rows = 240;
  return table;
}
}  // namespace

const CpuKernels* cpu_bf16(LinearEngine engine) {
  switch (engine) {
    case LinearEngine::amx_bf16: {
      if (!bf16_support().amx) return nullptr;
      static const CpuKernels amx = with_engine(engine);
      return &amx;
    }
    case LinearEngine::avx512_bf16: {
      if (!bf16_support().dot) return nullptr;
      static const CpuKernels dot = with_engine(engine);
      return &dot;
    }
    case LinearEngine::fp32: break;
  }
  return nullptr;
}

const char* bf16_unavailable_reason() noexcept {
  const Bf16Support& s = bf16_support();
  return s.dot || s.amx ? "" : s.why_not_dot.c_str();
}

const CpuKernels& cpu_bf16() {
  const char* requested = std::getenv("SURROGATE_CPU_BF16");
  if (requested && *requested) {
    const std::string name(requested);
    for (LinearEngine engine : {LinearEngine::amx_bf16, LinearEngine::avx512_bf16}) {
      if (name != to_string(engine)) continue;
      if (const CpuKernels* table = cpu_bf16(engine)) return *table;
      const Bf16Support& s = bf16_support();
      throw std::runtime_error("SURROGATE_CPU_BF16=" + name + ": " +
                               (engine == LinearEngine::amx_bf16 ? s.why_not_amx : s.why_not_dot));
    }
    throw std::runtime_error("SURROGATE_CPU_BF16=" + name + ": expected amx or avx512bf16");
  }
  if (const CpuKernels* table = cpu_bf16(LinearEngine::amx_bf16)) return *table;
  if (const CpuKernels* table = cpu_bf16(LinearEngine::avx512_bf16)) return *table;
  throw std::runtime_error(std::string("bf16 on the CPU needs AVX512-BF16 (Zen 4, Sapphire Rapids and later): ") +
                           bf16_unavailable_reason());
}

}  // namespace surrogate::kernels
