// Times the HEPT forward (surrogate/hept.hpp) on one event, as the official Transformer.forward does it:
// region codes, padding, the LSH sorts and the network inside each timed run (the network's work arrays
// kept between runs, as the registered model's plan keeps them).
//   hept_bench MODEL.h5 DIR THREADS REPEATS fp32|fp64   DIR/features.f32 (N x in_dim), DIR/coords.f32
//                                                      (N x coords_dim), float32 raw; writes the warm-up's
//                                                      output to DIR/surrogate_out.f32 (N x out_dim)
// Prints one JSON line (bench_io.hpp). Used by benchmarks/hept_cpu_vs_pytorch.py.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_io.hpp"
#include "operation_counts.hpp"
#include "surrogate/error.hpp"
#include "surrogate/hept.hpp"

namespace {

template <class T>
void run(const surrogate::ModelFile& file, const std::string& dir, int threads, int repeats) {
  const auto cfg = surrogate::hept::Config::from_attributes(file.config);
  const surrogate::hept::Network<T> net(file, cfg);
  const std::vector<float> x = bench_io::read_array<float>(dir + "/features.f32");
  const std::vector<float> coords = bench_io::read_array<float>(dir + "/coords.f32");
  const long points = static_cast<long>(coords.size()) / cfg.coords_dim;
  if (static_cast<long>(x.size()) != points * cfg.in_dim)
    throw surrogate::Error(surrogate::ErrorCode::input, dir + ": features and coords hold different point counts");
  surrogate::hept::Geometry padding;  // (for the operation count: the padded length)
  surrogate::hept::quantile_bins<T>(cfg, net.regions(), coords.data(), {points}, padding);
  surrogate::hept::finish_geometry(cfg, {0}, padding);
  const bench_counts::Work counted = bench_counts::hept(file, cfg, static_cast<double>(padding.padded_points()));
  std::vector<float> first;
  surrogate::hept::ForwardWork<T> work;  // kept between forwards, as the registered model's plan keeps it
  bench_io::time_forward(points, threads, repeats, [&] {
    surrogate::hept::Geometry g;
    surrogate::hept::quantile_bins<T>(cfg, net.regions(), coords.data(), {points}, g);
    surrogate::hept::finish_geometry(cfg, {0}, g);
    std::vector<T> out(static_cast<std::size_t>(points) * static_cast<std::size_t>(cfg.out_dim()));
    net.forward(g, x.data(), coords.data(), out.data(), nullptr, nullptr, threads, nullptr, &work);
    return std::vector<float>(out.begin(), out.end());
  }, &first, counted);
  bench_io::write_array(dir + "/surrogate_out.f32", first);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s MODEL.h5 DIR THREADS REPEATS fp32|fp64\n", argv[0]);
    return 2;
  }
  try {
    const surrogate::ModelFile file = surrogate::ModelFile::read(argv[1]);
    const std::string precision = argv[5];
    const int threads = std::atoi(argv[3]), repeats = std::atoi(argv[4]);
    if (precision == "fp32")
      run<float>(file, argv[2], threads, repeats);
    else if (precision == "fp64")
      run<double>(file, argv[2], threads, repeats);
    else
      throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "precision '" + precision + "': expected fp32 or fp64");
  } catch (const surrogate::Error& e) {
    std::fprintf(stderr, "hept_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
