// ResampleS2 (docs/reference-models.md §5.7): tables as torch-harmonics 0.9.3 computes them (float64
// geometry, float32 weights) and the forward in its float32 arithmetic. Compiled without fused
// multiply-add: the one fused operation, torch.lerp's vectorised form, is written out with std::fma.
#include "surrogate/sphere/resample.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::sphere {

namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::invalid_argument, message); }

constexpr double kPi = 3.14159265358979323846;

// One output point's channels: lerp(lerp(a0, a1, wl), lerp(b0, b1, wl), wo) as torch.lerp computes it in
// float32 (its CPU kernel's vectorised form: start + w (end - start) for |w| < 0.5, else end + (w - 1)(end -
// start), each one fused multiply-add), the choice made once per weight outside the loop: StartLat and
// StartLon say |w| < 0.5, and wl and wo arrive as w or w - 1 accordingly.
template <bool StartLat, bool StartLon>
[[gnu::always_inline]] inline void lerp_point(std::size_t C, const float* a0, const float* a1, const float* b0,
                                              const float* b1, float wl, float wo, float* dst) {
  for (std::size_t ch = 0; ch < C; ++ch) {
    const float left = std::fma(wl, a1[ch] - a0[ch], StartLat ? a0[ch] : a1[ch]);
    const float right = std::fma(wl, b1[ch] - b0[ch], StartLat ? b0[ch] : b1[ch]);
    dst[ch] = std::fma(wo, right - left, StartLon ? left : right);
  }
}

#define SURROGATE_LERP_POINT_BODY                                                                          \
  const bool start_lat = std::fabs(wl) < 0.5f, start_lon = std::fabs(wo) < 0.5f;                         \
  const float l = start_lat ? wl : wl - 1.0f, o = start_lon ? wo : wo - 1.0f;                           \
  if (start_lat && start_lon) lerp_point<true, true>(C, a0, a1, b0, b1, l, o, dst);                     \
  else if (start_lat) lerp_point<true, false>(C, a0, a1, b0, b1, l, o, dst);                            \
  else if (start_lon) lerp_point<false, true>(C, a0, a1, b0, b1, l, o, dst);                            \
  else lerp_point<false, false>(C, a0, a1, b0, b1, l, o, dst);

using LerpPoint = void (*)(std::size_t, const float*, const float*, const float*, const float*, float, float,
                           float*);

#if defined(__x86_64__) || defined(__i386__)
// With the fused multiply-add as an instruction (and the channels vectorised) where the CPU kernels use
// AVX2 or AVX-512; the baseline build calls the C library's fmaf per value. The same bits either way.
[[gnu::target("avx2,fma")]] void lerp_point_fma(std::size_t C, const float* a0, const float* a1, const float* b0,
                                                const float* b1, float wl, float wo, float* dst) {
  SURROGATE_LERP_POINT_BODY
}
#endif

void lerp_point_generic(std::size_t C, const float* a0, const float* a1, const float* b0, const float* b1, float wl,
                        float wo, float* dst) {
  SURROGATE_LERP_POINT_BODY
}
#undef SURROGATE_LERP_POINT_BODY

LerpPoint lerp_point_for_cpu() {
#if defined(__x86_64__) || defined(__i386__)
  if (kernels::cpu().isa != kernels::Isa::generic) return &lerp_point_fma;
#endif
  return &lerp_point_generic;
}

// f0 + t * wrap(f1 - f0) with wrap(d) = remainder(d + pi, 2 pi) - pi in float32 (torch.remainder: fmod,
// moved into the divisor's sign), the constants rounded to float as PyTorch does with Python scalars.
inline float slerp(float start, float end, float w) {
  constexpr float pi = static_cast<float>(kPi);
  constexpr float two_pi = static_cast<float>(2.0 * kPi);
  float r = std::fmod((end - start) + pi, two_pi);
  if (r < 0.0f) r += two_pi;  // the divisor is positive
  const float delta = r - pi;
  const float step = w * delta;
  return start + step;
}

