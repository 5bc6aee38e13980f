// The SphericalTransformer's fp32 forward on a CUDA device (libsurrogate/src/sphere/cuda/transformer.hpp)
// side by side with the CPU forward, same model and input, outputs compared first (share/docs/cuda.md,
// "Tests and benchmark"):
//   sphere_gpu_bench MODEL.h5 REPEATS NLAT NLON [DEVICE|cuda-emulated] [fp32|tf32|bf16]
// One sample, normal random input (seed 1), channels last; NLAT NLON = 0 0 keeps the file's grid, others
// move the model to that grid (sphere_grid.hpp). CPU threads: OMP_NUM_THREADS. One JSON line (ms).
#include <omp.h>

#include <algorithm>
#include <memory>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../bench_io.hpp"
#include "../sphere_grid.hpp"
#include "device_arg.hpp"
#include "sphere/cuda/transformer.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"  // Precision
#include "surrogate/model_file.hpp"
#include "surrogate/sphere/transformer.hpp"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL.h5 REPEATS NLAT NLON [DEVICE|cuda-emulated] [fp32|tf32|bf16]\n", argv[0]);
    return 2;
  }
  try {
    surrogate::ModelFile file = surrogate::ModelFile::read(argv[1]);
    const int repeats = std::max(1, std::atoi(argv[2]));
    const long nlat = std::atol(argv[3]), nlon = std::atol(argv[4]);
    const int device = bench_gpu::device_arg(argc, argv, 5);
    const surrogate::Precision precision = argc > 6 ? surrogate::parse_precision(argv[6]) : surrogate::Precision::fp32;
    if (nlat > 0 && nlon > 0) bench_sphere::move_to_grid(file, nlat, nlon);
    const surrogate::sphere::SphericalTransformer net(file);
    const auto& cfg = net.config();
    const long points = static_cast<long>(cfg.nlat) * cfg.nlon;
    const std::vector<float> in = bench_sphere::random_input(cfg);
    // 1. Both forwards; the outputs compared before any timing.
    std::vector<float> cpu(static_cast<std::size_t>(points * cfg.out_chans)), gpu(cpu.size());
    std::unique_ptr<surrogate::sphere::SphereTransformerDeviceForward> forward;
    const double setup_ms = bench_io::best_ms(1, [&] {  // weights and operator tables uploaded once per model
      forward = surrogate::sphere::make_sphere_transformer_device_forward(net, device);
    });
    forward->set_precision(precision);  // the device forward's dense layers; the CPU's stay fp32
    forward->forward(1, in.data(), gpu.data());
    net.forward(1, in.data(), cpu.data());
    const auto [max_y, max_diff] = bench_io::deviation(gpu, cpu);
    // 2. Timing: the device forward (upload, stages, download, synchronised), then the CPU forward.
    const double gpu_ms = bench_io::best_ms(repeats, [&] { forward->forward(1, in.data(), gpu.data()); });
    const double cpu_ms = bench_io::best_ms(std::min(repeats, 2), [&] { net.forward(1, in.data(), cpu.data()); });
    std::printf("{\"nlat\": %d, \"nlon\": %d, \"embed_dim\": %d, \"device\": %d, \"cpu_threads\": %d, "
                "\"setup_ms\": %.3f, \"gpu_forward_ms\": %.3f, \"cpu_forward_ms\": %.3f, \"speedup\": %.2f, "
                "\"max_abs_y\": %.4g, \"max_diff\": %.4g, \"precision\": \"%s\"}\n",
                cfg.nlat, cfg.nlon, cfg.embed_dim, device, omp_get_max_threads(), setup_ms, gpu_ms, cpu_ms,
                cpu_ms / gpu_ms, max_y, max_diff, surrogate::precision_name(precision));
  } catch (const surrogate::Error& e) {
    std::fprintf(stderr, "sphere_gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
