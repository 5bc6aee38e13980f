// The spherical families across MPI ranks (run by ctest at 1, 2, 3 and 4 ranks): every golden case of
// tests/data/sphere/models, its grid rows split over the ranks in several ways (contiguous in the
// canonical row-major latitude-longitude order, as the convention requires: even, uneven at random cut
// points that need not fall on latitude boundaries, all on rank 0, all on the last rank), against the
// single-process result computed on each rank: bitwise identical (the prediction of a point does not
// depend on the number of ranks), with 1 and 2 threads. Also the latitude-band pieces directly: the row
// exchange (ExchangePlan::from_ranges) against the known global array, SphericalTransformer::forward_bands
// on forced partitions (bands of one row, empty ranks) against the single-process forward, and the bytes
// a model's Plan moves per predict.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <random>

#include "golden.hpp"
#include "h5_io.hpp"
#include "surrogate/exchange.hpp"
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

// The Plan of a point set counts what its exchanges move (Plan::traffic): nothing sent at one rank; at
// several, the bytes sent summed over the ranks equal the bytes received (> 0); a second predict on the
// same plan moves the same bytes again and gives the same bits.
TEST(SphereMpi, PlanTrafficIsBalancedAndTheSameEveryPredict) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const std::string root = st::data_dir() + "/sphere/models/";
  for (const char* name : {"st_neighborhood_instance_latlon_cutoff", "st_sht_global_lobatto", "s2_attention_self_qknorm",
                           "s2_neighborhood_self"}) {
    const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, root + name + "/model.h5"));
    const st::Array x = st::read_array(root + name + "/io.h5", "input");  // (B, C, nlat, nlon)
    const index_t B = x.shape[0], C = x.shape[1], Pg = x.shape[2] * x.shape[3], n = B * Pg;
    const index_t begin = n * comm.rank() / comm.size(), end = n * (comm.rank() + 1) / comm.size();
    std::vector<float> in(static_cast<std::size_t>((end - begin) * C));
    std::vector<std::int64_t> ids;
    for (index_t r = begin; r < end; ++r) {
      ids.push_back(r / Pg);
      for (index_t c = 0; c < C; ++c)
        in[static_cast<std::size_t>((r - begin) * C + c)] =
            static_cast<float>(x.values[static_cast<std::size_t>(((r / Pg) * C + c) * Pg + r % Pg)]);
    }
    const auto layout = surrogate::SampleLayout::build(comm, end - begin, ids.data());
    const auto plan = model->plan(comm, layout);
    const int cout = model->out_channels();
    std::vector<float> first(static_cast<std::size_t>((end - begin) * cout)), second(first.size());
    model->predict(comm, *plan, in.data(), C, first.data(), cout);
    const surrogate::Traffic once = plan->traffic();
    model->predict(comm, *plan, in.data(), C, second.data(), cout);
    const surrogate::Traffic twice = plan->traffic();
    EXPECT_EQ(first, second) << name << ": a second predict on the same plan";
    EXPECT_EQ(twice.sent, 2 * once.sent) << name;
    EXPECT_EQ(twice.received, 2 * once.received) << name;
    EXPECT_EQ(twice.local, 2 * once.local) << name;
    EXPECT_EQ(twice.moves, 2 * once.moves) << name;
    EXPECT_GT(once.moves, 0u) << name;
    std::uint64_t totals[2] = {once.sent, once.received};
    MPI_Allreduce(MPI_IN_PLACE, totals, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    if (comm.size() == 1) {
      EXPECT_EQ(once.sent, 0u) << name;
      EXPECT_EQ(once.received, 0u) << name;
      EXPECT_GT(once.local, 0u) << name;
    } else {
      EXPECT_EQ(totals[0], totals[1]) << name << ": bytes sent and received over all ranks";
      EXPECT_GT(totals[0], 0u) << name;
    }
    if (comm.rank() == 0)
      std::printf("%s, %d ranks: rank 0 sends %llu, receives %llu, copies %llu bytes in %llu moves per predict\n", name,
                  comm.size(), static_cast<unsigned long long>(once.sent), static_cast<unsigned long long>(once.received),
                  static_cast<unsigned long long>(once.local), static_cast<unsigned long long>(once.moves));
  }
}

