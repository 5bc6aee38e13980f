// FLARE forward pass on a CUDA device (CUDA builds; the factory of flare_device.hpp).
//
// The weights are uploaded once (one device allocation): every Linear packed for the fused MLP kernel,
// the norms, and per block the latent queries Q = latent_q reshaped raw to (H, M, E), q-normed and times
// attn_scale, exactly as the CPU model packs them. A forward copies the normalised inputs to the device,
// runs every point-local stage with the kernels of surrogate/kernels/cuda.hpp, and copies the outputs
// back. The only global quantities are the encode sums of each block: the device computes per-chunk
// partials, merges them per local segment, and the ranks then merge exactly as the CPU does
//   default mode:      max of the power-of-two reference exponents, exact rescale, sum of doubles;
//   reproducible mode: max of the logits and |v|, then sums of int64 fixed-point words,
// through the communicator's DeviceTransport (NCCL when every rank owns its GPU, else staged through host
// memory and the Comm).
//
// Device memory is O(N C): the residual stream, one scratch (norm output, then the decoded attention),
// the keys and the values; the MLPs' hidden activations never leave the chip.
#include "../cuda_errors.hpp"
#include "flare_cuda.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <vector>

#include "surrogate/exchange.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::detail {
namespace {

namespace cu = kernels::cuda;

/// Call inside a catch block: CUDA errors become Error codes naming the device, the rest as usual.
Status status_of_current_exception(int device) noexcept {
  try {
    throw;
  } catch (const cu::CudaError& e) {
    return {error_code_for(e.code()), "CUDA device " + std::to_string(device) + ": " + e.what()};
  } catch (...) {
    return Status::from_current_exception();
  }
}

/// Host copy of NormLayer::apply_vector (same float arithmetic): the q norm of the latent queries.
void normalize_vector(float* x, int dim, const float* weight, const float* bias, float eps) {
  float mean = 0.0f;
  if (bias) {
    for (int c = 0; c < dim; ++c) mean += x[c];
    mean /= static_cast<float>(dim);
  }
  float var = 0.0f;
  for (int c = 0; c < dim; ++c) var += (x[c] - mean) * (x[c] - mean);
  var /= static_cast<float>(dim);
  const float rstd = 1.0f / std::sqrt(var + eps);
  for (int c = 0; c < dim; ++c) x[c] = (x[c] - mean) * rstd * weight[c] + (bias ? bias[c] : 0.0f);
}

kernels::Activation to_kernel(FlareConfig::Activation a) {
  return a == FlareConfig::Activation::silu ? kernels::Activation::silu : kernels::Activation::gelu_tanh;
}

cu::MlpPrecision to_kernel(Precision p) {
  switch (p) {
    case Precision::tf32: return cu::MlpPrecision::tf32;
    case Precision::bf16: return cu::MlpPrecision::bf16;
    case Precision::fp32: break;
  }
  return cu::MlpPrecision::fp32;
}

/// All weights in one host array (every tensor at a multiple of 64 floats), uploaded at once.
class WeightBlob {
 public:
  std::size_t add(const float* p, std::size_t n) {
    host_.resize(static_cast<std::size_t>(kernels::round_up(static_cast<kernels::index_t>(host_.size()), 64)), 0.0f);
    const std::size_t at = host_.size();
    host_.insert(host_.end(), p, p + n);
    return at;
  }
  std::size_t add(const std::vector<float>& v) { return add(v.data(), v.size()); }
  const std::vector<float>& host() const { return host_; }

 private:
  std::vector<float> host_;
};

struct NormPlan {
  std::size_t weight = 0, bias = 0;  // offsets in the blob
  bool has_bias = false;
  int dim = 0;
  float eps = 0;
  bool rms = false;
};

struct MlpPlan {
  int first = 0, count = 0;  // layers [first, first + count) of the layer table
  int in = 0, out = 0, max_width = 0;
};

struct LayerPlan {
  std::size_t weight_t = 0, bias = 0;
  int in = 0, out = 0;
  kernels::Activation act = kernels::Activation::none;
  bool add_input = false;
};

struct BlockPlan {
  NormPlan norm1, norm2;
  std::optional<NormPlan> k_norm;
  MlpPlan k_proj, v_proj, ffn, out_proj;
  std::size_t q = 0;  // [H][M][E]
};

class FlareCudaForward final : public FlareDeviceForward {
 public:
  FlareCudaForward(const FlareConfig& cfg, const ModelFile& file, int device);
  ~FlareCudaForward() override;
  int device() const override { return device_; }
  void forward(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out,
               index_t ld_out, const RunOptions& options) override;
  void predict_device(const Comm& comm, const SampleLayout& layout, const Model::DeviceArrays& arrays,
                      const RunOptions& options,
                      const std::function<void(const std::vector<std::uint64_t>&)>& check_inputs) override;
  const FlareCudaTiming& timing() const { return timing_; }

