// torch-harmonics' SphericalTransformer (examples/models/s2transformer.py, releases 0.9.1 - 0.9.3
// semantics; eval mode) on the CPU: DISCO encoder to the internal grid, position embedding, attention
// blocks (global AttentionS2 or NeighborhoodAttentionS2, instance/layer norm, 1x1-convolution MLP),
// ResampleS2 (or, with upsample_sht, RealSHT + InverseRealSHT) back to the image grid, DISCO decoder,
// optional residual prediction. Semantics, model-file
// attributes and status: share/docs/sphere.md ("SphericalTransformer"); specification:
// docs/reference-models.md §5.5 - §5.8.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/sphere/bands.hpp"
#include "surrogate/sphere/quadrature.hpp"

namespace surrogate::sphere {

struct TransformerInternals;

enum class BlockNorm { none, instance_norm, layer_norm };
enum class MlpActivation { gelu, relu, identity };
enum class PositionEmbedding { none, sequence, spectral, learnable_lat, learnable_latlon };

/// The constructor arguments of SphericalTransformer (the /config attributes of a model file of
/// architecture "sphere_transformer"; share/docs/model-format.md §4.3).
struct TransformerConfig {
  int nlat = 0, nlon = 0;  // img_size
  Grid grid = Grid::equiangular;
  Grid grid_internal = Grid::legendre_gauss;
  int scale_factor = 3;
  int in_chans = 3, out_chans = 3;
  int embed_dim = 256;
  int num_layers = 4;
  MlpActivation activation = MlpActivation::gelu;
  std::vector<int> encoder_kernel_shape{3, 3};
  std::string filter_basis_type = "morlet";
  std::string basis_norm_mode = "nodal";
  int num_heads = 1;
  bool use_mlp = true;
  double mlp_ratio = 2.0;
  double drop_rate = 0.0;  // no effect in eval; > 0 moves the MLP's second convolution to mlp.fwd.3
  BlockNorm normalization_layer = BlockNorm::none;
  bool residual_prediction = false;
  PositionEmbedding pos_embed = PositionEmbedding::spectral;
  bool upsample_sht = false;  // decoder upsampling: RealSHT (internal grid) + InverseRealSHT (image grid)
  bool neighborhood = true;  // attention_mode "neighborhood" (true) or "global"
  bool bias = false;
  double theta_cutoff = 0.0;  // neighbourhood attention; <= 0: (7 / sqrt(pi)) pi / (h - 1)
  std::string torch_harmonics_version;

  int internal_nlat() const { return (nlat - 1) / scale_factor + 1; }
  int internal_nlon() const { return nlon / scale_factor; }
  int mlp_hidden() const { return static_cast<int>(embed_dim * mlp_ratio); }
  /// The DISCO cutoff of the encoder (uses nlat) and decoder (uses internal_nlat()), as the model passes it.
  double disco_cutoff(int nlat_for_cutoff) const;
  double attention_cutoff() const;

  /// From /config attributes (optional ones take the 0.9.3 constructor defaults). Throws Error(format)
  /// naming the attribute, Error(unsupported) for options this library does not run (releases before
  /// 0.9.1).
  static TransformerConfig from_attributes(const AttributeMap& attributes);
  /// Throws Error(format) naming the first inconsistent field.
  void validate() const;
};

/// The state_dict keys and shapes the configuration implies.
ExpectedShapes expected_shapes(const TransformerConfig& config);

/// What a forward in latitude bands moves between the ranks, built once (SphericalTransformer::plan_bands,
/// collective) for a batch, a partition and the input pieces each rank holds, and used by every
/// forward_bands on them, on the CPU and on a device: the encoder's input rows, the key/value rows of the
/// attention, the instance norm's per-row sums, the decoder's resampling or SHT rows, the residual input
/// (ExchangePlans; share/docs/sphere.md, "Multi-rank mode"). Keeps a pointer to the communicator it was
/// built with (rebind: another communicator over the same ranks).
class TransformerBands {
 public:
  struct Exchanges;  // the bands and the exchange plans (libsurrogate/src/sphere/transformer/bands.hpp)
  explicit TransformerBands(std::unique_ptr<Exchanges> exchanges);
  ~TransformerBands();
  TransformerBands(TransformerBands&&) noexcept;
  TransformerBands& operator=(TransformerBands&&) noexcept;

  int batch() const;
  const BandPartition& image_bands() const;
  const BandPartition& internal_bands() const;
  /// Applies every exchange through `comm` (the same ranks) from now on.
  void rebind(const Comm& comm);
  /// Adds the bytes of every exchange to `sink` (e.g. Plan::traffic()), which must outlive the moves.
  void count_into(Traffic* sink);
  const Exchanges& exchanges() const { return *exchanges_; }

 private:
  std::unique_ptr<Exchanges> exchanges_;
};

class SphericalTransformer {
 public:
  /// Reads the configuration and checks every weight; DISCO filter tables from the file's /tables
  /// (encoder.psi_idx / encoder.psi_vals, decoder.*) take precedence over the computed ones.
  explicit SphericalTransformer(const ModelFile& file);
  ~SphericalTransformer();
  SphericalTransformer(SphericalTransformer&&) noexcept;
  SphericalTransformer& operator=(SphericalTransformer&&) noexcept;

  const TransformerConfig& config() const;
  std::int64_t parameter_count() const;

  /// One forward for `batch` samples on the whole grid. Channels last: in[(b*P + p)*in_chans + c],
  /// p = lat*nlon + lon (latitude 0 = north), out likewise with out_chans. OpenMP inside.
  void forward(int batch, const float* in, float* out) const;

  /// Collective. The exchanges of forward_bands (TransformerBands) for `batch` samples: rank r computes the
  /// image-grid rows [image_bands.begin(r), image_bands.end(r)) and the internal-grid rows
  /// internal_bands(image_bands) of every sample. This rank holds the input rows `held` (global rows
  /// b*nlat*nlon + p; any pieces, disjoint over the ranks, covering the batch), range i at row
  /// held_first_row[i] of the `input_rows` rows it passes to forward_bands.
  TransformerBands plan_bands(const Comm& comm, int batch, const BandPartition& image_bands,
                              std::span<const RowRange> held, std::span<const std::int64_t> held_first_row,
                              std::int64_t input_rows) const;
  /// Collective over the ranks of `bands`. The forward distributed in latitude bands (share/docs/sphere.md,
  /// "Multi-rank mode"): `input` holds this rank's input rows (in_chans floats at row stride ld_input, as
  /// planned); out_band receives this rank's image rows of every sample (sample-major, row-major,
  /// out_chans floats each). Halos move through the plan's exchanges; the instance-norm statistics are
  /// summed per latitude row in a fixed order. forward() is this with one rank, so every value is bitwise
  /// the same for any number of ranks and any partition.
  void forward_bands(const TransformerBands& bands, const float* input, std::int64_t ld_input,
                     float* out_band) const;
  /// The forwards' scratch (the residual stream, the encoder's, attention's and upsampling's rows; the
  /// attention blocks' shared workspace) is kept between forwards, one set per concurrent forward, and
  /// freed with the model. release_workspace() frees the sets no forward is using; workspace_bytes() is
  /// what they hold (share/docs/sphere.md, "Forward workspaces").
  void release_workspace() const noexcept;
  std::size_t workspace_bytes() const;
  /// The internal-grid rows of each rank for the given image-grid bands (matching_bands by colatitude).
  BandPartition internal_bands(const BandPartition& image_bands) const;

 private:
  friend struct TransformerInternals;  // the device forward's read access (libsurrogate internal)
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace surrogate::sphere
