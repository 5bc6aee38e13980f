// The spherical families as generic Models ("sphere_transformer", "s2_attention",
// "s2_neighborhood_attention"): a sample is one field on the model's grid, its points concatenated over the
// ranks in rank order in row-major latitude-longitude order; every rank computes whole latitude rows through
// the exchanges of its SpherePlan (plan.hpp), bitwise the one-process result for any number of ranks.
// share/docs/sphere.md, "Point layout" and "Multi-rank mode".
#include <algorithm>
#include <string>
#include <type_traits>
#include <utility>

#include "../device_support.hpp"
#include "../thread_count.hpp"
#include "config.hpp"
#include "cuda/layer.hpp"
#include "cuda/transformer.hpp"
#include "layer_program.hpp"
#include "plan.hpp"
#include "transformer/host_ops.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"
#include "surrogate/sphere/sht.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace surrogate::sphere {
namespace {

using surrogate::detail::ThreadCount;

SpherePlan& sphere_plan(Plan& plan) {
  auto* p = dynamic_cast<SpherePlan*>(&plan);
  if (!p) throw Error(ErrorCode::internal, "sphere: the plan is not a spherical model's plan");
  return *p;
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
            {"decoder upsampling",
             c.upsample_sht ? "SHT, lmax = mmax = " +
                                  std::to_string(sht_truncation(c.internal_nlat(), c.internal_nlon(), c.grid_internal).lmax)
                            : std::string("bilinear (ResampleS2)")},
            {"multi-rank mode", "latitude bands: DISCO/resample/neighbourhood halos from their owners, SHT orders split "
                                 "over the ranks, global attention "
                                 "on all-gathered rows, instance-norm sums per row in row order (bitwise any rank count)"},
            {"device forward", std::string("CUDA, fp32 / tf32 / bf16 (tf32 / bf16: ") +
                                   (c.neighborhood ? "the dense layers and the attention's projections"
                                                   : "the dense layers, the attention's projections and the global "
                                                     "attention (heads up to 64 wide)") +
                                   " on the tensor cores), any rank count"}};
  }

 protected:
  DeviceInput device_input() const override { return DeviceInput::device_rows; }
  void* device_stream(const Comm& comm, const RunOptions& options) override {
    collectively(comm, [&] { ensure_device(options.cuda_device); });
    return device_->stream();
  }
  /// The bands of the solver's pieces, the output's way back and the transformer's exchanges.
  std::unique_ptr<Plan> build_plan(const Comm& comm, Plan::Basis basis, const RunOptions&) override {
    const TransformerConfig& c = net_.config();
    SolverPieces pieces = solver_pieces(comm, basis.layout, c.nlat, c.nlon, "sphere_transformer");
    const index_t B = basis.layout.num_samples(), n = basis.layout.local_points();
    auto plan = std::make_unique<SpherePlan>(std::move(basis), comm, std::move(pieces), c.nlon);
    const SolverPieces& p = plan->pieces();
    plan->set_transformer(net_.plan_bands(comm, static_cast<int>(B), p.bands, p.held, p.working_begin, n));
    return plan;
  }

  void forward(const Comm& comm, Plan& plan, const Io& io, const RunOptions& options) override {
    SpherePlan& p = sphere_plan(plan);
    if (options.cuda_device >= 0) return forward_on_device(comm, p, io, options);
    const TransformerConfig& c = net_.config();
    const index_t B = p.layout().num_samples();
    std::vector<float> band_out(static_cast<std::size_t>(B * (p.band_end() - p.band_begin()) * c.nlon * c.out_chans));
    {
      ThreadCount threads(options.threads);
      net_.forward_bands(p.transformer(), io.in, io.ld_in, band_out.data());
    }
    p.outputs().forward(band_out.data(), c.out_chans, io.out, io.ld_out, c.out_chans);
  }

 private:
  /// The CUDA forward (cuda/transformer.hpp), fp32 or its dense layers in tf32 / bf16: the plan's latitude
  /// bands (at one rank one band, the whole grid) on every rank's device, with the exchanges the plan built
  /// once. The device object (the weights on the device) is built on the first call, and again when the
  /// device changes.
  void forward_on_device(const Comm& comm, SpherePlan& p, const Io& io, const RunOptions& options) {
    surrogate::detail::refuse_fp64_on_device("sphere_transformer", options.precision);
    collectively(comm, [&] {
      ensure_device(options.cuda_device);
      device_->set_precision(options.precision);
    });
    ThreadCount threads(options.threads);
    device_->forward_bands(comm, p, io.in, io.ld_in, io.out, io.ld_out, io.on_device);
  }

  void ensure_device(int cuda_device) {
    if (device_ && device_->device() == cuda_device) return;
    device_.reset();
#if SURROGATE_HAVE_CUDA
    device_ = make_sphere_transformer_device_forward(net_, cuda_device);
#else
    surrogate::detail::refuse_without_cuda_backend("sphere_transformer", cuda_device);
#endif
  }

  SphericalTransformer net_;  // the weights, held once: the device forward uploads them from its layers
  std::unique_ptr<SphereTransformerDeviceForward> device_;
};