 private:
  // model building
  NormPlan add_norm(const ModelFile& file, const std::string& prefix, int dim);
  MlpPlan add_mlp(const ModelFile& file, const std::string& prefix, int in, int hidden, int out, int num_layers,
                  bool input_residual, bool output_residual);
  MlpPlan add_linear(const ModelFile& file, const std::string& prefix, int in, int out);
  // stages (enqueue on stream_)
  void run_norm(const NormPlan& n, const float* x, index_t ldx, float* y, index_t ldy, index_t rows);
  void run_mlp(const MlpPlan& m, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
               const float* extra = nullptr, index_t ld_extra = 0);
  void prepare(const SampleLayout& layout, bool reproducible);
  void start_block(int b, bool reproducible);
  void finish_block(int b, bool reproducible);
  void exact_scales(const SampleLayout& layout);
  cu::LatentProblem problem(int b) const;
  cu::SegmentInfo segment_info() const;
  // collectives
  template <class F>
  void local_step(const Comm& comm, F&& work);
  void allreduce(const Comm& comm, void* device_data, std::size_t count, DType type, ReduceOp op);
  void ensure_transport(const Comm& comm);
  /// The forward: `load` fills in_ (n_ x in_dim, normalised, working order) on the stream, `store`
  /// enqueues the use of out_ (n_ x out_dim), `finish` runs on the host after the stream completed.
  void run(const Comm& comm, const SampleLayout& layout, bool reproducible, const std::function<void(cudaStream_t)>& load,
           const std::function<void(cudaStream_t)>& store, const std::function<void()>& finish);
  void upload_order(const SampleLayout& layout);

  FlareConfig cfg_;
  int device_;
  int C_, H_, M_, E_;
  int sm_count_ = 1;
  cu::MlpPrecision precision_ = cu::MlpPrecision::fp32;  // of the current forward
  cu::Stream stream_;
  cu::Event ev_start_, ev_uploaded_, ev_computed_, ev_end_;
  FlareCudaTiming timing_;
  DeviceTransport* transport_ = nullptr;  // the communicator's, for the current forward (several ranks)

  // weights
  WeightBlob blob_;
  std::vector<LayerPlan> layer_plans_;
  cu::DeviceBuffer<float> weights_;
  cu::DeviceBuffer<cu::MlpLayer> layers_;
  MlpPlan in_proj_, out_mlp_;
  std::optional<NormPlan> out_norm_;
  std::vector<BlockPlan> blocks_;

  // layout (rebuilt when it changes)
  index_t n_ = -1, samples_ = 0;
  std::vector<SampleLayout::Segment> segments_;
  std::vector<index_t> sample_sizes_;
  int num_chunks_ = 0, num_tiles_ = 0, slices_ = 1;
  cu::DeviceBuffer<cu::LatentChunk> chunks_, tiles_;
  cu::DeviceBuffer<int> seg_chunk_begin_;
  cu::DeviceBuffer<index_t> seg_sample_;

