// NeighborhoodAttentionS2's upsampling (scatter) mode (query grid finer than the key grid, nlon_out a
// multiple of nlon_in): the lists against torch-harmonics 0.9.3's buffers and against brute force, the
// forward against the official module (tests/data/sphere/neighborhood_upsample.h5, made by
// share/tools/golden/sphere_upsample_golden.py) and against the naive float64 formula with brute-force
// neighbourhoods, independence of threads and bands, longitude-shift equivariance, bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <omp.h>

#include "attention_cases.hpp"
#include "h5_reader.hpp"
#include "neighborhood_reference.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/sphere/layer_file.hpp"
#include "surrogate/sphere/neighborhood.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"

namespace sphere = surrogate::sphere;
using sphere::Grid;

namespace {

using sphere_test::data_file;
using sphere_test::random_vector;
using sphere_test::random_weights;
using sphere_test::to_channels_last;

sphere::NeighborhoodAttentionS2Config config(int nlat_in, int nlon_in, Grid gin, int nlat_out, int nlon_out, Grid gout,
                                             int cin, int heads, double cutoff) {
  sphere::NeighborhoodAttentionS2Config c;
  c.in_channels = cin;
  c.num_heads = heads;
  c.nlat_in = nlat_in;
  c.nlon_in = nlon_in;
  c.grid_in = gin;
  c.nlat_out = nlat_out;
  c.nlon_out = nlon_out;
  c.grid_out = gout;
  c.theta_cutoff = cutoff;
  return c;
}

}  // namespace

// The official buffers psi_roff_idx / psi_col_idx (keyed by input latitude) and the cutoff the module
// chose (0.9.3: the largest colatitude gap of the input grid), exactly.
TEST(NeighborhoodUpsample, ListsMatchTorchHarmonics) {
  sphere_test::H5Reader f(data_file("neighborhood_upsample.h5"));
  int cases = 0;
  for (const std::string& name : f.children("/")) {
    const std::string g = "/" + name;
    const auto c = config(static_cast<int>(f.number(g, "nlat_in")), static_cast<int>(f.number(g, "nlon_in")),
                          sphere::parse_grid(f.text(g, "grid_in")), static_cast<int>(f.number(g, "nlat_out")),
                          static_cast<int>(f.number(g, "nlon_out")), sphere::parse_grid(f.text(g, "grid_out")), 2, 1,
                          f.number(g, "default_cutoff") != 0 ? 0.0 : f.number(g, "theta_cutoff"));
    std::mt19937 rng(1);
    const sphere::NeighborhoodAttentionS2 att(c, random_weights(c, rng));
    EXPECT_DOUBLE_EQ(att.config().theta_cutoff, f.number(g, "theta_cutoff")) << name;
    const sphere::NeighborhoodCsr& csr = att.neighbors();
    std::vector<std::int64_t> roff, col;
    for (double x : f.doubles(g + "/roff_idx")) roff.push_back(static_cast<std::int64_t>(x));
    for (double x : f.doubles(g + "/col_idx")) col.push_back(static_cast<std::int64_t>(x));
    EXPECT_EQ(csr.row_offsets, roff) << name;
    EXPECT_EQ(csr.columns, col) << name;
    const sphere::NeighborhoodCsr direct = sphere::neighborhood_csr_scatter(c.nlat_in, c.nlon_in, c.grid_in, c.nlat_out,
                                                                            c.nlon_out, c.grid_out, att.config().theta_cutoff);
    EXPECT_EQ(direct.columns, col) << name;
    ++cases;
  }
  EXPECT_GE(cases, 5);
}

