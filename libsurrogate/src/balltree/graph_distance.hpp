// The squared distance of the kNN / radius graphs and the rounding margins that bound it, shared by the
// one-process graphs (graph.cpp) and the distributed halo construction (graph_distributed.cpp) so both
// compute every distance with the same arithmetic. Every file including this is compiled with
// -ffp-contract=off (libsurrogate/CMakeLists.txt). Internal to libsurrogate.
#pragma once

#include <limits>

namespace surrogate::graph::detail {

/// The squared distance as nanoflann's L2_Simple_Adaptor computes it in Real: sum_c (a_c - b_c)^2
/// accumulated from c = 0 in Real, no fused multiply-add.
template <class Real>
inline Real squared_distance(const Real* a, const Real* b, int dim) {
  Real sum = 0;
  for (int c = 0; c < dim; ++c) {
    const Real d = a[c] - b[c];
    sum += d * d;
  }
  return sum;
}

/// The rounded squared_distance() of two points is at least exact * (1 - relative) - absolute, where
/// `exact` is the squared distance in real arithmetic: a few units of relative rounding per term and
/// sum, and a few subnormal steps when the squares underflow (generous on purpose).
template <class Real>
struct RoundingMargin {
  double relative, absolute;
  explicit RoundingMargin(int dim)
      : relative((4.0 * dim + 8.0) * std::numeric_limits<Real>::epsilon()),
        absolute(4.0 * dim * static_cast<double>(std::numeric_limits<Real>::denorm_min())) {}
  /// A lower bound of the rounded squared distance of points whose exact squared distance is >= exact.
  double rounded_below(double exact) const { return exact * (1.0 - relative) - absolute; }
  /// An upper bound of the exact squared distance of points whose rounded squared distance is <= rounded
  /// (the inverse of rounded_below, widened by a further relative 1e-9 for the double arithmetic here).
  double exact_above(double rounded) const { return (rounded + absolute) / (1.0 - relative) * (1.0 + 1e-9); }
};

}  // namespace surrogate::graph::detail