  // workspace
  cu::DeviceBuffer<float> in_, x_, scratch_, keys_, values_, out_;
  cu::PinnedBuffer<float> in_host_, out_host_;
  cu::DeviceBuffer<std::int32_t> part_ref_, local_ref_, global_ref_;
  cu::DeviceBuffer<double> part_acc_, sums_;
  cu::DeviceBuffer<float> part_max_, part_vmax_, maxima_;  // maxima_: [B][H][M] logits, then [B][H] |v|
  cu::DeviceBuffer<std::int64_t> exact_;
  cu::DeviceBuffer<kernels::ExactScale> scales_;  // [S] sum scales, then [S][H] value scales
  std::vector<kernels::ExactScale> scales_host_;
  cu::DeviceBuffer<float> z_;                     // [S][H][M][E]
  std::vector<float> value_max_host_;
  // device-resident predict
  cu::DeviceBuffer<double> normalization_;           // input mean, std, output mean, std (as present)
  bool has_input_norm_ = false, has_output_norm_ = false;
  cu::DeviceBuffer<index_t> order_;                  // the layout's order (working row -> caller row)
  std::vector<index_t> order_host_;
  cu::DeviceBuffer<unsigned long long> bad_;         // per input channel: non-finite inputs
  cu::PinnedBuffer<unsigned long long> bad_host_;
};

FlareCudaForward::FlareCudaForward(const FlareConfig& cfg, const ModelFile& file, int device)
    : cfg_(cfg), device_(device), C_(cfg.channel_dim), H_(cfg.num_heads), M_(cfg.num_latents), E_(cfg.head_dim()) {
  std::string why;
  const int count = cu::device_count(&why);
  if (device < 0 || device >= count)
    throw Error(ErrorCode::unsupported, "CUDA device " + std::to_string(device) + " requested, but " +
                                            (count == 0 ? "no CUDA device is visible (" + why + ")"
                                                        : std::to_string(count) + " device(s) are visible"));
  // What the kernels cover: head width <= 64, every MLP width <= 256.
  std::vector<std::string> problems;
  if (E_ > cu::kMaxHeadDim)
    problems.push_back("head width " + std::to_string(E_) + " > " + std::to_string(cu::kMaxHeadDim));
  auto width = [&](const char* what, int w) {
    if (w > cu::kMaxMlpWidth) problems.push_back(std::string(what) + " " + std::to_string(w) + " > " + std::to_string(cu::kMaxMlpWidth));
  };
  width("in_dim", cfg.in_dim);
  width("out_dim", cfg.out_dim);
  width("channel_dim", C_);
  width("in_proj_hidden_dim", cfg.in_proj_hidden_dim);
  width("out_proj_hidden_dim", cfg.out_proj_hidden_dim);
  width("k_proj_hidden_dim", cfg.k_proj_hidden_dim);
  width("v_proj_hidden_dim", cfg.v_proj_hidden_dim);
  width("ffn_hidden_dim", cfg.ffn_hidden_dim);
  if (!problems.empty()) {
    std::string text;
    for (const auto& p : problems) text += (text.empty() ? "" : ", ") + p;
    throw Error(ErrorCode::unsupported, "the CUDA backend does not support this FLARE model (" + text +
                                            "); run it on the CPU (device 'cpu')");
  }

  const bool paper = cfg.key_layout == FlareConfig::KeyLayout::paper;
  in_proj_ = add_mlp(file, "in_proj", cfg.in_dim, cfg.in_proj_hidden_dim, C_, cfg.num_layers_in_out_proj, false, true);
  if (cfg.out_proj_norm) out_norm_ = add_norm(file, paper ? "out_proj.ln" : "out_proj.0", C_);
  out_mlp_ = add_mlp(file, paper ? "out_proj.mlp" : "out_proj.1", C_, cfg.out_proj_hidden_dim, cfg.out_dim,
                     cfg.num_layers_in_out_proj, true, false);
  const double eps = cfg.rmsnorm ? cfg.rmsnorm_eps : cfg.layernorm_eps;
  for (int b = 0; b < cfg.num_blocks; ++b) {
    BlockPlan blk;
    const std::string p = "blocks." + std::to_string(b) + ".";
    blk.norm1 = add_norm(file, p + (paper ? "ln1" : "norm1"), C_);
    blk.norm2 = add_norm(file, p + (paper ? "ln2" : "norm2"), C_);
    blk.k_proj = add_mlp(file, p + "att.k_proj", C_, cfg.k_proj_hidden_dim, C_, cfg.num_layers_k_proj, true, true);
    blk.v_proj = add_mlp(file, p + "att.v_proj", C_, cfg.v_proj_hidden_dim, C_, cfg.num_layers_v_proj, true, true);
    blk.ffn = add_mlp(file, p + "mlp", C_, cfg.ffn_hidden_dim, C_, cfg.num_layers_ffn, true, true);
    blk.out_proj = add_linear(file, p + "att.out_proj", C_, C_);
    // latent_q (C, M) reinterpreted by a raw row-major reshape as (H, M, E), q-normed, times attn_scale.
    std::vector<float> q = file.weight(p + "att.latent_q").values;
    if (cfg.qk_norm) {
      const std::vector<float>& w = file.weight(p + "att.q_norm.weight").values;
      const float* bias = cfg.rmsnorm ? nullptr : file.weight(p + "att.q_norm.bias").values.data();
      for (std::size_t hm = 0; hm < static_cast<std::size_t>(H_) * M_; ++hm)
        normalize_vector(q.data() + hm * E_, E_, w.data(), bias, static_cast<float>(eps));
      blk.k_norm = add_norm(file, p + "att.k_norm", E_);
    }
    const auto scale = static_cast<float>(cfg.attn_scale);
    for (float& v : q) v *= scale;
    blk.q = blob_.add(q);
    blocks_.push_back(blk);
  }

  cu::DeviceGuard guard(device_);
  cu::check(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_),
            "cudaDeviceGetAttribute(MultiProcessorCount)");
  stream_ = cu::Stream(device_);
  ev_start_ = cu::Event(device_);
  ev_uploaded_ = cu::Event(device_);
  ev_computed_ = cu::Event(device_);
  ev_end_ = cu::Event(device_);
  weights_.resize(blob_.host().size(), device_);
  cu::copy_to_device(weights_.data(), blob_.host().data(), blob_.host().size() * sizeof(float), stream_.get());
  std::vector<cu::MlpLayer> table;
  for (const LayerPlan& l : layer_plans_) {
    cu::MlpLayer d;
    d.weight_t = weights_.data() + l.weight_t;
    d.bias = weights_.data() + l.bias;
    d.in = l.in;
    d.out = l.out;
    d.ld = cu::mlp_weight_ld(l.out);
    d.act = l.act;
    d.add_input = l.add_input;
    table.push_back(d);
  }
  std::vector<double> norm;
  const Normalization& nf = file.normalization;
  has_input_norm_ = nf.has_input();
  has_output_norm_ = nf.has_output();
  for (const auto* v : {&nf.input_mean, &nf.input_std, &nf.output_mean, &nf.output_std})
    norm.insert(norm.end(), v->begin(), v->end());
  normalization_.resize(std::max<std::size_t>(norm.size(), 1), device_);
  if (!norm.empty()) cu::copy_to_device(normalization_.data(), norm.data(), norm.size() * sizeof(double), stream_.get());
  layers_.resize(table.size(), device_);
  cu::copy_to_device(layers_.data(), table.data(), table.size() * sizeof(cu::MlpLayer), stream_.get());
  stream_.synchronize();  // the host copies (table, blob) may go now
}

