// HEPT (LSH-based Efficient Point Transformer; Graph-COM/HEPT): the configuration of a model file, the
// geometry of a batch of graphs (region codes, padding) and the CPU network, in float or double, for tests
// and tools. Semantics: share/docs/hept.md; registered as architecture "hept" (libsurrogate/src/hept/).
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "surrogate/kernels/cpu.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/norm_layer.hpp"

namespace surrogate::hept {

/// Largest accepted block_size (bucket size): a bucket's attention is quadratic in it and a graph is padded
/// to whole buckets (the official configurations use 100).
inline constexpr int kMaxBlockSize = 4096;
/// The pileup task's particle-id embedding: pids_enc = Embedding(kPidClasses, kPidEmbedding).
inline constexpr int kPidClasses = 7, kPidEmbedding = 10;

/// The /config attributes of a HEPT model file (the official Transformer's constructor arguments).
struct Config {
  /// `example`: the official example/ code (padding by duplication, bit-packed region codes); `src`: the
  /// training code of src/ (one graph, zero padding with +inf keys, additive region shift, e2lsh.beta).
  enum class Layout { example, src };
  /// src's `task`: `tracking` (the embedding is the output) or `pileup` (the last input column is a
  /// particle-id class 0..6 looked up in `pids_enc`; out_proj to one channel and a sigmoid).
  enum class Task { tracking, pileup };
  Layout layout = Layout::example;
  Task task = Task::tracking;
  int in_dim = 0, coords_dim = 0, num_classes = 0;  // pileup: num_classes 1 (its out_proj)
  int block_size = 100, n_hashes = 3, num_heads = 8, h_dim = 24, n_layers = 4, num_w_per_dist = 10;
  int num_regions = 150;  // only drew `regions` at construction (stored); reported by describe()