// ------------------------------------------------------------------------------------------------------
// Single layers: AttentionS2 / NeighborhoodAttentionS2 as self-attention on one grid.

/// layer_program.hpp's Exec on the CPU: the operator once (it threads itself), host buffers, host moves.
class HostLayerExec {
 public:
  using Ops = SphereHostOps;
  HostLayerExec() : ops_(kernels::cpu()) {}
  template <class F>
  void once(F&& f) {
    f(ops_);
  }
  ops::Rows rows(program::Buf b, index_t rows, int width) {
    std::vector<float>& v = buffers_[static_cast<std::size_t>(b)];
    v.resize(static_cast<std::size_t>(rows * width));
    return {v.data(), width, rows, width, ops::Place::host};
  }
  void exchange(const ExchangePlan& plan, const ops::Rows& src, const ops::Rows& dst, int width) const {
    plan.forward(src.data, src.ld, dst.data, dst.ld, width);
  }

 private:
  SphereHostOps ops_;
  std::vector<float> buffers_[static_cast<std::size_t>(program::Buf::count)];
};

template <class Op>
class S2LayerModel final : public Model {
  static constexpr bool kNeighborhood = std::is_same_v<Op, NeighborhoodAttentionS2>;

 public:
  S2LayerModel(const ModelFile& f, Op op, int in, int out, std::int64_t params)
      : Model(f, in, out), parameters_(params) {
    attention_.op.template emplace<Op>(std::move(op));
  }
  index_t parameter_count() const override { return parameters_; }
  std::vector<std::pair<std::string, std::string>> describe() const override {
    const auto& c = op().config();
    return {{"grid", std::to_string(c.nlat_in) + " x " + std::to_string(c.nlon_in) + " " + to_string(c.grid_in)},
            {"channels in / k / out", std::to_string(c.in_channels) + " / " + std::to_string(c.k_channels) + " / " +
                                          std::to_string(c.out_channels)},
            {"heads", std::to_string(c.num_heads)},
            {"multi-rank mode", kNeighborhood ? "latitude bands; key/value halo of the rows inside the cutoff"
                                              : "latitude bands; keys/values all-gathered (global attention)"},
            {"device forward", std::string("CUDA, fp32 / tf32 / bf16 (tf32 / bf16: the q, k, v and output projections") +
                                   (kNeighborhood ? "" : " and the attention (heads up to 64 wide)") +
                                   " on the tensor cores), any rank count"}};
  }