FlareCudaForward::~FlareCudaForward() = default;

NormPlan FlareCudaForward::add_norm(const ModelFile& file, const std::string& prefix, int dim) {
  NormPlan n;
  n.dim = dim;
  n.rms = cfg_.rmsnorm;
  n.eps = static_cast<float>(cfg_.rmsnorm ? cfg_.rmsnorm_eps : cfg_.layernorm_eps);
  n.weight = blob_.add(file.weight(prefix + ".weight").values);
  if (!n.rms) {
    n.bias = blob_.add(file.weight(prefix + ".bias").values);
    n.has_bias = true;
  }
  return n;
}

MlpPlan FlareCudaForward::add_linear(const ModelFile& file, const std::string& prefix, int in, int out) {
  MlpPlan m;
  m.first = static_cast<int>(layer_plans_.size());
  m.count = 1;
  m.in = in;
  m.out = out;
  m.max_width = std::max(in, out);
  std::vector<float> wt, bias;
  cu::pack_mlp_linear(file.weight(prefix + ".weight").values.data(), file.weight(prefix + ".bias").values.data(), out,
                      in, wt, bias);
  LayerPlan l;
  l.weight_t = blob_.add(wt);
  l.bias = blob_.add(bias);
  l.in = in;
  l.out = out;
  layer_plans_.push_back(l);
  return m;
}

MlpPlan FlareCudaForward::add_mlp(const ModelFile& file, const std::string& prefix, int in, int hidden, int out,
                                  int num_layers, bool input_residual, bool output_residual) {
  // FLARE.py's ResidualMLP (model-format.md 4.1): L = -1 is one Linear (+ x iff both residual flags and
  // in == out); else h = act(fc1 x) (+ x), h = h + act(fcs.j h), y = fc2 h (+ h).
  if (num_layers == -1) {
    MlpPlan m = add_linear(file, prefix + ".fc", in, out);
    layer_plans_.back().add_input = input_residual && output_residual && in == out;
    return m;
  }
  const kernels::Activation act = to_kernel(cfg_.act);
  MlpPlan m;
  m.first = static_cast<int>(layer_plans_.size());
  m.in = in;
  m.out = out;
  m.max_width = std::max({in, hidden, out});
  add_linear(file, prefix + ".fc1", in, hidden);
  layer_plans_.back().act = act;
  layer_plans_.back().add_input = input_residual && in == hidden;
  for (int j = 0; j < num_layers; ++j) {
    add_linear(file, prefix + ".fcs." + std::to_string(j), hidden, hidden);
    layer_plans_.back().act = act;
    layer_plans_.back().add_input = true;
  }
  add_linear(file, prefix + ".fc2", hidden, out);
  layer_plans_.back().add_input = output_residual && hidden == out;
  m.count = static_cast<int>(layer_plans_.size()) - m.first;
  return m;
}

void FlareCudaForward::run_norm(const NormPlan& n, const float* x, index_t ldx, float* y, index_t ldy, index_t rows) {
  cu::NormArgs a;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.rows = rows;
  a.dim = n.dim;
  a.weight = weights_.data() + n.weight;
  a.bias = n.has_bias ? weights_.data() + n.bias : nullptr;
  a.eps = n.eps;
  a.rms = n.rms;
  cu::norm(a, stream_.get());
}

void FlareCudaForward::run_mlp(const MlpPlan& m, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
                               const float* extra, index_t ld_extra) {
  cu::MlpArgs a;
  a.precision = precision_;
  a.layers = layers_.data() + m.first;
  a.num_layers = m.count;
  a.max_width = m.max_width;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.rows = rows;
  a.extra = extra;
  a.ld_extra = ld_extra;
  cu::mlp(a, stream_.get());
}

