// ResampleS2: tables and outputs against torch-harmonics 0.9.3 (tests/data/sphere/resample.h5, made by
// share/tools/golden/sphere_resample_golden.py), closed forms (constants, fields varying only in longitude
// or only in latitude), thread independence and bad arguments.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <vector>

#include "h5_reader.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/resample.hpp"

namespace sphere = surrogate::sphere;
using sphere::Grid;
using sphere::ResampleConfig;
using sphere::ResampleMode;
using sphere::ResampleS2;

namespace {

std::string data_file(const char* name) { return std::string(SURROGATE_TEST_DATA_DIR) + "/sphere/" + name; }

/// (B, C, H, W) -> channels last (B, H*W, C).
std::vector<float> to_channels_last(const std::vector<float>& x, std::size_t B, std::size_t C, std::size_t P) {
  std::vector<float> y(x.size());
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t c = 0; c < C; ++c)
      for (std::size_t p = 0; p < P; ++p) y[(b * P + p) * C + c] = x[(b * C + c) * P + p];
  return y;
}

std::vector<float> run(const ResampleS2& r, int batch, int channels, const std::vector<float>& in) {
  const auto& c = r.config();
  std::vector<float> out(static_cast<std::size_t>(batch) * static_cast<std::size_t>(c.nlat_out * c.nlon_out) *
                         static_cast<std::size_t>(channels));
  r.forward(batch, channels, in.data(), out.data());
  return out;
}

float max_abs(const std::vector<float>& v) {
  float m = 0.0f;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

}  // namespace

TEST(ResampleS2, MatchesTorchHarmonics) {
  sphere_test::H5Reader f(data_file("resample.h5"));
  const auto cases = f.children("/");
  ASSERT_GE(cases.size(), 9u);
  for (const std::string& name : cases) {
    SCOPED_TRACE(name);
    const std::string g = "/" + name;
    ResampleConfig c;
    c.nlat_in = static_cast<int>(f.number(g, "nlat_in"));
    c.nlon_in = static_cast<int>(f.number(g, "nlon_in"));
    c.nlat_out = static_cast<int>(f.number(g, "nlat_out"));
    c.nlon_out = static_cast<int>(f.number(g, "nlon_out"));
    c.grid_in = sphere::parse_grid(f.text(g, "grid_in"));
    c.grid_out = sphere::parse_grid(f.text(g, "grid_out"));
    c.mode = sphere::parse_resample_mode(f.text(g, "mode"));
    const ResampleS2 r(c);
    EXPECT_EQ(r.identity(), f.number(g, "skip_resampling") != 0.0);
    EXPECT_EQ(r.expand_poles(), f.number(g, "expand_poles") != 0.0);

    // Tables: indices exactly; weights to one float32 ulp (our colatitudes agree with the official ones to
    // float64 rounding, not always bitwise, see docs/sphere.md, which can move a weight by one ulp).
    const auto lat_idx = f.doubles(g + "/lat_idx"), left = f.doubles(g + "/lon_idx_left"),
               right = f.doubles(g + "/lon_idx_right");
    const auto lat_w = f.floats(g + "/lat_weights"), lon_w = f.floats(g + "/lon_weights");
    ASSERT_EQ(r.lat_index().size(), lat_idx.size());
    ASSERT_EQ(r.lon_left().size(), left.size());
    for (std::size_t t = 0; t < lat_idx.size(); ++t) {
      EXPECT_EQ(r.lat_index()[t], static_cast<int>(lat_idx[t])) << "latitude " << t;
      EXPECT_NEAR(r.lat_weight()[t], lat_w[t], FLT_EPSILON * std::fabs(lat_w[t]) + 1e-30) << "latitude " << t;
    }
    // torch.linspace's vectorised kernel forms the longitudes with a rounding of its own (the values agree to
    // 1e-15, not bitwise): where an output longitude coincides with an input one, the official table may
    // hold (left = l - 1, weight 1) and ours (left = l, weight 0) or the reverse. Both select input column l
    // exactly (torch.lerp returns `end` for weight 1 and `start` for weight 0), so that is accepted here.
    int node_ties = 0;
    for (std::size_t w = 0; w < left.size(); ++w) {
      const int ol = static_cast<int>(left[w]), orr = static_cast<int>(right[w]);
      const int ml = r.lon_left()[w], mr = r.lon_right()[w];
      const float mw = r.lon_weight()[w], ow = lon_w[w];
      if ((ml == orr && mw == 0.0f && ow == 1.0f) || (mr == ol && mw == 1.0f && ow == 0.0f)) {
        ++node_ties;
        continue;
      }
      EXPECT_EQ(ml, ol) << "longitude " << w;
      EXPECT_EQ(mr, orr) << "longitude " << w;
      EXPECT_NEAR(mw, ow, FLT_EPSILON * std::fabs(ow) + 1e-30) << "longitude " << w;
    }
    EXPECT_LE(node_ties, 2) << "more coinciding longitudes than expected";

    std::vector<std::size_t> shape_in, shape_out;
    const auto x = f.floats(g + "/input", &shape_in);
    const auto y = f.floats(g + "/output", &shape_out);
    ASSERT_EQ(shape_in.size(), 4u);
    const int batch = static_cast<int>(shape_in[0]), channels = static_cast<int>(shape_in[1]);
    const auto in = to_channels_last(x, shape_in[0], shape_in[1], shape_in[2] * shape_in[3]);
    const auto expected = to_channels_last(y, shape_out[0], shape_out[1], shape_out[2] * shape_out[3]);
    const auto out = run(r, batch, channels, in);
    ASSERT_EQ(out.size(), expected.size());
    if (r.identity()) {
      EXPECT_EQ(out, in);
      continue;
    }
    // Each output is three float32 interpolations of inputs (and of the float32 pole means): a few ulps of
    // the input's magnitude; the pole means (official: float32 sums; here: double, rounded) and one-ulp
    // weight differences stay within that. 8 ulps of max|input|.
    const double tol = 8.0 * FLT_EPSILON * max_abs(in);
    double worst = 0.0;
    std::size_t exact = 0;
    for (std::size_t i = 0; i < out.size(); ++i) {
      const double e = std::fabs(static_cast<double>(out[i]) - expected[i]);
      worst = std::max(worst, e);
      exact += out[i] == expected[i];
    }
    EXPECT_LE(worst, tol);
    std::printf("  resample %-28s max |ours - official| = %.3g (tolerance %.3g), bitwise equal %zu / %zu%s\n",
                name.c_str(), worst, tol, exact, out.size(), node_ties ? " (a longitude tie at a node)" : "");
  }
}

