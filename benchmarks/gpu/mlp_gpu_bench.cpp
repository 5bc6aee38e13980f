// The fused residual MLP kernel alone (cuda::mlp: FP32 SIMT, TF32 and BF16 tensor cores) at the shapes of
// FLARE's layers, N rows of FP32 activations in and out: per shape and precision, the error against a float64
// forward of the same weights on the first rows (outputs compared first), then the best CUDA-event time
// and its share of the limit that binds it: max(HBM bytes / bandwidth, FLOPs / peak) / time. The
// bandwidth is measured here (a device-to-device copy); the peaks are the arguments' (H100/H200 SXM
// dense figures by default). share/docs/cuda.md, "Tests and benchmark".
//   mlp_gpu_bench [--rows N] [--repeats R] [--device D|cuda-emulated] [--peak-fp32 T] [--peak-tf32 T]
//                 [--peak-bf16 T]   (T in TFLOP/s)
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "device_arg.hpp"
#include "event_timing.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace cu = surrogate::kernels::cuda;
using surrogate::kernels::Activation;
using surrogate::kernels::index_t;

namespace {

struct Layer {
  int in = 0, out = 0;
  Activation act = Activation::none;
  bool add_input = false;
  std::vector<float> w, b;  // (out, in) row-major, (out)
};

/// FLARE's ResidualMLP with `hidden_layers` residual hidden layers: in -> hidden (GELU) -> ... -> out;
/// hidden_layers < 0: one Linear.
std::vector<Layer> make_mlp(int in, int hidden, int out, int hidden_layers, std::mt19937& gen) {
  std::vector<Layer> layers;
  auto add = [&](int i, int o, Activation act, bool residual) {
    Layer l{i, o, act, residual, std::vector<float>(static_cast<std::size_t>(o) * i), std::vector<float>(o)};
    std::uniform_real_distribution<float> dist(-1.0f / std::sqrt(float(i)), 1.0f / std::sqrt(float(i)));
    for (float& v : l.w) v = dist(gen);
    for (float& v : l.b) v = dist(gen);
    layers.push_back(std::move(l));
  };
  if (hidden_layers < 0) {
    add(in, out, Activation::none, false);
    return layers;
  }
  add(in, hidden, Activation::gelu_tanh, in == hidden);
  for (int j = 0; j < hidden_layers; ++j) add(hidden, hidden, Activation::gelu_tanh, true);
  add(hidden, out, Activation::none, hidden == out);
  return layers;
}

std::vector<double> reference_row(const std::vector<Layer>& layers, const float* x) {
  std::vector<double> cur(x, x + layers.front().in);
  for (const Layer& l : layers) {
    std::vector<double> next(static_cast<std::size_t>(l.out));
    for (int o = 0; o < l.out; ++o) {
      double v = l.b[o];
      for (int i = 0; i < l.in; ++i) v += double(l.w[static_cast<std::size_t>(o) * l.in + i]) * cur[i];
      if (l.act == Activation::gelu_tanh) v /= 1.0 + std::exp(-v * (1.5957691216057308 + 0.07135481627260025 * v * v));
      next[o] = v + (l.add_input ? cur[o] : 0.0);
    }
    cur.swap(next);
  }
  return cur;
}

template <class T>
cu::DeviceBuffer<T> upload(const std::vector<T>& host, int device) {
  cu::DeviceBuffer<T> d(std::max<std::size_t>(host.size(), 1), device);
  cu::copy_blocking(d.data(), host.data(), host.size() * sizeof(T), device);
  return d;
}

/// The layers packed for both kernels and uploaded, with the launch arguments.
struct DeviceMlp {
  cu::DeviceBuffer<float> weights, biases;
  cu::DeviceBuffer<std::uint32_t> fragments;
  cu::DeviceBuffer<cu::MlpLayer> table;
  int count = 0, width = 0;
  DeviceMlp(const std::vector<Layer>& layers, int device) {
    std::vector<float> wt, b;
    std::vector<std::uint32_t> words;
    std::vector<std::size_t> offsets;  // weight_t, bias, bf16, tf32 per layer
    for (const Layer& l : layers) {
      offsets.insert(offsets.end(), {wt.size(), b.size(), words.size()});
      cu::pack_mlp_linear(l.w.data(), l.b.data(), l.out, l.in, wt, b);
      cu::pack_mlp_fragments(l.w.data(), l.out, l.in, cu::MlpPrecision::bf16, words);
      offsets.push_back(words.size());
      cu::pack_mlp_fragments(l.w.data(), l.out, l.in, cu::MlpPrecision::tf32, words);
      width = std::max({width, l.in, l.out});
    }
    weights = upload(wt, device);
    biases = upload(b, device);
    fragments = upload(words, device);
    std::vector<cu::MlpLayer> t;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      cu::MlpLayer d;
      d.weight_t = weights.data() + offsets[4 * i];
      d.bias = biases.data() + offsets[4 * i + 1];
      d.bf16 = fragments.data() + offsets[4 * i + 2];
      d.tf32 = fragments.data() + offsets[4 * i + 3];
      d.in = layers[i].in, d.out = layers[i].out, d.ld = cu::mlp_weight_ld(layers[i].out);
      d.act = layers[i].act, d.add_input = layers[i].add_input;
      t.push_back(d);
    }
    table = upload(t, device);
    count = static_cast<int>(layers.size());
  }
  cu::MlpArgs args(cu::MlpPrecision p, const float* x, float* y, index_t rows, int in, int out) const {
    cu::MlpArgs a;
    a.precision = p, a.layers = table.data(), a.num_layers = count, a.max_width = width;
    a.x = x, a.ldx = in, a.y = y, a.ldy = out, a.rows = rows;
    return a;
  }
};


