// The cases of the BSA device test under mpirun (test_gpu_bsa_mpi.cpp): the golden cases, the uneven spread
// of their points over the ranks, the registered model's predict on a rank's part, and the comparisons.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ball_golden_checks.hpp"
#include "bsa/cuda/device.hpp"
#include "device_arrays.hpp"
#include "golden.hpp"
#include "h5_io.hpp"
#include "shapenet_wrapped.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace bsa_device_mpi {

namespace bt = surrogate::balltree;
namespace st = surrogate::testing;

struct Golden {
  std::string path;
  surrogate::ModelFile file;  // the model (path's, or a variant of it)
  std::vector<float> features, positions;
  std::vector<double> exact;
  std::vector<std::int64_t> offsets{0}, sample;  // sample offsets; sample of every point
  int dim = 0, cin = 0;
  bt::Batch batch() const { return bt::Batch::from_offsets(offsets); }
  std::int64_t points() const { return offsets.back(); }
};

inline Golden load(const std::string& name) {
  Golden g;
  g.path = st::data_dir() + "/bsa/bsa_" + name + ".h5";
  g.file = surrogate::ModelFile::read(g.path);
  g.features = st::to_float(st::read_array(g.path, "/golden/features").values);
  g.positions = st::to_float(st::read_array(g.path, "/golden/positions").values);
  g.exact = st::read_array(g.path, "/golden/output_f64").values;
  std::int64_t b = 0;
  for (const double s : st::read_array(g.path, "/golden/sample_sizes").values) {
    g.offsets.push_back(g.offsets.back() + static_cast<std::int64_t>(s));
    g.sample.insert(g.sample.end(), static_cast<std::size_t>(s), b++);
  }
  g.dim = static_cast<int>(g.positions.size() / g.sample.size());
  g.cin = static_cast<int>(g.features.size() / g.sample.size());
  return g;
}

/// The case's first sample alone (BSA's samples do not interact: the official output of its points is
/// theirs in the batch).
inline Golden first_sample(const Golden& all) {
  Golden g = all;
  const auto points = static_cast<std::size_t>(all.offsets[1]);
  g.offsets = {0, all.offsets[1]};
  g.sample.resize(points);
  g.features.resize(points * static_cast<std::size_t>(g.cin));
  g.positions.resize(points * static_cast<std::size_t>(g.dim));
  g.exact.resize(all.exact.size() / all.sample.size() * points);
  return g;
}

/// The case's model inside the ShapeNet-Car wrapper (make_bsa_cli_inputs' construction: c_in 6 Fourier
/// features, seeded random pos_enc, embedding and pred_head weights): inputs are the positions only, the
/// output one value a point; `exact` is left empty (no float64 reference).
inline Golden shapenet(const Golden& base) {
  Golden g = base;
  g.file = bsa_testing::shapenet_wrapped(base.file, base.dim);
  g.features.clear();
  g.exact.clear();
  g.cin = 0;
  return g;
}

/// This rank's points: a fixed shuffle of the global ids, rank r taking ids in proportion to r + 1.
struct Part {
  std::vector<std::int64_t> ids, sample;
  std::vector<float> positions;
  std::int64_t size() const { return static_cast<std::int64_t>(ids.size()); }
  std::vector<float> rows_of(const std::vector<float>& all, int width) const {
    std::vector<float> rows;
    for (const std::int64_t i : ids) rows.insert(rows.end(), all.begin() + i * width, all.begin() + (i + 1) * width);
    rows.resize(std::max<std::size_t>(rows.size(), 1));  // a valid pointer on a rank without points
    return rows;
  }
};

inline Part deal(const Golden& g, int rank, int size) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(g.points()));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(2026);
  std::shuffle(order.begin(), order.end(), rng);
  const std::int64_t weight = static_cast<std::int64_t>(size) * (size + 1) / 2;
  const std::int64_t first = g.points() * (rank * (rank + 1) / 2) / weight;
  const std::int64_t last = g.points() * ((rank + 1) * (rank + 2) / 2) / weight;
  Part p;
  for (std::int64_t k = first; k < last; ++k) {
    const std::int64_t i = order[static_cast<std::size_t>(k)];
    p.ids.push_back(i);
    p.sample.push_back(g.sample[static_cast<std::size_t>(i)]);
  }
  p.positions = p.rows_of(g.positions, g.dim);
  return p;
}

