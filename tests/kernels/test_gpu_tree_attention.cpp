// Sequoia's tree attention kernel through its launcher (surrogate/kernels/cuda_tree_attention.hpp), on the
// host backend (cuda.*) and a GPU (gpu.*, skipped without one), against its definition written out as plain
// loops (tree_attention_problem.hpp): bitwise on the host backend, whose exp is the CPU's; within 2 float
// ulps of max|out| on a GPU (its double exp may differ by an ulp). Head widths 3, 8, 37 (registers), 80 and
// 256 (the wide kernel, its sums in a scratch array).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "gpu_test.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_tree_attention.hpp"
#include "tree_attention_problem.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
using surrogate::kernels::index_t;
using surrogate::testing::to_device;
using surrogate::testing::to_host;
using Problem = surrogate::testing::TreeAttentionProblem;

class GpuTreeAttention : public ::testing::TestWithParam<std::tuple<int, int, float>> {};

TEST_P(GpuTreeAttention, IsTheCpuArithmetic) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const auto [heads, e, fixed] = GetParam();
  const Problem p(heads, e, fixed, static_cast<std::uint32_t>(heads * 100 + e));
  const index_t d = static_cast<index_t>(heads) * e;
  auto q = to_device(p.q), k = to_device(p.k), v = to_device(p.v), pq = to_device(p.pq), pk = to_device(p.pk);
  auto w1 = to_device(p.w1), b1 = to_device(p.b1), scale = to_device(p.scale), shift = to_device(p.shift);
  auto w3 = to_device(p.w3), b3 = to_device(p.b3);
  auto first = to_device(p.first), keys = to_device(p.keys);
  auto out = to_device(std::vector<float>(static_cast<std::size_t>(p.queries * d), 7.0f));
  cu::TreeAttentionArgs a;
  a.queries = p.queries;
  a.heads = heads;
  a.e = e;
  a.q = q.data();
  a.ldq = d;
  a.k = k.data();
  a.v = v.data();
  a.ldkv = d;
  a.query_positions = pq.data();
  a.key_positions = pk.data();
  a.first = first.data();
  a.keys = keys.data();
  a.pe_w1 = w1.data();
  a.pe_b1 = b1.data();
  a.bn_scale = scale.data();
  a.bn_shift = shift.data();
  a.pe_w3 = w3.data();
  a.pe_b3 = b3.data();
  a.tau = p.tau;
  a.fixed_denom = p.fixed;
  a.out = out.data();
  a.ldo = d;
  auto scratch = to_device(std::vector<double>(static_cast<std::size_t>(p.queries * d), 0.0));
  if (e > cu::kMaxTreeHeadDim) a.scratch = scratch.data();
  cu::tree_attention(a, nullptr);
  const std::vector<float> got = to_host(out.data(), static_cast<std::size_t>(p.queries * d)), want = p.cpu();
  float top = 0;
  for (const float x : want) top = std::max(top, std::fabs(x));
  const float tolerance = surrogate::testing::on_host_backend() ? 0.0f : 2 * top * 0x1p-24f;
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_LE(std::fabs(got[i] - want[i]), tolerance) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Widths, GpuTreeAttention,
                         ::testing::Values(std::make_tuple(4, 8, 0.0f), std::make_tuple(2, 3, 0.0f),
                                           std::make_tuple(1, 37, 0.0f), std::make_tuple(3, 8, 4.0f),
                                           std::make_tuple(2, 80, 0.0f), std::make_tuple(1, 256, 4.0f)));

TEST(GpuTreeAttentionArgs, AWideHeadWithoutScratchIsRefused) {
  SURROGATE_SKIP_WITHOUT_GPU();
  cu::TreeAttentionArgs a;
  a.queries = 1;
  a.heads = 1;
  a.e = cu::kMaxTreeHeadDim + 1;
  EXPECT_THROW(cu::tree_attention(a, nullptr), std::invalid_argument);
}

}  // namespace
