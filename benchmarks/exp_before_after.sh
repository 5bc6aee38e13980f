#!/usr/bin/env bash
# The library's vectorised exp (kernels/src/cpu/simd.hpp) of an earlier commit and of the working tree,
# compiled side by side into one probe with the flags of isa_avx2.cpp / isa_avx512.cpp; rates per second
# of thread CPU time (best of 5 x 20,000 calls on 4,096 floats, after 1 s of warm-up). benchmarks/RESULTS.md,
# issue 21 part 2.
#   benchmarks/exp_before_after.sh [REV]        (default ff88451, the commit before the faster exp)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rev=${1:-ff88451}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/before" "$work/after"
git -C "$root" show "$rev:kernels/src/cpu/simd.hpp" > "$work/before/simd.hpp"
cp "$root/kernels/src/cpu/simd.hpp" "$work/after/simd.hpp"
avx2=(-mavx2 -mfma)
avx512=(-mavx512f -mavx512dq -mavx512vl -mavx512bw -mfma -mavx2)
for version in before after; do
  for isa in avx2 avx512; do
    cat > "$work/${version}_$isa.cpp" <<EOF
#define SURROGATE_ISA_NS ${version}_$isa
#include "$version/simd.hpp"
namespace surrogate::kernels::${version}_$isa {
void exp_map(const float* x, float* y, long n) {
  for (long i = 0; i + simd::W <= n; i += simd::W) simd::store(y + i, simd::exp(simd::load(x + i)));
}
void exp_nonpositive_map(const float* x, float* y, long n) {
  for (long i = 0; i + simd::W <= n; i += simd::W) simd::store(y + i, simd::exp_nonpositive(simd::load(x + i)));
}
}  // namespace surrogate::kernels::${version}_$isa
EOF
    flags="${isa}[@]"
    g++ -O3 -std=c++20 -ffp-contract=fast -Wno-psabi "${!flags}" -c "$work/${version}_$isa.cpp" -o "$work/${version}_$isa.o"
  done
done
cat > "$work/main.cpp" <<'EOF'
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <vector>
#define DECLARE(ns)                                  \
  namespace surrogate::kernels::ns {                 \
  void exp_map(const float*, float*, long);          \
  void exp_nonpositive_map(const float*, float*, long); \
  }
DECLARE(before_avx2) DECLARE(after_avx2) DECLARE(before_avx512) DECLARE(after_avx512)
namespace k = surrogate::kernels;
using Map = void (*)(const float*, float*, long);
double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}
double rate(Map f, const std::vector<float>& in) {  // 10^9 exp/s, best of 5
  // One buffer, the output 256 bytes below the input modulo 4 KiB: a store never shares its address's low
  // 12 bits with a later load (4K aliasing), as machine_limits lays them out.
  std::vector<float> buffer(2 * in.size() + 128);
  float* y = buffer.data() + (16 - reinterpret_cast<std::uintptr_t>(buffer.data()) / 4 % 16) % 16;
  float* x = y + in.size() + 64;
  std::copy(in.begin(), in.end(), x);
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    const double t0 = cpu_seconds();
    for (int r = 0; r < 20000; ++r) {
      f(x, y, static_cast<long>(in.size()));
      asm volatile("" ::"r"(y) : "memory");
    }
    const double g = in.size() * 20000.0 / (cpu_seconds() - t0) * 1e-9;
    best = g > best ? g : best;
  }
  return best;
}
int main() {
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  std::vector<float> x(4096), nonpositive(4096);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = -10.0f + 20.0f * static_cast<float>(i) / 4096.0f;  // the bench_flare --machine probe
    nonpositive[i] = -20.0f * static_cast<float>(i) / 4096.0f;
  }
  struct Row { const char* name; Map before, after; const std::vector<float>* in; bool needs_avx512; };
  const Row rows[] = {
      {"avx2   exp [-10, 10]", k::before_avx2::exp_map, k::after_avx2::exp_map, &x, false},
      {"avx2   exp_nonpositive [-20, 0]", k::before_avx2::exp_nonpositive_map, k::after_avx2::exp_nonpositive_map, &nonpositive, false},
      {"avx512 exp [-10, 10]", k::before_avx512::exp_map, k::after_avx512::exp_map, &x, true},
      {"avx512 exp_nonpositive [-20, 0]", k::before_avx512::exp_nonpositive_map, k::after_avx512::exp_nonpositive_map, &nonpositive, true}};
  std::printf("%-32s %8s %8s  (Gexp/s, one core)\n", "", "before", "after");
  for (const double start = cpu_seconds(); cpu_seconds() - start < 1.0;) rate(rows[0].before, x);  // warm-up
  for (const Row& r : rows) {
    if (r.needs_avx512 && !avx512) continue;
    const double b = rate(r.before, *r.in), a = rate(r.after, *r.in);
    std::printf("%-32s %8.2f %8.2f  %.2fx\n", r.name, b, a, a / b);
  }
}
EOF
g++ -O3 -std=c++20 "$work/main.cpp" "$work"/*.o -o "$work/exp_probe"
echo "exp of $rev (before) and of the working tree (after), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
"$work/exp_probe"