/// The model's plan of this rank's part.
inline std::unique_ptr<surrogate::Plan> plan_of(const surrogate::Comm& comm, surrogate::Model& model, const Golden& g,
                                                const Part& p) {
  const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, p.size(), p.sample.data());
  surrogate::PointGeometry geometry;
  geometry.positions = p.positions.data();
  geometry.ld_positions = g.dim;
  geometry.global_ids = p.ids.data();
  return model.plan(comm, layout, geometry);
}

/// Model::predict on `plan` (plan_of this rank's part) with the part's rows of `features`: rows of the
/// model's outputs, in the part's order.
inline std::vector<float> predict(const surrogate::Comm& comm, surrogate::Model& model, surrogate::Plan& plan,
                                  const Golden& g, const Part& p, const std::vector<float>& features,
                                  const surrogate::RunOptions& options) {
  const std::vector<float> in = p.rows_of(features, g.cin);
  const int cout = model.out_channels();
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(1, p.size() * cout)));
  model.predict(comm, plan, in.data(), g.cin, out.data(), cout, options);
  if (options.cuda_device >= 0)  // the caller's device arrays: the same bits
    surrogate::testing::expect_device_arrays_match(comm, model, plan, in, g.cin, out, cout, 0.0f, options, "bsa");
  out.resize(static_cast<std::size_t>(p.size() * cout));
  return out;
}

/// The same on a plan made for this call.
inline std::vector<float> predict(const surrogate::Comm& comm, surrogate::Model& model, const Golden& g, const Part& p,
                                  const std::vector<float>& features, const surrogate::RunOptions& options) {
  const std::unique_ptr<surrogate::Plan> plan = plan_of(comm, model, g, p);
  return predict(comm, model, *plan, g, p, features, options);
}

/// all = rank 0's values, on every rank.
inline void broadcast(std::vector<float>& all) {
  auto count = static_cast<long long>(all.size());
  MPI_Bcast(&count, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  all.resize(static_cast<std::size_t>(count));
  MPI_Bcast(all.data(), static_cast<int>(count), MPI_FLOAT, 0, MPI_COMM_WORLD);
}

/// Rows of `all` (points x width, golden order) for the part's ids.
inline std::vector<float> rows_for(const Part& p, const std::vector<float>& all, int width) {
  std::vector<float> rows = p.rows_of(all, width);
  rows.resize(static_cast<std::size_t>(p.size() * width));
  return rows;
}

/// Values that differ in bits (NaN never equal).
inline std::int64_t bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::numeric_limits<std::int64_t>::max();
  std::int64_t count = 0;
  for (std::size_t i = 0; i < a.size(); ++i) count += a[i] == b[i] ? 0 : 1;
  return count;
}

