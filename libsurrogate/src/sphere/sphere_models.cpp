// The spherical families as generic Models ("sphere_transformer", "s2_attention",
// "s2_neighborhood_attention"). A sample is one field on the model's latitude-longitude grid: its points,
// concatenated over the ranks in rank order, are the grid in row-major order (latitude 0 = north first,
// then longitude): global row b*nlat*nlon + lat*nlon + lon of `surrogate predict`'s /features.
//
// Multi-rank mode of this version: every rank gathers the whole grid of every sample and runs the whole
// forward, keeping its own rows. The prediction is therefore bitwise identical for any number of ranks
// and any split of the rows, but neither the memory nor the time scales with the ranks (latitude-band
// distribution with halos is the planned replacement; share/docs/sphere.md).
#include <omp.h>

#include <algorithm>
#include <numeric>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"
#include "surrogate/sphere/transformer.hpp"
#include "release.hpp"

namespace surrogate::sphere {
namespace {

/// Sets the OpenMP thread count of the calling thread for one forward and restores it.
class ThreadCount {
 public:
  explicit ThreadCount(int threads) : saved_(omp_get_max_threads()) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  ~ThreadCount() { omp_set_num_threads(saved_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int saved_;
};

/// The whole grid of every sample (rows b*points + p, `width` dense columns) gathered from the ranks'
/// rows, and how many rows of each sample every rank holds (counts[r*B + b]).
struct GatheredSamples {
  std::vector<float> grid;
  std::vector<index_t> counts;
};

/// Collective. Gathers the ranks' rows (layout's working order, row stride ld). Throws Error(input) on
/// every rank when a sample does not have exactly `points` points.
GatheredSamples gather_samples(const Comm& comm, const SampleLayout& layout, const float* rows, index_t ld, int width,
                               index_t points, const std::string& what) {
  const index_t B = layout.num_samples();
  for (index_t s = 0; s < B; ++s)
    if (layout.sample_sizes()[static_cast<std::size_t>(s)] != points)
      throw Error(ErrorCode::input, what + ": sample " + std::to_string(s) + " has " +
                                        std::to_string(layout.sample_sizes()[static_cast<std::size_t>(s)]) +
                                        " points, the model's grid has " + std::to_string(points) +
                                        " (nlat*nlon; rows in row-major latitude-longitude order, concatenated over "
                                        "the ranks in rank order)");
  std::vector<index_t> local_count(static_cast<std::size_t>(B), 0), local_begin(static_cast<std::size_t>(B), 0);
  for (const auto& seg : layout.segments()) {
    local_count[static_cast<std::size_t>(seg.sample)] = seg.end - seg.begin;
    local_begin[static_cast<std::size_t>(seg.sample)] = seg.begin;
  }
  const int P = comm.size();
  GatheredSamples g;
  std::vector<index_t>& counts = g.counts;
  counts.resize(static_cast<std::size_t>(B * P));
  comm.allgather(local_count.data(), sizeof(index_t) * static_cast<std::size_t>(B), counts.data());
  std::vector<float>& grid = g.grid;
  grid.resize(static_cast<std::size_t>(B * points * width));
  std::vector<float> mine;
  for (index_t s = 0; s < B; ++s) {
    const index_t n = local_count[static_cast<std::size_t>(s)];
    mine.resize(static_cast<std::size_t>(n * width));
    for (index_t r = 0; r < n; ++r)
      std::copy(rows + (local_begin[static_cast<std::size_t>(s)] + r) * ld,
                rows + (local_begin[static_cast<std::size_t>(s)] + r) * ld + width, mine.data() + r * width);
    std::vector<std::size_t> bytes(static_cast<std::size_t>(P)), offsets(static_cast<std::size_t>(P));
    std::size_t offset = 0;
    for (int r = 0; r < P; ++r) {
      bytes[static_cast<std::size_t>(r)] = sizeof(float) * static_cast<std::size_t>(counts[static_cast<std::size_t>(r * B + s)] * width);
      offsets[static_cast<std::size_t>(r)] = offset;
      offset += bytes[static_cast<std::size_t>(r)];
    }
    comm.allgatherv(mine.data(), sizeof(float) * mine.size(), grid.data() + s * points * width, bytes, offsets);
  }
  return g;
}

/// This rank's rows of the result on the gathered grids (`width` dense columns) into out (row stride
/// ld_out); `counts` as gather_samples returned them.
void scatter_own_rows(const Comm& comm, const SampleLayout& layout, const std::vector<index_t>& counts,
                      const std::vector<float>& grid, int width, index_t points, float* out, index_t ld_out) {
  const index_t B = layout.num_samples();
  for (const auto& seg : layout.segments()) {
    index_t first = 0;  // the sample's rows on the lower ranks
    for (int r = 0; r < comm.rank(); ++r) first += counts[static_cast<std::size_t>(r * B + seg.sample)];
    for (index_t i = 0; i < seg.end - seg.begin; ++i) {
      const float* src = grid.data() + (seg.sample * points + first + i) * width;
      std::copy(src, src + width, out + (seg.begin + i) * ld_out);
    }
  }
}

class SphereTransformerModel final : public Model {
 public:
  SphereTransformerModel(const ModelFile& f, SphericalTransformer net)
      : Model(f, net.config().in_chans, net.config().out_chans), net_(std::move(net)) {}

  index_t parameter_count() const override { return net_.parameter_count(); }
  std::vector<std::pair<std::string, std::string>> describe() const override {
    const TransformerConfig& c = net_.config();
    auto grid = [](int a, int b) { return std::to_string(a) + " x " + std::to_string(b); };
    return {{"torch-harmonics release", c.torch_harmonics_version},
            {"image grid", grid(c.nlat, c.nlon) + " " + to_string(c.grid)},
            {"internal grid", grid(c.internal_nlat(), c.internal_nlon()) + " " + to_string(c.grid_internal)},
            {"attention", c.neighborhood ? "neighborhood" : "global"},
            {"embed_dim / heads / layers", std::to_string(c.embed_dim) + " / " + std::to_string(c.num_heads) + " / " +
                                               std::to_string(c.num_layers)},
            {"encoder/decoder DISCO", c.filter_basis_type + ", basis_norm_mode " + c.basis_norm_mode},
            {"multi-rank mode", "whole grid gathered on every rank"}};
  }

 protected:
  void forward(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out, index_t ld_out,
               const RunOptions& options) override {
    if (options.cuda_device >= 0)
      throw Error(ErrorCode::unsupported, "sphere_transformer: no CUDA forward yet; run it on the CPU");
    const TransformerConfig& c = net_.config();
    const index_t points = static_cast<index_t>(c.nlat) * c.nlon;
    const GatheredSamples input = gather_samples(comm, layout, in, ld_in, c.in_chans, points, "sphere_transformer");
    std::vector<float> grid_out(static_cast<std::size_t>(layout.num_samples() * points * c.out_chans));
    collectively(comm, [&] {
      ThreadCount threads(options.threads);
      net_.forward(static_cast<int>(layout.num_samples()), input.grid.data(), grid_out.data());
    });
    scatter_own_rows(comm, layout, input.counts, grid_out, c.out_chans, points, out, ld_out);
  }

 private:
  SphericalTransformer net_;
};

// ------------------------------------------------------------------------------------------------------
// Single layers: AttentionS2 / NeighborhoodAttentionS2 as self-attention on one grid.

struct LayerSetup {
  AttentionS2Config att;
  NeighborhoodAttentionS2Config nbh;
  AttentionS2Weights weights;
};

std::vector<float> weight_or_empty(const ModelFile& f, const std::string& key) {
  return f.weights.count(key) ? f.weight(key).values : std::vector<float>{};
}

LayerSetup layer_setup(const ModelFile& f, bool neighborhood) {
  const AttributeMap& a = f.config;
  const std::string family = f.architecture;
  detail::check_release(a, family);
  LayerSetup s;
  AttentionS2Config& c = s.att;
  c.in_channels = static_cast<int>(a.get_int("in_channels"));
  c.num_heads = static_cast<int>(a.get_int("num_heads", 1));
  const auto in_shape = a.get_int_list("in_shape");
  const auto out_shape = a.has("out_shape") ? a.get_int_list("out_shape") : in_shape;
  if (in_shape.size() != 2 || out_shape.size() != 2)
    throw Error(ErrorCode::format, family + " /config: in_shape and out_shape must hold two integers");
  if (in_shape != out_shape)
    throw Error(ErrorCode::unsupported, family + ": in_shape != out_shape; surrogate predict runs the layer as "
                                                 "self-attention on one grid (the C++ operator itself takes both)");
  c.nlat_in = c.nlat_out = static_cast<int>(in_shape[0]);
  c.nlon_in = c.nlon_out = static_cast<int>(in_shape[1]);
  c.grid_in = parse_grid(a.has("grid_in") ? a.get_string("grid_in") : "equiangular", "grid_in");
  c.grid_out = parse_grid(a.has("grid_out") ? a.get_string("grid_out") : "equiangular", "grid_out");
  c.bias = a.has("bias") ? a.get_bool("bias") : true;
  c.use_qknorm = a.has("use_qknorm") && a.get_bool("use_qknorm");
  c.k_channels = static_cast<int>(a.get_int("k_channels", 0));
  c.out_channels = static_cast<int>(a.get_int("out_channels", 0));
  if (a.has("scale")) {
    c.scale_mode = a.has("scale_is_tensor") && a.get_bool("scale_is_tensor") ? ScaleMode::tensor : ScaleMode::value;
    c.scale = static_cast<float>(a.get_double("scale"));
  }
  AttentionS2Weights& w = s.weights;
  w.q_weights = f.weight("q_weights").values;
  w.k_weights = f.weight("k_weights").values;
  w.v_weights = f.weight("v_weights").values;
  w.proj_weights = f.weight("proj_weights").values;
  w.q_bias = weight_or_empty(f, "q_bias");
  w.k_bias = weight_or_empty(f, "k_bias");
  w.v_bias = weight_or_empty(f, "v_bias");
  w.proj_bias = weight_or_empty(f, "proj_bias");
  w.q_norm_weights = weight_or_empty(f, "q_norm_weights");
  w.k_norm_weights = weight_or_empty(f, "k_norm_weights");
  if (neighborhood) {
    NeighborhoodAttentionS2Config& n = s.nbh;
    n.in_channels = c.in_channels;
    n.num_heads = c.num_heads;
    n.nlat_in = n.nlat_out = c.nlat_in;
    n.nlon_in = n.nlon_out = c.nlon_in;
    n.grid_in = c.grid_in;
    n.grid_out = c.grid_out;
    n.bias = c.bias;
    n.use_qknorm = c.use_qknorm;
    n.k_channels = c.k_channels;
    n.out_channels = c.out_channels;
    n.scale_mode = c.scale_mode;
    n.scale = c.scale;
    n.theta_cutoff = a.get_double("theta_cutoff", 0.0);
  }
  // Every stored tensor must be one the operator takes (the operator checks the sizes of those).
  for (const auto& [key, t] : f.weights) {
    static const char* known[] = {"q_weights", "k_weights", "v_weights", "proj_weights", "q_bias",
                                  "k_bias",    "v_bias",    "proj_bias", "q_norm_weights", "k_norm_weights"};
    if (std::find_if(std::begin(known), std::end(known), [&](const char* k) { return key == k; }) == std::end(known))
      throw Error(ErrorCode::weights, "'" + f.path + "': unexpected tensor '" + key + "' for " + family);
  }
  return s;
}

template <class Op>
class S2LayerModel final : public Model {
 public:
  S2LayerModel(const ModelFile& f, Op op, int in, int out, index_t points, std::int64_t params)
      : Model(f, in, out), op_(std::move(op)), points_(points), parameters_(params) {}
  index_t parameter_count() const override { return parameters_; }
  std::vector<std::pair<std::string, std::string>> describe() const override {
    const auto& c = op_.config();
    return {{"grid", std::to_string(c.nlat_in) + " x " + std::to_string(c.nlon_in) + " " + to_string(c.grid_in)},
            {"channels in / k / out", std::to_string(c.in_channels) + " / " + std::to_string(c.k_channels) + " / " +
                                          std::to_string(c.out_channels)},
            {"heads", std::to_string(c.num_heads)},
            {"multi-rank mode", "whole grid gathered on every rank"}};
  }

 protected:
  void forward(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out, index_t ld_out,
               const RunOptions& options) override {
    if (options.cuda_device >= 0)
      throw Error(ErrorCode::unsupported, architecture() + ": no CUDA forward yet; run it on the CPU");
    const GatheredSamples input = gather_samples(comm, layout, in, ld_in, in_channels(), points_, architecture());
    std::vector<float> grid_out(static_cast<std::size_t>(layout.num_samples() * points_ * out_channels()));
    collectively(comm, [&] {
      ThreadCount threads(options.threads);
      op_.forward(static_cast<int>(layout.num_samples()), input.grid.data(), nullptr, nullptr, grid_out.data());
    });
    scatter_own_rows(comm, layout, input.counts, grid_out, out_channels(), points_, out, ld_out);
  }

 private:
  Op op_;
  index_t points_;
  std::int64_t parameters_;
};

std::int64_t count_parameters(const ModelFile& f) {
  std::int64_t n = 0;
  for (const auto& [key, t] : f.weights) n += t.numel();
  return n;
}

}  // namespace

std::unique_ptr<Model> make_sphere_transformer_model(const ModelFile& file) {
  SphericalTransformer net(file);
  return std::make_unique<SphereTransformerModel>(file, std::move(net));
}

std::unique_ptr<Model> make_s2_attention_model(const ModelFile& file) {
  LayerSetup s = layer_setup(file, false);
  AttentionS2 op(s.att, s.weights);
  const auto& c = op.config();
  const index_t points = static_cast<index_t>(c.nlat_in) * c.nlon_in;
  const int in = c.in_channels, out = c.out_channels;
  return std::make_unique<S2LayerModel<AttentionS2>>(file, std::move(op), in, out, points, count_parameters(file));
}

std::unique_ptr<Model> make_s2_neighborhood_attention_model(const ModelFile& file) {
  LayerSetup s = layer_setup(file, true);
  NeighborhoodAttentionS2 op(s.nbh, s.weights);
  const auto& c = op.config();
  const index_t points = static_cast<index_t>(c.nlat_in) * c.nlon_in;
  const int in = c.in_channels, out = c.out_channels;
  return std::make_unique<S2LayerModel<NeighborhoodAttentionS2>>(file, std::move(op), in, out, points,
                                                                 count_parameters(file));
}

}  // namespace surrogate::sphere
