// The cases of the multi-rank Erwin device test (test_erwin_device_mpi.cpp): golden and random batches, and
// Model::predict with a cuda_device over MPI_COMM_WORLD on the plan of the points spread unequally, gathered
// back in canonical order.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "device_arrays.hpp"
#include "golden.hpp"
#include "h5_io.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/graph.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace erwin_device_mpi {

namespace bt = surrogate::balltree;
namespace ew = surrogate::erwin;
namespace st = surrogate::testing;
using surrogate::ModelFile;

inline std::string path_of(const std::string& name) { return st::data_dir() + "/erwin/erwin_" + name + ".h5"; }

inline std::vector<std::int64_t> to_int(const std::vector<double>& v) {
  std::vector<std::int64_t> out;
  for (const double x : v) out.push_back(static_cast<std::int64_t>(x));
  return out;
}

/// A batch in canonical order (samples in order; a point's global id is its index).
struct Case {
  ModelFile file;
  std::vector<float> features, positions;
  std::vector<std::int64_t> batch_idx;
  std::vector<std::int64_t> edges;  // given to predict (empty: the file's kNN rule builds them)
  int knn = 0;                      // the rule's k when edges are built
  std::vector<double> exact;        // float64 reference (golden files), empty otherwise
  std::int64_t n() const { return static_cast<std::int64_t>(batch_idx.size()); }
};

inline std::vector<std::int64_t> batch_of(const std::vector<std::int64_t>& sizes) {
  std::vector<std::int64_t> b;
  for (std::size_t s = 0; s < sizes.size(); ++s) b.insert(b.end(), static_cast<std::size_t>(sizes[s]), static_cast<std::int64_t>(s));
  return b;
}

inline Case golden(const std::string& name) {
  const std::string p = path_of(name);
  Case c{ModelFile::read(p), {}, {}, {}, {}, 0, {}};
  if (st::has_dataset(p, "/golden/features")) c.features = st::to_float(st::read_array(p, "/golden/features").values);
  c.positions = st::to_float(st::read_array(p, "/golden/positions").values);
  if (st::has_dataset(p, "/golden/edge_index")) c.edges = to_int(st::read_array(p, "/golden/edge_index").values);
  c.batch_idx = batch_of(to_int(st::read_array(p, "/golden/sample_sizes").values));
  c.exact = st::read_array(p, "/golden/output_f64").values;
  return c;
}

/// Random points and features for a golden model's weights, the graph built by the kNN rule.
inline Case random_case(const std::string& name, const std::vector<std::int64_t>& sizes, int k, unsigned seed) {
  Case c{ModelFile::read(path_of(name)), {}, {}, batch_of(sizes), {}, k, {}};
  c.file.config.set("graph", std::string("knn"));
  c.file.config.set("graph_k", std::int64_t{k});
  const ew::Network net(c.file);
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  c.positions.resize(static_cast<std::size_t>(c.n() * net.config().dimensionality));
  c.features.resize(static_cast<std::size_t>(c.n() * net.in_channels()));
  for (float& v : c.positions) v = normal(gen);
  for (float& v : c.features) v = normal(gen);
  return c;
}

/// The network's edges for the whole batch: given, or the kNN rule's (with loops, as the registered model).
inline std::vector<std::int64_t> edges_of(const Case& c, const ew::Network& net) {
  if (!c.edges.empty() || net.config().mp_steps == 0) return c.edges;
  return surrogate::graph::knn_graph(c.positions, net.config().dimensionality, bt::Batch::from_batch_idx(c.batch_idx),
                                     c.knn, true, 1)
      .index;
}

