// The kept forward workspaces of AttentionS2 and NeighborhoodAttentionS2 (both modes): a forward after
// others with larger and smaller batches, after release_workspace(), on an operator sharing another's
// workspace, and two forwards running at once on one operator all give bitwise what a fresh operator
// gives (buffers are reused without being cleared, so any read of a stale value would show); the memory
// is kept after a forward and freed by release_workspace().
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "attention_cases.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"

namespace st = sphere_test;
using namespace surrogate::sphere;

namespace {

template <class Config>
Config grid_config(int nlat_in, int nlon_in, int nlat_out, int nlon_out) {
  Config c;
  c.in_channels = 12;  // not a multiple of the padding: the padded-input copies are used
  c.num_heads = 2;
  c.out_channels = 10;  // likewise the output projection's scratch rows
  c.nlat_in = nlat_in;
  c.nlon_in = nlon_in;
  c.nlat_out = nlat_out;
  c.nlon_out = nlon_out;
  c.bias = true;
  c.use_qknorm = true;
  return c;
}

template <class Op>
std::vector<float> run(const Op& op, int batch, const std::vector<float>& q, const std::vector<float>& kv) {
  const auto& c = op.config();
  std::vector<float> out(static_cast<std::size_t>(batch) * static_cast<std::size_t>(c.nlat_out * c.nlon_out) *
                         static_cast<std::size_t>(c.out_channels));
  op.forward(batch, q.data(), kv.data(), kv.data(), out.data());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

template <class Op, class Config>
void check_reuse(const Config& c) {
  std::mt19937 rng(3);
  const auto w = st::random_weights(c, rng);
  const auto inputs = [&](int batch, unsigned seed) {
    std::mt19937 g(seed);
    return std::pair{st::random_vector(static_cast<std::size_t>(batch * c.nlat_out * c.nlon_out * c.in_channels), g, 1.0f),
                     st::random_vector(static_cast<std::size_t>(batch * c.nlat_in * c.nlon_in * c.in_channels), g, 1.0f)};
  };
  const auto [q1, kv1] = inputs(1, 11);
  const auto [q3, kv3] = inputs(3, 12);
  const std::vector<float> want1 = run(Op(c, w), 1, q1, kv1), want3 = run(Op(c, w), 3, q3, kv3);

  const Op op(c, w);
  EXPECT_EQ(op.workspace_bytes(), 0u);
  EXPECT_TRUE(same_bits(run(op, 1, q1, kv1), want1));
  const std::size_t kept_small = op.workspace_bytes();
  EXPECT_GT(kept_small, 0u) << "the workspace is kept after a forward";
  EXPECT_TRUE(same_bits(run(op, 3, q3, kv3), want3));  // grows
  EXPECT_GE(op.workspace_bytes(), kept_small);
  EXPECT_TRUE(same_bits(run(op, 1, q1, kv1), want1));  // a smaller forward in the larger buffers
  EXPECT_TRUE(same_bits(run(op, 3, q3, kv3), want3));
  op.release_workspace();
  EXPECT_EQ(op.workspace_bytes(), 0u);
  EXPECT_TRUE(same_bits(run(op, 1, q1, kv1), want1));

  // Two operators on one workspace, used one after the other.
  const Op other(c, w);
  other.share_workspace(op);
  EXPECT_TRUE(same_bits(run(other, 3, q3, kv3), want3));
  EXPECT_TRUE(same_bits(run(op, 1, q1, kv1), want1));
  EXPECT_GT(op.workspace_bytes(), 0u);
  EXPECT_EQ(op.workspace_bytes(), other.workspace_bytes());

  // Two forwards at once on one operator take two workspaces.
  std::vector<float> got1, got3;
  std::thread t([&] { got3 = run(op, 3, q3, kv3); });
  got1 = run(op, 1, q1, kv1);
  t.join();
  EXPECT_TRUE(same_bits(got1, want1));
  EXPECT_TRUE(same_bits(got3, want3));
}

TEST(AttentionWorkspace, AttentionS2ReusesAndReleases) {
  check_reuse<AttentionS2>(grid_config<AttentionS2Config>(12, 24, 6, 12));
}

TEST(AttentionWorkspace, NeighborhoodAttentionS2ReusesAndReleases) {
  check_reuse<NeighborhoodAttentionS2>(grid_config<NeighborhoodAttentionS2Config>(16, 32, 8, 16));
}

TEST(AttentionWorkspace, NeighborhoodUpsamplingReusesAndReleases) {
  check_reuse<NeighborhoodAttentionS2>(grid_config<NeighborhoodAttentionS2Config>(8, 16, 16, 32));
}

}  // namespace
