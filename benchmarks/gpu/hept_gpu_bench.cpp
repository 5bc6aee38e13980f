// HEPT's fp32 forward on a CUDA device (libsurrogate/src/hept/cuda/device.hpp) side by side with the CPU
// forward, same model and event, outputs compared first (share/docs/cuda.md, "Tests and benchmark"):
//   hept_gpu_bench MODEL.h5 HITS|DIR REPEATS [DEVICE|cuda-emulated] [THREADS] [fp32|tf32|bf16]
// HITS: a synthetic event in one graph (eta, phi uniform, the rest N(0, 1), seed 7); DIR: DIR/features.f32
// and DIR/coords.f32, the device output written to DIR/surrogate_out.f32. One JSON line (ms).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "../bench_io.hpp"
#include "device_arg.hpp"
#include "hept/cuda/device.hpp"
#include "surrogate/error.hpp"
#include "surrogate/hept.hpp"
#include "surrogate/model.hpp"  // Precision

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.h5 HITS|DIR REPEATS [DEVICE|cuda-emulated] [THREADS] [fp32|tf32|bf16]\n",
                 argv[0]);
    return 2;
  }
  namespace hept = surrogate::hept;
  try {
    const surrogate::ModelFile file = surrogate::ModelFile::read(argv[1]);
    const hept::Config cfg = hept::Config::from_attributes(file.config);
    const hept::Network<float> net(file, cfg);
    const std::string source = argv[2];
    const bool from_files = source.find_first_not_of("0123456789") != std::string::npos;
    const int repeats = std::max(1, std::atoi(argv[3]));
    const int device = bench_gpu::device_arg(argc, argv, 4);
    const int threads = argc > 5 && std::atoi(argv[5]) > 0 ? std::atoi(argv[5]) : omp_get_max_threads();
    const surrogate::Precision precision = argc > 6 ? surrogate::parse_precision(argv[6]) : surrogate::Precision::fp32;
    // 1. The event: read, or eta in [-4, 4], phi in [-pi, pi), the rest of the coordinates and the features N(0, 1).
    std::vector<float> coords, x;
    long hits = 0;
    if (from_files) {
      x = bench_io::read_array<float>(source + "/features.f32");
      coords = bench_io::read_array<float>(source + "/coords.f32");
      hits = static_cast<long>(x.size() / static_cast<std::size_t>(cfg.in_dim));
      const auto n = static_cast<std::size_t>(hits);
      if (x.size() != n * static_cast<std::size_t>(cfg.in_dim) ||
          coords.size() != n * static_cast<std::size_t>(cfg.coords_dim))
        throw surrogate::Error(surrogate::ErrorCode::input, source + ": features.f32 and coords.f32 are not N x " +
                                                                std::to_string(cfg.in_dim) + " and N x " +
                                                                std::to_string(cfg.coords_dim) + " floats");
    } else {
      hits = std::atol(source.c_str());
      std::mt19937 gen(7);
      std::uniform_real_distribution<float> eta(-4.0f, 4.0f), phi(-3.14159265f, 3.14159265f);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      coords.resize(static_cast<std::size_t>(hits * cfg.coords_dim));
      x.resize(static_cast<std::size_t>(hits * cfg.in_dim));
      for (long i = 0; i < hits; ++i) {
        float* c = coords.data() + i * cfg.coords_dim;
        c[0] = eta(gen);
        c[1] = phi(gen);
        for (int t = 2; t < cfg.coords_dim; ++t) c[t] = normal(gen);
      }
      for (float& v : x) v = normal(gen);
    }
    // 2. The geometry on the host (the CPU forward's) and on the device (a device run's plan), timed apart;
    // the official forward builds it in every call. The device's must be the host's, bit for bit.
    auto geometry = [&](hept::Geometry& g) {
      hept::quantile_bins<float>(cfg, net.regions(), coords.data(), {hits}, g);
      hept::finish_geometry(cfg, {0}, g);
    };
    hept::Geometry g;
    const double geometry_ms = bench_io::best_ms(1, [&] { geometry(g); });
    const auto forward = hept::gpu::make_cuda_forward(net, device);
    forward->set_precision(precision);  // the device forward's dense layers; the CPU's stay as they are
    auto device_geometry = forward->build_geometry(coords.data(), {hits}, {0});  // warm-up (allocations)
    const hept::Geometry back = device_geometry->download();
    const bool plan_identical = back.region_eta == g.region_eta && back.region_phi == g.region_phi &&
                                back.codes == g.codes && back.pad_sort_order == g.pad_sort_order &&
                                back.pad_seq == g.pad_seq && back.unpad == g.unpad && back.padded_codes == g.padded_codes;
    const double plan_ms = bench_io::best_ms(repeats, [&] { device_geometry = forward->build_geometry(coords.data(), {hits}, {0}); });
    // 3. Both forwards; the outputs compared before any timing.
    const int od = cfg.out_dim();
    std::vector<float> cpu(static_cast<std::size_t>(hits * od)), gpu(cpu.size());
    forward->forward(*device_geometry, x.data(), gpu.data(), nullptr);  // warm-up (allocations)
    net.forward(g, x.data(), coords.data(), cpu.data(), nullptr, nullptr, threads);
    // Both float32 forwards against the CPU's float64 one (the precision an ill-conditioned checkpoint needs):
    // the largest difference and the share of hits whose row is within 1e-3 max|y| of it.
    hept::Geometry g64;
    hept::quantile_bins<double>(cfg, net.regions(), coords.data(), {hits}, g64);
    hept::finish_geometry(cfg, {0}, g64);
    std::vector<double> ref(cpu.size());
    hept::Network<double>(file, cfg).forward(g64, x.data(), coords.data(), ref.data(), nullptr, nullptr, threads);
    double max_y = 0;
    for (const double v : ref) max_y = std::max(max_y, std::fabs(v));
    auto against_fp64 = [&](const std::vector<float>& y, double& max_diff) {
      long agree = 0;
      max_diff = 0;
      for (std::size_t i = 0; i < y.size(); i += static_cast<std::size_t>(od)) {
        double row = 0;
        for (int c = 0; c < od; ++c)
          row = std::max(row, std::fabs(y[i + static_cast<std::size_t>(c)] - ref[i + static_cast<std::size_t>(c)]));
        max_diff = std::max(max_diff, row);
        agree += row <= 1e-3 * max_y ? 1 : 0;
      }
      return static_cast<double>(agree) / static_cast<double>(std::max(hits, 1L));
    };
    double gpu_diff = 0, cpu_diff = 0;
    const double gpu_agree = against_fp64(gpu, gpu_diff), cpu_agree = against_fp64(cpu, cpu_diff);
    if (from_files) bench_io::write_array(source + "/surrogate_out.f32", gpu);
    const double gpu_ms =
        bench_io::best_ms(repeats, [&] { forward->forward(*device_geometry, x.data(), gpu.data(), nullptr); });
    const double full_ms = bench_io::best_ms(repeats, [&] {  // what the official forward does in every call
      const auto fresh = forward->build_geometry(coords.data(), {hits}, {0});
      forward->forward(*fresh, x.data(), gpu.data(), nullptr);
    });
    const double cpu_ms = bench_io::best_ms(std::min(repeats, 2), [&] {
      net.forward(g, x.data(), coords.data(), cpu.data(), nullptr, nullptr, threads);
    });
    std::printf("{\"hits\": %ld, \"device\": %d, \"cpu_threads\": %d, \"plan_identical\": %s, "
                "\"geometry_ms\": %.3f, \"device_plan_ms\": %.3f, "
                "\"gpu_forward_ms\": %.3f, \"full_ms\": %.3f, \"cpu_forward_ms\": %.3f, \"speedup\": %.2f, "
                "\"max_abs_y_fp64\": %.4g, \"gpu_max_diff_fp64\": %.4g, "
                "\"gpu_agree_fp64\": %.5f, \"cpu_max_diff_fp64\": %.4g, \"cpu_agree_fp64\": %.5f, \"precision\": \"%s\"}\n",
                hits, device, threads, plan_identical ? "true" : "false", geometry_ms, plan_ms, gpu_ms, full_ms, cpu_ms,
                cpu_ms / gpu_ms, max_y, gpu_diff,
                gpu_agree, cpu_diff, cpu_agree, surrogate::precision_name(precision));
  } catch (const surrogate::Error& e) {
    std::fprintf(stderr, "hept_gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
