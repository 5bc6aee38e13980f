// The batch of the HEPT MPI tests (test_hept_mpi, test_gpu_hept_mpi): four graphs made of the small golden
// model's input, and a prediction with the points of a rank in reversed order with global ids.
#pragma once

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "h5_io.hpp"
#include "surrogate/model.hpp"

namespace hept_batch {

using surrogate::testing::read_array;

inline const std::string kPath = std::string(SURROGATE_TEST_DATA_DIR) + "/hept/hept_example_small.h5";

/// Four graphs: the golden batch (300 and 224 hits) twice, the copy's features and coordinates shifted;
/// or its first `graphs` graphs (of another file's golden batch).
struct Batch {
  std::vector<float> x, coords;
  std::vector<std::int64_t> graph;
  int in = 5, cd = 4;
  explicit Batch(std::int64_t graphs = 4, const std::string& path = kPath) {
    const auto ax = read_array(path, "/golden/x");
    const auto gx = surrogate::testing::to_float(ax.values);
    const auto gc = surrogate::testing::to_float(read_array(path, "/golden/coords").values);
    in = static_cast<int>(ax.cols());
    const auto gb = read_array(path, "/golden/batch").values;
    const auto in_file = static_cast<std::int64_t>(*std::max_element(gb.begin(), gb.end())) + 1;
    for (int copy = 0; copy < 2; ++copy) {
      for (std::size_t i = 0; i < gb.size(); ++i) {
        for (int c = 0; c < in; ++c) x.push_back(gx[i * static_cast<std::size_t>(in) + static_cast<std::size_t>(c)] * (copy ? 0.75f : 1.0f));
        for (int c = 0; c < cd; ++c) coords.push_back(gc[i * 4 + static_cast<std::size_t>(c)] + (copy ? 0.125f : 0.0f));
        graph.push_back(static_cast<std::int64_t>(gb[i]) + in_file * copy);
      }
    }
    const auto keep = static_cast<std::size_t>(std::find(graph.begin(), graph.end(), graphs) - graph.begin());
    x.resize(keep * static_cast<std::size_t>(in));
    coords.resize(keep * static_cast<std::size_t>(cd));
    graph.resize(keep);
  }
  std::int64_t n() const { return static_cast<std::int64_t>(graph.size()); }
};

/// This rank's points: the points i whose owner(i) is this rank, in reversed order (global ids `mine`).
struct LocalPoints {
  std::vector<std::int64_t> mine, graph;
  std::vector<float> x, coords;
  int cd = 0;
  LocalPoints(const surrogate::Comm& comm, const Batch& b, const std::function<int(std::int64_t)>& owner) : cd(b.cd) {
    for (std::int64_t i = b.n() - 1; i >= 0; --i)
      if (owner(i) == comm.rank()) mine.push_back(i);
    for (const std::int64_t i : mine) {
      x.insert(x.end(), b.x.begin() + i * b.in, b.x.begin() + (i + 1) * b.in);
      coords.insert(coords.end(), b.coords.begin() + i * b.cd, b.coords.begin() + (i + 1) * b.cd);
      graph.push_back(b.graph[static_cast<std::size_t>(i)]);
    }
  }
  std::int64_t n() const { return static_cast<std::int64_t>(mine.size()); }
  surrogate::SampleLayout layout(const surrogate::Comm& comm) const {
    return surrogate::SampleLayout::build(comm, n(), graph.data());
  }
  surrogate::PointGeometry geometry() const {
    surrogate::PointGeometry g;
    g.positions = coords.data();
    g.ld_positions = cd;
    g.global_ids = mine.data();
    return g;
  }
};

/// Predicts with the points i whose owner(i) is this rank, in reversed order, with global ids.
inline std::vector<float> predict(const surrogate::Comm& comm, surrogate::Model& model, const Batch& b,
                                  const std::function<int(std::int64_t)>& owner, const surrogate::RunOptions& o,
                                  std::vector<std::int64_t>& mine) {
  const LocalPoints p(comm, b, owner);
  mine = p.mine;
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(p.n(), 1) * model.out_channels()));
  model.predict(comm, p.layout(comm), p.geometry(), p.x.data(), b.in, out.data(), model.out_channels(), o);
  return out;
}

}  // namespace hept_batch