// Every (input point, output point) pair against brute force (long-double great-circle distances): the
// input rows at both poles, the output longitudes across the seam at 0 / 2 pi, the shift of the list of
// input longitude 0 to every input longitude, and the pairs between theta_cutoff and the widened
// (1 + 1e-3) theta_cutoff (included; the default cutoff of an equiangular grid puts whole rows there).
// Pairs within 1e-9 of the widened radius are undecidable between the two computations and skipped.
TEST(NeighborhoodUpsample, ListsMatchBruteForce) {
  struct Case {
    int nlat_in, nlon_in;
    Grid gin;
    int nlat_out, nlon_out;
    Grid gout;
    double cutoff;
  };
  const Case cases[] = {
      {17, 32, Grid::equiangular, 33, 64, Grid::equiangular, 0.0},
      {9, 18, Grid::legendre_gauss, 16, 36, Grid::lobatto, 0.31},
      {7, 10, Grid::equiangular_trapezoidal, 12, 40, Grid::legendre_gauss, 0.0},
      {5, 8, Grid::equiangular, 9, 32, Grid::equiangular, 0.3},  // output points without neighbours
  };
  for (const Case& k : cases) {
    const double cutoff = k.cutoff > 0 ? k.cutoff : sphere::default_theta_cutoff(k.nlat_in, k.gin);
    const sphere::NeighborhoodCsr csr =
        sphere::neighborhood_csr_scatter(k.nlat_in, k.nlon_in, k.gin, k.nlat_out, k.nlon_out, k.gout, cutoff);
    ASSERT_EQ(csr.row_offsets.size(), static_cast<std::size_t>(k.nlat_in) + 1);
    const sphere::Latitudes in = sphere::latitudes(k.nlat_in, k.gin), out = sphere::latitudes(k.nlat_out, k.gout);
    const long double radius = (1.0L + 1e-3L) * static_cast<long double>(cutoff);
    int widened = 0, skipped = 0;
    std::size_t pairs = 0;
    for (int hi = 0; hi < k.nlat_in; ++hi)
      for (int wi = 0; wi < k.nlon_in; ++wi) {
        std::set<std::int64_t> listed, near;
        for (std::int64_t j = csr.row_offsets[static_cast<std::size_t>(hi)]; j < csr.row_offsets[static_cast<std::size_t>(hi) + 1]; ++j)
          listed.insert(csr.shifted(csr.columns[static_cast<std::size_t>(j)], wi));
        std::set<std::int64_t> brute;
        for (int ho = 0; ho < k.nlat_out; ++ho)
          for (int wo = 0; wo < k.nlon_out; ++wo) {
            const long double d = sphere_test::great_circle(in.colatitude[static_cast<std::size_t>(hi)], wi, k.nlon_in,
                                                            out.colatitude[static_cast<std::size_t>(ho)], wo, k.nlon_out);
            const std::int64_t col = static_cast<std::int64_t>(ho) * k.nlon_out + wo;
            if (std::abs(d - radius) < 1e-9L) {
              near.insert(col);
              ++skipped;
              continue;
            }
            if (d <= radius) brute.insert(col);
            if (d <= radius && d > static_cast<long double>(cutoff)) ++widened;
          }
        for (std::int64_t col : near) listed.erase(col);
        ASSERT_EQ(listed, brute) << k.nlat_in << "x" << k.nlon_in << " -> " << k.nlat_out << "x" << k.nlon_out
                                 << ", input point (" << hi << ", " << wi << ")";
        pairs += brute.size();
      }
    EXPECT_GT(pairs, 0u);
    if (k.gin == Grid::equiangular && k.cutoff == 0.0) {
      EXPECT_GT(widened, 0) << "no pair in the widened band";
    }
    std::printf("  %dx%d -> %dx%d: %zu pairs, %d in (cutoff, (1+1e-3) cutoff], %d undecidable skipped\n", k.nlat_in,
                k.nlon_in, k.nlat_out, k.nlon_out, pairs, widened, skipped);
  }
}

