// The stages of the BSA forward (checks, embedding, the layers, the ShapeNet-Car wrapper), shared by the
// one-process forward (network.cpp) and the forward on a plan (network_distributed.cpp), so both run the
// same per-row, per-ball, per-block and per-query code. Every stage works on the rows it is given: the
// whole batch in tree order in one process, or one rank's slots of the distributed tree.
// share/docs/balltree.md, "Code layout".
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "../balltree/shapenet_wrapper.hpp"
#include "../layers.hpp"
#include "surrogate/bsa.hpp"

namespace surrogate::bsa {
class BsaHostOps;  // host_ops.hpp
}  // namespace surrogate::bsa

namespace surrogate::bsa::program {
template <class Ops>
struct Layers;  // program.hpp
}  // namespace surrogate::bsa::program

namespace surrogate::bsa::detail {

/// The rows a process runs, in tree order: `rows` slots, cut into segments that each lie inside samples
/// (every sample has n slots, nb = n / C compressed blocks).
struct RowLayout {
  struct Segment {
    index_t begin = 0;       // first local row
    int samples = 1;         // samples of `length` rows each (several only when they are whole)
    index_t length = 0;      // rows per sample in the segment
    index_t row0 = 0;        // in-sample index of the segment's first row (0 for whole samples)
    std::int64_t sample = 0;  // global index of the first sample
  };
  index_t rows = 0;
  index_t n = 0;             // padded slots per sample
  std::int64_t samples = 0;  // samples of the whole batch
  std::vector<Segment> segments;
  /// Segments that are only part of their sample (length < n): the samples whose other rows live on
  /// other processes.
  index_t partial_samples() const {
    index_t count = 0;
    for (const Segment& g : segments) count += g.length < n ? 1 : 0;
    return count;
  }
};

/// What the layers need beyond their rows: the rotated order of the odd layers and, distributed, the
/// compressed blocks of all ranks and the selected blocks of other ranks (sparse attention) or the whole
/// samples a rank holds part of (global attention). The calls are collective when
/// distributed (every rank makes the same calls with the same widths, in the same order).
class LayerExchanges {
 public:
  virtual ~LayerExchanges() = default;
  /// rows (tree order, `width` values each) -> the same rows in the rotated tree's order, and back.
  virtual void to_rotated(const float* rows, int width, float* rotated_rows) const = 0;
  virtual void from_rotated(const float* rotated_rows, int width, float* rows) const = 0;
  /// Whether the compressed blocks and the selected blocks live on other processes (then the two calls
  /// below are used; otherwise the local rows hold whole samples).
  virtual bool distributed() const = 0;
  /// all (samples * nb rows of `width`) = every process's local compressed blocks, in global order.
  virtual void gather_blocks(const float* local_blocks, index_t count, int width, float* all) const = 0;
  /// fetched (C rows per entry of `blocks`, `width` values each) = the token rows of the global blocks
  /// `blocks` (global block b = global slots [b*C, (b+1)*C)) from their owners' `local_rows`.
  virtual void fetch_blocks(std::span<const std::int64_t> blocks, const float* local_rows, int width,
                            float* fetched) const = 0;
  /// Global attention: fetched (n rows per entry, `width` values each) = every row of each sample that
  /// the local rows hold only part of (the segments of the layout with length < n, in segment order),
  /// in the sample's current order (tree order, or rotated order in the rotated layers: every process
  /// holds the same range of both), from their owners' `local_rows` (layout.rows rows).
  virtual void fetch_samples(const float* local_rows, int width, float* fetched) const = 0;
};

/// Friend of Network: the stages, implemented in network.cpp.
struct Stages {
  /// The network's layers for program.hpp on the CPU (valid while the network lives; a device forward
  /// converts them to its own).
  static const program::Layers<BsaHostOps>& program_layers(const Network& net);
  /// Row stride of the hidden rows: round_up(c_hidden, kPad).
  static index_t row_stride(const Network& net);
  /// Error(input) naming the first wrong size of the common padded sample size n (every sample the same
  /// n, a multiple of the ball size, C and G, at least S blocks); the same message on every rank.
  static void check_sample_size(const Network& net, index_t n);
  /// Error(input) for a NaN/Inf feature (rows of c_in values), naming first_point + its row.
  static void check_features(const Network& net, std::span<const float> features, index_t first_point);
  /// Error(input) for the arrays of a one-process forward (Network::forward and the CUDA forward): sizes,
  /// NaN/Inf features or coordinates, trees that do not belong to the batch (equal padded sample sizes,
  /// point indices, the rotation permutation when configured). Returns the common padded sample size n.
  static index_t check_inputs(const Network& net, const balltree::RotatedTrees& trees, std::span<const float> features,
                              std::span<const float> positions, const balltree::Batch& batch);
  /// The same without the features (the geometry of a device forward).
  static index_t check_geometry(const Network& net, const balltree::RotatedTrees& trees, std::span<const float> positions,
                                const balltree::Batch& batch);
  /// h (points rows, stride row_stride) = embed(features (points x c_in)).
  static void embed(const Network& net, std::span<const float> features, index_t points, float* h, int threads);
  /// The depth layers with the long residual on x (layout.rows rows in tree order, stride row_stride):
  /// program.hpp's stages on the CPU's exec; pos / pos_rot: the rows' positions in tree / rotated order
  /// (pos_rot unused without rotation).
  static void layers(const Network& net, float* x, const float* pos, const float* pos_rot, const RowLayout& layout,
                     const LayerExchanges& ex, int threads);
  /// The ShapeNet-Car wrapper: features [cos(p A^T), sin(p A^T)] of rows of positions, and the prediction
  /// head on rows of c_hidden values (one value per row).
  static std::vector<float> fourier(const Network& net, std::span<const float> positions, int threads);
  static std::vector<float> head(const Network& net, std::span<const float> y, int threads);
  /// The wrapper's layers (empty without the wrapper), for the device forward.
  static const balltree::wrapper::Layers<ops::HostOps>& wrapper_layers(const Network& net);
};

}  // namespace surrogate::bsa::detail
