// The SphericalTransformer's kept forward scratch (share/docs/sphere.md, "Forward workspaces"): on every
// transformer case of tests/data/sphere/models, forwards on a model that has run other inputs and batch
// sizes before, after release_workspace(), and two forwards at once on one model give bitwise what a
// fresh model gives (the buffers are reused without being cleared, so a read of a stale value would
// show); the memory is kept after a forward and freed by release_workspace().
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "surrogate/model_file.hpp"
#include "surrogate/sphere/transformer.hpp"

using namespace surrogate;

namespace {

std::vector<std::filesystem::path> transformer_cases() {
  std::vector<std::filesystem::path> dirs;
  const std::filesystem::path root = std::string(SURROGATE_TEST_DATA_DIR) + "/sphere/models";
  for (const auto& e : std::filesystem::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if ((name.rfind("st_", 0) == 0 || name.rfind("zoo_", 0) == 0) && std::filesystem::exists(e.path() / "model.h5"))
      dirs.push_back(e.path());
  }
  return dirs;
}

std::vector<float> random_input(const sphere::TransformerConfig& c, int batch, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(batch) * static_cast<std::size_t>(c.nlat * c.nlon * c.in_chans));
  for (float& v : x) v = n(rng);
  return x;
}

std::vector<float> run(const sphere::SphericalTransformer& net, int batch, const std::vector<float>& in) {
  const auto& c = net.config();
  std::vector<float> out(static_cast<std::size_t>(batch) * static_cast<std::size_t>(c.nlat * c.nlon * c.out_chans));
  net.forward(batch, in.data(), out.data());
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST(TransformerWorkspace, KeptBuffersGiveTheFreshModelsBits) {
  const auto dirs = transformer_cases();
  ASSERT_GE(dirs.size(), 5u) << "transformer cases missing in tests/data/sphere/models";
  for (const auto& dir : dirs) {
    SCOPED_TRACE(dir.filename().string());
    const ModelFile file = ModelFile::read((dir / "model.h5").string());
    const sphere::SphericalTransformer kept(file);
    const auto& c = kept.config();
    const auto a = random_input(c, 1, 1), b = random_input(c, 2, 2);
    const std::vector<float> fresh_a = run(sphere::SphericalTransformer(file), 1, a);
    const std::vector<float> fresh_b = run(sphere::SphericalTransformer(file), 2, b);

    EXPECT_EQ(kept.workspace_bytes(), 0u);
    EXPECT_TRUE(same_bits(run(kept, 2, b), fresh_b));  // the buffers grow to two samples
    const std::size_t held = kept.workspace_bytes();
    EXPECT_GT(held, 0u);
    EXPECT_TRUE(same_bits(run(kept, 1, a), fresh_a));  // a smaller forward on buffers holding b's values
    EXPECT_EQ(kept.workspace_bytes(), held);           // nothing new taken
    kept.release_workspace();
    EXPECT_EQ(kept.workspace_bytes(), 0u);
    EXPECT_TRUE(same_bits(run(kept, 1, a), fresh_a));

    std::vector<float> first, second;  // two forwards at once: each takes its own buffers
    std::thread t1([&] { first = run(kept, 2, b); });
    std::thread t2([&] { second = run(kept, 1, a); });
    t1.join();
    t2.join();
    EXPECT_TRUE(same_bits(first, fresh_b));
    EXPECT_TRUE(same_bits(second, fresh_a));
  }
}
