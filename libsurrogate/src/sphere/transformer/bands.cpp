// SphericalTransformer::plan_bands: this rank's rows of every stage of a forward in latitude bands and
// the exchanges between them (bands.hpp), built once per partition and input layout.
// share/docs/sphere.md, "Multi-rank mode".
#include "bands.hpp"

#include <algorithm>
#include <string>
#include <variant>

#include "internals.hpp"
#include "surrogate/error.hpp"

namespace surrogate::sphere {

TransformerBands::TransformerBands(std::unique_ptr<Exchanges> exchanges) : exchanges_(std::move(exchanges)) {}
TransformerBands::~TransformerBands() = default;
TransformerBands::TransformerBands(TransformerBands&&) noexcept = default;
TransformerBands& TransformerBands::operator=(TransformerBands&&) noexcept = default;
int TransformerBands::batch() const { return exchanges_->batch; }
const BandPartition& TransformerBands::image_bands() const { return exchanges_->image; }
const BandPartition& TransformerBands::internal_bands() const { return exchanges_->internal; }
void TransformerBands::rebind(const Comm& comm) {
  exchanges_->for_each([&](ExchangePlan& plan) { plan.rebind(comm); });
}
void TransformerBands::count_into(Traffic* sink) {
  exchanges_->for_each([&](ExchangePlan& plan) { plan.count_into(sink); });
}

std::vector<int> order_split(int lmax, int mmax, int ranks) {
  std::vector<std::int64_t> done(static_cast<std::size_t>(mmax) + 1, 0);
  for (int m = 0; m < mmax; ++m) done[static_cast<std::size_t>(m) + 1] = done[static_cast<std::size_t>(m)] + std::max(lmax - m, 1);
  std::vector<int> first{0};
  int m = 0;
  for (int r = 1; r < ranks; ++r) {
    const std::int64_t target = done.back() * r / ranks;
    while (m < mmax && done[static_cast<std::size_t>(m)] < target) ++m;
    first.push_back(m);
  }
  first.push_back(mmax);
  return first;
}

namespace {

/// The SHT decoder's exchanges (bands.hpp): Fourier rows to the order owners, coefficients back to every
/// rank with decoder rows, in the CPU's and in the device kernels' layout.
void plan_sht(const Comm& comm, const RealSHT& sht, int h, TransformerBands::Exchanges& x) {
  const std::int64_t B = x.batch, L = sht.lmax(), M = sht.mmax();
  const std::vector<int> orders = order_split(static_cast<int>(L), static_cast<int>(M), comm.size());
  x.m0 = orders[static_cast<std::size_t>(comm.rank())];
  x.m1 = orders[static_cast<std::size_t>(comm.rank()) + 1];
  const int i0 = x.i0, i1 = x.i1, m0 = x.m0, m1 = x.m1;
  std::vector<RowRange> held, wanted;
  std::vector<std::int64_t> first;
  for (std::int64_t b = 0; b < B && i0 < i1; ++b) {  // Fourier row of (b, lat, m): (b*h + lat)*M + m
    held.push_back({(b * h + i0) * M, (b * h + i1) * M});
    first.push_back(b * (i1 - i0) * M);
  }
  for (std::int64_t b = 0; b < B && m0 < m1; ++b)
    for (std::int64_t k = 0; k < h; ++k) wanted.push_back({(b * h + k) * M + m0, (b * h + k) * M + m1});
  x.sht_orders = ExchangePlan::from_ranges(comm, B * (i1 - i0) * M, held, first, wanted);

  const bool needed = x.decoder_rows.first < x.decoder_rows.second;  // a rank without image rows needs none
  held.clear();
  first.clear();
  for (std::int64_t b = 0; b < B && m0 < m1; ++b) {  // [b][m][l]: row b*M + m of L*2C floats
    held.push_back({b * M + m0, b * M + m1});
    first.push_back(b * (m1 - m0));
  }
  x.sht_coefficients = ExchangePlan::from_ranges(comm, B * (m1 - m0), held, first,
                                                 needed ? band_ranges(B, M, 1, 0, static_cast<int>(M)) : std::vector<RowRange>{});
  held.clear();
  first.clear();
  for (std::int64_t bl = 0; bl < B * L && m0 < m1; ++bl) {  // [b][l][m]: row (b*L + l)*M + m of 2C floats
    held.push_back({bl * M + m0, bl * M + m1});
    first.push_back(bl * (m1 - m0));
  }
  const RowRange all{0, B * L * M};
  x.sht_coefficients_device = ExchangePlan::from_ranges(comm, B * L * (m1 - m0), held, first,
                                                        std::span<const RowRange>(&all, needed ? 1 : 0));
}

}  // namespace

TransformerBands SphericalTransformer::plan_bands(const Comm& comm, int batch, const BandPartition& image_bands,
                                                  std::span<const RowRange> held,
                                                  std::span<const std::int64_t> held_first_row,
                                                  std::int64_t input_rows) const {
  const program::Layers<SphereHostOps>& v = TransformerInternals::layers(*this);
  const TransformerConfig& c = config();
  if (batch < 1) throw Error(ErrorCode::invalid_argument, "SphericalTransformer::plan_bands: batch must be positive");
  if (image_bands.nlat() != c.nlat || static_cast<int>(image_bands.first.size()) != comm.size() + 1)
    throw Error(ErrorCode::invalid_argument, "SphericalTransformer::plan_bands: the image bands must cover the " +
                                                 std::to_string(c.nlat) + " latitudes with one band per rank of " +
                                                 comm.name());
  auto x = std::make_unique<TransformerBands::Exchanges>();
  x->batch = batch;
  x->image = image_bands;
  x->internal = internal_bands(image_bands);
  const int me = comm.rank(), h = v.h, w = v.w;
  x->i0 = x->internal.begin(me);
  x->i1 = x->internal.end(me);
  x->g0 = image_bands.begin(me);
  x->g1 = image_bands.end(me);
  const std::int64_t B = batch, P_img = static_cast<std::int64_t>(c.nlat) * c.nlon, P = static_cast<std::int64_t>(h) * w;

  // Encoder: the image rows within its cutoff of the internal band, from the caller's pieces.
  x->encoder_rows = v.encoder->input_rows(x->i0, x->i1);
  x->encoder_input = ExchangePlan::from_ranges(comm, input_rows, held, held_first_row,
                                               band_ranges(B, P_img, c.nlon, x->encoder_rows.first, x->encoder_rows.second));
  // Attention (every block has the same operator): every row, or the neighbourhood halo.
  if (!v.blocks.empty()) {
    const auto& attention = v.blocks.front().attention->op;
    if (std::holds_alternative<AttentionS2>(attention)) {
      x->kv_rows = {0, x->i0 < x->i1 ? h : 0};
      x->key_value = gather_bands(comm, x->internal, B, w);
    } else {
      x->kv_rows = std::get<NeighborhoodAttentionS2>(attention).input_rows(x->i0, x->i1);
      x->key_value = band_exchange(comm, B, P, w, x->i0, x->i1, band_ranges(B, P, w, x->kv_rows.first, x->kv_rows.second));
    }
    if (c.normalization_layer == BlockNorm::instance_norm) x->row_sums = gather_bands(comm, x->internal, B, 1);
  }
  // Decoder: the image rows [g0, g1) read the upsampled rows decoder_rows.
  x->decoder_rows = v.decoder->input_rows(x->g0, x->g1);
  if (v.sht) {
    plan_sht(comm, v.sht->analysis, h, *x);
  } else {
    x->resample_rows = v.resample->input_rows(x->decoder_rows.first, x->decoder_rows.second);
    x->resample_input = band_exchange(comm, B, P, w, x->i0, x->i1,
                                      band_ranges(B, P, w, x->resample_rows.first, x->resample_rows.second));
  }
  if (c.residual_prediction)
    x->residual_input =
        ExchangePlan::from_ranges(comm, input_rows, held, held_first_row, band_ranges(B, P_img, c.nlon, x->g0, x->g1));
  return TransformerBands(std::move(x));
}

}  // namespace surrogate::sphere