bool same_layout(const SampleLayout& layout, index_t n, const std::vector<SampleLayout::Segment>& segments,
                 const std::vector<index_t>& sizes) {
  if (layout.local_points() != n || layout.sample_sizes() != sizes || layout.segments().size() != segments.size())
    return false;
  for (std::size_t i = 0; i < segments.size(); ++i) {
    const auto& a = layout.segments()[i];
    const auto& b = segments[i];
    if (a.sample != b.sample || a.begin != b.begin || a.end != b.end) return false;
  }
  return true;
}

void FlareCudaForward::prepare(const SampleLayout& layout, bool reproducible) {
  const index_t n = layout.local_points();
  const auto rows = static_cast<std::size_t>(std::max<index_t>(n, 1));
  const cu::EncodeShape shape = cu::encode_shape(M_);
  slices_ = shape.slices;
  if (!same_layout(layout, n_, segments_, sample_sizes_)) {
    // Encode chunks: about four blocks per multiprocessor over the whole local point set, at least
    // 256 points each; decode tiles of kDecodeRows points. Neither straddles two samples.
    const index_t target = std::max<index_t>(1, 4 * static_cast<index_t>(sm_count_) / (static_cast<index_t>(H_) * shape.groups));
    const index_t chunk_rows = std::max<index_t>(256, kernels::round_up((n + target - 1) / target, 256));
    std::vector<cu::LatentChunk> chunks, tiles;
    std::vector<int> chunk_begin;
    std::vector<index_t> sample;
    const auto& segments = layout.segments();
    for (std::size_t s = 0; s < segments.size(); ++s) {
      chunk_begin.push_back(static_cast<int>(chunks.size()));
      sample.push_back(segments[s].sample);
      cu::append_chunks(segments[s].begin, segments[s].end, static_cast<int>(s), static_cast<int>(chunk_rows), chunks);
      cu::append_chunks(segments[s].begin, segments[s].end, static_cast<int>(s), cu::kDecodeRows, tiles);
    }
    chunk_begin.push_back(static_cast<int>(chunks.size()));
    chunks_.resize(chunks.size(), device_);
    tiles_.resize(tiles.size(), device_);
    seg_chunk_begin_.resize(chunk_begin.size(), device_);
    seg_sample_.resize(sample.size(), device_);
    cu::copy_to_device(chunks_.data(), chunks.data(), chunks.size() * sizeof(cu::LatentChunk), stream_.get());
    cu::copy_to_device(tiles_.data(), tiles.data(), tiles.size() * sizeof(cu::LatentChunk), stream_.get());
    cu::copy_to_device(seg_chunk_begin_.data(), chunk_begin.data(), chunk_begin.size() * sizeof(int), stream_.get());
    cu::copy_to_device(seg_sample_.data(), sample.data(), sample.size() * sizeof(index_t), stream_.get());
    stream_.synchronize();  // the host vectors go out of scope
    num_chunks_ = static_cast<int>(chunks.size());
    num_tiles_ = static_cast<int>(tiles.size());
    n_ = n;
    segments_ = segments;
    sample_sizes_ = layout.sample_sizes();
    samples_ = layout.num_samples();
  }
  const std::size_t S = std::max<std::size_t>(segments_.size(), 1);
  const std::size_t hm = static_cast<std::size_t>(H_) * M_;
  const std::size_t global_hm = static_cast<std::size_t>(samples_) * hm;
  const std::size_t parts = static_cast<std::size_t>(std::max(num_chunks_, 1)) * static_cast<std::size_t>(slices_);
  const std::size_t width = static_cast<std::size_t>(E_) + 1;
  in_.resize(rows * cfg_.in_dim, device_);
  out_.resize(rows * cfg_.out_dim, device_);
  in_host_.resize(rows * cfg_.in_dim);
  out_host_.resize(rows * cfg_.out_dim);
  for (auto* buffer : {&x_, &scratch_, &keys_, &values_}) buffer->resize(rows * C_, device_);
  z_.resize(S * hm * E_, device_);
  if (reproducible) {
    part_max_.resize(parts * hm, device_);
    part_vmax_.resize(static_cast<std::size_t>(std::max(num_chunks_, 1)) * H_, device_);
    maxima_.resize(global_hm + static_cast<std::size_t>(samples_) * H_, device_);
    exact_.resize(global_hm * width * 2, device_);
    scales_.resize(S * (1 + static_cast<std::size_t>(H_)), device_);
  } else {
    part_ref_.resize(parts * hm, device_);
    part_acc_.resize(parts * hm * width, device_);
    local_ref_.resize(global_hm, device_);
    global_ref_.resize(global_hm, device_);
    sums_.resize(global_hm * width, device_);

  }
}

