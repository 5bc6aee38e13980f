// The CUDA forward of AttentionS2 and NeighborhoodAttentionS2 (surrogate/sphere/attention_device.hpp;
// CUDA builds only). Host code: the packed weights on the device, the scratch of the projected operands,
// and the launches of the kernels of kernels/cuda (mlp.cu or device::dense for the projections, in fp32 or
// on the tensor cores, sphere_attention.cu). share/docs/sphere.md, "CUDA forward of both attention operators".
#include "surrogate/sphere/attention_device.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_sphere.hpp"
#include "../../device_support.hpp"
#include "on_device.hpp"

namespace surrogate::sphere {
namespace {

namespace cu = kernels::cuda;
using kernels::index_t;

using device_ops::on_device;
using device_ops::upload;

/// What both device operators share: the four 1x1 convolutions (q, k, v, proj) as packed one-layer MLPs,
/// the qk-norm weights (1 + w), the quadrature log weights, and the scratch of one forward.
class DeviceHeads {
 public:
  DeviceHeads(const char* op, const AttentionS2Weights& w, int in_channels, int heads, int k_channels,
              int out_channels, bool bias, bool use_qknorm, float scale, const std::vector<float>& log_w_lat,
              int device)
      : op_(op), device_(device), cin_(in_channels), heads_(heads), ck_(k_channels), cout_(out_channels),
        ek_(k_channels / heads), ev_(out_channels / heads), s_(scale) {
    // The weight arena: W^T and bias of q, k, v, proj (pack_mlp_linear, the fused MLP kernel's layout)
    // with their tensor-core fragments in bf16 and tf32, then the qk-norm weights.
    const auto add = [&](const std::vector<float>& weight, const std::vector<float>& b, int out, int in) {
      std::vector<float> wt, bt;
      cu::pack_mlp_linear(weight.data(), bias ? b.data() : nullptr, out, in, wt, bt);
      device::Dense d;
      d.in = in;
      d.out = out;
      d.ldw = cu::mlp_weight_ld(out);
      d.wt = weights_.append(wt);
      d.bias = weights_.append(bt);
      d.fragments = weights_.append_fragments(weight.data(), out, in);
      parts_.push_back(d);
    };
    add(w.q_weights, w.q_bias, ck_, cin_);
    add(w.k_weights, w.k_bias, ck_, cin_);
    add(w.v_weights, w.v_bias, cout_, cin_);
    add(w.proj_weights, w.proj_bias, cout_, cout_);
    std::size_t norm_at = 0;
    if (use_qknorm) {
      std::vector<float> norms;  // q's then k's, 1 + w
      for (float x : w.q_norm_weights) norms.push_back(1.0f + x);
      for (float x : w.k_norm_weights) norms.push_back(1.0f + x);
      norm_at = weights_.append(norms);
    }
    on_device(op, device_, [&] {
      weights_.upload(device_, nullptr);
      std::vector<cu::MlpLayer> layers;
      for (const device::Dense& p : parts_) {
        cu::MlpLayer l;
        l.weight_t = weights_.data() + p.wt;
        l.bias = weights_.data() + p.bias;
        l.in = p.in;
        l.out = p.out;
        l.ld = p.ldw;
        layers.push_back(l);
      }
      upload(layers_, layers, device_);
      upload(log_w_, log_w_lat, device_);
      // The uploads run on the default stream; a caller's non-blocking stream does not wait for them.
      cu::device_synchronize(device_);  // after uploading the weights
    });
    if (use_qknorm) {
      q_norm_ = weights_.data() + norm_at;
      k_norm_ = q_norm_ + ek_;
    }
  }

  int device() const noexcept { return device_; }

  /// The projections' arithmetic from the next forward on (fp64 refused before any change).
  void set_precision(Precision precision) {
    surrogate::detail::refuse_fp64_on_device(op_, precision);
    precision_ = device::tensor_core_precision(precision);
  }

  /// The checks of the CPU operators' forward; key = value = query for self-attention.
  void check_forward(int batch, const float* query, const float*& key, const float*& value, const float* out,
                     bool same_grids) const {
    const auto invalid = [this](const std::string& m) { throw Error(ErrorCode::invalid_argument, op_ + ": " + m); };
    if (batch < 1 || batch > 65535) invalid("batch must be in [1, 65535], got " + std::to_string(batch));
    if (!query) invalid("query is null");
    if (!out) invalid("out is null");
    if ((key == nullptr) != (value == nullptr)) invalid("key and value must both be given or both be null");
    if (!key && !same_grids) invalid("self-attention (key = value = query) needs in_shape == out_shape");
    if (!key) key = value = query;
  }