  /// Width of the hashed vectors [q ; sqrt(2 w) * coords].
  int hash_dim() const { return h_dim + coords_dim; }
  int out_dim() const { return num_classes > 0 ? num_classes : h_dim / 2; }
  /// Width of the feature encoder's input: in_dim, or for pileup in_dim - 1 + kPidEmbedding.
  int encoder_in() const { return task == Task::pileup ? in_dim - 1 + kPidEmbedding : in_dim; }
  /// Reads and checks /config; every problem is an Error(format) naming the attribute.
  static Config from_attributes(const AttributeMap& config);
  ExpectedShapes expected_shapes() const;
  std::vector<std::pair<std::string, std::string>> describe() const;
};

/// The geometry of a batch of whole graphs that depends only on the coordinates (share/docs/hept.md,
/// "Regions and padding"): per hash table c and head h (row r = c * num_heads + h) the 1-based quantile
/// bins of eta and phi, the bit widths, the region codes, and the padded sequence. Computed in the
/// arithmetic of the run (T = float or double: the bin sizes are ceil(n * (1 / R)) in that precision).
struct Geometry {
  using RowsArray = std::vector<std::int64_t, kernels::BlockAllocator<std::int64_t>>;  // rows x points
  std::vector<std::int64_t> sizes, padded_sizes;     // per graph
  RowsArray region_eta, region_phi;                  // rows x N (input order; src: rows x N', pads last)
  std::vector<double> bin_eta, bin_phi;              // graphs x rows
  std::vector<std::int64_t> bits_eta, bits_code1;    // rows
  RowsArray codes;                                   // rows x N
  std::vector<std::int64_t> pad_sort_order;          // N: stable argsort of codes row 0 within each graph
  std::vector<std::int64_t> pad_seq;                 // N': input row of each padded row (src: -1 for zero pads)
  std::vector<std::uint8_t> unpad;                   // N': 1 for originals
  RowsArray padded_codes;                            // rows x N'
  std::int64_t points() const {
    std::int64_t n = 0;
    for (const std::int64_t s : sizes) n += s;
    return n;
  }
  std::int64_t padded_points() const { return static_cast<std::int64_t>(pad_seq.size()); }
};

/// Pileup: every one of `rows` input rows (stride ld) must hold a particle-id class in its last column
/// (in_dim - 1) that truncates to 0..kPidClasses-1; Error(input) naming the first row and value otherwise.
void check_particle_classes(const Config& cfg, const float* in, std::int64_t ld, std::int64_t rows);
/// The Error(input) of check_particle_classes for input row `row` holding `value` (the device's check).
[[noreturn]] void refuse_particle_class(const Config& cfg, float value, std::int64_t row);
/// The open interval the class column's values must lie in: (-1, kPidClasses).
inline constexpr float kPidClassLow = -1.0f, kPidClassHigh = static_cast<float>(kPidClasses);

/// The quantile bin size ceil(n * fl(1 / R)) of a graph of n points (padded, in the src layout) with R
/// regions, in arithmetic T; Error(weights) unless it is finite and at least 1.
template <class T>
std::int64_t quantile_bin(std::int64_t n, float regions);
/// The bits of a region index up to `max`: ceil(log2(max + 1)) as the official code evaluates it (log2 of
/// an int64 tensor is float32).
std::int64_t bit_width(std::int64_t max);

/// The first step of the geometry: quantile bins of the graphs `sizes` (consecutive rows of `coords`,
/// points x coords_dim), ranks by a stable sort (ties by index within the graph). Fills sizes,
/// region_eta, region_phi, bin_eta, bin_phi.
template <class T>
void quantile_bins(const Config& cfg, const std::vector<float>& regions, const float* coords,
                   const std::vector<std::int64_t>& sizes, Geometry& g);
/// The second step: bit widths over the batch (`reduce_max` takes the maxima over the ranks; empty: this
/// process holds the batch), codes with the graphs' batch numbers `graph_ids`, padding by duplication
/// (stable order). Every graph must hold at least block_size points (Error(input) otherwise).
void finish_geometry(const Config& cfg, const std::vector<std::int64_t>& graph_ids, Geometry& g,
                     const std::function<void(std::vector<std::int64_t>&)>& reduce_max = {});

/// What a forward can record for tests: per layer the sort permutations (rows x N', padded row at each
/// sorted position), the ranges Delta (rows), and layer 0's sort keys and attention output (N' x h_dim).
template <class T>
struct Trace {
  std::vector<std::vector<std::int64_t>> perm_q, perm_k;
  std::vector<std::vector<T>> delta;
  std::vector<T> keys_q0, keys_k0, attn_out0;
};

/// One hash table's bucket attention over rows that a graph spreads over several ranks (the plan's
/// SplitGraphs): the table's index, keys [h][rows] of the queries and the keys, q_hat and k_hat [h][rows][hash_dim], v
/// [h][rows][h_dim]; writes the numerators [h][rows][h_dim] and denominators [h][rows]. Collective.
template <class T>
using BucketStage = std::function<void(int table, const T* keys_q, const T* keys_k, const T* qh, const T* kh, const T* vh,
                                       T* num, T* den)>;

/// The CPU forward's work arrays (activations, LSH keys, sort permutations, bucket sums). A caller that
/// runs many forwards on one point set keeps them (the registered model: in its plan), so their pages are
/// taken once, not in every forward (share/docs/hept.md, "Memory"). Never shrunk while kept. Growing them
/// writes nothing: a fresh array's pages are first written by the forward's parallel loops.
template <class T>
struct ForwardWork {
  template <class U>
  using Array = std::vector<U, kernels::FirstTouchAllocator<U>>;
  Array<T> xp, cp, cat, xn, qh, kh, vh, pq, pk, num, y, tnum, tden;
  Array<T> eh, res, final_out;
  Array<T> tiles;  // the tile programs' work rows, per thread
  Array<std::int64_t> perm_q, perm_k;
  /// Bytes held (capacities).
  std::size_t bytes() const;
};

/// The weights of a HEPT network, one copy for both arithmetics: the dense layers' float weights (the
/// float kernels use them packed, the float64 ones widen them exactly) and the file's other tensors the
/// forward reads. Read and checked from the file once; Network<float> and Network<double> share them.
struct Weights {
  struct Layer {
    NormLayer norm1, norm2;
    kernels::PackedLinear wq, wk, wv, out_linear, ff0, ff2;
    std::vector<float> alpha;  // e2lsh.alpha: heads x hash_dim x n_hashes
    std::vector<float> rpe;    // w_rpe.weight, [h][d][r][k]: the source of the RBF scales
  };
  Weights(const ModelFile& file, const Config& cfg);
  std::vector<float> regions;  // n_hashes x 2 x heads
  std::vector<float> pids;     // pileup: pids_enc.weight, kPidClasses x kPidEmbedding; empty otherwise
  kernels::PackedLinear enc0, enc2, W, out_proj;  // out_proj: in() == 0 without it
  std::vector<Layer> layers;
  kernels::PackedLinear mlp[5];
  NormLayer mlp_norms[4];
};

/// The HEPT network in arithmetic T (float or double) on the CPU, for a batch of whole graphs on one
/// process (the registered model adds the ranks).
template <class T>
class Network {
 public:
  using Layer = Weights::Layer;
  Network(const ModelFile& file, const Config& cfg);
  /// The network in arithmetic T on the weights of `other`, shared rather than copied (the registered
  /// model's fp32 and fp64 forwards hold them once); the same bits as a network read from the file.
  template <class U>
  explicit Network(const Network<U>& other) : cfg_(other.cfg_), w_(other.w_), rbf_scale_(rbf_scales(cfg_, *w_)) {}
  /// x: points x in_dim, coords: points x coords_dim (input order, graphs consecutive); out: points x
  /// out_dim. `range` reduces the per-(table, head) minima and maxima over the ranks (identity when null);
  /// `buckets`, when given, replaces the per-graph sorts and bucket attention of each hash table; `work`,
  /// when given, holds the work arrays between calls (otherwise they are the call's own).
  void forward(const Geometry& g, const float* x, const float* coords, T* out, Trace<T>* trace = nullptr,
               const std::function<void(std::vector<T>&, std::vector<T>&)>* range = nullptr, int threads = 0,
               const BucketStage<T>* buckets = nullptr, ForwardWork<T>* work = nullptr) const;
  const std::vector<float>& regions() const { return w_->regions; }
  const Config& config() const { return cfg_; }
  /// One point's feature-encoder input (encoder_in() values) from its input row (in_dim values): the row,
  /// or for pileup its first in_dim - 1 values and the embedding of its class (the last value truncated
  /// toward zero, as torch's .long(); check_particle_classes() has checked it).
  template <class U>
  void encoder_input(const float* x, U* row) const {
    const bool pileup = cfg_.task == Config::Task::pileup;
    const int kept = pileup ? cfg_.in_dim - 1 : cfg_.in_dim;
    for (int c = 0; c < kept; ++c) row[c] = static_cast<U>(x[c]);
    if (!pileup) return;
    if (!(x[kept] > -1.0f && x[kept] < static_cast<float>(kPidClasses)))  // the model checks first, agreed
      check_particle_classes(cfg_, x, cfg_.in_dim, 1);
    const float* e = w_->pids.data() + static_cast<std::ptrdiff_t>(x[kept]) * kPidEmbedding;
    for (int c = 0; c < kPidEmbedding; ++c) row[kept + c] = static_cast<U>(e[c]);
  }
  /// The task's output activation, in place on `rows` rows of out_dim() values (pileup: the sigmoid).
  template <class U>
  void finish_outputs(U* out, std::int64_t rows) const {
    if (cfg_.task != Config::Task::pileup) return;
    for (std::int64_t i = 0; i < rows * cfg_.out_dim(); ++i) out[i] = U(1) / (U(1) + std::exp(-out[i]));
  }