cu::LatentProblem FlareCudaForward::problem(int b) const {
  cu::LatentProblem p;
  p.q = weights_.data() + blocks_[static_cast<std::size_t>(b)].q;
  p.H = H_;
  p.M = M_;
  p.E = E_;
  p.k = keys_.data();
  p.v = values_.data();
  p.ld = C_;
  p.chunks = chunks_.data();
  p.num_chunks = num_chunks_;
  return p;
}

cu::SegmentInfo FlareCudaForward::segment_info() const {
  cu::SegmentInfo s;
  s.chunk_begin = seg_chunk_begin_.data();
  s.sample = seg_sample_.data();
  s.segments = static_cast<int>(segments_.size());
  return s;
}

/// norm1, k/v projections and this rank's part of the encode of block b (up to the per-sample merge).
void FlareCudaForward::start_block(int b, bool reproducible) {
  const BlockPlan& blk = blocks_[static_cast<std::size_t>(b)];
  const cudaStream_t s = stream_.get();
  run_norm(blk.norm1, x_.data(), C_, scratch_.data(), C_, n_);
  run_mlp(blk.k_proj, scratch_.data(), C_, keys_.data(), C_, n_);
  if (blk.k_norm) run_norm(*blk.k_norm, keys_.data(), E_, keys_.data(), E_, n_ * H_);  // per head, in place
  run_mlp(blk.v_proj, scratch_.data(), C_, values_.data(), C_, n_);
  const cu::LatentProblem p = problem(b);
  const std::size_t global_hm = static_cast<std::size_t>(samples_) * H_ * M_;
  if (reproducible) {
    cu::fill(maxima_.data(), maxima_.size(), -INFINITY, s);
    cu::latent_max_partials(p, part_max_.data(), part_vmax_.data(), s);
    cu::latent_max_merge(p, part_max_.data(), part_vmax_.data(), segment_info(), maxima_.data(),
                         maxima_.data() + global_hm, s);
  } else {
    cu::fill(local_ref_.data(), global_hm, kernels::kNoExponent, s);
    cu::zero(sums_.data(), sums_.bytes(), s);
    cu::latent_encode_partials(p, part_ref_.data(), part_acc_.data(), s);
    cu::latent_encode_merge(p, part_ref_.data(), part_acc_.data(), segment_info(), local_ref_.data(), sums_.data(), s);
  }
}

/// Z from the reduced sums, decode, out_proj, norm2 and the feed-forward of block b.
void FlareCudaForward::finish_block(int b, bool reproducible) {
  const BlockPlan& blk = blocks_[static_cast<std::size_t>(b)];
  const cudaStream_t s = stream_.get();
  const cu::SegmentInfo seg = segment_info();
  if (reproducible)
    cu::latent_exact_finalize(exact_.data(), seg, scales_.data(), scales_.data() + segments_.size(), H_, M_, E_,
                              z_.data(), s);
  else
    cu::latent_encode_finalize(sums_.data(), seg, H_, M_, E_, z_.data(), s);
  cu::LatentDecodeArgs d;
  d.q = weights_.data() + blk.q;
  d.z = z_.data();
  d.H = H_;
  d.M = M_;
  d.E = E_;
  d.k = keys_.data();
  d.ldk = C_;
  d.y = scratch_.data();
  d.ldy = C_;
  d.tiles = tiles_.data();
  d.num_tiles = num_tiles_;
  cu::latent_decode(d, s);
  run_mlp(blk.out_proj, scratch_.data(), C_, x_.data(), C_, n_, x_.data(), C_);  // x = x + out_proj(y)
  run_norm(blk.norm2, x_.data(), C_, scratch_.data(), C_, n_);
  run_mlp(blk.ffn, scratch_.data(), C_, x_.data(), C_, n_, x_.data(), C_);  // x = x + mlp(norm2(x))
}

/// Fixed-point scales of the local segments from the global sample sizes and |v| maxima (host).
void FlareCudaForward::exact_scales(const SampleLayout& layout) {
  const std::size_t S = segments_.size();
  scales_host_.assign(S * (1 + static_cast<std::size_t>(H_)), kernels::ExactScale{});
  for (std::size_t s = 0; s < S; ++s) {
    const auto sample = static_cast<std::size_t>(segments_[s].sample);
    const index_t count = layout.sample_sizes()[sample];
    scales_host_[s] = kernels::exact_scale(count, 1.0);
    for (int h = 0; h < H_; ++h)
      scales_host_[S + s * H_ + static_cast<std::size_t>(h)] =
          kernels::exact_scale(count, value_max_host_[sample * H_ + static_cast<std::size_t>(h)]);
  }
}