// The official module's float32 output (its compiled CPU kernel). Tolerance as for the gather mode: the
// official output's distance to the float64 evaluation of the formula (output_f64, by the generator) is
// the rounding float32 brings; ours sums in double, so it must be within 4x that gap plus 8 float32 ulps
// of the output's magnitude. Output points without neighbours are NaN in both.
TEST(NeighborhoodUpsample, MatchesTorchHarmonics) {
  sphere_test::H5Reader f(data_file("neighborhood_upsample.h5"));
  int cases = 0;
  for (const std::string& name : f.children("/")) {
    const std::string g = "/" + name;
    sphere::NeighborhoodAttentionS2Config c;
    const std::string scale_kind = sphere_test::read_common_config(f, g, c);
    ASSERT_TRUE(scale_kind == "none" || scale_kind == "float" || scale_kind == "tensor") << scale_kind;
    c.theta_cutoff = f.number(g, "default_cutoff") != 0 ? 0.0 : f.number(g, "theta_cutoff");
    const sphere::AttentionS2Weights w = sphere_test::read_weights(f, g, c.bias, c.use_qknorm);
    const sphere::NeighborhoodAttentionS2 att(c, w);
    std::vector<std::size_t> shape;
    const std::vector<float> q = f.floats(g + "/query", &shape);
    const int batch = static_cast<int>(shape[0]);
    const std::vector<float> xq = to_channels_last(q, batch, c.in_channels);
    const std::vector<float> xk = to_channels_last(f.floats(g + "/key"), batch, c.in_channels);
    const std::vector<float> xv = to_channels_last(f.floats(g + "/value"), batch, c.in_channels);
    const std::vector<float> ref = to_channels_last(f.floats(g + "/output"), batch, att.config().out_channels);
    const std::vector<float> ref64 = to_channels_last(f.floats(g + "/output_f64"), batch, att.config().out_channels);
    std::vector<float> out(ref.size(), 0.0f);
    att.forward(batch, xq.data(), xk.data(), xv.data(), out.data());
    double err = 0, gap = 0, mag = 0;
    int nan = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      ASSERT_EQ(std::isnan(out[i]), std::isnan(ref[i])) << name << " value " << i;
      if (std::isnan(ref[i])) {
        ++nan;
        continue;
      }
      err = std::max(err, static_cast<double>(std::abs(out[i] - ref[i])));
      gap = std::max(gap, static_cast<double>(std::abs(ref64[i] - ref[i])));
      mag = std::max(mag, static_cast<double>(std::abs(ref[i])));
    }
    const double tol = 4 * gap + 8 * 6e-8 * mag;
    EXPECT_LE(err, tol) << name << ": max |ours - official| " << err << ", official float32 vs float64 " << gap;
    EXPECT_FALSE(std::isnan(err)) << name;
    std::printf("  %-40s max |ours - torch-harmonics| %.3g (official f32 vs f64 %.3g, max |out| %.3g, NaN values %d)\n",
                name.c_str(), err, gap, mag, nan);
    ++cases;
  }
  EXPECT_GE(cases, 5);
}

namespace {

struct UpCase {
  int nlat_in, nlon_in, nlat_out, nlon_out, cin, heads, ck, co;
  Grid grid_in, grid_out;
  double cutoff;
  bool bias, qknorm;
  sphere::ScaleMode mode;
};

const UpCase kNaiveCases[] = {
    // 3 heads of width 5 (not a specialised kernel width), default cutoff, poles on both grids
    {16, 32, 31, 64, 12, 3, 15, 12, Grid::equiangular, Grid::legendre_gauss, 0.0, true, false, sphere::ScaleMode::standard},
    // p = 3, qk-norm, tensor scale, explicit cutoff
    {10, 20, 20, 60, 10, 2, 10, 10, Grid::lobatto, Grid::equiangular, 0.4123, true, true, sphere::ScaleMode::tensor},
    // same latitudes, p = 2, no bias, k_channels != out_channels, float scale, more than 64 longitudes per residue
    {12, 80, 12, 160, 8, 2, 4, 6, Grid::equiangular_trapezoidal, Grid::legendre_gauss, 0.0, false, false,
     sphere::ScaleMode::value},
};

sphere::NeighborhoodAttentionS2Config config_of(const UpCase& t) {
  sphere::NeighborhoodAttentionS2Config c =
      config(t.nlat_in, t.nlon_in, t.grid_in, t.nlat_out, t.nlon_out, t.grid_out, t.cin, t.heads, t.cutoff);
  c.k_channels = t.ck;
  c.out_channels = t.co;
  c.bias = t.bias;
  c.use_qknorm = t.qknorm;
  c.scale_mode = t.mode;
  c.scale = 0.6f;
  return c;
}

}  // namespace