// Number of entries of the ascending `v` that are <= x (torch.searchsorted(side="right")).
int count_le(const std::vector<double>& v, double x) {
  return static_cast<int>(std::upper_bound(v.begin(), v.end(), x) - v.begin());
}

}  // namespace

const char* to_string(ResampleMode mode) noexcept {
  switch (mode) {
    case ResampleMode::bilinear: return "bilinear";
    case ResampleMode::bilinear_spherical: return "bilinear-spherical";
  }
  return "?";
}

ResampleMode parse_resample_mode(std::string_view name, std::string_view argument) {
  if (name == "bilinear") return ResampleMode::bilinear;
  if (name == "bilinear-spherical") return ResampleMode::bilinear_spherical;
  invalid(std::string(argument) + ": unknown resampling mode '" + std::string(name) +
          "' (torch-harmonics knows 'bilinear' and 'bilinear-spherical')");
}

ResampleS2::ResampleS2(const ResampleConfig& config) : config_(config) {
  const ResampleConfig& c = config_;
  if (c.nlat_in < 1 || c.nlon_in < 1)
    invalid("ResampleS2: the input grid (nlat_in, nlon_in) = (" + std::to_string(c.nlat_in) + ", " +
            std::to_string(c.nlon_in) + ") must be at least (1, 1)");
  if (c.nlat_out < 1 || c.nlon_out < 1)
    invalid("ResampleS2: the output grid (nlat_out, nlon_out) = (" + std::to_string(c.nlat_out) + ", " +
            std::to_string(c.nlon_out) + ") must be at least (1, 1)");
  if (c.mode != ResampleMode::bilinear && c.mode != ResampleMode::bilinear_spherical)
    invalid("ResampleS2: mode is not a ResampleMode value");
  identity_ = c.nlat_in == c.nlat_out && c.nlon_in == c.nlon_out && c.grid_in == c.grid_out;

  // Latitudes (quadrature.hpp reproduces torch_harmonics.quadrature.precompute_latitudes).
  std::vector<double> lat_in = latitudes(c.nlat_in, c.grid_in).colatitude;
  const std::vector<double> lat_out = latitudes(c.nlat_out, c.grid_out).colatitude;
  for (double t : lat_out)
    if (t > lat_in.back() || t < lat_in.front()) expand_poles_ = true;
  if (expand_poles_) {
    std::vector<double> extended(lat_in.size() + 2, 0.0);
    std::copy(lat_in.begin(), lat_in.end(), extended.begin() + 1);
    extended.back() = kPi;
    lat_in.swap(extended);
  }
  if (lat_in.size() < 2)
    invalid("ResampleS2: a single input latitude (nlat_in = 1) cannot be interpolated when every output "
            "latitude lies within the input range");
  lat_index_.resize(lat_out.size());
  lat_weight_.resize(lat_out.size());
  for (std::size_t t = 0; t < lat_out.size(); ++t) {
    int i = count_le(lat_in, lat_out[t]) - 1;
    if (lat_out[t] == lat_in.back()) --i;
    // Never reached with torch-harmonics' grids (every output colatitude lies in [lat_in[0], lat_in[-1]]
    // after the pole expansion); kept so that a table index is always valid.
    i = std::clamp(i, 0, static_cast<int>(lat_in.size()) - 2);
    lat_index_[t] = i;
    lat_weight_[t] = static_cast<float>((lat_out[t] - lat_in[i]) / (lat_in[i + 1] - lat_in[i]));
  }

  const std::vector<double> lon_in = longitudes(c.nlon_in), lon_out = longitudes(c.nlon_out);
  lon_left_.resize(lon_out.size());
  lon_right_.resize(lon_out.size());
  lon_weight_.resize(lon_out.size());
  for (std::size_t w = 0; w < lon_out.size(); ++w) {
    const int left = count_le(lon_in, lon_out[w]) - 1;  // >= 0: lon_in[0] = 0 <= every output longitude
    const int right = lon_out[w] >= lon_in.back() ? 0 : left + 1;
    double diff = lon_in[right] - lon_in[left];
    if (diff <= 0.0) diff += 2.0 * kPi;
    lon_left_[w] = left;
    lon_right_[w] = right;
    lon_weight_[w] = static_cast<float>((lon_out[w] - lon_in[left]) / diff);
  }
}

