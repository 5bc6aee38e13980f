// Times the Erwin forward on a CUDA device (libsurrogate/src/erwin/cuda/device.hpp) on one sample:
//   erwin_gpu_bench MODEL.h5 DIR REPEATS [K] [DEVICE] [PRECISION]   (fp32 default; tf32 / bf16: the
//                                                                    dense layers and the ball attention
//                                                                    on the tensor cores;
//                                                                    DEVICE an index or cuda-emulated)
// DIR/positions.f32 (N x d) and DIR/features.f32 (N x c_in), float32 raw, as erwin_bench. With message
// passing the kNN graph (K neighbours, default 8, self loops) is built once, not timed, and written to
// DIR/edges.i64 for the PyTorch side; the warm-up's output goes to DIR/surrogate_out.f32.
// Prints one JSON line:
//   tree_s        host time of build_with_rotations (the official forward builds its trees every call),
//   device_tree_ms  best wall time of the same trees with their nodes selected on the device (what a plan
//                 built for the device does; checked identical to the host's first),
//   geometry_ms   device time of the geometry upload, geometry_wall_ms its best wall time (the slots'
//                 positions and the edges uploaded; levels, ball-relative positions and the edges grouped
//                 by receiver computed on the device),
//   device_ms     best device time (CUDA events) of a forward on the kept geometry (features upload, the
//                 whole network, result download),
//   wall_ms       best wall time of such a forward,
//   full_wall_ms  best wall time of tree build (on the device) + geometry upload + forward (what the official
//                 forward does), host_full_wall_ms the same with the host's trees.
// benchmarks/gpu/erwin_gpu_vs_pytorch.py drives it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../bench_io.hpp"
#include "device_arg.hpp"
#include "device/ball_trees.hpp"
#include "erwin/cuda/device.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/error.hpp"
#include "surrogate/graph.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.h5 DIR REPEATS [K] [DEVICE] [fp32|tf32|bf16]\n", argv[0]);
    return 2;
  }
  using clock = std::chrono::steady_clock;
  auto seconds_since = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  try {
    const surrogate::ModelFile file = surrogate::ModelFile::read(argv[1]);
    const surrogate::erwin::Network net(file);
    const auto& cfg = net.config();
    const std::string dir = argv[2];
    const int repeats = std::max(1, std::atoi(argv[3]));
    const int k = argc > 4 ? std::atoi(argv[4]) : 8;
    const int device = bench_gpu::device_arg(argc, argv, 5);
    const surrogate::Precision precision = argc > 6 ? surrogate::parse_precision(argv[6]) : surrogate::Precision::fp32;
    const int d = cfg.dimensionality;
    const std::vector<float> pos = bench_io::read_array<float>(dir + "/positions.f32");
    const std::vector<float> feat = bench_io::read_array<float>(dir + "/features.f32");
    const long points = static_cast<long>(pos.size()) / d;
    const auto batch = surrogate::balltree::Batch::single(points);
    std::vector<std::int64_t> edges;
    if (cfg.mp_steps > 0) {
      edges = surrogate::graph::knn_graph(pos, d, batch, k, true, 0).index;
      bench_io::write_array(dir + "/edges.i64", edges);
    }
    auto build = [&] {
      return surrogate::balltree::build_with_rotations(pos, d, batch, cfg.strides, cfg.ball_sizes, cfg.rotate);
    };
    auto t0 = clock::now();
    const surrogate::balltree::RotatedTrees trees = build();
    const double tree_s = seconds_since(t0);
    const auto forward = surrogate::erwin::detail::make_erwin_cuda_forward(net, device);
    forward->set_precision(precision);
    surrogate::device::BallTrees on_device(device, static_cast<cudaStream_t>(forward->stream()));
    auto build_on_device = [&] {
      return surrogate::balltree::build_with_rotations(pos, d, batch, cfg.strides, cfg.ball_sizes, cfg.rotate, &on_device);
    };
    {
      const surrogate::balltree::RotatedTrees check = build_on_device();
      if (check.tree.index != trees.tree.index || check.tree.mask != trees.tree.mask || check.rotated != trees.rotated) {
        std::fprintf(stderr, "erwin_gpu_bench: the device's trees differ from the host's\n");
        return 1;
      }
    }
    const auto geometry = forward->upload_geometry(trees, pos, batch, edges);
    const double geometry_ms = forward->last_geometry_ms();
    const std::vector<float> first = forward->forward(*geometry, feat);
    bench_io::write_array(dir + "/surrogate_out.f32", first);
    double device_ms = 1e300, wall_ms = 1e300, full_wall_ms = 1e300, host_full_wall_ms = 1e300, device_tree_ms = 1e300;
    double geometry_wall_ms = 1e300;
    for (int r = 0; r < repeats; ++r) {
      t0 = clock::now();
      static_cast<void>(forward->upload_geometry(trees, pos, batch, edges));
      geometry_wall_ms = std::min(geometry_wall_ms, 1e3 * seconds_since(t0));
    }
    for (int r = 0; r < repeats; ++r) {
      t0 = clock::now();
      static_cast<void>(forward->forward(*geometry, feat));
      wall_ms = std::min(wall_ms, 1e3 * seconds_since(t0));
      device_ms = std::min(device_ms, forward->last_forward_ms());
    }
    for (int r = 0; r < repeats; ++r) {
      t0 = clock::now();
      static_cast<void>(build_on_device());
      device_tree_ms = std::min(device_tree_ms, 1e3 * seconds_since(t0));
      t0 = clock::now();
      const surrogate::balltree::RotatedTrees fresh = build_on_device();
      static_cast<void>(forward->forward(fresh, feat, pos, batch, edges));
      full_wall_ms = std::min(full_wall_ms, 1e3 * seconds_since(t0));
      t0 = clock::now();
      const surrogate::balltree::RotatedTrees fresh_host = build();
      static_cast<void>(forward->forward(fresh_host, feat, pos, batch, edges));
      host_full_wall_ms = std::min(host_full_wall_ms, 1e3 * seconds_since(t0));
    }
    std::printf("{\"points\": %ld, \"device\": %d, \"tree_s\": %.6f, \"device_tree_ms\": %.4f, \"geometry_ms\": %.4f, "
                "\"geometry_wall_ms\": %.4f, \"device_ms\": %.4f, \"wall_ms\": %.4f, \"full_wall_ms\": %.4f, "
                "\"host_full_wall_ms\": %.4f, \"precision\": \"%s\"}\n",
                points, device, tree_s, device_tree_ms, geometry_ms, geometry_wall_ms, device_ms, wall_ms, full_wall_ms,
                host_full_wall_ms, surrogate::precision_name(precision));
  } catch (const surrogate::Error& e) {
    std::fprintf(stderr, "erwin_gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