// Against the float64 formula with neighbourhoods by brute force (no list of the library), batch 2. The
// bound 2e-6 relative to the largest output: the float32 inputs of the formula are the same; what
// differs is the float32 rounding of the projections (a few ulps of |W||x|), of q.k (ek terms) and of the
// output, each ~1e-7 relative at these magnitudes.
TEST(NeighborhoodUpsample, MatchesNaiveFormula) {
  std::mt19937 rng(41);
  for (const UpCase& t : kNaiveCases) {
    const sphere::NeighborhoodAttentionS2Config c = config_of(t);
    const sphere::AttentionS2Weights w = random_weights(c, rng);
    const int batch = 2;
    const std::vector<float> xq = random_vector(static_cast<std::size_t>(batch * t.nlat_out * t.nlon_out * t.cin), rng, 1.0f);
    const std::vector<float> xk = random_vector(static_cast<std::size_t>(batch * t.nlat_in * t.nlon_in * t.cin), rng, 1.0f);
    const std::vector<float> xv = random_vector(xk.size(), rng, 1.0f);
    const sphere::NeighborhoodAttentionS2 att(c, w);
    std::vector<float> out(static_cast<std::size_t>(batch * t.nlat_out * t.nlon_out * t.co));
    att.forward(batch, xq.data(), xk.data(), xv.data(), out.data());
    int ambiguous = 0;
    const std::vector<double> ref = sphere_test::naive(att.config(), w, att.scale(), batch, xq, xk, xv, ambiguous);
    ASSERT_EQ(ambiguous, 0) << "a pair lies on the cutoff; choose another cutoff for this case";
    double err = 0, mag = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      err = std::max(err, std::abs(out[i] - ref[i]));
      mag = std::max(mag, std::abs(ref[i]));
    }
    EXPECT_LE(err, 2e-6 * std::max(1.0, mag)) << t.nlat_in << "x" << t.nlon_in << " -> " << t.nlat_out << "x" << t.nlon_out;
    EXPECT_FALSE(std::isnan(err));
    std::printf("  %dx%d -> %dx%d: max |ours - float64| %.3g (max |out| %.3g)\n", t.nlat_in, t.nlon_in, t.nlat_out,
                t.nlon_out, err, mag);
  }
}

