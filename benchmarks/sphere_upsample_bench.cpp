// Times one forward of NeighborhoodAttentionS2 in the upsampling mode (query grid finer than the key grid,
// equiangular grids, bias, default cutoff, one sample) on weights and inputs written by
// benchmarks/sphere_upsample_cpu_vs_pytorch.py:
//   sphere_upsample_bench NLAT_IN NLON_IN NLAT_OUT NLON_OUT CHANNELS HEADS THREADS REPEATS DIR
// DIR holds raw float32 files q_weights.f32, k_weights.f32, v_weights.f32, proj_weights.f32 (out x in),
// q_bias.f32, k_bias.f32, v_bias.f32, proj_bias.f32, query.f32 (NLAT_OUT*NLON_OUT x CHANNELS, channels
// last) and key.f32 (NLAT_IN*NLON_IN x CHANNELS; also the value). The output of the warm-up forward goes
// to DIR/y.f32 (same layout as query). Prints bench_io::time_forward's JSON line.
#include <omp.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "bench_io.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"

int main(int argc, char** argv) {
  try {
    if (argc != 10)
      throw surrogate::Error(surrogate::ErrorCode::invalid_argument,
                             "usage: sphere_upsample_bench NLAT_IN NLON_IN NLAT_OUT NLON_OUT CHANNELS HEADS THREADS "
                             "REPEATS DIR");
    namespace sphere = surrogate::sphere;
    sphere::NeighborhoodAttentionS2Config c;
    c.nlat_in = std::atoi(argv[1]);
    c.nlon_in = std::atoi(argv[2]);
    c.nlat_out = std::atoi(argv[3]);
    c.nlon_out = std::atoi(argv[4]);
    c.in_channels = std::atoi(argv[5]);
    c.num_heads = std::atoi(argv[6]);
    const int threads = std::atoi(argv[7]), repeats = std::atoi(argv[8]);
    const std::string dir = argv[9];
    const auto f = [&](const char* name) { return bench_io::read_array<float>(dir + "/" + name + ".f32"); };
    sphere::AttentionS2Weights w;
    w.q_weights = f("q_weights");
    w.k_weights = f("k_weights");
    w.v_weights = f("v_weights");
    w.proj_weights = f("proj_weights");
    w.q_bias = f("q_bias");
    w.k_bias = f("k_bias");
    w.v_bias = f("v_bias");
    w.proj_bias = f("proj_bias");
    const std::vector<float> query = f("query"), key = f("key");
    omp_set_num_threads(threads);
    const sphere::NeighborhoodAttentionS2 att(c, w);
    std::vector<float> y;
    bench_io::time_forward(
        static_cast<long>(c.nlat_out) * c.nlon_out, threads, repeats,
        [&] {
          std::vector<float> out(query.size());
          att.forward(1, query.data(), key.data(), key.data(), out.data());
          return out;
        },
        &y);
    bench_io::write_array(dir + "/y.f32", y);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sphere_upsample_bench: %s\n", e.what());
    return 1;
  }
}
