// Complex FFT of length n whose elements are vectors of `channels` doubles (split real / imaginary planes,
// element k at re[k * channels .. + channels)): mixed radix, decimation in time, every butterfly a loop
// over the channels. Used by the spherical harmonic transforms (sht.cpp) along the longitudes of
// channels-last rows. Deterministic: the same arithmetic for every row, any thread.
#pragma once

#include <vector>

namespace surrogate::sphere::detail {

class ChannelFft {
 public:
  explicit ChannelFft(int n);
  int size() const noexcept { return n_; }

  /// In place: X[k] = sum_j x[j] exp(sign 2 pi i j k / n), sign = -1 (forward) or +1 (inverse, unscaled).
  /// `work` is resized as needed (3 n channels doubles, reusable across calls of one thread).
  void transform(double* re, double* im, int channels, int sign, std::vector<double>& work) const;

 private:
  void run(int n, int stride, const double* in_re, const double* in_im, double* out_re, double* out_im, int channels,
           int sign, std::size_t level, double* scratch) const;

  int n_;
  std::vector<int> radices_;          // n = product, applied outermost first
  std::vector<double> cos_, sin_;     // cos / sin(2 pi q / n), exact at the quarter turns
};

}  // namespace surrogate::sphere::detail