TEST(ResampleS2, ConstantIsReproducedExactly) {
  const struct {
    int hi, wi;
    Grid gi;
    int ho, wo;
    Grid go;
  } grids[] = {{9, 16, Grid::legendre_gauss, 17, 32, Grid::equiangular},
               {17, 32, Grid::equiangular, 9, 12, Grid::lobatto},
               {6, 5, Grid::equiangular_trapezoidal, 13, 7, Grid::legendre_gauss}};
  for (const auto& gr : grids) {
    ResampleConfig c{gr.hi, gr.wi, gr.ho, gr.wo, gr.gi, gr.go, ResampleMode::bilinear};
    const ResampleS2 r(c);
    const int channels = 3;
    std::vector<float> in(static_cast<std::size_t>(gr.hi * gr.wi * channels));
    const float values[3] = {1.0f, -0.3721f, 12345.678f};
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = values[i % 3];
    const auto out = run(r, 1, channels, in);
    for (std::size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], values[i % 3]) << "point " << i / 3;

    // Angle-valued constants: the shortest-arc interpolation of equal values is exact; only the circular
    // mean of the pole rows (atan2 of float32 means of sin and cos) rounds: 2 ulps.
    c.mode = ResampleMode::bilinear_spherical;
    const ResampleS2 s(c);
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = values[i % 2];  // angles 1 and -0.3721
    std::vector<float> out_s(out.size() / 3 * 2);
    s.forward(1, 2, in.data(), out_s.data());
    for (std::size_t i = 0; i < out_s.size(); ++i)
      ASSERT_NEAR(out_s[i], values[i % 2], 2.0 * FLT_EPSILON * std::fabs(values[i % 2])) << "point " << i / 2;
  }
}

TEST(ResampleS2, LongitudeOnlyFieldIsInterpolatedLinearlyWithWrap) {
  // f(lat, lon) = g(lon): the latitude interpolation leaves it unchanged, the longitude interpolation is
  // g(l) + (lambda_out - lambda_l) / dlambda * (g(l+1 mod nlon_in) - g(l)), the cell found by floor.
  const int ratios[][2] = {{12, 36}, {12, 20}, {16, 10}, {7, 7}};
  for (const auto& rt : ratios) {
    const int wi = rt[0], wo = rt[1];
    SCOPED_TRACE(std::to_string(wi) + " -> " + std::to_string(wo) + " longitudes");
    const ResampleS2 r({11, wi, 6, wo, Grid::equiangular, Grid::lobatto, ResampleMode::bilinear});
    EXPECT_FALSE(r.expand_poles());
    auto g = [](double lon) { return std::cos(lon) + 0.3 * std::sin(2.0 * lon) + 0.25; };
    std::vector<float> in(static_cast<std::size_t>(11 * wi));
    for (int h = 0; h < 11; ++h)
      for (int w = 0; w < wi; ++w) in[static_cast<std::size_t>(h * wi + w)] = static_cast<float>(g(2.0 * std::numbers::pi * w / wi));
    const auto out = run(r, 1, 1, in);
    for (int t = 0; t < 6; ++t)
      for (int w = 0; w < wo; ++w) {
        const double lon = 2.0 * std::numbers::pi * w / wo, dl = 2.0 * std::numbers::pi / wi;
        const int l = static_cast<int>(std::floor(lon / dl + 1e-12));
        const double s = (lon - l * dl) / dl;
        const double a = in[static_cast<std::size_t>(l)], b = in[static_cast<std::size_t>((l + 1) % wi)];
        const double expect = a + s * (b - a);
        ASSERT_NEAR(out[static_cast<std::size_t>(t * wo + w)], expect, 4.0 * FLT_EPSILON * 1.6) << t << ", " << w;
      }
  }
}

