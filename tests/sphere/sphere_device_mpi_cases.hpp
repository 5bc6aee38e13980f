// The cases of the sphere device test under mpirun (test_gpu_sphere_mpi.cpp): the golden single-layer
// models and transformers, the unequal spreads of their grid rows over the ranks, the registered model's
// predict on a rank's part with the parts gathered, and the comparisons: the gathered device result bitwise
// the one-process device result (Model::predict with cuda_device on a SelfComm: the whole-grid device
// forward) and within twice the float32 bound of test_gpu_sphere_transformer.cpp of the CPU forward.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "device_arrays.hpp"
#include "golden.hpp"
#include "h5_io.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/mpi_comm.hpp"

namespace sphere_device_mpi {

namespace st = surrogate::testing;
using surrogate::index_t;

/// A golden self-attention layer file: its input rows (B*nlat*nlon x cin, canonical order) and the bound.
struct Case {
  std::string name, dir;
  std::vector<float> rows;
  index_t batch = 0, points = 0;
  double tol = 0.0;  // the float32 bound of the device (and CPU) forward against the reference
  index_t n() const { return batch * points; }
};

/// (B, C, nlat, nlon) -> rows (B*nlat*nlon, C).
inline std::vector<double> to_rows(const st::Array& a) {
  const index_t B = a.shape[0], C = a.shape[1], P = a.shape[2] * a.shape[3];
  std::vector<double> r(a.values.size());
  for (index_t b = 0; b < B; ++b)
    for (index_t c = 0; c < C; ++c)
      for (index_t p = 0; p < P; ++p)
        r[static_cast<std::size_t>((b * P + p) * C + c)] = a.values[static_cast<std::size_t>((b * C + c) * P + p)];
  return r;
}

/// The bound, as test_gpu_sphere_transformer.cpp: 4 gap + 16 u' mag where the file has a
/// float64 output (gap = |official float32 - float64|), else 32 u' mag (u' = 6e-8, mag = max |output|).
inline Case load(const std::string& name) {
  Case c;
  c.name = name;
  c.dir = st::data_dir() + "/sphere/models/" + name;
  const st::Array x = st::read_array(c.dir + "/io.h5", "input");
  const std::vector<double> xr = to_rows(x);
  c.rows.assign(xr.begin(), xr.end());
  c.batch = x.shape[0];
  c.points = x.shape[2] * x.shape[3];
  const std::vector<double> ref32 = to_rows(st::read_array(c.dir + "/io.h5", "output"));
  const bool has64 = st::has_dataset(c.dir + "/io.h5", "output_f64");
  const std::vector<double> ref64 = has64 ? to_rows(st::read_array(c.dir + "/io.h5", "output_f64")) : ref32;
  double mag = 0.0, gap = 0.0;
  for (std::size_t i = 0; i < ref64.size(); ++i) {
    mag = std::max(mag, std::fabs(ref64[i]));
    gap = std::max(gap, std::fabs(ref32[i] - ref64[i]));
  }
  c.tol = has64 ? 4 * gap + 16 * 6e-8 * mag : 32 * 6e-8 * mag;
  return c;
}

/// Rows [begin, end) of the canonical order on each rank, unequal: rank 0 about 55 % of the rows (cut
/// inside a latitude row), the others the rest in shares of 1, 2, 3, ... (cuts off the latitude
/// boundaries); `last_empty`: the last rank holds nothing (at one rank: the whole).
inline std::pair<index_t, index_t> piece(index_t n, int rank, int size, bool last_empty) {
  std::vector<index_t> cuts{0};
  const int holders = last_empty && size > 1 ? size - 1 : size;
  if (holders == 1) {
    cuts.push_back(n);
  } else {
    cuts.push_back(n * 55 / 100 + 3);
    index_t weights = 0;
    for (int r = 1; r < holders; ++r) weights += r;
    index_t acc = 0;
    for (int r = 1; r < holders; ++r) {
      acc += r;
      cuts.push_back(r == holders - 1 ? n : cuts[1] + (n - cuts[1]) * acc / weights + 1);
    }
  }
  while (static_cast<int>(cuts.size()) < size + 1) cuts.push_back(n);
  return {cuts[static_cast<std::size_t>(rank)], cuts[static_cast<std::size_t>(rank) + 1]};
}

/// The layout of rows [begin, end) of the canonical order (each row's sample).
inline surrogate::SampleLayout layout_of(const surrogate::Comm& comm, const Case& c, index_t begin, index_t end) {
  std::vector<std::int64_t> sample;
  for (index_t r = begin; r < end; ++r) sample.push_back(r / c.points);
  return surrogate::SampleLayout::build(comm, end - begin, sample.data());
}

/// Model::predict of rows [begin, end) with `plan` (a plan of layout_of(begin, end); input stride cin + 3,
/// output stride cout + 2: the padding must stay untouched); returns the rows (cout wide).
inline std::vector<float> predict(const surrogate::Comm& comm, surrogate::Model& model, surrogate::Plan& plan,
                                  const Case& c, index_t begin, index_t end, int cuda_device,
                                  surrogate::Precision precision = surrogate::Precision::fp32) {
  const int cin = model.in_channels(), cout = model.out_channels();
  const index_t ld_in = cin + 3, ld_out = cout + 2, m = end - begin;
  std::vector<float> in(static_cast<std::size_t>(m * ld_in), 99.0f), out(static_cast<std::size_t>(m * ld_out), -7.0f);
  for (index_t r = 0; r < m; ++r)
    std::copy_n(c.rows.data() + (begin + r) * cin, cin, in.data() + r * ld_in);
  surrogate::RunOptions options;
  options.cuda_device = cuda_device;
  options.precision = precision;
  model.predict(comm, plan, in.data(), ld_in, out.data(), ld_out, options);
  if (cuda_device >= 0)  // the caller's device arrays: the same bits, the padding untouched
    surrogate::testing::expect_device_arrays_match(comm, model, plan, in, ld_in, out, ld_out, -7.0f, options, c.name);
  std::vector<float> rows(static_cast<std::size_t>(m * cout));
  for (index_t r = 0; r < m; ++r) {
    for (int k = cout; k < ld_out; ++k)
      EXPECT_EQ(out[static_cast<std::size_t>(r * ld_out + k)], -7.0f) << c.name << ": padding written, row " << r;
    std::copy_n(out.data() + r * ld_out, cout, rows.data() + r * cout);
  }
  return rows;
}

/// The same with a plan of its own (Model::plan, then predict).
inline std::vector<float> predict(const surrogate::Comm& comm, surrogate::Model& model, const Case& c, index_t begin,
                                  index_t end, int cuda_device,
                                  surrogate::Precision precision = surrogate::Precision::fp32) {
  const auto plan = model.plan(comm, layout_of(comm, c, begin, end));
  return predict(comm, model, *plan, c, begin, end, cuda_device, precision);
}

/// Every rank's rows in rank order (the whole output).
inline std::vector<float> gather(const std::vector<float>& mine) {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int count = static_cast<int>(mine.size());
  std::vector<int> counts(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size), 0);
  MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 1; r < size; ++r)
    offsets[static_cast<std::size_t>(r)] = offsets[static_cast<std::size_t>(r) - 1] + counts[static_cast<std::size_t>(r) - 1];
  std::vector<float> all(static_cast<std::size_t>(offsets.back() + counts.back()));
  MPI_Allgatherv(mine.data(), count, MPI_FLOAT, all.data(), counts.data(), offsets.data(), MPI_FLOAT, MPI_COMM_WORLD);
  return all;
}

