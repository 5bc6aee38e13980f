// The ring-attention kernel (NeighborhoodAttentionS2's softmax, consecutive output longitudes as SIMD
// lanes) against a naive double-precision evaluation of its definition, for every instruction set this
// CPU runs. Tolerances are float32 rounding bounds (u = 2^-24), as in test_kernels.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "surrogate/kernels/cpu.hpp"

namespace k = surrogate::kernels;

namespace {

constexpr double u = 0x1p-24;

std::vector<k::Isa> available_isas() {
  std::vector<k::Isa> isas;
  for (k::Isa isa : {k::Isa::generic, k::Isa::avx2, k::Isa::avx512})
    if (k::cpu(isa)) isas.push_back(isa);
  return isas;
}

/// A ring of `ring` positions with `rows` transposed key/value rows, `entries` random neighbour entries
/// (a ring row, a position, a weight), queries for every position.
struct RingCase {
  int ek, ev, ring, rows, entries;
  float q_scale;
};

struct RingData {
  RingCase c;
  k::index_t ld_ring;
  std::vector<float> q, kt, weight;
  std::vector<float> vt;
  std::vector<k::index_t> key_base, value_base;
  std::vector<std::int32_t> ring_pos;
  std::vector<int> entry_row;

  RingData(const RingCase& rc, std::mt19937& gen) : c(rc), ld_ring(k::round_up(rc.ring + k::kRingPad, k::kPad)) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> row_of(0, c.rows - 1), pos_of(0, c.ring - 1);
    std::uniform_real_distribution<float> w_of(0.01f, 0.2f);
    q.resize(static_cast<std::size_t>(c.ring * c.ek));
    for (float& x : q) x = c.q_scale * normal(gen);
    kt.assign(static_cast<std::size_t>(c.rows * c.ek * ld_ring), 0.0f);
    vt.assign(static_cast<std::size_t>(c.rows * c.ev * ld_ring), 0.0f);
    for (int r = 0; r < c.rows; ++r) {
      for (int e = 0; e < c.ek; ++e)
        for (int j = 0; j < c.ring; ++j) kt[static_cast<std::size_t>((r * c.ek + e) * ld_ring + j)] = normal(gen);
      for (int e = 0; e < c.ev; ++e)
        for (int j = 0; j < c.ring; ++j) vt[static_cast<std::size_t>((r * c.ev + e) * ld_ring + j)] = normal(gen);
    }
    // The wrapped positions repeat the ring.
    for (int r = 0; r < c.rows * c.ek; ++r)
      for (k::index_t j = c.ring; j < ld_ring; ++j) kt[static_cast<std::size_t>(r * ld_ring + j)] = kt[static_cast<std::size_t>(r * ld_ring + j % c.ring)];
    for (int r = 0; r < c.rows * c.ev; ++r)
      for (k::index_t j = c.ring; j < ld_ring; ++j) vt[static_cast<std::size_t>(r * ld_ring + j)] = vt[static_cast<std::size_t>(r * ld_ring + j % c.ring)];
    for (int n = 0; n < c.entries; ++n) {
      const int r = row_of(gen);
      entry_row.push_back(r);
      key_base.push_back(static_cast<k::index_t>(r) * c.ek * ld_ring);
      value_base.push_back(static_cast<k::index_t>(r) * c.ev * ld_ring);
      ring_pos.push_back(pos_of(gen));
      weight.push_back(w_of(gen));
    }
  }

  /// Queries [first, first + count) into out (ring x ev).
  void run(const k::CpuKernels& kern, int first, int count, std::vector<float>& out) const {
    k::RingAttentionArgs a;
    a.ek = c.ek;
    a.ev = c.ev;
    a.q = q.data() + static_cast<std::size_t>(first * c.ek);
    a.ldq = c.ek;
    a.count = count;
    a.first = first;
    a.ring = c.ring;
    a.kt = kt.data();
    a.vt = vt.data();
    a.ld_ring = ld_ring;
    a.entries = c.entries;
    a.key_base = key_base.data();
    a.value_base = value_base.data();
    a.ring_pos = ring_pos.data();
    a.weight = weight.data();
    a.out = out.data() + static_cast<std::size_t>(first * c.ev);
    a.ldo = c.ev;
    kern.ring_attention(a);
  }
};

class RingAttentionTest : public ::testing::TestWithParam<k::Isa> {
 protected:
  const k::CpuKernels& kern() const { return *k::cpu(GetParam()); }
};

// Specialised widths (4, 8, 16, 32: one or two value groups) and generic ones (ek != ev, odd), rings that
// are not a multiple of the vector width, one chunk and several (more than 32 entries, so the
// per-query references grow and the sums are rescaled), large logits (q_scale 4: |logit| up to ~60); lists
// of one entry, 31 and 32 (the kernel's one-chunk path, float quotient) and 33 (two chunks).
const RingCase ring_cases[] = {
    {16, 16, 37, 3, 9, 1.0f},   {16, 16, 50, 4, 300, 4.0f}, {8, 8, 19, 2, 140, 2.0f}, {4, 4, 5, 2, 7, 1.0f},
    {32, 32, 33, 3, 260, 1.5f}, {5, 7, 23, 3, 200, 3.0f},   {3, 20, 70, 5, 130, 2.0f}, {16, 16, 3, 1, 20, 1.0f},
    {16, 16, 29, 3, 32, 2.0f},  {16, 16, 29, 3, 33, 2.0f},  {32, 32, 21, 2, 31, 1.0f}, {5, 7, 17, 2, 1, 1.0f},
};