const char* name(cu::MlpPrecision p) {
  return p == cu::MlpPrecision::fp32 ? "fp32" : p == cu::MlpPrecision::tf32 ? "tf32" : "bf16";
}

}  // namespace

int main(int argc, char** argv) {
  index_t rows = 1 << 20;
  int repeats = 10, device = 0;
  double peak[3] = {66.9, 494.7, 989.4};  // TFLOP/s: fp32, tf32, bf16 (H100/H200 SXM, dense)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--rows") rows = std::atol(argv[i + 1]);
    else if (a == "--repeats") repeats = std::atoi(argv[i + 1]);
    else if (a == "--device") device = bench_gpu::device_arg(argc, argv, i + 1);
    else if (a == "--peak-fp32") peak[0] = std::atof(argv[i + 1]);
    else if (a == "--peak-tf32") peak[1] = std::atof(argv[i + 1]);
    else if (a == "--peak-bf16") peak[2] = std::atof(argv[i + 1]);
    else {
      std::fprintf(stderr, "mlp_gpu_bench: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (rows < 1 || repeats < 1) {
    std::fprintf(stderr, "mlp_gpu_bench: --rows and --repeats must be positive\n");
    return 2;
  }
  try {
    cu::DeviceGuard guard(device);
    cu::Stream stream(device);
    // The measured bandwidth: a device-to-device copy of 256 MiB reads and writes every byte once.
    const std::size_t copy_bytes = std::size_t{256} << 20;
    cu::DeviceBuffer<char> from(copy_bytes, device), to(copy_bytes, device);
    const double copy_ms = bench_gpu::best_ms(repeats, device, stream.get(),
                                   [&] { cu::copy_on_device(to.data(), from.data(), copy_bytes, stream.get()); });
    const double bandwidth = 2.0 * double(copy_bytes) / (copy_ms * 1e-3);  // bytes/s
    std::printf("rows %ld, device-to-device copy %.0f GB/s; peaks fp32 %.1f, tf32 %.1f, bf16 %.1f TFLOP/s\n",
                static_cast<long>(rows), bandwidth * 1e-9, peak[0], peak[1], peak[2]);
    std::printf("| shape | precision | max err / max|y| (first rows, vs float64) | ms | GB/s | TFLOP/s | floor ms "
                "(HBM / FLOPs) | share of the binding limit |\n|---|---|---|---|---|---|---|---|\n");

    struct Shape {
      const char* name;
      int in, hidden, out, hidden_layers;
    };
    // FLARE C = 64: out_proj (one Linear), a residual MLP of 1 hidden layer, the k/v projections and the
    // feed-forward of bench_flare_gpu's configuration (3 hidden layers: 5 Linear), and a 256-wide MLP (as
    // with ffn_hidden_dim = 4 C).
    const Shape shapes[] = {{"linear 64-64", 64, 64, 64, -1},
                            {"mlp 64-64-64-64", 64, 64, 64, 1},
                            {"mlp 64 x 5 (FLARE's k, v, ffn)", 64, 64, 64, 3},
                            {"mlp 64-256-256-64", 64, 256, 64, 1}};
    std::mt19937 gen(7);
    for (const Shape& s : shapes) {
      const auto layers = make_mlp(s.in, s.hidden, s.out, s.hidden_layers, gen);
      const DeviceMlp mlp(layers, device);
      std::vector<float> x(static_cast<std::size_t>(rows) * s.in);
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      for (float& v : x) v = dist(gen);
      const auto dx = upload(x, device);
      cu::DeviceBuffer<float> dy(static_cast<std::size_t>(rows) * s.out, device);
      double flops = 0;
      for (const Layer& l : layers) flops += 2.0 * double(l.in) * l.out * double(rows);
      const double bytes = double(rows) * (s.in + s.out) * sizeof(float);
      const index_t check = std::min<index_t>(rows, 2048);
      std::vector<double> ref;
      double max_ref = 0;
      for (index_t r = 0; r < check; ++r)
        for (double v : reference_row(layers, x.data() + r * s.in)) ref.push_back(v), max_ref = std::max(max_ref, std::abs(v));
      for (auto p : {cu::MlpPrecision::fp32, cu::MlpPrecision::tf32, cu::MlpPrecision::bf16}) {
        const cu::MlpArgs a = mlp.args(p, dx.data(), dy.data(), rows, s.in, s.out);
        cu::mlp(a, stream.get());
        std::vector<float> y(static_cast<std::size_t>(check) * s.out);
        cu::copy_to_host(y.data(), dy.data(), y.size() * sizeof(float), stream.get());
        cu::synchronize(stream.get());
        double err = 0;
        for (std::size_t i = 0; i < y.size(); ++i) err = std::max(err, std::abs(y[i] - ref[i]));
        const double ms = bench_gpu::best_ms(repeats, device, stream.get(), [&] { cu::mlp(a, stream.get()); });
        const double hbm_ms = bytes / bandwidth * 1e3, flop_ms = flops / (peak[static_cast<int>(p)] * 1e12) * 1e3;
        std::printf("| %s | %s | %.2e | %.4f | %.0f | %.1f | %.4f / %.4f | %.0f %% |\n", s.name, name(p), err / max_ref,
                    ms, bytes / (ms * 1e6), flops / (ms * 1e9), hbm_ms, flop_ms, 100.0 * std::max(hbm_ms, flop_ms) / ms);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlp_gpu_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