template <class F>
void FlareCudaForward::local_step(const Comm& comm, F&& work) {
  Status status;
  try {
    cu::DeviceGuard guard(device_);
    work();
    stream_.synchronize();
  } catch (...) {
    status = status_of_current_exception(device_);
  }
  comm.agree_or_throw(status);
}

void FlareCudaForward::allreduce(const Comm& comm, void* device_data, std::size_t count, DType type, ReduceOp op) {
  if (comm.size() == 1 || count == 0) return;
  if (transport_->direct()) {  // NCCL: enqueued on the stream, the outcome agreed like a local step
    local_step(comm, [&] { transport_->allreduce(device_data, count, type, op, stream_.get()); });
    return;
  }
  transport_->allreduce(device_data, count, type, op, stream_.get());  // staged: agrees its own steps
}

void FlareCudaForward::ensure_transport(const Comm& comm) {
  transport_ = comm.size() > 1 ? &comm.device_transport(device_) : nullptr;  // collective on first use
}

void FlareCudaForward::run(const Comm& comm, const SampleLayout& layout, bool reproducible,
                           const std::function<void(cudaStream_t)>& load, const std::function<void(cudaStream_t)>& store,
                           const std::function<void()>& finish) {
  const int blocks = cfg_.num_blocks;
  ensure_transport(comm);
  timing_.transport = comm.size() == 1 ? "none" : transport_->name();
  local_step(comm, [&] {
    prepare(layout, reproducible);
    const cudaStream_t s = stream_.get();
    ev_start_.record(s);
    load(s);
    ev_uploaded_.record(s);
    run_mlp(in_proj_, in_.data(), cfg_.in_dim, x_.data(), C_, n_);
    if (blocks > 0) start_block(0, reproducible);
  });
  const std::size_t global_hm = static_cast<std::size_t>(samples_) * H_ * M_;
  const std::size_t width = static_cast<std::size_t>(E_) + 1;
  for (int b = 0; b < blocks; ++b) {
    // The global part of the encode of block b.
    if (reproducible) {
      allreduce(comm, maxima_.data(), global_hm + static_cast<std::size_t>(samples_) * H_, DType::f32, ReduceOp::max);
      local_step(comm, [&] {
        const std::size_t value_maxima = static_cast<std::size_t>(samples_) * H_;
        value_max_host_.resize(value_maxima);
        cu::copy_to_host(value_max_host_.data(), maxima_.data() + global_hm, value_maxima * sizeof(float), stream_.get());
        stream_.synchronize();
        exact_scales(layout);
        cu::copy_to_device(scales_.data(), scales_host_.data(), scales_host_.size() * sizeof(kernels::ExactScale),
                           stream_.get());
        cu::zero(exact_.data(), exact_.bytes(), stream_.get());
        cu::latent_encode_exact(problem(b), maxima_.data(), segment_info(), scales_.data(),
                                scales_.data() + segments_.size(), exact_.data(), stream_.get());
      });
      allreduce(comm, exact_.data(), global_hm * width * 2, DType::i64, ReduceOp::sum);
    } else if (comm.size() > 1) {
      local_step(comm, [&] {
        cu::copy_on_device(global_ref_.data(), local_ref_.data(), global_hm * sizeof(std::int32_t), stream_.get());
      });
      allreduce(comm, global_ref_.data(), global_hm, DType::i32, ReduceOp::max);
      local_step(comm, [&] {
        cu::latent_encode_rescale(local_ref_.data(), global_ref_.data(), sums_.data(), static_cast<index_t>(global_hm), E_,
                                  stream_.get());
      });
      allreduce(comm, sums_.data(), global_hm * width, DType::f64, ReduceOp::sum);
    }
    local_step(comm, [&] {
      finish_block(b, reproducible);
      if (b + 1 < blocks) start_block(b + 1, reproducible);
    });
  }
  local_step(comm, [&] {
    const cudaStream_t s = stream_.get();
    const float* head_in = x_.data();
    if (out_norm_) {
      run_norm(*out_norm_, x_.data(), C_, scratch_.data(), C_, n_);
      head_in = scratch_.data();
    }
    run_mlp(out_mlp_, head_in, C_, out_.data(), cfg_.out_dim, n_);
    ev_computed_.record(s);
    store(s);
    ev_end_.record(s);
    stream_.synchronize();
    finish();
    timing_.upload_ms = ev_uploaded_.elapsed_ms_since(ev_start_);
    timing_.compute_ms = ev_computed_.elapsed_ms_since(ev_uploaded_);
    timing_.download_ms = ev_end_.elapsed_ms_since(ev_computed_);
    timing_.total_ms = ev_end_.elapsed_ms_since(ev_start_);
  });
}


