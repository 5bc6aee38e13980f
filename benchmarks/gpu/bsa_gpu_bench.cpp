// BSA's fp32 forward on a CUDA device (libsurrogate/src/bsa/cuda/device.hpp) side by side with the CPU
// forward, same model and sample, outputs compared first (share/docs/cuda.md, "Tests and benchmark"):
//   bsa_gpu_bench MODEL.h5 DIR REPEATS [DEVICE|cuda-emulated] [THREADS] [fp32|tf32|bf16]
// DIR/positions.f32 (N x d) and DIR/features.f32 (N x c_in), float32 raw, as bsa_bench; the device
// output goes to DIR/surrogate_out.f32. One JSON line (ms; the trees are built on the host, timed apart).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../bench_io.hpp"
#include "device_arg.hpp"
#include "bsa/cuda/device.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"  // Precision

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.h5 DIR REPEATS [DEVICE|cuda-emulated] [THREADS] [fp32|tf32|bf16]\n", argv[0]);
    return 2;
  }
  try {
    const surrogate::ModelFile file = surrogate::ModelFile::read(argv[1]);
    const surrogate::bsa::Network net(file);
    const std::string dir = argv[2];
    const int repeats = std::max(1, std::atoi(argv[3]));
    const int device = bench_gpu::device_arg(argc, argv, 4);
    const int threads = argc > 5 && std::atoi(argv[5]) > 0 ? std::atoi(argv[5]) : omp_get_max_threads();
    const surrogate::Precision precision = argc > 6 ? surrogate::parse_precision(argv[6]) : surrogate::Precision::fp32;
    // 1. The sample and its trees (host), timed as the official forward builds them every call.
    const std::vector<float> pos = bench_io::read_array<float>(dir + "/positions.f32");
    const std::vector<float> feat = bench_io::read_array<float>(dir + "/features.f32");
    const long points = static_cast<long>(pos.size()) / net.config().dimensionality;
    const auto batch = surrogate::balltree::Batch::single(points);
    surrogate::balltree::RotatedTrees trees;
    const double tree_ms = bench_io::best_ms(1, [&] { trees = net.build_trees(pos, batch); });
    // 2. Both forwards on the same trees; the outputs compared before any timing.
    const auto forward = surrogate::bsa::detail::make_bsa_cuda_forward(net, device);
    forward->set_precision(precision);  // the device forward's dense layers; the CPU's stay fp32
    const auto geometry = forward->upload_geometry(trees, pos, batch);
    const double geometry_ms = forward->last_geometry_ms();
    const std::vector<float> gpu = forward->forward(*geometry, feat);
    const std::vector<float> cpu = net.forward(trees, feat, pos, batch, threads);
    bench_io::write_array(dir + "/surrogate_out.f32", gpu);
    // The share of points whose outputs agree within 1e-2 max|y| (the CPU script's rule: the official
    // float32 output is that far from its float64 one) and within 1e-3: near-ties of the top-S block
    // selection may pick other blocks on the two devices (benchmarks/README.md, "BSA and Erwin against PyTorch").
    double max_y = 0, max_diff = 0;
    for (const float v : cpu) max_y = std::max(max_y, std::fabs(static_cast<double>(v)));
    const std::size_t od = cpu.size() / static_cast<std::size_t>(std::max(points, 1L));
    long agree = 0, agree_1e3 = 0;
    for (std::size_t i = 0; i < cpu.size(); i += od) {
      double row = 0;
      for (std::size_t c = 0; c < od; ++c) row = std::max(row, std::fabs(static_cast<double>(gpu[i + c]) - cpu[i + c]));
      max_diff = std::max(max_diff, row);
      agree += row <= 1e-2 * std::max(max_y, 1.0) ? 1 : 0;
      agree_1e3 += row <= 1e-3 * std::max(max_y, 1.0) ? 1 : 0;
    }
    // 3. Timing: the device forward on the kept geometry (CUDA events and wall), then trees + upload +
    // forward (what the official forward does in every call), then the CPU forward on `threads` threads.
    double device_ms = 1e300;
    const double wall_ms = bench_io::best_ms(repeats, [&] {
      static_cast<void>(forward->forward(*geometry, feat));
      device_ms = std::min(device_ms, forward->last_forward_ms());
    });
    const double full_ms = bench_io::best_ms(repeats, [&] {
      static_cast<void>(forward->forward(net.build_trees(pos, batch), feat, pos, batch));
    });
    const double cpu_ms =
        bench_io::best_ms(std::min(repeats, 2), [&] { static_cast<void>(net.forward(trees, feat, pos, batch, threads)); });
    std::printf("{\"points\": %ld, \"device\": %d, \"cpu_threads\": %d, \"tree_ms\": %.3f, \"geometry_ms\": %.3f, "
                "\"device_ms\": %.3f, \"wall_ms\": %.3f, \"full_ms\": %.3f, \"cpu_forward_ms\": %.3f, "
                "\"speedup\": %.2f, \"max_abs_y\": %.4g, \"max_diff\": %.4g, \"agree\": %.5f, \"agree_1e3\": %.5f, "
                "\"precision\": \"%s\"}\n",
                points, device, threads, tree_ms, geometry_ms, device_ms, wall_ms, full_ms, cpu_ms, cpu_ms / wall_ms,
                max_y, max_diff, static_cast<double>(agree) / static_cast<double>(std::max(points, 1L)),
                static_cast<double>(agree_1e3) / static_cast<double>(std::max(points, 1L)), surrogate::precision_name(precision));
  } catch (const surrogate::Error& e) {
    std::fprintf(stderr, "bsa_gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