void ResampleS2::forward(int batch, int channels, const float* in, float* out) const {
  forward_rows(batch, channels, in, 0, config_.nlat_in, out, 0, config_.nlat_out);
}

std::pair<int, int> ResampleS2::input_rows(int lat_begin, int lat_end) const {
  const ResampleConfig& c = config_;
  lat_begin = std::max(lat_begin, 0);
  lat_end = std::min(lat_end, c.nlat_out);
  if (lat_begin >= lat_end) return {lat_begin, lat_begin};
  if (identity_) return {lat_begin, lat_end};
  // Extended rows r0 .. r1 + 1 (lat_index_ is non-decreasing); a pole row reads the first / last input row.
  const int shift = expand_poles_ ? 1 : 0;
  const int first = lat_index_[static_cast<std::size_t>(lat_begin)] - shift;
  const int last = lat_index_[static_cast<std::size_t>(lat_end - 1)] + 1 - shift;
  return {std::clamp(first, 0, c.nlat_in - 1), std::clamp(last, 0, c.nlat_in - 1) + 1};
}

void ResampleS2::forward_rows(int batch, int channels, const float* in, int in_begin, int in_end, float* out,
                              int out_begin, int out_end) const {
  const ResampleConfig& c = config_;
  if (batch < 1) invalid("ResampleS2::forward: batch must be at least 1, got " + std::to_string(batch));
  if (channels < 1) invalid("ResampleS2::forward: channels must be at least 1, got " + std::to_string(channels));
  if (out_begin < 0 || out_end > c.nlat_out || out_begin > out_end)
    invalid("ResampleS2::forward_rows: output rows [" + std::to_string(out_begin) + ", " + std::to_string(out_end) +
            ") outside [0, nlat_out = " + std::to_string(c.nlat_out) + ")");
  if (out_begin == out_end) return;
  if (!in || !out) invalid("ResampleS2::forward: in and out must not be null");
  const auto needed = input_rows(out_begin, out_end);
  if (needed.first < in_begin || needed.second > in_end)
    invalid("ResampleS2::forward_rows: output rows [" + std::to_string(out_begin) + ", " + std::to_string(out_end) +
            ") read input rows [" + std::to_string(needed.first) + ", " + std::to_string(needed.second) +
            "), the given input holds [" + std::to_string(in_begin) + ", " + std::to_string(in_end) + ")");
  const std::size_t C = static_cast<std::size_t>(channels);
  const std::size_t pi_count = static_cast<std::size_t>(in_end - in_begin) * static_cast<std::size_t>(c.nlon_in);
  const std::size_t po_count = static_cast<std::size_t>(out_end - out_begin) * static_cast<std::size_t>(c.nlon_out);
  if (identity_) {
    for (int b = 0; b < batch; ++b) {
      const float* src = in + (static_cast<std::size_t>(b) * pi_count +
                               static_cast<std::size_t>(out_begin - in_begin) * static_cast<std::size_t>(c.nlon_in)) * C;
      float* dst = out + static_cast<std::size_t>(b) * po_count * C;
      if (src != dst) std::memmove(dst, src, po_count * C * sizeof(float));
    }
    return;
  }
  const bool spherical = c.mode == ResampleMode::bilinear_spherical;
  // Which pole rows these output rows use (the extended rows 0 and nlat_in + 1).
  const bool north = expand_poles_ && lat_index_[static_cast<std::size_t>(out_begin)] == 0;
  const bool south = expand_poles_ && lat_index_[static_cast<std::size_t>(out_end - 1)] + 1 == c.nlat_in + 1;

  // Pole rows: per sample and channel, the mean over longitude of the first / last input row (a circular
  // mean, atan2(mean sin, mean cos), for angle-valued fields); sums in double, rounded to float.
  std::vector<float> poles;
  if (expand_poles_) {
    poles.assign(static_cast<std::size_t>(batch) * 2 * C, 0.0f);
#pragma omp parallel for schedule(static)
    for (int task = 0; task < 2 * batch; ++task) {
      const std::size_t b = static_cast<std::size_t>(task / 2), side = static_cast<std::size_t>(task % 2);
      if (!(side == 0 ? north : south)) continue;
      const std::size_t row = side == 0 ? 0 : static_cast<std::size_t>(c.nlat_in - 1 - in_begin);
      const float* base = in + (b * pi_count + row * static_cast<std::size_t>(c.nlon_in)) * C;
      float* dst = poles.data() + (b * 2 + side) * C;
      std::vector<double> s(C, 0.0), s2(spherical ? C : 0, 0.0);
      for (int lon = 0; lon < c.nlon_in; ++lon) {
        const float* x = base + static_cast<std::size_t>(lon) * C;
        if (spherical) {
          for (std::size_t ch = 0; ch < C; ++ch) {
            s[ch] += std::sin(x[ch]);
            s2[ch] += std::cos(x[ch]);
          }
        } else {
          for (std::size_t ch = 0; ch < C; ++ch) s[ch] += x[ch];
        }
      }
      for (std::size_t ch = 0; ch < C; ++ch) {
        const float mean = static_cast<float>(s[ch] / c.nlon_in);
        dst[ch] = spherical ? std::atan2(mean, static_cast<float>(s2[ch] / c.nlon_in)) : mean;
      }
    }
  }

  const int nrows = out_end - out_begin, rows_out = batch * nrows;
  const LerpPoint lerp_channels = lerp_point_for_cpu();
#pragma omp parallel for schedule(static)
  for (int task = 0; task < rows_out; ++task) {
    const std::size_t b = static_cast<std::size_t>(task / nrows);
    const int t = out_begin + task % nrows;  // the global output latitude
    // Extended row r: the north pole row (r = 0), input row r - 1, the south pole row (r = nlat_in + 1)
    // when the poles are expanded; input row r otherwise. A pole row has one value per channel.
    auto row = [&](int r, int lon) -> const float* {
      if (expand_poles_) {
        if (r == 0) return poles.data() + (b * 2) * C;
        if (r == c.nlat_in + 1) return poles.data() + (b * 2 + 1) * C;
        --r;
      }
      r -= in_begin;
      return in + (b * pi_count + static_cast<std::size_t>(r) * static_cast<std::size_t>(c.nlon_in) +
                   static_cast<std::size_t>(lon)) * C;
    };
    const int r0 = lat_index_[static_cast<std::size_t>(t)];
    const float wl = lat_weight_[static_cast<std::size_t>(t)];
    float* dst_row =
        out + (b * po_count + static_cast<std::size_t>(t - out_begin) * static_cast<std::size_t>(c.nlon_out)) * C;
    for (int w = 0; w < c.nlon_out; ++w) {
      const int left = lon_left_[static_cast<std::size_t>(w)], right = lon_right_[static_cast<std::size_t>(w)];
      const float wo = lon_weight_[static_cast<std::size_t>(w)];
      const float* a0 = row(r0, left);
      const float* a1 = row(r0 + 1, left);
      const float* b0 = row(r0, right);
      const float* b1 = row(r0 + 1, right);
      float* dst = dst_row + static_cast<std::size_t>(w) * C;
      if (spherical) {
        for (std::size_t ch = 0; ch < C; ++ch)
          dst[ch] = slerp(slerp(a0[ch], a1[ch], wl), slerp(b0[ch], b1[ch], wl), wo);
      } else {
        lerp_channels(C, a0, a1, b0, b1, wl, wo, dst);
      }
    }
  }
}

}  // namespace surrogate::sphere
