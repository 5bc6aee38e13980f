// Sequoia's fp32 forward on a CUDA device (libsurrogate/src/sequoia/cuda/device.hpp) side by side with the
// CPU forward, same model and sample, outputs compared first:
//   sequoia_gpu_bench MODEL.h5 POINTS REPEATS [DEVICE|cuda-emulated] [THREADS] [fp32|tf32|bf16]
// One sample of POINTS points on a bumpy ellipsoid (seed 7; features the coordinates, repeated; the first
// class for a segmentation model). One JSON line (ms): plan_ms is a CPU plan (hierarchy and neighbour lists on
// the host), device_plan_ms a CUDA plan's (both on the device, downloaded; hierarchy_identical and
// lists_identical compare them with the host's);
// gpu_forward_ms uploads the hierarchy every call, gpu_kept_ms is a solver's call on a kept plan (the
// hierarchy kept on the device, the layers one CUDA graph unless SURROGATE_CUDA_GRAPHS=0).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../bench_io.hpp"
#include "../sequoia_sample.hpp"
#include "device_arg.hpp"
#include "sequoia/cuda/device.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"  // Precision
#include "surrogate/sequoia.hpp"

namespace {

/// Every field a plan reads equal, floats bit for bit (a plan's device hierarchy leaves out coords, mapping
/// and mapping_local, which only the collation reads).
bool same_hierarchy(const surrogate::sequoia::Hierarchy& a, const surrogate::sequoia::Hierarchy& b) {
  const auto same_bits = [](const std::vector<float>& x, const std::vector<float>& y) {
    return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0);
  };
  bool same = a.point_offsets == b.point_offsets && a.offset == b.offset && a.level_ids == b.level_ids &&
              a.level_batch == b.level_batch && a.pool_parent == b.pool_parent && a.parent_edges == b.parent_edges &&
              a.child_edges == b.child_edges && a.level_positions.size() == b.level_positions.size();
  for (std::size_t i = 0; same && i < a.level_positions.size(); ++i)
    same = same_bits(a.level_positions[i], b.level_positions[i]);
  return same;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.h5 POINTS REPEATS [DEVICE] [THREADS] [fp32|tf32|bf16]\n", argv[0]);
    return 2;
  }
  using clock = std::chrono::steady_clock;
  auto ms_since = [](clock::time_point t0) { return 1e3 * std::chrono::duration<double>(clock::now() - t0).count(); };
  namespace sq = surrogate::sequoia;
  try {
    const surrogate::ModelFile file = surrogate::ModelFile::read(argv[1]);
    const sq::Config cfg = sq::Config::from_file(file);
    const sq::Network net(file, cfg);
    const long points = std::atol(argv[2]);
    const int repeats = std::max(1, std::atoi(argv[3]));
    const int device = bench_gpu::device_arg(argc, argv, 4);
    if (argc > 5 && std::atoi(argv[5]) > 0) omp_set_num_threads(std::atoi(argv[5]));
    const surrogate::Precision precision = argc > 6 ? surrogate::parse_precision(argv[6]) : surrogate::Precision::fp32;
    // 1. The sample.
    const std::vector<float> positions = bench_sequoia::bumpy_ellipsoid(points);
    const std::vector<float> features = bench_sequoia::coordinate_features(positions, cfg.c);
    std::vector<float> classes(static_cast<std::size_t>(std::max(cfg.n_class, 1)), 0.0f);
    classes[0] = 1.0f;
    // 2. The plan: the hierarchy and the neighbour lists on the host and on the device, as a plan for the CPU
    //    and one for a CUDA device build them; the hierarchies and the lists compared before timing.
    const auto forward = sq::gpu::make_cuda_forward(net, device);
    forward->set_precision(precision);  // the device forward's dense layers; the CPU's stay fp32
    const sq::NearestFinder on_device = [&](const std::vector<float>& p, const std::vector<std::int64_t>& b, int k,
                                            const std::vector<std::int64_t>& q) { return forward->nearest_lists(p, b, k, q); };
    sq::Hierarchy h = sq::build_hierarchy(positions.data(), {0, points}, cfg.divide, cfg.depth);
    const std::vector<sq::SamplePoints> sample{{positions.data(), points, "sample 0"}};
    sq::Hierarchy device_h = forward->hierarchy(sample, cfg.divide, cfg.depth, {});
    const bool hierarchy_identical = same_hierarchy(device_h, h);
    const double hierarchy_ms = bench_io::best_ms(
        std::min(repeats, 3), [&] { h = sq::build_hierarchy(positions.data(), {0, points}, cfg.divide, cfg.depth); });
    const double device_hierarchy_ms =
        bench_io::best_ms(repeats, [&] { device_h = forward->hierarchy(sample, cfg.divide, cfg.depth, {}); });
    auto t0 = clock::now();
    const sq::Share share = sq::Share::whole(h, cfg);
    const double host_lists_ms = ms_since(t0);
    sq::Share device_share = sq::Share::whole(h, cfg, nullptr, on_device);
    bool lists_identical = device_share.pointconv.keys == share.pointconv.keys;
    for (std::size_t i = 0; i < share.siblings.size(); ++i)
      lists_identical = lists_identical && device_share.siblings[i].keys == share.siblings[i].keys;
    const double device_lists_ms =
        bench_io::best_ms(repeats, [&] { device_share = sq::Share::whole(h, cfg, nullptr, on_device); });
    // 3. Both forwards; the outputs compared before any timing.
    const surrogate::SelfComm self;
    std::vector<float> gpu = forward->forward(self, share, h, features.data(), classes.data());
    std::vector<float> cpu = net.forward(share, h, features.data(), classes.data());
    const auto [max_y, max_diff] = bench_io::deviation(gpu, cpu);
    const double gpu_ms =
        bench_io::best_ms(repeats, [&] { gpu = forward->forward(self, share, h, features.data(), classes.data()); });
    constexpr std::uint64_t kKept = 1;  // a geometry number: the forward keeps what it uploaded for it
    std::vector<float> kept = forward->forward(self, share, h, features.data(), classes.data(), kKept);
    const double kept_diff = bench_io::deviation(kept, gpu).max_diff;
    const double kept_ms = bench_io::best_ms(
        std::max(repeats, 3), [&] { kept = forward->forward(self, share, h, features.data(), classes.data(), kKept); });
    const double cpu_ms =
        bench_io::best_ms(std::min(repeats, 2), [&] { cpu = net.forward(share, h, features.data(), classes.data()); });
    std::printf("{\"points\": %ld, \"device\": %d, \"cpu_threads\": %d, \"plan_ms\": %.3f, \"device_plan_ms\": %.3f, "
                "\"hierarchy_ms\": %.3f, \"device_hierarchy_ms\": %.3f, \"hierarchy_identical\": %s, "
                "\"host_lists_ms\": %.3f, \"device_lists_ms\": %.3f, \"lists_identical\": %s, "
                "\"gpu_forward_ms\": %.3f, \"gpu_kept_ms\": %.3f, \"cpu_forward_ms\": %.3f, \"speedup\": %.2f, "
                "\"max_abs_y\": %.4g, \"max_diff\": %.4g, \"kept_diff\": %.4g, \"precision\": \"%s\"}\n",
                points, device, omp_get_max_threads(), hierarchy_ms + host_lists_ms,
                device_hierarchy_ms + device_lists_ms, hierarchy_ms, device_hierarchy_ms,
                hierarchy_identical ? "true" : "false", host_lists_ms, device_lists_ms, lists_identical ? "true" : "false",
                gpu_ms, kept_ms, cpu_ms, cpu_ms / gpu_ms, max_y, max_diff, kept_diff,
                surrogate::precision_name(precision));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sequoia_gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
