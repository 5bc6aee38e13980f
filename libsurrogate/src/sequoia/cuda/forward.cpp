// Sequoia's float32 forward on a CUDA device (device.hpp): network.cpp's stages on device arrays, the dense
// layers of device/layers.hpp, the tree attention and the layers of surrogate/kernels/cuda_tree_*.hpp. The
// classification head's means and its three small layers run on the host from the level the head reads.
// share/docs/sequoia.md, "On a CUDA device".
#include "device.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>

#include "../../cuda_errors.hpp"
#include "../../device/layers.hpp"
#include "../network_impl.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_tree_attention.hpp"
#include "surrogate/kernels/cuda_tree_layers.hpp"

namespace surrogate::sequoia::gpu {
namespace {

namespace cu = kernels::cuda;
using kernels::index_t;
using surrogate::device::upload;

/// A device array of at least n values (grown, never shrunk).
template <class T>
T* sized(cu::DeviceBuffer<T>& b, std::size_t n, int device) {
  b.resize(std::max<std::size_t>(n, 1), device);
  return b.data();
}

/// Places of a BatchNorm's folded scale and shift in the weight arena.
struct Norm {
  std::size_t scale = 0, shift = 0;
  int dim = 0;
};

/// Places of a positional MLP: W1, b1, the BN's scale and shift (float arena), W3^T and b3 (double arena).
struct Positional {
  std::size_t w1 = 0, b1 = 0, scale = 0, shift = 0, w3 = 0, b3 = 0;
};

/// Key lists on the device.
struct Lists {
  cu::DeviceBuffer<std::int64_t> first, keys;
  void upload_from(const KeyLists& l, int device, cudaStream_t s) {
    upload(first, std::span<const std::int64_t>(l.first), device, s);
    upload(keys, std::span<const std::int64_t>(l.keys), device, s);
  }
};

class CudaForward final : public DeviceForward {
 public:
  CudaForward(const Network& net, int device);
  int device() const override { return device_; }
  std::vector<float> forward(const Share& s, const Hierarchy& h, const float* features, const float* sample_features) override;

 private:
  struct Level {
    surrogate::device::Dense mlp1, q, k, v, expand_k, expand_v, shrink_k, shrink_v;
    Norm mlp1_norm, out_norm;
    Positional parents, children, siblings;
  };
  std::vector<float> run(const Share& s, const Hierarchy& h, const float* features, const float* sample_features);
  Norm norm(const BatchNorm& n) {
    return {weights_.append(n.scale), weights_.append(n.shift), static_cast<int>(n.scale.size())};
  }
  Positional positional(const PositionalMlp& pe) {
    Positional p;
    p.w1 = weights_.append(pe.first.w);
    p.b1 = weights_.append(pe.first.b);
    p.scale = weights_.append(pe.norm.scale);
    p.shift = weights_.append(pe.norm.shift);
    p.w3 = doubles_.size();
    doubles_.insert(doubles_.end(), pe.w3.begin(), pe.w3.end());
    p.b3 = doubles_.size();
    doubles_.insert(doubles_.end(), pe.b3.begin(), pe.b3.end());
    return p;
  }
  void dense(const surrogate::device::Dense& l, const float* x, float* y, index_t rows) {
    surrogate::device::dense(l, weights_.data(), x, l.in, y, l.out, rows, stream_.get());
  }
  void apply_norm(const Norm& n, float* x, index_t rows, bool relu) {
    cu::TreeNormArgs a;
    a.x = x;
    a.ld = n.dim;
    a.rows = rows;
    a.dim = n.dim;
    a.scale = weights_.data() + n.scale;
    a.shift = weights_.data() + n.shift;
    a.relu = relu;
    cu::tree_norm(a, stream_.get());
  }
  /// Tree attention of `queries` rows over key rows k, v (width heads x e each), lists on the device.
  void attend(const Positional& pe, int width, const float* q, index_t queries, const float* k, const float* v,
              const float* query_positions, const float* key_positions, const Lists& lists, float fixed_denom,
              float* out);