TEST(ResampleS2, LatitudeOnlyFieldIsInterpolatedLinearlyAndHeldAtThePoles) {
  // f = a + b * colatitude: reproduced at every output colatitude inside the input range; beyond the
  // first / last input latitude (pole expansion) the pole row holds the longitude mean of that row, i.e.
  // the same value, so the field is held constant there.
  const struct {
    int hi;
    Grid gi;
    int ho;
    Grid go;
    bool poles;
  } grids[] = {{9, Grid::legendre_gauss, 17, Grid::equiangular, true},
               {17, Grid::equiangular, 12, Grid::legendre_gauss, false},
               {8, Grid::legendre_gauss, 13, Grid::lobatto, true},
               {10, Grid::lobatto, 21, Grid::equiangular_trapezoidal, false}};
  for (const auto& gr : grids) {
    SCOPED_TRACE(std::string(sphere::to_string(gr.gi)) + " -> " + sphere::to_string(gr.go));
    const ResampleS2 r({gr.hi, 8, gr.ho, 12, gr.gi, gr.go, ResampleMode::bilinear});
    EXPECT_EQ(r.expand_poles(), gr.poles);
    const auto th_in = sphere::latitudes(gr.hi, gr.gi).colatitude, th_out = sphere::latitudes(gr.ho, gr.go).colatitude;
    auto h = [](double theta) { return 0.75 - 0.9 * theta; };
    std::vector<float> in(static_cast<std::size_t>(gr.hi * 8));
    for (int t = 0; t < gr.hi; ++t)
      for (int w = 0; w < 8; ++w) in[static_cast<std::size_t>(t * 8 + w)] = static_cast<float>(h(th_in[static_cast<std::size_t>(t)]));
    const auto out = run(r, 1, 1, in);
    for (int t = 0; t < gr.ho; ++t) {
      const double theta = std::clamp(th_out[static_cast<std::size_t>(t)], th_in.front(), th_in.back());
      // The input rows hold h(theta_i) rounded to float: a linear interpolation of them is h(theta) to
      // that rounding plus the three float32 lerps.
      for (int w = 0; w < 12; ++w)
        ASSERT_NEAR(out[static_cast<std::size_t>(t * 12 + w)], h(theta), 6.0 * FLT_EPSILON * 2.2) << t << ", " << w;
    }
  }
}

TEST(ResampleS2, IndependentOfThreadCount) {
  const ResampleS2 r({9, 16, 17, 32, Grid::legendre_gauss, Grid::equiangular, ResampleMode::bilinear});
  std::vector<float> in(2 * 9 * 16 * 5);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = run(r, 2, 5, in);
  omp_set_num_threads(3);
  const auto three = run(r, 2, 5, in);
  omp_set_num_threads(saved);
  EXPECT_EQ(one, three);
}

TEST(ResampleS2, BadArguments) {
  auto code_of = [](auto&& f) {
    try {
      f();
    } catch (const surrogate::Error& e) {
      return e.code();
    }
    return surrogate::ErrorCode::ok;
  };
  using surrogate::ErrorCode;
  EXPECT_EQ(code_of([] { ResampleS2 r({0, 16, 17, 32, Grid::legendre_gauss, Grid::equiangular}); }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([] { ResampleS2 r({9, 16, 17, 0, Grid::legendre_gauss, Grid::equiangular}); }),
            ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([] { sphere::parse_resample_mode("nearest"); }), ErrorCode::invalid_argument);
  try {
    sphere::parse_resample_mode("bicubic", "decoder.mode");
    FAIL() << "no error";
  } catch (const surrogate::Error& e) {
    EXPECT_NE(std::string(e.what()).find("decoder.mode"), std::string::npos) << e.what();
  }
  EXPECT_EQ(sphere::parse_resample_mode("bilinear-spherical"), ResampleMode::bilinear_spherical);
  EXPECT_STREQ(sphere::to_string(ResampleMode::bilinear), "bilinear");

  const ResampleS2 r({9, 16, 17, 32, Grid::legendre_gauss, Grid::equiangular});
  std::vector<float> in(9 * 16 * 2), out(17 * 32 * 2);
  EXPECT_EQ(code_of([&] { r.forward(0, 2, in.data(), out.data()); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { r.forward(1, 0, in.data(), out.data()); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { r.forward(1, 2, nullptr, out.data()); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { r.forward(1, 2, in.data(), nullptr); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code_of([&] { r.forward(1, 2, in.data(), out.data()); }), ErrorCode::ok);
}
