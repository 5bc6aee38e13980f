// The spherical families across MPI ranks (run by ctest at 1, 2, 3 and 4 ranks): every golden case of
// tests/data/sphere/models, its grid rows split over the ranks in several ways (contiguous in the
// canonical row-major latitude-longitude order, as the convention requires: even, uneven at random cut
// points that need not fall on latitude boundaries, all on rank 0, all on the last rank), against the
// single-process result computed on each rank: bitwise identical (the prediction of a point does not
// depend on the number of ranks), with 1 and 2 threads. Also the latitude-band pieces directly: the row
// fetch collective (fetch_rows) against the known global array, and SphericalTransformer::forward_bands
// on forced partitions (bands of one row, empty ranks) against the single-process forward.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <numeric>
#include <random>

#include "golden.hpp"
#include "h5_io.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"
#include "surrogate/sphere/bands.hpp"
#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace st = surrogate::testing;
using surrogate::index_t;

namespace {

std::vector<std::string> case_dirs() {
  std::vector<std::string> dirs;
  const std::filesystem::path root = std::filesystem::path(st::data_dir()) / "sphere" / "models";
  if (std::filesystem::is_directory(root))
    for (const auto& e : std::filesystem::directory_iterator(root))
      if (std::filesystem::exists(e.path() / "model.h5")) {
        const auto f = surrogate::ModelFile::read((e.path() / "model.h5").string());
        // layers between two grids are not generic Models (tests/sphere/test_sphere_models.cpp)
        if (!f.config.has("out_shape") || f.config.get_int_list("out_shape") == f.config.get_int_list("in_shape"))
          dirs.push_back(e.path().string());
      }
  std::sort(dirs.begin(), dirs.end());
  return dirs;
}

/// [begin, end) of the global rows this rank owns, for each split.
std::vector<std::pair<std::string, std::pair<index_t, index_t>>> splits(index_t n, int rank, int size) {
  std::vector<std::pair<std::string, std::pair<index_t, index_t>>> out;
  out.push_back({"even", {n * rank / size, n * (rank + 1) / size}});
  std::mt19937 gen(4321);
  std::uniform_int_distribution<index_t> cut(0, n);
  std::vector<index_t> cuts = {0, n};
  for (int r = 1; r < size; ++r) cuts.push_back(cut(gen));
  std::sort(cuts.begin(), cuts.end());
  out.push_back({"uneven", {cuts[static_cast<std::size_t>(rank)], cuts[static_cast<std::size_t>(rank) + 1]}});
  out.push_back({"all-on-rank-0", {0, rank == 0 ? n : 0}});
  out.push_back({"all-on-last-rank", {rank == size - 1 ? 0 : n, n}});
  return out;
}

/// Predictions of rows [begin, end) of the canonical order (features: rows x cin).
std::vector<float> predict(const surrogate::Comm& comm, surrogate::Model& model, const std::vector<float>& features,
                           index_t points_per_sample, index_t begin, index_t end, int threads) {
  const int cin = model.in_channels(), cout = model.out_channels();
  std::vector<std::int64_t> ids;
  for (index_t r = begin; r < end; ++r) ids.push_back(r / points_per_sample);
  const auto layout = surrogate::SampleLayout::build(comm, end - begin, ids.data());
  std::vector<float> out(static_cast<std::size_t>((end - begin) * cout));
  surrogate::RunOptions options;
  options.threads = threads;
  model.predict(comm, layout, features.data() + begin * cin, cin, out.data(), cout, options);
  return out;
}

}  // namespace

