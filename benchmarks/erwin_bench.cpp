// Times the Erwin forward (surrogate/erwin.hpp) on one sample:
//   erwin_bench MODEL.h5 DIR THREADS REPEATS [K]
// DIR/positions.f32 (N x d) and DIR/features.f32 (N x c_in), float32 raw. When the model has message
// passing (mp_steps > 0) the graph is the kNN graph with self loops (K neighbours, default 8, as the
// ShapeNet-Car experiment's collate builds it), built once here, not timed, and written to DIR/edges.i64
// (2 x E int64, sources first) for the PyTorch side. The warm-up's output goes to DIR/surrogate_out.f32.
// The ball trees are built inside each timed forward, as the official ErwinTransformer.forward does.
// Prints one JSON line (bench_io.hpp) with the forward's arithmetic (operation_counts.hpp). Used by
// benchmarks/erwin_cpu_vs_pytorch.py.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_io.hpp"
#include "operation_counts.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/error.hpp"
#include "surrogate/graph.hpp"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL.h5 DIR THREADS REPEATS [K]\n", argv[0]);
    return 2;
  }
  try {
    const surrogate::ModelFile file = surrogate::ModelFile::read(argv[1]);
    const surrogate::erwin::Network net(file);
    const std::string dir = argv[2];
    const int threads = std::atoi(argv[3]), repeats = std::atoi(argv[4]);
    const int k = argc > 5 ? std::atoi(argv[5]) : 8;
    const int d = net.config().dimensionality;
    const std::vector<float> pos = bench_io::read_array<float>(dir + "/positions.f32");
    const std::vector<float> feat = bench_io::read_array<float>(dir + "/features.f32");
    const long points = static_cast<long>(pos.size()) / d;
    const auto batch = surrogate::balltree::Batch::single(points);
    std::vector<std::int64_t> edges;
    if (net.config().mp_steps > 0) {
      edges = surrogate::graph::knn_graph(pos, d, batch, k, true, threads).index;
      bench_io::write_array(dir + "/edges.i64", edges);
    }
    std::vector<float> first;
    const auto work = bench_counts::erwin(net.config(), points, static_cast<double>(edges.size() / 2));
    bench_io::time_forward(points, threads, repeats, [&] { return net.forward(feat, pos, batch, edges, threads); },
                           &first, work);
    bench_io::write_array(dir + "/surrogate_out.f32", first);
  } catch (const surrogate::Error& e) {
    std::fprintf(stderr, "erwin_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
