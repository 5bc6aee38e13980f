// The block transposition kernel (CpuKernels::transpose: d[c*ldd + r] = s[r*lds + c], float or double
// destination) against the plain definition, for every instruction set this CPU runs: bitwise equal
// (a transposition moves values, float -> double is exact), over block shapes below, at and above the
// 16 x 16 register tiles and the 4 x 4 ones, with leading dimensions larger than the block, and nothing
// outside the block written.
#include <gtest/gtest.h>

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

class TransposeTest : public ::testing::TestWithParam<k::Isa> {
 protected:
  const k::CpuKernels& kern() const { return *k::cpu(GetParam()); }
};

template <class T>
void check_shapes(const k::CpuKernels& kern) {
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> value(-3.0f, 3.0f);
  const T sentinel = static_cast<T>(-12345.0);
  for (int rows : {1, 3, 4, 7, 15, 16, 17, 33, 64, 130})
    for (int cols : {1, 2, 4, 5, 8, 15, 16, 17, 32, 40}) {
      const k::index_t lds = cols + 3, ldd = rows + 5;
      std::vector<float> s(static_cast<std::size_t>(rows * lds));
      for (float& x : s) x = value(gen);
      // The destination with a margin around the block (rows .. ldd - 1 of each row, and a row past cols).
      std::vector<T> d(static_cast<std::size_t>((cols + 1) * ldd), sentinel);
      k::TransposeArgs a;
      a.s = s.data();
      a.lds = lds;
      if constexpr (sizeof(T) == sizeof(double))
        a.d_double = reinterpret_cast<double*>(d.data());
      else
        a.d = reinterpret_cast<float*>(d.data());
      a.ldd = ldd;
      a.rows = rows;
      a.cols = cols;
      kern.transpose(a);
      for (int c = 0; c <= cols; ++c)
        for (k::index_t r = 0; r < ldd; ++r) {
          const T got = d[static_cast<std::size_t>(c * ldd + r)];
          const T want = c < cols && r < rows ? static_cast<T>(s[static_cast<std::size_t>(r * lds + c)]) : sentinel;
          ASSERT_EQ(std::memcmp(&got, &want, sizeof(T)), 0)
              << "rows " << rows << " cols " << cols << ": d[" << c << " * ldd + " << r << "] = " << got << ", expected "
              << want;
        }
    }
}

TEST_P(TransposeTest, FloatDestinationIsTheTransposeAndNothingElse) { check_shapes<float>(kern()); }

TEST_P(TransposeTest, DoubleDestinationIsTheExactTransposeAndNothingElse) { check_shapes<double>(kern()); }

INSTANTIATE_TEST_SUITE_P(Isa, TransposeTest, ::testing::ValuesIn(available_isas()),
                         [](const ::testing::TestParamInfo<k::Isa>& i) { return std::string(k::to_string(i.param)); });

}  // namespace