// 1 and 3 OpenMP threads, forward_rows one output row at a time (with only the input rows it reaches, and
// with all of them), and the whole forward give the same bits; shifting the input by s longitudes shifts the output by p*s.
TEST(NeighborhoodUpsample, ThreadsBandsAndShiftKeepBits) {
  std::mt19937 rng(43);
  for (const UpCase& t : kNaiveCases) {
    const sphere::NeighborhoodAttentionS2Config c = config_of(t);
    const sphere::NeighborhoodAttentionS2 att(c, random_weights(c, rng));
    const int batch = 2, p = t.nlon_out / t.nlon_in, rq = t.nlon_out * t.cin, rk = t.nlon_in * t.cin,
              ro = t.nlon_out * t.co;
    const std::vector<float> xq = random_vector(static_cast<std::size_t>(batch * t.nlat_out * rq), rng, 1.0f);
    const std::vector<float> xk = random_vector(static_cast<std::size_t>(batch * t.nlat_in * rk), rng, 1.0f);
    const std::vector<float> xv = random_vector(xk.size(), rng, 1.0f);
    std::vector<float> one(static_cast<std::size_t>(batch * t.nlat_out * ro)), three(one.size());
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    att.forward(batch, xq.data(), xk.data(), xv.data(), one.data());
    omp_set_num_threads(3);
    att.forward(batch, xq.data(), xk.data(), xv.data(), three.data());
    omp_set_num_threads(threads);
    ASSERT_EQ(one, three) << t.nlat_in << "x" << t.nlon_in << " -> " << t.nlat_out << "x" << t.nlon_out;

    for (int lat = 0; lat < t.nlat_out; ++lat) {
      const auto [i0, i1] = att.input_rows(lat, lat + 1);
      ASSERT_LT(i0, i1);
      std::vector<float> q(static_cast<std::size_t>(batch * rq)), k(static_cast<std::size_t>(batch * (i1 - i0) * rk)),
          v(k.size()), row(static_cast<std::size_t>(batch * ro));
      for (int b = 0; b < batch; ++b) {
        std::copy_n(xq.begin() + (b * t.nlat_out + lat) * rq, rq, q.begin() + b * rq);
        std::copy_n(xk.begin() + (b * t.nlat_in + i0) * rk, (i1 - i0) * rk, k.begin() + b * (i1 - i0) * rk);
        std::copy_n(xv.begin() + (b * t.nlat_in + i0) * rk, (i1 - i0) * rk, v.begin() + b * (i1 - i0) * rk);
      }
      att.forward_rows(batch, lat, lat + 1, q.data(), i0, i1, k.data(), v.data(), row.data());
      std::vector<float> wide(row.size());  // the same row with every input row given
      att.forward_rows(batch, lat, lat + 1, q.data(), 0, t.nlat_in, xk.data(), xv.data(), wide.data());
      for (int b = 0; b < batch; ++b)
        for (int i = 0; i < ro; ++i) {
          ASSERT_EQ(row[static_cast<std::size_t>(b * ro + i)], one[static_cast<std::size_t>((b * t.nlat_out + lat) * ro + i)])
              << "output row " << lat << ", sample " << b;
          ASSERT_EQ(wide[static_cast<std::size_t>(b * ro + i)], row[static_cast<std::size_t>(b * ro + i)])
              << "output row " << lat << ", sample " << b << ", all input rows given";
        }
    }

    const int s = 3;  // input longitudes; the output moves by p*s
    auto roll = [](const std::vector<float>& x, int rows, int nlon, int ch, int by) {
      std::vector<float> y(x.size());
      for (int r = 0; r < rows; ++r)
        for (int w = 0; w < nlon; ++w)
          std::copy_n(x.begin() + (r * nlon + w) * ch, ch, y.begin() + (r * nlon + (w + by) % nlon) * ch);
      return y;
    };
    const std::vector<float> sq = roll(xq, batch * t.nlat_out, t.nlon_out, t.cin, p * s);
    const std::vector<float> sk = roll(xk, batch * t.nlat_in, t.nlon_in, t.cin, s);
    const std::vector<float> sv = roll(xv, batch * t.nlat_in, t.nlon_in, t.cin, s);
    std::vector<float> shifted(one.size());
    att.forward(batch, sq.data(), sk.data(), sv.data(), shifted.data());
    EXPECT_EQ(shifted, roll(one, batch * t.nlat_out, t.nlon_out, t.co, p * s));
  }
}

TEST(NeighborhoodUpsample, RejectsBadArguments) {
  std::mt19937 rng(5);
  sphere::NeighborhoodAttentionS2Config c = config(5, 8, Grid::equiangular, 9, 16, Grid::equiangular, 4, 2, 0.0);
  const sphere::AttentionS2Weights w = random_weights(c, rng);
  auto expect_error = [](auto&& fn, surrogate::ErrorCode code, const std::string& word) {
    try {
      fn();
      ADD_FAILURE() << "no exception; expected one naming " << word;
    } catch (const surrogate::Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(word), std::string::npos) << e.what();
    }
  };
  using surrogate::ErrorCode;
  sphere::NeighborhoodAttentionS2Config bad = c;
  bad.nlon_out = 12;  // neither a multiple of the other
  expect_error([&] { sphere::NeighborhoodAttentionS2(bad, w); }, ErrorCode::invalid_argument, "multiple");
  expect_error([&] { sphere::neighborhood_csr_scatter(5, 8, Grid::equiangular, 9, 12, Grid::equiangular, 0.5); },
               ErrorCode::invalid_argument, "nlon_out");
  expect_error([&] { sphere::neighborhood_csr_scatter(5, 8, Grid::equiangular, 9, 16, Grid::equiangular, -1.0); },
               ErrorCode::invalid_argument, "theta_cutoff");
  const sphere::NeighborhoodAttentionS2 att(c, w);
  EXPECT_DOUBLE_EQ(att.config().theta_cutoff, sphere::default_theta_cutoff(5, Grid::equiangular));
  std::vector<float> xq(static_cast<std::size_t>(9 * 16 * 4)), xk(static_cast<std::size_t>(5 * 8 * 4)), y(xq.size());
  expect_error([&] { att.forward(1, xq.data(), nullptr, nullptr, y.data()); }, ErrorCode::invalid_argument, "self-attention");
  // Output row 4 (the equator) reaches input rows 1..3: a key band of row 2 only is refused.
  const auto need = att.input_rows(4, 5);
  EXPECT_LT(need.first, 2);
  expect_error([&] { att.forward_rows(1, 4, 5, xq.data(), 2, 3, xk.data(), xk.data(), y.data()); },
               ErrorCode::invalid_argument, "reach input rows");
}

