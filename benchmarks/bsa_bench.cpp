// Times the BSA forward (surrogate/bsa.hpp) on one sample:
//   bsa_bench MODEL.h5 POINTS THREADS REPEATS [SEED]   random points in the unit cube, normal features
//   bsa_bench MODEL.h5 DIR THREADS REPEATS             DIR/positions.f32 (N x 3), DIR/features.f32 (N x c_in),
//                                                      float32 raw; writes the warm-up's output to
//                                                      DIR/surrogate_out.f32 (N x c_hidden)
// Prints one JSON line (bench_io.hpp) with the forward's arithmetic (operation_counts.hpp). The ball trees
// are built inside each timed forward, as the official Transformer.forward does. Used by
// benchmarks/bsa_cpu_vs_pytorch.py.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_io.hpp"
#include "operation_counts.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/error.hpp"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL.h5 POINTS|DIR THREADS REPEATS [SEED]\n", argv[0]);
    return 2;
  }
  try {
    const surrogate::ModelFile file = surrogate::ModelFile::read(argv[1]);
    const surrogate::bsa::Network net(file);
    const std::string source = argv[2];
    const bool from_dir = !std::isdigit(static_cast<unsigned char>(source.front()));
    const int threads = std::atoi(argv[3]), repeats = std::atoi(argv[4]);
    const int d = net.config().dimensionality, cin = net.in_channels();
    std::vector<float> pos, feat;
    if (from_dir) {
      pos = bench_io::read_array<float>(source + "/positions.f32");
      feat = bench_io::read_array<float>(source + "/features.f32");
    } else {
      const long points = std::atol(source.c_str());
      const unsigned seed = argc > 5 ? static_cast<unsigned>(std::atoi(argv[5])) : 0u;
      std::mt19937 rng(seed);
      std::uniform_real_distribution<float> uni(0.0f, 1.0f);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      pos.resize(static_cast<std::size_t>(points * d));
      feat.resize(static_cast<std::size_t>(points * cin));
      for (float& p : pos) p = uni(rng);
      for (float& f : feat) f = normal(rng);
    }
    const long points = static_cast<long>(pos.size()) / d;
    const auto batch = surrogate::balltree::Batch::single(points);
    std::vector<float> first;
    bench_io::time_forward(points, threads, repeats, [&] { return net.forward(feat, pos, batch, threads); }, &first,
                           bench_counts::bsa(net.config(), points));
    if (from_dir) bench_io::write_array(source + "/surrogate_out.f32", first);
  } catch (const surrogate::Error& e) {
    std::fprintf(stderr, "bsa_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
