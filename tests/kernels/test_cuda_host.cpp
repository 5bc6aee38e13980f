// Host-side parts of the CUDA backend, which run (and must pass) on machines without a GPU: the launch
// geometry of the latent kernels, the chunking of the points, the packing of Linear layers for the fused
// MLPs (FP32 and tensor-core fragments), and the errors a CUDA request gets when no device is usable. Tests that need a device skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <utility>
#include <vector>

#include "gpu_test.hpp"
#include "precision_emulation.hpp"
#include "random_models.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"
#include "surrogate/model.hpp"

namespace cu = surrogate::kernels::cuda;
namespace st = surrogate::testing;

namespace {

TEST(CudaHost, EncodeShapeCoversEveryLatentOnceWithinTheBlockLimits) {
  for (int M = 1; M <= 2000; ++M) {
    const cu::EncodeShape s = cu::encode_shape(M);
    ASSERT_GE(s.groups, 1) << M;
    ASSERT_LE(s.threads, 256) << M;
    ASSERT_EQ(s.threads, s.latents * s.slices) << M;
    ASSERT_GE(s.groups * s.latents, M) << "latents left out, M = " << M;
    ASSERT_LT((s.groups - 1) * s.latents, M) << "an empty latent group, M = " << M;
    ASSERT_GE(s.slices, 1) << M;
  }
  // small M fills the block with point slices; M = 256 needs no slices
  EXPECT_EQ(cu::encode_shape(64).slices, 4);
  EXPECT_EQ(cu::encode_shape(256).slices, 1);
  EXPECT_EQ(cu::encode_shape(256).groups, 1);
  EXPECT_EQ(cu::encode_shape(300).groups, 2);
}

TEST(CudaHost, ChunksCoverTheRowsOfASegmentExactly) {
  for (int chunk_rows : {1, 7, 256}) {
    for (std::int64_t n : {0, 1, 6, 7, 8, 1000}) {
      std::vector<cu::LatentChunk> chunks = {{-5, 3, 9}};  // appended to, never cleared
      cu::append_chunks(100, 100 + n, 2, chunk_rows, chunks);
      ASSERT_EQ(chunks.size(), 1 + static_cast<std::size_t>((n + chunk_rows - 1) / chunk_rows));
      std::int64_t next = 100;
      for (std::size_t i = 1; i < chunks.size(); ++i) {
        EXPECT_EQ(chunks[i].begin, next);
        EXPECT_GE(chunks[i].rows, 1);
        EXPECT_LE(chunks[i].rows, chunk_rows);
        EXPECT_EQ(chunks[i].segment, 2);
        next += chunks[i].rows;
      }
      EXPECT_EQ(next, 100 + n);
    }
  }
  std::vector<cu::LatentChunk> chunks;
  EXPECT_THROW(cu::append_chunks(0, 10, 0, 0, chunks), std::invalid_argument);
}

TEST(CudaHost, LinearLayersArePackedTransposedAndZeroPadded) {
  std::mt19937 gen(3);
  std::normal_distribution<float> dist;
  for (auto [out, in] : {std::pair{1, 1}, {3, 5}, {64, 64}, {65, 2}, {130, 255}}) {
    std::vector<float> w(static_cast<std::size_t>(out) * in), b(static_cast<std::size_t>(out));
    for (auto& x : w) x = dist(gen);
    for (auto& x : b) x = dist(gen);
    std::vector<float> wt = {42.0f}, bias = {43.0f};  // appended after what is there
    cu::pack_mlp_linear(w.data(), b.data(), out, in, wt, bias);
    const int ld = cu::mlp_weight_ld(out);
    ASSERT_EQ(ld % 64, 0);
    ASSERT_GE(ld, out);
    const int k4 = (in + 3) / 4 * 4;
    ASSERT_EQ(wt.size(), 1 + static_cast<std::size_t>(k4) * ld);
    ASSERT_EQ(bias.size(), 1 + static_cast<std::size_t>(ld));
    EXPECT_EQ(wt[0], 42.0f);
    EXPECT_EQ(bias[0], 43.0f);
    for (int k = 0; k < k4; ++k)
      for (int o = 0; o < ld; ++o) {
        const float expected = (k < in && o < out) ? w[static_cast<std::size_t>(o) * in + k] : 0.0f;
        ASSERT_EQ(wt[1 + static_cast<std::size_t>(k) * ld + o], expected) << "k " << k << " o " << o;
      }
    for (int o = 0; o < ld; ++o) ASSERT_EQ(bias[1 + static_cast<std::size_t>(o)], o < out ? b[o] : 0.0f);
  }
}

// The tensor-core MLP's shared memory: within the 227 KiB a block may use on sm_90 for every supported
// width, and the documented sizes (cuda.md) at widths 64 and 256: 4 warps x 1 tile x 32 rows, or 2 warps x
// 2 tiles x 16 rows, of lda floats.
TEST(CudaHost, TensorCoreMlpSharedMemoryFitsAnSm90Block) {
  constexpr std::size_t kSm90Limit = 227 * 1024;
  for (auto p : {cu::MlpPrecision::tf32, cu::MlpPrecision::bf16})
    for (int w = 1; w <= cu::kMaxMlpWidth; ++w) ASSERT_LE(cu::mlp_tensor_core_smem(p, w), kSm90Limit) << "width " << w;
  // 72 KiB up to width 64: 4 warps, the tile they compute on in place and the next rows' (three blocks an SM)
  EXPECT_EQ(cu::mlp_tensor_core_smem(cu::MlpPrecision::bf16, 64), 4u * 2 * 32 * 72 * 4);
  EXPECT_LE(3 * (cu::mlp_tensor_core_smem(cu::MlpPrecision::bf16, 64) + 1024), 228u * 1024);
  EXPECT_EQ(cu::mlp_tensor_core_smem(cu::MlpPrecision::bf16, 256), 2u * 2 * 16 * 264 * 4);  // 66 KiB, 2 warps
  EXPECT_EQ(cu::mlp_tensor_core_smem(cu::MlpPrecision::tf32, 256), 2u * 2 * 16 * 260 * 4);  // 65 KiB
}

// The FP32 MLP's streamed form (three tiles of 64 rows, two weight stages) up to width 64, FLARE's: 83 KiB
// at 64, two blocks an SM; wider MLPs staged.
TEST(CudaHost, Fp32MlpStreamedFormTakesWidthsUpTo64TwoBlocksAnSm) {
  EXPECT_EQ(cu::mlp_streamed_smem(64), (3u * 64 * 68 + 2u * 64 * 64) * 4);
  EXPECT_EQ(cu::mlp_streamed_smem(2), (3u * 64 * 8 + 2u * 4 * 64) * 4);
  EXPECT_EQ(cu::mlp_streamed_smem(65), 0u);
  for (int w = 1; w <= 64; ++w) ASSERT_LE(2 * (cu::mlp_streamed_smem(w) + 1024), 228u * 1024) << "width " << w;
}

/// W (out x in) element (n, k) as the lane of pack_mlp_fragments' tile holds it, read back through the
/// PTX ISA's B fragment layout (kernels/cuda/host/mma.hpp): bf16 b[0] = B[2t..2t+1][g], b[1] =
/// B[2t+8..2t+9][g]; tf32 b[0] = B[t][g], b[1] = B[t+4][g], B = W^T, lane = 4 g + t.
float fragment_element(const std::vector<std::uint32_t>& words, cu::MlpPrecision p, int in, int n, int k) {
  const bool bf16 = p == cu::MlpPrecision::bf16;
  const int kK = bf16 ? 16 : 8, k_tiles = (in + kK - 1) / kK, kk = k % kK;
  const int t = bf16 ? (kk % 8) / 2 : kk % 4, reg = bf16 ? kk / 8 : kk / 4;
  const std::size_t lane = static_cast<std::size_t>(4 * (n % 8) + t);
  const std::uint32_t w = words[((static_cast<std::size_t>(n / 8) * k_tiles + k / kK) * 32 + lane) * 2 + reg];
  const std::uint32_t bits = bf16 ? (kk % 2 ? w & 0xffff0000u : w << 16) : w;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// The tensor-core MLP's weights: every element of W where the fragment layout puts it, rounded as the
// precision rounds (tests/support/precision_emulation), and the padding zero.
TEST(CudaHost, TensorCoreFragmentsHoldTheRoundedWeightsInTheLanesLayout) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  for (auto [p, round] : {std::pair{cu::MlpPrecision::bf16, &surrogate::testing::round_to_bf16},
                          std::pair{cu::MlpPrecision::tf32, &surrogate::testing::round_to_tf32}})
    for (auto [out, in] : {std::pair{1, 1}, {8, 16}, {17, 33}, {64, 64}, {130, 7}}) {
      std::vector<float> w(static_cast<std::size_t>(out) * in);
      for (float& v : w) v = dist(gen);
      std::vector<std::uint32_t> words{0xdeadbeefu};  // appended after what is there
      cu::pack_mlp_fragments(w.data(), out, in, p, words);
      ASSERT_EQ(words.size(), 1 + cu::mlp_fragment_words(p, out, in));
      ASSERT_EQ(words[0], 0xdeadbeefu);
      const std::vector<std::uint32_t> packed(words.begin() + 1, words.end());
      const int kK = p == cu::MlpPrecision::bf16 ? 16 : 8;
      for (int n = 0; n < (out + 7) / 8 * 8; ++n)
        for (int k = 0; k < (in + kK - 1) / kK * kK; ++k) {
          const float expected = n < out && k < in ? round(w[static_cast<std::size_t>(n) * in + k]) : 0.0f;
          ASSERT_EQ(fragment_element(packed, p, in, n, k), expected) << out << "x" << in << " n " << n << " k " << k;
        }
    }
  EXPECT_THROW((void)cu::mlp_fragment_words(cu::MlpPrecision::fp32, 8, 8), std::invalid_argument);
}

TEST(CudaHost, DeviceCountGivesAReasonWhenThereIsNoDevice) {
  std::string why;
  const int count = cu::device_count(&why);
  EXPECT_GE(count, 0);
  if (count == 0) {
    // (without a usable driver the runtime's initialisation error is sticky: nothing can clear it)
    EXPECT_FALSE(why.empty());
    EXPECT_NE(why.find("cudaGetDeviceCount"), std::string::npos) << why;
  } else {
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "device_count left an error behind";
  }
}

TEST(CudaHost, ACudaForwardWithoutADeviceIsRefusedClearly) {
  std::string why;
  if (cu::device_count(&why) > 0) GTEST_SKIP() << "a CUDA device is visible: covered by gpu.FlareGpu.*";
  const auto model = surrogate::make_model(st::random_flare_file(st::elasticity_config(), 5));
  surrogate::SelfComm comm;
  std::vector<float> in(20, 0.5f), out(10);
  const auto layout = surrogate::SampleLayout::build(comm, 10, nullptr);
  surrogate::RunOptions o;
  o.cuda_device = 0;
  try {
    model->predict(comm, layout, in.data(), 2, out.data(), 1, o);
    FAIL() << "a CUDA forward ran without a device";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA device 0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no CUDA device is visible"), std::string::npos) << e.what();
  }
  // the CPU path of the same model still works
  o.cuda_device = -1;
  EXPECT_NO_THROW(model->predict(comm, layout, in.data(), 2, out.data(), 1, o));
}

TEST(CudaHost, BallAttentionLaunchersRefuseInvalidSizesBeforeAnyDeviceCall) {
  // The checks run on the host before anything is enqueued: they pass with or without a device.
  const float fake = 0.0f;  // never dereferenced: every call below throws (or returns) before a launch
  cu::BallAttentionLaunch b;
  b.heads = 2;
  b.E = 8;
  b.ball = 4;
  EXPECT_NO_THROW(cu::ball_attention(b, nullptr)) << "zero rows: nothing to do";
  b.rows = 10;  // not a multiple of the ball size
  EXPECT_THROW(cu::ball_attention(b, nullptr), std::invalid_argument);
  b.rows = 12;
  b.E = 65;
  EXPECT_THROW(cu::ball_attention(b, nullptr), std::invalid_argument);
  b.E = 8;
  b.heads = 0;
  EXPECT_THROW(cu::ball_attention(b, nullptr), std::invalid_argument);
  b.heads = 2;
  b.sigma = &fake;  // the bias without positions, or with an unsupported dimension
  b.dim = 3;
  EXPECT_THROW(cu::ball_attention(b, nullptr), std::invalid_argument);
  b.positions = &fake;
  b.dim = cu::kMaxBallPositionDim + 1;
  EXPECT_THROW(cu::ball_attention(b, nullptr), std::invalid_argument);

  cu::CoarseAttentionArgs c;
  c.samples = 1;
  c.heads = 1;
  c.E = 4;
  c.queries = 3;
  c.keys = 0;
  EXPECT_THROW(cu::coarse_attention(c, nullptr), std::invalid_argument);
  c.keys = 2;
  c.copies = 0;
  EXPECT_THROW(cu::coarse_attention(c, nullptr), std::invalid_argument);

  cu::SelectedBlockAttentionArgs f;
  f.samples = 1;
  f.n = 32;
  f.heads = 1;
  f.E = 4;
  f.C = 4;
  f.S = 2;
  f.tokens_per_row = 4;
  f.rows = 7;  // 7 * 4 != 32
  EXPECT_THROW(cu::selected_block_attention(f, nullptr), std::invalid_argument);
  f.rows = 8;
  f.S = 9;  // 9 * 4 > 32
  EXPECT_THROW(cu::selected_block_attention(f, nullptr), std::invalid_argument);

  cu::BlockSelectionArgs sel;
  sel.samples = 1;
  sel.heads = 1;
  sel.E = 4;
  sel.q = sel.k = &fake;
  sel.ldq = sel.ldk = 4;
  sel.rows = 8;
  sel.blocks = 8;
  sel.S = 9;  // more than the blocks
  EXPECT_THROW(cu::select_blocks(sel, nullptr), std::invalid_argument);
  sel.S = 0;
  EXPECT_THROW(cu::select_blocks(sel, nullptr), std::invalid_argument);
  sel.S = 2;
  sel.ball_tokens = 16;  // a mask without its blocks per ball
  EXPECT_THROW(cu::select_blocks(sel, nullptr), std::invalid_argument);
  sel.ball_tokens = 0;
  sel.group = 0;
  EXPECT_THROW(cu::select_blocks(sel, nullptr), std::invalid_argument);
  sel.group = 1;
  cu::CoarseAttentionArgs both;  // the coarse branch must share the selection's queries, keys and sizes
  both.samples = 1;
  both.heads = 1;
  both.E = 4;
  both.q = both.k = &fake;
  both.ldq = both.ldkv = 4;
  both.queries = both.keys = 8;
  both.copies = 4;
  both.ldo = 4;
  both.queries = 7;
  EXPECT_THROW(cu::coarse_attention_and_select(both, sel, nullptr), std::invalid_argument);
  both.queries = 8;
  sel.S = 33;  // beyond the one-pass kernel's lists
  sel.blocks = 64;
  both.keys = 64;
  EXPECT_THROW(cu::coarse_attention_and_select(both, sel, nullptr), std::invalid_argument);
}

}  // namespace