  const Network::Impl* net_;
  Config cfg_;
  int device_;
  cu::Stream stream_;
  surrogate::device::WeightArena weights_;
  std::vector<double> doubles_;
  cu::DeviceBuffer<double> device_doubles_, scratch_;
  std::vector<surrogate::device::Dense> init_;
  std::vector<Norm> init_norm_;
  std::vector<std::vector<Level>> blocks_;
  std::size_t conv_w_ = 0, conv_b_ = 0, ln_w_ = 0, ln_b_ = 0;
  surrogate::device::Dense head0_, head3_;
  // Per forward: the hierarchy's arrays and the work arrays, grown to the largest seen.
  std::vector<cu::DeviceBuffer<float>> pos_, x_, y_, q_, k_, v_;
  std::vector<Lists> parents_, children_, siblings_, pool_;
  Lists conv_;
  cu::DeviceBuffer<float> in_, kw_, vw_, att_p_, att_c_, att_s_, pooled_, z_, u_, out_, classes_;
  cu::DeviceBuffer<std::int64_t> batch_;
};

CudaForward::CudaForward(const Network& net, int device) : net_(&net.impl()), cfg_(net.config()), device_(device) {
  std::string why;
  const int count = device == cu::kEmulatedDevice ? 0 : cu::device_count(&why);
  if (device != cu::kEmulatedDevice && (device < 0 || device >= count))
    throw Error(ErrorCode::unsupported, "sequoia: CUDA device " + std::to_string(device) + " requested, but " +
                                            (count == 0 ? "no CUDA device is visible (" + why + ")"
                                                        : std::to_string(count) + " device(s) are visible"));
  const Network::Impl& m = *net_;
  const int L = cfg_.levels();
  for (int i = 0; i < L; ++i) {
    init_.push_back(weights_.append_dense(m.init[static_cast<std::size_t>(i)].packed));
    init_norm_.push_back(i == 0 && cfg_.kind == Config::Kind::classification ? Norm{} : norm(m.init_norm[static_cast<std::size_t>(i)]));
  }
  if (cfg_.kind == Config::Kind::classification) {
    conv_w_ = weights_.append(m.init[0].w);
    conv_b_ = weights_.append(m.init[0].b);
  } else {
    head0_ = weights_.append_dense(m.head0.packed);
    head3_ = weights_.append_dense(m.head3.packed);
    ln_w_ = weights_.append(m.ln_w);
    ln_b_ = weights_.append(m.ln_b);
  }
  for (const Network::Impl::Block& b : m.blocks) {
    std::vector<Level> levels;
    for (int i = 0; i < L; ++i) {
      const Network::Impl::Level& l = b.levels[static_cast<std::size_t>(i)];
      Level d;
      d.mlp1 = weights_.append_dense(l.mlp1.packed);
      d.q = weights_.append_dense(l.q.packed);
      d.k = weights_.append_dense(l.k.packed);
      d.v = weights_.append_dense(l.v.packed);
      d.mlp1_norm = norm(l.mlp1_norm);
      d.out_norm = norm(l.out_norm);
      if (i > 0) {
        d.expand_k = weights_.append_dense(l.expand_k.packed);
        d.expand_v = weights_.append_dense(l.expand_v.packed);
        d.children = positional(l.children);
      }
      if (i + 1 < L) {
        d.shrink_k = weights_.append_dense(l.shrink_k.packed);
        d.shrink_v = weights_.append_dense(l.shrink_v.packed);
        d.parents = positional(l.parents);
        d.siblings = positional(l.siblings);
      }
      levels.push_back(d);
    }
    blocks_.push_back(std::move(levels));
  }
  try {
    const cu::DeviceGuard guard(device_);
    stream_ = cu::Stream(device_);
    weights_.upload(device_, stream_.get());
    upload(device_doubles_, std::span<const double>(doubles_), device_, stream_.get());
    cu::synchronize(stream_.get());
  } catch (...) {
    surrogate::detail::raise_current_cuda_error("sequoia", device_);
  }
}

std::vector<float> CudaForward::forward(const Share& s, const Hierarchy& h, const float* features,
                                        const float* sample_features) {
  try {
    const cu::DeviceGuard guard(device_);
    return run(s, h, features, sample_features);
  } catch (...) {
    surrogate::detail::raise_current_cuda_error("sequoia", device_);
  }
}

void CudaForward::attend(const Positional& pe, int width, const float* q, index_t queries, const float* k, const float* v,
                         const float* query_positions, const float* key_positions, const Lists& lists, float fixed_denom,
                         float* out) {
  cu::TreeAttentionArgs a;
  a.queries = queries;
  a.heads = cfg_.heads;
  a.e = width / cfg_.heads;
  a.q = q;
  a.ldq = width;
  a.k = k;
  a.v = v;
  a.ldkv = width;
  a.query_positions = query_positions;
  a.key_positions = key_positions;
  a.first = lists.first.data();
  a.keys = lists.keys.data();
  a.pe_w1 = weights_.data() + pe.w1;
  a.pe_b1 = weights_.data() + pe.b1;
  a.bn_scale = weights_.data() + pe.scale;
  a.bn_shift = weights_.data() + pe.shift;
  a.pe_w3 = device_doubles_.data() + pe.w3;
  a.pe_b3 = device_doubles_.data() + pe.b3;
  a.tau = static_cast<float>(std::sqrt(static_cast<double>(cfg_.dim)));
  a.fixed_denom = fixed_denom;
  a.out = out;
  a.ldo = width;
  if (a.e > cu::kMaxTreeHeadDim) a.scratch = sized(scratch_, static_cast<std::size_t>(queries * width), device_);
  cu::tree_attention(a, stream_.get());
}

std::vector<float> CudaForward::run(const Share& s, const Hierarchy& h, const float* features, const float* sample_features) {
  const Network::Impl& m = *net_;
  const int L = cfg_.levels(), dim = cfg_.dim;
  const bool seg = cfg_.kind == Config::Kind::segmentation;
  const cudaStream_t st = stream_.get();
  const auto nodes = [&h](int i) { return h.nodes(i); };
  const auto n0 = static_cast<std::size_t>(nodes(0));
  if (s.split || s.points.size() != n0)
    throw Error(ErrorCode::internal, "sequoia: the CUDA forward runs whole samples only");
  // 1. The hierarchy: positions, key lists, the pooling lists (children rows of every parent, in order).
  const auto level_count = static_cast<std::size_t>(L);
  for (auto* v : {&pos_, &x_, &y_, &q_, &k_, &v_}) v->resize(level_count);
  for (auto* v : {&parents_, &children_, &siblings_, &pool_}) v->resize(level_count);
  for (int i = 0; i < L; ++i) {
    const auto si = static_cast<std::size_t>(i);
    upload(pos_[si], std::span<const float>(h.level_positions[si]), device_, st);
    if (i + 1 < L) {
      parents_[si].upload_from(s.parents[si], device_, st);
      siblings_[si].upload_from(s.siblings[si], device_, st);
      const auto& parent = h.pool_parent[si];
      KeyLists pool;
      pool.first.assign(static_cast<std::size_t>(nodes(i + 1)) + 1, 0);
      const auto children = std::min<std::size_t>(static_cast<std::size_t>(nodes(i)), parent.size());
      for (std::size_t r = 0; r < children; ++r) ++pool.first[static_cast<std::size_t>(parent[r]) + 1];
      for (std::size_t p = 1; p < pool.first.size(); ++p) pool.first[p] += pool.first[p - 1];
      pool.keys.resize(children);
      std::vector<std::int64_t> next(pool.first.begin(), pool.first.end() - 1);
      for (std::size_t r = 0; r < children; ++r) pool.keys[static_cast<std::size_t>(next[static_cast<std::size_t>(parent[r])]++)] = static_cast<std::int64_t>(r);
      pool_[si].upload_from(pool, device_, st);
    }
    if (i > 0) children_[si].upload_from(s.children[si], device_, st);
  }
  upload(in_, std::span<const float>(features, n0 * static_cast<std::size_t>(cfg_.c)), device_, st);

  // 2. Init: level 0 from the point features, then each level from the max-pooled level below.
  float* x0 = sized(x_[0], n0 * static_cast<std::size_t>(dim), device_);
  if (seg) {
    dense(init_[0], in_.data(), x0, static_cast<index_t>(n0));
    apply_norm(init_norm_[0], x0, static_cast<index_t>(n0), true);
  } else {
    conv_.upload_from(s.pointconv, device_, st);
    cu::PointConvArgs a;
    a.x = in_.data();
    a.ldx = cfg_.c;
    a.c = cfg_.c;
    a.positions = pos_[0].data();
    a.keys = conv_.keys.data();
    a.k = Config::k_pointconv;
    a.points = static_cast<index_t>(n0);
    a.w = weights_.data() + conv_w_;
    a.b = weights_.data() + conv_b_;
    a.out = dim;
    a.y = x0;
    a.ldy = dim;
    cu::point_conv_max(a, st);
  }
  for (int i = 0; i + 1 < L; ++i) {
    const auto si = static_cast<std::size_t>(i);
    const int w = cfg_.width(i);
    cu::TreePoolArgs a;
    a.x = x_[si].data();
    a.ldx = w;
    a.first = pool_[si].first.data();
    a.rows = pool_[si].keys.data();
    a.parents = nodes(i + 1);
    a.width = w;
    a.out = sized(pooled_, static_cast<std::size_t>(nodes(i + 1) * w), device_);
    a.ldo = w;
    cu::tree_pool(a, st);
    float* next = sized(x_[si + 1], static_cast<std::size_t>(nodes(i + 1) * cfg_.width(i + 1)), device_);
    dense(init_[si + 1], pooled_.data(), next, nodes(i + 1));
    apply_norm(init_norm_[si + 1], next, nodes(i + 1), true);
  }

  // 3. The blocks: every level's y, Q, K, V from the previous block, then the three attentions and the mix.
  const float sib_denom = static_cast<float>(std::sqrt(static_cast<double>(dim)) * cfg_.k_siblings() + 1e-8);
  for (std::size_t bi = 0; bi < blocks_.size(); ++bi) {
    const std::vector<Level>& block = blocks_[bi];
    for (int i = 0; i < L; ++i) {
      const auto si = static_cast<std::size_t>(i);
      const auto rows = static_cast<std::size_t>(nodes(i) * cfg_.width(i));
      const Level& l = block[si];
      dense(l.mlp1, x_[si].data(), sized(y_[si], rows, device_), nodes(i));
      apply_norm(l.mlp1_norm, y_[si].data(), nodes(i), true);
      dense(l.q, y_[si].data(), sized(q_[si], rows, device_), nodes(i));
      dense(l.k, y_[si].data(), sized(k_[si], rows, device_), nodes(i));
      dense(l.v, y_[si].data(), sized(v_[si], rows, device_), nodes(i));
    }
    for (int i = 0; i < L; ++i) {
      const auto si = static_cast<std::size_t>(i);
      const int w = cfg_.width(i);
      const Level& l = block[si];
      const auto rows = static_cast<std::size_t>(nodes(i) * w);
      if (i + 1 < L) {
        dense(l.shrink_k, k_[si + 1].data(), sized(kw_, static_cast<std::size_t>(nodes(i + 1) * w), device_), nodes(i + 1));
        dense(l.shrink_v, v_[si + 1].data(), sized(vw_, static_cast<std::size_t>(nodes(i + 1) * w), device_), nodes(i + 1));
        attend(l.parents, w, q_[si].data(), nodes(i), kw_.data(), vw_.data(), pos_[si].data(), pos_[si + 1].data(),
               parents_[si], 0.0f, sized(att_p_, rows, device_));
        attend(l.siblings, w, q_[si].data(), nodes(i), k_[si].data(), v_[si].data(), pos_[si].data(), pos_[si].data(),
               siblings_[si], sib_denom, sized(att_s_, rows, device_));
      }
      if (i > 0) {
        dense(l.expand_k, k_[si - 1].data(), sized(kw_, static_cast<std::size_t>(nodes(i - 1) * w), device_), nodes(i - 1));
        dense(l.expand_v, v_[si - 1].data(), sized(vw_, static_cast<std::size_t>(nodes(i - 1) * w), device_), nodes(i - 1));
        attend(l.children, w, q_[si].data(), nodes(i), kw_.data(), vw_.data(), pos_[si].data(), pos_[si - 1].data(),
               children_[si], 0.0f, sized(att_c_, rows, device_));
      }
      cu::TreeMixArgs a;
      const auto& mix = m.blocks[bi].mix;
      a.a = i + 1 < L ? att_p_.data() : nullptr;
      a.b = i > 0 ? att_c_.data() : nullptr;
      a.s = i + 1 < L ? att_s_.data() : nullptr;
      a.ld = w;
      a.rows = nodes(i);
      a.width = w;
      for (int t = 0; t < 3; ++t) a.w[t] = mix[t];
      a.out = x_[si].data();
      a.ldo = w;
      cu::tree_mix(a, st);
      apply_norm(l.out_norm, x_[si].data(), nodes(i), true);
    }
  }

  // 4. The heads. Segmentation on the device: [x ; class vector of the point's sample] -> Linear ->
  // LayerNorm -> ReLU -> Linear. Classification on the host from the level its head reads.
  if (seg) {
    const int zw = dim + cfg_.n_class;
    float* z = sized(z_, n0 * static_cast<std::size_t>(zw), device_);
    surrogate::device::copy_rows(x0, dim, nullptr, z, zw, nullptr, static_cast<index_t>(n0), dim, st);
    if (cfg_.n_class > 0) {
      upload(batch_, std::span<const std::int64_t>(h.level_batch[0]), device_, st);
      upload(classes_, std::span<const float>(sample_features, static_cast<std::size_t>(h.samples() * cfg_.n_class)), device_, st);
      surrogate::device::copy_rows(classes_.data(), cfg_.n_class, batch_.data(), z + dim, zw, nullptr,
                                   static_cast<index_t>(n0), cfg_.n_class, st);
    }
    float* u = sized(u_, n0 * static_cast<std::size_t>(head0_.out), device_);
    dense(head0_, z, u, static_cast<index_t>(n0));
    cu::TreeLayerNormArgs ln;
    ln.x = u;
    ln.ld = head0_.out;
    ln.rows = static_cast<index_t>(n0);
    ln.dim = head0_.out;
    ln.weight = weights_.data() + ln_w_;
    ln.bias = weights_.data() + ln_b_;
    cu::tree_layer_norm_relu(ln, st);
    std::vector<float> result(n0 * static_cast<std::size_t>(cfg_.n_part));
    dense(head3_, u, sized(out_, result.size(), device_), static_cast<index_t>(n0));
    cu::copy_to_host(result.data(), out_.data(), result.size() * sizeof(float), st);
    cu::synchronize(st);
    return result;
  }
  const int level = m.head_level();
  const auto sl = static_cast<std::size_t>(level);
  Rows xs(nodes(level), cfg_.width(level));
  cu::copy_to_host(xs.v.data(), x_[sl].data(), xs.v.size() * sizeof(float), st);
  cu::synchronize(st);
  return m.classify(m.sample_means(h, m.mean_terms(s, xs, level), level, xs.cols)).values();
}

}  // namespace

std::unique_ptr<DeviceForward> make_cuda_forward(const Network& net, int device) {
  return std::make_unique<CudaForward>(net, device);
}

}  // namespace surrogate::sequoia::gpu