  /// Projections, qk-norm and the scale of q, the softmax (`attend` launches it on the filled arguments),
  /// the output projection.
  template <class Attend>
  void forward(int batch, index_t queries, index_t keys, int nlon_in, const float* query, const float* key,
               const float* value, float* out, cudaStream_t stream, Attend&& attend) {
    on_device(op_.c_str(), device_, [&] {
      const index_t rows_q = batch * queries, rows_k = batch * keys;
      q_.resize(static_cast<std::size_t>(rows_q * ck_), device_);
      k_.resize(static_cast<std::size_t>(rows_k * ck_), device_);
      v_.resize(static_cast<std::size_t>(rows_k * cout_), device_);
      o_.resize(static_cast<std::size_t>(rows_q * cout_), device_);
      linear(0, query, cin_, q_.data(), ck_, rows_q, stream);
      linear(1, key, cin_, k_.data(), ck_, rows_k, stream);
      linear(2, value, cin_, v_.data(), cout_, rows_k, stream);
      cu::sphere_head_norm_scale(q_.data(), ck_, rows_q, heads_, ek_, q_norm_, s_, stream);
      if (k_norm_) cu::sphere_head_norm_scale(k_.data(), ck_, rows_k, heads_, ek_, k_norm_, 1.0f, stream);
      cu::SphereAttentionArgs a;
      a.q = q_.data();
      a.ldq = ck_;
      a.k = k_.data();
      a.ldk = ck_;
      a.v = v_.data();
      a.ldv = cout_;
      a.o = o_.data();
      a.ldo = cout_;
      a.log_w_lat = log_w_.data();
      a.batch = batch;
      a.heads = heads_;
      a.ek = ek_;
      a.ev = ev_;
      a.queries = queries;
      a.keys = keys;
      a.nlon_in = nlon_in;
      a.precision = precision_;  // the global attention's products too (cuda_sphere.hpp)
      attend(a);
      linear(3, o_.data(), cout_, out, cout_, rows_q, stream);
    });
  }

 private:
  /// One projection. FP32: the fused MLP kernel (mlp.cu) for widths up to kMaxMlpWidth, else device::dense
  /// (no width limit) on the same packed weights; both compute bias + sum_k x_k w_k as one fmaf chain in
  /// k order, so the width only changes the speed. tf32 / bf16: device::dense on the tensor cores with the
  /// projection's fragments (operands rounded, FP32 sums from zero, then the bias), the CPU Linear's
  /// emulation of that precision.
  void linear(int layer, const float* x, index_t ldx, float* y, index_t ldy, index_t rows, cudaStream_t stream) const {
    const device::Dense& p = parts_[static_cast<std::size_t>(layer)];
    if (precision_ != cu::MlpPrecision::fp32 || std::max(p.in, p.out) > cu::kMaxMlpWidth) {
      device::dense(p, weights_.data(), x, ldx, y, ldy, rows, stream, kernels::Activation::none, nullptr, 0, precision_,
                    weights_.words());
      return;
    }
    cu::MlpArgs m;
    m.layers = layers_.data() + layer;
    m.num_layers = 1;
    m.max_width = std::max(p.in, p.out);
    m.x = x;
    m.ldx = ldx;
    m.y = y;
    m.ldy = ldy;
    m.rows = rows;
    cu::mlp(m, stream);
  }