void FlareCudaForward::forward(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out,
                               index_t ld_out, const RunOptions& options) {
  const auto in_dim = static_cast<std::size_t>(cfg_.in_dim);
  const auto out_dim = static_cast<std::size_t>(cfg_.out_dim);
  precision_ = to_kernel(options.precision);
  run(
      comm, layout, options.reproducible,
      [&](cudaStream_t s) {
        for (index_t r = 0; r < n_; ++r)
          std::memcpy(in_host_.data() + static_cast<std::size_t>(r) * in_dim, in + r * ld_in, in_dim * sizeof(float));
        cu::copy_to_device(in_.data(), in_host_.data(), static_cast<std::size_t>(n_) * in_dim * sizeof(float), s);
      },
      [&](cudaStream_t s) {
        cu::copy_to_host(out_host_.data(), out_.data(), static_cast<std::size_t>(n_) * out_dim * sizeof(float), s);
      },
      [&] {
        for (index_t r = 0; r < n_; ++r)
          std::memcpy(out + r * ld_out, out_host_.data() + static_cast<std::size_t>(r) * out_dim, out_dim * sizeof(float));
      });
}

void FlareCudaForward::upload_order(const SampleLayout& layout) {
  const std::vector<index_t>& order = layout.order();
  if (order == order_host_) return;
  order_.resize(std::max<std::size_t>(order.size(), 1), device_);
  if (!order.empty()) {
    cu::copy_to_device(order_.data(), order.data(), order.size() * sizeof(index_t), stream_.get());
    stream_.synchronize();
  }
  order_host_ = order;
}

void FlareCudaForward::predict_device(const Comm& comm, const SampleLayout& layout, const Model::DeviceArrays& arrays,
                                      const RunOptions& options,
                                      const std::function<void(const std::vector<std::uint64_t>&)>& check_inputs) {
  const auto in_c = static_cast<std::size_t>(cfg_.in_dim), out_c = static_cast<std::size_t>(cfg_.out_dim);
  precision_ = to_kernel(options.precision);
  run(
      comm, layout, options.reproducible,
      [&](cudaStream_t s) {
        upload_order(layout);
        bad_.resize(in_c, device_);
        bad_host_.resize(in_c);
        cu::zero(bad_.data(), bad_.bytes(), s);
        cu::CallerInput g;
        g.data = arrays.in;
        g.is_double = arrays.is_double;
        g.point_stride = arrays.in_point_stride;
        g.component_stride = arrays.in_component_stride;
        g.channels = cfg_.in_dim;
        g.rows = n_;
        g.order = order_host_.empty() ? nullptr : order_.data();
        g.mean = has_input_norm_ ? normalization_.data() : nullptr;
        g.std = has_input_norm_ ? normalization_.data() + in_c : nullptr;
        g.work = in_.data();
        g.ld_work = cfg_.in_dim;
        g.bad = bad_.data();
        cu::gather_caller_input(g, s);
        // The per-channel counts of non-finite inputs (in_dim integers) are the only thing read back
        // before the forward: the error must be agreed before any collective of the forward.
        cu::copy_to_host(bad_host_.data(), bad_.data(), bad_.bytes(), s);
        stream_.synchronize();
        check_inputs(std::vector<std::uint64_t>(bad_host_.data(), bad_host_.data() + in_c));
      },
      [&](cudaStream_t s) {
        cu::CallerOutput o;
        o.data = arrays.out;
        o.is_double = arrays.is_double;
        o.point_stride = arrays.out_point_stride;
        o.component_stride = arrays.out_component_stride;
        o.channels = cfg_.out_dim;
        o.rows = n_;
        o.order = order_host_.empty() ? nullptr : order_.data();
        const std::size_t at = has_input_norm_ ? 2 * in_c : 0;
        o.mean = has_output_norm_ ? normalization_.data() + at : nullptr;
        o.std = has_output_norm_ ? normalization_.data() + at + out_c : nullptr;
        o.work = out_.data();
        o.ld_work = cfg_.out_dim;
        cu::scatter_caller_output(o, s);
      },
      [] {});
}

}  // namespace

FlareCudaTiming last_cuda_timing(const FlareDeviceForward& forward) {
  const auto* f = dynamic_cast<const FlareCudaForward*>(&forward);
  if (!f) throw Error(ErrorCode::invalid_argument, "last_cuda_timing: not a CUDA forward");
  return f->timing();
}

std::unique_ptr<FlareDeviceForward> make_flare_cuda_forward(const FlareConfig& cfg, const ModelFile& file, int device) {
  try {
    return std::make_unique<FlareCudaForward>(cfg, file, device);
  } catch (const Error&) {
    throw;
  } catch (...) {
    status_of_current_exception(device).raise();
  }
}

}  // namespace surrogate::detail