TEST(SphereMpi, PredictionsDoNotDependOnTheRanks) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  surrogate::SelfComm self;
  const auto dirs = case_dirs();
  ASSERT_FALSE(dirs.empty());
  for (const std::string& dir : dirs) {
    const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, dir + "/model.h5"));
    const st::Array x = st::read_array(dir + "/io.h5", "input");  // (B, C, nlat, nlon)
    const index_t B = x.shape[0], C = x.shape[1], P = x.shape[2] * x.shape[3], n = B * P;
    std::vector<float> rows(static_cast<std::size_t>(n * C));
    for (index_t b = 0; b < B; ++b)
      for (index_t c = 0; c < C; ++c)
        for (index_t p = 0; p < P; ++p)
          rows[static_cast<std::size_t>((b * P + p) * C + c)] = static_cast<float>(x.values[static_cast<std::size_t>((b * C + c) * P + p)]);
    const std::vector<float> single = predict(self, *model, rows, P, 0, n, 1);
    const int cout = model->out_channels();
    for (const auto& [name, range] : splits(n, comm.rank(), comm.size()))
      for (int threads : {1, 2}) {
        const std::vector<float> mine = predict(comm, *model, rows, P, range.first, range.second, threads);
        const bool identical = std::equal(mine.begin(), mine.end(), single.begin() + range.first * cout);
        EXPECT_TRUE(identical) << std::filesystem::path(dir).filename() << " split " << name << " threads " << threads
                               << " on " << comm.size() << " ranks: not bitwise identical to one process";
      }
  }
}

namespace {

namespace sphere = surrogate::sphere;

/// Value of column c of global row g in the fetch tests.
float row_value(index_t g, int c) { return static_cast<float>(g * 8 + c); }

}  // namespace

TEST(SphereMpi, FetchRowsDeliversAnyRangesFromTheirOwners) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank(), W = 3;
  const index_t N = 97;
  for (unsigned seed : {1u, 2u, 3u}) {
    // The rows cut into 3P pieces at random points (some empty), piece i held by rank i % P: several
    // disjoint ranges per rank, stored with a padded stride.
    std::mt19937 gen(seed);
    std::uniform_int_distribution<index_t> cut(0, N);
    std::vector<index_t> cuts{0, N};
    for (int i = 1; i < 3 * P; ++i) cuts.push_back(cut(gen));
    std::sort(cuts.begin(), cuts.end());
    std::vector<std::vector<float>> storage;
    std::vector<sphere::HeldRows> held;
    for (int i = 0; i < 3 * P; ++i) {
      if (i % P != me) continue;
      const index_t b = cuts[static_cast<std::size_t>(i)], e = cuts[static_cast<std::size_t>(i) + 1];
      storage.emplace_back(static_cast<std::size_t>((e - b) * (W + 2)), -1.0f);
      for (index_t g = b; g < e; ++g)
        for (int c = 0; c < W; ++c) storage.back()[static_cast<std::size_t>((g - b) * (W + 2) + c)] = row_value(g, c);
      held.push_back({{b, e}, storage.back().data(), W + 2});
    }
    // Each rank wants its own random ranges (overlapping, unordered, empty ones included).
    std::mt19937 mine(seed * 100 + static_cast<unsigned>(me));
    std::uniform_int_distribution<index_t> at(0, N);
    std::vector<sphere::RowRange> wanted;
    for (int i = 0; i < 5; ++i) {
      index_t a = at(mine), b = at(mine);
      if (a > b) std::swap(a, b);
      wanted.push_back({a, i == 2 ? a : b});
    }
    const std::vector<float> got = sphere::fetch_rows(comm, held, wanted, W);
    std::vector<float> expected;
    for (const auto& r : wanted)
      for (index_t g = r.begin; g < r.end; ++g)
        for (int c = 0; c < W; ++c) expected.push_back(row_value(g, c));
    EXPECT_EQ(got, expected) << "seed " << seed << " rank " << me;
    // A row nobody holds is an error on every rank.
    std::vector<sphere::RowRange> beyond = wanted;
    if (me == P - 1) beyond.push_back({N - 1, N + 1});
    EXPECT_THROW(sphere::fetch_rows(comm, held, beyond, W), surrogate::Error);
  }
}

