// The spherical family's Plan (plan.hpp): the bands of the solver's pieces and the exchanges of a forward.
#include "plan.hpp"

#include <algorithm>

#include "surrogate/error.hpp"

namespace surrogate::sphere {

SolverPieces solver_pieces(const Comm& comm, const SampleLayout& layout, int nlat, int nlon, const std::string& what) {
  const index_t B = layout.num_samples(), points = static_cast<index_t>(nlat) * nlon;
  for (index_t s = 0; s < B; ++s)
    if (layout.sample_sizes()[static_cast<std::size_t>(s)] != points)
      throw Error(ErrorCode::input, what + ": sample " + std::to_string(s) + " has " +
                                        std::to_string(layout.sample_sizes()[static_cast<std::size_t>(s)]) +
                                        " points, the model's grid has " + std::to_string(points) +
                                        " (nlat*nlon; rows in row-major latitude-longitude order, concatenated over "
                                        "the ranks in rank order)");
  std::vector<index_t> local_count(static_cast<std::size_t>(B), 0);
  for (const auto& seg : layout.segments()) local_count[static_cast<std::size_t>(seg.sample)] = seg.end - seg.begin;
  const int P = comm.size(), me = comm.rank();
  std::vector<index_t> counts(static_cast<std::size_t>(B * P));  // counts[r*B + s]
  comm.allgather(local_count.data(), sizeof(index_t) * static_cast<std::size_t>(B), counts.data());
  SolverPieces pieces;
  for (const auto& seg : layout.segments()) {
    index_t first = 0;  // the sample's points on the lower ranks
    for (int r = 0; r < me; ++r) first += counts[static_cast<std::size_t>(r * B + seg.sample)];
    const index_t g = seg.sample * points + first;
    pieces.held.push_back({g, g + seg.end - seg.begin});
    pieces.working_begin.push_back(seg.begin);
  }
  pieces.bands = balanced_bands(nlat, P);
  if (B == 1) {
    std::vector<index_t> first_point(static_cast<std::size_t>(P) + 1, 0);
    for (int r = 0; r < P; ++r)
      first_point[static_cast<std::size_t>(r) + 1] = first_point[static_cast<std::size_t>(r)] + counts[static_cast<std::size_t>(r)];
    BandPartition own = bands_from_points(nlat, nlon, first_point);
    int widest = 0;
    for (int r = 0; r < P; ++r) widest = std::max(widest, own.rows(r));
    if (widest <= 2 * ((nlat + P - 1) / P)) pieces.bands = std::move(own);
  }
  return pieces;
}

SpherePlan::SpherePlan(Plan::Basis basis, const Comm& comm, SolverPieces pieces, int nlon)
    : Plan(std::move(basis)), pieces_(std::move(pieces)) {
  const int me = comm.rank(), nlat = pieces_.bands.nlat();
  band_begin_ = pieces_.bands.begin(me);
  band_end_ = pieces_.bands.end(me);
  // The pieces' ranges, concatenated, are the working rows in order (the layout's segments).
  outputs_ = band_exchange(comm, layout().num_samples(), static_cast<index_t>(nlat) * nlon, nlon, band_begin_,
                           band_end_, pieces_.held);
  outputs_.count_into(&traffic());
}

void SpherePlan::plan_layer(const Comm& comm, int nlon, std::pair<int, int> kv_rows, bool global) {
  const index_t B = layout().num_samples(), n = layout().local_points();
  const int nlat = pieces_.bands.nlat();
  const index_t points = static_cast<index_t>(nlat) * nlon;
  LayerBands l;
  l.lat_begin = band_begin_;
  l.lat_end = band_end_;
  l.kv_begin = kv_rows.first;
  l.kv_end = kv_rows.second;
  bool every_band = true;
  for (int r = 0; r < comm.size(); ++r) every_band = every_band && pieces_.bands.rows(r) > 0;
  if (global && B == 1 && every_band) {
    // Every rank needs every row: the ranks' pieces in rank order are the sample in grid order.
    l.inputs = ExchangePlan::all_gather(comm, n);
    l.kv_begin = 0;
    l.kv_end = nlat;
    l.query_row = static_cast<index_t>(band_begin_) * nlon;
  } else {
    std::vector<RowRange> wanted = band_ranges(B, points, nlon, band_begin_, band_end_);
    for (const RowRange& r : band_ranges(B, points, nlon, kv_rows.first, kv_rows.second)) wanted.push_back(r);
    l.inputs = ExchangePlan::from_ranges(comm, n, pieces_.held, pieces_.working_begin, wanted);
    l.kv_row = B * (band_end_ - band_begin_) * nlon;
  }
  layer_ = std::move(l);
  layer_->inputs.count_into(&traffic());
}

void SpherePlan::set_transformer(TransformerBands bands) {
  transformer_ = std::move(bands);
  transformer_->count_into(&traffic());
}

const LayerBands& SpherePlan::layer() const {
  if (!layer_) throw Error(ErrorCode::internal, "sphere plan: no single-layer exchanges in this plan");
  return *layer_;
}

const TransformerBands& SpherePlan::transformer() const {
  if (!transformer_) throw Error(ErrorCode::internal, "sphere plan: no transformer exchanges in this plan");
  return *transformer_;
}

void SpherePlan::rebind(const Comm& comm) {
  outputs_.rebind(comm);
  if (layer_) layer_->inputs.rebind(comm);
  if (transformer_) transformer_->rebind(comm);
}

}  // namespace surrogate::sphere