/// The first index where a and b differ (bitwise; a.size() when none).
inline std::size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return i;
  return a.size();
}

inline double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}

/// The checks of one layer case on `device` (every rank): for both spreads, the gathered device result
/// against the one-process device result (bitwise) and the one-process CPU result (2 x tol), and a
/// second call on the same Plan (the device object and the band's neighbour lists kept) giving the same bits.
inline void expect_one_process_device_bits(const std::string& name, int device) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const Case c = load(name);
  const auto file = surrogate::ModelFile::read(comm, c.dir + "/model.h5");
  const auto single = surrogate::make_model(file);
  const std::vector<float> one_device = predict(self, *single, c, 0, c.n(), device);
  const std::vector<float> one_cpu = predict(self, *single, c, 0, c.n(), -1);
  ASSERT_LE(max_diff(one_device, one_cpu), 2 * c.tol) << name << ": the one-process device forward";
  for (const bool last_empty : {false, true}) {
    const std::string what = name + (last_empty ? " (last rank without rows)" : " (rank 0 ~55 %)") + " on " +
                             std::to_string(comm.size()) + " ranks";
    const auto model = surrogate::make_model(file);
    const auto [begin, end] = piece(c.n(), comm.rank(), comm.size(), last_empty);
    const auto plan = model->plan(comm, layout_of(comm, c, begin, end));
    const std::vector<float> got = gather(predict(comm, *model, *plan, c, begin, end, device));
    EXPECT_EQ(first_difference(got, one_device), got.size()) << what << ": not the one-process device result";
    EXPECT_LE(max_diff(got, one_cpu), 2 * c.tol) << what << ": CPU forward";
    const std::vector<float> again = gather(predict(comm, *model, *plan, c, begin, end, device));
    EXPECT_EQ(first_difference(again, got), got.size()) << what << ": a second call";
    if (comm.rank() == 0)
      std::printf("%s: |device - CPU| %.3g (bound %.3g)\n", what.c_str(), max_diff(got, one_cpu), 2 * c.tol);
  }
}

}  // namespace sphere_device_mpi
