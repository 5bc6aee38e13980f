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
#include "surrogate/comm.hpp"
#include "surrogate/error.hpp"
#include "surrogate/exchange.hpp"
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
  std::vector<float> forward(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                             const float* sample_features) override;

 private:
  struct Level {
    surrogate::device::Dense mlp1, q, k, v, expand_k, expand_v, shrink_k, shrink_v;
    Norm mlp1_norm, out_norm;
    Positional parents, children, siblings;
  };
  std::vector<float> run(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                         const float* sample_features);
  /// Max pooling of level `level`'s rows x into `parents` rows (pool_[level]'s lists).
  void pool(int level, const float* x, index_t parents, float* out);
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
  cu::DeviceBuffer<float> in_, kw_, vw_, att_p_, att_c_, att_s_, pooled_, part_, q1_, query_pos1_, z_, u_, out_,
      classes_;
  cu::DeviceBuffer<std::int64_t> batch_, voxels_;
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

std::vector<float> CudaForward::forward(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                                        const float* sample_features) {
  try {
    const cu::DeviceGuard guard(device_);
    return run(comm, s, h, features, sample_features);
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

std::vector<float> CudaForward::run(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                                    const float* sample_features) {
  const Network::Impl& m = *net_;
  const int L = cfg_.levels(), dim = cfg_.dim, c = cfg_.c, w1 = cfg_.width(1);
  const bool seg = cfg_.kind == Config::Kind::segmentation;
  const cudaStream_t st = stream_.get();
  const auto nodes = [&h](int i) { return h.nodes(i); };
  const auto n0 = static_cast<index_t>(s.points.size()), ne = n0 + static_cast<index_t>(s.halo.size());
  const auto nv = static_cast<index_t>(s.voxels.size());
  // Local work between two moves: on a split share an error of one rank is agreed by all before the move.
  const auto stage = [&](auto&& work) {
    if (s.split) collectively(comm, work);
    else work();
  };
  // The owned lowest voxels' rows to every rank (all level-1 rows in node order); one rank: a copy.
  const auto voxels_to_all = [&](const float* part, float* all, int width) {
    if (s.split) s.voxels_to_all.forward(part, width, all, width, width, Place{device_, st, &comm.device_transport(device_)});
    else cu::copy_on_device(all, part, static_cast<std::size_t>(nv) * static_cast<std::size_t>(width) * sizeof(float), st);
  };
  const auto to_halo = [&](float* rows, int width) {  // rows: the points' rows, then room for the halo's
    if (s.split) s.to_halo.forward(rows, width, rows + n0 * width, width, width, Place{device_, st, &comm.device_transport(device_)});
  };
  const auto level_count = static_cast<std::size_t>(L);
  for (auto* v : {&pos_, &x_, &y_, &q_, &k_, &v_}) v->resize(level_count);
  for (auto* v : {&parents_, &children_, &siblings_, &pool_}) v->resize(level_count);

  // 1. The hierarchy: positions (level 0: the points then the halo; level 1's queries: the owned voxels),
  // the share's key lists, the pooling lists (every parent's children rows, in order), the features.
  stage([&] {
    std::vector<float> pos0(static_cast<std::size_t>(ne) * 3), pos1;
    for (index_t t = 0; t < ne; ++t) {
      const index_t r = t < n0 ? s.points[static_cast<std::size_t>(t)] : s.halo[static_cast<std::size_t>(t - n0)];
      std::copy_n(h.level_positions[0].begin() + r * 3, 3, pos0.begin() + t * 3);
    }
    for (const index_t v : s.voxels) pos1.insert(pos1.end(), h.level_positions[1].begin() + v * 3, h.level_positions[1].begin() + (v + 1) * 3);
    upload(pos_[0], std::span<const float>(pos0), device_, st);
    upload(query_pos1_, std::span<const float>(pos1), device_, st);
    upload(voxels_, std::span<const index_t>(s.voxels), device_, st);
    for (int i = 1; i < L; ++i)
      upload(pos_[static_cast<std::size_t>(i)], std::span<const float>(h.level_positions[static_cast<std::size_t>(i)]), device_, st);
    for (int i = 0; i < L; ++i) {
      const auto si = static_cast<std::size_t>(i);
      if (i + 1 < L) {
        parents_[si].upload_from(s.parents[si], device_, st);
        siblings_[si].upload_from(s.siblings[si], device_, st);
        // Children rows of every parent: level 0 the points into the owned voxels' slots, above as h pools.
        std::vector<std::int64_t> parent_of;
        if (i == 0) parent_of.assign(s.slot.begin(), s.slot.end());
        else parent_of.assign(h.pool_parent[si].begin(), h.pool_parent[si].begin() +
                                                               std::min<std::ptrdiff_t>(nodes(i), static_cast<std::ptrdiff_t>(h.pool_parent[si].size())));
        KeyLists pool;
        pool.first.assign(static_cast<std::size_t>(i == 0 ? nv : nodes(i + 1)) + 1, 0);
        for (const std::int64_t p : parent_of) ++pool.first[static_cast<std::size_t>(p) + 1];
        for (std::size_t p = 1; p < pool.first.size(); ++p) pool.first[p] += pool.first[p - 1];
        pool.keys.assign(parent_of.size(), 0);
        std::vector<std::int64_t> next(pool.first.begin(), pool.first.end() - 1);
        for (std::size_t r = 0; r < parent_of.size(); ++r)
          pool.keys[static_cast<std::size_t>(next[static_cast<std::size_t>(parent_of[r])]++)] = static_cast<std::int64_t>(r);
        pool_[si].upload_from(pool, device_, st);
      }
      if (i > 0) children_[si].upload_from(s.children[si], device_, st);
    }
    sized(in_, static_cast<std::size_t>(ne * c), device_);
    if (n0 > 0) cu::copy_to_device(in_.data(), features, static_cast<std::size_t>(n0 * c) * sizeof(float), st);
    if (!seg) conv_.upload_from(s.pointconv, device_, st);
  });
  if (!seg) to_halo(in_.data(), c);

  // 2. Init: level 0 from the point features, the owned lowest voxels from their points, then every
  // level above (on every rank) from the max-pooled level below.
  float* x0 = sized(x_[0], static_cast<std::size_t>(n0 * dim), device_);
  stage([&] {
    if (seg) {
      dense(init_[0], in_.data(), x0, n0);
      apply_norm(init_norm_[0], x0, n0, true);
    } else if (n0 > 0) {
      cu::PointConvArgs a;
      a.x = in_.data();
      a.ldx = c;
      a.c = c;
      a.positions = pos_[0].data();
      a.keys = conv_.keys.data();
      a.k = Config::k_pointconv;
      a.points = n0;
      a.w = weights_.data() + conv_w_;
      a.b = weights_.data() + conv_b_;
      a.out = dim;
      a.y = x0;
      a.ldy = dim;
      cu::point_conv_max(a, st);
    }
    pool(0, x0, nv, sized(pooled_, static_cast<std::size_t>(nv * dim), device_));
    dense(init_[1], pooled_.data(), sized(part_, static_cast<std::size_t>(nv * w1), device_), nv);
    apply_norm(init_norm_[1], part_.data(), nv, true);
  });
  voxels_to_all(part_.data(), sized(x_[1], static_cast<std::size_t>(nodes(1) * w1), device_), w1);
  stage([&] {
    for (int i = 1; i + 1 < L; ++i) {
      const auto si = static_cast<std::size_t>(i);
      pool(i, x_[si].data(), nodes(i + 1), sized(pooled_, static_cast<std::size_t>(nodes(i + 1) * cfg_.width(i)), device_));
      float* next = sized(x_[si + 1], static_cast<std::size_t>(nodes(i + 1) * cfg_.width(i + 1)), device_);
      dense(init_[si + 1], pooled_.data(), next, nodes(i + 1));
      apply_norm(init_norm_[si + 1], next, nodes(i + 1), true);
    }
  });

  // 3. The blocks: every level's y, Q, K, V from the previous block (level 0: the points, their keys and
  // values then completed with the halo's), then the three attentions and the mix of the queries computed
  // here (level 0 the points, level 1 the owned voxels, the levels above all nodes).
  const float sib_denom = static_cast<float>(std::sqrt(static_cast<double>(dim)) * cfg_.k_siblings() + 1e-8);
  for (std::size_t bi = 0; bi < blocks_.size(); ++bi) {
    const std::vector<Level>& block = blocks_[bi];
    stage([&] {
      for (int i = 0; i < L; ++i) {
        const auto si = static_cast<std::size_t>(i);
        const index_t rows = i == 0 ? n0 : nodes(i), room = i == 0 ? ne : rows;
        const auto width = static_cast<std::size_t>(cfg_.width(i));
        const Level& l = block[si];
        dense(l.mlp1, x_[si].data(), sized(y_[si], static_cast<std::size_t>(rows) * width, device_), rows);
        apply_norm(l.mlp1_norm, y_[si].data(), rows, true);
        dense(l.q, y_[si].data(), sized(q_[si], static_cast<std::size_t>(rows) * width, device_), rows);
        dense(l.k, y_[si].data(), sized(k_[si], static_cast<std::size_t>(room) * width, device_), rows);
        dense(l.v, y_[si].data(), sized(v_[si], static_cast<std::size_t>(room) * width, device_), rows);
      }
    });
    to_halo(k_[0].data(), dim);
    to_halo(v_[0].data(), dim);
    stage([&] {
      for (int i = 0; i < L; ++i) {
        const auto si = static_cast<std::size_t>(i);
        const int w = cfg_.width(i);
        const Level& l = block[si];
        const index_t queries = i == 0 ? n0 : i == 1 ? nv : nodes(i);
        const auto rows = static_cast<std::size_t>(queries) * static_cast<std::size_t>(w);
        const float* q = q_[si].data();
        const float* qpos = pos_[si].data();
        if (i == 1) {  // the owned voxels' queries
          surrogate::device::copy_rows(q_[1].data(), w, voxels_.data(), sized(q1_, rows, device_), w, nullptr, nv, w, st);
          q = q1_.data();
          qpos = query_pos1_.data();
        }
        if (i + 1 < L) {
          dense(l.shrink_k, k_[si + 1].data(), sized(kw_, static_cast<std::size_t>(nodes(i + 1) * w), device_), nodes(i + 1));
          dense(l.shrink_v, v_[si + 1].data(), sized(vw_, static_cast<std::size_t>(nodes(i + 1) * w), device_), nodes(i + 1));
          attend(l.parents, w, q, queries, kw_.data(), vw_.data(), qpos, pos_[si + 1].data(), parents_[si], 0.0f,
                 sized(att_p_, rows, device_));
          attend(l.siblings, w, q, queries, k_[si].data(), v_[si].data(), qpos, pos_[si].data(), siblings_[si], sib_denom,
                 sized(att_s_, rows, device_));
        }
        if (i > 0) {
          const index_t keys = i == 1 ? n0 : nodes(i - 1);
          dense(l.expand_k, k_[si - 1].data(), sized(kw_, static_cast<std::size_t>(keys * w), device_), keys);
          dense(l.expand_v, v_[si - 1].data(), sized(vw_, static_cast<std::size_t>(keys * w), device_), keys);
          attend(l.children, w, q, queries, kw_.data(), vw_.data(), qpos, pos_[si - 1].data(), children_[si], 0.0f,
                 sized(att_c_, rows, device_));
        }
        float* out = i == 1 ? sized(part_, rows, device_) : x_[si].data();
        cu::TreeMixArgs a;
        a.a = i + 1 < L ? att_p_.data() : nullptr;
        a.b = i > 0 ? att_c_.data() : nullptr;
        a.s = i + 1 < L ? att_s_.data() : nullptr;
        a.ld = w;
        a.rows = queries;
        a.width = w;
        for (int t = 0; t < 3; ++t) a.w[t] = m.blocks[bi].mix[t];
        a.out = out;
        a.ldo = w;
        cu::tree_mix(a, st);
        apply_norm(l.out_norm, out, queries, true);
      }
    });
    voxels_to_all(part_.data(), x_[1].data(), w1);
  }

  // 4. The heads. Segmentation on the device: [x ; class vector of the point's sample] -> Linear ->
  // LayerNorm -> ReLU -> Linear. Classification on the host from the level its head reads.
  std::vector<float> result;
  if (seg) {
    stage([&] {
      const int zw = dim + cfg_.n_class;
      float* z = sized(z_, static_cast<std::size_t>(n0 * zw), device_);
      surrogate::device::copy_rows(x0, dim, nullptr, z, zw, nullptr, n0, dim, st);
      if (cfg_.n_class > 0) {
        std::vector<std::int64_t> batch;
        for (const index_t r : s.points) batch.push_back(h.level_batch[0][static_cast<std::size_t>(r)]);
        upload(batch_, std::span<const std::int64_t>(batch), device_, st);
        upload(classes_, std::span<const float>(sample_features, static_cast<std::size_t>(h.samples() * cfg_.n_class)), device_, st);
        surrogate::device::copy_rows(classes_.data(), cfg_.n_class, batch_.data(), z + dim, zw, nullptr, n0, cfg_.n_class, st);
      }
      float* u = sized(u_, static_cast<std::size_t>(n0 * head0_.out), device_);
      dense(head0_, z, u, n0);
      cu::TreeLayerNormArgs ln;
      ln.x = u;
      ln.ld = head0_.out;
      ln.rows = n0;
      ln.dim = head0_.out;
      ln.weight = weights_.data() + ln_w_;
      ln.bias = weights_.data() + ln_b_;
      cu::tree_layer_norm_relu(ln, st);
      result.resize(static_cast<std::size_t>(n0 * cfg_.n_part));
      dense(head3_, u, sized(out_, result.size(), device_), n0);
      if (n0 > 0) cu::copy_to_host(result.data(), out_.data(), result.size() * sizeof(float), st);
      cu::synchronize(st);
    });
    return result;
  }
  const int level = m.head_level();
  const int cols = cfg_.width(level);
  std::vector<double> terms, all;
  stage([&] {
    Rows xs(level == 0 ? n0 : nodes(level), cols);
    if (xs.rows > 0)
      cu::copy_to_host(xs.v.data(), x_[static_cast<std::size_t>(level)].data(), xs.v.size() * sizeof(float), st);
    cu::synchronize(st);
    terms = m.mean_terms(s, xs, level);
  });
  if (level == 0 && s.split) {
    all.resize(static_cast<std::size_t>(nodes(1)) * static_cast<std::size_t>(cols));
    s.voxels_to_all.forward(terms.data(), cols, all.data());
  } else {
    all = std::move(terms);
  }
  stage([&] { result = m.classify(m.sample_means(h, all, level, cols)).values(); });
  return result;
}

void CudaForward::pool(int level, const float* x, index_t parents, float* out) {
  const int w = cfg_.width(level);
  cu::TreePoolArgs a;
  a.x = x;
  a.ldx = w;
  a.first = pool_[static_cast<std::size_t>(level)].first.data();
  a.rows = pool_[static_cast<std::size_t>(level)].keys.data();
  a.parents = parents;
  a.width = w;
  a.out = out;
  a.ldo = w;
  cu::tree_pool(a, stream_.get());
}

}  // namespace

std::unique_ptr<DeviceForward> make_cuda_forward(const Network& net, int device) {
  return std::make_unique<CudaForward>(net, device);
}

}  // namespace surrogate::sequoia::gpu
