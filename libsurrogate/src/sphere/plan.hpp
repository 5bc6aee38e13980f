// The spherical family's Plan, built once per point set by Model::plan (collective) and reused by every
// predict: the latitude bands the ranks compute from the solver's pieces, and every exchange of a forward
// as ExchangePlans (the output band back to the pieces; the single layers' query and key/value rows; the
// SphericalTransformer's TransformerBands). share/docs/sphere.md, "Multi-rank mode".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../serial.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/model.hpp"
#include "surrogate/sphere/bands.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace surrogate::sphere {

/// This rank's pieces of the solver's field (global rows b*points + p; each sample's points concatenated
/// over the ranks in rank order) and the latitude bands the ranks compute.
struct SolverPieces {
  std::vector<RowRange> held;               // this rank's input rows, one range per sample it holds
  std::vector<std::int64_t> working_begin;  // the first working row (layout order) of each range
  BandPartition bands;                      // image-grid rows per rank
};

/// Collective. Throws Error(input) on every rank when a sample does not have exactly nlat*nlon points.
///
/// Partition rule: with one sample, rank r computes the rows whose first point (longitude 0) it holds
/// - a solver that already partitions in latitude bands keeps its own band and exchanges only halos -
/// unless that puts more than twice the balanced share ceil(nlat/ranks) on some rank (e.g. everything
/// on one rank); then, and for batches of several samples, the rows are split evenly in rank order.
SolverPieces solver_pieces(const Comm& comm, const SampleLayout& layout, int nlat, int nlon, const std::string& what);

/// The inputs of a single layer (s2_attention, s2_neighborhood_attention) in latitude bands: the solver's
/// pieces -> this rank's query rows (its band of every sample) and key/value rows (every row for global
/// attention, the neighbourhood halo otherwise), one exchange.
struct LayerBands {
  surrogate::detail::Serial serial;        // a device forward's graph key
  int lat_begin = 0, lat_end = 0;          // the band: the query and output latitudes
  int kv_begin = 0, kv_end = 0;            // the key/value latitudes
  std::int64_t query_row = 0, kv_row = 0;  // where the queries and the key/values start in the target rows
  ExchangePlan inputs;
};

class SpherePlan final : public Plan {
 public:
  /// Collective: the exchange of the output band (image rows [band_begin, band_end) of every sample) back
  /// to the rows of `pieces` (the working order).
  SpherePlan(Plan::Basis basis, const Comm& comm, SolverPieces pieces, int nlon);

  const SolverPieces& pieces() const { return pieces_; }
  int band_begin() const { return band_begin_; }
  int band_end() const { return band_end_; }
  /// This rank's output band (rows of any width, sample-major) -> its pieces' rows in the working order.
  const ExchangePlan& outputs() const { return outputs_; }

  /// Collective. The single layer's inputs for the key/value latitudes `kv_rows` (global: every row).
  void plan_layer(const Comm& comm, int nlon, std::pair<int, int> kv_rows, bool global);
  /// The transformer's exchanges (SphericalTransformer::plan_bands on the pieces), counted in traffic().
  void set_transformer(TransformerBands bands);
  /// Error(internal) when the plan has none (a plan of another kind of spherical model).
  const LayerBands& layer() const;
  const TransformerBands& transformer() const;

  void rebind(const Comm& comm) override;

 private:
  SolverPieces pieces_;
  int band_begin_ = 0, band_end_ = 0;
  ExchangePlan outputs_;
  std::optional<LayerBands> layer_;
  std::optional<TransformerBands> transformer_;
};

}  // namespace surrogate::sphere
