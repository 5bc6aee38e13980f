// FLARE forward on a CUDA device: one configuration per process.
//   bench_flare_gpu [--points 1048576] [--latents 256] [--channels 64] [--heads 8] [--blocks 8]
//                   [--repeats 5] [--warmup 2] [--reproducible] [--precision fp32|tf32|bf16] [--device 0]
//                   [--graph on|off]   (off: the kept plan's kernels launched one by one, not as one CUDA graph)
//                   [--json] [--machine]
// Times the forward with CUDA events after warm-up (the library records them on its stream: upload of
// the inputs, compute, download of the outputs) and by the wall clock, and reports
//  * ms (median of the timed runs) for compute only and for the whole forward with the copies;
//  * TFLOP/s by the analytic count of benchmarks/bench_flare.cpp (2 in out per Linear per point,
//    8 M C per block per point for the latent attention; norms, activations and softmax not counted);
//  * the activation bytes the kernels move through HBM (analytic, below) against the HBM bandwidth.
// --machine measures this GPU's limits instead: FP32 SGEMM with cuBLAS (TF32 off) and a device-to-device
// copy, next to the nominal peaks from the device attributes.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "flare/cuda/forward.hpp"
#include "random_models.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/model.hpp"

namespace cu = surrogate::kernels::cuda;

namespace {

/// The analytic FLOP count of benchmarks/bench_flare.cpp (flare_flops_per_point), per point.
double flare_flops_per_point(const surrogate::flare::Config& c) {
  auto mlp = [](int in, int hidden, int out, int layers) {
    if (layers == -1) return 2.0 * in * out;
    return 2.0 * in * hidden + layers * 2.0 * hidden * hidden + 2.0 * hidden * out;
  };
  const int C = c.channel_dim;
  const double per_block = mlp(C, c.k_proj_hidden_dim, C, c.num_layers_k_proj) +
                           mlp(C, c.v_proj_hidden_dim, C, c.num_layers_v_proj) +
                           mlp(C, c.ffn_hidden_dim, C, c.num_layers_ffn) + 2.0 * C * C + 8.0 * c.num_latents * C;
  return mlp(c.in_dim, c.in_proj_hidden_dim, C, c.num_layers_in_out_proj) +
         mlp(C, c.out_proj_hidden_dim, c.out_dim, c.num_layers_in_out_proj) + c.num_blocks * per_block;
}

/// Bytes the kernels read and write in device memory per forward (activations only; the weights, the
/// encode partials and Z are small and stay in L2). Per block, in units of N C floats: norm1 2, k_proj 2,
/// v_proj 2, encode 2 (reproducible: 4, two passes), decode 2, out_proj 3 (y, x in, x out), norm2 2,
/// feed-forward 3; plus the input projection and the output head.
double activation_bytes(const surrogate::flare::Config& c, double n, bool reproducible) {
  const double nc = n * c.channel_dim;
  const double per_block = (18.0 + (reproducible ? 2.0 : 0.0)) * nc;
  const double head = (c.out_proj_norm ? 2.0 * nc : 0.0) + nc + n * c.out_dim;
  return 4.0 * (n * c.in_dim + nc + c.num_blocks * per_block + head);
}

struct Nominal {
  std::string name;
  double fp32_tflops = 0, hbm_tbs = 0;
};

Nominal nominal(int device) {
  cudaDeviceProp prop{};
  cu::check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int clock_khz = 0, mem_khz = 0, bus_bits = 0;
  cu::check(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device), "cudaDeviceGetAttribute(ClockRate)");
  cu::check(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, device), "cudaDeviceGetAttribute(MemoryClockRate)");
  cu::check(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, device),
            "cudaDeviceGetAttribute(GlobalMemoryBusWidth)");
  Nominal n;
  n.name = prop.name;
  // 128 FP32 lanes per SM (sm_80 .. sm_90), one FMA = 2 FLOP per lane and clock; double data rate memory.
  n.fp32_tflops = prop.multiProcessorCount * 128.0 * 2.0 * clock_khz * 1e3 * 1e-12;
  n.hbm_tbs = 2.0 * mem_khz * 1e3 * (bus_bits / 8.0) * 1e-12;
  return n;
}