 protected:
  DeviceInput device_input() const override { return DeviceInput::device_rows; }
  void* device_stream(const Comm& comm, const RunOptions& options) override {
    collectively(comm, [&] { ensure_device(options.cuda_device); });
    return device_->stream();
  }
  /// The bands of the solver's pieces, the output's way back, and the band's query and key/value rows:
  /// every row for global attention, the rows inside the cutoff for neighbourhood attention.
  std::unique_ptr<Plan> build_plan(const Comm& comm, Plan::Basis basis, const RunOptions&) override {
    const auto& c = op().config();
    SolverPieces pieces = solver_pieces(comm, basis.layout, c.nlat_in, c.nlon_in, architecture());
    auto plan = std::make_unique<SpherePlan>(std::move(basis), comm, std::move(pieces), c.nlon_in);
    const int g0 = plan->band_begin(), g1 = plan->band_end();
    std::pair<int, int> kv_rows{0, g0 < g1 ? c.nlat_in : 0};  // an empty band needs nothing
    if constexpr (kNeighborhood) kv_rows = op().input_rows(g0, g1);
    plan->plan_layer(comm, c.nlon_in, kv_rows, !kNeighborhood);
    return plan;
  }

  void forward(const Comm& comm, Plan& plan, const Io& io, const RunOptions& options) override {
    SpherePlan& p = sphere_plan(plan);
    if (options.cuda_device >= 0) return forward_on_device(comm, p, io, options);
    ThreadCount threads(options.threads);
    HostLayerExec exec;
    program::layer_forward(exec, &attention_, p.layer(), p.outputs(), static_cast<int>(p.layout().num_samples()),
                           op().config().nlon_in, ops::view(io.in, io.ld_in, 0, in_channels(), ops::Place::host),
                           {io.out, io.ld_out, 0, out_channels(), ops::Place::host});
  }

 private:
  /// The CUDA forward (cuda/layer.hpp), fp32 or its projections in tf32 / bf16: the plan's bands (one
  /// rank: one band, the whole grid) on every rank's device, the rank's rows uploaded as they are. The
  /// device object is built on the first call (and again when the device changes); the device operator
  /// refuses the upsampling mode at construction.
  void forward_on_device(const Comm& comm, SpherePlan& p, const Io& io, const RunOptions& options) {
    surrogate::detail::refuse_fp64_on_device(architecture(), options.precision);
    collectively(comm, [&] {
      ensure_device(options.cuda_device);
      device_->set_precision(options.precision);
    });
    device_->forward_bands(comm, p, io.in, io.ld_in, io.out, io.ld_out, io.on_device);
  }

  void ensure_device(int cuda_device) {
    if (device_ && device_->device() == cuda_device) return;
    device_.reset();
#if SURROGATE_HAVE_CUDA
    if constexpr (kNeighborhood) device_ = make_s2_neighborhood_attention_device_forward(op(), cuda_device);
    else device_ = make_s2_attention_device_forward(op(), cuda_device);
#else
    surrogate::detail::refuse_without_cuda_backend(architecture(), cuda_device);
#endif
  }

  const Op& op() const { return std::get<Op>(attention_.op); }

  HostAttention attention_;  // the operator (Op), whose weights the device operator uploads (held once)
  std::unique_ptr<S2LayerDeviceForward> device_;
  std::int64_t parameters_;
};

}  // namespace

std::unique_ptr<Model> make_transformer_model(const ModelFile& file) {
  SphericalTransformer net(file);
  return std::make_unique<SphereTransformerModel>(file, std::move(net));
}

std::unique_ptr<Model> make_attention_model(const ModelFile& file) {
  LayerSetup s = layer_setup(file, false, false);
  AttentionS2 op(s.att, s.weights);
  const auto& c = op.config();
  const int in = c.in_channels, out = c.out_channels;
  return std::make_unique<S2LayerModel<AttentionS2>>(file, std::move(op), in, out, count_parameters(file));
}

std::unique_ptr<Model> make_neighborhood_attention_model(const ModelFile& file) {
  LayerSetup s = layer_setup(file, true, false);
  NeighborhoodAttentionS2 op(s.nbh, s.weights);
  const auto& c = op.config();
  const int in = c.in_channels, out = c.out_channels;
  return std::make_unique<S2LayerModel<NeighborhoodAttentionS2>>(file, std::move(op), in, out, count_parameters(file));
}

}  // namespace surrogate::sphere