// The layer files between two grids of tests/data/sphere/models (exported by our exporter from the
// official modules: upsampling, downsampling, cross-attention): make_model refuses them with an
// Error(unsupported) that names the way to run them, and the operators built from the files by
// layer_file.hpp reproduce the official output (io.h5: the query on the output grid, key and value on
// the input grid) within 32 float32 ulps of the output's magnitude (one projection, one softmax and the
// output projection; the official float32 kernels have no float64 run to measure their own rounding).
TEST(NeighborhoodUpsample, LayerFilesBetweenTwoGridsRunAsOperators) {
  const std::filesystem::path dir = std::string(SURROGATE_TEST_DATA_DIR) + "/sphere/models";
  int ran = 0;
  bool upsampling = false;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (!std::filesystem::exists(e.path() / "model.h5")) continue;
    const surrogate::ModelFile file = surrogate::ModelFile::read((e.path() / "model.h5").string());
    if (file.architecture != "s2_attention" && file.architecture != "s2_neighborhood_attention") continue;
    if (file.config.get_int_list("in_shape") == file.config.get_int_list("out_shape")) continue;
    const std::string name = e.path().filename().string();
    try {
      surrogate::make_model(file);
      ADD_FAILURE() << name << ": make_model accepted a layer between two grids";
    } catch (const surrogate::Error& err) {
      EXPECT_EQ(err.code(), surrogate::ErrorCode::unsupported) << err.what();
      EXPECT_NE(std::string(err.what()).find("_from_file"), std::string::npos) << err.what();
    }
    sphere_test::H5Reader io((e.path() / "io.h5").string());
    std::vector<std::size_t> qs, ks, os;
    const std::vector<float> q = io.floats("/input", &qs), k = io.floats("/key", &ks), v = io.floats("/value");
    const std::vector<float> ref_nchw = io.floats("/output", &os);
    const int batch = static_cast<int>(qs[0]), cin = static_cast<int>(qs[1]), cout = static_cast<int>(os[1]);
    const std::vector<float> xq = to_channels_last(q, batch, cin), xk = to_channels_last(k, batch, cin),
                             xv = to_channels_last(v, batch, cin), ref = to_channels_last(ref_nchw, batch, cout);
    std::vector<float> out(ref.size(), std::nanf(""));
    if (file.architecture == "s2_attention") {
      const sphere::AttentionS2 att = sphere::attention_from_file(file);
      att.forward(batch, xq.data(), xk.data(), xv.data(), out.data());
    } else {
      const sphere::NeighborhoodAttentionS2 att = sphere::neighborhood_attention_from_file(file);
      upsampling = upsampling || att.config().nlon_out % att.config().nlon_in == 0;
      att.forward(batch, xq.data(), xk.data(), xv.data(), out.data());
    }
    double err = 0, mag = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      err = std::max(err, static_cast<double>(std::abs(out[i] - ref[i])));
      mag = std::max(mag, static_cast<double>(std::abs(ref[i])));
    }
    EXPECT_LE(err, 32 * 6e-8 * mag) << name;
    EXPECT_FALSE(std::isnan(err)) << name;
    std::printf("  %-34s max |ours - official| %.3g (max |out| %.3g)\n", name.c_str(), err, mag);
    ++ran;
  }
  EXPECT_GE(ran, 3);
  EXPECT_TRUE(upsampling) << "no upsampling layer file in " << dir;
  EXPECT_THROW(sphere::neighborhood_attention_from_file(
                   surrogate::ModelFile::read((dir / "s2_attention_self_qknorm" / "model.h5").string())),
               surrogate::Error);
}