inline double max_error(const std::vector<float>& got, const std::vector<float>& want) {
  double m = 0.0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    m = std::max(m, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
  return m;
}

inline double max_over_ranks(double v) {
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

inline std::vector<float> shifted(const std::vector<float>& v) {
  std::vector<float> out = v;
  for (float& x : out) x = 0.5f * x + 0.25f;
  return out;
}

/// Model::predict with cuda_device = `device` on this rank's part of the golden case `name`, against
/// the one-rank device forward of the whole batch (bsa::detail::make_bsa_cuda_forward(...)->forward on
/// rank 0): bitwise; within 8e-6 max|y| (the float32 bound of the one-rank device tests) of the CPU
/// forward; a second call (kept plan and device geometry) the same bits; new features the one-rank
/// forward's bits for them. A case in the ShapeNet-Car wrapper (shapenet()) has no features: its one
/// value a point against the wrapped forwards (forward_shapenet on the CPU), the bound scaled by the CPU's
/// largest value.
/// `precision` (tf32 / bf16: the dense layers on the tensor cores) for the device forwards on both sides;
/// the bound against the CPU's fp32 forward holds for fp32 alone.
inline void expect_one_rank_device_bits(const Golden& g, const char* name, int device,
                                        surrogate::Precision precision = surrogate::Precision::fp32) {
  namespace bsa = surrogate::bsa;
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::ModelFile& file = g.file;
  const bsa::Network net(file);
  const bool wrapped = net.config().wrapper == bsa::Wrapper::shapenet_car;
  const std::vector<float> other = shifted(g.features);
  // The references, on rank 0: the one-rank device forward of the whole batch and the CPU forward.
  std::vector<float> device_ref, device_other, cpu;
  if (comm.rank() == 0) {
    const bt::RotatedTrees trees = ball_golden::bsa_trees_for(net.config(), g.positions, g.batch());
    const auto one_rank = bsa::detail::make_bsa_cuda_forward(net, device);
    one_rank->set_precision(precision);
    const auto geometry = one_rank->upload_geometry(trees, g.positions, g.batch());
    device_ref = one_rank->forward(*geometry, g.features);
    device_other = one_rank->forward(*geometry, other);
    cpu = wrapped ? net.forward_shapenet(g.positions, g.batch(), 1) : net.forward(trees, g.features, g.positions, g.batch(), 1);
  }
  broadcast(device_ref);
  broadcast(device_other);
  broadcast(cpu);
  const int D = wrapped ? 1 : net.config().c_hidden;

  const Part p = deal(g, comm.rank(), comm.size());
  const auto model = surrogate::make_model(file);
  surrogate::RunOptions options;
  options.cuda_device = device;
  options.precision = precision;
  const double t0 = MPI_Wtime();
  const std::unique_ptr<surrogate::Plan> plan = plan_of(comm, *model, g, p);
  const std::vector<float> y = predict(comm, *model, *plan, g, p, g.features, options);
  const double t1 = MPI_Wtime();
  const std::vector<float> again = predict(comm, *model, *plan, g, p, g.features, options);  // plan and geometry kept
  const double t2 = MPI_Wtime();
  const std::vector<float> y_other = predict(comm, *model, *plan, g, p, other, options);

  const std::vector<float> want = rows_for(p, device_ref, D);
  EXPECT_EQ(bit_differences(y, want), 0) << "rank " << comm.rank() << ": " << p.size() << " points, max |diff| "
                                         << max_error(y, want);
  EXPECT_EQ(bit_differences(again, y), 0) << "rank " << comm.rank() << ": the kept geometry changed the result";
  EXPECT_EQ(bit_differences(y_other, rows_for(p, device_other, D)), 0) << "rank " << comm.rank() << ": new features";
  double largest = 0.0;
  for (const float v : cpu) largest = std::max(largest, std::abs(static_cast<double>(v)));
  const double tol = 4e-6 * (wrapped ? largest : ball_golden::max_abs(g.exact));
  const double from_cpu = max_over_ranks(max_error(y, rows_for(p, cpu, D)));
  long long fewest = p.size(), most = p.size();
  MPI_Allreduce(MPI_IN_PLACE, &fewest, 1, MPI_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  if (comm.rank() == 0)
    std::printf("%s at %d ranks (%lld..%lld points per rank): |device - cpu| %.3g (bound %.3g); predict %.1f ms "
                "(plan and geometry built), %.1f ms (kept) on rank 0, %s\n",
                name, comm.size(), fewest, most, from_cpu, 2 * tol, 1e3 * (t1 - t0), 1e3 * (t2 - t1),
                surrogate::precision_name(precision));
  if (precision == surrogate::Precision::fp32) {
    EXPECT_LE(from_cpu, 2 * tol);
  }
}
inline void expect_one_rank_device_bits(const char* name, int device,
                                        surrogate::Precision precision = surrogate::Precision::fp32) {
  expect_one_rank_device_bits(load(name), name, device, precision);
}

}  // namespace bsa_device_mpi
