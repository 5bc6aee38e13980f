// Sequoia's tree attention CPU kernel (CpuKernels::tree_attention) against its definition written out as
// plain loops (tree_attention_problem.hpp), bitwise, on every instruction set this CPU runs: head widths
// below, at and above the vector widths and the four partial sums (3, 5, 8, 32, 37, 80, 256), one to eight
// heads, the count-dependent and the fixed denominator, the queries in one call and split over calls
// (offset first, query and output pointers), row strides wider than the heads, and a query whose weighted
// values cancel (tree_attention_problem.hpp), where a fused multiply-add would show.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "surrogate/kernels/cpu.hpp"
#include "surrogate/kernels/tree_attention.hpp"
#include "tree_attention_problem.hpp"

namespace k = surrogate::kernels;
using Problem = surrogate::testing::TreeAttentionProblem;

namespace {

/// The kernel's output for p, rows `ld` wide (p's arrays copied into strided ones), queries [0, split) in
/// one call and [split, queries) in another.
std::vector<float> run(const k::CpuKernels& kern, const Problem& p, std::int64_t ld, std::int64_t split) {
  const std::int64_t d = static_cast<std::int64_t>(p.heads) * p.e;
  auto strided = [&](const std::vector<float>& x, std::int64_t rows) {
    std::vector<float> y(static_cast<std::size_t>(rows * ld), -3.0f);
    for (std::int64_t r = 0; r < rows; ++r) std::memcpy(&y[static_cast<std::size_t>(r * ld)], &x[static_cast<std::size_t>(r * d)], sizeof(float) * static_cast<std::size_t>(d));
    return y;
  };
  const std::vector<float> q = strided(p.q, p.queries), kr = strided(p.k, p.key_rows), v = strided(p.v, p.key_rows);
  std::vector<float> out(static_cast<std::size_t>(p.queries * ld), 7.0f);
  std::int64_t most = 0;
  for (std::size_t a = 0; a + 1 < p.first.size(); ++a) most = std::max(most, p.first[a + 1] - p.first[a]);
  std::vector<double> scratch(static_cast<std::size_t>(k::tree_attention_scratch(p.heads, p.e, most)));
  for (const auto& [a0, a1] : {std::pair{std::int64_t{0}, split}, std::pair{split, p.queries}}) {
    if (a1 == a0) continue;
    k::TreeAttentionArgs a;
    a.queries = a1 - a0;
    a.heads = p.heads;
    a.e = p.e;
    a.q = q.data() + a0 * ld;
    a.ldq = ld;
    a.k = kr.data();
    a.v = v.data();
    a.ldkv = ld;
    a.query_positions = p.pq.data() + a0 * 3;
    a.key_positions = p.pk.data();
    a.first = p.first.data() + a0;
    a.keys = p.keys.data();
    a.pe_w1 = p.w1.data();
    a.pe_b1 = p.b1.data();
    a.bn_scale = p.scale.data();
    a.bn_shift = p.shift.data();
    a.pe_w3 = p.w3.data();
    a.pe_b3 = p.b3.data();
    a.tau = p.tau;
    a.fixed_denom = p.fixed;
    a.out = out.data() + a0 * ld;
    a.ldo = ld;
    a.scratch = scratch.data();
    kern.tree_attention(a);
  }
  return out;
}

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

class TreeAttentionKernel : public ::testing::TestWithParam<std::tuple<int, int, float>> {};

TEST_P(TreeAttentionKernel, IsTheDefinitionBitwiseOnEveryInstructionSet) {
  const auto [heads, e, fixed] = GetParam();
  const Problem p(heads, e, fixed, static_cast<std::uint32_t>(heads * 100 + e), true);
  const std::int64_t d = static_cast<std::int64_t>(heads) * e;
  const std::vector<float> want = p.cpu();
  for (const k::Isa isa : {k::Isa::generic, k::Isa::avx2, k::Isa::avx512}) {
    const k::CpuKernels* kern = k::cpu(isa);
    if (!kern) continue;
    for (const auto& [ld, split] : {std::pair{d, p.queries}, std::pair{d + 5, std::int64_t{3}}}) {
      const std::vector<float> got = run(*kern, p, ld, split);
      for (std::int64_t a = 0; a < p.queries; ++a) {
        for (std::int64_t c = 0; c < d; ++c)
          ASSERT_EQ(bits(got[static_cast<std::size_t>(a * ld + c)]), bits(want[static_cast<std::size_t>(a * d + c)]))
              << "isa " << static_cast<int>(isa) << ", ld " << ld << ", query " << a << ", channel " << c;
        for (std::int64_t c = d; c < ld; ++c)  // the stride's padding is not written
          ASSERT_EQ(got[static_cast<std::size_t>(a * ld + c)], 7.0f) << "query " << a << ", column " << c;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Widths, TreeAttentionKernel,
                         ::testing::Values(std::make_tuple(4, 8, 0.0f), std::make_tuple(2, 3, 0.0f),
                                           std::make_tuple(3, 5, 0.0f), std::make_tuple(1, 37, 0.0f),
                                           std::make_tuple(3, 8, 4.0f), std::make_tuple(4, 32, 0.0f),
                                           std::make_tuple(8, 16, 0.0f), std::make_tuple(2, 80, 0.0f),
                                           std::make_tuple(1, 256, 4.0f)));

}  // namespace
