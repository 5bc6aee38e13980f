// The ball-tree attention kernels on the GPU (the library's launchers, device arrays): the checks of
// ball_attention_checks.hpp (naive double reference with a float32 error bound, the CPU kernel and BSA's
// CPU branches, determinism, launch independence) and block_selection_checks.hpp (the selection bitwise).
// Every test SKIPS when no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "ball_attention_checks.hpp"
#include "block_selection_checks.hpp"
#include "gpu_test.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
namespace checks = surrogate::testing::ball_attention_checks;
using surrogate::kernels::index_t;
using surrogate::testing::to_device;
using surrogate::testing::to_host;

template <class T>
cu::DeviceBuffer<T> upload(const T* host, index_t count) {
  return to_device(std::vector<T>(host, host + count));
}

/// Copies the args' host arrays to the device, launches, returns the output array.
struct GpuBackend {
  std::vector<float> ball(cu::BallAttentionLaunch a) {
    auto q = upload(a.q, a.rows * a.ld), k = upload(a.k, a.rows * a.ld), v = upload(a.v, a.rows * a.ld);
    auto positions = upload(a.positions, a.rows * a.ld_pos);
    auto sigma = upload(a.sigma ? a.sigma : a.q, a.sigma ? a.heads : 1);
    auto out = upload(a.out, a.rows * a.ldo);
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.positions = positions.data();
    a.sigma = a.sigma ? sigma.data() : nullptr;
    a.out = out.data();
    cu::ball_attention(a, nullptr);
    return to_host(out.data(), static_cast<std::size_t>(a.rows * a.ldo));
  }
  std::vector<float> coarse(cu::CoarseAttentionArgs a) {
    const index_t queries = a.samples * a.queries, keys = a.samples * a.keys;
    auto q = upload(a.q, queries * a.ldq), k = upload(a.k, keys * a.ldkv), v = upload(a.v, keys * a.ldkv);
    auto out = upload(a.out, queries * a.copies * a.ldo);
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.out = out.data();
    cu::coarse_attention(a, nullptr);
    return to_host(out.data(), static_cast<std::size_t>(queries * a.copies * a.ldo));
  }
  std::vector<float> selected(cu::SelectedBlockAttentionArgs a) {
    const index_t tokens = a.samples * a.n;
    // k and v: the tokens' own rows, or (first_row) the gathered rows up to the last block named.
    index_t kv_rows = tokens, ldkv = a.ld;
    if (a.first_row) {
      kv_rows = 0;
      for (index_t i = 0; i < a.samples * a.blocks; ++i) kv_rows = std::max<index_t>(kv_rows, a.first_row[i] + a.C);
      ldkv = a.ldkv;
    }
    auto q = upload(a.q, tokens * a.ld), k = upload(a.k, kv_rows * ldkv), v = upload(a.v, kv_rows * ldkv);
    auto sel = upload(a.sel, a.samples * a.heads * a.rows * a.S);
    auto first_row = upload(a.first_row ? a.first_row : &kv_rows, a.first_row ? a.samples * a.blocks : 1);
    auto out = upload(a.out, tokens * a.ldo);
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.sel = sel.data();
    a.first_row = a.first_row ? first_row.data() : nullptr;
    a.out = out.data();
    cu::selected_block_attention(a, nullptr);
    return to_host(out.data(), static_cast<std::size_t>(tokens * a.ldo));
  }
  std::vector<std::int32_t> selection(cu::BlockSelectionArgs a) {
    const index_t q_rows = a.samples * a.rows * a.group, count = a.samples * a.heads * a.rows * a.S;
    auto q = upload(a.q, (q_rows - 1) * a.ldq + a.heads * a.E), k = upload(a.k, a.samples * a.blocks * a.ldk);
    auto sel = upload(a.sel, count);
    a.q = q.data();
    a.k = k.data();
    a.sel = sel.data();
    cu::select_blocks(a, nullptr);
    return to_host(sel.data(), static_cast<std::size_t>(count));
  }
  std::pair<std::vector<float>, std::vector<std::int32_t>> coarse_select(cu::CoarseAttentionArgs c,
                                                                         cu::BlockSelectionArgs a) {
    const index_t count = a.samples * a.heads * a.rows * a.S, out_rows = a.samples * a.rows * c.copies;
    auto q = upload(a.q, (a.samples * a.rows - 1) * a.ldq + a.heads * a.E);
    auto k = upload(a.k, a.samples * a.blocks * a.ldk), v = upload(c.v, a.samples * a.blocks * c.ldkv);
    auto out = upload(c.out, out_rows * c.ldo);
    auto sel = upload(a.sel, count);
    c.q = a.q = q.data();
    c.k = a.k = k.data();
    c.v = v.data();
    c.out = out.data();
    a.sel = sel.data();
    cu::coarse_attention_and_select(c, a, nullptr);
    return {to_host(out.data(), static_cast<std::size_t>(out_rows * c.ldo)), to_host(sel.data(), static_cast<std::size_t>(count))};
  }
};

class GpuBallAttention : public ::testing::Test {
 protected:
  void SetUp() override { SURROGATE_SKIP_WITHOUT_GPU(); }
  GpuBackend backend;
};

TEST_F(GpuBallAttention, MatchesTheNaiveReferenceAndTheCpuKernel) { checks::check_ball_attention(backend); }
TEST_F(GpuBallAttention, CoarseAttentionMatchesTheNaiveReferenceAndTheCpuBranch) {
  checks::check_coarse_attention(backend);
}
TEST_F(GpuBallAttention, SelectedBlockAttentionMatchesTheNaiveReferenceAndTheCpuBranch) {
  checks::check_selected_block_attention(backend);
}
TEST_F(GpuBallAttention, BlockSelectionIsTheNaiveAndTheCpuSelection) { checks::check_block_selection(backend); }
TEST_F(GpuBallAttention, CoarseAttentionAndSelectionInOnePass) { checks::check_coarse_and_select(backend); }

}  // namespace