  std::vector<device::Dense> parts_;  // q, k, v, proj: their places in weights_
  std::string op_;
  int device_, cin_, heads_, ck_, cout_, ek_, ev_;
  float s_;
  device::WeightArena weights_;  // the projections and the qk-norm weights
  cu::DeviceBuffer<float> log_w_;
  cu::MlpPrecision precision_ = cu::MlpPrecision::fp32;  // of the projections and the global attention
  cu::DeviceBuffer<cu::MlpLayer> layers_;
  const float* q_norm_ = nullptr;  // into weights_, or nullptr without qk-norm
  const float* k_norm_ = nullptr;
  cu::DeviceBuffer<float> q_, k_, v_, o_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------------

namespace {
/// The device heads of the CPU operator `cpu` (AttentionS2 or NeighborhoodAttentionS2) with its weights `w`.
template <class Cpu>
DeviceHeads heads_of(const char* op, const Cpu& cpu, const AttentionS2Weights& w, const std::vector<float>& log_w_lat,
                     int device) {
  const auto& c = cpu.config();
  return DeviceHeads(op, w, c.in_channels, c.num_heads, c.k_channels, c.out_channels, c.bias, c.use_qknorm,
                     cpu.scale(), log_w_lat, device);
}
}  // namespace

struct AttentionS2Device::Impl {
  Impl(const AttentionS2Config& config, const AttentionS2Weights& w, int device)
      : owned(std::in_place, config, w), cpu(&*owned),
        heads(heads_of("AttentionS2 (CUDA)", *cpu, w, cpu->log_quad_weights(), device)) {}
  Impl(const AttentionS2& host, int device)
      : cpu(&host), heads(heads_of("AttentionS2 (CUDA)", host, host.weights(), host.log_quad_weights(), device)) {}
  std::optional<AttentionS2> owned;  // the CPU operator, unless the caller's is borrowed
  const AttentionS2* cpu;
  DeviceHeads heads;
};

AttentionS2Device::AttentionS2Device(const AttentionS2Config& config, const AttentionS2Weights& weights, int device)
    : impl_(std::make_unique<Impl>(config, weights, device)) {}
AttentionS2Device::AttentionS2Device(const AttentionS2& host, int device) : impl_(std::make_unique<Impl>(host, device)) {}
AttentionS2Device::~AttentionS2Device() = default;
AttentionS2Device::AttentionS2Device(AttentionS2Device&&) noexcept = default;
AttentionS2Device& AttentionS2Device::operator=(AttentionS2Device&&) noexcept = default;
const AttentionS2& AttentionS2Device::host() const noexcept { return *impl_->cpu; }
void AttentionS2Device::set_precision(Precision precision) { impl_->heads.set_precision(precision); }
int AttentionS2Device::device() const noexcept { return impl_->heads.device(); }

void AttentionS2Device::forward(int batch, const float* query, const float* key, const float* value, float* out,
                                cudaStream_t stream) {
  const AttentionS2Config& c = impl_->cpu->config();
  impl_->heads.check_forward(batch, query, key, value, out, c.nlat_in == c.nlat_out && c.nlon_in == c.nlon_out);
  impl_->heads.forward(batch, static_cast<index_t>(c.nlat_out) * c.nlon_out, static_cast<index_t>(c.nlat_in) * c.nlon_in,
                       c.nlon_in, query, key, value, out, stream,
                       [&](const cu::SphereAttentionArgs& a) { cu::sphere_global_attention(a, stream); });
}

namespace {
/// Error(invalid_argument) unless 0 <= lat_begin <= lat_end <= nlat.
void check_lat_range(const char* op, const char* what, int lat_begin, int lat_end, int nlat) {
  if (lat_begin < 0 || lat_begin > lat_end || lat_end > nlat)
    throw Error(ErrorCode::invalid_argument, std::string(op) + ": " + what + " rows [" + std::to_string(lat_begin) +
                                                 ", " + std::to_string(lat_end) + ") outside [0, " +
                                                 std::to_string(nlat) + ")");
}
}  // namespace

void AttentionS2Device::forward_rows(int batch, int lat_begin, int lat_end, const float* query, const float* key,
                                     const float* value, float* out, cudaStream_t stream) {
  const AttentionS2Config& c = impl_->cpu->config();
  check_lat_range("AttentionS2 (CUDA)", "output latitude", lat_begin, lat_end, c.nlat_out);
  if (!key || !value)
    throw Error(ErrorCode::invalid_argument, "AttentionS2 (CUDA): forward_rows needs the key and value rows");
  impl_->heads.check_forward(batch, query, key, value, out, false);
  if (lat_begin == lat_end) return;
  impl_->heads.forward(batch, static_cast<index_t>(lat_end - lat_begin) * c.nlon_out,
                       static_cast<index_t>(c.nlat_in) * c.nlon_in, c.nlon_in, query, key, value, out, stream,
                       [&](const cu::SphereAttentionArgs& a) { cu::sphere_global_attention(a, stream); });
}

// ---------------------------------------------------------------------------------------------------

namespace {
std::vector<float> log_of(const std::vector<float>& w) {
  std::vector<float> l;
  for (float x : w) l.push_back(std::log(x));
  return l;
}

/// The operator's name, after refusing the upsampling mode (its lists are keyed by input latitude; the
/// device kernel walks gather-mode lists) before any CUDA call.
const char* gather_mode_only(const NeighborhoodAttentionS2& cpu) {
  if (cpu.config().nlon_in % cpu.config().nlon_out)
    throw Error(ErrorCode::unsupported, "NeighborhoodAttentionS2 (CUDA): the upsampling mode (nlon_out a multiple of "
                                        "nlon_in) has no device kernel; run it on the CPU operator");
  return "NeighborhoodAttentionS2 (CUDA)";
}
}  // namespace

struct NeighborhoodAttentionS2Device::Impl {
  Impl(const NeighborhoodAttentionS2Config& config, const NeighborhoodAttentionS2Weights& w, int device)
      : owned(std::in_place, config, w), cpu(&*owned),
        heads(heads_of(gather_mode_only(*cpu), *cpu, w, log_of(cpu->quad_weights()), device)) {
    upload_lists(device);
  }
  Impl(const NeighborhoodAttentionS2& host, int device)
      : cpu(&host), heads(heads_of(gather_mode_only(host), host, host.weights(), log_of(host.quad_weights()), device)) {
    upload_lists(device);
  }
  void upload_lists(int device) {
    on_device("NeighborhoodAttentionS2 (CUDA)", device, [&] {
      upload(row_offsets, cpu->neighbors().row_offsets, device);
      upload(columns, cpu->neighbors().columns, device);
      kernels::cuda::device_synchronize(device);  // after uploading the neighbour lists
    });
  }
  std::optional<NeighborhoodAttentionS2> owned;  // the CPU operator, unless the caller's is borrowed
  const NeighborhoodAttentionS2* cpu;
  DeviceHeads heads;
  kernels::cuda::DeviceBuffer<std::int64_t> row_offsets, columns;
  // forward_rows: the lists of output rows [band_begin, band_end), columns rebased to input row band_in.
  kernels::cuda::DeviceBuffer<std::int64_t> band_offsets, band_columns;
  int band_begin = -1, band_end = -1, band_in = -1;