TEST_P(RingAttentionTest, MatchesNaiveWeightedSoftmax) {
  std::mt19937 gen(5);
  for (const RingCase& rc : ring_cases) {
    const RingData d(rc, gen);
    std::vector<float> out(static_cast<std::size_t>(rc.ring * rc.ev), -7.0f);
    d.run(kern(), 0, rc.ring, out);
    for (int i = 0; i < rc.ring; ++i) {
      std::vector<double> l(static_cast<std::size_t>(rc.entries));
      double mx = -1e300, max_err = 0, vmax = 0;
      for (int n = 0; n < rc.entries; ++n) {
        const int pos = (d.ring_pos[static_cast<std::size_t>(n)] + i) % rc.ring;
        double dot = 0, mag = 0;
        for (int e = 0; e < rc.ek; ++e) {
          const double t = double(d.q[static_cast<std::size_t>(i * rc.ek + e)]) *
                           d.kt[static_cast<std::size_t>(d.key_base[static_cast<std::size_t>(n)] + e * d.ld_ring + pos)];
          dot += t, mag += std::abs(t);
        }
        l[static_cast<std::size_t>(n)] = dot;
        mx = std::max(mx, dot);
        max_err = std::max(max_err, (rc.ek + 2) * u * mag);  // the logit's float multiply-add chain, exp's 1 ulp
      }
      double s = 0;
      std::vector<double> expected(static_cast<std::size_t>(rc.ev), 0.0);
      for (int n = 0; n < rc.entries; ++n) {
        const int pos = (d.ring_pos[static_cast<std::size_t>(n)] + i) % rc.ring;
        const double p = std::exp(l[static_cast<std::size_t>(n)] - mx) * d.weight[static_cast<std::size_t>(n)];
        s += p;
        for (int e = 0; e < rc.ev; ++e) {
          const double v = d.vt[static_cast<std::size_t>(d.value_base[static_cast<std::size_t>(n)] + e * d.ld_ring + pos)];
          expected[static_cast<std::size_t>(e)] += p * v;
          vmax = std::max(vmax, std::abs(v));
        }
      }
      // Beyond the logits' and exp's error: each term rounded to float (u) and summed in float within
      // chunks of 32 entries (at most 31 roundings of a partial sum of positive terms: 31 u relative for
      // the sum, 31 u of sum_n term_n |v_n| <= sum * vmax for the weighted sum), i.e. 2 * 32 u * vmax in
      // the quotient.
      const double float_sums = 2 * 32 * u * vmax;
      for (int e = 0; e < rc.ev; ++e)
        ASSERT_NEAR(out[static_cast<std::size_t>(i * rc.ev + e)], expected[static_cast<std::size_t>(e)] / s,
                    (2 * max_err + 16 * u) * 2 * vmax + float_sums)
            << "ek " << rc.ek << " ev " << rc.ev << " ring " << rc.ring << " entries " << rc.entries << " query " << i
            << " channel " << e;
    }
  }
}

TEST_P(RingAttentionTest, QueryResultDoesNotDependOnItsBlockOrLane) {
  std::mt19937 gen(6);
  for (const RingCase& rc : ring_cases) {
    const RingData d(rc, gen);
    std::vector<float> whole(static_cast<std::size_t>(rc.ring * rc.ev)), single(whole.size()), split(whole.size());
    d.run(kern(), 0, rc.ring, whole);
    for (int i = 0; i < rc.ring; ++i) d.run(kern(), i, 1, single);
    // Blocks of 3 starting at 1, then the first query: every query in another lane.
    for (int i = 1; i < rc.ring; i += 3) d.run(kern(), i, std::min(3, rc.ring - i), split);
    d.run(kern(), 0, 1, split);
    for (std::size_t x = 0; x < whole.size(); ++x) {
      ASSERT_EQ(whole[x], single[x]) << "ek " << rc.ek << " ring " << rc.ring << " value " << x;
      ASSERT_EQ(whole[x], split[x]) << "ek " << rc.ek << " ring " << rc.ring << " value " << x;
    }
  }
}

TEST_P(RingAttentionTest, NoEntriesGiveNaN) {
  std::mt19937 gen(7);
  RingData d({16, 16, 20, 2, 0, 1.0f}, gen);
  std::vector<float> out(static_cast<std::size_t>(20 * 16), 0.0f);
  d.run(kern(), 0, 20, out);
  for (float x : out) ASSERT_TRUE(std::isnan(x));
}

INSTANTIATE_TEST_SUITE_P(Isa, RingAttentionTest, ::testing::ValuesIn(available_isas()),
                         [](const ::testing::TestParamInfo<k::Isa>& i) { return std::string(k::to_string(i.param)); });

}  // namespace