namespace {

namespace sphere = surrogate::sphere;

/// Value of column c of global row g in the fetch tests.
float row_value(index_t g, int c) { return static_cast<float>(g * 8 + c); }

}  // namespace

TEST(SphereMpi, ExchangePlanFromRangesDeliversAnyRangesFromTheirOwners) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank(), W = 3, ld = W + 2;
  const index_t N = 97;
  for (unsigned seed : {1u, 2u, 3u}) {
    // The rows cut into 3P pieces at random points (some empty), piece i held by rank i % P: several
    // disjoint ranges per rank, stored one after the other (in reverse order) with a padded stride.
    std::mt19937 gen(seed);
    std::uniform_int_distribution<index_t> cut(0, N);
    std::vector<index_t> cuts{0, N};
    for (int i = 1; i < 3 * P; ++i) cuts.push_back(cut(gen));
    std::sort(cuts.begin(), cuts.end());
    std::vector<float> storage;
    std::vector<sphere::RowRange> held;
    std::vector<std::int64_t> first_row;
    for (int i = 3 * P - 1; i >= 0; --i) {
      if (i % P != me) continue;
      const index_t b = cuts[static_cast<std::size_t>(i)], e = cuts[static_cast<std::size_t>(i) + 1];
      held.push_back({b, e});
      first_row.push_back(static_cast<std::int64_t>(storage.size()) / ld);
      for (index_t g = b; g < e; ++g) {
        for (int c = 0; c < W; ++c) storage.push_back(row_value(g, c));
        storage.insert(storage.end(), ld - W, -1.0f);
      }
    }
    const index_t source_rows = static_cast<index_t>(storage.size()) / ld;
    // Each rank wants its own random ranges (overlapping, unordered, empty ones included).
    std::mt19937 mine(seed * 100 + static_cast<unsigned>(me));
    std::uniform_int_distribution<index_t> at(0, N);
    std::vector<sphere::RowRange> wanted;
    for (int i = 0; i < 5; ++i) {
      index_t a = at(mine), b = at(mine);
      if (a > b) std::swap(a, b);
      wanted.push_back({a, i == 2 ? a : b});
    }
    const auto plan = surrogate::ExchangePlan::from_ranges(comm, source_rows, held, first_row, wanted);
    std::vector<float> got(static_cast<std::size_t>(plan.target_rows() * W));
    plan.forward(storage.data(), ld, got.data(), W, W);
    std::vector<float> expected;
    for (const auto& r : wanted)
      for (index_t g = r.begin; g < r.end; ++g)
        for (int c = 0; c < W; ++c) expected.push_back(row_value(g, c));
    EXPECT_EQ(got, expected) << "seed " << seed << " rank " << me;
    // A row nobody holds is an error on every rank.
    std::vector<sphere::RowRange> beyond = wanted;
    if (me == P - 1) beyond.push_back({N - 1, N + 1});
    EXPECT_THROW(surrogate::ExchangePlan::from_ranges(comm, source_rows, held, first_row, beyond), surrogate::Error);
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
      const sphere::RowRange held{b0, b1};
      const std::int64_t first_row = 0;
      const int g0 = image.begin(me), g1 = image.end(me);
      std::vector<float> band(static_cast<std::size_t>(B * (g1 - g0) * c.nlon * c.out_chans));
      const sphere::TransformerBands bands = net.plan_bands(comm, static_cast<int>(B), image, {&held, 1}, {&first_row, 1}, b1 - b0);
      net.forward_bands(bands, rows.data() + b0 * C, C, band.data());
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
// its output band reads (input_rows: the table entries' halo) by band_exchange and computes its output band
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
    const auto [i0, i1] = conv.input_rows(ob, oe);
    const auto wanted = sphere::band_ranges(B, Pi, c.nlon_in, i0, i1);
    const auto exchange = sphere::band_exchange(comm, B, Pi, c.nlon_in, ib, ie, wanted);
    std::vector<float> halo(static_cast<std::size_t>(exchange.target_rows() * c.in_channels));
    exchange.forward(band.data(), c.in_channels, halo.data());
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