TEST(SphereMpi, TransformerBandsOfOneRowAndEmptyRanks) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const std::filesystem::path root = std::filesystem::path(st::data_dir()) / "sphere" / "models";
  for (const char* name : {"st_neighborhood_instance_latlon_cutoff", "st_global_instance_spectral",
                           "st_sht_neighborhood_instance", "st_sht_global_lobatto"}) {
    const std::string dir = (root / name).string();
    const auto file = surrogate::ModelFile::read(comm, dir + "/model.h5");
    const sphere::SphericalTransformer net(file);
    const auto& c = net.config();
    const st::Array x = st::read_array(dir + "/io.h5", "input");  // (B, C, nlat, nlon)
    const index_t B = x.shape[0], C = x.shape[1], Pg = x.shape[2] * x.shape[3], n = B * Pg;
    std::vector<float> rows(static_cast<std::size_t>(n * C));
    for (index_t b = 0; b < B; ++b)
      for (index_t ch = 0; ch < C; ++ch)
        for (index_t p = 0; p < Pg; ++p)
          rows[static_cast<std::size_t>((b * Pg + p) * C + ch)] = static_cast<float>(x.values[static_cast<std::size_t>((b * C + ch) * Pg + p)]);
    std::vector<float> single(static_cast<std::size_t>(n * c.out_chans));
    net.forward(static_cast<int>(B), rows.data(), single.data());

    // Forced image partitions: scale_factor rows per rank but the last (internal bands of about one row),
    // one row per rank but the last, everything on rank 0 except one row on the last (empty ranks between).
    std::vector<std::pair<std::string, sphere::BandPartition>> partitions;
    for (int per : {c.scale_factor, 1}) {
      sphere::BandPartition p;
      for (int r = 0; r < P; ++r) p.first.push_back(std::min(c.nlat, r * per));
      p.first.push_back(c.nlat);
      partitions.push_back({"rows per rank " + std::to_string(per), p});
    }
    sphere::BandPartition lopsided;
    lopsided.first.push_back(0);
    for (int r = 1; r < P; ++r) lopsided.first.push_back(c.nlat - 1);
    lopsided.first.push_back(c.nlat);
    partitions.push_back({"lopsided", lopsided});
    int thinnest_internal = c.nlat;
    for (const auto& [label, image] : partitions) {
      const auto inner = net.internal_bands(image);
      for (int r = 0; r < P; ++r)
        if (inner.rows(r) > 0) thinnest_internal = std::min(thinnest_internal, inner.rows(r));
      // The input held in an uneven split that ignores the bands (rank r: rows [n r^2 / P^2, ...)).
      const index_t b0 = n * me * me / (P * P), b1 = n * (me + 1) * (me + 1) / (P * P);
      const sphere::HeldRows held{{b0, b1}, rows.data() + b0 * C, C};
      const int g0 = image.begin(me), g1 = image.end(me);
      std::vector<float> band(static_cast<std::size_t>(B * (g1 - g0) * c.nlon * c.out_chans));
      net.forward_bands(comm, static_cast<int>(B), image, std::span<const sphere::HeldRows>(&held, 1), band.data());
      std::vector<float> expected;
      for (index_t b = 0; b < B; ++b) {
        const auto first = single.begin() + static_cast<std::ptrdiff_t>((b * Pg + static_cast<index_t>(g0) * c.nlon) * c.out_chans);
        expected.insert(expected.end(), first, first + static_cast<std::ptrdiff_t>((g1 - g0) * c.nlon * c.out_chans));
      }
      EXPECT_EQ(band, expected) << name << " partition " << label << " on " << P << " ranks, rank " << me;
    }
    if (P >= 3) {
      EXPECT_EQ(thinnest_internal, 1) << name << ": no internal band of one row was exercised";
    }
  }
}

