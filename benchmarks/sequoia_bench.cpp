// Times the Sequoia forward (surrogate/sequoia.hpp), either model, on a batch of samples: the voxel hierarchy
// of every sample, the collation and the network in each timed run. One JSON line (bench_io.hpp).
//   sequoia_bench MODEL.h5 DIR THREADS REPEATS   DIR/positions.f32 (N x 3), sizes.i64 (B sample sizes) and
//   seg: classes.f32 (B x n_class) | cls: features.f32 (N x c), raw; writes the warm-up's output to
//   DIR/surrogate_out.f32 (seg: N x n_part; cls: B x 40 logits). benchmarks/sequoia_cpu_vs_pytorch.py.
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_io.hpp"
#include "operation_counts.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sequoia.hpp"

namespace {

void run(const surrogate::ModelFile& file, const std::string& dir, int threads, int repeats) {
  namespace sq = surrogate::sequoia;
  const sq::Config cfg = sq::Config::from_file(file);
  const bool segmentation = cfg.kind == sq::Config::Kind::segmentation;
  const sq::Network net(file, cfg);
  const std::vector<float> positions = bench_io::read_array<float>(dir + "/positions.f32");
  const std::vector<std::int64_t> sizes = bench_io::read_array<std::int64_t>(dir + "/sizes.i64");
  std::vector<sq::index_t> offsets{0};
  for (const std::int64_t s : sizes) offsets.push_back(offsets.back() + s);
  const long points = static_cast<long>(offsets.back());
  if (static_cast<long>(positions.size()) != 3 * points)
    throw surrogate::Error(surrogate::ErrorCode::input, dir + ": positions and sizes disagree");
  // Segmentation: the point features are the positions (as trained), plus a class vector per sample.
  // Classification: the point features are read (ModelNet's normals); no per-sample input.
  std::vector<float> features, classes;
  if (segmentation) {
    classes = bench_io::read_array<float>(dir + "/classes.f32");
    if (classes.size() != sizes.size() * static_cast<std::size_t>(cfg.n_class))
      throw surrogate::Error(surrogate::ErrorCode::input, dir + ": classes.f32 is not B x n_class");
  } else {
    features = bench_io::read_array<float>(dir + "/features.f32");
    if (static_cast<long>(features.size()) != static_cast<long>(cfg.c) * points)
      throw surrogate::Error(surrogate::ErrorCode::input, dir + ": features.f32 is not N x c");
  }
  const float* point_features = segmentation ? positions.data() : features.data();
  const float* sample_features = segmentation ? classes.data() : nullptr;
  omp_set_num_threads(threads);
  const bench_counts::Work work =
      bench_counts::sequoia(cfg, sq::build_hierarchy(positions.data(), offsets, cfg.divide, cfg.depth));
  std::vector<float> first;
  bench_io::time_forward(points, threads, repeats, [&] {
    const sq::Hierarchy h = sq::build_hierarchy(positions.data(), offsets, cfg.divide, cfg.depth);
    return net.forward(h, point_features, sample_features);
  }, &first, work);
  bench_io::write_array(dir + "/surrogate_out.f32", first);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL.h5 DIR THREADS REPEATS\n", argv[0]);
    return 2;
  }
  try {
    run(surrogate::ModelFile::read(argv[1]), argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  } catch (const surrogate::Error& e) {
    std::fprintf(stderr, "sequoia_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