void machine(int device) {
  cu::DeviceGuard guard(device);
  const Nominal nom = nominal(device);
  cu::Stream stream(device);
  cu::Event start(device), stop(device);
  // Device-to-device copy of 1 GiB: read + write bandwidth.
  const std::size_t bytes = std::size_t{1} << 30;
  cu::DeviceBuffer<char> a(bytes, device), b(bytes, device);
  cu::zero(a.data(), bytes, stream.get());
  float best_copy = 1e30f;
  for (int r = 0; r < 6; ++r) {
    start.record(stream.get());
    cu::copy_on_device(b.data(), a.data(), bytes, stream.get());
    stop.record(stream.get());
    stream.synchronize();
    if (r > 0) best_copy = std::min(best_copy, stop.elapsed_ms_since(start));
  }
  // FP32 SGEMM 8192^3 with TF32 disabled.
  const int n = 8192;
  cu::DeviceBuffer<float> ma(static_cast<std::size_t>(n) * n, device), mb(ma.size(), device), mc(ma.size(), device);
  cu::zero(ma.data(), ma.bytes(), stream.get());
  cu::zero(mb.data(), mb.bytes(), stream.get());
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
  cublasSetStream(handle, stream.get());
  cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH);
  const float one = 1.0f, zero_f = 0.0f;
  float best_gemm = 1e30f;
  for (int r = 0; r < 4; ++r) {
    start.record(stream.get());
    if (cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, ma.data(), n, mb.data(), n, &zero_f, mc.data(), n) !=
        CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("cublasSgemm failed");
    stop.record(stream.get());
    stream.synchronize();
    if (r > 0) best_gemm = std::min(best_gemm, stop.elapsed_ms_since(start));
  }
  cublasDestroy(handle);
  std::printf("{\"device\": \"%s\", \"nominal_fp32_tflops\": %.1f, \"nominal_hbm_tbs\": %.2f, "
              "\"sgemm_tflops\": %.1f, \"copy_tbs\": %.2f}\n",
              nom.name.c_str(), nom.fp32_tflops, nom.hbm_tbs, 2.0 * n * n * double(n) / (best_gemm * 1e-3) * 1e-12,
              2.0 * double(bytes) / (best_copy * 1e-3) * 1e-12);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  long points = 1048576;
  int repeats = 5, warmup = 2, device = 0;
  bool json = false, run_machine = false, graph = true;
  surrogate::RunOptions options;
  surrogate::flare::Config cfg = surrogate::testing::elasticity_config();
  cfg.num_latents = 256;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool valued = a != "--reproducible" && a != "--json" && a != "--machine";
    if (valued && i + 1 >= argc) {
      std::fprintf(stderr, "bench_flare_gpu: %s needs a value\n", a.c_str());
      return 2;
    }
    auto next = [&]() -> long { return std::atol(argv[++i]); };
    if (a == "--precision") {
      try {
        options.precision = surrogate::parse_precision(argv[++i]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_flare_gpu: %s\n", e.what());
        return 2;
      }
      continue;
    }
    if (a == "--points") points = next();
    else if (a == "--latents") cfg.num_latents = static_cast<int>(next());
    else if (a == "--channels") cfg.channel_dim = cfg.in_proj_hidden_dim = cfg.out_proj_hidden_dim = cfg.k_proj_hidden_dim =
                                    cfg.v_proj_hidden_dim = cfg.ffn_hidden_dim = static_cast<int>(next());
    else if (a == "--heads") cfg.num_heads = static_cast<int>(next());
    else if (a == "--blocks") cfg.num_blocks = static_cast<int>(next());
    else if (a == "--repeats") repeats = std::max(1, static_cast<int>(next()));
    else if (a == "--warmup") warmup = std::max(0, static_cast<int>(next()));
    else if (a == "--device") device = static_cast<int>(next());
    else if (a == "--graph") {
      const std::string v = argv[++i];
      if (v != "on" && v != "off") {
        std::fprintf(stderr, "bench_flare_gpu: --graph takes on or off\n");
        return 2;
      }
      graph = v == "on";
    }
    else if (a == "--reproducible") options.reproducible = true;
    else if (a == "--json") json = true;
    else if (a == "--machine") run_machine = true;
    else {
      std::fprintf(stderr, "bench_flare_gpu: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  try {
    std::string why;
    if (cu::device_count(&why) == 0) {
      std::fprintf(stderr, "bench_flare_gpu: no CUDA device is visible (%s)\n", why.c_str());
      return 1;
    }
    if (run_machine) {
      machine(device);
      return 0;
    }
    options.cuda_device = device;
    const surrogate::ModelFile file = surrogate::testing::random_flare_file(cfg, 42);
    const surrogate::flare::Network network(file, cfg);
    surrogate::flare::cuda::Forward forward(cfg, network, file.normalization, device);
    forward.set_graphs(graph);  // off: every kernel launched one by one, as before CUDA graphs
    surrogate::SelfComm comm;
    const auto layout = surrogate::SampleLayout::build(comm, points, nullptr);
    // One plan of the points for every timed forward (the registered model here only builds the plan).
    const auto model = surrogate::make_model(file);
    const auto plan = model->plan(comm, layout);
    auto& flare_plan = static_cast<surrogate::flare::Plan&>(*plan);
    const auto ld_in = surrogate::kernels::round_up(cfg.in_dim, surrogate::kernels::kPad);
    const auto ld_out = surrogate::kernels::round_up(cfg.out_dim, surrogate::kernels::kPad);
    std::vector<float> in(static_cast<std::size_t>(points) * ld_in, 0.0f), out(static_cast<std::size_t>(points) * ld_out);
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(0.0f, 1.0f);
    for (long r = 0; r < points; ++r)
      for (int c = 0; c < cfg.in_dim; ++c) in[static_cast<std::size_t>(r * ld_in + c)] = dist(gen);
    std::vector<double> compute, total, wall;
    for (int r = 0; r < warmup + repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      forward.forward_host_arrays(comm, flare_plan, in.data(), ld_in, out.data(), ld_out, options);
      const double w = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r < warmup) continue;
      const auto& t = forward.timing();
      compute.push_back(t.compute_ms);
      total.push_back(t.total_ms);
      wall.push_back(w);
    }
    const double ms = median(compute), ms_total = median(total), ms_wall = median(wall);
    const double tflop = flare_flops_per_point(cfg) * static_cast<double>(points) * 1e-12;
    const double gbytes = activation_bytes(cfg, static_cast<double>(points), options.reproducible) * 1e-9;
    const Nominal nom = nominal(device);
    const char* mode = options.reproducible ? "reproducible" : "default";
    const char* precision = surrogate::precision_name(options.precision);
    if (json) {
      std::printf("{\"impl\": \"surrogate-cuda\", \"device\": \"%s\", \"points\": %ld, \"latents\": %d, \"channels\": %d, "
                  "\"heads\": %d, \"blocks\": %d, \"mode\": \"%s\", \"precision\": \"%s\", \"compute_ms\": %.3f, \"total_ms\": %.3f, "
                  "\"wall_ms\": %.3f, \"tflop\": %.4f, \"tflops\": %.2f, \"activation_gb\": %.3f, \"hbm_tbs_used\": %.3f, "
                  "\"nominal_fp32_tflops\": %.1f, \"nominal_hbm_tbs\": %.2f, \"graph\": %s}\n",
                  nom.name.c_str(), points, cfg.num_latents, cfg.channel_dim, cfg.num_heads, cfg.num_blocks, mode, precision, ms,
                  ms_total, ms_wall, tflop, tflop / (ms * 1e-3), gbytes, gbytes / ms, nom.fp32_tflops, nom.hbm_tbs,
                  graph ? "true" : "false");
    } else {
      std::printf("FLARE on %s, N=%ld M=%d C=%d H=%d B=%d, %s mode, %s MLPs, %s (median of %d after %d warm-up):\n",
                  nom.name.c_str(), points, cfg.num_latents, cfg.channel_dim, cfg.num_heads, cfg.num_blocks, mode, precision,
                  graph ? "one graph" : "kernel by kernel", repeats, warmup);
      std::printf("  compute %.3f ms: %.2f TFLOP/s of %.1f nominal FP32 (%.0f%%); %.2f GB of activations moved = "
                  "%.2f TB/s of %.2f nominal HBM (%.0f%%)\n",
                  ms, tflop / (ms * 1e-3), nom.fp32_tflops, 100.0 * tflop / (ms * 1e-3) / nom.fp32_tflops, gbytes,
                  gbytes / ms, nom.hbm_tbs, 100.0 * gbytes / ms / nom.hbm_tbs);
      std::printf("  with the host<->device copies: %.3f ms (events), %.3f ms (wall clock, host packing included)\n",
                  ms_total, ms_wall);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_flare_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
