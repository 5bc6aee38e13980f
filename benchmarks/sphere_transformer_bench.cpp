// Times a whole SphericalTransformer forward (surrogate/sphere/transformer.hpp) on one sample:
//   sphere_transformer_bench MODEL.h5 REPEATS [NLAT NLON]
// The input is normal random (seed 1), channels last. With NLAT NLON the model runs on that image grid
// instead of its own (sphere_grid.hpp). OpenMP threads: OMP_NUM_THREADS. Prints one JSON line
// (bench_io.hpp) and, on stderr, the sum of the warm-up's output (to compare two builds). Not run by CI;
// docs: share/docs/sphere.md ("Performance").
#include <cstdio>
#include <cstdlib>
#include <omp.h>
#include <random>
#include <string>
#include <vector>

#include "bench_io.hpp"
#include "sphere_grid.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/sphere/transformer.hpp"

int main(int argc, char** argv) {
  if (argc != 3 && argc != 5) {
    std::fprintf(stderr, "usage: %s MODEL.h5 REPEATS [NLAT NLON]\n", argv[0]);
    return 2;
  }
  try {
    surrogate::ModelFile file = surrogate::ModelFile::read(argv[1]);
    const int repeats = std::atoi(argv[2]);
    if (argc == 5) bench_sphere::move_to_grid(file, std::atoll(argv[3]), std::atoll(argv[4]));
    const surrogate::sphere::SphericalTransformer net(file);
    const auto& cfg = net.config();
    const long points = static_cast<long>(cfg.nlat) * cfg.nlon;
    const std::vector<float> in = bench_sphere::random_input(cfg);
    // One plan of the exchanges for every repeat (SphericalTransformer::forward plans them per call).
    const surrogate::SelfComm self;
    const surrogate::sphere::RowRange whole{0, points};
    const std::int64_t first_row = 0;
    const auto bands =
        net.plan_bands(self, 1, surrogate::sphere::balanced_bands(cfg.nlat, 1), {&whole, 1}, {&first_row, 1}, points);
    std::vector<float> first;
    bench_io::time_forward(points, omp_get_max_threads(), repeats, [&] {
      std::vector<float> out(static_cast<std::size_t>(points * cfg.out_chans));
      net.forward_bands(bands, in.data(), cfg.in_chans, out.data());
      return out;
    }, &first);
    double sum = 0.0;
    for (float v : first) sum += v;
    std::fprintf(stderr, "grid %d x %d, output sum %.9g\n", cfg.nlat, cfg.nlon, sum);
  } catch (const surrogate::Error& e) {
    std::fprintf(stderr, "sphere_transformer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
