// FLARE's forward pass on the CPU (the network of FLARE.py's FLAREModel, its weights packed for the CPU
// kernels), distributed over the ranks of a Comm. share/docs/model-format.md §4.1 (semantics),
// share/docs/reproducibility.md (the two encode merges).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "../layers.hpp"
#include "config.hpp"
#include "plan.hpp"

namespace surrogate::flare {

class Network {
 public:
  /// Packs the weights of `file` (already checked against cfg.expected_shapes()).
  Network(const ModelFile& file, const Config& cfg);

  /// The forward on normalised inputs in the plan's working order (rows grouped by sample), outputs in
  /// the same order. Collective over comm; errors agreed. The workspace is kept for the next call.
  void forward(const Comm& comm, const Plan& plan, const float* in, index_t ld_in, float* out, index_t ld_out,
               const RunOptions& options);

  /// The layers of one block; the model's only copy of its weights (a device forward uploads from them).
  struct Block {
    NormLayer norm1, norm2;
    ResidualMlp k_proj, v_proj, ffn;
    kernels::PackedLinear out_proj;
    std::optional<NormLayer> k_norm;
    AlignedBuffer<float> q;  // [H][M][E]: latent_queries()
  };
  const ResidualMlp& in_proj() const { return in_proj_; }
  const ResidualMlp& out_mlp() const { return out_mlp_; }
  const std::optional<NormLayer>& out_norm() const { return out_norm_; }
  const std::vector<Block>& blocks() const { return blocks_; }

 private:
  /// One thread's scratch and encode partials per (local segment, head, latent).
  struct ThreadWork {
    AlignedBuffer<float> normed, scratch_a, scratch_b, values, decoded;
    // default mode: partials relative to 2^ref_exp
    AlignedBuffer<std::int32_t> ref_exp;  // [S][H][M]
    AlignedBuffer<double> sum;            // [S][H][M]
    AlignedBuffer<double> weighted;       // [S][H][M][E]
    // reproducible mode
    AlignedBuffer<float> logit_max;     // [S][H][M]
    AlignedBuffer<float> value_max;     // [S][H]
    AlignedBuffer<std::int64_t> exact;  // [S][H][M][E+1][2]
    AlignedBuffer<std::int64_t> exact_bad;  // [S][H][M]: terms that did not fit (non-finite)
  };

  // program.hpp's Ops on one tile, and its Exec over the plan's tiles (network.cpp)
  class TileOps;
  class Exec;

  void prepare(const Plan& plan, int threads, bool reproducible);
  static void reset_encode_partials(ThreadWork& w, bool reproducible);
  void encode_exact(const CpuKernels& k, const Plan& plan, int b, const Tile& tile, ThreadWork& w);
  // the encode of a block merged over the threads and the ranks (collective)
  void merge_encode(const Comm& comm, const Plan& plan);
  void merge_encode_exact(const Comm& comm, const Plan& plan, const CpuKernels& k, int b);

  int num_blocks_, C_, H_, M_, E_;
  index_t ld_c_, ld_scratch_;
  ResidualMlp in_proj_, out_mlp_;
  std::optional<NormLayer> out_norm_;
  std::vector<Block> blocks_;

  // workspace, reused between calls
  int threads_ = 1;  // OpenMP threads of the current forward
  std::vector<ThreadWork> work_;
  AlignedBuffer<float> x_, keys_, values_;
  AlignedBuffer<float> latents_;   // Z: [S][H][M][E]
  std::vector<float> max_buffer_;  // reproducible: [B][H][M] logit maxima, then [B][H] value maxima
  std::size_t value_max_count_ = 0;
  std::vector<double> sum_buffer_;
  std::vector<std::int32_t> exp_buffer_;
  std::vector<std::int64_t> exact_buffer_;  // [B][H][M][E+1][2], then [B][H][M] counts of bad terms
};

}  // namespace surrogate::flare
