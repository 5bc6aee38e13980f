// The ball distance tile kernel (CpuKernels::ball_distances) against its definition, for every
// instruction set this CPU runs: bitwise equal to sqrt(sum_c (p_ic - p_jc)^2) with each square and each
// partial sum rounded to float in order (evaluated here in double, where the product of two floats and the
// sum of two floats are exact before the single rounding to float, so no compiler contraction can change
// the reference) and the square root correctly rounded. Ball sizes below, at and above the vector widths
// and the 64-column blocks, dimensions 1 to 10 (the specialised 2 and 3, the general vector path, the
// scalar path above 8), a leading dimension larger than m (nothing outside the tile written), and
// coordinates spanning many binades (so a fused multiply-add would show).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "surrogate/kernels/cpu.hpp"

namespace k = surrogate::kernels;

namespace {

std::vector<k::Isa> available_isas() {
  std::vector<k::Isa> isas;
  for (k::Isa isa : {k::Isa::generic, k::Isa::avx2, k::Isa::avx512})
    if (k::cpu(isa)) isas.push_back(isa);
  return isas;
}

float round_to_float(double x) { return static_cast<float>(x); }

/// The definition, each float operation done exactly in double and rounded once.
float reference_distance(const float* p, const float* q, int dim) {
  float sum = 0.0f;
  for (int c = 0; c < dim; ++c) {
    const float diff = round_to_float(static_cast<double>(p[c]) - static_cast<double>(q[c]));
    const float square = round_to_float(static_cast<double>(diff) * static_cast<double>(diff));
    sum = round_to_float(static_cast<double>(sum) + static_cast<double>(square));
  }
  return round_to_float(std::sqrt(static_cast<double>(sum)));  // double then float: correctly rounded
}

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

class BallDistanceTest : public ::testing::TestWithParam<k::Isa> {
 protected:
  const k::CpuKernels& kern() const { return *k::cpu(GetParam()); }
};

TEST_P(BallDistanceTest, TileIsBitwiseTheDefinition) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> binade(-20, 20);
  const float sentinel = -7.5f;
  for (int dim = 1; dim <= 10; ++dim)
    for (int m : {1, 3, 4, 8, 15, 16, 17, 63, 64, 65, 130, 256}) {
      std::vector<float> pos(static_cast<std::size_t>(m * dim));
      for (float& v : pos) v = std::ldexp(unit(gen), binade(gen) / 4);  // magnitudes 2^-5 .. 2^5
      if (m > 2) pos[static_cast<std::size_t>(dim)] = pos[0];             // a repeated coordinate: distance terms 0
      const k::index_t ld = m + 3;
      std::vector<float> dist(static_cast<std::size_t>(m * ld), sentinel);
      k::BallDistanceArgs a;
      a.pos = pos.data();
      a.m = m;
      a.dim = dim;
      a.dist = dist.data();
      a.ld_dist = ld;
      kern().ball_distances(a);
      int mismatches = 0;
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < ld; ++j) {
          const float got = dist[static_cast<std::size_t>(i * ld + j)];
          const float want = j < m ? reference_distance(&pos[static_cast<std::size_t>(i * dim)],
                                                        &pos[static_cast<std::size_t>(j * dim)], dim)
                                   : sentinel;
          if (bits(got) != bits(want) && ++mismatches <= 3)
            ADD_FAILURE() << "dim " << dim << " m " << m << " (" << i << ", " << j << "): " << got << " != " << want;
        }
      EXPECT_EQ(mismatches, 0) << "dim " << dim << " m " << m;
    }
}

INSTANTIATE_TEST_SUITE_P(Isa, BallDistanceTest, ::testing::ValuesIn(available_isas()),
                         [](const ::testing::TestParamInfo<k::Isa>& i) { return std::string(k::to_string(i.param)); });

}  // namespace