  /// The lists of output rows [lat_begin, lat_end) with their columns relative to input row in_begin,
  /// on the device (kept while the band stays the same). Error(invalid_argument) when a neighbour lies
  /// outside the input rows [in_begin, in_end).
  void set_band(int lat_begin, int lat_end, int in_begin, int in_end) {
    if (lat_begin == band_begin && lat_end == band_end && in_begin == band_in) return;
    const NeighborhoodCsr& csr = cpu->neighbors();
    const std::int64_t nlon_in = csr.nlon_in, first = csr.row_offsets[static_cast<std::size_t>(lat_begin)];
    std::vector<std::int64_t> offsets, cols;
    for (int t = lat_begin; t <= lat_end; ++t) offsets.push_back(csr.row_offsets[static_cast<std::size_t>(t)] - first);
    for (std::int64_t j = first; j < csr.row_offsets[static_cast<std::size_t>(lat_end)]; ++j) {
      const std::int64_t column = csr.columns[static_cast<std::size_t>(j)], hi = column / nlon_in;
      if (hi < in_begin || hi >= in_end)
        throw Error(ErrorCode::invalid_argument,
                    "NeighborhoodAttentionS2 (CUDA): forward_rows for output rows [" + std::to_string(lat_begin) + ", " +
                        std::to_string(lat_end) + ") needs input row " + std::to_string(hi) +
                        ", outside the given input rows [" + std::to_string(in_begin) + ", " + std::to_string(in_end) +
                        ") (input_rows() names the rows needed)");
      cols.push_back(column - in_begin * nlon_in);
    }
    if (cols.empty()) cols.push_back(0);  // never read (no list has entries); keeps the buffer non-null
    band_begin = band_end = band_in = -1;
    on_device("NeighborhoodAttentionS2 (CUDA)", heads.device(), [&] {
      // A forward still running may read the buffers about to be replaced.
      kernels::cuda::device_synchronize(heads.device());  // before replacing the band's lists
      upload(band_offsets, offsets, heads.device());
      upload(band_columns, cols, heads.device());
      kernels::cuda::device_synchronize(heads.device());  // after uploading the band's lists
    });
    band_begin = lat_begin;
    band_end = lat_end;
    band_in = in_begin;
  }
};

NeighborhoodAttentionS2Device::NeighborhoodAttentionS2Device(const NeighborhoodAttentionS2Config& config,
                                                             const NeighborhoodAttentionS2Weights& weights, int device)
    : impl_(std::make_unique<Impl>(config, weights, device)) {}
NeighborhoodAttentionS2Device::NeighborhoodAttentionS2Device(const NeighborhoodAttentionS2& host, int device)
    : impl_(std::make_unique<Impl>(host, device)) {}
NeighborhoodAttentionS2Device::~NeighborhoodAttentionS2Device() = default;
NeighborhoodAttentionS2Device::NeighborhoodAttentionS2Device(NeighborhoodAttentionS2Device&&) noexcept = default;
NeighborhoodAttentionS2Device& NeighborhoodAttentionS2Device::operator=(NeighborhoodAttentionS2Device&&) noexcept =
    default;
const NeighborhoodAttentionS2& NeighborhoodAttentionS2Device::host() const noexcept { return *impl_->cpu; }
void NeighborhoodAttentionS2Device::set_precision(Precision precision) { impl_->heads.set_precision(precision); }
int NeighborhoodAttentionS2Device::device() const noexcept { return impl_->heads.device(); }

void NeighborhoodAttentionS2Device::forward(int batch, const float* query, const float* key, const float* value,
                                            float* out, cudaStream_t stream) {
  const NeighborhoodAttentionS2Config& c = impl_->cpu->config();
  impl_->heads.check_forward(batch, query, key, value, out, c.nlat_in == c.nlat_out && c.nlon_in == c.nlon_out);
  cu::SphereNeighbors n;
  n.row_offsets = impl_->row_offsets.data();
  n.columns = impl_->columns.data();
  n.nlat_out = c.nlat_out;
  n.nlon_out = c.nlon_out;
  impl_->heads.forward(batch, static_cast<index_t>(c.nlat_out) * c.nlon_out, static_cast<index_t>(c.nlat_in) * c.nlon_in,
                       c.nlon_in, query, key, value, out, stream,
                       [&](const cu::SphereAttentionArgs& a) { cu::sphere_neighborhood_attention(a, n, stream); });
}

void NeighborhoodAttentionS2Device::forward_rows(int batch, int lat_begin, int lat_end, const float* query, int in_begin,
                                                 int in_end, const float* key, const float* value, float* out,
                                                 cudaStream_t stream) {
  const NeighborhoodAttentionS2Config& c = impl_->cpu->config();
  const char* op = "NeighborhoodAttentionS2 (CUDA)";
  check_lat_range(op, "output latitude", lat_begin, lat_end, c.nlat_out);
  check_lat_range(op, "input latitude", in_begin, in_end, c.nlat_in);
  if (!key || !value) throw Error(ErrorCode::invalid_argument, std::string(op) + ": forward_rows needs the key and value rows");
  impl_->heads.check_forward(batch, query, key, value, out, false);
  if (lat_begin == lat_end) return;
  impl_->set_band(lat_begin, lat_end, in_begin, in_end);
  cu::SphereNeighbors n;
  n.row_offsets = impl_->band_offsets.data();
  n.columns = impl_->band_columns.data();
  n.nlat_out = lat_end - lat_begin;
  n.nlon_out = c.nlon_out;
  impl_->heads.forward(batch, static_cast<index_t>(lat_end - lat_begin) * c.nlon_out,
                       static_cast<index_t>(in_end - in_begin) * c.nlon_in, c.nlon_in, query, key, value, out, stream,
                       [&](const cu::SphereAttentionArgs& a) {
                         cu::SphereAttentionArgs band = a;
                         band.log_w_lat = a.log_w_lat + in_begin;  // the band's key latitudes start at in_begin
                         cu::sphere_neighborhood_attention(band, n, stream);
                       });
}

}  // namespace surrogate::sphere