// DiscoConvTransposeS2 on latitude bands: each rank holds a band of the input grid, fetches the input rows
// its output band reads (input_rows: the table entries' halo) with fetch_rows and computes its output band
// with forward_rows; bitwise the single-process forward, for several partitions of both grids (empty
// bands included).
TEST(SphereMpi, DiscoTransposeBandsAreBitwiseTheSingleProcessResult) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank(), B = 2;
  sphere::DiscoConfig c;
  c.in_channels = 6;
  c.out_channels = 4;
  c.nlat_in = 9;
  c.nlon_in = 16;
  c.grid_in = sphere::Grid::legendre_gauss;
  c.nlat_out = 17;
  c.nlon_out = 32;
  c.kernel_shape = {3, 4};
  c.groups = 2;
  c.bias = true;
  const int K = sphere::filter_basis_size(c.basis, c.kernel_shape);
  std::mt19937 gen(99);  // the same data on every rank
  std::normal_distribution<float> nd;
  auto randn = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = nd(gen);
    return v;
  };
  const auto w = randn(static_cast<std::size_t>(c.out_channels * (c.in_channels / c.groups) * K));
  const auto bias = randn(static_cast<std::size_t>(c.out_channels));
  const index_t Pi = static_cast<index_t>(c.nlat_in) * c.nlon_in, Po = static_cast<index_t>(c.nlat_out) * c.nlon_out;
  const auto x = randn(static_cast<std::size_t>(B * Pi * c.in_channels));
  const sphere::DiscoConvTransposeS2 conv(c, w, bias);
  std::vector<float> whole(static_cast<std::size_t>(B * Po * c.out_channels));
  conv.forward(B, x.data(), whole.data());

  auto on_one = [&](int nlat, int rank) {
    sphere::BandPartition part;
    for (int r = 0; r <= P; ++r) part.first.push_back(r <= rank ? 0 : nlat);
    return part;
  };
  const std::vector<std::pair<std::string, std::pair<sphere::BandPartition, sphere::BandPartition>>> partitions = {
      {"balanced", {sphere::balanced_bands(c.nlat_in, P), sphere::balanced_bands(c.nlat_out, P)}},
      {"input on the last rank", {on_one(c.nlat_in, P - 1), sphere::balanced_bands(c.nlat_out, P)}},
      {"output on rank 0", {sphere::balanced_bands(c.nlat_in, P), on_one(c.nlat_out, 0)}}};
  for (const auto& [name, parts] : partitions) {
    const auto& [in_part, out_part] = parts;
    const int ib = in_part.begin(me), ie = in_part.end(me), ob = out_part.begin(me), oe = out_part.end(me);
    // this rank's input band, sample-major
    std::vector<float> band;
    for (int b = 0; b < B; ++b)
      band.insert(band.end(), x.begin() + (b * Pi + static_cast<index_t>(ib) * c.nlon_in) * c.in_channels,
                  x.begin() + (b * Pi + static_cast<index_t>(ie) * c.nlon_in) * c.in_channels);
    const auto held = sphere::band_held(B, Pi, c.nlon_in, ib, ie, band.data(), c.in_channels);
    const auto [i0, i1] = conv.input_rows(ob, oe);
    const auto wanted = sphere::band_ranges(B, Pi, c.nlon_in, i0, i1);
    const std::vector<float> halo = sphere::fetch_rows(comm, held, wanted, c.in_channels);
    std::vector<float> part(static_cast<std::size_t>(B) * static_cast<std::size_t>(oe - ob) * c.nlon_out * c.out_channels);
    conv.forward_rows(B, halo.data(), i0, i1, part.data(), ob, oe);
    const std::size_t per_sample = static_cast<std::size_t>(oe - ob) * c.nlon_out * c.out_channels;
    for (int b = 0; b < B; ++b)
      for (std::size_t i = 0; i < per_sample; ++i)
        ASSERT_EQ(part[static_cast<std::size_t>(b) * per_sample + i],
                  whole[static_cast<std::size_t>((b * Po + static_cast<index_t>(ob) * c.nlon_out) * c.out_channels) + i])
            << name << ": rank " << me << " of " << P << ", sample " << b << ", value " << i;
    if (oe > ob && 2 * (oe - ob) <= c.nlat_out) {  // at most half of the output grid
      EXPECT_LT(i1 - i0, c.nlat_in) << name << ": a band's halo should not need the whole input grid";
    }
  }
}