/// The points of a case over MPI_COMM_WORLD, spread unequally (the last rank about 55 %, the others at
/// random; or none on the last rank), local orders shuffled, global ids given, and the model's plan of
/// them; predict() runs Model::predict on that plan (its geometry, and on a device its uploaded geometry,
/// kept from call to call) and gathers the rows back into canonical order on every rank.
class Spread {
 public:
  Spread(surrogate::Model& model, const Case& c, bool last_empty, unsigned seed) : model_(model), n_(c.n()) {
    const int rank = comm_.rank(), ranks = comm_.size();
    std::mt19937 gen(seed);
    std::vector<int> owner(static_cast<std::size_t>(n_));
    for (int& r : owner) {
      const unsigned u = gen() % 100u;
      if (ranks == 1) r = 0;
      else if (last_empty) r = static_cast<int>(u % static_cast<unsigned>(ranks - 1));
      else r = u < 55u ? ranks - 1 : static_cast<int>(u % static_cast<unsigned>(ranks - 1));
    }
    for (std::int64_t i = 0; i < n_; ++i)
      if (owner[static_cast<std::size_t>(i)] == rank) mine_.push_back(i);
    std::shuffle(mine_.begin(), mine_.end(), gen);
    const int dim = model.position_dim();
    const auto local = static_cast<std::int64_t>(mine_.size());
    positions_.resize(static_cast<std::size_t>(local * dim));
    std::vector<std::int64_t> samples(mine_.size());
    for (std::int64_t r = 0; r < local; ++r) {
      const auto i = static_cast<std::size_t>(mine_[static_cast<std::size_t>(r)]);
      std::copy_n(c.positions.begin() + static_cast<std::ptrdiff_t>(i) * dim, dim, positions_.begin() + r * dim);
      samples[static_cast<std::size_t>(r)] = c.batch_idx[i];
    }
    // Given edges: each rank passes those whose receiver it holds, in the file's order (a receiver's
    // edges all come from one rank, so their order is the file's).
    if (!c.edges.empty()) {
      const std::size_t E = c.edges.size() / 2;
      std::vector<std::int64_t> src, dst;
      for (std::size_t e = 0; e < E; ++e)
        if (owner[static_cast<std::size_t>(c.edges[E + e])] == rank) {
          src.push_back(c.edges[e]);
          dst.push_back(c.edges[E + e]);
        }
      edges_ = src;
      edges_.insert(edges_.end(), dst.begin(), dst.end());
    }
    surrogate::PointGeometry g;
    g.positions = positions_.data();
    g.ld_positions = dim;
    g.global_ids = mine_.data();
    if (!c.edges.empty()) {
      g.edge_index = edges_.data();
      g.num_edges = static_cast<std::int64_t>(edges_.size() / 2);
    }
    const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm_, local, samples.data());
    plan_ = model.plan(comm_, layout, g);
  }

  surrogate::Plan& plan() { return *plan_; }
  const surrogate::Comm& comm() const { return comm_; }

  /// This rank's rows (its order) of `rows` (canonical order, `width` values each); one value when it has none.
  std::vector<float> local_rows(const std::vector<float>& rows, int width) const {
    const auto local = static_cast<std::int64_t>(mine_.size());
    std::vector<float> f(static_cast<std::size_t>(std::max<std::int64_t>(1, local * width)));
    for (std::int64_t r = 0; r < local; ++r)
      std::copy_n(rows.begin() + mine_[static_cast<std::size_t>(r)] * width, width, f.begin() + r * width);
    return f;
  }

  /// Model::predict with `cuda_device` (and `precision`) on the plan; every rank's rows back in canonical order.
  std::vector<float> predict(const std::vector<float>& features, int cuda_device = 0,
                             surrogate::Precision precision = surrogate::Precision::fp32) {
    const int ranks = comm_.size(), cin = model_.in_channels(), cout = model_.out_channels();
    const auto local = static_cast<std::int64_t>(mine_.size());
    const std::vector<float> f = local_rows(features, cin);
    std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(1, local * cout)));
    surrogate::RunOptions options;
    options.cuda_device = cuda_device;
    options.precision = precision;
    model_.predict(comm_, *plan_, cin ? f.data() : nullptr, cin, out.data(), cout, options);
    if (cuda_device >= 0)  // the caller's device arrays: the same bits (the wrapper: no input rows)
      surrogate::testing::expect_device_arrays_match(comm_, model_, *plan_, f, cin, out, cout, 0.0f, options, "erwin");
    // Back to canonical order on every rank.
    std::vector<int> counts(static_cast<std::size_t>(ranks)), displs(static_cast<std::size_t>(ranks));
    const int mine_count = static_cast<int>(local);
    MPI_Allgather(&mine_count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
    std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
    std::vector<std::int64_t> ids(static_cast<std::size_t>(n_));
    MPI_Allgatherv(mine_.data(), mine_count, MPI_INT64_T, ids.data(), counts.data(), displs.data(), MPI_INT64_T,
                   MPI_COMM_WORLD);
    for (int& x : counts) x *= cout;
    for (int& x : displs) x *= cout;
    std::vector<float> rows(static_cast<std::size_t>(n_ * cout)), all(rows.size());
    MPI_Allgatherv(out.data(), mine_count * cout, MPI_FLOAT, rows.data(), counts.data(), displs.data(), MPI_FLOAT,
                   MPI_COMM_WORLD);
    for (std::int64_t r = 0; r < n_; ++r)
      std::copy_n(rows.begin() + r * cout, cout, all.begin() + ids[static_cast<std::size_t>(r)] * cout);
    return all;
  }

 private:
  surrogate::MpiComm comm_{MPI_COMM_WORLD};
  surrogate::Model& model_;
  std::int64_t n_;
  std::vector<std::int64_t> mine_, edges_;
  std::vector<float> positions_;
  std::unique_ptr<surrogate::Plan> plan_;
};

/// One predict on a fresh plan (Spread::predict once).
inline std::vector<float> distributed(surrogate::Model& model, const Case& c, const std::vector<float>& features,
                                      bool last_empty, unsigned seed, int cuda_device = 0) {
  return Spread(model, c, last_empty, seed).predict(features, cuda_device);
}

/// Index of the first differing value (size when none).
inline std::size_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return i;
  return a.size();
}

}  // namespace erwin_device_mpi