  // The weights, read by the device forward (hept/cuda): encoder(0|1), the blocks, the head's W, MLP
  // layers 0..4 and norms 0..3, out_proj (in() == 0 without it).
  const kernels::PackedLinear& encoder(int i) const { return i == 0 ? w_->enc0 : w_->enc2; }
  const std::vector<Layer>& layers() const { return w_->layers; }
  const kernels::PackedLinear& head() const { return w_->W; }
  const kernels::PackedLinear& mlp(int j) const { return w_->mlp[j]; }
  const NormLayer& mlp_norm(int j) const { return w_->mlp_norms[j]; }
  const kernels::PackedLinear& out_proj() const { return w_->out_proj; }
  /// Pileup: pids_enc.weight (kPidClasses x kPidEmbedding); empty otherwise.
  const std::vector<float>& particle_embedding() const { return w_->pids; }
  /// Layer l's RBF scales sqrt(2 w'), heads x coords_dim, computed in T from w_rpe.weight.
  const std::vector<T>& rbf_scale(int l) const { return rbf_scale_[static_cast<std::size_t>(l)]; }
  /// Whether this network reads the same weights as `other` (one copy between them).
  template <class U>
  bool shares_weights_with(const Network<U>& other) const {
    return w_ != nullptr && w_ == other.w_;
  }

 private:
  template <class U>
  friend class Network;
  /// Every layer's RBF scales in T.
  static std::vector<std::vector<T>> rbf_scales(const Config& cfg, const Weights& w);

  Config cfg_;
  std::shared_ptr<const Weights> w_;
  std::vector<std::vector<T>> rbf_scale_;  // per layer: heads x coords_dim
};

}  // namespace surrogate::hept
